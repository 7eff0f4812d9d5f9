/* test_bench_report.c - unit tests of the bench figures (src/bench/report.c)
 * against values worked out by hand: percentiles, Jain's index, backlogged
 * slots, TTFT/TPOT/E2E, SLO attainment, errors by status, censored TTFTs,
 * weighted service rates, the JSON document and the table; and the shared
 * report's additions: the all-tenants row, request throughput and goodput,
 * ITL, Gini, Jain shown only with two backlogged tenants, cost, the
 * streaming accumulator (exact = rpt_compute, bounded within 1%,
 * deterministic) and the plots' SLO lines.
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
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/report.h"
#include "bench/scenario.h"
#include "err.h"
#include "file.h"
#include "fq.h"
#include "bench/plot.h"
#include "testutil.h"

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

static void test_gini(void **state) {
    (void)state;
    /* Sum over ordered pairs |xi - xj| / (2 n sum). */
    const double eq[] = {3, 3, 3, 3}, half[] = {1, 0}, x[] = {1, 2, 3}, one[] = {0, 0, 0, 4}, zero[] = {0, 0};
    close_to(fq_gini(eq, 4), 0, "equal");
    close_to(fq_gini(half, 2), 0.5, "one of two");          /* 2 x 1 / (2 x 2 x 1) */
    close_to(fq_gini(x, 3), 8.0 / 36.0, "1,2,3");           /* pairs 1+2+1, twice: 8 / (2 x 3 x 6) */
    close_to(fq_gini(one, 4), 0.75, "one has all");         /* (n - 1) / n */
    close_to(fq_gini(zero, 2), 0, "all zero");
    close_to(fq_gini(x, 0), 0, "none");
    close_to(fq_gini(x, 1), 0, "one");
}

/* The records as rpt_compute feeds them, into any accumulator. */
static void feed(rpt_acc *a, const scn *s, const rpt_req *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        assert_int_equal(rpt_acc_request(a, q), 0);
        if (!q->ev_t || q->n_events <= 0) {
            if (q->t_first >= 0) rpt_acc_event(a, q->tenant, q->t_first, 0, s->w_in * q->n_prompt);
            if (q->n_out > 0) rpt_acc_event(a, q->tenant, q->t_end, q->n_out, s->w_out * q->n_out);
        }
        if (q->status != RPT_ST_SKIPPED)
            assert_int_equal(rpt_acc_backlog(a, q->tenant, q->t_sched, q->t_first >= 0 ? q->t_first : q->t_end), 0);
    }
}

static char *table_of(const scn *s, const rpt *p) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    rpt_table(f, s, p);
    fclose(f);
    return buf;
}

/* build()'s run: the all-tenants row, request throughput and goodput. */
static void test_all_row(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    const rpt_tenant *al = &p.all;
    assert_int_equal(al->due, 9);
    assert_int_equal(al->sent, 8);
    assert_int_equal(al->completed, 6);
    assert_int_equal(al->errors, 3);
    /* skipped (c), aborted and 429 (a): one each, ties by status */
    assert_int_equal(al->n_codes, 3);
    assert_int_equal(al->codes[0].status, RPT_ST_SKIPPED);
    assert_int_equal(al->codes[1].status, RPT_ST_ABORTED);
    assert_int_equal(al->codes[2].status, 429);
    close_to(al->tokens_in, 15 + 21 + 1, "all tokens in");   /* a 3+10+2, b 1+20, c 1 */
    close_to(al->tokens_out, 18 + 31 + 2, "all tokens out");
    /* TTFT over all: a .05 .2 .4 4.5, b 4.2 .4, c .1 -> sorted .05 .1 .2 .4 .4 4.2 4.5 */
    assert_int_equal(al->ttft.n, 7);
    assert_int_equal(al->ttft_censored, 1);
    close_to(al->ttft.p50, 0.4, "all ttft p50");
    close_to(al->ttft.mean, 9.85 / 7, "all ttft mean");
    close_to(al->ttft.max, 4.5, "all ttft max");
    /* E2E: a 4.9 .41 .5, b 4.3 2.4, c .3 -> p50 at rank 2.5: (.5 + 2.4) / 2 */
    assert_int_equal(al->e2e.n, 6);
    close_to(al->e2e.p50, 1.45, "all e2e p50");
    /* TPOT: a's three, b's 2.0 / 29, c's 0.2 */
    assert_int_equal(al->tpot.n, 5);
    /* ITL: a 5 gaps, b 2 (1.0 each), c 1 (0.2) */
    assert_int_equal(al->itl.n, 8);
    assert_true(fabs(al->itl.max - 1.0) < 1e-6);
    /* SLO: only a has targets (1 of 5 met); b and c have none, so their
     * completed requests all count as met for goodput. */
    close_to(al->slo_attainment, 0.2, "all slo");
    assert_int_equal(p.t[1].slo_met, 2);
    assert_int_equal(al->slo_met, 1 + 2 + 1);
    close_to(p.t[0].req_s, 3 / 5.0, "a req/s");
    close_to(p.t[0].goodput_s, 1 / 5.0, "a goodput");
    close_to(p.t[1].goodput_s, 2 / 5.0, "b goodput");
    close_to(al->req_s, 6 / 5.0, "all req/s");
    close_to(al->goodput_s, 4 / 5.0, "all goodput");
    close_to(al->tok_s, 51 / 5.0, "all tok/s");
    assert_true(fabs(al->service - (51 + 3 + 80 + 5)) < 1e-6);   /* a; b 1 + 2 and 20 + 60; c 1 + 4 */
    assert_int_equal(p.due, al->due);

    /* The table: two tables with an (all) row each, the legend, mean/p50/p90/p99. */
    char *buf = table_of(&s, &p);
    assert_non_null(strstr(buf, "svc/s/w: weighted service per backlogged second = (w_in x prompt + w_out x output "
                                "tokens) / weight / s (w_in 1, w_out 2)"));
    assert_non_null(strstr(buf, "ITL mean/p50/p90/p99"));
    /* a's TTFT: mean (0.05 + 0.2 + 0.4 + 4.5) / 4 = 1.2875 s, p50 300 ms,
     * p90 at rank 2.7: 0.4 + 0.7 x 4.1 = 3.27 s, p99 at 2.97: 4.377 s;
     * b's TPOT: one sample, 2.0 / 29 = 69.0 ms. */
    assert_non_null(strstr(buf, "\na              1288/300/3270/4377 "));
    assert_non_null(strstr(buf, " 69.0/69.0/69.0/69.0 "));
    free(buf);
    /* Below a millisecond, three significant figures (CPU decode steps). */
    rpt_dist keep = p.t[2].tpot;
    p.t[2].tpot = (rpt_dist){1, 12.3e-6, 4.56e-6, 7.891e-4, 0.5e-3, 1e-3};
    buf = table_of(&s, &p);
    assert_non_null(strstr(buf, " 0.0123/0.00456/0.789/0.5 "));
    p.t[2].tpot = keep;
    size_t rows = 0;
    for (size_t o = 0; buf[o]; o++) rows += !strncmp(buf + o, "(all)", 5);
    assert_int_equal(rows, 2);
    assert_non_null(strstr(buf, "   1.20    0.80     10.2   20.0%"));   /* (all): req/s good/s tok/s SLO */
    assert_non_null(strstr(buf, "6 completed, 3 errors; 1.20 requests/s, goodput 0.80 requests/s"));
    free(buf);

    /* The JSON: the all object and the new per-tenant names. */
    char *js = rpt_json(&s, &p, r, n, "u", 1);
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    cJSON *ja = cJSON_GetObjectItem(j, "all");
    assert_int_equal(cJSON_GetObjectItem(ja, "completed")->valueint, 6);
    close_to(cJSON_GetObjectItem(ja, "goodput_requests_per_s")->valuedouble, 0.8, "json all goodput");
    close_to(cJSON_GetObjectItem(cJSON_GetObjectItem(ja, "itl"), "n")->valuedouble, 8, "json all itl n");
    close_to(cJSON_GetObjectItem(j, "requests_per_s")->valuedouble, 1.2, "json req/s");
    cJSON *ta = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tenants"), 0);
    close_to(cJSON_GetObjectItem(ta, "requests_per_s")->valuedouble, 0.6, "json a req/s");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(ta, "cost")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(ta, "cost_per_1k_tokens")));
    assert_string_equal(cJSON_GetObjectItem(j, "percentiles")->valuestring, "exact");
    cJSON_Delete(j);
    free(js);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

/* With one backlogged tenant, Jain and Gini are not shown (null in JSON);
 * with two, both are, Gini beside Jain. */
static void test_fairness_shown(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, 5, 5.0, &p), 0);   /* a's requests only */
    assert_int_equal(p.n_jain, 1);
    char *buf = table_of(&s, &p);
    assert_null(strstr(buf, "Jain's index of weighted service"));
    assert_non_null(strstr(buf, "Jain's index and Gini coefficient: not shown: 1 tenant was backlogged"));
    free(buf);
    char *js = rpt_json(&s, &p, r, 5, "u", 1);
    cJSON *j = cJSON_Parse(js);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "jain"), "index")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "jain"), "gini")));
    cJSON_Delete(j);
    free(js);
    rpt_free(&p);

    /* Both tenants, b's service halved: rates 10 and 5, Gini 5 x 2 / (2 x 2 x 15) = 1/6. */
    r[6].n_prompt = 10;
    r[6].n_out = 15;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    close_to(p.gini, 1.0 / 6, "gini 10, 5");
    buf = table_of(&s, &p);
    assert_non_null(strstr(buf, "0.9000 (1 = equal); Gini coefficient: 0.1667 (0 = equal) (2 tenants backlogged)"));
    free(buf);
    js = rpt_json(&s, &p, r, n, "u", 1);
    j = cJSON_Parse(js);
    close_to(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "jain"), "gini")->valuedouble, 1.0 / 6, "json gini");
    cJSON_Delete(j);
    free(js);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

static void test_cost(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    close_to(p.t[0].cost, -1, "unknown by default");
    close_to(p.t[0].engine_s, -1, "unknown by default");
    /* a: 2.0 for 10 s of engine time; 3 completed, 15 + 18 tokens. */
    rpt_cost_set(&p, 0, 10, 2.0);
    close_to(p.all.cost, -1, "all unknown while b, c are");
    char *buf = table_of(&s, &p);
    assert_non_null(strstr(buf, "     10.0     0.667      60.6\n"));   /* engine_s, 2/3, 2/33 x 1000 */
    free(buf);
    rpt_cost_set(&p, 1, 4, 1.0);
    rpt_cost_set(&p, 2, 1, 0.5);
    close_to(p.all.cost, 3.5, "all cost");
    close_to(p.all.engine_s, 15, "all engine");
    char *js = rpt_json(&s, &p, r, n, "u", 1);
    cJSON *j = cJSON_Parse(js);
    cJSON *ta = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tenants"), 0);
    close_to(cJSON_GetObjectItem(ta, "cost_per_request")->valuedouble, 2.0 / 3, "json cost/req");
    close_to(cJSON_GetObjectItem(ta, "cost_per_1k_tokens")->valuedouble, 2.0 / 33 * 1000, "json cost/1k");
    close_to(cJSON_GetObjectItem(ta, "engine_s")->valuedouble, 10, "json engine_s");
    /* all: 3.5 over 6 completed and 37 + 51 tokens */
    cJSON *ja = cJSON_GetObjectItem(j, "all");
    close_to(cJSON_GetObjectItem(ja, "cost_per_request")->valuedouble, 3.5 / 6, "json all cost/req");
    close_to(cJSON_GetObjectItem(ja, "cost_per_1k_tokens")->valuedouble, 3.5 / 88 * 1000, "json all cost/1k");
    cJSON_Delete(j);
    free(js);
    rpt_cost_set(&p, 1, -1, -1);
    close_to(p.all.cost, -1, "unknown again");
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

/* The engine's side of TTFT: per tenant a mean, pooled in the all row over
 * every first token, unknown while a tenant that completed anything is. */
static void test_engine_ttft(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    close_to(p.t[0].engine_ttft_s, -1, "unknown by default");
    close_to(p.all.engine_ttft_s, -1, "all unknown by default");
    char *buf = table_of(&s, &p);
    assert_null(strstr(buf, "in the engine"));
    free(buf);
    rpt_engine_ttft_set(&p, 0, 0.3, 3);
    close_to(p.t[0].engine_ttft_s, 0.1, "a's mean");
    close_to(p.all.engine_ttft_s, -1, "all unknown while b, c are");
    rpt_engine_ttft_set(&p, 1, 0.1, 2);
    rpt_engine_ttft_set(&p, 2, 0.2, 1);
    close_to(p.all.engine_ttft_s, 0.6 / 6, "pooled over six first tokens");
    buf = table_of(&s, &p);
    char want[96];
    snprintf(want, sizeof want, " a 100.0 (+%.1f)", (p.t[0].ttft.mean - 0.1) * 1e3);
    assert_non_null(strstr(buf, want));
    free(buf);
    char *js = rpt_json(&s, &p, r, n, "u", 1);
    cJSON *j = cJSON_Parse(js);
    cJSON *ta = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tenants"), 1);
    close_to(cJSON_GetObjectItem(ta, "engine_ttft_mean_s")->valuedouble, 0.05, "json b");
    close_to(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "all"), "engine_ttft_mean_s")->valuedouble, 0.1, "json all");
    cJSON_Delete(j);
    free(js);
    rpt_engine_ttft_set(&p, 1, -1, 0);
    close_to(p.all.engine_ttft_s, -1, "unknown again");
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

/* rpt_compute is the exact accumulator: fed by hand, the same bytes. */
static void test_acc_exact_is_compute(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p, q;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    rpt_acc a;
    assert_int_equal(rpt_acc_init(&a, &s, 5.0, 1, 0), 0);
    feed(&a, &s, r, n);
    assert_int_equal(rpt_acc_finish(&a, -1, &q), 0);
    char *jp = rpt_json(&s, &p, r, n, "u", 1), *jq = rpt_json(&s, &q, r, n, "u", 1);
    assert_string_equal(jp, jq);
    char *tp = table_of(&s, &p), *tq = table_of(&s, &q);
    assert_string_equal(tp, tq);
    free(jp), free(jq), free(tp), free(tq);
    rpt_free(&q);
    /* finish again after more adds: the new request is counted once. */
    rpt_req extra = req(2, 200, 4.0, 4.1, 4.2, 1, 1);
    assert_int_equal(rpt_acc_request(&a, &extra), 0);
    assert_int_equal(rpt_acc_finish(&a, -1, &q), 0);
    assert_int_equal(q.t[2].completed, p.t[2].completed + 1);
    assert_int_equal(q.all.ttft.n, p.all.ttft.n + 1);
    rpt_free(&q);
    /* Bad tenants are refused, and the refusal sticks. */
    assert_int_equal(rpt_acc_event(&a, 3, 1, 1, 1), TS_ERR_INVAL);
    assert_int_equal(rpt_acc_itl(&a, -1, 0.1), TS_ERR_INVAL);
    assert_int_equal(rpt_acc_finish(&a, -1, &q), TS_ERR_INVAL);
    assert_null(q.t);
    rpt_acc_deinit(&a);
    rpt_acc_deinit(&a);   /* twice is safe */
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

static void dist_within(const rpt_dist *got, const rpt_dist *want, const char *what) {
    assert_int_equal(got->n, want->n);
    const double g[] = {got->p50, got->p90, got->p99}, w[] = {want->p50, want->p90, want->p99};
    for (int i = 0; i < 3; i++)
        if (fabs(g[i] - w[i]) > 0.01 * fabs(w[i])) fail_msg("%s p%d: got %.9g, exact %.9g", what, i, g[i], w[i]);
    if (fabs(got->mean - want->mean) > 1e-9 * want->mean) fail_msg("%s mean: %.12g vs %.12g", what, got->mean, want->mean);
    close_to(got->max, want->max, what);
}

/* A synthetic run: n requests over 2 tenants with log-uniform latencies
 * from 1 ms to 100 s, fed the same to both accumulators. */
static void gen_run(rpt_acc *a, int n) {
    tu_rng_seed(7);
    for (int i = 0; i < n; i++) {
        double u = (tu_rng_float() + 1) / 2, v = (tu_rng_float() + 1) / 2, w = (tu_rng_float() + 1) / 2;
        double sched = 100.0 * i / n, ttft = 1e-3 * pow(1e5, u), tpot = 1e-3 * pow(100, v);
        int nout = 2 + (int)(w * 50);
        rpt_req q = {i % 2, i % 17 ? 200 : 503, sched, sched, sched + ttft, sched + ttft + tpot * (nout - 1), 10, nout, 0,
                     NULL};
        if (q.status != 200) q.t_first = -1, q.n_out = 0;
        assert_int_equal(rpt_acc_request(a, &q), 0);
        if (q.status == 200) {
            rpt_acc_itl(a, q.tenant, tpot);
            rpt_acc_event(a, q.tenant, q.t_first, nout, 10 + 2.0 * nout);
        }
        rpt_acc_backlog(a, q.tenant, sched, sched + 0.5);
    }
}

static void test_acc_bounded(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_acc ex, bo;
    assert_int_equal(rpt_acc_init(&ex, &s, 100, 10, 0), 0);
    assert_int_equal(rpt_acc_init(&bo, &s, 100, 10, 1), 0);
    gen_run(&ex, 20000);
    gen_run(&bo, 20000);
    rpt pe, pb;
    assert_int_equal(rpt_acc_finish(&ex, -1, &pe), 0);
    assert_int_equal(rpt_acc_finish(&bo, -1, &pb), 0);
    assert_int_equal(pb.bounded, 1);
    assert_int_equal(pb.n_bins, 10);
    for (int i = 0; i < 2; i++) {
        const rpt_tenant *e = &pe.t[i], *b = &pb.t[i];
        assert_int_equal(b->completed, e->completed);
        assert_int_equal(b->slo_met, e->slo_met);
        dist_within(&b->ttft, &e->ttft, "ttft");
        dist_within(&b->tpot, &e->tpot, "tpot");
        dist_within(&b->e2e, &e->e2e, "e2e");
        dist_within(&b->itl, &e->itl, "itl");
        /* In-order, overlapping backlog intervals: the same slots. */
        close_to(b->backlogged_s, e->backlogged_s, "backlogged");
        close_to(b->service_rate, e->service_rate, "service rate");
        /* The CDF: one point per bucket, ending at share 1. */
        assert_true(b->ttft_cdf.n > 100 && b->ttft_cdf.n < 1400);
        close_to(b->ttft_cdf.share[b->ttft_cdf.n - 1], 1, "cdf end");
    }
    dist_within(&pb.all.ttft, &pe.all.ttft, "all ttft");
    dist_within(&pb.all.e2e, &pe.all.e2e, "all e2e");
    close_to(pb.jain, pe.jain, "jain");
    for (int k = 0; k < 2 * pb.n_bins; k++) close_to(pb.tokens[k], pe.tokens[k], "timeline");
    char *tb = table_of(&s, &pb);
    assert_non_null(strstr(tb, "(percentiles from log histograms, within 0.95% of exact; mean and max exact)"));
    /* Determinism: the same calls again give the same bytes. */
    rpt_acc bo2;
    rpt pb2;
    assert_int_equal(rpt_acc_init(&bo2, &s, 100, 10, 1), 0);
    gen_run(&bo2, 20000);
    assert_int_equal(rpt_acc_finish(&bo2, -1, &pb2), 0);
    char *tb2 = table_of(&s, &pb2), *j1 = rpt_json(&s, &pb, NULL, 0, NULL, 1), *j2 = rpt_json(&s, &pb2, NULL, 0, NULL, 1);
    assert_string_equal(tb, tb2);
    assert_string_equal(j1, j2);
    assert_non_null(strstr(j1, "\"percentiles\":\"histogram\""));
    free(tb), free(tb2), free(j1), free(j2);
    rpt_free(&pe), rpt_free(&pb), rpt_free(&pb2);
    rpt_acc_deinit(&ex), rpt_acc_deinit(&bo), rpt_acc_deinit(&bo2);
    scn_free(&s);
}

/* Bounded mode at its edges: values outside the bucket range answer the
 * exact min and max; backlog intervals merge when they touch, in order. */
static void test_acc_bounded_edges(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_acc a;
    assert_int_equal(rpt_acc_init(&a, &s, 6, 1, 1), 0);
    const double gaps[] = {0, 1e-7, 2e5, 3e5, 0.010};
    for (int i = 0; i < 5; i++) assert_int_equal(rpt_acc_itl(&a, 0, gaps[i]), 0);
    /* [0, 1.5) and [1.5, 3) touch: slots 0..2; [3.2, 3.9) covers none;
     * [4.5, 6) covers 5; [4, 4.5) starts earlier than it, so it is marked on
     * its own and slot 4, covered only by the two together, is missed. */
    rpt_acc_backlog(&a, 1, 0, 1.5);
    rpt_acc_backlog(&a, 1, 1.5, 3);
    rpt_acc_backlog(&a, 1, 3.2, 3.9);
    rpt_acc_backlog(&a, 1, 4.5, 6);
    rpt_acc_backlog(&a, 1, 4, 4.5);
    rpt p;
    assert_int_equal(rpt_acc_finish(&a, -1, &p), 0);
    /* sorted 0, 1e-7, 0.01, 2e5, 3e5: p50 0.01 within 1%; the two below
     * 1 us answer the min (0), the two above 1e5 s the max. */
    assert_int_equal(p.t[0].itl.n, 5);
    assert_true(fabs(p.t[0].itl.p50 - 0.01) <= 0.0095 * 0.01);
    close_to(p.t[0].itl.max, 3e5, "max exact");
    close_to(p.t[0].itl.p99, 3e5, "p99 from the overflow bucket: the max");   /* rank 3.96: between 2 above */
    close_to(p.t[0].itl.mean, (1e-7 + 2e5 + 3e5 + 0.01) / 5, "mean exact");
    close_to(p.t[1].backlogged_s, 4, "slots 0, 1, 2 and 5 (4 is missed: out of order)");
    rpt_free(&p);
    rpt_acc_deinit(&a);
    /* Exact mode resolves the same intervals in any order: 0..2, 4, 5. */
    assert_int_equal(rpt_acc_init(&a, &s, 6, 1, 0), 0);
    rpt_acc_backlog(&a, 1, 4, 4.5);
    rpt_acc_backlog(&a, 1, 1.5, 3);
    rpt_acc_backlog(&a, 1, 4.5, 6);
    rpt_acc_backlog(&a, 1, 0, 1.5);
    rpt_acc_backlog(&a, 1, 3.2, 3.9);
    assert_int_equal(rpt_acc_finish(&a, -1, &p), 0);
    close_to(p.t[1].backlogged_s, 5, "exact: slots 0, 1, 2, 4, 5");
    rpt_free(&p);
    rpt_acc_deinit(&a);
    assert_int_equal(rpt_acc_init(&a, &s, -1, 1, 0), TS_ERR_INVAL);
    scn_free(&s);
}

/* A run that ends before the length the accumulator was sized for: rates
 * divide by the real length, slots and bins past it drop out; finishing
 * again at the full length brings them back. Both modes agree. */
static void test_acc_short_run(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    for (int bounded = 0; bounded < 2; bounded++) {
        rpt_acc a;
        assert_int_equal(rpt_acc_init(&a, &s, 10, 1, bounded), 0);
        rpt_req q = req(0, 200, 1, 1.5, 2, 4, 10);
        assert_int_equal(rpt_acc_request(&a, &q), 0);
        assert_int_equal(rpt_acc_event(&a, 0, 2.0, 10, 20), 0);
        assert_int_equal(rpt_acc_event(&a, 0, 7.0, 5, 10), 0);
        assert_int_equal(rpt_acc_backlog(&a, 0, 0, 3.5), 0);   /* slots 0..2 */
        assert_int_equal(rpt_acc_backlog(&a, 0, 4.2, 9), 0);   /* slots 5..8 */
        rpt p;
        assert_int_equal(rpt_acc_finish(&a, 5, &p), 0);
        close_to(p.run_s, 5, "short run");
        assert_int_equal(p.n_bins, 5);
        close_to(p.tokens[2], 10, "bin 2");
        close_to(p.t[0].service, 20, "service before 5 s");
        close_to(p.t[0].backlogged_s, 3, "slots 0..2");
        close_to(p.t[0].service_rate, 20.0 / 3, "rate");
        close_to(p.t[0].req_s, 1 / 5.0, "req/s over 5 s");
        close_to(p.t[0].tok_s, 10 / 5.0, "tok/s over 5 s");
        rpt_free(&p);
        assert_int_equal(rpt_acc_finish(&a, 99, &p), 0);   /* beyond: the full 10 s */
        close_to(p.run_s, 10, "full run");
        assert_int_equal(p.n_bins, 10);
        close_to(p.tokens[7], 5, "bin 7");
        close_to(p.t[0].service, 30, "all service");
        close_to(p.t[0].backlogged_s, 7, "slots 0..2, 5..8");
        rpt_free(&p);
        rpt_acc_deinit(&a);
    }
    scn_free(&s);
}

/* A written file as a NUL-terminated string (strstr may read it to the
 * end; tu_read_file does not terminate). */
static char *read_text(const char *path) {
    char *b, err[256];
    size_t len;
    return file_read_all(path, 1u << 24, &b, &len, err, sizeof err) ? NULL : b;
}

/* The plots: TTFT and TPOT CDF data from the rpt, and each SLO target as
 * a labelled dashed line in the curve's line type. */
static void test_plots(void **state) {
    (void)state;
    scn s;
    char err[256], dir[512], path[600];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    tu_path(dir, sizeof dir, "plots");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    plot_write(dir, &s, &p, err, sizeof err);   /* gnuplot may be missing: the files are written anyway */
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    char *gp = read_text(path);
    assert_non_null(gp);
    assert_non_null(strstr(gp, "set arrow from first 100, graph 0 to first 100, graph 1 nohead dashtype 2 lt 1\n"));
    assert_non_null(strstr(gp, "set label 'a SLO 100 ms'"));
    assert_non_null(strstr(gp, "set arrow from first 50, graph 0 to first 50, graph 1 nohead dashtype 2 lt 1\n"));
    assert_non_null(strstr(gp, "set output 'tpot_cdf.svg'"));
    assert_non_null(strstr(gp, "'ttft_cdf.dat' index 1 using 1:2 with steps lt 2 lw 2 title 'b'"));
    free(gp);
    snprintf(path, sizeof path, "%s/ttft_cdf.dat", dir);
    char *dat = read_text(path);
    assert_non_null(dat);
    /* a's block: from 0 at 50 ms, then 50 ms, 200, 400, 4500, a quarter each */
    assert_non_null(strstr(dat, "# a\n50.000 0.000000\n50.000 0.250000\n200.000 0.500000\n400.000 0.750000\n4500.000 1.000000\n"));
    free(dat);
    snprintf(path, sizeof path, "%s/tpot_cdf.dat", dir);
    dat = read_text(path);
    assert_non_null(dat);
    assert_non_null(strstr(dat, "# a\n40.000 0.000000\n40.000 0.333333\n"));
    free(dat);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

/* report.h: "events at or after run_s are outside the run". The last slot
 * and bin reach past a run of 2.5 s (ceil: 3 of each), so an event at 2.7 s
 * landed in them by truncation and was counted; one at 2.4 s still is, in
 * both exact and bounded mode, and through rpt_compute's records too. */
static void test_events_after_run(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    for (int bounded = 0; bounded < 2; bounded++) {
        rpt_acc a;
        rpt p;
        assert_int_equal(rpt_acc_init(&a, &s, 2.5, 1, bounded), 0);
        assert_int_equal(rpt_acc_event(&a, 0, 2.7, 5, 7), 0);
        assert_int_equal(rpt_acc_event(&a, 0, 2.5, 5, 7), 0);
        assert_int_equal(rpt_acc_event(&a, 1, 2.4, 3, 4), 0);
        assert_int_equal(rpt_acc_finish(&a, -1, &p), 0);
        assert_int_equal(p.n_bins, 3);
        close_to(p.tokens[2], 0, "a's tokens at 2.5 and 2.7 s");
        close_to(p.t[0].service, 0, "a's service at 2.5 and 2.7 s");
        close_to(p.tokens[3 + 2], 3, "b's tokens at 2.4 s");
        close_to(p.t[1].service, 4, "b's service at 2.4 s");
        rpt_free(&p);
        rpt_acc_deinit(&a);
    }
    /* A record whose events straddle the end: only those before it count. */
    rpt_req r[1] = {req(0, RPT_ST_ABORTED, 0, 2.2, 2.6, 3, 2)};
    r[0].n_events = 2;
    r[0].ev_t = times(2, 2.3, 2.6);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, 1, 2.5, &p), 0);
    close_to(p.tokens[2], 1, "one output token before 2.5 s");
    close_to(p.t[0].service, 1 * 3 + 2 * 1, "prompt at 2.2 s, one output token at 2.3 s");
    rpt_free(&p);
    rpt_reqs_free(r, 1);
    scn_free(&s);
}

/* Sample counts are 64-bit: a fleet simulation passes 2^31 ITL gaps (10M
 * requests x 256 tokens), and the JSON must carry the count. */
static void test_counts_64bit(void **state) {
    (void)state;
    scn s;
    char err[256];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    const size_t big = (size_t)2560000000u;   /* 10M x 256 */
    p.t[0].itl.n = big;
    p.all.itl.n = big + 5;
    p.t[0].ttft_cdf.n = big;   /* (rpt_free frees the arrays, never walks them) */
    assert_true(p.t[0].itl.n == (int64_t)big && p.t[0].ttft_cdf.n == (int64_t)big);
    char *json = rpt_json(&s, &p, NULL, 0, "http://x", 1);
    assert_non_null(json);
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    const cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "tenants"), 0);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t0, "itl"), "n");
    assert_true(cJSON_IsNumber(in));
    assert_true(in->valuedouble == 2560000000.0);
    cJSON_Delete(j);
    free(json);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

/* Names in plots.gp: a scenario built in code (tessera sim takes tenant
 * names from a plan) may hold a ' or a newline; each goes into its
 * single-quoted string escaped (' doubled, control characters as ?), so
 * gnuplot never runs what a name holds. With gnuplot present, the script
 * is run, and the command a name smuggles in must not have run. */
static void test_plot_names_escaped(void **state) {
    (void)state;
    scn s;
    char err[512], dir[512], path[700], mark[600];
    assert_int_equal(scn_parse(SCN, strlen(SCN), "t.yaml", ".", &s, err, sizeof err), 0);
    tu_path(dir, sizeof dir, "plots_evil");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    snprintf(mark, sizeof mark, "%s/pwned", dir);
    remove(mark);
    /* The marker is named relative to the folder gnuplot runs in. */
    snprintf(s.name, sizeof s.name, "x'.system('touch pwned').'");
    snprintf(s.tenants[0].name, sizeof s.tenants[0].name, "a'.system('touch pwned').'");
    snprintf(s.tenants[1].name, sizeof s.tenants[1].name, "b\nsystem('touch pwned')");
    rpt_req r[16];
    size_t n = build(r);
    rpt p;
    assert_int_equal(rpt_compute(&s, r, n, 5.0, &p), 0);
    int rc = plot_write(dir, &s, &p, err, sizeof err);
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    char *gp = read_text(path);
    assert_non_null(gp);
    assert_non_null(strstr(gp, "set title 'TTFT CDF - scenario x''.system(''touch pwned'').'''\n"));
    assert_non_null(strstr(gp, "set label 'a''.system(''touch pwned'').'' SLO 100 ms'"));
    assert_non_null(strstr(gp, "with steps lt 1 lw 2 title 'a''.system(''touch pwned'').'''"));
    assert_non_null(strstr(gp, "'tokens.dat' using 1:3 with lines lw 2 title 'b?system(''touch pwned'')'"));
    assert_null(strstr(gp, "columnheader"));
    assert_null(strstr(gp, "\nsystem("));   /* nothing after a newline starts a line */
    free(gp);
    snprintf(path, sizeof path, "%s/tokens.dat", dir);
    char *dat = read_text(path);
    assert_non_null(dat);
    assert_non_null(strstr(dat, "# t_s a'.system('touch pwned').' b?system('touch pwned') c\n"));
    free(dat);
    struct stat st;
    if (rc == 0) assert_int_equal(stat(mark, &st), -1);   /* gnuplot ran the script: nothing else ran */
    else if (!strstr(err, "not found")) fail_msg("gnuplot failed on the escaped script: %s", err);
    static const char *const files[] = {"plots.gp", "tokens.dat", "ttft_cdf.dat", "tpot_cdf.dat", "tokens.svg",
                                        "tokens.png", "ttft_cdf.svg", "ttft_cdf.png", "tpot_cdf.svg", "tpot_cdf.png"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
    rpt_free(&p);
    rpt_reqs_free(r, n);
    scn_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile), cmocka_unit_test(test_jain),  cmocka_unit_test(test_slots),
        cmocka_unit_test(test_compute),    cmocka_unit_test(test_empty), cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_gini),       cmocka_unit_test(test_all_row),
        cmocka_unit_test(test_fairness_shown), cmocka_unit_test(test_cost), cmocka_unit_test(test_engine_ttft),
        cmocka_unit_test(test_acc_exact_is_compute), cmocka_unit_test(test_acc_bounded),
        cmocka_unit_test(test_acc_bounded_edges), cmocka_unit_test(test_acc_short_run),
        cmocka_unit_test(test_plots), cmocka_unit_test(test_events_after_run),
        cmocka_unit_test(test_counts_64bit), cmocka_unit_test(test_plot_names_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
