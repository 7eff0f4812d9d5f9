/*
 * vocab.c - synthetic SPM vocabulary: BPE training on a built-in corpus,
 * then seeded concatenations, each piece checked for reachability.
 *
 * Why the reachability check is needed and why it is enough: tok.c's SPM
 * encoder merges whichever adjacent pair spells the highest-scored token, not
 * the pair that created that token in training, so a piece such as "abcd"
 * made from "ab" + "cd" is unreachable if "bc" scores higher (the encoder
 * gets stuck at a + bc + d). Before a piece P is added we therefore run the
 * same encoder over P's text with the current pieces; P is accepted only if
 * that ends in exactly two symbols, which P, scored below everything that
 * exists, will then join. Adding P cannot break an earlier piece Q: while Q
 * is being encoded some higher-scored merge is always available until Q is
 * complete, so P, scored lowest, is never picked along the way.
 */
#include "vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "hash.h"
#include "heap.h"
#include "rng.h"
#include "tok.h"

/*
 * The training text: plain prose written for tessera, in the public domain.
 * No '<' or '>' appears in it, so no piece can collide with a special or
 * byte token's text.
 */
static const char CORPUS[] =
    "The river town woke slowly in the cold months. Some mornings, before the sun "
    "cleared the hills, the baker had already lit the oven, and the smell of bread "
    "drifted down the narrow street toward the water. Small boats rocked against the "
    "old stone quay, their ropes creaking, while a few early workers walked past with "
    "their hands in their pockets and their breath showing white in the air.\n"
    "Almost nobody in the town could remember when the bridge had been built. Some "
    "said it was older than the church, others that it had been rebuilt three times "
    "after floods. All of them agreed that it had never fallen, not once, and that "
    "people crossed it every day without thinking about the hands that had cut and "
    "fitted each stone. The children counted the arches on their way to school, and "
    "they always counted seven, although a careful look from the far bank showed an "
    "eighth, half buried in the mud where the river had moved.\n"
    "At the end of the afternoon the light changed. The sun came in low across the "
    "fields, turning the reeds gold and the water the colour of tea. The teacher let "
    "the children out early when the weather was fine, and they ran along the towpath "
    "shouting, chasing the ducks and throwing sticks into the current to see whose "
    "would reach the bridge first. Their parents pretended not to notice the wet "
    "shoes and muddy knees.\n"
    "A small workshop stood at the end of the lane, where an old man repaired clocks, "
    "radios and anything else with gears or wires inside. The man worked slowly and "
    "spoke even more slowly, but his repairs lasted for years. So when someone asked "
    "him how he knew what was wrong with a machine, he would shrug and say that he "
    "listened to it. A clock, he said, will tell you where it hurts if you are "
    "patient enough to hear.\n"
    "Slowly, during the winter market, the square filled with stalls selling honey, "
    "apples, wool and hot wine. Two musicians played near the fountain, and the caf\xc3\xa9 "
    "put tables outside even though the wind was sharp. Travellers stopped for a "
    "night and stayed for a week. A na\xc3\xafve visitor once asked whether the town was "
    "always this busy, and the woman selling candles laughed and said that for most "
    "of the year the loudest sound was the river itself.\n"
    "Spring brought rain, and the rain brought the river up to the top steps of the "
    "quay. The town watched it carefully, as it had watched it for centuries, "
    "measuring the height against marks painted on the wall. The marks each carried a "
    "year and a short note, water in the bakery, boats lost, the mill stopped for a "
    "month. The newest marks were lower than the oldest ones, and people liked to "
    "point that out to strangers as proof that things, on the whole, were getting "
    "better.\n"
    "Summer evenings were long and quiet. The families ate outside, neighbours talked "
    "over low walls, and the sound of a piano came from an open window above the post "
    "office. Somebody was always learning the same piece, making the same mistake in "
    "the same place, and starting again. At the end of the season the mistake was "
    "gone, and the whole street felt, without saying so, that it had learned "
    "something too.\n"
    "Then autumn returned, the leaves turned, and the baker lit the oven before dawn "
    "once more. The numbers changed, the faces changed a little, but the river kept "
    "its course, and the bridge, with its seven arches and its hidden eighth, held "
    "the two halves of the town together as it always had. A caf\xc3\xa9 owner in a green "
    "apron said that was the only news worth printing, and the printer, who was also "
    "the mayor, agreed. Seventy years, 1400 visitors, 7 arches, give or take one.\n";

#define SPACE_MARK "\xe2\x96\x81"   /* U+2581 */
#define SPACE_MARK_LEN 3
#define SEED 0x7e55e7a5eedull       /* fixed: the vocabulary is a pure function of n */

typedef struct piece {
    char s[VOCAB_PIECE_MAX];    /* not terminated */
    uint8_t n;                  /* bytes */
} piece;

/* Counted adjacent pair of pieces, keyed (a << 32) | b. */
typedef struct pair_slot {
    uint64_t key;               /* UINT64_MAX: empty */
    int64_t count;              /* weighted occurrences in the corpus */
    uint8_t banned;             /* its concatenation can never be a piece */
    uint8_t touched;            /* changed during the current merge */
} pair_slot;

/* Lazy max-heap entry: valid only while count matches the table. */
typedef struct cand {
    int64_t count;
    int32_t a, b;
} cand;

typedef struct trainer {
    piece *pieces;              /* (cap_pieces) normal pieces in creation order */
    uint32_t n_pieces, cap_pieces;
    int32_t *ht;                /* piece text -> index, -1 empty */
    size_t ht_mask;
    int32_t *sym;               /* every distinct word as piece indices */
    size_t *w_off;              /* (n_words) start in sym */
    uint32_t *w_len;            /* (n_words) symbols left */
    int64_t *w_count;           /* (n_words) occurrences */
    size_t n_words;
    pair_slot *pt;              /* pair counts */
    size_t pt_mask, pt_used;
    uint64_t *touched;          /* keys changed during the current merge */
    size_t n_touched, cap_touched;
    heap cands;                 /* of cand, best first (cand_before) */
} trainer;

/* ---- the piece table --------------------------------------------------- */


static size_t utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    return 4;
}

/* ---- pieces ----------------------------------------------------------- */

static int32_t piece_find(const trainer *tr, const char *s, size_t n) {
    for (size_t i = (size_t)hash_bytes(s, n) & tr->ht_mask;; i = (i + 1) & tr->ht_mask) {
        int32_t id = tr->ht[i];
        if (id < 0) return -1;
        const piece *p = &tr->pieces[id];
        if (p->n == n && memcmp(p->s, s, n) == 0) return id;
    }
}

/* The caller has checked that the text is new and fits. */
static int32_t piece_add(trainer *tr, const char *s, size_t n) {
    int32_t id = (int32_t)tr->n_pieces++;
    piece *p = &tr->pieces[id];
    memcpy(p->s, s, n);
    p->n = (uint8_t)n;
    size_t i = (size_t)hash_bytes(s, n) & tr->ht_mask;
    while (tr->ht[i] >= 0) i = (i + 1) & tr->ht_mask;
    tr->ht[i] = id;
    return id;
}

/*
 * Symbols left when tok.c's SPM encoder runs over s with the current pieces:
 * start from characters, repeatedly merge the adjacent pair spelling the
 * highest-scored piece (lowest index; the leftmost on a tie). Pieces are at
 * most VOCAB_PIECE_MAX bytes, so the quadratic rescan is cheap.
 */
static uint32_t spm_segments(const trainer *tr, const char *s, size_t n) {
    size_t off[VOCAB_PIECE_MAX], len[VOCAB_PIECE_MAX];
    uint32_t ns = 0;
    for (size_t i = 0; i < n; ns++) {
        size_t cl = utf8_len((unsigned char)s[i]);
        off[ns] = i;
        len[ns] = cl;
        i += cl;
    }
    for (;;) {
        int32_t best = -1;
        uint32_t at = 0;
        for (uint32_t k = 0; k + 1 < ns; k++) {
            int32_t id = piece_find(tr, s + off[k], len[k] + len[k + 1]);
            if (id >= 0 && (best < 0 || id < best)) {
                best = id;
                at = k;
            }
        }
        if (best < 0) return ns;
        len[at] += len[at + 1];
        for (uint32_t k = at + 1; k + 1 < ns; k++) {
            off[k] = off[k + 1];
            len[k] = len[k + 1];
        }
        ns--;
    }
}

/* ---- pair counts and the candidate heap ------------------------------- */

/* The heap's order: higher count first, then smaller piece indices, a
 * total order, so training is deterministic. */
static int cand_before(const void *xp, const void *yp) {
    const cand *x = xp, *y = yp;
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static const heap_ops CAND_HEAP = {sizeof(cand), cand_before, NULL};

static pair_slot *pair_slot_of(trainer *tr, uint64_t key) {
    size_t i = (size_t)hash_bytes((const char *)&key, sizeof key) & tr->pt_mask;
    while (tr->pt[i].key != key && tr->pt[i].key != UINT64_MAX) i = (i + 1) & tr->pt_mask;
    return &tr->pt[i];
}

static int pair_grow(trainer *tr) {
    size_t old_cap = tr->pt_mask + 1, cap = old_cap * 2;
    pair_slot *old = tr->pt;
    tr->pt = malloc(cap * sizeof *tr->pt);
    if (!tr->pt) {
        tr->pt = old;
        return TS_ERR_NOMEM;
    }
    tr->pt_mask = cap - 1;
    for (size_t i = 0; i < cap; i++) tr->pt[i].key = UINT64_MAX;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key != UINT64_MAX) *pair_slot_of(tr, old[i].key) = old[i];
    free(old);
    return 0;
}

/* Add delta occurrences of (a, b) and remember the pair for re-queuing. */
static int pair_add(trainer *tr, int32_t a, int32_t b, int64_t delta) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    if (2 * (tr->pt_used + 1) > tr->pt_mask + 1) {
        int rc = pair_grow(tr);
        if (rc < 0) return rc;
    }
    pair_slot *s = pair_slot_of(tr, key);
    if (s->key == UINT64_MAX) {
        s->key = key;
        s->count = 0;
        s->banned = 0;
        s->touched = 0;
        tr->pt_used++;
    }
    s->count += delta;
    if (!s->touched) {
        if (tr->n_touched == tr->cap_touched) {
            size_t nc = tr->cap_touched ? tr->cap_touched * 2 : 256;
            uint64_t *nt = realloc(tr->touched, nc * sizeof *nt);
            if (!nt) return TS_ERR_NOMEM;
            tr->touched = nt;
            tr->cap_touched = nc;
        }
        tr->touched[tr->n_touched++] = key;
        s->touched = 1;
    }
    return 0;
}

/* Queue every pair whose count changed since the last flush. */
static int pair_flush(trainer *tr) {
    for (size_t i = 0; i < tr->n_touched; i++) {
        pair_slot *s = pair_slot_of(tr, tr->touched[i]);
        s->touched = 0;
        if (s->count > 0 && !s->banned) {
            cand c = {s->count, (int32_t)(s->key >> 32), (int32_t)(s->key & 0xFFFFFFFFu)};
            int rc = heap_push(&tr->cands, &CAND_HEAP, &c);
            if (rc < 0) return rc;
        }
    }
    tr->n_touched = 0;
    return 0;
}

static int word_pairs(trainer *tr, size_t w, int64_t sign) {
    const int32_t *s = tr->sym + tr->w_off[w];
    for (uint32_t k = 0; k + 1 < tr->w_len[w]; k++) {
        int rc = pair_add(tr, s[k], s[k + 1], sign * tr->w_count[w]);
        if (rc < 0) return rc;
    }
    return 0;
}

/* Replace every non-overlapping (a, b), left to right, by c in all words. */
static int merge_words(trainer *tr, int32_t a, int32_t b, int32_t c) {
    for (size_t w = 0; w < tr->n_words; w++) {
        int32_t *s = tr->sym + tr->w_off[w];
        uint32_t n = tr->w_len[w], k, o;
        for (k = 0; k + 1 < n; k++)
            if (s[k] == a && s[k + 1] == b) break;
        if (k + 1 >= n) continue;
        int rc = word_pairs(tr, w, -1);
        if (rc < 0) return rc;
        for (k = 0, o = 0; k < n; o++) {
            if (k + 1 < n && s[k] == a && s[k + 1] == b) {
                s[o] = c;
                k += 2;
            } else {
                s[o] = s[k++];
            }
        }
        tr->w_len[w] = o;
        if ((rc = word_pairs(tr, w, +1)) < 0) return rc;
    }
    return pair_flush(tr);
}

/* ---- corpus ----------------------------------------------------------- */

static int is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static int cmp_chars(const void *x, const void *y) {
    const piece *p = x, *q = y;
    size_t n = p->n < q->n ? p->n : q->n;
    int c = memcmp(p->s, q->s, n);
    return c ? c : (int)p->n - (int)q->n;
}

/* Distinct characters of the corpus plus U+2581, sorted by their bytes. */
static uint32_t corpus_chars(piece *out, uint32_t cap) {
    uint32_t n = 0;
    for (size_t i = 0; CORPUS[i];) {
        piece c;
        if (is_ws(CORPUS[i])) {
            memcpy(c.s, SPACE_MARK, SPACE_MARK_LEN);
            c.n = SPACE_MARK_LEN;
            i++;
        } else {
            c.n = (uint8_t)utf8_len((unsigned char)CORPUS[i]);
            memcpy(c.s, CORPUS + i, c.n);
            i += c.n;
        }
        uint32_t k;
        for (k = 0; k < n; k++)
            if (out[k].n == c.n && memcmp(out[k].s, c.s, c.n) == 0) break;
        if (k == n && n < cap) out[n++] = c;
    }
    qsort(out, n, sizeof *out, cmp_chars);
    return n;
}

/* Split the corpus into words, each starting with U+2581 as SPM writes a
 * space, and keep one entry per distinct word with its count. */
static int corpus_words(trainer *tr) {
    size_t n_sym = 0, n_words = 0;
    for (size_t i = 0; CORPUS[i]; i++) {
        if (!is_ws(CORPUS[i])) n_sym++;
        if (!is_ws(CORPUS[i]) && (i == 0 || is_ws(CORPUS[i - 1]))) n_words++;
    }
    n_sym += n_words;
    tr->sym = malloc(n_sym * sizeof *tr->sym);
    tr->w_off = malloc(n_words * sizeof *tr->w_off);
    tr->w_len = malloc(n_words * sizeof *tr->w_len);
    tr->w_count = malloc(n_words * sizeof *tr->w_count);
    if (!tr->sym || !tr->w_off || !tr->w_len || !tr->w_count) return TS_ERR_NOMEM;
    int32_t space = piece_find(tr, SPACE_MARK, SPACE_MARK_LEN);
    size_t at = 0;
    for (size_t i = 0; CORPUS[i];) {
        if (is_ws(CORPUS[i])) {
            i++;
            continue;
        }
        size_t start = at;
        tr->sym[at++] = space;
        while (CORPUS[i] && !is_ws(CORPUS[i])) {
            size_t cl = utf8_len((unsigned char)CORPUS[i]);
            tr->sym[at++] = piece_find(tr, CORPUS + i, cl);
            i += cl;
        }
        uint32_t len = (uint32_t)(at - start);
        /* Distinct words: a linear search is fine for a few hundred words,
         * and it runs once per call. */
        size_t w;
        for (w = 0; w < tr->n_words; w++)
            if (tr->w_len[w] == len &&
                memcmp(tr->sym + tr->w_off[w], tr->sym + start, len * sizeof(int32_t)) == 0)
                break;
        if (w < tr->n_words) {
            tr->w_count[w]++;
            at = start;
        } else {
            tr->w_off[w] = start;
            tr->w_len[w] = len;
            tr->w_count[w] = 1;
            tr->n_words++;
        }
    }
    return 0;
}

static void trainer_free(trainer *tr) {
    free(tr->pieces);
    free(tr->ht);
    free(tr->sym);
    free(tr->w_off);
    free(tr->w_len);
    free(tr->w_count);
    free(tr->pt);
    free(tr->touched);
    heap_deinit(&tr->cands);
}

/* ---- training --------------------------------------------------------- */

/* Phase 1: BPE on the corpus, most frequent pair first (ties: smaller piece
 * indices), skipping pairs whose result would be too long or unreachable. */
static int train_corpus(trainer *tr) {
    int rc;
    for (size_t w = 0; w < tr->n_words; w++)
        if ((rc = word_pairs(tr, w, +1)) < 0) return rc;
    if ((rc = pair_flush(tr)) < 0) return rc;
    cand c;
    while (tr->n_pieces < tr->cap_pieces && heap_pop(&tr->cands, &CAND_HEAP, &c) == 0) {
        pair_slot *s = pair_slot_of(tr, ((uint64_t)(uint32_t)c.a << 32) | (uint32_t)c.b);
        if (s->banned || s->count != c.count) continue;     /* stale */
        const piece *pa = &tr->pieces[c.a], *pb = &tr->pieces[c.b];
        size_t n = (size_t)pa->n + pb->n;
        if (n > VOCAB_PIECE_MAX) {
            s->banned = 1;
            continue;
        }
        char buf[VOCAB_PIECE_MAX];
        memcpy(buf, pa->s, pa->n);
        memcpy(buf + pa->n, pb->s, pb->n);
        int32_t id = piece_find(tr, buf, n);
        if (id < 0) {
            if (spm_segments(tr, buf, n) != 2) {
                s->banned = 1;
                continue;
            }
            id = piece_add(tr, buf, n);
        }
        if ((rc = merge_words(tr, c.a, c.b, id)) < 0) return rc;
    }
    return 0;
}

/* 1 if U+2581 occurs past the start of s. SentencePiece trained with
 * whitespace splitting never makes such pieces, and tok.c encodes word by
 * word only for vocabularies without them. */
static int inner_space(const char *s, size_t n) {
    for (size_t k = 1; k + SPACE_MARK_LEN <= n; k++)
        if (memcmp(s + k, SPACE_MARK, SPACE_MARK_LEN) == 0) return 1;
    return 0;
}

/* Phase 2: seeded concatenations of two existing pieces, none with a space
 * inside. */
static int train_random(trainer *tr) {
    uint64_t st = SEED;         /* a splitmix64 stream */
    /* Generous: in practice about two tries per accepted piece. */
    uint64_t budget = 1000 + 1000ull * tr->cap_pieces;
    while (tr->n_pieces < tr->cap_pieces) {
        if (budget-- == 0) return TS_ERR_INVAL;
        const piece *pa = &tr->pieces[rng_splitmix64(&st) % tr->n_pieces];
        const piece *pb = &tr->pieces[rng_splitmix64(&st) % tr->n_pieces];
        size_t n = (size_t)pa->n + pb->n;
        if (n > VOCAB_PIECE_MAX) continue;
        char buf[VOCAB_PIECE_MAX];
        memcpy(buf, pa->s, pa->n);
        memcpy(buf + pa->n, pb->s, pb->n);
        if (inner_space(buf, n)) continue;
        if (piece_find(tr, buf, n) >= 0) continue;
        if (spm_segments(tr, buf, n) != 2) continue;
        piece_add(tr, buf, n);
    }
    return 0;
}

/* The fixed tokens are the same for every size. */
static void fixed_token(uint32_t id, char *buf) {
    if (id == 0) strcpy(buf, "<unk>");
    else if (id == 1) strcpy(buf, "<s>");
    else if (id == 2) strcpy(buf, "</s>");
    else snprintf(buf, 8, "<0x%02X>", id - 3);
}

/* ---- public ----------------------------------------------------------- */

uint32_t vocab_synth_min(void) {
    piece chars[256];
    return VOCAB_FIRST_PIECE + corpus_chars(chars, 256);
}

void vocab_synth_free(vocab_synth_out *out) {
    if (!out) return;
    free(out->tokens);
    free(out->scores);
    free(out->types);
    free(out->block_);
    memset(out, 0, sizeof *out);
}

int vocab_synth(uint32_t n_vocab, vocab_synth_out *out) {
    int rc;
    trainer tr;
    piece chars[256];
    if (!out) return TS_ERR_INVAL;
    memset(out, 0, sizeof *out);
    memset(&tr, 0, sizeof tr);
    uint32_t n_chars = corpus_chars(chars, 256);
    if (n_vocab < VOCAB_FIRST_PIECE + n_chars || n_vocab > VOCAB_N_MAX) return TS_ERR_INVAL;

    tr.cap_pieces = n_vocab - VOCAB_FIRST_PIECE;
    size_t ht_cap = hash_slots((size_t)tr.cap_pieces * 2);
    tr.pieces = malloc(tr.cap_pieces * sizeof *tr.pieces);
    tr.ht = malloc(ht_cap * sizeof *tr.ht);
    tr.pt = malloc(1024 * sizeof *tr.pt);
    if (!tr.pieces || !tr.ht || !tr.pt) goto nomem;
    if ((rc = heap_init(&tr.cands, &CAND_HEAP, 1024, HEAP_GROW)) < 0) goto err;
    tr.ht_mask = ht_cap - 1;
    for (size_t i = 0; i < ht_cap; i++) tr.ht[i] = -1;
    tr.pt_mask = 1023;
    for (size_t i = 0; i < 1024; i++) tr.pt[i].key = UINT64_MAX;
    for (uint32_t i = 0; i < n_chars; i++) piece_add(&tr, chars[i].s, chars[i].n);

    if ((rc = corpus_words(&tr)) < 0) goto err;
    if ((rc = train_corpus(&tr)) < 0) goto err;
    if ((rc = train_random(&tr)) < 0) goto err;

    /* Lay the result out: fixed tokens, then pieces, texts in one block. */
    size_t bytes = 0;
    for (uint32_t i = 0; i < VOCAB_FIRST_PIECE; i++) bytes += 8;
    for (uint32_t i = 0; i < tr.n_pieces; i++) bytes += tr.pieces[i].n + 1u;
    out->tokens = malloc(n_vocab * sizeof *out->tokens);
    out->scores = malloc(n_vocab * sizeof *out->scores);
    out->types = malloc(n_vocab * sizeof *out->types);
    out->block_ = malloc(bytes);
    if (!out->tokens || !out->scores || !out->types || !out->block_) goto nomem;
    char *at = out->block_;
    for (uint32_t id = 0; id < n_vocab; id++) {
        out->tokens[id] = at;
        if (id < VOCAB_FIRST_PIECE) {
            fixed_token(id, at);
            out->scores[id] = 0.0f;
            out->types[id] = id == 0 ? TOK_TYPE_UNKNOWN
                           : id < 3  ? TOK_TYPE_CONTROL
                                     : TOK_TYPE_BYTE;
            at += strlen(at) + 1;
        } else {
            const piece *p = &tr.pieces[id - VOCAB_FIRST_PIECE];
            memcpy(at, p->s, p->n);
            at[p->n] = '\0';
            out->scores[id] = -(float)(id - VOCAB_FIRST_PIECE);
            out->types[id] = TOK_TYPE_NORMAL;
            at += p->n + 1u;
        }
    }
    out->n = n_vocab;
    out->unk = 0;
    out->bos = 1;
    out->eos = 2;
    trainer_free(&tr);
    return 0;

nomem:
    rc = TS_ERR_NOMEM;
err:
    trainer_free(&tr);
    vocab_synth_free(out);
    return rc;
}

int vocab_synth_write(const vocab_synth_out *v, gguf_writer *w) {
    int rc;
    if (!v || !w || v->n == 0) return TS_ERR_INVAL;
    if ((rc = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama")) < 0 ||
        (rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
                                      (const char *const *)v->tokens, v->n)) < 0 ||
        (rc = gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", v->scores, v->n)) < 0 ||
        (rc = gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n)) < 0 ||
        (rc = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos)) < 0 ||
        (rc = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos)) < 0 ||
        (rc = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk)) < 0 ||
        (rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1)) < 0 ||
        (rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", 1)) < 0)
        return rc;
    return 0;
}
