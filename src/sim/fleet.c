/* fleet.c - the simulator's fleets and scenarios; see fleet.h. */
#include "fleet.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

static void tier_of(const plan_tier *t, sched_tier *o) {
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s", t->name);
    o->band = t->band;
    o->ttft_ms = (uint32_t)lround(t->ttft_ms);
    o->tpot_ms = (uint32_t)lround(t->tpot_ms);
    o->min_share = t->min_share;
    o->max_queue_ms = (uint32_t)lround(t->max_queue_ms);
}

static void tenant_of(const plan *p, size_t t, sim_tenant *o) {
    const plan_tenant *pt = &p->in->tenants[t];
    const plan_result *res = &p->results[t];
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s", pt->name);
    snprintf(o->cfg.name, sizeof(o->cfg.name), "%s", pt->name);
    o->cfg.tier = pt->tier;
    o->cfg.weight = pt->weight > 0 ? pt->weight : 1.0;
    o->worker = res->worker;
    o->plan_ttft_s = res->ttft_s;
    o->plan_ttft_p99_s = res->ttft_p99_s;
    o->plan_tpot_s = res->tpot_s;
}

/* The sharing of the instance's slice, on top of its roofline. */
static void share_of(const plan *p, const plan_inst *pi, const plan_slice *sl, sst_model *m) {
    const gpucat_gpu *g = plan_slice_type(p, sl);
    double pct = pi->pct > 0 ? pi->pct : 100.0;
    if (sl->mode == PLAN_MODE_MPS || sl->mode == PLAN_MODE_TIMESLICE) pct = sl->pct;
    if (sl->mode == PLAN_MODE_MIG_MPS || sl->mode == PLAN_MODE_MPS) {
        m->share_mode = SST_MPS;
        m->share = pct / 100.0;
        m->gpu_bw = m->bw * 100.0 / pct; /* the share's bandwidth is pct of the device's */
    } else if (sl->mode == PLAN_MODE_TIMESLICE) {
        /* Round-robin: a step runs on the whole GPU, waiting for the others. */
        m->share_mode = SST_TIMESLICE;
        m->flops *= 100.0 / pct;
        m->bw *= 100.0 / pct;
        m->switch_us = SFL_SWITCH_US;
    }
    if (g) m->host_bytes_per_us = g->host_gbs * 1e3 / 2.0; /* both directions together */
}

/* The device instances of a slice share: -1 for a dedicated one. MPS and
 * time-slicing share a GPU; MIG+MPS clients share their GI. */
static int device_of(const plan *p, const plan_slice *sl, size_t slice_index) {
    if (sl->mode == PLAN_MODE_MIG || sl->mode == PLAN_MODE_WHOLE || sl->gpu < 0) return -1;
    if (sl->mode == PLAN_MODE_MIG_MPS) return (int)(p->n_gpus + slice_index);
    return sl->gpu;
}

static int inst_of(const plan *p, size_t i, int policy, sim_inst *o, char *err, size_t errlen) {
    const plan_inst *pi = &p->insts[i];
    const plan_worker *w = &p->workers[pi->worker];
    const plan_model *pm = &p->in->models[w->model];
    const plan_slice *sl = &p->slices[pi->slice];
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s-%d", w->name, pi->replica);
    snprintf(o->model, sizeof(o->model), "%s", pm->name);
    o->worker = (int)pi->worker;
    o->device = device_of(p, sl, pi->slice);
    char name[4 * sizeof o->name]; /* for messages: a hand-edited plan's names may hold anything */
    err_escape_ctl(name, sizeof name, o->name);
    perf_slice s;
    if (plan_inst_slice(p, pi, &s)) {
        snprintf(err, errlen, "instance %s: no slice", name);
        return TS_ERR_INVAL;
    }
    sst_roofline(&o->step, &pm->m, &s, &p->in->perf);
    share_of(p, pi, sl, &o->step);
    o->price_per_hour = plan_inst_price(p, pi);
    sched_config *c = &o->sc;
    sched_config_default(c);
    c->policy = policy;
    double kvpos = perf_kv_per_token(&pm->m);
    c->block_size = SFL_BLOCK_SIZE;
    c->block_bytes = kvpos * SFL_BLOCK_SIZE;
    double kv = ceil(pi->est.kv_bytes / 1048576.0) * 1048576.0; /* as --emit serve rounds it */
    double blocks = c->block_bytes > 0 ? floor(kv / c->block_bytes) : 0;
    /* The server's engine refuses a pool of more blocks than an int32 counts
     * (engine.c); a model of a few bytes of KV per position on a large
     * slice would have them. */
    if (!(blocks >= 1 && blocks <= INT32_MAX)) {
        snprintf(err, errlen, "instance %s: a KV pool of %.0f bytes holds %.0f blocks of %.0f bytes (1..%d)",
                 name, kv, blocks, c->block_bytes, INT32_MAX);
        return TS_ERR_INVAL;
    }
    c->n_blocks = (int32_t)blocks;
    c->n_swap_blocks = (int32_t)(SFL_SWAP_BYTES / c->block_bytes);
    c->max_ctx = pm->m.max_context;
    c->max_requests = SFL_MAX_REQUESTS;
    int seqs = pi->est.seqs < 1 ? 1 : pi->est.seqs;
    int most = c->budget_max * SCHED_MAX_SEQS_PER_TOKEN;
    c->max_running = seqs > most ? most : seqs;
    return 0;
}

static int alloc_fleet(sfl *o, size_t tiers, size_t tenants, size_t insts) {
    memset(o, 0, sizeof(*o));
    o->tiers = calloc(tiers ? tiers : 1, sizeof(sched_tier));
    o->tenants = calloc(tenants ? tenants : 1, sizeof(sim_tenant));
    o->insts = calloc(insts ? insts : 1, sizeof(sim_inst));
    if (!o->tiers || !o->tenants || !o->insts) {
        sfl_free(o);
        return TS_ERR_NOMEM;
    }
    o->f = (sim_fleet){o->tiers, (int)tiers, o->tenants, (int)tenants, o->insts, 0, 0};
    return 0;
}

int sfl_from_plan(const plan *p, int policy, sfl *out, char *err, size_t errlen) {
    const plan_input *in = p->in;
    int rc = alloc_fleet(out, in->n_tiers, in->n_tenants, p->n_insts);
    if (rc) return rc;
    for (size_t k = 0; k < in->n_tiers; k++) tier_of(&in->tiers[k], &out->tiers[k]);
    for (size_t t = 0; t < in->n_tenants; t++) tenant_of(p, t, &out->tenants[t]);
    int n = 0;
    for (size_t i = 0; i < p->n_insts; i++) {
        if (p->slices[p->insts[i].slice].gpu < 0) continue; /* not placed: its worker serves nobody */
        if ((rc = inst_of(p, i, policy, &out->insts[n], err, errlen))) {
            sfl_free(out);
            return rc;
        }
        n++;
    }
    out->f.n_insts = n;
    out->f.n_devices = (int)(p->n_gpus + p->n_slices);
    /* A tenant whose worker has no placed instance is unserved. */
    for (size_t t = 0; t < in->n_tenants; t++) {
        int w = out->tenants[t].worker, has = 0;
        for (int i = 0; i < n && !has; i++) has = out->insts[i].worker == w;
        if (!has) out->tenants[t].worker = -1;
    }
    return 0;
}

int sfl_single(const sched_tier *tiers, int n_tiers, const sim_tenant *tenants, int n_tenants,
               const sim_inst *inst, sfl *out) {
    int rc = alloc_fleet(out, (size_t)n_tiers, (size_t)n_tenants, 1);
    if (rc) return rc;
    memcpy(out->tiers, tiers, (size_t)n_tiers * sizeof(*tiers));
    memcpy(out->tenants, tenants, (size_t)n_tenants * sizeof(*tenants));
    for (int t = 0; t < n_tenants; t++) out->tenants[t].worker = 0;
    out->insts[0] = *inst;
    out->insts[0].worker = 0;
    out->insts[0].device = -1;
    out->f.n_insts = 1;
    return 0;
}

/* The fit a calibration's steps take: the server's describing fit
 * (step_fit) where it has seen enough steps, else the scheduler's; and
 * where the simulated scheduler's own fit starts.
 *
 * With the steps from step_fit, the scheduler starts where the server's
 * did (its seed; a server that does not report it started from
 * sched_config_default's, as every server did) and learns from the
 * simulated steps as the server's learnt from real ones, rather than from
 * the fit the server's had reached by the calibration's end, which its
 * tight prior would hold all run. Over five runs of bench/sim_real.sh
 * (2026-12-04) the two are close, the seed a little ahead: 42, 42, 39,
 * 44 and 43 of 47 figures within tolerance against 41, 42, 40, 41 and 44,
 * and a lower mean error of the latencies in four runs of five (6.3, 6.0,
 * 6.9, 5.1 and 4.8% against 6.7, 6.3, 7.3, 6.7 and 4.0%).
 *
 * With the steps from the scheduler's fit, it starts from that fit: the
 * steps are drawn around it, and on the two pinned runs before step_fit
 * existed (2026-12-04) the seed gave 41 and 41 of 47 against 43 and 41
 * from the fit.
 *
 * The copy bandwidth is the server's measured one either way: a
 * measurement of its host link, not something its scheduler learns by. */
typedef struct fit_of {
    const char *name;               /* its object in the answer */
    const double *theta;
    double err_us, err_autocorr;
    const double *q;                /* the spread around it, or NULL */
    const double *start;            /* the scheduler's seed; NULL: sched_config_default's */
} fit_of;

static fit_of pick_fit(const scr_model *m) {
    if (m->n_ratio > 0 && m->sf_steps >= SFL_SPREAD_MIN_STEPS)
        return (fit_of){"step_fit", m->sf_theta, m->sf_err_us, m->sf_err_autocorr, m->sf_q,
                        m->has_seed ? m->seed : NULL};
    return (fit_of){"cost_model", m->theta, m->err_us, m->err_autocorr,
                    m->n_ratio > 0 && m->ratio_steps >= SFL_SPREAD_MIN_STEPS ? m->ratio_q : NULL, m->theta};
}

/* A fit's coefficients and error scale: a server's. who: the model, for
 * the message; obj: the fit's object in the answer. */
static int fit_ok(const char *who, const char *obj, const double theta[4], double err_us, char *err, size_t errlen) {
    for (int k = 0; k < 5; k++) {
        double v = k < 4 ? theta[k] : err_us;
        if (!(v >= 0 && v <= SST_MAX_US))
            return err_set(err, errlen, TS_ERR_INVAL, "%s: %s.%s %.10g is outside 0..%.10g: no server has it", who, obj,
                           k < 4 ? scr_coef_names[k] : "err_us", v, SST_MAX_US);
    }
    return 0;
}

/* The noise's spells (sim_inst.noise_nc) from the autocorrelation the
 * server measured at its lags L_1 < ... < L_n (step_fit.acf): one AR(1)
 * component per lag, with time constant L_j, so that it correlates e^-1
 * at its own lag, and a weight w_j such that the components together give
 * the measured figure there. Taken from the longest lag down:
 *
 *     w_j = (acf(L_j) - sum over k > j of w_k exp(-L_j / L_k)) / e^-1,
 *
 * floored at 0; the shorter components' share at L_j is left out (at
 * lags four times their own, e^-4 = 2% of their weight). Weights summing
 * past 1 are scaled to 1; what they leave is independent noise. An
 * autocorrelation that falls off as one exponential, e^(-L / T), gives
 * mostly the component nearest T; one that falls off slowly, as a
 * shared machine's does (cost.h), weight at every length. */
static void spells_of(const scr_model *m, sim_inst *o) {
    int n = m->sf_n_acf < SIM_NOISE_MAXC ? m->sf_n_acf : SIM_NOISE_MAXC;
    double sum = 0;
    for (int j = n - 1; j >= 0; j--) {
        double lag = m->sf_acf_lag[j], rest = m->sf_acf[j];
        for (int k = j + 1; k < n; k++) rest -= o->noise_w[k] * exp(-lag / o->noise_tau[k]);
        o->noise_tau[j] = lag;
        o->noise_w[j] = rest > 0 ? rest * M_E : 0;
        sum += o->noise_w[j];
    }
    for (int j = 0; j < n && sum > 1; j++) o->noise_w[j] /= sum;
    o->noise_nc = n;
}

/* A calibration's geometry and fits: a server's (sfl_server_inst). Both
 * fits are checked, and the seed: the steps take one fit, the scheduler
 * starts from the other or from the seed. */
static int server_ok(const scr_model *m, const fit_of *fit, char *err, size_t errlen) {
    const struct { const char *what; double v, lo, hi; } r[] = {
        {"block_size", m->block_size, 1, SCHED_MAX_BLOCK_SIZE},
        {"max_seqs", m->max_seqs, 1, fmin(SCHED_MAX_SEQS, (double)SCHED_MAX_SEQS_PER_TOKEN * m->budget_max)},
        {"budget_min", m->budget_min, 1, SCHED_MAX_BUDGET},
        {"budget_max", m->budget_max, m->budget_min, SCHED_MAX_BUDGET},
        {"context_length", m->context_length, 1, SCHED_MAX_CTX},
        {"n_blocks", m->n_blocks, 1, INT32_MAX},
        {"kv_low", m->kv_low, 1e-9, m->kv_high},
        {"kv_high", m->kv_high, m->kv_low, 1},
        {"cost_model.copy_bytes_per_us", m->copy_bytes_per_us, 0, INFINITY},
    };
    char name[4 * SCHED_NAME_MAX], who[5 * SCHED_NAME_MAX];
    snprintf(who, sizeof who, "model '%s'", err_escape_ctl(name, sizeof name, m->name));
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
        if (!(r[k].v >= r[k].lo && r[k].v <= r[k].hi && isfinite(r[k].v)))
            return err_set(err, errlen, TS_ERR_INVAL, "%s: %s %.10g is outside %.10g..%.10g: no server has it", who,
                           r[k].what, r[k].v, r[k].lo, r[k].hi);
    int rc = fit_ok(who, "cost_model", m->theta, m->err_us, err, errlen);
    if (!rc && fit->theta != m->theta) rc = fit_ok(who, fit->name, fit->theta, fit->err_us, err, errlen);
    if (!rc && m->has_seed) rc = fit_ok(who, "cost_model.seed", m->seed, 0, err, errlen);
    return rc;
}

int sfl_server_inst(const scr_model *m, int policy, sim_inst *o, char *err, size_t errlen) {
    fit_of fit = pick_fit(m);
    int rc = server_ok(m, &fit, err, errlen);
    if (rc) return rc;
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "%s", m->name);
    snprintf(o->model, sizeof(o->model), "%s", m->name);
    o->step.kind = SST_LINEAR;
    memcpy(o->step.theta, fit.theta, sizeof(o->step.theta));
    if (fit.theta == m->sf_theta && m->sf_has_shape) o->step.shape = m->sf_shape; /* its spread is around it */
    o->step.host_bytes_per_us = m->copy_bytes_per_us;
    o->price_per_hour = m->price_per_hour > 0 ? m->price_per_hour : 0;
    /* The fit's err_us is a running mean of |residual|: for normal noise,
     * the standard deviation is sqrt(pi / 2) times that. Where the server
     * measured how its step times spread around the fit over enough
     * steps, that spread instead (its tails are not normal). */
    o->noise_us = fit.err_us * sqrt(M_PI / 2.0);
    o->noise_rho = fit.err_autocorr > 0 ? fit.err_autocorr : 0; /* runs of slow steps; never alternation */
    if (fit.theta == m->sf_theta && m->sf_n_acf > 0) spells_of(m, o);
    if (fit.q && m->n_ratio <= SIM_NOISE_MAXQ) {
        o->noise_nq = m->n_ratio;
        memcpy(o->noise_level, m->ratio_level, (size_t)m->n_ratio * sizeof(double));
        memcpy(o->noise_q, fit.q, (size_t)m->n_ratio * sizeof(double));
    }
    sched_config *c = &o->sc;
    sched_config_default(c);
    c->policy = policy >= 0 ? policy : m->policy;
    c->n_blocks = m->n_blocks;
    c->block_size = m->block_size;
    c->block_bytes = m->block_bytes;
    c->n_swap_blocks = m->swap_blocks;
    c->max_running = m->max_seqs;
    c->budget_min = m->budget_min;
    c->budget_max = m->budget_max;
    c->kv_high = m->kv_high;
    c->kv_low = m->kv_low;
    c->max_ctx = m->context_length;
    c->copy_bytes_per_us = m->copy_bytes_per_us > 0 ? m->copy_bytes_per_us : c->copy_bytes_per_us;
    if (fit.start) memcpy(c->cost_seed, fit.start, sizeof c->cost_seed);
    o->own_seed = 1;
    return 0;
}

void sfl_free(sfl *f) {
    free(f->tiers);
    free(f->tenants);
    free(f->insts);
    memset(f, 0, sizeof(*f));
}

static int scn_alloc(scn *out, int n, const char *name) {
    memset(out, 0, sizeof(*out));
    if (n < 1 || n > SFL_MAX_TENANTS) return TS_ERR_INVAL;
    if (!(out->tenants = calloc((size_t)n, sizeof(scn_tenant)))) return TS_ERR_NOMEM;
    out->n_tenants = n;
    snprintf(out->name, sizeof(out->name), "%s", name);
    out->w_in = 1.0;
    out->w_out = 2.0;
    return 0;
}

int sfl_report_scn(const sfl *f, scn *out) {
    int rc = scn_alloc(out, f->f.n_tenants, "sim");
    if (rc) return rc;
    for (int t = 0; t < f->f.n_tenants; t++) {
        const sim_tenant *st = &f->tenants[t];
        const sched_tier *tr = &f->tiers[st->cfg.tier];
        scn_tenant *o = &out->tenants[t];
        snprintf(o->name, sizeof(o->name), "%s", st->name);
        o->weight = st->cfg.weight;
        o->ttft_ms = tr->ttft_ms;
        o->tpot_ms = tr->tpot_ms;
    }
    return 0;
}

static void len_of(double mean, double cv, int32_t max, scn_len *l) {
    int32_t m = (int32_t)lround(mean);
    if (m < 1) m = 1;
    if (cv <= 0) {
        *l = (scn_len){.dist = SCN_LEN_FIXED, .value = m};
        return;
    }
    *l = (scn_len){.dist = SCN_LEN_LOGNORMAL, .mean = mean, .cv = cv, .min = 1, .max = max};
}

int sfl_load_scn(const plan_input *in, double load, double length_cv, double duration_s, scn *out) {
    int rc = scn_alloc(out, (int)in->n_tenants, "plan-load");
    if (rc) return rc;
    out->duration_s = duration_s;
    for (size_t t = 0; t < in->n_tenants; t++) {
        const plan_tenant *pt = &in->tenants[t];
        const plan_model *pm = &in->models[pt->model];
        scn_tenant *o = &out->tenants[t];
        snprintf(o->name, sizeof(o->name), "%s", pt->name);
        o->weight = pt->weight > 0 ? pt->weight : 1.0;
        o->ttft_ms = in->tiers[pt->tier].ttft_ms;
        o->tpot_ms = in->tiers[pt->tier].tpot_ms;
        if (pt->load.rps * load > 0) o->arrival = (scn_arrival){SCN_ARR_POISSON, pt->load.rps * load, 1.0};
        int32_t half = pm->m.max_context > 2 ? pm->m.max_context / 2 : 1;
        len_of(pt->load.prompt, length_cv, half, &o->prompt);
        len_of(pt->load.output, length_cv, half, &o->output);
    }
    return 0;
}
