/* test_config.c - unit tests of the YAML configuration (src/serve/config.c).
 *
 * The demo file loads with exactly the values it spells out; a table of
 * broken files each fails with the file, the right line, a column and the
 * right field in the message and leaves the output zeroed; sizes with units, relative
 * model paths, defaults, the single-model configuration and the key table
 * built from a config. Run under ASan, the broken files also prove that no
 * error path leaks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "err.h"
#include "testutil.h"

#include <limits.h>

#define H_GOLD   "d7166ec1d61b17c1849fb78069f8deae71c4cf30db4b9f913ae4220db79e7864"
#define H_SILVER "c039e6a890348dcc06588ddc3acc7ddef6f353d4d8af97416ed5dc219f407b61"
#define H_BRONZE "facd21f2d9ca3612256025c83bb70c5b5ba42dc449429af87bb4fd8d0a6638a4"
#define H_ADMIN  "f87d1ca8c45c6daca286c67be951abbcc817ee39918b0480a28aa5a17a932b9a"
#define H_METRICS "0ce700779091777e8d0d973661e9d8f8237f10b798e07049973a836f522d3db3" /* tsk-demo-metrics */

/* The smallest valid file: one model, one tenant. */
#define MINIMAL                                 \
    "models:\n"                                 \
    "  - name: m\n"                             \
    "    path: m.gguf\n"                        \
    "tenants:\n"                                \
    "  - name: a\n"                             \
    "    tier: gold\n"                          \
    "    key_sha256: " H_GOLD "\n"

static int is_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/* The repository root, from this file's path (CMake compiles by absolute
 * path), else $TS_SRC. */
static void src_root(char *buf, size_t cap) {
    const char *env = getenv("TS_SRC");
    const char *f = __FILE__;
    const char *end = strstr(f, "tests/test_config.c");
    if (f[0] == '/' && end)
        snprintf(buf, cap, "%.*s", (int)(end - f), f);
    else if (env)
        snprintf(buf, cap, "%s/", env);
    else
        snprintf(buf, cap, "./");
}

/* Write text to a scratch file named name and load it. */
static int load_text(const char *name, const char *text, cfg *c, char *err, size_t errlen,
                     char *path, size_t pathcap) {
    tu_path(path, pathcap, name);
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
    int rc = cfg_load(path, c, err, errlen);
    unlink(path);
    return rc;
}

/* ---- the demo file ---------------------------------------------------------- */

static void test_demo(void **st) {
    (void)st;
    char root[PATH_MAX], path[PATH_MAX + 32], err[512], want[PATH_MAX + 64];
    src_root(root, sizeof root);
    snprintf(path, sizeof path, "%sexamples/demo.yaml", root);
    cfg c;
    int rc = cfg_load(path, &c, err, sizeof err);
    if (rc) fail_msg("%s", err);

    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.policy, SCHED_POLICY_FAIR);
    assert_int_equal(c.limits.max_body_bytes, 1 << 20);
    assert_int_equal(c.limits.header_timeout_s, 10);
    assert_int_equal(c.limits.idle_timeout_s, 60);
    assert_int_equal(c.limits.max_connections, 2048);
    assert_int_equal(c.limits.shutdown_grace_s, 10);

    assert_int_equal(c.n_models, 1);
    cfg_model *m = &c.models[0];
    assert_string_equal(m->name, "demo");
    snprintf(want, sizeof want, "%sexamples/../models/demo-15m.gguf", root);
    assert_string_equal(m->path, want);
    assert_int_equal(m->kv_cache_bytes, 64u << 20);
    assert_int_equal(m->swap_bytes, 64u << 20);
    assert_int_equal(m->block_size, 16);
    assert_int_equal(m->max_seqs, 32);
    assert_int_equal(m->budget_min, 32);
    assert_int_equal(m->budget_max, 256);
    assert_int_equal(m->threads, 0);
    assert_int_equal(cfg_model_find(&c, "demo"), 0);
    assert_int_equal(cfg_model_find(&c, "gpt-4"), -1);

    /* The tiers written out in the file are sched_tiers_default()'s. */
    assert_int_equal(c.n_tiers, 3);
    assert_string_equal(c.tiers[0].name, "gold");
    assert_string_equal(c.tiers[1].name, "silver");
    assert_string_equal(c.tiers[2].name, "bronze");
    assert_int_equal(c.tiers[2].band, 2);
    assert_int_equal(c.tiers[0].ttft_ms, 200);
    assert_int_equal(c.tiers[1].ttft_ms, 500);
    assert_true(c.tiers[1].min_share == 0.10);
    assert_int_equal(c.tiers[2].max_queue_ms, 30000);

    static const char *const names[] = {"gold-team", "silver-team", "bronze-team"};
    static const char *const keys[] = {"tsk-demo-gold", "tsk-demo-silver", "tsk-demo-bronze"};
    assert_int_equal(c.n_tenants, 3);
    for (int i = 0; i < 3; i++) {
        cfg_tenant *t = &c.tenants[i];
        assert_string_equal(t->sched.name, names[i]);
        assert_int_equal(t->sched.tier, i);
        assert_true(t->sched.weight == 1.0);
        assert_int_equal(t->n_keys, 1);
        uint8_t h[AUTH_HASH_LEN];
        auth_hash(keys[i], strlen(keys[i]), h);
        assert_memory_equal(t->keys[0], h, AUTH_HASH_LEN);
        assert_int_equal(cfg_tenant_find(&c, names[i]), i);
    }
    assert_int_equal(c.tenants[0].requests_per_minute, 0);
    assert_true(c.tenants[1].sched.max_kv_frac == 0.5);
    cfg_tenant *b = &c.tenants[2];
    assert_true(b->sched.max_kv_frac == 0.25);
    assert_int_equal(b->sched.max_queued, 16);
    assert_int_equal(b->requests_per_minute, 60);
    assert_int_equal(b->tokens_per_minute, 20000);
    assert_int_equal(b->max_concurrent, 4);

    assert_true(c.has_admin);
    uint8_t admin[AUTH_HASH_LEN];
    auth_hash("tsk-demo-admin", 14, admin);
    assert_memory_equal(c.admin_key, admin, AUTH_HASH_LEN);

    assert_true(c.has_metrics);
    uint8_t metrics[AUTH_HASH_LEN];
    auth_hash("tsk-demo-metrics", 16, metrics);
    assert_memory_equal(c.metrics_key, metrics, AUTH_HASH_LEN);
    assert_int_equal(c.limits.max_connections_per_ip, 0);
    assert_int_equal(c.limits.reserved_connections, 256);

    /* The demo keys find their tenants through the table. */
    auth_table *at;
    assert_int_equal(cfg_auth_table(&c, &at), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(auth_lookup(at, keys[i], strlen(keys[i])), i);
    assert_int_equal(auth_lookup(at, "tsk-demo-admin", 14), AUTH_ADMIN);
    assert_int_equal(auth_lookup(at, "tsk-demo-platinum", 17), AUTH_NONE);
    assert_int_equal(auth_lookup(at, "tsk-demo-metrics", 16), AUTH_METRICS);
    auth_table_free(at);

    cfg_free(&c);
    assert_true(is_zero(&c, sizeof c));
    cfg_free(&c);   /* twice is harmless */
    cfg_free(NULL);
}

/* ---- broken files ----------------------------------------------------------- */

/* 1 if msg begins with want, written ":line: rest" or ":line:column: rest".
 * The first form still requires a column in msg, ":line:<digits>: rest",
 * without pinning its value; the second pins it. */
static int msg_matches(const char *msg, const char *want) {
    size_t k = 1, c;
    while (isdigit((unsigned char)want[k])) k++;
    for (c = k + 1; isdigit((unsigned char)want[c]); c++) {}
    if (want[0] != ':' || k == 1 || want[k] != ':' || (c > k + 1 && want[c] == ':'))
        return strncmp(msg, want, strlen(want)) == 0;
    if (strncmp(msg, want, k + 1) != 0 || !isdigit((unsigned char)msg[k + 1])) return 0;
    const char *m = msg + k + 1;
    while (isdigit((unsigned char)*m)) m++;
    return strncmp(m, want + k, strlen(want + k)) == 0;
}

typedef struct bad_case {
    const char *yaml;
    const char *want;   /* begins the message, right after the path; see msg_matches */
} bad_case;

static const bad_case bad_cases[] = {
    /* The example of config.h: an unknown tier, at the line and column of
     * the value ("    tier: platinum"). */
    {"models:\n"
     "  - {name: m, path: m.gguf}\n"
     "tenants:\n"
     "  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n"
     "  - name: b\n"
     "    tier: platinum\n"
     "    key_sha256: " H_SILVER "\n",
     ":6:11: tenants[1].tier: unknown tier 'platinum' (gold, silver, bronze)"},
    /* Typos in keys, at each level. */
    {"listne: 127.0.0.1:80\n" MINIMAL, ":1: listne: unknown key (expected one of: listen,"},
    {MINIMAL "    wieght: 2\n", ":8: tenants[0].wieght: unknown key (expected one of: name, tier, weight,"},
    {"limits:\n  max_body: 10\n" MINIMAL, ":2: limits.max_body: unknown key"},
    {"models:\n  - name: m\n    path: m.gguf\n    kv_cache: 1GiB\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].kv_cache: unknown key"},
    {"tiers:\n  - {name: gold, band: 0, ttft: 5}\n" MINIMAL, ":2: tiers[0].ttft: unknown key"},
    /* A key given twice in one mapping. */
    {MINIMAL "    tier: silver\n", ":8: tenants[0].tier: repeated key (first at line 6)"},
    /* Types and ranges. */
    {MINIMAL "    weight: 0\n", ":8: tenants[0].weight: expected a number in (0, 1e+06]"},
    {MINIMAL "    weight: -1\n", ":8: tenants[0].weight: expected a number"},
    {MINIMAL "    weight: heavy\n", ":8: tenants[0].weight: expected a number"},
    {MINIMAL "    max_kv_fraction: 1.5\n", ":8: tenants[0].max_kv_fraction: expected a number in [0, 1]"},
    {MINIMAL "    max_kv_fraction: .nan\n", ":8: tenants[0].max_kv_fraction: expected a number"},
    {MINIMAL "    max_kv_blocks: 3000000000\n", ":8: tenants[0].max_kv_blocks: expected an integer in 0..2147483647"},
    {MINIMAL "    requests_per_minute: -5\n", ":8: tenants[0].requests_per_minute: expected an integer"},
    {MINIMAL "    max_running: 1.5\n", ":8: tenants[0].max_running: expected an integer"},
    {MINIMAL "    max_concurrent: 99999999999999999999999\n", ":8: tenants[0].max_concurrent: expected an integer"},
    {"models:\n  - name: m\n    path: m.gguf\n    budget_min: 600\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].budget_min: budget_min 600 is larger than budget_max 512"},
    {"models:\n  - name: m\n    path: m.gguf\n    budget_min: 8\n    budget_max: 8\n    max_seqs: 33\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":6: models[0].max_seqs: max_seqs 33 is more than 4 x budget_max 8, which the scheduler refuses"},
    {"models:\n  - name: m\n    path: m.gguf\n    kv_cache_bytes: 0\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].kv_cache_bytes: expected a size in bytes"},
    {"models:\n  - name: m\n    path: m.gguf\n    swap_bytes: 12XB\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].swap_bytes: expected a size in bytes"},
    {"models:\n  - name: m\n    path: m.gguf\n    block_size: 0\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].block_size: expected an integer in 1..1024"},
    {"limits:\n  header_timeout_s: 0\n" MINIMAL, ":2: limits.header_timeout_s: expected an integer in 1..3600"},
    {"limits:\n  max_body_bytes: 2GiB\n" MINIMAL, ":2: limits.max_body_bytes: expected a size"},
    /* The reserve must leave anonymous clients at least one connection. */
    {"limits:\n  max_connections: 100\n  reserved_connections: 100\n" MINIMAL,
     ":3: limits.reserved_connections: expected an integer in 0..99"},
    {"limits:\n  reserved_connections: 2048\n" MINIMAL,
     ":2: limits.reserved_connections: expected an integer in 0..2047"},
    {"limits:\n  max_connections_per_ip: -1\n" MINIMAL, ":2: limits.max_connections_per_ip: expected an integer"},
    /* The metrics key is one holder's, like every other. */
    {"metrics_key_sha256: abc\n" MINIMAL, ":1: metrics_key_sha256: expected the SHA-256 of a key"},
    {"admin_key_sha256: " H_ADMIN "\nmetrics_key_sha256: " H_ADMIN "\n" MINIMAL,
     ":2: metrics_key_sha256: same key hash as admin_key_sha256"},
    {"metrics_key_sha256: " H_GOLD "\n" MINIMAL,
     ":8: tenants[0].key_sha256: same key hash as metrics_key_sha256"},
    /* Prices: a finite number in [0, CFG_PRICE_MAX], per model or as the
     * file's default. */
    {"models:\n  - name: m\n    path: m.gguf\n    price_per_hour: -1\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4:21: models[0].price_per_hour: expected a number in [0, 1e+09], got '-1'"},
    {"models:\n  - name: m\n    path: m.gguf\n    price_per_hour: .nan\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].price_per_hour: expected a number in [0, 1e+09], got '.nan'"},
    {"models:\n  - name: m\n    path: m.gguf\n    price_per_hour: 2e9\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":4: models[0].price_per_hour: expected a number in [0, 1e+09]"},
    {"models:\n  - {name: m, path: m.gguf, price_per_hour: [1]}\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":2: models[0].price_per_hour: expected a single value, not a list"},
    {"price_per_hour: cheap\n" MINIMAL, ":1:17: price_per_hour: expected a number in [0, 1e+09], got 'cheap'"},
    {"price_per_hour: .inf\n" MINIMAL, ":1: price_per_hour: expected a number"},
    {"price_per_hour: 1\nprice_per_hour: 2\n" MINIMAL, ":2: price_per_hour: repeated key (first at line 1)"},
    {"listen: 127.0.0.1:0\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: 127.0.0.1:65536\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: localhost\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: :8080\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: \"::1:8080\"\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: \"[::1]8080\"\n" MINIMAL, ":1: listen: expected host:port"},
    {"listen: 127.0.0.1:80x\n" MINIMAL, ":1: listen: expected host:port"},
    {"policy: lottery\n" MINIMAL, ":1: policy: unknown policy 'lottery' (fair, fcfs)"},
    /* Names. */
    {MINIMAL "  - name: a\n    tier: silver\n    key_sha256: " H_SILVER "\n",
     ":8: tenants[1].name: repeated tenant name 'a' (also tenants[0])"},
    {"models:\n  - {name: m, path: a.gguf}\n  - {name: m, path: b.gguf}\n"
     "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":3: models[1].name: repeated model name 'm' (also models[0])"},
    {"models:\n  - {name: m, path: m.gguf}\n"
     "tenants:\n  - name: team a\n    tier: gold\n    key_sha256: " H_GOLD "\n",
     ":4: tenants[0].name: bad name 'team a'"},
    {"models:\n  - {name: m, path: m.gguf}\n"
     "tenants:\n  - name: a-very-long-tenant-name-that-goes-past-the-limit-of-47\n"
     "    tier: gold\n    key_sha256: " H_GOLD "\n",
     ":4: tenants[0].name: bad name"},
    /* Key hashes. */
    {MINIMAL "  - name: b\n    tier: silver\n    key_sha256: " H_GOLD "\n",
     ":10: tenants[1].key_sha256: key hash already used by tenant 'a'"},
    {"models:\n  - {name: m, path: m.gguf}\n"
     "tenants:\n  - name: a\n    tier: gold\n    key_sha256:\n      - " H_GOLD "\n      - " H_GOLD "\n",
     ":8: tenants[0].key_sha256[1]: key hash already used by tenant 'a'"},
    {"admin_key_sha256: " H_GOLD "\n" MINIMAL,
     ":8: tenants[0].key_sha256: same key hash as admin_key_sha256"},
    {"models:\n  - {name: m, path: m.gguf}\n"
     "tenants:\n  - name: a\n    tier: gold\n    key_sha256: abc123\n",
     ":6: tenants[0].key_sha256: expected the SHA-256 of a key as 64 hex digits"},
    {"models:\n  - {name: m, path: m.gguf}\n"
     "tenants:\n  - name: a\n    tier: gold\n    key_sha256: []\n",
     ":6: tenants[0].key_sha256: expected at least one key hash"},
    {"admin_key_sha256: tsk-demo-admin\n" MINIMAL, ":1: admin_key_sha256: expected the SHA-256"},
    /* Missing and empty things. */
    {"tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":1: models: missing (at least one model is required)"},
    {"models:\n  - {name: m, path: m.gguf}\n", ":1: tenants: missing (at least one tenant is required)"},
    {"models: []\ntenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":1: models: expected a list of at least one model"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants: []\n",
     ":3: tenants: expected a list of at least one tenant"},
    {"models:\n  - {name: m}\ntenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":2: models[0].path: missing"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - name: a\n    key_sha256: " H_GOLD "\n",
     ":4: tenants[0].tier: missing (every tenant needs a tier)"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - name: a\n    tier: gold\n",
     ":4: tenants[0].key_sha256: missing (every tenant needs at least one key hash)"},
    /* A null value counts as absent (ydoc's one null rule). */
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - name: a\n    tier:\n    key_sha256: " H_GOLD "\n",
     ":4: tenants[0].tier: missing (every tenant needs a tier)"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants: Null\n", ":1: tenants: missing (at least one tenant is required)"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - {name: a, tier: gold, key_sha256: [~]}\n",
     ":4: tenants[0].key_sha256[0]: missing value"},
    {"---\n", ":1: empty configuration"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - name: [a]\n    tier: gold\n    key_sha256: " H_GOLD "\n",
     ":4: tenants[0].name: expected a single value, not a list"},
    {"models:\n  - {name: m, path: m.gguf}\ntenants:\n  - a\n", ":4: tenants[0]: expected a mapping"},
    {"- a\n- b\n", ":1: expected a mapping"},
    {"", ":1: empty configuration"},
    {"# only a comment\n", ":1: empty configuration"},
    /* Tiers. */
    {"tiers:\n  - {name: premium, band: 0}\n" MINIMAL, ":8: tenants[0].tier: unknown tier 'gold' (premium)"},
    {"tiers:\n  - {name: a, band: 0, min_share: 0.6}\n  - {name: b, band: 1, min_share: 0.6}\n" MINIMAL,
     ":2: tiers: min_share values add up to 1.2; at most 1"},
    {"tiers:\n  - {name: gold, band: 8}\n" MINIMAL, ":2: tiers[0].band: expected an integer in 0..7"},
    {"tiers:\n  - {name: gold, band: 0}\n  - {name: gold, band: 1}\n" MINIMAL,
     ":3: tiers[1].name: repeated tier name 'gold' (also tiers[0])"},
    {"tiers:\n  - {name: gold}\n" MINIMAL, ":2: tiers[0].band: missing"},
    {"tiers: []\n" MINIMAL, ":1: tiers: expected a list of 1 to 8 tiers"},
    /* YAML itself. */
    {"models:\n  - {name: m, path: m.gguf\ntenants: []\n", ":3: YAML syntax error"},
    {"models:\n  - name: m\n   path: x\n", ":3: YAML syntax error"},
    {"models: *nowhere\n", ":1: YAML syntax error"},
    {"models:\n  - {name: m, path: \"\"}\ntenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n",
     ":2: models[0].path: missing value"},
    {MINIMAL "---\n" MINIMAL, ":9: more than one YAML document"},
    {MINIMAL "--- [\n", ":9: YAML syntax error: did not find expected node content (while parsing a flow node)"},
    /* The fleet's Redis (limits.backend). */
    {"limits: {backend: memcached}\n" MINIMAL, ":1:19: limits.backend: unknown backend 'memcached' (local, redis)"},
    {"limits: {backend: redis}\n" MINIMAL, ":1:19: limits.redis_url: missing (backend redis needs redis_url)"},
    {"limits: {redis_url: redis://h}\n" MINIMAL, ":1:21: limits.redis_url: only with backend: redis"},
    {"limits: {backend: redis, redis_url: 'http://h:1'}\n" MINIMAL,
     ":1:37: limits.redis_url: expected redis://host[:port][/db] (redis://"},
    {"limits: {backend: redis, redis_url: 'redis://h:0'}\n" MINIMAL,
     ":1:37: limits.redis_url: expected a port in 1..65535 (redis://"},
    {"limits: {backend: redis, redis_url: 'rediss://h'}\n" MINIMAL,
     ":1:37: limits.redis_url: rediss:// (TLS) is not supported; use redis://"},
    {"limits: {backend: redis, redis_url: 'redis://h', redis_on_error: maybe}\n" MINIMAL,
     ":1:66: limits.redis_on_error: unknown mode 'maybe' (open, closed)"},
    {"limits: {backend: redis, redis_url: 'redis://h', redis_prefix: 'a b'}\n" MINIMAL,
     ":1:64: limits.redis_prefix: bad name 'a b' (1 to 63 characters: letters, digits and ._:-)"},
    {"limits: {backend: redis, redis_url: 'redis://h', redis_sync_ms: 2000}\n" MINIMAL,
     ":1:65: limits.redis_sync_ms: 2000 ms is more than a third of redis_lease_ms (3000)"},
    {"limits: {backend: redis, redis_url: 'redis://h', redis_timeout_ms: 2600}\n" MINIMAL,
     ":1:68: limits.redis_timeout_ms: 2600 ms is not less than redis_lease_ms - 2 * redis_sync_ms "
     "(3000 - 2 * 200 = 2600 ms)"},
    {"limits: {backend: redis, redis_url: 'redis://h', redis_timeout_ms: 200, redis_lease_ms: 600}\n" MINIMAL,
     ":1:68: limits.redis_timeout_ms: 200 ms is not less than redis_lease_ms - 2 * redis_sync_ms "
     "(600 - 2 * 200 = 200 ms)"},
    {"limits: {backend: redis, redis_url: 'redis://h'}\n" MINIMAL "    tokens_per_minute: 200000000\n",
     ":9:24: tenants[0].tokens_per_minute:"},
};

/* redis_url: what each form gives, and what is refused. */
static void test_redis_url(void **st) {
    (void)st;
    static const struct {
        const char *url;
        const char *host, *user, *password;
        unsigned port, db;
    } good[] = {
        {"redis://localhost", "localhost", "", "", 6379, 0},
        {"redis://10.0.0.7:6380/3", "10.0.0.7", "", "", 6380, 3},
        {"redis://:s3cret@r.example:7000", "r.example", "", "s3cret", 7000, 0},
        {"redis://app:p%40ss%3A@r/15", "r", "app", "p@ss:", 6379, 15},
        {"redis://[::1]:6390", "::1", "", "", 6390, 0},
        {"redis://[fe80::1]", "fe80::1", "", "", 6379, 0},
        {"redis://h/", "h", "", "", 6379, 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cfg_redis r;
        char why[128];
        memset(&r, 0, sizeof r);
        snprintf(r.prefix, sizeof r.prefix, "keep");
        if (cfg_redis_url_parse(good[i].url, &r, why, sizeof why)) fail_msg("%s: %s", good[i].url, why);
        assert_string_equal(r.host, good[i].host);
        assert_string_equal(r.user, good[i].user);
        assert_string_equal(r.password, good[i].password);
        assert_int_equal(r.port, good[i].port);
        assert_int_equal(r.db, good[i].db);
        assert_string_equal(r.prefix, "keep");   /* other fields untouched */
    }
    static const char *const bad[] = {
        "", "redis:/h", "redis://", "redis://:6379", "redis://h:", "redis://h:65536", "redis://h:-1",
        "redis://h:12x", "redis://h/16x", "redis://h/65536", "redis://h?db=1", "redis://h#x", "redis://[::1",
        "redis://[::1]x", "redis://h h", "redis://a:b:c", "redis://u@h", "redis://:p%4@h", "redis://:p%00@h",
        "redis://user:@h", "rediss://h", "unix:///tmp/r.sock", "REDIS://h",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg_redis r, before;
        char why[128] = "";
        memset(&r, 0x5a, sizeof r);
        before = r;
        if (cfg_redis_url_parse(bad[i], &r, why, sizeof why) != TS_ERR_CONFIG) fail_msg("accepted '%s'", bad[i]);
        assert_true(why[0] != 0);
        assert_memory_equal(&r, &before, sizeof r);   /* refused: unchanged */
    }
    assert_int_equal(cfg_redis_url_parse(NULL, NULL, NULL, 0), TS_ERR_CONFIG);
}

/* backend redis with every key, and the defaults when only the URL is given. */
static void test_redis_backend(void **st) {
    (void)st;
    char path[PATH_MAX], err[1024];
    cfg c;
    int rc = load_text("redis1.yaml", "limits: {backend: redis, redis_url: 'redis://r:6390/2'}\n" MINIMAL, &c, err,
                       sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.limits.backend, CFG_BACKEND_REDIS);
    assert_string_equal(c.limits.redis.host, "r");
    assert_int_equal(c.limits.redis.port, 6390);
    assert_int_equal(c.limits.redis.db, 2);
    assert_string_equal(c.limits.redis.prefix, "tessera");
    assert_int_equal(c.limits.redis.fail_closed, 0);
    assert_int_equal(c.limits.redis.timeout_ms, 100);
    assert_int_equal(c.limits.redis.lease_ms, 3000);
    assert_int_equal(c.limits.redis.sync_ms, 200);
    cfg_free(&c);
    rc = load_text("redis2.yaml",
                   "limits:\n  backend: redis\n  redis_url: redis://:pw@10.1.2.3\n  redis_prefix: fleet-b:prod\n"
                   "  redis_on_error: closed\n  redis_timeout_ms: 25\n  redis_lease_ms: 1500\n"
                   "  redis_sync_ms: 500\n" MINIMAL "    requests_per_minute: 150119987\n",
                   &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_string_equal(c.limits.redis.password, "pw");
    assert_string_equal(c.limits.redis.prefix, "fleet-b:prod");
    assert_int_equal(c.limits.redis.fail_closed, 1);
    assert_int_equal(c.limits.redis.timeout_ms, 25);
    assert_int_equal(c.limits.redis.lease_ms, 1500);
    assert_int_equal(c.limits.redis.sync_ms, 500);
    assert_int_equal(c.tenants[0].requests_per_minute, CFG_REDIS_MAX_RATE);
    cfg_free(&c);
    /* The local backend keeps the wide range. */
    rc = load_text("redis3.yaml", "limits: {backend: local}\n" MINIMAL "    tokens_per_minute: 200000000\n", &c, err,
                   sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.limits.backend, CFG_BACKEND_LOCAL);
    cfg_free(&c);
}

static void test_bad_configs(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        char path[PATH_MAX], err[1024], name[32];
        cfg c;
        memset(&c, 0xa5, sizeof c);   /* a failed load must zero it */
        snprintf(name, sizeof name, "bad%zu.yaml", i);
        int rc = load_text(name, bad_cases[i].yaml, &c, err, sizeof err, path, sizeof path);
        if (rc != TS_ERR_CONFIG || strncmp(err, path, strlen(path)) != 0 ||
            !msg_matches(err + strlen(path), bad_cases[i].want))
            fail_msg("case %zu: rc %d, message\n  %s\nwanted (with a column after the line)\n  %s%s", i, rc,
                     err, path, bad_cases[i].want);
        assert_true(is_zero(&c, sizeof c));
        /* A NULL message buffer changes nothing but the message. */
        rc = load_text(name, bad_cases[i].yaml, &c, NULL, 0, path, sizeof path);
        assert_int_equal(rc, TS_ERR_CONFIG);
    }
    /* Bad bytes: libyaml's reader gives a byte offset, not a mark, so the
     * message has the line and no column. */
    char path[PATH_MAX], err[1024], want[PATH_MAX + 128];
    cfg c;
    int rc = load_text("badbytes.yaml", "models:\n  - name: m\xff\n", &c, err, sizeof err, path, sizeof path);
    assert_int_equal(rc, TS_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:2: YAML error at byte 19: invalid leading UTF-8 octet", path);
    assert_string_equal(err, want);
    assert_true(is_zero(&c, sizeof c));
    /* The matcher itself: a bare line wants some column, a pinned one that one. */
    assert_true(msg_matches(":8:5: a: x", ":8: a: x"));
    assert_true(msg_matches(":8:5: a: x", ":8:5: a: x"));
    assert_false(msg_matches(":8: a: x", ":8: a: x"));
    assert_false(msg_matches(":8:6: a: x", ":8:5: a: x"));
    assert_false(msg_matches(":18:5: a: x", ":8: a: x"));
    assert_false(msg_matches(":8:5: b: x", ":8: a: x"));
}

static void test_unreadable(void **st) {
    (void)st;
    char path[PATH_MAX], err[PATH_MAX + 128];
    cfg c;
    tu_path(path, sizeof path, "does-not-exist.yaml");
    assert_int_equal(cfg_load(path, &c, err, sizeof err), TS_ERR_IO);
    assert_true(is_zero(&c, sizeof c));
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(cfg_load(NULL, &c, err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(cfg_load(path, NULL, err, sizeof err), TS_ERR_INVAL);
    /* A message cut to a small buffer stays terminated. */
    char tiny[8];
    assert_int_equal(cfg_load(path, &c, tiny, sizeof tiny), TS_ERR_IO);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

/* Every prefix of the demo file either loads or fails with a message that
 * starts with the file's name; under ASan this also shows that no cut, at
 * any byte, crashes or leaks. */
static void test_truncations(void **st) {
    (void)st;
    char root[PATH_MAX], demo[PATH_MAX + 32], path[PATH_MAX], err[1024];
    src_root(root, sizeof root);
    snprintf(demo, sizeof demo, "%sexamples/demo.yaml", root);
    size_t len;
    char *text = tu_read_file(demo, &len);
    assert_non_null(text);
    tu_path(path, sizeof path, "cut.yaml");
    int loaded = 0;
    for (size_t n = 0; n <= len; n++) {
        assert_int_equal(tu_write_file(path, text, n), 0);
        cfg c;
        int rc = cfg_load(path, &c, err, sizeof err);
        if (rc == 0) {
            loaded++;
            /* A cut after a whole tenant is a valid, shorter file. */
            assert_int_equal(c.n_models, 1);
            assert_true(c.n_tenants >= 1 && c.n_tenants <= 3);
            cfg_free(&c);
        } else {
            assert_int_equal(rc, TS_ERR_CONFIG);
            assert_true(is_zero(&c, sizeof c));
            if (strncmp(err, path, strlen(path)) != 0 || err[strlen(path)] != ':')
                fail_msg("cut at %zu: %s", n, err);
        }
    }
    unlink(path);
    free(text);
    /* At least the whole file and its cuts at the ends of lines after the
     * first tenant load. */
    assert_true(loaded >= 4);
}

/* ---- values ----------------------------------------------------------------- */

static void test_defaults(void **st) {
    (void)st;
    char path[PATH_MAX], err[512];
    cfg c;
    int rc = load_text("min.yaml", MINIMAL, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.policy, SCHED_POLICY_FAIR);
    assert_int_equal(c.limits.max_body_bytes, 1048576);
    assert_int_equal(c.limits.header_timeout_s, 10);
    assert_int_equal(c.limits.idle_timeout_s, 60);
    assert_int_equal(c.limits.max_connections, 2048);
    assert_int_equal(c.limits.max_connections_per_ip, 0);
    assert_int_equal(c.limits.reserved_connections, 256);
    assert_int_equal(c.limits.shutdown_grace_s, 10);
    assert_false(c.has_metrics);
    cfg_model *m = &c.models[0];
    assert_int_equal(m->kv_cache_bytes, 256u << 20);
    assert_int_equal(m->swap_bytes, 256u << 20);
    assert_int_equal(m->block_size, 16);
    assert_int_equal(m->max_seqs, 64);
    assert_int_equal(m->budget_min, 64);
    assert_int_equal(m->budget_max, 512);
    assert_int_equal(m->threads, 0);
    assert_true(m->price_per_hour == 0);    /* unknown */
    assert_true(c.price_per_hour == 0);
    assert_true(isnan(cfg_cost(m->price_per_hour, 1e6)));   /* an unknown price costs no number */
    /* Default tiers, as sched_tiers_default() adds them. */
    assert_int_equal(c.n_tiers, 3);
    assert_string_equal(c.tiers[0].name, "gold");
    assert_int_equal(c.tiers[0].band, 0);
    assert_int_equal(c.tiers[0].ttft_ms, 200);
    assert_string_equal(c.tiers[1].name, "silver");
    assert_int_equal(c.tiers[1].band, 1);
    assert_int_equal(c.tiers[1].ttft_ms, 500);
    assert_true(c.tiers[1].min_share == 0.10);
    assert_string_equal(c.tiers[2].name, "bronze");
    assert_int_equal(c.tiers[2].band, 2);
    assert_int_equal(c.tiers[2].ttft_ms, 0);
    assert_true(c.tiers[2].min_share == 0.05);
    assert_int_equal(c.tiers[2].max_queue_ms, 30000);
    cfg_tenant *t = &c.tenants[0];
    assert_true(t->sched.weight == 1.0);
    assert_int_equal(t->sched.max_kv_blocks, 0);
    assert_true(t->sched.max_kv_frac == 0);
    assert_int_equal(t->requests_per_minute, 0);
    assert_int_equal(t->max_concurrent, 0);
    assert_false(c.has_admin);
    cfg_free(&c);
}

/* A key whose value is null (empty, ~, null, Null, NULL) counts as absent:
 * the default stands. */
static void test_null_is_default(void **st) {
    (void)st;
    static const char text[] =
        "listen: ~\n"
        "policy:\n"
        "limits: Null\n"
        "tiers: NULL\n"
        "admin_key_sha256: null\n"
        "models:\n"
        "  - {name: m, path: m.gguf, kv_cache_bytes: ~, block_size: }\n"
        "tenants:\n"
        "  - {name: a, tier: gold, key_sha256: " H_GOLD ", weight: Null, max_queued: NULL}\n";
    char path[PATH_MAX], err[512];
    cfg c;
    int rc = load_text("nulls.yaml", text, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.policy, SCHED_POLICY_FAIR);
    assert_int_equal(c.limits.max_body_bytes, 1048576);
    assert_int_equal(c.n_tiers, 3);
    assert_false(c.has_admin);
    assert_int_equal(c.models[0].kv_cache_bytes, 256u << 20);
    assert_int_equal(c.models[0].block_size, 16);
    assert_true(c.tenants[0].sched.weight == 1.0);
    assert_int_equal(c.tenants[0].sched.max_queued, 0);
    cfg_free(&c);
}

/* price_per_hour: a model's own, else the file's default, else 0
 * (unknown); an explicit 0 on a model overrides the default; null counts
 * as absent. cfg_cost is engine seconds x price / 3600. */
static void test_prices(void **st) {
    (void)st;
    static const char text[] =
        "price_per_hour: 2.5\n"
        "models:\n"
        "  - {name: own, path: m.gguf, price_per_hour: 3.6}\n"
        "  - {name: inherits, path: m.gguf}\n"
        "  - {name: unknown, path: m.gguf, price_per_hour: 0}\n"
        "  - {name: nulled, path: m.gguf, price_per_hour: ~}\n"
        "  - {name: mig, path: m.gguf, price_per_hour: 1e-3}\n"
        "tenants:\n"
        "  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n";
    char path[PATH_MAX], err[512];
    cfg c;
    int rc = load_text("prices.yaml", text, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_true(c.price_per_hour == 2.5);
    assert_true(c.models[0].price_per_hour == 3.6);
    assert_true(c.models[1].price_per_hour == 2.5);
    assert_true(c.models[2].price_per_hour == 0);
    assert_true(c.models[3].price_per_hour == 2.5);
    assert_true(c.models[4].price_per_hour == 1e-3);
    /* 1000 s at 3.6 an hour is 1; an hour at 2.5 is 2.5. */
    assert_true(fabs(cfg_cost(c.models[0].price_per_hour, 1e9) - 1.0) < 1e-12);
    assert_true(fabs(cfg_cost(c.models[1].price_per_hour, 3.6e9) - 2.5) < 1e-12);
    assert_true(cfg_cost(c.models[1].price_per_hour, 0) == 0);
    assert_true(isnan(cfg_cost(c.models[2].price_per_hour, 3.6e9)));
    assert_true(isnan(cfg_cost(NAN, 1)));
    assert_true(isnan(cfg_cost(-1, 1)));
    cfg_free(&c);
    /* Without a top-level price a model's own still counts, others are unknown. */
    static const char text2[] =
        "models:\n"
        "  - {name: a, path: m.gguf}\n"
        "  - {name: b, path: m.gguf, price_per_hour: 12}\n"
        "tenants:\n"
        "  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n";
    rc = load_text("prices2.yaml", text2, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_true(c.models[0].price_per_hour == 0);
    assert_true(c.models[1].price_per_hour == 12);
    cfg_free(&c);
}

static void test_full_values(void **st) {
    (void)st;
    static const char text[] =
        "listen: \"[::1]:9000\"\n"
        "policy: fcfs\n"
        "limits: {max_body_bytes: 64KiB, header_timeout_s: 5, idle_timeout_s: 30,"
        " max_connections: 100, max_connections_per_ip: 8, reserved_connections: 99, shutdown_grace_s: 0}\n"
        "models:\n"
        "  - name: org/model:q8\n"
        "    path: /abs/model.gguf\n"
        "    kv_cache_bytes: 1GiB\n"
        "    swap_bytes: 0\n"
        "    block_size: 32\n"
        "    max_seqs: 8\n"
        "    budget_min: 16\n"
        "    budget_max: 16\n"
        "    threads: 4\n"
        "  - {name: second, path: s.gguf}\n"
        "tiers:\n"
        "  - {name: rt, band: 0, ttft_ms: 100, tpot_ms: 50, min_share: 0.5, max_queue_ms: 1000}\n"
        "  - {name: batch, band: 3, min_share: 0.5}\n"
        "tenants:\n"
        "  - name: x\n"
        "    tier: batch\n"
        "    weight: 2.5\n"
        "    key_sha256: [" H_GOLD ", " H_SILVER "]\n"
        "    max_kv_blocks: 1000\n"
        "    max_kv_fraction: 1\n"
        "    max_running: 3\n"
        "    max_queued: 4\n"
        "    requests_per_minute: 600\n"
        "    tokens_per_minute: 100000\n"
        "    max_concurrent: 2\n"
        "  - {name: y, tier: rt, key_sha256: '" H_BRONZE "'}\n"
        "admin_key_sha256: " H_ADMIN "\n"
        "metrics_key_sha256: " H_METRICS "\n";
    char path[PATH_MAX], err[512];
    cfg c;
    int rc = load_text("full.yaml", text, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_string_equal(c.host, "::1");
    assert_int_equal(c.port, 9000);
    assert_int_equal(c.policy, SCHED_POLICY_FCFS);
    assert_int_equal(c.limits.max_body_bytes, 65536);
    assert_int_equal(c.limits.header_timeout_s, 5);
    assert_int_equal(c.limits.idle_timeout_s, 30);
    assert_int_equal(c.limits.max_connections, 100);
    assert_int_equal(c.limits.max_connections_per_ip, 8);
    assert_int_equal(c.limits.reserved_connections, 99);
    assert_int_equal(c.limits.shutdown_grace_s, 0);
    assert_int_equal(c.n_models, 2);
    cfg_model *m = &c.models[0];
    assert_string_equal(m->name, "org/model:q8");
    assert_string_equal(m->path, "/abs/model.gguf");
    assert_int_equal(m->kv_cache_bytes, 1u << 30);
    assert_int_equal(m->swap_bytes, 0);
    assert_int_equal(m->block_size, 32);
    assert_int_equal(m->max_seqs, 8);
    assert_int_equal(m->budget_min, 16);
    assert_int_equal(m->budget_max, 16);
    assert_int_equal(m->threads, 4);
    assert_int_equal(cfg_model_find(&c, "second"), 1);
    assert_int_equal(c.n_tiers, 2);
    assert_string_equal(c.tiers[1].name, "batch");
    assert_int_equal(c.tiers[1].band, 3);
    assert_int_equal(c.tiers[0].tpot_ms, 50);
    assert_int_equal(c.tiers[0].max_queue_ms, 1000);
    assert_true(c.tiers[0].min_share == 0.5);
    cfg_tenant *t = &c.tenants[0];
    assert_int_equal(t->sched.tier, 1);
    assert_true(t->sched.weight == 2.5);
    assert_int_equal(t->n_keys, 2);
    assert_int_equal(t->sched.max_kv_blocks, 1000);
    assert_true(t->sched.max_kv_frac == 1.0);
    assert_int_equal(t->sched.max_running, 3);
    assert_int_equal(t->sched.max_queued, 4);
    assert_int_equal(t->requests_per_minute, 600);
    assert_int_equal(t->tokens_per_minute, 100000);
    assert_int_equal(t->max_concurrent, 2);
    assert_int_equal(c.tenants[1].sched.tier, 0);
    assert_true(c.has_admin);

    /* Both of x's keys map to x; y's to y. */
    auth_table *at;
    assert_int_equal(cfg_auth_table(&c, &at), 0);
    assert_int_equal(auth_table_size(at), 3);
    assert_int_equal(auth_lookup(at, "tsk-demo-gold", 13), 0);
    assert_int_equal(auth_lookup(at, "tsk-demo-silver", 15), 0);
    assert_int_equal(auth_lookup(at, "tsk-demo-bronze", 15), 1);
    assert_int_equal(auth_lookup(at, "tsk-demo-admin", 14), AUTH_ADMIN);
    assert_int_equal(auth_lookup(at, "tsk-demo-metrics", 16), AUTH_METRICS);
    auth_table_free(at);
    assert_true(c.has_metrics);
    cfg_free(&c);
}

/* The reserve's default follows max_connections when only that is given. */
static void test_reserve_default(void **st) {
    (void)st;
    char path[PATH_MAX], err[512];
    cfg c;
    int rc = load_text("resv.yaml", "limits: {max_connections: 80}\n" MINIMAL, &c, err, sizeof err, path,
                       sizeof path);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.limits.reserved_connections, 10);
    cfg_free(&c);
    rc = load_text("resv1.yaml", "limits: {max_connections: 1}\n" MINIMAL, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    assert_int_equal(c.limits.reserved_connections, 0);
    cfg_free(&c);
    assert_int_equal(cfg_default_reserve(2048), 256);
}

static void test_sizes(void **st) {
    (void)st;
    static const struct { const char *text; uint64_t bytes; } good[] = {
        {"1", 1},
        {"268435456", 268435456},
        {"256MiB", 256ull << 20},
        {"1GiB", 1ull << 30},
        {"512MB", 512000000},
        {"512 mb", 512000000},
        {"64kib", 64 << 10},
        {"3KB", 3000},
        {"7B", 7},
        {"2TiB", 2ull << 40},
        {"1TB", 1000000000000ull},
        {"\"2 GiB\"", 2ull << 30},
        {"16777215TiB", 16777215ull << 40},   /* the largest whole TiB in 64 bits */
    };
    static const char *const bad[] = {"12XB", "MiB", "-1", "1.5GiB", "0x10", "1 2",
                                      "99999999999999999999", "16777216TiB", "1 GiB extra", "0"};
    char text[512], path[PATH_MAX], err[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(text, sizeof text,
                 "models:\n  - {name: m, path: m.gguf, kv_cache_bytes: %s}\n"
                 "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n", good[i].text);
        cfg c;
        int rc = load_text("size.yaml", text, &c, err, sizeof err, path, sizeof path);
        if (rc) fail_msg("'%s': %s", good[i].text, err);
        if (c.models[0].kv_cache_bytes != good[i].bytes)
            fail_msg("'%s' gave %llu", good[i].text, (unsigned long long)c.models[0].kv_cache_bytes);
        cfg_free(&c);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text,
                 "models:\n  - {name: m, path: m.gguf, kv_cache_bytes: %s}\n"
                 "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n", bad[i]);
        cfg c;
        int rc = load_text("size.yaml", text, &c, err, sizeof err, path, sizeof path);
        /* "  - {name: m, path: m.gguf, kv_cache_bytes: " is 44 characters. */
        if (rc != TS_ERR_CONFIG || !strstr(err, ":2:45: models[0].kv_cache_bytes: expected a size"))
            fail_msg("'%s': rc %d, %s", bad[i], rc, err);
    }
}

static void test_relative_paths(void **st) {
    (void)st;
    static const char text[] =
        "models:\n"
        "  - {name: a, path: m.gguf}\n"
        "  - {name: b, path: ../up/m.gguf}\n"
        "  - {name: c, path: /abs/m.gguf}\n"
        "tenants:\n  - {name: a, tier: gold, key_sha256: " H_GOLD "}\n";
    char path[PATH_MAX], err[512], want[PATH_MAX + 32];
    cfg c;
    /* A config in a folder: paths resolve against that folder. */
    int rc = load_text("rel.yaml", text, &c, err, sizeof err, path, sizeof path);
    if (rc) fail_msg("%s", err);
    snprintf(want, sizeof want, "%s/m.gguf", tu_tmpdir());
    assert_string_equal(c.models[0].path, want);
    snprintf(want, sizeof want, "%s/../up/m.gguf", tu_tmpdir());
    assert_string_equal(c.models[1].path, want);
    assert_string_equal(c.models[2].path, "/abs/m.gguf");
    cfg_free(&c);

    /* A config named without a folder lives in the working directory, and
     * so do its relative paths. */
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    tu_path(path, sizeof path, "rel2.yaml");
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
    assert_int_equal(chdir(tu_tmpdir()), 0);
    rc = cfg_load(strrchr(path, '/') + 1, &c, err, sizeof err);
    assert_int_equal(chdir(cwd), 0);
    unlink(path);
    if (rc) fail_msg("%s", err);
    assert_string_equal(c.models[0].path, "m.gguf");
    assert_string_equal(c.models[1].path, "../up/m.gguf");
    cfg_free(&c);
}

/* ---- the single-model configuration ----------------------------------------- */

static void test_single_model(void **st) {
    (void)st;
    cfg c;
    assert_int_equal(cfg_single_model(&c, "models/demo-15m.gguf", H_GOLD), 0);
    assert_int_equal(c.n_models, 1);
    assert_string_equal(c.models[0].name, "demo-15m");
    assert_string_equal(c.models[0].path, "models/demo-15m.gguf");
    assert_int_equal(c.models[0].kv_cache_bytes, 256u << 20);
    assert_int_equal(c.models[0].block_size, 16);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.n_tiers, 3);
    assert_int_equal(c.n_tenants, 1);
    assert_string_equal(c.tenants[0].sched.name, "default");
    assert_string_equal(c.tiers[c.tenants[0].sched.tier].name, "gold");
    assert_true(c.tenants[0].sched.weight == 1.0);
    assert_false(c.has_admin);
    auth_table *at;
    assert_int_equal(cfg_auth_table(&c, &at), 0);
    assert_int_equal(auth_lookup(at, "tsk-demo-gold", 13), 0);
    assert_int_equal(auth_lookup(at, "tsk-demo-silver", 15), AUTH_NONE);
    auth_table_free(at);
    cfg_free(&c);

    /* Stems: only the last extension goes; odd characters become '-'. */
    assert_int_equal(cfg_single_model(&c, "/srv/my model.v2.gguf", H_GOLD), 0);
    assert_string_equal(c.models[0].name, "my-model.v2");
    cfg_free(&c);
    assert_int_equal(cfg_single_model(&c, "plain", H_GOLD), 0);
    assert_string_equal(c.models[0].name, "plain");
    cfg_free(&c);
    assert_int_equal(cfg_single_model(&c, "dir/.gguf", H_GOLD), 0);
    assert_string_equal(c.models[0].name, ".gguf");
    cfg_free(&c);
    assert_int_equal(cfg_single_model(&c, "dir/", H_GOLD), 0);
    assert_string_equal(c.models[0].name, "model");
    cfg_free(&c);
    char longp[128];
    memset(longp, 'x', 100);
    memcpy(longp + 100, ".gguf", 6);
    assert_int_equal(cfg_single_model(&c, longp, H_GOLD), 0);
    assert_int_equal(strlen(c.models[0].name), SCHED_NAME_MAX - 1);
    cfg_free(&c);

    /* Bad arguments leave it zeroed. */
    memset(&c, 0xa5, sizeof c);
    assert_int_equal(cfg_single_model(&c, "m.gguf", "not-hex"), TS_ERR_INVAL);
    assert_true(is_zero(&c, sizeof c));
    assert_int_equal(cfg_single_model(&c, "m.gguf", H_GOLD "00"), TS_ERR_INVAL);
    assert_int_equal(cfg_single_model(&c, "m.gguf", NULL), TS_ERR_INVAL);
    assert_int_equal(cfg_single_model(&c, "", H_GOLD), TS_ERR_INVAL);
    assert_int_equal(cfg_single_model(&c, NULL, H_GOLD), TS_ERR_INVAL);
    assert_true(is_zero(&c, sizeof c));
    assert_int_equal(cfg_single_model(NULL, "m.gguf", H_GOLD), TS_ERR_INVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_unreadable),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_null_is_default),
        cmocka_unit_test(test_prices),
        cmocka_unit_test(test_full_values),
        cmocka_unit_test(test_reserve_default),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_single_model),
        cmocka_unit_test(test_redis_url),
        cmocka_unit_test(test_redis_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
