/*
 * bench/sim.c - the fleet simulator at scale: the seeded 1,000-GPU fleet of
 * 500 tenants (fleet_gen.h), planned by the planner, then one hour of its
 * planned load (Poisson arrivals at each tenant's rate, its mean lengths)
 * through every instance's real scheduler on the modelled GPUs, with the
 * report kept in bounded memory. Prints simulated requests per wall
 * second (target >= 100,000), events per second, peak memory, and the
 * simulated outcome; asserts nothing.
 *
 * usage: bench_sim [--duration SECONDS] [--quick] [--load LO HI] [--threads N] [--window S]
 *        (--quick: 60 s; --threads, --window: sim_opts.threads and window_s, default
 *        one thread per CPU and SIM_WINDOW_S)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_util.h"
#include "fleet_gen.h"
#include "sim/fleet.h"
#include "sim/sim.h"

#define TARGET_REQ_PER_S 100000.0
/* Tenants' loads, log-uniform over [LOAD_LO, LOAD_HI] req/s: about the
 * most the planner fits in the 1,000 GPUs with every tenant served at its
 * p99 targets (935 GPUs, 1,000 instances; bench_plan's 0.3..30 is more than it
 * fits). */
#define LOAD_LO 0.18
#define LOAD_HI 18.0

typedef struct feed {
    arr_stream *st;
} feed;

static int feed_next(void *ctx, arr_event *ev) { return arr_stream_next(((feed *)ctx)->st, ev); }

static double peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}

static void outcome(const sfl *f, const sim_result *r) {
    int served = 0, met = 0, with_targets = 0;
    for (int t = 0; t < f->f.n_tenants; t++) {
        const sched_tier *tr = &f->tiers[f->tenants[t].cfg.tier];
        const rpt_tenant *rt = &r->report.t[t];
        served += f->tenants[t].worker >= 0;
        if (f->tenants[t].worker < 0 || (!tr->ttft_ms && !tr->tpot_ms) || rt->due == 0) continue;
        with_targets++;
        met += (!tr->ttft_ms || rt->ttft.p99 * 1e3 <= tr->ttft_ms) && (!tr->tpot_ms || rt->tpot.p99 * 1e3 <= tr->tpot_ms);
    }
    double util = 0;
    for (int i = 0; i < f->f.n_insts; i++) util += r->inst[i].util;
    const rpt_tenant *a = &r->report.all;
    printf("   outcome: %d of %d tenants served; %d of %d with targets met them at p99; mean utilisation %.1f%%\n",
           served, f->f.n_tenants, met, with_targets, 100 * util / f->f.n_insts);
    printf("   all tenants: TTFT p50 %.0f ms p99 %.0f ms, TPOT p50 %.1f ms p99 %.1f ms, %.0f req/s, goodput %.0f req/s\n",
           a->ttft.p50 * 1e3, a->ttft.p99 * 1e3, a->tpot.p50 * 1e3, a->tpot.p99 * 1e3, a->req_s, a->goodput_s);
}

int main(int argc, char **argv) {
    double duration = 3600, lo = LOAD_LO, hi = LOAD_HI;
    int threads = 0;
    double window = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) duration = 60;
        else if (!strcmp(argv[i], "--duration") && i + 1 < argc) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--load") && i + 2 < argc) lo = atof(argv[++i]), hi = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) window = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sim [--duration SECONDS] [--quick] [--load LO HI] [--threads N] [--window S]\n");
            return 2;
        }
    }
    plan_input in;
    fg_fleet(&in, lo, hi);
    plan p;
    char err[1024] = "";
    sfl f;
    scn load, rs;
    double t0 = clk_mono_s();
    if (plan_build(&in, &p) || sfl_from_plan(&p, SCHED_POLICY_FAIR, &f, err, sizeof err) ||
        sfl_load_scn(&in, 1.0, 0, duration, &load) || sfl_report_scn(&f, &rs)) {
        fprintf(stderr, "bench_sim: set-up failed: %s\n", err);
        return 1;
    }
    double t_plan = clk_mono_s() - t0;
    feed fd;
    if (arr_stream_open(&fd.st, &load, 1, duration, 0, err, sizeof err)) {
        fprintf(stderr, "bench_sim: arrivals: %s\n", err);
        return 1;
    }
    double rate = 0;
    for (size_t t = 0; t < in.n_tenants; t++) rate += in.tenants[t].load.rps;
    printf("fleet: %d GPUs used of 1000, %d instances, %d tenants, %.0f req/s offered; planned in %.2f s\n",
           p.gpus_used, f.f.n_insts, f.f.n_tenants, rate, t_plan);
    sim_source src = {feed_next, &fd};
    sim_opts o = {.until_s = duration, .drain_s = 60, .bounded = 1, .route_refresh_s = SIM_ROUTE_REFRESH_S,
                  .threads = threads, .window_s = window};
    sim_result r;
    t0 = clk_mono_s();
    if (sim_run(&f.f, &rs, &src, &o, &r, err, sizeof err)) {
        fprintf(stderr, "bench_sim: %s\n", err);
        return 1;
    }
    double wall = clk_mono_s() - t0;
    char th[32] = "threads: one per CPU";
    if (threads) snprintf(th, sizeof th, "threads: %d", threads);
    printf("simulated %.0f s in %.1f s wall (%s): %llu requests, %llu events\n", r.run_s, wall, th,
           (unsigned long long)r.requests, (unsigned long long)r.events);
    printf("   %.0f simulated requests per wall second (%.2f x the target of %.0f), %.0f events/s, "
           "%.0f x real time\n", r.requests / wall, r.requests / wall / TARGET_REQ_PER_S, TARGET_REQ_PER_S,
           r.events / wall, r.run_s / wall);
    printf("   peak resident memory %.0f MB\n", peak_rss_mb());
    outcome(&f, &r);
    sim_result_free(&r);
    arr_stream_close(fd.st);
    scn_free(&load);
    scn_free(&rs);
    sfl_free(&f);
    plan_free(&p);
    plan_input_free(&in);
    return 0;
}
