/* report.c - the figures of a bench or sim run, and their table and JSON; see report.h. */
#include "report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fq.h"

void rpt_reqs_free(rpt_req *r, size_t n) {
    for (size_t i = 0; r && i < n; i++) {
        free(r[i].ev_t);
        r[i].ev_t = NULL;
        r[i].n_events = 0;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rpt_percentile(const double *sorted, size_t n, double p) {
    if (n == 0) return 0;
    if (p <= 0) return sorted[0];
    if (p >= 1) return sorted[n - 1];
    double rank = p * (double)(n - 1);
    size_t lo = (size_t)rank;
    double frac = rank - (double)lo;
    return lo + 1 < n ? sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]) : sorted[lo];
}

void rpt_dist_of(double *v, size_t n, rpt_dist *d) {
    memset(d, 0, sizeof *d);
    if (n == 0) return;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    d->n = (int64_t)n;
    d->mean = sum / (double)n;
    d->p50 = rpt_percentile(v, n, 0.50);
    d->p90 = rpt_percentile(v, n, 0.90);
    d->p99 = rpt_percentile(v, n, 0.99);
    d->max = v[n - 1];
}

int rpt_slots_covered(double *a, double *b, size_t n, double run_s, uint8_t *covered) {
    int n_slots = run_s > 0 ? (int)ceil(run_s) : 0;
    if (covered) memset(covered, 0, (size_t)n_slots);
    /* Sort the intervals by start (b moves with a): pairs sorted through an
     * index so both arrays stay in step. */
    double *pairs = malloc((n ? n : 1) * 2 * sizeof *pairs);
    if (!pairs) return -1;
    for (size_t i = 0; i < n; i++) pairs[2 * i] = a[i], pairs[2 * i + 1] = b[i];
    qsort(pairs, n, 2 * sizeof *pairs, cmp_double);   /* compares the start only */
    for (size_t i = 0; i < n; i++) a[i] = pairs[2 * i], b[i] = pairs[2 * i + 1];
    free(pairs);
    int count = 0;
    size_t i = 0;
    while (i < n) {
        /* One merged interval [lo, hi). */
        double lo = a[i], hi = b[i];
        for (i++; i < n && a[i] <= hi; i++)
            if (b[i] > hi) hi = b[i];
        if (hi <= lo) continue;
        /* Slots k with lo <= k and k + 1 <= hi, inside [0, n_slots). */
        long k0 = (long)ceil(lo), k1 = (long)floor(hi) - 1;
        if (k0 < 0) k0 = 0;
        if (k1 > n_slots - 1) k1 = n_slots - 1;
        for (long k = k0; k <= k1; k++) {
            if (covered && covered[k]) continue;
            if (covered) covered[k] = 1;
            count++;
        }
    }
    /* Without the byte map two merged intervals can not share a slot (they
     * are disjoint and a slot lies wholly inside one), so the count is exact
     * either way. */
    return count;
}

/* ---- sample sinks ------------------------------------------------------------ */

/*
 * One figure's samples: every value (exact) or a log histogram (bounded).
 * The count, sum, min and max are kept exactly either way.
 */
struct rpt_sink {
    int bounded;
    size_t n;                 /* samples */
    double sum, min, max;     /* s */
    double *v;                /* (cap) exact: the samples, in arrival order */
    size_t cap;
    uint64_t *cnt;            /* (nb) bounded: counts; NULL until the first sample */
    int nb;                   /* bounded: buckets (hist_buckets) */
    double inv_lg;            /* bounded: 1 / log(g), so a sample costs one log */
};

/* g = (1 + a) / (1 - a): bucket i >= 1 holds (m g^(i-1), m g^i]; bucket 0
 * everything at or below m, the last everything above RPT_HIST_MAX_S. */
static double hist_gamma(void) { return (1 + RPT_HIST_ALPHA) / (1 - RPT_HIST_ALPHA); }

static int hist_buckets(void) {
    return (int)ceil(log(RPT_HIST_MAX_S / RPT_HIST_MIN_S) / log(hist_gamma())) + 2;
}

static int hist_index(const rpt_sink *k, double v) {
    if (!(v > RPT_HIST_MIN_S)) return 0;   /* also NaN */
    if (v > RPT_HIST_MAX_S) return k->nb - 1;
    int i = (int)ceil(log(v / RPT_HIST_MIN_S) * k->inv_lg);
    return i < 1 ? 1 : i > k->nb - 2 ? k->nb - 2 : i;
}

/* The value bucket i answers with, kept inside what was seen. */
static double hist_value(const rpt_sink *k, int i) {
    double g = hist_gamma(), x;
    if (i == 0) x = k->min;
    else if (i == k->nb - 1) x = k->max;
    else x = 2 * RPT_HIST_MIN_S * pow(g, i) / (g + 1);
    return x < k->min ? k->min : x > k->max ? k->max : x;
}

static void sink_init(rpt_sink *k, int bounded) {
    memset(k, 0, sizeof *k);
    k->bounded = bounded;
    if (bounded) {
        k->nb = hist_buckets();
        k->inv_lg = 1 / log(hist_gamma());
    }
}

static void sink_free(rpt_sink *k) {
    free(k->v);
    free(k->cnt);
    sink_init(k, k->bounded);
}

static int sink_add(rpt_sink *k, double v) {
    if (k->bounded) {
        if (!k->cnt && !(k->cnt = calloc((size_t)k->nb, sizeof *k->cnt))) return TS_ERR_NOMEM;
        k->cnt[hist_index(k, v)]++;
    } else {
        if (k->n == k->cap) {
            size_t cap = k->cap ? 2 * k->cap : 16;
            double *nv = realloc(k->v, cap * sizeof *nv);
            if (!nv) return TS_ERR_NOMEM;
            k->v = nv;
            k->cap = cap;
        }
        k->v[k->n] = v;
    }
    if (!k->n || v < k->min) k->min = v;
    if (!k->n || v > k->max) k->max = v;
    k->n++;
    k->sum += v;
    return 0;
}

/* count samples of value v: one bucket's count in bounded mode. */
static int sink_add_n(rpt_sink *k, double v, int64_t count) {
    if (count < 1) return 0;
    if (!k->bounded) {
        for (int64_t i = 0; i < count; i++) {
            int rc = sink_add(k, v);
            if (rc) return rc;
        }
        return 0;
    }
    if (!k->cnt && !(k->cnt = calloc((size_t)k->nb, sizeof *k->cnt))) return TS_ERR_NOMEM;
    k->cnt[hist_index(k, v)] += (uint64_t)count;
    if (!k->n || v < k->min) k->min = v;
    if (!k->n || v > k->max) k->max = v;
    k->n += (size_t)count;
    k->sum += v * (double)count;
    return 0;
}

/* The sample of rank r (0-based, ascending) of a bounded sink. */
static double hist_rank(const rpt_sink *k, size_t r) {
    uint64_t seen = 0;
    for (int i = 0; i < k->nb; i++) {
        seen += k->cnt[i];
        if (seen > r) return hist_value(k, i);
    }
    return k->max;
}

/* rpt_percentile's definition over a bounded sink: the closest ranks come
 * from the histogram, each within RPT_HIST_ALPHA, and so is any mix of them. */
static double hist_percentile(const rpt_sink *k, double p) {
    if (k->n == 0) return 0;
    if (p <= 0) return k->min;
    if (p >= 1) return k->max;
    double rank = p * (double)(k->n - 1);
    size_t lo = (size_t)rank;
    double frac = rank - (double)lo, a = hist_rank(k, lo);
    return lo + 1 < k->n ? a + frac * (hist_rank(k, lo + 1) - a) : a;
}

/* d (and, when cdf is not NULL, the cumulative shares) from sinks
 * k[0..m) together. Exact sinks are sorted in place: a finish may follow
 * more adds, and order does not matter to any figure. */
static int sink_dist(rpt_sink *const *k, int m, rpt_dist *d, rpt_cdf *cdf) {
    memset(d, 0, sizeof *d);
    size_t n = 0;
    int one = -1;
    double sum = 0;
    for (int j = 0; j < m; j++) {
        n += k[j]->n;
        sum += k[j]->sum;
        if (k[j]->n) one = one == -1 ? j : -2;   /* -2: several */
    }
    if (!n) return 0;
    if (!k[0]->bounded) {
        /* Exact: one sink sorts in place; several are copied together. */
        double *v = one >= 0 ? k[one]->v : malloc(n * sizeof *v);
        if (!v) return TS_ERR_NOMEM;
        if (one < 0)
            for (size_t j = 0, o = 0; j < (size_t)m; o += k[j]->n, j++)
                if (k[j]->n) memcpy(v + o, k[j]->v, k[j]->n * sizeof *v);
        rpt_dist_of(v, n, d);
        int rc = 0;
        if (cdf) {
            cdf->x = malloc(n * sizeof *cdf->x);
            cdf->share = malloc(n * sizeof *cdf->share);
            if (cdf->x && cdf->share) {
                cdf->n = (int64_t)n;
                for (size_t i = 0; i < n; i++) cdf->x[i] = v[i], cdf->share[i] = (double)(i + 1) / (double)n;
            } else rc = TS_ERR_NOMEM;
        }
        if (one < 0) free(v);
        return rc;
    }
    /* Bounded: the histograms summed. */
    rpt_sink h;
    sink_init(&h, 1);
    int nb = h.nb;
    h.cnt = calloc((size_t)nb, sizeof *h.cnt);
    if (!h.cnt) return TS_ERR_NOMEM;
    for (int j = 0; j < m; j++) {
        if (!k[j]->n) continue;
        for (int i = 0; i < nb; i++) h.cnt[i] += k[j]->cnt[i];
        if (!h.n || k[j]->min < h.min) h.min = k[j]->min;
        if (!h.n || k[j]->max > h.max) h.max = k[j]->max;
        h.n += k[j]->n;
    }
    d->n = (int64_t)n;
    d->mean = sum / (double)n;
    d->p50 = hist_percentile(&h, 0.50);
    d->p90 = hist_percentile(&h, 0.90);
    d->p99 = hist_percentile(&h, 0.99);
    d->max = h.max;
    int rc = 0;
    if (cdf) {
        int pts = 0;
        for (int i = 0; i < nb; i++) pts += h.cnt[i] > 0;
        cdf->x = malloc((size_t)pts * sizeof *cdf->x);
        cdf->share = malloc((size_t)pts * sizeof *cdf->share);
        if (cdf->x && cdf->share) {
            uint64_t seen = 0;
            for (int i = 0; i < nb; i++) {
                if (!h.cnt[i]) continue;
                seen += h.cnt[i];
                cdf->x[cdf->n] = hist_value(&h, i);
                cdf->share[cdf->n++] = (double)seen / (double)n;
            }
        } else rc = TS_ERR_NOMEM;
    }
    free(h.cnt);
    return rc;
}

/* ---- the accumulator ----------------------------------------------------------- */

enum { SK_TTFT, SK_TPOT, SK_E2E, SK_ITL, SK_N };

struct rpt_acc_tenant {
    rpt_tenant f;             /* the counts, filled as requests come */
    rpt_sink sk[SK_N];        /* ttft, tpot, e2e, itl */
    rpt_sink lag;             /* sent - due: the report's figure is over every tenant,
                                 but kept per tenant, so that different tenants' adds
                                 share nothing (report.h) */
    double *svc;              /* (n_slots) weighted service per one-second slot */
    /* Backlog. Exact: every interval, resolved at finish. Bounded: the
     * covered slots so far and the merged interval still open. */
    double *bl_a, *bl_b;      /* (n_bl) exact: intervals [a, b) */
    size_t n_bl, cap_bl;
    uint8_t *covered;         /* (n_slots) bounded */
    double open_a, open_b;    /* bounded: the open interval; open_b < open_a when none */
};

/* The first failure sticks. Atomic: threads may feed different tenants at
 * once (report.h), and this is the one word they share. */
static int fail(rpt_acc *a, int rc) {
    int none = 0;
    if (rc) __atomic_compare_exchange_n(&a->err, &none, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return rc;
}

static int bad_tenant(const rpt_acc *a, int ti) { return !a->t || ti < 0 || ti >= a->s->n_tenants; }

void rpt_acc_deinit(rpt_acc *a) {
    if (!a) return;
    for (int i = 0; a->t && i < a->s->n_tenants; i++) {
        rpt_acc_tenant *t = &a->t[i];
        for (int k = 0; k < SK_N; k++) sink_free(&t->sk[k]);
        sink_free(&t->lag);
        free(t->svc);
        free(t->bl_a);
        free(t->bl_b);
        free(t->covered);
    }
    free(a->t);
    free(a->tokens);
    memset(a, 0, sizeof *a);
}

int rpt_acc_init(rpt_acc *a, const scn *s, double run_s, double bin_s, int bounded) {
    memset(a, 0, sizeof *a);
    if (!s || s->n_tenants <= 0 || !(run_s >= 0)) return TS_ERR_INVAL;
    a->s = s;
    a->bounded = bounded ? 1 : 0;
    a->run_s = run_s;
    a->bin_s = bin_s > 0 ? bin_s : 1.0;
    a->n_bins = run_s > 0 ? (int)ceil(run_s / a->bin_s) : 0;
    a->n_slots = run_s > 0 ? (int)ceil(run_s) : 0;
    size_t nt = (size_t)s->n_tenants, nb = (size_t)(a->n_bins ? a->n_bins : 1),
           ns = (size_t)(a->n_slots ? a->n_slots : 1);
    a->t = calloc(nt, sizeof *a->t);
    a->tokens = calloc(nt * nb, sizeof *a->tokens);
    if (!a->t || !a->tokens) goto err;
    for (size_t i = 0; i < nt; i++) {
        rpt_acc_tenant *t = &a->t[i];
        for (int k = 0; k < SK_N; k++) sink_init(&t->sk[k], a->bounded);
        sink_init(&t->lag, a->bounded);
        t->open_a = 0, t->open_b = -1;
        t->svc = calloc(ns, sizeof *t->svc);
        if (!t->svc) goto err;
        if (a->bounded && !(t->covered = calloc(ns, 1))) goto err;
    }
    return 0;
err:
    rpt_acc_deinit(a);
    return TS_ERR_NOMEM;
}

static int ok_status(int st) { return st == 200; }

/* count more errors of status; past RPT_MAX_CODES kinds, new ones are
 * left out of the breakdown (they are still in errors). */
static void add_code(rpt_tenant *t, int status, int count) {
    for (int i = 0; i < t->n_codes; i++)
        if (t->codes[i].status == status) {
            t->codes[i].count += count;
            return;
        }
    if (t->n_codes < RPT_MAX_CODES) t->codes[t->n_codes++] = (rpt_code){status, count};
}

/* Service (and output tokens) at time t into the tenant's slot and bin.
 * Slots and bins are found by truncation, as they always were: a time in
 * (-1, 0) lands in the first. A time at or after run_s is outside the run
 * (rpt_acc_event's contract): the last slot and bin may reach past run_s
 * (ceil), and truncation alone would count t = 2.7 in a 2.5 s run. */
static void credit(rpt_acc *a, int ti, double t, double tokens, double service) {
    if (!(t < a->run_s)) return;   /* also NaN */
    long k = (long)(t / 1.0);
    if (k >= 0 && k < a->n_slots) a->t[ti].svc[k] += service;
    long b = (long)(t / a->bin_s);
    if (tokens != 0 && b >= 0 && b < a->n_bins) a->tokens[(size_t)ti * (size_t)a->n_bins + (size_t)b] += tokens;
}

int rpt_acc_event(rpt_acc *a, int tenant, double t, double tokens, double service) {
    if (bad_tenant(a, tenant)) return fail(a, TS_ERR_INVAL);
    credit(a, tenant, t, tokens, service);
    return 0;
}

int rpt_acc_itl(rpt_acc *a, int tenant, double gap_s) { return rpt_acc_itl_n(a, tenant, gap_s, 1); }

int rpt_acc_itl_n(rpt_acc *a, int tenant, double gap_s, int64_t count) {
    if (bad_tenant(a, tenant) || count < 0) return fail(a, TS_ERR_INVAL);
    return fail(a, sink_add_n(&a->t[tenant].sk[SK_ITL], gap_s, count));
}

/* Bounded mode: mark in cov (n_slots bytes) the slots [lo, hi) covers
 * entirely, as rpt_slots_covered does. */
static void mark_slots(const rpt_acc *a, uint8_t *cov, double lo, double hi) {
    if (!(hi > lo)) return;
    double k0 = ceil(lo), k1 = floor(hi) - 1;
    if (k0 < 0) k0 = 0;
    if (k1 > a->n_slots - 1) k1 = a->n_slots - 1;
    for (double k = k0; k <= k1; k++) cov[(size_t)k] = 1;
}

int rpt_acc_backlog(rpt_acc *a, int tenant, double from_s, double to_s) {
    if (bad_tenant(a, tenant)) return fail(a, TS_ERR_INVAL);
    rpt_acc_tenant *t = &a->t[tenant];
    if (!a->bounded) {
        if (t->n_bl == t->cap_bl) {
            size_t cap = t->cap_bl ? 2 * t->cap_bl : 16;
            double *na = realloc(t->bl_a, cap * sizeof *na);
            if (na) t->bl_a = na;
            double *nb = na ? realloc(t->bl_b, cap * sizeof *nb) : NULL;
            if (!nb) return fail(a, TS_ERR_NOMEM);
            t->bl_b = nb;
            t->cap_bl = cap;
        }
        t->bl_a[t->n_bl] = from_s;
        t->bl_b[t->n_bl++] = to_s;
        return 0;
    }
    if (t->open_b >= t->open_a && from_s >= t->open_a && from_s <= t->open_b) {
        if (to_s > t->open_b) t->open_b = to_s;   /* overlaps or touches: merge */
        return 0;
    }
    if (t->open_b >= t->open_a && from_s < t->open_a) {
        mark_slots(a, t->covered, from_s, to_s);   /* out of order: on its own */
        return 0;
    }
    mark_slots(a, t->covered, t->open_a, t->open_b);
    t->open_a = from_s, t->open_b = to_s;
    return 0;
}

int rpt_acc_request(rpt_acc *a, const rpt_req *q) {
    if (bad_tenant(a, q->tenant)) return fail(a, TS_ERR_INVAL);
    int ti = q->tenant, rc = 0;
    rpt_acc_tenant *t = &a->t[ti];
    const scn_tenant *st = &a->s->tenants[ti];
    rpt_tenant *f = &t->f;
    f->due++;
    if (q->status != RPT_ST_SKIPPED) {
        f->sent++;
        rc |= sink_add(&t->lag, q->t_sent - q->t_sched);
    }
    if (ok_status(q->status)) f->completed++;
    else add_code(f, q->status, 1);
    f->tokens_in += q->t_first >= 0 ? q->n_prompt : 0;
    f->tokens_out += q->n_out > 0 ? q->n_out : 0;
    if (q->t_first >= 0) rc |= sink_add(&t->sk[SK_TTFT], q->t_first - q->t_sched);
    else if (q->status == RPT_ST_ABORTED) {
        rc |= sink_add(&t->sk[SK_TTFT], q->t_end - q->t_sched);
        f->ttft_censored++;
    }
    if (ok_status(q->status)) {
        double tpot = q->n_out >= 2 && q->t_first >= 0 ? (q->t_end - q->t_first) / (q->n_out - 1) : -1;
        if (tpot >= 0) rc |= sink_add(&t->sk[SK_TPOT], tpot);
        double ttft = q->t_first >= 0 ? q->t_first - q->t_sched : q->t_end - q->t_sched;
        f->slo_met += (st->ttft_ms <= 0 || ttft * 1e3 <= st->ttft_ms) &&
                      (st->tpot_ms <= 0 || tpot < 0 || tpot * 1e3 <= st->tpot_ms);
        rc |= sink_add(&t->sk[SK_E2E], q->t_end - q->t_sched);
    }
    if (q->ev_t && q->n_events > 0) {
        for (int e = 1; e < q->n_events; e++) rc |= sink_add(&t->sk[SK_ITL], (double)q->ev_t[e] - q->ev_t[e - 1]);
        if (q->t_first >= 0) credit(a, ti, q->t_first, 0, a->s->w_in * q->n_prompt);
        if (q->n_out > 0) {
            double per = (double)q->n_out / q->n_events;
            for (int e = 0; e < q->n_events; e++) credit(a, ti, q->ev_t[e], per, a->s->w_out * per);
        }
    }
    /* sink_add fails only with TS_ERR_NOMEM, so the or of codes is it. */
    return fail(a, rc ? TS_ERR_NOMEM : 0);
}

/* ---- finishing --------------------------------------------------------------------- */

static int code_cmp(const void *a, const void *b) {
    const rpt_code *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return x->status - y->status;
}

/* Backlogged slots, out of the first ns, of tenant t into cov (ns bytes);
 * how many, or -1. */
static int backlog_slots(rpt_acc *a, rpt_acc_tenant *t, int ns, uint8_t *cov) {
    if (a->bounded) {
        /* The open interval is marked into a copy: finish may come again. */
        uint8_t *all = malloc((size_t)(a->n_slots ? a->n_slots : 1));
        if (!all) return -1;
        memcpy(all, t->covered, (size_t)a->n_slots);
        mark_slots(a, all, t->open_a, t->open_b);
        memcpy(cov, all, (size_t)ns);
        free(all);
        int count = 0;
        for (int k = 0; k < ns; k++) count += cov[k];
        return count;
    }
    return rpt_slots_covered(t->bl_a, t->bl_b, t->n_bl, (double)ns, cov);
}

/* Tenant ti's figures over the first ns slots (p->run_s, p->n_bins set). */
static int tenant_finish(rpt_acc *a, int ti, rpt *p, int ns, uint8_t *cov) {
    rpt_acc_tenant *t = &a->t[ti];
    const scn_tenant *st = &a->s->tenants[ti];
    rpt_tenant *f = &p->t[ti];
    double run_s = p->run_s;
    *f = t->f;
    f->errors = f->due - f->completed;
    qsort(f->codes, (size_t)f->n_codes, sizeof f->codes[0], code_cmp);
    rpt_sink *k[SK_N];
    for (int j = 0; j < SK_N; j++) k[j] = &t->sk[j];
    int rc = sink_dist(&k[SK_TTFT], 1, &f->ttft, &f->ttft_cdf);
    if (!rc) rc = sink_dist(&k[SK_TPOT], 1, &f->tpot, &f->tpot_cdf);
    if (!rc) rc = sink_dist(&k[SK_E2E], 1, &f->e2e, NULL);
    if (!rc) rc = sink_dist(&k[SK_ITL], 1, &f->itl, NULL);
    if (rc) return rc;
    int has_slo = st->ttft_ms > 0 || st->tpot_ms > 0;
    f->slo_attainment = has_slo && f->due ? (double)f->slo_met / f->due : -1;
    f->tok_s = run_s > 0 ? f->tokens_out / run_s : 0;
    f->req_s = run_s > 0 ? f->completed / run_s : 0;
    f->goodput_s = run_s > 0 ? f->slo_met / run_s : 0;
    int nslots = backlog_slots(a, t, ns, cov);
    if (nslots < 0) return TS_ERR_NOMEM;
    double got = 0;
    for (int b = 0; b < ns; b++) {
        f->service += t->svc[b];
        if (cov[b]) got += t->svc[b];
    }
    f->backlogged_s = nslots;
    f->service_rate = nslots ? got / st->weight / nslots : 0;
    f->engine_s = f->cost = f->engine_ttft_s = -1;
    return 0;
}

/* The all-tenants row: sums, and distributions over every tenant's samples. */
static int all_finish(rpt_acc *a, rpt *p) {
    rpt_tenant *al = &p->all;
    double run_s = p->run_s;
    int n = p->n_tenants, due_slo = 0, met_slo = 0;
    memset(al, 0, sizeof *al);
    for (int i = 0; i < n; i++) {
        const rpt_tenant *f = &p->t[i];
        const scn_tenant *st = &a->s->tenants[i];
        al->due += f->due;
        al->sent += f->sent;
        al->completed += f->completed;
        al->errors += f->errors;
        for (int c = 0; c < f->n_codes; c++) add_code(al, f->codes[c].status, f->codes[c].count);
        al->tokens_in += f->tokens_in;
        al->tokens_out += f->tokens_out;
        al->ttft_censored += f->ttft_censored;
        al->slo_met += f->slo_met;
        al->service += f->service;
        if (st->ttft_ms > 0 || st->tpot_ms > 0) due_slo += f->due, met_slo += f->slo_met;
    }
    qsort(al->codes, (size_t)al->n_codes, sizeof al->codes[0], code_cmp);
    al->slo_attainment = due_slo ? (double)met_slo / due_slo : -1;
    al->tok_s = run_s > 0 ? al->tokens_out / run_s : 0;
    al->req_s = run_s > 0 ? al->completed / run_s : 0;
    al->goodput_s = run_s > 0 ? al->slo_met / run_s : 0;
    al->engine_s = al->cost = al->engine_ttft_s = -1;
    rpt_sink **k = malloc((size_t)n * sizeof *k);
    if (!k) return TS_ERR_NOMEM;
    rpt_dist *d[SK_N] = {&al->ttft, &al->tpot, &al->e2e, &al->itl};
    int rc = 0;
    for (int j = 0; !rc && j < SK_N; j++) {
        for (int i = 0; i < n; i++) k[i] = &a->t[i].sk[j];
        rc = sink_dist(k, n, d[j], NULL);
    }
    rpt_dist lag = {0};
    for (int i = 0; i < n; i++) k[i] = &a->t[i].lag;
    if (!rc) rc = sink_dist(k, n, &lag, NULL);
    p->lag_p99 = lag.p99;
    p->lag_max = lag.max;
    free(k);
    return rc;
}

int rpt_acc_finish(rpt_acc *a, double run_s, rpt *p) {
    memset(p, 0, sizeof *p);
    if (a->err) return a->err;
    if (!a->t) return TS_ERR_INVAL;
    int n = a->s->n_tenants;
    p->n_tenants = n;
    /* The run may have ended before the length the accumulator was sized
     * for: its figures stop there (slots and bins past it are dropped). */
    p->run_s = run_s >= 0 && run_s < a->run_s ? run_s : a->run_s;
    p->bounded = a->bounded;
    p->bin_s = a->bin_s;
    p->n_bins = p->run_s > 0 ? (int)ceil(p->run_s / a->bin_s) : 0;
    if (p->n_bins > a->n_bins) p->n_bins = a->n_bins;
    int ns = p->run_s > 0 ? (int)ceil(p->run_s) : 0;
    if (ns > a->n_slots) ns = a->n_slots;
    p->t = calloc((size_t)n, sizeof *p->t);
    p->tokens = malloc((size_t)n * (size_t)(p->n_bins ? p->n_bins : 1) * sizeof *p->tokens);
    uint8_t *cov = malloc((size_t)(ns ? ns : 1));
    double *rates = malloc((size_t)n * sizeof *rates);
    int rc = p->t && p->tokens && cov && rates ? 0 : TS_ERR_NOMEM;
    for (int i = 0; !rc && i < n; i++)
        memcpy(p->tokens + (size_t)i * (size_t)p->n_bins, a->tokens + (size_t)i * (size_t)a->n_bins,
               (size_t)p->n_bins * sizeof *p->tokens);
    for (int i = 0; !rc && i < n; i++) rc = tenant_finish(a, i, p, ns, cov);
    if (!rc) rc = all_finish(a, p);
    if (!rc) {
        p->due = p->all.due;
        p->sent = p->all.sent;
        p->completed = p->all.completed;
        p->errors = p->all.errors;
        for (int i = 0; i < n; i++)
            if (p->t[i].backlogged_s > 0) rates[p->n_jain++] = p->t[i].service_rate;
        p->jain = fq_jain(rates, p->n_jain);
        p->gini = fq_gini(rates, p->n_jain);
    }
    free(cov);
    free(rates);
    if (rc) rpt_free(p);
    return rc;
}

/* ---- from records -------------------------------------------------------------------- */

int rpt_compute(const scn *s, const rpt_req *r, size_t n, double run_s, rpt *p) {
    memset(p, 0, sizeof *p);
    rpt_acc a;
    int rc = rpt_acc_init(&a, s, run_s, 1.0, 0);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        rpt_acc_request(&a, q);
        if (!q->ev_t || q->n_events <= 0) {
            /* No event times: the prompt at the first token, the output at the end. */
            if (q->t_first >= 0) rpt_acc_event(&a, q->tenant, q->t_first, 0, s->w_in * q->n_prompt);
            if (q->n_out > 0) rpt_acc_event(&a, q->tenant, q->t_end, q->n_out, s->w_out * q->n_out);
        }
        if (q->status != RPT_ST_SKIPPED)
            rpt_acc_backlog(&a, q->tenant, q->t_sched, q->t_first >= 0 ? q->t_first : q->t_end);
    }
    rc = rpt_acc_finish(&a, run_s, p);
    rpt_acc_deinit(&a);
    return rc;
}

static void cdf_free(rpt_cdf *c) {
    free(c->x);
    free(c->share);
    memset(c, 0, sizeof *c);
}

void rpt_free(rpt *p) {
    if (!p) return;
    for (int i = 0; p->t && i < p->n_tenants; i++) {
        cdf_free(&p->t[i].ttft_cdf);
        cdf_free(&p->t[i].tpot_cdf);
    }
    free(p->t);
    free(p->tokens);
    memset(p, 0, sizeof *p);
}

void rpt_cost_set(rpt *p, int ti, double engine_s, double cost) {
    if (ti < 0 || ti >= p->n_tenants) return;
    p->t[ti].engine_s = engine_s < 0 ? -1 : engine_s;
    p->t[ti].cost = cost < 0 ? -1 : cost;
    double e = 0, c = 0;
    for (int i = 0; i < p->n_tenants; i++) {
        const rpt_tenant *t = &p->t[i];
        if (!t->due) continue;
        e = e < 0 || t->engine_s < 0 ? -1 : e + t->engine_s;
        c = c < 0 || t->cost < 0 ? -1 : c + t->cost;
    }
    p->all.engine_s = e;
    p->all.cost = c;
}

void rpt_engine_ttft_set(rpt *p, int ti, double sum_s, int64_t n) {
    if (ti < 0 || ti >= p->n_tenants) return;
    rpt_tenant *t = &p->t[ti];
    t->engine_ttft_s = sum_s >= 0 && n > 0 ? sum_s / (double)n : -1;
    t->engine_firsts = sum_s >= 0 && n > 0 ? n : 0;
    double sum = 0;
    int64_t all = 0;
    for (int i = 0; i < p->n_tenants; i++) {
        const rpt_tenant *u = &p->t[i];
        if (!u->due) continue;
        if (u->engine_ttft_s < 0 && u->completed) { /* unknown, not just none */
            all = -1;
            break;
        }
        if (u->engine_ttft_s >= 0) sum += u->engine_ttft_s * (double)u->engine_firsts, all += u->engine_firsts;
    }
    p->all.engine_ttft_s = all > 0 ? sum / (double)all : -1;
    p->all.engine_firsts = all > 0 ? all : 0;
}

const char *rpt_status_name(int status, char *buf) {
    switch (status) {
    case RPT_ST_TRANSPORT: return "transport";
    case RPT_ST_ABORTED: return "aborted";
    case RPT_ST_STREAM: return "stream";
    case RPT_ST_SKIPPED: return "skipped";
    default: snprintf(buf, 16, "%d", status); return buf;
    }
}

/* ---- table ------------------------------------------------------------------ */

/* Milliseconds with about three significant figures: 1234, 56.7, 8.90,
 * 0.0123 (a small model on a CPU decodes in microseconds). */
static int fmt_ms(char *buf, size_t cap, double s) {
    double ms = s * 1e3;
    if (fabs(ms) < 1) return snprintf(buf, cap, "%.3g", ms);
    return snprintf(buf, cap, "%.*f", fabs(ms) >= 100 ? 0 : fabs(ms) >= 10 ? 1 : 2, ms);
}

/* "mean/p50/p90/p99" in ms, or "-" without samples. */
static void ms4(char *buf, size_t cap, const rpt_dist *d) {
    if (!d->n) {
        snprintf(buf, cap, "-");
        return;
    }
    const double v[4] = {d->mean, d->p50, d->p90, d->p99};
    size_t o = 0;
    for (int i = 0; i < 4 && o < cap; i++) {
        if (i) buf[o++] = '/';
        if (o < cap) o += (size_t)fmt_ms(buf + o, cap - o, v[i]);
    }
    if (o >= cap) buf[cap - 1] = 0;
}

/* Cost per request and per 1k tokens; < 0 when unknown or undefined. */
static double cost_per_req(const rpt_tenant *t) { return t->cost >= 0 && t->completed ? t->cost / t->completed : -1; }

static double cost_per_1k(const rpt_tenant *t) {
    double tok = t->tokens_in + t->tokens_out;
    return t->cost >= 0 && tok > 0 ? t->cost / tok * 1000 : -1;
}

/* v with sig significant digits (0: one decimal), or "-" when unknown. */
static void num_or_dash(char *buf, size_t cap, double v, int sig) {
    if (v < 0) snprintf(buf, cap, "-");
    else if (sig) snprintf(buf, cap, "%.*g", sig, v);
    else snprintf(buf, cap, "%.1f", v);
}

static void counts_row(FILE *f, const char *name, const rpt_tenant *t, int backlog_known) {
    char codes[64] = "-", slo[16] = "-", rate[16] = "-", eng[16], cpr[16], c1k[16];
    size_t o = 0;
    for (int c = 0; c < t->n_codes && o < sizeof codes; c++) {
        char b[16];
        o += (size_t)snprintf(codes + o, sizeof codes - o, "%s%s:%d", c ? " " : "", rpt_status_name(t->codes[c].status, b),
                              t->codes[c].count);
    }
    if (t->slo_attainment >= 0) snprintf(slo, sizeof slo, "%.1f%%", t->slo_attainment * 100);
    if (backlog_known && t->backlogged_s > 0) snprintf(rate, sizeof rate, "%.0f", t->service_rate);
    num_or_dash(eng, sizeof eng, t->engine_s, 0);
    num_or_dash(cpr, sizeof cpr, cost_per_req(t), 3);
    num_or_dash(c1k, sizeof c1k, cost_per_1k(t), 3);
    fprintf(f, "%-14s %6d %6d %6d %-26s %7.2f %7.2f %8.1f %7s %8s %9s %9s %9s\n", name, t->sent, t->completed,
            t->errors, codes, t->req_s, t->goodput_s, t->tok_s, slo, rate, eng, cpr, c1k);
    if (t->ttft_censored && backlog_known)   /* tenants' rows; the all row would repeat them */
        fprintf(f, "%-14s   (%d requests never got a first token: their TTFT counts as the wait so far)\n", "",
                t->ttft_censored);
}

/* Where the server said: each tenant's mean TTFT inside the engine, and
 * beside it the part of the measured mean outside it. */
static void engine_ttft_line(FILE *f, const scn *s, const rpt *p) {
    if (p->all.engine_ttft_s < 0) return;
    fprintf(f, "TTFT mean in the engine, ms (from hand-over to the first token, as the server counts it; "
               "+ the rest of the measured mean):");
    for (int i = 0; i < p->n_tenants; i++) {
        const rpt_tenant *t = &p->t[i];
        if (t->due && t->engine_ttft_s >= 0 && t->ttft.n)
            fprintf(f, " %s %.1f (+%.1f)", s->tenants[i].name, t->engine_ttft_s * 1e3,
                    (t->ttft.mean - t->engine_ttft_s) * 1e3);
    }
    fputc('\n', f);
}

static void latency_row(FILE *f, const char *name, const rpt_tenant *t) {
    char ttft[48], tpot[48], itl[48], e2e[48];
    ms4(ttft, sizeof ttft, &t->ttft);
    ms4(tpot, sizeof tpot, &t->tpot);
    ms4(itl, sizeof itl, &t->itl);
    ms4(e2e, sizeof e2e, &t->e2e);
    fprintf(f, "%-14s %-26s %-26s %-26s %s\n", name, ttft, tpot, itl, e2e);
}

#define ALL_ROW "(all)"

void rpt_table(FILE *f, const scn *s, const rpt *p) {
    fprintf(f, "%-14s %6s %6s %6s %-26s %7s %7s %8s %7s %8s %9s %9s %9s\n", "tenant", "sent", "done", "errors",
            "errors by status", "req/s", "good/s", "tok/s", "SLO", "svc/s/w", "engine_s", "cost/req", "cost/1k");
    for (int i = 0; i < p->n_tenants; i++)
        if (p->t[i].due) counts_row(f, s->tenants[i].name, &p->t[i], 1);   /* no due: left out (--tenants) */
    counts_row(f, ALL_ROW, &p->all, 0);
    fprintf(f, "svc/s/w: weighted service per backlogged second = (w_in x prompt + w_out x output tokens) / weight / s"
               " (w_in %g, w_out %g)\n",
            s->w_in, s->w_out);
    fprintf(f, "good/s: completed requests per second that met every SLO target of their tenant; "
               "cost/1k: per 1000 prompt + output tokens\n\n");
    fprintf(f, "%-14s %-26s %-26s %-26s %s\n", "latency ms", "TTFT mean/p50/p90/p99", "TPOT mean/p50/p90/p99",
            "ITL mean/p50/p90/p99", "E2E mean/p50/p90/p99");
    for (int i = 0; i < p->n_tenants; i++)
        if (p->t[i].due) latency_row(f, s->tenants[i].name, &p->t[i]);
    latency_row(f, ALL_ROW, &p->all);
    if (p->bounded)
        fprintf(f, "(percentiles from log histograms, within %.2g%% of exact; mean and max exact)\n",
                RPT_HIST_ALPHA * 100);
    engine_ttft_line(f, s, p);
    fprintf(f, "\nrun %.1f s: %d due, %d sent, %d completed, %d errors; %.2f requests/s, goodput %.2f requests/s; "
               "send lag p99 %.1f ms, max %.1f ms\n",
            p->run_s, p->due, p->sent, p->completed, p->errors, p->all.req_s, p->all.goodput_s, p->lag_p99 * 1e3,
            p->lag_max * 1e3);
    if (p->n_jain >= 2)
        fprintf(f, "Jain's index of weighted service among backlogged tenants: %.4f (1 = equal); "
                   "Gini coefficient: %.4f (0 = equal) (%d tenants backlogged)\n",
                p->jain, p->gini, p->n_jain);
    else
        fprintf(f, "Jain's index and Gini coefficient: not shown: %d tenant%s backlogged, they compare two or more\n",
                p->n_jain, p->n_jain == 1 ? " was" : "s were");
}

/* ---- JSON ------------------------------------------------------------------- */

static cJSON *dist_json(const rpt_dist *d) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "n", (double)d->n);   /* exact to 2^53 */
    cJSON_AddNumberToObject(o, "mean_s", d->mean);
    cJSON_AddNumberToObject(o, "p50_s", d->p50);
    cJSON_AddNumberToObject(o, "p90_s", d->p90);
    cJSON_AddNumberToObject(o, "p99_s", d->p99);
    cJSON_AddNumberToObject(o, "max_s", d->max);
    return o;
}

static void num_or_null(cJSON *o, const char *name, double v, int known) {
    if (known) cJSON_AddNumberToObject(o, name, v);
    else cJSON_AddNullToObject(o, name);
}

/* The figures a tenant and the all-tenants row share. */
static void figures_json(cJSON *o, const rpt_tenant *t, int backlog_known) {
    char b[16];
    cJSON_AddNumberToObject(o, "due", t->due);
    cJSON_AddNumberToObject(o, "sent", t->sent);
    cJSON_AddNumberToObject(o, "completed", t->completed);
    cJSON_AddNumberToObject(o, "errors", t->errors);
    cJSON *codes = cJSON_AddObjectToObject(o, "errors_by_status");
    for (int c = 0; codes && c < t->n_codes; c++)
        cJSON_AddNumberToObject(codes, rpt_status_name(t->codes[c].status, b), t->codes[c].count);
    cJSON_AddNumberToObject(o, "prompt_tokens", t->tokens_in);
    cJSON_AddNumberToObject(o, "output_tokens", t->tokens_out);
    cJSON_AddNumberToObject(o, "output_tokens_per_s", t->tok_s);
    cJSON_AddNumberToObject(o, "requests_per_s", t->req_s);
    cJSON_AddNumberToObject(o, "goodput_requests_per_s", t->goodput_s);
    cJSON_AddItemToObject(o, "ttft", dist_json(&t->ttft));
    cJSON_AddNumberToObject(o, "ttft_censored", t->ttft_censored);
    cJSON_AddItemToObject(o, "tpot", dist_json(&t->tpot));
    cJSON_AddItemToObject(o, "e2e", dist_json(&t->e2e));
    cJSON_AddItemToObject(o, "itl", dist_json(&t->itl));
    cJSON_AddNumberToObject(o, "slo_met", t->slo_met);
    num_or_null(o, "slo_attainment", t->slo_attainment, t->slo_attainment >= 0);
    cJSON_AddNumberToObject(o, "service", t->service);
    if (backlog_known) {
        cJSON_AddNumberToObject(o, "backlogged_s", t->backlogged_s);
        cJSON_AddNumberToObject(o, "weighted_service_rate", t->service_rate);
    }
    num_or_null(o, "engine_s", t->engine_s, t->engine_s >= 0);
    num_or_null(o, "cost", t->cost, t->cost >= 0);
    num_or_null(o, "cost_per_request", cost_per_req(t), cost_per_req(t) >= 0);
    num_or_null(o, "cost_per_1k_tokens", cost_per_1k(t), cost_per_1k(t) >= 0);
    num_or_null(o, "engine_ttft_mean_s", t->engine_ttft_s, t->engine_ttft_s >= 0);
}

char *rpt_json(const scn *s, const rpt *p, const rpt_req *r, size_t n, const char *url, uint64_t seed) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    char b[16], sd[24];
    cJSON_AddStringToObject(root, "scenario", s->name);
    cJSON_AddStringToObject(root, "url", url ? url : "");
    snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
    cJSON_AddStringToObject(root, "seed", sd);
    cJSON_AddStringToObject(root, "model", s->model);
    cJSON_AddStringToObject(root, "api", s->chat ? "chat" : "completions");
    cJSON_AddNumberToObject(root, "run_s", p->run_s);
    cJSON_AddNumberToObject(root, "due", p->due);
    cJSON_AddNumberToObject(root, "sent", p->sent);
    cJSON_AddNumberToObject(root, "completed", p->completed);
    cJSON_AddNumberToObject(root, "errors", p->errors);
    cJSON_AddNumberToObject(root, "requests_per_s", p->all.req_s);
    cJSON_AddNumberToObject(root, "goodput_requests_per_s", p->all.goodput_s);
    cJSON_AddNumberToObject(root, "send_lag_p99_s", p->lag_p99);
    cJSON_AddNumberToObject(root, "send_lag_max_s", p->lag_max);
    cJSON_AddStringToObject(root, "percentiles", p->bounded ? "histogram" : "exact");
    if (p->bounded) cJSON_AddNumberToObject(root, "percentile_relative_error", RPT_HIST_ALPHA);
    cJSON *all = cJSON_AddObjectToObject(root, "all");
    if (all) figures_json(all, &p->all, 0);
    /* Jain and Gini are null with fewer than two backlogged tenants: one
     * tenant is trivially fair to itself, and 1 would read as a result. */
    cJSON *j = cJSON_AddObjectToObject(root, "jain");
    if (j) {
        num_or_null(j, "index", p->jain, p->n_jain >= 2);
        num_or_null(j, "gini", p->gini, p->n_jain >= 2);
        cJSON_AddNumberToObject(j, "backlogged_tenants", p->n_jain);
        cJSON_AddNumberToObject(j, "input_weight", s->w_in);
        cJSON_AddNumberToObject(j, "output_weight", s->w_out);
    }
    cJSON *ts = cJSON_AddArrayToObject(root, "tenants");
    for (int i = 0; ts && i < p->n_tenants; i++) {
        const rpt_tenant *t = &p->t[i];
        const scn_tenant *st = &s->tenants[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(ts, o);
        cJSON_AddStringToObject(o, "name", st->name);
        cJSON_AddNumberToObject(o, "weight", st->weight);
        cJSON_AddNumberToObject(o, "slo_ttft_ms", st->ttft_ms);
        cJSON_AddNumberToObject(o, "slo_tpot_ms", st->tpot_ms);
        figures_json(o, t, 1);
        cJSON *tl = cJSON_AddArrayToObject(o, "output_tokens_per_bin");
        for (int k = 0; tl && k < p->n_bins; k++)
            cJSON_AddItemToArray(tl, cJSON_CreateNumber(round(p->tokens[(size_t)i * (size_t)p->n_bins + (size_t)k] * 100) / 100));
    }
    cJSON_AddNumberToObject(root, "bin_s", p->bin_s);
    /* Every request, compactly: one array per request, fields named once. */
    cJSON *fields = cJSON_AddArrayToObject(root, "request_fields");
    static const char *const names[] = {"tenant", "status", "t_sched_s", "t_sent_s", "ttft_s", "e2e_s",
                                        "prompt_tokens", "output_tokens", "events"};
    for (size_t i = 0; fields && i < sizeof names / sizeof names[0]; i++)
        cJSON_AddItemToArray(fields, cJSON_CreateString(names[i]));
    cJSON *reqs = cJSON_AddArrayToObject(root, "requests");
    for (size_t i = 0; reqs && i < n; i++) {
        const rpt_req *q = &r[i];
        cJSON *a = cJSON_CreateArray();
        if (!a) break;
        cJSON_AddItemToArray(reqs, a);
        cJSON_AddItemToArray(a, cJSON_CreateString(s->tenants[q->tenant].name));
        cJSON_AddItemToArray(a, cJSON_CreateString(rpt_status_name(q->status, b)));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(round(q->t_sched * 1e6) / 1e6));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(round(q->t_sent * 1e6) / 1e6));
        cJSON_AddItemToArray(a, q->t_first >= 0 ? cJSON_CreateNumber(round((q->t_first - q->t_sched) * 1e6) / 1e6)
                                                : cJSON_CreateNull());
        cJSON_AddItemToArray(a, q->t_end >= 0 ? cJSON_CreateNumber(round((q->t_end - q->t_sched) * 1e6) / 1e6)
                                              : cJSON_CreateNull());
        cJSON_AddItemToArray(a, cJSON_CreateNumber(q->n_prompt));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(q->n_out));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(q->n_events));
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}
