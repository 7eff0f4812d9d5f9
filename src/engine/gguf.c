/*
 * gguf.c - GGUF v3 reader over mmap and writer; see gguf.h.
 *
 * The reader is a cursor over the mapping that refuses to move past its end:
 * every primitive read checks the remaining length first, so a truncated or
 * lying file turns into TS_ERR_GGUF_TRUNCATED instead of an out-of-bounds
 * read. Counts read from the file are checked against what the remaining
 * bytes could possibly hold before anything is allocated from them, so a
 * header claiming 2^60 tensors cannot make us allocate 2^60 of anything.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

#define GGUF_MAGIC 0x46554747u  /* "GGUF" little-endian */

/* ---- reader ---------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    char *err;
    size_t errlen;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return err_set(c->err, c->errlen, TS_ERR_GGUF_TRUNCATED,
                       "truncated at byte %llu reading %s (%llu bytes needed, %llu left)",
                       (unsigned long long)c->pos, what, (unsigned long long)n,
                       (unsigned long long)(c->size - c->pos));
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    int rc = rd_u64(c, &s->len, what);
    if (rc) return rc;
    if ((rc = need(c, s->len, what))) return rc;
    s->ptr = (const char *)c->base + c->pos;
    c->pos += s->len;
    return 0;
}

/* Size of a scalar value type, 0 for string/array/unknown. */
static uint64_t vt_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    }
    return 0;
}

/* Skip over one value of type t, recording where it starts. Arrays of arrays
 * are rejected: GGUF allows them in principle, no model uses them, and
 * refusing keeps the walk non-recursive. */
static int rd_value(cursor *c, gguf_kv *kv) {
    int rc;
    uint64_t start = c->pos;
    if (kv->type == GGUF_VT_STRING) {
        gguf_str s;
        if ((rc = rd_str(c, &s, "string value"))) return rc;
    } else if (kv->type == GGUF_VT_ARRAY) {
        if ((rc = rd_u32(c, &kv->arr_type, "array type"))) return rc;
        if ((rc = rd_u64(c, &kv->arr_n, "array length"))) return rc;
        start = c->pos;
        if (kv->arr_type == GGUF_VT_STRING) {
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                gguf_str s;
                if ((rc = rd_str(c, &s, "string array element"))) return rc;
            }
        } else {
            uint64_t es = vt_size(kv->arr_type);
            if (!es)
                return err_set(c->err, c->errlen, TS_ERR_GGUF_CORRUPT,
                               "key '%.*s': unsupported array element type %u",
                               (int)kv->key.len, kv->key.ptr, kv->arr_type);
            if (kv->arr_n > (c->size - c->pos) / es)
                return need(c, UINT64_MAX / 2, "array data");
            c->pos += kv->arr_n * es;
        }
    } else {
        uint64_t sz = vt_size(kv->type);
        if (!sz)
            return err_set(c->err, c->errlen, TS_ERR_GGUF_CORRUPT, "key '%.*s': unknown value type %u",
                           (int)kv->key.len, kv->key.ptr, kv->type);
        if ((rc = need(c, sz, "value"))) return rc;
        c->pos += sz;
    }
    kv->val = c->base + start;
    kv->val_bytes = c->pos - start;
    return 0;
}

/* The tensor types tessera executes: the one table gguf_type_name,
 * gguf_type_from_name and the block sizes read. Names as ggml spells them
 * ("q4_K"); gguf_type_from_name also takes them in lower case. */
static const struct {
    uint32_t type;
    const char *name;
    int block;              /* elements per block */
    int bytes;              /* bytes per block */
} exec_types[] = {
    {GGUF_TT_F32, "f32", 1, 4},         {GGUF_TT_F16, "f16", 1, 2},       {GGUF_TT_BF16, "bf16", 1, 2},
    {GGUF_TT_Q8_0, "q8_0", 32, 34},     {GGUF_TT_Q4_0, "q4_0", 32, 18},   {GGUF_TT_Q4_1, "q4_1", 32, 20},
    {GGUF_TT_Q5_0, "q5_0", 32, 22},     {GGUF_TT_Q5_1, "q5_1", 32, 24},   {GGUF_TT_Q2_K, "q2_K", 256, 84},
    {GGUF_TT_Q3_K, "q3_K", 256, 110},   {GGUF_TT_Q4_K, "q4_K", 256, 144}, {GGUF_TT_Q5_K, "q5_K", 256, 176},
    {GGUF_TT_Q6_K, "q6_K", 256, 210},   {GGUF_TT_IQ4_NL, "iq4_nl", 32, 18},
    {GGUF_TT_IQ4_XS, "iq4_xs", 256, 136},
};
#define N_EXEC_TYPES (sizeof(exec_types) / sizeof(exec_types[0]))

static int exec_index(uint32_t type) {
    for (size_t i = 0; i < N_EXEC_TYPES; i++)
        if (exec_types[i].type == type) return (int)i;
    return -1;
}

const char *gguf_type_name(uint32_t type) {
    int i = exec_index(type);
    return i < 0 ? NULL : exec_types[i].name;
}

int gguf_type_block(uint32_t type) {
    int i = exec_index(type);
    return i < 0 ? 0 : exec_types[i].block;
}

int gguf_type_block_bytes(uint32_t type) {
    int i = exec_index(type);
    return i < 0 ? 0 : exec_types[i].bytes;
}

int gguf_type_from_name(const char *name, uint32_t *type) {
    for (size_t i = 0; i < N_EXEC_TYPES; i++)
        if (strcasecmp(exec_types[i].name, name) == 0) {
            *type = exec_types[i].type;
            return 0;
        }
    return TS_ERR_INVAL;
}

/* ggml's name of a type tessera does not execute, for the message that
 * refuses it: a Q4_K_M file should be told "q4_K", not "type 12". Numbered
 * as ggml numbers them; the gaps are types ggml has retired. */
static const char *foreign_type_name(uint32_t type) {
    static const char *const names[] = {
        [2] = "q4_0",     [3] = "q4_1",     [6] = "q5_0",    [7] = "q5_1",     [9] = "q8_1",
        [10] = "q2_K",    [11] = "q3_K",    [12] = "q4_K",   [13] = "q5_K",    [14] = "q6_K",
        [15] = "q8_K",    [16] = "iq2_xxs", [17] = "iq2_xs", [18] = "iq3_xxs", [19] = "iq1_s",
        [20] = "iq4_nl",  [21] = "iq3_s",   [22] = "iq2_s",  [23] = "iq4_xs",  [24] = "i8",
        [25] = "i16",     [26] = "i32",     [27] = "i64",    [28] = "f64",     [29] = "iq1_m",
        [34] = "tq1_0",   [35] = "tq2_0",   [39] = "mxfp4",
    };
    const char *n = type < sizeof(names) / sizeof(names[0]) ? names[type] : NULL;
    return n ? n : "unknown";
}

uint64_t gguf_row_bytes(uint32_t type, uint64_t n) {
    int i = exec_index(type);
    if (i < 0 || n % (uint64_t)exec_types[i].block) return 0;
    return n / (uint64_t)exec_types[i].block * (uint64_t)exec_types[i].bytes;
}

/* Element counts beyond this are absurd for any model we could run and would
 * risk overflow in byte arithmetic. */
#define GGUF_MAX_ELEMS (1ull << 40)
/* More keys or tensors than any real model has by orders of magnitude. */
#define GGUF_MAX_COUNT (1ull << 24)

static int rd_tensor_info(cursor *c, gguf_tensor *t) {
    int rc;
    if ((rc = rd_str(c, &t->name, "tensor name"))) return rc;
    if ((rc = rd_u32(c, &t->n_dims, "tensor dims"))) return rc;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return err_set(c->err, c->errlen, TS_ERR_GGUF_CORRUPT, "tensor '%.*s': %u dimensions",
                       (int)t->name.len, t->name.ptr, t->n_dims);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((rc = rd_u64(c, &t->ne[d], "tensor shape"))) return rc;
        if (t->ne[d] == 0 || t->ne[d] > GGUF_MAX_ELEMS || nel > GGUF_MAX_ELEMS / t->ne[d])
            return err_set(c->err, c->errlen, TS_ERR_GGUF_CORRUPT,
                           "tensor '%.*s': absurd dimension %llu", (int)t->name.len, t->name.ptr,
                           (unsigned long long)t->ne[d]);
        nel *= t->ne[d];
    }
    if ((rc = rd_u32(c, &t->type, "tensor type"))) return rc;
    if ((rc = rd_u64(c, &t->offset, "tensor offset"))) return rc;
    if (!gguf_type_name(t->type))
        return err_set(c->err, c->errlen, TS_ERR_GGUF_TYPE,
                       "tensor '%.*s': type %s (%u) is not supported (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                       "q2_K..q6_K, iq4_nl, iq4_xs are)",
                       (int)t->name.len, t->name.ptr, foreign_type_name(t->type), t->type);
    uint64_t rb = gguf_row_bytes(t->type, t->ne[0]);
    if (!rb)
        return err_set(c->err, c->errlen, TS_ERR_GGUF_CORRUPT,
                       "tensor '%.*s': row of %llu elements is not a whole number of %s blocks of %d",
                       (int)t->name.len, t->name.ptr, (unsigned long long)t->ne[0],
                       gguf_type_name(t->type), gguf_type_block(t->type));
    t->nbytes = rb * (nel / t->ne[0]);
    return 0;
}

/* Place every tensor in the data section and check it lies inside the file
 * and does not overlap the next one. */
static int place_tensors(gguf_ctx *g, char *err, size_t errlen) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return err_set(err, errlen, TS_ERR_GGUF_CORRUPT,
                           "tensor '%.*s': offset %llu not aligned to %llu", (int)t->name.len,
                           t->name.ptr, (unsigned long long)t->offset,
                           (unsigned long long)g->alignment);
        uint64_t avail = g->size - g->data_off;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return err_set(err, errlen, TS_ERR_GGUF_BOUNDS,
                           "tensor '%.*s': data [%llu, %llu) past end of file (%llu bytes)",
                        (int)t->name.len, t->name.ptr,
                        (unsigned long long)(g->data_off + t->offset),
                        (unsigned long long)(g->data_off + t->offset + t->nbytes),
                        (unsigned long long)g->size);
        t->data = (const uint8_t *)g->map + g->data_off + t->offset;
    }
    return 0;
}

static int parse(gguf_ctx *g, char *err, size_t errlen) {
    cursor c = {g->map, g->size, 0, err, errlen};
    uint32_t magic;
    int rc;
    if ((rc = rd_u32(&c, &magic, "magic"))) return rc;
    if (magic != GGUF_MAGIC) return err_set(err, errlen, TS_ERR_GGUF_MAGIC, "bad magic 0x%08x", magic);
    if ((rc = rd_u32(&c, &g->version, "version"))) return rc;
    if (g->version != 3 && g->version != 2)
        return err_set(err, errlen, TS_ERR_GGUF_VERSION, "GGUF version %u (2 and 3 are supported)",
                       g->version);
    if ((rc = rd_u64(&c, &g->n_tensors, "tensor count"))) return rc;
    if ((rc = rd_u64(&c, &g->n_kv, "metadata count"))) return rc;
    /* A key/value takes at least 8 (key length) + 4 (type) + 1 bytes and a
     * tensor info at least 8 + 4 + 8 + 4 + 8: bound the counts by the file. */
    if (g->n_kv > GGUF_MAX_COUNT || g->n_tensors > GGUF_MAX_COUNT)
        return err_set(err, errlen, TS_ERR_GGUF_CORRUPT, "header claims an absurd %llu keys and %llu tensors",
                       (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);
    if (g->n_kv > g->size / 13 || g->n_tensors > g->size / 32)
        return err_set(err, errlen, TS_ERR_GGUF_TRUNCATED,
                       "header claims %llu keys and %llu tensors, more than a %llu-byte file holds",
                       (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors,
                       (unsigned long long)g->size);
    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kvs));
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    if (!g->kvs || !g->tensors) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kvs[i];
        if ((rc = rd_str(&c, &kv->key, "metadata key"))) return rc;
        if ((rc = rd_u32(&c, &kv->type, "metadata type"))) return rc;
        if ((rc = rd_value(&c, kv))) return rc;
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(g, "general.alignment");
    if (al) {
        uint32_t a;
        if (gguf_get_u32(g, "general.alignment", &a) || a == 0 || (a & (a - 1)))
            return err_set(err, errlen, TS_ERR_GGUF_CORRUPT, "general.alignment is not a power of two");
        g->alignment = a;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = rd_tensor_info(&c, &g->tensors[i]))) return rc;
    uint64_t off = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (off > g->size && g->n_tensors)
        return err_set(err, errlen, TS_ERR_GGUF_TRUNCATED, "file ends before the tensor data section");
    g->data_off = off > g->size ? g->size : off;
    return place_tensors(g, err, errlen);
}

static int open_common(gguf_ctx *g, gguf_ctx **out, char *err, size_t errlen) {
    int rc = parse(g, err, errlen);
    if (rc) {
        gguf_close(g);
        *out = NULL;
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open_buffer(const void *buf, size_t len, gguf_ctx **out, char *err, size_t errlen) {
    gguf_ctx *g = calloc(1, sizeof(*g));
    *out = NULL;
    if (!g) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    g->map = (void *)buf;
    g->size = len;
    return open_common(g, out, err, errlen);
}

/* Every message names the path, parse errors included. */
int gguf_open(const char *path, gguf_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = -1;
    struct stat st;
    int rc = file_open_regular(path, &fd, &st, err, errlen);
    if (rc) return rc;
    if (st.st_size < 24) {
        close(fd);
        return err_set(err, errlen, st.st_size >= 4 ? TS_ERR_GGUF_TRUNCATED : TS_ERR_GGUF_MAGIC,
                       "%s: %lld bytes is too short for a GGUF header", path, (long long)st.st_size);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set(err, errlen, TS_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    gguf_ctx *g = calloc(1, sizeof(*g));
    if (!g) {
        munmap(map, (size_t)st.st_size);
        return err_set(err, errlen, TS_ERR_NOMEM, "%s: out of memory", path);
    }
    g->map = map;
    g->size = (uint64_t)st.st_size;
    g->owns_map = 1;
    char inner[256];
    if ((rc = open_common(g, out, inner, sizeof(inner)))) err_set(err, errlen, rc, "%s: %s", path, inner);
    return rc;
}

void gguf_close(gguf_ctx *g) {
    if (!g) return;
    if (g->owns_map && g->map) munmap(g->map, (size_t)g->size);
    free(g->kvs);
    free(g->tensors);
    free(g);
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

const gguf_kv *gguf_find_kv(const gguf_ctx *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gguf_str_eq(g->kvs[i].key, key)) return &g->kvs[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (gguf_str_eq(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

/* Read scalar of numeric type t at p as int64 / double. */
/* A float as int64: converting one out of range (or NaN) is undefined in
 * C, and a file decides the value. NaN reads as 0, the rest saturates. */
static int64_t clamp_i64(double d) {
    if (d != d) return 0;
    if (d >= 0x1p63) return INT64_MAX;
    if (d < -0x1p63) return INT64_MIN;
    return (int64_t)d;
}

static int64_t scalar_i64(uint32_t t, const uint8_t *p) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; float f32; double f64; } v;
    memcpy(&v, p, vt_size(t));
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_BOOL: return v.u8;
    case GGUF_VT_INT8: return v.i8;
    case GGUF_VT_UINT16: return v.u16;
    case GGUF_VT_INT16: return v.i16;
    case GGUF_VT_UINT32: return v.u32;
    case GGUF_VT_INT32: return v.i32;
    case GGUF_VT_UINT64: return v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v.u64;
    case GGUF_VT_INT64: return v.i64;
    case GGUF_VT_FLOAT32: return clamp_i64(v.f32);
    case GGUF_VT_FLOAT64: return clamp_i64(v.f64);
    }
    return 0;
}

static double scalar_f64(uint32_t t, const uint8_t *p) {
    if (t == GGUF_VT_FLOAT32) { float f; memcpy(&f, p, 4); return f; }
    if (t == GGUF_VT_FLOAT64) { double d; memcpy(&d, p, 8); return d; }
    return (double)scalar_i64(t, p);
}

static int is_int_type(uint32_t t) {
    return vt_size(t) && t != GGUF_VT_FLOAT32 && t != GGUF_VT_FLOAT64 && t != GGUF_VT_BOOL;
}

int gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || !is_int_type(kv->type)) return TS_ERR_MODEL_KEY;
    int64_t v = scalar_i64(kv->type, kv->val);
    if (v < 0 || v > UINT32_MAX) return TS_ERR_MODEL_KEY;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const gguf_ctx *g, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || (kv->type != GGUF_VT_FLOAT32 && kv->type != GGUF_VT_FLOAT64)) return TS_ERR_MODEL_KEY;
    *out = (float)scalar_f64(kv->type, kv->val);
    return 0;
}

int gguf_get_bool(const gguf_ctx *g, const char *key, int *out) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || (kv->type != GGUF_VT_BOOL && !is_int_type(kv->type))) return TS_ERR_MODEL_KEY;
    *out = scalar_i64(kv->type, kv->val) != 0;
    return 0;
}

int gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_VT_STRING) return TS_ERR_MODEL_KEY;
    memcpy(&out->len, kv->val, 8);
    out->ptr = (const char *)kv->val + 8;
    return 0;
}

int gguf_get_arr(const gguf_ctx *g, const char *key, uint32_t arr_type, const gguf_kv **out) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_VT_ARRAY) return TS_ERR_MODEL_KEY;
    int ok = kv->arr_type == arr_type ||
             (arr_type != GGUF_VT_STRING && kv->arr_type != GGUF_VT_STRING &&
              (arr_type == GGUF_VT_FLOAT32 || is_int_type(arr_type)));
    if (!ok) return TS_ERR_MODEL_KEY;
    *out = kv;
    return 0;
}

int gguf_arr_strings(const gguf_kv *kv, gguf_str *out) {
    if (kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING) return TS_ERR_MODEL_KEY;
    const uint8_t *p = kv->val; /* validated by the parser */
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        memcpy(&out[i].len, p, 8);
        out[i].ptr = (const char *)p + 8;
        p += 8 + out[i].len;
    }
    return 0;
}

float gguf_arr_f32(const gguf_kv *kv, uint64_t i) {
    return (float)scalar_f64(kv->arr_type, kv->val + i * vt_size(kv->arr_type));
}

int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i) {
    return scalar_i64(kv->arr_type, kv->val + i * vt_size(kv->arr_type));
}

/* ---- writer ---------------------------------------------------------- */

/* The writer serialises metadata into one growing byte buffer as it is
 * added, and keeps tensors (name, shape, owned data) in a list until
 * gguf_writer_write lays out the data section. */
typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    void *data;
    uint64_t nbytes;
} wtensor;

struct gguf_writer {
    uint8_t *kv;            /* serialised key/values */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int failed;             /* sticky: an earlier add ran out of memory */
};

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w->kv);
    free(w);
}

static int put(gguf_writer *w, const void *p, size_t n) {
    if (w->failed) return TS_ERR_NOMEM;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) { w->failed = 1; return TS_ERR_NOMEM; }
        w->kv = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}

static int put_u32(gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(gguf_writer *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(gguf_writer *w, const char *s) {
    uint64_t n = strlen(s);
    int rc = put_u64(w, n);
    return rc ? rc : put(w, s, n);
}

static int put_key(gguf_writer *w, const char *key, uint32_t type) {
    w->n_kv++;
    int rc = put_str(w, key);
    return rc ? rc : put_u32(w, type);
}

int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) {
    int rc = put_key(w, key, GGUF_VT_UINT32);
    return rc ? rc : put_u32(w, v);
}

int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) {
    int rc = put_key(w, key, GGUF_VT_INT32);
    return rc ? rc : put(w, &v, 4);
}

int gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    int rc = put_key(w, key, GGUF_VT_FLOAT32);
    return rc ? rc : put(w, &v, 4);
}

int gguf_writer_add_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    int rc = put_key(w, key, GGUF_VT_BOOL);
    return rc ? rc : put(w, &b, 1);
}

int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    int rc = put_key(w, key, GGUF_VT_STRING);
    return rc ? rc : put_str(w, v);
}

static int put_arr_head(gguf_writer *w, const char *key, uint32_t et, uint64_t n) {
    int rc = put_key(w, key, GGUF_VT_ARRAY);
    if (!rc) rc = put_u32(w, et);
    return rc ? rc : put_u64(w, n);
}

int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    int rc = put_arr_head(w, key, GGUF_VT_STRING, n);
    for (uint64_t i = 0; !rc && i < n; i++) rc = put_str(w, v[i]);
    return rc;
}

int gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    int rc = put_arr_head(w, key, GGUF_VT_FLOAT32, n);
    return rc ? rc : put(w, v, n * 4);
}

int gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    int rc = put_arr_head(w, key, GGUF_VT_INT32, n);
    return rc ? rc : put(w, v, n * 4);
}

int gguf_writer_take_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const uint64_t *ne, void *data, uint64_t nbytes) {
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS) { free(data); return TS_ERR_INVAL; }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *nt = realloc(w->t, cap * sizeof(*nt));
        if (!nt) { free(data); w->failed = 1; return TS_ERR_NOMEM; }
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name) { free(data); w->failed = 1; return TS_ERR_NOMEM; }
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
    return 0;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static int write_pad(FILE *f, uint64_t n) {
    static const uint8_t zero[GGUF_DEFAULT_ALIGNMENT];
    return write_all(f, zero, (size_t)n);
}

static int write_header(gguf_writer *w, FILE *f) {
    uint32_t magic = GGUF_MAGIC, version = 3;
    uint64_t nt = w->n_t, nkv = w->n_kv;
    if (write_all(f, &magic, 4) || write_all(f, &version, 4) || write_all(f, &nt, 8) ||
        write_all(f, &nkv, 8) || write_all(f, w->kv, w->kv_len))
        return -1;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        if (write_all(f, &len, 8) || write_all(f, t->name, len) || write_all(f, &t->n_dims, 4) ||
            write_all(f, t->ne, 8 * t->n_dims) || write_all(f, &t->type, 4) ||
            write_all(f, &off, 8))
            return -1;
        off = align_up(off + t->nbytes, GGUF_DEFAULT_ALIGNMENT);
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (w->failed) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory while building %s", path);
    FILE *f = fopen(path, "wb");
    if (!f) return err_set(err, errlen, TS_ERR_IO, "%s: %s", path, strerror(errno));
    int bad = write_header(w, f);
    long pos = ftell(f);
    if (!bad) bad = write_pad(f, align_up((uint64_t)pos, GGUF_DEFAULT_ALIGNMENT) - (uint64_t)pos);
    for (size_t i = 0; !bad && i < w->n_t; i++) {
        bad = write_all(f, w->t[i].data, (size_t)w->t[i].nbytes);
        if (!bad) bad = write_pad(f, align_up(w->t[i].nbytes, GGUF_DEFAULT_ALIGNMENT) - w->t[i].nbytes);
    }
    if (fclose(f) != 0) bad = -1;
    if (bad) {
        unlink(path);
        return err_set(err, errlen, TS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return 0;
}

uint64_t gguf_resident_bytes(const gguf_ctx *g) {
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE), n = g->size;
    const uintptr_t a = (uintptr_t)g->map / pg * pg, e = (uintptr_t)g->map + n;
    const size_t pages = (size_t)((e - a + pg - 1) / pg);
    unsigned char vec[4096];
    uint64_t in = 0;
    for (size_t at = 0; at < pages; at += sizeof vec) {
        size_t k = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore((void *)(a + at * pg), k * pg, vec)) return 0;
        for (size_t i = 0; i < k; i++) in += vec[i] & 1;
    }
    in *= pg;
    return in < n ? in : n;
}
