/*
 * test_ops.c - the CPU kernels against independent references.
 *
 * Conversions are checked bit-exactly: every f16 and bf16 value, every
 * rounding midpoint between neighbouring f16 values, and the F16C path
 * against the bit-level one. ops_matmul is checked for every weight type
 * and a grid of shapes (both its decode and prefill paths, and the scalar
 * reference path) against a double-precision product computed here from
 * weights decoded by this file's own decoders, including the fused forms
 * (several products of one input, the SwiGLU pair) and calls made by every
 * thread of a parallel region. The elementwise and attention kernels are
 * held against double-precision formulas over long vectors, so their
 * vector bodies and tails both run. Data is seeded, so a failure
 * reproduces.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "testutil.h"
#include "ops.h"
#include "quant.h"

/* ------------------------------------------------------------------------- */
/* Helpers: seeded data and decoders written independently of ops.c          */
/* ------------------------------------------------------------------------- */


static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f16 by its definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m. */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(1024 + m), e - 25);
    return s ? -v : v;
}

static int half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

/* ggml's quantize_row_q8_0_ref, written out again. */
static void q8_block_ref(uint16_t *d_out, int8_t *q, const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = ops_f32_to_f16(d);
    for (int j = 0; j < 32; j++)
        q[j] = (int8_t)roundf(x[j] * id);
}

/* ------------------------------------------------------------------------- */
/* Conversions                                                               */
/* ------------------------------------------------------------------------- */

static void check_to_f16(float f, uint16_t want) {
    uint16_t hw = ops_f32_to_f16(f), sw = ops_f32_to_f16_ref(f);
    if (hw != want || sw != want)
        fail_msg("f32 %a (0x%08x) -> f16: F16C 0x%04x, ref 0x%04x, want 0x%04x", (double)f, bits_of(f), hw,
                 sw, want);
}

static void test_f16_known(void **state) {
    (void)state;
    check_to_f16(1.0f, 0x3c00);
    check_to_f16(-2.0f, 0xc000);
    check_to_f16(65504.0f, 0x7bff);
    check_to_f16(65519.0f, 0x7bff);        /* below the midpoint to 65536 */
    check_to_f16(65520.0f, 0x7c00);        /* the midpoint: even is inf */
    check_to_f16(0x1p-24f, 0x0001);        /* smallest subnormal */
    check_to_f16(0x1p-14f, 0x0400);        /* smallest normal */
    check_to_f16(0x1p-25f, 0x0000);        /* half the smallest subnormal: even is 0 */
    check_to_f16(0x1.000002p-25f, 0x0001); /* just above it */
    check_to_f16(0x3p-25f, 0x0002);        /* 1.5 subnormal steps: even is 2 */
    check_to_f16(0x1.002p0f, 0x3c00);      /* 1 + 2^-11, midpoint: even is 1.0 */
    check_to_f16(0x1.006p0f, 0x3c02);      /* 1 + 3*2^-11, midpoint: even is up */
    check_to_f16(-0.0f, 0x8000);
    check_to_f16(INFINITY, 0x7c00);
    check_to_f16(-INFINITY, 0xfc00);
    check_to_f16(1e-30f, 0x0000);
    check_to_f16(1e30f, 0x7c00);
    assert_true(half_is_nan(ops_f32_to_f16(NAN)));
    assert_true(half_is_nan(ops_f32_to_f16_ref(NAN)));
    assert_true(half_is_nan(ops_f32_to_f16_ref(float_of(0x7f800001)))); /* payload only in low bits */

    assert_true(ops_f16_to_f32(0x3c00) == 1.0f);
    assert_true(ops_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(ops_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(ops_f16_to_f32(0x03ff) == 0x3ffp-24f);
    assert_true(ops_f16_to_f32(0xc000) == -2.0f);
    assert_true(ops_f16_to_f32(0x7c00) == INFINITY);
    assert_true(ops_f16_to_f32(0xfc00) == -INFINITY);
    assert_true(isnan(ops_f16_to_f32(0x7e00)));
    assert_true(isnan(ops_f16_to_f32_ref(0x7c01)));
}

/* Every f16 value: decoding matches the definition, F16C matches the bit
 * path bit for bit (NaNs included), and encoding inverts decoding. */
static void test_f16_exhaustive(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float hw = ops_f16_to_f32(h), sw = ops_f16_to_f32_ref(h);
        if (bits_of(hw) != bits_of(sw))
            fail_msg("f16 0x%04x: F16C %08x, ref %08x", h, bits_of(hw), bits_of(sw));
        if (half_is_nan(h)) {
            assert_true(isnan(sw));
            assert_true(half_is_nan(ops_f32_to_f16_ref(sw)));
            continue;
        }
        if ((double)sw != half_value(h))
            fail_msg("f16 0x%04x decodes to %a, want %a", h, (double)sw, half_value(h));
        check_to_f16(sw, h);
    }
}

/* Midpoints between neighbouring finite f16 values round to the even one;
 * one float ulp to either side rounds to the nearer one. */
static void test_f16_midpoints(void **state) {
    (void)state;
    for (uint16_t h = 0; h < 0x7bff; h++) {
        for (int neg = 0; neg < 2; neg++) {
            const uint16_t s = neg ? 0x8000 : 0;
            const double a = half_value(h), b = half_value((uint16_t)(h + 1));
            const float mid = (float)((a + b) / 2); /* 12 significant bits: exact */
            const float m = neg ? -mid : mid;
            check_to_f16(m, (uint16_t)(s | ((h & 1) ? h + 1 : h)));
            check_to_f16(nextafterf(m, neg ? -INFINITY : INFINITY), (uint16_t)(s | (h + 1)));
            check_to_f16(nextafterf(m, 0.0f), (uint16_t)(s | h));
        }
    }
}

/* Random float bit patterns: F16C and the bit path agree, NaNs included. */
static void test_f16_random(void **state) {
    (void)state;
    tu_rng_seed(1);
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)tu_rng_next();
        if (i & 1)  /* half the samples near f16 range, where the rounding happens */
            u = (u & 0x80ffffffu) | ((uint32_t)(0x30 + (u >> 24) % 0x18) << 24);
        const float f = float_of(u);
        const uint16_t hw = ops_f32_to_f16(f), sw = ops_f32_to_f16_ref(f);
        if (hw != sw)
            fail_msg("f32 0x%08x: F16C 0x%04x, ref 0x%04x", u, hw, sw);
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(ops_f32_to_bf16(1.0f), 0x3f80);
    assert_true(ops_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(ops_bf16_to_f32(0xc040) == -3.0f);
    assert_int_equal(ops_f32_to_bf16(float_of(0x3f808000)), 0x3f80); /* midpoint: even */
    assert_int_equal(ops_f32_to_bf16(float_of(0x3f818000)), 0x3f82); /* midpoint: even is up */
    assert_int_equal(ops_f32_to_bf16(float_of(0x3f808001)), 0x3f81);
    assert_int_equal(ops_f32_to_bf16(float_of(0x3f807fff)), 0x3f80);
    assert_int_equal(ops_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(ops_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(ops_f32_to_bf16(float_of(0x7f7fffff)), 0x7f80);  /* FLT_MAX rounds to inf */
    assert_int_equal(ops_f32_to_bf16(float_of(0x00000001)), 0x0000);  /* subnormals round too */
    assert_int_equal(ops_f32_to_bf16(float_of(0x00018000)), 0x0002);
    assert_int_equal(ops_f32_to_bf16(-0.0f), 0x8000);
    const uint16_t n = ops_f32_to_bf16(float_of(0x7f800001)); /* NaN with a low payload */
    assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f));
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = ops_bf16_to_f32(h);
        assert_int_equal(bits_of(f), (uint32_t)h << 16);
        if (!isnan(f))
            assert_int_equal(ops_f32_to_bf16(f), h);
    }
}

/* ------------------------------------------------------------------------- */
/* Q8_0 quantization                                                         */
/* ------------------------------------------------------------------------- */

static void test_quantize_q8_0_known(void **state) {
    (void)state;
    float x[96] = {0};
    /* Block 0: amax 127, so d = 1 and the values are their own quants;
     * roundf takes halves away from zero (not to even). */
    const float v0[] = {127.0f, 2.5f, -2.5f, 0.49f, -0.5f, 1.5f, -126.6f, 0.5f};
    const int8_t q0[] = {127, 3, -3, 0, -1, 2, -127, 1};
    memcpy(x, v0, sizeof v0);
    /* Block 1: all zero: d = 0 and quants 0, no division by zero. */
    /* Block 2: amax 1 (negative), d = 1/127. */
    x[64] = -1.0f;
    x[65] = 0.5f;
    x[66] = 0.25f;
    uint8_t out[3 * GGUF_Q8_0_BYTES];
    memset(out, 0x55, sizeof out);
    ops_quantize_q8_0(out, x, 96);

    uint16_t d;
    memcpy(&d, out, 2);
    assert_int_equal(d, 0x3c00);
    for (int j = 0; j < 8; j++)
        assert_int_equal((int8_t)out[2 + j], q0[j]);
    for (int j = 8; j < 32; j++)
        assert_int_equal((int8_t)out[2 + j], 0);

    memcpy(&d, out + GGUF_Q8_0_BYTES, 2);
    assert_int_equal(d, 0);
    for (int j = 0; j < 32; j++)
        assert_int_equal(out[GGUF_Q8_0_BYTES + 2 + j], 0);

    const uint8_t *b2 = out + 2 * GGUF_Q8_0_BYTES;
    memcpy(&d, b2, 2);
    assert_int_equal(d, ops_f32_to_f16(1.0f / 127.0f));
    assert_int_equal((int8_t)b2[2], -127);
    assert_int_equal((int8_t)b2[3], 64); /* 63.5 rounds away from zero */
    assert_int_equal((int8_t)b2[4], 32); /* 31.75 */
}

/* Random blocks, including exact halves after scaling, against ggml's rule. */
static void test_quantize_q8_0_random(void **state) {
    (void)state;
    tu_rng_seed(2);
    enum { NB = 4096 };
    float *x = malloc(NB * 32 * sizeof(float));
    uint8_t *out = malloc(NB * GGUF_Q8_0_BYTES);
    assert_non_null(x);
    assert_non_null(out);
    for (int i = 0; i < NB * 32; i++) {
        x[i] = tu_rng_float() * (float)(1 + (i / 32) % 7);
        if (i % 32 == 0 && (i / 32) % 3 == 0)
            x[i] = 127.0f;  /* d = 1: the others below become exact halves */
        if ((i / 32) % 3 == 0 && i % 32 != 0)
            x[i] = (float)((int)(tu_rng_next() % 255) - 127) + 0.5f * (float)(tu_rng_next() % 2);
    }
    ops_quantize_q8_0(out, x, NB * 32);
    for (int b = 0; b < NB; b++) {
        uint16_t dw, dg;
        int8_t q[32];
        q8_block_ref(&dw, q, x + b * 32);
        memcpy(&dg, out + b * GGUF_Q8_0_BYTES, 2);
        assert_int_equal(dg, dw);
        assert_memory_equal(out + b * GGUF_Q8_0_BYTES + 2, q, 32);
    }
    free(x);
    free(out);
}

/* ------------------------------------------------------------------------- */
/* Matmul                                                                    */
/* ------------------------------------------------------------------------- */

static const uint32_t k_types[] = {GGUF_TT_F32, GGUF_TT_F16, GGUF_TT_BF16, GGUF_TT_Q8_0};
static const int k_Ts[] = {1, 2, 3, 5, 8, 12, 13, 16, 17, 64, 130};  /* 13..16: F32 broadcast tiles */
static const int64_t k_n_outs[] = {3, 67, 300};
static const int64_t k_n_ins[] = {32, 96, 288, 768, 37};  /* 37: vector tails (not Q8_0) */
#define MAX_T 130
#define LDY_PAD 5
#define SENTINEL 12345.0f

/* A random weight and its values decoded here, as doubles. Q8_0 quants
 * span the full int8 range, -128 included, which ggml never writes but a
 * file may hold. */
typedef struct test_mat {
    ops_mat m;
    void *data;
    double *val;            /* (n_out, n_in) */
} test_mat;

static void test_mat_make(test_mat *t, uint32_t type, int64_t n_out, int64_t n_in) {
    const size_t ne = (size_t)n_out * (size_t)n_in;
    size_t bytes = type == GGUF_TT_F32 ? ne * 4 : type == GGUF_TT_Q8_0 ? ne / 32 * GGUF_Q8_0_BYTES : ne * 2;
    t->data = malloc(bytes);
    t->val = malloc(ne * sizeof(double));
    assert_non_null(t->data);
    assert_non_null(t->val);
    t->m = (ops_mat){.data = t->data, .type = type, .n_out = n_out, .n_in = n_in};
    for (size_t i = 0; i < ne; i++) {
        const float f = tu_rng_float();
        switch (type) {
        case GGUF_TT_F32:
            ((float *)t->data)[i] = f;
            t->val[i] = f;
            break;
        case GGUF_TT_F16: {
            const uint16_t h = ops_f32_to_f16(f);
            ((uint16_t *)t->data)[i] = h;
            t->val[i] = half_value(h);
            break;
        }
        case GGUF_TT_BF16: {
            const uint16_t h = (uint16_t)(bits_of(f) >> 16);
            ((uint16_t *)t->data)[i] = h;
            t->val[i] = (double)float_of((uint32_t)h << 16);
            break;
        }
        case GGUF_TT_Q8_0: {
            uint8_t *blk = (uint8_t *)t->data + i / 32 * GGUF_Q8_0_BYTES;
            uint16_t d;
            if (i % 32 == 0) {
                d = (uint16_t)(0x1c00 + tu_rng_next() % 0x0c00);  /* about 0.004 .. 0.06 */
                memcpy(blk, &d, 2);
            }
            memcpy(&d, blk, 2);
            const int8_t q = (int8_t)(tu_rng_next() & 0xff);
            blk[2 + i % 32] = (uint8_t)q;
            t->val[i] = half_value(d) * q;
            break;
        }
        }
    }
}

static void test_mat_free(test_mat *t) {
    free(t->data);
    free(t->val);
}

/* The activations the kernel actually multiplies: as given, or for Q8_0
 * quantized as ggml does and decoded again. The Q8_0 reference is thus the
 * exact product of the quantized activations with the weights: the
 * quantization error (~1%) is a property of the format, and a tolerance
 * loose enough to swallow it would also swallow a wrong block index or
 * scale. What is left is float rounding, like the other types. */
static void acts_as_seen(double *xs, const float *x, int T, int64_t n_in, uint32_t type) {
    const size_t ne = (size_t)T * (size_t)n_in;
    if (type != GGUF_TT_Q8_0) {
        for (size_t i = 0; i < ne; i++)
            xs[i] = x[i];
        return;
    }
    uint8_t *q = malloc(ne / 32 * GGUF_Q8_0_BYTES);
    assert_non_null(q);
    ops_quantize_q8_0(q, x, (int64_t)ne);
    for (size_t i = 0; i < ne; i++) {
        uint16_t d;
        const uint8_t *blk = q + i / 32 * GGUF_Q8_0_BYTES;
        memcpy(&d, blk, 2);
        xs[i] = half_value(d) * (int8_t)blk[2 + i % 32];
    }
    free(q);
}

typedef void (*matmul_fn)(float *, int64_t, const float *, int, const ops_mat *, ops_scratch *);

/* Run fn at T rows and compare with ref/mag (T, n_out), also checking that
 * the padding columns of y were not touched. Returns the worst error in
 * units of the tolerance. */
static double check_matmul(matmul_fn fn, const char *name, const test_mat *w, const float *x, int T,
                           const double *ref, const double *mag, ops_scratch *s, float *y) {
    const int64_t n_out = w->m.n_out, ldy = n_out + LDY_PAD;
    for (size_t i = 0; i < (size_t)T * (size_t)ldy; i++)
        y[i] = SENTINEL;
    fn(y, ldy, x, T, &w->m, s);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        for (int64_t o = 0; o < n_out; o++) {
            const size_t at = (size_t)t * (size_t)n_out + (size_t)o;
            /* float sums of n_in terms: a few ulps of the sum of |terms| */
            const double tol = 2e-6 * mag[at] + 1e-30;
            const double err = fabs((double)y[(size_t)t * (size_t)ldy + (size_t)o] - ref[at]) / tol;
            if (!(err <= 1.0))
                fail_msg("%s type %u T %d n_out %ld n_in %ld: y[%d][%ld] = %.9g, want %.9g (mag %.3g)", name,
                         w->m.type, T, (long)n_out, (long)w->m.n_in, t, (long)o,
                         (double)y[(size_t)t * (size_t)ldy + (size_t)o], ref[at], mag[at]);
            worst = err > worst ? err : worst;
        }
        for (int64_t o = n_out; o < ldy; o++)
            if (y[(size_t)t * (size_t)ldy + (size_t)o] != SENTINEL)
                fail_msg("%s type %u T %d: padding column %ld of row %d written", name, w->m.type, T, (long)o, t);
    }
    return worst;
}

/* Every type, T and shape, through ops_matmul and ops_matmul_ref. */
static void matmul_grid(int threads) {
    ops_set_threads(threads);
    ops_scratch *s = ops_scratch_new(MAX_T, 768, threads);
    assert_non_null(s);
    float *x = malloc((size_t)MAX_T * 768 * sizeof(float));
    double *xs = malloc((size_t)MAX_T * 768 * sizeof(double));
    double *ref = malloc((size_t)MAX_T * 300 * sizeof(double));
    double *mag = malloc((size_t)MAX_T * 300 * sizeof(double));
    float *y = malloc((size_t)MAX_T * (300 + LDY_PAD) * sizeof(float));
    assert_true(x && xs && ref && mag && y);
    double worst = 0;

    tu_rng_seed(3);
    for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++)
        for (size_t ii = 0; ii < sizeof k_n_ins / sizeof *k_n_ins; ii++)
            for (size_t oi = 0; oi < sizeof k_n_outs / sizeof *k_n_outs; oi++) {
                const uint32_t type = k_types[ti];
                const int64_t n_in = k_n_ins[ii], n_out = k_n_outs[oi];
                if (type == GGUF_TT_Q8_0 && n_in % 32)
                    continue;
                test_mat w;
                test_mat_make(&w, type, n_out, n_in);
                for (size_t i = 0; i < (size_t)MAX_T * (size_t)n_in; i++)
                    x[i] = tu_rng_float() * 2.0f;
                acts_as_seen(xs, x, MAX_T, n_in, type);
                /* The reference for all MAX_T rows; each T uses a prefix. */
                for (int t = 0; t < MAX_T; t++)
                    for (int64_t o = 0; o < n_out; o++) {
                        double sum = 0, abs_sum = 0;
                        for (int64_t i = 0; i < n_in; i++) {
                            const double p = w.val[o * n_in + i] * xs[(size_t)t * (size_t)n_in + (size_t)i];
                            sum += p;
                            abs_sum += fabs(p);
                        }
                        ref[(size_t)t * (size_t)n_out + (size_t)o] = sum;
                        mag[(size_t)t * (size_t)n_out + (size_t)o] = abs_sum;
                    }
                for (size_t k = 0; k < sizeof k_Ts / sizeof *k_Ts; k++) {
                    double e1 = check_matmul(ops_matmul, "ops_matmul", &w, x, k_Ts[k], ref, mag, s, y);
                    double e2 = check_matmul(ops_matmul_ref, "ops_matmul_ref", &w, x, k_Ts[k], ref, mag, s, y);
                    worst = fmax(worst, fmax(e1, e2));
                }
                test_mat_free(&w);
            }
    printf("  matmul grid, %d thread(s): worst error %.3f of tolerance\n", threads, worst);
    free(x);
    free(xs);
    free(ref);
    free(mag);
    free(y);
    ops_scratch_free(s);
    ops_set_threads(0);
}

static void test_matmul_grid(void **state) {
    (void)state;
    matmul_grid(2);
}

static void test_matmul_grid_one_thread(void **state) {
    (void)state;
    matmul_grid(1);
}

/* Scratch sized for fewer threads than OpenMP runs: the prefill path must
 * use no more tile buffers than exist. */
static void test_matmul_scratch_threads(void **state) {
    (void)state;
    ops_set_threads(2);
    ops_scratch *s = ops_scratch_new(64, 256, 1);
    assert_non_null(s);
    tu_rng_seed(4);
    test_mat w;
    test_mat_make(&w, GGUF_TT_F16, 300, 256);
    float *x = malloc(64 * 256 * sizeof(float));
    double *ref = malloc(64 * 300 * sizeof(double)), *mag = malloc(64 * 300 * sizeof(double));
    float *y = malloc(64 * (300 + LDY_PAD) * sizeof(float));
    assert_true(x && ref && mag && y);
    for (int i = 0; i < 64 * 256; i++)
        x[i] = tu_rng_float();
    for (int t = 0; t < 64; t++)
        for (int o = 0; o < 300; o++) {
            double sum = 0, a = 0;
            for (int i = 0; i < 256; i++) {
                sum += w.val[o * 256 + i] * x[t * 256 + i];
                a += fabs(w.val[o * 256 + i] * x[t * 256 + i]);
            }
            ref[t * 300 + o] = sum;
            mag[t * 300 + o] = a;
        }
    check_matmul(ops_matmul, "ops_matmul", &w, x, 64, ref, mag, s, y);
    test_mat_free(&w);
    free(x);
    free(ref);
    free(mag);
    free(y);
    ops_scratch_free(s);
    ops_set_threads(0);
}

/* y (T, ldy) against the double products of w with the activations as its
 * kernel sees them (xs, acts_as_seen for w's type): a few ulps of the sum
 * of |terms|, as check_matmul allows. */
static void check_product(const char *what, const float *y, int64_t ldy, const test_mat *w, const double *xs,
                          int T) {
    const int64_t ni = w->m.n_in;
    for (int t = 0; t < T; t++)
        for (int64_t o = 0; o < w->m.n_out; o++) {
            double sum = 0, mag = 0;
            for (int64_t j = 0; j < ni; j++) {
                const double p = w->val[o * ni + j] * xs[t * ni + j];
                sum += p;
                mag += fabs(p);
            }
            const double got = y[(size_t)t * (size_t)ldy + (size_t)o];
            if (!(fabs(got - sum) <= 2e-6 * mag + 1e-30))
                fail_msg("%s type %u T %d [%d][%ld]: %.9g, want %.9g", what, w->m.type, T, t, (long)o, got, sum);
        }
}

/* h (T, n_out) = silu(x Wg^T) * (x Wu^T) against doubles, the activations
 * as each kernel sees them (xg for wg's type, xu for wu's). */
/* GELU-tanh in double: 0.5 z (1 + tanh(u)), u = sqrt(2/pi) (z + 0.044715 z^3),
 * written as z / (1 + e^(-2u)) (the same function) because 1 + tanh(u)
 * cancels to 0 in double below z = -9, where the value is still ~1e-28. */
static double gelu_tanh_ref(double z) {
    const double u = sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z);
    if (fabs(z) < 5) /* the textbook form where it has no cancellation */
        return 0.5 * z * (1.0 + tanh(u));
    return z / (1.0 + exp(-2.0 * u));
}

/* h = act(x Wg^T) * (x Wu^T) against double products; act silu, or
 * gelu_tanh when gelu is set. */
static void check_gated(const char *what, const float *h, const test_mat *wg, const double *xg, const test_mat *wu,
                        const double *xu, int T, int gelu) {
    const int64_t ni = wg->m.n_in, no = wg->m.n_out;
    for (int t = 0; t < T; t++)
        for (int64_t o = 0; o < no; o++) {
            double g = 0, up = 0, mg = 0, mu = 0;
            for (int64_t j = 0; j < ni; j++) {
                g += wg->val[o * ni + j] * xg[t * ni + j];
                up += wu->val[o * ni + j] * xu[t * ni + j];
                mg += fabs(wg->val[o * ni + j] * xg[t * ni + j]);
                mu += fabs(wu->val[o * ni + j] * xu[t * ni + j]);
            }
            const double want = (gelu ? gelu_tanh_ref(g) : g / (1.0 + exp(-g))) * up;
            /* the tolerances of both sums, carried through silu (slope <= 1.1)
             * or gelu_tanh (slope <= 1.13) */
            const double tol = 1.13 * 2e-6 * mg * fabs(up) + 2e-6 * mu * (fabs(g) + 1) + 1e-6 * fabs(want) + 1e-30;
            const double got = h[t * no + o];
            if (!(fabs(got - want) <= tol))
                fail_msg("%s types %u/%u T %d [%d][%ld]: %.9g, want %.9g", what, wg->m.type, wu->m.type, T, t,
                         (long)o, got, want);
        }
}

static void check_swiglu(const char *what, const float *h, const test_mat *wg, const double *xg, const test_mat *wu,
                         const double *xu, int T) {
    check_gated(what, h, wg, xg, wu, xu, T, 0);
}

/* ops_matmul_n, ops_matmul_swiglu and ops_matmul called from inside a
 * parallel region by every thread, against double products, for every type
 * and for a small, a decode-batch and a large T (the decode paths, F32's
 * broadcast tiles, prefill). */
static void test_matmul_fused_and_team(void **state) {
    (void)state;
    enum { NI = 96, NO0 = 300, NO1 = 67, NO2 = 35, TM = 40 };
    ops_set_threads(2);
    ops_scratch *s = ops_scratch_new(TM, NI, 2);
    assert_non_null(s);
    tu_rng_seed(8);
    float *x = malloc(TM * NI * sizeof(float));
    double *xs = malloc(TM * NI * sizeof(double));
    float *y[3], *u = malloc(TM * NO0 * sizeof(float));
    for (int i = 0; i < 3; i++)
        y[i] = malloc(TM * NO0 * sizeof(float));
    assert_true(x && xs && u && y[0] && y[1] && y[2]);
    for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++) {
        const uint32_t type = k_types[ti];
        const int64_t n_outs[3] = {NO0, NO1, NO2};
        test_mat w[3];
        for (int i = 0; i < 3; i++)
            test_mat_make(&w[i], type, n_outs[i], NI);
        for (int i = 0; i < TM * NI; i++)
            x[i] = tu_rng_float() * 2.0f;
        acts_as_seen(xs, x, TM, NI, type);
        const int Ts[3] = {3, 16, TM};
        for (int k = 0; k < 3; k++) {
            const int T = Ts[k];
            const ops_mat *wp[3] = {&w[0].m, &w[1].m, &w[2].m};
            const int64_t ld[3] = {NO0, NO1, NO2};
            for (int mode = 0; mode < 3; mode++) {
                if (mode == 0) {            /* three products, one call */
                    ops_matmul_n(3, y, ld, x, T, wp, s);
                } else if (mode == 1) {     /* the same, by every thread of a team */
#pragma omp parallel num_threads(2)
                    ops_matmul_n(3, y, ld, x, T, wp, s);
                } else {                    /* one at a time inside a team */
#pragma omp parallel num_threads(2)
                    for (int i = 0; i < 3; i++)
                        ops_matmul(y[i], ld[i], x, T, wp[i], s);
                }
                char what[48];
                for (int i = 0; i < 3; i++) {
                    snprintf(what, sizeof what, "matmul_n mode %d product %d", mode, i);
                    check_product(what, y[i], ld[i], &w[i], xs, T);
                }
            }
            /* SwiGLU: h = silu(x Wg^T) * (x Wu^T), Wg = w[0], Wu = a second
             * matrix of the same shape, in and out of a team. */
            test_mat wu;
            test_mat_make(&wu, type, NO0, NI);
            for (int team = 0; team < 2; team++) {
                if (team) {
#pragma omp parallel num_threads(2)
                    ops_matmul_swiglu(y[0], u, NO0, x, T, &w[0].m, &wu.m, s);
                } else {
                    ops_matmul_swiglu(y[0], u, NO0, x, T, &w[0].m, &wu.m, s);
                }
                check_swiglu(team ? "swiglu in a team" : "swiglu", y[0], &w[0], xs, &wu, xs, T);
                /* GeGLU (gemma3): the same products, a GELU-tanh gate */
                if (team) {
#pragma omp parallel num_threads(2)
                    ops_matmul_geglu(y[0], u, NO0, x, T, &w[0].m, &wu.m, s);
                } else {
                    ops_matmul_geglu(y[0], u, NO0, x, T, &w[0].m, &wu.m, s);
                }
                check_gated(team ? "geglu in a team" : "geglu", y[0], &w[0], xs, &wu, xs, T, 1);
            }
            test_mat_free(&wu);
        }
        for (int i = 0; i < 3; i++)
            test_mat_free(&w[i]);
    }
    for (int i = 0; i < 3; i++)
        free(y[i]);
    free(u);
    free(x);
    free(xs);
    ops_scratch_free(s);
    ops_set_threads(0);
}

/* Weights of different types in one fused call, as quantized files have
 * them (Q4_K_M keeps attn_v apart from q and k; gate and up may differ
 * too): ops_matmul_n and ops_matmul_swiglu split the call by type. Inside
 * a team they give bit for bit what ops_matmul gives for each product
 * alone, which runs the same kernels over the same work items; outside
 * one (where the team size follows the work) they match the double
 * products. Before the split they aborted on an assert. */
/* The quantized types of quant.h through ops_matmul (their AVX2 kernels
 * where the CPU has them), ops_matmul_ref (the scalar ones) and
 * ops_dequant_row, on weights quantize writes from random floats. The
 * reference is the double product of the dequantized weights with the
 * activations as the kernel sees them (each row quantized in the type's
 * activation format and decoded again): integer block sums are exact, so
 * what is left is float rounding, held to 1e-5 of the sum of |terms| (the
 * K-quants' scales are products of three floats). And a token's row must
 * not depend on the batch: row t of a T = 16 call equals a T = 1 call on
 * that row alone, bit for bit. */
static void test_matmul_quant_types(void **state) {
    static const uint32_t types[] = {GGUF_TT_Q4_0, GGUF_TT_Q4_1, GGUF_TT_Q5_0,  GGUF_TT_Q5_1,
                                     GGUF_TT_IQ4_NL, GGUF_TT_Q2_K, GGUF_TT_Q3_K, GGUF_TT_Q4_K,
                                     GGUF_TT_Q5_K, GGUF_TT_Q6_K, GGUF_TT_IQ4_XS};
    enum { NI = 512, NO = 37, T = 16 };
    ops_set_threads(2);
    ops_scratch *s = ops_scratch_new(T, NI, 2);
    float *wf = malloc((size_t)NO * NI * sizeof(float)), *wd = malloc((size_t)NO * NI * sizeof(float));
    float *x = malloc((size_t)T * NI * sizeof(float)), *xd = malloc((size_t)T * NI * sizeof(float));
    float *y = malloc((size_t)T * NO * sizeof(float)), *yr = malloc((size_t)T * NO * sizeof(float));
    float *y1 = malloc((size_t)NO * sizeof(float)), *d = malloc(NI / 32 * sizeof(float));
    int8_t *q = malloc(NI);
    void *wq = malloc((size_t)gguf_row_bytes(GGUF_TT_Q8_0, (uint64_t)NO * NI));
    assert_true(s && wf && wd && x && xd && y && yr && y1 && d && q && wq);
    tu_rng_seed(17);
    for (size_t i = 0; i < (size_t)NO * NI; i++) wf[i] = tu_rng_float() * 0.1f;
    for (size_t i = 0; i < (size_t)T * NI; i++) x[i] = tu_rng_float() * 2.0f;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const int act = quant_act_format(type), db = quant_act_dblock(act);
        if (quant_quantize(wq, wf, type, (int64_t)NO * NI))
            fail_msg("no quantizer for %s", gguf_type_name(type));
        const ops_mat w = {.data = wq, .type = type, .n_out = NO, .n_in = NI};
        if (!ops_mat_supported(&w))
            fail_msg("%s: no kernel", gguf_type_name(type));
        for (int64_t o = 0; o < NO; o++) ops_dequant_row(wd + o * NI, &w, o);
        for (int t = 0; t < T; t++) {
            quant_act_row(act, q, d, NULL, x + (size_t)t * NI, NI);
            for (int i = 0; i < NI; i++) xd[(size_t)t * NI + i] = d[i / db] * (float)q[i];
        }
        ops_matmul(y, NO, x, T, &w, s);
        ops_matmul_ref(yr, NO, x, T, &w, s);
        for (int t = 0; t < T; t++) {
            ops_matmul(y1, NO, x + (size_t)t * NI, 1, &w, s);
            if (memcmp(y1, y + (size_t)t * NO, NO * sizeof(float)))
                fail_msg("%s: row %d of a batch of %d differs from the row alone", gguf_type_name(type), t, T);
            for (int64_t o = 0; o < NO; o++) {
                double sum = 0, mag = 0;
                for (int i = 0; i < NI; i++) {
                    const double p = (double)wd[o * NI + i] * (double)xd[(size_t)t * NI + i];
                    sum += p;
                    mag += fabs(p);
                }
                const double tol = 1e-5 * mag + 1e-30;
                const double got = y[(size_t)t * NO + o], ref = yr[(size_t)t * NO + o];
                if (!(fabs(got - sum) <= tol) || !(fabs(ref - sum) <= tol))
                    fail_msg("%s T %d [%d][%ld]: kernel %.9g, scalar %.9g, want %.9g (mag %.3g)",
                             gguf_type_name(type), T, t, (long)o, got, ref, sum, mag);
            }
        }
    }
    free(wf); free(wd); free(x); free(xd); free(y); free(yr); free(y1); free(d); free(q); free(wq);
    ops_scratch_free(s);
    ops_set_threads(0);
}

static void test_matmul_mixed_types(void **state) {
    (void)state;
    enum { NI = 96, NO = 67, TM = 40 };
    static const uint32_t mixes[][3] = {
        {GGUF_TT_Q8_0, GGUF_TT_Q8_0, GGUF_TT_F16},  /* q and k q8_0, v f16 */
        {GGUF_TT_F16, GGUF_TT_F32, GGUF_TT_F16},   /* one type split around another */
        {GGUF_TT_BF16, GGUF_TT_Q8_0, GGUF_TT_F32}, /* three types */
    };
    static const int Ts[] = {1, 3, 16, TM};
    ops_set_threads(2);
    ops_scratch *s = ops_scratch_new(TM, NI, 2);
    tu_rng_seed(21);
    float *x = malloc(TM * NI * sizeof(float)), *y[3], *ref[3];
    double *xs_q8 = malloc(TM * NI * sizeof(double)), *xs = malloc(TM * NI * sizeof(double));
    for (int i = 0; i < 3; i++) {
        y[i] = malloc(TM * NO * sizeof(float));
        ref[i] = malloc(TM * NO * sizeof(float));
        assert_true(y[i] && ref[i]);
    }
    assert_true(s && x && xs_q8 && xs);
    for (int i = 0; i < TM * NI; i++)
        x[i] = tu_rng_float() * 2.0f;
    for (size_t mi = 0; mi < sizeof mixes / sizeof *mixes; mi++) {
        test_mat w[3];
        for (int i = 0; i < 3; i++)
            test_mat_make(&w[i], mixes[mi][i], NO, NI);
        const ops_mat *wp[3] = {&w[0].m, &w[1].m, &w[2].m};
        const int64_t ld[3] = {NO, NO, NO};
        for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
            const int T = Ts[k];
            const size_t bytes = (size_t)T * NO * sizeof(float);
            acts_as_seen(xs_q8, x, T, NI, GGUF_TT_Q8_0);
            acts_as_seen(xs, x, T, NI, GGUF_TT_F32);
#pragma omp parallel num_threads(2)
            for (int i = 0; i < 3; i++)
                ops_matmul(ref[i], NO, x, T, wp[i], s);
#pragma omp parallel num_threads(2)
            ops_matmul_n(3, y, ld, x, T, wp, s);
            for (int i = 0; i < 3; i++)
                if (memcmp(y[i], ref[i], bytes))
                    fail_msg("mix %zu T %d: product %d in a team differs from ops_matmul alone", mi, T, i);
            ops_matmul_n(3, y, ld, x, T, wp, s);
            for (int i = 0; i < 3; i++)
                check_product("mixed matmul_n", y[i], NO, &w[i], w[i].m.type == GGUF_TT_Q8_0 ? xs_q8 : xs, T);
            /* gate w[1], up w[2]: of different types in every mix */
#pragma omp parallel num_threads(2)
            ops_matmul_swiglu(y[0], y[1], NO, x, T, wp[1], wp[2], s);
            for (int t = 0; t < T; t++)
                ops_silu_mul(ref[1] + (size_t)t * NO, ref[2] + (size_t)t * NO, NO);
            if (memcmp(y[0], ref[1], bytes) || memcmp(y[1], ref[2], bytes))
                fail_msg("mix %zu T %d: swiglu in a team differs from its two products alone", mi, T);
            ops_matmul_swiglu(y[0], y[1], NO, x, T, wp[1], wp[2], s);
            check_swiglu("mixed swiglu", y[0], &w[1], w[1].m.type == GGUF_TT_Q8_0 ? xs_q8 : xs, &w[2],
                         w[2].m.type == GGUF_TT_Q8_0 ? xs_q8 : xs, T);
            ops_matmul_geglu(y[0], y[1], NO, x, T, wp[1], wp[2], s);
            check_gated("mixed geglu", y[0], &w[1], w[1].m.type == GGUF_TT_Q8_0 ? xs_q8 : xs, &w[2],
                        w[2].m.type == GGUF_TT_Q8_0 ? xs_q8 : xs, T, 1);
        }
        for (int i = 0; i < 3; i++)
            test_mat_free(&w[i]);
    }
    for (int i = 0; i < 3; i++) {
        free(y[i]);
        free(ref[i]);
    }
    free(x);
    free(xs);
    free(xs_q8);
    ops_scratch_free(s);
    ops_set_threads(0);
}

static void test_dequant_row(void **state) {
    (void)state;
    tu_rng_seed(5);
    for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++) {
        test_mat w;
        test_mat_make(&w, k_types[ti], 5, 96);
        float out[96];
        for (int64_t r = 0; r < 5; r++) {
            ops_dequant_row(out, &w.m, r);
            for (int i = 0; i < 96; i++)
                if ((double)out[i] != w.val[r * 96 + i])
                    fail_msg("type %u row %ld [%d]: %g, want %g", k_types[ti], (long)r, i, (double)out[i],
                             w.val[r * 96 + i]);
        }
        test_mat_free(&w);
    }
}

/* ------------------------------------------------------------------------- */
/* Elementwise kernels                                                       */
/* ------------------------------------------------------------------------- */

static void test_rmsnorm(void **state) {
    (void)state;
    /* mean(x^2) = 30/4, rms = 2.7386128 */
    float x[4] = {1, 2, 3, 4};
    const float w[4] = {1, 1, 2, 0.5f};
    const float want[4] = {0.36514837f, 0.73029674f, 2.1908902f, 0.73029674f};
    float out[4];
    ops_rmsnorm(out, x, w, 4, 0.0f);
    for (int i = 0; i < 4; i++)
        assert_float_equal(out[i], want[i], 1e-6);
    ops_rmsnorm(x, x, w, 4, 0.0f);  /* in place */
    for (int i = 0; i < 4; i++)
        assert_float_equal(x[i], want[i], 1e-6);
    /* eps keeps a zero vector finite; with eps = 1 and x = 1, scale 1/sqrt(2). */
    float z[3] = {0, 0, 0}, ones[3] = {1, 1, 1};
    ops_rmsnorm(z, z, ones, 3, 1e-5f);
    for (int i = 0; i < 3; i++)
        assert_true(z[i] == 0.0f);
    ops_rmsnorm(out, ones, ones, 3, 1.0f);
    assert_float_equal(out[0], 0.70710678f, 1e-6);
    /* A long vector exercises the vector body and the tail. */
    float v[37], vo[37], vw[37];
    double ss = 0;
    for (int i = 0; i < 37; i++) {
        v[i] = (float)(i - 18) * 0.25f;
        vw[i] = 1.0f + (float)i / 37;
        ss += (double)v[i] * v[i];
    }
    ops_rmsnorm(vo, v, vw, 37, 1e-6f);
    for (int i = 0; i < 37; i++)
        assert_float_equal(vo[i], v[i] / sqrt(ss / 37 + 1e-6) * vw[i], 1e-5);
}

static void test_softmax(void **state) {
    (void)state;
    float a[3] = {1, 2, 3};
    ops_softmax(a, 3);
    assert_float_equal(a[0], 0.09003057f, 1e-6);
    assert_float_equal(a[1], 0.24472847f, 1e-6);
    assert_float_equal(a[2], 0.66524096f, 1e-6);
    float b[2] = {1000, 1000};  /* overflows without the max subtracted */
    ops_softmax(b, 2);
    assert_float_equal(b[0], 0.5f, 1e-7);
    assert_float_equal(b[1], 0.5f, 1e-7);
    float c[3] = {-INFINITY, 0, -INFINITY};  /* masked entries */
    ops_softmax(c, 3);
    assert_true(c[0] == 0.0f && c[1] == 1.0f && c[2] == 0.0f);
    float d[1] = {-5};
    ops_softmax(d, 1);
    assert_true(d[0] == 1.0f);
}

static void test_silu_mul(void **state) {
    (void)state;
    float g[3] = {0, 1, -1};
    const float up[3] = {2, 3, 4};
    ops_silu_mul(g, up, 3);
    assert_float_equal(g[0], 0.0f, 1e-7);
    assert_float_equal(g[1], 2.1931758f, 1e-6);  /* 0.7310586 * 3 */
    assert_float_equal(g[2], -1.0757656f, 1e-6); /* -0.2689414 * 4 */
}

/* Softmax over long rows (vector body, tail, masked entries) against a
 * double-precision softmax: the vector exp is good to a few ulp. */
static void test_softmax_long(void **state) {
    (void)state;
    tu_rng_seed(9);
    for (int n = 1; n <= 300; n += (n < 20 ? 1 : 37)) {
        float v[300];
        double want[300], max = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) {
            v[i] = tu_rng_float() * 40.0f;
            if (i % 7 == 3)
                v[i] = -INFINITY;
            max = fmax(max, v[i]);
        }
        if (max == -INFINITY)
            v[0] = 0, max = 0;
        /* exp of the difference as float computes it: what is checked is
         * the exponential, not the rounding of its argument */
        for (int i = 0; i < n; i++)
            sum += want[i] = exp((double)(v[i] - (float)max));
        ops_softmax(v, n);
        for (int i = 0; i < n; i++)
            if (!(fabs(v[i] - want[i] / sum) <= 1e-6 * want[i] / sum + 1e-45))
                fail_msg("softmax n %d [%d]: %.9g, want %.9g", n, i, (double)v[i], want[i] / sum);
    }
}

/* silu(g) * up across the float range that matters, including where e^-g
 * overflows or vanishes (there silu is below 1e-30 and counts as 0). */
static void test_silu_long(void **state) {
    (void)state;
    float g[403], up[403];
    double want[403];
    for (int i = 0; i < 403; i++) {
        g[i] = -100.0f + 0.5f * (float)i;
        up[i] = 1.0f + (float)(i % 5);
        want[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * up[i];
    }
    ops_silu_mul(g, up, 403);
    for (int i = 0; i < 403; i++)
        if (!(fabs(g[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-30))
            fail_msg("silu [%d]: %.9g, want %.9g", i, (double)g[i], want[i]);
}

/* gelu_tanh(g) * up against the double formula 0.5 g (1 + tanh(...)),
 * across the range (vector body and tail), including the tails where
 * e^(-2u) overflows (gelu is -0 there) or vanishes (gelu is g). */
static void test_gelu_tanh(void **state) {
    (void)state;
    float g[403], up[403];
    double want[403];
    for (int i = 0; i < 403; i++) {
        g[i] = -100.0f + 0.5f * (float)i;
        up[i] = 1.0f + (float)(i % 5);
        want[i] = gelu_tanh_ref(g[i]) * up[i];
    }
    double arg[403];
    for (int i = 0; i < 403; i++)
        arg[i] = 2.0 * sqrt(2.0 / M_PI) * fabs(g[i] + 0.044715 * g[i] * g[i] * g[i]);
    ops_gelu_tanh_mul(g, up, 403);
    /* the exponent is computed in float: its rounding (~1.2e-7 of it,
     * relative) moves e^x by that much times |x| */
    for (int i = 0; i < 403; i++)
        if (!(fabs(g[i] - want[i]) <= (2e-6 + 2.4e-7 * fmin(arg[i], 100)) * fabs(want[i]) + 1e-30))
            fail_msg("gelu_tanh [%d]: %.9g, want %.9g", i, (double)g[i], want[i]);
    /* known values: gelu_tanh(1) = 0.8411920, (-1) = -0.1588080, (0) = 0 */
    float k[3] = {1, -1, 0};
    const float ones[3] = {1, 1, 1};
    ops_gelu_tanh_mul(k, ones, 3);
    assert_float_equal(k[0], 0.8411920f, 1e-6);
    assert_float_equal(k[1], -0.1588080f, 1e-6);
    assert_float_equal(k[2], 0.0f, 0);
    /* small arguments, where the curve is z/2 + z^2 / sqrt(2 pi) */
    for (int i = 0; i < 64; i++) {
        float z = (float)(i - 32) * 1e-3f, one = 1.0f;
        ops_gelu_tanh_mul(&z, &one, 1);
        double w = gelu_tanh_ref((double)(i - 32) * 1e-3);
        if (!(fabs(z - w) <= 1e-6 * fabs(w) + 1e-12))
            fail_msg("gelu_tanh small [%d]: %.9g, want %.9g", i, (double)z, w);
    }
}

/* Per-head RMSNorm: each head normalized alone (a head of large values
 * next to one of small ones keeps its own scale), all with one weight. */
static void test_rmsnorm_heads(void **state) {
    (void)state;
    enum { NH = 5, HD = 12 };
    float x[NH * HD], w[HD];
    tu_rng_seed(31);
    for (int i = 0; i < NH * HD; i++)
        x[i] = tu_rng_float() * (float)(1 + 100 * (i / HD % 2));
    for (int i = 0; i < HD; i++)
        w[i] = 1.0f + 0.3f * tu_rng_float();
    double want[NH * HD];
    for (int h = 0; h < NH; h++) {
        double ss = 0;
        for (int i = 0; i < HD; i++)
            ss += (double)x[h * HD + i] * x[h * HD + i];
        for (int i = 0; i < HD; i++)
            want[h * HD + i] = x[h * HD + i] / sqrt(ss / HD + 1e-6) * w[i];
    }
    ops_rmsnorm_heads(x, w, NH, HD, 1e-6f);
    for (int i = 0; i < NH * HD; i++)
        if (!(fabs(x[i] - want[i]) <= 1e-5 * fabs(want[i]) + 1e-6))
            fail_msg("rmsnorm_heads [%d]: %.9g, want %.9g", i, (double)x[i], want[i]);
}

static void test_softcap(void **state) {
    (void)state;
    float x[5] = {0, 1, -1, 300, -1e30f};
    ops_softcap(x, 5, 30.0f);
    assert_float_equal(x[0], 0.0f, 0);
    assert_float_equal(x[1], (float)(30 * tanh(1.0 / 30)), 1e-6);
    assert_float_equal(x[2], (float)(-30 * tanh(1.0 / 30)), 1e-6);
    assert_float_equal(x[3], (float)(30 * tanh(10.0)), 1e-5);
    assert_float_equal(x[4], -30.0f, 0);
}

/* Attention scores and mixing over strided rows (a cache block's layout),
 * head sizes with and without a multiple of 8, n across the 8-key groups,
 * over an f32 cache (half 0) or an f16 one (half 1: the rows rounded by
 * ops_f32_to_f16_row, the reference summing the widened halves), against
 * double sums. */
static void check_attn(int half) {
    static const int hds[] = {8, 12, 48, 64, 80, 128};
    enum { LD = 136, NMAX = 21 };
    static float k[NMAX * LD];
    static uint16_t kh[NMAX * LD];
    float q[128], sc[NMAX], out[128], p[NMAX];
    for (size_t h = 0; h < sizeof hds / sizeof *hds; h++) {
        const int hd = hds[h];
        for (int n = 1; n <= NMAX; n++) {
            for (int i = 0; i < NMAX * LD; i++)
                k[i] = tu_rng_float();
            ops_f32_to_f16_row(kh, k, NMAX * LD);
            if (half)
                for (int i = 0; i < NMAX * LD; i++) k[i] = ops_f16_to_f32_ref(kh[i]);
            for (int i = 0; i < hd; i++) {
                q[i] = tu_rng_float();
                out[i] = tu_rng_float();
            }
            for (int j = 0; j < n; j++)
                p[j] = tu_rng_float();
            /* every other n with a prefetch target (its own rows), which
             * must not change a sum */
            const void *pf = n % 2 ? (const void *)k : NULL;
            const size_t pfb = n % 2 ? sizeof(float) * NMAX * LD : 0;
            if (half) ops_attn_scores_f16(sc, q, kh + 3, LD, n, hd, 0.125f, pf, pfb);
            else ops_attn_scores(sc, q, k + 3, LD, n, hd, 0.125f, pf, pfb);
            for (int j = 0; j < n; j++) {
                double d = 0, m = 0;
                for (int i = 0; i < hd; i++) {
                    d += (double)q[i] * k[j * LD + 3 + i];
                    m += fabs((double)q[i] * k[j * LD + 3 + i]);
                }
                if (!(fabs(sc[j] - 0.125 * d) <= 0.125 * 2e-6 * m))
                    fail_msg("attn_scores%s hd %d n %d [%d]: %.9g, want %.9g", half ? "_f16" : "", hd, n, j,
                             (double)sc[j], 0.125 * d);
            }
            double want[128], mag[128];
            for (int i = 0; i < hd; i++) {
                want[i] = out[i];
                mag[i] = fabs(out[i]);
                for (int j = 0; j < n; j++) {
                    want[i] += (double)p[j] * k[j * LD + 5 + i];
                    mag[i] += fabs((double)p[j] * k[j * LD + 5 + i]);
                }
            }
            if (half) ops_attn_mix_f16(out, p, kh + 5, LD, n, hd, pf, pfb);
            else ops_attn_mix(out, p, k + 5, LD, n, hd, pf, pfb);
            for (int i = 0; i < hd; i++)
                if (!(fabs(out[i] - want[i]) <= 2e-6 * mag[i]))
                    fail_msg("attn_mix%s hd %d n %d [%d]: %.9g, want %.9g", half ? "_f16" : "", hd, n, i,
                             (double)out[i], want[i]);
        }
    }
}

static void test_attn(void **state) {
    (void)state;
    tu_rng_seed(10);
    check_attn(0);
}

/* The f16 cache: the row conversion held bit for bit to the reference
 * (every tail length of its 8-wide loop, special values included), then
 * the kernels. */
static void test_attn_f16(void **state) {
    (void)state;
    tu_rng_seed(12);
    float x[37];
    for (int i = 0; i < 37; i++)
        x[i] = tu_rng_float() * (i % 7 == 0 ? 1e4f : 1.0f);
    x[1] = 65520.0f, x[2] = -1e-8f, x[4] = 6e-5f, x[5] = 1e9f;
    for (int n = 0; n <= 37; n++) {
        uint16_t h[37];
        ops_f32_to_f16_row(h, x, n);
        for (int i = 0; i < n; i++)
            if (h[i] != ops_f32_to_f16_ref(x[i]))
                fail_msg("f32_to_f16_row n %d [%d]: %#x, want %#x", n, i, h[i], ops_f32_to_f16_ref(x[i]));
    }
    check_attn(1);
}

static void test_add_dot_axpy(void **state) {
    (void)state;
    tu_rng_seed(6);
    for (int n = 0; n <= 75; n++) {
        float a[75], b[75], y[75], want[75];
        double dot = 0;
        for (int i = 0; i < n; i++) {
            a[i] = tu_rng_float();
            b[i] = tu_rng_float();
            y[i] = tu_rng_float();
            dot += (double)a[i] * b[i];
        }
        assert_float_equal(ops_dot(a, b, n), dot, 1e-5);
        for (int i = 0; i < n; i++)
            want[i] = y[i] + a[i];
        ops_add(y, a, n);
        for (int i = 0; i < n; i++)
            assert_true(y[i] == want[i]);
        for (int i = 0; i < n; i++)
            want[i] = y[i] + 0.75f * b[i];
        ops_axpy(y, 0.75f, b, n);
        for (int i = 0; i < n; i++)
            assert_float_equal(y[i], want[i], 1e-6);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_midpoints),
        cmocka_unit_test(test_f16_random),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_quantize_q8_0_known),
        cmocka_unit_test(test_quantize_q8_0_random),
        cmocka_unit_test(test_dequant_row),
        cmocka_unit_test(test_matmul_grid),
        cmocka_unit_test(test_matmul_grid_one_thread),
        cmocka_unit_test(test_matmul_scratch_threads),
        cmocka_unit_test(test_matmul_fused_and_team),
        cmocka_unit_test(test_matmul_mixed_types),
        cmocka_unit_test(test_matmul_quant_types),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_silu_mul),
        cmocka_unit_test(test_softmax_long),
        cmocka_unit_test(test_silu_long),
        cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_rmsnorm_heads),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_attn),
        cmocka_unit_test(test_attn_f16),
        cmocka_unit_test(test_add_dot_axpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
