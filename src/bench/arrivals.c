/* arrivals.c - open-loop schedules; see arrivals.h. */
#include "arrivals.h"

#include <math.h>
#include <stdlib.h>

#include "err.h"
#include "heap.h"

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

/* ---- the stream ----------------------------------------------------------- */

/* A heap element: a source and the time of its next event. */
typedef struct arr_src {
    double next;              /* s */
    int32_t id;               /* tenant index, or n_tenants for the trace */
} arr_src;

static int src_less(const void *a, const void *b) {
    const arr_src *x = a, *y = b;
    if (x->next != y->next) return x->next < y->next;
    return x->id < y->id;
}

static const heap_ops SRC_OPS = {sizeof(arr_src), src_less, NULL};

/* A tenant's generator: its streams and its process at the run's load. */
typedef struct arr_gen {
    rng gaps, lens;
    scn_arrival a;            /* rate multiplied by the load */
} arr_gen;

struct arr_stream {
    const scn *s;
    double until_s;           /* s; INFINITY when only counted */
    size_t max;               /* events; 0 = no count bound */
    size_t cnt;               /* events delivered */
    double t_mul;             /* trace times: time_scale / load */
    rng req_seeds;
    arr_gen *gen;             /* (n_tenants) */
    heap h;                   /* arr_src, fixed: n_tenants + 1 */
    size_t ti;                /* a loaded trace: its next row */
    scn_trace_reader *rd;     /* a streamed trace; NULL otherwise */
    scn_trace_row row;        /* the trace's next row, scaled, when it is in the heap */
    int rc;                   /* a sticky error */
    char err[512];
};

static double factor(double v) { return v > 0 ? v : 1; }

/* The trace's next row inside its tenant's [start, stop) into st->row: 1,
 * 0 when the trace is done, or an error. A row past the run's window is
 * taken whatever its tenant: it ends the stream (arr_stream_next), so a
 * streamed file is read no further than the window. */
static int trace_advance(arr_stream *st) {
    const scn *s = st->s;
    for (;;) {
        scn_trace_row r;
        if (st->rd) {
            int rc = scn_trace_next(st->rd, &r, st->err, sizeof st->err);
            if (rc <= 0) return rc;
        } else {
            if (st->ti >= s->n_trace) return 0;
            r = s->trace[st->ti++];
        }
        r.t_s *= st->t_mul;
        const scn_tenant *t = &s->tenants[r.tenant];
        if (r.t_s >= st->until_s || (r.t_s >= t->start_s && (t->stop_s <= 0 || r.t_s < t->stop_s))) {
            st->row = r;
            return 1;
        }
    }
}

/* A tenant's next arrival after now, or INFINITY at its stop. */
static double gen_next(const scn_tenant *t, arr_gen *g, double now) {
    double nx = now + arr_gap(&g->a, &g->gaps);
    return t->stop_s > 0 && nx >= t->stop_s ? INFINITY : nx;
}

int arr_stream_open(arr_stream **out, const scn *s, uint64_t seed, double until_s, size_t max_requests, char *err,
                    size_t errlen) {
    *out = NULL;
    if (until_s <= 0 && max_requests == 0)
        return err_set(err, errlen, TS_ERR_INVAL, "a schedule needs a time or a count bound");
    /* A count bound alone always ends: either the count is met (every
     * process has a rate > 0) or every source runs dry (stops, trace end). */
    int nt = s->n_tenants, rc = TS_ERR_NOMEM;
    arr_stream *st = calloc(1, sizeof *st);
    if (!st) return err_set(err, errlen, rc, "out of memory");
    *st = (arr_stream){.s = s, .until_s = until_s > 0 ? until_s : INFINITY, .max = max_requests,
                       .t_mul = factor(s->feed.time_scale) / factor(s->feed.load)};
    st->gen = calloc((size_t)nt + 1, sizeof *st->gen);
    if (!st->gen || heap_init(&st->h, &SRC_OPS, (size_t)nt + 1, HEAP_FIXED)) goto err;
    for (int i = 0; i < nt; i++) {
        const scn_tenant *t = &s->tenants[i];
        arr_gen *g = &st->gen[i];
        rng_seed_stream(&g->gaps, seed, 2 * (uint64_t)i);
        rng_seed_stream(&g->lens, seed, 2 * (uint64_t)i + 1);
        g->a = t->arrival;
        g->a.rate *= factor(s->feed.load);
        if (t->arrival.process == SCN_ARR_NONE) continue;
        arr_src src = {gen_next(t, g, t->start_s), i};
        if (src.next < INFINITY) heap_push(&st->h, &SRC_OPS, &src);
    }
    rng_seed_stream(&st->req_seeds, seed, UINT64_C(0xfeedface));
    if (!s->trace && s->feed.stream && s->trace_path[0] &&
        (rc = scn_trace_open(s, &st->rd, st->err, sizeof st->err)))
        goto err;
    if ((rc = trace_advance(st)) < 0) goto err;
    if (rc == 1) heap_push(&st->h, &SRC_OPS, &(arr_src){st->row.t_s, nt});
    *out = st;
    return 0;
err:
    err_set(err, errlen, rc, "%s", st->err[0] ? st->err : err_str(rc));
    arr_stream_close(st);
    return rc;
}

int arr_stream_next(arr_stream *st, arr_event *ev) {
    if (st->rc) return st->rc;
    arr_src *top = heap_top(&st->h);
    if (!top || !(top->next < st->until_s) || (st->max && st->cnt >= st->max)) return 0;
    const scn *s = st->s;
    int32_t id = top->id;
    ev->t_s = top->next;
    ev->seed = rng_next(&st->req_seeds);
    if (id == s->n_tenants) {
        ev->tenant = st->row.tenant;
        ev->prompt_tokens = st->row.prompt_tokens;
        ev->output_tokens = st->row.output_tokens;
        int rc = trace_advance(st);
        /* A bad row ends the stream after this event, which is good. */
        if (rc < 0) st->rc = rc;
        if (rc == 1) {
            top->next = st->row.t_s;
            heap_sink(&st->h, &SRC_OPS, 0);   /* rows come in time order */
        } else {
            heap_pop(&st->h, &SRC_OPS, NULL);
        }
    } else {
        const scn_tenant *tn = &s->tenants[id];
        arr_gen *g = &st->gen[id];
        ev->tenant = id;
        ev->prompt_tokens = arr_len(&tn->prompt, &g->lens);
        ev->output_tokens = arr_len(&tn->output, &g->lens);
        double nx = gen_next(tn, g, top->next);
        if (nx < INFINITY) {
            top->next = nx;
            heap_sink(&st->h, &SRC_OPS, 0);
        } else {
            heap_pop(&st->h, &SRC_OPS, NULL);
        }
    }
    st->cnt++;
    return 1;
}

const char *arr_stream_error(const arr_stream *st) { return st->rc ? st->err : ""; }
size_t arr_stream_count(const arr_stream *st) { return st->cnt; }

scn_trace_stats arr_stream_trace_stats(const arr_stream *st) {
    return st->rd ? scn_trace_reader_stats(st->rd) : st->s->trace_stats;
}

void arr_stream_close(arr_stream *st) {
    if (!st) return;
    scn_trace_close(st->rd);
    heap_deinit(&st->h);
    free(st->gen);
    free(st);
}

/* ---- the whole schedule ---------------------------------------------------- */

int arr_schedule(const scn *s, uint64_t seed, double until_s, size_t max_requests, arr_event **ev,
                 size_t *n) {
    *ev = NULL;
    *n = 0;
    arr_stream *st;
    int rc = arr_stream_open(&st, s, seed, until_s, max_requests, NULL, 0);
    if (rc) return rc;
    size_t cap = 0, cnt = 0;
    arr_event *out = NULL, e;
    while ((rc = arr_stream_next(st, &e)) == 1) {
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
        out[cnt++] = e;
    }
    arr_stream_close(st);
    if (rc) {
        free(out);
        return rc;
    }
    *ev = out;
    *n = cnt;
    return 0;
}
