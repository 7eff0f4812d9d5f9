/*
 * planio.h - reading the planner's input: one YAML file describing the
 * fleet, the models, the SLO tiers, the tenants and optional model knobs.
 *
 * The whole file is checked before anything is returned: on any error the
 * output stays empty (nothing leaks) and the message names the file, the
 * 1-based line and column where the fault starts, and the field, e.g. for
 * examples/plan/fleet.yaml with the insurer's model set to llama-9b
 *     fleet.yaml:76:12: tenants[2].model: unknown model 'llama-9b' (llama-3-8b, ...)
 * Unknown and repeated keys are errors, and so is a second YAML document; a
 * key whose value is null (empty, ~, null, Null, NULL) counts as absent. The
 * reading is util/ydoc.h's. Names follow `tessera serve`'s
 * rules so the configurations `--emit serve` writes load as they are.
 * This module only parses; plan.h decides.
 *
 * Schema (keys optional unless marked required):
 *
 *   fleet:                       required, node pools
 *     - name: a100               required; nodes are a100-0, a100-1, ...
 *       gpu: A100-80GB           required; a catalog type (gpucat.h)
 *       gpus_per_node: 8         1..64 (default 8)
 *       nodes: 1                 1..100000 (default 1)
       price_per_hour: 2.5      one whole GPU, per hour, >= 0 (default 0: unpriced)
       mig_prices: {3g.40gb: 0.9}   per-GI prices overriding the default of
                                price_per_hour x compute slices / 7; keys are
                                the GPU's profile names
 *   models:                      required
 *     - name: llama-3-8b         required; letters, digits, ._:/-
 *       params: 8.03B            required; a number, or with K, M, B (1e9), T
 *       dtype_bytes: 2           weight bytes per parameter, 0.25..8 (default 2)
 *       kv_dtype_bytes: 2        bytes per KV element, 0.25..8 (default 2)
 *       layers: 32               required, 1..1000
 *       kv_heads: 8              required, 1..1024
 *       heads: 32                query heads, 1..4096 (default kv_heads)
 *       head_dim: 128            required, 1..4096
 *       max_context: 8192        tokens, 0..16777216 (default 4096)
 *       path: /models/l3.gguf    for --emit serve (default models/<name>.gguf)
 *   tiers:                       optional, at most SCHED_MAX_TIERS (8); default gold/silver/bronze
 *     - name: gold               required; letters, digits, ._-
 *       ttft_ms: 200             0 = no target (default 0)
 *       tpot_ms: 50              0 = no target (default 0)
 *       band: 0                  0..7 (default: the tier's position)
 *       min_share: 0             0..1, summing to at most 1 (default 0)
 *       max_queue_ms: 30000      longest queue wait in serve, 0 = unbounded (default 0)
 *   tenants:                     required
 *     - name: acme               required; letters, digits, ._-
 *       model: llama-3-8b        required; a model's name
 *       tier: gold               required; a tier's name
 *       isolation: shared        strict | shared | best-effort (default shared)
 *       group: acme              strict only: a trust group sharing workers
 *       profile: 2g.20gb         strict only: pin the MIG profile
 *       load:                    default: no load (one idle instance)
 *         rps: 2.5               requests/s, >= 0
 *         prompt_tokens: 512     mean, >= 0 (default 512)
 *         output_tokens: 128     mean, >= 1 (default 128)
         prompt_cv: 0           coefficient of variation of the prompt length, 0..100
                                (default 0: all prompts equal); widens the p99 TTFT
 *         headroom: 1.5          1..100 (default 1): size the tenant's worker as if
 *                                rps were rps x headroom (margin where the queueing
 *                                model is optimistic); the report keeps the real rps.
 *                                Not options.headroom, which is memory
 *       key_sha256: <64 hex>     for --emit serve (default: a placeholder)
 *       weight: 1                > 0, serve's share within the band
 *   options:                     model knobs (perf.h), all optional
 *     compute_efficiency: 0.5    (0, 1]
 *     bandwidth_efficiency: 0.8  (0, 1]
 *     step_overhead_ms: 2        0..1000
 *     max_utilization: 0.9       (0, 1]
 *     kv_quantile_z: 2           0..10
 *     headroom: 0.1              0..10, fraction of weights + KV
 *     reserve_gib: 0.5           0..1024, per process
 *     max_replicas: 64           1..100000
 *     exact_limit: 12            0..64 slices for the exact search
 *     exact_budget: 2000000      1..10000000000 search nodes
     tpot_bound_ms: 100         TPOT sizing aims for where a tier sets none
                                (best effort excepted), 0..1e7, 0 = off
 */
#ifndef TS_PLANIO_H
#define TS_PLANIO_H

#include <stddef.h>

#include "plan.h"

/* Read and check the YAML file at path into *in (plan_input_free releases
 * it). err, errlen: OUT, may be NULL/0; "path:line:column: field: what is
 * wrong".
 * Returns 0, TS_ERR_CONFIG (bad content), TS_ERR_IO (unreadable),
 * TS_ERR_NOMEM or TS_ERR_INVAL (NULL argument); on failure *in is empty. */
int planio_load(const char *path, plan_input *in, char *err, size_t errlen);

/* The same from a string in memory; name is used in messages. */
int planio_parse(const char *text, size_t len, const char *name, plan_input *in, char *err,
                 size_t errlen);

#endif
