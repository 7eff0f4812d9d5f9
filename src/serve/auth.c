/* auth.c - API key hashing, generation, Bearer parsing and lookup; see auth.h.
 *
 * The lookup is the one place where timing matters. It hashes first, so the
 * compared bytes are a digest the attacker cannot steer byte by byte, then
 * visits every entry, folds each CRYPTO_memcmp result into a mask with
 * arithmetic only, and picks the answer with that mask: no branch and no
 * early exit depends on which entry matched. */
#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define RAW_KEY_BYTES 32    /* entropy per key */

struct auth_table {
    auth_entry *entries;    /* n entries, owned */
    size_t n;
    int has_admin;
    uint8_t admin[AUTH_HASH_LEN];
    int has_metrics;
    uint8_t metrics[AUTH_HASH_LEN];
};

/* SHA-256 through EVP; 0 on success. */
static int sha256(const char *key, size_t len, uint8_t out[AUTH_HASH_LEN]) {
    unsigned int outlen = 0;
    if (!key) key = "";
    if (EVP_Digest(key, len, out, &outlen, EVP_sha256(), NULL) != 1 ||
        outlen != AUTH_HASH_LEN)
        return -1;
    return 0;
}

void auth_hash(const char *key, size_t len, uint8_t out[AUTH_HASH_LEN]) {
    if (sha256(key, len, out) != 0) memset(out, 0, AUTH_HASH_LEN);
}

void auth_hex_encode(const uint8_t *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int auth_hex_decode(const char *hex, uint8_t *out, size_t n) {
    if (!hex || !out) return TS_ERR_INVAL;
    /* strnlen: a longer string is rejected without reading all of it. */
    if (strnlen(hex, 2 * n + 1) != 2 * n) return TS_ERR_INVAL;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val(hex[2 * i]), lo = hex_val(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return TS_ERR_INVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int auth_keygen(char *out, size_t cap) {
    if (!out || cap < AUTH_KEY_LEN + 1) return TS_ERR_INVAL;
    unsigned char raw[RAW_KEY_BYTES];
    unsigned char b64[4 * ((RAW_KEY_BYTES + 2) / 3) + 1];   /* 44 + NUL */
    int rc = TS_ERR_RANDOM;
    memset(out, 0, cap);
    if (RAND_bytes(raw, sizeof raw) != 1) goto err;
    /* OpenSSL writes standard, padded base64; base64url differs only in
     * two letters of the alphabet and in dropping the padding. */
    int n = EVP_EncodeBlock(b64, raw, sizeof raw);
    size_t plen = strlen(AUTH_KEY_PREFIX);
    memcpy(out, AUTH_KEY_PREFIX, plen);
    size_t o = plen;
    for (int i = 0; i < n && b64[i] != '='; i++) {
        char c = (char)b64[i];
        out[o++] = c == '+' ? '-' : c == '/' ? '_' : c;
    }
    out[o] = 0;
    rc = o == AUTH_KEY_LEN ? 0 : TS_ERR_RANDOM;
    if (rc != 0) memset(out, 0, cap);
err:
    OPENSSL_cleanse(raw, sizeof raw);
    OPENSSL_cleanse(b64, sizeof b64);
    return rc;
}

static int is_ws(char c) { return c == ' ' || c == '\t'; }

int auth_parse_bearer(const char *v, const char **key, size_t *len) {
    static const char scheme[] = "bearer";
    const size_t slen = sizeof scheme - 1;
    if (!v || !key || !len) return TS_ERR_AUTH;
    while (is_ws(*v)) v++;
    for (size_t i = 0; i < slen; i++) {
        char c = v[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != scheme[i]) return TS_ERR_AUTH;   /* also stops at the NUL */
    }
    v += slen;
    if (!is_ws(*v)) return TS_ERR_AUTH;           /* "Bearerxyz", "Bearer" */
    while (is_ws(*v)) v++;
    const char *k = v;
    while (*v > ' ' && *v < 0x7f) v++;
    size_t n = (size_t)(v - k);
    while (is_ws(*v)) v++;
    if (*v != 0 || n == 0 || n > AUTH_KEY_MAX) return TS_ERR_AUTH;
    *key = k;
    *len = n;
    return 0;
}

/* 1 when both hashes are given and equal. */
static int same_hash(const uint8_t *a, const uint8_t *b) {
    return a && b && memcmp(a, b, AUTH_HASH_LEN) == 0;
}

int auth_table_new(const auth_entry *entries, size_t n, const uint8_t admin_hash[AUTH_HASH_LEN],
                   const uint8_t metrics_hash[AUTH_HASH_LEN], auth_table **out) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (n > 0 && !entries) return TS_ERR_INVAL;
    if (same_hash(admin_hash, metrics_hash)) return TS_ERR_INVAL;
    /* Repeated hashes would make the answer depend on which match the
     * selection keeps; refuse them. O(n^2) once at startup, with n the
     * number of keys: fine for thousands. */
    for (size_t i = 0; i < n; i++) {
        if (entries[i].tenant < 0) return TS_ERR_INVAL;
        if (same_hash(entries[i].hash, admin_hash) || same_hash(entries[i].hash, metrics_hash))
            return TS_ERR_INVAL;
        for (size_t j = 0; j < i; j++)
            if (memcmp(entries[i].hash, entries[j].hash, AUTH_HASH_LEN) == 0)
                return TS_ERR_INVAL;
    }
    int rc = TS_ERR_NOMEM;
    auth_table *t = calloc(1, sizeof *t);
    if (!t) goto err;
    if (n > 0) {
        t->entries = malloc(n * sizeof *t->entries);
        if (!t->entries) goto err;
        memcpy(t->entries, entries, n * sizeof *t->entries);
    }
    t->n = n;
    if (admin_hash) {
        t->has_admin = 1;
        memcpy(t->admin, admin_hash, AUTH_HASH_LEN);
    }
    if (metrics_hash) {
        t->has_metrics = 1;
        memcpy(t->metrics, metrics_hash, AUTH_HASH_LEN);
    }
    *out = t;
    return 0;
err:
    auth_table_free(t);
    return rc;
}

void auth_table_free(auth_table *t) {
    if (!t) return;
    free(t->entries);
    OPENSSL_cleanse(t, sizeof *t);
    free(t);
}

size_t auth_table_size(const auth_table *t) { return t ? t->n : 0; }

/* All ones if a and b are equal, else zero, with no data-dependent branch:
 * CRYPTO_memcmp returns 0 or some nonzero int, and for unsigned d,
 * (d | -d) has its top bit set exactly when d != 0. */
static unsigned eq_mask(const uint8_t *a, const uint8_t *b) {
    unsigned d = (unsigned)CRYPTO_memcmp(a, b, AUTH_HASH_LEN);
    unsigned nonzero = (d | (0u - d)) >> (sizeof d * 8 - 1);
    return nonzero - 1u;
}

/* mask ? a : b, bitwise. */
static int select_int(unsigned mask, int a, int b) {
    return (int)(((unsigned)a & mask) | ((unsigned)b & ~mask));
}

int auth_lookup(const auth_table *t, const char *key, size_t len) {
    uint8_t h[AUTH_HASH_LEN];
    if (!t || !key) return AUTH_NONE;
    if (sha256(key, len, h) != 0) return AUTH_NONE;   /* fail closed */
    int found = AUTH_NONE;
    for (size_t i = 0; i < t->n; i++)
        found = select_int(eq_mask(h, t->entries[i].hash), t->entries[i].tenant, found);
    /* The admin and metrics comparisons always run; has_admin and
     * has_metrics only gate their results, and are not secret (they are
     * fixed by the config). */
    unsigned admin = eq_mask(h, t->admin) & (0u - (unsigned)t->has_admin);
    found = select_int(admin, AUTH_ADMIN, found);
    unsigned metrics = eq_mask(h, t->metrics) & (0u - (unsigned)t->has_metrics);
    found = select_int(metrics, AUTH_METRICS, found);
    OPENSSL_cleanse(h, sizeof h);
    return found;
}
