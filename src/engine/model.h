/*
 * model.h - a decoder-only transformer as llama2.c splits it: the
 * configuration (the blueprint, read from GGUF metadata) and the weights
 * (read-only views into the GGUF mapping). Run state - activations and the
 * KV cache - belongs to the backend, not here, so one loaded model can serve
 * several engines.
 *
 * Supported architectures (GGUF general.architecture), each as llama.cpp
 * names its tensors and keys:
 *   "llama"  Llama 2/3/3.1+, TinyLlama, Mistral, SmolLM: grouped-query
 *            attention, adjacent-pair rope with an optional rope_freqs
 *            tensor (Llama 3.1+ per-frequency divisors) and linear
 *            rope scaling (rope.scaling.type linear/factor).
 *   "qwen2"  adds q/k/v biases and NeoX-style rotary pairs.
 *   "qwen3"  qwen2 without biases, with per-head RMSNorm of q and k before
 *            rope, and a head size of its own (attention.key_length).
 *   "gemma3" embeddings scaled by sqrt(dim), RMSNorm before and after both
 *            attention and FFN, GELU-tanh gated FFN, q/k norms, attention
 *            scale as llama.cpp sets it, sliding-window layers (5 local,
 *            1 global) with their own rope base, linear scaling on the global
 *            layers, tied output. Its norm weights are used as stored: the
 *            converter already added Gemma's +1.
 *   "phi3"   fused attn_qkv (q, k, v rows stacked) and fused ffn_up (gate
 *            rows, then up rows), NeoX rope, partial rotary
 *            (rope.dimension_count). The 128k "longrope" variants
 *            (rope_factors_long/short) are refused at load; a sliding_window
 *            key is ignored, as llama.cpp ignores it for phi3.
 * Any arch may have head_dim != dim / n_heads (attention.key_length) and a
 * rotary width below head_dim. YaRN and longrope scaling are refused.
 * Every tensor is checked for presence, type and exact shape at load; after
 * model_load succeeds the forward pass never meets a surprise.
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

#define MODEL_MAX_HEAD_DIM 1024

typedef enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_QWEN3 = 2,
    MODEL_ARCH_GEMMA3 = 3,
    MODEL_ARCH_PHI3 = 4,
} model_arch;

/* The gate's nonlinearity of the gated FFN: act(x Wg^T) * (x Wu^T). */
typedef enum model_ffn_act {
    MODEL_FFN_SILU = 0,     /* SwiGLU (llama, qwen, phi3) */
    MODEL_FFN_GELU_TANH = 1 /* GeGLU with the tanh approximation (gemma3) */
} model_ffn_act;

/* Rope settings: index 0 for global layers (every layer of most archs),
 * 1 for gemma3's sliding-window layers. */
#define MODEL_ROPE_GLOBAL 0
#define MODEL_ROPE_LOCAL 1
#define MODEL_ROPE_N 2

typedef struct model_rope {
    float base;             /* theta base */
    float scale;            /* positions multiplied by this: 1 / rope.scaling.factor
                             * (linear scaling), 1 for none */
} model_rope;

typedef struct model_config {
    model_arch arch;
    int dim;                /* embedding width */
    int n_layers;
    int n_heads;            /* query heads */
    int n_kv_heads;         /* key/value heads (GQA when < n_heads) */
    int head_dim;           /* attention.key_length, else dim / n_heads */
    int n_rot;              /* rotated elements of a head: even, <= head_dim */
    int ffn_dim;            /* hidden width of the gated feed-forward */
    int vocab;              /* rows of the embedding and output matrices */
    int ctx_len;            /* trained context length (positions) */
    model_rope rope[MODEL_ROPE_N]; /* [MODEL_ROPE_GLOBAL], [MODEL_ROPE_LOCAL] */
    float rms_eps;
    int rope_neox;          /* 1: rotate (i, i + n_rot/2); 0: (2i, 2i+1) */
    int swa_window;         /* sliding-window layers attend to positions
                             * > pos - swa_window; 0: no such layers */
    float embd_scale;       /* embeddings are multiplied by this (gemma3: sqrt(dim)) */
    float attn_scale;       /* attention scores are q . k * attn_scale */
    float logit_softcap;    /* > 0: logits = c * tanh(logits / c); 0: none */
    model_ffn_act ffn_act;
} model_config;

typedef struct model_layer {
    int swa;                /* 1: a sliding-window layer (local rope, window mask) */
    const float *attn_norm; /* (dim) */
    ops_mat wq;             /* (n_heads * head_dim, dim) */
    ops_mat wk;             /* (n_kv_heads * head_dim, dim) */
    ops_mat wv;             /* (n_kv_heads * head_dim, dim) */
    ops_mat wo;             /* (dim, n_heads * head_dim) */
    const float *bq;        /* (n_heads * head_dim) or NULL */
    const float *bk;        /* (n_kv_heads * head_dim) or NULL */
    const float *bv;        /* (n_kv_heads * head_dim) or NULL */
    const float *q_norm;    /* (head_dim) per-head RMSNorm of q before rope, or NULL */
    const float *k_norm;    /* (head_dim) the same for k, or NULL */
    const float *attn_post_norm; /* (dim) norm of the attention output before
                             * the residual add (gemma3), or NULL */
    const float *ffn_norm;  /* (dim) */
    ops_mat w_gate;         /* (ffn_dim, dim) */
    ops_mat w_up;           /* (ffn_dim, dim) */
    ops_mat w_down;         /* (dim, ffn_dim) */
    const float *ffn_post_norm; /* (dim) norm of the FFN output (gemma3), or NULL */
} model_layer;
/* phi3's fused attn_qkv and ffn_up are bound as views of their row ranges
 * (wq, wk, wv; w_gate, w_up), so the kernels see the same matrices as for
 * separate tensors and the fused products stay one call. */

typedef struct model {
    model_config cfg;
    gguf_ctx *gguf;         /* owned; weights point into its mapping */
    ops_mat tok_embd;       /* (vocab, dim) */
    const float *out_norm;  /* (dim) */
    ops_mat output;         /* (vocab, dim); the embedding when tied */
    const float *rope_freqs; /* (n_rot / 2) divisors of the global rope
                             * frequencies (llama rope_freqs.weight), or NULL */
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

/* Bytes one token of one sequence occupies in a KV cache of elem_bytes
 * elements: k and v of head_dim per kv head per layer. */
size_t model_kv_bytes_per_token(const model_config *c, size_t elem_bytes);

#endif
