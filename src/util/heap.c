/* heap.c - the binary min-heap's allocation; the sifts are inline in heap.h.
 *
 * Sifts move a hole rather than swapping: the element being placed waits in
 * a local copy and every other element moves once, so `moved` sees each
 * element land exactly where it stays. */
#include "heap.h"

#include <stdint.h>
#include <stdlib.h>

int heap_init(heap *h, const heap_ops *o, size_t cap, int fixed) {
    memset(h, 0, sizeof *h);
    if (!o || o->size == 0 || o->size > HEAP_ELEM_MAX || !o->less || cap > SIZE_MAX / o->size)
        return TS_ERR_INVAL;
    h->fixed = fixed;
    if (cap) {
        h->v = malloc(cap * o->size);
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

int heap_grow(heap *h, const heap_ops *o) {
    if (h->fixed) return TS_ERR_NOMEM;
    size_t cap = h->cap ? h->cap * 2 : 64;
    if (cap > SIZE_MAX / o->size) return TS_ERR_NOMEM;
    unsigned char *v = realloc(h->v, cap * o->size);
    if (!v) return TS_ERR_NOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

void heap_rebuild(heap *h, const heap_ops *o) {
    for (size_t i = h->n / 2; i-- > 0;) {
        _Alignas(max_align_t) unsigned char e[HEAP_ELEM_MAX];
        memcpy(e, heap_at(h, o, i), o->size);
        heap__sift_down(h, o, i, e);
    }
    if (o->moved)
        for (size_t i = 0; i < h->n; i++) o->moved(heap_at(h, o, i), i);
}
