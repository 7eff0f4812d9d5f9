/*
 * err.h - the one table of tessera's result codes.
 *
 * Every fallible function in tessera returns an int: 0 on success, a negative
 * TS_ERR_* code on failure. The table below is the single source of the code,
 * its symbolic name, a one-line message and the HTTP status the server maps it
 * to, so the enum, err_str(), err_name() and err_http_status() can never drift
 * apart. Detail (which tensor, which byte offset) travels separately in a
 * caller-supplied message buffer; the code says what class of thing failed.
 */
#ifndef TS_ERR_H
#define TS_ERR_H

#include <stddef.h>

/*      name                code  http  message */
#define TS_ERR_TABLE(X)                                                              \
    X(OK,                    0,  200, "success")                                     \
    X(NOMEM,                -1,  503, "out of memory")                               \
    X(INVAL,                -2,  400, "invalid argument")                            \
    X(IO,                   -3,  500, "I/O error")                                   \
    X(GGUF_MAGIC,           -10, 400, "not a GGUF file (bad magic)")                 \
    X(GGUF_VERSION,         -11, 400, "unsupported GGUF version")                    \
    X(GGUF_TRUNCATED,       -12, 400, "GGUF file truncated")                         \
    X(GGUF_CORRUPT,         -13, 400, "GGUF file corrupt")                           \
    X(GGUF_TYPE,            -14, 400, "unsupported tensor type")                     \
    X(GGUF_BOUNDS,          -15, 400, "tensor data outside the file")                \
    X(MODEL_ARCH,           -20, 400, "unsupported model architecture")              \
    X(MODEL_TENSOR,         -21, 400, "model tensor missing")                        \
    X(MODEL_SHAPE,          -22, 400, "model tensor has the wrong shape")            \
    X(MODEL_DIMS,           -23, 400, "model dimensions absurd or inconsistent")     \
    X(MODEL_KEY,            -24, 400, "model metadata key missing or mistyped")      \
    X(TOK_VOCAB,            -30, 400, "tokenizer vocabulary invalid")                \
    X(TOK_MODEL,            -31, 400, "unsupported tokenizer model")                 \
    X(TOK_RANGE,            -32, 400, "token id out of range")                       \
    X(KV_BLOCK,             -40, 400, "KV block id out of range")                    \
    X(KV_CAPACITY,          -41, 400, "sequence exceeds its KV block table")         \
    X(BATCH_LIMIT,          -42, 400, "batch exceeds the engine's limits")           \
    X(CTX_LIMIT,            -43, 400, "sequence exceeds the model's context length") \
    X(CONFIG,               -50, 500, "invalid configuration")                       \
    X(AUTH,                 -51, 401, "missing or invalid API key")                  \
    X(RANDOM,               -52, 500, "random number generator failed")              \
    X(SHUTDOWN,             -60, 503, "server is shutting down")                     \
    X(MIG_LAYOUT,           -70, 400, "MIG layout invalid")                          \
    X(PLAN_INFEASIBLE,      -71, 422, "plan infeasible")                             \
    X(SCENARIO,             -80, 400, "invalid bench scenario")                      \
    X(DEVICE,               -90, 503, "accelerator error")

enum {
#define TS_ERR_ENUM(name, code, http, msg) TS_ERR_##name = (code),
    TS_ERR_TABLE(TS_ERR_ENUM)
#undef TS_ERR_ENUM
};

/* Message for a code; "unknown error" for codes not in the table. */
const char *err_str(int code);
/* Symbolic name ("GGUF_MAGIC") for a code; "UNKNOWN" otherwise. */
const char *err_name(int code);
/* HTTP status the server answers with for this code; 500 if unknown. */
int err_http_status(int code);

/* Write the detail message into err (cut to errlen, NUL-terminated; err may
 * be NULL or errlen 0 to drop it) and return code, so a failure path reads
 * `return err_set(err, errlen, TS_ERR_GGUF_CORRUPT, "tensor '%s' ...", name);`. */
__attribute__((format(printf, 4, 5)))
int err_set(char *err, size_t errlen, int code, const char *fmt, ...);

/* s with every control character written as an escape (\n, \r, \t, \xNN)
 * into out[0..cap) (cap > 0), cut to fit; returns out. A detail message is
 * one line, but the values and keys it quotes come from a document (a YAML
 * scalar, a JSON string) that may hold any of them. */
const char *err_escape_ctl(char *out, size_t cap, const char *s);

#endif
