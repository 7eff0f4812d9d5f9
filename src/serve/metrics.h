/*
 * metrics.h - a small Prometheus registry (counters, gauges, histograms with
 * fixed label schemas) rendered in the text exposition format 0.0.4, plus two
 * pure helpers for the fairness gauge: Jain's index and a one-minute sliding
 * window of weighted service per tenant.
 *
 * Lifecycle. Families are registered once at startup with their label names;
 * series (one per combination of label values: a tenant, a model, a status
 * code, a reason) are created with met_series_get, normally at startup too,
 * and the caller keeps the returned pointer. Updates (met_inc, met_set,
 * met_observe) then go straight to the series: they are a few relaxed C11
 * atomics, never lock, never allocate and never fail, so HTTP threads and the
 * engine threads may call them on any path. A NULL series is accepted and
 * ignored, so a series that failed to be created costs only its numbers.
 *
 * Threads. The registry owns one mutex. Registration, met_series_get and
 * met_render take it; updates never do. A double value lives in an
 * _Atomic uint64_t holding its bit pattern and is added to with a
 * compare-exchange loop; histogram buckets are _Atomic uint64_t counts. A
 * render therefore reads each number atomically but not all of them at one
 * instant: two series, or a histogram's _sum and its buckets, may be a few
 * in-flight updates apart. A histogram's _count is computed from the bucket
 * counts that the same render read, so _count always equals the +Inf bucket
 * and buckets are always cumulative (monotone) as Prometheus requires.
 * met_series_get may be called after startup (it locks and allocates on first
 * use of a label combination), but never on a hot path. met_free must come
 * after every other thread has stopped using the registry.
 *
 * Format. Families render in registration order, series in creation order,
 * each family with its # HELP and # TYPE lines even before it has series.
 * HELP text escapes \ and newline; label values escape \, " and newline.
 * Numbers are printed in the shortest form that reads back to the same double
 * ("0.005", "3", "1e+21"), with +Inf, -Inf and NaN spelled as Prometheus
 * spells them; the render assumes the "C" LC_NUMERIC locale (tessera never
 * calls setlocale). Names are checked at registration: metric names match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and do not
 * start with "__"; a histogram may not use the label name "le".
 *
 * Limits: at most MET_MAX_LABELS labels per family; finding a series is a
 * linear scan (fine for setup, not for a request path); a family can not be
 * unregistered and a series can not be deleted (the label sets are small and
 * known: tenants, models, codes). Counters hold doubles, so integer counts
 * stay exact up to 2^53.
 */
#ifndef TS_METRICS_H
#define TS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define MET_MAX_LABELS 8            /* label names per family */

typedef struct met_registry met_registry;
typedef struct met_family met_family;
typedef struct met_series met_series;

/* ---- default histogram buckets ------------------------------------------ */

/* Request latencies in seconds (TTFT, inter-token latency, end to end):
 * fine steps from 5 ms to 100 ms where ITL and a fast TTFT live, coarse ones
 * up to 60 s for long generations. Upper bounds, strictly increasing. */
#define MET_LATENCY_N_BUCKETS 16
extern const double met_latency_buckets[MET_LATENCY_N_BUCKETS];

/* Engine step time in seconds: 0.5 ms (a small decode batch on a GPU) to
 * 2.5 s (a long chunked prefill on a CPU). */
#define MET_STEP_N_BUCKETS 16
extern const double met_step_buckets[MET_STEP_N_BUCKETS];

/* ---- registry ----------------------------------------------------------- */

/* An empty registry, or NULL when out of memory. */
met_registry *met_new(void);
/* Free the registry, its families and series; every pointer into it dies. */
void met_free(met_registry *r);

/*
 * Register a family. name and help are copied; label_names (n_labels of
 * them, may be NULL when n_labels is 0) too. Returns NULL on a bad name, a
 * duplicate family name, a bad label name or count, or out of memory. A
 * family with no labels gets its one series at once, so it renders 0 from
 * the start; fetch it with met_series_get(f, NULL).
 */
met_family *met_counter(met_registry *r, const char *name, const char *help,
                        const char *const *label_names, int n_labels);
met_family *met_gauge(met_registry *r, const char *name, const char *help,
                      const char *const *label_names, int n_labels);
/* bounds: n_bounds finite, strictly increasing bucket upper bounds (the
 * +Inf bucket is implicit); n_bounds may be 0. Copied. */
met_family *met_histogram(met_registry *r, const char *name, const char *help,
                          const char *const *label_names, int n_labels,
                          const double *bounds, int n_bounds);

/*
 * The series of f for these label values (one string per label name, in the
 * family's order; any bytes, escaped at render). Creates it on first use and
 * returns the same pointer for the same values afterwards. NULL on a NULL
 * value, NULL family or out of memory. Takes the registry lock.
 */
met_series *met_series_get(met_family *f, const char *const *label_values);

/* ---- updates: lock-free, allocation-free, callable from any thread ------ */

/* Counter: add v (v < 0 or NaN is ignored: counters only go up). Gauge: add
 * v, which may be negative. No effect on a histogram or NULL. */
void met_inc(met_series *s, double v);
/* Gauge: set to v. No effect on a counter, a histogram or NULL. */
void met_set(met_series *s, double v);
/* Histogram: count v in the first bucket whose bound is >= v (else +Inf)
 * and add it to _sum. NaN is ignored. No effect on other kinds or NULL. */
void met_observe(met_series *s, double v);

/* Current value of a counter or gauge (for tests and for the server's own
 * decisions); a histogram reads as its _sum; NULL reads as 0. */
double met_value(const met_series *s);

/*
 * Render every family into a malloc'd, NUL-terminated text. OUT text: the
 * text, freed by the caller with free(). OUT len: its length without the
 * NUL. Returns 0, or TS_ERR_NOMEM with *text NULL and *len 0.
 */
int met_render(met_registry *r, char **text, size_t *len);

/* ---- fairness ----------------------------------------------------------- */

/*
 * met_window - weighted service among backlogged tenants over the last
 * minute, the input of the fairness gauge.
 *
 * Definition. Time is cut into one-second slots: slot(t) = floor(t / 1e6)
 * for t in microseconds. The window at now_us is the 60 slots
 * slot(now_us) - 59 .. slot(now_us): the current, partial second and the 59
 * before it. For each tenant i,
 *     S_i = sum of weighted_service passed to met_window_add for i with a
 *           now_us whose slot lies in the window,
 *     B_i = 1 if any of those calls had backlogged != 0, else 0,
 * and met_window_jain(now_us) = fq_jain({S_i : B_i = 1}), which is 1 when
 * no tenant was backlogged. A tenant that had nothing to run is left out
 * rather than counted as starved; a backlogged tenant that got nothing
 * counts with S_i = 0 and pulls the index down. weighted_service is the
 * caller's service (tokens, or cost-model seconds) already divided by the
 * tenant's weight, so a fair scheduler drives the index to 1.
 *
 * Known limit: the index compares totals over the minute, so a tenant that
 * was backlogged for only part of it reads as under-served even under a
 * perfectly fair scheduler; the gauge is meaningful when the backlogged set
 * is stable, which is the contended case it exists to watch.
 *
 * Time comes in as now_us; nothing here reads a clock. Calls may go
 * backwards: a call whose slot is more than 59 seconds behind the newest
 * slot seen is dropped (it is outside every future window). The window
 * keeps a ring of 60 slots per tenant and allocates only in met_window_new.
 * It has no lock: one thread (the engine loop that does the charging) owns
 * it and publishes the index through a gauge with met_set.
 */
typedef struct met_window met_window;

/* A window for tenants 0..n_tenants-1; NULL if n_tenants < 1 or no memory. */
met_window *met_window_new(int n_tenants);
void met_window_free(met_window *w);
/* Charge weighted_service (finite, >= 0) to tenant at now_us and record
 * whether it was backlogged then. TS_ERR_INVAL for a bad tenant or value,
 * with no effect. A dropped (too old) call returns 0. */
int met_window_add(met_window *w, int tenant, int64_t now_us,
                   double weighted_service, int backlogged);
/* Jain's index over the tenants backlogged in the window at now_us. */
double met_window_jain(const met_window *w, int64_t now_us);

#endif
