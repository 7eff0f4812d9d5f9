/*
 * sampler.h - turns one row of logits into the next token: greedy, or
 * temperature, top-k and top-p (nucleus) sampling from a seeded random
 * stream, plus the request's stop tokens.
 *
 * One smp belongs to one sequence. It owns its random state (xoshiro256**,
 * seeded through splitmix64, no global state), a copy of the parameters and
 * stop ids, and two scratch arrays sized for the vocabulary, allocated once
 * by smp_init; smp_sample never allocates, never reads a clock and never
 * touches another sequence's state, so the same seed and the same logits give
 * the same tokens on every run and in the simulator. Bad parameters are
 * refused at smp_init with TS_ERR_INVAL rather than clamped, so a request
 * that asks for something impossible hears about it. Non-finite logits never
 * crash it: NaN is read as -inf (a token that is never drawn).
 *
 * It never keeps the caller's logits or stop-id array past the call that
 * receives them, and it never calls exit() or abort().
 *
 * Known limit: the scratch is 8 bytes per vocabulary entry per sampler
 * (1.2 MB at 150k tokens), which is fine for hundreds of live sequences; a
 * server holding many thousands would want one scratch per worker thread.
 */
#ifndef TS_SAMPLER_H
#define TS_SAMPLER_H

#include <stdint.h>

#include "rng.h"

#define SMP_MAX_STOP 16     /* stop ids a request may name */

/* What a request asks of the sampler. Filters compose in the usual order:
 * temperature, then top-k, then top-p over what top-k left. */
typedef struct smp_params {
    float temperature;        /* logits are divided by it; 0 = greedy; >= 0, finite */
    int top_k;                /* keep the k most likely tokens; 0 = off */
    float top_p;              /* keep the shortest most-likely-first set whose mass
                                 is >= top_p; in (0, 1], 1 = off */
    uint64_t seed;            /* random stream; same seed, same tokens */
    const int32_t *stop_ids;  /* (n_stop) ids that end generation; copied */
    int n_stop;               /* 0 .. SMP_MAX_STOP */
} smp_params;

/* Sampler state. The caller owns the struct; smp_init fills it, smp_deinit
 * frees what it points to. Fields are private to sampler.c. */
typedef struct smp {
    int32_t n_vocab;          /* logits per row */
    float temperature;        /* as in smp_params */
    int32_t top_k;            /* 0 = off; a top_k >= n_vocab is stored as 0 */
    float top_p;              /* 1 = off */
    int32_t n_stop;           /* valid entries of stop */
    int32_t stop[SMP_MAX_STOP]; /* copied stop ids */
    rng rng;                  /* the random stream, seeded from smp_params.seed */
    int32_t *idx;             /* (n_vocab) candidate token ids, permuted per call */
    float *w;                 /* (n_vocab) unnormalised probability, by token id */
} smp;

/* Validate p and set s up for rows of n_vocab logits. A top_k of n_vocab or
 * more keeps every token, the same as 0 (off). Returns 0, or
 * TS_ERR_INVAL for a NULL s or p, n_vocab <= 0, a temperature that is
 * negative or not finite, top_k < 0, top_p outside (0, 1] (or NaN), n_stop
 * outside 0..SMP_MAX_STOP, stop_ids NULL with n_stop > 0, or a stop id
 * outside 0..n_vocab-1; TS_ERR_NOMEM when the scratch cannot be allocated.
 * On failure s holds nothing (smp_deinit on it is harmless). p->stop_ids is
 * copied and may be freed once this returns. */
int smp_init(smp *s, int n_vocab, const smp_params *p);

/* The same validation and random stream as smp_init, without scratch: for
 * a server sampling many sequences from one thread, each sequence keeps
 * its parameters and stream in its own smp and borrows one shared scratch
 * (an smp from smp_init with the same n_vocab) through smp_sample_with.
 * Such an smp owns nothing; smp_deinit on it is harmless. */
int smp_init_params(smp *s, int n_vocab, const smp_params *p);
/* smp_sample for s, using scratch's buffers. Not thread-safe on scratch. */
int32_t smp_sample_with(smp *s, const smp *scratch, const float *logits);

/* Free the scratch. Safe on a zeroed or failed-init smp and twice in a row. */
void smp_deinit(smp *s);

/* Pick the next token from logits, a row of s->n_vocab floats. Returns a
 * token id in 0..n_vocab-1, or TS_ERR_INVAL when s or logits is NULL or s was
 * never initialised. Greedy (temperature 0, or top_k 1) returns the argmax,
 * the lowest id on ties, and draws no random number; every other call draws
 * exactly one, whatever the logits, so the stream stays in step with the
 * tokens. Degenerate rows follow greedy: when every candidate is -inf or NaN
 * the lowest id wins, and a +inf logit wins outright (the lowest such id).
 * Cost: with top_k, one pass of ~n_vocab compares (O(n_vocab log k) worst
 * case) and k exps; without, n_vocab exps, plus for top_p a quickselect on
 * mass, O(n_vocab) expected, O(n_vocab log n_vocab) worst. No allocation. */
int32_t smp_sample(smp *s, const float *logits);

/* 1 when tok is one of the stop ids, else 0. */
int smp_is_stop(const smp *s, int32_t tok);

#endif
