/*
 * test_strbuf.c - the growable text buffer (src/util/strbuf.c): appends of
 * every kind agree with the same text built by snprintf, growth keeps the
 * bytes (NULs included) and the terminator, a failure is sticky and makes
 * strbuf_steal answer NULL, and an empty buffer steals as "".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "err.h"
#include "strbuf.h"

static void test_appends_match_snprintf(void **state) {
    (void)state;
    strbuf b = STRBUF_INIT;
    char want[8192];
    size_t wl = 0;
    for (int i = 0; i < 300; i++) {
        strbuf_printf(&b, "%d:%s,", i, i % 3 ? "x" : "yy");
        strbuf_puts(&b, "|");
        wl += (size_t)snprintf(want + wl, sizeof want - wl, "%d:%s,|", i, i % 3 ? "x" : "yy");
    }
    assert_false(strbuf_failed(&b));
    assert_int_equal(b.len, wl);
    assert_int_equal(b.p[b.len], '\0');
    assert_memory_equal(b.p, want, wl);
    size_t len;
    char *s = strbuf_steal(&b, &len);
    assert_non_null(s);
    assert_int_equal(len, wl);
    assert_string_equal(s, want);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    free(s);
}

static void test_bytes_with_nuls_and_growth(void **state) {
    (void)state;
    strbuf b = STRBUF_INIT;
    char big[5000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i % 7);   /* NULs too */
    strbuf_put(&b, "a", 1);
    strbuf_put(&b, big, sizeof big);
    assert_int_equal(b.len, 1 + sizeof big);
    assert_true(b.cap > b.len);
    assert_memory_equal(b.p + 1, big, sizeof big);
    assert_int_equal(b.p[b.len], '\0');
    /* Reserved room is there without a move. */
    assert_int_equal(strbuf_reserve(&b, 10000), 0);
    char *before = b.p;
    strbuf_put(&b, big, 5000);
    strbuf_put(&b, big, 5000);
    assert_ptr_equal(b.p, before);
    strbuf_clear(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.p, "");
    strbuf_printf(&b, "%s", "");
    assert_string_equal(b.p, "");
    strbuf_free(&b);
    assert_null(b.p);
}

static void test_empty_steals_as_empty_string(void **state) {
    (void)state;
    strbuf b = STRBUF_INIT;
    size_t len = 99;
    char *s = strbuf_steal(&b, &len);
    assert_non_null(s);
    assert_string_equal(s, "");
    assert_int_equal(len, 0);
    free(s);
}

static void test_failure_is_sticky(void **state) {
    (void)state;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "kept");
    /* A request no allocation can meet fails and marks the buffer. */
    assert_int_equal(strbuf_reserve(&b, SIZE_MAX - 1), TS_ERR_NOMEM);
    assert_true(strbuf_failed(&b));
    strbuf_puts(&b, "more");
    strbuf_printf(&b, "%d", 42);
    assert_int_equal(b.len, 4);
    assert_int_equal(strbuf_reserve(&b, 1), TS_ERR_NOMEM);
    size_t len = 99;
    assert_null(strbuf_steal(&b, &len));
    assert_int_equal(len, 0);
    /* Stolen (or freed) resets the buffer for reuse. */
    assert_false(strbuf_failed(&b));
    strbuf_puts(&b, "again");
    assert_string_equal(b.p, "again");
    strbuf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_appends_match_snprintf),
        cmocka_unit_test(test_bytes_with_nuls_and_growth),
        cmocka_unit_test(test_empty_steals_as_empty_string),
        cmocka_unit_test(test_failure_is_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
