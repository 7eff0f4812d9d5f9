/*
 * fuzz_plan.c - the planner's input (cluster/planio.c over util/ydoc.c),
 * and, when it is small enough to plan quickly, the plan and everything
 * emitted from it (cluster/plan.c, pack.c, mig.c, emit.c).
 *
 * Checks planio.h's promises (a refused input leaves the plan_input empty,
 * the message is one line) and two of the emitters': the json report
 * parses as JSON, and a `--emit serve` configuration loads with the
 * server's own cfg_load when every tenant brought its key (planio.h: the
 * configurations --emit serve writes load as they are).
 * The search is bounded so one input stays fast: at most 64 GPUs, 16
 * tenants, 4 replicas, an exact search of at most 8 slices and 5000 nodes.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "emit.h"
#include "err.h"
#include "plan.h"
#include "planio.h"

static void check_emits(const plan_input *in, const plan *p) {
    int keyed = 1;
    for (size_t i = 0; i < in->n_tenants; i++) keyed &= in->tenants[i].key_sha256[0] != 0;
    for (int kind = 0; kind < EMIT_KINDS; kind++) {
        emit_out o;
        memset(&o, 0, sizeof o);
        int rc = emit_run(p, kind, &o);
        /* Kubernetes names: tenant or tier names that clash as DNS-1123
         * labels are refused, and the refusal says why in one line. */
        if (rc == TS_ERR_INVAL && (kind == EMIT_GIE || kind == EMIT_KUEUE)) {
            fz_check_message(o.why, sizeof o.why);
            continue;
        }
        FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
        for (size_t i = 0; rc == 0 && i < o.n; i++) {
            const emit_file *f = &o.files[i];
            FZ_CHECK(f->data && strlen(f->data) == f->len);
            if (kind == EMIT_JSON) {
                cJSON *j = cJSON_ParseWithLength(f->data, f->len);
                FZ_CHECK(j != NULL);
                cJSON_Delete(j);
            }
            if (kind == EMIT_SERVE && keyed) {
                cfg c;
                char err[512];
                int lrc = cfg_load(fz_file((const uint8_t *)f->data, f->len), &c, err, sizeof err);
                if (lrc) fprintf(stderr, "emitted serve config does not load: %s\n%s\n", err, f->data);
                FZ_CHECK(lrc == 0);
                cfg_free(&c);
            }
        }
        emit_out_free(&o);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    plan_input in;
    char err[512];
    int rc = planio_parse((const char *)data, size, "fuzz.yaml", &in, err, sizeof err);
    if (rc < 0) {
        FZ_CHECK(rc == TS_ERR_CONFIG || rc == TS_ERR_NOMEM);
        FZ_CHECK(in.n_pools == 0 && in.n_models == 0 && in.n_tiers == 0 && in.n_tenants == 0);
        FZ_CHECK(!in.pools && !in.models && !in.tiers && !in.tenants);
        fz_check_message(err, sizeof err);
        return 0;
    }
    long gpus = 0;
    for (size_t i = 0; i < in.n_pools; i++) gpus += (long)in.pools[i].gpus_per_node * in.pools[i].nodes;
    if (gpus <= 64 && in.n_tenants <= 16) {
        if (in.max_replicas > 4) in.max_replicas = 4;
        if (in.exact_limit > 8) in.exact_limit = 8;
        if (in.exact_budget > 5000) in.exact_budget = 5000;
        plan p;
        rc = plan_build(&in, &p);
        FZ_CHECK(rc == 0 || rc == TS_ERR_NOMEM);
        if (rc == 0) {
            check_emits(&in, &p);
            plan_free(&p);
        }
    }
    plan_input_free(&in);
    return 0;
}
