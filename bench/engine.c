/*
 * bench/engine.c - engine throughput against this machine's memory roofline
 * and the kernels' own arithmetic ceilings, for every weight type.
 *
 * For each preset and weight type it builds the model (mkmodel, into a temp
 * folder), fills the KV cache of MAX_SEQS sequences with a CTX-token context
 * once, and then runs ROUNDS rounds. Each round measures, back to back:
 *   - prefill tokens/s: a PROMPT-token prompt in one step;
 *   - the memory read bandwidth with all compute threads, each reading its
 *     slice of a 512 MiB buffer as four streams; bandwidth / the bytes of
 *     weights a token reads is the read roofline of batch-1 decode;
 *   - decode tokens/s at 1, 4 and 16 sequences (median step of the round),
 *     each sequence holding a CTX-token context, with the kernels'
 *     arithmetic ceiling at T = 1 right after the batch-1 steps and the one
 *     at T = 16 after every 16-sequence step: ops_matmul (the decode
 *     kernels) at that many activation rows on each of the model's weight
 *     shapes with the weights hot in cache, so arithmetic alone limits it,
 *     summed over a token's products (classifier included) into tokens/s.
 * Targets (issue 12): batch-1 decode >= 85% of the lower of the read
 * roofline and the T = 1 ceiling (the table says which binds: where the
 * ceiling does, the kernel is slower than memory and is what to improve);
 * 16-sequence aggregate decode >= 80% of the T = 16 ceiling; resident
 * memory (the process's RSS growth over loading and running the model) at
 * most the file's size plus the KV pool plus 10%. PASS/MISS columns report
 * them; nothing asserts. A round's b16 ratio is the median over its steps
 * of each step's rate over the ceiling measured right after it, and its b1
 * ratio sets the median step against bounds measured just before and after
 * the steps, so the noisy shared machine's drift shifts both sides alike
 * (time_decode); the table shows medians over rounds and the spread
 * (min..max) of the rounds' ratios. Decode steps run
 * back to back, as a server runs them, so small models (15m, 20m: 10-60
 * MB of weights) stay partly in the last-level cache between tokens and
 * their batch-1 decode can pass the DRAM roofline; the 110m types (45-540
 * MB) less so. --cold reads the bandwidth buffer before every batch-1
 * step instead, so each step fetches its weights from DRAM as a model far
 * larger than the cache would, and pairs each step with that pass's
 * bandwidth. The K-quants and IQ4_XS need rows of whole 256-element
 * super-blocks, which 15m's 288 is not: the 20m preset is 15m's shape
 * with 256-wide rows. Prefill is shown next to llama.cpp's pp128 on the
 * same synthetic models and machine kind (docs:
 * shared/reference/cpu-performance-facts.md): a figure from another run,
 * so for orientation only.
 *
 * usage: bench_engine [--presets 15m,20m,110m] [--types f16,q8_0,q4_K,...]
 *                     [--quick] [--rounds N] [--kv-cache-dtype auto|f16|f32] [--cold]
 * (the KV cache of the decode steps; auto is the CPU's f16)
 */
#include <math.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <cblas.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine.h"
#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"

#define CTX 64          /* context each decoding sequence already holds */
#define PROMPT 128      /* prefill length */
#define MAX_SEQS 16

/* Sum of n floats (a multiple of 64) read as four streams a quarter of the
 * range apart, with two accumulators each: the loop is bound by loads, not
 * by add latency, and four streams keep more prefetchers busy than one.
 * Measured on Zen 3 with two threads: 33-41 GB/s, where one stream per
 * thread with a reduction every 64 floats read 24-28 GB/s, less than the
 * F32 decode kernel (four weight rows at a time) itself moved. */
static float sum_streams(const float *p, size_t n) {
    const size_t q = n / 4;
#ifdef __AVX2__
    __m256 a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
    for (size_t i = 0; i < q; i += 16)
        for (int s = 0; s < 4; s++) {
            a[2 * s] = _mm256_add_ps(a[2 * s], _mm256_load_ps(p + s * q + i));
            a[2 * s + 1] = _mm256_add_ps(a[2 * s + 1], _mm256_load_ps(p + s * q + i + 8));
        }
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_ps(a[0], a[k]);
    float out[8];
    _mm256_storeu_ps(out, a[0]);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
#else
    float a[8] = {0};
    for (size_t i = 0; i < q; i += 2)
        for (int s = 0; s < 4; s++) {
            a[2 * s] += p[s * q + i];
            a[2 * s + 1] += p[s * q + i + 1];
        }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
#endif
}

/* Read bandwidth in bytes/s over buf (n bytes, far larger than the
 * last-level cache): every thread sums its own slice; best of passes. */
static double read_bandwidth(const float *buf, size_t n, int passes) {
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < passes; rep++) {
        double t0 = clk_mono_s(), total = 0;
        size_t bytes = 0;
        #pragma omp parallel reduction(+ : total, bytes)
        {
            size_t slice = n / sizeof(float) / (size_t)omp_get_num_threads() / 64 * 64;
            total += sum_streams(buf + (size_t)omp_get_thread_num() * slice, slice);
            bytes += slice * sizeof(float);
        }
        double dt = clk_mono_s() - t0;
        sink += (float)total;
        if (bytes / dt > best) best = bytes / dt;
    }
    (void)sink;
    return best;
}

static double copy_bandwidth(void) {
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) { free(a); free(b); return 0; }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = clk_mono_s();
        memcpy(b, a, n);
        double dt = clk_mono_s() - t0;
        if (n / dt > best) best = n / dt;
    }
    free(a);
    free(b);
    return best;
}

/* OpenBLAS sgemm on an n x n x n product, GFLOP/s (2 flops per
 * multiply-add), best of a few: the machine's f32 arithmetic reference.
 * OpenBLAS stays single-threaded as in the engine (ops.h), so each thread
 * of one OpenMP region takes its own half of the output's columns. */
static double sgemm_gflops(int n) {
    float *a = aligned_alloc(64, (size_t)n * n * sizeof(float));
    float *b = aligned_alloc(64, (size_t)n * n * sizeof(float));
    float *c = aligned_alloc(64, (size_t)n * n * sizeof(float));
    double best = 0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 97) * 0.01f;
        for (int rep = 0; rep < 4; rep++) {
            double t0 = clk_mono_s();
            #pragma omp parallel
            {
                int nt = omp_get_num_threads(), id = omp_get_thread_num();
                int c0 = n * id / nt, c1 = n * (id + 1) / nt;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c1 - c0, n, 1.0f, a, n, b + c0, n,
                            0.0f, c + c0, n);
            }
            double dt = clk_mono_s() - t0;
            if (2.0 * n * n * n / dt > best) best = 2.0 * n * n * n / dt;
        }
    }
    free(a);
    free(b);
    free(c);
    return best / 1e9;
}

/* The decode kernels' arithmetic ceilings: what ops_matmul (the call a
 * decode step makes) does at T activation rows (1 and CEIL_T) on each
 * weight shape of the model, with the weights hot in cache so that memory
 * does not limit it. Each matrix is cut to its first rows, at most
 * CEIL_BYTES of them, and multiplied CEIL_REPS times after a pass that
 * loads them; the median pass counts, as the median step counts for the
 * decode rates it is held against (on this noisy shared machine a best
 * pass against a median step reads the host's jitter as a kernel's gap).
 * Then a token's time is the sum over the model's matrices (the
 * classifier included) of rows * n_in / rate, and the ceiling is the
 * batch's aggregate tokens/s if nothing but these products ran and no
 * weight came from DRAM. A decode of T sequences cannot beat it with
 * these kernels; the gap between it and the measured rate is memory
 * traffic, attention, norms and barriers. The T of each ceiling is the
 * batch of its column, so the figure is for the exact kernel path that
 * column runs (for F32/F16 a larger T would switch ops_matmul to sgemm).
 * CEIL_BYTES keeps a slice in the last-level cache with room to spare.
 * The passes run inside one OpenMP team, as a step's products do, so each
 * pays the call's closing barrier but no fork and join: opening a team per
 * call made a 110m Q4_0 product at T = 1 (768 x 768, ~11 us a thread) read
 * a third slow on the Xeon host, and the T = 1 ceiling then bound where
 * the kernel is faster than memory. */
#define CEIL_T 16           /* rows of the b16 ceiling; the b1 one runs T = 1 */
#define CEIL_BYTES ((size_t)2 << 20)
#define CEIL_REPS 6

typedef struct ceil_buf {
    ops_scratch *mm;
    float *x;               /* (CEIL_T, max n_in) */
    float *y;               /* (CEIL_T, max slice rows) */
    int64_t max_rows;
    int threads;            /* the team, as many as the scratch serves */
} ceil_buf;

static int ceil_buf_init(ceil_buf *cb, const model *m) {
    const model_config *c = &m->cfg;
    int64_t n_in = c->dim > c->ffn_dim ? c->dim : c->ffn_dim;
    if ((int64_t)c->n_heads * c->head_dim > n_in) n_in = (int64_t)c->n_heads * c->head_dim;
    cb->max_rows = c->vocab > c->ffn_dim ? c->vocab : c->ffn_dim;
    if (c->dim > cb->max_rows) cb->max_rows = c->dim;
    cb->threads = omp_get_max_threads();
    cb->mm = ops_scratch_new(CEIL_T, n_in, cb->threads);
    cb->x = malloc((size_t)CEIL_T * (size_t)n_in * sizeof(float));
    cb->y = malloc((size_t)CEIL_T * (size_t)cb->max_rows * sizeof(float));
    if (!cb->mm || !cb->x || !cb->y) return -1;
    for (size_t i = 0; i < (size_t)CEIL_T * (size_t)n_in; i++) cb->x[i] = (float)((int)(i * 7919 % 200) - 100) * 0.01f;
    return 0;
}

static void ceil_buf_deinit(ceil_buf *cb) {
    ops_scratch_free(cb->mm);
    free(cb->x);
    free(cb->y);
}

/* Seconds per multiply-add of ops_matmul at T rows on a hot slice of w. */
static double ceil_sec_per_mac(const ceil_buf *cb, const ops_mat *w, int T) {
    ops_mat sl = *w;
    size_t rb = (size_t)gguf_row_bytes(w->type, (uint64_t)w->n_in);
    int64_t rows = (int64_t)(CEIL_BYTES / rb) / 64 * 64;
    if (rows < 64) rows = 64;
    if (rows < sl.n_out) sl.n_out = rows;
    double t[CEIL_REPS];
    #pragma omp parallel num_threads(cb->threads)
    for (int rep = 0; rep <= CEIL_REPS; rep++) {
        #pragma omp barrier
        const double t0 = clk_mono_s();
        ops_matmul(cb->y, sl.n_out, cb->x, T, &sl, cb->mm); /* every thread: ends with a barrier */
        if (omp_get_thread_num() == 0 && rep > 0) t[rep - 1] = clk_mono_s() - t0; /* the first pass loads the slice */
    }
    return bu_median(t, CEIL_REPS) / ((double)T * (double)sl.n_out * (double)sl.n_in);
}

/* The ceiling in aggregate tokens/s; *gmacs: the kernel's rate over a
 * token's products, in 1e9 multiply-adds/s. */
static double ceil_tokens(const ceil_buf *cb, const model *m, int T, double *gmacs) {
    const model_layer *L = &m->layers[0];
    const ops_mat *ws[8] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &m->output};
    double sec = 0, macs = 0;
    for (int i = 0; i < 8; i++) {
        double n = (double)ws[i]->n_out * (double)ws[i]->n_in * (i < 7 ? m->cfg.n_layers : 1);
        sec += n * ceil_sec_per_mac(cb, ws[i], T);
        macs += n;
    }
    if (gmacs) *gmacs = macs / sec / 1e9;
    return 1.0 / sec;
}

#define MAX_ROUNDS 15

/* One round's measurements; the table reports medians over rounds. */
typedef struct sample {
    double bw;              /* read bandwidth, bytes/s */
    double prefill;         /* tokens/s */
    double decode[3];       /* aggregate tokens/s at BATCHES[i] sequences */
    double roof;            /* read roofline of batch-1 decode: bw / weight bytes, tokens/s */
    double ceil1;           /* the T = 1 kernels' arithmetic ceiling, tokens/s */
    double share1;          /* decode[0] over the lower of roof and ceil1 */
    double ceil16;          /* the T = 16 kernels' arithmetic ceiling, tokens/s */
    double gmacs;           /* the T = 16 kernels' rate behind it, 1e9 multiply-adds/s */
    double share16;         /* median of each b16 step over the ceiling beside it */
} sample;

typedef struct result {
    double weight_mb;       /* weight bytes read per decoded token, MB */
    double file_mb;         /* the GGUF file */
    double kv_mb;           /* the KV pool */
    double rss_mb;          /* the process's RSS growth over loading and running the model */
    double resident_mb;     /* model_resident_bytes after the rounds */
    int n;                  /* rounds */
    sample r[MAX_ROUNDS];
} result;

/* This process's resident set, bytes (0 where /proc is missing). */
static double rss_bytes(void) {
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

static const int BATCHES[3] = {1, 4, CEIL_T}; /* the first and last have ceilings */

/* Prefill n tokens of a sequence into the blocks of table. */
static int prefill(eng *e, int32_t *ids, int32_t *table, int n, float *logits) {
    eng_seq q = {ids, n, 0, table, (n + 15) / 16 + 1, ENG_LOGITS_LAST};
    eng_batch b = {&q, 1};
    return eng_forward(e, &b, logits);
}

/* Aggregate tokens/s of B sequences decoding together: the median of steps
 * steps, each adding one token after the CTX cached ones (every round
 * rewrites the same positions, so every round sees the same context).
 * With pr set, bounds are measured beside each step and pr->share gets the
 * median of the steps' rates over the lower of those next to each, the
 * other fields the bounds' medians: with pr->cb, the arithmetic ceiling
 * at T = B after the step; with pr->bwbuf, the read roofline from one
 * pass over it before the step, which also leaves the step reading its
 * weights from DRAM. The host's load drifts over
 * seconds here, and a step set against a ceiling measured a second later
 * read that drift as the engine's (b16 ratios of one model spanned 66 to
 * 101% over rounds; paired with each step's ceiling, 85 to 89%). Batch-1
 * steps are not paired with a ceiling: its hot slices (16 MB) push out of
 * the last-level cache the weights a step leaves there for the next one,
 * which back-to-back steps keep (110m Q4_K: 91-111% of the read roofline
 * back to back, 73-74% with a ceiling between steps). */
typedef struct paired {
    const ceil_buf *cb;     /* NULL: no ceiling beside the steps */
    const model *m;
    const float *bwbuf;     /* NULL: no read roofline beside the steps */
    size_t bwn;
    double share, ceil, gmacs, bw, roof; /* results (roof: tokens/s, with bwbuf) */
} paired;

static double time_decode(eng *e, int B, int32_t *ids, int32_t (*tables)[16], float *logits, int steps,
                          paired *pr) {
    eng_seq qs[MAX_SEQS];
    double t[32], share[32], ceil[32], gm[32], bw[32], roof[32];
    int reps = 0;
    for (int st = 0; st < steps && reps < 32; st++, reps++) {
        for (int s = 0; s < B; s++)
            qs[s] = (eng_seq){ids + CTX + st, 1, CTX + st, tables[s], 16, ENG_LOGITS_LAST};
        eng_batch b = {qs, B};
        if (pr && pr->bwbuf) bw[reps] = read_bandwidth(pr->bwbuf, pr->bwn, 1);
        double t0 = clk_mono_s();
        if (eng_forward(e, &b, logits)) return 0;
        t[reps] = clk_mono_s() - t0;
        if (!pr) continue;
        ceil[reps] = pr->cb ? ceil_tokens(pr->cb, pr->m, B, &gm[reps]) : 0;
        roof[reps] = pr->bwbuf ? bw[reps] / (double)pr->m->weight_bytes : 0;
        double bound = ceil[reps];
        if (roof[reps] > 0 && (bound <= 0 || roof[reps] < bound)) bound = roof[reps];
        share[reps] = B / t[reps] / bound;
    }
    if (pr) {
        pr->share = bu_median(share, reps);
        if (pr->cb) {
            pr->ceil = bu_median(ceil, reps);
            pr->gmacs = bu_median(gm, reps);
        }
        if (pr->bwbuf) {
            pr->bw = bu_median(bw, reps);
            pr->roof = bu_median(roof, reps);
        }
    }
    return B / bu_median(t, reps);
}

static int bench_model(const char *preset, uint32_t type, const float *bwbuf, size_t bwn, int rounds,
                       int quick, int cold, eng_kv_dtype kv, result *res) {
    mkmodel_spec spec;
    char path[256], err[256];
    mkmodel_preset(preset, &spec);
    spec.type = type;
    snprintf(path, sizeof(path), "/tmp/tessera-bench-%d-%s-%s.gguf", (int)getpid(), preset, gguf_type_name(type));
    if (mkmodel_write(&spec, path, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return -1; }
    struct stat st;
    res->file_mb = stat(path, &st) ? 0 : (double)st.st_size / 1e6;
    float *logits = malloc((size_t)MAX_SEQS * (size_t)spec.vocab * sizeof(float));
    if (!logits) { unlink(path); return -1; }
    memset(logits, 0, (size_t)MAX_SEQS * (size_t)spec.vocab * sizeof(float));
    const double rss0 = rss_bytes();
    model *m;
    int rc = model_load(path, &m, err, sizeof(err));
    unlink(path); /* the mapping stays valid */
    if (rc) { fprintf(stderr, "%s\n", err); free(logits); return -1; }
    eng_opts o = {.kv_dtype = kv, .block_size = 16, .max_batch_tokens = PROMPT, .max_seqs = MAX_SEQS};
    o.kv_pool_bytes = eng_kv_token_bytes(m, &o) * 16 * 16 * MAX_SEQS;
    eng *e;
    if (eng_new(m, &o, &e, err, sizeof(err))) { fprintf(stderr, "%s\n", err); model_free(m); free(logits); return -1; }
    int32_t ids[256], tables[MAX_SEQS][16];
    for (int i = 0; i < 256; i++) ids[i] = 3 + (i * 7919) % (m->cfg.vocab - 3);
    for (int s = 0; s < MAX_SEQS; s++)
        for (int i = 0; i < 16; i++) tables[s][i] = s * 16 + i;
    /* Every sequence's context once; this also reads every weight, so the
     * RSS has grown by all the model will hold: the weights as mapped, the
     * KV pool and the engine's buffers. */
    for (int s = 0; s < MAX_SEQS; s++) prefill(e, ids, tables[s], CTX, logits);
    res->rss_mb = (rss_bytes() - rss0) / 1e6;
    ceil_buf cb;
    if (ceil_buf_init(&cb, m)) {
        fprintf(stderr, "out of memory\n");
        ceil_buf_deinit(&cb);
        free(logits);
        eng_free(e);
        model_free(m);
        return -1;
    }
    const double bytes = (double)m->weight_bytes;
    const int steps = quick ? 8 : 16;
    res->weight_mb = bytes / 1e6;
    res->kv_mb = (double)o.kv_pool_bytes / 1e6;
    res->n = rounds;
    for (int i = 0; i < rounds; i++) {
        sample *r = &res->r[i];
        double t0 = clk_mono_s();
        prefill(e, ids, tables[0], PROMPT, logits); /* same ids: sequence 0's context is rewritten as it was */
        r->prefill = PROMPT / (clk_mono_s() - t0);
        /* batch 1 between its bounds, measured just before and after it */
        if (!cold) r->bw = read_bandwidth(bwbuf, bwn, 3);
        paired p1 = {.m = m, .bwbuf = bwbuf, .bwn = bwn}, p16 = {.cb = &cb, .m = m};
        r->decode[0] = time_decode(e, BATCHES[0], ids, tables, logits, steps, cold ? &p1 : NULL);
        r->ceil1 = ceil_tokens(&cb, m, 1, NULL);
        r->decode[1] = time_decode(e, BATCHES[1], ids, tables, logits, steps, NULL);
        r->decode[2] = time_decode(e, BATCHES[2], ids, tables, logits, steps, &p16);
        if (cold) r->bw = p1.bw;
        r->roof = cold ? p1.roof : r->bw / bytes;
        /* --cold, read-bound: each step against its own pass's roofline */
        r->share1 = cold && p1.roof < r->ceil1 ? p1.share : r->decode[0] / (r->roof < r->ceil1 ? r->roof : r->ceil1);
        r->ceil16 = p16.ceil;
        r->gmacs = p16.gmacs;
        r->share16 = p16.share;
    }
    res->resident_mb = (double)model_resident_bytes(m) / 1e6;
    ceil_buf_deinit(&cb);
    free(logits);
    eng_free(e);
    model_free(m);
    return 0;
}

/* Median over rounds of the double at byte offset off of each round. */
static double med_of(const result *res, size_t off, double *lo, double *hi) {
    double v[MAX_ROUNDS];
    for (int i = 0; i < res->n; i++) memcpy(&v[i], (const char *)&res->r[i] + off, sizeof(double));
    double m = bu_median(v, res->n); /* sorts v */
    if (lo) *lo = v[0];
    if (hi) *hi = v[res->n - 1];
    return m;
}

/* llama.cpp pp128 tokens/s with 2 threads on the same synthetic models
 * (cpu-performance-facts.md); 0 where not measured. */
static double llama_pp128(const char *preset, const char *type) {
    static const struct { const char *preset, *type; double tps; } REF[] = {
        {"110m", "f32", 473}, {"110m", "f16", 572}, {"110m", "q8_0", 410}, {"110m", "q4_0", 591},
        {"15m", "f32", 2827}, {"15m", "q8_0", 4658}};
    for (size_t i = 0; i < sizeof(REF) / sizeof(REF[0]); i++)
        if (!strcmp(REF[i].preset, preset) && !strcmp(REF[i].type, type)) return REF[i].tps;
    return 0;
}

static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

#define B1_TARGET 0.85
#define B16_TARGET 0.80
#define RSS_SLACK 0.10
#define SGEMM_N 1024

/* One table row from a model's rounds. */
static void print_row(const char *preset, const char *type, const result *r) {
    double lo1, hi1, lo16, hi16;
    double bw = med_of(r, offsetof(sample, bw), NULL, NULL);
    double pf = med_of(r, offsetof(sample, prefill), NULL, NULL);
    double d1 = med_of(r, offsetof(sample, decode[0]), NULL, NULL);
    double d4 = med_of(r, offsetof(sample, decode[1]), NULL, NULL);
    double d16 = med_of(r, offsetof(sample, decode[2]), NULL, NULL);
    double roof = med_of(r, offsetof(sample, roof), NULL, NULL);
    double c1 = med_of(r, offsetof(sample, ceil1), NULL, NULL);
    double c16 = med_of(r, offsetof(sample, ceil16), NULL, NULL);
    double gm = med_of(r, offsetof(sample, gmacs), NULL, NULL);
    double s1 = med_of(r, offsetof(sample, share1), &lo1, &hi1);
    double s16 = med_of(r, offsetof(sample, share16), &lo16, &hi16);
    double ref = llama_pp128(preset, type);
    double rss_cap = (r->file_mb + r->kv_mb) * (1 + RSS_SLACK);
    char refs[16] = "-", a[40], b[40];
    if (ref > 0) snprintf(refs, sizeof(refs), "%.2fx", pf / ref);
    snprintf(a, sizeof(a), "%.0f%% (%.0f-%.0f) %s", 100 * s1, 100 * lo1, 100 * hi1,
             s1 >= B1_TARGET ? "PASS" : "MISS");
    snprintf(b, sizeof(b), "%.0f%% (%.0f-%.0f) %s", 100 * s16, 100 * lo16, 100 * hi16,
             s16 >= B16_TARGET ? "PASS" : "MISS");
    printf("%-5s %-6s %6.1f %6.1f %6.1f %4s %5.1f %6.0f %5s %6.1f %6.1f %6.1f %6.0f %6.0f %-5s %-20s %6.1f %6.0f %-20s\n",
           preset, type, r->file_mb, r->rss_mb, r->resident_mb, r->rss_mb <= rss_cap ? "PASS" : "MISS", bw / 1e9, pf,
           refs, d1, d4, d16, roof, c1, roof < c1 ? "read" : "arith", a, gm, c16, b);
    fflush(stdout);
}

int main(int argc, char **argv) {
    /* the kernels a server here would run (ops_blas_env); on failure, the library's */
    if (ops_blas_env()) execv("/proc/self/exe", argv);
    const char *presets = "15m,20m,110m", *types = "f16,bf16,q8_0,q4_0,q4_K,q5_K,q6_K";
    int quick = 0, cold = 0, rounds = 0;
    eng_kv_dtype kv = ENG_KV_AUTO;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--presets") == 0 && i + 1 < argc) presets = argv[++i];
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) types = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--cold") == 0) cold = 1;
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kv-cache-dtype") == 0 && i + 1 < argc && !eng_kv_dtype_parse(argv[i + 1], &kv)) i++;
        else {
            fprintf(stderr, "usage: %s [--presets 15m,20m,110m] [--types f16,q8_0,q4_K,...|all] [--quick] "
                            "[--rounds N] [--kv-cache-dtype auto|f16|f32] [--cold]\n", argv[0]);
            return 2;
        }
    }
    if (strcmp(types, "all") == 0)
        types = "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,q2_K,q3_K,q4_K,q5_K,q6_K,iq4_xs";
    if (rounds <= 0) rounds = quick ? 3 : 7;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    int threads = ops_set_threads(0);
    size_t bwn = (size_t)512 << 20;
    float *bwbuf = aligned_alloc(64, bwn);
    if (!bwbuf) { fprintf(stderr, "out of memory\n"); return 1; }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bwn / sizeof(float); i++) bwbuf[i] = (float)(i & 1023);
    double cbw = copy_bandwidth();
    double gf = sgemm_gflops(SGEMM_N);
    printf("KV cache %s\n", kv == ENG_KV_AUTO ? "auto (f16 on the CPU)" : eng_kv_dtype_name(kv));
    const char *fallback = NULL;
    const char *core = ops_blas_core(&fallback);
    printf("threads %d, %d rounds; memcpy %.1f GB/s; the roofline uses the read bandwidth %s\n"
           "f32 reference: OpenBLAS sgemm %dx%dx%d, %.0f GFLOP/s = %.1f GMAC/s (kernels: %s%s%s%s)\n\n",
           threads, rounds, cbw / 1e9,
           cold ? "measured before each batch-1 step (--cold: weights from DRAM)" : "of each round", SGEMM_N,
           SGEMM_N, SGEMM_N, gf, gf / 2, core,
           fallback ? ", chosen by tessera where the library had fallen back to " : "", fallback ? fallback : "",
           fallback ? " on this CPU" : "");
    printf("%-5s %-6s %6s %6s %6s %4s %5s %6s %5s %6s %6s %6s %6s %6s %-5s %-20s %6s %6s %-20s\n", "model", "type",
           "fileMB", "rssMB", "resMB", "mem", "GB/s", "pref", "llama", "dec1", "dec4", "dec16", "roof", "ceil1",
           "binds", "b1/bound", "GMAC/s", "ceil16", "b16/ceil16");
    static const char *PRESETS[] = {"tiny", "15m", "20m", "110m"};
    int bad = 0;
    for (size_t p = 0; p < sizeof(PRESETS) / sizeof(PRESETS[0]); p++) {
        if (!listed(presets, PRESETS[p])) continue;
        mkmodel_spec spec;
        mkmodel_preset(PRESETS[p], &spec);
        for (const char *t = types; *t;) {
            char name[16];
            size_t n = strcspn(t, ",");
            snprintf(name, sizeof(name), "%.*s", (int)(n < 15 ? n : 15), t);
            t += n + (t[n] == ',');
            uint32_t type;
            if (gguf_type_from_name(name, &type)) { fprintf(stderr, "unknown type %s\n", name); bad = 1; continue; }
            int block = gguf_type_block(type);
            if (spec.dim % block || spec.ffn_dim % block) {
                printf("%-5s %-6s (rows of %d or %d are not whole blocks of %d)\n", PRESETS[p], name, spec.dim,
                       spec.ffn_dim, block);
                continue;
            }
            static result r;
            if (bench_model(PRESETS[p], type, bwbuf, bwn, rounds, quick, cold, kv, &r)) { bad = 1; continue; }
            print_row(PRESETS[p], gguf_type_name(type), &r);
        }
    }
    printf("\nrates in tokens/s, medians over rounds; decode at b sequences is the aggregate over the batch;\n"
           "fileMB = the GGUF; rssMB = the process's RSS growth over loading the model and reading every\n"
           "weight once (weights as mapped, KV pool, engine buffers); resMB = model_resident_bytes;\n"
           "mem = rssMB <= (file + KV pool) x %.2f; llama = prefill over llama.cpp's pp128 (2 threads,\n"
           "facts file); roof = read bandwidth / weight bytes per token; ceil1, ceil16 = the tokens/s that\n"
           "ops_matmul at T = 1, 16 on hot slices of the model's matrices allows for a token's products\n"
           "(classifier included); binds = the lower of roof and ceil1 (arith: the kernel, not memory,\n"
           "limits batch-1 decode); targets: dec1 >= %.0f%% of that bound, dec16 >= %.0f%% of ceil16;\n"
           "ratios show median (min-max) over rounds\n",
           1 + RSS_SLACK, 100 * B1_TARGET, 100 * B16_TARGET);
    free(bwbuf);
    return bad;
}
