/*
 * sched_harness.h - a synthetic executor for scheduler tests: it runs each
 * plan against a fake clock, checks the plan is executable (block tables
 * cover the positions, no block is held by two requests, swap copies name
 * the right blocks), and reports results. Header-only (static functions),
 * shared by the scheduler test programs.
 */
#ifndef TS_SCHED_HARNESS_H
#define TS_SCHED_HARNESS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

typedef struct harness {
    sched *s;
    sched_config cfg;
    int64_t now_us;
    uint64_t rng;
    double p_stop;              /* chance a sampled token is a stop token */
    double us_base, us_prefill, us_decode; /* fake step time model */
    int32_t *owner;             /* (n_blocks) slot+1 of the holder this step, 0 free */
    sched_item_result *res;     /* (max_running) */
    int fail_next;              /* make the next step fail */
    char err[256];              /* first plan inconsistency seen */
    uint64_t steps, tokens;
} harness;

static inline uint64_t h_rand(harness *h) {
    uint64_t z = (h->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double h_unif(harness *h) { return (double)(h_rand(h) >> 11) / 9007199254740992.0; }

/* A small pool by default; tests adjust cfg before h_init. */
static inline void h_config(sched_config *c, int32_t n_blocks, int32_t n_swap) {
    sched_config_default(c);
    c->n_blocks = n_blocks;
    c->n_swap_blocks = n_swap;
    c->block_size = 16;
    c->block_bytes = 16 * 4096;
    c->max_ctx = 2048;
    c->max_requests = 4096;
    c->max_tenants = 64;
    c->max_running = 32;
    c->budget_min = 32;
    c->budget_max = 256;
}

static inline int h_init(harness *h, const sched_config *c, uint64_t seed) {
    memset(h, 0, sizeof(*h));
    h->cfg = *c;
    h->rng = seed;
    h->now_us = 1000000;
    h->us_base = 1000;
    h->us_prefill = 20;
    h->us_decode = 200;
    h->owner = calloc((size_t)c->n_blocks, sizeof(int32_t));
    h->res = calloc((size_t)c->max_running, sizeof(sched_item_result));
    return sched_new(c, &h->s);
}

static inline void h_deinit(harness *h) {
    sched_free(h->s);
    free(h->owner);
    free(h->res);
}

static inline void h_bad(harness *h, const char *what) {
    if (!h->err[0]) strncpy(h->err, what, sizeof(h->err) - 1);
}

/* Check a plan is executable: every item's table covers its positions with
 * valid blocks, and a block an item writes (those of its positions) is in
 * no other item's table. Blocks before an item's pos are only read: with
 * the prefix cache, several items may read one shared block. */
static inline void h_check_plan(harness *h, const sched_plan *p) {
    memset(h->owner, 0, (size_t)h->cfg.n_blocks * sizeof(int32_t));
    int bs = h->cfg.block_size;
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        if (it->n_tokens < 1) h_bad(h, "item with no tokens");
        if ((int64_t)it->n_blocks * bs < (int64_t)it->pos + it->n_tokens) h_bad(h, "table too short");
        for (int32_t b = it->pos / bs; b < it->n_blocks; b++) {
            int32_t id = it->blocks[b];
            if (id < 0 || id >= h->cfg.n_blocks) { h_bad(h, "block id out of range"); continue; }
            if (h->owner[id]) h_bad(h, "block shared");
            h->owner[id] = (int32_t)(uint32_t)it->id + 1;
        }
    }
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        for (int32_t b = 0; b < it->pos / bs && b < it->n_blocks; b++) {
            int32_t id = it->blocks[b];
            if (id < 0 || id >= h->cfg.n_blocks) { h_bad(h, "block id out of range"); continue; }
            if (h->owner[id]) h_bad(h, "block shared");
        }
    }
    if (p->n_items > h->cfg.max_running) h_bad(h, "more items than seats");
}

/* One step: plan, check, "run" it, report. Returns the plan's item count. */
static inline int h_step(harness *h, sched_plan *p) {
    if (sched_step(h->s, h->now_us, p)) { h_bad(h, "sched_step refused"); return 0; }
    h_check_plan(h, p);
    double us = h->us_base;
    for (int32_t i = 0; i < p->n_items; i++) {
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
    return p->n_items;
}

#endif
