/*
 * mkseeds.c - write the generated part of the seed corpora: small GGUF
 * files for fuzz_gguf and inputs for fuzz_tok. The output is checked in
 * under fuzz/corpus/; rerun this only to refresh it:
 *
 *     cmake --build build-fuzz --target fuzz_mkseeds
 *     build-fuzz/fuzz_mkseeds fuzz/corpus
 *
 * Everything is deterministic (mkmodel and vocab_synth are seeded), so a
 * rerun writes the same bytes. GGUF seeds carry no .gguf extension: the
 * repository ignores *.gguf.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
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

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_mkseeds CORPUS_DIR (writes CORPUS_DIR/gguf, CORPUS_DIR/tok)\n");
        return 2;
    }
    char gg[1024], tk[1024];
    snprintf(gg, sizeof gg, "%s/gguf", argv[1]);
    snprintf(tk, sizeof tk, "%s/tok", argv[1]);
    model_seed(gg, "model-llama-q8_0", "llama", 1, GGUF_TT_Q8_0);
    model_seed(gg, "model-qwen2-q8_0", "qwen2", 1, GGUF_TT_Q8_0);
    model_seed(gg, "model-llama-q4_0", "llama", 0, GGUF_TT_Q4_0);
    model_seed(gg, "model-llama-q5_1", "llama", 1, GGUF_TT_Q5_1);
    model_seed(gg, "model-llama-q4_K", "llama", 1, GGUF_TT_Q4_K);  /* 270 KB: K-quant rows are 256 */
    vocab_seed(gg, "vocab-spm", FZ_TOK_SPM, NULL);
    vocab_seed(gg, "vocab-spm-special", FZ_TOK_SPM_X,
               "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");
    vocab_seed(gg, "vocab-bpe", FZ_TOK_BPE, "{{ bos_token }}[INST] <<SYS>> [/INST]");
    empty_seed(gg);
    tok_seeds(tk);
    return 0;
}
