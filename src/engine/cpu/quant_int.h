/*
 * quant_int.h - what quant.c reads from the two files of block formats:
 * quant_legacy.c (the 32-element types) and quant_k.c (the 256-element
 * K-quants and IQ4_XS). Each lists its types in one table.
 */
#ifndef TS_QUANT_INT_H
#define TS_QUANT_INT_H

#include "quant.h"

#define QUANT_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__)
#include <immintrin.h>
/* The AVX2 kernels are compiled for AVX2+FMA+F16C whatever -march says;
 * quant.c hands them out only on a CPU that has all three. */
#define QUANT_AVX2 __attribute__((target("avx2,fma,f16c")))

/* The sum of v's 8 lanes. */
QUANT_AVX2 static QUANT_INLINE float quant_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

typedef struct quant_kind {
    uint32_t type;                  /* GGUF_TT_*; its activation format follows
                                     * from its block (quant_act_format) */
    /* out (nb * block floats) from nb blocks at w */
    void (*dequant)(float *out, const void *w, int64_t nb);
    /* nb blocks into out from x (nb * block floats) */
    void (*quantize)(void *out, const float *x, int64_t nb);
    quant_dot_fn *dot_scalar;
    quant_dot_fn *dot_avx2;         /* NULL in a build without x86-64 */
    /* [QUANT_VNNI_* - 1]: AVX2 kernels whose integer dot is vpdpbusd;
     * NULL for the K-quants, whose madd multiplies by sub-block scales
     * that vpdpbusd cannot take */
    quant_dot_fn *dot_vnni[2];
} quant_kind;


/* A quant_dot_fn over R rows from a kernel of one row (same arguments
 * without rb and R): the scalar kernels, where the set-up is not what
 * costs. */
#define QUANT_DOT_ROWS(name, row_fn)                                                                   \
    static void name(float *y, int64_t ldy, const void *w, size_t rb, int R, int64_t nb,               \
                     const quant_acts *xa, int C) {                                                   \
        for (int r_ = 0; r_ < R; r_++)                                                                \
            row_fn(y + r_, ldy, (const uint8_t *)w + (size_t)r_ * rb, nb, xa, C);                     \
    }

/* Bytes ahead of the weight stream the AVX2 kernels prefetch, as ops.c's
 * OPS_PREFETCH: unpacking costs them enough time per byte that the
 * hardware prefetcher alone leaves them stalling on cold weights. */
#define QUANT_PREFETCH 4096

extern const quant_kind quant_legacy_kinds[];
extern const int quant_legacy_n;
extern const quant_kind quant_k_kinds[];
extern const int quant_k_n;

/* The f16 at p (any alignment) as a float: every block's scales. */
float quant_f16_at(const void *p);

#endif
