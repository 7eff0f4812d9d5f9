/* test_sched_prop.c - property tests of the scheduler (src/core/sched.c):
 * the fairness bound of the fair queue, a returning tenant's placement,
 * random event sequences that must keep every invariant, determinism, and
 * freedom from starvation across bands.
 *
 * Every test drives the scheduler through a tracking executor built on
 * sched_harness.h: besides the harness's plan checks it keeps a content tag
 * for every device block and host swap slot, applies the plan's copies in
 * the documented order (swap_out, then swap_in, then the forward pass) and
 * checks that every item finds its own earlier K/V in its block table. So a
 * swap that copies the wrong block, a block handed to two requests, or a
 * request resumed on a table that lost its context fails here even when the
 * scheduler's own counts stay consistent. It also checks each item against
 * the request's live state and hashes every plan (the determinism test
 * compares the hashes of two runs).
 *
 * With the prefix cache on (the *_cache runs, and FCFS's determinism runs)
 * a full prompt block's tag is its content instead: its tokens from the
 * start of the prompt and its salt (the tenant's and cache_salt's, or the
 * public one inside a public prefix). A request reading a block another
 * one wrote must then find exactly its own content there, so a block
 * shared across tenants (or salts) that should not be, or a wrong chain,
 * fails the same check; sched_check adds that each block's references
 * equal the tables holding it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fq.h"
#include "sched.h"
#include "sched_harness.h"

/* How far under its floor a backlogged band's share of one window may be
 * (see test_floors_random). */
#define FLOOR_SLACK 0.02

/* ---- the tracking executor ------------------------------------------------ */

typedef struct px {
    harness h;
    uint64_t *dev_tag;      /* (n_blocks) what each device block holds: tag of (request, block index) */
    uint64_t *host_tag;     /* (n_swap) the same for host slots */
    uint8_t *mark;          /* (max(n_blocks, n_swap)) scratch for duplicate checks */
    uint64_t hash;          /* FNV-1a over every plan */
    sched_plan plan;        /* the step in flight */
    int32_t n_swap_out_steps, n_swap_in_steps;
    /* prefix cache runs: each live slot's prompt, so that a block's tag is
     * its content (tenant or public salt, cache salt, tokens up to its end)
     * and a block shared by two requests must hold the same tag for both */
    const int32_t **slot_tok; /* (max_requests) NULL: not cached */
    int32_t *slot_prompt, *slot_public, *slot_tenant;
    uint64_t *slot_salt;
} px;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Content of block j of request id; never 0 (0 = never written). */
static uint64_t kv_tag(sched_id id, int32_t j) { return mix64(id * 0x9E3779B97F4A7C15ull + (uint64_t)j) | 1; }

/* With the prefix cache, a full prompt block's tag is its content: its
 * chain of tokens and its salt (public inside the public prefix, else the
 * tenant's and the request's). Any other block is private: kv_tag. */
static uint64_t px_tag(const px *x, sched_id id, int32_t j) {
    uint32_t slot = (uint32_t)id;
    int32_t bs = x->h.cfg.block_size, end = (j + 1) * bs;
    if (!x->slot_tok || !x->slot_tok[slot] || end > x->slot_prompt[slot]) return kv_tag(id, j);
    uint64_t v = end <= x->slot_public[slot] ? 0x7075626c6963ull
                                              : mix64(((uint64_t)x->slot_tenant[slot] << 32) ^ x->slot_salt[slot]);
    for (int32_t i = 0; i < end; i++) v = mix64(v ^ (uint64_t)(uint32_t)x->slot_tok[slot][i]);
    return v | 1;
}

static void hash_u64(px *x, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        x->hash ^= (v >> (8 * i)) & 0xff;
        x->hash *= 0x100000001b3ull;
    }
}

static void px_init(px *x, const sched_config *c, uint64_t seed) {
    memset(x, 0, sizeof(*x));
    assert_int_equal(h_init(&x->h, c, seed), 0);
    x->dev_tag = calloc((size_t)c->n_blocks, sizeof(uint64_t));
    x->host_tag = calloc((size_t)(c->n_swap_blocks ? c->n_swap_blocks : 1), sizeof(uint64_t));
    int32_t most = c->n_blocks > c->n_swap_blocks ? c->n_blocks : c->n_swap_blocks;
    x->mark = calloc((size_t)most, 1);
    x->hash = 0xcbf29ce484222325ull;
    assert_non_null(x->dev_tag);
    assert_non_null(x->host_tag);
    assert_non_null(x->mark);
}

/* Turn on the prefix cache's content tags (after px_init). */
static void px_cache(px *x) {
    size_t n = (size_t)x->h.cfg.max_requests;
    x->slot_tok = calloc(n, sizeof(*x->slot_tok));
    x->slot_prompt = calloc(n, sizeof(int32_t));
    x->slot_public = calloc(n, sizeof(int32_t));
    x->slot_tenant = calloc(n, sizeof(int32_t));
    x->slot_salt = calloc(n, sizeof(uint64_t));
    assert_true(x->slot_tok && x->slot_prompt && x->slot_public && x->slot_tenant && x->slot_salt);
}

static void px_deinit(px *x) {
    free(x->slot_tok); free(x->slot_prompt); free(x->slot_public); free(x->slot_tenant); free(x->slot_salt);
    h_deinit(&x->h);
    free(x->dev_tag);
    free(x->host_tag);
    free(x->mark);
}

/* Plan a step, check it and "run" its copies and forward pass on the tags. */
static void px_plan(px *x) {
    harness *h = &x->h;
    sched_plan *p = &x->plan;
    int rc = sched_step(h->s, h->now_us, p);
    if (rc) { h_bad(h, "sched_step refused"); memset(p, 0, sizeof(*p)); return; }
    h_check_plan(h, p);
    if (p->n_items > h->cfg.max_running) return; /* reported; the result array is too small */
    const int32_t nb = h->cfg.n_blocks, ns = h->cfg.n_swap_blocks, bs = h->cfg.block_size;
    int32_t most = nb > ns ? nb : ns;

    /* Copies: device -> host first, then host -> device. */
    memset(x->mark, 0, (size_t)most);
    for (int32_t i = 0; i < p->n_swap_out; i++) {
        sched_copy c = p->swap_out[i];
        if (c.dev_block < 0 || c.dev_block >= nb || c.host_slot < 0 || c.host_slot >= ns) {
            h_bad(h, "swap_out copy out of range");
            continue;
        }
        if (x->mark[c.host_slot]++) h_bad(h, "two swap_out copies into one host slot");
        x->host_tag[c.host_slot] = x->dev_tag[c.dev_block];
    }
    memset(x->mark, 0, (size_t)most);
    for (int32_t i = 0; i < p->n_swap_in; i++) {
        sched_copy c = p->swap_in[i];
        if (c.dev_block < 0 || c.dev_block >= nb || c.host_slot < 0 || c.host_slot >= ns) {
            h_bad(h, "swap_in copy out of range");
            continue;
        }
        if (x->mark[c.dev_block]++) h_bad(h, "two swap_in copies into one device block");
        x->dev_tag[c.dev_block] = x->host_tag[c.host_slot];
    }
    if (p->n_swap_out) x->n_swap_out_steps++;
    if (p->n_swap_in) x->n_swap_in_steps++;

    /* Items: consistent with the request's state, and its context intact. */
    int32_t tokens = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        sched_req_info ri;
        tokens += it->n_tokens;
        if (sched_req_get(h->s, it->id, &ri)) { h_bad(h, "item for an unknown request"); continue; }
        if (ri.state != SCHED_PREFILLING && ri.state != SCHED_DECODING) h_bad(h, "item for a request not running");
        if (ri.tenant != it->tenant) h_bad(h, "item tenant differs from the request's");
        if (it->pos != ri.n_computed) h_bad(h, "item pos != n_computed");
        if (it->pos + it->n_tokens > ri.n_total) h_bad(h, "item runs past the known tokens");
        if (it->sample != (it->pos + it->n_tokens == ri.n_total)) h_bad(h, "sample flag wrong");
        if (it->n_blocks != ri.n_blocks) h_bad(h, "item table length != request's");
        for (int32_t j = 0; j < (it->pos + bs - 1) / bs && j < it->n_blocks; j++) {
            int32_t b = it->blocks[j];
            if (b >= 0 && b < nb && x->dev_tag[b] != px_tag(x, it->id, j)) {
                if (!h->err[0])
                    snprintf(h->err, sizeof(h->err),
                             "step %llu: item (slot %u, pos %d, n %d) finds block %d (table index %d) not "
                             "holding its context (lost or wrong copy)",
                             (unsigned long long)h->steps, (unsigned)(uint32_t)it->id, it->pos, it->n_tokens, b, j);
                break;
            }
        }
        for (int32_t j = 0; j < i; j++)
            if (p->items[j].id == it->id) h_bad(h, "two items for one request");
    }
    if (tokens != p->n_tokens) h_bad(h, "plan n_tokens != sum of items");
    for (int32_t i = 0; i < p->n_preempted; i++) {
        sched_req_info ri;
        if (sched_req_get(h->s, p->preempted[i].id, &ri) == 0 && ri.state != SCHED_PREEMPTED_SWAPPED &&
            ri.state != SCHED_PREEMPTED_RECOMPUTE && ri.state < SCHED_FINISHED)
            h_bad(h, "preempted request in a running state");
        for (int32_t j = 0; j < p->n_items; j++)
            if (p->items[j].id == p->preempted[i].id) h_bad(h, "preempted request also has an item");
    }

    /* The forward pass writes the K/V of the positions it processes. */
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        for (int32_t j = it->pos / bs; j <= (it->pos + it->n_tokens - 1) / bs && j < it->n_blocks; j++) {
            int32_t b = it->blocks[j];
            if (b >= 0 && b < nb) x->dev_tag[b] = px_tag(x, it->id, j);
        }
    }

    /* Hash the plan. */
    hash_u64(x, (uint64_t)p->n_items);
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        hash_u64(x, it->id);
        hash_u64(x, ((uint64_t)(uint32_t)it->tenant << 32) | (uint32_t)it->pos);
        hash_u64(x, ((uint64_t)(uint32_t)it->n_tokens << 32) | ((uint64_t)it->is_prefill << 8) | it->sample);
        for (int32_t j = 0; j < it->n_blocks; j++) hash_u64(x, (uint64_t)(uint32_t)it->blocks[j]);
    }
    hash_u64(x, (uint64_t)p->n_swap_out);
    for (int32_t i = 0; i < p->n_swap_out; i++)
        hash_u64(x, ((uint64_t)(uint32_t)p->swap_out[i].dev_block << 32) | (uint32_t)p->swap_out[i].host_slot);
    hash_u64(x, (uint64_t)p->n_swap_in);
    for (int32_t i = 0; i < p->n_swap_in; i++)
        hash_u64(x, ((uint64_t)(uint32_t)p->swap_in[i].dev_block << 32) | (uint32_t)p->swap_in[i].host_slot);
    hash_u64(x, (uint64_t)p->n_preempted);
    for (int32_t i = 0; i < p->n_preempted; i++) hash_u64(x, p->preempted[i].id ^ p->preempted[i].swapped);
    hash_u64(x, ((uint64_t)(uint32_t)p->n_failed << 32) | (uint32_t)p->budget);
}

/* Report the step in flight: stop tokens at h.p_stop, time from the
 * harness's fake model; the step fails when h.fail_next is set (and that
 * clears it), as in h_step. */
static void px_done(px *x) {
    harness *h = &x->h;
    const sched_plan *p = &x->plan;
    double us = h->us_base;
    int32_t n = p->n_items <= h->cfg.max_running ? p->n_items : 0;
    for (int32_t i = 0; i < n; i++) {
        const sched_item *it = &p->items[i];
        us += it->is_prefill ? h->us_prefill * it->n_tokens : h->us_decode;
        h->res[i].finished = it->sample && h_unif(h) < h->p_stop;
        h->tokens += (uint64_t)it->n_tokens;
    }
    if (!p->n_items && !p->n_swap_in && !p->n_swap_out) us = 0;
    h->now_us += (int64_t)us + 1;
    sched_result r = {h->res, p->n_items, us, (p->n_swap_in + p->n_swap_out) ? 10.0 : 0.0, h->fail_next};
    h->fail_next = 0;
    if (sched_step_done(h->s, h->now_us, &r)) h_bad(h, "sched_step_done refused");
    h->steps++;
}

static int32_t px_step(px *x) {
    px_plan(x);
    px_done(x);
    int rc = sched_check(x->h.s);
    if (rc && !x->h.err[0])
        snprintf(x->h.err, sizeof(x->h.err), "sched_check = %d (%s) after step %llu", rc, err_name(rc),
                 (unsigned long long)x->h.steps);
    return x->plan.n_items;
}

#define ASSERT_HEALTHY(x)                                                        \
    do {                                                                         \
        if ((x)->h.err[0]) fail_msg("plan error: %s", (x)->h.err);              \
        int check_rc_ = sched_check((x)->h.s);                                   \
        if (check_rc_) fail_msg("sched_check = %d (%s)", check_rc_, err_name(check_rc_)); \
    } while (0)

/* ---- accepted-request tracking -------------------------------------------- */

typedef struct trk {
    int32_t n, cap, n_ended;
    sched_id *id;
    int32_t *tenant, *max_new, *prompt;
    int32_t **tokens;       /* prompt tokens (prefix cache runs), freed at the end event */
    uint8_t *ended;
    int32_t *slot_cur;      /* (max_requests) index of the unpolled request in each slot, -1 */
    int32_t max_requests;
    uint64_t n_finished, n_cancelled, n_failed, n_timeout, n_exec_failed;
} trk;

static void trk_init(trk *t, int32_t max_requests) {
    memset(t, 0, sizeof(*t));
    t->max_requests = max_requests;
    t->slot_cur = malloc((size_t)max_requests * sizeof(int32_t));
    assert_non_null(t->slot_cur);
    for (int32_t i = 0; i < max_requests; i++) t->slot_cur[i] = -1;
}

static void trk_deinit(trk *t) {
    for (int32_t i = 0; t->tokens && i < t->n; i++) free(t->tokens[i]);
    free(t->id); free(t->tenant); free(t->max_new); free(t->prompt); free(t->ended); free(t->slot_cur);
    free(t->tokens);
}

static void trk_accept(trk *t, sched_id id, int32_t tenant, int32_t prompt, int32_t max_new) {
    uint32_t slot = (uint32_t)id;
    assert_true(slot < (uint32_t)t->max_requests);
    if (t->slot_cur[slot] != -1) fail_msg("slot %u reused before its end was polled", slot);
    for (int32_t i = t->n - 1; i >= 0 && i >= t->n - 4; i--)
        if (t->id[i] == id) fail_msg("id reused");
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->id = realloc(t->id, (size_t)t->cap * sizeof(sched_id));
        t->tenant = realloc(t->tenant, (size_t)t->cap * sizeof(int32_t));
        t->max_new = realloc(t->max_new, (size_t)t->cap * sizeof(int32_t));
        t->prompt = realloc(t->prompt, (size_t)t->cap * sizeof(int32_t));
        t->ended = realloc(t->ended, (size_t)t->cap);
        t->tokens = realloc(t->tokens, (size_t)t->cap * sizeof(int32_t *));
        assert_true(t->id && t->tenant && t->max_new && t->prompt && t->ended && t->tokens);
    }
    t->tokens[t->n] = NULL;
    t->id[t->n] = id;
    t->tenant[t->n] = tenant;
    t->prompt[t->n] = prompt;
    t->max_new[t->n] = max_new;
    t->ended[t->n] = 0;
    t->slot_cur[slot] = t->n++;
}

/* Take every pending end event; each must name an accepted, unended id. */
static int32_t trk_poll(trk *t, sched *s, int32_t most) {
    sched_end ev;
    int32_t k = 0;
    while (k < most && sched_poll_end(s, &ev)) {
        k++;
        uint32_t slot = (uint32_t)ev.id;
        if (slot >= (uint32_t)t->max_requests) fail_msg("end event for slot out of range");
        int32_t i = t->slot_cur[slot];
        if (i < 0 || t->id[i] != ev.id) fail_msg("end event for an id never accepted or already ended");
        if (t->ended[i]) fail_msg("second end event for one id");
        t->ended[i] = 1;
        t->slot_cur[slot] = -1;
        free(t->tokens[i]); /* the scheduler let go of it with the end event */
        t->tokens[i] = NULL;
        t->n_ended++;
        assert_int_equal(ev.tenant, t->tenant[i]);
        assert_int_equal(ev.prompt_tokens, t->prompt[i]);
        assert_true(ev.generated >= 0 && ev.generated <= t->max_new[i]);
        switch (ev.state) {
        case SCHED_FINISHED:
            assert_true(ev.generated >= 1);
            assert_true(ev.first_token_us > 0);
            t->n_finished++;
            break;
        case SCHED_CANCELLED: t->n_cancelled++; break;
        case SCHED_FAILED:
            t->n_failed++;
            if (ev.reason == SCHED_R_QUEUE_TIMEOUT) {
                t->n_timeout++;
                assert_int_equal(ev.generated, 0);
            } else if (ev.reason == SCHED_R_EXECUTOR) {
                t->n_exec_failed++;
            } else {
                fail_msg("failed with unexpected reason %s", sched_reason_name(ev.reason));
            }
            break;
        default: fail_msg("end event with state %s", sched_state_str(ev.state));
        }
    }
    return k;
}

/* ---- common setup ------------------------------------------------------------ */

static uint64_t rnd(harness *h, uint64_t n) { return n ? h_rand(h) % n : 0; }
static int32_t rnd_in(harness *h, int32_t lo, int32_t hi) { return lo + (int32_t)rnd(h, (uint64_t)(hi - lo + 1)); }

static const sched_tier flat_tier = {"flat", 0, 0, 0, 0.0, 0};

static int add_tenant(sched *s, const char *name, int tier, double weight) {
    sched_tenant_cfg tc;
    memset(&tc, 0, sizeof(tc));
    snprintf(tc.name, sizeof(tc.name), "%s", name);
    tc.tier = tier;
    tc.weight = weight;
    int id = sched_tenant_add(s, &tc);
    assert_true(id >= 0);
    return id;
}

/* ---- 1. fairness bound ----------------------------------------------------- */

/* One randomized run: n tenants in one band, each continuously backlogged
 * (its queue is kept longer than max_running, so it can never empty within a
 * step), with its own weight and request-size profile. After every step the
 * largest weighted service gap max_f S_f/w_f - min_g S_g/w_g (every pair has
 * been backlogged since time 0) is compared with U. Returns the largest
 * gap / U seen. */
static double fair_run(uint64_t seed, int32_t n_tenants, int32_t n_blocks, int budget, int32_t seats, int32_t out_hi,
                       int steps, int assert_bound) {
    sched_config c;
    h_config(&c, n_blocks, 64);
    c.budget_min = budget;
    c.budget_max = budget;
    c.max_running = seats;
    c.max_requests = n_tenants * (seats + 2) + 2 * seats;
    px x;
    px_init(&x, &c, seed);
    harness *h = &x.h;
    h->p_stop = 0.02;
    sched *s = h->s;
    int tier = sched_tier_add(s, &flat_tier);
    assert_true(tier >= 0);
    double w[64];
    int32_t plo[64], phi[64], olo[64], ohi[64];
    for (int32_t i = 0; i < n_tenants; i++) {
        char name[16];
        snprintf(name, sizeof(name), "t%d", i);
        w[i] = (double)rnd_in(h, 1, 4);
        add_tenant(s, name, tier, w[i]);
        /* Profiles from short-prompt/long-output to long-prompt/short-output. */
        plo[i] = rnd_in(h, 16, 512);
        phi[i] = rnd_in(h, plo[i], 512);
        olo[i] = rnd_in(h, 1, out_hi);
        ohi[i] = rnd_in(h, olo[i], out_hi);
    }
    const double U = fmax(c.w_in * 512, c.w_out * c.budget_max);
    double worst = 0;
    sched_tenant_stats st;
    for (int step = 0; step < steps; step++) {
        for (int32_t i = 0; i < n_tenants; i++) {
            assert_int_equal(sched_tenant_stats_get(s, i, &st), 0);
            for (int32_t q = st.queued; q <= c.max_running; q++) {
                sched_id id;
                sched_reason why;
                int rc = sched_submit(s, h->now_us, i, rnd_in(h, plo[i], phi[i]), rnd_in(h, olo[i], ohi[i]), &id, &why);
                if (rc) fail_msg("submit rejected: %s", sched_reason_name(why));
            }
        }
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
        double lo = INFINITY, hi = -INFINITY;
        for (int32_t i = 0; i < n_tenants; i++) {
            assert_int_equal(sched_tenant_stats_get(s, i, &st), 0);
            if (st.queued == 0) fail_msg("tenant %d stopped being backlogged: test setup broken", i);
            double v = st.service / w[i];
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
        double gap = (hi - lo) / U;
        if (gap > worst) worst = gap;
        if (assert_bound && gap > 2.0)
            fail_msg("seed %llu, %d tenants, step %d: weighted service gap %.1f = %.2f U > 2U",
                     (unsigned long long)seed, n_tenants, step, hi - lo, gap);
    }
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
    return worst;
}

static const int32_t fair_sizes[] = {2, 3, 4, 6, 9, 13, 20, 30, 40, 50};

/* The VTC bound charges one "unit" U as the most service one decision can
 * add: a prompt chunk (w_in x 512) or what running decodes add while a
 * backlogged tenant is not being admitted. Decodes are not gated by the
 * counters, so the second is w_out x (tokens the KV pool holds), not x
 * (tokens per step): the bound as stated, U = max(w_in x max prompt, w_out x
 * budget_max), holds when the pool holds no more tokens than one step's
 * budget. Configuration: 48 blocks of 16 = 768 positions (the largest request,
 * 512 + 64 = 36 blocks, fits), budget 768 tokens/step. */
static void test_fairness_bound(void **st) {
    (void)st;
    double worst = 0;
    for (size_t k = 0; k < sizeof(fair_sizes) / sizeof(fair_sizes[0]); k++) {
        double g = fair_run(1000 + k, fair_sizes[k], 48, 768, 32, 64, 2500, 1);
        if (g > worst) worst = g;
    }
    print_message("fairness, pool 768 tokens = budget 768: largest |S_f/w_f - S_g/w_g| = %.3f U (bound 2U)\n", worst);
}

/* Reported, not asserted, to show where the gap goes when the pool holds
 * more than one step's budget: a big pool (65536 positions, budget 256)
 * with 32 and 256 seats, the same with outputs up to 1024 tokens, and a
 * tight pool (1024 positions, budget 256: admission is blocked and
 * preemption frequent) where running decodes keep going while backlogged
 * tenants cannot be admitted. U is max(w_in x 512, w_out x budget) in all. */
static void test_fairness_big_pool(void **st) {
    (void)st;
    static const struct { int32_t n_blocks, budget, seats, out_hi; const char *what; } cfgs[] = {
        {4096, 256, 32, 64, "big pool 65536, budget 256, 32 seats"},
        {4096, 256, 256, 64, "big pool 65536, budget 256, 256 seats"},
        {4096, 256, 32, 1024, "big pool 65536, budget 256, 32 seats, outputs <= 1024"},
        {64, 256, 32, 64, "tight pool 1024, budget 256, 32 seats"},
    };
    for (size_t c = 0; c < sizeof(cfgs) / sizeof(cfgs[0]); c++) {
        double worst = 0;
        int32_t at = 0;
        for (size_t k = 0; k < sizeof(fair_sizes) / sizeof(fair_sizes[0]); k++) {
            double g = fair_run(2000 + k, fair_sizes[k], cfgs[c].n_blocks, cfgs[c].budget, cfgs[c].seats,
                                cfgs[c].out_hi, 2500, 0);
            if (g > worst) { worst = g; at = fair_sizes[k]; }
        }
        print_message("fairness, %s: largest gap %.3f U (%d tenants)\n", cfgs[c].what, worst, at);
    }
}

/* ---- 2. returning tenant ------------------------------------------------------ */

/* Three tenants kept backlogged with prefill-heavy requests (the step budget
 * is the contended resource; KV and seats stay free), and R, which is served
 * once, idles for 2000 steps and comes back. R must be served within one
 * admission round, lifted to at least the others' minimum counter, and gain
 * no more weighted service than the best of the others plus U afterwards. */
static void test_returning_tenant(void **st) {
    (void)st;
    sched_config c;
    h_config(&c, 1024, 0);
    c.budget_min = c.budget_max = 256;
    px x;
    px_init(&x, &c, 77);
    harness *h = &x.h;
    sched *s = h->s;
    int tier = sched_tier_add(s, &flat_tier);
    const int n = 4, R = 3;
    const double w[4] = {1, 2, 3, 2};
    for (int i = 0; i < n; i++) add_tenant(s, i == R ? "ret" : "other", tier, w[i]);
    const double U = fmax(c.w_in * 512, c.w_out * c.budget_max);
    sched_id id;
    sched_reason why;
    sched_tenant_stats ts[4];

    /* R is served alongside the others for a while, then leaves. */
    assert_int_equal(sched_submit(s, h->now_us, R, 300, 2, &id, &why), 0);
    for (int step = 0; step < 2200; step++) {
        for (int i = 0; i < R; i++) {
            sched_tenant_stats_get(s, i, &ts[i]);
            for (int q = ts[i].queued; q < 6; q++)
                assert_int_equal(sched_submit(s, h->now_us, i, rnd_in(h, 256, 512), rnd_in(h, 1, 4), &id, &why), 0);
        }
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
    }
    sched_tenant_stats_get(s, R, &ts[R]);
    assert_int_equal(ts[R].completed, 1);
    assert_int_equal(ts[R].queued + ts[R].running, 0);

    /* R returns: lifted to the minimum of the backlogged counters. */
    assert_int_equal(sched_submit(s, h->now_us, R, 400, 2, &id, &why), 0);
    double s0[4];
    uint64_t vmin = 0;
    for (int i = 0; i < n; i++) {
        sched_tenant_stats_get(s, i, &ts[i]);
        s0[i] = ts[i].service;
        if (i != R && (i == 0 || fq_diff(ts[i].vtime, vmin) < 0)) vmin = ts[i].vtime;
    }
    print_message("returning tenant: counter %llu, others' minimum %llu (fq units)\n",
                  (unsigned long long)ts[R].vtime, (unsigned long long)vmin);
    assert_true(fq_diff(ts[R].vtime, vmin) >= 0);

    int served_at = -1;
    double worst = -INFINITY;
    for (int step = 0; step < 2000; step++) {
        for (int i = 0; i < n; i++) {
            sched_tenant_stats_get(s, i, &ts[i]);
            for (int q = ts[i].queued; q < 6; q++)
                assert_int_equal(sched_submit(s, h->now_us, i, rnd_in(h, 256, 512), rnd_in(h, 1, 4), &id, &why), 0);
        }
        px_step(&x);
        for (int32_t k = 0; served_at < 0 && k < x.plan.n_items; k++)
            if (x.plan.items[k].tenant == R && x.plan.items[k].is_prefill) served_at = step;
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
        double best_other = -INFINITY, gain_r = 0;
        for (int i = 0; i < n; i++) {
            sched_tenant_stats_get(s, i, &ts[i]);
            double g = (ts[i].service - s0[i]) / w[i];
            if (i == R) gain_r = g;
            else best_other = fmax(best_other, g);
        }
        worst = fmax(worst, (gain_r - best_other) / U);
        if (gain_r - best_other > U)
            fail_msg("step %d: returning tenant gained %.0f weighted tokens, best other %.0f: banked credit", step,
                     gain_r, best_other);
    }
    print_message("returning tenant: first prefill chunk in step %d after arrival; largest excess over the others %.3f U\n",
                  served_at + 1, worst);
    assert_true(served_at >= 0 && served_at <= 1);
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
}

/* ---- 3. random events ------------------------------------------------------------ */

typedef struct prop_stats {
    uint64_t hash;
    uint64_t swaps, recomputes, accepted, rejected, cancels_in_flight, exec_fails;
    uint64_t query_tokens, hit_tokens, evicted; /* prefix cache runs */
    int cache;              /* 1: prompts with tokens, prefix cache on */
    trk t;
} prop_stats;

/* A prompt for the prefix cache runs: one of four system prompts (the
 * first declared public), then one of eight questions, so that prompts
 * repeat and share prefixes; some requests carry a cache salt. */
static int32_t *prop_tokens(harness *h, int32_t n, int32_t *n_public, uint64_t *salt) {
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    assert_non_null(tok);
    int sys = (int)rnd(h, 4), q = (int)rnd(h, 8);
    int32_t sys_len = 24 + 40 * sys;
    for (int32_t i = 0; i < n; i++)
        tok[i] = i < sys_len ? 1000 * (sys + 1) + i : (int32_t)(100000 + 997 * q + (i - sys_len) % 13);
    *salt = rnd(h, 10) == 0 ? 1 + rnd(h, 2) : 0;
    *n_public = sys == 0 && !*salt ? (n < sys_len ? n : sys_len) : 0;
    return tok;
}

/* Tenants of the property run: every tier, every kind of quota. */
static void prop_setup(sched *s) {
    assert_int_equal(sched_tiers_default(s), 0);
    sched_tier quick = {"quick", 3, 0, 0, 0.05, 40};    /* 40 ms queue limit: timeouts */
    sched_tier paced = {"paced", 1, 300, 25, 0.10, 0};  /* TPOT target: adaptive budget */
    int tq = sched_tier_add(s, &quick), tp = sched_tier_add(s, &paced);
    assert_true(tq >= 0 && tp >= 0);
    sched_tenant_cfg tc[] = {
        {"gold", 0, 2, 0, 0, 0, 0},
        {"gold-capped", 0, 1, 24, 0, 2, 6},
        {"silver", 1, 1, 0, 0.5, 0, 0},
        {"bronze", 2, 1, 0, 0, 0, 0},
        {"bronze-heavy", 2, 3, 0, 0, 3, 0},
        {"quick", tq, 1, 0, 0, 0, 12},
        {"paced", tp, 1.5, 40, 0, 0, 0},
        {"paced-2", tp, 1, 0, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof(tc) / sizeof(tc[0]); i++) assert_true(sched_tenant_add(s, &tc[i]) >= 0);
}

static void prop_submit(px *x, prop_stats *ps) {
    harness *h = &x->h;
    int32_t tn = rnd_in(h, 0, 7), prompt, max_new;
    uint64_t kind = rnd(h, 100);
    if (kind < 3) tn = rnd(h, 2) ? -1 : 99;              /* unknown tenant */
    if (kind >= 3 && kind < 6) { prompt = rnd_in(h, -2, 0); max_new = rnd_in(h, 1, 8); }
    else if (kind >= 6 && kind < 8) { prompt = 8; max_new = 0; }
    else if (kind >= 8 && kind < 10) { prompt = rnd_in(h, 600, 1000); max_new = rnd_in(h, 200, 500); } /* context */
    else if (kind >= 10 && kind < 40) { prompt = rnd_in(h, 1, 8); max_new = rnd_in(h, 1, 100); }
    else { prompt = rnd_in(h, 1, 400); max_new = rnd_in(h, 1, 120); }
    sched_id id = 0;
    sched_reason why = SCHED_R_COUNT;
    sched_prompt sp = {NULL, prompt, 0, 0};
    int32_t *tok = NULL;
    if (ps->cache && prompt > 0) sp.tokens = tok = prop_tokens(h, prompt, &sp.n_public, &sp.salt);
    int rc = sched_submit_prompt(h->s, h->now_us, tn, &sp, max_new, &id, &why);
    assert_true(rc == 0 || rc == 1);
    if (rc == 0) {
        assert_int_equal(why, SCHED_R_NONE);
        trk_accept(&ps->t, id, tn, prompt, max_new);
        ps->t.tokens[ps->t.n - 1] = tok;
        if (x->slot_tok) {
            uint32_t slot = (uint32_t)id;
            x->slot_tok[slot] = tok;
            x->slot_prompt[slot] = prompt;
            x->slot_public[slot] = sp.n_public;
            x->slot_tenant[slot] = tn;
            x->slot_salt[slot] = sp.salt;
        }
        tok = NULL;
        ps->accepted++;
    } else {
        assert_int_not_equal(why, SCHED_R_NONE);
        ps->rejected++;
        if (kind < 3) assert_int_equal(why, SCHED_R_UNKNOWN_TENANT);
        else if (kind < 8) assert_int_equal(why, SCHED_R_BAD_REQUEST);
    }
    free(tok);
}

/* Cancel a random id (recent ones more often, ended ones too): 0 exactly
 * when the request is live. */
static void prop_cancel(px *x, prop_stats *ps, int in_flight) {
    harness *h = &x->h;
    trk *t = &ps->t;
    sched_id id;
    if (in_flight && x->plan.n_items && rnd(h, 2)) id = x->plan.items[rnd(h, (uint64_t)x->plan.n_items)].id;
    else if (in_flight && x->plan.n_preempted && rnd(h, 3) == 0) id = x->plan.preempted[rnd(h, (uint64_t)x->plan.n_preempted)].id;
    else if (t->n == 0) return;
    else if (rnd(h, 4)) id = t->id[t->n - 1 - (int32_t)rnd(h, (uint64_t)(t->n < 48 ? t->n : 48))];
    else id = t->id[rnd(h, (uint64_t)t->n)];
    sched_req_info ri;
    int live = sched_req_get(h->s, id, &ri) == 0 && ri.state < SCHED_FINISHED;
    int rc = sched_cancel(h->s, h->now_us, id);
    if (live) {
        assert_int_equal(rc, 0);
        if (in_flight) ps->cancels_in_flight++;
    } else {
        assert_int_equal(rc, TS_ERR_INVAL);
    }
}

static void prop_run(uint64_t seed, int policy, long n_events, int cache, prop_stats *ps) {
    sched_config c;
    h_config(&c, 64, 24);
    c.policy = policy;
    c.max_ctx = 1024;
    c.max_requests = 256;
    c.max_tenants = 16;
    c.max_running = 16;
    c.budget_min = 32;
    c.budget_max = 256;
    c.prefix_cache = cache;
    px x;
    px_init(&x, &c, seed);
    if (cache) px_cache(&x);
    harness *h = &x.h;
    h->p_stop = 0.04;
    sched *s = h->s;
    prop_setup(s);
    memset(ps, 0, sizeof(*ps));
    ps->cache = cache;
    trk_init(&ps->t, c.max_requests);

    for (long e = 0; e < n_events; e++) {
        uint64_t r = rnd(h, 1000);
        if (r < 300) {
            prop_submit(&x, ps);
        } else if (r < 720) {
            px_plan(&x);
            h->fail_next = rnd(h, 1000) < 5;
            if (rnd(h, 10) == 0)
                for (int k = rnd_in(h, 1, 3); k > 0; k--) prop_cancel(&x, ps, 1);
            if (rnd(h, 10) == 0) {  /* the plan stays valid until sched_step_done */
                sched_plan again;
                assert_int_equal(sched_step(s, h->now_us, &again), TS_ERR_INVAL);
            }
            ps->exec_fails += (uint64_t)h->fail_next;
            px_done(&x);
        } else if (r < 800) {
            prop_cancel(&x, ps, 0);
        } else if (r < 950) {
            trk_poll(&ps->t, s, rnd(h, 4) ? 1 << 30 : rnd_in(h, 1, 3));
        } else if (r < 980) {
            h->now_us += rnd_in(h, 1, 60000); /* idle time: queue timeouts */
        } else {
            /* a step with nothing polled for a while: slots run out */
            px_step(&x);
        }
        ASSERT_HEALTHY(&x);
    }

    /* Liveness: with no new work and no cancels, everything ends by itself. */
    h->p_stop = 0.1;
    int32_t steps = 0;
    for (; steps < 20000; steps++) {
        trk_poll(&ps->t, s, 1 << 30);
        if (ps->t.n_ended == ps->t.n) break;
        px_step(&x);
        ASSERT_HEALTHY(&x);
    }
    if (ps->t.n_ended != ps->t.n) {
        sched_stats ss;
        sched_stats_get(s, &ss);
        fail_msg("policy %d: %d requests never ended after %d steps (queued %d running %d swapped %d, kv used %d)",
                 policy, ps->t.n - ps->t.n_ended, steps, ss.queued, ss.running, ss.swapped, ss.kv_used);
    }
    /* Nothing missing: every accepted id ended exactly once. */
    for (int32_t i = 0; i < ps->t.n; i++) assert_true(ps->t.ended[i]);
    sched_stats ss;
    sched_stats_get(s, &ss);
    assert_int_equal(ss.kv_free, ss.kv_total);
    assert_int_equal(ss.kv_used, 0);
    assert_int_equal(ss.swap_used, 0);
    assert_int_equal(ss.queued + ss.running + ss.swapped, 0);
    sched_end ev;
    assert_int_equal(sched_poll_end(s, &ev), 0);
    for (int32_t i = 0; i < 8; i++) {
        sched_tenant_stats ts;
        sched_tenant_stats_get(s, i, &ts);
        ps->swaps += ts.preempt_swap;
        ps->recomputes += ts.preempt_recompute;
        ps->query_tokens += ts.prefix_query_tokens;
        ps->hit_tokens += ts.prefix_hit_tokens;
        assert_true(ts.prefix_hit_tokens <= ts.prefix_query_tokens);
        assert_int_equal(ts.kv_blocks, 0);
        assert_int_equal(ts.submitted, ts.completed + ts.cancelled + ts.failed);
    }
    ps->hash = x.hash;
    ps->evicted = ss.kv_evicted;
    if (!cache) assert_int_equal(ss.kv_cached, 0);
    assert_int_equal(ss.kv_cache_only, ss.kv_cached); /* nothing runs: all cached blocks are cache-only */
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
}

static void prop_policy(int policy, const char *name, int cache) {
    prop_stats ps;
    prop_run(4242 + (uint64_t)policy, policy, 100000, cache, &ps);
    print_message("%s: %llu accepted, %llu rejected; ended %llu finished, %llu cancelled (%llu in flight), "
                  "%llu failed (%llu timeouts, %llu executor); preemptions %llu swap, %llu recompute\n",
                  name, (unsigned long long)ps.accepted, (unsigned long long)ps.rejected,
                  (unsigned long long)ps.t.n_finished, (unsigned long long)ps.t.n_cancelled,
                  (unsigned long long)ps.cancels_in_flight, (unsigned long long)ps.t.n_failed,
                  (unsigned long long)ps.t.n_timeout, (unsigned long long)ps.t.n_exec_failed,
                  (unsigned long long)ps.swaps, (unsigned long long)ps.recomputes);
    if (cache) {
        print_message("%s, prefix cache: %llu of %llu prompt tokens looked up were hits; %llu blocks evicted\n",
                      name, (unsigned long long)ps.hit_tokens, (unsigned long long)ps.query_tokens,
                      (unsigned long long)ps.evicted);
        assert_true(ps.hit_tokens > ps.query_tokens / 50); /* a 64-block pool under churn: few survive */
        assert_true(ps.evicted > 0);
    }
    assert_true(ps.swaps > 0);
    assert_true(ps.recomputes > 0);
    assert_true(ps.t.n_timeout > 0);
    assert_true(ps.t.n_exec_failed > 0);
    assert_true(ps.cancels_in_flight > 0);
    trk_deinit(&ps.t);
}

static void test_random_events_fair(void **st) { (void)st; prop_policy(SCHED_POLICY_FAIR, "fair", 0); }
static void test_random_events_fcfs(void **st) { (void)st; prop_policy(SCHED_POLICY_FCFS, "fcfs", 0); }
static void test_random_events_fair_cache(void **st) { (void)st; prop_policy(SCHED_POLICY_FAIR, "fair", 1); }
static void test_random_events_fcfs_cache(void **st) { (void)st; prop_policy(SCHED_POLICY_FCFS, "fcfs", 1); }

/* ---- 4. determinism ------------------------------------------------------------------ */

static void test_determinism(void **st) {
    (void)st;
    for (int policy = 0; policy < 2; policy++) {
        prop_stats a, b, c;
        prop_run(99, policy, 20000, policy, &a); /* FCFS with the prefix cache */
        prop_run(99, policy, 20000, policy, &b);
        prop_run(100, policy, 20000, policy, &c);
        assert_true(a.hash == b.hash);
        assert_true(a.t.n == b.t.n);
        assert_true(a.hash != c.hash); /* the hash does see the plans */
        trk_deinit(&a.t);
        trk_deinit(&b.t);
        trk_deinit(&c.t);
    }
}

/* ---- 5. no starvation ---------------------------------------------------------------- */

/* Gold keeps 48 long-output requests queued and saturates the pool; bronze
 * (min share 5%) keeps 8 prefill-heavy requests queued. Bronze must complete
 * requests in every window of 1000 steps (a few seconds of fake time). Its
 * prompt tokens a step are reported beside its share of the budget: its
 * floor is a share of the service (decodes included, section 6), so its
 * prefill alone may run under the budget's share. Then gold goes idle:
 * bronze alone must get the whole budget, not its minimum share. */
/* Tokens of the starvation runs with the prefix cache: every request of a
 * tenant starts with the same prompt (static: the scheduler references
 * them until the end is polled). */
static int32_t ns_tokens[2][512];

/* Submit with the tenant's tokens when x caches (recording what px_tag
 * needs), else plainly. */
static int px_submit(px *x, int32_t tn, int32_t prompt, int32_t max_new, sched_id *id, sched_reason *why) {
    harness *h = &x->h;
    if (!x->slot_tok) return sched_submit(h->s, h->now_us, tn, prompt, max_new, id, why);
    sched_prompt p = {ns_tokens[tn & 1], prompt, 0, 0};
    int rc = sched_submit_prompt(h->s, h->now_us, tn, &p, max_new, id, why);
    if (rc == 0) {
        uint32_t slot = (uint32_t)*id;
        x->slot_tok[slot] = p.tokens;
        x->slot_prompt[slot] = prompt;
        x->slot_public[slot] = 0;
        x->slot_tenant[slot] = tn;
        x->slot_salt[slot] = 0;
    }
    return rc;
}

static void no_starvation(int cache) {
    sched_config c;
    h_config(&c, 256, 64);
    c.budget_min = c.budget_max = 256;
    c.prefix_cache = cache;
    px x;
    px_init(&x, &c, 5);
    if (cache) px_cache(&x);
    for (int i = 0; i < 512; i++) ns_tokens[0][i] = 7 + i, ns_tokens[1][i] = 20000 + 3 * i;
    harness *h = &x.h;
    h->p_stop = 0;
    sched *s = h->s;
    assert_int_equal(sched_tiers_default(s), 0);
    const int gold = add_tenant(s, "gold", 0, 1), bronze = add_tenant(s, "bronze", 2, 1);
    sched_tenant_stats tg, tb;
    sched_id id;
    sched_reason why;
    const int window = 1000, n_windows = 6;
    uint64_t done_before = 0, min_per_window = UINT64_MAX;
    for (int step = 0; step < window * n_windows; step++) {
        sched_tenant_stats_get(s, gold, &tg);
        sched_tenant_stats_get(s, bronze, &tb);
        for (int q = tg.queued; q < 48; q++)
            if (px_submit(&x, gold, rnd_in(h, 64, 256), rnd_in(h, 200, 400), &id, &why))
                fail_msg("gold rejected: %s", sched_reason_name(why));
        for (int q = tb.queued + tb.swapped; q < 8; q++)
            if (px_submit(&x, bronze, rnd_in(h, 256, 512), rnd_in(h, 1, 8), &id, &why))
                fail_msg("bronze rejected: %s", sched_reason_name(why));
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
        if ((step + 1) % window == 0) {
            sched_tenant_stats_get(s, bronze, &tb);
            uint64_t d = tb.completed - done_before;
            {
                sched_stats ss;
                sched_stats_get(s, &ss);
                sched_tenant_stats_get(s, gold, &tg);
                print_message("  window %d: bronze +%llu (queued %d running %d swapped %d, prompt tokens %llu, preempted %llu/%llu) gold running %d kv used %d\n",
                              step / window, (unsigned long long)d, tb.queued, tb.running, tb.swapped,
                              (unsigned long long)tb.prompt_tokens, (unsigned long long)tb.preempt_swap,
                              (unsigned long long)tb.preempt_recompute, tg.running, ss.kv_used);
            }
            done_before = tb.completed;
            if (d < min_per_window) min_per_window = d;
        }
    }
    ASSERT_HEALTHY(&x);
    sched_tenant_stats_get(s, gold, &tg);
    sched_tenant_stats_get(s, bronze, &tb);
    print_message("starvation: over %d steps (%.1f s fake time) gold completed %llu (%llu output tokens), bronze "
                  "completed %llu (fewest in a %d-step window: %llu), failed %llu, preempted %llu swap / %llu "
                  "recompute; bronze prompt tokens %.1f/step (new prompt work %.1f/step) vs min share %.1f\n",
                  window * n_windows, (double)(h->now_us - 1000000) / 1e6, (unsigned long long)tg.completed,
                  (unsigned long long)tg.output_tokens, (unsigned long long)tb.completed, window,
                  (unsigned long long)min_per_window, (unsigned long long)tb.failed,
                  (unsigned long long)tb.preempt_swap, (unsigned long long)tb.preempt_recompute,
                  (double)tb.prompt_tokens / (window * n_windows), (tb.service - c.w_out * (double)tb.output_tokens) / c.w_in / (window * n_windows),
                  0.05 * c.budget_max);
    assert_true(tg.running > 0); /* gold really was saturating */
    assert_true(min_per_window >= 1);

    /* Gold goes idle and drains. */
    for (int step = 0; step < 20000; step++) {
        sched_tenant_stats_get(s, gold, &tg);
        if (tg.queued + tg.running + tg.swapped == 0) break;
        sched_tenant_stats_get(s, bronze, &tb);
        for (int q = tb.queued + tb.swapped; q < 8; q++)
            assert_int_equal(px_submit(&x, bronze, rnd_in(h, 256, 512), rnd_in(h, 1, 8), &id, &why), 0);
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
    }
    assert_int_equal(tg.queued + tg.running + tg.swapped, 0);
    /* Bronze alone: its share is the whole budget. */
    const int n = 400;
    uint64_t tokens = 0;
    int full = 0;
    for (int step = 0; step < n; step++) {
        sched_tenant_stats_get(s, bronze, &tb);
        for (int q = tb.queued + tb.swapped; q < 8; q++)
            assert_int_equal(px_submit(&x, bronze, rnd_in(h, 256, 512), rnd_in(h, 1, 8), &id, &why), 0);
        px_step(&x);
        tokens += (uint64_t)x.plan.n_tokens;
        full += x.plan.n_tokens >= x.plan.budget;
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
    }
    double per_step = (double)tokens / n;
    print_message("starvation: bronze alone ran %.1f tokens/step of a %d budget (min share %.0f); %d of %d steps full\n",
                  per_step, c.budget_max, 0.05 * c.budget_max, full, n);
    /* With the cache, bronze's repeated prompt is mostly found cached: too
     * little work is left to fill a step. */
    if (!cache) assert_true(per_step >= 0.9 * c.budget_max);
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
}

/* Long prompts that repeat, the pool's default watermarks (0.85 / 0.70)
 * and the cache on: hits of up to 59 cache-only blocks against a room of
 * at most 55 under the high watermark. A hit is cut to the room its
 * admission was granted, so nothing waits forever, on an idle server or a
 * busy one; the tracking executor checks every shared block's content. */
static int32_t lp_tokens[3][1000];

static void long_prompts_live(int policy, uint64_t seed) {
    sched_config c;
    h_config(&c, 64, 16);
    c.policy = policy;
    c.max_ctx = 1024;
    c.max_requests = 64;
    c.prefix_cache = 1;
    px x;
    px_init(&x, &c, seed);
    px_cache(&x);
    harness *h = &x.h;
    h->p_stop = 0.2;
    sched *s = h->s;
    sched_tier t = {"flat", 0, 0, 0, 0, 0};
    assert_true(sched_tier_add(s, &t) >= 0);
    for (int i = 0; i < 3; i++) assert_true(add_tenant(s, i == 0 ? "a" : i == 1 ? "b" : "c", 0, 1) >= 0);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 1000; i++) lp_tokens[k][i] = 1000 * (k + 1) + i;
    static const int32_t lens[4] = {950, 700, 300, 161};
    sched_stats ss;
    sched_end ev;
    for (int e = 0; e < 600; e++) {
        sched_stats_get(s, &ss);
        if (ss.queued + ss.running + ss.swapped < 4 && rnd(h, 3) == 0) {
            int32_t tn = (int32_t)rnd(h, 3), k = (int32_t)rnd(h, 3), n = lens[rnd(h, 4)];
            sched_prompt p = {lp_tokens[k], n, 0, 0};
            sched_id id;
            sched_reason why;
            if (sched_submit_prompt(s, h->now_us, tn, &p, (int32_t)rnd_in(h, 1, 40), &id, &why) == 0) {
                uint32_t slot = (uint32_t)id;
                x.slot_tok[slot] = p.tokens;
                x.slot_prompt[slot] = n;
                x.slot_public[slot] = 0;
                x.slot_tenant[slot] = tn;
                x.slot_salt[slot] = 0;
            }
        }
        px_step(&x);
        ASSERT_HEALTHY(&x);
        while (sched_poll_end(s, &ev)) {}
    }
    /* Liveness: no new work, and everything ends by itself. */
    int steps = 0;
    for (;; steps++) {
        sched_stats_get(s, &ss);
        if (ss.queued + ss.running + ss.swapped == 0) break;
        if (steps >= 3000)
            fail_msg("policy %d: requests never ended (queued %d running %d swapped %d, kv used %d, admitting %d)",
                     policy, ss.queued, ss.running, ss.swapped, ss.kv_used, ss.admitting);
        px_step(&x);
        ASSERT_HEALTHY(&x);
        while (sched_poll_end(s, &ev)) {}
    }
    uint64_t hits = 0, queried = 0;
    for (int i = 0; i < 3; i++) {
        sched_tenant_stats ts;
        sched_tenant_stats_get(s, i, &ts);
        hits += ts.prefix_hit_tokens;
        queried += ts.prefix_query_tokens;
    }
    print_message("long prompts, policy %d seed %llu: %llu of %llu prompt tokens hits, %d cached, %llu evicted\n", policy,
                  (unsigned long long)seed, (unsigned long long)hits, (unsigned long long)queried, ss.kv_cached,
                  (unsigned long long)ss.kv_evicted);
    assert_int_equal(ss.kv_used, 0);
    assert_int_equal(ss.admitting, 1);
    assert_true(hits > 0);
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
}

static void test_long_prompts_cache_live(void **st) {
    (void)st;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        long_prompts_live(SCHED_POLICY_FAIR, seed);
        long_prompts_live(SCHED_POLICY_FCFS, seed);
    }
}

static void test_no_starvation(void **st) { (void)st; no_starvation(0); }
/* The same with the prefix cache on: every gold and every bronze prompt
 * begins alike, so both share blocks within their tenant. */
static void test_no_starvation_cache(void **st) { (void)st; no_starvation(1); }

/* ---- 6. band floors under a higher band's flood ----------------------------- */

/* One flood run for the floors: tiers gold (band 0, no floor), silver and
 * bronze (bands 1 and 2, floors m[1], m[2]); gold keeps `flood` requests
 * outstanding, silver and bronze `lower` each (closed loops: a request is
 * replaced as soon as it ends, so the bands stay backlogged whenever their
 * outstanding count exceeds what they run). Every `window` steps, the
 * window's service share of each floored band is checked against its
 * floor, for the windows it was backlogged at every step; returns the
 * smallest (share - floor) seen over all bands and windows. */
typedef struct floor_run {
    int32_t n_blocks, n_swap, max_running, budget_min, budget_max;
    double m[3];
    int32_t flood, lower;
    int32_t prompt_lo, prompt_hi, out_lo, out_hi;
    int steps, window;
    uint64_t seed;
} floor_run;

static double floor_flood(const floor_run *fr, int verbose, double *gold_out) {
    sched_config c;
    h_config(&c, fr->n_blocks, fr->n_swap);
    c.max_running = fr->max_running;
    c.budget_min = fr->budget_min;
    c.budget_max = fr->budget_max;
    px x;
    px_init(&x, &c, fr->seed);
    harness *h = &x.h;
    h->p_stop = 0;
    sched *s = h->s;
    static const char *names[3] = {"gold", "silver", "bronze"};
    int tn[3];
    for (int b = 0; b < 3; b++) {
        sched_tier t = {"", b, b == 0 ? 200 : b == 1 ? 500 : 0, 0, fr->m[b], 0};
        snprintf(t.name, sizeof(t.name), "%s", names[b]);
        assert_true(sched_tier_add(s, &t) >= 0);
        tn[b] = add_tenant(s, names[b], b, 1);
    }
    double svc0[3] = {0}, worst = 1, gold_worst = 1, floors = fr->m[1] + fr->m[2];
    int backlogged[3] = {1, 1, 1}, checked = 0;
    for (int step = 0; step < fr->steps; step++) {
        for (int b = 0; b < 3; b++) {
            sched_tenant_stats ts;
            sched_tenant_stats_get(s, tn[b], &ts);
            int want = b == 0 ? fr->flood : fr->lower;
            for (int q = ts.queued + ts.running + ts.swapped; q < want; q++) {
                sched_id id;
                sched_reason why;
                if (sched_submit(s, h->now_us, tn[b], rnd_in(h, fr->prompt_lo, fr->prompt_hi),
                                 rnd_in(h, fr->out_lo, fr->out_hi), &id, &why))
                    fail_msg("%s rejected: %s", names[b], sched_reason_name(why));
            }
            sched_tenant_stats_get(s, tn[b], &ts);
            if (ts.queued + ts.swapped == 0) backlogged[b] = 0;
        }
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) {}
        if ((step + 1) % fr->window) continue;
        double svc[3], total = 0;
        for (int b = 0; b < 3; b++) {
            sched_tenant_stats ts;
            sched_tenant_stats_get(s, tn[b], &ts);
            svc[b] = ts.service - svc0[b];
            svc0[b] = ts.service;
            total += svc[b];
        }
        /* The first window fills the moving sums from nothing: skipped. */
        for (int b = 1; b < 3 && step >= fr->window; b++) {
            if (!backlogged[b] || fr->m[b] <= 0 || total <= 0) continue;
            double gap = svc[b] / total - fr->m[b];
            if (gap < worst) worst = gap;
            checked++;
        }
        /* What the floors cost gold, against their sum. */
        if (step >= fr->window && backlogged[0] && total > 0 && svc[0] / total - (1 - floors) < gold_worst)
            gold_worst = svc[0] / total - (1 - floors);
        if (verbose)
            print_message("  window %d: shares gold %.3f silver %.3f bronze %.3f (floors %.2f, %.2f)%s%s\n",
                          step / fr->window, svc[0] / total, svc[1] / total, svc[2] / total, fr->m[1], fr->m[2],
                          backlogged[1] ? "" : " silver not backlogged", backlogged[2] ? "" : " bronze not backlogged");
        for (int b = 0; b < 3; b++) backlogged[b] = 1;
    }
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
    assert_true(checked > 0); /* some window had a floored band backlogged throughout */
    if (verbose) print_message("  gold's worst window share - (1 - floors) = %+.4f\n", gold_worst);
    /* The floors overshoot (a band claims while its lagging share is under
     * its floor, and keeps what it has under the floor plus the margin),
     * but never take gold below what floors and margins add up to. */
    assert_true(gold_worst >= -floors - FLOOR_SLACK);
    if (gold_out) *gold_out = gold_worst;
    return worst;
}

/* The flood of issue 11 in scheduler terms: examples/demo.yaml's tiers and
 * 32 seats, 160 gold and 24 silver closed-loop clients. Before the floors
 * silver ran nothing at all (gold held 31 of 32 seats throughout). */
static void test_band_floor_flood(void **st) {
    (void)st;
    floor_run fr = {512, 128, 32, 32, 256, {0, 0.10, 0.05}, 160, 24, 64, 64, 64, 128, 4096, 256, 11};
    double gold;
    double worst = floor_flood(&fr, 1, &gold);
    print_message("floor flood: worst window share - floor = %+.4f; gold's worst window share - (1 - floors) = "
                  "%+.4f\n", worst, gold);
    assert_true(worst >= -FLOOR_SLACK);
    assert_true(gold >= -FLOOR_SLACK); /* here the floors cost gold their sum, within the slack */
}

/* Random floods: pools, seats, budgets, floors and request sizes drawn at
 * random; every floored band that stays backlogged for a whole window gets
 * at least its floor less FLOOR_SLACK of the window's service. */
static void test_floors_random(void **st) {
    (void)st;
    harness r;
    memset(&r, 0, sizeof(r));
    r.rng = 0xf100f;
    double worst = 1, gold_worst = 1;
    for (int run = 0; run < 24; run++) {
        floor_run fr;
        fr.max_running = rnd_in(&r, 4, 48);
        fr.n_blocks = rnd_in(&r, 8, 24) * fr.max_running;
        fr.n_swap = rnd_in(&r, 0, 1) ? fr.n_blocks / 4 : 0;
        fr.budget_min = 32;
        fr.budget_max = rnd_in(&r, 64, 512);
        fr.m[0] = 0;
        fr.m[1] = rnd_in(&r, 5, 30) / 100.0;
        fr.m[2] = rnd_in(&r, 2, 20) / 100.0;
        fr.flood = fr.max_running * rnd_in(&r, 2, 6);
        fr.lower = fr.max_running * rnd_in(&r, 1, 2);
        fr.prompt_lo = rnd_in(&r, 8, 64);
        fr.prompt_hi = fr.prompt_lo + rnd_in(&r, 0, 256);
        fr.out_lo = rnd_in(&r, 4, 32);
        fr.out_hi = fr.out_lo + rnd_in(&r, 0, 128);
        fr.steps = 2048;
        fr.window = 256;
        fr.seed = 1000 + (uint64_t)run;
        double gold;
        double w = floor_flood(&fr, 0, &gold);
        print_message("  run %2d: seats %2d blocks %4d swap %3d budget %3d floors %.2f/%.2f prompts %d-%d outputs %d-%d: "
                      "worst share - floor %+.4f, gold - (1 - floors) %+.4f\n", run, fr.max_running, fr.n_blocks,
                      fr.n_swap, fr.budget_max, fr.m[1], fr.m[2], fr.prompt_lo, fr.prompt_hi, fr.out_lo, fr.out_hi, w,
                      gold);
        if (w < worst) worst = w;
        if (gold < gold_worst) gold_worst = gold;
    }
    print_message("floors random: worst window share - floor over 24 runs = %+.4f (bound -%.2f); gold's worst "
                  "window share - (1 - floors) = %+.4f\n", worst, FLOOR_SLACK, gold_worst);
    assert_true(worst >= -FLOOR_SLACK);
}

/* Claims, keep and growth do not trade one pool back and forth for ever:
 * one gold and one silver request that each need most of the pool both
 * finish. (Silver, readmitted to recompute on the room for one chunk,
 * runs out of blocks a chunk later and preempts itself again while gold
 * decodes: wasteful, and older than the floors; the count is printed.) */
static void test_floor_and_growth(void **st) {
    (void)st;
    sched_config c;
    h_config(&c, 64, 0); /* 1,024 positions; no swap: preemption recomputes */
    c.max_running = 4;
    px x;
    px_init(&x, &c, 9);
    harness *h = &x.h;
    h->p_stop = 0;
    sched *s = h->s;
    assert_int_equal(sched_tiers_default(s), 0);
    const int gold = add_tenant(s, "gold", 0, 1), silver = add_tenant(s, "silver", 1, 1);
    trk t;
    trk_init(&t, c.max_requests);
    sched_id id;
    sched_reason why;
    assert_int_equal(sched_submit(s, h->now_us, silver, 500, 400, &id, &why), 0);
    trk_accept(&t, id, silver, 500, 400);
    for (int i = 0; i < 3; i++) px_step(&x);
    assert_int_equal(sched_submit(s, h->now_us, gold, 500, 400, &id, &why), 0);
    trk_accept(&t, id, gold, 500, 400);
    int steps = 0;
    while (t.n_ended < 2 && steps++ < 20000) {
        px_step(&x);
        trk_poll(&t, s, 16);
    }
    sched_tenant_stats tg, ts;
    sched_tenant_stats_get(s, gold, &tg);
    sched_tenant_stats_get(s, silver, &ts);
    print_message("floor and growth: both finished in %d steps; preemptions gold %llu, silver %llu\n", steps,
                  (unsigned long long)(tg.preempt_swap + tg.preempt_recompute),
                  (unsigned long long)(ts.preempt_swap + ts.preempt_recompute));
    assert_int_equal(t.n_finished, 2);
    ASSERT_HEALTHY(&x);
    trk_deinit(&t);
    px_deinit(&x);
}

/* ---- 7. FCFS: a started prefill behind a head that admission holds back ---- */

/* Under FCFS a request held back by its tenant's max_running stays at the
 * head while later ones are admitted. When it becomes eligible with
 * admission closed (pool over the watermark), the prefills started behind it
 * must still run: they hold the blocks whose release would reopen admission.
 * Pool 20 blocks (high 17, low 14), budget 35: C (280 tokens) prefills 34
 * tokens a step next to A's decode; once C holds 17 blocks, A is cancelled,
 * B (A's tenant, max_running 1) becomes eligible and finds admission closed. */
static void test_fcfs_started_prefill_not_hidden(void **st) {
    (void)st;
    sched_config c;
    h_config(&c, 20, 0);
    c.policy = SCHED_POLICY_FCFS;
    c.budget_min = c.budget_max = 35;
    px x;
    px_init(&x, &c, 3);
    harness *h = &x.h;
    sched *s = h->s;
    int tier = sched_tier_add(s, &flat_tier);
    sched_tenant_cfg tx = {"x", tier, 1, 0, 0, 1, 0};
    int X = sched_tenant_add(s, &tx), Y = add_tenant(s, "y", tier, 1);
    sched_id a, b, cc;
    sched_reason why;
    sched_req_info ri;
    assert_int_equal(sched_submit(s, h->now_us, X, 16, 200, &a, &why), 0);
    px_step(&x);
    assert_int_equal(sched_submit(s, h->now_us, X, 16, 4, &b, &why), 0);
    assert_int_equal(sched_submit(s, h->now_us, Y, 280, 1, &cc, &why), 0);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(sched_req_get(s, cc, &ri), 0);
        if (ri.n_computed >= 17 * 16 || (ri.state != SCHED_WAITING && ri.state != SCHED_PREFILLING)) break;
        px_step(&x);
    }
    assert_int_equal(sched_req_get(s, cc, &ri), 0);
    if (ri.state != SCHED_PREFILLING || ri.n_blocks < 17) fail_msg("setup: C is %s with %d blocks", sched_state_str(ri.state), ri.n_blocks);
    assert_int_equal(sched_cancel(s, h->now_us, a), 0);
    int ended_c = 0;
    for (int i = 0; i < 50 && !ended_c; i++) {
        px_step(&x);
        sched_end ev;
        while (sched_poll_end(s, &ev)) ended_c |= ev.id == cc;
    }
    if (!ended_c) fail_msg("the started prefill behind a held-back head never ran again");
    for (int i = 0; i < 50 && sched_req_get(s, b, &ri) == 0 && ri.state == SCHED_WAITING; i++) px_step(&x);
    assert_true(sched_req_get(s, b, &ri) != 0 || ri.state != SCHED_WAITING);
    ASSERT_HEALTHY(&x);
    px_deinit(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fairness_bound),
        cmocka_unit_test(test_fairness_big_pool),
        cmocka_unit_test(test_returning_tenant),
        cmocka_unit_test(test_random_events_fair),
        cmocka_unit_test(test_random_events_fcfs),
        cmocka_unit_test(test_random_events_fair_cache),
        cmocka_unit_test(test_random_events_fcfs_cache),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_no_starvation),
        cmocka_unit_test(test_no_starvation_cache),
        cmocka_unit_test(test_long_prompts_cache_live),
        cmocka_unit_test(test_band_floor_flood),
        cmocka_unit_test(test_floors_random),
        cmocka_unit_test(test_floor_and_growth),
        cmocka_unit_test(test_fcfs_started_prefill_not_hidden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
