/*
 * fuzz_tok.c - the tokenizer on arbitrary bytes and arbitrary ids: tok.c's
 * encoder and decoder, tokspecial.c's template encoding and serve/detok.c's
 * streaming detokenizer with stop strings, over three vocabularies (the SPM
 * one mkmodel writes, an SPM one with special and awkward tokens, a GPT-2
 * BPE one; see common.h).
 *
 * Input: one selector byte, then the payload. selector % 3 picks the
 * vocabulary, (selector / 3) % 4 the mode, (selector / 12) % 2 add_bos:
 *   0 encode  the payload is text. Checks tok.h's promises: every id in
 *             range, no control token from text, the count query and the
 *             short-buffer error agree, and decoding gives the input back
 *             (for SPM with each typed U+2581 as a space); and every
 *             pre-tokenizer of pretok.c cuts the text into pieces that
 *             tile it.
 *   1 decode  the payload is ids (2 bytes each, mostly in range, some
 *             not): tok_decode_seq equals the pieces of tok_decode joined,
 *             and a short buffer gives the size needed.
 *   2 special the payload is chat-template text: tks_encode_template; for
 *             vocabularies without a space prefix, control tokens spell
 *             their text and the rest decodes back to the input.
 *   3 detok   up to 4 stop strings, then ids pushed through a dtk: the
 *             released text is a prefix of the decoded text and ends where
 *             the first stop string starts, with an unfinished character
 *             still held back at the end as U+FFFD (see fz_detok).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "detok.h"
#include "err.h"
#include "pretok.h"
#include "tok.h"
#include "tokspecial.h"

/* ---- 0: encode ---------------------------------------------------------- */

static void fz_encode(const tok *t, const char *text, size_t len, int add_bos) {
    int need = -1;
    int rc = tok_encode(t, text, len, add_bos, NULL, 0, &need);
    FZ_CHECK(rc == 0 || rc == TS_ERR_INVAL);
    FZ_CHECK(rc == 0 ? need == 0 : need > 0);
    if (need == 0) {
        FZ_CHECK(len == 0 && !add_bos);
        return;
    }
    int32_t *ids = malloc((size_t)need * sizeof *ids);
    FZ_CHECK(ids != NULL);
    int got = -1;
    FZ_CHECK(tok_encode(t, text, len, add_bos, ids, need, &got) == 0);
    FZ_CHECK(got == need);
    int short_n = -1;
    FZ_CHECK(tok_encode(t, text, len, add_bos, ids, need - 1, &short_n) == TS_ERR_INVAL);
    FZ_CHECK(short_n == need);
    /* The short call may have scribbled on ids: encode again. */
    FZ_CHECK(tok_encode(t, text, len, add_bos, ids, need, &got) == 0 && got == need);

    for (int i = 0; i < got; i++) {
        FZ_CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
        if (add_bos && i == 0) {
            FZ_CHECK(ids[i] == tok_bos(t));
            continue;
        }
        /* User text never becomes a control, unknown or unused token. */
        int ty = tok_type(t, ids[i]);
        FZ_CHECK(ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNKNOWN && ty != TOK_TYPE_UNUSED);
    }
    size_t cap = len + 8, n = 0;
    char *back = malloc(cap);
    FZ_CHECK(back != NULL);
    rc = tok_decode_seq(t, ids, (size_t)got, 1, back, cap, &n);
    FZ_CHECK(rc == 0);
    /* SPM normalizes a typed U+2581 to a space, as sentencepiece does, so
     * the text comes back with spaces there. (Every 0xE2 byte starts a
     * character for the encoder too: it is never a continuation byte.) */
    char *want = malloc(len + 1);
    FZ_CHECK(want != NULL);
    size_t wn = 0;
    for (size_t i = 0; i < len;) {
        if (tok_model(t) == TOK_MODEL_SPM && i + 3 <= len && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
            want[wn++] = ' ';
            i += 3;
        } else {
            want[wn++] = text[i++];
        }
    }
    FZ_CHECK(n == wn && memcmp(back, want, wn) == 0);
    free(want);
    free(back);
    free(ids);
}

/* Every pre-tokenizer on the same text: the pieces are non-empty and tile
 * it exactly, in order (pretok.h), whatever the bytes. */
static int fz_piece(void *ctx, size_t off, size_t len) {
    size_t *at = ctx;
    FZ_CHECK(len > 0 && off == *at);
    *at = off + len;
    return 0;
}

static void fz_pretok(const char *text, size_t len) {
    static pretok *all[64];
    static int n = -1;
    if (n < 0) {
        n = 0;
        for (const char *const *name = pretok_names(); *name && n < 64; name++)
            FZ_CHECK(pretok_new(*name, &all[n++], NULL, 0) == 0);
    }
    for (int i = 0; i < n; i++) {
        size_t at = 0;
        FZ_CHECK(pretok_split(all[i], text, len, fz_piece, &at) == 0);
        FZ_CHECK(at == len);
    }
}

/* ---- 1: decode ---------------------------------------------------------- */

static int32_t id_at(const tok *t, const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return (int32_t)(v % (uint32_t)(tok_n_vocab(t) + 4)) - 2;
}

static void fz_decode(const tok *t, const uint8_t *p, size_t len) {
    size_t n = len / 2;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    FZ_CHECK(ids != NULL);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = id_at(t, p + 2 * i);
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t)) bad = 1;
    }
    size_t pmax = tok_piece_max(t), cap = n * pmax, got = 0;
    char *buf = malloc(cap ? cap : 1), *ref = malloc(cap ? cap : 1);
    FZ_CHECK(buf && ref);
    int rc = tok_decode_seq(t, ids, n, 0, buf, cap, &got);
    if (bad) {
        FZ_CHECK(rc == TS_ERR_TOK_RANGE);
    } else {
        FZ_CHECK(rc == 0 && got <= cap);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            int k = tok_decode(t, ids[i], ref + at, pmax);
            FZ_CHECK(k >= 0 && (size_t)k <= pmax);
            if (k > 0) FZ_CHECK(tok_decode(t, ids[i], ref + at, (size_t)k - 1) == TS_ERR_INVAL);
            at += (size_t)k;
        }
        FZ_CHECK(at == got && memcmp(ref, buf, got) == 0);
        if (got > 0) {
            size_t need = 0;
            FZ_CHECK(tok_decode_seq(t, ids, n, 0, buf, got - 1, &need) == TS_ERR_INVAL);
            FZ_CHECK(need == got);
        }
        /* strip_prefix drops at most the one leading space. */
        size_t stripped = 0;
        FZ_CHECK(tok_decode_seq(t, ids, n, 1, buf, cap, &stripped) == 0);
        FZ_CHECK(stripped == got || (stripped + 1 == got && ref[0] == ' '));
    }
    free(buf);
    free(ref);
    free(ids);
}

/* ---- 2: special tokens in template text --------------------------------- */

static const tks_set *specials(int which) {
    static tks_set *sets[FZ_N_TOKS];
    if (!sets[which]) FZ_CHECK(tks_set_new(fz_tok(which), &sets[which]) == 0);
    return sets[which];
}

static int has_space_mark(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, "\xe2\x96\x81", 3) == 0) return 1;
    return 0;
}

static void fz_special(int which, const char *text, size_t len) {
    const tok *t = fz_tok(which);
    tks_ids ids = {NULL, 0, 0};
    int rc = tks_encode_template(specials(which), text, len, &ids);
    FZ_CHECK(rc == 0);
    for (int i = 0; i < ids.n; i++) FZ_CHECK(ids.p[i] >= 0 && ids.p[i] < tok_n_vocab(t));
    /* Special tokens stand for their text, the rest decodes to itself. An
     * SPM space prefix would add a space per plain run, and an SPM
     * user-defined token matched by its text decodes U+2581 as a space, so
     * those cases are left out. */
    if (!tok_add_space_prefix(t) && !(tok_model(t) == TOK_MODEL_SPM && has_space_mark(text, len))) {
        char *back = malloc(len + 1);
        FZ_CHECK(back != NULL);
        size_t at = 0;
        for (int i = 0; i < ids.n; i++) {
            size_t n;
            const char *p;
            char piece[4096];
            if (tok_is_control(t, ids.p[i])) {
                p = tok_text(t, ids.p[i], &n);
            } else {
                int k = tok_decode(t, ids.p[i], piece, sizeof piece);
                FZ_CHECK(k >= 0);
                p = piece;
                n = (size_t)k;
            }
            FZ_CHECK(at + n <= len && memcmp(text + at, p, n) == 0);
            memcpy(back + at, p, n);
            at += n;
        }
        FZ_CHECK(at == len);
        free(back);
    }
    free(ids.p);
}

/* ---- 3: streaming detokenization with stop strings ---------------------- */

static const char *find(const char *h, size_t hn, const char *s, size_t sn) {
    for (size_t i = 0; i + sn <= hn; i++)
        if (memcmp(h + i, s, sn) == 0) return h + i;
    return NULL;
}

/* Bytes at the end of s[0..n) that begin a character without all its
 * continuation bytes: what dtk_finish turns into U+FFFD (detok.h). */
static size_t trailing_partial(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

/* The reference: decode every id the dtk accepted; after each, if a stop
 * string occurs in the text, generation ends and the text is cut where the
 * earliest occurrence starts (all of them end in the last piece, or the
 * previous one would have stopped). A trailing incomplete character not
 * yet released then becomes U+FFFD. The dtk must release exactly that, in order, never a
 * byte more, and over valid UTF-8 text with valid UTF-8 stop strings never
 * half a character. */
static void fz_detok(const tok *t, const uint8_t *p, size_t len) {
    if (len < 1) return;
    char stop_buf[DTK_MAX_STOPS][17];
    const char *stops[DTK_MAX_STOPS];
    int n_stops = p[0] % (DTK_MAX_STOPS + 1), utf8_stops = 1;
    size_t at = 1;
    for (int i = 0; i < n_stops; i++) {
        if (at >= len) return;
        size_t n = 1 + p[at++] % 16;
        if (at + n > len) return;
        memcpy(stop_buf[i], p + at, n);
        stop_buf[i][n] = 0;
        stops[i] = stop_buf[i];
        utf8_stops &= fz_utf8_valid(stops[i], strlen(stops[i]));
        at += n;
    }
    dtk d;
    if (dtk_init(&d, t, stops, n_stops) < 0) {
        /* Only an empty stop string (a NUL first) is refused. */
        int empty = 0;
        for (int i = 0; i < n_stops; i++) empty |= stops[i][0] == 0;
        FZ_CHECK(empty);
        dtk_deinit(&d);
        return;
    }
    size_t n_ids = (len - at) / 2, pmax = tok_piece_max(t);
    char *full = malloc(n_ids * pmax + 4), *out = malloc(n_ids * pmax + 4);
    FZ_CHECK(full && out);
    size_t full_n = 0, out_n = 0, cut = 0;
    int stopped = 0;
    for (size_t i = 0; i < n_ids; i++) {
        int32_t id = id_at(t, p + at + 2 * i);
        const char *r;
        size_t rn;
        int rc = dtk_push(&d, id, &r, &rn);
        if (stopped) {
            FZ_CHECK(rc == 1 && rn == 0);
            continue;
        }
        if (id < 0 || id >= tok_n_vocab(t)) {
            FZ_CHECK(rc == TS_ERR_TOK_RANGE && rn == 0);
            continue;
        }
        FZ_CHECK(rc == 0 || rc == 1);
        int k = tok_decode(t, id, full + full_n, pmax);
        FZ_CHECK(k >= 0);
        full_n += (size_t)k;
        const char *first = NULL;
        for (int s = 0; s < n_stops; s++) {
            const char *f = find(full, full_n, stops[s], strlen(stops[s]));
            if (f && (!first || f < first)) first = f;
        }
        FZ_CHECK(rc == (first != NULL));
        stopped = rc;
        cut = stopped ? (size_t)(first - full) : full_n;
        memcpy(out + out_n, r, rn);
        out_n += rn;
        FZ_CHECK(out_n <= cut && memcmp(out, full, out_n) == 0);
        /* Over valid text (bar an unfinished last character), what is
         * released ends on a character boundary. */
        if (utf8_stops && !stopped && fz_utf8_valid(full, full_n - trailing_partial(full, full_n)))
            FZ_CHECK(trailing_partial(out, out_n) == 0);
    }
    const char *r;
    size_t rn, before = out_n;
    dtk_finish(&d, &r, &rn);
    memcpy(out + out_n, r, rn);
    out_n += rn;
    /* Bytes already released stay as they were sent. */
    size_t part = trailing_partial(full, cut);
    if (cut - part < before) part = 0;
    FZ_CHECK(out_n == cut - part + (part ? 3 : 0));
    FZ_CHECK(memcmp(out, full, cut - part) == 0);
    if (part) FZ_CHECK(memcmp(out + cut - part, "\xEF\xBF\xBD", 3) == 0);
    free(full);
    free(out);
    dtk_deinit(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % FZ_N_TOKS, mode = (data[0] / FZ_N_TOKS) % 4;
    int add_bos = (data[0] / (FZ_N_TOKS * 4)) & 1;
    const tok *t = fz_tok(which);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    switch (mode) {
    case 0:
        fz_encode(t, text, len, add_bos);
        fz_pretok(text, len);
        break;
    case 1: fz_decode(t, data + 1, len); break;
    case 2: fz_special(which, text, len); break;
    default: fz_detok(t, data + 1, len); break;
    }
    return 0;
}
