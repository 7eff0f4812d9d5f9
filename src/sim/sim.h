/*
 * sim.h - the fleet simulator: the real core/ scheduler of every model
 * instance, driven by a discrete-event clock on modelled devices.
 *
 * Each instance is what one `tessera serve` process is: a sched (the same
 * code, the same configuration: tiers, tenants with weights and quotas, KV
 * pool, batch limits) and an engine whose step takes the time sstep.h says
 * instead of running a model. The event loop does what serve/worker.c's
 * loop does, with the clock replaced:
 *     arrival at t         the tenant's limits (as the server's HTTP layer
 *                          applies them: 429 when over), then route to an
 *                          instance of its worker and sched_submit(t); an
 *                          idle instance starts a step;
 *     step start at t      sched_step(t): the plan; its duration from the
 *                          step model; the step ends at t + duration;
 *     step end at t'       every item that samples makes one token at t';
 *                          sched_step_done(t') with the modelled duration;
 *                          every end event polled; the next step starts at
 *                          t' (continuous batching, no gap);
 *     idle with a queue    looked at again 20 ms later, as the worker's
 *                          timed wait does.
 * Requests never stop early (a simulated token is never an end token): a
 * request ends at its max_tokens, as `tessera bench` asks with ignore_eos.
 * The scheduler's cost model is seeded from the instance's step model (a
 * deployment calibrated on its device) and fits the modelled steps online,
 * as the server's fits its measured ones.
 *
 * Routing between the instances (replicas) of one worker, at arrival:
 *   least-loaded  the lowest (queued + running) / max_running + KV used /
 *                 KV total (what the Gateway API Inference Extension's
 *                 endpoint picker scores: queue depth and KV utilisation);
 *   affinity      the tenant's previous instance while its score is within
 *                 SIM_AFFINITY_SLACK of the best, else the best (fewer
 *                 instances per tenant: its prefix cache and its fair share
 *                 stay together);
 *   round-robin   each worker's instances in turn.
 * Ties go to the lowest index, so runs are deterministic. As the picker
 * does, the scores read each replica as of the picker's last refresh of its
 * metrics (every route_refresh_s, aligned to multiples of it), with the
 * requests it has sent there since counted as queued; 0 reads every
 * replica afresh at every arrival.
 *
 * Time order. Instances that share no device meet only at arrivals, so
 * each group of them (those joined by devices) has its own event queue and
 * runs up to the next arrival it receives, its schedulers in cache; a
 * worker's replicas are all brought up to each refresh of the picker, and
 * in between only the one an arrival goes to. What spans a worker's
 * replicas (a tenant's backlog, its limits) is updated through a ledger in
 * time order; a tenant with token or concurrency limits, which read every
 * request's end at admission, has its worker stepped up to every arrival.
 * Groups joined by workers (clusters) meet only in the report, at
 * different tenants' rows: the arrivals are taken a window at a time, and
 * each cluster runs through the window alone, in one of several threads.
 *
 * What is reported: the per-tenant report of `tessera bench` (report.h),
 * fed request by request (bounded memory when asked), and per instance
 * its utilisation, KV occupancy and queue length, averaged and over time.
 * A request still open at the end (until + drain) is cut, as bench cuts
 * it. Requests are identified by (instance, scheduler slot): nothing is
 * kept per request after it ends.
 *
 * Determinism: the same fleet, arrivals and options give the same calls
 * into every scheduler in the same order, so the same report, to the byte,
 * whatever the window and the number of threads.
 */
#ifndef TS_SIM_SIM_H
#define TS_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "arrivals.h"
#include "ratelimit.h"
#include "report.h"
#include "sched.h"
#include "sstep.h"

#define SIM_AFFINITY_SLACK 0.25
#define SIM_IDLE_RETRY_US 20000
#define SIM_NOISE_MAXQ 32               /* levels of a measured step-time spread */
#define SIM_NOISE_MAXC 16               /* spell lengths of the noise (noise_nc) */
#define SIM_ROUTE_REFRESH_S 0.05       /* the endpoint picker's --refresh-metrics-interval */
#define SIM_MAX_RUN_S (2.0 * 86400)    /* longest run: the report keeps one-second slots */
/* Arrivals taken at a time, simulated s (sim.c's run): each cluster then
 * runs that long with its state in its core's cache. In bench_sim's fleet,
 * 16 s ran 1.2x the requests per wall second of 1 s; 32 s, no more. */
#define SIM_WINDOW_S 16.0
#define SIM_WINDOW_MAX 65536           /* arrivals in a window at most */
#define SIM_MAX_THREADS 64

enum { SIM_ROUTE_LEAST = 0, SIM_ROUTE_AFFINITY, SIM_ROUTE_RR };

typedef struct sim_tenant {
    char name[SCHED_NAME_MAX];
    sched_tenant_cfg cfg;       /* as each of its instances registers it */
    int worker;                 /* which instances serve it: those of this worker;
                                   -1: none (the plan could not serve it: 503) */
    double plan_ttft_s;         /* the plan's promise, 0 = none: mean TTFT */
    double plan_ttft_p99_s;     /* ... p99 TTFT */
    double plan_tpot_s;         /* ... TPOT */
    /* The server's admission limits (ratelimit.h; 0 = unlimited), held
     * fleet-wide: a tenant's requests/min, tokens/min (prompt + max_tokens
     * reserved, the unused part given back at the end) and in-flight cap. */
    uint64_t req_per_min, tok_per_min;
    uint32_t max_concurrent;
} sim_tenant;

typedef struct sim_inst {
    char name[96];
    char model[SCHED_NAME_MAX];
    int worker;                 /* instances of one worker serve the same tenants */
    int device;                 /* shared device (GPU, GI) for MPS / time-slicing, -1: none */
    sst_model step;
    sched_config sc;            /* geometry and policy; tiers and tenants come from the fleet */
    int own_seed;               /* 1: the scheduler's cost model starts from sc.cost_seed (a
                                   server's own fit, which its tight prior then holds to);
                                   0: from the step model (sst_seed), as a deployment
                                   calibrated on its device would */
    double price_per_hour;      /* of its device share; 0 = unknown */
    double noise_us;            /* standard deviation of a step's time around the model
                                   (a measured fit's residual scale): normal, clamped to
                                   keep a step >= half its model time; 0 = none */
    double noise_rho;           /* lag-1 autocorrelation of that noise, 0..1 (an AR(1)
                                   process: slow steps come in runs, as a shared
                                   machine's do); 0 = independent steps */
    /* With noise_nq > 0, the noise is instead a measured distribution of a
     * step's time over the model's (cost.h, "the spread around the
     * predictions"): a step takes model x Q(u), Q interpolated linearly
     * between noise_q[k] at the levels noise_level[k] (ascending in (0, 1);
     * constant beyond the first and last), u = Phi(x) of the same AR(1)
     * x, so runs of slow steps keep noise_rho. noise_us is then unused. */
    int noise_nq;
    double noise_level[SIM_NOISE_MAXQ], noise_q[SIM_NOISE_MAXQ];
    /* With noise_nc > 0, x is instead the sum of noise_nc AR(1) processes
     * (each of deviation 1, lag-1 correlation exp(-1 / noise_tau[k]) for
     * a time constant of noise_tau[k] steps) weighted sqrt(noise_w[k]),
     * and independent normal noise weighted sqrt(1 - sum of noise_w):
     * still of deviation 1, so the spread is the same, but with slow
     * spells of every length the server measured (cost.h, "how the spread
     * is laid out in time"), which one AR(1) cannot give. noise_rho is
     * then unused. noise_w >= 0, summing to at most 1; noise_tau > 0. */
    int noise_nc;
    double noise_w[SIM_NOISE_MAXC], noise_tau[SIM_NOISE_MAXC];
} sim_inst;

/* What to simulate. The caller owns every array. */
typedef struct sim_fleet {
    const sched_tier *tiers;
    int n_tiers;
    const sim_tenant *tenants;
    int n_tenants;
    const sim_inst *insts;
    int n_insts;
    int n_devices;              /* devices are 0 .. n_devices - 1 */
} sim_fleet;

/* Where arrivals come from: next() fills ev (its tenant an index into the
 * fleet's tenants, its time non-decreasing) and returns 1, 0 at the end,
 * or a negative code (the run stops with it). */
typedef struct sim_source {
    int (*next)(void *ctx, arr_event *ev);
    void *ctx;
} sim_source;

typedef struct sim_opts {
    int route;                  /* SIM_ROUTE_* */
    double until_s;             /* no arrival at or after this; > 0, until + drain at most
                                   SIM_MAX_RUN_S (a longer trace: a window of it) */
    double drain_s;             /* then requests still open are cut */
    int bounded;                /* report in bounded memory (report.h) */
    double bin_s;               /* instance series bin, s; 0 = picked from the run */
    double overhead_s;          /* between client and engine (HTTP, streaming): added to
                                   what a client would see of each request's first token
                                   and end; 0 = none */
    uint64_t seed;              /* of the step-time noise (instance i: stream i) */
    double route_refresh_s;     /* the picker reads the replicas' queues and KV use as of
                                   its last refresh, this often (SIM_ROUTE_REFRESH_S is
                                   the Gateway API Inference Extension's default), plus
                                   the requests it has sent each since; 0: it reads them
                                   afresh at every arrival */
    /* How the run is carried out, not what it computes: the same report,
     * to the byte, whatever these are. */
    int threads;                /* 0: one per online CPU (at most SIM_MAX_THREADS) */
    double window_s;            /* arrivals taken this much simulated time at a time
                                   (0: SIM_WINDOW_S): longer keeps each instance's state
                                   in cache across more steps, and buffers more */
} sim_opts;

/* Per instance, over the run. */
typedef struct sim_inst_stats {
    uint64_t steps;
    double busy_s;              /* time with a step in flight */
    double util;                /* busy_s / run */
    double kv_mean, kv_max;     /* fraction of the pool in use, time-weighted mean and max */
    double queue_mean;          /* requests queued (not running), time-weighted */
    int32_t queue_max;
    uint64_t requests;          /* routed to it */
    uint64_t tokens_out;
    double engine_s;            /* step time its ended requests were charged (token share) */
    double theta[4];            /* the scheduler's step-time fit at the end (cost.h, us) */
    double cost;                /* run x price: what holding its device share cost, busy
                                   or idle (tenants are charged their engine time only, as
                                   the server charges them, so the two differ by idle time) */
} sim_inst_stats;

/* Per tenant, summed over its instances (scheduler counters). */
typedef struct sim_tenant_stats {
    uint64_t rejected[SCHED_R_COUNT];   /* at submit, by reason */
    uint64_t failed[SCHED_R_COUNT];     /* after acceptance, by reason */
    uint64_t unserved;          /* arrivals with no instance to go to */
    uint64_t limited[5];        /* refused by its limits, by lim_reason (429) */
    uint64_t preempt_swap, preempt_recompute;
    double service;             /* weighted tokens */
    double engine_s;            /* step time attributed by token share */
    double cost;                /* engine_s x its instances' price */
} sim_tenant_stats;

typedef struct sim_result {
    rpt report;                 /* the report of `tessera bench`, per fleet tenant */
    double run_s;
    uint64_t requests;          /* arrivals */
    uint64_t events;            /* steps + arrivals + timers handled */
    sim_inst_stats *inst;       /* (n_insts) */
    sim_tenant_stats *tenant;   /* (n_tenants) */
    int n_bins;
    double bin_s;
    float *series;              /* (n_bins, 3): fleet utilisation, KV fraction, queued requests */
} sim_result;

/* Run the simulation. rs names the report's tenants (one per fleet tenant,
 * same order: names, weights, SLO targets, service weights), as a bench
 * scenario would. Returns 0, TS_ERR_INVAL (an inconsistent fleet: err
 * says what), TS_ERR_NOMEM, or the source's error. On success the caller
 * frees out with sim_result_free. */
int sim_run(const sim_fleet *f, const scn *rs, sim_source *src, const sim_opts *o, sim_result *out,
            char *err, size_t errlen);
void sim_result_free(sim_result *r);

const char *sim_route_name(int route);
/* "least-loaded", "affinity", "round-robin" to SIM_ROUTE_*, -1 if none. */
int sim_route_parse(const char *s);

#endif
