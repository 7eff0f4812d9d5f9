/* config.c - YAML configuration loading and checking; see config.h.
 *
 * libyaml's document API loads the whole file into a node tree whose nodes
 * keep their source marks, and the checker walks that tree along the schema.
 * Walking the schema rather than the tree bounds the depth (an alias cycle
 * such as `&a [*a]` can never recurse) and makes every value's expected type
 * known where it is read, so each error can say where and what.
 *
 * Everything is built into a local cfg and handed over only when the whole
 * file has passed; on any error that cfg is freed, so the caller never sees
 * a half-loaded configuration.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "err.h"
#include "ratelimit.h"

#define PATH_MAX_LEN 256    /* bytes of a field path such as tenants[3].key_sha256[1] */
#define LIST_MAX_LEN 512    /* bytes of a list of names in a message */

#define MODEL_NAME_EXTRA "._:/-"    /* model names may look like org/model:tag */
#define NAME_EXTRA       "._-"      /* tenant and tier names: metric-label safe */

/* The default tiers. Keep in step with sched_tiers_default() in
 * core/sched.c, which adds the same three to a scheduler: the config needs
 * their names before any scheduler exists, to resolve tenants' tiers. */
static const sched_tier default_tiers[] = {
    {"gold", 0, 200, 0, 0.0, 0},
    {"silver", 1, 500, 0, 0.10, 0},
    {"bronze", 2, 0, 0, 0.05, 30000},
};

typedef struct ctx {
    yaml_document_t *doc;
    const char *file;       /* as given to cfg_load, for messages */
    FILE *f;                /* the open file, to turn a byte offset into a line */
    char *err;
    size_t errlen;
} ctx;

/* ---- errors ---------------------------------------------------------------- */

/* Write "file:line: path: message" and return TS_ERR_CONFIG. n gives the
 * line (NULL: none); an empty path is left out. */
__attribute__((format(printf, 4, 5)))
static int fail(const ctx *c, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    if (!c->err || c->errlen == 0) return TS_ERR_CONFIG;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[64] = "";
    if (n) snprintf(where, sizeof where, ":%lu", (unsigned long)n->start_mark.line + 1);
    if (path && *path)
        snprintf(c->err, c->errlen, "%s%s: %s: %s", c->file, where, path, msg);
    else
        snprintf(c->err, c->errlen, "%s%s: %s", c->file, where, msg);
    return TS_ERR_CONFIG;
}

static int fail_nomem(const ctx *c) {
    if (c->err && c->errlen) snprintf(c->err, c->errlen, "%s: out of memory", c->file);
    return TS_ERR_NOMEM;
}

/* A libyaml reader, scanner, parser or composer error. */
static int fail_yaml(const ctx *c, const yaml_parser_t *p) {
    if (p->error == YAML_MEMORY_ERROR) return fail_nomem(c);
    if (!c->err || c->errlen == 0) return TS_ERR_CONFIG;
    const char *problem = p->problem ? p->problem : "unknown error";
    if (p->error == YAML_READER_ERROR) {
        /* The reader (bad encoding) reports a byte offset, not a line:
         * count the newlines before it. */
        unsigned long line = 1;
        size_t off = p->problem_offset;
        if (fseek(c->f, 0, SEEK_SET) == 0)
            for (int ch; off > 0 && (ch = fgetc(c->f)) != EOF; off--) line += ch == '\n';
        snprintf(c->err, c->errlen, "%s:%lu: YAML error at byte %lu: %s", c->file, line,
                 (unsigned long)p->problem_offset, problem);
    } else if (p->context) {
        snprintf(c->err, c->errlen, "%s:%lu: YAML syntax error: %s (%s)", c->file,
                 (unsigned long)p->problem_mark.line + 1, problem, p->context);
    } else {
        snprintf(c->err, c->errlen, "%s:%lu: YAML syntax error: %s", c->file,
                 (unsigned long)p->problem_mark.line + 1, problem);
    }
    return TS_ERR_CONFIG;
}

/* ---- nodes and paths ------------------------------------------------------- */

static yaml_node_t *node_at(const ctx *c, int i) { return yaml_document_get_node(c->doc, i); }

/* A path too long for the buffer (only a very long unknown key can make
 * one) ends in "..." rather than silently cut. */
static void mark_cut(char *buf, int n) {
    if (n >= PATH_MAX_LEN) memcpy(buf + PATH_MAX_LEN - 4, "...", 4);
}

static void join(char *buf, const char *path, const char *key) {
    mark_cut(buf, *path ? snprintf(buf, PATH_MAX_LEN, "%s.%s", path, key)
                        : snprintf(buf, PATH_MAX_LEN, "%s", key));
}

static void join_index(char *buf, const char *path, size_t i) {
    mark_cut(buf, snprintf(buf, PATH_MAX_LEN, "%s[%zu]", path, i));
}

static size_t seq_len(const yaml_node_t *n) {
    return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* Check that map is a mapping whose keys are all among keys[0..nkeys) and
 * appear once each; vals[i] is the value of keys[i], or NULL if absent. */
static int map_fields(const ctx *c, const yaml_node_t *map, const char *path,
                      const char *const *keys, size_t nkeys, yaml_node_t **vals) {
    for (size_t i = 0; i < nkeys; i++) vals[i] = NULL;
    if (map->type != YAML_MAPPING_NODE)
        return fail(c, map, path, "expected a mapping (key: value lines)");
    int first_line[32] = {0};   /* by key index; no section has more than 32 keys */
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node_at(c, p->key), *v = node_at(c, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return fail(c, k, path, "keys must be plain names");
        const char *name = (const char *)k->data.scalar.value;
        size_t i = 0;
        while (i < nkeys && strcmp(keys[i], name) != 0) i++;
        char fp[PATH_MAX_LEN];
        join(fp, path, name);
        if (i == nkeys) {
            char list[LIST_MAX_LEN] = "";
            size_t o = 0;
            for (size_t j = 0; j < nkeys && o < sizeof list; j++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", j ? ", " : "", keys[j]);
            return fail(c, k, fp, "unknown key (expected one of: %s)", list);
        }
        if (vals[i])
            return fail(c, k, fp, "repeated key (first at line %d)", first_line[i]);
        vals[i] = v;
        first_line[i] = (int)k->start_mark.line + 1;
    }
    return 0;
}

/* ---- scalars --------------------------------------------------------------- */

/* The text of a scalar with a value; NULL (and *rc set) otherwise. A plain
 * empty, "~" or "null" scalar is YAML's null: a key with no value; a quoted
 * empty string is no more use as a name, path or number. */
static const char *get_text(const ctx *c, const yaml_node_t *n, const char *path, int *rc) {
    if (n->type != YAML_SCALAR_NODE) {
        *rc = fail(c, n, path, "expected a single value, not a %s",
                   n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (!*s || (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                (!strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")))) {
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

/* Decimal digits into *v; the number of characters used (0: none or
 * overflow). */
static size_t parse_digits(const char *s, uint64_t *v) {
    uint64_t x = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *v = x;
    return i;
}

static int get_uint(const ctx *c, const yaml_node_t *n, const char *path, uint64_t lo,
                    uint64_t hi, uint64_t *out) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    uint64_t v;
    size_t k = parse_digits(s, &v);
    if (k == 0 || s[k] != 0 || v < lo || v > hi)
        return fail(c, n, path, "expected an integer in %llu..%llu, got '%.40s'",
                    (unsigned long long)lo, (unsigned long long)hi, s);
    *out = v;
    return 0;
}

static int get_u32(const ctx *c, const yaml_node_t *n, const char *path, uint32_t lo,
                   uint32_t hi, uint32_t *out) {
    uint64_t v;
    int rc = get_uint(c, n, path, lo, hi, &v);
    if (rc == 0) *out = (uint32_t)v;
    return rc;
}

static int get_int(const ctx *c, const yaml_node_t *n, const char *path, int lo, int hi,
                   int *out) {
    uint64_t v;
    int rc = get_uint(c, n, path, (uint64_t)lo, (uint64_t)hi, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

/* A byte count: digits, then optionally spaces and a unit. */
static int get_size(const ctx *c, const yaml_node_t *n, const char *path, uint64_t lo,
                    uint64_t hi, uint64_t *out) {
    static const struct { const char *unit; uint64_t mult; } units[] = {
        {"b", 1},
        {"kb", 1000ull}, {"mb", 1000ull * 1000}, {"gb", 1000ull * 1000 * 1000},
        {"tb", 1000ull * 1000 * 1000 * 1000},
        {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
    };
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    uint64_t v, mult = 1;
    size_t k = parse_digits(s, &v);
    int ok = k > 0;
    const char *u = s + k;
    while (*u == ' ') u++;
    if (ok && *u) {
        ok = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcasecmp(u, units[i].unit)) {
                mult = units[i].mult;
                ok = 1;
            }
    }
    if (ok && v > UINT64_MAX / mult) ok = 0;
    if (ok) v *= mult;
    if (!ok || v < lo || v > hi) {
        char range[64];
        if (hi == UINT64_MAX)
            snprintf(range, sizeof range, "of at least %llu", (unsigned long long)lo);
        else
            snprintf(range, sizeof range, "from %llu to %llu", (unsigned long long)lo,
                     (unsigned long long)hi);
        return fail(c, n, path,
                    "expected a size in bytes %s, like 1048576 or 256MiB "
                    "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '%.40s'", range, s);
    }
    *out = v;
    return 0;
}

/* A finite number in [lo, hi], or (lo, hi] when lo_open. */
static int get_double(const ctx *c, const yaml_node_t *n, const char *path, double lo,
                      double hi, int lo_open, double *out) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
        return fail(c, n, path, "expected a number in %s%g, %g], got '%.40s'",
                    lo_open ? "(" : "[", lo, hi, s);
    *out = v;
    return 0;
}

/* A name of 1..SCHED_NAME_MAX-1 letters, digits and the characters in extra. */
static int get_name(const ctx *c, const yaml_node_t *n, const char *path, const char *extra,
                    char out[SCHED_NAME_MAX]) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    size_t len = strlen(s);
    int ok = len > 0 && len < SCHED_NAME_MAX;
    for (size_t i = 0; ok && i < len; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             strchr(extra, ch) != NULL;
    }
    if (!ok)
        return fail(c, n, path, "bad name '%.60s' (1 to %d characters: letters, digits and %s)",
                    s, SCHED_NAME_MAX - 1, extra);
    memcpy(out, s, len + 1);
    return 0;
}

static int get_hash(const ctx *c, const yaml_node_t *n, const char *path,
                    uint8_t out[AUTH_HASH_LEN]) {
    int rc;
    const char *s = get_text(c, n, path, &rc);
    if (!s) return rc;
    if (auth_hex_decode(s, out, AUTH_HASH_LEN) != 0)
        return fail(c, n, path,
                    "expected the SHA-256 of a key as %d hex digits (tessera keygen prints it)",
                    AUTH_HEX_LEN);
    return 0;
}

/* ---- sections -------------------------------------------------------------- */

static void set_defaults(cfg *g) {
    snprintf(g->host, sizeof g->host, "127.0.0.1");
    g->port = 8080;
    g->policy = SCHED_POLICY_FAIR;
    g->limits.max_body_bytes = 1 << 20;
    g->limits.header_timeout_s = 10;
    g->limits.idle_timeout_s = 60;
    g->limits.max_connections = 2048;
    g->limits.shutdown_grace_s = 10;
    g->n_tiers = sizeof default_tiers / sizeof default_tiers[0];
    memcpy(g->tiers, default_tiers, sizeof default_tiers);
}

static void model_defaults(cfg_model *m) {
    memset(m, 0, sizeof *m);
    m->kv_cache_bytes = 256ull << 20;
    m->swap_bytes = 256ull << 20;
    m->block_size = 16;
    m->max_seqs = 64;
    m->budget_min = 64;
    m->budget_max = 512;
    m->threads = 0;
}

/* "host:port" or "[v6 host]:port". */
static int parse_listen(const ctx *c, const yaml_node_t *n, cfg *g) {
    int rc;
    const char *s = get_text(c, n, "listen", &rc);
    if (!s) return rc;
    const char *host = s, *colon;
    size_t hlen;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        colon = close && close[1] == ':' ? close + 1 : NULL;
        host = s + 1;
        hlen = close ? (size_t)(close - host) : 0;
    } else {
        colon = strrchr(s, ':');
        hlen = colon ? (size_t)(colon - s) : 0;
        /* An unbracketed host with a colon is an IPv6 address without
         * brackets: its port would be ambiguous. */
        if (colon && memchr(s, ':', hlen)) colon = NULL;
    }
    uint64_t port = 0;
    size_t k = colon ? parse_digits(colon + 1, &port) : 0;
    if (!colon || hlen == 0 || hlen >= CFG_HOST_MAX || k == 0 || colon[1 + k] != 0 ||
        port < 1 || port > 65535)
        return fail(c, n, "listen",
                    "expected host:port with a port in 1..65535 (IPv6: [::1]:8080), got '%.60s'", s);
    memcpy(g->host, host, hlen);
    g->host[hlen] = 0;
    g->port = (uint16_t)port;
    return 0;
}

static int parse_policy(const ctx *c, const yaml_node_t *n, cfg *g) {
    int rc;
    const char *s = get_text(c, n, "policy", &rc);
    if (!s) return rc;
    if (!strcmp(s, "fair"))
        g->policy = SCHED_POLICY_FAIR;
    else if (!strcmp(s, "fcfs"))
        g->policy = SCHED_POLICY_FCFS;
    else
        return fail(c, n, "policy", "unknown policy '%.40s' (fair, fcfs)", s);
    return 0;
}

static int parse_limits(const ctx *c, const yaml_node_t *n, cfg_limits *l) {
    enum { BODY, HDR, IDLE, CONNS, GRACE, NK };
    static const char *const keys[NK] = {"max_body_bytes", "header_timeout_s", "idle_timeout_s",
                                         "max_connections", "shutdown_grace_s"};
    yaml_node_t *v[NK];
    char fp[PATH_MAX_LEN];
    int rc = map_fields(c, n, "limits", keys, NK, v);
    if (rc) return rc;
#define FP(i) (join(fp, "limits", keys[i]), fp)
    if (v[BODY] && (rc = get_size(c, v[BODY], FP(BODY), 1, 1ull << 30, &l->max_body_bytes))) return rc;
    if (v[HDR] && (rc = get_u32(c, v[HDR], FP(HDR), 1, 3600, &l->header_timeout_s))) return rc;
    if (v[IDLE] && (rc = get_u32(c, v[IDLE], FP(IDLE), 1, 86400, &l->idle_timeout_s))) return rc;
    if (v[CONNS] && (rc = get_u32(c, v[CONNS], FP(CONNS), 1, 1000000, &l->max_connections))) return rc;
    if (v[GRACE] && (rc = get_u32(c, v[GRACE], FP(GRACE), 0, 3600, &l->shutdown_grace_s))) return rc;
#undef FP
    return 0;
}

/* Resolve a model path against the folder of the config file: a config in
 * another folder must not depend on the server's working directory. */
static char *resolve_path(const char *cfg_path, const char *p) {
    const char *slash = strrchr(cfg_path, '/');
    if (p[0] == '/' || !slash) return strdup(p);
    size_t dl = (size_t)(slash - cfg_path) + 1, pl = strlen(p);
    char *r = malloc(dl + pl + 1);
    if (!r) return NULL;
    memcpy(r, cfg_path, dl);
    memcpy(r + dl, p, pl + 1);
    return r;
}

static int parse_model(const ctx *c, const yaml_node_t *n, const char *path, cfg_model *m) {
    enum { NAME, PATH, KV, SWAP, BS, SEQS, BMIN, BMAX, THREADS, NK };
    static const char *const keys[NK] = {"name", "path", "kv_cache_bytes", "swap_bytes",
                                         "block_size", "max_seqs", "budget_min", "budget_max",
                                         "threads"};
    yaml_node_t *v[NK];
    char fp[PATH_MAX_LEN];
    int rc = map_fields(c, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(i) (join(fp, path, keys[i]), fp)
    if (!v[NAME]) return fail(c, n, FP(NAME), "missing (every model needs a name)");
    if (!v[PATH]) return fail(c, n, FP(PATH), "missing (every model needs the path of its GGUF file)");
    if ((rc = get_name(c, v[NAME], FP(NAME), MODEL_NAME_EXTRA, m->name))) return rc;
    const char *p = get_text(c, v[PATH], FP(PATH), &rc);
    if (!p) return rc;
    if (v[KV] && (rc = get_size(c, v[KV], FP(KV), 1, UINT64_MAX, &m->kv_cache_bytes))) return rc;
    if (v[SWAP] && (rc = get_size(c, v[SWAP], FP(SWAP), 0, UINT64_MAX, &m->swap_bytes))) return rc;
    if (v[BS] && (rc = get_int(c, v[BS], FP(BS), 1, 1024, &m->block_size))) return rc;
    if (v[SEQS] && (rc = get_int(c, v[SEQS], FP(SEQS), 1, 65536, &m->max_seqs))) return rc;
    if (v[BMIN] && (rc = get_int(c, v[BMIN], FP(BMIN), 1, 1 << 20, &m->budget_min))) return rc;
    if (v[BMAX] && (rc = get_int(c, v[BMAX], FP(BMAX), 1, 1 << 20, &m->budget_max))) return rc;
    if (v[THREADS] && (rc = get_int(c, v[THREADS], FP(THREADS), 0, 4096, &m->threads))) return rc;
    if (m->budget_min > m->budget_max) {
        const yaml_node_t *at = v[BMIN] ? v[BMIN] : v[BMAX];
        return fail(c, at, FP(BMIN), "budget_min %d is larger than budget_max %d",
                    m->budget_min, m->budget_max);
    }
#undef FP
    m->path = resolve_path(c->file, p);
    return m->path ? 0 : fail_nomem(c);
}

static int parse_models(const ctx *c, const yaml_node_t *n, cfg *g) {
    if (n->type != YAML_SEQUENCE_NODE || seq_len(n) == 0)
        return fail(c, n, "models", "expected a list of at least one model");
    size_t cnt = seq_len(n);
    g->models = calloc(cnt, sizeof *g->models);
    if (!g->models) return fail_nomem(c);
    for (size_t i = 0; i < cnt; i++) {
        yaml_node_t *item = node_at(c, n->data.sequence.items.start[i]);
        char path[PATH_MAX_LEN];
        join_index(path, "models", i);
        cfg_model *m = &g->models[i];
        model_defaults(m);
        g->n_models = i + 1;   /* so cfg_free sees m->path even on error */
        int rc = parse_model(c, item, path, m);
        if (rc) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(g->models[j].name, m->name)) {
                char fp[PATH_MAX_LEN];
                join(fp, path, "name");
                return fail(c, item, fp, "repeated model name '%s' (also models[%zu])", m->name, j);
            }
    }
    return 0;
}

static int parse_tiers(const ctx *c, const yaml_node_t *n, cfg *g) {
    enum { NAME, BAND, TTFT, TPOT, SHARE, MAXQ, NK };
    static const char *const keys[NK] = {"name", "band", "ttft_ms", "tpot_ms", "min_share",
                                         "max_queue_ms"};
    if (n->type != YAML_SEQUENCE_NODE || seq_len(n) == 0 || seq_len(n) > SCHED_MAX_TIERS)
        return fail(c, n, "tiers", "expected a list of 1 to %d tiers", SCHED_MAX_TIERS);
    size_t cnt = seq_len(n);
    double share = 0;
    memset(g->tiers, 0, sizeof g->tiers);
    for (size_t i = 0; i < cnt; i++) {
        yaml_node_t *item = node_at(c, n->data.sequence.items.start[i]), *v[NK];
        char path[PATH_MAX_LEN], fp[PATH_MAX_LEN];
        join_index(path, "tiers", i);
        sched_tier *t = &g->tiers[i];
        int rc = map_fields(c, item, path, keys, NK, v);
        if (rc) return rc;
#define FP(k) (join(fp, path, keys[k]), fp)
        if (!v[NAME]) return fail(c, item, FP(NAME), "missing (every tier needs a name)");
        if (!v[BAND]) return fail(c, item, FP(BAND), "missing (every tier needs a band, 0 first)");
        if ((rc = get_name(c, v[NAME], FP(NAME), NAME_EXTRA, t->name))) return rc;
        if ((rc = get_int(c, v[BAND], FP(BAND), 0, SCHED_MAX_TIERS - 1, &t->band))) return rc;
        if (v[TTFT] && (rc = get_u32(c, v[TTFT], FP(TTFT), 0, UINT32_MAX, &t->ttft_ms))) return rc;
        if (v[TPOT] && (rc = get_u32(c, v[TPOT], FP(TPOT), 0, UINT32_MAX, &t->tpot_ms))) return rc;
        if (v[SHARE] && (rc = get_double(c, v[SHARE], FP(SHARE), 0, 1, 0, &t->min_share))) return rc;
        if (v[MAXQ] && (rc = get_u32(c, v[MAXQ], FP(MAXQ), 0, UINT32_MAX, &t->max_queue_ms))) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(g->tiers[j].name, t->name))
                return fail(c, v[NAME], FP(NAME), "repeated tier name '%s' (also tiers[%zu])",
                            t->name, j);
#undef FP
        share += t->min_share;
    }
    /* Minimum shares are carved out of one step budget: more than all of
     * it cannot be promised. The slack absorbs decimal rounding. */
    if (share > 1 + 1e-9)
        return fail(c, n, "tiers", "min_share values add up to %g; at most 1", share);
    g->n_tiers = cnt;
    return 0;
}

static int find_tier(const cfg *g, const char *name) {
    for (size_t i = 0; i < g->n_tiers; i++)
        if (!strcmp(g->tiers[i].name, name)) return (int)i;
    return -1;
}

/* Store one key hash of tenant ti, refusing one already held by another
 * tenant (or this one) or by the admin key: a key names one principal. */
static int add_key(const ctx *c, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    uint8_t h[AUTH_HASH_LEN];
    int rc = get_hash(c, n, path, h);
    if (rc) return rc;
    if (g->has_admin && !memcmp(h, g->admin_key, AUTH_HASH_LEN))
        return fail(c, n, path, "same key hash as admin_key_sha256 (each key belongs to one holder)");
    for (size_t i = 0; i <= ti; i++)
        for (size_t k = 0; k < g->tenants[i].n_keys; k++)
            if (!memcmp(h, g->tenants[i].keys[k], AUTH_HASH_LEN))
                return fail(c, n, path, "key hash already used by tenant '%s' (each key belongs to one tenant)",
                            g->tenants[i].sched.name);
    cfg_tenant *t = &g->tenants[ti];
    memcpy(t->keys[t->n_keys++], h, AUTH_HASH_LEN);
    return 0;
}

static int parse_keys(const ctx *c, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    cfg_tenant *t = &g->tenants[ti];
    size_t cnt = n->type == YAML_SEQUENCE_NODE ? seq_len(n) : 1;
    if (cnt == 0) return fail(c, n, path, "expected at least one key hash");
    t->keys = calloc(cnt, sizeof *t->keys);
    if (!t->keys) return fail_nomem(c);
    if (n->type != YAML_SEQUENCE_NODE) return add_key(c, n, path, g, ti);
    for (size_t i = 0; i < cnt; i++) {
        char fp[PATH_MAX_LEN];
        join_index(fp, path, i);
        int rc = add_key(c, node_at(c, n->data.sequence.items.start[i]), fp, g, ti);
        if (rc) return rc;
    }
    return 0;
}

static int parse_tenant(const ctx *c, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    enum { NAME, TIER, WEIGHT, KEYS, KVB, KVF, RUN, QUE, RPM, TPM, CONC, NK };
    static const char *const keys[NK] = {
        "name", "tier", "weight", "key_sha256", "max_kv_blocks", "max_kv_fraction",
        "max_running", "max_queued", "requests_per_minute", "tokens_per_minute", "max_concurrent"};
    cfg_tenant *t = &g->tenants[ti];
    sched_tenant_cfg *s = &t->sched;
    yaml_node_t *v[NK];
    char fp[PATH_MAX_LEN];
    int rc = map_fields(c, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(k) (join(fp, path, keys[k]), fp)
    if (!v[NAME]) return fail(c, n, FP(NAME), "missing (every tenant needs a name)");
    if (!v[TIER]) return fail(c, n, FP(TIER), "missing (every tenant needs a tier)");
    if (!v[KEYS])
        return fail(c, n, FP(KEYS), "missing (every tenant needs at least one key hash)");
    if ((rc = get_name(c, v[NAME], FP(NAME), NAME_EXTRA, s->name))) return rc;
    for (size_t j = 0; j < ti; j++)
        if (!strcmp(g->tenants[j].sched.name, s->name))
            return fail(c, v[NAME], FP(NAME), "repeated tenant name '%s' (also tenants[%zu])",
                        s->name, j);
    const char *tier = get_text(c, v[TIER], FP(TIER), &rc);
    if (!tier) return rc;
    s->tier = find_tier(g, tier);
    if (s->tier < 0) {
        char list[LIST_MAX_LEN] = "";
        size_t o = 0;
        for (size_t i = 0; i < g->n_tiers && o < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", g->tiers[i].name);
        return fail(c, v[TIER], FP(TIER), "unknown tier '%.60s' (%s)", tier, list);
    }
    s->weight = 1;
    if (v[WEIGHT] && (rc = get_double(c, v[WEIGHT], FP(WEIGHT), 0, 1e6, 1, &s->weight))) return rc;
    if ((rc = parse_keys(c, v[KEYS], FP(KEYS), g, ti))) return rc;
    uint64_t u;
    if (v[KVB]) {
        if ((rc = get_uint(c, v[KVB], FP(KVB), 0, INT32_MAX, &u))) return rc;
        s->max_kv_blocks = (int32_t)u;
    }
    if (v[KVF] && (rc = get_double(c, v[KVF], FP(KVF), 0, 1, 0, &s->max_kv_frac))) return rc;
    if (v[RUN] && (rc = get_u32(c, v[RUN], FP(RUN), 0, UINT32_MAX, &s->max_running))) return rc;
    if (v[QUE] && (rc = get_u32(c, v[QUE], FP(QUE), 0, UINT32_MAX, &s->max_queued))) return rc;
    /* A bucket's burst is one minute's worth, so a rate is capped where
     * lim_tenant_init caps the burst. */
    if (v[RPM] && (rc = get_uint(c, v[RPM], FP(RPM), 0, LIM_MAX_BURST, &t->requests_per_minute)))
        return rc;
    if (v[TPM] && (rc = get_uint(c, v[TPM], FP(TPM), 0, LIM_MAX_BURST, &t->tokens_per_minute)))
        return rc;
    if (v[CONC] && (rc = get_u32(c, v[CONC], FP(CONC), 0, UINT32_MAX, &t->max_concurrent)))
        return rc;
#undef FP
    return 0;
}

static int parse_tenants(const ctx *c, const yaml_node_t *n, cfg *g) {
    if (n->type != YAML_SEQUENCE_NODE || seq_len(n) == 0)
        return fail(c, n, "tenants", "expected a list of at least one tenant");
    size_t cnt = seq_len(n);
    if (cnt > INT32_MAX) return fail(c, n, "tenants", "too many tenants");
    g->tenants = calloc(cnt, sizeof *g->tenants);
    if (!g->tenants) return fail_nomem(c);
    for (size_t i = 0; i < cnt; i++) {
        char path[PATH_MAX_LEN];
        join_index(path, "tenants", i);
        g->n_tenants = i + 1;   /* so cfg_free sees this tenant's keys even on error */
        int rc = parse_tenant(c, node_at(c, n->data.sequence.items.start[i]), path, g, i);
        if (rc) return rc;
    }
    return 0;
}

static int parse_root(const ctx *c, const yaml_node_t *root, cfg *g) {
    enum { LISTEN, POLICY, LIMITS, MODELS, TIERS, TENANTS, ADMIN, NK };
    static const char *const keys[NK] = {"listen", "policy", "limits", "models",
                                         "tiers", "tenants", "admin_key_sha256"};
    yaml_node_t *v[NK];
    int rc = map_fields(c, root, "", keys, NK, v);
    if (rc) return rc;
    if (!v[MODELS]) return fail(c, root, "models", "missing (at least one model is required)");
    if (!v[TENANTS]) return fail(c, root, "tenants", "missing (at least one tenant is required)");
    if (v[LISTEN] && (rc = parse_listen(c, v[LISTEN], g))) return rc;
    if (v[POLICY] && (rc = parse_policy(c, v[POLICY], g))) return rc;
    if (v[LIMITS] && (rc = parse_limits(c, v[LIMITS], &g->limits))) return rc;
    if ((rc = parse_models(c, v[MODELS], g))) return rc;
    if (v[TIERS] && (rc = parse_tiers(c, v[TIERS], g))) return rc;
    /* The admin key first, so that tenants' keys are checked against it. */
    if (v[ADMIN]) {
        if ((rc = get_hash(c, v[ADMIN], "admin_key_sha256", g->admin_key))) return rc;
        g->has_admin = 1;
    }
    return parse_tenants(c, v[TENANTS], g);
}

/* ---- public ---------------------------------------------------------------- */

int cfg_load(const char *path, cfg *out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!path || !out) {
        if (err && errlen) snprintf(err, errlen, "cfg_load: no path or output");
        return TS_ERR_INVAL;
    }
    memset(out, 0, sizeof *out);
    cfg g;
    memset(&g, 0, sizeof g);
    set_defaults(&g);
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    int have_parser = 0, have_doc = 0, rc;
    ctx c = {&doc, path, NULL, err, errlen};

    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        rc = TS_ERR_IO;
        goto err;
    }
    if (!yaml_parser_initialize(&parser)) {
        rc = fail_nomem(&c);
        goto err;
    }
    have_parser = 1;
    c.f = f;
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {   /* on failure libyaml frees doc */
        rc = fail_yaml(&c, &parser);
        goto err;
    }
    have_doc = 1;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        if (err && errlen)
            snprintf(err, errlen, "%s:1: empty configuration (models and tenants are required)", path);
        rc = TS_ERR_CONFIG;
        goto err;
    }
    /* A second document would be ignored silently: refuse it, and report
     * syntax errors anywhere in the file before any field error. */
    if (!yaml_parser_load(&parser, &extra)) {
        rc = fail_yaml(&c, &parser);
        goto err;
    }
    const yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
    rc = extra_root ? fail(&c, extra_root, "", "more than one YAML document (--- separates documents)") : 0;
    yaml_document_delete(&extra);
    if (rc) goto err;
    if ((rc = parse_root(&c, root, &g))) goto err;

    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    *out = g;
    return 0;
err:
    cfg_free(&g);
    if (have_doc) yaml_document_delete(&doc);
    if (have_parser) yaml_parser_delete(&parser);
    if (f) fclose(f);
    return rc;
}

void cfg_free(cfg *c) {
    if (!c) return;
    for (size_t i = 0; c->models && i < c->n_models; i++) free(c->models[i].path);
    free(c->models);
    for (size_t i = 0; c->tenants && i < c->n_tenants; i++) free(c->tenants[i].keys);
    free(c->tenants);
    memset(c, 0, sizeof *c);
}

int cfg_single_model(cfg *out, const char *model_path, const char *key_hash_hex) {
    if (!out) return TS_ERR_INVAL;
    memset(out, 0, sizeof *out);
    if (!model_path || !*model_path || !key_hash_hex) return TS_ERR_INVAL;
    cfg g;
    memset(&g, 0, sizeof g);
    set_defaults(&g);
    uint8_t h[AUTH_HASH_LEN];
    int rc = TS_ERR_INVAL;
    if (auth_hex_decode(key_hash_hex, h, AUTH_HASH_LEN) != 0) goto err;

    rc = TS_ERR_NOMEM;
    g.models = calloc(1, sizeof *g.models);
    g.tenants = calloc(1, sizeof *g.tenants);
    if (!g.models || !g.tenants) goto err;
    g.n_models = g.n_tenants = 1;
    cfg_model *m = &g.models[0];
    model_defaults(m);
    if (!(m->path = strdup(model_path))) goto err;

    /* The stem: after the last '/', before the last '.', unless that dot
     * starts the name (".hidden" keeps its dot). */
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    if (len > SCHED_NAME_MAX - 1) len = SCHED_NAME_MAX - 1;
    for (size_t i = 0; i < len; i++) {
        char ch = base[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 strchr(MODEL_NAME_EXTRA, ch);
        m->name[i] = ok ? ch : '-';
    }
    if (len == 0) snprintf(m->name, sizeof m->name, "model");

    cfg_tenant *t = &g.tenants[0];
    snprintf(t->sched.name, sizeof t->sched.name, "default");
    t->sched.tier = find_tier(&g, "gold");
    t->sched.weight = 1;
    if (!(t->keys = calloc(1, sizeof *t->keys))) goto err;
    memcpy(t->keys[0], h, AUTH_HASH_LEN);
    t->n_keys = 1;
    *out = g;
    return 0;
err:
    cfg_free(&g);
    return rc;
}

int cfg_auth_table(const cfg *c, auth_table **out) {
    if (!c || !out) return TS_ERR_INVAL;
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < c->n_tenants; i++) n += c->tenants[i].n_keys;
    auth_entry *e = n ? malloc(n * sizeof *e) : NULL;
    if (n && !e) return TS_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < c->n_tenants; i++)
        for (size_t j = 0; j < c->tenants[i].n_keys; j++) {
            memcpy(e[k].hash, c->tenants[i].keys[j], AUTH_HASH_LEN);
            e[k++].tenant = (int32_t)i;
        }
    int rc = auth_table_new(e, n, c->has_admin ? c->admin_key : NULL, out);
    free(e);
    return rc;
}

int cfg_model_find(const cfg *c, const char *name) {
    for (size_t i = 0; c && name && i < c->n_models; i++)
        if (!strcmp(c->models[i].name, name)) return (int)i;
    return -1;
}

int cfg_tenant_find(const cfg *c, const char *name) {
    for (size_t i = 0; c && name && i < c->n_tenants; i++)
        if (!strcmp(c->tenants[i].sched.name, name)) return (int)i;
    return -1;
}
