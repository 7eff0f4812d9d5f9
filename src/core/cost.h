/*
 * cost.h - the scheduler's model of how long an engine step takes, and of
 * how fast KV blocks move between device and host, both learned online from
 * what the engine measures.
 *
 * Step time is modelled as linear in four features of the batch:
 *
 *     step_us = a + b * prefill_tokens + c * decode_seqs + d * context_tokens
 *
 * a is the fixed per-step overhead (launches, sampling, bookkeeping), b the
 * cost of one prompt token through the dense layers, c the cost of one decode
 * sequence (its token through the dense layers plus per-sequence overhead),
 * and d the cost of attending one cached position. context_tokens is the
 * ATTENDED context, defined per token: every token processed in the step at
 * position p (0-based) attends to the p + 1 positions 0..p, so a sequence
 * that processes n tokens starting at position pos (pos = tokens already in
 * its KV cache, eng_seq.pos) contributes
 *
 *     cost_attended(pos, n) = n * pos + n * (n + 1) / 2
 *
 * and context_tokens is the sum of that over the batch. A decode step of a
 * sequence of length L (pos = L - 1, n = 1) contributes L. This is the count
 * of query-key dot products, so it is what attention time is proportional to,
 * and it has a useful property: the total over a prompt is the same however
 * the prompt is chunked, so recompute cost does not depend on chunking.
 *
 * The coefficients theta = (a, b, c, d) are fitted by recursive least squares
 * (RLS) with exponential forgetting. With x the feature vector (1, prefill,
 * decode, context), y the measured step time and lambda in (0, 1]:
 *
 *     e     = y - x' theta                      (a-priori residual)
 *     k     = P x / (lambda + x' P x)           (gain)
 *     theta = theta + k e
 *     P     = (P - k x' P) / lambda
 *
 * This minimises sum_i lambda^(n-i) (y_i - x_i' theta)^2 plus the prior's
 * term, so an observation's weight halves every ln 2 / (1 - lambda) steps
 * (about 140 steps at lambda = 0.995): old steps fade and the model follows
 * a machine whose speed drifts (thermal throttling, a neighbour on the GPU,
 * a new model build). A lasting change in speed is absorbed at that rate:
 * predictions are within ~3% again after about four half-lives (~600 steps
 * at 0.995; the test measures it); a smaller lambda follows faster at the
 * price of noisier coefficients. P is the covariance of theta in units of
 * the step-time noise variance, so it is dimensionless.
 *
 * Internally every feature is divided by a fixed power-of-two scale
 * (COST_SCALE_*) so that each is O(1) in a typical batch: P stays well
 * conditioned and one prior variance means the same for every coefficient.
 * The scales are powers of two so that the division is exact.
 *
 * RLS has known failure modes; each is guarded here:
 *  - Wind-up. When the batches keep looking alike (a steady decode-only
 *    load), the data excite one direction only and P / lambda inflates every
 *    other direction without bound; the next unusual batch then gets a huge
 *    gain. After each update the trace of P is capped at the prior's trace
 *    (4 * prior_var): the model is never less sure than it was told to be at
 *    start. An observation with x' P x below COST_MIN_XPX (the model is
 *    already sure along x, or P lost positive definiteness to rounding) is
 *    skipped entirely, forgetting included.
 *  - Outliers. A step stalled by a page fault, a stray GC in a neighbour or
 *    the first call into a driver can take 100x the usual time. Least squares
 *    moves theta in proportion to the residual, so one such step would
 *    wreck the fit. The residual is clipped to COST_CLIP_K (3) times a
 *    running scale of recent residuals (an EWMA of their clipped absolute
 *    value), which bounds any single step's influence (a Huber-style
 *    M-estimate). The scale is updated with the clipped value, so one
 *    outlier raises it by at most alpha * (K - 1) = 10%, while a real,
 *    lasting change in speed raises it by ~10% per step until the residuals
 *    fit again (about 30 steps for a 50x jump, small next to forgetting).
 *    The first COST_WARMUP steps are not clipped (there is no scale yet, so
 *    an outlier among them does get in), and the scale never drops below 1%
 *    of the prediction or 1 us, so a noise-free fit cannot freeze itself.
 *  - Negative predictions and extrapolation. Every coefficient is kept >= 0
 *    (projected after each update). Physically none can be negative, and
 *    an unconstrained fit that has only seen decode-heavy batches can land
 *    on a negative prefill cost by collinearity, which would make a huge
 *    prefill look free. With theta >= 0 and features >= 0 the prediction is
 *    monotone non-decreasing in every feature, which cost_budget_for relies
 *    on. Predictions are also floored at COST_PRED_FLOOR_US so that callers
 *    may divide by them. The projection is not exact constrained least
 *    squares; it costs a little bias when a true coefficient is near zero.
 *  - The projection turning an update around. With collinear features
 *    (a decode-only phase whose context is nearly a multiple of its
 *    decodes) the gain has components of both signs, and when the
 *    coefficients that should fall are already clamped at 0 the others
 *    rise: the prediction walks away from the measurements without bound.
 *    An update that moves the prediction of its own batch away from the
 *    measurement is replaced by scaling every coefficient by (pred + e) /
 *    pred (e the clipped residual), which moves it the right way and keeps
 *    theta >= 0 (tests/data/cost holds the steps that showed it).
 *  - Non-finite values. Observations with NaN, infinite or negative inputs
 *    are refused, and an update that would leave anything non-finite is
 *    rolled back.
 *
 * Copy bandwidth (host <-> device KV swaps) is an EWMA of bytes/us over
 * observed copies, seeded from configuration.
 *
 * The caller owns the cost_model (plain struct, no heap, no pointers; it may
 * be copied with memcpy). Nothing here reads a clock, allocates, or keeps
 * state outside the struct: the same calls in the same order give a bitwise
 * identical model for a given build. (Across builds, compilers may contract
 * a * b + c into FMA differently; the simulator and the server share one
 * binary, so they agree.)
 */
#ifndef TS_COST_H
#define TS_COST_H

#include <stdint.h>

/* Feature scales; powers of two so scaling is exact (see above). */
#define COST_SCALE_PREFILL  1024.0        /* tokens */
#define COST_SCALE_DECODE   64.0          /* sequences */
#define COST_SCALE_CONTEXT  1048576.0     /* attended positions */

#define COST_PRED_FLOOR_US  1.0     /* us; lowest prediction ever returned */
#define COST_MIN_XPX        1e-12   /* x' P x below this: skip the update */
#define COST_CLIP_K         3.0     /* residual clipped to K x error scale */
#define COST_ERR_ALPHA      0.05    /* EWMA weight of the error scale */
#define COST_ERR_FLOOR_REL  0.01    /* error scale >= this x prediction */
#define COST_ERR_FLOOR_US   1.0     /* us; error scale >= this */
#define COST_WARMUP         8       /* steps observed before clipping starts */
#define COST_COPY_ALPHA     0.1     /* EWMA weight of a bandwidth sample */
#define COST_AC_ALPHA       0.02    /* EWMA weight of the residuals' autocorrelation */
/* A fit that only describes the step times, nothing scheduled by it (the
 * server's step_fit): it forgets slower (half-life ~700 steps) and holds its
 * seed loosely, so the rarely excited prefill direction is learnt too. Over
 * tests/data/cost/isolation_steps.txt it predicts decode-only steps at 1.00x
 * and steps with a prefill chunk at 1.12x on average, where the scheduler's
 * settings (sched_config_default) give 0.99x and 1.42x. */
#define COST_DESCRIBE_LAMBDA 0.999
#define COST_DESCRIBE_PRIOR  100.0

/* Features of one step's batch; all >= 0. */
typedef struct cost_features {
    double prefill_tokens;    /* tokens processed by sequences in prefill */
    double decode_seqs;       /* sequences decoding one token */
    double context_tokens;    /* attended positions, sum of cost_attended() */
} cost_features;

/* Model state. Fields are private to cost.c; read them through the
 * accessors below. */
typedef struct cost_model {
    double theta[4];          /* coefficients in scaled units: us per scale unit
                                 of (1, prefill, decode, context); all >= 0 */
    double P[4][4];           /* covariance of theta / noise variance, symmetric */
    double lambda;            /* forgetting factor, (0, 1] */
    double trace_max;         /* cap on trace(P) = trace of the prior */
    double err_us;            /* us; running scale of |residual| */
    double copy_bytes_per_us; /* bytes/us; EWMA of measured copy bandwidth */
    uint64_t n_obs;           /* step observations applied */
    uint64_t n_skipped;       /* ... skipped as uninformative (x' P x tiny) */
    uint64_t n_clipped;       /* ... whose residual was clipped */
    uint64_t n_copy_obs;      /* copy observations applied */
    double res_prev;          /* us; the previous step's clipped residual */
    double res_lag, res_sq;   /* us^2; EWMAs of e_t e_(t-1) and of e_t^2 */
} cost_model;

/* Attended positions of n tokens processed starting at position pos (pos =
 * tokens already cached): n * pos + n * (n + 1) / 2. Sum it over the batch's
 * sequences to get cost_features.context_tokens. */
static inline double cost_attended(double pos, double n_tokens) {
    return n_tokens * pos + n_tokens * (n_tokens + 1.0) / 2.0;
}

/* Set m up from configuration.
 *   seed_theta: (a, b, c, d) in raw units: us, us/prefill token,
 *               us/decode sequence, us/attended position; each >= 0, finite.
 *   lambda:     forgetting factor in (0, 1]; 0.995 forgets with a half-life
 *               of ~140 steps; 1 never forgets.
 *   prior_var:  > 0, how loosely the seed is held: along a direction where a
 *               batch's scaled features have norm about 1, the first step
 *               moves the prediction prior_var / (1 + prior_var) of the way
 *               to the measurement. 1e2 lets the first steps override a rough
 *               seed; 1e-2 trusts the seed for a hundred steps or so. It
 *               also caps how unsure the model may grow (wind-up above):
 *               too tight a cap starves a coefficient few batches excite
 *               (prefill chunks among mostly decode steps), which then
 *               stays where the other steps left it.
 *   seed_copy_bytes_per_us: > 0, finite; bytes/us of a host<->device copy
 *               (1 GB/s = 1000 bytes/us).
 * Returns 0, or TS_ERR_INVAL (m untouched) for a NULL pointer or a value
 * outside those ranges. */
int cost_init(cost_model *m, const double seed_theta[4], double lambda,
              double prior_var, double seed_copy_bytes_per_us);

/* Feed one measured step: f its batch features, step_us its wall time.
 * Returns 0 when the step was used or deliberately skipped (see wind-up
 * above; counted in n_skipped), TS_ERR_INVAL (m untouched) for a NULL
 * pointer, a feature that is negative or not finite, or step_us that is not
 * finite and > 0. O(16) flops, no allocation. */
int cost_observe(cost_model *m, const cost_features *f, double step_us);

/* Predicted step time of a batch with features f, in us; never below
 * COST_PRED_FLOOR_US (also for NaN or negative features), non-decreasing in
 * every feature. */
double cost_predict_us(const cost_model *m, const cost_features *f);

/* Feed one measured host<->device copy of bytes in us. Observe whole swaps,
 * not single small blocks: small copies are latency-bound and would drag the
 * bandwidth estimate down. Returns 0, or TS_ERR_INVAL (m untouched) unless
 * both are finite and > 0. */
int cost_observe_copy(cost_model *m, double bytes, double us);

/* Time to swap a sequence's KV out now and back in later:
 * 2 * kv_bytes / bandwidth, in us. */
double cost_swap_us(const cost_model *m, double kv_bytes);

/* Extra step time to rebuild context_tokens of KV by prefill, in us:
 * b * C + d * cost_attended(0, C). The fixed step overhead a is left out
 * because the recompute rides in steps that run anyway; by the definition of
 * attended context the figure is the same however the prefill is chunked.
 * Compare with cost_swap_us to choose the preemption mode. */
double cost_recompute_us(const cost_model *m, double context_tokens);

/* Largest prefill token budget t in [lo, hi] whose predicted step time stays
 * <= target_us, for a batch that also holds decode_seqs decoding sequences
 * and context_tokens attended positions besides the budgeted tokens. The t
 * budgeted tokens are charged as one chunk starting at position prefill_pos
 * (their attended context is cost_attended(prefill_pos, t)); passing the
 * largest cached prefix among the sequences that may receive the budget
 * makes this an upper bound whichever way the budget is split among them.
 * Returns lo when even lo tokens miss the target (the step must still make
 * progress), hi when hi fits, or TS_ERR_INVAL for a NULL m, lo < 0 or
 * lo > hi. A few predictions around the closed-form root (cost.c). */
int cost_budget_for(const cost_model *m, double target_us, double decode_seqs,
                    double context_tokens, double prefill_pos, int lo, int hi);

/* Current coefficients (a, b, c, d) in raw units, as in cost_init. */
void cost_theta(const cost_model *m, double out[4]);

/* Running scale of |measured - predicted|, in us (0 before any step). A
 * scheduler may keep this much margin below an SLO target. */
double cost_err_us(const cost_model *m);

/* Lag-1 autocorrelation of the step-time residuals (EWMAs of e_t e_(t-1)
 * over e_t^2, weight COST_AC_ALPHA), in [-1, 1]; 0 before two steps. Near 0
 * a slow step is a lone event; near 1 slow steps come in runs (a neighbour
 * on the machine, thermal throttling), which a simulator of this engine
 * needs to know to reproduce its tails. */
double cost_err_autocorr(const cost_model *m);

/* Current copy bandwidth estimate, bytes/us. */
double cost_copy_bytes_per_us(const cost_model *m);

/* trace(P), for tests and metrics: bounded by 4 * prior_var. */
double cost_trace(const cost_model *m);

/*
 * The spread of measured step times around the model's predictions, as a
 * distribution of the ratio measured / predicted: what a simulator of this
 * engine draws its step times from (a step of predicted time p takes
 * p x Q(u), Q the ratio's quantile function). A residual scale and a
 * normal around the prediction miss what a shared machine does: a few
 * steps several times their prediction set the tails (p99 TPOT) and, since
 * a request arriving mid-step more likely lands in a long one, the mean
 * wait too.
 *
 * Ratios are counted on COST_RATIO_BINS log-spaced bins over
 * [COST_RATIO_MIN, COST_RATIO_MAX] (32 a doubling: 2.2% wide), the ends
 * holding everything beyond them; a quantile is interpolated
 * geometrically within its bin. Plain struct, no heap; the caller owns it
 * (the server's worker keeps one per model and kind of step, outside the
 * scheduler).
 */
#define COST_RATIO_BINS 256
#define COST_RATIO_MIN  0.125
#define COST_RATIO_MAX  32.0
#define COST_RATIO_NQ   17      /* the levels cost_ratio_levels lists */

typedef struct cost_ratio_hist {
    uint64_t n;                         /* ratios counted */
    uint64_t bins[COST_RATIO_BINS];
} cost_ratio_hist;

/* Count one step: measured_us over predicted_us. Ignored unless both are
 * finite and > 0. */
void cost_ratio_add(cost_ratio_hist *h, double measured_us, double predicted_us);

/* The ratio below which a share q (0..1) of the counted ones lie; 1 when
 * none are counted. */
double cost_ratio_quantile(const cost_ratio_hist *h, double q);

/* The COST_RATIO_NQ levels a server reports the quantiles at, ascending
 * from 0.001 to 0.999, denser in the upper tail. */
extern const double cost_ratio_levels[COST_RATIO_NQ];

/*
 * How the spread is laid out in time: the autocorrelation of
 * r = log(measured / predicted) at a few lags (cost_ratio_acf_lags), over
 * every step counted. The quantiles above say how slow a slow step is;
 * this says how long the slow spells last, and a request's TPOT, the mean
 * of a few hundred steps, depends on it: spells shorter than a request
 * average out within it, longer ones move the whole request. A lag-1 figure
 * (cost_err_autocorr) cannot tell them apart, and on a shared machine they
 * are not one exponential: over tests/data/cost/isolation_steps.txt the
 * describing fit's residuals correlate 0.65 at lag 1, 0.46 at 16, 0.36 at
 * 64 and 0.12 at 256 (an AR(1) of 0.65 would be at 0.001 by lag 16), and
 * the mean of 128 steps spreads about 7 times what independent steps
 * would give.
 *
 * Each lag L is estimated as the mean of r_t r_(t-L) over the n - L pairs,
 * less m^2, over the variance of r (m the mean of all): a cumulative
 * estimate, as the histogram's, reported once there are COST_ACF_MIN_SPAN
 * lags' worth of pairs (fewer say little of a spell that long). r is
 * clipped to +-COST_ACF_CLIP first, so that one stall of a hundred times
 * its prediction does not make the variance its own. Being cumulative
 * from the first step, it also counts the fit's early convergence (its
 * half-life is ~700 steps) as a slow spell, which inflates the long lags
 * of a short run a little. Plain struct, no heap (a ring of the last
 * COST_ACF_MAXLAG values; every lag is at most that).
 */
#define COST_ACF_NLAGS    5
#define COST_ACF_MAXLAG   256
#define COST_ACF_CLIP     1.0   /* log ratio; e^1 = 2.7x either way */
#define COST_ACF_MIN_SPAN 4     /* pairs before a lag L is reported, in L */

typedef struct cost_ratio_acf {
    double ring[COST_ACF_MAXLAG];       /* the last values, the newest at (n - 1) % MAXLAG */
    double sum, sum_sq;                 /* of every value */
    double lag_sum[COST_ACF_NLAGS];     /* of r_t r_(t-L), L = cost_ratio_acf_lags[k] */
    uint64_t n;                         /* values counted */
} cost_ratio_acf;

/* Count one step, as cost_ratio_add does (ignored unless both are finite
 * and > 0). */
void cost_ratio_acf_add(cost_ratio_acf *a, double measured_us, double predicted_us);

/* OUT the autocorrelation at each of cost_ratio_acf_lags, in [-1, 1]; 0 at
 * a lag L with fewer than COST_ACF_MIN_SPAN x L pairs counted, and
 * everywhere while the values have no spread. */
void cost_ratio_acf_get(const cost_ratio_acf *a, double out[COST_ACF_NLAGS]);

/* The lags, in steps, ascending, four times apart: 1, 4, 16, 64, 256. */
extern const int cost_ratio_acf_lags[COST_ACF_NLAGS];

/*
 * The shape of the step times around a fit: where measured / predicted
 * sits by the batch's rows (prefill tokens + decode sequences, in
 * doublings), apart for steps with a prefill chunk and without. Four
 * linear terms miss how an engine's kernels change with the rows they
 * multiply: the CPU engine's F32 matmul streams its weights up to 16 rows
 * and calls sgemm above (ops.c). Over tests/data/cost/isolation_steps.txt
 * the describing fit's steps with a prefill chunk of 5-8, 9-16 and 17-32
 * rows take 1.15x, 1.11x and 1.32x its prediction on average, those of
 * 33-64 rows 1.01x, decode-only steps of 3-4 and 5-8 rows 1.01x and 1.02x;
 * with the shape, every one of them within 2.5% (test_cost). A simulator
 * that draws every step from one pooled spread gives each the pool's mean.
 *
 * Bucket b holds the steps of rows in (2^(b-1), 2^b] (bucket 0: at most
 * one row), the last everything above 2^(COST_SHAPE_ROWS - 2). A bucket's
 * factor is e to the mean of log(measured / predicted), each clipped to
 * +-COST_ACF_CLIP so that a stall does not make the mean its own: a plain
 * mean over its first 1 / COST_SHAPE_ALPHA steps, an EWMA of that weight
 * after, so that it follows the fit as the fit moves; 1 until the bucket
 * has COST_SHAPE_MIN_STEPS. Plain struct, no heap.
 */
#define COST_SHAPE_ROWS      11     /* buckets: up to 1, 2, 4, ..., 512 rows, and above */
#define COST_SHAPE_ALPHA     0.01   /* EWMA weight of a step, once the plain mean has 1 / it */
#define COST_SHAPE_MIN_STEPS 20     /* steps in a bucket before its factor is used */

typedef struct cost_shape {
    double log_f[2][COST_SHAPE_ROWS];   /* [with a prefill chunk][bucket]: mean log ratio */
    uint64_t n[2][COST_SHAPE_ROWS];     /* steps counted */
} cost_shape;

/* The bucket of a step of rows rows: 0..COST_SHAPE_ROWS - 1 (0 for NaN or
 * rows <= 1). */
int cost_shape_bucket(double rows);

/* Count one step of that batch: measured_us over predicted_us, the fit's
 * own prediction (not shaped). Ignored as cost_ratio_add ignores, and for
 * a negative or non-finite batch. */
void cost_shape_add(cost_shape *s, double prefill_tokens, double decode_seqs, double measured_us,
                    double predicted_us);

/* The factor of a step of that batch: its bucket's, or 1 while the bucket
 * has fewer than COST_SHAPE_MIN_STEPS steps. In [e^-COST_ACF_CLIP,
 * e^COST_ACF_CLIP] when the log means are (as cost_shape_add keeps them). */
double cost_shape_factor(const cost_shape *s, double prefill_tokens, double decode_seqs);

#endif
