/* test_bench_scenario.c - unit tests of bench scenario files
 * (src/bench/scenario.c): a full scenario read back field by field, the
 * defaults, every validation error with the line, column and field it
 * names, trace CSV parsing and its errors, durations, and loading from files
 * with a relative trace path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/scenario.h"
#include "err.h"
#include "file.h"
#include "testutil.h"

static const char FULL[] =
    "name: iso\n"
    "model: demo\n"
    "api: chat\n"
    "duration: 1.5m\n"
    "drain: 500ms\n"
    "temperature: 0.7\n"
    "token_ids: {min: 5, max: 50}\n"
    "service: {input_weight: 1, output_weight: 3}\n"
    "max_in_flight: 77\n"
    "tenants:\n"
    "  - name: victim\n"
    "    key: tsk-a\n"
    "    weight: 2\n"
    "    arrival: {process: gamma, rate: 2.5, cv: 3}\n"
    "    prompt_tokens: {dist: lognormal, mean: 64, cv: 0.5, min: 8, max: 512}\n"
    "    output_tokens: {dist: uniform, min: 16, max: 32}\n"
    "    slo: {ttft_ms: 250, tpot_ms: 40}\n"
    "    start: 1s\n"
    "    stop: 20s\n"
    "  - name: aggressor\n"
    "    key: tsk-b\n"
    "    arrival: {process: poisson, rate: 40}\n"
    "    prompt_tokens: {dist: fixed, value: 128}\n"
    "    output_tokens: {dist: fixed, value: 64}\n";

static void test_full(void **state) {
    (void)state;
    scn s;
    char err[512];
    int rc = scn_parse(FULL, strlen(FULL), "iso.yaml", ".", &s, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_string_equal(s.name, "iso");
    assert_string_equal(s.model, "demo");
    assert_int_equal(s.chat, 1);
    assert_true(s.duration_s == 90);
    assert_true(s.drain_s == 0.5);
    assert_true(s.temperature == 0.7);
    assert_int_equal(s.token_min, 5);
    assert_int_equal(s.token_max, 50);
    assert_true(s.w_in == 1 && s.w_out == 3);
    assert_int_equal(s.max_in_flight, 77);
    assert_int_equal(s.n_tenants, 2);
    const scn_tenant *v = &s.tenants[0], *a = &s.tenants[1];
    assert_string_equal(v->name, "victim");
    assert_string_equal(v->key, "tsk-a");
    assert_true(v->weight == 2);
    assert_int_equal(v->arrival.process, SCN_ARR_GAMMA);
    assert_true(v->arrival.rate == 2.5 && v->arrival.cv == 3);
    assert_int_equal(v->prompt.dist, SCN_LEN_LOGNORMAL);
    assert_true(v->prompt.mean == 64 && v->prompt.cv == 0.5);
    assert_int_equal(v->prompt.min, 8);
    assert_int_equal(v->prompt.max, 512);
    assert_int_equal(v->output.dist, SCN_LEN_UNIFORM);
    assert_int_equal(v->output.min, 16);
    assert_int_equal(v->output.max, 32);
    assert_true(v->ttft_ms == 250 && v->tpot_ms == 40);
    assert_true(v->start_s == 1 && v->stop_s == 20);
    assert_true(a->weight == 1);
    assert_int_equal(a->arrival.process, SCN_ARR_POISSON);
    assert_true(a->arrival.cv == 1);
    assert_int_equal(a->prompt.dist, SCN_LEN_FIXED);
    assert_int_equal(a->prompt.value, 128);
    assert_int_equal(a->prompt.min, 128);
    assert_int_equal(a->prompt.max, 128);
    assert_true(a->ttft_ms == 0 && a->tpot_ms == 0);
    assert_null(s.trace);
    scn_free(&s);
    scn_free(&s);   /* twice is harmless */
}

static void test_defaults(void **state) {
    (void)state;
    static const char y[] =
        "model: m\n"
        "tenants:\n"
        "  - {name: t, key: k, arrival: {process: constant, rate: 1},\n"
        "     prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";
    scn s;
    char err[256];
    assert_int_equal(scn_parse(y, strlen(y), "dir/some.name.yaml", NULL, &s, err, sizeof err), 0);
    assert_string_equal(s.name, "some");   /* from the file name */
    assert_int_equal(s.chat, 0);
    assert_true(s.duration_s == 0);
    assert_true(s.drain_s == 30);
    assert_true(s.temperature == 0);
    assert_true(s.w_in == 1 && s.w_out == 2);   /* tessera's own charges */
    assert_int_equal(s.max_in_flight, 4000);
    assert_int_equal(s.token_min, 100);
    assert_int_equal(s.token_max, 9999);
    assert_true(s.tenants[0].arrival.cv == 0);
    scn_free(&s);
}

/* A base tenant list for the error cases; TEN(x) splices x into tenant 0. */
#define HEAD "model: m\ntenants:\n  - name: a\n    key: k\n"
#define ARR "    arrival: {process: poisson, rate: 1}\n"
#define LENS "    prompt_tokens: {dist: fixed, value: 4}\n    output_tokens: {dist: fixed, value: 4}\n"

/* want: a substring of the message. Where it names the place, it is
 * file:line:column, both 1-based: a missing key is reported at its mapping
 * (the first key, or the '{'), an unknown or repeated key at the key, a bad
 * value at the value, a syntax error at libyaml's problem mark (2:1 for a
 * flow list still open at the end of the input). */
typedef struct bad_case {
    const char *yaml;
    const char *want;
} bad_case;

static void test_errors(void **state) {
    (void)state;
    static const bad_case cases[] = {
        {"tenants: []\n", "t.yaml:1:1: model: required"},
        {"model: m\n", "tenants: required"},
        {"model: m\ntenant: []\n", "t.yaml:2:1: tenant: unknown key (expected one of: name, model"},
        {"model: m\ntenants: {a: 1}\n", "t.yaml:2:10: tenants: expected a list"},
        {"model: m\ntenants: []\n", "expected 1 to 64 tenants, got 0"},
        {"model: m\nmodel: n\ntenants: []\n", "t.yaml:2:1: model: repeated key"},
        {"model: m\napi: grpc\n" "tenants: []\n", "t.yaml:2:6: api: unknown api 'grpc' (completions, chat)"},
        {"model: \"a b\"\ntenants: []\n", "model: may not contain spaces"},
        {"model: m\ntenants:\n  - key: k\n" ARR LENS, "tenants[0].name: required"},
        {"model: m\ntenants:\n  - name: a\n" ARR LENS, "t.yaml:3:5: tenants[0].key: required"},
        {HEAD "    key2: x\n" ARR LENS, "t.yaml:5:5: tenants[0].key2: unknown key"},
        /* "    arrival: {process: " is 23 characters. */
        {HEAD "    arrival: {process: pareto, rate: 1}\n" LENS, "t.yaml:5:24: tenants[0].arrival.process: unknown process 'pareto'"},
        {HEAD "    arrival: {process: gamma, rate: 1}\n" LENS, "tenants[0].arrival.cv: required for a gamma process"},
        {HEAD "    arrival: {process: poisson, rate: 1, cv: 2}\n" LENS, "tenants[0].arrival.cv: only a gamma process takes a cv"},
        {HEAD "    arrival: {process: poisson, rate: 0}\n" LENS, "tenants[0].arrival.rate: expected a number in [1e-06, 1e+06]"},
        {HEAD "    arrival: {process: poisson, rate: fast}\n" LENS, "got 'fast'"},
        {HEAD "    arrival: {process: poisson}\n" LENS, "tenants[0].arrival.rate: required"},
        {HEAD ARR "    output_tokens: {dist: fixed, value: 4}\n", "tenants[0].prompt_tokens: required with an arrival process"},
        {HEAD ARR "    prompt_tokens: {dist: uniform, min: 9, max: 3}\n    output_tokens: {dist: fixed, value: 4}\n",
         "tenants[0].prompt_tokens: min (9) is above max (3)"},
        {HEAD ARR "    prompt_tokens: {dist: fixed, value: 4, min: 2}\n    output_tokens: {dist: fixed, value: 4}\n",
         "tenants[0].prompt_tokens.min: not a parameter of dist fixed"},
        {HEAD ARR "    prompt_tokens: {dist: uniform, min: 2}\n    output_tokens: {dist: fixed, value: 4}\n",
         "tenants[0].prompt_tokens.max: required for dist uniform"},
        {HEAD ARR "    prompt_tokens: {dist: lognormal, mean: 900, cv: 1, max: 100}\n    output_tokens: {dist: fixed, value: 4}\n",
         "mean 900 lies outside min..max (1..100)"},
        {HEAD ARR "    prompt_tokens: {dist: fixed, value: 0}\n    output_tokens: {dist: fixed, value: 4}\n",
         "prompt_tokens.value: expected an integer in 1..1000000, got '0'"},
        {HEAD ARR LENS "    start: 10 parsecs\n", "tenants[0].start: expected a duration"},
        {HEAD ARR LENS "    start: 10s\n    stop: 5s\n", "tenants[0].stop: must come after start"},
        {HEAD ARR LENS "    slo: {ttft: 5}\n", "tenants[0].slo.ttft: unknown key"},
        {HEAD ARR LENS "  - name: a\n    key: k\n" ARR LENS, "t.yaml:8:5: tenants[1]: tenant name 'a' repeated"},
        {HEAD, "a tenant without an arrival process needs a trace file"},
        {"model: m\ntrace: x.csv\ntenants:\n  - name: a\n    key: k\n" ARR LENS, "trace: every tenant has an arrival process"},
        {HEAD "    prompt_tokens: {dist: fixed, value: 4}\n", "lengths come from the trace"},
        {"model: m\nduration: -3s\n" "tenants: []\n", "duration: expected a duration"},
        {"model: m\ntoken_ids: {min: 9, max: 1}\ntenants: []\n", "token_ids: min is above max"},
        {"model: [m\n", "t.yaml:2:1: YAML syntax error"},
        {"", "the file is empty"},
        {"model: m\ntenants:\n  - name: a\n    key: \"k k\"\n" ARR LENS, "tenants[0].key: may not contain spaces"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scn s;
        char err[512] = "";
        int rc = scn_parse(cases[i].yaml, strlen(cases[i].yaml), "t.yaml", ".", &s, err, sizeof err);
        if (rc != TS_ERR_SCENARIO || !strstr(err, cases[i].want))
            fail_msg("case %zu: rc %d, message '%s', wanted '%s'", i, rc, err, cases[i].want);
        assert_null(s.tenants);   /* nothing left allocated */
        assert_int_equal(s.n_tenants, 0);
    }
}

/* Rules shared through util/ydoc.h: one document per file, and every YAML
 * null (empty, ~, null, Null, NULL) is an absent key whose default stands. */
static void test_ydoc_rules(void **state) {
    (void)state;
    static const char two[] = "model: m\ntenants:\n  - name: a\n    key: k\n" ARR LENS "---\nmodel: n\n";
    scn s;
    char err[512];
    assert_int_equal(scn_parse(two, strlen(two), "t.yaml", ".", &s, err, sizeof err), TS_ERR_SCENARIO);
    assert_string_equal(err, "t.yaml:9:1: more than one YAML document (--- separates documents)");
    assert_null(s.tenants);
    static const char nulls[] =
        "name: Null\nmodel: m\napi: NULL\nduration: ~\ndrain: null\ntemperature:\n"
        "token_ids: Null\nservice: ~\nmax_in_flight: NULL\ntrace: Null\n"
        "tenants:\n  - name: a\n    key: k\n    weight: Null\n    slo: ~\n    start: NULL\n"
        "    arrival: {process: poisson, rate: 1, cv: Null}\n"
        "    prompt_tokens: {dist: fixed, value: 4, min: ~}\n    output_tokens: {dist: fixed, value: 4}\n";
    if (scn_parse(nulls, strlen(nulls), "dir/n.yaml", ".", &s, err, sizeof err)) fail_msg("%s", err);
    assert_string_equal(s.name, "n");
    assert_int_equal(s.chat, 0);
    assert_true(s.duration_s == 0 && s.drain_s == 30 && s.temperature == 0);
    assert_true(s.token_min == 100 && s.token_max == 9999 && s.w_in == 1 && s.w_out == 2);
    assert_int_equal(s.max_in_flight, 4000);
    assert_string_equal(s.trace_path, "");
    assert_true(s.tenants[0].weight == 1 && s.tenants[0].arrival.cv == 1 && s.tenants[0].start_s == 0);
    scn_free(&s);
    /* A required key that is null is missing. */
    static const char no_model[] = "model: ~\ntenants: []\n";
    assert_int_equal(scn_parse(no_model, strlen(no_model), "t.yaml", ".", &s, err, sizeof err), TS_ERR_SCENARIO);
    assert_string_equal(err, "t.yaml:1:1: model: required (the model name requests ask for)");
    /* Quoted, null is text. */
    static const char quoted[] = "model: m\napi: \"null\"\ntenants: []\n";
    assert_int_equal(scn_parse(quoted, strlen(quoted), "t.yaml", ".", &s, err, sizeof err), TS_ERR_SCENARIO);
    assert_string_equal(err, "t.yaml:2:6: api: unknown api 'null' (completions, chat)");
}

static void test_durations(void **state) {
    (void)state;
    double v;
    assert_int_equal(scn_duration_parse("30s", &v), 0);
    assert_true(v == 30);
    assert_int_equal(scn_duration_parse("12.5", &v), 0);
    assert_true(v == 12.5);
    assert_int_equal(scn_duration_parse("250ms", &v), 0);
    assert_true(v == 0.25);
    assert_int_equal(scn_duration_parse("2m", &v), 0);
    assert_true(v == 120);
    assert_int_equal(scn_duration_parse("1h", &v), 0);
    assert_true(v == 3600);
    assert_int_equal(scn_duration_parse("", &v), -1);
    assert_int_equal(scn_duration_parse("s", &v), -1);
    assert_int_equal(scn_duration_parse("-1s", &v), -1);
    assert_int_equal(scn_duration_parse("5 days", &v), -1);
    assert_int_equal(scn_duration_parse("nan", &v), -1);
    assert_int_equal(scn_duration_parse("inf", &v), -1);
}

static const char TRACED[] =
    "model: m\ntrace: t.csv\ntenants:\n"
    "  - {name: a, key: ka}\n"
    "  - {name: b, key: kb}\n"
    "  - {name: c, key: kc, arrival: {process: poisson, rate: 1},"
    " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";

static void test_trace(void **state) {
    (void)state;
    scn s;
    char err[512];
    assert_int_equal(scn_parse(TRACED, strlen(TRACED), "s.yaml", "/data", &s, err, sizeof err), 0);
    assert_string_equal(s.trace_path, "/data/t.csv");
    static const char csv[] =
        "timestamp_s,tenant,prompt_tokens,output_tokens\r\n"
        "# a comment\n"
        "2.5,b,10,20\n"
        "0.5,a,1,2\n"
        "\n"
        "2.5,a,3,4\n"
        "1,b,5,6";   /* no final newline */
    assert_int_equal(scn_trace_parse(&s, csv, strlen(csv), "t.csv", err, sizeof err), 0);
    assert_int_equal(s.n_trace, 4);
    /* Sorted by time; the two rows at 2.5 keep their order in the file. */
    assert_true(s.trace[0].t_s == 0.5 && s.trace[0].tenant == 0);
    assert_true(s.trace[1].t_s == 1 && s.trace[1].tenant == 1 && s.trace[1].output_tokens == 6);
    assert_true(s.trace[2].t_s == 2.5 && s.trace[2].tenant == 1 && s.trace[2].prompt_tokens == 10);
    assert_true(s.trace[3].t_s == 2.5 && s.trace[3].tenant == 0 && s.trace[3].prompt_tokens == 3);

    static const bad_case bad[] = {
        {"t_s,tenant,p,o\n0,a,1,1\n", "t.csv:1: expected the header"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n0,a,1\n", "t.csv:2: expected 4 fields, got 3"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n0,a,1,1,1\n", "expected 4 fields, got 5"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n0,z,1,1\n", "t.csv:2: tenant 'z' is not in the scenario"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n0,c,1,1\n", "tenant 'c' has an arrival process"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n-1,a,1,1\n", "timestamp_s '-1' is not a time"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n1,a,0,1\n", "prompt_tokens '0' is not an integer"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n1,a,1,x\n", "output_tokens 'x' is not an integer"},
        {"timestamp_s,tenant,prompt_tokens,output_tokens\n1,a,1,1\n", "tenant 'b' has no arrival process and no rows"},
        {"", "empty: no header line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char e[512] = "";
        int rc = scn_trace_parse(&s, bad[i].yaml, strlen(bad[i].yaml), "t.csv", e, sizeof e);
        if (rc != TS_ERR_SCENARIO || !strstr(e, bad[i].want))
            fail_msg("trace case %zu: rc %d, message '%s', wanted '%s'", i, rc, e, bad[i].want);
        assert_int_equal(s.n_trace, 4);   /* unchanged */
    }
    scn_free(&s);
}

static void test_load_files(void **state) {
    (void)state;
    char ypath[512], cpath[512], err[512];
    tu_path(ypath, sizeof ypath, "scn.yaml");
    tu_path(cpath, sizeof cpath, "t.csv");
    /* The trace is named relative to the scenario's folder. */
    const char *base = strrchr(cpath, '/') + 1;
    char y[1024];
    snprintf(y, sizeof y, "model: m\ntrace: %s\ntenants:\n  - {name: a, key: ka}\n  - {name: b, key: kb}\n", base);
    assert_int_equal(tu_write_file(ypath, y, strlen(y)), 0);
    static const char csv[] = "timestamp_s,tenant,prompt_tokens,output_tokens\n0.1,a,1,2\n0.2,b,3,4\n";
    assert_int_equal(tu_write_file(cpath, csv, strlen(csv)), 0);
    scn s;
    assert_int_equal(scn_load(ypath, &s, err, sizeof err), 0);
    assert_int_equal(s.n_trace, 2);
    assert_int_equal(s.trace[1].tenant, 1);
    scn_free(&s);
    remove(cpath);
    assert_int_equal(scn_load(ypath, &s, err, sizeof err), TS_ERR_IO);
    assert_non_null(strstr(err, cpath));
    assert_non_null(strstr(err, "No such file"));
    /* A FIFO as the trace is refused at once, never opened. */
    assert_int_equal(mkfifo(cpath, 0600), 0);
    assert_int_equal(scn_load(ypath, &s, err, sizeof err), TS_ERR_IO);
    assert_non_null(strstr(err, "not a regular file (fifo)"));
    remove(cpath);
    assert_null(s.tenants);
    remove(ypath);
    assert_int_equal(scn_load(ypath, &s, err, sizeof err), TS_ERR_IO);
    assert_non_null(strstr(err, "No such file"));
}

/* ---- trace formats, options, streaming ------------------------------------- */

/* tests/data/traces/<name>, absolute: found from this file's own path
 * (CMake passes it to the compiler in full; a relative one is taken from
 * the current folder). */
static const char *data_path(char *buf, size_t cap, const char *name) {
    const char *slash = strrchr(__FILE__, '/');
    int dl = slash ? (int)(slash - __FILE__) : 1;
    char rel[PATH_MAX], abs_path[PATH_MAX];
    snprintf(rel, sizeof rel, "%.*s/data/traces/%s", dl, slash ? __FILE__ : ".", name);
    const char *p = realpath(rel, abs_path) ? abs_path : rel;
    if (strlen(p) >= cap) fail_msg("path too long: %s", p);
    memcpy(buf, p, strlen(p) + 1);
    return buf;
}

/* Two trace tenants (acme weight 1, globex weight 3) and one with a
 * process. */
static const char MAPPED[] =
    "model: m\ntrace: t.csv\ntenants:\n"
    "  - {name: acme, key: ka}\n"
    "  - {name: globex, key: kg, weight: 3}\n"
    "  - {name: solo, key: ks, arrival: {process: poisson, rate: 1},"
    " prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";

static void parse_mapped(scn *s, const scn_opts *o) {
    char err[512];
    if (scn_parse(MAPPED, strlen(MAPPED), "m.yaml", ".", s, err, sizeof err)) fail_msg("%s", err);
    if (scn_opts_apply(s, o, err, sizeof err)) fail_msg("%s", err);
}

static int near_s(double a, double b) { return fabs(a - b) < 1e-9; }

static void test_trace_azure(void **state) {
    (void)state;
    scn s;
    char path[1024], err[512];
    parse_mapped(&s, NULL);
    /* 2023: seven fractional digits; no tenant column, so round-robin. */
    if (scn_trace_load(&s, data_path(path, sizeof path, "azure_2023.csv"), err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.trace_format, SCN_TRACE_AZURE);
    assert_string_equal(scn_trace_format_name(s.trace_format), "Azure");
    assert_int_equal(s.n_trace, 5);
    assert_int_equal(s.trace_stats.rows, 6);
    assert_int_equal(s.trace_stats.zero, 1);        /* ContextTokens 0 */
    assert_int_equal(s.trace_stats.used, 5);
    static const double t[] = {0, 4.314579, 4.822473, 6.040124, 8.7304950};
    for (size_t i = 0; i < 5; i++) {
        if (!near_s(s.trace[i].t_s, t[i])) fail_msg("row %zu: t %.9f, want %.9f", i, s.trace[i].t_s, t[i]);
        assert_int_equal(s.trace[i].tenant, (int)(i % 2));
    }
    assert_int_equal(s.trace[0].prompt_tokens, 374);
    assert_int_equal(s.trace[0].output_tokens, 44);
    assert_int_equal(s.trace[4].prompt_tokens, 1848);
    /* 2024: six digits and a +00:00 offset. */
    if (scn_trace_load(&s, data_path(path, sizeof path, "azure_2024.csv"), err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.n_trace, 4);
    assert_true(near_s(s.trace[1].t_s, 0.48762) && near_s(s.trace[3].t_s, 2.92111));
    assert_int_equal(s.trace[3].output_tokens, 241);
    scn_free(&s);
}

static void test_trace_burstgpt(void **state) {
    (void)state;
    scn s;
    char path[1024], err[512];
    scn_opts o = {.tenant_map = "ChatGPT=acme,GPT-4=globex"};
    parse_mapped(&s, &o);
    if (scn_trace_load(&s, data_path(path, sizeof path, "burstgpt.csv"), err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.trace_format, SCN_TRACE_BURSTGPT);
    assert_int_equal(s.n_trace, 5);
    assert_int_equal(s.trace_stats.zero, 1);        /* the failed request: Response tokens 0 */
    static const double t[] = {5, 45, 118, 124, 135.5};
    static const int who[] = {0, 0, 1, 0, 1};
    for (size_t i = 0; i < 5; i++) {
        assert_true(s.trace[i].t_s == t[i]);
        assert_int_equal(s.trace[i].tenant, who[i]);
    }
    assert_int_equal(s.trace[4].prompt_tokens, 1502);
    assert_int_equal(s.trace[4].output_tokens, 388);
    /* Unmapped: the error names the line and the name. */
    o.tenant_map = "ChatGPT=acme";
    scn_free(&s);
    parse_mapped(&s, &o);
    assert_int_equal(scn_trace_load(&s, path, err, sizeof err), TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "burstgpt.csv:4: tenant 'GPT-4' is not in the scenario"));
    /* *=- drops the rest and counts them; GPT-4=- alone drops GPT-4. */
    o.tenant_map = "ChatGPT=acme,*=-";
    scn_free(&s);
    parse_mapped(&s, &o);
    assert_int_equal(scn_trace_load(&s, path, err, sizeof err), TS_ERR_SCENARIO);   /* globex gets no rows */
    assert_non_null(strstr(err, "tenant 'globex' has no arrival process and no rows"));
    o.tenant_map = "*=globex,ChatGPT=-";
    scn_free(&s);
    parse_mapped(&s, &o);
    s.tenants[0].arrival = (scn_arrival){SCN_ARR_CONSTANT, 1, 0};   /* acme needs no rows now */
    if (scn_trace_load(&s, path, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.n_trace, 2);
    assert_int_equal(s.trace_stats.dropped, 3);
    assert_int_equal(s.trace[0].tenant, 1);
    scn_free(&s);
}

static void test_trace_own_format_file(void **state) {
    (void)state;
    scn s;
    char path[1024], err[512];
    parse_mapped(&s, NULL);
    if (scn_trace_load(&s, data_path(path, sizeof path, "tessera.csv"), err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.trace_format, SCN_TRACE_TESSERA);
    assert_int_equal(s.n_trace, 4);
    assert_true(s.trace[2].t_s == 1.5 && s.trace[2].tenant == 0 && s.trace[2].prompt_tokens == 32);
    scn_free(&s);
}

static void test_trace_options(void **state) {
    (void)state;
    scn s;
    char err[512];
    parse_mapped(&s, NULL);
    static const struct {
        scn_opts o;
        const char *want;
    } bad[] = {
        {{.tenant_map = "ChatGPT=zz"}, "tenant_map: 'ChatGPT=zz': no tenant 'zz' in the scenario"},
        {{.tenant_map = "ChatGPT=solo"}, "tenant 'solo' has an arrival process"},
        {{.tenant_map = "ChatGPT"}, "tenant_map: 'ChatGPT' is not from=to"},
        {{.tenant_map = "=acme"}, "is not from=to"},
        {{.tenant_map = "a=acme,,b=acme"}, "an empty entry"},
        {{.tenant_map = "a=acme,a=globex"}, "'a' mapped twice"},
        {{.tenant_map = "*=acme,*=-"}, "* given twice"},
        {{.time_scale = -1}, "time_scale: -1 is not a factor"},
        {{.load = 1e9}, "load: 1e+09 is not a factor"},
        {{.assign = (scn_assign)7}, "assign: 7 is not a rule"},
    };
    s.feed.time_scale = 2;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = scn_opts_apply(&s, &bad[i].o, err, sizeof err);
        if (rc != TS_ERR_SCENARIO || !strstr(err, bad[i].want))
            fail_msg("option case %zu: rc %d, message '%s', wanted '%s'", i, rc, err, bad[i].want);
        assert_true(s.feed.time_scale == 2);   /* unchanged */
    }
    scn_free(&s);

    /* The command-line form. */
    scn_opts o = {0};
    assert_int_equal(scn_opts_arg(&o, "load", "2", err, sizeof err), 0);
    assert_int_equal(scn_opts_arg(&o, "time-scale", "0.5", err, sizeof err), 0);
    assert_int_equal(scn_opts_arg(&o, "tenant-map", "a=b", err, sizeof err), 0);
    assert_int_equal(scn_opts_arg(&o, "assign", "weighted", err, sizeof err), 0);
    assert_int_equal(scn_opts_arg(&o, "stream", NULL, err, sizeof err), 0);
    assert_true(o.load == 2 && o.time_scale == 0.5 && !strcmp(o.tenant_map, "a=b"));
    assert_true(o.assign == SCN_ASSIGN_WEIGHTED && o.stream == 1);
    assert_int_equal(scn_opts_arg(&o, "load", "0", err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "--load wants a factor"));
    assert_int_equal(scn_opts_arg(&o, "time-scale", "2x", err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(scn_opts_arg(&o, "assign", "random", err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "--assign wants column, round-robin or weighted, got 'random'"));
    assert_int_equal(scn_opts_arg(&o, "speed", "1", err, sizeof err), TS_ERR_INVAL);
}

static void test_trace_assign(void **state) {
    (void)state;
    /* 4000 rows of the own format, all naming acme. */
    size_t cap = 4000 * 24 + 64, off = 0;
    char *csv = malloc(cap), err[512];
    off += (size_t)snprintf(csv + off, cap - off, "timestamp_s,tenant,prompt_tokens,output_tokens\n");
    for (int i = 0; i < 4000; i++) off += (size_t)snprintf(csv + off, cap - off, "%d,acme,1,1\n", i);
    scn s;
    /* column: acme, as named. round-robin: in turn, ignoring the column. */
    scn_opts o = {.assign = SCN_ASSIGN_ROUND_ROBIN};
    parse_mapped(&s, &o);
    if (scn_trace_parse(&s, csv, off, "t.csv", err, sizeof err)) fail_msg("%s", err);
    for (size_t i = 0; i < s.n_trace; i++) assert_int_equal(s.trace[i].tenant, (int)(i % 2));
    /* weighted: acme 1, globex 3, so about a quarter for acme (binomial
     * sd 27: within 5 sd), and the same seed gives the same draws. */
    o = (scn_opts){.assign = SCN_ASSIGN_WEIGHTED, .assign_seed = 11};
    if (scn_opts_apply(&s, &o, err, sizeof err)) fail_msg("%s", err);
    if (scn_trace_parse(&s, csv, off, "t.csv", err, sizeof err)) fail_msg("%s", err);
    int32_t first[4000];
    size_t acme = 0;
    for (size_t i = 0; i < 4000; i++) acme += (first[i] = s.trace[i].tenant) == 0;
    assert_true(acme > 1000 - 135 && acme < 1000 + 135);
    if (scn_trace_parse(&s, csv, off, "t.csv", err, sizeof err)) fail_msg("%s", err);
    for (size_t i = 0; i < 4000; i++) assert_int_equal(s.trace[i].tenant, first[i]);
    o.assign_seed = 12;
    if (scn_opts_apply(&s, &o, err, sizeof err)) fail_msg("%s", err);
    if (scn_trace_parse(&s, csv, off, "t.csv", err, sizeof err)) fail_msg("%s", err);
    size_t same = 0;
    for (size_t i = 0; i < 4000; i++) same += s.trace[i].tenant == first[i];
    assert_true(same < 3900);
    free(csv);
    scn_free(&s);
}

static void test_trace_bad_rows(void **state) {
    (void)state;
    scn s;
    parse_mapped(&s, NULL);
    static const char AZ[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n";
    static const char BG[] = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    static const struct {
        const char *head, *row, *want;
    } bad[] = {
        {AZ, "2023-11-16 18:15:47,-3,4\n", "t.csv:3: ContextTokens '-3' is not an integer from 0 to 1000000"},
        {AZ, "2023-11-16 18:15:47,3,x\n", "t.csv:3: GeneratedTokens 'x' is not an integer"},
        {AZ, "2023-11-16 18:15:47,3,4,5\n", "t.csv:3: expected 3 fields, got 4"},
        {AZ, "2023-11-16 18:15:47,3\n", "expected 3 fields, got 2"},
        {AZ, "2023-02-29 18:15:47,3,4\n", "TIMESTAMP '2023-02-29 18:15:47' is not a date-time"},
        {AZ, "2023-11-16 24:00:00,3,4\n", "is not a date-time"},
        {AZ, "2023-11-16 18:15:47.1234567891,3,4\n", "is not a date-time"},
        {AZ, "2023-11-16 18:15:47+0100,3,4\n", "is not a date-time"},
        {AZ, "1700000000,3,4\n", "is not a date-time"},
        {AZ, "2023-11-16 18:15:47.,3,4\n", "is not a date-time"},
        {BG, "5,ChatGPT,1,1,2,x\n", "t.csv:2: tenant 'ChatGPT' is not in the scenario"},
        {BG, "-5,acme,1,1,2,x\n", "t.csv:2: Timestamp '-5' is not a time in seconds >= 0"},
        {BG, "5,acme,1,1,2,x,y,z,a,b,c,d,e,f,g,h,i,j\n", "t.csv:2: expected 6 fields, got 17 or more"},
        {BG, "5,acme,1,2000000,2,x\n", "Response tokens '2000000' is not an integer from 0 to 1000000"},
        {"TIMESTAMP,ContextTokens\n", "", "t.csv:1: expected the header timestamp_s,tenant,prompt_tokens,output_tokens (tessera), TIMESTAMP"},
        {"# only a comment\n", "", "t.csv:1: empty: no header line"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char csv[512], e[512] = "";
        snprintf(csv, sizeof csv, "%s%s", bad[i].head, bad[i].row);
        int rc = scn_trace_parse(&s, csv, strlen(csv), "t.csv", e, sizeof e);
        if (rc != TS_ERR_SCENARIO || !strstr(e, bad[i].want))
            fail_msg("bad row %zu: rc %d, message '%s', wanted '%s'", i, rc, e, bad[i].want);
        assert_null(s.trace);
    }
    /* Date-times: Z, an offset, a T, a leap day, a BOM; the earliest row
     * of a trace loaded whole is its zero even when it is not the first. */
    static const char ok[] = "\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                             "2024-02-29T01:00:00Z,1,1\r\n"
                             "2024-02-29 02:30:00.5+02:00,1,1\r\n"      /* 00:30:00.5 UTC */
                             "2024-03-01 00:00:00-01:00,1,1\r\n";       /* 01:00 UTC, a day on */
    char e[512];
    if (scn_trace_parse(&s, ok, strlen(ok), "t.csv", e, sizeof e)) fail_msg("%s", e);
    assert_int_equal(s.n_trace, 3);
    assert_true(s.trace[0].t_s == 0 && s.trace[1].t_s == 1799.5 && s.trace[2].t_s == 1799.5 + 86400);
    assert_int_equal(s.trace[0].tenant, 1);          /* the second row, round-robin's second tenant */
    /* Over-long lines and NUL bytes are errors at their line. */
    char lng[2100];
    int n = snprintf(lng, sizeof lng, "timestamp_s,tenant,prompt_tokens,output_tokens\n0,acme,1,1\n");
    memset(lng + n, 'x', 1100);
    strcpy(lng + n + 1100, "\n");
    assert_int_equal(scn_trace_parse(&s, lng, strlen(lng), "t.csv", e, sizeof e), TS_ERR_SCENARIO);
    assert_non_null(strstr(e, "t.csv:3: line too long"));
    static const char nul[] = "timestamp_s,tenant,prompt_tokens,output_tokens\n0,ac\0me,1,1\n";
    assert_int_equal(scn_trace_parse(&s, nul, sizeof nul - 1, "t.csv", e, sizeof e), TS_ERR_SCENARIO);
    assert_non_null(strstr(e, "t.csv:2: NUL byte"));
    scn_free(&s);
}

/* A streamed trace is read row by row from the file, which must be in time
 * order; loaded whole, the same file is sorted. */
static void test_trace_stream_reader(void **state) {
    (void)state;
    char cpath[512], err[512];
    tu_path(cpath, sizeof cpath, "order.csv");
    static const char csv[] = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                              "1,acme,1,1,2,x\n2,globex,1,0,1,x\n# note\n3,globex,2,2,4,x\n2.5,acme,1,1,2,x\n";
    assert_int_equal(tu_write_file(cpath, csv, strlen(csv)), 0);
    scn s;
    scn_opts o = {.stream = 1};
    parse_mapped(&s, &o);
    if (scn_trace_load(&s, cpath, err, sizeof err)) fail_msg("%s", err);    /* the header only */
    assert_null(s.trace);
    assert_int_equal(s.trace_format, SCN_TRACE_BURSTGPT);
    scn_trace_reader *r;
    if (scn_trace_open(&s, &r, err, sizeof err)) fail_msg("%s", err);
    scn_trace_row row;
    assert_int_equal(scn_trace_next(r, &row, err, sizeof err), 1);
    assert_true(row.t_s == 1 && row.tenant == 0);
    assert_int_equal(scn_trace_next(r, &row, err, sizeof err), 1);   /* the zero row is skipped */
    assert_true(row.t_s == 3 && row.tenant == 1 && row.prompt_tokens == 2);
    assert_int_equal(scn_trace_next(r, &row, err, sizeof err), TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "order.csv:6: Timestamp '2.5' is earlier than the row before (3 s)"));
    assert_int_equal(scn_trace_next(r, &row, err, sizeof err), TS_ERR_SCENARIO);    /* it stays */
    scn_trace_stats st = scn_trace_reader_stats(r);
    assert_int_equal(st.rows, 4);
    assert_int_equal(st.zero, 1);
    assert_int_equal(st.used, 2);
    scn_trace_close(r);
    /* Whole: sorted. */
    o.stream = 0;
    if (scn_opts_apply(&s, &o, err, sizeof err)) fail_msg("%s", err);
    if (scn_trace_load(&s, cpath, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.n_trace, 3);
    assert_true(s.trace[1].t_s == 2.5 && s.trace[2].t_s == 3);
    /* A streamed file whose header is wrong fails at load. */
    assert_int_equal(tu_write_file(cpath, "a,b\n", 4), 0);
    o.stream = 1;
    if (scn_opts_apply(&s, &o, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(scn_trace_load(&s, cpath, err, sizeof err), TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "order.csv:1: expected the header"));
    remove(cpath);
    assert_int_equal(scn_trace_load(&s, cpath, err, sizeof err), TS_ERR_IO);
    scn_free(&s);
}

/* scn_load_opts applies the options before the trace is read. */
static void test_load_opts(void **state) {
    (void)state;
    char ypath[512], tpath[1024], err[512], y[2048];
    tu_path(ypath, sizeof ypath, "opts.yaml");
    snprintf(y, sizeof y,
             "model: m\ntrace: %s\ntenants:\n  - {name: acme, key: ka}\n  - {name: globex, key: kg}\n",
             data_path(tpath, sizeof tpath, "burstgpt.csv"));
    assert_int_equal(tu_write_file(ypath, y, strlen(y)), 0);
    scn s;
    int rc = scn_load(ypath, &s, err, sizeof err);
    if (rc != TS_ERR_SCENARIO) fail_msg("rc %d: %s", rc, err);                   /* ChatGPT is no tenant */
    assert_non_null(strstr(err, "burstgpt.csv:2: tenant 'ChatGPT' is not in the scenario"));
    assert_null(s.tenants);
    scn_opts o = {.tenant_map = "ChatGPT=globex,GPT-4=acme", .load = 2};
    if (scn_load_opts(ypath, &o, &s, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(s.n_trace, 5);
    assert_int_equal(s.trace[0].tenant, 1);
    assert_true(s.feed.load == 2);
    scn_free(&s);
    o.tenant_map = "ChatGPT=nobody";
    assert_int_equal(scn_load_opts(ypath, &o, &s, err, sizeof err), TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "no tenant 'nobody'"));
    assert_null(s.tenants);
    remove(ypath);
}

/* A ' in a name would close the gnuplot string plot.c writes it in, and
 * what followed would run (system() among it): refused at parse time, with
 * control characters, in every name; the name taken from the file name
 * when there is no name: key obeys the same rule. */
static void test_names_for_gnuplot(void **state) {
    (void)state;
    static const char *const bad[] = {
        "name: \"x'.system('touch /tmp/pwned').'\"\nmodel: m\ntenants:\n  - {name: a, key: k, arrival: {process: "
        "constant, rate: 1}, prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n",
        "model: m\ntenants:\n  - {name: \"a'b\", key: k, arrival: {process: constant, rate: 1}, prompt_tokens: "
        "{dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n",
        "model: m\ntenants:\n  - {name: \"a\\tb\", key: k, arrival: {process: constant, rate: 1}, prompt_tokens: "
        "{dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n",
        "name: \"a\\x1bb\"\nmodel: m\ntenants:\n  - {name: a, key: k, arrival: {process: constant, rate: 1}, "
        "prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n",
    };
    static const char *const where[] = {"t.yaml:1:7: name:", "t.yaml:3:12: tenants[0].name:",
                                        "t.yaml:3:12: tenants[0].name:", "t.yaml:1:7: name:"};
    scn s;
    char err[512];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(scn_parse(bad[i], strlen(bad[i]), "t.yaml", ".", &s, err, sizeof err), TS_ERR_SCENARIO);
        if (!strstr(err, where[i]) || !strstr(err, "quotes")) fail_msg("case %zu: %s", i, err);
        assert_null(s.tenants);
    }
    static const char ok[] = "model: m\ntenants:\n  - {name: a, key: k, arrival: {process: constant, rate: 1}, "
                             "prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n";
    /* No name: key: the file's base name, which must pass too. */
    assert_int_equal(scn_parse(ok, strlen(ok), "dir/x'.system('id').'.yaml", ".", &s, err, sizeof err),
                     TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "dir/x'.system('id').'.yaml: the scenario's name comes from the file name, 'x''"));
    assert_non_null(strstr(err, "give the scenario a name: key"));
    assert_null(s.tenants);
    assert_int_equal(scn_parse(ok, strlen(ok), "dir/.yaml", ".", &s, err, sizeof err), TS_ERR_SCENARIO);
    assert_non_null(strstr(err, "file name, ''"));
    assert_int_equal(scn_parse(ok, strlen(ok), "dir/fine-name.v2.yaml", ".", &s, err, sizeof err), 0);
    assert_string_equal(s.name, "fine-name");
    scn_free(&s);
}

/* file_read_all (util/file.h), which scenario and trace files are read
 * with: the whole file, NUL-terminated, NULs inside counted; over max
 * refused with the path and *len = max + 1; not a regular file refused
 * before it is opened; a missing file named. */
static void test_file_read_all(void **state) {
    (void)state;
    char path[512], err[512];
    tu_path(path, sizeof path, "read_all.bin");
    static const char data[] = "abc\0def";   /* 7 bytes, a NUL inside */
    assert_int_equal(tu_write_file(path, data, 7), 0);
    char *b = (char *)1;
    size_t len = 99;
    assert_int_equal(file_read_all(path, 7, &b, &len, err, sizeof err), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(b, data, 7);
    assert_int_equal(b[7], 0);
    free(b);
    assert_int_equal(file_read_all(path, 6, &b, &len, err, sizeof err), TS_ERR_IO);
    assert_null(b);
    assert_int_equal(len, 7);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "larger than 6 bytes"));
    /* Larger than the first buffer (4096 bytes, or the size seen): grown. */
    size_t big = 100000;
    char *d = malloc(big);
    assert_non_null(d);
    for (size_t i = 0; i < big; i++) d[i] = (char)('a' + i % 26);
    assert_int_equal(tu_write_file(path, d, big), 0);
    assert_int_equal(file_read_all(path, big, &b, &len, err, sizeof err), 0);
    assert_int_equal(len, big);
    assert_memory_equal(b, d, big);
    free(b);
    assert_int_equal(file_read_all(path, big - 1, &b, &len, err, sizeof err), TS_ERR_IO);
    assert_int_equal(len, big);
    free(d);
    assert_int_equal(tu_write_file(path, "", 0), 0);
    assert_int_equal(file_read_all(path, 10, &b, &len, err, sizeof err), 0);
    assert_int_equal(len, 0);
    assert_int_equal(b[0], 0);
    free(b);
    remove(path);
    assert_int_equal(file_read_all(path, 10, &b, &len, err, sizeof err), TS_ERR_IO);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(file_read_all(path, 10, &b, &len, err, sizeof err), TS_ERR_IO);
    assert_non_null(strstr(err, "not a regular file (fifo)"));
    assert_null(b);
    assert_int_equal(len, 0);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),       cmocka_unit_test(test_defaults),  cmocka_unit_test(test_errors),
        cmocka_unit_test(test_ydoc_rules), cmocka_unit_test(test_durations), cmocka_unit_test(test_trace),
        cmocka_unit_test(test_load_files), cmocka_unit_test(test_trace_azure), cmocka_unit_test(test_trace_burstgpt),
        cmocka_unit_test(test_trace_own_format_file), cmocka_unit_test(test_trace_options),
        cmocka_unit_test(test_trace_assign), cmocka_unit_test(test_trace_bad_rows),
        cmocka_unit_test(test_trace_stream_reader), cmocka_unit_test(test_load_opts),
        cmocka_unit_test(test_names_for_gnuplot), cmocka_unit_test(test_file_read_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
