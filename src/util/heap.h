/*
 * heap.h - the one binary min-heap: fixed-size elements, a caller's order.
 *
 * Elements are copied in (by value, o->size bytes each) and kept in one
 * array, the least at index 0. The order is the caller's `less`, which must
 * be a strict total order: break ties with a sequence number, so the same
 * inputs pop in the same order (the scheduler's determinism rests on that).
 *
 * An element that must be found again (to remove it, or to re-sort it after
 * its key changed) can learn its index: `moved`, when set, is called with
 * the element's new address and index every time one lands in a slot, so
 * an intrusive element (a pointer to a struct with a position field) keeps
 * its position current, as CFS keeps an entity's rb-node.
 *
 * The element size and the two callbacks come in a heap_ops that every call
 * takes, as libuv's heap-inl.h takes its comparator: the operations are
 * inline, so with a `static const heap_ops` the compiler sees the size and
 * the comparator, copies elements with plain moves and inlines the
 * comparison. The scheduler's fair queue sifts on every charge, and an
 * indirect call per level cost it about a tenth of a step. Pass the same
 * ops to every call on one heap.
 *
 * Elements wait in aligned local copies while they move, so `less` may
 * read any field type through them.
 *
 * A heap made with HEAP_FIXED never allocates after heap_init: a push into
 * a full heap fails. The scheduler's step path uses such heaps (no malloc in
 * a step). A growable heap doubles its array as it fills.
 */
#ifndef TS_HEAP_H
#define TS_HEAP_H

#include <stddef.h>
#include <string.h>

#include "err.h"

#define HEAP_ELEM_MAX 64    /* bytes of one element at most */

enum { HEAP_GROW = 0, HEAP_FIXED = 1 };

typedef int (*heap_less_fn)(const void *a, const void *b);
typedef void (*heap_moved_fn)(void *elem, size_t pos);

typedef struct heap_ops {
    size_t size;            /* bytes per element, 1 .. HEAP_ELEM_MAX */
    heap_less_fn less;      /* strict total order */
    heap_moved_fn moved;    /* NULL when nobody tracks positions */
} heap_ops;

typedef struct heap {
    unsigned char *v;       /* (cap, size) elements; v[0] is the least */
    size_t n;               /* elements held */
    size_t cap;             /* elements room */
    int fixed;              /* HEAP_FIXED or HEAP_GROW */
} heap;

/* An empty heap with room for cap elements (cap 0: nothing allocated yet,
 * only sensible with HEAP_GROW). 0, TS_ERR_INVAL for bad ops, or
 * TS_ERR_NOMEM. */
int heap_init(heap *h, const heap_ops *o, size_t cap, int fixed);
void heap_deinit(heap *h);
/* Double the room of a growable heap: 0, or TS_ERR_NOMEM (also for a fixed
 * heap). heap_push calls it; callers need not. */
int heap_grow(heap *h, const heap_ops *o);
/* Restore the order of all n elements after the caller rewrote the array
 * (filtered it, say). O(n). */
void heap_rebuild(heap *h, const heap_ops *o);

/* The least element, NULL when empty. Valid until the next change. */
static inline void *heap_top(const heap *h) { return h->n ? h->v : NULL; }
/* Element i (0 .. n-1), for scans and for `moved` users. */
static inline void *heap_at(const heap *h, const heap_ops *o, size_t i) { return h->v + i * o->size; }
static inline void heap_clear(heap *h) { h->n = 0; }

/* ---- the sifts, inline so that the ops fold (see above) -------------------- */

static inline void heap__put(heap *h, const heap_ops *o, size_t i, const void *e) {
    void *at = heap_at(h, o, i);
    memcpy(at, e, o->size);
    if (o->moved) o->moved(at, i);
}

/* Place e at or above the hole at i. */
static inline void heap__sift_up(heap *h, const heap_ops *o, size_t i, const void *e) {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!o->less(e, heap_at(h, o, parent))) break;
        heap__put(h, o, i, heap_at(h, o, parent));
        i = parent;
    }
    heap__put(h, o, i, e);
}

/* Place e at or below the hole at i. */
static inline void heap__sift_down(heap *h, const heap_ops *o, size_t i, const void *e) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && o->less(heap_at(h, o, c + 1), heap_at(h, o, c))) c++;
        if (!o->less(heap_at(h, o, c), e)) break;
        heap__put(h, o, i, heap_at(h, o, c));
        i = c;
    }
    heap__put(h, o, i, e);
}

/* e, which belongs at index i, goes up or down to its place. */
static inline void heap__place(heap *h, const heap_ops *o, size_t i, const void *e) {
    if (i > 0 && o->less(e, heap_at(h, o, (i - 1) / 2))) heap__sift_up(h, o, i, e);
    else heap__sift_down(h, o, i, e);
}

/* Copy *e in. TS_ERR_NOMEM when a fixed heap is full or growing
 * failed; the heap is unchanged then. O(log n). */
static inline int heap_push(heap *h, const heap_ops *o, const void *e) {
    _Alignas(max_align_t) unsigned char tmp[HEAP_ELEM_MAX];
    memcpy(tmp, e, o->size);    /* e may point into the array, which growing moves */
    if (h->n == h->cap) {
        int rc = heap_grow(h, o);
        if (rc) return rc;
    }
    heap__sift_up(h, o, h->n++, tmp);
    return 0;
}

/* Take out element i. O(log n). */
static inline void heap_remove(heap *h, const heap_ops *o, size_t i) {
    if (i >= h->n) return;
    if (--h->n == i) return;
    _Alignas(max_align_t) unsigned char last[HEAP_ELEM_MAX];
    memcpy(last, heap_at(h, o, h->n), o->size);
    heap__place(h, o, i, last);     /* the last element may belong above or below */
}

/* Take out the least element into *out (out may be NULL). 0, or
 * TS_ERR_INVAL when empty. O(log n). */
static inline int heap_pop(heap *h, const heap_ops *o, void *out) {
    if (!h->n) return TS_ERR_INVAL;
    if (out) memcpy(out, h->v, o->size);
    heap_remove(h, o, 0);
    return 0;
}

/* Element i's key grew (in `less`'s order it can only move down): sink it.
 * One comparison fewer than heap_fix, for a charge that only adds. */
static inline void heap_sink(heap *h, const heap_ops *o, size_t i) {
    if (i >= h->n) return;
    _Alignas(max_align_t) unsigned char e[HEAP_ELEM_MAX];
    memcpy(e, heap_at(h, o, i), o->size);
    heap__sift_down(h, o, i, e);
}

/* Element i's key changed: move it up or down to its place. O(log n). */
static inline void heap_fix(heap *h, const heap_ops *o, size_t i) {
    if (i >= h->n) return;
    _Alignas(max_align_t) unsigned char e[HEAP_ELEM_MAX];
    memcpy(e, heap_at(h, o, i), o->size);
    heap__place(h, o, i, e);
}

#endif
