/*
 * model.c - bind a GGUF file's metadata and tensors into a model; see model.h.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "sched.h"
#include "wbind.h"

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

static const struct {
    const char *name;
    model_arch arch;
} ARCHS[] = {{"llama", MODEL_ARCH_LLAMA}, {"qwen2", MODEL_ARCH_QWEN2}, {"qwen3", MODEL_ARCH_QWEN3},
             {"gemma3", MODEL_ARCH_GEMMA3}, {"phi3", MODEL_ARCH_PHI3}};
#define N_ARCHS (int)(sizeof(ARCHS) / sizeof(ARCHS[0]))

/* gemma3's sliding-window layers: five local, then one global, as
 * llama.cpp's set_swa_pattern(6) and Hugging Face's sliding_window_pattern
 * lay them out; their rope base is fixed at 10000 (llama.cpp's
 * rope_freq_base_train_swa), without scaling. */
#define GEMMA3_SWA_PERIOD 6
#define GEMMA3_LOCAL_ROPE_BASE 10000.0f

static int layer_is_swa(const model_config *c, int l) {
    return c->swa_window > 0 && (l + 1) % GEMMA3_SWA_PERIOD != 0;
}

/* The linear rope scale of "{arch}.rope.scaling.*", as llama.cpp reads it:
 * the factor (or the older rope.scale_linear) divides positions unless the
 * type names a method tessera does not run (yarn, longrope), which is
 * refused rather than run wrongly. Type absent means linear. */
static int read_rope_scaling(const gguf_ctx *g, const char *arch, float *scale, char *err, size_t errlen) {
    char key[128];
    gguf_str t;
    float factor = 0.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    if (gguf_find_kv(g, key)) {
        if (gguf_get_str(g, key, &t)) return err_set(err, errlen, TS_ERR_MODEL_KEY, "%s is not a string", key);
        if (!gguf_str_eq(t, "linear") && !gguf_str_eq(t, "none"))
            return err_set(err, errlen, TS_ERR_MODEL_ARCH,
                           "%s = '%.*s' is not supported (linear and none are; YaRN and longrope are not)", key,
                           (int)(t.len > 32 ? 32 : t.len), t.ptr);
    }
    snprintf(key, sizeof(key), "%s.rope.scaling.factor", arch);
    if (!gguf_find_kv(g, key)) snprintf(key, sizeof(key), "%s.rope.scale_linear", arch);
    if (gguf_find_kv(g, key) && gguf_get_f32(g, key, &factor))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "%s is not a float", key);
    if (factor != 0.0f && !(factor >= 1e-3f && factor <= 1e6f))
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%s = %g is out of range", key, (double)factor);
    *scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    /* original_context_length only matters to YaRN; present, it must be sane. */
    int orig = 1;
    return arch_u32(g, arch, "rope.scaling.original_context_length", 0, &orig, err, errlen);
}

/* The keys every arch shares, and the per-arch behaviour they imply. */
static int read_config(const gguf_ctx *g, model_config *c, char *err, size_t errlen) {
    gguf_str a;
    char arch[32];
    int rc, i, vlen = 0;
    if (gguf_get_str(g, "general.architecture", &a))
        return err_set(err, errlen, TS_ERR_MODEL_KEY, "general.architecture missing");
    for (i = 0; i < N_ARCHS && !gguf_str_eq(a, ARCHS[i].name); i++) {}
    if (i == N_ARCHS)
        return err_set(err, errlen, TS_ERR_MODEL_ARCH,
                       "architecture '%.*s' is not supported (llama, qwen2, qwen3, gemma3, phi3 are)",
                       (int)(a.len > 64 ? 64 : a.len), a.ptr);
    c->arch = ARCHS[i].arch;
    snprintf(arch, sizeof(arch), "%s", ARCHS[i].name);
    c->rope_neox = c->arch != MODEL_ARCH_LLAMA;
    c->ffn_act = c->arch == MODEL_ARCH_GEMMA3 ? MODEL_FFN_GELU_TANH : MODEL_FFN_SILU;
    if ((rc = arch_u32(g, arch, "embedding_length", 1, &c->dim, err, errlen)) ||
        (rc = arch_u32(g, arch, "block_count", 1, &c->n_layers, err, errlen)) ||
        (rc = arch_u32(g, arch, "feed_forward_length", 1, &c->ffn_dim, err, errlen)) ||
        (rc = arch_u32(g, arch, "attention.head_count", 1, &c->n_heads, err, errlen)))
        return rc;
    c->n_kv_heads = c->n_heads;
    c->ctx_len = 2048;
    c->rope[MODEL_ROPE_GLOBAL] = (model_rope){10000.0f, 1.0f};
    c->rms_eps = 1e-5f;
    if ((rc = arch_u32(g, arch, "attention.head_count_kv", 0, &c->n_kv_heads, err, errlen)) ||
        (rc = arch_u32(g, arch, "context_length", 0, &c->ctx_len, err, errlen)) ||
        (rc = arch_u32(g, arch, "attention.key_length", 0, &c->head_dim, err, errlen)) ||
        (rc = arch_u32(g, arch, "attention.value_length", 0, &vlen, err, errlen)) ||
        (rc = arch_u32(g, arch, "rope.dimension_count", 0, &c->n_rot, err, errlen)))
        return rc;
    if (vlen && vlen != c->head_dim)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%s value_length %d differs from key_length %d", arch, vlen,
                       c->head_dim);
    if (arch_f32(g, arch, "rope.freq_base", &c->rope[MODEL_ROPE_GLOBAL].base) ||
        arch_f32(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps) ||
        arch_f32(g, arch, "final_logit_softcapping", &c->logit_softcap))
        return err_set(err, errlen, TS_ERR_MODEL_KEY,
                       "%s rope.freq_base, rms epsilon or final_logit_softcapping is not a float", arch);
    if ((rc = read_rope_scaling(g, arch, &c->rope[MODEL_ROPE_GLOBAL].scale, err, errlen))) return rc;
    c->rope[MODEL_ROPE_LOCAL] = c->rope[MODEL_ROPE_GLOBAL];
    if (c->arch == MODEL_ARCH_GEMMA3) {
        c->rope[MODEL_ROPE_LOCAL] = (model_rope){GEMMA3_LOCAL_ROPE_BASE, 1.0f};
        if ((rc = arch_u32(g, arch, "attention.sliding_window", 0, &c->swa_window, err, errlen))) return rc;
    }
    /* Only gemma3 applies the softcap (Hugging Face's Gemma3ForCausalLM,
     * when its config has one; the converter writes it only then). */
    if (c->arch != MODEL_ARCH_GEMMA3) c->logit_softcap = 0.0f;
    return 0;
}

/* The derived fields (head_dim when no key_length, n_rot, scales), after
 * every dimension is known to be sane. */
static int check_config(model_config *c, char *err, size_t errlen) {
    if (c->dim <= 0 || c->dim > MODEL_MAX_DIM || c->n_layers <= 0 || c->n_layers > MODEL_MAX_LAYERS ||
        c->n_heads <= 0 || c->n_heads > MODEL_MAX_DIM || c->ffn_dim <= 0 || c->ffn_dim > 8 * MODEL_MAX_DIM ||
        c->ctx_len <= 0 || c->ctx_len > SCHED_MAX_CTX)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS,
                       "absurd dimensions: dim %d, layers %d, heads %d, ffn %d, context %d", c->dim,
                       c->n_layers, c->n_heads, c->ffn_dim, c->ctx_len);
    if (!c->head_dim) {
        if (c->dim % c->n_heads)
            return err_set(err, errlen, TS_ERR_MODEL_DIMS,
                           "dim %d does not split into %d heads (and there is no attention.key_length)", c->dim,
                           c->n_heads);
        c->head_dim = c->dim / c->n_heads;
    }
    if (c->head_dim < 2 || c->head_dim > MODEL_MAX_HEAD_DIM || c->head_dim % 2 ||
        (int64_t)c->n_heads * c->head_dim > 4 * (int64_t)MODEL_MAX_DIM)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "head size %d (x %d heads) is not an even size up to %d",
                       c->head_dim, c->n_heads, MODEL_MAX_HEAD_DIM);
    if (!c->n_rot) c->n_rot = c->head_dim;
    if (c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "rope.dimension_count %d is not even and within head size %d",
                       c->n_rot, c->head_dim);
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads)
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "%d query heads do not group over %d kv heads",
                       c->n_heads, c->n_kv_heads);
    for (int r = 0; r < MODEL_ROPE_N; r++)
        if (!(c->rope[r].base > 0) || !isfinite(c->rope[r].base))
            return err_set(err, errlen, TS_ERR_MODEL_DIMS, "rope base %g out of range", (double)c->rope[r].base);
    if (!(c->rms_eps > 0) || c->rms_eps > 1 || !(c->logit_softcap >= 0) || !isfinite(c->logit_softcap))
        return err_set(err, errlen, TS_ERR_MODEL_DIMS, "rms epsilon %g or final logit softcap %g out of range",
                       (double)c->rms_eps, (double)c->logit_softcap);
    c->embd_scale = c->arch == MODEL_ARCH_GEMMA3 ? sqrtf((float)c->dim) : 1.0f;
    /* gemma3 scales q by query_pre_attn_scalar^-1/2, which GGUF does not
     * carry: llama.cpp takes it as head_dim except for the 27B (62 layers),
     * whose scalar is dim / n_heads. The same rule here, so a file gives
     * what llama.cpp gives. Every other arch: 1 / sqrt(head_dim). */
    int qpas = c->head_dim;
    if (c->arch == MODEL_ARCH_GEMMA3 && c->n_layers == 62) qpas = c->dim / c->n_heads;
    c->attn_scale = 1.0f / sqrtf((float)qpas);
    return 0;
}

/* A vector (norm weight, bias, rope divisors) of n elements as f32:
 * pointed at in the mapping when the file stores f32, converted into *pool
 * (which moves past it) otherwise. A missing optional one leaves *out as it
 * was (NULL). */
static int bind_vec(const gguf_ctx *g, const char *name, int64_t n, const float **out, float **pool,
                    int optional, char *err, size_t errlen) {
    if (optional && !gguf_find_tensor(g, name)) return 0;
    ops_mat v;
    int rc = wb_vec(g, name, n, &v, err, errlen);
    if (rc) return rc;
    if (v.type == GGUF_TT_F32) {
        *out = v.data;
        return 0;
    }
    ops_dequant_row(*pool, &v, 0);
    *out = *pool;
    *pool += n;
    return 0;
}

static uint64_t mat_bytes(const ops_mat *m) {
    return gguf_row_bytes(m->type, (uint64_t)m->n_in) * (uint64_t)m->n_out;
}

/* Rows [r0, r0 + n) of m as a matrix of their own: how the fused tensors
 * of phi3 become the q/k/v and gate/up matrices. Rows are whole blocks of
 * any type, so the view starts on a row boundary of the file's layout. */
static ops_mat mat_rows(const ops_mat *m, int64_t r0, int64_t n) {
    ops_mat v = *m;
    v.data = (const char *)m->data + (size_t)r0 * gguf_row_bytes(m->type, (uint64_t)m->n_in);
    v.n_out = n;
    return v;
}

#define NAME(s) (snprintf(n, sizeof(n), "blk.%d.%s", l, s), n)

/* q, k, v: separate tensors, or (phi3) one attn_qkv of their rows stacked. */
static int bind_attn(model *m, int l, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    model_layer *L = &m->layers[l];
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    char n[96];
    int rc;
    if (c->arch == MODEL_ARCH_PHI3 && gguf_find_tensor(m->gguf, NAME("attn_qkv.weight"))) {
        ops_mat qkv;
        if ((rc = wb_mat(m->gguf, n, qd + 2 * kvd, c->dim, &qkv, err, errlen))) return rc;
        L->wq = mat_rows(&qkv, 0, qd);
        L->wk = mat_rows(&qkv, qd, kvd);
        L->wv = mat_rows(&qkv, qd + kvd, kvd);
    } else if ((rc = wb_mat(m->gguf, NAME("attn_q.weight"), qd, c->dim, &L->wq, err, errlen)) ||
               (rc = wb_mat(m->gguf, NAME("attn_k.weight"), kvd, c->dim, &L->wk, err, errlen)) ||
               (rc = wb_mat(m->gguf, NAME("attn_v.weight"), kvd, c->dim, &L->wv, err, errlen))) {
        return rc;
    }
    return wb_mat(m->gguf, NAME("attn_output.weight"), c->dim, qd, &L->wo, err, errlen);
}

/* gate and up: separate tensors, or (phi3) one ffn_up of 2 * ffn_dim rows,
 * the gate first: llama.cpp's LLM_FFN_SWIGLU over a fused up applies silu
 * to the first half, as Hugging Face's Phi3MLP chunks gate_up_proj. */
static int bind_ffn(model *m, int l, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    model_layer *L = &m->layers[l];
    char n[96];
    int rc;
    if (c->arch == MODEL_ARCH_PHI3) {
        ops_mat up;
        if ((rc = wb_mat(m->gguf, NAME("ffn_up.weight"), 2 * (int64_t)c->ffn_dim, c->dim, &up, err, errlen)))
            return rc;
        L->w_gate = mat_rows(&up, 0, c->ffn_dim);
        L->w_up = mat_rows(&up, c->ffn_dim, c->ffn_dim);
    } else if ((rc = wb_mat(m->gguf, NAME("ffn_gate.weight"), c->ffn_dim, c->dim, &L->w_gate, err, errlen)) ||
               (rc = wb_mat(m->gguf, NAME("ffn_up.weight"), c->ffn_dim, c->dim, &L->w_up, err, errlen))) {
        return rc;
    }
    return wb_mat(m->gguf, NAME("ffn_down.weight"), c->dim, c->ffn_dim, &L->w_down, err, errlen);
}

/* The norms and biases of layer l; which are required depends on the arch,
 * and one that the arch does not use is not looked for (as llama.cpp). */
static int bind_layer_vecs(model *m, int l, float **pool, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    const gguf_ctx *g = m->gguf;
    model_layer *L = &m->layers[l];
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    /* qwen2 has q/k/v biases; llama may (llama.cpp binds them optionally). */
    const int bias = c->arch == MODEL_ARCH_QWEN2 || c->arch == MODEL_ARCH_LLAMA, opt = c->arch != MODEL_ARCH_QWEN2;
    const int qk = c->arch == MODEL_ARCH_QWEN3 || c->arch == MODEL_ARCH_GEMMA3;
    const int post = c->arch == MODEL_ARCH_GEMMA3;
    char n[96];
    int rc;
    if ((rc = bind_vec(g, NAME("attn_norm.weight"), c->dim, &L->attn_norm, pool, 0, err, errlen)) ||
        (rc = bind_vec(g, NAME("ffn_norm.weight"), c->dim, &L->ffn_norm, pool, 0, err, errlen)))
        return rc;
    if (bias && ((rc = bind_vec(g, NAME("attn_q.bias"), qd, &L->bq, pool, opt, err, errlen)) ||
                 (rc = bind_vec(g, NAME("attn_k.bias"), kvd, &L->bk, pool, opt, err, errlen)) ||
                 (rc = bind_vec(g, NAME("attn_v.bias"), kvd, &L->bv, pool, opt, err, errlen))))
        return rc;
    if (qk && ((rc = bind_vec(g, NAME("attn_q_norm.weight"), c->head_dim, &L->q_norm, pool, 0, err, errlen)) ||
               (rc = bind_vec(g, NAME("attn_k_norm.weight"), c->head_dim, &L->k_norm, pool, 0, err, errlen))))
        return rc;
    if (post &&
        ((rc = bind_vec(g, NAME("post_attention_norm.weight"), c->dim, &L->attn_post_norm, pool, 0, err, errlen)) ||
         (rc = bind_vec(g, NAME("post_ffw_norm.weight"), c->dim, &L->ffn_post_norm, pool, 0, err, errlen))))
        return rc;
    return 0;
}
#undef NAME

static int bind_layer(model *m, int l, float **pool, char *err, size_t errlen) {
    model_layer *L = &m->layers[l];
    int rc;
    L->swa = layer_is_swa(&m->cfg, l);
    if ((rc = bind_attn(m, l, err, errlen)) || (rc = bind_ffn(m, l, err, errlen)) ||
        (rc = bind_layer_vecs(m, l, pool, err, errlen)))
        return rc;
    m->weight_bytes += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
                       mat_bytes(&L->w_gate) + mat_bytes(&L->w_up) + mat_bytes(&L->w_down);
    return 0;
}

/* The phi3 longrope factors (the 128k Phi-3 variants pick long or short
 * factors by context and rescale attention): tessera does not run them,
 * so such a file is refused by name rather than run as a 4k model. */
static int refuse_longrope(const gguf_ctx *g, char *err, size_t errlen) {
    static const char *const longrope[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++)
        if (gguf_find_tensor(g, longrope[i]))
            return err_set(err, errlen, TS_ERR_MODEL_ARCH,
                           "tensor %s: long-context 'longrope' scaling (the 128k Phi-3 variants) is not supported",
                           longrope[i]);
    return 0;
}

/* Llama 3.1+'s rope_freqs (per-frequency divisors, written by the
 * converter for rope_type llama3) on the llama arch. The other archs'
 * builders in llama.cpp take no factors, so none are looked for. */
static int bind_rope_freqs(model *m, float **pool, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    if (c->arch != MODEL_ARCH_LLAMA) return 0;
    int rc = bind_vec(m->gguf, "rope_freqs.weight", c->n_rot / 2, &m->rope_freqs, pool, 1, err, errlen);
    for (int i = 0; !rc && m->rope_freqs && i < c->n_rot / 2; i++)
        if (!(m->rope_freqs[i] > 0) || !isfinite(m->rope_freqs[i]))
            return err_set(err, errlen, TS_ERR_MODEL_DIMS, "rope_freqs.weight[%d] = %g: divisors must be positive",
                           i, (double)m->rope_freqs[i]);
    return rc;
}

static int bind_all(model *m, char *err, size_t errlen) {
    model_config *c = &m->cfg;
    int rc = refuse_longrope(m->gguf, err, errlen);
    if (rc) return rc;
    const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor token_embd.weight missing");
    if (te->n_dims != 2 || te->ne[1] > MODEL_MAX_VOCAB)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "token_embd.weight: bad shape");
    c->vocab = (int)te->ne[1];
    if ((rc = wb_mat(m->gguf, "token_embd.weight", c->vocab, c->dim, &m->tok_embd, err, errlen))) return rc;
    /* Vectors converted to f32 at most: per layer four norms of dim, three
     * biases, two head norms; the output norm; the rope divisors. */
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    size_t per_layer = 4 * (size_t)c->dim + qd + 2 * kvd + 2 * (size_t)c->head_dim;
    size_t pool_n = (size_t)c->dim + per_layer * (size_t)c->n_layers + (size_t)c->n_rot / 2;
    m->f32_owned_bytes = pool_n * sizeof(float);
    m->f32_owned = malloc(m->f32_owned_bytes);
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (!m->f32_owned || !m->layers) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    float *pool = m->f32_owned;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = bind_layer(m, l, &pool, err, errlen))) return rc;
    if ((rc = bind_vec(m->gguf, "output_norm.weight", c->dim, &m->out_norm, &pool, 0, err, errlen)) ||
        (rc = bind_rope_freqs(m, &pool, err, errlen)))
        return rc;
    if (!gguf_find_tensor(m->gguf, "output.weight")) m->output = m->tok_embd; /* tied embeddings */
    else if ((rc = wb_mat(m->gguf, "output.weight", c->vocab, c->dim, &m->output, err, errlen))) return rc;
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
    if (!rc) rc = bind_all(m, err, errlen);
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

uint64_t model_resident_bytes(const model *m) {
    return gguf_resident_bytes(m->gguf) + m->f32_owned_bytes;
}

size_t model_kv_bytes_per_token(const model_config *c, size_t elem_bytes) {
    return 2 * (size_t)c->n_layers * (size_t)c->n_kv_heads * (size_t)c->head_dim * elem_bytes;
}
