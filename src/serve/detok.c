/* detok.c - see detok.h. */
#include "detok.h"

#include <string.h>

#include "err.h"

int dtk_init(dtk *d, const tok *t, const char *const *stops, int n_stops) {
    memset(d, 0, sizeof(*d));
    if (n_stops < 0 || n_stops > DTK_MAX_STOPS) return TS_ERR_INVAL;
    for (int i = 0; i < n_stops; i++) {
        size_t n = strlen(stops[i]);
        if (n == 0 || n >= DTK_MAX_STOP_LEN) return TS_ERR_INVAL;
        memcpy(d->stops[i], stops[i], n + 1);
        d->stop_len[i] = n;
    }
    d->n_stops = n_stops;
    d->t = t;
    /* Allocated up front, so d->text.p is never NULL once this succeeds. */
    return strbuf_reserve(&d->text, 255);
}

void dtk_deinit(dtk *d) {
    strbuf_free(&d->text);
    memset(d, 0, sizeof(*d));
}

static int append(dtk *d, const char *p, size_t n) {
    strbuf_put(&d->text, p, n);
    return strbuf_failed(&d->text) ? TS_ERR_NOMEM : 0;
}

/* Drop the text from byte len on. */
static void cut(dtk *d, size_t len) {
    d->text.len = len;
    d->text.p[len] = '\0';
}

/* Bytes at the end of text that start a UTF-8 character not yet complete. */
static size_t partial_utf8(const char *s, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)s[len - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* Longest suffix of text (not yet released) that is a proper prefix of a
 * stop string: it may still become one. */
static size_t stop_prefix_tail(const dtk *d) {
    size_t best = 0;
    for (int i = 0; i < d->n_stops; i++) {
        size_t max = d->stop_len[i] - 1;
        if (max > d->text.len - d->released) max = d->text.len - d->released;
        for (size_t k = max; k > best; k--)
            if (memcmp(d->text.p + d->text.len - k, d->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

/* First stop string occurrence that ends in the unreleased text. */
static int find_stop(const dtk *d, size_t *at) {
    int found = 0;
    for (int i = 0; i < d->n_stops; i++) {
        size_t from = d->released > d->stop_len[i] ? d->released - d->stop_len[i] + 1 : 0;
        for (size_t p = from; p + d->stop_len[i] <= d->text.len; p++)
            if (memcmp(d->text.p + p, d->stops[i], d->stop_len[i]) == 0) {
                if (!found || p < *at) *at = p;
                found = 1;
                break;
            }
    }
    return found;
}

int dtk_push(dtk *d, int32_t id, const char **out, size_t *n) {
    *out = d->text.p + d->released;
    *n = 0;
    if (d->stopped) return 1;
    char piece[512];
    int k = tok_decode(d->t, id, piece, sizeof(piece));
    if (k < 0) return k;
    int rc = append(d, piece, (size_t)k);
    if (rc) return rc;
    size_t at = 0;
    int quiet = d->quiet > 0;
    if (quiet) d->quiet--;
    if (!quiet && find_stop(d, &at)) {
        /* Held-back text never contains a whole stop string, so the match
         * starts at or after what was released. */
        cut(d, at < d->released ? d->released : at);
        d->stopped = 1;
    }
    size_t hold = d->stopped || quiet ? 0 : stop_prefix_tail(d);
    size_t part = partial_utf8(d->text.p, d->text.len);
    if (part > hold) hold = part;
    size_t ready = d->text.len - hold;
    if (ready > d->released) {
        *out = d->text.p + d->released;
        *n = ready - d->released;
        d->released = ready;
    }
    return d->stopped;
}

void dtk_finish(dtk *d, const char **out, size_t *n) {
    /* An incomplete character still held back becomes U+FFFD. Its bytes may
     * instead have gone out already: a lead byte followed by text that made
     * it invalid is released at once, and a stop string can then cut that
     * text away and leave the lead byte last. Released bytes stay as they
     * were sent; cutting them here would rewrite text the client has. */
    size_t part = partial_utf8(d->text.p, d->text.len);
    if (part && d->text.len - part >= d->released) {
        cut(d, d->text.len - part);
        append(d, "\xEF\xBF\xBD", 3); /* U+FFFD for the cut character */
    }
    *out = d->text.p + d->released;
    *n = d->text.len - d->released;
    d->released = d->text.len;
}
