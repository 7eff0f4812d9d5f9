/*
 * sched_int.h - the scheduler's private structures, shared by sched.c (the
 * step), sched_claim.c (claims within a band, short steps) and
 * sched_floor.c (band floors). Nothing outside those files includes it:
 * the contract is sched.h. Functions one of them calls in another carry
 * the prefix sched__; everything else stays static.
 *
 * Lifetimes: struct sched and everything it points at live from sched_new
 * to sched_free. A step (struct step) lives from sched_step to
 * sched_step_done and is cleared whole when the next one begins; its plan
 * points at the scheduler's buffers, sized at sched_new.
 */
#ifndef TS_SCHED_INT_H
#define TS_SCHED_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cost.h"
#include "fq.h"
#include "heap.h"
#include "kv.h"
#include "sched.h"

#define NIL (-1)

/* A policy is a preset of features (sched_new): the public SCHED_FEAT_*
 * bits, and this one above them, which no configuration sets directly. */
enum {
    SCHED__FEAT_FIFO = 1u << 16, /* one queue in arrival order: no bands served in
                                    priority, victims newest first, growth may
                                    evict only newer requests */
};

/* Intrusive lists of request slots. A request has two links: LINK_QUEUE is
 * its place in its tenant's queue or, when swapped out, in its band's swap
 * list (never both at once); LINK_ARRIVAL its place in the arrival queue. */
enum { LINK_QUEUE, LINK_ARRIVAL, LINK_COUNT };

typedef struct slot_link {
    int32_t prev, next;     /* slots, NIL at the ends */
} slot_link;

typedef struct slot_list {
    int32_t head, tail;     /* slots, NIL when empty */
} slot_list;

/* The fields every step reads or writes of each request it runs come
 * first, in two cache lines (the array is aligned to them): a fleet
 * simulation steps a thousand schedulers, and each finds its requests
 * out of cache. */
typedef struct req {
    _Alignas(64) sched_state state;
    int32_t tenant;
    int32_t n_total;        /* tokens known: prompt + generated */
    int32_t n_computed;     /* tokens whose K/V are cached */
    int32_t item;           /* index in the plan this step, NIL if none */
    int32_t run_idx;        /* index in s->run, NIL when not running */
    int32_t n_blocks;
    uint32_t gen;           /* bumped when the slot is reused */
    int32_t *table;         /* (max_blocks) device blocks */
    int64_t first_token_us; /* 0 until its first token */
    int64_t charge;         /* provisional fq charge of this step's item */
    uint64_t decoded_step;  /* step its last decode ran in (short steps' turns) */
    uint64_t arrival_seq;   /* global arrival order */
    int64_t token_us;       /* when its last token was sampled (short steps' TPOT) */
    double engine_us;
    int32_t prompt, max_new, generated;
    int32_t n_charged_in;   /* input tokens charged so far (no double charge on recompute) */
    slot_link link[LINK_COUNT];
    /* the rest: admission, swaps, ends, the prefix cache */
    uint8_t in_use;         /* slot holds a request (live or ended, unpolled) */
    uint8_t started;        /* was admitted once: no queue timeout any more */
    uint8_t cancel_pending; /* cancelled while part of the step in flight */
    sched_reason reason;
    int32_t *host;          /* (max_blocks) host swap slots */
    int32_t n_host;
    uint32_t preemptions;
    int64_t arrival_us;
    uint64_t moved_step;    /* step number of its last swap in or out */
    uint64_t dropped_step;  /* step a claim last left its item out (sched__claim_step) */
    /* prefix cache (sched_cache.c) */
    const int32_t *tokens;  /* (prompt) the caller's, or NULL: not cached */
    uint64_t salt;          /* tenant and cache_salt mixed */
    int32_t n_public;       /* leading tokens of a public prefix */
    int32_t n_reg;          /* table[0 .. n_reg) are cache entries of its chain */
    uint8_t reg_stop;       /* its chain cannot grow (a duplicate, or swapped blocks) */
    int32_t n_match;        /* while it holds no blocks: table[0 .. n_match) is the
                               chain its prompt found (sched__cache_probe) */
    uint64_t match_ver;     /* kv cache_ver + 1 of that look-up; 0: none */
    int32_t n_hit;          /* tokens found cached at its current admission */
    int32_t charged_save;   /* n_charged_in before that admission's hit */
    int32_t first_hit;      /* tokens found cached at its first admission, -1 before it */
} req;
/* sched_prefetch fetches the part before in_use: two lines. */
_Static_assert(offsetof(req, in_use) <= 128, "a step's fields of a request span two cache lines");

/* What a step reads of every tenant (weigh_bands, the short steps) is in
 * its first two cache lines, the array aligned to them: a step walks all
 * of an instance's tenants, a fleet simulation's from out of cache. */
typedef struct tenant {
    _Alignas(64) int band;
    int32_t n_queued;       /* requests in the queue */
    int32_t n_running, n_swapped, kv_blocks;
    int flooding;           /* over its present share, and not yet back under (short steps) */
    int32_t kv_quota;       /* device blocks, INT32_MAX when unlimited */
    int64_t last_work_us;   /* a recent step start with work, or submit; INT64_MIN / 2 = never */
    double prompt_avg;      /* moving average of its prompts' lengths (tokens) */
    uint64_t flood_step;    /* the step flooding was last worked out in */
    int64_t out_units;      /* fq_units of one output token at its weight */
    sched_tenant_cfg cfg;   /* tier and weight end the second line */
    fq_entity fe;
    slot_list queue;        /* WAITING, PREFILLING and PREEMPTED_RECOMPUTE requests */
    sched_tenant_stats st;
} tenant;
_Static_assert(offsetof(tenant, cfg.weight) + sizeof(double) <= 128, "a step's fields of a tenant span two lines");

typedef struct band {
    fq q;
    slot_list swapped;      /* PREEMPTED_SWAPPED requests, oldest first */
    int32_t n_prefilling;   /* PREFILLING requests of this band */
    int64_t pending_tokens; /* prefill tokens still to run for queued requests */
} band;

typedef struct deadline {
    int64_t at_us;
    uint64_t seq;           /* the request's arrival_seq: (at_us, seq) is a total order */
    int32_t slot;
    uint32_t gen;
} deadline;

/* A decode's place in a short step's turns (sched__plan_short_decodes):
 * least recently decoded first, then oldest. */
typedef struct turn {
    uint64_t decoded_step;  /* step its last decode ran in */
    uint64_t arrival_seq;
    int32_t slot;
} turn;

/* Service (weighted tokens) by band for the floors (sched_floor.c). */
typedef struct floor_acct {
    double svc[SCHED_MAX_TIERS];      /* moving sum over ~SCHED_FLOOR_STEPS steps */
    double sum;                       /* the same over all bands */
    double step_svc[SCHED_MAX_TIERS]; /* of the step that ran last */
} floor_acct;

/* One step, from sched_step to sched_step_done. */
typedef struct step {
    sched_plan plan;        /* the plan being built; its arrays are the scheduler's */
    int64_t now_us;         /* time of the step */
    int left;               /* tokens not yet planned: of the step's budget, or of
                               the allowance of the band being served (serve_bands) */
    int used[SCHED_MAX_TIERS];        /* tokens given to each band */
    double w_active[SCHED_MAX_TIERS]; /* weight of each band's tenants with work */
    int32_t n_swapped_in;   /* entries of s->swapped_in */
    int swap_stuck_band;    /* a swapped request of this band could not come back */
    int32_t swap_stuck_tenant; /* ...and its tenant (the first one stuck) */
    int no_victim_above;    /* no TTFT victim below this band was found */
    int claim_band;         /* band of this step's claims (sched__claim_step), or -1 */
    double seats_per_w[SCHED_MAX_TIERS]; /* seats per unit weight among a band's present tenants */
    double seats_most[SCHED_MAX_TIERS];  /* the largest present share of a band, in seats */
    uint8_t short_band[SCHED_MAX_TIERS]; /* bands whose over-share work is held short */
    int short_chunk;        /* an over-share chunk had its floor in this short step */
    double short_us;        /* cap on the step's predicted time for over-share work
                               (sched__short_step), 0 = none */
    uint8_t floor_claim[SCHED_MAX_TIERS]; /* band under its floor: may claim (once) this step */
    uint8_t floor_kept[SCHED_MAX_TIERS];  /* band near its floor: other bands may not preempt it */
    cost_features feat;     /* the batch's features so far (add_item, sched__drop_item):
                               the short steps' predictions, then the cost fit's */
    int in_flight;          /* planned, not yet reported done */
} step;

struct sched {
    sched_config cfg;
    unsigned features;      /* the policy's preset: SCHED_FEAT_* and SCHED__FEAT_* */
    int32_t max_blocks;     /* per request: min(ceil(max_ctx / block_size), n_blocks) */
    sched_tier tiers[SCHED_MAX_TIERS];
    int n_tiers;
    double band_floor[SCHED_MAX_TIERS]; /* each band's floor: its tiers' largest min_share */
    tenant *tenants;        /* (max_tenants) at a cache line, within tenants_mem */
    void *tenants_mem;
    int32_t n_tenants;
    band bands[SCHED_MAX_TIERS];
    req *reqs;              /* (max_requests) at a cache line, within reqs_mem */
    void *reqs_mem;
    int32_t *free_slots;    /* (max_requests) stack */
    int32_t n_free_slots;
    int32_t *tables;        /* (max_requests, max_blocks) */
    int32_t *hosts;         /* (max_requests, max_blocks) */
    slot_list arrivals;     /* queued requests in arrival order (FIFO) */
    int32_t *run;           /* (max_running) running set */
    int32_t n_run;
    int32_t n_queued, n_swapped; /* the tenants' counts, summed */
    kv_pool kv;
    cost_model cost;
    floor_acct floor;
    heap deadlines;         /* of deadline, fixed (max_requests), least (at_us, seq) first */
    sched_end *ends;        /* (max_requests) ring of end events */
    int32_t end_head, n_ends;
    uint64_t next_seq;
    uint64_t steps;
    /* buffers of the step, filled anew by each one */
    sched_item *items;      /* (2 * max_running) */
    sched_copy *swap_out, *swap_in; /* (n_blocks) each */
    sched_preemption *preempted;    /* (max_requests): not (max_running), since a request
                                     * admitted this step may be preempted in it too; each
                                     * request is preempted at most once a step */
    int32_t *swapped_in;    /* (max_running) slots swapped in this step */
    fq_entity **skipped;    /* (max_tenants) tenants set aside while serving a band */
    int32_t *scratch;       /* (max_tenants) for sched_check */
    turn *order;            /* (2 * max_running) decodes held to a short step, in turn
                               order, then the sort's scratch */
    uint8_t *seen;          /* (max(n_blocks, n_swap_blocks)) for sched_check */
    int32_t *occ;           /* (n_blocks) tables holding each block, for sched_check */
    step st;                /* the step being planned or in flight */
};

/* How a fresh request is admitted: within the watermarks, past them for a
 * TTFT at risk, by a claim (sched_claim.c) or by its band's floor
 * (sched_floor.c). */
enum { ADMIT_USUAL, ADMIT_PAST_WATERMARK, ADMIT_CLAIM, ADMIT_FLOOR };

/* Which running requests may be preempted to make room (sched__victim_ok). */
typedef struct victim_filter {
    int above_band;         /* victim's band must be > this (-1: any) */
    int32_t tenant;         /* victim's tenant must be this (-1: any) */
    const struct req *for_req; /* growth of this request: only the victims
                                  eligible_for_growth may yield */
    int for_band;           /* band making room: other bands' kept floors are
                               spared (-1: none) */
    int other_bands;        /* 1: victims only outside for_band (a floor claim) */
} victim_filter;

/* sched.c */
/* Take a request's item out of the plan being built. */
void sched__drop_item(sched *s, step *st, req *r);

/* Count an item into (sign 1) or out of (-1) the batch's cost features.
 * Every term is a whole number, and a sum of live items' terms is at most
 * max_running * max_ctx^2 (an item's n * pos + n (n + 1) / 2 is at most
 * max_ctx^2): 2^42 at 256 seats of 128k positions, below 2^53, where
 * doubles hold whole numbers exactly. So the running sums are the same,
 * in any order, as totalling the plan afresh. */
static inline void sched__feat_add(cost_features *f, const sched_item *it, int sign) {
    if (it->is_prefill) f->prefill_tokens += sign * it->n_tokens;
    else f->decode_seqs += sign;
    f->context_tokens += sign * cost_attended(it->pos, it->n_tokens);
}

/* Plan r's decode, growing its table (sched.c's grow_running); 1 if planned. */
int sched__plan_decode(sched *s, step *st, int32_t slot);
/* Preempt a running request (swap or recompute, see choose_swap). */
void sched__preempt(sched *s, step *st, int32_t slot);
/* Whether running request r passes filter f; the victim among those. */
int sched__victim_ok(const sched *s, const req *r, victim_filter f);
int32_t sched__choose_victim(const sched *s, victim_filter f);

/* sched_claim.c */
int sched__held_by_stuck_swap(const sched *s, const step *st, const tenant *t, int how);
int sched__fair_share_room(sched *s, step *st, const req *r, int32_t want, int below_high);
void sched__claim_step(sched *s, step *st, const tenant *claimant);
int sched__left_out_by_claim(const sched *s, const step *st, const tenant *t);
void sched__short_step(sched *s, step *st);
int32_t sched__short_room(const sched *s, step *st, int32_t pos, int32_t n);
void sched__plan_short_decodes(sched *s, step *st);

/* sched_cache.c */
/* Salt of a request of tenant tn with the caller's salt. */
uint64_t sched__cache_salt(const sched *s, int32_t tn, uint64_t salt);
/* Blocks of r's prompt found cached (kv.h) as a chain from its first
 * block, at most `most`; their ids go to ids[] unless NULL. A look-up
 * only: nothing is referenced. */
int32_t sched__cache_match(sched *s, const req *r, int32_t most, int32_t *ids);
/* sched__cache_match of r's whole cacheable prompt into r's table (r holds
 * no blocks), remembered until the cache's entries change, so that a
 * request held in the queue is not hashed again every step. */
int32_t sched__cache_probe(sched *s, req *r);
/* Add r's newly full, computed prompt blocks to the cache. */
void sched__cache_add(sched *s, req *r);

/* sched_floor.c */
double sched__band_floor(const sched *s, int b);
void sched__floor_weigh(sched *s, step *st);
void sched__floor_count(sched *s, const double svc[SCHED_MAX_TIERS]);
int sched__floor_room(sched *s, step *st, const req *r, int32_t want);

/* The step path's small questions, inline: they are asked per tenant or
 * per item of every step. */

/* A tenant with work within presence_us, so expected back (short steps):
 * last_work_us is refreshed every presence_us / 4 while it has work
 * (weigh_bands), so an idle tenant stays present 3/4 to all of that. */
static inline int sched__present(const sched *s, const step *st, const tenant *t) {
    return st->now_us - t->last_work_us <= s->cfg.presence_us;
}

/* A tenant whose work this step is held to the short step. */
static inline int sched__held_short(const sched *s, const step *st, const tenant *t) {
    return st->short_band[t->band] && t->flooding;
}

#endif
