/*
 * test_enc.c - the BERT encoder (engine/enc.h) on tiny files written here
 * with gguf's C writer: a good file loads and gives unit vectors; every
 * kind of bad file (a tensor missing, of the wrong shape or type, absurd
 * or unsupported metadata) and every bad batch (too long, too many tokens,
 * an id out of range, an empty sequence) is a clear error naming what is
 * wrong, with the output left untouched. Properties of the forward: the
 * attention is bidirectional (the CLS vector depends on the last token),
 * sequences of a batch do not see each other (bit for bit), and a fused
 * attn_qkv gives what the three matrices it stacks give.
 *
 * The numerical check against an independent reference is
 * tests/embed_ref.sh.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "enc.h"
#include "err.h"
#include "gguf.h"
#include "ops.h"
#include "testutil.h"

#define DIM 32
#define HEADS 4
#define FFN 64
#define VOCAB 40
#define CTX 8

/* What a test file gets wrong, if anything. */
typedef struct bad {
    const char *skip;       /* tensor left out */
    const char *extra_row;  /* tensor written with one row (or element) more */
    const char *as_q8;      /* tensor written as q8_0 */
    const char *arch;       /* general.architecture, default "bert" */
    int pooling;            /* bert.pooling_type; -1 leaves the key out */
    int causal;             /* bert.attention.causal */
    int heads;              /* head count, default HEADS */
    int pos_rows;           /* rows of position_embd, default CTX */
    int fused;              /* one attn_qkv instead of three */
} bad;

static float *random_floats(size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = tu_rng_float() * scale;
    return v;
}

/* Adds a tensor of rows x cols (rows 0: a vector of cols) drawn from the
 * test's stream, honouring b's mistakes. */
static void add(gguf_writer *w, const bad *b, const char *name, int rows, int cols, float scale, float offset) {
    if (b->skip && !strcmp(name, b->skip)) {
        free(random_floats((size_t)(rows ? rows : 1) * cols, scale)); /* keep the stream in step */
        return;
    }
    if (b->extra_row && !strcmp(name, b->extra_row)) rows ? rows++ : cols++;
    const size_t n = (size_t)(rows ? rows : 1) * (size_t)cols;
    float *v = random_floats(n, scale);
    for (size_t i = 0; i < n; i++) v[i] += offset;
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    uint32_t nd = rows ? 2 : 1;
    if (b->as_q8 && !strcmp(name, b->as_q8)) {
        void *q = malloc(n / 32 * 34);
        ops_quantize_q8_0(q, v, (int64_t)n);
        free(v);
        assert_int_equal(gguf_writer_take_tensor(w, name, GGUF_TT_Q8_0, nd, ne, q, n / 32 * 34), 0);
    } else {
        assert_int_equal(gguf_writer_take_tensor(w, name, GGUF_TT_F32, nd, ne, v, n * sizeof(float)), 0);
    }
}

/* A one-layer BERT of the test's dimensions, drawn from seed. */
static void write_bert(const char *path, const bad *b, uint64_t seed) {
    gguf_writer *w = gguf_writer_new();
    char err[256], n[64];
    tu_rng_seed(seed);
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", b->arch ? b->arch : "bert"), 0);
    gguf_writer_add_u32(w, "bert.block_count", 1);
    gguf_writer_add_u32(w, "bert.context_length", CTX);
    gguf_writer_add_u32(w, "bert.embedding_length", DIM);
    gguf_writer_add_u32(w, "bert.feed_forward_length", FFN);
    gguf_writer_add_u32(w, "bert.attention.head_count", b->heads ? (uint32_t)b->heads : HEADS);
    gguf_writer_add_f32(w, "bert.attention.layer_norm_epsilon", 1e-12f);
    gguf_writer_add_bool(w, "bert.attention.causal", b->causal);
    if (b->pooling >= 0) gguf_writer_add_u32(w, "bert.pooling_type", (uint32_t)b->pooling);
    const float s = 1.0f / sqrtf(DIM);
    add(w, b, "token_embd.weight", VOCAB, DIM, 1.0f, 0);
    add(w, b, "token_types.weight", 2, DIM, 1.0f, 0);
    add(w, b, "position_embd.weight", b->pos_rows ? b->pos_rows : CTX, DIM, 1.0f, 0);
    add(w, b, "token_embd_norm.weight", 0, DIM, 0.2f, 1.0f);
    add(w, b, "token_embd_norm.bias", 0, DIM, 0.2f, 0);
#define L(x) (snprintf(n, sizeof(n), "blk.0.%s", x), n)
    if (b->fused) {
        add(w, b, L("attn_qkv.weight"), 3 * DIM, DIM, 3 * s, 0);
        add(w, b, L("attn_qkv.bias"), 0, 3 * DIM, 0.2f, 0);
    } else {
        add(w, b, L("attn_q.weight"), DIM, DIM, 3 * s, 0);
        add(w, b, L("attn_k.weight"), DIM, DIM, 3 * s, 0);
        add(w, b, L("attn_v.weight"), DIM, DIM, 3 * s, 0);
        add(w, b, L("attn_q.bias"), 0, DIM, 0.2f, 0);
        add(w, b, L("attn_k.bias"), 0, DIM, 0.2f, 0);
        add(w, b, L("attn_v.bias"), 0, DIM, 0.2f, 0);
    }
    add(w, b, L("attn_output.weight"), DIM, DIM, 2 * s, 0);
    add(w, b, L("attn_output.bias"), 0, DIM, 0.2f, 0);
    add(w, b, L("attn_output_norm.weight"), 0, DIM, 0.2f, 1.0f);
    add(w, b, L("attn_output_norm.bias"), 0, DIM, 0.2f, 0);
    add(w, b, L("ffn_up.weight"), FFN, DIM, 2 * s, 0);
    add(w, b, L("ffn_up.bias"), 0, FFN, 0.2f, 0);
    add(w, b, L("ffn_down.weight"), DIM, FFN, 2 * s, 0);
    add(w, b, L("ffn_down.bias"), 0, DIM, 0.2f, 0);
    add(w, b, L("layer_output_norm.weight"), 0, DIM, 0.2f, 1.0f);
    add(w, b, L("layer_output_norm.bias"), 0, DIM, 0.2f, 0);
#undef L
    if (gguf_writer_write(w, path, err, sizeof(err))) fail_msg("%s", err);
    gguf_writer_free(w);
}

static enc_model *load_ok(const bad *b, uint64_t seed) {
    char path[512], err[512];
    enc_model *m;
    tu_path(path, sizeof(path), "enc.gguf");
    write_bert(path, b, seed);
    int rc = enc_load(path, &m, err, sizeof(err));
    if (rc) fail_msg("%s", err);
    remove(path);
    return m;
}

/* Loads a bad file: the code must be want and the message must name the
 * file and contain what. */
static void load_fails(const bad *b, int want, const char *what) {
    char path[512], err[512] = "";
    enc_model *m = (enc_model *)1;
    tu_path(path, sizeof(path), "enc_bad.gguf");
    write_bert(path, b, 3);
    int rc = enc_load(path, &m, err, sizeof(err));
    remove(path);
    if (rc != want || m != NULL || !strstr(err, path) || !strstr(err, what))
        fail_msg("want %s mentioning '%s', got %s (%d): %s", err_name(want), what, err_name(rc), rc, err);
}

static const bad GOOD = {.pooling = ENC_POOL_MEAN};

static void test_load_and_unit_norm(void **st) {
    (void)st;
    enc_model *m = load_ok(&GOOD, 3);
    assert_int_equal(enc_dim(m), DIM);
    assert_int_equal(enc_ctx_len(m), CTX);
    assert_int_equal(enc_pool(m), ENC_POOL_MEAN);
    assert_string_equal(enc_pool_name(enc_pool(m)), "mean");
    assert_int_equal(m->cfg.vocab, VOCAB);
    assert_int_equal(m->cfg.n_types, 2);
    enc_state *s;
    assert_int_equal(enc_state_new(m, 3 * CTX, 2, &s, NULL, 0), 0);
    assert_int_equal(enc_state_max_tokens(s), 3 * CTX);
    const int32_t a[] = {1}, b[] = {1, 7, 2}, c[] = {1, 3, 5, 7, 9, 11, 13, 2};
    const int32_t *seqs[] = {a, b, c};
    const int lens[] = {1, 3, CTX};
    float out[3 * DIM];
    assert_int_equal(enc_embed(s, seqs, lens, 3, out, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        double ss = 0;
        for (int e = 0; e < DIM; e++) {
            assert_true(isfinite(out[i * DIM + e]));
            ss += (double)out[i * DIM + e] * out[i * DIM + e];
        }
        assert_true(fabs(ss - 1.0) < 1e-5);
    }
    enc_state_free(s);
    enc_free(m);
}

static void test_missing_tensors(void **st) {
    (void)st;
    const char *names[] = {"blk.0.ffn_up.bias", "token_embd.weight", "position_embd.weight",
                           "token_embd_norm.bias", "blk.0.attn_v.weight", "blk.0.layer_output_norm.weight"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        bad b = GOOD;
        b.skip = names[i];
        load_fails(&b, TS_ERR_MODEL_TENSOR, names[i]);
    }
    bad b = GOOD;
    b.fused = 1;
    b.skip = "blk.0.attn_qkv.bias";
    load_fails(&b, TS_ERR_MODEL_TENSOR, "blk.0.attn_qkv.bias");
    /* token_types is optional (as in llama.cpp) and then adds zeros. */
    b = GOOD;
    b.skip = "token_types.weight";
    enc_model *m = load_ok(&b, 3);
    assert_int_equal(m->cfg.n_types, 0);
    for (int e = 0; e < DIM; e++) assert_true(m->type0[e] == 0.0f);
    enc_free(m);
}

static void test_wrong_shapes(void **st) {
    (void)st;
    const char *names[] = {"blk.0.attn_k.weight", "blk.0.ffn_down.weight", "blk.0.attn_output.bias",
                           "token_embd_norm.weight", "blk.0.ffn_up.bias"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        bad b = GOOD;
        b.extra_row = names[i];
        load_fails(&b, TS_ERR_MODEL_SHAPE, names[i]);
    }
    bad b = GOOD;
    b.pos_rows = CTX - 1; /* fewer positions than the context length */
    load_fails(&b, TS_ERR_MODEL_SHAPE, "position_embd.weight");
    b = GOOD;
    b.fused = 1;
    b.extra_row = "blk.0.attn_qkv.weight";
    load_fails(&b, TS_ERR_MODEL_SHAPE, "blk.0.attn_qkv.weight");
}

static void test_wrong_types(void **st) {
    (void)st;
    bad b = GOOD;
    b.as_q8 = "blk.0.attn_output_norm.weight";
    load_fails(&b, TS_ERR_GGUF_TYPE, "blk.0.attn_output_norm.weight");
    b.as_q8 = "blk.0.ffn_up.bias";
    load_fails(&b, TS_ERR_GGUF_TYPE, "blk.0.ffn_up.bias");
    /* A quantized matrix is fine. */
    b.as_q8 = "blk.0.ffn_up.weight";
    enc_free(load_ok(&b, 3));
}

static void test_bad_metadata(void **st) {
    (void)st;
    bad b = GOOD;
    b.arch = "llama";
    load_fails(&b, TS_ERR_MODEL_ARCH, "llama");
    b = GOOD;
    b.pooling = ENC_POOL_NONE;
    load_fails(&b, TS_ERR_MODEL_KEY, "pooling_type 0");
    b.pooling = ENC_POOL_RANK;
    load_fails(&b, TS_ERR_MODEL_KEY, "pooling_type 4");
    b.pooling = 99;
    load_fails(&b, TS_ERR_MODEL_KEY, "pooling_type 99");
    b = GOOD;
    b.causal = 1;
    load_fails(&b, TS_ERR_MODEL_ARCH, "causal");
    b = GOOD;
    b.heads = 5; /* 32 is not a multiple of 5 */
    load_fails(&b, TS_ERR_MODEL_DIMS, "5 heads");
    /* No pooling key: mean, as enc.h says. */
    b = GOOD;
    b.pooling = -1;
    enc_model *m = load_ok(&b, 3);
    assert_int_equal(enc_pool(m), ENC_POOL_MEAN);
    enc_free(m);
}

/* Every bad batch is refused with its code and a message, and out keeps
 * what it held. */
static void test_bad_batches(void **st) {
    (void)st;
    enc_model *m = load_ok(&GOOD, 3);
    enc_state *s;
    char err[256];
    assert_int_equal(enc_state_new(m, 0, 1, &s, err, sizeof(err)), TS_ERR_INVAL);
    assert_null(s);
    assert_int_equal(enc_state_new(m, 12, 2, &s, err, sizeof(err)), 0);
    const int32_t longer[CTX + 1] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int32_t six[6] = {1, 2, 3, 4, 5, 6}, bad_id[3] = {1, VOCAB, 2}, neg_id[2] = {-1, 2};
    float out[2 * DIM];
    for (int i = 0; i < 2 * DIM; i++) out[i] = 42.0f;
    struct {
        const int32_t *a, *b;
        int la, lb, n, want;
        const char *what;
    } cases[] = {
        {longer, six, CTX + 1, 1, 1, TS_ERR_CTX_LIMIT, "context length 8"},
        {six, longer, 2, CTX + 1, 2, TS_ERR_CTX_LIMIT, "sequence 1 has 9 tokens"},
        {six, six, 6, 6, 2, TS_ERR_OK, ""},
        {six, longer, 6, 7, 2, TS_ERR_BATCH_LIMIT, "more than 12 tokens"},
        {bad_id, six, 3, 1, 2, TS_ERR_TOK_RANGE, "id 40 is outside [0, 40)"},
        {six, neg_id, 1, 2, 2, TS_ERR_TOK_RANGE, "sequence 1, token 0: id -1"},
        {six, six, 0, 1, 2, TS_ERR_INVAL, "sequence 0 is empty"},
        {six, six, 1, 1, 0, TS_ERR_INVAL, "at least one sequence"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const int32_t *seqs[] = {cases[c].a, cases[c].b};
        const int lens[] = {cases[c].la, cases[c].lb};
        err[0] = 0;
        int rc = enc_embed(s, seqs, lens, cases[c].n, out, err, sizeof(err));
        if (rc != cases[c].want || !strstr(err, cases[c].what))
            fail_msg("case %zu: want %s '%s', got %s: %s", c, err_name(cases[c].want), cases[c].what, err_name(rc),
                     err);
        if (rc == 0) {
            for (int i = 0; i < 2 * DIM; i++) out[i] = 42.0f;
            continue;
        }
        for (int i = 0; i < 2 * DIM; i++) assert_true(out[i] == 42.0f);
    }
    enc_state_free(s);
    enc_free(m);
}

static void embed(enc_state *s, const int32_t *const *seqs, const int *lens, int n, float *out) {
    char err[256];
    int rc = enc_embed(s, seqs, lens, n, out, err, sizeof(err));
    if (rc) fail_msg("%s", err);
}

/* CLS pooling reads the first token only, so it depends on the last token
 * exactly when attention looks forward; mean and last pooling differ from
 * CLS on the same file. */
static void test_bidirectional_and_pooling(void **st) {
    (void)st;
    bad b = GOOD;
    b.pooling = ENC_POOL_CLS;
    enc_model *m = load_ok(&b, 5);
    enc_state *s;
    assert_int_equal(enc_state_new(m, 2 * CTX, 2, &s, NULL, 0), 0);
    const int32_t x[] = {1, 10, 20, 30, 2}, y[] = {1, 10, 20, 30, 3};
    const int32_t *seqs[] = {x, y};
    const int lens[] = {5, 5};
    float cls[2 * DIM];
    embed(s, seqs, lens, 2, cls);
    double diff = 0;
    for (int e = 0; e < DIM; e++) diff = fmax(diff, fabs(cls[e] - cls[DIM + e]));
    assert_true(diff > 1e-3); /* a causal mask would make them equal */
    enc_state_free(s);
    enc_free(m);

    float other[DIM];
    const int pools[] = {ENC_POOL_MEAN, ENC_POOL_LAST};
    for (int p = 0; p < 2; p++) {
        b.pooling = pools[p];
        m = load_ok(&b, 5); /* the same weights */
        assert_int_equal(enc_state_new(m, CTX, 1, &s, NULL, 0), 0);
        embed(s, seqs, lens, 1, other);
        diff = 0;
        for (int e = 0; e < DIM; e++) diff = fmax(diff, fabs(cls[e] - other[e]));
        assert_true(diff > 1e-3);
        enc_state_free(s);
        enc_free(m);
    }
}

/* max |a - b| over n floats. */
static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* A sequence's vector is the same whatever shares its batch (other tokens
 * of the same total, in another order): attention never crosses sequences.
 * Within 1e-6 (the vectors are unit length), not bit for bit: 17 rows of
 * f32 weights go to OpenBLAS's sgemm, whose kernels may sum a row in
 * another order depending on where in a tile the row falls (1e-7 apart on
 * a Zen host without AVX-512; equal on AVX-512 hosts). Another sequence's
 * vector differs by far more. */
static void test_batch_isolation(void **st) {
    (void)st;
    enc_model *m = load_ok(&GOOD, 7);
    enc_state *s;
    assert_int_equal(enc_state_new(m, 3 * CTX, 2, &s, NULL, 0), 0);
    const int32_t a[] = {1, 4, 9, 16, 25, 2}, b[] = {1, 33, 2}, c[] = {1, 5, 2}, d[] = {1, 11, 12, 13, 14, 15, 16, 2};
    float o1[3 * DIM], o2[3 * DIM];
    const int32_t *s1[] = {a, b, d}, *s2[] = {d, c, a};
    const int l1[] = {6, 3, 8}, l2[] = {8, 3, 6};
    embed(s, s1, l1, 3, o1);
    embed(s, s2, l2, 3, o2);
    assert_true(max_diff(o1, o2 + 2 * DIM, DIM) <= 1e-6);      /* a */
    assert_true(max_diff(o1 + 2 * DIM, o2, DIM) <= 1e-6);      /* d */
    assert_true(max_diff(o1 + DIM, o2 + DIM, DIM) > 1e-3);     /* b != c */
    enc_state_free(s);
    enc_free(m);
}

/* attn_qkv stacks q, k, v rows and biases: a file written fused draws the
 * same numbers in the same order as the separate one (q, k, v weights,
 * then q, k, v biases), so the two must agree. */
static void test_fused_qkv(void **st) {
    (void)st;
    bad f = GOOD;
    f.fused = 1;
    enc_model *ms = load_ok(&GOOD, 9), *mf = load_ok(&f, 9);
    assert_int_equal(mf->layers[0].fused, 1);
    assert_int_equal(ms->layers[0].fused, 0);
    enc_state *ss, *sf;
    assert_int_equal(enc_state_new(ms, CTX, 1, &ss, NULL, 0), 0);
    assert_int_equal(enc_state_new(mf, CTX, 1, &sf, NULL, 0), 0);
    const int32_t x[] = {1, 17, 23, 29, 31, 2};
    const int32_t *seqs[] = {x};
    const int lens[] = {6};
    float a[DIM], b[DIM];
    embed(ss, seqs, lens, 1, a);
    embed(sf, seqs, lens, 1, b);
    for (int e = 0; e < DIM; e++) assert_true(fabsf(a[e] - b[e]) < 1e-6f);
    enc_state_free(ss);
    enc_state_free(sf);
    enc_free(ms);
    enc_free(mf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_unit_norm), cmocka_unit_test(test_missing_tensors),
        cmocka_unit_test(test_wrong_shapes),       cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_bad_metadata),       cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_bidirectional_and_pooling), cmocka_unit_test(test_batch_isolation),
        cmocka_unit_test(test_fused_qkv),
    };
    return cmocka_run_group_tests_name("enc", tests, NULL, NULL);
}
