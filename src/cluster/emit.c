/* emit.c - the plan's report and configurations; see emit.h. */
#include "emit.h"
#include "emit_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "err.h"
#include "pack.h"

#define GB 1e9

int emit_add_file(emit_out *out, strbuf *b, const char *fmt, ...) {
    emit_file *a = strbuf_failed(b) ? NULL : realloc(out->files, (out->n + 1) * sizeof *a);
    if (!a) {
        strbuf_free(b);
        return TS_ERR_NOMEM;
    }
    out->files = a;
    size_t len;
    char *data = strbuf_steal(b, &len);
    if (!data) return TS_ERR_NOMEM;
    emit_file *f = &a[out->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->path, sizeof f->path, fmt, ap);
    va_end(ap);
    f->data = data;
    f->len = len;
    return 0;
}

/* ---- common views of the plan ------------------------------------------------- */

int emit_kind_parse(const char *name) {
    for (int k = 0; k < EMIT_KINDS; k++)
        if (name && strcmp(name, emit_kind_name(k)) == 0) return k;
    return -1;
}

const char *emit_kind_name(int kind) {
    static const char *const n[EMIT_KINDS] = {"table", "json", "nvidia-smi", "mig-parted",
                                              "mps", "k8s", "serve", "gie", "kueue"};
    return kind >= 0 && kind < EMIT_KINDS ? n[kind] : "?";
}

void emit_inst_name(const plan *p, size_t i, char *buf, size_t cap) {
    const plan_inst *in = &p->insts[i];
    const plan_worker *w = &p->workers[in->worker];
    if (w->replicas > 1) snprintf(buf, cap, "%s-r%d", w->name, in->replica);
    else snprintf(buf, cap, "%s", w->name);
}

const plan_gpu *emit_inst_gpu(const plan *p, const plan_inst *in) {
    const plan_slice *s = &p->slices[in->slice];
    return s->gpu >= 0 ? &p->gpus[s->gpu] : NULL;
}

void emit_slice_desc(const plan *p, const plan_inst *in, char *buf, size_t cap) {
    const plan_slice *s = &p->slices[in->slice];
    switch (s->mode) {
    case PLAN_MODE_MIG: snprintf(buf, cap, "%s@%d", plan_slice_profile(p, s), s->gi_start); break;
    case PLAN_MODE_MIG_MPS:
        snprintf(buf, cap, "%s@%d mps %.0f%%", plan_slice_profile(p, s), s->gi_start, in->pct);
        break;
    case PLAN_MODE_MPS: snprintf(buf, cap, "mps %.0f%%", s->pct); break;
    case PLAN_MODE_TIMESLICE: snprintf(buf, cap, "timeslice %.0f%%", s->pct); break;
    default: snprintf(buf, cap, "whole GPU");
    }
}

/* The -cgi list of a MIG GPU, "9,14,19,19". */
static void cgi_list(const plan_gpu *g, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < g->n_gi && o < cap; k++) {
        int n = snprintf(buf + o, cap - o, "%s%d", k ? "," : "", g->gi[k].gi_id);
        if (n < 0) break;
        o += (size_t)n;
    }
}

static void layout_desc(const plan *p, const plan_gpu *g, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < g->n_gi && o < cap; k++) {
        const gpucat_mig *m = gpucat_mig_by_id(p->types[g->type], g->gi[k].gi_id);
        int n = snprintf(buf + o, cap - o, "%s%s@%d", k ? " " : "", m ? m->name : "?", g->gi[k].start);
        if (n < 0) break;
        o += (size_t)n;
    }
}

static const char *gpu_mode_name(int mode) {
    static const char *const n[] = {"idle", "mig", "mps", "timeslice", "whole"};
    return mode >= 0 && mode < 5 ? n[mode] : "?";
}

int emit_mps_priority(const plan *p, const plan_worker *w) {
    return p->in->tiers[w->tier].band == 0 ? 0 : 1;
}

/* Round to d decimals so JSON prints short, stable numbers. */
static double rnd(double x, int d) {
    double k = d == 0 ? 1 : d == 1 ? 10 : d == 2 ? 100 : 1000;
    return round(x * k) / k;
}

/* x to d significant digits: costs per request are fractions of a cent. */
static double sig(double x, int d) {
    if (x == 0 || !isfinite(x)) return x;
    double k = pow(10.0, d - 1 - (int)floor(log10(fabs(x))));
    return round(x * k) / k;
}

/* A tenant's costs at its planned load; per request and per 1k tokens
 * (prompt + output) are NAN when it has no arrivals. */
typedef struct cost { double hour, request, ktok; } cost;

static cost tenant_cost(const plan *p, size_t t) {
    const perf_load *l = &p->in->tenants[t].load;
    cost c = {plan_tenant_cost(p, t), NAN, NAN};
    if (l->rps > 0) {
        c.request = c.hour / (l->rps * 3600.0);
        if (l->prompt + l->output > 0) c.ktok = c.request * 1000.0 / (l->prompt + l->output);
    }
    return c;
}

/* ---- table -------------------------------------------------------------------- */

static void table_header(const plan *p, strbuf *b) {
    const plan_input *in = p->in;
    strbuf_printf(b, "tessera plan: %zu pool%s, %zu node%s, %zu GPU%s (", in->n_pools, in->n_pools == 1 ? "" : "s",
              p->n_nodes, p->n_nodes == 1 ? "" : "s", p->n_gpus, p->n_gpus == 1 ? "" : "s");
    for (size_t t = 0; t < p->n_types; t++) {
        size_t n = 0;
        for (size_t g = 0; g < p->n_gpus; g++) n += p->gpus[g].type == (int)t;
        strbuf_printf(b, "%s%s x%zu", t ? ", " : "", p->types[t]->name, n);
    }
    strbuf_printf(b, "); %zu model%s, %zu tenant%s\n", in->n_models, in->n_models == 1 ? "" : "s", in->n_tenants,
              in->n_tenants == 1 ? "" : "s");
    strbuf_printf(b, "memory in GB (1e9 bytes); latency predicted by the roofline + Little's law model,\n"
                     "the TTFT p99 by an M/G/1 queue of prompts (perf.h); prices per hour\n");
    int headroom = 0;
    for (size_t t = 0; t < in->n_tenants; t++) headroom |= plan_tenant_headroom(&in->tenants[t]) != 1.0;
    if (headroom)
        strbuf_printf(b, "tenants with headroom: their workers are sized, and predicted, at rps x headroom;\n"
                         "the rps and costs shown are at the real rates\n");
    strbuf_printf(b, "\n");
    strbuf_printf(b, "placement: first-fit decreasing %d GPU%s", p->heuristic_gpus, p->heuristic_gpus == 1 ? "" : "s");
    if (p->exact_ran) {
        strbuf_printf(b, "; exact branch and bound %d GPU%s (%s, %ld nodes)", p->exact_gpus,
                  p->exact_gpus == 1 ? "" : "s", p->exact_proven ? "optimal" : "best found, budget spent",
                  p->exact_nodes);
        if (p->used_exact && p->exact_unplaced < p->heuristic_unplaced)
            strbuf_printf(b, "\n           the exact plan is used: it places %zu slice%s the heuristic left out",
                      p->heuristic_unplaced - p->exact_unplaced,
                      p->heuristic_unplaced - p->exact_unplaced == 1 ? "" : "s");
        else if (p->used_exact && p->exact_gpus < p->heuristic_gpus)
            strbuf_printf(b, "\n           the exact plan is used: the heuristic was %d GPU%s worse",
                      p->heuristic_gpus - p->exact_gpus, p->heuristic_gpus - p->exact_gpus == 1 ? "" : "s");
        else if (p->used_exact)
            strbuf_printf(b, "\n           the exact plan is used: same GPUs, less memory in use");
        else
            strbuf_printf(b, "\n           the heuristic is %s", p->exact_proven ? "optimal" : "as good as the search found");
    } else {
        strbuf_printf(b, "; exact search skipped: %zu slices > exact_limit %d", p->n_slices, p->in->exact_limit);
    }
    /* The JSON keeps lower_frac to 3 decimals and a plan read back has only
     * that, so the table prints the same rounded value: from the exact one,
     * 4.71502 gives 4.72 where the 4.715 read back gives 4.71. */
    strbuf_printf(b, "\nlower bound: %d GPU%s (%.2f GPUs of need)\n", p->lower_bound, p->lower_bound == 1 ? "" : "s",
              rnd(p->lower_frac, 3));
}

static void table_gpus(const plan *p, strbuf *b) {
    strbuf_printf(b, "\nGPUS\n%-14s %3s  %-10s %-9s %7s %7s  %s\n", "node", "gpu", "type", "mode", "alloc", "need",
              "layout / shares");
    size_t idle = 0;
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        const plan_gpu *g = &p->gpus[gi];
        if (g->mode == PLAN_GPU_IDLE) {
            idle++;
            continue;
        }
        char what[256] = "";
        if (g->mode == PLAN_GPU_MIG) {
            char lay[160], cgi[64];
            layout_desc(p, g, lay, sizeof lay);
            cgi_list(g, cgi, sizeof cgi);
            snprintf(what, sizeof what, "%s (-cgi %s)", lay, cgi);
        } else if (g->mode == PLAN_GPU_MPS || g->mode == PLAN_GPU_TIMESLICE) {
            size_t o = 0;
            int n = 0;
            for (size_t s = 0; s < p->n_slices && o < sizeof what; s++)
                if (p->slices[s].gpu == (int)gi) {
                    int k = snprintf(what + o, sizeof what - o, "%s%.0f%%", n++ ? " + " : "", p->slices[s].pct);
                    if (k > 0) o += (size_t)k;
                }
            if (o < sizeof what) {
                if (n > 1) snprintf(what + o, sizeof what - o, " = %.0f%% (%d clients)", g->share_pct, n);
                else snprintf(what + o, sizeof what - o, " (1 client)");
            }
        } else {
            snprintf(what, sizeof what, "one instance");
        }
        strbuf_printf(b, "%-14s %3d  %-10s %-9s %7.1f %7.1f  %s\n", p->nodes[g->node].name, g->index,
                  p->types[g->type]->name, gpu_mode_name(g->mode), g->mem_alloc / GB, g->mem_need / GB, what);
    }
    if (idle) strbuf_printf(b, "(%zu GPU%s idle)\n", idle, idle == 1 ? "" : "s");
}

static void table_insts(const plan *p, strbuf *b) {
    strbuf_printf(b, "\nINSTANCES\n%-26s %-9s %-16s %-20s %7s %7s %7s %7s %5s %8s %8s %8s %5s %8s\n", "instance",
              "mode", "node/gpu", "slice", "alloc", "need", "weights", "kv", "seqs", "ttft ms", "p99 ms", "tpot ms",
              "util", "$/hour");
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_worker *w = &p->workers[in->worker];
        char name[80], where[96], slice[64];
        emit_inst_name(p, i, name, sizeof name);
        const plan_gpu *g = emit_inst_gpu(p, in);
        if (!g) {
            strbuf_printf(b, "%-26s %-9s %-16s (not placed)\n", name, plan_mode_name(w->mode), "-");
            continue;
        }
        snprintf(where, sizeof where, "%s/%d", p->nodes[g->node].name, g->index);
        emit_slice_desc(p, in, slice, sizeof slice);
        const perf_est *e = &in->est;
        strbuf_printf(b, "%-26s %-9s %-16s %-20s %7.1f %7.1f %7.1f %7.1f %5d %8.1f %8.1f %8.1f %5.2f %8.3f\n", name,
                  plan_mode_name(w->mode), where, slice, in->mem_limit / GB, e->need_bytes / GB,
                  e->weight_bytes / GB, e->kv_bytes / GB, e->seqs, e->ttft_s * 1e3, e->ttft_p99_s * 1e3,
                  e->step_s * 1e3, e->util, plan_inst_price(p, in));
    }
}

static void target_str(double pred_s, double target_ms, int have, char *buf, size_t cap) {
    if (!have) snprintf(buf, cap, "-");
    else if (target_ms > 0) snprintf(buf, cap, "%.0f / %.0f", pred_s * 1e3, target_ms);
    else snprintf(buf, cap, "%.0f / -", pred_s * 1e3);
}

static void table_tenants(const plan *p, strbuf *b) {
    strbuf_printf(b, "\nTENANTS\n%-16s %-16s %-8s %-11s %-26s %7s %9s %13s %13s %9s %10s  %s\n", "tenant", "model",
              "tier", "isolation", "worker", "rps", "ttft mean", "ttft p99/t", "tpot ms p/t", "$/req", "$/1k tok",
              "status");
    for (size_t t = 0; t < p->in->n_tenants; t++) {
        const plan_tenant *tn = &p->in->tenants[t];
        const plan_result *r = &p->results[t];
        const plan_tier *tr = &p->in->tiers[tn->tier];
        char mean[32], ttft[32], tpot[32], req[32] = "-", ktok[32] = "-";
        int have = r->worker >= 0 && (r->ttft_s > 0 || r->tpot_s > 0);
        if (have) snprintf(mean, sizeof mean, "%.0f", r->ttft_s * 1e3);
        else snprintf(mean, sizeof mean, "-");
        target_str(r->ttft_p99_s, tn->iso == PLAN_ISO_BEST_EFFORT ? 0 : tr->ttft_ms, have, ttft, sizeof ttft);
        target_str(r->tpot_s, tn->iso == PLAN_ISO_BEST_EFFORT ? 0 : tr->tpot_ms, have, tpot, sizeof tpot);
        cost c = tenant_cost(p, t);
        if (c.hour > 0 && isfinite(c.request)) snprintf(req, sizeof req, "%.6f", c.request);
        if (c.hour > 0 && isfinite(c.ktok)) snprintf(ktok, sizeof ktok, "%.6f", c.ktok);
        const char *status = r->ok ? (tn->iso == PLAN_ISO_BEST_EFFORT ? "ok (best effort)" : "ok") : "INFEASIBLE";
        /* rps is the real rate; the predictions are at the sized one. */
        char sized[64] = "";
        if (plan_tenant_headroom(tn) != 1.0)
            snprintf(sized, sizeof sized, "; sized for %gx its load", plan_tenant_headroom(tn));
        strbuf_printf(b, "%-16s %-16s %-8s %-11s %-26s %7.2f %9s %13s %13s %9s %10s  %s%s\n", tn->name,
                  p->in->models[tn->model].name, tr->name, plan_iso_name(tn->iso),
                  r->worker >= 0 ? p->workers[r->worker].name : "-", tn->load.rps, mean, ttft, tpot, req, ktok,
                  status, sized);
    }
}

static void table_totals(const plan *p, strbuf *b) {
    size_t served = 0;
    for (size_t t = 0; t < p->in->n_tenants; t++) served += p->results[t].ok;
    double waste = p->mem_alloc - p->mem_need;
    strbuf_printf(b, "\nTOTALS\nGPUs used %d of %zu (lower bound %d); tenants served %zu of %zu\n", p->gpus_used, p->n_gpus,
              p->lower_bound, served, p->in->n_tenants);
    strbuf_printf(b, "memory: allocated %.1f, needed %.1f, waste %.1f (%.1f%% of allocated); GPUs used hold %.1f\n",
              p->mem_alloc / GB, p->mem_need / GB, waste / GB, p->mem_alloc > 0 ? 100.0 * waste / p->mem_alloc : 0.0,
              p->mem_capacity / GB);
    double price = plan_price(p);
    if (price > 0) strbuf_printf(b, "price: %.2f per hour for the instances placed\n", price);
    strbuf_printf(b, "verdict: %s (TTFT checked at p%.0f)\n", p->feasible ? "feasible" : "INFEASIBLE",
                  PERF_TTFT_Q * 100);
    if (p->n_problems) {
        strbuf_printf(b, "\nPROBLEMS\n");
        for (size_t i = 0; i < p->n_problems; i++) strbuf_printf(b, "- %s\n", p->problems[i].text);
    }
    if (p->n_notes) {
        strbuf_printf(b, "\nNOTES\n");
        for (size_t i = 0; i < p->n_notes; i++) strbuf_printf(b, "- %s\n", p->notes[i]);
    }
}

static int emit_table(const plan *p, emit_out *out) {
    strbuf b = STRBUF_INIT;
    table_header(p, &b);
    table_gpus(p, &b);
    table_insts(p, &b);
    table_tenants(p, &b);
    table_totals(p, &b);
    return emit_add_file(out, &b, "plan.txt");
}

/* ---- json --------------------------------------------------------------------- */

/* The machine part of the JSON: what planjson_read needs to rebuild the
 * input and the plan. Numbers are written unrounded, in the fewest digits
 * that read back to the same bits: cJSON's own printing accepts a digit
 * string within an epsilon of the value, which can lose the last bit, and
 * a plan read back must compute exactly what the plan computed. */

static void add_exact(cJSON *o, const char *key, double v) {
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    cJSON_AddRawToObject(o, key, buf);
}

static cJSON *json_load(cJSON *o, const perf_load *l) {
    cJSON *ld = cJSON_AddObjectToObject(o, "load");
    add_exact(ld, "rps", l->rps);
    add_exact(ld, "prompt_tokens", l->prompt);
    add_exact(ld, "output_tokens", l->output);
    add_exact(ld, "prompt_cv", l->prompt_cv);
    return ld;
}

static void json_input(const plan_input *in, cJSON *root) {
    cJSON *o = cJSON_AddObjectToObject(root, "input");
    cJSON *a = cJSON_AddArrayToObject(o, "pools");
    for (size_t i = 0; i < in->n_pools; i++) {
        const plan_pool *pl = &in->pools[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "name", pl->name);
        cJSON_AddStringToObject(e, "gpu", pl->gpu->name);
        add_exact(e, "gpus_per_node", pl->gpus_per_node);
        add_exact(e, "nodes", pl->nodes);
        add_exact(e, "price_per_hour", pl->price_per_hour);
        cJSON *mp = cJSON_AddObjectToObject(e, "mig_prices");
        for (int k = 0; k < pl->n_mig_prices; k++)
            add_exact(mp, pl->mig_prices[k].profile, pl->mig_prices[k].price);
    }
    a = cJSON_AddArrayToObject(o, "models");
    for (size_t i = 0; i < in->n_models; i++) {
        const plan_model *pm = &in->models[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "name", pm->name);
        cJSON_AddStringToObject(e, "path", pm->path);
        add_exact(e, "params", pm->m.params);
        add_exact(e, "dtype_bytes", pm->m.weight_bytes);
        add_exact(e, "kv_dtype_bytes", pm->m.kv_bytes);
        add_exact(e, "layers", pm->m.layers);
        add_exact(e, "heads", pm->m.heads);
        add_exact(e, "kv_heads", pm->m.kv_heads);
        add_exact(e, "head_dim", pm->m.head_dim);
        add_exact(e, "max_context", pm->m.max_context);
    }
    a = cJSON_AddArrayToObject(o, "tiers");
    for (size_t i = 0; i < in->n_tiers; i++) {
        const plan_tier *tr = &in->tiers[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "name", tr->name);
        add_exact(e, "ttft_ms", tr->ttft_ms);
        add_exact(e, "tpot_ms", tr->tpot_ms);
        add_exact(e, "band", tr->band);
        add_exact(e, "min_share", tr->min_share);
        add_exact(e, "max_queue_ms", tr->max_queue_ms);
    }
    a = cJSON_AddArrayToObject(o, "tenants");
    for (size_t i = 0; i < in->n_tenants; i++) {
        const plan_tenant *t = &in->tenants[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "model", in->models[t->model].name);
        cJSON_AddStringToObject(e, "tier", in->tiers[t->tier].name);
        cJSON_AddStringToObject(e, "isolation", plan_iso_name(t->iso));
        cJSON_AddStringToObject(e, "group", t->group);
        cJSON_AddStringToObject(e, "profile", t->profile);
        cJSON_AddStringToObject(e, "key_sha256", t->key_sha256);
        add_exact(e, "weight", t->weight);
        cJSON *ld = json_load(e, &t->load);
        /* Only where set, so plans without headroom keep their bytes. */
        if (plan_tenant_headroom(t) != 1.0) add_exact(ld, "headroom", plan_tenant_headroom(t));
    }
    const perf_opts *po = &in->perf;
    cJSON *op = cJSON_AddObjectToObject(o, "options");
    add_exact(op, "compute_efficiency", po->eff_compute);
    add_exact(op, "bandwidth_efficiency", po->eff_bw);
    add_exact(op, "step_overhead_s", po->step_overhead_s);
    add_exact(op, "max_utilization", po->max_util);
    add_exact(op, "kv_quantile_z", po->kv_z);
    add_exact(op, "headroom", po->headroom);
    add_exact(op, "reserve_bytes", po->reserve_bytes);
    add_exact(op, "tpot_bound_s", po->tpot_bound_s);
    add_exact(op, "max_replicas", in->max_replicas);
    add_exact(op, "exact_limit", in->exact_limit);
    add_exact(op, "exact_budget", (double)in->exact_budget);
}

static void json_workers(const plan *p, cJSON *root) {
    cJSON *a = cJSON_AddArrayToObject(root, "workers");
    for (size_t w = 0; w < p->n_workers; w++) {
        const plan_worker *pw = &p->workers[w];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "name", pw->name);
        cJSON_AddStringToObject(e, "model", p->in->models[pw->model].name);
        cJSON_AddStringToObject(e, "isolation", plan_iso_name(pw->iso));
        cJSON_AddStringToObject(e, "mode", plan_mode_name(pw->mode));
        cJSON_AddStringToObject(e, "tier", p->in->tiers[pw->tier].name);
        cJSON *tn = cJSON_AddArrayToObject(e, "tenants");
        for (size_t k = 0; k < pw->n_tenants; k++)
            cJSON_AddItemToArray(tn, cJSON_CreateString(p->in->tenants[pw->tenants[k]].name));
        add_exact(e, "replicas", pw->replicas);
        add_exact(e, "first_inst", (double)pw->first_inst);
        json_load(e, &pw->load);
        add_exact(e, "ttft_target_s", pw->ttft_s);
        add_exact(e, "tpot_target_s", pw->tpot_s);
        add_exact(e, "tpot_sized_s", pw->tpot_sized_s);
    }
}

static void json_slices(const plan *p, cJSON *root) {
    cJSON *a = cJSON_AddArrayToObject(root, "slices");
    for (size_t s = 0; s < p->n_slices; s++) {
        const plan_slice *sl = &p->slices[s];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(a, e);
        cJSON_AddStringToObject(e, "mode", plan_mode_name(sl->mode));
        add_exact(e, "gpu", sl->gpu);
        add_exact(e, "gi_id", sl->gi_id);
        add_exact(e, "gi_start", sl->gi_start);
        add_exact(e, "pct", sl->pct);
        add_exact(e, "mem_alloc_bytes", sl->mem_alloc);
        add_exact(e, "first_inst", (double)sl->first_inst);
        add_exact(e, "n_inst", sl->n_inst);
    }
}

static int emit_json(const plan *p, emit_out *out) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return TS_ERR_NOMEM;
    cJSON *pl = cJSON_AddObjectToObject(root, "placement");
    cJSON_AddNumberToObject(pl, "heuristic_gpus", p->heuristic_gpus);
    cJSON_AddBoolToObject(pl, "exact_ran", p->exact_ran);
    if (p->exact_ran) {
        cJSON_AddNumberToObject(pl, "exact_gpus", p->exact_gpus);
        cJSON_AddBoolToObject(pl, "exact_proven", p->exact_proven);
        cJSON_AddNumberToObject(pl, "exact_nodes", (double)p->exact_nodes);
    }
    cJSON_AddStringToObject(pl, "method", p->used_exact ? "exact" : "heuristic");
    cJSON_AddNumberToObject(pl, "heuristic_unplaced", (double)p->heuristic_unplaced);
    if (p->exact_ran) cJSON_AddNumberToObject(pl, "exact_unplaced", (double)p->exact_unplaced);
    cJSON_AddNumberToObject(pl, "lower_bound", p->lower_bound);
    cJSON_AddNumberToObject(pl, "lower_bound_frac", rnd(p->lower_frac, 3));

    cJSON *gpus = cJSON_AddArrayToObject(root, "gpus");
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        const plan_gpu *g = &p->gpus[gi];
        if (g->mode == PLAN_GPU_IDLE) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(gpus, o);
        cJSON_AddStringToObject(o, "node", p->nodes[g->node].name);
        cJSON_AddNumberToObject(o, "index", g->index);
        cJSON_AddStringToObject(o, "type", p->types[g->type]->name);
        cJSON_AddStringToObject(o, "mode", gpu_mode_name(g->mode));
        if (g->mode == PLAN_GPU_MIG) {
            cJSON *lay = cJSON_AddArrayToObject(o, "layout");
            for (int k = 0; k < g->n_gi; k++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddItemToArray(lay, e);
                const gpucat_mig *m = gpucat_mig_by_id(p->types[g->type], g->gi[k].gi_id);
                cJSON_AddStringToObject(e, "profile", m ? m->name : "?");
                cJSON_AddNumberToObject(e, "gi_id", g->gi[k].gi_id);
                cJSON_AddNumberToObject(e, "start", g->gi[k].start);
            }
        } else if (g->mode != PLAN_GPU_WHOLE) {
            cJSON_AddNumberToObject(o, "share_pct", rnd(g->share_pct, 1));
        }
        cJSON_AddNumberToObject(o, "mem_alloc_gb", rnd(g->mem_alloc / GB, 2));
        cJSON_AddNumberToObject(o, "mem_need_gb", rnd(g->mem_need / GB, 2));
    }

    cJSON *insts = cJSON_AddArrayToObject(root, "instances");
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_worker *w = &p->workers[in->worker];
        const plan_slice *s = &p->slices[in->slice];
        const plan_gpu *g = emit_inst_gpu(p, in);
        char name[80];
        emit_inst_name(p, i, name, sizeof name);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(insts, o);
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "worker", w->name);
        cJSON_AddStringToObject(o, "model", p->in->models[w->model].name);
        cJSON_AddStringToObject(o, "mode", plan_mode_name(w->mode));
        cJSON_AddBoolToObject(o, "placed", g != NULL);
        /* Exact values for planjson_read: the rest is rounded for people. */
        add_exact(o, "replica", in->replica);
        add_exact(o, "slice", (double)in->slice);
        add_exact(o, "pct", in->pct);
        add_exact(o, "mem_limit_bytes", in->mem_limit);
        if (!g) continue;
        cJSON_AddStringToObject(o, "node", p->nodes[g->node].name);
        cJSON_AddNumberToObject(o, "gpu", g->index);
        if (s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS) {
            cJSON_AddStringToObject(o, "profile", plan_slice_profile(p, s));
            cJSON_AddNumberToObject(o, "start", s->gi_start);
        }
        if (s->mode != PLAN_MODE_MIG && s->mode != PLAN_MODE_WHOLE)
            cJSON_AddNumberToObject(o, "share_pct", rnd(in->pct, 1));
        const perf_est *e = &in->est;
        cJSON_AddNumberToObject(o, "mem_alloc_gb", rnd(in->mem_limit / GB, 2));
        cJSON_AddNumberToObject(o, "mem_need_gb", rnd(e->need_bytes / GB, 2));
        cJSON_AddNumberToObject(o, "weights_gb", rnd(e->weight_bytes / GB, 2));
        cJSON_AddNumberToObject(o, "kv_gb", rnd(e->kv_bytes / GB, 2));
        cJSON_AddNumberToObject(o, "kv_tokens", rnd(e->kv_tokens, 0));
        cJSON_AddNumberToObject(o, "seqs", e->seqs);
        cJSON_AddNumberToObject(o, "in_flight", rnd(e->in_flight, 2));
        cJSON_AddNumberToObject(o, "rps", rnd(w->load.rps / w->replicas, 3));
        /* The estimates below are at the sized rate where headroom raised it. */
        if (w->sized.rps != w->load.rps) cJSON_AddNumberToObject(o, "sized_rps", rnd(w->sized.rps / w->replicas, 3));
        cJSON_AddNumberToObject(o, "ttft_ms", rnd(e->ttft_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "ttft_p99_ms", rnd(e->ttft_p99_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "tpot_ms", rnd(e->step_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "utilization", rnd(e->util, 3));
        cJSON_AddNumberToObject(o, "prefill_utilization", rnd(e->prefill_util, 3));
        cJSON_AddNumberToObject(o, "price_per_hour", sig(plan_inst_price(p, in), 6));
    }

    cJSON *tens = cJSON_AddArrayToObject(root, "tenants");
    for (size_t t = 0; t < p->in->n_tenants; t++) {
        const plan_tenant *tn = &p->in->tenants[t];
        const plan_result *r = &p->results[t];
        const plan_tier *tr = &p->in->tiers[tn->tier];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(tens, o);
        cJSON_AddStringToObject(o, "name", tn->name);
        cJSON_AddStringToObject(o, "model", p->in->models[tn->model].name);
        cJSON_AddStringToObject(o, "tier", tr->name);
        cJSON_AddStringToObject(o, "isolation", plan_iso_name(tn->iso));
        if (r->worker >= 0) cJSON_AddStringToObject(o, "worker", p->workers[r->worker].name);
        else cJSON_AddNullToObject(o, "worker");
        cJSON_AddNumberToObject(o, "rps", tn->load.rps);
        cJSON_AddNumberToObject(o, "ttft_ms", rnd(r->ttft_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "ttft_p99_ms", rnd(r->ttft_p99_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "tpot_ms", rnd(r->tpot_s * 1e3, 1));
        cJSON_AddNumberToObject(o, "ttft_target_ms", tr->ttft_ms);
        cJSON_AddNumberToObject(o, "tpot_target_ms", tr->tpot_ms);
        cost c = tenant_cost(p, t);
        cJSON_AddNumberToObject(o, "cost_per_hour", sig(c.hour, 6));
        if (isfinite(c.request)) cJSON_AddNumberToObject(o, "cost_per_request", sig(c.request, 4));
        else cJSON_AddNullToObject(o, "cost_per_request");
        if (isfinite(c.ktok)) cJSON_AddNumberToObject(o, "cost_per_1k_tokens", sig(c.ktok, 4));
        else cJSON_AddNullToObject(o, "cost_per_1k_tokens");
        cJSON_AddBoolToObject(o, "ok", r->ok);
    }

    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(tot, "gpus", (double)p->n_gpus);
    cJSON_AddNumberToObject(tot, "gpus_used", p->gpus_used);
    cJSON_AddNumberToObject(tot, "mem_alloc_gb", rnd(p->mem_alloc / GB, 2));
    cJSON_AddNumberToObject(tot, "mem_need_gb", rnd(p->mem_need / GB, 2));
    cJSON_AddNumberToObject(tot, "waste_gb", rnd((p->mem_alloc - p->mem_need) / GB, 2));
    cJSON_AddNumberToObject(tot, "capacity_gb", rnd(p->mem_capacity / GB, 2));
    cJSON_AddNumberToObject(tot, "price_per_hour", sig(plan_price(p), 6));
    cJSON_AddBoolToObject(tot, "feasible", p->feasible);

    cJSON *probs = cJSON_AddArrayToObject(root, "problems");
    for (size_t i = 0; i < p->n_problems; i++) {
        const plan_problem *q = &p->problems[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(probs, o);
        if (q->tenant >= 0) cJSON_AddStringToObject(o, "tenant", p->in->tenants[q->tenant].name);
        else cJSON_AddNullToObject(o, "tenant");
        cJSON_AddStringToObject(o, "constraint", plan_why_name(q->why));
        cJSON_AddStringToObject(o, "text", q->text);
    }
    cJSON *notes = cJSON_AddArrayToObject(root, "notes");
    for (size_t i = 0; i < p->n_notes; i++) cJSON_AddItemToArray(notes, cJSON_CreateString(p->notes[i]));
    json_workers(p, root);
    json_slices(p, root);
    json_input(p->in, root);

    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    if (!txt) return TS_ERR_NOMEM;
    strbuf b = STRBUF_INIT;
    strbuf_printf(&b, "%s\n", txt);
    cJSON_free(txt);
    return emit_add_file(out, &b, "plan.json");
}

/* ---- nvidia-smi --------------------------------------------------------------- */

int emit_node_used(const plan *p, size_t n) {
    const plan_node *nd = &p->nodes[n];
    for (int k = 0; k < nd->n_gpus; k++)
        if (p->gpus[nd->first_gpu + (size_t)k].mode != PLAN_GPU_IDLE) return 1;
    return 0;
}

static int emit_nvidia_smi(const plan *p, emit_out *out) {
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!emit_node_used(p, n)) continue;
        const plan_node *nd = &p->nodes[n];
        const gpucat_gpu *type = p->in->pools[nd->pool].gpu;
        strbuf b = STRBUF_INIT;
        strbuf_printf(&b, "#!/bin/sh\n# tessera plan: GPU set-up of node %s (%d x %s). Run as root on the node.\n", nd->name,
                  nd->n_gpus, type->name);
        strbuf_printf(&b,
                  "# nvidia-smi mig -cgi places each instance first-fit and never moves one, so every\n"
                  "# list below is in the order that lands the planned slots on an emptied GPU\n"
                  "# (largest first; see src/cluster/mig.h). Changing MIG mode may need a GPU reset.\n"
                  "set -e\n");
        for (int k = 0; k < nd->n_gpus; k++) {
            const plan_gpu *g = &p->gpus[nd->first_gpu + (size_t)k];
            if (g->mode == PLAN_GPU_IDLE) continue;
            strbuf_printf(&b, "\n");
            switch (g->mode) {
            case PLAN_GPU_MIG: {
                char lay[160], cgi[64];
                layout_desc(p, g, lay, sizeof lay);
                cgi_list(g, cgi, sizeof cgi);
                strbuf_printf(&b, "# GPU %d: MIG %s\n", g->index, lay);
                strbuf_printf(&b, "nvidia-smi -i %d -mig 1\n", g->index);
                strbuf_printf(&b, "nvidia-smi mig -i %d -dci || true    # compute instances first,\n", g->index);
                strbuf_printf(&b, "nvidia-smi mig -i %d -dgi || true    # then GPU instances\n", g->index);
                strbuf_printf(&b, "nvidia-smi mig -i %d -cgi %s -C\n", g->index, cgi);
                break;
            }
            case PLAN_GPU_MPS:
                strbuf_printf(&b, "# GPU %d: MPS, %.0f%% of SMs given to clients; MIG off, one process (the MPS server)\n",
                          g->index, g->share_pct);
                strbuf_printf(&b, "nvidia-smi -i %d -mig 0\n", g->index);
                strbuf_printf(&b, "nvidia-smi -i %d -c EXCLUSIVE_PROCESS\n", g->index);
                break;
            case PLAN_GPU_TIMESLICE:
                strbuf_printf(&b, "# GPU %d: time-sliced (best effort), %.0f%% of its time planned; MIG off\n", g->index,
                          g->share_pct);
                strbuf_printf(&b, "nvidia-smi -i %d -mig 0\n", g->index);
                strbuf_printf(&b, "nvidia-smi -i %d -c DEFAULT\n", g->index);
                strbuf_printf(&b, "nvidia-smi compute-policy -i %d --set-timeslice 0    # default slice length\n", g->index);
                break;
            default:
                strbuf_printf(&b, "# GPU %d: one instance on the whole GPU; MIG off\n", g->index);
                strbuf_printf(&b, "nvidia-smi -i %d -mig 0\n", g->index);
            }
        }
        int rc = emit_add_file(out, &b, "nvidia-smi/%s.sh", nd->name);
        if (rc) return rc;
    }
    return 0;
}

/* ---- mig-parted --------------------------------------------------------------- */

/* Two GPUs with the same MIG profile counts (or both MIG off) share an entry. */
static int same_mig(const plan *p, const plan_gpu *a, const plan_gpu *b) {
    int ma = a->mode == PLAN_GPU_MIG, mb = b->mode == PLAN_GPU_MIG;
    if (ma != mb) return 0;
    if (!ma) return 1;
    if (a->n_gi != b->n_gi) return 0;
    int ca[64] = {0}, cb[64] = {0};
    for (int k = 0; k < a->n_gi; k++) ca[a->gi[k].gi_id & 63]++, cb[b->gi[k].gi_id & 63]++;
    (void)p;
    return memcmp(ca, cb, sizeof ca) == 0;
}

static int emit_mig_parted(const plan *p, emit_out *out) {
    strbuf b = STRBUF_INIT;
    strbuf_printf(&b,
              "# tessera plan: nvidia-mig-parted v1 config, one named config per node with MIG GPUs.\n"
              "# Apply on a node:   nvidia-mig-parted apply -f mig-parted.yaml -c tessera-<node>\n"
              "# or with the GPU Operator: label the node nvidia.com/mig.config=tessera-<node>.\n"
              "# mig-parted chooses the slots itself; the counts are what the plan needs.\n"
              "version: v1\nmig-configs:\n");
    int any = 0;
    for (size_t n = 0; n < p->n_nodes; n++) {
        const plan_node *nd = &p->nodes[n];
        if (!p->in->pools[nd->pool].gpu->n_mig) continue;
        any = 1;
        strbuf_printf(&b, "  tessera-%s:\n", nd->name);
        char *done = calloc((size_t)nd->n_gpus, 1);
        if (!done) {
            strbuf_free(&b);
            return TS_ERR_NOMEM;
        }
        for (int k = 0; k < nd->n_gpus; k++) {
            if (done[k]) continue;
            const plan_gpu *g = &p->gpus[nd->first_gpu + (size_t)k];
            strbuf_printf(&b, "    - devices: [");
            for (int j = k, first = 1; j < nd->n_gpus; j++) {
                const plan_gpu *h = &p->gpus[nd->first_gpu + (size_t)j];
                if (done[j] || !same_mig(p, g, h)) continue;
                done[j] = 1;
                strbuf_printf(&b, "%s%d", first ? "" : ", ", h->index);
                first = 0;
            }
            strbuf_printf(&b, "]\n      mig-enabled: %s\n", g->mode == PLAN_GPU_MIG ? "true" : "false");
            if (g->mode != PLAN_GPU_MIG) continue;
            strbuf_printf(&b, "      mig-devices:\n");
            /* Profiles in the catalog's order, each with its count. */
            const gpucat_gpu *t = p->types[g->type];
            for (int m = 0; m < t->n_mig; m++) {
                int c = 0;
                for (int j = 0; j < g->n_gi; j++) c += g->gi[j].gi_id == t->mig[m].gi_id;
                if (c) strbuf_printf(&b, "        \"%s\": %d\n", t->mig[m].name, c);
            }
        }
        free(done);
    }
    if (!any) strbuf_printf(&b, "  {}\n");
    return emit_add_file(out, &b, "mig-parted.yaml");
}

/* ---- mps ---------------------------------------------------------------------- */

/* CUDA_VISIBLE_DEVICES of an instance: the GPU index, or for MIG a
 * placeholder naming the instance to look up with `nvidia-smi -L`. */
static void visible(const plan *p, const plan_inst *in, char *buf, size_t cap) {
    const plan_slice *s = &p->slices[in->slice];
    const plan_gpu *g = emit_inst_gpu(p, in);
    if (s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS)
        snprintf(buf, cap, "MIG-UUID-%s-gpu%d-%s-slot%d", p->nodes[g->node].name, g->index, plan_slice_profile(p, s),
                 s->gi_start);
    else snprintf(buf, cap, "%d", g->index);
}

/* The MPS pipe folder of a GPU or GI: one MPS server each. */
static void pipe_dir(const plan *p, const plan_inst *in, char *buf, size_t cap) {
    const plan_slice *s = &p->slices[in->slice];
    const plan_gpu *g = emit_inst_gpu(p, in);
    if (s->mode == PLAN_MODE_MIG_MPS) snprintf(buf, cap, "/tmp/nvidia-mps-%d-slot%d", g->index, s->gi_start);
    else snprintf(buf, cap, "/tmp/nvidia-mps-%d", g->index);
}

static int uses_mps(const plan_slice *s) { return s->mode == PLAN_MODE_MPS || s->mode == PLAN_MODE_MIG_MPS; }

/* An MPS client names no device: the daemon its pipe folder leads to was
 * started with the GPU's (or GI's) CUDA_VISIBLE_DEVICES and shows it to its
 * clients as device 0, so a client repeating the physical index 1 asks for a
 * device that daemon does not have. Its pinned limit is the plan's
 * mem_limit for this instance, not an equal split of the GPU: outside the
 * device plugin nothing divides the memory evenly. */
static void mps_env(const plan *p, size_t i, strbuf *b, const char *prefix, const char *quote) {
    const plan_inst *in = &p->insts[i];
    const plan_slice *s = &p->slices[in->slice];
    const plan_worker *w = &p->workers[in->worker];
    char vis[160], pipe[96];
    if (!uses_mps(s)) {
        visible(p, in, vis, sizeof vis);
        strbuf_printf(b, "%sCUDA_VISIBLE_DEVICES=%s%s%s\n", prefix, quote, vis, quote);
        return;
    }
    pipe_dir(p, in, pipe, sizeof pipe);
    strbuf_printf(b, "%sCUDA_MPS_PIPE_DIRECTORY=%s%s%s\n", prefix, quote, pipe, quote);
    strbuf_printf(b, "%sCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s%.0f%s\n", prefix, quote, in->pct, quote);
    strbuf_printf(b, "%sCUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s0=%.0fM%s\n", prefix, quote, emit_mib_up(in->mem_limit), quote);
    strbuf_printf(b, "%sCUDA_MPS_CLIENT_PRIORITY=%s%d%s\n", prefix, quote, emit_mps_priority(p, w), quote);
}

static int emit_mps(const plan *p, emit_out *out) {
    /* One script per node starting an MPS control daemon per MPS GPU or GI. */
    for (size_t n = 0; n < p->n_nodes; n++) {
        strbuf b = STRBUF_INIT;
        int any = 0;
        const plan_node *nd = &p->nodes[n];
        for (size_t k = 0; k < (size_t)nd->n_gpus * p->n_slices; k++) {
            /* By GPU index, then slice: the script reads in GPU order. */
            size_t s = k % p->n_slices, gi = nd->first_gpu + k / p->n_slices;
            const plan_slice *sl = &p->slices[s];
            if (sl->gpu != (int)gi || !uses_mps(sl)) continue;
            /* One daemon per MPS GPU: skip a GPU whose earlier slice did it. */
            int seen = 0;
            for (size_t e = 0; e < s && sl->mode == PLAN_MODE_MPS; e++)
                seen |= p->slices[e].gpu == sl->gpu && p->slices[e].mode == PLAN_MODE_MPS;
            if (seen) continue;
            if (!any)
                strbuf_printf(&b,
                          "#!/bin/sh\n# tessera plan: MPS control daemons of node %s, one per MPS GPU or MIG instance.\n"
                          "# Start them before the workers (mps/<instance>.env); stop with\n"
                          "# echo quit | CUDA_MPS_PIPE_DIRECTORY=<dir> nvidia-cuda-mps-control\n"
                          "set -e\n",
                          p->nodes[n].name);
            any = 1;
            const plan_inst *in = &p->insts[sl->first_inst];
            char vis[160], pipe[96];
            visible(p, in, vis, sizeof vis);
            pipe_dir(p, in, pipe, sizeof pipe);
            strbuf_printf(&b, "\n# GPU %d%s\n", p->gpus[sl->gpu].index, sl->mode == PLAN_MODE_MIG_MPS ? " (inside a MIG instance)" : "");
            strbuf_printf(&b,
                      "CUDA_VISIBLE_DEVICES=%s CUDA_MPS_PIPE_DIRECTORY=%s CUDA_MPS_LOG_DIRECTORY=%s.log \\\n"
                      "    nvidia-cuda-mps-control -d\n",
                      vis, pipe, pipe);
        }
        if (any) {
            int rc = emit_add_file(out, &b, "mps/%s.sh", p->nodes[n].name);
            if (rc) return rc;
        } else {
            strbuf_free(&b);
        }
    }
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_gpu *g = emit_inst_gpu(p, in);
        if (!g) continue;
        const plan_worker *w = &p->workers[in->worker];
        char name[80], slice[64];
        emit_inst_name(p, i, name, sizeof name);
        emit_slice_desc(p, in, slice, sizeof slice);
        strbuf b = STRBUF_INIT;
        strbuf_printf(&b, "# tessera plan: environment of worker instance %s (%s), on %s GPU %d, %s.\n", name,
                  plan_mode_name(w->mode), p->nodes[g->node].name, g->index, slice);
        if (p->slices[in->slice].mode == PLAN_MODE_MIG)
            strbuf_printf(&b, "# Replace the MIG-UUID-... placeholder with the instance's UUID from nvidia-smi -L.\n");
        if (uses_mps(&p->slices[in->slice]))
            strbuf_printf(&b, "# No CUDA_VISIBLE_DEVICES: the MPS daemon of the pipe folder was started with this\n"
                              "# GPU's and shows it as device 0, which the pinned limit names.\n");
        mps_env(p, i, &b, "", "");
        int rc = emit_add_file(out, &b, "mps/%s.env", name);
        if (rc) return rc;
    }
    return 0;
}

/* ---- serve -------------------------------------------------------------------- */

/* The model file as the instance opens it: the input's path, or under
 * model_dir by its file name (k8s mounts every model's file in one
 * folder). */
static void model_path(const plan_model *m, const char *model_dir, char *buf, size_t cap) {
    char own[PLAN_PATH_MAX + PLAN_NAME_MAX + 16];
    if (m->path[0]) snprintf(own, sizeof own, "%s", m->path);
    else snprintf(own, sizeof own, "models/%s.gguf", m->name);
    if (!model_dir) {
        snprintf(buf, cap, "%s", own);
        return;
    }
    const char *base = strrchr(own, '/');
    snprintf(buf, cap, "%s/%s", model_dir, base ? base + 1 : own);
}

void emit_serve_yaml(const plan *p, size_t i, int port, const char *model_dir, int pool_public, int threads,
                     strbuf *b, const char *indent) {
    const plan_inst *in = &p->insts[i];
    const plan_worker *w = &p->workers[in->worker];
    const plan_model *m = &p->in->models[w->model];
    const plan_gpu *g = emit_inst_gpu(p, in);
    const perf_est *e = &in->est;
    char name[80], slice[64];
    emit_inst_name(p, i, name, sizeof name);
    emit_slice_desc(p, in, slice, sizeof slice);
    strbuf_printf(b, "%s# tessera plan: worker instance %s, %s on %s GPU %d (%s).\n", indent, name,
              plan_mode_name(w->mode), p->nodes[g->node].name, g->index, slice);
    /* The real rate; with headroom, the figures after it are the sized rate's. */
    if (w->sized.rps != w->load.rps)
        strbuf_printf(b, "%s# Carries %.2f req/s, sized with headroom for %.2f req/s;\n%s# as sized: %d sequences in "
                         "flight, %.0f KV tokens; predicted TTFT %.0f ms,\n",
                      indent, w->load.rps / w->replicas, w->sized.rps / w->replicas, indent, e->seqs, e->kv_tokens,
                      e->ttft_s * 1e3);
    else
        strbuf_printf(b, "%s# Sized for %.2f req/s: %d sequences in flight, %.0f KV tokens; predicted TTFT %.0f ms,\n",
                      indent, w->load.rps / w->replicas, e->seqs, e->kv_tokens, e->ttft_s * 1e3);
    strbuf_printf(b, "%s# TPOT %.0f ms. Start: tessera serve --config <this file>\n", indent, e->step_s * 1e3);
    strbuf_printf(b, "%slisten: 0.0.0.0:%d\n", indent, port);
    strbuf_printf(b, "%slimits:\n%s  shutdown_grace_s: %d\n", indent, indent, EMIT_SHUTDOWN_GRACE_S);
    if (pool_public)
        strbuf_printf(b, "%s# The endpoint picker scrapes /metrics without a key: it gets the per-model\n"
                         "%s# gauges only, which name no tenant.\n%spublic_pool_metrics: true\n",
                      indent, indent, indent);
    strbuf_printf(b, "%smodels:\n", indent);
    strbuf_printf(b, "%s  - name: %s\n", indent, m->name);
    char path[PLAN_PATH_MAX + PLAN_NAME_MAX + 64];
    model_path(m, model_dir, path, sizeof path);
    strbuf_printf(b, "%s    path: %s\n", indent, path);
    strbuf_printf(b, "%s    kv_cache_bytes: %.0fMiB\n", indent, emit_mib_up(e->kv_bytes));
    /* The server's default budget takes at most this many sequences a step
     * (the simulator models the same cap: sim/fleet.c). */
    int most = SCHED_MAX_SEQS_PER_TOKEN * SCHED_DEFAULT_BUDGET_MAX;
    strbuf_printf(b, "%s    max_seqs: %d\n", indent, e->seqs < 1 ? 1 : e->seqs > most ? most : e->seqs);
    if (threads > 0) strbuf_printf(b, "%s    threads: %d\n", indent, threads);
    /* The price of this instance's GPU, GI or share, so serve's cost
     * accounting charges what the plan charged; unpriced pools write none. */
    double price = plan_inst_price(p, in);
    if (price > 0) strbuf_printf(b, "%s    price_per_hour: %.6g\n", indent, price);
    strbuf_printf(b, "%stiers:\n", indent);
    for (size_t t = 0; t < p->in->n_tiers; t++) {
        const plan_tier *tr = &p->in->tiers[t];
        strbuf_printf(b, "%s  - {name: %s, band: %d, ttft_ms: %.0f, tpot_ms: %.0f, min_share: %g", indent, tr->name,
                   tr->band, tr->ttft_ms, tr->tpot_ms, tr->min_share);
        if (tr->max_queue_ms > 0) strbuf_printf(b, ", max_queue_ms: %.0f", tr->max_queue_ms);
        strbuf_printf(b, "}\n");
    }
    strbuf_printf(b, "%stenants:\n", indent);
    for (size_t k = 0; k < w->n_tenants; k++) {
        const plan_tenant *tn = &p->in->tenants[w->tenants[k]];
        strbuf_printf(b, "%s  - name: %s\n%s    tier: %s\n%s    weight: %g\n", indent, tn->name, indent,
                  p->in->tiers[tn->tier].name, indent, tn->weight);
        if (tn->key_sha256[0]) strbuf_printf(b, "%s    key_sha256: %s\n", indent, tn->key_sha256);
        else strbuf_printf(b, "%s    key_sha256: REPLACE-with-the-sha256-tessera-keygen-prints\n", indent);
    }
}

/* Port of instance i: EMIT_SERVE_PORT plus its rank among the node's instances. */
static int serve_port(const plan *p, size_t i) {
    const plan_gpu *g = emit_inst_gpu(p, &p->insts[i]);
    int k = 0;
    for (size_t j = 0; j < i; j++) {
        const plan_gpu *h = emit_inst_gpu(p, &p->insts[j]);
        if (h && h->node == g->node) k++;
    }
    return EMIT_SERVE_PORT + k;
}

static int emit_serve(const plan *p, emit_out *out) {
    for (size_t i = 0; i < p->n_insts; i++) {
        if (!emit_inst_gpu(p, &p->insts[i])) continue;
        char name[80];
        emit_inst_name(p, i, name, sizeof name);
        strbuf b = STRBUF_INIT;
        emit_serve_yaml(p, i, serve_port(p, i), NULL, 0, 0, &b, "");
        int rc = emit_add_file(out, &b, "serve/%s.yaml", name);
        if (rc) return rc;
    }
    return 0;
}

/* ---- entry points ------------------------------------------------------------- */

int emit_run(const plan *p, int kind, emit_out *out) {
    if (!out) return TS_ERR_INVAL;
    memset(out, 0, sizeof *out);
    if (!p || !p->in) return TS_ERR_INVAL;
    int rc;
    switch (kind) {
    case EMIT_TABLE: rc = emit_table(p, out); break;
    case EMIT_JSON: rc = emit_json(p, out); break;
    case EMIT_NVIDIA_SMI: rc = emit_nvidia_smi(p, out); break;
    case EMIT_MIG_PARTED: rc = emit_mig_parted(p, out); break;
    case EMIT_MPS: rc = emit_mps(p, out); break;
    case EMIT_K8S: rc = emit_k8s(p, out); break;
    case EMIT_SERVE: rc = emit_serve(p, out); break;
    case EMIT_GIE: rc = emit_gie(p, out); break;
    case EMIT_KUEUE: rc = emit_kueue(p, out); break;
    default: return TS_ERR_INVAL;
    }
    if (rc) {
        char why[sizeof out->why];
        memcpy(why, out->why, sizeof why);
        emit_out_free(out);
        memcpy(out->why, why, sizeof why);
    }
    return rc;
}

void emit_out_free(emit_out *out) {
    if (!out) return;
    for (size_t i = 0; i < out->n; i++) free(out->files[i].data);
    free(out->files);
    memset(out, 0, sizeof *out);
}

int emit_print(const emit_out *out, FILE *f) {
    for (size_t i = 0; i < out->n; i++) {
        if (out->n > 1) fprintf(f, "%s# ==> %s <==\n", i ? "\n" : "", out->files[i].path);
        if (fwrite(out->files[i].data, 1, out->files[i].len, f) != out->files[i].len) return TS_ERR_IO;
    }
    return fflush(f) == 0 ? 0 : TS_ERR_IO;
}
