/*
 * fuzz_scenario.c - a `tessera bench` scenario and its trace: the YAML
 * (bench/scenario.c over util/ydoc.c), the trace CSV, and the open-loop
 * schedule computed from them (bench/arrivals.c).
 *
 * Input: the scenario's YAML, optionally followed by a line "#trace" (a
 * YAML comment, so a plain scenario file is a valid input) and the trace
 * CSV. A scenario that names a trace gets that CSV, or an empty one.
 *
 * Checks scenario.h's promises (a refused input leaves the scn zeroed, the
 * message is one line) and arrivals.h's: the schedule is in time order,
 * inside every tenant's [start, stop) window and the run's bound, and each
 * length lies in its tenant's range; and the same scenario with its trace
 * streamed from a file row by row (the reader `tessera sim` uses for
 * traces larger than memory) gives the same events, whenever the file's
 * rows are in time order (a stream refuses the first row that is not).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrivals.h"
#include "common.h"
#include "err.h"
#include "scenario.h"

static const char SEP[] = "\n#trace\n";

static void check_len(const scn_len *l, int32_t v) {
    switch (l->dist) {
    case SCN_LEN_FIXED: FZ_CHECK(v == l->value); break;
    default: FZ_CHECK(v >= l->min && v <= l->max); break;
    }
}

#define MAX_EVENTS 2000

static int same_event(const arr_event *a, const arr_event *b) {
    return a->t_s == b->t_s && a->tenant == b->tenant && a->prompt_tokens == b->prompt_tokens &&
           a->output_tokens == b->output_tokens && a->seed == b->seed;
}

/* s, its trace streamed from a file whose rows the loaded parse took and
 * are in order, with arr_schedule's seed and bounds, gives ev[0..n), in
 * order, then ends. */
static void check_stream(const scn *s, double until, const arr_event *ev, size_t n) {
    arr_stream *st;
    char err[512] = "";
    int rc = arr_stream_open(&st, s, 1, until, MAX_EVENTS, err, sizeof err);
    if (rc) fprintf(stderr, "the stream does not open: %s\n", err);
    FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
    if (rc) return;
    arr_event *got = malloc((MAX_EVENTS + 1) * sizeof *got);
    FZ_CHECK(got != NULL);
    size_t k = 0;
    while (k <= MAX_EVENTS && (rc = arr_stream_next(st, &got[k])) == 1) k++;
    if (rc < 0) fprintf(stderr, "the stream fails: %s\n", arr_stream_error(st));
    FZ_CHECK(rc == 0 && k == n && arr_stream_count(st) == n);
    for (size_t i = 0; i < n; i++) {
        if (!same_event(&got[i], &ev[i]))
            fprintf(stderr, "event %zu: streamed %.9g tenant %d, scheduled %.9g tenant %d\n", i, got[i].t_s,
                    got[i].tenant, ev[i].t_s, ev[i].tenant);
        FZ_CHECK(same_event(&got[i], &ev[i]));
    }
    free(got);
    arr_stream_close(st);
}

/* Every row of s's trace file reads in order, to the end. */
static int rows_in_order(const scn *s) {
    scn_trace_reader *r;
    char err[512];
    if (scn_trace_open(s, &r, err, sizeof err)) return 0;
    scn_trace_row row;
    int rc;
    while ((rc = scn_trace_next(r, &row, err, sizeof err)) == 1) {}
    scn_trace_close(r);
    return rc == 0;
}

/* The scenario yaml again, its trace streamed from a file holding csv. A
 * stream reads no further than the first row past the window (scenario.h),
 * so the schedule is held to it only when every row is in order. */
static void check_streamed_trace(const char *yaml, size_t yaml_len, const uint8_t *csv, size_t csv_len,
                                 double until, const arr_event *ev, size_t n) {
    scn s;
    char err[512];
    FZ_CHECK(scn_parse(yaml, yaml_len, "fuzz.yaml", "/base", &s, err, sizeof err) == 0);
    scn_opts o = {.stream = 1};
    FZ_CHECK(scn_opts_apply(&s, &o, err, sizeof err) == 0);
    snprintf(s.trace_path, sizeof s.trace_path, "%s", fz_file(csv, csv_len));
    if (rows_in_order(&s)) check_stream(&s, until, ev, n);
    scn_free(&s);
}

static void check_schedule(const scn *s, const char *yaml, size_t yaml_len, const uint8_t *csv, size_t csv_len) {
    arr_event *ev = NULL;
    size_t n = 0;
    double until = s->duration_s > 0 ? s->duration_s : 0;
    int rc = arr_schedule(s, 1, until, MAX_EVENTS, &ev, &n);
    FZ_CHECK(rc == 0);
    FZ_CHECK(n <= 2000);
    for (size_t i = 0; i < n; i++) {
        const arr_event *e = &ev[i];
        FZ_CHECK(e->tenant >= 0 && e->tenant < s->n_tenants);
        const scn_tenant *t = &s->tenants[e->tenant];
        FZ_CHECK(isfinite(e->t_s) && e->t_s >= 0);
        if (i > 0) FZ_CHECK(e->t_s >= ev[i - 1].t_s);
        if (until > 0) FZ_CHECK(e->t_s < until);
        FZ_CHECK(e->t_s >= t->start_s);
        if (t->stop_s > 0) FZ_CHECK(e->t_s < t->stop_s);
        if (t->arrival.process != SCN_ARR_NONE) {
            check_len(&t->prompt, e->prompt_tokens);
            check_len(&t->output, e->output_tokens);
        }
        FZ_CHECK(e->prompt_tokens >= 0 && e->prompt_tokens <= SCN_MAX_TOKENS);
        FZ_CHECK(e->output_tokens >= 0 && e->output_tokens <= SCN_MAX_TOKENS);
    }
    if (s->trace_path[0]) check_streamed_trace(yaml, yaml_len, csv, csv_len, until, ev, n);
    free(ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data, *csv = "";
    size_t yaml_len = size, csv_len = 0;
    const char *sep = memmem(text, size, SEP, sizeof SEP - 1);
    if (sep) {
        yaml_len = (size_t)(sep - text);
        csv = sep + sizeof SEP - 1;
        csv_len = size - yaml_len - (sizeof SEP - 1);
    }
    scn s;
    char err[512];
    int rc = scn_parse(text, yaml_len, "fuzz.yaml", "/base", &s, err, sizeof err);
    if (rc < 0) {
        static const scn zero;
        FZ_CHECK(rc == TS_ERR_SCENARIO || rc == TS_ERR_NOMEM);
        FZ_CHECK(memcmp(&s, &zero, sizeof s) == 0);
        fz_check_message(err, sizeof err);
        return 0;
    }
    FZ_CHECK(s.n_tenants >= 1 && s.n_tenants <= SCN_MAX_TENANTS && s.model[0]);
    int ok = 1;
    if (s.trace_path[0]) {
        rc = scn_trace_parse(&s, csv, csv_len, "trace.csv", err, sizeof err);
        if (rc < 0) {
            FZ_CHECK(rc == TS_ERR_SCENARIO || rc == TS_ERR_NOMEM);
            FZ_CHECK(s.trace == NULL && s.n_trace == 0);
            fz_check_message(err, sizeof err);
            ok = 0;
        } else {
            for (size_t i = 0; i < s.n_trace; i++) {
                FZ_CHECK(s.trace[i].tenant >= 0 && s.trace[i].tenant < s.n_tenants);
                FZ_CHECK(s.tenants[s.trace[i].tenant].arrival.process == SCN_ARR_NONE);
                if (i > 0) FZ_CHECK(s.trace[i].t_s >= s.trace[i - 1].t_s);
            }
        }
    }
    if (ok) check_schedule(&s, text, yaml_len, (const uint8_t *)csv, csv_len);
    scn_free(&s);
    scn_free(&s);
    return 0;
}
