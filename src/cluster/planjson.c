/* planjson.c - the plan's JSON report read back into a plan; see planjson.h.
 *
 * The reader trusts nothing it can check: names must resolve, indices
 * must lie in range and agree with each other (a slice's instances point
 * back at it, a worker's replicas are its instances and its instances its
 * replicas, each tenant is in exactly one worker and its result names
 * that worker), what each GPU's slices ask of it must exist (one kind of
 * sharing, shares and memory within the GPU), and so must the MIG layout
 * they imply. What the report derives (estimates, GPU tallies, totals,
 * predictions, each tenant's ok and the plan's feasible) is recomputed,
 * not read, so a report edited by hand cannot carry numbers its structure
 * does not give.
 */
#include "planjson.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ydoc.h"

#define FP_MAX 160                  /* bytes of a field path */

typedef struct rd {
    char *err;
    size_t errlen;
    size_t n_insts;                 /* instances the report lists */
    int *owner;                     /* [input tenants]: the worker listing it, -1 = none yet */
} rd;

/* "path: message", one line: the values a message quotes are the report's
 * strings, which may hold any control character. */
__attribute__((format(printf, 3, 4)))
static int fail(rd *r, const char *path, const char *fmt, ...) {
    if (r->err && r->errlen) {
        char raw[1024];
        int n = snprintf(raw, sizeof raw, "%s: ", path[0] ? path : "plan");
        if (n > 0 && (size_t)n < sizeof raw) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(raw + n, sizeof raw - (size_t)n, fmt, ap);
            va_end(ap);
        }
        err_escape_ctl(r->err, r->errlen, raw);
    }
    return TS_ERR_CONFIG;
}

static const char *key_path(char fp[FP_MAX], const char *path, const char *key) {
    /* A path too long for the buffer is cut short: it only names a field. */
    if (snprintf(fp, FP_MAX, "%s%s%s", path, path[0] ? "." : "", key) >= FP_MAX) fp[FP_MAX - 1] = 0;
    return fp;
}

static const char *index_path(char fp[FP_MAX], const char *path, size_t i) {
    if (snprintf(fp, FP_MAX, "%s[%zu]", path, i) >= FP_MAX) fp[FP_MAX - 1] = 0;
    return fp;
}

/* ---- typed fields ---------------------------------------------------------------- */

static int get_item(rd *r, const cJSON *obj, const char *path, const char *key, const cJSON **out) {
    char fp[FP_MAX];
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!*out) return fail(r, key_path(fp, path, key), "missing");
    return 0;
}

static int get_num(rd *r, const cJSON *obj, const char *path, const char *key, double lo, double hi, double *out) {
    char fp[FP_MAX];
    const cJSON *it;
    int rc = get_item(r, obj, path, key, &it);
    if (rc) return rc;
    if (!cJSON_IsNumber(it)) return fail(r, key_path(fp, path, key), "expected a number");
    double v = it->valuedouble;
    if (!(v >= lo && v <= hi)) return fail(r, key_path(fp, path, key), "%g is outside %g..%g", v, lo, hi);
    *out = v;
    return 0;
}

static int get_int(rd *r, const cJSON *obj, const char *path, const char *key, long lo, long hi, long *out) {
    char fp[FP_MAX];
    double v;
    int rc = get_num(r, obj, path, key, (double)lo, (double)hi, &v);
    if (rc) return rc;
    if (v != floor(v)) return fail(r, key_path(fp, path, key), "expected an integer, not %g", v);
    *out = (long)v;
    return 0;
}

static int get_i32(rd *r, const cJSON *obj, const char *path, const char *key, int lo, int hi, int *out) {
    long v = 0;
    int rc = get_int(r, obj, path, key, lo, hi, &v);
    if (!rc) *out = (int)v;
    return rc;
}

static int get_bool(rd *r, const cJSON *obj, const char *path, const char *key, int *out) {
    char fp[FP_MAX];
    const cJSON *it;
    int rc = get_item(r, obj, path, key, &it);
    if (rc) return rc;
    if (!cJSON_IsBool(it)) return fail(r, key_path(fp, path, key), "expected true or false");
    *out = cJSON_IsTrue(it);
    return 0;
}

/* A string borrowed from the document. */
static int get_strp(rd *r, const cJSON *obj, const char *path, const char *key, const char **out) {
    char fp[FP_MAX];
    const cJSON *it;
    int rc = get_item(r, obj, path, key, &it);
    if (rc) return rc;
    if (!cJSON_IsString(it) || !it->valuestring) return fail(r, key_path(fp, path, key), "expected a string");
    *out = it->valuestring;
    return 0;
}

/* A string copied into out[0..cap); `empty` allows "". */
static int get_str(rd *r, const cJSON *obj, const char *path, const char *key, int empty, char *out, size_t cap) {
    char fp[FP_MAX];
    const char *s;
    int rc = get_strp(r, obj, path, key, &s);
    if (rc) return rc;
    if (!empty && !s[0]) return fail(r, key_path(fp, path, key), "empty");
    if (strlen(s) >= cap) return fail(r, key_path(fp, path, key), "longer than %zu bytes", cap - 1);
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* A name (empty: allowed) of the alphabet the planner's input allows it
 * (planio.c): a report's names become instance names, CSV fields and
 * configuration keys, so one the planner would refuse cannot be a plan's. */
static int get_name(rd *r, const cJSON *obj, const char *path, const char *key, const char *extra, int empty,
                    char *out, size_t cap) {
    char fp[FP_MAX];
    int rc = get_str(r, obj, path, key, empty, out, cap);
    if (rc || !out[0] || ydoc_name_ok(out, extra, cap)) return rc;
    return fail(r, key_path(fp, path, key), "bad name '%.60s' (letters, digits and %s)", out, extra);
}

static int get_arr(rd *r, const cJSON *obj, const char *path, const char *key, const cJSON **out, size_t *n) {
    char fp[FP_MAX];
    int rc = get_item(r, obj, path, key, out);
    if (rc) return rc;
    if (!cJSON_IsArray(*out)) return fail(r, key_path(fp, path, key), "expected a list");
    *n = (size_t)cJSON_GetArraySize(*out);
    return 0;
}

static int get_obj(rd *r, const cJSON *obj, const char *path, const char *key, const cJSON **out) {
    char fp[FP_MAX];
    int rc = get_item(r, obj, path, key, out);
    if (rc) return rc;
    if (!cJSON_IsObject(*out)) return fail(r, key_path(fp, path, key), "expected an object");
    return 0;
}

/* The index of the name among name(0..count), or an error listing what it is. */
static int get_enum(rd *r, const cJSON *obj, const char *path, const char *key, const char *(*name)(int),
                    int count, int *out) {
    char fp[FP_MAX];
    const char *s;
    int rc = get_strp(r, obj, path, key, &s);
    if (rc) return rc;
    for (int i = 0; i < count; i++)
        if (strcmp(s, name(i)) == 0) return *out = i, 0;
    return fail(r, key_path(fp, path, key), "unknown value '%.40s'", s);
}

static int check_obj(rd *r, const cJSON *it, const char *path) {
    return cJSON_IsObject(it) ? 0 : fail(r, path, "expected an object");
}

/* ---- the input ------------------------------------------------------------------- */

/* A tenant's load; its headroom is written only where it is not 1, so a
 * report without one reads as 1. */
static int read_load(rd *r, const cJSON *obj, const char *path, plan_tenant *t) {
    char fp[FP_MAX];
    const cJSON *o;
    perf_load *l = &t->load;
    int rc = get_obj(r, obj, path, "load", &o);
    key_path(fp, path, "load");
    if (!rc) rc = get_num(r, o, fp, "rps", 0, 1e7, &l->rps);
    if (!rc) rc = get_num(r, o, fp, "prompt_tokens", 0, 1 << 24, &l->prompt);
    if (!rc) rc = get_num(r, o, fp, "output_tokens", 1, 1 << 24, &l->output);
    if (!rc) rc = get_num(r, o, fp, "prompt_cv", 0, 100, &l->prompt_cv);
    t->headroom = 1;
    if (!rc && cJSON_GetObjectItemCaseSensitive(o, "headroom")) rc = get_num(r, o, fp, "headroom", 1, 100, &t->headroom);
    return rc;
}

static int read_pool(rd *r, const cJSON *e, const char *path, plan_input *in) {
    char fp[FP_MAX];
    const char *gpu;
    const cJSON *mp;
    plan_pool p;
    memset(&p, 0, sizeof p);
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_name(r, e, path, "name", YDOC_NAME_EXTRA, 0, p.name, sizeof p.name - 8);
    if (!rc) rc = get_strp(r, e, path, "gpu", &gpu);
    if (rc) return rc;
    if (!(p.gpu = gpucat_find(gpu))) return fail(r, key_path(fp, path, "gpu"), "unknown GPU type '%.40s'", gpu);
    if (!rc) rc = get_i32(r, e, path, "gpus_per_node", 1, 64, &p.gpus_per_node);
    if (!rc) rc = get_i32(r, e, path, "nodes", 1, 100000, &p.nodes);
    if (!rc) rc = get_num(r, e, path, "price_per_hour", 0, 1e9, &p.price_per_hour);
    if (!rc) rc = get_obj(r, e, path, "mig_prices", &mp);
    if (rc) return rc;
    key_path(fp, path, "mig_prices");
    for (const cJSON *it = mp->child; it; it = it->next) {
        char ip[FP_MAX];
        key_path(ip, fp, it->string);
        const gpucat_mig *m = gpucat_mig_find(p.gpu, it->string);
        if (!m) return fail(r, ip, "no MIG profile of %s", p.gpu->name);
        if (p.n_mig_prices == GPUCAT_MIG_MAX) return fail(r, ip, "more prices than profiles");
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 1e9))
            return fail(r, ip, "expected a price in 0..1e9");
        plan_mig_price *pr = &p.mig_prices[p.n_mig_prices++];
        snprintf(pr->profile, sizeof pr->profile, "%s", m->name);
        pr->price = it->valuedouble;
    }
    return plan_input_add_pool(in, &p) < 0 ? TS_ERR_NOMEM : 0;
}

static int read_model(rd *r, const cJSON *e, const char *path, plan_input *in) {
    char fp[FP_MAX];
    plan_model m;
    memset(&m, 0, sizeof m);
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_name(r, e, path, "name", YDOC_MODEL_NAME_EXTRA, 0, m.name, sizeof m.name);
    if (!rc && plan_model_find(in, m.name) >= 0)
        return fail(r, key_path(fp, path, "name"), "repeated model name '%s'", m.name);
    if (!rc) rc = get_str(r, e, path, "path", 1, m.path, sizeof m.path);
    if (!rc) rc = get_num(r, e, path, "params", 1, 1e15, &m.m.params);
    if (!rc) rc = get_num(r, e, path, "dtype_bytes", 0.25, 8, &m.m.weight_bytes);
    if (!rc) rc = get_num(r, e, path, "kv_dtype_bytes", 0.25, 8, &m.m.kv_bytes);
    if (!rc) rc = get_i32(r, e, path, "layers", 1, 1000, &m.m.layers);
    if (!rc) rc = get_i32(r, e, path, "heads", 1, 4096, &m.m.heads);
    if (!rc) rc = get_i32(r, e, path, "kv_heads", 1, 1024, &m.m.kv_heads);
    if (!rc) rc = get_i32(r, e, path, "head_dim", 1, 4096, &m.m.head_dim);
    if (!rc) rc = get_i32(r, e, path, "max_context", 0, 1 << 24, &m.m.max_context);
    if (rc) return rc;
    return plan_input_add_model(in, &m) < 0 ? TS_ERR_NOMEM : 0;
}

static int read_tier(rd *r, const cJSON *e, const char *path, plan_input *in) {
    char fp[FP_MAX];
    plan_tier t;
    memset(&t, 0, sizeof t);
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_name(r, e, path, "name", YDOC_NAME_EXTRA, 0, t.name, sizeof t.name);
    if (!rc && plan_tier_find(in, t.name) >= 0)
        return fail(r, key_path(fp, path, "name"), "repeated tier name '%s'", t.name);
    if (!rc) rc = get_num(r, e, path, "ttft_ms", 0, 1e7, &t.ttft_ms);
    if (!rc) rc = get_num(r, e, path, "tpot_ms", 0, 1e7, &t.tpot_ms);
    if (!rc) rc = get_i32(r, e, path, "band", 0, SCHED_MAX_TIERS - 1, &t.band);
    if (!rc) rc = get_num(r, e, path, "min_share", 0, 1, &t.min_share);
    if (!rc) rc = get_num(r, e, path, "max_queue_ms", 0, 4294967295.0, &t.max_queue_ms);
    if (rc) return rc;
    return plan_input_add_tier(in, &t) < 0 ? TS_ERR_NOMEM : 0;
}

/* The index of the input's tenant with this name, or -1. */
static int tenant_find(const plan_input *in, const char *name) {
    for (size_t i = 0; i < in->n_tenants; i++)
        if (strcmp(in->tenants[i].name, name) == 0) return (int)i;
    return -1;
}

static int read_ref(rd *r, const cJSON *e, const char *path, const char *key, int (*find)(const plan_input *, const char *),
                    const plan_input *in, int *out) {
    char fp[FP_MAX];
    const char *s;
    int rc = get_strp(r, e, path, key, &s);
    if (rc) return rc;
    if ((*out = find(in, s)) < 0) return fail(r, key_path(fp, path, key), "unknown %s '%.40s'", key, s);
    return 0;
}

static int read_tenant(rd *r, const cJSON *e, const char *path, plan_input *in) {
    char fp[FP_MAX];
    plan_tenant t;
    memset(&t, 0, sizeof t);
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_name(r, e, path, "name", YDOC_NAME_EXTRA, 0, t.name, sizeof t.name);
    if (!rc && tenant_find(in, t.name) >= 0)
        return fail(r, key_path(fp, path, "name"), "repeated tenant name '%s'", t.name);
    if (!rc) rc = read_ref(r, e, path, "model", plan_model_find, in, &t.model);
    if (!rc) rc = read_ref(r, e, path, "tier", plan_tier_find, in, &t.tier);
    if (!rc) rc = get_enum(r, e, path, "isolation", plan_iso_name, 3, &t.iso);
    if (!rc) rc = get_name(r, e, path, "group", YDOC_NAME_EXTRA, 1, t.group, sizeof t.group);
    if (!rc) rc = get_name(r, e, path, "profile", PLAN_PROFILE_EXTRA, 1, t.profile, sizeof t.profile);
    if (!rc) rc = get_str(r, e, path, "key_sha256", 1, t.key_sha256, sizeof t.key_sha256);
    if (!rc && t.key_sha256[0] && (strlen(t.key_sha256) != 64 || strspn(t.key_sha256, "0123456789abcdefABCDEF") != 64))
        return fail(r, key_path(fp, path, "key_sha256"), "expected \"\" or the SHA-256 of a key as 64 hex digits");
    if (!rc) rc = get_num(r, e, path, "weight", 1e-300, 1e6, &t.weight);
    if (!rc) rc = read_load(r, e, path, &t);
    if (rc) return rc;
    return plan_input_add_tenant(in, &t) < 0 ? TS_ERR_NOMEM : 0;
}

static int read_options(rd *r, const cJSON *o, const char *path, plan_input *in) {
    perf_opts *po = &in->perf;
    long v = 0;
    int rc = get_num(r, o, path, "compute_efficiency", 1e-300, 1, &po->eff_compute);
    if (!rc) rc = get_num(r, o, path, "bandwidth_efficiency", 1e-300, 1, &po->eff_bw);
    if (!rc) rc = get_num(r, o, path, "step_overhead_s", 0, 1, &po->step_overhead_s);
    if (!rc) rc = get_num(r, o, path, "max_utilization", 1e-300, 1, &po->max_util);
    if (!rc) rc = get_num(r, o, path, "kv_quantile_z", 0, 10, &po->kv_z);
    if (!rc) rc = get_num(r, o, path, "headroom", 0, 10, &po->headroom);
    if (!rc) rc = get_num(r, o, path, "reserve_bytes", 0, 1024.0 * 1073741824.0, &po->reserve_bytes);
    if (!rc) rc = get_num(r, o, path, "tpot_bound_s", 0, 1e4, &po->tpot_bound_s);
    if (!rc) rc = get_i32(r, o, path, "max_replicas", 1, 100000, &in->max_replicas);
    if (!rc) rc = get_i32(r, o, path, "exact_limit", 0, 64, &in->exact_limit);
    if (!rc) rc = get_int(r, o, path, "exact_budget", 1, 10000000000L, &v);
    in->exact_budget = v;
    return rc;
}

typedef int (*read_fn)(rd *r, const cJSON *e, const char *path, plan_input *in);

static int read_list(rd *r, const cJSON *obj, const char *path, const char *key, int nonempty, read_fn fn,
                     plan_input *in) {
    char fp[FP_MAX], ip[FP_MAX];
    const cJSON *a;
    size_t n;
    int rc = get_arr(r, obj, path, key, &a, &n);
    if (rc) return rc;
    key_path(fp, path, key);
    if (nonempty && n == 0) return fail(r, fp, "the list is empty");
    size_t i = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next, i++) rc = fn(r, e, index_path(ip, fp, i), in);
    return rc;
}

static int read_input(rd *r, const cJSON *root, plan_input *in) {
    const cJSON *o, *opts;
    int rc = get_obj(r, root, "", "input", &o);
    if (!rc) rc = read_list(r, o, "input", "pools", 1, read_pool, in);
    if (!rc) rc = read_list(r, o, "input", "models", 1, read_model, in);
    if (!rc) rc = read_list(r, o, "input", "tiers", 1, read_tier, in);
    if (!rc) rc = read_list(r, o, "input", "tenants", 0, read_tenant, in);
    if (!rc) rc = get_obj(r, o, "input", "options", &opts);
    if (!rc) rc = read_options(r, opts, "input.options", in);
    return rc;
}

/* ---- the plan -------------------------------------------------------------------- */

static int worker_find(const plan *p, const char *name) {
    for (size_t w = 0; w < p->n_workers; w++)
        if (strcmp(p->workers[w].name, name) == 0) return (int)w;
    return -1;
}

/* Tenant t may join the worker being read (the last of p's): it is in no
 * worker yet, and runs the worker's model with its isolation; and it is
 * one plan_build would group with the worker's first tenant (the same
 * strict group, the same shared tier), since a worker runs as one trust
 * domain with one set of targets. */
static int check_member(rd *r, const char *path, const plan *p, size_t t) {
    const plan_input *in = p->in;
    const plan_tenant *tn = &in->tenants[t];
    int w = (int)p->n_workers - 1;
    const plan_worker *pw = &p->workers[w];
    if (r->owner[t] == w) return fail(r, path, "tenant '%s' is listed twice", tn->name);
    if (r->owner[t] >= 0) return fail(r, path, "tenant '%s' is already in worker '%s'", tn->name, p->workers[r->owner[t]].name);
    if (tn->model != pw->model) return fail(r, path, "tenant '%s' runs another model", tn->name);
    if (tn->iso != pw->iso)
        return fail(r, path, "tenant '%s' is %s, the worker %s", tn->name, plan_iso_name(tn->iso), plan_iso_name(pw->iso));
    if (pw->n_tenants > 0 && !plan_tenants_share_worker(in, pw->tenants[0], t))
        return fail(r, path, "tenant '%s' cannot share a worker with '%s': %s", tn->name, in->tenants[pw->tenants[0]].name,
                    tn->iso == PLAN_ISO_STRICT ? "another strict group" : "another tier");
    r->owner[t] = w;
    return 0;
}

/* The modes each isolation class is given (plan.h's decision tree). */
static int mode_serves(int iso, int mode) {
    switch (iso) {
    case PLAN_ISO_STRICT: return mode == PLAN_MODE_MIG || mode == PLAN_MODE_MIG_MPS || mode == PLAN_MODE_WHOLE;
    case PLAN_ISO_SHARED: return mode == PLAN_MODE_MPS;
    default: return mode == PLAN_MODE_TIMESLICE;
    }
}

/* The worker just read agrees with its tenants: its mode is one its
 * isolation gets, and its tier is as urgent as its most urgent tenant's
 * (serve's priority band comes from it). */
static int check_worker(rd *r, const char *path, const plan *p) {
    char fp[FP_MAX];
    const plan_input *in = p->in;
    const plan_worker *w = &p->workers[p->n_workers - 1];
    if (!mode_serves(w->iso, w->mode))
        return fail(r, key_path(fp, path, "mode"), "%s is not a mode for %s tenants", plan_mode_name(w->mode), plan_iso_name(w->iso));
    int band = INT_MAX;
    for (size_t k = 0; k < w->n_tenants; k++) {
        int b = in->tiers[in->tenants[w->tenants[k]].tier].band;
        if (b < band) band = b;
    }
    if (in->tiers[w->tier].band != band)
        return fail(r, key_path(fp, path, "tier"), "'%s' has band %d, but its most urgent tenant's band is %d",
                    in->tiers[w->tier].name, in->tiers[w->tier].band, band);
    return 0;
}

static int read_worker(rd *r, const cJSON *e, const char *path, plan *p) {
    char fp[FP_MAX];
    const plan_input *in = p->in;
    plan_worker *w = &p->workers[p->n_workers];
    const cJSON *tn;
    size_t n;
    long first = 0;
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_name(r, e, path, "name", YDOC_NAME_EXTRA, 0, w->name, sizeof w->name);
    if (!rc && worker_find(p, w->name) >= 0)
        return fail(r, key_path(fp, path, "name"), "repeated worker name '%s'", w->name);
    if (!rc) rc = read_ref(r, e, path, "model", plan_model_find, in, &w->model);
    if (!rc) rc = get_enum(r, e, path, "isolation", plan_iso_name, 3, &w->iso);
    if (!rc) rc = get_enum(r, e, path, "mode", plan_mode_name, 5, &w->mode);
    if (!rc) rc = read_ref(r, e, path, "tier", plan_tier_find, in, &w->tier);
    if (!rc) rc = get_i32(r, e, path, "replicas", 0, in->max_replicas, &w->replicas);
    if (!rc) rc = get_int(r, e, path, "first_inst", 0, 1L << 40, &first);
    if (!rc) rc = get_num(r, e, path, "tpot_sized_s", 0, 1e4, &w->tpot_sized_s);
    if (!rc) rc = get_arr(r, e, path, "tenants", &tn, &n);
    if (rc) return rc;
    w->first_inst = (size_t)first;
    key_path(fp, path, "tenants");
    if (n == 0) return fail(r, fp, "the list is empty");
    p->n_workers++;                 /* from here on plan_free owns its tenants */
    if (!(w->tenants = calloc(n, sizeof *w->tenants))) return TS_ERR_NOMEM;
    for (const cJSON *it = tn->child; it; it = it->next) {
        char ip[FP_MAX];
        index_path(ip, fp, w->n_tenants);
        int t = cJSON_IsString(it) ? tenant_find(in, it->valuestring) : -1;
        if (t < 0) return fail(r, ip, "expected the name of a tenant of the input");
        if ((rc = check_member(r, ip, p, (size_t)t))) return rc;
        w->tenants[w->n_tenants++] = (size_t)t;
    }
    plan_worker_load(in, w);
    return check_worker(r, path, p);
}

static int read_slice(rd *r, const cJSON *e, const char *path, plan *p) {
    plan_slice *s = &p->slices[p->n_slices];
    long first = 0;
    memset(s, 0, sizeof *s);
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_enum(r, e, path, "mode", plan_mode_name, 5, &s->mode);
    if (!rc) rc = get_i32(r, e, path, "gpu", -1, (int)p->n_gpus - 1, &s->gpu);
    if (!rc) rc = get_i32(r, e, path, "gi_id", -1, 1000, &s->gi_id);
    if (!rc) rc = get_i32(r, e, path, "gi_start", -1, MIG_MEM_SLICES - 1, &s->gi_start);
    if (!rc) rc = get_num(r, e, path, "pct", 0, 100, &s->pct);
    if (!rc) rc = get_num(r, e, path, "mem_alloc_bytes", 0, 1e15, &s->mem_alloc);
    if (!rc) rc = get_int(r, e, path, "first_inst", 0, (long)r->n_insts - 1, &first);
    if (!rc) rc = get_i32(r, e, path, "n_inst", 1, (int)(r->n_insts - (size_t)first), &s->n_inst);
    if (rc) return rc;
    s->first_inst = (size_t)first;
    char fp[FP_MAX];
    /* A placed share of 0% has no compute: its estimates are NaN. Unplaced
     * slices keep plan_build's 0. */
    if (s->gpu >= 0 && !(s->pct > 0))
        return fail(r, key_path(fp, path, "pct"), "0 gives a placed slice no compute; expected (0, 100]");
    if (s->gpu >= 0 && (s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS)) {
        if (!gpucat_mig_by_id(p->types[p->gpus[s->gpu].type], s->gi_id))
            return fail(r, key_path(fp, path, "gi_id"), "no MIG profile %d on GPU %d's type", s->gi_id, s->gpu);
    }
    p->n_slices++;
    return 0;
}

static int read_inst(rd *r, const cJSON *e, const char *path, plan *p) {
    char fp[FP_MAX];
    plan_inst *i = &p->insts[p->n_insts];
    long slice = 0;
    memset(i, 0, sizeof *i);
    const char *wname = NULL;
    int rc = check_obj(r, e, path);
    if (!rc) rc = get_strp(r, e, path, "worker", &wname);
    if (!rc && (i->worker = worker_find(p, wname)) < 0)
        return fail(r, key_path(fp, path, "worker"), "unknown worker '%.40s'", wname);
    if (!rc) rc = get_i32(r, e, path, "replica", 0, 100000, &i->replica);
    if (!rc) rc = get_int(r, e, path, "slice", 0, (long)p->n_slices - 1, &slice);
    if (!rc) rc = get_num(r, e, path, "pct", 0, 100, &i->pct);
    if (!rc) rc = get_num(r, e, path, "mem_limit_bytes", 0, 1e15, &i->mem_limit);
    if (rc) return rc;
    i->slice = (size_t)slice;
    if (p->slices[i->slice].gpu >= 0 && !(i->pct > 0))
        return fail(r, key_path(fp, path, "pct"), "0 gives a placed instance no compute; expected (0, 100]");
    p->n_insts++;
    return 0;
}

typedef int (*read_plan_fn)(rd *r, const cJSON *e, const char *path, plan *p);

static int read_plan_list(rd *r, const cJSON *a, const char *path, read_plan_fn fn, plan *p) {
    char ip[FP_MAX];
    size_t i = 0;
    int rc = 0;
    for (const cJSON *e = a->child; e && !rc; e = e->next, i++) rc = fn(r, e, index_path(ip, path, i), p);
    return rc;
}

/* Indices that must agree: a slice's instances point back at it, and a
 * worker's replicas are its instances, in order. */
static int check_links(rd *r, const plan *p) {
    char fp[FP_MAX];
    for (size_t s = 0; s < p->n_slices; s++) {
        const plan_slice *sl = &p->slices[s];
        for (int k = 0; k < sl->n_inst; k++)
            if (p->insts[sl->first_inst + (size_t)k].slice != s)
                return fail(r, index_path(fp, "slices", s), "instance %zu of its range is on slice %zu",
                            sl->first_inst + (size_t)k, p->insts[sl->first_inst + (size_t)k].slice);
    }
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_slice *sl = &p->slices[in->slice];
        if (i < sl->first_inst || i >= sl->first_inst + (size_t)sl->n_inst)
            return fail(r, index_path(fp, "instances", i), "outside the range of its slice %zu", in->slice);
        const plan_worker *w = &p->workers[in->worker];
        size_t k = i - w->first_inst;
        if (i < w->first_inst || k >= (size_t)w->replicas || in->replica != (int)k)
            return fail(r, index_path(fp, "instances", i), "is not replica %d of worker '%s' (first_inst %zu, %d replicas)",
                        in->replica, w->name, w->first_inst, w->replicas);
    }
    for (size_t w = 0; w < p->n_workers; w++) {
        const plan_worker *pw = &p->workers[w];
        if (pw->replicas > 0 && pw->first_inst + (size_t)pw->replicas > p->n_insts)
            return fail(r, index_path(fp, "workers", w), "its replicas run past the instances");
        /* The other direction: its range holds its own replicas. */
        for (int k = 0; k < pw->replicas; k++) {
            const plan_inst *in = &p->insts[pw->first_inst + (size_t)k];
            if (in->worker != (int)w || in->replica != k)
                return fail(r, index_path(fp, "workers", w), "replica %d is instance %zu, which is replica %d of worker '%s'", k,
                            pw->first_inst + (size_t)k, in->replica, p->workers[in->worker].name);
            if (p->slices[in->slice].mode != pw->mode)
                return fail(r, index_path(fp, "workers", w), "replica %d runs on a %s slice, the worker is %s", k,
                            plan_mode_name(p->slices[in->slice].mode), plan_mode_name(pw->mode));
        }
    }
    return 0;
}

/* What the GPUs hold can exist (plan_slices_check). */
static int check_gpus(rd *r, const plan *p) {
    char fp[FP_MAX], what[PLAN_TEXT_MAX];
    size_t s = 0;
    int rc = plan_slices_check(p, &s, what, sizeof what);
    if (rc == TS_ERR_INVAL) return fail(r, index_path(fp, "slices", s), "%s", what);
    return rc;
}

/* MIG layouts as finish() lays them: each GPU's slices in slice order
 * through mig_place; the starts must be the slices' own. */
static int read_layouts(rd *r, plan *p) {
    char fp[FP_MAX];
    for (size_t gi = 0; gi < p->n_gpus; gi++) {
        plan_gpu *g = &p->gpus[gi];
        int ids[MIG_MAX_INSTANCES];
        size_t n = 0, who[MIG_MAX_INSTANCES];
        for (size_t s = 0; s < p->n_slices; s++) {
            const plan_slice *sl = &p->slices[s];
            if (sl->gpu != (int)gi || (sl->mode != PLAN_MODE_MIG && sl->mode != PLAN_MODE_MIG_MPS)) continue;
            if (n == MIG_MAX_INSTANCES) return fail(r, index_path(fp, "slices", s), "more than %d GIs on GPU %zu", MIG_MAX_INSTANCES, gi);
            who[n] = s;
            ids[n++] = sl->gi_id;
        }
        if (n == 0) continue;           /* else check_gpus made g a MIG GPU */
        if (mig_place(ids, n, g->gi)) return fail(r, "slices", "the GIs on GPU %zu form no MIG layout", gi);
        g->n_gi = (int)n;
        char taken[MIG_MAX_INSTANCES] = {0};
        for (size_t k = 0; k < n; k++)
            for (size_t j = 0; j < n; j++)
                if (!taken[j] && p->slices[who[j]].gi_id == g->gi[k].gi_id) {
                    taken[j] = 1;
                    char sp[FP_MAX];
                    if (p->slices[who[j]].gi_start != g->gi[k].start)
                        return fail(r, key_path(fp, index_path(sp, "slices", who[j]), "gi_start"),
                                    "%d, but the layout puts it at %d", p->slices[who[j]].gi_start, g->gi[k].start);
                    break;
                }
    }
    return 0;
}

/* Recomputed, not read: a tenant is ok, as plan_build judges it, when its
 * worker has replicas, all placed, each meeting the worker's targets on
 * its slice (plan_inst_check). */
static int worker_ok(const plan *p, size_t w) {
    const plan_worker *pw = &p->workers[w];
    if (pw->replicas == 0) return 0;
    for (int k = 0; k < pw->replicas; k++)
        if (plan_inst_check(p, &p->insts[pw->first_inst + (size_t)k]) != PERF_OK) return 0;
    return 1;
}

static int read_results(rd *r, const cJSON *root, plan *p) {
    char fp[FP_MAX];
    const cJSON *a;
    size_t n, i = 0;
    int rc = get_arr(r, root, "", "tenants", &a, &n);
    if (rc) return rc;
    if (n != p->in->n_tenants) return fail(r, "tenants", "%zu entries for %zu tenants of the input", n, p->in->n_tenants);
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        index_path(fp, "tenants", i);
        const char *name;
        const cJSON *w;
        plan_result *res = &p->results[i];
        if ((rc = check_obj(r, e, fp)) || (rc = get_strp(r, e, fp, "name", &name))) return rc;
        if (strcmp(name, p->in->tenants[i].name) != 0)
            return fail(r, fp, "'%.40s' where the input has '%s'", name, p->in->tenants[i].name);
        if ((rc = get_item(r, e, fp, "worker", &w)) || (rc = get_bool(r, e, fp, "ok", &res->ok))) return rc;
        char wp[FP_MAX];
        key_path(wp, fp, "worker");
        res->worker = -1;
        if (!cJSON_IsNull(w) && (!cJSON_IsString(w) || (res->worker = worker_find(p, w->valuestring)) < 0))
            return fail(r, wp, "expected null or a worker's name");
        /* As judge() has it: the worker that lists the tenant, null when
         * that worker has no replicas. */
        const plan_worker *own = &p->workers[r->owner[i]];
        int want = own->replicas > 0 ? r->owner[i] : -1;
        if (res->worker != want && want < 0)
            return fail(r, wp, "expected null: its worker '%s' has no replicas", own->name);
        if (res->worker != want) return fail(r, wp, "expected '%s', the worker that lists it", own->name);
        res->ok = res->worker >= 0 && worker_ok(p, (size_t)res->worker);
    }
    return 0;
}

static int read_placement(rd *r, const cJSON *root, plan *p) {
    const cJSON *o;
    const char *method;
    long v = 0;
    const char *P = "placement";
    int rc = get_obj(r, root, "", P, &o);
    if (!rc) rc = get_i32(r, o, P, "heuristic_gpus", 0, (int)p->n_gpus, &p->heuristic_gpus);
    if (!rc) rc = get_int(r, o, P, "heuristic_unplaced", 0, (long)p->n_slices, &v);
    p->heuristic_unplaced = (size_t)v;
    if (!rc) rc = get_bool(r, o, P, "exact_ran", &p->exact_ran);
    if (!rc && p->exact_ran) {
        rc = get_i32(r, o, P, "exact_gpus", 0, (int)p->n_gpus, &p->exact_gpus);
        if (!rc) rc = get_bool(r, o, P, "exact_proven", &p->exact_proven);
        if (!rc) rc = get_int(r, o, P, "exact_nodes", 0, 1L << 52, &v);
        p->exact_nodes = v;
        if (!rc) rc = get_int(r, o, P, "exact_unplaced", 0, (long)p->n_slices, &v);
        p->exact_unplaced = (size_t)v;
    }
    if (!rc) rc = get_strp(r, o, P, "method", &method);
    if (!rc) {
        if (strcmp(method, "exact") == 0 && p->exact_ran) p->used_exact = 1;
        else if (strcmp(method, "heuristic") != 0) return fail(r, "placement.method", "expected heuristic, or exact when exact_ran");
    }
    if (!rc) rc = get_i32(r, o, P, "lower_bound", 0, (int)p->n_gpus + 1000000, &p->lower_bound);
    if (!rc) rc = get_num(r, o, P, "lower_bound_frac", 0, 1e9, &p->lower_frac);
    return rc;
}

static int read_problems(rd *r, const cJSON *root, plan *p) {
    char fp[FP_MAX];
    const cJSON *a;
    size_t n, i = 0;
    int rc = get_arr(r, root, "", "problems", &a, &n);
    if (rc) return rc;
    if (n && !(p->problems = calloc(n, sizeof *p->problems))) return TS_ERR_NOMEM;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        plan_problem *q = &p->problems[p->n_problems];
        const cJSON *t;
        index_path(fp, "problems", i);
        if ((rc = check_obj(r, e, fp)) || (rc = get_item(r, e, fp, "tenant", &t))) return rc;
        q->tenant = -1;
        if (!cJSON_IsNull(t)) {
            char tp[FP_MAX];
            if (!cJSON_IsString(t) || (q->tenant = tenant_find(p->in, t->valuestring)) < 0)
                return fail(r, key_path(tp, fp, "tenant"), "expected null or a tenant's name");
        }
        if ((rc = get_enum(r, e, fp, "constraint", plan_why_name, 6, &q->why))) return rc;
        if ((rc = get_str(r, e, fp, "text", 1, q->text, sizeof q->text))) return rc;
        p->n_problems++;
    }
    const cJSON *nt;
    if ((rc = get_arr(r, root, "", "notes", &nt, &n))) return rc;
    if (n && !(p->notes = calloc(n, sizeof *p->notes))) return TS_ERR_NOMEM;
    i = 0;
    for (const cJSON *e = nt->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) return fail(r, index_path(fp, "notes", i), "expected a string");
        if (!(p->notes[p->n_notes] = strdup(e->valuestring))) return TS_ERR_NOMEM;
        p->n_notes++;
    }
    return 0;
}

static int read_plan(rd *r, const cJSON *root, const plan_input *in, plan *p) {
    const cJSON *ws, *ss, *is, *tot;
    size_t nw, ns, ni;
    int rc = get_arr(r, root, "", "workers", &ws, &nw);
    if (!rc) rc = get_arr(r, root, "", "slices", &ss, &ns);
    if (!rc) rc = get_arr(r, root, "", "instances", &is, &ni);
    if (rc) return rc;
    if ((rc = plan_fleet_init(in, p))) return rc == TS_ERR_NOMEM ? rc : fail(r, "input.pools", "more than %d GPU types", PLAN_MAX_TYPES);
    p->workers = calloc(nw ? nw : 1, sizeof *p->workers);
    p->slices = calloc(ns ? ns : 1, sizeof *p->slices);
    p->insts = calloc(ni ? ni : 1, sizeof *p->insts);
    if (!p->workers || !p->slices || !p->insts) return TS_ERR_NOMEM;
    r->n_insts = ni;
    if (!(r->owner = malloc((in->n_tenants ? in->n_tenants : 1) * sizeof *r->owner))) return TS_ERR_NOMEM;
    for (size_t t = 0; t < in->n_tenants; t++) r->owner[t] = -1;
    if ((rc = read_plan_list(r, ws, "workers", read_worker, p))) return rc;
    for (size_t t = 0; t < in->n_tenants; t++)
        if (r->owner[t] < 0) return fail(r, "workers", "tenant '%s' is in none of them", in->tenants[t].name);
    if ((rc = read_plan_list(r, ss, "slices", read_slice, p))) return rc;
    if ((rc = read_plan_list(r, is, "instances", read_inst, p))) return rc;
    if ((rc = check_links(r, p))) return rc;
    /* Estimates, then what the GPUs hold, then the layouts over them. */
    for (size_t i = 0; i < p->n_insts; i++)
        if (p->slices[p->insts[i].slice].gpu >= 0 && plan_inst_estimate(p, &p->insts[i], &p->insts[i].est))
            return fail(r, "instances", "instance %zu has no slice to run on", i);
    plan_tally(p);
    if ((rc = check_gpus(r, p))) return rc;
    if ((rc = read_layouts(r, p))) return rc;
    if ((rc = read_results(r, root, p))) return rc;
    plan_predict(p);
    if ((rc = read_placement(r, root, p))) return rc;
    if ((rc = read_problems(r, root, p))) return rc;
    if ((rc = get_obj(r, root, "", "totals", &tot))) return rc;
    /* Read for its type; recomputed as plan_build's judge() does. */
    if ((rc = get_bool(r, tot, "totals", "feasible", &p->feasible))) return rc;
    p->feasible = p->n_problems == 0;
    for (size_t t = 0; t < in->n_tenants; t++)
        if (!p->results[t].ok) p->feasible = 0;
    return 0;
}

int planjson_read(const char *text, size_t len, plan_input *in, plan *p, char *err, size_t errlen) {
    if (!in || !p) return TS_ERR_INVAL;
    plan_input_init(in);
    memset(p, 0, sizeof *p);
    if (err && errlen) err[0] = 0;
    if (!text) return TS_ERR_INVAL;
    rd r = {err, errlen, 0, NULL};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        return fail(&r, "", "not JSON (parse error near byte %zu)", off);
    }
    int rc = cJSON_IsObject(root) ? 0 : fail(&r, "", "expected an object");
    if (!rc) rc = read_input(&r, root, in);
    if (!rc) rc = read_plan(&r, root, in, p);
    cJSON_Delete(root);
    free(r.owner);
    if (rc) {
        if (rc == TS_ERR_NOMEM && err && errlen && !err[0]) snprintf(err, errlen, "out of memory");
        plan_free(p);
        plan_input_free(in);
    }
    return rc;
}
