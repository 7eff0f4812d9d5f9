/*
 * scenario.h - a `tessera bench` scenario: which tenants send what, how
 * often, with which API key, and what latency each one was promised.
 *
 * A scenario is a YAML file (schema below; examples in the scenarios folder). This
 * module parses and validates it into a scn value and owns nothing else: it
 * never opens a socket and never reads a clock. scn_parse works on a buffer
 * and is pure; scn_load reads the file (and the trace CSV it may name) and
 * hands the bytes to the pure parsers; a streamed trace is read a line at a
 * time through scn_trace_reader, the one row parser both ways use. Every error names the file, the
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
 * Names (the scenario's, tenants'), keys, the model and the trace path
 * may not hold spaces, quotes (' or "), backslashes or control characters:
 * they go into HTTP headers, report files and gnuplot strings as they
 * are. Without name:, the scenario is named by the file's base name up to
 * its first dot, which must obey the same rule.
 *
 * Durations are a number of seconds, or a number with a unit: ms, s, m, h
 * ("1.5s", "500ms", "2m"). Unknown keys are errors, so a typo cannot pass,
 * and so is a second YAML document; a key whose value is null (empty, ~,
 * null, Null, NULL) counts as absent.
 * A tenant without `arrival` takes its requests from the trace (below).
 *
 * Trace CSVs. The header line says which of three formats a file is in;
 * blank lines and lines starting with # are skipped, a UTF-8 byte-order
 * mark and CR line ends are accepted, fields are plain (no quoting).
 *
 *   tessera   timestamp_s,tenant,prompt_tokens,output_tokens
 *             timestamp_s: s since the start of the run (>= 0); tenant: a
 *             name (see the tenant map); tokens: integers 1..SCN_MAX_TOKENS.
 *   Azure     TIMESTAMP,ContextTokens,GeneratedTokens
 *             The Azure LLM inference traces, 2023 (Splitwise, ISCA'24) and
 *             2024 (DynamoLLM, HPCA'25) releases of github.com/Azure/
 *             AzurePublicDataset (AzureLLMInferenceDataset2023.md and
 *             ...2024.md): one row per request, TIMESTAMP the arrival as a
 *             UTC date-time, "2023-11-16 18:15:46.6805900" in 2023 (7
 *             fractional digits), "2024-05-10 00:00:00.009930+00:00" in
 *             2024; ContextTokens the prompt, GeneratedTokens the output.
 *             Arrival = seconds since the earliest row (the first, in a
 *             streamed file). Parsed here, with no locale or time zone: an
 *             optional T, 0 to 9 fractional digits, and Z or +-HH:MM.
 *             There is no tenant column (see assign).
 *   BurstGPT  Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
 *             github.com/HPMLL/BurstGPT (Wang et al., arXiv 2401.17644),
 *             Azure OpenAI GPT traffic: Timestamp in s since the trace start
 *             (a float), Model (ChatGPT or GPT-4) serves as the tenant name,
 *             Request and Response tokens the prompt and output; Total
 *             tokens and Log Type ("Conversation log", "API log") are read
 *             past. The release's _3 files add Session ID and Elapsed time
 *             columns, which are read past too: columns are found by name.
 *             Failed requests have Response tokens 0.
 * In the Azure and BurstGPT formats a row with a zero token count (a failed
 * request, or an empty prompt) is skipped and counted (scn_trace_stats.zero);
 * in tessera's own format it is an error. Every other bad row is an error
 * naming the file and line: a non-number, a negative count, a count above
 * SCN_MAX_TOKENS, too few or too many fields, a malformed date-time, a
 * time more than 400 days from the start, an unknown tenant, a tenant that
 * has an arrival process (its rows would go unused).
 *
 * A trace is loaded whole (and its rows sorted by time, stably, so they may
 * come in any order) or, with scn_opts.stream, read row by row while the
 * arrivals are streamed (arrivals.h), so a file larger than memory works;
 * its rows must then be in time order, and a row earlier than the one
 * before is an error naming its line. Reading stops at the first row past
 * the run's window, so rows after it are not read (a week's trace feeds an
 * hour's run without reading the week) and disorder among them goes
 * unseen. A streamed trace is not checked for a tenant without rows, which
 * would need the whole file.
 *
 * Options (scn_opts; `tessera bench` and `tessera sim` take them alike):
 *   time_scale  every trace timestamp is multiplied by it (0.5: twice the
 *               request rate, half the duration);
 *   load        every arrival process's rate is multiplied by it and every
 *               trace timestamp divided by it, so load 2 is twice the
 *               traffic from both kinds of tenant;
 *   tenant_map  "from=to,from=to,..." renames the trace's tenant column:
 *               to is a scenario tenant, or - to drop (skip and count) the
 *               rows; a from of * stands for every name the map does not
 *               list ("ChatGPT=acme,GPT-4=globex", "ChatGPT=acme,*=-",
 *               "*=acme"). A name neither listed nor covered by * stays as
 *               it is, and a row whose name is then no scenario tenant is
 *               an error naming its line and the name.
 *   assign      which tenant a row goes to. column (the default): its
 *               tenant column through the map, and for a format without
 *               one (Azure), round-robin; round-robin: the trace tenants
 *               (those without an arrival process) in turn, in scenario
 *               order, ignoring any tenant column; weighted: a trace tenant
 *               drawn with probability weight / sum of weights, from a
 *               generator seeded with assign_seed (deterministic).
 *   stream      read the trace while streaming (above); tessera sim
 *               only: bench builds its whole schedule first and refuses it.
 */
#ifndef TS_BENCH_SCENARIO_H
#define TS_BENCH_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#define SCN_MAX_TENANTS 64      /* in a scenario file; a scn built in code may have more */
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

typedef enum scn_trace_format {
    SCN_TRACE_TESSERA = 0,    /* timestamp_s,tenant,prompt_tokens,output_tokens */
    SCN_TRACE_AZURE,          /* TIMESTAMP,ContextTokens,GeneratedTokens */
    SCN_TRACE_BURSTGPT,       /* Timestamp,Model,Request tokens,Response tokens,... */
} scn_trace_format;

typedef enum scn_assign {
    SCN_ASSIGN_COLUMN = 0,    /* the tenant column through the map; round-robin without one */
    SCN_ASSIGN_ROUND_ROBIN,   /* the trace tenants in turn, whatever the column says */
    SCN_ASSIGN_WEIGHTED,      /* a trace tenant drawn by weight, seeded */
} scn_assign;

/* What a caller asks for; scn_opts_apply checks it and keeps a copy in the
 * scn (scn_feed), so loading and streaming cannot disagree. Zero = defaults. */
typedef struct scn_opts {
    double time_scale;        /* multiplies trace timestamps; 0 = 1 */
    double load;              /* multiplies arrival rates, divides trace timestamps; 0 = 1 */
    const char *tenant_map;   /* "from=to,..." (to may be -, from may be *); NULL = none */
    scn_assign assign;
    uint64_t assign_seed;     /* SCN_ASSIGN_WEIGHTED's generator */
    int stream;               /* 1: read the trace file while streaming, in time order */
    int idle_ok;              /* 1: a trace tenant may have no rows (tessera sim: the
                                 fleet's tenants a trace does not mention); bench wants
                                 every trace tenant in the trace */
} scn_opts;

#define SCN_MAP_DROP (-1)     /* scn_map_entry.to: skip the rows */

typedef struct scn_map_entry {
    char from[SCN_NAME_MAX];  /* a name in the trace's tenant column */
    int32_t to;               /* index into scn.tenants, or SCN_MAP_DROP */
} scn_map_entry;

typedef enum scn_other { SCN_OTHER_KEEP = 0, SCN_OTHER_DROP, SCN_OTHER_TENANT } scn_other;

/* The options as checked and resolved against the tenants. A zeroed feed
 * (a scn from scn_parse alone) is the defaults. */
typedef struct scn_feed {
    double time_scale;        /* as scn_opts; 0 = 1 */
    double load;              /* as scn_opts; 0 = 1 */
    scn_assign assign;
    uint64_t assign_seed;
    scn_map_entry *map;       /* (n_map) owned; the map's entries but * */
    size_t n_map;
    scn_other other;          /* names the map does not list: kept, dropped, or... */
    int32_t other_tenant;     /* ...sent to this tenant (SCN_OTHER_TENANT) */
    int stream;
    int idle_ok;
} scn_feed;

/* What became of a trace's data rows. */
typedef struct scn_trace_stats {
    size_t rows;              /* data rows read */
    size_t used;              /* rows that became requests (before tenants' start/stop) */
    size_t zero;              /* skipped: a zero token count (failed request, empty prompt) */
    size_t dropped;           /* skipped: the tenant map sent them to - */
} scn_trace_stats;

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
    scn_trace_format trace_format;   /* of the loaded (or, streamed, checked) trace */
    scn_trace_stats trace_stats;     /* of the loaded trace; a streamed one's are the stream's */
    scn_feed feed;            /* the options (scn_opts_apply); zero = defaults */
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
 * Parse a trace CSV (len bytes, any of the three formats) into s->trace,
 * sorted, its rows' tenants resolved by s->feed (the map, the assignment)
 * against s->tenants; t_s stays in the file's seconds (time_scale and load
 * apply when the arrivals are made). The header line is required. Checks
 * that every tenant without an arrival process has at least one row, and
 * that tenants with one have none. Sets s->trace_format and
 * s->trace_stats. TS_ERR_SCENARIO with err "file:line: ..." on failure, s
 * unchanged.
 */
int scn_trace_parse(scn *s, const char *csv, size_t len, const char *file, char *err,
                    size_t errlen);

/* Read path (and its trace, if any) and parse them. */
int scn_load(const char *path, scn *out, char *err, size_t errlen);

/*
 * Check o against s's tenants and keep it in s->feed (replacing what was
 * there); o NULL is the defaults. Apply before the trace is parsed: the map
 * and the assignment decide its rows' tenants. TS_ERR_SCENARIO with err
 * naming the option ("tenant_map: 'GPT-4=zz': no tenant 'zz' in the
 * scenario"), s unchanged; or TS_ERR_NOMEM.
 */
int scn_opts_apply(scn *s, const scn_opts *o, char *err, size_t errlen);

/*
 * One command-line option into o, for every command that loads scenarios:
 * name is "time-scale", "load", "tenant-map", "assign" (column, round-robin
 * or weighted) or "stream" (value ignored). o->tenant_map points into
 * value, which must outlive o. 0, or TS_ERR_INVAL with err "--load wants
 * ...".
 */
int scn_opts_arg(scn_opts *o, const char *name, const char *value, char *err, size_t errlen);

/* scn_load with options: parse path, apply o, then load the trace (whole,
 * or with o->stream only open it to check its header). */
int scn_load_opts(const char *path, const scn_opts *o, scn *out, char *err, size_t errlen);

/* Set s->trace_path to path and load it as scn_load_opts would (for a scn
 * built by other means than a scenario file, e.g. from a plan). */
int scn_trace_load(scn *s, const char *path, char *err, size_t errlen);

/* ---- reading a trace row by row -------------------------------------------- */

/* A trace file being read: its header is read at open, one row per next.
 * Holds one line buffer and O(tenants) tables, nothing per row. */
typedef struct scn_trace_reader scn_trace_reader;

/*
 * Open s->trace_path and read its header. s must outlive the reader and
 * not change while it is open. 0, TS_ERR_IO (cannot open) or
 * TS_ERR_SCENARIO ("file:line: ...") with err, or TS_ERR_NOMEM.
 */
int scn_trace_open(const scn *s, scn_trace_reader **out, char *err, size_t errlen);
/*
 * The next row in *row (t_s in the file's seconds, before time_scale and
 * load; rows skipped by the rules above are counted, not returned): 1, 0 at
 * the end, or a negative code with err "file:line: ..." (a row earlier than
 * the one before is one). After an error the reader stays at the error.
 */
int scn_trace_next(scn_trace_reader *r, scn_trace_row *row, char *err, size_t errlen);
/* The format and the counts so far. */
scn_trace_format scn_trace_reader_format(const scn_trace_reader *r);
scn_trace_stats scn_trace_reader_stats(const scn_trace_reader *r);
/* "tessera", "Azure" or "BurstGPT", for reports. */
const char *scn_trace_format_name(scn_trace_format f);
/* Close the file and free r; NULL is fine. */
void scn_trace_close(scn_trace_reader *r);

/* Free what s owns and zero it; safe on a zeroed scn and twice. */
void scn_free(scn *s);

/*
 * A duration such as "30s", "500ms", "2m", "1h" or "12.5" (seconds) into
 * seconds. 0 on success, -1 if s is not one or is negative.
 */
int scn_duration_parse(const char *s, double *out_s);

#endif
