/*
 * fleet_gen.h - the seeded 1,000-GPU fleet of 500 tenants that bench_plan
 * plans and bench_sim simulates: 63 nodes of 8 x A100-80GB and 62 of 8 x
 * H100-80GB, five common models (their published shapes), the three
 * default tiers, and tenants that are mostly on small models, 40% strict,
 * 40% shared, 20% best effort, with loads log-uniform over [lo, hi] req/s,
 * prompts of 128..2027 and outputs of 32..511 tokens.
 *
 * Static inline, as bench_util.h: each bench/NAME.c is its own program.
 */
#ifndef TS_BENCH_FLEET_GEN_H
#define TS_BENCH_FLEET_GEN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cluster/gpucat.h"
#include "cluster/plan.h"

typedef struct fg_rng {
    uint64_t s;
} fg_rng;

static inline uint32_t fg_next(fg_rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}
static inline double fg_uni(fg_rng *r) { return (fg_next(r) + 0.5) / 2147483648.0; } /* 31 bits */
static inline int fg_pick(fg_rng *r, int n) { return (int)(fg_next(r) % (uint32_t)n); }

/* Five common models; the numbers are their published shapes. */
static inline void fg_models(plan_input *in) {
    static const struct {
        const char *name;
        double params, dtype;
        int layers, heads, kv_heads, head_dim, ctx;
    } m[] = {
        {"qwen2-1.5b", 1.54e9, 2, 28, 12, 2, 128, 8192},
        {"mistral-7b", 7.24e9, 2, 32, 32, 8, 128, 8192},
        {"llama-3-8b", 8.03e9, 2, 32, 32, 8, 128, 8192},
        {"llama-2-13b", 13.0e9, 2, 40, 40, 40, 128, 4096},
        {"llama-3-70b-fp8", 70.6e9, 1, 80, 64, 8, 128, 8192},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        plan_model pm;
        memset(&pm, 0, sizeof pm);
        snprintf(pm.name, sizeof pm.name, "%s", m[i].name);
        pm.m = (perf_model){m[i].params, m[i].dtype, 2, m[i].layers, m[i].heads, m[i].kv_heads, m[i].head_dim,
                            m[i].ctx};
        plan_input_add_model(in, &pm);
    }
}

static inline void fg_tiers(plan_input *in) {
    static const plan_tier t[] = {
        {.name = "gold", .ttft_ms = 500, .tpot_ms = 50, .band = 0},
        {.name = "silver", .ttft_ms = 1500, .tpot_ms = 100, .band = 1, .min_share = 0.1},
        {.name = "bronze", .band = 2, .min_share = 0.05},
    };
    for (size_t i = 0; i < 3; i++) plan_input_add_tier(in, &t[i]);
}

/* Tenant i: see the header. */
static inline void fg_tenant(plan_input *in, fg_rng *r, int i, double lo, double hi) {
    static const int model_w[] = {30, 20, 30, 12, 8};
    plan_tenant t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "t%03d", i);
    int x = fg_pick(r, 100), m = 0;
    while (x >= model_w[m]) x -= model_w[m++];
    t.model = m;
    double u = fg_uni(r);
    t.iso = u < 0.4 ? PLAN_ISO_STRICT : u < 0.8 ? PLAN_ISO_SHARED : PLAN_ISO_BEST_EFFORT;
    t.tier = t.iso == PLAN_ISO_BEST_EFFORT ? 2 : fg_pick(r, 2);
    t.load.rps = lo * exp(fg_uni(r) * log(hi / lo));
    t.load.prompt = 128 + fg_pick(r, 1900);
    t.load.output = 32 + fg_pick(r, 480);
    t.weight = 1;
    plan_input_add_tenant(in, &t);
}

/* The whole input: pools, models, tiers and 500 tenants at lo..hi req/s. */
static inline void fg_fleet(plan_input *in, double lo, double hi) {
    plan_input_init(in);
    plan_pool a = {.name = "a100", .gpu = gpucat_find("A100-80GB"), .gpus_per_node = 8, .nodes = 63};
    plan_pool h = {.name = "h100", .gpu = gpucat_find("H100-80GB"), .gpus_per_node = 8, .nodes = 62};
    plan_input_add_pool(in, &a);
    plan_input_add_pool(in, &h);
    in->max_replicas = 1000;
    fg_models(in);
    fg_tiers(in);
    fg_rng r = {12345};
    for (int i = 0; i < 500; i++) fg_tenant(in, &r, i, lo, hi);
}

#endif
