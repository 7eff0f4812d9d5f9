/*
 * tokspecial.h - encoding text in which a vocabulary's special tokens may
 * appear by their exact text, as in a rendered chat template.
 *
 * Plain text (tks_encode_text, tok_encode) gets user-defined tokens matched
 * by text but never control tokens (so a user typing "<|im_end|>" gets text,
 * not a turn boundary). Template text is different: its "<|im_start|>"
 * means the control token. tks_encode_template is tok_encode_ex with
 * TOK_ENC_PARSE_SPECIAL: control and user-defined tokens are matched by
 * exact text at every position (longest wins) and what lies between is
 * encoded as ordinary text. A tks_set only remembers the tok; it is kept
 * so callers need not change, and must not outlive the tok.
 *
 * Ids are appended to a tks_ids, a growable array the caller owns and frees
 * with free(ids.p).
 */
#ifndef TS_TOKSPECIAL_H
#define TS_TOKSPECIAL_H

#include <stddef.h>
#include <stdint.h>

#include "tok.h"

typedef struct tks_set tks_set;

typedef struct tks_ids {
    int32_t *p;             /* (cap) token ids, the first n in use */
    int n, cap;
} tks_ids;

/* The special tokens of t. OUT out: the set, freed with tks_set_free.
 * Returns 0 or TS_ERR_NOMEM. */
int tks_set_new(const tok *t, tks_set **out);
void tks_set_free(tks_set *s);

/* Append the encoding of len bytes of plain text (tok_encode: no control
 * tokens from text) to ids. add_bos as tok_encode. Returns 0 or a negative
 * code. */
int tks_encode_text(const tok *t, const char *text, size_t len, int add_bos, tks_ids *ids);

/* Append the encoding of len bytes of template text: special tokens by
 * their text, the rest as plain text. Returns 0 or a negative code. */
int tks_encode_template(const tks_set *s, const char *text, size_t len, tks_ids *ids);

/* Append the encoding of a rendered chat: special tokens by their text
 * only inside the n_spans template spans, the text between them as one
 * fragment each (tok_encode_spans); BOS first when add_bos. */
int tks_encode_spans(const tks_set *s, const char *text, size_t len, const tok_span *spans, size_t n_spans,
                     int add_bos, tks_ids *ids);

#endif
