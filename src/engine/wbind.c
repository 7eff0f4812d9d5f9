/* wbind.c - checking and binding GGUF weight tensors; see wbind.h. */
#include "wbind.h"

#include <stdio.h>

#include "err.h"

int wb_mat(const gguf_ctx *g, const char *name, int64_t rows, int64_t cols, ops_mat *m, char *err,
           size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor %s missing", name);
    /* The reader sets the dimensions a tensor lacks to 1, so ne[1] reads
     * right for a vector too. */
    int ok = t->n_dims == 2 && (int64_t)t->ne[0] == cols && (rows ? (int64_t)t->ne[1] == rows : t->ne[1] > 0);
    if (!ok) {
        char want[32] = "any";
        if (rows) snprintf(want, sizeof(want), "%lld", (long long)rows);
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "tensor %s has shape [%llu, %llu] in %u dims, want [%lld, %s]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       t->n_dims, (long long)cols, want);
    }
    if (!rows && t->ne[1] > WB_MAX_ROWS)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "tensor %s has %llu rows, more than %d", name,
                       (unsigned long long)t->ne[1], WB_MAX_ROWS);
    *m = (ops_mat){t->data, t->type, (int64_t)t->ne[1], cols};
    /* The reader only hands out types tessera knows, but knowing a type is
     * not the same as having a kernel for it: refuse here, at load, so no
     * matrix reaches a kernel that would have to abort on it. */
    if (!ops_mat_supported(m)) {
        const char *tn = gguf_type_name(t->type);
        return err_set(err, errlen, TS_ERR_GGUF_TYPE,
                       "tensor %s: type %s (%u) of shape [%lld, %lld] is not one the CPU kernels multiply", name,
                       tn ? tn : "?", t->type, (long long)cols, (long long)m->n_out);
    }
    return 0;
}

int wb_vec(const gguf_ctx *g, const char *name, int64_t n, ops_mat *v, char *err, size_t errlen) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return err_set(err, errlen, TS_ERR_MODEL_TENSOR, "tensor %s missing", name);
    if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
        return err_set(err, errlen, TS_ERR_MODEL_SHAPE, "tensor %s has %llu elements in %u dims, want %lld", name,
                       (unsigned long long)t->ne[0], t->n_dims, (long long)n);
    /* The float types only: a quantized vector would need whole blocks,
     * and no converter writes one. */
    if (t->type != GGUF_TT_F32 && t->type != GGUF_TT_F16 && t->type != GGUF_TT_BF16) {
        const char *tn = gguf_type_name(t->type);
        return err_set(err, errlen, TS_ERR_GGUF_TYPE,
                       "tensor %s: type %s; vectors (norms and biases) must be f32, f16 or bf16", name, tn ? tn : "?");
    }
    *v = (ops_mat){t->data, t->type, 1, n};
    return 0;
}
