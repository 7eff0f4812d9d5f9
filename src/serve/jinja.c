/* jinja.c - a Jinja2 subset for chat templates; see jinja.h.
 *
 * Three stages. The lexer turns the source into tokens (text runs between
 * tags, then names, literals and operators inside tags), applying the
 * whitespace rules as it goes. The parser builds an AST by recursive
 * descent with Jinja2's precedence, and checks names of tags, filters,
 * tests, methods and functions against the tables below. The evaluator
 * walks the AST.
 *
 * Memory and errors. The parser allocates from the template's arena, a
 * render from its own; values are never freed one by one, the arena is
 * dropped at the end. That makes error handling a longjmp back to the
 * entry point: nothing can leak on the way, and the evaluator reads as
 * the language does instead of as a chain of return-code checks. The
 * render arena is capped (max_memory), which also bounds every quadratic
 * pattern a template can write (s = s + x in a loop); a step counter
 * bounds time.
 */
#include "jinja.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "utf8.h"

#define PARSE_MAX_SRC   (4u << 20)     /* bytes of template source */
#define PARSE_MAX_DEPTH 128            /* nested expressions and blocks */

/* ---- arena and errors ----------------------------------------------------- */

typedef struct ablk {
    struct ablk *next;
    size_t used, cap;
    max_align_t data[];
} ablk;

typedef struct arena {
    ablk *head;
    size_t total;           /* bytes of all blocks */
    size_t cap;             /* 0 = unlimited */
} arena;

/* n bytes, 16-aligned; NULL when the cap or malloc says no. */
static void *ar_alloc(arena *a, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    ablk *h = a->head;
    if (h && h->cap - h->used >= n) {
        void *p = (char *)h->data + h->used;
        h->used += n;
        return p;
    }
    size_t bc = n > 65536 ? n : 65536;
    if (a->cap && a->total + bc > a->cap) {
        if (a->total + n > a->cap) return NULL;
        bc = n;
    }
    ablk *b = malloc(sizeof *b + bc);
    if (!b) return NULL;
    b->next = a->head;
    b->used = n;
    b->cap = bc;
    a->head = b;
    a->total += bc;
    return b->data;
}

static void ar_free(arena *a) {
    for (ablk *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}

/* What the parser and the evaluator share: where to jump on error. */
typedef struct jctx {
    jmp_buf jb;
    arena *ar;
    char *err;
    size_t errlen;
    int rc;
    int mem_is_cap;         /* an allocation failure is the render cap */
} jctx;

__attribute__((format(printf, 5, 6), noreturn))
static void fail(jctx *c, int code, int line, int col, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) err_set(c->err, c->errlen, code, "%d:%d: %s", line, col, msg);
    else err_set(c->err, c->errlen, code, "%s", msg);
    c->rc = code;
    longjmp(c->jb, 1);
}

static void *c_alloc(jctx *c, size_t n) {
    void *p = ar_alloc(c->ar, n);
    if (!p) {
        if (c->mem_is_cap && (!c->ar->cap || c->ar->total + n <= c->ar->cap))
            fail(c, TS_ERR_NOMEM, 0, 0, "out of memory");
        if (c->mem_is_cap)
            fail(c, TS_ERR_INVAL, 0, 0, "template exceeds its memory limit (%zu bytes)",
                 c->ar->cap);
        fail(c, TS_ERR_NOMEM, 0, 0, "out of memory");
    }
    return p;
}

/* count items of size sz, failing on overflow. */
static void *c_array(jctx *c, size_t count, size_t sz) {
    if (sz && count > SIZE_MAX / 4 / sz) fail(c, TS_ERR_INVAL, 0, 0, "array too large");
    return c_alloc(c, count * sz);
}

/* ---- strings with provenance ---------------------------------------------- */

enum { M_DATA = 0, M_TPL = 1 };

/* Bytes p[0..n) (NUL after them) and their provenance m[0..n). */
typedef struct jstr {
    size_t n;
    char *p;
    uint8_t *m;
} jstr;

static jstr *s_new(jctx *c, size_t n) {
    if (n > SIZE_MAX / 4) fail(c, TS_ERR_INVAL, 0, 0, "string too large");
    jstr *s = c_alloc(c, sizeof *s);
    s->n = n;
    s->p = c_alloc(c, n + 1);
    s->m = c_alloc(c, n ? n : 1);
    s->p[n] = '\0';
    return s;
}

static jstr *s_from(jctx *c, const char *p, size_t n, int mask) {
    jstr *s = s_new(c, n);
    if (n) memcpy(s->p, p, n);
    memset(s->m, mask, n);
    return s;
}

static jstr *s_cstr(jctx *c, const char *p, int mask) { return s_from(c, p, strlen(p), mask); }

static jstr *s_sub(jctx *c, const jstr *s, size_t off, size_t n) {
    jstr *r = s_new(c, n);
    if (n) {
        memcpy(r->p, s->p + off, n);
        memcpy(r->m, s->m + off, n);
    }
    return r;
}

static jstr *s_cat(jctx *c, const jstr *a, const jstr *b) {
    if (a->n > SIZE_MAX / 4 - b->n) fail(c, TS_ERR_INVAL, 0, 0, "string too large");
    jstr *r = s_new(c, a->n + b->n);
    memcpy(r->p, a->p, a->n);
    memcpy(r->m, a->m, a->n);
    memcpy(r->p + a->n, b->p, b->n);
    memcpy(r->m + a->n, b->m, b->n);
    return r;
}

static int s_all_tpl(const jstr *s) {
    for (size_t i = 0; i < s->n; i++)
        if (s->m[i] != M_TPL) return 0;
    return 1;
}

static int s_eq(const jstr *a, const jstr *b) {
    return a->n == b->n && memcmp(a->p, b->p, a->n) == 0;
}

static int s_eqc(const jstr *a, const char *b) {
    size_t n = strlen(b);
    return a->n == n && memcmp(a->p, b, n) == 0;
}

/* Bytes of the UTF-8 sequence starting at p[0] (n > 0 left); an invalid
 * byte counts as a sequence of one, so indexing never splits or fails.
 * Only the shape is checked (a lead byte, then its continuation bytes),
 * unlike utf8_decode, which also refuses overlong forms, surrogates and
 * code points past U+10FFFF: those still count as one code point here, and
 * tojson below decodes them by the same shape. Kept so, since changing it
 * would change what length, indexing and tojson give for such strings. */
static size_t u8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k > n) return 1;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 1;
    return k;
}

/* Code point offsets of s: off[i] is where code point i starts, off[count]
 * = s->n. */
static size_t *u8_offsets(jctx *c, const jstr *s, size_t *count) {
    size_t *off = c_array(c, s->n + 1, sizeof *off), k = 0;
    for (size_t i = 0; i < s->n; i += u8_len((const unsigned char *)s->p + i, s->n - i))
        off[k++] = i;
    off[k] = s->n;
    *count = k;
    return off;
}

static size_t u8_count(const jstr *s) {
    size_t k = 0;
    for (size_t i = 0; i < s->n; i += u8_len((const unsigned char *)s->p + i, s->n - i)) k++;
    return k;
}

/* Length of the whitespace character at p (n bytes left), 0 if none:
 * Python's str.isspace set, which is what str.strip() and |trim strip. */
static size_t ws_len(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] == ' ' || (p[0] >= 0x09 && p[0] <= 0x0D) || (p[0] >= 0x1C && p[0] <= 0x1F))
        return 1;
    if (n >= 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0)) return 2;
    if (n >= 3) {
        unsigned cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        if ((p[0] & 0xF0) != 0xE0 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
            cp == 0x202F || cp == 0x205F || cp == 0x3000)
            return 3;
    }
    return 0;
}

/* Whitespace ending just before s[end] (scanning back over a whole UTF-8
 * sequence), 0 if none. */
static size_t ws_len_back(const char *s, size_t end) {
    size_t start = end;
    for (int k = 0; k < 3 && start > 0; k++) {
        start--;
        if (((unsigned char)s[start] & 0xC0) != 0x80) break;
    }
    size_t l = ws_len(s + start, end - start);
    return l == end - start ? l : (ws_len(s + end - 1, 1) ? 1 : 0);
}

/* ---- values ----------------------------------------------------------------- */

enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_MACRO,
       V_FUNC };

typedef struct jv {
    int t;
    union {
        int64_t i;              /* V_BOOL, V_INT */
        double f;
        struct jstr *s;
        struct jlist *l;
        struct jdict *d;        /* V_DICT, V_NS */
        struct jloop *lp;
        struct jmacro *mac;
        int fn;                 /* V_FUNC: a G_* */
        const char *name;       /* V_UNDEF: what was undefined, or NULL */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
} jlist;

typedef struct jdict {          /* ordered: insertion order, like Python's */
    size_t n, cap;
    jv *k, *v;
} jdict;

typedef struct jloop {
    size_t i, n;
    const jv *items;
} jloop;

static const jv UNDEF = {V_UNDEF, {0}};
static jv undef_named(const char *name) { jv v = {V_UNDEF, {0}}; v.u.name = name; return v; }
static jv v_bool(int b) { jv v = {V_BOOL, {0}}; v.u.i = b != 0; return v; }
static jv v_int(int64_t i) { jv v = {V_INT, {0}}; v.u.i = i; return v; }
static jv v_float(double f) { jv v = {V_FLOAT, {0}}; v.u.f = f; return v; }
static jv v_str(jstr *s) { jv v = {V_STR, {0}}; v.u.s = s; return v; }
static jv v_none(void) { jv v = {V_NONE, {0}}; return v; }

static jlist *l_new(jctx *c, size_t cap) {
    jlist *l = c_alloc(c, sizeof *l);
    l->n = 0;
    l->cap = cap ? cap : 4;
    l->v = c_array(c, l->cap, sizeof *l->v);
    return l;
}

static void l_push(jctx *c, jlist *l, jv x) {
    if (l->n == l->cap) {
        jv *nv = c_array(c, l->cap * 2, sizeof *nv);
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = x;
}

static jv v_list(jlist *l) { jv v = {V_LIST, {0}}; v.u.l = l; return v; }

static jdict *d_new(jctx *c) {
    jdict *d = c_alloc(c, sizeof *d);
    d->n = 0;
    d->cap = 4;
    d->k = c_array(c, d->cap, sizeof *d->k);
    d->v = c_array(c, d->cap, sizeof *d->v);
    return d;
}

static int v_eq(const jv *a, const jv *b);

static jv *d_find(const jdict *d, const jv *key) {
    for (size_t i = 0; i < d->n; i++)
        if (v_eq(&d->k[i], key)) return &d->v[i];
    return NULL;
}

static jv *d_findc(const jdict *d, const char *key) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && s_eqc(d->k[i].u.s, key)) return &d->v[i];
    return NULL;
}

static void d_set(jctx *c, jdict *d, jv key, jv val) {
    jv *slot = d_find(d, &key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        jv *nk = c_array(c, d->cap * 2, sizeof *nk), *nv = c_array(c, d->cap * 2, sizeof *nv);
        memcpy(nk, d->k, d->n * sizeof *nk);
        memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk;
        d->v = nv;
        d->cap *= 2;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

static int is_num(const jv *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double num_f(const jv *v) { return v->t == V_FLOAT ? v->u.f : (double)v->u.i; }

/* Python ==: numbers by value (True == 1), strings by bytes, containers
 * element by element (dicts regardless of order). */
static int v_eq(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return a->u.i == b->u.i;
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t) return 0;
    switch (a->t) {
    case V_UNDEF:
    case V_NONE: return 1;
    case V_STR: return s_eq(a->u.s, b->u.s);
    case V_LIST:
        if (a->u.l->n != b->u.l->n) return 0;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!v_eq(&a->u.l->v[i], &b->u.l->v[i])) return 0;
        return 1;
    case V_DICT:
    case V_NS:
        if (a->u.d->n != b->u.d->n) return 0;
        for (size_t i = 0; i < a->u.d->n; i++) {
            jv *o = d_find(b->u.d, &a->u.d->k[i]);
            if (!o || !v_eq(&a->u.d->v[i], o)) return 0;
        }
        return 1;
    case V_LOOP: return a->u.lp == b->u.lp;
    case V_MACRO: return a->u.mac == b->u.mac;
    case V_FUNC: return a->u.fn == b->u.fn;
    default: return 0;
    }
}

static int truthy(const jv *v) {
    switch (v->t) {
    case V_UNDEF:
    case V_NONE: return 0;
    case V_BOOL:
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0.0;
    case V_STR: return v->u.s->n > 0;
    case V_LIST: return v->u.l->n > 0;
    case V_DICT: return v->u.d->n > 0;
    default: return 1;
    }
}

static const char *type_name(const jv *v) {
    static const char *const n[] = {"undefined", "NoneType", "bool", "int", "float", "str",
                                    "list", "dict", "Namespace", "LoopContext", "Macro",
                                    "function"};
    return n[v->t];
}

/* ---- lexer ------------------------------------------------------------------ */

enum { TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STR,
       TK_INT, TK_FLOAT, TK_OP, TK_EOF };

/* Operators, longest first so that "//" wins over "/". */
enum { O_POW, O_FDIV, O_EQ, O_NE, O_LE, O_GE, O_ADD, O_SUB, O_MUL, O_DIV, O_MOD, O_TILDE,
       O_LT, O_GT, O_ASSIGN, O_LP, O_RP, O_LB, O_RB, O_LC, O_RC, O_COMMA, O_DOT, O_COLON,
       O_PIPE, O_N,
       O_IN = 100, O_NOTIN };
static const char *const op_text[O_N] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                          "/", "%", "~", "<", ">", "=", "(", ")", "[", "]",
                                          "{", "}", ",", ".", ":", "|"};

typedef struct token {
    int type;
    int line, col;
    int op;                 /* TK_OP */
    const char *s;          /* TK_TEXT: into the source; TK_NAME: NUL-terminated */
    size_t n;
    jstr *str;              /* TK_STR: decoded */
    int64_t i;
    double f;
} token;

typedef struct lexer {
    jctx *c;
    const char *src;
    size_t n;
    size_t lc_pos;          /* line:col of lc_pos, advanced monotonically */
    int lc_line, lc_col;
    token *v;
    size_t nt, cap;
} lexer;

static void lx_where(lexer *L, size_t pos, int *line, int *col) {
    if (pos < L->lc_pos) {
        L->lc_pos = 0;
        L->lc_line = 1;
        L->lc_col = 1;
    }
    for (; L->lc_pos < pos; L->lc_pos++) {
        if (L->src[L->lc_pos] == '\n') {
            L->lc_line++;
            L->lc_col = 1;
        } else if (((unsigned char)L->src[L->lc_pos] & 0xC0) != 0x80) {
            L->lc_col++;
        }
    }
    *line = L->lc_line;
    *col = L->lc_col;
}

__attribute__((format(printf, 3, 4), noreturn))
static void lx_fail(lexer *L, size_t pos, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    lx_where(L, pos, &line, &col);
    fail(L->c, TS_ERR_INVAL, line, col, "%s", msg);
}

static token *lx_push(lexer *L, int type, size_t pos) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        token *nv = c_array(L->c, cap, sizeof *nv);
        if (L->nt) memcpy(nv, L->v, L->nt * sizeof *nv);
        L->v = nv;
        L->cap = cap;
    }
    token *t = &L->v[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = type;
    lx_where(L, pos, &t->line, &t->col);
    return t;
}

static int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}
static int is_name0(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* k hex digits at s[i..]; -1 when they are not. */
static long hexn(const char *s, size_t n, size_t i, int k) {
    long v = 0;
    if (i + (size_t)k > n) return -1;
    for (int j = 0; j < k; j++) {
        int h = hexval(s[i + (size_t)j]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* The string literal whose opening quote is at *pos: decoded as Python's
 * unicode-escape does (what Jinja2 does to literals); *pos moves past the
 * closing quote. */
static jstr *lx_string(lexer *L, size_t *pos) {
    const char *s = L->src;
    char q = s[*pos];
    size_t start = *pos, i = start + 1, end = i;
    while (end < L->n && s[end] != q) end += s[end] == '\\' ? 2 : 1;
    if (end >= L->n) lx_fail(L, start, "unclosed string literal");
    char *o = c_alloc(L->c, end - i + 1);
    size_t k = 0;
    while (i < end) {
        if (s[i] != '\\') { o[k++] = s[i++]; continue; }
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            int w = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            long cp = hexn(s, end, i, w);
            if (cp < 0) lx_fail(L, i - 2, "bad \\%c escape in string literal", e);
            i += (size_t)w;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 1 < end && s[i] == '\\' && s[i + 1] == 'u') {
                long lo = hexn(s, end, i + 2, 4);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
                lx_fail(L, i, "escape for an invalid code point in string literal");
            k += utf8_encode(o + k, (uint32_t)cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                unsigned cp = (unsigned)(e - '0');
                for (int j = 0; j < 2 && i < end && s[i] >= '0' && s[i] <= '7'; j++)
                    cp = cp * 8 + (unsigned)(s[i++] - '0');
                k += utf8_encode(o + k, cp);
            } else {
                o[k++] = '\\';   /* Python keeps unknown escapes as written */
                o[k++] = e;
            }
        }
    }
    *pos = end + 1;
    jstr *r = c_alloc(L->c, sizeof *r);
    r->n = k;
    r->p = o;
    o[k] = '\0';
    r->m = c_alloc(L->c, k ? k : 1);
    memset(r->m, M_TPL, k);
    return r;
}

static void lx_number(lexer *L, size_t *pos) {
    const char *s = L->src;
    size_t i = *pos, st = i;
    int is_float = 0;
    while (i < L->n && (is_digit(s[i]) || s[i] == '_')) i++;
    /* After a '.', "0.1" is two subscripts (x.0.1), as in Jinja2. */
    int after_dot = L->nt && L->v[L->nt - 1].type == TK_OP && L->v[L->nt - 1].op == O_DOT;
    if (!after_dot && i + 1 < L->n && s[i] == '.' && is_digit(s[i + 1])) {
        is_float = 1;
        i++;
        while (i < L->n && (is_digit(s[i]) || s[i] == '_')) i++;
    }
    if (!after_dot && i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < L->n && is_digit(s[j])) {
            is_float = 1;
            i = j;
            while (i < L->n && is_digit(s[i])) i++;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t j = st; j < i && k + 1 < sizeof buf; j++)
        if (s[j] != '_') buf[k++] = s[j];
    buf[k] = '\0';
    if (i - st >= sizeof buf - 1) lx_fail(L, st, "number literal too long");
    token *t = lx_push(L, is_float ? TK_FLOAT : TK_INT, st);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        int64_t v = 0;
        for (size_t j = 0; j < k; j++) {
            if (v > (INT64_MAX - (buf[j] - '0')) / 10) lx_fail(L, st, "integer literal too large");
            v = v * 10 + (buf[j] - '0');
        }
        t->i = v;
    }
    *pos = i;
}

/* Tokens inside one {{ }} or {% %} tag starting after its opener; returns
 * the position after the closer and says whether it had a '-'. */
static size_t lx_tag(lexer *L, size_t pos, int block, size_t open_pos, int *strip_after,
                     int *plus_after) {
    const char *s = L->src;
    int depth = 0;
    size_t opened[PARSE_MAX_DEPTH];   /* where each open bracket is */
    for (;;) {
        while (pos < L->n && is_space(s[pos])) pos++;
        if (pos >= L->n && depth > 0)
            lx_fail(L, opened[depth - 1], "unclosed '%c'", s[opened[depth - 1]]);
        if (pos >= L->n) lx_fail(L, open_pos, "unclosed '%s'", block ? "{%" : "{{");
        char e = block ? '%' : '}';
        if (depth == 0) {
            size_t q = pos;
            int minus = 0, plus = 0;
            if (s[q] == '-' || (block && s[q] == '+')) {
                minus = s[q] == '-';
                plus = s[q] == '+';
                q++;
            }
            if (q + 1 < L->n && s[q] == e && s[q + 1] == '}') {
                lx_push(L, block ? TK_BLOCK_END : TK_VAR_END, pos);
                *strip_after = minus;
                *plus_after = plus;
                return q + 2;
            }
        }
        char ch = s[pos];
        if (is_name0(ch)) {
            size_t st = pos;
            while (pos < L->n && (is_name0(s[pos]) || is_digit(s[pos]))) pos++;
            token *t = lx_push(L, TK_NAME, st);
            char *nm = c_alloc(L->c, pos - st + 1);
            memcpy(nm, s + st, pos - st);
            nm[pos - st] = '\0';
            t->s = nm;
            t->n = pos - st;
        } else if (is_digit(ch)) {
            lx_number(L, &pos);
        } else if (ch == '\'' || ch == '"') {
            size_t st = pos;
            jstr *str = lx_string(L, &pos);
            lx_push(L, TK_STR, st)->str = str;
        } else {
            int op = -1;
            for (int k = 0; k < O_N; k++) {
                size_t m = strlen(op_text[k]);
                if (pos + m <= L->n && memcmp(s + pos, op_text[k], m) == 0) {
                    op = k;
                    break;
                }
            }
            if (op < 0) {
                if ((unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f)
                    lx_fail(L, pos, "unexpected byte 0x%02x", (unsigned char)ch);
                lx_fail(L, pos, "unexpected character '%c'", ch);
            }
            if (op == O_LP || op == O_LB || op == O_LC) {
                if (depth == PARSE_MAX_DEPTH)
                    lx_fail(L, pos, "brackets nested deeper than %d levels", PARSE_MAX_DEPTH);
                opened[depth++] = pos;
            }
            if (op == O_RP || op == O_RB || op == O_RC) {
                char want = depth ? s[opened[depth - 1]] : 0;
                char need = op == O_RP ? '(' : op == O_RB ? '[' : '{';
                if (want != need) {
                    if (!want) lx_fail(L, pos, "unexpected '%s'", op_text[op]);
                    int ol, oc;
                    lx_where(L, opened[depth - 1], &ol, &oc);
                    lx_fail(L, pos, "unexpected '%s': '%c' opened at %d:%d is not closed",
                            op_text[op], want, ol, oc);
                }
                depth--;
            }
            lx_push(L, TK_OP, pos)->op = op;
            pos += strlen(op_text[op]);
        }
    }
}

/* Jinja2's lexer with trim_blocks and lstrip_blocks on, as Hugging Face
 * renders chat templates, and keep_trailing_newline off. */
static void lex(lexer *L) {
    const char *s = L->src;
    size_t n = L->n;
    if (n && s[n - 1] == '\n') n--;   /* keep_trailing_newline=False */
    if (n && s[n - 1] == '\r' && L->n - n == 1) n--;
    L->n = n;
    size_t pos = 0;
    int strip_next = 0, trim_nl = 0, line_start = 1;
    for (;;) {
        size_t ts = pos;
        while (ts + 1 < n && !(s[ts] == '{' && (s[ts + 1] == '{' || s[ts + 1] == '%' ||
                                                 s[ts + 1] == '#')))
            ts++;
        if (ts + 1 >= n) ts = n;
        size_t a = pos, b = ts;
        if (strip_next) {
            while (a < b && is_space(s[a])) a++;
        } else if (trim_nl) {
            if (a < b && s[a] == '\n') a++;
            else if (a + 1 < b && s[a] == '\r' && s[a + 1] == '\n') a += 2;
        }
        if (a > pos) line_start = s[a - 1] == '\n';
        char kind = ts < n ? s[ts + 1] : 0;
        char mod = ts + 2 < n ? s[ts + 2] : 0;
        if (ts < n && mod == '-') {
            while (b > a && is_space(s[b - 1])) b--;
        } else if (ts < n && mod != '+' && kind != '{') {
            /* lstrip_blocks: spaces and tabs from the start of the line. */
            size_t j = b;
            while (j > a && (s[j - 1] == ' ' || s[j - 1] == '\t')) j--;
            if ((j > a && s[j - 1] == '\n') || (j == a && line_start)) b = j;
        }
        if (b > a) {
            token *t = lx_push(L, TK_TEXT, a);
            t->s = s + a;
            t->n = b - a;
        }
        if (ts >= n) break;
        strip_next = trim_nl = 0;
        size_t body = ts + 2 + (mod == '-' || (mod == '+' && kind != '{'));
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) lx_fail(L, ts, "unclosed comment '{#'");
            if (e > body && s[e - 1] == '-') strip_next = 1;
            else if (!(e > body && s[e - 1] == '+')) trim_nl = 1;
            pos = e + 2;
        } else {
            int block = kind == '%', minus = 0, plus = 0;
            lx_push(L, block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, ts);
            pos = lx_tag(L, body, block, ts, &minus, &plus);
            strip_next = minus;
            trim_nl = block && !minus && !plus;
        }
        line_start = 0;
        if (trim_nl && pos < n && s[pos] == '\n') line_start = 1;
    }
    lx_push(L, TK_EOF, n);
}

/* ---- names the language knows ---------------------------------------------- */

/* Filters, tests, methods and global functions: a name not in these tables
 * is rejected when the template is parsed, naming it. */
enum { F_ABS, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_FIRST, F_FLOAT, F_INT, F_ITEMS, F_JOIN,
       F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE,
       F_SAFE, F_SELECT, F_SELECTATTR, F_STRING, F_TITLE, F_TOJSON, F_TRIM, F_UPPER, F_N };
static const char *const filter_names[F_N] = {
    "abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join",
    "last", "length", "list", "lower", "map", "reject", "rejectattr", "replace", "reverse",
    "safe", "select", "selectattr", "string", "title", "tojson", "trim", "upper"};

enum { T_DEFINED, T_UNDEFINED, T_NONE, T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_NUMBER,
       T_INTEGER, T_FLOAT, T_BOOLEAN, T_TRUE, T_FALSE, T_CALLABLE, T_EQ, T_EQ2, T_EQ3, T_NE,
       T_NE2, T_LT, T_LT2, T_LE, T_LE2, T_GT, T_GT2, T_GE, T_GE2, T_IN, T_ODD, T_EVEN,
       T_DIVISIBLEBY, T_LOWER, T_UPPER, T_SAMEAS, T_N };
static const char *const test_names[T_N] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
    "integer", "float", "boolean", "true", "false", "callable", "equalto", "eq", "==", "ne",
    "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby",
    "lower", "upper", "sameas"};

enum { M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER,
       M_TITLE, M_CAPITALIZE, M_REPLACE, M_ITEMS, M_KEYS, M_VALUES, M_GET, M_APPEND, M_FIND,
       M_COUNT, M_JOIN, M_SPLITLINES, M_N };
static const char *const method_names[M_N] = {
    "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "items", "keys", "values", "get", "append", "find", "count",
    "join", "splitlines"};

enum { G_RAISE, G_STRFTIME, G_NAMESPACE, G_RANGE, G_DICT, G_N };
static const char *const global_names[G_N] = {"raise_exception", "strftime_now", "namespace",
                                              "range", "dict"};

static int lookup(const char *const *tab, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(tab[i], name) == 0) return i;
    return -1;
}

/* ---- AST -------------------------------------------------------------------- */

enum {
    /* statements */
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_MACRO, S_BREAK, S_CONTINUE, S_DO, S_BLOCK,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_CMP, E_AND,
    E_OR, E_NOT, E_NEG, E_POS, E_COND, E_LIST, E_DICT
};

typedef struct node node;
typedef struct nlist {
    node **v;
    int n;
} nlist;

struct node {
    int k;                  /* S_* or E_* */
    int op;                 /* E_BIN operator; filter, test or method id; S_SET: 1 = block */
    int neg;                /* E_TEST: "is not" */
    int line, col;
    const char *name;       /* E_NAME, E_ATTR, E_FILTER, E_TEST, S_MACRO, S_SET target */
    const char *attr;       /* S_SET: ns.attr target, else NULL */
    node *a, *b, *c;        /* children; see the parser for each kind */
    nlist kids;             /* arguments, items, keys, body */
    nlist alt;              /* else body, dict values, macro defaults */
    const char **kw;        /* (kids.n) keyword of each argument, NULL = positional */
    int *ops;               /* E_CMP: (kids.n) operators */
    const char **targets;   /* S_FOR loop variables, S_MACRO parameters, S_SET names */
    int n_targets;
    jv lit;                 /* E_LIT, S_TEXT */
};

struct jj_tpl {
    arena ar;
    nlist body;
};

/* ---- parser ----------------------------------------------------------------- */

typedef struct callref {
    const char *name;
    int line, col;
} callref;

typedef struct parser {
    jctx c;
    token *t;
    size_t i;
    int depth;              /* recursion, capped */
    int loops;              /* enclosing for loops, for break/continue */
    const char **defs;      /* names set, looped over, or defined as macros */
    size_t n_defs, cap_defs;
    callref *calls;         /* bare-name calls, checked once all is parsed */
    size_t n_calls, cap_calls;
} parser;

__attribute__((format(printf, 3, 4), noreturn))
static void p_fail(parser *P, const token *at, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(&P->c, TS_ERR_INVAL, at->line, at->col, "%s", msg);
}

static token *cur(parser *P) { return &P->t[P->i]; }
static token *next(parser *P) {
    token *t = &P->t[P->i];
    if (t->type != TK_EOF) P->i++;
    return t;
}
static int is_op(parser *P, int op) { return cur(P)->type == TK_OP && cur(P)->op == op; }
static int is_name(parser *P, const char *nm) {
    return cur(P)->type == TK_NAME && strcmp(cur(P)->s, nm) == 0;
}
static int skip_op(parser *P, int op) {
    if (!is_op(P, op)) return 0;
    P->i++;
    return 1;
}
static int skip_name(parser *P, const char *nm) {
    if (!is_name(P, nm)) return 0;
    P->i++;
    return 1;
}

static const char *tok_desc(const token *t, char *buf, size_t cap) {
    switch (t->type) {
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_NAME: snprintf(buf, cap, "'%s'", t->s); return buf;
    case TK_STR: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    case TK_OP: snprintf(buf, cap, "'%s'", op_text[t->op]); return buf;
    default: return "end of template";
    }
}

static void expect_op(parser *P, int op, const char *what) {
    if (skip_op(P, op)) return;
    char b[64];
    p_fail(P, cur(P), "expected '%s' %s, got %s", op_text[op], what, tok_desc(cur(P), b, sizeof b));
}

static const char *expect_name(parser *P, const char *what) {
    if (cur(P)->type == TK_NAME) return next(P)->s;
    char b[64];
    p_fail(P, cur(P), "expected a name %s, got %s", what, tok_desc(cur(P), b, sizeof b));
}

static void expect_end(parser *P, int type, const char *tag) {
    if (cur(P)->type == type) {
        P->i++;
        return;
    }
    char b[64];
    p_fail(P, cur(P), "expected '%s' to end '%s', got %s", type == TK_BLOCK_END ? "%}" : "}}",
           tag, tok_desc(cur(P), b, sizeof b));
}

static node *mk(parser *P, int k, const token *at) {
    node *n = c_alloc(&P->c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable node list while parsing; frozen into an nlist. */
typedef struct nvec {
    node **v;
    int n, cap;
    const char **kw;
} nvec;

static void nv_push(parser *P, nvec *v, node *x, const char *kw) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        if (cap > 1 << 24) fail(&P->c, TS_ERR_INVAL, 0, 0, "too many items");
        node **nv = c_array(&P->c, (size_t)cap, sizeof *nv);
        const char **nk = c_array(&P->c, (size_t)cap, sizeof *nk);
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
            memcpy(nk, v->kw, (size_t)v->n * sizeof *nk);
        }
        v->v = nv;
        v->kw = nk;
        v->cap = cap;
    }
    v->kw[v->n] = kw;
    v->v[v->n++] = x;
}

static nlist nv_list(nvec *v) { return (nlist){v->v, v->n}; }

static void def_name(parser *P, const char *nm) {
    if (P->n_defs == P->cap_defs) {
        size_t cap = P->cap_defs ? P->cap_defs * 2 : 32;
        const char **nd = c_array(&P->c, cap, sizeof *nd);
        if (P->n_defs) memcpy(nd, P->defs, P->n_defs * sizeof *nd);
        P->defs = nd;
        P->cap_defs = cap;
    }
    P->defs[P->n_defs++] = nm;
}

static void note_call(parser *P, const node *callee) {
    if (P->n_calls == P->cap_calls) {
        size_t cap = P->cap_calls ? P->cap_calls * 2 : 16;
        callref *nc = c_array(&P->c, cap, sizeof *nc);
        if (P->n_calls) memcpy(nc, P->calls, P->n_calls * sizeof *nc);
        P->calls = nc;
        P->cap_calls = cap;
    }
    P->calls[P->n_calls++] = (callref){callee->name, callee->line, callee->col};
}

static void enter(parser *P) {
    if (++P->depth > PARSE_MAX_DEPTH)
        p_fail(P, cur(P), "template nested deeper than %d levels", PARSE_MAX_DEPTH);
}
static void leave(parser *P) { P->depth--; }

static node *p_expr(parser *P, int condexpr);
static node *p_or(parser *P);
static node *p_unary(parser *P, int with_filter);
static node *p_primary(parser *P);
static node *p_postfix(parser *P, node *n);

/* Call arguments after '(' up to ')': positional, then name=value. */
static void p_args(parser *P, nvec *args) {
    while (!is_op(P, O_RP)) {
        if (args->n) {
            expect_op(P, O_COMMA, "between arguments");
            if (is_op(P, O_RP)) break;
        }
        const char *kw = NULL;
        if (cur(P)->type == TK_NAME && P->t[P->i + 1].type == TK_OP &&
            P->t[P->i + 1].op == O_ASSIGN) {
            kw = next(P)->s;
            P->i++;
        } else if (args->n && args->kw[args->n - 1]) {
            p_fail(P, cur(P), "positional argument after a keyword argument");
        }
        nv_push(P, args, p_expr(P, 1), kw);
    }
    P->i++;
}

/* A literal, a name, a parenthesized expression or tuple, a list, a dict. */
static node *p_primary(parser *P) {
    token *t = cur(P);
    node *n;
    char b[64];
    switch (t->type) {
    case TK_NAME:
        P->i++;
        n = mk(P, E_LIT, t);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) n->lit = v_bool(1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) n->lit = v_bool(0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) n->lit = v_none();
        else {
            n->k = E_NAME;
            n->name = t->s;
        }
        return n;
    case TK_STR: {
        P->i++;
        jstr *s = t->str;
        while (cur(P)->type == TK_STR) s = s_cat(&P->c, s, next(P)->str);  /* "a" "b" */
        n = mk(P, E_LIT, t);
        n->lit = v_str(s);
        return n;
    }
    case TK_INT:
        P->i++;
        n = mk(P, E_LIT, t);
        n->lit = v_int(t->i);
        return n;
    case TK_FLOAT:
        P->i++;
        n = mk(P, E_LIT, t);
        n->lit = v_float(t->f);
        return n;
    case TK_OP:
        if (t->op == O_LP) {
            P->i++;
            if (skip_op(P, O_RP)) return mk(P, E_LIST, t);   /* () */
            node *e = p_expr(P, 1);
            if (!is_op(P, O_COMMA)) {
                expect_op(P, O_RP, "to close '('");
                return e;
            }
            nvec items = {0};
            nv_push(P, &items, e, NULL);
            while (skip_op(P, O_COMMA) && !is_op(P, O_RP)) nv_push(P, &items, p_expr(P, 1), NULL);
            expect_op(P, O_RP, "to close a tuple");
            n = mk(P, E_LIST, t);
            n->kids = nv_list(&items);
            return n;
        }
        if (t->op == O_LB) {
            P->i++;
            nvec items = {0};
            while (!is_op(P, O_RB)) {
                if (items.n) {
                    expect_op(P, O_COMMA, "between list items");
                    if (is_op(P, O_RB)) break;
                }
                nv_push(P, &items, p_expr(P, 1), NULL);
            }
            P->i++;
            n = mk(P, E_LIST, t);
            n->kids = nv_list(&items);
            return n;
        }
        if (t->op == O_LC) {
            P->i++;
            nvec keys = {0}, vals = {0};
            while (!is_op(P, O_RC)) {
                if (keys.n) {
                    expect_op(P, O_COMMA, "between dict items");
                    if (is_op(P, O_RC)) break;
                }
                nv_push(P, &keys, p_expr(P, 1), NULL);
                expect_op(P, O_COLON, "after a dict key");
                nv_push(P, &vals, p_expr(P, 1), NULL);
            }
            P->i++;
            n = mk(P, E_DICT, t);
            n->kids = nv_list(&keys);
            n->alt = nv_list(&vals);
            return n;
        }
        break;
    default: break;
    }
    p_fail(P, t, "expected an expression, got %s", tok_desc(t, b, sizeof b));
}

/* '[' after an object: a subscript or a slice. */
static node *p_subscript(parser *P, node *obj, const token *at) {
    node *part[3] = {NULL, NULL, NULL};
    int colons = 0;
    if (!is_op(P, O_COLON)) part[0] = p_expr(P, 1);
    while (colons < 2 && skip_op(P, O_COLON)) {
        colons++;
        if (!is_op(P, O_COLON) && !is_op(P, O_RB)) part[colons] = p_expr(P, 1);
    }
    expect_op(P, O_RB, "to close a subscript");
    if (!colons) {
        node *n = mk(P, E_ITEM, at);
        n->a = obj;
        n->b = part[0];
        return n;
    }
    node *n = mk(P, E_SLICE, at);
    n->a = obj;
    n->kids.v = c_array(&P->c, 3, sizeof *n->kids.v);
    n->kids.n = 3;
    for (int i = 0; i < 3; i++) n->kids.v[i] = part[i];
    return n;
}

static node *p_postfix(parser *P, node *n) {
    for (;;) {
        token *t = cur(P);
        if (skip_op(P, O_DOT)) {
            node *a = mk(P, E_ATTR, t);
            a->a = n;
            if (cur(P)->type == TK_INT) {       /* x.0 is x[0] */
                a->k = E_ITEM;
                a->b = mk(P, E_LIT, cur(P));
                a->b->lit = v_int(next(P)->i);
            } else {
                a->name = expect_name(P, "after '.'");
            }
            n = a;
        } else if (skip_op(P, O_LB)) {
            n = p_subscript(P, n, t);
        } else if (skip_op(P, O_LP)) {
            node *c = mk(P, E_CALL, t);
            c->line = n->line;          /* errors point at what is called */
            c->col = n->col;
            c->a = n;
            nvec args = {0};
            p_args(P, &args);
            c->kids = nv_list(&args);
            c->kw = args.kw;
            if (n->k == E_NAME) {
                note_call(P, n);
            } else if (n->k == E_ATTR) {
                c->op = lookup(method_names, M_N, n->name);
                if (c->op < 0 && strcmp(n->name, "cycle") != 0)
                    p_fail(P, t, "unknown method '%s'", n->name);
            } else {
                p_fail(P, t, "only functions, macros and methods can be called");
            }
            n = c;
        } else {
            return n;
        }
    }
}

/* Filters (x | f(args)) and tests (x is [not] t args) after a unary. */
static node *p_filters(parser *P, node *n) {
    for (;;) {
        token *t = cur(P);
        if (skip_op(P, O_PIPE)) {
            const char *nm = expect_name(P, "after '|'");
            int id = lookup(filter_names, F_N, nm);
            if (id < 0) p_fail(P, t, "unknown filter '%s'", nm);
            node *f = mk(P, E_FILTER, t);
            f->a = n;
            f->name = nm;
            f->op = id;
            if (skip_op(P, O_LP)) {
                nvec args = {0};
                p_args(P, &args);
                f->kids = nv_list(&args);
                f->kw = args.kw;
            }
            n = f;
        } else if (skip_name(P, "is")) {
            node *x = mk(P, E_TEST, t);
            x->a = n;
            x->neg = skip_name(P, "not");
            token *nt = cur(P);
            const char *nm = NULL;
            if (nt->type == TK_NAME) nm = next(P)->s;
            else if (nt->type == TK_OP && (nt->op == O_EQ || nt->op == O_NE || nt->op == O_LT ||
                                           nt->op == O_LE || nt->op == O_GT || nt->op == O_GE))
                nm = op_text[next(P)->op];
            else p_fail(P, nt, "expected a test name after 'is'");
            x->op = lookup(test_names, T_N, nm);
            if (x->op < 0) p_fail(P, nt, "unknown test '%s'", nm);
            x->name = nm;
            nvec args = {0};
            if (skip_op(P, O_LP)) {
                p_args(P, &args);
            } else {
                token *c = cur(P);
                int arg = c->type == TK_STR || c->type == TK_INT || c->type == TK_FLOAT ||
                          (c->type == TK_OP && (c->op == O_LB || c->op == O_LC)) ||
                          (c->type == TK_NAME && strcmp(c->s, "else") && strcmp(c->s, "or") &&
                           strcmp(c->s, "and") && strcmp(c->s, "if") && strcmp(c->s, "in") &&
                           strcmp(c->s, "not") && strcmp(c->s, "is") && strcmp(c->s, "recursive"));
                if (arg) nv_push(P, &args, p_postfix(P, p_primary(P)), NULL);
            }
            x->kids = nv_list(&args);
            x->kw = args.kw;
            n = x;
        } else if (is_op(P, O_LP)) {
            n = p_postfix(P, n);
        } else {
            return n;
        }
    }
}

static node *p_unary(parser *P, int with_filter) {
    token *t = cur(P);
    node *n;
    enter(P);
    if (skip_op(P, O_SUB) || skip_op(P, O_ADD)) {
        n = mk(P, t->op == O_SUB ? E_NEG : E_POS, t);
        n->a = p_unary(P, 0);
    } else {
        n = p_postfix(P, p_primary(P));
    }
    if (with_filter) n = p_filters(P, n);
    leave(P);
    return n;
}

static node *bin(parser *P, int op, node *l, node *r, const token *at) {
    node *n = mk(P, E_BIN, at);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static node *p_pow(parser *P) {
    node *l = p_unary(P, 1);
    while (is_op(P, O_POW)) {
        token *t = next(P);
        l = bin(P, O_POW, l, p_unary(P, 1), t);
    }
    return l;
}

static node *p_mul(parser *P) {
    node *l = p_pow(P);
    while (is_op(P, O_MUL) || is_op(P, O_DIV) || is_op(P, O_FDIV) || is_op(P, O_MOD)) {
        token *t = next(P);
        l = bin(P, t->op, l, p_pow(P), t);
    }
    return l;
}

static node *p_concat(parser *P) {
    node *l = p_mul(P);
    while (is_op(P, O_TILDE)) {
        token *t = next(P);
        l = bin(P, O_TILDE, l, p_mul(P), t);
    }
    return l;
}

static node *p_add(parser *P) {
    node *l = p_concat(P);
    while (is_op(P, O_ADD) || is_op(P, O_SUB)) {
        token *t = next(P);
        l = bin(P, t->op, l, p_concat(P), t);
    }
    return l;
}

/* a < b <= c, a in b, a not in b: one chain, as in Python. */
static node *p_compare(parser *P) {
    token *at = cur(P);
    node *first = p_add(P);
    nvec rest = {0};
    int ops[64], n_ops = 0;
    for (;;) {
        int op;
        token *t = cur(P);
        if (t->type == TK_OP && (t->op == O_EQ || t->op == O_NE || t->op == O_LT ||
                                 t->op == O_LE || t->op == O_GT || t->op == O_GE)) {
            op = t->op;
            P->i++;
        } else if (skip_name(P, "in")) {
            op = O_IN;
        } else if (is_name(P, "not") && P->t[P->i + 1].type == TK_NAME &&
                   !strcmp(P->t[P->i + 1].s, "in")) {
            P->i += 2;
            op = O_NOTIN;
        } else {
            break;
        }
        if (n_ops == 64) p_fail(P, t, "comparison chain too long");
        ops[n_ops++] = op;
        nv_push(P, &rest, p_add(P), NULL);
    }
    if (!n_ops) return first;
    node *n = mk(P, E_CMP, at);
    n->a = first;
    n->kids = nv_list(&rest);
    n->ops = c_array(&P->c, (size_t)n_ops, sizeof *n->ops);
    memcpy(n->ops, ops, (size_t)n_ops * sizeof *ops);
    return n;
}

static node *p_not(parser *P) {
    token *t = cur(P);
    if (skip_name(P, "not")) {
        enter(P);
        node *n = mk(P, E_NOT, t);
        n->a = p_not(P);
        leave(P);
        return n;
    }
    return p_compare(P);
}

static node *p_and(parser *P) {
    node *l = p_not(P);
    while (is_name(P, "and")) {
        token *t = next(P);
        node *n = mk(P, E_AND, t);
        n->a = l;
        n->b = p_not(P);
        l = n;
    }
    return l;
}

static node *p_or(parser *P) {
    node *l = p_and(P);
    while (is_name(P, "or")) {
        token *t = next(P);
        node *n = mk(P, E_OR, t);
        n->a = l;
        n->b = p_and(P);
        l = n;
    }
    return l;
}

/* condexpr: allow "a if b else c" (not in a for loop's iterable, where "if"
 * starts the loop filter). */
static node *p_expr(parser *P, int condexpr) {
    enter(P);
    node *n = p_or(P);
    while (condexpr && is_name(P, "if")) {
        token *t = next(P);
        node *c = mk(P, E_COND, t);
        c->a = n;
        c->b = p_or(P);
        if (skip_name(P, "else")) c->c = p_expr(P, 1);
        n = c;
    }
    leave(P);
    return n;
}

/* ---- statements ------------------------------------------------------------- */

static nlist p_body(parser *P, const char *const *ends, const char **which, const token *open,
                    const char *tag);

static int in_list(const char *const *l, const char *s) {
    for (; l && *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

/* After "if cond %}" (or "elif cond %}"): the branches up to endif. */
static node *p_if(parser *P, const token *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    node *n = mk(P, S_IF, at);
    n->a = p_expr(P, 1);
    expect_end(P, TK_BLOCK_END, "if");
    const char *which;
    enter(P);
    n->kids = p_body(P, ends, &which, at, "if");
    if (!strcmp(which, "elif")) {
        token *t = &P->t[P->i - 1];
        node *e = p_if(P, t);
        n->alt.v = c_alloc(&P->c, sizeof *n->alt.v);
        n->alt.v[0] = e;
        n->alt.n = 1;
    } else if (!strcmp(which, "else")) {
        expect_end(P, TK_BLOCK_END, "else");
        n->alt = p_body(P, ends2, &which, at, "if");
        expect_end(P, TK_BLOCK_END, "endif");
    } else {
        expect_end(P, TK_BLOCK_END, "endif");
    }
    leave(P);
    return n;
}

static const char **names_array(parser *P, const char **v, int n) {
    const char **r = c_array(&P->c, (size_t)(n ? n : 1), sizeof *r);
    memcpy(r, v, (size_t)n * sizeof *r);
    return r;
}

static node *p_for(parser *P, const token *at) {
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    node *n = mk(P, S_FOR, at);
    const char *tg[8];
    int nt = 0;
    int paren = skip_op(P, O_LP);
    do {
        if (nt == 8) p_fail(P, cur(P), "too many loop variables");
        tg[nt] = expect_name(P, "as a loop variable");
        def_name(P, tg[nt++]);
    } while (skip_op(P, O_COMMA));
    if (paren) expect_op(P, O_RP, "after the loop variables");
    n->targets = names_array(P, tg, nt);
    n->n_targets = nt;
    if (!skip_name(P, "in")) p_fail(P, cur(P), "expected 'in' in 'for'");
    n->a = p_expr(P, 0);
    if (skip_name(P, "if")) n->b = p_expr(P, 0);
    if (is_name(P, "recursive")) p_fail(P, cur(P), "unsupported: recursive for loops");
    expect_end(P, TK_BLOCK_END, "for");
    const char *which;
    enter(P);
    P->loops++;
    n->kids = p_body(P, ends, &which, at, "for");
    P->loops--;
    expect_end(P, TK_BLOCK_END, which);
    if (!strcmp(which, "else")) {
        n->alt = p_body(P, ends2, &which, at, "for");
        expect_end(P, TK_BLOCK_END, "endfor");
    }
    leave(P);
    return n;
}

static node *p_set(parser *P, const token *at) {
    static const char *const ends[] = {"endset", NULL};
    node *n = mk(P, S_SET, at);
    const char *tg[8];
    int nt = 0;
    do {
        if (nt == 8) p_fail(P, cur(P), "too many assignment targets");
        tg[nt++] = expect_name(P, "to assign to");
        if (nt == 1 && skip_op(P, O_DOT)) {
            n->attr = expect_name(P, "after '.'");
            break;
        }
    } while (skip_op(P, O_COMMA));
    if (!n->attr)
        for (int i = 0; i < nt; i++) def_name(P, tg[i]);
    n->targets = names_array(P, tg, nt);
    n->n_targets = nt;
    n->name = tg[0];
    if (skip_op(P, O_ASSIGN)) {
        node *v = p_expr(P, 1);
        if (is_op(P, O_COMMA)) {           /* set a, b = x, y */
            nvec items = {0};
            nv_push(P, &items, v, NULL);
            while (skip_op(P, O_COMMA)) nv_push(P, &items, p_expr(P, 1), NULL);
            v = mk(P, E_LIST, at);
            v->kids = nv_list(&items);
        }
        n->a = v;
        expect_end(P, TK_BLOCK_END, "set");
        return n;
    }
    if (nt != 1 || n->attr) p_fail(P, cur(P), "expected '=' in 'set'");
    expect_end(P, TK_BLOCK_END, "set");
    const char *which;
    enter(P);
    n->op = 1;
    n->kids = p_body(P, ends, &which, at, "set");
    expect_end(P, TK_BLOCK_END, "endset");
    leave(P);
    return n;
}

static node *p_macro(parser *P, const token *at) {
    static const char *const ends[] = {"endmacro", NULL};
    node *n = mk(P, S_MACRO, at);
    n->name = expect_name(P, "after 'macro'");
    def_name(P, n->name);
    expect_op(P, O_LP, "after the macro name");
    const char *tg[64];
    node *dflt[64];
    int nt = 0;
    while (!skip_op(P, O_RP)) {
        if (nt) expect_op(P, O_COMMA, "between macro parameters");
        if (nt == 64) p_fail(P, cur(P), "too many macro parameters");
        tg[nt] = expect_name(P, "as a macro parameter");
        def_name(P, tg[nt]);
        dflt[nt] = skip_op(P, O_ASSIGN) ? p_expr(P, 1) : NULL;
        if (!dflt[nt] && nt && dflt[nt - 1])
            p_fail(P, cur(P), "macro parameter without a default after one with a default");
        nt++;
    }
    expect_end(P, TK_BLOCK_END, "macro");
    n->targets = names_array(P, tg, nt);
    n->n_targets = nt;
    n->alt.v = c_array(&P->c, (size_t)(nt ? nt : 1), sizeof *n->alt.v);
    memcpy(n->alt.v, dflt, (size_t)nt * sizeof *dflt);
    n->alt.n = nt;
    int loops = P->loops;
    P->loops = 0;
    const char *which;
    enter(P);
    n->kids = p_body(P, ends, &which, at, "macro");
    leave(P);
    P->loops = loops;
    expect_end(P, TK_BLOCK_END, "endmacro");
    return n;
}

/* One {% tag %}, the '{%' already consumed. */
static node *p_stmt(parser *P) {
    static const char *const gen_ends[] = {"endgeneration", NULL};
    static const char *const unsupported[] = {
        "filter", "call", "block", "extends", "include", "import", "from", "with",
        "autoescape", "raw", "trans", "print", NULL};
    token *t = cur(P);
    if (t->type != TK_NAME) p_fail(P, t, "expected a tag name after '{%%'");
    const char *nm = next(P)->s;
    if (!strcmp(nm, "if")) return p_if(P, t);
    if (!strcmp(nm, "for")) return p_for(P, t);
    if (!strcmp(nm, "set")) return p_set(P, t);
    if (!strcmp(nm, "macro")) return p_macro(P, t);
    if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        if (!P->loops) p_fail(P, t, "'%s' outside a for loop", nm);
        node *n = mk(P, nm[0] == 'b' ? S_BREAK : S_CONTINUE, t);
        expect_end(P, TK_BLOCK_END, nm);
        return n;
    }
    if (!strcmp(nm, "do")) {
        node *n = mk(P, S_DO, t);
        n->a = p_expr(P, 1);
        expect_end(P, TK_BLOCK_END, "do");
        return n;
    }
    if (!strcmp(nm, "generation")) {
        /* transformers' marker of assistant text: renders its body. */
        node *n = mk(P, S_BLOCK, t);
        expect_end(P, TK_BLOCK_END, "generation");
        const char *which;
        enter(P);
        n->kids = p_body(P, gen_ends, &which, t, "generation");
        leave(P);
        expect_end(P, TK_BLOCK_END, "endgeneration");
        return n;
    }
    if (in_list(unsupported, nm)) p_fail(P, t, "unsupported tag '%s'", nm);
    if (!strncmp(nm, "end", 3) || !strcmp(nm, "else") || !strcmp(nm, "elif"))
        p_fail(P, t, "unexpected '%s'", nm);
    p_fail(P, t, "unknown tag '%s'", nm);
}

/* Statements up to a {% tag %} named in ends (consumed, name in *which) or,
 * when ends is NULL, to the end of the template. */
static nlist p_body(parser *P, const char *const *ends, const char **which, const token *open,
                    const char *tag) {
    nvec body = {0};
    for (;;) {
        token *t = cur(P);
        switch (t->type) {
        case TK_EOF:
            if (ends) {
                const char *const *last = ends;
                while (last[1]) last++;
                p_fail(P, open, "unclosed '%s': expected '%s' before the end of the template",
                       tag, *last);
            }
            return nv_list(&body);
        case TK_TEXT: {
            P->i++;
            node *n = mk(P, S_TEXT, t);
            n->lit = v_str(s_from(&P->c, t->s, t->n, M_TPL));
            nv_push(P, &body, n, NULL);
            break;
        }
        case TK_VAR_BEGIN: {
            P->i++;
            node *n = mk(P, S_OUT, t);
            n->a = p_expr(P, 1);
            expect_end(P, TK_VAR_END, "{{");
            nv_push(P, &body, n, NULL);
            break;
        }
        case TK_BLOCK_BEGIN: {
            token *nt = &P->t[P->i + 1];
            if (ends && nt->type == TK_NAME && in_list(ends, nt->s)) {
                P->i += 2;
                *which = nt->s;
                return nv_list(&body);
            }
            P->i++;
            nv_push(P, &body, p_stmt(P), NULL);
            break;
        }
        default: {
            char b[64];
            p_fail(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
        }
        }
    }
}

/* Every bare-name call must reach a global function or something the
 * template defines (a macro, or a variable that may hold one). */
static void p_check_calls(parser *P) {
    for (size_t i = 0; i < P->n_calls; i++) {
        const callref *c = &P->calls[i];
        if (lookup(global_names, G_N, c->name) >= 0) continue;
        int found = 0;
        for (size_t j = 0; j < P->n_defs && !found; j++) found = !strcmp(P->defs[j], c->name);
        if (!found) fail(&P->c, TS_ERR_INVAL, c->line, c->col, "unknown function '%s'", c->name);
    }
}

int jj_parse(const char *src, size_t len, jj_tpl **out, char *err, size_t errlen) {
    *out = NULL;
    if (!src && len) return err_set(err, errlen, TS_ERR_INVAL, "no template text");
    if (len > PARSE_MAX_SRC)
        return err_set(err, errlen, TS_ERR_INVAL, "template too large (%zu bytes, limit %u)", len,
                       PARSE_MAX_SRC);
    jj_tpl *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    parser *P = calloc(1, sizeof *P);
    lexer *L = calloc(1, sizeof *L);
    if (!P || !L) {
        free(P);
        free(L);
        free(t);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    P->c.ar = &t->ar;
    P->c.err = err;
    P->c.errlen = errlen;
    if (setjmp(P->c.jb)) {
        int rc = P->c.rc;
        ar_free(&t->ar);
        free(t);
        free(P);
        free(L);
        return rc;
    }
    /* The source is copied: text tokens point into it for the template's life. */
    char *copy = c_alloc(&P->c, len + 1);
    if (len) memcpy(copy, src, len);
    copy[len] = '\0';
    *L = (lexer){.c = &P->c, .src = copy, .n = len, .lc_line = 1, .lc_col = 1};
    lex(L);
    P->t = L->v;
    t->body = p_body(P, NULL, NULL, NULL, NULL);
    p_check_calls(P);
    free(P);
    free(L);
    *out = t;
    return 0;
}

void jj_free(jj_tpl *t) {
    if (!t) return;
    ar_free(&t->ar);
    free(t);
}

/* ---- render state ------------------------------------------------------------ */

typedef struct frame {
    struct frame *up;
    size_t n, cap;
    const char **names;
    jv *vals;
} frame;

typedef struct jmacro {
    const node *def;
    frame *fr;              /* where it was defined: its names are visible */
} jmacro;

typedef struct obuf {
    char *p;
    uint8_t *m;
    size_t n, cap;
    int heap;               /* 1: malloc'd (the render's output), 0: arena */
} obuf;

typedef struct rx {
    jctx c;
    arena ar;
    jj_limits lim;
    uint64_t steps;
    int depth;              /* macro calls */
    obuf *o;                /* where output goes now */
    obuf top;
    frame *root;
    int64_t now;
} rx;

enum { FL_NORMAL, FL_BREAK, FL_CONTINUE };

__attribute__((format(printf, 3, 4), noreturn))
static void r_fail(rx *x, const node *at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(&x->c, TS_ERR_INVAL, at ? at->line : 0, at ? at->col : 0, "%s", msg);
}

static void step(rx *x, const node *at) {
    if (++x->steps > x->lim.max_steps)
        r_fail(x, at, "template exceeds its step limit (%llu): a runaway loop?",
               (unsigned long long)x->lim.max_steps);
}

static void o_put(rx *x, obuf *o, const char *p, const uint8_t *m, size_t n) {
    if (!n) return;
    if (n > x->lim.max_output || o->n > x->lim.max_output - n)
        r_fail(x, NULL, "rendered text exceeds its limit (%zu bytes)", x->lim.max_output);
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + n) cap *= 2;
        if (o->heap) {
            char *np = realloc(o->p, cap + 1);
            if (np) o->p = np;
            uint8_t *nm = np ? realloc(o->m, cap) : NULL;
            if (nm) o->m = nm;
            if (!np || !nm) fail(&x->c, TS_ERR_NOMEM, 0, 0, "out of memory");
        } else {
            char *np = c_alloc(&x->c, cap + 1);
            uint8_t *nm = c_alloc(&x->c, cap);
            if (o->n) {
                memcpy(np, o->p, o->n);
                memcpy(nm, o->m, o->n);
            }
            o->p = np;
            o->m = nm;
        }
        o->cap = cap;
    }
    memcpy(o->p + o->n, p, n);
    memcpy(o->m + o->n, m, n);
    o->n += n;
    o->p[o->n] = '\0';
}

static frame *f_new(rx *x, frame *up) {
    frame *f = c_alloc(&x->c, sizeof *f);
    memset(f, 0, sizeof *f);
    f->up = up;
    return f;
}

static void f_set(rx *x, frame *f, const char *name, jv v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **nn = c_array(&x->c, cap, sizeof *nn);
        jv *nv = c_array(&x->c, cap, sizeof *nv);
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static jv f_get(const frame *f, const char *name) {
    for (; f; f = f->up)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    int g = lookup(global_names, G_N, name);
    if (g >= 0) {
        jv v = {V_FUNC, {0}};
        v.u.fn = g;
        return v;
    }
    return undef_named(name);
}

/* ---- text of values ------------------------------------------------------- */

/* A growable byte buffer in the arena, for synthesized text. */
typedef struct sb {
    rx *x;
    char *p;
    size_t n, cap;
    int tpl;                /* every string that went in was all template */
} sb;

static void sb_put(sb *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) {
            if (cap > b->x->lim.max_output) r_fail(b->x, NULL, "value text exceeds its limit");
            cap *= 2;
        }
        char *np = c_alloc(&b->x->c, cap);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void sb_puts(sb *b, const char *s) { sb_put(b, s, strlen(s)); }

static jstr *sb_str(sb *b) { return s_from(&b->x->c, b->p ? b->p : "", b->n, b->tpl ? M_TPL : M_DATA); }

/* Python's repr of a float: the shortest digits that read back the same,
 * fixed notation for exponents -4..15, else d.ddde+XX. */
static void float_repr(double d, char *out, size_t cap) {
    if (isnan(d)) { snprintf(out, cap, "nan"); return; }
    if (isinf(d)) { snprintf(out, cap, d < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    int neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    size_t k = 0;
    char buf[64];
    if (neg) buf[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            buf[k++] = '0';
            buf[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[k++] = '0';
            for (size_t i = 0; i < nd; i++) buf[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) buf[k++] = (size_t)i < nd ? digits[i] : '0';
            buf[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) buf[k++] = digits[i];
            else
                buf[k++] = '0';
        }
        buf[k] = '\0';
    } else {
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            for (size_t i = 1; i < nd; i++) buf[k++] = digits[i];
        }
        snprintf(buf + k, sizeof buf - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, cap, "%s", buf);
}

static void repr_str(sb *b, const jstr *s) {
    int has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_put(b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char esc[8];
        if (ch == '\\') sb_puts(b, "\\\\");
        else if (ch == (unsigned char)q) { esc[0] = '\\'; esc[1] = q; sb_put(b, esc, 2); }
        else if (ch == '\n') sb_puts(b, "\\n");
        else if (ch == '\r') sb_puts(b, "\\r");
        else if (ch == '\t') sb_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", ch); sb_puts(b, esc); }
        else sb_put(b, (const char *)&ch, 1);
    }
    sb_put(b, &q, 1);
    if (!s_all_tpl(s)) b->tpl = 0;
}

static void repr_into(sb *b, const jv *v, int depth);

static void scalar_text(sb *b, const jv *v) {
    char buf[64];
    switch (v->t) {
    case V_UNDEF: break;
    case V_NONE: sb_puts(b, "None"); break;
    case V_BOOL: sb_puts(b, v->u.i ? "True" : "False"); break;
    case V_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->u.i); sb_puts(b, buf); break;
    case V_FLOAT: float_repr(v->u.f, buf, sizeof buf); sb_puts(b, buf); break;
    case V_NS: sb_puts(b, "<Namespace>"); break;
    case V_LOOP: sb_puts(b, "<LoopContext>"); break;
    case V_MACRO: sb_puts(b, "<Macro>"); break;
    case V_FUNC: sb_puts(b, "<built-in function>"); break;
    default: repr_into(b, v, 0); break;
    }
}

static void repr_into(sb *b, const jv *v, int depth) {
    if (depth > 200) r_fail(b->x, NULL, "value nested too deeply to print");
    switch (v->t) {
    case V_STR: repr_str(b, v->u.s); break;
    case V_UNDEF: sb_puts(b, "Undefined"); break;
    case V_LIST:
        sb_puts(b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) sb_puts(b, ", ");
            repr_into(b, &v->u.l->v[i], depth + 1);
        }
        sb_puts(b, "]");
        break;
    case V_DICT:
        sb_puts(b, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) sb_puts(b, ", ");
            repr_into(b, &v->u.d->k[i], depth + 1);
            sb_puts(b, ": ");
            repr_into(b, &v->u.d->v[i], depth + 1);
        }
        sb_puts(b, "}");
        break;
    default: scalar_text(b, v); break;
    }
}

/* str(v): strings as they are, the rest as Python prints them. */
static jstr *to_str(rx *x, const jv *v) {
    if (v->t == V_STR) return v->u.s;
    sb b = {x, NULL, 0, 0, 1};
    scalar_text(&b, v);
    return sb_str(&b);
}

/* json.dumps(v, ensure_ascii=ea, indent=indent), as transformers' tojson. */
static void json_str(sb *b, const jstr *s, int ea) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < s->n;) {
        unsigned char ch = (unsigned char)s->p[i];
        char esc[16];
        if (ch == '"') sb_puts(b, "\\\"");
        else if (ch == '\\') sb_puts(b, "\\\\");
        else if (ch == '\n') sb_puts(b, "\\n");
        else if (ch == '\r') sb_puts(b, "\\r");
        else if (ch == '\t') sb_puts(b, "\\t");
        else if (ch == '\b') sb_puts(b, "\\b");
        else if (ch == '\f') sb_puts(b, "\\f");
        else if (ch < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", ch); sb_puts(b, esc); }
        else if (ch >= 0x80 && ea) {
            size_t l = u8_len((const unsigned char *)s->p + i, s->n - i);
            uint32_t cp = ch;
            if (l == 2) cp = ((ch & 0x1Fu) << 6) | (s->p[i + 1] & 0x3Fu);
            if (l == 3) cp = ((ch & 0x0Fu) << 12) | ((s->p[i + 1] & 0x3Fu) << 6) | (s->p[i + 2] & 0x3Fu);
            if (l == 4) cp = ((ch & 0x07u) << 18) | ((s->p[i + 1] & 0x3Fu) << 12) |
                             ((s->p[i + 2] & 0x3Fu) << 6) | (s->p[i + 3] & 0x3Fu);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            sb_puts(b, esc);
            i += l;
            continue;
        } else sb_put(b, (const char *)&ch, 1);
        i++;
    }
    sb_puts(b, "\"");
    if (!s_all_tpl(s)) b->tpl = 0;
}

static void json_nl(sb *b, int indent, int depth) {
    sb_puts(b, "\n");
    for (int i = 0; i < indent * depth; i++) sb_puts(b, " ");
}

static void json_into(sb *b, const jv *v, int indent, int ea, int depth) {
    char buf[64];
    if (depth > 200) r_fail(b->x, NULL, "tojson: value nested too deeply");
    switch (v->t) {
    case V_UNDEF:
    case V_NONE: sb_puts(b, "null"); break;
    case V_BOOL: sb_puts(b, v->u.i ? "true" : "false"); break;
    case V_INT: snprintf(buf, sizeof buf, "%lld", (long long)v->u.i); sb_puts(b, buf); break;
    case V_FLOAT:
        if (isnan(v->u.f)) sb_puts(b, "NaN");
        else if (isinf(v->u.f)) sb_puts(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else { float_repr(v->u.f, buf, sizeof buf); sb_puts(b, buf); }
        break;
    case V_STR: json_str(b, v->u.s, ea); break;
    case V_LIST:
        sb_puts(b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) sb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_nl(b, indent, depth + 1);
            json_into(b, &v->u.l->v[i], indent, ea, depth + 1);
        }
        if (indent >= 0 && v->u.l->n) json_nl(b, indent, depth);
        sb_puts(b, "]");
        break;
    case V_DICT:
    case V_NS:
        sb_puts(b, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) sb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) json_nl(b, indent, depth + 1);
            const jv *k = &v->u.d->k[i];
            if (k->t == V_STR) {
                json_str(b, k->u.s, ea);
            } else {
                sb_puts(b, "\"");
                if (k->t == V_NONE) sb_puts(b, "null");
                else if (k->t == V_BOOL) sb_puts(b, k->u.i ? "true" : "false");
                else scalar_text(b, k);
                sb_puts(b, "\"");
            }
            sb_puts(b, ": ");
            json_into(b, &v->u.d->v[i], indent, ea, depth + 1);
        }
        if (indent >= 0 && v->u.d->n) json_nl(b, indent, depth);
        sb_puts(b, "}");
        break;
    default: r_fail(b->x, NULL, "tojson: cannot serialize a %s", type_name(v));
    }
}

/* ---- access ---------------------------------------------------------------- */

__attribute__((noreturn))
static void undefined_fail(rx *x, const node *at, const jv *v) {
    if (v->u.name) r_fail(x, at, "'%s' is undefined", v->u.name);
    r_fail(x, at, "value is undefined");
}

/* The items a for loop, |list or |join sees: a snapshot. */
static jv *iterate(rx *x, const node *at, const jv *v, size_t *n) {
    *n = 0;
    switch (v->t) {
    case V_UNDEF: return NULL;
    case V_LIST: {
        jv *r = c_array(&x->c, v->u.l->n ? v->u.l->n : 1, sizeof *r);
        memcpy(r, v->u.l->v, v->u.l->n * sizeof *r);
        *n = v->u.l->n;
        return r;
    }
    case V_DICT: {
        jv *r = c_array(&x->c, v->u.d->n ? v->u.d->n : 1, sizeof *r);
        memcpy(r, v->u.d->k, v->u.d->n * sizeof *r);
        *n = v->u.d->n;
        return r;
    }
    case V_STR: {
        size_t cnt, *off = u8_offsets(&x->c, v->u.s, &cnt);
        jv *r = c_array(&x->c, cnt ? cnt : 1, sizeof *r);
        for (size_t i = 0; i < cnt; i++) r[i] = v_str(s_sub(&x->c, v->u.s, off[i], off[i + 1] - off[i]));
        *n = cnt;
        return r;
    }
    default: r_fail(x, at, "'%s' object is not iterable", type_name(v));
    }
}

static jv loop_attr(const jloop *lp, const char *name) {
    size_t i = lp->i, n = lp->n;
    if (!strcmp(name, "index")) return v_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return v_int((int64_t)i);
    if (!strcmp(name, "revindex")) return v_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return v_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return v_bool(i == 0);
    if (!strcmp(name, "last")) return v_bool(i + 1 == n);
    if (!strcmp(name, "length")) return v_int((int64_t)n);
    if (!strcmp(name, "depth")) return v_int(1);
    if (!strcmp(name, "depth0")) return v_int(0);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items[i - 1] : undef_named("previtem");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items[i + 1] : undef_named("nextitem");
    return undef_named(name);
}

static jv get_attr(rx *x, const node *at, const jv *v, const char *name) {
    switch (v->t) {
    case V_UNDEF: undefined_fail(x, at, v);
    case V_DICT:
    case V_NS: {
        jv *r = d_findc(v->u.d, name);
        return r ? *r : undef_named(name);
    }
    case V_LOOP: return loop_attr(v->u.lp, name);
    default: return undef_named(name);
    }
}

static int64_t as_index(rx *x, const node *at, const jv *k, size_t len, int *ok) {
    *ok = 0;
    if (k->t != V_INT && k->t != V_BOOL)
        r_fail(x, at, "indices must be integers, not %s", type_name(k));
    int64_t i = k->u.i;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return 0;
    *ok = 1;
    return i;
}

static jv get_item(rx *x, const node *at, const jv *v, const jv *k) {
    int ok;
    switch (v->t) {
    case V_UNDEF: undefined_fail(x, at, v);
    case V_LIST: {
        int64_t i = as_index(x, at, k, v->u.l->n, &ok);
        return ok ? v->u.l->v[i] : undef_named(NULL);
    }
    case V_STR: {
        size_t cnt, *off = u8_offsets(&x->c, v->u.s, &cnt);
        int64_t i = as_index(x, at, k, cnt, &ok);
        if (!ok) return undef_named(NULL);
        return v_str(s_sub(&x->c, v->u.s, off[i], off[i + 1] - off[i]));
    }
    case V_DICT: {
        jv *r = d_find(v->u.d, k);
        return r ? *r : undef_named(k->t == V_STR ? k->u.s->p : NULL);
    }
    case V_NS:
    case V_LOOP:
        if (k->t == V_STR) return get_attr(x, at, v, k->u.s->p);
        return undef_named(NULL);
    default: return undef_named(NULL);
    }
}

/* Python's slice.indices(len), then the picked positions. */
static size_t slice_pick(rx *x, const node *at, const jv *pv[3], size_t len, size_t **out) {
    int64_t st = 1, L = (int64_t)len, a, b;
    for (int i = 0; i < 3; i++)
        if (pv[i] && pv[i]->t != V_NONE && pv[i]->t != V_UNDEF && pv[i]->t != V_INT &&
            pv[i]->t != V_BOOL)
            r_fail(x, at, "slice indices must be integers or None");
    int has[3];
    for (int i = 0; i < 3; i++) has[i] = pv[i] && (pv[i]->t == V_INT || pv[i]->t == V_BOOL);
    if (has[2]) st = pv[2]->u.i;
    if (st == 0) r_fail(x, at, "slice step cannot be zero");
    if (!has[0]) a = st < 0 ? L - 1 : 0;
    else {
        a = pv[0]->u.i;
        if (a < 0) { a += L; if (a < 0) a = st < 0 ? -1 : 0; }
        else if (a >= L) a = st < 0 ? L - 1 : L;
    }
    if (!has[1]) b = st < 0 ? -1 : L;
    else {
        b = pv[1]->u.i;
        if (b < 0) { b += L; if (b < 0) b = st < 0 ? -1 : 0; }
        else if (b >= L) b = st < 0 ? L - 1 : L;
    }
    size_t *r = c_array(&x->c, len + 1, sizeof *r), k = 0;
    /* A huge step may overflow past the end: that also ends the slice. */
    if (st > 0)
        for (int64_t i = a; i < b; ) {
            r[k++] = (size_t)i;
            if (__builtin_add_overflow(i, st, &i)) break;
        }
    else
        for (int64_t i = a; i > b; ) {
            r[k++] = (size_t)i;
            if (__builtin_add_overflow(i, st, &i)) break;
        }
    *out = r;
    return k;
}

static jv do_slice(rx *x, const node *at, const jv *v, const jv *pv[3]) {
    size_t *pick, k;
    if (v->t == V_UNDEF) undefined_fail(x, at, v);
    if (v->t == V_LIST) {
        k = slice_pick(x, at, pv, v->u.l->n, &pick);
        jlist *l = l_new(&x->c, k);
        for (size_t i = 0; i < k; i++) l->v[i] = v->u.l->v[pick[i]];
        l->n = k;
        return v_list(l);
    }
    if (v->t == V_STR) {
        size_t cnt, *off = u8_offsets(&x->c, v->u.s, &cnt), total = 0;
        k = slice_pick(x, at, pv, cnt, &pick);
        for (size_t i = 0; i < k; i++) total += off[pick[i] + 1] - off[pick[i]];
        jstr *r = s_new(&x->c, total);
        size_t o = 0;
        for (size_t i = 0; i < k; i++) {
            size_t s = off[pick[i]], l = off[pick[i] + 1] - s;
            memcpy(r->p + o, v->u.s->p + s, l);
            memcpy(r->m + o, v->u.s->m + s, l);
            o += l;
        }
        return v_str(r);
    }
    r_fail(x, at, "'%s' object cannot be sliced", type_name(v));
}

static const char *memfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, n, nn);
}

static int contains(rx *x, const node *at, const jv *hay, const jv *needle) {
    switch (hay->t) {
    case V_UNDEF: return 0;
    case V_STR:
        if (needle->t != V_STR)
            r_fail(x, at, "'in <string>' requires a string as left operand, not %s", type_name(needle));
        return memfind(hay->u.s->p, hay->u.s->n, needle->u.s->p, needle->u.s->n) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (v_eq(&hay->u.l->v[i], needle)) return 1;
        return 0;
    case V_DICT:
    case V_NS: return d_find(hay->u.d, needle) != NULL;
    default: r_fail(x, at, "argument of type '%s' is not iterable", type_name(hay));
    }
}

/* ---- operators ------------------------------------------------------------- */

__attribute__((noreturn))
static void op_fail(rx *x, const node *at, int op, const jv *a, const jv *b) {
    if (a->t == V_UNDEF) undefined_fail(x, at, a);
    if (b->t == V_UNDEF) undefined_fail(x, at, b);
    r_fail(x, at, "unsupported operand types for %s: '%s' and '%s'", op_text[op], type_name(a),
           type_name(b));
}

static jv repeat(rx *x, const node *at, const jv *seq, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = seq->t == V_STR ? seq->u.s->n : seq->u.l->n;
    if (unit && (uint64_t)times > x->lim.max_output / unit)
        r_fail(x, at, "repetition too large");
    size_t t = (size_t)times;
    if (seq->t == V_STR) {
        jstr *r = s_new(&x->c, unit * t);
        for (size_t i = 0; i < t; i++) {
            memcpy(r->p + i * unit, seq->u.s->p, unit);
            memcpy(r->m + i * unit, seq->u.s->m, unit);
        }
        return v_str(r);
    }
    jlist *l = l_new(&x->c, unit * t);
    for (size_t i = 0; i < t; i++) memcpy(l->v + i * unit, seq->u.l->v, unit * sizeof *l->v);
    l->n = unit * t;
    return v_list(l);
}

/* Python's // and % on integers: floor division, remainder with the
 * divisor's sign. */
static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static jv arith(rx *x, const node *at, int op, const jv *a, const jv *b) {
    if (op == O_TILDE) return v_str(s_cat(&x->c, to_str(x, a), to_str(x, b)));
    if (is_num(a) && is_num(b)) {
        int ints = a->t != V_FLOAT && b->t != V_FLOAT;
        int64_t i = a->u.i, j = b->u.i, r;
        double f = num_f(a), g = num_f(b);
        switch (op) {
        case O_ADD:
            if (!ints) return v_float(f + g);
            if (__builtin_add_overflow(i, j, &r)) r_fail(x, at, "integer overflow");
            return v_int(r);
        case O_SUB:
            if (!ints) return v_float(f - g);
            if (__builtin_sub_overflow(i, j, &r)) r_fail(x, at, "integer overflow");
            return v_int(r);
        case O_MUL:
            if (!ints) return v_float(f * g);
            if (__builtin_mul_overflow(i, j, &r)) r_fail(x, at, "integer overflow");
            return v_int(r);
        case O_DIV:
            if (g == 0) r_fail(x, at, "division by zero");
            return v_float(f / g);
        case O_FDIV:
        case O_MOD:
            if (g == 0) r_fail(x, at, "division by zero");
            if (!ints) {
                double q = floor(f / g);
                return op == O_FDIV ? v_float(q) : v_float(f - q * g);
            }
            if (i == INT64_MIN && j == -1) {
                if (op == O_MOD) return v_int(0);
                r_fail(x, at, "integer overflow");
            }
            return op == O_FDIV ? v_int(floordiv(i, j)) : v_int(i - floordiv(i, j) * j);
        case O_POW:
            if (ints && j >= 0) {
                if (i == 0) return v_int(j == 0);
                if (i == 1) return v_int(1);
                if (i == -1) return v_int(j & 1 ? -1 : 1);
                int64_t acc = 1;   /* |i| >= 2: overflows within 63 rounds */
                for (int64_t k = 0; k < j; k++)
                    if (__builtin_mul_overflow(acc, i, &acc)) r_fail(x, at, "integer overflow");
                return v_int(acc);
            }
            return v_float(pow(f, g));
        default: break;
        }
    }
    if (op == O_ADD && a->t == V_STR && b->t == V_STR) return v_str(s_cat(&x->c, a->u.s, b->u.s));
    if (op == O_ADD && a->t == V_LIST && b->t == V_LIST) {
        jlist *l = l_new(&x->c, a->u.l->n + b->u.l->n);
        memcpy(l->v, a->u.l->v, a->u.l->n * sizeof *l->v);
        memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof *l->v);
        l->n = a->u.l->n + b->u.l->n;
        return v_list(l);
    }
    if (op == O_MUL && (a->t == V_STR || a->t == V_LIST) && (b->t == V_INT || b->t == V_BOOL))
        return repeat(x, at, a, b->u.i);
    if (op == O_MUL && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL))
        return repeat(x, at, b, a->u.i);
    op_fail(x, at, op, a, b);
}

/* <, <=, >, >= : numbers by value, strings by code point (= UTF-8 bytes). */
static int order(rx *x, const node *at, int op, const jv *a, const jv *b) {
    int c;
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) c = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        else {
            double f = num_f(a), g = num_f(b);
            if (isnan(f) || isnan(g)) return 0;
            c = (f > g) - (f < g);
        }
    } else if (a->t == V_STR && b->t == V_STR) {
        size_t n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
        c = memcmp(a->u.s->p, b->u.s->p, n);
        if (c == 0) c = (a->u.s->n > b->u.s->n) - (a->u.s->n < b->u.s->n);
    } else {
        if (a->t == V_UNDEF) undefined_fail(x, at, a);
        if (b->t == V_UNDEF) undefined_fail(x, at, b);
        r_fail(x, at, "'%s' not supported between '%s' and '%s'", op_text[op], type_name(a),
               type_name(b));
    }
    switch (op) {
    case O_LT: return c < 0;
    case O_LE: return c <= 0;
    case O_GT: return c > 0;
    default: return c >= 0;
    }
}

static int compare(rx *x, const node *at, int op, const jv *a, const jv *b) {
    switch (op) {
    case O_EQ: return v_eq(a, b);
    case O_NE: return !v_eq(a, b);
    case O_IN: return contains(x, at, b, a);
    case O_NOTIN: return !contains(x, at, b, a);
    default: return order(x, at, op, a, b);
    }
}

/* ---- arguments --------------------------------------------------------------- */

typedef struct args {
    jv *v;
    const char **kw;        /* NULL entries: positional */
    int n;
} args;

/* The pos-th positional argument, or the one named name; NULL if absent. */
static const jv *arg(const args *a, int pos, const char *name) {
    int p = 0;
    for (int i = 0; i < a->n; i++) {
        if (!a->kw || !a->kw[i]) {
            if (p++ == pos) return &a->v[i];
        } else if (name && !strcmp(a->kw[i], name)) {
            return &a->v[i];
        }
    }
    return NULL;
}

static int n_positional(const args *a) {
    int p = 0;
    for (int i = 0; i < a->n; i++) p += !a->kw || !a->kw[i];
    return p;
}

static jv eval(rx *x, const node *e, frame *f);

static args eval_args(rx *x, const node *e, frame *f) {
    args a = {NULL, e->kw, e->kids.n};
    if (a.n) {
        a.v = c_array(&x->c, (size_t)a.n, sizeof *a.v);
        for (int i = 0; i < a.n; i++) a.v[i] = eval(x, e->kids.v[i], f);
    }
    return a;
}

static jstr *arg_str(rx *x, const node *at, const jv *v, const char *what) {
    if (!v || v->t != V_STR) r_fail(x, at, "%s must be a string", what);
    return v->u.s;
}

/* ---- string operations -------------------------------------------------------- */

static int in_chars(const jstr *chars, const char *p, size_t l) {
    for (size_t i = 0; i < chars->n;) {
        size_t cl = u8_len((const unsigned char *)chars->p + i, chars->n - i);
        if (cl == l && !memcmp(chars->p + i, p, l)) return 1;
        i += cl;
    }
    return 0;
}

/* A string with provenance under construction, in the arena: appends are
 * amortized O(1), so replace and join stay linear. */
typedef struct jsb {
    rx *x;
    jstr s;
    size_t cap;
} jsb;

static void jsb_put(jsb *b, const char *p, const uint8_t *m, size_t n) {
    if (b->s.n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->s.n + n) {
            if (cap > b->x->lim.max_output) r_fail(b->x, NULL, "string exceeds its limit (%zu bytes)",
                                                   b->x->lim.max_output);
            cap *= 2;
        }
        char *np = c_alloc(&b->x->c, cap + 1);
        uint8_t *nm = c_alloc(&b->x->c, cap);
        if (b->s.n) {
            memcpy(np, b->s.p, b->s.n);
            memcpy(nm, b->s.m, b->s.n);
        }
        b->s.p = np;
        b->s.m = nm;
        b->cap = cap;
    }
    if (n) {
        memcpy(b->s.p + b->s.n, p, n);
        memcpy(b->s.m + b->s.n, m, n);
    }
    b->s.n += n;
}

static void jsb_str(jsb *b, const jstr *s) { jsb_put(b, s->p, s->m, s->n); }

static jstr *jsb_done(jsb *b) {
    if (!b->s.p) return s_new(&b->x->c, 0);
    b->s.p[b->s.n] = '\0';
    jstr *r = c_alloc(&b->x->c, sizeof *r);
    *r = b->s;
    return r;
}

/* str.strip/lstrip/rstrip: whitespace, or the code points in chars. */
static jv strip(rx *x, const jstr *s, const jstr *chars, int left, int right) {
    size_t a = 0, b = s->n, l;
    if (chars) {
        size_t cnt, *off = u8_offsets(&x->c, s, &cnt), i = 0, j = cnt;
        while (left && i < j && in_chars(chars, s->p + off[i], off[i + 1] - off[i])) i++;
        while (right && j > i && in_chars(chars, s->p + off[j - 1], off[j] - off[j - 1])) j--;
        a = off[i];
        b = off[j];
    } else {
        while (left && a < b && (l = ws_len(s->p + a, b - a))) a += l;
        while (right && b > a && (l = ws_len_back(s->p + a, b - a))) b -= l;
    }
    return v_str(s_sub(&x->c, s, a, b - a));
}

static char up(char ch) { return ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch; }
static char low(char ch) { return ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch; }
static int alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

/* ASCII case mapping; each byte keeps its provenance. */
static jv recase(rx *x, const jstr *s, int how) {
    jstr *r = s_sub(&x->c, s, 0, s->n);
    int prev_alpha = 0;
    for (size_t i = 0; i < r->n; i++) {
        char ch = r->p[i];
        switch (how) {
        case CASE_UPPER: r->p[i] = up(ch); break;
        case CASE_LOWER: r->p[i] = low(ch); break;
        case CASE_TITLE: r->p[i] = prev_alpha ? low(ch) : up(ch); break;
        default: r->p[i] = i == 0 ? up(ch) : low(ch); break;
        }
        prev_alpha = alpha(ch) || ((unsigned char)ch >= 0x80 && prev_alpha);
    }
    return v_str(r);
}

static jv replace(rx *x, const node *at, const jstr *s, const jstr *old, const jstr *new_,
                  int64_t count) {
    jsb b = {x, {0, NULL, NULL}, 0};
    uint64_t done = 0;
    if (old->n == 0) {    /* Python inserts new before every code point and at the end */
        for (size_t i = 0;; ) {
            if (count < 0 || done < (uint64_t)count) {
                jsb_str(&b, new_);
                done++;
            }
            if (i >= s->n) break;
            size_t l = u8_len((const unsigned char *)s->p + i, s->n - i);
            jsb_put(&b, s->p + i, s->m + i, l);
            i += l;
            step(x, at);
        }
        return v_str(jsb_done(&b));
    }
    for (size_t i = 0;;) {
        const char *hit = count >= 0 && done >= (uint64_t)count ? NULL
                        : memfind(s->p + i, s->n - i, old->p, old->n);
        size_t end = hit ? (size_t)(hit - s->p) : s->n;
        jsb_put(&b, s->p + i, s->m + i, end - i);
        if (!hit) break;
        jsb_str(&b, new_);
        done++;
        i = end + old->n;
        step(x, at);
    }
    return v_str(jsb_done(&b));
}

/* str.split(sep=None, maxsplit=-1). */
static jv split(rx *x, const node *at, const jstr *s, const jstr *sep, int64_t maxsplit) {
    jlist *l = l_new(&x->c, 4);
    size_t i = 0;
    int64_t done = 0;
    if (!sep) {
        for (;;) {
            size_t w;
            while (i < s->n && (w = ws_len(s->p + i, s->n - i))) i += w;
            if (i >= s->n) break;
            size_t j = i;
            if (maxsplit >= 0 && done >= maxsplit) j = s->n;   /* the rest, as it is */
            else
                while (j < s->n && !ws_len(s->p + j, s->n - j)) j++;
            l_push(&x->c, l, v_str(s_sub(&x->c, s, i, j - i)));
            done++;
            i = j;
            step(x, at);
        }
        return v_list(l);
    }
    if (sep->n == 0) r_fail(x, at, "split: empty separator");
    for (;;) {
        const char *hit = maxsplit >= 0 && done >= maxsplit ? NULL
                        : memfind(s->p + i, s->n - i, sep->p, sep->n);
        size_t end = hit ? (size_t)(hit - s->p) : s->n;
        l_push(&x->c, l, v_str(s_sub(&x->c, s, i, end - i)));
        if (!hit) break;
        done++;
        i = end + sep->n;
        step(x, at);
    }
    return v_list(l);
}

static jv join(rx *x, const node *at, const jv *seq, const jstr *sep, const char *attr) {
    size_t n;
    jv *items = iterate(x, at, seq, &n);
    jsb b = {x, {0, NULL, NULL}, 0};
    for (size_t i = 0; i < n; i++) {
        if (i && sep) jsb_str(&b, sep);
        jv it = attr ? get_attr(x, at, &items[i], attr) : items[i];
        jsb_str(&b, to_str(x, &it));
        step(x, at);
    }
    return v_str(jsb_done(&b));
}

static int affix(const jstr *s, const jstr *a, int end) {
    if (a->n > s->n) return 0;
    return !memcmp(s->p + (end ? s->n - a->n : 0), a->p, a->n);
}

/* startswith/endswith: a string or a tuple (list) of them. */
static jv affix_any(rx *x, const node *at, const jstr *s, const jv *a, int end) {
    if (a && a->t == V_LIST) {
        for (size_t i = 0; i < a->u.l->n; i++)
            if (affix(s, arg_str(x, at, &a->u.l->v[i], "prefix"), end)) return v_bool(1);
        return v_bool(0);
    }
    return v_bool(affix(s, arg_str(x, at, a, end ? "endswith's argument" : "startswith's argument"), end));
}

/* ---- tests ------------------------------------------------------------------- */

static int str_cased(const jstr *s, int want_upper) {
    int cased = 0;
    for (size_t i = 0; i < s->n; i++) {
        char ch = s->p[i];
        if (ch >= 'a' && ch <= 'z') { if (want_upper) return 0; cased = 1; }
        if (ch >= 'A' && ch <= 'Z') { if (!want_upper) return 0; cased = 1; }
    }
    return cased;
}

static int run_test(rx *x, const node *at, int id, const jv *v, const args *a) {
    const jv *p = arg(a, 0, NULL);
    int needs = id >= T_EQ && id <= T_IN ? 1 : (id == T_DIVISIBLEBY || id == T_SAMEAS);
    if (needs && !p) r_fail(x, at, "test '%s' needs an argument", test_names[id]);
    switch (id) {
    case T_DEFINED: return v->t != V_UNDEF;
    case T_UNDEFINED: return v->t == V_UNDEF;
    case T_NONE: return v->t == V_NONE;
    case T_STRING: return v->t == V_STR;
    case T_MAPPING: return v->t == V_DICT;
    case T_ITERABLE: return v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF;
    case T_SEQUENCE: return v->t == V_STR || v->t == V_LIST || v->t == V_DICT;
    case T_NUMBER: return is_num(v);
    case T_INTEGER: return v->t == V_INT;
    case T_FLOAT: return v->t == V_FLOAT;
    case T_BOOLEAN: return v->t == V_BOOL;
    case T_TRUE: return v->t == V_BOOL && v->u.i;
    case T_FALSE: return v->t == V_BOOL && !v->u.i;
    case T_CALLABLE: return v->t == V_MACRO || v->t == V_FUNC;
    case T_EQ: case T_EQ2: case T_EQ3: return v_eq(v, p);
    case T_NE: case T_NE2: return !v_eq(v, p);
    case T_LT: case T_LT2: return order(x, at, O_LT, v, p);
    case T_LE: case T_LE2: return order(x, at, O_LE, v, p);
    case T_GT: case T_GT2: return order(x, at, O_GT, v, p);
    case T_GE: case T_GE2: return order(x, at, O_GE, v, p);
    case T_IN: return contains(x, at, p, v);
    case T_ODD:
    case T_EVEN:
        if (v->t != V_INT && v->t != V_BOOL) r_fail(x, at, "test '%s' needs an integer", test_names[id]);
        return (int)(v->u.i & 1) == (id == T_ODD);
    case T_DIVISIBLEBY:
        if ((v->t != V_INT && v->t != V_BOOL) || (p->t != V_INT && p->t != V_BOOL) || p->u.i == 0)
            r_fail(x, at, "test 'divisibleby' needs integers and a non-zero divisor");
        return p->u.i == -1 || v->u.i % p->u.i == 0;
    case T_LOWER: return v->t == V_STR && str_cased(v->u.s, 0);
    case T_UPPER: return v->t == V_STR && str_cased(v->u.s, 1);
    case T_SAMEAS:
        if (v->t != p->t) return 0;
        if (v->t == V_LIST || v->t == V_DICT || v->t == V_NS) return v->u.l == p->u.l;
        return v_eq(v, p);
    default: r_fail(x, at, "unknown test");
    }
}

/* A test named at render time (select, selectattr): name and arguments. */
static int test_by_name(rx *x, const node *at, const jv *name, const jv *v, const args *rest) {
    if (!name) return truthy(v);
    jstr *nm = arg_str(x, at, name, "a test name");
    int id = lookup(test_names, T_N, nm->p);
    if (id < 0 || strlen(nm->p) != nm->n) r_fail(x, at, "unknown test '%s'", nm->p);
    return run_test(x, at, id, v, rest);
}

/* ---- filters ---------------------------------------------------------------- */

static jv apply_filter(rx *x, const node *at, int id, const jv *v, const args *a);

/* Positional args from index from on, for a test or filter named by string. */
static args args_from(const args *a, int from) {
    args r = {a->v, a->kw, a->n};
    int p = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw && a->kw[i]) continue;
        if (p++ == from) {
            r.v = a->v + i;
            r.kw = a->kw ? a->kw + i : NULL;
            r.n = a->n - i;
            return r;
        }
    }
    r.n = 0;
    return r;
}

/* "a.b" attribute paths, as selectattr and map(attribute=) accept. */
static jv attr_path(rx *x, const node *at, const jv *v, const jstr *path) {
    jv cur = *v;
    size_t i = 0;
    while (i <= path->n) {
        const char *dot = memchr(path->p + i, '.', path->n - i);
        size_t end = dot ? (size_t)(dot - path->p) : path->n;
        jstr *part = s_sub(&x->c, path, i, end - i);
        if (cur.t == V_UNDEF) return cur;
        int digits = part->n > 0;
        for (size_t k = 0; k < part->n; k++) digits &= is_digit(part->p[k]);
        if (digits && cur.t == V_LIST) {
            jv k = v_int(strtoll(part->p, NULL, 10));
            cur = get_item(x, at, &cur, &k);
        } else {
            jv k = v_str(part);
            cur = cur.t == V_DICT ? get_item(x, at, &cur, &k) : get_attr(x, at, &cur, part->p);
        }
        if (!dot) break;
        i = end + 1;
    }
    return cur;
}

static jv select_items(rx *x, const node *at, int id, const jv *v, const args *a) {
    size_t n;
    jv *items = iterate(x, at, v, &n);
    int by_attr = id == F_SELECTATTR || id == F_REJECTATTR;
    int keep_if = id == F_SELECT || id == F_SELECTATTR;
    const jv *attr = by_attr ? arg(a, 0, NULL) : NULL;
    if (by_attr && !attr) r_fail(x, at, "%s needs an attribute name", filter_names[id]);
    const jv *test = arg(a, by_attr ? 1 : 0, NULL);
    args rest = args_from(a, by_attr ? 2 : 1);
    jlist *l = l_new(&x->c, n);
    for (size_t i = 0; i < n; i++) {
        jv probe = by_attr ? attr_path(x, at, &items[i], arg_str(x, at, attr, "an attribute name"))
                           : items[i];
        if (test_by_name(x, at, test, &probe, &rest) == keep_if) l_push(&x->c, l, items[i]);
        step(x, at);
    }
    return v_list(l);
}

static jv map_items(rx *x, const node *at, const jv *v, const args *a) {
    size_t n;
    jv *items = iterate(x, at, v, &n);
    const jv *attr = arg(a, -1, "attribute"), *dflt = arg(a, -1, "default");
    const jv *fname = arg(a, 0, NULL);
    int fid = -1;
    args rest = args_from(a, 1);
    if (!attr) {
        jstr *nm = arg_str(x, at, fname, "map's filter name");
        fid = lookup(filter_names, F_N, nm->p);
        if (fid < 0) r_fail(x, at, "unknown filter '%s'", nm->p);
    }
    jlist *l = l_new(&x->c, n);
    for (size_t i = 0; i < n; i++) {
        jv r;
        if (attr) {
            r = attr_path(x, at, &items[i], arg_str(x, at, attr, "an attribute name"));
            if (r.t == V_UNDEF && dflt) r = *dflt;
        } else {
            r = apply_filter(x, at, fid, &items[i], &rest);
        }
        l_push(&x->c, l, r);
        step(x, at);
    }
    return v_list(l);
}

static jv items_of(rx *x, const node *at, const jv *v) {
    if (v->t == V_UNDEF) return v_list(l_new(&x->c, 1));
    if (v->t != V_DICT && v->t != V_NS) r_fail(x, at, "items: expected a mapping, got %s", type_name(v));
    jlist *l = l_new(&x->c, v->u.d->n);
    for (size_t i = 0; i < v->u.d->n; i++) {
        jlist *pair = l_new(&x->c, 2);
        pair->v[0] = v->u.d->k[i];
        pair->v[1] = v->u.d->v[i];
        pair->n = 2;
        l->v[i] = v_list(pair);
    }
    l->n = v->u.d->n;
    return v_list(l);
}

static jv length_of(rx *x, const node *at, const jv *v) {
    switch (v->t) {
    case V_UNDEF: return v_int(0);
    case V_STR: return v_int((int64_t)u8_count(v->u.s));
    case V_LIST: return v_int((int64_t)v->u.l->n);
    case V_DICT:
    case V_NS: return v_int((int64_t)v->u.d->n);
    default: r_fail(x, at, "object of type '%s' has no len()", type_name(v));
    }
}

static jv end_item(rx *x, const node *at, const jv *v, int last) {
    size_t n;
    jv *items = iterate(x, at, v, &n);
    if (!n) return undef_named(NULL);
    return items[last ? n - 1 : 0];
}

static jv to_number(rx *x, const node *at, const jv *v, const jv *dflt, int want_float) {
    jv d = dflt ? *dflt : (want_float ? v_float(0) : v_int(0));
    switch (v->t) {
    case V_INT:
    case V_BOOL: return want_float ? v_float((double)v->u.i) : v_int(v->u.i);
    case V_FLOAT:
        if (want_float) return *v;
        if (!(v->u.f > -9.2e18 && v->u.f < 9.2e18)) return d;
        return v_int((int64_t)v->u.f);
    case V_STR: {
        const char *s = v->u.s->p;
        char *end;
        if (strlen(s) != v->u.s->n) return d;
        if (!want_float) {
            errno = 0;
            long long i = strtoll(s, &end, 10);
            while (*end && is_space(*end)) end++;
            if (end != s && !*end && errno == 0) return v_int(i);
        }
        double f = strtod(s, &end);
        while (*end && is_space(*end)) end++;
        if (end == s || *end) return d;
        if (want_float) return v_float(f);
        if (!(f > -9.2e18 && f < 9.2e18)) return d;
        return v_int((int64_t)f);
    }
    default: (void)at; (void)x; return d;
    }
}

static jv apply_filter(rx *x, const node *at, int id, const jv *v, const args *a) {
    const jv *p0 = arg(a, 0, NULL);
    switch (id) {
    case F_ABS:
        if (v->t == V_INT || v->t == V_BOOL) {
            if (v->u.i == INT64_MIN) r_fail(x, at, "integer overflow");
            return v_int(v->u.i < 0 ? -v->u.i : v->u.i);
        }
        if (v->t == V_FLOAT) return v_float(fabs(v->u.f));
        r_fail(x, at, "abs: expected a number, got %s", type_name(v));
    case F_CAPITALIZE: return recase(x, to_str(x, v), CASE_CAPITALIZE);
    case F_TITLE: return recase(x, to_str(x, v), CASE_TITLE);
    case F_UPPER: return recase(x, to_str(x, v), CASE_UPPER);
    case F_LOWER: return recase(x, to_str(x, v), CASE_LOWER);
    case F_COUNT:
    case F_LENGTH: return length_of(x, at, v);
    case F_D:
    case F_DEFAULT: {
        const jv *dv = arg(a, 0, "default_value"), *bo = arg(a, 1, "boolean");
        int use = v->t == V_UNDEF || (bo && truthy(bo) && !truthy(v));
        if (!use) return *v;
        return dv ? *dv : v_str(s_new(&x->c, 0));
    }
    case F_FIRST: return end_item(x, at, v, 0);
    case F_LAST: return end_item(x, at, v, 1);
    case F_FLOAT: return to_number(x, at, v, arg(a, 0, "default"), 1);
    case F_INT: return to_number(x, at, v, arg(a, 0, "default"), 0);
    case F_ITEMS: return items_of(x, at, v);
    case F_JOIN: {
        const jv *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        return join(x, at, v, sep ? to_str(x, sep) : NULL,
                    attr ? arg_str(x, at, attr, "join's attribute")->p : NULL);
    }
    case F_LIST: {
        size_t n;
        jv *items = iterate(x, at, v, &n);
        jlist *l = l_new(&x->c, n);
        if (n) memcpy(l->v, items, n * sizeof *items);   /* items is NULL for none */
        l->n = n;
        return v_list(l);
    }
    case F_MAP: return map_items(x, at, v, a);
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR: return select_items(x, at, id, v, a);
    case F_REPLACE: {
        const jv *cnt = arg(a, 2, "count");
        if (cnt && cnt->t != V_INT) r_fail(x, at, "replace: count must be an integer");
        return replace(x, at, to_str(x, v), to_str(x, p0 ? p0 : &UNDEF),
                       to_str(x, arg(a, 1, "new") ? arg(a, 1, "new") : &UNDEF), cnt ? cnt->u.i : -1);
    }
    case F_REVERSE: {
        if (v->t == V_STR) {
            jv st = v_int(-1);
            const jv *pv[3] = {NULL, NULL, &st};
            return do_slice(x, at, v, pv);
        }
        size_t n;
        jv *items = iterate(x, at, v, &n);
        jlist *l = l_new(&x->c, n);
        for (size_t i = 0; i < n; i++) l->v[i] = items[n - 1 - i];
        l->n = n;
        return v_list(l);
    }
    case F_SAFE: return *v;
    case F_STRING: return v_str(to_str(x, v));
    case F_TOJSON: {
        const jv *ind = arg(a, 0, "indent"), *ea = arg(a, -1, "ensure_ascii");
        if (ind && ind->t != V_INT && ind->t != V_NONE) r_fail(x, at, "tojson: indent must be an integer");
        if (ind && ind->t == V_INT && (ind->u.i < 0 || ind->u.i > 64))
            r_fail(x, at, "tojson: indent out of range");
        if (arg(a, -1, "sort_keys") && truthy(arg(a, -1, "sort_keys")))
            r_fail(x, at, "tojson: sort_keys is not supported");
        sb b = {x, NULL, 0, 0, 1};
        json_into(&b, v, ind && ind->t == V_INT ? (int)ind->u.i : -1, ea && truthy(ea), 0);
        return v_str(sb_str(&b));
    }
    case F_TRIM: {
        const jv *ch = arg(a, 0, "chars");
        return strip(x, to_str(x, v), ch && ch->t != V_NONE ? to_str(x, ch) : NULL, 1, 1);
    }
    default: r_fail(x, at, "unknown filter");
    }
}

/* ---- methods and functions ---------------------------------------------------- */

static jv str_method(rx *x, const node *at, const jstr *s, int mid, const args *a) {
    const jv *p0 = arg(a, 0, NULL), *p1 = arg(a, 1, NULL);
    switch (mid) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        const jstr *chars = p0 && p0->t != V_NONE ? arg_str(x, at, p0, "strip's argument") : NULL;
        return strip(x, s, chars, mid != M_RSTRIP, mid != M_LSTRIP);
    }
    case M_SPLIT: {
        const jv *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
        if (mx && mx->t != V_INT) r_fail(x, at, "split: maxsplit must be an integer");
        return split(x, at, s, sep && sep->t != V_NONE ? arg_str(x, at, sep, "split's separator") : NULL,
                     mx ? mx->u.i : -1);
    }
    case M_SPLITLINES: {
        jlist *l = l_new(&x->c, 4);
        size_t i = 0;
        while (i < s->n) {
            size_t j = i;
            while (j < s->n && s->p[j] != '\n' && s->p[j] != '\r') j++;
            l_push(&x->c, l, v_str(s_sub(&x->c, s, i, j - i)));
            if (j < s->n && s->p[j] == '\r' && j + 1 < s->n && s->p[j + 1] == '\n') j++;
            i = j + 1;
        }
        return v_list(l);
    }
    case M_STARTSWITH: return affix_any(x, at, s, p0, 0);
    case M_ENDSWITH: return affix_any(x, at, s, p0, 1);
    case M_UPPER: return recase(x, s, CASE_UPPER);
    case M_LOWER: return recase(x, s, CASE_LOWER);
    case M_TITLE: return recase(x, s, CASE_TITLE);
    case M_CAPITALIZE: return recase(x, s, CASE_CAPITALIZE);
    case M_REPLACE: {
        const jv *cnt = arg(a, 2, NULL);
        if (cnt && cnt->t != V_INT) r_fail(x, at, "replace: count must be an integer");
        return replace(x, at, s, arg_str(x, at, p0, "replace's old text"),
                       arg_str(x, at, p1, "replace's new text"), cnt ? cnt->u.i : -1);
    }
    case M_FIND:
    case M_COUNT: {
        jstr *sub = arg_str(x, at, p0, "the substring");
        if (mid == M_FIND) {
            const char *h = memfind(s->p, s->n, sub->p, sub->n);
            if (!h) return v_int(-1);
            jstr pre = {(size_t)(h - s->p), s->p, s->m};
            return v_int((int64_t)u8_count(&pre));
        }
        if (!sub->n) return v_int((int64_t)u8_count(s) + 1);
        int64_t n = 0;
        for (const char *h = s->p; (h = memfind(h, s->n - (size_t)(h - s->p), sub->p, sub->n));
             h += sub->n)
            n++;
        return v_int(n);
    }
    case M_JOIN: return join(x, at, p0 ? p0 : &UNDEF, s, NULL);
    default: r_fail(x, at, "'str' object has no method '%s'", method_names[mid]);
    }
}

static jv call_macro(rx *x, const node *at, const jmacro *m, const args *a);

static jv call_method(rx *x, const node *at, const jv *obj, const char *name, int mid,
                      const args *a) {
    if ((obj->t == V_DICT || obj->t == V_NS)) {
        jv *fn = d_findc(obj->u.d, name);
        if (fn && fn->t == V_MACRO) return call_macro(x, at, fn->u.mac, a);
    }
    if (obj->t == V_LOOP && !strcmp(name, "cycle")) {
        if (!a->n) r_fail(x, at, "loop.cycle needs arguments");
        return a->v[obj->u.lp->i % (size_t)a->n];
    }
    if (mid < 0) r_fail(x, at, "'%s' object has no method '%s'", type_name(obj), name);
    switch (obj->t) {
    case V_UNDEF: undefined_fail(x, at, obj);
    case V_STR: return str_method(x, at, obj->u.s, mid, a);
    case V_DICT:
    case V_NS:
        if (mid == M_ITEMS) return items_of(x, at, obj);
        if (mid == M_KEYS || mid == M_VALUES) {
            jlist *l = l_new(&x->c, obj->u.d->n);
            memcpy(l->v, mid == M_KEYS ? obj->u.d->k : obj->u.d->v, obj->u.d->n * sizeof *l->v);
            l->n = obj->u.d->n;
            return v_list(l);
        }
        if (mid == M_GET) {
            const jv *k = arg(a, 0, NULL), *d = arg(a, 1, NULL);
            if (!k) r_fail(x, at, "get needs a key");
            jv *r = d_find(obj->u.d, k);
            return r ? *r : d ? *d : v_none();
        }
        break;
    case V_LIST:
        if (mid == M_APPEND) {
            if (n_positional(a) != 1) r_fail(x, at, "append takes one argument");
            l_push(&x->c, obj->u.l, a->v[0]);
            return v_none();
        }
        break;
    default: break;
    }
    r_fail(x, at, "'%s' object has no method '%s'", type_name(obj), name);
}

static jv kw_dict(rx *x, const node *at, const args *a, int type) {
    jv r = {type, {0}};
    r.u.d = d_new(&x->c);
    for (int i = 0; i < a->n; i++) {
        if (!a->kw || !a->kw[i]) {
            if (a->v[i].t != V_DICT) r_fail(x, at, "expected keyword arguments or a dict");
            for (size_t k = 0; k < a->v[i].u.d->n; k++)
                d_set(&x->c, r.u.d, a->v[i].u.d->k[k], a->v[i].u.d->v[k]);
            continue;
        }
        d_set(&x->c, r.u.d, v_str(s_cstr(&x->c, a->kw[i], M_TPL)), a->v[i]);
    }
    return r;
}

static jv call_global(rx *x, const node *at, int g, const args *a) {
    const jv *p0 = arg(a, 0, NULL);
    switch (g) {
    case G_RAISE:
        r_fail(x, at, "template error: %s", p0 ? to_str(x, p0)->p : "raise_exception called");
    case G_STRFTIME: {
        jstr *fmt = arg_str(x, at, p0, "strftime_now's format");
        if (fmt->n > 128 || strlen(fmt->p) != fmt->n) r_fail(x, at, "strftime_now: bad format");
        time_t t = (time_t)x->now;
        struct tm tm;
        if (!gmtime_r(&t, &tm)) r_fail(x, at, "strftime_now: time out of range");
        char buf[4096];     /* 128 format bytes expand to far less */
        /* The format is the template's; strftime reads only tm through it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = fmt->n ? strftime(buf, sizeof buf, fmt->p, &tm) : 0;
#pragma GCC diagnostic pop
        if (n == 0) buf[0] = '\0';
        return v_str(s_from(&x->c, buf, n, M_TPL));
    }
    case G_NAMESPACE: return kw_dict(x, at, a, V_NS);
    case G_DICT: return kw_dict(x, at, a, V_DICT);
    case G_RANGE: {
        int np = n_positional(a);
        for (int i = 0; i < np; i++)
            if (arg(a, i, NULL)->t != V_INT) r_fail(x, at, "range: arguments must be integers");
        if (np < 1 || np > 3) r_fail(x, at, "range takes 1 to 3 arguments");
        int64_t st = np >= 2 ? arg(a, 0, NULL)->u.i : 0, en = arg(a, np >= 2 ? 1 : 0, NULL)->u.i;
        int64_t sp = np == 3 ? arg(a, 2, NULL)->u.i : 1;
        if (sp == 0) r_fail(x, at, "range: step must not be zero");
        double cnt = sp > 0 ? ceil(((double)en - (double)st) / (double)sp)
                            : ceil(((double)st - (double)en) / (double)-sp);
        if (cnt < 0) cnt = 0;
        if (cnt > (double)(x->lim.max_steps - (x->steps < x->lim.max_steps ? x->steps : x->lim.max_steps)))
            r_fail(x, at, "range too large for the step limit");
        x->steps += (uint64_t)cnt;
        jlist *l = l_new(&x->c, (size_t)cnt);
        for (size_t i = 0; i < (size_t)cnt; i++) {
            int64_t off, v;
            if (__builtin_mul_overflow((int64_t)i, sp, &off) || __builtin_add_overflow(st, off, &v))
                r_fail(x, at, "range: integer overflow");
            if (sp > 0 ? v >= en : v <= en) {   /* the double count was one too many */
                cnt = (double)i;
                break;
            }
            l->v[i] = v_int(v);
        }
        l->n = (size_t)cnt;
        return v_list(l);
    }
    default: r_fail(x, at, "unknown function");
    }
}

static int exec_list(rx *x, const nlist *b, frame *f);

static jv call_macro(rx *x, const node *at, const jmacro *m, const args *a) {
    const node *d = m->def;
    if (x->depth >= x->lim.max_depth)
        r_fail(x, at, "macro calls nested deeper than %d", x->lim.max_depth);
    frame *f = f_new(x, m->fr);
    int np = n_positional(a);
    if (np > d->n_targets) r_fail(x, at, "macro '%s' takes %d arguments, got %d", d->name, d->n_targets, np);
    for (int i = 0; i < a->n; i++) {
        if (!a->kw || !a->kw[i]) continue;
        int found = 0;
        for (int k = 0; k < d->n_targets; k++) found |= !strcmp(d->targets[k], a->kw[i]);
        if (!found) r_fail(x, at, "macro '%s' has no parameter '%s'", d->name, a->kw[i]);
    }
    for (int k = 0; k < d->n_targets; k++) {
        const jv *v = arg(a, k, d->targets[k]);
        f_set(x, f, d->targets[k], v ? *v : d->alt.v[k] ? eval(x, d->alt.v[k], f)
                                                           : undef_named(d->targets[k]));
    }
    obuf cap = {0}, *saved = x->o;
    x->o = &cap;
    x->depth++;
    exec_list(x, &d->kids, f);
    x->depth--;
    x->o = saved;
    jstr *r = s_new(&x->c, cap.n);
    if (cap.n) {
        memcpy(r->p, cap.p, cap.n);
        memcpy(r->m, cap.m, cap.n);
    }
    return v_str(r);
}

/* ---- evaluation -------------------------------------------------------------- */

static jv eval_call(rx *x, const node *e, frame *f) {
    const node *callee = e->a;
    if (callee->k == E_ATTR) {
        jv obj = eval(x, callee->a, f);
        args a = eval_args(x, e, f);
        return call_method(x, e, &obj, callee->name, e->op, &a);
    }
    jv fn = eval(x, callee, f);
    args a = eval_args(x, e, f);
    if (fn.t == V_MACRO) return call_macro(x, e, fn.u.mac, &a);
    if (fn.t == V_FUNC) return call_global(x, e, fn.u.fn, &a);
    if (fn.t == V_UNDEF) r_fail(x, e, "'%s' is undefined", callee->name);
    r_fail(x, e, "'%s' object is not callable", type_name(&fn));
}

static jv eval(rx *x, const node *e, frame *f) {
    step(x, e);
    switch (e->k) {
    case E_LIT: return e->lit;
    case E_NAME: return f_get(f, e->name);
    case E_ATTR: {
        jv o = eval(x, e->a, f);
        return get_attr(x, e, &o, e->name);
    }
    case E_ITEM: {
        jv o = eval(x, e->a, f), k = eval(x, e->b, f);
        return get_item(x, e, &o, &k);
    }
    case E_SLICE: {
        jv o = eval(x, e->a, f), pv[3];
        const jv *pp[3];
        for (int i = 0; i < 3; i++) {
            pp[i] = NULL;
            if (e->kids.v[i]) {
                pv[i] = eval(x, e->kids.v[i], f);
                pp[i] = &pv[i];
            }
        }
        return do_slice(x, e, &o, pp);
    }
    case E_CALL: return eval_call(x, e, f);
    case E_FILTER: {
        jv v = eval(x, e->a, f);
        args a = eval_args(x, e, f);
        return apply_filter(x, e, e->op, &v, &a);
    }
    case E_TEST: {
        jv v = eval(x, e->a, f);
        args a = eval_args(x, e, f);
        return v_bool(run_test(x, e, e->op, &v, &a) != e->neg);
    }
    case E_BIN: {
        jv a = eval(x, e->a, f), b = eval(x, e->b, f);
        return arith(x, e, e->op, &a, &b);
    }
    case E_CMP: {
        jv l = eval(x, e->a, f);
        for (int i = 0; i < e->kids.n; i++) {
            jv r = eval(x, e->kids.v[i], f);
            if (!compare(x, e, e->ops[i], &l, &r)) return v_bool(0);
            l = r;
        }
        return v_bool(1);
    }
    case E_AND: {
        jv a = eval(x, e->a, f);
        return truthy(&a) ? eval(x, e->b, f) : a;
    }
    case E_OR: {
        jv a = eval(x, e->a, f);
        return truthy(&a) ? a : eval(x, e->b, f);
    }
    case E_NOT: {
        jv a = eval(x, e->a, f);
        return v_bool(!truthy(&a));
    }
    case E_NEG:
    case E_POS: {
        jv a = eval(x, e->a, f);
        if (a.t == V_FLOAT) return v_float(e->k == E_NEG ? -a.u.f : a.u.f);
        if (a.t != V_INT && a.t != V_BOOL) r_fail(x, e, "bad operand type for unary %c: '%s'",
                                                  e->k == E_NEG ? '-' : '+', type_name(&a));
        if (e->k == E_NEG && a.u.i == INT64_MIN) r_fail(x, e, "integer overflow");
        return v_int(e->k == E_NEG ? -a.u.i : a.u.i);
    }
    case E_COND: {
        jv c = eval(x, e->b, f);
        if (truthy(&c)) return eval(x, e->a, f);
        return e->c ? eval(x, e->c, f) : undef_named(NULL);
    }
    case E_LIST: {
        jlist *l = l_new(&x->c, (size_t)e->kids.n);
        for (int i = 0; i < e->kids.n; i++) l->v[i] = eval(x, e->kids.v[i], f);
        l->n = (size_t)e->kids.n;
        return v_list(l);
    }
    case E_DICT: {
        jv d = {V_DICT, {0}};
        d.u.d = d_new(&x->c);
        for (int i = 0; i < e->kids.n; i++) {
            jv k = eval(x, e->kids.v[i], f);
            if (k.t == V_LIST || k.t == V_DICT || k.t == V_NS || k.t == V_UNDEF)
                r_fail(x, e, "unhashable dict key of type '%s'", type_name(&k));
            d_set(&x->c, d.u.d, k, eval(x, e->alt.v[i], f));
        }
        return d;
    }
    default: r_fail(x, e, "not an expression");
    }
}

/* ---- statements -------------------------------------------------------------- */

static void emit(rx *x, const jstr *s) { o_put(x, x->o, s->p, s->m, s->n); }

static void bind_targets(rx *x, const node *at, frame *f, const char *const *tg, int n, const jv *v) {
    if (n == 1) {
        f_set(x, f, tg[0], *v);
        return;
    }
    if (v->t != V_LIST) r_fail(x, at, "cannot unpack a %s into %d names", type_name(v), n);
    if (v->u.l->n != (size_t)n)
        r_fail(x, at, "expected %d values to unpack, got %zu", n, v->u.l->n);
    for (int i = 0; i < n; i++) f_set(x, f, tg[i], v->u.l->v[i]);
}

/* Each iteration runs in a fresh frame under f, as Jinja2 compiles loops:
 * a set inside the body is gone after the loop and, read before it is set,
 * an iteration sees the enclosing value, not the previous iteration's. */
static void exec_for(rx *x, const node *s, frame *f) {
    jv it = eval(x, s->a, f);
    size_t n;
    jv *items = iterate(x, s, &it, &n);
    /* One frame, emptied per iteration: fresh scope without an allocation
     * per iteration. */
    frame *lf = f_new(x, f);
    if (s->b) {                     /* the filter runs first: loop.length counts kept items */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            frame *tf = lf;
            tf->n = 0;
            bind_targets(x, s, tf, s->targets, s->n_targets, &items[i]);
            jv keep = eval(x, s->b, tf);
            if (truthy(&keep)) items[k++] = items[i];
        }
        n = k;
    }
    jloop *lp = c_alloc(&x->c, sizeof *lp);
    *lp = (jloop){0, n, items};
    jv lv = {V_LOOP, {0}};
    lv.u.lp = lp;
    for (size_t i = 0; i < n; i++) {
        step(x, s);
        lf->n = 0;
        lp->i = i;
        f_set(x, lf, "loop", lv);
        bind_targets(x, s, lf, s->targets, s->n_targets, &items[i]);
        if (exec_list(x, &s->kids, lf) == FL_BREAK) break;
    }
    if (n == 0) exec_list(x, &s->alt, f);
}

static void exec_set(rx *x, const node *s, frame *f) {
    jv v;
    if (s->op) {                     /* {% set x %}...{% endset %} */
        obuf cap = {0}, *saved = x->o;
        x->o = &cap;
        exec_list(x, &s->kids, f);
        x->o = saved;
        jstr *r = s_new(&x->c, cap.n);
        if (cap.n) {
            memcpy(r->p, cap.p, cap.n);
            memcpy(r->m, cap.m, cap.n);
        }
        v = v_str(r);
    } else {
        v = eval(x, s->a, f);
    }
    if (s->attr) {
        jv ns = f_get(f, s->name);
        if (ns.t != V_NS)
            r_fail(x, s, "cannot set '%s.%s': '%s' is not a namespace", s->name, s->attr, s->name);
        d_set(&x->c, ns.u.d, v_str(s_cstr(&x->c, s->attr, M_TPL)), v);
        return;
    }
    bind_targets(x, s, f, s->targets, s->n_targets, &v);
}

static int exec_stmt(rx *x, const node *s, frame *f) {
    step(x, s);
    switch (s->k) {
    case S_TEXT: emit(x, s->lit.u.s); return FL_NORMAL;
    case S_OUT: {
        jv v = eval(x, s->a, f);
        emit(x, to_str(x, &v));
        return FL_NORMAL;
    }
    case S_IF: {
        jv c = eval(x, s->a, f);
        return exec_list(x, truthy(&c) ? &s->kids : &s->alt, f);
    }
    case S_FOR: exec_for(x, s, f); return FL_NORMAL;
    case S_SET: exec_set(x, s, f); return FL_NORMAL;
    case S_MACRO: {
        jmacro *m = c_alloc(&x->c, sizeof *m);
        m->def = s;
        m->fr = f;
        jv v = {V_MACRO, {0}};
        v.u.mac = m;
        f_set(x, f, s->name, v);
        return FL_NORMAL;
    }
    case S_BREAK: return FL_BREAK;
    case S_CONTINUE: return FL_CONTINUE;
    case S_DO: eval(x, s->a, f); return FL_NORMAL;
    case S_BLOCK: return exec_list(x, &s->kids, f);
    default: r_fail(x, s, "not a statement");
    }
}

static int exec_list(rx *x, const nlist *b, frame *f) {
    for (int i = 0; i < b->n; i++) {
        int fl = exec_stmt(x, b->v[i], f);
        if (fl != FL_NORMAL) return fl;
    }
    return FL_NORMAL;
}

/* ---- entry point ------------------------------------------------------------- */

static jv from_json(rx *x, const cJSON *j, int mask, int depth) {
    if (depth > 256) r_fail(x, NULL, "request data nested too deeply");
    if (cJSON_IsNull(j)) return v_none();
    if (cJSON_IsTrue(j)) return v_bool(1);
    if (cJSON_IsFalse(j)) return v_bool(0);
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9.007199254740992e15) return v_int((int64_t)d);
        return v_float(d);
    }
    if (cJSON_IsString(j)) return v_str(s_cstr(&x->c, j->valuestring ? j->valuestring : "", mask));
    if (cJSON_IsArray(j)) {
        jlist *l = l_new(&x->c, 4);
        for (const cJSON *c = j->child; c; c = c->next) l_push(&x->c, l, from_json(x, c, mask, depth + 1));
        return v_list(l);
    }
    if (cJSON_IsObject(j)) {
        jv d = {V_DICT, {0}};
        d.u.d = d_new(&x->c);
        for (const cJSON *c = j->child; c; c = c->next)
            d_set(&x->c, d.u.d, v_str(s_cstr(&x->c, c->string ? c->string : "", mask)),
                  from_json(x, c, mask, depth + 1));
        return d;
    }
    return v_none();
}

static int known_role(const char *r) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
    return in_list(roles, r);
}

static jv from_msgs(rx *x, const jj_msg *m, int n) {
    jlist *l = l_new(&x->c, (size_t)n);
    for (int i = 0; i < n; i++) {
        if (!m[i].role || (!m[i].content && m[i].content_len))
            r_fail(x, NULL, "message %d has no role or no content", i);
        jv d = {V_DICT, {0}};
        d.u.d = d_new(&x->c);
        d_set(&x->c, d.u.d, v_str(s_cstr(&x->c, "role", M_TPL)),
              v_str(s_cstr(&x->c, m[i].role, known_role(m[i].role) ? M_TPL : M_DATA)));
        d_set(&x->c, d.u.d, v_str(s_cstr(&x->c, "content", M_TPL)),
              v_str(s_from(&x->c, m[i].content, m[i].content_len, M_DATA)));
        l_push(&x->c, l, d);
    }
    return v_list(l);
}

static void bind_input(rx *x, const jj_input *in) {
    frame *root = x->root;
    if (in->data) {
        if (!cJSON_IsObject(in->data)) r_fail(x, NULL, "template data must be a JSON object");
        for (const cJSON *c = in->data->child; c; c = c->next) {
            if (!c->string) continue;
            char *nm = c_alloc(&x->c, strlen(c->string) + 1);
            strcpy(nm, c->string);
            f_set(x, root, nm, from_json(x, c, M_DATA, 0));
        }
    }
    for (const char *const *t = in->trusted; t && t[0] && t[1]; t += 2) {
        char *nm = c_alloc(&x->c, strlen(t[0]) + 1);
        strcpy(nm, t[0]);
        f_set(x, root, nm, v_str(s_cstr(&x->c, t[1], M_TPL)));
    }
    if (in->msgs) f_set(x, root, "messages", from_msgs(x, in->msgs, in->n_msgs));
    f_set(x, root, "add_generation_prompt", v_bool(in->add_generation_prompt));
}

/* The template ranges of the output, merged. */
static int make_spans(const obuf *o, jj_span **spans, size_t *n_spans) {
    size_t n = 0;
    for (size_t i = 0; i < o->n; i++)
        if (o->m[i] == M_TPL && (i == 0 || o->m[i - 1] != M_TPL)) n++;
    *spans = NULL;
    *n_spans = 0;
    if (!n) return 0;
    jj_span *s = malloc(n * sizeof *s);
    if (!s) return TS_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < o->n;) {
        if (o->m[i] != M_TPL) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < o->n && o->m[j] == M_TPL) j++;
        s[k++] = (jj_span){i, j - i};
        i = j;
    }
    *spans = s;
    *n_spans = n;
    return 0;
}

int jj_render(const jj_tpl *t, const jj_input *in, char **out, size_t *len,
              jj_span **spans, size_t *n_spans, char *err, size_t errlen) {
    *out = NULL;
    *len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (!t || !in) return err_set(err, errlen, TS_ERR_INVAL, "no template or no input");
    rx *x = calloc(1, sizeof *x);
    if (!x) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    x->lim = in->lim ? *in->lim : (jj_limits){0};
    if (!x->lim.max_output) x->lim.max_output = JJ_MAX_OUTPUT;
    if (!x->lim.max_memory) x->lim.max_memory = JJ_MAX_MEMORY;
    if (!x->lim.max_steps) x->lim.max_steps = JJ_MAX_STEPS;
    if (!x->lim.max_depth) x->lim.max_depth = JJ_MAX_DEPTH;
    x->ar.cap = x->lim.max_memory;
    x->c.ar = &x->ar;
    x->c.err = err;
    x->c.errlen = errlen;
    x->c.mem_is_cap = 1;
    x->now = in->now;
    x->top.heap = 1;
    x->o = &x->top;
    if (setjmp(x->c.jb)) {
        int rc = x->c.rc;
        free(x->top.p);
        free(x->top.m);
        ar_free(&x->ar);
        free(x);
        return rc;
    }
    x->root = f_new(x, NULL);
    bind_input(x, in);
    exec_list(x, &t->body, x->root);
    int rc = 0;
    if (spans) rc = make_spans(&x->top, spans, n_spans);
    if (!rc && !x->top.p) {
        x->top.p = malloc(1);
        if (!x->top.p) rc = TS_ERR_NOMEM;
        else x->top.p[0] = '\0';
    }
    if (rc) {
        free(x->top.p);
        x->top.p = NULL;
        err_set(err, errlen, rc, "out of memory");
    }
    *out = x->top.p;
    *len = rc ? 0 : x->top.n;
    free(x->top.m);
    ar_free(&x->ar);
    free(x);
    return rc;
}
