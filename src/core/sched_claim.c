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
 *    stuck swap-in would refuse preempts nobody. (Short steps, below, make
 *    a flood's requests take turns on top of that, within their own bound.)
 *    test_claims_bounded: with
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
#include <stdlib.h>
#include <string.h>

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
            fq_diff(fq_key(&u->fe), fq_key(&claimant->fe)) < -slack)
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

/* ---- short steps --------------------------------------------------------------
 *
 * A claim seats a newcomer in the step after it arrives, but it first
 * waits for the step in flight, and with many seats that is a long step of
 * the flood's decodes: at 32 seats the victim of scenarios/isolation.yaml
 * waited ~25 ms for it, beside a first step of ~18 ms of its own (ratio
 * 2.4 and worse). So while a band is flooded (sched__short_step) and a
 * present tenant is under its share (one that had work within
 * presence_us, so is expected back), the flood's work is split into short steps:
 * their decodes take turns (least recently decoded first) and their
 * prefill chunks shrink so that the step's predicted time stays within
 * SHORT_FRACTION of the predicted time of the present tenant's own first
 * step (its average prompt, alone). A newcomer then waits at most that
 * fraction of its own first step before it runs: with 1/2, its TTFT is at
 * most 1.5 times what it would be alone, as far as the cost model is
 * right. Shares here count present tenants, not only those with work this
 * instant: an idle victim between two requests keeps its seats' worth.
 * The cost falls on the over-share tenants: more, shorter steps (the fixed
 * per-step cost more often) while someone under its share is around. That
 * cost is bounded: of their decodes, a step runs at least as many as
 * keep (1 - SHORT_MAX_LOSS) of the throughput of running them all in it,
 * and of their prompt chunks the first gets as much (where the fixed step
 * cost dominates, as on a GPU, splitting buys little latency and these
 * floors then split nothing). Their decodes take turns, least recently
 * decoded first, so each request advances; a decode whose tier has a TPOT
 * target runs anyway once waiting longer would miss it. A step so lasts
 * at most the bound or the decodes' floor, plus one chunk at its floor. */

#define SHORT_FRACTION 0.5
#define SHORT_MAX_LOSS 0.25

/* Seats of a tenant's band that are its own when its present tenants share
 * them by weight (cf. seat_share, which counts those with work now). */
static double present_seats(const sched *s, const step *st, const tenant *t) {
    double share = st->seats_per_w[t->band] * t->cfg.weight;
    return share < 1 ? 1 : share;
}

/* Over its present share of the seats or of the KV pool (cf. overshoot):
 * a flood of long prompts holds the pool with few seats. Only where the
 * share is two seats or more: with more present tenants than seats, as in
 * a busy band of many tenants, a share is a fraction of a seat, every
 * tenant that runs anything is over it, and that is load, not a flood. */
static int over_present(const sched *s, const step *st, const tenant *t) {
    double seats = st->seats_per_w[t->band] * t->cfg.weight;
    if (seats < 2) return 0;
    return t->n_running > seats || t->kv_blocks > seats / s->cfg.max_running * s->kv.n_blocks;
}

/* Room for one more request within its present shares: a claimant. */
static int under_present(const sched *s, const step *st, const tenant *t) {
    return t->n_running + 1 <= present_seats(s, st, t) && !over_present(s, st, t);
}

/* Whether a tenant's work is a flood's, with hysteresis: it becomes one
 * over its present share and stops being one only once it could claim
 * again (a seat under its share). A flood refilling its share seat by
 * seat would otherwise flap in and out of the short steps at every seat. */
static int flooding(const sched *s, const step *st, tenant *t) {
    /* Asked once per running request; its inputs hold through the step. */
    if (t->flood_step == s->steps) return t->flooding;
    t->flood_step = s->steps;
    if (over_present(s, st, t)) t->flooding = 1;
    else if (under_present(s, st, t)) t->flooding = 0;
    return t->flooding;
}

static double first_step_us(const sched *s, double prompt) {
    cost_features f = {prompt, 0, cost_attended(0, prompt)};
    return cost_predict_us(&s->cost, &f);
}

/* Start of a step, after weigh_bands: whether (and how short) this is a
 * short step. A band needs one when it is flooded, that is when tenants
 * over their present share hold most of its running requests (a busy band
 * of many tenants a seat or two each is load, not a flood: its steps are
 * what they are for everyone), and a present tenant is under its share;
 * short_us is the strictest bound of those bands. The flood is found from
 * the running set, so a step without one costs O(running), not O(tenants). */
void sched__short_step(sched *s, step *st) {
    if (!(s->features & SCHED_FEAT_RESPONSIVE) || (s->features & SCHED__FEAT_FIFO)) return;
    int possible = 0; /* a band where a share reaches two seats (over_present) */
    for (int b = 0; b < SCHED_MAX_TIERS; b++) possible |= st->seats_most[b] >= 2;
    if (!possible) return;
    int32_t running[SCHED_MAX_TIERS] = {0}, flood[SCHED_MAX_TIERS] = {0};
    for (int32_t i = 0; i < s->n_run; i++) {
        tenant *t = &s->tenants[s->reqs[s->run[i]].tenant];
        running[t->band]++;
        flood[t->band] += flooding(s, st, t);
    }
    int over[SCHED_MAX_TIERS], any = 0;
    for (int b = 0; b < SCHED_MAX_TIERS; b++) any |= over[b] = 2 * flood[b] > running[b];
    if (!any) return;
    double prompt[SCHED_MAX_TIERS] = {0};
    for (int32_t i = 0; i < s->n_tenants; i++) {
        tenant *t = &s->tenants[i];
        if (!t->n_running) t->flooding = 0; /* its flag was last set while it ran */
        /* Not a tenant with a backlog of its own: its next request would
         * wait behind its queue whatever the step. (One waiting request
         * is no backlog: it claims in this step, and the next may arrive
         * during it.) */
        if (!over[t->band] || t->n_queued + t->n_swapped > 1 || !sched__present(s, st, t) ||
            !under_present(s, st, t))
            continue;
        if (prompt[t->band] == 0 || t->prompt_avg < prompt[t->band]) prompt[t->band] = t->prompt_avg;
    }
    for (int b = 0; b < SCHED_MAX_TIERS; b++) {
        if (prompt[b] <= 0) continue;
        double cap = SHORT_FRACTION * first_step_us(s, prompt[b]);
        st->short_band[b] = 1;
        if (st->short_us == 0 || cap < st->short_us) st->short_us = cap;
    }
}

static double predict_with(const sched *s, const cost_features *base, double prefill, double decodes, double ctx) {
    cost_features f = {base->prefill_tokens + prefill, base->decode_seqs + decodes, base->context_tokens + ctx};
    return cost_predict_us(&s->cost, &f);
}

/* Features of the plan's items of tenants not held short: the work the
 * over-share tenants' own is weighed against. */
static void unheld_features(const sched *s, const step *st, cost_features *f) {
    const sched_plan *p = &st->plan;
    *f = (cost_features){0, 0, 0};
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        if (it->n_tokens && !sched__held_short(s, st, &s->tenants[it->tenant])) sched__feat_add(f, it, 1);
    }
}

/* Tokens of a prefill chunk at position pos, at most n, that keep the
 * short step within its bound (possibly none); but the step's first
 * over-share chunk gets at least as many as keep (1 - SHORT_MAX_LOSS) of
 * the throughput of the whole chunk beside the other tenants' work (once
 * a step: a floor for every chunk would let the step grow chunk by chunk,
 * and without any the flood's new requests would wait for its decodes to
 * thin out). Throughput grows with the chunk (the fixed cost spreads), so
 * both are searches. */
int32_t sched__short_room(const sched *s, step *st, int32_t pos, int32_t n) {
    cost_features b = st->feat;
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (predict_with(s, &b, mid, 0, cost_attended(pos, mid)) <= st->short_us) lo = mid;
        else hi = mid - 1;
    }
    if (st->short_chunk) return lo;
    st->short_chunk = 1;
    unheld_features(s, st, &b);
    double want = (1 - SHORT_MAX_LOSS) * n / predict_with(s, &b, n, 0, cost_attended(pos, n));
    int32_t flo = 1, fhi = n;
    while (flo < fhi) {
        int32_t mid = flo + (fhi - flo) / 2;
        if (mid / predict_with(s, &b, mid, 0, cost_attended(pos, mid)) >= want) fhi = mid;
        else flo = mid + 1;
    }
    return lo > flo ? lo : flo;
}

/* Fewest of n held decodes (ctx attended positions each, on average) that
 * keep (1 - SHORT_MAX_LOSS) of the throughput of running all n beside the
 * work in b. */
static int32_t decodes_floor(const sched *s, const cost_features *b, int32_t n, double ctx) {
    double want = (1 - SHORT_MAX_LOSS) * n / predict_with(s, b, 0, n, n * ctx);
    int32_t lo = 1, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (mid / predict_with(s, b, 0, mid, mid * ctx) >= want) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static int turn_before(const turn *x, const turn *y) {
    if (x->decoded_step != y->decoded_step) return x->decoded_step < y->decoded_step;
    return x->arrival_seq < y->arrival_seq;
}

/* Merge the sorted v[lo .. mid) and v[mid .. hi) in place, through tmp:
 * what is left of the right one is where it belongs already. */
static void turn_merge(turn *v, turn *tmp, int32_t lo, int32_t mid, int32_t hi) {
    int32_t i = lo, j = mid, k = 0;
    while (i < mid && j < hi) tmp[k++] = turn_before(&v[j], &v[i]) ? v[j++] : v[i++];
    while (i < mid) tmp[k++] = v[i++];
    memcpy(&v[lo], tmp, (size_t)k * sizeof(turn));
}

/* Into turn order, on keys copied out of the requests (the comparisons
 * touch no other memory), through tmp (n entries: nothing is allocated in
 * a step). The list is nearly in order from one step to the next (in
 * bench_sim's fleet, 17 to 64 decodes with about 40 out of place, spread
 * thin), which insertion sort takes in about one pass; so insertion sort
 * in chunks of SORT_TURNS_CHUNK, merged bottom-up: n log n at worst. The
 * order is total (arrival_seq is unique): any sort gives this one. */
#define SORT_TURNS_CHUNK 64
static void sort_turns(turn *v, turn *tmp, int32_t n) {
    for (int32_t lo = 0; lo < n; lo += SORT_TURNS_CHUNK) {
        int32_t hi = lo + SORT_TURNS_CHUNK < n ? lo + SORT_TURNS_CHUNK : n;
        for (int32_t i = lo + 1; i < hi; i++) {
            turn x = v[i];
            int32_t j = i;
            for (; j > lo && turn_before(&x, &v[j - 1]); j--) v[j] = v[j - 1];
            v[j] = x;
        }
    }
    for (int32_t w = SORT_TURNS_CHUNK; w < n; w *= 2)
        for (int32_t lo = 0; lo + w < n; lo += 2 * w) turn_merge(v, tmp, lo, lo + w, lo + 2 * w < n ? lo + 2 * w : n);
}

/* Late in a TPOT sense: its last token is so old that waiting one more
 * short step would miss its tier's TPOT target. */
static int tpot_due(const sched *s, const step *st, const req *r) {
    const sched_tier *tier = &s->tiers[s->tenants[r->tenant].cfg.tier];
    return tier->tpot_ms && (double)(st->now_us - r->token_us) + 2 * st->short_us >= 1000.0 * tier->tpot_ms;
}

/* The decodes held to the short step, least recently decoded first, while
 * the step stays within the bound, and at least decodes_floor of them. */
void sched__plan_short_decodes(sched *s, step *st) {
    if (st->short_us <= 0) return;
    int32_t n = 0;
    double ctx = 0;
    for (int32_t i = 0; i < s->n_run; i++) {
        const req *r = &s->reqs[s->run[i]];
        if (r->state == SCHED_DECODING && r->item == NIL && sched__held_short(s, st, &s->tenants[r->tenant])) {
            s->order[n++] = (turn){r->decoded_step, r->arrival_seq, s->run[i]};
            ctx += r->n_total;
        }
    }
    if (!n) return;
    sort_turns(s->order, s->order + s->cfg.max_running, n);
    /* st->feat is the plan as it stands: each decode planned, less any
     * items its growth preempted (even when the growth then failed). */
    int32_t least = decodes_floor(s, &st->feat, n, ctx / n), planned = 0;
    for (int32_t k = 0; k < n; k++) {
        req *r = &s->reqs[s->order[k].slot];
        if (r->state != SCHED_DECODING || r->item != NIL || r->run_idx == NIL) continue; /* preempted since */
        if (planned >= least && predict_with(s, &st->feat, 0, 1, r->n_total) > st->short_us && !tpot_due(s, st, r))
            continue;
        planned += sched__plan_decode(s, st, s->order[k].slot);
    }
}
