/*
 * mkmodel.h - write deterministic random-weight llama-family GGUF models.
 *
 * The demo, the tests and the benchmarks need real GGUF files of known shape
 * without downloading anything. These models have the exact structure of a
 * trained llama (or qwen2) checkpoint, a real SentencePiece byte-fallback
 * vocabulary, and weights drawn from a seeded generator: the same spec gives
 * the same bytes on every machine. Their text is gibberish; any trained
 * llama/qwen2 GGUF works in their place.
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
    const char *arch;       /* "llama" or "qwen2" (adds q/k/v biases) */
    int dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int ffn_dim;
    int vocab;
    int ctx_len;
    float rope_base;
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
/* Check a spec's dimensions; 0 or TS_ERR_INVAL with a message. */
int mkmodel_check(const mkmodel_spec *s, char *err, size_t errlen);
int mkmodel_write(const mkmodel_spec *s, const char *path, char *err, size_t errlen);

#endif
