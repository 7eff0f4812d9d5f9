/* strbuf.c - the growable text buffer; see strbuf.h. */
#include "strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int strbuf_reserve(strbuf *b, size_t n) {
    if (b->failed) return TS_ERR_NOMEM;
    if (b->cap > b->len && n < b->cap - b->len) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len <= n) {
        if (cap > SIZE_MAX / 2 || n >= SIZE_MAX - b->len) goto fail;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) goto fail;
    b->p = p;
    b->cap = cap;
    return 0;
fail:
    b->failed = 1;
    return TS_ERR_NOMEM;
}

void strbuf_put(strbuf *b, const char *s, size_t n) {
    if (strbuf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void strbuf_puts(strbuf *b, const char *s) { strbuf_put(b, s, strlen(s)); }

void strbuf_vprintf(strbuf *b, const char *fmt, va_list ap) {
    if (b->failed) return;
    va_list again;
    va_copy(again, ap);
    size_t room = b->cap > b->len ? b->cap - b->len : 0;
    int k = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    if (k < 0) {
        b->failed = 1;
        if (b->p) b->p[b->len] = '\0';
    } else if ((size_t)k < room) {
        b->len += (size_t)k;
    } else if (strbuf_reserve(b, (size_t)k) == 0) {
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, again);
        b->len += (size_t)k;
    } else if (b->p) {
        b->p[b->len] = '\0';   /* the first try wrote a cut copy past len */
    }
    va_end(again);
}

void strbuf_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void strbuf_clear(strbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

void strbuf_free(strbuf *b) {
    free(b->p);
    *b = (strbuf)STRBUF_INIT;
}

char *strbuf_steal(strbuf *b, size_t *len) {
    if (!b->failed && !b->p) strbuf_put(b, "", 0);
    char *p = b->failed ? NULL : b->p;
    if (len) *len = p ? b->len : 0;
    if (!p) free(b->p);
    *b = (strbuf)STRBUF_INIT;
    return p;
}
