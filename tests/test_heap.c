/* test_heap.c - unit and property tests of the binary min-heap (src/util/heap.c).
 *
 * The properties are checked on random inputs from a fixed seed, so every run
 * sees the same numbers and a failure is reproducible: pops come out in sorted
 * order, ties broken by a sequence number pop in insertion order, and after
 * every push, pop, remove, fix and rebuild the heap order holds and an
 * intrusive element's recorded position (kept by `moved`, as src/core/fq.c
 * keeps its entities') names the slot it sits in. The data comes from a small
 * generator of the test's own, not from util/rng, so a fault there cannot
 * hide one here. Leaks are caught by the sanitizer build.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "heap.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t lcg_state;

static uint32_t lcg_next(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg_state >> 33);
}

/* Uniform in [0, n). */
static uint32_t lcg_below(uint32_t n) { return lcg_next() % n; }

static int u32_less(const void *a, const void *b) { return *(const uint32_t *)a < *(const uint32_t *)b; }

static int u32_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Every element ranks no earlier than its parent. */
static void assert_heap_order(const heap *h, const heap_ops *o) {
    for (size_t i = 1; i < h->n; i++)
        assert_false(o->less(heap_at(h, o, i), heap_at(h, o, (i - 1) / 2)));
}

/* A key with the insertion counter that breaks its ties. */
typedef struct keyed {
    uint32_t key;
    uint32_t seq;
} keyed;

static int keyed_less(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key;
    return x->seq < y->seq;
}

static int keyed_cmp(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* An intrusive element: the heap holds pointers, and each item knows its
 * slot, as fq_entity does. */
typedef struct item {
    uint32_t key;
    uint32_t id;                /* tie-break: a strict total order */
    int32_t pos;                /* slot in the heap, -1 when out */
} item;

static int item_less(const void *a, const void *b) {
    const item *x = *(item *const *)a, *y = *(item *const *)b;
    if (x->key != y->key) return x->key < y->key;
    return x->id < y->id;
}

static void item_moved(void *elem, size_t pos) { (*(item **)elem)->pos = (int32_t)pos; }

static const heap_ops U32_OPS = {sizeof(uint32_t), u32_less, NULL};
static const heap_ops KEYED_OPS = {sizeof(keyed), keyed_less, NULL};
static const heap_ops ITEM_OPS = {sizeof(item *), item_less, item_moved};
static const heap_ops BIG_OPS = {HEAP_ELEM_MAX, u32_less, NULL};   /* the key in the first 4 bytes */

/* Every held item's recorded position is its slot, and every item not held
 * says so. */
static void assert_positions(const heap *h, const heap_ops *o, const item *items, size_t n_items) {
    size_t held = 0;
    for (size_t i = 0; i < h->n; i++)
        assert_int_equal((*(item **)heap_at(h, o, i))->pos, (int32_t)i);
    for (size_t k = 0; k < n_items; k++)
        if (items[k].pos >= 0) held++;
    assert_int_equal(held, h->n);
}

/* ---- tests -------------------------------------------------------------- */

/* Random pushes and pops against a sorted reference: every pop is the
 * least of what is held, so pushing everything and popping it all gives
 * the sorted input. */
static void test_pop_order_is_sorted(void **state) {
    (void)state;
    lcg_state = 1;
    for (int trial = 0; trial < 200; trial++) {
        const size_t n = lcg_below(300);
        const uint32_t range = trial % 2 ? 16 : UINT32_MAX;   /* many duplicates, or few */
        uint32_t *in = malloc((n + 1) * sizeof *in);
        assert_non_null(in);
        heap h;
        assert_int_equal(heap_init(&h, &U32_OPS, 0, HEAP_GROW), 0);
        for (size_t i = 0; i < n; i++) {
            in[i] = lcg_below(range);
            assert_int_equal(heap_push(&h, &U32_OPS, &in[i]), 0);
            assert_heap_order(&h, &U32_OPS);
        }
        assert_int_equal(h.n, n);
        qsort(in, n, sizeof *in, u32_cmp);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(*(uint32_t *)heap_top(&h), in[i]);
            uint32_t out = 0;
            assert_int_equal(heap_pop(&h, &U32_OPS, &out), 0);
            assert_int_equal(out, in[i]);
            assert_heap_order(&h, &U32_OPS);
        }
        assert_null(heap_top(&h));
        heap_deinit(&h);
        free(in);
    }
}

/* Pushes and pops interleaved: each pop takes the least of what is held,
 * checked against a sorted copy of the held multiset. */
static void test_interleaved_push_pop(void **state) {
    (void)state;
    lcg_state = 2;
    enum { OPS = 5000 };
    uint32_t held[OPS];
    size_t n_held = 0;
    heap h;
    assert_int_equal(heap_init(&h, &U32_OPS, 4, HEAP_GROW), 0);
    for (int op = 0; op < OPS; op++) {
        if (n_held == 0 || lcg_below(3) != 0) {
            uint32_t v = lcg_below(1000);
            assert_int_equal(heap_push(&h, &U32_OPS, &v), 0);
            held[n_held++] = v;
        } else {
            qsort(held, n_held, sizeof *held, u32_cmp);
            uint32_t out;
            assert_int_equal(heap_pop(&h, &U32_OPS, &out), 0);
            assert_int_equal(out, held[0]);
            memmove(held, held + 1, --n_held * sizeof *held);
        }
        assert_int_equal(h.n, n_held);
        assert_heap_order(&h, &U32_OPS);
    }
    heap_deinit(&h);
}

/* Equal keys pop in insertion order when a sequence number breaks the tie,
 * and two heaps fed the same pushes and pops give the same sequence. */
static void test_ties_by_sequence(void **state) {
    (void)state;
    enum { N = 2000 };
    keyed in[N], a_out[N], b_out[N];
    heap a, b;
    lcg_state = 3;
    assert_int_equal(heap_init(&a, &KEYED_OPS, 0, HEAP_GROW), 0);
    assert_int_equal(heap_init(&b, &KEYED_OPS, 7, HEAP_GROW), 0);
    for (uint32_t i = 0; i < N; i++) {
        in[i] = (keyed){.key = lcg_below(5), .seq = i};
        assert_int_equal(heap_push(&a, &KEYED_OPS, &in[i]), 0);
        assert_int_equal(heap_push(&b, &KEYED_OPS, &in[i]), 0);
    }
    qsort(in, N, sizeof *in, keyed_cmp);
    for (int i = 0; i < N; i++) {
        assert_int_equal(heap_pop(&a, &KEYED_OPS, &a_out[i]), 0);
        assert_int_equal(heap_pop(&b, &KEYED_OPS, &b_out[i]), 0);
        assert_int_equal(a_out[i].key, in[i].key);
        assert_int_equal(a_out[i].seq, in[i].seq);     /* FIFO among equal keys */
    }
    assert_memory_equal(a_out, b_out, sizeof a_out);
    heap_deinit(&a);
    heap_deinit(&b);
}

/* Intrusive use: remove items from arbitrary slots, change keys in place
 * and fix or sink them, push removed ones back; the order and every recorded
 * position stay right throughout, and the final pops are sorted. */
static void test_remove_and_fix_keep_positions(void **state) {
    (void)state;
    enum { N = 300, OPS = 4000 };
    item items[N];
    heap h;
    lcg_state = 4;
    assert_int_equal(heap_init(&h, &ITEM_OPS, N, HEAP_FIXED), 0);
    for (uint32_t k = 0; k < N; k++) {
        items[k] = (item){.key = lcg_below(100), .id = k, .pos = -1};
        item *p = &items[k];
        assert_int_equal(heap_push(&h, &ITEM_OPS, &p), 0);
    }
    assert_positions(&h, &ITEM_OPS, items, N);
    for (int op = 0; op < OPS; op++) {
        item *it = &items[lcg_below(N)];
        if (it->pos < 0) {                          /* out: put it back */
            assert_int_equal(heap_push(&h, &ITEM_OPS, &it), 0);
        } else if (lcg_below(2)) {                  /* in: take it out */
            size_t at = (size_t)it->pos;
            heap_remove(&h, &ITEM_OPS, at);
            it->pos = -1;
        } else if (lcg_below(2)) {                  /* in: move its key either way */
            it->key = lcg_below(100);
            heap_fix(&h, &ITEM_OPS, (size_t)it->pos);
        } else {                                    /* in: grow its key, as a charge does */
            it->key += lcg_below(20);
            heap_sink(&h, &ITEM_OPS, (size_t)it->pos);
        }
        assert_heap_order(&h, &ITEM_OPS);
        assert_positions(&h, &ITEM_OPS, items, N);
    }
    /* The ends: the root and the last slot. */
    if (h.n > 1) {
        item *root = *(item **)heap_top(&h);
        heap_remove(&h, &ITEM_OPS, 0);
        root->pos = -1;
        item *last = *(item **)heap_at(&h, &ITEM_OPS, h.n - 1);
        heap_remove(&h, &ITEM_OPS, h.n - 1);
        last->pos = -1;
        assert_heap_order(&h, &ITEM_OPS);
        assert_positions(&h, &ITEM_OPS, items, N);
    }
    item *prev = NULL, *cur;
    while (heap_pop(&h, &ITEM_OPS, &cur) == 0) {
        if (prev) assert_false(item_less(&cur, &prev));
        prev = cur;
    }
    heap_deinit(&h);
}

/* A fixed heap that is full refuses a push and is left exactly as it was. */
static void test_fixed_full_push_fails(void **state) {
    (void)state;
    heap h;
    assert_int_equal(heap_init(&h, &U32_OPS, 4, HEAP_FIXED), 0);
    const uint32_t in[4] = {30, 10, 40, 20};
    for (int i = 0; i < 4; i++) assert_int_equal(heap_push(&h, &U32_OPS, &in[i]), 0);
    uint32_t before[4];
    memcpy(before, h.v, sizeof before);
    const unsigned char *v = h.v;
    const uint32_t extra = 5;   /* would become the root */
    assert_int_equal(heap_push(&h, &U32_OPS, &extra), TS_ERR_NOMEM);
    assert_int_equal(h.n, 4);
    assert_int_equal(h.cap, 4);
    assert_ptr_equal(h.v, v);
    assert_memory_equal(h.v, before, sizeof before);
    for (uint32_t want = 10; want <= 40; want += 10) {
        uint32_t out;
        assert_int_equal(heap_pop(&h, &U32_OPS, &out), 0);
        assert_int_equal(out, want);
    }
    /* Empty: pop fails and leaves the out-parameter alone; top is NULL. */
    uint32_t out = 77;
    assert_int_equal(heap_pop(&h, &U32_OPS, &out), TS_ERR_INVAL);
    assert_int_equal(out, 77);
    assert_null(heap_top(&h));
    heap_deinit(&h);

    /* Room for nothing: the first push already fails. */
    assert_int_equal(heap_init(&h, &U32_OPS, 0, HEAP_FIXED), 0);
    assert_int_equal(heap_push(&h, &U32_OPS, &extra), TS_ERR_NOMEM);
    assert_int_equal(h.n, 0);
    heap_deinit(&h);
}

/* A growable heap copies the element in before it moves its array, so a
 * push of one of its own elements is safe even when it grows. */
static void test_push_own_element_while_growing(void **state) {
    (void)state;
    heap h;
    assert_int_equal(heap_init(&h, &KEYED_OPS, 2, HEAP_GROW), 0);
    const keyed a = {.key = 2, .seq = 0}, b = {.key = 1, .seq = 1};
    assert_int_equal(heap_push(&h, &KEYED_OPS, &a), 0);
    assert_int_equal(heap_push(&h, &KEYED_OPS, &b), 0);
    assert_int_equal(h.n, h.cap);                   /* the next push grows */
    assert_int_equal(heap_push(&h, &KEYED_OPS, heap_at(&h, &KEYED_OPS, 0)), 0);
    keyed out;
    assert_int_equal(heap_pop(&h, &KEYED_OPS, &out), 0);
    assert_int_equal(out.key, 1);
    assert_int_equal(heap_pop(&h, &KEYED_OPS, &out), 0);
    assert_int_equal(out.key, 1);
    assert_int_equal(heap_pop(&h, &KEYED_OPS, &out), 0);
    assert_int_equal(out.key, 2);
    heap_deinit(&h);
}

/* The caller filters the array in place and rebuilds: the order is back and
 * `moved` has told every survivor its new slot. */
static void test_rebuild_after_filter(void **state) {
    (void)state;
    enum { N = 500 };
    item items[N];
    heap h;
    lcg_state = 5;
    assert_int_equal(heap_init(&h, &ITEM_OPS, 0, HEAP_GROW), 0);
    for (uint32_t k = 0; k < N; k++) {
        items[k] = (item){.key = lcg_below(1000), .id = k, .pos = -1};
        item *p = &items[k];
        assert_int_equal(heap_push(&h, &ITEM_OPS, &p), 0);
    }
    /* Keep the odd keys, compacting the array; the order is now broken. */
    size_t kept = 0;
    for (size_t i = 0; i < h.n; i++) {
        item *p = *(item **)heap_at(&h, &ITEM_OPS, i);
        if (p->key % 2) memcpy(heap_at(&h, &ITEM_OPS, kept++), &p, sizeof p);
        else p->pos = -1;
    }
    h.n = kept;
    heap_rebuild(&h, &ITEM_OPS);
    assert_heap_order(&h, &ITEM_OPS);
    assert_positions(&h, &ITEM_OPS, items, N);
    size_t popped = 0;
    item *prev = NULL, *cur;
    while (heap_pop(&h, &ITEM_OPS, &cur) == 0) {
        assert_true(cur->key % 2);
        if (prev) assert_false(item_less(&cur, &prev));
        prev = cur;
        popped++;
    }
    assert_int_equal(popped, kept);
    heap_deinit(&h);
}

/* Bad arguments are refused with TS_ERR_INVAL and leave a heap that
 * heap_deinit accepts; the largest element size works. */
static void test_bad_init(void **state) {
    (void)state;
    heap h;
    assert_int_equal(heap_init(&h, &(heap_ops){0, u32_less, NULL}, 8, HEAP_GROW), TS_ERR_INVAL);
    heap_deinit(&h);
    assert_int_equal(heap_init(&h, &(heap_ops){HEAP_ELEM_MAX + 1, u32_less, NULL}, 8, HEAP_GROW), TS_ERR_INVAL);
    heap_deinit(&h);
    assert_int_equal(heap_init(&h, &(heap_ops){sizeof(uint32_t), NULL, NULL}, 8, HEAP_GROW), TS_ERR_INVAL);
    heap_deinit(&h);
    assert_int_equal(heap_init(&h, &(heap_ops){16, u32_less, NULL}, SIZE_MAX / 16 + 1, HEAP_FIXED), TS_ERR_INVAL);
    heap_deinit(&h);

    /* HEAP_ELEM_MAX bytes: the key in the first four, the rest filler. */
    unsigned char e[HEAP_ELEM_MAX];
    assert_int_equal(heap_init(&h, &BIG_OPS, 0, HEAP_GROW), 0);
    for (uint32_t k = 0; k < 100; k++) {
        uint32_t key = (k * 37) % 100;
        memset(e, (int)k, sizeof e);
        memcpy(e, &key, sizeof key);
        assert_int_equal(heap_push(&h, &BIG_OPS, e), 0);
    }
    for (uint32_t want = 0; want < 100; want++) {
        assert_int_equal(heap_pop(&h, &BIG_OPS, e), 0);
        uint32_t key;
        memcpy(&key, e, sizeof key);
        assert_int_equal(key, want);
        unsigned char fill = (unsigned char)((want * 73) % 100);   /* k with (k * 37) % 100 == want */
        assert_int_equal(e[HEAP_ELEM_MAX - 1], fill);
    }
    heap_deinit(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pop_order_is_sorted),
        cmocka_unit_test(test_interleaved_push_pop),
        cmocka_unit_test(test_ties_by_sequence),
        cmocka_unit_test(test_remove_and_fix_keep_positions),
        cmocka_unit_test(test_fixed_full_push_fails),
        cmocka_unit_test(test_push_own_element_while_growing),
        cmocka_unit_test(test_rebuild_after_filter),
        cmocka_unit_test(test_bad_init),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
