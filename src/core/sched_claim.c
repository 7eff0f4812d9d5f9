/*
 * sched_claim.c - claims: isolation between the tenants of one band.
 *
 * Problem. The fair queue (fq.h) decides who is admitted next but never
 * takes a seat back. A tenant that flooded the band while the others were
 * idle holds every seat and the KV pool, and a tenant arriving later waits
 * for the flood's requests to end, however small its virtual counter.
 *
 * Shares. Let W_b be the weight of the tenants of band b with work (queued,
 * running or swapped) this step. Tenant f of weight w_f is entitled to
 *     seats_f = max(1, max_running * w_f / W_b)     (a tenant with work
 *     kv_f    = n_blocks * w_f / W_b                 must be able to run)
 * and is over its shares by the larger of (running - seats_f) / seats_f and
 * (kv_blocks - kv_f) / kv_f.
 *
 * Rule. A tenant that would stay within both shares with one more request
 * of `want` blocks (and within its KV quota) may claim: it preempts, in its
 * own band, requests of the tenant furthest over its shares (newest first)
 * until the request fits. A victim's tenant must keep one of its shares
 * without the request, so claims converge instead of trading the same
 * seats, and must not be behind the claimant in virtual time by more than
 * one unit U = w_in * budget_max / w_claimant (one full prefill chunk).
 *
 * What that guarantees, and the bounds:
 *  - A tenant under its shares gets its request's first prefill chunk in
 *    the step after the request arrives, however long the flood is, when
 *    its band has budget left for it and the band's pass reaches it (in
 *    fair order, a few tenants past those that admission refuses; see
 *    serve_band). The claim passes the watermark's hysteresis (that pause
 *    is for the tenants that filled the pool) and a stuck swap-in of
 *    another tenant of its band (a stuck one of its own goes first), and
 *    the claim step leaves out the over-share tenants' items, so the first
 *    token is not padded by the flood's batch. The slack U lets a claimant
 *    that has just paid for its previous prompt claim again at once: VTC
 *    allows that much between backlogged tenants. test_isolation_claim:
 *    each of 60 arrivals against a flood that holds every seat is served
 *    in the step after it arrives.
 *  - Claims never starve the flood. A claim step leaves out a running
 *    request of an over-share tenant only if it was not left out of the
 *    step before and was not swapped in this step, so each such request
 *    advances at least every other step, whatever the number of claimants;
 *    after a claim, the step admits only tenants under their shares, and
 *    the others' prefills wait for a step without a claim. A claim that a
 *    stuck swap-in would refuse preempts nobody. test_claims_bounded: with
 *    three tenants claiming step after step, the flood is never left out of
 *    two steps in a row, and none of its swapped-out requests waits 200
 *    steps (10 measured).
 *  - The fairness bound of fq.h, |S_f/w_f - S_g/w_g| <= 2U for two tenants
 *    of a band continuously backlogged, holds with claims on. Claims charge
 *    nothing themselves: the claimant's chunk is charged through the fair
 *    queue like any other, a left-out item's provisional charge is refunded
 *    (sched__drop_item), and recompute never charges input twice. They only
 *    move seats, and never from a tenant more than U behind the claimant,
 *    which is within what VTC's argument already allows. That is an
 *    argument, not a proof: test_fairness_bound measures it (every feature
 *    on) where the pool holds no more tokens than one step's budget; with a
 *    larger pool, decodes the counters do not gate move the gap further
 *    (test_fairness_big_pool reports it).
 */
#include <stdint.h>

#include "sched_int.h"

/* Seats a tenant is entitled to in its band while the band's tenants with
 * work share the seats by weight: never less than one, since a tenant with
 * any work must be able to run something. */
static double seat_share(const sched *s, const step *st, const tenant *t) {
    double w = st->w_active[t->band];
    double share = w > 0 ? s->cfg.max_running * t->cfg.weight / w : 1;
    return share < 1 ? 1 : share;
}

/* Blocks of the pool a tenant is entitled to in its band, like its seats. */
static double kv_share(const sched *s, const step *st, const tenant *t) {
    double w = st->w_active[t->band];
    return w > 0 ? s->kv.n_blocks * t->cfg.weight / w : s->kv.n_blocks;
}

/* A tenant that may take one more seat and `want` more blocks within its
 * shares of its band's seats and KV pool. */
static int under_shares(const sched *s, const step *st, const tenant *t, int32_t want) {
    return t->n_running + 1 <= seat_share(s, st, t) && t->kv_blocks + want <= kv_share(s, st, t);
}

/* How far a tenant is over its shares, relative to them: the larger of
 * the seat and the KV figure. */
static double overshoot(const sched *s, const step *st, const tenant *u) {
    double seats = seat_share(s, st, u), kv = kv_share(s, st, u);
    double a = (u->n_running - seats) / seats, b = kv > 0 ? (u->kv_blocks - kv) / kv : 0;
    return a > b ? a : b;
}

/* The running request of band b whose tenant keeps at least its share of
 * seats, or of KV blocks, without it, and is not behind the claimant in
 * weighted service by more than one service unit; of the tenant furthest
 * over (then its newest request), or NIL. Nobody is taken below both of
 * its shares, so claims converge instead of trading seats. */
static int32_t over_share_victim(const sched *s, const step *st, int b, const tenant *claimant) {
    int32_t best = NIL;
    double best_over = 0;
    /* The claimant may be ahead by one unit U: right after paying for its
     * prompt it is ahead of a flood charged a few tokens a step, and its
     * next request would otherwise wait many steps for the flood to catch
     * up. Further behind than that, the fair queue serves the victim first
     * anyway: the seat rule then works with it. (U in counter units; a
     * weight near 0 must not overflow it.) */
    double unit = FQ_SCALE * s->cfg.w_in * s->cfg.budget_max / claimant->cfg.weight;
    int64_t slack = unit < (double)(INT64_MAX / 2) ? (int64_t)unit : INT64_MAX / 2;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        const tenant *u = &s->tenants[r->tenant];
        if (u->band != b || u == claimant || r->moved_step == s->steps ||
            fq_diff(u->fe.vtime, claimant->fe.vtime) < -slack)
            continue;
        if (u->n_running - 1 < seat_share(s, st, u) && u->kv_blocks - r->n_blocks < kv_share(s, st, u)) continue;
        double over = overshoot(s, st, u);
        if (best == NIL || over > best_over ||
            (over == best_over && r->arrival_seq > s->reqs[best].arrival_seq)) {
            best = s->run[i];
            best_over = over;
        }
    }
    return best;
}

/* A stuck swap-in closes admission to its band and the ones below, or
 * newcomers would take the blocks it waits for. A claim in that band takes
 * its room from tenants over their shares instead, so it passes, unless
 * the stuck request is the claimant's own: that one comes first. Claims in
 * lower bands are held like everything else. */
int sched__held_by_stuck_swap(const sched *s, const step *st, const tenant *t, int how) {
    /* A band under its floor takes its room from other bands: only a stuck
     * swap-in of its own band (which claims first) holds it. */
    if (how == ADMIT_FLOOR) return t->band == st->swap_stuck_band;
    if (t->band != st->swap_stuck_band) return t->band > st->swap_stuck_band;
    return how != ADMIT_CLAIM || st->swap_stuck_tenant == NIL || t == &s->tenants[st->swap_stuck_tenant];
}

/* Make room for r by a claim: preempt over-share requests of its band until
 * a seat and `want` blocks are free (for a new request, `below_high`: also
 * under the high watermark). Returns 1 if it has room then. Callers check a
 * stuck swap-in first (sched__held_by_stuck_swap), so that nothing is
 * preempted for a refused claim. */
int sched__fair_share_room(sched *s, step *st, const req *r, int32_t want, int below_high) {
    const tenant *t = &s->tenants[r->tenant];
    /* A claim stops at the claimant's own shares, and victims keep theirs,
     * so claims converge instead of trading the same seats; and there is
     * none for a chunk that its own KV quota would not let it take (it
     * would preempt others for blocks it cannot use). */
    if (!under_shares(s, st, t, want) || t->kv_blocks + want > t->kv_quota) return 0;
    int32_t v = over_share_victim(s, st, t->band, t);
    if (v == NIL) return 0; /* nobody holds more than its share: usual rules */
    while (v != NIL && (s->n_run >= s->cfg.max_running || s->kv.n_free < want ||
                        (below_high && kv_used(&s->kv) + want > s->kv.high_blocks))) {
        sched__preempt(s, st, v);
        v = over_share_victim(s, st, t->band, t);
    }
    return s->n_run < s->cfg.max_running && s->kv.n_free >= want;
}

/* The step that seats a claimant carries its prefill, not the work of the
 * tenants over their shares in its band, so the claimant's first token
 * comes about as fast as if it were alone instead of after a step padded
 * with the flood's batch. A request is left out at most every other step,
 * and never in the step it was swapped in: claimants arriving step after
 * step must not stop an over-share tenant's running requests (their tokens
 * wait one step at most). */
void sched__claim_step(sched *s, step *st, const tenant *claimant) {
    st->claim_band = claimant->band;
    for (int32_t i = 0; i < s->n_run; i++) {
        req *r = &s->reqs[s->run[i]];
        const tenant *u = &s->tenants[r->tenant];
        if (u == claimant || u->band != claimant->band || r->item == NIL || overshoot(s, st, u) <= 0 ||
            r->moved_step == s->steps || (r->dropped_step && r->dropped_step + 1 == s->steps))
            continue;
        sched__drop_item(s, st, r);
        r->dropped_step = s->steps;
    }
}

/* After a claim, the step admits only tenants under their shares in the
 * claim's band (more claimants); the others wait for a step without one. */
int sched__left_out_by_claim(const sched *s, const step *st, const tenant *t) {
    return t->band == st->claim_band && overshoot(s, st, t) > 0;
}
