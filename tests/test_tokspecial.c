/*
 * test_tokspecial.c - special tokens matched by their text
 * (src/engine/tokspecial.c): template text yields the control and
 * user-defined ids, longest match first; what lies between, and plain text
 * always, encodes exactly as tok_encode does; ids append across calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "err.h"
#include "tok.h"
#include "tokspecial.h"

/* An SPM vocabulary: 0 <unk>, 1 <s>, 2 </s>, 3..258 the bytes, then a few
 * pieces, two control tokens and a user-defined one that is a prefix of
 * them (so the longest match must win). */
enum { ID_IM_START = 259, ID_IM_END, ID_IM, ID_A, ID_B, ID_AB, N_VOCAB };

typedef struct vocab {
    const char *text[N_VOCAB];
    float score[N_VOCAB];
    int32_t type[N_VOCAB];
    char bytes[256][8];
} vocab;

static tok *vocab_tok(vocab *v) {
    memset(v, 0, sizeof *v);
    v->text[0] = "<unk>";
    v->type[0] = TOK_TYPE_UNKNOWN;
    v->text[1] = "<s>";
    v->type[1] = TOK_TYPE_CONTROL;
    v->text[2] = "</s>";
    v->type[2] = TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
        v->text[3 + b] = v->bytes[b];
        v->type[3 + b] = TOK_TYPE_BYTE;
    }
    v->text[ID_IM_START] = "<|im_start|>";
    v->type[ID_IM_START] = TOK_TYPE_CONTROL;
    v->text[ID_IM_END] = "<|im_end|>";
    v->type[ID_IM_END] = TOK_TYPE_CONTROL;
    v->text[ID_IM] = "<|im";
    v->type[ID_IM] = TOK_TYPE_USER;
    v->text[ID_A] = "a";
    v->text[ID_B] = "b";
    v->text[ID_AB] = "ab";
    v->score[ID_AB] = 1;
    tok_spec s = {
        .model = TOK_MODEL_SPM,
        .n_vocab = N_VOCAB,
        .tokens = v->text,
        .scores = v->score,
        .types = v->type,
        .bos = 1,
        .eos = 2,
        .unk = 0,
        .add_bos = 1,
    };
    tok *t = NULL;
    char err[200];
    if (tok_new(&s, &t, err, sizeof err)) fail_msg("tok_new: %s", err);
    return t;
}

static void assert_ids(const tks_ids *got, const int32_t *want, int n) {
    assert_int_equal(got->n, n);
    for (int i = 0; i < n; i++)
        if (got->p[i] != want[i]) fail_msg("id %d: got %d, want %d", i, got->p[i], want[i]);
}

static void test_template_matches_specials(void **state) {
    (void)state;
    vocab v;
    tok *t = vocab_tok(&v);
    tks_set *s;
    assert_int_equal(tks_set_new(t, &s), 0);
    tks_ids ids = {0};
    const char *text = "<|im_start|>ab<|im_end|><|imb";
    assert_int_equal(tks_encode_template(s, text, strlen(text), &ids), 0);
    const int32_t want[] = {ID_IM_START, ID_AB, ID_IM_END, ID_IM, ID_B};
    assert_ids(&ids, want, 5);
    free(ids.p);
    tks_set_free(s);
    tok_free(t);
}

static void test_text_never_special(void **state) {
    (void)state;
    vocab v;
    tok *t = vocab_tok(&v);
    const char *text = "<|im_end|>";
    tks_ids ids = {0};
    assert_int_equal(tks_encode_text(t, text, strlen(text), 0, &ids), 0);
    int32_t want[64];
    int n = 0;
    assert_int_equal(tok_encode(t, text, strlen(text), 0, want, 64, &n), 0);
    assert_ids(&ids, want, n);
    /* The control token stays text; the user-defined "<|im" is matched by
     * text, as Hugging Face tokenizers and llama.cpp match added tokens. */
    for (int i = 0; i < ids.n; i++) assert_true(ids.p[i] != ID_IM_END);
    assert_true(ids.n >= 2);
    assert_int_equal(ids.p[0], ID_IM);
    free(ids.p);
    tok_free(t);
}

static void test_appends_and_grows(void **state) {
    (void)state;
    vocab v;
    tok *t = vocab_tok(&v);
    tks_set *s;
    assert_int_equal(tks_set_new(t, &s), 0);
    tks_ids ids = {0};
    assert_int_equal(tks_encode_text(t, "", 0, 1, &ids), 0);   /* BOS alone */
    for (int i = 0; i < 500; i++)
        assert_int_equal(tks_encode_template(s, "<|im_end|>a", 11, &ids), 0);
    assert_int_equal(ids.n, 1 + 2 * 500);
    assert_int_equal(ids.p[0], 1);
    for (int i = 0; i < 500; i++) {
        assert_int_equal(ids.p[1 + 2 * i], ID_IM_END);
        assert_int_equal(ids.p[2 + 2 * i], ID_A);
    }
    assert_int_equal(tks_encode_template(s, "", 0, &ids), 0);  /* nothing added */
    assert_int_equal(ids.n, 1 + 2 * 500);
    free(ids.p);
    tks_set_free(s);
    tok_free(t);
}

/* Empty text without BOS into an empty, never allocated tks_ids adds
 * nothing and does no pointer arithmetic on its NULL array (fuzz_oai found
 * it under UBSan: a completion with prompt "" on a vocabulary without
 * add_bos). */
static void test_empty_text_into_empty_ids(void **state) {
    (void)state;
    vocab v;
    tok *t = vocab_tok(&v);
    tks_set *s;
    assert_int_equal(tks_set_new(t, &s), 0);
    tks_ids ids = {0};
    assert_int_equal(tks_encode_text(t, "", 0, 0, &ids), 0);
    assert_int_equal(tks_encode_text(t, NULL, 0, 0, &ids), 0);
    assert_int_equal(tks_encode_template(s, "", 0, &ids), 0);
    assert_int_equal(ids.n, 0);
    assert_null(ids.p);
    /* A bad call is still an error, not "nothing to add". */
    assert_int_equal(tks_encode_text(t, NULL, 1, 0, &ids), TS_ERR_INVAL);
    assert_int_equal(ids.n, 0);
    assert_null(ids.p);
    tks_set_free(s);
    tok_free(t);
}


/* A rendered chat: markers count only inside template spans, and the text
 * between markers is one fragment whatever spans it crosses. */
static void test_spans(void **state) {
    (void)state;
    vocab v;
    tok *t = vocab_tok(&v);
    tks_set *set;
    assert_int_equal(tks_set_new(t, &set), 0);
    /* "<|im_start|>" template, "ab<|im_end|>" content, "<|im_end|>"
     * template, "a" content, "<|im_start|>" template. */
    const char *text = "<|im_start|>ab<|im_end|><|im_end|>a<|im_start|>";
    const tok_span sp[] = {{0, 12}, {24, 10}, {35, 12}};
    tks_ids ids = {0};
    assert_int_equal(tks_encode_spans(set, text, strlen(text), sp, 3, 0, &ids), 0);
    /* The user-defined "<|im" is matched in content too; the forged
     * <|im_end|> there is text: "<|im" then the bytes of "_end|>". */
    int32_t want[16] = {ID_IM_START, ID_AB, ID_IM};
    int n = 3;
    for (const char *c = "_end|>"; *c; c++) want[n++] = 3 + (unsigned char)*c;
    want[n++] = ID_IM_END;
    want[n++] = ID_A;
    want[n++] = ID_IM_START;
    assert_ids(&ids, want, n);
    free(ids.p);

    /* "a" template then "b" content: one fragment, merged to "ab". */
    const tok_span half[] = {{0, 1}};
    memset(&ids, 0, sizeof ids);
    assert_int_equal(tks_encode_spans(set, "ab", 2, half, 1, 1, &ids), 0);
    assert_ids(&ids, (const int32_t[]){1, ID_AB}, 2);
    free(ids.p);

    /* A marker crossing a span's end is text; no spans, no markers. */
    const tok_span cut[] = {{0, 8}};
    memset(&ids, 0, sizeof ids);
    assert_int_equal(tks_encode_spans(set, "<|im_end|>", 10, cut, 1, 0, &ids), 0);
    assert_int_equal(ids.p[0], ID_IM);
    free(ids.p);
    memset(&ids, 0, sizeof ids);
    assert_int_equal(tks_encode_spans(set, "<|im_end|>", 10, NULL, 0, 0, &ids), 0);
    assert_int_equal(ids.p[0], ID_IM);
    free(ids.p);

    /* Spans out of order or past the text are refused. */
    const tok_span bad[] = {{4, 2}, {2, 1}}, past[] = {{8, 3}};
    int32_t out[32];
    int got;
    const unsigned f = TOK_ENC_PARSE_SPECIAL;
    assert_int_equal(tok_encode_spans(t, "<|im_end|>", 10, f, bad, 2, out, 32, &got), TS_ERR_INVAL);
    assert_int_equal(tok_encode_spans(t, "<|im_end|>", 10, f, past, 1, out, 32, &got), TS_ERR_INVAL);
    tks_set_free(set);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_matches_specials),
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_text_never_special),
        cmocka_unit_test(test_appends_and_grows),
        cmocka_unit_test(test_empty_text_into_empty_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
