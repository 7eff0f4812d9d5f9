/*
 * test_engine.c - the batched forward against itself run one sequence at a
 * time: mixing prefill chunks and decodes of several sequences in one batch,
 * over interleaved, non-contiguous block tables, must not change any
 * sequence's logits; neither may swapping a sequence's blocks out and back
 * in (to other block ids). Bad batches are refused and change nothing.
 * A model whose fused products mix weight types (as quantized checkpoints
 * do) runs, batched as well as solo, and decodes as the same weights in f32.
 * Every further architecture (llama3, qwen3, gemma3 with a sliding window
 * shorter than the sequences, phi3) holds to the same batching equivalence,
 * in f32 and a quantized type; files those archs' loader must refuse are
 * refused with a message naming why.
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

#define N_SEQ 4
#define BS 4        /* small blocks so every sequence spans several */
#define MAX_LEN 48

typedef struct seq_ref {
    int len;                    /* tokens in the sequence */
    int32_t ids[MAX_LEN];
    float *logits;              /* (len, vocab): logits after each position */
} seq_ref;

typedef struct fixture {
    model *m;
    int vocab;
    seq_ref seqs[N_SEQ];
} fixture;

static const int LENS[N_SEQ] = {7, 23, 40, 2};

/* The mix of issue 11, with four types and both fused groups split: q, k
 * (and attn_output, ffn_up, ffn_down, the embedding) in q8_0 beside v in
 * f16; gate in f32 beside up in q8_0; the output matrix in bf16. */
static const mkmodel_override MIXED[] = {
    {"attn_v", GGUF_TT_F16}, {"ffn_gate", GGUF_TT_F32}, {"output", GGUF_TT_BF16}};
#define N_MIXED (int)(sizeof(MIXED) / sizeof(MIXED[0]))

/* The mix of llama.cpp's Q4_K_M recipe, plus the legacy types on the
 * fused products' partners: q4_K, with v and the output in q6_K, gate in
 * q5_0 beside up in q4_K, down in q5_K and the embedding in q8_0. */
static const mkmodel_override QKM[] = {{"attn_v", GGUF_TT_Q6_K},    {"output", GGUF_TT_Q6_K},
                                       {"ffn_gate", GGUF_TT_Q5_0},  {"ffn_down", GGUF_TT_Q5_K},
                                       {"token_embd", GGUF_TT_Q8_0}};
#define N_QKM (int)(sizeof(QKM) / sizeof(QKM[0]))

/* The tiny GQA model of seed 11 in type, with n_ov overrides (ov). The
 * weights drawn are the same for every type and override. Types of
 * 256-element blocks get rows of 256 (dim 256, ffn 512). */
static model *make_model_ov(uint32_t type, const mkmodel_override *ov, int n_ov) {
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    if (gguf_type_block(type) == 256) {
        s.dim = 256;
        s.ffn_dim = 512;
    }
    s.type = type;
    s.overrides = ov;
    s.n_overrides = n_ov;
    s.n_heads = 8;
    s.n_kv_heads = 2; /* GQA */
    s.seed = 11;
    tu_path(path, sizeof(path), "engine.gguf");
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    model *m;
    int rc = model_load(path, &m, err, sizeof(err));
    if (rc) fail_msg("%s", err);
    remove(path);
    return m;
}

static model *make_model(uint32_t type) { return make_model_ov(type, NULL, 0); }

/* The tiny GQA model of seed 11 in architecture arch (mkmodel's defaults
 * for it: qwen3/gemma3 heads of 16 beside dim 64 / 8 heads, gemma3's window
 * of 8 positions on layers 0..4 of 6, phi3's fused tensors and partial
 * rotary, llama3's rope_freqs and context of 131072, of which the engine
 * must not allocate more than its pool). */
static model *make_arch_model(const char *arch, uint32_t type) {
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    assert_int_equal(mkmodel_arch(&s, arch), 0);
    s.type = type;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.seed = 11;
    if (strcmp(arch, "gemma3") == 0) s.n_layers = 6; /* layer 5 is global */
    tu_path(path, sizeof(path), "engine_arch.gguf");
    int rc = mkmodel_write(&s, path, err, sizeof(err));
    if (rc) fail_msg("%s", err);
    model *m;
    rc = model_load(path, &m, err, sizeof(err));
    if (rc) fail_msg("%s", err);
    remove(path);
    return m;
}

/* The cache every engine here gets. f32 by default: batching, swapping and
 * refusals are held to the f32 path's tolerances; test_kv_cache_f16 runs
 * the same checks over the f16 cache, with the rounding's. */
static eng_kv_dtype kv_now = ENG_KV_F32;

static eng *make_engine(const model *m, int n_blocks, int max_T) {
    eng_opts o = {.kv_dtype = kv_now, .block_size = BS, .max_batch_tokens = max_T, .max_seqs = 8, .n_threads = 2};
    o.kv_pool_bytes = eng_kv_token_bytes(m, &o) * BS * (size_t)n_blocks;
    eng *e;
    char err[256];
    assert_int_equal(eng_new(m, &o, &e, err, sizeof(err)), 0);
    assert_int_equal(eng_kv_n_blocks(e), n_blocks);
    return e;
}

/* Solo reference: each sequence alone, prompt in one step with every row's
 * logits, over the plain table 0, 1, 2, ... */
static void run_solo(fixture *f) {
    eng *e = make_engine(f->m, 16, 64);
    int32_t table[16];
    for (int i = 0; i < 16; i++) table[i] = i;
    for (int s = 0; s < N_SEQ; s++) {
        seq_ref *r = &f->seqs[s];
        eng_seq q = {r->ids, r->len, 0, table, 16, ENG_LOGITS_ALL};
        eng_batch b = {&q, 1};
        assert_int_equal(eng_forward(e, &b, r->logits), 0);
    }
    eng_free(e);
}

static int setup_model(void **state, model *m) {
    fixture *f = calloc(1, sizeof(*f));
    f->m = m;
    f->vocab = f->m->cfg.vocab;
    uint64_t x = 12345;
    for (int s = 0; s < N_SEQ; s++) {
        seq_ref *r = &f->seqs[s];
        r->len = LENS[s];
        for (int i = 0; i < r->len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            r->ids[i] = (int32_t)((x >> 33) % (uint64_t)f->vocab);
        }
        r->logits = malloc((size_t)r->len * f->vocab * sizeof(float));
    }
    run_solo(f);
    *state = f;
    return 0;
}

static int setup_f32(void **state) { return setup_model(state, make_model(GGUF_TT_F32)); }
static int setup_f16(void **state) { return setup_model(state, make_model(GGUF_TT_F16)); }
static int setup_q8(void **state) { return setup_model(state, make_model(GGUF_TT_Q8_0)); }
static int setup_mixed(void **state) { return setup_model(state, make_model_ov(GGUF_TT_Q8_0, MIXED, N_MIXED)); }
static int setup_qkm(void **state) { return setup_model(state, make_model_ov(GGUF_TT_Q4_K, QKM, N_QKM)); }

/* The quantized types of quant.h, one group each (a type without a kernel
 * on this build fails the load, and so the group). */
static const uint32_t QTYPES[] = {GGUF_TT_Q4_0, GGUF_TT_Q4_1, GGUF_TT_Q5_0, GGUF_TT_Q5_1, GGUF_TT_IQ4_NL,
                                  GGUF_TT_Q2_K, GGUF_TT_Q3_K, GGUF_TT_Q4_K, GGUF_TT_Q5_K, GGUF_TT_Q6_K,
                                  GGUF_TT_IQ4_XS};
static uint32_t qtype_now;  /* the group running: cmocka's setups take no argument */
static int setup_qtype(void **state) { return setup_model(state, make_model(qtype_now)); }

/* The further architectures, each in f32 and one quantized type. */
static const struct {
    const char *arch;
    uint32_t type;
} ARCH_CASES[] = {{"llama3", GGUF_TT_F32}, {"llama3", GGUF_TT_Q4_0}, {"qwen3", GGUF_TT_F32},
                  {"qwen3", GGUF_TT_Q8_0}, {"gemma3", GGUF_TT_F32}, {"gemma3", GGUF_TT_Q5_0},
                  {"phi3", GGUF_TT_F32},   {"phi3", GGUF_TT_Q4_1}};
static int arch_case_now;
static int setup_arch(void **state) {
    return setup_model(state, make_arch_model(ARCH_CASES[arch_case_now].arch, ARCH_CASES[arch_case_now].type));
}

static int teardown(void **state) {
    fixture *f = *state;
    for (int s = 0; s < N_SEQ; s++) free(f->seqs[s].logits);
    model_free(f->m);
    free(f);
    return 0;
}

/* max |a - b| / max |b| over one row; infinite when a holds a NaN or an
 * infinity, which fmax would otherwise pass over. */
static double row_err(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / (m > 0 ? m : 1);
}

/* Per-sequence progress through a batched schedule. */
typedef struct live {
    int done;                   /* positions processed */
    int32_t table[MAX_LEN / BS + 1];
} live;

/* Each step, every unfinished sequence processes a chunk whose size comes
 * from a fixed schedule (1 = a decode-like step), so batches mix prefill
 * chunks and single tokens. Compares each returned row with the solo run. */
static double run_batched(fixture *f, eng *e, live *lv, const int (*chunks)[N_SEQ], int n_steps,
                          int swap_step) {
    float *logits = malloc((size_t)MAX_LEN * N_SEQ * f->vocab * sizeof(float));
    double worst = 0;
    for (int step = 0; step < n_steps; step++) {
        eng_seq qs[N_SEQ];
        int who[N_SEQ], n = 0;
        for (int s = 0; s < N_SEQ; s++) {
            int c = chunks[step][s], left = f->seqs[s].len - lv[s].done;
            if (c > left) c = left;
            if (c <= 0) continue;
            qs[n] = (eng_seq){f->seqs[s].ids + lv[s].done, c, lv[s].done, lv[s].table,
                              MAX_LEN / BS + 1, ENG_LOGITS_ALL};
            who[n++] = s;
        }
        if (!n) break;
        eng_batch b = {qs, n};
        assert_int_equal(eng_forward(e, &b, logits), 0);
        int row = 0;
        for (int i = 0; i < n; i++) {
            seq_ref *r = &f->seqs[who[i]];
            for (int j = 0; j < qs[i].n_tokens; j++, row++) {
                double d = row_err(logits + (size_t)row * f->vocab,
                                   r->logits + (size_t)(qs[i].pos + j) * f->vocab, f->vocab);
                worst = fmax(worst, d);
            }
            lv[who[i]].done += qs[i].n_tokens;
        }
        if (step == swap_step) {
            /* Swap sequence 1 out, clobber its blocks, and bring it back into
             * different blocks (the spare ids 40..). */
            int nb = (lv[1].done + BS - 1) / BS;
            size_t bytes = eng_kv_block_bytes(e) * (size_t)nb;
            char *host = malloc(bytes), *junk = malloc(bytes);
            memset(junk, 0x7f, bytes);
            assert_int_equal(eng_kv_copy_out(e, lv[1].table, nb, host), 0);
            assert_int_equal(eng_kv_copy_in(e, lv[1].table, nb, junk), 0);
            for (int i = 0; i < nb; i++) lv[1].table[i] = 40 + i;
            assert_int_equal(eng_kv_copy_in(e, lv[1].table, nb, host), 0);
            free(host);
            free(junk);
        }
    }
    for (int s = 0; s < N_SEQ; s++) assert_int_equal(lv[s].done, f->seqs[s].len);
    free(logits);
    return worst;
}

/* Interleaved, shuffled block ids: sequence s gets ids s, s+4, s+8, ...
 * permuted, so neighbours in a table are never neighbours in the pool. */
static void interleave_tables(live *lv) {
    memset(lv, 0, sizeof(live) * N_SEQ);
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i <= MAX_LEN / BS; i++) lv[s].table[i] = ((i * 7) % 13) * N_SEQ + s;
}

static const int SCHEDULE[][N_SEQ] = {
    {3, 23, 10, 1}, {4, 1, 10, 1}, {1, 1, 20, 1}, {1, 1, 1, 1},
    {1, 5, 1, 1},   {1, 1, 1, 1},  {1, 1, 1, 1},  {1, 1, 1, 1},
};

static void check_batched(void **state, double tol) {
    fixture *f = *state;
    eng *e = make_engine(f->m, 64, 64);
    live lv[N_SEQ];
    interleave_tables(lv);
    double worst = run_batched(f, e, lv, SCHEDULE, 8, -1);
    print_message("batched vs solo: worst relative row error %.3g\n", worst);
    assert_true(worst <= tol);
    eng_free(e);
}

static void test_batch_equivalence_f32(void **state) { check_batched(state, 1e-5); }
static void test_batch_equivalence_f16(void **state) { check_batched(state, 1e-5); }
/* Q8_0 quantizes activations per call; a token's activation blocks are the
 * same whatever else is in the batch, so the results still agree closely. */
static void test_batch_equivalence_q8(void **state) { check_batched(state, 1e-5); }

/* A mixed model runs its fused groups per type; a token's results must
 * still not depend on the rest of its batch, up to how its float products
 * round: its F16 and F32 products take sgemm above T = 16 and the streaming
 * kernels below, so their sums differ in the last bits between a batch and
 * a sequence alone, and where such an output feeds a Q8_0 product, that can
 * move an activation across a rounding boundary of its 8-bit quantization,
 * a step of 1/127 of its block's largest value. With the float products
 * streamed at every T the error is 4e-7; as built, 2.6e-4 on a Xeon build
 * and under 1e-5 on an EPYC one (no boundary crossed). A batching fault
 * (another sequence's keys, a wrong block) moves a row by far more. */
static void test_batch_equivalence_mixed(void **state) { check_batched(state, 1e-2); }

/* The other quantized types run their integer kernels at every T, each
 * token's activations quantized alone, and each activation row's sums in
 * the same order whatever its place in the kernel's group: batched equals
 * alone as closely as for the float types. */
static void test_batch_equivalence_quant(void **state) { check_batched(state, 1e-5); }

/* Each architecture's features are per token (q/k norms, post norms, the
 * GELU gate, the embedding scale) or per position (each layer's rope, the
 * sliding window, which skips whole blocks and starts inside others): none
 * may make a token's logits depend on its batch. */
static void test_batch_equivalence_arch(void **state) { check_batched(state, 1e-5); }

/* The architectures' configuration as the loader derived it. */
static void test_arch_config(void **state) {
    fixture *f = *state;
    const model *m = f->m;
    const model_config *c = &m->cfg;
    const char *arch = ARCH_CASES[arch_case_now].arch;
    if (strcmp(arch, "llama3") == 0) {
        assert_int_equal(c->arch, MODEL_ARCH_LLAMA);
        assert_non_null(m->rope_freqs);
        assert_int_equal(c->ctx_len, 131072);
        assert_float_equal(m->rope_freqs[c->n_rot / 2 - 1], 8.0f, 0);
    } else if (strcmp(arch, "qwen3") == 0) {
        assert_int_equal(c->arch, MODEL_ARCH_QWEN3);
        assert_int_equal(c->head_dim, 16); /* 2 * 64 / 8 */
        assert_non_null(m->layers[0].q_norm);
        assert_null(m->layers[0].bq);
    } else if (strcmp(arch, "gemma3") == 0) {
        assert_int_equal(c->arch, MODEL_ARCH_GEMMA3);
        assert_int_equal(c->swa_window, 8);
        for (int l = 0; l < 6; l++) assert_int_equal(m->layers[l].swa, l != 5);
        assert_float_equal(c->embd_scale, 8.0f, 0);
        assert_float_equal(c->attn_scale, 0.25f, 0); /* 1 / sqrt(16) */
        assert_float_equal(c->rope[MODEL_ROPE_GLOBAL].scale, 0.125f, 0);
        assert_float_equal(c->rope[MODEL_ROPE_LOCAL].base, 10000.0f, 0);
        assert_int_equal(c->ffn_act, MODEL_FFN_GELU_TANH);
        assert_ptr_equal(m->output.data, m->tok_embd.data);
    } else {
        assert_int_equal(c->arch, MODEL_ARCH_PHI3);
        assert_int_equal(c->n_rot, 6); /* 3/4 of a head of 8 */
        /* the fused views: k right after q's rows, up after the gate's */
        assert_ptr_equal((const char *)m->layers[0].wk.data,
                         (const char *)m->layers[0].wq.data +
                             m->layers[0].wq.n_out * gguf_row_bytes(m->layers[0].wq.type, (uint64_t)c->dim));
        assert_int_equal(m->layers[0].w_up.n_out, c->ffn_dim);
    }
    /* the KV cache holds head_dim per kv head */
    assert_int_equal(model_kv_bytes_per_token(c, 4), 2 * (size_t)c->n_layers * 2 * (size_t)c->head_dim * 4);
    /* the CPU's default cache is f16: half of that */
    eng_opts o = {0};
    assert_int_equal(eng_kv_token_bytes(m, &o), model_kv_bytes_per_token(c, 2));
    o.kv_dtype = ENG_KV_F32;
    assert_int_equal(eng_kv_token_bytes(m, &o), model_kv_bytes_per_token(c, 4));
}

/* The batched schedule with a swap out and in to other blocks mid-run,
 * against the solo run. */
static void check_swapped(void **state, double tol) {
    fixture *f = *state;
    eng *e = make_engine(f->m, 64, 64);
    live lv[N_SEQ];
    interleave_tables(lv);
    double worst = run_batched(f, e, lv, SCHEDULE, 8, 1);
    print_message("after swap out/in to new blocks (%s cache): worst relative row error %.3g\n",
                  eng_kv_dtype_name(kv_now), worst);
    assert_true(worst <= tol);
    eng_free(e);
}

/* The f16 cache (the CPU's default). Each key and value is rounded once
 * as stored (relative error <= 2^-11). A prefill and a decode step compute
 * a key through different kernels, ~1e-7 apart, which can round to
 * neighbouring halves: one element a half-ulp off moves a logits row by
 * about 1e-5 here (measured 1.1e-5), so batched and swapped runs are held
 * to 1e-4 against the f16 solo run; and the f16 run must differ from the
 * f32 one (the cache did round) by no more than the rounding allows. */
static void test_kv_cache_f16(void **state) {
    fixture *f = *state;
    float *f32_logits[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        size_t n = (size_t)f->seqs[s].len * f->vocab;
        f32_logits[s] = malloc(n * sizeof(float));
        memcpy(f32_logits[s], f->seqs[s].logits, n * sizeof(float));
    }
    kv_now = ENG_KV_F16;
    run_solo(f);
    double apart = 0;
    for (int s = 0; s < N_SEQ; s++)
        for (int i = 0; i < f->seqs[s].len; i++)
            apart = fmax(apart, row_err(f->seqs[s].logits + (size_t)i * f->vocab,
                                        f32_logits[s] + (size_t)i * f->vocab, f->vocab));
    print_message("f16 cache vs f32 cache: worst relative row error %.3g\n", apart);
    assert_true(apart > 0 && apart <= 5e-3);
    check_batched(state, 1e-4);
    check_swapped(state, 1e-4);
    for (int s = 0; s < N_SEQ; s++) free(f32_logits[s]);
}

/* After test_kv_cache_f16, pass or fail: the f32 cache and its solo run
 * again for the tests after it. */
static int back_to_f32(void **state) {
    kv_now = ENG_KV_F32;
    run_solo(*state);
    return 0;
}

static void test_swap_roundtrip(void **state) { check_swapped(state, 1e-5); }

/* A refused batch must leave the cache as it was: run sequence 0 halfway,
 * throw bad batches at the engine, finish it and compare with solo. */
static void test_bad_batches_change_nothing(void **state) {
    fixture *f = *state;
    eng *e = make_engine(f->m, 16, 32);
    seq_ref *r = &f->seqs[2];
    int32_t table[16];
    for (int i = 0; i < 16; i++) table[i] = 15 - i;
    float *logits = malloc((size_t)64 * f->vocab * sizeof(float));
    eng_seq q = {r->ids, 20, 0, table, 16, ENG_LOGITS_LAST};
    eng_batch b = {&q, 1};
    /* What the engine holds, from the start: the pool and its run state;
     * no device memory on the CPU, no time before a forward pass. */
    eng_dev_stats ds;
    eng_dev_stats_get(e, &ds);
    assert_true(ds.kv_bytes == 16 * eng_kv_block_bytes(e) && ds.held_bytes > ds.kv_bytes);
    assert_true(ds.device_bytes == 0 && ds.forwards == 0 && ds.compute_s == 0);
    const uint64_t held = ds.held_bytes;
    assert_int_equal(eng_forward(e, &b, logits), 0);
    eng_dev_stats_get(e, &ds);
    assert_true(ds.forwards == 1 && ds.compute_s > 0 && ds.held_bytes == held);
    const double one = ds.compute_s;

    int32_t bad_ids[2] = {r->ids[20], f->vocab}; /* second id out of range */
    eng_seq bq = {bad_ids, 2, 20, table, 16, ENG_LOGITS_LAST};
    eng_batch bb = {&bq, 1};
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_TOK_RANGE);
    int32_t bad_table[16];
    memcpy(bad_table, table, sizeof(table));
    bad_table[5] = 16;
    bq = (eng_seq){r->ids + 20, 2, 20, bad_table, 16, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_KV_BLOCK);
    bq = (eng_seq){r->ids + 20, 2, 20, table, 5, ENG_LOGITS_LAST}; /* table too short */
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_KV_CAPACITY);
    int32_t long_table[17];
    for (int i = 0; i < 17; i++) long_table[i] = table[i % 16];
    bq = (eng_seq){r->ids + 20, 1, 16 * BS, long_table, 17, ENG_LOGITS_LAST}; /* past the pool */
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_KV_CAPACITY);
    bq = (eng_seq){r->ids, 33, 20, table, 16, ENG_LOGITS_LAST}; /* over max_batch_tokens */
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_BATCH_LIMIT);
    bq = (eng_seq){r->ids, 2, f->m->cfg.ctx_len - 1, table, 16, ENG_LOGITS_LAST};
    assert_int_equal(eng_forward(e, &bb, logits), TS_ERR_CTX_LIMIT);
    eng_seq two[2] = {{r->ids + 20, 1, 20, table, 16, ENG_LOGITS_LAST},
                      {r->ids, 1, 0, table + 5, 11, ENG_LOGITS_LAST}}; /* both write block 10 */
    eng_batch tb = {two, 2};
    assert_int_equal(eng_forward(e, &tb, logits), TS_ERR_KV_BLOCK);
    eng_dev_stats_get(e, &ds);
    assert_true(ds.forwards == 1 && ds.compute_s == one); /* refused batches never ran */

    q = (eng_seq){r->ids + 20, r->len - 20, 20, table, 16, ENG_LOGITS_ALL};
    assert_int_equal(eng_forward(e, &b, logits), 0);
    double worst = 0;
    for (int j = 0; j < r->len - 20; j++)
        worst = fmax(worst, row_err(logits + (size_t)j * f->vocab, r->logits + (size_t)(20 + j) * f->vocab,
                                    f->vocab));
    assert_true(worst <= 1e-5);
    free(logits);
    eng_free(e);
}

#define GREEDY_N 24  /* tokens generated after the prompt */

static int argmax(const float *row, int n) {
    int best = 0;
    for (int v = 1; v < n; v++) best = row[v] > row[best] ? v : best;
    return best;
}

/* GREEDY_N decode steps after the n prompt ids of ids, through a fresh
 * engine: the prompt in one step, then one token a step. rows receives the
 * logits row each step ends with, (GREEDY_N, vocab). With choose set, each
 * step appends its argmax to ids (greedy decoding); without, ids already
 * holds the tokens to feed (teacher forcing). */
static void decode(const model *m, int32_t *ids, int n, int choose, float *rows) {
    const int vocab = m->cfg.vocab;
    eng *e = make_engine(m, 16, 64);
    int32_t table[16];
    for (int i = 0; i < 16; i++) table[i] = i;
    for (int g = 0, pos = 0; g < GREEDY_N; pos = n + g, g++) {
        eng_seq q = {ids + pos, n + g - pos, pos, table, 16, ENG_LOGITS_LAST};
        eng_batch b = {&q, 1};
        float *row = rows + (size_t)g * vocab;
        assert_int_equal(eng_forward(e, &b, row), 0);
        if (choose) ids[n + g] = argmax(row, vocab);
    }
    eng_free(e);
}

/* The mixed model against the same weights all in f32: the f32 model
 * decodes greedily, the mixed one is fed the same tokens, and at every
 * step its logits must lie within TOL of max |logit| of the f32 row and
 * its argmax must be the token f32 chose. TOL = 5e-2 is the q8_0 bound of
 * tests/ref/compare.py, for the same reason: q8_0 rounds each weight and
 * (in its kernel) each activation to 8 bits per block of 32, up to 1/254
 * of the block's largest value, and that compounds over the layers (f16
 * and bf16, at 2^-11 and 2^-8, add less); the rows measured here differ by
 * about 1e-2. A structural slip in splitting the fused groups (a product
 * written to the wrong output, gate and up exchanged, the gate skipped)
 * moves logits by O(1) of their range. The argmax may differ only where
 * the f32 logits nearly tie (gap <= 2 TOL max |logit|, as each side may
 * be off by TOL): this random model's logits are flat enough to have such
 * steps, and a near tie is no evidence either way. Teacher forcing keeps
 * one near tie from parting the sequences and hiding the steps after it. */
static void test_mixed_matches_f32(void **state) {
    fixture *f = *state;
    const double TOL = 5e-2;
    model *ref = make_model(GGUF_TT_F32);
    const int vocab = f->vocab, n = f->seqs[2].len;
    int32_t ids[MAX_LEN + GREEDY_N];
    float *rows_mix = malloc((size_t)GREEDY_N * vocab * sizeof(float));
    float *rows_ref = malloc((size_t)GREEDY_N * vocab * sizeof(float));
    memcpy(ids, f->seqs[2].ids, (size_t)n * sizeof(int32_t));
    decode(ref, ids, n, 1, rows_ref);
    decode(f->m, ids, n, 0, rows_mix);
    double worst = 0;
    int same = 0;
    for (int g = 0; g < GREEDY_N; g++) {
        const float *r = rows_ref + (size_t)g * vocab, *c = rows_mix + (size_t)g * vocab;
        worst = fmax(worst, row_err(c, r, vocab));
        const int want = ids[n + g], got = argmax(c, vocab);
        if (got == want) {
            same++;
            continue;
        }
        double mx = 0;
        for (int v = 0; v < vocab; v++) mx = fmax(mx, fabs(r[v]));
        const double gap = (double)r[want] - r[got];
        if (!(gap <= 2 * TOL * mx))
            fail_msg("step %d: mixed argmax %d, f32 chose %d, f32 gap %.3g > %.3g: not a near tie", g, got, want,
                     gap, 2 * TOL * mx);
        print_message("step %d: mixed argmax %d, f32 chose %d: a near tie, f32 gap %.3g <= %.3g\n", g, got, want,
                      gap, 2 * TOL * mx);
    }
    print_message("mixed vs f32: %d of %d greedy tokens equal, worst relative row error %.3g (tol %.0e)\n", same,
                  GREEDY_N, worst, TOL);
    assert_true(worst <= TOL);
    free(rows_mix);
    free(rows_ref);
    model_free(ref);
}

static void test_engine_options(void **state) {
    fixture *f = *state;
    eng_opts o = {.kv_pool_bytes = 10, .block_size = 16};
    eng *e;
    char err[256];
    assert_int_equal(eng_new(f->m, &o, &e, err, sizeof(err)), TS_ERR_INVAL);
    assert_non_null(strstr(err, "blocks"));
    o = (eng_opts){.kv_pool_bytes = 1 << 20, .backend = "tpu"};
    assert_int_equal(eng_new(f->m, &o, &e, err, sizeof(err)), TS_ERR_INVAL);
    assert_non_null(strstr(err, "tpu"));
    o = (eng_opts){.kv_pool_bytes = 1 << 20, .block_size = -3};
    assert_int_equal(eng_new(f->m, &o, &e, err, sizeof(err)), TS_ERR_INVAL);
}

/* ---- files the loader must refuse -------------------------------------- */

/* A minimal file: metadata of arch (dims 64, 4 heads, 1 layer) plus keys
 * and a token embedding; extra tensors by name (f32 vectors of n). */
static int load_minimal(const char *arch, const char *const *kv_str, const char *const *kv_u32, const uint32_t *u32,
                        const char *extra_tensor, uint64_t extra_n, char *err, size_t errlen) {
    gguf_writer *w = gguf_writer_new();
    char k[96], path[512];
    gguf_writer_add_str(w, "general.architecture", arch);
#define KEY(x) (snprintf(k, sizeof(k), "%s.%s", arch, x), k)
    gguf_writer_add_u32(w, KEY("embedding_length"), 64);
    gguf_writer_add_u32(w, KEY("block_count"), 1);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), 96);
    gguf_writer_add_u32(w, KEY("attention.head_count"), 4);
    for (int i = 0; kv_str && kv_str[i]; i += 2) gguf_writer_add_str(w, KEY(kv_str[i]), kv_str[i + 1]);
    for (int i = 0; kv_u32 && kv_u32[i]; i++) gguf_writer_add_u32(w, KEY(kv_u32[i]), u32[i]);
#undef KEY
    uint64_t ne[2] = {64, 300};
    assert_int_equal(gguf_writer_take_tensor(w, "token_embd.weight", GGUF_TT_F32, 2, ne,
                                             calloc(64 * 300, 4), 64 * 300 * 4), 0);
    if (extra_tensor) {
        uint64_t n[1] = {extra_n};
        assert_int_equal(gguf_writer_take_tensor(w, extra_tensor, GGUF_TT_F32, 1, n, calloc(extra_n, 4), extra_n * 4),
                         0);
    }
    tu_path(path, sizeof(path), "refuse.gguf");
    assert_int_equal(gguf_writer_write(w, path, err, errlen), 0);
    gguf_writer_free(w);
    model *m = NULL;
    int rc = model_load(path, &m, err, errlen);
    model_free(m);
    remove(path);
    return rc;
}

static void expect_msg(int rc, int want, const char *err, const char *needle) {
    if (rc != want || !strstr(err, needle))
        fail_msg("got %d '%s', want %d with '%s'", rc, err, want, needle);
}

static void test_arch_refusals(void **state) {
    (void)state;
    char err[512];
    const char *yarn[] = {"rope.scaling.type", "yarn", NULL};
    expect_msg(load_minimal("qwen3", yarn, NULL, NULL, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_ARCH, err, "yarn");
    expect_msg(load_minimal("phi3", NULL, NULL, NULL, "rope_factors_long.weight", 4, err, sizeof(err)),
               TS_ERR_MODEL_ARCH, err, "rope_factors_long");
    const char *kv[] = {"attention.key_length", "attention.value_length", NULL};
    const uint32_t kv_bad[] = {32, 16}, odd[] = {15, 15}, big_rot[] = {16, 16, 18};
    expect_msg(load_minimal("gemma3", NULL, kv, kv_bad, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_DIMS, err,
               "value_length");
    expect_msg(load_minimal("qwen3", NULL, kv, odd, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_DIMS, err, "head size");
    const char *rot[] = {"attention.key_length", "attention.value_length", "rope.dimension_count", NULL};
    expect_msg(load_minimal("qwen3", NULL, rot, big_rot, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_DIMS, err,
               "rope.dimension_count");
    /* a gemma3 file without its q/k norms: the layer's first missing tensor
     * is named (here attn_q, before any norm) */
    expect_msg(load_minimal("gemma3", NULL, NULL, NULL, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_TENSOR, err,
               "blk.0.attn_q.weight");
    expect_msg(load_minimal("phi3", NULL, NULL, NULL, NULL, 0, err, sizeof(err)), TS_ERR_MODEL_TENSOR, err,
               "blk.0.attn_q.weight");
}

/* A qwen2 file relabelled qwen3 (same-length name, every key renamed with
 * it) has no q/k norms: refused, naming the norm. And a llama3 file whose
 * rope_freqs has a zero divisor is refused. */
static void test_arch_missing_norm(void **state) {
    (void)state;
    mkmodel_spec s;
    char path[512], err[512];
    mkmodel_preset("tiny", &s);
    s.arch = "qwen2";
    tu_path(path, sizeof(path), "relabel.gguf");
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    size_t len;
    unsigned char *buf = tu_read_file(path, &len);
    assert_non_null(buf);
    for (size_t i = 0; i + 5 <= len; i++)
        if (memcmp(buf + i, "qwen2", 5) == 0) buf[i + 4] = '3';
    assert_int_equal(tu_write_file(path, buf, len), 0);
    model *m = NULL;
    int rc = model_load(path, &m, err, sizeof(err));
    model_free(m);
    expect_msg(rc, TS_ERR_MODEL_TENSOR, err, "attn_q_norm");
    free(buf);

    assert_int_equal(mkmodel_arch(&s, "llama3"), 0);
    assert_int_equal(mkmodel_write(&s, path, err, sizeof(err)), 0);
    buf = tu_read_file(path, &len);
    assert_non_null(buf);
    gguf_ctx *g;
    assert_int_equal(gguf_open_buffer(buf, len, &g, err, sizeof(err)), 0);
    const gguf_tensor *t = gguf_find_tensor(g, "rope_freqs.weight");
    assert_non_null(t);
    memset((unsigned char *)buf + ((const unsigned char *)t->data - (const unsigned char *)g->map), 0, 4);
    gguf_close(g);
    assert_int_equal(tu_write_file(path, buf, len), 0);
    rc = model_load(path, &m, err, sizeof(err));
    model_free(m);
    expect_msg(rc, TS_ERR_MODEL_DIMS, err, "rope_freqs");
    free(buf);
    remove(path);
}

int main(void) {
    const struct CMUnitTest f32[] = {
        cmocka_unit_test(test_batch_equivalence_f32),
        cmocka_unit_test(test_swap_roundtrip),
        cmocka_unit_test_teardown(test_kv_cache_f16, back_to_f32),
        cmocka_unit_test(test_bad_batches_change_nothing),
        cmocka_unit_test(test_engine_options),
    };
    const struct CMUnitTest f16[] = {cmocka_unit_test(test_batch_equivalence_f16)};
    const struct CMUnitTest q8[] = {cmocka_unit_test(test_batch_equivalence_q8)};
    const struct CMUnitTest mixed[] = {cmocka_unit_test(test_batch_equivalence_mixed),
                                       cmocka_unit_test(test_mixed_matches_f32)};
    int fails = cmocka_run_group_tests_name("engine_f32", f32, setup_f32, teardown);
    fails += cmocka_run_group_tests_name("engine_f16", f16, setup_f16, teardown);
    fails += cmocka_run_group_tests_name("engine_q8_0", q8, setup_q8, teardown);
    fails += cmocka_run_group_tests_name("engine_mixed", mixed, setup_mixed, teardown);
    const struct CMUnitTest quant[] = {cmocka_unit_test(test_batch_equivalence_quant)};
    fails += cmocka_run_group_tests_name("engine_q4_K_M", quant, setup_qkm, teardown);
    for (size_t i = 0; i < sizeof(QTYPES) / sizeof(QTYPES[0]); i++) {
        char name[32];
        qtype_now = QTYPES[i];
        snprintf(name, sizeof(name), "engine_%s", gguf_type_name(QTYPES[i]));
        fails += _cmocka_run_group_tests(name, quant, 1, setup_qtype, teardown);
    }
    const struct CMUnitTest arch[] = {cmocka_unit_test(test_batch_equivalence_arch), cmocka_unit_test(test_arch_config),
                                      cmocka_unit_test(test_swap_roundtrip)};
    for (int i = 0; i < (int)(sizeof(ARCH_CASES) / sizeof(ARCH_CASES[0])); i++) {
        char name[48];
        arch_case_now = i;
        snprintf(name, sizeof(name), "engine_%s_%s", ARCH_CASES[i].arch, gguf_type_name(ARCH_CASES[i].type));
        fails += _cmocka_run_group_tests(name, arch, 3, setup_arch, teardown);
    }
    const struct CMUnitTest refuse[] = {cmocka_unit_test(test_arch_refusals), cmocka_unit_test(test_arch_missing_norm)};
    fails += cmocka_run_group_tests_name("engine_arch_refusals", refuse, NULL, NULL);
    return fails;
}
