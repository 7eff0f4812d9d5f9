/*
 * ops.c - the CPU kernels declared in ops.h.
 *
 * The file reads in five parts: number conversions (f16, bf16, Q8_0), the
 * small elementwise and attention kernels, the scratch arena, the matmul
 * kernels, and the matmul driver that shares their work among a team.
 * Decode (small T) is limited by how fast weights stream from memory, so
 * its kernels load each weight row once, convert it in registers and apply
 * it to every activation vector of the batch; at T = 1 each thread reads
 * four streams at once. A batch of decodes (T up to 16) is limited by
 * arithmetic on rows that sit in L1: register tiles sized to the FMA
 * latency for floats (for F32 from T = 13 on with the activations in the
 * lanes and the weights broadcast, which needs fewer loads per FMA), and
 * for Q8_0 a layout with weight rows in the lanes so int8 sums stay exact
 * in int32 over a block. Prefill of the float types
 * is limited by arithmetic that OpenBLAS sgemm does well, so those paths
 * only arrange the calls; Q8_0 keeps its int8 kernel at every T. Each
 * vector kernel has a scalar twin that is always compiled: a build without
 * AVX2 runs it, and the tests hold the vector kernels against it.
 */
#include "ops.h"
#include "gguf.h"
#include "quant.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define OPS_AVX2 1
#include <immintrin.h>
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* Work items of the decode path are multiples of this many rows. 16 floats
 * are one 64-byte line of y, so two threads never write the same line of an
 * aligned y. */
#define OPS_ROW_BLOCK 16
/* Weight rows dequantized per sgemm call in the prefill path. Each call
 * repacks the activations, so fewer, wider calls are cheaper: 256 measured
 * 3-5% faster than 128 (F16, T = 128). The price is n_in KiB of scratch per
 * thread. */
#define OPS_TILE_ROWS 256
/* Below this many multiply-adds a matmul runs on one thread, since waking
 * the pool costs more than it saves. */
#define OPS_PAR_MIN_MACS ((int64_t)1 << 15)
/* Activation rows up to which the float types stream rows instead of calling
 * sgemm. The streaming kernel (5 rows x 2 activations per tile) runs F16 at
 * T = 16 at ~45 GMAC/s a core hot, over 90% of the FMA peak, while sgemm at
 * such T must first dequantize every row (F16) and packs both operands:
 * measured on Zen 3 (768x768 hot, 2048x768 cold, 2 threads, best of 60)
 * streaming with a 4x2 tile was 20-35% faster at T = 12..16 for F16 and
 * F32 and about even at 24..32 (the 5x2 tile is faster still, see
 * rows_float), so a decode batch of 16 sequences streams and prefill calls
 * sgemm. */
#define OPS_SMALL_T_F32 16
#define OPS_SMALL_T_HALF 16
/* Activation rows from which F32 takes tile_f32_b (the activations in the
 * lanes, weights broadcast) instead of tile_float_s, up to 16: both hold
 * 16 lanes of activations, so below 13 too many of them are padding (2
 * threads, hot, best of 30 interleaved: T = 12 about even, 47-67 against
 * 49-64 GMAC/s; T = 16 58-88 against 48-66). */
#define OPS_BCAST_T 13
_Static_assert(OPS_SMALL_T_F32 <= 16, "tile_f32_b holds 16 activations");
/* Bytes ahead of each weight stream that the F16/BF16/Q8_0 kernels
 * prefetch (the Q8_0 regrouping's tiles fetch its next group instead:
 * rows_q8). Converting costs them enough time per
 * byte that the hardware prefetcher alone leaves the loads stalling
 * (measured on Zen 3, 1 thread, cold weights: Q8_0 8.6 -> 12 GB/s, F16
 * 12 -> 14.5 GB/s; 2048 to 16384 all about equal). F32 keeps the
 * prefetcher busy by itself, and explicit prefetches only cost it load
 * slots (measured slower). */
#define OPS_PREFETCH 4096
/* Streaming work items take 1 / (OPS_GUIDE * threads) of the rows a call
 * has left (items_next). */
#define OPS_GUIDE 4
/* Activation rows up to which every thread quantizes the Q8_0 activations
 * into its own buffer instead of sharing one copy behind a barrier. Below
 * OPS_Q8_TILED_T: the own buffers hold no regrouped form. */
#define OPS_Q8_OWN_T 4
/* Bytes of one group of 8 regrouped Q8_0 rows per block of 32 (q8_rows8):
 * 256 of quants and 8 float scales. */
#define Q8_GROUP_BYTES 288
/* Activation rows per tile of the Q8_0 kernel for larger T (tile_q8w): one
 * register of int32 sums per row. */
#define OPS_Q8_TT 4
/* Activation rows from which that kernel runs: below, regrouping the
 * weights costs more than it saves (1 thread, 768x768, best of 800:
 * T = 4 96 us streaming vs 109 tiled, T = 6 154 vs 144, T = 8 187 vs 154). */
#define OPS_Q8_TILED_T 6
_Static_assert(OPS_Q8_OWN_T < OPS_Q8_TILED_T, "own activation buffers are never regrouped");

/* ------------------------------------------------------------------------- */
/* Conversions                                                               */
/* ------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ops_f16_to_f32_ref(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f)  /* inf, or NaN made quiet as F16C does */
        return f32_from_bits(sign | 0x7f800000 | (man << 13) | (man ? 0x400000 : 0));
    if (exp != 0)     /* rebias 15 -> 127 */
        return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
    /* Zero or subnormal: man * 2^-24, exact in float. */
    return f32_from_bits(sign | f32_bits((float)man * 0x1p-24f));
}

uint16_t ops_f32_to_f16_ref(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000)  /* NaN: quiet, payload truncated, as F16C does */
        return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
    if (ax >= 0x477ff000) /* >= 65520, the midpoint above 65504: inf */
        return sign | 0x7c00;
    if (ax >= 0x38800000) { /* normal half: rebias, round at bit 13 */
        uint32_t r = ax - ((uint32_t)112 << 23);
        r += 0xfff + ((r >> 13) & 1);  /* a carry into the exponent is right */
        return sign | (uint16_t)(r >> 13);
    }
    if (ax <= 0x33000000) /* <= 2^-25, half of the smallest subnormal: 0 */
        return sign;
    /* Subnormal half: m = value * 2^24 = mant * 2^(e-126), rounded to even.
     * e is in [102, 112] here, so the shift is 14..24. */
    uint32_t e = ax >> 23, mant = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;
    uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1)))
        m++;  /* 0x400 is the smallest normal, encoded correctly */
    return sign | (uint16_t)m;
}

float ops_f16_to_f32(uint16_t h) {
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return ops_f16_to_f32_ref(h);
#endif
}

uint16_t ops_f32_to_f16(float f) {
#ifdef __F16C__
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return ops_f32_to_f16_ref(f);
#endif
}

float ops_bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}

/* As ggml: NaN stays NaN (quiet bit forced, since truncating a payload held
 * only in the low bits would make it inf); everything else rounds to even. */
uint16_t ops_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* ggml's Q8_0 rule, which the Q8_32 activation format shares: its scale
 * comes back rounded through f16, so storing it as f16 is exact. */
void ops_quantize_q8_0(void *out, const float *x, int64_t n) {
    uint8_t *o = out;
    for (int64_t b = 0; b < n / GGUF_Q8_0_BLOCK; b++) {
        uint8_t *blk = o + (size_t)b * GGUF_Q8_0_BYTES;
        float d;
        quant_act_row(QUANT_ACT_Q8_32, (int8_t *)(blk + 2), &d, NULL, x + (size_t)b * GGUF_Q8_0_BLOCK,
                      GGUF_Q8_0_BLOCK);
        uint16_t h = ops_f32_to_f16(d);
        memcpy(blk, &h, sizeof h);
    }
}

static float q8_scale(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, sizeof h);
    return ops_f16_to_f32(h);
}

/* Bytes of one weight row. */
static size_t row_bytes(const ops_mat *w) {
    return (size_t)gguf_row_bytes(w->type, (uint64_t)w->n_in);
}

/* Row r of w as floats, n = w->n_in. */
static void dequant_row(float *out, const ops_mat *w, int64_t r) {
    const int64_t n = w->n_in;
    int64_t i = 0;
    switch (w->type) {
    case GGUF_TT_F32:
        memcpy(out, (const float *)w->data + (size_t)r * n, (size_t)n * sizeof(float));
        break;
    case GGUF_TT_F16: {
        const uint16_t *h = (const uint16_t *)w->data + (size_t)r * n;
#ifdef OPS_AVX2
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
#endif
        for (; i < n; i++)
            out[i] = ops_f16_to_f32(h[i]);
        break;
    }
    case GGUF_TT_BF16: {
        const uint16_t *h = (const uint16_t *)w->data + (size_t)r * n;
#ifdef OPS_AVX2
        for (; i + 8 <= n; i += 8) {
            __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(v, 16));
        }
#endif
        for (; i < n; i++)
            out[i] = ops_bf16_to_f32(h[i]);
        break;
    }
    case GGUF_TT_Q8_0: {
        const int64_t nb = n / GGUF_Q8_0_BLOCK;
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * (size_t)nb * GGUF_Q8_0_BYTES;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * GGUF_Q8_0_BYTES;
            const float d = q8_scale(blk);
            const int8_t *q = (const int8_t *)(blk + 2);
            for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
                out[b * GGUF_Q8_0_BLOCK + j] = d * (float)q[j];
        }
        break;
    }
    default: {  /* model_load refuses a matrix ops_mat_supported rejects */
        const int block = gguf_type_block(w->type);
        if (block > 1)
            quant_dequant(out, (const uint8_t *)w->data + (size_t)r * row_bytes(w), w->type, n / block);
        else
            memset(out, 0, (size_t)n * sizeof(float));
    }
    }
}

void ops_dequant_row(float *out, const ops_mat *w, int64_t r) {
    dequant_row(out, w, r);
}

/* ------------------------------------------------------------------------- */
/* Elementwise kernels                                                       */
/* ------------------------------------------------------------------------- */

#ifdef OPS_AVX2
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane j of the result is the sum of the eight lanes of a[j]. */
static inline __m256 hsum8x8(const __m256 a[8]) {
    const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    /* per 128-bit half: partial sums of a0..a3, then of a4..a7 */
    const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* e^x for eight floats, Cephes' expf: x = n ln2 + r with |r| <= ln2/2,
 * e^r by a degree-7 polynomial, 2^n built in the exponent bits. Relative
 * error about 2 ulp over [-87.3, 88]; below -87.3 (where e^x leaves the
 * normal floats) the result is 0, so e^-inf = 0 as softmax's masked
 * entries need; above 88 it saturates near e^88 (callers only ever pass
 * x <= 0 or use the result where a huge value is as good as infinity). */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.0f);
    const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    const __m256i n = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
    return _mm256_and_ps(y, keep);
}
#endif

/* The attention kernels read a KV cache of f32 (half 0) or of f16 (half 1,
 * widened as loaded: F16C) through these, one inlined body for both; half
 * is a constant at each call site, so each version compiles on its own and
 * the f16 one sums exactly as the f32 one does over the widened values. */
static ALWAYS_INLINE float kv_elem(const void *v, size_t i, const int half) {
    return half ? ops_f16_to_f32(((const uint16_t *)v)[i]) : ((const float *)v)[i];
}

#ifdef OPS_AVX2
static ALWAYS_INLINE __m256 kv_load8(const void *v, size_t i, const int half) {
    return half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + i)))
                : _mm256_loadu_ps((const float *)v + i);
}
#endif

/* a . b[off ..), n elements of b f32 or f16. */
static ALWAYS_INLINE float kv_dot(const float *a, const void *b, size_t off, int n, const int half) {
    int i = 0;
    float s = 0.0f;
#ifdef OPS_AVX2
    /* Four accumulators hide the FMA latency. */
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), kv_load8(b, off + (size_t)(i + 8 * k), half),
                                     acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), kv_load8(b, off + (size_t)i, half), acc[0]);
    s = hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
    for (; i < n; i++)
        s += a[i] * kv_elem(b, off + (size_t)i, half);
    return s;
}

float ops_dot(const float *a, const float *b, int n) { return kv_dot(a, b, 0, n, 0); }

void ops_axpy(float *y, float a, const float *x, int n) {
    int i = 0;
#ifdef OPS_AVX2
    const __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < n; i++)
        y[i] += a * x[i];
}

void ops_add(float *y, const float *x, int n) {
    int i = 0;
#ifdef OPS_AVX2
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        y[i] += x[i];
}

void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    const float scale = 1.0f / sqrtf(ops_dot(x, x, n) / (float)n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

void ops_softmax(float *x, int n) {
    if (n <= 0)
        return;
    int i = 0;
    float max = x[0];
#ifdef OPS_AVX2
    if (n >= 8) {
        __m256 m = _mm256_loadu_ps(x);
        for (i = 8; i + 8 <= n; i += 8)
            m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        max = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    }
#endif
    for (; i < n; i++)
        max = fmaxf(max, x[i]);
    float sum = 0.0f;
    i = 0;
#ifdef OPS_AVX2
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 vsum = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    sum = hsum8(vsum);
#endif
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    i = 0;
#ifdef OPS_AVX2
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
#endif
    for (; i < n; i++)
        x[i] *= inv;
}

void ops_silu_mul(float *gate, const float *up, int n) {
    int i = 0;
#ifdef OPS_AVX2
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp8(_mm256_xor_ps(g, sign));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* z / (1 + e^(-2u)) with u = sqrt(2/pi) (z + 0.044715 z^3): since
 * (1 + tanh(u)) / 2 = 1 / (1 + e^(-2u)), this is gelu_tanh exactly, and it
 * shares silu's form, so the same exp serves. Where e^(-2u) overflows
 * (z below about -10) the result is z / inf = -0, as it should be. */
#define GELU_K2 1.5957691216057308f /* 2 sqrt(2/pi) */
void ops_gelu_tanh_mul(float *gate, const float *up, int n) {
    int i = 0;
#ifdef OPS_AVX2
    const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(-GELU_K2), c = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c, g), _mm256_mul_ps(g, g), g);
        const __m256 e = exp8(_mm256_mul_ps(k, inner));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-GELU_K2 * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void ops_rmsnorm_heads(float *x, const float *w, int n_heads, int hd, float eps) {
    for (int h = 0; h < n_heads; h++)
        ops_rmsnorm(x + (size_t)h * (size_t)hd, x + (size_t)h * (size_t)hd, w, hd, eps);
}

void ops_softcap(float *x, int n, float cap) {
    const float inv = 1.0f / cap;
    for (int i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] * inv);
}

/* Prefetch bytes [lo, hi) of pf, clipped to its pf_bytes, a line at a time. */
static ALWAYS_INLINE void pf_slice(const void *pf, size_t pf_bytes, size_t lo, size_t hi) {
    if (!pf) return;
    if (hi > pf_bytes) hi = pf_bytes;
    for (size_t o = lo; o < hi; o += 64)
        __builtin_prefetch((const char *)pf + o);
}

/* Scores of one query against n keys: 8 keys at a time, each with its own
 * accumulator (8 independent FMA chains), reduced together at the end; the
 * keys left over one at a time, as ops_dot sums. Each group of 8 first
 * prefetches its share of pf. */
static ALWAYS_INLINE void attn_scores(float *sc, const float *q, const void *k, int64_t ldk, int n, int hd,
                                      float scale, const void *pf, size_t pf_bytes, const int half) {
    int j = 0;
    const size_t share = pf ? (pf_bytes / (size_t)((n + 7) / 8) + 63) / 64 * 64 : 0;
    size_t done = 0;
#ifdef OPS_AVX2
    if (hd % 8 == 0) {
        const __m256 vs = _mm256_set1_ps(scale);
        for (; j + 8 <= n; j += 8, done += share) {
            pf_slice(pf, pf_bytes, done, done + share);
            const size_t kj = (size_t)j * (size_t)ldk;
            __m256 acc[8];
            for (int c = 0; c < 8; c++)
                acc[c] = _mm256_setzero_ps();
            for (int i = 0; i < hd; i += 8) {
                const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++)
                    acc[c] = _mm256_fmadd_ps(kv_load8(k, kj + (size_t)c * (size_t)ldk + (size_t)i, half), qv, acc[c]);
            }
            _mm256_storeu_ps(sc + j, _mm256_mul_ps(hsum8x8(acc), vs));
        }
    }
#endif
    pf_slice(pf, pf_bytes, done, pf_bytes);
    for (; j < n; j++)
        sc[j] = kv_dot(q, k, (size_t)j * (size_t)ldk, hd, half) * scale;
}

void ops_attn_scores(float *sc, const float *q, const float *k, int64_t ldk, int n, int hd, float scale,
                     const void *pf, size_t pf_bytes) {
    attn_scores(sc, q, k, ldk, n, hd, scale, pf, pf_bytes, 0);
}

void ops_attn_scores_f16(float *sc, const float *q, const uint16_t *k, int64_t ldk, int n, int hd, float scale,
                         const void *pf, size_t pf_bytes) {
    attn_scores(sc, q, k, ldk, n, hd, scale, pf, pf_bytes, 1);
}

#ifdef OPS_AVX2
/* out[0 .. 8 NV) += sum_j p[j] v_j[0 .. 8 NV): NV accumulators in registers
 * across all n rows, each row first prefetching its share (bytes) of pf.
 * NV is a constant at each call site. */
static ALWAYS_INLINE void mix_strip(float *out, const float *p, const void *v, int64_t ldv, int n, const void *pf,
                                    size_t pf_bytes, size_t share, const int NV, const int half) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < NV; c++)
        acc[c] = _mm256_loadu_ps(out + 8 * c);
    for (int j = 0; j < n; j++) {
        pf_slice(pf, pf_bytes, (size_t)j * share, (size_t)(j + 1) * share);
        const __m256 pj = _mm256_broadcast_ss(p + j);
        const size_t vj = (size_t)j * (size_t)ldv;
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++)
            acc[c] = _mm256_fmadd_ps(pj, kv_load8(v, vj + 8 * (size_t)c, half), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NV; c++)
        _mm256_storeu_ps(out + 8 * c, acc[c]);
}
#endif

/* v points at column 0 of the rows; the strips start at column i. The
 * first strip carries the prefetches of pf, spread over its rows. */
static ALWAYS_INLINE void attn_mix(float *out, const float *p, const void *v, int64_t ldv, int n, int hd,
                                   const void *pf, size_t pf_bytes, const int half) {
    int i = 0;
    const size_t share = pf && n > 0 ? (pf_bytes / (size_t)n + 63) / 64 * 64 : 0;
#ifdef OPS_AVX2
    /* Strips of up to 64 floats, each held in registers over all n rows. */
    const size_t esz = half ? sizeof(uint16_t) : sizeof(float);
    while (hd - i >= 8) {
        const int nv = (hd - i) / 8;
        const void *vi = (const char *)v + (size_t)i * esz;
        if (nv >= 8) { mix_strip(out + i, p, vi, ldv, n, pf, pf_bytes, share, 8, half); i += 64; }
        else if (nv >= 6) { mix_strip(out + i, p, vi, ldv, n, pf, pf_bytes, share, 6, half); i += 48; }
        else if (nv >= 4) { mix_strip(out + i, p, vi, ldv, n, pf, pf_bytes, share, 4, half); i += 32; }
        else if (nv >= 2) { mix_strip(out + i, p, vi, ldv, n, pf, pf_bytes, share, 2, half); i += 16; }
        else { mix_strip(out + i, p, vi, ldv, n, pf, pf_bytes, share, 1, half); i += 8; }
        pf = NULL;
    }
#endif
    pf_slice(pf, pf_bytes, 0, pf_bytes);
    for (; i < hd; i++) {
        float a = out[i];
        for (int j = 0; j < n; j++)
            a += p[j] * kv_elem(v, (size_t)j * (size_t)ldv + (size_t)i, half);
        out[i] = a;
    }
}

void ops_attn_mix(float *out, const float *p, const float *v, int64_t ldv, int n, int hd, const void *pf,
                  size_t pf_bytes) {
    attn_mix(out, p, v, ldv, n, hd, pf, pf_bytes, 0);
}

void ops_attn_mix_f16(float *out, const float *p, const uint16_t *v, int64_t ldv, int n, int hd, const void *pf,
                      size_t pf_bytes) {
    attn_mix(out, p, v, ldv, n, hd, pf, pf_bytes, 1);
}

void ops_f32_to_f16_row(uint16_t *out, const float *x, int n) {
    int i = 0;
#ifdef OPS_AVX2
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) out[i] = ops_f32_to_f16(x[i]);
}

/* ------------------------------------------------------------------------- */
/* Scratch                                                                   */
/* ------------------------------------------------------------------------- */

struct ops_scratch {
    int max_T;
    int64_t max_n_in;
    int n_threads;
    size_t bytes;           /* allocated by alloc64 */
    int8_t *xq;             /* (max_T, max_n_in) activation quants, Q8_0 path */
    float *xd;              /* (max_T, max_n_in / 32) activation scales, f16-rounded */
    int8_t *xt;             /* (max_T rounded up to 4, max_n_in): quants regrouped for tile_q8w */
    float *xdt;             /* (max_T rounded up to 4, max_n_in / 32): their scales, likewise */
    int8_t *xq_own;         /* (n_threads, OPS_Q8_OWN_T, max_n_in): each thread's own copy at small T */
    float *xd_own;          /* (n_threads, OPS_Q8_OWN_T, max_n_in / 32) */
    int16_t *xs;            /* (max_T, max_n_in / 16) activation sums (quant.h), other quantized types */
    int16_t *xs_own;        /* (n_threads, OPS_Q8_OWN_T, max_n_in / 16) */
    /* Each thread's own buffers, one slice per thread, every slice 64-byte
     * aligned. A call uses at most one of the three, but each has its own
     * memory: the three together are ~7% more than the largest alone. */
    float *wtile;           /* (n_threads, OPS_TILE_ROWS, max_n_in): F16/BF16 weight rows
                             * dequantized for sgemm */
    size_t wtile_floats;    /* floats per thread's slice, a multiple of 16 */
    uint8_t *q8rows;        /* (n_threads, Q8_GROUP_BYTES * max_n_in / 32): 8 Q8_0 weight rows
                             * regrouped for tile_q8w (q8_rows8) */
    size_t q8rows_bytes;    /* bytes per thread's slice, a multiple of 64 */
    float *xt_f32;          /* (n_threads, max_n_in, 16): the F32 activations transposed for
                             * tile_f32_b, each thread's own copy (cheaper than a barrier) */
    size_t xt_f32_floats;   /* floats per thread's slice, 16 max_n_in */
};

/* 64-byte aligned allocation; aligned_alloc wants a multiple of the alignment. */
static void *alloc64(ops_scratch *s, size_t bytes) {
    const size_t n = bytes ? (bytes + 63) / 64 * 64 : 64;
    s->bytes += n;
    return aligned_alloc(64, n);
}

/* Debian 12's OpenBLAS (0.3.21) picks its kernels from a table of CPU
 * models, and for a model newer than the table (this host's Xeon,
 * family 6 model 0xCF) falls back to its generic Prescott (SSE3) set:
 * sgemm 36-41 GFLOP/s on 2 cores where its AVX-512 set gives 200-274, and
 * float prefill 3-4x slower. Later releases fall back by the CPU's
 * features instead; ops_blas_env applies their rule (AVX512-BF16:
 * Cooperlake; AVX-512: SkylakeX; AVX2: Haswell; AVX: Sandybridge) when the
 * library chose Prescott and the user named no core (OPENBLAS_CORETYPE,
 * which stays in charge). The library reads its choice once, in its own
 * constructor, and its worker thread may still be starting and reading it
 * when a program's main runs (re-running its selection in place crashed 3
 * starts in about 60), so ops_blas_env sets OPENBLAS_CORETYPE for the program to
 * execute itself again with, and TESSERA_BLAS_FALLBACK naming what the
 * library had chosen (which also stops a second round). */
#define BLAS_FALLBACK_ENV "TESSERA_BLAS_FALLBACK"

static const char *blas_core_for_cpu(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512cd");
    if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
    if (avx512) return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
    return NULL;
}

int ops_blas_env(void) {
    if (getenv("OPENBLAS_CORETYPE") || getenv(BLAS_FALLBACK_ENV)) return 0;
    const char *chosen = openblas_get_corename(), *want = blas_core_for_cpu();
    if (!chosen || strcasecmp(chosen, "Prescott") != 0 || !want) return 0;
    if (setenv(BLAS_FALLBACK_ENV, chosen, 1) != 0) return 0;
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0) {
        unsetenv(BLAS_FALLBACK_ENV);
        return 0;
    }
    return 1;
}

const char *ops_blas_core(const char **fallback) {
    if (fallback) *fallback = getenv(BLAS_FALLBACK_ENV);
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

int ops_set_threads(int n) {
    if (n <= 0)
        n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(1);
    return n;
}

ops_scratch *ops_scratch_new(int max_T, int64_t max_n_in, int n_threads) {
    if (max_T < 1)
        max_T = 1;
    if (max_n_in < GGUF_Q8_0_BLOCK)
        max_n_in = GGUF_Q8_0_BLOCK;
    if (n_threads <= 0)
        n_threads = omp_get_num_procs();
    /* sgemm is called from inside our OpenMP region and must not start
     * threads of its own. */
    openblas_set_num_threads(1);

    ops_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->max_T = max_T;
    s->max_n_in = max_n_in;
    s->n_threads = n_threads;
    const size_t nb = (size_t)(max_n_in / GGUF_Q8_0_BLOCK), own = (size_t)n_threads * OPS_Q8_OWN_T;
    s->wtile_floats = ((size_t)OPS_TILE_ROWS * (size_t)max_n_in + 15) / 16 * 16;
    s->q8rows_bytes = (Q8_GROUP_BYTES * nb + 63) / 64 * 64;
    s->xt_f32_floats = 16 * (size_t)max_n_in;
    s->xq = alloc64(s, (size_t)max_T * (size_t)max_n_in);
    s->xd = alloc64(s, (size_t)max_T * nb * sizeof(float));
    const size_t t4 = ((size_t)max_T + OPS_Q8_TT - 1) / OPS_Q8_TT * OPS_Q8_TT;
    s->xt = alloc64(s, t4 * (size_t)max_n_in);
    s->xdt = alloc64(s, t4 * nb * sizeof(float));
    s->xq_own = alloc64(s, own * (size_t)max_n_in);
    s->xd_own = alloc64(s, own * nb * sizeof(float));
    s->xs = alloc64(s, (size_t)max_T * (size_t)(max_n_in / 16) * sizeof(int16_t));
    s->xs_own = alloc64(s, own * (size_t)(max_n_in / 16) * sizeof(int16_t));
    s->wtile = alloc64(s, s->wtile_floats * (size_t)n_threads * sizeof(float));
    s->q8rows = alloc64(s, s->q8rows_bytes * (size_t)n_threads);
    s->xt_f32 = alloc64(s, s->xt_f32_floats * (size_t)n_threads * sizeof(float));
    if (!s->xq || !s->xd || !s->xt || !s->xdt || !s->xq_own || !s->xd_own || !s->xs || !s->xs_own || !s->wtile ||
        !s->q8rows || !s->xt_f32)
        goto err;
    return s;
err:
    ops_scratch_free(s);
    return NULL;
}

/* This thread's slice of each per-thread buffer. The last two only serve
 * vector kernels. */
static float *thread_wtile(const ops_scratch *s) {
    return s->wtile + (size_t)omp_get_thread_num() * s->wtile_floats;
}

#ifdef OPS_AVX2
static uint8_t *thread_q8rows(const ops_scratch *s) {
    return s->q8rows + (size_t)omp_get_thread_num() * s->q8rows_bytes;
}

static float *thread_xt_f32(const ops_scratch *s) {
    return s->xt_f32 + (size_t)omp_get_thread_num() * s->xt_f32_floats;
}
#endif

size_t ops_scratch_bytes(const ops_scratch *s) { return s->bytes; }

void ops_scratch_free(ops_scratch *s) {
    if (!s)
        return;
    free(s->xq);
    free(s->xd);
    free(s->xt);
    free(s->xdt);
    free(s->xq_own);
    free(s->xd_own);
    free(s->xs);
    free(s->xs_own);
    free(s->wtile);
    free(s->q8rows);
    free(s->xt_f32);
    free(s);
}

/* ------------------------------------------------------------------------- */
/* Matmul, decode path: stream each weight row once                          */
/* ------------------------------------------------------------------------- */

/* Element i of a float-type row, for scalar loops and vector tails. */
static inline float w_elem(const uint8_t *row, int64_t i, uint32_t type) {
    switch (type) {
    case GGUF_TT_F16: return ops_f16_to_f32(((const uint16_t *)row)[i]);
    case GGUF_TT_BF16: return ops_bf16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

/* The activations of the integer paths (Q8_0 and quant.h's types),
 * quantized once per call in the weight type's format: the 32-element
 * types read QUANT_ACT_Q8_32, the K-quants and IQ4_XS QUANT_ACT_Q8_K. */
typedef struct q8_act {
    int act;                /* QUANT_ACT_* */
    int8_t *q;              /* (T, n_in) */
    float *d;               /* (T, n_in / dblock) */
    int16_t *s;             /* (T, n_in / sblock): sums, for quant.h's kernels (MM_QUANT); NULL
                             * for ops.c's own Q8_0 kernels, which do not read them */
    int8_t *t;              /* T >= OPS_Q8_TT: (T / 4 rounded up, n_in / 32, 8 groups, 4 rows, 4) */
    float *td;              /* T >= OPS_Q8_TT: (T / 4 rounded up, n_in / 32, 4 rows) */
} q8_act;

/* Quantize activation row t of x (T, n_in) into xa. Q8_0's scale is
 * rounded through f16 so its products equal llama.cpp's q8_0 x q8_0 dot. */
static void q8_act_row(const q8_act *xa, const float *x, int64_t n_in, int t) {
    const size_t nd = (size_t)(n_in / quant_act_dblock(xa->act)), ns = (size_t)(n_in / quant_act_sblock(xa->act));
    quant_act_row(xa->act, xa->q + (size_t)t * (size_t)n_in, xa->d + (size_t)t * nd,
                  xa->s ? xa->s + (size_t)t * ns : NULL, x + (size_t)t * (size_t)n_in, n_in);
}

#ifdef OPS_AVX2
/* Rows [4 tt, 4 tt + 4) of the quantized activations regrouped for
 * tile_q8w: per block 128 bytes, group g (16 bytes) holding quants
 * 4g..4g+3 of each of the 4 rows (a 4x8 transpose of 32-bit groups), and
 * the 4 rows' scales side by side. Rows at or past T are zeros. */
static void q8_act_tile(const q8_act *xa, int64_t n_in, int T, int tt) {
    const int64_t nb = n_in / GGUF_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        __m256i r[4];
        float *d = xa->td + ((size_t)tt * (size_t)nb + (size_t)b) * OPS_Q8_TT;
#pragma GCC unroll 4
        for (int j = 0; j < OPS_Q8_TT; j++) {
            const int t = tt * OPS_Q8_TT + j;
            const size_t at = (size_t)t * (size_t)n_in + (size_t)b * GGUF_Q8_0_BLOCK;
            r[j] = t < T ? _mm256_loadu_si256((const __m256i *)(xa->q + at)) : _mm256_setzero_si256();
            d[j] = t < T ? xa->d[(size_t)t * (size_t)nb + (size_t)b] : 0.0f;
        }
        /* t0 = r0g0 r1g0 r0g1 r1g1 | r0g4 r1g4 r0g5 r1g5, and so on */
        const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        /* u0 = groups 0 | 4 of rows 0..3, u1 = 1 | 5, u2 = 2 | 6, u3 = 3 | 7 */
        const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        int8_t *o = xa->t + ((size_t)tt * (size_t)nb + (size_t)b) * 128;
        _mm256_storeu_si256((__m256i *)(o + 0), _mm256_permute2x128_si256(u0, u1, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_permute2x128_si256(u2, u3, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 64), _mm256_permute2x128_si256(u0, u1, 0x31));
        _mm256_storeu_si256((__m256i *)(o + 96), _mm256_permute2x128_si256(u2, u3, 0x31));
    }
}
#endif

static void rows_quant(float *y, int64_t ldy, int T, const ops_mat *w, const q8_act *xa, int64_t o0, int64_t o1,
                       quant_dot_fn *dot, size_t rb);

/* Scalar rows [o0, o1): the reference, and the decode path without AVX2. */
static void rows_scalar(float *y, int64_t ldy, const float *x, int T, const ops_mat *w,
                        const q8_act *xa, int64_t o0, int64_t o1) {
    if (w->type != GGUF_TT_Q8_0 && xa->act != QUANT_ACT_NONE) {
        rows_quant(y, ldy, T, w, xa, o0, o1, quant_dot_scalar(w->type), row_bytes(w));
        return;
    }
    const int64_t n = w->n_in, nb = n / GGUF_Q8_0_BLOCK;
    const size_t rb = row_bytes(w);
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        for (int t0 = 0; t0 < T; t0 += 8) {  /* 8 sums at a time, each row element decoded once */
            const int nc = T - t0 < 8 ? T - t0 : 8;
            float acc[8] = {0};
            if (w->type == GGUF_TT_Q8_0) {
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = row + (size_t)b * GGUF_Q8_0_BYTES;
                    const int8_t *wq = (const int8_t *)(blk + 2);
                    const float dw = q8_scale(blk);
                    for (int c = 0; c < nc; c++) {
                        const size_t t = (size_t)(t0 + c);
                        const int8_t *xq = xa->q + t * (size_t)n + (size_t)b * GGUF_Q8_0_BLOCK;
                        int32_t sum = 0;
                        for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
                            sum += (int32_t)wq[j] * xq[j];
                        acc[c] += dw * xa->d[t * (size_t)nb + (size_t)b] * (float)sum;
                    }
                }
            } else {
                for (int64_t i = 0; i < n; i++) {
                    const float wv = w_elem(row, i, w->type);
                    for (int c = 0; c < nc; c++)
                        acc[c] += wv * x[(size_t)(t0 + c) * (size_t)n + (size_t)i];
                }
            }
            for (int c = 0; c < nc; c++)
                y[(size_t)(t0 + c) * (size_t)ldy + (size_t)o] = acc[c];
        }
    }
}

/* Bytes of weight rows rows_quant takes through all of a step's token
 * groups before moving on: well inside L1, so every group after the first
 * reads them there, while the kernels' prefetch (QUANT_PREFETCH ahead)
 * brings in the next run's. */
#define OPS_QUANT_RUN_BYTES 16384

/* Rows [o0, o1) of a quantized type other than Q8_0 by its kernel dot
 * (quant.h): the rows against the activations QUANT_MAX_C at a time, so
 * every weight block is unpacked once per QUANT_MAX_C tokens; at larger T
 * in runs of rows of OPS_QUANT_RUN_BYTES, each run through every group. */
static void rows_quant(float *y, int64_t ldy, int T, const ops_mat *w, const q8_act *xa, int64_t o0, int64_t o1,
                       quant_dot_fn *dot, size_t rb) {
    /* nb: the weights' blocks a row, and the activations' scales, whose
     * blocks match the weights' (quant_act_format) */
    const int64_t n = w->n_in, nb = n / quant_act_dblock(xa->act), ns = n / quant_act_sblock(xa->act);
    int64_t run = T > QUANT_MAX_C ? (int64_t)(OPS_QUANT_RUN_BYTES / rb) : o1 - o0;
    if (run < 1) run = 1;
    for (int64_t r0 = o0; r0 < o1; r0 += run) {
        const int64_t r1 = r0 + run < o1 ? r0 + run : o1;
        const uint8_t *head = (const uint8_t *)w->data + (size_t)r0 * rb;
        for (int t = 0; t < T; t += QUANT_MAX_C) {
            const quant_acts a = {xa->q + (size_t)t * (size_t)n, xa->d + (size_t)t * (size_t)nb,
                                  xa->s ? xa->s + (size_t)t * (size_t)ns : NULL, n};
            dot(y + (size_t)t * (size_t)ldy + (size_t)r0, ldy, head, rb, (int)(r1 - r0), nb, &a,
                T - t < QUANT_MAX_C ? T - t : QUANT_MAX_C);
        }
    }
}

#ifdef OPS_AVX2

/* Eight weights of a float-type row as f32. type is a constant at every call
 * site, so the switch folds away. */
static ALWAYS_INLINE __m256 w_load8(const uint8_t *row, int64_t i, uint32_t type) {
    switch (type) {
    case GGUF_TT_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    case GGUF_TT_BF16: {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    default:
        return _mm256_loadu_ps((const float *)row + i);
    }
}

/* R weight rows against C activation rows: R*C dot products, the weights
 * loaded (and converted) once per 8 elements for all C. R and C are
 * constants at each call site; with R*C <= 10 the accumulators, the R
 * weight vectors and one x vector fit the 16 ymm registers.
 * y: (C, ldy) at the first output, the outputs of consecutive rows ys
 * apart; x: (C, n); rows rb bytes apart. */
static ALWAYS_INLINE void tile_float_s(float *y, int64_t ldy, size_t ys, const uint8_t *w, size_t rb,
                                       uint32_t type, const float *x, int64_t n, const int R, const int C) {
    __m256 acc[5][4];  /* fully unrolled below, so it lives in registers */
#pragma GCC unroll 5
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[5];
#pragma GCC unroll 5
        for (int r = 0; r < R; r++) {
            if (type != GGUF_TT_F32 && (i & 31) == 0)  /* once per 64-byte line */
                _mm_prefetch((const char *)(w + (size_t)r * rb) + 2 * i + OPS_PREFETCH, _MM_HINT_T0);
            wv[r] = w_load8(w + (size_t)r * rb, i, type);
        }
#pragma GCC unroll 5
        for (int c = 0; c < C; c++) {
            const __m256 xv = _mm256_loadu_ps(x + (size_t)c * (size_t)n + (size_t)i);
#pragma GCC unroll 5
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
#pragma GCC unroll 5
    for (int r = 0; r < R; r++)
#pragma GCC unroll 5
        for (int c = 0; c < C; c++) {
            float s = hsum8(acc[r][c]);
            for (int64_t j = i; j < n; j++)
                s += w_elem(w + (size_t)r * rb, j, type) * x[(size_t)c * (size_t)n + (size_t)j];
            y[(size_t)c * (size_t)ldy + (size_t)r * ys] = s;
        }
}

/* The activations x (T, n) transposed for tile_f32_b: xt (n, 16), row k
 * holding element k of every activation, zeros from T on. */
static void f32_act_transpose(float *xt, const float *x, int T, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        float *o = xt + (size_t)k * 16;
        for (int t = 0; t < 16; t++)
            o[t] = t < T ? x[(size_t)t * (size_t)n + (size_t)k] : 0.0f;
    }
}

/* R F32 weight rows against T <= 16 activations, the activations in the
 * lanes (xt, two vectors per element k): per k, one broadcast weight per
 * row gives 2 R FMAs into 2 R accumulators, and no horizontal sums are
 * left at the end. At R = 6 that is 8 loads per 12 FMAs, where
 * tile_float_s (weights in the lanes, 5x2) loads each weight vector again
 * for every pair of activations: 12 loads per 10 FMAs, which crowd the
 * FMAs out (1 thread, T = 16, hot, best of 30 interleaved: 768x768 33 ->
 * 39 GMAC/s, 768x2048 25 -> 45, 2048x288 26 -> 33; 2 threads 55 -> 72 on
 * 2048x768, about sgemm's rate). F32 only: F16 rows converted into an L1
 * buffer first (so the broadcasts read floats) came out 5-20% slower
 * than tile_float_s, and at T = 8 (one vector of activations) both types
 * were. Each output is one FMA chain over k: a different order of the
 * same sums than tile_float_s takes. y: (T, ldy) at the first output, the
 * outputs of consecutive rows ys apart. */
static ALWAYS_INLINE void tile_f32_b(float *y, int64_t ldy, int T, size_t ys, const float *w, size_t rs,
                                     const float *xt, int64_t n, const int R) {
    __m256 acc[6][2];  /* fully unrolled below, so it lives in registers */
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const __m256 x0 = _mm256_load_ps(xt + (size_t)k * 16), x1 = _mm256_load_ps(xt + (size_t)k * 16 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 b = _mm256_broadcast_ss(w + (size_t)r * rs + (size_t)k);
            acc[r][0] = _mm256_fmadd_ps(b, x0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(b, x1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        float o[16];
        _mm256_storeu_ps(o, acc[r][0]);
        _mm256_storeu_ps(o + 8, acc[r][1]);
        for (int t = 0; t < T; t++)
            y[(size_t)t * (size_t)ldy + (size_t)r * ys] = o[t];
    }
}

/* Rows [o0, o1) of an F32 weight against OPS_BCAST_T..16 activations by
 * tile_f32_b: six rows at a time from six streams a sixth of the range
 * apart (as rows_float reads five), then the last rows together. */
static void rows_f32_b(float *y, int64_t ldy, int T, const ops_mat *w, int64_t o0, int64_t o1, const float *xt) {
    const int64_t n = w->n_in, q = (o1 - o0) / 6;
    const float *base = (const float *)w->data;
    for (int64_t o = o0; o < o0 + q; o++)
        tile_f32_b(y + o, ldy, T, (size_t)q, base + (size_t)o * (size_t)n, (size_t)q * (size_t)n, xt, n, 6);
    /* The last 0..5 rows as one tile: row by row, two FMA chains each would
     * wait on the FMA latency. */
    const int64_t o = o0 + 6 * q;
    const float *row = base + (size_t)o * (size_t)n;
    switch (o1 - o) {
    case 5: tile_f32_b(y + o, ldy, T, 1, row, (size_t)n, xt, n, 5); break;
    case 4: tile_f32_b(y + o, ldy, T, 1, row, (size_t)n, xt, n, 4); break;
    case 3: tile_f32_b(y + o, ldy, T, 1, row, (size_t)n, xt, n, 3); break;
    case 2: tile_f32_b(y + o, ldy, T, 1, row, (size_t)n, xt, n, 2); break;
    case 1: tile_f32_b(y + o, ldy, T, 1, row, (size_t)n, xt, n, 1); break;
    }
}

/* Rows [o0, o1) of a float-type weight against all T activations, read as
 * four (T = 1) or five streams a fraction of the range apart: one
 * sequential stream per thread read ~28 GB/s on 2 threads, four ~43 GB/s
 * (2048x768 F32, cold; F16 21 -> 31 GB/s), and more activations only
 * shift the balance towards arithmetic without hiding the memory (T = 16
 * cold, 2 threads, best of 30-120: F16 450-500 -> 312-481 us, F32 495-563
 * -> 474-522 us, against reading 5-row groups one after another with the
 * next group prefetched). T > 1 takes five rows against two activations
 * per pass while they sit in L1: ten independent FMA chains cover the FMA
 * latency, which a 4x2 tile leaves exposed (1 thread, 768x768, T = 16, 4x2
 * -> 5x2: F16 317 -> 206 us, F32 301 -> 252 us). DRAM sees each row once
 * whatever T is. */
static ALWAYS_INLINE void rows_float(float *y, int64_t ldy, const float *x, int T, const ops_mat *w,
                                     int64_t o0, int64_t o1, const uint32_t type) {
    const int64_t n = w->n_in;
    const size_t rb = row_bytes(w);
    const uint8_t *base = (const uint8_t *)w->data;
    int64_t o = o0;
    /* Streams: one activation takes rows o0 + k + {0..3} q, more take
     * o0 + k + {0..4} q, so the outputs of a tile are q apart. */
#define FL_AT(R, C, S) tile_float_s(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, (size_t)(S), row, (size_t)(S) * rb, \
                                    type, x + (size_t)t * (size_t)n, n, R, C)
    if (T == 1) {
        const int64_t q = (o1 - o0) / 4;
        for (o = o0; o < o0 + q; o++) {
            const uint8_t *row = base + (size_t)o * rb;
            const int t = 0;
            FL_AT(4, 1, q);
        }
        o = o0 + 4 * q;
    } else {
        const int64_t q = (o1 - o0) / 5;
        for (o = o0; o < o0 + q; o++) {
            const uint8_t *row = base + (size_t)o * rb;
            int t = 0;
            for (; t + 2 <= T; t += 2)
                FL_AT(5, 2, q);
            if (t < T)
                FL_AT(5, 1, q);
        }
        o = o0 + 5 * q;
        /* The last 1..4 rows of the range, still two activations a pass. */
        const uint8_t *row = base + (size_t)o * rb;
        int t = 0;
        switch (o1 - o) {
        case 4: for (; t + 2 <= T; t += 2) FL_AT(4, 2, 1); if (t < T) FL_AT(4, 1, 1); o += 4; break;
        case 3: for (; t + 2 <= T; t += 2) FL_AT(3, 2, 1); if (t < T) FL_AT(3, 1, 1); o += 3; break;
        case 2: for (; t + 2 <= T; t += 2) FL_AT(2, 2, 1); if (t < T) FL_AT(2, 1, 1); o += 2; break;
        }
    }
    for (; o < o1; o++) {
        const uint8_t *row = base + (size_t)o * rb;
        int t = 0;
        for (; t + 4 <= T; t += 4)
            FL_AT(1, 4, 1);
        for (; t < T; t++)
            FL_AT(1, 1, 1);
    }
#undef FL_AT
}

/* xt: from T = OPS_BCAST_T on, the activations as f32_act_transpose
 * wrote them for this thread (matmul_team). */
static void rows_f32(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, int64_t o0, int64_t o1,
                     const float *xt) {
    if (T >= OPS_BCAST_T)
        rows_f32_b(y, ldy, T, w, o0, o1, xt);
    else
        rows_float(y, ldy, x, T, w, o0, o1, GGUF_TT_F32);
}
static void rows_f16(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, int64_t o0, int64_t o1) {
    rows_float(y, ldy, x, T, w, o0, o1, GGUF_TT_F16);
}
static void rows_bf16(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, int64_t o0, int64_t o1) {
    rows_float(y, ldy, x, T, w, o0, o1, GGUF_TT_BF16);
}

/* R Q8_0 weight rows against C quantized activation rows. Per block of 32:
 * the weights are made unsigned by their own sign (sign(w, w) = |w|, and
 * -128 comes out as 128 read unsigned), the activations take the weights'
 * sign instead, so maddubs multiplies |w| * (x sgn w) = w * x in int16
 * pairs (at most 2 * 128 * 127, no saturation); madd with ones sums to 8
 * int32, which are scaled by d_w * d_x into float accumulators. */
static ALWAYS_INLINE void tile_q8_s(float *y, int64_t ldy, size_t ys, const uint8_t *w, size_t rb, int64_t nb,
                                    const int8_t *xq, const float *xd, int64_t n, const int R, const int C) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];  /* fully unrolled below, so it lives in registers */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[4], wa[4];
        __m256 dw[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)r * rb + (size_t)b * GGUF_Q8_0_BYTES;
            _mm_prefetch((const char *)blk + OPS_PREFETCH, _MM_HINT_T0);
            dw[r] = _mm256_set1_ps(q8_scale(blk));
            wq[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            wa[r] = _mm256_sign_epi8(wq[r], wq[r]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const size_t at = (size_t)c * (size_t)n + (size_t)b * GGUF_Q8_0_BLOCK;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + at));
            const __m256 dx = _mm256_broadcast_ss(xd + (size_t)c * (size_t)nb + (size_t)b);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_maddubs_epi16(wa[r], _mm256_sign_epi8(xv, wq[r]));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), f, acc[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            y[(size_t)c * (size_t)ldy + (size_t)r * ys] = hsum8(acc[r][c]);
}

static ALWAYS_INLINE void tile_q8(float *y, int64_t ldy, const uint8_t *w, size_t rb, int64_t nb,
                                  const int8_t *xq, const float *xd, int64_t n, const int R, const int C) {
    tile_q8_s(y, ldy, 1, w, rb, nb, xq, xd, n, R, C);
}

/* Eight weight rows against a tile of 4 activation rows, the weight rows
 * in the 8 lanes. The weights come regrouped by q8_rows8 (per block, 8
 * vectors: vector g holds quants 4g..4g+3 of each row; the 8 scales),
 * the activations by q8_act_tile. Per group: |weights| (one abs for the
 * four activation rows; storing them as well would double the bytes a
 * regrouped copy streams from memory). Per group and activation row: a
 * broadcast of the activation's 4 quants, given the weights' signs,
 * maddubs with the |weights| and madd give the 8 rows' partial dot
 * products at once (|-128| reads as 128 unsigned; activations never hold
 * -128, so x sgn w fits a byte); they add up in int32 over the
 * block (at most 32 * 128 * 127, exact) before one convert and one FMA per
 * block and activation row apply the scales. So 32 multiply-adds cost a
 * broadcast, sign, maddubs, madd and an add, where one accumulator per
 * (row, activation) pair (tile_q8) adds a convert and an FMA to each: in
 * an isolated loop on Zen 3, 1.3 cycles against 1.9. Writes y[j][0..8) for
 * the tv <= 4 valid activation rows. Meanwhile it prefetches the n_pf
 * lines at pf into L2, spread evenly over its blocks (rows_q8). vnni
 * (QUANT_VNNI_*, or 0): one vpdpbusd does maddubs, madd and the add, the
 * same integers (110m Q8_0 on this host's Xeon, two interleaved runs of
 * each build: b16 decode 576, 586 -> 752, 689 tok/s, prefill 845, 898 ->
 * 1180, 1115). */
static ALWAYS_INLINE void tile_q8w(float *y, int64_t ldy, int tv, const int8_t *wg, const float *dw, int64_t nb,
                                   const int8_t *xt, const float *xdt, const char *pf, int64_t n_pf, const int vnni) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int c = 0; c < 4; c++)
        acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t k = b * n_pf / nb; k < (b + 1) * n_pf / nb; k++)
            _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
        __m256i ia[4];
        for (int c = 0; c < 4; c++)
            ia[c] = _mm256_setzero_si256();
        const int8_t *xb = xt + (size_t)b * 128, *wb = wg + (size_t)b * 256;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_load_si256((const __m256i *)(wb + 32 * g));
            const __m256i a = _mm256_abs_epi8(w);  /* |-128| = 0x80, 128 read unsigned */
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                int32_t x4;
                memcpy(&x4, xb + 16 * g + 4 * c, 4);
                const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(x4), w);
                if (vnni) {
                    ia[c] = quant_dpbusd(vnni, ia[c], a, xs);
                } else {
                    ia[c] = _mm256_add_epi32(ia[c], _mm256_madd_epi16(_mm256_maddubs_epi16(a, xs), ones));
                    __asm__("" : "+x"(ia[c]));  /* keep each sum one chain in a register, not a spilled tree */
                }
            }
        }
        const __m256 d8 = _mm256_load_ps(dw + (size_t)b * 8);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[c]), _mm256_mul_ps(d8, _mm256_broadcast_ss(xdt + (size_t)b * 4 + c)),
                                     acc[c]);
    }
    for (int c = 0; c < tv; c++)
        _mm256_storeu_ps(y + (size_t)c * (size_t)ldy, acc[c]);
}

/* Eight Q8_0 rows (rb bytes apart) regrouped for tile_q8w: per block an
 * 8x8 transpose of 32-bit groups of quants (wg, 256 bytes) and the 8
 * scales as floats (dw). Once per 8 rows, however many activation tiles
 * then pass over them. The tiles of the previous group prefetched these
 * rows (rows_q8); an item's first group has prefetch_head's. */
static void q8_rows8(int8_t *wg, float *dw, const uint8_t *row, size_t rb, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        __m256i r[8], u[8], v[8];
        uint16_t ds[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const uint8_t *blk = row + (size_t)i * rb + (size_t)b * GGUF_Q8_0_BYTES;
            r[i] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            /* Through memory, not _mm_insert_epi16: its lane must be a
             * compile-time constant, which the loop index only is once
             * unrolled (not at -O1, the sanitizer build). */
            memcpy(&ds[i], blk, sizeof ds[i]);
        }
        _mm256_store_ps(dw + (size_t)b * 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)ds)));
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            u[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
            u[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
        }
#pragma GCC unroll 2
        for (int j = 0; j < 8; j += 4) {
            v[j] = _mm256_unpacklo_epi64(u[j], u[j + 2]);
            v[j + 1] = _mm256_unpackhi_epi64(u[j], u[j + 2]);
            v[j + 2] = _mm256_unpacklo_epi64(u[j + 1], u[j + 3]);
            v[j + 3] = _mm256_unpackhi_epi64(u[j + 1], u[j + 3]);
        }
        /* v[g] = groups g | g + 4 of rows 0..3, v[g + 4] = the same of rows 4..7 */
        int8_t *o = wg + (size_t)b * 256;
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i lo = _mm256_permute2x128_si256(v[g], v[g + 4], 0x20);
            const __m256i hi = _mm256_permute2x128_si256(v[g], v[g + 4], 0x31);
            _mm256_store_si256((__m256i *)(o + 32 * g), lo);
            _mm256_store_si256((__m256i *)(o + 32 * (g + 4)), hi);
        }
    }
}

/* rows_q8's groups of 8 rows from o0 while whole ones fit; returns the
 * first row left. vnni as tile_q8w's, a constant at each call. */
static ALWAYS_INLINE int64_t q8_groups(float *y, int64_t ldy, int T, const ops_mat *w, const q8_act *xa, int64_t o0,
                                       int64_t o1, uint8_t *group, const int vnni) {
    const int64_t n = w->n_in, nb = n / GGUF_Q8_0_BLOCK;
    const size_t rb = row_bytes(w);
    int64_t o = o0;
    for (; o + 8 <= o1; o += 8) {
        /* o0 is a multiple of OPS_ROW_BLOCK, so o starts a group of 8 */
        const uint8_t *rows = (const uint8_t *)w->data + (size_t)o * rb;
        q8_rows8((int8_t *)group, (float *)(group + 256 * (size_t)nb), rows, rb, nb);
        const int8_t *wg = (const int8_t *)group;
        const float *dw = (const float *)(group + 256 * (size_t)nb);
        /* the next group's lines, a share per tile */
        const int n_tiles = (T + OPS_Q8_TT - 1) / OPS_Q8_TT;
        const int64_t lines = o + 16 <= o1 ? (int64_t)((8 * rb + 63) / 64) : 0;
        const int64_t share = (lines + n_tiles - 1) / n_tiles;
        for (int tt = 0; tt < n_tiles; tt++) {
            const int t = tt * OPS_Q8_TT, tv = T - t < OPS_Q8_TT ? T - t : OPS_Q8_TT;
            const int64_t from = tt * share < lines ? tt * share : lines;
            const int64_t n_pf = lines - from < share ? lines - from : share;
            tile_q8w(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, tv, wg, dw, nb,
                     xa->t + (size_t)tt * (size_t)n * OPS_Q8_TT, xa->td + (size_t)tt * (size_t)nb * OPS_Q8_TT,
                     n_pf ? (const char *)(rows + 8 * rb) + 64 * from : NULL, n_pf, vnni);
        }
    }
    return o;
}

/* Q8_0 rows [o0, o1). Without regrouped activations (T below
 * OPS_Q8_TILED_T), each weight row is streamed once, four rows at a time
 * from four streams a quarter of the range apart (as rows_float does),
 * against one or two activations per pass (tile_q8_s, prefetching). With
 * them (xa->t, which matmul_team made in tiles of OPS_Q8_TT rows), the
 * weight rows are taken eight at a time, regrouped once into group, and
 * every activation tile passes
 * over them while they sit in L1 (tile_q8w). Leftover rows take tile_q8.
 * group: this thread's Q8_GROUP_BYTES * n_in / 32 bytes, 64-byte aligned.
 * The tiles compute for several times as long as the regrouping loads,
 * with no weight load in flight, so they fetch the next group's rows (one
 * contiguous stretch), each tile a share spread over its blocks: neither
 * the hardware prefetcher nor a prefetch a fixed distance ahead in the
 * rows being regrouped (it falls inside the group) had them there in
 * time. Measured on a Xeon (Emerald Rapids, 2 MiB L2), 110m Q8_0, T = 16,
 * 2 threads: every layer's products in turn (weights from L3 and DRAM)
 * ran at 86% of their rate on hot slices with that fixed-distance
 * prefetch, 91% with the next group prefetched by the regrouping itself
 * (a burst of prefetches), 97% spread over the tiles (medians of 15
 * passes); b16 decode went from 72-77% to 84-86% of bench_engine's T = 16
 * ceiling as it was then measured, a team opened per pass (four
 * interleaved runs each). */
static void rows_q8(float *y, int64_t ldy, int T, const ops_mat *w, const q8_act *xa, int64_t o0, int64_t o1,
                    uint8_t *group) {
    const int64_t n = w->n_in, nb = n / GGUF_Q8_0_BLOCK;
    const size_t rb = row_bytes(w);
    int64_t o = o0;
#define Q8_AT(R, C) \
    tile_q8(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, nb, \
            xa->q + (size_t)t * (size_t)n, xa->d + (size_t)t * (size_t)nb, n, R, C)
    if (T == 1) {
        /* Four streams, as rows_float does. */
        const int64_t q = (o1 - o0) / 4;
        for (int64_t k = 0; k < q; k++)
            tile_q8_s(y + o0 + k, ldy, (size_t)q, (const uint8_t *)w->data + (size_t)(o0 + k) * rb, (size_t)q * rb, nb,
                      xa->q, xa->d, n, 4, 1);
        o = o0 + 4 * q;
    } else if (!xa->t) {
        const int64_t q = (o1 - o0) / 4;
        for (int64_t k = 0; k < q; k++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)(o0 + k) * rb;
            int t = 0;
            for (; t + 2 <= T; t += 2)
                tile_q8_s(y + (size_t)t * (size_t)ldy + (size_t)(o0 + k), ldy, (size_t)q, row, (size_t)q * rb, nb,
                          xa->q + (size_t)t * (size_t)n, xa->d + (size_t)t * (size_t)nb, n, 4, 2);
            if (t < T)
                tile_q8_s(y + (size_t)t * (size_t)ldy + (size_t)(o0 + k), ldy, (size_t)q, row, (size_t)q * rb, nb,
                          xa->q + (size_t)t * (size_t)n, xa->d + (size_t)t * (size_t)nb, n, 4, 1);
        }
        o = o0 + 4 * q;
    } else {
        const int v = quant_vnni();
        o = v == QUANT_VNNI_VEX    ? q8_groups(y, ldy, T, w, xa, o0, o1, group, QUANT_VNNI_VEX)
            : v == QUANT_VNNI_EVEX ? q8_groups(y, ldy, T, w, xa, o0, o1, group, QUANT_VNNI_EVEX)
                                   : q8_groups(y, ldy, T, w, xa, o0, o1, group, 0);
    }
    for (; o < o1; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        int t = 0;
        for (; t + 4 <= T; t += 4)
            Q8_AT(1, 4);
        for (; t < T; t++)
            Q8_AT(1, 1);
    }
#undef Q8_AT
}

#endif /* OPS_AVX2 */

#ifdef OPS_AVX2
/* Rows [o0, o1) of the decode path by the vector kernel of w's type. */
static void rows_vector(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, const q8_act *xa,
                        int64_t o0, int64_t o1, const ops_scratch *s) {
    switch (w->type) {
    case GGUF_TT_F32: rows_f32(y, ldy, x, T, w, o0, o1, thread_xt_f32(s)); return;
    case GGUF_TT_F16: rows_f16(y, ldy, x, T, w, o0, o1); return;
    case GGUF_TT_BF16: rows_bf16(y, ldy, x, T, w, o0, o1); return;
    case GGUF_TT_Q8_0: rows_q8(y, ldy, T, w, xa, o0, o1, thread_q8rows(s)); return;
    }
}
#endif

/* ------------------------------------------------------------------------- */
/* Matmul, prefill path: sgemm on disjoint column ranges                     */
/* ------------------------------------------------------------------------- */

/* y[:, o0:o0+rows] = x W[o0:o0+rows]^T for F32 weights in place. */
static void sgemm_cols(float *y, int64_t ldy, const float *x, int T, const float *wrows, int64_t rows, int64_t n) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, (int)rows, (int)n, 1.0f, x, (int)n,
                wrows, (int)n, 0.0f, y, (int)ldy);
}

/* Rows [o0, o1) (at most OPS_TILE_ROWS) by single-threaded sgemm: in place
 * for F32, through this thread's dequantized tile for F16/BF16. */
static void sgemm_rows(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, int64_t o0, int64_t o1,
                       const ops_scratch *s) {
    const int64_t n = w->n_in;
    if (w->type == GGUF_TT_F32) {
        sgemm_cols(y + o0, ldy, x, T, (const float *)w->data + (size_t)o0 * (size_t)n, o1 - o0, n);
        return;
    }
    float *tile = thread_wtile(s);
    for (int64_t r = o0; r < o1; r++)
        dequant_row(tile + (size_t)(r - o0) * (size_t)n, w, r);
    sgemm_cols(y + o0, ldy, x, T, tile, o1 - o0, n);
}

/* ------------------------------------------------------------------------- */
/* Matmul driver: one work list over every matrix of a call                  */
/* ------------------------------------------------------------------------- */

/* How a call's products are computed. They all share T and the weight
 * type, so one method serves the whole call; matmul_run picks it once. */
enum {
    MM_SCALAR,              /* rows_scalar: the reference, and a build without AVX2 at small T */
    MM_STREAM,              /* the vector decode kernels: each weight row streamed once */
    MM_SGEMM,               /* OpenBLAS sgemm on tiles of OPS_TILE_ROWS rows */
    MM_QUANT,               /* the other quantized types: quant_dot's kernel, at every T */
};

/* One call: up to OPS_MATMUL_MAX products of the same activations, or one
 * SwiGLU pair (y = silu(x W^T) * (x W2^T), y2 receiving x W2^T). */
typedef struct mm_call {
    int n;                              /* products */
    float *y[OPS_MATMUL_MAX];           /* (T, ldy[i]) each */
    int64_t ldy[OPS_MATMUL_MAX];
    const ops_mat *w[OPS_MATMUL_MAX];
    float *y2;                          /* gated only: (T, ldy[0]) */
    const ops_mat *w2;                  /* gated only: the up projection */
    int gelu;                           /* gated only: 1 GELU-tanh gate, 0 silu */
    const float *x;                     /* (T, n_in) */
    int T;
    int method;                         /* MM_*, set by matmul_run */
    size_t rb;                          /* bytes of a weight row (every product's) */
    quant_dot_fn *dot;                  /* MM_QUANT: the type's kernel */
} mm_call;

/* sgemm pays once T is large enough to beat streaming; the quantized
 * types keep their integer kernels at every T so a token's logits do not
 * depend on what else is in the batch. Q8_0 runs ops.c's own kernels where
 * the build has them (OPS_AVX2), else quant.h's, which pick AVX2 by the
 * CPU at run time. ref asks for the scalar path at every T. */
static int mm_method(const ops_mat *w, int T, int ref) {
    if (ref)
        return MM_SCALAR;
    if (w->type != GGUF_TT_Q8_0 && quant_act_format(w->type) != QUANT_ACT_NONE)
        return MM_QUANT;
#ifndef OPS_AVX2
    if (w->type == GGUF_TT_Q8_0 && quant_dot_avx2(GGUF_TT_Q8_0))
        return MM_QUANT;
#endif
    if (w->type != GGUF_TT_Q8_0 && T > (w->type == GGUF_TT_F32 ? OPS_SMALL_T_F32 : OPS_SMALL_T_HALF))
        return MM_SGEMM;
#ifdef OPS_AVX2
    return MM_STREAM;
#else
    return MM_SCALAR;
#endif
}

/* A call's work items, in the order threads take them: the rows of its
 * products one after another, cut into items. sgemm takes tiles of
 * OPS_TILE_ROWS (each call repacks x, so fewer, wider calls are cheaper).
 * Streaming items are guided: each takes 1 / (OPS_GUIDE * nt) of the rows
 * the call has left, so they start at a quarter of a thread's share (a
 * thread the machine delays holds back little while the others take the
 * rest) and shrink to OPS_ROW_BLOCK rows at the end, where the last item
 * is what the other threads wait for at the barrier (equal items of an
 * eighth of a share left them waiting half of one, on average, at every
 * product). Items are whole multiples of OPS_ROW_BLOCK rows, so no two
 * threads write one line of y. Every thread walks the same list. */
typedef struct mm_items {
    int64_t k;              /* index of the item held, -1 before the first */
    int i;                  /* its product */
    int64_t o0, o1;         /* its rows */
    int64_t left;           /* rows of the call after it */
} mm_items;

static void items_start(mm_items *it, const mm_call *c) {
    *it = (mm_items){.k = -1};
    for (int i = 0; i < c->n; i++)
        it->left += c->w[i]->n_out;
}

static void items_next(mm_items *it, const mm_call *c, int nt) {
    if (it->k >= 0 && it->o1 == c->w[it->i]->n_out) {
        it->i++;
        it->o1 = 0;
    }
    int64_t r = it->left;  /* one thread: each product whole */
    if (c->method == MM_SGEMM) {
        r = OPS_TILE_ROWS;
    } else if (nt > 1) {
        r = (it->left + OPS_GUIDE * nt - 1) / (OPS_GUIDE * nt);
        r = (r + OPS_ROW_BLOCK - 1) / OPS_ROW_BLOCK * OPS_ROW_BLOCK;
    }
    it->k++;
    it->o0 = it->o1;
    it->o1 = it->o0 + r < c->w[it->i]->n_out ? it->o0 + r : c->w[it->i]->n_out;
    it->left -= it->o1 - it->o0;
}

/* The first OPS_PREFETCH bytes of rows [o0, o1). The streaming kernels
 * prefetch that far ahead of where they read, but a work item starts a
 * new stream whose head nothing has fetched: with items of tens of KB
 * that head stalled a tenth of each item on DRAM. */
static void prefetch_head(const ops_mat *w, size_t rb, int64_t o0, int64_t o1) {
    const size_t n = (size_t)(o1 - o0) * rb < OPS_PREFETCH ? (size_t)(o1 - o0) * rb : OPS_PREFETCH;
    const char *head = (const char *)w->data + (size_t)o0 * rb;
    for (size_t b = 0; b < n; b += 64)
        __builtin_prefetch(head + b);
}

/* Rows [o0, o1) of y = x w^T, (T, ldy), by the call's method. */
static void product_rows(const mm_call *c, float *y, int64_t ldy, const ops_mat *w, int64_t o0, int64_t o1,
                         const q8_act *xa, const ops_scratch *s) {
    if (c->method == MM_STREAM || c->method == MM_QUANT)
        prefetch_head(w, c->rb, o0, o1);
    switch (c->method) {
    case MM_SGEMM:
        sgemm_rows(y, ldy, c->x, c->T, w, o0, o1, s);
        return;
    case MM_QUANT:
        rows_quant(y, ldy, c->T, w, xa, o0, o1, c->dot, c->rb);
        return;
#ifdef OPS_AVX2
    case MM_STREAM:
        rows_vector(y, ldy, c->x, c->T, w, xa, o0, o1, s);
        return;
#endif
    default:
        rows_scalar(y, ldy, c->x, c->T, w, xa, o0, o1);
    }
}

/* Item it of product i: rows [o0, o1) of y[i] (and for SwiGLU of y2, then
 * the gate applied to those columns, while they are still in cache). */
static void run_item(const mm_call *c, int i, int64_t o0, int64_t o1, const q8_act *xa, const ops_scratch *s) {
    product_rows(c, c->y[i], c->ldy[i], c->w[i], o0, o1, xa, s);
    if (!c->w2)
        return;
    product_rows(c, c->y2, c->ldy[i], c->w2, o0, o1, xa, s);
    void (*gate)(float *, const float *, int) = c->gelu ? ops_gelu_tanh_mul : ops_silu_mul;
    for (int t = 0; t < c->T; t++)
        gate(c->y[i] + (size_t)t * (size_t)c->ldy[i] + (size_t)o0, c->y2 + (size_t)t * (size_t)c->ldy[i] + (size_t)o0,
             (int)(o1 - o0));
}

/* The call as run by every thread of a team (or by one thread alone).
 * The integer paths' activations are quantized first: at small T every
 * thread quantizes them all into its own buffer, which costs less than the
 * barrier that sharing one copy needs. Then all items of all products form one list
 * that threads take from dynamically; the loop's barrier ends the call. */
static void matmul_team(const mm_call *c, const ops_scratch *s) {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t n_in = c->w[0]->n_in;
    const int act = quant_act_format(c->w[0]->type), sums = c->method == MM_QUANT || c->method == MM_SCALAR;
    q8_act xa = {act, s->xq, s->xd, sums ? s->xs : NULL, NULL, NULL};
    if (act != QUANT_ACT_NONE) {
        const int tiled = c->w[0]->type == GGUF_TT_Q8_0 && c->method == MM_STREAM && c->T >= OPS_Q8_TILED_T;
        const int n_tiles = (c->T + OPS_Q8_TT - 1) / OPS_Q8_TT;
        if (c->T <= OPS_Q8_OWN_T) {
            const size_t qo = (size_t)id * OPS_Q8_OWN_T * (size_t)s->max_n_in;
            const size_t dof = (size_t)id * OPS_Q8_OWN_T * (size_t)(s->max_n_in / GGUF_Q8_0_BLOCK);
            const size_t so = (size_t)id * OPS_Q8_OWN_T * (size_t)(s->max_n_in / 16);
            xa = (q8_act){act, s->xq_own + qo, s->xd_own + dof, sums ? s->xs_own + so : NULL, NULL, NULL};
            for (int t = 0; t < c->T; t++)
                q8_act_row(&xa, c->x, n_in, t);
        } else {
            if (tiled) {
                xa.t = s->xt;
                xa.td = s->xdt;
            }
#pragma omp for schedule(static)
            for (int tt = 0; tt < n_tiles; tt++) {
                for (int t = tt * OPS_Q8_TT; t < c->T && t < (tt + 1) * OPS_Q8_TT; t++)
                    q8_act_row(&xa, c->x, n_in, t);
#ifdef OPS_AVX2
                if (tiled)
                    q8_act_tile(&xa, n_in, c->T, tt);
#endif
            }
        }
    }
#ifdef OPS_AVX2
    if (c->w[0]->type == GGUF_TT_F32 && c->method == MM_STREAM && c->T >= OPS_BCAST_T)
        f32_act_transpose(thread_xt_f32(s), c->x, c->T, n_in);
#endif
    mm_items cur;
    int64_t n_items = 0;
    for (items_start(&cur, c); cur.left > 0; n_items++)
        items_next(&cur, c, nt);
    items_start(&cur, c);
    /* monotonic: a thread's items come in increasing order, so its cursor
     * only moves forward */
#pragma omp for schedule(monotonic : dynamic, 1)
    for (int64_t it = 0; it < n_items; it++) {
        while (cur.k < it)
            items_next(&cur, c, nt);
        run_item(c, cur.i, cur.o0, cur.o1, &xa, s);
    }
}

/* The caller's side of the contract in ops.h. None of it is up to a file
 * or a request: model_load refuses every matrix ops_mat_supported rejects,
 * and the CPU backend sizes y and the scratch from the same dimensions and
 * limits that eng_forward holds each batch to. */
static void matmul_check(int64_t ldy, int T, const ops_mat *w, const ops_scratch *s) {
    (void)ldy; (void)T; (void)w; (void)s;
    assert(ops_mat_supported(w));
    assert(ldy >= w->n_out && ldy < INT32_MAX);
    assert(s && T <= s->max_T && w->n_in <= s->max_n_in);
}

/* Threads for a call made outside a parallel region: as OpenMP is set for
 * the calling thread, but no more than the scratch has buffers for, and one
 * when the work is too small to pay for waking the pool. */
static int team_size(const mm_call *c, const ops_scratch *s) {
    int64_t macs = 0;
    for (int i = 0; i < c->n; i++)
        macs += (int64_t)c->T * c->w[i]->n_out * c->w[i]->n_in * (c->w2 ? 2 : 1);
    if (macs < OPS_PAR_MIN_MACS)
        return 1;
    const int nt = omp_get_max_threads();
    return nt < s->n_threads ? nt : s->n_threads;
}

/* ref: the scalar path at every T (ops_matmul_ref). */
static void matmul_run(mm_call *c, int ref, const ops_scratch *s) {
    if (c->T <= 0)
        return;
    /* One type per call: ops_matmul_n and ops_matmul_swiglu split mixed
     * groups by type before they get here. */
    for (int i = 0; i < c->n; i++) {
        matmul_check(c->ldy[i], c->T, c->w[i], s);
        assert(c->w[i]->n_in == c->w[0]->n_in && c->w[i]->type == c->w[0]->type);
    }
    assert(!c->w2 || (c->n == 1 && c->w2->n_out == c->w[0]->n_out && c->w2->n_in == c->w[0]->n_in &&
                      c->w2->type == c->w[0]->type));
    c->method = mm_method(c->w[0], c->T, ref);
    /* per call, not per item: both look the type up in a table */
    c->rb = row_bytes(c->w[0]);
    c->dot = c->method == MM_QUANT ? quant_dot(c->w[0]->type) : NULL;
    if (omp_in_parallel()) {
        assert(omp_get_num_threads() <= s->n_threads);
        matmul_team(c, s);
        return;
    }
    const int nt = team_size(c, s);
    if (nt <= 1) {
        matmul_team(c, s);
        return;
    }
#pragma omp parallel num_threads(nt)
    matmul_team(c, s);
}

void ops_matmul(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s) {
    mm_call c = {.n = 1, .y = {y}, .ldy = {ldy}, .w = {w}, .x = x, .T = T};
    matmul_run(&c, 0, s);
}

void ops_matmul_ref(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s) {
    mm_call c = {.n = 1, .y = {y}, .ldy = {ldy}, .w = {w}, .x = x, .T = T};
    matmul_run(&c, 1, s);
}

/* One call per weight type, in the order the types first appear. A
 * uniform group (every file tessera writes, and q/k/v of most) stays one
 * call with one work list; a mixed one, as quantized checkpoints have
 * (Q4_K_M keeps attn_v apart from q and k), pays one more activation pass
 * and barrier per extra type, since each type has its own kernel and
 * activation layout. */
void ops_matmul_n(int n, float *const *y, const int64_t *ldy, const float *x, int T, const ops_mat *const *w,
                  ops_scratch *s) {
    assert(n >= 1 && n <= OPS_MATMUL_MAX);
    unsigned done = 0;  /* bit i: product i is in a call already */
    for (int i = 0; i < n; i++) {
        if (done & (1u << i))
            continue;
        mm_call c = {.n = 0, .x = x, .T = T};
        for (int j = i; j < n; j++)
            if (!(done & (1u << j)) && w[j]->type == w[i]->type) {
                c.y[c.n] = y[j];
                c.ldy[c.n] = ldy[j];
                c.w[c.n++] = w[j];
                done |= 1u << j;
            }
        matmul_run(&c, 0, s);
    }
}

/* h = act(h) * u over T rows of n columns, ld apart, shared among the team
 * like the matmuls (one thread alone outside a parallel region). */
static void gate_rows(float *h, const float *u, int64_t ld, int T, int64_t n, int gelu) {
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++)
        (gelu ? ops_gelu_tanh_mul : ops_silu_mul)(h + (size_t)t * (size_t)ld, u + (size_t)t * (size_t)ld, (int)n);
}

/* Gate and up of one type are one call that applies the gate to each item
 * while its columns are in cache. Of two types, they are two calls and a
 * pass over the result: slower, and only mixed files pay it. */
static void matmul_gated(float *h, float *u, int64_t ldh, const float *x, int T, const ops_mat *wg,
                         const ops_mat *wu, int gelu, ops_scratch *s) {
    if (wg->type != wu->type) {
        ops_matmul(h, ldh, x, T, wg, s);
        ops_matmul(u, ldh, x, T, wu, s);
        gate_rows(h, u, ldh, T, wg->n_out, gelu);
        return;
    }
    mm_call c = {.n = 1, .y = {h}, .ldy = {ldh}, .w = {wg}, .y2 = u, .w2 = wu, .gelu = gelu, .x = x, .T = T};
    matmul_run(&c, 0, s);
}

void ops_matmul_swiglu(float *h, float *u, int64_t ldh, const float *x, int T, const ops_mat *wg,
                       const ops_mat *wu, ops_scratch *s) {
    matmul_gated(h, u, ldh, x, T, wg, wu, 0, s);
}

void ops_matmul_geglu(float *h, float *u, int64_t ldh, const float *x, int T, const ops_mat *wg,
                      const ops_mat *wu, ops_scratch *s) {
    matmul_gated(h, u, ldh, x, T, wg, wu, 1, s);
}

int ops_mat_supported(const ops_mat *w) {
    const int block = gguf_type_block(w->type);
    /* ops.c's own kernels: the float types and Q8_0; the rest are quant.h's */
    const int own = w->type == GGUF_TT_F32 || w->type == GGUF_TT_F16 || w->type == GGUF_TT_BF16 ||
                    w->type == GGUF_TT_Q8_0;
    if (!own && (block <= 1 || !quant_dot(w->type)))
        return 0;
    if (w->n_in % (block > 1 ? block : 1))
        return 0;
    return w->n_out > 0 && w->n_in > 0 && w->n_out < INT32_MAX && w->n_in < INT32_MAX; /* BLAS ints */
}
