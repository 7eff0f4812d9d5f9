/*
 * report.h - the figures of a bench or sim run: per-tenant and all-tenants
 * counts, latency distributions (mean, median, p90, p99, max of TTFT, TPOT,
 * ITL, E2E), SLO attainment, request throughput and goodput, token
 * throughput, cost, Jain's index and the Gini coefficient of weighted
 * service among backlogged tenants, a tokens-over-time series, and their
 * text table and JSON forms. `tessera bench` (measured) and `tessera sim`
 * (simulated) print the same report, so the two can be laid side by side.
 *
 * Pure: no clock, no sockets. The figures come from a streaming
 * accumulator (rpt_acc): the caller feeds it finished requests (and, when it
 * knows them better than a record does, events, ITL gaps and backlogged
 * intervals) and rpt_acc_finish fills an rpt. rpt_compute is the
 * accumulator in exact mode fed from loadgen's per-request records.
 * rpt_table writes to a FILE the caller opened; rpt_json returns a string
 * the caller writes.
 *
 * Two modes. Exact keeps every latency sample, so percentiles are exactly
 * rpt_percentile's; memory grows with the request count (what bench has
 * anyway). Bounded keeps, per tenant and figure, a histogram of
 * RPT_HIST_BUCKETS log-spaced buckets over [RPT_HIST_MIN_S, RPT_HIST_MAX_S)
 * (DDSketch's mapping: bucket i holds (m g^(i-1), m g^i] and answers with
 * 2 m g^i / (g + 1), g = (1 + a) / (1 - a), a = RPT_HIST_ALPHA), so every
 * order statistic it answers, and so every interpolated percentile, is
 * within a = 0.95% of the exact one; samples below the range answer the
 * smallest sample seen, those above it the largest (both kept exactly), as
 * are the mean and the max. Its memory is independent of the request
 * count: per tenant 4 histograms (about 43 KB), plus the timeline
 * (n_tenants x n_bins doubles), the service per one-second slot (n_tenants x
 * ceil(run_s) doubles) and the backlog map (one byte per tenant per slot).
 *
 * Definitions (times in seconds since the run started):
 *  - Latencies are measured from the request's scheduled time, not from when
 *    the client got round to sending it, so a client that falls behind can
 *    not hide the server's queueing (no coordinated omission); the lag
 *    between the two is reported separately.
 *  - TTFT = first content event - scheduled; E2E = end - scheduled;
 *    TPOT = (end - first) / (output tokens - 1) for requests with at least
 *    two output tokens. ITL (inter-token latency) is every gap between
 *    consecutive content events of a request, whatever its outcome. A
 *    server may put several tokens in one event (tessera sends whatever
 *    text the engine made since the last write), so an event gap can span
 *    several tokens; TPOT uses the token count from the usage chunk and is
 *    exact on average.
 *  - A request cut at the end of the run (RPT_ST_ABORTED) before its first
 *    token enters the TTFT figures with its wait so far, a lower bound
 *    (counted in ttft_censored): leaving it out would reward a server for
 *    starving it.
 *  - A completed request meets its SLO when TTFT <= the ttft target and
 *    TPOT <= the tpot target (a missing target always holds; a request with
 *    fewer than two output tokens has no TPOT and meets that target).
 *    slo_met counts them. SLO attainment = slo_met / every request that was
 *    due (errors, aborts and requests the client skipped count as misses);
 *    a tenant with no targets, or with nothing due, has none (-1). The
 *    all-tenants row takes it over the tenants that have targets.
 *  - Throughput = output tokens received / run time. Request throughput =
 *    completed requests / run time. Goodput = slo_met / run time: completed
 *    requests per second that met every target their tenant has (for a
 *    tenant without targets, every completed request).
 *  - Service = input_weight x prompt tokens (credited when the first token
 *    arrives) + output_weight x output tokens (spread evenly over the
 *    request's content events), the same charge tessera's fair queue makes.
 *    A tenant is backlogged during a one-second slot when, for the whole
 *    slot, at least one of its requests was waiting for its first token
 *    (sent, not yet started: it wanted more service than it was getting).
 *    Its weighted service rate (the table's svc/s/w) is the service it got
 *    in its backlogged slots, divided by its weight and by the number of
 *    those slots. Jain's index (fq_jain) and the Gini coefficient (fq_gini)
 *    are taken over the tenants backlogged in at least one slot, and shown
 *    only when there are two or more of them (one tenant is trivially
 *    fair to itself). Jain is 1 and Gini 0 when they all got the same
 *    weighted rate; Gini = sum over pairs |x_i - x_j| / (2 n^2 mean).
 *  - Cost: engine_s is the engine time attributed to the tenant and cost
 *    what that time costs (in the price's currency), both set by the caller
 *    when it knows them (rpt_cost_set; the simulator knows, a server may
 *    say) and negative when unknown. Cost per request = cost / completed;
 *    cost per 1k tokens = cost / (prompt + output tokens) x 1000.
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
    int64_t n;                /* samples (a fleet's ITL gaps pass 2^31) */
    double mean, p50, p90, p99, max;   /* s; 0 when n is 0 */
} rpt_dist;

#define RPT_MAX_CODES 12

typedef struct rpt_code {
    int status;               /* HTTP status or RPT_ST_* */
    int count;
} rpt_code;

/* A distribution's cumulative shares, for plots: share[i] of the samples
 * are <= x[i] (exact mode: every sample; bounded: one point per bucket). */
typedef struct rpt_cdf {
    int64_t n;                /* points */
    double *x;                /* (n) s, ascending; owned by the rpt */
    double *share;            /* (n) 0..1, ascending; owned by the rpt */
} rpt_cdf;

typedef struct rpt_tenant {
    int due;                  /* requests scheduled in the run */
    int sent;                 /* of them, sent (not skipped) */
    int completed;            /* status 200 with a whole stream */
    int errors;               /* due - completed */
    rpt_code codes[RPT_MAX_CODES];   /* errors by status, most frequent first */
    int n_codes;
    double tokens_in, tokens_out;    /* tokens of completed and partial streams */
    double tok_s;             /* output tokens / run time */
    double req_s;             /* completed requests / run time */
    double goodput_s;         /* requests meeting their SLO (slo_met) / run time */
    rpt_dist ttft, tpot, e2e, itl;
    int ttft_censored;        /* aborted before their first token; in ttft */
    int slo_met;              /* completed and within every target */
    double slo_attainment;    /* 0..1; -1 with no targets or nothing due */
    double service;           /* weighted tokens, whole run */
    double backlogged_s;      /* s; one-second slots backlogged (0 in the all row) */
    double service_rate;      /* service in those slots / weight / backlogged_s */
    double engine_s;          /* s of engine time attributed; < 0 unknown */
    double cost;              /* currency units; < 0 unknown */
    double engine_ttft_s;     /* s; mean TTFT as the engine measured it (hand-over to
                                 first token); < 0 unknown (rpt_engine_ttft_set) */
    int64_t engine_firsts;    /* the first tokens that mean is over */
    rpt_cdf ttft_cdf, tpot_cdf;   /* for plots; empty in the all row */
} rpt_tenant;

typedef struct rpt {
    int n_tenants;
    rpt_tenant *t;            /* (n_tenants) */
    rpt_tenant all;           /* every tenant together: sums, percentiles over all requests */
    double run_s;             /* s; the run's length */
    int due, sent, completed, errors;   /* = all's */
    double lag_p99, lag_max;  /* s; sent - due */
    double jain;              /* over backlogged tenants; 1 if none */
    double gini;              /* over the same tenants; 0 if none */
    int n_jain;               /* tenants in them; both shown only when >= 2 */
    int bounded;              /* 1: percentiles from histograms (<= 1% off) */
    double bin_s;             /* s per timeline bin */
    int n_bins;
    double *tokens;           /* (n_tenants, n_bins) output tokens per bin */
} rpt;

/* The p-quantile (0..1) of sorted[0..n) with linear interpolation between
 * closest ranks (rank p x (n - 1), as numpy's default): exact on hand
 * examples. 0 for n == 0. */
double rpt_percentile(const double *sorted, size_t n, double p);

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

/* ---- the streaming accumulator ------------------------------------------- */

#define RPT_HIST_MIN_S 1e-6       /* s; bounded mode's smallest bucketed value */
#define RPT_HIST_MAX_S 1e5        /* s; and its largest */
#define RPT_HIST_ALPHA 0.0095     /* relative error of a bucket's answer */

typedef struct rpt_acc_tenant rpt_acc_tenant;   /* per-tenant state, report.c */
typedef struct rpt_sink rpt_sink;               /* one figure's samples, report.c */

/*
 * The accumulator: everything an rpt needs, gathered one request (or event)
 * at a time. The caller owns the struct; rpt_acc_init allocates inside it
 * and rpt_acc_deinit frees that. Adding may fail for want of memory (exact
 * mode grows, bounded mode allocates a histogram on its first sample): the
 * add functions return TS_ERR_NOMEM, and the failure also sticks in err,
 * which rpt_acc_finish returns, so a caller making millions of calls may
 * check once at the end. Tenant indices out of range are TS_ERR_INVAL (also
 * sticky). The same calls in the same order give the same rpt, bit for bit;
 * only the order of calls for one tenant matters. Calls for different
 * tenants touch nothing in common (each tenant keeps its own samples, slots
 * and bins; the sticky err is set atomically), so threads may feed
 * different tenants at once.
 */
typedef struct rpt_acc {
    const scn *s;             /* borrowed: tenants, weights, targets, w_in, w_out */
    int bounded;              /* 1: histograms; 0: every sample */
    double run_s;             /* s; events at or after it are outside the run */
    double bin_s;             /* s per timeline bin */
    int n_bins;               /* ceil(run_s / bin_s) */
    int n_slots;              /* ceil(run_s): one-second backlog slots */
    rpt_acc_tenant *t;        /* (s->n_tenants) */
    double *tokens;           /* (n_tenants, n_bins) output tokens per bin */
    int err;                  /* first failure, sticky; 0 when none */
} rpt_acc;

/* Start an accumulator for scenario s (kept by pointer: it must outlive a)
 * over run_s seconds, with timeline bins of bin_s seconds (<= 0: 1 s).
 * bounded: 0 exact, 1 histograms. 0, TS_ERR_INVAL (no tenants, run_s < 0)
 * or TS_ERR_NOMEM; on failure a is zeroed and needs no deinit. */
int rpt_acc_init(rpt_acc *a, const scn *s, double run_s, double bin_s, int bounded);

/*
 * One request, finished or given up: its counts, status, tokens, TTFT (or
 * censored wait), TPOT, E2E, SLO and send lag. When r->ev_t is set (n_events
 * > 0) also its ITL gaps, its service (prompt at t_first, output spread over
 * the events) and its output tokens in the timeline; a caller without event
 * times adds those with rpt_acc_event and rpt_acc_itl instead. Backlog is
 * never inferred: give it with rpt_acc_backlog.
 */
int rpt_acc_request(rpt_acc *a, const rpt_req *r);

/* At time t, tenant got tokens output tokens (the timeline) and service
 * weighted service (w_in x prompt + w_out x output tokens, as the caller
 * reckons it). Times at or after run_s, or before 0, count for neither
 * (slots and bins are found by truncation, so (-1, 0) lands in the first,
 * as it always has for bench). */
int rpt_acc_event(rpt_acc *a, int tenant, double t, double tokens, double service);

/* One inter-token gap, gap_s seconds, of a request of tenant. */
int rpt_acc_itl(rpt_acc *a, int tenant, double gap_s);
/* count gaps of gap_s seconds at once (a simulated step's decodes). */
int rpt_acc_itl_n(rpt_acc *a, int tenant, double gap_s, int64_t count);

/*
 * Tenant was backlogged over [from_s, to_s). Exact mode takes intervals in
 * any order and overlapping, and resolves them in rpt_acc_finish. Bounded
 * mode keeps one open interval per tenant and marks covered one-second
 * slots as it goes: intervals must come in order of from_s per tenant
 * (overlapping or touching ones merge, as in exact mode); one that starts
 * before the previous one is marked on its own, so a slot it only covers
 * together with an earlier interval is missed.
 */
int rpt_acc_backlog(rpt_acc *a, int tenant, double from_s, double to_s);

/* Every figure into out (engine_s and cost unknown: set them with
 * rpt_cost_set), over a run of run_s seconds: a run may end before the
 * length a was sized for (a simulation ends when its last request does),
 * and then its rates divide by run_s and its slots and bins stop there;
 * run_s < 0 or beyond a's length means a's length. a stays valid (finish
 * may be called again after more adds) until rpt_acc_deinit. 0, or the
 * first error of a (out zeroed). */
int rpt_acc_finish(rpt_acc *a, double run_s, rpt *out);

/* Free what a holds and zero it; safe on a zeroed acc and twice. */
void rpt_acc_deinit(rpt_acc *a);

/* ---- computing from records ----------------------------------------------- */

/* Compute every figure of r[0..n) over a run of run_s seconds: the exact
 * accumulator fed each record (events as rpt_acc_request takes them, or a
 * record's prompt service at t_first and output at t_end when it has no
 * event times) and each sent request's wait for its first token as a
 * backlogged interval. 0, TS_ERR_NOMEM, or TS_ERR_INVAL for a scenario
 * without tenants or a record naming none of them (out zeroed). */
int rpt_compute(const scn *s, const rpt_req *r, size_t n, double run_s, rpt *out);
void rpt_free(rpt *p);

/* Set tenant ti's engine time (s) and cost (currency units), negative when
 * unknown, and redo the all-tenants row's: their sums, or unknown when any
 * tenant with requests due is unknown. */
void rpt_cost_set(rpt *p, int ti, double engine_s, double cost);

/* Set tenant ti's engine-side TTFT: sum_s over n first tokens (sum_s < 0
 * unknown), and redo the all-tenants row's (the mean over every tenant's
 * first tokens, unknown when any tenant with requests due is). The
 * tenant's mean TTFT less it is the time outside the engine (README,
 * "GET /admin/tenants"). */
void rpt_engine_ttft_set(rpt *p, int ti, double sum_s, int64_t n);

/* The per-tenant tables (counts and rates; latencies), an all-tenants row
 * in each, a legend, the run's totals and the fairness line;
 * human-readable. */
void rpt_table(FILE *f, const scn *s, const rpt *p);

/* Everything as one JSON document (malloc'd string, NULL when out of
 * memory): run metadata (url, seed, bounds), totals, the all-tenants row,
 * per-tenant figures, Jain's index and Gini, the timeline, and every
 * request of r[0..n) (r may be NULL with n 0: the simulator keeps none). */
char *rpt_json(const scn *s, const rpt *p, const rpt_req *r, size_t n, const char *url, uint64_t seed);

/* "200", "429", "transport", "aborted", "stream", "skipped". buf >= 16 bytes. */
const char *rpt_status_name(int status, char *buf);

#endif
