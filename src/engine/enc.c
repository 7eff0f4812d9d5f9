/*
 * enc.c - bind a "bert" GGUF file's metadata and tensors into an encoder;
 * see enc.h. The forward pass is in cpu/enc_cpu.c.
 */
#include "enc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "wbind.h"

/* Reads bert.<suffix> as a positive u32 no larger than max. A missing key
 * is an error when required and keeps *out otherwise. */
static int key_u32(const gguf_ctx *g, const char *suffix, int required, int max, int *out, char *err,
                   size_t errlen) {
    char key[96];
    uint32_t v;
    snprintf(key, sizeof(key), "bert.%s", suffix);
    if (!gguf_find_kv(g, key)) {
        if (!required) return 0;
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "metadata key %s missing", key);
    }
    if (gguf_get_u32(g, key, &v))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "metadata key %s is not an unsigned integer", key);
    if (v < 1 || v > (uint32_t)max)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%s = %u is out of range (1..%d)", key, v, max);
    *out = (int)v;
    return 0;
}

/* The pooling type: missing means mean (see enc.h); none and rank are
 * refused because they do not give one vector per sequence. */
static int read_pooling(const gguf_ctx *g, enc_config *c, char *err, size_t errlen) {
    uint32_t v;
    c->pooling = ENC_POOL_MEAN;
    if (!gguf_find_kv(g, "bert.pooling_type")) return 0;
    if (gguf_get_u32(g, "bert.pooling_type", &v))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "bert.pooling_type is not an unsigned integer");
    if (v != ENC_POOL_MEAN && v != ENC_POOL_CLS && v != ENC_POOL_LAST)
        return err_set(err, errlen, TS_ERR_MODEL_KEY,
                       "bert.pooling_type %u (%s) is not supported: an embedding needs mean (1), cls (2) or "
                       "last (3) pooling",
                       v, enc_pool_name((enc_pooling)v));
    c->pooling = (enc_pooling)v;
    return 0;
}

static int read_config(const gguf_ctx *g, enc_config *c, char *err, size_t errlen) {
    int rc, causal = 0;
    if (!enc_is_encoder(g)) {
        gguf_str a = {0, ""};
        gguf_get_str(g, "general.architecture", &a);
        return err_set(err, errlen, TS_ERR_MODEL_ARCH, "architecture '%.*s' is not an encoder tessera runs (bert is)",
                       (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    if ((rc = key_u32(g, "embedding_length", 1, ENC_MAX_DIM, &c->dim, err, errlen)) ||
        (rc = key_u32(g, "block_count", 1, ENC_MAX_LAYERS, &c->n_layers, err, errlen)) ||
        (rc = key_u32(g, "feed_forward_length", 1, 8 * ENC_MAX_DIM, &c->ffn_dim, err, errlen)) ||
        (rc = key_u32(g, "attention.head_count", 1, ENC_MAX_DIM, &c->n_heads, err, errlen)) ||
        (rc = key_u32(g, "context_length", 0, ENC_MAX_CTX, &c->ctx_len, err, errlen)) ||
        (rc = read_pooling(g, c, err, errlen)))
        return rc;
    if (c->dim % c->n_heads)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "embedding_length %d is not a multiple of %d heads", c->dim,
                       c->n_heads);
    c->head_dim = c->dim / c->n_heads;
    c->ln_eps = 1e-12f; /* BertConfig's default */
    if (gguf_find_kv(g, "bert.attention.layer_norm_epsilon") &&
        gguf_get_f32(g, "bert.attention.layer_norm_epsilon", &c->ln_eps))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "bert.attention.layer_norm_epsilon is not a float");
    if (!(c->ln_eps > 0) || c->ln_eps > 1)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "layer norm epsilon %g is out of range (0, 1]",
                       (double)c->ln_eps);
    if (gguf_find_kv(g, "bert.attention.causal") && gguf_get_bool(g, "bert.attention.causal", &causal))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "bert.attention.causal is not a bool");
    if (causal)
        return err_set(err, errlen, TS_ERR_MODEL_ARCH, "bert.attention.causal is true: a causal encoder is not BERT");
    return 0;
}

/* A vector of n elements (norm weight or bias), converted to f32 into dst:
 * always a copy, so the q, k and v biases can sit side by side. */
static int bind_vec(const gguf_ctx *g, const char *name, int64_t n, float *dst, char *err, size_t errlen) {
    ops_mat v;
    int rc = wb_vec(g, name, n, &v, err, errlen);
    if (!rc) ops_dequant_row(dst, &v, 0);
    return rc;
}

/* Floats of f32_owned: token_embd_norm (2 dim), type0 (dim), and per layer
 * the qkv biases (3 dim), bo (dim), two norms (4 dim), b_up (ffn), b_down
 * (dim). */
static size_t pool_floats(const enc_config *c) {
    return 3 * (size_t)c->dim + (size_t)c->n_layers * (9 * (size_t)c->dim + (size_t)c->ffn_dim);
}

/* Takes the next n floats of the pool for a vector. */
static float *take(float **pool, int64_t n) {
    float *p = *pool;
    *pool += n;
    return p;
}

/* The attention's q, k, v: one fused matrix (some converters and
 * quantizers merge them) or three, with their biases side by side. */
static int bind_qkv(const gguf_ctx *g, int l, enc_layer *L, const enc_config *c, float *b, char *err,
                    size_t errlen) {
    const int64_t d = c->dim;
    char n[96];
    int rc;
    L->bqkv = b;
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)
    if (gguf_find_tensor(g, NAME("attn_qkv.weight"))) {
        L->fused = 1;
        if ((rc = wb_mat(g, n, 3 * d, d, &L->wqkv, err, errlen)) ||
            (rc = bind_vec(g, NAME("attn_qkv.bias"), 3 * d, b, err, errlen)))
            return rc;
        return 0;
    }
    if ((rc = wb_mat(g, NAME("attn_q.weight"), d, d, &L->wq, err, errlen)) ||
        (rc = wb_mat(g, NAME("attn_k.weight"), d, d, &L->wk, err, errlen)) ||
        (rc = wb_mat(g, NAME("attn_v.weight"), d, d, &L->wv, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_q.bias"), d, b, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_k.bias"), d, b + d, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_v.bias"), d, b + 2 * d, err, errlen)))
        return rc;
#undef NAME
    return 0;
}

static int bind_layer(enc_model *m, int l, float **pool, char *err, size_t errlen) {
    const enc_config *c = &m->cfg;
    const gguf_ctx *g = m->gguf;
    enc_layer *L = &m->layers[l];
    int64_t d = c->dim, f = c->ffn_dim;
    char n[96];
    int rc;
    float *bo = take(pool, d), *ln1w = take(pool, d), *ln1b = take(pool, d), *bup = take(pool, f);
    float *bdown = take(pool, d), *ln2w = take(pool, d), *ln2b = take(pool, d);
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)
    if ((rc = bind_qkv(g, l, L, c, take(pool, 3 * d), err, errlen)) ||
        (rc = wb_mat(g, NAME("attn_output.weight"), d, d, &L->wo, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_output.bias"), d, bo, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_output_norm.weight"), d, ln1w, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_output_norm.bias"), d, ln1b, err, errlen)) ||
        (rc = wb_mat(g, NAME("ffn_up.weight"), f, d, &L->w_up, err, errlen)) ||
        (rc = bind_vec(g, NAME("ffn_up.bias"), f, bup, err, errlen)) ||
        (rc = wb_mat(g, NAME("ffn_down.weight"), d, f, &L->w_down, err, errlen)) ||
        (rc = bind_vec(g, NAME("ffn_down.bias"), d, bdown, err, errlen)) ||
        (rc = bind_vec(g, NAME("layer_output_norm.weight"), d, ln2w, err, errlen)) ||
        (rc = bind_vec(g, NAME("layer_output_norm.bias"), d, ln2b, err, errlen)))
        return rc;
#undef NAME
    L->bo = bo, L->ln1_w = ln1w, L->ln1_b = ln1b, L->b_up = bup;
    L->b_down = bdown, L->ln2_w = ln2w, L->ln2_b = ln2b;
    return 0;
}

/* The embedding tables. token_embd and token_types give the vocabulary
 * and type counts by their rows; token_types may be missing (llama.cpp
 * loads it as optional: a RoBERTa-style export has none), which adds
 * nothing. position_embd must cover the context length, which it gives
 * when the key is missing. */
static int bind_embeddings(enc_model *m, float **pool, char *err, size_t errlen) {
    enc_config *c = &m->cfg;
    const gguf_ctx *g = m->gguf;
    int rc;
    if ((rc = wb_mat(g, "token_embd.weight", 0, c->dim, &m->tok_embd, err, errlen)) ||
        (rc = wb_mat(g, "position_embd.weight", 0, c->dim, &m->pos_embd, err, errlen)))
        return rc;
    if (gguf_find_tensor(g, "token_types.weight") &&
        (rc = wb_mat(g, "token_types.weight", 0, c->dim, &m->type_embd, err, errlen)))
        return rc;
    const int64_t types = m->type_embd.n_out, pos = m->pos_embd.n_out;
    c->vocab = (int)m->tok_embd.n_out;
    c->n_types = (int)types;
    if (!c->ctx_len) c->ctx_len = pos < ENC_MAX_CTX ? (int)pos : ENC_MAX_CTX;
    if (pos < c->ctx_len)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE,
                       "tensor position_embd.weight has %lld rows, fewer than bert.context_length %d", (long long)pos,
                       c->ctx_len);
    float *ln0w = take(pool, c->dim), *ln0b = take(pool, c->dim), *type0 = take(pool, c->dim);
    if ((rc = bind_vec(g, "token_embd_norm.weight", c->dim, ln0w, err, errlen)) ||
        (rc = bind_vec(g, "token_embd_norm.bias", c->dim, ln0b, err, errlen)))
        return rc;
    if (types) ops_dequant_row(type0, &m->type_embd, 0);
    else memset(type0, 0, (size_t)c->dim * sizeof(float));
    m->ln0_w = ln0w, m->ln0_b = ln0b, m->type0 = type0;
    return 0;
}

static int bind_all(enc_model *m, char *err, size_t errlen) {
    const enc_config *c = &m->cfg;
    m->f32_owned_n = pool_floats(c);
    m->f32_owned = malloc(m->f32_owned_n * sizeof(float));
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (!m->f32_owned || !m->layers) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    float *pool = m->f32_owned;
    int rc = bind_embeddings(m, &pool, err, errlen);
    for (int l = 0; !rc && l < c->n_layers; l++) rc = bind_layer(m, l, &pool, err, errlen);
    return rc;
}

int enc_from_gguf(gguf_ctx *g, enc_model **out, char *err, size_t errlen) {
    *out = NULL;
    enc_model *m = calloc(1, sizeof(*m));
    if (!m) {
        gguf_close(g);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    int rc = read_config(g, &m->cfg, err, errlen);
    if (!rc) rc = bind_all(m, err, errlen);
    if (rc) {
        enc_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int enc_load(const char *path, enc_model **out, char *err, size_t errlen) {
    gguf_ctx *g;
    char inner[256];
    *out = NULL;
    int rc = gguf_open(path, &g, err, errlen); /* its messages name the path */
    if (rc) return rc;
    if ((rc = enc_from_gguf(g, out, inner, sizeof(inner)))) err_set(err, errlen, rc, "%s: %s", path, inner);
    return rc;
}

void enc_free(enc_model *m) {
    if (!m) return;
    gguf_close(m->gguf);
    free(m->layers);
    free(m->f32_owned);
    free(m);
}

int enc_is_encoder(const gguf_ctx *g) {
    gguf_str a;
    return gguf_get_str(g, "general.architecture", &a) == 0 && gguf_str_eq(a, "bert");
}

int enc_dim(const enc_model *m) { return m->cfg.dim; }
int enc_ctx_len(const enc_model *m) { return m->cfg.ctx_len; }
enc_pooling enc_pool(const enc_model *m) { return m->cfg.pooling; }

const char *enc_pool_name(enc_pooling p) {
    switch (p) {
    case ENC_POOL_NONE: return "none";
    case ENC_POOL_MEAN: return "mean";
    case ENC_POOL_CLS: return "cls";
    case ENC_POOL_LAST: return "last";
    case ENC_POOL_RANK: return "rank";
    }
    return "?";
}
