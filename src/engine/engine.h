/*
 * engine.h - execute one forward step of a model over a batch of sequences
 * against a paged KV cache. The engine only executes: which sequences run,
 * how many tokens each processes and which cache blocks each owns are the
 * scheduler's decisions, passed in every step.
 *
 * A batch mixes sequences in prefill (many tokens, possibly one chunk of a
 * longer prompt) and in decode (one token). All tokens of all sequences are
 * flattened for the dense layers; attention runs per sequence over its own
 * block table, so sequences never see each other's cache.
 *
 * The KV pool is sized in bytes and cut into blocks of block_size token
 * positions. Block b holds, for every layer, the keys and values of
 * block_size consecutive positions of whichever sequence owns it; position p
 * of a sequence lives in block table[p / block_size] at slot p % block_size.
 * eng_kv_copy_out/in move whole blocks to and from host memory: that is what
 * swap-based preemption uses.
 *
 * The engine validates each batch before touching anything: a bad batch gets
 * a negative code and changes neither the cache nor any other state. No
 * allocation happens inside eng_forward; all scratch is sized at eng_new from
 * the limits in eng_opts. Backends (cpu today) sit behind one interface in
 * backend.h; no backend type appears here.
 */
#ifndef TS_ENGINE_H
#define TS_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Which logits a sequence wants back from a step. */
enum {
    ENG_LOGITS_NONE = 0,    /* a prefill chunk that is not the last */
    ENG_LOGITS_LAST = 1,    /* the usual: the row of the last token */
    ENG_LOGITS_ALL = 2,     /* every processed token (tests, scoring) */
};

typedef struct eng_seq {
    const int32_t *tokens;  /* (n_tokens) token ids to process this step */
    int n_tokens;
    int pos;                /* position of tokens[0] = tokens already cached */
    const int32_t *blocks;  /* (n_blocks) block table covering pos + n_tokens */
    int n_blocks;
    int logits;             /* ENG_LOGITS_* */
} eng_seq;

typedef struct eng_batch {
    const eng_seq *seqs;    /* (n_seqs) */
    int n_seqs;
} eng_batch;

/* The KV cache's element type. f16 halves the cache's bytes (twice the
 * sequences in the same memory, half the bytes attention reads), as
 * llama.cpp's and vLLM's default caches do; f32 keeps the keys and values
 * exactly as computed. AUTO is the backend's own: f16 on the CPU, f32 on
 * CUDA (whose kernels read an f32 cache). */
typedef enum eng_kv_dtype { ENG_KV_AUTO = 0, ENG_KV_F16, ENG_KV_F32 } eng_kv_dtype;

/* "f16", "f32" or "auto"; NULL for anything else. */
const char *eng_kv_dtype_name(eng_kv_dtype t);
/* Parses a name of eng_kv_dtype_name; returns 0, or -1 when unknown. */
int eng_kv_dtype_parse(const char *name, eng_kv_dtype *out);

typedef struct eng_opts {
    const char *backend;    /* "cpu" (default when NULL), "cuda" or "cuda:N" */
    size_t kv_pool_bytes;   /* bytes of KV cache; rounded down to whole blocks */
    eng_kv_dtype kv_dtype;  /* the cache's elements (AUTO: the backend's) */
    int block_size;         /* token positions per KV block (default 16) */
    int max_batch_tokens;   /* tokens per step across all sequences (default 512) */
    int max_seqs;           /* sequences per step (default 64) */
    int n_threads;          /* compute threads; <= 0 means all cores */
} eng_opts;

typedef struct eng eng;

/* Create an engine for m (which must outlive it). Zeroed fields of o take
 * their defaults. */
int eng_new(const model *m, const eng_opts *o, eng **out, char *err, size_t errlen);
/* Bytes one token's keys and values take in the cache an engine made with o
 * would have (its backend and dtype), so a caller can size kv_pool_bytes
 * in tokens; 0 when o names no known backend or a dtype it lacks. */
size_t eng_kv_token_bytes(const model *m, const eng_opts *o);
void eng_free(eng *e);

/* Run one step. logits receives, in sequence order, the rows each sequence
 * asked for: (n_rows, vocab) with n_rows = eng_batch_logit_rows(b).
 * Returns 0, or a negative TS_ERR_* (and changes nothing) when the batch
 * is invalid: unknown token, block id out of range, a block table too short
 * for pos + n_tokens, beyond the context length, or over the limits. */
int eng_forward(eng *e, const eng_batch *b, float *logits);
int eng_batch_logit_rows(const eng_batch *b);

/* Pool geometry. */
int eng_kv_n_blocks(const eng *e);
int eng_block_size(const eng *e);
size_t eng_kv_block_bytes(const eng *e);
eng_kv_dtype eng_kv_dtype_of(const eng *e);    /* resolved: never AUTO */
int eng_vocab(const eng *e);
const char *eng_backend_name(const eng *e);
int eng_threads(const eng *e);

/* What an engine holds on its device and how long the device has worked
 * for it: an operator's view of a GPU shared between models (or of the
 * CPU). The memory figures are fixed once the engine is made. */
typedef struct eng_dev_stats {
    uint64_t held_bytes;        /* what the backend allocated for this engine: the KV
                                   pool, activations and scratch, and on a GPU the
                                   weights (the CPU reads them in place from the file) */
    uint64_t kv_bytes;          /* of which the KV pool */
    uint64_t device_bytes;      /* memory of the device as its runtime reports it (a
                                   MIG slice reports its own); 0 on the CPU */
    double compute_s;           /* the device's part of this engine's forward passes:
                                   on a GPU the time between two events around each
                                   step's kernels (launch gaps, and another engine's
                                   kernels on the same GPU in between, included), on
                                   the CPU the forward pass itself; a step's time less
                                   this is the host's work and the copies */
    uint64_t forwards;          /* forward passes run */
} eng_dev_stats;

/* Fill out. Not concurrently with eng_forward or the KV copies. */
void eng_dev_stats_get(const eng *e, eng_dev_stats *out);

/* Copy n blocks to host (n * eng_kv_block_bytes bytes, in table order) and
 * back. The block ids on the way in need not be the ones on the way out. */
int eng_kv_copy_out(eng *e, const int32_t *blocks, int n, void *host);
int eng_kv_copy_in(eng *e, const int32_t *blocks, int n, const void *host);

#endif
