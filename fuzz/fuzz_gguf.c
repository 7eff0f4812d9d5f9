/*
 * fuzz_gguf.c - a model file: the GGUF reader (engine/gguf.c) over the
 * input, then what the server builds on top of it: the tokenizer from the
 * tokenizer.ggml.* keys (engine/tok.c), the chat family from the template
 * (serve/chat.c), and the model binding (engine/model.c: metadata, every
 * tensor's presence, type and shape, the norms made f32), and a few rows
 * of its matrices decoded in their types (cpu/quant.c).
 *
 * gguf.h promises that after gguf_open succeeds every string, array and
 * tensor range it hands out lies inside the file. The target checks that by
 * touching each one: the input sits in a buffer of exactly its size, so a
 * range that reaches past it is an AddressSanitizer report. A model or a
 * vocabulary that loads is then used a little (a tensor row read, a short
 * text encoded and decoded).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "err.h"
#include "gguf.h"
#include "model.h"
#include "tok.h"

/* Read every byte of [p, p + n): ASan checks each access. */
static uint8_t touch(const void *p, uint64_t n) {
    const volatile uint8_t *b = p;
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= b[i];
    return x;
}

static void walk_kvs(const gguf_ctx *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kvs[i];
        touch(kv->key.ptr, kv->key.len);
        touch(kv->val, kv->val_bytes);
        if (kv->type == GGUF_VT_ARRAY && kv->arr_type == GGUF_VT_STRING) {
            gguf_str *s = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *s);
            FZ_CHECK(s != NULL);
            if (gguf_arr_strings(kv, s) == 0)
                for (uint64_t k = 0; k < kv->arr_n; k++) touch(s[k].ptr, s[k].len);
            free(s);
        } else if (kv->type == GGUF_VT_ARRAY) {
            /* gguf_arr_i64 of a float element is left to the tokenizer's
             * token_type read: every vocabulary has float scores, many of
             * them out of int64 range (see fuzz/regress/gguf/). */
            int floats = kv->arr_type == GGUF_VT_FLOAT32 || kv->arr_type == GGUF_VT_FLOAT64;
            for (uint64_t k = 0; k < kv->arr_n && k < 4096; k++) {
                (void)gguf_arr_f32(kv, k);
                if (!floats) (void)gguf_arr_i64(kv, k);
            }
        }
        /* Lookup by the key's own text finds a key with that text. */
        if (kv->key.len < 256 && !memchr(kv->key.ptr, 0, kv->key.len)) {
            char key[256];
            memcpy(key, kv->key.ptr, kv->key.len);
            key[kv->key.len] = 0;
            const gguf_kv *f = gguf_find_kv(g, key);
            FZ_CHECK(f != NULL && gguf_str_eq(f->key, key));
            uint32_t u;
            float x;
            int b;
            gguf_str s;
            (void)gguf_get_u32(g, key, &u);
            (void)gguf_get_f32(g, key, &x);
            (void)gguf_get_bool(g, key, &b);
            if (gguf_get_str(g, key, &s) == 0) touch(s.ptr, s.len);
        }
    }
}

static void walk_tensors(const gguf_ctx *g) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        touch(t->name.ptr, t->name.len);
        FZ_CHECK(t->n_dims <= GGUF_MAX_DIMS);
        FZ_CHECK((const uint8_t *)t->data >= (const uint8_t *)g->map &&
                 t->nbytes <= g->size - (uint64_t)((const uint8_t *)t->data - (const uint8_t *)g->map));
        /* First and last byte: the whole range would be slow on big files. */
        if (t->nbytes) {
            touch(t->data, 1);
            touch((const uint8_t *)t->data + t->nbytes - 1, 1);
        }
        if (t->name.len < 256 && !memchr(t->name.ptr, 0, t->name.len)) {
            char name[256];
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            const gguf_tensor *f = gguf_find_tensor(g, name);
            FZ_CHECK(f != NULL && gguf_str_eq(f->name, name));
        }
    }
}

/* Each U+2581 of s (n bytes) turned back into a space, in place; the new
 * length. */
static size_t spm_spaces(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            s[o++] = ' ';
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

/* s (n bytes) without its spaces, in place; the new length. */
static size_t drop_spaces(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ') s[o++] = s[i];
    return o;
}

static void use_tok(const gguf_ctx *g) {
    tok *t = NULL;
    char err[256];
    if (tok_new_from_gguf(g, &t, err, sizeof err) < 0) {
        FZ_CHECK(t == NULL);
        return;
    }
    static const char text[] = "Hello, world! caf\xc3\xa9 <|im_start|> \xff";
    int32_t ids[3 * sizeof text + 1];
    int n = 0;
    FZ_CHECK(tok_encode(t, text, sizeof text - 1, 0, ids, (int)(sizeof ids / sizeof ids[0]), &n) == 0);
    size_t cap = 8 * sizeof text, got = 0;
    char *back = malloc(cap + tok_piece_max(t) * (size_t)n);
    FZ_CHECK(back != NULL);
    FZ_CHECK(tok_decode_seq(t, ids, (size_t)n, 1, back, cap + tok_piece_max(t) * (size_t)n, &got) == 0);
    /* SPM: a space no token covers falls back to the bytes of U+2581 and
     * decodes as them (tok.h), the prefix space too, which strip_prefix
     * then cannot recognise; the text holds no U+2581 of its own. */
    if (tok_model(t) == TOK_MODEL_SPM && (got = spm_spaces(back, got)) > 0 && back[0] == ' ' &&
        tok_add_space_prefix(t))
        memmove(back, back + 1, --got);
    /* A user-defined token the text holds (a fuzzed type can make one of
     * "r") cuts it into fragments, and with add_space_prefix each SPM
     * fragment gets its own prefix space, as in llama.cpp (tok.c): then
     * the text comes back with spaces added after such tokens. */
    int split = 0;
    for (int i = 0; i < n; i++)
        split |= tok_type(t, ids[i]) == TOK_TYPE_USER;
    if (tok_model(t) == TOK_MODEL_SPM && tok_add_space_prefix(t) && split) {
        char want[sizeof text];
        memcpy(want, text, sizeof text);
        const size_t wn = drop_spaces(want, sizeof text - 1);
        got = drop_spaces(back, got);
        FZ_CHECK(got == wn && memcmp(back, want, got) == 0);
    } else {
        FZ_CHECK(got == sizeof text - 1 && memcmp(back, text, got) == 0);
    }
    free(back);
    tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The file as mmap would give it: aligned, and exactly size bytes. */
    void *buf = NULL;
    if (posix_memalign(&buf, 64, size ? size : 1) != 0) return 0;
    memcpy(buf, data, size);
    gguf_ctx *g = NULL;
    char err[256];
    if (gguf_open_buffer(buf, size, &g, err, sizeof err) < 0) {
        FZ_CHECK(g == NULL);
        FZ_CHECK(memchr(err, 0, sizeof err) != NULL);
        free(buf);
        return 0;
    }
    walk_kvs(g);
    walk_tensors(g);
    use_tok(g);
    gguf_str tmpl;
    if (gguf_get_str(g, "tokenizer.chat_template", &tmpl) == 0) {
        chat_family f = chat_detect(tmpl.ptr, tmpl.len);
        FZ_CHECK(f >= CHAT_DEFAULT && f < CHAT_N_FAMILIES);
    }
    model *m = NULL;
    if (model_from_gguf(g, &m, err, sizeof err) == 0) {   /* takes g */
        FZ_CHECK(m->cfg.dim > 0 && m->cfg.n_layers > 0 && m->cfg.vocab > 0);
        (void)model_kv_bytes_per_token(&m->cfg, sizeof(float));
        /* Rows of whatever types the file gave, decoded from its bytes:
         * the embedding's first and last and the classifier's first. */
        float *row = malloc((size_t)m->cfg.dim * sizeof(float));
        if (row) {
            ops_dequant_row(row, &m->tok_embd, 0);
            ops_dequant_row(row, &m->tok_embd, m->cfg.vocab - 1);
            ops_dequant_row(row, &m->output, 0);
            free(row);
        }
        model_free(m);
    } else {
        FZ_CHECK(m == NULL);
    }
    free(buf);
    return 0;
}
