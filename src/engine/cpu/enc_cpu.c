/*
 * enc_cpu.c - the BERT encoder's forward pass on the CPU; the equations are
 * in enc.h.
 *
 * One call embeds a batch of sequences whose T tokens are flattened into
 * rows of one activation matrix, so every dense product (q/k/v, output,
 * up, down) is one ops_matmul over all T rows. Attention is the only
 * per-sequence part: a token attends to every token of its own sequence
 * (a contiguous run of rows) and to nothing else. So a sequence's vector
 * is the same, bit for bit, in any batch of the same total token count;
 * across batch sizes it is not, because ops_matmul picks its method by T
 * (F32/F16/BF16 change kernels at 13 rows and go to sgemm above 16; Q8_0
 * takes its tiled kernel from 6 rows) and the methods sum in different
 * orders. Measured on the tiny models of tests/embed_ref.sh: up to 2.4e-7
 * per element in f32 and f16; in q8_0 such an ulp can flip an activation's
 * int8 rounding, up to 2.7e-3. Bit-exact invariance across sizes would need
 * one method at every T (ops_matmul_ref is one, and scalar).
 *
 * The whole call is one OpenMP parallel region, as in cpu_backend.c: each
 * phase below is shared out among the team and ends at one barrier.
 *
 * LayerNorm and the exact GELU are written here because ops.h has neither
 * (a llama has RMSNorm and SiLU); they are small, per-row and static.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "enc.h"
#include "err.h"
#include "ops.h"

#define ENC_MAX_TOKENS (1 << 24)

struct enc_state {
    const enc_model *m;
    int max_T;              /* tokens per call, all sequences together */
    int max_seq;            /* tokens of the longest sequence: min(ctx_len, max_T) */
    int n_threads;
    float *x;               /* (max_T, dim) hidden state */
    float *xb;              /* (max_T, dim) a product's output before its residual add */
    float *qkv;             /* (max_T, 3 * dim) q | k | v of each token */
    float *att;             /* (max_T, dim) attention output, heads side by side */
    float *hb;              /* (max_T, ffn_dim) the feed-forward's hidden layer */
    float *scores;          /* (n_threads, max_seq) one head's attention weights */
    int32_t *tok_seq;       /* (max_T) sequence of each flattened token */
    int32_t *tok_pos;       /* (max_T) position of each flattened token */
    int32_t *seq_start;     /* (max_T + 1) first flattened token of each sequence */
    ops_scratch *mm;
};

static void *xalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    return p;
}

void enc_state_free(enc_state *s) {
    if (!s) return;
    free(s->x); free(s->xb); free(s->qkv); free(s->att); free(s->hb); free(s->scores);
    free(s->tok_seq); free(s->tok_pos); free(s->seq_start);
    ops_scratch_free(s->mm);
    free(s);
}

int enc_state_new(const enc_model *m, int max_tokens, int n_threads, enc_state **out, char *err, size_t errlen) {
    *out = NULL;
    if (max_tokens < 1 || max_tokens > ENC_MAX_TOKENS)
        return err_set(err, errlen, TS_ERR_INVAL, "max_tokens %d is out of range (1..%d)", max_tokens,
                       ENC_MAX_TOKENS);
    const enc_config *c = &m->cfg;
    enc_state *s = calloc(1, sizeof(*s));
    if (!s) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    s->m = m;
    s->max_T = max_tokens;
    s->max_seq = c->ctx_len < max_tokens ? c->ctx_len : max_tokens;
    s->n_threads = ops_set_threads(n_threads);
    const size_t T = (size_t)max_tokens, d = (size_t)c->dim;
    s->x = xalloc(T * d * sizeof(float));
    s->xb = xalloc(T * d * sizeof(float));
    s->qkv = xalloc(T * 3 * d * sizeof(float));
    s->att = xalloc(T * d * sizeof(float));
    s->hb = xalloc(T * (size_t)c->ffn_dim * sizeof(float));
    s->scores = xalloc((size_t)s->n_threads * (size_t)s->max_seq * sizeof(float));
    s->tok_seq = xalloc(T * sizeof(int32_t));
    s->tok_pos = xalloc(T * sizeof(int32_t));
    s->seq_start = xalloc((T + 1) * sizeof(int32_t));
    s->mm = ops_scratch_new(max_tokens, c->dim > c->ffn_dim ? c->dim : c->ffn_dim, s->n_threads);
    if (!s->x || !s->xb || !s->qkv || !s->att || !s->hb || !s->scores || !s->tok_seq || !s->tok_pos ||
        !s->seq_start || !s->mm) {
        enc_state_free(s);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory for an encoder state of %d tokens", max_tokens);
    }
    *out = s;
    return 0;
}

int enc_state_max_tokens(const enc_state *s) { return s->max_T; }

/* out = (x - mean) / sqrt(var + eps) * w + b over n elements; out may
 * alias x. Mean and variance in double, two passes: BERT's eps (1e-12) is
 * far below float's resolution, so a one-pass E[x^2] - E[x]^2 in float
 * could go negative on a near-constant row. */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    const double inv = 1.0 / sqrt(var / n + (double)eps);
    for (int i = 0; i < n; i++) out[i] = (float)(((double)x[i] - mean) * inv) * w[i] + b[i];
}

/* BERT's GELU is the exact one, x * Phi(x), not the tanh approximation
 * (GPT-2's, and llama.cpp's default ggml_gelu). */
static inline float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
}

/* Checks the batch and flattens it: token -> (sequence, position). Serial:
 * a few integers per token. Returns T, or a negative code. */
static int flatten(enc_state *s, const int32_t *const *tokens, const int *n_tokens, int n_seqs, char *err,
                   size_t errlen) {
    const enc_config *c = &s->m->cfg;
    if (n_seqs < 1 || !tokens || !n_tokens)
        return err_set(err, errlen, TS_ERR_INVAL, "a batch needs at least one sequence (got %d)", n_seqs);
    int64_t total = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (n_tokens[i] < 1 || !tokens[i])
            return err_set(err, errlen, TS_ERR_INVAL, "sequence %d is empty", i);
        if (n_tokens[i] > c->ctx_len)
            return err_set(err, errlen, TS_ERR_CTX_LIMIT, "sequence %d has %d tokens, more than the context length %d",
                           i, n_tokens[i], c->ctx_len);
        total += n_tokens[i];
        if (total > s->max_T)
            return err_set(err, errlen, TS_ERR_BATCH_LIMIT, "the batch has more than %d tokens (at sequence %d)",
                           s->max_T, i);
        for (int j = 0; j < n_tokens[i]; j++)
            if (tokens[i][j] < 0 || tokens[i][j] >= c->vocab)
                return err_set(err, errlen, TS_ERR_TOK_RANGE, "sequence %d, token %d: id %d is outside [0, %d)", i, j,
                               tokens[i][j], c->vocab);
    }
    int T = 0;
    for (int i = 0; i < n_seqs; i++) {
        s->seq_start[i] = T;
        for (int j = 0; j < n_tokens[i]; j++, T++) {
            s->tok_seq[T] = i;
            s->tok_pos[T] = j;
        }
    }
    s->seq_start[n_seqs] = T;
    return T;
}

/* x = LN0(tok_embd[id] + pos_embd[p] + token_types[0]) per token. */
static void embed(enc_state *s, const int32_t *const *tokens, int T) {
    const enc_model *m = s->m;
    const int d = m->cfg.dim;
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * d, *tmp = s->xb + (size_t)t * d;
        ops_dequant_row(x, &m->tok_embd, tokens[s->tok_seq[t]][s->tok_pos[t]]);
        ops_dequant_row(tmp, &m->pos_embd, s->tok_pos[t]);
        ops_add(x, tmp, d);
        ops_add(x, m->type0, d);
        layernorm(x, x, m->ln0_w, m->ln0_b, d, m->cfg.ln_eps);
    }
}

/* qkv = x [Wq | Wk | Wv]^T + [bq | bk | bv], one row per token. */
static void qkv_proj(enc_state *s, const enc_layer *L, int T) {
    const int64_t d = s->m->cfg.dim, d3 = 3 * d;
    if (L->fused) {
        ops_matmul(s->qkv, d3, s->x, T, &L->wqkv, s->mm);
    } else {
        float *y[3] = {s->qkv, s->qkv + d, s->qkv + 2 * d};
        const int64_t ld[3] = {d3, d3, d3};
        const ops_mat *w[3] = {&L->wq, &L->wk, &L->wv};
        ops_matmul_n(3, y, ld, s->x, T, w, s->mm);
    }
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) ops_add(s->qkv + (size_t)t * d3, L->bqkv, (int)d3);
}

/* Work items are (token, head): each attends over its own sequence's
 * rows of qkv, whose keys and values are 3 * dim floats apart. */
static void attention(enc_state *s, int T) {
    const enc_config *c = &s->m->cfg;
    const int H = c->n_heads, hd = c->head_dim;
    const int64_t d = c->dim, d3 = 3 * d;
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = s->scores + (size_t)omp_get_thread_num() * (size_t)s->max_seq;
    #pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < (int64_t)T * H; it++) {
        const int t = (int)(it / H), h = (int)(it % H), q = s->tok_seq[t];
        const int start = s->seq_start[q], n = s->seq_start[q + 1] - start;
        const float *qt = s->qkv + (size_t)t * d3 + (size_t)h * hd;
        const float *k0 = s->qkv + (size_t)start * d3 + d + (size_t)h * hd;
        float *out = s->att + (size_t)t * d + (size_t)h * hd;
        ops_attn_scores(sc, qt, k0, d3, n, hd, scale, NULL, 0);
        ops_softmax(sc, n);
        memset(out, 0, (size_t)hd * sizeof(float));
        ops_attn_mix(out, sc, k0 + d, d3, n, hd, NULL, 0);
    }
}

/* x = LN(x + xb + bias) per token: a residual with its product's bias. */
static void residual_norm(enc_state *s, const float *bias, const float *w, const float *b, int T) {
    const int d = s->m->cfg.dim;
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * d, *xb = s->xb + (size_t)t * d;
        ops_add(xb, bias, d);
        ops_add(x, xb, d);
        layernorm(x, x, w, b, d, s->m->cfg.ln_eps);
    }
}

static void layer_forward(enc_state *s, const enc_layer *L, int T) {
    const int64_t d = s->m->cfg.dim, f = s->m->cfg.ffn_dim;
    qkv_proj(s, L, T);
    attention(s, T);
    ops_matmul(s->xb, d, s->att, T, &L->wo, s->mm);
    residual_norm(s, L->bo, L->ln1_w, L->ln1_b, T);
    ops_matmul(s->hb, f, s->x, T, &L->w_up, s->mm);
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        float *h = s->hb + (size_t)t * f;
        for (int64_t i = 0; i < f; i++) h[i] = gelu_erf(h[i] + L->b_up[i]);
    }
    ops_matmul(s->xb, d, s->hb, T, &L->w_down, s->mm);
    residual_norm(s, L->b_down, L->ln2_w, L->ln2_b, T);
}

/* out[i] = pool(x over sequence i) / its L2 norm; sums in double. */
static void pool(enc_state *s, int n_seqs, float *out) {
    const enc_config *c = &s->m->cfg;
    const int d = c->dim;
    #pragma omp for schedule(static)
    for (int i = 0; i < n_seqs; i++) {
        const int start = s->seq_start[i], n = s->seq_start[i + 1] - start;
        float *o = out + (size_t)i * d;
        double ss = 0;
        for (int e = 0; e < d; e++) {
            double v;
            if (c->pooling == ENC_POOL_MEAN) {
                v = 0;
                for (int j = 0; j < n; j++) v += s->x[(size_t)(start + j) * d + e];
                v /= n;
            } else {
                const int row = c->pooling == ENC_POOL_CLS ? start : start + n - 1;
                v = s->x[(size_t)row * d + e];
            }
            o[e] = (float)v;
            ss += v * v;
        }
        const double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
        for (int e = 0; e < d; e++) o[e] = (float)(o[e] * inv);
    }
}

int enc_embed(enc_state *s, const int32_t *const *tokens, const int *n_tokens, int n_seqs, float *out, char *err,
              size_t errlen) {
    const int T = flatten(s, tokens, n_tokens, n_seqs, err, errlen);
    if (T < 0) return T;
    const enc_model *m = s->m;
    #pragma omp parallel num_threads(s->n_threads)
    {
        embed(s, tokens, T);
        for (int l = 0; l < m->cfg.n_layers; l++) layer_forward(s, &m->layers[l], T);
        pool(s, n_seqs, out);
    }
    return 0;
}
