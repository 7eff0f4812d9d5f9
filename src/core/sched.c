/*
 * sched.c - the multi-tenant scheduler; see sched.h for the contract and
 * fq.h for the fairness theory.
 *
 * Memory: every array is sized at sched_new from the configuration
 * (request slots, block tables, heaps, plan buffers, the end-event ring);
 * nothing is allocated afterwards, so a step costs no malloc.
 *
 * Where requests live:
 *   tenant queue   WAITING, PREFILLING, PREEMPTED_RECOMPUTE, in service
 *                  order (a recomputed request goes back to the head)
 *   global queue   the same requests in arrival order (FCFS policy)
 *   running set    PREFILLING and DECODING: the requests holding blocks
 *   band swap list PREEMPTED_SWAPPED, oldest first
 * A tenant is in its band's fair queue exactly when its queue is non-empty.
 */
#include "sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "err.h"
#include "fq.h"
#include "kv.h"

#define NIL (-1)

typedef struct req {
    uint32_t gen;           /* bumped when the slot is reused */
    uint8_t in_use;         /* slot holds a request (live or ended, unpolled) */
    uint8_t started;        /* was admitted once: no queue timeout any more */
    uint8_t cancel_pending; /* cancelled while part of the step in flight */
    sched_state state;
    sched_reason reason;
    int32_t tenant;
    int32_t prompt, max_new, generated;
    int32_t n_total;        /* tokens known: prompt + generated */
    int32_t n_computed;     /* tokens whose K/V are cached */
    int32_t n_charged_in;   /* input tokens charged so far (no double charge on recompute) */
    int32_t *table;         /* (max_blocks) device blocks */
    int32_t n_blocks;
    int32_t *host;          /* (max_blocks) host swap slots */
    int32_t n_host;
    int64_t arrival_us, first_token_us;
    uint64_t arrival_seq;   /* global arrival order */
    uint32_t preemptions;
    double engine_us;
    int32_t prev, next;     /* tenant queue, or band swap list */
    int32_t gprev, gnext;   /* global arrival queue */
    int32_t run_idx;        /* index in s->run, NIL when not running */
    int32_t item;           /* index in the plan this step, NIL if none */
    int64_t charge;         /* provisional fq charge of this step's item */
    uint64_t moved_step;    /* step number of its last swap in or out */
    uint64_t dropped_step;  /* step a claim last left its item out (claim_step) */
} req;

typedef struct tenant {
    sched_tenant_cfg cfg;
    int band;
    int32_t kv_quota;       /* device blocks, INT32_MAX when unlimited */
    fq_entity fe;
    int32_t qhead, qtail;   /* tenant queue */
    int32_t n_queued;       /* requests in the queue */
    int32_t n_running, n_swapped, kv_blocks;
    sched_tenant_stats st;
} tenant;

typedef struct band {
    fq q;
    int32_t swap_head, swap_tail;
    int32_t n_prefilling;   /* PREFILLING requests of this band */
    int64_t pending_tokens; /* prefill tokens still to run for queued requests */
    int32_t n_tenants;      /* tenants whose tier is in this band */
    int used;               /* tokens given to the band in the step being planned */
    double w_active;        /* weights of its tenants with work, this step */
} band;

typedef struct deadline {
    int64_t at_us;
    uint64_t seq;
    int32_t slot;
    uint32_t gen;
} deadline;

struct sched {
    sched_config cfg;
    int32_t max_blocks;     /* per request: min(ceil(max_ctx / block_size), n_blocks) */
    sched_tier tiers[SCHED_MAX_TIERS];
    int n_tiers;
    tenant *tenants;        /* (max_tenants) */
    int32_t n_tenants;
    band bands[SCHED_MAX_TIERS];
    req *reqs;              /* (max_requests) */
    int32_t *free_slots;    /* (max_requests) stack */
    int32_t n_free_slots;
    int32_t *tables;        /* (max_requests, max_blocks) */
    int32_t *hosts;         /* (max_requests, max_blocks) */
    int32_t ghead, gtail;   /* global arrival queue */
    int32_t *run;           /* (max_running) running set */
    int32_t n_run;
    kv_pool kv;
    cost_model cost;
    deadline *dl;           /* (max_requests) min-heap of queue deadlines */
    int32_t n_dl;
    sched_end *ends;        /* (max_requests) ring of end events */
    int32_t end_head, n_ends;
    uint64_t next_seq;
    uint64_t steps;
    int in_flight;
    /* plan buffers */
    sched_item *items;      /* (max_running) */
    int32_t n_items;
    sched_copy *swap_out, *swap_in; /* (n_blocks) each */
    int32_t n_swap_out, n_swap_in;
    sched_preemption *preempted;    /* (max_requests): not (max_running), since a request
                                     * admitted this step may be preempted in it too; each
                                     * request is preempted at most once a step */
    int32_t n_preempted, n_failed;
    int32_t *swapped_in;    /* (max_running) slots swapped in this step */
    int32_t n_swapped_in;
    fq_entity **skipped;    /* (max_tenants) tenants set aside while planning */
    int32_t *scratch;       /* (max_tenants) for sched_check */
    uint8_t *seen;          /* (max(n_blocks, n_swap_blocks)) for sched_check */
    int32_t n_skipped;
    int budget;
    int swap_stuck_band;    /* a swapped request of this band could not come back */
    int32_t swap_stuck_tenant; /* ...and its tenant (the first one stuck) */
    int no_victim_above;    /* this step found no TTFT victim below this band */
    int claim_band;         /* band of this step's claims (claim_step), or -1 */
    cost_features feat;     /* features of the step in flight */
    int64_t now_us;         /* time of the step being planned */
};

/* ---- tables of names ----------------------------------------------------- */

const char *sched_reason_str(sched_reason r) {
    switch (r) {
#define SCHED_REASON_CASE(name, http, msg) case SCHED_R_##name: return msg;
        SCHED_REASON_TABLE(SCHED_REASON_CASE)
#undef SCHED_REASON_CASE
    default: return "unknown";
    }
}

const char *sched_reason_name(sched_reason r) {
    switch (r) {
#define SCHED_REASON_CASE(name, http, msg) case SCHED_R_##name: return #name;
        SCHED_REASON_TABLE(SCHED_REASON_CASE)
#undef SCHED_REASON_CASE
    default: return "UNKNOWN";
    }
}

int sched_reason_http(sched_reason r) {
    switch (r) {
#define SCHED_REASON_CASE(name, http, msg) case SCHED_R_##name: return http;
        SCHED_REASON_TABLE(SCHED_REASON_CASE)
#undef SCHED_REASON_CASE
    default: return 500;
    }
}

const char *sched_state_str(sched_state s) {
    static const char *const names[] = {"waiting", "prefilling", "decoding", "preempted_swapped",
                                        "preempted_recompute", "finished", "cancelled", "failed"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* ---- configuration -------------------------------------------------------- */

void sched_config_default(sched_config *c) {
    memset(c, 0, sizeof(*c));
    c->policy = SCHED_POLICY_FAIR;
    c->features = SCHED_FEAT_ALL;
    c->block_size = 16;
    c->kv_high = 0.85;
    c->kv_low = 0.70;
    c->max_requests = 4096;
    c->max_tenants = 256;
    c->max_running = 64;
    c->budget_min = 64;
    c->budget_max = 512;
    c->w_in = 1.0;
    c->w_out = 2.0;
    /* A CPU-sized seed: 2 ms a step, 50 us a prompt token, 500 us a decoding
     * sequence, 20 ns an attended position. The online fit replaces it
     * within a few dozen steps. */
    c->cost_seed[0] = 2000;
    c->cost_seed[1] = 50;
    c->cost_seed[2] = 500;
    c->cost_seed[3] = 0.02;
    c->cost_lambda = 0.995;
    c->copy_bytes_per_us = 5000; /* 5 GB/s */
}

static int config_ok(const sched_config *c) {
    return c->n_blocks > 0 && c->n_swap_blocks >= 0 && c->block_size > 0 && c->block_bytes >= 0 &&
           c->max_requests > 0 && c->max_tenants > 0 && c->max_running > 0 && c->max_ctx > 0 &&
           c->budget_min > 0 && c->budget_max >= c->budget_min && c->w_in > 0 && c->w_out > 0 &&
           c->kv_low > 0 && c->kv_high >= c->kv_low && c->kv_high <= 1 &&
           c->max_running <= c->budget_max * 4;
}

void sched_free(sched *s) {
    if (!s) return;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) fq_deinit(&s->bands[b].q);
    kv_deinit(&s->kv);
    free(s->tenants); free(s->reqs); free(s->free_slots); free(s->tables); free(s->hosts);
    free(s->run); free(s->dl); free(s->ends); free(s->items); free(s->swap_out); free(s->swap_in);
    free(s->preempted); free(s->swapped_in); free(s->skipped); free(s->scratch);
    free(s->seen);
    free(s);
}

int sched_new(const sched_config *c, sched **out) {
    *out = NULL;
    if (!config_ok(c)) return TS_ERR_INVAL;
    sched *s = calloc(1, sizeof(*s));
    if (!s) return TS_ERR_NOMEM;
    s->cfg = *c;
    /* No request holds more blocks than the pool has (admission refuses
     * one that would need more), so a long context does not size every
     * slot's two tables past the pool: with a 1M-position model and 16384
     * slots that was gigabytes of tables. */
    s->max_blocks = (c->max_ctx + c->block_size - 1) / c->block_size;
    if (s->max_blocks > c->n_blocks) s->max_blocks = c->n_blocks;
    size_t nr = (size_t)c->max_requests, mb = (size_t)s->max_blocks;
    s->tenants = calloc((size_t)c->max_tenants, sizeof(tenant));
    s->reqs = calloc(nr, sizeof(req));
    s->free_slots = malloc(nr * sizeof(int32_t));
    s->tables = malloc(nr * mb * sizeof(int32_t));
    s->hosts = malloc(nr * mb * sizeof(int32_t));
    s->run = malloc((size_t)c->max_running * sizeof(int32_t));
    s->dl = malloc(nr * sizeof(deadline));
    s->ends = malloc(nr * sizeof(sched_end));
    s->items = malloc(2 * (size_t)c->max_running * sizeof(sched_item));
    s->swap_out = malloc((size_t)c->n_blocks * sizeof(sched_copy));
    s->swap_in = malloc((size_t)c->n_blocks * sizeof(sched_copy));
    s->preempted = malloc(nr * sizeof(sched_preemption));
    s->swapped_in = malloc((size_t)c->max_running * sizeof(int32_t));
    s->skipped = malloc((size_t)c->max_tenants * sizeof(fq_entity *));
    s->scratch = malloc((size_t)c->max_tenants * sizeof(int32_t));
    s->seen = malloc((size_t)(c->n_blocks > c->n_swap_blocks ? c->n_blocks : c->n_swap_blocks));
    int bad = !s->tenants || !s->reqs || !s->free_slots || !s->tables || !s->hosts || !s->run ||
              !s->dl || !s->ends || !s->items || !s->swap_out || !s->swap_in || !s->preempted ||
              !s->swapped_in || !s->skipped || !s->scratch || !s->seen;
    for (int b = 0; !bad && b < SCHED_MAX_TIERS; b++) {
        bad |= fq_init(&s->bands[b].q, c->max_tenants) != 0;
        s->bands[b].swap_head = s->bands[b].swap_tail = NIL;
    }
    if (bad || kv_init(&s->kv, c->n_blocks, c->n_swap_blocks, c->kv_high, c->kv_low) ||
        cost_init(&s->cost, c->cost_seed, c->cost_lambda, 1.0, c->copy_bytes_per_us)) {
        sched_free(s);
        return TS_ERR_NOMEM;
    }
    for (int32_t i = 0; i < c->max_requests; i++) {
        s->free_slots[i] = c->max_requests - 1 - i;
        s->reqs[i].table = s->tables + (size_t)i * mb;
        s->reqs[i].host = s->hosts + (size_t)i * mb;
    }
    s->n_free_slots = c->max_requests;
    s->ghead = s->gtail = NIL;
    *out = s;
    return 0;
}

int sched_tier_add(sched *s, const sched_tier *t) {
    if (s->n_tiers >= SCHED_MAX_TIERS || t->band < 0 || t->band >= SCHED_MAX_TIERS ||
        !(t->min_share >= 0 && t->min_share <= 1))
        return TS_ERR_INVAL;
    s->tiers[s->n_tiers] = *t;
    s->tiers[s->n_tiers].name[SCHED_NAME_MAX - 1] = 0;
    return s->n_tiers++;
}

const sched_tier sched_default_tiers[SCHED_DEFAULT_TIERS] = {
    {.name = "gold", .band = 0, .ttft_ms = 200},
    {.name = "silver", .band = 1, .ttft_ms = 500, .min_share = 0.10},
    {.name = "bronze", .band = 2, .min_share = 0.05, .max_queue_ms = 30000},
};

int sched_tiers_default(sched *s) {
    for (size_t i = 0; i < SCHED_DEFAULT_TIERS; i++) {
        int rc = sched_tier_add(s, &sched_default_tiers[i]);
        if (rc < 0) return rc;
    }
    return 0;
}

int sched_tenant_add(sched *s, const sched_tenant_cfg *c) {
    if (s->n_tenants >= s->cfg.max_tenants || c->tier < 0 || c->tier >= s->n_tiers || !(c->weight > 0) ||
        c->max_kv_blocks < 0 || !(c->max_kv_frac >= 0 && c->max_kv_frac <= 1))
        return TS_ERR_INVAL;
    tenant *t = &s->tenants[s->n_tenants];
    memset(t, 0, sizeof(*t));
    t->cfg = *c;
    t->cfg.name[SCHED_NAME_MAX - 1] = 0;
    t->band = s->tiers[c->tier].band;
    t->kv_quota = INT32_MAX;
    if (c->max_kv_blocks > 0) t->kv_quota = c->max_kv_blocks;
    if (c->max_kv_frac > 0) {
        int32_t q = (int32_t)floor(c->max_kv_frac * s->cfg.n_blocks);
        if (q < t->kv_quota) t->kv_quota = q;
    }
    fq_entity_init(&t->fe);
    t->qhead = t->qtail = NIL;
    s->bands[t->band].n_tenants++;
    return s->n_tenants++;
}

/* ---- ids, lists and heaps ------------------------------------------------- */

static sched_id make_id(const sched *s, int32_t slot) {
    return ((sched_id)s->reqs[slot].gen << 32) | (uint32_t)slot;
}

/* The live request an id names, or NULL (unknown, reused, or ended). */
static req *lookup(const sched *s, sched_id id, int32_t *slot_out) {
    uint32_t slot = (uint32_t)id;
    if (slot >= (uint32_t)s->cfg.max_requests) return NULL;
    req *r = &s->reqs[slot];
    if (!r->in_use || r->gen != (uint32_t)(id >> 32) || r->state >= SCHED_FINISHED) return NULL;
    if (slot_out) *slot_out = (int32_t)slot;
    return r;
}

static tenant *tenant_of(sched *s, const req *r) { return &s->tenants[r->tenant]; }
static band *band_of(sched *s, const req *r) { return &s->bands[s->tenants[r->tenant].band]; }
static const sched_tier *tier_of(const sched *s, const req *r) {
    return &s->tiers[s->tenants[r->tenant].cfg.tier];
}
static int32_t blocks_for(const sched *s, int64_t positions) {
    return (int32_t)((positions + s->cfg.block_size - 1) / s->cfg.block_size);
}

/* Tenant queue: membership also drives the band's fair queue and the
 * band's pending prefill count. */
static void tq_link(sched *s, int32_t slot, int at_head) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    r->prev = at_head ? NIL : t->qtail;
    r->next = at_head ? t->qhead : NIL;
    if (r->prev != NIL) s->reqs[r->prev].next = slot; else t->qhead = slot;
    if (r->next != NIL) s->reqs[r->next].prev = slot; else t->qtail = slot;
    if (t->n_queued++ == 0) fq_enqueue(&s->bands[t->band].q, &t->fe);
    band_of(s, r)->pending_tokens += r->n_total - r->n_computed;
    /* FCFS keeps arrival order; a recomputed request goes to the front. */
    r->gprev = at_head ? NIL : s->gtail;
    r->gnext = at_head ? s->ghead : NIL;
    if (r->gprev != NIL) s->reqs[r->gprev].gnext = slot; else s->ghead = slot;
    if (r->gnext != NIL) s->reqs[r->gnext].gprev = slot; else s->gtail = slot;
}

static void tq_unlink(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    if (r->prev != NIL) s->reqs[r->prev].next = r->next; else t->qhead = r->next;
    if (r->next != NIL) s->reqs[r->next].prev = r->prev; else t->qtail = r->prev;
    if (r->gprev != NIL) s->reqs[r->gprev].gnext = r->gnext; else s->ghead = r->gnext;
    if (r->gnext != NIL) s->reqs[r->gnext].gprev = r->gprev; else s->gtail = r->gprev;
    r->prev = r->next = r->gprev = r->gnext = NIL;
    band_of(s, r)->pending_tokens -= r->n_total - r->n_computed;
    if (--t->n_queued == 0) fq_dequeue(&s->bands[t->band].q, &t->fe);
}

static int in_tenant_queue(const req *r) {
    return r->state == SCHED_WAITING || r->state == SCHED_PREFILLING ||
           r->state == SCHED_PREEMPTED_RECOMPUTE;
}

/* Move a queued request to just behind its tenant's started prefills.
 * PREFILLING requests must stay a prefix of the tenant queue: serve_band
 * plans only the first unplanned request, so a fresh one ahead of a started
 * prefill hides it whenever admission is closed, and started prefills that
 * never run never free their blocks (admission then never reopens).
 * O(the tenant's started prefills). Counts are untouched. */
static void tq_behind_started(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    if (r->prev != NIL) s->reqs[r->prev].next = r->next; else t->qhead = r->next;
    if (r->next != NIL) s->reqs[r->next].prev = r->prev; else t->qtail = r->prev;
    int32_t after = NIL;
    for (int32_t i = t->qhead; i != NIL && s->reqs[i].state == SCHED_PREFILLING; i = s->reqs[i].next) after = i;
    r->prev = after;
    r->next = after == NIL ? t->qhead : s->reqs[after].next;
    if (r->prev != NIL) s->reqs[r->prev].next = slot; else t->qhead = slot;
    if (r->next != NIL) s->reqs[r->next].prev = slot; else t->qtail = slot;
}

static void swap_list_push(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    band *b = band_of(s, r);
    r->prev = b->swap_tail;
    r->next = NIL;
    if (b->swap_tail != NIL) s->reqs[b->swap_tail].next = slot; else b->swap_head = slot;
    b->swap_tail = slot;
}

static void swap_list_unlink(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    band *b = band_of(s, r);
    if (r->prev != NIL) s->reqs[r->prev].next = r->next; else b->swap_head = r->next;
    if (r->next != NIL) s->reqs[r->next].prev = r->prev; else b->swap_tail = r->prev;
    r->prev = r->next = NIL;
}

static void run_add(sched *s, int32_t slot) {
    s->reqs[slot].run_idx = s->n_run;
    s->run[s->n_run++] = slot;
    tenant_of(s, &s->reqs[slot])->n_running++;
}

static void run_remove(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    int32_t last = s->run[--s->n_run];
    s->run[r->run_idx] = last;
    s->reqs[last].run_idx = r->run_idx;
    r->run_idx = NIL;
    tenant_of(s, r)->n_running--;
}

/* Deadline heap, ordered by (time, sequence). Entries go stale when their
 * request is admitted or ends; they are dropped when they surface. */
static int dl_before(const deadline *a, const deadline *b) {
    return a->at_us < b->at_us || (a->at_us == b->at_us && a->seq < b->seq);
}

static void dl_push(sched *s, deadline d) {
    int32_t i = s->n_dl++;
    while (i > 0 && dl_before(&d, &s->dl[(i - 1) / 2])) {
        s->dl[i] = s->dl[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->dl[i] = d;
}

static void dl_pop(sched *s) {
    deadline last = s->dl[--s->n_dl];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= s->n_dl) break;
        if (c + 1 < s->n_dl && dl_before(&s->dl[c + 1], &s->dl[c])) c++;
        if (!dl_before(&s->dl[c], &last)) break;
        s->dl[i] = s->dl[c];
        i = c;
    }
    if (s->n_dl) s->dl[i] = last;
}

/* Stale entries stay in the heap until their deadline surfaces, so with
 * requests admitted faster than the queue limit the heap would outgrow its
 * max_requests entries. When it is full, keep only the live entries (one
 * per waiting, never-admitted request, the new one not yet pushed: fewer
 * than max_requests) and rebuild; O(n log n), amortised over the pushes
 * that filled it, and deterministic ((time, seq) is a total order). */
static void dl_compact(sched *s) {
    int32_t k = 0;
    for (int32_t i = 0; i < s->n_dl; i++) {
        const deadline *d = &s->dl[i];
        const req *r = &s->reqs[d->slot];
        if (r->in_use && r->gen == d->gen && r->state == SCHED_WAITING && !r->started) s->dl[k++] = *d;
    }
    s->n_dl = 0;
    for (int32_t i = 0; i < k; i++) dl_push(s, s->dl[i]); /* by value; writes only [0, i] */
}

/* ---- ending: the one place a request ends ------------------------------- */

static void release_blocks(sched *s, req *r) {
    tenant *t = tenant_of(s, r);
    kv_free(&s->kv, r->table, r->n_blocks);
    t->kv_blocks -= r->n_blocks;
    r->n_blocks = 0;
}

static void release_host(sched *s, req *r) {
    kv_swap_free(&s->kv, r->host, r->n_host);
    r->n_host = 0;
}

/* Detach a live request from every structure it is in and free what it
 * holds. Its plan item, if any, must already be dropped or done. */
static void detach(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    if (in_tenant_queue(r)) tq_unlink(s, slot);
    if (r->state == SCHED_PREFILLING) band_of(s, r)->n_prefilling--;
    if (r->run_idx != NIL) run_remove(s, slot);
    if (r->state == SCHED_PREEMPTED_SWAPPED) {
        swap_list_unlink(s, slot);
        t->n_swapped--;
    }
    release_blocks(s, r);
    /* Requests only end outside planning or in sched_step_done after the
     * executor's copies, so the host slots are free to go. */
    release_host(s, r);
}

static void end_request(sched *s, int32_t slot, sched_state how, sched_reason why) {
    req *r = &s->reqs[slot];
    if (r->state >= SCHED_FINISHED) return; /* never twice */
    detach(s, slot);
    r->state = how;
    r->reason = why;
    tenant *t = tenant_of(s, r);
    if (how == SCHED_FINISHED) t->st.completed++;
    else if (how == SCHED_CANCELLED) t->st.cancelled++;
    else t->st.failed++;
    sched_end *e = &s->ends[(s->end_head + s->n_ends++) % s->cfg.max_requests];
    *e = (sched_end){make_id(s, slot), r->tenant, how, why, r->prompt, r->generated, r->arrival_us,
                     r->first_token_us, s->now_us, r->preemptions, r->engine_us};
}

int sched_poll_end(sched *s, sched_end *ev) {
    if (!s->n_ends) return 0;
    *ev = s->ends[s->end_head];
    s->end_head = (s->end_head + 1) % s->cfg.max_requests;
    s->n_ends--;
    int32_t slot = (int32_t)(uint32_t)ev->id;
    req *r = &s->reqs[slot];
    if (r->in_use && r->gen == (uint32_t)(ev->id >> 32)) {
        r->in_use = 0;
        r->gen++;
        s->free_slots[s->n_free_slots++] = slot;
    }
    return 1;
}

/* ---- arrival and cancellation -------------------------------------------- */

/* Prediction of the queue wait of a new request of band b: the prefill
 * tokens queued ahead of it in bands up to b, at the rate a full-budget step
 * processes them. Decode work ahead is folded into the step time. */
static double predicted_wait_us(sched *s, int b, int32_t prompt) {
    double ahead = prompt;
    for (int i = 0; i <= b; i++) ahead += (double)s->bands[i].pending_tokens;
    cost_features f = {s->cfg.budget_max, s->n_run, 0};
    double step = cost_predict_us(&s->cost, &f);
    return ahead / s->cfg.budget_max * step;
}

static sched_reason admission_check(sched *s, int32_t tn, int32_t prompt, int32_t max_new) {
    if (tn < 0 || tn >= s->n_tenants) return SCHED_R_UNKNOWN_TENANT;
    tenant *t = &s->tenants[tn];
    const sched_tier *tier = &s->tiers[t->cfg.tier];
    if (prompt < 1 || max_new < 1) return SCHED_R_BAD_REQUEST;
    int64_t len = (int64_t)prompt + max_new;
    if (len > s->cfg.max_ctx) return SCHED_R_CONTEXT;
    int32_t need = blocks_for(s, len);
    if (need > s->cfg.n_blocks) return SCHED_R_TOO_LARGE;
    if (need > t->kv_quota) return SCHED_R_OVER_QUOTA;
    if (t->cfg.max_queued && (uint32_t)t->n_queued >= t->cfg.max_queued) return SCHED_R_QUEUE_FULL;
    if (s->cfg.policy == SCHED_POLICY_FAIR && tier->ttft_ms == 0 && tier->max_queue_ms &&
        predicted_wait_us(s, t->band, prompt) > 1000.0 * tier->max_queue_ms)
        return SCHED_R_PREDICTED_WAIT;
    if (!s->n_free_slots) return SCHED_R_NO_SLOTS;
    return SCHED_R_NONE;
}

int sched_submit(sched *s, int64_t now_us, int32_t tn, int32_t prompt, int32_t max_new, sched_id *id,
                 sched_reason *why) {
    sched_reason rj = admission_check(s, tn, prompt, max_new);
    *why = rj;
    if (rj != SCHED_R_NONE) {
        if (rj != SCHED_R_UNKNOWN_TENANT) s->tenants[tn].st.rejected[rj]++;
        return 1;
    }
    int32_t slot = s->free_slots[--s->n_free_slots];
    req *r = &s->reqs[slot];
    uint32_t gen = r->gen;
    int32_t *table = r->table, *host = r->host;
    memset(r, 0, sizeof(*r));
    *r = (req){.gen = gen, .in_use = 1, .state = SCHED_WAITING, .tenant = tn, .prompt = prompt,
               .max_new = max_new, .n_total = prompt, .table = table, .host = host,
               .arrival_us = now_us, .arrival_seq = s->next_seq++, .prev = NIL, .next = NIL,
               .gprev = NIL, .gnext = NIL, .run_idx = NIL, .item = NIL, .moved_step = UINT64_MAX};
    tq_link(s, slot, 0);
    const sched_tier *tier = tier_of(s, r);
    if (tier->max_queue_ms) {
        if (s->n_dl == s->cfg.max_requests) dl_compact(s);
        dl_push(s, (deadline){now_us + 1000 * (int64_t)tier->max_queue_ms, r->arrival_seq, slot, gen});
    }
    s->tenants[tn].st.submitted++;
    *id = make_id(s, slot);
    return 0;
}

int sched_cancel(sched *s, int64_t now_us, sched_id id) {
    int32_t slot;
    req *r = lookup(s, id, &slot);
    if (!r) return TS_ERR_INVAL;
    if (s->in_flight && (r->item != NIL || r->moved_step == s->steps)) {
        r->cancel_pending = 1; /* the executor is using its blocks */
        return 0;
    }
    s->now_us = now_us;
    end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE);
    return 0;
}

int sched_req_get(const sched *s, sched_id id, sched_req_info *o) {
    uint32_t slot = (uint32_t)id;
    if (slot >= (uint32_t)s->cfg.max_requests) return TS_ERR_INVAL;
    const req *r = &s->reqs[slot];
    if (!r->in_use || r->gen != (uint32_t)(id >> 32)) return TS_ERR_INVAL;
    *o = (sched_req_info){r->state, r->tenant, r->n_total, r->n_computed, r->prompt, r->generated,
                          r->max_new, r->n_blocks};
    return 0;
}

int sched_tenant_stats_get(const sched *s, int32_t tn, sched_tenant_stats *o) {
    if (tn < 0 || tn >= s->n_tenants) return TS_ERR_INVAL;
    const tenant *t = &s->tenants[tn];
    *o = t->st;
    o->vtime = t->fe.vtime;
    o->queued = t->n_queued;
    o->running = t->n_running;
    o->swapped = t->n_swapped;
    o->kv_blocks = t->kv_blocks;
    return 0;
}

void sched_stats_get(const sched *s, sched_stats *o) {
    memset(o, 0, sizeof(*o));
    o->n_tenants = s->n_tenants;
    o->n_tiers = s->n_tiers;
    o->kv_free = s->kv.n_free;
    o->kv_used = kv_used(&s->kv);
    o->kv_total = s->kv.n_blocks;
    o->swap_used = kv_swapped(&s->kv);
    o->swap_total = s->kv.n_swap;
    o->running = s->n_run;
    for (int32_t i = 0; i < s->n_tenants; i++) {
        o->queued += s->tenants[i].n_queued;
        o->swapped += s->tenants[i].n_swapped;
    }
    o->admitting = s->kv.admitting;
    o->steps = s->steps;
    cost_theta(&s->cost, o->cost_theta);
}

/* ---- planning helpers ------------------------------------------------------ */

/* Move n_computed, keeping the band's pending prefill count true. */
static void set_computed(sched *s, req *r, int32_t v) {
    if (in_tenant_queue(r)) band_of(s, r)->pending_tokens -= v - r->n_computed;
    r->n_computed = v;
}

/* Squeeze out items dropped by preemption, keeping order. */
static void compact_items(sched *s) {
    int32_t k = 0;
    for (int32_t i = 0; i < s->n_items; i++) {
        if (s->items[i].n_tokens == 0) continue;
        s->reqs[(uint32_t)s->items[i].id].item = k;
        s->items[k++] = s->items[i];
    }
    s->n_items = k;
}

static void add_item(sched *s, int32_t slot, int32_t n, int *left) {
    req *r = &s->reqs[slot];
    /* Live items never outnumber the seats; dropped ones may pile up. */
    if (s->n_items == 2 * s->cfg.max_running) compact_items(s);
    r->item = s->n_items;
    s->items[s->n_items++] = (sched_item){make_id(s, slot), r->tenant, r->n_computed, n,
                                          r->n_total - r->n_computed > 1 || r->state == SCHED_PREFILLING,
                                          r->n_computed + n == r->n_total, r->table, r->n_blocks};
    band_of(s, r)->used += n;
    *left -= n;
}

/* Charge the prompt positions an item newly covers (generated tokens were
 * charged as output when sampled; recomputed positions were charged once). */
static void charge_input(sched *s, req *r, int32_t n) {
    int32_t end = r->n_computed + n < r->prompt ? r->n_computed + n : r->prompt;
    int32_t newly = end > r->n_charged_in ? end - r->n_charged_in : 0;
    r->charge = newly;
    r->n_charged_in += newly;
    tenant *t = tenant_of(s, r);
    if (newly) fq_charge(&s->bands[t->band].q, &t->fe, s->cfg.w_in * newly, t->cfg.weight);
}

/* Take a request's item out of the plan being built (it was preempted). */
static void drop_item(sched *s, req *r, int *left) {
    if (r->item == NIL) return;
    sched_item *it = &s->items[r->item];
    *left += it->n_tokens;
    band_of(s, r)->used -= it->n_tokens;
    it->n_tokens = 0; /* compacted away at the end of planning */
    if (r->charge) {
        tenant *t = tenant_of(s, r);
        fq_charge(&s->bands[t->band].q, &t->fe, -s->cfg.w_in * r->charge, t->cfg.weight);
        r->n_charged_in -= (int32_t)r->charge;
        r->charge = 0;
    }
    r->item = NIL;
}

typedef struct victim_filter {
    int above_band;         /* victim's band must be > this (-1: any) */
    int32_t tenant;         /* victim's tenant must be this (-1: any) */
    const struct req *for_req; /* growth of this request: only lower bands,
                                  or its own band when newer, may yield */
} victim_filter;

/* Progress guarantee for growth preemption: a growing request may only
 * take blocks from a lower band, or from its own band when the victim
 * arrived after it. Otherwise two large requests of one band take turns
 * evicting each other ("largest KV" always picks the one closest to
 * finishing) and neither ever ends; with this rule the oldest request of
 * the lowest band can never be evicted by growth, so it finishes. It also
 * stops a lower band's prefill from evicting a higher band's request. */
static int eligible_for_growth(const sched *s, const req *victim, const req *grower) {
    int vb = s->tenants[victim->tenant].band, gb = s->tenants[grower->tenant].band;
    return vb > gb || (vb == gb && victim->arrival_seq > grower->arrival_seq);
}

/* Preemption victim: lowest band (largest band number), then largest KV,
 * then newest. FCFS: newest. Requests moved by a copy this step are not
 * eligible (their copies are already in the plan). */
static int32_t choose_victim(const sched *s, victim_filter f) {
    int32_t best = NIL;
    for (int32_t i = 0; i < s->n_run; i++) {
        int32_t slot = s->run[i];
        const req *r = &s->reqs[slot];
        const tenant *t = &s->tenants[r->tenant];
        if (r->moved_step == s->steps || t->band <= f.above_band || (f.tenant >= 0 && r->tenant != f.tenant))
            continue;
        if (f.for_req && r != f.for_req && !eligible_for_growth(s, r, f.for_req)) continue;
        if (best == NIL) { best = slot; continue; }
        const req *b = &s->reqs[best];
        int bb = s->tenants[b->tenant].band;
        int better;
        if (s->cfg.policy == SCHED_POLICY_FCFS) better = r->arrival_seq > b->arrival_seq;
        else if (t->band != bb) better = t->band > bb;
        else if (r->n_blocks != b->n_blocks) better = r->n_blocks > b->n_blocks;
        else better = r->arrival_seq > b->arrival_seq;
        if (better) best = slot;
    }
    return best;
}

/* Swap when moving the KV out and back costs less than recomputing it and
 * there is room on the host; recompute otherwise. */
static int choose_swap(sched *s, const req *r) {
    int32_t keep = blocks_for(s, r->n_computed); /* blocks holding K/V; see preempt */
    if (!(s->cfg.features & SCHED_FEAT_SWAP) || keep > s->kv.n_swap_free || keep == 0)
        return 0;
    double swap = cost_swap_us(&s->cost, s->cfg.block_bytes * keep);
    return swap < cost_recompute_us(&s->cost, r->n_computed);
}

static void preempt(sched *s, int32_t slot, int *left) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    int swap = choose_swap(s, r);
    drop_item(s, r, left);
    run_remove(s, slot);
    if (r->state == SCHED_PREFILLING) band_of(s, r)->n_prefilling--;
    if (swap) {
        /* Only computed positions hold K/V. Blocks grown for this step's
         * item (a decode entering a new block, a prefill chunk) are empty:
         * freed, not copied, so that swap-in (which allocates
         * blocks_for(n_computed) and copies n_host) matches. */
        int32_t keep = blocks_for(s, r->n_computed);
        kv_swap_alloc(&s->kv, keep, r->host);
        r->n_host = keep;
        for (int32_t i = 0; i < keep; i++)
            s->swap_out[s->n_swap_out++] = (sched_copy){r->table[i], r->host[i]};
        if (in_tenant_queue(r)) tq_unlink(s, slot);
        release_blocks(s, r);
        r->state = SCHED_PREEMPTED_SWAPPED;
        r->moved_step = s->steps;
        swap_list_push(s, slot);
        t->n_swapped++;
        t->st.preempt_swap++;
    } else {
        int queued = in_tenant_queue(r);
        release_blocks(s, r);
        set_computed(s, r, 0);
        r->state = SCHED_PREEMPTED_RECOMPUTE;
        r->moved_step = s->steps; /* not readmitted in the step that evicted it */
        if (!queued) tq_link(s, slot, 1);
        tq_behind_started(s, slot);
        t->st.preempt_recompute++;
    }
    r->preemptions++;
    s->preempted[s->n_preempted++] = (sched_preemption){make_id(s, slot), (uint8_t)swap};
}

/* Give a running request blocks to cover `positions`, preempting victims
 * when the pool or its tenant's quota is exhausted (possibly the request
 * itself). Returns 1 if it still runs, 0 if it was preempted or (swapped
 * in this step, no other victim) must wait a step. */
static int grow_running(sched *s, int32_t slot, int32_t positions, int *left) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    int32_t need = blocks_for(s, positions) - r->n_blocks;
    while (need > 0) {
        int over_quota = t->kv_blocks + need > t->kv_quota;
        if (!over_quota && kv_alloc(&s->kv, need, r->table + r->n_blocks) == 0) {
            r->n_blocks += need;
            t->kv_blocks += need;
            return 1;
        }
        victim_filter f = {-1, over_quota ? r->tenant : -1, r};
        int32_t v = choose_victim(s, f);
        if (v == NIL) {
            /* Swapped in this very step: its blocks are the targets of this
             * step's swap-in copies and its host slots their source, so it
             * can be neither swapped out again nor dropped now. It sits the
             * step out (no item); a later step may preempt it. */
            if (r->moved_step == s->steps) return 0;
            v = slot;
        }
        preempt(s, v, left);
        if (v == slot) return 0;
    }
    return 1;
}

/* ---- the step --------------------------------------------------------------- */

/* Fail queued requests past their tier's maximum wait. Started requests
 * (recomputed after a preemption) have had their first token: exempt. */
static void expire_timeouts(sched *s, int64_t now) {
    while (s->n_dl && s->dl[0].at_us <= now) {
        deadline d = s->dl[0];
        dl_pop(s);
        req *r = &s->reqs[d.slot];
        if (!r->in_use || r->gen != d.gen || r->state != SCHED_WAITING || r->started) continue;
        end_request(s, d.slot, SCHED_FAILED, SCHED_R_QUEUE_TIMEOUT);
        s->n_failed++;
    }
}

/* Each band's total weight of tenants with work (queued, running or
 * swapped): the denominator of the seat shares. O(tenants) once a step. */
static void weigh_bands(sched *s) {
    for (int b = 0; b < SCHED_MAX_TIERS; b++) s->bands[b].w_active = 0;
    for (int32_t i = 0; i < s->n_tenants; i++) {
        const tenant *t = &s->tenants[i];
        if (t->n_queued + t->n_running + t->n_swapped > 0) s->bands[t->band].w_active += t->cfg.weight;
    }
}

/* The step's token budget: with running requests that have a TPOT target,
 * the largest budget whose predicted step time meets the strictest one. */
static int compute_budget(sched *s) {
    const sched_config *c = &s->cfg;
    if (c->policy != SCHED_POLICY_FAIR || !(c->features & SCHED_FEAT_ADAPTIVE_BUDGET)) return c->budget_max;
    uint32_t tpot = 0;
    double decodes = 0, ctx = 0;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        uint32_t t = tier_of(s, r)->tpot_ms;
        if (t && (!tpot || t < tpot)) tpot = t;
        if (r->state == SCHED_DECODING) {
            decodes += 1;
            ctx += r->n_total;
        }
    }
    double target = tpot ? 1000.0 * tpot : 0;
    if (c->features & SCHED_FEAT_TTFT_BUDGET)
        for (int i = 0; i < s->n_tiers; i++) {
            const sched_tier *t = &s->tiers[i];
            double q = 1000.0 * t->ttft_ms / 4;
            if (t->ttft_ms && s->bands[t->band].w_active > 0 && (!target || q < target)) target = q;
        }
    if (!target) return c->budget_max;
    int lo = c->budget_min, hi = c->budget_max;
    int extra = cost_budget_for(&s->cost, target, decodes, ctx, 0, 0, hi);
    int b = (int)decodes + (extra > 0 ? extra : 0);
    return b < lo ? lo : b > hi ? hi : b;
}

/* Every decoding request gets its one token (and a block when it crosses
 * into a new one). */
static void plan_decodes(sched *s, int *left) {
    for (int32_t i = 0; i < s->n_run;) {
        int32_t slot = s->run[i];
        req *r = &s->reqs[slot];
        if (r->state != SCHED_DECODING || r->item != NIL) { i++; continue; }
        int32_t before = s->n_preempted;
        if (grow_running(s, slot, r->n_total, left)) add_item(s, slot, 1, left);
        /* A preemption reorders s->run; planned requests have items, so a
         * rescan from the start skips them cheaply. */
        i = s->n_preempted != before ? 0 : i + 1;
    }
}

static int fair_share_room(sched *s, const req *r, int32_t want, int below_high, int *left);

/* Bring swapped-out requests of band b back, oldest first, while blocks,
 * seats and their tenants' quotas allow, a request of a tenant under its
 * shares claiming room if need be (fair_share_room); a stuck one holds
 * back new admissions of its band and lower ones (they would take its
 * blocks), except claims of other tenants in its band (held_by_stuck_swap).
 * Returns the tokens its decodes take. */
static int swap_in_band(sched *s, int b, int *left, int cap) {
    band *bd = &s->bands[b];
    int used = 0;
    for (int32_t slot = bd->swap_head, next; slot != NIL && used < cap; slot = next) {
        req *r = &s->reqs[slot];
        tenant *t = tenant_of(s, r);
        next = r->next;
        if (r->moved_step == s->steps) continue; /* swapped out this very step */
        int decoding = r->n_total - r->n_computed == 1;
        int32_t need = blocks_for(s, decoding ? r->n_total : r->n_computed);
        /* Held back by its own tenant's limits: that must not hold back
         * anyone else, so try the next one. */
        if (t->kv_blocks + need > t->kv_quota || (t->cfg.max_running && (uint32_t)t->n_running >= t->cfg.max_running))
            continue;
        /* A tenant under its shares claims room for a swapped request as
         * for a new one (fair_share_room); otherwise it is stuck. */
        if ((s->n_run >= s->cfg.max_running || s->kv.n_free < need) &&
            !(s->cfg.policy == SCHED_POLICY_FAIR && (s->cfg.features & SCHED_FEAT_FAIR_SHARE) &&
              fair_share_room(s, r, need, 0, left))) {
            /* FCFS has no bands: a stuck swap-in stops every admission. */
            if (s->cfg.policy == SCHED_POLICY_FCFS) s->swap_stuck_band = 0;
            else if (b < s->swap_stuck_band) {
                s->swap_stuck_band = b;
                s->swap_stuck_tenant = r->tenant;
            }
            break;
        }
        kv_alloc(&s->kv, need, r->table);
        r->n_blocks = need;
        t->kv_blocks += need;
        for (int32_t i = 0; i < r->n_host; i++) s->swap_in[s->n_swap_in++] = (sched_copy){r->table[i], r->host[i]};
        swap_list_unlink(s, slot);
        t->n_swapped--;
        r->moved_step = s->steps;
        s->swapped_in[s->n_swapped_in++] = slot;
        run_add(s, slot);
        if (decoding) {
            r->state = SCHED_DECODING;
            add_item(s, slot, 1, left);
            used++;
        } else {
            r->state = SCHED_PREFILLING; /* its next chunk comes through the fair queue */
            bd->n_prefilling++;
            tq_link(s, slot, 1);
        }
    }
    return used;
}

/* Predicted to miss its TTFT target if it waits for room. Room comes back
 * when a running request ends; the soonest that can happen without
 * preemption is the smallest remaining max_tokens among them, one decode
 * step each (a stop token may end one earlier: the estimate errs towards
 * protecting the higher band). */
static int ttft_at_risk(sched *s, const req *r) {
    const sched_tier *tier = tier_of(s, r);
    if (!tier->ttft_ms || r->started) return 0;
    int32_t soonest = INT32_MAX;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *o = &s->reqs[s->run[i]];
        int32_t rest = o->max_new - o->generated + (o->state == SCHED_PREFILLING);
        if (rest < soonest) soonest = rest;
    }
    if (soonest == INT32_MAX) soonest = 0;
    double rem = r->n_total - r->n_computed;
    cost_features prefill = {rem, s->n_run, cost_attended(0, rem)};
    cost_features step = {s->budget, s->n_run, 0};
    double step_us = cost_predict_us(&s->cost, &step);
    double t = (double)(s->now_us - r->arrival_us) + (double)soonest * step_us +
               cost_predict_us(&s->cost, &prefill) + step_us;
    return t > 1000.0 * tier->ttft_ms;
}

enum { ADMIT_USUAL, ADMIT_PAST_WATERMARK, ADMIT_CLAIM };

/* A stuck swap-in closes admission to its band and the ones below, or
 * newcomers would take the blocks it waits for. A claim (fair_share_room)
 * in that band takes its room from tenants over their shares instead, so
 * it passes, unless the stuck request is the claimant's own: that one
 * comes first. Claims in lower bands are held like everything else. */
static int held_by_stuck_swap(const sched *s, const tenant *t, int how) {
    if (t->band != s->swap_stuck_band) return t->band > s->swap_stuck_band;
    return how != ADMIT_CLAIM || s->swap_stuck_tenant == NIL || t == &s->tenants[s->swap_stuck_tenant];
}

/* Blocks a new admission of r may take now (0 when admission is closed). */
static int32_t admit_room(sched *s, const req *r, int how) {
    if (s->n_run >= s->cfg.max_running || held_by_stuck_swap(s, tenant_of(s, r), how)) return 0;
    int bypass_watermark = how != ADMIT_USUAL;
    return bypass_watermark ? s->kv.n_free : kv_admit_room(&s->kv);
}

enum { PF_OK, PF_TENANT, PF_GLOBAL };

/* Seats a tenant is entitled to in its band while the band's tenants with
 * work share the seats by weight: never less than one, since a tenant with
 * any work must be able to run something. */
static double seat_share(const sched *s, const tenant *t) {
    double w = s->bands[t->band].w_active;
    double share = w > 0 ? s->cfg.max_running * t->cfg.weight / w : 1;
    return share < 1 ? 1 : share;
}

/* Blocks of the pool a tenant is entitled to in its band, like its seats. */
static double kv_share(const sched *s, const tenant *t) {
    double w = s->bands[t->band].w_active;
    return w > 0 ? s->kv.n_blocks * t->cfg.weight / w : s->kv.n_blocks;
}

/* A tenant that may take one more seat and `want` more blocks within its
 * shares of its band's seats and KV pool. */
static int under_shares(const sched *s, const tenant *t, int32_t want) {
    return t->n_running + 1 <= seat_share(s, t) && t->kv_blocks + want <= kv_share(s, t);
}

/* How far a tenant is over its shares, relative to them: the larger of
 * the seat and the KV figure. */
static double overshoot(const sched *s, const tenant *u) {
    double seats = seat_share(s, u), kv = kv_share(s, u);
    double a = (u->n_running - seats) / seats, b = kv > 0 ? (u->kv_blocks - kv) / kv : 0;
    return a > b ? a : b;
}

/* The running request of band b whose tenant keeps at least its share of
 * seats, or of KV blocks, without it, and is not behind the claimant in
 * weighted service by more than one service unit; of the tenant
 * furthest over (then its newest request), or NIL. Nobody is taken below
 * both of its shares, so claims converge instead of trading seats. */
static int32_t over_share_victim(const sched *s, int b, const tenant *claimant) {
    int32_t best = NIL;
    double best_over = 0;
    /* The claimant may be ahead by one service unit U, a whole prefill
     * chunk (fq.h): right after paying for its prompts it is ahead of a
     * flood that is charged a few tokens a step, and its next request
     * would otherwise wait many steps for the flood to catch up. VTC's 2U
     * bound allows that much between backlogged tenants anyway. */
    double unit = FQ_SCALE * s->cfg.w_in * s->cfg.budget_max / claimant->cfg.weight;
    int64_t slack = unit < (double)(INT64_MAX / 2) ? (int64_t)unit : INT64_MAX / 2; /* weights near 0 */
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        const tenant *u = &s->tenants[r->tenant];
        /* Not from a tenant further behind the claimant in weighted
         * service than that: the seat rule then works with the fair queue. */
        if (u->band != b || u == claimant || r->moved_step == s->steps ||
            fq_diff(u->fe.vtime, claimant->fe.vtime) < -slack)
            continue;
        if (u->n_running - 1 < seat_share(s, u) && u->kv_blocks - r->n_blocks < kv_share(s, u)) continue;
        double over = overshoot(s, u);
        if (best == NIL || over > best_over ||
            (over == best_over && r->arrival_seq > s->reqs[best].arrival_seq)) {
            best = s->run[i];
            best_over = over;
        }
    }
    return best;
}

/* Isolation inside a band. The fair queue decides who is admitted next but
 * never takes a seat back, so a tenant that flooded the band while others
 * were idle holds every seat and the KV pool, and a tenant arriving later
 * waits for the flood's requests to end. A tenant under its shares of
 * seats and KV blocks may therefore preempt requests of the tenant furthest
 * over its shares, in its own band, until it fits (for a new request:
 * under the high watermark). Returns 1 if it has room then, and may be
 * admitted past the watermark's hysteresis: that pause is for the tenants
 * that filled the pool. Callers check a stuck swap-in first
 * (held_by_stuck_swap), so that nothing is preempted for a refused claim. */
static int fair_share_room(sched *s, const req *r, int32_t want, int below_high, int *left) {
    const tenant *t = tenant_of(s, r);
    /* A claim stops at the claimant's own shares, and victims keep theirs,
     * so claims converge instead of trading the same seats; and there is
     * none for a chunk that its own KV quota would not let it take (it
     * would preempt others for blocks it cannot use). */
    if (!under_shares(s, t, want) || t->kv_blocks + want > t->kv_quota) return 0;
    int32_t v = over_share_victim(s, t->band, t);
    if (v == NIL) return 0; /* nobody holds more than its share: usual rules */
    while (v != NIL && (s->n_run >= s->cfg.max_running || s->kv.n_free < want ||
                        (below_high && kv_used(&s->kv) + want > s->kv.high_blocks))) {
        preempt(s, v, left);
        v = over_share_victim(s, t->band, t);
    }
    return s->n_run < s->cfg.max_running && s->kv.n_free >= want;
}

/* The step that seats a claimant carries its prefill, not the work of the
 * tenants over their shares in its band, so the claimant's first token
 * comes about as fast as if it were alone, instead of after a step padded
 * with the flood's batch. A request is left out at most every other step,
 * and never in the step it was swapped in: claimants arriving step after
 * step must not stop an over-share tenant's running requests (their tokens
 * wait one step at most). From here on the step admits only tenants under
 * their shares (more claimants); the others' prefills wait for a step
 * without a claim. */
static void claim_step(sched *s, const tenant *claimant, int *left) {
    s->claim_band = claimant->band;
    for (int32_t i = 0; i < s->n_run; i++) {
        req *r = &s->reqs[s->run[i]];
        const tenant *u = &s->tenants[r->tenant];
        if (u == claimant || u->band != claimant->band || r->item == NIL || overshoot(s, u) <= 0 ||
            r->moved_step == s->steps || (r->dropped_step && r->dropped_step + 1 == s->steps))
            continue;
        drop_item(s, r, left);
        r->dropped_step = s->steps;
    }
}

static int32_t plan_prefill(sched *s, int32_t slot, int room, int *left, int *why) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    int fresh = r->state != SCHED_PREFILLING;
    int32_t n = r->n_total - r->n_computed;
    if (n > room) n = room;
    *why = PF_GLOBAL;
    if (t->band == s->claim_band && overshoot(s, t) > 0) {
        *why = PF_TENANT; /* a claim step: see claim_step */
        return 0;
    }
    if (fresh && ((t->cfg.max_running && (uint32_t)t->n_running >= t->cfg.max_running) ||
                  r->moved_step == s->steps)) {
        *why = PF_TENANT;
        return 0;
    }
    int bypass = ADMIT_USUAL;
    int32_t avail = s->kv.n_free;
    if (fresh) {
        avail = admit_room(s, r, ADMIT_USUAL);
        int32_t want = blocks_for(s, r->n_computed + n);
        if (avail < want && s->cfg.policy == SCHED_POLICY_FAIR && (s->cfg.features & SCHED_FEAT_TTFT_PREEMPT) &&
            ttft_at_risk(s, r)) {
            /* Make room by preempting lower bands, then skip the watermark:
             * the headroom it keeps is there for exactly this. */
            victim_filter f = {t->band, -1, NULL};
            /* Once a scan found no victim below band b, none appears later
             * in the step for b or any band below it: skip the rescans. */
            while (t->band < s->no_victim_above && (s->n_run >= s->cfg.max_running || s->kv.n_free < want)) {
                int32_t v = choose_victim(s, f);
                if (v == NIL) {
                    s->no_victim_above = t->band;
                    break;
                }
                preempt(s, v, left);
            }
            bypass = ADMIT_PAST_WATERMARK;
            avail = admit_room(s, r, bypass);
        }
        if (avail < want && s->cfg.policy == SCHED_POLICY_FAIR && (s->cfg.features & SCHED_FEAT_FAIR_SHARE) &&
            !held_by_stuck_swap(s, t, ADMIT_CLAIM) && fair_share_room(s, r, want, 1, left)) {
            bypass = ADMIT_CLAIM;
            avail = admit_room(s, r, bypass);
        }
    }
    int32_t quota = t->kv_quota - t->kv_blocks;
    if (avail > quota) avail = quota;
    if (blocks_for(s, r->n_computed + n) - r->n_blocks > avail) {
        int64_t fit = (int64_t)(r->n_blocks + avail) * s->cfg.block_size - r->n_computed;
        n = fit < n ? (int32_t)fit : n;
    }
    if (n < 1 && !fresh) {
        /* A started prefill that needs a block and finds none: like a
         * decode, it preempts (possibly itself). */
        if (!grow_running(s, slot, r->n_computed + 1, left)) return 0;
        int64_t fit = (int64_t)r->n_blocks * s->cfg.block_size - r->n_computed;
        n = r->n_total - r->n_computed;
        if (n > room) n = room;
        if (fit < n) n = (int32_t)fit;
    }
    if (n < 1) {
        if (quota <= 0 && !(fresh && admit_room(s, r, bypass) <= 0)) *why = PF_TENANT;
        return 0;
    }
    int32_t need = blocks_for(s, r->n_computed + n) - r->n_blocks;
    if (need > 0) {
        kv_alloc(&s->kv, need, r->table + r->n_blocks);
        r->n_blocks += need;
        t->kv_blocks += need;
    }
    if (fresh) {
        r->state = SCHED_PREFILLING;
        r->started = 1;
        run_add(s, slot);
        band_of(s, r)->n_prefilling++;
    }
    charge_input(s, r, n);
    add_item(s, slot, n, left);
    if (bypass == ADMIT_CLAIM) claim_step(s, t, left);
    return n;
}

static int32_t first_unplanned(const sched *s, const tenant *t) {
    int32_t slot = t->qhead;
    while (slot != NIL && s->reqs[slot].item != NIL) slot = s->reqs[slot].next;
    return slot;
}

/* Started prefills of band b go on before anything new is admitted: they
 * already hold blocks and were admitted in fair order, and leaving them
 * half done while newcomers start spreads the budget over ever more
 * partial prompts (worse TTFT for all, KV held idle). Admission order. */
static int continue_prefills(sched *s, int b, int *left, int cap) {
    int used = 0;
    for (int32_t i = 0; i < s->n_run && used < cap && *left > 0;) {
        int32_t slot = s->run[i];
        req *r = &s->reqs[slot];
        if (r->state != SCHED_PREFILLING || r->item != NIL || tenant_of(s, r)->band != b) {
            i++;
            continue;
        }
        int32_t before = s->n_preempted, why;
        int room = cap - used < *left ? cap - used : *left;
        used += plan_prefill(s, slot, room, left, &why);
        /* A preemption reorders s->run; planned requests have items, so a
         * rescan from the start skips them. Without one, a request that got
         * nothing (no block) is simply passed. */
        i = s->n_preempted != before ? 0 : i + 1;
    }
    return used;
}

/* Prefill for band b, tenants in fair-queue order, up to cap tokens. */
static int serve_band(sched *s, int b, int *left, int cap) {
    band *bd = &s->bands[b];
    int used = 0, look_further = 16;
    s->n_skipped = 0;
    while (used < cap && *left > 0) {
        fq_entity *e = fq_peek(&bd->q);
        if (!e) break;
        tenant *t = (tenant *)((char *)e - offsetof(tenant, fe));
        int32_t slot = first_unplanned(s, t);
        int why = PF_TENANT;
        int room = cap - used < *left ? cap - used : *left;
        int32_t n = slot == NIL ? 0 : plan_prefill(s, slot, room, left, &why);
        if (n > 0) {
            used += n;
            continue;
        }
        /* Nothing more for this tenant this step: set it aside without
         * touching its counter. When admission is closed for everyone,
         * only started prefills could still move. */
        fq_set_aside(&bd->q, e);
        s->skipped[s->n_skipped++] = e;
        /* Closed for everyone: only started prefills could still move, and
         * tenants with nothing running, which may claim a seat from a
         * tenant over its share (fair_share_room). Look a few tenants
         * further for those, in fair order, without scanning them all. */
        if (why == PF_GLOBAL && bd->n_prefilling == 0 &&
            (!(s->cfg.features & SCHED_FEAT_FAIR_SHARE) || --look_further <= 0))
            break;
    }
    for (int32_t i = 0; i < s->n_skipped; i++) {
        /* A preemption during the pass (a swap-out of its prefilling
         * request) may have emptied a set-aside tenant's queue: it is no
         * longer backlogged and must stay out. */
        tenant *t = (tenant *)((char *)s->skipped[i] - offsetof(tenant, fe));
        if (t->n_queued > 0) fq_restore(&bd->q, s->skipped[i]);
    }
    return used;
}

/* FCFS: one queue in arrival order; the head blocks everyone behind it. */
static void serve_fcfs(sched *s, int *left) {
    /* Once admission is closed nothing behind is admitted, but started
     * prefills behind (admitted while the one ahead was held by its tenant's
     * limits, or requeued) still run: they hold blocks, and idle ones could
     * keep admission closed for good. The walk ends once all were seen. */
    int closed = 0;
    int32_t seen = 0;
    for (int32_t slot = s->ghead, next; slot != NIL && *left > 0; slot = next) {
        next = s->reqs[slot].gnext;
        int started = s->reqs[slot].state == SCHED_PREFILLING;
        if (closed) {
            int32_t n_started = 0;
            for (int b = 0; b < SCHED_MAX_TIERS; b++) n_started += s->bands[b].n_prefilling;
            if (seen >= n_started) break;
        }
        seen += started;
        if (s->reqs[slot].item != NIL || (closed && !started)) continue;
        int why;
        if (plan_prefill(s, slot, *left, left, &why) == 0 && why == PF_GLOBAL) closed = 1;
    }
}

static double band_share(const sched *s, int b) {
    double share = 0;
    for (int i = 0; i < s->n_tiers; i++)
        if (s->tiers[i].band == b && s->tiers[i].min_share > share) share = s->tiers[i].min_share;
    return share;
}

static int band_backlogged(const sched *s, int b) {
    return fq_len(&s->bands[b].q) > 0 || s->bands[b].swap_head != NIL;
}

/* Tokens reserved for band b this step: its minimum share of the budget,
 * less what its decodes already took, and no more than it has to run. */
static int band_reserve(sched *s, int b) {
    double share = band_share(s, b);
    if (share <= 0 || !band_backlogged(s, b)) return 0;
    int reserve = (int)ceil(share * s->budget) - s->bands[b].used;
    int64_t work = s->bands[b].pending_tokens + (s->bands[b].swap_head != NIL ? reserve : 0);
    if (reserve > work) reserve = (int)work;
    return reserve > 0 ? reserve : 0;
}

/* Bands in priority order. Each band may use its reservation plus whatever
 * the bands above left unreserved; what it does not use flows down. The
 * reservations are honoured even when running decodes already fill the
 * budget (a floor is a floor), so such a step may exceed the budget by at
 * most the sum of the shares. */
static void serve_bands(sched *s, int *left) {
    int reserve[SCHED_MAX_TIERS] = {0}, total = 0;
    if (s->cfg.features & SCHED_FEAT_MIN_SHARE)
        for (int b = 0; b < SCHED_MAX_TIERS; b++) total += reserve[b] = band_reserve(s, b);
    int spare = *left - total;
    if (spare < 0) spare = 0;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        int allowance = reserve[b] + spare;
        /* A band whose allowance the lower bands' reserves ate still moves
         * its started prefills a block's worth: they hold seats, and with
         * few seats nothing else could ever run. */
        if (allowance <= 0 && s->bands[b].n_prefilling > 0) allowance = s->cfg.block_size;
        if (allowance <= 0) continue;
        int a = allowance;
        swap_in_band(s, b, &a, a);
        if (a > 0) continue_prefills(s, b, &a, a);
        if (a > 0) serve_band(s, b, &a, a);
        int used = allowance - a;
        spare = allowance - used;
        *left -= used;
    }
}

/* Total up the batch's cost features and hand out the plan. */
static void finish_plan(sched *s, sched_plan *p) {
    compact_items(s);
    int32_t tokens = 0;
    cost_features f = {0, 0, 0};
    for (int32_t i = 0; i < s->n_items; i++) {
        sched_item *it = &s->items[i];
        it->n_blocks = s->reqs[(uint32_t)it->id].n_blocks; /* tables may have grown since */
        tokens += it->n_tokens;
        if (it->is_prefill) f.prefill_tokens += it->n_tokens;
        else f.decode_seqs += 1;
        f.context_tokens += cost_attended(it->pos, it->n_tokens);
    }
    *p = (sched_plan){s->items, s->n_items, s->swap_out, s->n_swap_out, s->swap_in, s->n_swap_in,
                      s->preempted, s->n_preempted, s->n_failed, s->budget, tokens,
                      cost_predict_us(&s->cost, &f)};
    s->feat = f;
}

int sched_step(sched *s, int64_t now_us, sched_plan *p) {
    if (s->in_flight) return TS_ERR_INVAL;
    s->steps++;
    s->now_us = now_us;
    s->n_items = s->n_swap_out = s->n_swap_in = s->n_preempted = s->n_failed = s->n_swapped_in = 0;
    s->swap_stuck_band = SCHED_MAX_TIERS;
    s->swap_stuck_tenant = NIL;
    s->no_victim_above = SCHED_MAX_TIERS;
    s->claim_band = -1;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) s->bands[b].used = 0;
    expire_timeouts(s, now_us);
    weigh_bands(s);
    s->budget = compute_budget(s);
    int left = s->budget;
    plan_decodes(s, &left);
    if (s->cfg.policy == SCHED_POLICY_FCFS) {
        for (int b = 0; b < SCHED_MAX_TIERS; b++) swap_in_band(s, b, &left, left > 0 ? left : 0);
        serve_fcfs(s, &left);
    } else {
        serve_bands(s, &left);
    }
    finish_plan(s, p);
    s->in_flight = 1;
    return 0;
}

/* ---- the step's outcome ---------------------------------------------------- */

/* Account one executed item: tokens into the cache, a sampled token, the
 * end of the request when it is done. */
static void item_done(sched *s, const sched_item *it, const sched_item_result *res, double share_us) {
    int32_t slot = (int32_t)(uint32_t)it->id;
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    r->item = NIL;
    r->engine_us += share_us;
    t->st.engine_us += share_us;
    if (it->is_prefill) t->st.prompt_tokens += (uint64_t)it->n_tokens;
    t->st.service += s->cfg.w_in * (double)r->charge;
    r->charge = 0;
    set_computed(s, r, r->n_computed + it->n_tokens);
    if (!it->sample) return;
    if (r->state == SCHED_PREFILLING) {
        tq_unlink(s, slot);
        band_of(s, r)->n_prefilling--;
        r->state = SCHED_DECODING;
    }
    r->n_total++;
    r->generated++;
    if (!r->first_token_us) r->first_token_us = s->now_us;
    fq_charge(&s->bands[t->band].q, &t->fe, s->cfg.w_out, t->cfg.weight);
    t->st.service += s->cfg.w_out;
    t->st.output_tokens++;
    if (res->finished || r->generated >= r->max_new) end_request(s, slot, SCHED_FINISHED, SCHED_R_NONE);
}

/* Requests that took part in the step in any way: items, and copies. */
static void end_pending_cancels(sched *s) {
    for (int32_t i = 0; i < s->n_items; i++) {
        int32_t slot = (int32_t)(uint32_t)s->items[i].id;
        if (s->reqs[slot].cancel_pending) end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE);
    }
    for (int32_t i = 0; i < s->n_preempted; i++) {
        int32_t slot = (int32_t)(uint32_t)s->preempted[i].id;
        if (s->reqs[slot].cancel_pending) end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE);
    }
    for (int32_t i = 0; i < s->n_swapped_in; i++)
        if (s->reqs[s->swapped_in[i]].cancel_pending)
            end_request(s, s->swapped_in[i], SCHED_CANCELLED, SCHED_R_NONE);
}

/* The executor failed: every request the step touched fails, explicitly. */
static void fail_step(sched *s) {
    for (int32_t i = 0; i < s->n_items; i++) {
        int32_t slot = (int32_t)(uint32_t)s->items[i].id;
        req *r = &s->reqs[slot];
        if (r->charge) { /* the tokens never ran: no service to charge */
            tenant *t = tenant_of(s, r);
            fq_charge(&s->bands[t->band].q, &t->fe, -s->cfg.w_in * (double)r->charge, t->cfg.weight);
            r->n_charged_in -= (int32_t)r->charge;
        }
        r->item = NIL;
        r->charge = 0;
        end_request(s, slot, SCHED_FAILED, SCHED_R_EXECUTOR);
    }
    for (int32_t i = 0; i < s->n_preempted; i++) {
        int32_t slot = (int32_t)(uint32_t)s->preempted[i].id;
        if (s->reqs[slot].state == SCHED_PREEMPTED_SWAPPED && s->reqs[slot].moved_step == s->steps)
            end_request(s, slot, SCHED_FAILED, SCHED_R_EXECUTOR);
    }
    for (int32_t i = 0; i < s->n_swapped_in; i++) end_request(s, s->swapped_in[i], SCHED_FAILED, SCHED_R_EXECUTOR);
}

int sched_step_done(sched *s, int64_t now_us, const sched_result *res) {
    if (!s->in_flight || !res || res->n_items != s->n_items || (s->n_items && !res->items)) return TS_ERR_INVAL;
    s->now_us = now_us;
    /* The swap-ins have been copied: their host slots are free now. */
    for (int32_t i = 0; i < s->n_swapped_in; i++) {
        req *r = &s->reqs[s->swapped_in[i]];
        if (r->state < SCHED_FINISHED) release_host(s, r);
    }
    if (res->failed) {
        fail_step(s);
    } else {
        double tokens = 0;
        for (int32_t i = 0; i < s->n_items; i++) tokens += s->items[i].n_tokens;
        for (int32_t i = 0; i < s->n_items; i++)
            item_done(s, &s->items[i], &res->items[i],
                      tokens > 0 ? res->step_us * s->items[i].n_tokens / tokens : 0);
        if (s->n_items && res->step_us > 0) cost_observe(&s->cost, &s->feat, res->step_us);
        double moved = s->cfg.block_bytes * (double)(s->n_swap_out + s->n_swap_in);
        if (moved > 0 && res->copy_us > 0) cost_observe_copy(&s->cost, moved, res->copy_us);
    }
    end_pending_cancels(s);
    s->in_flight = 0;
    return 0;
}

/* ---- invariants -------------------------------------------------------------- */

static int check_requests(const sched *s, int32_t *dev, int32_t *host, int32_t *queued, int32_t *running) {
    for (int32_t i = 0; i < s->cfg.max_requests; i++) {
        const req *r = &s->reqs[i];
        if (!r->in_use || r->state >= SCHED_FINISHED) {
            if (r->in_use && (r->n_blocks || r->n_host)) return TS_ERR_KV_BLOCK;
            continue;
        }
        *dev += r->n_blocks;
        *host += r->n_host;
        int runs = r->state == SCHED_PREFILLING || r->state == SCHED_DECODING;
        if (runs != (r->run_idx != NIL)) return TS_ERR_INVAL;
        if (runs) (*running)++;
        if (in_tenant_queue(r)) queued[r->tenant]++;
        if (r->n_computed > r->n_total || r->n_total > r->prompt + r->max_new) return TS_ERR_INVAL;
        if (runs && r->n_blocks < blocks_for(s, r->n_computed)) return TS_ERR_KV_BLOCK;
        if (r->state == SCHED_PREEMPTED_SWAPPED && r->n_host != blocks_for(s, r->n_computed))
            return TS_ERR_KV_BLOCK;
    }
    return 0;
}

/* Each block (host slot) is exactly one of: free, or in one request's
 * table (host slots). Counting alone would miss a block in two tables. */
static int check_owners(const sched *s, int host) {
    int32_t n = host ? s->kv.n_swap : s->kv.n_blocks, marked = 0;
    const int32_t *free_ids = host ? s->kv.swap_free_ids : s->kv.free_ids;
    int32_t n_free = host ? s->kv.n_swap_free : s->kv.n_free;
    memset(s->seen, 0, (size_t)(n ? n : 1));
    for (int32_t i = 0; i < n_free; i++, marked++) s->seen[free_ids[i]] = 1;
    for (int32_t i = 0; i < s->cfg.max_requests; i++) {
        const req *r = &s->reqs[i];
        if (!r->in_use) continue;
        const int32_t *ids = host ? r->host : r->table;
        int32_t k = host ? r->n_host : r->n_blocks;
        for (int32_t j = 0; j < k; j++, marked++) {
            if (ids[j] < 0 || ids[j] >= n || s->seen[ids[j]]) return TS_ERR_KV_BLOCK;
            s->seen[ids[j]] = 1;
        }
    }
    return marked == n ? 0 : TS_ERR_KV_BLOCK;
}

int sched_check(const sched *s) {
    int rc = kv_check(&s->kv);
    if (!rc) rc = check_owners(s, 0);
    if (!rc) rc = check_owners(s, 1);
    if (rc) return rc;
    int32_t dev = 0, host = 0, running = 0;
    int32_t *queued = s->scratch;
    memset(queued, 0, (size_t)s->cfg.max_tenants * sizeof(int32_t));
    rc = check_requests(s, &dev, &host, queued, &running);
    /* Swap-ins of the step in flight still hold their host slots. */
    if (!rc && (dev != kv_used(&s->kv) || host != kv_swapped(&s->kv) || running != s->n_run))
        rc = TS_ERR_KV_BLOCK;
    int32_t tenant_blocks = 0;
    for (int32_t i = 0; !rc && i < s->n_tenants; i++) {
        const tenant *t = &s->tenants[i];
        tenant_blocks += t->kv_blocks;
        if (queued[i] != t->n_queued || (t->n_queued > 0) != (t->fe.heap_pos >= 0)) rc = TS_ERR_INVAL;
        if (t->kv_blocks > t->kv_quota) rc = TS_ERR_KV_BLOCK;
    }
    if (!rc && tenant_blocks != dev) rc = TS_ERR_KV_BLOCK;
    return rc;
}
