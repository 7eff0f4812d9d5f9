/*
 * sched_floor.c - band floors: a tier's minimum share held against the
 * floods of higher bands.
 *
 * Problem. Bands are served in priority order: a band gets seats and KV
 * blocks only when the bands above leave some. A step reserves each
 * backlogged band's minimum share of its token budget (serve_bands), but
 * tokens are worth nothing without a seat: a gold flood that holds every
 * seat keeps silver's queue at zero service however large its reservation.
 *
 * Definition. A band's service is the weighted tokens its requests ran
 * (w_in per prompt token, w_out per output token: the `service` of
 * sched_tenant_stats), and its share is that over all bands' service,
 * both as moving sums over the last SCHED_FLOOR_STEPS steps (an
 * exponential window: each step scales the sums by 1 - 1/SCHED_FLOOR_STEPS
 * before adding its own). The floor of a band is the largest min_share of
 * its tiers. While a band has requests waiting, the scheduler holds its
 * share at or above its floor, as follows:
 *  - claim: a band whose share, over the window and in the step before,
 *    is under its floor may seat one request a step by preempting
 *    requests of other bands (lowest band first, then largest KV, then
 *    newest; sched.c's victim order), past the watermark's hysteresis and
 *    other bands' stuck swap-ins;
 *  - keep: no other band preempts, for its TTFT, its growth or a claim
 *    of its own, a band whose share is under its floor plus a margin (half
 *    the floor and one seat's worth, 1 / max_running, but at most the
 *    floor), so a seat it claimed is not taken back the next step: the
 *    margin covers the share one claimed request adds. Kept while nothing
 *    waits too: taking its running requests would only make it backlogged
 *    and claim back, and two bands would trade the pool for ever
 *    (test_floor_and_growth). A growing request that finds only kept
 *    requests to evict preempts itself and waits; the kept band's requests
 *    finish, so the oldest request still always finishes;
 *  - and the step's budget keeps reserving the band's floor in tokens for
 *    its prefills (serve_bands), so a claimed seat has tokens to run.
 * What it costs the higher bands: at most the sum of the floors (which the
 * configuration keeps at or under 1) of service while the lower bands are
 * backlogged, and one preemption a step per band under its floor. What it
 * does not promise: a band can only be given what it can run; a request
 * larger than every victim's blocks together, or a tenant held by its own
 * quota, waits as before. test_band_floor_flood and test_floors_random
 * (test_sched_prop.c) measure the share held over random floods.
 */
#include <stdint.h>

#include "sched_int.h"

#define FLOOR_DECAY (1.0 - 1.0 / SCHED_FLOOR_STEPS)

double sched__band_floor(const sched *s, int b) { return s->band_floor[b]; }

/* Start of a step: the previous step's service becomes "the step before",
 * the window slides, and each band's claim and keep flags are set. */
void sched__floor_weigh(sched *s, step *st) {
    floor_acct *a = &s->floor;
    double last_sum = 0;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) last_sum += a->step_svc[b];
    a->sum *= FLOOR_DECAY;
    if (a->sum < 1e-9) a->sum = 0; /* long runs of empty steps: no denormal crawl */
    int on = (s->features & SCHED_FEAT_MIN_SHARE) && !(s->features & SCHED__FEAT_FIFO);
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        double last = a->step_svc[b];
        a->step_svc[b] = 0;
        a->svc[b] *= FLOOR_DECAY;
        if (a->svc[b] < 1e-9) a->svc[b] = 0;
        double m = s->band_floor[b];
        if (!on || m <= 0) continue;
        double margin = m / 2 + 1.0 / s->cfg.max_running;
        if (margin > m) margin = m;
        st->floor_kept[b] = a->svc[b] < (m + margin) * a->sum || a->sum == 0;
        st->floor_claim[b] = a->svc[b] < m * a->sum && last < m * last_sum;
    }
}

/* A step ran: svc[b] service units of band b. */
void sched__floor_count(sched *s, const double svc[SCHED_MAX_TIERS]) {
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        s->floor.svc[b] += svc[b];
        s->floor.sum += svc[b];
        s->floor.step_svc[b] += svc[b];
    }
}

/* Could preempting other bands' requests free a seat and `want` blocks
 * for band b? Checked first so that a claim that cannot succeed preempts
 * nobody. */
static int floor_feasible(const sched *s, int b, int32_t want) {
    victim_filter f = {.above_band = -1, .tenant = -1, .for_band = b, .other_bands = 1};
    int64_t blocks = s->kv.n_free;
    int victims = 0;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        if (!sched__victim_ok(s, r, f)) continue;
        victims++;
        blocks += r->n_blocks;
    }
    return blocks >= want && (s->n_run < s->cfg.max_running || victims > 0);
}

/* Make room for r, of a band under its floor, by preempting other bands'
 * requests until a seat and `want` blocks are free. One claim per band and
 * step. Returns 1 if r has room then. */
int sched__floor_room(sched *s, step *st, const req *r, int32_t want) {
    const tenant *t = &s->tenants[r->tenant];
    int b = t->band;
    if (!st->floor_claim[b] || t->kv_blocks + want > t->kv_quota || !floor_feasible(s, b, want)) return 0;
    st->floor_claim[b] = 0;
    victim_filter f = {.above_band = -1, .tenant = -1, .for_band = b, .other_bands = 1};
    while (s->n_run >= s->cfg.max_running || s->kv.n_free < want) {
        int32_t v = sched__choose_victim(s, f);
        if (v == NIL) break;
        sched__preempt(s, st, v);
    }
    return s->n_run < s->cfg.max_running && s->kv.n_free >= want;
}
