/*
 * obs.h - what the server tells Prometheus: the metric families of
 * tessera, their series for every configured tenant and model, and the
 * worker hooks that feed them.
 *
 * All series are created at start-up (tenants and models are fixed by the
 * configuration), so updates from HTTP threads and engine threads never
 * allocate. Per tenant: requests by outcome, HTTP responses by status
 * code, TTFT, inter-token and
 * end-to-end latency histograms, prompt and completion tokens, queue depth,
 * running requests, KV blocks, preemptions by mode, rejections by reason,
 * engine seconds, and per priced model its cost. Per model: step time, tokens per step, KV utilisation,
 * busy ratio, price per hour when known, and Jain's fairness index of weighted service among the
 * tenants that were backlogged during the last minute.
 *
 * Per model, for every tenant together, the model-server protocol of the
 * Gateway API Inference Extension: requests waiting (queued or swapped out)
 * and running, and KV blocks in use as a fraction, under vLLM's names
 * (vllm:num_requests_waiting, vllm:num_requests_running,
 * vllm:kv_cache_usage_perc and its older name vllm:gpu_cache_usage_perc)
 * so that its endpoint picker works with its defaults, and under tessera's
 * (tessera_requests_waiting, tessera_requests_running,
 * tessera_kv_utilization).
 */
#ifndef TS_OBS_H
#define TS_OBS_H

#include <stdint.h>

#include "metrics.h"
#include "model.h"
#include "sched.h"
#include "worker.h"

typedef struct obs obs;

/* What became of one HTTP request, counted once per request in
 * tessera_requests_total{tenant, outcome}. The HTTP status says less: a
 * stream's 200 goes out before its end is known, and a stream that then
 * fails is not a success. The kinds:
 *   completed    answered in full (a stream: through its last event)
 *   cancelled    the client left before the end
 *   rejected_*   refused before any engine work: why; the scheduler's
 *                admission refusals keep its reason's name
 *   failed_*     accepted, then ended by an error: queue_timeout (queued
 *                past the tier's max_queue_ms), engine (a step failed),
 *                shutdown (still running when the grace ran out),
 *                internal (the server's own fault, e.g. out of memory)
 * rejected_read_timeout covers a request that did not arrive whole within
 * header_timeout_s, or whose connection gave way to newer ones (gate.h). */
#define OBS_OUTCOMES(X)                                           \
    X(COMPLETED,            "completed")                          \
    X(CANCELLED,            "cancelled")                          \
    X(REJ_BAD_REQUEST,      "rejected_bad_request")               \
    X(REJ_UNAUTHENTICATED,  "rejected_unauthenticated")           \
    X(REJ_NOT_FOUND,        "rejected_not_found")                 \
    X(REJ_METHOD,           "rejected_method_not_allowed")        \
    X(REJ_BODY_TOO_LARGE,   "rejected_body_too_large")            \
    X(REJ_READ_TIMEOUT,     "rejected_read_timeout")              \
    X(REJ_RATE_REQUESTS,    "rejected_rate_requests")             \
    X(REJ_RATE_TOKENS,      "rejected_rate_tokens")               \
    X(REJ_CONCURRENCY,      "rejected_concurrency")               \
    X(REJ_KV_TOO_LARGE,     "rejected_too_large")                 \
    X(REJ_OVER_QUOTA,       "rejected_over_quota")                \
    X(REJ_QUEUE_FULL,       "rejected_queue_full")                \
    X(REJ_PREDICTED_WAIT,   "rejected_predicted_wait")            \
    X(REJ_NO_SLOTS,         "rejected_no_slots")                  \
    X(REJ_SHUTTING_DOWN,    "rejected_shutting_down")             \
    X(FAIL_QUEUE_TIMEOUT,   "failed_queue_timeout")               \
    X(FAIL_ENGINE,          "failed_engine")                      \
    X(FAIL_SHUTDOWN,        "failed_shutdown")                    \
    X(FAIL_INTERNAL,        "failed_internal")

typedef enum obs_outcome {
#define OBS_OUTCOME_ENUM(name, str) OBS_##name,
    OBS_OUTCOMES(OBS_OUTCOME_ENUM)
#undef OBS_OUTCOME_ENUM
    OBS_OUTCOME_COUNT
} obs_outcome;

/* "completed", "failed_queue_timeout", ...; "unknown" out of range. */
const char *obs_outcome_name(obs_outcome oc);
/* The outcome of a request the worker ended (r->phase == WK_DONE; read
 * under r->mu). */
obs_outcome obs_outcome_of_req(const wk_req *r);
/* The outcome of a finished HTTP exchange that no more specific rule
 * named: by its status (2xx completed, 400 bad request, 401, 404, 405,
 * 413, 499 cancelled, 503 shutting down, other 5xx internal). */
obs_outcome obs_outcome_of_status(int status);

/* tenant_names: (n_tenants); weights: (n_tenants), for the fairness index;
 * prices_per_hour: (n_models) each model's price_per_hour (config.h,
 * "Cost"), 0 = unknown, or NULL when none is known. A priced model gets
 * tessera_model_price_per_hour{model} and, per tenant,
 * tessera_tenant_cost_total{tenant, model}: the tenant's engine time on
 * the model x price / 3600, charged after every step from the
 * scheduler's cumulative engine_us, so it equals /admin/tenants' cost. An
 * unpriced model has neither series. */
obs *obs_new(const char *const *tenant_names, const double *weights, int n_tenants,
             const char *const *model_names, const double *prices_per_hour, int n_models);
void obs_free(obs *o);

/* Hooks for model m's worker (ctx is private to obs). */
wk_hooks obs_hooks(obs *o, int m);

/* An HTTP response with this status: tenant -1 when unauthenticated. */
void obs_request(obs *o, int tenant, int status);
/* A request's outcome; the caller makes sure each request counts once. */
void obs_outcome_count(obs *o, int tenant, obs_outcome oc);
/* Rejections decided by the HTTP layer (rate limits). */
void obs_reject(obs *o, int tenant, const char *reason);

/* Prometheus text; malloc'd, caller frees. */
int obs_render(obs *o, char **buf, size_t *len);
/* Only the model-server gauges (per model: requests waiting and running, KV
 * in use, under tessera's and vLLM's names), which name no tenant: what a
 * load balancer such as the GIE endpoint picker reads. */
int obs_render_pool(obs *o, char **buf, size_t *len);
/* Model m's file, whose resident bytes (gguf_resident_bytes) plus
 * owned_bytes (what the loader converted beside the mapping) each render
 * reports; the file must outlive o's renders. */
void obs_model_weights(obs *o, int m, const gguf_ctx *g, uint64_t owned_bytes);
/* What model m's engine holds in memory (wk_dev_stats): its gauges, set
 * once at start-up, since they do not change after. */
void obs_model_engine(obs *o, int m, const eng_dev_stats *d);

#endif
