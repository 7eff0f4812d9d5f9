/*
 * sstep.h - how long one engine step takes on a modelled device: the
 * simulator's clock advances by what this module says.
 *
 * A step is described by its batch, as the scheduler planned it (one item
 * per sequence: n tokens from position pos):
 *     prefill   = sum of n over prefill items      (tokens)
 *     decodes   = number of decode items           (sequences, n = 1 each)
 *     attended  = sum of cost_attended(pos, n)     (query-key pairs, cost.h)
 *     kv_read   = sum of (pos + n)                 (positions whose K/V the
 *                                                   step reads or writes)
 *
 * Two models, one per use:
 *
 * Roofline (a GPU, a MIG slice, an MPS share, a time-sliced share), with
 * the planner's own hardware figures (perf.h: P parameters, W weight
 * bytes, K KV bytes per position, 4 L H D attention FLOPs per pair, peak F
 * and B of the slice, achieved fractions e_c and e_b, fixed cost t0):
 *     flops = 2 P (prefill + decodes) + 4 L H D attended
 *     bytes = W + K kv_read
 *     t     = max(flops / (F e_c), bytes / (B' e_b)) + t0
 * This is perf_step_time's equation over the exact batch instead of its
 * means. What the sharing mode changes, with k the number of instances of
 * the same GPU (or MIG GPU instance) whose steps are in flight when this
 * one starts, itself included:
 *   - MIG: nothing; F and B are the GI's own (its SMs, its memory slices);
 *   - MPS: F is capped at the client's share of SMs (the active thread
 *     percentage is a hard cap), but bandwidth is not partitioned, so the
 *     busy clients split it in proportion to their shares: B' = B pct / S
 *     with S the sum of the busy clients' shares (its own included), so a
 *     client alone has all of it and the clients together never more;
 *   - time-slicing: one context runs at a time, round-robin: the step runs
 *     on the whole GPU but waits for the k - 1 others' slices,
 *         t = k t_alone + (k > 1) t_switch,
 *     with t_switch the context-switch cost.
 * k and S are read once, at the step's start: a neighbour that starts or stops
 * midway does not change a step already running (an approximation that
 * errs by at most one step of a neighbour).
 *
 * Linear (the CPU engine, for validation against the real server): the
 * scheduler's own step-time features with coefficients fitted on the real
 * server (its cost model, exposed on /admin/models, or a profiling run),
 * times the fit's shape where the server measured one (step_fit.shape):
 *     t = (a + b prefill + c decodes + d attended) s(prefill + decodes, prefill > 0)
 * with s the factor of the batch's bucket of rows (cost_shape_factor; 1
 * where none was measured), since kernels change with the rows they
 * multiply and four linear terms do not.
 *
 * Swaps add their copies over the host link: blocks x block bytes / link
 * bandwidth, charged to the step that planned them.
 *
 * Pure arithmetic: no allocation, no state, no clock.
 */
#ifndef TS_SIM_SSTEP_H
#define TS_SIM_SSTEP_H

#include <stdint.h>

#include "cost.h"
#include "perf.h"
#include "sched.h"

enum { SST_ROOFLINE = 0, SST_LINEAR };
enum { SST_DEDICATED = 0, SST_MPS, SST_TIMESLICE };

typedef struct sst_model {
    int kind;                   /* SST_ROOFLINE or SST_LINEAR */
    /* roofline */
    double params;              /* P */
    double weight_bytes;        /* W */
    double kv_per_pos;          /* K, bytes per position */
    double attn_flops;          /* 4 L H D */
    double flops, bw;           /* the slice's peaks: FLOP/s, B/s */
    double eff_c, eff_b;        /* achieved fractions of them */
    double overhead_us;         /* t0 */
    int share_mode;             /* SST_DEDICATED (MIG, whole GPU), SST_MPS, SST_TIMESLICE */
    double share;               /* MPS: the client's fraction of SMs and its floor of B */
    double gpu_bw;              /* MPS: bandwidth of the whole GPU (or GI) the clients share */
    double switch_us;           /* time-slicing: context-switch cost */
    /* linear */
    cost_shape shape;           /* its factors by rows (cost.h); zero: 1 everywhere */
    double theta[4];            /* a us, b us/token, c us/sequence, d us/pair */
    /* both */
    double host_bytes_per_us;   /* swap copies; 0: free */
} sst_model;

typedef struct sst_batch {
    double prefill;             /* tokens */
    double decodes;             /* sequences */
    double attended;            /* query-key pairs */
    double kv_read;             /* positions */
    double copy_blocks;         /* blocks swapped out and in */
} sst_batch;

/* The batch of a scheduler plan. */
void sst_batch_of(const sched_plan *p, sst_batch *b);

/* A roofline model of perf model m on slice s with the planner's options
 * o: the dedicated case; callers set share_mode and its fields after. */
void sst_roofline(sst_model *out, const perf_model *m, const perf_slice *s, const perf_opts *o);

#define SST_MAX_US 1e12             /* a step never takes longer (11.6 days): keeps the
                                       simulator's int64 us clock far from overflow */

/* Duration of a step of batch b, in us, with k instances of the same
 * device busy (k >= 1; time-slicing reads it) whose MPS shares sum to
 * busy_share (this one's included; MPS reads it), and block_bytes per
 * swapped block. Within [1, SST_MAX_US] us (NaN: the maximum). */
double sst_step_us(const sst_model *m, const sst_batch *b, int k, double busy_share, double block_bytes);

/* The linear coefficients (a, b, c, d in us) that best describe a roofline
 * model over typical batches: a seed for the scheduler's online cost fit,
 * as a deployment calibrated on its device would start with. */
void sst_seed(const sst_model *m, double out[4]);

#endif
