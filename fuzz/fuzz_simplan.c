/*
 * fuzz_simplan.c - a plan as `tessera sim --plan PLAN.json` reads it: the
 * planner's JSON report, which planjson.h invites people to store, review
 * and edit by hand (cluster/planjson.c), then the simulator's fleet made
 * from it (sim/fleet.c) and, when small, a short simulation of its planned
 * load (sim/sim.c, core/).
 *
 * Checks planjson.h's promises: a refused report leaves the input and the
 * plan empty, with a one-line message; an accepted one emits a json report
 * that reads back, and emitting that gives the same bytes (the report is a
 * fixed point once read: nothing is lost or re-derived differently). A fleet
 * is made or refused with a message; a simulation of at most 8 instances,
 * 16 tenants and a few hundred planned requests runs to its end, and every
 * arrival is accounted for once (served, limited, rejected or unserved).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "emit.h"
#include "err.h"
#include "fleet.h"
#include "plan.h"
#include "planjson.h"
#include "sim.h"

#define SIM_S 2.0          /* simulated seconds of planned load */
#define MAX_ARRIVALS 400.0 /* expected arrivals in them, at most */

static void check_empty(const plan_input *in, const plan *p) {
    FZ_CHECK(in->n_pools == 0 && in->n_models == 0 && in->n_tiers == 0 && in->n_tenants == 0);
    FZ_CHECK(!in->pools && !in->models && !in->tiers && !in->tenants);
    FZ_CHECK(p->n_nodes == 0 && p->n_gpus == 0 && p->n_workers == 0 && p->n_slices == 0 && p->n_insts == 0);
    FZ_CHECK(!p->nodes && !p->gpus && !p->workers && !p->slices && !p->insts && !p->results);
}

/* The json report of p, malloc'd (NULL: out of memory). */
static char *report_of(const plan *p, size_t *len) {
    emit_out o;
    memset(&o, 0, sizeof o);
    int rc = emit_run(p, EMIT_JSON, &o);
    FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
    char *text = NULL;
    if (rc == 0) {
        FZ_CHECK(o.n == 1 && o.files[0].data && strlen(o.files[0].data) == o.files[0].len);
        if ((text = malloc(o.files[0].len + 1))) memcpy(text, o.files[0].data, o.files[0].len + 1);
        *len = o.files[0].len;
    }
    emit_out_free(&o);
    return text;
}

/* Read back what p emits: the same report again. */
static void check_fixed_point(const plan *p) {
    size_t len1 = 0, len2 = 0;
    char *r1 = report_of(p, &len1);
    if (!r1) return;
    plan_input in2;
    plan p2;
    char err[512] = "";
    int rc = planjson_read(r1, len1, &in2, &p2, err, sizeof err);
    if (rc) fprintf(stderr, "an emitted report does not read back: %s\n%s\n", err, r1);
    FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
    if (rc == 0) {
        char *r2 = report_of(&p2, &len2);
        if (r2 && (len1 != len2 || memcmp(r1, r2, len1))) fprintf(stderr, "first:\n%s\nagain:\n%s\n", r1, r2);
        FZ_CHECK(!r2 || (len1 == len2 && memcmp(r1, r2, len1) == 0));
        free(r2);
        plan_free(&p2);
        plan_input_free(&in2);
    }
    free(r1);
}

typedef struct source {
    arr_stream *st;
    uint64_t n;
} source;

static int source_next(void *ctx, arr_event *ev) {
    source *s = ctx;
    int rc = arr_stream_next(s->st, ev);
    s->n += rc == 1;
    return rc;
}

/* Every arrival ends once: the report's requests plus those turned away
 * before the scheduler are the arrivals. */
static void check_accounting(const sim_result *r, uint64_t arrivals) {
    FZ_CHECK(r->requests == arrivals);
    FZ_CHECK((uint64_t)r->report.due == arrivals && (uint64_t)r->report.sent == arrivals);
    int64_t due = 0;
    for (int t = 0; t < r->report.n_tenants; t++) due += r->report.t[t].due;
    FZ_CHECK((uint64_t)due == arrivals);
}

/* Small enough to simulate here: few instances and tenants, few arrivals,
 * and schedulers within the fuzzer's memory limit (a scheduler's block
 * tables are its request slots x a request's blocks; a real fleet's are
 * mostly untouched virtual memory, which the limit counts). */
static int small(const plan_input *in, const sfl *f) {
    double rate = 0;
    for (size_t t = 0; t < in->n_tenants; t++) rate += in->tenants[t].load.rps;
    if (f->f.n_insts > 8 || f->f.n_tenants > 16 || !(rate * SIM_S <= MAX_ARRIVALS)) return 0;
    for (int i = 0; i < f->f.n_insts; i++) {
        const sched_config *c = &f->insts[i].sc;
        int64_t per_req = ((int64_t)c->max_ctx + c->block_size - 1) / c->block_size;
        if (per_req > c->n_blocks) per_req = c->n_blocks;
        if (c->n_blocks > (1 << 20) || c->n_swap_blocks > (1 << 22) || per_req > 4096) return 0;
    }
    return 1;
}

static void simulate(const plan_input *in, const sfl *f) {
    if (!small(in, f)) return;
    scn load, rs;
    if (sfl_load_scn(in, 1.0, 0.5, SIM_S, &load)) return;
    if (sfl_report_scn(f, &rs)) {
        scn_free(&load);
        return;
    }
    char err[512] = "";
    source src = {0};
    if (arr_stream_open(&src.st, &load, 1, SIM_S, 0, err, sizeof err) == 0) {
        sim_opts o = {.route = SIM_ROUTE_LEAST, .until_s = SIM_S, .drain_s = 1.0, .seed = 1, .threads = 1};
        sim_result r;
        sim_source s = {source_next, &src};
        int rc = sim_run(&f->f, &rs, &s, &o, &r, err, sizeof err);
        if (rc == TS_ERR_INVAL) fz_check_message(err, sizeof err);
        FZ_CHECK(rc == 0 || rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        if (rc == 0) {
            check_accounting(&r, src.n);
            sim_result_free(&r);
        }
        arr_stream_close(src.st);
    }
    scn_free(&rs);
    scn_free(&load);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    plan_input in;
    plan p;
    char err[512] = "";
    int rc = planjson_read((const char *)data, size, &in, &p, err, sizeof err);
    if (rc) {
        FZ_CHECK(rc == TS_ERR_CONFIG || rc == TS_ERR_NOMEM);
        check_empty(&in, &p);
        if (rc == TS_ERR_CONFIG) fz_check_message(err, sizeof err);
        return 0;
    }
    check_fixed_point(&p);
    for (int policy = 0; policy < 2; policy++) {
        sfl f;
        err[0] = 0;
        rc = sfl_from_plan(&p, policy ? SCHED_POLICY_FCFS : SCHED_POLICY_FAIR, &f, err, sizeof err);
        if (rc == TS_ERR_INVAL) fz_check_message(err, sizeof err);
        FZ_CHECK(rc == 0 || rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        if (rc) break;
        simulate(&in, &f);
        sfl_free(&f);
    }
    plan_free(&p);
    plan_input_free(&in);
    return 0;
}
