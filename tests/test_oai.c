/* test_oai.c - unit tests of the OpenAI wire format (src/serve/oai.c).
 *
 * Request bodies are copied into exact-size heap buffers without a NUL, so
 * that AddressSanitizer catches any read past the length the parser is
 * given. Every refusal is checked for its status, type, param and a piece of
 * its message, and for leaving the request empty. Response bodies are parsed
 * back with cJSON and read field by field; SSE framing and the error shape
 * are compared byte for byte. A seeded mutation loop at the end throws
 * damaged bodies at both parsers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "serve/oai.h"

/* ---- helpers -------------------------------------------------------------- */

static int parse_n(oai_kind kind, const char *body, size_t len, oai_request *r, oai_error *e) {
    char *copy = len ? malloc(len) : NULL;   /* exact size: no NUL after it */
    if (len) memcpy(copy, body, len);
    int rc = kind == OAI_CHAT         ? oai_parse_chat(copy, len, r, e)
             : kind == OAI_EMBEDDINGS ? oai_parse_embeddings(copy, len, r, e)
             : kind == OAI_TOKENIZE   ? oai_parse_tokenize(copy, len, r, e)
             : kind == OAI_DETOKENIZE ? oai_parse_detokenize(copy, len, r, e)
                                      : oai_parse_completion(copy, len, r, e);
    free(copy);
    return rc;
}

static void ok(oai_kind kind, const char *body, oai_request *r) {
    oai_error e;
    int rc = parse_n(kind, body, strlen(body), r, &e);
    if (rc) print_error("unexpected refusal of %s: %s (param %s)\n", body, e.message, e.param);
    assert_int_equal(rc, 0);
    assert_int_equal(r->kind, kind);
}

static void bad_n(oai_kind kind, const char *body, size_t len, const char *param,
                  const char *msg_part) {
    oai_request r;
    oai_error e;
    memset(&r, 0x5a, sizeof r);
    int rc = parse_n(kind, body, len, &r, &e);
    if (rc != TS_ERR_INVAL) print_error("expected a refusal of %.*s\n", (int)len, body);
    assert_int_equal(rc, TS_ERR_INVAL);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.type, "invalid_request_error");
    assert_string_equal(e.param, param ? param : "");
    if (!strstr(e.message, msg_part))
        print_error("message '%s' lacks '%s'\n", e.message, msg_part);
    assert_non_null(strstr(e.message, msg_part));
    oai_request zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&r, &zero, sizeof r);   /* refusal leaves it empty */
}

static void bad(oai_kind kind, const char *body, const char *param, const char *msg_part) {
    bad_n(kind, body, strlen(body), param, msg_part);
}

/* A completion body {"model":"m","prompt":"p",<extra>}. */
static void bad_c(const char *extra, const char *param, const char *msg_part) {
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",%s}", extra);
    bad(OAI_COMPLETION, body, param, msg_part);
}

static void ok_c(const char *extra, oai_request *r) {
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"p\",%s}", extra);
    ok(OAI_COMPLETION, body, r);
}

/* A chat body {"model":"m","messages":[{"role":"user","content":"hi"}],<extra>}. */
static void bad_chat(const char *extra, const char *param, const char *msg_part) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}", extra);
    bad(OAI_CHAT, body, param, msg_part);
}

static void ok_chat(const char *extra, oai_request *r) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}", extra);
    ok(OAI_CHAT, body, r);
}

/* A chat body whose messages array is msgs. */
static void bad_msgs(const char *msgs, const char *param, const char *msg_part) {
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":%s}", msgs);
    bad(OAI_CHAT, body, param, msg_part);
}

/* Strict UTF-8 check written independently of oai.c (decode, then test the
 * code point), used to confirm what an accepted request holds. */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], len, cp;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
        else return 0;
        if (i + len > n) return 0;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* ---- completions: valid ---------------------------------------------------- */

static void test_completion_minimal(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_COMPLETION, "{\"model\":\"demo\",\"prompt\":\"Once upon\"}", &r);
    assert_string_equal(r.model, "demo");
    assert_string_equal(r.prompt, "Once upon");
    assert_int_equal(r.prompt_len, 9);
    assert_null(r.prompt_tokens);
    assert_int_equal(r.n_prompt_tokens, 0);
    assert_null(r.messages);
    assert_int_equal(r.max_tokens, 0);              /* server default */
    assert_true(r.temperature == 1.0f);
    assert_true(r.top_p == 1.0f);
    assert_int_equal(r.top_k, 0);
    assert_false(r.has_seed);
    assert_int_equal(r.n_stop, 0);
    assert_false(r.stream);
    assert_false(r.include_usage);
    assert_null(r.user);
    oai_request_free(&r);
    oai_request_free(&r);                            /* twice is harmless */
    assert_null(r.model);
}

static void test_completion_full(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_COMPLETION,
       "{\"model\":\"demo\",\"prompt\":\"a\\nb \\u00e9\\ud83d\\ude00\",\"max_tokens\":16,"
       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"seed\":-1,\"stop\":[\"\\n\",\"END\"],"
       "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"user\":\"u-1\","
       "\"n\":1,\"presence_penalty\":0,\"frequency_penalty\":0.0,\"logprobs\":null,"
       "\"echo\":false,\"suffix\":\"\",\"best_of\":1,\"logit_bias\":{},"
       "\"response_format\":{\"type\":\"text\"},\"tools\":[],\"tool_choice\":\"none\"}\n",
       &r);
    assert_string_equal(r.prompt, "a\nb \xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(r.prompt_len, 10);
    assert_int_equal(r.max_tokens, 16);
    assert_true(r.temperature == 0.5f);
    assert_true(r.top_p == 0.9f);
    assert_int_equal(r.top_k, 40);
    assert_true(r.has_seed);
    assert_true(r.seed == UINT64_MAX);               /* -1, two's complement */
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n");
    assert_string_equal(r.stop[1], "END");
    assert_true(r.stream);
    assert_true(r.include_usage);
    assert_string_equal(r.user, "u-1");
    oai_request_free(&r);
}

static void test_completion_nulls_are_absent(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"max_tokens\":null,\"temperature\":null,\"top_p\":null,\"top_k\":null,"
         "\"seed\":null,\"stop\":null,\"stream\":null,\"stream_options\":null,\"user\":null,"
         "\"n\":null,\"presence_penalty\":null,\"logprobs\":null,\"tools\":null,"
         "\"response_format\":null,\"tool_choice\":null,\"logit_bias\":null",
         &r);
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.temperature == 1.0f);
    assert_false(r.has_seed);
    assert_false(r.stream);
    oai_request_free(&r);
}

static void test_prompt_forms(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"only one\"]}", &r);
    assert_string_equal(r.prompt, "only one");
    assert_null(r.prompt_tokens);
    oai_request_free(&r);

    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1, 0, 2147483647, 7.0]}", &r);
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_tokens, 4);
    assert_int_equal(r.prompt_tokens[0], 1);
    assert_int_equal(r.prompt_tokens[1], 0);
    assert_int_equal(r.prompt_tokens[2], 2147483647);
    assert_int_equal(r.prompt_tokens[3], 7);
    oai_request_free(&r);

    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[5,6]]}", &r);
    assert_int_equal(r.n_prompt_tokens, 2);
    assert_int_equal(r.prompt_tokens[1], 6);
    oai_request_free(&r);

    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\"}", &r);   /* BOS only */
    assert_string_equal(r.prompt, "");
    assert_int_equal(r.prompt_len, 0);
    oai_request_free(&r);
}

/* ---- completions: refusals ------------------------------------------------- */

static void test_model_errors(void **st) {
    (void)st;
    bad(OAI_COMPLETION, "{\"prompt\":\"x\"}", "model", "you must provide a model");
    bad(OAI_COMPLETION, "{\"model\":null,\"prompt\":\"x\"}", "model", "you must provide");
    bad(OAI_COMPLETION, "{\"model\":3,\"prompt\":\"x\"}", "model", "'model' must be a string");
    bad(OAI_COMPLETION, "{\"model\":\"\",\"prompt\":\"x\"}", "model", "must not be empty");
    bad(OAI_CHAT, "{\"messages\":[]}", "model", "you must provide a model");
}

static void test_prompt_errors(void **st) {
    (void)st;
    bad(OAI_COMPLETION, "{\"model\":\"m\"}", "prompt", "'prompt' is required");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":5}", "prompt", "must be a string");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":{}}", "prompt", "must be a string");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[]}", "prompt", "must not be empty");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[true]}", "prompt", "must be a string");
    /* Several prompts are a completion's (test_choices_parse); each must be
     * a string or token ids. */
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",5]}", "prompt[1]", "a string or an array");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],[]]}", "prompt[1]", "must not be empty");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,-1]}", "prompt[1]", "token id");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2.5]}", "prompt[1]", "token id");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,\"a\"]}", "prompt[1]", "token id");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[2147483648]}", "prompt[0]", "token id");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[1e999]}", "prompt[0]", "token id");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[]]}", "prompt[0]", "must not be empty");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1,null]]}", "prompt[0][1]", "token id");
}

static void test_max_tokens(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"max_tokens\":1000000", &r);
    assert_int_equal(r.max_tokens, 1000000);
    oai_request_free(&r);
    ok_c("\"max_tokens\":1", &r);
    assert_int_equal(r.max_tokens, 1);
    oai_request_free(&r);

    bad_c("\"max_tokens\":0", "max_tokens", "between 1 and 1000000, got 0");
    bad_c("\"max_tokens\":-5", "max_tokens", "between 1 and 1000000");
    bad_c("\"max_tokens\":1000001", "max_tokens", "got 1000001");
    bad_c("\"max_tokens\":1e400", "max_tokens", "between 1 and 1000000");
    bad_c("\"max_tokens\":-1e400", "max_tokens", "between 1 and 1000000");
    bad_c("\"max_tokens\":1e18", "max_tokens", "between 1 and 1000000");
    bad_c("\"max_tokens\":1.5", "max_tokens", "'max_tokens' must be an integer");
    bad_c("\"max_tokens\":\"10\"", "max_tokens", "'max_tokens' must be an integer");
    bad_c("\"max_tokens\":true", "max_tokens", "must be an integer");
    bad_c("\"max_tokens\":[1]", "max_tokens", "must be an integer");
    /* max_completion_tokens is honoured on completions too (vLLM does). */
    bad_c("\"max_completion_tokens\":\"junk\"", "max_completion_tokens", "must be an integer");
}

static void test_sampling(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"temperature\":0,\"top_p\":1,\"top_k\":-1", &r);
    assert_true(r.temperature == 0.0f);
    assert_true(r.top_p == 1.0f);
    assert_int_equal(r.top_k, 0);                    /* -1 = off */
    oai_request_free(&r);
    ok_c("\"temperature\":2,\"top_p\":1e-300,\"top_k\":2147483647", &r);
    assert_true(r.temperature == 2.0f);
    assert_true(r.top_p > 0.0f);                     /* never rounds to 0 */
    assert_int_equal(r.top_k, 2147483647);
    oai_request_free(&r);

    bad_c("\"temperature\":-0.1", "temperature", "between 0 and 2, got -0.1");
    bad_c("\"temperature\":2.5", "temperature", "between 0 and 2");
    bad_c("\"temperature\":1e400", "temperature", "finite");
    bad_c("\"temperature\":\"hot\"", "temperature", "'temperature' must be a number");
    bad_c("\"top_p\":0", "top_p", "greater than 0 and at most 1");
    bad_c("\"top_p\":1.01", "top_p", "greater than 0");
    bad_c("\"top_p\":-1", "top_p", "greater than 0");
    bad_c("\"top_p\":false", "top_p", "must be a number");
    bad_c("\"top_k\":-2", "top_k", "between -1 and");
    bad_c("\"top_k\":2147483648", "top_k", "between -1 and 2147483647");
    bad_c("\"top_k\":3.5", "top_k", "must be an integer");
}

static void test_seed(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"seed\":42", &r);
    assert_true(r.has_seed);
    assert_true(r.seed == 42);
    oai_request_free(&r);
    ok_c("\"seed\":0", &r);
    assert_true(r.has_seed);
    assert_true(r.seed == 0);
    oai_request_free(&r);
    ok_c("\"seed\":-9223372036854775808", &r);
    assert_true(r.seed == 0x8000000000000000ull);
    oai_request_free(&r);
    ok_c("\"seed\":9007199254740993", &r);           /* rounds through the double */
    assert_true(r.seed == 9007199254740992ull);
    oai_request_free(&r);

    bad_c("\"seed\":1.5", "seed", "'seed' must be an integer");
    bad_c("\"seed\":\"7\"", "seed", "must be an integer");
    bad_c("\"seed\":1e30", "seed", "between");
    bad_c("\"seed\":-1e19", "seed", "between");
    bad_c("\"seed\":18446744073709551616", "seed", "64 bits");
}

static void test_stop(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"stop\":\"###\"", &r);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "###");
    oai_request_free(&r);
    ok_c("\"stop\":[\"a\",\"b\",\"c\",\"d\"]", &r);
    assert_int_equal(r.n_stop, 4);
    assert_string_equal(r.stop[3], "d");
    oai_request_free(&r);
    ok_c("\"stop\":[]", &r);
    assert_int_equal(r.n_stop, 0);
    oai_request_free(&r);

    bad_c("\"stop\":\"\"", "stop", "must not be empty");
    bad_c("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop", "at most 4");
    bad_c("\"stop\":[\"a\",\"\"]", "stop[1]", "non-empty string");
    bad_c("\"stop\":[\"a\",1]", "stop[1]", "non-empty string");
    bad_c("\"stop\":5", "stop", "string or an array");
    bad_c("\"stop\":{}", "stop", "string or an array");
}

static void test_stream_and_user(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"stream\":true", &r);
    assert_true(r.stream);
    assert_false(r.include_usage);
    oai_request_free(&r);
    ok_c("\"stream\":true,\"stream_options\":{\"include_usage\":false}", &r);
    assert_false(r.include_usage);
    oai_request_free(&r);
    ok_c("\"stream\":false", &r);
    assert_false(r.stream);
    oai_request_free(&r);

    bad_c("\"stream\":\"yes\"", "stream", "'stream' must be a boolean");
    bad_c("\"stream\":1", "stream", "must be a boolean");
    bad_c("\"stream_options\":{\"include_usage\":true}", "stream_options",
          "only allowed when 'stream' is true");
    bad_c("\"stream\":true,\"stream_options\":5", "stream_options", "must be an object");
    bad_c("\"stream\":true,\"stream_options\":{\"include_usage\":1}",
          "stream_options.include_usage", "must be a boolean");
    /* Any other option is refused by name, not ignored. */
    bad_c("\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}",
          "stream_options.continuous_usage_stats", "Unrecognized request argument");
    bad_c("\"user\":5", "user", "'user' must be a string");
}

static void test_unsupported(void **st) {
    (void)st;
    bad_c("\"suffix\":\"tail\"", "suffix", "not supported");
    bad_c("\"tools\":[{\"type\":\"function\"}]", "tools", "'tools' is not supported");
    bad_c("\"tools\":{}", "tools", "must be an array");
    bad_c("\"tool_choice\":\"required\"", "tool_choice", "not supported");
    bad_c("\"functions\":[{}]", "functions", "not supported");
    bad_c("\"function_call\":\"auto\"", "function_call", "not supported");
    oai_request r;
    ok_c("\"logprobs\":false,\"tool_choice\":\"auto\",\"functions\":[],\"suffix\":\"\"", &r);
    assert_int_equal(r.logprobs, -1);
    oai_request_free(&r);
}

/* ---- the OpenAI parameters ------------------------------------------------- */

static void test_choices_parse(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"n\":3", &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.best_of, 0);
    oai_request_free(&r);
    ok_c("\"n\":2,\"best_of\":5,\"echo\":true", &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.best_of, 5);
    assert_true(r.echo);
    oai_request_free(&r);
    ok_c("\"max_tokens\":1", &r);
    assert_int_equal(r.n, 1);                        /* the default */
    assert_false(r.echo);
    oai_request_free(&r);
    bad_c("\"n\":0", "n", "between 1 and 128");
    bad_c("\"n\":129", "n", "between 1 and 128");
    bad_c("\"n\":1.5", "n", "must be an integer");
    bad_c("\"best_of\":1,\"n\":2", "best_of", "at least 'n'");
    bad_c("\"best_of\":3,\"stream\":true", "best_of", "cannot be streamed");
    bad_c("\"echo\":1", "echo", "must be a boolean");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"n\":100,\"best_of\":128,\"prompt\":[\"a\",\"b\",\"c\"]}",
        "best_of", "at most 256");
    /* Several prompts: strings or token lists, prompt-major. */
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",\"\",\"c\"]}", &r);
    assert_null(r.prompt);
    assert_int_equal(r.n_inputs, 3);
    assert_string_equal(r.inputs[0].text, "a");
    assert_string_equal(r.inputs[1].text, "");
    oai_request_free(&r);
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1,2],[3]]}", &r);
    assert_int_equal(r.n_inputs, 2);
    assert_int_equal(r.inputs[0].n_tokens, 2);
    assert_int_equal(r.inputs[1].tokens[0], 3);
    oai_request_free(&r);
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"a\",5]}", "prompt[1]", "a string or an array");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":[[1],[-1]]}", "prompt[1][0]", "token id");
    /* Tokenize still takes one. */
    bad(OAI_TOKENIZE, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "more than one prompt");
    /* max_completion_tokens on completions too. */
    ok_c("\"max_completion_tokens\":7", &r);
    assert_int_equal(r.max_tokens, 7);
    oai_request_free(&r);
    bad_c("\"max_completion_tokens\":7,\"max_tokens\":8", "max_completion_tokens", "disagree");
}

static void test_logprobs_parse(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"logprobs\":0", &r);
    assert_int_equal(r.logprobs, 0);
    oai_request_free(&r);
    ok_c("\"logprobs\":20", &r);
    assert_int_equal(r.logprobs, 20);
    oai_request_free(&r);
    bad_c("\"logprobs\":21", "logprobs", "between 0 and 20");
    bad_c("\"logprobs\":true", "logprobs", "must be an integer");
    ok_chat("\"logprobs\":true,\"top_logprobs\":5", &r);
    assert_int_equal(r.logprobs, 5);
    oai_request_free(&r);
    ok_chat("\"logprobs\":true", &r);
    assert_int_equal(r.logprobs, 0);
    oai_request_free(&r);
    ok_chat("\"logprobs\":false,\"top_logprobs\":0", &r);
    assert_int_equal(r.logprobs, -1);
    oai_request_free(&r);
    bad_chat("\"logprobs\":1", "logprobs", "must be a boolean");
    bad_chat("\"top_logprobs\":2", "top_logprobs", "needs 'logprobs'");
    bad_chat("\"logprobs\":true,\"top_logprobs\":21", "top_logprobs", "between 0 and 20");
}

static void test_penalties_parse(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"max_tokens\":3", &r);
    assert_true(r.presence_penalty == 0.0f && r.frequency_penalty == 0.0f);
    assert_true(r.repetition_penalty == 1.0f && r.min_p == 0.0f);
    oai_request_free(&r);
    ok_c("\"presence_penalty\":-2,\"frequency_penalty\":1.5,\"repetition_penalty\":1.2,\"min_p\":0.05", &r);
    assert_true(r.presence_penalty == -2.0f);
    assert_true(r.frequency_penalty == 1.5f);
    assert_true(r.repetition_penalty == 1.2f);
    assert_true(r.min_p == 0.05f);
    oai_request_free(&r);
    bad_c("\"presence_penalty\":3", "presence_penalty", "at most 2");
    bad_c("\"frequency_penalty\":-2.5", "frequency_penalty", "at least -2");
    bad_c("\"frequency_penalty\":\"x\"", "frequency_penalty", "must be a number");
    bad_c("\"repetition_penalty\":0", "repetition_penalty", "greater than 0");
    bad_c("\"repetition_penalty\":101", "repetition_penalty", "at most 100");
    bad_c("\"min_p\":1.5", "min_p", "at most 1");
    bad_c("\"min_p\":-0.1", "min_p", "at least 0");
}

static void test_logit_bias_and_stops_parse(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"logit_bias\":{\"50256\":-100,\"7\":2.5}", &r);
    assert_int_equal(r.n_logit_bias, 2);
    assert_int_equal(r.logit_bias[0].id, 50256);
    assert_true(r.logit_bias[0].bias == -100.0f);
    assert_int_equal(r.logit_bias[1].id, 7);
    assert_true(r.logit_bias[1].bias == 2.5f);
    oai_request_free(&r);
    ok_c("\"logit_bias\":{}", &r);
    assert_int_equal(r.n_logit_bias, 0);
    oai_request_free(&r);
    bad_c("\"logit_bias\":[]", "logit_bias", "must be an object");
    bad_c("\"logit_bias\":{\"x\":1}", "logit_bias.x", "token ids");
    bad_c("\"logit_bias\":{\"-1\":1}", "logit_bias.-1", "token ids");
    bad_c("\"logit_bias\":{\"1\":100.5}", "logit_bias.1", "from -100 to 100");
    bad_c("\"logit_bias\":{\"1\":\"5\"}", "logit_bias.1", "from -100 to 100");
    bad_c("\"logit_bias\":{\"99999999999\":1}", "logit_bias.99999999999", "token ids");
    /* Only canonical decimal keys: these would all read as token 7 and
     * stack with a "7" beside them. */
    bad_c("\"logit_bias\":{\"07\":1}", "logit_bias.07", "token ids");
    bad_c("\"logit_bias\":{\"\\t7\":1}", "logit_bias.\t7", "token ids");
    bad_c("\"logit_bias\":{\"7 \":1}", "logit_bias.7 ", "token ids");
    bad_c("\"logit_bias\":{\"\":1}", "logit_bias.", "token ids");
    bad_c("\"logit_bias\":{\"00\":1}", "logit_bias.00", "token ids");
    ok_c("\"logit_bias\":{\"0\":1,\"2147483647\":-1}", &r);
    assert_int_equal(r.n_logit_bias, 2);
    assert_int_equal(r.logit_bias[1].id, 2147483647);
    oai_request_free(&r);
    bad_c("\"logit_bias\":{\"2147483648\":1}", "logit_bias.2147483648", "token ids");

    ok_c("\"stop_token_ids\":[2,32000],\"min_tokens\":3,\"max_tokens\":5,\"ignore_eos\":true", &r);
    assert_int_equal(r.n_stop_token_ids, 2);
    assert_int_equal(r.stop_token_ids[1], 32000);
    assert_int_equal(r.min_tokens, 3);
    assert_true(r.ignore_eos);
    oai_request_free(&r);
    ok_c("\"stop_token_ids\":[]", &r);
    assert_int_equal(r.n_stop_token_ids, 0);
    oai_request_free(&r);
    bad_c("\"stop_token_ids\":5", "stop_token_ids", "array of token ids");
    bad_c("\"stop_token_ids\":[1.5]", "stop_token_ids[0]", "token id");
    bad_c("\"min_tokens\":6,\"max_tokens\":5", "min_tokens", "must not exceed");
    bad_c("\"min_tokens\":-1", "min_tokens", "between 0");
    bad_c("\"ignore_eos\":1", "ignore_eos", "must be a boolean");
    ok_chat("\"add_generation_prompt\":false", &r);
    assert_false(r.add_generation_prompt);
    oai_request_free(&r);
}

static void test_guided_parse(void **st) {
    (void)st;
    oai_request r;
    ok_c("\"response_format\":{\"type\":\"text\"}", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_NONE);
    oai_request_free(&r);
    ok_c("\"response_format\":{\"type\":\"json_object\"}", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_JSON_OBJECT);
    assert_string_equal(r.guided.field, "response_format");
    oai_request_free(&r);
    ok_chat("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
            "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_JSON_SCHEMA);
    assert_string_equal(r.guided.spec, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    oai_request_free(&r);
    ok_c("\"guided_json\":\"{\\\"type\\\":\\\"string\\\"}\"", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_JSON_SCHEMA);
    assert_string_equal(r.guided.spec, "{\"type\":\"string\"}");
    assert_string_equal(r.guided.field, "guided_json");
    oai_request_free(&r);
    ok_c("\"guided_regex\":\"[a-z]+\"", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_REGEX);
    assert_string_equal(r.guided.spec, "[a-z]+");
    oai_request_free(&r);
    ok_chat("\"guided_choice\":[\"yes\",\"no\"]", &r);
    assert_int_equal(r.guided.kind, OAI_GUIDED_CHOICE);
    assert_int_equal(r.guided.n_choices, 2);
    assert_string_equal(r.guided.choices[1], "no");
    oai_request_free(&r);
    bad_c("\"response_format\":\"json\"", "response_format", "must be an object");
    bad_c("\"response_format\":{\"type\":\"yaml\"}", "response_format.type", "json_schema");
    bad_c("\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema", "must be an object");
    bad_c("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":3}}",
          "response_format.json_schema.schema", "JSON schema");
    bad_c("\"guided_json\":\"{nope\"", "guided_json", "JSON schema");
    bad_c("\"guided_regex\":\"\"", "guided_regex", "non-empty");
    bad_c("\"guided_choice\":[]", "guided_choice", "1 to 256");
    bad_c("\"guided_choice\":[\"a\",\"\"]", "guided_choice", "non-empty");
    bad_c("\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]", "guided_choice", "send one of them");
    bad_c("\"response_format\":{\"type\":\"json_object\"},\"guided_json\":{}", "guided_json", "send one of them");
}

static void test_unknown_fields(void **st) {
    (void)st;
    oai_request r;
    oai_error e;
    const char *body = "{\"model\":\"m\",\"prompt\":\"p\",\"frobnicate\":1}";
    assert_int_equal(parse_n(OAI_COMPLETION, body, strlen(body), &r, &e), TS_ERR_INVAL);
    assert_string_equal(e.param, "frobnicate");
    assert_string_equal(e.code, "unknown_parameter");
    assert_non_null(strstr(e.message, "Unrecognized request argument supplied: frobnicate"));
    bad_c("\"guided_grammar\":\"x\"", "guided_grammar", "Unrecognized");
    bad_c("\"top_logprobs\":2", "top_logprobs", "Unrecognized");       /* chat's */
    bad_c("\"messages\":[]", "messages", "Unrecognized");
    bad_chat("\"echo\":true", "echo", "Unrecognized");                  /* completions' */
    bad_chat("\"best_of\":2", "best_of", "Unrecognized");
    bad_chat("\"prompt\":\"x\"", "prompt", "Unrecognized");
    /* A null unknown field is still unknown: it names something. */
    bad_c("\"nope\":null", "nope", "Unrecognized");
    /* The allow-list of documented no-ops, type-checked. */
    ok_c("\"user\":\"u\",\"metadata\":{\"k\":\"v\"},\"store\":false,\"service_tier\":\"auto\"", &r);
    oai_request_free(&r);
    ok_chat("\"parallel_tool_calls\":false,\"store\":true", &r);
    oai_request_free(&r);
    bad_c("\"metadata\":3", "metadata", "must be an object");
    bad_c("\"store\":\"yes\"", "store", "must be a boolean");
    bad_chat("\"parallel_tool_calls\":1", "parallel_tool_calls", "must be a boolean");
    /* Embeddings keep their own (lenient) shape. */
}

/* A token's text for the logprobs writers: "t<id>", and id 9 as an invalid
 * UTF-8 byte. */
static const char *fake_piece(void *ctx, int32_t id, char *buf, size_t cap, size_t *len) {
    (void)ctx;
    if (id == 9) {
        *len = 1;
        return "\xff";
    }
    int n = snprintf(buf, cap, "t%d", (int)id);
    *len = (size_t)n;
    return buf;
}

static void test_choices_json(void **st) {
    (void)st;
    oai_head h = {.kind = OAI_COMPLETION, .created = 5, .model = "m"};
    int32_t ids[3] = {4, 9, 12};
    smp_lp lps[3] = {{.logprob = NAN}, {.logprob = -0.5f, .n_top = 2, .top_id = {9, 4}, .top_lp = {-0.5f, -1.25f}},
                     {.logprob = -INFINITY, .n_top = 1, .top_id = {7}, .top_lp = {-0.1f}}};
    oai_choice c[2] = {{.index = 0, .text = "ab", .len = 2, .finish = OAI_FINISH_STOP, .has_logprobs = true,
                        .ids = ids, .lps = lps, .n_lp = 3},
                       {.index = 1, .text = "cd", .len = 2, .finish = OAI_FINISH_LENGTH}};
    oai_pieces p = {fake_piece, NULL};
    oai_usage u = {3, 4};
    char *j = oai_choices_json(&h, c, 2, &u, &p);
    assert_non_null(j);
    cJSON *root = cJSON_Parse(j);
    assert_non_null(root);
    cJSON *ch = cJSON_GetObjectItem(root, "choices");
    assert_int_equal(cJSON_GetArraySize(ch), 2);
    cJSON *c0 = cJSON_GetArrayItem(ch, 0), *c1 = cJSON_GetArrayItem(ch, 1);
    assert_int_equal(cJSON_GetObjectItem(c1, "index")->valueint, 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c1, "logprobs")));
    cJSON *lp = cJSON_GetObjectItem(c0, "logprobs");
    cJSON *toks = cJSON_GetObjectItem(lp, "tokens");
    assert_string_equal(cJSON_GetArrayItem(toks, 0)->valuestring, "t4");
    assert_string_equal(cJSON_GetArrayItem(toks, 1)->valuestring, "\xef\xbf\xbd"); /* U+FFFD */
    cJSON *tl = cJSON_GetObjectItem(lp, "token_logprobs");
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
    assert_true(cJSON_GetArrayItem(tl, 1)->valuedouble == -0.5);
    assert_true(cJSON_GetArrayItem(tl, 2)->valuedouble == -9999.0);
    cJSON *top = cJSON_GetObjectItem(lp, "top_logprobs");
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(top, 0)));
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(top, 1), "t4")->valuedouble == -1.25);
    cJSON *off = cJSON_GetObjectItem(lp, "text_offset");
    assert_int_equal(cJSON_GetArrayItem(off, 0)->valueint, 0);
    assert_int_equal(cJSON_GetArrayItem(off, 1)->valueint, 2);
    assert_int_equal(cJSON_GetArrayItem(off, 2)->valueint, 3);
    cJSON_Delete(root);
    free(j);

    /* Chat: content entries with bytes and top_logprobs lists. */
    h.kind = OAI_CHAT;
    c[0].ids = ids + 1;
    c[0].lps = lps + 1;
    c[0].n_lp = 1;
    j = oai_choices_json(&h, c, 1, &u, &p);
    root = cJSON_Parse(j);
    assert_non_null(root);
    cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "message"), "content")->valuestring, "ab");
    cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "logprobs"), "content"), 0);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(e0, "bytes"), 0)->valueint, 255);
    assert_true(cJSON_GetObjectItem(e0, "logprob")->valuedouble == -0.5);
    cJSON *t1 = cJSON_GetArrayItem(cJSON_GetObjectItem(e0, "top_logprobs"), 1);
    assert_string_equal(cJSON_GetObjectItem(t1, "token")->valuestring, "t4");
    cJSON_Delete(root);
    free(j);

    /* A stream chunk: the index, the role on the first, text_offset carried on. */
    size_t at = 10;
    oai_choice s = {.index = 3, .text = "x", .len = 1, .first = true, .has_logprobs = true, .ids = ids + 2,
                    .lps = lps + 2, .n_lp = 1, .text_offset = &at};
    h.kind = OAI_COMPLETION;
    j = oai_choice_sse(&h, &s, &p);
    assert_non_null(j);
    assert_true(strncmp(j, "data: ", 6) == 0);
    root = cJSON_Parse(j + 6);
    m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
    assert_int_equal(cJSON_GetObjectItem(m, "index")->valueint, 3);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "logprobs"), "text_offset"), 0)
                         ->valueint, 10);
    assert_int_equal(at, 13);                        /* "t12" */
    cJSON_Delete(root);
    free(j);
    h.kind = OAI_CHAT;
    s.has_logprobs = false;
    j = oai_choice_sse(&h, &s, &p);
    assert_non_null(strstr(j, "\"delta\":{\"role\":\"assistant\",\"content\":\"x\"}"));
    free(j);
    /* Inconsistent input is refused, not written. */
    s.has_logprobs = true;
    s.ids = NULL;
    assert_null(oai_choice_sse(&h, &s, &p));
}

/* ---- bodies that are not requests ----------------------------------------- */

static void test_malformed(void **st) {
    (void)st;
    bad(OAI_COMPLETION, "{\"model\":", NULL, "malformed JSON at byte offset 8");
    bad(OAI_COMPLETION, "{\"model\" \"m\"}", NULL, "malformed JSON at byte offset");
    bad(OAI_COMPLETION, "{\"model\":\"m\",}", NULL, "malformed JSON");
    bad(OAI_COMPLETION, "{\"model\":\"m\"} x", NULL, "unexpected data after the JSON value "
                                                     "at byte offset 14");
    bad(OAI_COMPLETION, "{\"model\":\"m\"}{}", NULL, "unexpected data");
    bad(OAI_COMPLETION, "{\"a\":nan}", NULL, "malformed JSON");
    bad(OAI_COMPLETION, "", NULL, "empty");
    bad(OAI_COMPLETION, "[]", NULL, "must be a JSON object");
    bad(OAI_COMPLETION, "\"str\"", NULL, "must be a JSON object");
    bad(OAI_COMPLETION, "42", NULL, "must be a JSON object");
    bad(OAI_COMPLETION, "null", NULL, "must be a JSON object");
    bad(OAI_CHAT, "  true  ", NULL, "must be a JSON object");

    oai_request r;
    oai_error e;
    assert_int_equal(oai_parse_chat(NULL, 0, &r, &e), TS_ERR_INVAL);
    assert_int_equal(e.status, 400);
    assert_int_equal(oai_parse_chat("{}", 2, &r, NULL), TS_ERR_INVAL);  /* err optional */

    /* Deep nesting hits cJSON's limit and is refused, not recursed into. */
    size_t depth = 5000, n = 2 * depth + 2;
    char *deep = malloc(n + 1);
    deep[0] = '{';
    memset(deep + 1, '[', depth);
    memset(deep + 1 + depth, ']', depth);
    deep[n - 1] = '}';
    deep[n] = '\0';
    bad_n(OAI_COMPLETION, deep, n, NULL, "malformed JSON");
    free(deep);
}

static void test_raw_bytes(void **st) {
    (void)st;
    static const char nul_body[] = "{\"model\":\"m\",\"prompt\":\"a\0b\"}";
    bad_n(OAI_COMPLETION, nul_body, sizeof nul_body - 1, NULL, "NUL byte at offset 24");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", NULL, "\\u0000");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\nb\"}", NULL,
        "unescaped control character 0x0a inside a string at offset 24");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\tb\"}", NULL, "control character");
    /* An escaped backslash before "u0000" is text, not an escape. */
    oai_request r;
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\\\\u0000\"}", &r);
    assert_string_equal(r.prompt, "a\\u0000");
    oai_request_free(&r);
    /* Whitespace between tokens is not "inside a string". */
    ok(OAI_COMPLETION, "{\n\t\"model\" : \"m\",\r\n \"prompt\":\"x\"\n}\n", &r);
    oai_request_free(&r);
}

/* ---- UTF-8 ---------------------------------------------------------------- */

static void bad_prompt_bytes(const char *bytes, const char *msg_part) {
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x%sy\"}", bytes);
    bad(OAI_COMPLETION, body, "prompt", msg_part);
}

static void test_utf8(void **st) {
    (void)st;
    bad_prompt_bytes("\xc0\xaf", "'prompt' is not valid UTF-8 (bad byte 0xc0 at offset 1)");
    bad_prompt_bytes("\xc1\xbf", "not valid UTF-8");               /* overlong 2-byte */
    bad_prompt_bytes("\xe0\x80\xaf", "bad byte 0xe0");             /* overlong 3-byte */
    bad_prompt_bytes("\xf0\x80\x80\xaf", "bad byte 0xf0");         /* overlong 4-byte */
    bad_prompt_bytes("\xed\xa0\x80", "bad byte 0xed");             /* U+D800 */
    bad_prompt_bytes("\xed\xbf\xbf", "not valid UTF-8");           /* U+DFFF */
    bad_prompt_bytes("\xf4\x90\x80\x80", "bad byte 0xf4");         /* U+110000 */
    bad_prompt_bytes("\xf5\x80\x80\x80", "bad byte 0xf5");
    bad_prompt_bytes("\xff", "bad byte 0xff");
    bad_prompt_bytes("\x80", "bad byte 0x80");                     /* lone continuation */
    bad_prompt_bytes("\xe2\x82", "bad byte 0xe2");                 /* truncated */
    bad_prompt_bytes("\xf0\x9f\x98", "bad byte 0xf0");             /* truncated */
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\xe2\x82\"}", "prompt",
        "not valid UTF-8");                                        /* truncated at end */

    /* Surrogate escapes: alone, reversed, or paired with a non-surrogate. */
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\\ud800\"}", NULL, "high surrogate");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\\uD800\\u0041\"}", NULL,
        "high surrogate");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\\udc00\"}", NULL, "lone low surrogate");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\\ude00\\ud83d\"}", NULL,
        "lone low surrogate");

    /* Anywhere in the body: other fields, unknown fields, keys, messages. */
    bad(OAI_COMPLETION, "{\"model\":\"m\xc0\xaf\",\"prompt\":\"x\"}", "model", "UTF-8");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"meta\":{\"k\":[1,\"\xff\"]}}",
        "meta.k[1]", "'meta.k[1]' is not valid UTF-8");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"meta\":{\"\xff\":1}}", "meta",
        "a key inside meta");
    bad(OAI_COMPLETION, "{\"\xed\xa0\x80\":1,\"model\":\"m\",\"prompt\":\"x\"}", NULL,
        "a key inside the request body");
    bad(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                  "[{\"type\":\"text\",\"text\":\"\xe0\x9f\x80\"}]}]}",
        "messages[0].content[0].text", "not valid UTF-8");

    /* The edges that are valid: U+0080, U+07FF, U+0800, U+FFFD, U+10000,
     * U+10FFFF, raw and escaped. */
    oai_request r;
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbd"
                       "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\\udbff\\udfff\\u07ff\"}", &r);
    assert_string_equal(r.prompt, "\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbd\xf0\x90\x80\x80"
                                  "\xf4\x8f\xbf\xbf\xf4\x8f\xbf\xbf\xdf\xbf");
    oai_request_free(&r);
}

/* A key twice in one object, at any depth, is refused with its path: JSON
 * leaves the meaning open, and a proxy that reads the last copy would see a
 * different request than cJSON's first. The same key in different objects
 * is fine. */
static void test_duplicate_keys(void **st) {
    (void)st;
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"prompt\":\"b\"}", "prompt",
        "duplicate key 'prompt' in the request body");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"model\":\"m\",\"prompt\":\"a\"}", "model",
        "duplicate key 'model'");
    bad(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\","
                  "\"role\":\"system\"}]}",
        "messages[0].role", "duplicate key 'role' in messages[0]");
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"stream\":true,"
                        "\"stream_options\":{\"include_usage\":true,\"include_usage\":false}}",
        "stream_options.include_usage", "duplicate key 'include_usage' in stream_options");
    /* In an unknown field too: it is still part of what the body means. */
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"meta\":[{\"k\":1},{\"k\":1,\"k\":2}]}",
        "meta[1].k", "duplicate key 'k' in meta[1]");
    /* Keys are compared exactly: another case is another key, and an escape
     * that spells the same key is the same key. */
    oai_request r;
    ok(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"metadata\":{\"Prompt\":\"b\",\"x\":{\"prompt\":1}}}", &r);
    assert_string_equal(r.prompt, "a");
    oai_request_free(&r);
    bad(OAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"a\",\"pr\\u006fmpt\":\"b\"}", "prompt",
        "duplicate key 'prompt'");

    /* A large object goes through the sorted path: a repeat at its far end
     * is found, and a large object without one passes. */
    char body[4096];
    size_t n = (size_t)snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"a\",\"metadata\":{");
    for (int i = 0; i < 200; i++) n += (size_t)snprintf(body + n, sizeof body - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    snprintf(body + n, sizeof body - n, "}}");
    ok(OAI_COMPLETION, body, &r);
    oai_request_free(&r);
    snprintf(body + n, sizeof body - n, ",\"k3\":0}}");
    bad(OAI_COMPLETION, body, "metadata.k3", "duplicate key 'k3' in metadata");
}

/* ---- chat ----------------------------------------------------------------- */

static void test_chat_minimal(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    assert_int_equal(r.n_messages, 1);
    assert_int_equal(r.messages[0].role, OAI_ROLE_USER);
    assert_string_equal(r.messages[0].content, "hi");
    assert_int_equal(r.messages[0].content_len, 2);
    assert_null(r.prompt);
    assert_null(r.prompt_tokens);
    assert_int_equal(r.max_tokens, 0);
    oai_request_free(&r);
}

static void test_chat_full(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_CHAT,
       "{\"model\":\"m\",\"messages\":["
       "{\"role\":\"developer\",\"content\":\"be brief\"},"
       "{\"role\":\"system\",\"content\":[]},"
       "{\"role\":\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},"
       "{\"type\":\"text\",\"text\":\"\"},{\"type\":\"text\",\"text\":\"c\\u00e9\"}]},"
       "{\"role\":\"assistant\",\"content\":null},"
       "{\"role\":\"assistant\",\"tool_calls\":[]},"
       "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"42\"}],"
       "\"max_completion_tokens\":7,\"max_tokens\":7,\"temperature\":0.2,\"stream\":true,"
       "\"stream_options\":{\"include_usage\":true},\"stop\":\"\\n\\n\",\"seed\":3}",
       &r);
    assert_int_equal(r.n_messages, 6);
    assert_int_equal(r.messages[0].role, OAI_ROLE_SYSTEM);   /* developer -> system */
    assert_string_equal(r.messages[0].content, "be brief");
    assert_int_equal(r.messages[1].role, OAI_ROLE_SYSTEM);
    assert_string_equal(r.messages[1].content, "");
    assert_int_equal(r.messages[2].role, OAI_ROLE_USER);
    assert_string_equal(r.messages[2].content, "abc\xc3\xa9");   /* parts concatenated */
    assert_int_equal(r.messages[2].content_len, 5);
    assert_int_equal(r.messages[3].role, OAI_ROLE_ASSISTANT);
    assert_string_equal(r.messages[3].content, "");
    assert_string_equal(r.messages[4].content, "");
    assert_int_equal(r.messages[5].role, OAI_ROLE_TOOL);
    assert_string_equal(r.messages[5].content, "42");
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.stream && r.include_usage);
    assert_int_equal(r.n_stop, 1);
    assert_true(r.has_seed && r.seed == 3);
    oai_request_free(&r);

    ok_chat("\"max_completion_tokens\":9", &r);
    assert_int_equal(r.max_tokens, 9);
    oai_request_free(&r);
    ok_chat("\"max_tokens\":11", &r);
    assert_int_equal(r.max_tokens, 11);
    oai_request_free(&r);
}

static void test_chat_errors(void **st) {
    (void)st;
    bad(OAI_CHAT, "{\"model\":\"m\"}", "messages", "'messages' is required");
    bad_msgs("{}", "messages", "must be an array");
    bad_msgs("[]", "messages", "must not be empty");
    bad_msgs("[\"hi\"]", "messages[0]", "'messages[0]' must be an object");
    bad_msgs("[{\"content\":\"x\"}]", "messages[0].role", "'messages[0].role' is required");
    bad_msgs("[{\"role\":1,\"content\":\"x\"}]", "messages[0].role", "must be a string");
    bad_msgs("[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"wizard\",\"content\":\"x\"}]",
             "messages[1].role", "got 'wizard'");
    bad_msgs("[{\"role\":\"function\",\"content\":\"x\"}]", "messages[0].role", "must be one of");
    bad_msgs("[{\"role\":\"User\",\"content\":\"x\"}]", "messages[0].role", "must be one of");
    bad_msgs("[{\"role\":\"user\"}]", "messages[0].content", "'messages[0].content' is required");
    bad_msgs("[{\"role\":\"user\",\"content\":null}]", "messages[0].content", "is required");
    bad_msgs("[{\"role\":\"system\",\"content\":5}]", "messages[0].content",
             "string or an array of content parts");
    bad_msgs("[{\"role\":\"user\",\"content\":[\"x\"]}]", "messages[0].content[0]",
             "must be an object");
    bad_msgs("[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]",
             "messages[0].content[0].type", "must be a string");
    bad_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]",
             "messages[0].content[1].type", "'image_url' are not supported");
    bad_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]",
             "messages[0].content[0].text", "must be a string");
    bad_msgs("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":7}]}]",
             "messages[0].content[0].text", "must be a string");
    bad_msgs("[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"t\"}]}]",
             "messages[0].tool_calls", "not supported");
    bad_msgs("[{\"role\":\"assistant\",\"function_call\":{}}]",
             "messages[0].function_call", "not supported");
    bad_msgs("[{\"role\":\"user\",\"name\":5,\"content\":\"x\"}]", "messages[0].name",
             "must be a string");
    bad_chat("\"max_completion_tokens\":0", "max_completion_tokens", "between 1 and 1000000");
    bad_chat("\"max_completion_tokens\":2.5", "max_completion_tokens", "must be an integer");
    bad_chat("\"max_completion_tokens\":5,\"max_tokens\":6", "max_completion_tokens",
             "disagree");
    bad_chat("\"max_tokens\":2000000", "max_tokens", "between 1 and 1000000");
    bad_chat("\"temperature\":-1", "temperature", "between 0 and 2");
    bad_chat("\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema",
             "must be an object");
    bad_chat("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "tools",
             "not supported");
}

/* ---- errors --------------------------------------------------------------- */

static void test_error_json(void **st) {
    (void)st;
    oai_error e;
    oai_error_set(&e, 400, "invalid_request_error", "max_tokens", NULL,
                  "'max_tokens' must be an integer");
    char *s = oai_error_json(&e);
    assert_string_equal(s, "{\"error\":{\"message\":\"'max_tokens' must be an integer\","
                           "\"type\":\"invalid_request_error\",\"param\":\"max_tokens\","
                           "\"code\":null}}");
    free(s);

    oai_error_set(&e, 401, "authentication_error", NULL, "invalid_api_key",
                  "Incorrect API key \"%s\"\n", "sk-\xff");
    assert_int_equal(e.status, 401);
    s = oai_error_json(&e);
    assert_string_equal(s, "{\"error\":{\"message\":\"Incorrect API key \\\"sk-\xef\xbf\xbd"
                           "\\\"\\n\",\"type\":\"authentication_error\",\"param\":null,"
                           "\"code\":\"invalid_api_key\"}}");
    free(s);

    s = oai_error_sse(&e);
    assert_string_equal(s, "data: {\"error\":{\"message\":\"Incorrect API key \\\"sk-"
                           "\xef\xbf\xbd\\\"\\n\",\"type\":\"authentication_error\","
                           "\"param\":null,\"code\":\"invalid_api_key\"}}\n\n");
    free(s);
    assert_string_equal(OAI_SSE_DONE, "data: [DONE]\n\n");

    /* A refusal straight from the parser, read back as JSON. */
    oai_request r;
    const char *body = "{\"model\":\"m\",\"prompt\":\"p\",\"suffix\":\"x\"}";
    assert_int_equal(parse_n(OAI_COMPLETION, body, strlen(body), &r, &e), TS_ERR_INVAL);
    s = oai_error_json(&e);
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(j), 1);
    cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "error");
    assert_int_equal(cJSON_GetArraySize(o), 4);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring,
                        "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "param")->valuestring, "suffix");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "code")->valuestring,
                        "unsupported_parameter");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "message")->valuestring, e.message);
    cJSON_Delete(j);
    free(s);

    /* Long messages and params are cut at a character boundary. */
    char big[1000];
    for (size_t i = 0; i + 2 < sizeof big; i += 2) memcpy(big + i, "\xc3\xa9", 2);
    big[sizeof big - 2] = '\0';
    oai_error_set(&e, 500, "server_error", big, NULL, "%s", big);
    assert_true(strlen(e.param) < OAI_ERR_PARAM_MAX);
    assert_int_equal(strlen(e.param) % 2, 0);
    size_t ml = strlen(e.message);
    assert_true(ml < OAI_ERR_MSG_MAX);
    assert_string_equal(e.message + ml - 3, "...");
    assert_int_equal((ml - 3) % 2, 0);               /* no half character */
}

/* ---- responses ------------------------------------------------------------ */

static cJSON *parsed(const char *s) {
    assert_non_null(s);
    cJSON *j = cJSON_Parse(s);
    assert_non_null(j);
    return j;
}

static cJSON *get(const cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) print_error("missing key %s\n", k);
    assert_non_null(v);
    return v;
}

static void test_completion_response(void **st) {
    (void)st;
    oai_head h = {OAI_COMPLETION, {[9] = 0xab, [10] = 0xcd, [11] = 0xef}, 1700000000, "demo"};
    oai_usage u = {5, 3};
    char *s = oai_response_json(&h, "a\"b\\c\n", 6, OAI_FINISH_LENGTH, &u);
    cJSON *j = parsed(s);
    assert_int_equal(cJSON_GetArraySize(j), 6);
    assert_string_equal(get(j, "id")->valuestring, "cmpl-000000000000000000abcdef");
    assert_string_equal(get(j, "object")->valuestring, "text_completion");
    assert_true(get(j, "created")->valuedouble == 1700000000.0);
    assert_string_equal(get(j, "model")->valuestring, "demo");
    cJSON *ch = get(j, "choices");
    assert_int_equal(cJSON_GetArraySize(ch), 1);
    cJSON *c0 = cJSON_GetArrayItem(ch, 0);
    assert_int_equal(get(c0, "index")->valueint, 0);
    assert_string_equal(get(c0, "text")->valuestring, "a\"b\\c\n");
    assert_string_equal(get(c0, "finish_reason")->valuestring, "length");
    assert_true(cJSON_IsNull(get(c0, "logprobs")));
    cJSON *us = get(j, "usage");
    assert_int_equal(get(us, "prompt_tokens")->valueint, 5);
    assert_int_equal(get(us, "completion_tokens")->valueint, 3);
    assert_int_equal(get(us, "total_tokens")->valueint, 8);
    cJSON_Delete(j);
    free(s);

    /* Exact bytes, and usage totals that overflow 32 bits. */
    oai_usage big = {UINT32_MAX, UINT32_MAX};
    s = oai_response_json(&h, NULL, 0, OAI_FINISH_STOP, &big);
    assert_string_equal(s, "{\"id\":\"cmpl-000000000000000000abcdef\",\"object\":\"text_completion\","
                           "\"created\":1700000000,\"model\":\"demo\",\"choices\":[{\"index\":0,"
                           "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"stop\"}],"
                           "\"usage\":{\"prompt_tokens\":4294967295,\"completion_tokens\":"
                           "4294967295,\"total_tokens\":8589934590}}");
    free(s);
    assert_null(oai_response_json(&h, NULL, 3, OAI_FINISH_STOP, &u));
    assert_null(oai_response_json(NULL, "x", 1, OAI_FINISH_STOP, &u));

    /* The id is every one of its 12 bytes, in order, as lowercase hex. */
    oai_head h2 = {OAI_COMPLETION, {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0xfa, 0xfb},
                   1, "m"};
    s = oai_response_json(&h2, "", 0, OAI_FINISH_STOP, &u);
    assert_non_null(strstr(s, "{\"id\":\"cmpl-00010203040506070809fafb\","));
    free(s);
}

static void test_chat_response(void **st) {
    (void)st;
    oai_head h = {OAI_CHAT, {0}, 0, "m/1"};
    memset(h.id, 0xff, sizeof h.id);
    oai_usage u = {10, 2};
    char *s = oai_response_json(&h, "Hi \xf0\x9f\x98\x80", 7, OAI_FINISH_STOP, &u);
    cJSON *j = parsed(s);
    assert_int_equal(cJSON_GetArraySize(j), 6);
    assert_string_equal(get(j, "id")->valuestring, "chatcmpl-ffffffffffffffffffffffff");
    assert_string_equal(get(j, "object")->valuestring, "chat.completion");
    assert_true(get(j, "created")->valuedouble == 0.0);
    assert_string_equal(get(j, "model")->valuestring, "m/1");
    cJSON *c0 = cJSON_GetArrayItem(get(j, "choices"), 0);
    assert_int_equal(get(c0, "index")->valueint, 0);
    cJSON *msg = get(c0, "message");
    assert_int_equal(cJSON_GetArraySize(msg), 2);
    assert_string_equal(get(msg, "role")->valuestring, "assistant");
    assert_string_equal(get(msg, "content")->valuestring, "Hi \xf0\x9f\x98\x80");
    assert_string_equal(get(c0, "finish_reason")->valuestring, "stop");
    assert_int_equal(get(get(j, "usage"), "total_tokens")->valueint, 12);
    cJSON_Delete(j);
    free(s);
}

static void test_sanitised_text(void **st) {
    (void)st;
    oai_head h = {OAI_CHAT, {[11] = 1}, 2, "m\x01"};
    /* Control characters escaped; each maximal ill-formed subpart one U+FFFD:
     * E2 82 (truncated) -> 1, C0 AF -> 2, ED A0 80 -> 3, F0 80 -> 2, FF -> 1,
     * a dangling F0 9F at the very end -> 1. Valid text around stays. */
    static const char text[] = "\x00\x1f\x7f|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xf0\x80|\xff|"
                               "\xc3\xa9\xf0\x9f";
    char *s = oai_chunk_sse(&h, false, text, sizeof text - 1, OAI_FINISH_NONE);
    assert_non_null(strstr(s, "\"content\":\"\\u0000\\u001f\x7f|\xef\xbf\xbd|"
                              "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
                              "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd|\xc3\xa9\xef\xbf\xbd\"}"));
    assert_non_null(strstr(s, "\"model\":\"m\\u0001\""));
    cJSON *j = parsed(s + 6);
    cJSON_Delete(j);
    free(s);

    /* Text of every byte value in many orders: the output is always JSON,
     * strictly valid UTF-8 (by an independent decoder), with no raw control
     * character. */
    size_t n = 256 * 40;
    char *all = malloc(n);
    for (size_t i = 0; i < n; i++) all[i] = (char)(i * 7 + i / 256);
    s = oai_response_json(&h, all, n, OAI_FINISH_STOP, NULL);
    j = parsed(s);
    cJSON_Delete(j);
    assert_true(valid_utf8((const unsigned char *)s, strlen(s)));
    for (const char *p = s; *p; p++) assert_true((unsigned char)*p >= 0x20);
    free(s);
    free(all);
}

static void test_sse_framing(void **st) {
    (void)st;
    oai_head hc = {OAI_COMPLETION, {[10] = 0x12, [11] = 0x34}, 1700000000, "m"};
    char *s = oai_chunk_sse(&hc, true, "hi", 2, OAI_FINISH_NONE);
    assert_string_equal(s, "data: {\"id\":\"cmpl-000000000000000000001234\",\"object\":\"text_completion\","
                           "\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
                           "\"text\":\"hi\",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    free(s);
    s = oai_chunk_sse(&hc, false, NULL, 0, OAI_FINISH_LENGTH);
    assert_string_equal(s, "data: {\"id\":\"cmpl-000000000000000000001234\",\"object\":\"text_completion\","
                           "\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
                           "\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n");
    free(s);
    s = oai_usage_sse(&hc, &(oai_usage){3, 4});
    assert_string_equal(s, "data: {\"id\":\"cmpl-000000000000000000001234\",\"object\":\"text_completion\","
                           "\"created\":1700000000,\"model\":\"m\",\"choices\":[],\"usage\":"
                           "{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n");
    free(s);

    oai_head h = {OAI_CHAT, {[10] = 0x12, [11] = 0x34}, -5, "m"};
    const char *pre = "data: {\"id\":\"chatcmpl-000000000000000000001234\",\"object\":"
                      "\"chat.completion.chunk\",\"created\":-5,\"model\":\"m\",\"choices\":"
                      "[{\"index\":0,\"delta\":";
    char want[512];

    s = oai_chunk_sse(&h, true, "", 0, OAI_FINISH_NONE);
    snprintf(want, sizeof want, "%s{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                                "\"finish_reason\":null}]}\n\n", pre);
    assert_string_equal(s, want);
    free(s);
    s = oai_chunk_sse(&h, true, NULL, 0, OAI_FINISH_NONE);
    snprintf(want, sizeof want, "%s{\"role\":\"assistant\"},\"logprobs\":null,"
                                "\"finish_reason\":null}]}\n\n", pre);
    assert_string_equal(s, want);
    free(s);
    s = oai_chunk_sse(&h, false, "lo", 2, OAI_FINISH_NONE);
    snprintf(want, sizeof want, "%s{\"content\":\"lo\"},\"logprobs\":null,"
                                "\"finish_reason\":null}]}\n\n", pre);
    assert_string_equal(s, want);
    free(s);
    s = oai_chunk_sse(&h, false, NULL, 0, OAI_FINISH_STOP);
    snprintf(want, sizeof want, "%s{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n", pre);
    assert_string_equal(s, want);
    free(s);
    s = oai_usage_sse(&h, &(oai_usage){1, 2});
    assert_string_equal(s, "data: {\"id\":\"chatcmpl-000000000000000000001234\",\"object\":"
                           "\"chat.completion.chunk\",\"created\":-5,\"model\":\"m\","
                           "\"choices\":[],\"usage\":{\"prompt_tokens\":1,"
                           "\"completion_tokens\":2,\"total_tokens\":3}}\n\n");
    free(s);

    /* Every chunk is one event: one "data: " prefix, one blank line at the
     * end, no newline inside the payload even when the text has some. */
    s = oai_chunk_sse(&h, false, "a\n\nb\r\n", 6, OAI_FINISH_NONE);
    size_t n = strlen(s);
    assert_int_equal(strncmp(s, "data: ", 6), 0);
    assert_string_equal(s + n - 2, "\n\n");
    assert_null(memchr(s, '\n', n - 2));
    assert_null(memchr(s, '\r', n));
    cJSON *j = parsed(s + 6);
    cJSON *d = get(cJSON_GetArrayItem(get(j, "choices"), 0), "delta");
    assert_string_equal(get(d, "content")->valuestring, "a\n\nb\r\n");
    cJSON_Delete(j);
    free(s);
}

static void test_models(void **st) {
    (void)st;
    char *s = oai_models_json(NULL, 0, 7);
    assert_string_equal(s, "{\"object\":\"list\",\"data\":[]}");
    free(s);
    const char *ids[] = {"demo-15m", "qwen\"2"};
    s = oai_models_json(ids, 2, 1700000000);
    assert_string_equal(s, "{\"object\":\"list\",\"data\":[{\"id\":\"demo-15m\",\"object\":"
                           "\"model\",\"created\":1700000000,\"owned_by\":\"tessera\"},"
                           "{\"id\":\"qwen\\\"2\",\"object\":\"model\",\"created\":1700000000,"
                           "\"owned_by\":\"tessera\"}]}");
    cJSON *j = parsed(s);
    cJSON *d = get(j, "data");
    assert_int_equal(cJSON_GetArraySize(d), 2);
    assert_string_equal(get(cJSON_GetArrayItem(d, 1), "id")->valuestring, "qwen\"2");
    cJSON_Delete(j);
    free(s);
}

/* ---- damaged bodies ------------------------------------------------------- */

static uint64_t mut_state;
static uint64_t mut_next(void) {     /* splitmix64 */
    uint64_t z = (mut_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void test_mutations(void **st) {
    (void)st;
    static const char *seeds[] = {
        "{\"model\":\"m\",\"prompt\":\"hello \\u00e9\\ud83d\\ude00\",\"max_tokens\":5,"
        "\"stop\":[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"x\"}]},{\"role\":\"assistant\",\"content\":\"y\"}],\"seed\":1}",
        "{\"model\":\"m\",\"prompt\":[1,2,3],\"temperature\":0.7,\"top_p\":0.5,\"user\":\"u\"}",
    };
    static const char alphabet[] = "{}[]\",:\\u0123456789.-eE truefalsenull\x80\xc3\xed\xf4\xff";
    mut_state = 20240611;
    int accepted = 0, refused = 0;
    for (int iter = 0; iter < 30000; iter++) {
        const char *seed = seeds[iter % 3];
        size_t n = strlen(seed);
        char buf[512];
        memcpy(buf, seed, n);
        int edits = 1 + (int)(mut_next() % 4);
        for (int k = 0; k < edits; k++) {
            size_t at = mut_next() % (n + 1);
            uint64_t op = mut_next() % 3;
            char c = (mut_next() % 4) ? alphabet[mut_next() % (sizeof alphabet - 1)]
                                      : (char)mut_next();
            if (op == 0 && n < sizeof buf - 1) {          /* insert */
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = c;
                n++;
            } else if (op == 1 && at < n) {               /* delete */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
            } else if (at < n) {                          /* replace */
                buf[at] = c;
            }
        }
        oai_kind kind = iter % 3 == 1 ? OAI_CHAT : OAI_COMPLETION;
        oai_request r;
        oai_error e;
        int rc = parse_n(kind, buf, n, &r, &e);
        if (rc == 0) {
            accepted++;
            assert_true(valid_utf8((const unsigned char *)r.model, strlen(r.model)));
            if (r.prompt) assert_true(valid_utf8((const unsigned char *)r.prompt, r.prompt_len));
            for (size_t i = 0; i < r.n_messages; i++)
                assert_true(valid_utf8((const unsigned char *)r.messages[i].content,
                                       r.messages[i].content_len));
            for (size_t i = 0; i < r.n_stop; i++)
                assert_true(strlen(r.stop[i]) > 0);
            oai_request_free(&r);
        } else {
            refused++;
            assert_int_equal(rc, TS_ERR_INVAL);
            assert_int_equal(e.status, 400);
            assert_true(e.message[0] != '\0');
            char *js = oai_error_json(&e);       /* the refusal is valid JSON */
            cJSON *j = cJSON_Parse(js);
            assert_non_null(j);
            cJSON_Delete(j);
            free(js);
        }
    }
    /* The mutations must exercise both outcomes to mean anything. */
    assert_true(accepted > 100);
    assert_true(refused > 100);
}


/* ---- embeddings, tokenize, detokenize -------------------------------------- */

static void test_embeddings_parse(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"hello\"}", &r);
    assert_int_equal(r.n_inputs, 1);
    assert_string_equal(r.inputs[0].text, "hello");
    assert_false(r.base64);
    assert_int_equal(r.dimensions, 0);
    oai_request_free(&r);
    ok(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[\"a\",\"bc\"],\"encoding_format\":\"base64\","
                       "\"dimensions\":8,\"user\":\"u\"}", &r);
    assert_int_equal(r.n_inputs, 2);
    assert_int_equal(r.inputs[1].len, 2);
    assert_true(r.base64);
    assert_int_equal(r.dimensions, 8);
    oai_request_free(&r);
    ok(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[5,6,7]}", &r);   /* one list of ids */
    assert_int_equal(r.n_inputs, 1);
    assert_int_equal(r.inputs[0].n_tokens, 3);
    assert_int_equal(r.inputs[0].tokens[2], 7);
    oai_request_free(&r);
    ok(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[[1],[2,3]],\"encoding_format\":null}", &r);
    assert_int_equal(r.n_inputs, 2);
    assert_int_equal(r.inputs[1].n_tokens, 2);
    assert_null(r.inputs[1].text);
    oai_request_free(&r);

    bad(OAI_EMBEDDINGS, "{\"model\":\"e\"}", "input", "required");
    bad(OAI_EMBEDDINGS, "{\"input\":\"x\"}", "model", "model");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"\"}", "input", "empty");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[]}", "input", "empty");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":{}}", "input", "must be a string");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[\"a\",3]}", "input[1]", "string or an array");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[\"a\",\"\"]}", "input[1]", "empty");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[[1],[-2]]}", "input[1][0]", "token id");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[1,\"x\"]}", "input[1]", "token id");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":[[]]}", "input[0]", "empty");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"x\",\"encoding_format\":\"int8\"}",
        "encoding_format", "base64");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"x\",\"dimensions\":0}", "dimensions", "between");
    bad(OAI_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"x\",\"dimensions\":1.5}", "dimensions", "integer");

    /* OpenAI's cap on inputs per request. */
    size_t n = OAI_MAX_INPUTS + 1, cap = 64 + 4 * n;
    char *body = malloc(cap), *p = body;
    p += sprintf(p, "{\"model\":\"e\",\"input\":[");
    for (size_t i = 0; i < n; i++) p += sprintf(p, i ? ",\"a\"" : "\"a\"");
    sprintf(p, "]}");
    bad(OAI_EMBEDDINGS, body, "input", "at most");
    free(body);
}

static void test_tokenize_parse(void **st) {
    (void)st;
    oai_request r;
    ok(OAI_TOKENIZE, "{\"prompt\":\"hi\"}", &r);
    assert_null(r.model);
    assert_string_equal(r.prompt, "hi");
    assert_false(r.has_messages);
    assert_true(r.add_special_tokens);
    assert_true(r.add_generation_prompt);
    oai_request_free(&r);
    ok(OAI_TOKENIZE, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                     "\"add_generation_prompt\":false,\"add_special_tokens\":false}", &r);
    assert_string_equal(r.model, "m");
    assert_true(r.has_messages);
    assert_int_equal(r.n_messages, 1);
    assert_false(r.add_generation_prompt);
    assert_false(r.add_special_tokens);
    oai_request_free(&r);
    bad(OAI_TOKENIZE, "{\"model\":\"m\"}", "prompt", "either");
    bad(OAI_TOKENIZE, "{\"prompt\":\"a\",\"messages\":[]}", "messages", "either");
    bad(OAI_TOKENIZE, "{\"prompt\":\"a\",\"add_special_tokens\":1}", "add_special_tokens", "boolean");
    bad(OAI_TOKENIZE, "{\"model\":\"\",\"prompt\":\"a\"}", "model", "empty");

    ok(OAI_DETOKENIZE, "{\"tokens\":[1,2,3]}", &r);
    assert_int_equal(r.n_prompt_tokens, 3);
    oai_request_free(&r);
    bad(OAI_DETOKENIZE, "{}", "tokens", "required");
    bad(OAI_DETOKENIZE, "{\"tokens\":[]}", "tokens", "empty");
    bad(OAI_DETOKENIZE, "{\"tokens\":\"1 2\"}", "tokens", "array");
    bad(OAI_DETOKENIZE, "{\"tokens\":[1,2.5]}", "tokens[1]", "token id");
}

static void test_embeddings_json(void **st) {
    (void)st;
    const float v[4] = {0.5f, -0.25f, 1.0f / 3.0f, 0.0f};
    char *j = oai_embeddings_json("e", v, 2, 2, false, 7);
    assert_non_null(j);
    cJSON *root = cJSON_Parse(j);
    assert_non_null(root);
    const cJSON *data = cJSON_GetObjectItem(root, "data");
    assert_int_equal(cJSON_GetArraySize(data), 2);
    const cJSON *e1 = cJSON_GetObjectItem(cJSON_GetArrayItem(data, 1), "embedding");
    assert_true((float)cJSON_GetArrayItem(e1, 0)->valuedouble == 1.0f / 3.0f);   /* %.9g round-trips */
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "usage"), "total_tokens")->valueint, 7);
    cJSON_Delete(root);
    free(j);
    /* base64 of the little-endian float32 bytes: 0.5f is 00 00 00 3f. */
    j = oai_embeddings_json("e", v, 1, 1, true, 1);
    assert_non_null(strstr(j, "\"embedding\":\"AAAAPw==\""));
    free(j);
    j = oai_tokenize_json((const int32_t[]){4, 5}, 2, 128);
    assert_string_equal(j, "{\"count\":2,\"max_model_len\":128,\"tokens\":[4,5]}");
    free(j);
    j = oai_detokenize_json("a\"b", 3);
    assert_string_equal(j, "{\"prompt\":\"a\\\"b\"}");
    free(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_minimal),
        cmocka_unit_test(test_completion_full),
        cmocka_unit_test(test_completion_nulls_are_absent),
        cmocka_unit_test(test_prompt_forms),
        cmocka_unit_test(test_model_errors),
        cmocka_unit_test(test_prompt_errors),
        cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_stop),
        cmocka_unit_test(test_stream_and_user),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_choices_parse),
        cmocka_unit_test(test_logprobs_parse),
        cmocka_unit_test(test_penalties_parse),
        cmocka_unit_test(test_logit_bias_and_stops_parse),
        cmocka_unit_test(test_guided_parse),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_choices_json),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_raw_bytes),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_chat_minimal),
        cmocka_unit_test(test_chat_full),
        cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_error_json),
        cmocka_unit_test(test_completion_response),
        cmocka_unit_test(test_chat_response),
        cmocka_unit_test(test_sanitised_text),
        cmocka_unit_test(test_sse_framing),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_embeddings_parse),
        cmocka_unit_test(test_tokenize_parse),
        cmocka_unit_test(test_embeddings_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
