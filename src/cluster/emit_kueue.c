/*
 * emit_kueue.c - the plan as Kueue objects (kueue.x-k8s.io/v1beta2), for
 * clusters where the tenants also run batch GPU jobs (fine-tuning, offline
 * inference) on the fleet the plan serves them from; see emit.h.
 *
 * What the quotas cover. Kueue counts only the workloads it admits: the
 * serving pods of --emit k8s are not among them, so a quota that included
 * their GPUs would admit jobs onto GPUs that are taken, and those jobs
 * would sit pending. The quotas therefore hold only what the plan leaves
 * free and a pod can really request: the GPUs it leaves idle (MIG off, as
 * --emit mig-parted leaves them), by type, resource nvidia.com/gpu, on
 * nodes whose device plugin does not share GPUs. On a node where the plan
 * uses MPS or time-slicing the plugin shares every GPU of the node alike,
 * so nvidia.com/gpu there counts replicas of the serving GPUs too and a job
 * could land on one: those idle GPUs are offered to nobody. Nothing MIG is
 * offered: every GI the plan creates serves, and memory slices without a
 * GI are not a resource a pod can request. The header says what is left
 * out and why.
 *
 * Flavors. One ResourceFlavor per GPU type with free GPUs, selecting nodes
 * by the label tessera.dev/batch-gpus=<type>; the header lists the nodes to
 * label, only those with free GPUs offered, so an admitted job is placed
 * where the free GPUs are (GPU Feature Discovery's product names are not in
 * the catalog, and the plan knows which node has which type).
 *
 * Quotas. A tenant's plan share is the GPUs the plan gives it, in GPU
 * equivalents: for each instance of its worker, the instance's part of its
 * unit (its slice's MPS or time-slice share of the GPU normalised over the
 * GPU's slices, or a GI's SMs over the GPU's, times its MPS share inside
 * the GI normalised over the GI's instances) times the tenant's part of
 * the worker (plan_tenant_share). The free GPUs of a flavor go first to the
 * tier cohorts by the sum of their tenants' plan shares, then inside each
 * cohort to its tenants by theirs, both by largest remainder (ties to the
 * earlier): Kueue counts an extended resource in whole units, so each gets
 * the floor or the ceiling of its share and the quotas add up to exactly
 * the free GPUs. When no tenant is served, every tenant weighs the same.
 *
 * Cohorts and preemption. Tenants of one tier form a cohort
 * (tessera-<tier>) and may borrow what the rest of their cohort leaves
 * idle: borrowingLimit is the cohort's quota of the flavor less their own,
 * written out so the bound is visible. Preemption follows the tier's band:
 *   every band but the   reclaimWithinCohort Any: its quota is its own
 *   last (gold, silver)  again, whoever borrowed it; withinClusterQueue
 *                        LowerPriority;
 *   the last band > 0    Never for both: best effort waits, preempts
 *   (bronze)             nobody.
 * Not LowerPriority for reclaiming: Kueue compares workload priorities, and
 * a job that names no WorkloadPriorityClass has 0, so between the tenants'
 * jobs LowerPriority would mean Never and a tenant could not take back its
 * own quota. tessera emits no WorkloadPriorityClass: all jobs of a queue are
 * one tenant's, and their order is that tenant's to set (withinClusterQueue
 * LowerPriority acts only between classes its jobs name). A tenant of band
 * 0 whose shares round to no GPU anywhere is named in the header: it can
 * only borrow.
 * A tenant's namespace is its name as a DNS-1123 label, refused when that
 * is default or kube-* (Kubernetes' own); its ClusterQueue admits that
 * namespace only, and the LocalQueue tessera-batch in it
 * leads there. Known limits, also in the header: the queues cover GPUs
 * only, so jobs that request CPU or memory need those covered or excluded
 * in Kueue's configuration.
 */
#include "emit.h"
#include "emit_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strbuf.h"

#define KUEUE_QUEUE "tessera-batch" /* the LocalQueue in each tenant's namespace */
#define KUEUE_NODE_LABEL "tessera.dev/batch-gpus" /* on the nodes whose free GPUs the flavors offer */

typedef struct flavor {
    int type;                       /* index into plan.types */
    int units;                      /* free GPUs of that type, on nodes that share none */
} flavor;

typedef struct kueue {
    const plan *p;
    flavor fl[PLAN_MAX_TYPES];      /* in plan.types order */
    size_t n_fl;
    int idle_shared;                /* idle GPUs left out: their node's plugin shares GPUs */
    emit_label *fl_names;           /* owned, [n_fl] */
    emit_label *tenants;            /* owned, [n_tenants] */
    emit_label *tiers;              /* owned, [n_tiers] */
    double *held;                   /* owned, [n_tenants]: the plan's GPUs, in GPU equivalents */
    int *quota;                     /* owned, [n_fl][n_tenants]: free GPUs, apportioned */
    int *cohort;                    /* owned, [n_fl][n_tiers]: the tier's quotas added up */
} kueue;

/* Whether the device plugin of node n shares GPUs: the plan runs MPS or
 * time-slicing on one of them (emit_k8s.c's per-node sharing). */
static int node_shares_gpus(const plan *p, size_t n) {
    const plan_node *nd = &p->nodes[n];
    for (int i = 0; i < nd->n_gpus; i++) {
        int m = p->gpus[nd->first_gpu + (size_t)i].mode;
        if (m == PLAN_GPU_MPS || m == PLAN_GPU_TIMESLICE) return 1;
    }
    return 0;
}

/* Idle GPUs of node n. */
static int node_idle(const plan *p, size_t n) {
    const plan_node *nd = &p->nodes[n];
    int idle = 0;
    for (int i = 0; i < nd->n_gpus; i++) idle += p->gpus[nd->first_gpu + (size_t)i].mode == PLAN_GPU_IDLE;
    return idle;
}

/* Free GPUs by type, from the nodes whose plugin hands out whole GPUs. */
static void find_flavors(kueue *k) {
    const plan *p = k->p;
    int units[PLAN_MAX_TYPES] = {0};
    for (size_t n = 0; n < p->n_nodes; n++) {
        int idle = node_idle(p, n);
        if (!idle) continue;
        if (node_shares_gpus(p, n)) {
            k->idle_shared += idle;
            continue;
        }
        units[p->gpus[p->nodes[n].first_gpu].type] += idle;
    }
    for (size_t t = 0; t < p->n_types; t++)
        if (units[t]) k->fl[k->n_fl++] = (flavor){.type = (int)t, .units = units[t]};
}

/* Add each tenant's part of slice s, which holds gpus of its GPU, to held. */
static void add_slice(kueue *k, const plan_slice *s, double gpus) {
    const plan *p = k->p;
    double pct_sum = 0;
    for (int i = 0; i < s->n_inst; i++) pct_sum += p->insts[s->first_inst + (size_t)i].pct;
    for (int i = 0; i < s->n_inst; i++) {
        const plan_inst *in = &p->insts[s->first_inst + (size_t)i];
        double inst_part = pct_sum > 0 ? in->pct / pct_sum : 1.0 / s->n_inst;
        const plan_worker *w = &p->workers[in->worker];
        for (size_t j = 0; j < w->n_tenants; j++) {
            size_t t = w->tenants[j];
            k->held[t] += gpus * inst_part * plan_tenant_share(p, t);
        }
    }
}

/* The share of the GPU a slice of a whole or shared GPU holds, percent. */
static double slice_pct(const plan_slice *s) { return s->mode == PLAN_MODE_WHOLE ? 100.0 : s->pct; }

/* The part of its GPU a MIG slice holds: its SMs over the GPU's. */
static double gi_part(const plan *p, const plan_slice *s) {
    const gpucat_gpu *type = p->types[p->gpus[s->gpu].type];
    const gpucat_mig *m = gpucat_mig_by_id(type, s->gi_id);
    return m && type->sms > 0 ? (double)m->sms / type->sms : 0;
}

static void find_held(kueue *k) {
    const plan *p = k->p;
    for (size_t g = 0; g < p->n_gpus; g++) {
        const plan_gpu *gpu = &p->gpus[g];
        if (gpu->mode == PLAN_GPU_IDLE) continue;
        double total = 0;
        for (size_t s = 0; s < p->n_slices; s++)
            if (p->slices[s].gpu == (int)g) total += slice_pct(&p->slices[s]);
        for (size_t s = 0; s < p->n_slices; s++) {
            const plan_slice *sl = &p->slices[s];
            if (sl->gpu != (int)g) continue;
            if (gpu->mode == PLAN_GPU_MIG) add_slice(k, sl, gi_part(p, sl));
            else if (total > 0) add_slice(k, sl, slice_pct(sl) / total);
        }
    }
}

/* Largest remainder: units split by weight[0..n) into quota, floors first,
 * then one more unit to each of the largest fractional parts (the earlier
 * on a tie) until the units are given out; all weights 0 splits evenly.
 * The quotas add up to units exactly. */
static void apportion(const double *weight, int units, size_t n, int *quota) {
    if (n == 0) return;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += weight[i];
    int given = 0;
    for (size_t i = 0; i < n; i++) {
        quota[i] = (int)floor(units * (sum > 0 ? weight[i] / sum : 1.0 / n) + 1e-9);
        given += quota[i];
    }
    while (given < units) {
        size_t best = 0;
        double best_frac = -2;
        for (size_t i = 0; i < n; i++) {
            double frac = units * (sum > 0 ? weight[i] / sum : 1.0 / n) - quota[i];
            if (frac > best_frac + 1e-12) {
                best = i;
                best_frac = frac;
            }
        }
        quota[best]++;
        given++;
    }
}

/* Flavor f's free GPUs to the tiers' cohorts, then to each cohort's
 * tenants; w and q are scratch of n_tenants and n_tiers entries. */
static void find_quotas_of(kueue *k, size_t f, double *w, int *q, size_t *idx) {
    const plan_input *in = k->p->in;
    size_t nt = in->n_tenants, nk = in->n_tiers;
    int any = 0;
    for (size_t t = 0; t < nt; t++) any |= k->held[t] > 0;
    for (size_t c = 0; c < nk; c++) {
        w[c] = 0;
        for (size_t t = 0; t < nt; t++)
            if ((size_t)in->tenants[t].tier == c) w[c] += any ? k->held[t] : 1.0;
    }
    apportion(w, k->fl[f].units, nk, &k->cohort[f * nk]);
    for (size_t c = 0; c < nk; c++) {
        size_t m = 0;
        for (size_t t = 0; t < nt; t++)
            if ((size_t)in->tenants[t].tier == c) {
                idx[m] = t;
                w[m++] = any ? k->held[t] : 1.0;
            }
        apportion(w, k->cohort[f * nk + c], m, q);
        for (size_t i = 0; i < m; i++) k->quota[f * nt + idx[i]] = q[i];
    }
}

static int find_quotas(kueue *k) {
    const plan_input *in = k->p->in;
    size_t n = (in->n_tenants > in->n_tiers ? in->n_tenants : in->n_tiers) + 1;
    double *w = malloc(n * sizeof *w);
    int *q = malloc(n * sizeof *q);
    size_t *idx = malloc(n * sizeof *idx);
    if (w && q && idx)
        for (size_t f = 0; f < k->n_fl; f++) find_quotas_of(k, f, w, q, idx);
    int rc = w && q && idx ? 0 : TS_ERR_NOMEM;
    free(w);
    free(q);
    free(idx);
    return rc;
}

/* ---- rendering ----------------------------------------------------------------- */

static int free_units(const kueue *k) {
    int n = 0;
    for (size_t f = 0; f < k->n_fl; f++) n += k->fl[f].units;
    return n;
}

/* A tenant of band 0 whose shares round to no free GPU of any flavor: it
 * has no quota of its own, only what its cohort lends. */
static void gold_without_quota(const kueue *k, strbuf *b) {
    const plan_input *in = k->p->in;
    for (size_t t = 0; t < in->n_tenants; t++) {
        const plan_tier *tier = &in->tiers[in->tenants[t].tier];
        int own = 0;
        for (size_t f = 0; f < k->n_fl; f++) own += k->quota[f * in->n_tenants + t];
        if (tier->band != 0 || own) continue;
        strbuf_printf(b,
                      "# NOTE tenant %s (tier %s, band 0) gets no GPU of its own: its plan share, %.2f GPUs,\n"
                      "#   rounds to 0 of the free GPUs. It can only borrow from its cohort tessera-%s.\n",
                      in->tenants[t].name, tier->name, k->held[t], k->tiers[in->tenants[t].tier]);
    }
}

static void kueue_header(const kueue *k, strbuf *b) {
    const plan *p = k->p;
    int n_free = free_units(k);
    strbuf_printf(b,
                  "# tessera plan: Kueue objects for the tenants' batch GPU jobs beside the planned serving.\n"
                  "# Kueue does not count the serving pods, so the quotas hold only the GPUs the plan leaves\n"
                  "# free: %d idle GPU%s (nvidia.com/gpu, MIG off), split among the tiers' cohorts and then\n"
                  "# their tenants by their share of the plan, in whole units (largest remainder); a tenant may\n"
                  "# borrow what its cohort leaves idle. Jobs go to the LocalQueue " KUEUE_QUEUE " in the\n"
                  "# tenant's namespace (create the namespaces first).\n"
                  "# Not offered: the MIG instances (all of them serve; memory slices without a GI cannot be\n"
                  "# requested)",
                  n_free, n_free == 1 ? "" : "s");
    if (k->idle_shared)
        strbuf_printf(b,
                      "; %d idle GPU%s on nodes whose device plugin shares GPUs (MPS or\n"
                      "# time-slicing: nvidia.com/gpu there counts replicas of the serving GPUs too)",
                      k->idle_shared, k->idle_shared == 1 ? "" : "s");
    strbuf_printf(b, ".\n# Limits: the queues cover GPUs only, so jobs that request cpu or memory need them covered,\n"
                     "# or excluded in Kueue's configuration (resources.excludeResourcePrefixes).\n");
    if (!k->n_fl) {
        strbuf_printf(b, "# NOTE the plan leaves no GPU free: the queues admit nothing until it does.\n");
        return;
    }
    gold_without_quota(k, b);
    strbuf_printf(b, "# Label the nodes with free GPUs so the flavors find them (only these: a job placed elsewhere\n"
                     "# would wait for a serving GPU):\n");
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!node_idle(p, n) || node_shares_gpus(p, n)) continue;
        char type[PLAN_NAME_MAX];
        plan_dns_label(type, sizeof type, p->in->pools[p->nodes[n].pool].gpu->name);
        strbuf_printf(b, "#   kubectl label node %s " KUEUE_NODE_LABEL "=%s    # %d free\n", p->nodes[n].name, type,
                      node_idle(p, n));
    }
}

static void kueue_flavor(const kueue *k, size_t f, strbuf *b) {
    const flavor *fl = &k->fl[f];
    char type[PLAN_NAME_MAX];
    plan_dns_label(type, sizeof type, k->p->types[fl->type]->name);
    strbuf_printf(b,
                  "---\n# nvidia.com/gpu: %d %s GPU%s the plan leaves free\napiVersion: kueue.x-k8s.io/v1beta2\n"
                  "kind: ResourceFlavor\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: tessera\n"
                  "spec:\n  nodeLabels:\n    " KUEUE_NODE_LABEL ": %s\n",
                  fl->units, k->p->types[fl->type]->name, fl->units == 1 ? "" : "s", k->fl_names[f], type);
}

static void cq_preemption(const plan_input *in, const plan_tier *tier, strbuf *b) {
    const char *reclaim = "Any", *within = "LowerPriority";
    if (tier->band > 0 && tier->band == emit_last_band(in)) reclaim = within = "Never";
    strbuf_printf(b, "  preemption:\n    reclaimWithinCohort: %s\n    withinClusterQueue: %s\n", reclaim, within);
}

/* The resource group of tenant t: the flavors its cohort has quota of. */
static void cq_groups(const kueue *k, size_t t, strbuf *b) {
    const plan_input *in = k->p->in;
    size_t nt = in->n_tenants, tier = (size_t)in->tenants[t].tier;
    int open = 0;
    for (size_t f = 0; f < k->n_fl; f++) {
        int cohort = k->cohort[f * in->n_tiers + tier], own = k->quota[f * nt + t];
        if (cohort == 0) continue;
        if (!open)
            strbuf_printf(b, "  resourceGroups:\n    - coveredResources:\n        - nvidia.com/gpu\n      flavors:\n");
        open = 1;
        strbuf_printf(b,
                      "        - name: %s\n          resources:\n            - name: nvidia.com/gpu\n"
                      "              nominalQuota: %d\n              borrowingLimit: %d\n",
                      k->fl_names[f], own, cohort - own);
    }
}

static void kueue_tenant(const kueue *k, size_t t, strbuf *b) {
    const plan_input *in = k->p->in;
    const plan_tenant *tn = &in->tenants[t];
    const plan_tier *tier = &in->tiers[tn->tier];
    const char *ns = k->tenants[t];
    strbuf_printf(b, "---\n# tenant %s: tier %s (band %d); plan share %.2f GPUs; free GPUs:", tn->name, tier->name,
                  tier->band, k->held[t]);
    for (size_t f = 0; f < k->n_fl; f++) strbuf_printf(b, " %s %d;", k->fl_names[f], k->quota[f * in->n_tenants + t]);
    strbuf_printf(b, "%s\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: tessera-%s\n"
                     "  labels:\n    app.kubernetes.io/name: tessera\n    tessera.dev/tenant: %s\nspec:\n"
                     "  cohortName: tessera-%s\n  namespaceSelector:\n    matchLabels:\n"
                     "      kubernetes.io/metadata.name: %s\n",
                  k->n_fl ? "" : " none", ns, ns, k->tiers[tn->tier], ns);
    cq_preemption(in, tier, b);
    cq_groups(k, t, b);
    strbuf_printf(b,
                  "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: " KUEUE_QUEUE "\n"
                  "  namespace: %s\n  labels:\n    app.kubernetes.io/name: tessera\nspec:\n"
                  "  clusterQueue: tessera-%s\n",
                  ns, ns);
}

/* ---- entry point --------------------------------------------------------------- */

static void kueue_free(kueue *k) {
    free(k->fl_names);
    free(k->tenants);
    free(k->tiers);
    free(k->held);
    free(k->quota);
    free(k->cohort);
}

/* A tenant's namespace must not be one of Kubernetes' own: `default`
 * holds whatever names no namespace, and kube-* (kube-system, kube-public,
 * kube-node-lease) the cluster's own; a tenant's batch queue there would
 * admit jobs nobody meant as the tenant's. Returns 0 or TS_ERR_INVAL. */
static int tenant_namespaces_ok(const kueue *k, emit_out *out) {
    const plan_input *in = k->p->in;
    for (size_t t = 0; t < in->n_tenants; t++) {
        const char *ns = k->tenants[t];
        if (strcmp(ns, "default") != 0 && strncmp(ns, "kube-", 5) != 0) continue;
        snprintf(out->why, sizeof out->why,
                 "tenant '%.60s' would have the namespace '%.60s', which Kubernetes keeps for itself (default, "
                 "kube-*): rename the tenant",
                 in->tenants[t].name, ns);
        return TS_ERR_INVAL;
    }
    return 0;
}

static int kueue_names(kueue *k, emit_out *out) {
    const plan_input *in = k->p->in;
    int rc = emit_tenant_labels(k->p, &k->tenants, out);
    if (!rc) rc = tenant_namespaces_ok(k, out);
    if (rc) return rc;
    size_t n = in->n_tiers > k->n_fl ? in->n_tiers : k->n_fl;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return TS_ERR_NOMEM;
    for (size_t t = 0; t < in->n_tiers; t++) names[t] = in->tiers[t].name;
    rc = emit_labels("tier", names, in->n_tiers, &k->tiers, out);
    for (size_t f = 0; !rc && f < k->n_fl; f++) names[f] = k->p->types[k->fl[f].type]->name;
    if (!rc) rc = emit_labels("GPU flavor", names, k->n_fl, &k->fl_names, out);
    free(names);
    return rc;
}

static int kueue_build(kueue *k, emit_out *out) {
    find_flavors(k);
    int rc = kueue_names(k, out);
    if (rc) return rc;
    size_t nt = k->p->in->n_tenants, nf = k->n_fl ? k->n_fl : 1;
    k->held = calloc(nt ? nt : 1, sizeof *k->held);
    k->quota = calloc(nf * (nt ? nt : 1), sizeof *k->quota);
    k->cohort = calloc(nf * (k->p->in->n_tiers ? k->p->in->n_tiers : 1), sizeof *k->cohort);
    if (!k->held || !k->quota || !k->cohort) return TS_ERR_NOMEM;
    find_held(k);
    return find_quotas(k);
}

int emit_kueue(const plan *p, emit_out *out) {
    kueue k;
    memset(&k, 0, sizeof k);
    k.p = p;
    int rc = kueue_build(&k, out);
    strbuf b = STRBUF_INIT;
    if (!rc) {
        kueue_header(&k, &b);
        for (size_t f = 0; f < k.n_fl; f++) kueue_flavor(&k, f, &b);
        for (size_t t = 0; t < p->in->n_tenants; t++) kueue_tenant(&k, t, &b);
    }
    kueue_free(&k);
    if (rc) {
        strbuf_free(&b);
        return rc;
    }
    return emit_add_file(out, &b, "kueue.yaml");
}
