/*
 * test_quant_legacy.c - the 32-element formats (quant_legacy.c: Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) against this file's own decoder, which
 * reads each layout bit by bit as quant.h describes it.
 *
 * Checked for every type: hand-built blocks decode to values worked out
 * by hand (nibble order, fifth-bit placement, signs of the scales);
 * random blocks dequantize bit-exactly as the decoder says (one float
 * product, then one float sum for the types with a min); quantizing then
 * dequantizing stays within the format's error bound; the scalar dot
 * product matches a double-precision dot of the dequantized weights and
 * activations to float rounding; the AVX2 kernel matches the scalar one;
 * a row's result is bit-identical whatever the batch around it; and
 * blocks of random bytes, NaN and inf scales included, never crash a
 * kernel. Data is seeded, so a failure reproduces.
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

#include "gguf.h"
#include "testutil.h"
#include "ops.h"
#include "quant.h"

/* ------------------------------------------------------------------------- */
/* Helpers: seeded data and an independent decoder                           */
/* ------------------------------------------------------------------------- */


/* Roughly normal: the sum of four uniforms. */
static float rng_normal(void) { return (tu_rng_float() + tu_rng_float() + tu_rng_float() + tu_rng_float()) * 0.866f; }

typedef struct tcase {
    uint32_t type;
    const char *name;
    int bytes;      /* per block of 32 */
    int has_min;    /* w = d q + m (q unsigned) rather than w = d q */
    int lo, hi;     /* the range of q, as the decoder returns it */
} tcase;

static const tcase CASES[] = {
    {GGUF_TT_Q4_0, "q4_0", 18, 0, -8, 7},     {GGUF_TT_Q4_1, "q4_1", 20, 1, 0, 15},
    {GGUF_TT_Q5_0, "q5_0", 22, 0, -16, 15},   {GGUF_TT_Q5_1, "q5_1", 24, 1, 0, 31},
    {GGUF_TT_Q8_0, "q8_0", 34, 0, -128, 127}, {GGUF_TT_IQ4_NL, "iq4_nl", 18, 0, -127, 113},
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static float f16_at(const uint8_t *p) { return ops_f16_to_f32_ref((uint16_t)(p[0] | p[1] << 8)); }

/* Nibble of element j (0..31) in 16 bytes: low nibbles first. */
static int nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

/* Bit j of the little-endian 32 bits at qh, read byte by byte. */
static int bit(const uint8_t *qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

/* One block as integers q (IQ4_NL: the table's value) with w = d q, or
 * w = d q + m for the types with a min. */
static void ref_decode(const tcase *t, const uint8_t *blk, int q[32], float *d, float *m) {
    *d = f16_at(blk);
    *m = 0.0f;
    for (int j = 0; j < 32; j++) {
        switch (t->type) {
        case GGUF_TT_Q4_0: q[j] = nib(blk + 2, j) - 8; break;
        case GGUF_TT_Q4_1: q[j] = nib(blk + 4, j); break;
        case GGUF_TT_Q5_0: q[j] = (nib(blk + 6, j) | bit(blk + 2, j) << 4) - 16; break;
        case GGUF_TT_Q5_1: q[j] = nib(blk + 8, j) | bit(blk + 4, j) << 4; break;
        case GGUF_TT_Q8_0: q[j] = (int8_t)blk[2 + j]; break;
        default: q[j] = QUANT_IQ4NL_VALUES[nib(blk + 2, j)]; break;
        }
    }
    if (t->has_min) *m = f16_at(blk + 2);
}

/* w as ggml computes it: q * d, then + m, each rounded (the product is
 * in fact exact; the volatile keeps the two apart regardless). No + m
 * without a min: ggml's -0 for q = 0 and d < 0 must stay -0. */
static float ref_weight(int q, float d, float m, int has_min) {
    volatile float p = (float)q * d;
    return has_min ? p + m : p;
}

static void ref_dequant(const tcase *t, float *out, const uint8_t *w, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        int q[32];
        float d, m;
        ref_decode(t, w + b * t->bytes, q, &d, &m);
        for (int j = 0; j < 32; j++)
            out[b * 32 + j] = ref_weight(q[j], d, m, t->has_min);
    }
}

/* Random blocks; scales random finite f16 of magnitude below 2 (the
 * exponent's top bit clear) when finite, any 16 bits otherwise. */
static void random_blocks(const tcase *t, uint8_t *w, int64_t nb, int finite) {
    for (int64_t i = 0; i < nb * t->bytes; i++)
        w[i] = (uint8_t)tu_rng_next();
    if (!finite) return;
    for (int64_t b = 0; b < nb; b++) {
        w[b * t->bytes + 1] &= 0xBF;
        if (t->has_min) w[b * t->bytes + 3] &= 0xBF;
    }
}

/* Activations of T rows of n: the quantized form the kernels read, with
 * its buffers (free with acts_free). */
typedef struct acts {
    quant_acts a;
    int8_t *q;
    float *d;
    int16_t *s;
} acts;

static void acts_make(acts *x, int T, int64_t n, float scale) {
    float *f = malloc((size_t)n * sizeof *f);
    x->q = malloc((size_t)(T * n));
    x->d = malloc((size_t)(T * n / 32) * sizeof *x->d);
    x->s = malloc((size_t)(T * n / 32) * sizeof *x->s);
    assert_non_null(f);
    assert_non_null(x->q);
    for (int t = 0; t < T; t++) {
        for (int64_t i = 0; i < n; i++)
            f[i] = rng_normal() * scale;
        quant_act_row(QUANT_ACT_Q8_32, x->q + t * n, x->d + t * n / 32, x->s + t * n / 32, f, n);
    }
    x->a = (quant_acts){x->q, x->d, x->s, n};
    free(f);
}

/* Rows r.. of x as their own activations. */
static quant_acts acts_view(const acts *x, int r) {
    const int64_t n = x->a.n;
    return (quant_acts){x->q + r * n, x->d + r * n / 32, x->s + r * n / 32, n};
}

static void acts_free(acts *x) {
    free(x->q);
    free(x->d);
    free(x->s);
}

/* The dot of one weight row with activation row r in double, from the
 * dequantized weights and activations (q dx); *mag gets sum |terms|, the
 * terms of w = d q + m counted apart, as the kernels compute them so. */
static double ref_dot(const tcase *t, const uint8_t *w, int64_t nb, const acts *x, int r, double *mag) {
    double s = 0.0, a = 0.0;
    const int64_t n = x->a.n;
    for (int64_t b = 0; b < nb; b++) {
        int q[32];
        float d, m;
        ref_decode(t, w + b * t->bytes, q, &d, &m);
        const double dx = x->d[r * n / 32 + b];
        for (int j = 0; j < 32; j++) {
            const double xv = (double)x->q[r * n + b * 32 + j] * dx;
            s += (double)ref_weight(q[j], d, m, t->has_min) * xv;
            a += (fabs((double)q[j] * d) + fabs((double)m)) * fabs(xv);
        }
    }
    *mag = a;
    return s;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ------------------------------------------------------------------------- */
/* The table                                                                 */
/* ------------------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        assert_int_equal(quant_act_format(t->type), QUANT_ACT_Q8_32);
        assert_int_equal(gguf_type_block(t->type), 32);
        assert_int_equal(gguf_type_block_bytes(t->type), t->bytes);
        assert_non_null(quant_dot_scalar(t->type));
        assert_non_null(quant_dot(t->type));
#if defined(__x86_64__)
        const int avx2 =
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        if (avx2) assert_non_null(quant_dot_avx2(t->type));
        if (avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
            assert_non_null(quant_dot_isa(t->type, QUANT_ISA_AVX512VNNI));
        /* quant_dot prefers a VNNI kernel where there is one */
        if (quant_dot_isa(t->type, QUANT_ISA_AVX512VNNI) && !quant_dot_isa(t->type, QUANT_ISA_AVXVNNI))
            assert_ptr_equal(quant_dot(t->type), quant_dot_isa(t->type, QUANT_ISA_AVX512VNNI));
        if (quant_dot_isa(t->type, QUANT_ISA_AVXVNNI))
            assert_ptr_equal(quant_dot(t->type), quant_dot_isa(t->type, QUANT_ISA_AVXVNNI));
#endif
    }
}

/* ------------------------------------------------------------------------- */
/* Dequantizing                                                              */
/* ------------------------------------------------------------------------- */

/* Nibbles j (low) and 15 - j (high) in byte j: element j reads j and
 * element 16 + j reads 15 - j, so the order of the halves shows. */
static void fill_ramp(uint8_t *qs) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(j | (15 - j) << 4);
}

/* Fifth bits set for elements 0, 15, 17 and 30 only: qh = 0x40028001. */
static const uint8_t QH_SPARSE[4] = {0x01, 0x80, 0x02, 0x40};

static void check_block(uint32_t type, const uint8_t *blk, const float want[32]) {
    float got[32];
    quant_dequant(got, blk, type, 1);
    for (int j = 0; j < 32; j++) {
        if (got[j] != want[j]) fprintf(stderr, "type %u element %d: got %g want %g\n", type, j, got[j], want[j]);
        assert_true(got[j] == want[j]);
    }
}

static void test_dequant_known(void **state) {
    (void)state;
    {   /* Q4_0, d = 0.5: (nibble - 8) / 2 */
        uint8_t b[18] = {0x00, 0x38};
        fill_ramp(b + 2);
        const float want[32] = {-4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5,
                                3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4};
        check_block(GGUF_TT_Q4_0, b, want);
    }
    {   /* Q4_1, d = 0.25, m = -1: nibble / 4 - 1 */
        uint8_t b[20] = {0x00, 0x34, 0x00, 0xBC};
        fill_ramp(b + 4);
        const float want[32] = {-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75,
                                2.75, 2.5, 2.25, 2, 1.75, 1.5, 1.25, 1, 0.75, 0.5, 0.25, 0, -0.25, -0.5, -0.75, -1};
        check_block(GGUF_TT_Q4_1, b, want);
    }
    {   /* Q5_0, d = 1: nibble + 16 fifth bit - 16 */
        uint8_t b[22] = {0x00, 0x3C};
        memcpy(b + 2, QH_SPARSE, 4);
        fill_ramp(b + 6);
        const float want[32] = {0, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, 15,
                                -1, 14, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, 1, -16};
        check_block(GGUF_TT_Q5_0, b, want);
    }
    {   /* Q5_1, d = 0.5, m = 2: (nibble + 16 fifth bit) / 2 + 2 */
        uint8_t b[24] = {0x00, 0x38, 0x00, 0x40};
        memcpy(b + 4, QH_SPARSE, 4);
        fill_ramp(b + 8);
        const float want[32] = {10, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9, 17.5,
                                9.5, 17, 8.5, 8, 7.5, 7, 6.5, 6, 5.5, 5, 4.5, 4, 3.5, 3, 10.5, 2};
        check_block(GGUF_TT_Q5_1, b, want);
    }
    {   /* Q8_0, d = 0.125, q = 8 j - 128 (-128 included): j - 16 */
        uint8_t b[34] = {0x00, 0x30};
        float want[32];
        for (int j = 0; j < 32; j++) {
            b[2 + j] = (uint8_t)(8 * j - 128);
            want[j] = (float)(j - 16);
        }
        check_block(GGUF_TT_Q8_0, b, want);
    }
    {   /* IQ4_NL, d = -2: -2 values[nibble] */
        uint8_t b[18] = {0x00, 0xC0};
        fill_ramp(b + 2);
        const float want[32] = {254, 208, 166, 130, 98, 70, 44, 20, -2, -26, -50, -76, -106, -138, -178, -226,
                                -226, -178, -138, -106, -76, -50, -26, -2, 20, 44, 70, 98, 130, 166, 208, 254};
        check_block(GGUF_TT_IQ4_NL, b, want);
    }
}

/* Random blocks, subnormal and negative scales among them, decode to the
 * same bits as the decoder's. */
static void test_dequant_random(void **state) {
    (void)state;
    tu_rng_seed(1);
    const int64_t nb = 257;
    float *got = malloc(nb * 32 * sizeof *got), *want = malloc(nb * 32 * sizeof *want);
    uint8_t *w = malloc((size_t)nb * 34);
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        for (int rep = 0; rep < 4; rep++) {
            random_blocks(t, w, nb, 1);
            quant_dequant(got, w, t->type, nb);
            ref_dequant(t, want, w, nb);
            for (int64_t i = 0; i < nb * 32; i++)
                assert_int_equal(bits_of(got[i]), bits_of(want[i]));
        }
    }
    free(got);
    free(want);
    free(w);
}

/* ------------------------------------------------------------------------- */
/* Quantizing                                                                */
/* ------------------------------------------------------------------------- */

/* The error bound of a quantized element x, from the stored scale d (and
 * min m). Every quantizer picks the level nearest x / d, except that:
 *  - it rounds by the unrounded scale, and the stored f16 scale and min
 *    are off by up to 2^-11 relative; over at most 32 steps and the min
 *    that moves an element by less than 2^-9 of the block's max |x|
 *    (slack);
 *  - Q4_0 and Q5_0 put the signed max on the bottom level -8 (-16), so an
 *    element of opposite sign near it sits up to one step above the top
 *    level 7 (15) and is clamped there: error up to d, not d/2.
 * So |x - w| <= |d| max(1/2, distance of x / d beyond [lo, hi]) + slack,
 * where the distance itself is at most 1 (checked). IQ4_NL picks its
 * levels with the stored scale: the nearest of the table, up to float
 * rounding. */
static void check_roundtrip(const tcase *t, const float *x, const float *got, const uint8_t *w, int64_t nb,
                            double *err2, double *x2) {
    for (int64_t b = 0; b < nb; b++) {
        int q[32];
        float d, m;
        ref_decode(t, w + b * t->bytes, q, &d, &m);
        double amax = 0.0;
        for (int j = 0; j < 32; j++)
            amax = fmax(amax, fabs(x[b * 32 + j]));
        for (int j = 0; j < 32; j++) {
            const double xv = x[b * 32 + j], e = fabs(xv - got[b * 32 + j]);
            double bound;
            if (t->type == GGUF_TT_IQ4_NL) {
                bound = INFINITY;
                for (int v = 0; v < 16; v++)
                    bound = fmin(bound, fabs(xv - (double)d * QUANT_IQ4NL_VALUES[v]));
                bound += 1e-6 * amax;
            } else if (d == 0.0f) {
                bound = fabs(xv - m) + 1e-9;  /* a constant block: w = m */
            } else {
                const double tq = (xv - m) / d;
                const double dist = fmax(0.5, fmax(tq - t->hi, t->lo - tq));
                assert_true(dist <= 1.0 + 1.0 / 128);
                bound = fabs((double)d) * dist + amax / 512;
            }
            if (e > bound)
                fprintf(stderr, "%s block %ld element %d: x %g w %g d %g m %g, error %g > %g\n", t->name, (long)b, j,
                        xv, got[b * 32 + j], d, m, e, bound);
            assert_true(e <= bound);
            *err2 += e * e;
            *x2 += xv * xv;
        }
    }
}

/* Data the formats can hold exactly round-trips exactly: each type's
 * levels at a scale that is a power of two, the whole range used. */
static void test_roundtrip_exact(void **state) {
    (void)state;
    uint8_t w[34];
    float x[32], got[32];
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        for (int j = 0; j < 32; j++) {
            switch (t->type) {
            case GGUF_TT_Q4_0: x[j] = (float)(j % 16 - 8) * 0.5f; break;
            case GGUF_TT_Q4_1: x[j] = (float)(j % 16) * 0.125f - 1.0f; break;
            case GGUF_TT_Q5_0: x[j] = (float)(j - 16) * 0.25f; break;
            case GGUF_TT_Q5_1: x[j] = (float)j * 0.0625f - 1.0f; break;
            case GGUF_TT_Q8_0: x[j] = (float)(j * 8 - 127) / 128.0f; break;  /* -127/128 .. 121/128 */
            default: x[j] = 0.25f * QUANT_IQ4NL_VALUES[j % 16]; break;
            }
        }
        assert_int_equal(quant_quantize(w, x, t->type, 32), 0);
        quant_dequant(got, w, t->type, 1);
        for (int j = 0; j < 32; j++) {
            if (got[j] != x[j]) fprintf(stderr, "%s element %d: %g -> %g\n", t->name, j, x[j], got[j]);
            assert_true(got[j] == x[j]);
        }
    }
}

static void test_roundtrip_random(void **state) {
    (void)state;
    tu_rng_seed(2);
    const int64_t nb = 64, n = nb * 32;
    float *x = malloc(n * sizeof *x), *got = malloc(n * sizeof *got);
    uint8_t *w = malloc((size_t)nb * 34);
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        double err2 = 0.0, x2 = 0.0;
        for (int dist = 0; dist < 6; dist++) {
            for (int64_t i = 0; i < n; i++) {
                switch (dist) {
                case 0: x[i] = tu_rng_float(); break;
                case 1: x[i] = rng_normal(); break;
                case 2: x[i] = rng_normal() * 1e-3f; break;
                case 3: x[i] = rng_normal() * 300.0f; break;
                case 4: x[i] = 0.5f + 0.01f * tu_rng_float(); break;      /* all one sign, Q4_1's case */
                default: x[i] = i % 97 == 0 ? 40.0f : rng_normal(); break;  /* outliers */
                }
            }
            for (int j = 0; j < 32; j++) {  /* a zero block and a constant one */
                x[j] = 0.0f;
                x[32 + j] = -3.0f;
            }
            assert_int_equal(quant_quantize(w, x, t->type, n), 0);
            quant_dequant(got, w, t->type, nb);
            double e2 = 0.0, xx = 0.0;
            check_roundtrip(t, x, got, w, nb, &e2, &xx);
            if (dist <= 1) {
                err2 += e2;
                x2 += xx;
            }
            /* Deterministic: the same bytes again. */
            uint8_t *w2 = malloc((size_t)nb * 34);
            assert_int_equal(quant_quantize(w2, x, t->type, n), 0);
            assert_memory_equal(w, w2, (size_t)(nb * t->bytes));
            free(w2);
        }
        /* Relative RMS error over uniform and normal data: a sanity bound
         * well above any of the formats' (the worst, Q4_0 and IQ4_NL, come
         * to about 0.08). */
        const double rel = sqrt(err2 / x2);
        printf("  %-6s relative rms error %.4f\n", t->name, rel);
        assert_true(rel < 0.12);
    }
    assert_int_equal(quant_quantize(w, x, GGUF_TT_Q4_0, 31), -1);
    free(x);
    free(got);
    free(w);
}

/* ------------------------------------------------------------------------- */
/* Dot products                                                              */
/* ------------------------------------------------------------------------- */

static const int64_t NBS[] = {1, 2, 3, 5, 8, 24, 65};
#define N_NBS (int)(sizeof NBS / sizeof NBS[0])

/* The scalar kernel against the double dot of what the weights and the
 * activations decode to. Integer sums per block are exact, so the only
 * differences are the float roundings of the per-block scaling (dw dx,
 * then times the sum: 2 roundings, 4 with a min) and of accumulating 2 nb
 * terms: within (2 nb + 4) 2^-24 of sum |terms|. */
static void test_dot_scalar(void **state) {
    (void)state;
    tu_rng_seed(3);
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        quant_dot_fn *dot = quant_dot_scalar(t->type);
        for (int z = 0; z < N_NBS; z++) {
            const int64_t nb = NBS[z];
            uint8_t *w = malloc((size_t)(nb * t->bytes));
            acts x;
            random_blocks(t, w, nb, 1);
            acts_make(&x, 4, nb * 32, 1.0f);
            float y[4];
            dot(y, 1, w, 0, 1, nb, &x.a, 4);
            for (int c = 0; c < 4; c++) {
                double mag;
                const double want = ref_dot(t, w, nb, &x, c, &mag);
                const double tol = (2.0 * nb + 8.0) * ldexp(mag, -24) + 1e-30;
                if (fabs(y[c] - want) > tol)
                    fprintf(stderr, "%s nb %ld row %d: %.9g vs %.9g (tol %g)\n", t->name, (long)nb, c, y[c], want, tol);
                assert_true(fabs(y[c] - want) <= tol);
            }
            acts_free(&x);
            free(w);
        }
    }
}

/* The vector kernels this CPU runs (quant_dot_isa), by name. */
static const int VEC_ISAS[] = {QUANT_ISA_AVX2, QUANT_ISA_AVXVNNI, QUANT_ISA_AVX512VNNI};
static const char *const VEC_NAMES[] = {"avx2", "avxvnni", "avx512vnni"};
#define N_VEC ((int)(sizeof VEC_ISAS / sizeof VEC_ISAS[0]))

/* Each vector kernel against scalar, every C, to 1e-6 of sum |terms|:
 * they add the same exact block sums in different orders. The VNNI
 * kernels against the AVX2 ones, bit for bit: they sum the same integers
 * (vpdpbusd for maddubs and madd; Q4_0 and Q4_1's high nibbles 16 times
 * over, then divided by 16, exact) and apply the scales in the same
 * order. */
static void check_dot_vec(int isa, const char *name) {
    tu_rng_seed(4);
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        quant_dot_fn *ref = quant_dot_scalar(t->type), *vec = quant_dot_isa(t->type, isa);
        quant_dot_fn *avx2 = isa == QUANT_ISA_AVX2 ? NULL : quant_dot_avx2(t->type);
        if (!vec) {
            printf("  %s: no %s kernel on this CPU or build, skipped\n", t->name, name);
            continue;
        }
        for (int z = 0; z < N_NBS; z++) {
            const int64_t nb = NBS[z];
            uint8_t *w = malloc((size_t)(nb * t->bytes));
            acts x;
            random_blocks(t, w, nb, 1);
            acts_make(&x, 4, nb * 32, 2.0f);
            for (int C = 1; C <= 4; C++) {
                float ys[4], yv[4], ya[4];
                ref(ys, 1, w, 0, 1, nb, &x.a, C);
                vec(yv, 1, w, 0, 1, nb, &x.a, C);
                if (avx2) avx2(ya, 1, w, 0, 1, nb, &x.a, C);
                for (int c = 0; avx2 && c < C; c++)
                    assert_int_equal(bits_of(yv[c]), bits_of(ya[c]));
                for (int c = 0; c < C; c++) {
                    double mag;
                    (void)ref_dot(t, w, nb, &x, c, &mag);
                    if (fabs(yv[c] - ys[c]) > 1e-6 * mag)
                        fprintf(stderr, "%s nb %ld C %d row %d: %s %.9g scalar %.9g\n", t->name, (long)nb, C, c,
                                name, yv[c], ys[c]);
                    assert_true(fabs(yv[c] - ys[c]) <= 1e-6 * mag);
                }
            }
            acts_free(&x);
            free(w);
        }
    }
}

static void test_dot_vec(void **state) {
    (void)state;
    for (int i = 0; i < N_VEC; i++)
        check_dot_vec(VEC_ISAS[i], VEC_NAMES[i]);
}

/* Row c's result from a group of C equals, bit for bit, its result alone
 * and in any other group; outputs land ldy apart and nothing between them
 * is written. */
static void check_invariance(const tcase *t, quant_dot_fn *dot, const uint8_t *w, int64_t nb, const acts *x) {
    enum { LDY = 3 };
    float alone[4], y[4 * LDY];
    for (int r = 0; r < 4; r++) {
        const quant_acts v = acts_view(x, r);
        dot(&alone[r], 1, w, 0, 1, nb, &v, 1);
    }
    for (int first = 0; first < 4; first++) {
        for (int C = 1; first + C <= 4; C++) {
            const quant_acts v = acts_view(x, first);
            for (int i = 0; i < 4 * LDY; i++)
                y[i] = -7.0f;
            dot(y, LDY, w, 0, 1, nb, &v, C);
            for (int i = 0; i < 4 * LDY; i++) {
                if (i % LDY == 0 && i / LDY < C) {
                    if (bits_of(y[i]) != bits_of(alone[first + i / LDY]))
                        fprintf(stderr, "%s nb %ld rows %d..%d: row %d %.9g alone %.9g\n", t->name, (long)nb, first,
                                first + C - 1, first + i / LDY, y[i], alone[first + i / LDY]);
                    assert_int_equal(bits_of(y[i]), bits_of(alone[first + i / LDY]));
                } else {
                    assert_true(y[i] == -7.0f);
                }
            }
        }
    }
}

static void test_batch_invariance(void **state) {
    (void)state;
    tu_rng_seed(5);
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        for (int z = 0; z < N_NBS; z++) {
            const int64_t nb = NBS[z];
            uint8_t *w = malloc((size_t)(nb * t->bytes));
            acts x;
            random_blocks(t, w, nb, 1);
            acts_make(&x, 4, nb * 32, 1.0f);
            check_invariance(t, quant_dot_scalar(t->type), w, nb, &x);
            for (int i = 0; i < N_VEC; i++)
                if (quant_dot_isa(t->type, VEC_ISAS[i])) check_invariance(t, quant_dot_isa(t->type, VEC_ISAS[i]), w, nb, &x);
            acts_free(&x);
            free(w);
        }
    }
}

/* Any bytes at all: nothing faults (the sanitizer build checks the
 * reads). With finite scales the outputs are finite and the kernels
 * agree; with NaN and inf scales anything may come out. */
static void test_random_bytes(void **state) {
    (void)state;
    tu_rng_seed(6);
    const int64_t nb = 7;
    float out[7 * 32];
    for (int k = 0; k < N_CASES; k++) {
        const tcase *t = &CASES[k];
        quant_dot_fn *ref = quant_dot_scalar(t->type);
        for (int rep = 0; rep < 50 * N_VEC; rep++) {
            quant_dot_fn *vec = quant_dot_isa(t->type, VEC_ISAS[rep % N_VEC]);
            const int finite = rep / N_VEC % 2 == 0;
            uint8_t *w = malloc((size_t)(nb * t->bytes));
            acts x;
            random_blocks(t, w, nb, finite);
            acts_make(&x, 4, nb * 32, 10.0f);
            quant_dequant(out, w, t->type, nb);
            float ys[4], yv[4];
            ref(ys, 1, w, 0, 1, nb, &x.a, 4);
            if (vec) vec(yv, 1, w, 0, 1, nb, &x.a, 4);
            if (finite) {
                for (int i = 0; i < nb * 32; i++)
                    assert_true(isfinite(out[i]));
                for (int c = 0; c < 4; c++) {
                    double mag;
                    (void)ref_dot(t, w, nb, &x, c, &mag);
                    assert_true(isfinite(ys[c]));
                    if (vec) assert_true(fabs(yv[c] - ys[c]) <= 1e-6 * mag);
                }
            }
            acts_free(&x);
            free(w);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_dequant_known),
        cmocka_unit_test(test_dequant_random),
        cmocka_unit_test(test_roundtrip_exact),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_dot_scalar),
        cmocka_unit_test(test_dot_vec),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_random_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
