/* test_plan_emit.c - the planner's emitters (src/cluster/emit.c,
 * emit_k8s.c) and the `tessera plan` command.
 *
 * Every emitter's output for four inputs (examples/plan/fleet.yaml, the
 * fixture tests/golden/plan/mixed.yaml, which exercises every mode, and
 * k8s-mps.yaml / k8s-hami.yaml, a GPU the device plugin's MPS can share and
 * one it cannot) is compared with a golden file under tests/golden/plan/. The output must be
 * deterministic, so a rerun gives the same bytes. To regenerate the goldens
 * deliberately after a change:
 *     TS_UPDATE_GOLDEN=1 build/test_plan_emit
 * and review the diff. Beyond the goldens: the JSON parses, the YAML
 * outputs parse, every tessera.yaml of --emit serve loads in `tessera
 * serve`'s own config loader, the nvidia-smi lists are landing orders, and
 * the binary's exit status is 0 / 1 / 2 for feasible / infeasible / bad.
 * The JSON report reads back (planjson.h) into a plan that emits the same
 * bytes and runs on the same slices, and the reader names every field it
 * refuses.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "cluster/emit.h"
#include "cluster/emit_int.h"
#include "cluster/mig.h"
#include "cluster/plan.h"
#include "cluster/planio.h"
#include "cluster/planjson.h"
#include "config.h"
#include "err.h"
#include "testutil.h"

#define PATH_LEN 4096

static const char *const INPUTS[] = {"examples/plan/fleet.yaml", "tests/golden/plan/mixed.yaml",
                                     "tests/golden/plan/k8s-mps.yaml", "tests/golden/plan/k8s-hami.yaml"};
static const char *const STEMS[] = {"fleet", "mixed", "k8s-mps", "k8s-hami"};

/* The repository root, from this file's path, else $TS_SRC. */
static void src_root(char *buf, size_t cap) {
    const char *env = getenv("TS_SRC"), *f = __FILE__, *end = strstr(f, "tests/test_plan_emit.c");
    if (f[0] == '/' && end) snprintf(buf, cap, "%.*s", (int)(end - f), f);
    else if (env) snprintf(buf, cap, "%s/", env);
    else snprintf(buf, cap, "./");
}

typedef struct fixture {
    plan_input in;
    plan p;
} fixture;

static void load(const char *rel, fixture *fx) {
    char root[PATH_LEN], path[PATH_LEN + 64], err[512];
    src_root(root, sizeof root);
    snprintf(path, sizeof path, "%s%s", root, rel);
    int rc = planio_load(path, &fx->in, err, sizeof err);
    if (rc) fail_msg("%s: %s", rel, err);
    /* Files are named by their repository path, not the absolute one, so
     * nothing machine-specific reaches the output. */
    assert_int_equal(plan_build(&fx->in, &fx->p), 0);
}

static void unload(fixture *fx) {
    plan_free(&fx->p);
    plan_input_free(&fx->in);
}

/* All files of one emitter, as printed without --out. */
static char *render(const plan *p, int kind, size_t *len) {
    emit_out out;
    assert_int_equal(emit_run(p, kind, &out), 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    assert_int_equal(emit_print(&out, f), 0);
    fclose(f);
    emit_out_free(&out);
    *len = n;
    return buf;
}

static void test_goldens(void **st) {
    (void)st;
    char root[PATH_LEN];
    src_root(root, sizeof root);
    int update = getenv("TS_UPDATE_GOLDEN") && *getenv("TS_UPDATE_GOLDEN");
    for (size_t k = 0; k < sizeof INPUTS / sizeof INPUTS[0]; k++) {
        fixture fx;
        load(INPUTS[k], &fx);
        for (int kind = 0; kind < EMIT_KINDS; kind++) {
            size_t len, len2;
            char *got = render(&fx.p, kind, &len);
            char *again = render(&fx.p, kind, &len2);
            /* Deterministic: the same plan, the same bytes. */
            assert_int_equal(len, len2);
            assert_memory_equal(got, again, len);
            free(again);
            char path[PATH_LEN + 128];
            snprintf(path, sizeof path, "%stests/golden/plan/%s.%s.txt", root, STEMS[k], emit_kind_name(kind));
            if (update) {
                assert_int_equal(tu_write_file(path, got, len), 0);
            } else {
                size_t glen;
                char *want = tu_read_file(path, &glen);
                if (!want) fail_msg("missing golden %s (TS_UPDATE_GOLDEN=1 makes it)", path);
                if (glen != len || memcmp(want, got, len) != 0) {
                    size_t i = 0;
                    while (i < len && i < glen && want[i] == got[i]) i++;
                    size_t line = 1;
                    for (size_t j = 0; j < i; j++) line += got[j] == '\n';
                    fail_msg("%s differs from the golden at line %zu (TS_UPDATE_GOLDEN=1 regenerates)", path, line);
                }
                free(want);
            }
            free(got);
        }
        unload(&fx);
    }
}

/* ---- outputs parse and mean what they say ------------------------------------- */

static int yaml_docs(const char *text, size_t len) {
    yaml_parser_t p;
    yaml_parser_initialize(&p);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int docs = 0;
    for (;;) {
        yaml_document_t d;
        if (!yaml_parser_load(&p, &d)) {
            docs = -1;
            break;
        }
        int empty = yaml_document_get_root_node(&d) == NULL;
        yaml_document_delete(&d);
        if (empty) break;
        docs++;
    }
    yaml_parser_delete(&p);
    return docs;
}

static void test_outputs_parse(void **st) {
    (void)st;
    for (size_t k = 0; k < sizeof INPUTS / sizeof INPUTS[0]; k++) {
        fixture fx;
        load(INPUTS[k], &fx);
        emit_out out;
        assert_int_equal(emit_run(&fx.p, EMIT_JSON, &out), 0);
        cJSON *j = cJSON_Parse(out.files[0].data);
        assert_non_null(j);
        cJSON *tenants = cJSON_GetObjectItem(j, "tenants");
        assert_int_equal(cJSON_GetArraySize(tenants), (int)fx.in.n_tenants);
        cJSON_Delete(j);
        emit_out_free(&out);

        assert_int_equal(emit_run(&fx.p, EMIT_K8S, &out), 0);
        /* Device-plugin config and the models' volume, then a ConfigMap,
         * a Service and a workload per placed instance. */
        assert_int_equal(yaml_docs(out.files[0].data, out.files[0].len), 2 + 3 * (int)fx.p.n_insts);
        emit_out_free(&out);

        assert_int_equal(emit_run(&fx.p, EMIT_MIG_PARTED, &out), 0);
        assert_int_equal(yaml_docs(out.files[0].data, out.files[0].len), 1);
        assert_non_null(strstr(out.files[0].data, "version: v1\nmig-configs:\n"));
        emit_out_free(&out);

        /* Each -cgi list replays, first fit, onto the planned slots. */
        for (size_t g = 0; g < fx.p.n_gpus; g++) {
            const plan_gpu *pg = &fx.p.gpus[g];
            if (pg->mode != PLAN_GPU_MIG) continue;
            int ids[MIG_MAX_INSTANCES];
            mig_inst again[MIG_MAX_INSTANCES];
            for (int i = 0; i < pg->n_gi; i++) ids[i] = pg->gi[i].gi_id;
            assert_int_equal(mig_firstfit(ids, (size_t)pg->n_gi, MIG_PREF_DRIVER, again, NULL), 0);
            assert_memory_equal(again, pg->gi, (size_t)pg->n_gi * sizeof *again);
        }
        unload(&fx);
    }
}

/* Every tessera.yaml the k8s manifests carry in a ConfigMap (the block
 * scalar after "tessera.yaml: |", indented four spaces) loads in serve's
 * loader, with the pool gauges public for the endpoint picker. */
static void test_k8s_configs_load(void **st) {
    (void)st;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    emit_out out;
    assert_int_equal(emit_run(&fx.p, EMIT_K8S, &out), 0);
    int seen = 0;
    for (size_t f = 0; f < out.n; f++) {
        const char *key = "  tessera.yaml: |\n";
        for (const char *at = strstr(out.files[f].data, key); at; at = strstr(at, key)) {
            at += strlen(key);
            strbuf y = STRBUF_INIT;
            while (strncmp(at, "    ", 4) == 0 || *at == '\n') {
                const char *nl = strchr(at, '\n');
                size_t n = nl ? (size_t)(nl - at) + 1 : strlen(at);
                if (*at != '\n') strbuf_put(&y, at + 4, n - 4);
                else strbuf_puts(&y, "\n");
                at += n;
            }
            char path[PATH_LEN], err[512];
            size_t len;
            char *text = strbuf_steal(&y, &len);
            assert_non_null(text);
            tu_path(path, sizeof path, "k8s-serve.yaml");
            assert_int_equal(tu_write_file(path, text, len), 0);
            cfg c;
            int rc = cfg_load(path, &c, err, sizeof err);
            unlink(path);
            if (rc) fail_msg("a ConfigMap of %s does not load: %s\n%s", out.files[f].path, err, text);
            free(text);
            assert_true(c.public_pool_metrics);
            assert_int_equal(c.limits.shutdown_grace_s, EMIT_SHUTDOWN_GRACE_S);
            cfg_free(&c);
            seen++;
        }
    }
    assert_int_equal(seen, (int)fx.p.n_insts);
    emit_out_free(&out);
    unload(&fx);
}

/* The mixed fixture gives keys, so its tessera.yaml files must load in
 * serve's loader, with the plan's KV pool and sequences. */
static void test_serve_configs_load(void **st) {
    (void)st;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    emit_out out;
    assert_int_equal(emit_run(&fx.p, EMIT_SERVE, &out), 0);
    assert_int_equal(out.n, fx.p.n_insts);
    for (size_t i = 0; i < out.n; i++) {
        char path[PATH_LEN], err[512];
        tu_path(path, sizeof path, "serve.yaml");
        assert_int_equal(tu_write_file(path, out.files[i].data, out.files[i].len), 0);
        cfg c;
        int rc = cfg_load(path, &c, err, sizeof err);
        unlink(path);
        if (rc) fail_msg("%s does not load: %s", out.files[i].path, err);
        const plan_inst *in = &fx.p.insts[i];
        const plan_worker *w = &fx.p.workers[in->worker];
        assert_int_equal(c.n_models, 1);
        assert_string_equal(c.models[0].name, fx.in.models[w->model].name);
        assert_int_equal(c.models[0].max_seqs, in->est.seqs);
        assert_true((double)c.models[0].kv_cache_bytes >= in->est.kv_bytes);
        assert_int_equal(c.n_tenants, w->n_tenants);
        assert_int_equal(c.n_tiers, fx.in.n_tiers);
        /* The drain k8s's grace period is computed from. */
        assert_int_equal(c.limits.shutdown_grace_s, EMIT_SHUTDOWN_GRACE_S);
        /* The instance's price reaches serve's cost accounting (%.6g). */
        double price = plan_inst_price(&fx.p, in);
        assert_true(price > 0);
        if (fabs(c.models[0].price_per_hour - price) > 1e-5 * price)
            fail_msg("%s: price_per_hour %g, plan %g", out.files[i].path, c.models[0].price_per_hour, price);
        cfg_free(&c);
    }
    emit_out_free(&out);
    unload(&fx);
}

/* ---- the JSON read back ------------------------------------------------------- */

static char *json_of(const plan *p, size_t *len) { return render(p, EMIT_JSON, len); }

/* build -> json -> read -> json is byte-identical for fx's plan; the plan
 * read back runs every instance on the same slice and price, and its table
 * is the same too. Returns the JSON (the caller frees it). */
static char *roundtrip(const char *what, fixture *fx) {
    fixture back;
    size_t len, len2, jlen;
    char *json = json_of(&fx->p, &jlen), err[512];
    int rc = planjson_read(json, jlen, &back.in, &back.p, err, sizeof err);
    if (rc) fail_msg("%s: read back: %s", what, err);
    char *again = json_of(&back.p, &len2);
    if (jlen != len2 || memcmp(json, again, jlen)) fail_msg("%s: the JSON read back emits other bytes", what);
    char *t1 = render(&fx->p, EMIT_TABLE, &len), *t2 = render(&back.p, EMIT_TABLE, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(t1, t2, len);
    assert_int_equal(back.p.n_insts, fx->p.n_insts);
    for (size_t i = 0; i < fx->p.n_insts; i++) {
        perf_slice a, b;
        int ra = plan_inst_slice(&fx->p, &fx->p.insts[i], &a), rb = plan_inst_slice(&back.p, &back.p.insts[i], &b);
        assert_int_equal(ra, rb);
        if (ra) continue;
        if (a.flops != b.flops || a.bw != b.bw || a.mem != b.mem) fail_msg("%s: instance %zu: slices differ", what, i);
        assert_true(plan_inst_price(&fx->p, &fx->p.insts[i]) == plan_inst_price(&back.p, &back.p.insts[i]));
        assert_true(fx->p.insts[i].est.kv_bytes == back.p.insts[i].est.kv_bytes);
        if (fx->p.insts[i].est.ttft_p99_s != back.p.insts[i].est.ttft_p99_s)
            fail_msg("%s: instance %zu: p99 %.17g vs %.17g (mean %.17g vs %.17g)", what, i, fx->p.insts[i].est.ttft_p99_s,
                     back.p.insts[i].est.ttft_p99_s, fx->p.insts[i].est.ttft_s, back.p.insts[i].est.ttft_s);
    }
    for (size_t t = 0; t < fx->in.n_tenants; t++) {
        assert_true(fx->p.results[t].ttft_p99_s == back.p.results[t].ttft_p99_s);
        assert_true(plan_tenant_headroom(&fx->in.tenants[t]) == plan_tenant_headroom(&back.in.tenants[t]));
    }
    free(t1);
    free(t2);
    free(again);
    unload(&back);
    return json;
}

/* The round trip for both golden inputs and the waste examples. */
static void test_json_roundtrip(void **st) {
    (void)st;
    static const char *const inputs[] = {"examples/plan/fleet.yaml", "tests/golden/plan/mixed.yaml",
                                         "examples/plan/waste-3x7b.yaml", "examples/plan/light-3x7b.yaml"};
    for (size_t k = 0; k < sizeof inputs / sizeof inputs[0]; k++) {
        fixture fx;
        load(inputs[k], &fx);
        free(roundtrip(inputs[k], &fx));
        unload(&fx);
    }
}

/* Tenants with a sizing headroom: the JSON echoes it in the input (only
 * where it is not 1) and reads it back byte for byte; the instances carry
 * the sized rate beside the real one; the table notes it against the
 * tenant and keeps the real rps; serve's comment gives both rates. */
#define HEADROOM_YAML                                                                                  \
    "fleet: [{name: a, gpu: A100-80GB, gpus_per_node: 4, price_per_hour: 2}]\n"                        \
    "models: [{name: m, params: 7B, layers: 32, kv_heads: 8, head_dim: 128, max_context: 4096}]\n"     \
    "tiers: [{name: gold, ttft_ms: 1000, tpot_ms: 100}]\n"                                             \
    "tenants:\n"                                                                                       \
    "  - {name: a, model: m, tier: gold, load: {rps: 2, prompt_tokens: 512, output_tokens: 128, headroom: 1.5}}\n" \
    "  - {name: b, model: m, tier: gold, load: {rps: 1, prompt_tokens: 512, output_tokens: 128}}\n"   \
    "  - {name: c, model: m, tier: gold, isolation: strict, load: {rps: 1, headroom: 2}}\n"

static void test_json_headroom(void **st) {
    (void)st;
    fixture fx;
    char err[512];
    if (planio_parse(HEADROOM_YAML, strlen(HEADROOM_YAML), "headroom.yaml", &fx.in, err, sizeof err))
        fail_msg("headroom.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    assert_true(fx.p.feasible);
    char *json = roundtrip("headroom.yaml", &fx);
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    cJSON *tens = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "input"), "tenants");
    static const double want[] = {1.5, 0, 2};
    for (int t = 0; t < 3; t++) {
        cJSON *ld = cJSON_GetObjectItem(cJSON_GetArrayItem(tens, t), "load");
        cJSON *h = cJSON_GetObjectItem(ld, "headroom");
        if (want[t] == 0) assert_null(h);
        else assert_true(cJSON_IsNumber(h) && h->valuedouble == want[t]);
    }
    /* The report's tenant rps is the real one; the instance shows both. */
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "tenants"), 0), "rps")->valuedouble == 2);
    const plan_worker *w = &fx.p.workers[fx.p.results[0].worker];
    assert_true(w->load.rps == 3 && w->sized.rps == 4);
    cJSON *i0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "instances"), (int)w->first_inst);
    assert_true(cJSON_GetObjectItem(i0, "rps")->valuedouble * w->replicas == 3);
    assert_true(cJSON_GetObjectItem(i0, "sized_rps")->valuedouble * w->replicas == 4);
    cJSON_Delete(root);
    size_t len;
    char *table = render(&fx.p, EMIT_TABLE, &len);
    const char *line = strstr(table, "\na ");
    assert_non_null(line);
    const char *eol = strchr(line + 1, '\n');
    if (!strstr(line, "ok; sized for 1.5x its load") || strstr(line, "ok; sized for 1.5x its load") > eol)
        fail_msg("tenant a's row lacks its headroom: %.*s", (int)(eol - line), line);
    assert_non_null(strstr(table, "c                m                gold     strict"));
    assert_non_null(strstr(table, "sized for 2x its load"));
    assert_non_null(strstr(table, "tenants with headroom: their workers are sized, and predicted, at rps x headroom"));
    free(table);
    char *serve = render(&fx.p, EMIT_SERVE, &len);
    char want_line[128];
    snprintf(want_line, sizeof want_line, "# Carries %.2f req/s, sized with headroom for %.2f req/s;\n# as sized: ", 3.0 / w->replicas,
             4.0 / w->replicas);
    if (!strstr(serve, want_line)) fail_msg("serve configs lack '%s'", want_line);
    free(serve);
    /* The reader checks the range. */
    static const struct {
        const char *value, *want;
    } bad[] = {
        {"0.5", "input.tenants[0].load.headroom: 0.5 is outside 1..100"},
        {"101", "input.tenants[0].load.headroom: 101 is outside 1..100"},
        {"\"2\"", "input.tenants[0].load.headroom: expected a number"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        root = cJSON_Parse(json);
        cJSON *ld = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "input"), "tenants"), 0), "load");
        cJSON_ReplaceItemInObjectCaseSensitive(ld, "headroom", cJSON_Parse(bad[c].value));
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        plan_input in;
        plan p;
        int rc = planjson_read(text, strlen(text), &in, &p, err, sizeof err);
        free(text);
        if (rc != TS_ERR_CONFIG || !strstr(err, bad[c].want)) fail_msg("case %zu: rc %d, '%s'", c, rc, err);
        assert_null(in.tenants);
    }
    free(json);
    unload(&fx);
}

/* Edit the field of root at a dot path (a number indexes a list): remove
 * it (value NULL) or set it to value, a JSON text. */
static void edit_at(cJSON *root, const char *dot_path, const char *value) {
    cJSON *parent = NULL, *node = root;
    char path[128], *save = NULL, *last = NULL;
    snprintf(path, sizeof path, "%s", dot_path);
    for (char *tok = strtok_r(path, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
        parent = node;
        last = tok;
        node = cJSON_IsArray(node) ? cJSON_GetArrayItem(node, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(node, tok);
        if (!node) fail_msg("no %s in the report", dot_path);
    }
    if (!value) {
        if (cJSON_IsArray(parent)) cJSON_DeleteItemFromArray(parent, atoi(last));
        else cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
        return;
    }
    cJSON *v = cJSON_Parse(value);
    if (!v) fail_msg("%s: '%s' is not JSON", dot_path, value);
    if (cJSON_IsArray(parent)) cJSON_ReplaceItemInArray(parent, atoi(last), v);
    else cJSON_ReplaceItemInObjectCaseSensitive(parent, last, v);
}

/* planjson_read of json after n edits, given as (dot path, value) pairs
 * of strings as edit_at takes them. */
static int read_edited(const char *json, plan_input *in, plan *p, char *err, size_t errlen, int n, ...) {
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++) {
        const char *path = va_arg(ap, const char *);
        edit_at(root, path, va_arg(ap, const char *));
    }
    va_end(ap);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    int rc = planjson_read(text, strlen(text), in, p, err, errlen);
    free(text);
    return rc;
}

/* The reader refused (rc, err) with an error containing want, leaving
 * nothing behind. */
static void refused(int rc, const char *err, const plan_input *in, const plan *p, const char *want) {
    if (rc != TS_ERR_CONFIG) fail_msg("rc %d, want CONFIG (for '%s')", rc, want);
    if (!strstr(err, want)) fail_msg("'%s' lacks '%s'", err, want);
    assert_null(in->pools);
    assert_null(p->workers);
}

/* A dot path or value from a format. */
__attribute__((format(printf, 2, 3)))
static const char *fmt(char buf[160], const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, 160, f, ap);
    va_end(ap);
    return buf;
}

/* Edit one field of mixed.yaml's JSON report (remove it, or set it to
 * `value`, a JSON text) and expect the reader to refuse naming it. */
static void test_planjson_errors(void **st) {
    (void)st;
    static const struct {
        const char *path;           /* dot path; a number indexes a list */
        const char *value;          /* NULL: delete the field */
        const char *want;
    } cases[] = {
        {"input", NULL, "input: missing"},
        {"input.pools.0.gpu", NULL, "input.pools[0].gpu: missing"},
        {"input.pools.0.gpu", "\"V100\"", "input.pools[0].gpu: unknown GPU type 'V100'"},
        {"input.pools.0.price_per_hour", "-1", "input.pools[0].price_per_hour: -1 is outside 0..1e+09"},
        {"input.pools.0.mig_prices", "{\"9g.1gb\": 1}", "input.pools[0].mig_prices.9g.1gb: no MIG profile of A100-40GB"},
        {"input.models.1.layers", "\"many\"", "input.models[1].layers: expected a number"},
        {"input.tenants.0.tier", "\"platinum\"", "input.tenants[0].tier: unknown tier 'platinum'"},
        {"input.tenants.2.load.rps", NULL, "input.tenants[2].load.rps: missing"},
        /* Names in the planner's alphabet: they become CSV fields and config keys. */
        {"input.tenants.0.name", "\"a,b\"", "input.tenants[0].name: bad name 'a,b' (letters, digits and ._-)"},
        {"workers.0.name", "\"w 1\"", "workers[0].name: bad name 'w 1'"},
        {"input.tenants.1.key_sha256", "\"xyz\"", "input.tenants[1].key_sha256: expected \"\" or the SHA-256"},
        {"input.options.max_replicas", "2.5", "input.options.max_replicas: expected an integer"},
        {"workers.0.tenants.0", "\"nobody\"", "workers[0].tenants[0]: expected the name of a tenant"},
        {"workers.1.mode", "\"sharded\"", "workers[1].mode: unknown value 'sharded'"},
        /* A quoted value may hold control characters: escaped, so the
         * message stays one line. */
        {"input.tenants.0.isolation", "\"sha\\nred\\u0001\"",
         "input.tenants[0].isolation: unknown value 'sha\\nred\\x01'"},
        {"slices.0.gpu", "99", "slices[0].gpu: 99 is outside -1..4"},
        {"slices.0.gi_start", "1", "slices[0].gi_start: 1, but the layout puts it at"},
        {"instances.0.worker", "\"ghost\"", "instances[0].worker: unknown worker 'ghost'"},
        {"instances.2.slice", "0", "slices[1]: instance 2 of its range is on slice 0"},
        {"instances.0.replica", "1", "instances[0]: is not replica 1 of worker"},
        {"tenants.0.ok", "1", "tenants[0].ok: expected true or false"},
        {"problems", "[{\"tenant\": null, \"constraint\": \"greed\", \"text\": \"x\"}]",
         "problems[0].constraint: unknown value 'greed'"},
        {"totals.feasible", NULL, "totals.feasible: missing"},
    };
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    size_t len;
    char *json = json_of(&fx.p, &len);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char err[512];
        plan_input in;
        plan p;
        int rc = read_edited(json, &in, &p, err, sizeof err, 1, cases[c].path, cases[c].value);
        /* A refused report leaves nothing behind. */
        refused(rc, err, &in, &p, cases[c].want);
    }
    char err[256];
    plan_input in;
    plan p;
    assert_int_equal(planjson_read("{\"input\": ", 11, &in, &p, err, sizeof err), TS_ERR_CONFIG);
    assert_non_null(strstr(err, "not JSON"));
    assert_int_equal(planjson_read("[]", 2, &in, &p, err, sizeof err), TS_ERR_CONFIG);
    assert_int_equal(planjson_read(NULL, 0, &in, &p, err, sizeof err), TS_ERR_INVAL);
    free(json);
    unload(&fx);
}

/* Slice and GPU names as the reader's errors give them. */
static const char *gpu_name(char buf[160], const plan *p, int g) {
    return fmt(buf, "GPU %d (%s/%d)", g, p->nodes[p->gpus[g].node].name, p->gpus[g].index);
}

/* The first placed slice of mode `mode` from slice `from` on, or n_slices. */
static size_t slice_of_mode(const plan *p, int mode, size_t from) {
    for (size_t s = from; s < p->n_slices; s++)
        if (p->slices[s].mode == mode && p->slices[s].gpu >= 0) return s;
    return p->n_slices;
}

/* No whole-GPU slices in mixed.yaml's plan: strict tenants on L40S GPUs,
 * which have no MIG, get one each; a shared worker of two tenants, one
 * strict group of two, and a best-effort tenant. */
#define WHOLE_YAML                                                                                     \
    "fleet: [{name: l, gpu: L40S, gpus_per_node: 4, price_per_hour: 1}]\n"                             \
    "models: [{name: q, params: 0.49B, layers: 24, heads: 14, kv_heads: 2, head_dim: 64}]\n"           \
    "tiers: [{name: gold, ttft_ms: 2000, tpot_ms: 200}, {name: silver, ttft_ms: 4000}]\n"              \
    "tenants:\n"                                                                                       \
    "  - {name: a, model: q, tier: gold, isolation: strict, group: g, load: {rps: 0.5}}\n"            \
    "  - {name: b, model: q, tier: gold, isolation: strict, group: g, load: {rps: 0.5}}\n"            \
    "  - {name: c, model: q, tier: gold, isolation: strict, load: {rps: 0.5}}\n"                      \
    "  - {name: d, model: q, tier: gold, isolation: shared, load: {rps: 0.5}}\n"                      \
    "  - {name: e, model: q, tier: gold, isolation: shared, load: {rps: 0.5}}\n"                      \
    "  - {name: f, model: q, tier: silver, isolation: best-effort, load: {rps: 0.5}}\n"

/* WHOLE_YAML's plan, checked to have the workers the cases below edit:
 * g-q (a, b) and c-q whole, q-gold (d, e) mps, q-be timeslice. */
static void load_whole(fixture *fx) {
    char err[512];
    if (planio_parse(WHOLE_YAML, strlen(WHOLE_YAML), "whole.yaml", &fx->in, err, sizeof err)) fail_msg("whole.yaml: %s", err);
    assert_int_equal(plan_build(&fx->in, &fx->p), 0);
    assert_true(fx->p.feasible);
    static const int modes[] = {PLAN_MODE_WHOLE, PLAN_MODE_WHOLE, PLAN_MODE_MPS, PLAN_MODE_TIMESLICE};
    static const size_t tenants[] = {2, 1, 2, 1};
    assert_int_equal(fx->p.n_workers, 4);
    for (size_t w = 0; w < 4; w++) {
        assert_int_equal(fx->p.workers[w].mode, modes[w]);
        assert_int_equal(fx->p.workers[w].n_tenants, tenants[w]);
        assert_int_equal(fx->p.workers[w].replicas, 1);
    }
}

/* The slice worker w's first replica runs on. */
static size_t slice_of_worker(const plan *p, size_t w) { return p->insts[p->workers[w].first_inst].slice; }

/* GPUs that cannot exist are refused, naming the slice that breaks one:
 * two kinds of sharing, MPS shares over 100%, two whole-GPU slices,
 * memory beyond the GPU's, and a MIG+MPS GI's clients over 100%. */
static void test_planjson_gpus(void **st) {
    (void)st;
    char err[512], path[160], path2[160], val[160], want[160], gn[160];
    plan_input in;
    plan rp;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    const plan *p = &fx.p;
    size_t len;
    char *json = json_of(p, &len);
    /* MPS shares over 100%: a later share moved onto an earlier's GPU. */
    size_t a = p->n_slices, b = p->n_slices;
    for (size_t s = slice_of_mode(p, PLAN_MODE_MPS, 0); s < p->n_slices && b == p->n_slices;
         s = slice_of_mode(p, PLAN_MODE_MPS, s + 1))
        for (size_t t = slice_of_mode(p, PLAN_MODE_MPS, s + 1); t < p->n_slices; t = slice_of_mode(p, PLAN_MODE_MPS, t + 1))
            if (p->slices[t].gpu != p->slices[s].gpu && p->slices[s].pct + p->slices[t].pct > 100) {
                a = s;
                b = t;
                break;
            }
    if (b == p->n_slices) fail_msg("mixed.yaml's plan has no two MPS shares over 100%% together");
    int ga = p->slices[a].gpu;
    double sum = 0;
    for (size_t s = 0; s <= b; s++)
        if (p->slices[s].mode == PLAN_MODE_MPS && (p->slices[s].gpu == ga || s == b)) sum += p->slices[s].pct;
    int rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.gpu", b), fmt(val, "%d", ga));
    refused(rc, err, &in, &rp, fmt(want, "slices[%zu]: %s's MPS shares reach %g%%, over 100%%", b, gpu_name(gn, p, ga), sum));
    /* An MPS share on a MIG GPU. */
    size_t m = slice_of_mode(p, PLAN_MODE_MIG, 0), first = m;
    assert_true(m < a);
    for (size_t s = 0; s < m; s++)
        if (p->slices[s].gpu == p->slices[m].gpu) {
            first = s;
            break;
        }
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.gpu", a), fmt(val, "%d", p->slices[m].gpu));
    refused(rc, err, &in, &rp,
            fmt(want, "slices[%zu]: a mps slice on %s, which slices[%zu] uses for MIG", a, gpu_name(gn, p, p->slices[m].gpu), first));
    /* More memory than the GPU has. */
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.mem_alloc_bytes", a), "1e12");
    refused(rc, err, &in, &rp, fmt(want, "slices[%zu]: %s's slices take ", a, gpu_name(gn, p, ga)));
    /* A MIG+MPS GI's clients over 100%: one client's share raised to 100. */
    size_t g = slice_of_mode(p, PLAN_MODE_MIG_MPS, 0);
    assert_true(g < p->n_slices && p->slices[g].n_inst >= 2);
    const plan_slice *gs = &p->slices[g];
    sum = 100;
    for (int k = 1; k < gs->n_inst; k++) sum += p->insts[gs->first_inst + (size_t)k].pct;
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "instances.%zu.pct", gs->first_inst), "100");
    refused(rc, err, &in, &rp,
            fmt(want, "slices[%zu]: its MPS clients (instances %zu..%zu) take %g%% of the GI, over 100%%", g, gs->first_inst,
                gs->first_inst + (size_t)gs->n_inst - 1, sum));
    free(json);
    unload(&fx);
    /* Whole GPUs: a second one on a GPU, and an MPS share beside one. */
    load_whole(&fx);
    json = json_of(p, &len);
    size_t w0 = slice_of_worker(p, 0), w1 = slice_of_worker(p, 1), w2 = slice_of_worker(p, 2);
    assert_true(w0 < w1 && w1 < w2);
    int g0 = p->slices[w0].gpu;
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.gpu", w1), fmt(val, "%d", g0));
    refused(rc, err, &in, &rp, fmt(want, "slices[%zu]: a second whole-GPU slice on %s, after slices[%zu]", w1, gpu_name(gn, p, g0), w0));
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.gpu", w2), fmt(val, "%d", g0));
    refused(rc, err, &in, &rp,
            fmt(want, "slices[%zu]: a mps slice on %s, which slices[%zu] uses for one whole-GPU slice", w2, gpu_name(gn, p, g0), w0));
    /* Both moves at once: the first fault in slice order is named. */
    rc = read_edited(json, &in, &rp, err, sizeof err, 2, fmt(path, "slices.%zu.gpu", w1), fmt(val, "%d", g0),
                     fmt(path2, "slices.%zu.gpu", w2), val);
    refused(rc, err, &in, &rp, fmt(want, "slices[%zu]: a second whole-GPU slice", w1));
    free(json);
    unload(&fx);
}

/* A placed share of 0% has no compute (its estimates would be NaN): the
 * reader takes a placed slice's and instance's pct in (0, 100]. */
static void test_planjson_pct(void **st) {
    (void)st;
    char err[512], path[160], want[160];
    plan_input in;
    plan rp;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    const plan *p = &fx.p;
    size_t len;
    char *json = json_of(p, &len);
    size_t s = slice_of_mode(p, PLAN_MODE_MPS, 0), g = slice_of_mode(p, PLAN_MODE_MIG_MPS, 0);
    assert_true(s < p->n_slices && g < p->n_slices);
    int rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.pct", s), "0");
    refused(rc, err, &in, &rp, fmt(want, "slices[%zu].pct: 0 gives a placed slice no compute", s));
    size_t i = p->slices[g].first_inst;
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "instances.%zu.pct", i), "0");
    refused(rc, err, &in, &rp, fmt(want, "instances[%zu].pct: 0 gives a placed instance no compute", i));
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.pct", s), "0.5");
    assert_int_equal(rc, 0);
    plan_free(&rp);
    plan_input_free(&in);
    free(json);
    unload(&fx);
}

/* A worker's replica range holds its own instances, and each tenant is
 * in exactly one worker, one it could share, that its result names. */
static void test_planjson_members(void **st) {
    (void)st;
    char err[512], path[160], val[160], want[160];
    plan_input in;
    plan rp;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    const plan *p = &fx.p;
    size_t len;
    char *json = json_of(p, &len);
    /* One more replica, which would take the next worker's instance. */
    size_t w = 0;
    while (w < p->n_workers && !(p->workers[w].replicas == 1 && p->workers[w].first_inst + 1 < p->n_insts &&
                                 p->insts[p->workers[w].first_inst + 1].worker != (int)w))
        w++;
    assert_true(w < p->n_workers);
    size_t next = p->workers[w].first_inst + 1;
    int rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "workers.%zu.replicas", w), "2");
    refused(rc, err, &in, &rp,
            fmt(want, "workers[%zu]: replica 1 is instance %zu, which is replica %d of worker '%s'", w, next, p->insts[next].replica,
                p->workers[p->insts[next].worker].name));
    /* A tenant listed twice by its worker, and by a second worker of its
     * model (which would double its load and split its cost). */
    size_t w1 = 0, w2 = 0;
    for (size_t u = 0; u < p->n_workers && !w2; u++)
        for (size_t v = u + 1; v < p->n_workers; v++)
            if (p->workers[u].model == p->workers[v].model) {
                w1 = u;
                w2 = v;
                break;
            }
    assert_true(w2 > 0);
    const char *t0 = fx.in.tenants[p->workers[w1].tenants[0]].name, *t1 = fx.in.tenants[p->workers[w2].tenants[0]].name;
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "workers.%zu.tenants", w1), fmt(val, "[\"%s\", \"%s\"]", t0, t0));
    refused(rc, err, &in, &rp, fmt(want, "workers[%zu].tenants[1]: tenant '%s' is listed twice", w1, t0));
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "workers.%zu.tenants", w2), fmt(val, "[\"%s\", \"%s\"]", t1, t0));
    refused(rc, err, &in, &rp, fmt(want, "workers[%zu].tenants[1]: tenant '%s' is already in worker '%s'", w2, t0, p->workers[w1].name));
    /* A served tenant whose result names no worker. */
    size_t t = p->workers[0].tenants[0];
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "tenants.%zu.worker", t), "null");
    refused(rc, err, &in, &rp, fmt(want, "tenants[%zu].worker: expected '%s', the worker that lists it", t, p->workers[0].name));
    free(json);
    unload(&fx);
    /* Workers of several tenants: g-q (a, b) strict, q-gold (d, e) shared. */
    load_whole(&fx);
    json = json_of(p, &len);
    static const struct {
        const char *path, *value, *want;
    } cases[] = {
        {"input.tenants.1.group", "\"h\"", "workers[0].tenants[1]: tenant 'b' cannot share a worker with 'a': another strict group"},
        {"input.tenants.4.tier", "\"silver\"", "workers[2].tenants[1]: tenant 'e' cannot share a worker with 'd': another tier"},
        {"input.tenants.4.isolation", "\"best-effort\"", "workers[2].tenants[1]: tenant 'e' is best-effort, the worker shared"},
        {"workers.0.tier", "\"silver\"", "workers[0].tier: 'silver' has band 1, but its most urgent tenant's band is 0"},
        {"workers.2.mode", "\"whole\"", "workers[2].mode: whole is not a mode for shared tenants"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rc = read_edited(json, &in, &rp, err, sizeof err, 1, cases[c].path, cases[c].value);
        refused(rc, err, &in, &rp, cases[c].want);
    }
    /* A tenant in no worker, its result unserved to match. */
    rc = read_edited(json, &in, &rp, err, sizeof err, 2, "workers.2.tenants.1", NULL, "tenants.4.worker", "null");
    refused(rc, err, &in, &rp, "workers: tenant 'e' is in none of them");
    size_t s2 = slice_of_worker(p, 2);
    rc = read_edited(json, &in, &rp, err, sizeof err, 1, fmt(path, "slices.%zu.mode", s2), "\"timeslice\"");
    refused(rc, err, &in, &rp, "workers[2]: replica 0 runs on a timeslice slice, the worker is mps");
    free(json);
    unload(&fx);
}

/* A tenant's ok and the plan's feasible are recomputed as plan_build
 * judges them, whatever the report says: a slice unplaced or a share cut
 * by hand reads back as a plan that misses, and a report that calls a
 * good plan bad reads back as good. */
static void test_planjson_recompute(void **st) {
    (void)st;
    char err[512], path[160], path2[160], path3[160];
    plan_input in;
    plan rp;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    const plan *p = &fx.p;
    assert_true(p->feasible);
    size_t len;
    char *json = json_of(p, &len);
    /* The largest MPS share (a busy worker) cut to 1%, and the time slice
     * unplaced (its pct 0, as plan_build leaves an unplaced slice). */
    size_t big = p->n_slices;
    for (size_t s = slice_of_mode(p, PLAN_MODE_MPS, 0); s < p->n_slices; s = slice_of_mode(p, PLAN_MODE_MPS, s + 1))
        if (big == p->n_slices || p->slices[s].pct > p->slices[big].pct) big = s;
    size_t ts = slice_of_mode(p, PLAN_MODE_TIMESLICE, 0);
    assert_true(big < p->n_slices && ts < p->n_slices);
    int wb = p->insts[p->slices[big].first_inst].worker, wt = p->insts[p->slices[ts].first_inst].worker;
    int rc = read_edited(json, &in, &rp, err, sizeof err, 3, fmt(path, "slices.%zu.pct", big), "1", fmt(path2, "slices.%zu.gpu", ts),
                         "-1", fmt(path3, "slices.%zu.pct", ts), "0");
    if (rc) fail_msg("read: %s", err);
    assert_false(rp.feasible);
    for (size_t t = 0; t < in.n_tenants; t++) {
        int w = rp.results[t].worker;
        assert_int_equal(w, p->results[t].worker);
        assert_int_equal(rp.results[t].ok, w != wb && w != wt);
    }
    plan_free(&rp);
    plan_input_free(&in);
    /* The report's own verdict is not what the reader believes. */
    rc = read_edited(json, &in, &rp, err, sizeof err, 2, "tenants.0.ok", "false", "totals.feasible", "false");
    if (rc) fail_msg("read: %s", err);
    assert_true(rp.feasible);
    assert_true(rp.results[0].ok);
    plan_free(&rp);
    plan_input_free(&in);
    free(json);
    unload(&fx);
}

/* MIG+MPS pricing: a GI's clients pay the whole GI between them, each by
 * its share of the shares, even when group_gi's floored shares sum below
 * 100 (three equal members get 33% each). */
#define GI3_YAML                                                                                       \
    "fleet: [{name: a, gpu: A100-40GB, gpus_per_node: 1, price_per_hour: 7.0}]\n"                      \
    "models:\n"                                                                                        \
    "  - {name: m1, params: 0.36B, layers: 32, heads: 15, kv_heads: 5, head_dim: 64, max_context: 1024}\n" \
    "  - {name: m2, params: 0.36B, layers: 32, heads: 15, kv_heads: 5, head_dim: 64, max_context: 1024}\n" \
    "  - {name: m3, params: 0.36B, layers: 32, heads: 15, kv_heads: 5, head_dim: 64, max_context: 1024}\n" \
    "tiers: [{name: gold, ttft_ms: 400, tpot_ms: 60}]\n"                                               \
    "tenants:\n"                                                                                       \
    "  - {name: t1, model: m1, tier: gold, isolation: strict, group: g, load: {rps: 0.2, prompt_tokens: 128, output_tokens: 32}}\n" \
    "  - {name: t2, model: m2, tier: gold, isolation: strict, group: g, load: {rps: 0.2, prompt_tokens: 128, output_tokens: 32}}\n" \
    "  - {name: t3, model: m3, tier: gold, isolation: strict, group: g, load: {rps: 0.2, prompt_tokens: 128, output_tokens: 32}}\n"

/* a == b but for the rounding of a few additions. */
static void assert_near(double a, double b) {
    if (!(fabs(a - b) <= 1e-12 * (fabs(b) > 1 ? fabs(b) : 1))) fail_msg("%.17g, want %.17g", a, b);
}

static void test_mig_mps_price(void **st) {
    (void)st;
    fixture fx;
    char err[512];
    if (planio_parse(GI3_YAML, strlen(GI3_YAML), "gi3.yaml", &fx.in, err, sizeof err)) fail_msg("gi3.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    plan *p = &fx.p;
    assert_int_equal(p->n_slices, 1);
    assert_int_equal(p->slices[0].mode, PLAN_MODE_MIG_MPS);
    assert_int_equal(p->slices[0].n_inst, 3);
    /* The GI's price: 7.0 x its compute slices / 7. */
    const mig_geom *geo = mig_geom_find(p->slices[0].gi_id);
    assert_non_null(geo);
    double gi = 7.0 * geo->compute / MIG_COMPUTE_SLICES;
    static const double shares[][3] = {{33, 33, 33}, {50, 30, 10}};
    for (size_t c = 0; c < 2; c++) {
        for (int k = 0; k < 3; k++) p->insts[k].pct = shares[c][k];
        double sum = shares[c][0] + shares[c][1] + shares[c][2];
        for (int k = 0; k < 3; k++) assert_near(plan_inst_price(p, &p->insts[k]), gi * shares[c][k] / sum);
        assert_near(plan_price(p), gi);
    }
    unload(&fx);
    /* mixed.yaml's GI of two clients, priced by the default rule. */
    load("tests/golden/plan/mixed.yaml", &fx);
    size_t g = slice_of_mode(p, PLAN_MODE_MIG_MPS, 0);
    assert_true(g < p->n_slices);
    geo = mig_geom_find(p->slices[g].gi_id);
    assert_non_null(geo);
    assert_string_not_equal(plan_slice_profile(p, &p->slices[g]), "3g.20gb");  /* the one with a mig_prices entry */
    double sum = 0;
    for (int k = 0; k < p->slices[g].n_inst; k++) sum += plan_inst_price(p, &p->insts[p->slices[g].first_inst + (size_t)k]);
    assert_near(sum, 1.20 * geo->compute / MIG_COMPUTE_SLICES);
    unload(&fx);
}

/* An input without tiers gets the scheduler's default tiers, and the
 * tessera.yaml it emits gives serve exactly those tiers back: every field,
 * bronze's 30 s queue limit included. */
static void test_default_tiers_reach_serve(void **st) {
    (void)st;
    static const char text[] =
        "fleet:\n  - {name: h, gpu: H100-80GB, gpus_per_node: 1, nodes: 1}\n"
        "models:\n  - {name: m, params: 0.49B, layers: 24, heads: 14, kv_heads: 2, head_dim: 64,"
        " max_context: 4096}\n"
        "tenants:\n  - {name: a, model: m, tier: bronze, load: {rps: 1, prompt_tokens: 100, output_tokens: 10},"
        " key_sha256: 1111111111111111111111111111111111111111111111111111111111111111}\n";
    fixture fx;
    char err[512];
    int rc = planio_parse(text, sizeof text - 1, "defaults.yaml", &fx.in, err, sizeof err);
    if (rc) fail_msg("defaults.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    emit_out out;
    assert_int_equal(emit_run(&fx.p, EMIT_SERVE, &out), 0);
    assert_true(out.n >= 1);
    char path[PATH_LEN];
    tu_path(path, sizeof path, "serve-defaults.yaml");
    assert_int_equal(tu_write_file(path, out.files[0].data, out.files[0].len), 0);
    cfg c;
    rc = cfg_load(path, &c, err, sizeof err);
    unlink(path);
    if (rc) fail_msg("%s does not load: %s", out.files[0].path, err);
    assert_int_equal(c.n_tiers, SCHED_DEFAULT_TIERS);
    for (int i = 0; i < SCHED_DEFAULT_TIERS; i++) {
        const sched_tier *want = &sched_default_tiers[i];
        assert_string_equal(c.tiers[i].name, want->name);
        assert_int_equal(c.tiers[i].band, want->band);
        assert_int_equal(c.tiers[i].ttft_ms, want->ttft_ms);
        assert_int_equal(c.tiers[i].tpot_ms, want->tpot_ms);
        assert_float_equal(c.tiers[i].min_share, want->min_share, 1e-12);
        assert_int_equal(c.tiers[i].max_queue_ms, want->max_queue_ms);
    }
    assert_int_equal(c.tiers[2].max_queue_ms, 30000);
    cfg_free(&c);
    emit_out_free(&out);
    unload(&fx);
}

/* ---- k8s and mps sharing ------------------------------------------------------ */

/* The device-plugin config of node in k8s.yaml text, copied into buf; ""
 * when the node has none (a HAMi node). */
static void plugin_block(const char *text, const char *node, char *buf, size_t cap) {
    char key[128];
    snprintf(key, sizeof key, "\n  %s: |-\n", node);
    const char *a = strstr(text, key), *end;
    buf[0] = 0;
    if (!a) return;
    a += strlen(key);
    for (end = a; *end && !(end[0] == '\n' && (strncmp(end + 1, "    ", 4) != 0)); end++) {}
    snprintf(buf, cap, "%.*s", (int)(end - a), a);
}

/* MiB a GPU of type t has as its driver reports them (nvidia-smi's total,
 * what NVML gives the device plugin and HAMi): the transcripts gpucat.c
 * cites, written here again so that the emitter's figure is checked, not
 * repeated. Other types: their usable memory, below the driver's total. */
static double driver_mib(const gpucat_gpu *t) {
    static const struct {
        const char *name;
        double mib;
    } SMI[] = {{"L40S", 46068}, {"L4", 23034}};
    for (size_t i = 0; i < sizeof SMI / sizeof SMI[0]; i++)
        if (strcmp(t->name, SMI[i].name) == 0) return SMI[i].mib;
    return floor(t->mem_gib * 1024.0);
}

/* NVIDIA's device plugin refuses MPS with migStrategy mixed, and its MPS
 * replicas are equal (100/replicas % of SMs, memory/replicas): a node
 * config that shares by MPS must hold every planned share on that node
 * within one replica's grant. MPS clients never name a device (k8s env,
 * --emit mps env files). */
static void test_k8s_sharing(void **st) {
    (void)st;
    int saw_mps = 0;
    for (size_t k = 0; k < sizeof INPUTS / sizeof INPUTS[0]; k++) {
        fixture fx;
        load(INPUTS[k], &fx);
        const plan *p = &fx.p;
        size_t len;
        char *text = render(p, EMIT_K8S, &len);
        assert_null(strstr(text, "CUDA_VISIBLE_DEVICES"));
        /* Unlabelled GPU nodes get whole GPUs, not a failed plugin. */
        char dflt[256];
        plugin_block(text, "default", dflt, sizeof dflt);
        assert_string_equal(dflt, "    version: v1\n    flags:\n      migStrategy: none");
        for (size_t n = 0; n < p->n_nodes; n++) {
            char blk[2048];
            plugin_block(text, p->nodes[n].name, blk, sizeof blk);
            const char *mps = strstr(blk, "\n      mps:\n");
            if (!mps) continue;
            saw_mps = 1;
            assert_null(strstr(blk, "migStrategy: mixed"));
            const char *r = strstr(mps, "replicas: ");
            assert_non_null(r);
            int replicas = atoi(r + 10);
            assert_true(replicas >= 2);
            for (size_t i = 0; i < p->n_insts; i++) {
                const plan_inst *in = &p->insts[i];
                const plan_slice *s = &p->slices[in->slice];
                if (s->gpu < 0 || p->gpus[s->gpu].node != (int)n) continue;
                if (s->mode != PLAN_MODE_MPS && s->mode != PLAN_MODE_TIMESLICE)
                    fail_msg("%s: a MIG or whole GPU beside plugin MPS", p->nodes[n].name);
                double grant = floor(driver_mib(p->types[p->gpus[s->gpu].type]) / replicas);
                assert_true((s->mode == PLAN_MODE_TIMESLICE ? s->pct : in->pct) <= 100 / replicas);
                assert_true(ceil(in->mem_limit / 1048576.0) <= grant);
                /* The grant the manifest states is the plugin's. */
                if (s->mode != PLAN_MODE_MPS) continue;
                char want[160];
                snprintf(want, sizeof want, "replica gives %d%% and %.0f MiB", 100 / replicas, grant);
                if (!strstr(text, want)) fail_msg("%s: the manifest does not say '%s'", p->nodes[n].name, want);
            }
        }
        free(text);
        emit_out out;
        assert_int_equal(emit_run(p, EMIT_MPS, &out), 0);
        for (size_t f = 0; f < out.n; f++)
            if (strstr(out.files[f].data, "CUDA_MPS_PIPE_DIRECTORY=") && strstr(out.files[f].path, ".env"))
                assert_null(strstr(out.files[f].data, "\nCUDA_VISIBLE_DEVICES="));
        emit_out_free(&out);
        unload(&fx);
    }
    assert_true(saw_mps);   /* k8s-mps.yaml's node shares by the plugin's MPS */
}

/* Where the plugin cannot hold the plan, HAMi's resources carry each
 * instance's planned memory and share, pinned to its GPU. Two ways:
 * unequal MPS shares (k8s-hami.yaml), a whole GPU beside shared ones. */
static void check_hami(const char *what, const plan *p, const char *why) {
    size_t len;
    char *text = render(p, EMIT_K8S, &len), want[160];
    if (!strstr(text, why)) fail_msg("%s: the NOTE does not say '%s'", what, why);
    assert_null(strstr(text, "\n      mps:\n"));
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_slice *s = &p->slices[in->slice];
        const plan_gpu *g = &p->gpus[s->gpu];
        /* A whole GPU by percentage (a MiB figure above what HAMi registered
         * leaves the pod Pending), a share never above the driver's MiB. */
        double mib = fmin(ceil(in->mem_limit / 1048576.0), driver_mib(p->types[g->type]));
        double pct = ceil(s->mode == PLAN_MODE_MPS ? in->pct : s->pct);
        if (s->mode == PLAN_MODE_WHOLE)
            snprintf(want, sizeof want, "nvidia.com/gpumem-percentage: 100\n              nvidia.com/gpucores: 100\n");
        else
            snprintf(want, sizeof want, "nvidia.com/gpumem: %.0f\n              nvidia.com/gpucores: %.0f\n", mib,
                     pct);
        if (!strstr(text, want)) fail_msg("%s: no instance asks %s", what, want);
        snprintf(want, sizeof want, "nvidia.com/use-gpuuuid: GPU-UUID-%s-gpu%d\n", p->nodes[g->node].name, g->index);
        if (!strstr(text, want)) fail_msg("%s: no pod pinned by %s", what, want);
    }
    free(text);
}

/* The workload (StatefulSet or Deployment) of instance name in k8s text,
 * copied into buf up to the next object. */
static void workload_block(const char *text, const char *name, char *buf, size_t cap) {
    char key[160];
    const char *a = NULL;
    for (int k = 0; k < 2 && !a; k++) {
        snprintf(key, sizeof key, "kind: %s\nmetadata:\n  name: tessera-%s\n", k ? "Deployment" : "StatefulSet", name);
        a = strstr(text, key);
    }
    if (!a) fail_msg("no workload tessera-%s", name);
    const char *end = strstr(a, "\n---\n");
    snprintf(buf, cap, "%.*s", (int)(end ? end - a : (ptrdiff_t)strlen(a)), a);
}

/* Every pod requests CPU and memory (not BestEffort, the first evicted),
 * with the memory limit equal to the request and the request at least the
 * model's weights and its planned KV pool. */
static void test_k8s_requests(void **st) {
    (void)st;
    for (size_t k = 0; k < sizeof INPUTS / sizeof INPUTS[0]; k++) {
        fixture fx;
        load(INPUTS[k], &fx);
        const plan *p = &fx.p;
        size_t len;
        char *text = render(p, EMIT_K8S, &len), name[80];
        char *blk = malloc(1 << 16);
        assert_non_null(blk);
        for (size_t i = 0; i < p->n_insts; i++) {
            const plan_inst *in = &p->insts[i];
            if (p->slices[in->slice].gpu < 0) continue;
            emit_inst_name(p, i, name, sizeof name);
            workload_block(text, name, blk, 1 << 16);
            const char *rq = strstr(blk, "            requests:\n              cpu: \"");
            if (!rq) fail_msg("%s: tessera-%s requests no CPU", STEMS[k], name);
            assert_true(atoi(rq + strlen("            requests:\n              cpu: \"")) >= 1);
            const char *mem = strstr(rq, "\n              memory: "), *lim = strstr(rq, "            limits:\n");
            assert_non_null(mem);
            assert_non_null(lim);
            double mib = atof(mem + strlen("\n              memory: "));
            const perf_model *pm = &p->in->models[p->workers[in->worker].model].m;
            double need = (pm->params * pm->weight_bytes + in->est.kv_bytes) / 1048576.0;
            if (mib < need) fail_msg("%s: tessera-%s requests %.0f MiB for %.0f MiB of weights and KV", STEMS[k], name,
                                     mib, need);
            char want[96];
            snprintf(want, sizeof want, "            limits:\n              memory: %.0fMi\n", mib);
            if (strncmp(lim, want, strlen(want)) != 0)
                fail_msg("%s: tessera-%s: limit is not %.0fMi", STEMS[k], name, mib);
        }
        free(blk);
        free(text);
        unload(&fx);
    }
}

#define LOAD1 "load: {rps: 1, prompt_tokens: 256, output_tokens: 64}"

static void test_k8s_hami(void **st) {
    (void)st;
    fixture fx;
    load("tests/golden/plan/k8s-hami.yaml", &fx);
    check_hami("k8s-hami.yaml", &fx.p, "replicas 50% and");
    unload(&fx);
    static const char text[] =
        "fleet: [{name: l40s, gpu: L40S, gpus_per_node: 2, nodes: 1}]\n"
        "models: [{name: m, params: 0.49B, layers: 24, heads: 14, kv_heads: 2, head_dim: 64, max_context: 4096}]\n"
        "tiers: [{name: gold, ttft_ms: 400, tpot_ms: 60}, {name: silver, ttft_ms: 2000, tpot_ms: 150}]\n"
        "tenants:\n"
        "  - {name: lab, model: m, tier: gold, isolation: strict, " LOAD1 "}\n"
        "  - {name: a, model: m, tier: gold, isolation: shared, " LOAD1 "}\n"
        "  - {name: b, model: m, tier: silver, isolation: shared, " LOAD1 "}\n";
    char err[512];
    if (planio_parse(text, sizeof text - 1, "whole.yaml", &fx.in, err, sizeof err)) fail_msg("whole.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    size_t whole = slice_of_mode(&fx.p, PLAN_MODE_WHOLE, 0), mps = slice_of_mode(&fx.p, PLAN_MODE_MPS, 0);
    assert_true(whole < fx.p.n_slices && mps < fx.p.n_slices);
    check_hami("whole.yaml", &fx.p, "whole-GPU instances beside shared GPUs");
    unload(&fx);
}

/* What emit_k8s_notes prints for plan p. */
static char *k8s_notes(const plan *p) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    assert_int_equal(emit_k8s_notes(p, f), 0);
    fclose(f);
    return buf;
}

/* On a node with MIG GPUs the plugin can only time-slice: MPS clients, and
 * a static GI of a profile that another GI shares, become replicas that the
 * plan neither places nor limits; the command says so for each. */
static void test_k8s_ts_notes(void **st) {
    (void)st;
    fixture fx;
    load("tests/golden/plan/mixed.yaml", &fx);
    char *notes = k8s_notes(&fx.p);
    assert_non_null(strstr(notes, "node a40-0: the device plugin runs no MPS on a node with MIG GPUs"));
    assert_non_null(strstr(notes, "not placed by the plan"));
    assert_non_null(strstr(notes, "neither their SM share nor their memory is limited"));
    free(notes);
    unload(&fx);
    static const char text[] =
        "fleet: [{name: a40, gpu: A100-40GB, gpus_per_node: 1, nodes: 1}]\n"
        "models:\n"
        "  - {name: q, params: 0.49B, layers: 24, heads: 14, kv_heads: 2, head_dim: 64, max_context: 4096}\n"
        "  - {name: s, params: 0.36B, layers: 32, heads: 15, kv_heads: 5, head_dim: 64, max_context: 2048}\n"
        "tiers: [{name: gold, ttft_ms: 400, tpot_ms: 60}]\n"
        "tenants:\n"
        "  - {name: n1, model: q, tier: gold, isolation: strict, group: g, " LOAD1 "}\n"
        "  - {name: n2, model: s, tier: gold, isolation: strict, group: g, " LOAD1 "}\n"
        "  - {name: solo, model: q, tier: gold, isolation: strict, profile: 1g.5gb, " LOAD1 "}\n";
    char err[512];
    if (planio_parse(text, sizeof text - 1, "gi.yaml", &fx.in, err, sizeof err)) fail_msg("gi.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    size_t shared = slice_of_mode(&fx.p, PLAN_MODE_MIG_MPS, 0), solo = slice_of_mode(&fx.p, PLAN_MODE_MIG, 0);
    assert_true(shared < fx.p.n_slices && solo < fx.p.n_slices);
    assert_string_equal(plan_slice_profile(&fx.p, &fx.p.slices[solo]), "1g.5gb");
    notes = k8s_notes(&fx.p);
    if (!strstr(notes, "static 1g.5gb GIs are time-slice replicas") || !strstr(notes, "not placed by the plan"))
        fail_msg("gi.yaml: the NOTE does not say the static GI is a replica: %s", notes);
    free(notes);
    unload(&fx);
    /* A whole GPU beside MIG GPUs and a time-sliced one: the planner gives
     * strict tenants GIs when the fleet has MIG, but a plan read back from
     * its JSON report may hold one (the second GPU's 7g GI made whole). */
    static const char text2[] =
        "fleet: [{name: a40, gpu: A100-40GB, gpus_per_node: 3, nodes: 1}]\n"
        "models:\n"
        "  - {name: q, params: 0.49B, layers: 24, heads: 14, kv_heads: 2, head_dim: 64, max_context: 4096}\n"
        "  - {name: s, params: 0.36B, layers: 32, heads: 15, kv_heads: 5, head_dim: 64, max_context: 2048}\n"
        "tiers: [{name: gold, ttft_ms: 400, tpot_ms: 60}, {name: b}]\n"
        "tenants:\n"
        "  - {name: solo, model: q, tier: gold, isolation: strict, profile: 7g.40gb, " LOAD1 "}\n"
        "  - {name: solo2, model: s, tier: gold, isolation: strict, profile: 7g.40gb, " LOAD1 "}\n"
        "  - {name: be1, model: q, tier: b, isolation: best-effort, " LOAD1 "}\n"
        "  - {name: be2, model: s, tier: b, isolation: best-effort, " LOAD1 "}\n";
    if (planio_parse(text2, sizeof text2 - 1, "whole.yaml", &fx.in, err, sizeof err)) fail_msg("whole.yaml: %s", err);
    assert_int_equal(plan_build(&fx.in, &fx.p), 0);
    assert_int_equal(fx.p.slices[1].mode, PLAN_MODE_MIG);
    assert_int_equal(fx.p.slices[3].mode, PLAN_MODE_TIMESLICE);
    size_t len;
    char *json = render(&fx.p, EMIT_JSON, &len);
    unload(&fx);
    if (read_edited(json, &fx.in, &fx.p, err, sizeof err, 4, "slices.1.mode", "\"whole\"", "slices.1.gi_id", "-1",
                    "slices.1.gi_start", "-1", "workers.1.mode", "\"whole\""))
        fail_msg("whole.json: %s", err);
    free(json);
    notes = k8s_notes(&fx.p);
    if (!strstr(notes, "whole-GPU instances are time-slice replicas") || !strstr(notes, "not placed by the plan"))
        fail_msg("whole.json: the NOTE does not say the whole GPU is a replica: %s", notes);
    free(notes);
    unload(&fx);
}

/* ---- the command -------------------------------------------------------------- */

static int run(const char *args) {
    const char *bin = getenv("TS_TESSERA");
    if (!bin || access(bin, X_OK) != 0) return -1;
    char cmd[PATH_LEN * 3];
    snprintf(cmd, sizeof cmd, "%s plan %s >/dev/null 2>&1", bin, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_command(void **st) {
    (void)st;
    if (!getenv("TS_TESSERA")) skip();
    char root[PATH_LEN], dir[PATH_LEN], args[PATH_LEN * 3], file[PATH_LEN * 2];
    src_root(root, sizeof root);
    tu_path(dir, sizeof dir, "plan-out");
    snprintf(args, sizeof args, "--input %sexamples/plan/fleet.yaml --emit serve --out %s", root, dir);
    assert_int_equal(run(args), 0);
    snprintf(file, sizeof file, "%s/serve/bank-llama-3-8b.yaml", dir);
    assert_int_equal(access(file, R_OK), 0);
    snprintf(args, sizeof args, "--input %sexamples/plan/fleet.yaml --emit nvidia-smi --out %s", root, dir);
    assert_int_equal(run(args), 0);
    snprintf(file, sizeof file, "%s/nvidia-smi/h100-0.sh", dir);
    assert_int_equal(access(file, X_OK), 0);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    assert_int_equal(system(args), 0);
    /* Infeasible: exit 1; bad input or usage: exit 2. */
    char bad[PATH_LEN];
    tu_path(bad, sizeof bad, "infeasible.yaml");
    const char *yaml = "fleet: [{name: n, gpu: L4, gpus_per_node: 1}]\n"
                       "models: [{name: m, params: 70B, layers: 80, kv_heads: 8, head_dim: 128}]\n"
                       "tenants: [{name: a, model: m, tier: gold}]\n";
    assert_int_equal(tu_write_file(bad, yaml, strlen(yaml)), 0);
    snprintf(args, sizeof args, "--input %s", bad);
    assert_int_equal(run(args), 1);
    assert_int_equal(tu_write_file(bad, "fleet: 3\n", 9), 0);
    assert_int_equal(run(args), 2);
    unlink(bad);
    assert_int_equal(run("--emit yaml --input x.yaml"), 2);
    assert_int_equal(run(""), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_outputs_parse),
        cmocka_unit_test(test_serve_configs_load),
        cmocka_unit_test(test_k8s_configs_load),
        cmocka_unit_test(test_default_tiers_reach_serve),
        cmocka_unit_test(test_json_roundtrip),
        cmocka_unit_test(test_json_headroom),
        cmocka_unit_test(test_planjson_errors),
        cmocka_unit_test(test_planjson_gpus),
        cmocka_unit_test(test_planjson_pct),
        cmocka_unit_test(test_planjson_members),
        cmocka_unit_test(test_planjson_recompute),
        cmocka_unit_test(test_mig_mps_price),
        cmocka_unit_test(test_k8s_sharing),
        cmocka_unit_test(test_k8s_hami),
        cmocka_unit_test(test_k8s_requests),
        cmocka_unit_test(test_k8s_ts_notes),
        cmocka_unit_test(test_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
