/* planio.c - the planner's YAML input; see planio.h.
 *
 * util/ydoc.h loads the file into a node tree with source marks; this file
 * walks the schema, not the tree, so an alias cycle cannot make it recurse,
 * and every value's expected type is known where it is read. Everything
 * goes into a local plan_input that is handed over only when the whole
 * file has passed.
 */
#include "planio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gpucat.h"
#include "sched.h"
#include "ydoc.h"


static const ydoc_opts opts = {TS_ERR_CONFIG, "empty file"};

typedef int (*read_item_fn)(const ydoc *d, const yaml_node_t *item, const char *path, plan_input *in);

/* Read each item of the non-empty list seq (at most max items) with fn. */
static int read_list(const ydoc *d, const yaml_node_t *seq, const char *name, size_t max, read_item_fn fn,
                     plan_input *in) {
    size_t n;
    int rc = ydoc_get_seq(d, seq, name, &n);
    if (rc) return rc;
    if (n == 0) return ydoc_fail(d, seq, name, "the list is empty");
    if (n > max) return ydoc_fail(d, seq, name, "%zu %s, at most %zu", n, name, max);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[YDOC_PATH_MAX];
        rc = fn(d, ydoc_seq_at(d, seq, i), ydoc_path_index(path, name, i), in);
    }
    return rc;
}

/* plan_input_add_*'s result: an index, or TS_ERR_NOMEM. */
static int added(const ydoc *d, int rc) { return rc < 0 ? ydoc_nomem(d) : 0; }

/* ---- sections ------------------------------------------------------------------ */

/* mig_prices: a map from the pool GPU's profile names to prices; any
 * other key is an unknown profile, which ydoc_map_fields names. */
static int read_mig_prices(const ydoc *d, const yaml_node_t *map, const char *path, plan_pool *p) {
    const char *names[GPUCAT_MIG_MAX];
    const yaml_node_t *v[GPUCAT_MIG_MAX];
    char fp[YDOC_PATH_MAX];
    if (p->gpu->n_mig == 0) return ydoc_fail(d, map, path, "%s has no MIG profiles to price", p->gpu->name);
    for (int k = 0; k < p->gpu->n_mig; k++) names[k] = p->gpu->mig[k].name;
    int rc = ydoc_map_fields(d, map, path, names, (size_t)p->gpu->n_mig, v);
    for (int k = 0; k < p->gpu->n_mig && rc == 0; k++) {
        if (!v[k]) continue;
        plan_mig_price *mp = &p->mig_prices[p->n_mig_prices];
        rc = ydoc_get_number(d, v[k], ydoc_path_field(fp, path, names[k]), 0, 1e9, 0, &mp->price);
        snprintf(mp->profile, sizeof mp->profile, "%s", names[k]);
        if (rc == 0) p->n_mig_prices++;
    }
    return rc;
}

static int read_pool(const ydoc *d, const yaml_node_t *item, const char *path, plan_input *in) {
    enum { NAME, GPU, GPN, NODES, PRICE, MIGP, NK };
    static const char *const K[NK] = {"name", "gpu", "gpus_per_node", "nodes", "price_per_hour", "mig_prices"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    const char *g = NULL;
    plan_pool p;
    memset(&p, 0, sizeof p);
    p.gpus_per_node = 8;
    p.nodes = 1;
    int rc = ydoc_map_fields(d, item, path, K, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, K[k])
    if (!v[NAME]) return ydoc_fail(d, item, FP(NAME), "required");
    /* Room for the node suffix "-12345" and its NUL. */
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_NAME_EXTRA, p.name, sizeof p.name - 8))) return rc;
    for (size_t j = 0; j < in->n_pools; j++)
        if (!strcmp(in->pools[j].name, p.name)) return ydoc_fail(d, v[NAME], FP(NAME), "repeated pool name '%s'", p.name);
    if (!v[GPU]) return ydoc_fail(d, item, FP(GPU), "required");
    if ((rc = ydoc_get_str(d, v[GPU], FP(GPU), &g))) return rc;
    if (!(p.gpu = gpucat_find(g))) {
        char names[512];
        gpucat_names(names, sizeof names);
        return ydoc_fail(d, v[GPU], FP(GPU), "unknown GPU type '%.40s' (%s)", g, names);
    }
    if ((rc = ydoc_get_i32(d, v[GPN], FP(GPN), 1, 64, &p.gpus_per_node))) return rc;
    if ((rc = ydoc_get_i32(d, v[NODES], FP(NODES), 1, 100000, &p.nodes))) return rc;
    if ((rc = ydoc_get_number(d, v[PRICE], FP(PRICE), 0, 1e9, 0, &p.price_per_hour))) return rc;
    if (v[MIGP] && (rc = read_mig_prices(d, v[MIGP], FP(MIGP), &p))) return rc;
#undef FP
    return added(d, plan_input_add_pool(in, &p));
}

static int read_model(const ydoc *d, const yaml_node_t *item, const char *path, plan_input *in) {
    enum { NAME, PARAMS, DT, KVDT, LAYERS, KVH, HEADS, HD, CTX, PATH, NK };
    static const char *const K[NK] = {"name",     "params",   "dtype_bytes", "kv_dtype_bytes", "layers",
                                      "kv_heads", "heads",    "head_dim",    "max_context",    "path"};
    static const int required[] = {NAME, PARAMS, LAYERS, KVH, HD};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    plan_model m;
    memset(&m, 0, sizeof m);
    m.m.weight_bytes = 2;
    m.m.kv_bytes = 2;
    m.m.max_context = 4096;
    int rc = ydoc_map_fields(d, item, path, K, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, K[k])
    for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
        if (!v[required[k]]) return ydoc_fail(d, item, FP(required[k]), "required");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_MODEL_NAME_EXTRA, m.name, sizeof m.name))) return rc;
    if (plan_model_find(in, m.name) >= 0) return ydoc_fail(d, v[NAME], FP(NAME), "repeated model name '%s'", m.name);
    if ((rc = ydoc_get_number(d, v[PARAMS], FP(PARAMS), 0, 1e15, YDOC_LO_OPEN | YDOC_SI, &m.m.params))) return rc;
    if ((rc = ydoc_get_number(d, v[DT], FP(DT), 0.25, 8, 0, &m.m.weight_bytes))) return rc;
    if ((rc = ydoc_get_number(d, v[KVDT], FP(KVDT), 0.25, 8, 0, &m.m.kv_bytes))) return rc;
    if ((rc = ydoc_get_i32(d, v[LAYERS], FP(LAYERS), 1, 1000, &m.m.layers))) return rc;
    if ((rc = ydoc_get_i32(d, v[KVH], FP(KVH), 1, 1024, &m.m.kv_heads))) return rc;
    m.m.heads = m.m.kv_heads;
    if ((rc = ydoc_get_i32(d, v[HEADS], FP(HEADS), 1, 4096, &m.m.heads))) return rc;
    if (m.m.heads < m.m.kv_heads)
        return ydoc_fail(d, v[HEADS], FP(HEADS), "%d query heads is fewer than %d KV heads", m.m.heads, m.m.kv_heads);
    if ((rc = ydoc_get_i32(d, v[HD], FP(HD), 1, 4096, &m.m.head_dim))) return rc;
    if ((rc = ydoc_get_i32(d, v[CTX], FP(CTX), 0, 1 << 24, &m.m.max_context))) return rc;
    if ((rc = ydoc_get_text(d, v[PATH], FP(PATH), m.path, sizeof m.path))) return rc;
#undef FP
    return added(d, plan_input_add_model(in, &m));
}

static int read_tier(const ydoc *d, const yaml_node_t *item, const char *path, plan_input *in) {
    enum { NAME, TTFT, TPOT, BAND, SHARE, MAXQ, NK };
    static const char *const K[NK] = {"name", "ttft_ms", "tpot_ms", "band", "min_share", "max_queue_ms"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    plan_tier t;
    memset(&t, 0, sizeof t);
    t.band = (int)in->n_tiers;      /* the tier's position */
    int rc = ydoc_map_fields(d, item, path, K, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, K[k])
    if (!v[NAME]) return ydoc_fail(d, item, FP(NAME), "required");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_NAME_EXTRA, t.name, sizeof t.name))) return rc;
    if (plan_tier_find(in, t.name) >= 0) return ydoc_fail(d, v[NAME], FP(NAME), "repeated tier name '%s'", t.name);
    if ((rc = ydoc_get_number(d, v[TTFT], FP(TTFT), 0, 1e7, 0, &t.ttft_ms))) return rc;
    if ((rc = ydoc_get_number(d, v[TPOT], FP(TPOT), 0, 1e7, 0, &t.tpot_ms))) return rc;
    if ((rc = ydoc_get_i32(d, v[BAND], FP(BAND), 0, SCHED_MAX_TIERS - 1, &t.band))) return rc;
    if ((rc = ydoc_get_number(d, v[SHARE], FP(SHARE), 0, 1, 0, &t.min_share))) return rc;
    if ((rc = ydoc_get_number(d, v[MAXQ], FP(MAXQ), 0, UINT32_MAX, 0, &t.max_queue_ms))) return rc;
    double shares = t.min_share;
    for (size_t j = 0; j < in->n_tiers; j++) shares += in->tiers[j].min_share;
    if (shares > 1.0 + 1e-9)
        return ydoc_fail(d, v[SHARE] ? v[SHARE] : item, FP(SHARE),
                         "minimum shares of the tiers sum to %.2f, more than 1", shares);
#undef FP
    return added(d, plan_input_add_tier(in, &t));
}

/* A tenant's load, and its sizing headroom, which sits beside the rate it
 * scales (plan.h says what it does). */
static int read_load(const ydoc *d, const yaml_node_t *map, const char *path, plan_tenant *t) {
    static const char *const K[] = {"rps", "prompt_tokens", "output_tokens", "prompt_cv", "headroom"};
    const yaml_node_t *v[5];
    char fp[YDOC_PATH_MAX];
    perf_load *l = &t->load;
    int rc = ydoc_map_fields(d, map, path, K, 5, v);
    if (rc) return rc;
    if ((rc = ydoc_get_number(d, v[0], ydoc_path_field(fp, path, K[0]), 0, 1e7, 0, &l->rps))) return rc;
    if ((rc = ydoc_get_number(d, v[1], ydoc_path_field(fp, path, K[1]), 0, 1 << 24, 0, &l->prompt))) return rc;
    if ((rc = ydoc_get_number(d, v[2], ydoc_path_field(fp, path, K[2]), 1, 1 << 24, 0, &l->output))) return rc;
    if ((rc = ydoc_get_number(d, v[3], ydoc_path_field(fp, path, K[3]), 0, 100, 0, &l->prompt_cv))) return rc;
    return ydoc_get_number(d, v[4], ydoc_path_field(fp, path, K[4]), 1, 100, 0, &t->headroom);
}

static const char *model_name(const plan_input *in, size_t i) { return in->models[i].name; }
static const char *tier_name(const plan_input *in, size_t i) { return in->tiers[i].name; }

/* The index of the model or tier that n names; the message lists them. */
static int get_ref(const ydoc *d, const yaml_node_t *n, const char *path, const char *what,
                   const char *(*name)(const plan_input *, size_t), size_t count, const plan_input *in,
                   int *out) {
    const char **names = malloc((count ? count : 1) * sizeof *names);
    if (!names) return ydoc_nomem(d);
    for (size_t i = 0; i < count; i++) names[i] = name(in, i);
    int rc = ydoc_get_enum(d, n, path, what, names, count, out);
    free(names);
    return rc;
}

/* group and profile: the placement of a strict tenant. */
static int read_strict(const ydoc *d, const yaml_node_t *group, const yaml_node_t *profile, const char *path,
                       plan_tenant *t) {
    char fp[YDOC_PATH_MAX];
    int rc, known = 0;
    ydoc_path_field(fp, path, "group");
    if (group && t->iso != PLAN_ISO_STRICT) return ydoc_fail(d, group, fp, "a group applies to strict isolation only");
    if ((rc = ydoc_get_name(d, group, fp, YDOC_NAME_EXTRA, t->group, sizeof t->group))) return rc;
    if (!profile) return 0;
    ydoc_path_field(fp, path, "profile");
    if (t->iso != PLAN_ISO_STRICT) return ydoc_fail(d, profile, fp, "a MIG profile applies to strict isolation only");
    if ((rc = ydoc_get_name(d, profile, fp, PLAN_PROFILE_EXTRA, t->profile, sizeof t->profile))) return rc;
    for (size_t g = 0; g < gpucat_count() && !known; g++) known = gpucat_mig_find(gpucat_at(g), t->profile) != NULL;
    if (!known) return ydoc_fail(d, profile, fp, "'%s' is no MIG profile of any known GPU (like 2g.20gb)", t->profile);
    return 0;
}

static int read_key(const ydoc *d, const yaml_node_t *n, const char *path, plan_tenant *t) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    int ok = strlen(s) == 64;
    for (size_t k = 0; ok && k < 64; k++) ok = strchr("0123456789abcdefABCDEF", s[k]) != NULL;
    if (!ok) return ydoc_fail(d, n, path, "expected the SHA-256 of a key as 64 hex digits (tessera keygen prints it)");
    snprintf(t->key_sha256, sizeof t->key_sha256, "%s", s);
    return 0;
}

static int read_tenant(const ydoc *d, const yaml_node_t *item, const char *path, plan_input *in) {
    enum { NAME, MODEL, TIER, ISO, GROUP, PROFILE, LOAD, KEY, WEIGHT, NK };
    static const char *const K[NK] = {"name", "model", "tier", "isolation", "group", "profile", "load",
                                      "key_sha256", "weight"};
    static const char *const isos[] = {"strict", "shared", "best-effort"};
    static const int iso_of[] = {PLAN_ISO_STRICT, PLAN_ISO_SHARED, PLAN_ISO_BEST_EFFORT};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int iso = 1;
    plan_tenant t;
    memset(&t, 0, sizeof t);
    t.weight = 1;
    t.headroom = 1;
    t.load.prompt = 512;
    t.load.output = 128;
    int rc = ydoc_map_fields(d, item, path, K, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, K[k])
    for (int k = NAME; k <= TIER; k++)
        if (!v[k]) return ydoc_fail(d, item, FP(k), "required");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_NAME_EXTRA, t.name, sizeof t.name))) return rc;
    for (size_t j = 0; j < in->n_tenants; j++)
        if (!strcmp(in->tenants[j].name, t.name))
            return ydoc_fail(d, v[NAME], FP(NAME), "repeated tenant name '%s'", t.name);
    if ((rc = get_ref(d, v[MODEL], FP(MODEL), "model", model_name, in->n_models, in, &t.model))) return rc;
    if ((rc = get_ref(d, v[TIER], FP(TIER), "tier", tier_name, in->n_tiers, in, &t.tier))) return rc;
    if ((rc = ydoc_get_enum(d, v[ISO], FP(ISO), "isolation", isos, 3, &iso))) return rc;
    t.iso = iso_of[iso];
    if ((rc = read_strict(d, v[GROUP], v[PROFILE], path, &t))) return rc;
    if (v[LOAD] && (rc = read_load(d, v[LOAD], FP(LOAD), &t))) return rc;
    if ((rc = read_key(d, v[KEY], FP(KEY), &t))) return rc;
    if ((rc = ydoc_get_number(d, v[WEIGHT], FP(WEIGHT), 0, 1e6, YDOC_LO_OPEN, &t.weight))) return rc;
#undef FP
    return added(d, plan_input_add_tenant(in, &t));
}

static int read_options(const ydoc *d, const yaml_node_t *map, plan_input *in) {
    enum { CE, BE, OVH, UTIL, Z, HR, RES, REPL, EXL, EXB, TPOT, NK };
    static const char *const K[NK] = {"compute_efficiency", "bandwidth_efficiency", "step_overhead_ms",
                                      "max_utilization",    "kv_quantile_z",        "headroom",
                                      "reserve_gib",        "max_replicas",         "exact_limit",
                                      "exact_budget",       "tpot_bound_ms"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    perf_opts *o = &in->perf;
    double ovh_ms = o->step_overhead_s * 1e3, res_gib = o->reserve_bytes / 1073741824.0;
    double tpot_ms = o->tpot_bound_s * 1e3;
    int64_t budget = in->exact_budget;
    int rc = ydoc_map_fields(d, map, "options", K, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, "options", K[k])
    if ((rc = ydoc_get_number(d, v[CE], FP(CE), 0, 1, YDOC_LO_OPEN, &o->eff_compute))) return rc;
    if ((rc = ydoc_get_number(d, v[BE], FP(BE), 0, 1, YDOC_LO_OPEN, &o->eff_bw))) return rc;
    if ((rc = ydoc_get_number(d, v[OVH], FP(OVH), 0, 1000, 0, &ovh_ms))) return rc;
    if ((rc = ydoc_get_number(d, v[UTIL], FP(UTIL), 0, 1, YDOC_LO_OPEN, &o->max_util))) return rc;
    if ((rc = ydoc_get_number(d, v[Z], FP(Z), 0, 10, 0, &o->kv_z))) return rc;
    if ((rc = ydoc_get_number(d, v[HR], FP(HR), 0, 10, 0, &o->headroom))) return rc;
    if ((rc = ydoc_get_number(d, v[RES], FP(RES), 0, 1024, 0, &res_gib))) return rc;
    if ((rc = ydoc_get_i32(d, v[REPL], FP(REPL), 1, 100000, &in->max_replicas))) return rc;
    if ((rc = ydoc_get_i32(d, v[EXL], FP(EXL), 0, 64, &in->exact_limit))) return rc;
    if ((rc = ydoc_get_int(d, v[EXB], FP(EXB), 1, 10000000000LL, &budget))) return rc;
    if ((rc = ydoc_get_number(d, v[TPOT], FP(TPOT), 0, 1e7, 0, &tpot_ms))) return rc;
#undef FP
    if (v[OVH]) o->step_overhead_s = ovh_ms / 1e3;
    if (v[TPOT]) o->tpot_bound_s = tpot_ms / 1e3;
    if (v[RES]) o->reserve_bytes = res_gib * 1073741824.0;
    in->exact_budget = (long)budget;
    return 0;
}

static int read_doc(const ydoc *d, plan_input *in) {
    enum { FLEET, MODELS, TIERS, TENANTS, OPTIONS, NK };
    static const char *const K[NK] = {"fleet", "models", "tiers", "tenants", "options"};
    const yaml_node_t *root = ydoc_root(d), *v[NK];
    int rc = ydoc_map_fields(d, root, "", K, NK, v);
    if (rc) return rc;
    for (int k = 0; k < NK; k++)
        if (!v[k] && k != TIERS && k != OPTIONS) return ydoc_fail(d, root, K[k], "required");
    if ((rc = read_list(d, v[FLEET], "fleet", SIZE_MAX, read_pool, in))) return rc;
    if ((rc = read_list(d, v[MODELS], "models", SIZE_MAX, read_model, in))) return rc;
    if (v[TIERS]) rc = read_list(d, v[TIERS], "tiers", SCHED_MAX_TIERS, read_tier, in);
    else rc = added(d, plan_input_default_tiers(in));
    if (rc) return rc;
    if ((rc = read_list(d, v[TENANTS], "tenants", SIZE_MAX, read_tenant, in))) return rc;
    if (v[OPTIONS] && (rc = read_options(d, v[OPTIONS], in))) return rc;
    return 0;
}

/* Read d into *in, all or nothing, and free d. */
static int read_into(ydoc *d, plan_input *in) {
    plan_input tmp;
    plan_input_init(&tmp);
    int rc = read_doc(d, &tmp);
    ydoc_free(d);
    if (rc < 0) {
        plan_input_free(&tmp);
        return rc;
    }
    *in = tmp;
    return 0;
}

int planio_parse(const char *text, size_t len, const char *name, plan_input *in, char *err, size_t errlen) {
    if (!in) return TS_ERR_INVAL;
    plan_input_init(in);
    if (err && errlen) err[0] = 0;
    if (!text) return TS_ERR_INVAL;
    ydoc *d;
    int rc = ydoc_load_string(text, len, name ? name : "<input>", &opts, &d, err, errlen);
    return rc ? rc : read_into(d, in);
}

int planio_load(const char *path, plan_input *in, char *err, size_t errlen) {
    if (!path || !in) return TS_ERR_INVAL;
    plan_input_init(in);
    ydoc *d;
    int rc = ydoc_load_file(path, &opts, &d, err, errlen);
    return rc ? rc : read_into(d, in);
}
