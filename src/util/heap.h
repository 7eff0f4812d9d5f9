/*
 * heap.h - the one binary min-heap: fixed-size elements, a caller's order.
 *
 * Elements are copied in (by value, `size` bytes each) and kept in one array,
 * the least at index 0. The order is the caller's `less`, which must be a
 * strict total order: break ties with a sequence number, so the same inputs
 * pop in the same order (the scheduler's determinism rests on that).
 *
 * An element that must be found again (to remove it, or to re-sort it after
 * its key changed) can learn its index: `moved`, when set, is called with
 * the element's new address and index every time one lands in a slot, so
 * an intrusive element (a pointer to a struct with a position field) keeps
 * its position current, as CFS keeps an entity's rb-node.
 *
 * A heap made with HEAP_FIXED never allocates after heap_init: a push into
 * a full heap fails. The scheduler's step path uses such heaps (no malloc in
 * a step). A growable heap doubles its array as it fills.
 */
#ifndef TS_HEAP_H
#define TS_HEAP_H

#include <stddef.h>

#define HEAP_ELEM_MAX 64    /* bytes of one element at most */

enum { HEAP_GROW = 0, HEAP_FIXED = 1 };

typedef int (*heap_less_fn)(const void *a, const void *b);
typedef void (*heap_moved_fn)(void *elem, size_t pos);

typedef struct heap {
    unsigned char *v;       /* (cap, size) elements; v[0] is the least */
    size_t n;               /* elements held */
    size_t cap;             /* elements room */
    size_t size;            /* bytes per element, 1 .. HEAP_ELEM_MAX */
    int fixed;              /* HEAP_FIXED or HEAP_GROW */
    heap_less_fn less;
    heap_moved_fn moved;    /* NULL when nobody tracks positions */
} heap;

/* An empty heap with room for cap elements (cap 0: nothing allocated yet,
 * only sensible with HEAP_GROW). 0, TS_ERR_INVAL for a bad size, or
 * TS_ERR_NOMEM. */
int heap_init(heap *h, size_t size, size_t cap, int fixed, heap_less_fn less, heap_moved_fn moved);
void heap_deinit(heap *h);

/* Copy *e in. TS_ERR_NOMEM when a fixed heap is full or growing failed;
 * the heap is unchanged then. O(log n). */
int heap_push(heap *h, const void *e);
/* The least element, NULL when empty. Valid until the next change. */
static inline void *heap_top(const heap *h) { return h->n ? h->v : NULL; }
/* Element i (0 .. n-1), for scans and for `moved` users. */
static inline void *heap_at(const heap *h, size_t i) { return h->v + i * h->size; }
/* Take out the least element into *out (out may be NULL). 0, or
 * TS_ERR_INVAL when empty. O(log n). */
int heap_pop(heap *h, void *out);
/* Take out element i. O(log n). */
void heap_remove(heap *h, size_t i);
/* Element i's key changed: move it up or down to its place. O(log n). */
void heap_fix(heap *h, size_t i);
/* Restore the order of all n elements after the caller rewrote the array
 * (filtered it, say). O(n). */
void heap_rebuild(heap *h);
static inline void heap_clear(heap *h) { h->n = 0; }

#endif
