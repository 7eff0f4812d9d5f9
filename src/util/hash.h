/*
 * hash.h - hashing for tessera's in-memory open-addressing tables.
 *
 * Not for anything an attacker must not collide: keys and prompts never
 * reach these tables' probe lengths from a client (API keys are compared by
 * SHA-256, in serve/auth). Inline, because the tokenizer hashes every piece
 * it looks up.
 */
#ifndef TS_HASH_H
#define TS_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a with a final avalanche: token texts are short, so the per-byte loop
 * dominates and a fancier hash would not pay for itself; the avalanche
 * spreads FNV's weak low bits, which a power-of-two table masks. */
static inline uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* murmur3's 64-bit finalizer: a full avalanche of one word. */
static inline uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Slots for an open-addressing table of at least n: a power of two, 16 at
 * least, so a probe wraps with a mask. */
static inline size_t hash_slots(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

#endif
