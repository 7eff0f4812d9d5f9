/*
 * test_kv_cache.c - the prefix cache: its index (pfx.c: exact matches
 * whatever the hash says), the block manager's references and
 * least-recently-released eviction (kv.c), and the scheduler's use of it
 * (sched_cache.c): hits and misses, chaining, the cap that leaves a token
 * to compute, salts (tenants, cache_salt, a public prefix), shared blocks'
 * references, the charging rule for quotas, cached tokens not charged as
 * prefill, and eviction only under pressure, before any preemption. Then
 * the review's defects: a hit cut to the admission's room under the
 * default watermarks and to the quota less one block (never a reason to
 * wait), tenants isolated by scope even with forged equal salts, a chain
 * registered again from its root after a recompute, and victims ranked by
 * the blocks they would free.
 * (The property runs with the cache on live in test_sched_prop.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "err.h"
#include "kv.h"
#include "pfx.h"
#include "sched_harness.h"

/* ---- the index ------------------------------------------------------------- */

static void test_pfx_exact(void **st) {
    (void)st;
    pfx_index ix;
    assert_int_equal(pfx_init(&ix, 8, 4), 0);
    const int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    /* Two different contents under one hash: found by their tokens. */
    assert_int_equal(pfx_insert(&ix, 3, 42, PFX_ROOT, 0, 7, a), 0);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 7, b), -1);
    assert_int_equal(pfx_insert(&ix, 5, 42, PFX_ROOT, 0, 7, b), 0);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 7, a), 3);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 7, b), 5);
    /* Parent, scope and salt are part of the identity too: the scope (a
     * tenant, or public) whatever the salt. */
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 1, 7, a), -1);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, PFX_PUBLIC, 7, a), -1);
    assert_int_equal(pfx_find(&ix, 42, 3, 0, 7, a), -1);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 8, a), -1);
    /* The same content twice is refused, as is a block already in. */
    assert_int_equal(pfx_insert(&ix, 6, 42, PFX_ROOT, 0, 7, a), 1);
    assert_int_equal(pfx_insert(&ix, 3, 43, PFX_ROOT, 0, 7, b), 1);
    assert_int_equal(ix.n_entries, 2);
    pfx_remove(&ix, 3);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 7, a), -1);
    assert_int_equal(pfx_find(&ix, 42, PFX_ROOT, 0, 7, b), 5);
    assert_int_equal(ix.n_entries, 1);
    /* The hash chains: parent hash, salt and tokens all move it. */
    uint64_t h0 = pfx_hash(0, 1, a, 4);
    assert_true(h0 != pfx_hash(0, 2, a, 4));
    assert_true(h0 != pfx_hash(0, 1, b, 4));
    assert_true(pfx_hash(h0, 1, a, 4) != pfx_hash(0, 1, a, 4));
    assert_true(h0 == pfx_hash(0, 1, a, 4));
    pfx_deinit(&ix);
}

/* ---- the pool ---------------------------------------------------------------- */

static void test_kv_lru_under_pressure(void **st) {
    (void)st;
    kv_pool p;
    assert_int_equal(kv_init(&p, 4, 0, 1.0, 1.0), 0);
    assert_int_equal(kv_cache_init(&p, 4), 0);
    int32_t t[4], more[4];
    const int32_t tok0[4] = {1, 1, 1, 1}, tok1[4] = {2, 2, 2, 2};
    assert_int_equal(kv_alloc(&p, 4, t), 0);
    assert_int_equal(t[0], 0);
    uint64_t h0 = pfx_hash(0, 9, tok0, 4), h1 = pfx_hash(h0, 9, tok1, 4);
    assert_int_equal(kv_cache_add(&p, t[0], h0, PFX_ROOT, 0, 9, tok0), 0);
    assert_int_equal(kv_cache_add(&p, t[1], h1, kv_block_key(&p, t[0]), 0, 9, tok1), 0);
    kv_free(&p, t, 4);
    /* All free, two of them cache-only. */
    assert_int_equal(p.n_free, 4);
    assert_int_equal(p.n_lru, 2);
    assert_int_equal(kv_used(&p), 0);
    assert_int_equal(kv_check(&p), 0);
    /* Plain blocks go first: no eviction without pressure. */
    assert_int_equal(kv_alloc(&p, 2, more), 0);
    assert_int_equal(kv_cached(&p), 2);
    assert_int_equal(p.n_evicted, 0);
    /* Under pressure the leaf goes first (released after its root). */
    assert_int_equal(kv_alloc(&p, 1, more + 2), 0);
    assert_int_equal(more[2], t[1]);
    assert_int_equal(p.n_evicted, 1);
    assert_int_equal(kv_cache_find(&p, h0, PFX_ROOT, 0, 9, tok0), t[0]);
    assert_int_equal(kv_cache_find(&p, h1, kv_block_key(&p, t[0]), 0, 9, tok1), -1);
    /* A hit revives the cache-only root: it leaves the free count. */
    kv_ref(&p, t[0]);
    assert_int_equal(p.n_free, 0);
    assert_int_equal(kv_check(&p), 0);
    /* Two references: free after both let go, cache-only again. */
    kv_ref(&p, t[0]);
    kv_free(&p, &t[0], 1);
    assert_int_equal(p.n_free, 0);
    kv_free(&p, &t[0], 1);
    assert_int_equal(p.n_free, 1);
    assert_int_equal(p.n_lru, 1);
    /* Evicting bumps the generation: a child keyed by the old root is dead. */
    uint64_t key = kv_block_key(&p, t[0]);
    kv_free(&p, more, 3);
    assert_int_equal(kv_alloc(&p, 4, more), 0);
    assert_true(kv_block_key(&p, t[0]) != key);
    assert_int_equal(kv_cached(&p), 0);
    assert_int_equal(kv_check(&p), 0);
    kv_free(&p, more, 4);
    assert_int_equal(kv_check(&p), 0);
    kv_deinit(&p);
}

/* ---- the scheduler ------------------------------------------------------------ */

#define BS 16

static void cache_config(sched_config *c) {
    h_config(c, 64, 0);
    c->prefix_cache = 1;
    c->max_ctx = 1024;
    c->kv_high = 1.0;
    c->kv_low = 0.9;
}

static int32_t tenant(harness *h, const char *name, int32_t max_kv) {
    sched_tenant_cfg c = {"", 0, 1.0, max_kv, 0, 0, 0};
    snprintf(c.name, sizeof(c.name), "%s", name);
    int rc = sched_tenant_add(h->s, &c);
    assert_true(rc >= 0);
    return rc;
}

static void setup(harness *h, const sched_config *c) {
    assert_int_equal(h_init(h, c, 1), 0);
    sched_tier t = {"flat", 0, 0, 0, 0, 0};
    assert_true(sched_tier_add(h->s, &t) >= 0);
}

static sched_id submit(harness *h, int32_t tn, const int32_t *tok, int32_t n, int32_t max_new, uint64_t salt,
                       int32_t n_public) {
    sched_prompt p = {tok, n, salt, n_public};
    sched_id id;
    sched_reason why;
    if (sched_submit_prompt(h->s, h->now_us, tn, &p, max_new, &id, &why))
        fail_msg("rejected: %s", sched_reason_str(why));
    return id;
}

static void check(harness *h) {
    if (h->err[0]) fail_msg("plan error: %s", h->err);
    assert_int_equal(sched_check(h->s), 0);
}

/* Step until id is no longer live (its end polled with the others). */
static void run_out(harness *h, sched_id id) {
    sched_plan p;
    sched_req_info in;
    for (int i = 0; i < 1000 && sched_req_get(h->s, id, &in) == 0 && in.state < SCHED_FINISHED; i++) {
        h_step(h, &p);
        check(h);
    }
    sched_end e;
    while (sched_poll_end(h->s, &e)) {}
    assert_int_equal(sched_req_get(h->s, id, &in), TS_ERR_INVAL);
}

/* The first step's item of id: its pos (the tokens found cached). */
static int32_t first_pos(harness *h, sched_id id) {
    sched_plan p;
    h_step(h, &p);
    check(h);
    for (int32_t i = 0; i < p.n_items; i++)
        if (p.items[i].id == id) return p.items[i].pos;
    fail_msg("no item for the request");
    return -1;
}

static void fill(int32_t *tok, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) tok[i] = base + i;
}

static void test_cache_hit_miss_chain(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0);
    int32_t p[100], q[100], r[64];
    fill(p, 100, 1000);
    memcpy(q, p, sizeof(q));
    q[20] = 7; /* differs in block 1 */
    fill(r, 64, 5000);
    run_out(&h, submit(&h, a, p, 100, 2, 0, 0));
    sched_stats ss;
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.kv_cached, 100 / BS); /* full prompt blocks */
    assert_int_equal(ss.kv_cache_only, 100 / BS);
    assert_int_equal(ss.kv_free, ss.kv_total); /* cache-only blocks count as free */
    /* Hit: six blocks, the last four tokens computed. */
    sched_tenant_stats t0, t1;
    sched_tenant_stats_get(h.s, a, &t0);
    sched_id id = submit(&h, a, p, 100, 2, 0, 0);
    assert_int_equal(first_pos(&h, id), 96);
    sched_req_info in;
    assert_int_equal(sched_req_get(h.s, id, &in), 0);
    assert_int_equal(in.n_hit, 96);
    run_out(&h, id);
    sched_tenant_stats_get(h.s, a, &t1);
    assert_int_equal(t1.prefix_query_tokens - t0.prefix_query_tokens, 100);
    assert_int_equal(t1.prefix_hit_tokens - t0.prefix_hit_tokens, 96);
    /* Cached tokens are not prefill work: 4 prompt tokens processed, and
     * the service is that of 4 input and 2 output tokens. */
    assert_int_equal(t1.prompt_tokens - t0.prompt_tokens, 4);
    assert_true(t1.service - t0.service < 4 * c.w_in + 2 * c.w_out + 1e-9);
    /* Chained: a change in block 1 keeps block 0 only. */
    id = submit(&h, a, q, 100, 1, 0, 0);
    assert_int_equal(first_pos(&h, id), BS);
    run_out(&h, id);
    /* Cap: a prompt of exactly four blocks reuses three, computes one. */
    run_out(&h, submit(&h, a, r, 64, 1, 0, 0));
    id = submit(&h, a, r, 64, 1, 0, 0);
    assert_int_equal(first_pos(&h, id), 48);
    run_out(&h, id);
    /* A request without tokens neither looks up nor adds. */
    sched_id plain;
    sched_reason why;
    assert_int_equal(sched_submit(h.s, h.now_us, a, 100, 1, &plain, &why), 0);
    assert_int_equal(first_pos(&h, plain), 0);
    run_out(&h, plain);
    check(&h);
    h_deinit(&h);
}

static void test_cache_salts(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0), b = tenant(&h, "b", 0);
    int32_t p[100];
    fill(p, 100, 1000);
    run_out(&h, submit(&h, a, p, 100, 1, 0, 0));
    /* Another tenant never finds a's blocks. */
    sched_id id = submit(&h, b, p, 100, 1, 0, 0);
    assert_int_equal(first_pos(&h, id), 0);
    run_out(&h, id);
    /* A cache_salt separates requests of one tenant; the same salt shares. */
    id = submit(&h, a, p, 100, 1, 77, 0);
    assert_int_equal(first_pos(&h, id), 0);
    run_out(&h, id);
    id = submit(&h, a, p, 100, 1, 77, 0);
    assert_int_equal(first_pos(&h, id), 96);
    run_out(&h, id);
    /* A public prefix of 64 tokens: its four blocks are shared across
     * tenants; the blocks after it stay the tenant's. */
    run_out(&h, submit(&h, a, p, 100, 1, 0, 64));
    id = submit(&h, b, p, 100, 1, 0, 64);
    assert_int_equal(first_pos(&h, id), 64);
    run_out(&h, id);
    /* A public prefix ending inside a block makes that block private: a
     * third tenant finds the four public blocks, not a's or b's fifth. */
    int32_t c3 = tenant(&h, "c", 0);
    id = submit(&h, c3, p, 100, 1, 0, 70);
    assert_int_equal(first_pos(&h, id), 64);
    run_out(&h, id);
    check(&h);
    h_deinit(&h);
}

/* Two running requests share a prompt's blocks: one table entry each, one
 * block in the pool; the tenant is charged for both tables. */
static void test_cache_shared_refs_and_charging(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0);
    int32_t p[100];
    fill(p, 100, 1000);
    sched_plan pl;
    sched_id r1 = submit(&h, a, p, 100, 200, 0, 0);
    h_step(&h, &pl); /* the whole prompt in one step */
    check(&h);
    sched_id r2 = submit(&h, a, p, 100, 200, 0, 0);
    assert_int_equal(first_pos(&h, r2), 96);
    sched_req_info i1, i2;
    assert_int_equal(sched_req_get(h.s, r1, &i1), 0);
    assert_int_equal(sched_req_get(h.s, r2, &i2), 0);
    assert_int_equal(i2.state, SCHED_DECODING);
    sched_stats ss;
    sched_tenant_stats ts;
    sched_stats_get(h.s, &ss);
    sched_tenant_stats_get(h.s, a, &ts);
    assert_int_equal(ts.kv_blocks, i1.n_blocks + i2.n_blocks);
    assert_int_equal(ss.kv_used, i1.n_blocks + i2.n_blocks - 6); /* six shared, counted once */
    assert_int_equal(ss.kv_cache_only, 0);
    check(&h);
    /* One lets go: the blocks stay, referenced by the other. */
    assert_int_equal(sched_cancel(h.s, h.now_us, r1), 0);
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.kv_cache_only, 0);
    assert_int_equal(ss.kv_cached, 6);
    check(&h);
    assert_int_equal(sched_cancel(h.s, h.now_us, r2), 0);
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.kv_cache_only, 6);
    assert_int_equal(ss.kv_used, 0);
    check(&h);
    h_deinit(&h);
}

/* The charging rule against a quota: a request that shares a running
 * request's blocks is charged for them in full, so its tenant never holds
 * more than its quota, cached or not. Its hit is cut to leave a block of
 * the quota to compute in (test_cache_hit_fills_quota). */
static void test_cache_quota_charges_each_table(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 12);
    int32_t p[100];
    fill(p, 100, 1000);
    sched_plan pl;
    sched_id r1 = submit(&h, a, p, 100, 60, 0, 0); /* 10 blocks at most */
    h_step(&h, &pl);
    sched_id r2 = submit(&h, a, p, 100, 1, 0, 0);  /* 7 blocks: 6 shared + 1 */
    for (int i = 0; i < 5; i++) {
        h_step(&h, &pl);
        check(&h);
        sched_req_info i1 = {0}, i2 = {0};
        sched_req_get(h.s, r1, &i1);
        sched_req_get(h.s, r2, &i2);
        sched_tenant_stats ts;
        sched_tenant_stats_get(h.s, a, &ts);
        assert_int_equal(ts.kv_blocks, i1.n_blocks + i2.n_blocks); /* each table in full */
        assert_true(ts.kv_blocks <= 12);
    }
    sched_cancel(h.s, h.now_us, r1);
    run_out(&h, r2);
    check(&h);
    h_deinit(&h);
}

/* Cache-only blocks are evicted when plain free blocks run out, and before
 * anything is preempted. */
static void test_cache_evicted_before_preemption(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    c.budget_max = 1024;
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0), b = tenant(&h, "b", 0);
    int32_t p[100], big[790], small[150];
    fill(p, 100, 1000);
    fill(big, 790, 20000);
    fill(small, 150, 40000);
    run_out(&h, submit(&h, a, p, 100, 1, 0, 0));
    sched_stats ss;
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.kv_cached, 6);
    /* 50 blocks: plain blocks suffice, the cache stays whole. */
    sched_id r1 = submit(&h, b, big, 790, 10, 0, 0);
    sched_plan pl;
    h_step(&h, &pl);
    check(&h);
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.kv_cached, 6 + 790 / BS);
    assert_int_equal(ss.kv_evicted, 0);
    /* 10 more: 8 plain blocks left, so two cache-only blocks go. */
    sched_id r2 = submit(&h, b, small, 150, 10, 0, 0);
    for (int i = 0; i < 12; i++) {
        h_step(&h, &pl);
        check(&h);
    }
    sched_stats_get(h.s, &ss);
    sched_tenant_stats ts;
    sched_tenant_stats_get(h.s, b, &ts);
    assert_true(ss.kv_evicted >= 2);
    assert_int_equal(ts.preempt_swap + ts.preempt_recompute, 0);
    run_out(&h, r1);
    run_out(&h, r2);
    /* The root of a's chain went last: a's prompt still finds block 0... */
    sched_id id = submit(&h, a, p, 100, 1, 0, 0);
    int32_t pos = first_pos(&h, id);
    assert_true(pos >= 0 && pos < 96);
    run_out(&h, id);
    check(&h);
    h_deinit(&h);
}

/* A recomputed request finds its own released blocks. */
static void test_cache_recompute_hits(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    c.features &= ~(unsigned)SCHED_FEAT_SWAP;
    c.n_blocks = 16;
    c.kv_high = c.kv_low = 1.0;
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0);
    static int32_t p[100], q[100];
    fill(p, 100, 1000);
    fill(q, 100, 3000);
    sched_plan pl;
    sched_id r1 = submit(&h, a, p, 100, 150, 0, 0); /* grows to 16 blocks */
    h_step(&h, &pl);
    sched_id r2 = submit(&h, a, q, 100, 150, 0, 0);
    uint64_t recomputes = 0;
    int32_t hit = 0;
    for (int i = 0; i < 400 && (!recomputes || !hit); i++) {
        h_step(&h, &pl);
        check(&h);
        sched_tenant_stats ts;
        sched_tenant_stats_get(h.s, a, &ts);
        recomputes = ts.preempt_recompute;
        for (int32_t k = 0; k < pl.n_items; k++)
            if (pl.items[k].is_prefill && pl.items[k].pos >= 96) hit = 1;
    }
    assert_true(recomputes > 0);
    assert_true(hit);
    sched_cancel(h.s, h.now_us, r1);
    sched_cancel(h.s, h.now_us, r2);
    check(&h);
    h_deinit(&h);
}

/* ---- liveness under the watermarks (default 0.85 / 0.70) -------------------------- */

/* The defaults of the server, not the 1.0 of cache_config: a hit's
 * cache-only blocks are room it takes from under the high watermark. */
static void watermark_config(sched_config *c) {
    h_config(c, 64, 0);
    c->prefix_cache = 1;
    c->max_ctx = 1024;
}

static void step_n(harness *h, int n) {
    sched_plan pl;
    for (int i = 0; i < n; i++) {
        h_step(h, &pl);
        check(h);
    }
}

/* A prompt of 60 blocks, cached whole (59 blocks), again on an idle
 * server: its hit is larger than the 55 blocks the high watermark allows.
 * It is cut short to fit, not refused: admitted, it ends, and admission
 * stays open. (Before the fix the hit was taken first, switched the
 * watermark off, was given back, and the request waited forever.) */
static void test_cache_hit_larger_than_room(void **st) {
    (void)st;
    harness h;
    sched_config c;
    watermark_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0);
    static int32_t p[950];
    fill(p, 950, 100);
    run_out(&h, submit(&h, a, p, 950, 1, 0, 0));
    sched_id id = submit(&h, a, p, 950, 1, 0, 0);
    int32_t pos = first_pos(&h, id);
    assert_true(pos > 0 && pos <= 54 * BS); /* a hit, within the room less one block */
    run_out(&h, id);
    sched_stats ss;
    sched_stats_get(h.s, &ss);
    assert_int_equal(ss.admitting, 1);
    check(&h);
    h_deinit(&h);
}

/* Tenant b decodes holding 46 blocks: 9 more are allowed below the high
 * watermark. Tenant a sends again a prompt of 11 blocks whose 10 full ones
 * are cache-only: taken first they left no room for its 11th. Cut to 8 it
 * is admitted at once, and it ends while b still runs. */
static void test_cache_hit_within_watermark_room(void **st) {
    (void)st;
    harness h;
    sched_config c;
    watermark_config(&c);
    c.features &= ~(unsigned)SCHED_FEAT_SWAP;
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0), b = tenant(&h, "b", 0);
    static int32_t ta[161], tb[721];
    fill(ta, 161, 5);
    fill(tb, 721, 50000);
    run_out(&h, submit(&h, a, ta, 161, 1, 0, 0));
    sched_id y = submit(&h, b, tb, 721, 200, 0, 0);
    step_n(&h, 6);
    sched_req_info in;
    assert_int_equal(sched_req_get(h.s, y, &in), 0);
    assert_int_equal(in.state, SCHED_DECODING);
    assert_int_equal(in.n_blocks, 46);
    sched_id x = submit(&h, a, ta, 161, 1, 0, 0);
    int32_t pos = first_pos(&h, x);
    assert_int_equal(pos, 8 * BS);
    step_n(&h, 5);
    assert_int_equal(sched_req_get(h.s, x, &in), 0);
    assert_int_equal(in.state, SCHED_FINISHED);
    assert_int_equal(sched_req_get(h.s, y, &in), 0);
    assert_int_equal(in.state, SCHED_DECODING);
    sched_cancel(h.s, h.now_us, y);
    check(&h);
    h_deinit(&h);
}

/* The quota's leave-one rule: a hit exactly as large as the quota its
 * tenant has left took all of it, left no block to compute in, and was
 * given back every step while the tenant's other request ran. Now the hit
 * leaves one block: admitted at once, with a hit one block shorter. */
static void test_cache_hit_fills_quota(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 13);
    int32_t p[100], q[97];
    fill(p, 100, 1000);
    fill(q, 97, 7000);
    run_out(&h, submit(&h, a, p, 100, 1, 0, 0)); /* 6 blocks cached */
    sched_id r1 = submit(&h, a, q, 97, 15, 0, 0); /* 7 blocks throughout */
    step_n(&h, 1);
    sched_id r2 = submit(&h, a, p, 100, 1, 0, 0); /* quota left: 6 */
    assert_int_equal(first_pos(&h, r2), 5 * BS);
    sched_req_info in;
    assert_int_equal(sched_req_get(h.s, r1, &in), 0);
    assert_true(in.state == SCHED_DECODING);
    sched_tenant_stats ts;
    sched_tenant_stats_get(h.s, a, &ts);
    assert_true(ts.kv_blocks <= 13);
    run_out(&h, r2);
    run_out(&h, r1);
    check(&h);
    h_deinit(&h);
}

/* ---- isolation whatever the salts ---------------------------------------------------- */

static uint64_t splitmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The salt is a hash of a client's string, so a client may find one that
 * gives another tenant's salt; here b's cache_salt is chosen so that its
 * mixed salt equals a's default one (sched_cache.c mixes the tenant id + 1
 * with the cache_salt). Blocks are scoped to their tenant besides: b still
 * finds nothing of a's, while the public prefix stays shared. */
static void test_cache_equal_salts_never_share(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0), b = tenant(&h, "b", 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    uint64_t forged = splitmix(1) ^ splitmix(2); /* mix(b + 1) ^ forged == mix(a + 1) ^ 0 */
    int32_t p[100];
    fill(p, 100, 1000);
    run_out(&h, submit(&h, a, p, 100, 1, 0, 0));
    sched_id id = submit(&h, b, p, 100, 1, forged, 0);
    assert_int_equal(first_pos(&h, id), 0);
    run_out(&h, id);
    /* b's entries, under a's salt, are b's alone: a still finds its own
     * (and b again its own). */
    id = submit(&h, a, p, 100, 1, 0, 0);
    assert_int_equal(first_pos(&h, id), 96);
    run_out(&h, id);
    id = submit(&h, b, p, 100, 1, forged, 0);
    assert_int_equal(first_pos(&h, id), 96);
    run_out(&h, id);
    /* The public prefix: shared across tenants, salts as they may be. */
    run_out(&h, submit(&h, a, p, 100, 1, 0, 64));
    id = submit(&h, b, p, 100, 1, forged, 64);
    assert_int_equal(first_pos(&h, id), 64);
    run_out(&h, id);
    check(&h);
    h_deinit(&h);
}

/* With a secret key the hashes move, the matches do not: a hit within a
 * tenant, none across tenants, the public prefix shared. */
static void test_cache_keyed(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    c.cache_key = 0x5DEECE66Dull * 0x9E3779B97F4A7C15ull;
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0), b = tenant(&h, "b", 0);
    int32_t p[100];
    fill(p, 100, 1000);
    run_out(&h, submit(&h, a, p, 100, 1, 0, 64));
    sched_id id = submit(&h, a, p, 100, 1, 0, 64);
    assert_int_equal(first_pos(&h, id), 96);
    run_out(&h, id);
    id = submit(&h, b, p, 100, 1, 0, 64);
    assert_int_equal(first_pos(&h, id), 64);
    run_out(&h, id);
    check(&h);
    h_deinit(&h);
}

/* ---- a chain started again ----------------------------------------------------------- */

/* A prompt of exactly one block (no hit ever: one token is left to
 * compute) registers its block, is preempted by recompute, and registers
 * it again when recomputed: from the chain's root, not from the hash its
 * first chain ended at (kv_check verifies every entry's chained hash). */
static void test_cache_recompute_rechains(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    c.policy = SCHED_POLICY_FCFS; /* the newest is the victim: x */
    c.features &= ~(unsigned)SCHED_FEAT_SWAP;
    c.n_blocks = 8;
    c.kv_high = c.kv_low = 1.0;
    setup(&h, &c);
    int32_t a = tenant(&h, "a", 0);
    int32_t py[48], px[BS + 1];
    fill(py, 48, 3000);
    fill(px, BS + 1, 9000);
    sched_id y = submit(&h, a, py, 48, 64, 0, 0); /* grows to 7 blocks */
    step_n(&h, 1);
    sched_id x = submit(&h, a, px, BS, 64, 0, 0);  /* to 5 */
    sched_tenant_stats ts = {0};
    for (int i = 0; i < 300 && !ts.preempt_recompute; i++) {
        step_n(&h, 1);
        sched_tenant_stats_get(h.s, a, &ts);
    }
    assert_true(ts.preempt_recompute > 0);
    run_out(&h, y);
    run_out(&h, x); /* recomputed, its block registered again */
    /* Its block is found from the root: a prompt one token longer hits it. */
    sched_id z = submit(&h, a, px, BS + 1, 1, 0, 0);
    assert_int_equal(first_pos(&h, z), BS);
    run_out(&h, z);
    check(&h);
    h_deinit(&h);
}

/* ---- preemption with shared blocks ------------------------------------------------------ */

/* The victim is the request whose preemption frees the most blocks: b
 * holds more blocks than c, but six of b's seven are shared with a and
 * would stay used; c's four are its own. (Ranked by table length, b was
 * chosen, freeing one block.) */
static void test_cache_victim_by_private_blocks(void **st) {
    (void)st;
    harness h;
    sched_config c;
    cache_config(&c);
    c.features &= ~(unsigned)SCHED_FEAT_SWAP;
    c.n_blocks = 12;
    c.kv_high = c.kv_low = 1.0;
    setup(&h, &c);
    int32_t t = tenant(&h, "a", 0);
    int32_t p[111], q[60];
    fill(p, 111, 1000);
    fill(q, 60, 5000);
    sched_id a = submit(&h, t, p, 111, 60, 0, 0);
    step_n(&h, 1);
    sched_id b = submit(&h, t, p, 111, 60, 0, 0); /* 6 blocks shared with a, 1 own */
    sched_id cc = submit(&h, t, q, 60, 60, 0, 0); /* 4 own */
    sched_plan pl;
    sched_id victim = 0;
    for (int i = 0; i < 50 && !victim; i++) {
        h_step(&h, &pl);
        check(&h);
        if (pl.n_preempted) victim = pl.preempted[0].id;
    }
    assert_true(victim == cc);
    (void)a;
    (void)b;
    h_deinit(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pfx_exact),
        cmocka_unit_test(test_kv_lru_under_pressure),
        cmocka_unit_test(test_cache_hit_miss_chain),
        cmocka_unit_test(test_cache_salts),
        cmocka_unit_test(test_cache_shared_refs_and_charging),
        cmocka_unit_test(test_cache_quota_charges_each_table),
        cmocka_unit_test(test_cache_evicted_before_preemption),
        cmocka_unit_test(test_cache_recompute_hits),
        cmocka_unit_test(test_cache_hit_larger_than_room),
        cmocka_unit_test(test_cache_hit_within_watermark_room),
        cmocka_unit_test(test_cache_hit_fills_quota),
        cmocka_unit_test(test_cache_equal_salts_never_share),
        cmocka_unit_test(test_cache_keyed),
        cmocka_unit_test(test_cache_recompute_rechains),
        cmocka_unit_test(test_cache_victim_by_private_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
