/*
 * backend.h - the interface every execution backend implements (internal to
 * src/engine). engine.c validates batches and limits, then calls through
 * this table; a backend may assume every batch it sees is valid. Each backend
 * lives in its own folder (cpu/, cuda/) and exports one eng_backend; the
 * CUDA one exists only in a build with TS_HAVE_CUDA (CMake's TESSERA_CUDA).
 * A backend that can fail at run time (a device error) returns TS_ERR_DEVICE
 * from forward or the copies and says why on stderr, since these slots take
 * no message buffer.
 */
#ifndef TS_BACKEND_H
#define TS_BACKEND_H

#include "engine.h"

typedef struct eng_backend {
    const char *name;
    eng_kv_dtype kv_default; /* the cache's elements under ENG_KV_AUTO */
    unsigned kv_dtypes;     /* the cache types it runs: bit 1 << eng_kv_dtype */
    /* Allocate run state: activations, scratch and a KV pool of n_blocks
     * blocks of o->block_size positions, of o->kv_dtype (resolved: one the
     * backend runs). Writes the thread count in force back into
     * o->n_threads. */
    int (*create)(const model *m, eng_opts *o, int n_blocks, void **state, char *err,
                  size_t errlen);
    void (*destroy)(void *state);
    int (*forward)(void *state, const eng_batch *b, float *logits);
    int (*kv_copy_out)(void *state, const int32_t *blocks, int n, void *host);
    int (*kv_copy_in)(void *state, const int32_t *blocks, int n, const void *host);
    /* Fill out (zeroed by the caller) as eng_dev_stats says. */
    void (*stats)(const void *state, eng_dev_stats *out);
} eng_backend;

extern const eng_backend eng_backend_cpu;
#ifdef TS_HAVE_CUDA
extern const eng_backend eng_backend_cuda;
#endif

#endif
