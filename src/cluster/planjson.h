/*
 * planjson.h - reading a plan back from the planner's JSON report
 * (`tessera plan --emit json`), so that a plan can be stored, reviewed and
 * handed to the simulator (tessera sim --plan PLAN.json) without the YAML
 * it was planned from.
 *
 * The report carries its input ("input": pools with prices, models with
 * their perf parameters, tiers, tenants with load, weight, isolation and
 * group, options) and the plan's structure unrounded ("workers" with their
 * tenants' names, mode and replicas; "slices"; per instance its worker,
 * replica, slice, pct and memory limit). From these the reader rebuilds
 * the plan_input and the plan: the fleet (plan_fleet_init), the workers'
 * loads (plan_worker_load), every placed instance's estimate
 * (plan_inst_estimate: the same arithmetic on the same numbers, so the
 * same bits), the MIG layouts (mig_place, checked against the slices'
 * starts), the GPUs' tallies and totals (plan_tally), the tenants' results
 * and predictions, the placement figures, problems and notes. Emitting the
 * plan read gives the report it was read from, byte for byte.
 *
 * Derived values are recomputed, never taken from the file: that includes
 * each tenant's "ok" (its worker has replicas, all placed, each passing
 * perf_check against the worker's targets: plan_inst_check) and the
 * totals' "feasible" (no problems and every tenant ok), as plan_build
 * judges them. Those two fields must be present and boolean, but a hand
 * edit (a slice unplaced, a share cut) reads back as the plan it now is,
 * so `tessera sim --plan` can try it; the report then says it misses.
 *
 * What cannot exist is refused rather than recomputed: a GPU given two
 * kinds of sharing, MPS or time-slice shares over 100%, two whole-GPU
 * slices, slices' memory beyond the GPU's, a MIG+MPS GI's clients over
 * 100% (plan_slices_check); a placed slice or instance with a 0% share;
 * a worker whose replica range holds another worker's instances; a tenant
 * listed twice, in two workers or in none, or in a worker it could not
 * share (another model, isolation, strict group or shared tier), or whose
 * result names another worker than the one listing it.
 *
 * Every missing or ill-typed field, unknown name and out-of-range index is
 * an error naming the field by its JSON path ("slices[3].gpu: expected a
 * number"). Ownership as for plan_build: *in owns its arrays
 * (plan_input_free) and *p borrows *in (plan_free); on failure both are
 * left empty. Pure: parses memory, no I/O.
 */
#ifndef TS_PLANJSON_H
#define TS_PLANJSON_H

#include <stddef.h>

#include "plan.h"

/* Read the JSON report text[0..len) into *in and *p.
 * err, errlen: OUT, may be NULL/0; "field: what is wrong".
 * Returns 0, TS_ERR_CONFIG (bad content), TS_ERR_NOMEM, or TS_ERR_INVAL
 * (a NULL argument). */
int planjson_read(const char *text, size_t len, plan_input *in, plan *p, char *err, size_t errlen);

#endif
