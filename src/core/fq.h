/*
 * fq.h - the per-band fair queue of tenants: virtual token counters in the
 * manner of the Virtual Token Counter (VTC, Sheng et al., OSDI '24) and of
 * the Linux fair scheduler's vruntime.
 *
 * Theory. Each tenant f has weight w_f and receives service S_f(t): tokens
 * processed for it, input tokens counted w_in each and output tokens w_out
 * each (output is dearer: it occupies the batch for a whole step per token).
 * Its virtual counter is
 *     v_f = S_f / w_f        (plus the lifts below)
 * charged in one place (fq_charge) as tokens are actually scheduled. Always
 * serving the backlogged tenant with the smallest v_f keeps the counters of
 * continuously backlogged tenants within one unit of service of each other:
 * whenever f is served ahead of g, v_f <= v_g held just before, and one
 * service unit moves v_f by at most U / w_f, where U is the largest single
 * charge (a whole prompt chunk, or one step's outputs). So for f and g
 * continuously backlogged over an interval,
 *     | S_f / w_f - S_g / w_g | <= 2U      (VTC, Theorem 4.1)
 * independent of how long the interval is.
 *
 * Idle time is never banked. A tenant that was idle kept its old, small
 * counter; served by the rule above it would monopolise the band until it
 * caught up. So when a tenant becomes backlogged, its counter is lifted to
 *     v_f = max(v_f, min over backlogged tenants of v_g)
 * (with no tenant backlogged, to the floor: the largest such minimum ever
 * seen, which only moves forward, like CFS's min_vruntime). The returning
 * tenant is then served next (it is tied for the minimum) but owns no credit.
 *
 * Fleet-wide. With several replicas serving the same model, each runs its
 * own fair queue, and a tenant served on replica A looks fresh on replica B.
 * So an entity also carries remote: the tenant's weighted service on the
 * other replicas, S_f^other / w_f in counter units, which the serve layer
 * learns from the fleet (every few hundred ms) and hands in with
 * fq_set_remote. The queue orders by the key
 *     k_f = v_f + remote_f
 * which estimates the fleet-wide counter (service everywhere, plus local
 * lifts), and the lift, the floor and fq_min_vtime are all in keys: a
 * returning tenant is lifted to the fleet-wide counter of the least-served
 * tenant it competes with. Then two continuously backlogged tenants stay
 * within 2U + (what the fleet figure lags) of each other fleet-wide, not
 * per replica: one that takes a whole replica elsewhere waits here until
 * the others have caught up. Only service is exchanged, never lifts, so a
 * lift on one replica is not counted again on another. A key never moves
 * back (fq_set_remote). remote is 0 on a replica alone, and then the key
 * is the plain counter.
 *
 * The lift's minimum is fleet-wide too: a tenant idle here may be queued
 * on another replica, and one served only elsewhere may be queued only
 * there. Lifted against this replica's queue alone, a returning tenant
 * would keep the credit of all the service the others had meanwhile (a
 * fresh replica's floor is 0). So the serve layer also hands in, with
 * fq_set_fleet, the least key among the band's tenants queued on other
 * replicas, and the lift goes to the least of that and the local minimum.
 * With nothing queued anywhere, the floor is the largest of those figures
 * ever seen, as locally. The figure lags by one exchange, which only lifts
 * a little less: keys only grow.
 *
 * Counters are uint64 fixed point (FQ_SCALE units per weighted token) and
 * always compared through a signed difference, so wrap-around is harmless.
 * The heap breaks ties by the order tenants became backlogged, so the same
 * events give the same order. fq never allocates after fq_init.
 */
#ifndef TS_FQ_H
#define TS_FQ_H

#include <stdint.h>

#include "heap.h"

#define FQ_SCALE 1024   /* counter units per weighted token */

/* Embedded in the owner's tenant struct. */
typedef struct fq_entity {
    uint64_t vtime;     /* virtual counter, FQ_SCALE units */
    uint64_t remote;    /* FQ_SCALE units: service on other replicas / weight */
    uint64_t seq;       /* tie-break: when it last became backlogged */
    int32_t heap_pos;   /* index in the heap, -1 when not backlogged */
} fq_entity;

typedef struct fq {
    heap h;             /* of fq_entity *, fixed, least (vtime, seq) first */
    uint64_t floor;     /* monotone: max over time of the backlogged minimum */
    uint64_t next_seq;
    uint64_t fleet;     /* least key of the tenants queued on other replicas ... */
    int has_fleet;      /* ... when there is one (fq_set_fleet) */
    uint64_t fleet_max; /* monotone: the largest fleet figure seen */
} fq;

int fq_init(fq *q, int32_t cap);
void fq_deinit(fq *q);
void fq_entity_init(fq_entity *e);

/* e becomes backlogged: lift its counter (see above) and queue it. */
void fq_enqueue(fq *q, fq_entity *e);
/* Set e aside for the rest of one planning pass (it can take nothing more
 * this step) without moving the floor: it is still backlogged, and a
 * tenant returning meanwhile must be lifted to the minimum of the
 * backlogged, not to a set-aside tenant's counter. */
void fq_set_aside(fq *q, fq_entity *e);
/* Put back an entity set aside, without lifting its counter. */
void fq_restore(fq *q, fq_entity *e);
/* e is no longer backlogged. */
void fq_dequeue(fq *q, fq_entity *e);
/* The backlogged entity with the smallest counter, or NULL. */
fq_entity *fq_peek(const fq *q);
/* Charge service: vtime += cost * FQ_SCALE / weight, rounded; keeps the
 * heap ordered if e is queued. A negative cost refunds a provisional charge
 * (the counters are modular, so subtraction is the same addition). Returns
 * the charge in counter units. */
int64_t fq_charge(fq *q, fq_entity *e, double cost, double weight);
/* The counter units fq_charge charges for cost at weight, ... */
int64_t fq_units(double cost, double weight);
/* ... and a charge of units worked out before: a cost that recurs (one
 * output token) is divided and rounded once, not at every token. */
void fq_charge_units(fq *q, fq_entity *e, int64_t units);
/* Signed comparison of two counters: < 0 when a is behind b. */
static inline int64_t fq_diff(uint64_t a, uint64_t b) { return (int64_t)(a - b); }
/* The ordering key: the local counter plus the fleet's remote service
 * (modular, like the counters). */
static inline uint64_t fq_key(const fq_entity *e) { return e->vtime + e->remote; }
/* The fleet's figure for e: its service on other replicas divided by its
 * weight, in counter units. Keeps the heap ordered if e is queued. A key
 * never moves back: a figure that falls (service the fleet forgot, e.g.
 * with Redis's data) moves the difference into e's counter, since service
 * once counted stays counted; otherwise a tenant continuously backlogged
 * would be owed, and served ahead for, everything forgotten. */
void fq_set_remote(fq *q, fq_entity *e, uint64_t remote);
/* The fleet's queue on other replicas: has nonzero when one of the band's
 * tenants is queued on another replica, key the least of their keys there
 * (counter units, as fq_key). Taken as given: it only moves the lift. */
void fq_set_fleet(fq *q, int has, uint64_t key);
/* What a tenant becoming backlogged is lifted to: the least key queued
 * here or, per fq_set_fleet, elsewhere; with none, the floor. */
uint64_t fq_min_vtime(const fq *q);
/* Backlogged entities in the queue (set-aside ones not counted). */
static inline int32_t fq_len(const fq *q) { return (int32_t)q->h.n; }

/*
 * Jain's fairness index of x[0..n-1]: (sum x)^2 / (n * sum x^2). It is 1
 * when all x are equal, k/n when k of them are equal and the rest are 0, and
 * 1/n at worst. Returns 1 for n <= 0 or when every x is 0 (nothing to be
 * unfair about). x should be finite and non-negative. It lives beside the
 * fair queue because it is the measure of what the queue promises: the
 * server's gauge and the load generator's report both take it from here.
 */
double fq_jain(const double *x, int n);

/*
 * Gini coefficient of x[0..n-1]: sum over all ordered pairs |x_i - x_j| /
 * (2 n^2 mean). 0 when all x are equal, (n - 1) / n when one has everything.
 * Returns 0 for n <= 0 or when every x is 0. Where Jain's index reads as
 * "the share of tenants treated fairly", Gini reads as the inequality the
 * fairness literature (and the seeds' papers) quote. O(n^2) without
 * allocating: it is meant for tens to hundreds of tenants, in reports.
 */
double fq_gini(const double *x, int n);

#endif
