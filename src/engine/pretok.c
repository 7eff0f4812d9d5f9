/*
 * pretok.c - byte-level BPE pre-tokenizers on PCRE2; see pretok.h.
 *
 * The table below lists each family once: its tokenizer.ggml.pre names
 * (llama.cpp's spellings, first the canonical one), the Split patterns in
 * Sequence order, and whether its tokenizer.json sets ignore_merges. The
 * patterns are those of the published tokenizer.json files (the Hugging Face
 * pre_tokenizer), as llama.cpp's llama-vocab.cpp quotes them, with the one
 * adaptation pretok.h describes. A Digits pre-tokenizer (individual_digits)
 * is the Split "\p{N}" (true) or "\p{N}+" (false); Punctuation is the Split
 * of a run of punctuation characters; ByteLevel(use_regex: true) is GPT-2's
 * pattern. Non-ASCII class members are written as \x{...} escapes: the
 * published DeepSeek classes hold characters that Unicode normalization
 * rewrites (U+1FBE, U+1FD3, U+212A, ...), so a copy through any normalizing
 * tool silently changes the ranges.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define PRETOK_MAX_SPLITS 6

/* "'s|'t|..." with explicit case classes instead of (?i:...). */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* GPT-2's ByteLevel pattern (also the default). */
#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Llama 3's (and ChatGLM 4's) pattern; Qwen 2's differs in single digits. */
#define PAT_LLAMA3                                                                           \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_QWEN2                                                                        \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* The o200k (GPT-4o) and Tekken patterns: upper-then-lower letter runs. */
#define UPPERS "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWERS "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define PAT_GPT4O                                                                    \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+" CONTRACTIONS "?|"                 \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "+" LOWERS "*" CONTRACTIONS "?|"                 \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_TEKKEN                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "*" LOWERS "+|"                                  \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPERS "+" LOWERS "*|"                                  \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* CJK ranges of the DeepSeek families, as published. */
#define CJK_DEEPSEEK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

typedef struct pretok_family {
    const char *names;          /* canonical name first, '|'-separated aliases */
    int ignore_merges;
    const char *split[PRETOK_MAX_SPLITS];   /* Sequence order, NULL-terminated */
} pretok_family;

static const pretok_family FAMILIES[] = {
    {"gpt-2|default|gpt2|mpt|olmo|phi-2|roberta-bpe|jina-es|jina-de|jina-v1-en|"
     "jina-v2-es|jina-v2-de|jina-v2-code|gigachat|jais|trillion",
     0, {PAT_GPT2}},
    {"llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral|dbrx|smaug-bpe", 1, {PAT_LLAMA3}},
    {"chatglm-bpe", 0, {PAT_LLAMA3}},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan", 0, {PAT_QWEN2}},
    {"deepseek-llm", 0,
     {"[\r\n]",
      "\\s?[A-Za-z\\x{00B5}\\x{00C0}-\\x{00D6}\\x{00D8}-\\x{00F6}\\x{00F8}-\\x{01BA}"
      "\\x{01BC}-\\x{01BF}\\x{01C4}-\\x{0293}\\x{0295}-\\x{02AF}\\x{0370}-\\x{0373}"
      "\\x{0376}\\x{0377}\\x{037B}-\\x{037D}\\x{037F}\\x{0386}\\x{0388}-\\x{038A}\\x{038C}"
      "\\x{038E}-\\x{03A1}\\x{03A3}-\\x{03F5}\\x{03F7}-\\x{0481}\\x{048A}-\\x{052F}"
      "\\x{0531}-\\x{0556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"
      "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
      "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
      "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
      "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
      "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
      "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
      "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
      "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
      "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
      "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
      "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
      "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
      "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
      "\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$",
      CJK_DEEPSEEK,
      "\\p{N}+"}},
    {"deepseek-coder", 0, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_DEEPSEEK, "\\p{N}"}},
    {"deepseek-v3", 0,
     {"\\p{N}{1,3}",
      "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}},
    {"falcon", 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", PAT_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", 0, {"\\p{N}", PAT_GPT2}},
    {"gpt-4o|llama4", 0, {PAT_GPT4O}},
    {"tekken", 1, {PAT_TEKKEN}},
    {"bloom|poro-chat|gpt3-finnish", 0, {" ?[^(\\s|.,!?…。，、।۔،)]+"}},
    {"viking", 0, {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"}},
};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

struct pretok {
    const pretok_family *fam;
    char name[32];                          /* canonical name */
    int n;                                  /* splits in use */
    pcre2_code *re[PRETOK_MAX_SPLITS];
    int jit[PRETOK_MAX_SPLITS];             /* 1: JIT-compiled */
};

/* 1 if name is one of the '|'-separated names in list. */
static int name_in(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

void pretok_free(pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    free(p);
}

int pretok_new(const char *name, pretok **out, char *err, size_t errlen) {
    if (!out) return err_set(err, errlen, TS_ERR_INVAL, "pretok_new: NULL argument");
    *out = NULL;
    if (!name || !*name) name = "default";
    const pretok_family *fam = NULL;
    for (size_t i = 0; i < N_FAMILIES && !fam; i++)
        if (name_in(FAMILIES[i].names, name)) fam = &FAMILIES[i];
    if (!fam)
        return err_set(err, errlen, TS_ERR_TOK_MODEL,
                       "unknown pre-tokenizer \"%.64s\"; known: gpt-2, llama-bpe, qwen2, "
                       "deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, smollm, command-r, "
                       "gpt-4o, tekken, chatglm-bpe, bloom, viking and their aliases", name);
    pretok *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory building the pre-tokenizer");
    p->fam = fam;
    const char *bar = strchr(fam->names, '|');
    size_t nl = bar ? (size_t)(bar - fam->names) : strlen(fam->names);
    memcpy(p->name, fam->names, nl < sizeof p->name ? nl : sizeof p->name - 1);
    for (int i = 0; i < PRETOK_MAX_SPLITS && fam->split[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        p->re[i] = pcre2_compile((PCRE2_SPTR)fam->split[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(ec, msg, sizeof msg);
            int rc = err_set(err, errlen, TS_ERR_TOK_VOCAB, "pre-tokenizer %s split %d: %s at offset %zu",
                             p->name, i, (const char *)msg, (size_t)eo);
            pretok_free(p);
            return rc;
        }
        p->n = i + 1;
        /* JIT is an optimisation: a library built without it still matches. */
        p->jit[i] = pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE) == 0;
    }
    *out = p;
    return 0;
}

const char *pretok_name(const pretok *p) { return p->name; }
int pretok_ignore_merges(const pretok *p) { return p->fam->ignore_merges; }

const char *const *pretok_names(void) {
    static const char *const names[] = {
        "default", "gpt-2", "gpt2", "mpt", "olmo", "llama-bpe", "llama3", "qwen2", "deepseek-llm",
        "deepseek-coder", "deepseek-v3", "falcon", "starcoder", "smollm", "command-r", "gpt-4o",
        "tekken", "chatglm-bpe", "bloom", "viking", NULL};
    return names;
}

#define PRETOK_MATCH_LIMIT 100000000u  /* backtracking steps of one match */
#define PRETOK_HEAP_KIB (256u * 1024u)  /* the interpreter's heap for one match */

typedef struct split_ctx {
    const pretok *p;
    const char *text;
    pcre2_match_data *md;
    pcre2_match_context *mc;    /* the limits below */
    pretok_piece_fn fn;
    void *ctx;
} split_ctx;

/* One match of split k in subject[0, len) from start. OUT s, e: the match.
 * Returns 1 for a match, 0 for none, or a negative code. A JIT stack
 * overflow (a pattern that backtracks a lot on a long run) retries with the
 * interpreter, which keeps its backtracking state on the heap. */
static int match_one(const split_ctx *c, int k, const char *subject, size_t len, size_t start,
                     size_t *s, size_t *e) {
    int rc = pcre2_match(c->p->re[k], (PCRE2_SPTR)subject, len, start, 0, c->md, c->mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(c->p->re[k], (PCRE2_SPTR)subject, len, start, PCRE2_NO_JIT, c->md, c->mc);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc == PCRE2_ERROR_NOMEMORY) return TS_ERR_NOMEM;
    if (rc < 0) return TS_ERR_INVAL;
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *s = ov[0];
    *e = ov[1];
    return 1;
}

/* Apply splits k.. to the piece text[off, off + len): matches and gaps
 * alike go on to split k + 1, and past the last split to the callback. */
static int split_from(const split_ctx *c, int k, size_t off, size_t len) {
    if (len == 0) return 0;
    if (k == c->p->n) return c->fn(c->ctx, off, len);
    const char *subject = c->text + off;
    size_t gap = 0, at = 0;
    int rc;
    while (at < len) {
        size_t s, e;
        if ((rc = match_one(c, k, subject, len, at, &s, &e)) < 0) return rc;
        if (rc == 0) break;
        if (e == s) {
            /* An empty match splits nothing; step over one character. */
            at = s + 1;
            while (at < len && ((unsigned char)subject[at] & 0xC0) == 0x80) at++;
            continue;
        }
        if (s > gap && (rc = split_from(c, k + 1, off + gap, s - gap)) < 0) return rc;
        if ((rc = split_from(c, k + 1, off + s, e - s)) < 0) return rc;
        gap = at = e;
    }
    return split_from(c, k + 1, off + gap, len - gap);
}

int pretok_split(const pretok *p, const char *text, size_t len, pretok_piece_fn fn, void *ctx) {
    if (!p || !fn || (len > 0 && !text)) return TS_ERR_INVAL;
    if (len == 0) return 0;
    split_ctx c = {p, text, NULL, NULL, fn, ctx};
    /* Ten pairs cover every pattern's capture groups; only group 0 is read. */
    c.md = pcre2_match_data_create(10, NULL);
    /* The shipped patterns match in linear time (measured on adversarial
     * megabyte runs), but the text is a client's: bound each match anyway,
     * well above what any of them needs, rather than trust PCRE2's
     * defaults (a 20 GB heap for the interpreter). */
    c.mc = pcre2_match_context_create(NULL);
    int rc = TS_ERR_NOMEM;
    if (c.md && c.mc && !pcre2_set_match_limit(c.mc, PRETOK_MATCH_LIMIT) &&
        !pcre2_set_heap_limit(c.mc, PRETOK_HEAP_KIB))
        rc = split_from(&c, 0, 0, len);
    pcre2_match_context_free(c.mc);
    pcre2_match_data_free(c.md);
    return rc;
}
