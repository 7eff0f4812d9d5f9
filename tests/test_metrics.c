/* test_metrics.c - unit tests of the Prometheus registry and the fairness
 * helpers (src/serve/metrics.c), and of the request outcomes the server
 * counts through them (src/serve/obs.c): every way a request can end maps
 * to exactly one outcome, and a stream that fails after its 200 went out is
 * a failure, not a success.
 *
 * Rendering is compared byte for byte against hand-written exposition text.
 * Concurrency is checked by exact totals: four threads add 1,000,000 times
 * each to one counter and one histogram, and every add must land (a lost
 * compare-exchange would show as a short count). A render loop running
 * against updating threads checks that rendering under load neither crashes
 * nor emits non-cumulative buckets; run this file once by hand under
 * -fsanitize=thread to check the lock-free path for races. Leaks are caught
 * by the ASan build (LeakSanitizer at exit).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fq.h"
#include "serve/metrics.h"
#include "serve/obs.h"

#define SEC 1000000LL   /* us */

static void expect_render(met_registry *r, const char *want) {
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(met_render(r, &buf, &len), 0);
    assert_non_null(buf);
    assert_string_equal(buf, want);
    assert_int_equal(len, strlen(want));
    free(buf);
}

/* ---- rendering ---------------------------------------------------------- */

static void test_render_small_registry(void **st) {
    (void)st;
    met_registry *r = met_new();
    assert_non_null(r);
    const char *cl[] = {"tenant", "code"};
    met_family *req = met_counter(r, "tessera_requests_total", "Requests by tenant and status.",
                                  cl, 2);
    met_family *run = met_gauge(r, "tessera_running", "Sequences running.", NULL, 0);
    const double bounds[] = {0.25, 0.5, 1};
    const char *hl[] = {"model"};
    met_family *ttft = met_histogram(r, "tessera_ttft_seconds", "Time to first token.", hl,
                                     1, bounds, 3);
    assert_non_null(req);
    assert_non_null(run);
    assert_non_null(ttft);

    met_series *a200 = met_series_get(req, (const char *[]){"alpha", "200"});
    met_series *b429 = met_series_get(req, (const char *[]){"beta", "429"});
    met_inc(a200, 1);
    met_inc(a200, 2);
    met_inc(b429, 1);
    met_inc(b429, -5);          /* counters never go down */
    met_inc(b429, NAN);
    met_series *g = met_series_get(run, NULL);
    met_set(g, 7);
    met_inc(g, -2.5);
    met_series *h = met_series_get(ttft, (const char *[]){"tiny"});
    met_observe(h, 0.125);      /* bucket 0.25 */
    met_observe(h, 0.25);       /* bound is inclusive: bucket 0.25 */
    met_observe(h, 0.75);       /* bucket 1 */
    met_observe(h, 3);          /* +Inf */
    met_observe(h, NAN);        /* ignored */
    /* Wrong-kind updates are no-ops. */
    met_set(a200, 100);
    met_observe(a200, 1);
    met_inc(h, 1);
    met_set(h, 1);

    expect_render(r,
        "# HELP tessera_requests_total Requests by tenant and status.\n"
        "# TYPE tessera_requests_total counter\n"
        "tessera_requests_total{tenant=\"alpha\",code=\"200\"} 3\n"
        "tessera_requests_total{tenant=\"beta\",code=\"429\"} 1\n"
        "# HELP tessera_running Sequences running.\n"
        "# TYPE tessera_running gauge\n"
        "tessera_running 4.5\n"
        "# HELP tessera_ttft_seconds Time to first token.\n"
        "# TYPE tessera_ttft_seconds histogram\n"
        "tessera_ttft_seconds_bucket{model=\"tiny\",le=\"0.25\"} 2\n"
        "tessera_ttft_seconds_bucket{model=\"tiny\",le=\"0.5\"} 2\n"
        "tessera_ttft_seconds_bucket{model=\"tiny\",le=\"1\"} 3\n"
        "tessera_ttft_seconds_bucket{model=\"tiny\",le=\"+Inf\"} 4\n"
        "tessera_ttft_seconds_sum{model=\"tiny\"} 4.125\n"
        "tessera_ttft_seconds_count{model=\"tiny\"} 4\n");
    assert_true(met_value(a200) == 3.0);
    assert_true(met_value(g) == 4.5);
    met_free(r);
}

static void test_render_unlabelled_histogram_and_empty(void **st) {
    (void)st;
    met_registry *r = met_new();
    expect_render(r, "");
    const char *l[] = {"tenant"};
    assert_non_null(met_counter(r, "empty_total", "No series yet.", l, 1));
    met_family *h = met_histogram(r, "step_seconds", "", NULL, 0, NULL, 0);
    assert_non_null(h);
    met_observe(met_series_get(h, NULL), 0.25);
    met_family *big = met_gauge(r, "big", "Odd values.", (const char *[]){"v"}, 1);
    met_set(met_series_get(big, (const char *[]){"inf"}), INFINITY);
    met_set(met_series_get(big, (const char *[]){"ninf"}), -INFINITY);
    met_set(met_series_get(big, (const char *[]){"nan"}), NAN);
    met_set(met_series_get(big, (const char *[]){"huge"}), 1e21);
    met_set(met_series_get(big, (const char *[]){"third"}), 1.0 / 3.0);
    expect_render(r,
        "# HELP empty_total No series yet.\n"
        "# TYPE empty_total counter\n"
        "# HELP step_seconds \n"
        "# TYPE step_seconds histogram\n"
        "step_seconds_bucket{le=\"+Inf\"} 1\n"
        "step_seconds_sum 0.25\n"
        "step_seconds_count 1\n"
        "# HELP big Odd values.\n"
        "# TYPE big gauge\n"
        "big{v=\"inf\"} +Inf\n"
        "big{v=\"ninf\"} -Inf\n"
        "big{v=\"nan\"} NaN\n"
        "big{v=\"huge\"} 1e+21\n"
        "big{v=\"third\"} 0.3333333333333333\n");
    met_free(r);
}

static void test_label_and_help_escaping(void **st) {
    (void)st;
    met_registry *r = met_new();
    met_family *f = met_counter(r, "esc_total", "Back\\slash and\nnewline \"kept\".",
                                (const char *[]){"tenant"}, 1);
    met_series *s = met_series_get(f, (const char *[]){"a\\b\"c\nd"});
    met_inc(s, 1);
    expect_render(r,
        "# HELP esc_total Back\\\\slash and\\nnewline \"kept\".\n"
        "# TYPE esc_total counter\n"
        "esc_total{tenant=\"a\\\\b\\\"c\\nd\"} 1\n");
    met_free(r);
}

static void test_series_identity(void **st) {
    (void)st;
    met_registry *r = met_new();
    const char *l[] = {"tenant", "model"};
    met_family *f = met_counter(r, "x_total", "x", l, 2);
    char ta[] = "alpha", mo[] = "tiny";
    met_series *s1 = met_series_get(f, (const char *[]){"alpha", "tiny"});
    /* Same values from different storage: same series. */
    met_series *s2 = met_series_get(f, (const char *[]){ta, mo});
    assert_non_null(s1);
    assert_ptr_equal(s1, s2);
    met_series *s3 = met_series_get(f, (const char *[]){"tiny", "alpha"});
    assert_ptr_not_equal(s1, s3);
    /* Values that would collide if label text were joined unescaped. */
    met_series *s4 = met_series_get(f, (const char *[]){"a\",model=\"b", "c"});
    met_series *s5 = met_series_get(f, (const char *[]){"a", "b\",model=\"c"});
    assert_ptr_not_equal(s4, s5);
    assert_null(met_series_get(f, (const char *[]){"alpha", NULL}));
    assert_null(met_series_get(f, NULL));
    /* The unlabelled series exists from registration and is unique. */
    met_family *g = met_gauge(r, "g", "g", NULL, 0);
    assert_ptr_equal(met_series_get(g, NULL), met_series_get(g, NULL));
    met_free(r);
}

static void test_bad_registrations(void **st) {
    (void)st;
    met_registry *r = met_new();
    const char *ok[] = {"tenant"};
    assert_non_null(met_counter(r, "dup_total", "", ok, 1));
    assert_null(met_counter(r, "dup_total", "", ok, 1));           /* duplicate */
    assert_null(met_gauge(r, "dup_total", "", NULL, 0));           /* any kind */
    assert_null(met_counter(r, "9bad", "", NULL, 0));
    assert_null(met_counter(r, "bad-name", "", NULL, 0));
    assert_null(met_counter(r, "", "", NULL, 0));
    assert_null(met_counter(r, NULL, "", NULL, 0));
    assert_non_null(met_counter(r, "ns:sub_total", "", NULL, 0)); /* colon ok */
    assert_null(met_counter(r, "a_total", "", (const char *[]){"__x"}, 1));
    assert_null(met_counter(r, "b_total", "", (const char *[]){"a:b"}, 1));
    assert_null(met_counter(r, "c_total", "", (const char *[]){"t", "t"}, 2));
    assert_null(met_counter(r, "d_total", "", NULL, 1));
    assert_null(met_counter(r, "e_total", "", ok, -1));
    assert_null(met_counter(r, "f_total", "", ok, MET_MAX_LABELS + 1));
    assert_null(met_histogram(r, "h1", "", (const char *[]){"le"}, 1, NULL, 0));
    assert_null(met_histogram(r, "h2", "", NULL, 0, (const double[]){1, 1}, 2));
    assert_null(met_histogram(r, "h3", "", NULL, 0, (const double[]){2, 1}, 2));
    assert_null(met_histogram(r, "h4", "", NULL, 0, (const double[]){1, INFINITY}, 2));
    assert_null(met_histogram(r, "h5", "", NULL, 0, (const double[]){NAN}, 1));
    assert_null(met_histogram(r, "h6", "", NULL, 0, NULL, 2));
    assert_non_null(met_histogram(r, "h7", "", NULL, 0, met_latency_buckets,
                                  MET_LATENCY_N_BUCKETS));
    assert_non_null(met_histogram(r, "h8", "", NULL, 0, met_step_buckets,
                                  MET_STEP_N_BUCKETS));
    /* NULL series updates are harmless. */
    met_inc(NULL, 1);
    met_set(NULL, 1);
    met_observe(NULL, 1);
    assert_true(met_value(NULL) == 0.0);
    met_free(r);
}

static void test_default_buckets_increasing(void **st) {
    (void)st;
    for (int i = 1; i < MET_LATENCY_N_BUCKETS; i++)
        assert_true(met_latency_buckets[i] > met_latency_buckets[i - 1]);
    for (int i = 1; i < MET_STEP_N_BUCKETS; i++)
        assert_true(met_step_buckets[i] > met_step_buckets[i - 1]);
    assert_true(met_latency_buckets[0] == 0.005);
    assert_true(met_latency_buckets[MET_LATENCY_N_BUCKETS - 1] == 60.0);
}

/* ---- concurrency -------------------------------------------------------- */

#define N_THREADS 4
#define N_ADDS 1000000

typedef struct worker {
    met_series *counter, *hist, *gauge;
    int id;
    atomic_int *go;             /* all threads start together */
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    /* Without a common start, a thread may finish all its adds before the
     * next one is created, and a racy add would never be caught. */
    while (!atomic_load(w->go)) {
    }
    for (int i = 0; i < N_ADDS; i++) {
        met_inc(w->counter, 1.0);
        /* 0.25 and 2 are exact in binary, so the sum is exact in any order;
         * alternate so two buckets see traffic. */
        met_observe(w->hist, (i & 1) ? 2.0 : 0.25);
        met_inc(w->gauge, (w->id & 1) ? 1.0 : -1.0);
    }
    return NULL;
}

static void run_workers(met_series *c, met_series *h, met_series *g) {
    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    atomic_int go = 0;
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){c, h, g, i, &go};
        assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
    }
    atomic_store(&go, 1);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
}

static void test_concurrent_updates_exact(void **st) {
    (void)st;
    met_registry *r = met_new();
    met_family *fc = met_counter(r, "c_total", "c", NULL, 0);
    met_family *fh = met_histogram(r, "h", "h", NULL, 0, (const double[]){1.0}, 1);
    met_family *fg = met_gauge(r, "g", "g", NULL, 0);
    met_series *c = met_series_get(fc, NULL), *h = met_series_get(fh, NULL);
    met_series *g = met_series_get(fg, NULL);
    run_workers(c, h, g);
    assert_true(met_value(c) == (double)N_THREADS * N_ADDS);
    assert_true(met_value(h) == (double)N_THREADS * N_ADDS / 2 * (0.25 + 2.0));
    assert_true(met_value(g) == 0.0);
    expect_render(r,
        "# HELP c_total c\n"
        "# TYPE c_total counter\n"
        "c_total 4000000\n"
        "# HELP h h\n"
        "# TYPE h histogram\n"
        "h_bucket{le=\"1\"} 2000000\n"
        "h_bucket{le=\"+Inf\"} 4000000\n"
        "h_sum 4500000\n"
        "h_count 4000000\n"
        "# HELP g g\n"
        "# TYPE g gauge\n"
        "g 0\n");
    met_free(r);
}

typedef struct render_arg {
    met_registry *r;
    atomic_int *stop;
    int renders;
    int bad;                    /* non-cumulative buckets or _count != +Inf */
} render_arg;

/* Parse the one histogram of the render and check that its buckets never
 * decrease and that _count equals the +Inf bucket. */
static int histogram_consistent(const char *text) {
    unsigned long long prev = 0, inf = 0, count = 0;
    const char *p = text;
    int seen = 0;
    while ((p = strstr(p, "h_bucket{"))) {
        const char *sp = strchr(p, ' ');
        unsigned long long v = strtoull(sp + 1, NULL, 10);
        if (v < prev) return 0;
        prev = v;
        p = sp;
        seen++;
    }
    const char *c = strstr(text, "h_count ");
    if (!c || seen != 3) return 0;
    inf = prev;                 /* the last bucket line is +Inf */
    count = strtoull(c + 8, NULL, 10);
    return count == inf;
}

static void *render_run(void *arg) {
    render_arg *a = arg;
    while (!atomic_load(a->stop)) {
        char *buf;
        size_t len;
        if (met_render(a->r, &buf, &len) != 0) { a->bad++; continue; }
        if (!histogram_consistent(buf)) a->bad++;
        free(buf);
        a->renders++;
    }
    return NULL;
}

static void test_render_while_updating(void **st) {
    (void)st;
    met_registry *r = met_new();
    met_family *fc = met_counter(r, "c_total", "c", (const char *[]){"t"}, 1);
    met_family *fh = met_histogram(r, "h", "h", NULL, 0, (const double[]){0.5, 1.0}, 2);
    met_family *fg = met_gauge(r, "g", "g", NULL, 0);
    met_series *c = met_series_get(fc, (const char *[]){"x"});
    atomic_int stop = 0;
    render_arg ra = {r, &stop, 0, 0};
    pthread_t rt;
    assert_int_equal(pthread_create(&rt, NULL, render_run, &ra), 0);
    /* Creating series while a render walks the lists is also allowed. */
    met_series_get(fc, (const char *[]){"late"});
    run_workers(c, met_series_get(fh, NULL), met_series_get(fg, NULL));
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    assert_int_equal(ra.bad, 0);
    assert_true(ra.renders > 0);
    assert_true(met_value(c) == (double)N_THREADS * N_ADDS);
    met_free(r);
}

/* ---- Jain --------------------------------------------------------------- */

static void test_jain_hand_values(void **st) {
    (void)st;
    const double eq[] = {3, 3, 3, 3};
    assert_float_equal(fq_jain(eq, 4), 1.0, 1e-15);
    const double one[] = {0, 5, 0, 0};
    assert_float_equal(fq_jain(one, 4), 0.25, 1e-15);
    const double two[] = {2, 2, 0, 0, 0};
    assert_float_equal(fq_jain(two, 5), 0.4, 1e-15);
    /* (1+2+3)^2 / (3 * 14) = 36/42 */
    const double x[] = {1, 2, 3};
    assert_float_equal(fq_jain(x, 3), 36.0 / 42.0, 1e-15);
    const double zero[] = {0, 0};
    assert_float_equal(fq_jain(zero, 2), 1.0, 0);
    assert_float_equal(fq_jain(NULL, 0), 1.0, 0);
    assert_float_equal(fq_jain(x, 1), 1.0, 1e-15);
}

/* ---- window ------------------------------------------------------------- */

static void test_window_bad_input(void **st) {
    (void)st;
    assert_null(met_window_new(0));
    met_window *w = met_window_new(2);
    assert_non_null(w);
    assert_int_equal(met_window_add(w, -1, 0, 1, 1), TS_ERR_INVAL);
    assert_int_equal(met_window_add(w, 2, 0, 1, 1), TS_ERR_INVAL);
    assert_int_equal(met_window_add(w, 0, 0, -1, 1), TS_ERR_INVAL);
    assert_int_equal(met_window_add(w, 0, 0, NAN, 1), TS_ERR_INVAL);
    assert_int_equal(met_window_add(w, 0, 0, INFINITY, 1), TS_ERR_INVAL);
    assert_int_equal(met_window_add(NULL, 0, 0, 1, 1), TS_ERR_INVAL);
    /* Nothing was recorded: nobody backlogged. */
    assert_float_equal(met_window_jain(w, 0), 1.0, 0);
    met_window_free(w);
}

static void test_window_jain_and_exclusion(void **st) {
    (void)st;
    met_window *w = met_window_new(3);
    int64_t t0 = 1000 * SEC;
    for (int s = 0; s < 10; s++) {
        int64_t now = t0 + s * SEC + 123;
        assert_int_equal(met_window_add(w, 0, now, 2.0, 1), 0);
        assert_int_equal(met_window_add(w, 1, now, 2.0, 1), 0);
        /* Tenant 2 got a little service but never had a backlog: left out. */
        assert_int_equal(met_window_add(w, 2, now, 0.1, 0), 0);
    }
    assert_float_equal(met_window_jain(w, t0 + 10 * SEC), 1.0, 1e-15);

    /* Tenant 2 now backlogged once with its 1.0 total: {20, 20, 1.1}. */
    met_window_add(w, 2, t0 + 10 * SEC, 0.1, 1);
    double x[] = {20, 20, 1.1};
    assert_float_equal(met_window_jain(w, t0 + 10 * SEC), fq_jain(x, 3), 1e-12);
    met_window_free(w);
}

static void test_window_starved_tenant_counts(void **st) {
    (void)st;
    met_window *w = met_window_new(2);
    /* Tenant 1 is backlogged every second and gets nothing: Jain = 1/2. */
    for (int s = 0; s < 30; s++) {
        met_window_add(w, 0, s * SEC, 5.0, 1);
        met_window_add(w, 1, s * SEC, 0.0, 1);
    }
    assert_float_equal(met_window_jain(w, 30 * SEC), 0.5, 1e-15);
    met_window_free(w);
}

static void test_window_expiry(void **st) {
    (void)st;
    met_window *w = met_window_new(2);
    /* Second 0: tenant 0 gets 100 while tenant 1 starves. */
    met_window_add(w, 0, 0, 100.0, 1);
    met_window_add(w, 1, 500000, 0.0, 1);
    /* Seconds 1..59: both get 1 per second. */
    for (int s = 1; s < 60; s++) {
        met_window_add(w, 0, s * SEC, 1.0, 1);
        met_window_add(w, 1, s * SEC, 1.0, 1);
    }
    /* At 59.999999 s second 0 is still inside: {159, 59}. */
    double in[] = {159, 59};
    assert_float_equal(met_window_jain(w, 60 * SEC - 1), fq_jain(in, 2), 1e-12);
    /* At 60 s it has left: {59, 59}, perfectly fair. */
    assert_float_equal(met_window_jain(w, 60 * SEC), 1.0, 1e-15);
    /* At 118 s only second 59 remains; at 119 s nothing, nobody backlogged. */
    assert_float_equal(met_window_jain(w, 118 * SEC), 1.0, 1e-15);
    assert_float_equal(met_window_jain(w, 119 * SEC), 1.0, 0);

    /* The ring reuses second 0's position for second 60: the old 100 must
     * be gone even though the position is the same. */
    met_window_add(w, 1, 60 * SEC, 3.0, 1);
    met_window_add(w, 0, 60 * SEC, 0.0, 1);
    double reuse[] = {59, 62};
    assert_float_equal(met_window_jain(w, 60 * SEC), fq_jain(reuse, 2), 1e-12);

    /* A call older than 59 s behind the newest second is dropped. */
    assert_int_equal(met_window_add(w, 0, 0, 1000.0, 1), 0);
    assert_float_equal(met_window_jain(w, 60 * SEC), fq_jain(reuse, 2), 1e-12);
    /* A late call still inside the window is kept. */
    assert_int_equal(met_window_add(w, 0, 30 * SEC, 3.0, 1), 0);
    double late[] = {62, 62};
    assert_float_equal(met_window_jain(w, 60 * SEC), fq_jain(late, 2), 1e-12);
    met_window_free(w);
}

static void test_window_negative_time(void **st) {
    (void)st;
    /* -0.5 s is slot -1, not slot 0: it expires at 59 s, not 60 s. */
    met_window *w = met_window_new(2);
    met_window_add(w, 0, -SEC / 2, 10.0, 1);
    met_window_add(w, 1, 0, 0.0, 1);
    assert_float_equal(met_window_jain(w, 58 * SEC), 0.5, 1e-15);
    met_window_add(w, 1, 58 * SEC, 0.0, 1);
    assert_float_equal(met_window_jain(w, 59 * SEC), 1.0, 0);
    met_window_free(w);
}

/* ---- request outcomes (obs) ---------------------------------------------- */

static void test_outcome_names(void **st) {
    (void)st;
    for (int i = 0; i < OBS_OUTCOME_COUNT; i++) {
        const char *n = obs_outcome_name((obs_outcome)i);
        assert_true(!strcmp(n, "completed") || !strcmp(n, "cancelled") || !strncmp(n, "rejected_", 9) ||
                    !strncmp(n, "failed_", 7));
        for (int j = 0; j < i; j++) assert_string_not_equal(n, obs_outcome_name((obs_outcome)j));
    }
    assert_string_equal(obs_outcome_name(OBS_OUTCOME_COUNT), "unknown");
}

static obs_outcome of_end(int end, sched_reason why) {
    wk_req r;
    memset(&r, 0, sizeof r);
    r.end = end;
    r.reason = why;
    return obs_outcome_of_req(&r);
}

/* Each way the worker ends a request has its own outcome. */
static void test_outcome_of_req(void **st) {
    (void)st;
    assert_int_equal(of_end(WK_END_FINISHED, SCHED_R_NONE), OBS_COMPLETED);
    assert_int_equal(of_end(WK_END_CANCELLED, SCHED_R_NONE), OBS_CANCELLED);
    assert_int_equal(of_end(WK_END_INVALID, SCHED_R_NONE), OBS_REJ_BAD_REQUEST);
    assert_int_equal(of_end(WK_END_SHUTDOWN, SCHED_R_NONE), OBS_FAIL_SHUTDOWN);
    /* After admission: a queue timeout is a failure, not a success. */
    assert_int_equal(of_end(WK_END_FAILED, SCHED_R_QUEUE_TIMEOUT), OBS_FAIL_QUEUE_TIMEOUT);
    assert_string_equal(obs_outcome_name(of_end(WK_END_FAILED, SCHED_R_QUEUE_TIMEOUT)), "failed_queue_timeout");
    assert_int_equal(of_end(WK_END_FAILED, SCHED_R_EXECUTOR), OBS_FAIL_ENGINE);
    /* At admission: the scheduler's reason. */
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_QUEUE_FULL), OBS_REJ_QUEUE_FULL);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_OVER_QUOTA), OBS_REJ_OVER_QUOTA);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_PREDICTED_WAIT), OBS_REJ_PREDICTED_WAIT);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_NO_SLOTS), OBS_REJ_NO_SLOTS);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_TOO_LARGE), OBS_REJ_KV_TOO_LARGE);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_CONTEXT), OBS_REJ_BAD_REQUEST);
    assert_int_equal(of_end(WK_END_REJECTED, SCHED_R_BAD_REQUEST), OBS_REJ_BAD_REQUEST);
    /* Never "completed" for anything but a finish. */
    for (int end = WK_END_NONE; end <= WK_END_SHUTDOWN; end++)
        for (int why = 0; why < SCHED_R_COUNT; why++)
            if (end != WK_END_FINISHED) assert_int_not_equal(of_end(end, (sched_reason)why), OBS_COMPLETED);
}

static void test_outcome_of_status(void **st) {
    (void)st;
    assert_int_equal(obs_outcome_of_status(200), OBS_COMPLETED);
    assert_int_equal(obs_outcome_of_status(400), OBS_REJ_BAD_REQUEST);
    assert_int_equal(obs_outcome_of_status(401), OBS_REJ_UNAUTHENTICATED);
    assert_int_equal(obs_outcome_of_status(404), OBS_REJ_NOT_FOUND);
    assert_int_equal(obs_outcome_of_status(405), OBS_REJ_METHOD);
    assert_int_equal(obs_outcome_of_status(413), OBS_REJ_BODY_TOO_LARGE);
    assert_int_equal(obs_outcome_of_status(499), OBS_CANCELLED);
    assert_int_equal(obs_outcome_of_status(503), OBS_REJ_SHUTTING_DOWN);
    assert_int_equal(obs_outcome_of_status(500), OBS_FAIL_INTERNAL);
}

/* The value of one sample line "name{labels} value" in a render, or -1. */
static double sample(const char *text, const char *series) {
    size_t n = strlen(series);
    for (const char *p = text; (p = strstr(p, series)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
    return -1;
}

/* Outcomes and status codes are separate families; every tenant (and
 * "unauthenticated") has every outcome series from the start; one request
 * counted once moves exactly one of them. */
static void test_outcome_series(void **st) {
    (void)st;
    const char *tenants[] = {"a", "b"}, *models[] = {"m"};
    double w[] = {1, 1};
    obs *o = obs_new(tenants, w, 2, models, NULL, 1);
    assert_non_null(o);
    obs_request(o, 0, 200);                         /* the stream's 200 went out */
    obs_outcome_count(o, 0, OBS_FAIL_QUEUE_TIMEOUT); /* and then it failed */
    obs_outcome_count(o, -1, OBS_REJ_UNAUTHENTICATED);
    char *text;
    size_t len;
    assert_int_equal(obs_render(o, &text, &len), 0);
    assert_true(sample(text, "tessera_requests_total{tenant=\"a\",outcome=\"failed_queue_timeout\"}") == 1);
    assert_true(sample(text, "tessera_requests_total{tenant=\"a\",outcome=\"completed\"}") == 0);
    assert_true(sample(text, "tessera_http_responses_total{tenant=\"a\",code=\"200\"}") == 1);
    assert_true(sample(text, "tessera_requests_total{tenant=\"unauthenticated\",outcome=\"rejected_unauthenticated\"}") == 1);
    const char *who[] = {"a", "b", "unauthenticated"};
    for (int t = 0; t < 3; t++) {
        double sum = 0;
        for (int i = 0; i < OBS_OUTCOME_COUNT; i++) {
            char series[160];
            snprintf(series, sizeof series, "tessera_requests_total{tenant=\"%s\",outcome=\"%s\"}", who[t],
                     obs_outcome_name((obs_outcome)i));
            double v = sample(text, series);
            assert_true(v >= 0);        /* present from the start */
            sum += v;
        }
        assert_true(sum == (t == 1 ? 0 : 1));
    }
    free(text);
    obs_free(o);
}

/* Cost: a priced model has its price gauge and a cost counter per tenant
 * that follows the tenants' cumulative engine time after every step
 * (engine seconds x price / 3600); an unpriced model has no cost series
 * at all, so it never reads as free. */
static void test_cost_series(void **st) {
    (void)st;
    const char *tenants[] = {"a", "b"}, *models[] = {"p", "u"};
    double w[] = {1, 1}, price[] = {7.2, 0};
    obs *o = obs_new(tenants, w, 2, models, price, 2);
    assert_non_null(o);
    sched_tenant_stats ts[2];
    memset(ts, 0, sizeof ts);
    wk_step_info si = {.now_us = 1000000, .tenants = ts, .n_tenants = 2};
    wk_hooks hp = obs_hooks(o, 0), hu = obs_hooks(o, 1);
    ts[0].engine_us = 1e6;      /* 1 s: 0.002 at 7.2 an hour */
    ts[1].engine_us = 0.5e6;
    hp.on_step(hp.ctx, &si);
    hu.on_step(hu.ctx, &si);
    ts[0].engine_us = 3e6;      /* cumulative: 2 s more */
    si.now_us += 1000000;
    hp.on_step(hp.ctx, &si);
    hp.on_step(hp.ctx, &si);    /* the same totals again charge nothing */
    char *text;
    size_t len;
    assert_int_equal(obs_render(o, &text, &len), 0);
    assert_true(fabs(sample(text, "tessera_tenant_cost_total{tenant=\"a\",model=\"p\"}") - 0.006) < 1e-15);
    assert_true(fabs(sample(text, "tessera_tenant_cost_total{tenant=\"b\",model=\"p\"}") - 0.001) < 1e-15);
    assert_true(sample(text, "tessera_model_price_per_hour{model=\"p\"}") == 7.2);
    assert_non_null(strstr(text, "# TYPE tessera_tenant_cost_total counter\n"));
    assert_non_null(strstr(text, "# TYPE tessera_model_price_per_hour gauge\n"));
    /* The unpriced model: no price, no cost, though its worker stepped. */
    assert_null(strstr(text, "tessera_model_price_per_hour{model=\"u\"}"));
    assert_null(strstr(text, "tessera_tenant_cost_total{tenant=\"a\",model=\"u\"}"));
    assert_null(strstr(text, "tessera_tenant_cost_total{tenant=\"b\",model=\"u\"}"));
    free(text);
    obs_free(o);
}

/* The model-server gauges the GIE endpoint picker reads: one series per
 * model under tessera's and vLLM's names, summed over the tenants of the
 * step's snapshot (waiting = queued + swapped out), KV usage as a fraction;
 * they follow the latest step, including back to 0, and one model's step
 * leaves the other model's series alone. */
static void test_server_gauges(void **st) {
    (void)st;
    const char *tenants[] = {"a", "b"}, *models[] = {"m1", "org/m2:q8"};
    double w[] = {1, 1};
    obs *o = obs_new(tenants, w, 2, models, NULL, 2);
    assert_non_null(o);
    sched_tenant_stats ts[2];
    memset(ts, 0, sizeof ts);
    ts[0].queued = 2, ts[0].swapped = 1, ts[0].running = 1;
    ts[1].queued = 3, ts[1].running = 2;
    wk_step_info si = {.now_us = SEC, .kv_used = 30, .kv_total = 120, .tenants = ts, .n_tenants = 2};
    wk_hooks h1 = obs_hooks(o, 0), h2 = obs_hooks(o, 1);
    h1.on_step(h1.ctx, &si);
    char *text;
    size_t len;
    assert_int_equal(obs_render(o, &text, &len), 0);
    assert_true(sample(text, "vllm:num_requests_waiting{model=\"m1\",model_name=\"m1\"}") == 6);
    assert_true(sample(text, "vllm:num_requests_running{model=\"m1\",model_name=\"m1\"}") == 3);
    assert_true(sample(text, "vllm:kv_cache_usage_perc{model=\"m1\",model_name=\"m1\"}") == 0.25);
    assert_true(sample(text, "vllm:gpu_cache_usage_perc{model=\"m1\",model_name=\"m1\"}") == 0.25);
    assert_true(sample(text, "tessera_requests_waiting{model=\"m1\"}") == 6);
    assert_true(sample(text, "tessera_requests_running{model=\"m1\"}") == 3);
    assert_true(sample(text, "tessera_kv_utilization{model=\"m1\"}") == 0.25);
    /* The other model has its series, still 0. */
    assert_true(sample(text, "vllm:num_requests_waiting{model=\"org/m2:q8\",model_name=\"org/m2:q8\"}") == 0);
    assert_true(sample(text, "vllm:kv_cache_usage_perc{model=\"org/m2:q8\",model_name=\"org/m2:q8\"}") == 0);
    assert_non_null(strstr(text, "# TYPE vllm:num_requests_waiting gauge\n"));
    assert_non_null(strstr(text, "# TYPE vllm:gpu_cache_usage_perc gauge\n"));
    free(text);
    /* Everything ends: the next (idle) turn brings them back to 0. */
    memset(ts, 0, sizeof ts);
    si.kv_used = 0;
    si.now_us += SEC;
    h1.on_step(h1.ctx, &si);
    ts[1].running = 1;
    si.kv_used = 12;
    h2.on_step(h2.ctx, &si);
    assert_int_equal(obs_render(o, &text, &len), 0);
    assert_true(sample(text, "vllm:num_requests_waiting{model=\"m1\",model_name=\"m1\"}") == 0);
    assert_true(sample(text, "vllm:num_requests_running{model=\"m1\",model_name=\"m1\"}") == 0);
    assert_true(sample(text, "vllm:kv_cache_usage_perc{model=\"m1\",model_name=\"m1\"}") == 0);
    assert_true(sample(text, "vllm:num_requests_running{model=\"org/m2:q8\",model_name=\"org/m2:q8\"}") == 1);
    assert_true(sample(text, "vllm:kv_cache_usage_perc{model=\"org/m2:q8\",model_name=\"org/m2:q8\"}") == 0.1);
    free(text);
    obs_free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_small_registry),
        cmocka_unit_test(test_render_unlabelled_histogram_and_empty),
        cmocka_unit_test(test_label_and_help_escaping),
        cmocka_unit_test(test_series_identity),
        cmocka_unit_test(test_bad_registrations),
        cmocka_unit_test(test_default_buckets_increasing),
        cmocka_unit_test(test_concurrent_updates_exact),
        cmocka_unit_test(test_render_while_updating),
        cmocka_unit_test(test_jain_hand_values),
        cmocka_unit_test(test_window_bad_input),
        cmocka_unit_test(test_window_jain_and_exclusion),
        cmocka_unit_test(test_window_starved_tenant_counts),
        cmocka_unit_test(test_window_expiry),
        cmocka_unit_test(test_window_negative_time),
        cmocka_unit_test(test_outcome_names),
        cmocka_unit_test(test_outcome_of_req),
        cmocka_unit_test(test_outcome_of_status),
        cmocka_unit_test(test_outcome_series),
        cmocka_unit_test(test_cost_series),
        cmocka_unit_test(test_server_gauges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
