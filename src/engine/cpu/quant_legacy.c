/*
 * quant_legacy.c - the 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
 * and IQ4_NL (layouts in quant.h).
 *
 * Every format is handled by one set of generic functions that take a
 * compile-time kind (QL_*), inlined once per type: a scalar unpacker
 * turns a block into 32 small integers and its scale (and min), and both
 * dequantizing and the scalar dot products read it; the AVX2 kernels have
 * their own unpacker that leaves the 32 integers in one register.
 *
 * Dequantizing is bit-exact with ggml's dequantize_row_*: each weight is
 * one float product q * d, then for the types with a min one float sum
 * + m. The product is always exact (q has at most 8 significant bits, an
 * f16 scale 11, and the product of two f16-range values is a normal
 * float), so whether the compiler fuses it with the sum into an FMA (GNU C
 * contracts by default) the result is rounded once, in the sum, as ggml
 * and a NumPy float32 reference round it. The quantizers are ggml's
 * reference rules (quantize_row_*_ref) for the five older types; there
 * x / d + 0.5 is not exact, so a compiler barrier (QL_BARRIER) keeps the
 * two apart and every build writes the same bytes. IQ4_NL takes a plain
 * version of ggml's scale search (no importance weights).
 *
 * Dot products. Activations are QUANT_ACT_Q8_32: int8 q, a float scale dx
 * and the sum of q per 32. For one block, sum_j w_j x_j = dw dx isum (+ m
 * dx sx for the types with a min, w = d q + m), where isum = sum_j q_j
 * xq_j is exact in int32. Each activation row accumulates its blocks in
 * its own registers with the same operations whatever C is and wherever
 * the row sits in the group, so a row's result never depends on its batch.
 * Nothing here allocates, and no block's bytes can make a kernel fault:
 * NaN or inf scales only give NaN or inf outputs.
 */
#include "quant_int.h"

#include <math.h>
#include <string.h>

#include "gguf.h"
#include "ops.h"

#if defined(__x86_64__)
#define QL_HAVE_AVX2 1
#define QL_AVX2 QUANT_AVX2
#endif
#define QL_INLINE QUANT_INLINE
#define QL_BLOCK 32

/* Keeps the compiler from fusing a product written to p[] with a sum that
 * reads it afterwards (an FMA rounds once where ggml rounds twice, so a
 * build with FMA would write other bytes than one without): the asm may
 * read and write any memory, so the rounded products are stored before it
 * and loaded again after it. */
#define QL_BARRIER(p) __asm__ volatile("" : : "r"(p) : "memory")

/* The formats, as a compile-time argument of the generic functions. */
enum { QL_Q4_0, QL_Q4_1, QL_Q5_0, QL_Q5_1, QL_Q8_0, QL_IQ4_NL };

/* Bytes per block of a kind. */
static QL_INLINE size_t ql_bytes(const int kind) {
    switch (kind) {
    case QL_Q4_0: return 18;
    case QL_Q4_1: return 20;
    case QL_Q5_0: return 22;
    case QL_Q5_1: return 24;
    case QL_Q8_0: return 34;
    default: return 18;  /* QL_IQ4_NL */
    }
}

/* Whether w = d q + m (a min to add) rather than w = d q with q signed. */
static QL_INLINE int ql_has_min(const int kind) {
    return kind == QL_Q4_1 || kind == QL_Q5_1;
}

static void ql_f16_store(uint8_t *p, float f) {
    const uint16_t h = ops_f32_to_f16(f);
    memcpy(p, &h, sizeof h);
}

/* ------------------------------------------------------------------------- */
/* Scalar unpacking and dequantizing                                         */
/* ------------------------------------------------------------------------- */

/* The 16 nibble bytes qs: element j in the low nibble of qs[j], element
 * j + 16 in the high one. */
static QL_INLINE void ql_nibbles(uint8_t q[QL_BLOCK], const uint8_t *qs) {
    for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
}

/* Fifth bits: bit j of the little-endian u32 at qh belongs to element j. */
static QL_INLINE void ql_fifth_bits(uint8_t q[QL_BLOCK], const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    for (int j = 0; j < QL_BLOCK; j++)
        q[j] |= (uint8_t)(((h >> j) & 1u) << 4);
}

/* One block as 32 integers q (w = d q, or w = d q + m for the types with
 * a min, where q is 0..31 and m is written to *m). */
static QL_INLINE void ql_unpack(const int kind, const uint8_t *blk, int8_t q[QL_BLOCK], float *d, float *m) {
    uint8_t u[QL_BLOCK];
    *d = quant_f16_at(blk);
    *m = 0.0f;
    switch (kind) {
    case QL_Q4_0:
        ql_nibbles(u, blk + 2);
        for (int j = 0; j < QL_BLOCK; j++) q[j] = (int8_t)(u[j] - 8);
        break;
    case QL_Q4_1:
        *m = quant_f16_at(blk + 2);
        ql_nibbles(u, blk + 4);
        for (int j = 0; j < QL_BLOCK; j++) q[j] = (int8_t)u[j];
        break;
    case QL_Q5_0:
        ql_nibbles(u, blk + 6);
        ql_fifth_bits(u, blk + 2);
        for (int j = 0; j < QL_BLOCK; j++) q[j] = (int8_t)(u[j] - 16);
        break;
    case QL_Q5_1:
        *m = quant_f16_at(blk + 2);
        ql_nibbles(u, blk + 8);
        ql_fifth_bits(u, blk + 4);
        for (int j = 0; j < QL_BLOCK; j++) q[j] = (int8_t)u[j];
        break;
    case QL_Q8_0:
        memcpy(q, blk + 2, QL_BLOCK);
        break;
    default:  /* QL_IQ4_NL */
        ql_nibbles(u, blk + 2);
        for (int j = 0; j < QL_BLOCK; j++) q[j] = QUANT_IQ4NL_VALUES[u[j]];
        break;
    }
}

/* As ggml's dequantize_row_*: out = q * d (exact), then + m (rounded). */
static QL_INLINE void ql_dequant(const int kind, float *out, const void *w, int64_t nb) {
    const uint8_t *blk = w;
    for (int64_t b = 0; b < nb; b++, blk += ql_bytes(kind)) {
        int8_t q[QL_BLOCK];
        float d, m;
        float *o = out + (size_t)b * QL_BLOCK;
        ql_unpack(kind, blk, q, &d, &m);
        /* No + 0 for the types without a min: it would turn ggml's -0
         * (q = 0, d < 0) into +0. */
        for (int j = 0; j < QL_BLOCK; j++)
            o[j] = ql_has_min(kind) ? (float)q[j] * d + m : (float)q[j] * d;
    }
}

static void dequant_q4_0(float *out, const void *w, int64_t nb) { ql_dequant(QL_Q4_0, out, w, nb); }
static void dequant_q4_1(float *out, const void *w, int64_t nb) { ql_dequant(QL_Q4_1, out, w, nb); }
static void dequant_q5_0(float *out, const void *w, int64_t nb) { ql_dequant(QL_Q5_0, out, w, nb); }
static void dequant_q5_1(float *out, const void *w, int64_t nb) { ql_dequant(QL_Q5_1, out, w, nb); }
static void dequant_q8_0(float *out, const void *w, int64_t nb) { ql_dequant(QL_Q8_0, out, w, nb); }
static void dequant_iq4_nl(float *out, const void *w, int64_t nb) { ql_dequant(QL_IQ4_NL, out, w, nb); }

/* ------------------------------------------------------------------------- */
/* Quantizing                                                                */
/* ------------------------------------------------------------------------- */

/* trunc(v) clamped to [0, hi]; NaN gives 0. ggml converts without the
 * clamp, which is undefined for a value out of range; for every value its
 * rules can produce the result is the same. */
static int ql_trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* The element of largest magnitude, with its sign (the first of equals). */
static float ql_signed_max(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QL_BLOCK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void ql_min_max(const float *x, float *min, float *max) {
    *min = x[0];
    *max = x[0];
    for (int j = 1; j < QL_BLOCK; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

/* ggml's Q4_0 and Q5_0 rule, half = 8 or 16: d = max / -half (max the
 * signed element of largest magnitude, which lands on q = 0), q =
 * trunc(x / d + half + 0.5) up to 2 half - 1. Returns d unrounded. */
static float ql_quant_sym(uint8_t q[QL_BLOCK], const float *x, int half) {
    const float d = ql_signed_max(x) / (float)-half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    float t[QL_BLOCK];
    for (int j = 0; j < QL_BLOCK; j++)
        t[j] = x[j] * id;
    QL_BARRIER(t);
    for (int j = 0; j < QL_BLOCK; j++)
        q[j] = (uint8_t)ql_trunc_clamp(t[j] + ((float)half + 0.5f), 2 * half - 1);
    return d;
}

/* ggml's Q4_1 and Q5_1 rule, nmax = 15 or 31: d = (max - min) / nmax, m =
 * min, q = trunc((x - min) / d + 0.5) up to nmax. Returns d unrounded. */
static float ql_quant_asym(uint8_t q[QL_BLOCK], float *m, const float *x, int nmax) {
    float min, max;
    ql_min_max(x, &min, &max);
    const float d = (max - min) / (float)nmax;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    float t[QL_BLOCK];
    for (int j = 0; j < QL_BLOCK; j++)
        t[j] = (x[j] - min) * id;
    QL_BARRIER(t);
    for (int j = 0; j < QL_BLOCK; j++)
        q[j] = (uint8_t)ql_trunc_clamp(t[j] + 0.5f, nmax);
    *m = min;
    return d;
}

/* Low 4 bits of q into the nibble layout (see ql_nibbles). */
static void ql_pack_nibbles(uint8_t *qs, const uint8_t q[QL_BLOCK]) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
}

/* Fifth bits of q into the u32 at qh (see ql_fifth_bits). */
static void ql_pack_fifth_bits(uint8_t *qh, const uint8_t q[QL_BLOCK]) {
    uint32_t h = 0;
    for (int j = 0; j < QL_BLOCK; j++)
        h |= (uint32_t)((q[j] >> 4) & 1u) << j;
    memcpy(qh, &h, sizeof h);
}

static void quantize_q4_0(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)out + (size_t)b * 18, q[QL_BLOCK];
        ql_f16_store(blk, ql_quant_sym(q, x + (size_t)b * QL_BLOCK, 8));
        ql_pack_nibbles(blk + 2, q);
    }
}

static void quantize_q4_1(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)out + (size_t)b * 20, q[QL_BLOCK];
        float m;
        ql_f16_store(blk, ql_quant_asym(q, &m, x + (size_t)b * QL_BLOCK, 15));
        ql_f16_store(blk + 2, m);
        ql_pack_nibbles(blk + 4, q);
    }
}

static void quantize_q5_0(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)out + (size_t)b * 22, q[QL_BLOCK];
        ql_f16_store(blk, ql_quant_sym(q, x + (size_t)b * QL_BLOCK, 16));
        ql_pack_fifth_bits(blk + 2, q);
        ql_pack_nibbles(blk + 6, q);
    }
}

static void quantize_q5_1(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)out + (size_t)b * 24, q[QL_BLOCK];
        float m;
        ql_f16_store(blk, ql_quant_asym(q, &m, x + (size_t)b * QL_BLOCK, 31));
        ql_f16_store(blk + 2, m);
        ql_pack_fifth_bits(blk + 4, q);
        ql_pack_nibbles(blk + 8, q);
    }
}

/* ops.c writes Q8_0 by ggml's rule already (d = max|x| / 127, q =
 * roundf(x / d)); one writer keeps the two paths' bytes equal. */
static void quantize_q8_0(void *out, const float *x, int64_t nb) {
    ops_quantize_q8_0(out, x, nb * QL_BLOCK);
}

/* The index of the table value nearest t (ties and NaN: the lower). The
 * midpoints of neighbouring values are exact in float. */
static int iq4nl_nearest(float t) {
    int k = 0;
    while (k < 15 && t > 0.5f * (float)(QUANT_IQ4NL_VALUES[k] + QUANT_IQ4NL_VALUES[k + 1]))
        k++;
    return k;
}

/* The least-squares scale of x over the table, searched as ggml does
 * without importance weights: the element of largest magnitude is tried on
 * the table's long end at 15 scales around -127 (the table runs -127..113),
 * each assignment gets its least-squares scale sum(v x) / sum(v v), and
 * the one that explains most of x (largest sum(v x)^2 / sum(v v)) wins.
 * The sums are in double over exact products (|v| < 2^7), so fusing them
 * or not gives the same scale. 0 for a block of zeros. */
static float iq4nl_scale(const float *x) {
    const float max = ql_signed_max(x);
    double best = 0.0;
    float d = 0.0f;
    if (max == 0.0f) return 0.0f;
    for (int itry = -7; itry <= 7; itry++) {
        const float id = (float)(itry + QUANT_IQ4NL_VALUES[0]) / max;
        double sqx = 0.0, sq2 = 0.0;
        for (int j = 0; j < QL_BLOCK; j++) {
            const double v = QUANT_IQ4NL_VALUES[iq4nl_nearest(x[j] * id)];
            sqx += v * (double)x[j];
            sq2 += v * v;
        }
        if (sq2 > 0.0 && sqx * sqx / sq2 > best) {
            best = sqx * sqx / sq2;
            d = (float)(sqx / sq2);
        }
    }
    return d;
}

/* Indices are chosen with the stored (f16) scale, so each weight is the
 * nearest the block can hold. */
static void quantize_iq4_nl(void *out, const float *x, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = (uint8_t *)out + (size_t)b * 18, q[QL_BLOCK];
        const float *xb = x + (size_t)b * QL_BLOCK;
        ql_f16_store(blk, iq4nl_scale(xb));
        const float d = quant_f16_at(blk);
        const float id = d != 0.0f && isfinite(d) ? 1.0f / d : 0.0f;
        for (int j = 0; j < QL_BLOCK; j++)
            q[j] = (uint8_t)iq4nl_nearest(xb[j] * id);
        ql_pack_nibbles(blk + 2, q);
    }
}

/* ------------------------------------------------------------------------- */
/* Scalar dot products                                                       */
/* ------------------------------------------------------------------------- */

/* Up to QUANT_MAX_C activation rows: each block is unpacked once, then its
 * integer dot with every row is exact and scaled like ggml's
 * vec_dot_*_q8_0: acc += (dw dx) isum (+ (m dx) sx). */
static QL_INLINE void ql_dot_group(const int kind, float *y, int64_t ldy, const uint8_t *w, int64_t nb,
                                   const quant_acts *xa, int c0, int C) {
    const size_t n = (size_t)xa->n, ns = (size_t)(xa->n / QL_BLOCK);
    float acc[QUANT_MAX_C] = {0};
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[QL_BLOCK];
        float dw, mw;
        ql_unpack(kind, w + (size_t)b * ql_bytes(kind), q, &dw, &mw);
        for (int c = 0; c < C; c++) {
            const size_t row = (size_t)(c0 + c);
            const int8_t *xq = xa->q + row * n + (size_t)b * QL_BLOCK;
            const float dx = xa->d[row * ns + (size_t)b];
            int32_t isum = 0;
            for (int j = 0; j < QL_BLOCK; j++)
                isum += q[j] * xq[j];
            acc[c] += dw * dx * (float)isum;
            if (ql_has_min(kind))
                acc[c] += mw * dx * (float)xa->s[row * ns + (size_t)b];
        }
    }
    for (int c = 0; c < C; c++)
        y[(size_t)(c0 + c) * (size_t)ldy] = acc[c];
}

/* Any C >= 1, in groups of QUANT_MAX_C (the contract asks no more). */
static QL_INLINE void ql_dot_scalar(const int kind, float *y, int64_t ldy, const void *w, int64_t nb,
                                    const quant_acts *xa, int C) {
    for (int c0 = 0; c0 < C; c0 += QUANT_MAX_C)
        ql_dot_group(kind, y, ldy, w, nb, xa, c0, C - c0 < QUANT_MAX_C ? C - c0 : QUANT_MAX_C);
}

static void dot_q4_0_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_Q4_0, y, ldy, w, nb, xa, C);
}
static void dot_q4_1_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_Q4_1, y, ldy, w, nb, xa, C);
}
static void dot_q5_0_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_Q5_0, y, ldy, w, nb, xa, C);
}
static void dot_q5_1_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_Q5_1, y, ldy, w, nb, xa, C);
}
static void dot_q8_0_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_Q8_0, y, ldy, w, nb, xa, C);
}
static void dot_iq4_nl_scalar_row(float *y, int64_t ldy, const void *w, int64_t nb, const quant_acts *xa, int C) {
    ql_dot_scalar(QL_IQ4_NL, y, ldy, w, nb, xa, C);
}
QUANT_DOT_ROWS(dot_q4_0_scalar, dot_q4_0_scalar_row)
QUANT_DOT_ROWS(dot_q4_1_scalar, dot_q4_1_scalar_row)
QUANT_DOT_ROWS(dot_q5_0_scalar, dot_q5_0_scalar_row)
QUANT_DOT_ROWS(dot_q5_1_scalar, dot_q5_1_scalar_row)
QUANT_DOT_ROWS(dot_q8_0_scalar, dot_q8_0_scalar_row)
QUANT_DOT_ROWS(dot_iq4_nl_scalar, dot_iq4_nl_scalar_row)

/* ------------------------------------------------------------------------- */
/* AVX2 dot products                                                         */
/* ------------------------------------------------------------------------- */

#ifdef QL_HAVE_AVX2

/* The AVX2 kernels work through a row 8 blocks at a time, in two passes.
 * First the 8 blocks' scales: one vector of 8 dw, and per activation row
 * one multiply gives the 8 products dw dx, kept on the stack for the
 * FMAs to broadcast from memory, and one FMA adds the 8 blocks' offset
 * terms (below). Then per block the integer dot with every row: maddubs,
 * madd, convert and one FMA. Unpacking a block is shared by the C rows;
 * per row and block only those four remain. (Measured on the Zen 4 build
 * VM, 1 thread, 768x768 hot, noisy: Q4_0 about 16-26 GMAC/s at C = 1 and
 * 30-44 at C = 4; the integer steps per row, not the unpacking, now bound
 * C = 4.)
 *
 * Q4_0 and Q5_0 are read unsigned, q = nibble (| fifth bit) with w = d (q
 * - o), o = 8 or 16: maddubs multiplies q (0..31) by x with no sign step,
 * and sum_j (q_j - o) x_j = isum - o sx, so the offset comes in through
 * the activations' sums as -o dw dx sx per block. The types with a min
 * take + m dx sx the same way. Q8_0 and IQ4_NL are signed: maddubs(|w|,
 * x given w's sign) multiplies w x in int16 pairs (|w| <= 128 for Q8_0's
 * -128, |x| <= 127, at most 2 * 128 * 127 < 2^15; unsigned, at most
 * 2 * 31 * 128). */

/* Whether a kind's weights are read unsigned with an offset or min term. */
static QL_INLINE int ql_unsigned(const int kind) {
    return kind != QL_Q8_0 && kind != QL_IQ4_NL;
}

/* The nibbles of 16 bytes as 32 bytes in element order: the 16 bytes in
 * both halves, the high half shifted down 4, both masked. */
QL_AVX2 static QL_INLINE __m256i ql_nibbles8(const uint8_t *qs) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i sh = _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(sh, _mm256_set1_epi8(0x0F));
}

/* The VNNI kernels' nibbles: the 16 bytes in both halves, the low half
 * keeping the low nibbles and the high half the high ones in place, 16
 * times their value. vpdpbusd multiplies a byte up to 240 with no int16
 * step to saturate, and the shift ql_nibbles8 spends is saved: the high
 * half's lanes then accumulate 16 times their sums, exactly (a power of
 * two through every product and rounding), and ql_dot8_c divides them
 * once at the end. Only Q4_0 and Q4_1: a fifth bit would not fit above
 * the nibble, and IQ4_NL's table lookup needs the index in the low bits. */
QL_AVX2 static QL_INLINE __m256i ql_nibbles16(const uint8_t *qs) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(b, _mm256_setr_epi8(15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
                                                -16, -16, -16, -16, -16, -16, -16, -16, -16, -16, -16, -16, -16,
                                                -16, -16, -16));
}

/* Whether the kernel's quants for kind are ql_nibbles16's. */
static QL_INLINE int ql_times16(const int kind, const int vnni) {
    return vnni && (kind == QL_Q4_0 || kind == QL_Q4_1);
}

/* 0x10 in byte j where bit j of the u32 at qh is set: byte j takes byte
 * j / 8 of qh (a shuffle within each 128-bit half of the broadcast) and
 * is tested against bit j % 8. */
QL_AVX2 static QL_INLINE __m256i ql_fifth8(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* One block's quants: unsigned q (0..31; ql_nibbles16's for Q4_0 and
 * Q4_1 in the VNNI kernels), or the signed w in *s with its magnitudes
 * returned. */
QL_AVX2 static QL_INLINE __m256i ql_unpack8(const int kind, const int vnni, const uint8_t *blk, __m256i *s) {
    switch (kind) {
    case QL_Q4_0: return ql_times16(kind, vnni) ? ql_nibbles16(blk + 2) : ql_nibbles8(blk + 2);
    case QL_Q4_1: return ql_times16(kind, vnni) ? ql_nibbles16(blk + 4) : ql_nibbles8(blk + 4);
    case QL_Q5_0: return _mm256_or_si256(ql_nibbles8(blk + 6), ql_fifth8(blk + 2));
    case QL_Q5_1: return _mm256_or_si256(ql_nibbles8(blk + 8), ql_fifth8(blk + 4));
    case QL_Q8_0: *s = _mm256_loadu_si256((const __m256i *)(blk + 2)); break;
    default: { /* QL_IQ4_NL: the table looked up by the nibbles */
        const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)QUANT_IQ4NL_VALUES));
        *s = _mm256_shuffle_epi8(tab, ql_nibbles8(blk + 2));
        break;
    }
    }
    return _mm256_sign_epi8(*s, *s);
}

/* The kg (1..8) blocks from g as 8 floats: their scales d, and their mins
 * in *m for the kinds with one; zeros past kg. */
static QL_INLINE int ql_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

QL_AVX2 static QL_INLINE __m256 ql_scales8(const int kind, const uint8_t *g, int kg, __m256 *m) {
    if (kg == 8) {
        const size_t bb = ql_bytes(kind);
        __m128i h = _mm_cvtsi32_si128(ql_u16(g)), hm = _mm_cvtsi32_si128(ql_u16(g + 2));
#define QL_INS(k)                                                                              \
        h = _mm_insert_epi16(h, ql_u16(g + (k) * bb), k);                                      \
        if (ql_has_min(kind)) hm = _mm_insert_epi16(hm, ql_u16(g + (k) * bb + 2), k);
        QL_INS(1) QL_INS(2) QL_INS(3) QL_INS(4) QL_INS(5) QL_INS(6) QL_INS(7)
#undef QL_INS
        if (ql_has_min(kind)) *m = _mm256_cvtph_ps(hm);
        return _mm256_cvtph_ps(h);
    }
    uint16_t hd[8] = {0}, hm[8] = {0};
    for (int k = 0; k < kg; k++) {
        memcpy(&hd[k], g + (size_t)k * ql_bytes(kind), 2);
        if (ql_has_min(kind)) memcpy(&hm[k], g + (size_t)k * ql_bytes(kind) + 2, 2);
    }
    if (ql_has_min(kind)) *m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hm));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
}

/* Block k of a group against the C rows (xq at the block's quants of row
 * 0, sc the group's dw dx), into acc. vnni: 0 for the AVX2 kernels
 * (maddubs, then madd into int32), else QUANT_VNNI_* (one vpdpbusd). */
QL_AVX2 static QL_INLINE void ql_block8(const int kind, const int vnni, __m256 *acc, const uint8_t *blk,
                                        const int8_t *xq, size_t n, const float (*sc)[8], int k, const int C) {
    __m256i s = _mm256_setzero_si256();
    const __m256i a = ql_unpack8(kind, vnni, blk, &s);
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)c * n));
        if (!ql_unsigned(kind)) xv = _mm256_sign_epi8(xv, s);
        const __m256i i32 = vnni ? quant_dpbusd(vnni, _mm256_setzero_si256(), a, xv)
                                 : _mm256_madd_epi16(_mm256_maddubs_epi16(a, xv), ones);
        acc[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c][k]), _mm256_cvtepi32_ps(i32), acc[c]);
    }
}

/* 8 floats of row c's scales (or sums, as floats) from block b on, zeros
 * past kg: a short group must not read past the row. */
QL_AVX2 static QL_INLINE __m256 ql_load_dx8(const float *p, int kg) {
    if (kg == 8) return _mm256_loadu_ps(p);
    float t[8] = {0};
    memcpy(t, p, (size_t)kg * sizeof *t);
    return _mm256_loadu_ps(t);
}

QL_AVX2 static QL_INLINE __m256 ql_load_sx8(const int16_t *p, int kg) {
    int16_t t[8] = {0};
    if (kg == 8) memcpy(t, p, sizeof t);
    else memcpy(t, p, (size_t)kg * sizeof *t);
    return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)t)));
}

/* The blocks past the last whole group of 8 (a row of 9 blocks, as 288
 * wide, has one), one at a time with scalar scales: gathering a short
 * group's scales through memory (ql_scales8's kg < 8 path) stalled on
 * store forwarding and made such rows 3x slower. offs: row c's offset
 * term, apart from the groups' vector one. */
QL_AVX2 static QL_INLINE void ql_tail(const int kind, const int vnni, __m256 *acc, float *offs, const uint8_t *blk,
                                      int64_t b, const quant_acts *xa, const int C) {
    const size_t n = (size_t)xa->n, ns = n / QL_BLOCK;
    const float dw = quant_f16_at(blk), mw = ql_has_min(kind) ? quant_f16_at(blk + 2) : 0.0f;
    float sc[QUANT_MAX_C][8];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const float dx = xa->d[(size_t)c * ns + (size_t)b];
        sc[c][0] = dw * dx;
        if (ql_unsigned(kind))
            offs[c] += (ql_has_min(kind) ? mw * dx : sc[c][0]) * (float)xa->s[(size_t)c * ns + (size_t)b];
    }
    ql_block8(kind, vnni, acc, blk, xa->q + (size_t)b * QL_BLOCK, n, (const float(*)[8])sc, 0, C);
}

/* Sets of accumulators a row's blocks go round (ql_dot8_c): even and odd
 * blocks, so one row's FMAs are two independent chains (at C = 1 a single
 * chain would wait on the FMA latency every block; four chains measured
 * no faster at C = 1, and 6-12% slower at C = 4). */
#define QL_CHAINS 2

/* C (1..QUANT_MAX_C, a constant after inlining) rows. Block k of a group
 * goes to accumulator set k % QL_CHAINS. Every choice here depends on b,
 * never on C or on c. */
QL_AVX2 static QL_INLINE void ql_dot8_c(const int kind, const int vnni, float *y, int64_t ldy, const uint8_t *w,
                                        int64_t nb, const quant_acts *xa, const int C) {
    const size_t bb = ql_bytes(kind), n = (size_t)xa->n, ns = n / QL_BLOCK;
    __m256 acc[QL_CHAINS][QUANT_MAX_C], off[QUANT_MAX_C];
    float offs[QUANT_MAX_C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        for (int i = 0; i < QL_CHAINS; i++)
            acc[i][c] = _mm256_setzero_ps();
        off[c] = _mm256_setzero_ps();
        offs[c] = 0.0f;
    }
    const int64_t whole = nb / 8 * 8;
    for (int64_t b = whole; b < nb; b++)
        ql_tail(kind, vnni, acc[(b - whole) % QL_CHAINS], offs, w + (size_t)b * bb, b, xa, C);
    for (int64_t b0 = 0; b0 < whole; b0 += 8) {
        const int kg = 8;
        const uint8_t *g = w + (size_t)b0 * bb;
        for (size_t o = 0; o < 8 * bb; o += 64)
            _mm_prefetch((const char *)g + QUANT_PREFETCH + o, _MM_HINT_T0);
        __m256 mw = _mm256_setzero_ps();
        const __m256 dw = ql_scales8(kind, g, kg, &mw);
        float sc[QUANT_MAX_C][8] __attribute__((aligned(32)));
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256 dx = ql_load_dx8(xa->d + (size_t)c * ns + (size_t)b0, kg);
            const __m256 s = _mm256_mul_ps(dw, dx);
            _mm256_store_ps(sc[c], s);
            if (ql_unsigned(kind)) {
                const __m256 sx = ql_load_sx8(xa->s + (size_t)c * ns + (size_t)b0, kg);
                off[c] = _mm256_fmadd_ps(ql_has_min(kind) ? _mm256_mul_ps(mw, dx) : s, sx, off[c]);
            }
        }
        const int8_t *xq = xa->q + (size_t)b0 * QL_BLOCK;
#define QL_BLOCK8(k) \
    ql_block8(kind, vnni, acc[(k) % QL_CHAINS], g + (size_t)(k) * bb, xq + (size_t)(k) * QL_BLOCK, n, sc_, k, C)
        const float(*sc_)[8] = (const float(*)[8])sc;
        /* The same blocks in the same order either way. Unrolled only at
         * C = 1, where the rolled loop kept the accumulators on the stack
         * (a store a block, seen in the VNNI kernels' code); unrolled at
         * C = 4 measured 4-7% slower. */
        if (C == 1) {
#pragma GCC unroll 8
            for (int k = 0; k < kg; k++) QL_BLOCK8(k);
        } else {
            for (int k = 0; k < kg; k += QL_CHAINS) {
                QL_BLOCK8(k);
                QL_BLOCK8(k + 1);
            }
        }
#undef QL_BLOCK8
    }
    /* The offset's factor, exact: -8, -16 (Q4_0, Q5_0) or +1 (a min). */
    const float of = kind == QL_Q4_0 ? -8.0f : kind == QL_Q5_0 ? -16.0f : 1.0f;
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        __m256 a = _mm256_add_ps(acc[0][c], acc[1][c]);
        if (ql_times16(kind, vnni))
            a = _mm256_mul_ps(a, _mm256_setr_ps(1, 1, 1, 1, 1.0f / 16, 1.0f / 16, 1.0f / 16, 1.0f / 16));
        float s = quant_hsum8(a);
        if (ql_unsigned(kind)) s += of * (quant_hsum8(off[c]) + offs[c]);
        y[(size_t)c * (size_t)ldy] = s;
    }
}

/* Any C >= 1 in groups of QUANT_MAX_C; each group is a view of the
 * activations starting at its first row (sums included: quant.h's kernels
 * all read them). */
QL_AVX2 static QL_INLINE void ql_dot8(const int kind, const int vnni, float *y, int64_t ldy, const void *w, size_t rb,
                                      int R, int64_t nb, const quant_acts *xa, int C) {
    for (int c0 = 0; c0 < C; c0 += QUANT_MAX_C) {
        const size_t ns = (size_t)(xa->n / QL_BLOCK);
        const quant_acts g = {xa->q + (size_t)c0 * (size_t)xa->n, xa->d + (size_t)c0 * ns,
                              xa->s ? xa->s + (size_t)c0 * ns : NULL, xa->n};
        float *yg = y + (size_t)c0 * (size_t)ldy;
#define QL_ROWS(C_) \
    for (int r = 0; r < R; r++) ql_dot8_c(kind, vnni, yg + r, ldy, (const uint8_t *)w + (size_t)r * rb, nb, &g, C_)
        switch (C - c0) {
        case 1: QL_ROWS(1); break;
        case 2: QL_ROWS(2); break;
        case 3: QL_ROWS(3); break;
        default: QL_ROWS(4); break;
        }
#undef QL_ROWS
    }
}

/* A kind's three x86 kernels: AVX2, and the two encodings of VNNI. */
#define QL_KERNELS(name, kind)                                                                                   \
    QL_AVX2 static void dot_##name##_avx2(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb,     \
                                          const quant_acts *xa, int C) {                                          \
        ql_dot8(kind, 0, y, ldy, w, rb, R, nb, xa, C);                                                            \
    }                                                                                                             \
    QL_AVX2 static void dot_##name##_vex(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb,      \
                                         const quant_acts *xa, int C) {                                           \
        ql_dot8(kind, QUANT_VNNI_VEX, y, ldy, w, rb, R, nb, xa, C);                                               \
    }                                                                                                             \
    QL_AVX2 static void dot_##name##_evex(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb,     \
                                          const quant_acts *xa, int C) {                                          \
        ql_dot8(kind, QUANT_VNNI_EVEX, y, ldy, w, rb, R, nb, xa, C);                                              \
    }
QL_KERNELS(q4_0, QL_Q4_0)
QL_KERNELS(q4_1, QL_Q4_1)
QL_KERNELS(q5_0, QL_Q5_0)
QL_KERNELS(q5_1, QL_Q5_1)
QL_KERNELS(q8_0, QL_Q8_0)
QL_KERNELS(iq4_nl, QL_IQ4_NL)
#undef QL_KERNELS
#define QL_X86(name) dot_##name##_avx2, {dot_##name##_vex, dot_##name##_evex}
#else
#define QL_X86(name) NULL, {NULL, NULL}
#endif

/* ------------------------------------------------------------------------- */
/* The table quant.c reads                                                   */
/* ------------------------------------------------------------------------- */

const quant_kind quant_legacy_kinds[] = {
    {GGUF_TT_Q4_0, dequant_q4_0, quantize_q4_0, dot_q4_0_scalar, QL_X86(q4_0)},
    {GGUF_TT_Q4_1, dequant_q4_1, quantize_q4_1, dot_q4_1_scalar, QL_X86(q4_1)},
    {GGUF_TT_Q5_0, dequant_q5_0, quantize_q5_0, dot_q5_0_scalar, QL_X86(q5_0)},
    {GGUF_TT_Q5_1, dequant_q5_1, quantize_q5_1, dot_q5_1_scalar, QL_X86(q5_1)},
    {GGUF_TT_Q8_0, dequant_q8_0, quantize_q8_0, dot_q8_0_scalar, QL_X86(q8_0)},
    {GGUF_TT_IQ4_NL, dequant_iq4_nl, quantize_iq4_nl, dot_iq4_nl_scalar, QL_X86(iq4_nl)},
};
const int quant_legacy_n = (int)(sizeof quant_legacy_kinds / sizeof quant_legacy_kinds[0]);
