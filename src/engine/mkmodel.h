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
    int tied;               /* 1: no output.weight, logits use the embedding */
    uint64_t seed;
} mkmodel_spec;

/* Fill *out with a named preset ("tiny", "15m", "110m") in f32. */
int mkmodel_preset(const char *name, mkmodel_spec *out);
/* Check a spec's dimensions; 0 or TS_ERR_INVAL with a message. */
int mkmodel_check(const mkmodel_spec *s, char *err, size_t errlen);
int mkmodel_write(const mkmodel_spec *s, const char *path, char *err, size_t errlen);

#endif
