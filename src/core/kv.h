/*
 * kv.h - the KV block manager: which blocks of the engine's KV pool (device)
 * and of the host swap space are free, and the admission watermarks.
 *
 * It owns only the free lists. Which sequence holds which blocks is written
 * in each request's block table, kept by the scheduler; together they keep
 * the conservation law the tests check:
 *     free + used = n_blocks            (device)
 *     swap_free + swapped = n_swap      (host)
 *     used = sum of the running requests' tables, swapped = sum of the
 *     swapped-out requests' host slots.
 * Allocation is all-or-nothing and deterministic: a fresh pool hands out
 * ids in ascending order, freed ids are reused last-in first-out (the
 * block most recently touched is the one most likely still in cache).
 *
 * Watermarks with hysteresis: new prefill is admitted while usage is below
 * the high watermark; once usage reaches it, admission stops until usage has
 * fallen below the low watermark. Without the gap, a pool hovering at the
 * threshold would flap between admitting and preempting every step.
 *
 * Memory is allocated at kv_init only; nothing here allocates afterwards.
 */
#ifndef TS_KV_H
#define TS_KV_H

#include <stdint.h>

typedef struct kv_pool {
    int32_t n_blocks;       /* device blocks in the pool */
    int32_t n_free;
    int32_t *free_ids;      /* (n_blocks) stack; top at n_free - 1 */
    int32_t n_swap;         /* host swap slots, one block each */
    int32_t n_swap_free;
    int32_t *swap_free_ids; /* (n_swap) stack */
    int32_t high_blocks;    /* stop admitting at used >= high_blocks */
    int32_t low_blocks;     /* resume admitting at used < low_blocks */
    int admitting;          /* hysteresis state */
    uint8_t *seen;          /* (max(n_blocks, n_swap)) scratch for kv_check */
} kv_pool;

/* high and low are fractions of n_blocks, 0 < low <= high <= 1. */
int kv_init(kv_pool *p, int32_t n_blocks, int32_t n_swap, double high, double low);
void kv_deinit(kv_pool *p);

/* Take n device blocks into out, or none: TS_ERR_KV_CAPACITY if fewer than n
 * are free. */
int kv_alloc(kv_pool *p, int32_t n, int32_t *out);
void kv_free(kv_pool *p, const int32_t *ids, int32_t n);
int kv_swap_alloc(kv_pool *p, int32_t n, int32_t *out);
void kv_swap_free(kv_pool *p, const int32_t *ids, int32_t n);

static inline int32_t kv_used(const kv_pool *p) { return p->n_blocks - p->n_free; }
static inline int32_t kv_swapped(const kv_pool *p) { return p->n_swap - p->n_swap_free; }

/* Update the hysteresis state from current usage and say whether new
 * prefill may be admitted. */
int kv_admitting(kv_pool *p);
/* Blocks that may still be taken for new admissions before the high
 * watermark stops them (0 when not admitting). */
int32_t kv_admit_room(kv_pool *p);

/* Check the free lists: ids in range, no duplicates, counts consistent.
 * Returns 0 or TS_ERR_KV_BLOCK. O(n_blocks + n_swap); for tests. */
int kv_check(const kv_pool *p);

#endif
