/*
 * worker.c - the engine loop; see worker.h.
 *
 * One turn of the loop:
 *   1. take the inbox: submissions go to the scheduler (or are rejected
 *      with its reason), cancellations end their requests;
 *   2. sched_step at the clock's now: the plan;
 *   3. copy swapped blocks out, then in, then run the forward pass over
 *      the plan's items, sample where the plan says, push text to outboxes;
 *   4. sched_step_done with the measured time; turn every end event into
 *      a final outbox state;
 *   5. when nothing runs, sleep until the inbox wakes it (or a queue
 *      deadline comes due).
 */
#include "worker.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "clock.h"
#include "err.h"
#include "tokspecial.h"

/* A tenant's first tokens: how many, and their summed wait since wk_submit. */
typedef struct wk_ttft {
    int64_t sum_us;
    uint64_t n;
} wk_ttft;

struct wk_worker {
    wk_opts o;
    sched_tier *tiers;
    sched_tenant_cfg *tenants;
    model *m;               /* a decoder, or */
    enc_model *em;          /* an encoder */
    enc_state *es;
    tok *t;
    eng *e;
    int32_t n_blocks, block_size, ctx_len, edim;
    sched *s;
    smp scratch;            /* shared sampling scratch */
    int32_t vocab;
    int32_t *end_ids;       /* (n_end) the tokens is_end_token accepts:
                             * masked before a request's min_tokens */
    int32_t n_end;
    int32_t *first_row;     /* (max_seqs) first logits row of each item */
    int32_t logit_rows;     /* rows logits can hold (grows for echo) */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;     /* inbox, flags */
    pthread_cond_t cv;      /* wakes the loop */
    pthread_cond_t idle_cv; /* wakes wk_drain */
    wk_req *in_head, *in_tail;
    wk_req *cancel_head;
    wk_req *deferred;       /* the worker's own: submitted, waiting on their lead */
    int stopping, draining;
    int64_t drain_deadline_us;
    int32_t n_live;         /* requests the worker holds (inbox or scheduler) */
    wk_req **by_slot;       /* (max_requests) live requests by scheduler slot */
    /* step buffers, sized once */
    eng_seq *seqs;          /* (max_seqs) */
    int32_t *rows;          /* (max_seqs) logits row of each item, -1 none */
    float *logits;          /* (max_seqs, vocab) */
    const int32_t **etok;   /* (max_seqs) encoder batch: each input's tokens */
    int *elen;              /* (max_seqs) and length */
    int32_t *eitem;         /* (max_seqs) plan item of each */
    float *eout;            /* (max_seqs, edim) */
    sched_item_result *results; /* (max_seqs) */
    char *host;             /* swap space: n_swap blocks of block_bytes */
    size_t block_bytes;
    int64_t last_end_us;
    /* The liveness heartbeat (wk_turn_us): when the loop's current turn
     * began, 0 while it sleeps waiting for work. Written by the loop only. */
    atomic_int_fast64_t turn_start_us;
    tks_ids *pub;           /* (o.n_shared_prefixes) the public prefixes' tokens */
    /* latest stats, for wk_snapshot */
    pthread_mutex_t snap_mu;
    sched_tenant_stats *snap;
    sched_stats snap_pool;
    wk_ttft *ttft;          /* (n_tenants) first tokens, under snap_mu (wk_tenant_ttft) */
    cost_ratio_hist ratio[2]; /* measured / predicted step time of decode-only steps
                                 and of those with a prefill chunk (the sum is every
                                 step's), under snap_mu (wk_step_ratio) */
    cost_model fit;         /* the step-time fit that only describes (wk_step_fit),
                               under snap_mu */
    cost_shape fit_shape;   /* where its steps sit by rows (cost.h), under snap_mu */
    cost_ratio_hist fit_ratio; /* measured / its predicted step time, shaped, under snap_mu */
    cost_ratio_acf fit_acf; /* ... and how it is laid out in time, under snap_mu */
    eng_dev_stats dev;      /* the engine's, as of the latest step (wk_dev_stats), under
                               snap_mu; zero for an encoder */
    uint64_t *remote;       /* (n_tenants) the fleet's figures (wk_fleet_remote), under snap_mu */
    uint8_t *fleet_queued;  /* (n_tenants) ... queued on another replica */
    uint64_t *fleet_key;    /* (n_tenants) ... and its least key there */
    int remote_new;         /* ... not yet handed to the scheduler */
};

int64_t wk_now_us(void) { return clk_mono_us(); }

/* ---- requests -------------------------------------------------------------- */

wk_req *wk_req_new(int32_t n_prompt, int32_t max_new) {
    wk_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->tokens = malloc(((size_t)n_prompt + (size_t)max_new) * sizeof(int32_t));
    if (!r->tokens) {
        free(r);
        return NULL;
    }
    r->n_prompt = n_prompt;
    r->max_new = max_new;
    r->sp.top_p = 1.0f;
    pthread_mutex_init(&r->mu, NULL);
    atomic_init(&r->refs, 1);
    return r;
}

wk_req *wk_req_new_embed(int32_t n_prompt, int32_t dim) {
    wk_req *r = wk_req_new(n_prompt, 1);
    if (r && !(r->embedding = calloc((size_t)(dim > 0 ? dim : 1), sizeof(float)))) {
        wk_req_release(r);
        return NULL;
    }
    return r;
}

void wk_req_after(wk_req *r, wk_req *lead) {
    atomic_fetch_add(&lead->refs, 1);
    r->lead = lead;
}

void wk_req_release(wk_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    wk_req_release(r->lead);
    pthread_mutex_destroy(&r->mu);
    dtk_deinit(&r->detok);
    smp_deinit(&r->sampler);
    free(r->bias);
    gr_state_free(r->gstate);
    wk_grammar_release(r->grammar);
    free(r->lps);
    free(r->plps);
    free(r->tokens);
    free(r->embedding);
    strbuf_free(&r->text);
    free(r);
}

wk_grammar *wk_grammar_new(gr_grammar *g) {
    wk_grammar *sg = calloc(1, sizeof(*sg));
    if (!sg) {
        gr_free(g);
        return NULL;
    }
    atomic_init(&sg->refs, 1);
    sg->g = g;
    return sg;
}

wk_grammar *wk_grammar_ref(wk_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void wk_grammar_release(wk_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    gr_free(g->g);
    free(g);
}

int wk_req_want_logprobs(wk_req *r, int top_k, int prompt) {
    if (top_k < 0 || top_k > SMP_MAX_TOP) return TS_ERR_INVAL;
    r->sp.top_logprobs = top_k;
    if (!r->lps && !(r->lps = calloc((size_t)(r->max_new > 0 ? r->max_new : 1), sizeof(smp_lp))))
        return TS_ERR_NOMEM;
    if (!prompt || r->plps) return 0;
    if (!(r->plps = calloc((size_t)(r->n_prompt > 0 ? r->n_prompt : 1), sizeof(smp_lp)))) return TS_ERR_NOMEM;
    for (int32_t i = 0; i < r->n_prompt; i++) r->plps[i].logprob = NAN;
    r->want_prompt_lp = 1;
    return 0;
}

int wk_req_set_bias(wk_req *r, const smp_bias *b, int n) {
    free(r->bias);
    r->bias = NULL;
    r->sp.bias = NULL;
    r->sp.n_bias = 0;
    if (n <= 0) return 0;
    if (!(r->bias = malloc((size_t)n * sizeof(*b)))) return TS_ERR_NOMEM;
    memcpy(r->bias, b, (size_t)n * sizeof(*b));
    r->sp.bias = r->bias;
    r->sp.n_bias = n;
    return 0;
}

/* When memory runs out the text is cut there (strbuf stops appending) and
 * the request still ends cleanly. */
static void outbox_append(wk_req *r, const char *p, size_t n) {
    if (n) strbuf_put(&r->text, p, n);
}

static void notify(wk_req *r) {
    if (r->notify) r->notify(r);
}

/* Final state of a request the scheduler never accepted. */
static void fail_req(wk_req *r, int end, sched_reason why, int status, const char *type, const char *msg) {
    pthread_mutex_lock(&r->mu);
    r->phase = WK_DONE;
    r->end = end;
    r->reason = why;
    r->status = status;
    r->error_type = type;
    snprintf(r->error, sizeof(r->error), "%s", msg);
    r->end_us = wk_now_us();
    notify(r);
    pthread_mutex_unlock(&r->mu);
}

/* ---- set-up ---------------------------------------------------------------- */

static int setup_sched(wk_worker *w, char *err, size_t errlen) {
    sched_config c;
    sched_config_default(&c);
    c.policy = w->o.policy;
    c.n_blocks = w->n_blocks;
    c.block_size = w->block_size;
    c.block_bytes = (double)w->block_bytes;
    c.n_swap_blocks = (int32_t)(w->o.swap_bytes / w->block_bytes);
    /* An embedding's one output takes no position. */
    c.max_ctx = w->ctx_len + (w->em ? 1 : 0);
    c.max_requests = w->o.max_requests;
    c.max_tenants = w->o.n_tenants > 0 ? w->o.n_tenants : 1;
    c.max_running = w->o.max_seqs;
    c.budget_min = w->o.budget_min;
    c.budget_max = w->o.budget_max;
    c.prefix_cache = w->o.prefix_cache && !w->em; /* an encoder keeps no K/V */
    /* A secret for the prefix cache's hashes, so that no client can aim
     * prompts at one bucket. Should the kernel refuse, the cache runs
     * unkeyed: slower look-ups at worst, tenants stay apart (scoped). */
    if (c.prefix_cache && getrandom(&c.cache_key, sizeof(c.cache_key), 0) != (ssize_t)sizeof(c.cache_key))
        c.cache_key = 0;
    int rc = sched_new(&c, &w->s);
    if (rc) {
        snprintf(err, errlen, "scheduler: invalid limits (budget %d..%d, %d seqs, %d blocks)", c.budget_min,
                 c.budget_max, c.max_running, c.n_blocks);
        return rc;
    }
    if ((rc = cost_init(&w->fit, c.cost_seed, COST_DESCRIBE_LAMBDA, COST_DESCRIBE_PRIOR, c.copy_bytes_per_us))) {
        snprintf(err, errlen, "step-time fit: invalid seed");
        return rc;
    }
    for (int i = 0; i < w->o.n_tiers; i++)
        if ((rc = sched_tier_add(w->s, &w->tiers[i])) < 0) {
            snprintf(err, errlen, "tier %s rejected", w->tiers[i].name);
            return rc;
        }
    for (int i = 0; i < w->o.n_tenants; i++)
        if ((rc = sched_tenant_add(w->s, &w->tenants[i])) < 0) {
            snprintf(err, errlen, "tenant %s rejected", w->tenants[i].name);
            return rc;
        }
    /* The pool's snapshot before any step (the thread is not started yet,
     * so no lock): /admin/models shows the geometry from the start. */
    sched_stats_get(w->s, &w->snap_pool);
    return 0;
}

static int is_end_token(const wk_worker *w, int32_t id);

/* Every end token of the vocabulary, once: min_tokens masks them all. */
static int collect_end_ids(wk_worker *w) {
    int32_t n = tok_n_vocab(w->t), k = 0;
    for (int32_t i = 0; i < n; i++) k += is_end_token(w, i);
    if (!(w->end_ids = malloc((size_t)(k ? k : 1) * sizeof(int32_t)))) return TS_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++)
        if (is_end_token(w, i)) w->end_ids[w->n_end++] = i;
    return 0;
}

static int alloc_buffers(wk_worker *w) {
    size_t seqs = (size_t)w->o.max_seqs;
    w->seqs = calloc(seqs, sizeof(eng_seq));
    w->rows = calloc(seqs, sizeof(int32_t));
    w->logits = w->em ? NULL : malloc(seqs * (size_t)w->vocab * sizeof(float));
    w->etok = calloc(seqs, sizeof(*w->etok));
    w->elen = calloc(seqs, sizeof(int));
    w->eitem = calloc(seqs, sizeof(int32_t));
    w->eout = w->em ? malloc(seqs * (size_t)w->edim * sizeof(float)) : NULL;
    w->results = calloc(seqs, sizeof(sched_item_result));
    w->by_slot = calloc((size_t)w->o.max_requests, sizeof(wk_req *));
    w->snap = calloc((size_t)(w->o.n_tenants > 0 ? w->o.n_tenants : 1), sizeof(sched_tenant_stats));
    w->ttft = calloc((size_t)(w->o.n_tenants > 0 ? w->o.n_tenants : 1), sizeof(wk_ttft));
    w->remote = calloc((size_t)(w->o.n_tenants > 0 ? w->o.n_tenants : 1), sizeof(uint64_t));
    w->fleet_queued = calloc((size_t)(w->o.n_tenants > 0 ? w->o.n_tenants : 1), sizeof(uint8_t));
    w->fleet_key = calloc((size_t)(w->o.n_tenants > 0 ? w->o.n_tenants : 1), sizeof(uint64_t));
    size_t swap = w->o.swap_bytes / w->block_bytes * w->block_bytes;
    w->host = swap ? malloc(swap) : NULL;
    if (!w->seqs || !w->rows || (!w->em && !w->logits) || (w->em && !w->eout) || !w->etok || !w->elen ||
        !w->eitem || !w->results || !w->by_slot || !w->snap || !w->ttft || !w->remote || !w->fleet_queued ||
        !w->fleet_key || (swap && !w->host))
        return TS_ERR_NOMEM;
    if (!w->em && ((w->first_row = calloc(seqs, sizeof(int32_t))) == NULL || collect_end_ids(w)))
        return TS_ERR_NOMEM;
    w->logit_rows = (int32_t)seqs;
    smp_params p = {.top_p = 1.0f};
    return smp_init(&w->scratch, w->vocab, &p);
}

static void *loop(void *arg);

static int copy_config(wk_worker *w, const wk_opts *o) {
    w->o = *o;
    w->tiers = malloc((size_t)(o->n_tiers > 0 ? o->n_tiers : 1) * sizeof(sched_tier));
    w->tenants = malloc((size_t)(o->n_tenants > 0 ? o->n_tenants : 1) * sizeof(sched_tenant_cfg));
    if (!w->tiers || !w->tenants) return TS_ERR_NOMEM;
    memcpy(w->tiers, o->tiers, (size_t)o->n_tiers * sizeof(sched_tier));
    memcpy(w->tenants, o->tenants, (size_t)o->n_tenants * sizeof(sched_tenant_cfg));
    if (w->o.max_requests <= 0) w->o.max_requests = 4096;
    if (w->o.max_seqs <= 0) w->o.max_seqs = 64;
    return 0;
}

/* The vocabulary of the model's file, and a check that every id it can
 * produce (and the server accepts as a prompt token) has an embedding row;
 * otherwise the forward refuses the whole batch and one request fails
 * every request in its step. */
static int load_tok(wk_worker *w, const gguf_ctx *g, int rows, char *err, size_t errlen) {
    int rc = tok_new_from_gguf(g, &w->t, err, errlen);
    if (rc) return rc;
    if (tok_n_vocab(w->t) > rows) {
        snprintf(err, errlen, "%s: the vocabulary has %d tokens but token_embd.weight only %d rows", w->o.path,
                 tok_n_vocab(w->t), rows);
        return TS_ERR_MODEL_SHAPE;
    }
    w->vocab = rows;
    return 0;
}

/* Takes g (also on error). */
static int load_decoder(wk_worker *w, gguf_ctx *g, char *err, size_t errlen) {
    char inner[320];
    int rc = model_from_gguf(g, &w->m, inner, sizeof(inner));
    if (rc) {
        err_set(err, errlen, rc, "%s: %s", w->o.path, inner);
        return rc;
    }
    if ((rc = load_tok(w, w->m->gguf, w->m->cfg.vocab, err, errlen))) return rc;
    /* Minimum shares may take a step past its budget (sched.c), so the engine
     * takes up to twice the budget plus one decode per sequence. */
    eng_opts eo = {.backend = w->o.device, .kv_pool_bytes = w->o.kv_bytes, .kv_dtype = (eng_kv_dtype)w->o.kv_dtype,
                   .block_size = w->o.block_size,
                   .max_batch_tokens = 2 * w->o.budget_max + w->o.max_seqs,
                   .max_seqs = w->o.max_seqs, .n_threads = w->o.threads};
    if ((rc = eng_new(w->m, &eo, &w->e, err, errlen))) return rc;
    eng_dev_stats_get(w->e, &w->dev);
    w->block_bytes = eng_kv_block_bytes(w->e);
    w->n_blocks = eng_kv_n_blocks(w->e);
    w->block_size = eng_block_size(w->e);
    w->ctx_len = w->m->cfg.ctx_len;
    return 0;
}

/* Takes g (also on error). The state takes a step's whole budget and at
 * least one input of the full context, so any admitted input fits. */
static int load_encoder(wk_worker *w, gguf_ctx *g, char *err, size_t errlen) {
    char inner[320];
    /* The encoder has a CPU implementation only: a device it would not use
     * is refused rather than silently ignored. */
    if (w->o.device && strcmp(w->o.device, "cpu") != 0) {
        gguf_close(g);
        return err_set(err, errlen, TS_ERR_CONFIG, "%s: an embedding model runs on the CPU only, not on device '%s'",
                       w->o.path, w->o.device);
    }
    /* Nor has it a KV cache whose type a setting could pick. */
    if (w->o.kv_dtype != ENG_KV_AUTO) {
        gguf_close(g);
        return err_set(err, errlen, TS_ERR_CONFIG, "%s: an embedding model keeps no KV cache: drop kv_cache_dtype",
                       w->o.path);
    }
    int rc = enc_from_gguf(g, &w->em, inner, sizeof(inner));
    if (rc) {
        err_set(err, errlen, rc, "%s: %s", w->o.path, inner);
        return rc;
    }
    const enc_config *c = &w->em->cfg;
    if ((rc = load_tok(w, w->em->gguf, c->vocab, err, errlen))) return rc;
    int max_tokens = 2 * w->o.budget_max + w->o.max_seqs;
    if (max_tokens < c->ctx_len) max_tokens = c->ctx_len;
    if ((rc = enc_state_new(w->em, max_tokens, w->o.threads, &w->es, err, errlen))) return rc;
    w->edim = c->dim;
    w->ctx_len = c->ctx_len;
    w->block_size = w->o.block_size > 0 ? w->o.block_size : 16;
    w->n_blocks = w->o.max_seqs * ((c->ctx_len + 1 + w->block_size - 1) / w->block_size);
    w->block_bytes = (size_t)w->block_size * (size_t)c->dim * sizeof(float);
    w->o.swap_bytes = 0;
    return 0;
}

/* ---- prefix cache ------------------------------------------------------------ */

/* The declared public prefixes' tokens, as a completions prompt's are
 * tokenized (BOS included when the vocabulary wants it). */
static int load_public(wk_worker *w, char *err, size_t errlen) {
    if (!w->o.n_shared_prefixes || w->em || !w->o.prefix_cache) return 0;
    if (!(w->pub = calloc((size_t)w->o.n_shared_prefixes, sizeof(tks_ids)))) return TS_ERR_NOMEM;
    for (int i = 0; i < w->o.n_shared_prefixes; i++) {
        const char *text = w->o.shared_prefixes[i];
        int rc = tks_encode_text(w->t, text, strlen(text), tok_add_bos(w->t), &w->pub[i]);
        if (rc) {
            snprintf(err, errlen, "%s: shared_prefixes[%d] cannot be tokenized", w->o.path, i);
            return rc;
        }
    }
    return 0;
}

/* Leading tokens of r's prompt that a declared public prefix covers: the
 * longest prefix whose tokens, all but its last, begin the prompt (the
 * last may merge with the text after it). A request with a cache_salt
 * asked for its own cache: none. */
static int32_t public_tokens(const wk_worker *w, const wk_req *r) {
    int32_t best = 0;
    for (int i = 0; w->pub && !r->cache_salt && i < w->o.n_shared_prefixes; i++) {
        int32_t n = w->pub[i].n - 1;
        if (n > best && n <= r->n_prompt && !memcmp(r->tokens, w->pub[i].p, (size_t)n * sizeof(int32_t)))
            best = n;
    }
    return best;
}

uint64_t wk_cache_salt(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a finaliser */
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

/* Offer r to the scheduler with its prompt's tokens for the prefix cache.
 * Not for echo with prompt logprobs: every prompt row must be computed. */
static int submit_prompt(wk_worker *w, wk_req *r, int64_t now, sched_reason *why) {
    sched_prompt p = {r->tokens, r->n_prompt, r->cache_salt, 0};
    if (w->em || r->want_prompt_lp) p.tokens = NULL;
    else p.n_public = public_tokens(w, r);
    return sched_submit_prompt(w->s, now, r->tenant, &p, r->max_new, &r->sid, why);
}

int wk_new(const wk_opts *o, wk_worker **out, char *err, size_t errlen) {
    *out = NULL;
    wk_worker *w = calloc(1, sizeof(*w));
    if (!w) return TS_ERR_NOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->snap_mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    pthread_cond_init(&w->idle_cv, NULL);
    int rc = copy_config(w, o);
    if (rc) goto err;
    gguf_ctx *g = NULL;
    if ((rc = gguf_open(o->path, &g, err, errlen))) goto err;
    rc = enc_is_encoder(g) ? load_encoder(w, g, err, errlen) : load_decoder(w, g, err, errlen);
    if (rc) goto err;
    if ((rc = setup_sched(w, err, errlen)) || (rc = load_public(w, err, errlen))) goto err;
    if ((rc = alloc_buffers(w))) {
        snprintf(err, errlen, "out of memory for the worker's buffers");
        goto err;
    }
    w->last_end_us = wk_now_us();
    if (pthread_create(&w->thread, NULL, loop, w)) {
        snprintf(err, errlen, "cannot start the engine thread");
        rc = TS_ERR_NOMEM;
        goto err;
    }
    w->started = 1;
    *out = w;
    return 0;
err:
    wk_free(w);
    return rc;
}

void wk_free(wk_worker *w) {
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stopping = 1;
        w->draining = 1;
        w->drain_deadline_us = 0;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    sched_free(w->s);
    eng_free(w->e);
    enc_state_free(w->es);
    tok_free(w->t);
    model_free(w->m);
    enc_free(w->em);
    smp_deinit(&w->scratch);
    free(w->seqs); free(w->rows); free(w->logits); free(w->end_ids); free(w->first_row); free(w->results); free(w->by_slot);
    free(w->etok); free(w->elen); free(w->eitem); free(w->eout);
    free(w->snap); free(w->ttft); free(w->remote); free(w->fleet_queued); free(w->fleet_key); free(w->host); free(w->tiers); free(w->tenants);
    for (int i = 0; w->pub && i < w->o.n_shared_prefixes; i++) free(w->pub[i].p);
    free(w->pub);
    pthread_cond_destroy(&w->cv);
    pthread_cond_destroy(&w->idle_cv);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->snap_mu);
    free(w);
}

const tok *wk_tok(const wk_worker *w) { return w->t; }
const model *wk_model(const wk_worker *w) { return w->m; }
const enc_model *wk_encoder(const wk_worker *w) { return w->em; }
int32_t wk_ctx_len(const wk_worker *w) { return w->ctx_len; }
const char *wk_kv_dtype(const wk_worker *w) { return w->e ? eng_kv_dtype_name(eng_kv_dtype_of(w->e)) : "none"; }
int wk_prefix_cache(const wk_worker *w) { return w->o.prefix_cache && !w->em; }

/* The quota follows sched.c's (tenant_add): the smaller of max_kv_blocks
 * and floor(max_kv_fraction x pool) where set. */
int32_t wk_kv_tokens(const wk_worker *w, int32_t tenant) {
    int64_t blocks = w->n_blocks;
    if (tenant >= 0 && tenant < w->o.n_tenants) {
        const sched_tenant_cfg *t = &w->tenants[tenant];
        if (t->max_kv_blocks > 0 && t->max_kv_blocks < blocks) blocks = t->max_kv_blocks;
        if (t->max_kv_frac > 0) {
            int64_t q = (int64_t)floor(t->max_kv_frac * w->n_blocks);
            if (q < blocks) blocks = q;
        }
    }
    int64_t tokens = blocks * w->block_size;
    return tokens < w->ctx_len ? (int32_t)tokens : w->ctx_len;
}
int32_t wk_embed_dim(const wk_worker *w) { return w->em ? w->edim : 0; }

/* ---- the doors ------------------------------------------------------------- */

int wk_submit(wk_worker *w, wk_req *r) {
    pthread_mutex_lock(&w->mu);
    if (w->draining) {
        pthread_mutex_unlock(&w->mu);
        return TS_ERR_SHUTDOWN;
    }
    atomic_fetch_add(&r->refs, 1);
    r->arrival_us = wk_now_us();
    r->next_in = NULL;
    if (w->in_tail) w->in_tail->next_in = r; else w->in_head = r;
    w->in_tail = r;
    w->n_live++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void wk_cancel(wk_worker *w, wk_req *r) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&r->cancel, &expected, 1)) return;
    pthread_mutex_lock(&r->mu);
    int done = r->phase == WK_DONE;
    pthread_mutex_unlock(&r->mu);
    if (done) return;
    pthread_mutex_lock(&w->mu);
    atomic_fetch_add(&r->refs, 1); /* held by the cancel list */
    r->next_cancel = w->cancel_head;
    w->cancel_head = r;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void wk_drain(wk_worker *w, int64_t grace_us) {
    pthread_mutex_lock(&w->mu);
    w->draining = 1;
    w->drain_deadline_us = wk_now_us() + grace_us;
    pthread_cond_signal(&w->cv);
    while (w->n_live > 0) pthread_cond_wait(&w->idle_cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

int64_t wk_turn_us(wk_worker *w, int64_t now_us) {
    int64_t t0 = atomic_load(&w->turn_start_us);
    return t0 && now_us > t0 ? now_us - t0 : 0;
}

void wk_snapshot(wk_worker *w, sched_tenant_stats *tenants, sched_stats *pool) {
    pthread_mutex_lock(&w->snap_mu);
    if (tenants) memcpy(tenants, w->snap, (size_t)w->o.n_tenants * sizeof(sched_tenant_stats));
    if (pool) *pool = w->snap_pool;
    pthread_mutex_unlock(&w->snap_mu);
}

void wk_step_fit(wk_worker *w, wk_fit *out) {
    pthread_mutex_lock(&w->snap_mu);
    cost_theta(&w->fit, out->theta);
    out->err_us = cost_err_us(&w->fit);
    out->err_ac = cost_err_autocorr(&w->fit);
    cost_ratio_hist h = w->fit_ratio;
    out->shape = w->fit_shape;
    cost_ratio_acf_get(&w->fit_acf, out->acf);
    pthread_mutex_unlock(&w->snap_mu);
    for (int i = 0; i < COST_RATIO_NQ; i++) out->q[i] = cost_ratio_quantile(&h, cost_ratio_levels[i]);
    out->n = h.n;
}

void wk_dev_stats(wk_worker *w, eng_dev_stats *out) {
    pthread_mutex_lock(&w->snap_mu);
    *out = w->dev;
    pthread_mutex_unlock(&w->snap_mu);
}

void wk_step_ratio(wk_worker *w, int kind, double q[COST_RATIO_NQ], uint64_t *n) {
    cost_ratio_hist h;
    pthread_mutex_lock(&w->snap_mu);
    if (kind == WK_STEPS_DECODE || kind == WK_STEPS_PREFILL) {
        h = w->ratio[kind == WK_STEPS_PREFILL];
    } else {
        h = w->ratio[0];
        h.n += w->ratio[1].n;
        for (int i = 0; i < COST_RATIO_BINS; i++) h.bins[i] += w->ratio[1].bins[i];
    }
    pthread_mutex_unlock(&w->snap_mu);
    for (int i = 0; i < COST_RATIO_NQ; i++) q[i] = cost_ratio_quantile(&h, cost_ratio_levels[i]);
    *n = h.n;
}

void wk_tenant_ttft(wk_worker *w, int32_t tenant, double *sum_s, uint64_t *n) {
    *sum_s = 0;
    *n = 0;
    if (tenant < 0 || tenant >= w->o.n_tenants) return;
    pthread_mutex_lock(&w->snap_mu);
    *sum_s = (double)w->ttft[tenant].sum_us / 1e6;
    *n = w->ttft[tenant].n;
    pthread_mutex_unlock(&w->snap_mu);
}

/* ---- the loop -------------------------------------------------------------- */

/* The worker let go of a request it held. */
static void drop_live(wk_worker *w, wk_req *r) {
    pthread_mutex_lock(&w->mu);
    if (--w->n_live == 0) pthread_cond_broadcast(&w->idle_cv);
    pthread_mutex_unlock(&w->mu);
    wk_req_release(r);
}

/* Set up a request's sampler and detokenizer, then offer it to the
 * scheduler. */
static void admit(wk_worker *w, wk_req *r, int64_t now) {
    if (atomic_load(&r->cancel)) {
        fail_req(r, WK_END_CANCELLED, SCHED_R_NONE, 499, "cancelled", "the client closed the connection");
        drop_live(w, r);
        return;
    }
    if (!r->embedding != !w->em) {
        fail_req(r, WK_END_INVALID, SCHED_R_NONE, 400, "invalid_request_error",
                 w->em ? "this model makes embeddings; it does not generate text"
                       : "this model generates text; it does not make embeddings");
        drop_live(w, r);
        return;
    }
    smp_params sp = r->sp;
    sp.stop_ids = r->stop_ids;  /* stop_token_ids; the model's end tokens are is_end_token's */
    const char *stops[DTK_MAX_STOPS];
    for (int i = 0; i < r->n_stops; i++) stops[i] = r->stops[i];
    if (!w->em && (smp_init_params(&r->sampler, w->vocab, &sp) || dtk_init(&r->detok, w->t, stops, r->n_stops))) {
        fail_req(r, WK_END_INVALID, SCHED_R_NONE, 400, "invalid_request_error",
                 "invalid sampling parameters or stop strings");
        drop_live(w, r);
        return;
    }
    /* Stop strings count from the min_tokens-th token on, as vLLM's. */
    if (!w->em && sp.min_tokens > 1) r->detok.quiet = sp.min_tokens - 1;
    sched_reason why;
    if (submit_prompt(w, r, now, &why)) {
        if (w->o.hooks.on_reject) w->o.hooks.on_reject(w->o.hooks.ctx, r, why);
        int status = sched_reason_http(why);
        fail_req(r, WK_END_REJECTED, why, status,
                 status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
                 sched_reason_str(why));
        drop_live(w, r);
        return;
    }
    w->by_slot[(uint32_t)r->sid] = r;
    pthread_mutex_lock(&r->mu);
    r->phase = WK_ADMITTED;
    notify(r);
    pthread_mutex_unlock(&r->mu);
}

/* Has r's lead had its prompt computed, or ended? (wk_req_after) */
static int lead_ready(const wk_req *r) {
    if (!r->lead) return 1;
    pthread_mutex_lock(&r->lead->mu);
    int ready = r->lead->phase == WK_DONE || r->lead->n_generated > 0;
    pthread_mutex_unlock(&r->lead->mu);
    return ready;
}

/* Admit the waiting requests whose lead is ready, in their order; the
 * number admitted. A cancelled one is refused by admit as usual. */
static int admit_ready(wk_worker *w, int64_t now) {
    wk_req **at = &w->deferred;
    int n = 0;
    while (*at) {
        wk_req *r = *at;
        if (!lead_ready(r)) {
            at = &r->next_in;
            continue;
        }
        *at = r->next_in;
        admit(w, r, now);
        n++;
    }
    return n;
}

/* Hold r until its lead is ready, behind the others waiting. */
static void defer(wk_worker *w, wk_req *r) {
    wk_req **at = &w->deferred;
    while (*at) at = &(*at)->next_in;
    r->next_in = NULL;
    *at = r;
}

/* Take the inbox and the cancellations under the lock, act on them without. */
static void take_inbox(wk_worker *w, int64_t now) {
    pthread_mutex_lock(&w->mu);
    wk_req *in = w->in_head, *cancels = w->cancel_head;
    w->in_head = w->in_tail = NULL;
    w->cancel_head = NULL;
    pthread_mutex_unlock(&w->mu);
    for (wk_req *r = in, *next; r; r = next) {
        next = r->next_in;
        if (lead_ready(r)) admit(w, r, now);
        else defer(w, r);
    }
    for (wk_req *r = cancels, *next; r; r = next) {
        next = r->next_cancel;
        pthread_mutex_lock(&r->mu);
        int live = r->phase == WK_ADMITTED;
        pthread_mutex_unlock(&r->mu);
        if (live) sched_cancel(w->s, now, r->sid); /* its end event follows */
        wk_req_release(r);                          /* the cancel list's ref */
    }
}

/* Past the drain deadline: end everything still live. */
static void fail_all_live(wk_worker *w, int64_t now) {
    for (int32_t i = 0; i < w->o.max_requests; i++) {
        wk_req *r = w->by_slot[i];
        if (!r) continue;
        atomic_store(&r->shutdown, 1);
        sched_cancel(w->s, now, r->sid);
    }
}

/* End-of-generation tokens: EOS and the other control tokens a chat model
 * ends a turn with (<|eot_id|>, <|im_end|>), but not BOS. */
static int is_end_token(const wk_worker *w, int32_t id) {
    return id == tok_eos(w->t) || (tok_is_control(w->t, id) && id != tok_bos(w->t));
}

/* Structured output: keep only the tokens the grammar allows next (rows
 * past the tokenizer's vocabulary, which no grammar allows, too). 0 when
 * nothing may follow: the output is complete, or a min_tokens mask left
 * the grammar no way on; either way the request ends there. */
/* The grammar's state, made at the request's first sample so that a
 * queued request holds none; its end tokens besides EOS are the model's
 * end-of-turn tokens and the request's stop_token_ids. A state takes
 * GR_MAX_END of them: the model's first (in vocabulary order, which puts
 * <|eot_id|>, <|im_end|> among the first), then the request's; an id past
 * that is still an end token when sampled, but under a grammar it is only
 * allowed where the grammar's own bytes allow it. 0, or -1 when the state
 * could not be made (out of memory). */
static int guide_start(wk_worker *w, wk_req *r) {
    if (r->gstate) return 0;
    int32_t ids[GR_MAX_END];
    int n = 0;
    int32_t eos = tok_eos(w->t);
    for (int32_t i = 0; i < w->n_end && n < GR_MAX_END; i++)
        if (w->end_ids[i] != eos) ids[n++] = w->end_ids[i];
    for (int i = 0; i < r->sp.n_stop && n < GR_MAX_END; i++) {
        int dup = r->stop_ids[i] == eos;
        for (int k = 0; k < n && !dup; k++) dup = ids[k] == r->stop_ids[i];
        if (!dup) ids[n++] = r->stop_ids[i];
    }
    if (gr_state_new(r->grammar->g, &r->gstate)) return -1;
    if (gr_state_set_end_ids(r->gstate, ids, n)) {
        gr_state_free(r->gstate);
        r->gstate = NULL;
        return -1;
    }
    return 0;
}

static int guide_mask(wk_worker *w, wk_req *r, float *row) {
    int n = gr_state_mask(r->gstate, row);
    for (int32_t i = tok_n_vocab(w->t); i < w->vocab; i++) row[i] = -INFINITY;
    return n > 0;
}

/* Move the grammar past the sampled token: 1 when the output is complete
 * with it (the request ends after this token), -1 when the token is
 * outside the grammar (the mask makes that impossible; kept as the
 * guard: the request ends before it), else 0. */
static int guide_advance(wk_req *r, int32_t id) {
    if (gr_state_accept(r->gstate, id) < 0) return -1;
    return gr_state_done(r->gstate);
}

/* Sample for one item, extend the request's tokens, release text. The
 * sampler sees the history for its penalties and min_tokens; an end token
 * ends the request unless it asked ignore_eos, a stop_token_id always
 * does, and neither is part of the text. */
static void sample_item(wk_worker *w, wk_req *r, float *row, sched_item_result *res, int64_t now) {
    smp_hist h = {r->tokens, r->n_prompt, r->tokens + r->n_prompt, r->n_generated, w->end_ids, w->n_end};
    smp_lp lp;
    if (r->grammar && guide_start(w, r)) {
        r->gstate_oom = 1;                       /* finalize fails it */
        res->finished = 1;
        return;
    }
    int guided_end = r->gstate && !guide_mask(w, r, row);
    int32_t id = guided_end ? SMP_NO_TOKEN : smp_sample_full(&r->sampler, &w->scratch, row, &h, r->lps ? &lp : NULL);
    if (id < 0) {
        /* Nothing can follow: the grammar is complete and takes no end
         * token here, or the masks (min_tokens, a -inf row) left no finite
         * logit. The sequence ends before a token, and none is recorded
         * (a fallback id would be a token the row forbade). */
        r->stopped = 1;
        res->finished = 1;
        return;
    }
    int32_t pos = r->n_prompt + r->n_generated;
    if (pos < r->n_prompt + r->max_new) r->tokens[pos] = id;
    const char *txt = NULL;
    size_t n = 0;
    int end = is_end_token(w, id);
    int stop = (end && !r->ignore_eos) || smp_is_stop(&r->sampler, id);
    int gdone = r->gstate && !stop ? guide_advance(r, id) : 0;
    if (gdone < 0) stop = 1;                     /* outside the grammar: not part of the text */
    if (!stop && !end && dtk_push(&r->detok, id, &txt, &n) == 1) stop = 1;
    if (gdone > 0) stop = 1;                     /* complete: this token was its last */
    res->finished = (uint8_t)stop;
    pthread_mutex_lock(&r->mu);
    int first = r->n_generated == 0;
    if (r->lps && r->n_generated < r->max_new) {
        r->lps[r->n_generated] = lp;
        r->cum_logprob += lp.logprob;
    }
    r->n_generated++;
    if (first) r->first_token_us = now;
    r->stopped = stop;
    outbox_append(r, txt, n);
    notify(r);
    pthread_mutex_unlock(&r->mu);
    if (first && r->tenant >= 0 && r->tenant < w->o.n_tenants) {
        pthread_mutex_lock(&w->snap_mu);
        w->ttft[r->tenant].sum_us += now - r->arrival_us;
        w->ttft[r->tenant].n++;
        pthread_mutex_unlock(&w->snap_mu);
    }
    if (w->o.hooks.on_token) w->o.hooks.on_token(w->o.hooks.ctx, r, now, first);
    r->last_token_us = now;
}

/* Copy the plan's swaps: out first, then in (the scheduler relies on it). */
static double do_swaps(wk_worker *w, const sched_plan *p) {
    if (!p->n_swap_out && !p->n_swap_in) return 0;
    int64_t t0 = wk_now_us();
    for (int32_t i = 0; i < p->n_swap_out; i++)
        eng_kv_copy_out(w->e, &p->swap_out[i].dev_block, 1, w->host + (size_t)p->swap_out[i].host_slot * w->block_bytes);
    for (int32_t i = 0; i < p->n_swap_in; i++)
        eng_kv_copy_in(w->e, &p->swap_in[i].dev_block, 1, w->host + (size_t)p->swap_in[i].host_slot * w->block_bytes);
    return (double)(wk_now_us() - t0);
}

/* The finished vector of one input: its only output. */
static void embed_done(wk_worker *w, wk_req *r, const float *v, sched_item_result *res, int64_t now) {
    pthread_mutex_lock(&r->mu);
    memcpy(r->embedding, v, (size_t)w->edim * sizeof(float));
    r->n_generated = 1;
    r->first_token_us = now;
    r->stopped = 1;
    pthread_mutex_unlock(&r->mu);
    res->finished = 1;
}

/* Run the encoder over the n inputs gathered so far. */
static int flush_encoder(wk_worker *w, const sched_plan *p, int n) {
    if (!n) return 0;
    char err[160];
    int rc = enc_embed(w->es, w->etok, w->elen, n, w->eout, err, sizeof(err));
    if (rc) return rc;
    int64_t t = wk_now_us();
    for (int i = 0; i < n; i++)
        embed_done(w, w->by_slot[(uint32_t)p->items[w->eitem[i]].id], w->eout + (size_t)i * (size_t)w->edim,
                   &w->results[w->eitem[i]], t);
    return 0;
}

/* An encoder's step: each input whose last prompt token this plan
 * schedules is embedded whole; the earlier chunks of a long input have
 * nothing to compute (see wk_new). Inputs go in batches that fit the
 * state. */
static int run_encoder(wk_worker *w, const sched_plan *p) {
    int n = 0, tokens = 0, cap = enc_state_max_tokens(w->es);
    for (int32_t i = 0; i < p->n_items; i++) {
        w->results[i].finished = 0;
        if (!p->items[i].sample) continue;
        wk_req *r = w->by_slot[(uint32_t)p->items[i].id];
        if (tokens + r->n_prompt > cap) {
            int rc = flush_encoder(w, p, n);
            if (rc) return rc;
            n = tokens = 0;
        }
        w->etok[n] = r->tokens;
        w->elen[n] = r->n_prompt;
        w->eitem[n++] = i;
        tokens += r->n_prompt;
    }
    return flush_encoder(w, p, n);
}

/* A request that wants its prompt's logprobs (echo) gets every row of
 * the chunks that cover its prompt. */
static int wants_all_rows(const wk_req *r, const sched_item *it) {
    return r->want_prompt_lp && it->pos < r->n_prompt && it->n_tokens > 0;
}

/* The most the step's logits may take when echo asks for whole chunks:
 * a chunk of 512 tokens of a 150k vocabulary is 300 MB. Past it, the
 * prompt rows are not computed this step (those prompt logprobs stay
 * null) rather than failing the whole step. */
#define WK_ALL_ROWS_MAX_BYTES ((size_t)256 << 20)

/* Room for rows logits rows: the step buffer holds one per sequence and
 * grows (only) when echo asks for whole chunks. */
static int reserve_rows(wk_worker *w, int32_t rows) {
    if (rows <= w->logit_rows) return 0;
    float *p = realloc(w->logits, (size_t)rows * (size_t)w->vocab * sizeof(float));
    if (!p) return TS_ERR_NOMEM;
    w->logits = p;
    w->logit_rows = rows;
    return 0;
}

/* The prompt tokens' logprobs from an item's rows: row k predicts the
 * token at it->pos + k + 1. Recomputed chunks (after a preemption) write
 * the same values again. */
static void record_prompt_lps(wk_worker *w, wk_req *r, const sched_item *it, const float *rows) {
    for (int32_t k = 0; k < it->n_tokens; k++) {
        int32_t at = it->pos + k + 1;
        if (at >= r->n_prompt) break;
        smp_lp lp;
        if (smp_logprobs(rows + (size_t)k * w->vocab, w->vocab, r->tokens[at], r->sp.top_logprobs, &lp)) continue;
        pthread_mutex_lock(&r->mu);
        r->plps[at] = lp;
        pthread_mutex_unlock(&r->mu);
    }
}

/* Whether item i may have all its rows: what the items from i on need at
 * least (one row each that samples, all of item i's), after the rows
 * taken so far, within WK_ALL_ROWS_MAX_BYTES. */
static int all_rows_fit(const wk_worker *w, const sched_plan *p, int32_t i, int32_t rows) {
    size_t need = (size_t)rows + (size_t)p->items[i].n_tokens;
    for (int32_t k = i + 1; k < p->n_items; k++) need += p->items[k].sample ? 1 : 0;
    return need * (size_t)w->vocab * sizeof(float) <= WK_ALL_ROWS_MAX_BYTES || need <= (size_t)w->logit_rows;
}

static int run_plan(wk_worker *w, const sched_plan *p, double *copy_us) {
    int32_t rows = 0;
    *copy_us = 0;
    if (w->em) return run_encoder(w, p);
    *copy_us = do_swaps(w, p);
    for (int32_t i = 0; i < p->n_items; i++) {
        const sched_item *it = &p->items[i];
        wk_req *r = w->by_slot[(uint32_t)it->id];
        int all = wants_all_rows(r, it) && all_rows_fit(w, p, i, rows);
        w->seqs[i] = (eng_seq){r->tokens + it->pos, it->n_tokens, it->pos, it->blocks, it->n_blocks,
                               all ? ENG_LOGITS_ALL : it->sample ? ENG_LOGITS_LAST : ENG_LOGITS_NONE};
        w->first_row[i] = rows;
        rows += all ? it->n_tokens : it->sample ? 1 : 0;
        w->rows[i] = it->sample ? rows - 1 : -1;
        w->results[i].finished = 0;
    }
    int rc = reserve_rows(w, rows);
    if (rc) return rc;
    eng_batch b = {w->seqs, p->n_items};
    rc = eng_forward(w->e, &b, w->logits);
    if (rc) return rc;
    for (int32_t i = 0; i < p->n_items; i++)
        if (w->seqs[i].logits == ENG_LOGITS_ALL)
            record_prompt_lps(w, w->by_slot[(uint32_t)p->items[i].id], &p->items[i],
                              w->logits + (size_t)w->first_row[i] * w->vocab);
    int64_t t = wk_now_us();
    for (int32_t i = 0; i < p->n_items; i++)
        if (w->rows[i] >= 0)
            sample_item(w, w->by_slot[(uint32_t)p->items[i].id], w->logits + (size_t)w->rows[i] * w->vocab,
                        &w->results[i], t);
    return 0;
}

/* Turn a scheduler end event into the request's final state. */
static void finalize(wk_worker *w, const sched_end *e) {
    uint32_t slot = (uint32_t)e->id;
    wk_req *r = w->by_slot[slot];
    w->by_slot[slot] = NULL;
    if (!r) return;
    const char *txt;
    size_t n;
    pthread_mutex_lock(&r->mu);
    r->phase = WK_DONE;
    r->end_us = wk_now_us();
    r->engine_us = e->engine_us;
    r->preemptions = e->preemptions;
    r->cached_tokens = e->cached_tokens;
    if (e->state == SCHED_FINISHED && r->gstate_oom) {
        r->end = WK_END_FAILED;
        r->status = 503;
        r->error_type = "server_error";
        snprintf(r->error, sizeof(r->error), "out of memory for the grammar's state");
    } else if (e->state == SCHED_FINISHED) {
        if (!r->embedding) {
            dtk_finish(&r->detok, &txt, &n);
            outbox_append(r, txt, n);
        }
        r->finish = r->stopped ? "stop" : "length";
        r->end = WK_END_FINISHED;
    } else if (atomic_load(&r->shutdown)) {
        r->end = WK_END_SHUTDOWN;
        r->status = 503;
        r->error_type = "server_error";
        snprintf(r->error, sizeof(r->error), "the server is shutting down");
    } else if (e->state == SCHED_CANCELLED) {
        r->end = WK_END_CANCELLED;
        r->status = 499;
        r->error_type = "cancelled";
        snprintf(r->error, sizeof(r->error), "the client closed the connection");
    } else {
        r->end = WK_END_FAILED;
        r->reason = e->reason;
        r->status = sched_reason_http(e->reason);
        r->error_type = r->status >= 500 ? "server_error" : "invalid_request_error";
        snprintf(r->error, sizeof(r->error), "%s", sched_reason_str(e->reason));
    }
    notify(r);
    pthread_mutex_unlock(&r->mu);
    if (w->o.hooks.on_end) w->o.hooks.on_end(w->o.hooks.ctx, r, e);
    drop_live(w, r);
}

void wk_fleet_remote(wk_worker *w, const uint64_t *remote, const uint8_t *queued, const uint64_t *key) {
    pthread_mutex_lock(&w->snap_mu);
    memcpy(w->remote, remote, (size_t)w->o.n_tenants * sizeof(uint64_t));
    memcpy(w->fleet_queued, queued, (size_t)w->o.n_tenants * sizeof(uint8_t));
    memcpy(w->fleet_key, key, (size_t)w->o.n_tenants * sizeof(uint64_t));
    w->remote_new = 1;
    pthread_mutex_unlock(&w->snap_mu);
}

/* Hand the fleet's latest figures to the scheduler, on the loop's thread
 * (the only one that touches it). */
static void take_remote(wk_worker *w) {
    pthread_mutex_lock(&w->snap_mu);
    if (w->remote_new) {
        for (int32_t i = 0; i < w->o.n_tenants; i++) sched_tenant_remote(w->s, i, w->remote[i]);
        sched_fleet_queued(w->s, w->fleet_queued, w->fleet_key);
        w->remote_new = 0;
    }
    pthread_mutex_unlock(&w->snap_mu);
}

static void drain_ends(wk_worker *w) {
    sched_end e;
    while (sched_poll_end(w->s, &e)) finalize(w, &e);
}

/* The step just run (p NULL: an idle turn; failed: the executor failed it,
 * so its time says nothing of the batch and no fit learns from it, as the
 * scheduler's does not). */
static void publish(wk_worker *w, const sched_plan *p, int failed, int64_t now, double step_us, double idle_us) {
    int32_t prefill = 0;
    for (int32_t i = 0; p && i < p->n_items; i++)
        if (p->items[i].is_prefill) prefill += p->items[i].n_tokens;
    eng_dev_stats dev = w->dev;
    if (w->e) eng_dev_stats_get(w->e, &dev);
    const double compute_us = (dev.compute_s - w->dev.compute_s) * 1e6;
    pthread_mutex_lock(&w->snap_mu);
    w->dev = dev;
    if (p) cost_ratio_add(&w->ratio[prefill > 0], step_us, p->predicted_us);
    if (p && !failed && p->n_items && step_us > 0) {
        /* The spread is counted around the shaped prediction, as a
         * simulator draws it: the fit's, times the shape of its rows. */
        const cost_features *x = &p->feat;
        double pred = cost_predict_us(&w->fit, x);
        double shaped = pred * cost_shape_factor(&w->fit_shape, x->prefill_tokens, x->decode_seqs);
        cost_ratio_add(&w->fit_ratio, step_us, shaped);
        cost_ratio_acf_add(&w->fit_acf, step_us, shaped);
        cost_shape_add(&w->fit_shape, x->prefill_tokens, x->decode_seqs, step_us, pred);
        cost_observe(&w->fit, x, step_us);
    }
    for (int32_t i = 0; i < w->o.n_tenants; i++) sched_tenant_stats_get(w->s, i, &w->snap[i]);
    sched_stats_get(w->s, &w->snap_pool);
    pthread_mutex_unlock(&w->snap_mu);
    /* Observers hear about idle turns too (p NULL, n_items 0): a turn that
     * only cancelled or failed requests changed the per-tenant gauges, and
     * without this they would keep showing the freed KV blocks and running
     * requests until the next real step. */
    if (!w->o.hooks.on_step) return;
    wk_step_info si = {
        .now_us = now,
        .step_us = step_us,
        .idle_us = idle_us,
        .compute_us = compute_us,
        .n_items = p ? p->n_items : 0,
        .tokens = p ? p->n_tokens : 0,
        .prefill_tokens = prefill,
        .kv_used = w->snap_pool.kv_used,
        .kv_total = w->snap_pool.kv_total,
        .kv_cached = w->snap_pool.kv_cached,
        .tenants = w->snap,
        .n_tenants = w->o.n_tenants,
    };
    w->o.hooks.on_step(w->o.hooks.ctx, &si);
}

/* Sleep until there is something to do: the inbox, a cancellation, a stop,
 * or (with requests queued) the next look at queue deadlines. */
static int wait_for_work(wk_worker *w, int have_queued) {
    pthread_mutex_lock(&w->mu);
    int stop = 0;
    while (!w->in_head && !w->cancel_head) {
        if (w->stopping && w->n_live == 0) { stop = 1; break; }
        if (w->draining && w->n_live > 0 && wk_now_us() >= w->drain_deadline_us) break;
        if (have_queued || w->draining) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
            break;
        }
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return stop;
}

static int past_deadline(wk_worker *w, int64_t now) {
    pthread_mutex_lock(&w->mu);
    int past = w->draining && now >= w->drain_deadline_us;
    pthread_mutex_unlock(&w->mu);
    return past;
}

static void *loop(void *arg) {
    wk_worker *w = arg;
#ifdef _OPENMP
    /* OpenMP's thread count is a per-thread setting, and a new pthread
     * starts from the process default (OMP_NUM_THREADS or all cores), not
     * from what wk_new's thread set while the engine sized its per-thread
     * scratch for eng_threads(). Forward passes run on this thread, so set
     * it here; otherwise a model configured with fewer threads than the
     * default writes past that scratch. */
    if (w->e) omp_set_num_threads(eng_threads(w->e));
#endif
    for (;;) {
        int64_t now = wk_now_us();
        atomic_store(&w->turn_start_us, now);
        /* The fleet's figures first: arrivals are lifted against them. */
        take_remote(w);
        take_inbox(w, now);
        admit_ready(w, now);
        if (past_deadline(w, now)) fail_all_live(w, now);
        sched_plan p;
        sched_step(w->s, now, &p);
        double copy_us = 0;
        int rc = p.n_items ? run_plan(w, &p, &copy_us) : 0;
        int64_t end = wk_now_us();
        sched_result res = {w->results, p.n_items, (double)(end - now), copy_us, rc != 0};
        sched_step_done(w->s, end, &res);
        drain_ends(w);
        if (p.n_items) {
            publish(w, &p, rc != 0, end, (double)(end - now), (double)(now - w->last_end_us));
            w->last_end_us = end;
            continue;
        }
        publish(w, NULL, 0, end, 0, 0);
        /* A lead that ended without a step (cancelled while queued) frees
         * its followers: admit them before sleeping. */
        if (admit_ready(w, end)) continue;
        sched_stats st;
        sched_stats_get(w->s, &st);
        atomic_store(&w->turn_start_us, 0);
        if (wait_for_work(w, st.queued + st.swapped > 0)) break;
    }
    return NULL;
}
