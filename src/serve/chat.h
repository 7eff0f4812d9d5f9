/*
 * chat.h - OpenAI chat messages to a prompt string, in the format the model
 * was trained on.
 *
 * Two ways, one output contract (the text, plus the byte ranges of it that
 * are template text, for chat_tokenize / chat_tpl_tokenize):
 *
 * 1. Compiled templates (chat_tpl_*). GGUF files carry the model's chat
 *    format as a Jinja template (tokenizer.chat_template). chat_tpl_new
 *    compiles it once, at model load, with jinja.h's interpreter (a Jinja2
 *    subset covering the published templates of Llama 3.x, Qwen 2.5/3,
 *    Gemma 3, Phi-3, Mistral and ChatML models; an unsupported construct
 *    is an error that names it, at load). chat_tpl_render runs it per
 *    request, the way transformers' apply_chat_template does: variables
 *    messages, add_generation_prompt, bos_token, eos_token, strftime_now,
 *    plus any request variables the caller passes (tools, enable_thinking).
 *    The template decides everything: system prompts, trimming, roles it
 *    refuses (its raise_exception becomes an error carrying its message).
 *    Which bytes are template text is tracked through every operation
 *    (jinja.h, "Provenance"): message content stays content even after
 *    trim, slicing or concatenation.
 *
 * 2. Hand-written families (chat_detect, chat_render), for models whose
 *    GGUF has no template, and for callers not yet on chat_tpl: chat_detect
 *    picks one of a few known families from markers that only that family's
 *    template contains, and chat_render writes that family's format by hand.
 *    Detection order and markers:
 *     "<|im_start|>"           CHAT_CHATML   (Qwen, SmolLM, Hermes, Yi, ...)
 *                              unless "<|im_sep|>" (Phi-4's variant): default
 *     "<|start_header_id|>"    CHAT_LLAMA3   (Llama 3, 3.1, 3.2, 3.3)
 *     "<start_of_turn>"        CHAT_GEMMA    (Gemma 1, 2, 3)
 *     "[INST]" and "<<SYS>>"   CHAT_LLAMA2
 *     "[INST]"                 CHAT_MISTRAL  (Mistral 7B, Mixtral)
 *     "<|user|>" and "<|end|>" CHAT_PHI3     (Phi-3, Phi-3.5)
 *     "<|user|>"               CHAT_ZEPHYR   (Zephyr, TinyLlama chat)
 *     anything else, or none   CHAT_DEFAULT
 *    CHAT_DEFAULT is not any model's format: it is a plain role-prefixed
 *    transcript ("system: ...\nuser: ...\nassistant:") that any model can
 *    continue, used when the template is absent or unrecognised.
 *
 * Family rendering in detail follows; the compiled path renders whatever
 * the model's template says.
 *
 * What each family renders (S system, U user, A assistant, T tool; "BOS" in
 * the table means the family's BOS token text appears in the output):
 *   DEFAULT  "system: S\nuser: U\nassistant: A\ntool: T\nassistant:"
 *   CHATML   "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
 *            ... "<|im_start|>assistant\n"; a tool message has role "tool".
 *   LLAMA3   "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS"
 *            "<|eot_id|>" ... "<|start_header_id|>assistant<|end_header_id|>\n\n";
 *            content trimmed; a tool message has role "ipython" (Llama 3.1).
 *   LLAMA2   "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] U2 [/INST]";
 *            content stripped.
 *   MISTRAL  "<s>[INST] S\n\nU [/INST]A</s>[INST] U2 [/INST]" (the v0.1 layout).
 *   ZEPHYR   "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\nA</s>\n<|assistant|>\n"
 *   GEMMA    "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
 *            "A<end_of_turn>\n<start_of_turn>model\n"; U and A trimmed.
 *   PHI3     "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\nA<|end|>\n"
 *            "<|assistant|>\n"
 * Every render ends with the generation prompt, the opener of the
 * assistant's turn; for LLAMA2 and MISTRAL that opener is the "[/INST]"
 * closing the last user turn, so nothing follows it.
 *
 * Roles the family lacks: MISTRAL and GEMMA have no system turn and LLAMA2
 * has one only inside the first [INST]; for them a system message is held and
 * prepended to the next user message (LLAMA2 in a <<SYS>> block, the others
 * followed by a blank line), or becomes a user turn of its own when an
 * assistant message or the end comes first; consecutive system messages
 * join with a blank line. Tool messages render as user turns in LLAMA2,
 * MISTRAL, ZEPHYR, GEMMA and PHI3. Unlike the Jinja originals, nothing
 * insists that user and assistant alternate; no default system prompt is
 * invented (Qwen's templates add one). Accepted roles: "system", "user",
 * "assistant", "tool", and "developer" (OpenAI's newer name for system).
 *
 * BOS. Where the template writes bos_token (LLAMA3 "<|begin_of_text|>",
 * LLAMA2 "<s>" before every user turn, MISTRAL "<s>", GEMMA "<bos>") the text
 * carries it and add_bos is 0: the caller must not prepend another. For the
 * other families the template writes none; add_bos is 1, meaning "prepend
 * BOS if the vocabulary asks for it" (tok_add_bos), which is how TinyLlama
 * gets its <s> and Qwen gets none.
 *
 * Special tokens and injection. The output mixes template text, which holds
 * special-token texts ("<|im_start|>", "</s>"), with message content, which
 * is the user's. Encoding the whole string with special-token parsing would
 * let a user who types "<|im_end|>\n<|im_start|>system" forge a turn.
 * chat_render_segs also returns the byte ranges of the output that are
 * template text, so the caller can parse special tokens there and encode
 * content as plain text. (tok_encode today never produces control tokens
 * from text at all, so without such a split the markers would be encoded as
 * ordinary characters.)
 *
 * Known limits of the families (the compiled path has none of these):
 * per-model variations inside a family are not reproduced
 * (Mistral v0.3 writes "[/INST]" without the leading space and puts the
 * system prompt in the last user turn; Llama 3.1 adds a "Cutting Knowledge
 * Date" system header; Gemma 1 and 2 refuse a system message where we fold
 * it). Trimming strips ASCII whitespace only, where Jinja's trim strips all
 * Unicode whitespace. Tool calls and multimodal content parts are the
 * caller's to flatten into content strings.
 *
 * BOS with compiled templates: the template writes bos_token where the
 * model wants it. chat_tpl_tokenize prepends a BOS (when the vocabulary adds
 * one) only if the rendered text does not start with the bos_token text
 * (chat_tpl_has_bos), so a template that writes it never gets two.
 * Role names with compiled templates: the same five are accepted;
 * "developer" reaches the template as "system", since no published template
 * knows the newer name.
 *
 * No I/O and no globals. The family functions and the _req forms read no
 * clock; chat_tpl_render and chat_tpl_tokenize read time() once, for the
 * template's strftime_now. A chat_tpl is read-only after chat_tpl_new:
 * threads may render it at once.
 */
#ifndef TS_CHAT_H
#define TS_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "tok.h"
#include "tokspecial.h"

typedef enum chat_family {
    CHAT_DEFAULT = 0,   /* role-prefixed transcript; not a model's format */
    CHAT_CHATML,
    CHAT_LLAMA3,
    CHAT_LLAMA2,
    CHAT_MISTRAL,
    CHAT_ZEPHYR,
    CHAT_GEMMA,
    CHAT_PHI3,
    CHAT_N_FAMILIES
} chat_family;

typedef struct chat_msg {
    const char *role;       /* NUL-terminated: system|developer|user|assistant|tool */
    const char *content;    /* content_len bytes, need not be NUL-terminated;
                             * may be NULL when content_len is 0 */
    size_t content_len;
} chat_msg;

/* A byte range of the rendered text that is template text (markers, role
 * names, separators, BOS/EOS texts), not message content. */
typedef tok_span chat_seg;  /* off, len: bytes from the start of the text */

/* The family whose markers appear in a chat template's Jinja text (len
 * bytes); CHAT_DEFAULT for NULL, empty or unrecognised text. */
chat_family chat_detect(const char *jinja, size_t len);

/* Lower-case name ("chatml", "llama3", "default"); "unknown" out of range. */
const char *chat_family_name(chat_family f);

/*
 * Render n messages in family f, followed by the generation prompt.
 * OUT out: malloc'd NUL-terminated text, freed by the caller with free().
 * OUT len: its length without the NUL.
 * OUT add_bos: 1 = prepend BOS if the vocabulary wants one; 0 = the text
 *              already carries BOS, never prepend.
 * Returns 0; TS_ERR_INVAL for n < 1, a NULL list, an unknown family or role,
 * or NULL content with a non-zero length; TS_ERR_NOMEM. On failure *out is
 * NULL, *len and *add_bos are 0.
 */
int chat_render(chat_family f, const chat_msg *msgs, int n,
                char **out, size_t *len, int *add_bos);

/*
 * chat_render, and also the template-text ranges of the output, in order,
 * non-overlapping, adjacent ranges merged; bytes not covered are message
 * content. OUT segs: malloc'd array, freed by the caller (NULL when
 * *n_segs is 0). On failure *segs is NULL and *n_segs 0.
 */
int chat_render_segs(chat_family f, const chat_msg *msgs, int n,
                     char **out, size_t *len, int *add_bos,
                     chat_seg **segs, size_t *n_segs);

/*
 * The chat rendered (chat_render_segs) and tokenized with t into *ids
 * (appended): template ranges through the model's special tokens
 * (tks_encode_template with specials), so they may hold turn markers;
 * message content as plain text, so it never does (a user typing
 * <|im_end|> gets text, not a turn boundary); a BOS first when the
 * template wants one and the vocabulary adds it. Returns 0 or a TS_ERR_*
 * code; *ids may then hold part of the chat (the caller frees it).
 */
int chat_tokenize(chat_family f, const chat_msg *msgs, int n, const tok *t, const tks_set *specials,
                  tks_ids *ids);

/* ---- compiled templates --------------------------------------------------- */

typedef struct chat_tpl chat_tpl;

/*
 * Compile a chat template (len bytes of Jinja) with the model's BOS and EOS
 * texts (NULL when the model has none: the variable is then undefined).
 * OUT out: the template, freed with chat_tpl_free.
 * Returns 0; TS_ERR_INVAL with "line:col: message" in err for a template
 * that does not parse or uses something unsupported; TS_ERR_NOMEM.
 */
int chat_tpl_new(const char *jinja, size_t len, const char *bos_token, const char *eos_token,
                 chat_tpl **out, char *err, size_t errlen);
void chat_tpl_free(chat_tpl *t);

/* One render's inputs beyond the template. */
typedef struct chat_tpl_req {
    const chat_msg *msgs;           /* n messages, bound as "messages"; may be
                                     * NULL when vars holds "messages" */
    int n;
    int add_generation_prompt;
    int64_t now;                    /* strftime_now's clock, seconds since
                                     * the epoch, formatted as UTC */
    const struct cJSON *vars;       /* NULL or a JSON object of more request
                                     * variables (tools, enable_thinking, or
                                     * "messages" with tool_calls); all data */
} chat_tpl_req;

/*
 * Render req with t.
 * OUT out, len: malloc'd NUL-terminated text and its length.
 * OUT add_bos (may be NULL): 1 = prepend BOS if the vocabulary wants one;
 *     0 = the text starts with bos_token, never prepend.
 * OUT segs, n_segs (segs may be NULL): the template-text ranges, in order,
 *     non-empty, adjacent ones merged, as chat_render_segs.
 * Returns 0; TS_ERR_INVAL with a message for no messages, a bad role, a
 * render error (the template's raise_exception: "template error: <its
 * message>") or a limit exceeded; TS_ERR_NOMEM. On failure *out and *segs
 * are NULL and the counts 0.
 */
int chat_tpl_render_req(const chat_tpl *t, const chat_tpl_req *req, char **out, size_t *len,
                        int *add_bos, chat_seg **segs, size_t *n_segs, char *err, size_t errlen);

/* chat_tpl_render_req with just messages, and now = time(NULL). */
int chat_tpl_render(const chat_tpl *t, const chat_msg *msgs, int n, int add_generation_prompt,
                    char **out, size_t *len, chat_seg **segs, size_t *n_segs, char *err,
                    size_t errlen);

/* 1 when text (len bytes) starts with t's bos_token text. */
int chat_tpl_has_bos(const chat_tpl *t, const char *text, size_t len);

/*
 * The chat rendered with t and tokenized with tk into *ids (appended), as
 * chat_tokenize: template ranges through specials, content as plain text,
 * BOS first when add_bos (above) and the vocabulary adds one. Returns 0 or a
 * TS_ERR_* code with a message; *ids may then hold part of the chat.
 */
int chat_tpl_tokenize_req(const chat_tpl *t, const chat_tpl_req *req, const tok *tk,
                          const tks_set *specials, tks_ids *ids, char *err, size_t errlen);
int chat_tpl_tokenize(const chat_tpl *t, const chat_msg *msgs, int n, int add_generation_prompt,
                      const tok *tk, const tks_set *specials, tks_ids *ids, char *err,
                      size_t errlen);

#endif
