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

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gguf.h"
#include "ops.h"
#include "quant.h"
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
    } else if (strcmp(name, "20m") == 0) {
        /* 15m's shape with every row a whole K-quant super-block of 256 */
        o->dim = 256; o->n_layers = 6; o->n_heads = 8; o->n_kv_heads = 8; o->ffn_dim = 768;
    } else if (strcmp(name, "110m") == 0) {
        o->dim = 768; o->n_layers = 12; o->n_heads = 12; o->n_kv_heads = 12; o->ffn_dim = 2048;
    } else {
        return TS_ERR_INVAL;
    }
    return 0;
}

/* mkmodel's architectures and the GGUF general.architecture each writes. */
static const struct {
    const char *name, *gguf;
} ARCHS[] = {{"llama", "llama"}, {"llama3", "llama"}, {"qwen2", "qwen2"},
             {"qwen3", "qwen3"}, {"gemma3", "gemma3"}, {"phi3", "phi3"}};
#define N_ARCHS (int)(sizeof(ARCHS) / sizeof(ARCHS[0]))

static const char *gguf_arch(const char *name) {
    for (int i = 0; i < N_ARCHS; i++)
        if (name && strcmp(name, ARCHS[i].name) == 0) return ARCHS[i].gguf;
    return NULL;
}

static int is_arch(const mkmodel_spec *s, const char *name) { return strcmp(s->arch, name) == 0; }

int mkmodel_arch(mkmodel_spec *s, const char *name) {
    int i;
    for (i = 0; i < N_ARCHS && strcmp(name, ARCHS[i].name); i++) {}
    if (i == N_ARCHS) return TS_ERR_INVAL;
    s->arch = ARCHS[i].name;
    s->head_dim = s->n_rot = s->swa_window = 0;
    s->rope_scale = 0.0f;
    if (is_arch(s, "llama3")) {
        s->rope_base = 500000.0f;
        s->ctx_len = 131072;
    } else if (is_arch(s, "qwen3")) {
        s->rope_base = 1000000.0f;
    } else if (is_arch(s, "gemma3")) {
        s->rope_base = 1000000.0f; /* the global layers'; the local ones use 10000 */
        s->swa_window = 8;
        s->rope_scale = 8.0f;      /* as Gemma 3 4B..27B */
        s->tied = 1;
    }
    return 0;
}

/* The head size and rotary width a spec gets: its own, else the arch's
 * default (qwen3 and gemma3 heads twice dim / n_heads, as Qwen3-0.6B's
 * 128 beside 1024 / 16; phi3 rotating 3/4 of each head, as Phi-4-mini). */
static int spec_head_dim(const mkmodel_spec *s) {
    if (s->head_dim) return s->head_dim;
    return (is_arch(s, "qwen3") || is_arch(s, "gemma3") ? 2 : 1) * s->dim / s->n_heads;
}

static int spec_n_rot(const mkmodel_spec *s) {
    int hd = spec_head_dim(s);
    if (s->n_rot) return s->n_rot;
    if (is_arch(s, "phi3")) return hd * 3 / 4 / 2 * 2 > 2 ? hd * 3 / 4 / 2 * 2 : 2;
    return hd;
}

int mkmodel_check(const mkmodel_spec *s, char *err, size_t errlen) {
    if (!gguf_arch(s->arch))
        return err_set(err, errlen, TS_ERR_INVAL, "arch must be llama, llama3, qwen2, qwen3, gemma3 or phi3, not '%s'",
                       s->arch ? s->arch : "(none)");
    if (s->dim < 32 || s->dim > 16384 || s->n_layers < 1 || s->n_layers > 256 || s->n_heads < 1 ||
        s->n_kv_heads < 1 || s->ffn_dim < 32 || s->ffn_dim > 65536 || s->vocab < 300 ||
        s->vocab > 1000000 || s->ctx_len < 16 || s->ctx_len > (1 << 20) || s->n_heads > s->dim)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "dimensions out of range (dim 32..16384, layers 1..256, heads up to dim, ffn 32..65536, "
                       "vocab 300..1000000, context 16..1048576)");
    if ((!s->head_dim && s->dim % s->n_heads) || s->n_heads % s->n_kv_heads)
        return err_set(err, errlen, TS_ERR_INVAL, "dim %d must split into %d heads, grouped over %d kv heads",
                       s->dim, s->n_heads, s->n_kv_heads);
    const int hd = spec_head_dim(s), rot = spec_n_rot(s);
    if (hd < 2 || hd > 1024 || hd % 2 || (int64_t)hd * s->n_heads > 65536 || rot < 2 || rot > hd || rot % 2)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "head size %d must be even, 2..1024 (times %d heads at most 65536), rotary width %d even "
                       "and within it",
                       hd, s->n_heads, rot);
    if (s->swa_window < 0 || s->swa_window > s->ctx_len || (s->swa_window && !is_arch(s, "gemma3")))
        return err_set(err, errlen, TS_ERR_INVAL, "sliding window %d: gemma3 only, 0..context length",
                       s->swa_window);
    if (!(s->rope_scale == 0.0f || (s->rope_scale >= 1e-3f && s->rope_scale <= 1e6f)) || !(s->rope_base > 0))
        return err_set(err, errlen, TS_ERR_INVAL, "rope scale %g (0 or 0.001..1e6) or base %g out of range",
                       (double)s->rope_scale, (double)s->rope_base);
    if (!gguf_type_name(s->type)) return err_set(err, errlen, TS_ERR_INVAL, "unsupported type %u", s->type);
    if (s->n_overrides < 0 || s->n_overrides > MKMODEL_MAX_OVERRIDES)
        return err_set(err, errlen, TS_ERR_INVAL, "%d tensor-type overrides (at most %d)", s->n_overrides,
                       MKMODEL_MAX_OVERRIDES);
    if (s->n_overrides && !s->overrides)
        return err_set(err, errlen, TS_ERR_INVAL, "%d tensor-type overrides but no array of them", s->n_overrides);
    for (int i = 0; i < s->n_overrides; i++)
        if (!s->overrides[i].pattern || !*s->overrides[i].pattern || !gguf_type_name(s->overrides[i].type))
            return err_set(err, errlen, TS_ERR_INVAL, "tensor-type override %d: empty pattern or unsupported type",
                           i + 1);
    /* Every matrix row is dim or ffn long (qd = dim); Q8_0 rows are whole
     * blocks. Checked per matrix when it is written, since overrides may
     * give any matrix Q8_0. */
    return 0;
}

/* Uniform in [-1, 1) from a splitmix64 stream: tiny, seedable, and the
 * same on every machine, so a preset and a seed name one model. */
static float uniform(uint64_t *st) {
    return (float)((double)(rng_splitmix64(st) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Encode n f32 values as type into a fresh buffer (NULL when out of
 * memory or the type has no quantizer); frees src. */
static void *encode(float *src, uint64_t n, uint32_t type, uint64_t *nbytes) {
    if (type == GGUF_TT_F32) {
        *nbytes = n * 4;
        return src;
    }
    *nbytes = gguf_row_bytes(type, n);
    void *dst = malloc(*nbytes ? *nbytes : 1);
    if (dst && (type == GGUF_TT_F16 || type == GGUF_TT_BF16)) {
        uint16_t *h = dst;
        for (uint64_t i = 0; i < n; i++)
            h[i] = type == GGUF_TT_F16 ? ops_f32_to_f16(src[i]) : ops_f32_to_bf16(src[i]);
    } else if (dst && type == GGUF_TT_Q8_0) {
        ops_quantize_q8_0(dst, src, (int64_t)n);
    } else if (dst && quant_quantize(dst, src, type, (int64_t)n)) {
        free(dst);
        dst = NULL;
    }
    free(src);
    return dst;
}

/* One model being written: the writer, the spec, the weight stream and
 * how often each override matched. */
typedef struct mk_ctx {
    gguf_writer *w;
    const mkmodel_spec *s;
    uint64_t st;                        /* splitmix64 state of the weights */
    int hits[MKMODEL_MAX_OVERRIDES];    /* matrices each override matched */
    char *err;
    size_t errlen;
} mk_ctx;

/* A matrix's role: its name without "blk.N." and ".weight". */
static void matrix_role(char *role, size_t cap, const char *name) {
    const char *p = name;
    if (strncmp(p, "blk.", 4) == 0) {
        const char *q = p + 4;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p + 4 && *q == '.') p = q + 1;
    }
    size_t n = strlen(p);
    if (n >= 7 && strcmp(p + n - 7, ".weight") == 0) n -= 7;
    snprintf(role, cap, "%.*s", (int)n, p);
}

/* The type of matrix name: the last override whose pattern matches its
 * full name or its role, else the spec's type. */
static uint32_t matrix_type(mk_ctx *c, const char *name) {
    char role[96];
    matrix_role(role, sizeof(role), name);
    for (int i = c->s->n_overrides - 1; i >= 0; i--) {
        const mkmodel_override *o = &c->s->overrides[i];
        if (fnmatch(o->pattern, name, 0) == 0 || fnmatch(o->pattern, role, 0) == 0) {
            c->hits[i]++;
            return o->type;
        }
    }
    return c->s->type;
}

/* Adds a (rows, cols) matrix, or a vector when rows == 0, drawn as
 * center + scale * U[-1, 1). Vectors are always f32; matrices take
 * matrix_type. The values drawn do not depend on the type, so one seed
 * gives the same weights in every type, up to each type's rounding. */
static int add_tensor(mk_ctx *c, const char *name, int rows, int cols, float center, float scale) {
    uint32_t type = rows ? matrix_type(c, name) : GGUF_TT_F32;
    if (!gguf_row_bytes(type, (uint64_t)cols))
        return err_set(c->err, c->errlen, TS_ERR_INVAL,
                       "%s: rows of %d elements cannot be %s (blocks of %d; the 20m preset's rows fit the "
                       "K-quants)",
                       name, cols, gguf_type_name(type), gguf_type_block(type));
    uint64_t n = (uint64_t)(rows ? rows : 1) * (uint64_t)cols, nbytes;
    float *v = malloc(n * sizeof(float));
    if (!v) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory for %s", name);
    for (uint64_t i = 0; i < n; i++) v[i] = center + scale * uniform(&c->st);
    void *data = encode(v, n, type, &nbytes);
    if (!data) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory (or no %s writer) for %s",
                              gguf_type_name(type), name);
    uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    int rc = gguf_writer_take_tensor(c->w, name, type, rows ? 2 : 1, ne, data, nbytes);
    return rc ? err_set(c->err, c->errlen, rc, "adding %s: %s", name, err_str(rc)) : 0;
}

static int add_metadata(gguf_writer *w, const mkmodel_spec *s) {
    char k[96];
    int rc = 0;
    const char *arch = gguf_arch(s->arch);
#define KEY(suffix) (snprintf(k, sizeof(k), "%s.%s", arch, suffix), k)
    rc |= gguf_writer_add_str(w, "general.architecture", arch);
    rc |= gguf_writer_add_str(w, "general.name", "tessera synthetic model (random weights)");
    rc |= gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)s->ctx_len);
    rc |= gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->dim);
    rc |= gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->n_layers);
    rc |= gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->ffn_dim);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->n_heads);
    rc |= gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_kv_heads);
    rc |= gguf_writer_add_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc |= gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), is_arch(s, "gemma3") ? 1e-6f : 1e-5f);
    rc |= gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)spec_n_rot(s));
    /* The head size as the converter writes it for archs with their own
     * (qwen3, gemma3), or whenever it is not dim / n_heads. */
    if (is_arch(s, "qwen3") || is_arch(s, "gemma3") || spec_head_dim(s) * s->n_heads != s->dim) {
        rc |= gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)spec_head_dim(s));
        rc |= gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)spec_head_dim(s));
    }
    if (s->swa_window) rc |= gguf_writer_add_u32(w, KEY("attention.sliding_window"), (uint32_t)s->swa_window);
    if (s->rope_scale > 0) {
        rc |= gguf_writer_add_str(w, KEY("rope.scaling.type"), "linear");
        rc |= gguf_writer_add_f32(w, KEY("rope.scaling.factor"), s->rope_scale);
    }
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

/* q, k, v (phi3: one attn_qkv of their rows stacked), biases (qwen2), the
 * per-head q/k norms (qwen3, gemma3), the output projection and gemma3's
 * post-attention norm, in that order of draws. */
static int add_attn(mk_ctx *c, int l) {
    const mkmodel_spec *s = c->s;
    int hd = spec_head_dim(s), qd = s->n_heads * hd, kvd = s->n_kv_heads * hd;
    float sd = 1.0f / sqrtf((float)s->dim);
    char n[96];
    int rc = 0;
#define NAME(x) (snprintf(n, sizeof(n), "blk.%d.%s", l, x), n)
    rc = rc ? rc : add_tensor(c, NAME("attn_norm.weight"), 0, s->dim, 1.0f, 0.1f);
    if (is_arch(s, "phi3")) {
        rc = rc ? rc : add_tensor(c, NAME("attn_qkv.weight"), qd + 2 * kvd, s->dim, 0, sd);
    } else {
        rc = rc ? rc : add_tensor(c, NAME("attn_q.weight"), qd, s->dim, 0, sd);
        rc = rc ? rc : add_tensor(c, NAME("attn_k.weight"), kvd, s->dim, 0, sd);
        rc = rc ? rc : add_tensor(c, NAME("attn_v.weight"), kvd, s->dim, 0, sd);
    }
    if (is_arch(s, "qwen2")) {
        rc = rc ? rc : add_tensor(c, NAME("attn_q.bias"), 0, qd, 0, 0.1f);
        rc = rc ? rc : add_tensor(c, NAME("attn_k.bias"), 0, kvd, 0, 0.1f);
        rc = rc ? rc : add_tensor(c, NAME("attn_v.bias"), 0, kvd, 0, 0.1f);
    }
    if (is_arch(s, "qwen3") || is_arch(s, "gemma3")) {
        rc = rc ? rc : add_tensor(c, NAME("attn_q_norm.weight"), 0, hd, 1.0f, 0.3f);
        rc = rc ? rc : add_tensor(c, NAME("attn_k_norm.weight"), 0, hd, 1.0f, 0.3f);
    }
    rc = rc ? rc : add_tensor(c, NAME("attn_output.weight"), s->dim, qd, 0, 1.0f / sqrtf((float)qd));
    if (is_arch(s, "gemma3")) rc = rc ? rc : add_tensor(c, NAME("post_attention_norm.weight"), 0, s->dim, 1.0f, 0.1f);
    return rc;
}

/* The gated FFN: gate and up (phi3: one ffn_up of 2 * ffn rows, the gate
 * first), down, and gemma3's post-FFN norm. Gemma's norms are drawn
 * around 1 as the converter stores them (1 + the checkpoint's weight). */
static int add_ffn(mk_ctx *c, int l) {
    const mkmodel_spec *s = c->s;
    float sd = 1.0f / sqrtf((float)s->dim), sf = 1.0f / sqrtf((float)s->ffn_dim);
    char n[96];
    int rc = 0;
    rc = rc ? rc : add_tensor(c, NAME("ffn_norm.weight"), 0, s->dim, 1.0f, 0.1f);
    if (is_arch(s, "phi3")) {
        rc = rc ? rc : add_tensor(c, NAME("ffn_up.weight"), 2 * s->ffn_dim, s->dim, 0, sd);
    } else {
        rc = rc ? rc : add_tensor(c, NAME("ffn_gate.weight"), s->ffn_dim, s->dim, 0, sd);
        rc = rc ? rc : add_tensor(c, NAME("ffn_up.weight"), s->ffn_dim, s->dim, 0, sd);
    }
    rc = rc ? rc : add_tensor(c, NAME("ffn_down.weight"), s->dim, s->ffn_dim, 0, sf);
    if (is_arch(s, "gemma3")) rc = rc ? rc : add_tensor(c, NAME("post_ffw_norm.weight"), 0, s->dim, 1.0f, 0.1f);
#undef NAME
    return rc;
}

/* Llama 3.1's rope_freqs as convert_hf_to_gguf computes them for
 * rope_type "llama3" (factor 8, low/high frequency factors 1 and 4): 1
 * for wavelengths under orig / 4, the factor for those over orig, a smooth
 * blend between. Llama 3.1's orig is 8192; here it is 256, so that at a
 * tiny head size the divisors reach frequencies that turn within a test's
 * few dozen positions, and the blend and both ends all occur (head 8,
 * base 500000: 1, 3.56, 8, 8). */
static int add_rope_freqs(mk_ctx *c) {
    const mkmodel_spec *s = c->s;
    const int half = spec_n_rot(s) / 2;
    const double factor = 8.0, lo = 1.0, hi = 4.0, orig = 256.0, pi = 3.14159265358979323846;
    float *v = malloc((size_t)half * sizeof(float));
    if (!v) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory for rope_freqs");
    for (int i = 0; i < half; i++) {
        double wavelen = 2.0 * pi / pow((double)s->rope_base, -2.0 * i / (2.0 * half));
        double smooth = (orig / wavelen - lo) / (hi - lo);
        v[i] = wavelen < orig / hi ? 1.0f
               : wavelen > orig / lo ? (float)factor
                                     : (float)(1.0 / ((1.0 - smooth) / factor + smooth));
    }
    uint64_t ne[1] = {(uint64_t)half};
    int rc = gguf_writer_take_tensor(c->w, "rope_freqs.weight", GGUF_TT_F32, 1, ne, v, (uint64_t)half * 4);
    return rc ? err_set(c->err, c->errlen, rc, "adding rope_freqs.weight: %s", err_str(rc)) : 0;
}

static int add_tensors(mk_ctx *c) {
    const mkmodel_spec *s = c->s;
    /* gemma3 multiplies embeddings by sqrt(dim) and ties the output: drawn
     * at 0.5, a token's own row would dominate its residual stream and
     * every greedy step would repeat the last token. At 1 / sqrt(dim) the
     * scaled embedding is O(1) like the layers' normalized outputs. */
    float se = is_arch(s, "gemma3") ? 1.0f / sqrtf((float)s->dim) : 0.5f;
    int rc = add_tensor(c, "token_embd.weight", s->vocab, s->dim, 0, se);
    for (int l = 0; !rc && l < s->n_layers; l++) {
        rc = add_attn(c, l);
        if (!rc) rc = add_ffn(c, l);
    }
    if (!rc) rc = add_tensor(c, "output_norm.weight", 0, s->dim, 1.0f, 0.1f);
    if (!rc && !s->tied) rc = add_tensor(c, "output.weight", s->vocab, s->dim, 0, 1.0f / sqrtf((float)s->dim));
    if (!rc && is_arch(s, "llama3")) rc = add_rope_freqs(c);
    /* A pattern that names nothing is a typo; writing the file anyway
     * would hand back a model without the mix that was asked for. */
    for (int i = 0; !rc && i < s->n_overrides; i++)
        if (!c->hits[i])
            rc = err_set(c->err, c->errlen, TS_ERR_INVAL,
                         "tensor-type pattern '%s' matches no matrix (full names like blk.0.attn_v.weight, "
                         "roles like attn_v, ffn_*, output, token_embd)",
                         s->overrides[i].pattern);
    return rc;
}

int mkmodel_write(const mkmodel_spec *s, const char *path, char *err, size_t errlen) {
    int rc = mkmodel_check(s, err, errlen);
    if (rc) return rc;
    mk_ctx c = {.w = gguf_writer_new(), .s = s, .st = s->seed * 0x2545F4914F6CDD1Dull + 1, .err = err,
                .errlen = errlen};
    if (!c.w) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    rc = add_metadata(c.w, s);
    if (!rc) rc = add_vocab(c.w, s);
    if (rc) err_set(err, errlen, rc, "building the model: %s", err_str(rc));
    else rc = add_tensors(&c);
    if (!rc) rc = gguf_writer_write(c.w, path, err, errlen);
    gguf_writer_free(c.w);
    return rc;
}
