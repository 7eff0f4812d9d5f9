/*
 * quant_k.c - the 256-element formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
 * IQ4_XS (layouts in quant.h), as ggml defines them.
 *
 * Every format is a super-block of 256 weights with one or two f16 scales
 * (d, and dmin for the types with mins) over small integer sub-block
 * scales, one per 16 or 32 weights. Three things per type:
 *
 *   dequant   bit-exact with ggml's dequantize_row_*: the same float32
 *             products in the same order (Q4_K: d1 = d * sc, m1 = dmin * m,
 *             y = d1 * q - m1), never fused into an FMA (the block below is
 *             compiled with fp-contract off; tests/test_quant_k.c and
 *             tests/ref/quants.py check it).
 *   quantize  a plain range rule, not llama.cpp's error search (see
 *             "Quantizing" below).
 *   dot       against QUANT_ACT_Q8_K activations (int8 q, a float d per 256,
 *             int16 sums per 16), as ggml's vec_dot_*_q8_K: per sub-block an
 *             integer sum of q_w * q_x, times the integer sub-block scale,
 *             summed in int32 over the super-block; one float multiply by
 *             d_w * d_x per super-block; the mins go through the
 *             activation sums (dmin d_x sum m_j bsum_j), and so, in the
 *             AVX2 kernels, do the fixed offsets of Q3_K (q - 4) and Q6_K
 *             (q - 32), which the scalar ones apply to the quants.
 *
 * The scalar kernels decode a block into one generic form (kblock: int8
 * quants with offsets applied, a scale and a min per 16) and share one dot
 * loop: the reference. The AVX2 kernels unpack each weight block once into
 * registers (quants as unsigned bytes, scales as broadcast int16) and apply
 * it to all C activation rows: maddubs(weights, activations) gives int16
 * pair sums, madd with the scales int32, summed over the block. Each
 * activation row runs the same operations in the same order whatever C is,
 * so its result is bit-identical alone or in a group (batch invariance).
 * The integer sums are exact in both kernels; only the float order of the
 * per-block terms differs (8 lanes against one), so scalar and AVX2 agree
 * to float rounding, not bit for bit.
 *
 * Nothing here allocates, asserts or aborts: a block's bytes are all
 * valid, and NaN or inf f16 scales just give NaN or inf outputs.
 */
#include "quant_int.h"

#include <math.h>
#include <string.h>

#include "gguf.h"
#include "ops.h"

#if defined(__x86_64__)
#define QK_AVX2 1
#endif
#define QK_TARGET QUANT_AVX2
#define ALWAYS_INLINE QUANT_INLINE

/* Bytes per super-block, as gguf.c's type table lists them. */
#define Q2K_BYTES 84
#define Q3K_BYTES 110
#define Q4K_BYTES 144
#define Q5K_BYTES 176
#define Q6K_BYTES 210
#define IQ4XS_BYTES 136


/* ------------------------------------------------------------------------- */
/* Block fields, and the scalar part: dequant, reference dot, quantize       */
/* ------------------------------------------------------------------------- */

/* Little-endian loads at any alignment. */
static ALWAYS_INLINE int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static ALWAYS_INLINE int32_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Q4_K / Q5_K: the 8 6-bit scales and 8 6-bit mins from 12 bytes (ggml's
 * get_scale_min_k4): sub-blocks 0..3 take the low 6 bits of bytes 0..3
 * (scales) and 4..7 (mins); 4..7 take a nibble of bytes 8..11 and the top
 * two bits of bytes 0..3 (scales) or 4..7 (mins). */
static void k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* Q3_K: the 16 6-bit scales, less 32: low 4 bits in a nibble of bytes
 * 0..7 (scale j < 8 the low nibble of byte j, j >= 8 the high nibble of
 * byte j - 8), high 2 bits at bit 2 (j / 4) of byte 8 + j % 4. */
static void q3k_scales(const uint8_t *q, int8_t sc[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? q[j] & 0xF : q[j - 8] >> 4;
        const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* IQ4_XS: the 6-bit scale of sub-block ib (of 32), less 32. */
static int iq4xs_scale(const uint8_t *blk, int ib) {
    const int h = blk[2] | (blk[3] << 8);
    return (((blk[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((h >> (2 * ib)) & 3) << 4)) - 32;
}

/* Q2_K and Q3_K keep 2-bit fields alike: element 128 h + 32 j + l
 * (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32 h + l]. */
static int two_bits(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Activation rows c0.. of xa as a quant_acts of their own. */
static quant_acts acts_from(const quant_acts *xa, int c0) {
    quant_acts a = *xa;
    const size_t c = (size_t)c0, n = (size_t)xa->n;
    a.q += c * n;
    a.d += c * (n / QUANT_K);
    if (a.s) a.s += c * (n / 16);  /* NULL + 0 is fine, NULL + k is not */
    return a;
}

/* ggml computes its dequantized values with separately rounded products and
 * differences; GNU C would otherwise contract d1 * q - m1 into an FMA. The
 * vector kernels further down use explicit FMAs and sit outside this. */
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* One super-block decoded: w[e] = (d * sc[e / 16]) * q[e] - dmin * m[e / 16],
 * which is each type's dequant formula term for term (for the types without
 * a min, has_min = 0 and the subtraction is left out). */
typedef struct kblock {
    int8_t q[QUANT_K];      /* quants, the type's offset applied */
    int32_t sc[16];         /* integer scale of each 16 */
    int32_t m[16];          /* integer min of each 16 (0 without mins) */
    float d, dmin;          /* super-block scales */
    int has_min;
} kblock;

static void unpack_q2k(kblock *k, const uint8_t *b) {
    for (int j = 0; j < 16; j++) {
        k->sc[j] = b[j] & 0xF;
        k->m[j] = b[j] >> 4;
    }
    for (int e = 0; e < QUANT_K; e++)
        k->q[e] = (int8_t)two_bits(b + 16, e);
    k->d = quant_f16_at(b + 80);
    k->dmin = quant_f16_at(b + 82);
    k->has_min = 1;
}

/* Q3_K: q = low 2 bits - 4 unless bit e / 32 of hmask[e % 32] is set. */
static void unpack_q3k(kblock *k, const uint8_t *b) {
    int8_t sc[16];
    q3k_scales(b + 96, sc);
    for (int j = 0; j < 16; j++) {
        k->sc[j] = sc[j];
        k->m[j] = 0;
    }
    for (int e = 0; e < QUANT_K; e++) {
        const int hbit = (b[e % 32] >> (e / 32)) & 1;
        k->q[e] = (int8_t)(two_bits(b + 32, e) - (hbit ? 0 : 4));
    }
    k->d = quant_f16_at(b + 108);
    k->dmin = 0.0f;
    k->has_min = 0;
}

/* Q4_K / Q5_K: element 64 g + l (l < 32) is the low nibble of qs[32 g + l],
 * 64 g + 32 + l its high nibble; Q5_K adds bit e / 32 of qh[e % 32] as 16. */
static void unpack_k45(kblock *k, const uint8_t *b, const uint8_t *qh, const uint8_t *qs) {
    uint8_t sc[8], m[8];
    k4_scales(b + 4, sc, m);
    for (int j = 0; j < 16; j++) {
        k->sc[j] = sc[j / 2];
        k->m[j] = m[j / 2];
    }
    for (int e = 0; e < QUANT_K; e++) {
        const uint8_t byte = qs[32 * (e / 64) + e % 32];
        int q = (e % 64) < 32 ? byte & 0xF : byte >> 4;
        if (qh) q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
        k->q[e] = (int8_t)q;
    }
    k->d = quant_f16_at(b);
    k->dmin = quant_f16_at(b + 2);
    k->has_min = 1;
}

static void unpack_q4k(kblock *k, const uint8_t *b) { unpack_k45(k, b, NULL, b + 16); }
static void unpack_q5k(kblock *k, const uint8_t *b) { unpack_k45(k, b, b + 16, b + 48); }

/* Q6_K: element 128 h + 32 k + l (k < 4, l < 32): low 4 bits the low
 * (k < 2) or high nibble of ql[64 h + 32 (k % 2) + l], high 2 bits bits
 * 2k..2k+1 of qh[32 h + l]; q - 32. */
static void unpack_q6k(kblock *k, const uint8_t *b) {
    const uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < 16; j++) {
        k->sc[j] = (int8_t)b[192 + j];
        k->m[j] = 0;
    }
    for (int e = 0; e < QUANT_K; e++) {
        const int h = e / 128, kk = (e % 128) / 32, l = e % 32;
        const uint8_t lb = ql[64 * h + 32 * (kk % 2) + l];
        const int lo = kk < 2 ? lb & 0xF : lb >> 4;
        const int hi = (qh[32 * h + l] >> (2 * kk)) & 3;
        k->q[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
    k->d = quant_f16_at(b + 208);
    k->dmin = 0.0f;
    k->has_min = 0;
}

/* IQ4_XS: sub-block ib (of 32): element 32 ib + j is the low nibble of
 * qs[16 ib + j] (j < 16), 32 ib + 16 + j its high nibble; each an index
 * into QUANT_IQ4NL_VALUES. */
static void unpack_iq4xs(kblock *k, const uint8_t *b) {
    for (int j = 0; j < 16; j++) {
        k->sc[j] = iq4xs_scale(b, j / 2);
        k->m[j] = 0;
    }
    for (int e = 0; e < QUANT_K; e++) {
        const uint8_t byte = b[8 + 16 * (e / 32) + e % 16];
        k->q[e] = QUANT_IQ4NL_VALUES[(e % 32) < 16 ? byte & 0xF : byte >> 4];
    }
    k->d = quant_f16_at(b);
    k->dmin = 0.0f;
    k->has_min = 0;
}

typedef void unpack_fn(kblock *k, const uint8_t *b);

/* nb blocks of bytes each into out, in ggml's float order: per 16,
 * d1 = d * sc and m1 = dmin * m, then d1 * q (- m1). */
static void dequant_generic(float *out, const uint8_t *w, int64_t nb, size_t bytes, unpack_fn *unpack) {
    kblock k;
    for (int64_t b = 0; b < nb; b++) {
        unpack(&k, w + (size_t)b * bytes);
        float *y = out + (size_t)b * QUANT_K;
        for (int j = 0; j < 16; j++) {
            const float d1 = k.d * (float)k.sc[j], m1 = k.dmin * (float)k.m[j];
            for (int i = 16 * j; i < 16 * j + 16; i++)
                y[i] = k.has_min ? d1 * (float)k.q[i] - m1 : d1 * (float)k.q[i];
        }
    }
}

static void dequant_q2k(float *out, const void *w, int64_t nb) { dequant_generic(out, w, nb, Q2K_BYTES, unpack_q2k); }
static void dequant_q3k(float *out, const void *w, int64_t nb) { dequant_generic(out, w, nb, Q3K_BYTES, unpack_q3k); }
static void dequant_q4k(float *out, const void *w, int64_t nb) { dequant_generic(out, w, nb, Q4K_BYTES, unpack_q4k); }
static void dequant_q5k(float *out, const void *w, int64_t nb) { dequant_generic(out, w, nb, Q5K_BYTES, unpack_q5k); }
static void dequant_q6k(float *out, const void *w, int64_t nb) { dequant_generic(out, w, nb, Q6K_BYTES, unpack_q6k); }
static void dequant_iq4xs(float *out, const void *w, int64_t nb) {
    dequant_generic(out, w, nb, IQ4XS_BYTES, unpack_iq4xs);
}

/* The reference dot: per block and activation row, the integer sum over
 * sub-blocks of sc * sum(q_w q_x) and of m * (the activations' sum), then
 * acc += (d d_x) isum, acc -= (dmin d_x) msum. Each row's sequence is its
 * own, so it does not depend on C. */
static void dot_generic(float *y, int64_t ldy, const uint8_t *w, int64_t nb, const quant_acts *xa, int C,
                        size_t bytes, unpack_fn *unpack) {
    const size_t n = (size_t)xa->n, nd = n / QUANT_K, ns = n / 16;
    for (int c0 = 0; c0 < C; c0 += QUANT_MAX_C) {  /* C > 4 as groups of 4: same per-row result */
        const int cn = C - c0 < QUANT_MAX_C ? C - c0 : QUANT_MAX_C;
        const quant_acts a = acts_from(xa, c0);
        float acc[QUANT_MAX_C] = {0};
        kblock k;
        for (int64_t b = 0; b < nb; b++) {
            unpack(&k, w + (size_t)b * bytes);
            for (int c = 0; c < cn; c++) {
                const int8_t *xq = a.q + (size_t)c * n + (size_t)b * QUANT_K;
                const int16_t *bs = a.s + (size_t)c * ns + (size_t)b * 16;
                const float dx = a.d[(size_t)c * nd + (size_t)b];
                int32_t isum = 0, msum = 0;
                for (int j = 0; j < 16; j++) {
                    int32_t s = 0;
                    for (int i = 16 * j; i < 16 * j + 16; i++)
                        s += (int32_t)k.q[i] * xq[i];
                    isum += k.sc[j] * s;
                    msum += k.m[j] * bs[j];
                }
                acc[c] += k.d * dx * (float)isum;
                if (k.has_min) acc[c] -= k.dmin * dx * (float)msum;
            }
        }
        for (int c = 0; c < cn; c++)
            y[(size_t)(c0 + c) * (size_t)ldy] = acc[c];
    }
}

static void dot_q2k_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, Q2K_BYTES, unpack_q2k);
}
static void dot_q3k_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, Q3K_BYTES, unpack_q3k);
}
static void dot_q4k_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, Q4K_BYTES, unpack_q4k);
}
static void dot_q5k_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, Q5K_BYTES, unpack_q5k);
}
static void dot_q6k_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, Q6K_BYTES, unpack_q6k);
}
static void dot_iq4xs_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    dot_generic(y, ldy, w, nb, xa, C, IQ4XS_BYTES, unpack_iq4xs);
}
QUANT_DOT_ROWS(dot_q2k_scalar, dot_q2k_scalar_row)
QUANT_DOT_ROWS(dot_q3k_scalar, dot_q3k_scalar_row)
QUANT_DOT_ROWS(dot_q4k_scalar, dot_q4k_scalar_row)
QUANT_DOT_ROWS(dot_q5k_scalar, dot_q5k_scalar_row)
QUANT_DOT_ROWS(dot_q6k_scalar, dot_q6k_scalar_row)
QUANT_DOT_ROWS(dot_iq4xs_scalar, dot_iq4xs_scalar_row)

/* ------------------------------------------------------------------------- */
/* Quantizing                                                                */
/* ------------------------------------------------------------------------- */

/* The rule, per super-block (the same for every type, in two flavours):
 *
 *   with mins (Q2_K, Q4_K, Q5_K; q in [0, Q], scales and mins in [0, S]):
 *     per sub-block lo = min(x, 0), hi = max(x); dmin is the smallest f16
 *     at least max(-lo) / S, m = ceil(-lo / dmin), so the offset
 *     dmin * m >= -lo; top = hi + dmin * m; d is the smallest f16 at
 *     least max(top) / (Q S), sc = ceil(top / Q / d), so Q d sc >= top;
 *     q = round((x + dmin m) / (d sc)).
 *   symmetric (Q3_K, Q6_K, IQ4_XS; |q| <= Q):
 *     per sub-block s = max|x| / Q; d the smallest f16 at least
 *     max(s) / S, sc = ceil(s / d); q = round(x / (d sc)).
 *
 * Rounding the scales up (ceil) means no element ever clamps, so each
 * element's error is at most half the quantized step d sc (for IQ4_XS,
 * half the widest gap of the value table, 24, times it), and the step is
 * at most the ideal one plus d: |x - y| <= (top / Q + d) / 2. The quants
 * are rounded against the scales as stored (after f16), so that bound is
 * about the written file. Q3_K and Q6_K use only |q| <= 3 and 31 of their
 * [-4, 3] and [-32, 31], and only positive scales: simpler, and the
 * range stays symmetric. */

/* The smallest f16 >= v > 0 (0 for v <= 0, the largest finite f16 for v
 * beyond it, so a scale is never inf and d * 0 never NaN); its bits in *h. */
static float scale_up_f16(float v, uint16_t *h) {
    if (!(v > 0.0f)) {
        *h = 0;
        return 0.0f;
    }
    uint16_t b = ops_f32_to_f16(v);
    if (b >= 0x7c00)
        b = 0x7bff;
    else if (ops_f16_to_f32(b) < v && b < 0x7bff)
        b++;  /* positive halves order as their bits */
    *h = b;
    return ops_f16_to_f32(b);
}

/* ceil(v / d) in [0, smax]; 0 where d is 0. */
static int scale_steps(float v, float d, int smax) {
    if (!(d > 0.0f)) return 0;
    const float r = ceilf(v / d);
    if (!(r > 0.0f)) return 0;
    return r >= (float)smax ? smax : (int)r;
}

/* round(t) in [lo, hi]. */
static int round_clamp(float t, int lo, int hi) {
    if (!(t > (float)lo)) return lo;
    if (t >= (float)hi) return hi;
    return (int)lroundf(t);
}

static void put_f16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* With mins: nsub sub-blocks of len elements (nsub * len = 256), quants in
 * [0, qmax] into q, scales and mins in [0, smax], the f16 bits of d and
 * dmin. */
static void quantize_mins(const float *x, int nsub, int len, int qmax, int smax, uint8_t *q, uint8_t *sc, uint8_t *m,
                          uint16_t *dh, uint16_t *mh) {
    float lo[16], hi[16], off[16], top[16], mmax = 0.0f, tmax = 0.0f;
    for (int j = 0; j < nsub; j++) {
        lo[j] = 0.0f;
        hi[j] = x[j * len];
        for (int i = j * len; i < (j + 1) * len; i++) {
            lo[j] = fminf(lo[j], x[i]);
            hi[j] = fmaxf(hi[j], x[i]);
        }
        mmax = fmaxf(mmax, -lo[j]);
    }
    const float dmin = scale_up_f16(mmax / (float)smax, mh);
    for (int j = 0; j < nsub; j++) {
        m[j] = (uint8_t)scale_steps(-lo[j], dmin, smax);
        off[j] = dmin * (float)m[j];  /* as dequant computes m1 */
        top[j] = fmaxf(hi[j] + off[j], 0.0f);
        tmax = fmaxf(tmax, top[j]);
    }
    const float d = scale_up_f16(tmax / (float)(qmax * smax), dh);
    for (int j = 0; j < nsub; j++) {
        sc[j] = (uint8_t)scale_steps(top[j] / (float)qmax, d, smax);
        const float ds = d * (float)sc[j];  /* as dequant computes d1 */
        for (int i = j * len; i < (j + 1) * len; i++)
            q[i] = (uint8_t)(ds > 0.0f ? round_clamp((x[i] + off[j]) / ds, 0, qmax) : 0);
    }
}

/* Symmetric: per sub-block a step d sc >= max|x| / qmax; q in [-qmax,
 * qmax] (table == NULL) or, with a value table (IQ4_XS), the index of the
 * nearest of its 16 values. */
static void quantize_sym(const float *x, int nsub, int len, int qmax, int smax, const int8_t *table, int8_t *q,
                         uint8_t *sc, uint16_t *dh) {
    float s[16], smx = 0.0f;
    for (int j = 0; j < nsub; j++) {
        float amax = 0.0f;
        for (int i = j * len; i < (j + 1) * len; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        s[j] = amax / (float)qmax;
        smx = fmaxf(smx, s[j]);
    }
    const float d = scale_up_f16(smx / (float)smax, dh);
    for (int j = 0; j < nsub; j++) {
        sc[j] = (uint8_t)scale_steps(s[j], d, smax);
        const float ds = d * (float)sc[j];
        for (int i = j * len; i < (j + 1) * len; i++) {
            const float t = ds > 0.0f ? x[i] / ds : 0.0f;
            if (!table) {
                q[i] = (int8_t)round_clamp(t, -qmax, qmax);
                continue;
            }
            int best = 0;  /* nearest value; the lower one on a tie */
            for (int v = 1; v < 16; v++)
                if (fabsf(t - (float)table[v]) < fabsf(t - (float)table[best])) best = v;
            q[i] = (int8_t)best;
        }
    }
}

static void quantize_q2k(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * Q2K_BYTES, q[QUANT_K], sc[16], m[16];
        uint16_t dh, mh;
        quantize_mins(x + (size_t)b * QUANT_K, 16, 16, 3, 15, q, sc, m, &dh, &mh);
        memset(o, 0, Q2K_BYTES);
        for (int j = 0; j < 16; j++)
            o[j] = (uint8_t)(sc[j] | (m[j] << 4));
        for (int e = 0; e < QUANT_K; e++)
            o[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * ((e % 128) / 32)));
        put_f16(o + 80, dh);
        put_f16(o + 82, mh);
    }
}

static void quantize_q3k(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * Q3K_BYTES, sc[16];
        int8_t q[QUANT_K];
        uint16_t dh;
        quantize_sym(x + (size_t)b * QUANT_K, 16, 16, 3, 31, NULL, q, sc, &dh);
        memset(o, 0, Q3K_BYTES);
        for (int e = 0; e < QUANT_K; e++) {
            const int u = q[e] + 4;  /* 1..7: bit 2 set means no -4 */
            o[32 + 32 * (e / 128) + e % 32] |= (uint8_t)((u & 3) << (2 * ((e % 128) / 32)));
            o[e % 32] |= (uint8_t)(((u >> 2) & 1) << (e / 32));
        }
        for (int j = 0; j < 16; j++) {
            const int l = sc[j] + 32;
            o[96 + j % 8] |= (uint8_t)((l & 0xF) << (j < 8 ? 0 : 4));
            o[96 + 8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        put_f16(o + 108, dh);
    }
}

/* Q4_K / Q5_K: the scales and mins into 12 bytes (k4_scales inverted) and
 * the quants' low nibbles (qs) and fifth bits (qh, Q5_K only). */
static void pack_k45(uint8_t *o, const uint8_t *q, const uint8_t *sc, const uint8_t *m, uint8_t *qh, uint8_t *qs) {
    for (int j = 0; j < 4; j++) {
        o[4 + j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        o[8 + j] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        o[12 + j] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    for (int e = 0; e < QUANT_K; e++) {
        qs[32 * (e / 64) + e % 32] |= (uint8_t)((q[e] & 0xF) << ((e % 64) < 32 ? 0 : 4));
        if (qh) qh[e % 32] |= (uint8_t)(((q[e] >> 4) & 1) << (e / 32));
    }
}

static void quantize_q4k(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * Q4K_BYTES, q[QUANT_K], sc[8], m[8];
        uint16_t dh, mh;
        quantize_mins(x + (size_t)b * QUANT_K, 8, 32, 15, 63, q, sc, m, &dh, &mh);
        memset(o, 0, Q4K_BYTES);
        put_f16(o, dh);
        put_f16(o + 2, mh);
        pack_k45(o, q, sc, m, NULL, o + 16);
    }
}

static void quantize_q5k(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * Q5K_BYTES, q[QUANT_K], sc[8], m[8];
        uint16_t dh, mh;
        quantize_mins(x + (size_t)b * QUANT_K, 8, 32, 31, 63, q, sc, m, &dh, &mh);
        memset(o, 0, Q5K_BYTES);
        put_f16(o, dh);
        put_f16(o + 2, mh);
        pack_k45(o, q, sc, m, o + 16, o + 48);
    }
}

static void quantize_q6k(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * Q6K_BYTES, sc[16];
        int8_t q[QUANT_K];
        uint16_t dh;
        quantize_sym(x + (size_t)b * QUANT_K, 16, 16, 31, 127, NULL, q, sc, &dh);
        memset(o, 0, Q6K_BYTES);
        for (int e = 0; e < QUANT_K; e++) {
            const int u = q[e] + 32, h = e / 128, k = (e % 128) / 32, l = e % 32;
            o[64 * h + 32 * (k % 2) + l] |= (uint8_t)((u & 0xF) << (k < 2 ? 0 : 4));
            o[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
        for (int j = 0; j < 16; j++)
            o[192 + j] = sc[j];  /* 0..127: the same byte as int8 */
        put_f16(o + 208, dh);
    }
}

static void quantize_iq4xs(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *o = (uint8_t *)out + (size_t)b * IQ4XS_BYTES, sc[8];
        int8_t q[QUANT_K];
        uint16_t dh;
        /* 113 is the table's largest positive value, so no |x| clamps. */
        quantize_sym(x + (size_t)b * QUANT_K, 8, 32, 113, 31, QUANT_IQ4NL_VALUES, q, sc, &dh);
        memset(o, 0, IQ4XS_BYTES);
        put_f16(o, dh);
        unsigned h = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = sc[ib] + 32;
            o[4 + ib / 2] |= (uint8_t)((ls & 0xF) << (4 * (ib % 2)));
            h |= (unsigned)(ls >> 4) << (2 * ib);
        }
        put_f16(o + 2, (uint16_t)h);
        for (int e = 0; e < QUANT_K; e++)
            o[8 + 16 * (e / 32) + e % 16] |= (uint8_t)(q[e] << ((e % 32) < 16 ? 0 : 4));
    }
}

#if defined(__clang__)
#pragma clang fp contract(on)
#else
#pragma GCC pop_options
#endif

/* ------------------------------------------------------------------------- */
/* AVX2 kernels                                                              */
/* ------------------------------------------------------------------------- */

#ifdef QK_AVX2

/* shuffle_epi8 controls broadcasting int16 lane k of a 128-bit half to all
 * 8 lanes of both halves (K_BCAST[k]), or lane 2k to the low half and
 * 2k + 1 to the high half (K_PAIR[k]): the scale vectors for a register of
 * one sub-block of 32, or of two sub-blocks of 16. Tables, not immediates,
 * so loops over them compile at -O1. */
#define B2(k) (2 * (k)), (2 * (k) + 1)
#define B16(k) B2(k), B2(k), B2(k), B2(k), B2(k), B2(k), B2(k), B2(k)
static const uint8_t K_BCAST[8][32] __attribute__((aligned(32))) = {
    {B16(0), B16(0)}, {B16(1), B16(1)}, {B16(2), B16(2)}, {B16(3), B16(3)},
    {B16(4), B16(4)}, {B16(5), B16(5)}, {B16(6), B16(6)}, {B16(7), B16(7)},
};
static const uint8_t K_PAIR[4][32] __attribute__((aligned(32))) = {
    {B16(0), B16(1)}, {B16(2), B16(3)}, {B16(4), B16(5)}, {B16(6), B16(7)},
};
#undef B16
#undef B2

QK_TARGET static ALWAYS_INLINE __m256i kbcast(__m256i v, const uint8_t ctl[32]) {
    return _mm256_shuffle_epi8(v, _mm256_load_si256((const __m256i *)ctl));
}

/* 8 int16 from the 8 signed bytes at p, in both 128-bit halves. */
QK_TARGET static ALWAYS_INLINE __m256i k8s16(const void *p) {
    return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p)));
}

/* Q4_K / Q5_K scales (bytes 0..7) and mins (8..15) of the 12 bytes at q
 * (loaded as 16: the block goes on past them), the fields of k4_scales
 * moved in-register: X = q0-3 | q8-11 | q4-7 | q8-11 and Y = 0 | q0-3 |
 * 0 | q4-7 by two byte shuffles, then per 32-bit group the low 6 bits
 * (sc0-3, m0-3), the low or high nibble (sc4-7, m4-7) of X, and bits 6..7
 * of Y at 4..5. Not through stored bytes read back as a vector: that
 * store-forwarding stall measured about doubling a block's time. */
QK_TARGET static ALWAYS_INLINE __m128i k4_scales_v(const uint8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)q);
    const __m128i x = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i y = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i lo = _mm_and_si128(x, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_setr_epi32(0, 0, 0, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi16(y, 2), _mm_set1_epi8(0x30));
    return _mm_or_si128(_mm_or_si128(lo, hi), top);
}

/* Q3_K's 16 scales less 32 as int8, in a register (q3k_scales' fields,
 * by ggml's kmask word shuffle). */
QK_TARGET static ALWAYS_INLINE __m128i q3k_scales_v(const uint8_t *q) {
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f;
    const uint32_t a[3] = {(uint32_t)ld32(q), (uint32_t)ld32(q + 4), (uint32_t)ld32(q + 8)};
    const uint32_t s0 = (a[0] & k2) | (((a[2] >> 0) & k1) << 4);
    const uint32_t s1 = (a[1] & k2) | (((a[2] >> 2) & k1) << 4);
    const uint32_t s2 = ((a[0] >> 4) & k2) | (((a[2] >> 4) & k1) << 4);
    const uint32_t s3 = ((a[1] >> 4) & k2) | (((a[2] >> 6) & k1) << 4);
    return _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
}

/* IQ4_XS's 8 scales less 32 as int16, in a register: the nibbles of
 * scales_l interleaved low, high; the 2-bit fields of scales_h moved to
 * the top of each lane by a multiply (lane ib by 2^(14 - 2 ib)) and down
 * by 14. */
QK_TARGET static ALWAYS_INLINE __m128i iq4xs_scales_v(const uint8_t *blk) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i l = _mm_cvtsi32_si128(ld32(blk + 4));
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
    const __m128i up = _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1);
    const __m128i hi = _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16((short)ld16(blk + 2)), up), 14);
    return _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(nib), _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
}

/* Each line of the block, QUANT_PREFETCH bytes ahead. */
#define QK_PREFETCH_BLOCK(blk, bytes)                                                       \
    do {                                                                                    \
        for (int pf_ = 0; pf_ < (int)(bytes); pf_ += 64)                                      \
            _mm_prefetch((const char *)(blk) + QUANT_PREFETCH + pf_, _MM_HINT_T0);             \
    } while (0)

/* The per-row activation pointers of one call: row c's quants, scales and
 * sums (of block 0). */
typedef struct kacts {
    const int8_t *q[QUANT_MAX_C];
    const float *d[QUANT_MAX_C];
    const int16_t *s[QUANT_MAX_C];
} kacts;

static ALWAYS_INLINE kacts kacts_of(const quant_acts *xa, const int C) {
    kacts a;
    const size_t n = (size_t)xa->n;
    for (int c = 0; c < C; c++) {
        a.q[c] = xa->q + (size_t)c * n;
        a.d[c] = xa->d + (size_t)c * (n / QUANT_K);
        a.s[c] = xa->s + (size_t)c * (n / 16);
    }
    return a;
}

/* The float step of every kernel, per block and row: acc += cvt(isum) *
 * (d_w d_x), then (types with mins) acc -= cvt(msum) * (dmin d_x). */
QK_TARGET static ALWAYS_INLINE __m256 kscale(__m256 acc, __m256i isum, float dd) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dd), acc);
}
QK_TARGET static ALWAYS_INLINE __m256 kscale_min(__m256 acc, __m256i msum, float dm) {
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dm), acc);
}

/* Q4_K (Q5_K with qh: fifth bits). Per block: the 8 scales and the 8 mins
 * (each twice, to pair with the 16 activation sums) as int16; per 64
 * elements g, the low nibbles of qs[32 g ..] are sub-block 2g, the high
 * ones 2g + 1. maddubs: at most 2 * 31 * 127 per int16, no saturation. */
QK_TARGET static ALWAYS_INLINE void k45_avx2(float *y, int64_t ldy, const uint8_t *w, int64_t nb, const quant_acts *xa,
                                             const int C, const int five, const int vnni) {
    const size_t bytes = five ? Q5K_BYTES : Q4K_BYTES;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const kacts a = kacts_of(xa, C);
    __m256 acc[QUANT_MAX_C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bytes, *qs = blk + (five ? 48 : 16);
        QK_PREFETCH_BLOCK(blk, bytes);
        const __m128i scm = k4_scales_v(blk + 4);
        const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32(blk))); /* d, dmin */
        const float d = _mm_cvtss_f32(dm), dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        const __m256i scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
        /* The fifth bits brought to bit 4 of each byte, where a mask takes
         * them: qh moved up by 4 holds bit 0 there, and each shift right by
         * 1 brings the next; from bit 4 on, qh itself shifted right (the
         * shift up dropped the high byte's bits 4..7 off its 16-bit lane). */
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        __m256i hb = _mm256_slli_epi16(qh, 4);
        __m256i isum[QUANT_MAX_C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
            __m256i wl = _mm256_and_si256(qb, m4), wh = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            if (five) {  /* bit 2g of qh into bit 4 of the low part, 2g + 1 of the high */
                if (g == 2) hb = qh;
                wl = _mm256_or_si256(wl, _mm256_and_si256(hb, b4));
                hb = _mm256_srli_epi16(hb, 1);
                wh = _mm256_or_si256(wh, _mm256_and_si256(hb, b4));
                hb = _mm256_srli_epi16(hb, 1);
            }
            const __m256i sl = kbcast(scv, K_BCAST[2 * g]), sh = kbcast(scv, K_BCAST[2 * g + 1]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const int8_t *xq = a.q[c] + (size_t)b * QUANT_K + 64 * g;
                const __m256i pl = _mm256_maddubs_epi16(wl, _mm256_loadu_si256((const __m256i *)xq));
                const __m256i ph = _mm256_maddubs_epi16(wh, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                if (vnni)
                    isum[c] = quant_dpwssd(vnni, quant_dpwssd(vnni, isum[c], pl, sl), ph, sh);
                else
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pl, sl), _mm256_madd_epi16(ph, sh)));
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const float dx = a.d[c][b];
            const __m256i ms = _mm256_madd_epi16(mins2, _mm256_loadu_si256((const __m256i *)(a.s[c] + (size_t)b * 16)));
            acc[c] = kscale_min(kscale(acc[c], isum[c], d * dx), ms, dmin * dx);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        y[(size_t)c * (size_t)ldy] = quant_hsum8(acc[c]);
}

/* Q6_K. Per half h (128 elements): ql[64 h ..] and ql[64 h + 32 ..] give
 * the low nibbles of the four 32-element runs k = 0, 1 (low nibbles) and
 * 2, 3 (high), qh[32 h ..] bits 2k..2k+1 their top two bits; run k holds
 * sub-blocks 8h + 2k (low 128-bit half) and 8h + 2k + 1 (high). The -32
 * is taken out afterwards: sum sc (q - 32) x = sum sc q x - 32 sum sc
 * bsum. Quants 0..63: maddubs at most 2 * 63 * 127, no saturation. */
QK_TARGET static ALWAYS_INLINE void q6k_avx2(float *y, int64_t ldy, const uint8_t *w, int64_t nb, const quant_acts *xa,
                                             const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const kacts a = kacts_of(xa, C);
    __m256 acc[QUANT_MAX_C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * Q6K_BYTES;
        QK_PREFETCH_BLOCK(blk, Q6K_BYTES);
        const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 208))));
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
        __m256i isum[QUANT_MAX_C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h));
            const __m256i l2 = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
            const __m256i scv = k8s16(blk + 192 + 8 * h);
            __m256i q[4], s[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(qh, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                s[k] = kbcast(scv, K_PAIR[k]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const int8_t *xq = a.q[c] + (size_t)b * QUANT_K + 128 * h;
                __m256i t = isum[c];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(xq + 32 * k)));
                    t = _mm256_add_epi32(t, _mm256_madd_epi16(p, s[k]));
                }
                isum[c] = t;
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256i o = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(a.s[c] + (size_t)b * 16)));
            acc[c] = kscale(acc[c], _mm256_sub_epi32(isum[c], _mm256_slli_epi32(o, 5)), d * a.d[c][b]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        y[(size_t)c * (size_t)ldy] = quant_hsum8(acc[c]);
}

/* Q2_K and Q3_K: 2-bit fields, per half h run j (bits 2j..2j+1 of
 * qs[32 h ..]) holding sub-blocks 8h + 2j and 8h + 2j + 1. Q2_K: 4-bit
 * scales and mins; Q3_K: signed 6-bit scales, the hmask bit 4h + j adds 4
 * to the field (0..7) and the -4 comes out through the sums as Q6_K's
 * -32 does. */
QK_TARGET static ALWAYS_INLINE void k23_avx2(float *y, int64_t ldy, const uint8_t *w, int64_t nb, const quant_acts *xa,
                                             const int C, const int three) {
    const size_t bytes = three ? Q3K_BYTES : Q2K_BYTES;
    const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    const kacts a = kacts_of(xa, C);
    __m256 acc[QUANT_MAX_C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bytes, *qs = blk + (three ? 32 : 16);
        QK_PREFETCH_BLOCK(blk, bytes);
        __m128i sc8;  /* the 16 scales as int8 */
        float d, dmin = 0.0f;
        __m256i mins = _mm256_setzero_si256(), hb = _mm256_setzero_si256();
        if (three) {
            sc8 = q3k_scales_v(blk + 96);
            d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk + 108))));
            hb = _mm256_loadu_si256((const __m256i *)blk);
        } else {
            const __m128i s8 = _mm_loadu_si128((const __m128i *)blk);
            sc8 = _mm_and_si128(s8, _mm_set1_epi8(0x0F));
            mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F)));
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(ld32(blk + 80)));
            d = _mm_cvtss_f32(dm);
            dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        /* Sub-blocks 8h..8h+7 as int16 in both halves, for half h. */
        const __m256i scvh[2] = {_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)),
                                 _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_unpackhi_epi64(sc8, sc8)))};
        __m256i isum[QUANT_MAX_C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            const __m256i scv = scvh[h];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i u = _mm256_and_si256(qb, m3);
                qb = _mm256_srli_epi16(qb, 2);
                if (three) {
                    u = _mm256_or_si256(u, _mm256_and_si256(_mm256_slli_epi16(hb, 2), b2));
                    hb = _mm256_srli_epi16(hb, 1);
                }
                const __m256i s = kbcast(scv, K_PAIR[j]);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    const int8_t *xq = a.q[c] + (size_t)b * QUANT_K + 128 * h + 32 * j;
                    const __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)xq));
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, s));
                }
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)(a.s[c] + (size_t)b * 16));
            const float dx = a.d[c][b];
            if (three) {
                const __m256i o = _mm256_madd_epi16(sc16, bs);
                acc[c] = kscale(acc[c], _mm256_sub_epi32(isum[c], _mm256_slli_epi32(o, 2)), d * dx);
            } else {
                acc[c] = kscale_min(kscale(acc[c], isum[c], d * dx), _mm256_madd_epi16(mins, bs), dmin * dx);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        y[(size_t)c * (size_t)ldy] = quant_hsum8(acc[c]);
}

/* IQ4_XS. Per 64 elements m: the low nibbles of qs[32 m ..] are elements
 * 0..15 of sub-blocks 2m and 2m + 1 (one per 128-bit half), the high
 * nibbles their elements 16..31, so two lane permutes put each sub-block
 * in one register; a table shuffle turns indices into the signed values.
 * maddubs needs an unsigned operand: |w| and x given w's sign (at most
 * 2 * 127 * 127 per int16). */
QK_TARGET static ALWAYS_INLINE void iq4xs_avx2(float *y, int64_t ldy, const uint8_t *w, int64_t nb, const quant_acts *xa,
                                               const int C) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i vtab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)QUANT_IQ4NL_VALUES));
    const kacts a = kacts_of(xa, C);
    __m256 acc[QUANT_MAX_C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * IQ4XS_BYTES;
        QK_PREFETCH_BLOCK(blk, IQ4XS_BYTES);
        const float d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(ld16(blk))));
        const __m256i scv = _mm256_broadcastsi128_si256(iq4xs_scales_v(blk));
        __m256i isum[QUANT_MAX_C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(blk + 8 + 32 * m));
            const __m256i lo = _mm256_and_si256(qb, m4), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            const __m256i wa = _mm256_shuffle_epi8(vtab, _mm256_permute2x128_si256(lo, hi, 0x20));
            const __m256i wb = _mm256_shuffle_epi8(vtab, _mm256_permute2x128_si256(lo, hi, 0x31));
            const __m256i aa = _mm256_abs_epi8(wa), ab = _mm256_abs_epi8(wb);
            const __m256i sa = kbcast(scv, K_BCAST[2 * m]), sb = kbcast(scv, K_BCAST[2 * m + 1]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const int8_t *xq = a.q[c] + (size_t)b * QUANT_K + 64 * m;
                const __m256i x0 = _mm256_loadu_si256((const __m256i *)xq);
                const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32));
                const __m256i pa = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(x0, wa));
                const __m256i pb = _mm256_maddubs_epi16(ab, _mm256_sign_epi8(x1, wb));
                isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pa, sa), _mm256_madd_epi16(pb, sb)));
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[c] = kscale(acc[c], isum[c], d * a.d[c][b]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        y[(size_t)c * (size_t)ldy] = quant_hsum8(acc[c]);
}

/* The quant_dot_fn of a kernel: C made a constant per run of rows
 * (1..4), and C > 4 run as groups of 4, which gives each row the same
 * result. */
#define QK_ROWS(call, C_)                                                                                    \
    for (int r = 0; r < R; r++)                                                                              \
        call(yp + r, ldy, wp + (size_t)r * rb, nb, ap, C_)
#define QK_DOT_AVX2(name, call)                                                                              \
    QK_TARGET static void name(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb,             \
                               const quant_acts *xa, int C) {                                                \
        for (int c0 = 0; c0 < C; c0 += QUANT_MAX_C) {                                                        \
            const quant_acts ag = acts_from(xa, c0), *ap = &ag;                                              \
            const uint8_t *wp = (const uint8_t *)w;                                                          \
            float *yp = y + (size_t)c0 * (size_t)ldy;                                                        \
            switch (C - c0) {                                                                                \
            case 1: QK_ROWS(call, 1); break;                                                                 \
            case 2: QK_ROWS(call, 2); break;                                                                 \
            case 3: QK_ROWS(call, 3); break;                                                                 \
            default: QK_ROWS(call, 4); break;                                                                \
            }                                                                                                \
        }                                                                                                    \
    }

#define Q4K_CALL(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 0, 0)
#define Q5K_CALL(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 1, 0)
#define Q4K_VEX(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 0, QUANT_VNNI_VEX)
#define Q5K_VEX(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 1, QUANT_VNNI_VEX)
#define Q4K_EVEX(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 0, QUANT_VNNI_EVEX)
#define Q5K_EVEX(y, ldy, w, nb, xa, C) k45_avx2(y, ldy, w, nb, xa, C, 1, QUANT_VNNI_EVEX)
#define Q2K_CALL(y, ldy, w, nb, xa, C) k23_avx2(y, ldy, w, nb, xa, C, 0)
#define Q3K_CALL(y, ldy, w, nb, xa, C) k23_avx2(y, ldy, w, nb, xa, C, 1)
QK_DOT_AVX2(dot_q2k_avx2, Q2K_CALL)
QK_DOT_AVX2(dot_q3k_avx2, Q3K_CALL)
QK_DOT_AVX2(dot_q4k_avx2, Q4K_CALL)
QK_DOT_AVX2(dot_q5k_avx2, Q5K_CALL)
QK_DOT_AVX2(dot_q4k_vex, Q4K_VEX)
QK_DOT_AVX2(dot_q5k_vex, Q5K_VEX)
QK_DOT_AVX2(dot_q4k_evex, Q4K_EVEX)
QK_DOT_AVX2(dot_q5k_evex, Q5K_EVEX)
QK_DOT_AVX2(dot_q6k_avx2, q6k_avx2)
QK_DOT_AVX2(dot_iq4xs_avx2, iq4xs_avx2)

#else
#define dot_q2k_avx2 NULL
#define dot_q3k_avx2 NULL
#define dot_q4k_avx2 NULL
#define dot_q5k_avx2 NULL
#define dot_q4k_vex NULL
#define dot_q5k_vex NULL
#define dot_q4k_evex NULL
#define dot_q5k_evex NULL
#define dot_q6k_avx2 NULL
#define dot_iq4xs_avx2 NULL
#endif

const quant_kind quant_k_kinds[] = {
    {GGUF_TT_Q2_K, dequant_q2k, quantize_q2k, dot_q2k_scalar, dot_q2k_avx2, {NULL, NULL}},
    {GGUF_TT_Q3_K, dequant_q3k, quantize_q3k, dot_q3k_scalar, dot_q3k_avx2, {NULL, NULL}},
    {GGUF_TT_Q4_K, dequant_q4k, quantize_q4k, dot_q4k_scalar, dot_q4k_avx2, {dot_q4k_vex, dot_q4k_evex}},
    {GGUF_TT_Q5_K, dequant_q5k, quantize_q5k, dot_q5k_scalar, dot_q5k_avx2, {dot_q5k_vex, dot_q5k_evex}},
    {GGUF_TT_Q6_K, dequant_q6k, quantize_q6k, dot_q6k_scalar, dot_q6k_avx2, {NULL, NULL}},
    {GGUF_TT_IQ4_XS, dequant_iq4xs, quantize_iq4xs, dot_iq4xs_scalar, dot_iq4xs_avx2, {NULL, NULL}},
};
const int quant_k_n = (int)(sizeof quant_k_kinds / sizeof quant_k_kinds[0]);
