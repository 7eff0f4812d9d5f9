/*
 * cmd_mkmodel.c - `tessera mkmodel OUT.gguf [options]`: write a synthetic
 * model (see engine/mkmodel.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "err.h"
#include "gguf.h"
#include "mkmodel.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera mkmodel OUT.gguf [--preset tiny|15m|110m] [--type f32|f16|bf16|q8_0]\n"
            "                       [--arch llama|qwen2] [--dims N] [--layers N] [--heads N]\n"
            "                       [--kv-heads N] [--ffn N] [--vocab N] [--ctx N] [--tied] [--seed N]\n"
            "Writes a deterministic llama-architecture GGUF with random weights and a real\n"
            "SentencePiece byte-fallback vocabulary. Its text is gibberish: it exists so the\n"
            "demo, tests and benchmarks run anywhere. Any llama/qwen2 GGUF works in its place.\n"
            "Presets: tiny (dim 64, 2 layers), 15m (dim 288, 6 layers), 110m (dim 768, 12 layers).\n");
}

static int parse_type(const char *s, uint32_t *t) {
    static const struct { const char *name; uint32_t type; } types[] = {
        {"f32", GGUF_TT_F32}, {"f16", GGUF_TT_F16}, {"bf16", GGUF_TT_BF16}, {"q8_0", GGUF_TT_Q8_0}};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(s, types[i].name) == 0) {
            *t = types[i].type;
            return 0;
        }
    return -1;
}

/* Strict integer parse: the whole string, within [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"type", required_argument, 0, 't'},
        {"arch", required_argument, 0, 'a'},   {"dims", required_argument, 0, 'd'},
        {"layers", required_argument, 0, 'l'}, {"heads", required_argument, 0, 'H'},
        {"kv-heads", required_argument, 0, 'k'}, {"ffn", required_argument, 0, 'f'},
        {"vocab", required_argument, 0, 'v'},  {"ctx", required_argument, 0, 'c'},
        {"seed", required_argument, 0, 's'},   {"tied", no_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    mkmodel_spec s;
    mkmodel_preset("tiny", &s);
    /* The preset sets the base; later options override single fields, in
     * any order, so find --preset first. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--preset") == 0 && mkmodel_preset(argv[i + 1], &s)) {
            fprintf(stderr, "mkmodel: unknown preset '%s' (tiny, 15m, 110m)\n", argv[i + 1]);
            return 2;
        }
    int c, bad = 0, kv_set = 0;
    long seed;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': break;
        case 't': bad |= parse_type(optarg, &s.type); break;
        case 'a': s.arch = optarg; break;
        case 'd': bad |= parse_int(optarg, 1, 1 << 20, &s.dim); break;
        case 'l': bad |= parse_int(optarg, 1, 1 << 20, &s.n_layers); break;
        case 'H': bad |= parse_int(optarg, 1, 1 << 20, &s.n_heads); break;
        case 'k': bad |= parse_int(optarg, 1, 1 << 20, &s.n_kv_heads); kv_set = 1; break;
        case 'f': bad |= parse_int(optarg, 1, 1 << 24, &s.ffn_dim); break;
        case 'v': bad |= parse_int(optarg, 1, 1 << 24, &s.vocab); break;
        case 'c': bad |= parse_int(optarg, 1, 1 << 24, &s.ctx_len); break;
        case 'T': s.tied = 1; break;
        case 's':
            seed = strtol(optarg, NULL, 10);
            s.seed = (uint64_t)seed;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "mkmodel: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (!kv_set && s.n_heads % s.n_kv_heads) s.n_kv_heads = s.n_heads;
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    char err[256];
    int rc = mkmodel_write(&s, argv[optind], err, sizeof(err));
    if (rc) {
        fprintf(stderr, "mkmodel: %s\n", err);
        return 1;
    }
    fprintf(stderr, "mkmodel: wrote %s (%s, dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, %s)\n",
            argv[optind], s.arch, s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.ffn_dim, s.vocab,
            gguf_type_name(s.type));
    return 0;
}
