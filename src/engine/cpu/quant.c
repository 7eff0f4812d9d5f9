/*
 * quant.c - the quantized formats' common part: which kernel and which
 * activation format each type takes, and the activation quantizers. The
 * formats themselves are in quant_legacy.c and quant_k.c.
 */
#include "quant.h"
#include "quant_int.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "gguf.h"
#include "ops.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QUANT_AVX2_BUILD 1
#endif

const int8_t QUANT_IQ4NL_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

float quant_f16_at(const void *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return ops_f16_to_f32(h);
}

static const quant_kind *kind_of(uint32_t type) {
    for (int i = 0; i < quant_legacy_n; i++)
        if (quant_legacy_kinds[i].type == type) return &quant_legacy_kinds[i];
    for (int i = 0; i < quant_k_n; i++)
        if (quant_k_kinds[i].type == type) return &quant_k_kinds[i];
    return NULL;
}

/* The format follows from the block: the 32-element types have a scale
 * per 32 and meet activations scaled per 32; the 256-element ones combine
 * integer sub-block scales over 256 and meet one activation scale there. */
int quant_act_format(uint32_t type) {
    switch (gguf_type_block(type)) {
    case 32: return QUANT_ACT_Q8_32;
    case QUANT_K: return QUANT_ACT_Q8_K;
    default: return QUANT_ACT_NONE;
    }
}

int quant_act_dblock(int act) {
    return act == QUANT_ACT_Q8_K ? QUANT_K : 32;
}

int quant_act_sblock(int act) {
    return act == QUANT_ACT_Q8_K ? 16 : 32;
}

/* Which kernels this CPU runs: the AVX2 ones (which also use FMA and
 * F16C), and the VNNI ones in either encoding. F16C comes from CPUID leaf
 * 1 directly, since clang's builtin does not name it (real CPUs with AVX2
 * all have it; a hypervisor's CPU model may mask it), and AVX-VNNI from
 * leaf 7.1 for the same reason; the EVEX form needs AVX512-VL too, and
 * the builtin checks that the OS saves AVX-512 state. Read once before
 * main, like the compiler's own __builtin_cpu_supports table, and never
 * written again: CPUID traps to the hypervisor in a VM (9 us a call
 * measured here), and quant_dot is asked at every product call. */
static int cpu_isa[QUANT_ISA_N];

__attribute__((constructor)) static void cpu_probe(void) {
    cpu_isa[QUANT_ISA_SCALAR] = 1;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    __builtin_cpu_init();
    const int avx2 = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx2") &&
                     __builtin_cpu_supports("fma");
    cpu_isa[QUANT_ISA_AVX2] = avx2;
    cpu_isa[QUANT_ISA_AVXVNNI] = avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
    cpu_isa[QUANT_ISA_AVX512VNNI] =
        avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl");
#endif
}

quant_dot_fn *quant_dot_isa(uint32_t type, int isa) {
    const quant_kind *k = kind_of(type);
    if (!k || isa < 0 || isa >= QUANT_ISA_N || !cpu_isa[isa]) return NULL;
    switch (isa) {
    case QUANT_ISA_SCALAR: return k->dot_scalar;
    case QUANT_ISA_AVX2: return k->dot_avx2;
    case QUANT_ISA_AVXVNNI: return k->dot_vnni[QUANT_VNNI_VEX - 1];
    default: return k->dot_vnni[QUANT_VNNI_EVEX - 1];
    }
}

int quant_vnni(void) {
    return cpu_isa[QUANT_ISA_AVXVNNI] ? QUANT_VNNI_VEX : cpu_isa[QUANT_ISA_AVX512VNNI] ? QUANT_VNNI_EVEX : 0;
}

quant_dot_fn *quant_dot_scalar(uint32_t type) {
    return quant_dot_isa(type, QUANT_ISA_SCALAR);
}

quant_dot_fn *quant_dot_avx2(uint32_t type) {
    return quant_dot_isa(type, QUANT_ISA_AVX2);
}

/* The VEX encoding first: shorter, and its kernels are the same. */
quant_dot_fn *quant_dot(uint32_t type) {
    static const int best[] = {QUANT_ISA_AVXVNNI, QUANT_ISA_AVX512VNNI, QUANT_ISA_AVX2, QUANT_ISA_SCALAR};
    for (size_t i = 0; i < sizeof best / sizeof best[0]; i++) {
        quant_dot_fn *f = quant_dot_isa(type, best[i]);
        if (f) return f;
    }
    return NULL;
}

void quant_dequant(float *out, const void *w, uint32_t type, int64_t nb) {
    const quant_kind *k = kind_of(type);
    if (k) k->dequant(out, w, nb);
}

int quant_quantize(void *out, const float *x, uint32_t type, int64_t n) {
    const quant_kind *k = kind_of(type);
    const int block = gguf_type_block(type);
    if (!k || !k->quantize || block <= 1 || n % block) return -1;
    k->quantize(out, x, n / block);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Activations                                                               */
/* ------------------------------------------------------------------------- */

/* Quantize n (a multiple of 32) floats with one scale d = max|x| / 127,
 * q = round(x / d) with halves away from zero (roundf), and return d. The
 * vector path reproduces roundf exactly, so both give the same bytes. */
static float block_quantize(int8_t *q, const float *x, int64_t n) {
#ifdef QUANT_AVX2_BUILD
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
        a = _mm256_max_ps(a, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), vid);
            __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            /* p - t is exact; a fraction of at least one half rounds away. */
            __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
            __m256 step = _mm256_or_ps(_mm256_and_ps(p, sign), one);
            v[k] = _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, step)));
        }
        /* The packs interleave 128-bit lanes; the permute puts them back. */
        __m256i p16a = _mm256_packs_epi32(v[0], v[1]), p16b = _mm256_packs_epi32(v[2], v[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + i), p8);
    }
    return d;
#else
    float amax = 0.0f;
    for (int64_t j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t j = 0; j < n; j++)
        q[j] = (int8_t)roundf(x[j] * id);
    return d;
#endif
}

static void sums(int16_t *s, const int8_t *q, int64_t n, int sblock) {
    for (int64_t i = 0; i < n; i += sblock) {
        int sum = 0;
        for (int j = 0; j < sblock; j++)
            sum += q[i + j];
        s[i / sblock] = (int16_t)sum;
    }
}

void quant_act_row(int act, int8_t *q, float *d, int16_t *s, const float *x, int64_t n) {
    const int db = quant_act_dblock(act);
    for (int64_t b = 0; b < n / db; b++) {
        const float dd = block_quantize(q + b * db, x + b * db, db);
        /* Q8_32's scale is rounded through f16 as ggml's Q8_0 stores it,
         * so Q8_0 products equal llama.cpp's q8_0 x q8_0 dot. */
        d[b] = act == QUANT_ACT_Q8_K ? dd : ops_f16_to_f32(ops_f32_to_f16(dd));
    }
    if (s) sums(s, q, n, quant_act_sblock(act));
}
