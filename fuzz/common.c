/* common.c - see common.h. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hash.h"
#include "vocab.h"

void fz_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
    abort();
}

static tok *build(const tok_spec *s, const char *name) {
    tok *t = NULL;
    char err[256];
    if (tok_new(s, &t, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz: cannot build the %s vocabulary: %s\n", name, err);
        abort();
    }
    return t;
}

/* ---- SPM: what mkmodel writes --------------------------------------------- */

/* The specs the tokenizers were built from, kept (with what they point to)
 * for the life of the process so fz_spec can hand them out. */
static tok_spec specs[FZ_N_TOKS];

static tok *make_spm(void) {
    static vocab_synth_out v;
    if (vocab_synth(512, &v) < 0) fz_fail(__FILE__, __LINE__, "vocab_synth(512)");
    tok_spec *sp = &specs[FZ_TOK_SPM], s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_SPM;
    s.n_vocab = v.n;
    s.tokens = (const char *const *)v.tokens;
    s.scores = v.scores;
    s.types = v.types;
    s.unk = v.unk;
    s.bos = v.bos;
    s.eos = v.eos;
    s.add_bos = 1;
    s.add_space_prefix = 1;
    *sp = s;
    return build(&s, "SPM");
}

/* ---- SPM with the awkward cases ------------------------------------------- */

#define SP "\xe2\x96\x81"   /* U+2581 */

static tok *make_spm_x(void) {
    static const struct {
        const char *text;
        float score;
        int32_t type;
    } extra[] = {
        {"<|im_start|>", 0, TOK_TYPE_CONTROL},
        {"<|im_end|>", 0, TOK_TYPE_CONTROL},
        {"<tool>", -500, TOK_TYPE_USER},
        {"<tool>" SP "call", -501, TOK_TYPE_USER},
        {"<unused0>", 0, TOK_TYPE_UNUSED},
        {"the" SP "end", -502, TOK_TYPE_NORMAL},   /* U+2581 inside a word */
        {SP SP SP SP, -503, TOK_TYPE_NORMAL},
        {"zz", INFINITY, TOK_TYPE_NORMAL},
        {"qq", -INFINITY, TOK_TYPE_NORMAL},
        {"-0", -0.0f, TOK_TYPE_NORMAL},
        {"+0", 0.0f, TOK_TYPE_NORMAL},
        {"<0x41>", -504, TOK_TYPE_NORMAL},         /* duplicate of a byte token's text */
        {"the", -505, TOK_TYPE_NORMAL},            /* probably a duplicate */
        {"\xc3\xa9t\xc3\xa9", -506, TOK_TYPE_NORMAL},
        {"\xff\xfe", -507, TOK_TYPE_NORMAL},       /* not UTF-8 */
        {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz", -508, TOK_TYPE_NORMAL},
        {"<unk2>", -509, TOK_TYPE_UNKNOWN},
    };
    enum { N_EXTRA = sizeof extra / sizeof extra[0] };
    static vocab_synth_out v;
    if (vocab_synth(400, &v) < 0) fz_fail(__FILE__, __LINE__, "vocab_synth(400)");
    uint32_t n = v.n + N_EXTRA;
    const char **texts = malloc(n * sizeof *texts);
    float *scores = malloc(n * sizeof *scores);
    int32_t *types = malloc(n * sizeof *types);
    if (!texts || !scores || !types) fz_fail(__FILE__, __LINE__, "malloc");
    for (uint32_t i = 0; i < v.n; i++) {
        texts[i] = v.tokens[i];
        scores[i] = v.scores[i];
        types[i] = v.types[i];
    }
    for (uint32_t i = 0; i < N_EXTRA; i++) {
        texts[v.n + i] = extra[i].text;
        scores[v.n + i] = extra[i].score;
        types[v.n + i] = extra[i].type;
    }
    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_SPM;
    s.n_vocab = n;
    s.tokens = texts;
    s.scores = scores;
    s.types = types;
    s.unk = v.unk;
    s.bos = v.bos;
    s.eos = (int32_t)v.n + 1;   /* <|im_end|> */
    specs[FZ_TOK_SPM_X] = s;
    return build(&s, "SPM (special)");
}

/* ---- BPE derived from the synthetic pieces -------------------------------- */

/* GPT-2's bytes_to_unicode, written as UTF-8: printable Latin-1 stands for
 * itself, the other 68 bytes move to U+0100.. in byte order. */
static void b2u_utf8(char out[256][3]) {
    unsigned extra = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned cp = keep ? (unsigned)b : 256u + extra++;
        memset(out[b], 0, 3);
        if (cp < 0x80) {
            out[b][0] = (char)cp;
        } else {
            out[b][0] = (char)(0xC0 | (cp >> 6));
            out[b][1] = (char)(0x80 | (cp & 0x3F));
        }
    }
}

typedef struct bpe_build {
    char **text;        /* (n) owned token texts */
    size_t n, cap;
    char **merges;      /* (n_merges) owned "left right" */
    size_t n_merges, cap_merges;
} bpe_build;

static void push(char ***arr, size_t *n, size_t *cap, char *s) {
    if (!s) fz_fail(__FILE__, __LINE__, "malloc");
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 512;
        *arr = realloc(*arr, *cap * sizeof **arr);
        if (!*arr) fz_fail(__FILE__, __LINE__, "realloc");
    }
    (*arr)[(*n)++] = s;
}

static int bpe_has(const bpe_build *b, const char *s, size_t n) {
    for (size_t i = 0; i < b->n; i++)
        if (strlen(b->text[i]) == n && memcmp(b->text[i], s, n) == 0) return 1;
    return 0;
}

static tok *make_bpe(void) {
    char map[256][3];
    b2u_utf8(map);
    static bpe_build b;
    for (int c = 0; c < 256; c++) push(&b.text, &b.n, &b.cap, strdup(map[c]));
    vocab_synth_out v;
    if (vocab_synth(512, &v) < 0) fz_fail(__FILE__, __LINE__, "vocab_synth(512)");
    for (uint32_t id = VOCAB_FIRST_PIECE; id < v.n; id++) {
        /* The piece's bytes (U+2581 as a space), each as its character;
         * cut[k] is where the k-th byte's character starts. */
        const char *p = v.tokens[id];
        char txt[4 * VOCAB_PIECE_MAX + 1];
        size_t cut[VOCAB_PIECE_MAX + 1], nb = 0, at = 0;
        for (size_t i = 0; p[i];) {
            unsigned char byte = (unsigned char)p[i];
            if (strncmp(p + i, SP, 3) == 0) {
                byte = ' ';
                i += 3;
            } else {
                i++;
            }
            cut[nb++] = at;
            size_t cl = strlen(map[byte]);
            memcpy(txt + at, map[byte], cl);
            at += cl;
        }
        cut[nb] = at;
        txt[at] = 0;
        if (nb < 2 || bpe_has(&b, txt, at)) continue;
        /* One merge of two existing tokens makes it; the first split that
         * works, so a piece only becomes a token if it is reachable. */
        for (size_t k = 1; k < nb; k++) {
            if (!bpe_has(&b, txt, cut[k]) || !bpe_has(&b, txt + cut[k], at - cut[k])) continue;
            char *m = malloc(at + 2);
            if (!m) fz_fail(__FILE__, __LINE__, "malloc");
            memcpy(m, txt, cut[k]);
            m[cut[k]] = ' ';
            memcpy(m + cut[k] + 1, txt + cut[k], at - cut[k] + 1);
            push(&b.merges, &b.n_merges, &b.cap_merges, m);
            push(&b.text, &b.n, &b.cap, strdup(txt));
            break;
        }
    }
    vocab_synth_free(&v);
    size_t first_special = b.n;
    push(&b.text, &b.n, &b.cap, strdup("<|endoftext|>"));
    push(&b.text, &b.n, &b.cap, strdup("<|im_start|>"));
    push(&b.text, &b.n, &b.cap, strdup("<|im_end|>"));
    push(&b.text, &b.n, &b.cap, strdup("<|fim middle|>"));
    int32_t *types = malloc(b.n * sizeof *types);
    if (!types) fz_fail(__FILE__, __LINE__, "malloc");
    for (size_t i = 0; i < b.n; i++) types[i] = TOK_TYPE_NORMAL;
    types[first_special] = types[first_special + 1] = types[first_special + 2] = TOK_TYPE_CONTROL;
    types[first_special + 3] = TOK_TYPE_USER;

    tok_spec s;
    memset(&s, 0, sizeof s);
    s.model = TOK_MODEL_BPE;
    s.n_vocab = (uint32_t)b.n;
    s.tokens = (const char *const *)b.text;
    s.types = types;
    s.merges = (const char *const *)b.merges;
    s.n_merges = (uint32_t)b.n_merges;
    s.bos = s.eos = (int32_t)first_special;
    s.unk = -1;
    specs[FZ_TOK_BPE] = s;
    return build(&s, "BPE");
}

const tok *fz_tok(int which) {
    static tok *toks[FZ_N_TOKS];
    if (which < 0 || which >= FZ_N_TOKS) fz_fail(__FILE__, __LINE__, "fz_tok: bad index");
    if (!toks[which]) {
        switch (which) {
        case FZ_TOK_SPM: toks[which] = make_spm(); break;
        case FZ_TOK_SPM_X: toks[which] = make_spm_x(); break;
        default: toks[which] = make_bpe(); break;
        }
    }
    return toks[which];
}

const tok_spec *fz_spec(int which) {
    fz_tok(which);
    return &specs[which];
}

/* ---- files, UTF-8, hashing ------------------------------------------------- */

const char *fz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("tessera-fuzz", MFD_CLOEXEC);
        if (fd < 0) fz_fail(__FILE__, __LINE__, "memfd_create");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) < 0) fz_fail(__FILE__, __LINE__, "ftruncate");
    for (size_t at = 0; at < size;) {
        ssize_t k = pwrite(fd, data + at, size - at, (off_t)at);
        if (k <= 0) fz_fail(__FILE__, __LINE__, "pwrite");
        at += (size_t)k;
    }
    return path;
}

int fz_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i < len || u[i + 1] < lo || u[i + 1] > hi) return 0;
        for (size_t k = 2; k < len; k++)
            if ((u[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

uint64_t fz_hash(const uint8_t *data, size_t size) { return hash_bytes(data, size); }

void fz_check_message(const char *err, size_t cap) {
    int ok = memchr(err, 0, cap) != NULL && err[0] && !strchr(err, '\n');
    if (!ok) fprintf(stderr, "bad message: \"%.*s\"\n", (int)cap, err);
    FZ_CHECK(ok);
}
