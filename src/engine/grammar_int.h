/*
 * grammar_int.h - what grammar.c (rules, recogniser, masks) shares with the
 * compilers grammar_json.c and grammar_re.c: the rule builder.
 *
 * A grammar is rules; a rule is alternatives; an alternative is a sequence
 * of elements ending in GR_E_END: a byte class (a 256-bit set) or a
 * reference to a rule. An alternative of only GR_E_END matches nothing (the
 * empty string). Compilers build sequences in a gr__seq and add each one as
 * an alternative of a rule; a rule may be referenced before its
 * alternatives exist, which is how recursion ($ref, nested JSON) is made.
 * Left recursion (a rule reachable from itself without consuming a byte)
 * must be avoided by the compilers: the recogniser drops such expansions
 * beyond a depth bound rather than looping.
 *
 * Builder functions never fail loudly: an allocation failure sets b->oom and
 * later calls do nothing, so a compiler checks once, at gr__build.
 */
#ifndef TS_GRAMMAR_INT_H
#define TS_GRAMMAR_INT_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

enum { GR_E_END = 0, GR_E_CHAR = 1, GR_E_REF = 2 };

typedef struct gr__elem {
    int32_t type;               /* GR_E_* */
    int32_t arg;                /* class index (CHAR) or rule id (REF) */
} gr__elem;

typedef struct gr__set {
    uint64_t w[4];              /* bit b set: byte b is in the class */
} gr__set;

typedef struct gr__seq {
    gr__elem *e;                /* (n) elements, without the END */
    int32_t n, cap;
} gr__seq;

typedef struct gr__alt {
    int32_t rule;               /* the rule this alternative belongs to */
    int32_t start;              /* index of its first element in elems */
} gr__alt;

typedef struct gr__b {
    gr__elem *elems;            /* (n_elems) every alternative, END-terminated */
    int32_t n_elems, cap_elems;
    gr__alt *alts;              /* (n_alts) in the order they were added */
    int32_t n_alts, cap_alts;
    int32_t n_rules;
    gr__set *sets;              /* (n_sets) distinct byte classes */
    int32_t n_sets, cap_sets;
    int oom;                    /* an allocation failed */
    int too_big;                /* GR_MAX_RULES exceeded */
    int32_t memo[16];           /* shared rules of the JSON compiler, -1 = not yet */
} gr__b;

void gr__b_init(gr__b *b);
void gr__b_deinit(gr__b *b);
int32_t gr__rule_new(gr__b *b);
/* Add s (then emptied) as an alternative of rule r. */
void gr__alt_add(gr__b *b, int32_t r, gr__seq *s);
/* Add the empty alternative to rule r. */
void gr__alt_empty(gr__b *b, int32_t r);

void gr__seq_free(gr__seq *s);
void gr__seq_set(gr__b *b, gr__seq *s, const gr__set *set);
void gr__seq_byte(gr__b *b, gr__seq *s, uint8_t c);
void gr__seq_range(gr__b *b, gr__seq *s, uint8_t lo, uint8_t hi);
void gr__seq_lit(gr__b *b, gr__seq *s, const char *text, size_t len);
void gr__seq_ref(gr__b *b, gr__seq *s, int32_t rule);
/* Append all of src's elements to s (src unchanged). */
void gr__seq_cat(gr__b *b, gr__seq *s, const gr__seq *src);

static inline void gr__set_add(gr__set *s, unsigned c) { s->w[c >> 6] |= 1ull << (c & 63); }
static inline int gr__set_has(const gr__set *s, unsigned c) { return (int)(s->w[c >> 6] >> (c & 63)) & 1; }
void gr__set_range(gr__set *s, unsigned lo, unsigned hi);

/* A rule matching one UTF-8 character of two to four bytes (exactly the
 * valid ones), shared through the memo. */
int32_t gr__rule_utf8_multi(gr__b *b);

/* Turn the builder into a grammar with root rule root (the builder is
 * emptied). Returns 0, TS_ERR_NOMEM or TS_ERR_INVAL (too many rules). */
int gr__build(gr__b *b, int32_t root, const gr_vocab *v, gr_grammar **out, char *err, size_t errlen);

/* Regex compiler flags. */
enum {
    GR__RE_JSON = 1,            /* the regex describes a JSON string's content: the bytes
                                 * emitted are its JSON-escaped form, without the quotes */
    GR__RE_SEARCH = 2,          /* JSON Schema's pattern: a match anywhere, unless anchored by
                                 * a leading ^ or trailing $ */
};

/* Regex compiler: parse re (len bytes) into a new rule *out_rule. Returns
 * 0 or TS_ERR_INVAL with a message naming the offset. */
int gr__regex_rule(gr__b *b, const char *re, size_t len, int flags, int32_t *out_rule, char *err,
                   size_t errlen);

#endif
