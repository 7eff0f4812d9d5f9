/*
 * wbind.h - binding a GGUF file's weight tensors for the CPU kernels: the
 * checks every model kind makes before it uses a tensor.
 *
 * A tensor is found by name, its shape is held against the one the config
 * implies, and its type against what the kernels can run, each failure with
 * a message naming the tensor; so nothing that reaches a kernel can make it
 * read out of bounds or abort. A bound tensor is a view into the file's
 * mapping (ops_mat): nothing is copied or allocated here, and the view lives
 * until gguf_close(). Where vectors end up as f32 (in place, in a pool, in
 * the caller's buffer) is each model's own choice, made after wb_vec.
 *
 * Both binders treat a missing tensor as an error: a caller for which one
 * is optional asks gguf_find_tensor first.
 */
#ifndef TS_WBIND_H
#define TS_WBIND_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "ops.h"

/* The most rows a matrix bound with rows 0 may have: a table whose length
 * the file decides (vocabulary, positions, token types), kept to what an
 * int counts and what buffers sized by it can hold. */
#define WB_MAX_ROWS (1 << 22)

/* Binds the matrix tensor name of shape (rows, cols), GGUF ne = [cols,
 * rows], in any type the CPU kernels multiply (ops_mat_supported), into *m.
 * rows 0 takes any count from 1 to WB_MAX_ROWS (m->n_out says which).
 * Returns 0, or TS_ERR_MODEL_TENSOR (missing), TS_ERR_MODEL_SHAPE or
 * TS_ERR_GGUF_TYPE with a message in err. */
int wb_mat(const gguf_ctx *g, const char *name, int64_t rows, int64_t cols, ops_mat *m, char *err,
           size_t errlen);

/* Binds the vector tensor name of n elements (a norm weight, a bias, rope
 * divisors), stored as f32, f16 or bf16, into *v as a matrix of one row,
 * which ops_dequant_row(dst, v, 0) converts to n floats. Returns 0, or
 * TS_ERR_MODEL_TENSOR, TS_ERR_MODEL_SHAPE or TS_ERR_GGUF_TYPE with a
 * message in err. */
int wb_vec(const gguf_ctx *g, const char *name, int64_t n, ops_mat *v, char *err, size_t errlen);

#endif /* TS_WBIND_H */
