/* utf8.c - UTF-8 decoding, encoding, validation and cutting; see utf8.h. */
#include "utf8.h"

/*
 * The one decoder. The lead byte fixes the length and the allowed range of
 * the second byte (Table 3-7): E0 and F0 narrow it from below, which is what
 * excludes overlong forms; ED narrows it from above (no surrogates), F4 too
 * (nothing past U+10FFFF); C0, C1 and F5..FF never lead. Checking the second
 * byte against that range, and the rest against 80..BF, accepts exactly the
 * well-formed sequences, and the byte where the check first fails ends the
 * maximal subpart, so its offset is the subpart's length.
 */
static size_t decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    *cp = UTF8_INVALID;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;      /* allowed range of the second byte */
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;       /* overlong */
        if (c == 0xED) hi = 0x9F;       /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;       /* overlong */
        if (c == 0xF4) hi = 0x8F;       /* above U+10FFFF */
    } else {
        return 1;                       /* 80..C1, F5..FF never lead */
    }
    for (size_t i = 1; i < len; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) return i;   /* truncated or ill-formed */
        v = (v << 6) | (s[i] & 0x3F);
        lo = 0x80, hi = 0xBF;           /* only the second byte is narrowed */
    }
    *cp = v;
    return len;
}

size_t utf8_decode(const char *s, size_t n, uint32_t *cp) {
    size_t len = decode((const unsigned char *)s, n, cp);
    return *cp == UTF8_INVALID ? 1 : len;
}

size_t utf8_decode_subpart(const char *s, size_t n, uint32_t *cp) {
    return decode((const unsigned char *)s, n, cp);
}

size_t utf8_encode(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = decode(u + i, n - i, &cp);
        if (cp == UTF8_INVALID) return i;
        i += k;
    }
    return n;
}

size_t utf8_cut(const char *s, size_t n, size_t max) {
    if (n <= max) return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) max--;
    return max;
}
