/*
 * arrivals.h - when each request of a bench run or a simulation arrives and
 * how long it is: the open-loop schedule, streamed one event at a time
 * (arr_stream, for `tessera sim`'s hours of fleet traffic) or computed in
 * full before the first request leaves (arr_schedule, for `tessera bench`,
 * built from the stream so the two cannot differ).
 *
 * Deterministic: a seeded xoshiro256** generator and no clock. No I/O here
 * either; a streamed trace file is read through scenario.h's reader. The
 * same scenario, options, seed and bounds give the same schedule on every machine,
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
 *
 * The scenario's options (scn.feed, see scenario.h) apply here: every rate
 * is multiplied by load, every trace time by time_scale / load; tenants'
 * start and stop are not scaled (they bound the scaled times).
 *
 * The merge: one source per tenant with a process, plus one for the trace,
 * in a min-heap keyed by (next time, source id), the trace's id after every
 * tenant's. So at equal times a lower tenant index goes first and a trace
 * row goes after the processes, and the stream holds O(tenants) memory
 * whatever the number of events.
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
 * Returns 0, TS_ERR_INVAL (no bound), or TS_ERR_NOMEM; with a streamed
 * trace also its error code (use arr_stream for the message).
 */
int arr_schedule(const scn *s, uint64_t seed, double until_s, size_t max_requests, arr_event **ev,
                 size_t *n);

/* The same events as arr_schedule, one at a time. */
typedef struct arr_stream arr_stream;

/*
 * Start streaming scenario s (which must outlive the stream and not change
 * while it is open) with arr_schedule's seed and bounds. A trace loaded
 * whole (s->trace) is merged from memory; with s->feed.stream the trace
 * file is opened and read as the events are taken. Nothing is allocated
 * after this call: the stream is O(tenants), not O(events).
 * OUT st. 0; TS_ERR_INVAL (no bound); TS_ERR_IO or TS_ERR_SCENARIO (the
 * trace file, "file:line: ..." in err); TS_ERR_NOMEM.
 */
int arr_stream_open(arr_stream **st, const scn *s, uint64_t seed, double until_s, size_t max_requests, char *err,
                    size_t errlen);
/*
 * The next event into *ev: 1, 0 at the end (a bound met, or every source
 * dry), or a negative code once a streamed trace row turns out bad (the
 * events before it were all delivered); arr_stream_error says why, and
 * every later call returns the same code.
 */
int arr_stream_next(arr_stream *st, arr_event *ev);
/* The message of the error arr_stream_next returned; "" if none. */
const char *arr_stream_error(const arr_stream *st);
/* Events delivered so far. */
size_t arr_stream_count(const arr_stream *st);
/* What became of the trace's rows: a streamed file's counts so far, or the
 * loaded trace's (s->trace_stats). */
scn_trace_stats arr_stream_trace_stats(const arr_stream *st);
/* Close the trace file and free st; NULL is fine. */
void arr_stream_close(arr_stream *st);

#endif
