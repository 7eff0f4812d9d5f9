/*
 * obs.h - what the server tells Prometheus: the metric families of
 * tessera, their series for every configured tenant and model, and the
 * worker hooks that feed them.
 *
 * All series are created at start-up (tenants and models are fixed by the
 * configuration), so updates from HTTP threads and engine threads never
 * allocate. Per tenant: requests by status code, TTFT, inter-token and
 * end-to-end latency histograms, prompt and completion tokens, queue depth,
 * running requests, KV blocks, preemptions by mode, rejections by reason,
 * engine seconds. Per model: step time, tokens per step, KV utilisation,
 * busy ratio, and Jain's fairness index of weighted service among the
 * tenants that were backlogged during the last minute.
 */
#ifndef TS_OBS_H
#define TS_OBS_H

#include <stdint.h>

#include "metrics.h"
#include "sched.h"
#include "worker.h"

typedef struct obs obs;

/* tenant_names: (n_tenants); weights: (n_tenants), for the fairness index. */
obs *obs_new(const char *const *tenant_names, const double *weights, int n_tenants,
             const char *const *model_names, int n_models);
void obs_free(obs *o);

/* Hooks for model m's worker (ctx is private to obs). */
wk_hooks obs_hooks(obs *o, int m);

/* A finished HTTP exchange: tenant -1 when unauthenticated. */
void obs_request(obs *o, int tenant, int status);
/* Rejections decided by the HTTP layer (rate limits). */
void obs_reject(obs *o, int tenant, const char *reason);

/* Prometheus text; malloc'd, caller frees. */
int obs_render(obs *o, char **buf, size_t *len);

#endif
