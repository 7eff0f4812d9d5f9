/*
 * enc.h - a BERT-family encoder for embeddings: the second model kind beside
 * the decoder of model.h. It owns the configuration and the read-only
 * weights of a GGUF file of architecture "bert" (as llama.cpp's
 * convert_hf_to_gguf.py writes BertModel checkpoints: bge, e5, MiniLM,
 * all-mpnet-style sentence-transformers exports), and the run state that
 * turns batches of token-id sequences into one L2-normalised vector each.
 *
 * The forward is the published post-LayerNorm BERT (Devlin et al. 2018):
 *   x = LN0(tok_embd[id] + pos_embd[p] + token_types[0])          (T, dim)
 *   per layer:
 *     q, k, v = x Wq^T + bq, x Wk^T + bk, x Wv^T + bv   (or one fused Wqkv)
 *     a = per sequence, per head: softmax(q k^T / sqrt(hd)) v   (no mask)
 *     x = LN1(x + a Wo^T + bo)
 *     x = LN2(x + gelu(x Wup^T + bup) Wdown^T + bdown),   gelu exact (erf)
 *   e = pool(x over the sequence's tokens); e / |e|_2
 * LN(v) = (v - mean) / sqrt(var + eps) * w + b with the file's
 * bert.attention.layer_norm_epsilon. Attention is bidirectional within a
 * sequence, and sequences of a batch never see each other; the dense
 * products see every token of the batch at once (that is what batching
 * buys, as in cpu_backend.c), inside one OpenMP region.
 *
 * Every tensor is checked at load for presence, type and exact shape;
 * matrices may be any type ops_mat_supported() accepts, norms and biases
 * f32, f16 or bf16 (copied to f32). After enc_load succeeds the forward
 * meets no surprise, and nothing a file or a request controls reaches an
 * assert: a bad id, an empty or too long sequence, or a batch larger than
 * the state was sized for is a negative TS_ERR_* code with a message.
 *
 * Limits, each deliberate:
 *  - Positions: at most bert.context_length (512 for BERT checkpoints), and
 *    no more than position_embd has rows. There is no truncation: a longer
 *    sequence is refused (TS_ERR_CTX_LIMIT); truncating is the caller's
 *    policy.
 *  - Token type ids: every token is type 0 ("sentence A"); the type-1 row
 *    is loaded but unused, as llama.cpp does for embeddings. A file
 *    without token_types (llama.cpp takes it as optional) adds nothing.
 *  - Pooling (bert.pooling_type): 1 mean, 2 CLS (first token), 3 last
 *    token. 0 (none: per-token vectors) and 4 (rank: needs a classifier
 *    head) are refused. A file without the key (a plain BertModel export
 *    without sentence-transformers' modules.json) pools by mean, the
 *    sentence-transformers default; llama.cpp would output per-token
 *    vectors there.
 *  - Other encoder architectures ("nomic-bert": rotary positions and
 *    SwiGLU; "jina-bert-v2": ALiBi and GEGLU) are refused by name.
 *  - The checks of bind_mat/bind_vec in model.c are repeated in enc.c's
 *    enc_bind_* (model.c's are static); one shared helper should replace
 *    both.
 */
#ifndef TS_ENC_H
#define TS_ENC_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "ops.h"

#define ENC_MAX_LAYERS 256
#define ENC_MAX_DIM (1 << 16)
#define ENC_MAX_CTX (1 << 16)   /* positions */

/* bert.pooling_type values, numbered as llama.cpp numbers them. */
typedef enum enc_pooling {
    ENC_POOL_NONE = 0,      /* refused: per-token output */
    ENC_POOL_MEAN = 1,
    ENC_POOL_CLS = 2,
    ENC_POOL_LAST = 3,
    ENC_POOL_RANK = 4,      /* refused: needs a classifier head */
} enc_pooling;

typedef struct enc_config {
    int dim;                /* embedding width (hidden size) */
    int n_layers;
    int n_heads;
    int head_dim;           /* dim / n_heads */
    int ffn_dim;            /* intermediate size */
    int vocab;              /* rows of token_embd */
    int ctx_len;            /* positions a sequence may use */
    int n_types;            /* rows of token_types (2 for BERT; 0: no such tensor) */
    float ln_eps;           /* LayerNorm epsilon */
    enc_pooling pooling;    /* ENC_POOL_MEAN, _CLS or _LAST */
} enc_config;

typedef struct enc_layer {
    int fused;              /* 1: one attn_qkv matrix; 0: attn_q, attn_k, attn_v */
    ops_mat wqkv;           /* (3 * dim, dim) when fused */
    ops_mat wq, wk, wv;     /* (dim, dim) each when not */
    const float *bqkv;      /* (3 * dim) the q, k and v biases side by side */
    ops_mat wo;             /* (dim, dim) attn_output */
    const float *bo;        /* (dim) */
    const float *ln1_w;     /* (dim) attn_output_norm */
    const float *ln1_b;     /* (dim) */
    ops_mat w_up;           /* (ffn_dim, dim) */
    const float *b_up;      /* (ffn_dim) */
    ops_mat w_down;         /* (dim, ffn_dim) */
    const float *b_down;    /* (dim) */
    const float *ln2_w;     /* (dim) layer_output_norm */
    const float *ln2_b;     /* (dim) */
} enc_layer;

typedef struct enc_model {
    enc_config cfg;
    gguf_ctx *gguf;         /* owned; matrices point into its mapping */
    ops_mat tok_embd;       /* (vocab, dim) */
    ops_mat pos_embd;       /* (>= ctx_len, dim) */
    ops_mat type_embd;      /* (n_types, dim); all zero when the file has none */
    const float *type0;     /* (dim) row 0 of token_types as f32, or zeros */
    const float *ln0_w;     /* (dim) token_embd_norm */
    const float *ln0_b;     /* (dim) */
    enc_layer *layers;      /* (n_layers) */
    float *f32_owned;       /* every norm and bias, and type0, as f32 */
    size_t f32_owned_n;     /* floats in f32_owned */
} enc_model;

/* Run state: activations for up to max_tokens tokens per call. One state
 * serves one enc_embed call at a time; several states may share a model. */
typedef struct enc_state enc_state;

/* Load an encoder from a GGUF file. On failure *out is NULL and err names
 * the file and what is wrong (the tensor, the key, the shape). */
int enc_load(const char *path, enc_model **out, char *err, size_t errlen);
/* The same over an already opened GGUF; takes ownership of g (also on
 * error). */
int enc_from_gguf(gguf_ctx *g, enc_model **out, char *err, size_t errlen);
void enc_free(enc_model *m);

/* 1 when the file's general.architecture is one enc_load takes ("bert"):
 * lets a caller choose between model_load and enc_load. */
int enc_is_encoder(const gguf_ctx *g);

/* Accessors. */
int enc_dim(const enc_model *m);
int enc_ctx_len(const enc_model *m);
enc_pooling enc_pool(const enc_model *m);
/* "mean", "cls", "last" or "none"/"rank"/"?" for the refused ones. */
const char *enc_pool_name(enc_pooling p);

/* Run state for batches of at most max_tokens tokens in all (1..2^24),
 * using n_threads OpenMP threads (<= 0: all cores). Everything enc_embed
 * touches is allocated here. */
int enc_state_new(const enc_model *m, int max_tokens, int n_threads, enc_state **out, char *err,
                  size_t errlen);
void enc_state_free(enc_state *s);
/* Tokens one call may take (the max_tokens the state was made with). */
int enc_state_max_tokens(const enc_state *s);

/*
 * Embed n_seqs sequences in one forward: sequence i is tokens[i][0..n_tokens[i]).
 * out: (n_seqs, dim) row-major, each row L2-normalised (a row whose pooled
 * vector is exactly zero stays zero). Errors, nothing written to out:
 *   TS_ERR_INVAL       n_seqs < 1, a NULL sequence or an empty one;
 *   TS_ERR_CTX_LIMIT   a sequence longer than the context length;
 *   TS_ERR_BATCH_LIMIT more tokens in all than the state's max_tokens;
 *   TS_ERR_TOK_RANGE   an id outside [0, vocab).
 * err (may be NULL) names the sequence and the limit.
 */
int enc_embed(enc_state *s, const int32_t *const *tokens, const int *n_tokens, int n_seqs, float *out, char *err,
              size_t errlen);

#endif
