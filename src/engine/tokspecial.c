/* tokspecial.c - special tokens matched by text; see tokspecial.h. */
#include "tokspecial.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

typedef struct special {
    int32_t id;
    const char *text;       /* the tok's token text, not terminated */
    size_t len;
} special;

struct tks_set {
    const tok *t;
    special *sp;            /* (n) longest first, then by id */
    int n;
};

static int cmp_special(const void *a, const void *b) {
    const special *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : (x->id > y->id) - (x->id < y->id);
}

int tks_set_new(const tok *t, tks_set **out) {
    *out = NULL;
    tks_set *s = calloc(1, sizeof *s);
    int nv = tok_n_vocab(t);
    if (!s) return TS_ERR_NOMEM;
    s->t = t;
    s->sp = malloc((size_t)(nv > 0 ? nv : 1) * sizeof *s->sp);
    if (!s->sp) {
        free(s);
        return TS_ERR_NOMEM;
    }
    for (int32_t id = 0; id < nv; id++) {
        int ty = tok_type(t, id);
        size_t len;
        const char *text = tok_text(t, id, &len);
        if ((ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER) && text && len > 0)
            s->sp[s->n++] = (special){id, text, len};
    }
    qsort(s->sp, (size_t)s->n, sizeof *s->sp, cmp_special);
    *out = s;
    return 0;
}

void tks_set_free(tks_set *s) {
    if (!s) return;
    free(s->sp);
    free(s);
}

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

int tks_encode_text(const tok *t, const char *text, size_t len, int add_bos, tks_ids *ids) {
    int need = 0;
    /* A first call with no room asks for the count (TS_ERR_INVAL with need).
     * 0 means there is nothing to add (empty text, no BOS): return before
     * ids->p, which may still be NULL, meets pointer arithmetic (NULL + 0
     * is undefined). TS_ERR_INVAL without a count is a real error. */
    int rc = tok_encode(t, text, len, add_bos, NULL, 0, &need);
    if (rc != TS_ERR_INVAL || need == 0) return rc;
    if ((rc = ids_reserve(ids, need))) return rc;
    int got;
    rc = tok_encode(t, text, len, add_bos, ids->p + ids->n, ids->cap - ids->n, &got);
    if (rc) return rc;
    ids->n += got;
    return 0;
}

/* The special token whose text starts p (avail bytes), longest first. */
static const special *special_at(const tks_set *s, const char *p, size_t avail) {
    for (int k = 0; k < s->n; k++)
        if (s->sp[k].len <= avail && memcmp(p, s->sp[k].text, s->sp[k].len) == 0) return &s->sp[k];
    return NULL;
}

int tks_encode_template(const tks_set *s, const char *text, size_t len, tks_ids *ids) {
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        const special *hit = special_at(s, text + i, len - i);
        if (!hit) {
            i++;
            continue;
        }
        int rc = i > start ? tks_encode_text(s->t, text + start, i - start, 0, ids) : 0;
        if (rc || (rc = ids_reserve(ids, 1))) return rc;
        ids->p[ids->n++] = hit->id;
        i += hit->len;
        start = i;
    }
    return len > start ? tks_encode_text(s->t, text + start, len - start, 0, ids) : 0;
}
