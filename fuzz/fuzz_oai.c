/*
 * fuzz_oai.c - a request body as the HTTP thread sees it: parsed as a POST
 * /v1/completions and as a POST /v1/chat/completions body (serve/oai.c),
 * and, when it is accepted, carried on the way the server carries it: the
 * chat rendered in a template family (serve/chat.c) with its template
 * ranges encoded with special tokens and the content as plain text
 * (engine/tokspecial.c, engine/tok.c), the stop strings given to a
 * detokenizer (serve/detok.c), and the answer written as JSON and SSE.
 *
 * Checks oai.h's promises: an accepted request holds valid UTF-8 text
 * without NUL bytes and values in their documented ranges; a refused one
 * gets a 400 (or 503) whose message is valid UTF-8; every response body is
 * valid JSON whatever bytes its text holds, and carries valid UTF-8 text
 * through unchanged. The template family and the vocabulary are picked by
 * a hash of the input, so the same input always takes the same path.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "detok.h"
#include "err.h"
#include "oai.h"
#include "tok.h"
#include "tokspecial.h"

static int valid_text(const char *s, size_t n) {
    return s && strlen(s) == n && fz_utf8_valid(s, n);
}

/* The OpenAI parameters within their documented ranges, and the
 * sequences a request asks for within the cap. */
static void check_params(const oai_request *q) {
    FZ_CHECK(q->n >= 1 && q->n <= OAI_MAX_N);
    FZ_CHECK(q->best_of == 0 || (q->best_of >= q->n && q->best_of <= OAI_MAX_N));
    if (q->best_of > q->n) FZ_CHECK(!q->stream);
    size_t seqs = (q->n_inputs ? q->n_inputs : 1) * (q->best_of > q->n ? q->best_of : q->n);
    FZ_CHECK(seqs <= OAI_MAX_SEQS);
    FZ_CHECK(q->logprobs >= -1 && q->logprobs <= OAI_MAX_LOGPROBS);
    FZ_CHECK(q->presence_penalty >= -2 && q->presence_penalty <= 2);
    FZ_CHECK(q->frequency_penalty >= -2 && q->frequency_penalty <= 2);
    FZ_CHECK(q->repetition_penalty > 0 && q->repetition_penalty <= 100);
    FZ_CHECK(q->min_p >= 0 && q->min_p <= 1);
    FZ_CHECK(q->n_logit_bias <= SMP_MAX_BIAS && (!q->n_logit_bias || q->logit_bias));
    for (size_t i = 0; i < q->n_logit_bias; i++)
        FZ_CHECK(q->logit_bias[i].id >= 0 && q->logit_bias[i].bias >= -100 && q->logit_bias[i].bias <= 100);
    FZ_CHECK(q->n_stop_token_ids <= SMP_MAX_STOP);
    for (size_t i = 0; i < q->n_stop_token_ids; i++) FZ_CHECK(q->stop_token_ids[i] >= 0);
    if (q->max_tokens) FZ_CHECK(q->min_tokens <= q->max_tokens);
    if (q->kind == OAI_CHAT) FZ_CHECK(!q->echo && !q->best_of);
    const oai_guided *g = &q->guided;
    FZ_CHECK(g->kind <= OAI_GUIDED_CHOICE);
    if (g->kind == OAI_GUIDED_JSON_SCHEMA || g->kind == OAI_GUIDED_REGEX) FZ_CHECK(g->spec && g->spec[0]);
    if (g->kind == OAI_GUIDED_CHOICE) FZ_CHECK(g->n_choices >= 1 && g->n_choices <= OAI_MAX_CHOICES);
    for (size_t i = 0; i < g->n_choices; i++) FZ_CHECK(g->choices[i][0] && valid_text(g->choices[i], strlen(g->choices[i])));
}

static void check_request(const oai_request *q) {
    FZ_CHECK(q->model && q->model[0] && valid_text(q->model, strlen(q->model)));
    if (q->kind == OAI_COMPLETION && q->n_inputs) {
        /* Several prompts: each a text or token ids, none in prompt. */
        FZ_CHECK(!q->prompt && !q->prompt_tokens && q->n_inputs <= OAI_MAX_SEQS);
        for (size_t i = 0; i < q->n_inputs; i++) {
            const oai_input *in = &q->inputs[i];
            FZ_CHECK(!in->text != !in->tokens);
            if (in->text) FZ_CHECK(valid_text(in->text, in->len));
            for (size_t k = 0; in->tokens && k < in->n_tokens; k++) FZ_CHECK(in->tokens[k] >= 0);
        }
        FZ_CHECK(!q->messages && q->n_messages == 0);
    } else if (q->kind == OAI_COMPLETION) {
        FZ_CHECK(!q->prompt != !q->prompt_tokens);
        if (q->prompt) FZ_CHECK(valid_text(q->prompt, q->prompt_len));
        if (q->prompt_tokens) {
            FZ_CHECK(q->n_prompt_tokens >= 1);
            for (size_t i = 0; i < q->n_prompt_tokens; i++) FZ_CHECK(q->prompt_tokens[i] >= 0);
        }
        FZ_CHECK(!q->messages && q->n_messages == 0);
    } else {
        FZ_CHECK(q->messages && q->n_messages >= 1);
        for (size_t i = 0; i < q->n_messages; i++) {
            FZ_CHECK(q->messages[i].role <= OAI_ROLE_TOOL);
            FZ_CHECK(valid_text(q->messages[i].content, q->messages[i].content_len));
        }
        FZ_CHECK(!q->prompt && !q->prompt_tokens);
    }
    FZ_CHECK(q->max_tokens <= OAI_MAX_TOKENS_CAP);
    FZ_CHECK(q->temperature >= 0 && q->temperature <= 2);
    FZ_CHECK(q->top_p > 0 && q->top_p <= 1);
    FZ_CHECK(q->top_k >= 0);
    FZ_CHECK(q->n_stop <= OAI_MAX_STOP);
    for (size_t i = 0; i < q->n_stop; i++)
        FZ_CHECK(q->stop[i][0] && valid_text(q->stop[i], strlen(q->stop[i])));
    if (q->include_usage) FZ_CHECK(q->stream);
    if (q->user) FZ_CHECK(valid_text(q->user, strlen(q->user)));
    check_params(q);
}

/* The chat as the server turns it into tokens (chat_tokenize), after a
 * check of the render's segments: in order, inside the text, not touching
 * (adjacent ones merge). */
static void tokenize_chat(const oai_request *q, chat_family f, const tok *t, const tks_set *sp) {
    chat_msg *msgs = malloc(q->n_messages * sizeof *msgs);
    FZ_CHECK(msgs != NULL);
    for (size_t i = 0; i < q->n_messages; i++)
        msgs[i] = (chat_msg){oai_role_name(q->messages[i].role), q->messages[i].content,
                             q->messages[i].content_len};
    char *text = NULL;
    size_t len = 0, n_segs = 0;
    int add_bos = 0;
    chat_seg *segs = NULL;
    int rc = chat_render_segs(f, msgs, (int)q->n_messages, &text, &len, &add_bos, &segs, &n_segs);
    FZ_CHECK(rc == 0 && text && strlen(text) == len && fz_utf8_valid(text, len));
    for (size_t k = 0; k < n_segs; k++) {
        FZ_CHECK(segs[k].len > 0 && segs[k].off + segs[k].len <= len);
        if (k > 0) FZ_CHECK(segs[k].off > segs[k - 1].off + segs[k - 1].len);
    }
    free(text);
    free(segs);
    tks_ids ids = {NULL, 0, 0};
    FZ_CHECK(chat_tokenize(f, msgs, (int)q->n_messages, t, sp, &ids) == 0);
    free(msgs);
    for (int i = 0; i < ids.n; i++) FZ_CHECK(ids.p[i] >= 0 && ids.p[i] < tok_n_vocab(t));
    free(ids.p);
}

static void tokenize_prompt(const oai_request *q, const tok *t) {
    if (!q->prompt) return;  /* token ids: the server only range-checks them */
    tks_ids ids = {NULL, 0, 0};
    FZ_CHECK(tks_encode_text(t, q->prompt, q->prompt_len, tok_add_bos(t), &ids) == 0);
    for (int i = 0; i < ids.n; i++) FZ_CHECK(ids.p[i] >= 0 && ids.p[i] < tok_n_vocab(t));
    free(ids.p);
}

/* The request's stop strings as the worker hands them to its detokenizer:
 * refused only when one is too long for it. */
static void detok_stops(const oai_request *q, const tok *t) {
    const char *stops[OAI_MAX_STOP];
    int too_long = 0;
    for (size_t i = 0; i < q->n_stop; i++) {
        stops[i] = q->stop[i];
        too_long |= strlen(q->stop[i]) >= DTK_MAX_STOP_LEN;
    }
    dtk d;
    int rc = dtk_init(&d, t, stops, (int)q->n_stop);
    FZ_CHECK(too_long ? rc == TS_ERR_INVAL : rc == 0);
    if (rc == 0) {
        const char *out;
        size_t n;
        for (int32_t id = 0; id < 8; id++) FZ_CHECK(dtk_push(&d, id % tok_n_vocab(t), &out, &n) >= 0);
        dtk_finish(&d, &out, &n);
    }
    dtk_deinit(&d);
}

/* A body the server sends: valid JSON, and if want is given, the string at
 * choices[0].<field> (or .message.content / .delta.content) equals it. */
static void check_json(const char *body, size_t skip, const char *want, const char *field) {
    FZ_CHECK(body != NULL);
    size_t n = strlen(body);
    FZ_CHECK(n >= skip);
    FZ_CHECK(fz_utf8_valid(body, n));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body + skip, n - skip - (skip ? 2 : 0), &end, 0);
    FZ_CHECK(root != NULL);
    if (want) {
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
        const cJSON *v = c;
        for (const char *f = field; v && *f;) {
            const char *dot = strchr(f, '.');
            size_t fl = dot ? (size_t)(dot - f) : strlen(f);
            char name[32];
            memcpy(name, f, fl);
            name[fl] = 0;
            v = cJSON_GetObjectItemCaseSensitive(v, name);
            f += fl + (dot ? 1 : 0);
        }
        FZ_CHECK(cJSON_IsString(v) && strcmp(v->valuestring, want) == 0);
    }
    cJSON_Delete(root);
}

/* Token k's text for the logprobs writers: a quarter of the text. */
typedef struct piece_src {
    const char *text;
    size_t len;
} piece_src;

static const char *slice_piece(void *ctx, int32_t id, char *buf, size_t cap, size_t *len) {
    const piece_src *p = ctx;
    size_t q = p->len / 4, at = (size_t)id * q;
    *len = q < cap ? q : cap;
    (void)buf;
    return p->text + at;
}

static void responses(oai_kind kind, const char *model, const char *text, size_t len) {
    oai_head h = {.kind = kind, .created = 1700000000, .model = model};
    oai_usage u = {3, 4};
    /* Text that is valid UTF-8 without NUL comes back as it went in. */
    int clean = fz_utf8_valid(text, len) && memchr(text, 0, len) == NULL;
    char *want = NULL;
    if (clean) {
        want = malloc(len + 1);
        FZ_CHECK(want != NULL);
        memcpy(want, text, len);
        want[len] = 0;
    }
    const char *body_field = kind == OAI_CHAT ? "message.content" : "text";
    const char *chunk_field = kind == OAI_CHAT ? "delta.content" : "text";
    char *s = oai_response_json(&h, text, len, OAI_FINISH_STOP, &u);
    check_json(s, 0, want, body_field);
    free(s);
    s = oai_chunk_sse(&h, true, text, len, OAI_FINISH_NONE);
    FZ_CHECK(s && strncmp(s, "data: ", 6) == 0);
    check_json(s, 6, want, chunk_field);
    free(s);
    s = oai_usage_sse(&h, &u);
    check_json(s, 6, NULL, NULL);
    free(s);
    /* Two choices with logprobs whose token texts are slices of the text
     * (any bytes): the answer and a chunk are still valid JSON. */
    int32_t ids[4] = {0, 1, 2, 3};
    smp_lp lps[4] = {{.logprob = NAN},
                     {.logprob = -1.5f, .n_top = 2, .top_id = {1, 2}, .top_lp = {-1.5f, -2.0f}},
                     {.logprob = -INFINITY, .n_top = 1, .top_id = {3}, .top_lp = {-0.25f}},
                     {.logprob = 0.0f, .n_top = 3, .top_id = {0, 0, 3}, .top_lp = {0.0f, -3.0f, -INFINITY}}};
    piece_src ps = {text, len};
    oai_pieces p = {slice_piece, &ps};
    oai_choice c[2] = {{.index = 0, .text = text, .len = len, .finish = OAI_FINISH_STOP, .has_logprobs = true,
                        .ids = ids, .lps = lps, .n_lp = 4},
                       {.index = 1, .text = text, .len = len, .finish = OAI_FINISH_LENGTH}};
    s = oai_choices_json(&h, c, 2, &u, &p);
    check_json(s, 0, NULL, NULL);
    free(s);
    size_t off = 0;
    c[0].text_offset = &off;
    s = oai_choice_sse(&h, &c[0], &p);
    FZ_CHECK(s && strncmp(s, "data: ", 6) == 0);
    check_json(s, 6, NULL, NULL);
    free(s);
    free(want);
}

static void one(oai_kind kind, const uint8_t *data, size_t size) {
    oai_request q;
    oai_error e;
    memset(&e, 0, sizeof e);
    const char *body = (const char *)data;
    int rc = kind == OAI_CHAT ? oai_parse_chat(body, size, &q, &e)
                              : oai_parse_completion(body, size, &q, &e);
    if (rc == 0) {
        FZ_CHECK(q.kind == kind);
        check_request(&q);
        uint64_t h = fz_hash(data, size);
        int which = (int)(h % FZ_N_TOKS);
        const tok *t = fz_tok(which);
        static tks_set *sets[FZ_N_TOKS];
        if (!sets[which]) FZ_CHECK(tks_set_new(t, &sets[which]) == 0);
        if (kind == OAI_CHAT)
            tokenize_chat(&q, (chat_family)((h >> 8) % CHAT_N_FAMILIES), t, sets[which]);
        else
            tokenize_prompt(&q, t);
        detok_stops(&q, t);
        const char *text = kind == OAI_CHAT ? q.messages[q.n_messages - 1].content : q.prompt;
        size_t len = kind == OAI_CHAT ? q.messages[q.n_messages - 1].content_len : q.prompt_len;
        if (text) responses(kind, q.model, text, len);
        const char *const ids[2] = {q.model, "demo"};
        char *list = oai_models_json(ids, 2, 1700000000);
        check_json(list, 0, NULL, NULL);
        free(list);
    } else {
        FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        FZ_CHECK(e.status == (rc == TS_ERR_INVAL ? 400 : 503));
        FZ_CHECK(memchr(e.message, 0, sizeof e.message) && memchr(e.param, 0, sizeof e.param));
        FZ_CHECK(fz_utf8_valid(e.message, strlen(e.message)));
        char *j = oai_error_json(&e);
        check_json(j, 0, NULL, NULL);
        free(j);
        j = oai_error_sse(&e);
        FZ_CHECK(j && strncmp(j, "data: ", 6) == 0);
        check_json(j, 6, NULL, NULL);
        free(j);
        /* A refused request is left empty. */
        static const oai_request zero;
        FZ_CHECK(memcmp(&q, &zero, sizeof q) == 0);
    }
    oai_request_free(&q);
    oai_request_free(&q);
}

/* Embeddings, tokenize, detokenize: a clean parse or a clean refusal, and
 * the answers built from what was parsed are valid JSON. */
static void other(oai_kind kind, const uint8_t *data, size_t size) {
    oai_request q;
    oai_error e;
    const char *body = (const char *)data;
    int rc = kind == OAI_EMBEDDINGS ? oai_parse_embeddings(body, size, &q, &e)
             : kind == OAI_TOKENIZE ? oai_parse_tokenize(body, size, &q, &e)
                                    : oai_parse_detokenize(body, size, &q, &e);
    if (rc) {
        static const oai_request zero;
        FZ_CHECK((rc == TS_ERR_INVAL && e.status == 400) || (rc == TS_ERR_NOMEM && e.status == 503));
        FZ_CHECK(memcmp(&q, &zero, sizeof q) == 0);
        return;
    }
    FZ_CHECK(q.kind == kind);
    if (kind == OAI_EMBEDDINGS) {
        FZ_CHECK(q.n_inputs >= 1 && q.n_inputs <= OAI_MAX_INPUTS);
        for (size_t i = 0; i < q.n_inputs; i++)
            FZ_CHECK(!q.inputs[i].text != !q.inputs[i].tokens && (q.inputs[i].len || q.inputs[i].n_tokens));
        float *v = calloc(q.n_inputs * 3, sizeof(float));
        FZ_CHECK(v != NULL);
        char *j = oai_embeddings_json(q.model, v, q.n_inputs, 3, q.base64, 1);
        check_json(j, 0, NULL, NULL);
        free(j);
        free(v);
    } else if (q.prompt_tokens) {
        char *j = oai_tokenize_json(q.prompt_tokens, q.n_prompt_tokens, 64);
        check_json(j, 0, NULL, NULL);
        free(j);
    }
    oai_request_free(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(OAI_COMPLETION, data, size);
    one(OAI_CHAT, data, size);
    other(OAI_EMBEDDINGS, data, size);
    other(OAI_TOKENIZE, data, size);
    other(OAI_DETOKENIZE, data, size);
    /* The raw bytes as generated text: the answer is valid JSON anyway. */
    responses(OAI_COMPLETION, "m", (const char *)data, size);
    responses(OAI_CHAT, "m\xff", (const char *)data, size);
    return 0;
}
