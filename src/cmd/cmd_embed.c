/*
 * cmd_embed.c - `tessera embed`: sentence embeddings from a BERT-family
 * GGUF (engine/enc.h), for operators checking a model and for the
 * numerical test against the NumPy reference (tests/embed_ref.sh). Every
 * input runs in one batch, so the output also shows what batching gives;
 * each is printed as one JSON array of floats on its own line, in order.
 *
 * --ids takes token ids as the model's vocabulary numbers them, [CLS] and
 * [SEP] included. --text wraps the tokenizer's ids of the text (tok.h,
 * WordPiece for a "bert" vocabulary) in the file's [CLS] ... [SEP] ids,
 * as BERT's tokenizers do for one sentence; a file whose vocabulary the
 * tokenizer refuses says so and points to --ids.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "enc.h"
#include "err.h"
#include "tok.h"

#define EMBED_MAX_INPUTS 4096

typedef struct embed_input {
    const char *ids;        /* --ids argument, or NULL */
    const char *text;       /* --text argument, or NULL */
} embed_input;

typedef struct embed_args {
    const char *model;
    int threads;
    int n_inputs;
    embed_input in[EMBED_MAX_INPUTS];
} embed_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera embed MODEL.gguf (--ids 101,2023,102 | --text TEXT)... [--threads N]\n"
            "  MODEL.gguf   a BERT-family encoder (general.architecture \"bert\")\n"
            "  --ids LIST   one input as comma-separated token ids, [CLS]/[SEP] included\n"
            "  --text TEXT  one input as text, wrapped in [CLS] ... [SEP] (needs a tokenizer\n"
            "               for the file's vocabulary; use --ids where there is none)\n"
            "  --threads N  threads of the forward pass (default: all cores)\n"
            "Repeat --ids/--text for several inputs; all run as one batch. Prints one JSON\n"
            "array (the L2-normalised embedding) per input, in order.\n");
}

/* 0 on success, -1 on a usage error, 1 when --help printed the usage. */
static int parse_args(int argc, char **argv, embed_args *a) {
    static const struct option opts[] = {{"ids", required_argument, 0, 'i'},     {"text", required_argument, 0, 't'},
                                         {"threads", required_argument, 0, 'T'}, {"model", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i':
        case 't':
            if (a->n_inputs == EMBED_MAX_INPUTS) {
                fprintf(stderr, "embed: more than %d inputs\n", EMBED_MAX_INPUTS);
                return -1;
            }
            a->in[a->n_inputs++] = c == 'i' ? (embed_input){optarg, NULL} : (embed_input){NULL, optarg};
            break;
        case 'T':
            a->threads = (int)strtol(optarg, &end, 10);
            if (*end || a->threads < 0 || a->threads > 4096) return -1;
            break;
        case 'm': a->model = optarg; break;
        case 'h': return 1;
        default: return -1;
        }
    }
    if (optind < argc && !a->model) a->model = argv[optind++];
    return a->model && a->n_inputs > 0 && optind == argc ? 0 : -1;
}

/* Parses "101,2023,102" into ids (cap entries: one more than the context,
 * so that an input just too long reaches enc_embed and its message).
 * Returns the count, or -1 with a message on stderr. */
static int parse_ids(const char *s, int32_t *ids, int cap) {
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "embed: --ids '%s': want comma-separated non-negative integers\n", s);
            return -1;
        }
        if (n == cap) {
            fprintf(stderr, "embed: --ids '%.40s...': more than %d ids, longer than the context\n", s, cap - 1);
            return -1;
        }
        ids[n++] = (int32_t)v;
        if (!*end) return n;
        p = end + 1;
    }
}

/* The special id key, or -1 when the file has none. */
static int32_t special_id(const enc_model *m, const char *key) {
    uint32_t v;
    return gguf_get_u32(m->gguf, key, &v) == 0 && v < (uint32_t)m->cfg.vocab ? (int32_t)v : -1;
}

/* [CLS] + tokens of text + [SEP] into ids (cap entries): the count, or -1
 * with a message. */
static int encode_text(const enc_model *m, const tok *t, const char *text, int32_t *ids, int cap) {
    const int32_t cls = special_id(m, "tokenizer.ggml.cls_token_id");
    const int32_t sep = special_id(m, "tokenizer.ggml.seperator_token_id");
    int n = 0, rc;
    if (cls < 0 || sep < 0) {
        fprintf(stderr, "embed: --text: the file has no [CLS]/[SEP] ids (tokenizer.ggml.cls_token_id, "
                        "tokenizer.ggml.seperator_token_id); use --ids\n");
        return -1;
    }
    rc = tok_encode(t, text, strlen(text), 0, ids + 1, cap - 2, &n);
    if (rc || n > cap - 2) {
        fprintf(stderr, "embed: --text '%.40s': %s (%d tokens, at most %d)\n", text,
                rc ? err_str(rc) : "too long", n, cap - 2);
        return -1;
    }
    ids[0] = cls;
    ids[n + 1] = sep;
    return n + 2;
}

static void print_json(const float *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%.9g" : "%.9g", (double)v[i]);
    puts("]");
}

/* Turns every input into ids (into one buffer of cap ids) and runs them
 * as one batch. */
static int embed_all(const embed_args *a, const enc_model *m) {
    const int ctx = enc_ctx_len(m), dim = enc_dim(m);
    const int slot = ctx + 1; /* ids per input; see parse_ids */
    const size_t cap = (size_t)a->n_inputs * (size_t)slot;
    int32_t *buf = malloc(cap * sizeof(int32_t));
    const int32_t **seqs = calloc((size_t)a->n_inputs, sizeof(*seqs));
    int *lens = calloc((size_t)a->n_inputs, sizeof(int)), status = 1, total = 0, rc;
    float *out = malloc((size_t)a->n_inputs * (size_t)dim * sizeof(float));
    tok *t = NULL;
    enc_state *s = NULL;
    char err[512];
    if (!buf || !seqs || !lens || !out) {
        fprintf(stderr, "embed: out of memory\n");
        goto done;
    }
    for (int i = 0; i < a->n_inputs; i++) {
        int32_t *ids = buf + (size_t)i * slot;
        if (a->in[i].ids) {
            lens[i] = parse_ids(a->in[i].ids, ids, slot);
        } else {
            if (!t && (rc = tok_new_from_gguf(m->gguf, &t, err, sizeof(err)))) {
                fprintf(stderr, "embed: --text: no tokenizer for this file (%s); use --ids\n", err);
                goto done;
            }
            lens[i] = encode_text(m, t, a->in[i].text, ids, slot);
        }
        if (lens[i] < 0) goto done;
        seqs[i] = ids;
        total += lens[i];
    }
    if ((rc = enc_state_new(m, total, a->threads, &s, err, sizeof(err))) ||
        (rc = enc_embed(s, seqs, lens, a->n_inputs, out, err, sizeof(err)))) {
        fprintf(stderr, "embed: %s\n", err);
        goto done;
    }
    for (int i = 0; i < a->n_inputs; i++) print_json(out + (size_t)i * dim, dim);
    status = fflush(stdout) ? 1 : 0;
done:
    enc_state_free(s);
    tok_free(t);
    free(out);
    free(lens);
    free(seqs);
    free(buf);
    return status;
}

int cmd_embed(int argc, char **argv) {
    embed_args *a = calloc(1, sizeof(*a));
    if (!a) return 1;
    int rc = parse_args(argc, argv, a);
    if (rc) {
        usage(rc > 0 ? stdout : stderr);
        free(a);
        return rc > 0 ? 0 : 2;
    }
    enc_model *m;
    char err[512];
    if ((rc = enc_load(a->model, &m, err, sizeof(err)))) {
        fprintf(stderr, "embed: %s\n", err);
        free(a);
        return 1;
    }
    rc = embed_all(a, m);
    enc_free(m);
    free(a);
    return rc;
}
