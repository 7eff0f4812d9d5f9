/* fq.c - see fq.h. */
#include "fq.h"

#include <math.h>
#include <stdlib.h>

#include "err.h"

int fq_init(fq *q, int32_t cap) {
    q->heap = malloc((size_t)(cap > 0 ? cap : 1) * sizeof(*q->heap));
    q->n = 0;
    q->cap = cap;
    q->floor = 0;
    q->next_seq = 0;
    return q->heap ? 0 : TS_ERR_NOMEM;
}

void fq_deinit(fq *q) {
    free(q->heap);
    q->heap = NULL;
    q->n = q->cap = 0;
}

void fq_entity_init(fq_entity *e) {
    e->vtime = 0;
    e->seq = 0;
    e->heap_pos = -1;
}

static int before(const fq_entity *a, const fq_entity *b) {
    int64_t d = fq_diff(a->vtime, b->vtime);
    return d < 0 || (d == 0 && fq_diff(a->seq, b->seq) < 0);
}

static void place(fq *q, int32_t i, fq_entity *e) {
    q->heap[i] = e;
    e->heap_pos = i;
}

static void sift_up(fq *q, int32_t i) {
    fq_entity *e = q->heap[i];
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!before(e, q->heap[parent])) break;
        place(q, i, q->heap[parent]);
        i = parent;
    }
    place(q, i, e);
}

static void sift_down(fq *q, int32_t i) {
    fq_entity *e = q->heap[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && before(q->heap[c + 1], q->heap[c])) c++;
        if (!before(q->heap[c], e)) break;
        place(q, i, q->heap[c]);
        i = c;
    }
    place(q, i, e);
}

/* The floor follows the backlogged minimum forward, never back. */
static void advance_floor(fq *q) {
    if (q->n && fq_diff(q->heap[0]->vtime, q->floor) > 0) q->floor = q->heap[0]->vtime;
}

uint64_t fq_min_vtime(const fq *q) {
    return q->n && fq_diff(q->heap[0]->vtime, q->floor) > 0 ? q->heap[0]->vtime : q->floor;
}

void fq_enqueue(fq *q, fq_entity *e) {
    if (e->heap_pos >= 0 || q->n >= q->cap) return;
    uint64_t lift = fq_min_vtime(q);
    if (fq_diff(e->vtime, lift) < 0) e->vtime = lift;
    e->seq = q->next_seq++;
    place(q, q->n++, e);
    sift_up(q, q->n - 1);
    advance_floor(q);
}

void fq_restore(fq *q, fq_entity *e) {
    if (e->heap_pos >= 0 || q->n >= q->cap) return;
    place(q, q->n++, e);
    sift_up(q, q->n - 1);
}

/* Take e out of the heap, leaving the floor alone. */
static void heap_remove(fq *q, fq_entity *e) {
    int32_t i = e->heap_pos;
    if (i < 0) return;
    e->heap_pos = -1;
    if (--q->n == i) return;
    fq_entity *moved = q->heap[q->n];
    place(q, i, moved);
    sift_down(q, i);
    sift_up(q, moved->heap_pos);
}

void fq_dequeue(fq *q, fq_entity *e) {
    if (e->heap_pos < 0) return;
    advance_floor(q);
    heap_remove(q, e);
}

void fq_set_aside(fq *q, fq_entity *e) { heap_remove(q, e); }

fq_entity *fq_peek(const fq *q) { return q->n ? q->heap[0] : NULL; }

int64_t fq_charge(fq *q, fq_entity *e, double cost, double weight) {
    int64_t c = llround(cost * FQ_SCALE / weight);
    e->vtime += (uint64_t)c;
    if (e->heap_pos >= 0) {
        if (c < 0) sift_up(q, e->heap_pos);
        else sift_down(q, e->heap_pos);
        advance_floor(q);
    }
    return c;
}
