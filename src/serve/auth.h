/*
 * auth.h - API keys: hashing, hex, generation, Bearer parsing, and the table
 * that maps a presented key to its tenant.
 *
 * Keys are never stored or compared in clear. The config holds the SHA-256
 * of each key as 64 hex digits; the server keeps only those digests in an
 * auth_table, and a presented key is hashed once and compared against every
 * digest with CRYPTO_memcmp, without stopping at a match. So the time a
 * lookup takes does not depend on which entry matched, or on how many
 * leading bytes of a wrong key's digest agree with a stored one. What it
 * does leak, and what is not secret: the number of entries (tenants' keys),
 * and whether the key matched at all (the answer itself says that).
 * SHA-256 without a salt is fine here because keys are 256 random bits
 * (auth_keygen): there is no dictionary to precompute against, unlike
 * passwords.
 *
 * The table is built once (at startup or on a reload) and read-only after:
 * any number of threads may call auth_lookup on it at once. It owns copies
 * of its entries; the caller owns the entry array it was built from.
 * Nothing here logs or keeps a presented key.
 */
#ifndef TS_AUTH_H
#define TS_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define AUTH_HASH_LEN   32          /* bytes of SHA-256 */
#define AUTH_HEX_LEN    64          /* hex digits of a hash, without the NUL */
#define AUTH_KEY_PREFIX "tsk-"
#define AUTH_KEY_LEN    47          /* "tsk-" + 43 base64url chars, without the NUL */
#define AUTH_KEY_MAX    512         /* longest key auth_parse_bearer accepts, bytes */

/* auth_lookup's answers besides a tenant index (>= 0). They are negative so
 * that a caller testing `r >= 0` before indexing its tenant array can never
 * mistake the admin or metrics key for a tenant; they are not TS_ERR_* codes. */
#define AUTH_NONE   (-1)            /* no such key */
#define AUTH_ADMIN  (-2)            /* the admin key */
#define AUTH_METRICS (-3)           /* the metrics key: GET /metrics only */

/* SHA-256 of key[0..len). OpenSSL can fail here only if it cannot allocate;
 * then out is zeroed (auth_lookup uses a checked path and fails closed). */
void auth_hash(const char *key, size_t len, uint8_t out[AUTH_HASH_LEN]);

/* Lowercase hex of in[0..n) into out, which must hold 2n + 1 bytes
 * (NUL-terminated). */
void auth_hex_encode(const uint8_t *in, size_t n, char *out);

/* Decode exactly 2n hex digits (either case) from hex, NUL-terminated, into
 * out[0..n). Returns 0, or TS_ERR_INVAL (out unspecified) for a NULL
 * argument, a non-hex character or any other length. */
int auth_hex_decode(const char *hex, uint8_t *out, size_t n);

/* A new key: "tsk-" followed by the unpadded base64url of 32 bytes from
 * RAND_bytes (43 characters), NUL-terminated, in out.
 *   cap: bytes at out; at least AUTH_KEY_LEN + 1.
 * Returns 0, TS_ERR_INVAL if cap is too small, or TS_ERR_RANDOM if the
 * generator could not be seeded (out is then zeroed, never a weak key). */
int auth_keygen(char *out, size_t cap);

/* Find the key in an Authorization header value "Bearer <key>": the scheme
 * in any case, then one or more spaces or tabs, the key, then optional
 * trailing spaces or tabs. The key must be 1..AUTH_KEY_MAX visible ASCII
 * characters (no inner whitespace, no control bytes).
 *   key, len: OUT; point into header_value, not copied.
 * Returns 0, or TS_ERR_AUTH (outputs untouched) for a NULL, empty or
 * malformed value or another scheme. */
int auth_parse_bearer(const char *header_value, const char **key, size_t *len);

typedef struct auth_entry {
    uint8_t hash[AUTH_HASH_LEN];    /* SHA-256 of the key */
    int32_t tenant;                 /* index the lookup returns, >= 0 */
} auth_entry;

typedef struct auth_table auth_table;

/* Build a table from n entries and optional admin and metrics key hashes
 * (NULL: no such key). Every hash, the admin and metrics ones included, must
 * be distinct, since a key maps to exactly one answer. Returns 0 and *out,
 * TS_ERR_INVAL (a NULL argument, a negative tenant, a repeated hash) or
 * TS_ERR_NOMEM; on error *out is NULL. */
int auth_table_new(const auth_entry *entries, size_t n, const uint8_t admin_hash[AUTH_HASH_LEN],
                   const uint8_t metrics_hash[AUTH_HASH_LEN], auth_table **out);
void auth_table_free(auth_table *t);

/* Entries in t, the admin and metrics keys excluded. */
size_t auth_table_size(const auth_table *t);

/* Who holds key[0..len): its tenant index (>= 0), AUTH_ADMIN, AUTH_METRICS
 * or AUTH_NONE. Hashes the key once, then compares with every entry and the
 * admin and metrics hashes in constant time and without early exit (see the
 * top of this file). A NULL table or key gives AUTH_NONE. */
int auth_lookup(const auth_table *t, const char *key, size_t len);

#endif
