/*
 * model.c - bind a GGUF file's metadata and tensors into a model; see model.h.
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "err.h"

/* Reads "{arch}.{suffix}" as u32; required keys fail, optional keep *out. */
static int arch_u32(const gguf_ctx *g, const char *arch, const char *suffix, int required,
                    int *out, char *err, size_t errlen) {
    char key[128];
    uint32_t v;
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (gguf_get_u32(g, key, &v) == 0) {
        if (v > (uint32_t)MODEL_MAX_VOCAB * 4)
            return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%s = %u is absurd", key, v);
        *out = (int)v;
        return 0;
    }
    if (!required) return 0;
    return err_set(err, errlen, TS_ERR_MODEL_KEY, "metadata key %s missing or not an integer", key);
}

static int arch_f32(const gguf_ctx *g, const char *arch, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (!gguf_find_kv(g, key)) return 0; /* optional: keep the default */
    return gguf_get_f32(g, key, out);
}

static int read_config(const gguf_ctx *g, model_config *c, char *err, size_t errlen) {
    gguf_str a;
    char arch[32];
    int rc;
    if (gguf_get_str(g, "general.architecture", &a))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "general.architecture missing");
    if (gguf_str_eq(a, "llama")) c->arch = MODEL_ARCH_LLAMA;
    else if (gguf_str_eq(a, "qwen2")) c->arch = MODEL_ARCH_QWEN2;
    else
        return err_set(err, errlen, TS_ERR_MODEL_ARCH,
                       "architecture '%.*s' is not supported (llama, qwen2 are)",
                       (int)(a.len > 64 ? 64 : a.len), a.ptr);
    snprintf(arch, sizeof(arch), "%.*s", (int)a.len, a.ptr);
    c->rope_neox = c->arch == MODEL_ARCH_QWEN2;
    if ((rc = arch_u32(g, arch, "embedding_length", 1, &c->dim, err, errlen)) ||
        (rc = arch_u32(g, arch, "block_count", 1, &c->n_layers, err, errlen)) ||
        (rc = arch_u32(g, arch, "feed_forward_length", 1, &c->ffn_dim, err, errlen)) ||
        (rc = arch_u32(g, arch, "attention.head_count", 1, &c->n_heads, err, errlen)))
        return rc;
    c->n_kv_heads = c->n_heads;
    c->ctx_len = 2048;
    c->rope_base = 10000.0f;
    c->rms_eps = 1e-5f;
    if ((rc = arch_u32(g, arch, "attention.head_count_kv", 0, &c->n_kv_heads, err, errlen)) ||
        (rc = arch_u32(g, arch, "context_length", 0, &c->ctx_len, err, errlen)))
        return rc;
    if (arch_f32(g, arch, "rope.freq_base", &c->rope_base) ||
        arch_f32(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "%s rope.freq_base or rms epsilon is not a float", arch);
    return 0;
}

static int check_config(const model_config *c, char *err, size_t errlen) {
    if (c->dim <= 0 || c->dim > MODEL_MAX_DIM || c->n_layers <= 0 || c->n_layers > MODEL_MAX_LAYERS ||
        c->n_heads <= 0 || c->n_heads > c->dim || c->ffn_dim <= 0 || c->ffn_dim > 8 * MODEL_MAX_DIM ||
        c->ctx_len <= 0 || c->ctx_len > (1 << 24))
        return err_set(err, errlen, TS_ERR_MODEL_DIMS,
                       "absurd dimensions: dim %d, layers %d, heads %d, ffn %d, context %d", c->dim,
                       c->n_layers, c->n_heads, c->ffn_dim, c->ctx_len);
    if (c->dim % c->n_heads || (c->dim / c->n_heads) % 2)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS,
                       "dim %d is not an even head size times %d heads", c->dim, c->n_heads);
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%d query heads do not group over %d kv heads",
                       c->n_heads, c->n_kv_heads);
    if (!(c->rope_base > 0) || !(c->rms_eps > 0) || c->rms_eps > 1)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "rope base %g or rms epsilon %g out of range",
                       (double)c->rope_base, (double)c->rms_eps);
    return 0;
}

/* Finds a matrix tensor of shape (rows, cols) in any executable type. */
static int bind_mat(const gguf_ctx *g, const char *name, int64_t rows, int64_t cols, ops_mat *m,
                    int optional, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        if (optional) return 1;
        return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor %s missing", name);
    }
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "tensor %s has shape [%llu, %llu], want [%lld, %lld]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (long long)cols, (long long)rows);
    m->data = t->data;
    m->type = t->type;
    m->n_out = rows;
    m->n_in = cols;
    /* The reader only hands out types tessera knows, but knowing a type is
     * not the same as having a kernel for it: refuse here, at load, so no
     * matrix reaches a kernel that would have to abort on it. */
    if (!ops_mat_supported(m)) {
        const char *tn = gguf_type_name(t->type);
        return err_set(err, errlen, TS_ERR_GGUF_TYPE,
                       "tensor %s: type %s (%u) of shape [%lld, %lld] is not one the CPU kernels multiply",
                       name, tn ? tn : "?", t->type, (long long)cols, (long long)rows);
    }
    return 0;
}

/* Binds a vector (norm weight or bias) of n elements as f32, converting into
 * *pool when the file stores it as f16/bf16. */
static int bind_vec(const gguf_ctx *g, const char *name, int64_t n, const float **out, float **pool,
                    int optional, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) {
        if (optional) return 0;
        return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor %s missing", name);
    }
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "tensor %s has %llu elements in %u dims, want %lld",
                       name, (unsigned long long)t->ne[0], t->n_dims, (long long)n);
    if (t->type == GGUF_TT_F32) {
        *out = t->data;
        return 0;
    }
    if (t->type != GGUF_TT_F16 && t->type != GGUF_TT_BF16)
        return err_set(err, errlen, TS_ERR_GGUF_TYPE, "tensor %s: vectors must be f32, f16 or bf16", name);
    float *dst = *pool;
    const uint16_t *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + i, 2);
        dst[i] = t->type == GGUF_TT_F16 ? ops_f16_to_f32(h) : ops_bf16_to_f32(h);
    }
    *pool += n;
    *out = dst;
    return 0;
}

static uint64_t mat_bytes(const ops_mat *m) {
    return gguf_row_bytes(m->type, (uint64_t)m->n_in) * (uint64_t)m->n_out;
}

static int bind_layer(model *m, int l, float **pool, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const gguf_ctx *g = m->gguf;
    model_layer *L = &m->layers[l];
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    int bias = c->arch == MODEL_ARCH_QWEN2;
    char n[96];
    int rc;
#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)
    if ((rc = bind_vec(g, NAME("attn_norm.weight"), c->dim, &L->attn_norm, pool, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("attn_q.weight"), qd, c->dim, &L->wq, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("attn_k.weight"), kvd, c->dim, &L->wk, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("attn_v.weight"), kvd, c->dim, &L->wv, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("attn_output.weight"), c->dim, qd, &L->wo, 0, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_q.bias"), qd, &L->bq, pool, !bias, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_k.bias"), kvd, &L->bk, pool, !bias, err, errlen)) ||
        (rc = bind_vec(g, NAME("attn_v.bias"), kvd, &L->bv, pool, !bias, err, errlen)) ||
        (rc = bind_vec(g, NAME("ffn_norm.weight"), c->dim, &L->ffn_norm, pool, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("ffn_gate.weight"), c->ffn_dim, c->dim, &L->w_gate, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("ffn_up.weight"), c->ffn_dim, c->dim, &L->w_up, 0, err, errlen)) ||
        (rc = bind_mat(g, NAME("ffn_down.weight"), c->dim, c->ffn_dim, &L->w_down, 0, err, errlen)))
        return rc;
#undef NAME
    m->weight_bytes += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
                       mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
    return 0;
}

static int bind_all(model *m, char *err, size_t errlen) {
    model_config *c = &m->cfg;
    const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor token_embd.weight missing");
    if (te->n_dims != 2 || te->ne[1] > MODEL_MAX_VOCAB)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "token_embd.weight: bad shape");
    c->vocab = (int)te->ne[1];
    int rc = bind_mat(m->gguf, "token_embd.weight", c->vocab, c->dim, &m->tok_embd, 0, err, errlen);
    if (rc) return rc;
    /* Norms and biases are at most (2 + 2 per layer) * dim + 3 * qd per layer. */
    size_t qd = (size_t)c->n_heads * c->head_dim;
    size_t pool_n = (size_t)c->dim * (1 + 2 * (size_t)c->n_layers) + 3 * qd * (size_t)c->n_layers;
    m->f32_owned_bytes = pool_n * sizeof(float);
    m->f32_owned = malloc(m->f32_owned_bytes);
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (!m->f32_owned || !m->layers) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    float *pool = m->f32_owned;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = bind_layer(m, l, &pool, err, errlen))) return rc;
    if ((rc = bind_vec(m->gguf, "output_norm.weight", c->dim, &m->out_norm, &pool, 0, err, errlen)))
        return rc;
    rc = bind_mat(m->gguf, "output.weight", c->vocab, c->dim, &m->output, 1, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) m->output = m->tok_embd; /* tied embeddings */
    m->weight_bytes += mat_bytes(&m->output);
    return 0;
}

int model_from_gguf(gguf_ctx *g, model **out, char *err, size_t errlen) {
    *out = NULL;
    model *m = calloc(1, sizeof(*m));
    if (!m) {
        gguf_close(g);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    int rc = read_config(g, &m->cfg, err, errlen);
    if (!rc) rc = check_config(&m->cfg, err, errlen);
    if (!rc) {
        m->cfg.head_dim = m->cfg.dim / m->cfg.n_heads;
        rc = bind_all(m, err, errlen);
    }
    if (rc) {
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int model_load(const char *path, model **out, char *err, size_t errlen) {
    gguf_ctx *g;
    char inner[256];
    *out = NULL;
    int rc = gguf_open(path, &g, err, errlen); /* its messages name the path */
    if (rc) return rc;
    if ((rc = model_from_gguf(g, out, inner, sizeof(inner)))) err_set(err, errlen, rc, "%s: %s", path, inner);
    return rc;
}

void model_free(model *m) {
    if (!m) return;
    gguf_close(m->gguf);
    free(m->layers);
    free(m->f32_owned);
    free(m);
}

/* Bytes of [p, p + n) in memory, by mincore: for a file mapping, the
 * file's pages in the page cache (touched by this process or not: they are
 * the one copy it reads). 0 when mincore fails (part of the range is not
 * mapped). */
static uint64_t resident_in(const void *p, uint64_t n) {
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p / pg * pg, e = (uintptr_t)p + n;
    const size_t pages = (size_t)((e - a + pg - 1) / pg);
    unsigned char vec[4096];
    uint64_t in = 0;
    for (size_t at = 0; at < pages; at += sizeof vec) {
        size_t k = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore((void *)(a + at * pg), k * pg, vec)) return 0;
        for (size_t i = 0; i < k; i++) in += vec[i] & 1;
    }
    in *= pg;
    return in < n ? in : n;
}

uint64_t model_resident_bytes(const model *m) {
    return resident_in(m->gguf->map, m->gguf->size) + m->f32_owned_bytes;
}

size_t model_kv_bytes_per_token(const model_config *c) {
    return 2 * (size_t)c->n_layers * (size_t)c->n_kv_heads * (size_t)c->head_dim * sizeof(float);
}
