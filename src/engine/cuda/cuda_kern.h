/*
 * cuda_kern.h - the CUDA backend's kernels, as C-callable launchers (the
 * kernels themselves are C++ in cuda_kern.cu; nothing of C++ crosses this
 * header). Each launcher enqueues its kernel on the stream given and
 * returns the launch's cudaError_t (cudaGetLastError), so the caller checks
 * every launch; none synchronizes. Every pointer is device memory unless
 * said otherwise, and every kernel mirrors one CPU kernel of cpu/ops.c or
 * one phase of cpu/cpu_backend.c, which stays the reference test_cuda.c
 * holds them to.
 *
 * Weights keep the GGUF file's layout on the device (uploaded once, never
 * converted), so the products dequantize in the kernel: F32, F16, BF16,
 * Q8_0 and Q4_K with kernels of their own; Q4_0, Q5_0, Q5_K and Q6_K (the
 * partners of Q4_K/Q5_K in llama.cpp's _M mixes) through a generic one
 * that decodes element by element: correct, not tuned. Any other type is
 * refused when the model is loaded onto the device (ck_type_supported),
 * never met here.
 *
 * The KV cache: block b holds, for every layer, the keys and then the
 * values of bs positions, rows of kvd floats: kv[b][layer][k|v][slot][kvd],
 * block_floats floats per block (the CPU backend keeps each kv head's
 * slots as one run instead; blocks never move between backends).
 *
 * NOTHING HERE HAS RUN ON A GPU YET: it compiles for sm_80 and sm_90; see
 * docs/CUDA.md for what remains to be verified.
 */
#ifndef TS_CUDA_KERN_H
#define TS_CUDA_KERN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The GGUF type ids the kernels take (the values of gguf.h's GGUF_TT_*;
 * cuda_backend.c checks they agree). */
enum {
    CK_F32 = 0,
    CK_F16 = 1,
    CK_Q4_0 = 2,
    CK_Q5_0 = 6,
    CK_Q8_0 = 8,
    CK_Q4_K = 12,
    CK_Q5_K = 13,
    CK_Q6_K = 14,
    CK_BF16 = 30,
};

/* A weight matrix on the device, in the file's layout. */
typedef struct ck_mat {
    const void *data;       /* (n_out, n_in) row-major, of type */
    uint32_t type;          /* CK_* */
    int64_t n_out;          /* rows */
    int64_t n_in;           /* row length, whole blocks of the type */
} ck_mat;

/* The attention geometry of one layer and the cache's layout. */
typedef struct ck_geom {
    int n_heads, n_kv_heads, head_dim;
    int n_rot;              /* rotated elements of a head: even, <= head_dim */
    int rope_neox;          /* 1: pairs (i, i + n_rot/2); 0: (2i, 2i+1) */
    float eps;              /* RMSNorm epsilon of the q/k head norms */
    float attn_scale;       /* scores are q . k * attn_scale */
    int window;             /* > 0: a sliding-window layer attends to positions > p - window */
    int bs;                 /* positions per KV block */
    int layer;
    size_t block_floats;    /* floats per KV block: n_layers * 2 * bs * kvd */
} ck_geom;

/* Where each flattened token of a step comes from (device arrays). */
typedef struct ck_tokens {
    const int32_t *pos;     /* (T) position of the token in its sequence */
    const int32_t *seq;     /* (T) index of its sequence in the batch */
    const int32_t *tab_off; /* (n_seqs) offset of each sequence's table in tables */
    const int32_t *tables;  /* every sequence's block table, concatenated */
} ck_tokens;

/* 1 when the kernels multiply by (and embed from) matrices of type. */
int ck_type_supported(uint32_t type);
/* Bytes of one row of n_in elements of a supported type. */
size_t ck_row_bytes(uint32_t type, int64_t n_in);

/* x[t] = row tok[t] of emb, dequantized, times scale.  x: (T, emb.n_in). */
cudaError_t ck_embed(float *x, ck_mat emb, const int32_t *tok, int T, float scale, cudaStream_t st);

/* Per row t < T of width dim: when add, first xb = rmsnorm(xb) * post
 * (post may be NULL: no norm) and x += xb; then, when w is not NULL,
 * xb = rmsnorm(x) * w. The residual phase of cpu_backend.c's
 * residual_norm and output_logits. */
cudaError_t ck_residual_norm(float *x, float *xb, const float *post, const float *w, int T, int dim, float eps,
                             int add, cudaStream_t st);

/* out[r] = rmsnorm(x[rows[r]]) * w for r < R (rows NULL: row r).
 * out: (R, dim); x: (*, dim). */
cudaError_t ck_rmsnorm_rows(float *out, const float *x, const int32_t *rows, const float *w, int R, int dim,
                            float eps, cudaStream_t st);

/* For each token: q, k, v += their biases (NULL: none); q and k heads
 * RMSNorm'd by q_norm, k_norm (NULL: none); the first n_rot elements of
 * every q and k head rotated by the token's position (angles
 * pos * inv_freq[i] in double, as the CPU backend computes them); then k
 * and v stored at the token's cache slot. q: (T, n_heads * hd); k, v:
 * (T, n_kv_heads * hd); inv_freq: (n_rot / 2). */
cudaError_t ck_qkv_post(float *q, float *k, float *v, const float *bq, const float *bk, const float *bv,
                        const float *q_norm, const float *k_norm, const double *inv_freq, float *kv, ck_tokens tk,
                        int T, ck_geom g, cudaStream_t st);

/* att[t] = per query head h: softmax over the token's cached positions
 * lo..p of q[t]_h . K_j * attn_scale, times V_j, K and V those of kv head
 * h / (n_heads / n_kv_heads), read through the sequence's block table;
 * lo = 0, or p - window + 1 on a sliding-window layer. One launch covers
 * every token of every sequence in the batch, decodes and prefill chunks
 * alike (a prefill token attends causally to the chunk stored before it).
 * Online softmax (one pass, running max and sum), four warps per head each
 * over every fourth position, merged at the end. att, q: (T, n_heads * hd). */
cudaError_t ck_attention(float *att, const float *q, const float *kv, ck_tokens tk, int T, ck_geom g,
                         cudaStream_t st);

/* h = act(h) * u over n elements: SiLU (gelu 0) or GELU-tanh (gelu 1), the
 * formulas of ops_silu_mul and ops_gelu_tanh_mul. */
cudaError_t ck_gate(float *h, const float *u, int64_t n, int gelu, cudaStream_t st);
/* x = cap * tanh(x / cap) over n elements. */
cudaError_t ck_softcap(float *x, int64_t n, float cap, cudaStream_t st);

/* y = x W^T streaming each weight row once per 8 activation rows,
 * dequantizing in the kernel: the decode product (and the reference of the
 * cuBLAS path). y: (T, ldy), first n_out columns; x: (T, n_in). */
cudaError_t ck_matvec(float *y, int64_t ldy, const float *x, int T, ck_mat w, cudaStream_t st);

/* Rows [r0, r0 + nr) of w dequantized to f16 (or bf16 when bf16 is set)
 * into out, (nr, n_in): the tiles the cuBLAS path multiplies. */
cudaError_t ck_dequant_rows(void *out, ck_mat w, int64_t r0, int64_t nr, int bf16, cudaStream_t st);
/* out = x rounded to f16 (bf16 when bf16 is set), n elements. */
cudaError_t ck_convert(void *out, const float *x, int64_t n, int bf16, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
