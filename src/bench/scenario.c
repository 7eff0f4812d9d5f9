/* scenario.c - bench scenario parsing and checking; see scenario.h.
 *
 * util/ydoc.h loads the YAML into a node tree and this file walks it along
 * the schema, as serve/config.c does: the schema bounds the depth (an alias
 * cycle cannot recurse) and every value's type is known where it is read,
 * so each message can say where and what. The result is built in a local
 * scn and handed over only when everything passed.
 */
#include "scenario.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "ydoc.h"

#define MAX_DURATION_S (30 * 86400.0)   /* the longest time in a scenario or trace: 30 days */
#define KEY_MAX 512                      /* bytes of an API key, with the NUL */

/* A label, key or file name: it goes into HTTP headers and report files
 * as it is, so no spaces, quotes, backslashes or control characters. */
static int get_label(const ydoc *d, const yaml_node_t *n, const char *path, char *out, size_t cap) {
    int rc = ydoc_get_text(d, n, path, out, cap);
    if (rc || !n) return rc;
    for (const char *p = out; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == 0x7f)
            return ydoc_fail(d, n, path, "may not contain spaces, quotes, backslashes or control characters");
    return 0;
}

int scn_duration_parse(const char *s, double *out_s) {
    return ydoc_duration_parse(s, out_s) ? -1 : 0;
}

/* ---- sections -------------------------------------------------------------- */

static int parse_arrival(const ydoc *d, const yaml_node_t *n, const char *path, scn_arrival *a) {
    enum { PROCESS, RATE, CV, NK };
    static const char *const keys[NK] = {"process", "rate", "cv"};
    static const char *const names[] = {"poisson", "gamma", "constant"};
    static const scn_process processes[] = {SCN_ARR_POISSON, SCN_ARR_GAMMA, SCN_ARR_CONSTANT};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int k = 0, rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(i) ydoc_path_field(fp, path, keys[i])
    if (!v[PROCESS]) return ydoc_fail(d, n, FP(PROCESS), "required (poisson, gamma or constant)");
    if ((rc = ydoc_get_enum(d, v[PROCESS], FP(PROCESS), "process", names, 3, &k))) return rc;
    a->process = processes[k];
    if (!v[RATE]) return ydoc_fail(d, n, FP(RATE), "required (requests per second)");
    if ((rc = ydoc_get_number(d, v[RATE], FP(RATE), 1e-6, 1e6, 0, &a->rate))) return rc;
    a->cv = a->process == SCN_ARR_POISSON ? 1 : 0;
    if (a->process != SCN_ARR_GAMMA)
        return v[CV] ? ydoc_fail(d, v[CV], FP(CV), "only a gamma process takes a cv") : 0;
    if (!v[CV]) return ydoc_fail(d, n, FP(CV), "required for a gamma process (1 = Poisson, > 1 = bursts)");
    if ((rc = ydoc_get_number(d, v[CV], FP(CV), 0, 100, 0, &a->cv))) return rc;
    if (a->cv < 0.01) return ydoc_fail(d, v[CV], FP(CV), "must be at least 0.01 (use process: constant for 0)");
#undef FP
    return 0;
}

static int parse_len(const ydoc *d, const yaml_node_t *n, const char *path, scn_len *l) {
    enum { DIST, VALUE, MIN, MAX, MEAN, CV, NK };
    static const char *const keys[NK] = {"dist", "value", "min", "max", "mean", "cv"};
    static const char *const names[] = {"fixed", "uniform", "lognormal"};
    static const scn_dist dists[] = {SCN_LEN_FIXED, SCN_LEN_UNIFORM, SCN_LEN_LOGNORMAL};
    /* which keys each distribution takes and needs: value, min, max, mean, cv */
    static const int takes[3][5] = {{1, 0, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 1, 1, 1, 1}};
    static const int needs[3][5] = {{1, 0, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 0, 0, 1, 1}};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int k = 0, rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(i) ydoc_path_field(fp, path, keys[i])
    if (!v[DIST]) return ydoc_fail(d, n, FP(DIST), "required (fixed, uniform or lognormal)");
    if ((rc = ydoc_get_enum(d, v[DIST], FP(DIST), "distribution", names, 3, &k))) return rc;
    l->dist = dists[k];
    for (int i = VALUE; i < NK; i++) {
        if (v[i] && !takes[k][i - VALUE]) return ydoc_fail(d, v[i], FP(i), "not a parameter of dist %s", names[k]);
        if (!v[i] && needs[k][i - VALUE]) return ydoc_fail(d, n, FP(i), "required for dist %s", names[k]);
    }
    l->min = 1;
    l->max = SCN_MAX_TOKENS;
    if ((rc = ydoc_get_i32(d, v[VALUE], FP(VALUE), 1, SCN_MAX_TOKENS, &l->value))) return rc;
    if ((rc = ydoc_get_i32(d, v[MIN], FP(MIN), 1, SCN_MAX_TOKENS, &l->min))) return rc;
    if ((rc = ydoc_get_i32(d, v[MAX], FP(MAX), 1, SCN_MAX_TOKENS, &l->max))) return rc;
    if ((rc = ydoc_get_number(d, v[MEAN], FP(MEAN), 1, SCN_MAX_TOKENS, 0, &l->mean))) return rc;
    if ((rc = ydoc_get_number(d, v[CV], FP(CV), 0, 10, 0, &l->cv))) return rc;
#undef FP
    if (l->min > l->max) return ydoc_fail(d, n, path, "min (%d) is above max (%d)", (int)l->min, (int)l->max);
    if (l->dist == SCN_LEN_FIXED) l->min = l->max = l->value;
    if (l->dist == SCN_LEN_LOGNORMAL && (l->mean < l->min || l->mean > l->max))
        return ydoc_fail(d, n, path, "mean %g lies outside min..max (%d..%d)", l->mean, (int)l->min, (int)l->max);
    return 0;
}

static int parse_slo(const ydoc *d, const yaml_node_t *n, const char *path, scn_tenant *t) {
    enum { TTFT, TPOT, NK };
    static const char *const keys[NK] = {"ttft_ms", "tpot_ms"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
    if ((rc = ydoc_get_number(d, v[TTFT], ydoc_path_field(fp, path, keys[TTFT]), 0, 1e9, 0, &t->ttft_ms))) return rc;
    return ydoc_get_number(d, v[TPOT], ydoc_path_field(fp, path, keys[TPOT]), 0, 1e9, 0, &t->tpot_ms);
}

/* Lengths are required for a generated process; a trace brings its own. */
static int parse_lens(const ydoc *d, const yaml_node_t *n, const char *path, const yaml_node_t *arrival,
                      const yaml_node_t *prompt, const yaml_node_t *output, scn_tenant *t) {
    char fp[YDOC_PATH_MAX];
    int rc;
    t->prompt = (scn_len){SCN_LEN_FIXED, 1, 1, 1, 0, 0};
    t->output = t->prompt;
    if (!arrival && (prompt || output))
        return ydoc_fail(d, prompt ? prompt : output, path,
                         "lengths come from the trace when there is no arrival process");
    if (!arrival) return 0;
    if (!prompt) return ydoc_fail(d, n, ydoc_path_field(fp, path, "prompt_tokens"), "required with an arrival process");
    if ((rc = parse_len(d, prompt, ydoc_path_field(fp, path, "prompt_tokens"), &t->prompt))) return rc;
    if (!output) return ydoc_fail(d, n, ydoc_path_field(fp, path, "output_tokens"), "required with an arrival process");
    return parse_len(d, output, ydoc_path_field(fp, path, "output_tokens"), &t->output);
}

static int parse_tenant(const ydoc *d, const yaml_node_t *n, const char *path, scn_tenant *t) {
    enum { NAME, KEY, WEIGHT, ARRIVAL, PROMPT, OUTPUT, SLO, START, STOP, NK };
    static const char *const keys[NK] = {"name", "key", "weight", "arrival", "prompt_tokens",
                                         "output_tokens", "slo", "start", "stop"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX], key[KEY_MAX];
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(i) ydoc_path_field(fp, path, keys[i])
    if (!v[NAME]) return ydoc_fail(d, n, FP(NAME), "required");
    if ((rc = get_label(d, v[NAME], FP(NAME), t->name, sizeof t->name))) return rc;
    if (!v[KEY]) return ydoc_fail(d, n, FP(KEY), "required (the tenant's API key)");
    if ((rc = get_label(d, v[KEY], FP(KEY), key, sizeof key))) return rc;
    if (!(t->key = strdup(key))) return ydoc_nomem(d);
    t->weight = 1;
    if ((rc = ydoc_get_number(d, v[WEIGHT], FP(WEIGHT), 1e-6, 1e6, 0, &t->weight))) return rc;
    if (v[ARRIVAL] && (rc = parse_arrival(d, v[ARRIVAL], FP(ARRIVAL), &t->arrival))) return rc;
    if ((rc = parse_lens(d, n, path, v[ARRIVAL], v[PROMPT], v[OUTPUT], t))) return rc;
    if (v[SLO] && (rc = parse_slo(d, v[SLO], FP(SLO), t))) return rc;
    if ((rc = ydoc_get_duration(d, v[START], FP(START), 0, MAX_DURATION_S, &t->start_s))) return rc;
    if ((rc = ydoc_get_duration(d, v[STOP], FP(STOP), 0.001, MAX_DURATION_S, &t->stop_s))) return rc;
    if (t->stop_s > 0 && t->stop_s <= t->start_s) return ydoc_fail(d, v[STOP], FP(STOP), "must come after start");
#undef FP
    return 0;
}

/* token_ids and service: the draws and charges of every request. */
static int parse_ids(const ydoc *d, const yaml_node_t *n, scn *s) {
    static const char *const keys[] = {"min", "max"};
    const yaml_node_t *v[2];
    int rc = ydoc_map_fields(d, n, "token_ids", keys, 2, v);
    if (rc) return rc;
    if ((rc = ydoc_get_i32(d, v[0], "token_ids.min", 0, INT32_MAX, &s->token_min))) return rc;
    if ((rc = ydoc_get_i32(d, v[1], "token_ids.max", 0, INT32_MAX, &s->token_max))) return rc;
    return s->token_min > s->token_max ? ydoc_fail(d, n, "token_ids", "min is above max") : 0;
}

static int parse_service(const ydoc *d, const yaml_node_t *n, scn *s) {
    static const char *const keys[] = {"input_weight", "output_weight"};
    const yaml_node_t *v[2];
    int rc = ydoc_map_fields(d, n, "service", keys, 2, v);
    if (rc) return rc;
    if ((rc = ydoc_get_number(d, v[0], "service.input_weight", 0, 1e6, 0, &s->w_in))) return rc;
    if ((rc = ydoc_get_number(d, v[1], "service.output_weight", 0, 1e6, 0, &s->w_out))) return rc;
    return s->w_in + s->w_out <= 0 ? ydoc_fail(d, n, "service", "the weights may not both be 0") : 0;
}

static int parse_trace_path(const ydoc *d, const yaml_node_t *n, const char *base_dir, scn *s) {
    char tp[256];
    int rc = get_label(d, n, "trace", tp, sizeof tp);
    if (rc) return rc;
    if (tp[0] == '/' || !base_dir || !*base_dir)
        snprintf(s->trace_path, sizeof s->trace_path, "%s", tp);
    else if ((size_t)snprintf(s->trace_path, sizeof s->trace_path, "%s/%s", base_dir, tp) >= sizeof s->trace_path)
        return ydoc_fail(d, n, "trace", "path too long");
    return 0;
}

static int parse_tenants(const ydoc *d, const yaml_node_t *n, scn *s) {
    size_t nt;
    int rc = ydoc_get_seq(d, n, "tenants", &nt);
    if (rc) return rc;
    if (nt < 1 || nt > SCN_MAX_TENANTS)
        return ydoc_fail(d, n, "tenants", "expected 1 to %d tenants, got %zu", SCN_MAX_TENANTS, nt);
    if (!(s->tenants = calloc(nt, sizeof *s->tenants))) return ydoc_nomem(d);
    s->n_tenants = (int)nt;
    for (size_t i = 0; i < nt; i++) {
        char fp[YDOC_PATH_MAX];
        const yaml_node_t *item = ydoc_seq_at(d, n, i);
        if ((rc = parse_tenant(d, item, ydoc_path_index(fp, "tenants", i), &s->tenants[i]))) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->tenants[j].name, s->tenants[i].name))
                return ydoc_fail(d, item, fp, "tenant name '%s' repeated (tenants[%zu])", s->tenants[i].name, j);
    }
    return 0;
}

static int parse_root(const ydoc *d, const yaml_node_t *root, const char *base_dir, scn *s) {
    enum { NAME, MODEL, API, DUR, DRAIN, TEMP, IDS, SERVICE, INFLIGHT, TRACE, TENANTS, NK };
    static const char *const keys[NK] = {"name",        "model",     "api",     "duration", "drain",
                                         "temperature", "token_ids", "service", "max_in_flight",
                                         "trace",       "tenants"};
    static const char *const apis[] = {"completions", "chat"};
    const yaml_node_t *v[NK];
    int rc = ydoc_map_fields(d, root, "", keys, NK, v);
    if (rc) return rc;
    if ((rc = get_label(d, v[NAME], "name", s->name, sizeof s->name))) return rc;
    if (!v[MODEL]) return ydoc_fail(d, root, "model", "required (the model name requests ask for)");
    if ((rc = get_label(d, v[MODEL], "model", s->model, sizeof s->model))) return rc;
    if ((rc = ydoc_get_enum(d, v[API], "api", "api", apis, 2, &s->chat))) return rc;
    if ((rc = ydoc_get_duration(d, v[DUR], "duration", 0.001, MAX_DURATION_S, &s->duration_s))) return rc;
    s->drain_s = 30;
    if ((rc = ydoc_get_duration(d, v[DRAIN], "drain", 0, MAX_DURATION_S, &s->drain_s))) return rc;
    if ((rc = ydoc_get_number(d, v[TEMP], "temperature", 0, 2, 0, &s->temperature))) return rc;
    s->token_min = 100;
    s->token_max = 9999;
    if (v[IDS] && (rc = parse_ids(d, v[IDS], s))) return rc;
    s->w_in = 1;
    s->w_out = 2;
    if (v[SERVICE] && (rc = parse_service(d, v[SERVICE], s))) return rc;
    s->max_in_flight = 4000;
    if ((rc = ydoc_get_i32(d, v[INFLIGHT], "max_in_flight", 1, 100000, &s->max_in_flight))) return rc;
    if (v[TRACE] && (rc = parse_trace_path(d, v[TRACE], base_dir, s))) return rc;
    if (!v[TENANTS]) return ydoc_fail(d, root, "tenants", "required (a list of at least one tenant)");
    if ((rc = parse_tenants(d, v[TENANTS], s))) return rc;
    int any_trace = 0;
    for (int i = 0; i < s->n_tenants; i++) any_trace |= s->tenants[i].arrival.process == SCN_ARR_NONE;
    if (any_trace && !s->trace_path[0])
        return ydoc_fail(d, v[TENANTS], "tenants", "a tenant without an arrival process needs a trace file (trace: FILE.csv)");
    if (!any_trace && s->trace_path[0])
        return ydoc_fail(d, v[TRACE], "trace", "every tenant has an arrival process, so the trace would go unused");
    return 0;
}

int scn_parse(const char *yaml, size_t len, const char *file, const char *base_dir, scn *out, char *err,
              size_t errlen) {
    static const ydoc_opts opts = {TS_ERR_SCENARIO, "the file is empty"};
    memset(out, 0, sizeof *out);
    file = file ? file : "scenario";
    ydoc *d;
    int rc = ydoc_load_string(yaml, len, file, &opts, &d, err, errlen);
    if (rc) return rc;
    scn s;
    memset(&s, 0, sizeof s);
    rc = parse_root(d, ydoc_root(d), base_dir, &s);
    ydoc_free(d);
    if (rc) {
        scn_free(&s);
        return rc;
    }
    if (!s.name[0]) {
        /* The file's base name without its extension. */
        const char *b = strrchr(file, '/');
        b = b ? b + 1 : file;
        size_t n = strcspn(b, ".");
        if (n >= sizeof s.name) n = sizeof s.name - 1;
        memcpy(s.name, b, n);
        s.name[n] = 0;
    }
    *out = s;
    return 0;
}

/* ---- trace ----------------------------------------------------------------- */

/* Rows sort by time; ties keep their order in the file (the index breaks
 * them, since qsort alone is not stable). */
typedef struct indexed_row {
    scn_trace_row r;
    size_t i;
} indexed_row;

static int row_cmp(const void *a, const void *b) {
    const indexed_row *x = a, *y = b;
    if (x->r.t_s != y->r.t_s) return x->r.t_s < y->r.t_s ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

static int sort_rows(scn_trace_row *rows, size_t n) {
    indexed_row *w = malloc((n ? n : 1) * sizeof *w);
    if (!w) return TS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) w[i] = (indexed_row){rows[i], i};
    qsort(w, n, sizeof *w, row_cmp);
    for (size_t i = 0; i < n; i++) rows[i] = w[i].r;
    free(w);
    return 0;
}

/* One data line of the trace (NUL-terminated, cut at commas in place)
 * into *row. */
static int trace_row(const scn *s, char *buf, const char *file, size_t line, scn_trace_row *row, char *err,
                     size_t errlen) {
    char *f[4], *p = buf, *end;
    int k = 0;
    for (char *tok; k < 5 && (tok = strsep(&p, ",")); k++)
        if (k < 4) f[k] = tok;
    if (k != 4) return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: expected 4 fields, got %d", file, line, k);
    errno = 0;
    double t = strtod(f[0], &end);
    if (end == f[0] || *end || errno || !isfinite(t) || t < 0 || t > MAX_DURATION_S)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: timestamp_s '%.40s' is not a time in seconds >= 0",
                       file, line, f[0]);
    int ti = -1;
    for (int i = 0; i < s->n_tenants; i++)
        if (!strcmp(s->tenants[i].name, f[1])) ti = i;
    if (ti < 0)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: tenant '%.60s' is not in the scenario", file, line, f[1]);
    if (s->tenants[ti].arrival.process != SCN_ARR_NONE)
        return err_set(err, errlen, TS_ERR_SCENARIO,
                       "%s:%zu: tenant '%s' has an arrival process; its rows would go unused", file, line, f[1]);
    long v[2];
    for (int j = 0; j < 2; j++) {
        errno = 0;
        v[j] = strtol(f[2 + j], &end, 10);
        if (end == f[2 + j] || *end || errno || v[j] < 1 || v[j] > SCN_MAX_TOKENS)
            return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: %s '%.40s' is not an integer from 1 to %d", file,
                           line, j ? "output_tokens" : "prompt_tokens", f[2 + j], SCN_MAX_TOKENS);
    }
    *row = (scn_trace_row){t, ti, (int32_t)v[0], (int32_t)v[1]};
    return 0;
}

/* Append row to rows[0..*n), growing *cap. */
static int push_row(scn_trace_row **rows, size_t *n, size_t *cap, scn_trace_row row) {
    if (*n == *cap) {
        scn_trace_row *g = realloc(*rows, 2 * *cap * sizeof **rows);
        if (!g) return TS_ERR_NOMEM;
        *rows = g;
        *cap *= 2;
    }
    (*rows)[(*n)++] = row;
    return 0;
}

int scn_trace_parse(scn *s, const char *csv, size_t len, const char *file, char *err, size_t errlen) {
    static const char header_line[] = "timestamp_s,tenant,prompt_tokens,output_tokens";
    file = file ? file : "trace";
    size_t cap = 64, n = 0, line = 0;
    scn_trace_row *rows = malloc(cap * sizeof *rows);
    size_t *per = calloc((size_t)s->n_tenants + 1, sizeof *per);
    int rc = rows && per ? 0 : TS_ERR_NOMEM, header = 0;
    for (size_t off = 0; off < len && !rc;) {
        size_t e = off;
        while (e < len && csv[e] != '\n') e++;
        line++;
        char buf[512];
        size_t l = e - off;
        if (l && csv[off + l - 1] == '\r') l--;
        const char *src = csv + off;
        off = e + 1;
        if (l >= sizeof buf) {
            rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: line too long", file, line);
            break;
        }
        memcpy(buf, src, l);
        buf[l] = 0;
        if (memchr(buf, 0, l)) {
            rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: NUL byte", file, line);
        } else if (!buf[0] || buf[0] == '#') {
            continue;
        } else if (!header) {
            header = 1;
            if (strcmp(buf, header_line))
                rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: expected the header %s", file, line, header_line);
        } else {
            scn_trace_row row = {0};
            rc = trace_row(s, buf, file, line, &row, err, errlen);
            if (!rc) rc = push_row(&rows, &n, &cap, row);
            if (!rc) per[row.tenant]++;
        }
    }
    if (!rc && !header) rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: empty: no header line", file, line);
    for (int i = 0; !rc && i < s->n_tenants; i++)
        if (s->tenants[i].arrival.process == SCN_ARR_NONE && per[i] == 0)
            rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: tenant '%s' has no arrival process and no rows", file,
                         line, s->tenants[i].name);
    free(per);
    if (!rc) rc = sort_rows(rows, n);
    if (rc) {
        free(rows);
        return rc;
    }
    free(s->trace);
    s->trace = rows;
    s->n_trace = n;
    return 0;
}

/* ---- files ----------------------------------------------------------------- */

/* The whole file in a malloc'd buffer, or NULL with the reason in err.
 * Scenario and trace files are small; anything over 64 MiB is refused as
 * a mistake, and so is anything but a regular file (a FIFO would hang). */
static char *read_all(const char *path, size_t *len, char *err, size_t errlen) {
    int fd;
    struct stat st;
    if (file_open_regular(path, &fd, &st, err, errlen)) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        err_set(err, errlen, TS_ERR_NOMEM, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) break;
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *g = cap < (64u << 20) ? realloc(b, cap * 2) : NULL;
        if (!g) errno = cap < (64u << 20) ? ENOMEM : EFBIG;
        if (!g) free(b);
        b = g;
        cap *= 2;
    }
    if (b && ferror(f)) {
        free(b);
        b = NULL;
        errno = EIO;
    }
    fclose(f);
    if (b) *len = n;
    else err_set(err, errlen, TS_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    return b;
}

int scn_load(const char *path, scn *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = read_all(path, &len, err, errlen);
    if (!text) return TS_ERR_IO;
    char dir[512];
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    if (dl >= sizeof dir) dl = sizeof dir - 1;
    memcpy(dir, path, dl);
    dir[dl] = 0;
    if (!slash) snprintf(dir, sizeof dir, ".");
    int rc = scn_parse(text, len, path, dir, out, err, errlen);
    free(text);
    if (rc || !out->trace_path[0]) return rc;
    char *csv = read_all(out->trace_path, &len, err, errlen);
    if (!csv) {
        scn_free(out);
        return TS_ERR_IO;
    }
    rc = scn_trace_parse(out, csv, len, out->trace_path, err, errlen);
    free(csv);
    if (rc) scn_free(out);
    return rc;
}

void scn_free(scn *s) {
    if (!s) return;
    for (int i = 0; i < s->n_tenants && s->tenants; i++) free(s->tenants[i].key);
    free(s->tenants);
    free(s->trace);
    memset(s, 0, sizeof *s);
}
