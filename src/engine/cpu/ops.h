/*
 * ops.h - CPU kernels of the forward pass: pure functions over caller-owned
 * memory, output first, no allocation, shapes in comments.
 *
 * The one heavy kernel is ops_matmul: Y = X W^T for a weight W stored in
 * GGUF's row-major layout (n_out rows of n_in elements) in F32, F16, BF16,
 * Q8_0 or one of the quantized types of quant.h (Q4_0..Q5_1, IQ4_NL, the
 * K-quants, IQ4_XS), always in the file's own layout: no second copy of
 * the weights is kept (Q8_0's batched kernel regroups 8 rows at a time
 * into per-thread scratch, and F16/BF16 prefill dequantizes tiles of rows
 * there). It picks its method by the number of activation rows T:
 *   - small T (decode, T <= 16 for the float types): every weight row is
 *     streamed from memory once and applied to all T activation vectors
 *     (AVX2/FMA/F16C; Q8_0 by int8 dot products against activations
 *     quantized to Q8_0);
 *   - large T (prefill): F32/F16/BF16 go through OpenBLAS sgemm (F16/BF16
 *     dequantized a tile of rows at a time into per-thread scratch); Q8_0
 *     stays on its int8 kernel at every T, so a token's results do not
 *     depend on what else is in the batch;
 *   - the other quantized types run quant.h's integer kernels at every T
 *     for the same reason, each weight row against QUANT_MAX_C activation
 *     rows per pass, the activations quantized once per call.
 * ops_matmul_n runs several products of the same activations (q, k, v) and
 * ops_matmul_swiglu (ops_matmul_geglu) the gated pair of a llama (gemma) FFN
 * as one call: one list of work items, one quantization of the activations,
 * one barrier. Weights of
 * different types (quantized files mix them there) split the call by type.
 *
 * Threads come from OpenMP; OpenBLAS itself is kept single-threaded and
 * called from inside the OpenMP region on disjoint output tiles, so exactly
 * one pool of threads exists. The matmuls work in two settings:
 *   - called outside a parallel region, they open one of their own (at most
 *     the scratch's thread count, one thread for tiny products);
 *   - called inside a parallel region, every thread of the team must make
 *     the same call, as with an OpenMP worksharing construct; the work is
 *     shared among the team and the call ends with a barrier. This lets a
 *     caller run a whole forward pass in one region, paying one barrier per
 *     phase instead of a fork and a join per product.
 * Work is handed out in row blocks on demand, not split evenly up front, so
 * a thread that a busy machine deschedules delays the call by one block,
 * not by its whole share.
 *
 * Every kernel has a scalar path, so a build without AVX2 is complete; the
 * scalar path is also the reference the vector path is tested against.
 */
#ifndef TS_OPS_H
#define TS_OPS_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix in place (usually inside the GGUF mapping). */
typedef struct ops_mat {
    const void *data;       /* (n_out, n_in) row-major, of type */
    uint32_t type;          /* GGUF_TT_* */
    int64_t n_out;          /* rows */
    int64_t n_in;           /* row length; a whole number of the type's blocks */
} ops_mat;

/* Scratch for ops_matmul, sized once for the largest call (no allocation in
 * the step). One scratch serves one ops_matmul call at a time. */
typedef struct ops_scratch ops_scratch;

/* Allocate scratch for up to max_T activation rows of at most max_n_in
 * elements, with n_threads OpenMP threads. NULL on out of memory. */
ops_scratch *ops_scratch_new(int max_T, int64_t max_n_in, int n_threads);
void ops_scratch_free(ops_scratch *s);
size_t ops_scratch_bytes(const ops_scratch *s); /* what it allocated */

/* Set the OpenMP thread count used by the kernels (and pin OpenBLAS to one
 * thread). n <= 0 means all cores. Returns the count in force. OpenMP keeps
 * the count per calling thread: call this from the thread that runs the
 * kernels. ops_matmul never uses more threads than its scratch was made for. */
int ops_set_threads(int n);
/* 1 when OpenBLAS has fallen back to its generic kernels on a CPU it
 * does not know and the environment now names the kernels the CPU's
 * features allow (ops.c); the library reads it only as it loads, so the
 * caller, early in main, executes itself again (execv /proc/self/exe).
 * 0 when nothing needs changing, or the user set OPENBLAS_CORETYPE. */
int ops_blas_env(void);
/* The name of the kernel set OpenBLAS runs. *fallback (when not NULL):
 * NULL, or the library's own choice where ops_blas_env replaced it. */
const char *ops_blas_core(const char **fallback);

/* y = x W^T.  y: (T, ldy) with the first n_out columns written; x: (T, n_in).
 * T must be <= the scratch's max_T and n_in <= its max_n_in. */
void ops_matmul(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s);

/* Most products one ops_matmul_n call takes. */
#define OPS_MATMUL_MAX 4

/* y[i] = x w[i]^T for i < n (1..OPS_MATMUL_MAX): products of one x, as
 * ops_matmul each, with one work list per weight type. Every w[i] has the
 * same n_in; the types may differ (each type's products are one call, so
 * a mixed group costs a barrier more per extra type). */
void ops_matmul_n(int n, float *const *y, const int64_t *ldy, const float *x, int T, const ops_mat *const *w,
                  ops_scratch *s);

/* The llama FFN's gated half: h = silu(x Wg^T) * (x Wu^T), elementwise.
 * h, u: (T, ldh); u receives x Wu^T on the way (caller's scratch). Wg and Wu
 * have the same shape; of one type they run fused, of two as two products
 * and a pass over h. */
void ops_matmul_swiglu(float *h, float *u, int64_t ldh, const float *x, int T, const ops_mat *wg,
                       const ops_mat *wu, ops_scratch *s);

/* The same with a GELU gate (Gemma's GeGLU): h = gelu_tanh(x Wg^T) * (x Wu^T),
 * gelu_tanh as ops_gelu_tanh_mul. Same contract as ops_matmul_swiglu. */
void ops_matmul_geglu(float *h, float *u, int64_t ldh, const float *x, int T, const ops_mat *wg,
                      const ops_mat *wu, ops_scratch *s);

/* 1 when the kernels can multiply by w: a float type, or a quantized type
 * with a kernel on this CPU (quant_dot) and rows of whole blocks; each
 * dimension positive and within a BLAS int. Every
 * matrix a kernel (or ops_dequant_row) is given must pass: the model loader
 * asks this of each one, so a file cannot bring the kernels a matrix they
 * do not run. */
int ops_mat_supported(const ops_mat *w);

/* The scalar path of ops_matmul at every T, whatever the build targets:
 * what a build without AVX2 runs for small T, and the reference the tests
 * hold the vector kernels against. Same contract as ops_matmul. */
void ops_matmul_ref(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s);

/* Dequantize row r of w into out (n_in floats). Used for embeddings. */
void ops_dequant_row(float *out, const ops_mat *w, int64_t r);

/* Conversions. */
float ops_f16_to_f32(uint16_t h);
uint16_t ops_f32_to_f16(float f);     /* round to nearest even */
float ops_bf16_to_f32(uint16_t h);
uint16_t ops_f32_to_bf16(float f);    /* round to nearest even */
/* Bit-level f16 conversions, always compiled: what a build without F16C
 * uses, and the reference the F16C instructions are tested against. NaNs
 * come out quiet, as F16C makes them. */
float ops_f16_to_f32_ref(uint16_t h);
uint16_t ops_f32_to_f16_ref(float f);
/* Quantize n floats (multiple of 32) to Q8_0 blocks as ggml does: per block
 * d = max|x| / 127, q = round(x / d). out: n/32 * 34 bytes. */
void ops_quantize_q8_0(void *out, const float *x, int64_t n);

/* out = x / sqrt(mean(x^2) + eps) * w.  (n) each; out may alias x. */
void ops_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* x = softmax(x) in place over n entries (max-subtracted). */
void ops_softmax(float *x, int n);
/* gate = silu(gate) * up, (n) each. */
void ops_silu_mul(float *gate, const float *up, int n);
/* gate = gelu_tanh(gate) * up, (n) each, with the tanh approximation of
 * GELU (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh):
 * gelu_tanh(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), computed
 * as z / (1 + e^(-2 sqrt(2/pi) (z + 0.044715 z^3))), the same function. */
void ops_gelu_tanh_mul(float *gate, const float *up, int n);
/* RMSNorm of each of n_heads consecutive vectors of hd floats in place,
 * each times the same w: x_h = x_h / sqrt(mean(x_h^2) + eps) * w (the
 * q/k norms of qwen3 and gemma3). x: (n_heads, hd); w: (hd). */
void ops_rmsnorm_heads(float *x, const float *w, int n_heads, int hd, float eps);
/* x = cap * tanh(x / cap), (n): Gemma's final logit soft-capping. */
void ops_softcap(float *x, int n, float cap);
/* y += x, (n) each. */
void ops_add(float *y, const float *x, int n);
/* dot product of n floats. */
float ops_dot(const float *a, const float *b, int n);
/* y += a * x, (n) each. */
void ops_axpy(float *y, float a, const float *x, int n);

/* Attention of one query over n cached positions, whose keys (or values)
 * are rows of hd floats ldk (ldv) floats apart, as in one KV cache block.
 * sc[j] = scale * (q . k_j) for j < n.  sc: (n); q: (hd).
 * pf, pf_bytes: memory the caller reads next (the next block's run; NULL
 * for none), prefetched a slice at a time as the rows are summed: a burst
 * of prefetches ahead of the sums stalls them until it drains, where
 * spread out the fetch and the sums overlap. */
void ops_attn_scores(float *sc, const float *q, const float *k, int64_t ldk, int n, int hd, float scale,
                     const void *pf, size_t pf_bytes);
/* out += sum over j < n of p[j] * v_j.  out: (hd); p: (n). */
void ops_attn_mix(float *out, const float *p, const float *v, int64_t ldv, int n, int hd, const void *pf,
                  size_t pf_bytes);
/* The same over an f16 cache (keys and values as IEEE half floats), summed
 * in the same order as the f32 kernels: the results equal theirs given the
 * halves widened. */
void ops_attn_scores_f16(float *sc, const float *q, const uint16_t *k, int64_t ldk, int n, int hd, float scale,
                         const void *pf, size_t pf_bytes);
void ops_attn_mix_f16(float *out, const float *p, const uint16_t *v, int64_t ldv, int n, int hd, const void *pf,
                      size_t pf_bytes);
/* out[i] = ops_f32_to_f16(x[i]) for i < n. */
void ops_f32_to_f16_row(uint16_t *out, const float *x, int n);

#endif
