/*
 * cpu_backend.c - the reference backend: the forward pass of every model.h
 * architecture on the CPU, over a paged KV cache in host memory.
 *
 * One step, for T tokens flattened across the batch's sequences (the
 * bracketed parts are those of some architectures only):
 *   x = embed(tokens) [* sqrt(dim): gemma3]                    (T, dim)
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)       (T, qd), (T, kvd) x2
 *     [q, k = per-head rmsnorm(q) * q_norm, (k) * k_norm: qwen3, gemma3]
 *     rotate q, k by position (the layer's rope: gemma3's sliding-window
 *     layers have their own); store k, v into each sequence's blocks
 *     att = per token, per head: softmax(q . K[lo..pos] * attn_scale) V,
 *           lo = 0, or pos - window + 1 on a sliding-window layer
 *     a = att Wo^T  [a = rmsnorm(a) * attn_post_norm: gemma3];  x += a
 *     h = rmsnorm(x) * ffn_norm
 *     f = (act(h Wgate^T) * h Wup^T) Wdown^T, act silu or gelu_tanh
 *     [f = rmsnorm(f) * ffn_post_norm: gemma3];  x += f
 *   logits = rmsnorm(x[rows wanted]) * out_norm  Wout^T  [softcapped: gemma3]
 * The dense products see all T tokens at once (that is what batching buys);
 * attention is the only per-sequence part. K/V of a step's tokens are stored
 * before attention runs, so a prefill chunk attends causally to itself.
 *
 * The step runs in one OpenMP parallel region; every phase above is shared
 * out among the team and ends at one barrier. A decode-only step (one
 * token per sequence) does a token's rotate-and-store inside its
 * attention items, one phase and barrier fewer.
 *
 * Cache layout, per block: [layer][k|v][kv head][slot][head_dim] of f16
 * or f32 (the engine's kv_dtype), so one block is one contiguous range and
 * swapping it is one memcpy, and one kv head's keys (or values) in a block
 * are one contiguous run that attention streams through. An f16 cache
 * rounds each key and value once, as it is stored; attention widens them
 * as it reads (ops_attn_*_f16).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "clock.h"
#include "err.h"
#include "ops.h"

/* Bytes of attention scores one thread holds at most (unless one kv
 * head's group over the whole context needs more): items take runs of kv
 * heads so those heads share each cache block's rows, up to this. */
#define ATT_SCORES_BYTES ((size_t)1 << 20)

typedef struct cpu_state {
    const model *m;
    int bs;                 /* block size (positions) */
    int n_blocks;
    int max_T;              /* tokens per step */
    int max_ctx;            /* positions one sequence can attend to */
    int n_threads;
    size_t block_elems;     /* elements per block: n_layers * 2 * bs * kvd */
    size_t esz;             /* bytes per element: 2 (f16) or 4 (f32) */
    void *kv;               /* (n_blocks, n_layers, 2, n_kv_heads, bs, head_dim) */
    /* activations, (max_T, width) each */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
    int n_rope;             /* rope settings in use: 1, or 2 with sliding-window layers */
    float *rope_cos, *rope_sin; /* (n_rope, max_T, n_rot / 2) */
    double *inv_freq;       /* (n_rope, n_rot / 2): angle per position, scaling
                             * and rope_freqs divisors folded in */
    int att_kv_max;         /* most kv heads one attention item takes (their
                             * scores fit ATT_SCORES_BYTES, or one kv head) */
    float *scores;          /* (n_threads, att_kv_max * group, max_ctx) */
    int32_t *tok_seq;       /* (max_T) sequence index of each flattened token */
    int32_t *tok_pos;       /* (max_T) position of each flattened token */
    int32_t *out_tok;       /* (max_T) flattened token of each logits row */
    ops_scratch *mm;
    uint64_t held;          /* bytes allocated above (xalloc) and in mm */
    double compute_s;       /* wall time of the forward passes */
    uint64_t forwards;
} cpu_state;

static void *xalloc(cpu_state *s, size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) return NULL;
    s->held += n ? n : 64;
    return p;
}

static void cpu_destroy(void *st) {
    cpu_state *s = st;
    if (!s) return;
    free(s->kv);
    free(s->x); free(s->xb); free(s->q); free(s->k); free(s->v);
    free(s->att); free(s->hb); free(s->hb2);
    free(s->rope_cos); free(s->rope_sin); free(s->inv_freq);
    free(s->scores); free(s->tok_seq); free(s->tok_pos); free(s->out_tok);
    ops_scratch_free(s->mm);
    free(s);
}

/* theta_i = base^(-2i / n_rot) * scale [/ rope_freqs[i]] per position, in
 * double: at position 128k a float frequency's last-bit error alone moves
 * the angle by ~1e-2 rad. Only the global setting takes the rope_freqs
 * divisors (llama's; gemma3, the one arch with a local setting, has none). */
static void rope_inv_freq(cpu_state *s) {
    const model_config *c = &s->m->cfg;
    const int half = c->n_rot / 2;
    for (int r = 0; r < s->n_rope; r++)
        for (int i = 0; i < half; i++) {
            double f = pow((double)c->rope[r].base, -2.0 * (double)i / (double)c->n_rot) * (double)c->rope[r].scale;
            if (r == MODEL_ROPE_GLOBAL && s->m->rope_freqs) f /= (double)s->m->rope_freqs[i];
            s->inv_freq[(size_t)r * half + i] = f;
        }
}

static int cpu_create(const model *m, eng_opts *o, int n_blocks, void **out, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    cpu_state *s = calloc(1, sizeof(*s));
    if (!s) goto err;
    s->m = m;
    s->bs = o->block_size;
    s->n_blocks = n_blocks;
    s->max_T = o->max_batch_tokens;
    s->n_threads = ops_set_threads(o->n_threads);
    o->n_threads = s->n_threads;
    int64_t cap = (int64_t)n_blocks * s->bs;
    s->max_ctx = cap < c->ctx_len ? (int)cap : c->ctx_len;
    size_t T = (size_t)s->max_T, qd = (size_t)c->n_heads * c->head_dim;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim, half = (size_t)c->n_rot / 2;
    s->n_rope = c->swa_window > 0 ? MODEL_ROPE_N : 1;
    s->block_elems = (size_t)c->n_layers * 2 * (size_t)s->bs * kvd;
    s->esz = o->kv_dtype == ENG_KV_F16 ? sizeof(uint16_t) : sizeof(float);
    s->kv = xalloc(s, (size_t)n_blocks * s->block_elems * s->esz);
    s->x = xalloc(s, T * c->dim * sizeof(float));
    s->xb = xalloc(s, T * (qd > (size_t)c->dim ? qd : (size_t)c->dim) * sizeof(float));
    s->q = xalloc(s, T * qd * sizeof(float));
    s->k = xalloc(s, T * kvd * sizeof(float));
    s->v = xalloc(s, T * kvd * sizeof(float));
    s->att = xalloc(s, T * qd * sizeof(float));
    /* hb also takes the final norms of the logits rows: (max_T, dim). */
    s->hb = xalloc(s, T * (size_t)(c->ffn_dim > c->dim ? c->ffn_dim : c->dim) * sizeof(float));
    s->hb2 = xalloc(s, T * c->ffn_dim * sizeof(float));
    s->rope_cos = xalloc(s, (size_t)s->n_rope * T * half * sizeof(float));
    s->rope_sin = xalloc(s, (size_t)s->n_rope * T * half * sizeof(float));
    s->inv_freq = xalloc(s, (size_t)s->n_rope * half * sizeof(double));
    const int group = c->n_heads / c->n_kv_heads;
    s->att_kv_max = (int)(ATT_SCORES_BYTES / sizeof(float) / (size_t)s->max_ctx / (size_t)group);
    if (s->att_kv_max < 1) s->att_kv_max = 1;
    if (s->att_kv_max > c->n_kv_heads) s->att_kv_max = c->n_kv_heads;
    s->scores = xalloc(s, (size_t)s->n_threads * (size_t)s->att_kv_max * (size_t)group * (size_t)s->max_ctx *
                       sizeof(float));
    s->tok_seq = xalloc(s, T * sizeof(int32_t));
    s->tok_pos = xalloc(s, T * sizeof(int32_t));
    s->out_tok = xalloc(s, T * sizeof(int32_t));
    int64_t widest = c->dim > c->ffn_dim ? c->dim : c->ffn_dim;
    if ((int64_t)qd > widest) widest = (int64_t)qd;
    s->mm = ops_scratch_new(s->max_T, widest, s->n_threads);
    if (s->mm) s->held += ops_scratch_bytes(s->mm);
    if (!s->kv || !s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 ||
        !s->rope_cos || !s->rope_sin || !s->inv_freq || !s->scores || !s->tok_seq || !s->tok_pos || !s->out_tok ||
        !s->mm)
        goto err;
    /* Fresh cache memory is zeroed so a block read before it is written
     * (which validation prevents) could at worst give zeros, not garbage. */
    memset(s->kv, 0, (size_t)n_blocks * s->block_elems * s->esz);
    rope_inv_freq(s);
    *out = s;
    return 0;
err:
    err_set(err, errlen, TS_ERR_NOMEM, "out of memory for the CPU engine (%d KV blocks of %zu bytes)", n_blocks,
            s ? s->block_elems * s->esz : 0);
    cpu_destroy(s);
    return TS_ERR_NOMEM;
}

/* Flatten the batch: token -> (sequence, position), and the rows whose
 * logits were asked for. Serial: a few integers per token. */
static int flatten(cpu_state *s, const eng_batch *b, int *n_rows) {
    int T = 0, rows = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        const eng_seq *q = &b->seqs[i];
        for (int j = 0; j < q->n_tokens; j++, T++) {
            s->tok_seq[T] = i;
            s->tok_pos[T] = q->pos + j;
            if (q->logits == ENG_LOGITS_ALL || (q->logits == ENG_LOGITS_LAST && j == q->n_tokens - 1))
                s->out_tok[rows++] = T;
        }
    }
    *n_rows = rows;
    return T;
}

/* The rotary angles of every token, once for all layers. Angles in double:
 * at position 100k a float product p * inv_freq has lost the low digits
 * the sine needs. Worksharing without a barrier: the first use is layers
 * later. */
static void rope_tables(cpu_state *s, int T) {
    const int half = s->m->cfg.n_rot / 2;
    const size_t plane = (size_t)s->max_T * half;
    #pragma omp for schedule(static) nowait
    for (int t = 0; t < T; t++)
        for (int r = 0; r < s->n_rope; r++)
            for (int i = 0; i < half; i++) {
                double a = (double)s->tok_pos[t] * s->inv_freq[(size_t)r * half + i];
                s->rope_cos[r * plane + (size_t)t * half + i] = (float)cos(a);
                s->rope_sin[r * plane + (size_t)t * half + i] = (float)sin(a);
            }
}

static void embed(cpu_state *s, const eng_batch *b, int T) {
    const int dim = s->m->cfg.dim;
    const float scale = s->m->cfg.embd_scale;
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        const eng_seq *q = &b->seqs[s->tok_seq[t]];
        float *x = s->x + (size_t)t * dim;
        ops_dequant_row(x, &s->m->tok_embd, q->tokens[s->tok_pos[t] - q->pos]);
        if (scale != 1.0f)
            for (int i = 0; i < dim; i++) x[i] *= scale;
    }
}

/* Rotate the first n_rot elements of one head vector in place (the rest,
 * under partial rotary, stay). llama-arch GGUF files pair adjacent
 * elements (2i, 2i+1) because the converter permutes Wq/Wk; NeoX-style
 * models (qwen2/3, gemma3, phi3) pair i with i + n_rot/2. */
static void rope_head(float *v, const float *cs, const float *sn, int n_rot, int neox) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        int a = neox ? i : 2 * i, bi = neox ? i + half : 2 * i + 1;
        float x0 = v[a], x1 = v[bi];
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[bi] = x0 * sn[i] + x1 * cs[i];
    }
}

/* Kv head g's row at a block's slot, keys (which 0) or values (1). */
static void *kv_slot(const cpu_state *s, int block, int layer, int which, int g, int slot) {
    const model_config *c = &s->m->cfg;
    const size_t run = ((size_t)layer * 2 + (size_t)which) * (size_t)c->n_kv_heads + (size_t)g;
    return (char *)s->kv +
           ((size_t)block * s->block_elems + (run * (size_t)s->bs + (size_t)slot) * (size_t)c->head_dim) * s->esz;
}

/* Store n floats at a cache row, rounded to f16 for an f16 cache. */
static void kv_store(const cpu_state *s, void *row, const float *x, size_t n) {
    if (s->esz == sizeof(uint16_t)) ops_f32_to_f16_row(row, x, (int)n);
    else memcpy(row, x, n * sizeof(float));
}

/* One token's kv heads [g0, g1) and their query heads: add the q/k/v
 * biases (qwen2), normalize each head of q and k (qwen3, gemma3), rotate
 * q and k by the layer's rope, then store k and v at the token's cache
 * slot. Head by head, so the work splits by heads as well as by tokens. */
static void prep_heads(cpu_state *s, const eng_batch *b, const model_layer *L, int layer, int t, int g0, int g1) {
    const model_config *c = &s->m->cfg;
    const int hd = c->head_dim, half = c->n_rot / 2, group = c->n_heads / c->n_kv_heads;
    const size_t qd = (size_t)c->n_heads * hd, kvd = (size_t)c->n_kv_heads * hd;
    const size_t plane = (L->swa ? MODEL_ROPE_LOCAL : MODEL_ROPE_GLOBAL) * (size_t)s->max_T * half;
    const float *cs = s->rope_cos + plane + (size_t)t * half, *sn = s->rope_sin + plane + (size_t)t * half;
    const eng_seq *sq = &b->seqs[s->tok_seq[t]];
    const int p = s->tok_pos[t], blk = sq->blocks[p / s->bs], slot = p % s->bs;
    for (int h = g0 * group; h < g1 * group; h++) {
        float *q = s->q + (size_t)t * qd + (size_t)h * hd;
        if (L->bq) ops_add(q, L->bq + (size_t)h * hd, hd);
        if (L->q_norm) ops_rmsnorm_heads(q, L->q_norm, 1, hd, c->rms_eps);
        rope_head(q, cs, sn, c->n_rot, c->rope_neox);
    }
    for (int g = g0; g < g1; g++) {
        float *k = s->k + (size_t)t * kvd + (size_t)g * hd, *v = s->v + (size_t)t * kvd + (size_t)g * hd;
        if (L->bk) ops_add(k, L->bk + (size_t)g * hd, hd);
        if (L->bv) ops_add(v, L->bv + (size_t)g * hd, hd);
        if (L->k_norm) ops_rmsnorm_heads(k, L->k_norm, 1, hd, c->rms_eps);
        rope_head(k, cs, sn, c->n_rot, c->rope_neox);
        kv_store(s, kv_slot(s, blk, layer, 0, g, slot), k, (size_t)hd);
        kv_store(s, kv_slot(s, blk, layer, 1, g, slot), v, (size_t)hd);
    }
}

/* Every token's heads, before attention reads the cache: a prefill
 * chunk's tokens attend to each other's keys. */
static void rope_and_store(cpu_state *s, const eng_batch *b, const model_layer *L, int layer, int T) {
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) prep_heads(s, b, L, layer, t, 0, s->m->cfg.n_kv_heads);
}

/* The run of kv head g in cache block blk (keys: which 0, values: 1) that
 * the attention kernels prefetch while they sum the run before it: n
 * positions from slot (those of the block), their bytes in *bytes. The
 * next block of a sequence lies anywhere in the pool, where no hardware
 * prefetcher looks. */
static const void *next_run(const cpu_state *s, int blk, int layer, int which, int g, int slot, int n,
                            size_t *bytes) {
    if (n > s->bs - slot) n = s->bs - slot;
    *bytes = (size_t)n * (size_t)s->m->cfg.head_dim * s->esz;
    return kv_slot(s, blk, layer, which, g, slot);
}

/* The query heads of kv heads [g0, g1) of one token over its sequence's
 * cached positions lo..p: lo = 0, or on a sliding-window layer the first
 * position inside the window (p - window + 1). The positions before lo are
 * masked by not being read: their blocks stay in the table (the scheduler
 * accounts for them as before), and a softmax over lo..p is the softmax of
 * the masked row. A cache block holds bs consecutive positions of each kv
 * head in one run: the loops go block by block with the heads inside, so
 * the runs of the item's heads are read in the order they lie, and while
 * a kv head's run is summed its run in the next block is prefetched (the
 * first query head of its group does), and during the last block of keys
 * the first block of values. qt, out: the token's (n_heads * hd) queries
 * and outputs; sc: (heads, p + 1) scratch. */
static void attend_heads(cpu_state *s, const eng_seq *q, int layer, int p, const float *qt, int g0, int g1,
                         float *out, float *sc) {
    const model_config *c = &s->m->cfg;
    const int hd = c->head_dim, bs = s->bs, group = c->n_heads / c->n_kv_heads;
    const int lo = s->m->layers[layer].swa && p >= c->swa_window ? p - c->swa_window + 1 : 0, n = p + 1 - lo;
    const int h0 = g0 * group, h1 = g1 * group;
    const float scale = c->attn_scale;
    const int half = s->esz == sizeof(uint16_t);
    /* chunks of positions [j, j + len) within one block each, from lo */
    for (int j = lo, len; j <= p; j += len) {
        const int off = j % bs;
        len = bs - off < p + 1 - j ? bs - off : p + 1 - j;
        const int blk = q->blocks[j / bs], last = j + len > p;
        for (int h = h0; h < h1; h++) {
            float *sh = sc + (size_t)(h - h0) * n + (j - lo);
            const void *kh = kv_slot(s, blk, layer, 0, h / group, off), *pf = NULL;
            size_t pfb = 0;
            if (h % group == 0) /* next: this head's keys in the next block, or its values from lo */
                pf = last ? next_run(s, q->blocks[lo / bs], layer, 1, h / group, lo % bs, n, &pfb)
                          : next_run(s, q->blocks[j / bs + 1], layer, 0, h / group, 0, p + 1 - j - len, &pfb);
            if (half) ops_attn_scores_f16(sh, qt + (size_t)h * hd, kh, hd, len, hd, scale, pf, pfb);
            else ops_attn_scores(sh, qt + (size_t)h * hd, kh, hd, len, hd, scale, pf, pfb);
        }
    }
    for (int h = h0; h < h1; h++) {
        ops_softmax(sc + (size_t)(h - h0) * n, n);
        memset(out + (size_t)h * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int j = lo, len; j <= p; j += len) {
        const int off = j % bs;
        len = bs - off < p + 1 - j ? bs - off : p + 1 - j;
        const int blk = q->blocks[j / bs];
        for (int h = h0; h < h1; h++) {
            const float *ph = sc + (size_t)(h - h0) * n + (j - lo);
            const void *vh = kv_slot(s, blk, layer, 1, h / group, off), *pf = NULL;
            size_t pfb = 0;
            if (h % group == 0 && j + len <= p)
                pf = next_run(s, q->blocks[j / bs + 1], layer, 1, h / group, 0, p + 1 - j - len, &pfb);
            if (half) ops_attn_mix_f16(out + (size_t)h * hd, ph, vh, hd, len, hd, pf, pfb);
            else ops_attn_mix(out + (size_t)h * hd, ph, vh, hd, len, hd, pf, pfb);
        }
    }
}

/* Work items are (token, a run of kv heads), as few as give every thread
 * its share, so each item reads its heads' runs of each cache block as one
 * long stretch: at T = 1 one item per thread (its items are equal work,
 * a batch of one token still splits its heads); at larger T a few per
 * thread, since work per item grows with position, and items are handed
 * out on demand. prep: a decode-only batch (one token per sequence), whose
 * tokens read no key but their own sequence's, so each item first
 * prepares its own heads (prep_heads) instead of a phase and a barrier
 * doing them all. */
static void attention(cpu_state *s, const eng_batch *b, const model_layer *L, int layer, int T, int prep) {
    const model_config *c = &s->m->cfg;
    const int nkv = c->n_kv_heads, nt = omp_get_num_threads();
    const int share = T == 1 ? 1 : 4;  /* items per thread */
    int per = (int)(((int64_t)nkv * T + share * nt - 1) / (share * nt));
    if (per < 1) per = 1;
    if (per > s->att_kv_max) per = s->att_kv_max;
    const int runs = (nkv + per - 1) / per, items = T * runs;
    const size_t qd = (size_t)c->n_heads * c->head_dim;
    float *sc = s->scores + (size_t)omp_get_thread_num() * (size_t)s->att_kv_max * (size_t)(c->n_heads / nkv) *
                            (size_t)s->max_ctx;
    #pragma omp for schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        const int t = it / runs, g0 = it % runs * per, g1 = g0 + per < nkv ? g0 + per : nkv;
        if (prep) prep_heads(s, b, L, layer, t, g0, g1);
        attend_heads(s, &b->seqs[s->tok_seq[t]], layer, s->tok_pos[t], s->q + t * qd, g0, g1, s->att + t * qd, sc);
    }
}

/* xb = rmsnorm(x) * w per token, first adding a pending residual (xb, the
 * output of the previous product) into x when add is set; gemma3 first
 * normalizes that pending output by post (its post-attention or post-FFN
 * norm). */
static void residual_norm(cpu_state *s, const float *post, const float *w, int T, int add) {
    const int dim = s->m->cfg.dim;
    const float eps = s->m->cfg.rms_eps;
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        float *x = s->x + (size_t)t * dim, *xb = s->xb + (size_t)t * dim;
        if (add && post) ops_rmsnorm(xb, xb, post, dim, eps);
        if (add) ops_add(x, xb, dim);
        ops_rmsnorm(xb, x, w, dim, eps);
    }
}

/* One layer, run by every thread of the forward's team; each phase ends
 * with the barrier of its worksharing loop. On return xb holds the FFN
 * output, still to be normalized by the layer's ffn_post_norm (gemma3) and
 * added into x (the next phase does both). */
static void layer_forward(cpu_state *s, const eng_batch *b, int l, int T) {
    const model_config *c = &s->m->cfg;
    const model_layer *L = &s->m->layers[l];
    int64_t dim = c->dim, ffn = c->ffn_dim;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    residual_norm(s, l > 0 ? s->m->layers[l - 1].ffn_post_norm : NULL, L->attn_norm, T, l > 0);
    float *qkv[3] = {s->q, s->k, s->v};
    const int64_t ld[3] = {qd, kvd, kvd};
    const ops_mat *w[3] = {&L->wq, &L->wk, &L->wv};
    ops_matmul_n(3, qkv, ld, s->xb, T, w, s->mm);
    const int decode = b->n_seqs == T;  /* one token each: eng_forward refuses n_tokens < 1 */
    if (!decode) rope_and_store(s, b, L, l, T);
    attention(s, b, L, l, T, decode);
    ops_matmul(s->xb, dim, s->att, T, &L->wo, s->mm);
    residual_norm(s, L->attn_post_norm, L->ffn_norm, T, 1);
    if (c->ffn_act == MODEL_FFN_GELU_TANH)
        ops_matmul_geglu(s->hb, s->hb2, ffn, s->xb, T, &L->w_gate, &L->w_up, s->mm);
    else
        ops_matmul_swiglu(s->hb, s->hb2, ffn, s->xb, T, &L->w_gate, &L->w_up, s->mm);
    ops_matmul(s->xb, dim, s->hb, T, &L->w_down, s->mm);
}

/* The last residual (after the last layer's post-FFN norm), the final norm
 * over just the rows whose logits were asked for (gathered into hb), then
 * one product with the output matrix, and gemma3's soft cap when set. */
static void output_logits(cpu_state *s, int T, int rows, float *logits) {
    const model_config *c = &s->m->cfg;
    const float *post = s->m->layers[c->n_layers - 1].ffn_post_norm;
    int dim = c->dim;
    #pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
        float *xb = s->xb + (size_t)t * dim;
        if (post) ops_rmsnorm(xb, xb, post, dim, c->rms_eps);
        ops_add(s->x + (size_t)t * dim, xb, dim);
    }
    #pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
        ops_rmsnorm(s->hb + (size_t)r * dim, s->x + (size_t)s->out_tok[r] * dim, s->m->out_norm, dim, c->rms_eps);
    if (rows) ops_matmul(logits, c->vocab, s->hb, rows, &s->m->output, s->mm);
    if (rows && c->logit_softcap > 0) {
        #pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) ops_softcap(logits + (size_t)r * c->vocab, c->vocab, c->logit_softcap);
    }
}

/* The whole step is one parallel region: the kernels share out each phase
 * among the team (ops.h), so threads meet at one barrier per phase rather
 * than forking and joining around every product. */
static int cpu_forward(void *st, const eng_batch *b, float *logits) {
    cpu_state *s = st;
    const double t0 = clk_mono_s();
    int rows, T = flatten(s, b, &rows);
    #pragma omp parallel num_threads(s->n_threads)
    {
        rope_tables(s, T);
        embed(s, b, T);
        for (int l = 0; l < s->m->cfg.n_layers; l++) layer_forward(s, b, l, T);
        output_logits(s, T, rows, logits);
    }
    s->compute_s += clk_mono_s() - t0;
    s->forwards++;
    return 0;
}

static int cpu_kv_copy_out(void *st, const int32_t *blocks, int n, void *host) {
    cpu_state *s = st;
    size_t bytes = s->block_elems * s->esz;
    for (int i = 0; i < n; i++)
        memcpy((char *)host + (size_t)i * bytes, (const char *)s->kv + (size_t)blocks[i] * bytes, bytes);
    return 0;
}

static int cpu_kv_copy_in(void *st, const int32_t *blocks, int n, const void *host) {
    cpu_state *s = st;
    size_t bytes = s->block_elems * s->esz;
    for (int i = 0; i < n; i++)
        memcpy((char *)s->kv + (size_t)blocks[i] * bytes, (const char *)host + (size_t)i * bytes, bytes);
    return 0;
}

static void cpu_stats(const void *st, eng_dev_stats *out) {
    const cpu_state *s = st;
    out->held_bytes = s->held;
    out->kv_bytes = (uint64_t)s->n_blocks * s->block_elems * s->esz;
    out->compute_s = s->compute_s;
    out->forwards = s->forwards;
}

const eng_backend eng_backend_cpu = {
    .name = "cpu",
    .kv_default = ENG_KV_F16,
    .kv_dtypes = 1u << ENG_KV_F16 | 1u << ENG_KV_F32,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .forward = cpu_forward,
    .kv_copy_out = cpu_kv_copy_out,
    .kv_copy_in = cpu_kv_copy_in,
    .stats = cpu_stats,
};
