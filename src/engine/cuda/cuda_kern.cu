/*
 * cuda_kern.cu - the CUDA backend's kernels; see cuda_kern.h. Written for
 * correctness first and checked against the CPU kernels by test_cuda.c;
 * the decode product (ck_matvec) and attention are the two that set the
 * speed, and both are simple designs that a GPU session must measure
 * (bench/gpu.c) before anyone tunes them.
 */
#include "cuda_kern.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#define WARP 32
#define ROW_THREADS 256     /* threads of the one-block-per-row kernels */
#define MV_WARPS 4          /* weight rows per ck_matvec block (one a warp) */
#define MV_TC 8             /* activation rows per ck_matvec block */
#define ATT_WARPS 4         /* warps sharing one (token, head) of attention */
#define Q8_0_BYTES 34       /* f16 scale + 32 int8 */
#define Q4_K_BYTES 144      /* f16 d, f16 dmin, 12 bytes of scales, 128 of nibbles */
#define Q4_0_BYTES 18       /* f16 scale, 16 bytes of nibbles */
#define Q5_0_BYTES 22       /* f16 scale, 4 bytes of fifth bits, 16 of nibbles */
#define Q5_K_BYTES 176      /* Q4_K's fields, then 32 bytes of fifth bits before the nibbles */
#define Q6_K_BYTES 210      /* 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, f16 d */

/* ---- element access ------------------------------------------------------- */

__device__ __forceinline__ float f16_at(const uint8_t *p) {
    /* Every f16 of a block sits at an even offset of an even-sized row, and
     * rows start at cudaMalloc's alignment: a 2-byte load is aligned. */
    return __half2float(*reinterpret_cast<const __half *>(p));
}

/* Q4_K sub-block j's 6-bit scale and min from the 12 bytes at q (ggml's
 * get_scale_min_k4, cpu/quant_k.c's k4_scales). */
__device__ __forceinline__ void q4k_scale_min(int j, const uint8_t *q, float *sc, float *m) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Element i of a row of a supported type: slow per element, used where
 * each element is read once (embeddings, dequantized tiles). */
__device__ float dq_elem(const uint8_t *row, uint32_t type, int64_t i) {
    switch (type) {
    case CK_F32: return reinterpret_cast<const float *>(row)[i];
    case CK_F16: return __half2float(reinterpret_cast<const __half *>(row)[i]);
    case CK_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(row)[i]);
    case CK_Q8_0: {
        const uint8_t *b = row + (size_t)(i / 32) * Q8_0_BYTES;
        return f16_at(b) * (float)(int8_t)b[2 + i % 32];
    }
    case CK_Q4_K:
    case CK_Q5_K: {
        /* element 64g + l (l < 32): low nibble of qs[32g + l], 64g + 32 + l
         * its high nibble; Q5_K adds bit e / 32 of qh[e % 32] as 16 */
        const int k5 = type == CK_Q5_K;
        const uint8_t *b = row + (size_t)(i / 256) * (k5 ? Q5_K_BYTES : Q4_K_BYTES);
        const int e = (int)(i % 256), byte = b[(k5 ? 48 : 16) + 32 * (e / 64) + e % 32];
        int q = (e % 64) < 32 ? byte & 0xF : byte >> 4;
        if (k5) q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
        float sc, m;
        q4k_scale_min(e / 32, b + 4, &sc, &m);
        return f16_at(b) * sc * (float)q - f16_at(b + 2) * m;
    }
    case CK_Q6_K: {
        /* element 128h + 32k + l: low 4 bits from ql[64h + 32(k % 2) + l]
         * (low nibble for k < 2), high 2 bits at 2k of qh[32h + l]; less 32 */
        const uint8_t *b = row + (size_t)(i / 256) * Q6_K_BYTES;
        const int e = (int)(i % 256), h = e / 128, k = (e % 128) / 32, l = e % 32;
        const int lb = b[64 * h + 32 * (k % 2) + l];
        const int q = ((k < 2 ? lb & 0xF : lb >> 4) | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
        return f16_at(b + 208) * (float)(int8_t)b[192 + e / 16] * (float)q;
    }
    case CK_Q4_0:
    case CK_Q5_0: {
        /* element j of a block: the low nibble of qs[j] (j < 16), else the
         * high nibble of qs[j - 16]; Q5_0's fifth bit is bit j of qh */
        const int q5 = type == CK_Q5_0, j = (int)(i % 32);
        const uint8_t *b = row + (size_t)(i / 32) * (q5 ? Q5_0_BYTES : Q4_0_BYTES), *qs = b + (q5 ? 6 : 2);
        int u = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
        if (q5) u |= ((b[2 + j / 8] >> (j % 8)) & 1) << 4;
        return (float)(u - (q5 ? 16 : 8)) * f16_at(b);
    }
    default: return 0.0f; /* unreachable: types are checked at load */
    }
}

extern "C" int ck_type_supported(uint32_t type) {
    switch (type) {
    case CK_F32: case CK_F16: case CK_BF16: case CK_Q8_0: case CK_Q4_K:
    case CK_Q4_0: case CK_Q5_0: case CK_Q5_K: case CK_Q6_K: return 1;
    default: return 0;
    }
}

__host__ __device__ static inline size_t row_bytes(uint32_t type, int64_t n_in) {
    switch (type) {
    case CK_F32: return (size_t)n_in * 4;
    case CK_F16:
    case CK_BF16: return (size_t)n_in * 2;
    case CK_Q8_0: return (size_t)(n_in / 32) * Q8_0_BYTES;
    case CK_Q4_K: return (size_t)(n_in / 256) * Q4_K_BYTES;
    case CK_Q4_0: return (size_t)(n_in / 32) * Q4_0_BYTES;
    case CK_Q5_0: return (size_t)(n_in / 32) * Q5_0_BYTES;
    case CK_Q5_K: return (size_t)(n_in / 256) * Q5_K_BYTES;
    case CK_Q6_K: return (size_t)(n_in / 256) * Q6_K_BYTES;
    default: return 0;
    }
}

extern "C" size_t ck_row_bytes(uint32_t type, int64_t n_in) { return row_bytes(type, n_in); }

/* ---- reductions ------------------------------------------------------------ */

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum of v over the block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets it. red: 32 floats of shared memory. */
__device__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}

/* 1 / sqrt(mean(x^2) + eps) of one row of n, over the block. */
__device__ float row_rms_inv(const float *x, int n, float eps, float *red) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss, red);
    return 1.0f / sqrtf(ss / (float)n + eps);
}

static cudaError_t launched(void) { return cudaGetLastError(); }

/* ---- embedding, norms, gates ---------------------------------------------- */

__global__ void embed_kernel(float *x, ck_mat emb, const int32_t *tok, float scale) {
    const int t = blockIdx.x;
    const size_t rb = row_bytes(emb.type, emb.n_in);
    const uint8_t *row = static_cast<const uint8_t *>(emb.data) + (size_t)tok[t] * rb;
    for (int64_t i = threadIdx.x; i < emb.n_in; i += blockDim.x)
        x[(size_t)t * emb.n_in + i] = dq_elem(row, emb.type, i) * scale;
}

extern "C" cudaError_t ck_embed(float *x, ck_mat emb, const int32_t *tok, int T, float scale, cudaStream_t st) {
    if (T > 0) embed_kernel<<<T, ROW_THREADS, 0, st>>>(x, emb, tok, scale);
    return launched();
}

__global__ void residual_norm_kernel(float *x, float *xb, const float *post, const float *w, int dim, float eps,
                                     int add) {
    __shared__ float red[WARP];
    float *xr = x + (size_t)blockIdx.x * dim, *br = xb + (size_t)blockIdx.x * dim;
    if (add) {
        if (post) {
            const float inv = row_rms_inv(br, dim, eps, red);
            for (int i = threadIdx.x; i < dim; i += blockDim.x) br[i] = br[i] * inv * post[i];
        }
        /* Each thread adds the elements it normalized: no barrier needed. */
        for (int i = threadIdx.x; i < dim; i += blockDim.x) xr[i] += br[i];
        __syncthreads();
    }
    if (w) {
        const float inv = row_rms_inv(xr, dim, eps, red);
        for (int i = threadIdx.x; i < dim; i += blockDim.x) br[i] = xr[i] * inv * w[i];
    }
}

extern "C" cudaError_t ck_residual_norm(float *x, float *xb, const float *post, const float *w, int T, int dim,
                                        float eps, int add, cudaStream_t st) {
    if (T > 0) residual_norm_kernel<<<T, ROW_THREADS, 0, st>>>(x, xb, post, w, dim, eps, add);
    return launched();
}

__global__ void rmsnorm_rows_kernel(float *out, const float *x, const int32_t *rows, const float *w, int dim,
                                    float eps) {
    __shared__ float red[WARP];
    const int r = blockIdx.x;
    const float *xr = x + (size_t)(rows ? rows[r] : r) * dim;
    const float inv = row_rms_inv(xr, dim, eps, red);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[(size_t)r * dim + i] = xr[i] * inv * w[i];
}

extern "C" cudaError_t ck_rmsnorm_rows(float *out, const float *x, const int32_t *rows, const float *w, int R,
                                       int dim, float eps, cudaStream_t st) {
    if (R > 0) rmsnorm_rows_kernel<<<R, ROW_THREADS, 0, st>>>(out, x, rows, w, dim, eps);
    return launched();
}

#define GELU_K2 1.5957691216057308f /* 2 sqrt(2/pi), as ops.c */

__global__ void gate_kernel(float *h, const float *u, int64_t n, int gelu) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = h[i];
        const float z = gelu ? -GELU_K2 * fmaf(0.044715f * g, g * g, g) : -g;
        h[i] = g / (1.0f + expf(z)) * u[i];
    }
}

/* Blocks for an elementwise pass over n: enough to fill any GPU, the rest
 * done by striding. */
static int grid_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (int)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

extern "C" cudaError_t ck_gate(float *h, const float *u, int64_t n, int gelu, cudaStream_t st) {
    if (n > 0) gate_kernel<<<grid_for(n), 256, 0, st>>>(h, u, n, gelu);
    return launched();
}

__global__ void softcap_kernel(float *x, int64_t n, float cap) {
    const float inv = 1.0f / cap;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] * inv);
}

extern "C" cudaError_t ck_softcap(float *x, int64_t n, float cap, cudaStream_t st) {
    if (n > 0) softcap_kernel<<<grid_for(n), 256, 0, st>>>(x, n, cap);
    return launched();
}

/* ---- q/k/v: biases, head norms, rope, cache store -------------------------- */

/* RMSNorm of one head of hd in place by one warp. */
__device__ void head_norm_warp(float *x, const float *w, int hd, float eps) {
    const int lane = threadIdx.x % WARP;
    float ss = 0.0f;
    for (int i = lane; i < hd; i += WARP) ss += x[i] * x[i];
    const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)hd + eps);
    for (int i = lane; i < hd; i += WARP) x[i] = x[i] * inv * w[i];
}

__device__ __forceinline__ float *kv_row(float *kv, const ck_tokens &tk, const ck_geom &g, int t, int which) {
    const int p = tk.pos[t];
    const int32_t blk = tk.tables[tk.tab_off[tk.seq[t]] + p / g.bs];
    const size_t kvd = (size_t)g.n_kv_heads * g.head_dim;
    return kv + (size_t)blk * g.block_floats + (((size_t)g.layer * 2 + which) * g.bs + (size_t)(p % g.bs)) * kvd;
}

__global__ void qkv_post_kernel(float *q, float *k, float *v, const float *bq, const float *bk, const float *bv,
                                const float *q_norm, const float *k_norm, const double *inv_freq, float *kv,
                                ck_tokens tk, ck_geom g) {
    const int t = blockIdx.x, hd = g.head_dim, half = g.n_rot / 2;
    const int warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const size_t qd = (size_t)g.n_heads * hd, kvd = (size_t)g.n_kv_heads * hd;
    float *qt = q + (size_t)t * qd, *kt = k + (size_t)t * kvd, *vt = v + (size_t)t * kvd;
    for (size_t i = threadIdx.x; i < qd; i += blockDim.x)
        if (bq) qt[i] += bq[i];
    for (size_t i = threadIdx.x; i < kvd; i += blockDim.x) {
        if (bk) kt[i] += bk[i];
        if (bv) vt[i] += bv[i];
    }
    __syncthreads();
    if (q_norm)
        for (int h = warp; h < g.n_heads; h += nw) head_norm_warp(qt + (size_t)h * hd, q_norm, hd, g.eps);
    if (k_norm)
        for (int h = warp; h < g.n_kv_heads; h += nw) head_norm_warp(kt + (size_t)h * hd, k_norm, hd, g.eps);
    __syncthreads();
    const double p = (double)tk.pos[t];
    const int pairs = (g.n_heads + g.n_kv_heads) * half;
    for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
        const int h = idx / half, i = idx % half;
        float *vec = h < g.n_heads ? qt + (size_t)h * hd : kt + (size_t)(h - g.n_heads) * hd;
        double sn, cs;
        sincos(p * inv_freq[i], &sn, &cs);
        const float c = (float)cs, s = (float)sn;
        const int a = g.rope_neox ? i : 2 * i, b = g.rope_neox ? i + half : 2 * i + 1;
        const float x0 = vec[a], x1 = vec[b];
        vec[a] = x0 * c - x1 * s;
        vec[b] = x0 * s + x1 * c;
    }
    __syncthreads();
    float *kd = kv_row(kv, tk, g, t, 0), *vd = kv_row(kv, tk, g, t, 1);
    for (size_t i = threadIdx.x; i < kvd; i += blockDim.x) {
        kd[i] = kt[i];
        vd[i] = vt[i];
    }
}

extern "C" cudaError_t ck_qkv_post(float *q, float *k, float *v, const float *bq, const float *bk, const float *bv,
                                   const float *q_norm, const float *k_norm, const double *inv_freq, float *kv,
                                   ck_tokens tk, int T, ck_geom g, cudaStream_t st) {
    if (T > 0)
        qkv_post_kernel<<<T, ROW_THREADS, 0, st>>>(q, k, v, bq, bk, bv, q_norm, k_norm, inv_freq, kv, tk, g);
    return launched();
}

/* ---- attention ------------------------------------------------------------- */

/* One block per (token, query head). Shared memory: the query (hd), each
 * warp's running output (ATT_WARPS x hd), and each warp's max and sum. */
__global__ void attention_kernel(float *att, const float *q, const float *kv, ck_tokens tk, ck_geom g) {
    extern __shared__ float sm[];
    const int t = blockIdx.x, h = blockIdx.y, hd = g.head_dim;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int group = g.n_heads / g.n_kv_heads, kvh = h / group;
    const size_t qd = (size_t)g.n_heads * hd, kvd = (size_t)g.n_kv_heads * hd;
    float *qs = sm, *acc = sm + hd + (size_t)warp * hd, *ms = sm + (size_t)(1 + ATT_WARPS) * hd, *ls = ms + ATT_WARPS;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) qs[i] = q[(size_t)t * qd + (size_t)h * hd + i];
    for (int i = lane; i < hd; i += WARP) acc[i] = 0.0f;
    __syncthreads();
    const int p = tk.pos[t];
    const int lo = g.window > 0 && p >= g.window ? p - g.window + 1 : 0;
    const int32_t *tab = tk.tables + tk.tab_off[tk.seq[t]];
    float m = -INFINITY, l = 0.0f;
    for (int j = lo + warp; j <= p; j += ATT_WARPS) {
        const float *kr = kv + (size_t)tab[j / g.bs] * g.block_floats +
                          (((size_t)g.layer * 2) * g.bs + (size_t)(j % g.bs)) * kvd + (size_t)kvh * hd;
        const float *vr = kr + (size_t)g.bs * kvd; /* the value plane follows the key plane */
        float s = 0.0f;
        for (int i = lane; i < hd; i += WARP) s += qs[i] * kr[i];
        s = warp_sum(s) * g.attn_scale;
        const float mn = fmaxf(m, s), c = expf(m - mn), e = expf(s - mn);
        l = l * c + e;
        for (int i = lane; i < hd; i += WARP) acc[i] = acc[i] * c + e * vr[i];
        m = mn;
    }
    if (lane == 0) {
        ms[warp] = m;
        ls[warp] = l;
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, ms[w]);
    float den = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - M);
        den += ls[w] * f[w];
    }
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float num = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) num += sm[hd + (size_t)w * hd + i] * f[w];
        att[(size_t)t * qd + (size_t)h * hd + i] = num / den;
    }
}

extern "C" cudaError_t ck_attention(float *att, const float *q, const float *kv, ck_tokens tk, int T, ck_geom g,
                                    cudaStream_t st) {
    if (T <= 0) return launched();
    const size_t shm = ((size_t)(1 + ATT_WARPS) * g.head_dim + 2 * ATT_WARPS) * sizeof(float);
    if (shm > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
        if (e != cudaSuccess) return e;
    }
    attention_kernel<<<dim3((unsigned)T, (unsigned)g.n_heads), ATT_WARPS * WARP, shm, st>>>(att, q, kv, tk, g);
    return launched();
}

/* ---- matrix-vector products ------------------------------------------------ */

template <int TC>
__device__ __forceinline__ void axpy_cols(float (&acc)[TC], float w, const float *x, int64_t n_in, int64_t i,
                                          int tn) {
#pragma unroll
    for (int c = 0; c < TC; c++)
        if (c < tn) acc[c] = fmaf(w, x[(size_t)c * n_in + i], acc[c]);
}

/* Float types: 8 consecutive elements a lane per step (16 or 32 bytes),
 * where rows allow it (n_in a multiple of 8); else one element a lane. */
template <uint32_t TYPE>
__device__ __forceinline__ float ld_float(const uint8_t *row, int64_t i) {
    if (TYPE == CK_F32) return reinterpret_cast<const float *>(row)[i];
    if (TYPE == CK_F16) return __half2float(reinterpret_cast<const __half *>(row)[i]);
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(row)[i]);
}

template <uint32_t TYPE>
__device__ void mv_float_row(float (&acc)[MV_TC], const uint8_t *row, const float *x, int64_t n_in, int tn) {
    const int lane = threadIdx.x % WARP;
    if (n_in % 8 == 0 && TYPE != CK_F32) {
        /* unrolled so a warp has several 512-byte loads in flight: one
         * at a time leaves HBM idle between them */
#pragma unroll 4
        for (int64_t i0 = (int64_t)lane * 8; i0 < n_in; i0 += WARP * 8) {
            const uint4 raw = *reinterpret_cast<const uint4 *>(row + (size_t)i0 * 2);
            const uint16_t *hv = reinterpret_cast<const uint16_t *>(&raw);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float w = TYPE == CK_F16 ? __half2float(__ushort_as_half(hv[e]))
                                               : __bfloat162float(__ushort_as_bfloat16(hv[e]));
                axpy_cols<MV_TC>(acc, w, x, n_in, i0 + e, tn);
            }
        }
    } else {
        for (int64_t i = lane; i < n_in; i += WARP) axpy_cols<MV_TC>(acc, ld_float<TYPE>(row, i), x, n_in, i, tn);
    }
}

/* Q8_0: a warp covers 4 blocks a step, each lane 4 quants of one block
 * (read as two 2-byte loads: blocks are 34 bytes, so only 2-byte aligned). */
__device__ void mv_q8_0_row(float (&acc)[MV_TC], const uint8_t *row, const float *x, int64_t n_in, int tn) {
    const int lane = threadIdx.x % WARP;
    const int64_t nb = n_in / 32;
#pragma unroll 4
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        const int64_t b = b0 + lane / 8;
        if (b >= nb) break;
        const uint8_t *blk = row + (size_t)b * Q8_0_BYTES;
        const float d = f16_at(blk);
        const int j = (lane % 8) * 4;
        const uint16_t lo = *reinterpret_cast<const uint16_t *>(blk + 2 + j);
        const uint16_t hi = *reinterpret_cast<const uint16_t *>(blk + 4 + j);
        const int8_t qv[4] = {(int8_t)(lo & 0xFF), (int8_t)(lo >> 8), (int8_t)(hi & 0xFF), (int8_t)(hi >> 8)};
#pragma unroll
        for (int e = 0; e < 4; e++) axpy_cols<MV_TC>(acc, d * (float)qv[e], x, n_in, b * 32 + j + e, tn);
    }
}

/* Q4_K: a warp covers one super-block a step; lane l takes byte l of each
 * 32-byte group g, whose nibbles are elements 64g + l and 64g + 32 + l. */
__device__ void mv_q4_k_row(float (&acc)[MV_TC], const uint8_t *row, const float *x, int64_t n_in, int tn) {
    const int lane = threadIdx.x % WARP;
    const int64_t nb = n_in / 256;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * Q4_K_BYTES;
        const float d = f16_at(blk), dmin = f16_at(blk + 2);
#pragma unroll
        for (int gi = 0; gi < 4; gi++) {
            const int byte = blk[16 + 32 * gi + lane];
            float sc0, m0, sc1, m1;
            q4k_scale_min(2 * gi, blk + 4, &sc0, &m0);
            q4k_scale_min(2 * gi + 1, blk + 4, &sc1, &m1);
            const int64_t e0 = b * 256 + 64 * gi + lane;
            axpy_cols<MV_TC>(acc, d * sc0 * (float)(byte & 0xF) - dmin * m0, x, n_in, e0, tn);
            axpy_cols<MV_TC>(acc, d * sc1 * (float)(byte >> 4) - dmin * m1, x, n_in, e0 + 32, tn);
        }
    }
}

template <uint32_t TYPE>
__global__ void matvec_kernel(float *y, int64_t ldy, const float *x, int T, ck_mat w) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + warp;
    const int t0 = blockIdx.y * MV_TC;
    if (r >= w.n_out) return;
    const int tn = T - t0 < MV_TC ? T - t0 : MV_TC;
    const uint8_t *row = static_cast<const uint8_t *>(w.data) + (size_t)r * row_bytes(TYPE, w.n_in);
    const float *xt = x + (size_t)t0 * w.n_in;
    float acc[MV_TC];
#pragma unroll
    for (int c = 0; c < MV_TC; c++) acc[c] = 0.0f;
    if (TYPE == CK_Q8_0) mv_q8_0_row(acc, row, xt, w.n_in, tn);
    else if (TYPE == CK_Q4_K) mv_q4_k_row(acc, row, xt, w.n_in, tn);
    else if (TYPE == CK_F32 || TYPE == CK_F16 || TYPE == CK_BF16) mv_float_row<TYPE>(acc, row, xt, w.n_in, tn);
    else /* the generic types: element by element */
        for (int64_t i = lane; i < w.n_in; i += WARP) axpy_cols<MV_TC>(acc, dq_elem(row, TYPE, i), xt, w.n_in, i, tn);
#pragma unroll
    for (int c = 0; c < MV_TC; c++) {
        const float s = warp_sum(acc[c]);
        if (lane == 0 && c < tn) y[(size_t)(t0 + c) * ldy + r] = s;
    }
}

extern "C" cudaError_t ck_matvec(float *y, int64_t ldy, const float *x, int T, ck_mat w, cudaStream_t st) {
    if (T <= 0) return launched();
    const dim3 grid((unsigned)((w.n_out + MV_WARPS - 1) / MV_WARPS), (unsigned)((T + MV_TC - 1) / MV_TC));
    const int threads = MV_WARPS * WARP;
    switch (w.type) {
    case CK_F32: matvec_kernel<CK_F32><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_F16: matvec_kernel<CK_F16><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_BF16: matvec_kernel<CK_BF16><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q8_0: matvec_kernel<CK_Q8_0><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q4_K: matvec_kernel<CK_Q4_K><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q4_0: matvec_kernel<CK_Q4_0><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q5_0: matvec_kernel<CK_Q5_0><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q5_K: matvec_kernel<CK_Q5_K><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    case CK_Q6_K: matvec_kernel<CK_Q6_K><<<grid, threads, 0, st>>>(y, ldy, x, T, w); break;
    default: return cudaErrorInvalidValue;
    }
    return launched();
}

/* ---- conversions for the cuBLAS path ---------------------------------------- */

__global__ void dequant_rows_kernel(void *out, ck_mat w, int64_t r0, int64_t n, int bf16) {
    const size_t rb = row_bytes(w.type, w.n_in);
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / w.n_in, i = e % w.n_in;
        const float v = dq_elem(static_cast<const uint8_t *>(w.data) + (size_t)(r0 + r) * rb, w.type, i);
        if (bf16) static_cast<__nv_bfloat16 *>(out)[e] = __float2bfloat16_rn(v);
        else static_cast<__half *>(out)[e] = __float2half_rn(v);
    }
}

extern "C" cudaError_t ck_dequant_rows(void *out, ck_mat w, int64_t r0, int64_t nr, int bf16, cudaStream_t st) {
    const int64_t n = nr * w.n_in;
    if (n > 0) dequant_rows_kernel<<<grid_for(n), 256, 0, st>>>(out, w, r0, n, bf16);
    return launched();
}

__global__ void convert_kernel(void *out, const float *x, int64_t n, int bf16) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (bf16) static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16_rn(x[i]);
        else static_cast<__half *>(out)[i] = __float2half_rn(x[i]);
    }
}

extern "C" cudaError_t ck_convert(void *out, const float *x, int64_t n, int bf16, cudaStream_t st) {
    if (n > 0) convert_kernel<<<grid_for(n), 256, 0, st>>>(out, x, n, bf16);
    return launched();
}
