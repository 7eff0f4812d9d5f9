/*
 * arrivals.h - when each request of a bench run is sent and how long it is:
 * the open-loop schedule, computed in full before the first request leaves.
 *
 * Pure and deterministic: a seeded xoshiro256** generator, no clock, no I/O.
 * The same scenario, seed and bounds give the same schedule on every machine,
 * so two servers (or two policies) are compared on identical traffic. Each
 * tenant draws from its own streams (one for gaps, one for lengths), derived
 * from the seed and the tenant's index, so changing one tenant's process does
 * not reshuffle the others' arrivals.
 *
 * Processes (rate r requests/s; the gaps between arrivals):
 *   poisson   exponential gaps, mean 1/r, CV 1;
 *   gamma     gamma gaps with shape k = 1/cv^2 and scale cv^2/r, so the mean
 *             is still 1/r and the CV is cv: cv > 1 gives bursts and lulls,
 *             cv < 1 smoother than Poisson;
 *   constant  gaps of exactly 1/r.
 * A tenant's first arrival is one gap after its start, so a process starts
 * in its stationary regime rather than with a burst at t = start.
 * Lengths: fixed; uniform integers in [min, max]; lognormal with the given
 * mean and CV (sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2/2), rounded
 * and clamped to [min, max], so clamping can move the mean a little.
 */
#ifndef TS_BENCH_ARRIVALS_H
#define TS_BENCH_ARRIVALS_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "scenario.h"

/* Draws come from util/rng: a tenant's streams are rng_seed_stream(seed,
 * 2 * tenant) for gaps and (seed, 2 * tenant + 1) for lengths, and the
 * requests' own seeds come from stream 0xfeedface. */

/* Standard normal (Box-Muller, one value per call). */
double arr_normal(rng *r);
/* Gamma(shape, scale) by Marsaglia-Tsang; shape < 1 by the boost
 * Gamma(k) = Gamma(k + 1) * U^(1/k). shape, scale > 0. */
double arr_gamma(rng *r, double shape, double scale);

/* The next gap, s, of process a. */
double arr_gap(const scn_arrival *a, rng *r);
/* A length, tokens, drawn from l. */
int32_t arr_len(const scn_len *l, rng *r);

typedef struct arr_event {
    double t_s;               /* s since the start of the run */
    int32_t tenant;           /* index into the scenario's tenants */
    int32_t prompt_tokens;
    int32_t output_tokens;    /* sent as max_tokens */
    uint64_t seed;            /* for this request's prompt token ids */
} arr_event;

/*
 * The schedule of scenario s: every tenant's arrivals (and the trace's rows)
 * merged in time order, ties by tenant index then trace order, stopping at
 * the first of: time >= until_s (0: no time bound), max_requests events (0:
 * no count bound). One of the two bounds is required, and a schedule with no
 * time bound must have an arrival process or a trace that ends.
 * OUT ev: malloc'd array the caller frees; OUT n: its length.
 * Returns 0, TS_ERR_INVAL (no bound), or TS_ERR_NOMEM.
 */
int arr_schedule(const scn *s, uint64_t seed, double until_s, size_t max_requests, arr_event **ev,
                 size_t *n);

#endif
