/* scenario.c - bench scenario parsing and checking; see scenario.h.
 *
 * libyaml's document API loads the whole buffer into a node tree and the
 * checker walks it along the schema, as serve/config.c does: the schema
 * bounds the depth (an alias cycle cannot recurse) and every value's type is
 * known where it is read, so each message can say where and what. The result
 * is built in a local scn and handed over only when everything passed.
 */
#include "scenario.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "err.h"

#define PATH_LEN 128

typedef struct ctx {
    yaml_document_t *doc;
    const char *file;
    char *err;
    size_t errlen;
} ctx;

__attribute__((format(printf, 4, 5)))
static int fail(const ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    if (c->err && c->errlen) {
        char msg[384];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        char where[32] = "";
        if (n) snprintf(where, sizeof where, ":%lu", (unsigned long)n->start_mark.line + 1);
        if (path && *path)
            snprintf(c->err, c->errlen, "%s%s: %s: %s", c->file, where, path, msg);
        else
            snprintf(c->err, c->errlen, "%s%s: %s", c->file, where, msg);
    }
    return TS_ERR_SCENARIO;
}

static yaml_node_t *node_at(const ctx *c, int i) { return yaml_document_get_node(c->doc, i); }

static void join(char *buf, const char *path, const char *key) {
    snprintf(buf, PATH_LEN, *path ? "%s.%s" : "%s%s", path, key);
}

/* Check that map is a mapping whose keys are among keys[0..nkeys), each at
 * most once; vals[i] is the value of keys[i] or NULL. */
static int map_fields(const ctx *c, const yaml_node_t *map, const char *path,
                      const char *const *keys, size_t nkeys, yaml_node_t **vals) {
    for (size_t i = 0; i < nkeys; i++) vals[i] = NULL;
    if (map->type != YAML_MAPPING_NODE) return fail(c, map, path, "expected a mapping (key: value)");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node_at(c, p->key), *v = node_at(c, p->value);
        if (k->type != YAML_SCALAR_NODE) return fail(c, k, path, "keys must be plain names");
        const char *name = (const char *)k->data.scalar.value;
        size_t i = 0;
        while (i < nkeys && strcmp(keys[i], name) != 0) i++;
        char fp[PATH_LEN];
        join(fp, path, name);
        if (i == nkeys) {
            char list[384] = "";
            size_t o = 0;
            for (size_t j = 0; j < nkeys && o < sizeof list; j++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", j ? ", " : "", keys[j]);
            return fail(c, k, fp, "unknown key (expected one of: %s)", list);
        }
        if (vals[i]) return fail(c, k, fp, "repeated key");
        vals[i] = v;
    }
    return 0;
}

/* The text of a scalar with a value, else NULL with *rc set. */
static const char *get_text(const ctx *c, const yaml_node_t *n, const char *path, int *rc) {
    if (n->type != YAML_SCALAR_NODE) {
        *rc = fail(c, n, path, "expected a single value, not a %s",
                   n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (!*s || (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (!strcmp(s, "~") || !strcmp(s, "null")))) {
        *rc = fail(c, n, path, "missing value");
        return NULL;
    }
    if (strlen(s) != n->data.scalar.length) {
        *rc = fail(c, n, path, "value contains a NUL byte");
        return NULL;
    }
    *rc = 0;
    return s;
}

static int get_num(const ctx *c, const yaml_node_t *n, const char *path, double lo, double hi, double *out) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return fail(c, n, path, "expected a number from %g to %g, got '%.40s'", lo, hi, s);
    *out = v;
    return 0;
}

static int get_int(const ctx *c, const yaml_node_t *n, const char *path, int32_t lo, int32_t hi, int32_t *out) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return fail(c, n, path, "expected an integer from %d to %d, got '%.40s'", (int)lo, (int)hi, s);
    *out = (int32_t)v;
    return 0;
}

static int get_name(const ctx *c, const yaml_node_t *n, const char *path, char *out, size_t cap) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    if (strlen(s) >= cap) return fail(c, n, path, "longer than %zu bytes", cap - 1);
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == 0x7f)
            return fail(c, n, path, "may not contain spaces, quotes, backslashes or control characters");
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

int scn_duration_parse(const char *s, double *out_s) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    while (*end == ' ') end++;
    double mult = 1;
    if (!*end || !strcmp(end, "s")) mult = 1;
    else if (!strcmp(end, "ms")) mult = 1e-3;
    else if (!strcmp(end, "m") || !strcmp(end, "min")) mult = 60;
    else if (!strcmp(end, "h")) mult = 3600;
    else return -1;
    *out_s = v * mult;
    return isfinite(*out_s) ? 0 : -1;
}

static int get_duration(const ctx *c, const yaml_node_t *n, const char *path, double lo, double *out) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    double v;
    if (scn_duration_parse(s, &v) || v < lo || v > 30 * 86400.0)
        return fail(c, n, path, "expected a duration of at least %gs such as 30s, 500ms or 2m, got '%.40s'", lo, s);
    *out = v;
    return 0;
}

/* ---- sections -------------------------------------------------------------- */

static int parse_arrival(const ctx *c, const yaml_node_t *n, const char *path, scn_arrival *a) {
    static const char *const keys[] = {"process", "rate", "cv"};
    yaml_node_t *v[3];
    char fp[PATH_LEN];
    int rc = map_fields(c, n, path, keys, 3, v);
    if (rc) return rc;
    join(fp, path, "process");
    if (!v[0]) return fail(c, n, fp, "required (poisson, gamma or constant)");
    const char *p = get_text(c, v[0], fp, &rc);
    if (!p) return rc;
    if (!strcmp(p, "poisson")) a->process = SCN_ARR_POISSON;
    else if (!strcmp(p, "gamma")) a->process = SCN_ARR_GAMMA;
    else if (!strcmp(p, "constant")) a->process = SCN_ARR_CONSTANT;
    else return fail(c, v[0], fp, "unknown process '%.40s' (poisson, gamma or constant)", p);
    join(fp, path, "rate");
    if (!v[1]) return fail(c, n, fp, "required (requests per second)");
    if ((rc = get_num(c, v[1], fp, 1e-6, 1e6, &a->rate))) return rc;
    join(fp, path, "cv");
    a->cv = a->process == SCN_ARR_POISSON ? 1 : 0;
    if (a->process == SCN_ARR_GAMMA) {
        if (!v[2]) return fail(c, n, fp, "required for a gamma process (1 = Poisson, > 1 = bursts)");
        if ((rc = get_num(c, v[2], fp, 0, 100, &a->cv))) return rc;
        if (a->cv < 0.01) return fail(c, v[2], fp, "must be at least 0.01 (use process: constant for 0)");
    } else if (v[2]) {
        return fail(c, v[2], fp, "only a gamma process takes a cv");
    }
    return 0;
}

static int parse_len(const ctx *c, const yaml_node_t *n, const char *path, scn_len *l) {
    static const char *const keys[] = {"dist", "value", "min", "max", "mean", "cv"};
    yaml_node_t *v[6];
    char fp[PATH_LEN];
    int rc = map_fields(c, n, path, keys, 6, v);
    if (rc) return rc;
    join(fp, path, "dist");
    if (!v[0]) return fail(c, n, fp, "required (fixed, uniform or lognormal)");
    const char *d = get_text(c, v[0], fp, &rc);
    if (!d) return rc;
    /* which keys each distribution takes: value, min, max, mean, cv */
    static const int takes[3][5] = {{1, 0, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 1, 1, 1, 1}};
    static const int needs[3][5] = {{1, 0, 0, 0, 0}, {0, 1, 1, 0, 0}, {0, 0, 0, 1, 1}};
    if (!strcmp(d, "fixed")) l->dist = SCN_LEN_FIXED;
    else if (!strcmp(d, "uniform")) l->dist = SCN_LEN_UNIFORM;
    else if (!strcmp(d, "lognormal")) l->dist = SCN_LEN_LOGNORMAL;
    else return fail(c, v[0], fp, "unknown distribution '%.40s' (fixed, uniform or lognormal)", d);
    for (int k = 0; k < 5; k++) {
        join(fp, path, keys[k + 1]);
        if (v[k + 1] && !takes[l->dist][k]) return fail(c, v[k + 1], fp, "not a parameter of dist %s", d);
        if (!v[k + 1] && needs[l->dist][k]) return fail(c, n, fp, "required for dist %s", d);
    }
    l->min = 1;
    l->max = SCN_MAX_TOKENS;
    if (v[1] && (rc = get_int(c, v[1], (join(fp, path, "value"), fp), 1, SCN_MAX_TOKENS, &l->value))) return rc;
    if (v[2] && (rc = get_int(c, v[2], (join(fp, path, "min"), fp), 1, SCN_MAX_TOKENS, &l->min))) return rc;
    if (v[3] && (rc = get_int(c, v[3], (join(fp, path, "max"), fp), 1, SCN_MAX_TOKENS, &l->max))) return rc;
    if (v[4] && (rc = get_num(c, v[4], (join(fp, path, "mean"), fp), 1, SCN_MAX_TOKENS, &l->mean))) return rc;
    if (v[5] && (rc = get_num(c, v[5], (join(fp, path, "cv"), fp), 0, 10, &l->cv))) return rc;
    if (l->min > l->max) return fail(c, n, path, "min (%d) is above max (%d)", (int)l->min, (int)l->max);
    if (l->dist == SCN_LEN_FIXED) l->min = l->max = l->value;
    if (l->dist == SCN_LEN_LOGNORMAL && (l->mean < l->min || l->mean > l->max))
        return fail(c, n, path, "mean %g lies outside min..max (%d..%d)", l->mean, (int)l->min, (int)l->max);
    return 0;
}

static int parse_tenant(const ctx *c, const yaml_node_t *n, const char *path, scn_tenant *t) {
    static const char *const keys[] = {"name", "key", "weight", "arrival", "prompt_tokens",
                                       "output_tokens", "slo", "start", "stop"};
    yaml_node_t *v[9];
    char fp[PATH_LEN];
    int rc = map_fields(c, n, path, keys, 9, v);
    if (rc) return rc;
    join(fp, path, "name");
    if (!v[0]) return fail(c, n, fp, "required");
    if ((rc = get_name(c, v[0], fp, t->name, sizeof t->name))) return rc;
    join(fp, path, "key");
    if (!v[1]) return fail(c, n, fp, "required (the tenant's API key)");
    char key[512];
    if ((rc = get_name(c, v[1], fp, key, sizeof key))) return rc;
    if (!(t->key = strdup(key))) return TS_ERR_NOMEM;
    t->weight = 1;
    if (v[2] && (rc = get_num(c, v[2], (join(fp, path, "weight"), fp), 1e-6, 1e6, &t->weight))) return rc;
    if (v[3] && (rc = parse_arrival(c, v[3], (join(fp, path, "arrival"), fp), &t->arrival))) return rc;
    /* Lengths are required for a generated process; a trace brings its own. */
    t->prompt = (scn_len){SCN_LEN_FIXED, 1, 1, 1, 0, 0};
    t->output = t->prompt;
    if (v[4]) {
        if ((rc = parse_len(c, v[4], (join(fp, path, "prompt_tokens"), fp), &t->prompt))) return rc;
    } else if (v[3]) {
        return fail(c, n, (join(fp, path, "prompt_tokens"), fp), "required with an arrival process");
    }
    if (v[5]) {
        if ((rc = parse_len(c, v[5], (join(fp, path, "output_tokens"), fp), &t->output))) return rc;
    } else if (v[3]) {
        return fail(c, n, (join(fp, path, "output_tokens"), fp), "required with an arrival process");
    }
    if (!v[3] && (v[4] || v[5]))
        return fail(c, v[4] ? v[4] : v[5], path, "lengths come from the trace when there is no arrival process");
    if (v[6]) {
        static const char *const sk[] = {"ttft_ms", "tpot_ms"};
        yaml_node_t *sv[2];
        char sp[PATH_LEN];
        join(fp, path, "slo");
        if ((rc = map_fields(c, v[6], fp, sk, 2, sv))) return rc;
        if (sv[0] && (rc = get_num(c, sv[0], (join(sp, fp, "ttft_ms"), sp), 0, 1e9, &t->ttft_ms))) return rc;
        if (sv[1] && (rc = get_num(c, sv[1], (join(sp, fp, "tpot_ms"), sp), 0, 1e9, &t->tpot_ms))) return rc;
    }
    if (v[7] && (rc = get_duration(c, v[7], (join(fp, path, "start"), fp), 0, &t->start_s))) return rc;
    if (v[8] && (rc = get_duration(c, v[8], (join(fp, path, "stop"), fp), 0.001, &t->stop_s))) return rc;
    if (t->stop_s > 0 && t->stop_s <= t->start_s)
        return fail(c, v[8], (join(fp, path, "stop"), fp), "must come after start");
    return 0;
}

static int parse_root(const ctx *c, const yaml_node_t *root, const char *base_dir, scn *s) {
    static const char *const keys[] = {"name",        "model",     "api",     "duration", "drain",
                                       "temperature", "token_ids", "service", "max_in_flight",
                                       "trace",       "tenants"};
    enum { K_NAME, K_MODEL, K_API, K_DUR, K_DRAIN, K_TEMP, K_IDS, K_SERVICE, K_INFLIGHT, K_TRACE, K_TENANTS, K_N };
    yaml_node_t *v[K_N];
    int rc = map_fields(c, root, "", keys, K_N, v);
    if (rc) return rc;
    if (v[K_NAME] && (rc = get_name(c, v[K_NAME], "name", s->name, sizeof s->name))) return rc;
    if (!v[K_MODEL]) return fail(c, root, "model", "required (the model name requests ask for)");
    if ((rc = get_name(c, v[K_MODEL], "model", s->model, sizeof s->model))) return rc;
    if (v[K_API]) {
        const char *a = get_text(c, v[K_API], "api", &rc);
        if (!a) return rc;
        if (!strcmp(a, "chat")) s->chat = 1;
        else if (strcmp(a, "completions")) return fail(c, v[K_API], "api", "expected completions or chat");
    }
    if (v[K_DUR] && (rc = get_duration(c, v[K_DUR], "duration", 0.001, &s->duration_s))) return rc;
    s->drain_s = 30;
    if (v[K_DRAIN] && (rc = get_duration(c, v[K_DRAIN], "drain", 0, &s->drain_s))) return rc;
    if (v[K_TEMP] && (rc = get_num(c, v[K_TEMP], "temperature", 0, 2, &s->temperature))) return rc;
    s->token_min = 100;
    s->token_max = 9999;
    if (v[K_IDS]) {
        static const char *const ik[] = {"min", "max"};
        yaml_node_t *iv[2];
        if ((rc = map_fields(c, v[K_IDS], "token_ids", ik, 2, iv))) return rc;
        if (iv[0] && (rc = get_int(c, iv[0], "token_ids.min", 0, INT32_MAX, &s->token_min))) return rc;
        if (iv[1] && (rc = get_int(c, iv[1], "token_ids.max", 0, INT32_MAX, &s->token_max))) return rc;
        if (s->token_min > s->token_max) return fail(c, v[K_IDS], "token_ids", "min is above max");
    }
    s->w_in = 1;
    s->w_out = 2;
    if (v[K_SERVICE]) {
        static const char *const wk[] = {"input_weight", "output_weight"};
        yaml_node_t *wv[2];
        if ((rc = map_fields(c, v[K_SERVICE], "service", wk, 2, wv))) return rc;
        if (wv[0] && (rc = get_num(c, wv[0], "service.input_weight", 0, 1e6, &s->w_in))) return rc;
        if (wv[1] && (rc = get_num(c, wv[1], "service.output_weight", 0, 1e6, &s->w_out))) return rc;
        if (s->w_in + s->w_out <= 0) return fail(c, v[K_SERVICE], "service", "the weights may not both be 0");
    }
    s->max_in_flight = 4000;
    if (v[K_INFLIGHT] && (rc = get_int(c, v[K_INFLIGHT], "max_in_flight", 1, 100000, &s->max_in_flight))) return rc;
    if (v[K_TRACE]) {
        char tp[256];
        if ((rc = get_name(c, v[K_TRACE], "trace", tp, sizeof tp))) return rc;
        if (tp[0] == '/' || !base_dir || !*base_dir)
            snprintf(s->trace_path, sizeof s->trace_path, "%s", tp);
        else if ((size_t)snprintf(s->trace_path, sizeof s->trace_path, "%s/%s", base_dir, tp) >= sizeof s->trace_path)
            return fail(c, v[K_TRACE], "trace", "path too long");
    }
    const yaml_node_t *tn = v[K_TENANTS];
    if (!tn) return fail(c, root, "tenants", "required (a list of at least one tenant)");
    if (tn->type != YAML_SEQUENCE_NODE) return fail(c, tn, "tenants", "expected a list");
    size_t nt = (size_t)(tn->data.sequence.items.top - tn->data.sequence.items.start);
    if (nt < 1 || nt > SCN_MAX_TENANTS)
        return fail(c, tn, "tenants", "expected 1 to %d tenants, got %zu", SCN_MAX_TENANTS, nt);
    if (!(s->tenants = calloc(nt, sizeof *s->tenants))) return TS_ERR_NOMEM;
    s->n_tenants = (int)nt;
    int any_trace = 0;
    for (size_t i = 0; i < nt; i++) {
        char fp[PATH_LEN];
        snprintf(fp, sizeof fp, "tenants[%zu]", i);
        const yaml_node_t *item = node_at(c, tn->data.sequence.items.start[i]);
        if ((rc = parse_tenant(c, item, fp, &s->tenants[i]))) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->tenants[j].name, s->tenants[i].name))
                return fail(c, item, fp, "tenant name '%s' repeated (tenants[%zu])", s->tenants[i].name, j);
        any_trace |= s->tenants[i].arrival.process == SCN_ARR_NONE;
    }
    if (any_trace && !s->trace_path[0])
        return fail(c, tn, "tenants", "a tenant without an arrival process needs a trace file (trace: FILE.csv)");
    if (!any_trace && s->trace_path[0])
        return fail(c, v[K_TRACE], "trace", "every tenant has an arrival process, so the trace would go unused");
    return 0;
}

int scn_parse(const char *yaml, size_t len, const char *file, const char *base_dir, scn *out, char *err,
              size_t errlen) {
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    yaml_parser_t p;
    yaml_document_t doc;
    ctx c = {&doc, file ? file : "scenario", err, errlen};
    if (!yaml_parser_initialize(&p)) return TS_ERR_NOMEM;
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&p, &doc)) {
        int rc = p.error == YAML_MEMORY_ERROR ? TS_ERR_NOMEM : TS_ERR_SCENARIO;
        if (rc == TS_ERR_SCENARIO && err && errlen)
            snprintf(err, errlen, "%s:%lu: YAML syntax error: %s", c.file,
                     (unsigned long)p.problem_mark.line + 1, p.problem ? p.problem : "unknown");
        yaml_parser_delete(&p);
        return rc;
    }
    yaml_parser_delete(&p);
    scn s;
    memset(&s, 0, sizeof s);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = root ? parse_root(&c, root, base_dir, &s) : fail(&c, NULL, "", "the file is empty");
    yaml_document_delete(&doc);
    if (rc) {
        if (rc == TS_ERR_NOMEM && err && errlen) snprintf(err, errlen, "%s: out of memory", c.file);
        scn_free(&s);
        return rc;
    }
    if (!s.name[0]) {
        /* The file's base name without its extension. */
        const char *b = strrchr(c.file, '/');
        b = b ? b + 1 : c.file;
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

__attribute__((format(printf, 5, 6)))
static int trace_fail(char *err, size_t errlen, const char *file, size_t line, const char *fmt, ...) {
    if (err && errlen) {
        char msg[300];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(err, errlen, "%s:%zu: %s", file, line, msg);
    }
    return TS_ERR_SCENARIO;
}

int scn_trace_parse(scn *s, const char *csv, size_t len, const char *file, char *err, size_t errlen) {
    file = file ? file : "trace";
    size_t cap = 64, n = 0, line = 0;
    scn_trace_row *rows = malloc(cap * sizeof *rows);
    if (!rows) return TS_ERR_NOMEM;
    int rc = 0, header = 0;
    size_t *per = calloc((size_t)s->n_tenants, sizeof *per);
    if (!per) {
        free(rows);
        return TS_ERR_NOMEM;
    }
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
            rc = trace_fail(err, errlen, file, line, "line too long");
            break;
        }
        memcpy(buf, src, l);
        buf[l] = 0;
        if (memchr(buf, 0, l)) {
            rc = trace_fail(err, errlen, file, line, "NUL byte");
            break;
        }
        if (!buf[0] || buf[0] == '#') continue;
        if (!header) {
            if (strcmp(buf, "timestamp_s,tenant,prompt_tokens,output_tokens")) {
                rc = trace_fail(err, errlen, file, line,
                                "expected the header timestamp_s,tenant,prompt_tokens,output_tokens");
                break;
            }
            header = 1;
            continue;
        }
        char *f[4], *p = buf;
        int k = 0;
        for (char *tok; k < 5 && (tok = strsep(&p, ",")); k++)
            if (k < 4) f[k] = tok;
        if (k != 4) {
            rc = trace_fail(err, errlen, file, line, "expected 4 fields, got %d", k);
            break;
        }
        char *end;
        errno = 0;
        double t = strtod(f[0], &end);
        if (end == f[0] || *end || errno || !isfinite(t) || t < 0 || t > 30 * 86400.0) {
            rc = trace_fail(err, errlen, file, line, "timestamp_s '%.40s' is not a time in seconds >= 0", f[0]);
            break;
        }
        int ti = -1;
        for (int i = 0; i < s->n_tenants; i++)
            if (!strcmp(s->tenants[i].name, f[1])) ti = i;
        if (ti < 0) {
            rc = trace_fail(err, errlen, file, line, "tenant '%.60s' is not in the scenario", f[1]);
            break;
        }
        if (s->tenants[ti].arrival.process != SCN_ARR_NONE) {
            rc = trace_fail(err, errlen, file, line, "tenant '%s' has an arrival process; its rows would go unused",
                            f[1]);
            break;
        }
        long v[2];
        for (int j = 0; j < 2 && !rc; j++) {
            errno = 0;
            v[j] = strtol(f[2 + j], &end, 10);
            if (end == f[2 + j] || *end || errno || v[j] < 1 || v[j] > SCN_MAX_TOKENS)
                rc = trace_fail(err, errlen, file, line, "%s '%.40s' is not an integer from 1 to %d",
                                j ? "output_tokens" : "prompt_tokens", f[2 + j], SCN_MAX_TOKENS);
        }
        if (rc) break;
        if (n == cap) {
            scn_trace_row *g = realloc(rows, 2 * cap * sizeof *rows);
            if (!g) {
                rc = TS_ERR_NOMEM;
                break;
            }
            rows = g;
            cap *= 2;
        }
        rows[n++] = (scn_trace_row){t, ti, (int32_t)v[0], (int32_t)v[1]};
        per[ti]++;
    }
    if (!rc && !header) rc = trace_fail(err, errlen, file, line, "empty: no header line");
    for (int i = 0; !rc && i < s->n_tenants; i++)
        if (s->tenants[i].arrival.process == SCN_ARR_NONE && per[i] == 0)
            rc = trace_fail(err, errlen, file, line, "tenant '%s' has no arrival process and no rows",
                            s->tenants[i].name);
    free(per);
    if (rc) {
        free(rows);
        return rc;
    }
    if (sort_rows(rows, n)) {
        free(rows);
        return TS_ERR_NOMEM;
    }
    free(s->trace);
    s->trace = rows;
    s->n_trace = n;
    return 0;
}

/* ---- files ----------------------------------------------------------------- */

/* The whole file in a malloc'd buffer (errno set on failure). Scenario and
 * trace files are small; anything over 64 MiB is refused as a mistake. */
static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
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
    return b;
}

int scn_load(const char *path, scn *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = read_all(path, &len);
    if (!text) {
        if (err && errlen) snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return TS_ERR_IO;
    }
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
    char *csv = read_all(out->trace_path, &len);
    if (!csv) {
        if (err && errlen) snprintf(err, errlen, "%s: cannot read the trace: %s", out->trace_path, strerror(errno));
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
