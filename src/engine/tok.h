/*
 * tok.h - text <-> token ids for the three vocabulary families tessera
 * serves: SentencePiece-style score merging with byte fallback (GGUF
 * tokenizer.ggml.model = "llama"), byte-level BPE with ranked merges and a
 * pre-tokenizer chosen by tokenizer.ggml.pre ("gpt2"; the regexes live in
 * pretok.c), and BERT WordPiece ("bert"; wpm.c).
 *
 * A tok is built once, from a GGUF file or from in-memory arrays, and owns a
 * private copy of everything it needs (token texts, decoded pieces, a string
 * hash table, the merge table, the compiled pre-tokenizer), so it outlives
 * the GGUF mapping it came from. After construction it is read-only: any
 * number of threads may encode and decode with one tok at the same time.
 * Each encode call allocates its own scratch, about 36 bytes per input byte,
 * and frees it before returning; bounding prompt sizes is the caller's job
 * (TOK_MAX_INPUT_BYTES is only a backstop). Building is linear in the
 * vocabulary and merge counts.
 *
 * Added tokens: user-defined tokens (TOK_TYPE_USER, e.g. Gemma 3's "<table>"
 * or Qwen's "<think>") are matched by their text in the input before the
 * model runs, as Hugging Face tokenizers and llama.cpp do: at each position
 * the longest one wins, and the text between them is encoded on its own
 * (for SPM with add_space_prefix each such fragment gets its own prefix, as
 * llama.cpp does). Control tokens (<|im_start|>, <s>) are matched the same
 * way only with TOK_ENC_PARSE_SPECIAL; otherwise a user typing "<s>" gets
 * text, never BOS.
 *
 * Encoding never fails on content: every byte string, including invalid
 * UTF-8 and embedded NULs, has an encoding. For BPE, decoding the ids gives
 * back exactly the input; for SPM too (preceded by one space with
 * add_space_prefix, which tok_decode_seq() can strip), except that a typed
 * U+2581 decodes as a space and a space that no token covers falls back to
 * the bytes of U+2581 and decodes as them. WordPiece normalizes (see wpm.h)
 * and does not round-trip. Errors are negative TS_ERR_* codes from err.h;
 * nothing here calls exit() or abort().
 *
 * Deliberate limits and deviations, each a simplification a caller may hit:
 *  - Normalizers are not applied: Qwen's tokenizer.json asks for NFC, which
 *    tessera (like llama.cpp) skips, so non-NFC input may encode differently
 *    from Hugging Face. Added tokens' lstrip/rstrip/single_word flags are not
 *    in GGUF and are not honoured.
 *  - BPE: "default" (also a missing tokenizer.ggml.pre) is GPT-2's pattern,
 *    not llama.cpp's older four-regex default. "(?i:'s|...)" contractions are
 *    matched with explicit case classes (as llama.cpp and transformers.js
 *    do). Invalid UTF-8 bytes never match a pattern item, so each one ends
 *    the piece before it. ignore_merges is not a GGUF key; it is set by the
 *    pre name (Llama 3 and Tekken families, as llama.cpp does). Merges whose
 *    parts or result are not vocabulary tokens, or whose result is a
 *    control token, are ignored.
 *  - SPM: merges follow token scores (higher first, leftmost on ties), as
 *    llama.cpp does; a Hugging Face BPE-with-byte-fallback vocabulary agrees
 *    when its scores follow its merge order. Empty input gets no space
 *    prefix (only BOS, if asked).
 *  - WordPiece: whether to lowercase and strip accents is not a GGUF key;
 *    a vocabulary is taken as uncased unless a normal token holds an ASCII
 *    capital. Tokens must use the GGUF spelling (wpm.h). BOS/EOS stand for
 *    [CLS]/[SEP] (tokenizer.ggml.cls_token_id / seperator_token_id), and
 *    TOK_ENC_ADD_BOS adds both.
 *  - Duplicate token texts: lookup finds the first id with that text.
 *  - A token text longer than TOK_MAX_TOKEN_BYTES rejects the vocabulary, and
 *    an input longer than TOK_MAX_INPUT_BYTES is refused with TS_ERR_INVAL.
 */
#ifndef TS_TOK_H
#define TS_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* Token types, numbered as tokenizer.ggml.token_type numbers them. */
enum {
    TOK_TYPE_UNDEFINED = 0,     /* treated as normal */
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Vocabulary families. */
enum {
    TOK_MODEL_SPM = 1,          /* "llama": score-ordered merges, byte fallback */
    TOK_MODEL_BPE = 2,          /* "gpt2": byte-level BPE, rank-ordered merges */
    TOK_MODEL_WPM = 3,          /* "bert": WordPiece, greedy longest match */
};

/* tok_encode_ex flags. */
#define TOK_ENC_ADD_BOS 1u          /* prepend BOS (WordPiece: [CLS] ... [SEP]) */
#define TOK_ENC_PARSE_SPECIAL 2u    /* control tokens' texts in the input are those tokens */

#define TOK_MAX_TOKEN_BYTES 4096            /* longest token text accepted */
#define TOK_MAX_INPUT_BYTES (1u << 26)      /* longest text tok_encode takes */

typedef struct tok tok;

/*
 * A vocabulary in caller memory; tok_new() copies what it keeps, so all of it
 * may be freed once tok_new() returns.
 */
typedef struct tok_spec {
    int model;                  /* TOK_MODEL_* */
    uint32_t n_vocab;
    const char *const *tokens;  /* (n_vocab) token texts */
    const size_t *token_lens;   /* (n_vocab) byte lengths, or NULL: strlen() */
    const float *scores;        /* (n_vocab) required for SPM; ignored by BPE */
    const int32_t *types;       /* (n_vocab) TOK_TYPE_*, or NULL: all normal
                                 * (SPM then treats "<0xXX>" texts as bytes) */
    const char *const *merges;  /* (n_merges) BPE only: "left right", rank = index */
    const size_t *merge_lens;   /* (n_merges) or NULL: strlen() */
    uint32_t n_merges;
    int32_t bos, eos, unk;      /* token ids, or -1 for none */
    int add_bos;                /* 1: callers should prepend BOS by default */
    int add_space_prefix;       /* SPM: 1 prepends U+2581 to non-empty input */
    const char *pre;            /* BPE: tokenizer.ggml.pre name; NULL: "default" */
} tok_spec;

/*
 * Build a tokenizer from in-memory arrays. Validates: a known model
 * (TS_ERR_TOK_MODEL), token array present and lengths sane, scores present
 * and not NaN for SPM, types within 0..6, byte tokens well formed, all 256
 * byte tokens present (SPM "<0xXX>", BPE the bytes_to_unicode characters,
 * each of them a normal token: a control, unused, unknown or user-defined
 * one would let text encode to a token that decodes to nothing), merges of
 * the form "a b" (TS_ERR_TOK_VOCAB); bos/eos/unk in range
 * (TS_ERR_TOK_RANGE); add_bos without a bos id (TS_ERR_TOK_VOCAB); a known
 * BPE pre-tokenizer name (TS_ERR_TOK_MODEL, naming it); WordPiece: an unk id,
 * and an eos ([SEP]) id when add_bos. On failure *out is NULL and err (if
 * errlen > 0) names what is wrong.
 */
int tok_new(const tok_spec *spec, tok **out, char *err, size_t errlen);

/*
 * Build a tokenizer from the tokenizer.ggml.* keys of a GGUF file: model,
 * tokens, scores, token_type (an integer array), merges, bos/eos/unknown_token_id,
 * add_bos_token (default: 1 for llama, 0 for gpt2), add_space_prefix
 * (default 1 for llama). Array lengths must equal the token count. An id key
 * holding 0xFFFFFFFF or an int -1 means "none"; a missing id key takes the
 * llama defaults (unk 0, bos 1, eos 2) for SPM and "none" for BPE. Model
 * "bert" is WordPiece: bos/eos come from cls_token_id/seperator_token_id
 * when present, add_bos defaults to 1. tokenizer.ggml.pre names the BPE
 * pre-tokenizer (missing: "default"); an unknown name is TS_ERR_TOK_MODEL.
 */
int tok_new_from_gguf(const gguf_ctx *g, tok **out, char *err, size_t errlen);

/* As tok_new_from_gguf, but pre_override (if not NULL) replaces the file's
 * tokenizer.ggml.pre: for files with a pre name tessera does not know whose
 * family the operator does. */
int tok_new_from_gguf_ex(const gguf_ctx *g, const char *pre_override, tok **out, char *err,
                         size_t errlen);

void tok_free(tok *t);

/*
 * Encode len bytes of text (need not be NUL-terminated; may contain NULs).
 * add_bos: 1 prepends the BOS id (TS_ERR_INVAL if the vocabulary has none;
 * WordPiece: [CLS] before and [SEP] after, both needed).
 * out: room for cap ids; may be NULL when cap is 0.
 * OUT n_out: ids produced, or on TS_ERR_INVAL for a short buffer the number
 * needed (the contents of out are then unspecified). Returns 0 or a negative
 * code (TS_ERR_NOMEM, TS_ERR_INVAL).
 */
int tok_encode(const tok *t, const char *text, size_t len, int add_bos,
               int32_t *out, int cap, int *n_out);

/* As tok_encode, with TOK_ENC_* flags: tok_encode(..., add_bos, ...) is
 * tok_encode_ex(..., add_bos ? TOK_ENC_ADD_BOS : 0, ...). */
int tok_encode_ex(const tok *t, const char *text, size_t len, unsigned flags,
                  int32_t *out, int cap, int *n_out);

/* A byte range of a text. */
typedef struct tok_span {
    size_t off;             /* bytes from the start of the text */
    size_t len;
} tok_span;

/*
 * As tok_encode_ex with TOK_ENC_PARSE_SPECIAL, but a control token is
 * matched only where its whole text lies inside one of the n_spans spans
 * (in order, not overlapping, within the text; TS_ERR_INVAL otherwise):
 * a rendered chat, whose template text may name turn markers and whose
 * message content must not. Text between the tokens found is encoded as
 * one fragment whichever spans it crosses, exactly as if the content had
 * been typed around the markers (a fragment cut at a span's edge would
 * get a second SPM space prefix and other merges). Without
 * TOK_ENC_PARSE_SPECIAL in flags the spans change nothing.
 */
int tok_encode_spans(const tok *t, const char *text, size_t len, unsigned flags, const tok_span *spans,
                     size_t n_spans, int32_t *out, int cap, int *n_out);

/*
 * Write the bytes of one token's piece into buf (no terminator): U+2581
 * becomes ' ', byte tokens become their byte, control and unused tokens
 * decode to nothing, unknown tokens to U+2585 (as llama.cpp). Returns the
 * byte count, TS_ERR_TOK_RANGE for a bad id, TS_ERR_INVAL if cap is smaller
 * than the piece (tok_piece_max() bounds every piece). A piece may be part of
 * a UTF-8 character; joining pieces is the caller's business.
 */
int tok_decode(const tok *t, int32_t id, char *buf, size_t cap);

/*
 * Decode n ids into buf. strip_prefix: 1 drops the one leading space that an
 * SPM add_space_prefix encoding put in front, or that a WordPiece word start
 * decodes to (no effect otherwise).
 * OUT n_out: bytes written, or the bytes needed when cap is too small
 * (TS_ERR_INVAL). TS_ERR_TOK_RANGE on a bad id.
 */
int tok_decode_seq(const tok *t, const int32_t *ids, size_t n, int strip_prefix,
                   char *buf, size_t cap, size_t *n_out);

int32_t tok_bos(const tok *t);          /* -1 if none */
int32_t tok_eos(const tok *t);          /* -1 if none */
int32_t tok_unk(const tok *t);          /* -1 if none */
int tok_n_vocab(const tok *t);
int tok_model(const tok *t);            /* TOK_MODEL_* */
int tok_add_bos(const tok *t);          /* the vocabulary's default for add_bos */
int tok_add_space_prefix(const tok *t);
int tok_is_control(const tok *t, int32_t id);   /* 0 for out-of-range ids */
int tok_type(const tok *t, int32_t id);         /* TOK_TYPE_*, or TS_ERR_TOK_RANGE */
size_t tok_piece_max(const tok *t);     /* bytes of the longest decoded piece */
const char *tok_pre(const tok *t);      /* BPE pre-tokenizer's canonical name; NULL otherwise */
/* Id of the first token whose text is exactly these bytes, or -1. */
int32_t tok_find(const tok *t, const char *text, size_t len);
/* Raw vocabulary text of a token (not terminated), or NULL for a bad id. */
const char *tok_text(const tok *t, int32_t id, size_t *len);

#endif
