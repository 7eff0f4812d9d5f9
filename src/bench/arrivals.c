/* arrivals.c - open-loop schedules; see arrivals.h. */
#include "arrivals.h"

#include <math.h>
#include <stdlib.h>

#include "err.h"

/* An upper bound on a schedule's length, so a typo such as rate: 1e6 over an
 * hour fails as out of memory politely instead of eating the machine. */
#define ARR_MAX_EVENTS 20000000u

double arr_normal(rng *r) {
    double u = rng_uniform_open(r), v = rng_uniform_open(r);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

double arr_gamma(rng *r, double shape, double scale) {
    if (shape < 1) {
        double u = rng_uniform_open(r);
        return arr_gamma(r, shape + 1, scale) * pow(u, 1 / shape);
    }
    /* Marsaglia and Tsang (2000): squeeze, then the log acceptance test. */
    double d = shape - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x, v;
        do {
            x = arr_normal(r);
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = rng_uniform_open(r);
        if (u < 1 - 0.0331 * x * x * x * x) return d * v * scale;
        if (log(u) < 0.5 * x * x + d * (1 - v + log(v))) return d * v * scale;
    }
}

double arr_gap(const scn_arrival *a, rng *r) {
    switch (a->process) {
    case SCN_ARR_POISSON: return -log(rng_uniform_open(r)) / a->rate;
    case SCN_ARR_GAMMA: {
        double k = 1 / (a->cv * a->cv);
        return arr_gamma(r, k, 1 / (k * a->rate));
    }
    case SCN_ARR_CONSTANT: return 1 / a->rate;
    default: return INFINITY;
    }
}

int32_t arr_len(const scn_len *l, rng *r) {
    double v;
    switch (l->dist) {
    case SCN_LEN_UNIFORM:
        return l->min + (int32_t)(rng_next(r) % (uint64_t)(l->max - l->min + 1));
    case SCN_LEN_LOGNORMAL: {
        double s2 = log1p(l->cv * l->cv), mu = log(l->mean) - s2 / 2;
        v = round(exp(mu + sqrt(s2) * arr_normal(r)));
        break;
    }
    default: return l->value;
    }
    return v < l->min ? l->min : v > l->max ? l->max : (int32_t)v;
}

/* One source of the merge: a tenant's process, or the trace. */
typedef struct source {
    double next;              /* s; INFINITY when exhausted */
    rng gaps, lens;
} source;

int arr_schedule(const scn *s, uint64_t seed, double until_s, size_t max_requests, arr_event **ev,
                 size_t *n) {
    *ev = NULL;
    *n = 0;
    if (until_s <= 0 && max_requests == 0) return TS_ERR_INVAL;
    /* A count bound alone always ends: either the count is met (every
     * process has a rate > 0) or every source runs dry (stops, trace end). */
    if (until_s <= 0) until_s = INFINITY;
    int nt = s->n_tenants;
    source *src = calloc((size_t)nt, sizeof *src);
    if (!src) return TS_ERR_NOMEM;
    for (int i = 0; i < nt; i++) {
        const scn_tenant *t = &s->tenants[i];
        rng_seed_stream(&src[i].gaps, seed, 2 * (uint64_t)i);
        rng_seed_stream(&src[i].lens, seed, 2 * (uint64_t)i + 1);
        double first = t->arrival.process == SCN_ARR_NONE ? INFINITY : t->start_s + arr_gap(&t->arrival, &src[i].gaps);
        src[i].next = t->stop_s > 0 && first >= t->stop_s ? INFINITY : first;
    }
    rng req_seeds;
    rng_seed_stream(&req_seeds, seed, UINT64_C(0xfeedface));
    size_t ti = 0, cap = 0, cnt = 0;
    arr_event *out = NULL;
    int rc = 0;
    for (;;) {
        /* The earliest source; a trace row ties after tenants' processes at
         * the same instant, and lower tenant indices go first. */
        int best = -1;
        double bt = INFINITY;
        for (int i = 0; i < nt; i++)
            if (src[i].next < bt) bt = src[i].next, best = i;
        /* Skip trace rows outside their tenant's [start, stop). */
        while (ti < s->n_trace) {
            const scn_trace_row *row = &s->trace[ti];
            const scn_tenant *t = &s->tenants[row->tenant];
            if (row->t_s >= t->start_s && (t->stop_s <= 0 || row->t_s < t->stop_s)) break;
            ti++;
        }
        int from_trace = ti < s->n_trace && s->trace[ti].t_s < bt;
        double t = from_trace ? s->trace[ti].t_s : bt;
        if (!(t < until_s) || (max_requests && cnt >= max_requests)) break;
        if (cnt >= ARR_MAX_EVENTS) {
            rc = TS_ERR_NOMEM;
            break;
        }
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            arr_event *g = realloc(out, nc * sizeof *out);
            if (!g) {
                rc = TS_ERR_NOMEM;
                break;
            }
            out = g;
            cap = nc;
        }
        arr_event *e = &out[cnt++];
        e->t_s = t;
        e->seed = rng_next(&req_seeds);
        if (from_trace) {
            const scn_trace_row *row = &s->trace[ti++];
            e->tenant = row->tenant;
            e->prompt_tokens = row->prompt_tokens;
            e->output_tokens = row->output_tokens;
        } else {
            const scn_tenant *tn = &s->tenants[best];
            e->tenant = best;
            e->prompt_tokens = arr_len(&tn->prompt, &src[best].lens);
            e->output_tokens = arr_len(&tn->output, &src[best].lens);
            double nx = bt + arr_gap(&tn->arrival, &src[best].gaps);
            src[best].next = tn->stop_s > 0 && nx >= tn->stop_s ? INFINITY : nx;
        }
    }
    free(src);
    if (rc) {
        free(out);
        return rc;
    }
    *ev = out;
    *n = cnt;
    return 0;
}
