/*
 * wpm.h - WordPiece encoding of BERT-family vocabularies (GGUF
 * tokenizer.ggml.model = "bert"), independent of how the vocabulary is
 * stored: the caller supplies token lookup and id emission.
 *
 * First BERT's basic tokenizer, as Hugging Face's BertNormalizer and
 * BertPreTokenizer do it: NUL, U+FFFD and other control/format characters
 * are dropped (tab, LF and CR are whitespace), CJK ideographs become words
 * of their own, an uncased vocabulary lowercases and strips accents
 * (canonical decomposition, combining marks removed), whitespace separates
 * words and every punctuation character is a word of its own. Then each
 * word is split greedily, longest match first, into vocabulary tokens; a
 * word that cannot be split completely, or that is longer than
 * WPM_MAX_WORD_CHARS characters, is one unknown token.
 *
 * Token spelling follows llama.cpp's GGUF convention (convert_hf_to_gguf.py
 * rewrites the vocabulary): a piece that starts a word is stored with a
 * U+2581 prefix ("▁hello"), a continuation without one ("llo"), where
 * vocab.txt would say "hello" and "##llo". An invalid UTF-8 byte counts as
 * U+FFFD and is dropped. Nothing here allocates more than one word's
 * scratch per call, and nothing exits.
 */
#ifndef TS_WPM_H
#define TS_WPM_H

#include <stddef.h>
#include <stdint.h>

#define WPM_MAX_WORD_CHARS 100      /* longer words are [UNK], as in BERT */

/* Id of the token spelled s[0, n), or -1. */
typedef int32_t (*wpm_lookup_fn)(const void *ctx, const char *s, size_t n);
typedef void (*wpm_emit_fn)(void *ctx, int32_t id);

/*
 * Encode len bytes of text, calling emit for each id in order. uncased: 1
 * lowercases and strips accents. unk: the id for a word that cannot be
 * split. Returns 0 or TS_ERR_NOMEM.
 */
int wpm_encode(const char *text, size_t len, int uncased, wpm_lookup_fn lookup, const void *lctx,
               int32_t unk, wpm_emit_fn emit, void *ectx);

#endif
