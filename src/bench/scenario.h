/*
 * scenario.h - a `tessera bench` scenario: which tenants send what, how
 * often, with which API key, and what latency each one was promised.
 *
 * A scenario is a YAML file (schema below; examples in the scenarios folder). This
 * module parses and validates it into a scn value and owns nothing else: it
 * never opens a socket and never reads a clock. scn_parse works on a buffer
 * and is pure; scn_load reads the file (and the trace CSV it may name) and
 * hands the bytes to the pure parsers. Every error names the file, the
 * 1-based line and column and the field ("isolation.yaml:33:45:
 * tenants[1].arrival.cv: must be at least 0.01 ..." for `cv: 0` in the
 * aggressor's arrival of scenarios/isolation.yaml; a trace CSV's errors
 * name the line only), and a scenario that fails leaves nothing allocated.
 *
 *   name: isolation                   label for the report (default: file name)
 *   model: demo                       required; the "model" of every request
 *   api: completions                  completions | chat
 *   duration: 30s                     send window (--duration overrides)
 *   drain: 20s                        wait for in-flight requests after it
 *   temperature: 0                    sent with every request
 *   token_ids: {min: 100, max: 9999}  range of the random prompt token ids
 *   service: {input_weight: 1, output_weight: 2}   Jain's service per token
 *   max_in_flight: 4000               client-side cap on open requests
 *   trace: trace.csv                  optional, relative to this file
 *   tenants:                          required, 1..SCN_MAX_TENANTS
 *     - name: victim                  required
 *       key: tsk-...                  required; the Bearer key
 *       weight: 1                     the tenant's server-side weight (> 0)
 *       arrival: {process: poisson, rate: 2}      requests/s
 *               {process: gamma, rate: 2, cv: 3}  bursts: CV of the gaps
 *               {process: constant, rate: 2}
 *       prompt_tokens: {dist: fixed, value: 64}
 *                      {dist: uniform, min: 16, max: 128}
 *                      {dist: lognormal, mean: 64, cv: 0.5, min: 1, max: 512}
 *       output_tokens: (same forms)
 *       slo: {ttft_ms: 500, tpot_ms: 100}         0 or absent: no target
 *       start: 0s                     first arrival not before this
 *       stop: 30s                     no arrival at or after this
 *
 * Durations are a number of seconds, or a number with a unit: ms, s, m, h
 * ("1.5s", "500ms", "2m"). Unknown keys are errors, so a typo cannot pass,
 * and so is a second YAML document; a key whose value is null (empty, ~,
 * null, Null, NULL) counts as absent.
 * A tenant without `arrival` takes its requests from the trace: a CSV with
 * the header `timestamp_s,tenant,prompt_tokens,output_tokens` whose rows name
 * scenario tenants; rows may come in any order (they are sorted, stably).
 */
#ifndef TS_BENCH_SCENARIO_H
#define TS_BENCH_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#define SCN_MAX_TENANTS 64
#define SCN_NAME_MAX 64
#define SCN_MAX_TOKENS 1000000  /* largest prompt or output length */

typedef enum scn_process {
    SCN_ARR_NONE = 0,         /* from the trace */
    SCN_ARR_POISSON,          /* exponential gaps */
    SCN_ARR_GAMMA,            /* gamma gaps with coefficient of variation cv */
    SCN_ARR_CONSTANT,         /* gaps of exactly 1 / rate */
} scn_process;

typedef struct scn_arrival {
    scn_process process;
    double rate;              /* requests/s, > 0 */
    double cv;                /* gamma: std / mean of a gap, > 0; else 1 (Poisson) or 0 */
} scn_arrival;

typedef enum scn_dist { SCN_LEN_FIXED = 0, SCN_LEN_UNIFORM, SCN_LEN_LOGNORMAL } scn_dist;

typedef struct scn_len {
    scn_dist dist;
    int32_t value;            /* fixed: tokens */
    int32_t min, max;         /* uniform: inclusive range; lognormal: clamp range */
    double mean, cv;          /* lognormal: mean tokens and std / mean before clamping */
} scn_len;

typedef struct scn_tenant {
    char name[SCN_NAME_MAX];
    char *key;                /* owned; Bearer key */
    double weight;            /* > 0; divides the tenant's service for Jain's index */
    scn_arrival arrival;      /* process SCN_ARR_NONE: rows of the trace */
    scn_len prompt, output;   /* tokens */
    double ttft_ms, tpot_ms;  /* SLO targets; 0 = none */
    double start_s, stop_s;   /* s; stop_s 0 = the end of the run */
} scn_tenant;

typedef struct scn_trace_row {
    double t_s;               /* s since the start */
    int32_t tenant;           /* index into scn.tenants */
    int32_t prompt_tokens, output_tokens;
} scn_trace_row;

typedef struct scn {
    char name[SCN_NAME_MAX];
    char model[128];
    int chat;                 /* 1: /v1/chat/completions, 0: /v1/completions */
    double duration_s;        /* send window; 0 = none given */
    double drain_s;           /* after the window */
    double temperature;
    int32_t token_min, token_max;   /* prompt token ids drawn from [min, max] */
    double w_in, w_out;       /* service per input / output token */
    int32_t max_in_flight;
    scn_tenant *tenants;      /* (n_tenants) owned */
    int n_tenants;
    scn_trace_row *trace;     /* (n_trace) owned, sorted by t_s; NULL if none */
    size_t n_trace;
    char trace_path[512];     /* as resolved; "" if none */
} scn;

/*
 * Parse a scenario from len bytes of YAML. file names it in messages;
 * base_dir resolves a relative trace path (the trace itself is not read:
 * out->trace_path says which file scn_load should read). On failure out is
 * left zeroed, err (errlen bytes, may be NULL) says why, and the return is
 * TS_ERR_SCENARIO (or TS_ERR_NOMEM).
 */
int scn_parse(const char *yaml, size_t len, const char *file, const char *base_dir, scn *out,
              char *err, size_t errlen);

/*
 * Parse a trace CSV (len bytes) into s->trace, resolving tenant names
 * against s->tenants. The header line is required. Checks that every tenant
 * without an arrival process has at least one row, and that tenants with
 * one have none. TS_ERR_SCENARIO with err "file:line: ..." on failure, s
 * unchanged.
 */
int scn_trace_parse(scn *s, const char *csv, size_t len, const char *file, char *err,
                    size_t errlen);

/* Read path (and its trace, if any) and parse them. */
int scn_load(const char *path, scn *out, char *err, size_t errlen);

/* Free what s owns and zero it; safe on a zeroed scn and twice. */
void scn_free(scn *s);

/*
 * A duration such as "30s", "500ms", "2m", "1h" or "12.5" (seconds) into
 * seconds. 0 on success, -1 if s is not one or is negative.
 */
int scn_duration_parse(const char *s, double *out_s);

#endif
