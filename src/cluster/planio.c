/* planio.c - the planner's YAML input; see planio.h.
 *
 * libyaml's document API loads the file into a node tree with source marks;
 * the reader walks the schema, not the tree, so an alias cycle cannot make
 * it recurse, and every value's expected type is known where it is read.
 * Everything goes into a local plan_input that is handed over only when the
 * whole file has passed.
 */
#include "planio.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "err.h"
#include "gpucat.h"

#define FIELD_MAX 160               /* bytes of a field path, "tenants[12].load.rps" */
#define MAX_TIERS 8                 /* serve's SCHED_MAX_TIERS */

#define MODEL_EXTRA "._:/-"         /* serve's model-name characters */
#define NAME_EXTRA "._-"            /* serve's tenant and tier names */

typedef struct rd {
    yaml_document_t doc;
    const char *file;
    char *err;
    size_t errlen;
} rd;

__attribute__((format(printf, 4, 5)))
static int fail(const rd *r, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    if (!r->err || !r->errlen) return TS_ERR_CONFIG;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (n) snprintf(where, sizeof where, ":%lu", (unsigned long)n->start_mark.line + 1);
    if (path && *path) snprintf(r->err, r->errlen, "%s%s: %s: %s", r->file, where, path, msg);
    else snprintf(r->err, r->errlen, "%s%s: %s", r->file, where, msg);
    return TS_ERR_CONFIG;
}

static yaml_node_t *node(const rd *r, int i) { return yaml_document_get_node((yaml_document_t *)&r->doc, i); }

static void join(char *out, const char *path, const char *key) {
    snprintf(out, FIELD_MAX, "%.100s%s%.40s", path, *path ? "." : "", key);
}

/* Map keys to keys[0..n) (unknown and repeated keys are errors); vals[i]
 * is the value of keys[i] or NULL. */
static int fields(const rd *r, const yaml_node_t *map, const char *path, const char *const *keys,
                  size_t n, yaml_node_t **vals) {
    for (size_t i = 0; i < n; i++) vals[i] = NULL;
    if (map->type != YAML_MAPPING_NODE) return fail(r, map, path, "expected a mapping (key: value lines)");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = node(r, p->key), *v = node(r, p->value);
        if (k->type != YAML_SCALAR_NODE) return fail(r, k, path, "keys must be plain names");
        const char *name = (const char *)k->data.scalar.value;
        char fp[FIELD_MAX];
        join(fp, path, name);
        size_t i = 0;
        while (i < n && strcmp(keys[i], name) != 0) i++;
        if (i == n) {
            char list[400] = "";
            size_t o = 0;
            for (size_t j = 0; j < n && o < sizeof list; j++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", j ? ", " : "", keys[j]);
            return fail(r, k, fp, "unknown key (expected one of: %s)", list);
        }
        if (vals[i]) return fail(r, k, fp, "repeated key");
        vals[i] = v;
    }
    return 0;
}

static const char *text(const rd *r, const yaml_node_t *n, const char *path, int *rc) {
    if (n->type != YAML_SCALAR_NODE) {
        *rc = fail(r, n, path, "expected a single value, not a %s",
                   n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (!*s || (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                (!strcmp(s, "~") || !strcasecmp(s, "null")))) {
        *rc = fail(r, n, path, "missing value");
        return NULL;
    }
    if (strlen(s) != n->data.scalar.length) {
        *rc = fail(r, n, path, "value contains a NUL byte");
        return NULL;
    }
    *rc = 0;
    return s;
}

/* A finite number in [lo, hi] ((lo, hi] when open); `suffix` allows
 * K, M, B (or G), T multipliers, as in "8.03B" parameters. */
static int number(const rd *r, const yaml_node_t *n, const char *path, double lo, double hi, int open,
                  int suffix, double *out) {
    int rc;
    const char *s = text(r, n, path, &rc);
    if (!s) return rc;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int ok = end != s && !errno;
    if (ok && *end && suffix && !end[1]) {
        switch (*end) {
        case 'k': case 'K': v *= 1e3; break;
        case 'm': case 'M': v *= 1e6; break;
        case 'b': case 'B': case 'g': case 'G': v *= 1e9; break;
        case 't': case 'T': v *= 1e12; break;
        default: ok = 0;
        }
        end++;
    }
    if (!ok || *end || !isfinite(v) || v > hi || (open ? v <= lo : v < lo))
        return fail(r, n, path, "expected a number in %s%g, %g]%s, got '%.40s'", open ? "(" : "[", lo, hi,
                    suffix ? " (suffixes K, M, B, T allowed)" : "", s);
    *out = v;
    return 0;
}

static int integer(const rd *r, const yaml_node_t *n, const char *path, long lo, long hi, long *out) {
    double v;
    int rc = number(r, n, path, (double)lo, (double)hi, 0, 0, &v);
    if (rc) return rc;
    if (v != floor(v)) return fail(r, n, path, "expected a whole number, got %g", v);
    *out = (long)v;
    return 0;
}

static int int_field(const rd *r, const yaml_node_t *n, const char *path, long lo, long hi, int *out) {
    long v = 0;
    int rc = integer(r, n, path, lo, hi, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

static int name_field(const rd *r, const yaml_node_t *n, const char *path, const char *extra, char *out,
                      size_t cap) {
    int rc;
    const char *s = text(r, n, path, &rc);
    if (!s) return rc;
    size_t len = strlen(s);
    int ok = len > 0 && len < cap;
    for (size_t i = 0; ok && i < len; i++) {
        char c = s[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr(extra, c);
    }
    if (!ok)
        return fail(r, n, path, "bad name '%.60s' (1 to %zu characters: letters, digits and %s)", s, cap - 1,
                    extra);
    memcpy(out, s, len + 1);
    return 0;
}

/* Sequence items of n, or an error if n is not a non-empty list. */
static int list(const rd *r, const yaml_node_t *n, const char *path, yaml_node_item_t **a, size_t *len) {
    if (n->type != YAML_SEQUENCE_NODE) return fail(r, n, path, "expected a list (lines starting with '- ')");
    *a = n->data.sequence.items.start;
    *len = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (*len == 0) return fail(r, n, path, "the list is empty");
    return 0;
}

/* ---- sections ------------------------------------------------------------------ */

static int read_fleet(const rd *r, const yaml_node_t *seq, plan_input *in) {
    static const char *const K[] = {"name", "gpu", "gpus_per_node", "nodes"};
    yaml_node_item_t *a = NULL;
    size_t n = 0;
    int rc = list(r, seq, "fleet", &a, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        char path[FIELD_MAX], fp[FIELD_MAX];
        snprintf(path, sizeof path, "fleet[%zu]", i);
        yaml_node_t *item = node(r, a[i]), *v[4];
        if ((rc = fields(r, item, path, K, 4, v))) return rc;
        plan_pool p = {.gpus_per_node = 8, .nodes = 1};
        join(fp, path, "name");
        if (!v[0]) return fail(r, item, fp, "required");
        if ((rc = name_field(r, v[0], fp, NAME_EXTRA, p.name, sizeof p.name - 8))) return rc;
        for (size_t j = 0; j < in->n_pools; j++)
            if (!strcmp(in->pools[j].name, p.name)) return fail(r, v[0], fp, "repeated pool name '%s'", p.name);
        join(fp, path, "gpu");
        if (!v[1]) return fail(r, item, fp, "required");
        const char *g = text(r, v[1], fp, &rc);
        if (!g) return rc;
        if (!(p.gpu = gpucat_find(g))) {
            char names[512];
            gpucat_names(names, sizeof names);
            return fail(r, v[1], fp, "unknown GPU type '%.40s' (%s)", g, names);
        }
        join(fp, path, "gpus_per_node");
        if (v[2] && (rc = int_field(r, v[2], fp, 1, 64, &p.gpus_per_node))) return rc;
        join(fp, path, "nodes");
        if (v[3] && (rc = int_field(r, v[3], fp, 1, 100000, &p.nodes))) return rc;
        if ((rc = plan_input_add_pool(in, &p)) < 0) return rc;
    }
    return 0;
}

static int read_models(const rd *r, const yaml_node_t *seq, plan_input *in) {
    enum { NAME, PARAMS, DT, KVDT, LAYERS, KVH, HEADS, HD, CTX, PATH, NK };
    static const char *const K[NK] = {"name",     "params",   "dtype_bytes", "kv_dtype_bytes", "layers",
                                      "kv_heads", "heads",    "head_dim",    "max_context",    "path"};
    yaml_node_item_t *a = NULL;
    size_t n = 0;
    int rc = list(r, seq, "models", &a, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        char path[FIELD_MAX], fp[NK][FIELD_MAX];
        snprintf(path, sizeof path, "models[%zu]", i);
        yaml_node_t *item = node(r, a[i]), *v[NK];
        if ((rc = fields(r, item, path, K, NK, v))) return rc;
        for (int k = 0; k < NK; k++) join(fp[k], path, K[k]);
        plan_model m;
        memset(&m, 0, sizeof m);
        m.m.weight_bytes = 2;
        m.m.kv_bytes = 2;
        m.m.max_context = 4096;
        static const int required[] = {NAME, PARAMS, LAYERS, KVH, HD};
        for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
            if (!v[required[k]]) return fail(r, item, fp[required[k]], "required");
        if ((rc = name_field(r, v[NAME], fp[NAME], MODEL_EXTRA, m.name, sizeof m.name))) return rc;
        if (plan_model_find(in, m.name) >= 0) return fail(r, v[NAME], fp[NAME], "repeated model name '%s'", m.name);
        if ((rc = number(r, v[PARAMS], fp[PARAMS], 0, 1e15, 1, 1, &m.m.params))) return rc;
        if (v[DT] && (rc = number(r, v[DT], fp[DT], 0.25, 8, 0, 0, &m.m.weight_bytes))) return rc;
        if (v[KVDT] && (rc = number(r, v[KVDT], fp[KVDT], 0.25, 8, 0, 0, &m.m.kv_bytes))) return rc;
        if ((rc = int_field(r, v[LAYERS], fp[LAYERS], 1, 1000, &m.m.layers))) return rc;
        if ((rc = int_field(r, v[KVH], fp[KVH], 1, 1024, &m.m.kv_heads))) return rc;
        m.m.heads = m.m.kv_heads;
        if (v[HEADS] && (rc = int_field(r, v[HEADS], fp[HEADS], 1, 4096, &m.m.heads))) return rc;
        if (m.m.heads < m.m.kv_heads)
            return fail(r, v[HEADS], fp[HEADS], "%d query heads is fewer than %d KV heads", m.m.heads, m.m.kv_heads);
        if ((rc = int_field(r, v[HD], fp[HD], 1, 4096, &m.m.head_dim))) return rc;
        if (v[CTX] && (rc = int_field(r, v[CTX], fp[CTX], 0, 1 << 24, &m.m.max_context))) return rc;
        if (v[PATH]) {
            const char *s = text(r, v[PATH], fp[PATH], &rc);
            if (!s) return rc;
            if (strlen(s) >= sizeof m.path) return fail(r, v[PATH], fp[PATH], "path longer than %zu bytes", sizeof m.path - 1);
            snprintf(m.path, sizeof m.path, "%s", s);
        }
        if ((rc = plan_input_add_model(in, &m)) < 0) return rc;
    }
    return 0;
}

static int read_tiers(const rd *r, const yaml_node_t *seq, plan_input *in) {
    static const char *const K[] = {"name", "ttft_ms", "tpot_ms", "band", "min_share"};
    yaml_node_item_t *a = NULL;
    size_t n = 0;
    int rc = list(r, seq, "tiers", &a, &n);
    if (rc) return rc;
    if (n > MAX_TIERS) return fail(r, seq, "tiers", "%zu tiers, at most %d", n, MAX_TIERS);
    double shares = 0;
    for (size_t i = 0; i < n; i++) {
        char path[FIELD_MAX], fp[5][FIELD_MAX];
        snprintf(path, sizeof path, "tiers[%zu]", i);
        yaml_node_t *item = node(r, a[i]), *v[5];
        if ((rc = fields(r, item, path, K, 5, v))) return rc;
        for (int k = 0; k < 5; k++) join(fp[k], path, K[k]);
        plan_tier t;
        memset(&t, 0, sizeof t);
        t.band = (int)i;
        if (!v[0]) return fail(r, item, fp[0], "required");
        if ((rc = name_field(r, v[0], fp[0], NAME_EXTRA, t.name, sizeof t.name))) return rc;
        if (plan_tier_find(in, t.name) >= 0) return fail(r, v[0], fp[0], "repeated tier name '%s'", t.name);
        if (v[1] && (rc = number(r, v[1], fp[1], 0, 1e7, 0, 0, &t.ttft_ms))) return rc;
        if (v[2] && (rc = number(r, v[2], fp[2], 0, 1e7, 0, 0, &t.tpot_ms))) return rc;
        if (v[3] && (rc = int_field(r, v[3], fp[3], 0, MAX_TIERS - 1, &t.band))) return rc;
        if (v[4] && (rc = number(r, v[4], fp[4], 0, 1, 0, 0, &t.min_share))) return rc;
        shares += t.min_share;
        if (shares > 1.0 + 1e-9)
            return fail(r, v[4] ? v[4] : item, fp[4], "minimum shares of the tiers sum to %.2f, more than 1", shares);
        if ((rc = plan_input_add_tier(in, &t)) < 0) return rc;
    }
    return 0;
}

static int read_load(const rd *r, const yaml_node_t *map, const char *path, perf_load *l) {
    static const char *const K[] = {"rps", "prompt_tokens", "output_tokens"};
    yaml_node_t *v[3];
    char fp[3][FIELD_MAX];
    int rc = fields(r, map, path, K, 3, v);
    if (rc) return rc;
    for (int k = 0; k < 3; k++) join(fp[k], path, K[k]);
    if (v[0] && (rc = number(r, v[0], fp[0], 0, 1e7, 0, 0, &l->rps))) return rc;
    if (v[1] && (rc = number(r, v[1], fp[1], 0, 1 << 24, 0, 0, &l->prompt))) return rc;
    if (v[2] && (rc = number(r, v[2], fp[2], 1, 1 << 24, 0, 0, &l->output))) return rc;
    return 0;
}

static int names_of(char *buf, size_t cap, const char *(*get)(const plan_input *, size_t), const plan_input *in,
                    size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && o < cap; i++) {
        int k = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", get(in, i));
        if (k < 0) break;
        o += (size_t)k;
    }
    return 0;
}
static const char *model_name(const plan_input *in, size_t i) { return in->models[i].name; }
static const char *tier_name(const plan_input *in, size_t i) { return in->tiers[i].name; }

static int read_tenants(const rd *r, const yaml_node_t *seq, plan_input *in) {
    enum { NAME, MODEL, TIER, ISO, GROUP, PROFILE, LOAD, KEY, WEIGHT, NK };
    static const char *const K[NK] = {"name", "model", "tier", "isolation", "group", "profile", "load",
                                      "key_sha256", "weight"};
    yaml_node_item_t *a = NULL;
    size_t n = 0;
    int rc = list(r, seq, "tenants", &a, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        char path[FIELD_MAX], fp[NK][FIELD_MAX], names[512];
        snprintf(path, sizeof path, "tenants[%zu]", i);
        yaml_node_t *item = node(r, a[i]), *v[NK];
        if ((rc = fields(r, item, path, K, NK, v))) return rc;
        for (int k = 0; k < NK; k++) join(fp[k], path, K[k]);
        plan_tenant t;
        memset(&t, 0, sizeof t);
        t.iso = PLAN_ISO_SHARED;
        t.weight = 1;
        t.load.prompt = 512;
        t.load.output = 128;
        for (int k = NAME; k <= TIER; k++)
            if (!v[k]) return fail(r, item, fp[k], "required");
        if ((rc = name_field(r, v[NAME], fp[NAME], NAME_EXTRA, t.name, sizeof t.name))) return rc;
        for (size_t j = 0; j < in->n_tenants; j++)
            if (!strcmp(in->tenants[j].name, t.name)) return fail(r, v[NAME], fp[NAME], "repeated tenant name '%s'", t.name);
        const char *s = text(r, v[MODEL], fp[MODEL], &rc);
        if (!s) return rc;
        if ((t.model = plan_model_find(in, s)) < 0) {
            names_of(names, sizeof names, model_name, in, in->n_models);
            return fail(r, v[MODEL], fp[MODEL], "unknown model '%.48s' (%s)", s, names);
        }
        if (!(s = text(r, v[TIER], fp[TIER], &rc))) return rc;
        if ((t.tier = plan_tier_find(in, s)) < 0) {
            names_of(names, sizeof names, tier_name, in, in->n_tiers);
            return fail(r, v[TIER], fp[TIER], "unknown tier '%.48s' (%s)", s, names);
        }
        if (v[ISO]) {
            if (!(s = text(r, v[ISO], fp[ISO], &rc))) return rc;
            if (!strcmp(s, "strict")) t.iso = PLAN_ISO_STRICT;
            else if (!strcmp(s, "shared")) t.iso = PLAN_ISO_SHARED;
            else if (!strcmp(s, "best-effort")) t.iso = PLAN_ISO_BEST_EFFORT;
            else return fail(r, v[ISO], fp[ISO], "unknown isolation '%.40s' (strict, shared, best-effort)", s);
        }
        if (v[GROUP]) {
            if (t.iso != PLAN_ISO_STRICT) return fail(r, v[GROUP], fp[GROUP], "a group applies to strict isolation only");
            if ((rc = name_field(r, v[GROUP], fp[GROUP], NAME_EXTRA, t.group, sizeof t.group))) return rc;
        }
        if (v[PROFILE]) {
            if (t.iso != PLAN_ISO_STRICT) return fail(r, v[PROFILE], fp[PROFILE], "a MIG profile applies to strict isolation only");
            if ((rc = name_field(r, v[PROFILE], fp[PROFILE], "._+", t.profile, sizeof t.profile))) return rc;
            int known = 0;
            for (size_t g = 0; g < gpucat_count() && !known; g++) known = gpucat_mig_find(gpucat_at(g), t.profile) != NULL;
            if (!known) return fail(r, v[PROFILE], fp[PROFILE], "'%s' is no MIG profile of any known GPU (like 2g.20gb)", t.profile);
        }
        if (v[LOAD] && (rc = read_load(r, v[LOAD], fp[LOAD], &t.load))) return rc;
        if (v[KEY]) {
            if (!(s = text(r, v[KEY], fp[KEY], &rc))) return rc;
            int ok = strlen(s) == 64;
            for (size_t k = 0; ok && k < 64; k++) ok = strchr("0123456789abcdefABCDEF", s[k]) != NULL;
            if (!ok) return fail(r, v[KEY], fp[KEY], "expected the SHA-256 of a key as 64 hex digits (tessera keygen prints it)");
            snprintf(t.key_sha256, sizeof t.key_sha256, "%s", s);
        }
        if (v[WEIGHT] && (rc = number(r, v[WEIGHT], fp[WEIGHT], 0, 1e6, 1, 0, &t.weight))) return rc;
        if ((rc = plan_input_add_tenant(in, &t)) < 0) return rc;
    }
    return 0;
}

static int read_options(const rd *r, const yaml_node_t *map, plan_input *in) {
    enum { CE, BE, OVH, UTIL, Z, HR, RES, REPL, EXL, EXB, NK };
    static const char *const K[NK] = {"compute_efficiency", "bandwidth_efficiency", "step_overhead_ms",
                                      "max_utilization",    "kv_quantile_z",        "headroom",
                                      "reserve_gib",        "max_replicas",         "exact_limit",
                                      "exact_budget"};
    yaml_node_t *v[NK];
    char fp[NK][FIELD_MAX];
    int rc = fields(r, map, "options", K, NK, v);
    if (rc) return rc;
    for (int k = 0; k < NK; k++) join(fp[k], "options", K[k]);
    perf_opts *o = &in->perf;
    double x;
    long l = 0;
    if (v[CE] && (rc = number(r, v[CE], fp[CE], 0, 1, 1, 0, &o->eff_compute))) return rc;
    if (v[BE] && (rc = number(r, v[BE], fp[BE], 0, 1, 1, 0, &o->eff_bw))) return rc;
    if (v[OVH]) {
        if ((rc = number(r, v[OVH], fp[OVH], 0, 1000, 0, 0, &x))) return rc;
        o->step_overhead_s = x / 1e3;
    }
    if (v[UTIL] && (rc = number(r, v[UTIL], fp[UTIL], 0, 1, 1, 0, &o->max_util))) return rc;
    if (v[Z] && (rc = number(r, v[Z], fp[Z], 0, 10, 0, 0, &o->kv_z))) return rc;
    if (v[HR] && (rc = number(r, v[HR], fp[HR], 0, 10, 0, 0, &o->headroom))) return rc;
    if (v[RES]) {
        if ((rc = number(r, v[RES], fp[RES], 0, 1024, 0, 0, &x))) return rc;
        o->reserve_bytes = x * 1073741824.0;
    }
    if (v[REPL] && (rc = int_field(r, v[REPL], fp[REPL], 1, 100000, &in->max_replicas))) return rc;
    if (v[EXL] && (rc = int_field(r, v[EXL], fp[EXL], 0, 64, &in->exact_limit))) return rc;
    if (v[EXB]) {
        if ((rc = integer(r, v[EXB], fp[EXB], 1, 10000000000L, &l))) return rc;
        in->exact_budget = l;
    }
    return 0;
}

static int read_doc(const rd *r, plan_input *in) {
    enum { FLEET, MODELS, TIERS, TENANTS, OPTIONS, NK };
    static const char *const K[NK] = {"fleet", "models", "tiers", "tenants", "options"};
    yaml_node_t *root = yaml_document_get_root_node((yaml_document_t *)&r->doc), *v[NK];
    if (!root) return fail(r, NULL, "", "empty file");
    int rc = fields(r, root, "", K, NK, v);
    if (rc) return rc;
    for (int k = 0; k < NK; k++)
        if (!v[k] && k != TIERS && k != OPTIONS) return fail(r, root, K[k], "required");
    if ((rc = read_fleet(r, v[FLEET], in))) return rc;
    if ((rc = read_models(r, v[MODELS], in))) return rc;
    if (v[TIERS]) rc = read_tiers(r, v[TIERS], in);
    else rc = plan_input_default_tiers(in);
    if (rc) return rc;
    if ((rc = read_tenants(r, v[TENANTS], in))) return rc;
    if (v[OPTIONS] && (rc = read_options(r, v[OPTIONS], in))) return rc;
    return 0;
}

int planio_parse(const char *textbuf, size_t len, const char *name, plan_input *in, char *err, size_t errlen) {
    if (!in) return TS_ERR_INVAL;
    plan_input_init(in);
    if (err && errlen) err[0] = 0;
    if (!textbuf) return TS_ERR_INVAL;
    rd r;
    memset(&r, 0, sizeof r);
    r.file = name ? name : "<input>";
    r.err = err;
    r.errlen = errlen;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return TS_ERR_NOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)textbuf, len);
    if (!yaml_parser_load(&parser, &r.doc)) {
        int rc = parser.error == YAML_MEMORY_ERROR ? TS_ERR_NOMEM : TS_ERR_CONFIG;
        if (err && errlen)
            snprintf(err, errlen, "%s:%lu: YAML syntax error: %s%s%s%s", r.file,
                     (unsigned long)parser.problem_mark.line + 1, parser.problem ? parser.problem : "unknown",
                     parser.context ? " (" : "", parser.context ? parser.context : "", parser.context ? ")" : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    yaml_parser_delete(&parser);
    plan_input tmp;
    plan_input_init(&tmp);
    int rc = read_doc(&r, &tmp);
    yaml_document_delete(&r.doc);
    if (rc < 0) {
        plan_input_free(&tmp);
        return rc;
    }
    *in = tmp;
    return 0;
}

int planio_load(const char *path, plan_input *in, char *err, size_t errlen) {
    if (!path || !in) return TS_ERR_INVAL;
    plan_input_init(in);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return TS_ERR_IO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = (cap ? cap * 2 : 8192);
            if (cap > (64u << 20)) {
                free(buf);
                fclose(f);
                if (err && errlen) snprintf(err, errlen, "%s: larger than 64 MiB", path);
                return TS_ERR_CONFIG;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return TS_ERR_NOMEM;
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        if (err && errlen) snprintf(err, errlen, "%s: read error", path);
        return TS_ERR_IO;
    }
    int rc = planio_parse(buf, len, path, in, err, errlen);
    free(buf);
    return rc;
}
