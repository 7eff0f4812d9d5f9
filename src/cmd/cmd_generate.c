/*
 * cmd_generate.c - `tessera generate`: one prompt, one sequence, straight
 * through the engine. It is the smallest complete user of the engine (load,
 * tokenize, prefill in chunks, decode, sample, detokenize) and the hook the
 * numerical tests use: --ids prints the token ids and --logits dumps every
 * logits row so an independent reference can check them.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "engine.h"
#include "err.h"
#include "model.h"
#include "sampler.h"
#include "tok.h"

typedef struct gen_args {
    const char *model, *prompt, *logits_path, *device;
    int n, ids, threads;
    eng_kv_dtype kv_dtype;
    smp_params sp;
} gen_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera generate --model M.gguf --prompt TEXT [-n 64] [--temp 0] [--top-k K]\n"
            "                        [--top-p P] [--seed S] [--threads N] [--device cpu|cuda[:N]]\n"
            "                        [--kv-cache-dtype auto|f16|f32] [--ids] [--logits FILE]\n"
            "  --device   where the forward pass runs: cpu (default), or CUDA device N\n"
            "             (cuda = cuda:0) in a build with the CUDA backend\n"
            "  --kv-cache-dtype  the KV cache's elements: auto (the backend's: f16 on the\n"
            "             CPU, f32 on CUDA), f16, or f32 (keys and values kept exact)\n"
            "  --ids      print the prompt's and the generated token ids, one line each\n"
            "  --logits   write every logits row (prompt positions, then each decode step)\n"
            "             as raw little-endian float32 to FILE\n");
}

static int parse_args(int argc, char **argv, gen_args *a) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"temp", required_argument, 0, 't'},  {"top-k", required_argument, 0, 'k'},
        {"top-p", required_argument, 0, 'P'}, {"seed", required_argument, 0, 's'},
        {"threads", required_argument, 0, 'T'}, {"ids", no_argument, 0, 'i'},
        {"logits", required_argument, 0, 'L'}, {"device", required_argument, 0, 'D'},
        {"kv-cache-dtype", required_argument, 0, 'K'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    memset(a, 0, sizeof(*a));
    a->n = 64;
    a->sp.top_p = 1.0f;
    a->sp.seed = (uint64_t)time(NULL);
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'p': a->prompt = optarg; break;
        case 'n': a->n = (int)strtol(optarg, &end, 10); if (*end || a->n < 1 || a->n > 1000000) return -1; break;
        case 't': a->sp.temperature = strtof(optarg, &end); if (*end) return -1; break;
        case 'k': a->sp.top_k = (int)strtol(optarg, &end, 10); if (*end) return -1; break;
        case 'P': a->sp.top_p = strtof(optarg, &end); if (*end) return -1; break;
        case 's': a->sp.seed = strtoull(optarg, &end, 10); if (*end) return -1; break;
        case 'T': a->threads = (int)strtol(optarg, &end, 10); if (*end) return -1; break;
        case 'i': a->ids = 1; break;
        case 'L': a->logits_path = optarg; break;
        case 'D': a->device = optarg; break;
        case 'K': if (eng_kv_dtype_parse(optarg, &a->kv_dtype)) return -1; break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
    }
    return a->model && a->prompt && optind == argc ? 0 : -1;
}

/* State of the one sequence being generated. */
typedef struct gen_run {
    eng *e;
    int vocab, bs;
    int32_t *ids;       /* (cap) prompt then generated ids */
    int n_ids, cap;
    int32_t *blocks;    /* block table: block i is simply block i */
    float *logits;      /* (max_batch_tokens, vocab) */
    FILE *dump;         /* --logits file or NULL */
} gen_run;

/* Feed ids[from, to) in chunks of at most max_T; leaves the last row of
 * logits at run->logits + (rows - 1) * vocab and returns rows, or < 0. */
static int feed(gen_run *r, int from, int to, int max_T) {
    int rows = 0;
    for (int p = from; p < to;) {
        int n = to - p < max_T ? to - p : max_T;
        eng_seq s = {r->ids + p, n, p, r->blocks, (p + n + r->bs - 1) / r->bs,
                     r->dump ? ENG_LOGITS_ALL : ENG_LOGITS_LAST};
        eng_batch b = {&s, 1};
        int rc = eng_forward(r->e, &b, r->logits);
        if (rc) return rc;
        rows = eng_batch_logit_rows(&b);
        if (r->dump && fwrite(r->logits, sizeof(float) * (size_t)r->vocab, (size_t)rows, r->dump) != (size_t)rows)
            return TS_ERR_IO;
        p += n;
    }
    return rows;
}

static void print_piece(const tok *t, int32_t id) {
    char buf[512];
    int n = tok_decode(t, id, buf, sizeof(buf));
    if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    fflush(stdout);
}

static void print_ids(const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
}

static int generate(const gen_args *a, const model *m, const tok *t) {
    gen_run r = {0};
    int n_prompt, rc, max_T = 256, status = 1;
    size_t plen = strlen(a->prompt);
    rc = tok_encode(t, a->prompt, plen, tok_add_bos(t), NULL, 0, &n_prompt);
    r.cap = n_prompt + a->n;
    if (r.cap > m->cfg.ctx_len) {
        fprintf(stderr, "generate: prompt (%d tokens) + %d exceeds the context length %d\n", n_prompt,
                a->n, m->cfg.ctx_len);
        return 1;
    }
    r.vocab = m->cfg.vocab;
    r.bs = 16;
    int n_blocks = (r.cap + r.bs - 1) / r.bs;
    eng_opts eo = {.backend = a->device, .kv_dtype = a->kv_dtype, .block_size = r.bs, .max_batch_tokens = max_T,
                   .max_seqs = 1, .n_threads = a->threads};
    /* Unknown device or a dtype it lacks: 0 here, and eng_new says why. */
    eo.kv_pool_bytes = eng_kv_token_bytes(m, &eo) * (size_t)n_blocks * (size_t)r.bs;
    char err[256];
    smp sm;
    r.ids = malloc((size_t)r.cap * sizeof(int32_t));
    r.blocks = malloc((size_t)n_blocks * sizeof(int32_t));
    r.logits = malloc((size_t)max_T * (size_t)r.vocab * sizeof(float));
    if (!r.ids || !r.blocks || !r.logits) goto out;
    for (int i = 0; i < n_blocks; i++) r.blocks[i] = i;
    if ((rc = tok_encode(t, a->prompt, plen, tok_add_bos(t), r.ids, r.cap, &n_prompt))) goto out;
    if ((rc = eng_new(m, &eo, &r.e, err, sizeof(err)))) {
        fprintf(stderr, "generate: %s\n", err);
        goto out;
    }
    smp_params sp = a->sp;
    int32_t eos = tok_eos(t);
    sp.stop_ids = eos >= 0 ? &eos : NULL;
    sp.n_stop = eos >= 0;
    if ((rc = smp_init(&sm, r.vocab, &sp))) {
        fprintf(stderr, "generate: bad sampling parameters: %s\n", err_str(rc));
        goto out;
    }
    if (a->logits_path && !(r.dump = fopen(a->logits_path, "wb"))) {
        perror(a->logits_path);
        goto out_smp;
    }
    r.n_ids = n_prompt;
    int rows = feed(&r, 0, n_prompt, max_T);
    for (int g = 0; rows > 0 && g < a->n; g++) {
        int32_t next = smp_sample(&sm, r.logits + (size_t)(rows - 1) * r.vocab);
        r.ids[r.n_ids++] = next;
        if (!a->ids) print_piece(t, next);
        if (smp_is_stop(&sm, next) || g == a->n - 1) break;
        rows = feed(&r, r.n_ids - 1, r.n_ids, max_T);
    }
    if (rows < 0) {
        fprintf(stderr, "generate: forward failed: %s\n", err_str(rows));
    } else {
        status = 0;
        if (a->ids) {
            print_ids(r.ids, n_prompt);
            print_ids(r.ids + n_prompt, r.n_ids - n_prompt);
        } else {
            printf("\n");
        }
        /* The weights are read in the file's layout, never copied: what is
         * resident is the mapping's pages (and the norms made f32). */
        fprintf(stderr,
                "generate: weights %.1f MiB resident (%.1f MiB of matrices read per token), KV pool %.1f MiB (%s)\n",
                (double)model_resident_bytes(m) / 1048576.0, (double)m->weight_bytes / 1048576.0,
                (double)eo.kv_pool_bytes / 1048576.0, eng_kv_dtype_name(eng_kv_dtype_of(r.e)));
    }
    if (r.dump && fclose(r.dump) != 0) status = 1;
out_smp:
    smp_deinit(&sm);
out:
    eng_free(r.e);
    free(r.ids);
    free(r.blocks);
    free(r.logits);
    return status;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    if (parse_args(argc, argv, &a)) {
        usage(stderr);
        return 2;
    }
    model *m;
    tok *t;
    char err[512];
    if (model_load(a.model, &m, err, sizeof(err))) {
        fprintf(stderr, "generate: %s\n", err);
        return 1;
    }
    if (tok_new_from_gguf(m->gguf, &t, err, sizeof(err))) {
        fprintf(stderr, "generate: %s: tokenizer: %s\n", a.model, err);
        model_free(m);
        return 1;
    }
    int status = generate(&a, m, t);
    tok_free(t);
    model_free(m);
    return status;
}
