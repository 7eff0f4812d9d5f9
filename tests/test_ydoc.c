/* test_ydoc.c - unit tests of the YAML document reader (src/util/ydoc.c).
 *
 * The one null rule (every spelling of null is an absent field, quoted text
 * is not null), one document per stream, messages with file, line, column
 * and field path compared whole, every getter's range, format and unit
 * errors, unknown and repeated keys, paths too deep for their buffer, and
 * files that cannot be opened or hold bad bytes. Run under ASan, the error
 * paths also show that nothing leaks or overflows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "testutil.h"
#include "ydoc.h"

#define EMPTY_MSG "empty test document"

/* Load text as "t.yaml" or fail the test. */
static ydoc *load(const char *text, char *err, size_t errlen) {
    ydoc_opts o = {TS_ERR_CONFIG, EMPTY_MSG};
    ydoc *d = NULL;
    int rc = ydoc_load_string(text, strlen(text), "t.yaml", &o, &d, err, errlen);
    if (rc) fail_msg("load '%s': %d %s", text, rc, err);
    assert_non_null(d);
    return d;
}

/* Loading text fails with code and exactly the message want. */
static void load_fails(const char *text, int code, const char *want) {
    ydoc_opts o = {code, EMPTY_MSG};
    ydoc *d = (ydoc *)&o;   /* must come back NULL */
    char err[512];
    int rc = ydoc_load_string(text, strlen(text), "t.yaml", &o, &d, err, sizeof err);
    if (rc != code || strcmp(err, want) != 0)
        fail_msg("'%s': rc %d, message\n  %s\nwanted\n  %s", text, rc, err, want);
    assert_null(d);
}

/* The value of the root's only key, "v". */
static const yaml_node_t *value_of(const ydoc *d) {
    static const char *const keys[] = {"v"};
    const yaml_node_t *v[1];
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", keys, 1, v), 0);
    return v[0];
}

/* ---- the null rule ---------------------------------------------------------- */

static void test_null_spellings(void **st) {
    (void)st;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    static const char *const keys[] = {"a", "b"};
    char text[64], err[256];
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++) {
        snprintf(text, sizeof text, "a: %s\nb: 1\n", nulls[i]);
        ydoc *d = load(text, err, sizeof err);
        const yaml_node_t *v[2];
        assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", keys, 2, v), 0);
        if (v[0]) fail_msg("'%s' is not null", nulls[i]);
        assert_non_null(v[1]);
        /* An absent field leaves a default as it was. */
        int64_t n = 42;
        assert_int_equal(ydoc_get_int(d, v[0], "a", 0, 10, &n), 0);
        assert_int_equal(n, 42);
        ydoc_free(d);
    }
    /* Quoted, the same spellings are text; other spellings are text too. */
    static const char *const texts[] = {"\"null\"", "'~'", "\"NULL\"", "nUlL", "nil", "None"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        snprintf(text, sizeof text, "v: %s\n", texts[i]);
        ydoc *d = load(text, err, sizeof err);
        const yaml_node_t *v = value_of(d);
        const char *s = NULL;
        if (!v) fail_msg("%s read as null", texts[i]);
        assert_int_equal(ydoc_get_str(d, v, "v", &s), 0);
        assert_non_null(s);
        ydoc_free(d);
    }
    assert_true(ydoc_is_null(NULL));
}

/* A quoted empty string is a value, but no getter takes it; a null reached
 * other than as a field (a list item) is a missing value. */
static void test_empty_values(void **st) {
    (void)st;
    char err[256];
    ydoc *d = load("v: \"\"\n", err, sizeof err);
    const yaml_node_t *v = value_of(d);
    assert_non_null(v);
    const char *s = NULL;
    assert_int_equal(ydoc_get_str(d, v, "v", &s), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:1:4: v: missing value");
    ydoc_free(d);

    d = load("v: [a, ~]\n", err, sizeof err);
    v = value_of(d);
    char path[YDOC_PATH_MAX];
    assert_int_equal(ydoc_get_str(d, ydoc_seq_at(d, v, 1), ydoc_path_index(path, "v", 1), &s), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:1:8: v[1]: missing value");
    ydoc_free(d);
}

/* Every getter leaves *out alone for an absent field. */
static void test_absent_keeps_defaults(void **st) {
    (void)st;
    char err[256], text[8] = "keep";
    ydoc *d = load("v: 1\n", err, sizeof err);
    const char *s = "keep";
    int64_t i64 = 7;
    int32_t i32 = 7;
    uint32_t u32 = 7;
    uint64_t u64 = 7, size = 7;
    double num = 7, dur = 7;
    int b = 7, e = 7;
    size_t len = 7;
    assert_int_equal(ydoc_get_str(d, NULL, "x", &s), 0);
    assert_int_equal(ydoc_get_text(d, NULL, "x", text, sizeof text), 0);
    assert_int_equal(ydoc_get_name(d, NULL, "x", "-", text, sizeof text), 0);
    assert_int_equal(ydoc_get_int(d, NULL, "x", 0, 1, &i64), 0);
    assert_int_equal(ydoc_get_i32(d, NULL, "x", 0, 1, &i32), 0);
    assert_int_equal(ydoc_get_u32(d, NULL, "x", 0, 1, &u32), 0);
    assert_int_equal(ydoc_get_u64(d, NULL, "x", 0, 1, &u64), 0);
    assert_int_equal(ydoc_get_number(d, NULL, "x", 0, 1, 0, &num), 0);
    assert_int_equal(ydoc_get_duration(d, NULL, "x", 0, 1, &dur), 0);
    assert_int_equal(ydoc_get_size(d, NULL, "x", 0, 1, &size), 0);
    assert_int_equal(ydoc_get_bool(d, NULL, "x", &b), 0);
    assert_int_equal(ydoc_get_enum(d, NULL, "x", "thing", (const char *const[]){"a"}, 1, &e), 0);
    assert_string_equal(s, "keep");
    assert_string_equal(text, "keep");
    assert_true(i64 == 7 && i32 == 7 && u32 == 7 && u64 == 7 && size == 7);
    assert_true(num == 7 && dur == 7 && b == 7 && e == 7);
    /* An absent list is an empty one. */
    assert_int_equal(ydoc_get_seq(d, NULL, "x", &len), 0);
    assert_int_equal(len, 0);
    assert_string_equal(err, "");
    ydoc_free(d);
}

/* ---- documents -------------------------------------------------------------- */

static void test_one_document(void **st) {
    (void)st;
    load_fails("a: 1\n---\nb: 2\n", TS_ERR_CONFIG,
               "t.yaml:3:1: more than one YAML document (--- separates documents)");
    load_fails("a: 1\n--- x\n", TS_ERR_SCENARIO,
               "t.yaml:2:5: more than one YAML document (--- separates documents)");
    /* A syntax error in the second document is still a syntax error. */
    load_fails("a: 1\n--- [\n", TS_ERR_CONFIG,
               "t.yaml:3:1: YAML syntax error: did not find expected node content (while parsing a flow node)");
    /* An explicit end of the one document is fine. */
    char err[128];
    ydoc_free(load("a: 1\n...\n", err, sizeof err));
}

static void test_empty_documents(void **st) {
    (void)st;
    static const char *const empties[] = {"", "# only a comment\n", "---\n", "~\n", "--- null\n", "\n\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++)
        load_fails(empties[i], TS_ERR_CONFIG, "t.yaml:1:1: " EMPTY_MSG);
    /* Without a message of the caller's, a generic one. */
    ydoc_opts o = {TS_ERR_INVAL, NULL};
    ydoc *d;
    char err[128];
    assert_int_equal(ydoc_load_string("", 0, "e.yaml", &o, &d, err, sizeof err), TS_ERR_INVAL);
    assert_string_equal(err, "e.yaml:1:1: empty document");
}

static void test_syntax_errors(void **st) {
    (void)st;
    /* libyaml's problem mark: the end of the input, after the last line. */
    load_fails("a: [1, 2\n", TS_ERR_CONFIG,
               "t.yaml:2:1: YAML syntax error: did not find expected ',' or ']' (while parsing a flow sequence)");
    load_fails("a: *nowhere\n", TS_ERR_SCENARIO, "t.yaml:1:4: YAML syntax error: found undefined alias");
    /* The reader reports a byte offset, which becomes a line without a
     * column. */
    load_fails("a: 1\nb: 2\nc: \xff\n", TS_ERR_CONFIG, "t.yaml:3: YAML error at byte 13: invalid leading UTF-8 octet");
}

/* Messages name the file, the 1-based line and column where the node
 * starts, and the whole field path. */
static void test_positions(void **st) {
    (void)st;
    static const char text[] = "top:\n  inner: {a: 1, zz: 2}\n";
    static const char *const top_keys[] = {"top"}, *const inner_keys[] = {"inner"}, *const leaf[] = {"a"};
    char err[256];
    ydoc *d = load(text, err, sizeof err);
    const yaml_node_t *top, *inner, *a;
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", top_keys, 1, &top), 0);
    assert_int_equal(ydoc_map_fields(d, top, "top", inner_keys, 1, &inner), 0);
    assert_int_equal(ydoc_map_fields(d, inner, "top.inner", leaf, 1, &a), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:2:17: top.inner.zz: unknown key (expected one of: a)");
    /* ydoc_fail with a node, without one, without a path. */
    assert_int_equal(ydoc_fail(d, inner, "top.inner", "%s %d", "x", 1), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:2:10: top.inner: x 1");
    assert_int_equal(ydoc_fail(d, NULL, "top", "no place"), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml: top: no place");
    assert_int_equal(ydoc_fail(d, top, "", "no path"), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:2:3: no path");
    assert_int_equal(ydoc_nomem(d), TS_ERR_NOMEM);
    assert_string_equal(err, "t.yaml: out of memory");
    assert_string_equal(ydoc_name(d), "t.yaml");
    ydoc_free(d);

    /* Columns count characters, not bytes: a two-byte \u00e9 and a tab are
     * one column each. */
    static const char *const texts[] = {"a: {\xc3\xa9: 1, zz: 2}\n", "a: {\tzz: 2}\n"};
    static const char *const wants[] = {"t.yaml:1:11: a.zz: unknown key (expected one of: \xc3\xa9)",
                                        "t.yaml:1:6: a.zz: unknown key (expected one of: \xc3\xa9)"};
    static const char *const a_keys[] = {"a"}, *const e_keys[] = {"\xc3\xa9"};
    for (size_t i = 0; i < 2; i++) {
        d = load(texts[i], err, sizeof err);
        assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", a_keys, 1, &a), 0);
        const yaml_node_t *e;
        assert_int_equal(ydoc_map_fields(d, a, "a", e_keys, 1, &e), TS_ERR_CONFIG);
        assert_string_equal(err, wants[i]);
        ydoc_free(d);
    }
}

/* ---- mappings and sequences ------------------------------------------------- */

static void test_keys(void **st) {
    (void)st;
    static const char *const keys[] = {"a", "b"};
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"a: 1\nc: 2\n", "t.yaml:2:1: m.c: unknown key (expected one of: a, b)"},
        {"a: 1\nb: 2\nb: 3\n", "t.yaml:3:1: m.b: repeated key (first at line 2)"},
        /* A null first value does not hide the repeat. */
        {"a:\na: 1\n", "t.yaml:2:1: m.a: repeated key (first at line 1)"},
        {"? [a]\n: 1\n", "t.yaml:1:3: m: keys must be plain names"},
        {"- a\n", "t.yaml:1:1: m: expected a mapping (key: value lines)"},
        {"just text\n", "t.yaml:1:1: m: expected a mapping (key: value lines)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256];
        ydoc *d = load(cases[i].text, err, sizeof err);
        const yaml_node_t *v[2];
        int rc = ydoc_map_fields(d, ydoc_root(d), "m", keys, 2, v);
        if (rc != TS_ERR_CONFIG || strcmp(err, cases[i].want))
            fail_msg("case %zu: rc %d, '%s', wanted '%s'", i, rc, err, cases[i].want);
        ydoc_free(d);
    }
    /* An absent mapping has every field absent. */
    char err[64];
    ydoc *d = load("v: 1\n", err, sizeof err);
    const yaml_node_t *v[2] = {ydoc_root(d), ydoc_root(d)};
    assert_int_equal(ydoc_map_fields(d, NULL, "m", keys, 2, v), 0);
    assert_null(v[0]);
    assert_null(v[1]);
    ydoc_free(d);
}

static void test_sequences(void **st) {
    (void)st;
    char err[256];
    ydoc *d = load("v: [a, b, c]\nw: x\n", err, sizeof err);
    static const char *const keys[] = {"v", "w"};
    const yaml_node_t *v[2];
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", keys, 2, v), 0);
    size_t n = 0;
    assert_true(ydoc_is_seq(v[0]));
    assert_false(ydoc_is_seq(v[1]));
    assert_false(ydoc_is_seq(NULL));
    assert_int_equal(ydoc_get_seq(d, v[0], "v", &n), 0);
    assert_int_equal(n, 3);
    const char *s = NULL;
    assert_int_equal(ydoc_get_str(d, ydoc_seq_at(d, v[0], 1), "v[1]", &s), 0);
    assert_string_equal(s, "b");
    assert_int_equal(ydoc_get_seq(d, v[1], "w", &n), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:2:4: w: expected a list (lines starting with '- ')");
    assert_int_equal(n, 0);
    ydoc_free(d);
}

/* ---- paths ------------------------------------------------------------------ */

static void test_deep_paths(void **st) {
    (void)st;
    char a[YDOC_PATH_MAX], b[YDOC_PATH_MAX];
    assert_string_equal(ydoc_path_field(a, "", "root"), "root");
    assert_string_equal(ydoc_path_field(b, NULL, "root"), "root");
    assert_string_equal(ydoc_path_index(b, a, 3), "root[3]");
    assert_string_equal(ydoc_path_field(a, b, "key"), "root[3].key");
    for (size_t i = 0; i < 100; i++) {
        ydoc_path_field(b, a, "field");
        ydoc_path_index(a, b, i);
    }
    assert_int_equal(strlen(a), YDOC_PATH_MAX - 1);
    assert_memory_equal(a, "root[3].key.field[0].field[1]", 29);
    assert_string_equal(a + YDOC_PATH_MAX - 4, "...");
    /* A key longer than any path: the message cuts the path, not the buffer. */
    char text[1024], key[600], err[2048];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = 0;
    snprintf(text, sizeof text, "%s: 1\n", key);
    ydoc *d = load(text, err, sizeof err);
    const yaml_node_t *v;
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", (const char *const[]){"v"}, 1, &v), TS_ERR_CONFIG);
    assert_int_equal(strlen(err), strlen("t.yaml:1:1: ") + YDOC_PATH_MAX - 1 + strlen(": unknown key (expected one of: v)"));
    assert_non_null(strstr(err, "kkk...: unknown key (expected one of: v)"));
    /* A small buffer gets a cut, terminated message; none gets nothing. */
    ydoc_free(d);
    char tiny[16];
    d = load(text, tiny, sizeof tiny);
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", (const char *const[]){"v"}, 1, &v), TS_ERR_CONFIG);
    assert_string_equal(tiny, "t.yaml:1:1: kkk");
    ydoc_free(d);
    d = load(text, NULL, 0);
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", (const char *const[]){"v"}, 1, &v), TS_ERR_CONFIG);
    ydoc_free(d);
}

/* ---- getters ---------------------------------------------------------------- */

enum { G_STR, G_TEXT, G_NAME, G_INT, G_I32, G_U32, G_U64, G_NUM, G_NUM_OPEN, G_NUM_SI, G_DUR, G_SIZE,
       G_SIZE_ANY, G_BOOL, G_ENUM };

typedef union out {
    const char *s;
    char text[8];
    int64_t i64;
    int32_t i32;
    uint32_t u32;
    uint64_t u64;
    double num;
    int i;
} out;

/* One getter of each kind, with fixed ranges, on the field path "x.v". */
static int get(const ydoc *d, const yaml_node_t *n, int kind, out *o) {
    static const char *const colours[] = {"red", "green"};
    switch (kind) {
    case G_STR: return ydoc_get_str(d, n, "x.v", &o->s);
    case G_TEXT: return ydoc_get_text(d, n, "x.v", o->text, 4);
    case G_NAME: return ydoc_get_name(d, n, "x.v", "-", o->text, sizeof o->text);
    case G_INT: return ydoc_get_int(d, n, "x.v", -5, 5, &o->i64);
    case G_I32: return ydoc_get_i32(d, n, "x.v", 0, INT32_MAX, &o->i32);
    case G_U32: return ydoc_get_u32(d, n, "x.v", 1, UINT32_MAX, &o->u32);
    case G_U64: return ydoc_get_u64(d, n, "x.v", 0, UINT64_MAX, &o->u64);
    case G_NUM: return ydoc_get_number(d, n, "x.v", 0, 1, 0, &o->num);
    case G_NUM_OPEN: return ydoc_get_number(d, n, "x.v", 0, 1, YDOC_LO_OPEN, &o->num);
    case G_NUM_SI: return ydoc_get_number(d, n, "x.v", 0, 1e15, YDOC_LO_OPEN | YDOC_SI, &o->num);
    case G_DUR: return ydoc_get_duration(d, n, "x.v", 0.001, 60, &o->num);
    case G_SIZE: return ydoc_get_size(d, n, "x.v", 1, 1ull << 30, &o->u64);
    case G_SIZE_ANY: return ydoc_get_size(d, n, "x.v", 1, UINT64_MAX, &o->u64);
    case G_BOOL: return ydoc_get_bool(d, n, "x.v", &o->i);
    case G_ENUM: return ydoc_get_enum(d, n, "x.v", "colour", colours, 2, &o->i);
    }
    return TS_ERR_INVAL;
}

#define SIZE_UNITS "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"

static void test_getter_errors(void **st) {
    (void)st;
    static const struct {
        int kind;
        const char *value, *want;   /* want: the message after "t.yaml:1:4: x.v: " */
    } cases[] = {
        {G_STR, "[1, 2]", "expected a single value, not a list"},
        {G_STR, "{a: 1}", "expected a single value, not a mapping"},
        {G_STR, "''", "missing value"},
        {G_STR, "\"a\\0b\"", "value contains a NUL byte"},
        {G_TEXT, "abcd", "longer than 3 bytes"},
        {G_NAME, "a b", "bad name 'a b' (1 to 7 characters: letters, digits and -)"},
        {G_NAME, "a_b", "bad name 'a_b' (1 to 7 characters: letters, digits and -)"},
        {G_NAME, "abcdefgh", "bad name 'abcdefgh' (1 to 7 characters: letters, digits and -)"},
        {G_INT, "6", "expected an integer in -5..5, got '6'"},
        {G_INT, "-6", "expected an integer in -5..5, got '-6'"},
        {G_INT, "1.5", "expected an integer in -5..5, got '1.5'"},
        {G_INT, "0x1", "expected an integer in -5..5, got '0x1'"},
        {G_INT, "1e0", "expected an integer in -5..5, got '1e0'"},
        {G_INT, "--1", "expected an integer in -5..5, got '--1'"},
        {G_INT, "' 1'", "expected an integer in -5..5, got ' 1'"},
        {G_INT, "99999999999999999999", "expected an integer in -5..5, got '99999999999999999999'"},
        {G_I32, "2147483648", "expected an integer in 0..2147483647, got '2147483648'"},
        {G_U32, "0", "expected an integer in 1..4294967295, got '0'"},
        {G_U32, "4294967296", "expected an integer in 1..4294967295, got '4294967296'"},
        {G_U64, "9223372036854775808", "expected an integer in 0..9223372036854775807, got '9223372036854775808'"},
        {G_U64, "-1", "expected an integer in 0..9223372036854775807, got '-1'"},
        {G_NUM, "1.5", "expected a number in [0, 1], got '1.5'"},
        {G_NUM, "-0.1", "expected a number in [0, 1], got '-0.1'"},
        {G_NUM, ".nan", "expected a number in [0, 1], got '.nan'"},
        {G_NUM, "nan", "expected a number in [0, 1], got 'nan'"},
        {G_NUM, "inf", "expected a number in [0, 1], got 'inf'"},
        {G_NUM, "1e-400", "expected a number in [0, 1], got '1e-400'"},
        {G_NUM, "0.5x", "expected a number in [0, 1], got '0.5x'"},
        {G_NUM, "1K", "expected a number in [0, 1], got '1K'"},
        {G_NUM_OPEN, "0", "expected a number in (0, 1], got '0'"},
        {G_NUM_SI, "7X", "expected a number in (0, 1e+15] (suffixes K, M, B, T allowed), got '7X'"},
        {G_NUM_SI, "7BB", "expected a number in (0, 1e+15] (suffixes K, M, B, T allowed), got '7BB'"},
        {G_NUM_SI, "2000T", "expected a number in (0, 1e+15] (suffixes K, M, B, T allowed), got '2000T'"},
        {G_DUR, "10 parsecs", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got '10 parsecs'"},
        {G_DUR, "-1s", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got '-1s'"},
        {G_DUR, "2m", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got '2m'"},
        {G_DUR, "0", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got '0'"},
        {G_DUR, "1d", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got '1d'"},
        {G_DUR, "s", "expected a duration from 0.001s to 60s such as 30s, 500ms or 2m, got 's'"},
        {G_SIZE, "2GiB", "expected a size in bytes from 1 to 1073741824, like 1048576 or 256MiB " SIZE_UNITS ", got '2GiB'"},
        {G_SIZE, "0", "expected a size in bytes from 1 to 1073741824, like 1048576 or 256MiB " SIZE_UNITS ", got '0'"},
        {G_SIZE, "1.5KiB", "expected a size in bytes from 1 to 1073741824, like 1048576 or 256MiB " SIZE_UNITS ", got '1.5KiB'"},
        {G_SIZE, "12XB", "expected a size in bytes from 1 to 1073741824, like 1048576 or 256MiB " SIZE_UNITS ", got '12XB'"},
        {G_SIZE, "MiB", "expected a size in bytes from 1 to 1073741824, like 1048576 or 256MiB " SIZE_UNITS ", got 'MiB'"},
        {G_SIZE_ANY, "0", "expected a size in bytes of at least 1, like 1048576 or 256MiB " SIZE_UNITS ", got '0'"},
        {G_SIZE_ANY, "16777216TiB",
         "expected a size in bytes of at least 1, like 1048576 or 256MiB " SIZE_UNITS ", got '16777216TiB'"},
        {G_BOOL, "yes", "expected true or false, got 'yes'"},
        {G_BOOL, "1", "expected true or false, got '1'"},
        {G_ENUM, "blue", "unknown colour 'blue' (red, green)"},
        {G_ENUM, "Red", "unknown colour 'Red' (red, green)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[128], err[512], want[512];
        snprintf(text, sizeof text, "v: %s\n", cases[i].value);
        snprintf(want, sizeof want, "t.yaml:1:4: x.v: %s", cases[i].want);
        ydoc_opts o = {TS_ERR_SCENARIO, EMPTY_MSG};
        ydoc *d;
        if (ydoc_load_string(text, strlen(text), "t.yaml", &o, &d, err, sizeof err)) fail_msg("case %zu: %s", i, err);
        out r;
        memset(&r, 0x5a, sizeof r);
        out before = r;
        int rc = get(d, value_of(d), cases[i].kind, &r);
        if (rc != TS_ERR_SCENARIO || strcmp(err, want))
            fail_msg("case %zu: rc %d, message\n  %s\nwanted\n  %s", i, rc, err, want);
        if (cases[i].kind != G_TEXT && cases[i].kind != G_NAME)   /* those copy before they judge */
            assert_memory_equal(&r, &before, sizeof r);
        ydoc_free(d);
    }
}

static void test_getter_values(void **st) {
    (void)st;
    static const struct {
        int kind;
        const char *value;
        double want;    /* the number read; for text kinds, unused */
    } cases[] = {
        {G_INT, "-5", -5}, {G_INT, "+5", 5}, {G_INT, "005", 5}, {G_INT, "-0", 0},
        {G_I32, "2147483647", 2147483647.0}, {G_U32, "4294967295", 4294967295.0},
        {G_U64, "9223372036854775807", 9223372036854775807.0},
        {G_NUM, "0", 0}, {G_NUM, "1", 1}, {G_NUM, "0.25", 0.25}, {G_NUM, "'0.5'", 0.5}, {G_NUM, "1e-1", 0.1},
        {G_NUM_OPEN, "1e-9", 1e-9},
        {G_NUM_SI, "8.03B", 8.03e9}, {G_NUM_SI, "7k", 7e3}, {G_NUM_SI, "2.5M", 2.5e6}, {G_NUM_SI, "1G", 1e9},
        {G_NUM_SI, "1.5T", 1.5e12}, {G_NUM_SI, "123", 123},
        {G_DUR, "1.5s", 1.5}, {G_DUR, "500ms", 0.5}, {G_DUR, "1m", 60}, {G_DUR, "1min", 60},
        {G_DUR, "12.5", 12.5}, {G_DUR, "3 s", 3}, {G_DUR, "0.01h", 36},
        {G_SIZE, "7", 7}, {G_SIZE, "1b", 1}, {G_SIZE, "1KiB", 1024}, {G_SIZE, "1 kb", 1000},
        {G_SIZE, "2 MB", 2e6}, {G_SIZE, "256mib", 256.0 * 1048576}, {G_SIZE, "1GiB", 1073741824.0},
        {G_SIZE_ANY, "16TiB", 16.0 * 1099511627776.0}, {G_SIZE_ANY, "3TB", 3e12},
        {G_BOOL, "true", 1}, {G_BOOL, "True", 1}, {G_BOOL, "TRUE", 1},
        {G_BOOL, "false", 0}, {G_BOOL, "False", 0}, {G_BOOL, "FALSE", 0},
        {G_ENUM, "red", 0}, {G_ENUM, "green", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[128], err[512];
        snprintf(text, sizeof text, "v: %s\n", cases[i].value);
        ydoc *d = load(text, err, sizeof err);
        out r;
        int rc = get(d, value_of(d), cases[i].kind, &r);
        if (rc) fail_msg("case %zu '%s': %s", i, cases[i].value, err);
        double got = 0;
        switch (cases[i].kind) {
        case G_INT: got = (double)r.i64; break;
        case G_I32: got = r.i32; break;
        case G_U32: got = r.u32; break;
        case G_U64: case G_SIZE: case G_SIZE_ANY: got = (double)r.u64; break;
        case G_BOOL: case G_ENUM: got = r.i; break;
        default: got = r.num;
        }
        if (fabs(got - cases[i].want) > 1e-9 * fabs(cases[i].want))
            fail_msg("case %zu '%s': got %.17g, wanted %.17g", i, cases[i].value, got, cases[i].want);
        ydoc_free(d);
    }
    /* The text kinds. */
    char err[128];
    ydoc *d = load("v: ab-9\n", err, sizeof err);
    out r;
    assert_int_equal(get(d, value_of(d), G_NAME, &r), 0);
    assert_string_equal(r.text, "ab-9");
    assert_int_equal(get(d, value_of(d), G_STR, &r), 0);
    assert_string_equal(r.s, "ab-9");
    ydoc_free(d);
    d = load("v: \"a b\"\n", err, sizeof err);
    assert_int_equal(get(d, value_of(d), G_TEXT, &r), 0);
    assert_string_equal(r.text, "a b");
    ydoc_free(d);
}

/* The edges of int64_t, exactly. */
static void test_int64_edges(void **st) {
    (void)st;
    static const struct {
        const char *value;
        int ok;
        int64_t want;
    } cases[] = {
        {"-9223372036854775808", 1, INT64_MIN}, {"9223372036854775807", 1, INT64_MAX},
        {"-9223372036854775809", 0, 0}, {"9223372036854775808", 0, 0}, {"18446744073709551616", 0, 0},
        {"'+'", 0, 0}, {"'-'", 0, 0}, {"'-+1'", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[64], err[256];
        snprintf(text, sizeof text, "v: %s\n", cases[i].value);
        ydoc *d = load(text, err, sizeof err);
        int64_t v = 0;
        int rc = ydoc_get_int(d, value_of(d), "v", INT64_MIN, INT64_MAX, &v);
        if (cases[i].ok ? rc != 0 || v != cases[i].want : rc != TS_ERR_CONFIG)
            fail_msg("'%s': rc %d, %" PRId64 " %s", cases[i].value, rc, v, err);
        ydoc_free(d);
    }
}

static void test_duration_parse(void **st) {
    (void)st;
    double v = -1;
    assert_int_equal(ydoc_duration_parse("250ms", &v), 0);
    assert_true(v == 0.25);
    assert_int_equal(ydoc_duration_parse("2 min", &v), 0);
    assert_true(v == 120);
    assert_int_equal(ydoc_duration_parse("1e308h", &v), TS_ERR_INVAL);   /* overflows to inf */
    assert_int_equal(ydoc_duration_parse("", &v), TS_ERR_INVAL);
    assert_int_equal(ydoc_duration_parse(NULL, &v), TS_ERR_INVAL);
    assert_int_equal(ydoc_duration_parse("5 days", &v), TS_ERR_INVAL);
    assert_int_equal(ydoc_duration_parse("1sec", &v), TS_ERR_INVAL);
    assert_true(v == 120);   /* failures leave it */
}

/* ---- files ------------------------------------------------------------------ */

static void test_files(void **st) {
    (void)st;
    ydoc_opts o = {TS_ERR_CONFIG, EMPTY_MSG};
    char path[PATH_MAX], err[PATH_MAX + 128], want[PATH_MAX + 128];
    ydoc *d = (ydoc *)&o;
    tu_path(path, sizeof path, "does-not-exist.yaml");
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_IO);
    assert_null(d);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    assert_string_equal(err, want);
    /* A FIFO is refused, not opened: opening it would wait for a writer. */
    tu_path(path, sizeof path, "fifo.yaml");
    remove(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_IO);
    snprintf(want, sizeof want, "%s: not a regular file (fifo)", path);
    assert_string_equal(err, want);
    remove(path);
    /* Bad arguments. */
    assert_int_equal(ydoc_load_file(NULL, &o, &d, err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(ydoc_load_file(path, NULL, &d, err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(ydoc_load_file(path, &o, NULL, err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(ydoc_load_string(NULL, 0, "x", &o, &d, err, sizeof err), TS_ERR_INVAL);
    ydoc_free(NULL);

    /* A file loads like the string, and bad bytes are counted into lines. */
    static const char good[] = "a: 1\nb: [x, y]\n";
    tu_path(path, sizeof path, "ydoc.yaml");
    assert_int_equal(tu_write_file(path, good, strlen(good)), 0);
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), 0);
    assert_string_equal(ydoc_name(d), path);
    static const char *const keys[] = {"a", "b"};
    const yaml_node_t *v[2];
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "", keys, 2, v), 0);
    assert_true(ydoc_is_seq(v[1]));
    ydoc_free(d);

    static const char bad[] = "a: 1\nb: 2\nc: \xff\n";
    assert_int_equal(tu_write_file(path, bad, strlen(bad)), 0);
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:3: YAML error at byte 13: invalid leading UTF-8 octet", path);
    assert_string_equal(err, want);
    static const char two[] = "a: 1\n---\nb: 2\n";
    assert_int_equal(tu_write_file(path, two, strlen(two)), 0);
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_CONFIG);
    snprintf(want, sizeof want, "%s:3:1: more than one YAML document (--- separates documents)", path);
    assert_string_equal(err, want);

    /* A file past YDOC_FILE_MAX is refused before parsing (a sparse file:
     * no disk is written). */
    assert_int_equal(tu_write_file(path, good, strlen(good)), 0);
    assert_int_equal(truncate(path, (off_t)YDOC_FILE_MAX + 1), 0);
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_CONFIG);
    assert_null(d);
    snprintf(want, sizeof want, "%s: larger than 64 MiB, not a configuration", path);
    assert_string_equal(err, want);
    assert_int_equal(truncate(path, (off_t)YDOC_FILE_MAX), 0);   /* at the limit: parsed (NULs are bad bytes) */
    assert_int_equal(ydoc_load_file(path, &o, &d, err, sizeof err), TS_ERR_CONFIG);
    assert_null(strstr(err, "larger than"));
    unlink(path);
}

/* A message is one line whatever the document quotes into it: control
 * characters in values and keys come out escaped (fuzz_config found a
 * multi-line scalar breaking the line). */
static void test_messages_one_line(void **st) {
    (void)st;
    char err[256];
    int64_t i64 = 0;
    ydoc *d = load("v: \"1\\n2\\t\\u0001\"\n", err, sizeof err);
    assert_int_equal(ydoc_get_int(d, value_of(d), "x", -5, 5, &i64), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:1:4: x: expected an integer in -5..5, got '1\\n2\\t\\x01'");
    ydoc_free(d);
    /* A plain scalar over two lines folds into one with a space; a literal
     * block keeps its newline. */
    d = load("v: |\n  a\n  b\n", err, sizeof err);
    assert_int_equal(ydoc_get_int(d, value_of(d), "x", -5, 5, &i64), TS_ERR_CONFIG);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "got 'a\\nb\\n'"));
    ydoc_free(d);
    /* A key, which goes into the field path. */
    static const char *const keys[] = {"a"};
    const yaml_node_t *v[1];
    d = load("\"a\\rb\": 1\n", err, sizeof err);
    assert_int_equal(ydoc_map_fields(d, ydoc_root(d), "m", keys, 1, v), TS_ERR_CONFIG);
    assert_string_equal(err, "t.yaml:1:1: m.a\\rb: unknown key (expected one of: a)");
    ydoc_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_spellings),
        cmocka_unit_test(test_empty_values),
        cmocka_unit_test(test_absent_keeps_defaults),
        cmocka_unit_test(test_one_document),
        cmocka_unit_test(test_empty_documents),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_deep_paths),
        cmocka_unit_test(test_getter_errors),
        cmocka_unit_test(test_getter_values),
        cmocka_unit_test(test_int64_edges),
        cmocka_unit_test(test_duration_parse),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_messages_one_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
