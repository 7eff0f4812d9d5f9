/*
 * test_gguf.c - the GGUF reader and model binding against valid files and
 * every kind of broken one: each failure must be its specific error, with a
 * message naming what is wrong, and never a crash or an out-of-bounds read
 * (the fuzz loop runs under ASan in `make test SANITIZE=1`).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "err.h"
#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

/* ---- a minimal one-layer llama written tensor by tensor ----------------- */

typedef struct variant {
    const char *skip;           /* tensor to leave out */
    const char *arch;           /* general.architecture */
    uint32_t dim;               /* embedding_length written to metadata */
    uint32_t heads, kv_heads;
    uint32_t q_type;            /* type of blk.0.attn_q.weight */
    int q_rows;                 /* rows of attn_q (normally dim) */
} variant;

static const variant BASE = {NULL, "llama", 64, 4, 2, GGUF_TT_F32, 64};

static void add_zero(gguf_writer *w, const variant *v, const char *name, uint32_t type, uint64_t cols,
                     uint64_t rows) {
    if (v->skip && strcmp(v->skip, name) == 0) return;
    uint64_t ne[2] = {cols, rows};
    uint64_t nbytes = (type == GGUF_TT_F32 ? 4 : 2) * cols * (rows ? rows : 1);
    assert_int_equal(gguf_writer_take_tensor(w, name, type, rows ? 2 : 1, ne, calloc(1, nbytes), nbytes), 0);
}

static void write_variant(const char *path, const variant *v) {
    gguf_writer *w = gguf_writer_new();
    const uint64_t dim = 64, kvd = 32, ffn = 96, vocab = 300;
    gguf_writer_add_str(w, "general.architecture", v->arch);
    char k[64];
    snprintf(k, sizeof(k), "%s.embedding_length", v->arch);
    gguf_writer_add_u32(w, k, v->dim);
    snprintf(k, sizeof(k), "%s.block_count", v->arch);
    gguf_writer_add_u32(w, k, 1);
    snprintf(k, sizeof(k), "%s.feed_forward_length", v->arch);
    gguf_writer_add_u32(w, k, (uint32_t)ffn);
    snprintf(k, sizeof(k), "%s.attention.head_count", v->arch);
    gguf_writer_add_u32(w, k, v->heads);
    snprintf(k, sizeof(k), "%s.attention.head_count_kv", v->arch);
    gguf_writer_add_u32(w, k, v->kv_heads);
    add_zero(w, v, "token_embd.weight", GGUF_TT_F32, dim, vocab);
    add_zero(w, v, "blk.0.attn_norm.weight", GGUF_TT_F32, dim, 0);
    add_zero(w, v, "blk.0.attn_q.weight", v->q_type, dim, (uint64_t)v->q_rows);
    add_zero(w, v, "blk.0.attn_k.weight", GGUF_TT_F16, dim, kvd);
    add_zero(w, v, "blk.0.attn_v.weight", GGUF_TT_BF16, dim, kvd);
    add_zero(w, v, "blk.0.attn_output.weight", GGUF_TT_F32, dim, dim);
    add_zero(w, v, "blk.0.ffn_norm.weight", GGUF_TT_F16, dim, 0);
    add_zero(w, v, "blk.0.ffn_gate.weight", GGUF_TT_F32, dim, ffn);
    add_zero(w, v, "blk.0.ffn_up.weight", GGUF_TT_F32, dim, ffn);
    add_zero(w, v, "blk.0.ffn_down.weight", GGUF_TT_F32, ffn, dim);
    add_zero(w, v, "output_norm.weight", GGUF_TT_F32, dim, 0);
    char err[256];
    assert_int_equal(gguf_writer_write(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);
}

/* Load a variant; returns the code and leaves the message in err. */
static int load_variant(const variant *v, char *err, size_t errlen) {
    char path[512];
    tu_path(path, sizeof(path), "variant.gguf");
    write_variant(path, v);
    model *m = NULL;
    int rc = model_load(path, &m, err, errlen);
    if (!rc) model_free(m);
    remove(path);
    return rc;
}

static void test_minimal_model_loads(void **state) {
    char err[256] = "";
    char path[512];
    tu_path(path, sizeof(path), "minimal.gguf");
    write_variant(path, &BASE);
    model *m;
    int rc = model_load(path, &m, err, sizeof(err));
    if (rc) fail_msg("%s", err);
    assert_int_equal(m->cfg.dim, 64);
    assert_int_equal(m->cfg.n_kv_heads, 2);
    assert_int_equal(m->cfg.head_dim, 16);
    assert_int_equal(m->cfg.vocab, 300);
    assert_int_equal(m->cfg.ctx_len, 2048);           /* default when absent */
    assert_ptr_equal(m->output.data, m->tok_embd.data); /* tied output */
    assert_int_equal(m->layers[0].wk.type, GGUF_TT_F16);
    assert_float_equal(m->layers[0].ffn_norm[0], 0.0f, 0); /* f16 vector converted */
    model_free(m);
    remove(path);
}

static void test_synthetic_model_loads(void **state) {
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    s.arch = "qwen2";
    s.type = GGUF_TT_Q8_0;
    tu_path(path, sizeof(path), "qwen.gguf");
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    model *m;
    assert_int_equal(model_load(path, &m, err, sizeof(err)), 0);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_QWEN2);
    assert_int_equal(m->cfg.rope_neox, 1);
    assert_non_null(m->layers[1].bq);
    assert_int_equal(m->layers[1].w_up.type, GGUF_TT_Q8_0);
    assert_int_equal(m->cfg.vocab, 512);
    gguf_str arch;
    assert_int_equal(gguf_get_str(m->gguf, "general.architecture", &arch), 0);
    assert_true(gguf_str_eq(arch, "qwen2"));
    const gguf_kv *toks;
    assert_int_equal(gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks), 0);
    assert_int_equal(toks->arr_n, 512);
    model_free(m);
    remove(path);
}

static void expect(const variant *v, int code, const char *needle) {
    char err[256] = "";
    int rc = load_variant(v, err, sizeof(err));
    if (rc != code) fail_msg("want %s, got %s: %s", err_name(code), err_name(rc), err);
    if (needle && !strstr(err, needle)) fail_msg("message '%s' lacks '%s'", err, needle);
}

/* mkmodel's per-tensor types: a role names a matrix in every layer, a glob
 * on the full name one layer's, the last match wins, vectors stay f32,
 * and a pattern that names no matrix (here only a norm) is refused. */
static void test_mkmodel_overrides(void **state) {
    static const mkmodel_override ov[] = {
        {"attn_v", GGUF_TT_F16}, {"blk.1.*", GGUF_TT_BF16}, {"ffn_gate", GGUF_TT_F32}, {"output", GGUF_TT_Q8_0}};
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    s.type = GGUF_TT_Q8_0;
    s.overrides = ov;
    s.n_overrides = 4;
    tu_path(path, sizeof(path), "overrides.gguf");
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    model *m;
    assert_int_equal(model_load(path, &m, err, sizeof(err)), 0);
    const model_layer *L0 = &m->layers[0], *L1 = &m->layers[1];
    assert_int_equal(L0->wq.type, GGUF_TT_Q8_0);
    assert_int_equal(L0->wv.type, GGUF_TT_F16);
    assert_int_equal(L0->w_gate.type, GGUF_TT_F32);
    assert_int_equal(L1->wq.type, GGUF_TT_BF16);     /* blk.1.* */
    assert_int_equal(L1->wv.type, GGUF_TT_BF16);     /* blk.1.* after attn_v */
    assert_int_equal(L1->w_gate.type, GGUF_TT_F32);  /* ffn_gate after blk.1.* */
    assert_int_equal(m->output.type, GGUF_TT_Q8_0);  /* not attn_output */
    assert_int_equal(L0->wo.type, GGUF_TT_Q8_0);
    assert_int_equal(m->tok_embd.type, GGUF_TT_Q8_0);
    assert_int_equal(gguf_find_tensor(m->gguf, "blk.1.attn_norm.weight")->type, GGUF_TT_F32);
    model_free(m);
    remove(path);
    static const mkmodel_override norm[] = {{"attn_norm", GGUF_TT_F16}};
    s.overrides = norm;
    s.n_overrides = 1;
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), TS_ERR_INVAL);
    assert_non_null(strstr(err, "'attn_norm' matches no matrix"));
    remove(path);
}

static void test_missing_tensor(void **state) {
    variant v = BASE;
    v.skip = "blk.0.ffn_up.weight";
    expect(&v, TS_ERR_MODEL_TENSOR, "blk.0.ffn_up.weight");
}

static void test_wrong_shape(void **state) {
    variant v = BASE;
    v.q_rows = 48;
    expect(&v, TS_ERR_MODEL_SHAPE, "attn_q");
}

static void test_absurd_dims(void **state) {
    variant v = BASE;
    v.dim = 1u << 30;
    expect(&v, TS_ERR_MODEL_DIMS, NULL);
    v = BASE;
    v.kv_heads = 3; /* 4 query heads do not group over 3 */
    expect(&v, TS_ERR_MODEL_DIMS, "kv heads");
    v = BASE;
    v.heads = 0;
    expect(&v, TS_ERR_MODEL_DIMS, NULL);
}

static void test_unsupported_arch(void **state) {
    variant v = BASE;
    v.arch = "mamba";
    expect(&v, TS_ERR_MODEL_ARCH, "mamba");
}

/* ---- byte-level corruption ---------------------------------------------- */

static unsigned char *variant_bytes(size_t *len) {
    char path[512];
    tu_path(path, sizeof(path), "bytes.gguf");
    write_variant(path, &BASE);
    unsigned char *buf = tu_read_file(path, len);
    remove(path);
    assert_non_null(buf);
    return buf;
}

/* Open an exact-size heap copy so ASan sees any read past the end. */
static int open_copy(const unsigned char *buf, size_t len, char *err, size_t errlen) {
    unsigned char *copy = malloc(len ? len : 1);
    memcpy(copy, buf, len);
    gguf_ctx *g;
    int rc = gguf_open_buffer(copy, len, &g, err, errlen);
    if (!rc) {
        /* Touch every tensor's bytes: they must all be inside the buffer. */
        volatile unsigned char sink = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++)
            for (uint64_t b = 0; b < g->tensors[i].nbytes; b += 61)
                sink ^= ((const unsigned char *)g->tensors[i].data)[b];
        (void)sink;
        gguf_close(g);
    }
    free(copy);
    return rc;
}

/* Offset of the first tensor info: right after the name of the first tensor
 * appears in the header. */
static size_t find(const unsigned char *buf, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, s, n) == 0) return i;
    fail_msg("'%s' not in file", s);
    return 0;
}

static void test_bad_magic(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char err[256];
    assert_int_equal(open_copy(buf, len, err, sizeof(err)), 0);
    buf[0] = 'X';
    assert_int_equal(open_copy(buf, len, err, sizeof(err)), TS_ERR_GGUF_MAGIC);
    buf[0] = 'G';
    buf[4] = 9; /* version 9 */
    assert_int_equal(open_copy(buf, len, err, sizeof(err)), TS_ERR_GGUF_VERSION);
    free(buf);
}

static void test_truncated(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char err[256];
    size_t hdr = find(buf, len, "output_norm.weight"); /* inside the tensor infos */
    for (size_t cut = 0; cut < hdr; cut += 7)
        assert_int_equal(open_copy(buf, cut, err, sizeof(err)), TS_ERR_GGUF_TRUNCATED);
    assert_non_null(strstr(err, "truncated"));
    free(buf);
}

static void test_data_past_end(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char err[256];
    /* Cutting into the data section leaves the header intact: the last
     * tensor's bytes now lie past the end. */
    assert_int_equal(open_copy(buf, len - 8, err, sizeof(err)), TS_ERR_GGUF_BOUNDS);
    assert_non_null(strstr(err, "output_norm.weight"));
    /* An offset field pointing far away: the offset of the first tensor
     * info is the 8 bytes after its type. */
    size_t p = find(buf, len, "token_embd.weight") + strlen("token_embd.weight");
    p += 4 + 2 * 8 + 4; /* n_dims, ne[0], ne[1], type */
    uint64_t off = (uint64_t)1 << 40;
    memcpy(buf + p, &off, 8);
    assert_int_equal(open_copy(buf, len, err, sizeof(err)), TS_ERR_GGUF_BOUNDS);
    assert_non_null(strstr(err, "token_embd.weight"));
    free(buf);
}

static void test_unknown_type(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char err[256];
    size_t p = find(buf, len, "blk.0.attn_q.weight") + strlen("blk.0.attn_q.weight") + 4 + 16;
    uint32_t iq2_xxs = 16;
    memcpy(buf + p, &iq2_xxs, 4);
    assert_int_equal(open_copy(buf, len, err, sizeof(err)), TS_ERR_GGUF_TYPE);
    assert_non_null(strstr(err, "attn_q"));
    assert_non_null(strstr(err, "iq2_xxs"));
    free(buf);
}

/* A K-quant tensor whose rows are not whole super-blocks of 256 (this
 * file's rows are 64 long) would have the kernels read past each row: the
 * load refuses it, naming the path, the tensor, the type and the block,
 * long before a server listens. */
static void test_row_not_whole_blocks(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char path[512], err[512];
    size_t p = find(buf, len, "blk.0.attn_v.weight") + strlen("blk.0.attn_v.weight") + 4 + 16;
    uint32_t q6_k = 14;
    memcpy(buf + p, &q6_k, 4);
    tu_path(path, sizeof(path), "q6k.gguf");
    assert_int_equal(tu_write_file(path, buf, len), 0);
    model *m = NULL;
    assert_int_equal(model_load(path, &m, err, sizeof(err)), TS_ERR_GGUF_CORRUPT);
    assert_null(m);
    if (!strstr(err, path) || !strstr(err, "blk.0.attn_v.weight") || !strstr(err, "q6_K") || !strstr(err, "256"))
        fail_msg("message '%s' lacks the path, the tensor, its type or the block", err);
    remove(path);
    free(buf);
}

static void test_absurd_counts_and_dims(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    char err[256];
    uint64_t huge = (uint64_t)1 << 62;
    unsigned char *b2 = malloc(len);
    memcpy(b2, buf, len);
    memcpy(b2 + 8, &huge, 8); /* tensor count */
    assert_int_equal(open_copy(b2, len, err, sizeof(err)), TS_ERR_GGUF_CORRUPT);
    memcpy(b2, buf, len);
    size_t p = find(buf, len, "token_embd.weight") + strlen("token_embd.weight") + 4;
    memcpy(b2 + p, &huge, 8); /* ne[0] */
    assert_int_equal(open_copy(b2, len, err, sizeof(err)), TS_ERR_GGUF_CORRUPT);
    assert_non_null(strstr(err, "absurd"));
    free(b2);
    free(buf);
}

/* Random corruption: flip bytes of a small valid file many times. Every
 * outcome is fine except a crash or an out-of-bounds read (ASan). */
static void test_fuzz_flips(void **state) {
    size_t len;
    unsigned char *buf = variant_bytes(&len);
    unsigned char *work = malloc(len);
    size_t hdr = find(buf, len, "output_norm.weight") + 64; /* corrupt the header only */
    uint64_t x = 88172645463325252ull;
    int ok = 0, failed = 0;
    char err[256];
    for (int it = 0; it < 3000; it++) {
        memcpy(work, buf, len);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            work[x % hdr] = (unsigned char)(x >> 32);
        }
        size_t cut = it % 5 == 0 ? (size_t)(x >> 40) % len : len;
        if (open_copy(work, cut, err, sizeof(err)) == 0) ok++;
        else failed++;
    }
    print_message("fuzz: %d opened, %d refused\n", ok, failed);
    assert_true(failed > 0);
    free(work);
    free(buf);
}

static void test_missing_file(void **state) {
    gguf_ctx *g;
    char err[256];
    assert_int_equal(gguf_open("/nonexistent/x.gguf", &g, err, sizeof(err)), TS_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
}

/* The model is refused with exactly "<path>: not a regular file (<kind>)",
 * at once: model_load must not wait on a FIFO for a writer, nor open a
 * device, nor name the path twice. */
static void expect_not_regular(const char *path, const char *kind) {
    char want[600], err[512] = "";
    snprintf(want, sizeof(want), "%s: not a regular file (%s)", path, kind);
    model *m = NULL;
    alarm(10); /* a regression hangs in open(); the alarm ends the test instead */
    int rc = model_load(path, &m, err, sizeof(err));
    alarm(0);
    assert_int_equal(rc, TS_ERR_IO);
    assert_null(m);
    if (strcmp(err, want)) fail_msg("message '%s', want '%s'", err, want);
}

static void test_not_regular_file(void **state) {
    char fifo[512], sock[512];
    tu_path(fifo, sizeof(fifo), "model.fifo");
    remove(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_not_regular(fifo, "fifo");
    remove(fifo);
    tu_path(sock, sizeof(sock), "model.sock");
    remove(sock);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (strlen(sock) < sizeof(sa.sun_path)) {
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
        expect_not_regular(sock, "socket");
        remove(sock);
    }
    close(fd);
    expect_not_regular("/dev/null", "character device");
    expect_not_regular(tu_tmpdir(), "directory");
}

static void test_getters(void **state) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_u32(w, "a.u32", 7);
    gguf_writer_add_i32(w, "a.neg", -1);
    gguf_writer_add_f32(w, "a.f", 0.5f);
    gguf_writer_add_bool(w, "a.b", 1);
    int32_t arr[3] = {4, 5, 6};
    gguf_writer_add_arr_i32(w, "a.arr", arr, 3);
    const char *strs[2] = {"x", "hello"};
    gguf_writer_add_arr_str(w, "a.strs", strs, 2);
    /* Floats read as integers: a file may hold anything there. */
    float fl[5] = {2.75f, -2.75f, INFINITY, -INFINITY, NAN};
    gguf_writer_add_arr_f32(w, "a.fl", fl, 5);
    char path[512], err[256];
    tu_path(path, sizeof(path), "kv.gguf");
    assert_int_equal(gguf_writer_write(w, path, err, sizeof(err)), 0);
    gguf_writer_free(w);
    gguf_ctx *g;
    assert_int_equal(gguf_open(path, &g, err, sizeof(err)), 0);
    uint32_t u;
    float f;
    int b;
    assert_int_equal(gguf_get_u32(g, "a.u32", &u), 0);
    assert_int_equal(u, 7);
    assert_int_equal(gguf_get_u32(g, "a.neg", &u), TS_ERR_MODEL_KEY); /* negative */
    assert_int_equal(gguf_get_u32(g, "a.f", &u), TS_ERR_MODEL_KEY);   /* float */
    assert_int_equal(gguf_get_u32(g, "missing", &u), TS_ERR_MODEL_KEY);
    assert_int_equal(gguf_get_f32(g, "a.f", &f), 0);
    assert_float_equal(f, 0.5f, 0);
    assert_int_equal(gguf_get_bool(g, "a.b", &b), 0);
    assert_int_equal(b, 1);
    const gguf_kv *kv;
    assert_int_equal(gguf_get_arr(g, "a.arr", GGUF_VT_INT32, &kv), 0);
    assert_int_equal(gguf_arr_i64(kv, 2), 6);
    assert_int_equal(gguf_get_arr(g, "a.fl", GGUF_VT_FLOAT32, &kv), 0);
    assert_true(gguf_arr_i64(kv, 0) == 2 && gguf_arr_i64(kv, 1) == -2); /* toward zero */
    assert_true(gguf_arr_i64(kv, 2) == INT64_MAX && gguf_arr_i64(kv, 3) == INT64_MIN); /* saturated */
    assert_true(gguf_arr_i64(kv, 4) == 0); /* NaN */
    assert_int_equal(gguf_get_arr(g, "a.strs", GGUF_VT_STRING, &kv), 0);
    gguf_str s[2];
    assert_int_equal(gguf_arr_strings(kv, s), 0);
    assert_true(gguf_str_eq(s[1], "hello"));
    assert_int_equal(gguf_get_arr(g, "a.strs", GGUF_VT_INT32, &kv), TS_ERR_MODEL_KEY);
    gguf_close(g);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal_model_loads),
        cmocka_unit_test(test_synthetic_model_loads),
        cmocka_unit_test(test_mkmodel_overrides),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_absurd_dims),
        cmocka_unit_test(test_unsupported_arch),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_data_past_end),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_row_not_whole_blocks),
        cmocka_unit_test(test_absurd_counts_and_dims),
        cmocka_unit_test(test_fuzz_flips),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_not_regular_file),
        cmocka_unit_test(test_getters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
