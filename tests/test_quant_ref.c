/*
 * test_quant_ref.c - tessera's quantized formats (cpu/quant.h) held to the
 * independent NumPy reader tests/ref/quants.py.
 *
 * The fixture is a GGUF file that tests/ref/gguf_quant_write.py writes: for
 * every quantized type N a tensor "q.N" of random valid blocks (every quant
 * and sub-scale bit pattern, f16 scales of both signs from subnormal to
 * 1e3, zeros included) and a float32 tensor "deq.N", NumPy's dequantization
 * of it. Run as `test_quant_ref FIXTURE.gguf` (tests/quant_ref.sh does), or
 * with no argument, as ctest does: it then runs python3 (TS_PYTHON, else
 * /usr/bin/python3) on the writer next to this file and fails, never skips,
 * when that is impossible.
 *
 * Per type it checks:
 *  1. dequant: quant_dequant gives NumPy's floats bit for bit (quants.py
 *     computes in float32 in ggml's operation order); a mismatch prints the
 *     row, block, element, both values and the block's bytes.
 *  2. activations: quant_act_row, against the rule quant.h states: per
 *     dblock d' within f16 rounding (Q8_32) or float rounding (Q8_K) of
 *     d = max|x| / 127, |q| <= 127, |x - d q| <= d / 2, the sums exact.
 *  3. dot: quant_dot_scalar and each vector kernel this CPU has
 *     (quant_dot_isa: AVX2, AVX-VNNI, AVX512-VNNI), with C = 1 and C = 4
 *     activation rows and a strided output, against the float64
 *     dot of NumPy's dequantized weights with the float activations (not
 *     quantized). The tolerance is the activation rounding's rigorous
 *     bound plus float slack:
 *         tol = sum_i |w_i| (d_b / 2 (1 + 1e-5) + |d'_b - d_b| |q_i|)
 *             + 1e-5 sum_i |w_i x_i|
 *     where b is i's activation block, d_b = max_b|x| / 127 exactly, d'_b the
 *     scale the kernel applies (x_i - d'_b q_i = (x_i - d_b q_i) + (d_b -
 *     d'_b) q_i, the first at most d_b / 2). The integer block sums are
 *     exact, so the kernel differs from dot(w, d' q) only by float rounding
 *     of a few products and sums per block (~2^-24 relative to sum |w x|
 *     each, and a weight's d * sc may be rounded differently than in its
 *     dequantized value, also ~2^-24); 1e-5 is a wide margin for both.
 *     Teeth: on activation rows built to correlate with the weight row the
 *     tolerance must be under 5% of |dot|, and the same kernel result must
 *     miss the dot of a different weight row by more than the tolerance.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"
#include "testutil.h"

/* The quantized types and their block sizes, as ggml defines them. */
static const struct {
    uint32_t type;
    const char *name;
    int block, bytes, act;
} TYPES[] = {
    {GGUF_TT_Q4_0, "Q4_0", 32, 18, QUANT_ACT_Q8_32},
    {GGUF_TT_Q4_1, "Q4_1", 32, 20, QUANT_ACT_Q8_32},
    {GGUF_TT_Q5_0, "Q5_0", 32, 22, QUANT_ACT_Q8_32},
    {GGUF_TT_Q5_1, "Q5_1", 32, 24, QUANT_ACT_Q8_32},
    {GGUF_TT_Q8_0, "Q8_0", 32, 34, QUANT_ACT_Q8_32},
    {GGUF_TT_Q2_K, "Q2_K", 256, 84, QUANT_ACT_Q8_K},
    {GGUF_TT_Q3_K, "Q3_K", 256, 110, QUANT_ACT_Q8_K},
    {GGUF_TT_Q4_K, "Q4_K", 256, 144, QUANT_ACT_Q8_K},
    {GGUF_TT_Q5_K, "Q5_K", 256, 176, QUANT_ACT_Q8_K},
    {GGUF_TT_Q6_K, "Q6_K", 256, 210, QUANT_ACT_Q8_K},
    {GGUF_TT_IQ4_NL, "IQ4_NL", 32, 18, QUANT_ACT_Q8_32},
    {GGUF_TT_IQ4_XS, "IQ4_XS", 256, 136, QUANT_ACT_Q8_K},
};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))
static const int TYPE_IDX[N_TYPES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

static gguf_ctx *fx;            /* the fixture, open for the whole group */
static char fx_made[1024];      /* a fixture this program wrote (removed at the end) */
static const char *fx_arg;      /* argv[1], or NULL */

/* ------------------------------------------------------------------------- */
/* Fixture                                                                   */
/* ------------------------------------------------------------------------- */

/* The tests folder: this file's own (CMake compiles it by absolute path),
 * else $TS_SRC/tests. */
static int tests_dir(char *out, size_t cap) {
    const char *f = __FILE__;
    const char *slash = strrchr(f, '/');
    if (f[0] == '/' && slash) {
        snprintf(out, cap, "%.*s", (int)(slash - f), f);
        return 0;
    }
    const char *src = getenv("TS_SRC");
    if (!src || !*src) return -1;
    snprintf(out, cap, "%s/tests", src);
    return 0;
}

static int make_fixture(void) {
    char dir[1024], cmd[4096];
    const char *py = getenv("TS_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    if (tests_dir(dir, sizeof dir)) {
        fprintf(stderr, "test_quant_ref: cannot find tests/ref (set TS_SRC)\n");
        return -1;
    }
    tu_path(fx_made, sizeof fx_made, "quant_fixture.gguf");
    snprintf(cmd, sizeof cmd, "'%s' '%s/ref/gguf_quant_write.py' fixture '%s'", py, dir, fx_made);
    printf("test_quant_ref: no fixture given; writing one: %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "test_quant_ref: FAIL: the fixture writer failed (status %d); it needs %s "
                        "with numpy\n", rc, py);
        fx_made[0] = 0;
        return -1;
    }
    return 0;
}

static int group_setup(void **state) {
    char err[512];
    const char *path = fx_arg;
    if (!path) {
        if (make_fixture()) return -1;
        path = fx_made;
    }
    if (gguf_open(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "test_quant_ref: FAIL: %s\n", err);
        return -1;
    }
    printf("test_quant_ref: fixture %s (%llu tensors)\n", path, (unsigned long long)fx->n_tensors);
    return 0;
}

static int group_teardown(void **state) {
    gguf_close(fx);
    fx = NULL;
    if (fx_made[0]) unlink(fx_made);
    return 0;
}

/* The fixture's pair of tensors of a type. */
static void fixture_pair(uint32_t type, const gguf_tensor **q, const gguf_tensor **deq) {
    char name[32];
    snprintf(name, sizeof name, "q.%u", type);
    *q = gguf_find_tensor(fx, name);
    snprintf(name, sizeof name, "deq.%u", type);
    *deq = gguf_find_tensor(fx, name);
    assert_non_null(*q);
    assert_non_null(*deq);
    assert_int_equal((*q)->type, type);
    assert_int_equal((*deq)->type, GGUF_TT_F32);
    assert_int_equal((*q)->n_dims, 2);
    assert_int_equal((*deq)->n_dims, 2);
    assert_true((*q)->ne[0] == (*deq)->ne[0] && (*q)->ne[1] == (*deq)->ne[1]);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ------------------------------------------------------------------------- */
/* 1. Dequantization, bit for bit                                            */
/* ------------------------------------------------------------------------- */

static void test_dequant(void **state) {
    const int k = **(const int **)state;
    const uint32_t type = TYPES[k].type;
    const gguf_tensor *q, *deq;
    fixture_pair(type, &q, &deq);
    const int64_t cols = (int64_t)q->ne[0], rows = (int64_t)q->ne[1], n = rows * cols;
    const int blk = TYPES[k].block, bb = TYPES[k].bytes;

    /* The C size tables agree with ggml's. */
    assert_int_equal(gguf_type_block(type), blk);
    assert_int_equal(gguf_type_block_bytes(type), bb);
    assert_int_equal(gguf_row_bytes(type, (uint64_t)cols), (uint64_t)(cols / blk * bb));
    assert_int_equal(q->nbytes, (uint64_t)(n / blk * bb));

    float *out = malloc((size_t)n * sizeof *out);
    assert_non_null(out);
    /* A NaN pattern, so a dequantizer that writes nothing cannot pass. */
    const uint32_t poison = 0x7fc0deadu;
    for (int64_t i = 0; i < n; i++)
        memcpy(&out[i], &poison, 4);
    quant_dequant(out, q->data, type, n / blk);

    const float *want = deq->data;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (bits_of(out[i]) == bits_of(want[i])) continue;
        if (bad < 6) {
            const int64_t b = i / blk;
            printf("  %s MISMATCH row %lld block %lld element %lld (flat %lld): expected %.9g (0x%08x), "
                   "got %.9g (0x%08x)\n", TYPES[k].name, (long long)(i / cols), (long long)(b % (cols / blk)),
                   (long long)(i % blk), (long long)i, (double)want[i], bits_of(want[i]), (double)out[i],
                   bits_of(out[i]));
            if (bad == 0) {
                const uint8_t *p = (const uint8_t *)q->data + b * bb;
                printf("  %s block bytes (%d):", TYPES[k].name, bb);
                for (int j = 0; j < bb; j++)
                    printf("%s%02x", j % 32 ? " " : "\n    ", p[j]);
                printf("\n");
            }
        }
        bad++;
    }
    printf("quant_ref %-6s dequant: %lld of %lld values bit-exact (%lld rows x %lld)\n", TYPES[k].name,
           (long long)(n - bad), (long long)n, (long long)rows, (long long)cols);
    free(out);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------- */
/* 2 and 3. Activation quantization and dot products                         */
/* ------------------------------------------------------------------------- */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

#define T_ROWS QUANT_MAX_C      /* activation rows per weight row */
#define TOL_Q 1e-5              /* float rounding, relative to sum |w x'| */

/* Activation row t for weight row w (n): rows 0 and 1 follow w (so the dot
 * is large and the tolerance must be small against it), 2 is noise, 3 is
 * noise with outliers (wide blocks, coarse quantization). */
static void make_acts(float *x, const float *w, int64_t n, int t) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)w[i] * w[i];
    const double rms = ss > 0 ? sqrt(ss / (double)n) : 1.0;
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (t) {
        case 0: v = w[i] / rms + 0.3 * rng_unit(); break;
        case 1: v = -0.5 * w[i] / rms + 0.2 * rng_unit(); break;
        case 2: v = rng_unit(); break;
        default: v = 0.1 * rng_unit() + ((rng_next() & 63) == 0 ? 20.0 * rng_unit() : 0.0); break;
        }
        x[i] = (float)v;
    }
}

/* Check one quantized activation row against quant.h's rule; fill the
 * per-block exact scale dx (n / dblock). Returns the number of violations. */
static int check_act_row(int act, const float *x, const int8_t *q, const float *d, const int16_t *s,
                         int64_t n, double *dx, const char *name) {
    const int db = quant_act_dblock(act), sb = quant_act_sblock(act);
    int bad = 0;
    for (int64_t b = 0; b < n / db; b++) {
        double amax = 0;
        for (int j = 0; j < db; j++)
            amax = fmax(amax, fabs((double)x[b * db + j]));
        const double de = amax / 127.0;
        dx[b] = de;
        /* f16 rounding (Q8_32) is 2^-11 relative; the float division 2^-24. */
        const double rel = act == QUANT_ACT_Q8_32 ? 0x1p-11 : 0x1p-22;
        if (fabs((double)d[b] - de) > rel * de + 1e-30) {
            if (bad++ < 4) printf("  %s act block %lld: scale %.9g, expected %.9g\n", name, (long long)b, d[b], de);
        }
        for (int j = 0; j < db; j++) {
            const int64_t i = b * db + j;
            if (q[i] < -127 || fabs((double)x[i] - de * q[i]) > de * 0.5 * (1 + 1e-5)) {
                if (bad++ < 4)
                    printf("  %s act element %lld: x %.9g q %d scale %.9g\n", name, (long long)i, x[i], q[i], de);
            }
        }
    }
    if (s) {
        for (int64_t g = 0; g < n / sb; g++) {
            int sum = 0;
            for (int j = 0; j < sb; j++)
                sum += q[g * sb + j];
            if (sum != s[g] && bad++ < 4) printf("  %s act sum %lld: %d, expected %d\n", name, (long long)g, s[g], sum);
        }
    }
    return bad;
}

typedef struct dot_stats {
    double worst;               /* max |err| / tol */
    double worst_q;             /* max |y - dot(w, d' q)| / sum |w d' q| */
    double worst_tol_rel;       /* max tol / |dot| over the correlated rows */
    double min_teeth;           /* min |y - dot(other row)| / tol over the correlated rows */
    int fails;
    int64_t row;                /* the weight row being run (for messages) */
    int c1_c4_same;             /* C = 1 and C = 4 gave the same bits everywhere */
} dot_stats;

/* Run one kernel on one weight row w (its blocks at wrow, NumPy's floats at
 * w, another row's at wother) against the T_ROWS activation rows x, quantized
 * in xa (scales dq, exact scales dx); add the outcome to st. */
static void run_kernel(quant_dot_fn *fn, const char *kname, const char *tname, const void *wrow, int64_t nb,
                       const quant_acts *xa, const float *w, const float *wother, const float *x,
                       const double *dx, const float *dq, int act, dot_stats *st) {
    const int64_t n = xa->n;
    const int db = quant_act_dblock(act);
    /* C = 4 into a strided output (ldy 3, so slots between stay untouched). */
    float y4[3 * T_ROWS];
    const uint32_t poison = 0x7fc0beefu;
    for (int i = 0; i < 3 * T_ROWS; i++)
        memcpy(&y4[i], &poison, 4);
    fn(y4, 3, wrow, 0, 1, nb, xa, T_ROWS);
    for (int i = 0; i < 3 * T_ROWS; i++)
        if (i % 3 && bits_of(y4[i]) != poison) {
            printf("  %s %s: C=%d, ldy 3 wrote y[%d]\n", tname, kname, T_ROWS, i);
            st->fails++;
        }
    for (int t = 0; t < T_ROWS; t++) {
        /* C = 1 on row t alone. */
        quant_acts one = {xa->q + t * n, xa->d + t * (n / db),
                          xa->s ? xa->s + t * (n / quant_act_sblock(act)) : NULL, n};
        float y1 = NAN;
        fn(&y1, 1, wrow, 0, 1, nb, &one, 1);
        if (bits_of(y1) != bits_of(y4[3 * t])) st->c1_c4_same = 0;

        const float *xt = x + t * n;
        const int8_t *qt = xa->q + t * n;
        const float *dt = dq + t * (n / db);
        const double *dxt = dx + t * (n / db);
        double ref = 0, other = 0, abswx = 0, bound = 0, refq = 0, abswxq = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t b = i / db;
            const double xq = (double)dt[b] * qt[i];        /* the activation the kernel sees */
            ref += (double)w[i] * xt[i];
            other += (double)wother[i] * xt[i];
            abswx += fabs((double)w[i] * xt[i]);
            bound += fabs((double)w[i]) * (dxt[b] * 0.5 * (1 + 1e-5) + fabs((double)dt[b] - dxt[b]) * abs(qt[i]));
            refq += (double)w[i] * xq;
            abswxq += fabs((double)w[i] * xq);
        }
        const double tol = bound + 1e-5 * abswx;
        const double tolq = TOL_Q * abswxq;
        const float ys[2] = {y4[3 * t], y1};
        for (int v = 0; v < 2; v++) {
            const double err = fabs((double)ys[v] - ref), errq = fabs((double)ys[v] - refq);
            if (!(err <= tol)) {
                if (st->fails < 6)
                    printf("  %s %s: weight row %lld, act row %d (C=%d): got %.9g, reference %.9g, |err| %.3g > "
                           "tol %.3g\n", tname, kname, (long long)st->row, t, v ? 1 : T_ROWS, (double)ys[v], ref, err,
                           tol);
                st->fails++;
            }
            if (!(errq <= tolq)) {
                if (st->fails < 6)
                    printf("  %s %s: weight row %lld, act row %d (C=%d): got %.9g, dot with the quantized "
                           "activations %.9g, |err| %.3g > %.0e sum|w x'| = %.3g\n", tname, kname, (long long)st->row,
                           t, v ? 1 : T_ROWS, (double)ys[v], refq, errq, TOL_Q, tolq);
                st->fails++;
            }
            if (tol > 0) st->worst = fmax(st->worst, err / tol);
            if (abswxq > 0) st->worst_q = fmax(st->worst_q, errq / abswxq);
        }
        if (t < 2) {
            st->worst_tol_rel = fmax(st->worst_tol_rel, tol / fabs(ref));
            st->min_teeth = fmin(st->min_teeth, fabs((double)ys[0] - other) / tol);
        }
    }
}

static void test_dot(void **state) {
    const int k = **(const int **)state;
    const uint32_t type = TYPES[k].type;
    const char *tname = TYPES[k].name;
    const gguf_tensor *q, *deq;
    fixture_pair(type, &q, &deq);
    const int64_t n = (int64_t)q->ne[0], rows = (int64_t)q->ne[1];
    const int blk = TYPES[k].block;
    const uint64_t row_bytes = (uint64_t)(n / blk * TYPES[k].bytes);

    const int act = quant_act_format(type);
    if (act != TYPES[k].act)
        printf("  %s: quant_act_format %d, expected %d (quant.h)\n", tname, act, TYPES[k].act);
    assert_int_equal(act, TYPES[k].act);
    static const int isas[] = {QUANT_ISA_AVX2, QUANT_ISA_AVXVNNI, QUANT_ISA_AVX512VNNI};
    static const char *const isa_names[] = {"avx2", "avxvnni", "avx512vnni"};
    enum { NV = sizeof isas / sizeof isas[0] };
    quant_dot_fn *fs = quant_dot_scalar(type), *fv[NV];
    for (int i = 0; i < NV; i++)
        fv[i] = quant_dot_isa(type, isas[i]);
    if (!fs) printf("  %s: no scalar dot kernel\n", tname);
    assert_non_null(fs);
    const int db = quant_act_dblock(act), sb = quant_act_sblock(act);

    float *x = malloc(sizeof(float) * (size_t)(T_ROWS * n));
    int8_t *aq = malloc((size_t)(T_ROWS * n));
    float *ad = malloc(sizeof(float) * (size_t)(T_ROWS * (n / db)));
    int16_t *as = malloc(sizeof(int16_t) * (size_t)(T_ROWS * (n / sb)));
    double *dx = malloc(sizeof(double) * (size_t)(T_ROWS * (n / db)));
    assert_true(x && aq && ad && as && dx);

    dot_stats ss = {0, 0, 0, INFINITY, 0, 0, 1}, sv[NV];
    for (int i = 0; i < NV; i++)
        sv[i] = ss;
    int act_bad = 0;
    rng_seed(1000 + type);
    const float *W = deq->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *w = W + r * n, *wother = W + ((r + 1) % rows) * n;
        for (int t = 0; t < T_ROWS; t++) {
            make_acts(x + t * n, w, n, t);
            quant_act_row(act, aq + t * n, ad + t * (n / db), as + t * (n / sb), x + t * n, n);
            act_bad += check_act_row(act, x + t * n, aq + t * n, ad + t * (n / db), as + t * (n / sb), n,
                                     dx + t * (n / db), tname);
        }
        quant_acts xa = {aq, ad, as, n};
        ss.row = r;
        const void *wrow = (const uint8_t *)q->data + r * row_bytes;
        run_kernel(fs, "scalar", tname, wrow, n / blk, &xa, w, wother, x, dx, ad, act, &ss);
        for (int i = 0; i < NV; i++) {
            sv[i].row = r;
            if (fv[i]) run_kernel(fv[i], isa_names[i], tname, wrow, n / blk, &xa, w, wother, x, dx, ad, act, &sv[i]);
        }
    }
    printf("quant_ref %-6s dot (%lld rows x %d act rows, n %lld, act %s): scalar max err/tol %.3f, vs x' %.1e%s; ",
           tname, (long long)rows, T_ROWS, (long long)n, act == QUANT_ACT_Q8_K ? "q8_K" : "q8_32", ss.worst,
           ss.worst_q, ss.c1_c4_same ? "" : " (C=1 and C=4 differ in bits)");
    for (int i = 0; i < NV; i++) {
        if (fv[i])
            printf("%s max err/tol %.3f, vs x' %.1e%s; ", isa_names[i], sv[i].worst, sv[i].worst_q,
                   sv[i].c1_c4_same ? "" : " (C=1 and C=4 differ in bits)");
        else
            printf("%s: none on this build/CPU/type; ", isa_names[i]);
    }
    printf("tol/|dot| <= %.4f and wrong-row miss >= %.1f tol on correlated rows\n", ss.worst_tol_rel,
           ss.min_teeth);
    free(x);
    free(aq);
    free(ad);
    free(as);
    free(dx);
    assert_int_equal(act_bad, 0);
    assert_int_equal(ss.fails, 0);
    for (int i = 0; i < NV; i++)
        assert_int_equal(sv[i].fails, 0);
    /* Teeth: the tolerance is small against the dot, and a wrong weight
     * row would be caught. */
    assert_true(ss.worst_tol_rel < 0.05);
    assert_true(ss.min_teeth > 1.0);
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [FIXTURE.gguf]  (tests/ref/gguf_quant_write.py fixture writes one)\n", argv[0]);
        return 2;
    }
    fx_arg = argc == 2 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);   /* keep our lines in order with cmocka's */
    struct CMUnitTest tests[2 * N_TYPES];
    char names[2 * N_TYPES][32];
    for (int i = 0; i < N_TYPES; i++) {
        snprintf(names[2 * i], sizeof names[0], "dequant_%s", TYPES[i].name);
        snprintf(names[2 * i + 1], sizeof names[0], "dot_%s", TYPES[i].name);
        tests[2 * i] = (struct CMUnitTest){names[2 * i], test_dequant, NULL, NULL, (void *)&TYPE_IDX[i]};
        tests[2 * i + 1] = (struct CMUnitTest){names[2 * i + 1], test_dot, NULL, NULL, (void *)&TYPE_IDX[i]};
    }
    return _cmocka_run_group_tests("quant_ref", tests, 2 * N_TYPES, group_setup, group_teardown);
}
