/*
 * tok.c - SPM, byte-level BPE and WordPiece tokenizers over one shared
 * vocabulary store.
 *
 * The two merge-based models reduce to the same loop: split the input into
 * initial symbols, keep a doubly linked list of symbols over one contiguous
 * byte buffer, and repeatedly merge the best adjacent pair taken from a
 * binary heap. SPM ranks a pair by the score of the token its concatenation
 * spells (higher first); BPE ranks it by the index of the merge rule (lower
 * first). Ties go to the leftmost pair, which is also what llama.cpp does, so results are
 * deterministic. Each merge pushes at most two new pairs, so an input of n
 * symbols costs O(n log n).
 *
 * Heap entries are never removed when a merge makes them obsolete; instead a
 * popped entry is checked against the symbols it names. A symbol only ever
 * grows (by absorbing its right neighbour) or dies (length 0), and the first
 * thing a left symbol can absorb is the neighbour it had when the entry was
 * made. So an entry whose left symbol is alive and whose recorded combined
 * length still equals the left symbol's length plus its current right
 * neighbour's describes the current pair exactly; if either side grew, the
 * sum is larger.
 *
 * SPM inputs are merged word by word when the vocabulary allows it: if no
 * mergeable token contains U+2581 right after a character other than U+2581,
 * no merge can ever join a word to the space that starts the next one, so the
 * words evolve independently and the result equals merging the whole text at
 * once. The heaps then stay small and in cache. SentencePiece vocabularies
 * trained with whitespace splitting (llama's) qualify; others take the
 * whole-text path.
 *
 * BPE merges within the pieces of the pre-tokenizer (pretok.c) only, as the
 * reference implementations do. WordPiece is greedy rather than merge-based
 * and lives in wpm.c, which sees the vocabulary through a lookup callback.
 * Before any model runs, added tokens are cut out of the text by exact match
 * (a first-byte index of their lengths keeps that to a few hash lookups at
 * the positions where one could start), and each stretch between them is
 * encoded on its own.
 */
#include "tok.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "hash.h"
#include "heap.h"
#include "pretok.h"
#include "utf8.h"
#include "wpm.h"

/* One slot of the token-text hash table. */
typedef struct tok_slot {
    int32_t id;                 /* token id, -1 for an empty slot */
    uint32_t tag;               /* high bits of the hash, to skip memcmp */
} tok_slot;

/* One slot of the BPE merge table, keyed by the two token ids. */
typedef struct merge_slot {
    uint64_t key;               /* (left id << 32) | right id; UINT64_MAX empty */
    int32_t rank;               /* index in tokenizer.ggml.merges */
    int32_t result;             /* token id of the concatenation */
} merge_slot;

struct tok {
    int model;                  /* TOK_MODEL_* */
    int32_t n_vocab;
    char *text;                 /* every token text, concatenated */
    size_t *text_off;           /* (n_vocab + 1) offsets into text */
    char *piece;                /* every decoded piece, concatenated */
    size_t *piece_off;          /* (n_vocab + 1) offsets into piece */
    float *scores;              /* (n_vocab) SPM merge scores; NULL for BPE */
    uint8_t *types;             /* (n_vocab) TOK_TYPE_* */
    uint8_t *mergeable;         /* (n_vocab) 1: user text may produce it */
    tok_slot *ht;               /* text -> id, open addressing */
    size_t ht_mask;             /* slots - 1 (power of two) */
    int32_t byte_tok[256];      /* token for each byte (SPM <0xXX>, BPE char) */
    merge_slot *mt;             /* BPE (left, right) -> rank, result */
    size_t mt_mask;
    int32_t bos, eos, unk;      /* -1 for none */
    int add_bos;
    int add_space_prefix;
    size_t piece_max;           /* bytes */
    size_t text_max;            /* bytes of the longest mergeable token text */
    int split_words;            /* SPM: no merge can cross a word start */
    pretok *pre;                /* BPE: the pre-tokenizer; NULL otherwise */
    int ignore_merges;          /* BPE: a piece that is a token is that token */
    uint32_t b2u[256];          /* BPE: bytes_to_unicode */
    int uncased;                /* WPM: lowercase and strip accents */
    /* Added tokens (user-defined and control) matched by text before the
     * model runs: for each first byte b, the distinct text lengths of such
     * tokens starting with b, longest first, are add_len[add_at[b] ..
     * add_at[b + 1]). */
    uint16_t *add_len;
    uint32_t add_at[257];
};

/* ---- small helpers ---------------------------------------------------- */

static size_t tok_len_of(const tok *t, int32_t id) {
    return t->text_off[id + 1] - t->text_off[id];
}

/* First id whose text is s[0..n), or -1. */
static int32_t lookup(const tok *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->ht_mask;; i = (i + 1) & t->ht_mask) {
        const tok_slot *sl = &t->ht[i];
        if (sl->id < 0) return -1;
        if (sl->tag == tag && tok_len_of(t, sl->id) == n &&
            memcmp(t->text + t->text_off[sl->id], s, n) == 0)
            return sl->id;
    }
}

static const merge_slot *merge_find(const tok *t, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (size_t i = (size_t)hash_u64(key) & t->mt_mask;; i = (i + 1) & t->mt_mask) {
        const merge_slot *sl = &t->mt[i];
        if (sl->key == key) return sl;
        if (sl->key == UINT64_MAX) return NULL;
    }
}

/*
 * GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes (controls, space, DEL, NBSP, soft hyphen) are moved to
 * U+0100.. in byte order, so that every byte is a visible character and BPE
 * can run over text. The inverse covers code points below 0x144.
 */
#define B2U_LIMIT 0x144
static void gpt2_tables(uint32_t b2u[256], int16_t u2b[B2U_LIMIT]) {
    uint32_t extra = 0;
    for (int i = 0; i < B2U_LIMIT; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2u[b] = printable ? (uint32_t)b : 256 + extra++;
        u2b[b2u[b]] = (int16_t)b;
    }
}

static const char SPACE_MARK[] = "\xe2\x96\x81";    /* U+2581, SPM's space */
#define SPACE_MARK_LEN 3
static const char UNK_MARK[] = "\xe2\x96\x85";      /* U+2585, llama.cpp's unk */

/* Value of "<0xXX>" (either hex case), or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

/* ---- construction ----------------------------------------------------- */

void tok_free(tok *t) {
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->scores);
    free(t->types);
    free(t->mergeable);
    free(t->ht);
    free(t->mt);
    free(t->add_len);
    pretok_free(t->pre);
    free(t);
}

static int build_hash(tok *t) {
    size_t cap = hash_slots((size_t)t->n_vocab * 2);
    t->ht = malloc(cap * sizeof *t->ht);
    if (!t->ht) return TS_ERR_NOMEM;
    t->ht_mask = cap - 1;
    for (size_t i = 0; i < cap; i++) t->ht[i].id = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->text_off[id];
        size_t n = tok_len_of(t, id);
        uint64_t h = hash_bytes(s, n);
        uint32_t tag = (uint32_t)(h >> 32);
        size_t i = (size_t)h & t->ht_mask;
        for (;; i = (i + 1) & t->ht_mask) {
            tok_slot *sl = &t->ht[i];
            if (sl->id < 0) {
                sl->id = id;
                sl->tag = tag;
                break;
            }
            /* A duplicate text keeps its first id. */
            if (sl->tag == tag && tok_len_of(t, sl->id) == n &&
                memcmp(t->text + t->text_off[sl->id], s, n) == 0)
                break;
        }
    }
    return 0;
}

/*
 * SPM byte tokens. Type-6 tokens must spell "<0xXX>"; the first type-6 token
 * of each value becomes the fallback for that byte. Vocabularies without
 * types (or with a byte missing its type) fall back to the first token whose
 * text is exactly "<0xXX>" in llama.cpp's uppercase spelling. byte_of[id] is
 * the byte a token decodes to, or -1.
 */
static int spm_bytes(tok *t, int16_t *byte_of, char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        byte_of[id] = -1;
        if (t->types[id] != TOK_TYPE_BYTE) continue;
        int v = parse_byte_token(t->text + t->text_off[id], tok_len_of(t, id));
        if (v < 0)
            return err_set(err, errlen, TS_ERR_TOK_VOCAB,
                           "token %d has type byte but its text is not <0xXX>", (int)id);
        byte_of[id] = (int16_t)v;
        if (t->byte_tok[v] < 0) t->byte_tok[v] = id;
    }
    int missing = 0, first_missing = -1;
    for (int b = 0; b < 256; b++) {
        if (t->byte_tok[b] >= 0) continue;
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = lookup(t, name, 6);
        if (id >= 0 && t->types[id] != TOK_TYPE_CONTROL) {
            t->byte_tok[b] = id;
            byte_of[id] = (int16_t)b;
        } else {
            if (first_missing < 0) first_missing = b;
            missing++;
        }
    }
    if (missing)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB,
                       "SPM vocabulary lacks %d of the 256 byte tokens (first <0x%02X>); "
                       "byte fallback needs all of them", missing, first_missing);
    return 0;
}

/* BPE byte tokens: the single character bytes_to_unicode maps each byte to.
 * It must decode to that byte, which only a normal (or byte) token does:
 * a control or unused one decodes to nothing, an unknown one to U+2585, a
 * user-defined one to the character's own bytes (fuzz_gguf found a
 * vocabulary whose "_" was unused, so "_" encoded and decoded to ""). */
static int bpe_bytes(tok *t, const uint32_t b2u[256], char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = utf8_encode(s, b2u[b]);
        int32_t id = lookup(t, s, n);
        t->byte_tok[b] = id;
        if (id < 0)
            return err_set(err, errlen, TS_ERR_TOK_VOCAB,
                           "BPE vocabulary lacks the token for byte 0x%02X (U+%04X)", b, (unsigned)b2u[b]);
        int ty = t->types[id];
        if (ty != TOK_TYPE_UNDEFINED && ty != TOK_TYPE_NORMAL && ty != TOK_TYPE_BYTE)
            return err_set(err, errlen, TS_ERR_TOK_VOCAB,
                           "BPE token %d for byte 0x%02X (U+%04X) has type %d; it must be a normal token",
                           (int)id, b, (unsigned)b2u[b], ty);
    }
    return 0;
}

/* Decoded bytes of every token, computed once so tok_decode is a memcpy. */
static int build_pieces(tok *t, const int16_t *byte_of, const int16_t *u2b) {
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) total += tok_len_of(t, id) + 3;
    t->piece = malloc(total ? total : 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off) return TS_ERR_NOMEM;
    size_t at = 0;
    t->piece_max = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->text_off[id];
        size_t n = tok_len_of(t, id);
        int ty = t->types[id];
        char *p = t->piece + at;
        size_t k = 0;
        t->piece_off[id] = at;
        if (byte_of && byte_of[id] >= 0) {
            p[k++] = (char)byte_of[id];
        } else if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED) {
            /* decodes to nothing */
        } else if (ty == TOK_TYPE_UNKNOWN) {
            memcpy(p, UNK_MARK, 3);
            k = 3;
        } else if (t->model != TOK_MODEL_BPE || ty == TOK_TYPE_USER) {
            /* SPM and WordPiece text with U+2581 as space; BPE
             * user-defined tokens are stored as raw text, as llama.cpp
             * prints them. */
            for (size_t i = 0; i < n;) {
                if (t->model != TOK_MODEL_BPE && i + SPACE_MARK_LEN <= n &&
                    memcmp(s + i, SPACE_MARK, SPACE_MARK_LEN) == 0) {
                    p[k++] = ' ';
                    i += SPACE_MARK_LEN;
                } else {
                    p[k++] = s[i++];
                }
            }
        } else {
            /* BPE: each character names a byte; characters outside the
             * table (not produced by this tokenizer) are kept verbatim. */
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t cl = utf8_decode(s + i, n - i, &cp);
                if (cp < B2U_LIMIT && u2b[cp] >= 0) {
                    p[k++] = (char)u2b[cp];
                } else {
                    memcpy(p + k, s + i, cl);
                    k += cl;
                }
                i += cl;
            }
        }
        at += k;
        if (k > t->piece_max) t->piece_max = k;
    }
    t->piece_off[t->n_vocab] = at;
    return 0;
}

/* 1 if no mergeable token has U+2581 after a character other than U+2581
 * (see the top of the file). */
static int spm_split_words(const tok *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->mergeable[id]) continue;
        const char *s = t->text + t->text_off[id];
        size_t n = tok_len_of(t, id);
        for (size_t k = 1; k + SPACE_MARK_LEN <= n; k++) {
            if (memcmp(s + k, SPACE_MARK, SPACE_MARK_LEN) != 0) continue;
            if (k < SPACE_MARK_LEN ||
                memcmp(s + k - SPACE_MARK_LEN, SPACE_MARK, SPACE_MARK_LEN) != 0)
                return 0;
        }
    }
    return 1;
}

/* WordPiece: a vocabulary is uncased (BERT's basic tokenizer lowercases
 * and strips accents) unless a normal token holds an ASCII capital. GGUF has
 * no key for it; llama.cpp always lowercases, which breaks cased BERTs. */
static int vocab_uncased(const tok *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->types[id] != TOK_TYPE_NORMAL && t->types[id] != TOK_TYPE_UNDEFINED) continue;
        const char *s = t->text + t->text_off[id];
        for (size_t i = 0; i < tok_len_of(t, id); i++)
            if (s[i] >= 'A' && s[i] <= 'Z') return 0;
    }
    return 1;
}

/* Added tokens are the user-defined and control ones with a text. */
static int is_added(const tok *t, int32_t id) {
    int ty = t->types[id];
    return (ty == TOK_TYPE_USER || ty == TOK_TYPE_CONTROL) && tok_len_of(t, id) > 0;
}

static int cmp_u32_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The first-byte index of added-token lengths (see struct tok): a bucket
 * sort by first byte, then each bucket's lengths longest first, without
 * repeats. */
static int build_added(tok *t) {
    uint32_t count[256] = {0};
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_added(t, id)) count[(unsigned char)t->text[t->text_off[id]]]++;
    size_t total = 0;
    for (int b = 0; b < 256; b++) total += count[b];
    uint32_t *keys = malloc((total ? total : 1) * sizeof *keys);
    t->add_len = malloc((total ? total : 1) * sizeof *t->add_len);
    if (!keys || !t->add_len) {
        free(keys);
        return TS_ERR_NOMEM;
    }
    uint32_t at[257];
    at[0] = 0;
    for (int b = 0; b < 256; b++) at[b + 1] = at[b] + count[b];
    uint32_t fill[256];
    memcpy(fill, at, sizeof fill);
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_added(t, id)) keys[fill[(unsigned char)t->text[t->text_off[id]]]++] = (uint32_t)tok_len_of(t, id);
    uint32_t out = 0;
    for (int b = 0; b < 256; b++) {
        t->add_at[b] = out;
        qsort(keys + at[b], count[b], sizeof *keys, cmp_u32_desc);
        for (uint32_t i = at[b]; i < at[b + 1]; i++)
            if (i == at[b] || keys[i] != keys[i - 1]) t->add_len[out++] = (uint16_t)keys[i];
    }
    t->add_at[256] = out;
    free(keys);
    return 0;
}

/* Parse "left right" (split at the first space after the first byte, as
 * llama.cpp does) and insert it unless it cannot fire. */
static int add_merge(tok *t, uint32_t rank, const char *s, size_t n,
                     char *scratch, char *err, size_t errlen) {
    const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
    if (!sp || (size_t)(sp - s) + 1 >= n)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "merge %u is not of the form \"left right\"", rank);
    size_t ln = (size_t)(sp - s), rn = n - ln - 1;
    if (ln > TOK_MAX_TOKEN_BYTES || rn > TOK_MAX_TOKEN_BYTES) return 0;
    int32_t l = lookup(t, s, ln), r = lookup(t, sp + 1, rn);
    if (l < 0 || r < 0) return 0;
    memcpy(scratch, s, ln);
    memcpy(scratch + ln, sp + 1, rn);
    int32_t res = lookup(t, scratch, ln + rn);
    if (res < 0 || !t->mergeable[res]) return 0;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    for (size_t i = (size_t)hash_u64(key) & t->mt_mask;; i = (i + 1) & t->mt_mask) {
        merge_slot *sl = &t->mt[i];
        if (sl->key == key) return 0;   /* a duplicate rule keeps its first rank */
        if (sl->key == UINT64_MAX) {
            sl->key = key;
            sl->rank = (int32_t)rank;
            sl->result = res;
            return 0;
        }
    }
}

int tok_new(const tok_spec *spec, tok **out, char *err, size_t errlen) {
    int rc;
    tok *t = NULL;
    int16_t *byte_of = NULL;
    char *scratch = NULL;
    if (out) *out = NULL;
    err_set(err, errlen, 0, "ok");
    if (!spec || !out)
        return err_set(err, errlen, TS_ERR_INVAL, "tok_new: NULL argument");
    if (spec->model != TOK_MODEL_SPM && spec->model != TOK_MODEL_BPE && spec->model != TOK_MODEL_WPM)
        return err_set(err, errlen, TS_ERR_TOK_MODEL, "unknown tokenizer model %d", spec->model);
    if (spec->n_vocab == 0 || spec->n_vocab > (uint32_t)INT32_MAX - 1 || !spec->tokens)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "vocabulary has no tokens or too many (%u)",
                       spec->n_vocab);
    int32_t n = (int32_t)spec->n_vocab;
    if (spec->model == TOK_MODEL_SPM && !spec->scores)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "SPM vocabulary has no scores");
    if (spec->model == TOK_MODEL_BPE && spec->n_merges > 0 && !spec->merges)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "BPE vocabulary declares %u merges but has none",
                       spec->n_merges);
    const int32_t ids[3] = {spec->bos, spec->eos, spec->unk};
    const char *id_names[3] = {"bos", "eos", "unk"};
    for (int i = 0; i < 3; i++) {
        if (ids[i] < -1 || ids[i] >= n)
            return err_set(err, errlen, TS_ERR_TOK_RANGE, "%s id %d outside the vocabulary of %d tokens",
                           id_names[i], (int)ids[i], (int)n);
    }
    if (spec->add_bos && spec->bos < 0)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "vocabulary asks for BOS but has no bos id");
    if (spec->model == TOK_MODEL_WPM && spec->unk < 0)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "WordPiece vocabulary has no unknown token");
    if (spec->model == TOK_MODEL_WPM && spec->add_bos && spec->eos < 0)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "WordPiece vocabulary asks for [CLS] but has no [SEP] (eos)");

    t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->model = spec->model;
    t->n_vocab = n;
    t->bos = spec->bos;
    t->eos = spec->eos;
    t->unk = spec->unk;
    t->add_bos = spec->add_bos ? 1 : 0;
    t->add_space_prefix = spec->model == TOK_MODEL_SPM && spec->add_space_prefix;

    /* Texts: validate lengths, then copy into one block. */
    t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
    t->types = malloc((size_t)n);
    t->mergeable = malloc((size_t)n);
    if (!t->text_off || !t->types || !t->mergeable) goto nomem;
    size_t total = 0;
    for (int32_t id = 0; id < n; id++) {
        if (!spec->tokens[id]) {
            rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "token %d has no text", (int)id);
            goto err;
        }
        size_t len = spec->token_lens ? spec->token_lens[id] : strlen(spec->tokens[id]);
        if (len > TOK_MAX_TOKEN_BYTES) {
            rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "token %d is %zu bytes long (limit %d)", (int)id, len,
                         TOK_MAX_TOKEN_BYTES);
            goto err;
        }
        t->text_off[id] = total;
        total += len;
        int32_t ty = spec->types ? spec->types[id] : TOK_TYPE_NORMAL;
        if (ty < 0 || ty > TOK_TYPE_BYTE) {
            rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "token %d has unknown type %d", (int)id, (int)ty);
            goto err;
        }
        t->types[id] = (uint8_t)ty;
        if (spec->scores && isnan(spec->scores[id])) {
            rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "token %d has a NaN score", (int)id);
            goto err;
        }
    }
    t->text_off[n] = total;
    t->text = malloc(total ? total : 1);
    if (!t->text) goto nomem;
    for (int32_t id = 0; id < n; id++)
        memcpy(t->text + t->text_off[id], spec->tokens[id], tok_len_of(t, id));
    if (t->model == TOK_MODEL_SPM) {
        t->scores = malloc((size_t)n * sizeof *t->scores);
        if (!t->scores) goto nomem;
        memcpy(t->scores, spec->scores, (size_t)n * sizeof *t->scores);
    }
    if ((rc = build_hash(t)) < 0) goto err;

    uint32_t b2u[256];
    int16_t u2b[B2U_LIMIT];
    gpt2_tables(b2u, u2b);
    memcpy(t->b2u, b2u, sizeof b2u);
    if (t->model == TOK_MODEL_SPM) {
        byte_of = malloc((size_t)n * sizeof *byte_of);
        if (!byte_of) goto nomem;
        if ((rc = spm_bytes(t, byte_of, err, errlen)) < 0) goto err;
    } else if (t->model == TOK_MODEL_BPE) {
        if ((rc = bpe_bytes(t, b2u, err, errlen)) < 0) goto err;
        if ((rc = pretok_new(spec->pre, &t->pre, err, errlen)) < 0) goto err;
        t->ignore_merges = pretok_ignore_merges(t->pre);
    }

    /* Which tokens user text may turn into. Control, unknown, unused and byte
     * tokens would not decode back to the text that formed them. In BPE,
     * user-defined tokens decode as raw text rather than through the byte
     * table, so they are excluded there too. */
    t->text_max = 0;
    for (int32_t id = 0; id < n; id++) {
        int ty = t->types[id];
        int ok = ty == TOK_TYPE_UNDEFINED || ty == TOK_TYPE_NORMAL ||
                 (ty == TOK_TYPE_USER && t->model == TOK_MODEL_SPM);
        if (byte_of && byte_of[id] >= 0) ok = 0;
        t->mergeable[id] = (uint8_t)ok;
        if (ok && tok_len_of(t, id) > t->text_max) t->text_max = tok_len_of(t, id);
    }

    if (t->model == TOK_MODEL_SPM) t->split_words = spm_split_words(t);
    if (t->model == TOK_MODEL_WPM) t->uncased = vocab_uncased(t);
    if ((rc = build_pieces(t, byte_of, u2b)) < 0) goto err;
    if ((rc = build_added(t)) < 0) goto nomem;

    if (t->model == TOK_MODEL_BPE) {
        size_t cap = hash_slots((size_t)spec->n_merges * 2);
        t->mt = malloc(cap * sizeof *t->mt);
        scratch = malloc(2 * TOK_MAX_TOKEN_BYTES);
        if (!t->mt || !scratch) goto nomem;
        t->mt_mask = cap - 1;
        for (size_t i = 0; i < cap; i++) t->mt[i].key = UINT64_MAX;
        for (uint32_t i = 0; i < spec->n_merges; i++) {
            const char *m = spec->merges[i];
            if (!m) {
                rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "merge %u has no text", i);
                goto err;
            }
            size_t ml = spec->merge_lens ? spec->merge_lens[i] : strlen(m);
            if ((rc = add_merge(t, i, m, ml, scratch, err, errlen)) < 0) goto err;
        }
    }

    free(byte_of);
    free(scratch);
    *out = t;
    return 0;

nomem:
    rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory building the tokenizer");
err:
    free(byte_of);
    free(scratch);
    tok_free(t);
    return rc;
}

/* ---- construction from GGUF ------------------------------------------- */

static int is_numeric_vt(uint32_t vt) {
    return vt <= GGUF_VT_FLOAT32 || (vt >= GGUF_VT_UINT64 && vt <= GGUF_VT_FLOAT64);
}

/* A numeric array of exactly n elements under key, or NULL if absent; with
 * ints, of an integer type (a float such as inf or 1e30 has no int64
 * value, and converting it would be undefined behaviour). A present but
 * malformed one is an error. */
static int gguf_num_arr(const gguf_ctx *g, const char *key, uint64_t n, int ints,
                        const gguf_kv **kv, char *err, size_t errlen) {
    *kv = gguf_find_kv(g, key);
    if (!*kv) return 0;
    if ((*kv)->type != GGUF_VT_ARRAY || !is_numeric_vt((*kv)->arr_type))
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "%s is not a numeric array", key);
    if (ints && ((*kv)->arr_type == GGUF_VT_FLOAT32 || (*kv)->arr_type == GGUF_VT_FLOAT64))
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "%s is not an integer array", key);
    if ((*kv)->arr_n != n)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "%s has %llu entries for %llu tokens", key,
                       (unsigned long long)(*kv)->arr_n, (unsigned long long)n);
    return 0;
}

static int gguf_str_arr(const gguf_ctx *g, const char *key, const gguf_kv **kv,
                        char *err, size_t errlen) {
    *kv = gguf_find_kv(g, key);
    if (!*kv) return 0;
    if ((*kv)->type != GGUF_VT_ARRAY || (*kv)->arr_type != GGUF_VT_STRING)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "%s is not a string array", key);
    return 0;
}

/* A token id key: absent gives def; 0xFFFFFFFF or a negative -1 mean none. */
static int gguf_id(const gguf_ctx *g, const char *key, int32_t def, int32_t *out,
                   char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(g, key);
    *out = def;
    if (!kv) return 0;
    if ((kv->type == GGUF_VT_INT32 && kv->val_bytes >= 4) ||
        (kv->type == GGUF_VT_INT64 && kv->val_bytes >= 8)) {
        int64_t v;
        if (kv->type == GGUF_VT_INT32) {
            int32_t v32;
            memcpy(&v32, kv->val, 4);
            v = v32;
        } else {
            memcpy(&v, kv->val, 8);
        }
        if (v == -1) {
            *out = -1;
            return 0;
        }
    }
    uint32_t u;
    if (gguf_get_u32(g, key, &u) < 0)
        return err_set(err, errlen, TS_ERR_TOK_RANGE, "%s is not a token id", key);
    if (u == UINT32_MAX) {
        *out = -1;
        return 0;
    }
    if (u > (uint32_t)INT32_MAX)
        return err_set(err, errlen, TS_ERR_TOK_RANGE, "%s = %u is out of range", key, u);
    *out = (int32_t)u;
    return 0;
}

static int gguf_flag(const gguf_ctx *g, const char *key, int def, int *out,
                     char *err, size_t errlen) {
    *out = def;
    if (!gguf_find_kv(g, key)) return 0;
    if (gguf_get_bool(g, key, out) < 0)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "%s is not a bool", key);
    return 0;
}

int tok_new_from_gguf(const gguf_ctx *g, tok **out, char *err, size_t errlen) {
    return tok_new_from_gguf_ex(g, NULL, out, err, errlen);
}

int tok_new_from_gguf_ex(const gguf_ctx *g, const char *pre_override, tok **out, char *err,
                         size_t errlen) {
    int rc;
    gguf_str model;
    gguf_str *strs = NULL, *mstrs = NULL;
    const char **ptrs = NULL, **mptrs = NULL;
    size_t *lens = NULL, *mlens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    tok_spec spec;
    memset(&spec, 0, sizeof spec);
    if (out) *out = NULL;
    if (!g || !out)
        return err_set(err, errlen, TS_ERR_INVAL, "tok_new_from_gguf: NULL argument");
    if (gguf_get_str(g, "tokenizer.ggml.model", &model) < 0)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.model missing or not a string");
    if (gguf_str_eq(model, "llama")) {
        spec.model = TOK_MODEL_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        spec.model = TOK_MODEL_BPE;
    } else if (gguf_str_eq(model, "bert")) {
        spec.model = TOK_MODEL_WPM;
    } else {
        int shown = model.len > 40 ? 40 : (int)model.len;
        return err_set(err, errlen, TS_ERR_TOK_MODEL,
                       "tokenizer model \"%.*s\" is not supported (llama, gpt2, bert)", shown, model.ptr);
    }
    int spm = spec.model == TOK_MODEL_SPM, wpm = spec.model == TOK_MODEL_WPM;

    /* The pre-tokenizer's name: the override, else tokenizer.ggml.pre, else
     * "default" (as llama.cpp). Copied, since spec wants a C string. */
    char pre[64] = "";
    if (pre_override) {
        snprintf(pre, sizeof pre, "%s", pre_override);
    } else if (gguf_find_kv(g, "tokenizer.ggml.pre")) {
        gguf_str ps;
        if (gguf_get_str(g, "tokenizer.ggml.pre", &ps) < 0)
            return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.pre is not a string");
        if (ps.len >= sizeof pre || memchr(ps.ptr, 0, ps.len))
            return err_set(err, errlen, TS_ERR_TOK_MODEL, "unknown pre-tokenizer \"%.40s...\" (tokenizer.ggml.pre)",
                           ps.ptr);
        memcpy(pre, ps.ptr, ps.len);
        pre[ps.len] = 0;
    }
    spec.pre = pre;

    const gguf_kv *kt, *ks, *ky, *km;
    if ((rc = gguf_str_arr(g, "tokenizer.ggml.tokens", &kt, err, errlen)) < 0) return rc;
    if (!kt || kt->arr_n == 0 || kt->arr_n > (uint64_t)INT32_MAX - 1)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.tokens missing, empty or too long");
    uint64_t n = kt->arr_n;
    if ((rc = gguf_num_arr(g, "tokenizer.ggml.scores", n, 0, &ks, err, errlen)) < 0) return rc;
    if ((rc = gguf_num_arr(g, "tokenizer.ggml.token_type", n, 1, &ky, err, errlen)) < 0) return rc;
    if ((rc = gguf_str_arr(g, "tokenizer.ggml.merges", &km, err, errlen)) < 0) return rc;
    if (spm && !ks)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.scores missing (SPM needs scores)");
    if (spec.model == TOK_MODEL_BPE && !km)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.merges missing (gpt2 needs merges)");
    if (km && km->arr_n > (uint64_t)INT32_MAX)
        return err_set(err, errlen, TS_ERR_TOK_VOCAB, "tokenizer.ggml.merges too long");

    strs = malloc(n * sizeof *strs);
    ptrs = malloc(n * sizeof *ptrs);
    lens = malloc(n * sizeof *lens);
    if (!strs || !ptrs || !lens) goto nomem;
    if ((rc = gguf_arr_strings(kt, strs)) < 0) {
        err_set(err, errlen, rc, "tokenizer.ggml.tokens unreadable");
        goto err;
    }
    for (uint64_t i = 0; i < n; i++) {
        ptrs[i] = strs[i].ptr;
        lens[i] = (size_t)strs[i].len;
        if (strs[i].len > TOK_MAX_TOKEN_BYTES) lens[i] = TOK_MAX_TOKEN_BYTES + 1; /* rejected */
    }
    spec.n_vocab = (uint32_t)n;
    spec.tokens = ptrs;
    spec.token_lens = lens;
    if (ks) {
        scores = malloc(n * sizeof *scores);
        if (!scores) goto nomem;
        for (uint64_t i = 0; i < n; i++) scores[i] = gguf_arr_f32(ks, i);
        spec.scores = scores;
    }
    if (ky) {
        types = malloc(n * sizeof *types);
        if (!types) goto nomem;
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = gguf_arr_i64(ky, i);
            types[i] = (v < 0 || v > TOK_TYPE_BYTE) ? -1 : (int32_t)v;
        }
        spec.types = types;
    }
    if (km) {
        uint64_t m = km->arr_n;
        mstrs = malloc((m ? m : 1) * sizeof *mstrs);
        mptrs = malloc((m ? m : 1) * sizeof *mptrs);
        mlens = malloc((m ? m : 1) * sizeof *mlens);
        if (!mstrs || !mptrs || !mlens) goto nomem;
        if ((rc = gguf_arr_strings(km, mstrs)) < 0) {
            err_set(err, errlen, rc, "tokenizer.ggml.merges unreadable");
            goto err;
        }
        for (uint64_t i = 0; i < m; i++) {
            mptrs[i] = mstrs[i].ptr;
            mlens[i] = (size_t)mstrs[i].len;
        }
        spec.merges = mptrs;
        spec.merge_lens = mlens;
        spec.n_merges = (uint32_t)m;
    }

    if ((rc = gguf_id(g, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, &spec.bos, err, errlen)) < 0 ||
        (rc = gguf_id(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, &spec.eos, err, errlen)) < 0 ||
        (rc = gguf_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, &spec.unk, err, errlen)) < 0 ||
        (rc = gguf_flag(g, "tokenizer.ggml.add_bos_token", spm || wpm, &spec.add_bos, err, errlen)) < 0 ||
        (rc = gguf_flag(g, "tokenizer.ggml.add_space_prefix", spm, &spec.add_space_prefix, err, errlen)) < 0)
        goto err;
    /* The llama defaults only apply where the vocabulary is big enough to
     * hold them; a stated id is checked by tok_new. */
    if (spm && !gguf_find_kv(g, "tokenizer.ggml.unknown_token_id") && spec.unk >= (int32_t)n)
        spec.unk = -1;
    /* WordPiece wraps a sequence in [CLS] ... [SEP]: they stand in for BOS
     * and EOS (convert_hf_to_gguf.py writes cls_token_id and, so spelled,
     * seperator_token_id). */
    if (wpm) {
        if ((gguf_find_kv(g, "tokenizer.ggml.cls_token_id") &&
             (rc = gguf_id(g, "tokenizer.ggml.cls_token_id", -1, &spec.bos, err, errlen)) < 0) ||
            (gguf_find_kv(g, "tokenizer.ggml.seperator_token_id") &&
             (rc = gguf_id(g, "tokenizer.ggml.seperator_token_id", -1, &spec.eos, err, errlen)) < 0))
            goto err;
    }

    rc = tok_new(&spec, out, err, errlen);
    goto done;

nomem:
    rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory reading the GGUF vocabulary");
err:
done:
    free(strs);
    free(ptrs);
    free(lens);
    free(scores);
    free(types);
    free(mstrs);
    free(mptrs);
    free(mlens);
    return rc;
}

/* ---- encoding --------------------------------------------------------- */

enum {
    SYM_SPACE = 1,              /* a U+2581, typed or standing for a space */
};

/* One symbol of the working list; its bytes are buf[off .. off + n). */
typedef struct sym {
    size_t off;                 /* into the scratch buffer */
    uint32_t n;                 /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next;         /* symbol indices, -1 at the ends */
    int32_t id;                 /* token this symbol spells, or -1 */
    uint32_t flags;             /* SYM_* */
} sym;

/* A candidate merge of sym[left] with its right neighbour. Kept at 16 bytes
 * because the heap is the hot data of an encode. */
typedef struct pair {
    uint32_t key;               /* smaller first: score order (SPM) or rank (BPE) */
    int32_t left;               /* symbol index */
    uint32_t size;              /* combined bytes when the pair was made */
    int32_t id;                 /* token the merge produces */
} pair;

typedef struct work {
    const tok *t;
    const unsigned char *buf;   /* bytes the symbols cover */
    sym *sy;
    heap pairs;                 /* of pair, best first (pair_before) */
    int32_t *out;               /* caller's buffer */
    int cap;
    size_t need;                /* ids produced so far */
    char *scratch;              /* BPE ignore_merges: a piece as token text */
} work;

/* The heap's order: smaller key first, then the leftmost pair. Two entries
 * that tie on both name the same left symbol, and at most one of them still
 * describes the current pair (see the top of the file), so which of them
 * pops first never changes a result. */
static int pair_before(const void *ap, const void *bp) {
    const pair *a = ap, *b = bp;
    if (a->key != b->key) return a->key < b->key;
    return a->left < b->left;
}

static const heap_ops PAIR_HEAP = {sizeof(pair), pair_before, NULL};

static void emit(work *w, int32_t id) {
    if (w->need < (size_t)w->cap) w->out[w->need] = id;
    w->need++;
}

/* Map a score to a key that sorts higher scores first: flip the float's
 * bits into unsigned order (negatives reversed), then complement. -0.0 is
 * folded into +0.0 so equal scores tie as float comparison says they do. */
static uint32_t score_key(float f) {
    uint32_t u;
    if (f == 0.0f) f = 0.0f;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* Queue the merge of symbols l and r if the model allows one. */
static int try_pair(work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const tok *t = w->t;
    const sym *a = &w->sy[l], *b = &w->sy[r];
    pair p;
    p.left = l;
    p.size = a->n + b->n;
    if (t->model == TOK_MODEL_SPM) {
        if (p.size > t->text_max) return 0;
        int32_t id = lookup(t, (const char *)w->buf + a->off, p.size);
        if (id < 0 || !t->mergeable[id]) return 0;
        p.id = id;
        p.key = score_key(t->scores[id]);
    } else {
        const merge_slot *m = merge_find(t, a->id, b->id);
        if (!m) return 0;
        p.id = m->result;
        p.key = (uint32_t)m->rank;
    }
    return heap_push(&w->pairs, &PAIR_HEAP, &p);
}

/* Merge until no queued pair applies; symbols [first, first + n) are linked. */
static int merge_all(work *w, int32_t first, int32_t n) {
    int rc;
    heap_clear(&w->pairs);
    for (int32_t i = first; i + 1 < first + n; i++)
        if ((rc = try_pair(w, i, i + 1)) < 0) return rc;
    pair p;
    while (heap_pop(&w->pairs, &PAIR_HEAP, &p) == 0) {
        sym *a = &w->sy[p.left];
        if (a->n == 0 || a->next < 0) continue;                 /* stale */
        sym *b = &w->sy[a->next];
        if (a->n + b->n != p.size) continue;                    /* stale */
        a->n += b->n;
        a->id = p.id;
        a->flags = 0;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0) w->sy[b->next].prev = p.left;
        if ((rc = try_pair(w, a->prev, p.left)) < 0) return rc;
        if ((rc = try_pair(w, p.left, a->next)) < 0) return rc;
    }
    return 0;
}

/*
 * SPM on one fragment of text (the input, or a stretch between added
 * tokens). The text is normalized as SentencePiece does: every space
 * becomes U+2581 and, with add_space_prefix, one U+2581 goes in front; a
 * U+2581 typed by the user is then the same as a space. What no token
 * covers after merging falls back to the byte tokens of its normalized
 * bytes, so an uncovered space is <0xE2><0x96><0x81>, not <0x20>.
 */
static int encode_spm(work *w, const unsigned char *text, size_t len) {
    const tok *t = w->t;
    /* Worst case: every byte a space (3 bytes each) plus the prefix. */
    unsigned char *buf = malloc(3 * len + SPACE_MARK_LEN);
    sym *sy = malloc((len + 1) * sizeof *sy);
    if (!buf || !sy) {
        free(buf);
        free(sy);
        return TS_ERR_NOMEM;
    }
    w->buf = buf;
    w->sy = sy;
    size_t at = 0;
    int32_t ns = 0;

    /* Split into characters, writing the normalized text as we go. The
     * prefix is one more space symbol in front of the text. */
    int prefix = t->add_space_prefix;
    for (size_t i = 0; prefix || i < len;) {
        sym *s = &sy[ns];
        s->off = at;
        s->prev = ns - 1;
        s->next = ns + 1;
        s->flags = 0;
        uint32_t cp = 0;
        size_t cl = prefix ? 0 : text[i] == ' ' ? 1 : utf8_decode((const char *)text + i, len - i, &cp);
        if (prefix || text[i] == ' ' || cp == 0x2581) {
            memcpy(buf + at, SPACE_MARK, SPACE_MARK_LEN);
            s->n = SPACE_MARK_LEN;
            s->flags = SYM_SPACE;
            prefix = 0;
        } else {
            memcpy(buf + at, text + i, cl);
            s->n = (uint32_t)cl;
        }
        i += cl;
        int32_t id = lookup(t, (const char *)buf + at, s->n);
        s->id = (id >= 0 && t->mergeable[id]) ? id : -1;
        at += s->n;
        ns++;
    }
    sy[ns - 1].next = -1;

    /* Merge chunk by chunk: words when the vocabulary allows, else all. */
    int rc = 0;
    for (int32_t first = 0, end; first < ns && rc == 0; first = end) {
        end = ns;
        if (t->split_words) {
            /* A word ends before a space that follows something else. */
            for (end = first + 1; end < ns; end++)
                if ((sy[end].flags & SYM_SPACE) && !(sy[end - 1].flags & SYM_SPACE)) break;
            sy[first].prev = -1;
            sy[end - 1].next = -1;
        }
        rc = merge_all(w, first, end - first);
        for (int32_t k = first; rc == 0 && k >= 0; k = sy[k].next) {
            const sym *s = &sy[k];
            if (s->id >= 0) {
                emit(w, s->id);
            } else {
                for (uint32_t j = 0; j < s->n; j++) emit(w, t->byte_tok[buf[s->off + j]]);
            }
        }
    }
    free(buf);
    free(sy);
    w->sy = NULL;
    return rc;
}

/* The token whose text is the byte-level spelling of piece, or -1. */
static int32_t bpe_whole(work *w, const unsigned char *piece, size_t n) {
    const tok *t = w->t;
    size_t k = 0;
    if (2 * n > TOK_MAX_TOKEN_BYTES) return -1;
    for (size_t i = 0; i < n; i++) k += utf8_encode(w->scratch + k, t->b2u[piece[i]]);
    int32_t id = lookup(t, w->scratch, k);
    return id >= 0 && t->mergeable[id] ? id : -1;
}

/* pretok_split's callback: BPE on one piece, the bytes buf[off, off + n). */
static int bpe_piece(void *ctx, size_t off, size_t n) {
    work *w = ctx;
    const tok *t = w->t;
    if (t->ignore_merges) {
        int32_t id = bpe_whole(w, w->buf + off, n);
        if (id >= 0) {
            emit(w, id);
            return 0;
        }
    }
    int32_t first = (int32_t)off, ns = (int32_t)n;
    for (int32_t k = 0; k < ns; k++) {
        sym *s = &w->sy[first + k];
        s->off = off + (size_t)k;
        s->n = 1;
        s->prev = k > 0 ? first + k - 1 : -1;
        s->next = k + 1 < ns ? first + k + 1 : -1;
        s->id = t->byte_tok[w->buf[off + (size_t)k]];
        s->flags = 0;
    }
    int rc = merge_all(w, first, ns);
    for (int32_t k = first; rc == 0 && k >= 0; k = w->sy[k].next) emit(w, w->sy[k].id);
    return rc;
}

/* Byte-level BPE on one fragment: pre-tokenize, then merge each piece. */
static int encode_bpe(work *w, const unsigned char *text, size_t len) {
    w->buf = text;
    w->sy = malloc(len * sizeof *w->sy);
    if (!w->sy) return TS_ERR_NOMEM;
    int rc = pretok_split(w->t->pre, (const char *)text, len, bpe_piece, w);
    free(w->sy);
    w->sy = NULL;
    return rc;
}

/* wpm_encode's callbacks: token lookup, and emission. */
static int32_t wpm_lookup(const void *ctx, const char *s, size_t n) {
    const tok *t = ctx;
    int32_t id = lookup(t, s, n);
    return id >= 0 && t->mergeable[id] ? id : -1;
}

static void wpm_emit(void *ctx, int32_t id) { emit(ctx, id); }

static int encode_fragment(work *w, const unsigned char *text, size_t len) {
    if (len == 0) return 0;
    const tok *t = w->t;
    if (t->model == TOK_MODEL_SPM) return encode_spm(w, text, len);
    if (t->model == TOK_MODEL_BPE) return encode_bpe(w, text, len);
    return wpm_encode((const char *)text, len, t->uncased, wpm_lookup, t, t->unk, wpm_emit, w);
}

/* The added token whose text starts s (avail bytes), the longest if
 * several do; control tokens only when they fit in special_avail bytes
 * (0: none). -1 if none. */
static int32_t added_at(const tok *t, const unsigned char *s, size_t avail, size_t special_avail,
                        size_t *len) {
    for (uint32_t k = t->add_at[s[0]]; k < t->add_at[s[0] + 1]; k++) {
        size_t n = t->add_len[k];
        if (n > avail) continue;
        int32_t id = lookup(t, (const char *)s, n);
        if (id < 0 || !is_added(t, id)) continue;
        if (t->types[id] == TOK_TYPE_CONTROL && n > special_avail) continue;
        *len = n;
        return id;
    }
    return -1;
}

/* Bytes from i a control token may take: all the rest with
 * TOK_ENC_PARSE_SPECIAL and no spans, the rest of the span holding i with
 * spans, else 0. *k walks the spans as i grows. */
static size_t special_room(unsigned flags, const tok_span *sp, size_t n_sp, size_t *k, size_t i, size_t len) {
    if (!(flags & TOK_ENC_PARSE_SPECIAL)) return 0;
    if (!sp) return len - i;
    while (*k < n_sp && sp[*k].off + sp[*k].len <= i) (*k)++;
    return *k < n_sp && sp[*k].off <= i ? sp[*k].off + sp[*k].len - i : 0;
}

static int check_spans(const tok_span *sp, size_t n, size_t len) {
    for (size_t k = 0; k < n; k++)
        if (sp[k].off > len || sp[k].len > len - sp[k].off || (k && sp[k].off < sp[k - 1].off + sp[k - 1].len))
            return TS_ERR_INVAL;
    return 0;
}

int tok_encode_spans(const tok *t, const char *text, size_t len, unsigned flags, const tok_span *spans,
                     size_t n_spans, int32_t *out, int cap, int *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (len > 0 && !text) || cap < 0 || (cap > 0 && !out) || (n_spans && !spans) ||
        (spans && check_spans(spans, n_spans, len)))
        return TS_ERR_INVAL;
    if (len > TOK_MAX_INPUT_BYTES) return TS_ERR_INVAL;
    int add_bos = (flags & TOK_ENC_ADD_BOS) != 0;
    if (add_bos && (t->bos < 0 || (t->model == TOK_MODEL_WPM && t->eos < 0))) return TS_ERR_INVAL;
    work w;
    memset(&w, 0, sizeof w);
    w.t = t;
    w.out = out;
    w.cap = cap;
    int rc = heap_init(&w.pairs, &PAIR_HEAP, 0, HEAP_GROW);
    if (rc < 0) return rc;
    if (t->model == TOK_MODEL_BPE && t->ignore_merges && !(w.scratch = malloc(TOK_MAX_TOKEN_BYTES))) {
        heap_deinit(&w.pairs);
        return TS_ERR_NOMEM;
    }
    if (add_bos) emit(&w, t->bos);
    /* Added tokens cut the text into fragments, each encoded on its own
     * (so each SPM fragment gets its own space prefix, as in llama.cpp and
     * in HF tokenizers, which normalize each split separately). */
    const unsigned char *s = (const unsigned char *)text;
    size_t start = 0, k = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        size_t n;
        int32_t id = added_at(t, s + i, len - i, special_room(flags, spans, n_spans, &k, i, len), &n);
        if (id < 0) {
            i++;
            continue;
        }
        rc = encode_fragment(&w, s + start, i - start);
        emit(&w, id);
        i += n;
        start = i;
    }
    if (rc == 0) rc = encode_fragment(&w, s + start, len - start);
    if (add_bos && t->model == TOK_MODEL_WPM) emit(&w, t->eos);
    free(w.scratch);
    heap_deinit(&w.pairs);
    if (rc < 0) return rc;
    /* At most 3 ids per input byte plus BOS, and the input is capped, so the
     * count fits an int. */
    *n_out = (int)w.need;
    return w.need > (size_t)cap ? TS_ERR_INVAL : 0;
}

int tok_encode_ex(const tok *t, const char *text, size_t len, unsigned flags,
                  int32_t *out, int cap, int *n_out) {
    return tok_encode_spans(t, text, len, flags, NULL, 0, out, cap, n_out);
}

int tok_encode(const tok *t, const char *text, size_t len, int add_bos,
               int32_t *out, int cap, int *n_out) {
    return tok_encode_ex(t, text, len, add_bos ? TOK_ENC_ADD_BOS : 0, out, cap, n_out);
}
/* ---- decoding and accessors ------------------------------------------- */

int tok_decode(const tok *t, int32_t id, char *buf, size_t cap) {
    if (!t) return TS_ERR_INVAL;
    if (id < 0 || id >= t->n_vocab) return TS_ERR_TOK_RANGE;
    size_t n = t->piece_off[id + 1] - t->piece_off[id];
    if (n > cap || (n > 0 && !buf)) return TS_ERR_INVAL;
    memcpy(buf, t->piece + t->piece_off[id], n);
    return (int)n;
}

int tok_decode_seq(const tok *t, const int32_t *ids, size_t n, int strip_prefix,
                   char *buf, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (n > 0 && !ids) || (cap > 0 && !buf)) return TS_ERR_INVAL;
    int strip = strip_prefix && ((t->model == TOK_MODEL_SPM && t->add_space_prefix) || t->model == TOK_MODEL_WPM);
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) return TS_ERR_TOK_RANGE;
        const char *p = t->piece + t->piece_off[id];
        size_t pn = t->piece_off[id + 1] - t->piece_off[id];
        if (strip && pn > 0) {
            /* The first byte decoded is the prefix the encoder added. */
            if (p[0] == ' ') {
                p++;
                pn--;
            }
            strip = 0;
        }
        if (pn > 0 && need + pn <= cap) memcpy(buf + need, p, pn);
        need += pn;
    }
    *n_out = need;
    return need > cap ? TS_ERR_INVAL : 0;
}

int32_t tok_bos(const tok *t) { return t->bos; }
int32_t tok_eos(const tok *t) { return t->eos; }
int32_t tok_unk(const tok *t) { return t->unk; }
int tok_n_vocab(const tok *t) { return t->n_vocab; }
int tok_model(const tok *t) { return t->model; }
int tok_add_bos(const tok *t) { return t->add_bos; }
int tok_add_space_prefix(const tok *t) { return t->add_space_prefix; }
size_t tok_piece_max(const tok *t) { return t->piece_max; }
const char *tok_pre(const tok *t) { return t->pre ? pretok_name(t->pre) : NULL; }

int tok_is_control(const tok *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->types[id] == TOK_TYPE_CONTROL;
}

int tok_type(const tok *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return TS_ERR_TOK_RANGE;
    return t->types[id];
}

int32_t tok_find(const tok *t, const char *text, size_t len) {
    if (!t || (len > 0 && !text)) return -1;
    return lookup(t, text, len);
}

const char *tok_text(const tok *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = tok_len_of(t, id);
    return t->text + t->text_off[id];
}
