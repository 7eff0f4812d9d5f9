/*
 * mkmodel.c - see mkmodel.h.
 *
 * Weights are uniform in [-1, 1] / sqrt(fan_in) (embeddings in [-0.5, 0.5]),
 * which keeps activations O(1) through any depth, so logits are neither
 * saturated nor flat and greedy decoding is not trivially constant. Norm
 * weights are 1 plus a little noise so a kernel that ignored them would
 * show up in the reference comparison.
 */
#include "mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gguf.h"
#include "ops.h"
#include "rng.h"
#include "vocab.h"

int mkmodel_preset(const char *name, mkmodel_spec *o) {
    memset(o, 0, sizeof(*o));
    o->arch = "llama";
    o->rope_base = 10000.0f;
    o->type = GGUF_TT_F32;
    o->seed = 1;
    o->ctx_len = 2048;
    o->vocab = 32000;
    if (strcmp(name, "tiny") == 0) {
        o->dim = 64; o->n_layers = 2; o->n_heads = 4; o->n_kv_heads = 2; o->ffn_dim = 192;
        o->vocab = 512; o->ctx_len = 512;
    } else if (strcmp(name, "15m") == 0) {
        o->dim = 288; o->n_layers = 6; o->n_heads = 6; o->n_kv_heads = 6; o->ffn_dim = 768;
    } else if (strcmp(name, "110m") == 0) {
        o->dim = 768; o->n_layers = 12; o->n_heads = 12; o->n_kv_heads = 12; o->ffn_dim = 2048;
    } else {
        return TS_ERR_INVAL;
    }
    return 0;
}

int mkmodel_check(const mkmodel_spec *s, char *err, size_t errlen) {
    if (strcmp(s->arch, "llama") && strcmp(s->arch, "qwen2"))
        return err_set(err, errlen, TS_ERR_INVAL, "arch must be llama or qwen2, not '%s'", s->arch);
    if (s->dim < 32 || s->dim > 16384 || s->n_layers < 1 || s->n_layers > 256 || s->n_heads < 1 ||
        s->n_kv_heads < 1 || s->ffn_dim < 32 || s->ffn_dim > 65536 || s->vocab < 300 ||
        s->vocab > 1000000 || s->ctx_len < 16 || s->ctx_len > (1 << 20))
        return err_set(err, errlen, TS_ERR_INVAL,
                       "dimensions out of range (dim 32..16384, layers 1..256, ffn 32..65536, "
                       "vocab 300..1000000, context 16..1048576)");
    if (s->dim % s->n_heads || (s->dim / s->n_heads) % 2 || s->n_heads % s->n_kv_heads)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "dim %d must split into %d heads of even size, grouped over %d kv heads", s->dim,
                       s->n_heads, s->n_kv_heads);
    if (s->type == GGUF_TT_Q8_0 && (s->dim % 32 || s->ffn_dim % 32))
        return err_set(err, errlen, TS_ERR_INVAL, "q8_0 needs dim and ffn divisible by 32");
    if (!gguf_type_name(s->type)) return err_set(err, errlen, TS_ERR_INVAL, "unsupported type %u", s->type);
    return 0;
}

/* Uniform in [-1, 1) from a splitmix64 stream: tiny, seedable, and the
 * same on every machine, so a preset and a seed name one model. */
static float uniform(uint64_t *st) {
    return (float)((double)(rng_splitmix64(st) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Encode n f32 values as type into a fresh buffer; frees src. */
static void *encode(float *src, uint64_t n, uint32_t type, uint64_t *nbytes) {
    if (type == GGUF_TT_F32) {
        *nbytes = n * 4;
        return src;
    }
    *nbytes = gguf_row_bytes(type, n);
    void *dst = malloc(*nbytes ? *nbytes : 1);
    if (dst) {
        if (type == GGUF_TT_Q8_0) {
            ops_quantize_q8_0(dst, src, (int64_t)n);
        } else {
            uint16_t *h = dst;
            for (uint64_t i = 0; i < n; i++)
                h[i] = type == GGUF_TT_F16 ? ops_f32_to_f16(src[i]) : ops_f32_to_bf16(src[i]);
        }
    }
    free(src);
    return dst;
}

/* Adds a (rows, cols) matrix, or a vector when rows == 0, drawn as
 * center + scale * U[-1, 1). Vectors are always f32. */
static int add_tensor(gguf_writer *w, const char *name, int rows, int cols, float center, float scale,
                      uint32_t type, uint64_t *st) {
    uint64_t n = (uint64_t)(rows ? rows : 1) * (uint64_t)cols, nbytes;
    float *v = malloc(n * sizeof(float));
    if (!v) return TS_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) v[i] = center + scale * uniform(st);
    void *data = encode(v, n, rows ? type : GGUF_TT_F32, &nbytes);
    if (!data) return TS_ERR_NOMEM;
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    return gguf_writer_take_tensor(w, name, rows ? type : GGUF_TT_F32, rows ? 2 : 1, ne, data, nbytes);
}

static int add_metadata(gguf_writer *w, const mkmodel_spec *s) {
    char k[96];
    int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof(k), "%s.%s", s->arch, suffix), k)
    rc |= gguf_writer_add_str(w, "general.architecture", s->arch);
    rc |= gguf_writer_add_str(w, "general.name", "tessera synthetic model (random weights)");
    rc |= gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)s->ctx_len);
    rc |= gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->dim);
    rc |= gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->n_layers);
    rc |= gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->ffn_dim);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->n_heads);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    rc |= gguf_writer_add_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc |= gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
    rc |= gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)(s->dim / s->n_heads));
#undef KEY
    return rc ? TS_ERR_NOMEM : 0;
}

static int add_vocab(gguf_writer *w, const mkmodel_spec *s) {
    vocab_synth_out v;
    int rc = vocab_synth((uint32_t)s->vocab, &v);
    if (rc) return rc;
    rc |= gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    rc |= gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, v.n);
    rc |= gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", v.scores, v.n);
    rc |= gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", v.types, v.n);
    rc |= gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    rc |= gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc |= gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    rc |= gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 1);
    rc |= gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", 1);
    vocab_synth_free(&v);
    return rc ? TS_ERR_NOMEM : 0;
}

static int add_layer(gguf_writer *w, const mkmodel_spec *s, int l, uint64_t *st) {
    int hd = s->dim / s->n_heads, qd = s->n_heads * hd, kvd = s->n_kv_heads * hd;
    float sd = 1.0f / sqrtf((float)s->dim), sf = 1.0f / sqrtf((float)s->ffn_dim);
    char n[96];
    int rc = 0;
#define NAME(x) (snprintf(n, sizeof(n), "blk.%d.%s", l, x), n)
    rc = rc ? rc : add_tensor(w, NAME("attn_norm.weight"), 0, s->dim, 1.0f, 0.1f, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("attn_q.weight"), qd, s->dim, 0, sd, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("attn_k.weight"), kvd, s->dim, 0, sd, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("attn_v.weight"), kvd, s->dim, 0, sd, s->type, st);
    if (strcmp(s->arch, "qwen2") == 0) {
        rc = rc ? rc : add_tensor(w, NAME("attn_q.bias"), 0, qd, 0, 0.1f, s->type, st);
        rc = rc ? rc : add_tensor(w, NAME("attn_k.bias"), 0, kvd, 0, 0.1f, s->type, st);
        rc = rc ? rc : add_tensor(w, NAME("attn_v.bias"), 0, kvd, 0, 0.1f, s->type, st);
    }
    rc = rc ? rc : add_tensor(w, NAME("attn_output.weight"), s->dim, qd, 0, 1.0f / sqrtf((float)qd), s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("ffn_norm.weight"), 0, s->dim, 1.0f, 0.1f, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("ffn_gate.weight"), s->ffn_dim, s->dim, 0, sd, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("ffn_up.weight"), s->ffn_dim, s->dim, 0, sd, s->type, st);
    rc = rc ? rc : add_tensor(w, NAME("ffn_down.weight"), s->dim, s->ffn_dim, 0, sf, s->type, st);
#undef NAME
    return rc;
}

int mkmodel_write(const mkmodel_spec *s, const char *path, char *err, size_t errlen) {
    int rc = mkmodel_check(s, err, errlen);
    if (rc) return rc;
    gguf_writer *w = gguf_writer_new();
    if (!w) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    uint64_t st = s->seed * 0x2545F4914F6CDD1Dull + 1;
    rc = add_metadata(w, s);
    if (!rc) rc = add_vocab(w, s);
    if (!rc) rc = add_tensor(w, "token_embd.weight", s->vocab, s->dim, 0, 0.5f, s->type, &st);
    for (int l = 0; !rc && l < s->n_layers; l++) rc = add_layer(w, s, l, &st);
    if (!rc) rc = add_tensor(w, "output_norm.weight", 0, s->dim, 1.0f, 0.1f, s->type, &st);
    if (!rc && !s->tied)
        rc = add_tensor(w, "output.weight", s->vocab, s->dim, 0, 1.0f / sqrtf((float)s->dim), s->type, &st);
    if (rc) err_set(err, errlen, rc, "building the model: %s", err_str(rc));
    else rc = gguf_writer_write(w, path, err, errlen);
    gguf_writer_free(w);
    return rc;
}
