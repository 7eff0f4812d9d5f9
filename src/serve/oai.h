/*
 * oai.h - the OpenAI API wire format: request bodies of POST /v1/completions
 * and POST /v1/chat/completions parsed and validated into an oai_request,
 * and every response body tessera sends back (completions, chat
 * completions, SSE stream chunks, the usage chunk, mid-stream errors, the
 * [DONE] terminator, the /v1/models list, and OpenAI-shaped errors).
 *
 * Everything here is a pure function of its arguments: no I/O, no threads,
 * no clock (ids and "created" times are passed in), no global state, so the
 * HTTP threads may call it concurrently. Parsing uses cJSON and only its
 * thread-safe entry points (the parse-end pointer, never cJSON_GetErrorPtr's
 * global).
 *
 * Ownership: an oai_request owns every string and array it points to;
 * oai_request_free releases them. Every response builder returns a malloc'd,
 * NUL-terminated string the caller frees, or NULL when out of memory. An
 * oai_error is a plain value with inline buffers: nothing to free.
 *
 * Validation is strict, because invariant 4 of DESIGN.md says bad input gets
 * a clear error and a request that silently loses a parameter is worse than
 * one that is refused: wrong types, out-of-range values, invalid UTF-8 (in
 * any string or key of the body, checked strictly: overlongs, surrogates,
 * code points above U+10FFFF), raw control characters inside strings and the
 * \u0000 escape are refused with a 400 that names the field, so is a key
 * repeated within one object, at any depth (JSON leaves its meaning open and
 * parsers disagree on which copy wins, so a proxy and tessera could read
 * two different requests from one body), and so are
 * features tessera does not implement (tools, function calling, suffix)
 * instead of being ignored. A completion or chat body may carry only the
 * fields this module knows: any other is refused with a 400 naming it
 * (code "unknown_parameter"), as OpenAI refuses an unrecognised argument,
 * because a silently dropped field (a guided_json the server never heard
 * of) makes a client believe its output is something it is not. Every
 * known field changes what the server does, except the documented no-ops
 * of OAI_NOOP_FIELDS. JSON null counts as "absent" for every optional
 * field.
 *
 * Response text is written as valid JSON whatever bytes it holds: control
 * characters are escaped and every ill-formed UTF-8 subsequence becomes one
 * U+FFFD (Unicode's "maximal subpart" rule), so a tokenizer that splits a
 * character can never make tessera emit invalid JSON.
 *
 * Known limits: numbers come through cJSON as doubles, so integers beyond
 * 2^53 (only plausible for "seed") are rounded to the nearest double, and
 * 5.0 reads as the integer 5; a
 * prompt or message list is limited only by the body size the HTTP layer
 * accepts. Token ids in a pre-tokenized prompt are checked to be
 * non-negative 32-bit integers only: the vocabulary range is the
 * tokenizer's business (TS_ERR_TOK_RANGE).
 */
#ifndef TS_OAI_H
#define TS_OAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampler.h"          /* smp_bias, smp_lp: logit_bias and logprobs */

#define OAI_MAX_STOP        4         /* stop strings a request may name */
#define OAI_MAX_TOKENS_CAP  1000000u  /* max_tokens above this is refused */
#define OAI_ERR_MSG_MAX     320       /* bytes of an error message, with NUL */
#define OAI_ERR_PARAM_MAX   64        /* bytes of an error param, with NUL */

#define OAI_MAX_N           128       /* n and best_of */
#define OAI_MAX_SEQS        256       /* sequences of one request: prompts x best_of */
#define OAI_MAX_LOGPROBS    SMP_MAX_TOP /* alternatives per token (OpenAI's 20) */
#define OAI_MAX_CHOICES     256       /* strings of guided_choice */
#define OAI_PIECE_MAX       256       /* bytes of one token's text in logprobs */

/* Fields accepted and deliberately without effect: user (an end-user id for
 * the operator's abuse tracking; tessera keeps none), metadata and store
 * (OpenAI's stored completions; tessera stores nothing), service_tier
 * (OpenAI's processing tiers; tessera's tenants have their own), and
 * parallel_tool_calls (tools are refused, so there is nothing to
 * parallelise). Each is still type-checked. Inside a chat message, "name"
 * (a participant's name) is accepted, checked to be a string and ignored
 * the same way: chat templates are not given it, so it never reaches the
 * prompt. */
#define OAI_NOOP_FIELDS     "user, metadata, store, service_tier, parallel_tool_calls"

/* The SSE event that ends every stream, successful or not. */
#define OAI_SSE_DONE        "data: [DONE]\n\n"

/* ---- requests ------------------------------------------------------------ */

typedef enum oai_kind {
    OAI_COMPLETION = 0,       /* POST /v1/completions */
    OAI_CHAT,                 /* POST /v1/chat/completions */
    OAI_EMBEDDINGS,           /* POST /v1/embeddings */
    OAI_TOKENIZE,             /* POST /tokenize (vLLM's shape) */
    OAI_DETOKENIZE,           /* POST /detokenize (vLLM's shape) */
} oai_kind;

#define OAI_MAX_INPUTS      2048      /* inputs of one embeddings request (OpenAI's cap) */

typedef enum oai_role {
    OAI_ROLE_SYSTEM = 0,      /* "system", and "developer" (its newer name) */
    OAI_ROLE_USER,
    OAI_ROLE_ASSISTANT,
    OAI_ROLE_TOOL,
} oai_role;

/* The role's name as chat templates spell it: system, user, assistant, tool. */
const char *oai_role_name(oai_role r);

typedef struct oai_message {
    oai_role role;
    char *content;            /* owned UTF-8, NUL-terminated, no NUL inside;
                                 text parts concatenated; "" when null/empty */
    size_t content_len;       /* bytes, without the NUL */
} oai_message;

/* One input of an embeddings request: text, or token ids. */
typedef struct oai_input {
    char *text;               /* owned, or NULL; non-empty for embeddings (a
                                 completion prompt may be "") */
    size_t len;               /* bytes of text */
    int32_t *tokens;          /* (n_tokens) owned, or NULL */
    size_t n_tokens;          /* >= 1 when tokens is set */
} oai_input;

/* Structured output asked for by response_format or vLLM's guided_*. The
 * parser validates the shape; compiling the grammar is the server's. */
typedef enum oai_guided_kind {
    OAI_GUIDED_NONE = 0,
    OAI_GUIDED_JSON_OBJECT,   /* response_format {type: json_object}: any JSON object */
    OAI_GUIDED_JSON_SCHEMA,   /* response_format json_schema, guided_json: spec */
    OAI_GUIDED_REGEX,         /* guided_regex: spec */
    OAI_GUIDED_CHOICE,        /* guided_choice: choices */
} oai_guided_kind;

typedef struct oai_guided {
    oai_guided_kind kind;
    const char *field;        /* static: the field that asked ("response_format",
                                 "guided_json", ...), for errors */
    char *spec;               /* owned: the schema as compact JSON text (a
                                 json_schema without "schema" is "{}"), or the
                                 regex; NULL otherwise */
    char **choices;           /* (n_choices) owned non-empty strings */
    size_t n_choices;
} oai_guided;

/* A validated request. Text fields are owned, valid UTF-8, NUL-terminated
 * and hold no NUL byte inside. */
typedef struct oai_request {
    oai_kind kind;
    char *model;              /* non-empty */

    /* Completions: exactly one of prompt / prompt_tokens is set. */
    char *prompt;             /* text prompt (may be ""), or NULL */
    size_t prompt_len;        /* bytes */
    int32_t *prompt_tokens;   /* (n_prompt_tokens) pre-tokenized prompt, or NULL */
    size_t n_prompt_tokens;   /* >= 1 when prompt_tokens is set */

    /* Completions may also send several prompts ("prompt" as a list of
     * strings or of token-id lists, 2..OAI_MAX_SEQS of them): then prompt
     * and prompt_tokens are NULL and each is one of inputs[] below (a text,
     * possibly empty, or token ids). A list of one is the single prompt. */

    /* Chat: the conversation, in order. */
    oai_message *messages;    /* (n_messages), n_messages >= 1 */
    size_t n_messages;

    uint32_t max_tokens;      /* 1..OAI_MAX_TOKENS_CAP; 0 = server default */
    float temperature;        /* 0..2; default 1; 0 = greedy */
    float top_p;              /* (0, 1]; default 1 = off */
    int32_t top_k;            /* >= 0; 0 = off (extension; -1 reads as 0) */
    bool has_seed;            /* seed was given */
    uint64_t seed;            /* two's complement of a negative seed */
    char *stop[OAI_MAX_STOP]; /* (n_stop) non-empty stop strings */
    size_t n_stop;
    bool stream;              /* answer as SSE */
    bool include_usage;       /* stream_options.include_usage: end with a usage chunk */
    char *user;               /* end-user id for abuse tracking, or NULL */
    char *cache_salt;         /* prefix cache salt (vLLM's; completions and chat):
                                 the prompt shares cached blocks only with
                                 requests of the same tenant and salt; or NULL */
    /* Choices and logprobs. */
    uint32_t n;               /* choices per prompt, 1..OAI_MAX_N; default 1 */
    uint32_t best_of;         /* completions: sequences run per prompt, the n
                                 with the highest cumulative logprob answer;
                                 n..OAI_MAX_N, 0 = n; not with stream */
    bool echo;                /* completions: the prompt precedes the text
                                 (and its tokens the logprobs) */
    int32_t logprobs;         /* -1: none; else alternatives per token,
                                 0..OAI_MAX_LOGPROBS: completions' "logprobs",
                                 chat's "top_logprobs" under "logprobs": true */

    /* Penalties and the vLLM extensions tessera implements (sampler.h has
     * the exact semantics). */
    float presence_penalty;   /* -2..2, 0 off */
    float frequency_penalty;  /* -2..2, 0 off */
    float repetition_penalty; /* (0, 100], default 1 = off */
    float min_p;              /* 0..1, 0 off */
    smp_bias *logit_bias;     /* (n_logit_bias) owned; ids unchecked against
                                 the vocabulary (the server's business) */
    size_t n_logit_bias;      /* 0..SMP_MAX_BIAS */
    int32_t *stop_token_ids;  /* (n_stop_token_ids) owned, or NULL */
    size_t n_stop_token_ids;  /* 0..SMP_MAX_STOP */
    uint32_t min_tokens;      /* <= max_tokens when that is given */
    bool ignore_eos;          /* the model's end tokens do not end the text */
    oai_guided guided;        /* structured output, kind NONE when not asked */

    bool parse_special;       /* "parse_special_tokens" (a tessera extension,
                                 completions and tokenize): special tokens
                                 written in the prompt text are special
                                 tokens; by default they are plain text */

    /* Embeddings: "input" as a list, whatever shape it came in. */
    oai_input *inputs;        /* (n_inputs), 1..OAI_MAX_INPUTS */
    size_t n_inputs;
    bool base64;              /* encoding_format "base64" (else "float") */
    uint32_t dimensions;      /* 0 = not given; else must equal the model's */

    /* Tokenize: prompt (text or ids, as completions) or messages (as chat;
     * has_messages says which); detokenize: prompt_tokens. model may be
     * NULL for these two: the server's only model is meant. */
    bool has_messages;
    bool add_special_tokens;  /* default true: BOS (WordPiece: [CLS] and
                                 [SEP]) around a prompt; with messages the
                                 chat template alone decides */
    bool add_generation_prompt; /* default true (messages only) */
} oai_request;

/* An OpenAI-shaped error. A plain value: copy it, no free. */
typedef struct oai_error {
    int status;               /* HTTP status: 400, 401, 404, 413, 429, 500, 503 */
    const char *type;         /* static: "invalid_request_error", "authentication_error",
                                 "not_found_error", "rate_limit_error", "server_error" */
    const char *code;         /* static machine-readable code, or NULL */
    char param[OAI_ERR_PARAM_MAX];  /* offending field ("messages[1].content"); "" = null */
    char message[OAI_ERR_MSG_MAX];  /* human-readable, UTF-8 */
} oai_error;

/* Parse and validate a POST /v1/completions body of len bytes (need not be
 * NUL-terminated; body may be NULL when len is 0).
 *   out: OUT: the request; on failure it is left empty (zeroed), so
 *        oai_request_free on it is always harmless.
 *   err: OUT: filled on failure (may be NULL).
 * Returns 0; TS_ERR_INVAL for a bad request (err->status 400); TS_ERR_NOMEM
 * (err->status 503, type server_error). */
int oai_parse_completion(const char *body, size_t len, oai_request *out, oai_error *err);

/* The same for a POST /v1/chat/completions body. */
int oai_parse_chat(const char *body, size_t len, oai_request *out, oai_error *err);

/* POST /v1/embeddings: model, input (a string, a list of strings, a list of
 * token ids, or a list of lists of token ids; strings non-empty),
 * encoding_format ("float" or "base64"), dimensions (a positive integer;
 * the server refuses any value but the model's own), user. */
int oai_parse_embeddings(const char *body, size_t len, oai_request *out, oai_error *err);

/* POST /tokenize: model (optional), and prompt (a string or token ids) or
 * messages (as chat), add_special_tokens, add_generation_prompt. */
int oai_parse_tokenize(const char *body, size_t len, oai_request *out, oai_error *err);

/* POST /detokenize: model (optional), tokens (token ids, non-empty). */
int oai_parse_detokenize(const char *body, size_t len, oai_request *out, oai_error *err);

/* Free what r owns and zero it. Safe on a zeroed request and twice. */
void oai_request_free(oai_request *r);

/* ---- errors -------------------------------------------------------------- */

/* Fill e. type and code must be static strings (code may be NULL); param may
 * be NULL (JSON null) and is truncated to fit; the message is printf-style
 * and truncated to fit at a UTF-8 character boundary. For the HTTP layer's
 * own errors (401 bad key, 404 unknown model, 429 limits, 503 overload). */
void oai_error_set(oai_error *e, int status, const char *type, const char *param,
                   const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* {"error":{"message":...,"type":...,"param":...,"code":...}}; malloc'd. */
char *oai_error_json(const oai_error *e);

/* The same object as one SSE event, "data: {...}\n\n", for a stream that
 * fails after its headers went out; follow it with OAI_SSE_DONE. */
char *oai_error_sse(const oai_error *e);

/* ---- responses ----------------------------------------------------------- */

typedef enum oai_finish {
    OAI_FINISH_NONE = 0,      /* still running: finish_reason null */
    OAI_FINISH_STOP,          /* "stop": end-of-sequence token or a stop string */
    OAI_FINISH_LENGTH,        /* "length": max_tokens or the context ran out */
} oai_finish;

/* Bytes of a response id: 96 random bits, so that ids neither collide nor
 * let one tenant count another's requests. */
#define OAI_ID_BYTES        12

/* What every response of one request shares. */
typedef struct oai_head {
    oai_kind kind;            /* selects the object names and the id prefix */
    uint8_t id[OAI_ID_BYTES]; /* printed as "cmpl-<24 hex>" / "chatcmpl-<24 hex>";
                                 the caller fills it from a CSPRNG */
    int64_t created;          /* unix seconds */
    const char *model;        /* echoed as given (sanitised like text) */
} oai_head;

typedef struct oai_usage {
    uint32_t prompt_tokens;
    uint32_t completion_tokens;   /* total_tokens is their sum */
} oai_usage;

/* The whole answer of a non-streaming request: for OAI_COMPLETION
 * {id, object:"text_completion", created, model,
 *  choices:[{index:0, text, finish_reason, logprobs:null}], usage},
 * for OAI_CHAT {id, object:"chat.completion", created, model,
 *  choices:[{index:0, message:{role:"assistant", content}, finish_reason}],
 *  usage}. text is len bytes of UTF-8 (NULL allowed when len is 0). */
char *oai_response_json(const oai_head *h, const char *text, size_t len,
                        oai_finish finish, const oai_usage *usage);

/* One streamed piece as an SSE event "data: {...}\n\n". For OAI_COMPLETION
 * choices:[{index:0, text, finish_reason}] (text NULL reads as "");
 * for OAI_CHAT object "chat.completion.chunk" with
 * choices:[{index:0, delta:{role?, content?}, finish_reason}]: role
 * "assistant" appears when first is true (the first chunk of a stream),
 * content when text is not NULL, so the closing chunk can carry an empty
 * delta and only the finish_reason. */
char *oai_chunk_sse(const oai_head *h, bool first, const char *text, size_t len,
                    oai_finish finish);

/* The last chunk of a stream that asked for include_usage: choices:[] and
 * usage, as an SSE event. */
char *oai_usage_sse(const oai_head *h, const oai_usage *usage);

/* One choice of an answer or of a stream chunk. */
typedef struct oai_choice {
    uint32_t index;           /* prompt * n + j */
    const char *text;         /* (len) UTF-8 (sanitised like all text); NULL
                                 reads as "" (in a chat chunk: no content) */
    size_t len;
    oai_finish finish;        /* NONE in a chunk that does not end it */
    bool first;               /* chat chunk: the delta carries the role */
    bool has_logprobs;        /* false: "logprobs": null */
    const int32_t *ids;       /* (n_lp) the tokens, in order */
    const smp_lp *lps;        /* (n_lp) their logprobs; a NaN logprob (a
                                 prompt's first token) is written as null */
    size_t n_lp;
    size_t *text_offset;      /* completions: in, the text_offset of ids[0];
                                 out, past the last (for the next chunk);
                                 NULL: from 0 */
} oai_choice;

/* Token ids to text for logprobs: text returns a pointer to len bytes,
 * either its own or written into buf (cap bytes). */
typedef struct oai_pieces {
    const char *(*text)(void *ctx, int32_t id, char *buf, size_t cap, size_t *len);
    void *ctx;
} oai_pieces;

/* The whole answer with n choices: for OAI_COMPLETION {..., object:
 * "text_completion", choices:[{index, text, logprobs, finish_reason}],
 * usage}, logprobs OpenAI's completions object {tokens, token_logprobs,
 * top_logprobs:[{text: logprob}], text_offset}; for OAI_CHAT
 * {..., object:"chat.completion", choices:[{index, message, logprobs,
 * finish_reason}], usage}, logprobs {content:[{token, logprob, bytes,
 * top_logprobs:[{token, logprob, bytes}]}]}. A logprob of -inf is written
 * -9999 (JSON has no infinity). */
char *oai_choices_json(const oai_head *h, const oai_choice *c, size_t n, const oai_usage *usage,
                       const oai_pieces *p);

/* One choice as one SSE chunk, shaped as oai_chunk_sse with the choice's
 * index and logprobs. */
char *oai_choice_sse(const oai_head *h, const oai_choice *c, const oai_pieces *p);

/* GET /v1/models: {object:"list", data:[{id, object:"model", created,
 * owned_by:"tessera"}...]} for n model ids (ids may be NULL when n is 0). */
char *oai_models_json(const char *const *ids, size_t n, int64_t created);

/* One entry of GET /v1/models, with what tessera adds to OpenAI's fields:
 * the model's kind ("chat" or "embedding"), its context length, and
 * whether it carries a chat template (and where it came from: "gguf",
 * "config", or null for none). */
typedef struct oai_model_info {
    const char *id;
    const char *kind;         /* "chat" | "embedding" */
    int32_t max_model_len;
    const char *chat_template; /* "gguf" | "config" | NULL */
} oai_model_info;

char *oai_models_info_json(const oai_model_info *m, size_t n, int64_t created);

/* POST /v1/embeddings' answer: {object:"list", data:[{object:"embedding",
 * index, embedding}], model, usage:{prompt_tokens, total_tokens}}. emb is
 * (n, dim) floats; base64 writes each vector as the base64 of its
 * little-endian float32 bytes, as OpenAI does for encoding_format base64. */
char *oai_embeddings_json(const char *model, const float *emb, size_t n, size_t dim, bool base64,
                          uint64_t prompt_tokens);

/* POST /tokenize's answer: {count, max_model_len, tokens:[...]}. */
char *oai_tokenize_json(const int32_t *ids, size_t n, int32_t max_model_len);

/* POST /detokenize's answer: {prompt: text}. */
char *oai_detokenize_json(const char *text, size_t len);

#endif
