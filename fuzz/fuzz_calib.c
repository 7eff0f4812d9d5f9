/*
 * fuzz_calib.c - what `tessera bench` and `tessera sim --calibrate URL |
 * --calibration FILE` read from a server: the GET /admin/models and
 * /admin/tenants answers (bench/scrape.c), and the simulated server each
 * model entry makes (sim/fleet.c's sfl_server_inst), run for a few seconds
 * of a fixed load through the real scheduler (sim/sim.c, core/).
 *
 * Checks scrape.h's promises: a refused answer gives no rows and a one-line
 * message; an accepted one's rows hold what the header says (names of
 * 1..SCHED_NAME_MAX-1 bytes, a known policy, step_ratio levels ascending
 * in (0, 1) and quantiles non-decreasing and > 0, costs >= 0 or -1), and a
 * tenant's totals add up. A model the simulator refuses gets a one-line
 * message; one it takes (within the fuzzer's memory: at most 2^16 KV
 * blocks) is a server the scheduler accepts, and simulates to the end with
 * every arrival in the report once.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "err.h"
#include "fleet.h"
#include "scrape.h"
#include "sim.h"

#define SIM_S 3.0          /* simulated seconds of load */

static void check_name(const char *s) {
    size_t n = strnlen(s, SCHED_NAME_MAX);
    FZ_CHECK(n >= 1 && n < SCHED_NAME_MAX);
}

static void check_unknown_or_positive(double v) { FZ_CHECK(v == -1 || (v >= 0 && isfinite(v))); }

static void check_tenants(const scr_tenant *rows, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const scr_tenant *t = &rows[i];
        check_name(t->name);
        check_name(t->model);
        FZ_CHECK(t->engine_seconds >= 0 && isfinite(t->engine_seconds));
        check_unknown_or_positive(t->cost);
        check_unknown_or_positive(t->price_per_hour);
        check_unknown_or_positive(t->ttft_sum_s);
        scr_tenant all;
        size_t k = scr_tenant_total(rows, n, t->name, NULL, &all);
        FZ_CHECK(k >= 1 && k <= n);
        FZ_CHECK(all.submitted >= t->submitted && all.engine_seconds >= t->engine_seconds);
    }
}

static void check_model(const scr_model *m) {
    check_name(m->name);
    FZ_CHECK(m->policy == SCHED_POLICY_FAIR || m->policy == SCHED_POLICY_FCFS);
    FZ_CHECK(m->budget_min <= m->budget_max && m->kv_low <= m->kv_high && m->kv_high <= 1);
    FZ_CHECK(m->err_autocorr >= -1 && m->err_autocorr <= 1);
    check_unknown_or_positive(m->price_per_hour);
    FZ_CHECK(m->n_ratio >= 0 && m->n_ratio <= SCR_RATIO_MAX);
    for (int k = 0; k < m->n_ratio; k++) {
        FZ_CHECK(m->ratio_level[k] > 0 && m->ratio_level[k] < 1 && m->ratio_q[k] > 0);
        if (k) FZ_CHECK(m->ratio_level[k] > m->ratio_level[k - 1] && m->ratio_q[k] >= m->ratio_q[k - 1]);
    }
    if (m->has_seed)
        for (int k = 0; k < 4; k++) FZ_CHECK(m->seed[k] >= 0 && isfinite(m->seed[k]));
    /* A shape in this build's buckets, each factor within the clip. */
    for (int kind = 0; kind < 2; kind++)
        for (int k = 0; k < COST_SHAPE_ROWS; k++) {
            double f = exp(m->sf_shape.log_f[kind][k]);
            FZ_CHECK(m->sf_has_shape ? f >= 0.36787 && f <= 2.71829 : m->sf_shape.log_f[kind][k] == 0);
            FZ_CHECK(m->sf_has_shape || m->sf_shape.n[kind][k] == 0);
        }
    if (m->sf_steps == 0) return;
    /* A describing fit comes with its spread at step_ratio's levels. */
    FZ_CHECK(m->n_ratio > 0 && m->sf_err_autocorr >= -1 && m->sf_err_autocorr <= 1);
    FZ_CHECK(m->sf_err_us >= 0 && isfinite(m->sf_err_us));
    for (int k = 0; k < 4; k++) FZ_CHECK(m->sf_theta[k] >= 0 && isfinite(m->sf_theta[k]));
    for (int k = 0; k < m->n_ratio; k++) FZ_CHECK(m->sf_q[k] > 0 && (!k || m->sf_q[k] >= m->sf_q[k - 1]));
}

/* A fixed load: Poisson arrivals at 40/s, each to one of two tenants (two
 * tiers) at random, with random lengths. */
typedef struct source {
    uint64_t x;     /* xorshift state */
    double t;       /* s */
    uint64_t n;
} source;

static int source_next(void *ctx, arr_event *ev) {
    source *s = ctx;
    s->x ^= s->x << 13, s->x ^= s->x >> 7, s->x ^= s->x << 17;
    double u = ((double)(s->x >> 11) + 0.5) / 9007199254740992.0;
    s->t += -log(u) / 40.0;
    if (s->t >= SIM_S) return 0;
    memset(ev, 0, sizeof *ev);
    ev->t_s = s->t;
    ev->tenant = (int32_t)(s->x & 1);
    ev->prompt_tokens = 1 + (int32_t)((s->x >> 40) % 300);
    ev->output_tokens = 1 + (int32_t)((s->x >> 20) % 100);
    s->n++;
    return 1;
}

static void simulate(const sim_inst *inst) {
    if (inst->sc.n_blocks > (1 << 16) || inst->sc.n_swap_blocks > (1 << 16)) return;
    sim_tenant ts[2];
    memset(ts, 0, sizeof ts);
    for (int t = 0; t < 2; t++) {
        snprintf(ts[t].name, sizeof ts[t].name, "t%d", t);
        snprintf(ts[t].cfg.name, sizeof ts[t].cfg.name, "t%d", t);
        ts[t].cfg.tier = t;
        ts[t].cfg.weight = 1;
    }
    sfl f;
    if (sfl_single(sched_default_tiers, SCHED_DEFAULT_TIERS, ts, 2, inst, &f)) return;
    scn rs;
    if (sfl_report_scn(&f, &rs) == 0) {
        source src = {0x9E3779B97F4A7C15ull, 0, 0};
        sim_source s = {source_next, &src};
        sim_opts o = {.until_s = SIM_S, .drain_s = 2.0, .seed = 1, .threads = 1};
        sim_result r;
        char err[512] = "";
        /* A calibration sfl_server_inst took is a server's: it runs. */
        int rc = sim_run(&f.f, &rs, &s, &o, &r, err, sizeof err);
        if (rc) fprintf(stderr, "an accepted calibration does not simulate: %s\n", err);
        FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
        if (rc == 0) {
            FZ_CHECK(r.requests == src.n && (uint64_t)r.report.due == src.n);
            sim_result_free(&r);
        }
        scn_free(&rs);
    }
    sfl_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    char err[512] = "";
    scr_tenant *tr = NULL;
    size_t n = 7;
    int rc = scr_parse_tenants(text, size, &tr, &n, err, sizeof err);
    FZ_CHECK(rc == 0 || rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
    if (rc) {
        FZ_CHECK(!tr && n == 0);
        if (rc == TS_ERR_INVAL) fz_check_message(err, sizeof err);
    } else {
        check_tenants(tr, n);
    }
    free(tr);

    scr_model *mr = NULL;
    n = 7;
    err[0] = 0;
    rc = scr_parse_models(text, size, &mr, &n, err, sizeof err);
    FZ_CHECK(rc == 0 || rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
    if (rc) {
        FZ_CHECK(!mr && n == 0);
        if (rc == TS_ERR_INVAL) fz_check_message(err, sizeof err);
    }
    for (size_t i = 0; rc == 0 && i < n && i < 4; i++) {
        check_model(&mr[i]);
        sim_inst inst;
        err[0] = 0;
        int irc = sfl_server_inst(&mr[i], i & 1 ? SCHED_POLICY_FCFS : -1, &inst, err, sizeof err);
        FZ_CHECK(irc == 0 || irc == TS_ERR_INVAL);
        if (irc) fz_check_message(err, sizeof err);
        else simulate(&inst);
    }
    free(mr);
    return 0;
}
