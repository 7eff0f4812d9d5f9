/*
 * test_utf8.c - the UTF-8 helpers (src/util/utf8.c) against references
 * written differently: every code point round-trips through the encoder
 * and both decoders; every sequence of up to four bytes drawn from the
 * bytes where Table 3-7 changes its mind decodes as a shape-then-range
 * decoder says (one byte per ill-formed sequence), and steps over the
 * maximal subpart that a table of all well-formed prefixes gives; plus the
 * validity offset and the cut at a character boundary.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "utf8.h"

/* Reference encoder: the bit layout written out by length. */
static size_t ref_encode(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    size_t len = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = len - 1; i > 0; i--, cp >>= 6) o[i] = (unsigned char)(0x80 | (cp & 0x3F));
    o[0] = (unsigned char)(lead[len] | cp);
    return len;
}

/* Reference decoder: the shape from the lead byte's high bits, then the
 * value checked for overlong forms, surrogates and range. 0 when ill-formed
 * or truncated. */
static size_t ref_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint32_t v = len == 1 ? c : c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Every proper prefix (1..3 bytes) of a well-formed sequence, as bitmaps
 * indexed by the prefix's bytes; built from all code points. */
static unsigned char pre1[256 / 8], pre2[65536 / 8], *pre3;

static void set_bit(unsigned char *m, uint32_t i) { m[i >> 3] |= (unsigned char)(1u << (i & 7)); }
static int get_bit(const unsigned char *m, uint32_t i) { return m[i >> 3] >> (i & 7) & 1; }

static int setup_prefixes(void **state) {
    (void)state;
    pre3 = calloc((1u << 24) / 8, 1);
    if (!pre3) return -1;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        unsigned char b[4];
        size_t len = ref_encode(b, cp);
        if (len > 1) set_bit(pre1, b[0]);
        if (len > 2) set_bit(pre2, (uint32_t)b[0] << 8 | b[1]);
        if (len > 3) set_bit(pre3, (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2]);
    }
    return 0;
}

static int teardown_prefixes(void **state) {
    (void)state;
    free(pre3);
    return 0;
}

static int is_prefix(const unsigned char *s, size_t k) {
    switch (k) {
    case 1: return get_bit(pre1, s[0]);
    case 2: return get_bit(pre2, (uint32_t)s[0] << 8 | s[1]);
    case 3: return get_bit(pre3, (uint32_t)s[0] << 16 | (uint32_t)s[1] << 8 | s[2]);
    }
    return 0;
}

static void test_every_code_point_round_trips(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        unsigned char want[4];
        char got[UTF8_MAX_LEN + 1] = {0};
        size_t wl = ref_encode(want, cp), gl = utf8_encode(got, cp);
        assert_int_equal(gl, wl);
        assert_memory_equal(got, want, wl);
        uint32_t d = 0;
        assert_int_equal(utf8_decode(got, gl, &d), gl);
        assert_int_equal(d, cp);
        assert_int_equal(utf8_decode_subpart(got, gl, &d), gl);
        assert_int_equal(d, cp);
        assert_int_equal(utf8_valid_prefix(got, gl), gl);
    }
}

/* Bytes at which Table 3-7 changes: ASCII, each end of the continuation
 * ranges the lead bytes narrow, and each kind of lead byte. */
static const unsigned char EDGE[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1,
                                     0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3,
                                     0xF4, 0xF5, 0xF7, 0xF8, 0xFF};
#define N_EDGE (sizeof EDGE / sizeof EDGE[0])

static void check_sequence(const unsigned char *s, size_t n) {
    uint32_t want_cp = UTF8_INVALID, cp = 0, sub_cp = 0;
    size_t wl = ref_decode(s, n, &want_cp);
    size_t got = utf8_decode((const char *)s, n, &cp);
    size_t sub = utf8_decode_subpart((const char *)s, n, &sub_cp);
    if (wl) {
        assert_int_equal(got, wl);
        assert_int_equal(cp, want_cp);
        assert_int_equal(sub, wl);
        assert_int_equal(sub_cp, want_cp);
        return;
    }
    assert_int_equal(got, 1);
    assert_int_equal(cp, UTF8_INVALID);
    assert_int_equal(sub_cp, UTF8_INVALID);
    size_t want_sub = 1;
    for (size_t k = n < 3 ? n : 3; k > 1; k--)
        if (is_prefix(s, k)) {
            want_sub = k;
            break;
        }
    if (sub != want_sub) fail_msg("%02x %02x %02x %02x (n %zu): subpart %zu, want %zu", s[0], n > 1 ? s[1] : 0,
                                  n > 2 ? s[2] : 0, n > 3 ? s[3] : 0, n, sub, want_sub);
}

static void test_edge_sequences_match_references(void **state) {
    (void)state;
    unsigned char s[4];
    for (size_t a = 0; a < N_EDGE; a++) {
        s[0] = EDGE[a];
        check_sequence(s, 1);
        for (size_t b = 0; b < N_EDGE; b++) {
            s[1] = EDGE[b];
            check_sequence(s, 2);
            for (size_t c = 0; c < N_EDGE; c++) {
                s[2] = EDGE[c];
                check_sequence(s, 3);
                for (size_t d = 0; d < N_EDGE; d++) {
                    s[3] = EDGE[d];
                    check_sequence(s, 4);
                }
            }
        }
    }
}

/* The cases the callers rely on, spelled out. */
static void test_invalid_byte_rules(void **state) {
    (void)state;
    uint32_t cp;
    /* Truncated euro sign: one byte for a tokenizer, one U+FFFD for both. */
    assert_int_equal(utf8_decode("\xe2\x82", 2, &cp), 1);
    assert_int_equal(cp, UTF8_INVALID);
    assert_int_equal(utf8_decode_subpart("\xe2\x82", 2, &cp), 2);
    assert_int_equal(cp, UTF8_INVALID);
    /* A bad third byte ends the subpart before it. */
    assert_int_equal(utf8_decode_subpart("\xe2\x82x", 3, &cp), 2);
    /* Overlong, surrogate, past U+10FFFF: the subpart is the lead alone. */
    assert_int_equal(utf8_decode_subpart("\xc0\x80", 2, &cp), 1);
    assert_int_equal(utf8_decode_subpart("\xe0\x80\x80", 3, &cp), 1);
    assert_int_equal(utf8_decode_subpart("\xed\xa0\x80", 3, &cp), 1);
    assert_int_equal(utf8_decode_subpart("\xf4\x90\x80\x80", 4, &cp), 1);
    /* The decoder never reads past n even when the lead asks for more. */
    assert_int_equal(utf8_decode("\xf0\x9f\x98\x80", 3, &cp), 1);
    assert_int_equal(utf8_decode("\xf0\x9f\x98\x80", 4, &cp), 4);
    assert_int_equal(cp, 0x1F600);
}

static void test_valid_prefix_and_cut(void **state) {
    (void)state;
    const char *s = "a\xc3\xa9z\xe2\x82\xac!";   /* a é z € ! : 1 2 1 3 1 bytes */
    size_t n = strlen(s);
    assert_int_equal(utf8_valid_prefix(s, n), n);
    assert_int_equal(utf8_valid_prefix("", 0), 0);
    assert_int_equal(utf8_valid_prefix("ab\xffz", 4), 2);
    assert_int_equal(utf8_valid_prefix("ab\xe2\x82", 4), 2);
    assert_int_equal(utf8_cut(s, n, 100), n);
    assert_int_equal(utf8_cut(s, n, n), n);
    assert_int_equal(utf8_cut(s, n, 2), 1);   /* inside é */
    assert_int_equal(utf8_cut(s, n, 3), 3);
    assert_int_equal(utf8_cut(s, n, 5), 4);   /* inside € */
    assert_int_equal(utf8_cut(s, n, 6), 4);
    assert_int_equal(utf8_cut(s, n, 7), 7);
    assert_int_equal(utf8_cut(s, n, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_point_round_trips),
        cmocka_unit_test(test_edge_sequences_match_references),
        cmocka_unit_test(test_invalid_byte_rules),
        cmocka_unit_test(test_valid_prefix_and_cut),
    };
    return cmocka_run_group_tests(tests, setup_prefixes, teardown_prefixes);
}
