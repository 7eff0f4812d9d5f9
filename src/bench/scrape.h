/*
 * scrape.h - what `tessera bench` reads from a tessera server besides its
 * answers: each tenant's engine time and cost (GET /admin/tenants) and each
 * model's scheduler geometry and step-time fit (GET /admin/models), both
 * with the admin key. The bench report prints the first beside its measured
 * latencies (cost per request and per 1k tokens at the SLO attainment it
 * measured); `tessera sim --calibrate` seeds its step-time model from the
 * second.
 *
 * Two halves. scr_fetch is the only code here that touches the network: one
 * blocking GET with libcurl, to the base URL given only (lg_url_check's
 * rules: http or https, no path, no credentials; redirects not followed,
 * proxies in the environment ignored), with a timeout and a cap on the
 * body (the curl options are loadgen's lg_curl_safe, the error message
 * reader its lg_error_message). The parsers are pure (cJSON, no I/O) and check everything: a field
 * that is missing or of the wrong type is an error naming the route, the
 * entry and the field, e.g.
 *     /admin/tenants: data[1].engine_seconds: expected a number >= 0
 * Fields the parser does not know are ignored, so a newer server still
 * parses. A price or cost the server reports as null (the model has no
 * price_per_hour: unknown, not free) reads as -1, report.h's "unknown".
 * The field names and units are the server's (README, "Admin routes").
 *
 * The caller owns what the parsers return (free with free()); nothing here
 * keeps state between calls.
 */
#ifndef TS_BENCH_SCRAPE_H
#define TS_BENCH_SCRAPE_H

#include <stddef.h>
#include <stdint.h>

#include "cost.h"
#include "sched.h"

#define SCR_BODY_MAX (16u << 20) /* bytes of an admin answer at most */
#define SCR_RATIO_MAX 32         /* step_ratio levels at most */
#define SCR_ACF_MAX   16         /* step_fit.acf lags at most */

/* One row of /admin/tenants: a tenant's use of one model. */
typedef struct scr_tenant {
    char name[SCHED_NAME_MAX];      /* "tenant" */
    char model[SCHED_NAME_MAX];     /* "model" */
    double engine_seconds;          /* s of engine time attributed by token share */
    double cost;                    /* engine_seconds x price / 3600, currency
                                       units; -1 unknown (no price) */
    double price_per_hour;          /* the model's; -1 unknown */
    uint64_t submitted, completed;  /* requests */
    uint64_t prompt_tokens, output_tokens; /* processed (recompute included) */
    uint64_t first_tokens;          /* requests that had a first token */
    double ttft_sum_s;              /* s from hand-over to the engine to the first
                                       token, summed over those; -1 unknown (a
                                       server before these fields) */
} scr_tenant;

/* One entry of /admin/models. */
typedef struct scr_model {
    char name[SCHED_NAME_MAX];      /* "model" */
    int embedding;                  /* 1: "kind" is "embedding", 0: "chat" */
    int policy;                     /* SCHED_POLICY_* from "fair" | "fcfs" */
    int32_t context_length;         /* positions a request may use */
    int32_t n_blocks;               /* device KV blocks */
    int32_t block_size;             /* positions per block */
    double block_bytes;             /* bytes per block */
    int32_t swap_blocks;            /* host swap slots */
    int32_t max_seqs;               /* sequences per step */
    int32_t budget_min, budget_max; /* tokens per step */
    double kv_high, kv_low;         /* admission watermarks, fractions of n_blocks */
    uint64_t steps;                 /* engine steps run */
    /* The step-time fit (cost.h): step_us = a + b prefill_tokens +
     * c decode_seqs + d attended_positions. */
    double theta[4];                /* us, us/prefill token, us/decode seq,
                                       us/attended position */
    double err_us;                  /* us; the fit's running |residual| scale */
    double err_autocorr;            /* lag-1 autocorrelation of the residuals, -1..1;
                                       0 when the server does not say */
    uint64_t fit_steps;             /* step times the fit used (0: the seed) */
    double seed[4];                 /* as theta: where the fit started (has_seed) */
    int has_seed;                   /* 0: the server does not say */
    double copy_bytes_per_us;       /* host<->device copy bandwidth */
    double price_per_hour;          /* currency units per hour; -1 unknown */
    /* "step_ratio": measured / predicted step time at n_ratio levels
     * (ascending in (0, 1); the quantiles non-decreasing, > 0) over
     * ratio_steps steps; n_ratio 0 when the server does not say. */
    int n_ratio;
    double ratio_level[SCR_RATIO_MAX], ratio_q[SCR_RATIO_MAX];
    uint64_t ratio_steps;
    /* "step_fit": a second fit of the step times that the server only
     * reports (it schedules by theta), and the spread of the step times
     * around it at ratio_level; sf_steps 0 when the server does not say. */
    double sf_theta[4];             /* as theta */
    double sf_err_us, sf_err_autocorr; /* as err_us, err_autocorr */
    uint64_t sf_steps;              /* step times it has used */
    double sf_q[SCR_RATIO_MAX];     /* measured / its predicted step time (n_ratio of them) */
    int sf_n_acf;                   /* "acf": the autocorrelation of log(measured / its
                                       predicted) at sf_n_acf lags; 0 when not said */
    double sf_acf_lag[SCR_ACF_MAX];     /* steps, ascending whole numbers */
    double sf_acf[SCR_ACF_MAX];         /* -1..1 */
    int sf_has_shape;               /* "shape" said (cost.h): its factors by rows; in
                                       other buckets than this build's, the answer is
                                       refused whole (its geometry may differ too) */
    cost_shape sf_shape;            /* ... as log means and counts; zero when not said */
} scr_model;

/* The step-time fits' coefficients as the server names them, in theta's
 * order: "a_us", "b_us_per_prefill_token", "c_us_per_decode_seq",
 * "d_us_per_attended_position". */
extern const char *const scr_coef_names[4];

/* GET url + path (path starts with '/') with "Authorization: Bearer key"
 * (key may be NULL: no header). OUT body: the answer's bytes, NUL-terminated,
 * malloc'd (free it); OUT len: their count. timeout_s bounds the whole
 * exchange. Returns 0 for a 200 answer; TS_ERR_AUTH for 401 (err says the
 * key was refused); TS_ERR_IO for anything else the server or the network
 * did (err names the URL, the status or libcurl's message, and the server's
 * error message when it sent one), or a body over SCR_BODY_MAX;
 * TS_ERR_INVAL for a bad URL or path; TS_ERR_NOMEM. On failure *body is
 * NULL. */
int scr_fetch(const char *url, const char *path, const char *key, double timeout_s, char **body, size_t *len,
              char *err, size_t errlen);

/* Parse an /admin/tenants answer (text, len bytes: need not be
 * NUL-terminated; nothing but whitespace may follow the JSON). OUT rows:
 * n rows in the answer's order (NULL when n is 0). Returns 0, TS_ERR_INVAL (not the expected JSON: err says where and
 * what) or TS_ERR_NOMEM; on failure *rows is NULL and *n 0. */
int scr_parse_tenants(const char *text, size_t len, scr_tenant **rows, size_t *n, char *err, size_t errlen);

/* Parse an /admin/models answer; as scr_parse_tenants. */
int scr_parse_models(const char *text, size_t len, scr_model **rows, size_t *n, char *err, size_t errlen);

/* A tenant's totals over the rows of one model (model non-NULL) or of
 * every model (NULL): engine seconds, requests, tokens and first tokens
 * with their TTFT sum add up (the sum unknown when a row's is); cost
 * adds up too, and is unknown (-1) when any row that holds engine time has
 * an unknown cost (an unpriced model's share would be missing from the
 * sum); price_per_hour is the rows' one price, or -1 when they differ or
 * none is known. Returns the number of rows summed (0: the tenant has none,
 * *out zeroed but for the unknowns at -1). */
size_t scr_tenant_total(const scr_tenant *rows, size_t n, const char *tenant, const char *model, scr_tenant *out);

/* The two fetch-and-parse calls `tessera bench` makes: base url, the admin
 * key. Results and errors as scr_fetch and the parsers. */
int scr_get_tenants(const char *url, const char *admin_key, double timeout_s, scr_tenant **rows, size_t *n,
                    char *err, size_t errlen);
int scr_get_models(const char *url, const char *admin_key, double timeout_s, scr_model **rows, size_t *n,
                   char *err, size_t errlen);

#endif
