/*
 * grammar.h - constrained decoding: a grammar compiled from a JSON Schema, a
 * regular expression or a list of choices, and per-request states that mask
 * a row of logits so that only tokens keeping the output inside the grammar
 * can be sampled. This is what response_format json_object / json_schema and
 * vLLM's guided_json / guided_regex / guided_choice run on.
 *
 * Three objects with three lifetimes:
 *  - gr_vocab: built once per model from its tok (gr_vocab_new), read-only
 *    afterwards and shared by every grammar and thread. It holds each
 *    token's decoded bytes (tok_decode) and a trie over them, so a mask is a
 *    walk of the trie from the current grammar state that prunes every branch
 *    the grammar cannot follow, instead of vocab x token length work.
 *  - gr_grammar: one per request (or shared between requests with the same
 *    schema); compiled without touching the vocabulary beyond a pointer to
 *    it, read-only once built, any number of states may use it at once.
 *  - gr_state: one per sequence, not thread-safe, owns fixed-size scratch
 *    allocated by gr_state_new (about 1.5 MB with a 32k vocabulary: the
 *    stack arena, a lazily built automaton over sets of stacks, and a cache
 *    of 16 masks), so gr_state_mask and gr_state_accept never allocate.
 *
 * The grammar is a set of rules over bytes (alternatives of sequences of
 * byte classes and rule references, the form llama.cpp's GBNF compiles to),
 * recognised by a set of stacks kept in a hash-consed graph: identical
 * stacks are one node, so a position reached along several paths counts
 * once, each expansion is made once per byte (which keeps nested nullable
 * loops such as (a*)* linear), and a state has a structural key, which keys a per-state cache of masks (the common case of
 * "inside a string" repeats the same state token after token). A mask that
 * is not cached walks the trie over a set automaton built on first use
 * (each (set, byte) step is expanded once, then read from a table). Cost,
 * measured by bench/grammar.c on the 15m preset's 32k vocabulary: 8-30 us
 * per token for JSON schemas, about 200 us for a word-level regex whose
 * states change every token, against 160-210 us for the plain sampling
 * step; the 15m model decodes under the json_object grammar at its free
 * speed within the run's noise, the masks taking 0.5% of the time.
 *
 * Byte-level contract. A token is allowed when every byte of its decoded
 * piece can be consumed in order from the current state; control, unused and
 * unknown tokens and tokens that decode to nothing are never allowed; EOS
 * (tok_eos) is allowed exactly when the output so far is complete. Output is
 * the concatenation of the accepted tokens' tok_decode bytes: a caller that
 * strips an SPM leading space or applies stop strings changes that text and
 * must not (or must accept that the grammar cannot vouch for it).
 *
 * JSON output is valid UTF-8 (strings are checked byte by byte: no overlong
 * forms, no surrogates, \u escapes never name a surrogate) and its
 * whitespace is bounded: at most GR_WS_MAX consecutive whitespace bytes
 * before the value and between structural tokens, none after the value, so
 * a model looping on spaces or newlines reaches a token it must emit.
 * Numbers are bounded too (GR_NUM_DIGITS digits before and after the point,
 * at most two exponent digits), so every number is finite in a double.
 *
 * JSON Schema subset (gr_compile_json_schema), anything else is refused
 * with TS_ERR_INVAL and a message naming the keyword and where it is:
 *  - type: object, array, string, number, integer, boolean, null, or a list
 *    of them; no type: any JSON value (true / {} likewise; false refused).
 *  - object: properties (emitted in schema order), required (the others are
 *    optional, each may be left out), additionalProperties false or absent
 *    (only the declared properties are produced either way); with no
 *    properties, any object, or with additionalProperties a schema, an
 *    object whose every value follows it.
 *  - array: items (absent: any value), minItems/maxItems.
 *  - string: minLength/maxLength (in code points, as ajv counts them),
 *    pattern (the regex subset below, unanchored unless it starts with ^ /
 *    ends with $, as JSON Schema says; its classes never produce a quote,
 *    a backslash or a control character; not together with the lengths).
 *    format is refused.
 *  - enum, const (any JSON values, emitted compactly), anyOf, oneOf (the
 *    branches are not made exclusive: overlapping oneOf branches can give
 *    an output matching two), allOf with one schema, $ref to "#",
 *    "#/$defs/NAME" or "#/definitions/NAME", recursive refs included.
 *  - Annotations are ignored: title, description, $schema, $id, $comment,
 *    default, examples, deprecated, readOnly, writeOnly.
 *  - Repetition bounds (minItems, maxItems, minLength, maxLength, {m,n})
 *    above GR_MAX_REPEAT are refused.
 *
 * Regex subset (gr_compile_regex, and JSON Schema pattern): literals, \
 * escapes of metacharacters, \d \w \s \D \W \S, \n \t \r \f \v, \xHH
 * (ASCII), classes [a-z] and [^...] (ASCII members only), ., groups (...)
 * and (?:...), |, *, +, ?, {m}, {m,}, {m,n} (a trailing lazy ? is accepted
 * and changes nothing for a whole match). The whole output must match.
 * Anchors other than a leading ^ / trailing $, backreferences, lookaround,
 * \b, \p and possessive quantifiers are refused. '.' matches any UTF-8
 * character but newline; negated classes and \D \W \S match any character
 * outside them, multi-byte ones included. Agreement with PCRE2 (UTF mode,
 * full match) is what test_grammar checks.
 *
 * Limits, all conservative (they can only refuse a byte the grammar
 * allows, never allow one it does not): a set holds at most 1024 stacks
 * (a highly ambiguous regex such as nested counted groups can need more),
 * an expansion that consumes nothing stops 1024 rules deep, a byte gets a
 * budget of expansions, and one mask a budget of 4M (about 0.1 s; past
 * it the mask leaves only the tokens found so far). Output the grammar
 * allows is thus always valid and a step's time is bounded; a pathological
 * regex may leave fewer ways to write it, or none (the output then ends
 * incomplete, as with max_tokens).
 *
 * Nothing here exits, aborts or asserts on anything a request controls;
 * errors are negative TS_ERR_* codes with a message in err.
 */
#ifndef TS_GRAMMAR_H
#define TS_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "tok.h"

#define GR_WS_MAX 24            /* consecutive JSON whitespace bytes allowed */
#define GR_NUM_DIGITS 16        /* digits of a number's integer and fraction parts */
#define GR_MAX_REPEAT 1024      /* largest repetition bound a grammar may ask for */
#define GR_MAX_RULES 200000     /* rules in one compiled grammar */
#define GR_MAX_ELEMS (1 << 20)  /* elements (8 bytes each) in one compiled grammar */
#define GR_MAX_SCHEMA_DEPTH 64  /* nesting of schema objects the compiler follows */
#define GR_MAX_END 16           /* end tokens besides EOS a state accepts */

typedef struct gr_vocab gr_vocab;
typedef struct gr_grammar gr_grammar;
typedef struct gr_state gr_state;

/* ---- vocabulary ------------------------------------------------------------ */

/* Build the token trie for t (t must outlive the gr_vocab). Linear in the
 * vocabulary's bytes plus a sort; a few ms for 32k tokens, so once per model.
 * Returns 0, TS_ERR_NOMEM or TS_ERR_INVAL (NULL argument). */
int gr_vocab_new(const tok *t, gr_vocab **out);
void gr_vocab_free(gr_vocab *v);
int gr_vocab_n(const gr_vocab *v);      /* the vocabulary size */

/* ---- compiling --------------------------------------------------------------- */

/* Each compiler fills *out (free with gr_free; v must outlive it), or
 * returns a negative code with *out NULL and a one-line message in err
 * (TS_ERR_INVAL for input the subset does not cover or that is malformed,
 * TS_ERR_NOMEM). */

/* A JSON Schema given as JSON text (len bytes; need not be NUL-terminated). */
int gr_compile_json_schema(const char *schema, size_t len, const gr_vocab *v, gr_grammar **out,
                           char *err, size_t errlen);
/* Any JSON object (response_format {type: json_object}). */
int gr_compile_json_object(const gr_vocab *v, gr_grammar **out, char *err, size_t errlen);
/* Output matching the whole regular expression (len bytes). */
int gr_compile_regex(const char *re, size_t len, const gr_vocab *v, gr_grammar **out, char *err,
                     size_t errlen);
/* Output exactly one of n strings (raw bytes, lens[i] each or strlen when
 * lens is NULL); n >= 1, and an empty string is refused. */
int gr_compile_choice(const char *const *choices, const size_t *lens, size_t n, const gr_vocab *v,
                      gr_grammar **out, char *err, size_t errlen);
void gr_free(gr_grammar *g);

/* ---- decoding ---------------------------------------------------------------- */

/* A state at the start of the output. TS_ERR_NOMEM, TS_ERR_INVAL. */
int gr_state_new(const gr_grammar *g, gr_state **out);
void gr_state_free(gr_state *s);

/*
 * Tokens that end the output like EOS (a chat template's end-of-turn token
 * such as <|eot_id|> or <|im_end|>, a request's stop_token_ids): allowed,
 * like EOS, exactly when the output is complete, and accepting one finishes
 * the state. Control tokens among them are allowed too. Replaces the
 * previous list; call before the first mask. TS_ERR_INVAL (n outside
 * 0..GR_MAX_END), TS_ERR_TOK_RANGE (a bad id).
 */
int gr_state_set_end_ids(gr_state *s, const int32_t *ids, int n);

/*
 * Set logits[i] = -INFINITY for every token i the grammar does not allow
 * now; logits has gr_vocab_n() entries. Returns the number of allowed
 * tokens (0: nothing may follow and there is no EOS to end with, so the
 * caller ends the sequence; gr_state_done says so too), or a negative code.
 * Never allocates.
 */
int gr_state_mask(gr_state *s, float *logits);

/* 1 if token id may come next, 0 if not (a bad id is 0). Cheap: one token's
 * bytes from the current state; does not change the state. */
int gr_state_allowed(gr_state *s, int32_t id);

/*
 * Advance past token id. EOS (and the end ids) is accepted only when
 * gr_state_can_end(); it then finishes the state (nothing more is allowed). Returns 0, or
 * TS_ERR_INVAL for a token the grammar does not allow (the state is then
 * unchanged) and TS_ERR_TOK_RANGE for a bad id.
 */
int gr_state_accept(gr_state *s, int32_t id);

/* Counters of one state, for benchmarks and metrics. */
typedef struct gr_stats {
    uint64_t masks;             /* gr_state_mask calls */
    uint64_t cache_hits;        /* masks served from the state's cache */
    uint64_t trie_nodes;        /* trie edges walked by the other masks */
    uint64_t memo_hits;         /* of those, advances read from the set automaton */
    uint64_t resets;            /* arena compactions (each empties the automaton) */
    uint64_t slow_walks;        /* masks that outgrew the automaton and walked without it */
} gr_stats;

void gr_state_stats(const gr_state *s, gr_stats *out);

/* 1 when the output so far is a complete match (EOS would be accepted). */
int gr_state_can_end(const gr_state *s);
/* 1 when it is complete and nothing but EOS can follow, or EOS was
 * accepted: the caller should finish the sequence now (finish_reason stop). */
int gr_state_done(const gr_state *s);

#endif
