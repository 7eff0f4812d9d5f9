/*
 * kv.h - the KV block manager: which blocks of the engine's KV pool (device)
 * and of the host swap space are free, which blocks the prefix cache holds,
 * and the admission watermarks.
 *
 * It owns the free lists, each device block's reference count and the
 * prefix cache's index (pfx.h). Which sequence holds which blocks is
 * written in each request's block table, kept by the scheduler; together
 * they keep the conservation law the tests check:
 *     free + used = n_blocks            (device)
 *     swap_free + swapped = n_swap      (host)
 *     used = blocks with a reference; a block's references = the tables
 *     that hold it (more than one only for a cached block); swapped = sum
 *     of the swapped-out requests' host slots.
 *
 * Prefix cache. A block the scheduler registered (kv_cache_add) keeps its
 * content when its last reference goes: it becomes cache-only, free but
 * findable (kv_cache_find, then kv_ref revives it). Free blocks are so of
 * two kinds: plain ones on a stack, and cache-only ones on a list in
 * least-recently-released order. Allocation takes plain blocks first and
 * evicts cache-only ones (oldest first) only when no plain block is left:
 * the cache is evicted under pressure only, and always before anything
 * would preempt a running request, since cache-only blocks count as free
 * (n_free, the watermarks, every room check of the scheduler). A table is
 * released last block first, so a chain's leaves are evicted before its
 * root. Evicting a block bumps its generation, so entries whose parent was
 * that block can never match again (pfx.h).
 *
 * Allocation is all-or-nothing and deterministic: a fresh pool hands out
 * ids in ascending order, freed plain ids are reused last-in first-out
 * (the block most recently touched is the one most likely still in cache).
 *
 * Watermarks with hysteresis: new prefill is admitted while usage is below
 * the high watermark; once usage reaches it, admission stops until usage has
 * fallen below the low watermark. Without the gap, a pool hovering at the
 * threshold would flap between admitting and preempting every step.
 *
 * Memory is allocated at kv_init / kv_cache_init only; nothing here
 * allocates afterwards.
 */
#ifndef TS_KV_H
#define TS_KV_H

#include <stdint.h>

#include "pfx.h"

typedef struct kv_pool {
    int32_t n_blocks;       /* device blocks in the pool */
    int32_t n_free;         /* free: plain (n_stack) + cache-only (n_lru) */
    int32_t n_stack;
    int32_t *free_ids;      /* (n_blocks) stack of plain free blocks; top at n_stack - 1 */
    int32_t n_swap;         /* host swap slots, one block each */
    int32_t n_swap_free;
    int32_t *swap_free_ids; /* (n_swap) stack */
    int32_t high_blocks;    /* stop admitting at used >= high_blocks */
    int32_t low_blocks;     /* resume admitting at used < low_blocks */
    int admitting;          /* hysteresis state */
    uint8_t *seen;          /* (max(n_blocks, n_swap)) scratch for kv_check */
    int32_t *ref;           /* (n_blocks) tables holding each block */
    uint32_t *gen;          /* (n_blocks) bumped when a cached block is evicted */
    int32_t *lru_prev, *lru_next; /* (n_blocks) the cache-only list, -1 at the ends */
    int32_t lru_head, lru_tail;   /* least / most recently released */
    int32_t n_lru;
    uint64_t n_evicted;     /* cache-only blocks taken by allocations */
    uint64_t cache_ver;     /* bumped when an entry is added or evicted: a look-up
                               made at an equal version would find the same chain */
    pfx_index ix;           /* empty unless kv_cache_init */
} kv_pool;

/* high and low are fractions of n_blocks, 0 < low <= high <= 1. */
int kv_init(kv_pool *p, int32_t n_blocks, int32_t n_swap, double high, double low);
/* Turn the prefix cache on, for blocks of block_size tokens. */
int kv_cache_init(kv_pool *p, int32_t block_size);
void kv_deinit(kv_pool *p);

/* Take n device blocks into out (one reference each), or none:
 * TS_ERR_KV_CAPACITY if fewer than n are free. Evicts cache-only blocks
 * only past the plain ones. */
int kv_alloc(kv_pool *p, int32_t n, int32_t *out);
/* Drop one reference to each block; a block left without any is free
 * again (cache-only if it is a cache entry). */
void kv_free(kv_pool *p, const int32_t *ids, int32_t n);
int kv_swap_alloc(kv_pool *p, int32_t n, int32_t *out);
void kv_swap_free(kv_pool *p, const int32_t *ids, int32_t n);

/* One more reference to a cache entry found by kv_cache_find (a
 * cache-only block leaves the free list). */
void kv_ref(kv_pool *p, int32_t id);
/* A block's key for its children's entries: its id and generation. */
static inline uint64_t kv_block_key(const kv_pool *p, int32_t id) {
    return ((uint64_t)p->gen[id] << 32) | (uint32_t)id;
}
static inline int32_t kv_cache_find(const kv_pool *p, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                                    const int32_t *tokens) {
    return pfx_find(&p->ix, h, parent, scope, salt, tokens);
}
/* The chained hash of a cache entry (its children's parent hash). */
static inline uint64_t kv_cache_hash(const kv_pool *p, int32_t id) { return p->ix.hash[id]; }
/* Register a referenced, full block's content; 0, or 1 when it is not
 * registered (the content is cached in another block already). */
int kv_cache_add(kv_pool *p, int32_t id, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                 const int32_t *tokens);
static inline int32_t kv_cached(const kv_pool *p) { return p->ix.n_entries; }

static inline int32_t kv_used(const kv_pool *p) { return p->n_blocks - p->n_free; }
static inline int32_t kv_swapped(const kv_pool *p) { return p->n_swap - p->n_swap_free; }

/* Update the hysteresis state from current usage and say whether new
 * prefill may be admitted. */
int kv_admitting(kv_pool *p);
/* Blocks that may still be taken for new admissions before the high
 * watermark stops them (0 when not admitting). */
int32_t kv_admit_room(kv_pool *p);

/* Check the free lists: ids in range, no duplicates, counts consistent,
 * free blocks unreferenced, cache-only blocks cache entries, and each
 * entry's hash chained from its parent entry's (when that is still cached)
 * or from 0 at a root. Returns 0 or TS_ERR_KV_BLOCK.
 * O(n_blocks * block_size + n_swap); for tests. */
int kv_check(const kv_pool *p);

#endif
