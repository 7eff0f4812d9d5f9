/*
 * cmd_tokenize.c - `tessera tokenize`: a model's tokenizer on standard input,
 * one text per line, for operators checking what a prompt costs and for the
 * tests that compare tessera's ids with a reference tokenizer.
 *
 * Only the tokenizer.ggml.* keys of the GGUF are read, so a vocabulary-only
 * file (no tensors) is enough. Each input line is either a JSON object
 * {"text": "..."} (so texts may hold newlines, tabs and any Unicode) or, if
 * it does not start with '{', the line's bytes themselves. Each output line
 * is the JSON array of ids. With --decode, each input line is a JSON array
 * of ids (or {"ids": [...]}) and each output line the JSON string they
 * decode to; bytes that are not valid UTF-8 come out as U+FFFD.
 */
#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "err.h"
#include "gguf.h"
#include "tok.h"

typedef struct tkz_args {
    const char *model, *pre;
    int special, no_bos, bos, decode;
} tkz_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera tokenize MODEL.gguf [--special] [--no-bos|--bos] [--pre NAME] [--decode]\n"
            "  Reads texts from standard input, one per line: {\"text\": \"...\"} or a plain\n"
            "  line, and writes one JSON array of token ids per line.\n"
            "  --special  control tokens written in the text (<|im_start|>, <s>) are those\n"
            "             tokens; otherwise they are text (user-defined tokens always match)\n"
            "  --no-bos   never prepend BOS; --bos: always (default: the vocabulary's\n"
            "             add_bos_token; WordPiece: [CLS] ... [SEP])\n"
            "  --pre      use this BPE pre-tokenizer instead of the file's tokenizer.ggml.pre\n"
            "             (known: default, gpt-2, llama-bpe, qwen2, deepseek-llm, deepseek-coder,\n"
            "             deepseek-v3, falcon, starcoder, smollm, command-r, gpt-4o, tekken, ...)\n"
            "  --decode   the reverse: read JSON arrays of ids, write JSON strings\n"
            "  The model may also be given as --model M.gguf.\n");
}

static int parse_args(int argc, char **argv, tkz_args *a) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"pre", required_argument, 0, 'p'},
        {"special", no_argument, 0, 's'},     {"no-bos", no_argument, 0, 'n'},
        {"bos", no_argument, 0, 'b'},         {"decode", no_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    memset(a, 0, sizeof *a);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'p': a->pre = optarg; break;
        case 's': a->special = 1; break;
        case 'n': a->no_bos = 1; break;
        case 'b': a->bos = 1; break;
        case 'd': a->decode = 1; break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
    }
    if (!a->model && optind < argc) a->model = argv[optind++];
    return a->model && optind == argc && !(a->bos && a->no_bos) ? 0 : -1;
}

/* Write s[0, n) as a JSON string; invalid UTF-8 bytes become U+FFFD. */
static void put_json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            fputc(c, f);
            i++;
        } else {
            size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
            int ok = len > 0 && i + len <= n;
            for (size_t k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, len, f);
                i += len;
            } else {
                fputs("\\ufffd", f);
                i++;
            }
        }
    }
    fputc('"', f);
}

static int encode_line(const tok *t, const char *text, size_t len, unsigned flags) {
    int need = 0;
    int rc = tok_encode_ex(t, text, len, flags, NULL, 0, &need);
    if (rc < 0 && !(rc == TS_ERR_INVAL && need > 0)) return rc;
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (!ids) return TS_ERR_NOMEM;
    if ((rc = tok_encode_ex(t, text, len, flags, ids, need, &need)) == 0) {
        fputc('[', stdout);
        for (int i = 0; i < need; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
        fputs("]\n", stdout);
    }
    free(ids);
    return rc;
}

static int decode_line(const tok *t, const cJSON *arr, char *err, size_t errlen) {
    if (cJSON_IsObject(arr)) arr = cJSON_GetObjectItemCaseSensitive(arr, "ids");
    if (!cJSON_IsArray(arr)) return err_set(err, errlen, TS_ERR_INVAL, "expected a JSON array of ids");
    int n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return TS_ERR_NOMEM;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (v < 0 || v >= tok_n_vocab(t) || v != (double)(int32_t)v) {
            free(ids);
            return err_set(err, errlen, TS_ERR_TOK_RANGE, "id %d of the line is not a token id", k);
        }
        ids[k++] = (int32_t)v;
    }
    size_t need = 0;
    int rc = tok_decode_seq(t, ids, (size_t)n, 1, NULL, 0, &need);
    char *buf = malloc(need + 1);
    if (!buf) rc = TS_ERR_NOMEM;
    else if ((rc = tok_decode_seq(t, ids, (size_t)n, 1, buf, need, &need)) == 0) {
        put_json_str(stdout, buf, need);
        fputc('\n', stdout);
    }
    free(buf);
    free(ids);
    return rc;
}

/* One input line (without its newline). */
static int do_line(const tok *t, const tkz_args *a, unsigned flags, const char *line, size_t len,
                   char *err, size_t errlen) {
    if (!a->decode && (len == 0 || line[0] != '{')) return encode_line(t, line, len, flags);
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j) return err_set(err, errlen, TS_ERR_INVAL, "not valid JSON");
    int rc;
    if (a->decode) {
        rc = decode_line(t, j, err, errlen);
    } else {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
        rc = cJSON_IsString(text) ? encode_line(t, text->valuestring, strlen(text->valuestring), flags)
                                  : err_set(err, errlen, TS_ERR_INVAL, "no \"text\" string in the object");
    }
    cJSON_Delete(j);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    tkz_args a;
    if (parse_args(argc, argv, &a) < 0) {
        usage(stderr);
        return 2;
    }
    char err[512] = "";
    gguf_ctx *g = NULL;
    tok *t = NULL;
    int rc = gguf_open(a.model, &g, err, sizeof err);
    if (rc == 0) rc = tok_new_from_gguf_ex(g, a.pre, &t, err, sizeof err);
    gguf_close(g);
    if (rc < 0) {
        fprintf(stderr, "tessera tokenize: %s: %s (%s)\n", a.model, err, err_name(rc));
        return 1;
    }
    unsigned flags = a.special ? TOK_ENC_PARSE_SPECIAL : 0;
    if (a.bos || (!a.no_bos && tok_add_bos(t))) flags |= TOK_ENC_ADD_BOS;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len > 0 && line[len - 1] == '\n') len--;
        err[0] = 0;
        rc = do_line(t, &a, flags, line, len, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "tessera tokenize: line %ld: %s (%s)\n", lineno, err[0] ? err : err_str(rc),
                    err_name(rc));
    }
    free(line);
    tok_free(t);
    if (fflush(stdout) != 0) return 1;
    return rc < 0 ? 1 : 0;
}
