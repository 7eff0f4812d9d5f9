/*
 * buf.h - a growable text buffer, the one string builder of tessera.
 *
 * A buf owns its bytes: p is NUL-terminated whenever len > 0 (or after any
 * append), and every append may move p, so never keep a pointer into it
 * across an append. An allocation failure is sticky: the buffer stops
 * growing, every later append is a no-op, and buf_failed() says so once at
 * the end, so builders append freely and check once. buf_steal hands the
 * bytes to the caller, who frees them with free().
 */
#ifndef TS_BUF_H
#define TS_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
    char *p;            /* bytes, NUL-terminated; NULL until the first append */
    size_t len;         /* bytes used, without the NUL */
    size_t cap;         /* bytes allocated */
    int failed;         /* sticky: an allocation failed, the text is cut */
} buf;

#define BUF_INIT {NULL, 0, 0, 0}

/* Append n bytes of s (which may hold NULs). */
void buf_put(buf *b, const char *s, size_t n);
/* Append a C string. */
void buf_puts(buf *b, const char *s);
/* Append printf output. */
__attribute__((format(printf, 2, 3)))
void buf_printf(buf *b, const char *fmt, ...);
void buf_vprintf(buf *b, const char *fmt, va_list ap);
/* Room for at least n more bytes (and the NUL); 0 or TS_ERR_NOMEM. */
int buf_reserve(buf *b, size_t n);
/* 1 when an append failed since the last buf_free/buf_steal. */
static inline int buf_failed(const buf *b) { return b->failed; }
/* Forget the text but keep the allocation. */
void buf_clear(buf *b);
/* Free the bytes and reset to BUF_INIT. */
void buf_free(buf *b);
/* The text (malloc'd, "" when empty) for the caller to free; NULL when an
 * append failed or memory ran out. The buffer is reset either way. */
char *buf_steal(buf *b, size_t *len);

#endif
