/*
 * test_engine_cache.c - a prefix cache hit, as the engine sees it: a
 * request whose block table starts with another request's full blocks and
 * whose first item starts after them gets bit-identical logits (F32) to
 * a miss that computed its whole prompt (chunked at the same place), and
 * the shared blocks are only read (their bytes unchanged). Also with two
 * requests reading the shared blocks in one batch.
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

#include "engine.h"
#include "err.h"
#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "testutil.h"

#define BS 4
#define N_BLOCKS 32
#define LEN 30
#define HIT 28 /* (LEN - 1) / BS full blocks: the scheduler's cap */

static model *make_f32(void) {
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    s.type = GGUF_TT_F32;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.seed = 11;
    tu_path(path, sizeof(path), "engine_cache.gguf");
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    model *m;
    if (model_load(path, &m, err, sizeof(err))) fail_msg("%s", err);
    remove(path);
    return m;
}

static eng *make_engine(const model *m) {
    /* f32: a hit's logits are held to the recomputed ones at 1e-5, and the
     * prefill and decode kernels compute a key ~1e-7 apart, which an f16
     * cache can round to neighbouring halves (test_engine.c checks f16). */
    eng_opts o = {.kv_dtype = ENG_KV_F32, .block_size = BS, .max_batch_tokens = 128, .max_seqs = 8, .n_threads = 2};
    o.kv_pool_bytes = eng_kv_token_bytes(m, &o) * BS * (size_t)N_BLOCKS;
    eng *e;
    char err[256];
    assert_int_equal(eng_new(m, &o, &e, err, sizeof(err)), 0);
    return e;
}

/* The bytes of blocks[0 .. n) into out. */
static void read_blocks(eng *e, const int32_t *blocks, int n, char *out) {
    size_t bb = eng_kv_block_bytes(e);
    for (int i = 0; i < n; i++) eng_kv_copy_out(e, &blocks[i], 1, out + (size_t)i * bb);
}

static float max_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fabsf(a[i] - b[i]) > d ? fabsf(a[i] - b[i]) : d;
    return d;
}

/* The CPU kernels change with a step's row count (ops.c: the streaming
 * kernel up to 16 rows, sgemm above, and OpenBLAS's sgemm itself may sum a
 * row differently with the step's row count on some CPUs), so a prompt
 * computed in one step and the same prompt computed in two differ in the
 * last bits: that is the engine's batching tolerance, not the cache's. The
 * cache's promise is exact: a hit computes what a miss whose prompt was
 * chunked at the same place computes, bit for bit, whoever wrote the shared
 * blocks, when the writer computed the prefix in a step of the same shape;
 * within the batching tolerance when the writer's step was longer. */
static void test_hit_matches_miss_f32(void **st) {
    (void)st;
    model *m = make_f32();
    eng *e = make_engine(m);
    int vocab = m->cfg.vocab;
    int32_t ids[LEN], other[LEN + 10];
    for (int i = 0; i < LEN; i++) ids[i] = (int32_t)((i * 37 + 5) % vocab);
    memcpy(other, ids, HIT * sizeof(int32_t)); /* the writer: same 28 tokens, another ending */
    for (int i = HIT; i < LEN + 10; i++) other[i] = (int32_t)((i * 11 + 3) % vocab);
    float *miss = malloc((size_t)vocab * sizeof(float)), *whole = malloc((size_t)vocab * sizeof(float));
    float *hit = malloc((size_t)vocab * sizeof(float) * 2);
    size_t bb = eng_kv_block_bytes(e);
    char *before = malloc(bb * (HIT / BS)), *after = malloc(bb * (HIT / BS));
    assert_true(miss && whole && hit && before && after);

    /* The miss: the prompt in two steps, [0, 28) then [28, 30), blocks 0 .. 7. */
    int32_t tm[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    eng_seq m1 = {ids, HIT, 0, tm, 8, ENG_LOGITS_NONE}, m2 = {ids + HIT, LEN - HIT, HIT, tm, 8, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &(eng_batch){&m1, 1}, NULL), 0);
    assert_int_equal(eng_forward(e, &(eng_batch){&m2, 1}, miss), 0);
    /* The same prompt in one step: equal within the batching tolerance. */
    int32_t tw[8] = {24, 25, 26, 27, 28, 29, 30, 31};
    eng_seq w1 = {ids, LEN, 0, tw, 8, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &(eng_batch){&w1, 1}, whole), 0);
    assert_true(max_diff(whole, miss, vocab) < 1e-5f);

    /* A writer whose longer prompt ran in one step, over blocks 22 .. 31:
     * a hit on its first seven blocks is within the batching tolerance. */
    int32_t tl[10] = {22, 23, 24, 25, 26, 27, 28, 29, 30, 31}, tl_hit[8] = {22, 23, 24, 25, 26, 27, 28, 20};
    eng_seq l = {other, LEN + 10, 0, tl, 10, ENG_LOGITS_NONE};
    assert_int_equal(eng_forward(e, &(eng_batch){&l, 1}, NULL), 0);
    eng_seq lh = {ids + HIT, LEN - HIT, HIT, tl_hit, 8, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &(eng_batch){&lh, 1}, hit), 0);
    assert_true(max_diff(hit, miss, vocab) < 1e-5f);

    /* The writer of the shared blocks: a longer prompt whose first 28
     * tokens ran in one step, as the miss's did, over blocks 8 .. 17; its
     * first seven blocks hold the cached prefix. */
    int32_t ta[10] = {8, 9, 10, 11, 12, 13, 14, 15, 16, 17};
    eng_seq a1 = {other, HIT, 0, ta, 10, ENG_LOGITS_NONE}, a2 = {other + HIT, LEN + 10 - HIT, HIT, ta, 10, ENG_LOGITS_NONE};
    assert_int_equal(eng_forward(e, &(eng_batch){&a1, 1}, NULL), 0);
    assert_int_equal(eng_forward(e, &(eng_batch){&a2, 1}, NULL), 0);
    read_blocks(e, ta, HIT / BS, before);

    /* The hit: those seven blocks shared, the rest computed in a block of
     * its own; then two such requests in one batch. */
    int32_t tb[8] = {8, 9, 10, 11, 12, 13, 14, 20}, tc[8] = {8, 9, 10, 11, 12, 13, 14, 21};
    eng_seq b = {ids + HIT, LEN - HIT, HIT, tb, 8, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &(eng_batch){&b, 1}, hit), 0);
    assert_memory_equal(hit, miss, (size_t)vocab * sizeof(float));
    eng_seq two[2] = {b, {ids + HIT, LEN - HIT, HIT, tc, 8, ENG_LOGITS_LAST}};
    assert_int_equal(eng_forward(e, &(eng_batch){two, 2}, hit), 0);
    assert_memory_equal(hit, miss, (size_t)vocab * sizeof(float));
    assert_memory_equal(hit + vocab, miss, (size_t)vocab * sizeof(float));

    /* Shared blocks were only read. */
    read_blocks(e, ta, HIT / BS, after);
    assert_memory_equal(before, after, bb * (HIT / BS));
    free(miss); free(whole); free(hit); free(before); free(after);
    eng_free(e);
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_matches_miss_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
