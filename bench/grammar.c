/*
 * bench/grammar.c - what constrained decoding costs per token, beside what
 * a token costs without it.
 *
 * Part 1 (per token, no model): over the 15m preset's 32k-token synthetic
 * SentencePiece vocabulary, for each grammar (any JSON object, a strict
 * object schema, a schema with nested arrays and enums, a regex, a choice)
 * it decodes sequences from random logits, timing gr_state_mask +
 * gr_state_accept per token against the plain sampling step (smp_sample on
 * the same row), and prints the ratio; masks served from the state's cache
 * and computed ones (trie walks) are also shown apart.
 *
 * Part 2 (end to end): the 15m model (mkmodel, f32, into /tmp) decodes
 * batch 1 with the same sampler, once free and once under the JSON-object
 * grammar, and prints tokens/s of both: the "masking must not
 * dominate the step" measured on one model, in one run. With a random
 * model, sampled output under the grammar is a random walk of the grammar.
 *
 * usage: bench_grammar [--tokens N] [--no-model]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine.h"
#include "err.h"
#include "grammar.h"
#include "mkmodel.h"
#include "model.h"
#include "sampler.h"
#include "tok.h"
#include "vocab.h"

/* This thread's CPU time: per-token figures on a shared machine would
 * otherwise count other processes' time slices. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t mix_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const struct {
    const char *name, *kind, *text;
} GRAMMARS[] = {
    {"json_object", "object", ""},
    {"strict schema", "schema",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":40},\"age\":{\"type\":"
     "\"integer\"},\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
     "\"maxItems\":4}},\"required\":[\"name\",\"age\",\"email\",\"tags\"],\"additionalProperties\":false}"},
    {"nested schema", "schema",
     "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
     "\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},\"qty\":{\"type\":"
     "\"integer\"},\"kind\":{\"enum\":[\"book\",\"tool\",\"food\"]},\"note\":{\"anyOf\":[{\"type\":\"string\"},"
     "{\"type\":\"null\"}]}},\"required\":[\"sku\",\"qty\",\"kind\"]},\"maxItems\":3},\"total\":{\"type\":"
     "\"number\"}},\"required\":[\"items\",\"total\"]}"},
    {"regex", "regex", "[a-z]+( [a-z]+)*\\. [0-9]{1,3}"},
    {"choice", "choice", ""},
};

static int compile(const gr_vocab *v, int i, gr_grammar **g) {
    char err[256];
    int rc;
    const char *k = GRAMMARS[i].kind, *tx = GRAMMARS[i].text;
    if (!strcmp(k, "object")) rc = gr_compile_json_object(v, g, err, sizeof err);
    else if (!strcmp(k, "schema")) rc = gr_compile_json_schema(tx, strlen(tx), v, g, err, sizeof err);
    else if (!strcmp(k, "regex")) rc = gr_compile_regex(tx, strlen(tx), v, g, err, sizeof err);
    else {
        const char *ch[] = {"positive", "negative", "neutral", "mixed"};
        rc = gr_compile_choice(ch, NULL, 4, v, g, err, sizeof err);
    }
    if (rc) fprintf(stderr, "%s: %s\n", GRAMMARS[i].name, err);
    return rc;
}

/* Random logits, peaked like a model's: most mass on a few hundred tokens. */
static void fill_logits(float *lg, int n, uint64_t *seed) {
    for (int i = 0; i < n; i++) {
        uint64_t r = mix_next(seed);
        lg[i] = (float)(r % 1000) * 0.004f + ((r >> 20) % 100 == 0 ? 6.0f : 0.0f);
    }
}

static int per_token(const tok *t, int tokens) {
    gr_vocab *v = NULL;
    double t0 = clk_mono_s();
    if (gr_vocab_new(t, &v)) return 1;
    int n = tok_n_vocab(t);
    printf("vocabulary: %d tokens, trie built in %.1f ms\n\n", n, (clk_mono_s() - t0) * 1e3);
    float *lg = malloc((size_t)n * sizeof *lg), *row = malloc((size_t)n * sizeof *row);
    smp sp;
    smp_params pp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 1};
    if (!lg || !row || smp_init(&sp, n, &pp)) return 1;
    printf("%-14s %8s %10s %10s %10s %8s %10s %8s %7s\n", "grammar", "tokens", "sample us", "mask us", "accept us",
           "cached", "edges", "memo", "ratio");
    uint64_t seed = 5;
    for (size_t gi = 0; gi < sizeof GRAMMARS / sizeof GRAMMARS[0]; gi++) {
        gr_grammar *g = NULL;
        if (compile(v, (int)gi, &g)) return 1;
        double ts = 0, tm = 0, ta = 0;
        long done = 0;
        gr_stats tot = {0};
        while (done < tokens) {
            gr_state *s = NULL;
            if (gr_state_new(g, &s)) return 1;
            for (int step = 0; step < 400 && done < tokens && !gr_state_done(s); step++) {
                fill_logits(lg, n, &seed);
                memcpy(row, lg, (size_t)n * sizeof *row);
                double a = cpu_s();
                (void)smp_sample(&sp, row); /* the plain step, on an unmasked row */
                double b = cpu_s();
                int na = gr_state_mask(s, lg);
                double c = cpu_s();
                if (na <= 0) break;
                int32_t id = smp_sample(&sp, lg);
                double d = cpu_s();
                if (gr_state_accept(s, id)) {
                    fprintf(stderr, "%s: sampled a refused token %d\n", GRAMMARS[gi].name, id);
                    return 1;
                }
                double e = cpu_s();
                ts += b - a;
                tm += c - b;
                ta += e - d;
                done++;
                if (id == tok_eos(t)) break;
            }
            gr_stats st;
            gr_state_stats(s, &st);
            tot.masks += st.masks;
            tot.cache_hits += st.cache_hits;
            tot.trie_nodes += st.trie_nodes;
            tot.memo_hits += st.memo_hits;
            gr_state_free(s);
        }
        uint64_t walks = tot.masks - tot.cache_hits;
        printf("%-14s %8ld %10.1f %10.1f %10.2f %7.0f%% %10.0f %7.0f%% %6.2fx\n", GRAMMARS[gi].name, done,
               ts / done * 1e6, tm / done * 1e6, ta / done * 1e6, 100.0 * (double)tot.cache_hits / (double)tot.masks,
               walks ? (double)tot.trie_nodes / (double)walks : 0.0,
               tot.trie_nodes ? 100.0 * (double)tot.memo_hits / (double)tot.trie_nodes : 0.0, (tm + ta) / ts);
        gr_free(g);
    }
    printf("\ncached: masks served from the state's cache; edges: trie edges per computed mask; memo: of\n"
           "those, advances the walk remembered; ratio: (mask + accept) / the plain sampling step\n");
    smp_deinit(&sp);
    free(lg);
    free(row);
    gr_vocab_free(v);
    return 0;
}

/* Decode `tokens` tokens at batch 1; with g, under the grammar (restarting
 * the state whenever it finishes). Returns tokens/s, or < 0 on error. */
static double decode(eng *e, const tok *t, const gr_grammar *g, int tokens, double *mask_share) {
    int n = eng_vocab(e);
    float *lg = malloc((size_t)n * sizeof *lg);
    int32_t table[64], ids[1024];
    for (int i = 0; i < 64; i++) table[i] = i;
    smp sp;
    smp_params pp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 3};
    if (!lg || smp_init(&sp, n, &pp)) return -1;
    gr_state *s = NULL;
    if (g && gr_state_new(g, &s)) return -1;
    double tmask = 0, t0 = clk_mono_s();
    int pos = 0;
    ids[0] = tok_bos(t);
    for (int i = 0; i < tokens; i++) {
        eng_seq q = {ids + pos, 1, pos, table, 64, ENG_LOGITS_LAST};
        eng_batch b = {&q, 1};
        if (eng_forward(e, &b, lg)) return -1;
        if (s) {
            double a = clk_mono_s();
            if (gr_state_done(s) || gr_state_mask(s, lg) <= 0) {
                gr_state_free(s);
                if (gr_state_new(g, &s)) return -1;
                gr_state_mask(s, lg);
            }
            tmask += clk_mono_s() - a;
        }
        int32_t id = smp_sample(&sp, lg);
        if (s) {
            double a = clk_mono_s();
            if (gr_state_accept(s, id)) return -1;
            tmask += clk_mono_s() - a;
        }
        ids[++pos] = id;
        if (pos >= 1000) pos = 0; /* rewrite the same positions */
    }
    double dt = clk_mono_s() - t0;
    if (mask_share) *mask_share = tmask / dt;
    gr_state_free(s);
    smp_deinit(&sp);
    free(lg);
    return tokens / dt;
}

static int end_to_end(int tokens) {
    mkmodel_spec spec;
    char path[256], err[256];
    mkmodel_preset("15m", &spec);
    snprintf(path, sizeof path, "/tmp/tessera-bench-grammar-%d.gguf", (int)getpid());
    if (mkmodel_write(&spec, path, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    model *m = NULL;
    int rc = model_load(path, &m, err, sizeof err);
    unlink(path);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    tok *t = NULL;
    if (tok_new_from_gguf(m->gguf, &t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    /* One compute thread: on a shared machine a team of spinning threads
     * measures the neighbours more than the model. */
    eng_opts o = {.block_size = 16, .max_batch_tokens = 64, .max_seqs = 1, .n_threads = 1};
    o.kv_pool_bytes = eng_kv_token_bytes(m, &o) * 64 * 16;
    eng *e = NULL;
    if (eng_new(m, &o, &e, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gr_vocab *v = NULL;
    gr_grammar *g = NULL;
    if (gr_vocab_new(t, &v) || compile(v, 0, &g)) return 1;
    (void)decode(e, t, NULL, 16, NULL); /* warm the weights */
    /* Alternate the two, three rounds each, and keep each one's best: the
     * machine's other load then hurts both alike. */
    double share = 0, free_tps = 0, gr_tps = 0;
    for (int round = 0; round < 3; round++) {
        double sh = 0, a = decode(e, t, NULL, tokens, NULL), b = decode(e, t, g, tokens, &sh);
        if (a < 0 || b < 0) return 1;
        if (a > free_tps) free_tps = a;
        if (b > gr_tps) gr_tps = b, share = sh;
    }
    printf("\n15m f32, batch 1, %d tokens, best of 3: free %.0f tokens/s, under the json_object grammar %.0f tokens/s "
           "(%+.1f%%); masking and accepting took %.1f%% of the constrained run\n",
           tokens, free_tps, gr_tps, 100.0 * (gr_tps / free_tps - 1.0), share * 100.0);
    gr_free(g);
    gr_vocab_free(v);
    eng_free(e);
    tok_free(t);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    int tokens = 3000, model_part = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-model")) model_part = 0;
        else {
            fprintf(stderr, "usage: bench_grammar [--tokens N] [--no-model]\n");
            return 2;
        }
    }
    if (tokens < 1) tokens = 1;
    mkmodel_spec spec;
    mkmodel_preset("15m", &spec);
    vocab_synth_out vs;
    if (vocab_synth((uint32_t)spec.vocab, &vs)) return 1;
    tok_spec ts = {.model = TOK_MODEL_SPM, .n_vocab = vs.n, .tokens = (const char *const *)vs.tokens,
                   .scores = vs.scores, .types = vs.types, .bos = vs.bos, .eos = vs.eos, .unk = vs.unk,
                   .add_bos = 1, .add_space_prefix = 1};
    tok *t = NULL;
    char err[256];
    if (tok_new(&ts, &t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    vocab_synth_free(&vs);
    int rc = per_token(t, tokens);
    tok_free(t);
    if (!rc && model_part) rc = end_to_end(tokens < 500 ? tokens : 500);
    return rc;
}
