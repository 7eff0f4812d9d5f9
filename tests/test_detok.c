/*
 * test_detok.c - incremental detokenization: UTF-8 characters split over
 * byte tokens are released whole, stop strings spread over tokens are held
 * back and cut, and everything else is released as soon as it is certain.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "detok.h"
#include "err.h"
#include "tok.h"

/* Byte-level vocabulary: <unk> <s> </s> then the 256 byte tokens, so
 * token 3 + b decodes to byte b. */
static tok *byte_vocab(void) {
    static char names[256][8];
    const char *tokens[259];
    float scores[259];
    int32_t types[259];
    tokens[0] = "<unk>"; tokens[1] = "<s>"; tokens[2] = "</s>";
    types[0] = TOK_TYPE_UNKNOWN; types[1] = types[2] = TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof(names[b]), "<0x%02X>", b);
        tokens[3 + b] = names[b];
        types[3 + b] = TOK_TYPE_BYTE;
    }
    for (int i = 0; i < 259; i++) scores[i] = 0;
    tok_spec s = {TOK_MODEL_SPM, 259, tokens, NULL, scores, types, NULL, NULL, 0, 1, 2, 0, 1, 1, NULL};
    tok *t;
    char err[128];
    assert_int_equal(tok_new(&s, &t, err, sizeof(err)), 0);
    return t;
}

/* Push the bytes of s one token each; collect what is released. */
static int push_str(dtk *d, const char *s, char *got, size_t *got_len) {
    int stopped = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && !stopped; p++) {
        const char *out;
        size_t n;
        stopped = dtk_push(d, 3 + *p, &out, &n);
        assert_true(stopped >= 0);
        memcpy(got + *got_len, out, n);
        *got_len += n;
    }
    return stopped;
}

static void test_utf8_released_whole(void **state) {
    tok *t = byte_vocab();
    dtk d;
    assert_int_equal(dtk_init(&d, t, NULL, 0), 0);
    const char *out;
    size_t n;
    assert_int_equal(dtk_push(&d, 3 + 0xC3, &out, &n), 0);
    assert_int_equal(n, 0); /* half of é: held */
    assert_int_equal(dtk_push(&d, 3 + 0xA9, &out, &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(out, "\xC3\xA9", 2);
    assert_int_equal(dtk_push(&d, 3 + 'x', &out, &n), 0);
    assert_int_equal(n, 1);
    /* A character cut at the end becomes U+FFFD. */
    assert_int_equal(dtk_push(&d, 3 + 0xE6, &out, &n), 0);
    assert_int_equal(n, 0);
    dtk_finish(&d, &out, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "\xEF\xBF\xBD", 3);
    dtk_deinit(&d);
    tok_free(t);
}

static void test_stop_string_across_tokens(void **state) {
    tok *t = byte_vocab();
    const char *stops[] = {"END", "\n\n"};
    dtk d;
    char got[256];
    size_t len = 0;
    assert_int_equal(dtk_init(&d, t, stops, 2), 0);
    assert_int_equal(push_str(&d, "abc EN", got, &len), 0);
    assert_int_equal(len, 4); /* "EN" could start END: held */
    assert_int_equal(push_str(&d, "X EN", got, &len), 0);
    assert_int_equal(len, 8); /* "ENX " released once it cannot match */
    assert_int_equal(push_str(&d, "D tail", got, &len), 1);
    got[len] = 0;
    assert_string_equal(got, "abc ENX "); /* cut right before the stop */
    const char *out;
    size_t n;
    assert_int_equal(dtk_push(&d, 3 + 'z', &out, &n), 1); /* nothing after a stop */
    assert_int_equal(n, 0);
    dtk_deinit(&d);
    tok_free(t);
}

/* Under min_tokens (quiet pushes) a stop string is text like any other
 * and nothing is held back for it; from then on it stops again, also one
 * that began in the quiet text. */
static void test_quiet_until_min_tokens(void **state) {
    tok *t = byte_vocab();
    const char *stops[] = {"END"};
    dtk d;
    char got[256];
    size_t len = 0;
    assert_int_equal(dtk_init(&d, t, stops, 1), 0);
    d.quiet = 5;
    assert_int_equal(push_str(&d, "aEND", got, &len), 0);
    assert_int_equal(len, 4);                     /* released, not held */
    assert_int_equal(push_str(&d, "E", got, &len), 0);  /* the fifth quiet push */
    assert_int_equal(push_str(&d, "ND", got, &len), 1);
    got[len] = 0;
    assert_string_equal(got, "aENDEN");           /* the stop began in released text: cut there */
    dtk_deinit(&d);
    len = 0;
    assert_int_equal(dtk_init(&d, t, stops, 1), 0);
    d.quiet = 2;
    assert_int_equal(push_str(&d, "xyzEND", got, &len), 1);
    got[len] = 0;
    assert_string_equal(got, "xyz");
    dtk_deinit(&d);
    tok_free(t);
}

static void test_stop_in_one_token_and_finish(void **state) {
    tok *t = byte_vocab();
    const char *stops[] = {"\n\n"};
    dtk d;
    char got[256];
    size_t len = 0;
    assert_int_equal(dtk_init(&d, t, stops, 1), 0);
    assert_int_equal(push_str(&d, "line\n", got, &len), 0);
    assert_int_equal(len, 4);
    const char *out;
    size_t n;
    dtk_finish(&d, &out, &n); /* ended by length: the held "\n" goes out */
    assert_int_equal(n, 1);
    assert_int_equal(out[0], '\n');
    dtk_deinit(&d);
    const char *bad[] = {""};
    assert_int_equal(dtk_init(&d, t, bad, 1), TS_ERR_INVAL);
    dtk_deinit(&d);
    tok_free(t);
}

/* A lead byte made invalid by the byte after it is released at once; a
 * stop string that then cuts that byte away leaves the lead byte last.
 * finish must not turn it into U+FFFD: it went out already, and the
 * client would get bytes of a character never generated (a fuzzer's
 * find, fuzz/regress/tok/detok-finish-cuts-released). */
static void test_finish_keeps_released_bytes(void **state) {
    tok *t = byte_vocab();
    const char *stops[] = {"gow"};
    dtk d;
    char got[256];
    size_t len = 0;
    assert_int_equal(dtk_init(&d, t, stops, 1), 0);
    assert_int_equal(push_str(&d, "\xCE", got, &len), 0);
    assert_int_equal(len, 0); /* a lead byte: held */
    assert_int_equal(push_str(&d, "g", got, &len), 0);
    assert_int_equal(len, 1); /* invalid pair: CE goes out, "g" could start the stop */
    assert_int_equal((unsigned char)got[0], 0xCE);
    assert_int_equal(push_str(&d, "ow", got, &len), 1);
    assert_int_equal(len, 1); /* the stop cuts "gow" */
    const char *out;
    size_t n;
    dtk_finish(&d, &out, &n);
    assert_int_equal(n, 0); /* nothing rewrites what was sent */
    dtk_deinit(&d);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_released_whole),
        cmocka_unit_test(test_stop_string_across_tokens),
        cmocka_unit_test(test_stop_in_one_token_and_finish),
        cmocka_unit_test(test_quiet_until_min_tokens),
        cmocka_unit_test(test_finish_keeps_released_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
