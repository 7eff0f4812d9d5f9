/* scenario.c - bench scenario parsing and checking; see scenario.h.
 *
 * util/ydoc.h loads the YAML into a node tree and this file walks it along
 * the schema, as serve/config.c does: the schema bounds the depth (an alias
 * cycle cannot recurse) and every value's type is known where it is read,
 * so each message can say where and what. The result is built in a local
 * scn and handed over only when everything passed.
 *
 * Trace CSVs go through one reader (scn_trace_reader) whether they are
 * loaded whole from a buffer or streamed from a file, so the two ways
 * cannot parse a row differently; only the file case does I/O, and it
 * holds one line at a time.
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
#include "rng.h"
#include "ydoc.h"

#define MAX_DURATION_S (30 * 86400.0)   /* the longest time in a scenario or trace: 30 days */
#define KEY_MAX 512                      /* bytes of an API key, with the NUL */

/* A label, key or file name: it goes into HTTP headers, report files and
 * the gnuplot script as it is, so no spaces, quotes (' or "), backslashes
 * or control characters. A ' would end a gnuplot string, and what followed
 * would run as gnuplot commands, system() among them (plot.c also escapes
 * names, for scenarios built in code). Returns the first bad byte, or NULL. */
static const char *label_bad(const char *s) {
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\'' || *p == '\\' || *p == 0x7f) return p;
    return NULL;
}

#define LABEL_RULE "may not contain spaces, quotes, backslashes or control characters"

static int get_label(const ydoc *d, const yaml_node_t *n, const char *path, char *out, size_t cap) {
    int rc = ydoc_get_text(d, n, path, out, cap);
    if (rc || !n) return rc;
    return label_bad(out) ? ydoc_fail(d, n, path, LABEL_RULE) : 0;
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
        /* It obeys the rule a name: would, and the message says how out. */
        if (label_bad(s.name) || !s.name[0]) {
            rc = err_set(err, errlen, TS_ERR_SCENARIO,
                         "%s: the scenario's name comes from the file name, '%s', which is empty or %s: "
                         "give the scenario a name: key", file, s.name, LABEL_RULE);
            scn_free(&s);
            return rc;
        }
    }
    *out = s;
    return 0;
}

/* ---- options --------------------------------------------------------------- */

#define FACTOR_MIN 1e-6
#define FACTOR_MAX 1e6

static int tenant_index(const scn *s, const char *name) {
    for (int i = 0; i < s->n_tenants; i++)
        if (!strcmp(s->tenants[i].name, name)) return i;
    return -1;
}

static int check_factor(double v, const char *name, char *err, size_t errlen) {
    if (v == 0 || (v >= FACTOR_MIN && v <= FACTOR_MAX)) return 0;
    return err_set(err, errlen, TS_ERR_SCENARIO, "%s: %g is not a factor from %g to %g", name, v, FACTOR_MIN,
                   FACTOR_MAX);
}

/* One "from=to" of the tenant map into f (an entry, or the * rule). */
static int map_entry(const scn *s, char *item, scn_feed *f, int *star, char *err, size_t errlen) {
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1])
        return err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: '%.80s' is not from=to", item);
    *eq = 0;
    const char *from = item, *to = eq + 1;
    int32_t ti = SCN_MAP_DROP;
    if (strcmp(to, "-")) {
        if ((ti = tenant_index(s, to)) < 0)
            return err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: '%.60s=%.60s': no tenant '%.60s' in the scenario",
                           from, to, to);
        if (s->tenants[ti].arrival.process != SCN_ARR_NONE)
            return err_set(err, errlen, TS_ERR_SCENARIO,
                           "tenant_map: '%.60s=%.60s': tenant '%.60s' has an arrival process; trace rows go only "
                           "to tenants without one", from, to, to);
    }
    if (!strcmp(from, "*")) {
        if ((*star)++) return err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: * given twice");
        f->other = ti == SCN_MAP_DROP ? SCN_OTHER_DROP : SCN_OTHER_TENANT;
        f->other_tenant = ti == SCN_MAP_DROP ? 0 : ti;
        return 0;
    }
    if (strlen(from) >= SCN_NAME_MAX)
        return err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: name '%.60s...' is too long", from);
    for (size_t j = 0; j < f->n_map; j++)
        if (!strcmp(f->map[j].from, from))
            return err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: '%.60s' mapped twice", from);
    scn_map_entry *e = &f->map[f->n_map++];
    snprintf(e->from, sizeof e->from, "%s", from);
    e->to = ti;
    return 0;
}

static int parse_map(const scn *s, const char *text, scn_feed *f, char *err, size_t errlen) {
    if (!text || !*text) return 0;
    size_t n = 1;
    for (const char *p = text; *p; p++) n += *p == ',';
    char *copy = strdup(text);
    f->map = calloc(n, sizeof *f->map);
    int rc = copy && f->map ? 0 : TS_ERR_NOMEM, star = 0;
    char *p = copy;
    for (char *item; !rc && (item = strsep(&p, ","));)
        rc = *item ? map_entry(s, item, f, &star, err, errlen)
                   : err_set(err, errlen, TS_ERR_SCENARIO, "tenant_map: an empty entry in '%.80s'", text);
    free(copy);
    return rc;
}

int scn_opts_apply(scn *s, const scn_opts *o, char *err, size_t errlen) {
    static const scn_opts defaults;
    if (!o) o = &defaults;
    int rc = check_factor(o->time_scale, "time_scale", err, errlen);
    if (!rc) rc = check_factor(o->load, "load", err, errlen);
    if (!rc && (o->assign < SCN_ASSIGN_COLUMN || o->assign > SCN_ASSIGN_WEIGHTED))
        rc = err_set(err, errlen, TS_ERR_SCENARIO, "assign: %d is not a rule", (int)o->assign);
    if (rc) return rc;
    scn_feed f = {.time_scale = o->time_scale, .load = o->load, .assign = o->assign,
                  .assign_seed = o->assign_seed, .stream = !!o->stream,
                  .idle_ok = !!o->idle_ok};
    if ((rc = parse_map(s, o->tenant_map, &f, err, errlen))) {
        free(f.map);
        return rc;
    }
    free(s->feed.map);
    s->feed = f;
    return 0;
}

int scn_opts_arg(scn_opts *o, const char *name, const char *value, char *err, size_t errlen) {
    static const char *const rules[] = {"column", "round-robin", "weighted"};
    int is_scale = !strcmp(name, "time-scale");
    if (is_scale || !strcmp(name, "load")) {
        char *end;
        errno = 0;
        double v = value ? strtod(value, &end) : 0;
        if (!value || end == value || *end || errno || !(v >= FACTOR_MIN && v <= FACTOR_MAX))
            return err_set(err, errlen, TS_ERR_INVAL, "--%s wants a factor from %g to %g, got '%.40s'", name,
                           FACTOR_MIN, FACTOR_MAX, value ? value : "");
        *(is_scale ? &o->time_scale : &o->load) = v;
        return 0;
    }
    if (!strcmp(name, "tenant-map")) {
        o->tenant_map = value;
        return 0;
    }
    if (!strcmp(name, "assign")) {
        for (int i = 0; i < 3; i++)
            if (value && !strcmp(value, rules[i])) {
                o->assign = (scn_assign)i;
                return 0;
            }
        return err_set(err, errlen, TS_ERR_INVAL, "--assign wants column, round-robin or weighted, got '%.40s'",
                       value ? value : "");
    }
    if (!strcmp(name, "stream")) {
        o->stream = 1;
        return 0;
    }
    return err_set(err, errlen, TS_ERR_INVAL, "no trace option '%.40s'", name);
}

/* ---- trace ----------------------------------------------------------------- */

#define LINE_CAP 1024                    /* bytes of a trace line, with the NUL */
#define MAX_COLS 16                      /* fields of a trace line */
#define MAX_TRACE_S (400 * 86400.0)      /* the latest trace time: BurstGPT spans months */

static const char TESSERA_HEADER[] = "timestamp_s,tenant,prompt_tokens,output_tokens";
static const char *const FORMAT_NAMES[] = {"tessera", "Azure", "BurstGPT"};

/* A tenant name and its index, sorted by name for lookups by bsearch: a
 * trace has millions of rows and a scenario built from a plan hundreds of
 * tenants. */
typedef struct name_ix {
    const char *name;
    int32_t i;
} name_ix;

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

struct scn_trace_reader {
    const scn *s;
    const char *file;         /* for messages */
    FILE *f;                  /* the file, or NULL when reading mem */
    const char *mem;          /* (len) the whole trace, when loaded whole */
    size_t len, off;
    size_t line;              /* 1-based number of the last line read */
    int ordered;              /* rows must come in time order (streamed) */
    int rc;                   /* a sticky error, 0 if none */
    scn_trace_format fmt;
    int ncols;                /* fields in every line */
    int c_time, c_tenant, c_prompt, c_output;   /* column indices; c_tenant -1: none */
    int have_base;            /* Azure: base_s/base_frac hold the first row's time */
    int64_t base_s;           /* s since 1970 */
    double base_frac;         /* s, [0, 1) */
    double last_t;            /* ordered: the previous row's time, s */
    name_ix *names;           /* (n_tenants) */
    int32_t *cand;            /* (n_cand) the trace tenants, in scenario order */
    double *cum;              /* (n_cand) their cumulative weights */
    int n_cand;
    size_t rr;                /* round-robin: rows assigned so far */
    rng pick;                 /* weighted draws */
    scn_trace_stats st;
    char hdr[MAX_COLS][32];   /* the header's column names, for messages */
    char buf[LINE_CAP];
};

/* The next line into r->buf, without its line end: 1, 0 at the end, or an
 * error. Bytes past the buffer are read and dropped, so an over-long line
 * is reported at its own number. */
static int read_line(scn_trace_reader *r, char *err, size_t errlen) {
    size_t l = 0;
    int nul = 0, over = 0;
    if (r->f) {
        int c, any = 0;
        while ((c = getc_unlocked(r->f)) != EOF) {
            any = 1;
            if (c == '\n') break;
            nul |= c == 0;
            if (l < sizeof r->buf - 1) r->buf[l++] = (char)c;
            else over = 1;
        }
        if (ferror(r->f)) return err_set(err, errlen, TS_ERR_IO, "%s: cannot read: %s", r->file, strerror(errno));
        if (!any) return 0;
    } else {
        if (r->off >= r->len) return 0;
        const char *src = r->mem + r->off, *nl = memchr(src, '\n', r->len - r->off);
        size_t n = nl ? (size_t)(nl - src) : r->len - r->off;
        r->off += n + 1;
        over = n >= sizeof r->buf;
        l = over ? sizeof r->buf - 1 : n;
        memcpy(r->buf, src, l);
        nul = memchr(src, 0, n) != NULL;
    }
    r->line++;
    if (!over && l && r->buf[l - 1] == '\r') l--;
    r->buf[l] = 0;
    if (over) return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: line too long", r->file, r->line);
    if (nul) return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: NUL byte", r->file, r->line);
    return 1;
}

/* The next line that is neither blank nor a comment. */
static int next_data_line(scn_trace_reader *r, char *err, size_t errlen) {
    int rc;
    while ((rc = read_line(r, err, errlen)) == 1)
        if (r->buf[0] && r->buf[0] != '#') break;
    return rc;
}

/* Cut buf at commas in place: the field count (MAX_COLS + 1 for more). */
static int split(char *buf, char **f) {
    int k = 0;
    for (char *p = buf, *tok; (tok = strsep(&p, ","));) {
        if (k == MAX_COLS) return MAX_COLS + 1;
        f[k++] = tok;
    }
    return k;
}

static int find_col(char **f, int k, const char *name) {
    for (int i = 0; i < k; i++)
        if (!strcmp(f[i], name)) return i;
    return -1;
}

/* Recognise the header line in r->buf. */
static int read_header(scn_trace_reader *r, char *err, size_t errlen) {
    int rc = next_data_line(r, err, errlen);
    if (rc < 0) return rc;
    if (rc == 0) return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: empty: no header line", r->file, r->line);
    char *h = r->buf, *f[MAX_COLS + 1];
    if (!memcmp(h, "\xef\xbb\xbf", 3)) h += 3;    /* a UTF-8 byte-order mark */
    int tessera = !strcmp(h, TESSERA_HEADER), k = split(h, f);
    if (tessera) {
        r->fmt = SCN_TRACE_TESSERA;
        r->c_time = 0, r->c_tenant = 1, r->c_prompt = 2, r->c_output = 3;
    } else if (k <= MAX_COLS && find_col(f, k, "TIMESTAMP") >= 0 && find_col(f, k, "ContextTokens") >= 0 &&
               find_col(f, k, "GeneratedTokens") >= 0) {
        r->fmt = SCN_TRACE_AZURE;
        r->c_time = find_col(f, k, "TIMESTAMP"), r->c_tenant = -1;
        r->c_prompt = find_col(f, k, "ContextTokens"), r->c_output = find_col(f, k, "GeneratedTokens");
    } else if (k <= MAX_COLS && find_col(f, k, "Timestamp") >= 0 && find_col(f, k, "Model") >= 0 &&
               find_col(f, k, "Request tokens") >= 0 && find_col(f, k, "Response tokens") >= 0) {
        r->fmt = SCN_TRACE_BURSTGPT;
        r->c_time = find_col(f, k, "Timestamp"), r->c_tenant = find_col(f, k, "Model");
        r->c_prompt = find_col(f, k, "Request tokens"), r->c_output = find_col(f, k, "Response tokens");
    } else {
        return err_set(err, errlen, TS_ERR_SCENARIO,
                       "%s:%zu: expected the header %s (tessera), TIMESTAMP,ContextTokens,GeneratedTokens (Azure "
                       "LLM inference trace) or Timestamp,Model,Request tokens,Response tokens,Total tokens,Log "
                       "Type (BurstGPT)", r->file, r->line, TESSERA_HEADER);
    }
    r->ncols = k;
    for (int i = 0; i < k; i++) snprintf(r->hdr[i], sizeof r->hdr[i], "%s", f[i]);
    return 0;
}

/* n decimal digits at *p into *v, advancing *p; -1 if they are not there. */
static int digits(const char **p, int n, int *v) {
    *v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9') return -1;
        *v = *v * 10 + (**p - '0');
    }
    return 0;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H.
 * Hinnant's days_from_civil: eras of 400 years, March-based years so the
 * leap day comes last). */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* "YYYY-MM-DD HH:MM:SS[.f...][Z|+HH:MM|-HH:MM]" (or a T between date and
 * time) into whole seconds since 1970 UTC and the fraction. -1 if it is
 * not one. No locale and no time zone database: the offset is explicit. */
static int parse_datetime(const char *p, int64_t *sec, double *frac) {
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, s;
    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' || digits(&p, 2, &d)) return -1;
    if ((*p != ' ' && *p != 'T') || (p++, digits(&p, 2, &h)) || *p++ != ':' || digits(&p, 2, &mi) ||
        *p++ != ':' || digits(&p, 2, &s))
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 ||
        s > 59)
        return -1;
    double f = 0, scale = 0.1;
    if (*p == '.') {
        const char *start = ++p;
        for (; *p >= '0' && *p <= '9'; p++, scale /= 10) f += (*p - '0') * scale;
        if (p == start || p - start > 9) return -1;
    }
    int off = 0;
    if (*p == 'Z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59) return -1;
        off = sign * (oh * 3600 + om * 60);
    }
    if (*p) return -1;
    *sec = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - off;
    *frac = f;
    return 0;
}

/* The row's time, s (the file's, before time_scale and load). */
static int row_time(scn_trace_reader *r, const char *v, double *t, char *err, size_t errlen) {
    const char *col = r->hdr[r->c_time];
    if (r->fmt == SCN_TRACE_AZURE) {
        int64_t sec;
        double frac;
        if (parse_datetime(v, &sec, &frac))
            return err_set(err, errlen, TS_ERR_SCENARIO,
                           "%s:%zu: %s '%.40s' is not a date-time such as 2023-11-16 18:15:46.6805900", r->file,
                           r->line, col, v);
        if (!r->have_base) r->have_base = 1, r->base_s = sec, r->base_frac = frac;
        /* Whole seconds first, so the fraction keeps its digits. */
        *t = (double)(sec - r->base_s) + (frac - r->base_frac);
        if (fabs(*t) > MAX_TRACE_S)
            return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: %s '%.40s' is more than %g days from the first row",
                           r->file, r->line, col, v, MAX_TRACE_S / 86400);
        return 0;
    }
    char *end;
    errno = 0;
    *t = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(*t) || *t < 0 || *t > MAX_TRACE_S)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: %s '%.40s' is not a time in seconds >= 0", r->file,
                       r->line, col, v);
    return 0;
}

/* A token count: 1.. in tessera's format, 0.. in the others (0 skips). */
static int row_tokens(const scn_trace_reader *r, int c, const char *v, int32_t *out, char *err, size_t errlen) {
    long lo = r->fmt == SCN_TRACE_TESSERA ? 1 : 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < lo || n > SCN_MAX_TOKENS)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: %s '%.40s' is not an integer from %ld to %d", r->file,
                       r->line, r->hdr[c], v, lo, SCN_MAX_TOKENS);
    *out = (int32_t)n;
    return 0;
}

/* The tenant of a row named name: 1 with *ti, 0 to drop it, or an error. */
static int row_named_tenant(const scn_trace_reader *r, const char *name, int32_t *ti, char *err, size_t errlen) {
    const scn *s = r->s;
    const scn_feed *fd = &s->feed;
    int found = 0;
    for (size_t j = 0; j < fd->n_map && !found; j++)
        if (!strcmp(fd->map[j].from, name)) found = 1, *ti = fd->map[j].to;
    if (!found && fd->other == SCN_OTHER_DROP) *ti = SCN_MAP_DROP, found = 1;
    if (!found && fd->other == SCN_OTHER_TENANT) *ti = fd->other_tenant, found = 1;
    if (!found) {
        name_ix key = {name, 0}, *hit = bsearch(&key, r->names, (size_t)s->n_tenants, sizeof key, name_cmp);
        if (!hit)
            return err_set(err, errlen, TS_ERR_SCENARIO,
                           "%s:%zu: tenant '%.60s' is not in the scenario (map it: tenant_map %.60s=NAME, or *=NAME "
                           "or *=- for every name not listed)", r->file, r->line, name, name);
        *ti = hit->i;
    }
    if (*ti == SCN_MAP_DROP) return 0;
    if (s->tenants[*ti].arrival.process != SCN_ARR_NONE)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: tenant '%s' has an arrival process; its rows would go unused",
                       r->file, r->line, s->tenants[*ti].name);
    return 1;
}

/* The tenant of a row by the assignment rule. */
static int32_t row_assigned_tenant(scn_trace_reader *r) {
    if (r->s->feed.assign != SCN_ASSIGN_WEIGHTED) return r->cand[r->rr++ % (size_t)r->n_cand];
    double u = rng_uniform(&r->pick) * r->cum[r->n_cand - 1];
    int lo = 0, hi = r->n_cand - 1;     /* the first cumulative weight above u */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->cum[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return r->cand[lo];
}

/* One data line (in r->buf) into *row: 1, 0 when the row is skipped (and
 * counted), or an error. */
static int parse_row(scn_trace_reader *r, scn_trace_row *row, char *err, size_t errlen) {
    char *f[MAX_COLS + 1];
    int k = split(r->buf, f);
    if (k != r->ncols)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: expected %d fields, got %d%s", r->file, r->line,
                       r->ncols, k > MAX_COLS ? MAX_COLS + 1 : k, k > MAX_COLS ? " or more" : "");
    r->st.rows++;
    double t = 0;
    int rc = row_time(r, f[r->c_time], &t, err, errlen);
    if (rc) return rc;
    if (r->ordered && r->st.rows > 1 && t < r->last_t)
        return err_set(err, errlen, TS_ERR_SCENARIO,
                       "%s:%zu: %s '%.40s' is earlier than the row before (%.9g s); a streamed trace must be in time "
                       "order", r->file, r->line, r->hdr[r->c_time], f[r->c_time], r->last_t);
    r->last_t = t;
    int32_t ti = SCN_MAP_DROP;
    if (r->c_tenant >= 0 && r->s->feed.assign == SCN_ASSIGN_COLUMN) {
        if ((rc = row_named_tenant(r, f[r->c_tenant], &ti, err, errlen)) < 0) return rc;
    }
    int32_t p, o;
    if ((rc = row_tokens(r, r->c_prompt, f[r->c_prompt], &p, err, errlen))) return rc;
    if ((rc = row_tokens(r, r->c_output, f[r->c_output], &o, err, errlen))) return rc;
    if (p == 0 || o == 0) {
        r->st.zero++;
        return 0;
    }
    if (r->c_tenant >= 0 && r->s->feed.assign == SCN_ASSIGN_COLUMN) {
        if (ti == SCN_MAP_DROP) {
            r->st.dropped++;
            return 0;
        }
    } else {
        ti = row_assigned_tenant(r);
    }
    *row = (scn_trace_row){t, ti, p, o};
    r->st.used++;
    return 1;
}

static void reader_deinit(scn_trace_reader *r) {
    if (r->f) fclose(r->f);
    free(r->names);
    free(r->cand);
    free(r->cum);
}

/* Tables, then the header. ordered: rows must come in time order. */
static int reader_init(scn_trace_reader *r, const scn *s, const char *file, int ordered, char *err, size_t errlen) {
    size_t nt = (size_t)s->n_tenants;
    r->s = s;
    r->file = file;
    r->ordered = ordered;
    r->names = malloc((nt ? nt : 1) * sizeof *r->names);
    r->cand = malloc((nt ? nt : 1) * sizeof *r->cand);
    r->cum = malloc((nt ? nt : 1) * sizeof *r->cum);
    if (!r->names || !r->cand || !r->cum) return TS_ERR_NOMEM;
    double w = 0;
    for (size_t i = 0; i < nt; i++) {
        r->names[i] = (name_ix){s->tenants[i].name, (int32_t)i};
        if (s->tenants[i].arrival.process != SCN_ARR_NONE) continue;
        r->cand[r->n_cand] = (int32_t)i;
        r->cum[r->n_cand++] = w += s->tenants[i].weight;
    }
    qsort(r->names, nt, sizeof *r->names, name_cmp);
    rng_seed_stream(&r->pick, s->feed.assign_seed, UINT64_C(0x7472616365));   /* "trace" */
    int rc = read_header(r, err, errlen);
    if (!rc && !r->n_cand)
        rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s: every tenant has an arrival process, so the trace would go unused",
                     file);
    return rc;
}

int scn_trace_next(scn_trace_reader *r, scn_trace_row *row, char *err, size_t errlen) {
    if (r->rc) return err_set(err, errlen, r->rc, "%s:%zu: reading stopped at an error", r->file, r->line);
    for (;;) {
        int rc = next_data_line(r, err, errlen);
        if (rc == 0) return 0;
        if (rc == 1 && (rc = parse_row(r, row, err, errlen)) == 0) continue;   /* skipped */
        if (rc < 0) r->rc = rc;
        return rc;
    }
}

int scn_trace_open(const scn *s, scn_trace_reader **out, char *err, size_t errlen) {
    *out = NULL;
    int fd;
    struct stat st;
    if (file_open_regular(s->trace_path, &fd, &st, err, errlen)) return TS_ERR_IO;
    scn_trace_reader *r = calloc(1, sizeof *r);
    FILE *f = r ? fdopen(fd, "rb") : NULL;
    if (!f) {
        close(fd);
        free(r);
        return err_set(err, errlen, TS_ERR_NOMEM, "%s: %s", s->trace_path, strerror(errno ? errno : ENOMEM));
    }
    r->f = f;
    int rc = reader_init(r, s, s->trace_path, 1, err, errlen);
    if (rc) {
        scn_trace_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

scn_trace_format scn_trace_reader_format(const scn_trace_reader *r) { return r->fmt; }
const char *scn_trace_format_name(scn_trace_format f) {
    return (unsigned)f < sizeof FORMAT_NAMES / sizeof *FORMAT_NAMES ? FORMAT_NAMES[f] : "unknown";
}
scn_trace_stats scn_trace_reader_stats(const scn_trace_reader *r) { return r->st; }

void scn_trace_close(scn_trace_reader *r) {
    if (!r) return;
    reader_deinit(r);
    free(r);
}

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

/* An Azure trace loaded whole counts from its earliest row, which need not
 * be its first when the rows are out of order. */
static void shift_to_zero(scn_trace_row *rows, size_t n) {
    double lo = 0;
    for (size_t i = 0; i < n; i++) lo = rows[i].t_s < lo ? rows[i].t_s : lo;
    for (size_t i = 0; i < n && lo < 0; i++) rows[i].t_s -= lo;
}

/* Every trace tenant has at least one row. */
static int check_rows_per_tenant(const scn *s, const scn_trace_row *rows, size_t n, const char *file, size_t line,
                                 char *err, size_t errlen) {
    size_t *per = calloc((size_t)s->n_tenants + 1, sizeof *per);
    if (!per) return TS_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) per[rows[i].tenant]++;
    int rc = 0;
    for (int i = 0; !rc && i < s->n_tenants; i++)
        if (s->tenants[i].arrival.process == SCN_ARR_NONE && per[i] == 0)
            rc = err_set(err, errlen, TS_ERR_SCENARIO, "%s:%zu: tenant '%s' has no arrival process and no rows", file,
                         line, s->tenants[i].name);
    free(per);
    return rc;
}

int scn_trace_parse(scn *s, const char *csv, size_t len, const char *file, char *err, size_t errlen) {
    file = file ? file : "trace";
    scn_trace_reader r = {.mem = csv, .len = len};
    size_t cap = 64, n = 0;
    scn_trace_row *rows = malloc(cap * sizeof *rows), row;
    int rc = rows ? reader_init(&r, s, file, 0, err, errlen) : TS_ERR_NOMEM;
    while (!rc && (rc = scn_trace_next(&r, &row, err, errlen)) == 1) rc = push_row(&rows, &n, &cap, row);
    if (!rc && r.fmt == SCN_TRACE_AZURE) shift_to_zero(rows, n);
    if (!rc && !s->feed.idle_ok) rc = check_rows_per_tenant(s, rows, n, file, r.line, err, errlen);
    if (!rc) rc = sort_rows(rows, n);
    reader_deinit(&r);
    if (rc) {
        free(rows);
        return rc;
    }
    free(s->trace);
    s->trace = rows;
    s->n_trace = n;
    s->trace_format = r.fmt;
    s->trace_stats = r.st;
    return 0;
}

/* ---- files ----------------------------------------------------------------- */

#define FILE_MAX (64u << 20)   /* bytes: scenario and trace files loaded whole */

/* The whole file, or NULL with the reason in err. Scenario and trace files
 * are small; anything over FILE_MAX is refused as a mistake (with the way
 * out, for a trace), and so is anything but a regular file (a FIFO would
 * hang). */
static char *read_all(const char *path, size_t *len, char *err, size_t errlen) {
    char *b;
    if (!file_read_all(path, FILE_MAX, &b, len, err, errlen)) return b;
    if (*len > FILE_MAX)
        err_set(err, errlen, TS_ERR_IO,
                "%s: over %u MiB, too large to load whole (tessera sim --stream reads a trace of any size, its rows "
                "in time order)", path, FILE_MAX >> 20);
    return NULL;
}

/* The trace at s->trace_path: loaded whole, or (streamed) its header read
 * to catch a wrong file now rather than when the stream starts. */
static int load_trace(scn *s, char *err, size_t errlen) {
    if (s->feed.stream) {
        scn_trace_reader *r;
        int rc = scn_trace_open(s, &r, err, errlen);
        if (!rc) s->trace_format = scn_trace_reader_format(r);
        scn_trace_close(r);
        return rc;
    }
    size_t len;
    char *csv = read_all(s->trace_path, &len, err, errlen);
    if (!csv) return TS_ERR_IO;
    int rc = scn_trace_parse(s, csv, len, s->trace_path, err, errlen);
    free(csv);
    return rc;
}

int scn_trace_load(scn *s, const char *path, char *err, size_t errlen) {
    if (strlen(path) >= sizeof s->trace_path)
        return err_set(err, errlen, TS_ERR_SCENARIO, "%.60s...: trace path too long", path);
    snprintf(s->trace_path, sizeof s->trace_path, "%s", path);
    return load_trace(s, err, errlen);
}

int scn_load_opts(const char *path, const scn_opts *o, scn *out, char *err, size_t errlen) {
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
    if (rc) return rc;
    rc = scn_opts_apply(out, o, err, errlen);
    if (!rc && out->trace_path[0]) rc = load_trace(out, err, errlen);
    if (rc) scn_free(out);
    return rc;
}

int scn_load(const char *path, scn *out, char *err, size_t errlen) {
    return scn_load_opts(path, NULL, out, err, errlen);
}

void scn_free(scn *s) {
    if (!s) return;
    for (int i = 0; i < s->n_tenants && s->tenants; i++) free(s->tenants[i].key);
    free(s->tenants);
    free(s->trace);
    free(s->feed.map);
    memset(s, 0, sizeof *s);
}
