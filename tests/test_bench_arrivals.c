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

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/arrivals.h"
#include "bench/scenario.h"
#include "err.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_and_normal), cmocka_unit_test(test_poisson),  cmocka_unit_test(test_gamma),
        cmocka_unit_test(test_constant),           cmocka_unit_test(test_lengths),  cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_schedule_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
