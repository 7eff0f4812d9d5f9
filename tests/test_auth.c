/* test_auth.c - unit tests of API key handling (src/serve/auth.c).
 *
 * SHA-256 against published vectors, hex round trips and every way a hash
 * string can be malformed, the shape and uniqueness of generated keys, the
 * key table's answers (tenants, admin, misses, refused duplicates) and the
 * Authorization header parser on good and bad values.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "err.h"

static void hash_hex(const char *key, char out[AUTH_HEX_LEN + 1]) {
    uint8_t h[AUTH_HASH_LEN];
    auth_hash(key, strlen(key), h);
    auth_hex_encode(h, AUTH_HASH_LEN, out);
}

/* ---- hashing and hex -------------------------------------------------------- */

static void test_sha256_vectors(void **st) {
    (void)st;
    char hex[AUTH_HEX_LEN + 1];
    /* FIPS 180-2 examples. */
    hash_hex("abc", hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    hash_hex("", hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hash_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* Only len bytes count, not the NUL. */
    uint8_t a[AUTH_HASH_LEN], b[AUTH_HASH_LEN];
    auth_hash("abcdef", 3, a);
    auth_hash("abc", 3, b);
    assert_memory_equal(a, b, AUTH_HASH_LEN);
    /* The demo key's hash as written in examples/demo.yaml. */
    hash_hex("tsk-demo-gold", hex);
    assert_string_equal(hex, "d7166ec1d61b17c1849fb78069f8deae71c4cf30db4b9f913ae4220db79e7864");
}

static void test_hex_round_trip(void **st) {
    (void)st;
    uint8_t in[AUTH_HASH_LEN], back[AUTH_HASH_LEN];
    char hex[AUTH_HEX_LEN + 1];
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < AUTH_HASH_LEN; i++) in[i] = (uint8_t)(round * 37 + i * 11 + (i >> 2));
        auth_hex_encode(in, AUTH_HASH_LEN, hex);
        assert_int_equal(strlen(hex), AUTH_HEX_LEN);
        for (int i = 0; i < AUTH_HEX_LEN; i++) assert_non_null(strchr("0123456789abcdef", hex[i]));
        memset(back, 0, sizeof back);
        assert_int_equal(auth_hex_decode(hex, back, AUTH_HASH_LEN), 0);
        assert_memory_equal(in, back, AUTH_HASH_LEN);
    }
    /* Upper case decodes to the same bytes. */
    uint8_t two[2];
    assert_int_equal(auth_hex_decode("aBFf", two, 2), 0);
    assert_int_equal(two[0], 0xab);
    assert_int_equal(two[1], 0xff);
    assert_int_equal(auth_hex_decode("0009", two, 2), 0);
    assert_int_equal(two[0], 0x00);
    assert_int_equal(two[1], 0x09);
    assert_int_equal(auth_hex_decode("", two, 0), 0);
}

static void test_hex_rejects(void **st) {
    (void)st;
    static const char good[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    uint8_t out[AUTH_HASH_LEN];
    char buf[AUTH_HEX_LEN + 8];
    assert_int_equal(auth_hex_decode(good, out, AUTH_HASH_LEN), 0);
    /* Lengths: one short, one long, odd, empty. */
    snprintf(buf, sizeof buf, "%.63s", good);
    assert_int_equal(auth_hex_decode(buf, out, AUTH_HASH_LEN), TS_ERR_INVAL);
    snprintf(buf, sizeof buf, "%s0", good);
    assert_int_equal(auth_hex_decode(buf, out, AUTH_HASH_LEN), TS_ERR_INVAL);
    snprintf(buf, sizeof buf, "%s00", good);
    assert_int_equal(auth_hex_decode(buf, out, AUTH_HASH_LEN), TS_ERR_INVAL);
    assert_int_equal(auth_hex_decode("", out, AUTH_HASH_LEN), TS_ERR_INVAL);
    assert_int_equal(auth_hex_decode("abc", out, 2), TS_ERR_INVAL);
    /* A bad character at each end and in the middle. */
    static const char bad[] = "gxzG -:/@`[{\n";
    for (const char *b = bad; *b; b++) {
        for (int pos = 0; pos < AUTH_HEX_LEN; pos += 21) {
            memcpy(buf, good, sizeof good);
            buf[pos] = *b;
            assert_int_equal(auth_hex_decode(buf, out, AUTH_HASH_LEN), TS_ERR_INVAL);
        }
        memcpy(buf, good, sizeof good);
        buf[AUTH_HEX_LEN - 1] = *b;
        assert_int_equal(auth_hex_decode(buf, out, AUTH_HASH_LEN), TS_ERR_INVAL);
    }
    assert_int_equal(auth_hex_decode(NULL, out, AUTH_HASH_LEN), TS_ERR_INVAL);
    assert_int_equal(auth_hex_decode(good, NULL, AUTH_HASH_LEN), TS_ERR_INVAL);
}

/* ---- key generation --------------------------------------------------------- */

#define N_KEYS 256

static void test_keygen_format(void **st) {
    (void)st;
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char (*keys)[AUTH_KEY_LEN + 1] = calloc(N_KEYS, sizeof *keys);
    assert_non_null(keys);
    int seen[256] = {0};
    for (int i = 0; i < N_KEYS; i++) {
        assert_int_equal(auth_keygen(keys[i], sizeof keys[i]), 0);
        assert_int_equal(strlen(keys[i]), AUTH_KEY_LEN);
        assert_memory_equal(keys[i], "tsk-", 4);
        for (int j = 4; j < AUTH_KEY_LEN; j++) {
            assert_non_null(strchr(alphabet, keys[i][j]));
            seen[(unsigned char)keys[i][j]] = 1;
        }
        /* 32 bytes = 256 bits in 43 chars: the last char carries 4 bits,
         * so its low two alphabet bits are zero. */
        const char *p = strchr(alphabet, keys[i][AUTH_KEY_LEN - 1]);
        assert_int_equal((p - alphabet) & 3, 0);
        for (int j = 0; j < i; j++) assert_string_not_equal(keys[i], keys[j]);
    }
    /* 256 keys x 43 chars draw on (nearly) the whole alphabet; a generator
     * stuck on a few values would not. Both url-safe letters appear. */
    int distinct = 0;
    for (int c = 0; c < 256; c++) distinct += seen[c];
    assert_true(distinct >= 60);
    assert_true(seen['-'] && seen['_']);
    assert_false(seen['+'] || seen['/'] || seen['=']);
    free(keys);
}

static void test_keygen_cap(void **st) {
    (void)st;
    char buf[AUTH_KEY_LEN + 1];
    memset(buf, 'x', sizeof buf);
    assert_int_equal(auth_keygen(buf, AUTH_KEY_LEN), TS_ERR_INVAL);
    assert_int_equal(auth_keygen(NULL, 100), TS_ERR_INVAL);
    assert_int_equal(auth_keygen(buf, sizeof buf), 0);
    assert_int_equal(buf[AUTH_KEY_LEN], 0);
    /* A generated key is found through its hash like any other. */
    auth_entry e = {.tenant = 7};
    auth_hash(buf, strlen(buf), e.hash);
    auth_table *t;
    assert_int_equal(auth_table_new(&e, 1, NULL, NULL, &t), 0);
    assert_int_equal(auth_lookup(t, buf, strlen(buf)), 7);
    auth_table_free(t);
}

/* ---- the key table ---------------------------------------------------------- */

static const char *const tkeys[] = {"key-zero", "key-one", "key-one-b", "key-two", "key-last"};
static const int32_t towner[] = {0, 1, 1, 2, 3};
#define N_TKEYS (sizeof tkeys / sizeof tkeys[0])

static auth_table *make_table(int with_admin) {
    auth_entry e[N_TKEYS];
    for (size_t i = 0; i < N_TKEYS; i++) {
        auth_hash(tkeys[i], strlen(tkeys[i]), e[i].hash);
        e[i].tenant = towner[i];
    }
    uint8_t admin[AUTH_HASH_LEN];
    auth_hash("the-admin", 9, admin);
    auth_table *t = NULL;
    assert_int_equal(auth_table_new(e, N_TKEYS, with_admin ? admin : NULL, NULL, &t), 0);
    assert_non_null(t);
    assert_int_equal(auth_table_size(t), N_TKEYS);
    return t;
}

static int lookup(const auth_table *t, const char *key) { return auth_lookup(t, key, strlen(key)); }

static void test_lookup(void **st) {
    (void)st;
    auth_table *t = make_table(1);
    for (size_t i = 0; i < N_TKEYS; i++) assert_int_equal(lookup(t, tkeys[i]), towner[i]);
    assert_int_equal(lookup(t, "the-admin"), AUTH_ADMIN);
    /* Misses: unknown, a prefix, an extension, a case change, empty. */
    assert_int_equal(lookup(t, "key-three"), AUTH_NONE);
    assert_int_equal(lookup(t, "key-on"), AUTH_NONE);
    assert_int_equal(lookup(t, "key-zero "), AUTH_NONE);
    assert_int_equal(lookup(t, "KEY-ZERO"), AUTH_NONE);
    assert_int_equal(lookup(t, "the-admin2"), AUTH_NONE);
    assert_int_equal(lookup(t, ""), AUTH_NONE);
    /* len, not the NUL, bounds the key. */
    assert_int_equal(auth_lookup(t, "key-zeroXYZ", 8), 0);
    assert_int_equal(auth_lookup(t, "key-zero", 7), AUTH_NONE);
    assert_int_equal(auth_lookup(t, NULL, 0), AUTH_NONE);
    assert_int_equal(auth_lookup(NULL, "key-zero", 8), AUTH_NONE);
    auth_table_free(t);

    /* Without an admin key, nobody is admin; tenants still resolve. */
    t = make_table(0);
    assert_int_equal(lookup(t, "the-admin"), AUTH_NONE);
    assert_int_equal(lookup(t, "key-last"), 3);
    auth_table_free(t);

    /* An empty table with only an admin key. */
    uint8_t admin[AUTH_HASH_LEN];
    auth_hash("root", 4, admin);
    assert_int_equal(auth_table_new(NULL, 0, admin, NULL, &t), 0);
    assert_int_equal(auth_table_size(t), 0);
    assert_int_equal(lookup(t, "root"), AUTH_ADMIN);
    assert_int_equal(lookup(t, "key-zero"), AUTH_NONE);
    auth_table_free(t);
    auth_table_free(NULL);
}

/* The metrics key is its own holder: neither a tenant nor the admin. */
static void test_metrics_key(void **st) {
    (void)st;
    auth_entry e = {.tenant = 0};
    auth_hash("tenant", 6, e.hash);
    uint8_t admin[AUTH_HASH_LEN], metrics[AUTH_HASH_LEN];
    auth_hash("root", 4, admin);
    auth_hash("scraper", 7, metrics);
    auth_table *t = NULL;
    assert_int_equal(auth_table_new(&e, 1, admin, metrics, &t), 0);
    assert_int_equal(lookup(t, "scraper"), AUTH_METRICS);
    assert_int_equal(lookup(t, "root"), AUTH_ADMIN);
    assert_int_equal(lookup(t, "tenant"), 0);
    assert_int_equal(lookup(t, "scraper2"), AUTH_NONE);
    assert_int_equal(auth_table_size(t), 1);
    auth_table_free(t);
    /* Without one, its hash is nobody's. */
    assert_int_equal(auth_table_new(&e, 1, admin, NULL, &t), 0);
    assert_int_equal(lookup(t, "scraper"), AUTH_NONE);
    auth_table_free(t);
    /* It may not equal the admin key or a tenant's. */
    t = (auth_table *)1;
    assert_int_equal(auth_table_new(&e, 1, admin, admin, &t), TS_ERR_INVAL);
    assert_null(t);
    assert_int_equal(auth_table_new(&e, 1, NULL, e.hash, &t), TS_ERR_INVAL);
    assert_null(t);
}

static void test_table_rejects(void **st) {
    (void)st;
    auth_entry e[3];
    auth_hash("a", 1, e[0].hash);
    auth_hash("b", 1, e[1].hash);
    auth_hash("a", 1, e[2].hash);
    e[0].tenant = 0;
    e[1].tenant = 1;
    e[2].tenant = 2;
    auth_table *t = (auth_table *)1;
    /* The same hash for two tenants. */
    assert_int_equal(auth_table_new(e, 3, NULL, NULL, &t), TS_ERR_INVAL);
    assert_null(t);
    /* The same hash twice for one tenant is just as ambiguous a config. */
    e[2].tenant = 0;
    assert_int_equal(auth_table_new(e, 3, NULL, NULL, &t), TS_ERR_INVAL);
    /* A tenant key equal to the admin key. */
    uint8_t admin[AUTH_HASH_LEN];
    auth_hash("b", 1, admin);
    assert_int_equal(auth_table_new(e, 2, admin, NULL, &t), TS_ERR_INVAL);
    assert_null(t);
    /* A negative tenant would collide with AUTH_NONE / AUTH_ADMIN. */
    e[1].tenant = -2;
    assert_int_equal(auth_table_new(e, 2, NULL, NULL, &t), TS_ERR_INVAL);
    e[1].tenant = 1;
    assert_int_equal(auth_table_new(NULL, 2, NULL, NULL, &t), TS_ERR_INVAL);
    assert_int_equal(auth_table_new(e, 2, NULL, NULL, NULL), TS_ERR_INVAL);
    assert_int_equal(auth_table_new(e, 2, NULL, NULL, &t), 0);
    auth_table_free(t);
}

/* ---- Authorization: Bearer -------------------------------------------------- */

static void expect_key(const char *header, const char *want) {
    const char *k = NULL;
    size_t n = 0;
    assert_int_equal(auth_parse_bearer(header, &k, &n), 0);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(k, want, n);
    /* The key points into the header, not into a copy. */
    assert_true(k >= header && k + n <= header + strlen(header));
}

static void expect_reject(const char *header) {
    const char *k = (const char *)1;
    size_t n = 12345;
    assert_int_equal(auth_parse_bearer(header, &k, &n), TS_ERR_AUTH);
    assert_ptr_equal(k, (const char *)1);
    assert_int_equal(n, 12345);
}

static void test_bearer(void **st) {
    (void)st;
    expect_key("Bearer tsk-abc", "tsk-abc");
    expect_key("bearer tsk-abc", "tsk-abc");
    expect_key("BEARER tsk-abc", "tsk-abc");
    expect_key("bEaReR tsk-abc", "tsk-abc");
    expect_key("Bearer    tsk-abc", "tsk-abc");
    expect_key("  Bearer tsk-abc   ", "tsk-abc");
    expect_key("\tBearer\ttsk-abc\t", "tsk-abc");
    expect_key("Bearer a", "a");
    expect_key("Bearer abc+/=.~_-", "abc+/=.~_-");

    char big[AUTH_KEY_MAX + 16];
    memcpy(big, "Bearer ", 7);
    memset(big + 7, 'k', AUTH_KEY_MAX);
    big[7 + AUTH_KEY_MAX] = 0;
    const char *k;
    size_t n;
    assert_int_equal(auth_parse_bearer(big, &k, &n), 0);
    assert_int_equal(n, AUTH_KEY_MAX);
    big[7 + AUTH_KEY_MAX] = 'k';
    big[8 + AUTH_KEY_MAX] = 0;
    expect_reject(big);

    expect_reject(NULL);
    expect_reject("");
    expect_reject("   ");
    expect_reject("Bearer");
    expect_reject("Bearer ");
    expect_reject("Bearer \t ");
    expect_reject("Bearertsk-abc");
    expect_reject("Bear tsk-abc");
    expect_reject("Basic dXNlcjpwYXNz");
    expect_reject("tsk-abc");
    expect_reject("Bearer tsk abc");
    expect_reject("Bearer tsk-abc\r\n");
    expect_reject("Bearer tsk-\x01" "abc");
    expect_reject("Bearer tsk-\x7f");
    expect_reject("Bearer tsk-\xc3\xa9");
    expect_reject("Bearer, tsk-abc");
    assert_int_equal(auth_parse_bearer("Bearer x", NULL, &n), TS_ERR_AUTH);
    assert_int_equal(auth_parse_bearer("Bearer x", &k, NULL), TS_ERR_AUTH);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_hex_round_trip),
        cmocka_unit_test(test_hex_rejects),
        cmocka_unit_test(test_keygen_format),
        cmocka_unit_test(test_keygen_cap),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_table_rejects),
        cmocka_unit_test(test_metrics_key),
        cmocka_unit_test(test_bearer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
