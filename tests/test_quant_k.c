/*
 * test_quant_k.c - the 256-element formats of quant_k.c (Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_XS) against references written here.
 *
 * Dequantizing is checked bit-exactly against decoders in this file that
 * follow ggml's dequantize_row_* loop by loop (on random blocks, every
 * byte pattern valid), and against hand-worked values of hand-built blocks
 * (the 6-bit scale packing of Q4_K / Q5_K sub-blocks 4..7, Q3_K's scales
 * and hmask, Q6_K's ql / qh order, Q2_K's order). Quantizing is held to an
 * error bound derived from the rule in quant_k.c. The scalar dot is held
 * against a float64 dot of the dequantized weights and activations, the
 * AVX2 dot against the scalar one, and both must give every activation row
 * the same bits alone or in a group of up to 4 (batch invariance). Data is
 * seeded, so a failure reproduces.
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

/* The reference decoders below compute ggml's float32 products and
 * differences one rounding each, as the library must; GNU C would contract
 * them into FMAs otherwise. */
#pragma GCC optimize("fp-contract=off")

/* ------------------------------------------------------------------------- */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------- */


/* Log-uniform magnitude in [lo, hi], random sign. */
static float rng_mag(float lo, float hi) {
    const double u = (tu_rng_float() + 1.0) / 2.0;
    const double m = exp(log(lo) + u * (log(hi) - log(lo)));
    return (float)((tu_rng_next() & 1) ? -m : m);
}

typedef struct ktype {
    uint32_t type;
    const char *name;
    int bytes;          /* per super-block */
    int d_off;          /* byte offset of the f16 d */
    int dmin_off;       /* of the f16 dmin, -1 without */
    int mmax;           /* largest integer min (0 without mins) */
} ktype;

static const ktype KT[] = {
    {GGUF_TT_Q2_K, "Q2_K", 84, 80, 82, 15},  {GGUF_TT_Q3_K, "Q3_K", 110, 108, -1, 0},
    {GGUF_TT_Q4_K, "Q4_K", 144, 0, 2, 63},   {GGUF_TT_Q5_K, "Q5_K", 176, 0, 2, 63},
    {GGUF_TT_Q6_K, "Q6_K", 210, 208, -1, 0}, {GGUF_TT_IQ4_XS, "IQ4_XS", 136, 0, -1, 0},
};
#define N_KT ((int)(sizeof KT / sizeof KT[0]))

static float h2f(const uint8_t *p) { return ops_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static void f2h(uint8_t *p, float v) {
    const uint16_t h = ops_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* nb random blocks: random bytes (all valid), f16 scales of magnitude
 * 1e-3..1 with either sign. */
static void random_blocks(uint8_t *w, const ktype *kt, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + (size_t)b * (size_t)kt->bytes;
        for (int i = 0; i < kt->bytes; i++)
            blk[i] = (uint8_t)tu_rng_next();
        f2h(blk + kt->d_off, rng_mag(1e-3f, 1.0f));
        if (kt->dmin_off >= 0) f2h(blk + kt->dmin_off, rng_mag(1e-3f, 1.0f));
    }
}

static const int8_t KV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ------------------------------------------------------------------------- */
/* Reference decoders, following ggml's dequantize_row_* loops               */
/* ------------------------------------------------------------------------- */

static void ref_q2k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *q = b + 16;
    const float d = h2f(b + 80), mn = h2f(b + 82);
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2)
            for (int half = 0; half < 2; half++) {
                const uint8_t s = sc[is++];
                const float dl = d * (float)(s & 0xF), ml = mn * (float)(s >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)(int8_t)((q[l + 16 * half] >> shift) & 3) - ml;
            }
        q += 32;
    }
}

/* The scales through ggml's kmask1 / kmask2 word shuffle. */
static void ref_q3k(const uint8_t *b, float *y) {
    uint32_t aux[4];
    memcpy(aux, b + 96, 12);
    const uint32_t tmp = aux[2], k1 = 0x03030303, k2 = 0x0f0f0f0f;
    aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
    aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
    aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
    int8_t scales[16];
    memcpy(scales, aux, 16);
    const float dall = h2f(b + 108);
    const uint8_t *q = b + 32, *hm = b;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++) {
                const float dl = dall * (float)(scales[is++] - 32);
                for (int l = 16 * half; l < 16 * half + 16; l++)
                    *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            }
            m = (uint8_t)(m << 1);
        }
        q += 32;
    }
}

static void get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Q4_K (qh == NULL) and Q5_K. */
static void ref_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *ql, float *y) {
    const float d = h2f(b), mn = h2f(b + 2);
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < 256; j += 64, is += 2) {
        uint8_t sc, m;
        get_scale_min_k4(is + 0, b + 4, &sc, &m);
        const float d1 = d * (float)sc, m1 = mn * (float)m;
        get_scale_min_k4(is + 1, b + 4, &sc, &m);
        const float d2 = d * (float)sc, m2 = mn * (float)m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0xF) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void ref_q6k(const uint8_t *b, float *y) {
    const float d = h2f(b + 208);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int8_t q1 = (int8_t)(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            const int8_t q2 = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            const int8_t q3 = (int8_t)(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            const int8_t q4 = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            y[l + 0] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void ref_iq4xs(const uint8_t *b, float *y) {
    const float d = h2f(b);
    const uint16_t sh = (uint16_t)(b[2] | (b[3] << 8));
    const uint8_t *qs = b + 8;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((sh >> 2 * ib) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[j + 0] = dl * (float)KV[qs[j] & 0xf];
            y[j + 16] = dl * (float)KV[qs[j] >> 4];
        }
        y += 32;
        qs += 16;
    }
}

static void ref_dequant(uint32_t type, const uint8_t *b, float *y) {
    switch (type) {
    case GGUF_TT_Q2_K: ref_q2k(b, y); break;
    case GGUF_TT_Q3_K: ref_q3k(b, y); break;
    case GGUF_TT_Q4_K: ref_k45(b, NULL, b + 16, y); break;
    case GGUF_TT_Q5_K: ref_k45(b, b + 16, b + 48, y); break;
    case GGUF_TT_Q6_K: ref_q6k(b, y); break;
    default: ref_iq4xs(b, y); break;
    }
}

/* ------------------------------------------------------------------------- */
/* The type table                                                            */
/* ------------------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    for (int t = 0; t < N_KT; t++) {
        assert_int_equal(quant_act_format(KT[t].type), QUANT_ACT_Q8_K);
        assert_int_equal(gguf_type_block(KT[t].type), QUANT_K);
        assert_int_equal(gguf_type_block_bytes(KT[t].type), KT[t].bytes);
        assert_non_null(quant_dot_scalar(KT[t].type));
        assert_non_null(quant_dot(KT[t].type));
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
            assert_non_null(quant_dot_avx2(KT[t].type));
#endif
    }
}

/* ------------------------------------------------------------------------- */
/* Dequantizing                                                              */
/* ------------------------------------------------------------------------- */

/* Random blocks (every byte pattern is a valid block) against the ggml-loop
 * decoders, bit for bit. */
static void test_dequant_random(void **state) {
    (void)state;
    tu_rng_seed(1);
    enum { NB = 64 };
    uint8_t *w = malloc((size_t)NB * 210);
    float *got = malloc(sizeof(float) * NB * QUANT_K), want[QUANT_K];
    for (int t = 0; t < N_KT; t++) {
        random_blocks(w, &KT[t], NB);
        quant_dequant(got, w, KT[t].type, NB);
        for (int b = 0; b < NB; b++) {
            ref_dequant(KT[t].type, w + (size_t)b * (size_t)KT[t].bytes, want);
            for (int i = 0; i < QUANT_K; i++)
                if (memcmp(&got[b * QUANT_K + i], &want[i], sizeof(float)) != 0)
                    fail_msg("%s block %d element %d: %.9g, want %.9g", KT[t].name, b, i,
                             (double)got[b * QUANT_K + i], (double)want[i]);
        }
    }
    free(w);
    free(got);
}

/* Q4_K with hand-packed scale bytes: the values of sub-blocks 4..7 come
 * from the top two bits of bytes 0..7 and the nibbles of bytes 8..11,
 * worked out by hand below. */
static void test_dequant_q4k_scales(void **state) {
    (void)state;
    uint8_t b[144] = {0};
    f2h(b, 1.0f);
    f2h(b + 2, 0.5f);
    const uint8_t sc12[12] = {0xC1, 0x47, 0x94, 0x3F, 0x00, 0x83, 0x7F, 0xC9, 0x21, 0x5A, 0xF0, 0x0E};
    memcpy(b + 4, sc12, 12);
    /* scales: 1, 7, 20, 63 (low 6 bits of bytes 0..3); 49 = 0x1 | 3 << 4,
     * 26 = 0xA | 1 << 4, 32 = 0x0 | 2 << 4, 14 = 0xE | 0 << 4.
     * mins: 0, 3, 63, 9 (bytes 4..7); 2 = 0x2 | 0 << 4, 37 = 0x5 | 2 << 4,
     * 31 = 0xF | 1 << 4, 48 = 0x0 | 3 << 4. */
    const int sc[8] = {1, 7, 20, 63, 49, 26, 32, 14}, mn[8] = {0, 3, 63, 9, 2, 37, 31, 48};
    memset(b + 16, 0x5A, 128);  /* low nibble 10 (even sub-blocks), high 5 (odd) */
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_Q4_K, 1);
    const float want[8] = {10.0f, 33.5f, 168.5f, 310.5f, 489.0f, 111.5f, 304.5f, 46.0f};
    for (int e = 0; e < QUANT_K; e++) {
        const int j = e / 32;
        assert_true(y[e] == (float)(sc[j] * (j % 2 ? 5 : 10)) - 0.5f * (float)mn[j]);
        assert_true(y[e] == want[j]);
    }
    /* Element order: 64 g + l low nibble of qs[32 g + l], 64 g + 32 + l high. */
    for (int i = 0; i < 128; i++)
        b[16 + i] = (uint8_t)(i * 37 + 11);
    quant_dequant(y, b, GGUF_TT_Q4_K, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const uint8_t byte = b[16 + 32 * (e / 64) + e % 32];
        const int q = (e % 64) < 32 ? byte & 0xF : byte >> 4;
        assert_true(y[e] == (float)(sc[e / 32] * q) - 0.5f * (float)mn[e / 32]);
    }
    /* Element 100: g = 1, l = 4, high nibble of qs[36] = 36 * 37 + 11 =
     * 1343 = 0x53F -> 0x3F, q = 3; sub-block 3: 63 * 3 - 4.5. */
    assert_true(y[100] == 184.5f);
}

/* Q5_K: the same scales, and the fifth bit e / 32 of qh[e % 32]. */
static void test_dequant_q5k(void **state) {
    (void)state;
    uint8_t b[176] = {0};
    f2h(b, 1.0f);
    f2h(b + 2, 0.5f);
    const uint8_t sc12[12] = {0xC1, 0x47, 0x94, 0x3F, 0x00, 0x83, 0x7F, 0xC9, 0x21, 0x5A, 0xF0, 0x0E};
    memcpy(b + 4, sc12, 12);
    const int sc[8] = {1, 7, 20, 63, 49, 26, 32, 14}, mn[8] = {0, 3, 63, 9, 2, 37, 31, 48};
    for (int i = 0; i < 32; i++)
        b[16 + i] = (uint8_t)(0xA5 ^ (i * 29));
    for (int i = 0; i < 128; i++)
        b[48 + i] = (uint8_t)(i * 37 + 11);
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_Q5_K, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const uint8_t byte = b[48 + 32 * (e / 64) + e % 32];
        const int q = ((e % 64) < 32 ? byte & 0xF : byte >> 4) + 16 * ((b[16 + e % 32] >> (e / 32)) & 1);
        assert_true(y[e] == (float)(sc[e / 32] * q) - 0.5f * (float)mn[e / 32]);
    }
    /* Element 0: qs[0] = 11 low nibble 11, qh[0] = 0xA5 bit 0 set: 27 * 1. */
    assert_true(y[0] == 27.0f);
    /* Element 255: g = 3, high nibble of qs[127] = 127 * 37 + 11 = 4710 =
     * 0x1266 -> 0x66: 6; qh[31] = 0xA5 ^ (31 * 29 = 899 -> 0x83) = 0x26,
     * bit 7 clear: q = 6; 14 * 6 - 24. */
    assert_true(y[255] == 60.0f);
}

/* Q3_K: scales unpacked by hand from these 12 bytes, hmask and 2-bit
 * order. */
static void test_dequant_q3k(void **state) {
    (void)state;
    uint8_t b[110] = {0};
    const uint8_t sc12[12] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xE4, 0x1B, 0x00, 0xFF};
    memcpy(b + 96, sc12, 12);
    /* Scale j: low 4 bits the low nibble of byte j (j < 8) or the high
     * nibble of byte j - 8, high 2 bits bits 2 (j / 4) of byte 8 + j % 4
     * (0xE4: 0, 1, 2, 3; 0x1B: 3, 2, 1, 0; 0x00; 0xFF: 3, 3, 3, 3), less 32. */
    const int sc[16] = {-32, 18, -28, 22, -8, 10, -20, 30, 1, -13, -27, 23, 25, -21, -19, 31};
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(i * 53 + 5);
    for (int i = 0; i < 64; i++)
        b[32 + i] = (uint8_t)(i * 37 + 11);
    f2h(b + 108, 2.0f);
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_Q3_K, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) - (((b[l] >> (4 * h + j)) & 1) ? 0 : 4);
        assert_true(y[e] == (float)(2 * sc[e / 16] * q));
    }
    /* Element 0: qs[0] = 11, bits 0..1 = 3; hmask[0] = 5, bit 0 set: q = 3. */
    assert_true(y[0] == -192.0f);
    /* Element 255: qs[63] = 2342 -> 38, bits 6..7 = 0; hmask[31] = 1648 ->
     * 112, bit 7 clear: q = -4; scale 31. */
    assert_true(y[255] == -248.0f);
}

/* Q6_K: ql / qh element order and signed scales. */
static void test_dequant_q6k(void **state) {
    (void)state;
    uint8_t b[210] = {0};
    const int8_t sc[16] = {-128, -7, 0, 1, 5, 127, -64, 33, 2, -1, 90, -90, 17, 64, -33, 100};
    for (int i = 0; i < 128; i++)
        b[i] = (uint8_t)(i * 13 + 1);
    for (int i = 0; i < 64; i++)
        b[128 + i] = (uint8_t)(i * 71 + 9);
    memcpy(b + 192, sc, 16);
    f2h(b + 208, 0.25f);
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_Q6_K, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t lb = b[64 * h + 32 * (k % 2) + l];
        const int q = ((k < 2 ? lb & 0xF : lb >> 4) | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
        assert_true(y[e] == 0.25f * (float)(sc[e / 16] * q));
    }
    /* Element 0: ql[0] = 1, qh[0] = 9 bits 0..1 = 1: q = 17 - 32; -128. */
    assert_true(y[0] == 480.0f);
    /* Element 100: k = 3, l = 4: high nibble of ql[36] = 469 -> 0xD5: 13;
     * qh[4] = 293 -> 37, bits 6..7 = 0: q = 13 - 32; scale -64. */
    assert_true(y[100] == 304.0f);
}

/* Q2_K: 4-bit scale / min pairs and the 2-bit order. */
static void test_dequant_q2k(void **state) {
    (void)state;
    uint8_t b[84] = {0};
    for (int j = 0; j < 16; j++)
        b[j] = (uint8_t)(j * 17 + 3);
    for (int i = 0; i < 64; i++)
        b[16 + i] = (uint8_t)(i * 29 + 7);
    f2h(b + 80, 0.5f);
    f2h(b + 82, 0.25f);
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_Q2_K, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32, s = b[e / 16];
        const int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
        assert_true(y[e] == 0.5f * (float)((s & 0xF) * q) - 0.25f * (float)(s >> 4));
    }
    assert_true(y[0] == 4.5f);    /* scale 3, min 0; qs[0] = 7: q = 3 */
    assert_true(y[17] == -0.25f); /* 0x14: scale 4, min 1; qs[17] = 244: q = 0 */
    /* Element 200: h = 1, j = 2, l = 8; 0xCF: scale 15, min 12; qs[40] =
     * 1167 -> 143, bits 4..5 = 0. */
    assert_true(y[200] == -3.0f);
    /* Element 77: h = 0, j = 2, l = 13; scales[4] = 71 = 0x47: 7, 4;
     * qs[13] = 384 -> 128, bits 4..5 = 0: -1. Element 109: j = 3, l =
     * 13, scales[6] = 105 = 0x69: 9, 6; bits 6..7 of 128 = 2: 9 - 1.5. */
    assert_true(y[77] == -1.0f);
    assert_true(y[109] == 7.5f);
}

/* IQ4_XS: 6-bit scales from scales_l nibbles and scales_h pairs. */
static void test_dequant_iq4xs(void **state) {
    (void)state;
    uint8_t b[136] = {0};
    f2h(b, 0.5f);
    b[2] = 0x1B;  /* scales_h 0xE41B: pairs 3, 2, 1, 0, 0, 1, 2, 3 */
    b[3] = 0xE4;
    const uint8_t sl[4] = {0x10, 0x32, 0x54, 0x76};  /* nibbles 0..7 */
    memcpy(b + 4, sl, 4);
    const int sc[8] = {16, 1, -14, -29, -28, -11, 6, 23};
    for (int i = 0; i < 128; i++)
        b[8 + i] = (uint8_t)(i * 7 + 3);
    float y[QUANT_K];
    quant_dequant(y, b, GGUF_TT_IQ4_XS, 1);
    for (int e = 0; e < QUANT_K; e++) {
        const uint8_t byte = b[8 + 16 * (e / 32) + e % 16];
        const int idx = (e % 32) < 16 ? byte & 0xF : byte >> 4;
        assert_true(y[e] == 0.5f * (float)(sc[e / 32] * KV[idx]));
    }
    assert_true(y[0] == -520.0f); /* qs[0] = 3: -65; scale 16 */
    assert_true(y[48] == -5.0f);  /* high nibble of qs[16] = 115 = 0x73: -10; scale 1 */
}

/* ------------------------------------------------------------------------- */
/* Quantizing                                                                */
/* ------------------------------------------------------------------------- */

/* The bound quant_k.c's rule gives, per element of sub-block j (len
 * elements; see "Quantizing" there). f16 scales are rounded up by at most
 * one ulp, a factor (1 + 2^-10) in the normal range (the data below stays
 * in it), so:
 *   with mins (q <= Q, scales <= S): dmin <= max(-lo) / S (1 + 2^-10),
 *     the offset exceeds -lo by less than dmin, so top_j < R_j + dmin
 *     (R_j = hi_j - lo_j) and d <= max(top) / (Q S) (1 + 2^-10); the step
 *     d sc_j < top_j / Q + d, and |err| <= step / 2;
 *   symmetric: d <= max|x| / (Q S) (1 + 2^-10), step < amax_j / Q + d,
 *     |err| <= step / 2, and for IQ4_XS (Q = 113, values up to 24 apart)
 *     |err| <= 12 step;
 * plus float rounding, 1e-5 of the block's largest magnitude. */
static double quant_bound(uint32_t type, const float *x, int j, double *slack) {
    int Q, S, len, mins = 0;
    switch (type) {
    case GGUF_TT_Q2_K: Q = 3, S = 15, len = 16, mins = 1; break;
    case GGUF_TT_Q4_K: Q = 15, S = 63, len = 32, mins = 1; break;
    case GGUF_TT_Q5_K: Q = 31, S = 63, len = 32, mins = 1; break;
    case GGUF_TT_Q3_K: Q = 3, S = 31, len = 16; break;
    case GGUF_TT_Q6_K: Q = 31, S = 127, len = 16; break;
    default: Q = 113, S = 31, len = 32; break;
    }
    const double up = 1.0 + 1.0 / 1024;
    double rmax = 0, mmax = 0, amax = 0, rj = 0, aj = 0;
    for (int k = 0; k < QUANT_K / len; k++) {
        double lo = 0, hi = x[k * len], a = 0;
        for (int i = k * len; i < (k + 1) * len; i++) {
            lo = fmin(lo, x[i]);
            hi = fmax(hi, x[i]);
            a = fmax(a, fabs(x[i]));
        }
        rmax = fmax(rmax, hi - lo);
        mmax = fmax(mmax, -lo);
        amax = fmax(amax, a);
        if (k == j / len) rj = hi - lo, aj = a;
    }
    *slack = 1e-5 * (amax + mmax);
    if (mins) {
        const double dmin = mmax / S * up, d = (rmax + dmin) / (Q * S) * up;
        return 0.5 * ((rj + dmin) / Q + d);
    }
    const double d = amax / (Q * S) * up, step = aj / Q + d;
    return type == GGUF_TT_IQ4_XS ? 12 * step : 0.5 * step;
}

static void check_roundtrip(const ktype *kt, const float *x, int64_t nb, const char *what) {
    uint8_t *w = malloc((size_t)nb * (size_t)kt->bytes);
    float *y = malloc(sizeof(float) * (size_t)nb * QUANT_K);
    assert_int_equal(quant_quantize(w, x, kt->type, nb * QUANT_K), 0);
    quant_dequant(y, w, kt->type, nb);
    for (int64_t b = 0; b < nb; b++)
        for (int i = 0; i < QUANT_K; i++) {
            const size_t at = (size_t)b * QUANT_K + (size_t)i;
            double slack;
            const double bound = quant_bound(kt->type, x + (size_t)b * QUANT_K, i, &slack);
            const double err = fabs((double)y[at] - (double)x[at]);
            if (!isfinite(y[at]) || err > bound + slack)
                fail_msg("%s %s: block %ld element %d: x %.9g y %.9g err %.3g bound %.3g", kt->name, what, (long)b, i,
                         (double)x[at], (double)y[at], err, bound);
        }
    free(w);
    free(y);
}

static void test_quantize_bounds(void **state) {
    (void)state;
    tu_rng_seed(2);
    enum { NB = 24 };
    float *x = malloc(sizeof(float) * NB * QUANT_K);
    for (int t = 0; t < N_KT; t++) {
        /* Centred uniform, each block its own scale (1e-2..1e2). */
        for (int b = 0; b < NB; b++) {
            const float s = fabsf(rng_mag(1e-2f, 1e2f));
            for (int i = 0; i < QUANT_K; i++)
                x[b * QUANT_K + i] = s * tu_rng_float();
        }
        check_roundtrip(&KT[t], x, NB, "uniform");
        /* All positive (mins unused), all negative, offset ones. */
        for (int b = 0; b < NB; b++) {
            const float off = (float)(b % 3) - 1.0f;
            for (int i = 0; i < QUANT_K; i++)
                x[b * QUANT_K + i] = off * 2.0f + 0.5f * tu_rng_float();
        }
        check_roundtrip(&KT[t], x, NB, "offset");
        /* Heavy tails: mostly small with outliers, and sub-blocks whose
         * ranges differ by 10^4. */
        for (int b = 0; b < NB; b++)
            for (int i = 0; i < QUANT_K; i++) {
                const float r = tu_rng_float();
                x[b * QUANT_K + i] = (tu_rng_next() % 61 == 0 ? 30.0f : 0.1f) * r * (float)(1 + (i / 16) % 4 * 3000 * (b % 2));
            }
        check_roundtrip(&KT[t], x, NB, "outliers");
    }
    free(x);
}

/* Zero blocks give exact zeros, and no finite input gives a NaN or inf
 * scale (the largest floats only clamp). */
static void test_quantize_edges(void **state) {
    (void)state;
    float x[2 * QUANT_K], y[2 * QUANT_K];
    uint8_t w[2 * 210];
    for (int t = 0; t < N_KT; t++) {
        memset(x, 0, sizeof x);
        x[QUANT_K + 5] = -0.0f;
        assert_int_equal(quant_quantize(w, x, KT[t].type, 2 * QUANT_K), 0);
        quant_dequant(y, w, KT[t].type, 2);
        for (int i = 0; i < 2 * QUANT_K; i++)
            assert_true(y[i] == 0.0f);
        const float big[6] = {3.4e38f, -3.4e38f, 1e30f, -7e20f, 1e-40f, 65504.0f * 63.0f};
        for (int i = 0; i < 2 * QUANT_K; i++)
            x[i] = big[i % 6] * (i % 7 == 0 ? 1.0f : 0.5f);
        quant_quantize(w, x, KT[t].type, 2 * QUANT_K);
        quant_dequant(y, w, KT[t].type, 2);
        for (int i = 0; i < 2 * QUANT_K; i++)
            if (!isfinite(y[i])) fail_msg("%s: element %d of large input gives %g", KT[t].name, i, (double)y[i]);
        for (int i = 0; i < 2 * QUANT_K; i++)
            x[i] = 1e-30f * tu_rng_float();
        quant_quantize(w, x, KT[t].type, 2 * QUANT_K);
        quant_dequant(y, w, KT[t].type, 2);
        for (int i = 0; i < 2 * QUANT_K; i++)
            assert_true(isfinite(y[i]) && fabsf(y[i]) < 1e-6f);
    }
    assert_int_equal(quant_quantize(w, x, GGUF_TT_Q4_K, 100), -1);  /* not whole blocks */
}

/* ------------------------------------------------------------------------- */
/* Dot products                                                              */
/* ------------------------------------------------------------------------- */

enum { MAX_NB = 8, T_ROWS = 4 };

typedef struct acts {
    int8_t q[T_ROWS * MAX_NB * QUANT_K];
    float d[T_ROWS * MAX_NB];
    int16_t s[T_ROWS * MAX_NB * 16];
    int64_t n;
} acts;

/* Rows quantized from random floats (quant_act_row), or (raw) random int8
 * in [-127, 127] with their sums and a random scale: the extremes the
 * kernels' int16 steps must hold. */
static void acts_fill(acts *a, int64_t nb, int raw) {
    a->n = nb * QUANT_K;
    for (int t = 0; t < T_ROWS; t++) {
        int8_t *q = a->q + t * a->n;
        float *d = a->d + t * nb;
        int16_t *s = a->s + t * nb * 16;
        if (!raw) {
            float x[MAX_NB * QUANT_K];
            const float sc = fabsf(rng_mag(1e-2f, 10.0f));
            for (int64_t i = 0; i < a->n; i++)
                x[i] = sc * tu_rng_float();
            quant_act_row(QUANT_ACT_Q8_K, q, d, s, x, a->n);
            continue;
        }
        for (int64_t i = 0; i < a->n; i++)
            q[i] = (int8_t)((int)(tu_rng_next() % 255) - 127);
        for (int64_t i = 0; i < a->n; i += 64)
            q[i] = (tu_rng_next() & 1) ? 127 : -127;
        for (int64_t b = 0; b < nb; b++)
            d[b] = fabsf(rng_mag(1e-4f, 1e-1f));
        for (int64_t k = 0; k < a->n / 16; k++) {
            int sum = 0;
            for (int i = 0; i < 16; i++)
                sum += q[k * 16 + i];
            s[k] = (int16_t)sum;
        }
    }
}

/* Rows t0.. of a as the kernels take them. */
static quant_acts acts_at(const acts *a, int t0) {
    const int64_t nd = a->n / QUANT_K;
    quant_acts v = {a->q + t0 * a->n, a->d + t0 * nd, a->s + t0 * nd * 16, a->n};
    return v;
}

/* The float64 dot of the dequantized weight row with activation row t, and
 * the sum of the magnitudes of its terms (each weight's scale term and min
 * term separately, as the kernels round them), to scale tolerances. */
static double ref_dot(const ktype *kt, const uint8_t *w, int64_t nb, const acts *a, int t, double *mag) {
    float wf[MAX_NB * QUANT_K];
    quant_dequant(wf, w, kt->type, nb);
    double s = 0, m = 0;
    for (int64_t b = 0; b < nb; b++) {
        const double dx = a->d[t * nb + b];
        const double mterm = kt->dmin_off >= 0 ? fabs(h2f(w + b * kt->bytes + kt->dmin_off)) * kt->mmax : 0.0;
        for (int i = 0; i < QUANT_K; i++) {
            const double x = dx * a->q[t * a->n + b * QUANT_K + i];
            s += (double)wf[b * QUANT_K + i] * x;
            m += (fabs((double)wf[b * QUANT_K + i]) + 2 * mterm) * fabs(x);
        }
    }
    *mag = m;
    return s;
}

/* The scalar kernel against the float64 dot: its integer sums are exact,
 * so its error is float rounding: a few per block (the int32 to float
 * conversion, d_w d_x, the product) and one per block added, each at most
 * 2^-24 of the magnitude, against the float64 sum of the dequantized
 * floats (their own rounding, 2^-24 of each term): 2e-6 of the magnitude
 * covers 8 blocks with room. */
static void test_dot_scalar_ref(void **state) {
    (void)state;
    tu_rng_seed(3);
    static acts a;
    uint8_t w[MAX_NB * 210];
    for (int t = 0; t < N_KT; t++) {
        quant_dot_fn *dot = quant_dot_scalar(KT[t].type);
        for (int trial = 0; trial < 6; trial++) {
            const int64_t nb = 1 + trial % 4 + (trial == 5 ? 4 : 0);
            random_blocks(w, &KT[t], nb);
            acts_fill(&a, nb, trial % 2);
            const quant_acts v = acts_at(&a, 0);
            float y[T_ROWS];
            dot(y, 1, w, 0, 1, nb, &v, T_ROWS);
            for (int r = 0; r < T_ROWS; r++) {
                double mag;
                const double want = ref_dot(&KT[t], w, nb, &a, r, &mag);
                if (fabs(y[r] - want) > 2e-6 * mag)
                    fail_msg("%s nb %ld row %d: %.9g, want %.9g (magnitude %.3g)", KT[t].name, (long)nb, r, (double)y[r],
                             want, mag);
            }
        }
    }
}

/* AVX2 against scalar on random rows: the same exact integer sums, the
 * float steps in another order (8 lanes), so they agree to float rounding
 * of the terms' magnitude (1e-6 of it). The VNNI kernels this CPU has
 * (Q4_K, Q5_K: vpdpwssd in place of madd and add) sum the same integers
 * in the same order as the AVX2 ones, so they equal them bit for bit. */
static void test_dot_avx2(void **state) {
    (void)state;
    tu_rng_seed(4);
    static acts a;
    uint8_t w[MAX_NB * 210];
    int ran = 0;
    for (int t = 0; t < N_KT; t++) {
        quant_dot_fn *vec = quant_dot_avx2(KT[t].type), *ref = quant_dot_scalar(KT[t].type);
        if (!vec) continue;
        ran++;
        for (int64_t nb = 1; nb <= 4; nb++)
            for (int C = 1; C <= T_ROWS; C++)
                for (int raw = 0; raw < 2; raw++) {
                    random_blocks(w, &KT[t], nb);
                    acts_fill(&a, nb, raw);
                    const quant_acts v = acts_at(&a, 0);
                    float yv[T_ROWS * 3], yr[T_ROWS * 3];
                    vec(yv, 3, w, 0, 1, nb, &v, C);
                    ref(yr, 3, w, 0, 1, nb, &v, C);
                    for (int isa = QUANT_ISA_AVXVNNI; isa <= QUANT_ISA_AVX512VNNI; isa++) {
                        quant_dot_fn *vn = quant_dot_isa(KT[t].type, isa);
                        float yn[T_ROWS * 3];
                        if (vn) vn(yn, 3, w, 0, 1, nb, &v, C);
                        for (int r = 0; vn && r < C; r++)
                            if (memcmp(&yn[3 * r], &yv[3 * r], sizeof(float)))
                                fail_msg("%s nb %ld C %d row %d: vnni (isa %d) %.9g, avx2 %.9g", KT[t].name,
                                         (long)nb, C, r, isa, (double)yn[3 * r], (double)yv[3 * r]);
                    }
                    for (int r = 0; r < C; r++) {
                        double mag;
                        ref_dot(&KT[t], w, nb, &a, r, &mag);
                        if (fabs((double)yv[3 * r] - (double)yr[3 * r]) > 1e-6 * mag)
                            fail_msg("%s nb %ld C %d row %d: avx2 %.9g scalar %.9g (magnitude %.3g)", KT[t].name,
                                     (long)nb, C, r, (double)yv[3 * r], (double)yr[3 * r], mag);
                    }
                }
    }
    if (!ran) print_message("no AVX2 kernels on this CPU: skipped\n");
}

/* Batch invariance: each activation row's result has the same bits in a
 * group of 4, alone, or at any place of a group of 2 or 3, for the scalar
 * and the AVX2 kernel alike. */
static void test_batch_invariance(void **state) {
    (void)state;
    tu_rng_seed(5);
    static acts a;
    uint8_t w[MAX_NB * 210];
    for (int t = 0; t < N_KT; t++)
        for (int k = 0; k < 2; k++) {
            quant_dot_fn *dot = k ? quant_dot_avx2(KT[t].type) : quant_dot_scalar(KT[t].type);
            if (!dot) continue;
            for (int64_t nb = 1; nb <= MAX_NB; nb += 3) {
                random_blocks(w, &KT[t], nb);
                acts_fill(&a, nb, (int)nb % 2);
                const quant_acts all = acts_at(&a, 0);
                float y4[T_ROWS];
                dot(y4, 1, w, 0, 1, nb, &all, T_ROWS);
                for (int t0 = 0; t0 < T_ROWS; t0++)
                    for (int C = 1; t0 + C <= T_ROWS && C < T_ROWS; C++) {
                        const quant_acts v = acts_at(&a, t0);
                        float y[T_ROWS];
                        dot(y, 1, w, 0, 1, nb, &v, C);
                        if (memcmp(y, y4 + t0, sizeof(float) * (size_t)C) != 0)
                            fail_msg("%s %s nb %ld: rows %d..%d alone differ from the group of 4", KT[t].name,
                                     k ? "avx2" : "scalar", (long)nb, t0, t0 + C - 1);
                    }
            }
        }
}

/* Blocks with inf / NaN scales must not trap: their outputs are just not
 * finite (or finite where the scale meets a zero quant sum). */
static void test_nonfinite_scales(void **state) {
    (void)state;
    tu_rng_seed(6);
    static acts a;
    uint8_t w[2 * 210];
    float y[2 * QUANT_K], o[T_ROWS];
    for (int t = 0; t < N_KT; t++) {
        random_blocks(w, &KT[t], 2);
        w[KT[t].d_off] = 0x00, w[KT[t].d_off + 1] = 0x7c;                 /* +inf */
        w[KT[t].bytes + KT[t].d_off] = 0x01, w[KT[t].bytes + KT[t].d_off + 1] = 0x7e;  /* NaN */
        quant_dequant(y, w, KT[t].type, 2);
        acts_fill(&a, 2, 0);
        const quant_acts v = acts_at(&a, 0);
        quant_dot_scalar(KT[t].type)(o, 1, w, 0, 1, 2, &v, T_ROWS);
        if (quant_dot_avx2(KT[t].type)) quant_dot_avx2(KT[t].type)(o, 1, w, 0, 1, 2, &v, T_ROWS);
        assert_true(isnan(y[QUANT_K]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_dequant_random),
        cmocka_unit_test(test_dequant_q4k_scales),
        cmocka_unit_test(test_dequant_q5k),
        cmocka_unit_test(test_dequant_q3k),
        cmocka_unit_test(test_dequant_q6k),
        cmocka_unit_test(test_dequant_q2k),
        cmocka_unit_test(test_dequant_iq4xs),
        cmocka_unit_test(test_quantize_bounds),
        cmocka_unit_test(test_quantize_edges),
        cmocka_unit_test(test_dot_scalar_ref),
        cmocka_unit_test(test_dot_avx2),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_nonfinite_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
