/*
 * common.h - what the libFuzzer targets in fuzz/ share: the vocabularies the
 * tokenizer paths run on, a file view of an input for APIs that only read a
 * path, and the check that turns a broken invariant into a crash report.
 *
 * Targets are deterministic: every vocabulary is built once, on first use,
 * from fixed data (the SPM one by the same vocab_synth code `tessera
 * mkmodel` writes into its models), and is read-only afterwards. What the
 * helpers build lives until the process ends, reachable from a static, so
 * LeakSanitizer does not count it; everything a target allocates per input
 * it frees before returning.
 */
#ifndef TS_FUZZ_COMMON_H
#define TS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "tok.h"

/* A broken invariant: print where and why, then abort so libFuzzer saves
 * the input as a crash. Only for fuzz code, never for library code. */
#define FZ_CHECK(cond)                                                            \
    do {                                                                          \
        if (!(cond)) fz_fail(__FILE__, __LINE__, #cond);                          \
    } while (0)
__attribute__((noreturn)) void fz_fail(const char *file, int line, const char *what);

/* The tokenizers the targets use (process lifetime; never free them):
 *   FZ_TOK_SPM      the vocabulary of `tessera mkmodel --preset tiny`: 512
 *                   SPM pieces from vocab_synth, add_bos, add_space_prefix;
 *   FZ_TOK_SPM_X    vocab_synth(400) plus the awkward cases: control and
 *                   user-defined tokens (chat markers), an unused token, a
 *                   piece with U+2581 inside a word (so encoding takes the
 *                   whole-text path), infinite scores, a duplicate text;
 *                   no space prefix, no add_bos;
 *   FZ_TOK_BPE      a GPT-2 byte-level BPE vocabulary derived from the same
 *                   synthetic pieces (U+2581 becomes a space, each byte its
 *                   bytes_to_unicode character, one merge per piece in
 *                   creation order) with <|endoftext|> and ChatML markers.
 * Aborts if one cannot be built: that is a bug in the tokenizer or here. */
enum { FZ_TOK_SPM = 0, FZ_TOK_SPM_X, FZ_TOK_BPE, FZ_N_TOKS };
const tok *fz_tok(int which);
/* The spec fz_tok(which) was built from (process lifetime, read-only). */
const tok_spec *fz_spec(int which);

/* The path of a file that holds exactly data[0..size) now: a memfd named
 * "/proc/self/fd/N", rewritten on every call. For APIs that only read a
 * path (cfg_load). Aborts if the memfd cannot be made or written. */
const char *fz_file(const uint8_t *data, size_t size);

/* A refusal's message: NUL-terminated within cap bytes, not empty, one
 * line (the parsers' headers promise it); a broken one is reported as
 * FZ_CHECK reports. */
void fz_check_message(const char *err, size_t cap);

/* 1 if s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code
 * points above U+10FFFF). */
int fz_utf8_valid(const char *s, size_t n);

/* A cheap deterministic hash of the input, for choosing among variants
 * without spending input bytes on it. */
uint64_t fz_hash(const uint8_t *data, size_t size);

#endif
