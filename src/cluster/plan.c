/* plan.c - workers, the decision tree, sizing, packing, feasibility and the
 * report's numbers; see plan.h.
 *
 * plan_build runs in five passes, each reading only what the earlier ones
 * wrote: (1) the fleet becomes nodes and GPUs; (2) tenants become workers;
 * (3) each worker is sized on every GPU type of the fleet (replicas, then
 * the smallest slice per type), and strict groups may be merged into one
 * GI with MPS inside; (4) the slices are packed; (5) the placed sizes are
 * copied into slices and instances, MIG layouts are laid out, and every
 * tenant gets its prediction or a problem.
 */
#include "plan.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "err.h"
#include "pack.h"

#define GIB 1073741824.0
#define GB 1e9

/* ---- input -------------------------------------------------------------------- */

void plan_input_init(plan_input *in) {
    memset(in, 0, sizeof *in);
    perf_opts_default(&in->perf);
    /* 64 replicas of one worker is already a fleet of its own; a load that
     * needs more is better split into workers by the operator. */
    in->max_replicas = 64;
    /* Exact search: 12 slices finish in well under a second; the node
     * budget stops pathological cases anyway. */
    in->exact_limit = 12;
    in->exact_budget = 2000000;
}

void plan_input_free(plan_input *in) {
    if (!in) return;
    free(in->pools);
    free(in->models);
    free(in->tiers);
    free(in->tenants);
    plan_input_init(in);
}

static int append(void **arr, size_t *n, size_t elem, const void *item) {
    void *a = realloc(*arr, (*n + 1) * elem);
    if (!a) return TS_ERR_NOMEM;
    memcpy((char *)a + *n * elem, item, elem);
    *arr = a;
    return (int)(*n)++;
}

int plan_input_add_pool(plan_input *in, const plan_pool *p) {
    return append((void **)&in->pools, &in->n_pools, sizeof *p, p);
}
int plan_input_add_model(plan_input *in, const plan_model *m) {
    return append((void **)&in->models, &in->n_models, sizeof *m, m);
}
int plan_input_add_tier(plan_input *in, const plan_tier *t) {
    return append((void **)&in->tiers, &in->n_tiers, sizeof *t, t);
}
int plan_input_add_tenant(plan_input *in, const plan_tenant *t) {
    return append((void **)&in->tenants, &in->n_tenants, sizeof *t, t);
}

int plan_input_default_tiers(plan_input *in) {
    /* The scheduler's own defaults, so a plan's workers and a hand-written
     * tessera.yaml mean the same by "gold". */
    for (size_t i = 0; i < SCHED_DEFAULT_TIERS; i++) {
        const sched_tier *d = &sched_default_tiers[i];
        plan_tier t = {.ttft_ms = d->ttft_ms, .tpot_ms = d->tpot_ms, .band = d->band,
                       .min_share = d->min_share, .max_queue_ms = d->max_queue_ms};
        _Static_assert(sizeof t.name == sizeof d->name, "plan and scheduler names differ in size");
        memcpy(t.name, d->name, sizeof t.name);
        int rc = plan_input_add_tier(in, &t);
        if (rc < 0) return rc;
    }
    return 0;
}

int plan_model_find(const plan_input *in, const char *name) {
    for (size_t i = 0; i < in->n_models; i++)
        if (strcmp(in->models[i].name, name) == 0) return (int)i;
    return -1;
}

int plan_tier_find(const plan_input *in, const char *name) {
    for (size_t i = 0; i < in->n_tiers; i++)
        if (strcmp(in->tiers[i].name, name) == 0) return (int)i;
    return -1;
}

double plan_tenant_headroom(const plan_tenant *t) { return t->headroom >= 1.0 ? t->headroom : 1.0; }

const char *plan_iso_name(int iso) {
    static const char *const n[] = {"strict", "shared", "best-effort"};
    return iso >= 0 && iso < 3 ? n[iso] : "?";
}

const char *plan_mode_name(int mode) {
    static const char *const n[] = {"mig", "mig+mps", "mps", "timeslice", "whole"};
    return mode >= 0 && mode < 5 ? n[mode] : "?";
}

const char *plan_why_name(int why) {
    static const char *const n[] = {"memory", "ttft", "tpot", "load", "profile", "capacity"};
    return why >= 0 && why < 6 ? n[why] : "?";
}

/* ---- slices of a GPU ---------------------------------------------------------- */

/* Peak FLOP/s for m on g: FP8 tensor math for 1-byte weights where the GPU
 * has it, FP16/BF16 otherwise (A100 runs W8A16 on FP16 units). */
static double peak_flops(const gpucat_gpu *g, const perf_model *m) {
    double tf = (m->weight_bytes <= 1.0 && g->fp8_tflops > 0) ? g->fp8_tflops : g->fp16_tflops;
    return tf * 1e12;
}

/* A GI: compute scales with its SMs (-lgip counts, not 7ths), bandwidth
 * with its memory slices (each slice has its own memory controllers) [D]. */
static perf_slice slice_mig(const gpucat_gpu *g, const gpucat_mig *pr, const perf_model *m) {
    const mig_geom *geo = mig_geom_find(pr->gi_id);
    perf_slice s;
    s.flops = peak_flops(g, m) * pr->sms / g->sms;
    s.bw = g->bw_gbs * 1e9 * (geo ? geo->mem : MIG_MEM_SLICES) / MIG_MEM_SLICES;
    s.mem = pr->mem_gib * GIB;
    return s;
}

/* An MPS or time-slice share of a whole GPU. MPS limits SMs, not
 * bandwidth; the share is also charged for bandwidth so that clients that
 * all stream weights at once still meet their targets [D]. */
static perf_slice slice_share(const gpucat_gpu *g, double pct, const perf_model *m) {
    perf_slice s;
    s.flops = peak_flops(g, m) * pct / 100.0;
    s.bw = g->bw_gbs * 1e9 * pct / 100.0;
    s.mem = g->mem_gib * GIB;
    return s;
}

/* pct percent of slice full's SMs and bandwidth; its memory stays whole,
 * since a share limits SMs, not memory. Sizing and plan_inst_slice both
 * come here, so a plan read back gives bit-identical slices. */
static perf_slice share_of(perf_slice full, double pct) {
    if (pct == 100.0) return full;
    full.flops = full.flops * pct / 100.0;
    full.bw = full.bw * pct / 100.0;
    return full;
}

/* g's MIG profiles without +me (media engines are no use to an LLM and
 * there is one per GPU), smallest first: memory slices, compute, id. */
static int mig_profiles(const gpucat_gpu *g, const gpucat_mig **out) {
    int n = 0;
    for (int i = 0; i < g->n_mig; i++) {
        const mig_geom *geo = mig_geom_find(g->mig[i].gi_id);
        if (!geo || geo->me) continue;
        out[n++] = &g->mig[i];
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            const mig_geom *a = mig_geom_find(out[j - 1]->gi_id), *b = mig_geom_find(out[j]->gi_id);
            int swap = a->mem != b->mem ? a->mem > b->mem
                       : a->compute != b->compute ? a->compute > b->compute
                                                  : a->gi_id > b->gi_id;
            if (!swap) break;
            const gpucat_mig *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

/* ---- sizing ------------------------------------------------------------------- */

typedef struct fit {                /* one instance on one GPU type */
    int ok;
    int gi_id;                      /* MIG modes: the GI's profile */
    double pct;                     /* MPS/TS: of the GPU; MIG+MPS: of the GI; else 100 */
    double mem_alloc;               /* bytes: GI or GPU memory, or the pinned limit */
    perf_est est;
} fit;

typedef struct sizing {
    const perf_model *m;
    perf_load load;                 /* per replica */
    double ttft_s, tpot_s;          /* 0 = none */
    int mode;
    const char *pin;                /* MIG profile name, or NULL */
} sizing;

typedef struct builder {
    plan *p;
    fit *ifit;                      /* [n_insts][n_types] */
    pack_size *ssize;               /* [n_slices][n_types] */
    double *salloc;                 /* [n_slices][n_types] */
    size_t cap_insts, cap_slices;
    char *spread;                   /* [n_workers] size for every capable type (second round) */
    int has_mig;                    /* the fleet has a MIG type */
} builder;

static int check_at(const plan *p, const sizing *z, const perf_slice *s, perf_est *e) {
    perf_estimate(z->m, s, &z->load, &p->in->perf, e);
    return perf_check(e, s, &p->in->perf, z->ttft_s, z->tpot_s);
}

/* Smallest integer share in 1..100 of slice `full` for which z passes, or
 * 0. The need and the latency only fall as the share grows, so bisection
 * finds the smallest. full.mem stays whole: a share limits SMs, not memory. */
static int smallest_share(const plan *p, const sizing *z, perf_slice full, perf_est *best) {
    perf_est e;
    if (check_at(p, z, &full, &e) != PERF_OK) return 0;
    *best = e;
    int lo = 0, hi = 100;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        perf_slice s = share_of(full, mid);
        if (check_at(p, z, &s, &e) == PERF_OK) {
            hi = mid;
            *best = e;
        } else {
            lo = mid;
        }
    }
    return hi;
}

/* Size one instance of z on type t into f; 1 if it fits. */
static int size_on(const plan *p, const sizing *z, size_t t, fit *f) {
    const gpucat_gpu *g = p->types[t];
    memset(f, 0, sizeof *f);
    f->gi_id = -1;
    switch (z->mode) {
    case PLAN_MODE_MIG: {
        const gpucat_mig *pr[GPUCAT_MIG_MAX];
        int n = mig_profiles(g, pr);
        for (int i = 0; i < n; i++) {
            if (z->pin && strcasecmp(pr[i]->name, z->pin) != 0) continue;
            perf_slice s = slice_mig(g, pr[i], z->m);
            perf_est e;
            if (check_at(p, z, &s, &e) != PERF_OK) continue;
            f->ok = 1;
            f->gi_id = pr[i]->gi_id;
            f->pct = 100;
            f->mem_alloc = s.mem;
            f->est = e;
            return 1;
        }
        return 0;
    }
    case PLAN_MODE_MPS:
    case PLAN_MODE_TIMESLICE: {
        sizing zz = *z;
        if (z->mode == PLAN_MODE_TIMESLICE) zz.ttft_s = zz.tpot_s = 0;   /* best effort */
        int pct = smallest_share(p, &zz, slice_share(g, 100, z->m), &f->est);
        if (!pct) return 0;
        f->ok = 1;
        f->pct = pct;
        f->mem_alloc = f->est.need_bytes;
        return 1;
    }
    case PLAN_MODE_WHOLE: {
        perf_slice s = slice_share(g, 100, z->m);
        if (check_at(p, z, &s, &f->est) != PERF_OK) return 0;
        f->ok = 1;
        f->pct = 100;
        f->mem_alloc = s.mem;
        return 1;
    }
    }
    return 0;
}

/* The largest slice z's mode can have on type t (7g, 100%, whole GPU);
 * 0 if the mode cannot use t. With a pin, the pinned profile. */
static int largest_slice(const plan *p, const sizing *z, size_t t, perf_slice *s, const char **what) {
    const gpucat_gpu *g = p->types[t];
    if (z->mode == PLAN_MODE_MIG || z->mode == PLAN_MODE_MIG_MPS) {
        const gpucat_mig *pr[GPUCAT_MIG_MAX];
        int n = mig_profiles(g, pr);
        for (int i = n - 1; i >= 0; i--) {
            if (z->pin && strcasecmp(pr[i]->name, z->pin) != 0) continue;
            *s = slice_mig(g, pr[i], z->m);
            *what = pr[i]->name;
            return 1;
        }
        return 0;
    }
    *s = slice_share(g, 100, z->m);
    *what = z->mode == PLAN_MODE_WHOLE ? "the whole GPU" : "100% of the GPU";
    return 1;
}

/* ---- problems ----------------------------------------------------------------- */

__attribute__((format(printf, 4, 5)))
static int add_problem(plan *p, int tenant, int why, const char *fmt, ...) {
    plan_problem *a = realloc(p->problems, (p->n_problems + 1) * sizeof *a);
    if (!a) return TS_ERR_NOMEM;
    p->problems = a;
    plan_problem *q = &a[p->n_problems++];
    q->tenant = tenant;
    q->why = why;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->text, sizeof q->text, fmt, ap);
    va_end(ap);
    return 0;
}

__attribute__((format(printf, 2, 3)))
static int add_note(plan *p, const char *fmt, ...) {
    char buf[PLAN_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **a = realloc(p->notes, (p->n_notes + 1) * sizeof *a);
    if (!a) return TS_ERR_NOMEM;
    p->notes = a;
    if (!(a[p->n_notes] = strdup(buf))) return TS_ERR_NOMEM;
    p->n_notes++;
    return 0;
}

/* "tenant 'a'" or "tenant 'a' (worker w, with 'b' and 2 more)". */
static void who(const plan *p, const plan_worker *w, size_t tenant, char *buf, size_t cap) {
    const plan_tenant *t = &p->in->tenants[tenant];
    const plan_model *m = &p->in->models[t->model];
    int n = snprintf(buf, cap, "tenant '%s' (model %s, tier %s, %s", t->name, m->name,
                     p->in->tiers[t->tier].name, plan_iso_name(t->iso));
    if (w->n_tenants > 1 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", shares worker %s with %zu other tenant%s", w->name,
                      w->n_tenants - 1, w->n_tenants > 2 ? "s" : "");
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ")");
}

/* The memory case of explain(): what the need is made of, and only fixes
 * that can work. One instance never spans GPUs (no tensor parallelism), so
 * weights beyond the largest GPU leave a bigger GPU, smaller weights or a
 * smaller model; a shorter context is offered only when the need without
 * any KV cache fits the slice, otherwise the text says the weights are
 * what does not fit.
 *   e: the estimate on the largest slice, which holds slice_mem bytes and
 *      is slice_what on GPU type slice_on. */
static void explain_memory(const plan *p, const plan_model *pm, const sizing *z0, const perf_est *e,
                           double slice_mem, const char *slice_what, const char *slice_on, char *what, char *fix) {
    const perf_opts *o = &p->in->perf;
    double gpu_max = 0;
    const char *gpu_on = "";
    for (size_t t = 0; t < p->n_types; t++)
        if (p->types[t]->mem_gib * GIB > gpu_max) gpu_max = p->types[t]->mem_gib * GIB, gpu_on = p->types[t]->name;
    double fixed = o->reserve_bytes, grow = 1.0 + o->headroom;
    /* Weights at one byte per parameter, offered only when that need fits
     * the room the failing check had: the largest GPU when the weights
     * exceed it, else the largest slice. */
    double w8 = pm->m.weight_bytes > 1 ? e->weight_bytes / pm->m.weight_bytes : 0;
    double room = e->weight_bytes > gpu_max ? gpu_max : slice_mem;
    char fp8[96] = "";
    if (w8 > 0 && (w8 + e->kv_bytes) * grow + fixed <= room)
        snprintf(fp8, sizeof fp8, "FP8 weights (dtype_bytes: 1, %.1f GB), ", w8 / GB);
    if (e->weight_bytes > gpu_max) {
        snprintf(what, PLAN_TEXT_MAX,
                 "memory: the weights alone, %.1f GB, exceed the largest GPU of the pools (%s, %.1f GB usable), "
                 "and the planner does not split a model across GPUs (no tensor parallelism)",
                 e->weight_bytes / GB, gpu_on, gpu_max / GB);
        snprintf(fix, PLAN_TEXT_MAX, "%sa GPU type with more than %.1f GB, or a smaller model", fp8,
                 (e->weight_bytes * grow + fixed) / GB);
        return;
    }
    double no_kv = e->weight_bytes * grow + fixed;
    int n = snprintf(what, PLAN_TEXT_MAX,
                     "memory: needs %.1f GB (%.1f GB weights + %.1f GB KV for %.0f tokens, +%.0f%% headroom, "
                     "+%.1f GB reserve) but the largest slice, %s on %s, holds %.1f GB",
                     e->need_bytes / GB, e->weight_bytes / GB, e->kv_bytes / GB, e->kv_tokens, o->headroom * 100,
                     fixed / GB, slice_what, slice_on, slice_mem / GB);
    if (no_kv > slice_mem && n > 0 && n < PLAN_TEXT_MAX)
        snprintf(what + n, PLAN_TEXT_MAX - (size_t)n,
                 "; the weights are what does not fit: %.1f GB with headroom and reserve before any KV cache "
                 "(KV is %.0f%% of the need)", no_kv / GB, 100.0 * e->kv_bytes * grow / e->need_bytes);
    if (z0->pin)
        snprintf(fix, PLAN_TEXT_MAX, "a bigger profile than %s, or no pin", z0->pin);
    else if (no_kv > slice_mem)
        snprintf(fix, PLAN_TEXT_MAX, "%s%sa GPU type with more memory", fp8, fp8[0] ? "or " : "");
    else
        snprintf(fix, PLAN_TEXT_MAX, "a GPU type with more memory, %sor a shorter max_context (%d now)",
                 pm->m.weight_bytes > 1 ? "FP8 weights (dtype_bytes: 1), " : "", pm->m.max_context);
}

/* Why worker w cannot be served on any type, for each of its tenants.
 * Memory and targets are judged unloaded on the largest slice of every
 * type, because no number of replicas fixes those; what is left is load. */
static int explain(plan *p, const plan_worker *w, const sizing *z0) {
    const plan_model *pm = &p->in->models[w->model];
    const perf_opts *o = &p->in->perf;
    sizing idle = *z0;
    idle.load.rps = 0;
    int mem_ok = 0;
    double best_ttft = INFINITY, best_tpot = INFINITY, best_mem = 0;
    const char *ttft_on = "", *tpot_on = "", *mem_on = "", *mem_what = "";
    perf_est e0 = {0}, e_mem = {0};
    for (size_t t = 0; t < p->n_types; t++) {
        perf_slice s;
        const char *what;
        if (!largest_slice(p, &idle, t, &s, &what)) continue;
        perf_estimate(idle.m, &s, &idle.load, o, &e0);
        if (s.mem > best_mem) best_mem = s.mem, mem_on = p->types[t]->name, mem_what = what, e_mem = e0;
        if (e0.need_bytes > s.mem) continue;
        mem_ok = 1;
        if (e0.ttft_s < best_ttft) best_ttft = e0.ttft_s, ttft_on = p->types[t]->name;
        if (e0.step_s < best_tpot) best_tpot = e0.step_s, tpot_on = p->types[t]->name;
    }
    int why;
    char what[PLAN_TEXT_MAX], fix[PLAN_TEXT_MAX];
    if (z0->pin && best_mem == 0) {
        why = PLAN_WHY_PROFILE;
        snprintf(what, sizeof what, "pinned MIG profile %s exists on no GPU type of the fleet", z0->pin);
        snprintf(fix, sizeof fix, "a profile of the fleet's GPUs (nvidia-smi mig -lgip) or no pin");
    } else if (best_mem == 0) {
        why = PLAN_WHY_PROFILE;
        snprintf(what, sizeof what, "strict isolation needs MIG and no GPU type of the fleet has it");
        snprintf(fix, sizeof fix,
                 "GPUs whose MIG the planner models (A100, H100, H200, GH200, B200, B300) or isolation: shared");
    } else if (!mem_ok) {
        why = z0->pin ? PLAN_WHY_PROFILE : PLAN_WHY_MEMORY;
        explain_memory(p, pm, z0, &e_mem, best_mem, mem_what, mem_on, what, fix);
    } else if (z0->ttft_s > 0 && best_ttft > z0->ttft_s) {
        why = PLAN_WHY_TTFT;
        snprintf(what, sizeof what,
                 "TTFT target %.0f ms is unreachable: a %.0f-token prompt takes %.0f ms even alone "
                 "on %s%s%s", z0->ttft_s * 1e3, z0->load.prompt, best_ttft * 1e3, z0->pin ? z0->pin : "",
                 z0->pin ? " of " : "", ttft_on);
        snprintf(fix, sizeof fix, "ttft_ms >= %.0f for the tier, shorter prompts, or a faster GPU",
                 ceil(best_ttft * 1e3));
    } else if (z0->tpot_s > 0 && best_tpot > z0->tpot_s) {
        why = PLAN_WHY_TPOT;
        snprintf(what, sizeof what,
                 "TPOT target %.0f ms is unreachable: one decode step of %s takes %.1f ms even alone "
                 "on %s%s%s", z0->tpot_s * 1e3, pm->name, best_tpot * 1e3, z0->pin ? z0->pin : "",
                 z0->pin ? " of " : "", tpot_on);
        snprintf(fix, sizeof fix, "tpot_ms >= %.0f for the tier, %sor a GPU with more bandwidth",
                 ceil(best_tpot * 1e3), pm->m.weight_bytes > 1 ? "FP8 weights (dtype_bytes: 1), " : "");
    } else {
        /* Load: find what one largest slice can carry, by bisection on
         * the arrival rate (latency and memory only grow with it). */
        double lo = 0;
        const char *on = "";
        for (size_t t = 0; t < p->n_types; t++) {
            perf_slice s;
            const char *wh;
            if (!largest_slice(p, z0, t, &s, &wh)) continue;
            sizing zz = *z0;
            double a = 0, b = z0->load.rps;
            for (int it = 0; it < 40; it++) {
                zz.load.rps = 0.5 * (a + b);
                perf_est e;
                if (check_at(p, &zz, &s, &e) == PERF_OK) a = zz.load.rps;
                else b = zz.load.rps;
            }
            if (a > lo) lo = a, on = p->types[t]->name;
        }
        why = PLAN_WHY_LOAD;
        int need_r = lo > 0 ? (int)ceil(z0->load.rps / lo) : 0;
        char hr[96] = "";
        if (w->sized.rps != w->load.rps)
            snprintf(hr, sizeof hr, " (sized with headroom: %.1f req/s of real load)", w->load.rps);
        snprintf(what, sizeof what,
                 "load: %.1f req/s%s is more than %d replicas carry (one slice carries at most %.2f "
                 "req/s within its targets, on %s)", z0->load.rps, hr, p->in->max_replicas, lo, on);
        const char *lower = hr[0] ? "lower the load or the headroom" : "lower the load";
        if (need_r > 0)
            snprintf(fix, sizeof fix, "%s, or options.max_replicas >= %d", lower, need_r);
        else
            snprintf(fix, sizeof fix, "%s, or looser targets", lower);
    }
    for (size_t k = 0; k < w->n_tenants; k++) {
        char name[256];
        who(p, w, w->tenants[k], name, sizeof name);
        int rc = add_problem(p, (int)w->tenants[k], why, "%s: %s; fix: %s", name, what, fix);
        if (rc) return rc;
    }
    return 0;
}

/* ---- workers ------------------------------------------------------------------ */

void plan_dns_label(char *out, size_t cap, const char *s) {
    size_t n = 0;
    int dash = 1;
    for (; *s && n + 1 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c)) {
            out[n++] = (char)tolower(c);
            dash = 0;
        } else if (!dash) {
            out[n++] = '-';
            dash = 1;
        }
    }
    while (n > 0 && out[n - 1] == '-') n--;
    out[n] = 0;
    if (n == 0 && cap > 1) snprintf(out, cap, "w");
}

/* The grouping key of tenant t: workers gather tenants with equal keys. */
static void worker_key(const plan_input *in, const plan_tenant *t, char *buf, size_t cap) {
    const char *model = in->models[t->model].name;
    switch (t->iso) {
    case PLAN_ISO_STRICT:
        snprintf(buf, cap, "%s-%s", t->group[0] ? t->group : t->name, model);
        break;
    case PLAN_ISO_SHARED:
        snprintf(buf, cap, "%s-%s", model, in->tiers[t->tier].name);
        break;
    default:
        snprintf(buf, cap, "%s-be", model);
    }
}

static int make_workers(plan *p, int has_mig) {
    const plan_input *in = p->in;
    char (*keys)[PLAN_NAME_MAX * 2 + 8] = calloc(in->n_tenants ? in->n_tenants : 1, sizeof *keys);
    p->workers = calloc(in->n_tenants ? in->n_tenants : 1, sizeof *p->workers);
    if (!keys || !p->workers) {
        free(keys);
        return TS_ERR_NOMEM;
    }
    for (size_t i = 0; i < in->n_tenants; i++) {
        const plan_tenant *t = &in->tenants[i];
        char key[PLAN_NAME_MAX * 2 + 8];
        worker_key(in, t, key, sizeof key);
        size_t w = 0;
        while (w < p->n_workers && !(p->workers[w].iso == t->iso && strcmp(keys[w], key) == 0)) w++;
        plan_worker *pw = &p->workers[w];
        if (w == p->n_workers) {
            p->n_workers++;
            snprintf(keys[w], sizeof keys[w], "%s", key);
            pw->model = t->model;
            pw->iso = t->iso;
            pw->mode = t->iso == PLAN_ISO_STRICT ? (has_mig ? PLAN_MODE_MIG : PLAN_MODE_WHOLE)
                       : t->iso == PLAN_ISO_SHARED ? PLAN_MODE_MPS
                                                   : PLAN_MODE_TIMESLICE;
            pw->tier = t->tier;
            pw->replicas = 1;
            char label[PLAN_NAME_MAX + 16];
            plan_dns_label(label, PLAN_NAME_MAX, key);
            /* Distinct labels for distinct keys that sanitise alike. */
            snprintf(pw->name, sizeof pw->name, "%s", label);
            for (int k = 2;; k++) {
                size_t o = 0;
                while (o < w && strcmp(p->workers[o].name, pw->name) != 0) o++;
                if (o == w) break;
                snprintf(pw->name, sizeof pw->name, "%.47s-%d", label, k);
            }
        }
        size_t *a = realloc(pw->tenants, (pw->n_tenants + 1) * sizeof *a);
        if (!a) {
            free(keys);
            return TS_ERR_NOMEM;
        }
        pw->tenants = a;
        a[pw->n_tenants++] = i;
        if (in->tiers[t->tier].band < in->tiers[pw->tier].band) pw->tier = t->tier;
    }
    free(keys);
    for (size_t w = 0; w < p->n_workers; w++) plan_worker_load(in, &p->workers[w]);
    return 0;
}

/* The mixture of w's tenants' loads, each rate x its headroom when
 * `sized`: rates add up, prompt and output are arrival-weighted means
 * (plain means when nothing arrives), and the prompt's second moment is
 * the mixture's, so tenants with different prompt lengths give the worker
 * a prompt_cv even when each of them has none. A headroom of 1 multiplies
 * exactly, so without headroom the sized load is the load, bit for bit. */
static perf_load mix_load(const plan_input *in, const plan_worker *pw, int sized) {
    double rps = 0, pr = 0, pr2 = 0, out = 0, sp = 0, sp2 = 0, so = 0;
    for (size_t k = 0; k < pw->n_tenants; k++) {
        const plan_tenant *t = &in->tenants[pw->tenants[k]];
        double m2 = t->load.prompt * t->load.prompt * (1.0 + t->load.prompt_cv * t->load.prompt_cv);
        double r = t->load.rps * (sized ? plan_tenant_headroom(t) : 1.0);
        rps += r;
        pr += r * t->load.prompt;
        pr2 += r * m2;
        out += r * t->load.output;
        sp += t->load.prompt;
        sp2 += m2;
        so += t->load.output;
    }
    double n = pw->n_tenants ? (double)pw->n_tenants : 1.0;
    perf_load l;
    memset(&l, 0, sizeof l);
    l.rps = rps;
    l.prompt = rps > 0 ? pr / rps : sp / n;
    l.output = rps > 0 ? out / rps : so / n;
    if (l.output < 1) l.output = 1;
    double mean = l.prompt, m2 = rps > 0 ? pr2 / rps : sp2 / n;
    double var = m2 - mean * mean;
    /* Equal prompts give exactly 0, not a rounding residue. */
    l.prompt_cv = mean > 0 && var > 1e-9 * mean * mean ? sqrt(var) / mean : 0.0;
    return l;
}

void plan_worker_load(const plan_input *in, plan_worker *pw) {
    /* Targets are the strictest of the tenants (best effort promises none). */
    pw->ttft_s = pw->tpot_s = 0;
    for (size_t k = 0; k < pw->n_tenants && pw->iso != PLAN_ISO_BEST_EFFORT; k++) {
        const plan_tier *tr = &in->tiers[in->tenants[pw->tenants[k]].tier];
        double ttft = tr->ttft_ms / 1e3, tpot = tr->tpot_ms / 1e3;
        if (ttft > 0 && (pw->ttft_s == 0 || ttft < pw->ttft_s)) pw->ttft_s = ttft;
        if (tpot > 0 && (pw->tpot_s == 0 || tpot < pw->tpot_s)) pw->tpot_s = tpot;
    }
    pw->load = mix_load(in, pw, 0);
    pw->sized = mix_load(in, pw, 1);
}

/* The pin of a worker: the first of its tenants' pinned profiles. */
static const char *worker_pin(const plan *p, const plan_worker *w) {
    for (size_t k = 0; k < w->n_tenants; k++) {
        const char *pin = p->in->tenants[w->tenants[k]].profile;
        if (pin[0]) return pin;
    }
    return NULL;
}

static sizing worker_sizing(const plan *p, const plan_worker *w) {
    sizing z;
    z.m = &p->in->models[w->model].m;
    z.load = w->sized;              /* headroom: sizing sees the inflated rates */
    z.ttft_s = w->ttft_s;
    z.tpot_s = w->tpot_sized_s;
    z.mode = w->mode;
    z.pin = w->mode == PLAN_MODE_MIG ? worker_pin(p, w) : NULL;
    return z;
}

/* ---- slices and instances ----------------------------------------------------- */

static int reserve(builder *b, size_t insts, size_t slices) {
    plan *p = b->p;
    size_t nt = p->n_types;
    if (p->n_insts + insts > b->cap_insts) {
        size_t cap = (p->n_insts + insts) * 2;
        plan_inst *a = realloc(p->insts, cap * sizeof *a);
        if (!a) return TS_ERR_NOMEM;
        p->insts = a;
        fit *f = realloc(b->ifit, cap * nt * sizeof *f);
        if (!f) return TS_ERR_NOMEM;
        b->ifit = f;
        b->cap_insts = cap;
    }
    if (p->n_slices + slices > b->cap_slices) {
        size_t cap = (p->n_slices + slices) * 2;
        plan_slice *a = realloc(p->slices, cap * sizeof *a);
        if (!a) return TS_ERR_NOMEM;
        p->slices = a;
        pack_size *s = realloc(b->ssize, cap * nt * sizeof *s);
        if (!s) return TS_ERR_NOMEM;
        b->ssize = s;
        double *m = realloc(b->salloc, cap * nt * sizeof *m);
        if (!m) return TS_ERR_NOMEM;
        b->salloc = m;
        b->cap_slices = cap;
    }
    return 0;
}

/* Add one slice holding one new instance of worker w, with per-type fits. */
static void add_single(builder *b, size_t w, int replica, const fit *fits) {
    plan *p = b->p;
    size_t nt = p->n_types, s = p->n_slices++, i = p->n_insts++;
    plan_slice *sl = &p->slices[s];
    memset(sl, 0, sizeof *sl);
    sl->mode = p->workers[w].mode;
    sl->first_inst = i;
    sl->n_inst = 1;
    sl->gpu = -1;
    sl->gi_id = -1;
    sl->gi_start = -1;
    plan_inst *in = &p->insts[i];
    memset(in, 0, sizeof *in);
    in->worker = (int)w;
    in->replica = replica;
    in->slice = s;
    for (size_t t = 0; t < nt; t++) {
        b->ifit[i * nt + t] = fits[t];
        pack_size *ps = &b->ssize[s * nt + t];
        ps->ok = fits[t].ok;
        ps->gi_id = fits[t].gi_id;
        ps->pct = fits[t].pct;
        ps->mem = fits[t].mem_alloc;
        b->salloc[s * nt + t] = fits[t].mem_alloc;
    }
}

/* Strict groups with several models: one GI with MPS inside, sized on
 * type t. For each profile from the smallest, every member gets the
 * smallest share of the GI that meets its targets; the GI works when the
 * shares sum to <= 100% and the needs to <= its memory. Fills fits[k] of
 * member k and returns the GI's profile id, or -1. */
static int group_gi(const plan *p, const size_t *members, size_t n, size_t t, fit *fits) {
    const gpucat_gpu *g = p->types[t];
    const gpucat_mig *pr[GPUCAT_MIG_MAX];
    int np = mig_profiles(g, pr);
    for (int i = 0; i < np; i++) {
        double pct = 0, mem = 0;
        size_t k = 0;
        for (; k < n; k++) {
            sizing z = worker_sizing(p, &p->workers[members[k]]);
            z.pin = NULL;
            perf_slice gi = slice_mig(g, pr[i], z.m);
            memset(&fits[k], 0, sizeof fits[k]);
            int share = smallest_share(p, &z, gi, &fits[k].est);
            if (!share) break;
            fits[k].ok = 1;
            fits[k].gi_id = pr[i]->gi_id;
            fits[k].pct = share;
            fits[k].mem_alloc = fits[k].est.need_bytes;
            pct += share;
            mem += fits[k].est.need_bytes;
        }
        if (k < n || pct > 100.0 || mem > pr[i]->mem_gib * GIB) continue;
        /* The members are the GI's only clients: hand out what is left
         * in proportion to the shares, since a larger share only lowers
         * latency and the GI's SMs would otherwise sit idle. */
        for (k = 0; k < n; k++) {
            double grown = floor(fits[k].pct * 100.0 / pct);
            if (grown <= fits[k].pct) continue;
            sizing z = worker_sizing(p, &p->workers[members[k]]);
            perf_slice gi = share_of(slice_mig(g, pr[i], z.m), grown);
            perf_est e;
            if (check_at(p, &z, &gi, &e) != PERF_OK) continue;
            fits[k].pct = grown;
            fits[k].est = e;
            fits[k].mem_alloc = e.need_bytes;
        }
        return pr[i]->gi_id;
    }
    return -1;
}

/* Merge strict groups whose models fit one GI in fewer memory slices than
 * their static profiles take, judged on the first MIG type of the fleet.
 * Members must each run as one replica without a pin. Marks merged workers
 * PLAN_MODE_MIG_MPS and writes the slices; *done[w] = 1 for them. */
static int merge_groups(builder *b, fit *wfit, char *done) {
    plan *p = b->p;
    size_t nt = p->n_types, t0 = nt;
    for (size_t t = 0; t < nt; t++)
        if (p->types[t]->n_mig) {
            t0 = t;
            break;
        }
    if (t0 == nt) return 0;
    size_t *members = malloc(p->n_workers * sizeof *members);
    fit *gf = malloc(p->n_workers * nt * sizeof *gf);
    int rc = 0;
    if (!members || !gf) {
        rc = TS_ERR_NOMEM;
        goto out;
    }
    for (size_t w = 0; w < p->n_workers; w++) {
        const plan_worker *pw = &p->workers[w];
        if (done[w] || pw->mode != PLAN_MODE_MIG || pw->replicas != 1) continue;
        const char *group = p->in->tenants[pw->tenants[0]].group;
        if (!group[0]) continue;
        size_t n = 0;
        int static_slices = 0, eligible = 1;
        for (size_t v = w; v < p->n_workers; v++) {
            const plan_worker *pv = &p->workers[v];
            if (pv->mode != PLAN_MODE_MIG || done[v] ||
                strcmp(p->in->tenants[pv->tenants[0]].group, group) != 0)
                continue;
            if (pv->replicas != 1 || worker_pin(p, pv) || !wfit[v * nt + t0].ok) eligible = 0;
            else static_slices += mig_geom_find(wfit[v * nt + t0].gi_id)->mem;
            members[n++] = v;
        }
        if (n < 2 || !eligible) continue;
        int gi = group_gi(p, members, n, t0, gf);
        if (gi < 0 || mig_geom_find(gi)->mem >= static_slices) continue;
        /* gf holds type t0; size the other types the same way. */
        fit *per = malloc(n * nt * sizeof *per);
        if (!per) {
            rc = TS_ERR_NOMEM;
            goto out;
        }
        fit *tmp = malloc(n * sizeof *tmp);
        if (!tmp) {
            free(per);
            rc = TS_ERR_NOMEM;
            goto out;
        }
        for (size_t t = 0; t < nt; t++) {
            int id = t == t0 ? gi : group_gi(p, members, n, t, tmp);
            for (size_t k = 0; k < n; k++) {
                if (t == t0) per[k * nt + t] = gf[k];
                else if (id >= 0) per[k * nt + t] = tmp[k];
                else memset(&per[k * nt + t], 0, sizeof(fit));
            }
        }
        free(tmp);
        if ((rc = reserve(b, n, 1))) {
            free(per);
            goto out;
        }
        size_t s = p->n_slices++;
        plan_slice *sl = &p->slices[s];
        memset(sl, 0, sizeof *sl);
        sl->mode = PLAN_MODE_MIG_MPS;
        sl->first_inst = p->n_insts;
        sl->n_inst = (int)n;
        sl->gpu = -1;
        sl->gi_id = -1;
        sl->gi_start = -1;
        for (size_t t = 0; t < nt; t++) {
            pack_size *ps = &b->ssize[s * nt + t];
            memset(ps, 0, sizeof *ps);
            ps->ok = per[t].ok;     /* member 0 decides: all or none are ok */
            ps->gi_id = per[t].gi_id;
            const gpucat_mig *pm = gpucat_mig_by_id(p->types[t], per[t].gi_id);
            b->salloc[s * nt + t] = ps->ok && pm ? pm->mem_gib * GIB : 0;
        }
        for (size_t k = 0; k < n; k++) {
            size_t i = p->n_insts++;
            plan_worker *pv = &p->workers[members[k]];
            pv->mode = PLAN_MODE_MIG_MPS;
            pv->first_inst = i;
            plan_inst *in = &p->insts[i];
            memset(in, 0, sizeof *in);
            in->worker = (int)members[k];
            in->slice = s;
            for (size_t t = 0; t < nt; t++) b->ifit[i * nt + t] = per[k * nt + t];
            done[members[k]] = 1;
        }
        free(per);
    }
out:
    free(members);
    free(gf);
    return rc;
}

/* Fits of z with its load split r ways, on every type; returns how many
 * of the types in want[] (NULL: any type) fit. */
static int fits_at(const plan *p, sizing z, double rps, int r, const char *want, fit *fits) {
    int n = 0;
    z.load.rps = rps / r;
    for (size_t t = 0; t < p->n_types; t++)
        if (size_on(p, &z, t, &fits[t]) && (!want || want[t])) n++;
    return n;
}

/* The fewest replicas in [lo + 1, max_r] with which at least `need` of
 * the types in want[] fit (NULL: any type), or 0. Feasibility only grows
 * with r (each replica's load falls), so: doubling from lo + 1, then
 * bisection. */
static int fewest(const plan *p, const sizing *z, double rps, int lo, int max_r, const char *want, int need,
                  fit *fits) {
    int hi = lo + 1;
    while (fits_at(p, *z, rps, hi, want, fits) < need) {
        if (hi >= max_r) return 0;
        lo = hi;
        hi = hi * 2 < max_r ? hi * 2 : max_r;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits_at(p, *z, rps, mid, want, fits) >= need) hi = mid;
        else lo = mid;
    }
    return hi;
}

/* Replicas of a worker: r_min, the fewest with which it fits some GPU
 * type. On a mixed fleet that count may fit only the fastest type, whose
 * GPUs can run out while others idle; so in the second round (spread) the
 * worker takes the fewest replicas that fit every type able to serve it at
 * all (an idle slice passes): more, smaller slices that go anywhere. Leaves
 * the fits at the chosen count in fits[] and returns it, or 0 when nothing
 * works. */
static int choose_replicas(const plan *p, const sizing *z, double rps, int spread, fit *fits) {
    size_t nt = p->n_types;
    int max_r = p->in->max_replicas;
    char capable[PLAN_MAX_TYPES] = {0};
    int n_capable = 0, r0 = max_r;
    sizing idle = *z;
    idle.load.rps = 0;
    for (size_t t = 0; t < nt; t++) {
        fit f;
        if (!size_on(p, &idle, t, &f)) continue;
        capable[t] = 1;
        n_capable++;
        /* rho scales as 1/r and must stay <= max_util: a floor for r. */
        perf_slice s;
        const char *what;
        if (!largest_slice(p, z, t, &s, &what)) continue;
        perf_est e;
        perf_estimate(z->m, &s, &z->load, &p->in->perf, &e);
        int r = (int)ceil(e.util / p->in->perf.max_util - 1e-9);
        if (r < r0) r0 = r;
    }
    if (!n_capable) return 0;
    if (r0 < 1 || rps <= 0) r0 = 1;
    if (r0 > max_r) r0 = max_r;
    int r_min = fewest(p, z, rps, r0 - 1, max_r, NULL, 1, fits);
    if (!r_min) return 0;
    int all = fits_at(p, *z, rps, r_min, capable, fits) == n_capable;
    if (!all && n_capable > 1 && spread) {
        int cap = max_r;
        int r_all = cap > r_min ? fewest(p, z, rps, r_min, cap, capable, n_capable, fits) : 0;
        if (r_all) {
            fits_at(p, *z, rps, r_all, NULL, fits);
            return r_all;
        }
    }
    fits_at(p, *z, rps, r_min, NULL, fits);
    return r_min;
}

/* Size every worker: replicas, then the fits per type. */
static int size_workers(builder *b) {
    plan *p = b->p;
    size_t nt = p->n_types;
    int rc = 0;
    fit *wfit = calloc((p->n_workers ? p->n_workers : 1) * nt, sizeof *wfit);
    char *ok = calloc(p->n_workers ? p->n_workers : 1, 1);
    char *done = calloc(p->n_workers ? p->n_workers : 1, 1);
    if (!wfit || !ok || !done) {
        rc = TS_ERR_NOMEM;
        goto out;
    }
    for (size_t w = 0; w < p->n_workers; w++) {
        plan_worker *pw = &p->workers[w];
        /* Without a TPOT target, size for the default bound (perf.h says
         * why), and without it where no slice or replica count meets it:
         * a default must never make a tenant infeasible. */
        const perf_opts *o = &p->in->perf;
        pw->tpot_sized_s = pw->tpot_s;
        if (pw->tpot_s == 0 && pw->iso != PLAN_ISO_BEST_EFFORT && o->tpot_bound_s > 0)
            pw->tpot_sized_s = o->tpot_bound_s;
        sizing z = worker_sizing(p, pw);
        int r = choose_replicas(p, &z, pw->sized.rps, b->spread[w], &wfit[w * nt]);
        if (!r && pw->tpot_sized_s != pw->tpot_s) {
            pw->tpot_sized_s = pw->tpot_s;
            z = worker_sizing(p, pw);
            r = choose_replicas(p, &z, pw->sized.rps, b->spread[w], &wfit[w * nt]);
        }
        int found = r > 0;
        if (found) pw->replicas = r;
        if (!found) {
            z.load = pw->sized;
            if ((rc = explain(p, pw, &z))) goto out;
            pw->replicas = 0;
            continue;
        }
        ok[w] = 1;
    }
    if ((rc = merge_groups(b, wfit, done))) goto out;
    for (size_t w = 0; w < p->n_workers; w++) {
        plan_worker *pw = &p->workers[w];
        if (!ok[w] || done[w]) continue;
        if ((rc = reserve(b, (size_t)pw->replicas, (size_t)pw->replicas))) goto out;
        pw->first_inst = p->n_insts;
        for (int r = 0; r < pw->replicas; r++) add_single(b, w, r, &wfit[w * nt]);
    }
out:
    free(wfit);
    free(ok);
    free(done);
    return rc;
}

/* ---- packing ------------------------------------------------------------------ */

static int pack_kind(int mode) {
    switch (mode) {
    case PLAN_MODE_MIG:
    case PLAN_MODE_MIG_MPS: return PACK_MIG;
    case PLAN_MODE_MPS: return PACK_MPS;
    case PLAN_MODE_TIMESLICE: return PACK_TS;
    default: return PACK_WHOLE;
    }
}

static int place(builder *b) {
    plan *p = b->p;
    size_t nt = p->n_types, ns = p->n_slices;
    int rc = 0;
    pack_item *items = malloc((ns ? ns : 1) * sizeof *items);
    int *bin_type = malloc((p->n_gpus ? p->n_gpus : 1) * sizeof *bin_type);
    int *heur = malloc((ns ? ns : 1) * sizeof *heur);
    int *exact = malloc((ns ? ns : 1) * sizeof *exact);
    double type_mem[PLAN_MAX_TYPES];
    if (!items || !bin_type || !heur || !exact) {
        rc = TS_ERR_NOMEM;
        goto out;
    }
    for (size_t s = 0; s < ns; s++) {
        items[s].kind = pack_kind(p->slices[s].mode);
        items[s].size = &b->ssize[s * nt];
    }
    for (size_t g = 0; g < p->n_gpus; g++) bin_type[g] = p->gpus[g].type;
    for (size_t t = 0; t < nt; t++) type_mem[t] = p->types[t]->mem_gib * GIB;
    pack_problem pp = {ns, items, p->n_gpus, bin_type, nt, type_mem};
    pack_result hr, er;
    p->lower_bound = pack_lower_bound(&pp, &p->lower_frac);
    if ((rc = pack_ffd(&pp, heur, &hr))) goto out;
    p->heuristic_gpus = hr.bins_used;
    p->heuristic_unplaced = hr.unplaced;
    const int *use = heur;
    if (ns > 0 && ns <= (size_t)(p->in->exact_limit > 0 ? p->in->exact_limit : 0)) {
        if ((rc = pack_exact(&pp, p->in->exact_budget, exact, &er))) goto out;
        p->exact_ran = 1;
        p->exact_proven = er.proven;
        p->exact_nodes = er.nodes;
        p->exact_gpus = er.bins_used;
        p->exact_unplaced = er.unplaced;
        if (er.unplaced < hr.unplaced || (er.unplaced == hr.unplaced &&
                                          (er.bins_used < hr.bins_used ||
                                           (er.bins_used == hr.bins_used && er.mem_used < hr.mem_used)))) {
            use = exact;
            p->used_exact = 1;
        }
    }
    for (size_t s = 0; s < ns; s++) p->slices[s].gpu = use[s];
out:
    free(items);
    free(bin_type);
    free(heur);
    free(exact);
    return rc;
}

/* ---- after placement ---------------------------------------------------------- */

/* What a GPU does for a slice of this mode. */
static int gpu_mode_of(int slice_mode) {
    switch (slice_mode) {
    case PLAN_MODE_MIG:
    case PLAN_MODE_MIG_MPS: return PLAN_GPU_MIG;
    case PLAN_MODE_MPS: return PLAN_GPU_MPS;
    case PLAN_MODE_TIMESLICE: return PLAN_GPU_TIMESLICE;
    default: return PLAN_GPU_WHOLE;
    }
}

static int finish(builder *b) {
    plan *p = b->p;
    size_t nt = p->n_types;
    /* Copy the placed type's sizes into slices and instances. */
    for (size_t s = 0; s < p->n_slices; s++) {
        plan_slice *sl = &p->slices[s];
        if (sl->gpu < 0) continue;
        plan_gpu *g = &p->gpus[sl->gpu];
        size_t t = (size_t)g->type;
        const pack_size *ps = &b->ssize[s * nt + t];
        sl->gi_id = ps->gi_id;
        sl->pct = sl->mode == PLAN_MODE_MPS || sl->mode == PLAN_MODE_TIMESLICE ? ps->pct : 100;
        sl->mem_alloc = b->salloc[s * nt + t];
        g->mode = gpu_mode_of(sl->mode);
        for (int k = 0; k < sl->n_inst; k++) {
            size_t i = sl->first_inst + (size_t)k;
            const fit *f = &b->ifit[i * nt + t];
            p->insts[i].est = f->est;
            p->insts[i].pct = f->pct;
            p->insts[i].mem_limit = sl->mode == PLAN_MODE_MIG || sl->mode == PLAN_MODE_WHOLE
                                        ? sl->mem_alloc
                                        : f->mem_alloc;
        }
    }
    /* MIG layouts: the creation order that lands them, and each slice's
     * start (equal profiles take the layout's entries in slice order). */
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        plan_gpu *g = &p->gpus[gi];
        if (g->mode != PLAN_GPU_MIG) continue;
        int ids[MIG_MAX_INSTANCES];
        size_t n = 0, who[MIG_MAX_INSTANCES];
        for (size_t s = 0; s < p->n_slices && n < MIG_MAX_INSTANCES; s++)
            if (p->slices[s].gpu == (int)gi) who[n] = s, ids[n++] = p->slices[s].gi_id;
        int rc = mig_place(ids, n, g->gi);
        if (rc) return rc;          /* the packer only accepts layouts that exist */
        g->n_gi = (int)n;
        char taken[MIG_MAX_INSTANCES] = {0};
        for (size_t k = 0; k < n; k++)
            for (size_t j = 0; j < n; j++)
                if (!taken[j] && p->slices[who[j]].gi_id == g->gi[k].gi_id) {
                    taken[j] = 1;
                    p->slices[who[j]].gi_start = g->gi[k].start;
                    break;
                }
    }
    plan_tally(p);
    return 0;
}

void plan_tally(plan *p) {
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        plan_gpu *g = &p->gpus[gi];
        g->mode = PLAN_GPU_IDLE;
        g->share_pct = g->mem_alloc = g->mem_need = 0;
    }
    for (size_t s = 0; s < p->n_slices; s++) {
        const plan_slice *sl = &p->slices[s];
        if (sl->gpu < 0) continue;
        plan_gpu *g = &p->gpus[sl->gpu];
        g->mode = gpu_mode_of(sl->mode);
        if (sl->mode == PLAN_MODE_MPS || sl->mode == PLAN_MODE_TIMESLICE) g->share_pct += sl->pct;
        g->mem_alloc += sl->mem_alloc;
        for (int k = 0; k < sl->n_inst; k++) g->mem_need += p->insts[sl->first_inst + (size_t)k].est.need_bytes;
    }
    p->gpus_used = 0;
    p->mem_alloc = p->mem_need = p->mem_capacity = 0;
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        const plan_gpu *g = &p->gpus[gi];
        if (g->mode == PLAN_GPU_IDLE) continue;
        p->gpus_used++;
        p->mem_alloc += g->mem_alloc;
        p->mem_need += g->mem_need;
        p->mem_capacity += p->types[g->type]->mem_gib * GIB;
    }
}

/* Why worker w's unplaced slices found no GPU, as "what; fix: what would",
 * naming the types it fits, whether other types sit idle, and how many
 * GPUs its unplaced slices need at least (their larger per-dimension sum
 * on the first type they fit, rounded up). */
static void capacity_text(const builder *b, size_t w, int placed, int total, char *what, size_t wcap, char *fix,
                          size_t fcap) {
    const plan *p = b->p;
    size_t nt = p->n_types;
    char ok[PLAN_MAX_TYPES] = {0}, types[256] = "";
    double dim[2] = {0, 0};
    size_t first_ok = nt;
    for (size_t i = 0; i < p->n_insts; i++) {
        if (p->insts[i].worker != (int)w) continue;
        size_t s = p->insts[i].slice;
        for (size_t t = 0; t < nt; t++) ok[t] |= (char)b->ssize[s * nt + t].ok;
        if (p->slices[s].gpu >= 0 || p->slices[s].first_inst != i) continue;
        for (size_t t = 0; t < nt && first_ok == nt; t++)
            if (b->ssize[s * nt + t].ok) first_ok = t;
        if (first_ok == nt) continue;
        const pack_size *z = &b->ssize[s * nt + first_ok];
        const mig_geom *g = mig_geom_find(z->gi_id);
        switch (p->slices[s].mode) {
        case PLAN_MODE_MIG:
        case PLAN_MODE_MIG_MPS:
            dim[0] += g ? (double)g->mem / MIG_MEM_SLICES : 1;
            dim[1] += g ? (double)g->compute / MIG_COMPUTE_SLICES : 1;
            break;
        case PLAN_MODE_MPS:
        case PLAN_MODE_TIMESLICE:
            dim[0] += z->pct / 100.0;
            dim[1] += z->mem / (p->types[first_ok]->mem_gib * GIB);
            break;
        default:
            dim[0] += 1;
        }
    }
    int idle_other = 0;
    for (size_t g = 0; g < p->n_gpus; g++) idle_other += p->gpus[g].mode == PLAN_GPU_IDLE && !ok[p->gpus[g].type];
    size_t len = 0;
    for (size_t t = 0; t < nt && len < sizeof types; t++)
        if (ok[t]) {
            int k = snprintf(types + len, sizeof types - len, "%s%s", len ? ", " : "", p->types[t]->name);
            if (k > 0) len += (size_t)k;
        }
    int need = (int)ceil((dim[0] > dim[1] ? dim[0] : dim[1]) - 1e-6);
    if (need < 1) need = 1;
    char idle[128] = "";
    if (idle_other) snprintf(idle, sizeof idle, "; %d GPUs of other types are idle, too small or too slow for it", idle_other);
    snprintf(what, wcap, "capacity: %d of %d instance%s not placed: no room left on the GPUs it fits (%s)%s",
             total - placed, total, total > 1 ? "s" : "", types, idle);
    snprintf(fix, fcap, "add at least %d GPU%s of type %s, %sor lower the load", need, need > 1 ? "s" : "",
             first_ok < nt ? p->types[first_ok]->name : types, idle_other ? "relax its targets so other types qualify, " : "");
}

/* Per tenant: prediction, or a capacity problem for unplaced workers. */
static int judge(const builder *b) {
    plan *p = b->p;
    int rc;
    for (size_t w = 0; w < p->n_workers; w++) {
        const plan_worker *pw = &p->workers[w];
        if (pw->replicas == 0) continue;
        int placed = 0, total = 0;
        for (size_t i = 0; i < p->n_insts; i++) {
            if (p->insts[i].worker != (int)w) continue;
            total++;
            placed += p->slices[p->insts[i].slice].gpu >= 0;
        }
        char what[PLAN_TEXT_MAX], fix[PLAN_TEXT_MAX];
        if (placed < total) capacity_text(b, w, placed, total, what, sizeof what, fix, sizeof fix);
        for (size_t k = 0; k < pw->n_tenants; k++) {
            size_t t = pw->tenants[k];
            plan_result *r = &p->results[t];
            r->worker = (int)w;
            r->ok = placed == total;
            if (r->ok) continue;
            char name[256];
            who(p, pw, t, name, sizeof name);
            if ((rc = add_problem(p, (int)t, PLAN_WHY_CAPACITY, "%s: %s; fix: %s", name, what, fix))) return rc;
        }
    }
    plan_predict(p);
    p->feasible = p->n_problems == 0;
    for (size_t t = 0; t < p->in->n_tenants; t++)
        if (!p->results[t].ok) p->feasible = 0;
    return 0;
}

/* Advice: strict tenants of one model in separate workers each hold a copy
 * of the weights and round up to a profile of their own; say what that
 * costs, since sharing one worker (or one strict group) would not. */
static int advise(plan *p) {
    for (size_t m = 0; m < p->in->n_models; m++) {
        size_t n = 0;
        double alloc = 0, need = 0;
        char names[256] = "";
        size_t len = 0;
        for (size_t w = 0; w < p->n_workers; w++) {
            const plan_worker *pw = &p->workers[w];
            if (pw->model != (int)m || pw->mode != PLAN_MODE_MIG || pw->replicas == 0) continue;
            n++;
            for (int r = 0; r < pw->replicas; r++) {
                const plan_inst *in = &p->insts[pw->first_inst + (size_t)r];
                const plan_slice *sl = &p->slices[in->slice];
                if (sl->gpu < 0) continue;
                alloc += sl->mem_alloc;
                need += in->est.need_bytes;
            }
            if (len < sizeof names - 1) {
                int k = snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", pw->name);
                if (k > 0) len += (size_t)k;
                if (len >= sizeof names) len = sizeof names - 1;
            }
        }
        if (n < 2) continue;
        const plan_model *pm = &p->in->models[m];
        int rc = add_note(p,
                          "%zu strict workers run %s (%s): %zu copies of %.1f GB of weights, %.1f GB "
                          "allocated for %.1f GB needed; tenants that may share could use one worker "
                          "(isolation: shared, or one strict group) and hold the weights once",
                          n, pm->name, names, n, perf_weight_bytes(&pm->m) / GB, alloc / GB, need / GB);
        if (rc) return rc;
    }
    return 0;
}

/* After round one: mark the workers with unplaced slices for spreading
 * when some GPU is still idle, and undo round one (slices, instances, the
 * problems sizing found, the modes merging set). Returns 1 if a second
 * round is worth running. */
static int respread(builder *b) {
    plan *p = b->p;
    int any = 0, idle = 0;
    char *used = calloc(p->n_gpus ? p->n_gpus : 1, 1);
    if (!used) return 0;
    for (size_t s = 0; s < p->n_slices; s++)
        if (p->slices[s].gpu >= 0) used[p->slices[s].gpu] = 1;
    for (size_t g = 0; g < p->n_gpus; g++) idle |= !used[g];
    free(used);
    if (!idle) return 0;
    for (size_t s = 0; s < p->n_slices; s++) {
        if (p->slices[s].gpu >= 0) continue;
        const plan_slice *sl = &p->slices[s];
        for (int k = 0; k < sl->n_inst; k++) {
            int w = p->insts[sl->first_inst + (size_t)k].worker;
            if (!b->spread[w]) b->spread[w] = 1, any = 1;
        }
    }
    if (!any) return 0;
    p->n_slices = p->n_insts = 0;
    p->n_problems = 0;
    p->exact_ran = p->exact_proven = p->used_exact = 0;
    p->exact_nodes = 0;
    p->exact_gpus = p->heuristic_gpus = 0;
    p->heuristic_unplaced = p->exact_unplaced = 0;
    for (size_t w = 0; w < p->n_workers; w++) {
        plan_worker *pw = &p->workers[w];
        pw->replicas = 1;
        pw->first_inst = 0;
        if (pw->mode == PLAN_MODE_MIG_MPS) pw->mode = PLAN_MODE_MIG;
    }
    return 1;
}

/* ---- build -------------------------------------------------------------------- */

static int check_input(const plan_input *in) {
    if (!in || in->n_pools == 0 || in->n_tiers == 0) return TS_ERR_INVAL;
    for (size_t i = 0; i < in->n_pools; i++)
        if (!in->pools[i].gpu || in->pools[i].gpus_per_node < 1 || in->pools[i].nodes < 1 ||
            !(in->pools[i].price_per_hour >= 0) || in->pools[i].n_mig_prices < 0 ||
            in->pools[i].n_mig_prices > GPUCAT_MIG_MAX)
            return TS_ERR_INVAL;
    for (size_t i = 0; i < in->n_models; i++) {
        const perf_model *m = &in->models[i].m;
        if (!(m->params > 0) || !(m->weight_bytes > 0) || !(m->kv_bytes > 0) || m->layers < 1 ||
            m->kv_heads < 1 || m->head_dim < 1 || m->max_context < 0)
            return TS_ERR_INVAL;
    }
    for (size_t i = 0; i < in->n_tenants; i++) {
        const plan_tenant *t = &in->tenants[i];
        if (t->model < 0 || (size_t)t->model >= in->n_models || t->tier < 0 ||
            (size_t)t->tier >= in->n_tiers || t->iso < 0 || t->iso > PLAN_ISO_BEST_EFFORT ||
            !(t->load.rps >= 0) || !(t->load.prompt >= 0) || !(t->load.output >= 0) ||
            !(t->headroom == 0 || (t->headroom >= 1 && t->headroom <= 100)))
            return TS_ERR_INVAL;
    }
    return 0;
}

int plan_fleet_init(const plan_input *in, plan *p) {
    size_t n_nodes = 0, n_gpus = 0;
    p->in = in;
    for (size_t i = 0; i < in->n_pools; i++) {
        const plan_pool *pl = &in->pools[i];
        if (!pl->gpu) return TS_ERR_INVAL;
        size_t t = 0;
        while (t < p->n_types && p->types[t] != pl->gpu) t++;
        if (t == p->n_types) {
            if (p->n_types == PLAN_MAX_TYPES) return TS_ERR_INVAL;
            p->types[p->n_types++] = pl->gpu;
        }
        n_nodes += (size_t)pl->nodes;
        n_gpus += (size_t)pl->nodes * (size_t)pl->gpus_per_node;
    }
    p->nodes = calloc(n_nodes ? n_nodes : 1, sizeof *p->nodes);
    p->gpus = calloc(n_gpus ? n_gpus : 1, sizeof *p->gpus);
    p->results = calloc(in->n_tenants ? in->n_tenants : 1, sizeof *p->results);
    if (!p->nodes || !p->gpus || !p->results) return TS_ERR_NOMEM;
    for (size_t i = 0; i < in->n_pools; i++) {
        const plan_pool *pl = &in->pools[i];
        int t = 0;
        while (p->types[t] != pl->gpu) t++;
        for (int k = 0; k < pl->nodes; k++) {
            plan_node *nd = &p->nodes[p->n_nodes];
            snprintf(nd->name, sizeof nd->name, "%s-%d", pl->name, k);
            nd->pool = (int)i;
            nd->first_gpu = p->n_gpus;
            nd->n_gpus = pl->gpus_per_node;
            for (int g = 0; g < pl->gpus_per_node; g++) {
                plan_gpu *pg = &p->gpus[p->n_gpus++];
                pg->node = (int)p->n_nodes;
                pg->index = g;
                pg->type = t;
            }
            p->n_nodes++;
        }
    }
    for (size_t t = 0; t < in->n_tenants; t++) p->results[t].worker = -1;
    return 0;
}

int plan_build(const plan_input *in, plan *p) {
    if (!p) return TS_ERR_INVAL;
    memset(p, 0, sizeof *p);
    int rc = check_input(in);
    if (rc) return rc;
    builder b = {p, NULL, NULL, NULL, 0, 0, NULL, 0};
    /* (1) Fleet: types in fleet order, then nodes and their GPUs. */
    if ((rc = plan_fleet_init(in, p))) goto err;
    int has_mig = 0;
    for (size_t t = 0; t < p->n_types; t++) has_mig |= p->types[t]->n_mig > 0;
    /* (2) Workers; (3) sizing; (4) packing; (5) the rest. */
    if ((rc = make_workers(p, has_mig))) goto err;
    b.has_mig = has_mig;
    if (!(b.spread = calloc(p->n_workers ? p->n_workers : 1, 1))) {
        rc = TS_ERR_NOMEM;
        goto err;
    }
    /* Round one sizes each worker for its fastest type. If that leaves
     * slices without a GPU while GPUs idle, round two sizes those workers
     * for every type they can use and packs again. */
    for (int round = 0; round < 2; round++) {
        if ((rc = size_workers(&b))) goto err;
        if ((rc = place(&b))) goto err;
        if (round == 1 || !respread(&b)) break;
    }
    if ((rc = finish(&b))) goto err;
    if ((rc = judge(&b))) goto err;
    if ((rc = advise(p))) goto err;
    free(b.ifit);
    free(b.ssize);
    free(b.salloc);
    free(b.spread);
    return 0;
err:
    free(b.ifit);
    free(b.ssize);
    free(b.salloc);
    free(b.spread);
    plan_free(p);
    return rc;
}

void plan_free(plan *p) {
    if (!p) return;
    for (size_t w = 0; w < p->n_workers; w++) free(p->workers[w].tenants);
    for (size_t i = 0; i < p->n_notes; i++) free(p->notes[i]);
    free(p->workers);
    free(p->nodes);
    free(p->gpus);
    free(p->slices);
    free(p->insts);
    free(p->results);
    free(p->problems);
    free(p->notes);
    memset(p, 0, sizeof *p);
}

const gpucat_gpu *plan_slice_type(const plan *p, const plan_slice *s) {
    if (s->gpu < 0) return NULL;
    return p->types[p->gpus[s->gpu].type];
}

const char *plan_slice_profile(const plan *p, const plan_slice *s) {
    const gpucat_gpu *g = plan_slice_type(p, s);
    if (!g || (s->mode != PLAN_MODE_MIG && s->mode != PLAN_MODE_MIG_MPS)) return "";
    const gpucat_mig *m = gpucat_mig_by_id(g, s->gi_id);
    return m ? m->name : "";
}

/* ---- exports for the simulator and the reports -------------------------------- */

int plan_inst_slice(const plan *p, const plan_inst *i, perf_slice *out) {
    const plan_slice *s = &p->slices[i->slice];
    const gpucat_gpu *g = plan_slice_type(p, s);
    if (!g) return TS_ERR_INVAL;
    const perf_model *m = &p->in->models[p->workers[i->worker].model].m;
    switch (s->mode) {
    case PLAN_MODE_MIG:
    case PLAN_MODE_MIG_MPS: {
        const gpucat_mig *pr = gpucat_mig_by_id(g, s->gi_id);
        if (!pr) return TS_ERR_INVAL;
        *out = slice_mig(g, pr, m);
        if (s->mode == PLAN_MODE_MIG_MPS) *out = share_of(*out, i->pct);
        return 0;
    }
    case PLAN_MODE_MPS:
    case PLAN_MODE_TIMESLICE: *out = share_of(slice_share(g, 100, m), s->pct); return 0;
    default: *out = slice_share(g, 100, m); return 0;
    }
}

/* A MIG GI's default price: the GPU's price x its compute slices / 7.
 * Compute slices, not memory slices, because they partition the GPU
 * exactly: seven 1g instances are the whole GPU and cost its price, where
 * eighths of memory would leave a full 7 x 1g layout charging 7/8 of it;
 * a pool whose memory is the scarcer resource overrides with mig_prices. */
static double gi_price(const plan_pool *pl, const gpucat_gpu *g, int gi_id) {
    const gpucat_mig *pr = gpucat_mig_by_id(g, gi_id);
    for (int k = 0; pr && k < pl->n_mig_prices; k++)
        if (strcasecmp(pl->mig_prices[k].profile, pr->name) == 0) return pl->mig_prices[k].price;
    const mig_geom *geo = mig_geom_find(gi_id);
    return geo ? pl->price_per_hour * geo->compute / MIG_COMPUTE_SLICES : 0.0;
}

/* Instance i's part of its MIG+MPS GI: its share over the sum of the
 * GI's shares, not over 100. group_gi floors the grown shares, so three
 * members at 33% sum to 99, and the GI's clients must still pay all of
 * it: nobody else can use the remaining 1%. Equal parts when no member
 * has a share (a plan read back refuses that; plan_build never makes it). */
static double gi_part(const plan *p, const plan_slice *s, const plan_inst *i) {
    double sum = 0.0;
    for (int k = 0; k < s->n_inst; k++) sum += p->insts[s->first_inst + (size_t)k].pct;
    return sum > 0.0 ? i->pct / sum : 1.0 / (double)(s->n_inst > 0 ? s->n_inst : 1);
}

double plan_inst_price(const plan *p, const plan_inst *i) {
    const plan_slice *s = &p->slices[i->slice];
    if (s->gpu < 0) return 0.0;
    const plan_gpu *g = &p->gpus[s->gpu];
    const plan_pool *pl = &p->in->pools[p->nodes[g->node].pool];
    switch (s->mode) {
    case PLAN_MODE_MIG: return gi_price(pl, p->types[g->type], s->gi_id);
    case PLAN_MODE_MIG_MPS: return gi_price(pl, p->types[g->type], s->gi_id) * gi_part(p, s, i);
    case PLAN_MODE_MPS:
    case PLAN_MODE_TIMESLICE: return pl->price_per_hour * s->pct / 100.0;
    default: return pl->price_per_hour;
    }
}

double plan_tenant_share(const plan *p, size_t t) {
    const plan_result *r = &p->results[t];
    if (r->worker < 0) return 0.0;
    const plan_worker *w = &p->workers[r->worker];
    return w->load.rps > 0 ? p->in->tenants[t].load.rps / w->load.rps
                           : 1.0 / (double)(w->n_tenants ? w->n_tenants : 1);
}

double plan_tenant_cost(const plan *p, size_t t) {
    const plan_result *r = &p->results[t];
    if (r->worker < 0) return 0.0;
    const plan_worker *w = &p->workers[r->worker];
    double price = 0.0;
    for (int k = 0; k < w->replicas; k++) price += plan_inst_price(p, &p->insts[w->first_inst + (size_t)k]);
    return price * plan_tenant_share(p, t);
}

int plan_inst_estimate(const plan *p, const plan_inst *i, perf_est *out) {
    perf_slice s;
    int rc = plan_inst_slice(p, i, &s);
    if (rc) return rc;
    const plan_worker *w = &p->workers[i->worker];
    perf_load l = w->sized;         /* as sized: the rates x headroom */
    l.rps = w->sized.rps / (w->replicas > 0 ? w->replicas : 1);    /* as fits_at splits it */
    perf_estimate(&p->in->models[w->model].m, &s, &l, &p->in->perf, out);
    return 0;
}

void plan_predict(plan *p) {
    for (size_t t = 0; t < p->in->n_tenants; t++) {
        plan_result *r = &p->results[t];
        r->ttft_s = r->ttft_p99_s = r->tpot_s = 0;
        if (r->worker < 0) continue;
        for (size_t i = 0; i < p->n_insts; i++) {
            const plan_inst *in = &p->insts[i];
            if (in->worker != r->worker || p->slices[in->slice].gpu < 0) continue;
            r->ttft_s = in->est.ttft_s;
            r->ttft_p99_s = in->est.ttft_p99_s;
            r->tpot_s = in->est.step_s;
            break;
        }
    }
}

double plan_price(const plan *p) {
    double sum = 0.0;
    for (size_t i = 0; i < p->n_insts; i++) sum += plan_inst_price(p, &p->insts[i]);
    return sum;
}

/* ---- checks for plans read back (planjson.h) ---------------------------------- */

int plan_inst_check(const plan *p, const plan_inst *i) {
    perf_slice s;
    if (plan_inst_slice(p, i, &s)) return TS_ERR_INVAL;
    sizing z = worker_sizing(p, &p->workers[i->worker]);
    if (z.mode == PLAN_MODE_TIMESLICE) z.ttft_s = z.tpot_s = 0;     /* best effort, as size_on */
    return perf_check(&i->est, &s, &p->in->perf, z.ttft_s, z.tpot_s);
}

int plan_tenants_share_worker(const plan_input *in, size_t a, size_t b) {
    char ka[PLAN_NAME_MAX * 2 + 8], kb[PLAN_NAME_MAX * 2 + 8];
    const plan_tenant *ta = &in->tenants[a], *tb = &in->tenants[b];
    if (ta->iso != tb->iso) return 0;
    worker_key(in, ta, ka, sizeof ka);
    worker_key(in, tb, kb, sizeof kb);
    return strcmp(ka, kb) == 0;
}

static const char *gpu_mode_name(int mode) {
    static const char *const names[] = {"idle", "MIG", "MPS", "time-slicing", "one whole-GPU slice"};
    return mode >= 0 && mode <= PLAN_GPU_WHOLE ? names[mode] : "?";
}

typedef struct gpu_seen {           /* one GPU's placed slices so far, in slice order */
    long first;                     /* its first slice, -1 = none yet */
    double share;                   /* percent */
    double mem;                     /* bytes */
} gpu_seen;

/* What slice s adds to its GPU that cannot exist, into what; 0 if nothing. */
static int slice_fault(const plan *p, size_t s, gpu_seen *u, char *what, size_t cap) {
    const plan_slice *sl = &p->slices[s];
    const plan_gpu *g = &p->gpus[sl->gpu];
    const gpucat_gpu *ty = p->types[g->type];
    char gname[PLAN_NAME_MAX + 40];
    snprintf(gname, sizeof gname, "GPU %d (%s/%d)", sl->gpu, p->nodes[g->node].name, g->index);
    int mode = gpu_mode_of(sl->mode);
    if (u->first < 0) u->first = (long)s;
    const plan_slice *f = &p->slices[u->first];
    if (gpu_mode_of(f->mode) != mode)
        return snprintf(what, cap, "a %s slice on %s, which slices[%ld] uses for %s: a GPU runs one kind of sharing",
                        plan_mode_name(sl->mode), gname, u->first, gpu_mode_name(gpu_mode_of(f->mode))), 1;
    if (mode == PLAN_GPU_WHOLE && u->first != (long)s)
        return snprintf(what, cap, "a second whole-GPU slice on %s, after slices[%ld]", gname, u->first), 1;
    if (mode == PLAN_GPU_MPS || mode == PLAN_GPU_TIMESLICE) {
        u->share += sl->pct;
        /* Shares are whole percents from plan_build; the slack only
         * forgives the rounding of hand-written fractions. */
        if (u->share > 100.0 + 1e-9)
            return snprintf(what, cap, "%s's %s shares reach %g%%, over 100%%", gname, gpu_mode_name(mode), u->share), 1;
    }
    u->mem += sl->mem_alloc;
    double mem = ty->mem_gib * GIB;
    if (u->mem > mem * (1.0 + 1e-12))
        return snprintf(what, cap, "%s's slices take %.2f GiB of its %.2f GiB", gname, u->mem / GIB, ty->mem_gib), 1;
    if (sl->mode == PLAN_MODE_MIG_MPS) {
        double pct = 0.0;
        for (int k = 0; k < sl->n_inst; k++) pct += p->insts[sl->first_inst + (size_t)k].pct;
        if (pct > 100.0 + 1e-9)
            return snprintf(what, cap, "its MPS clients (instances %zu..%zu) take %g%% of the GI, over 100%%",
                            sl->first_inst, sl->first_inst + (size_t)sl->n_inst - 1, pct), 1;
    }
    return 0;
}

int plan_slices_check(const plan *p, size_t *slice, char *what, size_t cap) {
    gpu_seen *u = malloc((p->n_gpus ? p->n_gpus : 1) * sizeof *u);
    if (!u) return TS_ERR_NOMEM;
    for (size_t g = 0; g < p->n_gpus; g++) u[g] = (gpu_seen){-1, 0.0, 0.0};
    int rc = 0;
    for (size_t s = 0; s < p->n_slices && !rc; s++) {
        if (p->slices[s].gpu < 0) continue;
        if (slice_fault(p, s, &u[p->slices[s].gpu], what, cap)) {
            *slice = s;
            rc = TS_ERR_INVAL;
        }
    }
    free(u);
    return rc;
}
