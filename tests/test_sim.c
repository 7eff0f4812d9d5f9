/* test_sim.c - the fleet simulator: step models by hand, exact timings of
 * small runs, every request ending once, determinism, routing, sharing
 * modes, fairness against FCFS, bounded against exact reports, and fleets
 * built from a plan. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "err.h"
#include "file.h"
#include "fleet.h"
#include "planio.h"
#include "sim.h"
#include "sstep.h"
#include "testutil.h"

/* ---- fixtures ------------------------------------------------------------------ */

typedef struct src_arr {
    const arr_event *ev;
    size_t n, i;
} src_arr;

static int arr_next(void *ctx, arr_event *ev) {
    src_arr *s = ctx;
    if (s->i >= s->n) return 0;
    *ev = s->ev[s->i++];
    return 1;
}

static sched_tier TIER = {.name = "std", .band = 0};

static void tenant(sim_tenant *t, const char *name, int worker) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    snprintf(t->cfg.name, sizeof(t->cfg.name), "%s", name);
    t->cfg.weight = 1.0;
    t->worker = worker;
}

/* An instance whose every step takes a_us (linear model, a only). */
static void inst(sim_inst *o, const char *name, int worker, double a_us, int policy) {
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s", name);
    snprintf(o->model, sizeof(o->model), "m");
    o->worker = worker;
    o->device = -1;
    o->step.kind = SST_LINEAR;
    o->step.theta[0] = a_us;
    sched_config_default(&o->sc);
    o->sc.policy = policy;
    o->sc.n_blocks = 1024;
    o->sc.block_size = 16;
    o->sc.block_bytes = 1024;
    o->sc.max_ctx = 2048;
    o->sc.max_running = 8;
    o->sc.max_requests = 1024;
}

static void report_scn(scn *s, const sim_tenant *t, int n) {
    memset(s, 0, sizeof(*s));
    s->tenants = calloc((size_t)n, sizeof(scn_tenant));
    assert_non_null(s->tenants);
    s->n_tenants = n;
    s->w_in = 1;
    s->w_out = 2;
    for (int i = 0; i < n; i++) {
        snprintf(s->tenants[i].name, sizeof(s->tenants[i].name), "%s", t[i].name);
        s->tenants[i].weight = t[i].cfg.weight;
    }
}

static int run(const sim_fleet *f, const arr_event *ev, size_t n, double until, double drain, int route,
               int bounded, sim_result *r) {
    scn rs;
    sim_tenant *ts = (sim_tenant *)f->tenants;
    report_scn(&rs, ts, f->n_tenants);
    src_arr s = {ev, n, 0};
    sim_source src = {arr_next, &s};
    sim_opts o = {.route = route, .until_s = until, .drain_s = drain, .bounded = bounded};
    char err[256];
    int rc = sim_run(f, &rs, &src, &o, r, err, sizeof err);
    scn_free(&rs);
    return rc;
}

/* ---- the step models ----------------------------------------------------------- */

static void test_roofline_hand(void **state) {
    (void)state;
    sst_model m = {0};
    m.kind = SST_ROOFLINE;
    m.params = 1e9;
    m.weight_bytes = 2e9;
    m.kv_per_pos = 1e5;
    m.attn_flops = 1e6;
    m.flops = 1e14;
    m.bw = m.gpu_bw = 1e12;
    m.eff_c = m.eff_b = 1.0;
    m.share = 1.0;
    /* One decode at position 99: 2.1e9 FLOP (21 us), 2.01e9 bytes (2010 us). */
    sst_batch b = {.decodes = 1, .attended = 100, .kv_read = 100};
    assert_float_equal(sst_step_us(&m, &b, 1, 1, 0), 2010.0, 1e-6);
    m.share_mode = SST_TIMESLICE;
    m.switch_us = 100;
    assert_float_equal(sst_step_us(&m, &b, 1, 1, 0), 2010.0, 1e-6);
    assert_float_equal(sst_step_us(&m, &b, 2, 1, 0), 2 * 2010.0 + 100, 1e-6);
    /* MPS: alone, all the bandwidth; the busy clients split it by share. */
    m.share_mode = SST_MPS;
    m.share = 0.25;
    assert_float_equal(sst_step_us(&m, &b, 1, 0.25, 0), 2010.0, 1e-6);
    assert_float_equal(sst_step_us(&m, &b, 2, 0.5, 0), 4020.0, 1e-6);
    assert_float_equal(sst_step_us(&m, &b, 4, 1.0, 0), 8040.0, 1e-6);
    /* A swap of 3 blocks of 1000 bytes over 10 bytes/us adds 300 us. */
    m.share_mode = SST_DEDICATED;
    m.host_bytes_per_us = 10;
    b.copy_blocks = 3;
    assert_float_equal(sst_step_us(&m, &b, 1, 1, 1000), 2310.0, 1e-6);
    /* A step is never longer than SST_MAX_US, NaN included. */
    m.weight_bytes = 1e300;
    assert_float_equal(sst_step_us(&m, &b, 1, 1, 0), SST_MAX_US, 0);
    m.weight_bytes = NAN;
    assert_float_equal(sst_step_us(&m, &b, 1, 1, 0), SST_MAX_US, 0);
}

static void test_linear_and_batch(void **state) {
    (void)state;
    sched_item it[2] = {{.pos = 0, .n_tokens = 10, .is_prefill = 1}, {.pos = 4, .n_tokens = 1}};
    sched_plan p = {.items = it, .n_items = 2, .n_swap_out = 1, .n_swap_in = 2};
    sst_batch b;
    sst_batch_of(&p, &b);
    assert_float_equal(b.prefill, 10, 0);
    assert_float_equal(b.decodes, 1, 0);
    assert_float_equal(b.attended, 55 + 5, 0);
    assert_float_equal(b.kv_read, 10 + 5, 0);
    assert_float_equal(b.copy_blocks, 3, 0);
    sst_model m = {.kind = SST_LINEAR, .theta = {100, 2, 3, 0.5}};
    assert_float_equal(sst_step_us(&m, &b, 1, 0, 0), 100 + 20 + 3 + 30, 1e-9);
    double seed[4];
    sst_seed(&m, seed);
    assert_memory_equal(seed, m.theta, sizeof(seed));
    /* The fit's shape (cost.h) scales the batch's bucket of rows, here 11
     * rows with a prefill chunk (9-16), once it has enough steps; not the
     * swaps' copies, nor steps of the other kind (decode-only). */
    m.shape.log_f[1][4] = log(1.5);
    m.shape.n[1][4] = COST_SHAPE_MIN_STEPS;
    m.host_bytes_per_us = 10;
    assert_float_equal(sst_step_us(&m, &b, 1, 0, 20), 1.5 * 153 + 3 * 20 / 10.0, 1e-9);
    sst_batch d = {.decodes = 11};
    assert_float_equal(sst_step_us(&m, &d, 1, 0, 20), 100 + 33, 1e-9);
}

/* ---- runs ---------------------------------------------------------------------- */

/* One request, prompt 10 and 5 tokens out, 1 ms steps: the first token at
 * the end of the first step, one more per step after. */
static void test_single_request_exact(void **state) {
    (void)state;
    sim_tenant t;
    tenant(&t, "a", 0);
    sim_inst in;
    inst(&in, "i0", 0, 1000, SCHED_POLICY_FAIR);
    sim_fleet f = {&TIER, 1, &t, 1, &in, 1, 0};
    arr_event ev = {.t_s = 0.5, .tenant = 0, .prompt_tokens = 10, .output_tokens = 5};
    sim_result r;
    assert_int_equal(run(&f, &ev, 1, 1.0, 1.0, SIM_ROUTE_LEAST, 0, &r), 0);
    const rpt_tenant *rt = &r.report.t[0];
    assert_int_equal(rt->completed, 1);
    assert_int_equal(rt->errors, 0);
    assert_float_equal(rt->ttft.p50, 0.001, 1e-9);
    assert_float_equal(rt->e2e.p50, 0.005, 1e-9);
    assert_float_equal(rt->tpot.p50, 0.001, 1e-9);
    assert_float_equal(rt->itl.max, 0.001, 1e-9);
    assert_float_equal(rt->tokens_out, 5, 0);
    assert_int_equal(r.inst[0].steps, 5);
    assert_float_equal(r.inst[0].busy_s, 0.005, 1e-9);
    assert_float_equal(r.run_s, 0.505, 1e-9);
    sim_result_free(&r);
}

static arr_event *random_arrivals(size_t n, int n_tenants, double span_s, uint64_t seed) {
    arr_event *ev = calloc(n, sizeof(*ev));
    assert_non_null(ev);
    tu_rng_seed(seed);
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        t += span_s / (double)n * (double)(tu_rng_next() % 2000) / 1000.0;
        ev[i].t_s = t;
        ev[i].tenant = (int32_t)(tu_rng_next() % (uint64_t)n_tenants);
        ev[i].prompt_tokens = 1 + (int32_t)(tu_rng_next() % 300);
        ev[i].output_tokens = 1 + (int32_t)(tu_rng_next() % 100);
    }
    return ev;
}

/* Every arrival is reported exactly once: completed, rejected, failed or
 * cut at the end; with time enough, all complete. */
static void test_every_request_ends_once(void **state) {
    (void)state;
    sim_tenant t[3];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 0);
    tenant(&t[2], "c", 0);
    sim_inst in;
    inst(&in, "i0", 0, 500, SCHED_POLICY_FAIR);
    in.step.theta[1] = 5;
    in.step.theta[2] = 50;
    sim_fleet f = {&TIER, 1, t, 3, &in, 1, 0};
    arr_event *ev = random_arrivals(400, 3, 4.0, 7);
    for (int drain = 0; drain < 2; drain++) {
        sim_result r;
        double until = ev[399].t_s + 0.001;
        assert_int_equal(run(&f, ev, 400, until, drain ? 600.0 : 0.01, SIM_ROUTE_LEAST, 0, &r), 0);
        assert_int_equal(r.requests, 400);
        assert_int_equal(r.report.due, 400);
        int done = 0;
        for (int k = 0; k < 3; k++) done += r.report.t[k].completed + r.report.t[k].errors;
        assert_int_equal(done, 400);
        if (drain) assert_int_equal(r.report.completed, 400);
        else assert_true(r.report.completed < 400); /* a short drain cuts some */
        sim_result_free(&r);
    }
    free(ev);
}

static char *json_refresh(const sim_fleet *f, const arr_event *ev, size_t n, int route, double refresh_s) {
    scn rs;
    report_scn(&rs, f->tenants, f->n_tenants);
    sim_result r;
    src_arr s = {ev, n, 0};
    sim_source src = {arr_next, &s};
    sim_opts o = {.route = route, .until_s = 5, .drain_s = 30, .route_refresh_s = refresh_s};
    char err[256];
    assert_int_equal(sim_run(f, &rs, &src, &o, &r, err, sizeof err), 0);
    char *js = rpt_json(&rs, &r.report, NULL, 0, "sim", 1);
    assert_non_null(js);
    sim_result_free(&r);
    scn_free(&rs);
    return js;
}

static char *json_of(const sim_fleet *f, const arr_event *ev, size_t n, int route) {
    return json_refresh(f, ev, n, route, 0);
}

static void test_deterministic(void **state) {
    (void)state;
    sim_tenant t[2];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 0);
    sim_inst in[2];
    inst(&in[0], "i0", 0, 700, SCHED_POLICY_FAIR);
    inst(&in[1], "i1", 0, 900, SCHED_POLICY_FAIR);
    in[0].step.theta[1] = in[1].step.theta[1] = 3;
    sim_fleet f = {&TIER, 1, t, 2, in, 2, 0};
    arr_event *ev = random_arrivals(300, 2, 4.0, 11);
    char *a = json_of(&f, ev, 300, SIM_ROUTE_LEAST), *b = json_of(&f, ev, 300, SIM_ROUTE_LEAST);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(ev);
}

/* The picker reads the replicas as of its last refresh, plus what it sent
 * each since: requests that each end before the next arrives all go to the
 * first replica when it reads them afresh (both idle, ties to the lowest),
 * but alternate within one long refresh (its own count). */
static void picker_refresh(const sim_fleet *f) {
    arr_event ev[10];
    for (int i = 0; i < 10; i++) ev[i] = (arr_event){.t_s = 0.1 * i, .prompt_tokens = 8, .output_tokens = 4};
    scn rs;
    report_scn(&rs, f->tenants, 1);
    const double refresh[4] = {0, 0.05, 1.0, -1};
    const int first[3] = {10, 10, 5};
    for (int k = 0; k < 4; k++) {
        src_arr s = {ev, 10, 0};
        sim_source src = {arr_next, &s};
        sim_opts o = {.until_s = 2, .drain_s = 5, .route_refresh_s = refresh[k]};
        sim_result r;
        char err[256];
        int rc = sim_run(f, &rs, &src, &o, &r, err, sizeof err);
        if (refresh[k] < 0) { /* refused */
            assert_int_equal(rc, TS_ERR_INVAL);
            break;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(r.inst[0].requests, first[k]);
        assert_int_equal(r.inst[1].requests, 10 - first[k]);
        sim_result_free(&r);
    }
    scn_free(&rs);
}

/* Round-robin alternates; affinity keeps a light tenant on one instance;
 * least-loaded spreads a burst; the picker's refresh (picker_refresh). */
static void test_routing(void **state) {
    (void)state;
    sim_tenant t;
    tenant(&t, "a", 0);
    sim_inst in[2];
    inst(&in[0], "i0", 0, 1000, SCHED_POLICY_FAIR);
    inst(&in[1], "i1", 0, 1000, SCHED_POLICY_FAIR);
    sim_fleet f = {&TIER, 1, &t, 1, in, 2, 0};
    arr_event ev[40];
    for (int i = 0; i < 40; i++) ev[i] = (arr_event){.t_s = 0.1 * i, .prompt_tokens = 8, .output_tokens = 4};
    sim_result r;
    assert_int_equal(run(&f, ev, 40, 5, 5, SIM_ROUTE_RR, 0, &r), 0);
    assert_int_equal(r.inst[0].requests, 20);
    assert_int_equal(r.inst[1].requests, 20);
    sim_result_free(&r);
    assert_int_equal(run(&f, ev, 40, 5, 5, SIM_ROUTE_AFFINITY, 0, &r), 0);
    assert_int_equal(r.inst[0].requests, 40); /* each is done before the next: no reason to move */
    sim_result_free(&r);
    for (int i = 0; i < 40; i++) ev[i].t_s = 0.0; /* a burst */
    assert_int_equal(run(&f, ev, 40, 5, 5, SIM_ROUTE_LEAST, 0, &r), 0);
    assert_int_equal(r.inst[0].requests, 20);
    assert_int_equal(r.inst[1].requests, 20);
    sim_result_free(&r);
    picker_refresh(&f);
}

/* Replicas run up to different times between the picker's refreshes,
 * and the run must come out as in one time order. The reference puts each
 * worker's replicas on one device (a step-time model that ignores
 * sharing), which makes them one group, stepped in one time order up to
 * every arrival; apart, with round-robin routing (which reads no state)
 * and the picker's refreshes, the report is the same to the byte,
 * limit refusals included (one tenant has a token rate and a concurrency
 * cap, so its worker steps up to every arrival and its refusals depend on
 * when its requests end). The report counts backlog by one-second slot, so
 * this checks the stepping, not the ledger's order within a slot. */
static void test_refresh_keeps_time_order(void **state) {
    (void)state;
    sim_tenant t[4];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 0);
    tenant(&t[2], "c", 1);
    tenant(&t[3], "d", 1);
    t[2].tok_per_min = 6000;
    t[2].max_concurrent = 2;
    sim_inst in[5];
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "i%d", i);
        inst(&in[i], name, i < 3 ? 0 : 1, 600 + 100 * i, SCHED_POLICY_FAIR);
        in[i].step.theta[1] = 4;
        in[i].step.theta[2] = 40;
    }
    sim_fleet f = {&TIER, 1, t, 4, in, 5, 0};
    arr_event *ev = random_arrivals(400, 4, 4.5, 13);
    char *apart = json_refresh(&f, ev, 400, SIM_ROUTE_RR, 0.05);
    sim_result r;
    assert_int_equal(run(&f, ev, 400, 5, 30, SIM_ROUTE_RR, 0, &r), 0);
    uint64_t limited = 0;
    for (int k = 0; k < 5; k++) limited += r.tenant[2].limited[k];
    assert_true(limited > 0 && r.report.t[2].completed > 0); /* the limits refused some, not all */
    sim_result_free(&r);
    for (int i = 0; i < 5; i++) in[i].device = i < 3 ? 0 : 1;
    f.n_devices = 2;
    char *together = json_refresh(&f, ev, 400, SIM_ROUTE_RR, 0);
    assert_string_equal(apart, together);
    free(apart);
    free(together);
    free(ev);
}

/* Two instances time-slicing one GPU: while both are busy, each step waits
 * for the other's; alone, a step takes its own time. */
static void test_timeslice(void **state) {
    (void)state;
    sim_tenant t[2];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 1);
    sim_inst in[2];
    for (int i = 0; i < 2; i++) {
        inst(&in[i], i ? "i1" : "i0", i, 0, SCHED_POLICY_FAIR);
        sst_model *m = &in[i].step;
        *m = (sst_model){.kind = SST_ROOFLINE, .weight_bytes = 1e6, .bw = 1e9, .eff_b = 1, .eff_c = 1,
                         .share_mode = SST_TIMESLICE, .switch_us = 0};
    }
    arr_event ev[2] = {{.t_s = 0, .tenant = 0, .prompt_tokens = 1, .output_tokens = 101},
                       {.t_s = 0, .tenant = 1, .prompt_tokens = 1, .output_tokens = 101}};
    sim_fleet alone = {&TIER, 1, t, 2, in, 2, 0};
    sim_result r;
    assert_int_equal(run(&alone, ev, 1, 1, 5, SIM_ROUTE_LEAST, 0, &r), 0);
    assert_float_equal(r.report.t[0].tpot.p50, 0.001, 1e-9); /* 1e6 bytes at 1e9 B/s */
    sim_result_free(&r);
    in[0].device = in[1].device = 0;
    sim_fleet shared = {&TIER, 1, t, 2, in, 2, 1};
    assert_int_equal(run(&shared, ev, 2, 1, 5, SIM_ROUTE_LEAST, 0, &r), 0);
    for (int k = 0; k < 2; k++) {
        assert_true(r.report.t[k].tpot.p50 > 0.0019);
        assert_true(r.report.t[k].tpot.p50 < 0.0021);
    }
    sim_result_free(&r);
}

/* A flood and a light tenant on one instance: the fair scheduler keeps the
 * light one's first tokens fast, FCFS makes it wait behind the flood. */
static double victim_p99(int policy) {
    sim_tenant t[2];
    tenant(&t[0], "flood", 0);
    tenant(&t[1], "victim", 0);
    sim_inst in;
    inst(&in, "i0", 0, 2000, policy);
    in.step.theta[1] = 20;
    in.step.theta[2] = 100;
    sim_fleet f = {&TIER, 1, t, 2, &in, 1, 0};
    arr_event ev[300];
    int n = 0;
    for (int i = 0; i < 280; i++) ev[n++] = (arr_event){.t_s = 0.001 * i, .tenant = 0, .prompt_tokens = 64,
                                                        .output_tokens = 64};
    for (int i = 0; i < 20; i++) ev[n++] = (arr_event){.t_s = 0.5 + 0.1 * i, .tenant = 1, .prompt_tokens = 64,
                                                       .output_tokens = 8};
    /* The source must be in time order. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ev[j].t_s < ev[j - 1].t_s; j--) {
            arr_event x = ev[j];
            ev[j] = ev[j - 1];
            ev[j - 1] = x;
        }
    sim_result r;
    assert_int_equal(run(&f, ev, (size_t)n, 5, 600, SIM_ROUTE_LEAST, 0, &r), 0);
    assert_int_equal(r.report.completed, n);
    double p99 = r.report.t[1].ttft.p99;
    sim_result_free(&r);
    return p99;
}

static void test_fair_vs_fcfs(void **state) {
    (void)state;
    double fair = victim_p99(SCHED_POLICY_FAIR), fcfs = victim_p99(SCHED_POLICY_FCFS);
    assert_true(fair * 5 < fcfs);
}

static void test_unserved_and_bad_fleet(void **state) {
    (void)state;
    sim_tenant t[2];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "nowhere", -1);
    sim_inst in;
    inst(&in, "i0", 0, 1000, SCHED_POLICY_FAIR);
    sim_fleet f = {&TIER, 1, t, 2, &in, 1, 0};
    arr_event ev[2] = {{.t_s = 0, .tenant = 0, .prompt_tokens = 4, .output_tokens = 2},
                       {.t_s = 0.1, .tenant = 1, .prompt_tokens = 4, .output_tokens = 2}};
    sim_result r;
    assert_int_equal(run(&f, ev, 2, 1, 1, SIM_ROUTE_LEAST, 0, &r), 0);
    assert_int_equal(r.report.t[0].completed, 1);
    assert_int_equal(r.report.t[1].errors, 1);
    assert_int_equal(r.report.t[1].codes[0].status, 503);
    assert_int_equal(r.tenant[1].unserved, 1);
    sim_result_free(&r);
    sim_fleet empty = {&TIER, 1, t, 1, &in, 0, 0};
    assert_int_equal(run(&empty, ev, 1, 1, 1, SIM_ROUTE_LEAST, 0, &r), TS_ERR_INVAL);
    t[1].cfg.tier = 3; /* no such tier */
    assert_int_equal(run(&f, ev, 2, 1, 1, SIM_ROUTE_LEAST, 0, &r), TS_ERR_INVAL);
    /* A source out of range stops the run with an error. */
    t[1].cfg.tier = 0;
    ev[1].tenant = 7;
    assert_int_equal(run(&f, ev, 2, 1, 1, SIM_ROUTE_LEAST, 0, &r), TS_ERR_INVAL);
}

/* The bounded report's percentiles are within 1% of the exact ones. */
static void test_bounded_matches_exact(void **state) {
    (void)state;
    sim_tenant t[2];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 0);
    sim_inst in;
    inst(&in, "i0", 0, 800, SCHED_POLICY_FAIR);
    in.step.theta[1] = 4;
    in.step.theta[2] = 60;
    sim_fleet f = {&TIER, 1, t, 2, &in, 1, 0};
    arr_event *ev = random_arrivals(600, 2, 10.0, 3);
    sim_result a, b;
    assert_int_equal(run(&f, ev, 600, 20, 600, SIM_ROUTE_LEAST, 0, &a), 0);
    assert_int_equal(run(&f, ev, 600, 20, 600, SIM_ROUTE_LEAST, 1, &b), 0);
    for (int k = 0; k < 2; k++) {
        const rpt_tenant *x = &a.report.t[k], *y = &b.report.t[k];
        assert_int_equal(x->completed, y->completed);
        assert_true(fabs(x->ttft.p99 - y->ttft.p99) <= 0.01 * x->ttft.p99);
        assert_true(fabs(x->tpot.p50 - y->tpot.p50) <= 0.01 * x->tpot.p50);
        assert_true(fabs(x->e2e.p90 - y->e2e.p90) <= 0.01 * x->e2e.p90);
    }
    sim_result_free(&a);
    sim_result_free(&b);
    free(ev);
}

/* An instance's noise (sim_inst): noise_us and rho, the spread of nq
 * levels, the spells of nc components. */
typedef struct noise_cfg {
    double us, rho;
    int nq;
    const double *lv, *q;
    int nc;
    const double *w, *tau;
} noise_cfg;

/* One request at a time (every 50 ms, 30 steps of ~1 ms) on an instance
 * with noise nz: the tenant's TPOT into *out. Returns sim_run's answer. */
static int tpot_run(const noise_cfg *nz, rpt_dist *out) {
    sim_tenant t;
    tenant(&t, "a", 0);
    sim_inst in;
    inst(&in, "i0", 0, 1000, SCHED_POLICY_FAIR);
    in.noise_us = nz->us;
    in.noise_rho = nz->rho;
    in.noise_nq = nz->nq;
    for (int k = 0; k < nz->nq && k < SIM_NOISE_MAXQ; k++) in.noise_level[k] = nz->lv[k], in.noise_q[k] = nz->q[k];
    in.noise_nc = nz->nc;
    for (int k = 0; k < nz->nc && k < SIM_NOISE_MAXC; k++) in.noise_w[k] = nz->w[k], in.noise_tau[k] = nz->tau[k];
    sim_fleet f = {&TIER, 1, &t, 1, &in, 1, 0};
    arr_event ev[200];
    for (int i = 0; i < 200; i++) ev[i] = (arr_event){.t_s = 0.05 * i, .prompt_tokens = 8, .output_tokens = 30};
    sim_result r;
    scn rs;
    report_scn(&rs, &t, 1);
    src_arr s = {ev, 200, 0};
    sim_source src = {arr_next, &s};
    sim_opts o = {.until_s = 20, .drain_s = 10, .seed = 5};
    char err[256];
    int rc = sim_run(&f, &rs, &src, &o, &r, err, sizeof err);
    if (!rc) *out = r.report.t[0].tpot;
    if (!rc) sim_result_free(&r);
    scn_free(&rs);
    return rc;
}

/* Step noise in runs (AR(1)) spreads requests' TPOT far more than the same
 * noise step by step, which a request's many steps average away. */
static double tpot_spread(const noise_cfg *nz) {
    rpt_dist d;
    assert_int_equal(tpot_run(nz, &d), 0);
    return d.p99 / d.p50;
}

static void test_noise_runs(void **state) {
    (void)state;
    double indep = tpot_spread(&(noise_cfg){.us = 300});
    double runs = tpot_spread(&(noise_cfg){.us = 300, .rho = 0.95});
    assert_true(indep > 1.0 && indep < 1.2);
    assert_true(runs > indep + 0.1);
}

/* Spells: the same noise in spells of 4 steps spreads requests' TPOT more
 * than independent noise (p99 / p50 1.33 against 1.12 here), and in spells
 * of 256 steps, longer than a request's 30, more still (1.51): it moves
 * whole requests. No weight at all is independent noise, drawn as rho 0
 * draws it. Weights past 1 in all, or a spell of no length, are refused. */
static void test_noise_spells(void **state) {
    (void)state;
    const double one[1] = {1}, four[1] = {4}, long_[1] = {256}, zero[2] = {0, 0}, two[2] = {1, 16};
    double short_spells = tpot_spread(&(noise_cfg){.us = 300, .nc = 1, .w = one, .tau = four});
    double long_spells = tpot_spread(&(noise_cfg){.us = 300, .nc = 1, .w = one, .tau = long_});
    double indep = tpot_spread(&(noise_cfg){.us = 300});
    assert_true(short_spells > indep + 0.1);
    assert_true(long_spells > short_spells + 0.1);
    rpt_dist a, b;
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300}, &a), 0);
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = 2, .w = zero, .tau = two}, &b), 0);
    assert_memory_equal(&a, &b, sizeof a);
    const double over[2] = {0.6, 0.5}, neg[1] = {-0.1}, no_len[1] = {0};
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = 2, .w = over, .tau = two}, &a), TS_ERR_INVAL);
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = 1, .w = neg, .tau = four}, &a), TS_ERR_INVAL);
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = 1, .w = one, .tau = no_len}, &a), TS_ERR_INVAL);
    double many_w[SIM_NOISE_MAXC + 1] = {0}, many_tau[SIM_NOISE_MAXC + 1];
    for (int k = 0; k <= SIM_NOISE_MAXC; k++) many_tau[k] = 1;
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = SIM_NOISE_MAXC, .w = many_w, .tau = many_tau}, &a), 0);
    assert_int_equal(tpot_run(&(noise_cfg){.us = 300, .nc = SIM_NOISE_MAXC + 1, .w = many_w, .tau = many_tau}, &a),
                     TS_ERR_INVAL);
}

/* A measured spread: a step takes the model's time times Q(u). Constant 2:
 * every TPOT doubles exactly (noise_us unused). 1 below the quartile, 3
 * above the third, linear between: the mean ratio is 2, and a request's
 * TPOT, a mean of its 29 gaps, lies within [1, 3] times the model's. A
 * table that does not ascend is refused. */
static void test_noise_spread(void **state) {
    (void)state;
    rpt_dist base, twice, mixed;
    assert_int_equal(tpot_run(&(noise_cfg){0}, &base), 0);
    const double lv2[2] = {0.1, 0.9}, q2[2] = {2, 2};
    assert_int_equal(tpot_run(&(noise_cfg){.us = 500, .rho = 0.5, .nq = 2, .lv = lv2, .q = q2}, &twice), 0);
    assert_true(fabs(twice.p50 - 2 * base.p50) <= 1e-9 && fabs(twice.max - 2 * base.max) <= 1e-9);
    const double lv[2] = {0.25, 0.75}, q[2] = {1, 3};
    assert_int_equal(tpot_run(&(noise_cfg){.nq = 2, .lv = lv, .q = q}, &mixed), 0);
    assert_true(fabs(mixed.mean / base.mean - 2) < 0.03);
    assert_true(mixed.max <= 3 * base.max + 1e-9 && mixed.p50 > 1.5 * base.p50);
    const double bad_lv[2] = {0.75, 0.25};
    assert_int_equal(tpot_run(&(noise_cfg){.nq = 2, .lv = bad_lv, .q = q}, &mixed), TS_ERR_INVAL);
    const double bad_q[2] = {3, 1};
    assert_int_equal(tpot_run(&(noise_cfg){.nq = 2, .lv = lv, .q = bad_q}, &mixed), TS_ERR_INVAL);
    double many_lv[SIM_NOISE_MAXQ + 1], many_q[SIM_NOISE_MAXQ + 1];
    for (int k = 0; k <= SIM_NOISE_MAXQ; k++) many_lv[k] = (k + 1.0) / (SIM_NOISE_MAXQ + 2), many_q[k] = 1;
    assert_int_equal(tpot_run(&(noise_cfg){.nq = SIM_NOISE_MAXQ, .lv = many_lv, .q = many_q}, &mixed), 0);
    assert_int_equal(tpot_run(&(noise_cfg){.nq = SIM_NOISE_MAXQ + 1, .lv = many_lv, .q = many_q}, &mixed),
                     TS_ERR_INVAL);
}

/* ---- fleets from plans ------------------------------------------------------- */

/* examples/plan/fleet.yaml planned, its fleet, and its load x load_x for
 * seconds (lengths of CV cv) as a scenario beside the report's. */
typedef struct plan_fleet {
    plan_input in;
    plan p;
    sfl f;
    scn load, rs;
} plan_fleet;

static void plan_fleet_open(plan_fleet *pf, double load_x, double cv, double seconds) {
    char err[1024], path[1024];
    const char *src_dir = getenv("TS_SRC");
    snprintf(path, sizeof path, "%s/examples/plan/fleet.yaml", src_dir ? src_dir : "..");
    assert_int_equal(planio_load(path, &pf->in, err, sizeof err), 0);
    assert_int_equal(plan_build(&pf->in, &pf->p), 0);
    assert_int_equal(sfl_from_plan(&pf->p, SCHED_POLICY_FAIR, &pf->f, err, sizeof err), 0);
    assert_int_equal(sfl_load_scn(&pf->in, load_x, cv, seconds, &pf->load), 0);
    assert_int_equal(sfl_report_scn(&pf->f, &pf->rs), 0);
}

static void plan_fleet_close(plan_fleet *pf) {
    scn_free(&pf->load);
    scn_free(&pf->rs);
    sfl_free(&pf->f);
    plan_free(&pf->p);
    plan_input_free(&pf->in);
}

static void test_fleet_from_plan(void **state) {
    (void)state;
    plan_fleet pf;
    plan_fleet_open(&pf, 1.0, 0, 20);
    const plan *p = &pf.p;
    const sfl *f = &pf.f;
    int placed = 0;
    for (size_t i = 0; i < p->n_insts; i++) placed += p->slices[p->insts[i].slice].gpu >= 0;
    assert_int_equal(f->f.n_insts, placed);
    int modes[3] = {0};
    for (int i = 0; i < f->f.n_insts; i++) {
        const sim_inst *si = &f->insts[i];
        assert_true(si->sc.n_blocks > 0);
        assert_true(si->sc.max_running >= 1);
        assert_true(si->step.flops > 0 && si->step.bw > 0);
        modes[si->step.share_mode]++;
        if (si->step.share_mode != SST_DEDICATED) assert_true(si->device >= 0);
    }
    assert_true(modes[SST_DEDICATED] > 0 && modes[SST_MPS] > 0 && modes[SST_TIMESLICE] > 0);
    for (int t = 0; t < f->f.n_tenants; t++) assert_true(f->tenants[t].worker >= 0);
    /* Its own load for 20 s, through the real schedulers. */
    arr_event *ev;
    size_t n;
    assert_int_equal(arr_schedule(&pf.load, 1, 20, 0, &ev, &n), 0);
    src_arr s = {ev, n, 0};
    sim_source src = {arr_next, &s};
    sim_opts o = {.until_s = 20, .drain_s = 60};
    sim_result r;
    char err[256];
    assert_int_equal(sim_run(&f->f, &pf.rs, &src, &o, &r, err, sizeof err), 0);
    assert_int_equal(r.report.due, (int)n);
    assert_int_equal(r.report.completed, (int)n);
    free(ev);
    sim_result_free(&r);
    plan_fleet_close(&pf);
}

/* A pool the server's engine would refuse is refused here too, naming the
 * instance: more blocks than an int32 counts (a model of a few bytes of KV
 * per position on a large slice), or none. */
static void test_fleet_pool_bounds(void **state) {
    (void)state;
    plan_fleet pf;
    plan_fleet_open(&pf, 1.0, 0, 1);
    size_t i = 0;
    while (pf.p.slices[pf.p.insts[i].slice].gpu < 0) i++; /* a placed one */
    double kept = pf.p.insts[i].est.kv_bytes;
    static const double bad[] = {1e18, 0};
    for (int k = 0; k < 2; k++) {
        pf.p.insts[i].est.kv_bytes = bad[k];
        sfl f;
        char err[256] = "";
        assert_int_equal(sfl_from_plan(&pf.p, SCHED_POLICY_FAIR, &f, err, sizeof err), TS_ERR_INVAL);
        if (!strstr(err, "instance ") || !strstr(err, "blocks of")) fail_msg("message: %s", err);
    }
    pf.p.insts[i].est.kv_bytes = kept;
    plan_fleet_close(&pf);
}

/* A calibration (GET /admin/models of a real server, saved) as the
 * simulator's instance: its fit, geometry and noise carried over; then
 * each field edited past what a server's configuration accepts is refused,
 * naming the field. */
static void test_server_inst(void **state) {
    (void)state;
    char path[1024], err[256] = "";
    const char *src_dir = getenv("TS_SRC");
    snprintf(path, sizeof path, "%s/tests/data/sim/calibration.json", src_dir ? src_dir : "..");
    char *text;
    size_t len, n;
    assert_int_equal(file_read_all(path, 1 << 20, &text, &len, err, sizeof err), 0);
    scr_model *rows;
    assert_int_equal(scr_parse_models(text, len, &rows, &n, err, sizeof err), 0);
    free(text);
    assert_int_equal(n, 1);
    const scr_model good = rows[0];
    free(rows);
    sim_inst in;
    assert_int_equal(sfl_server_inst(&good, -1, &in, err, sizeof err), 0);
    assert_int_equal(in.sc.policy, SCHED_POLICY_FAIR);
    assert_int_equal(in.sc.n_blocks, 303);
    assert_int_equal(in.sc.max_running, 6);
    assert_int_equal(in.sc.budget_max, 256);
    assert_int_equal(in.sc.max_ctx, 2048);
    assert_true(in.step.kind == SST_LINEAR && in.step.theta[0] == good.theta[0]);
    assert_true(fabs(in.noise_us - good.err_us * sqrt(M_PI / 2)) < 1e-9);
    assert_int_equal(in.noise_nq, 0); /* the file has no step_ratio */
    assert_int_equal(sfl_server_inst(&good, SCHED_POLICY_FCFS, &in, err, sizeof err), 0);
    assert_int_equal(in.sc.policy, SCHED_POLICY_FCFS);
    static const char *const fields[] = {"block_size", "max_seqs", "budget_max", "context_length", "kv_low",
                                         "cost_model.err_us", "cost_model.a_us"};
    for (int k = 0; k < 7; k++) {
        scr_model m = good;
        switch (k) {
        case 0: m.block_size = SCHED_MAX_BLOCK_SIZE + 1; break;
        case 1: m.max_seqs = SCHED_MAX_SEQS + 1; break;
        case 2: m.budget_max = INT32_MAX; break;
        case 3: m.context_length = SCHED_MAX_CTX + 1; break;
        case 4: m.kv_low = 0; break;
        case 5: m.err_us = NAN; break;
        case 6: m.theta[0] = SST_MAX_US * 2; break;
        }
        err[0] = 0;
        assert_int_equal(sfl_server_inst(&m, -1, &in, err, sizeof err), TS_ERR_INVAL);
        if (!strstr(err, fields[k]) || !strstr(err, "model 'demo'")) fail_msg("case %d: %s", k, err);
    }
    /* A describing fit (step_fit) that has seen enough steps is the one the
     * steps take, with its own spread; the scheduler's otherwise. */
    scr_model f = good;
    f.n_ratio = 3;
    f.ratio_steps = 5000;
    const double lv[3] = {0.1, 0.5, 0.9}, q[3] = {0.8, 1.0, 1.6}, sq[3] = {0.9, 1.0, 1.3}, sth[4] = {1200, 150, 450, 0.5};
    memcpy(f.ratio_level, lv, sizeof lv);
    memcpy(f.ratio_q, q, sizeof q);
    memcpy(f.sf_q, sq, sizeof sq);
    memcpy(f.sf_theta, sth, sizeof sth);
    f.sf_err_us = 99;
    f.sf_err_autocorr = 0.25;
    f.sf_steps = SFL_SPREAD_MIN_STEPS - 1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_memory_equal(in.step.theta, good.theta, sizeof in.step.theta);
    assert_memory_equal(in.noise_q, q, sizeof q);
    /* Steps drawn around the scheduler's fit: its scheduler starts there,
     * whatever seed the server reports. */
    assert_int_equal(in.own_seed, 1);
    assert_memory_equal(in.sc.cost_seed, good.theta, sizeof good.theta);
    const double seed[4] = {1500, 60, 400, 0.03};
    memcpy(f.seed, seed, sizeof seed);
    f.has_seed = 1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_memory_equal(in.sc.cost_seed, good.theta, sizeof good.theta);
    f.has_seed = 0;
    f.sf_steps = SFL_SPREAD_MIN_STEPS;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_memory_equal(in.step.theta, sth, sizeof sth);
    assert_int_equal(in.noise_nq, 3);
    assert_memory_equal(in.noise_q, sq, sizeof sq);
    assert_true(in.noise_rho == 0.25 && fabs(in.noise_us - 99 * sqrt(M_PI / 2)) < 1e-9);
    assert_int_equal(in.noise_nc, 0); /* a server before step_fit.acf: one AR(1) */
    /* The shape goes with step_fit (its spread is counted around it), not
     * with the scheduler's fit. */
    const double unshaped = in.step.theta[0] + in.step.theta[2];
    sst_batch one = {.decodes = 1};
    assert_float_equal(sst_step_us(&in.step, &one, 1, 0, 0), unshaped, 1e-9);
    f.sf_has_shape = 1;
    f.sf_shape.log_f[0][0] = log(1.25);
    f.sf_shape.n[0][0] = COST_SHAPE_MIN_STEPS;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_float_equal(sst_step_us(&in.step, &one, 1, 0, 0), 1.25 * unshaped, 1e-9);
    f.sf_steps = SFL_SPREAD_MIN_STEPS - 1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_float_equal(sst_step_us(&in.step, &one, 1, 0, 0), good.theta[0] + good.theta[2], 1e-9);
    f.sf_steps = SFL_SPREAD_MIN_STEPS;
    f.sf_has_shape = 0;
    memset(&f.sf_shape, 0, sizeof f.sf_shape);
    /* With the server's autocorrelation at its lags, the noise comes in
     * spells of those lengths: one that falls off as e^(-L / 16) puts most
     * weight on the 16-step spell, and the weights sum to at most 1; one
     * at or below 0 everywhere leaves independent noise; the scheduler's
     * fit does not take it. */
    const double lags[5] = {1, 4, 16, 64, 256};
    f.sf_n_acf = 5;
    for (int k = 0; k < 5; k++) f.sf_acf_lag[k] = lags[k], f.sf_acf[k] = exp(-lags[k] / 16);
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_int_equal(in.noise_nc, 5);
    double sum = 0;
    int top = 0;
    for (int k = 0; k < 5; k++) {
        assert_true(in.noise_tau[k] == lags[k] && in.noise_w[k] >= 0);
        sum += in.noise_w[k];
        if (in.noise_w[k] > in.noise_w[top]) top = k;
    }
    assert_int_equal(top, 2);
    assert_true(sum > 0.99 && sum <= 1 + 1e-12);
    for (int k = 0; k < 5; k++) f.sf_acf[k] = k % 2 ? 0 : -0.1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    for (int k = 0; k < 5; k++) assert_true(in.noise_w[k] == 0);
    f.sf_steps = SFL_SPREAD_MIN_STEPS - 1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_int_equal(in.noise_nc, 0);
    f.sf_steps = SFL_SPREAD_MIN_STEPS;
    f.sf_n_acf = 0;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    /* Steps drawn around step_fit: the simulated scheduler starts where the
     * server's did, from its seed, or sched_config_default's where the
     * server does not say; with no load it is still there at the end;
     * without own_seed it would start from the step model. */
    sched_config dc;
    sched_config_default(&dc);
    assert_int_equal(in.own_seed, 1);
    assert_memory_equal(in.sc.cost_seed, dc.cost_seed, sizeof dc.cost_seed);
    f.has_seed = 1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), 0);
    assert_memory_equal(in.sc.cost_seed, seed, sizeof seed);
    for (int own = 1; own >= 0; own--) {
        sim_tenant t;
        tenant(&t, "a", 0);
        sfl fl;
        in.own_seed = own;
        assert_int_equal(sfl_single(&TIER, 1, &t, 1, &in, &fl), 0);
        sim_result r;
        assert_int_equal(run(&fl.f, NULL, 0, 1.0, 0.0, SIM_ROUTE_LEAST, 0, &r), 0);
        for (int k = 0; k < 4; k++) assert_true(fabs(r.inst[0].theta[k] - (own ? seed : sth)[k]) < 1e-9);
        sim_result_free(&r);
        sfl_free(&fl);
    }
    /* Both fits are checked, and the seed: the fit the steps take, the one
     * the scheduler would start from without step_fit, and its seed. */
    f.sf_theta[2] = NAN;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), TS_ERR_INVAL);
    if (!strstr(err, "step_fit.c_us_per_decode_seq")) fail_msg("message: %s", err);
    f.sf_theta[2] = 450;
    f.seed[3] = -1;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), TS_ERR_INVAL);
    if (!strstr(err, "cost_model.seed.d_us_per_attended_position")) fail_msg("message: %s", err);
    f.seed[3] = 0.03;
    f.theta[0] = INFINITY;
    assert_int_equal(sfl_server_inst(&f, -1, &in, err, sizeof err), TS_ERR_INVAL);
    if (!strstr(err, "cost_model.a_us")) fail_msg("message: %s", err);
    /* The name is the server's: quoted with its control characters escaped. */
    scr_model m = good;
    snprintf(m.name, sizeof m.name, "de\nmo");
    m.block_size = 0;
    assert_int_equal(sfl_server_inst(&m, -1, &in, err, sizeof err), TS_ERR_INVAL);
    if (strchr(err, '\n') || !strstr(err, "model 'de\\nmo'")) fail_msg("message: %s", err);
}

/* ---- threads and windows ------------------------------------------------------- */

/* Everything a run gives, as one string: the report, the counts, every
 * instance's and tenant's figures and the series, in hex (bit for bit). */
static char *run_print(const sim_fleet *f, const scn *rs, const arr_event *ev, size_t n, sim_opts o) {
    src_arr s = {ev, n, 0};
    sim_source src = {arr_next, &s};
    sim_result r;
    char err[256];
    assert_int_equal(sim_run(f, rs, &src, &o, &r, err, sizeof err), 0);
    char *js = rpt_json(rs, &r.report, NULL, 0, "sim", 1);
    assert_non_null(js);
    size_t cap = strlen(js) + 64 + 2 * (sizeof(sim_inst_stats) * (size_t)f->n_insts +
                                        sizeof(sim_tenant_stats) * (size_t)f->n_tenants +
                                        sizeof(float) * 3 * (size_t)r.n_bins);
    char *out = malloc(cap), *p = out;
    assert_non_null(out);
    p += sprintf(p, "%s %llu %llu %a %d|", js, (unsigned long long)r.requests, (unsigned long long)r.events,
                 r.run_s, r.n_bins);
    const unsigned char *bytes[3] = {(const void *)r.inst, (const void *)r.tenant, (const void *)r.series};
    size_t len[3] = {sizeof(sim_inst_stats) * (size_t)f->n_insts, sizeof(sim_tenant_stats) * (size_t)f->n_tenants,
                     sizeof(float) * 3 * (size_t)r.n_bins};
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < len[k]; j++) p += sprintf(p, "%02x", bytes[k][j]);
    free(js);
    sim_result_free(&r);
    return out;
}

/* Two run_print strings are the same; where not, says where. */
static void assert_same_run(const char *a, const char *b) {
    size_t k = 0;
    while (a[k] && a[k] == b[k]) k++;
    if (a[k] || b[k]) {
        size_t from = k > 40 ? k - 40 : 0;
        print_error("runs differ at byte %zu: ...%.80s... vs ...%.80s...\n", k, a + from, b + from);
        fail();
    }
}

/* How the run is carried out (threads, the window of arrivals taken at a
 * time) changes nothing in what it computes: a planned fleet with MPS and
 * time-sliced devices, replicas, step-time noise, a tenant with token and
 * concurrency limits and one left unserved, run in one thread with the
 * default window, in two with 3 ms windows, in four with 50 s ones. */
static void test_threads_windows_same(void **state) {
    (void)state;
    plan_fleet pf;
    plan_fleet_open(&pf, 1.5, 0.5, 20);
    sfl *f = &pf.f;
    assert_true(f->f.n_tenants >= 3);
    f->tenants[0].tok_per_min = 20000;
    f->tenants[0].max_concurrent = 3;
    f->tenants[1].worker = -1;
    for (int i = 0; i < f->f.n_insts; i++) f->insts[i].noise_us = 300, f->insts[i].noise_rho = 0.5;
    arr_event *ev;
    size_t n;
    assert_int_equal(arr_schedule(&pf.load, 1, 20, 0, &ev, &n), 0);
    sim_opts o = {.until_s = 20, .drain_s = 20, .seed = 9, .route = SIM_ROUTE_AFFINITY,
                  .route_refresh_s = SIM_ROUTE_REFRESH_S, .threads = 1};
    char *a = run_print(&f->f, &pf.rs, ev, n, o);
    o.threads = 2, o.window_s = 0.003;
    char *b = run_print(&f->f, &pf.rs, ev, n, o);
    o.threads = 4, o.window_s = 50;
    char *c = run_print(&f->f, &pf.rs, ev, n, o);
    assert_same_run(a, b);
    assert_same_run(a, c);
    free(a), free(b), free(c);
    free(ev);
    plan_fleet_close(&pf);
}

/* A window holds at most SIM_WINDOW_MAX arrivals, so one may end within
 * an instant: 70,000 arrivals at one instant, then 30,000 a microsecond
 * apart, into two single-instance workers, give what one-microsecond
 * windows give. */
static void test_window_cap(void **state) {
    (void)state;
    sim_tenant t[2];
    tenant(&t[0], "a", 0);
    tenant(&t[1], "b", 1);
    sim_inst in[2];
    inst(&in[0], "i0", 0, 700, SCHED_POLICY_FAIR);
    inst(&in[1], "i1", 1, 900, SCHED_POLICY_FAIR);
    sim_fleet f = {&TIER, 1, t, 2, in, 2, 0};
    size_t n = 100000;
    arr_event *ev = calloc(n, sizeof *ev);
    assert_non_null(ev);
    for (size_t i = 0; i < n; i++)
        ev[i] = (arr_event){.t_s = 0.5 + (i < 70000 ? 0 : (double)(i - 69999) * 1e-6), .tenant = (int32_t)(i % 2),
                            .prompt_tokens = 8, .output_tokens = 4};
    scn rs;
    report_scn(&rs, t, 2);
    sim_opts o = {.until_s = 2, .drain_s = 5, .threads = 2};
    char *a = run_print(&f, &rs, ev, n, o);
    o.threads = 1, o.window_s = 1e-6;
    char *b = run_print(&f, &rs, ev, n, o);
    assert_same_run(a, b);
    free(a), free(b);
    free(ev);
    scn_free(&rs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roofline_hand),
        cmocka_unit_test(test_linear_and_batch),
        cmocka_unit_test(test_single_request_exact),
        cmocka_unit_test(test_every_request_ends_once),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_routing),
        cmocka_unit_test(test_refresh_keeps_time_order),
        cmocka_unit_test(test_timeslice),
        cmocka_unit_test(test_fair_vs_fcfs),
        cmocka_unit_test(test_unserved_and_bad_fleet),
        cmocka_unit_test(test_bounded_matches_exact),
        cmocka_unit_test(test_noise_runs),
        cmocka_unit_test(test_noise_spells),
        cmocka_unit_test(test_noise_spread),
        cmocka_unit_test(test_fleet_from_plan),
        cmocka_unit_test(test_fleet_pool_bounds),
        cmocka_unit_test(test_server_inst),
        cmocka_unit_test(test_threads_windows_same),
        cmocka_unit_test(test_window_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
