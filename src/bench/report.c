/* report.c - bench figures; see report.h. */
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
    d->n = (int)n;
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

static int ok_status(int st) { return st == 200; }

size_t rpt_ttft_samples(const rpt_req *r, size_t n, int ti, double *out, int *censored) {
    size_t k = 0;
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti) continue;
        if (q->t_first >= 0) out[k++] = q->t_first - q->t_sched;
        else if (q->status == RPT_ST_ABORTED) {
            out[k++] = q->t_end - q->t_sched;
            c++;
        }
    }
    if (censored) *censored = c;
    return k;
}

/* Weighted service of request q, credited into per-slot bins svc (n_slots). */
static void credit(const scn *s, const rpt_req *q, double *svc, double *tok, int n_bins, double bin_s) {
    int nb = n_bins;
    if (q->t_first >= 0) {
        long k = (long)(q->t_first / bin_s);
        if (k >= 0 && k < nb) svc[k] += s->w_in * q->n_prompt;
    }
    if (q->n_out <= 0) return;
    if (q->n_events > 0) {
        double per = (double)q->n_out / q->n_events;
        for (int e = 0; e < q->n_events; e++) {
            long k = (long)(q->ev_t[e] / bin_s);
            if (k < 0 || k >= nb) continue;
            svc[k] += s->w_out * per;
            tok[k] += per;
        }
    } else {
        long k = (long)(q->t_end / bin_s);
        if (k >= 0 && k < nb) {
            svc[k] += s->w_out * q->n_out;
            tok[k] += q->n_out;
        }
    }
}

static void add_code(rpt_tenant *t, int status) {
    for (int i = 0; i < t->n_codes; i++)
        if (t->codes[i].status == status) {
            t->codes[i].count++;
            return;
        }
    if (t->n_codes < RPT_MAX_CODES) t->codes[t->n_codes++] = (rpt_code){status, 1};
}

static int code_cmp(const void *a, const void *b) {
    const rpt_code *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return x->status - y->status;
}

/* The figures of tenant ti. Scratch buffers hold n doubles each. */
static int tenant_figures(const scn *s, const rpt_req *r, size_t n, double run_s, int ti, rpt *p,
                          double *va, double *vb, double *svc) {
    rpt_tenant *t = &p->t[ti];
    const scn_tenant *st = &s->tenants[ti];
    size_t k;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti) continue;
        t->due++;
        if (q->status != RPT_ST_SKIPPED) t->sent++;
        if (ok_status(q->status)) t->completed++;
        else add_code(t, q->status);
        t->tokens_in += q->t_first >= 0 ? q->n_prompt : 0;
        t->tokens_out += q->n_out > 0 ? q->n_out : 0;
    }
    t->errors = t->due - t->completed;
    qsort(t->codes, (size_t)t->n_codes, sizeof t->codes[0], code_cmp);
    k = rpt_ttft_samples(r, n, ti, va, &t->ttft_censored);
    rpt_dist_of(va, k, &t->ttft);
    /* TPOT and SLO. */
    k = 0;
    int has_slo = st->ttft_ms > 0 || st->tpot_ms > 0;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti || !ok_status(q->status)) continue;
        double tpot = q->n_out >= 2 && q->t_first >= 0 ? (q->t_end - q->t_first) / (q->n_out - 1) : -1;
        if (tpot >= 0) va[k++] = tpot;
        double ttft = q->t_first >= 0 ? q->t_first - q->t_sched : q->t_end - q->t_sched;
        int met = (st->ttft_ms <= 0 || ttft * 1e3 <= st->ttft_ms) && (st->tpot_ms <= 0 || tpot < 0 || tpot * 1e3 <= st->tpot_ms);
        t->slo_met += met;
    }
    rpt_dist_of(va, k, &t->tpot);
    t->slo_attainment = has_slo && t->due ? (double)t->slo_met / t->due : -1;
    /* E2E and ITL. */
    k = 0;
    size_t g = 0;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti || !ok_status(q->status)) continue;
        va[k++] = q->t_end - q->t_sched;
    }
    rpt_dist_of(va, k, &t->e2e);
    size_t n_gaps = 0;
    for (size_t i = 0; i < n; i++)
        if (r[i].tenant == ti && r[i].n_events > 1) n_gaps += (size_t)r[i].n_events - 1;
    double *gaps = malloc((n_gaps ? n_gaps : 1) * sizeof *gaps);
    if (!gaps) return TS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti) continue;
        for (int e = 1; e < q->n_events; e++) gaps[g++] = (double)q->ev_t[e] - q->ev_t[e - 1];
    }
    rpt_dist_of(gaps, g, &t->itl);
    free(gaps);
    t->tok_s = run_s > 0 ? t->tokens_out / run_s : 0;
    /* Service per slot, and the backlogged slots. */
    int nb = p->n_bins;
    double *tok = p->tokens + (size_t)ti * (size_t)nb;
    memset(svc, 0, (size_t)nb * sizeof *svc);
    k = 0;
    for (size_t i = 0; i < n; i++) {
        const rpt_req *q = &r[i];
        if (q->tenant != ti) continue;
        credit(s, q, svc, tok, nb, p->bin_s);
        if (q->status == RPT_ST_SKIPPED) continue;
        va[k] = q->t_sched;
        vb[k++] = q->t_first >= 0 ? q->t_first : q->t_end;
    }
    uint8_t *cov = calloc((size_t)(nb ? nb : 1), 1);
    if (!cov) return TS_ERR_NOMEM;
    int nslots = rpt_slots_covered(va, vb, k, (double)nb, cov);
    double got = 0;
    for (int b = 0; b < nb; b++) {
        t->service += svc[b];
        if (cov[b]) got += svc[b];
    }
    free(cov);
    if (nslots < 0) return TS_ERR_NOMEM;
    t->backlogged_s = nslots;
    t->service_rate = nslots ? got / st->weight / nslots : 0;
    return 0;
}

int rpt_compute(const scn *s, const rpt_req *r, size_t n, double run_s, rpt *p) {
    memset(p, 0, sizeof *p);
    p->n_tenants = s->n_tenants;
    p->run_s = run_s;
    p->bin_s = 1.0;
    p->n_bins = run_s > 0 ? (int)ceil(run_s / p->bin_s) : 0;
    p->t = calloc((size_t)s->n_tenants, sizeof *p->t);
    p->tokens = calloc((size_t)s->n_tenants * (size_t)(p->n_bins ? p->n_bins : 1), sizeof *p->tokens);
    size_t m = n > (size_t)p->n_bins ? n : (size_t)p->n_bins;
    double *va = malloc((m ? m : 1) * sizeof *va), *vb = malloc((m ? m : 1) * sizeof *vb);
    double *svc = malloc((size_t)(p->n_bins ? p->n_bins : 1) * sizeof *svc);
    double *rates = malloc((size_t)s->n_tenants * sizeof *rates);
    int rc = p->t && p->tokens && va && vb && svc && rates ? 0 : TS_ERR_NOMEM;
    for (int i = 0; !rc && i < s->n_tenants; i++) rc = tenant_figures(s, r, n, run_s, i, p, va, vb, svc);
    if (!rc) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (r[i].status != RPT_ST_SKIPPED) va[k++] = r[i].t_sent - r[i].t_sched;
        rpt_dist d;
        rpt_dist_of(va, k, &d);
        p->lag_p99 = d.p99;
        p->lag_max = d.max;
        for (int i = 0; i < s->n_tenants; i++) {
            p->due += p->t[i].due;
            p->sent += p->t[i].sent;
            p->completed += p->t[i].completed;
            p->errors += p->t[i].errors;
            if (p->t[i].backlogged_s > 0) rates[p->n_jain++] = p->t[i].service_rate;
        }
        p->jain = fq_jain(rates, p->n_jain);
    }
    free(va);
    free(vb);
    free(svc);
    free(rates);
    if (rc) rpt_free(p);
    return rc;
}

void rpt_free(rpt *p) {
    if (!p) return;
    free(p->t);
    free(p->tokens);
    memset(p, 0, sizeof *p);
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

static void ms3(char *buf, size_t cap, const rpt_dist *d) {
    if (!d->n) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%.0f/%.0f/%.0f", d->p50 * 1e3, d->p90 * 1e3, d->p99 * 1e3);
}

void rpt_table(FILE *f, const scn *s, const rpt *p) {
    fprintf(f, "%-14s %6s %6s %6s %-22s %8s %-17s %-17s %-19s %7s %8s\n", "tenant", "sent", "done", "errors",
            "errors by status", "tok/s", "TTFT p50/90/99 ms", "TPOT p50/90/99 ms", "E2E p50/90/99 ms", "SLO",
            "svc/s/w");
    for (int i = 0; i < p->n_tenants; i++) {
        const rpt_tenant *t = &p->t[i];
        if (!t->due) continue;   /* left out of this run (--tenants) */
        char codes[64] = "-", ttft[32], tpot[32], e2e[32], slo[16] = "-", rate[16] = "-";
        size_t o = 0;
        for (int c = 0; c < t->n_codes && o < sizeof codes; c++) {
            char b[16];
            o += (size_t)snprintf(codes + o, sizeof codes - o, "%s%s:%d", c ? " " : "",
                                  rpt_status_name(t->codes[c].status, b), t->codes[c].count);
        }
        ms3(ttft, sizeof ttft, &t->ttft);
        ms3(tpot, sizeof tpot, &t->tpot);
        ms3(e2e, sizeof e2e, &t->e2e);
        if (t->slo_attainment >= 0) snprintf(slo, sizeof slo, "%.1f%%", t->slo_attainment * 100);
        if (t->backlogged_s > 0) snprintf(rate, sizeof rate, "%.0f", t->service_rate);
        fprintf(f, "%-14s %6d %6d %6d %-22s %8.1f %-17s %-17s %-19s %7s %8s\n", s->tenants[i].name, t->sent,
                t->completed, t->errors, codes, t->tok_s, ttft, tpot, e2e, slo, rate);
        if (t->ttft_censored)
            fprintf(f, "%-14s   (%d requests never got a first token: their TTFT counts as the wait so far)\n",
                    "", t->ttft_censored);
    }
    fprintf(f, "run %.1f s: %d due, %d sent, %d completed, %d errors; send lag p99 %.1f ms, max %.1f ms\n",
            p->run_s, p->due, p->sent, p->completed, p->errors, p->lag_p99 * 1e3, p->lag_max * 1e3);
    fprintf(f, "Jain's index of weighted service among backlogged tenants: %.4f (%d tenant%s backlogged)\n",
            p->jain, p->n_jain, p->n_jain == 1 ? "" : "s");
}

/* ---- JSON ------------------------------------------------------------------- */

static cJSON *dist_json(const rpt_dist *d) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "n", d->n);
    cJSON_AddNumberToObject(o, "mean_s", d->mean);
    cJSON_AddNumberToObject(o, "p50_s", d->p50);
    cJSON_AddNumberToObject(o, "p90_s", d->p90);
    cJSON_AddNumberToObject(o, "p99_s", d->p99);
    cJSON_AddNumberToObject(o, "max_s", d->max);
    return o;
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
    cJSON_AddNumberToObject(root, "send_lag_p99_s", p->lag_p99);
    cJSON_AddNumberToObject(root, "send_lag_max_s", p->lag_max);
    cJSON *j = cJSON_AddObjectToObject(root, "jain");
    if (j) {
        cJSON_AddNumberToObject(j, "index", p->jain);
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
        cJSON_AddItemToObject(o, "ttft", dist_json(&t->ttft));
        cJSON_AddNumberToObject(o, "ttft_censored", t->ttft_censored);
        cJSON_AddItemToObject(o, "tpot", dist_json(&t->tpot));
        cJSON_AddItemToObject(o, "e2e", dist_json(&t->e2e));
        cJSON_AddItemToObject(o, "itl", dist_json(&t->itl));
        cJSON_AddNumberToObject(o, "slo_met", t->slo_met);
        if (t->slo_attainment >= 0) cJSON_AddNumberToObject(o, "slo_attainment", t->slo_attainment);
        else cJSON_AddNullToObject(o, "slo_attainment");
        cJSON_AddNumberToObject(o, "service", t->service);
        cJSON_AddNumberToObject(o, "backlogged_s", t->backlogged_s);
        cJSON_AddNumberToObject(o, "weighted_service_rate", t->service_rate);
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
