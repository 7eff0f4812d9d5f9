/*
 * quant.h - GGUF's quantized weight formats: their block layouts, turning
 * blocks into floats and floats into blocks, and the integer dot products
 * the matmul kernels (ops.c) run over them.
 *
 * Layouts, as ggml defines them (all little-endian, f16 = IEEE half):
 *   Q4_0   32 el, 18 B: f16 d; qs[16]: element j in the low nibble of
 *          qs[j], j + 16 in the high one;           w = d (q - 8)
 *   Q4_1   32 el, 20 B: f16 d, f16 m; qs[16] as Q4_0; w = d q + m
 *   Q5_0   32 el, 22 B: f16 d; u32 qh (bit j: fifth bit of element j);
 *          qs[16] as Q4_0;                          w = d (q - 16)
 *   Q5_1   32 el, 24 B: f16 d, f16 m; qh; qs[16];  w = d q + m
 *   Q8_0   32 el, 34 B: f16 d; int8 qs[32];         w = d q
 *   IQ4_NL 32 el, 18 B: f16 d; qs[16] as Q4_0, each nibble an index into
 *          QUANT_IQ4NL_VALUES;                      w = d values[q]
 *   Q2_K  256 el, 84 B: u8 scales[16] (low nibble scale, high nibble min
 *          of each 16); u8 qs[64] (2-bit); f16 d, f16 dmin;
 *                                                   w = d sc q - dmin m
 *   Q3_K  256 el, 110 B: u8 hmask[32] (third bit, set = no -4); u8 qs[64]
 *          (low 2 bits); u8 scales[12] (16 6-bit scales, minus 32); f16 d;
 *                                                   w = d (sc - 32) q3
 *   Q4_K  256 el, 144 B: f16 d, f16 dmin; u8 scales[12] (8 6-bit scales
 *          and 8 6-bit mins, one per 32); u8 qs[128];
 *                                                   w = d sc q - dmin m
 *   Q5_K  256 el, 176 B: as Q4_K plus u8 qh[32] (fifth bits) before qs
 *   Q6_K  256 el, 210 B: u8 ql[128] (low 4 bits); u8 qh[64] (high 2);
 *          int8 scales[16] (one per 16); f16 d;   w = d sc (q - 32)
 *   IQ4_XS 256 el, 136 B: f16 d; u16 scales_h; u8 scales_l[4]; qs[128];
 *          6-bit scales per 32 (minus 32) over QUANT_IQ4NL_VALUES
 * The exact bit placement of each (which element a nibble or a 2-bit field
 * holds, how 6-bit scales pack into 12 bytes) is ggml's, in quant.c and its
 * two kernel files, and checked against an independent NumPy reader
 * (tests/ref/quants.py).
 *
 * Activations. Where a weight type's dot product is integer, the matmul
 * quantizes its activations once per call, to one of two formats:
 *   QUANT_ACT_Q8_32: per 32 elements a float scale d (rounded through f16,
 *     as ggml's Q8_0 stores it) and int8 q = round(x / d), d = max|x| / 127,
 *     with the block's sum of q (the mins of Q4_1 and Q5_1, and the
 *     offsets of Q4_0 and Q5_0, whose kernels multiply unsigned quants);
 *     read by Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL;
 *   QUANT_ACT_Q8_K: per 256 a float scale (not rounded), the same rule,
 *     with the sum of q of each 16 (for the mins of Q2_K, Q4_K, Q5_K and
 *     the offsets of Q3_K and Q6_K); read by the K-quants and IQ4_XS.
 * Both give |q| <= 127, never -128: the kernels that multiply by a
 * weight's sign (Q8_0, IQ4_NL) rely on it. The dot products then sum
 * integer products over a block exactly and
 * apply the float scales per block, so their error against the float dot
 * of the dequantized weights is the activations' rounding alone.
 *
 * Kernels. quant_dot_fn multiplies one weight row by up to QUANT_MAX_C
 * activation rows, unpacking each weight block once for all of them, so a
 * batch of decodes reads and unpacks every weight once per QUANT_MAX_C
 * tokens. Each type has a scalar kernel (the reference, and what a CPU
 * without AVX2 runs), an AVX2+FMA one and for the 32-element types VNNI
 * ones; quant_dot picks by the CPU at run time, so one binary runs
 * everywhere.
 */
#ifndef TS_QUANT_H
#define TS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define QUANT_K 256             /* elements per K-quant super-block */
#define QUANT_MAX_C 4           /* activation rows per kernel call */

/* The activation format a weight type's dot product reads. */
enum {
    QUANT_ACT_NONE = 0,         /* float types: ops.c multiplies in float */
    QUANT_ACT_Q8_32 = 1,        /* d per 32 (f16-rounded), sums per 32 */
    QUANT_ACT_Q8_K = 2,         /* d per 256, sums per 16 */
};

/* The 16 values an IQ4_NL / IQ4_XS index selects (ggml's kvalues_iq4nl). */
extern const int8_t QUANT_IQ4NL_VALUES[16];

/* QUANT_ACT_* of a GGUF_TT_* type; QUANT_ACT_NONE for the float types and
 * for a type tessera does not execute. */
int quant_act_format(uint32_t type);
/* Elements per scale (32 or 256) and per sum (32 or 16) of an act format. */
int quant_act_dblock(int act);
int quant_act_sblock(int act);

/* T activation rows quantized: row t's quants at q + t n, its scales at
 * d + t n / dblock, its sums at s + t n / sblock. */
typedef struct quant_acts {
    const int8_t *q;            /* (T, n) */
    const float *d;             /* (T, n / dblock) */
    const int16_t *s;           /* (T, n / sblock) */
    int64_t n;                  /* elements per row, a multiple of dblock */
} quant_acts;

/* Quantize one row x (n, a multiple of the format's dblock) into q, d and
 * s (s may be NULL when no reader needs the sums: ops.c's own Q8_0
 * kernels; every quant_dot_fn reads them). The same bytes on every
 * CPU: the AVX2 path rounds halves away from zero as roundf does. */
void quant_act_row(int act, int8_t *q, float *d, int16_t *s, const float *x, int64_t n);

/* y[c * ldy + r] = dot(weight row r, activation row c of xa) for r < R,
 * c < C, 1 <= C <= QUANT_MAX_C: R weight rows of nb blocks each (nb *
 * block = xa->n), rb bytes apart from w. The rows are one call so the
 * kernel's set-up (activation pointers, the constant C's branch) is paid
 * once per run of rows, not per row: at 768-element rows it cost a third
 * of the time. */
typedef void quant_dot_fn(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb, const quant_acts *xa,
                          int C);

/* The instruction sets a type's kernels come in. The VNNI kernels are the
 * AVX2 ones with vpdpbusd in place of maddubs and madd (the 32-element
 * types) or vpdpwssd in place of madd and add (Q4_K, Q5_K), in AVX-VNNI's
 * VEX encoding or AVX512-VNNI's EVEX one: a CPU may have either alone.
 * Their sums are the same integers, so they give the AVX2 kernels'
 * results bit for bit. */
enum { QUANT_ISA_SCALAR, QUANT_ISA_AVX2, QUANT_ISA_AVXVNNI, QUANT_ISA_AVX512VNNI, QUANT_ISA_N };

/* The kernel ops.c runs for a type: the first of AVX-VNNI, AVX512-VNNI
 * and AVX2 (+FMA+F16C) that this CPU and the type have, the scalar one
 * otherwise; NULL for a type with no integer kernel (the float types). */
quant_dot_fn *quant_dot(uint32_t type);
/* A type's kernel for one QUANT_ISA_*, or NULL where the build, the CPU
 * or the type has none (tests and benchmarks hold each against the
 * scalar one). */
quant_dot_fn *quant_dot_isa(uint32_t type, int isa);

/* vpdpbusd's two encodings, and which one this CPU runs (the VEX one
 * where it has both), 0 for neither. */
enum { QUANT_VNNI_VEX = 1, QUANT_VNNI_EVEX = 2 };
int quant_vnni(void);

#if defined(__x86_64__)
#include <immintrin.h>
/* acc + in each int32 lane the sum of the 4 products of its bytes, u's
 * unsigned and s's signed, exact: vpdpbusd, in AVX-VNNI's VEX encoding
 * (vnni = QUANT_VNNI_VEX) or AVX512-VNNI's EVEX one (QUANT_VNNI_EVEX), the
 * same 256-bit operation; a CPU may have either alone. Written as asm so
 * the VNNI kernels share the AVX2 kernels' inline helpers: the compiler
 * is never allowed VNNI in a function, so none leaks into the AVX2 ones,
 * and callers take a VNNI path only where quant_vnni says so. "x" keeps
 * operands in ymm0-15, which the VEX form can name. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) __m256i
quant_dpbusd(const int vnni, __m256i acc, __m256i u, __m256i s) {
    if (vnni == QUANT_VNNI_VEX) __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "xm"(s));
    else __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "xm"(s));
    return acc;
}
/* acc + in each int32 lane the sum of the 2 products of its signed words
 * of a and b, wrapping as madd + add does: vpdpwssd, encoded as above. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) __m256i
quant_dpwssd(const int vnni, __m256i acc, __m256i a, __m256i b) {
    if (vnni == QUANT_VNNI_VEX) __asm__("%{vex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
    else __asm__("%{evex%} vpdpwssd %2, %1, %0" : "+x"(acc) : "x"(a), "xm"(b));
    return acc;
}
#endif
/* The scalar kernel of a type, whatever the CPU (tests hold the vector
 * kernels against it); NULL as above. */
quant_dot_fn *quant_dot_scalar(uint32_t type);
/* The AVX2 kernel of a type, or NULL where the build or the CPU has none. */
quant_dot_fn *quant_dot_avx2(uint32_t type);

/* Dequantize nb blocks of type at w into out (nb * block floats). Defined
 * for every quantized type (Q8_0 included); the float types are ops.c's. */
void quant_dequant(float *out, const void *w, uint32_t type, int64_t nb);

/* Quantize n floats (a whole number of the type's blocks) into out
 * (gguf_row_bytes(type, n) bytes): what mkmodel writes. Scales are chosen
 * from each block's range (K-quants: each sub-block's scale and min, then
 * the super-block's scale for them); a plain, deterministic rule, not
 * llama.cpp's search for the least error, so files tessera writes are a
 * little noisier than llama-quantize's. 0, or -1 for a type it cannot
 * write. */
int quant_quantize(void *out, const float *x, uint32_t type, int64_t n);

#endif
