/*
 * model.h - a llama-family model as llama2.c splits it: the configuration
 * (the blueprint, read from GGUF metadata) and the weights (read-only views
 * into the GGUF mapping). Run state - activations and the KV cache - belongs
 * to the backend, not here, so one loaded model can serve several engines.
 *
 * Supported architectures: "llama" (Llama 2/3, TinyLlama, Mistral, SmolLM:
 * grouped-query attention, rope base, rms eps, tied or separate output) and
 * "qwen2" (adds q/k/v biases and uses NeoX-style rotary pairs). Every tensor
 * is checked for presence, type and exact shape at load; after model_load
 * succeeds the forward pass never meets a surprise.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "ops.h"

#define MODEL_MAX_LAYERS 512
#define MODEL_MAX_DIM (1 << 16)
#define MODEL_MAX_VOCAB (1 << 22)

typedef enum model_arch { MODEL_ARCH_LLAMA = 0, MODEL_ARCH_QWEN2 = 1 } model_arch;

typedef struct model_config {
    model_arch arch;
    int dim;                /* embedding width */
    int n_layers;
    int n_heads;            /* query heads */
    int n_kv_heads;         /* key/value heads (GQA when < n_heads) */
    int head_dim;           /* dim / n_heads */
    int ffn_dim;            /* hidden width of the SwiGLU feed-forward */
    int vocab;              /* rows of the embedding and output matrices */
    int ctx_len;            /* trained context length (positions) */
    float rope_base;        /* theta base of rotary embeddings */
    float rms_eps;
    int rope_neox;          /* 1: rotate (i, i + head_dim/2); 0: (2i, 2i+1) */
} model_config;

typedef struct model_layer {
    const float *attn_norm; /* (dim) */
    ops_mat wq;             /* (n_heads * head_dim, dim) */
    ops_mat wk;             /* (n_kv_heads * head_dim, dim) */
    ops_mat wv;             /* (n_kv_heads * head_dim, dim) */
    ops_mat wo;             /* (dim, n_heads * head_dim) */
    const float *bq;        /* (n_heads * head_dim) or NULL */
    const float *bk;        /* (n_kv_heads * head_dim) or NULL */
    const float *bv;        /* (n_kv_heads * head_dim) or NULL */
    const float *ffn_norm;  /* (dim) */
    ops_mat w_gate;         /* (ffn_dim, dim) */
    ops_mat w_up;           /* (ffn_dim, dim) */
    ops_mat w_down;         /* (dim, ffn_dim) */
} model_layer;

typedef struct model {
    model_config cfg;
    gguf_ctx *gguf;         /* owned; weights point into its mapping */
    ops_mat tok_embd;       /* (vocab, dim) */
    const float *out_norm;  /* (dim) */
    ops_mat output;         /* (vocab, dim); the embedding when tied */
    model_layer *layers;    /* (n_layers) */
    float *f32_owned;       /* norms and biases converted to f32 when stored otherwise */
    size_t f32_owned_bytes;
    uint64_t weight_bytes;  /* bytes of all matrices read per token (roofline) */
} model;

/* Load a model from a GGUF file. On failure *out is NULL and err names the
 * file and what is wrong with it. */
int model_load(const char *path, model **out, char *err, size_t errlen);
/* The same over an already opened GGUF; takes ownership of g (also on error). */
int model_from_gguf(gguf_ctx *g, model **out, char *err, size_t errlen);
void model_free(model *m);

/* Bytes of the model in memory now: the pages of its GGUF file resident in
 * the page cache (mincore over the whole mapping, metadata and vocabulary
 * included; the kernels read the file's layout, so this is the only copy
 * of the weights) and the norms converted to f32. At most the file's size
 * plus those norms; less while pages have not been read yet or after the
 * kernel dropped them. It walks every page of the file: not for a hot
 * path. */
uint64_t model_resident_bytes(const model *m);

/* Bytes one token of one sequence occupies in the KV cache at f32. */
size_t model_kv_bytes_per_token(const model_config *c);

#endif
