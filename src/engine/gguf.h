/*
 * gguf.h - read-only GGUF v3 files over mmap, and a writer for the files
 * tessera makes itself (mkmodel, tests).
 *
 * The reader maps the file once and validates every length, count, offset and
 * size against the mapping before anything else looks at it: after
 * gguf_open() succeeds, every string, array and tensor range it hands out lies
 * inside the file, so callers never bounds-check again. All pointers it
 * returns point into the mapping and live until gguf_close(). Strings are not
 * NUL-terminated (gguf_str carries the length).
 *
 * It never calls exit() and never reads outside the mapping: a truncated,
 * corrupt or unsupported file gives a negative TS_ERR_GGUF_* code and a
 * message naming what is wrong.
 */
#ifndef TS_GGUF_H
#define TS_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types, numbered as in the GGUF specification. */
enum {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
};

/* Tensor types tessera executes, numbered as ggml numbers them. The block
 * layouts are in cpu/quant.h; gguf_type_block gives their sizes. */
enum {
    GGUF_TT_F32 = 0,
    GGUF_TT_F16 = 1,
    GGUF_TT_Q4_0 = 2,   /* blocks of 32: f16 scale, 16 bytes of 4-bit quants */
    GGUF_TT_Q4_1 = 3,   /* blocks of 32: f16 scale and min, 4-bit quants */
    GGUF_TT_Q5_0 = 6,   /* blocks of 32: f16 scale, 4 bytes of fifth bits, 4-bit quants */
    GGUF_TT_Q5_1 = 7,   /* blocks of 32: f16 scale and min, fifth bits, 4-bit quants */
    GGUF_TT_Q8_0 = 8,   /* blocks of 32: one f16 scale, 32 int8 */
    GGUF_TT_Q2_K = 10,  /* super-blocks of 256 (the K-quants) */
    GGUF_TT_Q3_K = 11,
    GGUF_TT_Q4_K = 12,
    GGUF_TT_Q5_K = 13,
    GGUF_TT_Q6_K = 14,
    GGUF_TT_IQ4_NL = 20, /* blocks of 32: f16 scale, 4-bit indices into a fixed table */
    GGUF_TT_IQ4_XS = 23, /* super-blocks of 256: IQ4_NL's table with 6-bit sub-block scales */
    GGUF_TT_BF16 = 30,
};
#define GGUF_Q8_0_BLOCK 32  /* elements per Q8_0 block */
#define GGUF_Q8_0_BYTES 34  /* bytes per Q8_0 block */

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef struct gguf_str {
    uint64_t len;           /* bytes, no terminator */
    const char *ptr;        /* into the mapping */
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;          /* GGUF_VT_* */
    uint32_t arr_type;      /* element type when type == GGUF_VT_ARRAY */
    uint64_t arr_n;         /* element count when type == GGUF_VT_ARRAY */
    const uint8_t *val;     /* raw little-endian value (or first array element) */
    uint64_t val_bytes;     /* bytes the value (whole array) occupies */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the fastest-varying (row length) */
    uint32_t type;          /* GGUF_TT_* */
    uint64_t offset;        /* relative to the data section */
    const void *data;       /* into the mapping, inside the file */
    uint64_t nbytes;
} gguf_tensor;

typedef struct gguf_ctx {
    void *map;              /* mmap'd file, or the caller's buffer */
    uint64_t size;          /* bytes */
    int owns_map;           /* 1 if gguf_close must munmap */
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kvs;           /* (n_kv) */
    uint64_t n_tensors;
    gguf_tensor *tensors;   /* (n_tensors) */
    uint64_t alignment;     /* bytes */
    uint64_t data_off;      /* start of the tensor data section */
} gguf_ctx;

/* Map and validate a file. On failure *out is NULL and err holds a message
 * that starts with the path. Anything but a regular file (a FIFO, socket,
 * device or directory) is refused without waiting on it:
 * "<path>: not a regular file (fifo)". */
int gguf_open(const char *path, gguf_ctx **out, char *err, size_t errlen);
/* Same over a caller buffer that must outlive the context (tests, fuzzing). */
int gguf_open_buffer(const void *buf, size_t len, gguf_ctx **out, char *err, size_t errlen);
void gguf_close(gguf_ctx *g);

/* Bytes of the file's mapping resident in the page cache now (mincore over
 * every page, touched by this process or not: for a model read in place they
 * are the one copy of its weights). At most g->size; 0 when mincore fails.
 * It walks every page: not for a hot path. */
uint64_t gguf_resident_bytes(const gguf_ctx *g);

/* Name of a tensor type ("q8_0") or NULL if tessera does not execute it. */
const char *gguf_type_name(uint32_t type);
/* The type of an executed type's name ("q8_0"): 0, or TS_ERR_INVAL when
 * name is none of them. */
int gguf_type_from_name(const char *name, uint32_t *type);
/* Bytes of a row of n elements of type, or 0 if the type is unknown or n is
 * not a whole number of blocks. */
uint64_t gguf_row_bytes(uint32_t type, uint64_t n);
/* Elements per block of type (1 for the float types) and bytes per block;
 * 0 for a type tessera does not execute. */
int gguf_type_block(uint32_t type);
int gguf_type_block_bytes(uint32_t type);

const gguf_kv *gguf_find_kv(const gguf_ctx *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name);

/* Typed getters: 0 on success, TS_ERR_MODEL_KEY if missing or of a type that
 * does not convert losslessly (any integer type in range for u32; f32 or
 * f64 for f32). */
int gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out);
int gguf_get_f32(const gguf_ctx *g, const char *key, float *out);
int gguf_get_bool(const gguf_ctx *g, const char *key, int *out);
int gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out);
/* Array getters. For string arrays, out must hold kv->arr_n entries. */
int gguf_get_arr(const gguf_ctx *g, const char *key, uint32_t arr_type, const gguf_kv **out);
int gguf_arr_strings(const gguf_kv *kv, gguf_str *out);
/* Element i of a numeric array as float or int64 (any numeric element type). */
float gguf_arr_f32(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);
/* Compare a gguf_str with a C string. */
int gguf_str_eq(gguf_str s, const char *c);

/* ---- writer ---------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(gguf_writer *w, const char *key, int v);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
int gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
int gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Add a tensor; the writer takes ownership of data (malloc'd, nbytes long)
 * and frees it, also on failure. ne[0] is the row length. */
int gguf_writer_take_tensor(gguf_writer *w, const char *name, uint32_t type,
                            uint32_t n_dims, const uint64_t *ne, void *data, uint64_t nbytes);
int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen);

#endif
