/*
 * sched_cache.c - the scheduler's side of the prefix cache: finding a
 * request's cached prompt blocks and adding its own. The contract (salts,
 * charging, what is shared) is in sched.h under "Prefix cache"; the blocks'
 * references and eviction in kv.h; the index in pfx.h.
 */
#include <stdint.h>

#include "kv.h"
#include "pfx.h"
#include "sched_int.h"

/* Salt of the blocks inside a declared public prefix: the same for every
 * tenant ("public" in ASCII). Tenant salts are mixed from the tenant's id
 * plus one, so none equals it in practice. */
#define PUBLIC_SALT 0x7075626c6963ull

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key goes in after the mixing: xor with a secret keeps distinct salts
 * distinct, and pfx_hash mixes the salt again, so the chained hashes (and
 * buckets) depend on the key throughout. Isolation does not rest on any of
 * this: entries are scoped (block_scope). */
uint64_t sched__cache_salt(const sched *s, int32_t tn, uint64_t salt) {
    return mix(mix((uint64_t)(uint32_t)tn + 1) ^ salt) ^ s->cfg.cache_key;
}

/* Block j's salt: public when the whole block lies in the public prefix. */
static int is_public(const sched *s, const req *r, int32_t j) {
    return (int64_t)(j + 1) * s->cfg.block_size <= r->n_public;
}

static uint64_t block_salt(const sched *s, const req *r, int32_t j) {
    return is_public(s, r, j) ? PUBLIC_SALT ^ s->cfg.cache_key : r->salt;
}

/* Block j's scope: the tenant's own, or public. Matched exactly (pfx.h),
 * so a tenant finds only its own and public blocks whatever its salt. */
static int32_t block_scope(const sched *s, const req *r, int32_t j) {
    return is_public(s, r, j) ? PFX_PUBLIC : r->tenant;
}

int32_t sched__cache_match(sched *s, const req *r, int32_t most, int32_t *ids) {
    if (!s->cfg.prefix_cache || !r->tokens) return 0;
    const int32_t bs = s->cfg.block_size;
    uint64_t h = 0, parent = PFX_ROOT;
    int32_t j = 0;
    for (; j < most; j++) {
        const int32_t *tok = r->tokens + (size_t)j * (size_t)bs;
        uint64_t salt = block_salt(s, r, j);
        uint64_t hj = pfx_hash(h, salt, tok, bs);
        int32_t b = kv_cache_find(&s->kv, hj, parent, block_scope(s, r, j), salt, tok);
        if (b < 0) break;
        h = hj;
        parent = kv_block_key(&s->kv, b);
        if (ids) ids[j] = b;
    }
    return j;
}

int32_t sched__cache_probe(sched *s, req *r) {
    if (!s->cfg.prefix_cache || !r->tokens || r->n_blocks) return 0;
    /* The ids in table are valid while no entry was added or evicted: a
     * release only turns a block cache-only, which a look-up ignores. */
    if (r->match_ver == s->kv.cache_ver + 1) return r->n_match;
    r->n_match = sched__cache_match(s, r, (r->prompt - 1) / s->cfg.block_size, r->table);
    r->match_ver = s->kv.cache_ver + 1;
    return r->n_match;
}

void sched__cache_add(sched *s, req *r) {
    if (!s->cfg.prefix_cache || !r->tokens || r->reg_stop) return;
    const int32_t bs = s->cfg.block_size;
    int32_t full = (r->n_computed < r->prompt ? r->n_computed : r->prompt) / bs;
    if (full > r->n_blocks) full = r->n_blocks;
    while (r->n_reg < full) {
        int32_t j = r->n_reg;
        const int32_t *tok = r->tokens + (size_t)j * (size_t)bs;
        uint64_t salt = block_salt(s, r, j);
        /* The parent's hash is read from its entry (table[0 .. n_reg) are
         * entries), never kept beside n_reg, so it cannot go stale when
         * n_reg is reset. */
        uint64_t parent = j ? kv_block_key(&s->kv, r->table[j - 1]) : PFX_ROOT;
        uint64_t ph = j ? kv_cache_hash(&s->kv, r->table[j - 1]) : 0;
        uint64_t h = pfx_hash(ph, salt, tok, bs);
        /* Another block holds this content already (an identical prompt
         * computed beside it): its later blocks would chain from a block
         * that is no entry, so they are not added. */
        if (kv_cache_add(&s->kv, r->table[j], h, parent, block_scope(s, r, j), salt, tok)) {
            r->reg_stop = 1;
            return;
        }
        r->n_reg++;
    }
}
