/*
 * grammar_re.c - the regex subset of grammar.h compiled to grammar rules,
 * by recursive descent: an alternation is a rule, a sequence an
 * alternative, a quantifier a small rule (x* is "s ::= x s | ''").
 *
 * Regexes describe characters, grammars bytes: '.', negated classes and
 * \D \W \S take any valid UTF-8 multi-byte character as well as their
 * ASCII members; a literal non-ASCII character is its bytes in sequence
 * (and a quantifier after it repeats the whole character). In JSON-string
 * mode (a schema's pattern) the bytes emitted are the JSON-escaped text:
 * a literal quote becomes \", a backslash \\, a newline \n; classes and '.'
 * leave out the quote, the backslash and control characters, so a pattern
 * never produces them except as literals. Recursion depth of groups is
 * bounded (RE_MAX_DEPTH) so a hostile pattern cannot exhaust the C stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "grammar_int.h"
#include "utf8.h"

#define RE_MAX_DEPTH 64

typedef struct re_p {
    gr__b *b;
    const char *s;
    size_t n, i;
    int json;                   /* GR__RE_JSON */
    int depth;
    char *err;
    size_t errlen;
    int rc;
} re_p;

__attribute__((format(printf, 2, 3)))
static int re_fail(re_p *p, const char *fmt, ...) {
    if (p->rc) return p->rc;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->rc = err_set(p->err, p->errlen, TS_ERR_INVAL, "%s at offset %zu of the regex", msg, p->i);
    return p->rc;
}

/* Append byte c as the output must spell it. */
static void emit_byte(re_p *p, gr__seq *s, uint8_t c) {
    if (!p->json) {
        gr__seq_byte(p->b, s, c);
        return;
    }
    char esc[8];
    if (c == '"' || c == '\\') {
        esc[0] = '\\';
        esc[1] = (char)c;
        gr__seq_lit(p->b, s, esc, 2);
    } else if (c == '\n' || c == '\t' || c == '\r') {
        esc[0] = '\\';
        esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        gr__seq_lit(p->b, s, esc, 2);
    } else if (c < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", c);
        gr__seq_lit(p->b, s, esc, 6);
    } else {
        gr__seq_byte(p->b, s, c);
    }
}

/* Emit an ASCII class (set over 0..127) plus, when multi, any multi-byte
 * UTF-8 character: one element when it can be, else a rule. */
static void emit_class(re_p *p, gr__seq *s, gr__set set, int multi) {
    int esc_q = 0, esc_b = 0;
    if (p->json) {
        esc_q = gr__set_has(&set, '"');
        esc_b = gr__set_has(&set, '\\');
        set.w['"' >> 6] &= ~(1ull << ('"' & 63));
        set.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
        set.w[0] &= ~0xffffffffull; /* control characters: only as literals */
    }
    int empty = !(set.w[0] | set.w[1] | set.w[2] | set.w[3]);
    if (!multi && !esc_q && !esc_b) {
        if (empty) {
            re_fail(p, "a class that matches nothing here");
            return;
        }
        gr__seq_set(p->b, s, &set);
        return;
    }
    int32_t r = gr__rule_new(p->b);
    gr__seq a = {0};
    if (!empty) {
        gr__seq_set(p->b, &a, &set);
        gr__alt_add(p->b, r, &a);
    }
    if (multi) {
        gr__seq_ref(p->b, &a, gr__rule_utf8_multi(p->b));
        gr__alt_add(p->b, r, &a);
    }
    if (esc_q) {
        gr__seq_lit(p->b, &a, "\\\"", 2);
        gr__alt_add(p->b, r, &a);
    }
    if (esc_b) {
        gr__seq_lit(p->b, &a, "\\\\", 2);
        gr__alt_add(p->b, r, &a);
    }
    gr__seq_free(&a);
    gr__seq_ref(p->b, s, r);
}

/* \d \w \s and their negations into set; returns 1 if c named one, and
 * sets *neg for the upper-case forms. */
static int perl_class(uint8_t c, gr__set *set, int *neg) {
    gr__set x = {{0}};
    switch (c | 0x20) {
    case 'd': gr__set_range(&x, '0', '9'); break;
    case 'w':
        gr__set_range(&x, '0', '9');
        gr__set_range(&x, 'a', 'z');
        gr__set_range(&x, 'A', 'Z');
        gr__set_add(&x, '_');
        break;
    case 's':
        gr__set_add(&x, ' ');
        gr__set_range(&x, '\t', '\r');
        break;
    default: return 0;
    }
    *neg = c >= 'A' && c <= 'Z';
    *set = x;
    return 1;
}

static void complement_ascii(gr__set *set) {
    set->w[0] = ~set->w[0];
    set->w[1] = ~set->w[1];
    set->w[2] = set->w[3] = 0;
}

/* A simple escape's byte (\n, \., ...), or -1. */
static int escape_byte(re_p *p, uint8_t c) {
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    default: break;
    }
    if (c && strchr("\\.^$|?*+()[]{}-/\"' #&~,:;<=>!@%`", c)) return c;
    re_fail(p, "the escape \\%c is not supported", c);
    return -1;
}

static void parse_class(re_p *p, gr__seq *s) {
    gr__set set = {{0}};
    int neg = 0, first = 1;
    p->i++; /* '[' */
    if (p->i < p->n && p->s[p->i] == '^') neg = 1, p->i++;
    for (;;) {
        if (p->i >= p->n) {
            re_fail(p, "unterminated class");
            return;
        }
        uint8_t c = (uint8_t)p->s[p->i];
        if (c == ']' && !first) break;
        first = 0;
        p->i++;
        int lo = c;
        if (c == '\\') {
            if (p->i >= p->n) {
                re_fail(p, "a trailing backslash");
                return;
            }
            uint8_t e = (uint8_t)p->s[p->i++];
            gr__set pc;
            int pneg;
            if (perl_class(e, &pc, &pneg)) {
                if (pneg) {
                    re_fail(p, "\\%c inside a class is not supported", e);
                    return;
                }
                for (int w = 0; w < 4; w++) set.w[w] |= pc.w[w];
                continue;
            }
            if ((lo = escape_byte(p, e)) < 0) return;
        }
        if (lo >= 0x80) {
            re_fail(p, "non-ASCII characters in a class are not supported");
            return;
        }
        int hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = (uint8_t)p->s[p->i++];
            if (hi == '\\') {
                if (p->i >= p->n) {
                    re_fail(p, "a trailing backslash");
                    return;
                }
                if ((hi = escape_byte(p, (uint8_t)p->s[p->i++])) < 0) return;
            }
            if (hi >= 0x80 || hi < lo) {
                re_fail(p, "a bad class range");
                return;
            }
        }
        gr__set_range(&set, (unsigned)lo, (unsigned)hi);
    }
    p->i++; /* ']' */
    if (neg) complement_ascii(&set);
    emit_class(p, s, set, neg);
}

static int32_t parse_alt(re_p *p);

/* One atom into a (empty on entry). */
static void parse_atom(re_p *p, gr__seq *a) {
    uint8_t c = (uint8_t)p->s[p->i];
    if (c == '(') {
        p->i++;
        if (p->i + 1 < p->n && p->s[p->i] == '?') {
            if (p->s[p->i + 1] != ':') {
                re_fail(p, "(?%c is not supported (only (?:...))", p->s[p->i + 1]);
                return;
            }
            p->i += 2;
        }
        if (++p->depth > RE_MAX_DEPTH) {
            re_fail(p, "groups nested deeper than %d", RE_MAX_DEPTH);
            return;
        }
        int32_t r = parse_alt(p);
        p->depth--;
        if (p->rc) return;
        if (p->i >= p->n || p->s[p->i] != ')') {
            re_fail(p, "unbalanced parenthesis");
            return;
        }
        p->i++;
        gr__seq_ref(p->b, a, r);
    } else if (c == '[') {
        parse_class(p, a);
    } else if (c == '.') {
        p->i++;
        gr__set set = {{0}};
        gr__set_range(&set, 0, 0x7f);
        set.w[0] &= ~(1ull << '\n');
        emit_class(p, a, set, 1);
    } else if (c == '\\') {
        p->i++;
        if (p->i >= p->n) {
            re_fail(p, "a trailing backslash");
            return;
        }
        uint8_t e = (uint8_t)p->s[p->i];
        gr__set set;
        int neg;
        if (perl_class(e, &set, &neg)) {
            p->i++;
            if (neg) complement_ascii(&set);
            emit_class(p, a, set, neg);
            return;
        }
        if (e == 'x' && p->i + 2 < p->n) {
            unsigned v;
            if (sscanf(p->s + p->i + 1, "%2x", &v) == 1 && v < 0x80) {
                p->i += 3;
                emit_byte(p, a, (uint8_t)v);
                return;
            }
        }
        if ((e >= '1' && e <= '9') || strchr("bBAzZGkpPu", e)) {
            re_fail(p, "\\%c (anchors, backreferences, \\p, \\u) is not supported", e);
            return;
        }
        int b = escape_byte(p, e);
        if (b < 0) return;
        p->i++;
        emit_byte(p, a, (uint8_t)b);
    } else if (c == '^' || c == '$') {
        re_fail(p, "'%c' is supported only at the start / end of the regex", c);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        re_fail(p, "'%c' follows nothing", c);
    } else if (c == ')') {
        re_fail(p, "unbalanced parenthesis");
    } else {
        /* A literal character: all its UTF-8 bytes (the regex is valid
         * UTF-8), so a quantifier repeats it whole. */
        uint32_t cp;
        size_t len = utf8_decode(p->s + p->i, p->n - p->i, &cp);
        for (size_t k = 0; k < len; k++) emit_byte(p, a, (uint8_t)p->s[p->i + k]);
        p->i += len;
    }
}

static int parse_count(re_p *p, long *v) {
    size_t st = p->i;
    long x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > GR_MAX_REPEAT) return re_fail(p, "a repetition bound above %d", GR_MAX_REPEAT);
    }
    *v = x;
    return p->i > st ? 0 : -1;
}

/* x{min,max} (max < 0: unbounded) appended to s. */
static void repeat(re_p *p, gr__seq *s, const gr__seq *x, long min, long max) {
    gr__b *b = p->b;
    for (long k = 0; k < min; k++) gr__seq_cat(b, s, x);
    gr__seq t = {0};
    if (max < 0) {
        int32_t r = gr__rule_new(b);
        gr__seq_cat(b, &t, x);
        gr__seq_ref(b, &t, r);
        gr__alt_add(b, r, &t);
        gr__alt_empty(b, r);
        gr__seq_ref(b, s, r);
    } else if (max > min) {
        /* o_1 ::= x o_2 | "" ... o_last ::= x | "": up to max - min more. */
        int32_t next = -1;
        for (long k = max - min; k >= 1; k--) {
            int32_t r = gr__rule_new(b);
            gr__seq_cat(b, &t, x);
            if (next >= 0) gr__seq_ref(b, &t, next);
            gr__alt_add(b, r, &t);
            gr__alt_empty(b, r);
            next = r;
        }
        gr__seq_ref(b, s, next);
    }
    gr__seq_free(&t);
}

static void parse_quant(re_p *p, gr__seq *s, const gr__seq *x) {
    long min = 1, max = 1;
    if (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '*') min = 0, max = -1, p->i++;
        else if (c == '+') min = 1, max = -1, p->i++;
        else if (c == '?') min = 0, max = 1, p->i++;
        else if (c == '{') {
            size_t save = p->i++;
            if (parse_count(p, &min)) {
                if (p->rc) return;
                p->i = save; /* not a bound: a literal '{' is refused below */
                re_fail(p, "a '{' that is not a repetition bound");
                return;
            }
            max = min;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                max = -1;
                if (p->i < p->n && p->s[p->i] != '}' && parse_count(p, &max)) {
                    re_fail(p, "a bad repetition bound");
                    return;
                }
            }
            if (p->i >= p->n || p->s[p->i] != '}') {
                re_fail(p, "an unterminated repetition bound");
                return;
            }
            p->i++;
            if (max >= 0 && max < min) {
                re_fail(p, "a repetition bound {m,n} with n < m");
                return;
            }
        }
        if (max != 1 || min != 1) {
            if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: the same whole-match language */
            else if (p->i < p->n && p->s[p->i] == '+') {
                re_fail(p, "possessive quantifiers are not supported");
                return;
            }
            if (p->i < p->n && p->s[p->i] && strchr("*+?{", p->s[p->i])) {
                re_fail(p, "a quantifier after a quantifier");
                return;
            }
        }
    }
    repeat(p, s, x, min, max);
}

static int32_t parse_alt(re_p *p) {
    int32_t r = gr__rule_new(p->b);
    gr__seq s = {0}, a = {0};
    for (;;) {
        while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')' && !p->rc) {
            a.n = 0;
            parse_atom(p, &a);
            if (p->rc) break;
            parse_quant(p, &s, &a);
        }
        if (p->rc) break;
        gr__alt_add(p->b, r, &s);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    gr__seq_free(&s);
    gr__seq_free(&a);
    return r;
}

int gr__regex_rule(gr__b *b, const char *re, size_t len, int flags, int32_t *out_rule, char *err, size_t errlen) {
    re_p p = {.b = b, .s = re, .n = len, .json = !!(flags & GR__RE_JSON), .err = err, .errlen = errlen};
    size_t bad = utf8_valid_prefix(re, len);
    if (bad < len) return err_set(err, errlen, TS_ERR_INVAL, "the regex is not valid UTF-8 (byte %zu)", bad);
    int head = 1, tail = 1;
    if (p.n && p.s[0] == '^') p.i = 1, head = 0;
    if (p.n > p.i && p.s[p.n - 1] == '$') {
        size_t bs = 0;
        while (bs + 2 <= p.n && p.s[p.n - 2 - bs] == '\\') bs++;
        if (bs % 2 == 0) p.n--, tail = 0;
    }
    if (!(flags & GR__RE_SEARCH)) head = tail = 0;
    int32_t body = parse_alt(&p);
    if (!p.rc && p.i < p.n) re_fail(&p, "unbalanced parenthesis");
    if (p.rc) return p.rc;
    /* Unanchored (JSON Schema pattern): anything may come before and after. */
    int32_t r = gr__rule_new(b);
    gr__seq s = {0}, any = {0};
    gr__set all = {{0}};
    gr__set_range(&all, 0, 0x7f);
    emit_class(&p, &any, all, 1);
    if (head) repeat(&p, &s, &any, 0, -1);
    gr__seq_ref(b, &s, body);
    if (tail) repeat(&p, &s, &any, 0, -1);
    gr__alt_add(b, r, &s);
    gr__seq_free(&s);
    gr__seq_free(&any);
    *out_rule = r;
    return p.rc;
}

int gr_compile_regex(const char *re, size_t len, const gr_vocab *v, gr_grammar **out, char *err, size_t errlen) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!v || !re) return err_set(err, errlen, TS_ERR_INVAL, "no regex or vocabulary");
    gr__b b;
    gr__b_init(&b);
    int32_t r;
    int rc = gr__regex_rule(&b, re, len, 0, &r, err, errlen);
    if (!rc) rc = gr__build(&b, r, v, out, err, errlen);
    gr__b_deinit(&b);
    return rc;
}
