/* pfx.c - see pfx.h. */
#include "pfx.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

int pfx_init(pfx_index *ix, int32_t n_blocks, int32_t block_size) {
    memset(ix, 0, sizeof(*ix));
    if (n_blocks < 1 || block_size < 1) return TS_ERR_INVAL;
    uint32_t buckets = 1;
    while (buckets < 2u * (uint32_t)n_blocks && buckets < (1u << 30)) buckets <<= 1;
    size_t nb = (size_t)n_blocks;
    ix->bucket = malloc(buckets * sizeof(int32_t));
    ix->next = malloc(nb * sizeof(int32_t));
    ix->hash = malloc(nb * sizeof(uint64_t));
    ix->parent = malloc(nb * sizeof(uint64_t));
    ix->salt = malloc(nb * sizeof(uint64_t));
    ix->scope = malloc(nb * sizeof(int32_t));
    ix->tokens = malloc(nb * (size_t)block_size * sizeof(int32_t));
    ix->present = calloc(nb, 1);
    if (!ix->bucket || !ix->next || !ix->hash || !ix->parent || !ix->salt || !ix->scope || !ix->tokens || !ix->present) {
        pfx_deinit(ix);
        return TS_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < buckets; i++) ix->bucket[i] = -1;
    ix->n_blocks = n_blocks;
    ix->block_size = block_size;
    ix->mask = buckets - 1;
    return 0;
}

void pfx_deinit(pfx_index *ix) {
    free(ix->bucket); free(ix->next); free(ix->hash); free(ix->parent); free(ix->salt); free(ix->scope);
    free(ix->tokens); free(ix->present);
    memset(ix, 0, sizeof(*ix));
}

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Two tokens a multiply: fast, and good enough to spread buckets; equality
 * is checked on the tokens anyway. */
uint64_t pfx_hash(uint64_t parent_hash, uint64_t salt, const int32_t *tokens, int32_t n) {
    uint64_t h = mix(parent_hash ^ 0x9E3779B97F4A7C15ull) ^ mix(salt + 0x632BE59BD9B4E019ull);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)tokens[i] | ((uint64_t)(uint32_t)tokens[i + 1] << 32);
        h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    }
    if (i < n) h = (h ^ (uint32_t)tokens[i]) * 0x100000001B3ull;
    return mix(h ^ (uint64_t)n);
}

static int same(const pfx_index *ix, int32_t b, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                const int32_t *tokens) {
    return ix->hash[b] == h && ix->parent[b] == parent && ix->scope[b] == scope && ix->salt[b] == salt &&
           memcmp(ix->tokens + (size_t)b * (size_t)ix->block_size, tokens,
                  (size_t)ix->block_size * sizeof(int32_t)) == 0;
}

int32_t pfx_find(const pfx_index *ix, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                 const int32_t *tokens) {
    if (!ix->bucket) return -1;
    for (int32_t b = ix->bucket[h & ix->mask]; b >= 0; b = ix->next[b])
        if (same(ix, b, h, parent, scope, salt, tokens)) return b;
    return -1;
}

int pfx_insert(pfx_index *ix, int32_t block, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
               const int32_t *tokens) {
    if (!ix->bucket || block < 0 || block >= ix->n_blocks || ix->present[block]) return 1;
    if (pfx_find(ix, h, parent, scope, salt, tokens) >= 0) return 1;
    uint32_t k = (uint32_t)(h & ix->mask);
    ix->hash[block] = h;
    ix->parent[block] = parent;
    ix->salt[block] = salt;
    ix->scope[block] = scope;
    memcpy(ix->tokens + (size_t)block * (size_t)ix->block_size, tokens, (size_t)ix->block_size * sizeof(int32_t));
    ix->next[block] = ix->bucket[k];
    ix->bucket[k] = block;
    ix->present[block] = 1;
    ix->n_entries++;
    return 0;
}

void pfx_remove(pfx_index *ix, int32_t block) {
    if (!pfx_has(ix, block)) return;
    int32_t *link = &ix->bucket[ix->hash[block] & ix->mask];
    while (*link != block) link = &ix->next[*link];
    *link = ix->next[block];
    ix->present[block] = 0;
    ix->n_entries--;
}
