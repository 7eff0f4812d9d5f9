/*
 * strbuf.h - a growable text buffer, the one string builder of tessera.
 *
 * A strbuf owns its bytes: p is NUL-terminated whenever len > 0 (or after any
 * append), and every append may move p, so never keep a pointer into it
 * across an append. An allocation failure is sticky: the buffer stops
 * growing, every later append is a no-op, and strbuf_failed() says so once at
 * the end, so builders append freely and check once. strbuf_steal hands the
 * bytes to the caller, who frees them with free().
 */
#ifndef TS_STRBUF_H
#define TS_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct strbuf {
    char *p;            /* bytes, NUL-terminated; NULL until the first append */
    size_t len;         /* bytes used, without the NUL */
    size_t cap;         /* bytes allocated */
    int failed;         /* sticky: an allocation failed, the text is cut */
} strbuf;

#define STRBUF_INIT {NULL, 0, 0, 0}

/* Append n bytes of s (which may hold NULs). */
void strbuf_put(strbuf *b, const char *s, size_t n);
/* Append a C string. */
void strbuf_puts(strbuf *b, const char *s);
/* Append printf output. */
__attribute__((format(printf, 2, 3)))
void strbuf_printf(strbuf *b, const char *fmt, ...);
__attribute__((format(printf, 2, 0)))
void strbuf_vprintf(strbuf *b, const char *fmt, va_list ap);
/* Room for at least n more bytes (and the NUL); 0 or TS_ERR_NOMEM. */
int strbuf_reserve(strbuf *b, size_t n);
/* 1 when an append failed since the last strbuf_free/strbuf_steal. */
static inline int strbuf_failed(const strbuf *b) { return b->failed; }
/* Forget the text but keep the allocation. */
void strbuf_clear(strbuf *b);
/* Free the bytes and reset to STRBUF_INIT. */
void strbuf_free(strbuf *b);
/* The text (malloc'd, "" when empty) for the caller to free; NULL when an
 * append failed or memory ran out. The buffer is reset either way. */
char *strbuf_steal(strbuf *b, size_t *len);

#endif
