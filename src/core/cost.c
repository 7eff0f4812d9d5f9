/* cost.c - online step-time and copy-bandwidth model; see cost.h for the
 * model, the RLS equations and the guards. */
#include "cost.h"

#include <math.h>
#include <stddef.h>

#include "err.h"

#define NF 4    /* features: 1, prefill, decode, context */

static const double feat_scale[NF] = {
    1.0, COST_SCALE_PREFILL, COST_SCALE_DECODE, COST_SCALE_CONTEXT,
};

/* x = the scaled feature vector of f. */
static void feat_vec(const cost_features *f, double x[NF]) {
    x[0] = 1.0;
    x[1] = f->prefill_tokens / COST_SCALE_PREFILL;
    x[2] = f->decode_seqs / COST_SCALE_DECODE;
    x[3] = f->context_tokens / COST_SCALE_CONTEXT;
}

static int feat_ok(const cost_features *f) {
    return isfinite(f->prefill_tokens) && f->prefill_tokens >= 0 &&
           isfinite(f->decode_seqs) && f->decode_seqs >= 0 &&
           isfinite(f->context_tokens) && f->context_tokens >= 0;
}

static double dot(const double a[NF], const double b[NF]) {
    double s = 0.0;
    for (int i = 0; i < NF; i++) s += a[i] * b[i];
    return s;
}

static double floor_pred(double y) {
    return y >= COST_PRED_FLOOR_US ? y : COST_PRED_FLOOR_US;  /* NaN -> floor */
}

static double max3(double a, double b, double c) {
    double m = a > b ? a : b;
    return m > c ? m : c;
}

static int model_finite(const cost_model *m) {
    for (int i = 0; i < NF; i++) {
        if (!isfinite(m->theta[i])) return 0;
        for (int j = 0; j < NF; j++)
            if (!isfinite(m->P[i][j])) return 0;
    }
    return isfinite(m->err_us);
}

int cost_init(cost_model *m, const double seed_theta[4], double lambda,
              double prior_var, double seed_copy_bytes_per_us) {
    if (!m || !seed_theta) return TS_ERR_INVAL;
    if (!(lambda > 0.0 && lambda <= 1.0)) return TS_ERR_INVAL;
    if (!(prior_var > 0.0 && isfinite(prior_var))) return TS_ERR_INVAL;
    if (!(seed_copy_bytes_per_us > 0.0 && isfinite(seed_copy_bytes_per_us)))
        return TS_ERR_INVAL;
    for (int i = 0; i < NF; i++)
        if (!(seed_theta[i] >= 0.0 && isfinite(seed_theta[i]))) return TS_ERR_INVAL;

    cost_model z = {0};
    for (int i = 0; i < NF; i++) {
        z.theta[i] = seed_theta[i] * feat_scale[i];   /* raw -> us per scale unit */
        z.P[i][i] = prior_var;
    }
    z.lambda = lambda;
    z.trace_max = NF * prior_var;
    z.copy_bytes_per_us = seed_copy_bytes_per_us;
    *m = z;
    return 0;
}

/* Clip the a-priori residual e to COST_CLIP_K error scales (after warm-up)
 * and fold it into the running error scale. pred is the unfloored
 * prediction, used for the relative floor of the scale. */
static double residual_clip(cost_model *m, double e, double pred) {
    double ae = fabs(e);
    if (m->n_obs < COST_WARMUP) {
        /* No scale yet: take the residual as is, scale = mean |e| so far. */
        m->err_us += (ae - m->err_us) / (double)(m->n_obs + 1);
        return e;
    }
    double s = max3(m->err_us, COST_ERR_FLOOR_REL * pred, COST_ERR_FLOOR_US);
    double lim = COST_CLIP_K * s;
    if (ae > lim) {
        m->n_clipped++;
        ae = lim;
        e = e > 0 ? lim : -lim;
    }
    m->err_us += COST_ERR_ALPHA * (ae - m->err_us);
    return e;
}

/* P = (P - k (P x)') / lambda, kept symmetric, then its trace capped. */
static void cov_update(cost_model *m, const double k[NF], const double Px[NF]) {
    for (int i = 0; i < NF; i++)
        for (int j = 0; j < NF; j++)
            m->P[i][j] = (m->P[i][j] - k[i] * Px[j]) / m->lambda;
    double tr = 0.0;
    for (int i = 0; i < NF; i++) {
        for (int j = i + 1; j < NF; j++) {
            double s = 0.5 * (m->P[i][j] + m->P[j][i]);  /* rounding drifts apart */
            m->P[i][j] = m->P[j][i] = s;
        }
        tr += m->P[i][i];
    }
    if (tr > m->trace_max) {
        double r = m->trace_max / tr;
        for (int i = 0; i < NF; i++)
            for (int j = 0; j < NF; j++) m->P[i][j] *= r;
    }
}

/*
 * The projection to theta >= 0 can turn an update around. With collinear
 * features (a long decode-only phase: context ~ decodes x mean length) P
 * couples the coefficients, so the gain has components of both signs; when
 * the prediction is too high, the ones that should fall are already at 0
 * and are clamped there, while the others rise: the prediction grows
 * further from the measurement on every step, without bound (tessera sim
 * found it: a time-sliced instance draining its queue predicted 1e11 us
 * steps of 12 ms after a few hundred steps). So an update that moves the
 * prediction for its own batch away from the measurement is replaced by
 * the one move that cannot: every coefficient scaled by the same factor,
 * (pred + e) / pred, which takes the prediction to the clipped measurement
 * and keeps theta >= 0.
 */
static void keep_direction(cost_model *m, const cost_model *old, const double x[NF], double pred, double e) {
    double now = dot(m->theta, x);
    if ((now - pred) * e >= 0.0 || !(pred > 0.0)) return;
    double f = (pred + e) / pred;
    if (f < 0.0) f = 0.0;
    for (int i = 0; i < NF; i++) m->theta[i] = old->theta[i] * f;
}

int cost_observe(cost_model *m, const cost_features *f, double step_us) {
    if (!m || !f || !feat_ok(f)) return TS_ERR_INVAL;
    if (!(step_us > 0.0 && isfinite(step_us))) return TS_ERR_INVAL;

    double x[NF], Px[NF];
    feat_vec(f, x);
    for (int i = 0; i < NF; i++) Px[i] = dot(m->P[i], x);
    double xPx = dot(x, Px);
    if (!(xPx > COST_MIN_XPX)) {          /* nothing to learn along x */
        m->n_skipped++;
        return 0;
    }

    cost_model saved = *m;                /* rollback if anything goes non-finite */
    double pred = dot(m->theta, x);
    double e = residual_clip(m, step_us - pred, pred);
    double k[NF];
    for (int i = 0; i < NF; i++) {
        k[i] = Px[i] / (m->lambda + xPx);
        m->theta[i] += k[i] * e;
        if (m->theta[i] < 0.0) m->theta[i] = 0.0;   /* keep theta >= 0 */
    }
    keep_direction(m, &saved, x, pred, e);
    if (m->n_obs > 0) {
        m->res_lag += COST_AC_ALPHA * (e * m->res_prev - m->res_lag);
        m->res_sq += COST_AC_ALPHA * (e * e - m->res_sq);
    }
    m->res_prev = e;
    cov_update(m, k, Px);
    if (!model_finite(m)) {
        *m = saved;
        m->n_skipped++;
        return 0;
    }
    m->n_obs++;
    return 0;
}

/* dot(theta, feat_vec(f)) written out term by term, in dot's order: through
 * an array, gcc vectorized the products into one wide load of four scalar
 * stores, which store forwarding cannot serve, a stall of tens of cycles on
 * the call the scheduler makes most (8% of a fleet simulation's time). */
double cost_predict_us(const cost_model *m, const cost_features *f) {
    const double *th = m->theta;
    double y = 0.0 + th[0] * 1.0;
    y += th[1] * (f->prefill_tokens / COST_SCALE_PREFILL);
    y += th[2] * (f->decode_seqs / COST_SCALE_DECODE);
    y += th[3] * (f->context_tokens / COST_SCALE_CONTEXT);
    return floor_pred(y);
}

int cost_observe_copy(cost_model *m, double bytes, double us) {
    if (!m) return TS_ERR_INVAL;
    if (!(bytes > 0.0 && isfinite(bytes) && us > 0.0 && isfinite(us)))
        return TS_ERR_INVAL;
    double bw = bytes / us;
    if (!(bw > 0.0 && isfinite(bw))) return TS_ERR_INVAL;   /* over/underflow */
    m->copy_bytes_per_us += COST_COPY_ALPHA * (bw - m->copy_bytes_per_us);
    m->n_copy_obs++;
    return 0;
}

double cost_swap_us(const cost_model *m, double kv_bytes) {
    if (!(kv_bytes > 0.0)) return 0.0;
    return 2.0 * kv_bytes / m->copy_bytes_per_us;
}

double cost_recompute_us(const cost_model *m, double context_tokens) {
    if (!(context_tokens > 0.0)) return 0.0;
    return m->theta[1] * (context_tokens / COST_SCALE_PREFILL) +
           m->theta[3] * (cost_attended(0.0, context_tokens) / COST_SCALE_CONTEXT);
}

/* Predicted step time with t budgeted prefill tokens; see cost_budget_for. */
static double budget_pred(const cost_model *m, int t, double decode_seqs,
                          double context_tokens, double prefill_pos) {
    cost_features f = {
        .prefill_tokens = (double)t,
        .decode_seqs = decode_seqs,
        .context_tokens = context_tokens + cost_attended(prefill_pos, (double)t),
    };
    return cost_predict_us(m, &f);
}

/* The floor of the positive root of the budget's quadratic (see
 * cost_budget_for), clamped to [lo, hi - 1]: where lo fits, c <= 0. The
 * root is taken as 2 (-c) / (l + sqrt(l^2 - 4 q c)), which has no
 * cancellation for q near 0. */
static int budget_root(const cost_model *m, double target_us, double decode_seqs,
                       double context_tokens, double prefill_pos, int lo, int hi) {
    const double *th = m->theta;
    double q = th[3] / COST_SCALE_CONTEXT * 0.5;
    double l = th[1] / COST_SCALE_PREFILL + th[3] / COST_SCALE_CONTEXT * (prefill_pos + 0.5);
    double c = th[0] + th[2] * (decode_seqs / COST_SCALE_DECODE) + th[3] * (context_tokens / COST_SCALE_CONTEXT) -
               target_us;
    double disc = l * l - 4.0 * q * c, den = l + sqrt(disc > 0.0 ? disc : 0.0);
    double r = den > 0.0 && c < 0.0 ? -2.0 * c / den : (double)lo;
    if (!(r >= (double)lo)) return lo;   /* NaN too */
    if (r >= (double)(hi - 1)) return hi - 1;
    return (int)r;
}

int cost_budget_for(const cost_model *m, double target_us, double decode_seqs,
                    double context_tokens, double prefill_pos, int lo, int hi) {
    if (!m || lo < 0 || lo > hi) return TS_ERR_INVAL;
    if (!(budget_pred(m, lo, decode_seqs, context_tokens, prefill_pos) <= target_us))
        return lo;
    if (budget_pred(m, hi, decode_seqs, context_tokens, prefill_pos) <= target_us)
        return hi;
    /* Invariant: lo fits, hi does not. The prediction is non-decreasing in t
     * because theta >= 0, so the boundary is unique. Unfloored, it is the
     * quadratic q t^2 + l t + k in t (cost_attended), so the root of
     * q t^2 + l t + c = 0, c = k - target, lands next to the boundary; a search
     * from there with the prediction itself finds it exactly, in two or
     * three predictions where bisection takes log2(hi - lo). */
    int t = budget_root(m, target_us, decode_seqs, context_tokens, prefill_pos, lo, hi);
    while (t + 1 < hi && budget_pred(m, t + 1, decode_seqs, context_tokens, prefill_pos) <= target_us) t++;
    while (t > lo && !(budget_pred(m, t, decode_seqs, context_tokens, prefill_pos) <= target_us)) t--;
    return t;
}

void cost_theta(const cost_model *m, double out[4]) {
    for (int i = 0; i < NF; i++) out[i] = m->theta[i] / feat_scale[i];
}

double cost_err_us(const cost_model *m) { return m->err_us; }

double cost_err_autocorr(const cost_model *m) {
    if (!(m->res_sq > 0)) return 0.0;
    double r = m->res_lag / m->res_sq;
    return r > 1.0 ? 1.0 : r < -1.0 ? -1.0 : r;
}

double cost_copy_bytes_per_us(const cost_model *m) { return m->copy_bytes_per_us; }

double cost_trace(const cost_model *m) {
    double tr = 0.0;
    for (int i = 0; i < NF; i++) tr += m->P[i][i];
    return tr;
}

/* ---- the spread around the predictions ------------------------------------------ */

const double cost_ratio_levels[COST_RATIO_NQ] = {0.001, 0.01, 0.05, 0.1, 0.2,  0.3,  0.4,   0.5,  0.6,
                                                 0.7,   0.8,  0.9,  0.95, 0.98, 0.99, 0.995, 0.999};

/* Bins per unit of log2(ratio). */
static double ratio_per_log2(void) { return COST_RATIO_BINS / log2(COST_RATIO_MAX / COST_RATIO_MIN); }

void cost_ratio_add(cost_ratio_hist *h, double measured_us, double predicted_us) {
    if (!(measured_us > 0.0 && predicted_us > 0.0 && isfinite(measured_us) && isfinite(predicted_us))) return;
    double x = log2(measured_us / predicted_us / COST_RATIO_MIN) * ratio_per_log2();
    int i = x < 0.0 ? 0 : x >= COST_RATIO_BINS ? COST_RATIO_BINS - 1 : (int)x;
    h->bins[i]++;
    h->n++;
}

double cost_ratio_quantile(const cost_ratio_hist *h, double q) {
    if (!h->n) return 1.0;
    q = q < 0.0 ? 0.0 : q > 1.0 ? 1.0 : q;
    double want = q * (double)h->n, seen = 0.0;
    int i = 0;
    /* The first bin, not empty, that takes the count to want. */
    while (i < COST_RATIO_BINS - 1 && (seen + (double)h->bins[i] < want || !h->bins[i])) seen += (double)h->bins[i++];
    double in = h->bins[i] ? (want - seen) / (double)h->bins[i] : 0.0;
    if (in > 1.0) in = 1.0;
    return COST_RATIO_MIN * exp2(((double)i + in) / ratio_per_log2());
}

/* ---- the spread in time ---------------------------------------------------------- */

const int cost_ratio_acf_lags[COST_ACF_NLAGS] = {1, 4, 16, 64, 256};

/* log(measured / predicted) clipped to +-COST_ACF_CLIP into *r; 0 unless
 * both are finite and > 0. */
static int clipped_log_ratio(double measured_us, double predicted_us, double *r) {
    if (!(measured_us > 0.0 && predicted_us > 0.0 && isfinite(measured_us) && isfinite(predicted_us))) return 0;
    double x = log(measured_us / predicted_us);
    *r = x > COST_ACF_CLIP ? COST_ACF_CLIP : x < -COST_ACF_CLIP ? -COST_ACF_CLIP : x;
    return 1;
}

void cost_ratio_acf_add(cost_ratio_acf *a, double measured_us, double predicted_us) {
    double r;
    if (!clipped_log_ratio(measured_us, predicted_us, &r)) return;
    for (int k = 0; k < COST_ACF_NLAGS; k++) {
        uint64_t lag = (uint64_t)cost_ratio_acf_lags[k];
        if (a->n >= lag) a->lag_sum[k] += r * a->ring[(a->n - lag) % COST_ACF_MAXLAG];
    }
    a->ring[a->n % COST_ACF_MAXLAG] = r;
    a->sum += r;
    a->sum_sq += r * r;
    a->n++;
}

void cost_ratio_acf_get(const cost_ratio_acf *a, double out[COST_ACF_NLAGS]) {
    double n = (double)a->n, m = n > 0 ? a->sum / n : 0.0, var = n > 0 ? a->sum_sq / n - m * m : 0.0;
    for (int k = 0; k < COST_ACF_NLAGS; k++) {
        uint64_t lag = (uint64_t)cost_ratio_acf_lags[k];
        int enough = a->n >= lag * (COST_ACF_MIN_SPAN + 1) && var > 1e-12;
        double c = enough ? (a->lag_sum[k] / (double)(a->n - lag) - m * m) / var : 0.0;
        out[k] = c > 1.0 ? 1.0 : c < -1.0 ? -1.0 : c;
    }
}

/* ---- the shape by rows ------------------------------------------------------------ */

int cost_shape_bucket(double rows) {
    if (!(rows > 1.0)) return 0;
    int b = 0;
    while (b < COST_SHAPE_ROWS - 1 && rows > ldexp(1.0, b)) b++;
    return b;
}

/* The batch's row in s (with a prefill chunk or not) and bucket; -1 for a
 * negative or non-finite batch. */
static int shape_at(double prefill_tokens, double decode_seqs, int *kind) {
    if (!(prefill_tokens >= 0.0 && decode_seqs >= 0.0 && isfinite(prefill_tokens) && isfinite(decode_seqs)))
        return -1;
    *kind = prefill_tokens > 0.0;
    return cost_shape_bucket(prefill_tokens + decode_seqs);
}

void cost_shape_add(cost_shape *s, double prefill_tokens, double decode_seqs, double measured_us,
                    double predicted_us) {
    int kind, b = shape_at(prefill_tokens, decode_seqs, &kind);
    double r;
    if (b < 0 || !clipped_log_ratio(measured_us, predicted_us, &r)) return;
    uint64_t n = ++s->n[kind][b];
    double w = 1.0 / (double)n;
    if (w < COST_SHAPE_ALPHA) w = COST_SHAPE_ALPHA;
    s->log_f[kind][b] += w * (r - s->log_f[kind][b]);
}

double cost_shape_factor(const cost_shape *s, double prefill_tokens, double decode_seqs) {
    int kind, b = shape_at(prefill_tokens, decode_seqs, &kind);
    if (b < 0 || s->n[kind][b] < COST_SHAPE_MIN_STEPS) return 1.0;
    return exp(s->log_f[kind][b]);
}
