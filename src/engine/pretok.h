/*
 * pretok.h - the pre-tokenizers of byte-level BPE vocabularies: the regexes
 * that cut text into the pieces BPE then merges within, one set per
 * tokenizer.ggml.pre name.
 *
 * Each set is the Hugging Face pre_tokenizer of the model family, written as
 * the models publish it in tokenizer.json: either ByteLevel(use_regex) with
 * GPT-2's pattern, or a Sequence of Split{pattern, behavior: Isolated}. A
 * Sequence applies each Split to every piece the previous ones produced, and
 * a Split keeps both its matches and the gaps between them as pieces, so the
 * pieces always tile the text: no byte is dropped or repeated. The
 * regexes run on PCRE2 (UTF, UCP, JIT where the library has it), compiled
 * once per pretok.
 *
 * Where PCRE2 and the reference engines (Oniguruma in HF tokenizers, JS
 * regexes in transformers.js) differ, the pattern is adapted as llama.cpp
 * adapts it: "(?i:'s|'t|...)" becomes explicit case classes ('[sS]), so
 * Unicode case folding cannot make "'\u017F" (long s) a contraction. Invalid
 * UTF-8 never matches a pattern item (PCRE2_MATCH_INVALID_UTF): each invalid
 * byte stays in a gap, so it ends the piece before it and is a piece of its
 * own or part of the next gap.
 *
 * A pretok is read-only after pretok_new and may be shared by threads; each
 * pretok_split call allocates its own match data. Nothing here exits.
 */
#ifndef TS_PRETOK_H
#define TS_PRETOK_H

#include <stddef.h>

typedef struct pretok pretok;

/* Called once per piece, in text order: the piece is text[off, off + len).
 * A negative return stops the split and is returned by pretok_split. */
typedef int (*pretok_piece_fn)(void *ctx, size_t off, size_t len);

/*
 * The pre-tokenizer for a tokenizer.ggml.pre name (NULL or "" means
 * "default", which is GPT-2's). TS_ERR_TOK_MODEL for a name it does not
 * know (err names it and lists the known ones), TS_ERR_NOMEM, or
 * TS_ERR_TOK_VOCAB if a pattern fails to compile (a bug: err says which).
 */
int pretok_new(const char *name, pretok **out, char *err, size_t errlen);
void pretok_free(pretok *p);

/*
 * Cut len bytes of text into pieces, calling fn for each non-empty piece.
 * Returns 0, TS_ERR_NOMEM, TS_ERR_INVAL for a matcher failure (the match
 * and heap limits pretok.c sets; not reached by the shipped patterns) or
 * what fn returned.
 */
int pretok_split(const pretok *p, const char *text, size_t len, pretok_piece_fn fn, void *ctx);

/* The canonical name of the set ("gpt-2", "llama-bpe", "qwen2", ...). */
const char *pretok_name(const pretok *p);

/* 1 if the family's tokenizer.json sets "ignore_merges": a piece that is
 * itself a vocabulary token is that token, whatever the merges would do
 * (Llama 3, Tekken). */
int pretok_ignore_merges(const pretok *p);

/* The known names, NULL-terminated (aliases included), for help texts. */
const char *const *pretok_names(void);

#endif
