/*
 * test_tok.c - the tokenizers and the synthetic vocabulary.
 *
 * Hand-built vocabularies pin exact ids (SPM merge priority, ties, byte
 * fallback, BOS, the GPT-2 pre-tokenizer's splits and merge ranks); the
 * synthetic vocabulary and random byte strings check the properties that must
 * hold for every input: encode then decode gives the input back, bit for bit,
 * including invalid UTF-8 and NULs, and no read leaves the input (inputs are
 * exact-size heap copies, so ASan sees any overrun). Bad vocabularies, in
 * memory and in GGUF files, must fail with their specific codes.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "err.h"
#include "gguf.h"
#include "pretok.h"
#include "testutil.h"
#include "tok.h"
#include "tokspecial.h"
#include "vocab.h"

#define SP "\xe2\x96\x81"   /* U+2581 */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encode through the size query, as a caller would: the first call must
 * report the exact count, the second must fill exactly that many. */
static int32_t *encode_all(const tok *t, const char *s, size_t n, int bos, int *count) {
    int need = -1;
    int rc = tok_encode(t, s, n, bos, NULL, 0, &need);
    assert_true(need >= 0);
    assert_int_equal(rc, need == 0 ? 0 : TS_ERR_INVAL);
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    assert_non_null(ids);
    int got = -1;
    assert_int_equal(tok_encode(t, s, n, bos, ids, need, &got), 0);
    assert_int_equal(got, need);
    *count = got;
    return ids;
}

/* Encode s and compare with the expected ids. */
static void expect_ids(const tok *t, const char *s, int bos, const int32_t *want, int n_want) {
    int n;
    int32_t *ids = encode_all(t, s, strlen(s), bos, &n);
    if (n != n_want || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        fprintf(stderr, "encoding \"%s\": got", s);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
        fprintf(stderr, ", want");
        for (int i = 0; i < n_want; i++) fprintf(stderr, " %d", (int)want[i]);
        fprintf(stderr, "\n");
        fail();
    }
    free(ids);
}

#define EXPECT(t, s, bos, ...)                                                  \
    do {                                                                        \
        const int32_t want_[] = {__VA_ARGS__};                                  \
        expect_ids(t, s, bos, want_, (int)(sizeof want_ / sizeof want_[0]));    \
    } while (0)

/* Encode then decode two ways (piece by piece, and tok_decode_seq with the
 * prefix stripped) and demand the input back. The input is copied into an
 * exact-size buffer so an overrun is an ASan error. */
static void check_roundtrip(const tok *t, const char *s, size_t n) {
    char *in = malloc(n ? n : 1);
    assert_non_null(in);
    memcpy(in, s, n);
    int cnt;
    int32_t *ids = encode_all(t, in, n, 0, &cnt);
    for (int i = 0; i < cnt; i++) {
        assert_true(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
        assert_false(tok_is_control(t, ids[i]));
    }
    int prefix = tok_model(t) == TOK_MODEL_SPM && tok_add_space_prefix(t) && n > 0;
    /* SPM normalizes a typed U+2581 to a space: expect that back. */
    if (tok_model(t) == TOK_MODEL_SPM) {
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, SP, 3) == 0) {
                in[k++] = ' ';
                i += 3;
            } else {
                in[k++] = s[i++];
            }
        }
        n = k;
    }
    size_t cap = (size_t)cnt * tok_piece_max(t) + 1;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t at = 0;
    for (int i = 0; i < cnt; i++) {
        int r = tok_decode(t, ids[i], buf + at, cap - at);
        assert_true(r >= 0);
        at += (size_t)r;
    }
    assert_int_equal(at, n + (size_t)prefix);
    if (prefix) assert_int_equal(buf[0], ' ');
    assert_memory_equal(buf + prefix, in, n);

    size_t got = 0;
    memset(buf, 0, cap);
    assert_int_equal(tok_decode_seq(t, ids, (size_t)cnt, 1, buf, cap, &got), 0);
    assert_int_equal(got, n);
    assert_memory_equal(buf, in, n);
    free(buf);
    free(ids);
    free(in);
}

static void check_roundtrip_str(const tok *t, const char *s) { check_roundtrip(t, s, strlen(s)); }

/* Texts every tokenizer must round-trip. */
static void roundtrip_suite(const tok *t, uint64_t seed) {
    static const char *fixed[] = {
        "", "a", " ", "  ", "hello world", "Hello, World! 42 times; it's fine.",
        "  leading and trailing  ", "tabs\tand\nnewlines\r\n\n", "h\xc3\xa9llo w\xc3\xb6rld "
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82",
        SP "literal space mark" SP SP, "don't won't I'll we've they're",
        "\xc3", "\xe2\x96", "\xf0\x9f\x99", "\x80\x80\xff\xfe", "\xed\xa0\x80",
        "\xc0\xaf", "\xe0\x80\xaf", "\xf4\x90\x80\x80", "a\xe2\x96\x81", "<s></s><unk><0x41>",
        "The river town woke slowly in the cold months.",
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) check_roundtrip_str(t, fixed[i]);

    /* All 256 byte values, in order and reversed. */
    char all[512];
    for (int i = 0; i < 256; i++) {
        all[i] = (char)i;
        all[511 - i] = (char)i;
    }
    check_roundtrip(t, all, sizeof all);

    /* Random byte strings, and random mixes of ASCII words and multi-byte
     * characters (which make merges happen next to invalid bytes). */
    static const char *atoms[] = {"the", " ", "a", "e", "\xc3\xa9", SP, "\xe6\x97\xa5",
                                  "\xf0\x9f\x99\x82", "\x00", "\xff", "\xe2", "'s", "\n",
                                  "42", "ing", " river", ".", "\xe2\x96"};
    static const size_t atom_len[] = {3, 1, 1, 1, 2, 3, 3, 4, 1, 1, 1, 2, 1, 2, 3, 6, 1, 2};
    char buf[600];
    for (int r = 0; r < 400; r++) {
        size_t n = (size_t)(rng_next(&seed) % 200);
        for (size_t i = 0; i < n; i++) buf[i] = (char)rng_next(&seed);
        check_roundtrip(t, buf, n);
        size_t m = 0;
        size_t k = (size_t)(rng_next(&seed) % 60);
        for (size_t i = 0; i < k; i++) {
            size_t a = (size_t)(rng_next(&seed) % (sizeof atoms / sizeof atoms[0]));
            memcpy(buf + m, atoms[a], atom_len[a]);
            m += atom_len[a];
        }
        check_roundtrip(t, buf, m);
    }
}

/* ---- a hand-built SPM vocabulary ------------------------------------------ */

typedef struct hand {
    const char *text[400];
    float score[400];
    int32_t type[400];
    char bytes[256][8];
    uint32_t n;
} hand;

/* 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, as llama vocabularies do. */
static void hand_init(hand *h) {
    memset(h, 0, sizeof *h);
    h->text[0] = "<unk>";
    h->type[0] = TOK_TYPE_UNKNOWN;
    h->text[1] = "<s>";
    h->type[1] = TOK_TYPE_CONTROL;
    h->text[2] = "</s>";
    h->type[2] = TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(h->bytes[b], sizeof h->bytes[b], "<0x%02X>", b);
        h->text[3 + b] = h->bytes[b];
        h->type[3 + b] = TOK_TYPE_BYTE;
    }
    h->n = 259;
}

static int32_t hand_add(hand *h, const char *text, float score) {
    h->text[h->n] = text;
    h->score[h->n] = score;
    h->type[h->n] = TOK_TYPE_NORMAL;
    return (int32_t)h->n++;
}

static tok_spec hand_spec(const hand *h, int prefix) {
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_SPM;
    s.n_vocab = h->n;
    s.tokens = h->text;
    s.scores = h->score;
    s.types = h->type;
    s.unk = 0;
    s.bos = 1;
    s.eos = 2;
    s.add_bos = 1;
    s.add_space_prefix = prefix;
    return s;
}

static tok *hand_tok(const hand *h, int prefix) {
    tok_spec s = hand_spec(h, prefix);
    tok *t = NULL;
    char err[256];
    int rc = tok_new(&s, &t, err, sizeof err);
    if (rc) fprintf(stderr, "tok_new: %s\n", err);
    assert_int_equal(rc, 0);
    return t;
}

#define BYTE(b) (3 + (b))

/* The ids the hand vocabulary below assigns. */
enum { H_SP = 259, H_A, H_B, H_C, H_AB, H_BC, H_AA, H_SPA, H_LT, H_S, H_GT, H_LTS };

static void hand_pieces(hand *h) {
    hand_init(h);
    hand_add(h, SP, -1);        /* 259 */
    hand_add(h, "a", -2);       /* 260 */
    hand_add(h, "b", -3);       /* 261 */
    hand_add(h, "c", -4);       /* 262 */
    hand_add(h, "ab", -10);     /* 263 */
    hand_add(h, "bc", -5);      /* 264: outranks "ab" */
    hand_add(h, "aa", -6);      /* 265 */
    hand_add(h, SP "a", -30);   /* 266: outranked by "ab" */
    hand_add(h, "<", -40);      /* 267 */
    hand_add(h, "s", -41);      /* 268 */
    hand_add(h, ">", -42);      /* 269 */
    hand_add(h, "<s", -43);     /* 270 */
}

static void test_spm_merge_priority(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    tok *t = hand_tok(&h, 0);
    EXPECT(t, "abc", 0, H_A, H_BC);             /* higher score wins, not position */
    EXPECT(t, "cab", 0, H_C, H_AB);
    EXPECT(t, "aaa", 0, H_AA, H_A);             /* equal scores: leftmost first */
    EXPECT(t, "aaaa", 0, H_AA, H_AA);
    EXPECT(t, " a", 0, H_SPA);
    /* "<s>" typed by a user is text, never the control token. */
    EXPECT(t, "<s>", 0, H_LTS, H_GT);
    tok_free(t);

    t = hand_tok(&h, 1);
    EXPECT(t, "a", 0, H_SPA);                   /* prefix joins the first word */
    EXPECT(t, "ab", 0, H_SP, H_AB);             /* "ab" outranks "\u2581a" */
    EXPECT(t, "a", 1, 1, H_SPA);                /* BOS first when asked */
    EXPECT(t, "", 1, 1);                        /* empty text: only BOS, no prefix */
    int n = -1;
    assert_int_equal(tok_encode(t, "", 0, 0, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
    tok_free(t);
}

static void test_spm_byte_fallback(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    tok *t = hand_tok(&h, 0);
    EXPECT(t, "ad", 0, H_A, BYTE('d'));
    EXPECT(t, "\xc3\xa9", 0, BYTE(0xC3), BYTE(0xA9));
    EXPECT(t, "\xff" "a", 0, BYTE(0xFF), H_A);  /* invalid byte: one character */
    EXPECT(t, "\xc3" "a", 0, BYTE(0xC3), H_A);  /* truncated sequence: same */
    /* A typed U+2581 is normalized text like a space, as in sentencepiece
     * and llama.cpp: it merges into the "\u2581a" piece. */
    EXPECT(t, SP "a", 0, 266);
    EXPECT(t, " a", 0, 266);
    const char nul[] = {'a', 0, 'b'};
    int cnt;
    int32_t *ids = encode_all(t, nul, 3, 0, &cnt);
    assert_int_equal(cnt, 3);
    assert_int_equal(ids[0], H_A);
    assert_int_equal(ids[1], BYTE(0));
    assert_int_equal(ids[2], H_B);
    free(ids);
    char c;
    assert_int_equal(tok_decode(t, BYTE(0x41), &c, 1), 1);
    assert_int_equal(c, 'A');
    tok_free(t);

    /* Without a U+2581 token a space falls back to the bytes of the
     * normalized text, U+2581's three, not to <0x20> (sentencepiece and
     * llama.cpp agree); they decode to U+2581. */
    hand_init(&h);
    int32_t a = hand_add(&h, "a", -1);
    t = hand_tok(&h, 1);
    EXPECT(t, "a a", 0, BYTE(0xE2), BYTE(0x96), BYTE(0x81), a, BYTE(0xE2), BYTE(0x96), BYTE(0x81), a);
    {
        const int32_t fb[] = {BYTE(0xE2), BYTE(0x96), BYTE(0x81), a};
        char out[8];
        size_t got;
        assert_int_equal(tok_decode_seq(t, fb, 4, 1, out, sizeof out, &got), 0);
        assert_int_equal(got, 4);
        assert_memory_equal(out, SP "a", 4);
    }
    tok_free(t);
    /* ...but a token that starts with U+2581 still absorbs it. */
    hand_init(&h);
    a = hand_add(&h, "a", -1);
    int32_t spa = hand_add(&h, SP "a", -2);
    t = hand_tok(&h, 1);
    EXPECT(t, "a a", 0, spa, spa);
    tok_free(t);
}

static void test_spm_hand_roundtrip(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    for (int prefix = 0; prefix <= 1; prefix++) {
        tok *t = hand_tok(&h, prefix);
        roundtrip_suite(t, 11 + (uint64_t)prefix);
        tok_free(t);
    }
}

/* ---- the synthetic vocabulary -------------------------------------------- */

static tok *synth_tok(const vocab_synth_out *v, int prefix) {
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_SPM;
    s.n_vocab = v->n;
    s.tokens = (const char *const *)v->tokens;
    s.scores = v->scores;
    s.types = v->types;
    s.unk = v->unk;
    s.bos = v->bos;
    s.eos = v->eos;
    s.add_bos = 1;
    s.add_space_prefix = prefix;
    tok *t = NULL;
    char err[256];
    int rc = tok_new(&s, &t, err, sizeof err);
    if (rc) fprintf(stderr, "tok_new: %s\n", err);
    assert_int_equal(rc, 0);
    return t;
}

static void test_synth_layout_and_determinism(void **state) {
    (void)state;
    const uint32_t sizes[] = {vocab_synth_min(), 300, 512, 32000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint32_t n = sizes[k];
        vocab_synth_out a, b;
        double t0 = now_s();
        assert_int_equal(vocab_synth(n, &a), 0);
        double dt = now_s() - t0;
        if (n == 32000) fprintf(stderr, "vocab_synth(32000): %.3f s\n", dt);
        assert_int_equal(vocab_synth(n, &b), 0);
        assert_int_equal(a.n, n);
        assert_string_equal(a.tokens[0], "<unk>");
        assert_string_equal(a.tokens[1], "<s>");
        assert_string_equal(a.tokens[2], "</s>");
        assert_string_equal(a.tokens[3], "<0x00>");
        assert_string_equal(a.tokens[3 + 0x41], "<0x41>");
        assert_string_equal(a.tokens[258], "<0xFF>");
        assert_int_equal(a.types[0], TOK_TYPE_UNKNOWN);
        assert_int_equal(a.types[1], TOK_TYPE_CONTROL);
        assert_int_equal(a.types[2], TOK_TYPE_CONTROL);
        for (uint32_t i = 3; i < 259; i++) assert_int_equal(a.types[i], TOK_TYPE_BYTE);
        for (uint32_t i = 0; i < n; i++) {
            assert_string_equal(a.tokens[i], b.tokens[i]);
            assert_true(a.scores[i] == b.scores[i]);
            assert_int_equal(a.types[i], b.types[i]);
            if (i >= VOCAB_FIRST_PIECE) {
                assert_int_equal(a.types[i], TOK_TYPE_NORMAL);
                assert_true(a.scores[i] == -(float)(i - VOCAB_FIRST_PIECE));
                size_t len = strlen(a.tokens[i]);
                assert_true(len >= 1 && len <= VOCAB_PIECE_MAX);
                /* U+2581 only at the start, as whitespace splitting makes. */
                assert_null(strstr(a.tokens[i] + 1, SP));
            }
        }
        /* No duplicate pieces: a hash-free check via the tokenizer's own
         * lookup, which returns the first id with a text. */
        tok *t = synth_tok(&a, 0);
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(tok_find(t, a.tokens[i], strlen(a.tokens[i])), (int32_t)i);
        tok_free(t);
        vocab_synth_free(&a);
        vocab_synth_free(&b);
    }
    /* The corpus made real merges: common English pieces exist. */
    vocab_synth_out v;
    assert_int_equal(vocab_synth(2000, &v), 0);
    tok *t = synth_tok(&v, 0);
    assert_true(tok_find(t, SP "the", 4) >= VOCAB_FIRST_PIECE);
    assert_true(tok_find(t, SP "and", 4) >= VOCAB_FIRST_PIECE);
    tok_free(t);
    vocab_synth_free(&v);
}

static void test_synth_limits(void **state) {
    (void)state;
    vocab_synth_out v;
    uint32_t min = vocab_synth_min();
    assert_true(min > 259 && min <= 300);   /* mkmodel accepts --vocab 300 */
    assert_int_equal(vocab_synth(min - 1, &v), TS_ERR_INVAL);
    assert_null(v.tokens);
    assert_int_equal(vocab_synth(0, &v), TS_ERR_INVAL);
    assert_int_equal(vocab_synth(VOCAB_N_MAX + 1, &v), TS_ERR_INVAL);
    assert_int_equal(vocab_synth(100, NULL), TS_ERR_INVAL);
    assert_int_equal(vocab_synth(min, &v), 0);
    vocab_synth_free(&v);
    vocab_synth_free(&v);   /* idempotent */
}

/* Encoding a piece's own text (spaces for U+2581, no prefix) must give
 * exactly that piece: every piece is reachable by merges. */
static void check_reachable(uint32_t n) {
    vocab_synth_out v;
    assert_int_equal(vocab_synth(n, &v), 0);
    tok *t = synth_tok(&v, 0);
    int bad = 0;
    for (uint32_t i = VOCAB_FIRST_PIECE; i < n; i++) {
        char text[64];
        size_t k = 0;
        for (const char *s = v.tokens[i]; *s;) {
            if (strncmp(s, SP, 3) == 0) {
                text[k++] = ' ';
                s += 3;
            } else {
                text[k++] = *s++;
            }
        }
        int32_t ids[64];
        int cnt = 0;
        assert_int_equal(tok_encode(t, text, k, 0, ids, 64, &cnt), 0);
        if (cnt != 1 || ids[0] != (int32_t)i) {
            if (bad++ < 5) fprintf(stderr, "piece %u \"%s\" encodes to %d ids\n", i, v.tokens[i], cnt);
        }
    }
    assert_int_equal(bad, 0);
    tok_free(t);
    vocab_synth_free(&v);
}

static void test_synth_reachable(void **state) {
    (void)state;
    check_reachable(vocab_synth_min());
    check_reachable(512);
    check_reachable(32000);
}

static void test_synth_roundtrip(void **state) {
    (void)state;
    const uint32_t sizes[] = {512, 32000};
    for (size_t k = 0; k < 2; k++) {
        vocab_synth_out v;
        assert_int_equal(vocab_synth(sizes[k], &v), 0);
        for (int prefix = 0; prefix <= 1; prefix++) {
            tok *t = synth_tok(&v, prefix);
            roundtrip_suite(t, 100 * k + (uint64_t)prefix);
            /* Merges really happen on English text. */
            int cnt;
            const char *s = "the river town woke slowly in the cold months";
            int32_t *ids = encode_all(t, s, strlen(s), 0, &cnt);
            assert_true(cnt < (int)strlen(s) / 2);
            free(ids);
            tok_free(t);
        }
        vocab_synth_free(&v);
    }
}

/* The word-by-word SPM path (taken for whitespace-split vocabularies) must
 * match the whole-text path. One extra token with U+2581 inside forces the
 * whole-text path; it cannot occur in the test texts, so both tokenizers
 * must agree on every id. */
static void test_spm_word_split_equivalence(void **state) {
    (void)state;
    vocab_synth_out v;
    assert_int_equal(vocab_synth(4000, &v), 0);
    tok *fast = synth_tok(&v, 1);
    const char **texts = malloc((v.n + 1) * sizeof *texts);
    float *scores = malloc((v.n + 1) * sizeof *scores);
    int32_t *types = malloc((v.n + 1) * sizeof *types);
    assert_true(texts && scores && types);
    for (uint32_t i = 0; i < v.n; i++) {
        texts[i] = v.tokens[i];
        scores[i] = v.scores[i];
        types[i] = v.types[i];
    }
    texts[v.n] = "QQQQ" SP "ZZZZ";
    scores[v.n] = -1e9f;
    types[v.n] = TOK_TYPE_NORMAL;
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_SPM;
    s.n_vocab = v.n + 1;
    s.tokens = texts;
    s.scores = scores;
    s.types = types;
    s.bos = 1;
    s.eos = 2;
    s.unk = 0;
    s.add_space_prefix = 1;
    tok *slow = NULL;
    assert_int_equal(tok_new(&s, &slow, NULL, 0), 0);

    uint64_t seed = 7;
    static const char *words[] = {"the", "river", "  ", " ", "town", "a", "\xc3\xa9", SP, "\xff",
                                  "slowly", "n", "s,", ".", "\n", "e"};
    char buf[800];
    for (int r = 0; r < 300; r++) {
        size_t m = 0;
        if (r % 3 == 0) {
            m = (size_t)(rng_next(&seed) % 300);
            for (size_t i = 0; i < m; i++) buf[i] = (char)(rng_next(&seed) % 128);
        } else {
            for (int k = (int)(rng_next(&seed) % 80); k > 0; k--) {
                const char *w = words[rng_next(&seed) % (sizeof words / sizeof words[0])];
                memcpy(buf + m, w, strlen(w));
                m += strlen(w);
            }
        }
        int na, nb;
        int32_t *ia = encode_all(fast, buf, m, 0, &na);
        int32_t *ib = encode_all(slow, buf, m, 0, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(ia, ib, (size_t)na * sizeof *ia);
        free(ia);
        free(ib);
    }
    tok_free(fast);
    tok_free(slow);
    free(texts);
    free(scores);
    free(types);
    vocab_synth_free(&v);
}

/* ---- a hand-built GPT-2 BPE vocabulary ------------------------------------ */

typedef struct bpe_hand {
    char bytes[256][4];         /* bytes_to_unicode characters, token id = byte */
    const char *text[300];
    const char *merges[32];
    uint32_t n, n_merges;
} bpe_hand;

/* An independent bytes_to_unicode, written from GPT-2's encoder.py. */
static void bpe_hand_init(bpe_hand *h) {
    memset(h, 0, sizeof *h);
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = keep ? (unsigned)b : 256u + (unsigned)extra++;
        if (cp < 0x80) {
            h->bytes[b][0] = (char)cp;
        } else {
            h->bytes[b][0] = (char)(0xC0 | (cp >> 6));
            h->bytes[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        h->text[b] = h->bytes[b];
    }
    h->n = 256;
    /* Ġ is the space, Ċ the newline. */
    static const char *merges[][2] = {
        {"h e", "he"},                        /* 256, rank 0 */
        {"l l", "ll"},                        /* 257 */
        {"\xc4\xa0 t", "\xc4\xa0t"},          /* 258 "Ġt" */
        {"\xc4\xa0t he", "\xc4\xa0the"},      /* 259 */
        {"he ll", "hell"},                    /* 260 */
        {"hell o", "hello"},                  /* 261 */
        {"\xc4\xa0 w", "\xc4\xa0w"},          /* 262 */
        {"o r", "or"},                        /* 263 */
        {"\xc4\xa0w or", "\xc4\xa0wor"},      /* 264 */
        {"l d", "ld"},                        /* 265 */
        {"\xc4\xa0wor ld", "\xc4\xa0world"},  /* 266 */
        {"n '", "n'"},                        /* 267: never fires, split */
        {"\xc4\xa0 \xc4\xa0", "\xc4\xa0\xc4\xa0"},  /* 268 "ĠĠ" */
        {"4 2", "42"},                        /* 269 */
        {"\xc4\x8a \xc4\x8a", "\xc4\x8a\xc4\x8a"},  /* 270 "ĊĊ" */
        {"' t", "'t"},                        /* 271: only inside a contraction */
    };
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++) {
        h->merges[h->n_merges++] = merges[i][0];
        h->text[h->n++] = merges[i][1];
    }
    h->merges[h->n_merges++] = "x y";      /* result not a token: ignored */
    h->text[h->n++] = "<|endoftext|>";     /* 272, control */
}

static tok_spec bpe_spec(const bpe_hand *h, int32_t *types) {
    for (uint32_t i = 0; i < h->n; i++) types[i] = TOK_TYPE_NORMAL;
    types[h->n - 1] = TOK_TYPE_CONTROL;
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_BPE;
    s.n_vocab = h->n;
    s.tokens = h->text;
    s.types = types;
    s.merges = h->merges;
    s.n_merges = h->n_merges;
    s.bos = (int32_t)h->n - 1;
    s.eos = (int32_t)h->n - 1;
    s.unk = -1;
    return s;
}

static tok *bpe_tok(const bpe_hand *h) {
    int32_t types[300];
    tok_spec s = bpe_spec(h, types);
    tok *t = NULL;
    char err[256];
    int rc = tok_new(&s, &t, err, sizeof err);
    if (rc) fprintf(stderr, "tok_new: %s\n", err);
    assert_int_equal(rc, 0);
    return t;
}

static void test_bpe_expected_ids(void **state) {
    (void)state;
    bpe_hand h;
    bpe_hand_init(&h);
    tok *t = bpe_tok(&h);
    EXPECT(t, "hello world", 0, 261, 266);
    EXPECT(t, "the", 0, 't', 256);          /* no merge for (t, he) */
    EXPECT(t, " the", 0, 259);              /* (h,e) first, then (Ġ,t), (Ġt,he) */
    EXPECT(t, "hello", 1, 272, 261);        /* BOS */
    /* Contractions split off as one pre-token, so (n, ') never meets but
     * (', t) does; a lone apostrophe is punctuation of its own. */
    EXPECT(t, "don't", 0, 'd', 'o', 'n', 271);
    EXPECT(t, "'tis", 0, 271, 'i', 's');
    /* After a space the regex takes " '" as punctuation before the
     * contraction alternative can start at the apostrophe. */
    EXPECT(t, "x 't", 0, 'x', ' ', '\'', 't');
    EXPECT(t, "o'", 0, 'o', '\'');
    EXPECT(t, "I'll", 0, 'I', '\'', 257);
    /* \s+(?!\S): the last space of a run goes with the next word. */
    EXPECT(t, "a  b", 0, 'a', ' ', ' ', 'b');
    EXPECT(t, "a   b", 0, 'a', 268, ' ', 'b');
    EXPECT(t, "a  ", 0, 'a', 268);
    EXPECT(t, "a \n\nb", 0, 'a', ' ', '\n', '\n', 'b');
    EXPECT(t, "a\n\n", 0, 'a', 270);
    /* Numbers are their own pre-tokens, with an optional leading space. */
    EXPECT(t, " 42", 0, ' ', 269);
    EXPECT(t, "x42", 0, 'x', 269);
    /* Non-ASCII counts as a letter: é stays in the word, ll still merges. */
    EXPECT(t, "h\xc3\xa9llo", 0, 'h', 0xC3, 0xA9, 257, 'o');
    /* The special token's text is just text. */
    EXPECT(t, "<|endoftext|>", 0, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
    /* Pieces decode through the inverse byte table. */
    char buf[16];
    assert_int_equal(tok_decode(t, 259, buf, sizeof buf), 4);
    assert_memory_equal(buf, " the", 4);
    assert_int_equal(tok_decode(t, 268, buf, sizeof buf), 2);
    assert_memory_equal(buf, "  ", 2);
    assert_int_equal(tok_decode(t, 0, buf, sizeof buf), 1);
    assert_int_equal(buf[0], 0);
    assert_int_equal(tok_decode(t, 272, buf, sizeof buf), 0);     /* control */
    assert_int_equal(tok_add_bos(t), 0);
    assert_int_equal(tok_add_space_prefix(t), 0);
    tok_free(t);
}

static void test_bpe_roundtrip(void **state) {
    (void)state;
    bpe_hand h;
    bpe_hand_init(&h);
    tok *t = bpe_tok(&h);
    roundtrip_suite(t, 99);
    tok_free(t);
}


/* ---- pre-tokenizers --------------------------------------------------------- */

/* Tricky texts: contractions in mixed case, CR LF and tab runs, digit runs,
 * punctuation runs, CJK, emoji with modifiers and ZWJ, mixed-case words. */
static const char *const PRETOK_TEXTS[] = {
    "Hello world's 'S 'LL we'RE",
    "a  b\r\n\tc  \n",
    "1234567 x12345 3.14",
    "!!! ...?? --> === (a)",
    "你好世界 日本語カタカナ 한국어",
    "emoji 😀👍🏽 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!",
    "CamelCaseWORDSxyz Ünïcödé",
    "\n\n  x\r\n",
};

/* Expected pieces joined by '|', computed by the published pre_tokenizer of
 * each family (JS regexes, Sequence of Isolated Splits; see
 * tests/ref/tok_ref.mjs) and pinned here. */
static const struct {
    const char *pre;
    int text;
    const char *pieces;
} PRETOK_CASES[] = {
    {"gpt-2", 0, "Hello| world|'s| '|S| '|LL| we|'|RE"},
    {"gpt-2", 1, "a| | b|\r\n|\t|c|  \n"},
    {"gpt-2", 2, "1234567| x|12345| 3|.|14"},
    {"gpt-2", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"gpt-2", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"gpt-2", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"gpt-2", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"gpt-2", 7, "\n\n | x|\r\n"},
    {"llama-bpe", 0, "Hello| world|'s| '|S| '|LL| we|'RE"},
    {"llama-bpe", 1, "a| | b|\r\n|\tc|  \n"},
    {"llama-bpe", 2, "123|456|7| x|123|45| |3|.|14"},
    {"llama-bpe", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"llama-bpe", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"llama-bpe", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"llama-bpe", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"llama-bpe", 7, "\n\n| | x|\r\n"},
    {"qwen2", 0, "Hello| world|'s| '|S| '|LL| we|'RE"},
    {"qwen2", 1, "a| | b|\r\n|\tc|  \n"},
    {"qwen2", 2, "1|2|3|4|5|6|7| x|1|2|3|4|5| |3|.|1|4"},
    {"qwen2", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"qwen2", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"qwen2", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"qwen2", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"qwen2", 7, "\n\n| | x|\r\n"},
    {"deepseek-llm", 0, "Hello| world|'|s| '|S| '|LL| we|'|RE"},
    {"deepseek-llm", 1, "a| | b|\r|\n|\tc|  |\n"},
    {"deepseek-llm", 2, "1234567| x|12345| |3|.|14"},
    {"deepseek-llm", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"deepseek-llm", 4, "你好世界| |日本語カタカナ| |한국어"},
    {"deepseek-llm", 5, "emoji| 😀👍🏽 👨|\xe2\x80\x8d""|👩|\xe2\x80\x8d""|👧|!"},
    {"deepseek-llm", 6, "CamelCaseWORDSxyz| Ü|n|ï|c|ö|d|é"},
    {"deepseek-llm", 7, "\n|\n| | x|\r|\n"},
    {"deepseek-coder", 0, "Hello| world|'|s| '|S| '|LL| we|'|RE"},
    {"deepseek-coder", 1, "a| | b|\r|\n|\tc|  |\n"},
    {"deepseek-coder", 2, "1|2|3|4|5|6|7| x|1|2|3|4|5| |3|.|1|4"},
    {"deepseek-coder", 3, "!!!| ...??| --|> ===| (|a|)"},
    {"deepseek-coder", 4, "你好世界| |日本語カタカナ| |한국어"},
    {"deepseek-coder", 5, "emoji| 😀👍🏽 👨|\xe2\x80\x8d""|👩|\xe2\x80\x8d""|👧|!"},
    {"deepseek-coder", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"deepseek-coder", 7, "\n|\n| | x|\r|\n"},
    {"deepseek-v3", 0, "Hello| world|'s| '|S| '|LL| we|'RE"},
    {"deepseek-v3", 1, "a| | b|\r\n|\tc|  \n"},
    {"deepseek-v3", 2, "123|456|7| x|123|45| |3|.|14"},
    {"deepseek-v3", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"deepseek-v3", 4, "你好世界| |日本語カタカナ| 한국어"},
    {"deepseek-v3", 5, "emoji| 😀👍🏽| 👨|\xe2\x80\x8d""|👩|\xe2\x80\x8d""|👧!"},
    {"deepseek-v3", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"deepseek-v3", 7, "\n\n| | x|\r\n"},
    {"falcon", 0, "Hello| world|'|s| |'|S| |'|LL| we|'|RE"},
    {"falcon", 1, "a| | b|\r\n|\t|c|  \n"},
    {"falcon", 2, "123|456|7| x|123|45| |3|.|14"},
    {"falcon", 3, "!!!| |...??| |-->| |===| |(|a|)"},
    {"falcon", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"falcon", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧|!"},
    {"falcon", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"falcon", 7, "\n\n | x|\r\n"},
    {"starcoder", 0, "Hello| world|'s| '|S| '|LL| we|'|RE"},
    {"starcoder", 1, "a| | b|\r\n|\t|c|  \n"},
    {"starcoder", 2, "1|2|3|4|5|6|7| x|1|2|3|4|5| |3|.|1|4"},
    {"starcoder", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"starcoder", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"starcoder", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"starcoder", 6, "CamelCaseWORDSxyz| Ünïcödé"},
    {"starcoder", 7, "\n\n | x|\r\n"},
    {"gpt-4o", 0, "Hello| world's| '|S| '|LL| we'RE"},
    {"gpt-4o", 1, "a| | b|\r\n|\tc|  \n"},
    {"gpt-4o", 2, "123|456|7| x|123|45| |3|.|14"},
    {"gpt-4o", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"gpt-4o", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"gpt-4o", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"gpt-4o", 6, "Camel|Case|WORDSxyz| Ünïcödé"},
    {"gpt-4o", 7, "\n\n| | x|\r\n"},
    {"tekken", 0, "Hello| world|'s| '|S| '|LL| we|'RE"},
    {"tekken", 1, "a| | b|\r\n|\tc|  \n"},
    {"tekken", 2, "1|2|3|4|5|6|7| x|1|2|3|4|5| |3|.|1|4"},
    {"tekken", 3, "!!!| ...??| -->| ===| (|a|)"},
    {"tekken", 4, "你好世界| 日本語カタカナ| 한국어"},
    {"tekken", 5, "emoji| 😀👍🏽| 👨\xe2\x80\x8d""👩\xe2\x80\x8d""👧!"},
    {"tekken", 6, "Camel|Case|WORDSxyz| Ünïcödé"},
    {"tekken", 7, "\n\n| | x|\r\n"},
};

static int join_piece(void *ctx, size_t off, size_t len) {
    char **bufs = ctx;      /* [0] text, [1] output cursor */
    if (bufs[1][-1] != 0) *bufs[1]++ = '|';
    memcpy(bufs[1], bufs[0] + off, len);
    bufs[1] += len;
    *bufs[1] = 0;
    return 0;
}

/* The pieces of text under p, joined by '|' into out. */
static void split_join(const pretok *p, const char *text, char *out, size_t cap) {
    assert_true(2 * strlen(text) + 2 < cap);
    out[0] = 0;
    out[1] = 0;
    char *bufs[2] = {(char *)text, out + 1};
    assert_int_equal(pretok_split(p, text, strlen(text), join_piece, bufs), 0);
    memmove(out, out + 1, strlen(out + 1) + 1);
}

static void test_pretok_families(void **state) {
    (void)state;
    char out[512], err[256];
    for (size_t i = 0; i < sizeof PRETOK_CASES / sizeof PRETOK_CASES[0]; i++) {
        pretok *p = NULL;
        if (pretok_new(PRETOK_CASES[i].pre, &p, err, sizeof err)) fail_msg("%s: %s", PRETOK_CASES[i].pre, err);
        split_join(p, PRETOK_TEXTS[PRETOK_CASES[i].text], out, sizeof out);
        if (strcmp(out, PRETOK_CASES[i].pieces) != 0)
            fail_msg("%s on text %d:\n  got  %s\n  want %s", PRETOK_CASES[i].pre, PRETOK_CASES[i].text, out,
                     PRETOK_CASES[i].pieces);
        pretok_free(p);
    }
}

static void test_pretok_names(void **state) {
    (void)state;
    char err[256];
    pretok *p = NULL;
    /* Aliases land on their family; a missing name is GPT-2's. */
    const char *alias[][2] = {{NULL, "gpt-2"}, {"", "gpt-2"}, {"default", "gpt-2"}, {"gpt2", "gpt-2"},
                              {"mpt", "gpt-2"}, {"olmo", "gpt-2"}, {"llama3", "llama-bpe"},
                              {"smollm", "starcoder"}, {"command-r", "starcoder"}, {"qwen2", "qwen2"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        assert_int_equal(pretok_new(alias[i][0], &p, err, sizeof err), 0);
        assert_string_equal(pretok_name(p), alias[i][1]);
        pretok_free(p);
    }
    for (const char *const *n = pretok_names(); *n; n++) {
        assert_int_equal(pretok_new(*n, &p, err, sizeof err), 0);
        pretok_free(p);
    }
    assert_int_equal(pretok_new("llama-bpe", &p, err, sizeof err), 0);
    assert_int_equal(pretok_ignore_merges(p), 1);
    pretok_free(p);
    assert_int_equal(pretok_new("no-such-pre", &p, err, sizeof err), TS_ERR_TOK_MODEL);
    assert_null(p);
    assert_non_null(strstr(err, "no-such-pre"));
}

/* Invalid UTF-8 never matches a pattern item: it is cut out as its own
 * piece, and the pieces still tile the input exactly. */
static void test_pretok_invalid_utf8(void **state) {
    (void)state;
    char err[256], out[512];
    for (const char *const *n = pretok_names(); *n; n++) {
        pretok *p = NULL;
        assert_int_equal(pretok_new(*n, &p, err, sizeof err), 0);
        split_join(p, "ab\xff" "cd \xc3 x\xed\xa0\x80y", out, sizeof out);
        size_t k = 0;
        for (size_t i = 0; out[i]; i++)
            if (out[i] != '|') out[k++] = out[i];
        out[k] = 0;
        assert_string_equal(out, "ab\xff" "cd \xc3 x\xed\xa0\x80y");
        pretok_free(p);
    }
    pretok *p = NULL;
    assert_int_equal(pretok_new("gpt-2", &p, err, sizeof err), 0);
    split_join(p, "ab\xff" "cd", out, sizeof out);
    assert_string_equal(out, "ab|\xff|cd");
    pretok_free(p);
}

/* The BPE vocabulary above under another pre-tokenizer: Llama 3 keeps a
 * space in front of punctuation and splits digits in threes; an unknown
 * name is refused with its name in the message. */
static void test_bpe_pre_choice(void **state) {
    (void)state;
    bpe_hand h;
    bpe_hand_init(&h);
    int32_t types[300];
    tok_spec s = bpe_spec(&h, types);
    char err[256];
    tok *t = NULL;
    s.pre = "no-such-pre";
    assert_int_equal(tok_new(&s, &t, err, sizeof err), TS_ERR_TOK_MODEL);
    assert_null(t);
    assert_non_null(strstr(err, "no-such-pre"));
    s.pre = "llama-bpe";
    assert_int_equal(tok_new(&s, &t, err, sizeof err), 0);
    assert_string_equal(tok_pre(t), "llama-bpe");
    /* ignore_merges: "hello" is a token, taken whole. */
    EXPECT(t, "hello world", 0, 261, 266);
    /* "\n\n" after a word is one piece (\s*[\r\n]+), then merges. */
    EXPECT(t, "a\n\nb", 0, 'a', 270, 'b');
    /* Contractions of either case split off. */
    EXPECT(t, "I'T", 0, 'I', '\'', 'T');
    EXPECT(t, "x'LL", 0, 'x', '\'', 'L', 'L');
    tok_free(t);
    s.pre = NULL;
    assert_int_equal(tok_new(&s, &t, err, sizeof err), 0);
    assert_string_equal(tok_pre(t), "gpt-2");
    tok_free(t);
}

/* ---- added tokens ----------------------------------------------------------- */

static void test_added_tokens(void **state) {
    (void)state;
    bpe_hand h;
    bpe_hand_init(&h);
    h.text[h.n++] = "<think>";          /* 273, user-defined */
    h.text[h.n++] = "<th";              /* 274, user-defined: shorter, loses */
    h.text[h.n++] = "<|im_start|>";     /* 275, control */
    int32_t types[300];
    tok_spec s = bpe_spec(&h, types);
    types[272] = TOK_TYPE_CONTROL;
    types[273] = TOK_TYPE_USER;
    types[274] = TOK_TYPE_USER;
    types[275] = TOK_TYPE_CONTROL;
    tok *t = NULL;
    char err[256];
    assert_int_equal(tok_new(&s, &t, err, sizeof err), 0);
    /* User-defined tokens match in plain text, longest first; the text on
     * either side is encoded on its own. */
    EXPECT(t, "hello<think>hello", 0, 261, 273, 261);
    EXPECT(t, "<thhello", 0, 274, 261);
    /* Control tokens stay text unless asked for. */
    int32_t ids[64];
    int n;
    assert_int_equal(tok_encode_ex(t, "<|im_start|>hello", 17, 0, ids, 64, &n), 0);
    assert_true(n > 2);
    for (int i = 0; i < n; i++) assert_true(ids[i] != 275);
    assert_int_equal(tok_encode_ex(t, "<|im_start|>hello", 17, TOK_ENC_PARSE_SPECIAL, ids, 64, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 275);
    assert_int_equal(ids[1], 261);
    assert_int_equal(tok_encode_ex(t, "hello", 5, TOK_ENC_PARSE_SPECIAL | TOK_ENC_ADD_BOS, ids, 64, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], tok_bos(t));
    /* A user-defined token decodes to its raw text. */
    char buf[16];
    assert_int_equal(tok_decode(t, 273, buf, sizeof buf), 7);
    assert_memory_equal(buf, "<think>", 7);
    /* tokspecial is the same matcher. */
    tks_set *ts;
    assert_int_equal(tks_set_new(t, &ts), 0);
    tks_ids got = {0};
    assert_int_equal(tks_encode_template(ts, "<|im_start|>hello<think>", 24, &got), 0);
    assert_int_equal(got.n, 3);
    assert_int_equal(got.p[0], 275);
    assert_int_equal(got.p[2], 273);
    free(got.p);
    tks_set_free(ts);
    tok_free(t);
}

/* SPM: each fragment between added tokens gets its own space prefix, as in
 * llama.cpp (and HF, which normalizes each split on its own). */
static void test_spm_added_prefix(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    int32_t user = hand_add(&h, "<u>", 0);
    h.type[user] = TOK_TYPE_USER;
    tok *t = hand_tok(&h, 1);
    int32_t a[32], b[32];
    int na, nb;
    assert_int_equal(tok_encode(t, "a", 1, 0, a, 32, &na), 0);
    assert_int_equal(tok_encode(t, "a<u>a", 5, 0, b, 32, &nb), 0);
    assert_int_equal(nb, 2 * na + 1);
    assert_memory_equal(b, a, (size_t)na * sizeof *a);
    assert_int_equal(b[na], user);
    assert_memory_equal(b + na + 1, a, (size_t)na * sizeof *a);
    tok_free(t);
}

/* ---- WordPiece ------------------------------------------------------------ */

enum { W_PAD, W_UNK, W_CLS, W_SEP, W_HELLO, W_WORLD, W_UN, W_AFF, W_ABLE, W_COMMA, W_BANG,
       W_CAFE, W_ZH1, W_ZH2, W_A, W_S, W_N };

static tok *wpm_tok(int cased) {
    static const char *text[W_N] = {
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", SP "hello", SP "world", SP "un", "aff", "able",
        SP ",", SP "!", SP "cafe", SP "\xe4\xbd\xa0", SP "\xe5\xa5\xbd", SP "a", "s",
    };
    const char *tx[W_N + 1];
    int32_t types[W_N + 1];
    for (int i = 0; i < W_N; i++) {
        tx[i] = text[i];
        types[i] = i <= W_SEP ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
    }
    int n = W_N;
    if (cased) {
        tx[n] = SP "Hello";
        types[n++] = TOK_TYPE_NORMAL;
    }
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_WPM;
    s.n_vocab = (uint32_t)n;
    s.tokens = tx;
    s.types = types;
    s.bos = W_CLS;
    s.eos = W_SEP;
    s.unk = W_UNK;
    s.add_bos = 1;
    tok *t = NULL;
    char err[256];
    if (tok_new(&s, &t, err, sizeof err)) fail_msg("tok_new: %s", err);
    return t;
}

static void test_wordpiece(void **state) {
    (void)state;
    tok *t = wpm_tok(0);
    assert_int_equal(tok_model(t), TOK_MODEL_WPM);
    EXPECT(t, "hello world", 0, W_HELLO, W_WORLD);
    EXPECT(t, "hello world", 1, W_CLS, W_HELLO, W_WORLD, W_SEP);
    /* Uncased: lowercase, accents stripped, punctuation split off. */
    EXPECT(t, "HeLLo, Café!", 0, W_HELLO, W_COMMA, W_CAFE, W_BANG);
    /* Greedy longest match with continuations. */
    EXPECT(t, "unaffable", 0, W_UN, W_AFF, W_ABLE);
    /* A word that cannot be split completely is one [UNK]. */
    EXPECT(t, "unaffablex hello", 0, W_UNK, W_HELLO);
    /* CJK ideographs are words of their own, even without spaces. */
    EXPECT(t, "\xe4\xbd\xa0\xe5\xa5\xbd", 0, W_ZH1, W_ZH2);
    /* Whitespace of any kind separates; control characters and NUL vanish. */
    EXPECT(t, "\thello\r\n\xe3\x80\x80world\x01", 0, W_HELLO, W_WORLD);
    /* Longer than 100 characters: [UNK]; exactly 100 is split. */
    char w[256];
    memset(w, 'a', 101);
    w[101] = 0;
    EXPECT(t, w, 0, W_UNK);
    memcpy(w, "a", 1);
    memset(w + 1, 's', 99);
    w[100] = 0;
    int n;
    int32_t *ids = encode_all(t, w, 100, 0, &n);
    assert_int_equal(n, 100);
    assert_int_equal(ids[0], W_A);
    assert_int_equal(ids[99], W_S);
    free(ids);
    /* [SEP] in text is text unless special tokens are parsed. */
    int32_t out[16];
    assert_int_equal(tok_encode_ex(t, "a[SEP]", 6, TOK_ENC_PARSE_SPECIAL, out, 16, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(out[1], W_SEP);
    /* Invalid UTF-8 is dropped like U+FFFD (as llama.cpp), never a crash. */
    EXPECT(t, "hel\xff" "lo", 0, W_HELLO);
    EXPECT(t, "\xc3", 0);
    /* Word starts decode with a space; the first one can be stripped. */
    const int32_t seq[] = {W_CLS, W_UN, W_AFF, W_ABLE, W_BANG, W_SEP};
    char buf[64];
    size_t got;
    assert_int_equal(tok_decode_seq(t, seq, 6, 1, buf, sizeof buf, &got), 0);
    assert_int_equal(got, 11);
    assert_memory_equal(buf, "unaffable !", 11);
    tok_free(t);

    /* A vocabulary with capitals is cased: no lowercasing. */
    t = wpm_tok(1);
    EXPECT(t, "Hello hello", 0, W_N, W_HELLO);
    tok_free(t);
}

static void test_wordpiece_rejects(void **state) {
    (void)state;
    const char *tx[] = {"[UNK]", SP "a"};
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_WPM;
    s.n_vocab = 2;
    s.tokens = tx;
    s.bos = s.eos = -1;
    s.unk = -1;
    tok *t = NULL;
    char err[256];
    assert_int_equal(tok_new(&s, &t, err, sizeof err), TS_ERR_TOK_VOCAB);
    s.unk = 0;
    s.bos = 0;
    s.add_bos = 1;
    assert_int_equal(tok_new(&s, &t, err, sizeof err), TS_ERR_TOK_VOCAB);   /* no [SEP] */
    s.add_bos = 0;
    assert_int_equal(tok_new(&s, &t, err, sizeof err), 0);
    /* Asking for [CLS] ... [SEP] without a [SEP] is refused per call too. */
    int32_t ids[8];
    int n;
    assert_int_equal(tok_encode(t, "a", 1, 1, ids, 8, &n), TS_ERR_INVAL);
    assert_int_equal(tok_encode(t, "a", 1, 0, ids, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    tok_free(t);
}

/* ---- API contracts -------------------------------------------------------- */

static void test_encode_cap(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    tok *t = hand_tok(&h, 0);
    int32_t ids[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    int n = -1;
    /* "abcd" -> a, bc, <0x64>: three ids; four with BOS. */
    assert_int_equal(tok_encode(t, "abcd", 4, 1, ids, 2, &n), TS_ERR_INVAL);
    assert_int_equal(n, 4);
    assert_int_equal(ids[2], -7);           /* nothing written past cap */
    assert_int_equal(tok_encode(t, "abcd", 4, 0, ids, 3, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(tok_encode(t, "abcd", 4, 0, NULL, 0, &n), TS_ERR_INVAL);
    assert_int_equal(n, 3);
    assert_int_equal(tok_encode(t, "abcd", 4, 0, ids, -1, &n), TS_ERR_INVAL);
    assert_int_equal(tok_encode(t, NULL, 4, 0, ids, 8, &n), TS_ERR_INVAL);
    assert_int_equal(tok_encode(t, "abcd", 4, 0, ids, 8, NULL), TS_ERR_INVAL);
    assert_int_equal(tok_encode(t, "abcd", (size_t)TOK_MAX_INPUT_BYTES + 1, 0, ids, 8, &n),
                     TS_ERR_INVAL);
    tok_free(t);
}

static void test_decode_contract(void **state) {
    (void)state;
    hand h;
    hand_pieces(&h);
    tok *t = hand_tok(&h, 1);
    char buf[16];
    assert_int_equal(tok_decode(t, -1, buf, sizeof buf), TS_ERR_TOK_RANGE);
    assert_int_equal(tok_decode(t, tok_n_vocab(t), buf, sizeof buf), TS_ERR_TOK_RANGE);
    assert_int_equal(tok_decode(t, 1, buf, sizeof buf), 0);            /* <s> */
    assert_int_equal(tok_decode(t, 0, buf, sizeof buf), 3);            /* <unk> */
    assert_memory_equal(buf, "\xe2\x96\x85", 3);
    assert_int_equal(tok_decode(t, H_SPA, buf, sizeof buf), 2);
    assert_memory_equal(buf, " a", 2);
    assert_int_equal(tok_decode(t, H_SPA, buf, 1), TS_ERR_INVAL);
    assert_true(tok_piece_max(t) >= 3);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 2);
    assert_int_equal(tok_unk(t), 0);
    assert_int_equal(tok_add_bos(t), 1);
    assert_int_equal(tok_model(t), TOK_MODEL_SPM);
    assert_true(tok_is_control(t, 1));
    assert_false(tok_is_control(t, H_A));
    assert_false(tok_is_control(t, -3));
    assert_int_equal(tok_type(t, 5), TOK_TYPE_BYTE);
    assert_int_equal(tok_type(t, 99999), TS_ERR_TOK_RANGE);
    assert_int_equal(tok_find(t, "bc", 2), H_BC);
    assert_int_equal(tok_find(t, "zz", 2), -1);
    size_t len = 0;
    assert_memory_equal(tok_text(t, H_SPA, &len), SP "a", 4);
    assert_int_equal(len, 4);
    assert_null(tok_text(t, -1, &len));

    /* Sequence decode: BOS decodes to nothing, the prefix space is dropped
     * on request, and a short buffer reports the size it needs. */
    const int32_t seq[] = {1, H_SPA, H_SP, H_B};
    size_t n = 0;
    assert_int_equal(tok_decode_seq(t, seq, 4, 1, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(buf, "a b", 3);
    assert_int_equal(tok_decode_seq(t, seq, 4, 0, buf, sizeof buf, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, " a b", 4);
    assert_int_equal(tok_decode_seq(t, seq, 4, 0, buf, 2, &n), TS_ERR_INVAL);
    assert_int_equal(n, 4);
    const int32_t bad[] = {H_A, 12345};
    assert_int_equal(tok_decode_seq(t, bad, 2, 0, buf, sizeof buf, &n), TS_ERR_TOK_RANGE);
    tok_free(t);
}

static int new_rc(const tok_spec *s, char *err, size_t errlen) {
    tok *t = (tok *)0x1;
    int rc = tok_new(s, &t, err, errlen);
    if (rc == 0) tok_free(t);
    else assert_null(t);
    return rc;
}

static void test_tok_new_rejects(void **state) {
    (void)state;
    char err[256];
    hand h;
    hand_pieces(&h);
    tok_spec s = hand_spec(&h, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), 0);

    s = hand_spec(&h, 1);
    s.model = 7;
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_MODEL);

    s = hand_spec(&h, 1);
    s.bos = (int32_t)h.n;
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_RANGE);
    assert_non_null(strstr(err, "bos"));
    s = hand_spec(&h, 1);
    s.eos = -2;
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_RANGE);
    s = hand_spec(&h, 1);
    s.bos = -1;                 /* add_bos without a BOS */
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    s.add_bos = 0;
    assert_int_equal(new_rc(&s, err, sizeof err), 0);

    s = hand_spec(&h, 1);
    s.n_vocab = 0;
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    s = hand_spec(&h, 1);
    s.scores = NULL;
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_int_equal(new_rc(NULL, err, sizeof err), TS_ERR_INVAL);

    /* A missing byte token: byte fallback could not encode that byte. */
    hand bad = h;
    bad.text[3 + 0x41] = "A-byte";
    bad.type[3 + 0x41] = TOK_TYPE_NORMAL;
    s = hand_spec(&bad, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "<0x41>"));
    /* ...and without a message buffer. */
    assert_int_equal(new_rc(&s, NULL, 0), TS_ERR_TOK_VOCAB);

    /* A byte-typed token whose text is not <0xXX>. */
    bad = h;
    bad.text[H_A] = "<0xZZ>";
    bad.type[H_A] = TOK_TYPE_BYTE;
    s = hand_spec(&bad, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);

    bad = h;
    bad.type[H_B] = 9;
    s = hand_spec(&bad, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);

    bad = h;
    bad.score[H_B] = 0.0f / 0.0f;
    s = hand_spec(&bad, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);

    bad = h;
    bad.text[H_B] = NULL;
    s = hand_spec(&bad, 1);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);

    /* Without types, "<0xXX>" texts are recognised as the byte tokens. */
    s = hand_spec(&h, 0);
    s.types = NULL;
    tok *t = NULL;
    assert_int_equal(tok_new(&s, &t, err, sizeof err), 0);
    EXPECT(t, "\xff", 0, BYTE(0xFF));
    tok_free(t);

    /* BPE: every byte needs its character token; merges need a space. */
    bpe_hand b;
    bpe_hand_init(&b);
    int32_t types[300];
    s = bpe_spec(&b, types);
    assert_int_equal(new_rc(&s, err, sizeof err), 0);
    bpe_hand bb = b;
    bb.text[0x20] = "space";
    s = bpe_spec(&bb, types);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "0x20"));
    bb = b;
    bb.merges[3] = "nospace";
    s = bpe_spec(&bb, types);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "merge 3"));
    bb = b;
    bb.merges[3] = "trailing ";
    s = bpe_spec(&bb, types);
    assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
    /* A byte's character token that would not decode to the byte (found by
     * fuzz_gguf: an unused "_" made "_" encode to an id that decodes to ""). */
    static const int32_t not_bytes[] = {TOK_TYPE_CONTROL, TOK_TYPE_UNUSED, TOK_TYPE_UNKNOWN, TOK_TYPE_USER};
    for (size_t i = 0; i < sizeof not_bytes / sizeof not_bytes[0]; i++) {
        s = bpe_spec(&b, types);
        types['_'] = not_bytes[i];
        assert_int_equal(new_rc(&s, err, sizeof err), TS_ERR_TOK_VOCAB);
        assert_non_null(strstr(err, "byte 0x5F"));
    }
    s = bpe_spec(&b, types);
    types['_'] = TOK_TYPE_BYTE;
    assert_int_equal(new_rc(&s, err, sizeof err), 0);
}

/* ---- GGUF-backed vocabularies --------------------------------------------- */

/* Write w to a scratch file, open it, build a tokenizer; returns its code. */
static int gguf_tok(gguf_writer *w, const char *name, tok **out, char *err, size_t errlen) {
    char path[512];
    tu_path(path, sizeof path, name);
    assert_int_equal(gguf_writer_write(w, path, err, errlen), 0);
    gguf_writer_free(w);
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, &g, err, errlen);
    if (rc) fprintf(stderr, "gguf_open: %s\n", err);
    assert_int_equal(rc, 0);
    rc = tok_new_from_gguf(g, out, err, errlen);
    /* The tokenizer owns copies: it must outlive the file. */
    gguf_close(g);
    remove(path);
    return rc;
}

static void test_gguf_spm(void **state) {
    (void)state;
    vocab_synth_out v;
    assert_int_equal(vocab_synth(4000, &v), 0);
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(vocab_synth_write(&v, w), 0);
    tok *g = NULL;
    char err[256];
    int rc = gguf_tok(w, "tok_spm.gguf", &g, err, sizeof err);
    if (rc) fprintf(stderr, "tok_new_from_gguf: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(tok_model(g), TOK_MODEL_SPM);
    assert_int_equal(tok_n_vocab(g), 4000);
    assert_int_equal(tok_bos(g), 1);
    assert_int_equal(tok_eos(g), 2);
    assert_int_equal(tok_unk(g), 0);
    assert_int_equal(tok_add_bos(g), 1);
    assert_int_equal(tok_add_space_prefix(g), 1);
    roundtrip_suite(g, 5);

    /* Same ids as the tokenizer built from the arrays directly. */
    tok *m = synth_tok(&v, 1);
    const char *s = "Spring brought rain, and the rain brought the river up. \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82";
    int na, nb;
    int32_t *ia = encode_all(g, s, strlen(s), 1, &na);
    int32_t *ib = encode_all(m, s, strlen(s), 1, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, (size_t)na * sizeof *ia);
    assert_int_equal(ia[0], 1);
    free(ia);
    free(ib);
    tok_free(m);
    tok_free(g);
    vocab_synth_free(&v);
}

static void test_gguf_bpe(void **state) {
    (void)state;
    bpe_hand h;
    bpe_hand_init(&h);
    int32_t types[300];
    for (uint32_t i = 0; i < h.n; i++) types[i] = TOK_TYPE_NORMAL;
    types[h.n - 1] = TOK_TYPE_CONTROL;
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"), 0);
    assert_int_equal(gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", h.text, h.n), 0);
    assert_int_equal(gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, h.n), 0);
    assert_int_equal(gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", h.merges, h.n_merges), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", h.n - 1), 0);
    assert_int_equal(gguf_writer_add_i32(w, "tokenizer.ggml.bos_token_id", -1), 0);
    tok *t = NULL;
    char err[256];
    int rc = gguf_tok(w, "tok_bpe.gguf", &t, err, sizeof err);
    if (rc) fprintf(stderr, "tok_new_from_gguf: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(tok_model(t), TOK_MODEL_BPE);
    assert_int_equal(tok_bos(t), -1);           /* int32 -1: none */
    assert_int_equal(tok_eos(t), (int32_t)h.n - 1);
    assert_int_equal(tok_add_bos(t), 0);        /* gpt2 default */
    EXPECT(t, "hello world", 0, 261, 266);
    int n;
    assert_int_equal(tok_encode(t, "a", 1, 1, NULL, 0, &n), TS_ERR_INVAL);   /* no BOS */
    roundtrip_suite(t, 3);
    tok_free(t);
}

/* A vocabulary of n SPM tokens written with some keys altered. */
enum { BAD_NONE, BAD_SCORES_SHORT, BAD_MODEL, BAD_NO_TOKENS, BAD_BOS, BAD_TYPES_STR,
       BAD_NO_SCORES, BAD_GPT2_NO_MERGES, BAD_BOOL, BAD_NO_MODEL, BAD_TYPES_FLOAT };

static int gguf_bad(int which, char *err, size_t errlen) {
    vocab_synth_out v;
    assert_int_equal(vocab_synth(400, &v), 0);
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    const char *model = which == BAD_MODEL ? "rwkv" : which == BAD_GPT2_NO_MERGES ? "gpt2" : "llama";
    if (which != BAD_NO_MODEL) gguf_writer_add_str(w, "tokenizer.ggml.model", model);
    if (which != BAD_NO_TOKENS)
        gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, v.n);
    if (which != BAD_NO_SCORES)
        gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", v.scores,
                                which == BAD_SCORES_SHORT ? v.n - 1 : v.n);
    if (which == BAD_TYPES_STR) {
        gguf_writer_add_arr_str(w, "tokenizer.ggml.token_type", (const char *const *)v.tokens, v.n);
    } else if (which == BAD_TYPES_FLOAT) {
        /* Found by fuzz_gguf: reading inf as a type was a float-to-int
         * conversion out of range (undefined behaviour, a UBSan report). */
        float *ft = malloc(v.n * sizeof *ft);
        assert_non_null(ft);
        for (uint32_t i = 0; i < v.n; i++) ft[i] = (float)v.types[i];
        ft[5] = INFINITY;
        gguf_writer_add_arr_f32(w, "tokenizer.ggml.token_type", ft, v.n);
        free(ft);
    } else
        gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v.types, v.n);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", which == BAD_BOS ? 99999 : 1);
    if (which == BAD_BOOL) gguf_writer_add_str(w, "tokenizer.ggml.add_bos_token", "yes");
    tok *t = (tok *)0x1;
    int rc = gguf_tok(w, "tok_bad.gguf", &t, err, errlen);
    if (rc == 0) tok_free(t);
    else assert_null(t);
    vocab_synth_free(&v);
    return rc;
}

static void test_gguf_rejects(void **state) {
    (void)state;
    char err[256];
    assert_int_equal(gguf_bad(BAD_NONE, err, sizeof err), 0);
    assert_int_equal(gguf_bad(BAD_SCORES_SHORT, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "scores"));
    assert_int_equal(gguf_bad(BAD_MODEL, err, sizeof err), TS_ERR_TOK_MODEL);
    assert_non_null(strstr(err, "bert"));
    assert_int_equal(gguf_bad(BAD_NO_MODEL, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_int_equal(gguf_bad(BAD_NO_TOKENS, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_int_equal(gguf_bad(BAD_BOS, err, sizeof err), TS_ERR_TOK_RANGE);
    assert_int_equal(gguf_bad(BAD_TYPES_STR, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "token_type"));
    assert_int_equal(gguf_bad(BAD_NO_SCORES, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_int_equal(gguf_bad(BAD_GPT2_NO_MERGES, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "merges"));
    assert_int_equal(gguf_bad(BAD_BOOL, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_int_equal(gguf_bad(BAD_TYPES_FLOAT, err, sizeof err), TS_ERR_TOK_VOCAB);
    assert_non_null(strstr(err, "token_type is not an integer array"));
}

/* ---- speed (reported, not asserted: sanitizer builds are slow) ------------ */

static void test_speed(void **state) {
    (void)state;
    const size_t len = 400 * 1024;
    char *text = malloc(len);
    assert_non_null(text);
    static const char para[] =
        "The teacher let the children out early when the weather was fine, and they ran "
        "along the towpath shouting. Prices rose 3.5% in 2024; caf\xc3\xa9 owners said "
        "\"it's fine\". \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e text too.\n";
    for (size_t at = 0; at < len; at += sizeof para - 1)
        memcpy(text + at, para, at + sizeof para - 1 <= len ? sizeof para - 1 : len - at);
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    assert_non_null(ids);

    vocab_synth_out v;
    assert_int_equal(vocab_synth(32000, &v), 0);
    tok *spm = synth_tok(&v, 1);
    bpe_hand h;
    bpe_hand_init(&h);
    tok *bpe = bpe_tok(&h);
    tok *ts[2] = {spm, bpe};
    const char *names[2] = {"SPM (synthetic 32000)", "GPT-2 BPE (hand, 15 merges)"};
    for (int k = 0; k < 2; k++) {
        int n = 0;
        double t0 = now_s();
        assert_int_equal(tok_encode(ts[k], text, len, 0, ids, (int)len + 2, &n), 0);
        double dt = now_s() - t0;
        fprintf(stderr, "encode %s: %zu bytes -> %d ids in %.1f ms, %.1f MB/s\n", names[k], len,
                n, dt * 1e3, (double)len / dt / 1e6);
        size_t out = 0;
        char *back = malloc(len + 1);
        assert_non_null(back);
        assert_int_equal(tok_decode_seq(ts[k], ids, (size_t)n, 1, back, len + 1, &out), 0);
        assert_int_equal(out, len);
        assert_memory_equal(back, text, len);
        free(back);
    }
    tok_free(spm);
    tok_free(bpe);
    vocab_synth_free(&v);
    free(ids);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merge_priority),
        cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_spm_hand_roundtrip),
        cmocka_unit_test(test_synth_layout_and_determinism),
        cmocka_unit_test(test_synth_limits),
        cmocka_unit_test(test_synth_reachable),
        cmocka_unit_test(test_synth_roundtrip),
        cmocka_unit_test(test_spm_word_split_equivalence),
        cmocka_unit_test(test_bpe_expected_ids),
        cmocka_unit_test(test_bpe_roundtrip),
        cmocka_unit_test(test_pretok_families),
        cmocka_unit_test(test_pretok_names),
        cmocka_unit_test(test_pretok_invalid_utf8),
        cmocka_unit_test(test_bpe_pre_choice),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_spm_added_prefix),
        cmocka_unit_test(test_wordpiece),
        cmocka_unit_test(test_wordpiece_rejects),
        cmocka_unit_test(test_encode_cap),
        cmocka_unit_test(test_decode_contract),
        cmocka_unit_test(test_tok_new_rejects),
        cmocka_unit_test(test_gguf_spm),
        cmocka_unit_test(test_gguf_bpe),
        cmocka_unit_test(test_gguf_rejects),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
