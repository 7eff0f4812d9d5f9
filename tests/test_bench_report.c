/* test_bench_report.c - unit tests of the bench figures (src/bench/report.c)
 * against values worked out by hand: percentiles, Jain's index, backlogged
 * slots, TTFT/TPOT/E2E, SLO attainment, errors by status, censored TTFTs,
 * weighted service rates, the JSON document and the table.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/report.h"
#include "bench/scenario.h"
#include "err.h"
#include "fq.h"

#define EPS 1e-9

static void close_to(double got, double want, const char *what) {
    if (fabs(got - want) > EPS * (1 + fabs(want))) fail_msg("%s: got %.12g, want %.12g", what, got, want);
}

static void test_percentile(void **state) {
    (void)state;
    const double v[] = {1, 2, 3, 4};
    /* rank p x (n - 1): p50 -> 1.5 -> 2.5; p90 -> 2.7 -> 3.7; p99 -> 2.97 -> 3.97 */
    close_to(rpt_percentile(v, 4, 0.5), 2.5, "p50");
    close_to(rpt_percentile(v, 4, 0.9), 3.7, "p90");
    close_to(rpt_percentile(v, 4, 0.99), 3.97, "p99");
    close_to(rpt_percentile(v, 4, 0), 1, "p0");
    close_to(rpt_percentile(v, 4, 1), 4, "p100");
    const double one[] = {7};
    close_to(rpt_percentile(one, 1, 0.99), 7, "single");
    close_to(rpt_percentile(v, 0, 0.5), 0, "empty");
    /* 1..100: p99 at rank 98.01 -> 99.01 */
    double h[100];
    for (int i = 0; i < 100; i++) h[i] = i + 1;
    close_to(rpt_percentile(h, 100, 0.99), 99.01, "p99 of 1..100");
    close_to(rpt_percentile(h, 100, 0.9), 90.1, "p90 of 1..100");

    double u[] = {0.3, 0.1, 0.2, 0.6};
    rpt_dist d;
    rpt_dist_of(u, 4, &d);
    assert_int_equal(d.n, 4);
    close_to(d.mean, 0.3, "mean");
    close_to(d.p50, 0.25, "p50 unsorted input");
    close_to(d.max, 0.6, "max");
    rpt_dist_of(u, 0, &d);
    assert_int_equal(d.n, 0);
    close_to(d.p99, 0, "empty p99");
}

static void test_jain(void **state) {
    (void)state;
    /* The report uses core's fq_jain; check the values it relies on. */
    const double eq[] = {3, 3, 3, 3}, half[] = {1, 0}, x[] = {1, 2, 3};
    close_to(fq_jain(eq, 4), 1, "equal");
    close_to(fq_jain(half, 2), 0.5, "one of two");
    close_to(fq_jain(x, 3), 36.0 / 42.0, "1,2,3");   /* 6^2 / (3 x 14) */
    close_to(fq_jain(x, 0), 1, "none");
}

static void test_slots(void **state) {
    (void)state;
    uint8_t cov[8];
    /* [0.5, 3.2) and [3.0, 4.0) merge into [0.5, 4.0): slots 1, 2, 3. */
    double a[] = {3.0, 0.5}, b[] = {4.0, 3.2};
    assert_int_equal(rpt_slots_covered(a, b, 2, 6, cov), 3);
    static const uint8_t want[6] = {0, 1, 1, 1, 0, 0};
    assert_memory_equal(cov, want, 6);
    /* Exact edges: [0, 1) covers slot 0; [1.2, 1.9) covers nothing; an
     * interval past the run is clipped. */
    double c[] = {0, 1.2, 4.5}, d[] = {1, 1.9, 99};
    assert_int_equal(rpt_slots_covered(c, d, 3, 6, cov), 2);   /* slots 0 and 5 */
    assert_int_equal(cov[0], 1);
    assert_int_equal(cov[5], 1);
    assert_int_equal(rpt_slots_covered(c, d, 0, 6, NULL), 0);
    /* Touching intervals merge: [0, 1.5) + [1.5, 3) covers 0, 1, 2. */
    double e[] = {1.5, 0}, f[] = {3, 1.5};
    assert_int_equal(rpt_slots_covered(e, f, 2, 3, NULL), 3);
}

static const char SCN[] =
    "model: m\nservice: {input_weight: 1, output_weight: 2}\ntenants:\n"
    "  - {name: a, key: k, weight: 1, slo: {ttft_ms: 100, tpot_ms: 50}, arrival: {process: constant, rate: 1},"
    " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n"
    "  - {name: b, key: k, weight: 2, arrival: {process: constant, rate: 1},"
    " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n"
    "  - {name: c, key: k, arrival: {process: constant, rate: 1},"
    " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";

static float *times(int n, ...) {
    float *t = malloc((size_t)n * sizeof *t);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) t[i] = (float)va_arg(ap, double);
    va_end(ap);
    return t;
}

static rpt_req req(int tenant, int status, double sched, double first, double end, int np, int nout) {
    return (rpt_req){tenant, status, sched, sched, first, end, np, nout, 0, NULL};
}

/*
 * Tenant a (weight 1, SLO TTFT 100 ms, TPOT 50 ms), over a 5 s run:
 *   w: due 0, waits until 4.5 (first token), ends 4.9: 4 output tokens in
 *      2 events at 4.5 and 4.6; TTFT 4.5 (miss); keeps a backlogged for
 *      slots 0..3.
 *   s: due 0, first 0.05, ends 0.41, 10 prompt, 10 output tokens in 5 events
 *      at 0.05 0.1 0.2 0.3 0.41; TTFT 0.05, TPOT 0.36 / 9 = 0.04 (meets).
 *   t: due 1.0, first 1.2, ends 1.5, 2 prompt, 4 output in 1 event at 1.2:
 *      TTFT 0.2 (miss), TPOT 0.3 / 3 = 0.1.
 *   x: 429 at 2.0.
 *   y: aborted at 5.0, due 4.6, no token: censored TTFT 0.4 (its wait
 *      starts after w's first token, so slot 4 is not backlogged).
 * a's service in slots 0..3: s: 10 x 1 + 10 x 2 = 30 (slot 0); t: 2 + 8 =
 * 10 (slot 1); 40 in all, rate 40 / 1 / 4 = 10.
 * Tenant b (weight 2): one request waiting 0 .. 4.2 (slots 0..3), and one
 * served: 20 prompt at 0.5, 30 output in 3 events at 0.5, 1.5, 2.5 -> 20 + 60
 * = 80 in backlogged slots, rate 80 / 2 / 4 = 10. Jain over {10, 10} = 1.
 * Tenant c: one quick request, never backlogged: not in Jain's index.
 */
static size_t build(rpt_req *r) {
    size_t n = 0;
    r[n] = req(0, 200, 0, 4.5, 4.9, 3, 4);
    r[n].n_events = 2, r[n].ev_t = times(2, 4.5, 4.6), n++;
    r[n] = req(0, 200, 0, 0.05, 0.41, 10, 10);
    r[n].n_events = 5, r[n].ev_t = times(5, 0.05, 0.1, 0.2, 0.3, 0.41), n++;
    r[n] = req(0, 200, 1.0, 1.2, 1.5, 2, 4);
    r[n].n_events = 1, r[n].ev_t = times(1, 1.2), n++;
    r[n++] = req(0, 429, 2.0, -1, 2.0, 5, 0);
    r[n++] = req(0, RPT_ST_ABORTED, 4.6, -1, 5.0, 5, 0);
    r[n] = req(1, 200, 0, 4.2, 4.3, 1, 1);
    r[n].n_events = 1, r[n].ev_t = times(1, 4.2), n++;
    r[n] = req(1, 200, 0.1, 0.5, 2.5, 20, 30);
    r[n].n_events = 3, r[n].ev_t = times(3, 0.5, 1.5, 2.5), n++;
    r[n] = req(2, 200, 1.0, 1.1, 1.3, 1, 2);
    r[n].n_events = 2, r[n].ev_t = times(2, 1.1, 1.3), n++;
    r[n++] = req(2, RPT_ST_SKIPPED, 3.0, -1, 3.0, 1, 0);
    return n;
}

static void test_compute(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    const rpt_tenant *a = &p.t[0], *b = &p.t[1], *c = &p.t[2];
    assert_int_equal(a->due, 5);
    assert_int_equal(a->sent, 5);
    assert_int_equal(a->completed, 3);
    assert_int_equal(a->errors, 2);
    assert_int_equal(a->n_codes, 2);   /* aborted:1 and 429:1, ties by status */
    assert_int_equal(a->codes[0].status, RPT_ST_ABORTED);
    assert_int_equal(a->codes[1].status, 429);
    /* TTFT samples 4.5, 0.05, 0.2 and the censored 0.4: sorted .05 .2 .4 4.5 */
    assert_int_equal(a->ttft.n, 4);
    assert_int_equal(a->ttft_censored, 1);
    close_to(a->ttft.p50, 0.3, "a ttft p50");   /* rank 1.5: (0.2 + 0.4) / 2 */
    close_to(a->ttft.max, 4.5, "a ttft max");
    /* TPOT: w 0.4 / 3, s 0.36 / 9 = 0.04, t 0.3 / 3 = 0.1 */
    assert_int_equal(a->tpot.n, 3);
    close_to(a->tpot.p50, 0.1, "a tpot p50");
    close_to(a->tpot.max, (4.9 - 4.5) / 3, "a tpot max");
    /* E2E of completed: 4.9, 0.41, 0.5 */
    assert_int_equal(a->e2e.n, 3);
    close_to(a->e2e.p50, 0.5, "a e2e p50");
    /* ITL: w 0.1; s 0.05 0.1 0.1 0.11 (float event times) */
    assert_int_equal(a->itl.n, 5);
    assert_true(fabs(a->itl.max - 0.11) < 1e-6);
    /* SLO: only s meets both: 1 of 5 due */
    assert_int_equal(a->slo_met, 1);
    close_to(a->slo_attainment, 0.2, "a slo");
    close_to(a->tokens_out, 18, "a tokens out");
    close_to(a->tok_s, 18 / 5.0, "a tok/s");
    close_to(a->backlogged_s, 4, "a backlogged");
    assert_true(fabs(a->service_rate - 10) < 1e-6);
    /* all of a's service: 40 + w's 3 + 8 = 51 */
    assert_true(fabs(a->service - 51) < 1e-6);
    close_to(b->backlogged_s, 4, "b backlogged");
    assert_true(fabs(b->service_rate - 10) < 1e-6);
    close_to(b->slo_attainment, -1, "b has no SLO");
    close_to(c->backlogged_s, 0, "c never backlogged");
    assert_int_equal(c->sent, 1);
    assert_int_equal(c->due, 2);
    assert_int_equal(c->codes[0].status, RPT_ST_SKIPPED);
    assert_int_equal(p.n_jain, 2);
    close_to(p.jain, 1, "jain equal");
    assert_int_equal(p.due, 9);
    assert_int_equal(p.completed, 6);
    assert_int_equal(p.n_bins, 5);
    /* a's output tokens per bin: s 10 in bin 0, t 4 in bin 1, w 4 in bin 4 */
    assert_true(fabs(p.tokens[0] - 10) < 1e-9 && fabs(p.tokens[1] - 4) < 1e-9 && fabs(p.tokens[4] - 4) < 1e-9);
    rpt_free(&p);

    /* Halve b's service: rates 10 and 5 -> (15)^2 / (2 x 125) = 0.9. */
    r[6].n_prompt = 10;
    r[6].n_out = 15;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    assert_true(fabs(p.t[1].service_rate - 5) < 1e-6);
    assert_true(fabs(p.jain - 0.9) < 1e-9);

    /* The JSON has every figure; spot-check a few by reading it back. */
    char *js = rpt_json(&s, &p, r, n, "http://127.0.0.1:1", 42);
    assert_non_null(js);
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "seed")->valuestring, "42");
    assert_true(fabs(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "jain"), "index")->valuedouble - 0.9) < 1e-9);
    cJSON *ta = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tenants"), 0);
    assert_string_equal(cJSON_GetObjectItem(ta, "name")->valuestring, "a");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(ta, "errors_by_status"), "429")->valueint, 1);
    assert_true(fabs(cJSON_GetObjectItem(ta, "slo_attainment")->valuedouble - 0.2) < 1e-12);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tenants"), 1), "slo_attainment")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "requests")), (int)n);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(ta, "output_tokens_per_bin")), 5);
    cJSON_Delete(j);
    free(js);

    /* The table names every tenant and the index. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    rpt_table(f, &s, &p);
    fclose(f);
    assert_non_null(strstr(buf, "Jain's index of weighted service among backlogged tenants: 0.9000"));
    assert_non_null(strstr(buf, "429:1"));
    assert_non_null(strstr(buf, "20.0%"));
    free(buf);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

static void test_empty(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt p;
    assert_int_equal(rpt_compute(&s, NULL, 0, 0, &p), 0);
    assert_int_equal(p.due, 0);
    close_to(p.jain, 1, "nobody backlogged");
    char *js = rpt_json(&s, &p, NULL, 0, "u", 1);
    assert_non_null(js);
    free(js);
    rpt_free(&p);
    scn_free(&s);
}

static void test_status_names(void **state) {
    (void)state;
    char b[16];
    assert_string_equal(rpt_status_name(429, b), "429");
    assert_string_equal(rpt_status_name(RPT_ST_TRANSPORT, b), "transport");
    assert_string_equal(rpt_status_name(RPT_ST_ABORTED, b), "aborted");
    assert_string_equal(rpt_status_name(RPT_ST_STREAM, b), "stream");
    assert_string_equal(rpt_status_name(RPT_ST_SKIPPED, b), "skipped");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile), cmocka_unit_test(test_jain),  cmocka_unit_test(test_slots),
        cmocka_unit_test(test_compute),    cmocka_unit_test(test_empty), cmocka_unit_test(test_status_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
