/*
 * sched.h - the multi-tenant scheduler: at every engine step, which
 * tenants' tokens run.
 *
 * Pure policy: no I/O, no threads, no clock (time is the now_us argument),
 * no allocation after sched_new, deterministic for the same calls. The live
 * server and the simulator drive this same code.
 *
 * The loop it expects, from one thread:
 *     sched_submit / sched_cancel       as requests arrive or leave
 *     sched_step(now, &plan)            what to run this step
 *     ... the executor copies plan.swap_out, then plan.swap_in, then runs
 *         the forward pass over plan.items and samples ...
 *     sched_step_done(now, &result)     what happened
 *     sched_poll_end(&ev)               requests that ended, each once
 *
 * Model. A tier is a priority band (lower number served first) with TTFT and
 * TPOT targets, a minimum share of the service while backlogged (a floor
 * that higher bands' floods cannot take; sched_floor.c says exactly what is
 * held), and a maximum queue wait. A tenant belongs to one tier and has a
 * weight and quotas (KV blocks, running and queued requests). A request
 * holds counts, not tokens (but for a read-only reference to its prompt's
 * for the prefix cache, below): the executor keeps each request's token ids
 * (prompt, then generated) and the plan says which slice of them to feed:
 *     n_total     tokens known (prompt + generated so far)
 *     n_computed  tokens whose K/V are in the cache
 * An item runs tokens [n_computed, n_computed + n) of the request; when that
 * reaches n_total the executor samples one new token from the last row.
 * Prefill is n_total - n_computed > 1, decode is exactly 1: the same path.
 *
 * States: WAITING -> PREFILLING -> DECODING -> FINISHED, with
 * PREEMPTED_SWAPPED (K/V copied to host, comes back by swap-in) and
 * PREEMPTED_RECOMPUTE (K/V dropped, requeued at the head of its tenant's
 * queue to prefill prompt + generated again), and the ends CANCELLED and
 * FAILED(reason). Every accepted request ends exactly once: the one function
 * that ends a request queues an end event and refuses a second end.
 *
 * Policy, in one step (details at each function in sched.c):
 *  1. queued requests past their tier's max queue wait fail (timeout);
 *  2. the token budget adapts so the predicted step time meets the
 *     strictest TPOT target among running requests, and stays under a
 *     quarter of the strictest TTFT target of a band with work (a new
 *     arrival waits for the step in flight, then its own), within
 *     [budget_min, budget_max] (cost model);
 *  3. every decoding request gets its token; one that needs a new block
 *     when none is free preempts a victim (lowest band, then largest KV,
 *     then newest); but while a band holds a tenant over its share and a
 *     present tenant under it (one with work in the last presence_us), the
 *     over-share tenants' decodes and prefill chunks are split into short
 *     steps, so that a newcomer waits for at most half its own first step
 *     (within a bounded loss of their throughput; sched_claim.c);
 *  4. swapped-out requests come back, highest band first, before new
 *     admissions of the same or a lower band;
 *  5. prefill chunks (chunked prefill) fill the rest of the budget: first
 *     each backlogged band's minimum share, then strictly by band; inside
 *     a band the tenant with the smallest virtual counter goes first
 *     (fq.h). A new request is admitted only while the KV pool is under
 *     its watermarks (kv.h) and its tenant under its quotas; a request of
 *     a band whose TTFT target is predicted to be missed may preempt
 *     running requests of lower bands, and a tenant holding less than its
 *     weighted share of the seats and of the KV pool may preempt the tenant
 *     of its own band furthest over its shares (a flood must not hold every
 *     seat); such a claim passes the watermark's hysteresis and another
 *     tenant's stuck swap-in in its band, and its step leaves out the
 *     over-share tenants' items (a request at most every other step) and
 *     admits no more of them, so the claimant's first token is not padded
 *     by the flood's batch; a swapped-out request of a tenant under its
 *     shares may preempt the same way to come back; a band under its
 *     floor (its min_share of the service over the last steps) may seat
 *     one request a step by preempting other bands, and other bands may
 *     not preempt a band near its floor (sched_floor.c);
 *  6. preemption mode: swap when 2 x KV bytes / copy bandwidth is cheaper
 *     than recomputing the context and swap space is free, else recompute.
 * With policy SCHED_POLICY_FCFS all of that collapses to one arrival-order
 * queue with no tiers, shares or fairness: the common baseline. (A policy
 * is a preset of the features below, chosen at sched_new.) There a victim
 * is the newest request, growth evicts only newer ones, and a started
 * prefill that could only preempt itself waits for the older ones, so the
 * oldest request always finishes.
 *
 * Prefix cache (cfg.prefix_cache, requests from sched_submit_prompt).
 * Full blocks of a prompt are content-addressed (pfx.h): the hash of block
 * j chains the hash of block j - 1, a salt and the block's tokens. When a
 * request is admitted (fresh, or again after a recompute preemption), the
 * longest chain of its prompt's full blocks found in the cache becomes the
 * head of its block table, shared, and its first item starts at the first
 * position after them; at most (prompt - 1) / block_size blocks, so at
 * least one prompt token is computed and sampled from, and at most its
 * tenant's quota left less one, so that a block is left to compute it in.
 * The admission is decided before the hit is taken, on the room the pool
 * has then (the watermarks read once): the hit's cache-only blocks count
 * as free until taken, so they are part of what the request asks of that
 * room, and the hit is cut short to leave a block of the room granted
 * rather than keep the request out. A hit never makes a request wait that
 * would be admitted without the cache. As its own prompt
 * blocks fill (the step that computed them done), they are added to the
 * cache. Only full prompt blocks are shared, and no item ever writes below
 * its pos, so a shared block is never written again.
 *  - Salt and scope: a block's salt is by default the tenant's own (its
 *    id), mixed with the request's cache_salt; its scope is the tenant.
 *    An entry matches only within its scope, compared exactly: the salt
 *    is a 64-bit hash of a client's string, which a client could forge to
 *    equal another tenant's, the scope is not. So tenants never share a
 *    block and none can learn from a fast first token that another sent a
 *    prompt. Full blocks inside the prompt's declared public prefix
 *    (n_public, from the model's config) take one public salt and the
 *    public scope instead: those are shared by every tenant.
 *  - Blocks and charging: a shared block is referenced by each table that
 *    holds it and counts once in the pool's usage (the watermarks); each
 *    tenant is charged fully for every block of its requests' tables,
 *    shared or not (kv_blocks, quotas, shares), so a hit never lets a
 *    tenant hold more than it could without the cache, and no tenant's
 *    quota depends on what another tenant does. A block no table holds
 *    stays cached (cache-only), charged to nobody and counted as free: it
 *    is evicted, least recently released first, only when an allocation
 *    finds no plain free block (kv.h), so always before any preemption.
 *  - Work: cached tokens are not prefill work: not charged to the
 *    tenant's virtual counter or its service, not counted as prompt tokens
 *    processed, not in the batch the cost model and budget see; the queue
 *    wait prediction and a tenant's average prompt count only the tokens
 *    not found at submit.
 *  - Preemption: a victim is ranked by the blocks only its table holds
 *    (what preempting it frees), not its table's length. Swap copies a
 *    request's blocks, shared ones too, and brings them back as its own
 *    (no longer shared); recompute releases them and its re-admission
 *    looks the prompt up again (usually its own released blocks, still
 *    cached). So the choice between them counts as recompute work only
 *    the positions past its shared head: a mostly shared request is
 *    recomputed, not swapped.
 * Limits: generated tokens are not cached (the scheduler does not know
 * them); a prompt's blocks are added only once the step computing them is
 * done, so two identical prompts admitted in the same step share nothing.
 * A waiting request's look-up is remembered until an entry is added or
 * evicted, so a queue held back re-hashes its prompts only when the cache
 * changed (on a busy server, most steps). The claim and floor checks of an
 * admission see the hit's cache-only blocks in its tenant's charge, not
 * the shared ones it will be charged for too (slightly permissive).
 */
#ifndef TS_SCHED_H
#define TS_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "cost.h"

#define SCHED_MAX_TIERS 8
#define SCHED_NAME_MAX 48
/* The largest geometry a tessera server gives its scheduler: its
 * configuration (config.c) and model loader (model.c) refuse more, and the
 * simulator refuses a calibration claiming more. */
#define SCHED_MAX_BLOCK_SIZE 1024       /* positions per KV block */
#define SCHED_MAX_SEQS 65536            /* sequences in a step (max_running) */
#define SCHED_MAX_SEQS_PER_TOKEN 4      /* max_running <= this x budget_max */
#define SCHED_DEFAULT_BUDGET_MAX 512    /* tokens in a step unless configured */
#define SCHED_MAX_BUDGET (1 << 20)      /* tokens in a step */
#define SCHED_MAX_CTX (1 << 24)         /* positions of a model's context */
/* Window of the bands' service shares that min_share is held over: a
 * moving sum with this time constant, in steps (sched_floor.c). */
#define SCHED_FLOOR_STEPS 64

/* Why a request was rejected at arrival or failed later:
 *      name             http  message */
#define SCHED_REASON_TABLE(X)                                                        \
    X(NONE,             200, "none")                                                  \
    X(BAD_REQUEST,      400, "prompt must have at least one token and max_tokens must be >= 1") \
    X(UNKNOWN_TENANT,   400, "unknown tenant")                                        \
    X(CONTEXT,          400, "prompt + max_tokens exceeds the model's context length") \
    X(TOO_LARGE,        400, "prompt + max_tokens can never fit in the KV cache")     \
    X(OVER_QUOTA,       429, "prompt + max_tokens exceeds the tenant's KV quota")     \
    X(QUEUE_FULL,       429, "the tenant's queue is full")                            \
    X(PREDICTED_WAIT,   429, "predicted queue wait exceeds the tier's limit")         \
    X(NO_SLOTS,         503, "the server's request table is full")                    \
    X(QUEUE_TIMEOUT,    503, "queued longer than the tier's max queue wait")          \
    X(EXECUTOR,         500, "the engine step failed")

typedef enum sched_reason {
#define SCHED_REASON_ENUM(name, http, msg) SCHED_R_##name,
    SCHED_REASON_TABLE(SCHED_REASON_ENUM)
#undef SCHED_REASON_ENUM
    SCHED_R_COUNT
} sched_reason;

const char *sched_reason_str(sched_reason r);
const char *sched_reason_name(sched_reason r);
int sched_reason_http(sched_reason r);

typedef enum sched_state {
    SCHED_WAITING,
    SCHED_PREFILLING,
    SCHED_DECODING,
    SCHED_PREEMPTED_SWAPPED,
    SCHED_PREEMPTED_RECOMPUTE,
    SCHED_FINISHED,
    SCHED_CANCELLED,
    SCHED_FAILED,
} sched_state;

const char *sched_state_str(sched_state s);

enum { SCHED_POLICY_FAIR = 0, SCHED_POLICY_FCFS = 1 };

/* Heuristics behind named switches, all on by default. */
enum {
    SCHED_FEAT_TTFT_PREEMPT = 1u << 0,   /* higher bands may preempt lower ones */
    SCHED_FEAT_MIN_SHARE = 1u << 1,      /* bands' floors: min_share of the service
                                            (claims, keep) and of each step's budget */
    SCHED_FEAT_ADAPTIVE_BUDGET = 1u << 2, /* budget from the strictest TPOT */
    SCHED_FEAT_SWAP = 1u << 3,           /* swap as a preemption mode */
    SCHED_FEAT_FAIR_SHARE = 1u << 4,     /* a tenant under its share of a band's seats
                                            may preempt one over its share */
    SCHED_FEAT_TTFT_BUDGET = 1u << 5,    /* steps short enough for waiting TTFT targets */
    SCHED_FEAT_RESPONSIVE = 1u << 6,     /* over-share tenants' work split into short steps
                                            while a tenant under its share may arrive */
    SCHED_FEAT_ALL = 0x7f,
};

typedef struct sched_tier {
    char name[SCHED_NAME_MAX];
    int band;               /* 0 first; bands are 0 .. SCHED_MAX_TIERS - 1 */
    uint32_t ttft_ms;       /* time-to-first-token target, 0 = best effort */
    uint32_t tpot_ms;       /* time-per-output-token target, 0 = none */
    double min_share;       /* floor: share of the service while backlogged, 0..1
                               (sched_floor.c); also reserved of each step's budget */
    uint32_t max_queue_ms;  /* longest wait in the queue, 0 = unbounded */
} sched_tier;

typedef struct sched_tenant_cfg {
    char name[SCHED_NAME_MAX];
    int tier;               /* index from sched_tier_add */
    double weight;          /* share within the band, > 0 */
    int32_t max_kv_blocks;  /* 0 = no absolute limit */
    double max_kv_frac;     /* fraction of the pool, 0 = no limit */
    uint32_t max_running;   /* 0 = no limit */
    uint32_t max_queued;    /* 0 = no limit */
} sched_tenant_cfg;

typedef struct sched_config {
    int policy;             /* SCHED_POLICY_*; sched_new refuses any other */
    unsigned features;      /* SCHED_FEAT_*; FCFS reads only SWAP */
    int32_t n_blocks;       /* device KV blocks (the engine's pool) */
    int32_t n_swap_blocks;  /* host swap slots, one block each */
    int block_size;         /* positions per block */
    double block_bytes;     /* bytes per block, for the swap cost */
    double kv_high, kv_low; /* admission watermarks, fractions of n_blocks */
    int32_t max_requests;   /* request slots (queued + running + ended unpolled) */
    int32_t max_tenants;
    int32_t max_running;    /* sequences per step (the engine's max_seqs) */
    int32_t max_ctx;        /* positions per sequence */
    int budget_min;         /* tokens per step, adaptive range */
    int budget_max;
    double w_in, w_out;     /* service weight of an input / output token */
    double cost_seed[4];    /* us: a, per prefill token, per decode seq, per context token */
    double cost_lambda;     /* forgetting factor of the online fit */
    double cost_prior;      /* its prior variance (cost_init's prior_var) */
    double copy_bytes_per_us; /* seed of the swap bandwidth */
    int64_t presence_us;    /* a tenant with work this recently is expected back
                               (SCHED_FEAT_RESPONSIVE); default 5 s */
    int prefix_cache;       /* 1: automatic prefix caching of the prompts submitted
                               with their tokens (see "Prefix cache" above); default 0 */
    uint64_t cache_key;     /* secret mixed into every block's salt, so that no client
                               can predict the cache's hashes (bucket flooding); the
                               caller draws it (the core has no randomness of its own);
                               0: unkeyed, reproducible (tests); default 0 */
} sched_config;

/* Defaults for everything but the pool geometry (n_blocks, block_size,
 * block_bytes, max_ctx), which must then be set. */
void sched_config_default(sched_config *c);

typedef struct sched sched;

int sched_new(const sched_config *c, sched **out);
void sched_free(sched *s);
/* Add a tier; returns its index or a negative code (TS_ERR_INVAL also when
 * the tiers' min_share would sum over 1). */
int sched_tier_add(sched *s, const sched_tier *t);
/* The default tiers, the one definition that the server's config, the
 * planner and sched_tiers_default share: gold (band 0, TTFT 200 ms), silver
 * (band 1, 500 ms, min share 0.10), bronze (band 2, best effort, min share
 * 0.05, max queue 30 s). */
#define SCHED_DEFAULT_TIERS 3
extern const sched_tier sched_default_tiers[SCHED_DEFAULT_TIERS];
/* Add the default tiers to s. */
int sched_tiers_default(sched *s);
/* Add a tenant; returns its id (0, 1, ...) or a negative code. */
int sched_tenant_add(sched *s, const sched_tenant_cfg *t);
/* The fleet's input for the fair queue (fq.h, "Fleet-wide"): the tenant's
 * service on the other replicas of this model, divided by its weight, in
 * FQ_SCALE units (the sum over them of sched_tenant_stats.service *
 * FQ_SCALE / weight). 0, the default, is a replica alone. The caller learns
 * it however it likes (the server: from Redis); the scheduler only orders
 * by it. TS_ERR_INVAL for an unknown tenant. */
int sched_tenant_remote(sched *s, int32_t tenant, uint64_t remote);
/* The tenants queued on the other replicas of this model: queued[i]
 * nonzero when tenant i is queued on at least one, key[i] then its least
 * fair-queue key there (sched_tenant_stats.key). A tenant becoming
 * backlogged here is lifted to no less than the least such key in its band
 * (or the local minimum, if lower): idle time is not banked fleet-wide
 * either (fq.h). All zero, the default, is a replica alone. n_tenants
 * entries each; TS_ERR_INVAL on NULL. */
int sched_fleet_queued(sched *s, const uint8_t *queued, const uint64_t *key);

typedef uint64_t sched_id;   /* slot and generation; never reused for another request */

/* Offer a request. Returns 0 and its id, or 1 (rejected) with *why set;
 * a rejected request leaves no trace but the tenant's rejection count. */
int sched_submit(sched *s, int64_t now_us, int32_t tenant, int32_t prompt_tokens,
                 int32_t max_new_tokens, sched_id *id, sched_reason *why);
/* A prompt for the prefix cache. The tokens are referenced, not copied:
 * they must stay valid and unchanged until the request's end is polled. */
typedef struct sched_prompt {
    const int32_t *tokens;  /* (n) prompt token ids; NULL: not cached */
    int32_t n;              /* prompt tokens */
    uint64_t salt;          /* the request's cache_salt, hashed; 0 = none */
    int32_t n_public;       /* leading tokens that are a declared public prefix:
                               full blocks inside it are shared across tenants */
} sched_prompt;

/* sched_submit with the prompt's tokens, so that its full blocks are
 * looked up in and added to the prefix cache (when cfg.prefix_cache). */
int sched_submit_prompt(sched *s, int64_t now_us, int32_t tenant, const sched_prompt *p,
                        int32_t max_new_tokens, sched_id *id, sched_reason *why);
/* The client left. Ends the request (CANCELLED) now, or at the next
 * sched_step_done if it is part of the step in flight. TS_ERR_INVAL for an
 * unknown or already ended id. */
int sched_cancel(sched *s, int64_t now_us, sched_id id);

typedef struct sched_item {
    sched_id id;
    int32_t tenant;
    int32_t pos;            /* first position to process = n_computed */
    int32_t n_tokens;       /* tokens [pos, pos + n_tokens) */
    uint8_t is_prefill;
    uint8_t sample;         /* 1: sample a token from the last row */
    const int32_t *blocks;  /* block table, valid until sched_step_done */
    int32_t n_blocks;
} sched_item;

typedef struct sched_copy {
    int32_t dev_block;
    int32_t host_slot;
} sched_copy;

typedef struct sched_preemption {
    sched_id id;
    uint8_t swapped;        /* 1 swap, 0 recompute */
} sched_preemption;

/* A step's plan; all arrays belong to the scheduler and stay valid until
 * sched_step_done. */
typedef struct sched_plan {
    sched_item *items;
    int32_t n_items;
    sched_copy *swap_out;   /* device -> host, before swap_in */
    int32_t n_swap_out;
    sched_copy *swap_in;    /* host -> device, before the forward */
    int32_t n_swap_in;
    sched_preemption *preempted;
    int32_t n_preempted;
    int32_t n_failed;       /* requests that failed this step (see sched_poll_end) */
    int32_t budget;         /* token budget used for this step */
    int32_t n_tokens;       /* tokens in the batch */
    double predicted_us;    /* cost model's step time for this batch */
    cost_features feat;     /* the batch's step-time features (cost.h), as predicted */
} sched_plan;

typedef struct sched_item_result {
    uint8_t finished;       /* the sampled token was a stop token */
} sched_item_result;

/* What the executor reports: one entry per plan item, same order. */
typedef struct sched_result {
    const sched_item_result *items;
    int32_t n_items;
    double step_us;         /* measured duration of the step */
    double copy_us;         /* time spent on this step's swap copies */
    int failed;             /* 1: the step failed; its requests fail */
} sched_result;

/* Plan the next step. An empty plan (n_items == 0) means nothing to run.
 * TS_ERR_INVAL if a step is already in flight. */
int sched_step(sched *s, int64_t now_us, sched_plan *plan);
int sched_step_done(sched *s, int64_t now_us, const sched_result *r);

typedef struct sched_end {
    sched_id id;
    int32_t tenant;
    sched_state state;      /* FINISHED, CANCELLED or FAILED */
    sched_reason reason;    /* for FAILED */
    int32_t prompt_tokens;
    int32_t generated;
    int64_t arrival_us;
    int64_t first_token_us; /* 0 if none */
    int64_t end_us;
    uint32_t preemptions;
    double engine_us;       /* step time attributed to this request */
    int32_t cached_tokens;  /* prompt tokens its first admission found cached */
} sched_end;

/* Take the next end event; 1 if one was returned, 0 if none. The request's
 * slot is reused only after its end has been polled. */
int sched_poll_end(sched *s, sched_end *ev);

/* Live state of one request (for the executor and tests); TS_ERR_INVAL
 * for unknown ids. */
typedef struct sched_req_info {
    sched_state state;
    int32_t tenant;
    int32_t n_total, n_computed, prompt_tokens, generated, max_new;
    int32_t n_blocks;
    int32_t n_hit;          /* tokens the prefix cache gave its last admission */
} sched_req_info;
int sched_req_get(const sched *s, sched_id id, sched_req_info *out);

/* Per-tenant counters, cumulative unless noted. */
typedef struct sched_tenant_stats {
    double service;         /* weighted tokens: w_in * input + w_out * output */
    uint64_t vtime;         /* virtual counter (fq units) */
    uint64_t key;           /* fair-queue key: vtime plus the fleet's remote figure */
    uint64_t prompt_tokens; /* input tokens processed (recompute included) */
    uint64_t output_tokens;
    double engine_us;       /* step time attributed by token share */
    uint64_t submitted, completed, cancelled, failed;
    uint64_t rejected[SCHED_R_COUNT];
    uint64_t preempt_swap, preempt_recompute;
    int32_t queued, running, swapped;   /* now */
    int32_t kv_blocks;                  /* now, device: every block of its tables,
                                           shared ones included (see "Prefix cache") */
    uint64_t prefix_query_tokens;       /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_hit_tokens;         /* ... of which found there (not computed) */
} sched_tenant_stats;
int sched_tenant_stats_get(const sched *s, int32_t tenant, sched_tenant_stats *out);

typedef struct sched_stats {
    int32_t n_tenants, n_tiers;
    int32_t kv_free, kv_used, kv_total, swap_used, swap_total;
    int32_t queued, running, swapped;   /* a request still prefilling its prompt counts
                                           in both queued and running */
    int admitting;          /* watermark state */
    int32_t kv_cached;      /* blocks in the prefix cache, referenced or not */
    int32_t kv_cache_only;  /* ... of which cache-only (free, evictable; in kv_free) */
    uint64_t kv_evicted;    /* cache-only blocks evicted by allocations */
    uint64_t steps;
    double cost_theta[4];   /* current fit (a, b, c, d), raw units as cost_theta() */
    double cost_seed[4];    /* where the fit started (sched_config.cost_seed), raw units as cost_theta */
    double cost_err_us;     /* us; the fit's running |residual| scale (cost_err_us) */
    double cost_err_ac;     /* lag-1 autocorrelation of its residuals (cost_err_autocorr) */
    uint64_t cost_steps;    /* step times the fit has used (cost_model.n_obs) */
    double copy_bytes_per_us; /* the fit's host<->device copy bandwidth */
    /* The configuration the scheduler runs with (sched_config), so that a
     * reader of the stats (the server's /admin/models, a simulator
     * calibrating from it) sees the geometry beside the fit. */
    int policy;             /* SCHED_POLICY_* */
    int block_size;         /* positions per block */
    double block_bytes;     /* bytes per block */
    int32_t max_running;    /* sequences per step */
    int32_t max_ctx;        /* positions per sequence */
    int budget_min, budget_max; /* tokens per step */
    double kv_high, kv_low; /* admission watermarks, fractions of kv_total */
} sched_stats;
void sched_stats_get(const sched *s, sched_stats *out);

/* Check every invariant (block conservation, table contents, queue
 * membership, counts); 0 or TS_ERR_KV_BLOCK / TS_ERR_INVAL. O(everything):
 * for tests. */
int sched_check(const sched *s);

/* Start loading what the next step will read, in three stages (0: the
 * scheduler itself; 1: its arrays, which stage 0 found; 2: the running
 * requests, which stage 1 found), for a caller that steps many schedulers
 * in turn (the simulator): it issues stage 0 three schedulers ahead, 1 two
 * ahead, 2 one ahead, so that each load finds the one before it done.
 * Changes nothing. */
void sched_prefetch(const sched *s, int stage);

#endif
