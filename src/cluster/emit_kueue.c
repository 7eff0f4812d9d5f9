/*
 * emit_kueue.c - the plan as Kueue objects (kueue.x-k8s.io/v1beta2), for
 * clusters where the tenants also run batch GPU jobs (fine-tuning, offline
 * inference) on the GPUs the plan serves them from; see emit.h.
 *
 * Flavors. One ResourceFlavor per GPU type whose GPUs the plan uses whole
 * or shared (MPS, time-slicing): resource nvidia.com/gpu; and one per GPU
 * type and MIG profile it places: resource nvidia.com/mig-<profile> (the
 * device plugin's mixed strategy). Both select nodes by the label
 * tessera.dev/gpu-type=<type>, which the file's header says how to set:
 * GPU Feature Discovery's product names are not in the catalog, and the
 * plan already knows which node has which type.
 *
 * Quotas. A tenant's share of a unit (a used GPU, or a placed MIG instance)
 * is its part of the work that unit runs: for each instance on it, the
 * instance's part of the unit (its slice's MPS or time-slice share of the
 * GPU, or its MPS share inside the GI, normalised over the unit's
 * instances, so idle remainders go to those who share the unit) times the
 * tenant's part of the instance's worker (plan_tenant_share). Shares are
 * fractions, but Kueue counts an extended resource in whole units (it
 * rounds a fraction up), so the shares of each flavor are apportioned by
 * largest remainder (ties to the earlier tenant): each tenant gets the
 * floor or the ceiling of its share and the nominal quotas of a flavor
 * add up to exactly its units, never more.
 *
 * Cohorts and preemption. Tenants of one tier form a cohort
 * (tessera-<tier>) and may borrow what the rest of their cohort leaves
 * idle: borrowingLimit is the cohort's quota of the flavor less their own,
 * written out so the bound is visible. Preemption follows the tier's band:
 *   band 0 (gold)        reclaimWithinCohort Any, withinClusterQueue
 *                        LowerPriority: its quota is always its own again;
 *   middle bands         LowerPriority for both: reclaim and preempt only
 *                        lower priorities;
 *   the last band > 0    Never for both: best effort waits, preempts
 *   (bronze)             nobody.
 * A tenant's namespace is its name as a DNS-1123 label; its ClusterQueue
 * admits that namespace only, and the LocalQueue tessera-batch in it
 * leads there. Known limits, also in the header: on nodes whose device
 * plugin shares GPUs (MPS or time-slicing replicas) nvidia.com/gpu counts
 * replicas, not GPUs; the queues cover GPUs only, so jobs that request CPU
 * or memory need those covered or excluded in Kueue's configuration.
 */
#include "emit.h"
#include "emit_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strbuf.h"

#define KUEUE_MAX_GROUPS 16         /* resource groups of one ClusterQueue (the CRD's maxItems) */
#define KUEUE_QUEUE "tessera-batch" /* the LocalQueue in each tenant's namespace */

typedef struct flavor {
    int type;                       /* index into plan.types */
    const char *profile;            /* MIG profile, NULL = whole or shared GPUs */
    char resource[64];              /* "nvidia.com/gpu", "nvidia.com/mig-3g.40gb" */
    char raw[96];                   /* "A100-80GB", "A100-80GB-3g.40gb": what its name is made from */
    int units;                      /* GPUs or MIG instances of the plan it holds */
} flavor;

typedef struct kueue {
    const plan *p;
    flavor *fl;                     /* owned, sorted: whole GPUs first, then by resource, then type */
    size_t n_fl;
    emit_label *fl_names;           /* owned, [n_fl] */
    emit_label *tenants;            /* owned, [n_tenants] */
    emit_label *tiers;              /* owned, [n_tiers] */
    double *share;                  /* owned, [n_fl][n_tenants]: units, fractional */
    int *quota;                     /* owned, [n_fl][n_tenants]: units, apportioned */
    int *cohort;                    /* owned, [n_fl][n_tiers]: the tier's quotas added up */
} kueue;

static int is_mig_slice(const plan_slice *s) { return s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS; }

static int gpu_whole_or_shared(const plan_gpu *g) {
    return g->mode == PLAN_GPU_MPS || g->mode == PLAN_GPU_TIMESLICE || g->mode == PLAN_GPU_WHOLE;
}

/* The flavor of (type, profile), or -1. Profiles compare by pointer: both
 * come from the catalog's one table. */
static int flavor_find(const kueue *k, int type, const char *profile) {
    for (size_t f = 0; f < k->n_fl; f++)
        if (k->fl[f].type == type && k->fl[f].profile == profile) return (int)f;
    return -1;
}

static int flavor_add(kueue *k, int type, const char *profile) {
    int f = flavor_find(k, type, profile);
    if (f < 0) {
        flavor *a = realloc(k->fl, (k->n_fl + 1) * sizeof *a);
        if (!a) return TS_ERR_NOMEM;
        k->fl = a;
        flavor *n = &a[k->n_fl];
        memset(n, 0, sizeof *n);
        n->type = type;
        n->profile = profile;
        const char *tname = k->p->types[type]->name;
        if (profile) {
            snprintf(n->resource, sizeof n->resource, "nvidia.com/mig-%s", profile);
            snprintf(n->raw, sizeof n->raw, "%s-%s", tname, profile);
        } else {
            snprintf(n->resource, sizeof n->resource, "nvidia.com/gpu");
            snprintf(n->raw, sizeof n->raw, "%s", tname);
        }
        f = (int)k->n_fl++;
    }
    k->fl[f].units++;
    return 0;
}

static int flavor_cmp(const void *a, const void *b) {
    const flavor *x = a, *y = b;
    if (!x->profile != !y->profile) return x->profile ? 1 : -1;
    int c = strcmp(x->resource, y->resource);
    return c ? c : x->type - y->type;
}

/* The profile name of a MIG slice, from the catalog (stable pointer). */
static const char *slice_profile(const plan *p, const plan_slice *s) {
    const plan_gpu *g = &p->gpus[s->gpu];
    const gpucat_mig *m = gpucat_mig_by_id(p->types[g->type], s->gi_id);
    return m ? m->name : NULL;
}

/* Every unit the plan uses, counted into its flavor. */
static int find_flavors(kueue *k) {
    const plan *p = k->p;
    for (size_t g = 0; g < p->n_gpus; g++) {
        const plan_gpu *gpu = &p->gpus[g];
        if (gpu_whole_or_shared(gpu)) {
            int rc = flavor_add(k, gpu->type, NULL);
            if (rc) return rc;
            continue;
        }
        for (size_t s = 0; s < p->n_slices; s++) {
            const plan_slice *sl = &p->slices[s];
            if (sl->gpu != (int)g || !is_mig_slice(sl)) continue;
            const char *prof = slice_profile(p, sl);
            if (!prof) return TS_ERR_INVAL;
            int rc = flavor_add(k, gpu->type, prof);
            if (rc) return rc;
        }
    }
    if (k->n_fl) qsort(k->fl, k->n_fl, sizeof *k->fl, flavor_cmp);
    return 0;
}

/* Add each tenant's part of slice s, of which the slice holds part of its
 * unit (1 for a GI; its share of the GPU among the GPU's slices), to the
 * shares of flavor f. */
static void add_slice(kueue *k, int f, const plan_slice *s, double part) {
    const plan *p = k->p;
    size_t nt = p->in->n_tenants;
    double pct_sum = 0;
    for (int i = 0; i < s->n_inst; i++) pct_sum += p->insts[s->first_inst + (size_t)i].pct;
    for (int i = 0; i < s->n_inst; i++) {
        const plan_inst *in = &p->insts[s->first_inst + (size_t)i];
        double inst_part = pct_sum > 0 ? in->pct / pct_sum : 1.0 / s->n_inst;
        const plan_worker *w = &p->workers[in->worker];
        for (size_t j = 0; j < w->n_tenants; j++) {
            size_t t = w->tenants[j];
            k->share[(size_t)f * nt + t] += part * inst_part * plan_tenant_share(p, t);
        }
    }
}

/* The share of the GPU a slice of a whole or shared GPU holds, percent. */
static double slice_pct(const plan_slice *s) { return s->mode == PLAN_MODE_WHOLE ? 100.0 : s->pct; }

static void find_shares(kueue *k) {
    const plan *p = k->p;
    for (size_t g = 0; g < p->n_gpus; g++) {
        const plan_gpu *gpu = &p->gpus[g];
        if (gpu_whole_or_shared(gpu)) {
            int f = flavor_find(k, gpu->type, NULL);
            double total = 0;
            for (size_t s = 0; s < p->n_slices; s++)
                if (p->slices[s].gpu == (int)g) total += slice_pct(&p->slices[s]);
            for (size_t s = 0; s < p->n_slices; s++) {
                const plan_slice *sl = &p->slices[s];
                if (sl->gpu == (int)g && total > 0) add_slice(k, f, sl, slice_pct(sl) / total);
            }
            continue;
        }
        for (size_t s = 0; s < p->n_slices; s++) {
            const plan_slice *sl = &p->slices[s];
            if (sl->gpu != (int)g || !is_mig_slice(sl)) continue;
            add_slice(k, flavor_find(k, gpu->type, slice_profile(p, sl)), sl, 1.0);
        }
    }
}

/* Largest remainder: floors first, then one more unit to each of the
 * largest fractional parts (the earlier tenant on a tie) until the units
 * are given out. The floors add up to at most the units, since the shares
 * add up to them. */
static void apportion(const double *share, int units, size_t n, int *quota) {
    int given = 0;
    for (size_t t = 0; t < n; t++) {
        quota[t] = (int)floor(share[t] + 1e-9);
        given += quota[t];
    }
    for (; given < units; given++) {
        size_t best = n;
        double best_frac = -1;
        for (size_t t = 0; t < n; t++) {
            double frac = share[t] - quota[t];
            /* Each tenant gets at most one extra unit: its frac is then < 0. */
            if (frac > best_frac + 1e-12) {
                best = t;
                best_frac = frac;
            }
        }
        if (best == n || best_frac <= 1e-9) break;
        quota[best]++;
    }
}

static void find_quotas(kueue *k) {
    const plan_input *in = k->p->in;
    size_t nt = in->n_tenants;
    for (size_t f = 0; f < k->n_fl; f++) {
        apportion(&k->share[f * nt], k->fl[f].units, nt, &k->quota[f * nt]);
        for (size_t t = 0; t < nt; t++)
            k->cohort[f * in->n_tiers + (size_t)in->tenants[t].tier] += k->quota[f * nt + t];
    }
}

static int last_band(const plan_input *in) {
    int b = 0;
    for (size_t t = 0; t < in->n_tiers; t++)
        if (in->tiers[t].band > b) b = in->tiers[t].band;
    return b;
}

/* ---- rendering ----------------------------------------------------------------- */

static void kueue_header(const kueue *k, strbuf *b) {
    const plan *p = k->p;
    strbuf_printf(b,
                  "# tessera plan: Kueue objects for the tenants' batch GPU jobs on the planned GPUs.\n"
                  "# Each tenant's ClusterQueue holds its share of the planned GPUs and MIG instances, in whole\n"
                  "# units (largest remainder), and may borrow what its tier's cohort leaves idle; jobs go to\n"
                  "# the LocalQueue " KUEUE_QUEUE " in the tenant's namespace (create the namespaces first).\n"
                  "# Limits: where the device plugin shares GPUs (MPS or time-slicing replicas), nvidia.com/gpu\n"
                  "# counts replicas, not GPUs; the queues cover GPUs only, so jobs that request cpu or memory\n"
                  "# need them covered, or excluded in Kueue's configuration (resources.excludeResourcePrefixes).\n"
                  "# Label the nodes so the flavors find them:\n");
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!emit_node_used(p, n)) continue;
        char type[PLAN_NAME_MAX];
        plan_dns_label(type, sizeof type, p->in->pools[p->nodes[n].pool].gpu->name);
        strbuf_printf(b, "#   kubectl label node %s tessera.dev/gpu-type=%s\n", p->nodes[n].name, type);
    }
}

static void kueue_flavor(const kueue *k, size_t f, strbuf *b) {
    const flavor *fl = &k->fl[f];
    char type[PLAN_NAME_MAX];
    plan_dns_label(type, sizeof type, k->p->types[fl->type]->name);
    strbuf_printf(b,
                  "---\n# %s: %d %s%s of the plan\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
                  "metadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: tessera\nspec:\n  nodeLabels:\n"
                  "    tessera.dev/gpu-type: %s\n",
                  fl->resource, fl->units, fl->profile ? "MIG instance" : "GPU", fl->units == 1 ? "" : "s",
                  k->fl_names[f], type);
}

static void cq_preemption(const plan_input *in, const plan_tier *tier, strbuf *b) {
    const char *reclaim = "LowerPriority", *within = "LowerPriority";
    if (tier->band == 0) reclaim = "Any";
    else if (tier->band == last_band(in)) reclaim = within = "Never";
    strbuf_printf(b, "  preemption:\n    reclaimWithinCohort: %s\n    withinClusterQueue: %s\n", reclaim, within);
}

/* The resource groups of tenant t: one per resource, holding the flavors of
 * that resource its cohort has quota of. Returns the number of groups. */
static int cq_groups(const kueue *k, size_t t, strbuf *b) {
    const plan_input *in = k->p->in;
    size_t nt = in->n_tenants, tier = (size_t)in->tenants[t].tier;
    const char *open = NULL;
    int groups = 0;
    for (size_t f = 0; f < k->n_fl; f++) {
        int cohort = k->cohort[f * in->n_tiers + tier], own = k->quota[f * nt + t];
        if (cohort == 0) continue;
        if (!open || strcmp(open, k->fl[f].resource) != 0) {
            if (!groups) strbuf_printf(b, "  resourceGroups:\n");
            open = k->fl[f].resource;
            groups++;
            strbuf_printf(b, "    - coveredResources:\n        - %s\n      flavors:\n", open);
        }
        strbuf_printf(b,
                      "        - name: %s\n          resources:\n            - name: %s\n"
                      "              nominalQuota: %d\n              borrowingLimit: %d\n",
                      k->fl_names[f], k->fl[f].resource, own, cohort - own);
    }
    return groups;
}

static int kueue_tenant(const kueue *k, size_t t, strbuf *b, emit_out *out) {
    const plan_input *in = k->p->in;
    const plan_tenant *tn = &in->tenants[t];
    const plan_tier *tier = &in->tiers[tn->tier];
    const char *ns = k->tenants[t];
    strbuf_printf(b, "---\n# tenant %s: tier %s (band %d); share of the planned units:", tn->name, tier->name,
                  tier->band);
    int any = 0;
    for (size_t f = 0; f < k->n_fl; f++) {
        double s = k->share[f * in->n_tenants + t];
        if (s <= 0) continue;
        strbuf_printf(b, " %s %.2f -> %d;", k->fl_names[f], s, k->quota[f * in->n_tenants + t]);
        any = 1;
    }
    strbuf_printf(b, "%s\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: tessera-%s\n"
                     "  labels:\n    app.kubernetes.io/name: tessera\n    tessera.dev/tenant: %s\nspec:\n"
                     "  cohortName: tessera-%s\n  namespaceSelector:\n    matchLabels:\n"
                     "      kubernetes.io/metadata.name: %s\n",
                  any ? "" : " none", ns, ns, k->tiers[tn->tier], ns);
    cq_preemption(in, tier, b);
    int groups = cq_groups(k, t, b);
    if (groups > KUEUE_MAX_GROUPS) {
        snprintf(out->why, sizeof out->why,
                 "tenant '%s' would need %d Kueue resource groups (one per GPU resource), more than the %d a "
                 "ClusterQueue takes",
                 tn->name, groups, KUEUE_MAX_GROUPS);
        return TS_ERR_INVAL;
    }
    strbuf_printf(b,
                  "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  name: " KUEUE_QUEUE "\n"
                  "  namespace: %s\n  labels:\n    app.kubernetes.io/name: tessera\nspec:\n"
                  "  clusterQueue: tessera-%s\n",
                  ns, ns);
    return 0;
}

/* ---- entry point --------------------------------------------------------------- */

static void kueue_free(kueue *k) {
    free(k->fl);
    free(k->fl_names);
    free(k->tenants);
    free(k->tiers);
    free(k->share);
    free(k->quota);
    free(k->cohort);
}

static int kueue_names(kueue *k, emit_out *out) {
    const plan_input *in = k->p->in;
    int rc = emit_tenant_labels(k->p, &k->tenants, out);
    if (rc) return rc;
    size_t n = in->n_tiers > k->n_fl ? in->n_tiers : k->n_fl;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    if (!names) return TS_ERR_NOMEM;
    for (size_t t = 0; t < in->n_tiers; t++) names[t] = in->tiers[t].name;
    rc = emit_labels("tier", names, in->n_tiers, &k->tiers, out);
    for (size_t f = 0; !rc && f < k->n_fl; f++) names[f] = k->fl[f].raw;
    if (!rc) rc = emit_labels("GPU flavor", names, k->n_fl, &k->fl_names, out);
    free(names);
    return rc;
}

static int kueue_build(kueue *k, emit_out *out) {
    int rc = find_flavors(k);
    if (rc == TS_ERR_INVAL) snprintf(out->why, sizeof out->why, "a MIG slice of the plan names no known profile");
    if (rc || (rc = kueue_names(k, out))) return rc;
    size_t nt = k->p->in->n_tenants, nf = k->n_fl ? k->n_fl : 1;
    k->share = calloc(nf * (nt ? nt : 1), sizeof *k->share);
    k->quota = calloc(nf * (nt ? nt : 1), sizeof *k->quota);
    k->cohort = calloc(nf * (k->p->in->n_tiers ? k->p->in->n_tiers : 1), sizeof *k->cohort);
    if (!k->share || !k->quota || !k->cohort) return TS_ERR_NOMEM;
    find_shares(k);
    find_quotas(k);
    return 0;
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
        for (size_t t = 0; !rc && t < p->in->n_tenants; t++) rc = kueue_tenant(&k, t, &b, out);
    }
    kueue_free(&k);
    if (rc) {
        strbuf_free(&b);
        return rc;
    }
    return emit_add_file(out, &b, "kueue.yaml");
}
