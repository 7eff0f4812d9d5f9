/*
 * utf8.h - UTF-8 decoding, encoding, validation and cutting: the one copy
 * that the tokenizers, the chat-template interpreter and the OpenAI wire
 * format share.
 *
 * Well-formed means Unicode's Table 3-7: shortest form, no surrogates
 * (U+D800..DFFF), nothing above U+10FFFF. The decoders differ only in how
 * far they step over an ill-formed sequence, because the callers need
 * different things there: a tokenizer wants each stray byte to be a
 * character of its own (so byte fallback and lookups see every byte), a
 * writer that substitutes U+FFFD wants one replacement per maximal subpart
 * (Unicode's recommended practice, what browsers and Python do). Either way
 * the step is at least one byte and never reads past s[n - 1].
 *
 * Pure functions over caller memory: no allocation, no state, no I/O.
 */
#ifndef TS_UTF8_H
#define TS_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* What the decoders put in *cp for an ill-formed sequence: no code point is
 * this large, so it can never be mistaken for text. */
#define UTF8_INVALID UINT32_MAX

/* Most bytes one code point takes. */
#define UTF8_MAX_LEN 4

/* Decodes the character at s[0..n), n >= 1: returns its length in bytes and
 * sets *cp. An ill-formed or truncated sequence counts as its first byte
 * alone: returns 1 with *cp = UTF8_INVALID, so a stray byte never swallows
 * the bytes after it. */
size_t utf8_decode(const char *s, size_t n, uint32_t *cp);

/* As utf8_decode, except that an ill-formed sequence returns the length of
 * its maximal subpart (Unicode 3.9, D93b: the longest prefix that could
 * still begin a well-formed sequence, at least 1 byte), still with
 * *cp = UTF8_INVALID: the step to take when each such subpart becomes one
 * U+FFFD. */
size_t utf8_decode_subpart(const char *s, size_t n, uint32_t *cp);

/* Writes cp (at most U+10FFFF) to out as 1..UTF8_MAX_LEN bytes, no NUL, and
 * returns how many. A surrogate is written in the 3-byte form, as is; the
 * caller that must not produce one refuses it first. */
size_t utf8_encode(char *out, uint32_t cp);

/* Offset of the first ill-formed byte of s[0..n), or n when all of it is
 * well-formed UTF-8. */
size_t utf8_valid_prefix(const char *s, size_t n);

/* Length of the longest prefix of s[0..n) of at most max bytes that does
 * not end inside a character: backs off over continuation bytes only, so
 * it keeps valid text valid when it truncates (and is meant for that). */
size_t utf8_cut(const char *s, size_t n, size_t max);

#endif /* TS_UTF8_H */
