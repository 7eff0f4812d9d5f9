/*
 * tokspecial.c - template text encoding over tok_encode_ex; see
 * tokspecial.h. The matcher itself lives in tok.c (TOK_ENC_PARSE_SPECIAL),
 * so plain and template text share one definition of what an added token
 * is and which one wins.
 */
#include "tokspecial.h"

#include <stdlib.h>

#include "err.h"

struct tks_set {
    const tok *t;
};

int tks_set_new(const tok *t, tks_set **out) {
    *out = NULL;
    tks_set *s = calloc(1, sizeof *s);
    if (!s) return TS_ERR_NOMEM;
    s->t = t;
    *out = s;
    return 0;
}

void tks_set_free(tks_set *s) { free(s); }

/* Room for at least `more` further ids. */
static int ids_reserve(tks_ids *ids, int more) {
    if (ids->n + more <= ids->cap) return 0;
    int cap = (ids->n + more) * 2 + 16;
    int32_t *p = realloc(ids->p, (size_t)cap * sizeof *p);
    if (!p) return TS_ERR_NOMEM;
    ids->p = p;
    ids->cap = cap;
    return 0;
}

/* Append the encoding of text under flags (and spans: tok_encode_spans):
 * a count query, then the fill. */
static int append(const tok *t, const char *text, size_t len, unsigned flags, const tok_span *sp, size_t n_sp,
                  tks_ids *ids) {
    int need = 0;
    /* A first call with no room asks for the count (TS_ERR_INVAL with need).
     * 0 means there is nothing to add (empty text, no BOS): return before
     * ids->p, which may still be NULL, meets pointer arithmetic (NULL + 0
     * is undefined). TS_ERR_INVAL without a count is a real error. */
    int rc = tok_encode_spans(t, text, len, flags, sp, n_sp, NULL, 0, &need);
    if (rc != TS_ERR_INVAL || need == 0) return rc;
    if ((rc = ids_reserve(ids, need))) return rc;
    int got;
    rc = tok_encode_spans(t, text, len, flags, sp, n_sp, ids->p + ids->n, ids->cap - ids->n, &got);
    if (rc) return rc;
    ids->n += got;
    return 0;
}

int tks_encode_text(const tok *t, const char *text, size_t len, int add_bos, tks_ids *ids) {
    return append(t, text, len, add_bos ? TOK_ENC_ADD_BOS : 0, NULL, 0, ids);
}

int tks_encode_template(const tks_set *s, const char *text, size_t len, tks_ids *ids) {
    return append(s->t, text, len, TOK_ENC_PARSE_SPECIAL, NULL, 0, ids);
}

int tks_encode_spans(const tks_set *s, const char *text, size_t len, const tok_span *spans, size_t n_spans,
                     int add_bos, tks_ids *ids) {
    /* No spans is no template text: not "specials anywhere", which is
     * what a NULL list means to tok_encode_spans. */
    static const tok_span none = {0, 0};
    unsigned flags = TOK_ENC_PARSE_SPECIAL | (add_bos ? TOK_ENC_ADD_BOS : 0u);
    return append(s->t, text, len, flags, n_spans ? spans : &none, n_spans, ids);
}
