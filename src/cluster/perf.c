/* perf.c - roofline step time, Little's law and memory need; see perf.h. */
#include "perf.h"

#include <math.h>

#include "sched.h"

#define MAX_ITER 500            /* fixed-point iterations of N <- lambda W(N) */
#define N_DIVERGED 1e7          /* requests in flight treated as "does not keep up" */

void perf_opts_default(perf_opts *o) {
    /* Model parameters, not facts [U]: engines reach roughly half of peak
     * tensor throughput on prefill-sized GEMMs and 70-85% of peak
     * bandwidth on decode weight streaming; a step of a CUDA-graph engine
     * costs a few ms of launches, sampling and scheduling on top. */
    o->eff_compute = 0.5;
    o->eff_bw = 0.8;
    o->step_overhead_s = 0.002;
    /* Keep 10% of compute free for bursts the mean-value model ignores. */
    o->max_util = 0.9;
    /* N + 2 sqrt(N) covers about 97.7% of a Poisson count's mass for large N. */
    o->kv_z = 2.0;
    /* Activations, the allocator's fragmentation, paged-KV rounding. */
    o->headroom = 0.10;
    /* A CUDA context with cuBLAS handles costs 0.3-0.6 GiB per process [U]. */
    o->reserve_bytes = 0.5 * 1073741824.0;
    /* A tier with a TTFT target and no TPOT target would otherwise be
     * sized for TTFT alone: the smallest share meeting it can decode at
     * 300 ms a token and, by Little's law, hold many requests' KV for the
     * whole crawl. 100 ms (10 tokens/s, about reading speed) is a bound no
     * interactive tenant finds too loose; sizing drops it where even the
     * largest slice cannot meet it. */
    o->tpot_bound_s = 0.100;
}

double perf_weight_bytes(const perf_model *m) { return m->params * m->weight_bytes; }

double perf_kv_per_token(const perf_model *m) {
    return 2.0 * m->layers * m->kv_heads * m->head_dim * m->kv_bytes;
}

/* 4 L H D: attention FLOPs per token per position attended (QK^T and AV,
 * two FLOPs per multiply-add). */
static double attn_coeff(const perf_model *m) {
    return 4.0 * m->layers * (double)(m->heads > 0 ? m->heads : m->kv_heads) * m->head_dim;
}

double perf_step_time(const perf_model *m, const perf_slice *s, const perf_opts *o,
                      double decodes, double ctx, double prefill, double span) {
    double flops = 2.0 * m->params * (decodes + prefill) + attn_coeff(m) * (decodes * ctx + prefill * span);
    double bytes = perf_weight_bytes(m) + perf_kv_per_token(m) * (decodes * ctx + prefill);
    double tc = flops / (s->flops * o->eff_compute);
    double tm = bytes / (s->bw * o->eff_bw);
    return (tc > tm ? tc : tm) + o->step_overhead_s;
}

/* A prompt of I tokens runs as chunks_of(I) steps of chunk_of(I) tokens
 * (one step of nothing for an empty prompt). */
static double chunk_of(double I) { return I < PERF_CHUNK_TOKENS ? I : PERF_CHUNK_TOKENS; }
static double chunks_of(double I) { return I > 0 ? ceil(I / chunk_of(I) - 1e-9) : 1.0; }

/* The step time when every step carries its even share of the prompts,
 * p = lambda I t tokens (see perf.h, "Steps"), or -1 when prefill alone
 * saturates the slice (a slope >= 1). */
static double steady_even(const perf_model *m, const perf_slice *s, const perf_load *l, const perf_opts *o,
                          double n) {
    double I = l->prompt, c = l->prompt + 0.5 * l->output, A = attn_coeff(m), K = perf_kv_per_token(m);
    double fe = s->flops * o->eff_compute, be = s->bw * o->eff_bw;
    double ac = (2.0 * m->params * n + A * n * c) / fe;
    double kc = (2.0 * m->params + 0.5 * A * I) * l->rps * I / fe;
    double am = (perf_weight_bytes(m) + K * n * c) / be;
    double km = K * l->rps * I / be;
    if (kc >= 1.0 || km >= 1.0) return -1.0;
    double tc = (ac + o->step_overhead_s) / (1.0 - kc);
    double tm = (am + o->step_overhead_s) / (1.0 - km);
    return tc > tm ? tc : tm;
}

/* The mean step when prompts are sparse (fewer than one per step): chunk
 * steps of B = min(I, budget) tokens among decode-only steps; -1 when they
 * are not sparse (chunk steps would fill the time: prompts then share
 * steps, the even case). */
static double steady_sparse(const perf_model *m, const perf_slice *s, const perf_load *l, const perf_opts *o,
                            double n) {
    double I = l->prompt, c = l->prompt + 0.5 * l->output;
    double B = chunk_of(I);
    double t_dec = perf_step_time(m, s, o, n, c, 0, 0);
    double chunks = l->rps * (I > 0 ? I / B : 1.0); /* chunk steps per second (a prompt's share
                                                       of its last, partial chunk: others fill it) */
    double busy = chunks * perf_step_time(m, s, o, n, c, B, 0.5 * I);
    if (busy >= 1.0) return -1.0;
    return 1.0 / (chunks + (1.0 - busy) / t_dec);
}

/* The mean step time (TPOT) with n requests in flight, or -1 when the
 * slice does not keep up: the larger of the two cases, since the
 * scheduler runs a sparse load as chunks that the even case would hide
 * under the decodes' memory time. See perf.h, "Steps". */
static double steady_step(const perf_model *m, const perf_slice *s, const perf_load *l, const perf_opts *o,
                          double n) {
    double even = steady_even(m, s, l, o, n);
    if (even < 0 || !(l->rps > 0.0 && l->prompt > 0.0)) return even;
    double sparse = steady_sparse(m, s, l, o, n);
    return sparse > even ? sparse : even;
}

/* Latency W with n in flight; also the step time and TTFT. -1 if unstable. */
static double latency(const perf_model *m, const perf_slice *s, const perf_load *l,
                      const perf_opts *o, double n, double *step, double *ttft) {
    double t = steady_step(m, s, l, o, n);
    if (t < 0) return -1.0;
    double c = l->prompt + 0.5 * l->output;
    double wait = 0.5 * t * (n < 1.0 ? n : 1.0);
    /* A prompt longer than a step's budget is prefilled in chunks, one
     * step each, back to back. */
    double C = chunk_of(l->prompt);
    double first = wait + chunks_of(l->prompt) * perf_step_time(m, s, o, n, c, C, 0.5 * l->prompt);
    double out = l->output > 1.0 ? l->output - 1.0 : 0.0;
    *step = t;
    *ttft = first;
    return first + out * t;
}

/* The TTFT quantile of the prefill queue; see perf.h. Fills ttft_p99_s
 * and prefill_util from e's step and N; -1 when the queue does not keep up. */
static int ttft_tail(const perf_model *m, const perf_slice *s, const perf_load *l, const perf_opts *o,
                     perf_est *e) {
    double I = l->prompt, c = l->prompt + 0.5 * l->output, n = e->in_flight;
    /* A prompt holds the slice for its own chunk steps when prompts are
     * sparse, and for what its tokens add to a shared step when they are
     * even (the two cases of "Steps"). */
    double B = chunk_of(I);
    double own = chunks_of(I) * perf_step_time(m, s, o, n, c, B, 0.5 * I);
    double sparse = l->rps > 0.0 ? steady_sparse(m, s, l, o, n) : -1.0;
    double serve = sparse > 0 && sparse >= e->step_s
                       ? own
                       : perf_step_time(m, s, o, n, c, I, 0.5 * I) - perf_step_time(m, s, o, n, c, 0, 0);
    double rho = l->rps * serve;
    e->prefill_util = rho;
    e->ttft_p99_s = e->ttft_s;
    if (!(rho < 1.0)) return -1;          /* NaN too */
    double wait = 0.0;
    if (rho > 1.0 - PERF_TTFT_Q) {
        double resid = 0.5 * serve * (1.0 + l->prompt_cv * l->prompt_cv);
        wait = resid / (1.0 - rho) * log(rho / (1.0 - PERF_TTFT_Q));
    }
    double busy = PERF_TTFT_Q * e->step_s * (n < 1.0 ? n : 1.0);
    e->ttft_p99_s = wait + busy + own;
    return 0;
}

/* The smallest k with P(X <= k) >= p for X ~ Poisson(mean): summed term by
 * term (in logs, so a large mean does not underflow exp(-mean)) up to a
 * mean of 1e4, the normal approximation beyond. */
static double poisson_quantile(double mean, double p) {
    if (!(mean > 0)) return 0;
    if (mean > 1e4) return ceil(mean + 2.3263478740 * sqrt(mean) + 0.5);
    double lp = -mean, cdf = exp(lp);
    double k = 0;
    while (cdf < p && k < 10 * mean + 100) {
        k += 1;
        lp += log(mean) - log(k);
        cdf += exp(lp);
    }
    return k;
}

void perf_estimate(const perf_model *m, const perf_slice *s, const perf_load *l,
                   const perf_opts *o, perf_est *e) {
    double I = l->prompt, O = l->output, A = attn_coeff(m);
    double c = I + 0.5 * O;
    e->util = l->rps * (2.0 * m->params * (I + O) + A * (0.5 * I * I + O * c)) /
              (s->flops * o->eff_compute);
    e->stable = 0;
    e->step_s = e->ttft_s = e->ttft_p99_s = e->prefill_util = e->latency_s = e->in_flight = 0;
    double n = 0.0, w = 0.0, step = 0.0, ttft = 0.0;
    for (int it = 0; it < MAX_ITER; it++) {
        w = latency(m, s, l, o, n, &step, &ttft);
        if (w < 0) break;
        double next = l->rps * w;
        if (next > N_DIVERGED) break;
        int done = fabs(next - n) <= 1e-9 + 1e-7 * next;
        n = next;
        if (done || l->rps == 0.0) {
            e->stable = 1;
            break;
        }
    }
    if (e->stable) {
        /* One more evaluation so step, TTFT and W belong to the final N. */
        w = latency(m, s, l, o, n, &step, &ttft);
        e->step_s = step;
        e->ttft_s = ttft;
        e->latency_s = w;
        e->in_flight = n;
    }
    if (e->stable && ttft_tail(m, s, l, o, e) != 0) e->stable = 0;
    if (e->util > o->max_util) e->stable = 0;
    if (!(s->flops > 0 && s->bw > 0)) e->stable = 0; /* a slice with nothing to run on */
    double q = n + o->kv_z * sqrt(n), seats = poisson_quantile(n, PERF_TTFT_Q) + 1.0;
    if (seats > q) q = seats;
    e->seqs = l->rps > 0.0 ? (int)ceil(q - 1e-9) : 0;
    if (e->seqs < 1) e->seqs = 1;
    /* The scheduler admits new requests only while the pool is under its
     * high watermark, and a request holds whole blocks: the seats' KV
     * must fit under the watermark, each rounded up by a block. */
    sched_config sc;
    sched_config_default(&sc);
    double per_seat = I + O + PERF_BLOCK_TOKENS;
    double tokens = (l->rps > 0.0 ? (double)e->seqs * per_seat / sc.kv_high : 0.0);
    if (tokens < m->max_context) tokens = m->max_context;
    e->kv_tokens = tokens;
    e->weight_bytes = perf_weight_bytes(m);
    e->kv_bytes = tokens * perf_kv_per_token(m);
    e->need_bytes = (e->weight_bytes + e->kv_bytes) * (1.0 + o->headroom) + o->reserve_bytes;
}

int perf_check(const perf_est *e, const perf_slice *s, const perf_opts *o, double ttft_s,
               double tpot_s) {
    (void)o;
    if (!e->stable) return PERF_FAIL_UNSTABLE;
    if (e->need_bytes > s->mem) return PERF_FAIL_MEMORY;
    if (ttft_s > 0 && e->ttft_p99_s > ttft_s) return PERF_FAIL_TTFT;
    if (tpot_s > 0 && e->step_s > tpot_s) return PERF_FAIL_TPOT;
    return PERF_OK;
}
