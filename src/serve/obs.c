/* obs.c - see obs.h. */
#include "obs.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"


static const int STATUS_CODES[] = {200, 400, 401, 404, 405, 413, 429, 499, 500, 503};
#define N_CODES ((int)(sizeof(STATUS_CODES) / sizeof(STATUS_CODES[0])))
/* Reasons the HTTP layer rejects for, besides the scheduler's. */
static const char *const HTTP_REASONS[] = {"rate_requests", "rate_tokens", "concurrency", "too_large"};
#define N_HTTP_REASONS 4

static const char *const OUTCOME_NAMES[OBS_OUTCOME_COUNT] = {
#define OBS_OUTCOME_NAME(name, str) str,
    OBS_OUTCOMES(OBS_OUTCOME_NAME)
#undef OBS_OUTCOME_NAME
};

typedef struct obs_tenant {
    met_series *responses[N_CODES + 1]; /* last: any other code */
    met_series *outcomes[OBS_OUTCOME_COUNT];
    met_series *ttft, *itl, *e2e;
    met_series *prompt_tokens, *completion_tokens, *engine_seconds;
    met_series *queue, *running, *kv_blocks;
    met_series *preempt_swap, *preempt_recompute;
    met_series *rejected[SCHED_R_COUNT + N_HTTP_REASONS];
    /* last values seen, to turn the scheduler's cumulative counts into increments */
    uint64_t seen_swap, seen_recompute;
    double seen_service;
    met_series *pfx_query, *pfx_hit;    /* prefix cache tokens looked up / found */
    uint64_t seen_pfx_query, seen_pfx_hit;
    /* per-model state only: the tenant's cost on this model, and the engine
     * time already charged to it (NULL series: the model has no price) */
    met_series *cost;
    double seen_engine_us;
    /* this model's latest gauge values (per-model state only); the tenant's
     * gauges are their sum over models, taken when /metrics is rendered */
    atomic_int cur_queue, cur_running, cur_kv;
} obs_tenant;

typedef struct obs_model {
    obs *o;
    int index;
    met_series *step, *tokens, *kv_util, *busy, *busy_seconds, *jain, *resident;
    met_series *compute_seconds, *mem_held, *mem_kv, *mem_device; /* eng_dev_stats */
    met_series *pfx_blocks; /* blocks in the prefix cache */
    /* Server-wide load of the model (all tenants), under tessera's names
     * and vLLM's: the GIE endpoint picker reads the latter */
    met_series *waiting, *running, *v_waiting, *v_running, *v_kv, *v_gpu_kv;
    met_series *price;      /* price per hour, or NULL when unknown */
    double price_per_hour;  /* currency units per hour; 0 = unknown (no cost series) */
    const gguf_ctx *weights; /* the model's file, set once at start-up (obs_model_weights) */
    uint64_t owned_bytes;   /* and what it converted beside the mapping */
    /* model_resident_bytes walks the whole mapping (a 40 GB file is 10 M
     * pages): renders share one reading for RESIDENT_EVERY_US */
    atomic_int_fast64_t resident_us;
    atomic_uint_fast64_t resident_bytes;
    met_window *window;
    obs_tenant *tenant_state; /* (n_tenants) per-model cumulative trackers */
    double busy_ewma;
} obs_model;

struct obs {
    met_registry *reg;
    /* The model-server gauges (setup_server_gauges), apart: they are what
     * obs_render_pool serves without a key, and they name no tenant. */
    met_registry *pool;
    int n_tenants, n_models;
    double *weights;
    obs_tenant *tenants;    /* (n_tenants + 1): the last is "unauthenticated" */
    obs_model *models;
};

static const double TOKEN_BUCKETS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};

static void setup_tenant(obs *o, obs_tenant *t, const char *name, met_family **f) {
    char code[8];
    for (int i = 0; i <= N_CODES; i++) {
        if (i < N_CODES) snprintf(code, sizeof(code), "%d", STATUS_CODES[i]);
        else snprintf(code, sizeof(code), "other");
        const char *v[] = {name, code};
        t->responses[i] = met_series_get(f[12], v);
    }
    for (int i = 0; i < OBS_OUTCOME_COUNT; i++) {
        const char *v[] = {name, OUTCOME_NAMES[i]};
        t->outcomes[i] = met_series_get(f[0], v);
    }
    const char *v[] = {name};
    t->ttft = met_series_get(f[1], v);
    t->itl = met_series_get(f[2], v);
    t->e2e = met_series_get(f[3], v);
    t->prompt_tokens = met_series_get(f[4], v);
    t->completion_tokens = met_series_get(f[5], v);
    t->engine_seconds = met_series_get(f[6], v);
    t->queue = met_series_get(f[7], v);
    t->running = met_series_get(f[8], v);
    t->kv_blocks = met_series_get(f[9], v);
    const char *sw[] = {name, "swap"}, *rc[] = {name, "recompute"};
    t->preempt_swap = met_series_get(f[10], sw);
    t->preempt_recompute = met_series_get(f[10], rc);
    for (int r = 1; r < SCHED_R_COUNT + N_HTTP_REASONS; r++) {
        const char *reason = r < SCHED_R_COUNT ? sched_reason_name((sched_reason)r) : HTTP_REASONS[r - SCHED_R_COUNT];
        char lower[48];
        size_t k = 0;
        for (; reason[k] && k + 1 < sizeof(lower); k++)
            lower[k] = (char)(reason[k] >= 'A' && reason[k] <= 'Z' ? reason[k] + 32 : reason[k]);
        lower[k] = 0;
        const char *rv[] = {name, lower};
        t->rejected[r] = met_series_get(f[11], rv);
    }
    (void)o;
}

static int setup_families(obs *o, const char *const *names) {
    const char *tl[] = {"tenant"}, *tc[] = {"tenant", "code"}, *tm[] = {"tenant", "mode"}, *tr[] = {"tenant", "reason"};
    const char *to[] = {"tenant", "outcome"};
    met_family *f[13] = {
        met_counter(o->reg, "tessera_requests_total",
                    "Requests by tenant and outcome: completed, cancelled, rejected_<reason>, failed_<reason>", to, 2),
        met_histogram(o->reg, "tessera_ttft_seconds", "Time to first token", tl, 1, met_latency_buckets, MET_LATENCY_N_BUCKETS),
        met_histogram(o->reg, "tessera_itl_seconds", "Inter-token latency", tl, 1, met_latency_buckets, MET_LATENCY_N_BUCKETS),
        met_histogram(o->reg, "tessera_e2e_seconds", "End-to-end request latency", tl, 1, met_latency_buckets, MET_LATENCY_N_BUCKETS),
        met_counter(o->reg, "tessera_prompt_tokens_total", "Prompt tokens of finished requests", tl, 1),
        met_counter(o->reg, "tessera_completion_tokens_total", "Generated tokens", tl, 1),
        met_counter(o->reg, "tessera_engine_seconds_total", "Engine time attributed by token share", tl, 1),
        met_gauge(o->reg, "tessera_queue_depth", "Requests waiting in the scheduler", tl, 1),
        met_gauge(o->reg, "tessera_running_requests", "Requests holding KV blocks", tl, 1),
        met_gauge(o->reg, "tessera_kv_blocks", "KV blocks held", tl, 1),
        met_counter(o->reg, "tessera_preemptions_total", "Preemptions by mode", tm, 2),
        met_counter(o->reg, "tessera_rejections_total", "Requests rejected, by reason", tr, 2),
        met_counter(o->reg, "tessera_http_responses_total", "HTTP responses, by tenant and status code", tc, 2),
    };
    for (int i = 0; i < 13; i++)
        if (!f[i]) return -1;
    for (int i = 0; i < o->n_tenants; i++) setup_tenant(o, &o->tenants[i], names[i], f);
    setup_tenant(o, &o->tenants[o->n_tenants], "unauthenticated", f);
    return 0;
}

static int setup_models(obs *o, const char *const *names) {
    const char *ml[] = {"model"};
    met_family *step = met_histogram(o->reg, "tessera_step_seconds", "Engine step time", ml, 1, met_step_buckets, MET_STEP_N_BUCKETS);
    met_family *toks = met_histogram(o->reg, "tessera_tokens_per_step", "Tokens per engine step", ml, 1, TOKEN_BUCKETS,
                                    (int)(sizeof(TOKEN_BUCKETS) / sizeof(TOKEN_BUCKETS[0])));
    met_family *kv = met_gauge(o->reg, "tessera_kv_utilization", "Share of KV blocks in use", ml, 1);
    met_family *busy = met_gauge(o->reg, "tessera_busy_ratio", "Share of recent wall time spent in engine steps", ml, 1);
    met_family *busy_s = met_counter(o->reg, "tessera_engine_busy_seconds_total", "Wall time spent in engine steps", ml, 1);
    met_family *jain = met_gauge(o->reg, "tessera_fairness_jain", "Jain's index of weighted service among backlogged tenants, last minute", ml, 1);
    met_family *res = met_gauge(o->reg, "tessera_model_weights_resident_bytes",
                                "Bytes of the model's GGUF file resident in the page cache, plus its norms made f32 (the weights are read in place)", ml, 1);
    met_family *comp = met_counter(o->reg, "tessera_engine_compute_seconds_total",
                                   "Of the engine's step time, the device's part: a GPU's kernels (from the step's first "
                                   "to its last), the CPU's forward pass; tessera_engine_busy_seconds_total less this is "
                                   "host work and copies (0 for an embedding model)", ml, 1);
    met_family *held = met_gauge(o->reg, "tessera_engine_memory_bytes",
                                 "Memory the engine allocated for the model: KV pool, activations, scratch, and on a GPU "
                                 "the weights (0 for an embedding model)", ml, 1);
    met_family *kvb = met_gauge(o->reg, "tessera_kv_pool_bytes", "Bytes of the model's KV pool (0 for an embedding model)",
                                ml, 1);
    met_family *devb = met_gauge(o->reg, "tessera_device_memory_bytes",
                                 "Memory of the device the model runs on, as its runtime reports it (a MIG slice its own); "
                                 "0 on the CPU", ml, 1);
    if (!step || !toks || !kv || !busy || !busy_s || !jain || !res || !comp || !held || !kvb || !devb) return -1;
    for (int m = 0; m < o->n_models; m++) {
        obs_model *om = &o->models[m];
        const char *v[] = {names[m]};
        om->o = o;
        om->index = m;
        om->step = met_series_get(step, v);
        om->tokens = met_series_get(toks, v);
        om->kv_util = met_series_get(kv, v);
        om->busy = met_series_get(busy, v);
        om->busy_seconds = met_series_get(busy_s, v);
        om->jain = met_series_get(jain, v);
        om->resident = met_series_get(res, v);
        om->compute_seconds = met_series_get(comp, v);
        om->mem_held = met_series_get(held, v);
        om->mem_kv = met_series_get(kvb, v);
        om->mem_device = met_series_get(devb, v);
        met_set(om->jain, 1.0);
        om->window = met_window_new(o->n_tenants);
        om->tenant_state = calloc((size_t)o->n_tenants + 1, sizeof(obs_tenant));
        if (!om->window || !om->tenant_state) return -1;
    }
    return 0;
}

/* The model-server protocol the Gateway API Inference Extension's endpoint
 * picker scrapes: per model, requests waiting and running and the share of
 * KV blocks in use. vLLM's names make the picker's defaults work; they carry
 * the model under vLLM's label (model_name, which vLLM's dashboards filter
 * on) beside tessera's (model). vllm:gpu_cache_usage_perc is the older name
 * of vllm:kv_cache_usage_perc, which pickers built before the rename read.
 * Both are fractions in 0..1 despite "perc", as in vLLM. */
static int setup_server_gauges(obs *o, const char *const *names) {
    const char *ml[] = {"model"}, *vl[] = {"model", "model_name"};
    met_family *w = met_gauge(o->pool, "tessera_requests_waiting",
                              "Requests of every tenant admitted but not in the running batch (queued or swapped out)",
                              ml, 1);
    met_family *r = met_gauge(o->pool, "tessera_requests_running", "Requests of every tenant in the running batch",
                              ml, 1);
    met_family *vw = met_gauge(o->pool, "vllm:num_requests_waiting",
                               "Requests waiting to run (tessera_requests_waiting under vLLM's name)", vl, 2);
    met_family *vr = met_gauge(o->pool, "vllm:num_requests_running",
                               "Requests in the running batch (tessera_requests_running under vLLM's name)", vl, 2);
    met_family *vk = met_gauge(o->pool, "vllm:kv_cache_usage_perc",
                               "KV blocks in use / KV blocks in total, 0..1 (tessera_kv_utilization)", vl, 2);
    met_family *vg = met_gauge(o->pool, "vllm:gpu_cache_usage_perc",
                               "Older name of vllm:kv_cache_usage_perc, 0..1", vl, 2);
    if (!w || !r || !vw || !vr || !vk || !vg) return -1;
    for (int m = 0; m < o->n_models; m++) {
        obs_model *om = &o->models[m];
        const char *v[] = {names[m]}, *v2[] = {names[m], names[m]};
        om->waiting = met_series_get(w, v);
        om->running = met_series_get(r, v);
        om->v_waiting = met_series_get(vw, v2);
        om->v_running = met_series_get(vr, v2);
        om->v_kv = met_series_get(vk, v2);
        om->v_gpu_kv = met_series_get(vg, v2);
        if (!om->waiting || !om->running || !om->v_waiting || !om->v_running || !om->v_kv || !om->v_gpu_kv)
            return -1;
    }
    return 0;
}

/* A step's server-wide gauges. They come from the snapshot the per-tenant
 * gauges read (the tenants' counts of the step, summed, and the pool's KV
 * figures taken under the same lock), so the sums agree with the tenants'
 * series. Each gauge is its own atomic: a render racing a step may pair
 * one step's waiting with the next step's running, which a scrape every
 * few seconds cannot tell from a step later. */
static void server_step(obs_model *m, const wk_step_info *s) {
    long waiting = 0, running = 0;
    for (int i = 0; i < s->n_tenants; i++) {
        waiting += (long)s->tenants[i].queued + s->tenants[i].swapped;
        running += s->tenants[i].running;
    }
    met_set(m->waiting, (double)waiting);
    met_set(m->v_waiting, (double)waiting);
    met_set(m->running, (double)running);
    met_set(m->v_running, (double)running);
    if (s->kv_total > 0) {
        double kv = (double)s->kv_used / s->kv_total;
        met_set(m->v_kv, kv);
        met_set(m->v_gpu_kv, kv);
    }
}

/* The prefix cache's series: per tenant the prompt tokens looked up and
 * found (counters), per model the blocks it holds (a gauge). */
static int setup_prefix_metrics(obs *o, const char *const *tenant_names, const char *const *model_names) {
    const char *tl[] = {"tenant"}, *ml[] = {"model"};
    met_family *q = met_counter(o->reg, "tessera_prefix_cache_query_tokens_total",
                                "Prompt tokens looked up in the prefix cache", tl, 1);
    met_family *h = met_counter(o->reg, "tessera_prefix_cache_hit_tokens_total",
                                "Prompt tokens found in the prefix cache (not computed)", tl, 1);
    met_family *b = met_gauge(o->reg, "tessera_prefix_cache_blocks",
                              "KV blocks in the prefix cache, referenced or cache-only", ml, 1);
    if (!q || !h || !b) return -1;
    for (int i = 0; i < o->n_tenants; i++) {
        const char *v[] = {tenant_names[i]};
        o->tenants[i].pfx_query = met_series_get(q, v);
        o->tenants[i].pfx_hit = met_series_get(h, v);
    }
    for (int m = 0; m < o->n_models; m++) {
        const char *v[] = {model_names[m]};
        o->models[m].pfx_blocks = met_series_get(b, v);
    }
    return 0;
}

/* The cost series: per tenant and model the cost of its engine time
 * (a counter), per model its price (a gauge); only for a model with a
 * price, so that an unknown price shows as no series rather than as a
 * cost of 0. prices: (n_models) or NULL (none known). */
static int setup_cost_metrics(obs *o, const char *const *tenant_names, const char *const *model_names,
                              const double *prices) {
    const char *tm[] = {"tenant", "model"}, *ml[] = {"model"};
    met_family *cost = met_counter(o->reg, "tessera_tenant_cost_total",
                                   "Cost of the tenant's engine time on the model: engine seconds x price_per_hour "
                                   "/ 3600, in the operator's currency",
                                   tm, 2);
    met_family *price = met_gauge(o->reg, "tessera_model_price_per_hour",
                                  "Price per hour of the device the model runs on (the config's price_per_hour)",
                                  ml, 1);
    if (!cost || !price) return -1;
    for (int m = 0; prices && m < o->n_models; m++) {
        obs_model *om = &o->models[m];
        if (!isfinite(prices[m]) || !(prices[m] > 0)) continue;
        const char *mv[] = {model_names[m]};
        if (!(om->price = met_series_get(price, mv))) return -1;
        for (int i = 0; i < o->n_tenants; i++) {
            const char *v[] = {tenant_names[i], model_names[m]};
            if (!(om->tenant_state[i].cost = met_series_get(cost, v))) return -1;
        }
        met_set(om->price, prices[m]);
        om->price_per_hour = prices[m];
    }
    return 0;
}

/* Charge each tenant's new engine time on this model at the model's price.
 * The tenants' engine_us are cumulative, so the increment is the part not
 * yet charged: the counter tracks /admin/tenants' cost exactly. */
static void cost_step(obs_model *m, const wk_step_info *s) {
    if (!(m->price_per_hour > 0)) return;
    for (int i = 0; i < s->n_tenants && i < m->o->n_tenants; i++) {
        obs_tenant *seen = &m->tenant_state[i];
        double delta = s->tenants[i].engine_us - seen->seen_engine_us;
        seen->seen_engine_us = s->tenants[i].engine_us;
        met_inc(seen->cost, cfg_cost(m->price_per_hour, delta));
    }
}

/* A step's prefix cache figures: the tenants' cumulative counts as
 * increments, the model's cached blocks as they are. */
static void prefix_step(obs_model *m, const wk_step_info *s) {
    met_set(m->pfx_blocks, (double)s->kv_cached);
    for (int i = 0; i < s->n_tenants && i < m->o->n_tenants; i++) {
        const sched_tenant_stats *st = &s->tenants[i];
        obs_tenant *t = &m->o->tenants[i], *seen = &m->tenant_state[i];
        met_inc(t->pfx_query, (double)(st->prefix_query_tokens - seen->seen_pfx_query));
        met_inc(t->pfx_hit, (double)(st->prefix_hit_tokens - seen->seen_pfx_hit));
        seen->seen_pfx_query = st->prefix_query_tokens;
        seen->seen_pfx_hit = st->prefix_hit_tokens;
    }
}

obs *obs_new(const char *const *tenant_names, const double *weights, int n_tenants,
             const char *const *model_names, const double *prices_per_hour, int n_models) {
    obs *o = calloc(1, sizeof(*o));
    if (!o) return NULL;
    o->n_tenants = n_tenants;
    o->n_models = n_models;
    o->reg = met_new();
    o->pool = met_new();
    o->weights = malloc((size_t)(n_tenants + 1) * sizeof(double));
    o->tenants = calloc((size_t)n_tenants + 1, sizeof(obs_tenant));
    o->models = calloc((size_t)(n_models ? n_models : 1), sizeof(obs_model));
    if (!o->reg || !o->pool || !o->weights || !o->tenants || !o->models || setup_families(o, tenant_names) ||
        setup_models(o, model_names) || setup_server_gauges(o, model_names) ||
        setup_prefix_metrics(o, tenant_names, model_names) ||
        setup_cost_metrics(o, tenant_names, model_names, prices_per_hour)) {
        obs_free(o);
        return NULL;
    }
    memcpy(o->weights, weights, (size_t)n_tenants * sizeof(double));
    return o;
}

void obs_free(obs *o) {
    if (!o) return;
    for (int m = 0; o->models && m < o->n_models; m++) {
        met_window_free(o->models[m].window);
        free(o->models[m].tenant_state);
    }
    met_free(o->reg);
    met_free(o->pool);
    free(o->weights);
    free(o->tenants);
    free(o->models);
    free(o);
}

static obs_tenant *tenant_of(obs *o, int t) {
    return &o->tenants[t >= 0 && t < o->n_tenants ? t : o->n_tenants];
}

void obs_request(obs *o, int tenant, int status) {
    obs_tenant *t = tenant_of(o, tenant);
    int i = 0;
    while (i < N_CODES && STATUS_CODES[i] != status) i++;
    met_inc(t->responses[i], 1);
}

void obs_outcome_count(obs *o, int tenant, obs_outcome oc) {
    if ((unsigned)oc >= OBS_OUTCOME_COUNT) oc = OBS_FAIL_INTERNAL;
    met_inc(tenant_of(o, tenant)->outcomes[oc], 1);
}

const char *obs_outcome_name(obs_outcome oc) {
    return (unsigned)oc < OBS_OUTCOME_COUNT ? OUTCOME_NAMES[oc] : "unknown";
}

/* A scheduler refusal at admission. Its 400-class reasons (the request
 * can never be served as asked) are bad requests like the HTTP layer's;
 * the others keep the scheduler's name. */
static obs_outcome rejected_by(sched_reason why) {
    switch (why) {
    case SCHED_R_TOO_LARGE: return OBS_REJ_KV_TOO_LARGE;
    case SCHED_R_OVER_QUOTA: return OBS_REJ_OVER_QUOTA;
    case SCHED_R_QUEUE_FULL: return OBS_REJ_QUEUE_FULL;
    case SCHED_R_PREDICTED_WAIT: return OBS_REJ_PREDICTED_WAIT;
    case SCHED_R_NO_SLOTS: return OBS_REJ_NO_SLOTS;
    default: return sched_reason_http(why) == 400 ? OBS_REJ_BAD_REQUEST : OBS_FAIL_INTERNAL;
    }
}

/* The scheduler ended an admitted request with an error. */
static obs_outcome failed_by(sched_reason why) {
    switch (why) {
    case SCHED_R_QUEUE_TIMEOUT: return OBS_FAIL_QUEUE_TIMEOUT;
    case SCHED_R_EXECUTOR: return OBS_FAIL_ENGINE;
    default: return OBS_FAIL_INTERNAL;
    }
}

obs_outcome obs_outcome_of_req(const wk_req *r) {
    switch (r->end) {
    case WK_END_FINISHED: return OBS_COMPLETED;
    case WK_END_CANCELLED: return OBS_CANCELLED;
    case WK_END_INVALID: return OBS_REJ_BAD_REQUEST;
    case WK_END_REJECTED: return rejected_by(r->reason);
    case WK_END_FAILED: return failed_by(r->reason);
    case WK_END_SHUTDOWN: return OBS_FAIL_SHUTDOWN;
    default: return OBS_FAIL_INTERNAL;
    }
}

obs_outcome obs_outcome_of_status(int status) {
    switch (status) {
    case 400: return OBS_REJ_BAD_REQUEST;
    case 401: return OBS_REJ_UNAUTHENTICATED;
    case 404: return OBS_REJ_NOT_FOUND;
    case 405: return OBS_REJ_METHOD;
    case 413: return OBS_REJ_BODY_TOO_LARGE;
    case 499: return OBS_CANCELLED;
    case 503: return OBS_REJ_SHUTTING_DOWN;
    default: return status >= 200 && status < 300 ? OBS_COMPLETED : OBS_FAIL_INTERNAL;
    }
}

void obs_reject(obs *o, int tenant, const char *reason) {
    obs_tenant *t = tenant_of(o, tenant);
    for (int i = 0; i < N_HTTP_REASONS; i++)
        if (strcmp(reason, HTTP_REASONS[i]) == 0) met_inc(t->rejected[SCHED_R_COUNT + i], 1);
}

#define RESIDENT_EVERY_US 5000000

/* Renders may run on several HTTP threads at once: the one that wins the
 * exchange reads the mapping, the others show the reading before it. */
static void refresh_resident(obs_model *om) {
    if (!om->weights) return;
    const int64_t now = wk_now_us();
    int_fast64_t last = atomic_load(&om->resident_us);
    if ((last == 0 || now - last >= RESIDENT_EVERY_US) &&
        atomic_compare_exchange_strong(&om->resident_us, &last, now))
        atomic_store(&om->resident_bytes, gguf_resident_bytes(om->weights) + om->owned_bytes);
    met_set(om->resident, (double)atomic_load(&om->resident_bytes));
}

/* A tenant's queue, running and KV gauges add up its state on every model.
 * Each worker stores only its own model's values (on_step); summing here,
 * from the latest of each, means one model's step never hides another's
 * requests, and no lock is shared between the workers. */
int obs_render(obs *o, char **buf, size_t *len) {
    for (int i = 0; i < o->n_tenants; i++) {
        long q = 0, run = 0, kv = 0;
        for (int m = 0; m < o->n_models; m++) {
            obs_tenant *st = &o->models[m].tenant_state[i];
            q += atomic_load(&st->cur_queue);
            run += atomic_load(&st->cur_running);
            kv += atomic_load(&st->cur_kv);
        }
        met_set(o->tenants[i].queue, (double)q);
        met_set(o->tenants[i].running, (double)run);
        met_set(o->tenants[i].kv_blocks, (double)kv);
    }
    for (int m = 0; m < o->n_models; m++) refresh_resident(&o->models[m]);
    char *all, *pool;
    size_t n_all, n_pool;
    if (met_render(o->reg, &all, &n_all)) return -1;
    if (met_render(o->pool, &pool, &n_pool)) {
        free(all);
        return -1;
    }
    char *both = realloc(all, n_all + n_pool + 1);
    if (!both) {
        free(all);
        free(pool);
        return -1;
    }
    memcpy(both + n_all, pool, n_pool + 1);
    free(pool);
    *buf = both;
    *len = n_all + n_pool;
    return 0;
}

int obs_render_pool(obs *o, char **buf, size_t *len) { return met_render(o->pool, buf, len); }

void obs_model_weights(obs *o, int m, const gguf_ctx *g, uint64_t owned_bytes) {
    o->models[m].weights = g;
    o->models[m].owned_bytes = owned_bytes;
}

void obs_model_engine(obs *o, int m, const eng_dev_stats *d) {
    obs_model *om = &o->models[m];
    met_set(om->mem_held, (double)d->held_bytes);
    met_set(om->mem_kv, (double)d->kv_bytes);
    met_set(om->mem_device, (double)d->device_bytes);
}

/* ---- worker hooks (engine thread of one model) ------------------------------ */

static void on_token(void *ctx, const wk_req *r, int64_t now_us, int first) {
    obs_model *m = ctx;
    obs_tenant *t = tenant_of(m->o, r->tenant);
    if (first) met_observe(t->ttft, (double)(now_us - r->arrival_us) / 1e6);
    else if (r->last_token_us) met_observe(t->itl, (double)(now_us - r->last_token_us) / 1e6);
    met_inc(t->completion_tokens, 1);
}

static void on_end(void *ctx, const wk_req *r, const sched_end *e) {
    obs_model *m = ctx;
    obs_tenant *t = tenant_of(m->o, r->tenant);
    met_inc(t->prompt_tokens, e->prompt_tokens);
    met_inc(t->engine_seconds, e->engine_us / 1e6);
    if (e->state == SCHED_FINISHED) met_observe(t->e2e, (double)(e->end_us - e->arrival_us) / 1e6);
    if (e->state == SCHED_FAILED) met_inc(t->rejected[e->reason], 1);
}

static void on_reject(void *ctx, const wk_req *r, sched_reason why) {
    obs_model *m = ctx;
    met_inc(tenant_of(m->o, r->tenant)->rejected[why], 1);
}

/* Per-tenant gauges, preemption increments and the fairness window. */
static void on_step(void *ctx, const wk_step_info *s) {
    obs_model *m = ctx;
    obs *o = m->o;
    if (s->n_items) {
        met_observe(m->step, s->step_us / 1e6);
        met_observe(m->tokens, s->tokens);
        met_inc(m->busy_seconds, s->step_us / 1e6);
        if (s->compute_us > 0) met_inc(m->compute_seconds, s->compute_us / 1e6);
        double wall = s->step_us + s->idle_us;
        double share = wall > 0 ? s->step_us / wall : 1;
        m->busy_ewma += 0.05 * (share - m->busy_ewma);
        met_set(m->busy, m->busy_ewma);
    }
    if (s->kv_total) met_set(m->kv_util, (double)s->kv_used / s->kv_total);
    server_step(m, s);
    for (int i = 0; i < s->n_tenants && i < o->n_tenants; i++) {
        const sched_tenant_stats *st = &s->tenants[i];
        obs_tenant *t = &o->tenants[i], *seen = &m->tenant_state[i];
        atomic_store(&seen->cur_queue, st->queued);
        atomic_store(&seen->cur_running, st->running);
        atomic_store(&seen->cur_kv, st->kv_blocks);
        met_inc(t->preempt_swap, (double)(st->preempt_swap - seen->seen_swap));
        met_inc(t->preempt_recompute, (double)(st->preempt_recompute - seen->seen_recompute));
        seen->seen_swap = st->preempt_swap;
        seen->seen_recompute = st->preempt_recompute;
        double delta = st->service - seen->seen_service;
        seen->seen_service = st->service;
        int backlogged = st->queued + st->running + st->swapped > 0;
        met_window_add(m->window, i, s->now_us, delta / (o->weights[i] > 0 ? o->weights[i] : 1), backlogged);
    }
    met_set(m->jain, met_window_jain(m->window, s->now_us));
    prefix_step(m, s);
    cost_step(m, s);
}

wk_hooks obs_hooks(obs *o, int m) {
    wk_hooks h = {&o->models[m], on_token, on_end, on_reject, on_step};
    return h;
}
