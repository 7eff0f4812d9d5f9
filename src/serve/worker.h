/*
 * worker.h - one model instance of the server: its engine loop thread.
 *
 * The thread owns everything mutable about the instance - the scheduler,
 * the KV cache, the model's run state, every live request's sampler and
 * detokenizer - and nothing else touches them. HTTP threads talk to it
 * through two doors only: wk_submit/wk_cancel put a request into its inbox,
 * and each request's outbox (text released so far, phase, outcome) is read
 * under the request's own mutex. No lock is held across a forward pass.
 *
 * A request is shared by the HTTP side and the worker and freed when both
 * have let go (wk_req_release). The worker tells the HTTP side that the
 * outbox changed by calling r->notify with r->mu held; the HTTP side clears
 * notify (under mu) before it lets go, so no call reaches a connection that
 * is gone.
 *
 * Sampling follows the request's OpenAI parameters (sampler.h): penalties
 * over its own history, logit_bias, min_tokens (the model's end tokens and
 * its stop_token_ids masked until then), ignore_eos, and, when the HTTP
 * side compiled one, a grammar (grammar.h) that masks each row before the
 * draw and ends the request once the output is complete. Logprobs of the
 * generated tokens (and with echo, of the prompt's, from every prompt row
 * of its prefill chunks) go to the outbox beside the text.
 *
 * Every accepted request ends exactly once (the scheduler guarantees it);
 * the worker turns each end into a final outbox state: done with a finish
 * reason ("stop", "length"), or failed with an HTTP status and a message.
 */
#ifndef TS_WORKER_H
#define TS_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cost.h"
#include "detok.h"
#include "enc.h"
#include "engine.h"
#include "grammar.h"
#include "model.h"
#include "sampler.h"
#include "sched.h"
#include "strbuf.h"
#include "tok.h"

enum wk_phase {
    WK_QUEUED = 0,          /* handed in, not yet seen by the worker */
    WK_ADMITTED = 1,        /* accepted by the scheduler */
    WK_DONE = 2,            /* final: finished, or failed with status */
};

/* How a request ended, for counting outcomes: one of these once WK_DONE. */
enum wk_end {
    WK_END_NONE = 0,        /* not done */
    WK_END_FINISHED,        /* "stop" or "length" */
    WK_END_CANCELLED,       /* the client left */
    WK_END_INVALID,         /* sampling parameters or stop strings refused */
    WK_END_REJECTED,        /* refused by the scheduler at admission: reason */
    WK_END_FAILED,          /* ended by the scheduler after admission: reason */
    WK_END_SHUTDOWN,        /* failed by a shutdown past its grace */
};

/* A compiled grammar shared by the sequences of one request (n, best_of):
 * compiled once, each sequence holds a reference, the last release frees
 * it. The references may be dropped on any thread (a sequence can outlive
 * its connection, and the connection its sequences). */
typedef struct wk_grammar {
    atomic_int refs;
    gr_grammar *g;          /* read-only once built (grammar.h) */
} wk_grammar;

/* A shared grammar over g, one reference held; it owns g from here on (g
 * is freed on failure too). NULL on out of memory. */
wk_grammar *wk_grammar_new(gr_grammar *g);
/* Another reference to g (g may be NULL). */
wk_grammar *wk_grammar_ref(wk_grammar *g);
void wk_grammar_release(wk_grammar *g);

typedef struct wk_req {
    /* Set before wk_submit; read-only afterwards. */
    int32_t tenant;
    int32_t n_prompt, max_new;
    int32_t *tokens;        /* (n_prompt + max_new) prompt, then generated */
    smp_params sp;          /* sampling; stop ids are the model's end tokens */
    char stops[DTK_MAX_STOPS][DTK_MAX_STOP_LEN];
    int n_stops;
    uint64_t cache_salt;    /* the request's cache_salt, hashed (wk_cache_salt);
                             * 0 = none. Its prompt shares prefix cache blocks
                             * only with requests of its tenant and salt */
    float *embedding;       /* (dim) an embedding request's output, or NULL
                             * for a generation request; written by the
                             * worker before the request is done */
    /* The OpenAI parameters beyond smp_params' own (build them with
     * wk_req_set_bias / wk_req_want_logprobs): sp.stop_ids and sp.bias
     * point into these, which r owns. */
    int32_t stop_ids[SMP_MAX_STOP]; /* stop_token_ids: end it, and are not
                             * part of the text */
    smp_bias *bias;         /* (sp.n_bias) logit_bias, owned */
    int ignore_eos;         /* the model's end tokens do not end it */
    struct wk_grammar *grammar; /* structured output: the output must follow
                             * it (a reference, shared by the request's
                             * sequences; compiled by the HTTP side), or NULL */
    gr_state *gstate;       /* the worker's place in it: made at the first
                             * sample (about 1.5 MB), not while queued */
    int gstate_oom;         /* worker-only: gstate could not be made; the
                             * request ends failed with 503 */
    int want_prompt_lp;     /* echo with logprobs: the engine returns every
                             * prompt row; a prefix cache must not skip
                             * them (plps stays NaN where it did) */
    void (*notify)(struct wk_req *r); /* under mu, when the outbox changed */
    void *user;             /* the HTTP side's context */

    /* Outbox, under mu. */
    pthread_mutex_t mu;
    int phase;              /* enum wk_phase */
    strbuf text;            /* released text so far; cut (never gapped)
                             * if memory runs out */
    int32_t n_generated;
    smp_lp *lps;            /* (max_new) each generated token's logprobs,
                             * or NULL (wk_req_want_logprobs) */
    smp_lp *plps;           /* (n_prompt) each prompt token's given the
                             * ones before; [0] and rows not computed hold
                             * a NaN logprob; or NULL */
    double cum_logprob;     /* sum of lps[].logprob: best_of ranks by it */
    const char *finish;     /* "stop" | "length" once done without error */
    int status;             /* HTTP status of a failure, 0 otherwise */
    int end;                /* enum wk_end */
    sched_reason reason;    /* the scheduler's, for WK_END_REJECTED and _FAILED */
    const char *error_type; /* OpenAI error type of a failure */
    char error[200];
    int64_t arrival_us, first_token_us, end_us; /* monotonic */
    int64_t last_token_us;  /* worker-only: for inter-token latency */
    double engine_us;       /* engine time attributed to it */
    uint32_t preemptions;
    int32_t cached_tokens;  /* prompt tokens the prefix cache supplied (OpenAI's
                             * usage.prompt_tokens_details.cached_tokens) */

    /* The worker's own. */
    sched_id sid;
    smp sampler;
    dtk detok;
    int stopped;            /* an end token or stop string ended it */
    atomic_int refs;
    atomic_int cancel;      /* the client left */
    atomic_int shutdown;    /* failed by a shutdown past its grace */
    struct wk_req *next_in, *next_cancel;
    struct wk_req *lead;    /* wk_req_after's: a reference, or NULL */
} wk_req;

/* A new request for n_prompt prompt tokens and up to max_new generated
 * ones, with one reference held by the caller. NULL on out of memory. */
wk_req *wk_req_new(int32_t n_prompt, int32_t max_new);
/* A new embedding request for n_prompt tokens (an encoder model's): one
 * output, the dim-float vector in r->embedding once done. */
wk_req *wk_req_new_embed(int32_t n_prompt, int32_t dim);
void wk_req_release(wk_req *r);
/* Admit r only once lead's prompt has been computed (lead sampled its
 * first token, or ended), so that r, another choice of the same prompt,
 * finds the prompt's blocks in the prefix cache instead of computing them
 * again: blocks join the cache after the step that computed them, and
 * siblings admitted in the same step share nothing. Takes a reference on
 * lead. Before wk_submit of r; lead is submitted first. */
void wk_req_after(wk_req *r, wk_req *lead);
/* Record the logprobs of each generated token (and the top top_k
 * alternatives, 0..SMP_MAX_TOP) in r->lps, and with prompt those of the
 * prompt's tokens in r->plps. Before wk_submit. 0 or TS_ERR_NOMEM/_INVAL. */
int wk_req_want_logprobs(wk_req *r, int top_k, int prompt);
/* Copy n logit_bias entries into r (sp.bias). 0 or TS_ERR_NOMEM. */
int wk_req_set_bias(wk_req *r, const smp_bias *b, int n);

typedef struct wk_step_info {
    int64_t now_us;
    double step_us;         /* forward pass and copies */
    double idle_us;         /* time since the previous step ended */
    double compute_us;      /* of step_us, the device's part (eng_dev_stats.compute_s) */
    int32_t n_items, tokens, prefill_tokens;
    int32_t kv_used, kv_total;
    int32_t kv_cached;      /* blocks in the prefix cache (sched_stats) */
    const sched_tenant_stats *tenants; /* (n_tenants) after the step */
    int32_t n_tenants;
} wk_step_info;

/* What the server observes (metrics); called on the worker thread. */
typedef struct wk_hooks {
    void *ctx;
    void (*on_token)(void *ctx, const wk_req *r, int64_t now_us, int first);
    void (*on_end)(void *ctx, const wk_req *r, const sched_end *e);
    void (*on_reject)(void *ctx, const wk_req *r, sched_reason why);
    void (*on_step)(void *ctx, const wk_step_info *s);
} wk_hooks;

typedef struct wk_opts {
    const char *path;       /* GGUF file */
    size_t kv_bytes;        /* KV cache */
    size_t swap_bytes;      /* host swap space, 0 = no swap */
    int block_size, max_seqs, budget_min, budget_max, threads;
    const char *device;     /* engine backend ("cpu", "cuda:N"); NULL = cpu */
    int kv_dtype;           /* eng_kv_dtype of the KV cache (0: the backend's) */
    int policy;             /* SCHED_POLICY_* */
    int32_t max_requests;   /* queued + running */
    const sched_tier *tiers;          /* (n_tiers) */
    int n_tiers;
    const sched_tenant_cfg *tenants;  /* (n_tenants), ids follow this order */
    int n_tenants;
    wk_hooks hooks;
    int prefix_cache;       /* 1: automatic prefix caching (a decoder's) */
    const char *const *shared_prefixes; /* (n_shared_prefixes) public prefix texts */
    int n_shared_prefixes;
} wk_opts;

typedef struct wk_worker wk_worker;

/* Load the model and start the thread. A GGUF of an encoder architecture
 * (enc.h: "bert") makes an embedding worker: it takes only embedding
 * requests, each a prefill-only request the scheduler orders like any
 * other; the encoder runs over a whole input in the step that schedules
 * its last prompt token (bidirectional attention needs every token, so
 * the earlier chunks of a long input only move its progress). An encoder
 * keeps nothing between steps: its "KV blocks" only count tokens in
 * flight (every running sequence can hold its whole context, so no
 * preemption for memory) and it never swaps. */
int wk_new(const wk_opts *o, wk_worker **out, char *err, size_t errlen);
/* Stop the thread (after wk_drain, or failing whatever is left) and free. */
void wk_free(wk_worker *w);

const tok *wk_tok(const wk_worker *w);
const model *wk_model(const wk_worker *w);      /* NULL for an encoder */
const enc_model *wk_encoder(const wk_worker *w); /* NULL for a decoder */
int32_t wk_ctx_len(const wk_worker *w);          /* positions a request may use */
const char *wk_kv_dtype(const wk_worker *w);     /* "f16", "f32"; "none": an encoder */
int wk_prefix_cache(const wk_worker *w);         /* 1: the model caches prompt blocks */
/* The most positions (prompt + max_tokens) one request of tenant can ever
 * hold in this model's KV pool: the pool, or the tenant's KV quota when
 * smaller (max_kv_blocks, max_kv_fraction), in tokens, capped at the
 * context length. A request longer than this is refused at admission. */
int32_t wk_kv_tokens(const wk_worker *w, int32_t tenant);
int32_t wk_embed_dim(const wk_worker *w);        /* 0 for a decoder */
/* The engine's memory and device time (engine.h), as of the latest step;
 * all zero for an encoder. Any thread. */
void wk_dev_stats(wk_worker *w, eng_dev_stats *out);

/* Hand a request in; the worker takes its own reference. TS_ERR_SHUTDOWN
 * once draining. */
int wk_submit(wk_worker *w, wk_req *r);
/* The client left: end the request (a no-op once it is done). */
void wk_cancel(wk_worker *w, wk_req *r);
/* Stop accepting, let live requests finish for up to grace_us, then fail
 * the rest with 503; returns once nothing is live. */
void wk_drain(wk_worker *w, int64_t grace_us);

/* Copy of the latest per-tenant stats (n_tenants entries) and pool state. */
void wk_snapshot(wk_worker *w, sched_tenant_stats *tenants, sched_stats *pool);

/* A tenant's time to first token as the engine saw it: OUT sum_s, the
 * seconds from each request's wk_submit to its first token, summed over
 * the n requests that have had one (generation only). A client's TTFT
 * less this is what lies outside the engine: HTTP, tokenization, the
 * stream's first write (bench/sim_real.sh reads it to offset simulated
 * TTFTs). 0 and 0 for a tenant out of range. Any thread. */
void wk_tenant_ttft(wk_worker *w, int32_t tenant, double *sum_s, uint64_t *n);

/* How the engine's step times spread around the scheduler's predictions:
 * OUT q, the quantiles of measured / predicted at cost_ratio_levels, over
 * the n steps of the kind run so far (all 1 when n is 0): every step (what
 * tessera sim draws simulated step times from, cost.h), decode-only ones,
 * or those holding a prefill chunk, which show where the fit is biased by
 * kind (on the CPU engine the latter ran 1.1-1.4x their prediction at the
 * median, decode steps about 1x). Any thread. */
enum { WK_STEPS_ALL, WK_STEPS_DECODE, WK_STEPS_PREFILL };
void wk_step_ratio(wk_worker *w, int kind, double q[COST_RATIO_NQ], uint64_t *n);

/* A second fit of the engine's step times (cost.h), beside the scheduler's:
 * it only describes, nothing schedules by it, so it can learn every kind of
 * step. The scheduler's keeps a tight prior (src/core/sched.c's cost_prior)
 * and does not learn the steps holding a prefill chunk; this one is fitted
 * with COST_DESCRIBE_LAMBDA and COST_DESCRIBE_PRIOR (cost.h says how much
 * closer that comes), and not fed the steps the executor failed. tessera
 * sim takes a server's step times from it. */
typedef struct wk_fit {
    double theta[4];            /* a, b, c, d: us, us/prefill token, us/decode
                                   sequence, us/attended position */
    double err_us, err_ac;      /* its residuals' scale and lag-1 autocorrelation (cost.h) */
    cost_shape shape;           /* where its steps sit by rows (cost.h) */
    double q[COST_RATIO_NQ];    /* quantiles of measured / (its predicted step time x
                                   the shape) at cost_ratio_levels (all 1 when n is 0) */
    uint64_t n;                 /* steps it has seen */
    double acf[COST_ACF_NLAGS]; /* autocorrelation of log(measured / (predicted x shape))
                                   at cost_ratio_acf_lags over them (cost_ratio_acf_get) */
} wk_fit;

/* OUT the describing fit, now. Any thread. */
void wk_step_fit(wk_worker *w, wk_fit *out);

/* How long the engine loop's current turn has run at now_us (us), 0
 * while the loop sleeps waiting for work. A turn is one scheduler step
 * with its forward pass and bookkeeping, so this stays within a step's
 * time unless the loop is wedged: the liveness probe reads it. Any thread. */
int64_t wk_turn_us(wk_worker *w, int64_t now_us);

/* The fleet's figures for the fair queue: for each tenant (n_tenants
 * entries), its service on the other replicas of this model over its
 * weight, FQ_SCALE units (sched_tenant_remote), and whether it is queued on
 * one of them with its least key there (sched_fleet_queued). Copied; the
 * loop hands them to the scheduler before it next takes arrivals. */
void wk_fleet_remote(wk_worker *w, const uint64_t *remote, const uint8_t *queued, const uint64_t *key);

int64_t wk_now_us(void);

/* The hash of a request's cache_salt text (len bytes): never 0, so 0 can
 * mean none. */
uint64_t wk_cache_salt(const char *s, size_t len);

#endif
