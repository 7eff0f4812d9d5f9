/* kv.c - see kv.h. */
#include "kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

static void fill_stack(int32_t *ids, int32_t n) {
    /* Ascending pop order: the top of the stack is id 0. */
    for (int32_t i = 0; i < n; i++) ids[i] = n - 1 - i;
}

int kv_init(kv_pool *p, int32_t n_blocks, int32_t n_swap, double high, double low) {
    memset(p, 0, sizeof(*p));
    if (n_blocks < 1 || n_swap < 0 || !(low > 0) || !(high >= low) || high > 1) return TS_ERR_INVAL;
    int32_t most = n_blocks > n_swap ? n_blocks : n_swap;
    p->free_ids = malloc((size_t)n_blocks * sizeof(int32_t));
    p->swap_free_ids = malloc((size_t)(n_swap ? n_swap : 1) * sizeof(int32_t));
    p->seen = malloc((size_t)most);
    if (!p->free_ids || !p->swap_free_ids || !p->seen) {
        kv_deinit(p);
        return TS_ERR_NOMEM;
    }
    p->n_blocks = p->n_free = n_blocks;
    p->n_swap = p->n_swap_free = n_swap;
    fill_stack(p->free_ids, n_blocks);
    fill_stack(p->swap_free_ids, n_swap);
    p->high_blocks = (int32_t)ceil(high * n_blocks);
    p->low_blocks = (int32_t)ceil(low * n_blocks);
    p->admitting = 1;
    return 0;
}

void kv_deinit(kv_pool *p) {
    free(p->free_ids);
    free(p->swap_free_ids);
    free(p->seen);
    memset(p, 0, sizeof(*p));
}

static int take(int32_t *stack, int32_t *n_free, int32_t n, int32_t *out) {
    if (n < 0 || n > *n_free) return TS_ERR_KV_CAPACITY;
    for (int32_t i = 0; i < n; i++) out[i] = stack[--*n_free];
    return 0;
}

static void give(int32_t *stack, int32_t *n_free, const int32_t *ids, int32_t n) {
    /* Push in reverse so the first id of a freed table is reused first. */
    for (int32_t i = n - 1; i >= 0; i--) stack[(*n_free)++] = ids[i];
}

int kv_alloc(kv_pool *p, int32_t n, int32_t *out) { return take(p->free_ids, &p->n_free, n, out); }
void kv_free(kv_pool *p, const int32_t *ids, int32_t n) { give(p->free_ids, &p->n_free, ids, n); }
int kv_swap_alloc(kv_pool *p, int32_t n, int32_t *out) {
    return take(p->swap_free_ids, &p->n_swap_free, n, out);
}
void kv_swap_free(kv_pool *p, const int32_t *ids, int32_t n) {
    give(p->swap_free_ids, &p->n_swap_free, ids, n);
}

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

static int check_stack(const int32_t *ids, int32_t n_free, int32_t n, uint8_t *seen) {
    if (n_free < 0 || n_free > n) return TS_ERR_KV_BLOCK;
    memset(seen, 0, (size_t)(n ? n : 1));
    for (int32_t i = 0; i < n_free; i++) {
        if (ids[i] < 0 || ids[i] >= n || seen[ids[i]]) return TS_ERR_KV_BLOCK;
        seen[ids[i]] = 1;
    }
    return 0;
}

int kv_check(const kv_pool *p) {
    int rc = check_stack(p->free_ids, p->n_free, p->n_blocks, p->seen);
    return rc ? rc : check_stack(p->swap_free_ids, p->n_swap_free, p->n_swap, p->seen);
}
