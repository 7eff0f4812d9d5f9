/*
 * fleet.h - the fleets the simulator runs: one from a plan (every placed
 * instance of `tessera plan`, configured as `--emit serve` configures it),
 * or one instance described by hand (the CPU server of a validation run),
 * and the scenarios that feed them.
 *
 * From a plan, instance i of worker w is what `tessera plan --emit serve`
 * deploys: its KV pool is the planned KV bytes rounded up to a MiB, cut in
 * blocks of SFL_BLOCK_SIZE positions; its max_seqs the planned sequences
 * (within what the scheduler accepts: SCHED_MAX_SEQS_PER_TOKEN x the
 * default budget_max, as --emit serve caps it); the server's default swap
 * space, budgets and request slots; the plan's tiers and its
 * worker's tenants with their weights. Its step model is the planner's
 * roofline on the instance's slice (plan_inst_slice), with the sharing
 * mode of the slice (sstep.h). A tenant the plan left unserved stays in the
 * fleet without a worker: its requests are answered 503.
 *
 * The load of a plan's input, as a scenario: each tenant a Poisson process
 * at its planned rate x load, prompt and output lengths at its planned
 * means (fixed), or lognormal with the planned means and CV length_cv.
 *
 * The fleet owns its arrays (sfl_free).
 */
#ifndef TS_SIM_FLEET_H
#define TS_SIM_FLEET_H

#include <stddef.h>

#include "plan.h"
#include "scenario.h"
#include "scrape.h"
#include "sim.h"

#define SFL_BLOCK_SIZE 16           /* the server's default */
#define SFL_SWAP_BYTES (256.0 * 1048576.0)
#define SFL_MAX_REQUESTS 4096       /* the server's default request slots */
#define SFL_SPREAD_MIN_STEPS 200    /* a server's step-time spread over fewer steps: not used */
#define SFL_SWITCH_US 1000.0        /* time-slicing context switch: unpublished; ~1 ms slices
                                       are reported (shared gpu-sharing-facts §3): a model parameter */
#define SFL_MAX_TENANTS 100000      /* a report's tenants; scenarios parse at most SCN_MAX_TENANTS */

typedef struct sfl {
    sched_tier *tiers;
    sim_tenant *tenants;
    sim_inst *insts;
    sim_fleet f;                    /* the view sim_run takes */
} sfl;

/* The fleet of plan p (built or read). policy: SCHED_POLICY_*. Returns 0,
 * TS_ERR_INVAL (err says why) or TS_ERR_NOMEM. */
int sfl_from_plan(const plan *p, int policy, sfl *out, char *err, size_t errlen);

/* A fleet of one instance: tiers and tenants given, all on worker 0. The
 * instance is taken as given (its sc must have n_blocks, block_size,
 * block_bytes, max_ctx, max_running set). */
int sfl_single(const sched_tier *tiers, int n_tiers, const sim_tenant *tenants, int n_tenants,
               const sim_inst *inst, sfl *out);

/* The instance a tessera server is, from its GET /admin/models entry m (a
 * calibration): a linear step model from its describing fit (step_fit,
 * which learns every kind of step) where it gives one over
 * SFL_SPREAD_MIN_STEPS steps or more (times that fit's shape by rows
 * where it gives one, step_fit.shape), else from its scheduler's fit; the
 * spread of its steps around that fit as the step noise (measured
 * quantiles where it gives them over SFL_SPREAD_MIN_STEPS steps or more,
 * else a normal of the fit's residual scale), in spells of the lengths
 * step_fit.acf measured when the steps take step_fit and it gives them
 * (fleet.c, spells_of; else one AR(1) of the fit's err_autocorr); its
 * scheduler seeded
 * (own_seed) where the server's started when the steps take step_fit, else
 * with the server's scheduler's fit (fleet.c, pick_fit); its KV geometry,
 * budgets and sequences. policy: SCHED_POLICY_*, or -1 for the server's
 * own. A fit or geometry no server has is refused (TS_ERR_INVAL, err names
 * the model and the field): a coefficient or error scale of either fit used
 * (cost_model always, step_fit when the steps take it) or a coefficient of
 * the seed not finite, negative, or above SST_MAX_US; a
 * block_size, max_seqs, budget or context beyond the server's limits
 * (SCHED_MAX_* in sched.h), or more sequences than its budget takes. */
int sfl_server_inst(const scr_model *m, int policy, sim_inst *out, char *err, size_t errlen);

void sfl_free(sfl *f);

/* The report's tenants for fleet f: names, weights, SLO targets from each
 * tenant's tier, service weights (1, 2 as the server charges). The scn
 * owns its tenants (scn_free). */
int sfl_report_scn(const sfl *f, scn *out);

/* The planned load of in as a scenario of duration_s (see above), tenants
 * in the input's order. */
int sfl_load_scn(const plan_input *in, double load, double length_cv, double duration_s, scn *out);

#endif
