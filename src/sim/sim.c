/* sim.c - the discrete-event fleet simulator; see sim.h. */
#include "sim.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "heap.h"
#include "rng.h"

/* One live request, found by its scheduler slot. */
typedef struct live {
    int32_t tenant;             /* fleet tenant */
    int32_t prompt, n_out, want;
    int64_t t_arr, t_first, t_last;   /* us; t_first < 0: no token yet */
} live;

typedef struct inst {
    sched *s;
    int busy;
    sched_plan plan;            /* the step in flight (the scheduler's arrays) */
    double step_us;
    int64_t last_end;           /* us; when its previous step ended (-1: none yet) */
    int64_t t_mark;             /* us; integrals below are taken up to here */
    int32_t kv_used, queued;    /* since t_mark */
    int32_t running;            /* since t_mark */
    int32_t seen_load, seen_kv; /* queued + running and kv_used at the picker's refresh */
    int32_t routed;             /* requests the picker sent here since */
    double kv_int, q_int;       /* integrals over time, us */
    int32_t n_blocks;
    live *live;                 /* (max_requests) by slot */
    rng noise;                  /* step-time noise */
    double noise_x;             /* its AR(1) state, in standard deviations */
    double noise_xs[SIM_NOISE_MAXC]; /* ... or its components' (sim_inst.noise_nc) */
    double noise_rho[SIM_NOISE_MAXC]; /* the components' lag-1 correlations */
    int32_t cluster;            /* which cluster it is in (run.cl) */
    sim_inst_stats st;
} inst;

/* Instances of one worker, and the tenants it serves (local id = rank). */
typedef struct worker {
    int *insts;
    int n_insts;
    uint64_t rr;
    int *groups;                /* the groups of its instances, each once */
    int n_groups;
    int64_t next_refresh;       /* us; the picker's next look at the replicas */
    int sync;                   /* a tenant with token or concurrency limits: every
                                   arrival sees the worker stepped up to it */
    int cluster;                /* which cluster it is in (run.cl) */
    heap ledger;                /* its tenants' backlog and limit updates (lentry),
                                   applied in time order */
} worker;

/* A tenant-level update from one instance's timeline. The instances of a
 * worker run up to different times (run.group), but a tenant's backlog
 * (any of its requests waiting) and its limits span them all: the updates
 * wait here and are applied in time order once every instance of the
 * worker has run past them. */
enum { LE_WAIT, LE_SERVED, LE_SETTLE };
typedef struct lentry {
    int64_t t;                  /* us */
    uint64_t seq;
    int32_t tenant;
    int32_t kind;               /* LE_WAIT: a request waits for its first token;
                                   LE_SERVED: one no longer does; LE_SETTLE: it ended */
    uint64_t reserved, used;    /* LE_SETTLE: tokens its limits reserved and it used */
} lentry;

static int le_less(const void *a, const void *b) {
    const lentry *x = a, *y = b;
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}
static const heap_ops LE_HEAP = {sizeof(lentry), le_less, NULL};

typedef struct tstate {
    int32_t local;              /* its id in its worker's schedulers */
    int32_t waiting;            /* accepted, no token yet */
    int64_t since;              /* us; when waiting became > 0 */
    int last_inst;              /* affinity; -1 none */
} tstate;

typedef struct ev {
    int64_t t;
    uint64_t seq;
    int32_t inst;
    int32_t timer;              /* 1: look at an idle instance again; 0: its step ends */
} ev;

static int ev_less(const void *a, const void *b) {
    const ev *x = a, *y = b;
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}
static const heap_ops EV_HEAP = {sizeof(ev), ev_less, NULL};

/* An arrival of the window being run (run.win). */
typedef struct pend {
    arr_event e;
    int64_t t;                  /* us */
} pend;

/* Groups joined by a worker (its replicas meet at the picker): the run's
 * unit of work within a window (run's comment). Cache-line aligned, as
 * lanes are: two threads write neighbouring ones at every step. */
typedef struct cluster {
    _Alignas(64) int *groups;   /* its groups, ascending */
    int n_groups;
    int *workers;               /* its workers, ascending */
    int n_workers;
    int n_insts;
    uint64_t seq;               /* orders its groups' events and its workers' ledger entries */
    int32_t first, n;           /* its arrivals this window: run.win[first .. first + n) */
} cluster;

struct run;

/* One thread's part of the run: the clock of whatever it is running now,
 * and what it writes that is not one cluster's (run's comment). */
typedef struct lane {
    _Alignas(64) struct run *r;
    int64_t now;                /* us */
    int64_t last_t;             /* us; the latest event or arrival it handled */
    int past_end;               /* a group still had an event after end_us */
    int oom;                    /* a heap could not grow: the run fails */
    uint64_t events, requests;
    int64_t *series;            /* (n_bins, 3) integrals over time, fixed point (SERIES_ONE) */
    double *step_tok, *step_svc; /* (n_tenants) this step's tokens and service, */
    int64_t *step_itl;          /* ... and gaps since the instance's previous step end, */
    int32_t *touched;           /* for the tenants in touched[0 .. n_touched) */
    int32_t n_touched;
    pthread_t th;
    int started;                /* th runs */
} lane;

typedef struct run {
    const sim_fleet *f;
    const scn *rs;
    const sim_opts *o;
    sim_result *out;
    inst *in;
    worker *w;
    int n_workers;
    tstate *ts;
    int *dev_busy;              /* (n_devices) steps in flight per device */
    double *dev_share;          /* (n_devices) the MPS shares of those steps' instances */
    lim_tenant *lim;            /* (n_tenants) admission limits */
    /* Instances that never touch each other's state between arrivals (no
     * shared device) form separate groups, each with its own event queue:
     * a group's steps run up to the next arrival it receives, so that its
     * schedulers stay in cache, rather than interleaving the whole fleet's
     * steps in one time order. Replicas of one worker meet only at
     * arrivals, through the picker, which reads them as of its last
     * refresh (refresh_us): so a worker's replicas are stepped together
     * once a refresh, and in between only the one an arrival goes to.
     *
     * Groups joined by a worker form a cluster, which shares nothing with
     * another but the arrival stream and the report (a tenant's requests
     * all go to its worker's cluster, and the report's calls for different
     * tenants touch nothing in common: report.h). So the loop takes the
     * arrivals a window at a time (window_us of simulated time, at most
     * SIM_WINDOW_MAX of them), sorts them by cluster, and runs each cluster
     * through the window alone: its arrivals in time order, each after its
     * worker's catch-up, then its groups up to the window's end. A cluster
     * sees the calls it would in one global time order, so the result does
     * not depend on the window, the order clusters run in, or how many
     * threads (lanes) share them: each cluster runs in one lane at a time,
     * and what a lane writes is its own (struct lane) or its clusters'
     * (instances, groups, workers, their tenants, the report's rows of
     * those tenants). The instance series, which every cluster adds to, is
     * kept per lane in integers (so exact, in any order) and summed at the
     * end. Its own clusters' state stays in its core's cache through the
     * window. */
    int *group;                 /* (n_insts) group of each instance */
    int64_t refresh_us;         /* the picker's refresh; 0: at every arrival */
    heap *gq;                   /* (n_groups) each group's pending events */
    int n_groups;
    cluster *cl;                /* (n_cl) */
    int n_cl;
    int *cl_order;              /* (n_cl) the order lanes take them in: largest first */
    int64_t window_us;
    pend *buf, *win;            /* (SIM_WINDOW_MAX) the window's arrivals: as read; by cluster */
    size_t n_buf;
    lane *lanes;                /* lane 0 is the caller's thread */
    int n_lanes;                /* running */
    int n_lanes_made;           /* allocated (to free) */
    int sync_made;              /* mu, go and done exist */
    pthread_mutex_t mu;         /* guards gen, busy, quit */
    pthread_cond_t go, done;    /* a window starts; every lane has finished it */
    uint64_t gen;               /* windows started */
    int busy;                   /* lanes other than 0 still in this window */
    int quit;                   /* lanes: stop */
    int64_t win_end;            /* us; the window being run ends here */
    int win_final;              /* the last one: to end_us inclusive, ledgers flushed */
    int next_cl;                /* the next of cl_order to take (atomic) */
    rpt_acc acc;
    int64_t end_us;             /* hard end */
    sched_item_result *none;    /* all "not finished", as long as the largest plan */
} run;

const char *sim_route_name(int route) {
    static const char *const n[] = {"least-loaded", "affinity", "round-robin"};
    return route >= 0 && route < 3 ? n[route] : "?";
}

int sim_route_parse(const char *s) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, sim_route_name(i)) == 0) return i;
    return -1;
}

/* ---- set-up ------------------------------------------------------------------ */

static int check_fleet(const sim_fleet *f, char *err, size_t errlen) {
    if (f->n_insts < 1 || f->n_tenants < 1 || f->n_tiers < 1) {
        snprintf(err, errlen, "the fleet needs at least one instance, tenant and tier");
        return TS_ERR_INVAL;
    }
    for (int i = 0; i < f->n_tenants; i++) {
        const sim_tenant *t = &f->tenants[i];
        if (t->cfg.tier < 0 || t->cfg.tier >= f->n_tiers || t->worker < -1) {
            snprintf(err, errlen, "tenant '%s': tier or worker out of range", t->name);
            return TS_ERR_INVAL;
        }
    }
    for (int i = 0; i < f->n_insts; i++)
        if (f->insts[i].worker < 0 || f->insts[i].device >= f->n_devices) {
            snprintf(err, errlen, "instance '%s': worker or device out of range", f->insts[i].name);
            return TS_ERR_INVAL;
        }
    return 0;
}

static int make_workers(run *r, char *err, size_t errlen) {
    const sim_fleet *f = r->f;
    for (int i = 0; i < f->n_insts; i++)
        if (f->insts[i].worker + 1 > r->n_workers) r->n_workers = f->insts[i].worker + 1;
    if (!(r->w = calloc((size_t)r->n_workers, sizeof(worker)))) return TS_ERR_NOMEM;
    for (int i = 0; i < f->n_insts; i++) r->w[f->insts[i].worker].n_insts++;
    for (int k = 0; k < r->n_workers; k++) {
        size_t n = (size_t)(r->w[k].n_insts ? r->w[k].n_insts : 1);
        if (!(r->w[k].insts = malloc(n * sizeof(int))) || !(r->w[k].groups = malloc(n * sizeof(int))) ||
            heap_init(&r->w[k].ledger, &LE_HEAP, 16, HEAP_GROW))
            return TS_ERR_NOMEM;
        r->w[k].n_insts = 0;
    }
    for (int i = 0; i < f->n_insts; i++) {
        worker *w = &r->w[f->insts[i].worker];
        w->insts[w->n_insts++] = i;
    }
    for (int t = 0; t < f->n_tenants; t++) {
        int k = f->tenants[t].worker;
        if (k >= r->n_workers || (k >= 0 && r->w[k].n_insts == 0)) {
            snprintf(err, errlen, "tenant '%s': its worker has no instance", f->tenants[t].name);
            return TS_ERR_INVAL;
        }
        if (k >= 0 && (f->tenants[t].tok_per_min || f->tenants[t].max_concurrent)) r->w[k].sync = 1;
    }
    return 0;
}

/* The next x of the AR(1) process x' = rho x + sqrt(1 - rho^2) z, z
 * standard normal (Box-Muller), whose stationary deviation is 1 whatever
 * rho. */
static double ar1_next(rng *g, double *x, double rho) {
    double u = rng_uniform_open(g), v = rng_uniform(g);
    double z = sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
    return *x = rho * *x + sqrt(1.0 - rho * rho) * z;
}

/* One scheduler, with the fleet's tiers and its worker's tenants. */
static int make_sched(run *r, int i, char *err, size_t errlen) {
    const sim_inst *si = &r->f->insts[i];
    sched_config c = si->sc;
    int n_ten = 0;
    for (int t = 0; t < r->f->n_tenants; t++) n_ten += r->f->tenants[t].worker == si->worker;
    c.max_tenants = n_ten > 0 ? n_ten : 1;
    if (!si->own_seed) sst_seed(&si->step, c.cost_seed);
    int rc = sched_new(&c, &r->in[i].s);
    if (rc) {
        snprintf(err, errlen, "instance '%s': the scheduler refuses its configuration (%d blocks, %d seqs, "
                 "budget %d..%d)", si->name, c.n_blocks, c.max_running, c.budget_min, c.budget_max);
        return rc;
    }
    for (int k = 0; k < r->f->n_tiers; k++)
        if ((rc = sched_tier_add(r->in[i].s, &r->f->tiers[k])) < 0) {
            snprintf(err, errlen, "tier '%s' refused", r->f->tiers[k].name);
            return rc;
        }
    for (int t = 0; t < r->f->n_tenants; t++) {
        if (r->f->tenants[t].worker != si->worker) continue;
        if ((rc = sched_tenant_add(r->in[i].s, &r->f->tenants[t].cfg)) < 0) {
            snprintf(err, errlen, "tenant '%s' refused", r->f->tenants[t].name);
            return rc;
        }
        r->ts[t].local = rc;
    }
    r->in[i].n_blocks = c.n_blocks;
    r->in[i].last_end = -1;
    rng_seed_stream(&r->in[i].noise, r->o->seed, (uint64_t)i);
    /* Each spell starts where it would stand at any step (a draw of its
     * stationary normal), not at 0: a 256-step spell would otherwise take
     * hundreds of steps to come into its own. */
    for (int k = 0; k < si->noise_nc; k++) {
        double any = 0;
        r->in[i].noise_rho[k] = exp(-1.0 / si->noise_tau[k]);
        if (si->noise_w[k] > 0) r->in[i].noise_xs[k] = ar1_next(&r->in[i].noise, &any, 0);
    }
    if (!(r->in[i].live = calloc((size_t)c.max_requests, sizeof(live)))) return TS_ERR_NOMEM;
    return 0;
}

static int find(int *up, int i) {
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
}

/* The groups (the run's comment): instances joined through a device (MPS
 * and time-slicing time a step by the device's other busy instances). */
static int make_groups(run *r) {
    const sim_fleet *f = r->f;
    int n = f->n_insts, *up = malloc((size_t)n * sizeof(int)), *dev_first = NULL, *last_k = NULL;
    if (f->n_devices > 0) dev_first = malloc((size_t)f->n_devices * sizeof(int));
    r->group = malloc((size_t)n * sizeof(int));
    int rc = TS_ERR_NOMEM;
    if (!up || (f->n_devices > 0 && !dev_first) || !r->group) goto out;
    for (int i = 0; i < n; i++) up[i] = i;
    for (int d = 0; d < f->n_devices; d++) dev_first[d] = -1;
    for (int i = 0; i < n; i++) {
        int d = f->insts[i].device;
        if (d < 0) continue;
        if (dev_first[d] < 0) dev_first[d] = i;
        else up[find(up, i)] = find(up, dev_first[d]);
    }
    /* Number the groups by their first instance: deterministic. */
    for (int i = 0; i < n; i++) r->group[i] = -1;
    for (int i = 0; i < n; i++) {
        int root = find(up, i);
        if (r->group[root] < 0) r->group[root] = r->n_groups++;
        r->group[i] = r->group[root];
    }
    if (!(r->gq = calloc((size_t)r->n_groups, sizeof(heap)))) goto out;
    for (int g = 0; g < r->n_groups; g++)
        if (heap_init(&r->gq[g], &EV_HEAP, 4, HEAP_GROW)) goto out;
    /* Each worker's groups, each once (last_k: the worker that last
     * listed the group). */
    if (!(last_k = malloc((size_t)r->n_groups * sizeof(int)))) goto out;
    for (int g = 0; g < r->n_groups; g++) last_k[g] = -1;
    for (int k = 0; k < r->n_workers; k++) {
        worker *w = &r->w[k];
        for (int j = 0; j < w->n_insts; j++) {
            int g = r->group[w->insts[j]];
            if (last_k[g] != k) w->groups[w->n_groups++] = g;
            last_k[g] = k;
        }
    }
    rc = 0;
out:
    free(up);
    free(dev_first);
    free(last_k);
    return rc;
}

/* n zeroed entries of size bytes, a multiple of 64, at a cache line. */
static void *aligned_calloc(size_t n, size_t size) {
    void *p = n && size ? aligned_alloc(64, n * size) : NULL;
    if (p) memset(p, 0, n * size);
    return p;
}

/* Clusters by size, largest first, then by index: (n_insts, index) pairs. */
static int cl_size_cmp(const void *a, const void *b) {
    const int *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The clusters (the run's comment): groups joined by a worker, numbered
 * by their first group; the order lanes take them in, largest first, so
 * that a window does not end waiting on a big one taken last. */
static int make_clusters(run *r) {
    int ng = r->n_groups, *up = malloc((size_t)ng * sizeof(int)), *of = malloc((size_t)ng * sizeof(int));
    int rc = TS_ERR_NOMEM;
    if (!up || !of) goto out;
    for (int g = 0; g < ng; g++) up[g] = g, of[g] = -1;
    for (int k = 0; k < r->n_workers; k++)
        for (int j = 1; j < r->w[k].n_groups; j++) up[find(up, r->w[k].groups[j])] = find(up, r->w[k].groups[0]);
    for (int k = 0; k < r->n_workers; k++) r->w[k].cluster = -1; /* none: a worker without instances */
    for (int g = 0; g < ng; g++) {
        int root = find(up, g);
        if (of[root] < 0) of[root] = r->n_cl++;
        of[g] = of[root];
    }
    r->cl = aligned_calloc((size_t)r->n_cl, sizeof(cluster));
    r->cl_order = malloc((size_t)r->n_cl * sizeof(int));
    if (!r->cl || !r->cl_order) goto out;
    for (int g = 0; g < ng; g++) r->cl[of[g]].n_groups++;
    for (int k = 0; k < r->n_workers; k++)
        if (r->w[k].n_groups) r->cl[of[r->w[k].groups[0]]].n_workers++;
    for (int c = 0; c < r->n_cl; c++) {
        cluster *x = &r->cl[c];
        if (!(x->groups = malloc((size_t)x->n_groups * sizeof(int))) ||
            !(x->workers = malloc((size_t)(x->n_workers ? x->n_workers : 1) * sizeof(int))))
            goto out;
        x->n_groups = x->n_workers = 0;
    }
    for (int g = 0; g < ng; g++) r->cl[of[g]].groups[r->cl[of[g]].n_groups++] = g;
    for (int k = 0; k < r->n_workers; k++) {
        if (!r->w[k].n_groups) continue;
        cluster *x = &r->cl[r->w[k].cluster = of[r->w[k].groups[0]]];
        x->workers[x->n_workers++] = k;
    }
    for (int i = 0; i < r->f->n_insts; i++) {
        r->in[i].cluster = of[r->group[i]];
        r->cl[r->in[i].cluster].n_insts++;
    }
    int *pairs = malloc((size_t)r->n_cl * 2 * sizeof(int));
    if (!pairs) goto out;
    for (int c = 0; c < r->n_cl; c++) pairs[2 * c] = r->cl[c].n_insts, pairs[2 * c + 1] = c;
    qsort(pairs, (size_t)r->n_cl, 2 * sizeof(int), cl_size_cmp);
    for (int c = 0; c < r->n_cl; c++) r->cl_order[c] = pairs[2 * c + 1];
    free(pairs);
    rc = 0;
out:
    free(up);
    free(of);
    return rc;
}

static int setup(run *r, char *err, size_t errlen) {
    const sim_fleet *f = r->f;
    int rc = check_fleet(f, err, errlen);
    if (rc) return rc;
    r->in = calloc((size_t)f->n_insts, sizeof(inst));
    r->ts = calloc((size_t)f->n_tenants, sizeof(tstate));
    r->dev_busy = calloc((size_t)(f->n_devices > 0 ? f->n_devices : 1), sizeof(int));
    r->dev_share = calloc((size_t)(f->n_devices > 0 ? f->n_devices : 1), sizeof(double));
    r->out->inst = calloc((size_t)f->n_insts, sizeof(sim_inst_stats));
    r->out->tenant = calloc((size_t)f->n_tenants, sizeof(sim_tenant_stats));
    r->lim = calloc((size_t)f->n_tenants, sizeof(lim_tenant));
    if (!r->in || !r->ts || !r->dev_busy || !r->dev_share || !r->out->inst || !r->out->tenant || !r->lim)
        return TS_ERR_NOMEM;
    for (int t = 0; t < f->n_tenants; t++) {
        const sim_tenant *st = &f->tenants[t];
        r->ts[t].last_inst = -1;
        if (lim_tenant_init(&r->lim[t], st->req_per_min, st->tok_per_min, st->max_concurrent, 0)) {
            snprintf(err, errlen, "tenant '%s': limits out of range", st->name);
            return TS_ERR_INVAL;
        }
    }
    if ((rc = make_workers(r, err, errlen))) return rc;
    for (int i = 0; i < f->n_insts; i++)
        if ((rc = make_sched(r, i, err, errlen))) return rc;
    int32_t most = 1;
    for (int i = 0; i < f->n_insts; i++)
        if (f->insts[i].sc.max_running > most) most = f->insts[i].sc.max_running;
    /* A plan holds at most two items per running sequence (sched.c sizes
     * its own array so). */
    if (!(r->none = calloc(2 * (size_t)most, sizeof(sched_item_result)))) return TS_ERR_NOMEM;
    if ((rc = make_groups(r)) || (rc = make_clusters(r))) return rc;
    r->buf = malloc(SIM_WINDOW_MAX * sizeof(pend));
    r->win = malloc(SIM_WINDOW_MAX * sizeof(pend));
    return r->buf && r->win ? 0 : TS_ERR_NOMEM;
}

/* ---- time integrals ---------------------------------------------------------- */

/* The series' columns (busy instances, KV fraction, queued requests) are
 * sums over instances of value x us, in integers (run's comment): a KV
 * fraction in units of 1 / SERIES_KV_ONE. A bin holds at most 64 s (two
 * days in 3,600 bins), so even 2^16 x 6.4e7 per instance leaves room for
 * two million instances. */
#define SERIES_KV_ONE 65536
static const double SERIES_ONE[3] = {1.0, SERIES_KV_ONE, 1.0};

/* Add v x (overlap of [a, b) with each bin) to column col of ln's series. */
static void add_bins(lane *ln, int64_t a, int64_t b, int64_t v, int col) {
    if (v == 0 || b <= a) return;
    const sim_result *out = ln->r->out;
    double bin_us = out->bin_s * 1e6;
    int64_t k = (int64_t)(a / bin_us);
    while (a < b && k < out->n_bins) {
        int64_t edge = (int64_t)((double)(k + 1) * bin_us);
        int64_t e = b < edge ? b : edge;
        if (e > a) ln->series[k * 3 + col] += v * (e - a);
        a = e;
        k++;
    }
}

/* Take instance i's integrals up to now, then read its state afresh. */
static void mark(lane *ln, int i) {
    inst *n = &ln->r->in[i];
    int64_t dt = ln->now - n->t_mark;
    if (dt > 0) {
        double kv = n->n_blocks ? (double)n->kv_used / n->n_blocks : 0;
        n->kv_int += kv * (double)dt;
        n->q_int += (double)n->queued * (double)dt;
        add_bins(ln, n->t_mark, ln->now, n->n_blocks ? (int64_t)n->kv_used * SERIES_KV_ONE / n->n_blocks : 0, 1);
        add_bins(ln, n->t_mark, ln->now, n->queued, 2);
        n->t_mark = ln->now;
    }
    sched_stats st;
    sched_stats_get(n->s, &st);
    n->kv_used = st.kv_used;
    n->queued = st.queued + st.swapped;
    n->running = st.running;
    double kv = n->n_blocks ? (double)st.kv_used / n->n_blocks : 0;
    if (kv > n->st.kv_max) n->st.kv_max = kv;
    if (n->queued > n->st.queue_max) n->st.queue_max = n->queued;
}

/* ---- requests ---------------------------------------------------------------- */

/* A tenant-level update at now, into its worker's ledger. */
static void ledger_push(lane *ln, int32_t t, int kind, uint64_t reserved, uint64_t used) {
    worker *w = &ln->r->w[ln->r->f->tenants[t].worker];
    lentry e = {ln->now, ln->r->cl[w->cluster].seq++, t, kind, reserved, used};
    if (heap_push(&w->ledger, &LE_HEAP, &e)) ln->oom = 1;
}

/* Apply worker w's updates before time `before`: every instance of w has
 * run up to it, so no earlier one can come. */
static void ledger_apply(run *r, worker *w, int64_t before) {
    for (const lentry *top; (top = heap_top(&w->ledger)) && top->t < before;) {
        lentry e;
        heap_pop(&w->ledger, &LE_HEAP, &e);
        tstate *s = &r->ts[e.tenant];
        if (e.kind == LE_WAIT) {
            if (s->waiting++ == 0) s->since = e.t;
        } else if (e.kind == LE_SERVED) {
            if (--s->waiting == 0 && e.t > s->since)
                rpt_acc_backlog(&r->acc, e.tenant, (double)s->since / 1e6, (double)e.t / 1e6);
        } else {
            lim_finish(&r->lim[e.tenant], e.reserved, e.used, e.t);
        }
    }
}

/* A request starts or stops waiting for its first token (the tenant's
 * backlog, for the report's fairness figures). */
static void backlog_add(lane *ln, int32_t t, int d) { ledger_push(ln, t, d > 0 ? LE_WAIT : LE_SERVED, 0, 0); }

/* A request that was admitted ends: its limits take back what it did not use. */
static void settle(lane *ln, const live *l) {
    ledger_push(ln, l->tenant, LE_SETTLE, (uint64_t)l->prompt + (uint64_t)l->want,
                (uint64_t)l->prompt + (uint64_t)l->n_out);
}

/* A request's record for the report. */
static void report_req(run *r, const live *l, int status, int64_t t_end) {
    rpt_req q = {0};
    q.tenant = l->tenant;
    q.status = status;
    q.t_sched = q.t_sent = (double)l->t_arr / 1e6;
    q.t_first = l->t_first >= 0 ? (double)l->t_first / 1e6 + r->o->overhead_s : -1.0;
    q.t_end = (double)t_end / 1e6 + (status == 200 ? r->o->overhead_s : 0);
    q.n_prompt = l->prompt;
    q.n_out = l->n_out;
    q.n_events = l->n_out;
    rpt_acc_request(&r->acc, &q);
}

/* The instance of worker w for tenant t (sim.h: routing). */
static int route(run *r, int32_t t) {
    if (r->f->tenants[t].worker < 0) return -1;
    worker *w = &r->w[r->f->tenants[t].worker];
    if (w->n_insts == 1) return w->insts[0];
    if (r->o->route == SIM_ROUTE_RR) return w->insts[w->rr++ % (uint64_t)w->n_insts];
    int best = -1, prev = r->ts[t].last_inst;
    double best_s = 0, prev_s = -1;
    for (int k = 0; k < w->n_insts; k++) {
        int i = w->insts[k];
        const inst *n = &r->in[i];
        double s = (double)(n->seen_load + n->routed) / r->f->insts[i].sc.max_running +
                   (n->n_blocks ? (double)n->seen_kv / n->n_blocks : 0);
        if (best < 0 || s < best_s) best = i, best_s = s;
        if (i == prev) prev_s = s;
    }
    if (r->o->route == SIM_ROUTE_AFFINITY && prev >= 0 && prev_s >= 0 && prev_s <= best_s + SIM_AFFINITY_SLACK)
        return prev;
    return best;
}

static void start_step(lane *ln, int i);
static void advance(lane *ln, int g, int64_t t, int inclusive);

/* The arrival at now, of a request of a served tenant. */
static void arrive(lane *ln, const arr_event *e) {
    run *r = ln->r;
    int32_t t = e->tenant;
    live l = {t, e->prompt_tokens, 0, e->output_tokens, ln->now, -1, -1};
    uint64_t reserve = (uint64_t)e->prompt_tokens + (uint64_t)e->output_tokens;
    ln->requests++;
    lim_reason lr = lim_admit(&r->lim[t], reserve, ln->now, NULL);
    if (lr != LIM_OK) {
        r->out->tenant[t].limited[lr]++;
        report_req(r, &l, 429, ln->now);
        return;
    }
    int i = route(r, t);
    if (i < 0) { /* a tenant the plan could not serve */
        lim_finish(&r->lim[t], reserve, 0, ln->now);
        r->out->tenant[t].unserved++;
        report_req(r, &l, 503, ln->now);
        return;
    }
    /* Its instance (and those sharing its device) catch up to now. */
    int64_t now = ln->now;
    worker *w = &r->w[r->f->tenants[t].worker];
    advance(ln, r->group[i], now, 0);
    ln->now = now;
    if (w->n_groups == 1) ledger_apply(r, w, now);
    inst *n = &r->in[i];
    r->ts[t].last_inst = i;
    n->routed++;
    n->st.requests++;
    sched_id id;
    sched_reason why;
    if (sched_submit(n->s, ln->now, r->ts[t].local, e->prompt_tokens, e->output_tokens, &id, &why) != 0) {
        lim_finish(&r->lim[t], reserve, 0, ln->now);
        r->out->tenant[t].rejected[why]++;
        report_req(r, &l, sched_reason_http(why), ln->now);
        return;
    }
    n->live[(uint32_t)id] = l;
    backlog_add(ln, t, 1);
    mark(ln, i);
    if (!n->busy) start_step(ln, i);
}

static void push(lane *ln, int i, int64_t t, int timer) {
    run *r = ln->r;
    ev e = {t, r->cl[r->in[i].cluster].seq++, i, timer};
    if (heap_push(&r->gq[r->group[i]], &EV_HEAP, &e)) ln->oom = 1;
}

/* Every end the scheduler has for instance i: into the report. */
static void drain_ends(lane *ln, int i) {
    run *r = ln->r;
    inst *n = &r->in[i];
    sched_end e;
    while (sched_poll_end(n->s, &e)) {
        live *l = &n->live[(uint32_t)e.id];
        settle(ln, l);
        int status = e.state == SCHED_FINISHED ? 200 : e.state == SCHED_FAILED ? sched_reason_http(e.reason) : 499;
        if (e.state == SCHED_FAILED) r->out->tenant[l->tenant].failed[e.reason]++;
        if (l->t_first < 0) backlog_add(ln, l->tenant, -1);
        report_req(r, l, status, ln->now);
        l->prompt = 0; /* the slot is free */
        n->st.engine_s += e.engine_us / 1e6;
    }
}

/* The next x of instance n's noise (sim_inst): one AR(1) of lag-1
 * correlation rho, or the weighted sum of its components and independent
 * noise. Of deviation 1 either way. */
static double noise_next(inst *n, const sim_inst *si, double rho) {
    if (si->noise_nc <= 0) return ar1_next(&n->noise, &n->noise_x, rho);
    double z = 0, w_all = 0, white = 0;
    for (int k = 0; k < si->noise_nc; k++) {
        if (!(si->noise_w[k] > 0)) continue;
        z += sqrt(si->noise_w[k]) * ar1_next(&n->noise, &n->noise_xs[k], n->noise_rho[k]);
        w_all += si->noise_w[k];
    }
    if (w_all < 1) z += sqrt(1 - w_all) * ar1_next(&n->noise, &white, 0);
    return z;
}

/* Model time t with si's noise (sim_inst) at z: normal of deviation
 * noise_us, kept >= t / 2, or t times the measured spread at Phi(z). */
static double noisy(double z, double t, const sim_inst *si) {
    if (si->noise_nq <= 0) {
        double y = t + si->noise_us * z;
        return y > 0.5 * t ? y : 0.5 * t;
    }
    const double *lv = si->noise_level, *q = si->noise_q;
    int n = si->noise_nq, k = 0;
    double u = 0.5 * erfc(-z / M_SQRT2);
    if (u <= lv[0]) return t * q[0];
    if (u >= lv[n - 1]) return t * q[n - 1];
    while (u >= lv[k + 1]) k++;
    return t * (q[k] + (q[k + 1] - q[k]) * (u - lv[k]) / (lv[k + 1] - lv[k]));
}

static void start_step(lane *ln, int i) {
    run *r = ln->r;
    inst *n = &r->in[i];
    const sim_inst *si = &r->f->insts[i];
    sched_step(n->s, ln->now, &n->plan);
    drain_ends(ln, i);
    mark(ln, i);
    if (n->plan.n_items == 0) {
        n->busy = 0;
        /* An empty step is still a step: closed at once, as the worker
         * closes it. */
        sched_result none = {r->none, 0, 0, 0, 0};
        sched_step_done(n->s, ln->now, &none);
        drain_ends(ln, i);
        mark(ln, i);
        if (n->queued > 0) push(ln, i, ln->now + SIM_IDLE_RETRY_US, 1);
        return;
    }
    sst_batch b;
    sst_batch_of(&n->plan, &b);
    int k = 1;
    double busy_share = si->step.share;
    if (si->device >= 0) {
        k = ++r->dev_busy[si->device];
        busy_share = r->dev_share[si->device] += si->step.share;
    }
    n->step_us = sst_step_us(&si->step, &b, k, busy_share, si->sc.block_bytes);
    if (si->noise_us > 0 || si->noise_nq > 0) {
        double rho = si->noise_rho > 0 ? (si->noise_rho < 1 ? si->noise_rho : 0.999) : 0;
        n->step_us = noisy(noise_next(n, si, rho), n->step_us, si);
    }
    if (!(n->step_us <= SST_MAX_US)) n->step_us = SST_MAX_US;
    n->busy = 1;
    int64_t d = (int64_t)ceil(n->step_us);
    add_bins(ln, ln->now, ln->now + d, 1, 0);
    push(ln, i, ln->now + d, 0);
}

/* One token for the request at plan item it, at now. */
static void token(lane *ln, int i, const sched_item *it) {
    run *r = ln->r;
    live *l = &r->in[i].live[(uint32_t)it->id];
    double svc = r->rs->w_out;
    if (l->t_first < 0) {
        l->t_first = ln->now;
        svc += r->rs->w_in * l->prompt;
        backlog_add(ln, l->tenant, -1);
    } else if (l->t_last == r->in[i].last_end) {
        ln->step_itl[l->tenant]++; /* the common gap: one step; counted once (flush_tokens) */
    } else {
        rpt_acc_itl(&r->acc, l->tenant, (double)(ln->now - l->t_last) / 1e6);
    }
    l->t_last = ln->now;
    l->n_out++;
    r->in[i].st.tokens_out++;
    /* The report hears of a step's tokens once per tenant (flush_tokens). */
    if (ln->step_tok[l->tenant] == 0) ln->touched[ln->n_touched++] = l->tenant;
    ln->step_tok[l->tenant] += 1.0;
    ln->step_svc[l->tenant] += svc;
}

static void flush_tokens(lane *ln, int i) {
    run *r = ln->r;
    double gap = (double)(ln->now - r->in[i].last_end) / 1e6;
    for (int32_t k = 0; k < ln->n_touched; k++) {
        int32_t t = ln->touched[k];
        rpt_acc_event(&r->acc, t, (double)ln->now / 1e6, ln->step_tok[t], ln->step_svc[t]);
        if (ln->step_itl[t]) rpt_acc_itl_n(&r->acc, t, gap, ln->step_itl[t]);
        ln->step_tok[t] = ln->step_svc[t] = 0;
        ln->step_itl[t] = 0;
    }
    ln->n_touched = 0;
}

static void end_step(lane *ln, int i) {
    run *r = ln->r;
    inst *n = &r->in[i];
    const sim_inst *si = &r->f->insts[i];
    for (int32_t k = 0; k < n->plan.n_items; k++)
        if (n->plan.items[k].sample) token(ln, i, &n->plan.items[k]);
    flush_tokens(ln, i);
    n->last_end = ln->now;
    /* Nothing a simulated model samples is an end token: every result is
     * "not finished"; the scheduler ends each request at its max_tokens. */
    sched_result sr = {r->none, n->plan.n_items, n->step_us, 0, 0};
    sched_step_done(n->s, ln->now, &sr);
    if (si->device >= 0) {
        r->dev_busy[si->device]--;
        r->dev_share[si->device] -= si->step.share;
    }
    n->st.steps++;
    n->st.busy_s += n->step_us / 1e6;
    n->busy = 0;
    drain_ends(ln, i);
    start_step(ln, i);
}

/* ---- the loop ------------------------------------------------------------------ */

typedef struct feed {
    sim_source *src;
    arr_event e;
    int have;
    int64_t t;                  /* us of e */
    int64_t last;               /* us of the one before: time never runs backwards */
    int64_t until;              /* us; arrivals at or after are dropped */
} feed;

static int feed_next(run *r, feed *fd) {
    int rc = fd->src->next(fd->src->ctx, &fd->e);
    if (rc < 0) return rc;
    fd->have = rc == 1;
    if (fd->have) {
        fd->t = (int64_t)llround(fd->e.t_s * 1e6);
        if (fd->t < fd->last) fd->t = fd->last;
        if (fd->t >= fd->until) fd->have = 0;
        else if (fd->e.tenant < 0 || fd->e.tenant >= r->f->n_tenants || fd->e.prompt_tokens < 1 ||
                 fd->e.output_tokens < 1)
            return TS_ERR_INVAL;
        fd->last = fd->t;
    }
    return 0;
}

/* Run group g's events before t (at t too when inclusive: an arrival at
 * the time of a step end comes first, as it would in one time order). */
static void advance(lane *ln, int g, int64_t t, int inclusive) {
    run *r = ln->r;
    heap *q = &r->gq[g];
    for (const ev *top; !ln->oom && (top = heap_top(q)) && (top->t < t || (inclusive && top->t == t));) {
        if (top->t > r->end_us) break;
        ev x;
        heap_pop(q, &EV_HEAP, &x);
        ln->now = x.t;
        if (x.t > ln->last_t) ln->last_t = x.t;
        ln->events++;
        inst *n = &r->in[x.inst];
        if (!x.timer && n->busy) end_step(ln, x.inst);
        else if (x.timer && !n->busy) start_step(ln, x.inst);
    }
    const ev *top = heap_top(q);
    if (top && top->t > r->end_us) ln->past_end = 1;
}

/* Start loading group g's first instance's state for an advance soon:
 * stage 0 its event, 1 its instance, 2..4 its scheduler's (sched_prefetch's
 * 0..2) and the live records of its step's items. */
static void prefetch_group(run *r, int g, int stage) {
    const heap *q = &r->gq[g];
    if (stage == 0) {
        __builtin_prefetch(q->v);
        return;
    }
    const ev *top = heap_top(q);
    if (!top) return;
    inst *n = &r->in[top->inst];
    if (stage == 1) {
        for (size_t o = 0; o < sizeof *n; o += 64) __builtin_prefetch((const char *)n + o);
        return;
    }
    sched_prefetch(n->s, stage - 2);
    if (stage == 4)
        for (int32_t k = 0; k < n->plan.n_items; k++) __builtin_prefetch(&n->live[(uint32_t)n->plan.items[k].id]);
}

/* Groups g[0 .. n) up to t, each group's state loaded while the ones
 * before it run. */
static void advance_groups(lane *ln, const int *g, int n, int64_t t, int inclusive) {
    for (int k = 0; k < n; k++) {
        for (int d = 1; d <= 5; d++)
            if (k + d < n) prefetch_group(ln->r, g[k + d], 5 - d);
        advance(ln, g[k], t, inclusive);
    }
}

/* Every instance of worker w up to t, and its ledger. */
static void step_all(lane *ln, worker *w, int64_t t) {
    advance_groups(ln, w->groups, w->n_groups, t, 0);
    ledger_apply(ln->r, w, t);
}

/* Before an arrival at t for worker w: the picker's refresh when one is
 * due (every replica stepped up to the refresh's time, then read), and
 * where a tenant's limits read every end, every replica stepped up to t. */
static void catch_up(lane *ln, worker *w, int64_t t) {
    run *r = ln->r;
    if (r->refresh_us == 0 || t >= w->next_refresh) {
        int64_t at = r->refresh_us ? t - t % r->refresh_us : t;
        step_all(ln, w, at);
        for (int k = 0; k < w->n_insts; k++) {
            inst *n = &r->in[w->insts[k]];
            n->seen_load = n->queued + n->running;
            n->seen_kv = n->kv_used;
            n->routed = 0;
        }
        w->next_refresh = at + r->refresh_us;
    }
    if (w->sync) step_all(ln, w, t);
}

/* Every ledger, to the end. */
static void ledger_flush(run *r) {
    for (int k = 0; k < r->n_workers; k++) ledger_apply(r, &r->w[k], INT64_MAX);
}

/* Cluster c through the window (run's comment): its arrivals in time
 * order, each after its worker's catch-up, then its groups up to the
 * window's end and its ledgers before it. */
static void run_cluster(lane *ln, const cluster *c) {
    run *r = ln->r;
    for (int32_t j = 0; j < c->n && !ln->oom; j++) {
        const pend *a = &r->win[c->first + j];
        catch_up(ln, &r->w[r->f->tenants[a->e.tenant].worker], a->t);
        ln->now = a->t;
        if (a->t > ln->last_t) ln->last_t = a->t;
        arrive(ln, &a->e);
        ln->events++;
    }
    int64_t end = r->win_final ? r->end_us : r->win_end;
    advance_groups(ln, c->groups, c->n_groups, end, r->win_final);
    for (int k = 0; k < c->n_workers; k++) ledger_apply(r, &r->w[c->workers[k]], r->win_final ? INT64_MAX : end);
}

/* Clusters, as long as there are any left to take in this window. */
static void lane_work(lane *ln) {
    run *r = ln->r;
    for (int k; (k = __atomic_fetch_add(&r->next_cl, 1, __ATOMIC_RELAXED)) < r->n_cl;)
        run_cluster(ln, &r->cl[r->cl_order[k]]);
}

/* A lane of its own thread: each window as lane 0 starts it, until quit. */
static void *lane_main(void *arg) {
    lane *ln = arg;
    run *r = ln->r;
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->gen == seen && !r->quit) pthread_cond_wait(&r->go, &r->mu);
        if (r->quit) break;
        seen = r->gen;
        pthread_mutex_unlock(&r->mu);
        lane_work(ln);
        pthread_mutex_lock(&r->mu);
        if (--r->busy == 0) pthread_cond_signal(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Run every cluster through the window ending at end (the last window:
 * up to end_us inclusive, ledgers flushed) in every lane, lane 0 here. */
static int run_window(run *r, int64_t end, int final) {
    r->win_end = end;
    r->win_final = final;
    r->next_cl = 0;
    if (r->n_lanes > 1) {
        pthread_mutex_lock(&r->mu);
        r->gen++;
        r->busy = r->n_lanes - 1;
        pthread_cond_broadcast(&r->go);
        pthread_mutex_unlock(&r->mu);
    }
    lane_work(&r->lanes[0]);
    if (r->n_lanes > 1) {
        pthread_mutex_lock(&r->mu);
        while (r->busy > 0) pthread_cond_wait(&r->done, &r->mu);
        pthread_mutex_unlock(&r->mu);
    }
    for (int k = 0; k < r->n_lanes; k++)
        if (r->lanes[k].oom) return TS_ERR_NOMEM;
    return 0;
}

/* The arrivals of the window from `from` into run.buf: up to from +
 * window_us (end_us at most) or SIM_WINDOW_MAX of them. The window ends
 * (*end) at the first arrival not taken, or at its limit: every arrival
 * taken is at or before the end, and every group runs up to it, so each
 * sees arrivals and its own events in one time order (arrivals first at
 * equal times) however the windows fall. Those of tenants the plan left
 * unserved touch no cluster: they are answered here, in lane 0. */
static int fill_window(run *r, feed *fd, int64_t from, int64_t *end) {
    int64_t limit = r->end_us - from > r->window_us ? from + r->window_us : r->end_us;
    lane *ln = &r->lanes[0];
    int rc = 0;
    r->n_buf = 0;
    while (!rc && fd->have && fd->t < limit) {
        if (r->n_buf == SIM_WINDOW_MAX) break;
        if (r->f->tenants[fd->e.tenant].worker < 0) {
            ln->now = fd->t;
            if (fd->t > ln->last_t) ln->last_t = fd->t;
            arrive(ln, &fd->e);
            ln->events++;
        } else {
            r->buf[r->n_buf++] = (pend){fd->e, fd->t};
        }
        rc = feed_next(r, fd);
    }
    *end = fd->have && fd->t < limit ? fd->t : limit;
    return rc;
}

/* run.buf's arrivals into run.win by cluster, each cluster's in time order. */
static void bucket(run *r) {
    for (int c = 0; c < r->n_cl; c++) r->cl[c].n = 0;
    for (size_t j = 0; j < r->n_buf; j++) r->cl[r->w[r->f->tenants[r->buf[j].e.tenant].worker].cluster].n++;
    int32_t first = 0;
    for (int c = 0; c < r->n_cl; c++) {
        r->cl[c].first = first;
        first += r->cl[c].n;
        r->cl[c].n = 0;
    }
    for (size_t j = 0; j < r->n_buf; j++) {
        cluster *c = &r->cl[r->w[r->f->tenants[r->buf[j].e.tenant].worker].cluster];
        r->win[c->first + c->n++] = r->buf[j];
    }
}

/* Arrivals a window at a time, the clusters through each (run's comment);
 * then every group to the end. Lane 0 ends at the run's end, with the
 * lanes' counts and series. */
static int loop(run *r, sim_source *src) {
    feed fd = {.src = src};
    fd.until = r->o->until_s > 0 ? (int64_t)llround(r->o->until_s * 1e6) : INT64_MAX;
    int rc = feed_next(r, &fd);
    for (int64_t from = 0, end; !rc && fd.have; from = end) {
        if ((rc = fill_window(r, &fd, from, &end))) break;
        bucket(r);
        rc = run_window(r, end, 0);
    }
    if (rc) return rc;
    r->n_buf = 0;
    bucket(r);
    if ((rc = run_window(r, r->end_us, 1))) return rc;
    lane *z = &r->lanes[0];
    size_t ns = (size_t)r->out->n_bins * 3;
    for (int k = 1; k < r->n_lanes; k++) {
        const lane *o = &r->lanes[k];
        if (o->last_t > z->last_t) z->last_t = o->last_t;
        z->past_end |= o->past_end;
        z->events += o->events;
        z->requests += o->requests;
        for (size_t j = 0; j < ns; j++) z->series[j] += o->series[j];
    }
    z->now = z->past_end ? r->end_us : z->last_t;
    return 0;
}

/* Requests still open at the end are cut, as bench cuts them. */
static void cut_open(lane *ln) {
    run *r = ln->r;
    for (int i = 0; i < r->f->n_insts; i++) {
        inst *n = &r->in[i];
        for (int32_t k = 0; k < r->f->insts[i].sc.max_requests; k++) {
            live *l = &n->live[k];
            if (l->prompt == 0) continue;
            if (l->t_first < 0) backlog_add(ln, l->tenant, -1);
            settle(ln, l);
            report_req(r, l, RPT_ST_ABORTED, ln->now);
            l->prompt = 0;
        }
    }
}

static void inst_stats(lane *ln) {
    run *r = ln->r;
    double run_us = r->out->run_s * 1e6;
    for (int i = 0; i < r->f->n_insts; i++) {
        inst *n = &r->in[i];
        mark(ln, i);
        sim_inst_stats *s = &n->st;
        s->util = run_us > 0 ? s->busy_s * 1e6 / run_us : 0;
        if (s->util > 1) s->util = 1; /* a step cut at the end */
        s->kv_mean = run_us > 0 ? n->kv_int / run_us : 0;
        s->queue_mean = run_us > 0 ? n->q_int / run_us : 0;
        sched_stats st;
        sched_stats_get(n->s, &st);
        memcpy(s->theta, st.cost_theta, sizeof(s->theta));
        s->cost = r->out->run_s / 3600.0 * r->f->insts[i].price_per_hour;
        r->out->inst[i] = *s;
    }
}

static void tenant_stats(run *r) {
    for (int i = 0; i < r->f->n_insts; i++) {
        const sim_inst *si = &r->f->insts[i];
        for (int t = 0; t < r->f->n_tenants; t++) {
            if (r->f->tenants[t].worker != si->worker) continue;
            sched_tenant_stats st;
            if (sched_tenant_stats_get(r->in[i].s, r->ts[t].local, &st)) continue;
            sim_tenant_stats *o = &r->out->tenant[t];
            /* The scheduler's own total: the requests still open at the end
             * ran steps too. */
            o->engine_s += st.engine_us / 1e6;
            o->cost += st.engine_us / 3.6e9 * si->price_per_hour;
            o->preempt_swap += st.preempt_swap;
            o->preempt_recompute += st.preempt_recompute;
            o->service += st.service;
        }
    }
}

static void series_out(run *r) {
    int nb = r->out->n_bins;
    double bin_us = r->out->bin_s * 1e6;
    for (int k = 0; k < nb * 3; k++) {
        double v = (double)r->lanes[0].series[k] / SERIES_ONE[k % 3] / bin_us;
        if (k % 3 < 2) v /= r->f->n_insts;
        r->out->series[k] = (float)v;
    }
}

/* Tenant t's cost is known when every instance of its worker has a price. */
static int priced(const sim_fleet *f, int t) {
    int any = 0;
    for (int i = 0; i < f->n_insts; i++) {
        if (f->insts[i].worker != f->tenants[t].worker) continue;
        if (!(f->insts[i].price_per_hour > 0)) return 0;
        any = 1;
    }
    return any;
}

static void stop_lanes(run *r) {
    if (r->n_lanes > 1) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_broadcast(&r->go);
        pthread_mutex_unlock(&r->mu);
    }
    for (int k = 1; k < r->n_lanes; k++) pthread_join(r->lanes[k].th, NULL);
    for (int k = 0; r->lanes && k < r->n_lanes_made; k++) {
        lane *ln = &r->lanes[k];
        free(ln->series);
        free(ln->step_tok);
        free(ln->step_svc);
        free(ln->step_itl);
        free(ln->touched);
    }
    free(r->lanes);
    if (r->sync_made) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->go);
        pthread_cond_destroy(&r->done);
    }
}

static void teardown(run *r) {
    stop_lanes(r);
    if (r->in)
        for (int i = 0; i < r->f->n_insts; i++) {
            sched_free(r->in[i].s);
            free(r->in[i].live);
        }
    if (r->w)
        for (int k = 0; k < r->n_workers; k++) {
            free(r->w[k].insts);
            free(r->w[k].groups);
            heap_deinit(&r->w[k].ledger);
        }
    free(r->in);
    free(r->w);
    free(r->ts);
    free(r->dev_busy);
    free(r->dev_share);
    free(r->lim);
    free(r->none);
    for (int g = 0; r->gq && g < r->n_groups; g++) heap_deinit(&r->gq[g]);
    free(r->gq);
    free(r->group);
    for (int c = 0; r->cl && c < r->n_cl; c++) {
        free(r->cl[c].groups);
        free(r->cl[c].workers);
    }
    free(r->cl);
    free(r->cl_order);
    free(r->buf);
    free(r->win);
}

/* The instance series' bins: the option, else one per second up to an hour
 * of them and coarser beyond. */
static int make_series(run *r, double horizon_s) {
    double b = r->o->bin_s > 0 ? r->o->bin_s : 1.0;
    while (horizon_s / b > 3600) b *= 2;
    r->out->bin_s = b;
    r->out->n_bins = (int)ceil(horizon_s / b) + 1;
    r->out->series = calloc((size_t)r->out->n_bins * 3, sizeof(float));
    return r->out->series ? 0 : TS_ERR_NOMEM;
}

/* The lanes: o->threads (0: one per online CPU), no more than there are
 * clusters, each past the first a thread of its own. A thread that cannot
 * start leaves fewer lanes, not a failed run. */
static int make_lanes(run *r) {
    int n = r->o->threads;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)(c < SIM_MAX_THREADS ? c : SIM_MAX_THREADS) : 1;
    }
    if (n > r->n_cl) n = r->n_cl;
    if (!(r->lanes = aligned_calloc((size_t)n, sizeof(lane)))) return TS_ERR_NOMEM;
    r->n_lanes_made = n; /* zeroed: stop_lanes frees what was allocated */
    size_t nt = (size_t)r->f->n_tenants, ns = (size_t)r->out->n_bins * 3;
    for (int k = 0; k < n; k++) {
        lane *ln = &r->lanes[k];
        ln->r = r;
        ln->series = calloc(ns, sizeof(int64_t));
        ln->step_tok = calloc(nt, sizeof(double));
        ln->step_svc = calloc(nt, sizeof(double));
        ln->step_itl = calloc(nt, sizeof(int64_t));
        ln->touched = calloc(nt, sizeof(int32_t));
        if (!ln->series || !ln->step_tok || !ln->step_svc || !ln->step_itl || !ln->touched) return TS_ERR_NOMEM;
    }
    r->n_lanes = 1;
    if (n == 1) return 0;
    if (pthread_mutex_init(&r->mu, NULL)) return 0;
    if (pthread_cond_init(&r->go, NULL)) {
        pthread_mutex_destroy(&r->mu);
        return 0;
    }
    if (pthread_cond_init(&r->done, NULL)) {
        pthread_cond_destroy(&r->go);
        pthread_mutex_destroy(&r->mu);
        return 0;
    }
    r->sync_made = 1;
    for (int k = 1; k < n && !pthread_create(&r->lanes[k].th, NULL, lane_main, &r->lanes[k]); k++) r->n_lanes++;
    return 0;
}

/* Noise components noise_next can draw (sim_inst), or none. */
static int spells_ok(const sim_inst *si) {
    if (si->noise_nc < 0 || si->noise_nc > SIM_NOISE_MAXC) return 0;
    double sum = 0;
    for (int k = 0; k < si->noise_nc; k++) {
        if (!(si->noise_w[k] >= 0 && si->noise_tau[k] > 0 && isfinite(si->noise_tau[k]))) return 0;
        sum += si->noise_w[k];
    }
    return sum <= 1 + 1e-9;
}

/* A measured step-time spread noisy can interpolate (sim_inst), or none. */
static int spread_ok(const sim_inst *si) {
    if (si->noise_nq == 0) return 1;
    if (si->noise_nq < 0 || si->noise_nq > SIM_NOISE_MAXQ) return 0;
    for (int k = 0; k < si->noise_nq; k++) {
        double l = si->noise_level[k], q = si->noise_q[k];
        if (!(l > 0 && l < 1 && q > 0 && isfinite(q))) return 0;
        if (k && !(l > si->noise_level[k - 1] && q >= si->noise_q[k - 1])) return 0;
    }
    return 1;
}

int sim_run(const sim_fleet *f, const scn *rs, sim_source *src, const sim_opts *o, sim_result *out,
            char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (err && errlen) err[0] = 0;
    if (!(o->until_s > 0) || !(o->drain_s >= 0) || !(o->until_s + o->drain_s <= SIM_MAX_RUN_S)) {
        snprintf(err, errlen, "the simulation needs an end: 0 < until + drain <= %.0f s (%.0f days)", SIM_MAX_RUN_S,
                 SIM_MAX_RUN_S / 86400);
        return TS_ERR_INVAL;
    }
    if (!(o->route_refresh_s >= 0 && o->route_refresh_s <= SIM_MAX_RUN_S)) {
        snprintf(err, errlen, "the picker's refresh must be 0 .. %.0f s", SIM_MAX_RUN_S);
        return TS_ERR_INVAL;
    }
    if (!(o->window_s >= 0 && o->window_s <= SIM_MAX_RUN_S) || o->threads < 0 || o->threads > SIM_MAX_THREADS) {
        snprintf(err, errlen, "the window must be 0 .. %.0f s and the threads 0 .. %d", SIM_MAX_RUN_S,
                 SIM_MAX_THREADS);
        return TS_ERR_INVAL;
    }
    for (int i = 0; i < f->n_insts; i++)
        if (!spread_ok(&f->insts[i])) {
            snprintf(err, errlen, "instance %s: its step-time spread needs 1..%d levels ascending in (0, 1) "
                     "and non-decreasing quantiles > 0", f->insts[i].name, SIM_NOISE_MAXQ);
            return TS_ERR_INVAL;
        } else if (!spells_ok(&f->insts[i])) {
            snprintf(err, errlen, "instance %s: its noise needs 0..%d spell lengths > 0 with weights >= 0 "
                     "summing to at most 1", f->insts[i].name, SIM_NOISE_MAXC);
            return TS_ERR_INVAL;
        }
    run r = {.f = f, .rs = rs, .o = o, .out = out};
    r.end_us = (int64_t)llround((o->until_s + o->drain_s) * 1e6);
    r.refresh_us = (int64_t)llround(o->route_refresh_s * 1e6);
    r.window_us = (int64_t)llround((o->window_s > 0 ? o->window_s : SIM_WINDOW_S) * 1e6);
    if (r.window_us < 1) r.window_us = 1;
    int rc = setup(&r, err, errlen);
    if (!rc) rc = make_series(&r, o->until_s + o->drain_s);
    if (!rc) rc = make_lanes(&r);
    /* The report's timeline as coarse as the instance series (an hour of
     * bins at most), so its size does not grow with the run's length. */
    if (!rc) rc = rpt_acc_init(&r.acc, rs, o->until_s + o->drain_s, out->bin_s, o->bounded);
    if (!rc) {
        rc = loop(&r, src);
        if (rc == TS_ERR_NOMEM && !err[0]) snprintf(err, errlen, "out of memory");
        if (rc && !err[0]) snprintf(err, errlen, "the arrivals failed (%d)", rc);
    }
    if (!rc) {
        out->run_s = (double)r.lanes[0].now / 1e6;
        out->events = r.lanes[0].events;
        out->requests = r.lanes[0].requests;
        cut_open(&r.lanes[0]);
        ledger_flush(&r);
        inst_stats(&r.lanes[0]);
        tenant_stats(&r);
        series_out(&r);
        rc = rpt_acc_finish(&r.acc, out->run_s, &out->report);
        for (int t = 0; !rc && t < f->n_tenants; t++)
            rpt_cost_set(&out->report, t, out->tenant[t].engine_s, priced(f, t) ? out->tenant[t].cost : -1);
    }
    rpt_acc_deinit(&r.acc);
    teardown(&r);
    if (rc) sim_result_free(out);
    return rc;
}

void sim_result_free(sim_result *r) {
    rpt_free(&r->report);
    free(r->inst);
    free(r->tenant);
    free(r->series);
    memset(r, 0, sizeof(*r));
}
