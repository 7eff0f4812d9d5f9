/*
 * engine.c - batch validation and dispatch to a backend; see engine.h.
 *
 * Everything a backend may rely on is checked here once, so the backends'
 * inner loops carry no bounds checks and every backend rejects the same
 * batches with the same codes.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "err.h"
#include "sched.h"

#ifdef TS_HAVE_CUDA
#define ENG_CUDA_NAMES ", cuda, cuda:N"
#else
#define ENG_CUDA_NAMES ""
#endif

struct eng {
    const model *m;
    const eng_backend *be;
    void *state;            /* backend run state */
    eng_opts opts;          /* defaults filled in */
    int n_blocks;
    size_t block_bytes;
};

/* "cpu", or "cuda" / "cuda:N" (the device index is the backend's to read
 * from eng_opts.backend). Returns NULL with a message for anything else. */
static const eng_backend *find_backend(const char *name, char *err, size_t errlen) {
    if (!name || strcmp(name, "cpu") == 0) return &eng_backend_cpu;
    if (strncmp(name, "cuda", 4) == 0 && (name[4] == '\0' || name[4] == ':')) {
#ifdef TS_HAVE_CUDA
        return &eng_backend_cuda;
#else
        err_set(err, errlen, TS_ERR_INVAL,
                "device '%s': this build has no CUDA backend (rebuild with nvcc on the PATH, TESSERA_CUDA=AUTO or ON)",
                name);
        return NULL;
#endif
    }
    err_set(err, errlen, TS_ERR_INVAL, "unknown device '%s' (this build has: cpu%s)", name, ENG_CUDA_NAMES);
    return NULL;
}

static const char *const KV_NAMES[] = {"auto", "f16", "f32"};

const char *eng_kv_dtype_name(eng_kv_dtype t) {
    return (unsigned)t < sizeof(KV_NAMES) / sizeof(KV_NAMES[0]) ? KV_NAMES[t] : NULL;
}

int eng_kv_dtype_parse(const char *name, eng_kv_dtype *out) {
    for (unsigned i = 0; name && i < sizeof(KV_NAMES) / sizeof(KV_NAMES[0]); i++)
        if (strcmp(name, KV_NAMES[i]) == 0) {
            *out = (eng_kv_dtype)i;
            return 0;
        }
    return -1;
}

static size_t kv_elem_bytes(eng_kv_dtype t) { return t == ENG_KV_F16 ? 2 : 4; }

/* o's cache type on backend be: AUTO resolved; -1 (with a message) when be
 * does not run it. */
static int resolve_kv(const eng_backend *be, eng_kv_dtype want, eng_kv_dtype *out, char *err, size_t errlen) {
    eng_kv_dtype t = want == ENG_KV_AUTO ? be->kv_default : want;
    if (!eng_kv_dtype_name(t) || !(be->kv_dtypes & (1u << t))) {
        err_set(err, errlen, TS_ERR_INVAL, "the %s backend has no %s KV cache (it keeps %s)", be->name,
                eng_kv_dtype_name(t) ? eng_kv_dtype_name(t) : "such", eng_kv_dtype_name(be->kv_default));
        return -1;
    }
    *out = t;
    return 0;
}

size_t eng_kv_token_bytes(const model *m, const eng_opts *o) {
    const eng_backend *be = find_backend(o->backend, NULL, 0);
    eng_kv_dtype t;
    if (!be || resolve_kv(be, o->kv_dtype, &t, NULL, 0)) return 0;
    return model_kv_bytes_per_token(&m->cfg, kv_elem_bytes(t));
}

int eng_new(const model *m, const eng_opts *o, eng **out, char *err, size_t errlen) {
    *out = NULL;
    eng_opts opts = *o;
    if (!opts.block_size) opts.block_size = 16;
    if (!opts.max_batch_tokens) opts.max_batch_tokens = 512;
    if (!opts.max_seqs) opts.max_seqs = 64;
    if (opts.block_size < 1 || opts.block_size > SCHED_MAX_BLOCK_SIZE || opts.max_batch_tokens < 1 ||
        opts.max_batch_tokens > (1 << 20) || opts.max_seqs < 1 || opts.max_seqs > opts.max_batch_tokens)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "engine limits out of range: block_size %d, max_batch_tokens %d, max_seqs %d",
                       opts.block_size, opts.max_batch_tokens, opts.max_seqs);
    const eng_backend *be = find_backend(opts.backend, err, errlen);
    if (!be || resolve_kv(be, opts.kv_dtype, &opts.kv_dtype, err, errlen)) return TS_ERR_INVAL;
    size_t bb = model_kv_bytes_per_token(&m->cfg, kv_elem_bytes(opts.kv_dtype)) * (size_t)opts.block_size;
    size_t nb = opts.kv_pool_bytes / bb;
    if (nb < 1 || nb > INT32_MAX)
        return err_set(err, errlen, TS_ERR_INVAL, "KV pool of %zu bytes holds %zu blocks of %zu bytes",
                       opts.kv_pool_bytes, nb, bb);
    eng *e = calloc(1, sizeof(*e));
    if (!e) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    e->m = m;
    e->be = be;
    e->opts = opts;
    e->n_blocks = (int)nb;
    e->block_bytes = bb;
    int rc = be->create(m, &e->opts, e->n_blocks, &e->state, err, errlen);
    if (rc) {
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void eng_free(eng *e) {
    if (!e) return;
    e->be->destroy(e->state);
    free(e);
}

int eng_batch_logit_rows(const eng_batch *b) {
    int n = 0;
    for (int i = 0; i < b->n_seqs; i++)
        n += b->seqs[i].logits == ENG_LOGITS_ALL ? b->seqs[i].n_tokens
             : b->seqs[i].logits == ENG_LOGITS_LAST ? 1 : 0;
    return n;
}

static int check_seq(const eng *e, const eng_seq *s) {
    const model_config *c = &e->m->cfg;
    if (s->n_tokens < 1 || !s->tokens || s->pos < 0 || s->n_blocks < 0 ||
        (s->n_blocks && !s->blocks) || s->logits < ENG_LOGITS_NONE || s->logits > ENG_LOGITS_ALL)
        return TS_ERR_INVAL;
    if ((int64_t)s->pos + s->n_tokens > c->ctx_len) return TS_ERR_CTX_LIMIT;
    int64_t need = ((int64_t)s->pos + s->n_tokens + e->opts.block_size - 1) / e->opts.block_size;
    /* More positions than the whole pool holds can only be a table that
     * repeats blocks; backends size their per-sequence scratch (attention
     * scores) by the pool, so it must not get that far. */
    if (need > s->n_blocks || need > e->n_blocks) return TS_ERR_KV_CAPACITY;
    for (int i = 0; i < s->n_tokens; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= c->vocab) return TS_ERR_TOK_RANGE;
    for (int64_t i = 0; i < need; i++)
        if (s->blocks[i] < 0 || s->blocks[i] >= e->n_blocks) return TS_ERR_KV_BLOCK;
    return 0;
}

/* Two sequences writing the same block in one step would race and corrupt
 * each other; sharing read-only prefix blocks is a later feature. O(blocks
 * written) with a stamp per block would need state; batches are small, so
 * the quadratic check over the blocks being written is fine. */
static int check_write_overlap(const eng *e, const eng_batch *b) {
    int bs = e->opts.block_size;
    for (int i = 0; i < b->n_seqs; i++) {
        const eng_seq *a = &b->seqs[i];
        for (int bi = a->pos / bs; bi <= (a->pos + a->n_tokens - 1) / bs; bi++)
            for (int j = i + 1; j < b->n_seqs; j++) {
                const eng_seq *o = &b->seqs[j];
                for (int bj = o->pos / bs; bj <= (o->pos + o->n_tokens - 1) / bs; bj++)
                    if (a->blocks[bi] == o->blocks[bj]) return TS_ERR_KV_BLOCK;
            }
    }
    return 0;
}

int eng_forward(eng *e, const eng_batch *b, float *logits) {
    if (!b || b->n_seqs < 1 || b->n_seqs > e->opts.max_seqs || !b->seqs) return TS_ERR_BATCH_LIMIT;
    int64_t total = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        int rc = check_seq(e, &b->seqs[i]);
        if (rc) return rc;
        total += b->seqs[i].n_tokens;
    }
    if (total > e->opts.max_batch_tokens) return TS_ERR_BATCH_LIMIT;
    int rc = check_write_overlap(e, b);
    if (rc) return rc;
    if (eng_batch_logit_rows(b) && !logits) return TS_ERR_INVAL;
    return e->be->forward(e->state, b, logits);
}

static int check_blocks(const eng *e, const int32_t *blocks, int n, const void *host) {
    if (n < 0 || (n && (!blocks || !host))) return TS_ERR_INVAL;
    for (int i = 0; i < n; i++)
        if (blocks[i] < 0 || blocks[i] >= e->n_blocks) return TS_ERR_KV_BLOCK;
    return 0;
}

int eng_kv_copy_out(eng *e, const int32_t *blocks, int n, void *host) {
    int rc = check_blocks(e, blocks, n, host);
    return rc ? rc : e->be->kv_copy_out(e->state, blocks, n, host);
}

int eng_kv_copy_in(eng *e, const int32_t *blocks, int n, const void *host) {
    int rc = check_blocks(e, blocks, n, host);
    return rc ? rc : e->be->kv_copy_in(e->state, blocks, n, host);
}

int eng_kv_n_blocks(const eng *e) { return e->n_blocks; }
int eng_block_size(const eng *e) { return e->opts.block_size; }
size_t eng_kv_block_bytes(const eng *e) { return e->block_bytes; }
eng_kv_dtype eng_kv_dtype_of(const eng *e) { return e->opts.kv_dtype; }
int eng_vocab(const eng *e) { return e->m->cfg.vocab; }
const char *eng_backend_name(const eng *e) { return e->be->name; }
int eng_threads(const eng *e) { return e->opts.n_threads; }

void eng_dev_stats_get(const eng *e, eng_dev_stats *out) {
    memset(out, 0, sizeof *out);
    e->be->stats(e->state, out);
}
