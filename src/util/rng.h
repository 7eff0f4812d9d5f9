/*
 * rng.h - the one pseudo-random generator: xoshiro256** seeded by splitmix64.
 *
 * Deterministic by construction: the same (seed, stream) gives the same
 * sequence on every machine, which the sampler's `seed` parameter and the
 * load generator's reproducible schedules rely on. Not for secrets (keys
 * come from getrandom). The state lives in the caller's struct; there is no
 * global generator.
 */
#ifndef TS_RNG_H
#define TS_RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t s[4];      /* xoshiro256** state; never all zero */
} rng;

/* splitmix64 (Steele, Lea and Flood): one step of the seed expander. */
uint64_t rng_splitmix64(uint64_t *x);
/* State from a seed: four splitmix64 outputs of x = seed (never all zero). */
void rng_seed(rng *r, uint64_t seed);
/* State from a seed and a stream number, so that many independent streams
 * (one per request, say) come from one user seed. */
void rng_seed_stream(rng *r, uint64_t seed, uint64_t stream);
/* The next 64 random bits (xoshiro256**, Blackman and Vigna, 2018). */
uint64_t rng_next(rng *r);
/* Uniform in [0, 1): the top 53 bits, exactly representable in a double. */
double rng_uniform(rng *r);
/* Uniform in (0, 1): the same bits shifted by half a step, for logs. */
double rng_uniform_open(rng *r);

#endif
