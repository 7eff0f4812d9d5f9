/*
 * bench/engine.c - engine throughput against this machine's memory roofline.
 *
 * First it measures the memory read bandwidth with all compute threads
 * (decode of a batch of one reads every weight once per token, so
 * bandwidth / weight bytes is the ceiling for batch-1 decode). Then, for
 * each preset and weight type, it builds the model (mkmodel, into a temp
 * folder) and measures:
 *   - prefill tokens/s: a 128-token prompt in one step (median of runs);
 *   - decode tokens/s at 1, 4 and 16 sequences, each with a 64-token context;
 *   - batch-1 decode as a share of the roofline, and the 16-sequence
 *     aggregate over batch-1.
 * All figures are ratios or rates measured in the same run, so a noisy
 * machine shifts them together. Targets (issue 2): batch-1 decode >= 70% of
 * roofline, 16-sequence aggregate >= 4x batch-1.
 *
 * usage: bench_engine [--presets 15m,110m] [--types f32,f16,q8_0] [--quick]
 */
#include <math.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"

#define CTX 64          /* context each decoding sequence already holds */
#define PROMPT 128      /* prefill length */
#define MAX_SEQS 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Sum of 64 floats with eight independent accumulators, so the loop is
 * limited by loads, not by the latency of one dependent add chain. */
static float sum64(const float *p) {
#ifdef __AVX2__
    __m256 a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_load_ps(p + 8 * k);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                             _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
#else
    float a[8] = {0};
    for (int j = 0; j < 64; j++) a[j & 7] += p[j];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
#endif
}

/* Read bandwidth in bytes/s: every thread sums its slice of a buffer far
 * larger than the last-level cache; best of a few passes. */
static double read_bandwidth(void) {
    size_t n = (size_t)512 << 20, nf = n / sizeof(float);
    float *buf = aligned_alloc(64, n);
    if (!buf) return 0;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nf; i++) buf[i] = (float)(i & 1023);
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_s(), total = 0;
        #pragma omp parallel for schedule(static) reduction(+ : total)
        for (size_t i = 0; i < nf; i += 64) total += sum64(buf + i);
        double dt = now_s() - t0;
        sink += (float)total;
        if (n / dt > best) best = n / dt;
    }
    free(buf);
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
        double t0 = now_s();
        memcpy(b, a, n);
        double dt = now_s() - t0;
        if (n / dt > best) best = n / dt;
    }
    free(a);
    free(b);
    return best;
}

typedef struct result {
    double weight_mb;      /* weight bytes read per decoded token, MB */
    double prefill, decode[3], roofline_share, batch_gain;
} result;

static const int BATCHES[3] = {1, 4, 16};

/* Prefill PROMPT tokens of sequence s into its blocks. */
static int prefill(eng *e, int32_t *ids, int32_t *table, int n, float *logits) {
    eng_seq q = {ids, n, 0, table, (n + 15) / 16 + 1, ENG_LOGITS_LAST};
    eng_batch b = {&q, 1};
    return eng_forward(e, &b, logits);
}

static double time_decode(eng *e, int B, int32_t *ids, int32_t (*tables)[16], float *logits, int steps) {
    eng_seq qs[MAX_SEQS];
    for (int s = 0; s < B; s++) prefill(e, ids, tables[s], CTX, logits);
    double t[32];
    int reps = 0;
    for (int st = 0; st < steps && reps < 32; st++, reps++) {
        for (int s = 0; s < B; s++)
            qs[s] = (eng_seq){ids + CTX + st, 1, CTX + st, tables[s], 16, ENG_LOGITS_LAST};
        eng_batch b = {qs, B};
        double t0 = now_s();
        if (eng_forward(e, &b, logits)) return 0;
        t[reps] = now_s() - t0;
    }
    return B / median(t, reps);
}

static int bench_model(const char *preset, uint32_t type, double bw, int quick, result *r) {
    mkmodel_spec spec;
    char path[256], err[256];
    mkmodel_preset(preset, &spec);
    spec.type = type;
    snprintf(path, sizeof(path), "/tmp/tessera-bench-%d-%s-%s.gguf", (int)getpid(), preset, gguf_type_name(type));
    if (mkmodel_write(&spec, path, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return -1; }
    model *m;
    int rc = model_load(path, &m, err, sizeof(err));
    unlink(path); /* the mapping stays valid */
    if (rc) { fprintf(stderr, "%s\n", err); return -1; }
    eng_opts o = {.kv_pool_bytes = model_kv_bytes_per_token(&m->cfg) * 16 * 16 * MAX_SEQS,
                  .block_size = 16, .max_batch_tokens = PROMPT, .max_seqs = MAX_SEQS};
    eng *e;
    if (eng_new(m, &o, &e, err, sizeof(err))) { fprintf(stderr, "%s\n", err); model_free(m); return -1; }
    int32_t ids[256], tables[MAX_SEQS][16];
    for (int i = 0; i < 256; i++) ids[i] = 3 + (i * 7919) % (m->cfg.vocab - 3);
    for (int s = 0; s < MAX_SEQS; s++)
        for (int i = 0; i < 16; i++) tables[s][i] = s * 16 + i;
    float *logits = malloc((size_t)MAX_SEQS * m->cfg.vocab * sizeof(float));
    double t[8];
    int reps = quick ? 3 : 7;
    prefill(e, ids, tables[0], PROMPT, logits); /* warm up */
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        prefill(e, ids, tables[0], PROMPT, logits);
        t[i] = now_s() - t0;
    }
    r->prefill = PROMPT / median(t, reps);
    int steps = quick ? 8 : 24;
    for (int b = 0; b < 3; b++) r->decode[b] = time_decode(e, BATCHES[b], ids, tables, logits, steps);
    r->weight_mb = (double)m->weight_bytes / 1e6;
    r->roofline_share = r->decode[0] / (bw / (double)m->weight_bytes);
    r->batch_gain = r->decode[2] / r->decode[0];
    free(logits);
    eng_free(e);
    model_free(m);
    return 0;
}

static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *presets = "15m,110m", *types = "f32,f16,q8_0";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--presets") == 0 && i + 1 < argc) presets = argv[++i];
        else if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) types = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else { fprintf(stderr, "usage: %s [--presets 15m,110m] [--types f32,f16,q8_0] [--quick]\n", argv[0]); return 2; }
    }
    int threads = ops_set_threads(0);
    double bw = read_bandwidth(), cbw = copy_bandwidth();
    printf("threads %d, read bandwidth %.1f GB/s, memcpy %.1f GB/s (roofline uses read)\n\n", threads,
           bw / 1e9, cbw / 1e9);
    printf("%-6s %-5s %9s %9s %9s %9s %9s %10s %9s\n", "model", "type", "MB/token", "prefill", "dec b1",
           "dec b4", "dec b16", "b1/roof", "b16/b1");
    static const struct { const char *name; uint32_t type; } TYPES[] = {
        {"f32", GGUF_TT_F32}, {"f16", GGUF_TT_F16}, {"bf16", GGUF_TT_BF16}, {"q8_0", GGUF_TT_Q8_0}};
    static const char *PRESETS[] = {"tiny", "15m", "110m"};
    int bad = 0;
    for (size_t p = 0; p < 3; p++) {
        if (!listed(presets, PRESETS[p])) continue;
        for (size_t ti = 0; ti < 4; ti++) {
            if (!listed(types, TYPES[ti].name)) continue;
            result r;
            if (bench_model(PRESETS[p], TYPES[ti].type, bw, quick, &r)) { bad = 1; continue; }
            printf("%-6s %-5s %9.1f %9.0f %9.1f %9.1f %9.1f %9.0f%% %8.2fx\n", PRESETS[p], TYPES[ti].name,
                   r.weight_mb, r.prefill, r.decode[0], r.decode[1], r.decode[2], 100 * r.roofline_share,
                   r.batch_gain);
            fflush(stdout);
        }
    }
    printf("\nrates in tokens/s; decode at b sequences is the aggregate over the batch\n");
    return bad;
}
