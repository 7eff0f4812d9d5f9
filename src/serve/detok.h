/*
 * detok.h - turn a request's generated token ids into text a client may be
 * sent: complete UTF-8 only, and never a byte of a stop string.
 *
 * Tokens decode to byte pieces that may split a UTF-8 character, and a stop
 * string may arrive spread over several tokens. So each pushed token's bytes
 * are appended to the request's text, and only the part that is certain is
 * released: text that could still turn out to be the start of a stop string
 * or of an incomplete character is held back until the next token settles
 * it. When a stop string appears, the text is cut right before it and the
 * generation is over. dtk_finish releases whatever is held back at the end
 * (an incomplete character becomes U+FFFD).
 *
 * One dtk per request; it owns its text buffer (grown as needed, bounded by
 * the request's max tokens times the longest piece).
 */
#ifndef TS_DETOK_H
#define TS_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"
#include "tok.h"

#define DTK_MAX_STOPS 4
#define DTK_MAX_STOP_LEN 256

typedef struct dtk {
    const tok *t;
    strbuf text;            /* generated text so far, stop string excluded */
    size_t released;        /* bytes of text already handed out */
    char stops[DTK_MAX_STOPS][DTK_MAX_STOP_LEN];
    size_t stop_len[DTK_MAX_STOPS];
    int n_stops;
    int stopped;            /* a stop string matched: nothing more comes */
    int32_t quiet;          /* pushes left during which stop strings are
                             * neither searched for nor held back: a
                             * request's min_tokens - 1 (vLLM checks stop
                             * strings only from its min_tokens-th token);
                             * 0 after dtk_init, set by the caller */
} dtk;

/* stops: up to DTK_MAX_STOPS non-empty strings of < DTK_MAX_STOP_LEN bytes. */
int dtk_init(dtk *d, const tok *t, const char *const *stops, int n_stops);
void dtk_deinit(dtk *d);

/* Add one generated token. OUT: *out and *n, the newly releasable text (valid
 * until the next call); returns 1 if a stop string ended the text, 0 if
 * not, or a negative code. */
int dtk_push(dtk *d, int32_t id, const char **out, size_t *n);
/* Release everything still held back (generation ended for another reason). */
void dtk_finish(dtk *d, const char **out, size_t *n);

#endif
