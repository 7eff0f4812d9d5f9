/*
 * perf.h - how fast and how big one model instance is on one slice of a
 * GPU: a roofline step-time model, Little's law for what is in flight, and
 * the memory that follows. The planner asks it "on this slice, at this
 * load, what are TTFT, TPOT and the memory need?" for every candidate
 * slice; nothing here knows about MIG, MPS or packing.
 *
 * Step time (one engine iteration of continuous batching, b decoding
 * sequences of mean context c plus p prefill tokens of mean attention span
 * a) is the roofline maximum of its compute and its memory traffic:
 *     flops(b, p) = 2 P (b + p) + 4 L H D (b c + p a)
 *     bytes(b, p) = W + K (b c + p)
 *     t = max(flops / (F e_c), bytes / (B e_b)) + t0
 * with P parameters, W weight bytes, K KV bytes per token (2 L H_kv D e),
 * L layers, H query heads, D head dim, F and B the slice's peak FLOP/s and
 * bytes/s (the GPU's scaled by its share of SMs and of memory slices),
 * e_c and e_b achieved fractions of peak and t0 a fixed per-step cost.
 *
 * Steps. At arrival rate lambda with prompt I and output O tokens, N
 * requests are in flight and all of them decode each step (b = N, c = I +
 * O/2). The scheduler does not spread prompts thinly over every step: a
 * step takes what prompt tokens are waiting, up to its budget
 * (PERF_CHUNK_TOKENS, serve's default budget_max), so a long prompt is a
 * run of full chunk steps (compute-bound) among decode-only steps (memory-
 * bound), and the two do not overlap as one evenly loaded step's
 * roofline would let them (the simulator showed the even-spread model 40%
 * optimistic on TPOT for 2k-token prompts). So: a chunk carries C = the
 * prompt tokens that arrive during a decode step, at least one prompt, at
 * most the budget; chunk steps come lambda I / C times a second and take
 * t_c = step(N, c, C, I/2) each, the rest of the time is decode steps of
 * t_d = step(N, c, 0, 0), and the mean step (TPOT) is one over the steps
 * per second: t = 1 / (lambda I / C + (1 - lambda I t_c / C) / t_d);
 * lambda I t_c / C >= 1 does not keep up. TTFT = the wait for the running
 * step (t/2 when busy, scaled by min(N, 1)) plus the prompt's own chunk
 * steps, ceil(I / B) of them with B = min(I, budget), back to back; the
 * latency is W = TTFT + (O - 1) TPOT. Little's
 * law closes the loop: N = lambda W. W grows with N, so N is found by
 * iterating N <- lambda W(N) from 0; it converges when the slice keeps up
 * and diverges when it does not, which is reported as unstable. The
 * compute utilisation rho = lambda x FLOPs per request / (F e_c) must stay
 * under opts.max_util, a margin for bursts that the mean-value model does
 * not see.
 *
 * TTFT tail. The mean above waits for one running step only; a p99 must
 * also see prompts queueing behind each other. The slice is taken as an
 * M/G/1 server of prefill work: prompts arrive as a Poisson stream at
 * lambda, and one prompt's service is its share of the chunk steps that
 * carry it, S = (I / C) step(N, c, C, I/2) (while prompts queue, every
 * step is a chunk step; C as in "Steps").
 * With rho = lambda S, the prompt-length coefficient of variation v
 * (l.prompt_cv; S is taken as proportional to I, so E[S^2] = S^2 (1 + v^2))
 * and the mean residual service R = E[S^2] / (2 S) = S (1 + v^2) / 2,
 * Pollaczek-Khinchine gives the mean wait rho R / (1 - rho), and the
 * exponential tail approximation of the wait is
 *     P(Wq > x) ~ rho exp(-x (1 - rho) / R),
 * so its q-quantile (q = PERF_TTFT_Q) is
 *     x_q = R / (1 - rho) ln(rho / (1 - q))   when rho > 1 - q, else 0.
 * The p99 TTFT is then x_q, plus the running step at its own q-quantile of
 * a uniform residual (q t, scaled by min(N, 1) like the mean), plus the
 * prompt's own chunk steps (as the mean's). rho >= 1 marks the estimate unstable.
 * Limits: the approximation is asymptotic (good for rho above ~0.3, a
 * little pessimistic below; and some 13% optimistic when the prompt
 * length's CV is about 2, as public traces' often are: checked against a
 * simulated M/G/1 queue); arrivals are assumed Poisson (bursty traffic
 * has a heavier tail); the prompt's own step uses the mean prompt, so a
 * long prompt's own prefill beyond the mean is not in the tail; and S
 * ignores attention's quadratic growth in I when v > 0. The simulator
 * (tessera sim) checks these numbers against the real scheduler.
 *
 * Seats and memory. The requests in flight are a Poisson count of mean N
 * (M/G/infinity), and an arrival that finds every seat (max_seqs) taken
 * waits for a whole request to end, which no TTFT target survives; so the
 * seats are enough that at most 1 - PERF_TTFT_Q of arrivals find them all
 * taken: the Poisson PERF_TTFT_Q-quantile of the count plus the arrival's
 * own, and never fewer than N + z sqrt(N) (z = opts.kv_z). (The simulator
 * showed the need: three 0.2 req/s tenants sized at N + 2 sqrt(N) = 3 seats
 * saw a 3 s p99 TTFT against a 1 s target whenever a fourth request came
 * while three were in flight.) Memory: weights, plus KV for those seats
 * (each its context rounded up by a block, and all of it under the
 * scheduler's admission watermark, sched_config_default's kv_high: above
 * it no request is admitted, so a pool sized to the brim holds fewer),
 * each charged its full context I + O (the most it holds), and never less
 * than one request at the model's max_context; then a fractional headroom
 * (activations, fragmentation) and a fixed per-process reserve (CUDA
 * context). Known limits: the mean TTFT has no queueing beyond one step (the
 * p99 has, above), no prefix sharing,
 * no speculative decoding, no tensor parallelism (one instance, one slice).
 * Pure arithmetic: no allocation, no state.
 */
#ifndef TS_PERF_H
#define TS_PERF_H

#define PERF_TTFT_Q 0.99            /* the TTFT quantile plans are checked at */
#define PERF_BLOCK_TOKENS 16        /* KV block of the server (serve's default block_size) */
#define PERF_CHUNK_TOKENS 512       /* a step's token budget (serve's default budget_max) */

typedef struct perf_model {
    double params;                  /* parameters */
    double weight_bytes;            /* bytes per parameter as served (2 = FP16/BF16, 1 = FP8/INT8) */
    double kv_bytes;                /* bytes per KV cache element */
    int layers;
    int heads;                      /* query heads (attention FLOPs) */
    int kv_heads;                   /* KV heads (cache size); < heads under GQA */
    int head_dim;
    int max_context;                /* tokens one request may reach */
} perf_model;

typedef struct perf_slice {
    double flops;                   /* peak FLOP/s of the slice at the model's precision */
    double bw;                      /* peak memory bandwidth of the slice, B/s */
    double mem;                     /* usable memory, bytes */
} perf_slice;

typedef struct perf_load {
    double rps;                     /* arrivals, requests/s */
    double prompt;                  /* mean prompt tokens */
    double output;                  /* mean output tokens, >= 1 */
    double prompt_cv;               /* coefficient of variation of prompt tokens, 0 = all equal */
} perf_load;

typedef struct perf_opts {
    double eff_compute;             /* achieved fraction of peak tensor FLOP/s, 0..1 */
    double eff_bw;                  /* achieved fraction of peak bandwidth, 0..1 */
    double step_overhead_s;         /* fixed cost per engine step, s */
    double max_util;                /* highest compute utilisation planned for, 0..1 */
    double kv_z;                    /* in-flight quantile: N + z sqrt(N) */
    double headroom;                /* fraction added to weights + KV */
    double reserve_bytes;           /* fixed bytes per process (CUDA context) */
    double tpot_bound_s;            /* TPOT sizing aims for where a tier sets none, s; 0 = off */
} perf_opts;

typedef struct perf_est {
    int stable;                     /* 1: the slice keeps up with the load */
    double step_s;                  /* steady-state step time = TPOT, s */
    double ttft_s;                  /* predicted mean time to first token, s */
    double ttft_p99_s;              /* its PERF_TTFT_Q quantile, s: what targets are checked at */
    double prefill_util;            /* rho of the prefill queue, lambda S */
    double latency_s;               /* W, request latency, s */
    double in_flight;               /* N = lambda W, requests (mean) */
    double util;                    /* compute utilisation rho, 0..1+ */
    int seqs;                       /* sequences sized for (seats; see above) */
    double kv_tokens;               /* KV positions sized for */
    double weight_bytes;            /* bytes */
    double kv_bytes;                /* bytes */
    double need_bytes;              /* (weights + KV) (1 + headroom) + reserve */
} perf_est;

/* Why an estimate fails a slice, in the order perf_check tests them. */
enum { PERF_OK = 0, PERF_FAIL_UNSTABLE, PERF_FAIL_MEMORY, PERF_FAIL_TTFT, PERF_FAIL_TPOT };

/* Defaults (see perf.c for where each comes from). */
void perf_opts_default(perf_opts *o);

/* Weight bytes (params x weight_bytes) and KV bytes per token
 * (2 x layers x kv_heads x head_dim x kv_bytes). */
double perf_weight_bytes(const perf_model *m);
double perf_kv_per_token(const perf_model *m);

/* Time of one step with `decodes` sequences of mean context ctx and
 * `prefill` prompt tokens of mean attention span span, s. */
double perf_step_time(const perf_model *m, const perf_slice *s, const perf_opts *o,
                      double decodes, double ctx, double prefill, double span);

/* Steady-state estimate of m on slice s at load l; see the header text. */
void perf_estimate(const perf_model *m, const perf_slice *s, const perf_load *l,
                   const perf_opts *o, perf_est *out);

/* PERF_OK if e fits s (memory, stability) and meets the targets (ttft_s
 * against the p99 TTFT, tpot_s against the step time; in s, 0 = no
 * target), else the first PERF_FAIL_* that applies. */
int perf_check(const perf_est *e, const perf_slice *s, const perf_opts *o, double ttft_s,
               double tpot_s);

#endif
