/*
 * sched.c - the multi-tenant scheduler; see sched.h for the contract, fq.h
 * for the fairness theory and sched_claim.c for the claims that isolate the
 * tenants of one band.
 *
 * Memory: every array is sized at sched_new from the configuration
 * (request slots, block tables, heaps, plan buffers, the end-event ring);
 * nothing is allocated afterwards, so a step costs no malloc.
 *
 * Where requests live:
 *   tenant queue   WAITING, PREFILLING, PREEMPTED_RECOMPUTE, in service
 *                  order (a recomputed request goes back to the head)
 *   arrival queue  the same requests in arrival order (FIFO feature), a
 *                  recomputed request at the head
 *   running set    PREFILLING and DECODING: the requests holding blocks
 *   band swap list PREEMPTED_SWAPPED, oldest first
 * A tenant is in its band's fair queue exactly when its queue is non-empty.
 *
 * A step is a value (struct step, sched_int.h): sched_step clears it whole,
 * the planning functions fill it through a pointer, sched_step_done reads
 * it back.
 */
#include "sched.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "err.h"
#include "fq.h"
#include "heap.h"
#include "kv.h"
#include "sched_int.h"

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
    c->budget_max = SCHED_DEFAULT_BUDGET_MAX;
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
    /* The prior also caps how unsure the fit may grow (cost.h). At 1, steps
     * with a prefill chunk (one in eight on the CPU server under
     * isolation.yaml) never pull their coefficients off where the decode
     * steps left them: they run 1.4x their prediction
     * (tests/data/cost/isolation_steps.txt); at 16 the fit learns them
     * (1.2x). It stays 1 because the short steps (sched_claim.c) were tuned
     * against the biased fit: with 16, the victim's p99 TTFT under
     * isolation.yaml at 6 seats read 48-59 ms against 33-34 ms in
     * alternating runs on the CPU server. */
    c->cost_prior = 1;
    c->copy_bytes_per_us = 5000; /* 5 GB/s */
    c->presence_us = 5000000;
}

static int config_ok(const sched_config *c) {
    return (c->policy == SCHED_POLICY_FAIR || c->policy == SCHED_POLICY_FCFS) && c->n_blocks > 0 &&
           c->n_swap_blocks >= 0 && c->block_size > 0 && c->block_bytes >= 0 && c->max_requests > 0 &&
           c->max_tenants > 0 && c->max_running > 0 && c->max_ctx > 0 && c->budget_min > 0 &&
           c->budget_max >= c->budget_min && c->w_in > 0 && c->w_out > 0 && c->kv_low > 0 &&
           c->kv_high >= c->kv_low && c->kv_high <= 1 &&
           c->max_running <= (int64_t)c->budget_max * SCHED_MAX_SEQS_PER_TOKEN && c->presence_us >= 0 &&
           (c->prefix_cache == 0 || c->prefix_cache == 1);
}

/* The one place the policy is read: a policy is a preset of features. FAIR
 * is the configured heuristics; FCFS is one arrival-order queue with none
 * of the tiers, shares or fairness heuristics, swap as configured. */
static unsigned policy_features(const sched_config *c) {
    if (c->policy == SCHED_POLICY_FCFS) return (c->features & SCHED_FEAT_SWAP) | SCHED__FEAT_FIFO;
    return c->features & SCHED_FEAT_ALL;
}

void sched_free(sched *s) {
    if (!s) return;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) fq_deinit(&s->bands[b].q);
    kv_deinit(&s->kv);
    heap_deinit(&s->deadlines);
    free(s->tenants_mem); free(s->reqs_mem); free(s->free_slots); free(s->tables); free(s->hosts);
    free(s->run); free(s->ends); free(s->items); free(s->swap_out); free(s->swap_in);
    free(s->preempted); free(s->swapped_in); free(s->skipped); free(s->scratch);
    free(s->order); free(s->seen); free(s->occ);
    free(s);
}

/* Deadline heap order: (time, sequence), a total order, so expiries pop
 * in the same order for the same inputs. */
static int dl_less(const void *a, const void *b) {
    const deadline *x = a, *y = b;
    return x->at_us < y->at_us || (x->at_us == y->at_us && x->seq < y->seq);
}

static const heap_ops DL_HEAP = {sizeof(deadline), dl_less, NULL};

/* n zeroed entries of size bytes at a cache line, within *mem (to free).
 * calloc, not aligned_alloc and memset: pages of slots never taken stay
 * unwritten (sched_new). */
static void *calloc_lines(size_t n, size_t size, void **mem) {
    *mem = n <= (SIZE_MAX - 63) / size ? calloc(n * size + 63, 1) : NULL;
    return *mem ? (void *)(((uintptr_t)*mem + 63) & ~(uintptr_t)63) : NULL;
}

/* Every array the scheduler will ever use; 0 or TS_ERR_NOMEM. */
static int sched_alloc(sched *s) {
    const sched_config *c = &s->cfg;
    size_t nr = (size_t)c->max_requests, mb = (size_t)s->max_blocks;
    s->tenants = calloc_lines((size_t)c->max_tenants, sizeof(tenant), &s->tenants_mem);
    s->reqs = calloc_lines(nr, sizeof(req), &s->reqs_mem);
    s->free_slots = malloc(nr * sizeof(int32_t));
    s->tables = malloc(nr * mb * sizeof(int32_t));
    s->hosts = malloc(nr * mb * sizeof(int32_t));
    s->run = malloc((size_t)c->max_running * sizeof(int32_t));
    s->ends = malloc(nr * sizeof(sched_end));
    s->items = malloc(2 * (size_t)c->max_running * sizeof(sched_item));
    s->swap_out = malloc((size_t)c->n_blocks * sizeof(sched_copy));
    s->swap_in = malloc((size_t)c->n_blocks * sizeof(sched_copy));
    s->preempted = malloc(nr * sizeof(sched_preemption));
    s->swapped_in = malloc((size_t)c->max_running * sizeof(int32_t));
    s->skipped = malloc((size_t)c->max_tenants * sizeof(fq_entity *));
    s->scratch = malloc((size_t)c->max_tenants * sizeof(int32_t));
    s->order = malloc(2 * (size_t)c->max_running * sizeof(turn));
    s->seen = malloc((size_t)(c->n_blocks > c->n_swap_blocks ? c->n_blocks : c->n_swap_blocks));
    s->occ = malloc((size_t)c->n_blocks * sizeof(int32_t));
    int bad = !s->tenants || !s->reqs || !s->free_slots || !s->tables || !s->hosts || !s->run ||
              !s->ends || !s->items || !s->swap_out || !s->swap_in || !s->preempted ||
              !s->swapped_in || !s->skipped || !s->scratch || !s->order || !s->seen || !s->occ;
    for (int b = 0; !bad && b < SCHED_MAX_TIERS; b++) {
        bad |= fq_init(&s->bands[b].q, c->max_tenants) != 0;
        s->bands[b].swapped = (slot_list){NIL, NIL};
    }
    if (bad || heap_init(&s->deadlines, &DL_HEAP, nr, HEAP_FIXED) ||
        kv_init(&s->kv, c->n_blocks, c->n_swap_blocks, c->kv_high, c->kv_low) ||
        cost_init(&s->cost, c->cost_seed, c->cost_lambda, c->cost_prior, c->copy_bytes_per_us) ||
        (c->prefix_cache && kv_cache_init(&s->kv, c->block_size)))
        return TS_ERR_NOMEM;
    return 0;
}

int sched_new(const sched_config *c, sched **out) {
    *out = NULL;
    if (!config_ok(c)) return TS_ERR_INVAL;
    sched *s = calloc(1, sizeof(*s));
    if (!s) return TS_ERR_NOMEM;
    s->cfg = *c;
    s->features = policy_features(c);
    /* No request holds more blocks than the pool has (admission refuses
     * one that would need more), so a long context does not size every
     * slot's two tables past the pool (a 1M-position model with 16384
     * slots would need gigabytes of tables). */
    int64_t per_req = ((int64_t)c->max_ctx + c->block_size - 1) / c->block_size;
    s->max_blocks = per_req < c->n_blocks ? (int32_t)per_req : c->n_blocks;
    if (sched_alloc(s)) goto err;
    /* Slots are handed out lowest first and reused last-freed first, and a
     * slot's request and tables are first written when it is taken: a
     * scheduler sized for thousands of requests that holds a few keeps a
     * few pages of them resident (the simulator runs a thousand). */
    for (int32_t i = 0; i < c->max_requests; i++) s->free_slots[i] = c->max_requests - 1 - i;
    s->n_free_slots = c->max_requests;
    s->arrivals = (slot_list){NIL, NIL};
    *out = s;
    return 0;
err:
    sched_free(s);
    return TS_ERR_NOMEM;
}

int sched_tier_add(sched *s, const sched_tier *t) {
    if (s->n_tiers >= SCHED_MAX_TIERS || t->band < 0 || t->band >= SCHED_MAX_TIERS ||
        !(t->min_share >= 0 && t->min_share <= 1))
        return TS_ERR_INVAL;
    /* Floors are promised together: they cannot add up to more than all. */
    double floors = t->min_share;
    for (int i = 0; i < s->n_tiers; i++) floors += s->tiers[i].min_share;
    if (floors > 1 + 1e-9) return TS_ERR_INVAL;
    s->tiers[s->n_tiers] = *t;
    s->tiers[s->n_tiers].name[SCHED_NAME_MAX - 1] = 0;
    if (t->min_share > s->band_floor[t->band]) s->band_floor[t->band] = t->min_share;
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
    t->out_units = fq_units(s->cfg.w_out, c->weight);
    t->queue = (slot_list){NIL, NIL};
    t->last_work_us = INT64_MIN / 2; /* never: now - this is never within presence_us */
    return s->n_tenants++;
}

int sched_tenant_remote(sched *s, int32_t id, uint64_t remote) {
    if (!s || id < 0 || id >= s->n_tenants) return TS_ERR_INVAL;
    tenant *t = &s->tenants[id];
    fq_set_remote(&s->bands[t->band].q, &t->fe, remote);
    return 0;
}

int sched_fleet_queued(sched *s, const uint8_t *queued, const uint64_t *key) {
    if (!s || !queued || !key) return TS_ERR_INVAL;
    int has[SCHED_MAX_TIERS] = {0};
    uint64_t least[SCHED_MAX_TIERS] = {0};
    for (int32_t i = 0; i < s->n_tenants; i++) {
        int b = s->tenants[i].band;
        if (!queued[i] || (has[b] && fq_diff(key[i], least[b]) >= 0)) continue;
        has[b] = 1;
        least[b] = key[i];
    }
    for (int b = 0; b < SCHED_MAX_TIERS; b++) fq_set_fleet(&s->bands[b].q, has[b], least[b]);
    return 0;
}

/* ---- ids, lists and the running set --------------------------------------- */

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

static tenant *tenant_of(const sched *s, const req *r) { return &s->tenants[r->tenant]; }
static band *band_of(sched *s, const req *r) { return &s->bands[s->tenants[r->tenant].band]; }
static const sched_tier *tier_of(const sched *s, const req *r) {
    return &s->tiers[s->tenants[r->tenant].cfg.tier];
}
static int32_t blocks_for(const sched *s, int64_t positions) {
    return (int32_t)((positions + s->cfg.block_size - 1) / s->cfg.block_size);
}
static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

/* Splice slot into list l (through its link `which`) just after `after`,
 * or at the head when `after` is NIL. */
static void list_insert(sched *s, slot_list *l, int which, int32_t after, int32_t slot) {
    slot_link *k = &s->reqs[slot].link[which];
    k->prev = after;
    k->next = after == NIL ? l->head : s->reqs[after].link[which].next;
    if (k->prev != NIL) s->reqs[k->prev].link[which].next = slot; else l->head = slot;
    if (k->next != NIL) s->reqs[k->next].link[which].prev = slot; else l->tail = slot;
}

static void list_remove(sched *s, slot_list *l, int which, int32_t slot) {
    slot_link *k = &s->reqs[slot].link[which];
    if (k->prev != NIL) s->reqs[k->prev].link[which].next = k->next; else l->head = k->next;
    if (k->next != NIL) s->reqs[k->next].link[which].prev = k->prev; else l->tail = k->prev;
    k->prev = k->next = NIL;
}

/* Tenant queue: membership also drives the band's fair queue and the
 * band's pending prefill count. A recomputed request goes to the head of
 * both its tenant's queue and the arrival queue. */
static void tq_link(sched *s, int32_t slot, int at_head) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    list_insert(s, &t->queue, LINK_QUEUE, at_head ? NIL : t->queue.tail, slot);
    if (t->n_queued++ == 0) fq_enqueue(&s->bands[t->band].q, &t->fe);
    s->n_queued++;
    band_of(s, r)->pending_tokens += r->n_total - r->n_computed;
    list_insert(s, &s->arrivals, LINK_ARRIVAL, at_head ? NIL : s->arrivals.tail, slot);
}

static void tq_unlink(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    list_remove(s, &t->queue, LINK_QUEUE, slot);
    list_remove(s, &s->arrivals, LINK_ARRIVAL, slot);
    band_of(s, r)->pending_tokens -= r->n_total - r->n_computed;
    if (--t->n_queued == 0) fq_dequeue(&s->bands[t->band].q, &t->fe);
    s->n_queued--;
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
    tenant *t = tenant_of(s, &s->reqs[slot]);
    list_remove(s, &t->queue, LINK_QUEUE, slot);
    int32_t after = NIL;
    for (int32_t i = t->queue.head; i != NIL && s->reqs[i].state == SCHED_PREFILLING;
         i = s->reqs[i].link[LINK_QUEUE].next)
        after = i;
    list_insert(s, &t->queue, LINK_QUEUE, after, slot);
}

static void swap_list_push(sched *s, int32_t slot) {
    slot_list *l = &band_of(s, &s->reqs[slot])->swapped;
    list_insert(s, l, LINK_QUEUE, l->tail, slot);
}

static void swap_list_unlink(sched *s, int32_t slot) {
    list_remove(s, &band_of(s, &s->reqs[slot])->swapped, LINK_QUEUE, slot);
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

/* ---- queue deadlines ---------------------------------------------------------- */

/* A deadline is pushed once per request, at arrival. It goes stale when
 * its request is admitted or ends, and is dropped when it surfaces. */
static int deadline_live(const sched *s, const deadline *d) {
    const req *r = &s->reqs[d->slot];
    return r->in_use && r->gen == d->gen && r->state == SCHED_WAITING && !r->started;
}

/* Stale entries stay in the heap until their deadline surfaces, so with
 * requests admitted faster than the queue limit the heap would outgrow its
 * max_requests entries. When it is full, keep only the live entries (one
 * per waiting, never-admitted request, the new one not yet pushed: fewer
 * than max_requests) and rebuild; O(n), amortised over the pushes that
 * filled it. */
static void dl_compact(sched *s) {
    heap *h = &s->deadlines;
    size_t k = 0;
    for (size_t i = 0; i < h->n; i++) {
        const deadline *d = heap_at(h, &DL_HEAP, i);
        if (deadline_live(s, d)) *(deadline *)heap_at(h, &DL_HEAP, k++) = *d;
    }
    h->n = k;
    heap_rebuild(h, &DL_HEAP);
}

static void dl_push(sched *s, deadline d) {
    if (s->deadlines.n == s->deadlines.cap) dl_compact(s);
    heap_push(&s->deadlines, &DL_HEAP, &d); /* room: see dl_compact */
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
        s->n_swapped--;
    }
    release_blocks(s, r);
    /* Requests only end outside planning or in sched_step_done after the
     * executor's copies, so the host slots are free to go. */
    release_host(s, r);
}

static void end_request(sched *s, int32_t slot, sched_state how, sched_reason why, int64_t now_us) {
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
                     r->first_token_us, now_us, r->preemptions, r->engine_us,
                     r->first_hit > 0 ? r->first_hit : 0};
}

int sched_poll_end(sched *s, sched_end *ev) {
    if (!s->n_ends) return 0;
    *ev = s->ends[s->end_head];
    s->end_head = (s->end_head + 1) % s->cfg.max_requests;
    if (--s->n_ends == 0) s->end_head = 0; /* the ring restarts at its first, warm, entries */
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
    double step_us = cost_predict_us(&s->cost, &f);
    return ahead / s->cfg.budget_max * step_us;
}

/* `work`: the prompt tokens not found in the prefix cache at submit. */
static sched_reason admission_check(sched *s, int32_t tn, int32_t prompt, int32_t work, int32_t max_new) {
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
    /* The prediction is of the backlog of the bands served before b: in
     * one arrival-order queue there are none, so FIFO predicts nothing. */
    if (!(s->features & SCHED__FEAT_FIFO) && tier->ttft_ms == 0 && tier->max_queue_ms &&
        predicted_wait_us(s, t->band, work) > 1000.0 * tier->max_queue_ms)
        return SCHED_R_PREDICTED_WAIT;
    if (!s->n_free_slots) return SCHED_R_NO_SLOTS;
    return SCHED_R_NONE;
}

/* Prompt tokens of a request of tenant tn that the cache holds now (a
 * look-up only: nothing is referenced), for the predictions at submit. */
static int32_t cached_at_submit(sched *s, int32_t tn, const sched_prompt *p) {
    if (!s->cfg.prefix_cache || !p->tokens || tn < 0 || tn >= s->n_tenants || p->n < 2) return 0;
    req probe = {.tenant = tn, .prompt = p->n, .tokens = p->tokens, .n_public = p->n_public,
                 .salt = sched__cache_salt(s, tn, p->salt)};
    return sched__cache_match(s, &probe, (p->n - 1) / s->cfg.block_size, NULL) * s->cfg.block_size;
}

int sched_submit(sched *s, int64_t now_us, int32_t tn, int32_t prompt, int32_t max_new, sched_id *id,
                 sched_reason *why) {
    sched_prompt p = {NULL, prompt, 0, 0};
    return sched_submit_prompt(s, now_us, tn, &p, max_new, id, why);
}

int sched_submit_prompt(sched *s, int64_t now_us, int32_t tn, const sched_prompt *p, int32_t max_new,
                        sched_id *id, sched_reason *why) {
    int32_t prompt = p->n, work = prompt - cached_at_submit(s, tn, p);
    sched_reason rj = admission_check(s, tn, prompt, work, max_new);
    *why = rj;
    if (rj != SCHED_R_NONE) {
        if (rj != SCHED_R_UNKNOWN_TENANT) s->tenants[tn].st.rejected[rj]++;
        return 1;
    }
    int32_t slot = s->free_slots[--s->n_free_slots];
    req *r = &s->reqs[slot];
    uint32_t gen = r->gen;
    int32_t *table = s->tables + (size_t)slot * (size_t)s->max_blocks;
    int32_t *host = s->hosts + (size_t)slot * (size_t)s->max_blocks;
    *r = (req){.gen = gen, .in_use = 1, .state = SCHED_WAITING, .tenant = tn, .prompt = prompt,
               .max_new = max_new, .n_total = prompt, .table = table, .host = host,
               .arrival_us = now_us, .arrival_seq = s->next_seq++, .link = {{NIL, NIL}, {NIL, NIL}},
               .run_idx = NIL, .item = NIL, .moved_step = UINT64_MAX, .first_hit = -1};
    if (s->cfg.prefix_cache && p->tokens) {
        r->tokens = p->tokens;
        r->salt = sched__cache_salt(s, tn, p->salt);
        r->n_public = p->n_public;
    }
    tq_link(s, slot, 0);
    tenant *t = &s->tenants[tn];
    t->last_work_us = now_us;
    t->prompt_avg = t->st.submitted ? t->prompt_avg + (work - t->prompt_avg) / 8 : work;
    const sched_tier *tier = tier_of(s, r);
    if (tier->max_queue_ms)
        dl_push(s, (deadline){now_us + 1000 * (int64_t)tier->max_queue_ms, r->arrival_seq, slot, gen});
    s->tenants[tn].st.submitted++;
    *id = make_id(s, slot);
    return 0;
}

int sched_cancel(sched *s, int64_t now_us, sched_id id) {
    int32_t slot;
    req *r = lookup(s, id, &slot);
    if (!r) return TS_ERR_INVAL;
    if (s->st.in_flight && (r->item != NIL || r->moved_step == s->steps)) {
        r->cancel_pending = 1; /* the executor is using its blocks */
        return 0;
    }
    end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE, now_us);
    return 0;
}

int sched_req_get(const sched *s, sched_id id, sched_req_info *o) {
    uint32_t slot = (uint32_t)id;
    if (slot >= (uint32_t)s->cfg.max_requests) return TS_ERR_INVAL;
    const req *r = &s->reqs[slot];
    if (!r->in_use || r->gen != (uint32_t)(id >> 32)) return TS_ERR_INVAL;
    *o = (sched_req_info){r->state, r->tenant, r->n_total, r->n_computed, r->prompt, r->generated,
                          r->max_new, r->n_blocks, r->n_hit};
    return 0;
}

int sched_tenant_stats_get(const sched *s, int32_t tn, sched_tenant_stats *o) {
    if (tn < 0 || tn >= s->n_tenants) return TS_ERR_INVAL;
    const tenant *t = &s->tenants[tn];
    *o = t->st;
    o->vtime = t->fe.vtime;
    o->key = fq_key(&t->fe);
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
    o->queued = s->n_queued;
    o->swapped = s->n_swapped;
    o->admitting = s->kv.admitting;
    o->kv_cached = kv_cached(&s->kv);
    o->kv_cache_only = s->kv.n_lru;
    o->kv_evicted = s->kv.n_evicted;
    o->steps = s->steps;
    cost_theta(&s->cost, o->cost_theta);
    memcpy(o->cost_seed, s->cfg.cost_seed, sizeof o->cost_seed);
    o->cost_err_us = cost_err_us(&s->cost);
    o->cost_err_ac = cost_err_autocorr(&s->cost);
    o->cost_steps = s->cost.n_obs;  /* cost.h has no accessor for it */
    o->copy_bytes_per_us = cost_copy_bytes_per_us(&s->cost);
    o->policy = s->cfg.policy;
    o->block_size = s->cfg.block_size;
    o->block_bytes = s->cfg.block_bytes;
    o->max_running = s->cfg.max_running;
    o->max_ctx = s->cfg.max_ctx;
    o->budget_min = s->cfg.budget_min;
    o->budget_max = s->cfg.budget_max;
    o->kv_high = s->cfg.kv_high;
    o->kv_low = s->cfg.kv_low;
}

/* ---- planning helpers ------------------------------------------------------ */

/* Move n_computed, keeping the band's pending prefill count true. */
static void set_computed(sched *s, req *r, int32_t v) {
    if (in_tenant_queue(r)) band_of(s, r)->pending_tokens -= v - r->n_computed;
    r->n_computed = v;
}

/* Squeeze out items dropped by preemption, keeping order. */
static void compact_items(sched *s, step *st) {
    sched_plan *p = &st->plan;
    int32_t k = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        if (p->items[i].n_tokens == 0) continue;
        s->reqs[(uint32_t)p->items[i].id].item = k;
        p->items[k++] = p->items[i];
    }
    p->n_items = k;
}

static void add_item(sched *s, step *st, int32_t slot, int32_t n) {
    req *r = &s->reqs[slot];
    sched_plan *p = &st->plan;
    /* Live items never outnumber the seats; dropped ones may pile up. */
    if (p->n_items == 2 * s->cfg.max_running) compact_items(s, st);
    r->item = p->n_items;
    p->items[p->n_items++] = (sched_item){make_id(s, slot), r->tenant, r->n_computed, n,
                                          r->n_total - r->n_computed > 1 || r->state == SCHED_PREFILLING,
                                          r->n_computed + n == r->n_total, r->table, r->n_blocks};
    st->used[tenant_of(s, r)->band] += n;
    st->left -= n;
    sched__feat_add(&st->feat, &p->items[r->item], 1);
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

/* Take back the provisional input charge of r's item: its tokens never ran. */
static void refund_input(sched *s, req *r) {
    if (!r->charge) return;
    tenant *t = tenant_of(s, r);
    fq_charge(&s->bands[t->band].q, &t->fe, -s->cfg.w_in * (double)r->charge, t->cfg.weight);
    r->n_charged_in -= (int32_t)r->charge;
    r->charge = 0;
}

void sched__drop_item(sched *s, step *st, req *r) {
    if (r->item == NIL) return;
    sched_item *it = &st->plan.items[r->item];
    st->left += it->n_tokens;
    st->used[tenant_of(s, r)->band] -= it->n_tokens;
    sched__feat_add(&st->feat, it, -1);
    it->n_tokens = 0; /* compacted away at the end of planning */
    refund_input(s, r);
    r->item = NIL;
}

/* Give r `need` more device blocks, charged to its tenant. 0, or 1 with
 * nothing taken when the tenant's quota or the pool is short. */
static int take_blocks(sched *s, req *r, int32_t need) {
    tenant *t = tenant_of(s, r);
    if (t->kv_blocks + need > t->kv_quota || kv_alloc(&s->kv, need, r->table + r->n_blocks)) return 1;
    r->n_blocks += need;
    t->kv_blocks += need;
    return 0;
}

/* Progress guarantee for growth preemption: a growing request may only
 * take blocks from a lower band, or from its own band when the victim
 * arrived after it. Otherwise two large requests of one band take turns
 * evicting each other ("largest KV" always picks the one closest to
 * finishing) and neither ever ends; with this rule the oldest request of
 * the lowest band can never be evicted by growth, so it finishes. It also
 * stops a lower band's prefill from evicting a higher band's request.
 * FIFO has no bands: only newer requests yield, so the oldest request of
 * all is the one growth never evicts. (Comparing bands there, an older
 * bronze request and a newer gold one could each need the other's blocks
 * and neither evict the other.) A band kept at its floor (sched_floor.c)
 * may also take from newer requests of higher bands that are not: they
 * may not take its blocks, and it would otherwise preempt itself at every
 * block it needs while they refill the pool. */
static int eligible_for_growth(const sched *s, const req *victim, const req *grower) {
    int newer = victim->arrival_seq > grower->arrival_seq;
    if (s->features & SCHED__FEAT_FIFO) return newer;
    int vb = s->tenants[victim->tenant].band, gb = s->tenants[grower->tenant].band;
    const uint8_t *kept = s->st.floor_kept;
    return vb > gb || (vb == gb && newer) || (kept[gb] && !kept[vb] && newer);
}

/* Whether running request r may be preempted under filter f, in the step
 * being planned (s->st). Requests moved by a copy this step are not
 * eligible (their copies are already in the plan); nor are, for another
 * band, those of a band near its floor (sched_floor.c). */
int sched__victim_ok(const sched *s, const req *r, victim_filter f) {
    const tenant *t = &s->tenants[r->tenant];
    if (r->moved_step == s->steps || t->band <= f.above_band || (f.tenant >= 0 && r->tenant != f.tenant))
        return 0;
    if (f.for_req && r != f.for_req && !eligible_for_growth(s, r, f.for_req)) return 0;
    if (f.other_bands && t->band == f.for_band) return 0;
    return f.for_band < 0 || t->band == f.for_band || !s->st.floor_kept[t->band];
}

/* Blocks only r's table holds: what preempting it gives back to the pool.
 * A block shared with another table (prefix cache) stays used. O(its
 * blocks) with the cache on. */
static int32_t private_blocks(const sched *s, const req *r) {
    if (!s->cfg.prefix_cache) return r->n_blocks;
    int32_t n = 0;
    for (int32_t i = 0; i < r->n_blocks; i++) n += s->kv.ref[r->table[i]] == 1;
    return n;
}

/* Leading blocks of r's table that another table holds too: cache entries
 * that stay cached while it is preempted, so its re-admission finds them
 * again (and a recompute need not compute them). */
static int32_t shared_head(const sched *s, const req *r) {
    if (!s->cfg.prefix_cache) return 0;
    int32_t n = 0;
    while (n < r->n_blocks && s->kv.ref[r->table[n]] > 1) n++;
    return n;
}

/* Preemption victim: lowest band (largest band number), then the most
 * blocks it would free (its private ones: a request sharing most of its
 * table frees little), then newest; FIFO: newest. */
int32_t sched__choose_victim(const sched *s, victim_filter f) {
    int fifo = (s->features & SCHED__FEAT_FIFO) != 0;
    int32_t best = NIL;
    for (int32_t i = 0; i < s->n_run; i++) {
        int32_t slot = s->run[i];
        const req *r = &s->reqs[slot];
        const tenant *t = &s->tenants[r->tenant];
        if (!sched__victim_ok(s, r, f)) continue;
        if (best == NIL) { best = slot; continue; }
        const req *b = &s->reqs[best];
        int bb = s->tenants[b->tenant].band;
        int better;
        if (fifo) better = r->arrival_seq > b->arrival_seq;
        else if (t->band != bb) better = t->band > bb;
        else {
            int32_t pr = private_blocks(s, r), pb = private_blocks(s, b);
            better = pr != pb ? pr > pb : r->arrival_seq > b->arrival_seq;
        }
        if (better) best = slot;
    }
    return best;
}

/* Swap when moving the KV out and back costs less than recomputing it and
 * there is room on the host; recompute otherwise. A shared head of its
 * table (prefix cache) is not recomputed: other tables keep it cached and
 * the re-admission finds it; swapped, it would be copied out and back as
 * the request's own blocks, un-shared. So a mostly shared request is
 * recomputed. (Its own cached blocks, released to cache-only, are usually
 * found too, but may be evicted meanwhile: not counted.) */
static int choose_swap(sched *s, const req *r) {
    int32_t keep = blocks_for(s, r->n_computed); /* blocks holding K/V; see swap_out */
    if (!(s->features & SCHED_FEAT_SWAP) || keep > s->kv.n_swap_free || keep == 0)
        return 0;
    int32_t again = r->n_computed - shared_head(s, r) * s->cfg.block_size;
    double swap = cost_swap_us(&s->cost, s->cfg.block_bytes * keep);
    return swap < cost_recompute_us(&s->cost, again > 0 ? again : 0);
}

/* Copy a preempted request's K/V to host slots and park it on its band's
 * swap list. Only computed positions hold K/V. Blocks grown for this
 * step's item (a decode entering a new block, a prefill chunk) are empty:
 * freed, not copied, so that swap-in (which allocates blocks_for(n_computed)
 * and copies n_host) matches. */
static void swap_out(sched *s, step *st, int32_t slot) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    sched_plan *p = &st->plan;
    int32_t keep = blocks_for(s, r->n_computed);
    kv_swap_alloc(&s->kv, keep, r->host);
    r->n_host = keep;
    for (int32_t i = 0; i < keep; i++) p->swap_out[p->n_swap_out++] = (sched_copy){r->table[i], r->host[i]};
    if (in_tenant_queue(r)) tq_unlink(s, slot);
    release_blocks(s, r);
    r->reg_stop = 1; /* it comes back in blocks of its own, no cache entries */
    r->state = SCHED_PREEMPTED_SWAPPED;
    swap_list_push(s, slot);
    t->n_swapped++;
    s->n_swapped++;
    t->st.preempt_swap++;
}

/* Drop a preempted request's K/V and queue it to prefill prompt and
 * generated tokens again, at the head of its tenant's queue (behind the
 * tenant's started prefills) and of the arrival queue. */
static void requeue_recompute(sched *s, int32_t slot) {
    req *r = &s->reqs[slot];
    int queued = in_tenant_queue(r);
    release_blocks(s, r);
    set_computed(s, r, 0);
    r->n_reg = 0; /* its re-admission looks the prompt up again */
    r->n_hit = 0;
    r->match_ver = 0; /* its table holds its old blocks, not a probe's result */
    r->state = SCHED_PREEMPTED_RECOMPUTE;
    if (!queued) tq_link(s, slot, 1);
    tq_behind_started(s, slot);
    tenant_of(s, r)->st.preempt_recompute++;
}

void sched__preempt(sched *s, step *st, int32_t slot) {
    req *r = &s->reqs[slot];
    int swap = choose_swap(s, r);
    sched__drop_item(s, st, r);
    run_remove(s, slot);
    if (r->state == SCHED_PREFILLING) band_of(s, r)->n_prefilling--;
    if (swap) swap_out(s, st, slot);
    else requeue_recompute(s, slot);
    r->moved_step = s->steps; /* not back (swap-in or readmission) in the step that evicted it */
    r->preemptions++;
    st->plan.preempted[st->plan.n_preempted++] = (sched_preemption){make_id(s, slot), (uint8_t)swap};
}

/* Give a running request blocks to cover `positions`, preempting victims
 * when the pool or its tenant's quota is exhausted (possibly the request
 * itself). Returns 1 if it still runs, 0 if it was preempted or must wait
 * a step: swapped in this step with no other victim, or (FIFO) a started
 * prefill with no other victim.
 *
 * Why a FIFO prefill waits rather than preempt itself: it found no
 * victim, so the blocks it needs are held by older requests
 * (eligible_for_growth) or by ones moved this step. The older ones run on
 * the budget it leaves and finish first; any of them that needs a block
 * may evict it, since it is newer. Preempting itself, it would go back to
 * the head of the arrival queue, take the whole budget again, recompute up
 * to the same block and preempt itself again, while the older prefill
 * holding that block never got a token: a livelock
 * (test_fcfs_recompute_progress). */
static int grow_running(sched *s, step *st, int32_t slot, int32_t positions) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    int32_t need = blocks_for(s, positions) - r->n_blocks;
    while (need > 0) {
        if (take_blocks(s, r, need) == 0) return 1;
        int over_quota = t->kv_blocks + need > t->kv_quota;
        /* Growth respects floors (sched_floor.c): taking a kept band's
         * blocks would only have it claim them back, and the two would
         * trade the pool for ever; the grower preempts itself instead. */
        victim_filter f = {.above_band = -1, .tenant = over_quota ? r->tenant : -1, .for_req = r,
                           .for_band = t->band};
        int32_t v = sched__choose_victim(s, f);
        if (v == NIL) {
            /* Swapped in this very step: its blocks are the targets of this
             * step's swap-in copies and its host slots their source, so it
             * can be neither swapped out again nor dropped now. It sits the
             * step out (no item); a later step may preempt it. */
            if (r->moved_step == s->steps) return 0;
            v = slot;
        }
        if (v == slot && r->state == SCHED_PREFILLING && (s->features & SCHED__FEAT_FIFO)) return 0;
        sched__preempt(s, st, v);
        if (v == slot) return 0;
    }
    return 1;
}

/* ---- the step --------------------------------------------------------------- */

/* Fail queued requests past their tier's maximum wait. Started requests
 * (recomputed after a preemption) have had their first token: exempt. */
static void expire_timeouts(sched *s, step *st) {
    const deadline *top;
    while ((top = heap_top(&s->deadlines)) && top->at_us <= st->now_us) {
        deadline d;
        heap_pop(&s->deadlines, &DL_HEAP, &d);
        if (!deadline_live(s, &d)) continue;
        end_request(s, d.slot, SCHED_FAILED, SCHED_R_QUEUE_TIMEOUT, st->now_us);
        st->plan.n_failed++;
    }
}

/* Each band's total weight of tenants with work (queued, running or
 * swapped), the denominator of the seat shares, and with short steps the
 * seats per unit of weight of its present tenants (sched_claim.c).
 * O(tenants) once a step. */
static void weigh_bands(sched *s, step *st) {
    int presence = (s->features & SCHED_FEAT_RESPONSIVE) && !(s->features & SCHED__FEAT_FIFO);
    /* Sums in locals: the stores into tenants would otherwise make the
     * compiler store and reload them every iteration (it cannot rule out
     * aliasing). */
    double active[SCHED_MAX_TIERS] = {0}, idle[SCHED_MAX_TIERS] = {0}, wmax[SCHED_MAX_TIERS] = {0};
    const int64_t now = st->now_us, refresh = s->cfg.presence_us / 4;
    for (int32_t i = 0; i < s->n_tenants; i++) {
        tenant *t = &s->tenants[i];
        if (t->n_queued + t->n_running + t->n_swapped > 0) {
            active[t->band] += t->cfg.weight;
            /* Refreshed now and then, not every step: a store per tenant
             * and step dirties every tenant's cache line. */
            if (now - t->last_work_us > refresh) t->last_work_us = now;
        } else if (!presence || !sched__present(s, st, t)) {
            continue;
        } else {
            idle[t->band] += t->cfg.weight; /* present without work */
        }
        if (t->cfg.weight > wmax[t->band]) wmax[t->band] = t->cfg.weight;
    }
    memcpy(st->w_active, active, sizeof(active));
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        double present = active[b] + idle[b];
        st->seats_per_w[b] = present > 0 ? s->cfg.max_running / present : s->cfg.max_running;
        st->seats_most[b] = st->seats_per_w[b] * wmax[b];
    }
}

/* The step's token budget: with running requests that have a TPOT target,
 * the largest budget whose predicted step time meets the strictest one,
 * and with TTFT_BUDGET no more than a quarter of the strictest TTFT target
 * of a band with work. The budget is predicted as one chunk at the
 * furthest position a running prefill has reached (cost_budget_for's
 * bound): a later chunk of a long prompt attends to all of it, and at
 * position 0 a 20 ms target planned a 20.4 ms step (test_adaptive_budget). */
static int compute_budget(const sched *s, const step *st) {
    const sched_config *c = &s->cfg;
    if (!(s->features & SCHED_FEAT_ADAPTIVE_BUDGET)) return c->budget_max;
    uint32_t tpot = 0;
    double decodes = 0, ctx = 0, pos = 0;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        uint32_t t = tier_of(s, r)->tpot_ms;
        if (t && (!tpot || t < tpot)) tpot = t;
        if (r->state == SCHED_DECODING) {
            decodes += 1;
            ctx += r->n_total;
        } else if (r->state == SCHED_PREFILLING && r->n_computed > pos) {
            pos = r->n_computed; /* a later chunk attends to what came before */
        }
    }
    double target = tpot ? 1000.0 * tpot : 0;
    if (s->features & SCHED_FEAT_TTFT_BUDGET)
        for (int i = 0; i < s->n_tiers; i++) {
            const sched_tier *t = &s->tiers[i];
            double q = 1000.0 * t->ttft_ms / 4;
            if (t->ttft_ms && st->w_active[t->band] > 0 && (!target || q < target)) target = q;
        }
    if (!target) return c->budget_max;
    int lo = c->budget_min, hi = c->budget_max;
    int extra = cost_budget_for(&s->cost, target, decodes, ctx, pos, 0, hi);
    int b = (int)decodes + (extra > 0 ? extra : 0);
    return b < lo ? lo : b > hi ? hi : b;
}

int sched__plan_decode(sched *s, step *st, int32_t slot) {
    if (!grow_running(s, st, slot, s->reqs[slot].n_total)) return 0;
    add_item(s, st, slot, 1);
    return 1;
}

/* Every decoding request gets its token (and a block when it crosses
 * into a new one), except that in a short step the over-share tenants'
 * decodes take turns (sched__plan_short_decodes). */
static void plan_decodes(sched *s, step *st) {
    for (int32_t i = 0; i < s->n_run;) {
        int32_t slot = s->run[i];
        req *r = &s->reqs[slot];
        if (r->state != SCHED_DECODING || r->item != NIL || sched__held_short(s, st, tenant_of(s, r))) {
            i++;
            continue;
        }
        int32_t before = st->plan.n_preempted;
        sched__plan_decode(s, st, slot);
        /* A preemption reorders s->run; planned requests have items, so a
         * rescan from the start skips them cheaply. */
        i = st->plan.n_preempted != before ? 0 : i + 1;
    }
    sched__plan_short_decodes(s, st);
}

/* Bring back a swapped-out request that got `need` blocks: its copies go
 * into the plan; a decode runs this step, a prefill's next chunk comes
 * through the fair queue. Returns the tokens it took. */
static int swap_in(sched *s, step *st, int32_t slot, int32_t need, int decoding) {
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    sched_plan *p = &st->plan;
    take_blocks(s, r, need); /* the caller checked quota and pool */
    for (int32_t i = 0; i < r->n_host; i++) p->swap_in[p->n_swap_in++] = (sched_copy){r->table[i], r->host[i]};
    swap_list_unlink(s, slot);
    t->n_swapped--;
    s->n_swapped--;
    r->moved_step = s->steps;
    s->swapped_in[st->n_swapped_in++] = slot;
    run_add(s, slot);
    if (decoding) {
        r->state = SCHED_DECODING;
        add_item(s, st, slot, 1);
        return 1;
    }
    r->state = SCHED_PREFILLING;
    band_of(s, r)->n_prefilling++;
    tq_link(s, slot, 1);
    return 0;
}

/* A swapped request of band b could not come back: it holds back new
 * admissions of its band and lower ones (they would take its blocks),
 * except claims of other tenants in its band (sched__held_by_stuck_swap).
 * In one arrival-order queue it holds back every admission. */
static void swap_stuck(const sched *s, step *st, int b, int32_t tn) {
    if (s->features & SCHED__FEAT_FIFO) {
        st->swap_stuck_band = 0;
    } else if (b < st->swap_stuck_band) {
        st->swap_stuck_band = b;
        st->swap_stuck_tenant = tn;
    }
}

/* Bring swapped-out requests of band b back, oldest first, while blocks,
 * seats and their tenants' quotas allow, a request of a tenant under its
 * shares claiming room if need be (sched__fair_share_room); the first
 * stuck one ends the pass. Takes up to cap tokens for their decodes. */
static void swap_in_band(sched *s, step *st, int b, int cap) {
    int used = 0;
    for (int32_t slot = s->bands[b].swapped.head, next; slot != NIL && used < cap; slot = next) {
        req *r = &s->reqs[slot];
        const tenant *t = tenant_of(s, r);
        next = r->link[LINK_QUEUE].next;
        if (r->moved_step == s->steps) continue; /* swapped out this very step */
        int decoding = r->n_total - r->n_computed == 1;
        int32_t need = blocks_for(s, decoding ? r->n_total : r->n_computed);
        /* Held back by its own tenant's limits: that must not hold back
         * anyone else, so try the next one. */
        if (t->kv_blocks + need > t->kv_quota || (t->cfg.max_running && (uint32_t)t->n_running >= t->cfg.max_running))
            continue;
        if ((s->n_run >= s->cfg.max_running || s->kv.n_free < need) &&
            !((s->features & SCHED_FEAT_FAIR_SHARE) && sched__fair_share_room(s, st, r, need, 0)) &&
            !sched__floor_room(s, st, r, need)) {
            swap_stuck(s, st, b, r->tenant);
            break;
        }
        used += swap_in(s, st, slot, need, decoding);
    }
}

/* Predicted to miss its TTFT target if it waits for room. Room comes back
 * when a running request ends; the soonest that can happen without
 * preemption is the smallest remaining max_tokens among them, one decode
 * step each (a stop token may end one earlier: the estimate errs towards
 * protecting the higher band). */
static int ttft_at_risk(const sched *s, const step *st, const req *r) {
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
    cost_features full = {st->plan.budget, s->n_run, 0};
    double step_us = cost_predict_us(&s->cost, &full);
    double t = (double)(st->now_us - r->arrival_us) + (double)soonest * step_us +
               cost_predict_us(&s->cost, &prefill) + step_us;
    return t > 1000.0 * tier->ttft_ms;
}

/* Blocks a new admission of r may take now (0 when admission is closed).
 * Reads (and so moves) the watermark's hysteresis state. */
static int32_t admit_room(sched *s, const step *st, const req *r, int how) {
    if (s->n_run >= s->cfg.max_running || sched__held_by_stuck_swap(s, st, tenant_of(s, r), how)) return 0;
    int bypass_watermark = how != ADMIT_USUAL;
    return bypass_watermark ? s->kv.n_free : kv_admit_room(&s->kv);
}

/* Make room for a request of band b whose TTFT target is at risk by
 * preempting lower bands. Once a scan found no victim below band b, none
 * appears later in the step for b or any band below it: skip the rescans. */
static void preempt_below(sched *s, step *st, int b, int32_t want) {
    victim_filter f = {.above_band = b, .tenant = -1, .for_band = b};
    while (b < st->no_victim_above && (s->n_run >= s->cfg.max_running || s->kv.n_free < want)) {
        int32_t v = sched__choose_victim(s, f);
        if (v == NIL) {
            st->no_victim_above = b;
            break;
        }
        sched__preempt(s, st, v);
    }
}

/* How a fresh request r, wanting `want` blocks of the pool, is admitted;
 * *avail: the blocks it may take then. A request of a band whose TTFT
 * target is at risk makes room below its band and skips the watermark (the
 * headroom it keeps is there for exactly this); a tenant under its shares
 * may claim. */
static int admission_mode(sched *s, step *st, const req *r, int32_t want, int32_t *avail) {
    const tenant *t = tenant_of(s, r);
    int how = ADMIT_USUAL;
    *avail = admit_room(s, st, r, how);
    if (*avail < want && (s->features & SCHED_FEAT_TTFT_PREEMPT) && ttft_at_risk(s, st, r)) {
        preempt_below(s, st, t->band, want);
        how = ADMIT_PAST_WATERMARK;
        *avail = admit_room(s, st, r, how);
    }
    if (*avail < want && (s->features & SCHED_FEAT_FAIR_SHARE) && !sched__held_by_stuck_swap(s, st, t, ADMIT_CLAIM) &&
        sched__fair_share_room(s, st, r, want, 1)) {
        how = ADMIT_CLAIM;
        *avail = admit_room(s, st, r, how);
    }
    if (*avail < want && !sched__held_by_stuck_swap(s, st, t, ADMIT_FLOOR) && sched__floor_room(s, st, r, want)) {
        how = ADMIT_FLOOR;
        *avail = admit_room(s, st, r, how);
    }
    return how;
}

/* The tokens of a chunk of at most n that fit in the blocks r holds plus
 * `avail` more. */
static int32_t chunk_fit(const sched *s, const req *r, int32_t n, int32_t avail) {
    if (blocks_for(s, r->n_computed + n) - r->n_blocks <= avail) return n;
    int64_t fit = (int64_t)(r->n_blocks + avail) * s->cfg.block_size - r->n_computed;
    return fit < n ? (int32_t)fit : n;
}

/* Run n tokens of r's prefill this step: its blocks, its admission when
 * fresh, its charge, its item; a claim's admission makes this a claim step. */
static void commit_prefill(sched *s, step *st, int32_t slot, int32_t n, int fresh, int how) {
    req *r = &s->reqs[slot];
    int32_t need = blocks_for(s, r->n_computed + n) - r->n_blocks;
    if (need > 0) take_blocks(s, r, need); /* sized by chunk_fit within the quota and pool */
    if (fresh) {
        tenant *t = tenant_of(s, r);
        if (r->tokens) {
            t->st.prefix_query_tokens += (uint64_t)r->prompt;
            t->st.prefix_hit_tokens += (uint64_t)r->n_hit;
        }
        if (r->first_hit < 0) r->first_hit = r->n_hit;
        r->state = SCHED_PREFILLING;
        r->started = 1;
        r->match_ver = 0; /* its table is its own now, no longer a probe's result */
        run_add(s, slot);
        band_of(s, r)->n_prefilling++;
    }
    charge_input(s, r, n);
    add_item(s, st, slot, n);
    if (how == ADMIT_CLAIM) sched__claim_step(s, st, tenant_of(s, r));
}

enum { PF_OK, PF_TENANT, PF_GLOBAL };

/* Held back by its tenant this step: a claim step's over-share tenant, or
 * a fresh request over its tenant's running limit or evicted this step. */
static int prefill_held(const sched *s, const step *st, const req *r, int fresh) {
    const tenant *t = tenant_of(s, r);
    return sched__left_out_by_claim(s, st, t) ||
           (fresh && ((t->cfg.max_running && (uint32_t)t->n_running >= t->cfg.max_running) ||
                      r->moved_step == s->steps));
}

/* A fresh request's cache hit (sched.h, "Prefix cache"): the longest
 * cached chain of its prompt's full blocks, found by sched__cache_probe
 * into its table without references. At most (prompt - 1) / block_size
 * blocks, leaving a prompt token to compute, and at most its tenant's
 * quota left less one, leaving a block to compute it in: a hit must never
 * be what keeps a request out. */
static int32_t cache_hit(sched *s, req *r) {
    const tenant *t = tenant_of(s, r);
    int32_t most = min32(sched__cache_probe(s, r), t->kv_quota - t->kv_blocks - 1);
    return most > 0 ? most : 0;
}

/* Of the first k blocks of a probed hit, those no table holds: taking them
 * moves them from the free (cache-only) to the used count. */
static int32_t cache_revived(const sched *s, const req *r, int32_t k) {
    int32_t n = 0;
    for (int32_t i = 0; i < k; i++) n += s->kv.ref[r->table[i]] == 0;
    return n;
}

/* Take the first blocks of r's probed hit into its table, as many as leave
 * a block of `avail` (the room its admission was granted, read before any
 * of them was taken) for its first token to compute: cut short rather than
 * refused. Its positions are computed, and not charged as input. Returns
 * the blocks of avail the taken ones used (the cache-only ones).
 *
 * Why the room is read before: the cache-only blocks of a hit count as
 * free until taken. Taken first, they would count as used in the
 * admission's own room and in the watermark, whose hysteresis state the
 * read moves: a hit near the high watermark would switch admission off for
 * every tenant, and a hit larger than the room would never be admitted,
 * though without the cache the request would be. */
static int32_t cache_attach(sched *s, req *r, int32_t hit, int32_t avail) {
    int32_t k = 0, revived = 0;
    for (; k < hit; k++) {
        int32_t more = s->kv.ref[r->table[k]] == 0;
        if (revived + more + 1 > avail) break;
        revived += more;
    }
    /* A fresh table, hit or not: its chain starts again from the root
     * (a swap's stop no longer holds, its blocks are all given back). */
    r->n_reg = k; /* table[0 .. k) are entries of its chain */
    r->reg_stop = 0;
    r->n_hit = 0;
    if (!k) return 0;
    for (int32_t i = 0; i < k; i++) kv_ref(&s->kv, r->table[i]);
    tenant *t = tenant_of(s, r);
    r->n_blocks = k;
    t->kv_blocks += k;
    r->n_hit = k * s->cfg.block_size;
    set_computed(s, r, r->n_hit);
    r->charged_save = r->n_charged_in;
    if (r->n_charged_in < r->n_hit) r->n_charged_in = r->n_hit;
    return revived;
}

/* Give back a hit whose request was not admitted after all. The blocks go
 * back to cache-only unless another table holds them; the ids stay in the
 * table, still the probe's result. */
static void cache_detach(sched *s, req *r) {
    if (!r->n_hit) return;
    release_blocks(s, r);
    set_computed(s, r, 0);
    r->n_charged_in = r->charged_save;
    r->n_reg = 0;
    r->n_hit = 0;
}

static int32_t plan_chunk(sched *s, step *st, int32_t slot, int room, int fresh, int *why);

/* Plan a prefill chunk of at most `room` tokens for a queued request.
 * Returns the tokens; for none, *why says whether its tenant (PF_TENANT)
 * or the pool (PF_GLOBAL) stopped it. */
static int32_t plan_prefill(sched *s, step *st, int32_t slot, int room, int *why) {
    req *r = &s->reqs[slot];
    int fresh = r->state != SCHED_PREFILLING;
    *why = PF_GLOBAL;
    if (prefill_held(s, st, r, fresh)) {
        *why = PF_TENANT;
        return 0;
    }
    return plan_chunk(s, st, slot, room, fresh, why);
}

/* A fresh request: its cache hit is probed (nothing taken), the admission
 * decided on the work and the pool blocks that hit leaves (its cache-only
 * blocks count, as they leave the free list), then the hit taken within the
 * room granted; so the admission decision and the cost model's view of the
 * chunk see only the work left. Given back if nothing fits after all. */
static int32_t plan_chunk(sched *s, step *st, int32_t slot, int room, int fresh, int *why) {
    req *r = &s->reqs[slot];
    const tenant *t = tenant_of(s, r);
    int how = ADMIT_USUAL;
    int32_t avail = s->kv.n_free;
    if (fresh) {
        const int32_t bs = s->cfg.block_size;
        int32_t hit = cache_hit(s, r);
        int32_t n0 = min32(r->n_total - hit * bs, room);
        int32_t want = cache_revived(s, r, hit) + blocks_for(s, hit * bs + n0) - hit;
        how = admission_mode(s, st, r, want, &avail);
        /* The admission's preemptions release blocks, never add or evict
         * entries: the probe (and hit) still stand. */
        avail -= cache_attach(s, r, min32(hit, cache_hit(s, r)), avail);
    }
    int32_t n = min32(r->n_total - r->n_computed, room);
    int32_t quota = t->kv_quota - t->kv_blocks;
    n = chunk_fit(s, r, n, avail < quota ? avail : quota);
    if (n > 0 && sched__held_short(s, st, t)) {
        n = sched__short_room(s, st, r->n_computed, n);
        if (n < 1) {
            if (fresh) cache_detach(s, r);
            *why = PF_TENANT;
            return 0;
        }
    }
    if (n < 1 && !fresh) {
        /* A started prefill that needs a block and finds none: like a
         * decode, it preempts (possibly itself; FIFO: see grow_running). */
        if (!grow_running(s, st, slot, r->n_computed + 1)) return 0;
        n = chunk_fit(s, r, min32(r->n_total - r->n_computed, room), 0);
    }
    if (n < 1) {
        if (fresh) {
            cache_detach(s, r); /* before the room is read again, below */
            quota = t->kv_quota - t->kv_blocks;
        }
        if (quota <= 0 && !(fresh && admit_room(s, st, r, how) <= 0)) *why = PF_TENANT;
        return 0;
    }
    commit_prefill(s, st, slot, n, fresh, how);
    return n;
}

static int32_t first_unplanned(const sched *s, const tenant *t) {
    int32_t slot = t->queue.head;
    while (slot != NIL && s->reqs[slot].item != NIL) slot = s->reqs[slot].link[LINK_QUEUE].next;
    return slot;
}

/* Started prefills of band b go on before anything new is admitted: they
 * already hold blocks and were admitted in fair order, and leaving them
 * half done while newcomers start spreads the budget over ever more
 * partial prompts (worse TTFT for all, KV held idle). Admission order.
 * Up to cap tokens. */
static void continue_prefills(sched *s, step *st, int b, int cap) {
    if (s->bands[b].n_prefilling == 0) return;
    int used = 0;
    for (int32_t i = 0; i < s->n_run && used < cap && st->left > 0;) {
        int32_t slot = s->run[i];
        req *r = &s->reqs[slot];
        if (r->state != SCHED_PREFILLING || r->item != NIL || tenant_of(s, r)->band != b) {
            i++;
            continue;
        }
        int32_t before = st->plan.n_preempted;
        int why;
        used += plan_prefill(s, st, slot, min32(cap - used, st->left), &why);
        /* A preemption reorders s->run; planned requests have items, so a
         * rescan from the start skips them. Without one, a request that got
         * nothing (no block) is simply passed. */
        i = st->plan.n_preempted != before ? 0 : i + 1;
    }
}

static tenant *tenant_of_fe(fq_entity *e) { return (tenant *)((char *)e - offsetof(tenant, fe)); }

/* Prefill for band b, tenants in fair-queue order, up to cap tokens. */
static void serve_band(sched *s, step *st, int b, int cap) {
    fq *q = &s->bands[b].q;
    int used = 0, look_further = 16;
    int32_t n_skipped = 0;
    while (used < cap && st->left > 0) {
        fq_entity *e = fq_peek(q);
        if (!e) break;
        int32_t slot = first_unplanned(s, tenant_of_fe(e));
        int why = PF_TENANT;
        int32_t n = slot == NIL ? 0 : plan_prefill(s, st, slot, min32(cap - used, st->left), &why);
        if (n > 0) {
            used += n;
            continue;
        }
        /* Nothing more for this tenant this step: set it aside without
         * touching its counter. */
        fq_set_aside(q, e);
        s->skipped[n_skipped++] = e;
        /* Closed for everyone: only started prefills could still move, and
         * tenants with nothing running, which may claim a seat from a
         * tenant over its share (sched__fair_share_room). Look a few
         * tenants further for those, in fair order, without scanning them
         * all. */
        if (why == PF_GLOBAL && s->bands[b].n_prefilling == 0 &&
            (!(s->features & SCHED_FEAT_FAIR_SHARE) || --look_further <= 0))
            break;
    }
    /* A preemption during the pass (a swap-out of its prefilling request)
     * may have emptied a set-aside tenant's queue: it is no longer
     * backlogged and must stay out. */
    for (int32_t i = 0; i < n_skipped; i++)
        if (tenant_of_fe(s->skipped[i])->n_queued > 0) fq_restore(q, s->skipped[i]);
}

static int32_t n_prefilling(const sched *s) {
    int32_t n = 0;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) n += s->bands[b].n_prefilling;
    return n;
}

/* FIFO: one queue in arrival order; the head blocks everyone behind it. */
static void serve_fifo(sched *s, step *st) {
    /* Once admission is closed nothing behind is admitted, but started
     * prefills behind (admitted while the one ahead was held by its tenant's
     * limits, or requeued) still run: they hold blocks, and idle ones could
     * keep admission closed for good. The walk ends once all were seen:
     * `seen` started prefills passed, of n_prefilling. A preemption in the
     * walk may turn one already passed into a preempted request, and then
     * the count cannot tell any more: the walk goes on to the end. */
    int closed = 0, counted = 1;
    int32_t seen = 0;
    for (int32_t slot = s->arrivals.head, next; slot != NIL && st->left > 0; slot = next) {
        next = s->reqs[slot].link[LINK_ARRIVAL].next;
        int started = s->reqs[slot].state == SCHED_PREFILLING;
        if (closed && counted && seen >= n_prefilling(s)) break;
        seen += started;
        if (s->reqs[slot].item != NIL || (closed && !started)) continue;
        int why;
        int32_t before = st->plan.n_preempted;
        if (plan_prefill(s, st, slot, st->left, &why) == 0 && why == PF_GLOBAL) closed = 1;
        if (st->plan.n_preempted != before) counted = 0;
    }
}

static int band_backlogged(const sched *s, int b) {
    return fq_len(&s->bands[b].q) > 0 || s->bands[b].swapped.head != NIL;
}

/* Tokens reserved for band b this step: its minimum share of the budget,
 * less what its decodes already took, and no more than it has to run. */
static int band_reserve(const sched *s, const step *st, int b) {
    double share = sched__band_floor(s, b);
    if (share <= 0 || !band_backlogged(s, b)) return 0;
    int reserve = (int)ceil(share * st->plan.budget) - st->used[b];
    int64_t work = s->bands[b].pending_tokens + (s->bands[b].swapped.head != NIL ? reserve : 0);
    if (reserve > work) reserve = (int)work;
    return reserve > 0 ? reserve : 0;
}

/* Serve band b within `allowance` tokens: swap-ins, then started prefills,
 * then new admissions. While it is served, st->left is the band's
 * allowance; preemptions it makes give their tokens back to that. Returns
 * the tokens it used (negative when it gave back more than it took). */
static int serve_one_band(sched *s, step *st, int b, int allowance) {
    int outer = st->left;
    st->left = allowance;
    swap_in_band(s, st, b, st->left);
    if (st->left > 0) continue_prefills(s, st, b, st->left);
    if (st->left > 0) serve_band(s, st, b, st->left);
    int used = allowance - st->left;
    st->left = outer - used;
    return used;
}

/* Bands in priority order. Each band may use its reservation plus whatever
 * the bands above left unreserved; what it does not use flows down. The
 * reservations are honoured even when running decodes already fill the
 * budget (a floor is a floor), so such a step may exceed the budget by at
 * most the sum of the shares. */
static void serve_bands(sched *s, step *st) {
    int reserve[SCHED_MAX_TIERS] = {0}, total = 0;
    if (s->features & SCHED_FEAT_MIN_SHARE)
        for (int b = 0; b < SCHED_MAX_TIERS; b++) total += reserve[b] = band_reserve(s, st, b);
    int spare = st->left - total;
    if (spare < 0) spare = 0;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        int allowance = reserve[b] + spare;
        /* A band whose allowance the lower bands' reserves ate still moves
         * its started prefills a block's worth: they hold seats, and with
         * few seats nothing else could ever run. */
        if (allowance <= 0 && s->bands[b].n_prefilling > 0) allowance = s->cfg.block_size;
        /* A band with nothing waiting (its reserve is then 0) passes the
         * spare on untouched: the common decode-only step skips it. */
        if (allowance <= 0 || (!band_backlogged(s, b) && s->bands[b].n_prefilling == 0)) continue;
        spare = allowance - serve_one_band(s, st, b, allowance);
    }
}

/* Hand out the plan, with its predicted time. */
static void finish_plan(sched *s, step *st, sched_plan *out) {
    compact_items(s, st);
    sched_plan *p = &st->plan;
    for (int32_t i = 0; i < p->n_items; i++) {
        sched_item *it = &p->items[i];
        it->n_blocks = s->reqs[(uint32_t)it->id].n_blocks; /* tables may have grown since */
        p->n_tokens += it->n_tokens;
    }
    p->predicted_us = cost_predict_us(&s->cost, &st->feat);
    p->feat = st->feat;
    *out = *p;
}

int sched_step(sched *s, int64_t now_us, sched_plan *out) {
    if (s->st.in_flight) return TS_ERR_INVAL;
    s->steps++;
    step *st = &s->st;
    *st = (step){.plan = {.items = s->items, .swap_out = s->swap_out, .swap_in = s->swap_in,
                          .preempted = s->preempted},
                 .now_us = now_us,
                 .swap_stuck_band = SCHED_MAX_TIERS,
                 .swap_stuck_tenant = NIL,
                 .no_victim_above = SCHED_MAX_TIERS,
                 .claim_band = -1};
    expire_timeouts(s, st);
    weigh_bands(s, st);
    sched__floor_weigh(s, st);
    sched__short_step(s, st);
    st->plan.budget = compute_budget(s, st);
    st->left = st->plan.budget;
    plan_decodes(s, st);
    if (s->features & SCHED__FEAT_FIFO) {
        for (int b = 0; b < SCHED_MAX_TIERS; b++) swap_in_band(s, st, b, st->left > 0 ? st->left : 0);
        serve_fifo(s, st);
    } else {
        serve_bands(s, st);
    }
    finish_plan(s, st, out);
    st->in_flight = 1;
    return 0;
}

/* ---- the step's outcome ---------------------------------------------------- */

/* Account one executed item: tokens into the cache, a sampled token, the
 * end of the request when it is done. */
static void item_done(sched *s, const sched_item *it, const sched_item_result *res, double share_us,
                      int64_t now_us, double svc[SCHED_MAX_TIERS]) {
    int32_t slot = (int32_t)(uint32_t)it->id;
    req *r = &s->reqs[slot];
    tenant *t = tenant_of(s, r);
    r->item = NIL;
    if (!it->is_prefill) r->decoded_step = s->steps; /* ran: its turn is over (short steps) */
    r->engine_us += share_us;
    t->st.engine_us += share_us;
    if (it->is_prefill) t->st.prompt_tokens += (uint64_t)it->n_tokens;
    t->st.service += s->cfg.w_in * (double)r->charge;
    svc[t->band] += s->cfg.w_in * (double)r->charge;
    r->charge = 0;
    set_computed(s, r, r->n_computed + it->n_tokens);
    sched__cache_add(s, r);
    if (!it->sample) return;
    if (r->state == SCHED_PREFILLING) {
        tq_unlink(s, slot);
        band_of(s, r)->n_prefilling--;
        r->state = SCHED_DECODING;
    }
    r->n_total++;
    r->generated++;
    r->token_us = now_us;
    if (!r->first_token_us) r->first_token_us = now_us;
    fq_charge_units(&s->bands[t->band].q, &t->fe, t->out_units);
    t->st.service += s->cfg.w_out;
    svc[t->band] += s->cfg.w_out;
    t->st.output_tokens++;
    if (res->finished || r->generated >= r->max_new) end_request(s, slot, SCHED_FINISHED, SCHED_R_NONE, now_us);
}

/* Requests that took part in the step in any way: items, and copies. */
static void end_pending_cancels(sched *s, const step *st, int64_t now_us) {
    const sched_plan *p = &st->plan;
    for (int32_t i = 0; i < p->n_items; i++) {
        int32_t slot = (int32_t)(uint32_t)p->items[i].id;
        if (s->reqs[slot].cancel_pending) end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE, now_us);
    }
    for (int32_t i = 0; i < p->n_preempted; i++) {
        int32_t slot = (int32_t)(uint32_t)p->preempted[i].id;
        if (s->reqs[slot].cancel_pending) end_request(s, slot, SCHED_CANCELLED, SCHED_R_NONE, now_us);
    }
    for (int32_t i = 0; i < st->n_swapped_in; i++)
        if (s->reqs[s->swapped_in[i]].cancel_pending)
            end_request(s, s->swapped_in[i], SCHED_CANCELLED, SCHED_R_NONE, now_us);
}

/* The executor failed: every request the step touched fails, explicitly. */
static void fail_step(sched *s, const step *st, int64_t now_us) {
    const sched_plan *p = &st->plan;
    for (int32_t i = 0; i < p->n_items; i++) {
        int32_t slot = (int32_t)(uint32_t)p->items[i].id;
        req *r = &s->reqs[slot];
        refund_input(s, r); /* the tokens never ran: no service to charge */
        r->item = NIL;
        end_request(s, slot, SCHED_FAILED, SCHED_R_EXECUTOR, now_us);
    }
    for (int32_t i = 0; i < p->n_preempted; i++) {
        int32_t slot = (int32_t)(uint32_t)p->preempted[i].id;
        if (s->reqs[slot].state == SCHED_PREEMPTED_SWAPPED && s->reqs[slot].moved_step == s->steps)
            end_request(s, slot, SCHED_FAILED, SCHED_R_EXECUTOR, now_us);
    }
    for (int32_t i = 0; i < st->n_swapped_in; i++)
        end_request(s, s->swapped_in[i], SCHED_FAILED, SCHED_R_EXECUTOR, now_us);
}

/* The executor ran the step: account its items and fit the cost model. */
static void step_ran(sched *s, const step *st, const sched_result *res, int64_t now_us) {
    const sched_plan *p = &st->plan;
    double tokens = 0, svc[SCHED_MAX_TIERS] = {0};
    for (int32_t i = 0; i < p->n_items; i++) tokens += p->items[i].n_tokens;
    for (int32_t i = 0; i < p->n_items; i++)
        item_done(s, &p->items[i], &res->items[i], tokens > 0 ? res->step_us * p->items[i].n_tokens / tokens : 0,
                  now_us, svc);
    sched__floor_count(s, svc);
    if (p->n_items && res->step_us > 0) cost_observe(&s->cost, &st->feat, res->step_us);
    double moved = s->cfg.block_bytes * (double)(p->n_swap_out + p->n_swap_in);
    if (moved > 0 && res->copy_us > 0) cost_observe_copy(&s->cost, moved, res->copy_us);
}

int sched_step_done(sched *s, int64_t now_us, const sched_result *res) {
    step *st = &s->st;
    if (!st->in_flight || !res || res->n_items != st->plan.n_items || (st->plan.n_items && !res->items))
        return TS_ERR_INVAL;
    /* The swap-ins have been copied: their host slots are free now. */
    for (int32_t i = 0; i < st->n_swapped_in; i++) {
        req *r = &s->reqs[s->swapped_in[i]];
        if (r->state < SCHED_FINISHED) release_host(s, r);
    }
    if (res->failed) fail_step(s, st, now_us);
    else step_ran(s, st, res, now_us);
    end_pending_cancels(s, st, now_us);
    st->in_flight = 0;
    return 0;
}

/* ---- prefetch ------------------------------------------------------------------- */

static void prefetch_range(const void *p, size_t n) {
    const char *c = p;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(c + o);
}

void sched_prefetch(const sched *s, int stage) {
    if (stage == 0) {
        prefetch_range(s, sizeof *s);
    } else if (stage == 1) {
        /* a step's part of each tenant (struct tenant's first lines) */
        for (int32_t i = 0; i < s->n_tenants; i++)
            prefetch_range(&s->tenants[i], offsetof(tenant, cfg.weight) + sizeof(double));
        prefetch_range(s->run, (size_t)s->n_run * sizeof(int32_t));
        prefetch_range(s->items, (size_t)s->st.plan.n_items * sizeof(sched_item));
        if (s->kv.n_stack > 0) __builtin_prefetch(&s->kv.free_ids[s->kv.n_stack - 1]);
        if (s->deadlines.n) __builtin_prefetch(s->deadlines.v);
        for (int b = 0; b < SCHED_MAX_TIERS; b++)
            if (s->bands[b].q.h.n) __builtin_prefetch(s->bands[b].q.h.v);
    } else {
        /* a step's part of each request (struct req's first lines) */
        for (int32_t i = 0; i < s->n_run; i++) prefetch_range(&s->reqs[s->run[i]], offsetof(req, in_use));
        if (s->kv.n_stack > 0) __builtin_prefetch(&s->kv.ref[s->kv.free_ids[s->kv.n_stack - 1]]);
    }
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

/* Each device block is free (kv_check: no reference) or held by as many
 * tables as its reference count says, and by more than one only when it is
 * a prefix cache entry. */
static int check_device_owners(const sched *s) {
    int32_t n = s->kv.n_blocks;
    memset(s->occ, 0, (size_t)n * sizeof(int32_t));
    for (int32_t i = 0; i < s->cfg.max_requests; i++) {
        const req *r = &s->reqs[i];
        if (!r->in_use) continue;
        for (int32_t j = 0; j < r->n_blocks; j++) {
            if (r->table[j] < 0 || r->table[j] >= n) return TS_ERR_KV_BLOCK;
            s->occ[r->table[j]]++;
        }
    }
    for (int32_t id = 0; id < n; id++)
        if (s->occ[id] != s->kv.ref[id] || (s->occ[id] > 1 && !pfx_has(&s->kv.ix, id))) return TS_ERR_KV_BLOCK;
    return 0;
}

/* Each host slot is exactly one of: free, or in one request's host slots.
 * Counting alone would miss a slot in two requests. */
static int check_host_owners(const sched *s) {
    int32_t n = s->kv.n_swap, marked = 0;
    memset(s->seen, 0, (size_t)(n ? n : 1));
    for (int32_t i = 0; i < s->kv.n_swap_free; i++, marked++) s->seen[s->kv.swap_free_ids[i]] = 1;
    for (int32_t i = 0; i < s->cfg.max_requests; i++) {
        const req *r = &s->reqs[i];
        if (!r->in_use) continue;
        for (int32_t j = 0; j < r->n_host; j++, marked++) {
            if (r->host[j] < 0 || r->host[j] >= n || s->seen[r->host[j]]) return TS_ERR_KV_BLOCK;
            s->seen[r->host[j]] = 1;
        }
    }
    return marked == n ? 0 : TS_ERR_KV_BLOCK;
}

int sched_check(const sched *s) {
    int rc = kv_check(&s->kv);
    if (!rc) rc = check_device_owners(s);
    if (!rc) rc = check_host_owners(s);
    if (rc) return rc;
    int32_t dev = 0, host = 0, running = 0;
    int32_t *queued = s->scratch;
    memset(queued, 0, (size_t)s->cfg.max_tenants * sizeof(int32_t));
    rc = check_requests(s, &dev, &host, queued, &running);
    /* Swap-ins of the step in flight still hold their host slots. Device
     * blocks were matched to the tables by check_device_owners: dev counts
     * a shared block once per table, as the tenants are charged. */
    if (!rc && (host != kv_swapped(&s->kv) || running != s->n_run)) rc = TS_ERR_KV_BLOCK;
    int32_t tenant_blocks = 0, n_queued = 0, n_swapped = 0;
    for (int32_t i = 0; !rc && i < s->n_tenants; i++) {
        const tenant *t = &s->tenants[i];
        tenant_blocks += t->kv_blocks;
        n_queued += t->n_queued;
        n_swapped += t->n_swapped;
        if (queued[i] != t->n_queued || (t->n_queued > 0) != (t->fe.heap_pos >= 0)) rc = TS_ERR_INVAL;
        if (t->kv_blocks > t->kv_quota) rc = TS_ERR_KV_BLOCK;
    }
    if (!rc && tenant_blocks != dev) rc = TS_ERR_KV_BLOCK;
    if (!rc && (n_queued != s->n_queued || n_swapped != s->n_swapped)) rc = TS_ERR_INVAL;
    return rc;
}
