/*
 * test_cuda.c - the CUDA backend against the CPU backend, the reference.
 *
 * Kernels, each on the same inputs as its CPU counterpart: RMSNorm (rows
 * and the residual step with gemma3's post-norm), the SiLU and GELU-tanh
 * gates, the soft cap, the embedding lookup, the matrix-vector product and
 * the dequantized tiles of the cuBLAS path in every type the backend runs
 * (f32, f16, bf16, q8_0, q4_K; q4_0, q5_0, q5_K, q6_K), rope with the q/k head norms and the store
 * into the paged cache (against a reference written here from the
 * convention of cpu_backend.c's rope_head), and paged attention over
 * shuffled block tables with a sliding window (against a plain softmax in
 * double).
 *
 * Engines: for llama in every type and for llama3, qwen2, qwen3, gemma3
 * and phi3 in f32, the full forward's logits (a prompt in one step: the
 * cuBLAS path; then single-token decodes: the matrix-vector path) and the
 * KV cache each step wrote; a greedy generation token for token; the
 * batching equivalence of test_engine.c (mixed prefill chunks and decodes
 * over interleaved tables == each sequence alone) with a swap out and back
 * into other blocks in the middle; a byte-exact copy round trip; and the
 * load-time refusals (a type without a kernel (q2_K), a KV pool larger than the
 * device, a device that does not exist) with their messages.
 *
 * Without a GPU (no driver, or no device) the program prints why and exits
 * 77, which CTest reports as skipped: nothing here has passed until it has
 * run on one. Tolerances are relative to a row's largest magnitude and are
 * first guesses (see docs/CUDA.md); every comparison prints its worst error
 * so the first GPU run can set them from data.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_kern.h"
#include "engine.h"
#include "err.h"
#include "gguf.h"
#include "mkmodel.h"
#include "model.h"
#include "ops.h"
#include "quant.h"
#include "testutil.h"

#define SKIP_CODE 77

/* ---- helpers ------------------------------------------------------------------- */

#define CK_OK(call)                                                                  \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));    \
    } while (0)

static void *dev_copy(const void *host, size_t bytes) {
    void *d = NULL;
    CK_OK(cudaMalloc(&d, bytes ? bytes : 16));
    if (host && bytes) CK_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void host_copy(void *host, const void *dev, size_t bytes) {
    CK_OK(cudaDeviceSynchronize());
    CK_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

static float *rand_floats(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = tu_rng_float() * scale;
    return p;
}

/* max |a - b| / max |b| over n; infinite for a NaN or infinity in a. */
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / (m > 0 ? m : 1);
}

/* Comparisons out of tolerance in the running test. A test goes on after
 * one, so that a GPU run reports every mismatch and not only the first;
 * its teardown then fails it. */
static int n_mismatch;

static void expect_close(const char *what, const float *gpu, const float *cpu, size_t n, double tol) {
    double e = rel_err(gpu, cpu, n);
    print_message("%-40s worst relative error %.3g (tol %.0e)%s\n", what, e, tol, e <= tol ? "" : "  MISMATCH");
    if (!(e <= tol)) n_mismatch++;
}

static int mismatch_reset(void **state) {
    (void)state;
    n_mismatch = 0;
    return 0;
}

static int mismatch_check(void **state) {
    (void)state;
    if (n_mismatch) print_error("%d comparison(s) out of tolerance (MISMATCH above)\n", n_mismatch);
    return n_mismatch ? -1 : 0;
}

/* ---- kernels: norms, gates, soft cap, embedding ----------------------------------------- */

static void test_norms(void **state) {
    (void)state;
    const int T = 5, dim = 96;
    const float eps = 1e-5f;
    float *x = rand_floats((size_t)T * dim, 3), *xb = rand_floats((size_t)T * dim, 2);
    float *w = rand_floats(dim, 1), *post = rand_floats(dim, 1);
    float *cx = malloc((size_t)T * dim * 4), *cxb = malloc((size_t)T * dim * 4);
    float *gx = malloc((size_t)T * dim * 4), *gxb = malloc((size_t)T * dim * 4);
    memcpy(cx, x, (size_t)T * dim * 4);
    memcpy(cxb, xb, (size_t)T * dim * 4);
    for (int t = 0; t < T; t++) { /* cpu_backend.c's residual_norm */
        float *r = cx + (size_t)t * dim, *b = cxb + (size_t)t * dim;
        ops_rmsnorm(b, b, post, dim, eps);
        ops_add(r, b, dim);
        ops_rmsnorm(b, r, w, dim, eps);
    }
    float *dx = dev_copy(x, (size_t)T * dim * 4), *dxb = dev_copy(xb, (size_t)T * dim * 4);
    float *dw = dev_copy(w, dim * 4), *dp = dev_copy(post, dim * 4);
    CK_OK(ck_residual_norm(dx, dxb, dp, dw, T, dim, eps, 1, 0));
    host_copy(gx, dx, (size_t)T * dim * 4);
    host_copy(gxb, dxb, (size_t)T * dim * 4);
    expect_close("residual + post-norm: x", gx, cx, (size_t)T * dim, 1e-5);
    expect_close("residual + post-norm: norm(x) * w", gxb, cxb, (size_t)T * dim, 1e-5);
    /* Gathered rows, as the logits rows are. */
    int32_t rows[3] = {4, 0, 2};
    int32_t *drows = dev_copy(rows, sizeof rows);
    float *dout = dev_copy(NULL, 3 * (size_t)dim * 4), got[3 * 96], want[3 * 96];
    CK_OK(ck_rmsnorm_rows(dout, dx, drows, dw, 3, dim, eps, 0));
    host_copy(got, dout, sizeof got);
    for (int r = 0; r < 3; r++) ops_rmsnorm(want + r * dim, cx + (size_t)rows[r] * dim, w, dim, eps);
    expect_close("rmsnorm of gathered rows", got, want, 3 * (size_t)dim, 1e-5);
    void *d[] = {dx, dxb, dw, dp, drows, dout};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
    free(x); free(xb); free(w); free(post); free(cx); free(cxb); free(gx); free(gxb);
}

static void test_gates_and_softcap(void **state) {
    (void)state;
    const int n = 4099; /* not a multiple of any block size */
    float *h = rand_floats(n, 12), *u = rand_floats(n, 3), *got = malloc(n * 4), *want = malloc(n * 4);
    for (int gelu = 0; gelu < 2; gelu++) {
        memcpy(want, h, n * 4);
        (gelu ? ops_gelu_tanh_mul : ops_silu_mul)(want, u, n);
        float *dh = dev_copy(h, n * 4), *du = dev_copy(u, n * 4);
        CK_OK(ck_gate(dh, du, n, gelu, 0));
        host_copy(got, dh, n * 4);
        expect_close(gelu ? "gate gelu_tanh" : "gate silu", got, want, n, 1e-5);
        cudaFree(dh);
        cudaFree(du);
    }
    memcpy(want, h, n * 4);
    ops_softcap(want, n, 5.0f);
    float *dh = dev_copy(h, n * 4);
    CK_OK(ck_softcap(dh, n, 5.0f, 0));
    host_copy(got, dh, n * 4);
    expect_close("soft cap", got, want, n, 1e-5);
    cudaFree(dh);
    free(h); free(u); free(got); free(want);
}

/* ---- kernels: products in every type ------------------------------------------ */

static const uint32_t TYPES[] = {GGUF_TT_F32,  GGUF_TT_F16,  GGUF_TT_BF16, GGUF_TT_Q8_0, GGUF_TT_Q4_K,
                                 GGUF_TT_Q4_0, GGUF_TT_Q5_0, GGUF_TT_Q5_K, GGUF_TT_Q6_K};

/* A (rows, n_in) matrix of type from random floats: host bytes in *host. */
static void make_mat(uint32_t type, int64_t rows, int64_t n_in, void **host, size_t *bytes) {
    float *f = rand_floats((size_t)(rows * n_in), 1);
    *bytes = ck_row_bytes(type, n_in) * (size_t)rows;
    uint8_t *b = malloc(*bytes);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = b + (size_t)r * ck_row_bytes(type, n_in);
        const float *src = f + (size_t)(r * n_in);
        if (type == GGUF_TT_F32) memcpy(row, src, (size_t)n_in * 4);
        else if (type == GGUF_TT_F16)
            for (int64_t i = 0; i < n_in; i++) ((uint16_t *)row)[i] = ops_f32_to_f16(src[i]);
        else if (type == GGUF_TT_BF16)
            for (int64_t i = 0; i < n_in; i++) ((uint16_t *)row)[i] = ops_f32_to_bf16(src[i]);
        else assert_int_equal(quant_quantize(row, src, type, n_in), 0);
    }
    free(f);
    *host = b;
}

/* The products y = x W^T of the CPU's dequantized rows, in double: the
 * exact answer for the weights as stored (the CPU's own quantized kernels
 * also round the activations, which the GPU's do not). */
static void ref_matvec(float *y, const float *x, int T, const ops_mat *w) {
    float *row = malloc((size_t)w->n_in * 4);
    for (int64_t r = 0; r < w->n_out; r++) {
        ops_dequant_row(row, w, r);
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (int64_t i = 0; i < w->n_in; i++) s += (double)row[i] * x[(size_t)t * w->n_in + i];
            y[(size_t)t * w->n_out + r] = (float)s;
        }
    }
    free(row);
}

static void test_matvec_all_types(void **state) {
    (void)state;
    const int64_t n_out = 37, n_in = 512; /* q4_K needs rows of 256s */
    const int Ts[] = {1, 3, 8, 9, 17};
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        void *hw;
        size_t bytes;
        make_mat(TYPES[ti], n_out, n_in, &hw, &bytes);
        const ops_mat w = {hw, TYPES[ti], n_out, n_in};
        void *dw = dev_copy(hw, bytes);
        const ck_mat cw = {dw, TYPES[ti], n_out, n_in};
        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
            const int T = Ts[k];
            float *x = rand_floats((size_t)T * n_in, 1), *want = malloc((size_t)T * n_out * 4);
            float *got = malloc((size_t)T * n_out * 4);
            ref_matvec(want, x, T, &w);
            float *dx = dev_copy(x, (size_t)T * n_in * 4), *dy = dev_copy(NULL, (size_t)T * n_out * 4);
            CK_OK(ck_matvec(dy, n_out, dx, T, cw, 0));
            host_copy(got, dy, (size_t)T * n_out * 4);
            char what[64];
            snprintf(what, sizeof what, "matvec %s T=%d", gguf_type_name(TYPES[ti]), T);
            expect_close(what, got, want, (size_t)T * n_out, 1e-5);
            cudaFree(dx);
            cudaFree(dy);
            free(x); free(want); free(got);
        }
        /* The cuBLAS path's tiles: rows 5..29 dequantized to f16. */
        uint16_t *tile = malloc(25 * (size_t)n_in * 2);
        float *got = malloc(25 * (size_t)n_in * 4), *want = malloc(25 * (size_t)n_in * 4);
        void *dt = dev_copy(NULL, 25 * (size_t)n_in * 2);
        CK_OK(ck_dequant_rows(dt, cw, 5, 25, 0, 0));
        host_copy(tile, dt, 25 * (size_t)n_in * 2);
        for (int r = 0; r < 25; r++) ops_dequant_row(want + (size_t)r * n_in, &w, 5 + r);
        for (size_t i = 0; i < 25 * (size_t)n_in; i++) got[i] = ops_f16_to_f32(tile[i]);
        char what[64];
        snprintf(what, sizeof what, "dequantized f16 tile %s", gguf_type_name(TYPES[ti]));
        expect_close(what, got, want, 25 * (size_t)n_in, 1e-3); /* f16's rounding */
        /* And the embedding lookup of the same matrix. */
        int32_t toks[3] = {36, 0, 11};
        int32_t *dtok = dev_copy(toks, sizeof toks);
        float *demb = dev_copy(NULL, 3 * (size_t)n_in * 4);
        CK_OK(ck_embed(demb, cw, dtok, 3, 2.5f, 0));
        host_copy(got, demb, 3 * (size_t)n_in * 4);
        for (int r = 0; r < 3; r++) {
            ops_dequant_row(want + (size_t)r * n_in, &w, toks[r]);
            for (int64_t i = 0; i < n_in; i++) want[(size_t)r * n_in + i] *= 2.5f;
        }
        snprintf(what, sizeof what, "embedding %s", gguf_type_name(TYPES[ti]));
        expect_close(what, got, want, 3 * (size_t)n_in, 1e-6);
        cudaFree(dt); cudaFree(dtok); cudaFree(demb); cudaFree(dw);
        free(tile); free(got); free(want); free(hw);
    }
}

/* ---- kernels: rope + store, attention over paged blocks ------------------------ */

#define G_HEADS 4
#define G_KV 2
#define G_HD 16
#define G_BS 4
#define G_LAYERS 2
#define G_BLOCKS 12
#define G_KVD (G_KV * G_HD)
#define G_BF ((size_t)G_LAYERS * 2 * G_BS * G_KVD)

static ck_geom geom(int neox, int window, int layer) {
    return (ck_geom){G_HEADS, G_KV, G_HD, 12 /* partial rotary */, neox, 1e-6f, 0.25f, window, G_BS, layer, G_BF};
}

/* cpu_backend.c's rope_head on one head, angles in double. */
static void ref_rope(float *v, int pos, const double *inv, int n_rot, int neox) {
    for (int i = 0; i < n_rot / 2; i++) {
        const double a = (double)pos * inv[i];
        const float c = (float)cos(a), s = (float)sin(a);
        const int x = neox ? i : 2 * i, y = neox ? i + n_rot / 2 : 2 * i + 1;
        const float x0 = v[x], x1 = v[y];
        v[x] = x0 * c - x1 * s;
        v[y] = x0 * s + x1 * c;
    }
}

/* One sequence of n tokens at positions 0..n-1 over a shuffled table: rope
 * and store every token (layer 1), then attention of every token (a
 * prefill), checked against a softmax in double over the same cache. */
static void check_rope_attention(int neox, int window) {
    enum { N = 21 };
    const int32_t table[6] = {7, 2, 11, 0, 5, 9};
    int32_t pos[N], seqi[N], off[1] = {0};
    for (int i = 0; i < N; i++) pos[i] = i, seqi[i] = 0;
    const size_t qd = G_HEADS * G_HD;
    float *q = rand_floats(N * qd, 1), *k = rand_floats(N * G_KVD, 1), *v = rand_floats(N * G_KVD, 1);
    float *qn = rand_floats(G_HD, 1), *kn = rand_floats(G_HD, 1), *bq = rand_floats(qd, 0.5f);
    double inv[6];
    for (int i = 0; i < 6; i++) inv[i] = pow(10000.0, -2.0 * i / 12.0);
    /* reference: bias, head norms, rope */
    float *rq = malloc(N * qd * 4), *rk = malloc(N * G_KVD * 4);
    memcpy(rq, q, N * qd * 4);
    memcpy(rk, k, N * G_KVD * 4);
    for (int t = 0; t < N; t++) {
        ops_add(rq + t * qd, bq, (int)qd);
        ops_rmsnorm_heads(rq + t * qd, qn, G_HEADS, G_HD, 1e-6f);
        ops_rmsnorm_heads(rk + t * G_KVD, kn, G_KV, G_HD, 1e-6f);
        for (int h = 0; h < G_HEADS; h++) ref_rope(rq + t * qd + h * G_HD, t, inv, 12, neox);
        for (int h = 0; h < G_KV; h++) ref_rope(rk + t * G_KVD + h * G_HD, t, inv, 12, neox);
    }
    float *dq = dev_copy(q, N * qd * 4), *dk = dev_copy(k, N * G_KVD * 4), *dv = dev_copy(v, N * G_KVD * 4);
    float *dqn = dev_copy(qn, G_HD * 4), *dkn = dev_copy(kn, G_HD * 4), *dbq = dev_copy(bq, qd * 4);
    double *dinv = dev_copy(inv, sizeof inv);
    float *dkv = dev_copy(NULL, G_BLOCKS * G_BF * 4);
    CK_OK(cudaMemset(dkv, 0, G_BLOCKS * G_BF * 4));
    int32_t *dpos = dev_copy(pos, sizeof pos), *dseq = dev_copy(seqi, sizeof seqi), *doff = dev_copy(off, sizeof off);
    int32_t *dtab = dev_copy(table, sizeof table);
    const ck_tokens tk = {dpos, dseq, doff, dtab};
    const ck_geom g = geom(neox, window, 1);
    CK_OK(ck_qkv_post(dq, dk, dv, dbq, NULL, NULL, dqn, dkn, dinv, dkv, tk, N, g, 0));
    float *gq = malloc(N * qd * 4), *kv = malloc(G_BLOCKS * G_BF * 4);
    host_copy(gq, dq, N * qd * 4);
    host_copy(kv, dkv, G_BLOCKS * G_BF * 4);
    expect_close(neox ? "bias, q norm, rope neox: q" : "bias, q norm, rope adjacent: q", gq, rq, N * qd, 1e-5);
    /* k and v landed at their slots, as cpu_backend.c's kv_slot places them */
    float *gk = malloc(N * G_KVD * 4), *gv = malloc(N * G_KVD * 4);
    for (int t = 0; t < N; t++) {
        const float *slot = kv + (size_t)table[t / G_BS] * G_BF + ((size_t)1 * 2 * G_BS + t % G_BS) * G_KVD;
        memcpy(gk + t * G_KVD, slot, G_KVD * 4);
        memcpy(gv + t * G_KVD, slot + G_BS * G_KVD, G_KVD * 4);
    }
    expect_close("k in the paged cache", gk, rk, N * G_KVD, 1e-5);
    expect_close("v in the paged cache", gv, v, N * G_KVD, 0);
    /* attention of every token over its positions lo..t */
    float *want = malloc(N * qd * 4), *got = malloc(N * qd * 4);
    for (int t = 0; t < N; t++) {
        const int lo = window > 0 && t >= window ? t - window + 1 : 0;
        for (int h = 0; h < G_HEADS; h++) {
            const int kh = h / (G_HEADS / G_KV);
            double sc[N], mx = -INFINITY, sum = 0;
            for (int j = lo; j <= t; j++) {
                double d = 0;
                for (int i = 0; i < G_HD; i++) d += (double)rq[t * qd + h * G_HD + i] * rk[j * G_KVD + kh * G_HD + i];
                sc[j] = d * 0.25;
                mx = fmax(mx, sc[j]);
            }
            for (int j = lo; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < G_HD; i++) {
                double o = 0;
                for (int j = lo; j <= t; j++) o += sc[j] / sum * v[j * G_KVD + kh * G_HD + i];
                want[t * qd + h * G_HD + i] = (float)o;
            }
        }
    }
    float *datt = dev_copy(NULL, N * qd * 4);
    CK_OK(ck_attention(datt, dq, dkv, tk, N, g, 0));
    host_copy(got, datt, N * qd * 4);
    expect_close(window ? "paged attention, sliding window" : "paged attention, causal", got, want, N * qd, 1e-5);
    void *d[] = {dq, dk, dv, dqn, dkn, dbq, dinv, dkv, dpos, dseq, doff, dtab, datt};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
    free(q); free(k); free(v); free(qn); free(kn); free(bq); free(rq); free(rk);
    free(gq); free(kv); free(gk); free(gv); free(want); free(got);
}

static void test_rope_attention(void **state) {
    (void)state;
    check_rope_attention(0, 0);
    check_rope_attention(1, 0);
    check_rope_attention(1, 5);
}

/* ---- engines ------------------------------------------------------------------- */

#define BS 4
#define N_BLOCKS 64
#define MAX_T 64

/* The tiny GQA model of seed 11 (test_engine.c's), in arch (NULL: llama)
 * and type, with n_ov per-matrix type overrides. */
static model *make_model_ov(const char *arch, uint32_t type, const mkmodel_override *ov, int n_ov) {
    mkmodel_spec s;
    char path[512], err[256];
    mkmodel_preset("tiny", &s);
    if (arch) assert_int_equal(mkmodel_arch(&s, arch), 0);
    if (gguf_type_block(type) == 256) {
        s.dim = 256;
        s.ffn_dim = 512;
    }
    s.type = type;
    s.overrides = ov;
    s.n_overrides = n_ov;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.seed = 11;
    if (arch && strcmp(arch, "gemma3") == 0) s.n_layers = 6;
    tu_path(path, sizeof path, "cuda.gguf");
    int rc = mkmodel_write(&s, path, err, sizeof err);
    if (rc) fail_msg("%s", err);
    model *m;
    if ((rc = model_load(path, &m, err, sizeof err))) fail_msg("%s", err);
    remove(path);
    return m;
}

static model *make_model(const char *arch, uint32_t type) { return make_model_ov(arch, type, NULL, 0); }

static eng *make_engine(const model *m, const char *backend) {
    /* f32 caches on both sides: the CUDA kernels read one, and the CPU
     * reference must hold the same keys and values. */
    eng_opts o = {.backend = backend, .kv_dtype = ENG_KV_F32,
                  .kv_pool_bytes = model_kv_bytes_per_token(&m->cfg, sizeof(float)) * BS * (size_t)N_BLOCKS,
                  .block_size = BS, .max_batch_tokens = MAX_T, .max_seqs = 8, .n_threads = 2};
    eng *e;
    char err[256];
    if (eng_new(m, &o, &e, err, sizeof err)) fail_msg("eng_new(%s): %s", backend ? backend : "cpu", err);
    return e;
}

/* n cache blocks copied out of the CPU engine, rearranged into the CUDA
 * backend's layout: the CPU keeps each kv head's slots as one run,
 * [layer][k|v][kv head][slot][head_dim], CUDA each slot's heads side by
 * side, [layer][k|v][slot][kv head][head_dim]. */
static void cpu_blocks_as_cuda(float *dst, const float *src, int n, const model_config *c) {
    const size_t hd = (size_t)c->head_dim, nkv = (size_t)c->n_kv_heads, run = (size_t)BS * hd;
    for (size_t plane = 0; plane < (size_t)n * (size_t)c->n_layers * 2; plane++)
        for (size_t g = 0; g < nkv; g++)
            for (size_t slot = 0; slot < BS; slot++)
                memcpy(dst + plane * nkv * run + (slot * nkv + g) * hd, src + plane * nkv * run + g * run + slot * hd,
                       hd * sizeof(float));
}

static void prompt_ids(int32_t *ids, int n, int vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
}

/* The tolerance of a model type against the CPU: f32 runs the same math
 * in another order; f16/bf16 products at T >= 16 round the activations to
 * 16 bits (cuBLAS); the CPU's quantized kernels round its activations to
 * 8 bits, the GPU's do not. */
static double type_tol(uint32_t type) {
    switch (type) {
    case GGUF_TT_F32: return 1e-4;
    case GGUF_TT_F16: return 1e-2;
    case GGUF_TT_BF16: return 3e-2;
    default: return 5e-2;
    }
}

/* A 23-token prompt in one step (every row's logits), then 6 decodes, on
 * both backends from the same table; logits and the cache written are
 * compared at each step. */
static void check_forward_ov(const char *arch, uint32_t type, const mkmodel_override *ov, int n_ov) {
    model *m = make_model_ov(arch, type, ov, n_ov);
    eng *c = make_engine(m, "cpu"), *g = make_engine(m, "cuda");
    const int vocab = m->cfg.vocab, n = 23;
    int32_t ids[32], table[16];
    prompt_ids(ids, n, vocab, 99);
    for (int i = 0; i < 16; i++) table[i] = (i * 5) % 16 + 3;
    float *lc = malloc((size_t)n * vocab * 4), *lg = malloc((size_t)n * vocab * 4);
    const size_t kvb = eng_kv_block_bytes(c) * 8;
    float *kc = malloc(kvb), *kg = malloc(kvb), *kr = malloc(kvb);
    char what[96];
    double tol = type_tol(type), prompt_s = 0;
    eng_dev_stats dc, dg;
    for (int step = 0, p = 0, len = n; step < 7; step++, p += len, len = 1) {
        eng_seq q = {ids + p, len, p, table, 16, ENG_LOGITS_ALL};
        eng_batch b = {&q, 1};
        assert_int_equal(eng_forward(c, &b, lc), 0);
        assert_int_equal(eng_forward(g, &b, lg), 0);
        eng_dev_stats_get(g, &dg);
        if (!step) prompt_s = dg.compute_s; /* cuBLAS; the decodes after it replay graphs, where on */
        snprintf(what, sizeof what, "%s %s%s %s %d logits", arch ? arch : "llama", gguf_type_name(type),
                 n_ov ? " mix" : "", step ? "decode" : "prompt", step);
        expect_close(what, lg, lc, (size_t)len * vocab, tol);
        /* the CPU's argmax of the last row is both backends' next token */
        const float *last = lc + (size_t)(len - 1) * vocab;
        int best = 0;
        for (int v = 1; v < vocab; v++) best = last[v] > last[best] ? v : best;
        ids[p + len] = best;
    }
    /* The cache both wrote: the first 8 blocks of the table. */
    assert_int_equal(eng_kv_copy_out(c, table, 8, kc), 0);
    assert_int_equal(eng_kv_copy_out(g, table, 8, kg), 0);
    assert_int_equal(eng_kv_block_bytes(c), (size_t)m->cfg.n_layers * 2 * BS * m->cfg.n_kv_heads * m->cfg.head_dim * 4);
    cpu_blocks_as_cuda(kr, kc, 8, &m->cfg);
    snprintf(what, sizeof what, "%s %s%s KV cache", arch ? arch : "llama", gguf_type_name(type), n_ov ? " mix" : "");
    expect_close(what, kg, kr, kvb / 4, tol);
    /* The GPU engine's own account: the pool the CPU's holds too (f32
     * blocks of the same size), within what it allocated, within the
     * device; every step's kernels timed, the prompt's and the decodes'. */
    eng_dev_stats_get(c, &dc);
    eng_dev_stats_get(g, &dg);
    assert_true(dg.kv_bytes == dc.kv_bytes && dg.held_bytes > dg.kv_bytes && dg.device_bytes > dg.held_bytes);
    assert_true(dg.forwards == 7 && prompt_s > 0 && dg.compute_s > prompt_s && dc.forwards == 7 &&
                dc.device_bytes == 0);
    free(lc); free(lg); free(kc); free(kg); free(kr);
    eng_free(c);
    eng_free(g);
    model_free(m);
}

static void check_forward(const char *arch, uint32_t type) { check_forward_ov(arch, type, NULL, 0); }

/* llama.cpp's Q4_K_M recipe, as test_engine.c's QKM: q4_K with v and the
 * output in q6_K, gate in q5_0, down in q5_K, the embedding in q8_0. */
static const mkmodel_override QKM[] = {{"attn_v", GGUF_TT_Q6_K},   {"output", GGUF_TT_Q6_K},
                                       {"ffn_gate", GGUF_TT_Q5_0}, {"ffn_down", GGUF_TT_Q5_K},
                                       {"token_embd", GGUF_TT_Q8_0}};

static void test_forward_llama_types(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) check_forward(NULL, TYPES[i]);
    check_forward_ov(NULL, GGUF_TT_Q4_K, QKM, (int)(sizeof QKM / sizeof QKM[0]));
}

static void test_forward_archs(void **state) {
    (void)state;
    const char *archs[] = {"llama3", "qwen2", "qwen3", "gemma3", "phi3"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) check_forward(archs[i], GGUF_TT_F32);
    check_forward("qwen2", GGUF_TT_Q8_0);
}

/* Greedy decoding, 24 tokens, on the CPU, on CUDA with its decode graphs
 * and on CUDA without them (TESSERA_CUDA_GRAPHS=0, read at create): the
 * same tokens, and the two CUDA runs the same logits bit for bit (the same
 * kernels, replayed or launched). A difference from the CPU is reported
 * with the CPU's gap between its top two logits there, so a near tie is
 * told apart from a bug. */
static void test_greedy_generation(void **state) {
    (void)state;
    model *m = make_model(NULL, GGUF_TT_F32);
    const int vocab = m->cfg.vocab, n_prompt = 9, n_gen = 24;
    int32_t out[3][64], table[16];
    float gap[64] = {0}, *last[3];
    for (int i = 0; i < 16; i++) table[i] = i;
    for (int be = 0; be < 3; be++) {
        if (be == 2) setenv("TESSERA_CUDA_GRAPHS", "0", 1);
        eng *e = make_engine(m, be ? "cuda" : "cpu");
        unsetenv("TESSERA_CUDA_GRAPHS");
        int32_t *ids = out[be];
        prompt_ids(ids, n_prompt, vocab, 7);
        float *lg = last[be] = malloc((size_t)vocab * 4);
        for (int p = 0, len = n_prompt; p + len <= n_prompt + n_gen - 1; p += len, len = 1) {
            eng_seq q = {ids + p, len, p, table, 16, ENG_LOGITS_LAST};
            eng_batch b = {&q, 1};
            assert_int_equal(eng_forward(e, &b, lg), 0);
            int best = 0, second = -1;
            for (int v = 1; v < vocab; v++) {
                if (lg[v] > lg[best]) second = best, best = v;
                else if (second < 0 || lg[v] > lg[second]) second = v;
            }
            ids[p + len] = best;
            if (!be) gap[p + len] = lg[best] - lg[second];
        }
        eng_free(e);
    }
    for (int i = n_prompt; i < n_prompt + n_gen; i++) {
        if (out[0][i] != out[1][i])
            fail_msg("greedy token %d: cpu %d, cuda %d (the CPU's gap between its top two logits there: %g)",
                     i - n_prompt, out[0][i], out[1][i], gap[i]);
        if (out[2][i] != out[1][i])
            fail_msg("greedy token %d: cuda with graphs %d, without %d", i - n_prompt, out[1][i], out[2][i]);
    }
    assert_memory_equal(last[1], last[2], (size_t)vocab * 4);
    print_message("greedy generation: %d tokens equal on cpu, cuda, cuda without graphs\n", n_gen);
    for (int be = 0; be < 3; be++) free(last[be]);
    model_free(m);
}

/* test_engine.c's schedule: four sequences in mixed batches over
 * interleaved tables, with sequence 1 swapped out after step 2, its blocks
 * clobbered, and brought back into other blocks. Every row is compared with
 * the same engine running each sequence alone. */
#define N_SEQ 4
#define MAX_LEN 48
static const int LENS[N_SEQ] = {7, 23, 40, 2};
static const int SCHEDULE[][N_SEQ] = {
    {3, 23, 10, 1}, {4, 1, 10, 1}, {1, 1, 20, 1}, {1, 1, 1, 1},
    {1, 5, 1, 1},   {1, 1, 1, 1},  {1, 1, 1, 1},  {1, 1, 1, 1},
};

static void check_batching(uint32_t type, double tol) {
    model *m = make_model(NULL, type);
    const int vocab = m->cfg.vocab;
    eng *e = make_engine(m, "cuda");
    int32_t ids[N_SEQ][MAX_LEN], solo_tab[16], table[N_SEQ][MAX_LEN / BS + 1];
    float *solo[N_SEQ];
    for (int i = 0; i < 16; i++) solo_tab[i] = i;
    for (int s = 0; s < N_SEQ; s++) {
        prompt_ids(ids[s], LENS[s], vocab, 12345 + (uint64_t)s);
        solo[s] = malloc((size_t)LENS[s] * vocab * 4);
        eng_seq q = {ids[s], LENS[s], 0, solo_tab, 16, ENG_LOGITS_ALL};
        eng_batch b = {&q, 1};
        assert_int_equal(eng_forward(e, &b, solo[s]), 0);
        for (int i = 0; i <= MAX_LEN / BS; i++) table[s][i] = ((i * 7) % 13) * N_SEQ + s;
    }
    float *lg = malloc((size_t)MAX_T * vocab * 4);
    int done[N_SEQ] = {0};
    double worst = 0;
    for (int step = 0; step < 8; step++) {
        eng_seq qs[N_SEQ];
        int who[N_SEQ], n = 0;
        for (int s = 0; s < N_SEQ; s++) {
            int c = SCHEDULE[step][s], left = LENS[s] - done[s];
            if (c > left) c = left;
            if (c <= 0) continue;
            qs[n] = (eng_seq){ids[s] + done[s], c, done[s], table[s], MAX_LEN / BS + 1, ENG_LOGITS_ALL};
            who[n++] = s;
        }
        if (!n) break;
        eng_batch b = {qs, n};
        assert_int_equal(eng_forward(e, &b, lg), 0);
        for (int i = 0, row = 0; i < n; i++)
            for (int j = 0; j < qs[i].n_tokens; j++, row++)
                worst = fmax(worst, rel_err(lg + (size_t)row * vocab,
                                            solo[who[i]] + (size_t)(qs[i].pos + j) * vocab, (size_t)vocab));
        for (int i = 0; i < n; i++) done[who[i]] += qs[i].n_tokens;
        if (step == 2) {
            const int nb = (done[1] + BS - 1) / BS;
            const size_t bytes = eng_kv_block_bytes(e) * (size_t)nb;
            char *host = malloc(bytes), *junk = malloc(bytes);
            memset(junk, 0x7f, bytes);
            assert_int_equal(eng_kv_copy_out(e, table[1], nb, host), 0);
            assert_int_equal(eng_kv_copy_in(e, table[1], nb, junk), 0);
            for (int i = 0; i < nb; i++) table[1][i] = 56 + i; /* free ids above the interleave */
            assert_int_equal(eng_kv_copy_in(e, table[1], nb, host), 0);
            free(host);
            free(junk);
        }
    }
    for (int s = 0; s < N_SEQ; s++) assert_int_equal(done[s], LENS[s]);
    print_message("cuda %s batched (with a swap) vs solo: worst relative row error %.3g (tol %.0e)\n",
                  gguf_type_name(type), worst, tol);
    if (!(worst <= tol)) fail_msg("a sequence's logits depend on its batch by %.3g > %.0e", worst, tol);
    for (int s = 0; s < N_SEQ; s++) free(solo[s]);
    free(lg);
    eng_free(e);
    model_free(m);
}

/* f32: sgemm and the matrix-vector kernel differ only in summation order;
 * the 16-bit types cross from the kernel to cuBLAS's 16-bit activations as
 * a batch grows past CU_GEMM_MIN_T tokens. */
static void test_batching_and_swap(void **state) {
    (void)state;
    check_batching(GGUF_TT_F32, 1e-4);
    check_batching(GGUF_TT_F16, 1e-2);
    check_batching(GGUF_TT_Q8_0, 1e-2);
}

/* Random bytes into every block, then out in reverse order: the same
 * bytes. The pool is large enough (SWAP_BLOCKS blocks of 1 KiB: 100 MB,
 * the pinned halves 32 MiB each) that one call runs through each half
 * twice. */
#define SWAP_BLOCKS 100000
static void test_copy_round_trip(void **state) {
    (void)state;
    model *m = make_model(NULL, GGUF_TT_F32);
    const size_t bb = model_kv_bytes_per_token(&m->cfg, sizeof(float)) * BS;
    eng_opts o = {.backend = "cuda", .kv_pool_bytes = bb * SWAP_BLOCKS, .block_size = BS, .max_batch_tokens = MAX_T,
                  .max_seqs = 8};
    eng *e;
    char err[256];
    if (eng_new(m, &o, &e, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(eng_kv_block_bytes(e), bb);
    int32_t *a = malloc(SWAP_BLOCKS * sizeof(int32_t)), *r = malloc(SWAP_BLOCKS * sizeof(int32_t));
    for (int i = 0; i < SWAP_BLOCKS; i++) a[i] = i, r[i] = SWAP_BLOCKS - 1 - i;
    uint8_t *src = malloc(bb * SWAP_BLOCKS), *back = malloc(bb * SWAP_BLOCKS);
    for (size_t i = 0; i < bb * SWAP_BLOCKS; i += 8) {
        uint64_t v = tu_rng_next();
        memcpy(src + i, &v, 8);
    }
    assert_int_equal(eng_kv_copy_in(e, a, SWAP_BLOCKS, src), 0);
    assert_int_equal(eng_kv_copy_out(e, r, SWAP_BLOCKS, back), 0);
    for (int i = 0; i < SWAP_BLOCKS; i++)
        if (memcmp(back + (size_t)i * bb, src + (size_t)r[i] * bb, bb) != 0)
            fail_msg("block %d came back changed", r[i]);
    print_message("swap round trip: %d blocks of %zu bytes, byte-exact\n", SWAP_BLOCKS, bb);
    free(a); free(r); free(src); free(back);
    eng_free(e);
    model_free(m);
}

/* What create refuses, and says why. */
static void test_refusals(void **state) {
    (void)state;
    char err[512];
    eng *e = NULL;
    model *m = make_model(NULL, GGUF_TT_Q2_K);
    eng_opts o = {.backend = "cuda", .kv_pool_bytes = model_kv_bytes_per_token(&m->cfg, sizeof(float)) * 64, .block_size = 16};
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_GGUF_TYPE);
    assert_null(e);
    assert_non_null(strstr(err, "q2_K"));
    print_message("q2_K: %s\n", err);
    model_free(m);
    m = make_model(NULL, GGUF_TT_F32);
    o.kv_pool_bytes = (size_t)1 << 40; /* 1 TiB: more than any GPU, fewer blocks than INT32_MAX */
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_NOMEM);
    assert_non_null(strstr(err, "does not fit"));
    print_message("1 TiB pool: %s\n", err);
    o.kv_pool_bytes = model_kv_bytes_per_token(&m->cfg, sizeof(float)) * 64;
    o.backend = "cuda:1000";
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_DEVICE);
    assert_non_null(strstr(err, "does not exist"));
    o.backend = "cuda:x";
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_INVAL);
    /* The MPS environment, read at create (the runtime itself ignores it
     * without an MPS server, and read it when the context was made). */
    o.backend = "cuda";
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1M", 1);
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_NOMEM);
    assert_non_null(strstr(err, "MPS limit 1.0 MiB"));
    print_message("MPS limit: %s\n", err);
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1T", 1);
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    unsetenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "150", 1);
    assert_int_equal(eng_new(m, &o, &e, err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    assert_null(e);
    model_free(m);
}

int main(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIPPED: no CUDA device here (%s); the CUDA backend is built but untested\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "the runtime sees none");
        return SKIP_CODE;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB\n", p.name, p.major, p.minor, p.multiProcessorCount,
               (double)p.totalGlobalMem / 1073741824.0);
    tu_rng_seed(17);
    /* TEST_CUDA_FILTER: a glob of test names to run (e.g. "test_forward*"). */
    const char *filter = getenv("TEST_CUDA_FILTER");
    if (filter) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_norms, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_gates_and_softcap, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_matvec_all_types, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_rope_attention, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_forward_llama_types, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_forward_archs, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_greedy_generation, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_batching_and_swap, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_copy_round_trip, mismatch_reset, mismatch_check),
        cmocka_unit_test_setup_teardown(test_refusals, mismatch_reset, mismatch_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
