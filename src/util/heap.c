/* heap.c - the binary min-heap; see heap.h.
 *
 * Sifts move a hole rather than swapping: the element being placed waits in
 * a local copy and every other element moves once, so `moved` sees each
 * element land exactly where it stays. */
#include "heap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int heap_init(heap *h, size_t size, size_t cap, int fixed, heap_less_fn less, heap_moved_fn moved) {
    memset(h, 0, sizeof *h);
    if (size == 0 || size > HEAP_ELEM_MAX || !less || cap > SIZE_MAX / size) return TS_ERR_INVAL;
    h->size = size;
    h->fixed = fixed;
    h->less = less;
    h->moved = moved;
    if (cap) {
        h->v = malloc(cap * size);
        if (!h->v) return TS_ERR_NOMEM;
        h->cap = cap;
    }
    return 0;
}

void heap_deinit(heap *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

static void put(heap *h, size_t i, const void *e) {
    void *at = heap_at(h, i);
    memcpy(at, e, h->size);
    if (h->moved) h->moved(at, i);
}

/* Place e at or above the hole at i. */
static void sift_up(heap *h, size_t i, const void *e) {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!h->less(e, heap_at(h, parent))) break;
        put(h, i, heap_at(h, parent));
        i = parent;
    }
    put(h, i, e);
}

/* Place e at or below the hole at i. */
static void sift_down(heap *h, size_t i, const void *e) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->less(heap_at(h, c + 1), heap_at(h, c))) c++;
        if (!h->less(heap_at(h, c), e)) break;
        put(h, i, heap_at(h, c));
        i = c;
    }
    put(h, i, e);
}

int heap_push(heap *h, const void *e) {
    unsigned char tmp[HEAP_ELEM_MAX];
    memcpy(tmp, e, h->size);    /* e may point into the array, which growing moves */
    if (h->n == h->cap) {
        if (h->fixed) return TS_ERR_NOMEM;
        size_t cap = h->cap ? h->cap * 2 : 64;
        if (cap > SIZE_MAX / h->size) return TS_ERR_NOMEM;
        unsigned char *v = realloc(h->v, cap * h->size);
        if (!v) return TS_ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    sift_up(h, h->n++, tmp);
    return 0;
}

void heap_remove(heap *h, size_t i) {
    if (i >= h->n) return;
    if (--h->n == i) return;
    unsigned char last[HEAP_ELEM_MAX];
    memcpy(last, heap_at(h, h->n), h->size);
    /* The last element fills the hole; it may belong above or below it. */
    if (i > 0 && h->less(last, heap_at(h, (i - 1) / 2))) sift_up(h, i, last);
    else sift_down(h, i, last);
}

int heap_pop(heap *h, void *out) {
    if (!h->n) return TS_ERR_INVAL;
    if (out) memcpy(out, h->v, h->size);
    heap_remove(h, 0);
    return 0;
}

void heap_fix(heap *h, size_t i) {
    if (i >= h->n) return;
    unsigned char e[HEAP_ELEM_MAX];
    memcpy(e, heap_at(h, i), h->size);
    if (i > 0 && h->less(e, heap_at(h, (i - 1) / 2))) sift_up(h, i, e);
    else sift_down(h, i, e);
}

void heap_rebuild(heap *h) {
    for (size_t i = h->n / 2; i-- > 0;) {
        unsigned char e[HEAP_ELEM_MAX];
        memcpy(e, heap_at(h, i), h->size);
        sift_down(h, i, e);
    }
    if (h->moved)
        for (size_t i = 0; i < h->n; i++) h->moved(heap_at(h, i), i);
}
