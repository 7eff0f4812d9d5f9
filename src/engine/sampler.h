/*
 * sampler.h - turns one row of logits into the next token: greedy, or
 * temperature, top-k and top-p (nucleus) sampling from a seeded random
 * stream, plus the request's stop tokens.
 *
 * One smp belongs to one sequence. It owns its random state (xoshiro256**,
 * seeded through splitmix64, no global state), a copy of the parameters and
 * stop ids, and two scratch arrays sized for the vocabulary, allocated once
 * by smp_init; smp_sample never allocates, never reads a clock and never
 * touches another sequence's state, so the same seed and the same logits give
 * the same tokens on every run and in the simulator. Bad parameters are
 * refused at smp_init with TS_ERR_INVAL rather than clamped, so a request
 * that asks for something impossible hears about it. Non-finite logits never
 * crash it: NaN is read as -inf (a token that is never drawn).
 *
 * It never keeps the caller's logits or stop-id array past the call that
 * receives them, and it never calls exit() or abort().
 *
 * Known limit: the scratch is 16 bytes per vocabulary entry per sampler
 * (2.4 MB at 150k tokens), which is fine for hundreds of live sequences; a
 * server holding many thousands would want one scratch per worker thread.
 */
#ifndef TS_SAMPLER_H
#define TS_SAMPLER_H

#include <stdint.h>

#include "rng.h"

#define SMP_MAX_STOP 64     /* stop ids a request may name */
#define SMP_MAX_BIAS 300    /* logit_bias entries a request may name (OpenAI's cap) */
#define SMP_MAX_TOP 20      /* top alternatives smp_sample_full reports */
#define SMP_NO_TOKEN (-1000) /* smp_sample_full: the processed row has no
                             * finite logit (not a TS_ERR_ code) */

/* One logit_bias entry: bias is added to token id's logit. */
typedef struct smp_bias {
    int32_t id;               /* 0..n_vocab-1 */
    float bias;               /* -100..100 (OpenAI's range); +-100 in
                                 practice bans or forces the token */
} smp_bias;

/* What a request asks of the sampler. Filters compose in the usual order:
 * temperature, then top-k, then top-p over what top-k left. */
typedef struct smp_params {
    float temperature;        /* logits are divided by it; 0 = greedy; >= 0, finite */
    int top_k;                /* keep the k most likely tokens; 0 = off */
    float top_p;              /* keep the shortest most-likely-first set whose mass
                                 is >= top_p; in (0, 1], 1 = off */
    uint64_t seed;            /* random stream; same seed, same tokens */
    uint64_t stream;          /* which of seed's independent streams: 0 is
                                 rng_seed(seed), j > 0 rng_seed_stream(seed, j),
                                 so the n choices of one request never draw
                                 from overlapping (shifted) sequences */
    const int32_t *stop_ids;  /* (n_stop) ids that end generation; copied */
    int n_stop;               /* 0 .. SMP_MAX_STOP */
    /* Row processing (smp_sample_full), all off when zeroed. Applied in
     * this order to a copy of the row: logit bias, repetition penalty,
     * frequency and presence penalties, the min_tokens mask; then
     * temperature, min_p, top-k and top-p as above. */
    float min_p;              /* drop tokens with p < min_p * p(best), after
                                 temperature; in [0, 1], 0 = off */
    float presence_penalty;   /* OpenAI: subtracted once from every token
                                 generated so far; -2..2, 0 = off */
    float frequency_penalty;  /* OpenAI: subtracted once per occurrence in
                                 the generated tokens; -2..2, 0 = off */
    float repetition_penalty; /* HF/vLLM: a token seen in the prompt or the
                                 output has a positive logit divided by it,
                                 a negative one multiplied; > 0, finite;
                                 1 = off, and 0 reads as 1 (zeroed params) */
    const smp_bias *bias;     /* (n_bias) logit_bias; copied (ids may repeat:
                                 the biases add up) */
    int n_bias;               /* 0 .. SMP_MAX_BIAS */
    int min_tokens;           /* end tokens (smp_hist.end_ids) and the stop
                                 ids are masked while fewer than this were
                                 generated; >= 0 */
    int top_logprobs;         /* alternatives smp_sample_full reports,
                                 0 .. SMP_MAX_TOP */
} smp_params;

/* What the row processing looks at, per call: the sequence so far and the
 * model's end tokens. Borrowed for the call only; every pointer may be
 * NULL when its count is 0. */
typedef struct smp_hist {
    const int32_t *prompt;    /* (n_prompt) ids: repetition penalty only */
    int32_t n_prompt;
    const int32_t *gen;       /* (n_gen) generated ids: every penalty */
    int32_t n_gen;
    const int32_t *end_ids;   /* (n_end) ids masked before min_tokens,
                                 with the stop ids */
    int32_t n_end;
} smp_hist;

/* The log-probabilities of one sampled token, from the processed row (bias,
 * penalties and the min_tokens mask applied) before temperature, min_p,
 * top-k and top-p: the distribution the model gives after the request's
 * own edits, not the truncated one it was drawn from. vLLM calls this
 * "processed_logprobs"; with no penalty or bias it equals the raw model
 * distribution (vLLM's default), which is what a prompt's logprobs use. */
typedef struct smp_lp {
    float logprob;            /* the chosen token's; -inf if it had no mass */
    int32_t n_top;            /* valid entries below, best first */
    int32_t top_id[SMP_MAX_TOP];
    float top_lp[SMP_MAX_TOP];
} smp_lp;


/* Sampler state. The caller owns the struct; smp_init fills it, smp_deinit
 * frees what it points to. Fields are private to sampler.c. */
typedef struct smp {
    int32_t n_vocab;          /* logits per row */
    float temperature;        /* as in smp_params */
    int32_t top_k;            /* 0 = off; a top_k >= n_vocab is stored as 0 */
    float top_p;              /* 1 = off */
    int32_t n_stop;           /* valid entries of stop */
    int32_t stop[SMP_MAX_STOP]; /* copied stop ids */
    rng rng;                  /* the random stream, from smp_params.seed and .stream */
    float min_p;              /* as in smp_params */
    float presence, frequency, repetition; /* penalties; repetition 1 = off */
    int32_t n_bias;           /* valid entries of bias */
    int32_t min_tokens;
    int32_t top_logprobs;
    smp_bias bias[SMP_MAX_BIAS]; /* copied logit_bias */
    int32_t *idx;             /* (n_vocab) candidate token ids, permuted per call */
    float *w;                 /* (n_vocab) unnormalised probability, by token id */
    float *row;               /* (n_vocab) the processed copy of a row */
    int32_t *cnt;             /* (n_vocab) history counts; all 0 between calls */
} smp;

/* Validate p and set s up for rows of n_vocab logits. A top_k of n_vocab or
 * more keeps every token, the same as 0 (off). Returns 0, or
 * TS_ERR_INVAL for a NULL s or p, n_vocab <= 0, a temperature that is
 * negative or not finite, top_k < 0, top_p outside (0, 1] (or NaN), n_stop
 * outside 0..SMP_MAX_STOP, stop_ids NULL with n_stop > 0, or a stop id
 * outside 0..n_vocab-1; TS_ERR_NOMEM when the scratch cannot be allocated.
 * On failure s holds nothing (smp_deinit on it is harmless). p->stop_ids is
 * copied and may be freed once this returns. */
int smp_init(smp *s, int n_vocab, const smp_params *p);

/* The same validation and random stream as smp_init, without scratch: for
 * a server sampling many sequences from one thread, each sequence keeps
 * its parameters and stream in its own smp and borrows one shared scratch
 * (an smp from smp_init with the same n_vocab) through smp_sample_with.
 * Such an smp owns nothing; smp_deinit on it is harmless. */
int smp_init_params(smp *s, int n_vocab, const smp_params *p);
/* smp_sample for s, using scratch's buffers. Not thread-safe on scratch. */
int32_t smp_sample_with(smp *s, const smp *scratch, const float *logits);

/* Free the scratch. Safe on a zeroed or failed-init smp and twice in a row. */
void smp_deinit(smp *s);

/* Pick the next token from logits, a row of s->n_vocab floats. Returns a
 * token id in 0..n_vocab-1, or TS_ERR_INVAL when s or logits is NULL or s was
 * never initialised. Greedy (temperature 0, or top_k 1) returns the argmax,
 * the lowest id on ties, and draws no random number; every other call draws
 * exactly one, whatever the logits, so the stream stays in step with the
 * tokens. Degenerate rows follow greedy: when every candidate is -inf or NaN
 * the lowest id wins, and a +inf logit wins outright (the lowest such id).
 * Cost: with top_k, one pass of ~n_vocab compares (O(n_vocab log k) worst
 * case) and k exps; without, n_vocab exps, plus for top_p a quickselect on
 * mass, O(n_vocab) expected, O(n_vocab log n_vocab) worst. No allocation. */
int32_t smp_sample(smp *s, const float *logits);

/* smp_sample with the row processing of smp_params (bias, penalties over
 * h, the min_tokens mask) applied to a copy of logits in scratch's buffers
 * (scratch may be s itself when s came from smp_init; h may be NULL: no
 * history, nothing masked). When lp is not NULL it receives the chosen
 * token's log-probability and the top s->top_logprobs alternatives (see
 * smp_lp). Returns a token id or TS_ERR_INVAL, as smp_sample, or
 * SMP_NO_TOKEN when no logit of the processed row is finite (a grammar or
 * a min_tokens mask left nothing): no token can be drawn, the caller ends
 * the sequence without one. Cost on top
 * of smp_sample: one copy of the row when anything is processed, O(history)
 * for the penalties, and with lp one pass of exps for the normaliser and a
 * top-k heap of at most SMP_MAX_TOP: no sort of the vocabulary. */
int32_t smp_sample_full(smp *s, const smp *scratch, const float *logits, const smp_hist *h,
                        smp_lp *lp);

/* The log-probabilities of row (n_vocab logits, unprocessed) at token
 * chosen, and its top n_top (<= SMP_MAX_TOP) alternatives best first (ties
 * by lower id), into lp. For a prompt's logprobs (echo). NaN reads as
 * -inf. Returns 0 or TS_ERR_INVAL. */
int smp_logprobs(const float *row, int32_t n_vocab, int32_t chosen, int n_top, smp_lp *lp);

/* 1 when tok is one of the stop ids, else 0. */
int smp_is_stop(const smp *s, int32_t tok);

#endif
