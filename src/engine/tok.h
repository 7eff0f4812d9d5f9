/*
 * tok.h - text <-> token ids for the two vocabulary families tessera serves:
 * SentencePiece-style score merging with byte fallback (GGUF
 * tokenizer.ggml.model = "llama") and GPT-2 byte-level BPE with ranked merges
 * ("gpt2").
 *
 * A tok is built once, from a GGUF file or from in-memory arrays, and owns a
 * private copy of everything it needs (token texts, decoded pieces, a string
 * hash table, the merge table), so it outlives the GGUF mapping it came from.
 * After construction it is read-only: any number of threads may encode and
 * decode with one tok at the same time. Each encode call allocates its own
 * scratch, about 36 bytes per input byte, and frees it before returning;
 * bounding prompt sizes is the caller's job (TOK_MAX_INPUT_BYTES is only a
 * backstop).
 *
 * Encoding never fails on content: every byte string, including invalid UTF-8
 * and embedded NULs, has an encoding, and decoding the ids concatenates back
 * to exactly the input (for SPM with add_space_prefix, preceded by one space;
 * tok_decode_seq() can strip it). An invalid UTF-8 byte is treated as a
 * one-byte character. Errors are negative TS_ERR_* codes from err.h; nothing
 * here calls exit() or abort().
 *
 * Deliberate limits and deviations, each a simplification a caller may hit:
 *  - User text never produces control, unknown or byte-role tokens through
 *    merges, and user-defined tokens are not pre-split out of the text the way
 *    llama.cpp does; they appear only where merges reach them. "<s>" typed by
 *    a user is therefore never BOS.
 *  - SPM: a literal U+2581 ("\xe2\x96\x81") in the input is emitted as its
 *    three byte tokens instead of being merged like a space, so that it
 *    decodes to itself (llama.cpp would decode it as a space). A space that no
 *    vocabulary token covers falls back to <0x20>, not to the bytes of U+2581.
 *  - SPM: empty input gets no space prefix (only BOS, if asked).
 *  - GPT-2: the pre-tokenizer regex is implemented by hand with ASCII ctype
 *    classes; every non-ASCII code point (and every invalid byte) counts as a
 *    letter, so non-ASCII digits, punctuation and whitespace (U+00A0, U+3000,
 *    full-width digits, CJK punctuation) split differently from the reference
 *    regex. Merges whose parts or result are not vocabulary tokens, or whose
 *    result is a control token, are ignored.
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
};

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
} tok_spec;

/*
 * Build a tokenizer from in-memory arrays. Validates: a known model
 * (TS_ERR_TOK_MODEL), token array present and lengths sane, scores present
 * and not NaN for SPM, types within 0..6, byte tokens well formed, all 256
 * byte tokens present (SPM "<0xXX>", BPE the bytes_to_unicode characters,
 * each of them a normal token: a control, unused, unknown or user-defined
 * one would let text encode to a token that decodes to nothing), merges of
 * the form "a b" (TS_ERR_TOK_VOCAB); bos/eos/unk in range
 * (TS_ERR_TOK_RANGE); add_bos without a bos id (TS_ERR_TOK_VOCAB). On failure
 * *out is NULL and err (if errlen > 0) names what is wrong.
 */
int tok_new(const tok_spec *spec, tok **out, char *err, size_t errlen);

/*
 * Build a tokenizer from the tokenizer.ggml.* keys of a GGUF file: model,
 * tokens, scores, token_type (an integer array), merges, bos/eos/unknown_token_id,
 * add_bos_token (default: 1 for llama, 0 for gpt2), add_space_prefix
 * (default 1 for llama). Array lengths must equal the token count. An id key
 * holding 0xFFFFFFFF or an int -1 means "none"; a missing id key takes the
 * llama defaults (unk 0, bos 1, eos 2) for SPM and "none" for BPE.
 */
int tok_new_from_gguf(const gguf_ctx *g, tok **out, char *err, size_t errlen);

void tok_free(tok *t);

/*
 * Encode len bytes of text (need not be NUL-terminated; may contain NULs).
 * add_bos: 1 prepends the BOS id (TS_ERR_INVAL if the vocabulary has none).
 * out: room for cap ids; may be NULL when cap is 0.
 * OUT n_out: ids produced, or on TS_ERR_INVAL for a short buffer the number
 * needed (the contents of out are then unspecified). Returns 0 or a negative
 * code (TS_ERR_NOMEM, TS_ERR_INVAL).
 */
int tok_encode(const tok *t, const char *text, size_t len, int add_bos,
               int32_t *out, int cap, int *n_out);

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
 * SPM add_space_prefix encoding put in front (no effect otherwise).
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
/* Id of the first token whose text is exactly these bytes, or -1. */
int32_t tok_find(const tok *t, const char *text, size_t len);
/* Raw vocabulary text of a token (not terminated), or NULL for a bad id. */
const char *tok_text(const tok *t, int32_t id, size_t *len);

#endif
