/*
 * bench/sched.c - cost of one scheduler step under a large multi-tenant load.
 *
 * The load: 1,000 tenants, 10,000 requests waiting and 256 running (the
 * engine's seats all taken), kept stationary: every request that ends is
 * replaced at once by a new arrival from a random tenant. A synthetic
 * executor stands in for the engine (stop tokens at random, a fake clock
 * from a simple step-time model), so nothing but the scheduler is measured:
 * clock_gettime brackets sched_step + sched_step_done only, never the
 * executor, the arrivals or the polling.
 *
 * Both policies run over the same arrival trace (same seed), stepping in
 * turn in one loop so that machine noise falls on both alike:
 * SCHED_POLICY_FAIR (bands, fair queue, watermarks, preemption) and
 * SCHED_POLICY_FCFS (one FIFO, the plain baseline in the same code).
 * Printed: median, p99 and mean microseconds per step for each, their
 * ratio (fair / fcfs, measured in the same run, so a noisy machine moves
 * both), and what the steps did (items, tokens, admissions, preemptions),
 * so that a change in cost can be told from a change in work. Target:
 * fair median under 20 us/step. Asserts nothing.
 *
 * usage: bench_sched [--tenants 1000] [--waiting 10000] [--running 256]
 *                    [--steps 20000] [--seconds 2] [--seed 1] [--tiers]
 *   --tiers: spread tenants over the default gold/silver/bronze tiers
 *            instead of one best-effort band.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "sched.h"

typedef struct opts {
    int tenants, waiting, running, steps, tiers;
    double seconds;
    uint64_t seed;
} opts;

typedef struct result {
    double p50, p99, mean, max;     /* us per step */
    int steps;
    double items, tokens, prefill_items, preempted, swaps, running, waiting; /* per step */
    uint64_t ended, rejected;
} result;

static uint64_t rng_next(uint64_t *s) {     /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_unif(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }
static int rng_in(uint64_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1)); }

static double now_us(void) { return clk_mono_s() * 1e6; }

/* One arrival from the trace. A rejected one (bronze's predicted wait with
 * --tiers) is counted and retried from another random tenant, so that the
 * number of requests stays constant. */
static void arrive(sched *s, int64_t t, uint64_t *rng, int n_tenants, uint64_t *rejected) {
    for (int tries = 0; tries < 64; tries++) {
        int tn = (int)(rng_next(rng) % (uint64_t)n_tenants);
        int prompt = rng_in(rng, 32, 512), max_new = rng_in(rng, 16, 256);
        sched_id id;
        sched_reason why;
        if (!sched_submit(s, t, tn, prompt, max_new, &id, &why)) return;
        (*rejected)++;
    }
}

/* One scheduler under load, with its own trace generator and fake clock. */
typedef struct inst {
    sched *s;
    int n_tenants;
    uint64_t rng;
    int64_t t;                  /* fake clock, us */
    sched_item_result *ir;      /* (max_running) */
    double *lat;                /* (steps) us per measured step */
    result r;
} inst;

static int inst_init(inst *in, const opts *o, int policy) {
    memset(in, 0, sizeof(*in));
    sched_config c;
    sched_config_default(&c);
    c.policy = policy;
    c.block_size = 16;
    c.block_bytes = 16 * 2 * 32 * 4096 * 2.0;   /* a 7B-class model in f16 */
    c.max_ctx = 1024;
    c.max_running = o->running;
    c.max_tenants = o->tenants;
    c.max_requests = o->waiting + o->running + 2048;
    /* Room for every seat's longest request (the seats, not the pool, are
     * the usual limit), and a swap space of a quarter of that. */
    c.n_blocks = o->running * 40;
    c.n_swap_blocks = c.n_blocks / 4;
    c.budget_min = 64;
    c.budget_max = 512;
    if (sched_new(&c, &in->s)) return 1;
    sched *s = in->s;
    int tier_be = -1;
    if (o->tiers) {
        sched_tiers_default(s);
    } else {
        sched_tier be = {"best-effort", 0, 0, 0, 0.0, 0};
        tier_be = sched_tier_add(s, &be);
    }
    in->rng = o->seed;  /* the same trace for both policies */
    in->n_tenants = o->tenants;
    for (int i = 0; i < o->tenants; i++) {
        sched_tenant_cfg tc;
        memset(&tc, 0, sizeof(tc));
        snprintf(tc.name, sizeof(tc.name), "tenant-%d", i);
        tc.tier = o->tiers ? i % 3 : tier_be;
        tc.weight = 1 + (double)(rng_next(&in->rng) % 4);
        if (sched_tenant_add(s, &tc) < 0) return 1;
    }
    in->t = 1000000;
    for (int i = 0; i < o->waiting + o->running; i++) arrive(s, in->t, &in->rng, in->n_tenants, &in->r.rejected);
    in->ir = calloc((size_t)c.max_running, sizeof(*in->ir));
    in->lat = malloc((size_t)o->steps * sizeof(double));
    return !in->ir || !in->lat;
}

/* One step; its scheduler time is recorded when measure is set. */
static void inst_step(inst *in, int measure) {
    sched *s = in->s;
    result *res = &in->r;
    sched_plan p;
    double t0 = now_us();
    sched_step(s, in->t, &p);
    double t1 = now_us();
    /* The executor: fake step time, stop tokens with probability 1/128. */
    double us = 2000;
    for (int32_t i = 0; i < p.n_items; i++) {
        us += p.items[i].is_prefill ? 20.0 * p.items[i].n_tokens : 100.0;
        in->ir[i].finished = p.items[i].sample && rng_unif(&in->rng) < 1.0 / 128;
    }
    in->t += (int64_t)us;
    sched_result r = {in->ir, p.n_items, us, (p.n_swap_in + p.n_swap_out) ? 50.0 : 0.0, 0};
    double t2 = now_us();
    sched_step_done(s, in->t, &r);
    double t3 = now_us();
    sched_end ev;
    while (sched_poll_end(s, &ev)) {
        res->ended++;
        arrive(s, in->t, &in->rng, in->n_tenants, &res->rejected); /* stationary load */
    }
    if (!measure) return;
    in->lat[res->steps++] = (t1 - t0) + (t3 - t2);
    sched_stats ss;
    sched_stats_get(s, &ss);
    res->items += p.n_items;
    res->tokens += p.n_tokens;
    for (int32_t i = 0; i < p.n_items; i++) res->prefill_items += p.items[i].is_prefill;
    res->preempted += p.n_preempted;
    res->swaps += p.n_swap_out ? 1 : 0;
    res->running += ss.running;
    res->waiting += ss.queued;
}

static void inst_finish(inst *in) {
    result *res = &in->r;
    int n = res->steps;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += in->lat[i];
    qsort(in->lat, (size_t)n, sizeof(double), bu_cmp_double);
    res->p50 = in->lat[n / 2];
    res->p99 = in->lat[(int)(0.99 * (n - 1))];
    res->max = in->lat[n - 1];
    res->mean = sum / n;
    res->items /= n;
    res->tokens /= n;
    res->prefill_items /= n;
    res->preempted /= n;
    res->swaps /= n;
    res->running /= n;
    res->waiting /= n;
    free(in->ir);
    free(in->lat);
    sched_free(in->s);
}

static void print_result(const char *name, const result *r) {
    printf("%-5s  median %6.2f us  p99 %6.2f us  mean %6.2f us  max %7.1f us   (%d steps)\n", name, r->p50, r->p99,
           r->mean, r->max, r->steps);
    printf("       per step: %.1f items (%.2f prefill), %.1f tokens, %.3f preemptions, %.3f steps with swap-out;"
           " running %.1f, waiting %.1f; %llu ended, %llu rejected\n",
           r->items, r->prefill_items, r->tokens, r->preempted, r->swaps, r->running, r->waiting,
           (unsigned long long)r->ended, (unsigned long long)r->rejected);
}

int main(int argc, char **argv) {
    opts o = {1000, 10000, 256, 20000, 0, 2.0, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tiers")) { o.tiers = 1; continue; }
        if (!v) goto usage;
        if (!strcmp(a, "--tenants")) o.tenants = atoi(v);
        else if (!strcmp(a, "--waiting")) o.waiting = atoi(v);
        else if (!strcmp(a, "--running")) o.running = atoi(v);
        else if (!strcmp(a, "--steps")) o.steps = atoi(v);
        else if (!strcmp(a, "--seconds")) o.seconds = atof(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else goto usage;
        i++;
    }
    if (o.tenants < 1 || o.waiting < 0 || o.running < 1 || o.steps < 1) goto usage;
    printf("scheduler step: %d tenants (%s), %d waiting, %d running, stationary; us per sched_step + "
           "sched_step_done\n",
           o.tenants, o.tiers ? "gold/silver/bronze" : "one best-effort band", o.waiting, o.running);
    /* The two policies step in turn, so that the machine's noise falls on
     * both alike; the first 1000 steps of each are warm-up. */
    inst fair, fcfs;
    if (inst_init(&fair, &o, SCHED_POLICY_FAIR) || inst_init(&fcfs, &o, SCHED_POLICY_FCFS)) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    for (int i = 0; i < 1000; i++) {
        inst_step(&fair, 0);
        inst_step(&fcfs, 0);
    }
    double t_start = now_us();
    while (fair.r.steps < o.steps && (o.seconds <= 0 || now_us() - t_start < o.seconds * 1e6)) {
        inst_step(&fair, 1);
        inst_step(&fcfs, 1);
    }
    inst_finish(&fair);
    inst_finish(&fcfs);
    print_result("fair", &fair.r);
    print_result("fcfs", &fcfs.r);
    printf("fair / fcfs: median %.2fx, p99 %.2fx, mean %.2fx   (target: fair median < 20 us)\n",
           fair.r.p50 / fcfs.r.p50, fair.r.p99 / fcfs.r.p99, fair.r.mean / fcfs.r.mean);
    return 0;
usage:
    fprintf(stderr, "usage: %s [--tenants N] [--waiting N] [--running N] [--steps N] [--seconds S] [--seed N] "
                    "[--tiers]\n", argv[0]);
    return 2;
}
