/*
 * report.h - the figures of a bench run: per-tenant counts, latency
 * percentiles, SLO attainment, throughput, Jain's index of weighted service
 * among backlogged tenants, a tokens-over-time series, and their text table
 * and JSON forms.
 *
 * Pure: it reads the per-request records that loadgen filled (or a test
 * wrote by hand) and computes; no clock, no sockets. rpt_table writes to a
 * FILE the caller opened; rpt_json returns a string the caller writes.
 *
 * Definitions (times in seconds since the run started):
 *  - Latencies are measured from the request's scheduled time, not from when
 *    the client got round to sending it, so a client that falls behind can
 *    not hide the server's queueing (no coordinated omission); the lag
 *    between the two is reported separately.
 *  - TTFT = first content event - scheduled; E2E = end - scheduled;
 *    TPOT = (end - first) / (output tokens - 1) for requests with at least
 *    two output tokens. ITL is every gap between consecutive content events.
 *    A server may put several tokens in one event (tessera sends whatever
 *    text the engine made since the last write), so an event gap can span
 *    several tokens; TPOT uses the token count from the usage chunk and is
 *    exact on average.
 *  - A request cut at the end of the run (RPT_ST_ABORTED) before its first
 *    token enters the TTFT figures with its wait so far, a lower bound
 *    (counted in ttft_censored): leaving it out would reward a server for
 *    starving it.
 *  - SLO attainment = requests that completed with TTFT <= ttft target and
 *    TPOT <= tpot target, over every request that was due (errors, aborts and
 *    requests the client skipped count as misses). A tenant with no targets,
 *    or with nothing due, has none (-1).
 *  - Throughput = output tokens received / run time.
 *  - Service = input_weight x prompt tokens (credited when the first token
 *    arrives) + output_weight x output tokens (spread evenly over the
 *    request's content events), the same charge tessera's fair queue makes.
 *    A tenant is backlogged during a one-second slot when, for the whole
 *    slot, at least one of its requests was waiting for its first token
 *    (sent, not yet started: it wanted more service than it was getting).
 *    Its weighted service rate is the service it got in its backlogged
 *    slots, divided by its weight and by the number of those slots. Jain's
 *    index (fq_jain) is taken over the tenants backlogged in at least one
 *    slot; it is 1 when they all got the same weighted rate.
 */
#ifndef TS_BENCH_REPORT_H
#define TS_BENCH_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "scenario.h"

/* Request outcomes that are not an HTTP status. */
enum {
    RPT_ST_TRANSPORT = -1,    /* connection refused, reset, timed out, ... */
    RPT_ST_ABORTED = -2,      /* still open at the end of the run: cut */
    RPT_ST_STREAM = -3,       /* 200, but the stream broke or carried an error */
    RPT_ST_SKIPPED = -4,      /* not sent: the client was at max_in_flight */
};

/* One request, as loadgen saw it. */
typedef struct rpt_req {
    int32_t tenant;
    int status;               /* HTTP status (200 = completed stream) or RPT_ST_* */
    double t_sched;           /* s; when it was due */
    double t_sent;            /* s; when the client sent it */
    double t_first;           /* s; first content event; < 0: none */
    double t_end;             /* s; response over or request cut */
    int32_t n_prompt;         /* tokens: the usage chunk's, else as requested */
    int32_t n_out;            /* tokens: the usage chunk's, else content events */
    int32_t n_events;         /* content events (SSE chunks that carried text) */
    float *ev_t;              /* (n_events) s; owned, freed by rpt_reqs_free */
} rpt_req;

/* Free every ev_t of r[0..n) (not r itself). */
void rpt_reqs_free(rpt_req *r, size_t n);

typedef struct rpt_dist {
    int n;                    /* samples */
    double mean, p50, p90, p99, max;   /* s; 0 when n is 0 */
} rpt_dist;

#define RPT_MAX_CODES 12

typedef struct rpt_code {
    int status;               /* HTTP status or RPT_ST_* */
    int count;
} rpt_code;

typedef struct rpt_tenant {
    int due;                  /* requests scheduled in the run */
    int sent;                 /* of them, sent (not skipped) */
    int completed;            /* status 200 with a whole stream */
    int errors;               /* due - completed */
    rpt_code codes[RPT_MAX_CODES];   /* errors by status, most frequent first */
    int n_codes;
    double tokens_in, tokens_out;    /* tokens of completed and partial streams */
    double tok_s;             /* output tokens / run time */
    rpt_dist ttft, tpot, e2e, itl;
    int ttft_censored;        /* aborted before their first token; in ttft */
    int slo_met;
    double slo_attainment;    /* 0..1; -1 with no targets or nothing due */
    double service;           /* weighted tokens, whole run */
    double backlogged_s;      /* s; one-second slots backlogged */
    double service_rate;      /* service in those slots / weight / backlogged_s */
} rpt_tenant;

typedef struct rpt {
    int n_tenants;
    rpt_tenant *t;            /* (n_tenants) */
    double run_s;             /* s; the run's length */
    int due, sent, completed, errors;
    double lag_p99, lag_max;  /* s; sent - due */
    double jain;              /* over backlogged tenants; 1 if none */
    int n_jain;               /* tenants in it */
    double bin_s;             /* s per timeline bin */
    int n_bins;
    double *tokens;           /* (n_tenants, n_bins) output tokens per bin */
} rpt;

/* The p-quantile (0..1) of sorted[0..n) with linear interpolation between
 * closest ranks (rank p x (n - 1), as numpy's default): exact on hand
 * examples. 0 for n == 0. */
double rpt_percentile(const double *sorted, size_t n, double p);

/* The TTFT samples of tenant ti into out (room for n), as report.h defines
 * them (censored waits of aborted requests included); returns how many.
 * OUT censored (may be NULL): how many of them are censored. */
size_t rpt_ttft_samples(const rpt_req *r, size_t n, int ti, double *out, int *censored);

/* Fill d from v[0..n) (sorted in place). */
void rpt_dist_of(double *v, size_t n, rpt_dist *d);

/*
 * Seconds, out of [0, run_s) cut into one-second slots, that a union of
 * intervals covers entirely, and which slots: slot k is covered when
 * [k, k + 1) lies inside the union of [a[i], b[i]). covered (n_slots =
 * ceil(run_s) bytes, may be NULL) gets 1 for covered slots. a and b are
 * reordered. Returns the number of covered slots.
 */
int rpt_slots_covered(double *a, double *b, size_t n, double run_s, uint8_t *covered);

/* Compute every figure of r[0..n) over a run of run_s seconds. 0 or
 * TS_ERR_NOMEM (out zeroed). */
int rpt_compute(const scn *s, const rpt_req *r, size_t n, double run_s, rpt *out);
void rpt_free(rpt *p);

/* The per-tenant table, human-readable. */
void rpt_table(FILE *f, const scn *s, const rpt *p);

/* Everything as one JSON document (malloc'd string, NULL when out of
 * memory): run metadata (url, seed, bounds), totals, per-tenant figures,
 * Jain's index, the timeline, and every request. */
char *rpt_json(const scn *s, const rpt *p, const rpt_req *r, size_t n, const char *url, uint64_t seed);

/* "200", "429", "transport", "aborted", "stream", "skipped". buf >= 16 bytes. */
const char *rpt_status_name(int status, char *buf);

#endif
