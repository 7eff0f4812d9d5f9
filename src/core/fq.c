/* fq.c - see fq.h. */
#include "fq.h"

#include <math.h>
#include <stdlib.h>

#include "err.h"

static int before(const void *a, const void *b) {
    const fq_entity *x = *(fq_entity *const *)a, *y = *(fq_entity *const *)b;
    int64_t d = fq_diff(fq_key(x), fq_key(y));
    return d < 0 || (d == 0 && fq_diff(x->seq, y->seq) < 0);
}

static void moved(void *elem, size_t pos) { (*(fq_entity **)elem)->heap_pos = (int32_t)pos; }

static const heap_ops FQ_HEAP = {sizeof(fq_entity *), before, moved};

int fq_init(fq *q, int32_t cap) {
    q->floor = 0;
    q->next_seq = 0;
    q->fleet = q->fleet_max = 0;
    q->has_fleet = 0;
    return heap_init(&q->h, &FQ_HEAP, (size_t)(cap > 0 ? cap : 1), HEAP_FIXED);
}

void fq_deinit(fq *q) { heap_deinit(&q->h); }

void fq_entity_init(fq_entity *e) {
    e->vtime = 0;
    e->remote = 0;
    e->seq = 0;
    e->heap_pos = -1;
}

static fq_entity *least(const fq *q) { return q->h.n ? *(fq_entity **)heap_top(&q->h) : NULL; }

/* The floor follows the backlogged minimum forward, never back. */
static void advance_floor(fq *q) {
    fq_entity *m = least(q);
    if (m && fq_diff(fq_key(m), q->floor) > 0) q->floor = fq_key(m);
}

static uint64_t later(uint64_t a, uint64_t b) { return fq_diff(a, b) > 0 ? a : b; }

uint64_t fq_min_vtime(const fq *q) {
    fq_entity *m = least(q);
    uint64_t here = m ? later(fq_key(m), q->floor) : q->floor;
    if (q->has_fleet) return m && fq_diff(here, q->fleet) < 0 ? here : q->fleet;
    return m ? here : later(q->floor, q->fleet_max);
}

void fq_set_fleet(fq *q, int has, uint64_t key) {
    q->has_fleet = has != 0;
    q->fleet = has ? key : 0;
    if (has) q->fleet_max = later(q->fleet_max, key);
}

void fq_enqueue(fq *q, fq_entity *e) {
    if (e->heap_pos >= 0 || q->h.n >= q->h.cap) return;
    /* The lift is applied to the local counter, so that only service, never
     * a lift, is what the fleet exchanges (fq.h, "Fleet-wide"). */
    uint64_t lift = fq_min_vtime(q);
    int64_t behind = fq_diff(fq_key(e), lift);
    if (behind < 0) e->vtime -= (uint64_t)behind;
    e->seq = q->next_seq++;
    heap_push(&q->h, &FQ_HEAP, &e);
    advance_floor(q);
}

void fq_restore(fq *q, fq_entity *e) {
    if (e->heap_pos >= 0 || q->h.n >= q->h.cap) return;
    heap_push(&q->h, &FQ_HEAP, &e);
}

/* Take e out of the heap, leaving the floor alone. */
static void take_out(fq *q, fq_entity *e) {
    int32_t i = e->heap_pos;
    if (i < 0) return;
    e->heap_pos = -1;
    heap_remove(&q->h, &FQ_HEAP, (size_t)i);
}

void fq_dequeue(fq *q, fq_entity *e) {
    if (e->heap_pos < 0) return;
    advance_floor(q);
    take_out(q, e);
}

void fq_set_aside(fq *q, fq_entity *e) { take_out(q, e); }

fq_entity *fq_peek(const fq *q) { return least(q); }

void fq_set_remote(fq *q, fq_entity *e, uint64_t remote) {
    int64_t d = fq_diff(remote, e->remote);
    e->remote = remote;
    /* A figure that falls was forgotten, not given back: the local counter
     * keeps the difference, and the key stays where it was. */
    if (d < 0) e->vtime -= (uint64_t)d;
    if (e->heap_pos < 0 || d <= 0) return;
    heap_sink(&q->h, &FQ_HEAP, (size_t)e->heap_pos);
    advance_floor(q);
}

/* llround(x), without the library call on the common path: every step
 * charges every tenant it ran. Below 2^62, x - trunc(x) is exact, so the
 * halves round away from zero as llround's do. */
static int64_t round_half_away(double x) {
    if (!(fabs(x) < 0x1p62)) return llround(x);
    int64_t i = (int64_t)x;
    double f = x - (double)i;
    return i + (f >= 0.5) - (f <= -0.5);
}

int64_t fq_units(double cost, double weight) { return round_half_away(cost * FQ_SCALE / weight); }

int64_t fq_charge(fq *q, fq_entity *e, double cost, double weight) {
    int64_t c = fq_units(cost, weight);
    fq_charge_units(q, e, c);
    return c;
}

void fq_charge_units(fq *q, fq_entity *e, int64_t c) {
    e->vtime += (uint64_t)c;
    if (e->heap_pos >= 0) {
        if (c >= 0) heap_sink(&q->h, &FQ_HEAP, (size_t)e->heap_pos);
        else heap_fix(&q->h, &FQ_HEAP, (size_t)e->heap_pos);
        advance_floor(q);
    }
}

double fq_jain(const double *x, int n) {
    if (n <= 0) return 1.0;
    double sum = 0.0, sum2 = 0.0;
    for (int i = 0; i < n; i++) {
        sum += x[i];
        sum2 += x[i] * x[i];
    }
    if (sum2 == 0.0) return 1.0;
    return sum * sum / ((double)n * sum2);
}

double fq_gini(const double *x, int n) {
    if (n <= 0) return 0.0;
    double sum = 0.0, diff = 0.0;
    for (int i = 0; i < n; i++) {
        sum += x[i];
        for (int j = 0; j < n; j++) diff += fabs(x[i] - x[j]);
    }
    if (sum == 0.0) return 0.0;
    /* 2 n^2 mean = 2 n sum */
    return diff / (2.0 * (double)n * sum);
}
