/*
 * ops.h - CPU kernels of the forward pass: pure functions over caller-owned
 * memory, output first, no allocation, shapes in comments.
 *
 * The one heavy kernel is ops_matmul: Y = X W^T for a weight W stored in
 * GGUF's row-major layout (n_out rows of n_in elements) in F32, F16, BF16 or
 * Q8_0. It picks its method by the number of activation rows T:
 *   - small T (decode): every weight row is streamed from memory once and
 *     applied to all T activation vectors (AVX2/FMA/F16C; Q8_0 by int8 dot
 *     products against activations quantized to Q8_0), parallel over rows;
 *   - large T (prefill): F32/F16/BF16 go through OpenBLAS sgemm (F16/BF16
 *     dequantized a tile of rows at a time into per-thread scratch); Q8_0
 *     stays on its int8 kernel at every T.
 * Threads come from OpenMP; OpenBLAS itself is kept single-threaded and
 * called from inside the OpenMP region on disjoint output tiles, so exactly
 * one pool of threads exists.
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
    uint32_t type;          /* GGUF_TT_F32 | F16 | BF16 | Q8_0 */
    int64_t n_out;          /* rows */
    int64_t n_in;           /* row length; multiple of 32 for Q8_0 */
} ops_mat;

/* Scratch for ops_matmul, sized once for the largest call (no allocation in
 * the step). One scratch serves one ops_matmul call at a time. */
typedef struct ops_scratch ops_scratch;

/* Allocate scratch for up to max_T activation rows of at most max_n_in
 * elements, with n_threads OpenMP threads. NULL on out of memory. */
ops_scratch *ops_scratch_new(int max_T, int64_t max_n_in, int n_threads);
void ops_scratch_free(ops_scratch *s);

/* Set the OpenMP thread count used by the kernels (and pin OpenBLAS to one
 * thread). n <= 0 means all cores. Returns the count in force. OpenMP keeps
 * the count per calling thread: call this from the thread that runs the
 * kernels. ops_matmul never uses more threads than its scratch was made for. */
int ops_set_threads(int n);

/* y = x W^T.  y: (T, ldy) with the first n_out columns written; x: (T, n_in).
 * T must be <= the scratch's max_T and n_in <= its max_n_in. */
void ops_matmul(float *y, int64_t ldy, const float *x, int T, const ops_mat *w, ops_scratch *s);

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
/* y += x, (n) each. */
void ops_add(float *y, const float *x, int n);
/* dot product of n floats. */
float ops_dot(const float *a, const float *b, int n);
/* y += a * x, (n) each. */
void ops_axpy(float *y, float a, const float *x, int n);

#endif
