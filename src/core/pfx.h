/*
 * pfx.h - the content index of the prefix cache: which device KV block
 * holds the K/V of which chain of prompt tokens.
 *
 * A full block is named by a hash chained over (parent's hash, salt, the
 * block's tokens), so equal prefixes give equal chains. The hash only finds
 * candidates: an entry matches when its parent block (by key: id and the
 * generation of that id, so a reused id never stands for its old content),
 * its scope, its salt and its tokens are equal to those asked for. The
 * scope (a tenant, or PFX_PUBLIC) is what isolates tenants: the salt is a
 * hash of a string the client chooses, so a crafted cache_salt could give
 * another tenant's salt; the scope is compared exactly and never comes
 * from the client. Equality of the
 * whole chain then follows by induction from the root, never from the hash.
 *
 * It owns the entries only (hash, parent key, salt, a copy of the tokens);
 * which blocks are referenced and when one is evicted is kv.h's business.
 * Memory is allocated at pfx_init only; nothing afterwards. Pure: no I/O,
 * no clock.
 *
 * Limit: the hash is fast, keyed only through the salt (the scheduler's
 * cache_key). Unkeyed, crafted prompts could pile entries into one bucket
 * chain (longer look-ups, never a wrong match).
 */
#ifndef TS_PFX_H
#define TS_PFX_H

#include <stdint.h>

#define PFX_ROOT UINT64_MAX /* parent key of a chain's first block */
#define PFX_PUBLIC (-1)     /* scope of blocks every tenant may share */

typedef struct pfx_index {
    int32_t n_blocks;       /* block ids 0 .. n_blocks - 1 */
    int32_t block_size;     /* tokens per block */
    uint32_t mask;          /* buckets - 1 (a power of two) */
    int32_t *bucket;        /* (buckets) first block of each chain, -1 */
    int32_t *next;          /* (n_blocks) next block in its bucket's chain */
    uint64_t *hash;         /* (n_blocks) chained hash of the entry */
    uint64_t *parent;       /* (n_blocks) parent's key, PFX_ROOT for a first block */
    uint64_t *salt;         /* (n_blocks) */
    int32_t *scope;         /* (n_blocks) owning tenant, or PFX_PUBLIC */
    int32_t *tokens;        /* (n_blocks, block_size) */
    uint8_t *present;       /* (n_blocks) 1: the block is an entry */
    int32_t n_entries;
} pfx_index;

int pfx_init(pfx_index *ix, int32_t n_blocks, int32_t block_size);
void pfx_deinit(pfx_index *ix);

/* The chained hash of a block: parent_hash 0 for the first block. */
uint64_t pfx_hash(uint64_t parent_hash, uint64_t salt, const int32_t *tokens, int32_t n);

/* The block holding exactly (parent, scope, salt, tokens[block_size])
 * under hash h, or -1. */
int32_t pfx_find(const pfx_index *ix, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
                 const int32_t *tokens);
/* Make block an entry. 0, or 1 (nothing done) when another block already
 * holds that content or block is already an entry. */
int pfx_insert(pfx_index *ix, int32_t block, uint64_t h, uint64_t parent, int32_t scope, uint64_t salt,
               const int32_t *tokens);
/* Drop block's entry (no-op when it has none). O(its bucket chain). */
void pfx_remove(pfx_index *ix, int32_t block);
static inline int pfx_has(const pfx_index *ix, int32_t block) { return ix->present && ix->present[block]; }

#endif
