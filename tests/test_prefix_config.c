/*
 * test_prefix_config.c - a model's prefix_cache settings in the server's
 * YAML (src/serve/config.c): the default (on, no public prefix), both keys
 * read, and bad values refused with the field named.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "err.h"
#include "testutil.h"

#define KEY "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static int load(const char *model_extra, cfg *c, char *err, size_t errlen) {
    char text[2048], path[4096];
    snprintf(text, sizeof text,
             "models:\n  - name: m\n    path: m.gguf\n%s"
             "tenants:\n  - name: a\n    tier: gold\n    key_sha256: " KEY "\n",
             model_extra);
    tu_path(path, sizeof path, "prefix.yaml");
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
    int rc = cfg_load(path, c, err, errlen);
    unlink(path);
    return rc;
}

static void test_default_on(void **st) {
    (void)st;
    cfg c;
    char err[512];
    if (load("", &c, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(c.models[0].prefix_cache, 1);
    assert_int_equal(c.models[0].n_shared_prefixes, 0);
    cfg_free(&c);
}

static void test_keys(void **st) {
    (void)st;
    cfg c;
    char err[512];
    if (load("    prefix_cache:\n      enabled: false\n      shared_prefixes: [\"You are kind.\", \"Be brief.\"]\n", &c,
             err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(c.models[0].prefix_cache, 0);
    assert_int_equal(c.models[0].n_shared_prefixes, 2);
    assert_string_equal(c.models[0].shared_prefixes[1], "Be brief.");
    cfg_free(&c);
}

static void test_bad(void **st) {
    (void)st;
    static const struct {
        const char *yaml, *want;
    } cases[] = {
        {"    prefix_cache: {enabled: maybe}\n", "models[0].prefix_cache.enabled"},
        {"    prefix_cache: {size: 3}\n", "size"},
        {"    prefix_cache: {shared_prefixes: \"x\"}\n", "models[0].prefix_cache.shared_prefixes"},
        {"    prefix_cache: {shared_prefixes: [\"\"]}\n", "models[0].prefix_cache.shared_prefixes[0]"},
        {"    prefix_cache: {shared_prefixes: [[1]]}\n", "models[0].prefix_cache.shared_prefixes[0]"},
        {"    prefix_cache: {shared_prefixes: [a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q]}\n", "at most 16"},
        {"    prefix_cache: true\n", "models[0].prefix_cache"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfg c;
        char err[512] = "";
        assert_int_equal(load(cases[i].yaml, &c, err, sizeof err), TS_ERR_CONFIG);
        if (!strstr(err, cases[i].want)) fail_msg("case %zu: '%s' does not name '%s'", i, err, cases[i].want);
        cfg_free(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_on),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
