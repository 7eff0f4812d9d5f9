/*
 * mkmodel.h - write deterministic random-weight GGUF models of every
 * architecture model.h loads.
 *
 * The demo, the tests and the benchmarks need real GGUF files of known shape
 * without downloading anything. These models have the exact structure of a
 * trained checkpoint as llama.cpp's converter writes it (llama, Llama 3.1
 * with rope_freqs, qwen2, qwen3, gemma3, phi3), a real SentencePiece
 * byte-fallback vocabulary, and weights drawn from a seeded generator: the
 * same spec gives the same bytes on every machine. Their text is gibberish;
 * any trained GGUF of those architectures works in their place. Each
 * architecture's defaults exercise its features at tiny sizes (a head size
 * other than dim / heads, a sliding window shorter than a test prompt,
 * partial rotary, non-trivial rope divisors).
 */
#ifndef TS_MKMODEL_H
#define TS_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

#define MKMODEL_MAX_OVERRIDES 16

/* The type of the matrices a pattern names, over the spec's type: how a
 * file mixes types per tensor, as quantized checkpoints do (Q4_K_M keeps
 * attn_v and ffn_down of some layers in Q6_K beside Q4_K). */
typedef struct mkmodel_override {
    const char *pattern;    /* fnmatch glob on a matrix's full name
                             * ("blk.0.attn_v.weight", "blk.1.*") or on its
                             * role, the name without "blk.N." and ".weight"
                             * ("attn_v", "ffn_*", "output", "token_embd") */
    uint32_t type;          /* GGUF_TT_* */
} mkmodel_override;

typedef struct mkmodel_spec {
    const char *arch;       /* "llama", "llama3" (GGUF arch llama with a
                             * rope_freqs tensor of Llama 3.1's divisors),
                             * "qwen2" (q/k/v biases), "qwen3", "gemma3", "phi3" */
    int dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int ffn_dim;
    int vocab;
    int ctx_len;
    float rope_base;
    int head_dim;           /* attention.key_length; 0: the arch's default
                             * (2 * dim / n_heads for qwen3 and gemma3, else
                             * dim / n_heads) */
    int n_rot;              /* rope.dimension_count; 0: the arch's default
                             * (3/4 of the head, even, for phi3, else all of it) */
    int swa_window;         /* gemma3's attention.sliding_window (0: none) */
    float rope_scale;       /* > 0: rope.scaling.type linear with this factor
                             * (gemma3: on its global layers) */
    uint32_t type;          /* GGUF_TT_* of the matrices; vectors stay f32 */
    const mkmodel_override *overrides; /* (n_overrides) per-matrix types over
                             * type; the last matching entry wins, and an
                             * entry that matches no matrix is an error */
    int n_overrides;        /* 0..MKMODEL_MAX_OVERRIDES */
    int tied;               /* 1: no output.weight, logits use the embedding */
    uint64_t seed;
} mkmodel_spec;

/* Fill *out with a named preset ("tiny", "15m", "110m") in f32. */
int mkmodel_preset(const char *name, mkmodel_spec *out);
/* Set s->arch to name and that architecture's defaults: rope base, context
 * length (llama3: 131072), sliding window 8 and rope scale 8 (gemma3, tied
 * output), leaving head_dim and n_rot at 0 (the arch's rule at write
 * time). TS_ERR_INVAL for an unknown name. */
int mkmodel_arch(mkmodel_spec *s, const char *name);
/* Check a spec's dimensions; 0 or TS_ERR_INVAL with a message. */
int mkmodel_check(const mkmodel_spec *s, char *err, size_t errlen);
int mkmodel_write(const mkmodel_spec *s, const char *path, char *err, size_t errlen);

#endif
