/* kv.c - see kv.h. */
#include "kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define NONE (-1)

static void fill_stack(int32_t *ids, int32_t n) {
    /* Ascending pop order: the top of the stack is id 0. */
    for (int32_t i = 0; i < n; i++) ids[i] = n - 1 - i;
}

int kv_init(kv_pool *p, int32_t n_blocks, int32_t n_swap, double high, double low) {
    memset(p, 0, sizeof(*p));
    if (n_blocks < 1 || n_swap < 0 || !(low > 0) || !(high >= low) || high > 1) return TS_ERR_INVAL;
    int32_t most = n_blocks > n_swap ? n_blocks : n_swap;
    size_t nb = (size_t)n_blocks;
    p->free_ids = malloc(nb * sizeof(int32_t));
    p->swap_free_ids = malloc((size_t)(n_swap ? n_swap : 1) * sizeof(int32_t));
    p->seen = malloc((size_t)most);
    p->ref = calloc(nb, sizeof(int32_t));
    p->gen = calloc(nb, sizeof(uint32_t));
    p->lru_prev = malloc(nb * sizeof(int32_t));
    p->lru_next = malloc(nb * sizeof(int32_t));
    if (!p->free_ids || !p->swap_free_ids || !p->seen || !p->ref || !p->gen || !p->lru_prev || !p->lru_next) {
        kv_deinit(p);
        return TS_ERR_NOMEM;
    }
    p->n_blocks = p->n_free = p->n_stack = n_blocks;
    p->n_swap = p->n_swap_free = n_swap;
    fill_stack(p->free_ids, n_blocks);
    fill_stack(p->swap_free_ids, n_swap);
    p->lru_head = p->lru_tail = NONE;
    p->high_blocks = (int32_t)ceil(high * n_blocks);
    p->low_blocks = (int32_t)ceil(low * n_blocks);
    p->admitting = 1;
    return 0;
}

int kv_cache_init(kv_pool *p, int32_t block_size) {
    if (p->ix.bucket) return 0;
    return pfx_init(&p->ix, p->n_blocks, block_size);
}

void kv_deinit(kv_pool *p) {
    free(p->free_ids);
    free(p->swap_free_ids);
    free(p->seen);
    free(p->ref);
    free(p->gen);
    free(p->lru_prev);
    free(p->lru_next);
    pfx_deinit(&p->ix);
    memset(p, 0, sizeof(*p));
}

/* ---- the cache-only list ------------------------------------------------- */

static void lru_unlink(kv_pool *p, int32_t id) {
    int32_t a = p->lru_prev[id], b = p->lru_next[id];
    if (a != NONE) p->lru_next[a] = b; else p->lru_head = b;
    if (b != NONE) p->lru_prev[b] = a; else p->lru_tail = a;
    p->n_lru--;
    p->n_free--;
}

static void lru_append(kv_pool *p, int32_t id) {
    p->lru_prev[id] = p->lru_tail;
    p->lru_next[id] = NONE;
    if (p->lru_tail != NONE) p->lru_next[p->lru_tail] = id; else p->lru_head = id;
    p->lru_tail = id;
    p->n_lru++;
    p->n_free++;
}

/* Take the least recently released cache-only block out of the cache. */
static int32_t evict_oldest(kv_pool *p) {
    int32_t id = p->lru_head;
    lru_unlink(p, id);
    pfx_remove(&p->ix, id);
    p->gen[id]++;
    p->n_evicted++;
    p->cache_ver++;
    return id;
}

/* ---- allocation ------------------------------------------------------------ */

int kv_alloc(kv_pool *p, int32_t n, int32_t *out) {
    if (n < 0 || n > p->n_free) return TS_ERR_KV_CAPACITY;
    for (int32_t i = 0; i < n; i++) {
        if (p->n_stack > 0) {
            out[i] = p->free_ids[--p->n_stack];
            p->n_free--;
        } else {
            out[i] = evict_oldest(p);
        }
        p->ref[out[i]] = 1;
    }
    return 0;
}

void kv_free(kv_pool *p, const int32_t *ids, int32_t n) {
    /* In reverse: the first id of a freed table is reused first, and a
     * chain's root is released last (evicted last). */
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t id = ids[i];
        if (--p->ref[id] > 0) continue;
        if (pfx_has(&p->ix, id)) {
            lru_append(p, id);
        } else {
            p->free_ids[p->n_stack++] = id;
            p->n_free++;
        }
    }
}

void kv_ref(kv_pool *p, int32_t id) {
    if (p->ref[id]++ == 0) lru_unlink(p, id);
}

int kv_cache_add(kv_pool *p, int32_t id, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                 const int32_t *tokens) {
    if (p->ref[id] < 1 || pfx_insert(&p->ix, id, h, parent, scope, salt, tokens)) return 1;
    p->cache_ver++;
    return 0;
}

static int take(int32_t *stack, int32_t *n_free, int32_t n, int32_t *out) {
    if (n < 0 || n > *n_free) return TS_ERR_KV_CAPACITY;
    for (int32_t i = 0; i < n; i++) out[i] = stack[--*n_free];
    return 0;
}

int kv_swap_alloc(kv_pool *p, int32_t n, int32_t *out) {
    return take(p->swap_free_ids, &p->n_swap_free, n, out);
}

void kv_swap_free(kv_pool *p, const int32_t *ids, int32_t n) {
    for (int32_t i = n - 1; i >= 0; i--) p->swap_free_ids[p->n_swap_free++] = ids[i];
}

/* ---- watermarks -------------------------------------------------------------- */

int kv_admitting(kv_pool *p) {
    int32_t used = kv_used(p);
    if (p->admitting && used >= p->high_blocks) p->admitting = 0;
    else if (!p->admitting && used < p->low_blocks) p->admitting = 1;
    return p->admitting;
}

int32_t kv_admit_room(kv_pool *p) {
    if (!kv_admitting(p)) return 0;
    int32_t room = p->high_blocks - kv_used(p);
    return room > p->n_free ? p->n_free : room;
}

/* ---- checks -------------------------------------------------------------------- */

static int check_stack(const int32_t *ids, int32_t n_free, int32_t n, uint8_t *seen) {
    if (n_free < 0 || n_free > n) return TS_ERR_KV_BLOCK;
    memset(seen, 0, (size_t)(n ? n : 1));
    for (int32_t i = 0; i < n_free; i++) {
        if (ids[i] < 0 || ids[i] >= n || seen[ids[i]]) return TS_ERR_KV_BLOCK;
        seen[ids[i]] = 1;
    }
    return 0;
}

/* Free blocks (the stack, then the cache-only list, marked in seen) have no
 * reference; cache-only ones are cache entries, plain ones are not; every
 * other block has a reference. */
static int check_device(const kv_pool *p) {
    int rc = check_stack(p->free_ids, p->n_stack, p->n_blocks, p->seen);
    if (rc) return rc;
    for (int32_t i = 0; i < p->n_stack; i++)
        if (p->ref[p->free_ids[i]] || pfx_has(&p->ix, p->free_ids[i])) return TS_ERR_KV_BLOCK;
    int32_t k = 0, prev = NONE;
    for (int32_t id = p->lru_head; id != NONE; prev = id, id = p->lru_next[id], k++) {
        if (id < 0 || id >= p->n_blocks || p->seen[id] || k >= p->n_blocks || p->lru_prev[id] != prev)
            return TS_ERR_KV_BLOCK;
        if (p->ref[id] || !pfx_has(&p->ix, id)) return TS_ERR_KV_BLOCK;
        p->seen[id] = 1;
    }
    if (k != p->n_lru || prev != p->lru_tail || p->n_free != p->n_stack + p->n_lru) return TS_ERR_KV_BLOCK;
    for (int32_t id = 0; id < p->n_blocks; id++)
        if (!p->seen[id] && p->ref[id] < 1) return TS_ERR_KV_BLOCK;
    return 0;
}

/* Each entry's hash is the chain's: from 0 at a root, else from its parent
 * entry's hash while that parent is cached under the same key (an evicted
 * parent bumped its generation; such orphans can never match, so are not
 * checked). A wrong one would hide the block from every look-up. */
static int check_chains(const kv_pool *p) {
    const pfx_index *ix = &p->ix;
    for (int32_t id = 0; id < p->n_blocks; id++) {
        if (!pfx_has(ix, id)) continue;
        uint64_t parent = ix->parent[id], ph = 0;
        if (parent != PFX_ROOT) {
            int32_t pid = (int32_t)(uint32_t)parent;
            if (pid < 0 || pid >= p->n_blocks) return TS_ERR_KV_BLOCK;
            if (!pfx_has(ix, pid) || kv_block_key(p, pid) != parent) continue;
            ph = ix->hash[pid];
        }
        const int32_t *tok = ix->tokens + (size_t)id * (size_t)ix->block_size;
        if (ix->hash[id] != pfx_hash(ph, ix->salt[id], tok, ix->block_size)) return TS_ERR_KV_BLOCK;
    }
    return 0;
}

int kv_check(const kv_pool *p) {
    int rc = check_device(p);
    if (!rc) rc = check_chains(p);
    return rc ? rc : check_stack(p->swap_free_ids, p->n_swap_free, p->n_swap, p->seen);
}
