/*
 * emit_gie.c - the plan as Gateway API Inference Extension (GIE) objects,
 * and the Kubernetes names the cluster emitters give tenants; see emit.h.
 *
 * A worker is one model server pool: its replicas run the same model for
 * the same tenants, so one InferencePool (inference.networking.k8s.io/v1)
 * selects them by the labels --emit k8s puts on its pods
 * (app.kubernetes.io/name: tessera, tessera.dev/worker: <worker>) and sends
 * every request through that pool's endpoint picker (EPP), reached as the
 * Service the inferencepool Helm chart of GIE gives the EPP of a release
 * named tessera-<worker>: that name cut to 40 characters, then "-epp". A tenant is one
 * InferenceObjective (inference.networking.x-k8s.io/v1alpha2) on its
 * worker's pool, with its tier as priority (gie_priority): the EPP of GIE
 * v1.0 sheds a request of priority < 0 when its pool is saturated and keeps
 * the rest, so the last (best-effort) band is -1 and every band above it
 * >= 0, the tier of band 0 highest. A request that names no objective gets
 * 0: it ranks with the lowest paying tier, above best effort. Priorities
 * compare only among the objectives of one pool. Field names and versions
 * follow the CRDs vendored in tests/data/crds/.
 */
#include "emit.h"
#include "emit_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strbuf.h"

/* ---- Kubernetes names --------------------------------------------------------- */

static int has_alnum(const char *s) {
    for (; *s; s++)
        if (isalnum((unsigned char)*s)) return 1;
    return 0;
}

int emit_labels(const char *what, const char *const *names, size_t n, emit_label **labels, emit_out *out) {
    emit_label *l = calloc(n ? n : 1, sizeof *l);
    if (!l) return TS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        /* plan_dns_label would make "w" of "..."; a name nobody chose is
         * worse than a refusal that says which one to rename. */
        if (!has_alnum(names[i])) {
            snprintf(out->why, sizeof out->why,
                     "%s '%s' has no letter or digit to make a Kubernetes name of: rename it", what, names[i]);
            free(l);
            return TS_ERR_INVAL;
        }
        plan_dns_label(l[i], sizeof l[i], names[i]);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(l[i], l[j]) != 0) continue;
            snprintf(out->why, sizeof out->why,
                     "%ss '%s' and '%s' both become '%s' as Kubernetes names (lower case, '-' for anything but "
                     "letters and digits): rename one",
                     what, names[j], names[i], l[i]);
            free(l);
            return TS_ERR_INVAL;
        }
    }
    *labels = l;
    return 0;
}

int emit_tenant_labels(const plan *p, emit_label **labels, emit_out *out) {
    size_t n = p->in->n_tenants;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return TS_ERR_NOMEM;
    for (size_t t = 0; t < n; t++) names[t] = p->in->tenants[t].name;
    int rc = emit_labels("tenant", names, n, labels, out);
    free(names);
    return rc;
}

int emit_worker_placed(const plan *p, const plan_worker *w) {
    for (int k = 0; k < w->replicas; k++)
        if (emit_inst_gpu(p, &p->insts[w->first_inst + (size_t)k])) return 1;
    return 0;
}

/* ---- GIE ---------------------------------------------------------------------- */

/* Band b of last + 1 bands as an InferenceObjective priority: last - 1 - b,
 * so gold is highest and best effort -1 (sheddable); a single tier is 0,
 * it is nobody's best effort. */
static int gie_priority(int band, int last) { return last > 0 ? last - 1 - band : 0; }

static void gie_header(strbuf *b) {
    strbuf_printf(b,
                  "# tessera plan: Gateway API Inference Extension objects.\n"
                  "# Apply them in the namespace of the tessera pods (--emit k8s): a pool selects pods of its\n"
                  "# own namespace only. Each InferencePool is one worker's replicas; its endpoint picker is the\n"
                  "# Service that GIE's inferencepool Helm chart creates for a release named tessera-<worker>:\n"
                  "# tessera-<worker>-epp, the release name cut to 40 characters before -epp (docs/deploy-gie.md\n"
                  "# gives the values). Each InferenceObjective is a tenant: its requests name it in the\n"
                  "# x-gateway-inference-objective header, and its priority is its tier's, compared among the\n"
                  "# objectives of one pool: higher first; the best-effort tier is -1, which the picker sheds\n"
                  "# when the pool is saturated; a request naming no objective is 0.\n");
}

#define GIE_RELEASE_MAX 53          /* characters of a Helm release name */
#define GIE_EPP_BASE_MAX 40         /* the chart's EPP Service: the release name cut to 40, then "-epp" */

/* FailOpen: tessera enforces each tenant's limits and fair share inside the
 * worker, so routing without the picker loses balance, not isolation. */
static void gie_pool(const plan *p, const plan_worker *w, strbuf *b) {
    char pool[sizeof w->name + 8];
    snprintf(pool, sizeof pool, "tessera-%s", w->name);
    strbuf_printf(b, "---\n# worker %s: model %s, %d replica%s, tenants:", w->name, p->in->models[w->model].name,
                  w->replicas, w->replicas == 1 ? "" : "s");
    for (size_t k = 0; k < w->n_tenants; k++) strbuf_printf(b, " %s", p->in->tenants[w->tenants[k]].name);
    strbuf_printf(b,
                  "\napiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n"
                  "  name: tessera-%s\n  labels:\n    app.kubernetes.io/name: tessera\n    tessera.dev/worker: %s\n"
                  "spec:\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: tessera\n"
                  "      tessera.dev/worker: %s\n  targetPorts:\n    - number: %d\n  endpointPickerRef:\n"
                  "    name: %.*s-epp\n    port:\n      number: %d\n    failureMode: FailOpen\n",
                  w->name, w->name, w->name, EMIT_SERVE_PORT, GIE_EPP_BASE_MAX, pool, EMIT_EPP_PORT);
}

static void gie_objective(const plan *p, size_t t, const char *label, strbuf *b) {
    const plan_tenant *tn = &p->in->tenants[t];
    const plan_tier *tier = &p->in->tiers[tn->tier];
    const plan_worker *w = &p->workers[p->results[t].worker];
    strbuf_printf(b,
                  "---\n# tenant %s: tier %s (band %d)\napiVersion: inference.networking.x-k8s.io/v1alpha2\n"
                  "kind: InferenceObjective\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: tessera\n"
                  "    tessera.dev/tenant: %s\nspec:\n  poolRef:\n    group: inference.networking.k8s.io\n"
                  "    kind: InferencePool\n    name: tessera-%s\n  priority: %d\n",
                  tn->name, tier->name, tier->band, label, label, w->name,
                  gie_priority(tier->band, emit_last_band(p->in)));
}

/* Whether "tessera-<name>" is a Helm release name (the inferencepool chart
 * is installed once per pool under the pool's name; Helm takes at most 53
 * characters), the EPP Service name made of it a DNS-1035 label, and name a
 * label value. plan_build's worker names are labels but may be longer; a
 * plan read back from JSON (planjson.h) need not be a label at all. */
static int worker_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > GIE_RELEASE_MAX - strlen("tessera-") || name[0] == '-' || name[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '-') return 0;
    return 1;
}

int emit_gie(const plan *p, emit_out *out) {
    for (size_t w = 0; w < p->n_workers; w++) {
        if (worker_name_ok(p->workers[w].name)) continue;
        snprintf(out->why, sizeof out->why,
                 "worker '%.60s' cannot name an InferencePool: tessera-<worker> must be a Helm release name "
                 "(%d characters at most, lower case, digits, '-'); shorten its tenant or model names",
                 p->workers[w].name, GIE_RELEASE_MAX);
        return TS_ERR_INVAL;
    }
    emit_label *labels = NULL;
    int rc = emit_tenant_labels(p, &labels, out);
    if (rc) return rc;
    strbuf b = STRBUF_INIT;
    gie_header(&b);
    for (size_t w = 0; w < p->n_workers; w++) {
        const plan_worker *pw = &p->workers[w];
        if (emit_worker_placed(p, pw)) gie_pool(p, pw, &b);
        else strbuf_printf(&b, "# worker %s has no placed instance: no pool\n", pw->name);
    }
    for (size_t t = 0; t < p->in->n_tenants; t++) {
        int w = p->results[t].worker;
        if (w >= 0 && emit_worker_placed(p, &p->workers[w])) gie_objective(p, t, labels[t], &b);
        else strbuf_printf(&b, "# tenant %s is not served by this plan: no objective\n", p->in->tenants[t].name);
    }
    free(labels);
    return emit_add_file(out, &b, "gie.yaml");
}
