/* test_bench_arrivals.c - unit tests of the open-loop schedules
 * (src/bench/arrivals.c): the statistics of every arrival process and length
 * distribution over many samples (mean and coefficient of variation within
 * a tolerance several standard errors wide, so the seeded tests are not
 * fragile), and the schedule's order, bounds, determinism, trace merge and
 * per-tenant independence.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/arrivals.h"
#include "bench/scenario.h"
#include "err.h"
#include "testutil.h"

#define N_SAMPLES 400000

typedef struct moments {
    double mean, cv, min, max;
} moments;

static moments gap_moments(const scn_arrival *a, uint64_t seed) {
    rng r;
    rng_seed_stream(&r, seed, 0);
    double s = 0, s2 = 0, mn = INFINITY, mx = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        double g = arr_gap(a, &r);
        s += g;
        s2 += g * g;
        mn = g < mn ? g : mn;
        mx = g > mx ? g : mx;
    }
    double mean = s / N_SAMPLES, var = s2 / N_SAMPLES - mean * mean;
    return (moments){mean, sqrt(var > 0 ? var : 0) / mean, mn, mx};
}

static void near(double got, double want, double rel, const char *what) {
    if (fabs(got - want) > rel * fabs(want)) fail_msg("%s: got %g, want %g within %g%%", what, got, want, rel * 100);
}

static void test_uniform_and_normal(void **state) {
    (void)state;
    rng r;
    rng_seed_stream(&r, 42, 7);
    double s = 0, s2 = 0, lo = 1, hi = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        double u = rng_uniform_open(&r);
        assert_true(u > 0 && u < 1);
        s += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    near(s / N_SAMPLES, 0.5, 0.005, "uniform mean");
    assert_true(lo < 1e-4 && hi > 1 - 1e-4);
    s = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        double z = arr_normal(&r);
        s += z;
        s2 += z * z;
    }
    assert_true(fabs(s / N_SAMPLES) < 0.01);
    near(s2 / N_SAMPLES, 1.0, 0.01, "normal variance");
}

static void test_poisson(void **state) {
    (void)state;
    scn_arrival a = {SCN_ARR_POISSON, 5.0, 1.0};
    moments m = gap_moments(&a, 1);
    near(m.mean, 0.2, 0.01, "poisson mean gap");
    near(m.cv, 1.0, 0.01, "poisson CV");
    assert_true(m.min > 0);
}

static void test_gamma(void **state) {
    (void)state;
    /* Bursty (shape 1/9 < 1: the boosted branch) and smooth (shape 4). The
     * CV of a heavy-tailed sample converges slowly: 5% at cv 3. */
    scn_arrival bursty = {SCN_ARR_GAMMA, 2.0, 3.0};
    moments m = gap_moments(&bursty, 2);
    near(m.mean, 0.5, 0.03, "gamma cv 3 mean gap");
    near(m.cv, 3.0, 0.05, "gamma cv 3 CV");
    scn_arrival smooth = {SCN_ARR_GAMMA, 10.0, 0.5};
    m = gap_moments(&smooth, 3);
    near(m.mean, 0.1, 0.005, "gamma cv 0.5 mean gap");
    near(m.cv, 0.5, 0.01, "gamma cv 0.5 CV");
    scn_arrival one = {SCN_ARR_GAMMA, 4.0, 1.0};   /* = Poisson */
    m = gap_moments(&one, 4);
    near(m.mean, 0.25, 0.01, "gamma cv 1 mean gap");
    near(m.cv, 1.0, 0.01, "gamma cv 1 CV");
}

static void test_constant(void **state) {
    (void)state;
    scn_arrival a = {SCN_ARR_CONSTANT, 8.0, 0};
    moments m = gap_moments(&a, 5);
    assert_true(m.min == 0.125 && m.max == 0.125);
}

static void test_lengths(void **state) {
    (void)state;
    rng r;
    rng_seed_stream(&r, 9, 1);
    scn_len fixed = {SCN_LEN_FIXED, 17, 17, 17, 0, 0};
    for (int i = 0; i < 1000; i++) assert_int_equal(arr_len(&fixed, &r), 17);

    scn_len uni = {SCN_LEN_UNIFORM, 0, 10, 19, 0, 0};
    int seen[10] = {0};
    double s = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        int32_t v = arr_len(&uni, &r);
        assert_true(v >= 10 && v <= 19);
        seen[v - 10]++;
        s += v;
    }
    near(s / N_SAMPLES, 14.5, 0.002, "uniform length mean");
    for (int k = 0; k < 10; k++) near(seen[k], N_SAMPLES / 10.0, 0.02, "uniform length frequency");

    /* A clamp range far out in the tails leaves the mean and CV as asked. */
    scn_len ln = {SCN_LEN_LOGNORMAL, 0, 1, 1000000, 200, 0.5};
    double s2 = 0;
    s = 0;
    for (int i = 0; i < N_SAMPLES; i++) {
        double v = arr_len(&ln, &r);
        s += v;
        s2 += v * v;
    }
    double mean = s / N_SAMPLES, cv = sqrt(s2 / N_SAMPLES - mean * mean) / mean;
    near(mean, 200, 0.01, "lognormal mean");
    near(cv, 0.5, 0.02, "lognormal CV");
    /* A tight clamp holds. */
    scn_len tight = {SCN_LEN_LOGNORMAL, 0, 150, 250, 200, 2.0};
    for (int i = 0; i < 10000; i++) {
        int32_t v = arr_len(&tight, &r);
        assert_true(v >= 150 && v <= 250);
    }
}

static const char TWO[] =
    "model: m\ntenants:\n"
    "  - {name: a, key: k, arrival: {process: poisson, rate: 20},"
    " prompt_tokens: {dist: uniform, min: 1, max: 100}, output_tokens: {dist: fixed, value: 8}}\n"
    "  - {name: b, key: k, arrival: {process: gamma, rate: 5, cv: 2}, start: 10s, stop: 50s,"
    " prompt_tokens: {dist: fixed, value: 3}, output_tokens: {dist: lognormal, mean: 30, cv: 1}}\n";

static void parse(const char *y, scn *s) {
    char err[512];
    int rc = scn_parse(y, strlen(y), "t.yaml", ".", s, err, sizeof err);
    if (rc) fail_msg("%s", err);
}

/* Field by field: the struct has padding, which memcmp would read. */
static void same_events(const arr_event *a, const arr_event *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i].t_s != b[i].t_s || a[i].tenant != b[i].tenant || a[i].prompt_tokens != b[i].prompt_tokens ||
            a[i].output_tokens != b[i].output_tokens || a[i].seed != b[i].seed)
            fail_msg("event %zu differs", i);
}

static void test_schedule(void **state) {
    (void)state;
    scn s;
    parse(TWO, &s);
    arr_event *ev, *ev2;
    size_t n, n2;
    assert_int_equal(arr_schedule(&s, 7, 0, 0, &ev, &n), TS_ERR_INVAL);   /* no bound */
    assert_int_equal(arr_schedule(&s, 7, 100, 0, &ev, &n), 0);
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(ev[i].t_s < 100 && ev[i].t_s > 0);
        if (i) assert_true(ev[i].t_s >= ev[i - 1].t_s);
        if (ev[i].tenant == 0) {
            na++;
            assert_true(ev[i].prompt_tokens >= 1 && ev[i].prompt_tokens <= 100);
            assert_int_equal(ev[i].output_tokens, 8);
        } else {
            nb++;
            assert_true(ev[i].t_s >= 10 && ev[i].t_s < 50);
            assert_int_equal(ev[i].prompt_tokens, 3);
        }
    }
    /* 20/s over 100 s and 5/s over 40 s, within 5 standard deviations
     * (Poisson: sqrt(2000) = 45; gamma cv 2: about 2 x sqrt(200) = 28). */
    assert_true(labs((long)na - 2000) < 225);
    assert_true(labs((long)nb - 200) < 140);

    /* Same seed, same schedule; another seed, another. */
    assert_int_equal(arr_schedule(&s, 7, 100, 0, &ev2, &n2), 0);
    assert_int_equal(n, n2);
    same_events(ev, ev2, n);
    free(ev2);
    assert_int_equal(arr_schedule(&s, 8, 100, 0, &ev2, &n2), 0);
    assert_true(n != n2 || ev[0].t_s != ev2[0].t_s);
    free(ev2);

    /* A count bound: the first 50 events of the same schedule. */
    assert_int_equal(arr_schedule(&s, 7, 0, 50, &ev2, &n2), 0);
    assert_int_equal(n2, 50);
    same_events(ev, ev2, 50);
    free(ev2);

    /* Tenant a's arrivals do not depend on tenant b's process. */
    s.tenants[1].arrival.rate = 50;
    s.tenants[1].arrival.cv = 0.3;
    assert_int_equal(arr_schedule(&s, 7, 100, 0, &ev2, &n2), 0);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].tenant != 0) continue;
        while (j < n2 && ev2[j].tenant != 0) j++;
        assert_true(j < n2);
        assert_true(ev2[j].t_s == ev[i].t_s && ev2[j].prompt_tokens == ev[i].prompt_tokens);
        j++;
    }
    free(ev2);
    free(ev);
    scn_free(&s);
}

static void test_schedule_trace(void **state) {
    (void)state;
    static const char y[] =
        "model: m\ntrace: t.csv\ntenants:\n"
        "  - {name: a, key: ka, stop: 3s}\n"
        "  - {name: b, key: kb, arrival: {process: constant, rate: 1},"
        " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";
    static const char csv[] =
        "timestamp_s,tenant,prompt_tokens,output_tokens\n"
        "0.5,a,10,11\n1,a,20,21\n2.5,a,30,31\n3.5,a,40,41\n";
    scn s;
    char err[256];
    parse(y, &s);
    assert_int_equal(scn_trace_parse(&s, csv, strlen(csv), "t.csv", err, sizeof err), 0);
    arr_event *ev;
    size_t n;
    assert_int_equal(arr_schedule(&s, 1, 4, 0, &ev, &n), 0);
    /* b: constant 1/s from one gap after 0: 1, 2, 3; a: 0.5, 1, 2.5 (3.5 is
     * past its stop). At t = 1 the process (tenant b) goes before the trace. */
    static const double t[] = {0.5, 1, 1, 2, 2.5, 3};
    static const int who[] = {0, 1, 0, 1, 0, 1};
    assert_int_equal(n, 6);
    for (size_t i = 0; i < n; i++) {
        assert_true(ev[i].t_s == t[i]);
        assert_int_equal(ev[i].tenant, who[i]);
    }
    assert_int_equal(ev[0].prompt_tokens, 10);
    assert_int_equal(ev[0].output_tokens, 11);
    assert_int_equal(ev[4].output_tokens, 31);
    free(ev);
    /* Only the trace, bounded by count; a source that runs dry ends it. */
    s.tenants[1].stop_s = 0.5;
    assert_int_equal(arr_schedule(&s, 1, 0, 100, &ev, &n), 0);
    assert_int_equal(n, 3);
    free(ev);
    scn_free(&s);
}

/* ---- streaming ------------------------------------------------------------- */

/* The reference: arr_schedule as it was before streaming, a linear scan of
 * the tenants' next arrivals and a cursor over the sorted trace (default
 * options only). The stream must give exactly its events. */
static size_t ref_schedule(const scn *s, uint64_t seed, double until_s, size_t max, arr_event *out, size_t cap) {
    typedef struct {
        double next;
        rng gaps, lens;
    } src_t;
    int nt = s->n_tenants;
    src_t *src = calloc((size_t)nt, sizeof *src);
    if (until_s <= 0) until_s = INFINITY;
    for (int i = 0; i < nt; i++) {
        const scn_tenant *t = &s->tenants[i];
        rng_seed_stream(&src[i].gaps, seed, 2 * (uint64_t)i);
        rng_seed_stream(&src[i].lens, seed, 2 * (uint64_t)i + 1);
        double first = t->arrival.process == SCN_ARR_NONE ? INFINITY : t->start_s + arr_gap(&t->arrival, &src[i].gaps);
        src[i].next = t->stop_s > 0 && first >= t->stop_s ? INFINITY : first;
    }
    rng req;
    rng_seed_stream(&req, seed, UINT64_C(0xfeedface));
    size_t ti = 0, cnt = 0;
    for (;;) {
        int best = -1;
        double bt = INFINITY;
        for (int i = 0; i < nt; i++)
            if (src[i].next < bt) bt = src[i].next, best = i;
        while (ti < s->n_trace) {
            const scn_trace_row *row = &s->trace[ti];
            const scn_tenant *t = &s->tenants[row->tenant];
            if (row->t_s >= t->start_s && (t->stop_s <= 0 || row->t_s < t->stop_s)) break;
            ti++;
        }
        int from_trace = ti < s->n_trace && s->trace[ti].t_s < bt;
        double t = from_trace ? s->trace[ti].t_s : bt;
        if (!(t < until_s) || (max && cnt >= max)) break;
        assert_true(cnt < cap);
        arr_event *e = &out[cnt++];
        e->t_s = t;
        e->seed = rng_next(&req);
        if (from_trace) {
            const scn_trace_row *row = &s->trace[ti++];
            e->tenant = row->tenant;
            e->prompt_tokens = row->prompt_tokens;
            e->output_tokens = row->output_tokens;
        } else {
            const scn_tenant *tn = &s->tenants[best];
            e->tenant = best;
            e->prompt_tokens = arr_len(&tn->prompt, &src[best].lens);
            e->output_tokens = arr_len(&tn->output, &src[best].lens);
            double nx = bt + arr_gap(&tn->arrival, &src[best].gaps);
            src[best].next = tn->stop_s > 0 && nx >= tn->stop_s ? INFINITY : nx;
        }
    }
    free(src);
    return cnt;
}

/* Everything the stream gives, into a malloc'd array. */
static arr_event *drain(const scn *s, uint64_t seed, double until_s, size_t max, size_t *n) {
    arr_stream *st;
    char err[512];
    if (arr_stream_open(&st, s, seed, until_s, max, err, sizeof err)) fail_msg("%s", err);
    size_t cap = 1024;
    arr_event *ev = malloc(cap * sizeof *ev);
    int rc;
    for (*n = 0; (rc = arr_stream_next(st, &ev[*n])) == 1;)
        if (++*n == cap) ev = realloc(ev, (cap *= 2) * sizeof *ev);
    if (rc) fail_msg("stream: %s", arr_stream_error(st));
    assert_int_equal(arr_stream_count(st), *n);
    assert_int_equal(arr_stream_next(st, &ev[*n]), 0);    /* the end stays the end */
    arr_stream_close(st);
    return ev;
}

/* Ties on purpose: constant processes at the same rate, a trace on the
 * same grid, and a burst of equal trace times. */
static const char MIXED[] =
    "model: m\ntrace: t.csv\ntenants:\n"
    "  - {name: a, key: k, arrival: {process: constant, rate: 2}, start: 1s,"
    " prompt_tokens: {dist: lognormal, mean: 50, cv: 1, min: 1, max: 400}, output_tokens: {dist: fixed, value: 4}}\n"
    "  - {name: tr, key: k, stop: 20s}\n"
    "  - {name: b, key: k, arrival: {process: constant, rate: 2}, stop: 30s,"
    " prompt_tokens: {dist: uniform, min: 1, max: 9}, output_tokens: {dist: uniform, min: 1, max: 9}}\n"
    "  - {name: c, key: k, arrival: {process: gamma, rate: 7, cv: 4}, start: 2s, stop: 9s,"
    " prompt_tokens: {dist: fixed, value: 2}, output_tokens: {dist: fixed, value: 3}}\n"
    "  - {name: tr2, key: k, start: 3s}\n"
    "  - {name: d, key: k, arrival: {process: poisson, rate: 11},"
    " prompt_tokens: {dist: fixed, value: 2}, output_tokens: {dist: fixed, value: 3}}\n";

/* sorted: the burst at 7.25 s in its place; else at the end, for the
 * sort of a trace loaded whole. */
static char *mixed_trace(size_t *len, int sorted) {
    size_t cap = 64 * 1024, off = 0;
    char *csv = malloc(cap);
    off += (size_t)snprintf(csv + off, cap - off, "timestamp_s,tenant,prompt_tokens,output_tokens\n");
    for (int i = 0; i <= 120; i++) {
        if (i == (sorted ? 15 : 120))
            for (int j = 0; j < 5; j++) off += (size_t)snprintf(csv + off, cap - off, "7.25,tr2,%d,1\n", 100 + j);
        if (i < 120)
            off += (size_t)snprintf(csv + off, cap - off, "%g,%s,%d,%d\n", i * 0.5, i % 3 ? "tr" : "tr2", i + 1,
                                    2 * i + 1);
    }
    *len = off;
    return csv;
}

static void test_stream_matches_reference(void **state) {
    (void)state;
    scn two, mixed;
    char err[256];
    parse(TWO, &two);
    parse(MIXED, &mixed);
    size_t len;
    char *csv = mixed_trace(&len, 0);
    if (scn_trace_parse(&mixed, csv, len, "t.csv", err, sizeof err)) fail_msg("%s", err);
    free(csv);
    const scn *cases[] = {&two, &mixed};
    static const struct {
        double until;
        size_t max;
    } bounds[] = {{100, 0}, {0, 777}, {25, 300}, {0.5, 0}, {40, 1}};
    enum { CAP = 20000 };
    arr_event *want = malloc(CAP * sizeof *want);
    size_t total = 0;
    for (size_t c = 0; c < 2; c++)
        for (uint64_t seed = 1; seed <= 4; seed++)
            for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
                size_t nw = ref_schedule(cases[c], seed, bounds[b].until, bounds[b].max, want, CAP), n, n2;
                arr_event *got = drain(cases[c], seed, bounds[b].until, bounds[b].max, &n), *sched;
                if (n != nw) fail_msg("case %zu seed %llu bound %zu: %zu events, want %zu", c, (unsigned long long)seed, b, n, nw);
                same_events(got, want, n);
                assert_int_equal(arr_schedule(cases[c], seed, bounds[b].until, bounds[b].max, &sched, &n2), 0);
                assert_int_equal(n2, n);
                same_events(sched, want, n);
                free(got);
                free(sched);
                total += n;
            }
    assert_true(total > 10000);     /* the cases are not empty */
    free(want);
    scn_free(&two);
    scn_free(&mixed);
}

/* The same trace streamed from a file gives the events of the trace
 * loaded whole, and the stream counts its rows. */
static void test_stream_trace_file(void **state) {
    (void)state;
    char path[512], err[256];
    size_t len;
    char *csv = mixed_trace(&len, 1);
    tu_path(path, sizeof path, "mixed.csv");
    assert_int_equal(tu_write_file(path, csv, len), 0);
    scn whole, streamed;
    parse(MIXED, &whole);
    parse(MIXED, &streamed);
    if (scn_trace_parse(&whole, csv, len, "t.csv", err, sizeof err)) fail_msg("%s", err);
    free(csv);
    for (int k = 0; k < 2; k++) {
        /* k = 1: at twice the load and a time scale, both ways alike. */
        scn_opts o = {.stream = 1, .load = k ? 2 : 0, .time_scale = k ? 3 : 0};
        if (scn_opts_apply(&streamed, &o, err, sizeof err)) fail_msg("%s", err);
        o.stream = 0;
        if (scn_opts_apply(&whole, &o, err, sizeof err)) fail_msg("%s", err);
        if (scn_trace_load(&streamed, path, err, sizeof err)) fail_msg("%s", err);
        assert_null(streamed.trace);
        size_t n1, n2;
        arr_event *a = drain(&whole, 5, 60, 0, &n1), *b = drain(&streamed, 5, 60, 0, &n2);
        assert_int_equal(n1, n2);
        same_events(a, b, n1);
        size_t rows = 0;
        for (size_t i = 0; i < n1; i++) rows += a[i].tenant == 1 || a[i].tenant == 4;
        assert_true(rows > 30);
        free(a);
        free(b);
    }
    arr_stream *st;
    if (arr_stream_open(&st, &streamed, 5, 0, 1000000, err, sizeof err)) fail_msg("%s", err);
    arr_event e;
    while (arr_stream_next(st, &e) == 1) {}
    scn_trace_stats ts = arr_stream_trace_stats(st);
    assert_int_equal(ts.rows, 125);
    assert_int_equal(ts.used, 125);
    arr_stream_close(st);
    /* A bad row: every event before it, then the error, which stays. */
    static const char bad[] = "timestamp_s,tenant,prompt_tokens,output_tokens\n0.5,tr,1,1\n1,tr,1,1\n0.75,tr,1,1\n";
    assert_int_equal(tu_write_file(path, bad, sizeof bad - 1), 0);
    static const char one[] = "model: m\ntrace: t.csv\ntenants:\n  - {name: tr, key: k}\n";
    scn s1;
    parse(one, &s1);
    scn_opts o = {.stream = 1};
    if (scn_opts_apply(&s1, &o, err, sizeof err)) fail_msg("%s", err);
    if (scn_trace_load(&s1, path, err, sizeof err)) fail_msg("%s", err);
    if (arr_stream_open(&st, &s1, 1, 100, 0, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(arr_stream_error(st), "");
    assert_int_equal(arr_stream_next(st, &e), 1);
    assert_true(e.t_s == 0.5);
    assert_int_equal(arr_stream_next(st, &e), 1);
    assert_true(e.t_s == 1);
    assert_int_equal(arr_stream_next(st, &e), TS_ERR_SCENARIO);
    assert_non_null(strstr(arr_stream_error(st), "mixed.csv:4: timestamp_s '0.75' is earlier than the row before"));
    assert_int_equal(arr_stream_next(st, &e), TS_ERR_SCENARIO);
    arr_stream_close(st);
    /* arr_schedule passes the code on. */
    arr_event *ev;
    size_t n;
    assert_int_equal(arr_schedule(&s1, 1, 100, 0, &ev, &n), TS_ERR_SCENARIO);
    assert_null(ev);
    remove(path);
    assert_int_equal(arr_stream_open(&st, &s1, 1, 100, 0, err, sizeof err), TS_ERR_IO);
    assert_null(st);
    assert_non_null(strstr(err, "mixed.csv: No such file"));
    assert_int_equal(arr_stream_open(&st, &s1, 1, 0, 0, err, sizeof err), TS_ERR_INVAL);
    scn_free(&s1);
    scn_free(&whole);
    scn_free(&streamed);
}

/* load multiplies rates and divides trace times; time_scale multiplies
 * trace times; starts and stops stay where they are. */
static void test_stream_load(void **state) {
    (void)state;
    static const char y[] =
        "model: m\ntrace: t.csv\ntenants:\n"
        "  - {name: p, key: k, arrival: {process: constant, rate: 1}, stop: 3.1s,"
        " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n"
        "  - {name: tr, key: k}\n";
    static const char csv[] = "timestamp_s,tenant,prompt_tokens,output_tokens\n1,tr,1,1\n4,tr,1,1\n8,tr,1,1\n";
    scn s;
    char err[256];
    parse(y, &s);
    static const struct {
        double load, scale;
        size_t n;
        double t[10];
        int who[10];
    } cases[] = {
        {0, 0, 5, {1, 1, 2, 3, 4}, {0, 1, 0, 0, 1}},
        {2, 0, 9, {0.5, 0.5, 1, 1.5, 2, 2, 2.5, 3, 4}, {0, 1, 0, 0, 0, 1, 0, 0, 1}},
        {1, 0.5, 6, {0.5, 1, 2, 2, 3, 4}, {1, 0, 0, 1, 0, 1}},
        {0.5, 0.25, 4, {0.5, 2, 2, 4}, {1, 0, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        scn_opts o = {.load = cases[c].load, .time_scale = cases[c].scale};
        if (scn_opts_apply(&s, &o, err, sizeof err)) fail_msg("%s", err);
        if (scn_trace_parse(&s, csv, strlen(csv), "t.csv", err, sizeof err)) fail_msg("%s", err);
        size_t n;
        arr_event *ev = drain(&s, 1, 4.5, 0, &n);
        if (n != cases[c].n) fail_msg("case %zu: %zu events, want %zu", c, n, cases[c].n);
        for (size_t i = 0; i < n; i++)
            if (ev[i].t_s != cases[c].t[i] || ev[i].tenant != cases[c].who[i])
                fail_msg("case %zu event %zu: t %g tenant %d", c, i, ev[i].t_s, ev[i].tenant);
        free(ev);
    }
    scn_free(&s);
}

/* An hour of 500 tenants, streamed: the heap and the generators are all
 * the stream holds, so the heap in use does not grow with the events. */
static void test_stream_memory(void **state) {
    (void)state;
    static const char one[] =
        "model: m\ntenants:\n  - {name: t, key: k, arrival: {process: poisson, rate: 0.3},"
        " prompt_tokens: {dist: lognormal, mean: 200, cv: 1, min: 1, max: 8000}, output_tokens: {dist: fixed, value: 9}}\n";
    scn s;
    parse(one, &s);
    enum { NT = 500 };
    scn_tenant *t = calloc(NT, sizeof *t);
    for (int i = 0; i < NT; i++) {
        t[i] = s.tenants[0];
        snprintf(t[i].name, sizeof t[i].name, "t%d", i);
        t[i].key = strdup("k");
        t[i].arrival.rate = 0.1 + 0.001 * i;
    }
    free(s.tenants[0].key);
    free(s.tenants);
    s.tenants = t;
    s.n_tenants = NT;
    arr_stream *st;
    char err[256];
    if (arr_stream_open(&st, &s, 3, 3600, 0, err, sizeof err)) fail_msg("%s", err);
    arr_event e;
    assert_int_equal(arr_stream_next(st, &e), 1);
#ifdef __GLIBC__
    size_t before = mallinfo2().uordblks;
#endif
    double last = e.t_s;
    size_t n = 1, per[NT] = {0};
    while (arr_stream_next(st, &e) == 1) {
        assert_true(e.t_s >= last && e.t_s < 3600);
        last = e.t_s;
        per[e.tenant]++;
        n++;
    }
#ifdef __GLIBC__
    assert_int_equal(mallinfo2().uordblks, before);
#endif
    /* Sum of rates 500 * 0.1 + 0.001 * 124750 = 174.75/s over 3600 s:
     * 629100 arrivals, sd 793. */
    assert_true(n > 629100 - 4000 && n < 629100 + 4000);
    assert_true(per[0] > 300 && per[NT - 1] > per[0] * 4);
    arr_stream_close(st);
    scn_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_and_normal), cmocka_unit_test(test_poisson),  cmocka_unit_test(test_gamma),
        cmocka_unit_test(test_constant),           cmocka_unit_test(test_lengths),  cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_schedule_trace),     cmocka_unit_test(test_stream_matches_reference),
        cmocka_unit_test(test_stream_trace_file),  cmocka_unit_test(test_stream_load),
        cmocka_unit_test(test_stream_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
