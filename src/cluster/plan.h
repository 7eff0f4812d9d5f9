/*
 * plan.h - the GPU sharing planner: from a fleet, models and tenants with
 * their SLO tiers, isolation needs and loads, decide how each GPU is
 * shared (MIG, MPS, time-slicing), size every slice, pack the slices onto
 * GPUs, predict each tenant's latency and explain what cannot be met.
 *
 * Workers. A worker is one `tessera serve` process serving one model to a
 * set of tenants (one copy of the weights, tessera's fair scheduler inside);
 * it runs as one or more identical replicas when one slice cannot carry the
 * load. Tenants are grouped into workers by isolation class:
 *   strict      one worker per (group, model); `group` names a trust domain
 *               and defaults to the tenant itself, so by default every
 *               strict tenant is alone in its worker;
 *   shared      one worker per (tier, model): SLO-bound but trusted tenants;
 *   best-effort one worker per model.
 * Decision tree (mode per tenant group):
 *   strict      -> its own MIG GPU instance. The static profile is the
 *                  smallest whose memory and compute meet the need and the
 *                  SLO. A strict group with several models gets one GI with
 *                  MPS inside (each model an MPS client with an SM share and
 *                  a pinned memory limit) when that takes fewer memory
 *                  slices than one static profile per model, the case where
 *                  the sizes do not fit the fixed profiles well. On GPUs
 *                  without MIG, strict means a whole GPU.
 *   shared      -> an MPS client on a GPU with MIG off: the smallest SM
 *                  percentage meeting the SLO and a pinned memory limit of
 *                  its need; the tier sets its client priority (band 0
 *                  normal, others below normal).
 *   best-effort -> a share of a time-sliced GPU: the smallest share that
 *                  keeps up with the load; latency is reported, not promised.
 * Sizing uses perf.h on the slice (compute scaled by SMs, bandwidth by
 * memory slices or by the MPS share) and tries 1, 2, ... replicas up to
 * max_replicas when the load is too much for the largest slice. TTFT
 * targets are met at perf.h's p99, not the mean; a worker without a TPOT
 * target (best effort aside) is sized for perf.tpot_bound_s where some
 * slice and replica count can meet it. Prices (plan_inst_price) come from
 * the pools and are reported, never used to choose.
 * Headroom. A tenant's `headroom` (>= 1) makes sizing treat its arrival
 * rate as rps x headroom: the queueing model is optimistic near
 * saturation, and `tessera sim` finds the tenants it misses, so the
 * operator (or sim --fix) buys margin for those alone. Only sizing sees it:
 * the worker's `sized` load (replicas, slices, and every estimate in
 * plan_inst: TTFT, p99, TPOT, utilisation, KV, all "as sized") comes from
 * the inflated rates, while `load`, the report's rps, the tenants' cost
 * split and --emit serve's comments keep the real rates.
 * Placement packs the slices (pack.h): first-fit decreasing always, and the
 * exact branch and bound when there are at most exact_limit slices; the
 * plan keeps the better and reports both. Every tenant that cannot be
 * served gets a problem that names it, the constraint that fails, and the
 * fix (a bigger profile, more or other GPUs, a lower load, a looser target).
 *
 * Ownership: plan_input owns its arrays (plan_input_free). A plan borrows
 * its input, which must outlive it, and owns everything else (plan_free).
 * Nothing here does I/O; planio.h reads the YAML and emit.h writes output.
 */
#ifndef TS_PLAN_H
#define TS_PLAN_H

#include <stddef.h>

#include "gpucat.h"
#include "mig.h"
#include "perf.h"
#include "sched.h"

#define PLAN_NAME_MAX SCHED_NAME_MAX /* bytes of a name with its NUL: the names serve takes */
#define PLAN_PATH_MAX 256           /* bytes of a model path with its NUL */
#define PLAN_PROFILE_EXTRA "._+"    /* a MIG profile name's characters besides letters and digits */
#define PLAN_MAX_TYPES 16           /* distinct GPU types in one fleet */
#define PLAN_TEXT_MAX 640           /* bytes of one problem's text */

enum { PLAN_ISO_STRICT = 0, PLAN_ISO_SHARED, PLAN_ISO_BEST_EFFORT };

/* How a worker's instances get their GPU: also the kind of their slice. */
enum {
    PLAN_MODE_MIG = 0,              /* own MIG GPU instance */
    PLAN_MODE_MIG_MPS,              /* MPS client inside a GI shared with its group */
    PLAN_MODE_MPS,                  /* MPS client on a whole GPU */
    PLAN_MODE_TIMESLICE,            /* share of a time-sliced GPU */
    PLAN_MODE_WHOLE,                /* a whole GPU (strict, no MIG on the type) */
};

/* What a GPU of the plan is doing. */
enum { PLAN_GPU_IDLE = 0, PLAN_GPU_MIG, PLAN_GPU_MPS, PLAN_GPU_TIMESLICE, PLAN_GPU_WHOLE };

/* The constraint a problem is about. */
enum {
    PLAN_WHY_MEMORY = 0,            /* the model does not fit any slice */
    PLAN_WHY_TTFT,                  /* TTFT target unreachable even unloaded */
    PLAN_WHY_TPOT,                  /* TPOT target unreachable even unloaded */
    PLAN_WHY_LOAD,                  /* load needs more than max_replicas */
    PLAN_WHY_PROFILE,               /* a pinned MIG profile is too small or absent */
    PLAN_WHY_CAPACITY,              /* the fleet has too few GPUs */
};

/* ---- input ------------------------------------------------------------------ */

typedef struct plan_mig_price {     /* a price that overrides a MIG profile's default */
    char profile[PLAN_NAME_MAX];    /* "3g.40gb", a profile of the pool's GPU */
    double price;                   /* per hour of one such GI, >= 0 */
} plan_mig_price;

typedef struct plan_pool {          /* identical nodes: "8 x A100-80GB, 2 nodes" */
    char name[PLAN_NAME_MAX];       /* nodes are <name>-0, <name>-1, ... */
    const gpucat_gpu *gpu;
    int gpus_per_node;
    int nodes;
    double price_per_hour;          /* one whole GPU of the pool, per hour; 0 = unpriced */
    int n_mig_prices;
    plan_mig_price mig_prices[GPUCAT_MIG_MAX];
} plan_pool;

typedef struct plan_model {
    char name[PLAN_NAME_MAX];
    char path[PLAN_PATH_MAX];       /* GGUF path for --emit serve; "" = models/<name>.gguf */
    perf_model m;
} plan_model;

typedef struct plan_tier {
    char name[PLAN_NAME_MAX];
    double ttft_ms;                 /* time-to-first-token target, 0 = none */
    double tpot_ms;                 /* time-per-output-token target, 0 = none */
    int band;                       /* serve's priority band, 0 first */
    double min_share;               /* serve's minimum share of the band, 0..1 */
    double max_queue_ms;            /* serve's longest queue wait, 0 = unbounded */
} plan_tier;

typedef struct plan_tenant {
    char name[PLAN_NAME_MAX];
    int model;                      /* index into models */
    int tier;                       /* index into tiers */
    int iso;                        /* PLAN_ISO_* */
    char group[PLAN_NAME_MAX];      /* strict trust group; "" = the tenant alone */
    perf_load load;
    char profile[PLAN_NAME_MAX];    /* pinned MIG profile ("2g.20gb"), "" = planner's choice */
    char key_sha256[65];            /* for --emit serve, "" = a placeholder */
    double weight;                  /* serve's share within the band, > 0 */
    double headroom;                /* sizing multiplier on load.rps, 1..100; 0 (a
                                     * zeroed struct) means 1: plan_tenant_headroom */
} plan_tenant;

typedef struct plan_input {
    plan_pool *pools;               /* owned */
    size_t n_pools;
    plan_model *models;             /* owned */
    size_t n_models;
    plan_tier *tiers;               /* owned */
    size_t n_tiers;
    plan_tenant *tenants;           /* owned */
    size_t n_tenants;
    perf_opts perf;
    int max_replicas;               /* instances per worker at most */
    int exact_limit;                /* exact search when slices <= this */
    long exact_budget;              /* branch-and-bound nodes at most */
} plan_input;

/* Empty input with default options; plan_input_free releases it. */
void plan_input_init(plan_input *in);
void plan_input_free(plan_input *in);

/* Append one entry (copied) and return its index, or TS_ERR_NOMEM. */
int plan_input_add_pool(plan_input *in, const plan_pool *p);
int plan_input_add_model(plan_input *in, const plan_model *m);
int plan_input_add_tier(plan_input *in, const plan_tier *t);
int plan_input_add_tenant(plan_input *in, const plan_tenant *t);

/* Add serve's default tiers (core's sched_default_tiers: gold 200 ms TTFT,
 * silver 500 ms, bronze best effort with a 30 s queue limit). */
int plan_input_default_tiers(plan_input *in);

/* Index of the entry with that name, or -1. */
int plan_model_find(const plan_input *in, const char *name);
int plan_tier_find(const plan_input *in, const char *name);

/* The factor sizing multiplies t's rps by: t->headroom, or 1 when unset (0). */
double plan_tenant_headroom(const plan_tenant *t);

/* A DNS-1123 label from s into out (cap bytes): lower case, runs of
 * anything but letters and digits as one '-', none at either end; "w" when
 * s has no letter or digit. Names that differ only in case or punctuation
 * give the same label: callers that need distinct ones check. */
void plan_dns_label(char *out, size_t cap, const char *s);

const char *plan_iso_name(int iso);     /* "strict", "shared", "best-effort" */
const char *plan_mode_name(int mode);   /* "mig", "mig+mps", "mps", "timeslice", "whole" */
const char *plan_why_name(int why);     /* "memory", "ttft", "tpot", "load", "profile", "capacity" */

/* ---- the plan --------------------------------------------------------------- */

typedef struct plan_node {
    char name[PLAN_NAME_MAX + 16];  /* <pool>-<i> */
    int pool;
    size_t first_gpu;               /* its GPUs are gpus[first_gpu .. first_gpu + n_gpus) */
    int n_gpus;
} plan_node;

typedef struct plan_gpu {
    int node;                       /* index into nodes */
    int index;                      /* index on its node: nvidia-smi -i, CUDA_VISIBLE_DEVICES */
    int type;                       /* index into plan.types */
    int mode;                       /* PLAN_GPU_* */
    int n_gi;
    mig_inst gi[MIG_MAX_INSTANCES]; /* MIG layout in creation order (-cgi order) */
    double share_pct;               /* MPS / time-slicing: shares given, percent */
    double mem_alloc;               /* bytes given to slices */
    double mem_need;                /* bytes the instances need */
} plan_gpu;

typedef struct plan_slice {         /* what one GPU gives: a GI, a share, a whole GPU */
    int mode;                       /* PLAN_MODE_* */
    size_t first_inst;              /* its instances: insts[first_inst .. + n_inst) */
    int n_inst;
    int gpu;                        /* index into gpus, -1 = not placed */
    int gi_id;                      /* MIG modes: GI profile id on the placed GPU */
    int gi_start;                   /* MIG modes: first memory slice */
    double pct;                     /* MPS / time-slicing: share of the GPU, percent */
    double mem_alloc;               /* bytes: the GI's memory, the share's limit, the GPU's */
} plan_slice;

typedef struct plan_inst {          /* one process: a replica of a worker */
    int worker;
    int replica;                    /* 0 .. worker's replicas - 1 */
    size_t slice;
    double pct;                     /* MPS thread percentage inside its slice (100 = all) */
    double mem_limit;               /* bytes: pinned limit (MPS) or the slice's memory */
    perf_est est;                   /* on the GPU type it was placed on */
} plan_inst;

typedef struct plan_worker {
    char name[PLAN_NAME_MAX + 16];  /* DNS-1123 label: k8s object, file name */
    int model;
    int iso;
    int mode;                       /* PLAN_MODE_* */
    int tier;                       /* its tenants' most urgent tier (lowest band) */
    size_t *tenants;                /* owned; indices into input tenants */
    size_t n_tenants;
    perf_load load;                 /* all its tenants together, at their real rates */
    perf_load sized;                /* the same with each rate x its tenant's headroom:
                                     * what sizing and insts' est use; == load when no
                                     * tenant sets a headroom */
    double ttft_s, tpot_s;          /* strictest targets of its tenants, 0 = none */
    double tpot_sized_s;            /* TPOT its slices were sized for: tpot_s, else the
                                     * default bound (perf.tpot_bound_s) where it was
                                     * reachable; 0 = none */
    int replicas;
    size_t first_inst;              /* its instances: insts[first_inst .. + replicas) */
} plan_worker;

typedef struct plan_result {        /* per tenant */
    int worker;                     /* -1 when not served */
    int ok;                         /* placed and meeting its targets */
    double ttft_s, tpot_s;          /* predicted at its worker's sized load (TTFT: the mean) */
    double ttft_p99_s;              /* the PERF_TTFT_Q quantile, checked against the target */
} plan_result;

typedef struct plan_problem {
    int tenant;                     /* index into input tenants, -1 = the fleet */
    int why;                        /* PLAN_WHY_* */
    char text[PLAN_TEXT_MAX];       /* "tenant 'x': <constraint>; fix: <what would>" */
} plan_problem;

typedef struct plan {
    const plan_input *in;           /* borrowed */
    const gpucat_gpu *types[PLAN_MAX_TYPES];    /* distinct GPU types, fleet order */
    size_t n_types;
    plan_node *nodes;
    size_t n_nodes;
    plan_gpu *gpus;
    size_t n_gpus;
    plan_worker *workers;
    size_t n_workers;
    plan_slice *slices;
    size_t n_slices;
    plan_inst *insts;
    size_t n_insts;
    plan_result *results;           /* [in->n_tenants] */
    plan_problem *problems;
    size_t n_problems;
    char **notes;                   /* advice that is not a failure */
    size_t n_notes;
    /* Placement. */
    int exact_ran;                  /* 1 if the exact search ran */
    int exact_proven;               /* it finished: its answer is optimal */
    long exact_nodes;
    int heuristic_gpus;             /* GPUs first-fit decreasing used */
    int exact_gpus;                 /* GPUs the exact search used */
    size_t heuristic_unplaced;      /* slices first-fit decreasing left without a GPU */
    size_t exact_unplaced;          /* slices the exact search left without a GPU */
    int used_exact;                 /* the plan is the exact search's */
    int lower_bound;                /* GPUs no packing can go below */
    double lower_frac;              /* the same before rounding */
    /* Totals over placed slices. */
    int gpus_used;
    double mem_alloc, mem_need;     /* bytes */
    double mem_capacity;            /* bytes of the GPUs used */
    int feasible;                   /* every tenant served within its targets */
} plan;

/* Plan in for every tenant. On success (which includes an infeasible plan:
 * see p->feasible and p->problems) returns 0 and *p owns its memory;
 * TS_ERR_INVAL for inconsistent input (an index out of range, no pools),
 * TS_ERR_NOMEM. */
int plan_build(const plan_input *in, plan *p);

/* Release what p owns; safe on a zeroed plan. */
void plan_free(plan *p);

/* The GPU type a slice was placed on, or NULL. */
const gpucat_gpu *plan_slice_type(const plan *p, const plan_slice *s);

/* Name of a slice's profile ("3g.40gb"), "" for non-MIG slices. */
const char *plan_slice_profile(const plan *p, const plan_slice *s);

/* The perf_slice instance i runs on, exactly as sizing computed it: a MIG
 * GI, an MPS share of a GI (mig+mps), an MPS or time-slice share of a GPU,
 * or a whole GPU. A share keeps the whole memory of what it shares (MPS
 * limits SMs; the pinned limit is i->mem_limit). Returns 0, or
 * TS_ERR_INVAL when i's slice is not placed or names no known profile. */
int plan_inst_slice(const plan *p, const plan_inst *i, perf_slice *out);

/* Price per hour of instance i: its pool's price_per_hour for a whole GPU;
 * for a MIG GI the pool's mig_prices entry for its profile, else the GPU's
 * price x compute slices / 7; for an MPS client of a GI, the GI's price x
 * its pct / the sum of the pcts of the GI's clients (they pay the whole
 * GI between them, even when their shares sum below 100); GPU price x
 * pct / 100 for MPS and time-slice shares. 0 when unplaced or unpriced. */
double plan_inst_price(const plan *p, const plan_inst *i);

/* Tenant t's part of its worker: its share of the worker's arrivals at the
 * real rates, headroom aside (equal parts when the worker has no load); 0
 * when t is not served. What its cost and its Kueue quota are split by. */
double plan_tenant_share(const plan *p, size_t t);

/* Cost per hour of tenant t: each instance of its worker's price, split by
 * the tenant's share of the worker's arrivals at the real rates, headroom
 * aside (equally when the worker has no load). Per request and per 1k
 * tokens follow from its load. */
double plan_tenant_cost(const plan *p, size_t t);

/* The estimate of instance i on its placed slice at its worker's sized
 * load per replica: what sizing computed, recomputed (perf_estimate on
 * plan_inst_slice). Returns 0, or TS_ERR_INVAL when i is not placed. */
int plan_inst_estimate(const plan *p, const plan_inst *i, perf_est *out);

/* Every served tenant's predictions (results' ttft_s, ttft_p99_s, tpot_s)
 * from its worker's first placed instance, so at the sized load; results'
 * worker must be set. */
void plan_predict(plan *p);

/* Sum of plan_inst_price over the placed instances. */
double plan_price(const plan *p);

/* For readers that rebuild a plan (planjson.h) rather than build one. */

/* Fill p's types, nodes and GPUs (all idle) from in's pools: the first
 * pass of plan_build. p must be zeroed; p->in is set. Returns 0,
 * TS_ERR_INVAL (a pool without a GPU, too many types) or TS_ERR_NOMEM. */
int plan_fleet_init(const plan_input *in, plan *p);

/* The load of worker w from its tenants (rates add up; prompt and output
 * are arrival-weighted means; prompt_cv that of the mixture), its sized
 * load (the same with every rate x its tenant's headroom, the mixture
 * weighted by those rates) and its targets (the strictest; none for best
 * effort). */
void plan_worker_load(const plan_input *in, plan_worker *w);

/* From the placed slices and instances: each GPU's mode, shares and
 * memory, then the plan's totals (gpus_used, mem_alloc, mem_need,
 * mem_capacity). MIG layouts (gpu.gi) are not touched. */
void plan_tally(plan *p);

/* Whether the placed slices ask of their GPUs only what can exist: one
 * kind of sharing per GPU (MIG, MPS, time-slicing, or one whole-GPU
 * slice), MPS or time-slice shares of a GPU summing to <= 100%, the
 * slices' memory within the GPU's, and the MPS clients of each MIG+MPS GI
 * at <= 100% together. plan_build's plans always pass. Returns 0;
 * TS_ERR_INVAL with *slice (OUT) the first slice, in slice order, at which
 * one fails and what[0..cap) saying what ("a mps slice on GPU 0 (a-0/0),
 * which slices[1] uses for MIG: ..."); or TS_ERR_NOMEM. */
int plan_slices_check(const plan *p, size_t *slice, char *what, size_t cap);

/* perf_check of instance i's estimate (i->est) on its slice against its
 * worker's targets as sizing applied them: its TTFT target and the TPOT
 * it was sized for (tpot_sized_s), none for a time-sliced worker. Returns
 * PERF_OK or a PERF_FAIL_*, or TS_ERR_INVAL when i is not placed. */
int plan_inst_check(const plan *p, const plan_inst *i);

/* 1 when plan_build would put tenants a and b of in into one worker:
 * the same isolation and model, and the same group (strict; a tenant
 * without one is alone) or tier (shared); else 0. */
int plan_tenants_share_worker(const plan_input *in, size_t a, size_t b);

#endif
