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
            "usage: tessera mkmodel OUT.gguf [--preset tiny|15m|20m|110m] [--type TYPE]\n"
            "                       [--tensor-type PATTERN=TYPE]...\n"
            "                       [--arch llama|llama3|qwen2|qwen3|gemma3|phi3] [--dims N]\n"
            "                       [--layers N] [--heads N] [--kv-heads N] [--head-dim N] [--rot N]\n"
            "                       [--ffn N] [--vocab N] [--ctx N] [--rope-base F] [--rope-scale F]\n"
            "                       [--window N] [--tied] [--seed N]\n"
            "Writes a deterministic GGUF with random weights and a real SentencePiece\n"
            "byte-fallback vocabulary. Its text is gibberish: it exists so the demo, tests and\n"
            "benchmarks run anywhere. Any GGUF of the same architecture works in its place.\n"
            "Presets: tiny (dim 64, 2 layers), 15m (dim 288, 6 layers), 20m (dim 256, 6 layers,\n"
            "rows whole K-quant blocks), 110m (dim 768, 12 layers).\n"
            "  --arch         llama (default); llama3: llama with Llama 3.1's rope_freqs divisors,\n"
            "                 rope base 500000, context 131072; qwen2: q/k/v biases; qwen3: q/k\n"
            "                 norms, heads of 2 * dims / heads; gemma3: q/k and post norms, GeGLU,\n"
            "                 heads of 2 * dims / heads, a sliding window of 8 on 5 of each 6\n"
            "                 layers, rope scale 8 on the others, tied output; phi3: fused\n"
            "                 attn_qkv and ffn_up, rotary over 3/4 of each head\n"
            "  --head-dim     attention.key_length (default: the arch's)\n"
            "  --rot          rope.dimension_count, the rotated part of a head (even)\n"
            "  --rope-scale   linear rope scaling factor (rope.scaling.type linear; 0: none)\n"
            "  --window       gemma3's sliding window in positions (0: none)\n"
            "  --type         the type of every weight matrix (default f32): f32, f16, bf16,\n"
            "                 q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (rows a multiple of 32),\n"
            "                 q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs (rows a multiple of 256);\n"
            "                 norms and biases are always f32\n"
            "  --tensor-type  give the matrices PATTERN names their own TYPE, as quantized\n"
            "                 checkpoints mix types (Q4_K_M keeps attn_v apart). PATTERN is a\n"
            "                 shell glob on the full tensor name (blk.0.attn_v.weight, blk.1.*)\n"
            "                 or on its role, the name without blk.N. and .weight (attn_v,\n"
            "                 ffn_*, output, token_embd). Repeatable, at most %d; the last\n"
            "                 matching one wins; one that matches no matrix is an error.\n"
            "                 The same seed draws the same weights whatever the types, e.g.\n"
            "                 --type q4_K --tensor-type attn_v=q6_K --tensor-type output=q6_K\n"
            "                 (the mix of llama.cpp's Q4_K_M)\n",
            MKMODEL_MAX_OVERRIDES);
}

/* PATTERN=TYPE. On success the pattern points into s, cut at the '='; on
 * failure s is left whole for the message. */
static int parse_override(char *s, mkmodel_override *o) {
    char *eq = strrchr(s, '=');
    if (!eq || eq == s || gguf_type_from_name(eq + 1, &o->type)) return -1;
    *eq = '\0';
    o->pattern = s;
    return 0;
}

/* Strict integer parse: the whole string, within [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The value of option opt when argv[i] is "opt VALUE" or "opt=VALUE"
 * (getopt_long takes both), else NULL. */
static const char *prescan(int argc, char **argv, int i, const char *opt) {
    size_t n = strlen(opt);
    if (strncmp(argv[i], opt, n)) return NULL;
    if (argv[i][n] == '=') return argv[i] + n + 1;
    return !argv[i][n] && i + 1 < argc ? argv[i + 1] : NULL;
}

/* Strict float parse: the whole string, within [lo, hi]. */
static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi)) return -1;
    *out = (float)v;
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"type", required_argument, 0, 't'},
        {"tensor-type", required_argument, 0, 'y'},
        {"arch", required_argument, 0, 'a'},   {"dims", required_argument, 0, 'd'},
        {"layers", required_argument, 0, 'l'}, {"heads", required_argument, 0, 'H'},
        {"kv-heads", required_argument, 0, 'k'}, {"ffn", required_argument, 0, 'f'},
        {"vocab", required_argument, 0, 'v'},  {"ctx", required_argument, 0, 'c'},
        {"seed", required_argument, 0, 's'},   {"tied", no_argument, 0, 'T'},
        {"head-dim", required_argument, 0, 'D'}, {"rot", required_argument, 0, 'R'},
        {"window", required_argument, 0, 'W'}, {"rope-scale", required_argument, 0, 'S'},
        {"rope-base", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    mkmodel_spec s;
    mkmodel_override ov[MKMODEL_MAX_OVERRIDES];
    mkmodel_preset("tiny", &s);
    /* The preset sets the base and the arch its defaults; later options
     * override single fields, in any order, so find --preset, then --arch,
     * first. */
    const char *v;
    for (int i = 1; i < argc; i++)
        if ((v = prescan(argc, argv, i, "--preset")) && mkmodel_preset(v, &s)) {
            fprintf(stderr, "mkmodel: unknown preset '%s' (tiny, 15m, 20m, 110m)\n", v);
            return 2;
        }
    for (int i = 1; i < argc; i++)
        if ((v = prescan(argc, argv, i, "--arch")) && mkmodel_arch(&s, v)) {
            fprintf(stderr, "mkmodel: unknown arch '%s' (llama, llama3, qwen2, qwen3, gemma3, phi3)\n", v);
            return 2;
        }
    s.overrides = ov;
    int c, bad = 0, kv_set = 0;
    long seed;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': break;
        case 't': bad |= gguf_type_from_name(optarg, &s.type) ? -1 : 0; break;
        case 'y':
            if (s.n_overrides == MKMODEL_MAX_OVERRIDES) {
                fprintf(stderr, "mkmodel: more than %d --tensor-type options\n", MKMODEL_MAX_OVERRIDES);
                return 2;
            }
            bad |= parse_override(optarg, &ov[s.n_overrides++]);
            break;
        case 'a': break; /* taken above */
        case 'D': bad |= parse_int(optarg, 1, 1 << 20, &s.head_dim); break;
        case 'R': bad |= parse_int(optarg, 1, 1 << 20, &s.n_rot); break;
        case 'W': bad |= parse_int(optarg, 0, 1 << 24, &s.swa_window); break;
        case 'S': bad |= parse_float(optarg, 0.0, 1e6, &s.rope_scale); break;
        case 'B': bad |= parse_float(optarg, 1.0, 1e12, &s.rope_base); break;
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
    fprintf(stderr, "mkmodel: wrote %s (%s, dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, %s", argv[optind],
            s.arch, s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.ffn_dim, s.vocab, gguf_type_name(s.type));
    for (int i = 0; i < s.n_overrides; i++)
        fprintf(stderr, "%s%s %s", i ? ", " : "; ", ov[i].pattern, gguf_type_name(ov[i].type));
    fprintf(stderr, ")\n");
    return 0;
}
