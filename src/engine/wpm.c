/*
 * wpm.c - BERT basic tokenization and greedy WordPiece; see wpm.h.
 *
 * The text is read one code point at a time; a word is collected in a
 * growable buffer that starts with U+2581, so that the word-initial piece
 * "▁" + word[0, end) and a continuation word[start, end) are both plain
 * byte ranges of that buffer, found by the caller's lookup without copying.
 */
#include "wpm.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "unidata.h"
#include "utf8.h"

static const char MARK[] = "\xe2\x96\x81";     /* U+2581 */
#define MARK_LEN 3

typedef struct word {
    char *b;                    /* MARK, then the word's UTF-8 */
    size_t n, cap;              /* bytes */
    size_t *at;                 /* (nc + 1) byte offset of each character in b */
    size_t nc, ccap;            /* characters */
} word;

typedef struct wctx {
    word w;
    int uncased;
    wpm_lookup_fn lookup;
    const void *lctx;
    int32_t unk;
    wpm_emit_fn emit;
    void *ectx;
} wctx;

static int word_push(word *w, uint32_t cp) {
    if (w->n + 4 > w->cap) {
        size_t cap = w->cap * 2 + 64;
        char *b = realloc(w->b, cap);
        if (!b) return TS_ERR_NOMEM;
        w->b = b;
        w->cap = cap;
    }
    if (w->nc + 2 > w->ccap) {
        size_t cap = w->ccap * 2 + 16;
        size_t *at = realloc(w->at, cap * sizeof *at);
        if (!at) return TS_ERR_NOMEM;
        w->at = at;
        w->ccap = cap;
    }
    if (w->n == 0) {
        memcpy(w->b, MARK, MARK_LEN);
        w->n = MARK_LEN;
    }
    w->at[w->nc++] = w->n;
    w->n += utf8_encode(w->b + w->n, cp);
    w->at[w->nc] = w->n;
    return 0;
}

/* Greedy longest-match-first WordPiece of the collected word, then reset. */
static void word_flush(wctx *c) {
    word *w = &c->w;
    if (w->nc == 0) return;
    size_t nc = w->nc;
    w->nc = 0;
    w->n = 0;
    if (nc > WPM_MAX_WORD_CHARS) {
        c->emit(c->ectx, c->unk);
        return;
    }
    /* Ids are buffered so a word that fails half way is one [UNK]. */
    int32_t ids[WPM_MAX_WORD_CHARS];
    size_t n_ids = 0;
    for (size_t start = 0; start < nc;) {
        int32_t id = -1;
        size_t end;
        for (end = nc; end > start; end--) {
            size_t from = start == 0 ? 0 : w->at[start];
            id = c->lookup(c->lctx, w->b + from, w->at[end] - from);
            if (id >= 0) break;
        }
        if (id < 0) {
            c->emit(c->ectx, c->unk);
            return;
        }
        ids[n_ids++] = id;
        start = end;
    }
    for (size_t i = 0; i < n_ids; i++) c->emit(c->ectx, ids[i]);
}

static int is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* A word of one character (CJK ideograph or punctuation). */
static int single(wctx *c, uint32_t cp) {
    word_flush(c);
    int rc = word_push(&c->w, cp);
    if (rc == 0) word_flush(c);
    return rc;
}

/* One normalized character: punctuation stands alone, the rest joins. */
static int feed(wctx *c, uint32_t cp) {
    if (unid_is_punct(cp)) return single(c, cp);
    return word_push(&c->w, cp);
}

int wpm_encode(const char *text, size_t len, int uncased, wpm_lookup_fn lookup, const void *lctx,
               int32_t unk, wpm_emit_fn emit, void *ectx) {
    wctx c;
    memset(&c, 0, sizeof c);
    c.uncased = uncased;
    c.lookup = lookup;
    c.lctx = lctx;
    c.unk = unk;
    c.emit = emit;
    c.ectx = ectx;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        uint32_t cp;
        i += utf8_decode(text + i, len - i, &cp);
        /* An ill-formed byte is dropped, as BERT's _clean_text drops the
         * U+FFFD that decoding it gives. */
        if (cp == 0 || cp == UTF8_INVALID || cp == 0xFFFD || unid_is_other(cp)) continue;
        if (unid_is_space(cp)) {
            word_flush(&c);
        } else if (is_cjk(cp)) {
            /* Before decomposition: a compatibility ideograph maps to a
             * unified one, still a word of its own. */
            uint32_t m[3];
            int k = uncased ? unid_uncased(cp, m) : (m[0] = cp, 1);
            for (int j = 0; j < k && rc == 0; j++) rc = single(&c, m[j]);
        } else if (uncased) {
            uint32_t m[3];
            int k = unid_uncased(cp, m);
            for (int j = 0; j < k && rc == 0; j++) rc = feed(&c, m[j]);
        } else {
            rc = feed(&c, cp);
        }
    }
    if (rc == 0) word_flush(&c);
    free(c.w.b);
    free(c.w.at);
    return rc;
}
