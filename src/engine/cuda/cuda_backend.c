/*
 * cuda_backend.c - the "cuda" engine backend: cpu_backend.c's forward pass
 * (same architectures, same batch semantics, same paged KV layout) with
 * every phase a CUDA kernel (cuda_kern.h) or a cuBLAS product.
 *
 * What it owns on the device: the model's weights, uploaded once at create
 * in the file's layout (quantized types stay quantized, the kernels
 * dequantize); the activations and scratch sized for max_batch_tokens; the
 * KV pool, refused at create when it does not fit what the device grants
 * this process (free memory, the MPS pinned-memory limit, a MIG slice's
 * memory: cuda_levers.h); and two streams, compute at the highest priority
 * the device offers (band 0, gold: a step carries every band's work, so
 * it is never queued behind another process's low-priority work under
 * MPS) and copy at the lowest, for swaps, with pinned staging buffers.
 *
 * Products: activations of fewer than CU_GEMM_MIN_T rows (decode) go
 * through ck_matvec, which streams each weight row once; more (prefill,
 * big decode batches) through cuBLAS: sgemm for F32, GemmEx on f16/bf16
 * activations for F16/BF16, and for the quantized types GemmEx over f16
 * tiles the kernels dequantize. So, as on the CPU, a token's results
 * depend slightly on the batch it ran in (within the tolerance test_cuda.c
 * holds them to).
 *
 * Errors: every CUDA and cuBLAS call is checked. At create they become the
 * message in err; in forward and the copies (whose slots take no message
 * buffer) TS_ERR_DEVICE and one line on stderr with the call and CUDA's
 * message. A CUDA error that poisons the context (an illegal address)
 * makes every later call fail the same way: the engine must be recreated.
 *
 * The host thread that runs a step need not be the one that created the
 * engine: every entry point selects the device first.
 *
 * NOTHING HERE HAS RUN ON A GPU YET (see docs/CUDA.md).
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_kern.h"
#include "cuda_levers.h"
#include "err.h"
#include "gguf.h"

_Static_assert((int)CK_F32 == (int)GGUF_TT_F32 && (int)CK_F16 == (int)GGUF_TT_F16 &&
                   (int)CK_BF16 == (int)GGUF_TT_BF16 && (int)CK_Q8_0 == (int)GGUF_TT_Q8_0 &&
                   (int)CK_Q4_K == (int)GGUF_TT_Q4_K && (int)CK_Q4_0 == (int)GGUF_TT_Q4_0 &&
                   (int)CK_Q5_0 == (int)GGUF_TT_Q5_0 && (int)CK_Q5_K == (int)GGUF_TT_Q5_K &&
                   (int)CK_Q6_K == (int)GGUF_TT_Q6_K,
               "cuda_kern.h's type ids must be gguf.h's");

#define CU_GEMM_MIN_T 16                    /* activation rows from which products go to cuBLAS */
#define CU_GRAPH_T CU_GEMM_MIN_T            /* steps of fewer tokens replay a captured graph */
#define CU_DQ_TILE_ELEMS ((int64_t)32 << 20) /* f16 elements of a dequantized weight tile (64 MiB) */
#define CU_PIN_BYTES ((size_t)64 << 20)     /* pinned swap staging, two halves */
#define CU_RESERVE_MIN ((uint64_t)256 << 20) /* device bytes left free at least ... */
#define CU_RESERVE_FRAC 50                  /* ... or 1/50 of the device, if more */

typedef struct cu_layer {
    const float *attn_norm, *ffn_norm;      /* (dim) */
    const float *bq, *bk, *bv;              /* biases or NULL */
    const float *q_norm, *k_norm;           /* (head_dim) or NULL */
    const float *attn_post_norm, *ffn_post_norm; /* (dim) or NULL */
    ck_mat wq, wk, wv, wo, w_gate, w_up, w_down;
} cu_layer;

typedef struct cu_state {
    const model *m;
    int dev;                /* CUDA device index */
    int bs, n_blocks, max_T, max_seqs;
    size_t max_tab;         /* block-table entries one step can carry */
    size_t block_floats;    /* floats per KV block */
    cudaStream_t st;        /* compute */
    cudaStream_t copy_st;   /* swaps */
    cublasHandle_t blas;
    void *weights;          /* one allocation: every matrix and vector */
    cu_layer *layers;       /* (n_layers), host array of device pointers */
    ck_mat tok_embd, output;
    const float *out_norm;
    double *inv_freq;       /* (n_rope, n_rot / 2) */
    float *kv;              /* (n_blocks, block_floats) */
    /* activations, (max_T, width) each, as cpu_backend.c */
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
    float *logits;          /* (max_T, vocab) */
    void *xh;               /* f16/bf16 activations for cuBLAS, (max_T, widest n_in) */
    void *wh;               /* a dequantized f16 weight tile, wh_elems */
    int64_t wh_elems;
    int32_t *d_idx, *h_idx; /* step indices: device, pinned host */
    size_t idx_ints;
    char *pin;              /* pinned swap staging: two halves of pin_blocks blocks */
    int pin_blocks;
    cudaEvent_t pin_ev[2];  /* last copy through each half */
    uint64_t dev_bytes;     /* bytes this engine allocated on the device */
    uint64_t kv_bytes;      /* ... of which the KV pool */
    uint64_t total_bytes;   /* the device's memory (a MIG slice's own), as the runtime says */
    cudaEvent_t work_ev[2]; /* around each step's kernels, timed (eng_dev_stats) */
    double compute_s;       /* their elapsed times, summed */
    uint64_t forwards;
    /* A decode step of the 1B shape is ~180 launches of a few us each,
     * about what its weights take to read at HBM speed: so steps of fewer
     * than CU_GRAPH_T tokens (no cuBLAS in them) run as a CUDA graph, one
     * per (tokens, logits rows), captured the first time it is met. Every
     * kernel argument is fixed for a given pair: buffers never move and
     * the step's indices are read from d_idx. TESSERA_CUDA_GRAPHS=0 turns
     * them off (to measure what they buy); a failed capture turns them
     * off with a line on stderr. */
    cudaGraphExec_t graphs[CU_GRAPH_T][CU_GRAPH_T + 1]; /* [T][rows] */
    int graphs_off;
    double mps_thread_pct;  /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in force */
    uint64_t mps_limit;     /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT of this device, 0 = none */
    char msg[384];          /* the last failure */
} cu_state;

/* Record a failed call in s->msg; returns TS_ERR_DEVICE. */
static int cu_fail(cu_state *s, const char *call, const char *why, int line) {
    snprintf(s->msg, sizeof s->msg, "cuda:%d: %s failed: %s (cuda_backend.c:%d)", s->dev, call, why, line);
    return TS_ERR_DEVICE;
}

#define CU(call)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) return cu_fail(s, #call, cudaGetErrorString(e_), __LINE__); \
    } while (0)
#define BL(call)                                                                             \
    do {                                                                                     \
        cublasStatus_t b_ = (call);                                                          \
        if (b_ != CUBLAS_STATUS_SUCCESS) return cu_fail(s, #call, cublasGetStatusString(b_), __LINE__); \
    } while (0)

static int dalloc(cu_state *s, void **p, size_t bytes) {
    CU(cudaMalloc(p, bytes ? bytes : 256));
    s->dev_bytes += bytes;
    return 0;
}

/* ---- weights --------------------------------------------------------------- */

/* Two passes over the model: the first sizes one allocation (each piece
 * 256-byte aligned), the second copies into it. */
typedef struct upload {
    char *base;             /* NULL on the sizing pass */
    size_t off;
} upload;

static int up_bytes(cu_state *s, upload *u, const void *host, size_t bytes, const void **dev) {
    size_t off = u->off;
    u->off += (bytes + 255) & ~(size_t)255;
    if (!u->base) return 0;
    *dev = u->base + off;
    CU(cudaMemcpy(u->base + off, host, bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int up_mat(cu_state *s, upload *u, const ops_mat *w, ck_mat *out, const char *role, int layer) {
    if (!ck_type_supported(w->type)) {
        char where[32] = "";
        if (layer >= 0) snprintf(where, sizeof where, " of layer %d", layer);
        snprintf(s->msg, sizeof s->msg,
                 "the CUDA backend has no kernel for %s (%s%s); it runs f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q5_K "
                 "and q6_K",
                 gguf_type_name(w->type), role, where);
        return TS_ERR_GGUF_TYPE;
    }
    *out = (ck_mat){NULL, w->type, w->n_out, w->n_in};
    return up_bytes(s, u, w->data, ck_row_bytes(w->type, w->n_in) * (size_t)w->n_out, &out->data);
}

static int up_vec(cu_state *s, upload *u, const float *v, int n, const float **out) {
    *out = NULL;
    return v ? up_bytes(s, u, v, (size_t)n * sizeof(float), (const void **)out) : 0;
}

static int up_layer(cu_state *s, upload *u, int l) {
    const model_config *c = &s->m->cfg;
    const model_layer *L = &s->m->layers[l];
    cu_layer *D = &s->layers[l];
    const int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    int rc;
    if ((rc = up_vec(s, u, L->attn_norm, c->dim, &D->attn_norm)) ||
        (rc = up_vec(s, u, L->ffn_norm, c->dim, &D->ffn_norm)) ||
        (rc = up_vec(s, u, L->bq, qd, &D->bq)) || (rc = up_vec(s, u, L->bk, kvd, &D->bk)) ||
        (rc = up_vec(s, u, L->bv, kvd, &D->bv)) || (rc = up_vec(s, u, L->q_norm, c->head_dim, &D->q_norm)) ||
        (rc = up_vec(s, u, L->k_norm, c->head_dim, &D->k_norm)) ||
        (rc = up_vec(s, u, L->attn_post_norm, c->dim, &D->attn_post_norm)) ||
        (rc = up_vec(s, u, L->ffn_post_norm, c->dim, &D->ffn_post_norm)))
        return rc;
    if ((rc = up_mat(s, u, &L->wq, &D->wq, "attn_q", l)) || (rc = up_mat(s, u, &L->wk, &D->wk, "attn_k", l)) ||
        (rc = up_mat(s, u, &L->wv, &D->wv, "attn_v", l)) || (rc = up_mat(s, u, &L->wo, &D->wo, "attn_output", l)) ||
        (rc = up_mat(s, u, &L->w_gate, &D->w_gate, "ffn_gate", l)) ||
        (rc = up_mat(s, u, &L->w_up, &D->w_up, "ffn_up", l)) ||
        (rc = up_mat(s, u, &L->w_down, &D->w_down, "ffn_down", l)))
        return rc;
    return 0;
}

static int up_model(cu_state *s, upload *u) {
    const model *m = s->m;
    int rc;
    if ((rc = up_mat(s, u, &m->tok_embd, &s->tok_embd, "token_embd", -1))) return rc;
    /* A tied output is the embedding: one copy on the device too. */
    if (m->output.data == m->tok_embd.data) s->output = s->tok_embd;
    else if ((rc = up_mat(s, u, &m->output, &s->output, "output", -1))) return rc;
    if ((rc = up_vec(s, u, m->out_norm, m->cfg.dim, &s->out_norm))) return rc;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if ((rc = up_layer(s, u, l))) return rc;
    return 0;
}

static int upload_weights(cu_state *s) {
    upload u = {NULL, 0};
    int rc = up_model(s, &u);
    if (rc) return rc;
    size_t total = u.off;
    if ((rc = dalloc(s, &s->weights, total))) return rc;
    u = (upload){s->weights, 0};
    return up_model(s, &u);
}

/* The rotary frequencies exactly as cpu_backend.c's rope_inv_freq: double,
 * scaling and the rope_freqs divisors folded in. */
static int upload_rope(cu_state *s) {
    const model_config *c = &s->m->cfg;
    const int half = c->n_rot / 2, n_rope = c->swa_window > 0 ? MODEL_ROPE_N : 1;
    double *f = malloc((size_t)n_rope * (size_t)(half > 0 ? half : 1) * sizeof(double));
    if (!f) {
        snprintf(s->msg, sizeof s->msg, "out of memory");
        return TS_ERR_NOMEM;
    }
    for (int r = 0; r < n_rope; r++)
        for (int i = 0; i < half; i++) {
            double v = pow((double)c->rope[r].base, -2.0 * (double)i / (double)c->n_rot) * (double)c->rope[r].scale;
            if (r == MODEL_ROPE_GLOBAL && s->m->rope_freqs) v /= (double)s->m->rope_freqs[i];
            f[(size_t)r * half + i] = v;
        }
    size_t bytes = (size_t)n_rope * (size_t)half * sizeof(double);
    int rc = dalloc(s, (void **)&s->inv_freq, bytes);
    if (!rc && bytes) {
        cudaError_t e = cudaMemcpy(s->inv_freq, f, bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) rc = cu_fail(s, "cudaMemcpy(inv_freq)", cudaGetErrorString(e), __LINE__);
    }
    free(f);
    return rc;
}

/* ---- create / destroy ------------------------------------------------------- */

static void cu_destroy(void *st) {
    cu_state *s = st;
    if (!s) return;
    /* Teardown errors have nowhere to go and change nothing: ignored. */
    (void)cudaSetDevice(s->dev);
    if (s->st) (void)cudaStreamSynchronize(s->st);
    if (s->copy_st) (void)cudaStreamSynchronize(s->copy_st);
    if (s->blas) (void)cublasDestroy(s->blas);
    void *dev[] = {s->weights, s->inv_freq, s->kv, s->x, s->xb, s->q, s->k, s->v, s->att,
                   s->hb, s->hb2, s->logits, s->xh, s->wh, s->d_idx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) (void)cudaFree(dev[i]);
    if (s->h_idx) (void)cudaFreeHost(s->h_idx);
    if (s->pin) (void)cudaFreeHost(s->pin);
    for (int i = 0; i < 2; i++)
        if (s->pin_ev[i]) (void)cudaEventDestroy(s->pin_ev[i]);
    for (int i = 0; i < 2; i++)
        if (s->work_ev[i]) (void)cudaEventDestroy(s->work_ev[i]);
    for (int t = 0; t < CU_GRAPH_T; t++)
        for (int r = 0; r <= CU_GRAPH_T; r++)
            if (s->graphs[t][r]) (void)cudaGraphExecDestroy(s->graphs[t][r]);
    if (s->st) (void)cudaStreamDestroy(s->st);
    if (s->copy_st) (void)cudaStreamDestroy(s->copy_st);
    free(s->layers);
    free(s);
}

/* The device the spec names, made current; its properties in *p. */
static int open_device(cu_state *s, const char *spec, struct cudaDeviceProp *p) {
    int rc = cudalev_parse_device(spec ? spec : "cuda", &s->dev, s->msg, sizeof s->msg);
    if (rc) return rc;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(s->msg, sizeof s->msg, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the runtime sees none");
        return TS_ERR_DEVICE;
    }
    if (s->dev >= n) {
        snprintf(s->msg, sizeof s->msg, "device cuda:%d does not exist (the runtime sees %d)", s->dev, n);
        return TS_ERR_DEVICE;
    }
    CU(cudaSetDevice(s->dev));
    CU(cudaGetDeviceProperties(p, s->dev));
    return 0;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and MPS name it. */
static void format_uuid(char *out, size_t cap, const unsigned char b[16]) {
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static int alloc_scratch(cu_state *s) {
    const model_config *c = &s->m->cfg;
    const size_t T = (size_t)s->max_T, qd = (size_t)c->n_heads * c->head_dim;
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim, dim = (size_t)c->dim, ffn = (size_t)c->ffn_dim;
    size_t widest = dim > ffn ? dim : ffn;
    if (qd > widest) widest = qd;
    int rc;
    if ((rc = dalloc(s, (void **)&s->x, T * dim * 4)) ||
        (rc = dalloc(s, (void **)&s->xb, T * (qd > dim ? qd : dim) * 4)) ||
        (rc = dalloc(s, (void **)&s->q, T * qd * 4)) || (rc = dalloc(s, (void **)&s->k, T * kvd * 4)) ||
        (rc = dalloc(s, (void **)&s->v, T * kvd * 4)) || (rc = dalloc(s, (void **)&s->att, T * qd * 4)) ||
        (rc = dalloc(s, (void **)&s->hb, T * (ffn > dim ? ffn : dim) * 4)) ||
        (rc = dalloc(s, (void **)&s->hb2, T * ffn * 4)) ||
        (rc = dalloc(s, (void **)&s->logits, T * (size_t)c->vocab * 4)))
        return rc;
    if (s->max_T >= CU_GEMM_MIN_T) {
        if ((rc = dalloc(s, &s->xh, T * widest * 2))) return rc;
        /* A tile of at least one row of the widest matrix, at most the
         * largest matrix. */
        int64_t most = s->output.n_out * s->output.n_in;
        s->wh_elems = most < CU_DQ_TILE_ELEMS ? most : CU_DQ_TILE_ELEMS;
        if (s->wh_elems < (int64_t)widest) s->wh_elems = (int64_t)widest;
        if ((rc = dalloc(s, &s->wh, (size_t)s->wh_elems * 2))) return rc;
    }
    /* tokens, positions, sequences, logits rows (max_T each), table
     * offsets (max_seqs), tables */
    s->idx_ints = 4 * T + (size_t)s->max_seqs + s->max_tab;
    if ((rc = dalloc(s, (void **)&s->d_idx, s->idx_ints * sizeof(int32_t)))) return rc;
    CU(cudaHostAlloc((void **)&s->h_idx, s->idx_ints * sizeof(int32_t), cudaHostAllocDefault));
    const size_t bb = s->block_floats * sizeof(float);
    s->pin_blocks = (int)(CU_PIN_BYTES / 2 / bb > 0 ? CU_PIN_BYTES / 2 / bb : 1);
    if ((size_t)s->pin_blocks > (size_t)s->n_blocks) s->pin_blocks = s->n_blocks;
    CU(cudaHostAlloc((void **)&s->pin, 2 * (size_t)s->pin_blocks * bb, cudaHostAllocDefault));
    for (int i = 0; i < 2; i++) CU(cudaEventCreateWithFlags(&s->pin_ev[i], cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) CU(cudaEventCreate(&s->work_ev[i]));
    return 0;
}

/* Streams at the device's priorities (cuda_levers.h): compute as band 0,
 * copies as the last band. */
static int make_streams(cu_state *s) {
    int least = 0, greatest = 0;
    CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CU(cudaStreamCreateWithPriority(&s->st, cudaStreamNonBlocking, cudalev_band_priority(0, 2, least, greatest)));
    CU(cudaStreamCreateWithPriority(&s->copy_st, cudaStreamNonBlocking, cudalev_band_priority(1, 2, least, greatest)));
    BL(cublasCreate(&s->blas));
    BL(cublasSetStream(s->blas, s->st));
    return 0;
}

/* The KV pool, if it fits what this process may use of the device. */
static int alloc_kv(cu_state *s) {
    const uint64_t mps = s->mps_limit;
    int rc;
    size_t free_b = 0, total_b = 0;
    CU(cudaMemGetInfo(&free_b, &total_b));
    const uint64_t frac = total_b / CU_RESERVE_FRAC;
    cudalev_mem mem = {.free_bytes = free_b, .total_bytes = total_b, .used_by_us = s->dev_bytes, .mps_limit = mps,
                       .reserve = frac > CU_RESERVE_MIN ? frac : CU_RESERVE_MIN};
    const uint64_t budget = cudalev_kv_budget(&mem);
    const uint64_t want = (uint64_t)s->n_blocks * s->block_floats * sizeof(float);
    if (want > budget) {
        char lim[48] = "no MPS memory limit";
        if (mps) snprintf(lim, sizeof lim, "MPS limit %.1f MiB", mps / 1048576.0);
        snprintf(s->msg, sizeof s->msg,
                 "a KV pool of %.1f MiB does not fit cuda:%d: it may use %.1f MiB (free %.1f of %.1f MiB, this engine "
                 "holds %.1f MiB, %s, %.1f MiB kept free)",
                 want / 1048576.0, s->dev, budget / 1048576.0, free_b / 1048576.0, total_b / 1048576.0,
                 s->dev_bytes / 1048576.0, lim, mem.reserve / 1048576.0);
        return TS_ERR_NOMEM;
    }
    if ((rc = dalloc(s, (void **)&s->kv, want))) return rc;
    s->kv_bytes = want;
    s->total_bytes = total_b;
    /* As on the CPU: a block read before it is written (which validation
     * prevents) gives zeros, not garbage. */
    CU(cudaMemset(s->kv, 0, want));
    return 0;
}

static int cu_setup(cu_state *s, eng_opts *o) {
    struct cudaDeviceProp p;
    int rc = open_device(s, o->backend, &p);
    if (rc) return rc;
    char uuid[48];
    format_uuid(uuid, sizeof uuid, (const unsigned char *)p.uuid.bytes);
    /* The MPS settings first: a malformed one fails before any upload. */
    if ((rc = cudalev_parse_thread_pct(getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), &s->mps_thread_pct, s->msg,
                                       sizeof s->msg)) ||
        (rc = cudalev_parse_pinned_limit(getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), s->dev, uuid, &s->mps_limit,
                                         s->msg, sizeof s->msg)))
        return rc;
    if ((rc = make_streams(s)) || (rc = upload_weights(s)) || (rc = upload_rope(s)) || (rc = alloc_scratch(s)) ||
        (rc = alloc_kv(s)))
        return rc;
    CU(cudaDeviceSynchronize());
    return 0;
}

static int cu_create(const model *m, eng_opts *o, int n_blocks, void **out, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    cu_state *s = calloc(1, sizeof(*s));
    if (!s || !(s->layers = calloc((size_t)c->n_layers, sizeof(cu_layer)))) {
        free(s);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory for the CUDA engine");
    }
    s->m = m;
    s->bs = o->block_size;
    s->n_blocks = n_blocks;
    s->max_T = o->max_batch_tokens;
    s->max_seqs = o->max_seqs;
    s->block_floats = (size_t)c->n_layers * 2 * (size_t)s->bs * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    /* engine.c refuses a table needing more blocks than the pool or
     * positions beyond the context, so this bounds every step's tables. */
    size_t per_seq = ((size_t)c->ctx_len + (size_t)s->bs - 1) / (size_t)s->bs;
    if (per_seq > (size_t)n_blocks) per_seq = (size_t)n_blocks;
    s->max_tab = (size_t)s->max_seqs * per_seq;
    const char *graphs = getenv("TESSERA_CUDA_GRAPHS");
    s->graphs_off = graphs && strcmp(graphs, "0") == 0;
    /* Host threads only run the sampler and this file's bookkeeping. */
    if (o->n_threads <= 0) o->n_threads = 1;
    int rc = cu_setup(s, o);
    if (rc) {
        err_set(err, errlen, rc, "%s", s->msg);
        cu_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- forward ------------------------------------------------------------------ */

/* y = x W^T on the compute stream; see the top of the file for the split. */
static int mm(cu_state *s, float *y, int64_t ldy, const float *x, int T, const ck_mat *w) {
    if (T < CU_GEMM_MIN_T) {
        CU(ck_matvec(y, ldy, x, T, *w, s->st));
        return 0;
    }
    const float one = 1.0f, zero = 0.0f;
    const int n_out = (int)w->n_out, k = (int)w->n_in;
    if (w->type == CK_F32) {
        BL(cublasSgemm(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, T, k, &one, w->data, k, x, k, &zero, y, (int)ldy));
        return 0;
    }
    const int bf = w->type == CK_BF16;
    const cudaDataType dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    CU(ck_convert(s->xh, x, (int64_t)T * k, bf, s->st));
    if (w->type == CK_F16 || bf) {
        BL(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, T, k, &one, w->data, dt, k, s->xh, dt, k, &zero, y,
                        CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    const int64_t rows = s->wh_elems / k;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += rows) {
        const int nr = (int)(w->n_out - r0 < rows ? w->n_out - r0 : rows);
        CU(ck_dequant_rows(s->wh, *w, r0, nr, 0, s->st));
        BL(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, T, k, &one, s->wh, CUDA_R_16F, k, s->xh, CUDA_R_16F, k,
                        &zero, y + r0, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

/* The step's indices into pinned memory, then to the device in one copy.
 * Layout (ints): tokens, positions, sequences, logits rows (max_T each),
 * table offsets (max_seqs), the tables. Out: T, rows. */
static int pack_step(cu_state *s, const eng_batch *b, int *T_out, int *rows_out, ck_tokens *tk) {
    const size_t mt = (size_t)s->max_T;
    int32_t *tok = s->h_idx, *pos = tok + mt, *seq = pos + mt, *out = seq + mt, *off = out + mt;
    int32_t *tab = off + s->max_seqs;
    int T = 0, rows = 0;
    size_t nt = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        const eng_seq *q = &b->seqs[i];
        const int need = (q->pos + q->n_tokens + s->bs - 1) / s->bs;
        off[i] = (int32_t)nt;
        memcpy(tab + nt, q->blocks, (size_t)need * sizeof(int32_t));
        nt += (size_t)need;
        for (int j = 0; j < q->n_tokens; j++, T++) {
            tok[T] = q->tokens[j];
            pos[T] = q->pos + j;
            seq[T] = i;
            if (q->logits == ENG_LOGITS_ALL || (q->logits == ENG_LOGITS_LAST && j == q->n_tokens - 1)) out[rows++] = T;
        }
    }
    const size_t ints = 4 * mt + (size_t)s->max_seqs + nt;
    CU(cudaMemcpyAsync(s->d_idx, s->h_idx, ints * sizeof(int32_t), cudaMemcpyHostToDevice, s->st));
    const int32_t *d = s->d_idx;
    *tk = (ck_tokens){d + mt, d + 2 * mt, d + 4 * mt, d + 4 * mt + s->max_seqs};
    *T_out = T;
    *rows_out = rows;
    return 0;
}

static int layer_forward(cu_state *s, int l, int T, ck_tokens tk) {
    const model_config *c = &s->m->cfg;
    const cu_layer *D = &s->layers[l];
    const int64_t dim = c->dim, ffn = c->ffn_dim, qd = (int64_t)c->n_heads * c->head_dim;
    const int64_t kvd = (int64_t)c->n_kv_heads * c->head_dim;
    const int swa = s->m->layers[l].swa;
    int rc;
    CU(ck_residual_norm(s->x, s->xb, l > 0 ? s->layers[l - 1].ffn_post_norm : NULL, D->attn_norm, T, c->dim,
                        c->rms_eps, l > 0, s->st));
    if ((rc = mm(s, s->q, qd, s->xb, T, &D->wq)) || (rc = mm(s, s->k, kvd, s->xb, T, &D->wk)) ||
        (rc = mm(s, s->v, kvd, s->xb, T, &D->wv)))
        return rc;
    const ck_geom g = {c->n_heads, c->n_kv_heads, c->head_dim, c->n_rot, c->rope_neox, c->rms_eps, c->attn_scale,
                       swa ? c->swa_window : 0, s->bs, l, s->block_floats};
    const double *inv = s->inv_freq + (swa ? (size_t)(c->n_rot / 2) : 0);
    CU(ck_qkv_post(s->q, s->k, s->v, D->bq, D->bk, D->bv, D->q_norm, D->k_norm, inv, s->kv, tk, T, g, s->st));
    CU(ck_attention(s->att, s->q, s->kv, tk, T, g, s->st));
    if ((rc = mm(s, s->xb, dim, s->att, T, &D->wo))) return rc;
    CU(ck_residual_norm(s->x, s->xb, D->attn_post_norm, D->ffn_norm, T, c->dim, c->rms_eps, 1, s->st));
    if ((rc = mm(s, s->hb, ffn, s->xb, T, &D->w_gate)) || (rc = mm(s, s->hb2, ffn, s->xb, T, &D->w_up))) return rc;
    CU(ck_gate(s->hb, s->hb2, (int64_t)T * ffn, c->ffn_act == MODEL_FFN_GELU_TANH, s->st));
    return mm(s, s->xb, dim, s->hb, T, &D->w_down);
}

/* The step's device work, from the embedding to the logits rows on the
 * device, enqueued on the compute stream (or captured into a graph). */
static int device_work(cu_state *s, int T, int rows, ck_tokens tk) {
    const model_config *c = &s->m->cfg;
    int rc;
    CU(ck_embed(s->x, s->tok_embd, s->d_idx, T, c->embd_scale, s->st));
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = layer_forward(s, l, T, tk))) return rc;
    CU(ck_residual_norm(s->x, s->xb, s->layers[c->n_layers - 1].ffn_post_norm, NULL, T, c->dim, c->rms_eps, 1, s->st));
    if (rows) {
        const int32_t *out_rows = s->d_idx + 3 * (size_t)s->max_T;
        CU(ck_rmsnorm_rows(s->hb, s->x, out_rows, s->out_norm, rows, c->dim, c->rms_eps, s->st));
        if ((rc = mm(s, s->logits, c->vocab, s->hb, rows, &s->output))) return rc;
        if (c->logit_softcap > 0) CU(ck_softcap(s->logits, (int64_t)rows * c->vocab, c->logit_softcap, s->st));
    }
    return 0;
}

/* Capture device_work for (T, rows) into s->graphs[T][rows]. A failure
 * turns graphs off for this engine and is not the step's failure: the step
 * then runs without, and a real fault shows there. */
static void make_graph(cu_state *s, int T, int rows, ck_tokens tk) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal);
    int rc = 0;
    if (e == cudaSuccess) {
        rc = device_work(s, T, rows, tk);
        e = cudaStreamEndCapture(s->st, &g);
    }
    if (!rc && e == cudaSuccess) e = cudaGraphInstantiate(&s->graphs[T][rows], g, 0);
    if (g) (void)cudaGraphDestroy(g);
    if (rc || e != cudaSuccess) {
        s->graphs[T][rows] = NULL;
        s->graphs_off = 1;
        fprintf(stderr, "tessera: cuda backend: decode graphs off: %s\n", rc ? s->msg : cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
}

static int step(cu_state *s, const eng_batch *b, float *logits) {
    const model_config *c = &s->m->cfg;
    int T, rows, rc;
    ck_tokens tk;
    CU(cudaSetDevice(s->dev));
    if ((rc = pack_step(s, b, &T, &rows, &tk))) return rc;
    if (T < CU_GRAPH_T && !s->graphs_off && !s->graphs[T][rows]) make_graph(s, T, rows, tk);
    CU(cudaEventRecord(s->work_ev[0], s->st));
    if (T < CU_GRAPH_T && s->graphs[T][rows]) CU(cudaGraphLaunch(s->graphs[T][rows], s->st));
    else if ((rc = device_work(s, T, rows, tk))) return rc;
    CU(cudaEventRecord(s->work_ev[1], s->st));
    if (rows)
        CU(cudaMemcpyAsync(logits, s->logits, (size_t)rows * (size_t)c->vocab * sizeof(float), cudaMemcpyDeviceToHost,
                           s->st));
    /* The step ends here: the caller samples from logits, and a swap that
     * follows reads the cache this step wrote. */
    CU(cudaStreamSynchronize(s->st));
    /* A figure for /metrics: the step has its logits, and does not fail
     * for want of its timing. */
    float ms = 0;
    if (cudaEventElapsedTime(&ms, s->work_ev[0], s->work_ev[1]) == cudaSuccess) s->compute_s += ms / 1e3;
    else (void)cudaGetLastError();
    s->forwards++;
    return 0;
}

static int cu_forward(void *st, const eng_batch *b, float *logits) {
    cu_state *s = st;
    int rc = step(s, b, logits);
    if (rc) fprintf(stderr, "tessera: cuda backend: %s\n", s->msg);
    return rc;
}

/* ---- swap ----------------------------------------------------------------------- */

/* Blocks go through the two pinned halves in turn, so the DMA of one chunk
 * overlaps the host copy of the previous one. */
static int copy_out(cu_state *s, const int32_t *blocks, int n, char *host) {
    const size_t bb = s->block_floats * sizeof(float);
    const int per = s->pin_blocks;
    CU(cudaSetDevice(s->dev));
    for (int c = 0, i0 = 0; i0 < n || c > 0; c++, i0 += per) {
        if (i0 < n) {
            const int k = n - i0 < per ? n - i0 : per;
            char *pin = s->pin + (size_t)(c % 2) * (size_t)per * bb;
            for (int j = 0; j < k; j++)
                CU(cudaMemcpyAsync(pin + (size_t)j * bb, s->kv + (size_t)blocks[i0 + j] * s->block_floats, bb,
                                   cudaMemcpyDeviceToHost, s->copy_st));
            CU(cudaEventRecord(s->pin_ev[c % 2], s->copy_st));
        }
        if (c > 0) { /* drain the previous chunk */
            const int p0 = i0 - per, k = n - p0 < per ? n - p0 : per;
            CU(cudaEventSynchronize(s->pin_ev[(c - 1) % 2]));
            memcpy(host + (size_t)p0 * bb, s->pin + (size_t)((c - 1) % 2) * (size_t)per * bb, (size_t)k * bb);
        }
        if (i0 >= n) break;
    }
    return 0;
}

static int copy_in(cu_state *s, const int32_t *blocks, int n, const char *host) {
    const size_t bb = s->block_floats * sizeof(float);
    const int per = s->pin_blocks;
    CU(cudaSetDevice(s->dev));
    for (int c = 0, i0 = 0; i0 < n; c++, i0 += per) {
        const int k = n - i0 < per ? n - i0 : per;
        char *pin = s->pin + (size_t)(c % 2) * (size_t)per * bb;
        CU(cudaEventSynchronize(s->pin_ev[c % 2])); /* the DMA that last read this half */
        memcpy(pin, host + (size_t)i0 * bb, (size_t)k * bb);
        for (int j = 0; j < k; j++)
            CU(cudaMemcpyAsync(s->kv + (size_t)blocks[i0 + j] * s->block_floats, pin + (size_t)j * bb, bb,
                               cudaMemcpyHostToDevice, s->copy_st));
        CU(cudaEventRecord(s->pin_ev[c % 2], s->copy_st));
    }
    /* The next step reads these blocks on the compute stream. */
    CU(cudaStreamSynchronize(s->copy_st));
    return 0;
}

static int cu_kv_copy_out(void *st, const int32_t *blocks, int n, void *host) {
    cu_state *s = st;
    int rc = copy_out(s, blocks, n, host);
    if (rc) fprintf(stderr, "tessera: cuda backend: %s\n", s->msg);
    return rc;
}

static int cu_kv_copy_in(void *st, const int32_t *blocks, int n, const void *host) {
    cu_state *s = st;
    int rc = copy_in(s, blocks, n, host);
    if (rc) fprintf(stderr, "tessera: cuda backend: %s\n", s->msg);
    return rc;
}

static void cu_stats(const void *st, eng_dev_stats *out) {
    const cu_state *s = st;
    out->held_bytes = s->dev_bytes;
    out->kv_bytes = s->kv_bytes;
    out->device_bytes = s->total_bytes;
    out->compute_s = s->compute_s;
    out->forwards = s->forwards;
}

const eng_backend eng_backend_cuda = {
    .name = "cuda",
    .kv_default = ENG_KV_F32,
    .kv_dtypes = 1u << ENG_KV_F32,
    .create = cu_create,
    .destroy = cu_destroy,
    .forward = cu_forward,
    .kv_copy_out = cu_kv_copy_out,
    .kv_copy_in = cu_kv_copy_in,
    .stats = cu_stats,
};
