/*
 * ops.c - the CPU kernels declared in ops.h.
 *
 * The file reads in four parts: number conversions (f16, bf16, Q8_0), the
 * small elementwise kernels, the scratch arena, and ops_matmul with its two
 * methods. Decode (small T) is limited by how fast weights stream from
 * memory, so its kernels load each weight row once, convert it in registers
 * and apply it to every activation vector of the batch. Prefill (large T) is
 * limited by arithmetic, which OpenBLAS sgemm does better than anything
 * written here, so those paths only arrange the calls. Each vector kernel
 * has a scalar twin that is always compiled: a build without AVX2 runs it,
 * and the tests hold the vector kernels against it.
 */
#include "ops.h"
#include "gguf.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define OPS_AVX2 1
#include <immintrin.h>
#endif

/* Rows per parallel work item of the decode path. 16 floats are one 64-byte
 * line of y, so two threads never write the same line of an aligned y. */
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
 * sgemm. The streaming kernel runs at ~45 GFLOP/s a core whatever T is, and
 * sgemm pulls ahead as T grows; measured on Zen 3 (768x768 and 2048x768, hot
 * and cold weights) the two cross near T = 9 for F32 and T = 13 for F16 and
 * BF16, whose sgemm path must first dequantize. */
#define OPS_SMALL_T_F32 8
#define OPS_SMALL_T_HALF 12
/* Bytes ahead of each weight stream that the F16/BF16/Q8_0 decode kernels
 * prefetch. Converting costs them enough time per byte that the hardware
 * prefetcher alone leaves the loads stalling (measured on Zen 3, 1 thread,
 * cold weights: Q8_0 8.6 -> 12 GB/s, F16 12 -> 14.5 GB/s; 2048 to 16384
 * all about equal). F32 keeps the prefetcher busy by itself, and explicit
 * prefetches only cost it load slots (measured slower). */
#define OPS_PREFETCH 4096

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

/* Quantize one block of 32 by ggml's reference rule and return the scale d
 * unrounded (callers store it as f16). The vector path reproduces roundf
 * (halves away from zero) exactly, so both paths give the same bytes. */
static float q8_block_quantize(int8_t *q, const float *x) {
#ifdef OPS_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], a = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        a = _mm256_max_ps(a, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    __m256i n[4];
    for (int k = 0; k < 4; k++) {
        __m256 p = _mm256_mul_ps(v[k], vid);
        __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        /* p - t is exact; a fraction of at least one half rounds away. */
        __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
        __m256 step = _mm256_or_ps(_mm256_and_ps(p, sign), one);
        n[k] = _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, step)));
    }
    /* The packs interleave 128-bit lanes; the permute puts them back. */
    __m256i p16a = _mm256_packs_epi32(n[0], n[1]), p16b = _mm256_packs_epi32(n[2], n[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    return d;
#else
    float amax = 0.0f;
    for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < GGUF_Q8_0_BLOCK; j++)
        q[j] = (int8_t)roundf(x[j] * id);
    return d;
#endif
}

void ops_quantize_q8_0(void *out, const float *x, int64_t n) {
    uint8_t *o = out;
    for (int64_t b = 0; b < n / GGUF_Q8_0_BLOCK; b++) {
        uint8_t *blk = o + (size_t)b * GGUF_Q8_0_BYTES;
        float d = q8_block_quantize((int8_t *)(blk + 2), x + (size_t)b * GGUF_Q8_0_BLOCK);
        uint16_t h = ops_f32_to_f16(d);
        memcpy(blk, &h, sizeof h);
    }
}

static float q8_scale(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, sizeof h);
    return ops_f16_to_f32(h);
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
    default:
        assert(!"ops: unsupported weight type");
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
#endif

float ops_dot(const float *a, const float *b, int n) {
    int i = 0;
    float s = 0.0f;
#ifdef OPS_AVX2
    /* Four accumulators hide the FMA latency. */
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
    s = hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

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
    float max = x[0];
    for (int i = 1; i < n; i++)
        max = fmaxf(max, x[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void ops_silu_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* ------------------------------------------------------------------------- */
/* Scratch                                                                   */
/* ------------------------------------------------------------------------- */

struct ops_scratch {
    int max_T;
    int64_t max_n_in;
    int n_threads;
    int8_t *xq;             /* (max_T, max_n_in) activation quants, Q8_0 path */
    float *xd;              /* (max_T, max_n_in / 32) activation scales, f16-rounded */
    float *tile;            /* (n_threads, OPS_TILE_ROWS, max_n_in) dequantized weights */
    size_t tile_floats;     /* floats per thread's tile, a multiple of 16 (64 bytes) */
};

/* 64-byte aligned allocation; aligned_alloc wants a multiple of the alignment. */
static void *alloc64(size_t bytes) {
    return aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
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
    s->tile_floats = ((size_t)OPS_TILE_ROWS * (size_t)max_n_in + 15) / 16 * 16;
    s->xq = alloc64((size_t)max_T * (size_t)max_n_in);
    s->xd = alloc64((size_t)max_T * (size_t)(max_n_in / GGUF_Q8_0_BLOCK) * sizeof(float));
    s->tile = alloc64(s->tile_floats * (size_t)n_threads * sizeof(float));
    if (!s->xq || !s->xd || !s->tile)
        goto err;
    return s;
err:
    ops_scratch_free(s);
    return NULL;
}

void ops_scratch_free(ops_scratch *s) {
    if (!s)
        return;
    free(s->xq);
    free(s->xd);
    free(s->tile);
    free(s);
}

/* ------------------------------------------------------------------------- */
/* Matmul, decode path: stream each weight row once                          */
/* ------------------------------------------------------------------------- */

/* Threads for one call: as OpenMP is set for the calling thread, but no
 * more than the scratch has tile buffers for. */
static int team_size(const ops_scratch *s) {
    const int nt = omp_get_max_threads();
    return nt < s->n_threads ? nt : s->n_threads;
}

/* Bytes of one weight row. */
static size_t row_bytes(const ops_mat *w) {
    switch (w->type) {
    case GGUF_TT_F32: return (size_t)w->n_in * 4;
    case GGUF_TT_Q8_0: return (size_t)(w->n_in / GGUF_Q8_0_BLOCK) * GGUF_Q8_0_BYTES;
    default: return (size_t)w->n_in * 2;
    }
}

/* Element i of a float-type row, for scalar loops and vector tails. */
static inline float w_elem(const uint8_t *row, int64_t i, uint32_t type) {
    switch (type) {
    case GGUF_TT_F16: return ops_f16_to_f32(((const uint16_t *)row)[i]);
    case GGUF_TT_BF16: return ops_bf16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

/* The activations of the Q8_0 path, quantized once per call. */
typedef struct q8_act {
    const int8_t *q;        /* (T, n_in) */
    const float *d;         /* (T, n_in / 32) */
} q8_act;

/* Quantize activation row t of x (T, n_in) into the scratch. The scale is
 * rounded through f16 so the products equal llama.cpp's q8_0 x q8_0 dot. */
static void q8_act_row(ops_scratch *s, const float *x, int64_t n_in, int t) {
    const int64_t nb = n_in / GGUF_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        size_t at = (size_t)t * (size_t)n_in + (size_t)b * GGUF_Q8_0_BLOCK;
        float d = q8_block_quantize(s->xq + at, x + at);
        s->xd[(size_t)t * (size_t)nb + (size_t)b] = ops_f16_to_f32(ops_f32_to_f16(d));
    }
}

/* Scalar rows [o0, o1): the reference, and the decode path without AVX2. */
static void rows_scalar(float *y, int64_t ldy, const float *x, int T, const ops_mat *w,
                        const q8_act *xa, int64_t o0, int64_t o1) {
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

#ifdef OPS_AVX2

#define ALWAYS_INLINE inline __attribute__((always_inline))

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
 * constants at each call site; with R*C <= 8 the accumulators, the R
 * weight vectors and one x vector fit the 16 ymm registers.
 * y: (C, ldy) at the first output; x: (C, n); rows rb bytes apart. */
static ALWAYS_INLINE void tile_float(float *y, int64_t ldy, const uint8_t *w, size_t rb, uint32_t type,
                                     const float *x, int64_t n, const int R, const int C) {
    __m256 acc[4][4];  /* fully unrolled below, so it lives in registers */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (type != GGUF_TT_F32 && (i & 31) == 0)  /* once per 64-byte line */
                _mm_prefetch((const char *)(w + (size_t)r * rb) + 2 * i + OPS_PREFETCH, _MM_HINT_T0);
            wv[r] = w_load8(w + (size_t)r * rb, i, type);
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256 xv = _mm256_loadu_ps(x + (size_t)c * (size_t)n + (size_t)i);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            float s = hsum8(acc[r][c]);
            for (int64_t j = i; j < n; j++)
                s += w_elem(w + (size_t)r * rb, j, type) * x[(size_t)c * (size_t)n + (size_t)j];
            y[(size_t)c * (size_t)ldy + (size_t)r] = s;
        }
}

/* Rows [o0, o1) of a float-type weight against all T activations. Four rows
 * are taken at a time and stay in L1 while the activations pass by, so DRAM
 * sees each row once whatever T is. */
static ALWAYS_INLINE void rows_float(float *y, int64_t ldy, const float *x, int T, const ops_mat *w,
                                     int64_t o0, int64_t o1, const uint32_t type) {
    const int64_t n = w->n_in;
    const size_t rb = row_bytes(w);
    int64_t o = o0;
    for (; o + 4 <= o1; o += 4) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        int t = 0;
        for (; t + 2 <= T; t += 2)
            tile_float(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, type,
                       x + (size_t)t * (size_t)n, n, 4, 2);
        if (t < T)
            tile_float(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, type,
                       x + (size_t)t * (size_t)n, n, 4, 1);
    }
    for (; o < o1; o++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        int t = 0;
        for (; t + 4 <= T; t += 4)
            tile_float(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, type,
                       x + (size_t)t * (size_t)n, n, 1, 4);
        for (; t < T; t++)
            tile_float(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, type,
                       x + (size_t)t * (size_t)n, n, 1, 1);
    }
}

static void rows_f32(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, int64_t o0, int64_t o1) {
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
static ALWAYS_INLINE void tile_q8(float *y, int64_t ldy, const uint8_t *w, size_t rb, int64_t nb,
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
            y[(size_t)c * (size_t)ldy + (size_t)r] = hsum8(acc[r][c]);
}

static void rows_q8(float *y, int64_t ldy, int T, const ops_mat *w, const q8_act *xa, int64_t o0, int64_t o1) {
    const int64_t n = w->n_in, nb = n / GGUF_Q8_0_BLOCK;
    const size_t rb = row_bytes(w);
    int64_t o = o0;
#define Q8_AT(R, C) \
    tile_q8(y + (size_t)t * (size_t)ldy + (size_t)o, ldy, row, rb, nb, \
            xa->q + (size_t)t * (size_t)n, xa->d + (size_t)t * (size_t)nb, n, R, C)
    for (; o + 4 <= o1; o += 4) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * rb;
        int t = 0;
        for (; t + 2 <= T; t += 2)
            Q8_AT(4, 2);
        if (t < T)
            Q8_AT(4, 1);
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

/* One row block of the decode path, by the vector kernel where there is one. */
static void rows_block(float *y, int64_t ldy, const float *x, int T, const ops_mat *w,
                       const q8_act *xa, int64_t o0, int64_t o1, int ref) {
#ifdef OPS_AVX2
    if (!ref) {
        switch (w->type) {
        case GGUF_TT_F32: rows_f32(y, ldy, x, T, w, o0, o1); return;
        case GGUF_TT_F16: rows_f16(y, ldy, x, T, w, o0, o1); return;
        case GGUF_TT_BF16: rows_bf16(y, ldy, x, T, w, o0, o1); return;
        case GGUF_TT_Q8_0: rows_q8(y, ldy, T, w, xa, o0, o1); return;
        }
    }
#endif
    rows_scalar(y, ldy, x, T, w, xa, o0, o1);
}

/* The decode path: parallel over blocks of output rows. The Q8_0
 * activations are quantized first, by the same threads, before the barrier
 * that ends the first loop. */
static void matmul_rows(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s, int ref) {
    const int64_t n_out = w->n_out, n = w->n_in;
    const int64_t n_blocks = (n_out + OPS_ROW_BLOCK - 1) / OPS_ROW_BLOCK;
    const int q8 = w->type == GGUF_TT_Q8_0;
    q8_act xa = {s->xq, s->xd};
    const int nt = (int64_t)T * n_out * n < OPS_PAR_MIN_MACS ? 1 : team_size(s);
#pragma omp parallel num_threads(nt)
    {
        if (q8) {
#pragma omp for schedule(static)
            for (int t = 0; t < T; t++)
                q8_act_row(s, x, n, t);
        }
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < n_blocks; blk++) {
            const int64_t o0 = blk * OPS_ROW_BLOCK;
            const int64_t o1 = o0 + OPS_ROW_BLOCK < n_out ? o0 + OPS_ROW_BLOCK : n_out;
            rows_block(y, ldy, x, T, w, &xa, o0, o1, ref);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Matmul, prefill path: sgemm on disjoint column ranges                     */
/* ------------------------------------------------------------------------- */

/* y[:, o0:o0+rows] = x W[o0:o0+rows]^T for F32 weights in place. */
static void sgemm_cols(float *y, int64_t ldy, const float *x, int T, const float *wrows, int64_t rows, int64_t n) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, (int)rows, (int)n, 1.0f, x, (int)n,
                wrows, (int)n, 0.0f, y, (int)ldy);
}

/* Each thread owns one contiguous range of output columns (a multiple of 16,
 * so no two threads share a line of y) and runs single-threaded sgemm on it:
 * in place for F32, tile by tile through its own dequantized buffer for
 * F16/BF16. The weights are read once per call either way. */
static void matmul_sgemm(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s) {
    const int64_t n_out = w->n_out, n = w->n_in;
    const int nt = (int64_t)T * n_out * n < OPS_PAR_MIN_MACS ? 1 : team_size(s);
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t chunk = (n_out + k - 1) / k;
        chunk = (chunk + 15) / 16 * 16;
        const int64_t o0 = (int64_t)id * chunk;
        const int64_t o1 = o0 + chunk < n_out ? o0 + chunk : n_out;
        if (o0 < o1 && w->type == GGUF_TT_F32) {
            sgemm_cols(y + o0, ldy, x, T, (const float *)w->data + (size_t)o0 * (size_t)n, o1 - o0, n);
        } else if (o0 < o1) {
            float *tile = s->tile + (size_t)id * s->tile_floats;
            for (int64_t o = o0; o < o1; o += OPS_TILE_ROWS) {
                const int64_t rows = o1 - o < OPS_TILE_ROWS ? o1 - o : OPS_TILE_ROWS;
                for (int64_t r = 0; r < rows; r++)
                    dequant_row(tile + (size_t)r * (size_t)n, w, o + r);
                sgemm_cols(y + o, ldy, x, T, tile, rows, n);
            }
        }
    }
}

static void matmul_check(int64_t ldy, int T, const ops_mat *w, const ops_scratch *s) {
    (void)ldy; (void)T; (void)w; (void)s;
    assert(w->type == GGUF_TT_F32 || w->type == GGUF_TT_F16 || w->type == GGUF_TT_BF16 ||
           w->type == GGUF_TT_Q8_0);
    assert(w->type != GGUF_TT_Q8_0 || w->n_in % GGUF_Q8_0_BLOCK == 0);
    assert(ldy >= w->n_out);
    assert(s && T <= s->max_T && w->n_in <= s->max_n_in);
    assert(w->n_out < INT32_MAX && w->n_in < INT32_MAX && ldy < INT32_MAX); /* BLAS ints */
}

void ops_matmul(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s) {
    if (T <= 0 || w->n_out <= 0)
        return;
    matmul_check(ldy, T, w, s);
    if (w->type == GGUF_TT_Q8_0 || T <= (w->type == GGUF_TT_F32 ? OPS_SMALL_T_F32 : OPS_SMALL_T_HALF))
        matmul_rows(y, ldy, x, T, w, s, 0);
    else
        matmul_sgemm(y, ldy, x, T, w, s);
}

void ops_matmul_ref(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s) {
    if (T <= 0 || w->n_out <= 0)
        return;
    matmul_check(ldy, T, w, s);
    matmul_rows(y, ldy, x, T, w, s, 1);
}
