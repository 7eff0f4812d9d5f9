/*
 * vocab.h - a deterministic, real SentencePiece-style byte-fallback
 * vocabulary of any size, for the random-weight models `tessera mkmodel`
 * writes and for tests.
 *
 * The pieces come from actually training BPE on a small English corpus built
 * into vocab.c (words prefixed with U+2581 as SPM does), then, once the corpus
 * has no pair left to merge, from deterministic pseudo-random concatenations
 * of existing pieces. Every normal piece is accepted only after checking that
 * the SPM encoder of tok.c (highest score first, ties leftmost) turns the
 * piece's own text into exactly that piece, and scores fall with creation
 * order, so adding a piece never changes how earlier pieces encode: every
 * normal piece is reachable.
 *
 * Layout: 0 "<unk>" (unknown), 1 "<s>" (control, BOS), 2 "</s>" (control,
 * EOS), 3..258 "<0x00>".."<0xFF>" (byte), then normal pieces, the k-th of
 * them scored -k. Pieces are at most VOCAB_PIECE_MAX bytes and hold U+2581
 * only as their first character, as SentencePiece's whitespace splitting
 * produces (which also lets tok.c encode them word by word). The result owns
 * its memory; it depends on nothing but n_vocab.
 */
#ifndef TS_VOCAB_H
#define TS_VOCAB_H

#include <stdint.h>

#include "gguf.h"

#define VOCAB_PIECE_MAX 16          /* bytes of the longest normal piece */
#define VOCAB_N_MAX 1000000u        /* largest n_vocab vocab_synth accepts */
#define VOCAB_FIRST_PIECE 259       /* id of the first normal piece */

typedef struct vocab_synth_out {
    char **tokens;      /* (n) NUL-terminated texts, pointing into one block */
    float *scores;      /* (n) */
    int32_t *types;     /* (n) TOK_TYPE_* */
    uint32_t n;
    int32_t unk, bos, eos;  /* 0, 1, 2 */
    char *block_;       /* storage behind tokens; private */
} vocab_synth_out;

/* Smallest n_vocab vocab_synth accepts: the fixed tokens plus one piece per
 * distinct character of the corpus (294 today; the corpus is kept small
 * enough that mkmodel's lower bound of 300 always works). */
uint32_t vocab_synth_min(void);

/*
 * Fill *out with an n_vocab-token vocabulary. TS_ERR_INVAL if n_vocab is
 * below vocab_synth_min() or above VOCAB_N_MAX, TS_ERR_NOMEM on allocation
 * failure; *out is zeroed on failure. Same n_vocab, same bytes, every time.
 */
int vocab_synth(uint32_t n_vocab, vocab_synth_out *out);
void vocab_synth_free(vocab_synth_out *out);

/* Add the tokenizer.ggml.* keys (model "llama", tokens, scores, token_type,
 * bos/eos/unknown ids, add_bos_token, add_space_prefix) to a GGUF writer. */
int vocab_synth_write(const vocab_synth_out *v, gguf_writer *w);

#endif
