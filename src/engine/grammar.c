/*
 * grammar.c - the rule builder, the token trie, and the recogniser that
 * masks logits (see grammar.h for the contract).
 *
 * Recogniser. A position in the grammar is a stack: the element to match
 * next on top, below it where to continue when the top's rule ends. Stacks
 * are nodes (elem, parent) in a per-state arena, hash-consed, so equal
 * stacks are one node id and a set of stacks is a short array of ids.
 * Every stack in a set has a byte class on top (references are expanded
 * eagerly, a finished rule pops at once) or is the empty stack ACCEPT: the
 * output so far is complete. Consuming a byte keeps the stacks whose class
 * holds it and expands what follows. A continuation that is the end of an
 * alternative is never pushed (its parent is used instead), so right
 * recursion such as "chars ::= char chars | '\"'" runs in constant stack.
 *
 * Masks walk the vocabulary trie depth first from the current set; each
 * edge consumes one byte, and nodes created below a trie node are rolled
 * back when the walk returns (the hash table is linear probing, and removing
 * entries in reverse order of insertion restores it exactly). A byte that
 * no stack's class holds prunes the whole subtree before any work.
 */
#include "grammar_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define GR_ACCEPT (-1)          /* the empty stack in a set */
#define GR_SET_MAX 1024         /* stacks in one set (ambiguous regexes need hundreds) */
#define GR_NODES_CAP (1 << 15)  /* arena nodes per state */
#define GR_HASH_CAP (1 << 16)   /* hash slots per state (power of two, twice the nodes) */
#define GR_WALK_CAP (1 << 16)   /* stack ids on the slow walk's set stack */
#define GR_PUSH_DEPTH 1024      /* expansions without consuming a byte (schemas nest 64 deep) */
#define GR_CACHE_N 16           /* masks cached per state */
#define GR_KEY_MAX 512          /* int32s of a cached state's key */
#define GR_PUSH_BUDGET 100000   /* expansions per consumed byte, against nested nullable loops */
#define GR_MASK_WORK 4000000    /* expansions one mask may spend (~0.1 s): a hostile regex
                                 * gets a truncated, still safe, mask instead of a stalled step */
#define GR_SEEN_CAP 4096        /* expansions remembered per consumed byte (power of two) */
#define GR_DFA_MAX 512          /* sets of the lazily built set automaton (fits int16) */
#define GR_DFA_POOL (1 << 15)   /* node ids those sets hold */
#define GR_DFA_HASH 1024        /* hash slots over them (power of two) */

/* ---- builder ------------------------------------------------------------------ */

static int grow(void **p, int32_t *cap, int32_t need, size_t elsize) {
    if (need <= *cap) return 0;
    int32_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * elsize);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

void gr__b_init(gr__b *b) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 16; i++) b->memo[i] = -1;
}

void gr__b_deinit(gr__b *b) {
    free(b->elems);
    free(b->alts);
    free(b->sets);
    gr__b_init(b);
}

int32_t gr__rule_new(gr__b *b) {
    if (b->n_rules >= GR_MAX_RULES) {
        b->too_big = 1;
        return 0;
    }
    return b->n_rules++;
}

static void alt_add_elems(gr__b *b, int32_t r, const gr__elem *e, int32_t n) {
    if (b->oom || b->too_big) return;
    if (n >= GR_MAX_ELEMS - b->n_elems) {
        b->too_big = 1;
        return;
    }
    if (grow((void **)&b->elems, &b->cap_elems, b->n_elems + n + 1, sizeof *b->elems) ||
        grow((void **)&b->alts, &b->cap_alts, b->n_alts + 1, sizeof *b->alts)) {
        b->oom = 1;
        return;
    }
    b->alts[b->n_alts++] = (gr__alt){r, b->n_elems};
    if (n) memcpy(b->elems + b->n_elems, e, (size_t)n * sizeof *e);
    b->n_elems += n;
    b->elems[b->n_elems++] = (gr__elem){GR_E_END, 0};
}

void gr__alt_add(gr__b *b, int32_t r, gr__seq *s) {
    alt_add_elems(b, r, s->e, s->n);
    s->n = 0;
}

void gr__alt_empty(gr__b *b, int32_t r) { alt_add_elems(b, r, NULL, 0); }

void gr__seq_free(gr__seq *s) {
    free(s->e);
    memset(s, 0, sizeof *s);
}

static void seq_push(gr__b *b, gr__seq *s, gr__elem e) {
    if (b->oom || b->too_big) return;
    if (s->n >= GR_MAX_ELEMS) {
        b->too_big = 1;
        return;
    }
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        b->oom = 1;
        return;
    }
    s->e[s->n++] = e;
}

void gr__set_range(gr__set *s, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi && c < 256; c++) gr__set_add(s, c);
}

void gr__seq_set(gr__b *b, gr__seq *s, const gr__set *set) {
    int32_t i;
    for (i = 0; i < b->n_sets; i++)
        if (!memcmp(&b->sets[i], set, sizeof *set)) break;
    if (i == b->n_sets) {
        if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
            b->oom = 1;
            return;
        }
        b->sets[b->n_sets++] = *set;
    }
    seq_push(b, s, (gr__elem){GR_E_CHAR, i});
}

void gr__seq_range(gr__b *b, gr__seq *s, uint8_t lo, uint8_t hi) {
    gr__set set = {{0}};
    gr__set_range(&set, lo, hi);
    gr__seq_set(b, s, &set);
}

void gr__seq_byte(gr__b *b, gr__seq *s, uint8_t c) { gr__seq_range(b, s, c, c); }

void gr__seq_lit(gr__b *b, gr__seq *s, const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) gr__seq_byte(b, s, (uint8_t)text[i]);
}

void gr__seq_ref(gr__b *b, gr__seq *s, int32_t rule) { seq_push(b, s, (gr__elem){GR_E_REF, rule}); }

void gr__seq_cat(gr__b *b, gr__seq *s, const gr__seq *src) {
    for (int32_t i = 0; i < src->n; i++) seq_push(b, s, src->e[i]);
}

int32_t gr__rule_utf8_multi(gr__b *b) {
    enum { MEMO_UTF8 = 15 };
    if (b->memo[MEMO_UTF8] >= 0) return b->memo[MEMO_UTF8];
    int32_t r = gr__rule_new(b);
    b->memo[MEMO_UTF8] = r;
    /* The valid forms exactly (Unicode table 3-7): no overlongs, no
     * surrogates, nothing above U+10FFFF. */
    static const uint8_t forms[][4][2] = {
        {{0xc2, 0xdf}, {0x80, 0xbf}, {0, 0}, {0, 0}},
        {{0xe0, 0xe0}, {0xa0, 0xbf}, {0x80, 0xbf}, {0, 0}},
        {{0xe1, 0xec}, {0x80, 0xbf}, {0x80, 0xbf}, {0, 0}},
        {{0xed, 0xed}, {0x80, 0x9f}, {0x80, 0xbf}, {0, 0}},
        {{0xee, 0xef}, {0x80, 0xbf}, {0x80, 0xbf}, {0, 0}},
        {{0xf0, 0xf0}, {0x90, 0xbf}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xf1, 0xf3}, {0x80, 0xbf}, {0x80, 0xbf}, {0x80, 0xbf}},
        {{0xf4, 0xf4}, {0x80, 0x8f}, {0x80, 0xbf}, {0x80, 0xbf}},
    };
    gr__seq s = {0};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        for (int k = 0; k < 4 && forms[f][k][0]; k++) gr__seq_range(b, &s, forms[f][k][0], forms[f][k][1]);
        gr__alt_add(b, r, &s);
    }
    gr__seq_free(&s);
    return r;
}

/* ---- compiled grammar ----------------------------------------------------------- */

struct gr_grammar {
    const gr_vocab *v;
    gr__elem *elems;            /* (n_elems) */
    int32_t n_elems;
    int32_t *alt_start;         /* (n_alts) first element of each alternative, by rule */
    int32_t *rule_alt0;         /* (n_rules + 1) rule r's alternatives: alt_start[rule_alt0[r] ..
                                 * rule_alt0[r + 1]) */
    int32_t n_rules;
    gr__set *sets;              /* (n_sets) */
    int32_t n_sets;
    int32_t root;
};

int gr__build(gr__b *b, int32_t root, const gr_vocab *v, gr_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    if (b->too_big)
        return err_set(err, errlen, TS_ERR_INVAL, "grammar too large (more than %d rules or %d elements)",
                       GR_MAX_RULES, GR_MAX_ELEMS);
    if (b->oom) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory compiling the grammar");
    gr_grammar *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    g->alt_start = malloc(((size_t)b->n_alts + 1) * sizeof *g->alt_start);
    g->rule_alt0 = calloc((size_t)b->n_rules + 2, sizeof *g->rule_alt0);
    if (!g->alt_start || !g->rule_alt0) {
        gr_free(g);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    /* Counting sort of the alternatives by rule, stable: alternatives keep
     * the order they were added in, which is the order tried (it does not
     * change the language, only the order of stacks in a set). */
    for (int32_t i = 0; i < b->n_alts; i++) g->rule_alt0[b->alts[i].rule + 1]++;
    for (int32_t r = 0; r < b->n_rules; r++) g->rule_alt0[r + 1] += g->rule_alt0[r];
    int32_t *fill = calloc((size_t)b->n_rules + 1, sizeof *fill);
    if (!fill) {
        gr_free(g);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < b->n_alts; i++) {
        int32_t r = b->alts[i].rule;
        g->alt_start[g->rule_alt0[r] + fill[r]++] = b->alts[i].start;
    }
    free(fill);
    g->elems = b->elems;
    g->n_elems = b->n_elems;
    g->sets = b->sets;
    g->n_sets = b->n_sets;
    g->n_rules = b->n_rules;
    g->root = root;
    g->v = v;
    b->elems = NULL;
    b->sets = NULL;
    gr__b_deinit(b);
    *out = g;
    return 0;
}

void gr_free(gr_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->alt_start);
    free(g->rule_alt0);
    free(g->sets);
    free(g);
}

/* ---- vocabulary trie ------------------------------------------------------------- */

typedef struct gr_tnode {
    uint32_t tok_lo, tok_hi;    /* order[tok_lo .. tok_hi): tokens whose piece ends here */
    uint32_t child_lo;          /* first child node */
    uint16_t n_child;
    uint8_t byte;               /* the edge into this node */
} gr_tnode;

struct gr_vocab {
    const tok *t;
    int32_t n_vocab;
    int32_t eos;                /* -1 if none */
    char *bytes;                /* every piece, concatenated */
    uint32_t *off;              /* (n_vocab + 1) piece i is bytes[off[i] .. off[i + 1]) */
    uint8_t *usable;            /* (n_vocab) 1: may be produced under a grammar */
    int32_t *order;             /* usable tokens sorted by piece */
    gr_tnode *nodes;            /* trie, node 0 the root */
    uint32_t n_nodes;
    uint32_t max_len;           /* longest usable piece */
};

static int cmp_piece(const void *a, const void *b, void *ctx) {
    const gr_vocab *sort_v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_v->off[x + 1] - sort_v->off[x], ly = sort_v->off[y + 1] - sort_v->off[y];
    int c = memcmp(sort_v->bytes + sort_v->off[x], sort_v->bytes + sort_v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Fill node ni for order[lo .. hi), whose pieces share their first depth bytes. */
static void trie_fill(gr_vocab *v, uint32_t ni, uint32_t lo, uint32_t hi, uint32_t depth) {
    uint32_t e = lo;
    while (e < hi && v->off[v->order[e] + 1] - v->off[v->order[e]] == depth) e++;
    v->nodes[ni].tok_lo = lo;
    v->nodes[ni].tok_hi = e;
    uint32_t n = 0;
    for (uint32_t i = e; i < hi;) {
        uint8_t c = (uint8_t)v->bytes[v->off[v->order[i]] + depth];
        while (i < hi && (uint8_t)v->bytes[v->off[v->order[i]] + depth] == c) i++;
        n++;
    }
    uint32_t first = v->n_nodes;
    v->n_nodes += n;
    v->nodes[ni].child_lo = first;
    v->nodes[ni].n_child = (uint16_t)n;
    uint32_t k = 0;
    for (uint32_t i = e; i < hi; k++) {
        uint8_t c = (uint8_t)v->bytes[v->off[v->order[i]] + depth];
        uint32_t j = i;
        while (j < hi && (uint8_t)v->bytes[v->off[v->order[j]] + depth] == c) j++;
        v->nodes[first + k].byte = c;
        trie_fill(v, first + k, i, j, depth + 1);
        i = j;
    }
}

void gr_vocab_free(gr_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->usable);
    free(v->order);
    free(v->nodes);
    free(v);
}

int gr_vocab_n(const gr_vocab *v) { return v ? v->n_vocab : 0; }

static int vocab_pieces(gr_vocab *v) {
    size_t cap = tok_piece_max(v->t) + 1, total = 0;
    char *buf = malloc(cap);
    v->off = malloc(((size_t)v->n_vocab + 1) * sizeof *v->off);
    v->usable = calloc((size_t)v->n_vocab, 1);
    if (!buf || !v->off || !v->usable) goto err;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        int n = tok_decode(v->t, i, buf, cap);
        if (n < 0) goto err;
        total += (size_t)n;
    }
    if (total > UINT32_MAX - 1) goto err;
    v->bytes = malloc(total + 1);
    if (!v->bytes) goto err;
    uint32_t at = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        int n = tok_decode(v->t, i, v->bytes + at, total + 1 - at);
        int ty = tok_type(v->t, i);
        v->off[i] = at;
        at += (uint32_t)n;
        /* Control, unused and unknown tokens never carry output text (the
         * unknown token's U+2585 is a stand-in, not what the model meant). */
        v->usable[i] = n > 0 && ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_UNUSED && ty != TOK_TYPE_UNKNOWN;
        if ((uint32_t)n > v->max_len && v->usable[i]) v->max_len = (uint32_t)n;
    }
    v->off[v->n_vocab] = at;
    free(buf);
    return 0;
err:
    free(buf);
    return TS_ERR_NOMEM;
}

int gr_vocab_new(const tok *t, gr_vocab **out) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!t || tok_n_vocab(t) <= 0) return TS_ERR_INVAL;
    gr_vocab *v = calloc(1, sizeof *v);
    if (!v) return TS_ERR_NOMEM;
    v->t = t;
    v->n_vocab = tok_n_vocab(t);
    v->eos = tok_eos(t);
    int rc = vocab_pieces(v);
    if (rc) goto err;
    rc = TS_ERR_NOMEM;
    v->order = malloc((size_t)v->n_vocab * sizeof *v->order);
    if (!v->order) goto err;
    uint32_t n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->usable[i]) v->order[n++] = i;
    qsort_r(v->order, n, sizeof *v->order, cmp_piece, v);
    v->nodes = calloc((size_t)v->off[v->n_vocab] + 1, sizeof *v->nodes);
    if (!v->nodes) goto err;
    v->n_nodes = 1;
    trie_fill(v, 0, 0, n, 0);
    *out = v;
    return 0;
err:
    gr_vocab_free(v);
    return rc;
}

/* ---- states --------------------------------------------------------------------- */

typedef struct gr_node {
    int32_t elem;               /* element to match next (CHAR), or a continuation (CHAR/REF) */
    int32_t parent;             /* node below, -1 for the bottom */
} gr_node;

/* A set of stacks as a state of the set automaton. */
typedef struct gr_dset {
    int32_t off, n;             /* its node ids: dpool[off .. off + n) */
    uint64_t hash;
    gr__set u;                  /* bytes some stack of it can take */
} gr_dset;

typedef struct gr_centry {
    uint64_t hash;
    int32_t key_n;              /* -1: empty */
    int32_t n_allowed;
    int32_t key[GR_KEY_MAX];
    uint64_t *bits;             /* (n_vocab / 64 + 1) allowed tokens */
} gr_centry;

struct gr_state {
    const gr_grammar *g;
    const gr_vocab *v;
    gr_node *nodes;             /* (GR_NODES_CAP) the arena */
    int32_t n_nodes;
    int32_t *hslot;             /* (GR_HASH_CAP) node id or -1 */
    int32_t *ulog;              /* (GR_NODES_CAP) slot each node was inserted at */
    int32_t cur[GR_SET_MAX];    /* the current set */
    int32_t n_cur;
    int32_t tmp[2][GR_SET_MAX]; /* scratch sets for accept */
    int32_t *walk;              /* (GR_WALK_CAP) the trie walk's stack of sets */
    uint64_t *bits;             /* (n_vocab / 64 + 1) mask being computed */
    int32_t key[GR_KEY_MAX];
    gr_centry cache[GR_CACHE_N];
    int32_t cache_next;         /* round-robin victim */
    int32_t end_ids[GR_MAX_END]; /* tokens that end the output like EOS */
    int32_t n_end;
    int finished;               /* EOS accepted */
    int overflow;               /* a set or the arena overflowed in the last advance */
    int32_t budget;             /* expansions left for this byte */
    /* Expansions already made for this byte: push(pos, parent) adds the
     * same stacks every time, so a second visit is skipped. This is what
     * keeps nested nullable loops such as (a*)* linear, and cuts a rule
     * that reaches itself without consuming a byte. */
    uint64_t *seen_key;         /* (GR_SEEN_CAP) (pos, parent) */
    uint32_t *seen_gen;         /* (GR_SEEN_CAP) valid when equal to seen_now */
    uint32_t seen_now;
    int32_t seen_n;
    int64_t work;               /* expansions made by the current mask */
    uint32_t *in_set;           /* (GR_NODES_CAP) seen_now: the node is in the set being built */
    uint32_t accept_in;         /* seen_now: ACCEPT is in it */
    /* The set automaton (see gr_state_mask): valid while node ids are, so
     * emptied whenever compact() renumbers them. */
    gr_dset *dsets;             /* (GR_DFA_MAX) */
    int32_t n_dsets;
    int32_t *dpool;             /* (GR_DFA_POOL) */
    int32_t dpool_used;
    int16_t *dhash;             /* (GR_DFA_HASH) set index or -1 */
    int16_t *dtrans;            /* (GR_DFA_MAX, 256) next set; -1 none, -2 not computed yet */
    int32_t dscratch[GR_SET_MAX];
    int arena_full;             /* intern found the arena full */
    gr_stats stats;
};

static uint32_t node_hash(int32_t elem, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)elem << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 40);
}

/* The node (elem, parent), created if new; -1 when the arena is full. */
static int32_t intern(gr_state *s, int32_t elem, int32_t parent) {
    uint32_t h = node_hash(elem, parent) & (GR_HASH_CAP - 1);
    for (;;) {
        int32_t id = s->hslot[h];
        if (id < 0) break;
        if (s->nodes[id].elem == elem && s->nodes[id].parent == parent) return id;
        h = (h + 1) & (GR_HASH_CAP - 1);
    }
    if (s->n_nodes >= GR_NODES_CAP) {
        s->arena_full = 1;
        return -1;
    }
    int32_t id = s->n_nodes++;
    s->nodes[id] = (gr_node){elem, parent};
    s->hslot[h] = id;
    s->ulog[id] = (int32_t)h;
    return id;
}

static void rollback(gr_state *s, int32_t mark) {
    while (s->n_nodes > mark) s->hslot[s->ulog[--s->n_nodes]] = -1;
}

/* Start a new advance: new stamps for the seen table and the set being
 * built. On wrap-around the stamps are cleared, so an old one can never
 * pass for new. */
static void seen_next(gr_state *s) {
    if (++s->seen_now == 0) {
        memset(s->seen_gen, 0, GR_SEEN_CAP * sizeof *s->seen_gen);
        memset(s->in_set, 0, GR_NODES_CAP * sizeof *s->in_set);
        s->accept_in = 0;
        s->seen_now = 1;
    }
    s->seen_n = 0;
}

/* Add id to the set being built by the current advance (O(1): a node is
 * in it when its in_set stamp is this advance's). */
static void set_add(gr_state *s, int32_t *out, int32_t *n, int32_t id) {
    if (id < 0) {
        if (s->accept_in == s->seen_now) return;
        s->accept_in = s->seen_now;
    } else {
        if (s->in_set[id] == s->seen_now) return;
        s->in_set[id] = s->seen_now;
    }
    if (*n >= GR_SET_MAX) {
        s->overflow = 1;
        return;
    }
    out[(*n)++] = id;
}

/* Expand "match elems[pos..] then continue with parent" into out. */
static void push(gr_state *s, int32_t pos, int32_t parent, int32_t *out, int32_t *n, int depth) {
    const gr_grammar *g = s->g;
    if (depth > GR_PUSH_DEPTH) return; /* a left-recursive or nullable loop: drop it */
    if (s->seen_n < GR_SEEN_CAP / 2) {
        uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
        uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & (GR_SEEN_CAP - 1);
        for (;; h = (h + 1) & (GR_SEEN_CAP - 1)) {
            if (s->seen_gen[h] != s->seen_now) {
                s->seen_gen[h] = s->seen_now;
                s->seen_key[h] = key;
                s->seen_n++;
                break;
            }
            if (s->seen_key[h] == key) return;
        }
    }
    s->work++;
    if (--s->budget < 0) {
        s->overflow = 1;        /* refuse rather than spend unbounded time */
        return;
    }
    const gr__elem *e = &g->elems[pos];
    if (e->type == GR_E_END) {
        if (parent < 0) {
            set_add(s, out, n, GR_ACCEPT);
            return;
        }
        gr_node p = s->nodes[parent];
        push(s, p.elem, p.parent, out, n, depth + 1);
    } else if (e->type == GR_E_CHAR) {
        int32_t id = intern(s, pos, parent);
        if (id < 0) {
            s->overflow = 1;
            return;
        }
        set_add(s, out, n, id);
    } else {
        int32_t cont = parent;
        if (g->elems[pos + 1].type != GR_E_END) {
            cont = intern(s, pos + 1, parent);
            if (cont < 0) {
                s->overflow = 1;
                return;
            }
        }
        int32_t r = e->arg;
        for (int32_t a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++)
            push(s, g->alt_start[a], cont, out, n, depth + 1);
    }
}

/* The set after consuming byte c from in; returns its size. */
static int32_t advance(gr_state *s, const int32_t *in, int32_t n_in, uint8_t c, int32_t *out) {
    int32_t n = 0;
    s->budget = GR_PUSH_BUDGET;
    seen_next(s);
    for (int32_t i = 0; i < n_in; i++) {
        if (in[i] < 0) continue;
        gr_node nd = s->nodes[in[i]];
        if (gr__set_has(&s->g->sets[s->g->elems[nd.elem].arg], c)) push(s, nd.elem + 1, nd.parent, out, &n, 0);
    }
    return n;
}

static void cache_clear(gr_state *s) {
    for (int i = 0; i < GR_CACHE_N; i++) s->cache[i].key_n = -1;
}

void gr_state_free(gr_state *s) {
    if (!s) return;
    free(s->nodes);
    free(s->hslot);
    free(s->ulog);
    free(s->walk);
    free(s->bits);
    free(s->seen_key);
    free(s->in_set);
    free(s->seen_gen);
    free(s->dsets);
    free(s->dpool);
    free(s->dhash);
    free(s->dtrans);
    for (int i = 0; i < GR_CACHE_N; i++) free(s->cache[i].bits);
    free(s);
}

int gr_state_new(const gr_grammar *g, gr_state **out) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!g) return TS_ERR_INVAL;
    gr_state *s = calloc(1, sizeof *s);
    if (!s) return TS_ERR_NOMEM;
    s->g = g;
    s->v = g->v;
    size_t words = (size_t)s->v->n_vocab / 64 + 1;
    s->nodes = malloc(GR_NODES_CAP * sizeof *s->nodes);
    s->hslot = malloc(GR_HASH_CAP * sizeof *s->hslot);
    s->ulog = malloc(GR_NODES_CAP * sizeof *s->ulog);
    s->walk = malloc(GR_WALK_CAP * sizeof *s->walk);
    s->bits = malloc(words * sizeof *s->bits);
    s->seen_key = malloc(GR_SEEN_CAP * sizeof *s->seen_key);
    s->in_set = calloc(GR_NODES_CAP, sizeof *s->in_set);
    s->seen_gen = calloc(GR_SEEN_CAP, sizeof *s->seen_gen);
    s->dsets = malloc(GR_DFA_MAX * sizeof *s->dsets);
    s->dpool = malloc(GR_DFA_POOL * sizeof *s->dpool);
    s->dhash = malloc(GR_DFA_HASH * sizeof *s->dhash);
    s->dtrans = malloc((size_t)GR_DFA_MAX * 256 * sizeof *s->dtrans);
    int ok = s->nodes && s->hslot && s->ulog && s->walk && s->bits && s->dsets && s->dpool && s->dhash && s->dtrans &&
             s->seen_key && s->seen_gen && s->in_set;
    for (int i = 0; i < GR_CACHE_N && ok; i++) ok = (s->cache[i].bits = malloc(words * sizeof(uint64_t))) != NULL;
    if (!ok) {
        gr_state_free(s);
        return TS_ERR_NOMEM;
    }
    memset(s->hslot, 0xff, GR_HASH_CAP * sizeof *s->hslot);
    memset(s->dhash, 0xff, GR_DFA_HASH * sizeof *s->dhash);
    cache_clear(s);
    /* The start: the root rule's alternatives over the empty stack. */
    int32_t r = g->root;
    s->budget = GR_PUSH_BUDGET;
    seen_next(s);
    for (int32_t a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++)
        push(s, g->alt_start[a], -1, s->cur, &s->n_cur, 0);
    *out = s;
    return 0;
}

int gr_state_can_end(const gr_state *s) {
    if (!s) return 0;
    if (s->finished) return 1;
    for (int32_t i = 0; i < s->n_cur; i++)
        if (s->cur[i] == GR_ACCEPT) return 1;
    return 0;
}

int gr_state_done(const gr_state *s) {
    if (!s) return 1;
    return s->finished || (s->n_cur == 1 && s->cur[0] == GR_ACCEPT) || s->n_cur == 0;
}

/* Consume len bytes from the current set into dst (one of s->tmp); the
 * result's size, 0 when some byte is refused. Nodes stay in the arena. */
static int32_t advance_bytes(gr_state *s, const char *p, uint32_t len, int32_t **dst) {
    const int32_t *in = s->cur;
    int32_t n = s->n_cur, which = 0;
    for (uint32_t i = 0; i < len && n > 0; i++) {
        int32_t *o = s->tmp[which];
        n = advance(s, in, n, (uint8_t)p[i], o);
        in = o;
        which ^= 1;
    }
    *dst = (int32_t *)in;
    return n;
}

static int is_end(const gr_state *s, int32_t id) {
    if (id == s->v->eos) return 1;
    for (int32_t i = 0; i < s->n_end; i++)
        if (s->end_ids[i] == id) return 1;
    return 0;
}

int gr_state_set_end_ids(gr_state *s, const int32_t *ids, int n) {
    if (!s || n < 0 || n > GR_MAX_END || (n > 0 && !ids)) return TS_ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->v->n_vocab) return TS_ERR_TOK_RANGE;
    memcpy(s->end_ids, ids, (size_t)n * sizeof *ids);
    s->n_end = n;
    cache_clear(s);             /* cached masks hold the old end tokens */
    return 0;
}

/* Forward declaration: compact() and the automaton's reset (below). */
static void reset_nodes(gr_state *s);

/* Consume token id's piece from the current set: its size (0: refused),
 * the set in *set, and in *mark the arena size before the token's nodes.
 * Mask walks keep nodes, so the arena is compacted first when it is half
 * full, and once more if it fills during the token. */
static int32_t advance_token(gr_state *s, int32_t id, int32_t **set, int32_t *mark_out) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt || s->n_nodes > GR_NODES_CAP / 2) reset_nodes(s);
        int32_t mark = *mark_out = s->n_nodes;
        s->overflow = 0;
        s->arena_full = 0;
        int32_t n = advance_bytes(s, s->v->bytes + s->v->off[id], s->v->off[id + 1] - s->v->off[id], set);
        if (n > 0 && !s->overflow) return n;
        rollback(s, mark);
        if (!s->arena_full) return 0;
    }
    return 0;
}

int gr_state_allowed(gr_state *s, int32_t id) {
    if (!s || id < 0 || id >= s->v->n_vocab || s->finished) return 0;
    if (is_end(s, id)) return gr_state_can_end(s);
    if (!s->v->usable[id]) return 0;
    int32_t *set, mark;
    int32_t n = advance_token(s, id, &set, &mark);
    rollback(s, mark);
    return n > 0;
}

/* Rebuild the arena holding only the current set's stacks, so it does not
 * grow with the output. Skipped (harmless) when a stack is too deep for the
 * scratch. */
static void compact(gr_state *s) {
    int32_t *chain = s->walk, total = 0, lens[GR_SET_MAX];
    for (int32_t i = 0; i < s->n_cur; i++) {
        lens[i] = 0;
        for (int32_t id = s->cur[i]; id >= 0; id = s->nodes[id].parent) {
            if (total >= GR_WALK_CAP) return;
            chain[total++] = s->nodes[id].elem;
            lens[i]++;
        }
    }
    rollback(s, 0);
    int32_t at = 0;
    for (int32_t i = 0; i < s->n_cur; i++) {
        if (s->cur[i] < 0) continue;
        int32_t parent = -1;
        for (int32_t j = at + lens[i] - 1; j >= at; j--) parent = intern(s, chain[j], parent);
        s->cur[i] = parent;
        at += lens[i];
    }
}

static void dfa_reset(gr_state *s) {
    s->n_dsets = 0;
    s->dpool_used = 0;
    memset(s->dhash, 0xff, GR_DFA_HASH * sizeof *s->dhash);
}

/* Keep only the current set's nodes; the automaton names old ids, so it goes too. */
static void reset_nodes(gr_state *s) {
    s->stats.resets++;
    compact(s);
    dfa_reset(s);
}

int gr_state_accept(gr_state *s, int32_t id) {
    if (!s) return TS_ERR_INVAL;
    if (id < 0 || id >= s->v->n_vocab) return TS_ERR_TOK_RANGE;
    if (s->finished) return TS_ERR_INVAL;
    if (is_end(s, id)) {
        if (!gr_state_can_end(s)) return TS_ERR_INVAL;
        s->finished = 1;
        s->n_cur = 0;
        return 0;
    }
    if (!s->v->usable[id]) return TS_ERR_INVAL;
    int32_t *set, mark;
    int32_t n = advance_token(s, id, &set, &mark);
    if (n <= 0) return TS_ERR_INVAL;
    memcpy(s->cur, set, (size_t)n * sizeof *set);
    s->n_cur = n;
    if (s->n_nodes > GR_NODES_CAP / 2) reset_nodes(s);
    return 0;
}

/* ---- masks ----------------------------------------------------------------------- */

/*
 * The set automaton. Masks walk the trie; every edge is "the set after this
 * byte". Sets recur: inside a string every plain byte leads back to the
 * same set, and the sets under " word" tokens repeat for every word. So
 * sets are interned as states of an automaton whose transitions (set, byte)
 * are computed once, on first use, and then cost one table read; nodes are
 * kept (not rolled back) while the automaton lives, which is until the
 * arena is half full and compact() renumbers them. A transition that
 * overflowed a set or the expansion budget is stored as "none", which
 * refuses that byte: conservative, never wrong output.
 */
static int32_t dfa_intern(gr_state *s, const int32_t *ids, int32_t n) {
    if (n <= 0) return -1;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001B3ull;
    uint32_t slot = (uint32_t)(h >> 40) & (GR_DFA_HASH - 1);
    for (;; slot = (slot + 1) & (GR_DFA_HASH - 1)) {
        int16_t d = s->dhash[slot];
        if (d < 0) break;
        const gr_dset *x = &s->dsets[d];
        if (x->hash == h && x->n == n && !memcmp(s->dpool + x->off, ids, (size_t)n * sizeof *ids)) return d;
    }
    /* Keep the hash table at most half full. */
    if (s->n_dsets >= GR_DFA_MAX || s->n_dsets >= GR_DFA_HASH / 2 || s->dpool_used + n > GR_DFA_POOL) return -3;
    int32_t d = s->n_dsets++;
    gr_dset *x = &s->dsets[d];
    x->off = s->dpool_used;
    x->n = n;
    x->hash = h;
    memset(&x->u, 0, sizeof x->u);
    for (int32_t i = 0; i < n; i++) {
        s->dpool[s->dpool_used++] = ids[i];
        if (ids[i] < 0) continue;
        const gr__set *c = &s->g->sets[s->g->elems[s->nodes[ids[i]].elem].arg];
        for (int w = 0; w < 4; w++) x->u.w[w] |= c->w[w];
    }
    for (int b = 0; b < 256; b++) s->dtrans[(size_t)d * 256 + b] = -2;
    s->dhash[slot] = (int16_t)d;
    return d;
}

/* The set after byte c from set d: an index, -1 for none, -3 when the
 * automaton or the arena is full (the caller starts over). */
static int32_t dfa_step(gr_state *s, int32_t d, uint8_t c) {
    int16_t t = s->dtrans[(size_t)d * 256 + c];
    if (t != -2) {
        s->stats.memo_hits++;
        return t;
    }
    const gr_dset *x = &s->dsets[d];
    s->overflow = 0;
    s->arena_full = 0;
    int32_t m = advance(s, s->dpool + x->off, x->n, c, s->dscratch);
    if (s->arena_full) return -3;
    int32_t r = s->overflow ? -1 : dfa_intern(s, s->dscratch, m);
    if (r == -3) return -3;
    s->dtrans[(size_t)d * 256 + c] = (int16_t)r;
    return r;
}

/* Walk the trie below node ni from set d, marking every token whose whole
 * piece the grammar takes. -1 when the automaton filled up. */
static int walk_dfa(gr_state *s, uint32_t ni, int32_t d) {
    const gr_vocab *v = s->v;
    const gr_tnode *nd = &v->nodes[ni];
    const gr__set *u = &s->dsets[d].u;
    for (uint32_t k = 0; k < nd->n_child && s->work <= GR_MASK_WORK; k++) {
        const gr_tnode *ch = &v->nodes[nd->child_lo + k];
        if (!gr__set_has(u, ch->byte)) continue;
        s->stats.trie_nodes++;
        int32_t r = dfa_step(s, d, ch->byte);
        if (r == -3) return -1;
        if (r < 0) continue;
        for (uint32_t t = ch->tok_lo; t < ch->tok_hi; t++) {
            int32_t id = v->order[t];
            s->bits[id >> 6] |= 1ull << (id & 63);
        }
        if (ch->n_child && walk_dfa(s, nd->child_lo + k, r)) return -1;
    }
    return 0;
}

/* The fallback walk, for a grammar whose sets outgrow the automaton: set
 * in[0..n) lies on s->walk at offset off; nodes made below a trie node are
 * rolled back when the walk returns, so it needs only a path's worth. */
static void walk_slow(gr_state *s, uint32_t ni, const int32_t *in, int32_t n, int32_t off) {
    const gr_vocab *v = s->v;
    const gr_tnode *nd = &v->nodes[ni];
    if (!nd->n_child) return;
    gr__set u = {{0}};          /* bytes some stack can take: prunes before any work */
    for (int32_t i = 0; i < n; i++) {
        if (in[i] < 0) continue;
        const gr__set *c = &s->g->sets[s->g->elems[s->nodes[in[i]].elem].arg];
        for (int w = 0; w < 4; w++) u.w[w] |= c->w[w];
    }
    int32_t next_off = off + n;
    if (next_off + GR_SET_MAX > GR_WALK_CAP) return; /* too deep: conservatively refuse */
    int32_t *out = s->walk + next_off;
    for (uint32_t k = 0; k < nd->n_child && s->work <= GR_MASK_WORK; k++) {
        const gr_tnode *ch = &v->nodes[nd->child_lo + k];
        if (!gr__set_has(&u, ch->byte)) continue;
        int32_t mark = s->n_nodes;
        s->overflow = 0;
        s->stats.trie_nodes++;
        int32_t m = advance(s, in, n, ch->byte, out);
        if (m > 0 && !s->overflow) {
            for (uint32_t t = ch->tok_lo; t < ch->tok_hi; t++) {
                int32_t id = v->order[t];
                s->bits[id >> 6] |= 1ull << (id & 63);
            }
            walk_slow(s, nd->child_lo + k, out, m, next_off);
        }
        rollback(s, mark);
    }
}

/* Fill s->bits for the current set: the automaton's walk, and if the
 * automaton fills up, once more from an empty one, then the slow walk. */
static void mask_bits(gr_state *s) {
    size_t words = (size_t)s->v->n_vocab / 64 + 1;
    s->work = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        memset(s->bits, 0, words * sizeof *s->bits);
        int32_t d = dfa_intern(s, s->cur, s->n_cur);
        if (d == -1) return;
        if (d >= 0 && !walk_dfa(s, 0, d)) return;
        reset_nodes(s);
    }
    memset(s->bits, 0, words * sizeof *s->bits);
    memcpy(s->walk, s->cur, (size_t)s->n_cur * sizeof *s->cur);
    s->stats.slow_walks++;
    s->work = 0;
    walk_slow(s, 0, s->walk, s->n_cur, 0);
    reset_nodes(s);
}

/* The current set's structural key (each stack's elements, top first,
 * separated by -2); its length, or -1 when it does not fit. */
static int32_t state_key(gr_state *s, uint64_t *hash) {
    int32_t n = 0;
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < s->n_cur; i++) {
        for (int32_t id = s->cur[i];; id = s->nodes[id].parent) {
            if (n >= GR_KEY_MAX) return -1;
            int32_t k = id < 0 ? -2 : s->nodes[id].elem;
            s->key[n++] = k;
            h = (h ^ (uint32_t)k) * 1099511628211ull;
            if (id < 0) break;
        }
    }
    *hash = h;
    return n;
}

static int32_t apply_bits(const gr_state *s, const uint64_t *bits, float *logits) {
    int32_t n = 0, nv = s->v->n_vocab;
    for (int32_t w = 0; w * 64 < nv; w++) {
        uint64_t b = bits[w];
        int32_t lo = w * 64, hi = lo + 64 < nv ? lo + 64 : nv;
        if (b == ~0ull && hi - lo == 64) {
            n += 64;
            continue;
        }
        for (int32_t i = lo; i < hi; i++) {
            if ((b >> (i - lo)) & 1)
                n++;
            else
                logits[i] = -INFINITY;
        }
    }
    return n;
}

int gr_state_mask(gr_state *s, float *logits) {
    if (!s || !logits) return TS_ERR_INVAL;
    const gr_vocab *v = s->v;
    size_t words = (size_t)v->n_vocab / 64 + 1;
    if (s->finished) {
        for (int32_t i = 0; i < v->n_vocab; i++) logits[i] = -INFINITY;
        return 0;
    }
    s->stats.masks++;
    uint64_t hash = 0;
    int32_t kn = state_key(s, &hash);
    if (kn >= 0)
        for (int i = 0; i < GR_CACHE_N; i++) {
            gr_centry *c = &s->cache[i];
            if (c->key_n == kn && c->hash == hash && !memcmp(c->key, s->key, (size_t)kn * sizeof *s->key)) {
                s->stats.cache_hits++;
                return apply_bits(s, c->bits, logits);
            }
        }
    mask_bits(s);
    if (gr_state_can_end(s)) {
        if (v->eos >= 0) s->bits[v->eos >> 6] |= 1ull << (v->eos & 63);
        for (int32_t i = 0; i < s->n_end; i++) s->bits[s->end_ids[i] >> 6] |= 1ull << (s->end_ids[i] & 63);
    }
    int32_t n = apply_bits(s, s->bits, logits);
    if (kn >= 0) {
        gr_centry *c = &s->cache[s->cache_next];
        s->cache_next = (s->cache_next + 1) % GR_CACHE_N;
        c->key_n = kn;
        c->hash = hash;
        c->n_allowed = n;
        memcpy(c->key, s->key, (size_t)kn * sizeof *s->key);
        memcpy(c->bits, s->bits, words * sizeof *s->bits);
    }
    return n;
}

void gr_state_stats(const gr_state *s, gr_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (s) *out = s->stats;
}
