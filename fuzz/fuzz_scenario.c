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
 * length lies in its tenant's range.
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

/* One line, NUL-terminated, not empty. */
static void check_message(const char *err, size_t cap) {
    int ok = memchr(err, 0, cap) != NULL && err[0] && !strchr(err, '\n');
    if (!ok) fprintf(stderr, "bad message: \"%.*s\"\n", (int)cap, err);
    FZ_CHECK(ok);
}

static const char SEP[] = "\n#trace\n";

static void check_len(const scn_len *l, int32_t v) {
    switch (l->dist) {
    case SCN_LEN_FIXED: FZ_CHECK(v == l->value); break;
    default: FZ_CHECK(v >= l->min && v <= l->max); break;
    }
}

static void check_schedule(const scn *s) {
    arr_event *ev = NULL;
    size_t n = 0;
    double until = s->duration_s > 0 ? s->duration_s : 0;
    int rc = arr_schedule(s, 1, until, 2000, &ev, &n);
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
        check_message(err, sizeof err);
        return 0;
    }
    FZ_CHECK(s.n_tenants >= 1 && s.n_tenants <= SCN_MAX_TENANTS && s.model[0]);
    int ok = 1;
    if (s.trace_path[0]) {
        rc = scn_trace_parse(&s, csv, csv_len, "trace.csv", err, sizeof err);
        if (rc < 0) {
            FZ_CHECK(rc == TS_ERR_SCENARIO || rc == TS_ERR_NOMEM);
            FZ_CHECK(s.trace == NULL && s.n_trace == 0);
            check_message(err, sizeof err);
            ok = 0;
        } else {
            for (size_t i = 0; i < s.n_trace; i++) {
                FZ_CHECK(s.trace[i].tenant >= 0 && s.trace[i].tenant < s.n_tenants);
                FZ_CHECK(s.tenants[s.trace[i].tenant].arrival.process == SCN_ARR_NONE);
                if (i > 0) FZ_CHECK(s.trace[i].t_s >= s.trace[i - 1].t_s);
            }
        }
    }
    if (ok) check_schedule(&s);
    scn_free(&s);
    scn_free(&s);
    return 0;
}
