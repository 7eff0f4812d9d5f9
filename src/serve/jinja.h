/*
 * jinja.h - a Jinja2 subset interpreter for chat templates: lexer, parser
 * to an AST, and an evaluator that remembers which output bytes came from
 * the template and which from the request.
 *
 * Models publish their prompt format as a Jinja2 template
 * (tokenizer.chat_template). jj_parse compiles one once, at model load;
 * jj_render runs it per request. The language covered is what the published
 * templates of Llama 3.x, Qwen 2.5/3, Gemma 3, Phi-3, Mistral and ChatML
 * models use: text, {{ }}, {% %}, {# #}, whitespace control ({%- -%} and
 * HF's settings trim_blocks=True, lstrip_blocks=True), if/elif/else,
 * for/else with loop.* and an inline filter, break/continue, set (also
 * ns.attr and set blocks), macros, do, generation blocks (no-ops), the
 * usual operators, slices, filters, tests and string/dict methods (the
 * tables in jinja.c list them), raise_exception, strftime_now, namespace
 * and range. Anything else is an error that names the construct: at parse
 * time for tags, filters, tests, methods and functions, at render time for
 * type errors. Semantics are Python Jinja2's, which transformers renders
 * with, where @huggingface/jinja differs: Undefined prints as nothing, is
 * falsy and iterates as empty, but reading an attribute of it fails; none
 * prints "None"; a for loop's body gets a fresh scope per iteration;
 * selectattr(a, "undefined") selects the items without a.
 *
 * Provenance ("taint"). Every string value carries one bit per byte:
 * template (text and string literals of the template, trusted variables
 * such as bos_token, numbers and strftime_now output) or data (anything
 * from the request: message content, tool definitions). Operations that
 * copy bytes keep each byte's bit: concatenation, ~, slicing, indexing,
 * trim/strip, split, join, replace (the replacement's bytes keep the
 * replacement's bit), case changes. Text an operation synthesizes from a
 * whole value (tojson, the Python repr of a list or dict) is template only
 * when every string inside the value is entirely template, else it is all
 * data. A string built from both is therefore mixed byte by byte, never
 * promoted: jj_render reports the template bytes of the output as spans,
 * and the caller encodes only those with special-token parsing.
 *
 * Safety: template and request are both untrusted input. Output size,
 * memory, evaluation steps (which bound loops) and macro nesting are
 * capped (jj_limits); parser nesting is capped too. Errors never crash:
 * they return a negative TS_ERR_* with a message ("3:14: unknown filter
 * 'foo'"). Library code: no I/O, no clock (strftime_now reads the time the
 * caller passes), no globals; a parsed template is read-only, so threads
 * may render it at once.
 *
 * Known limits: case changes (upper, lower, title, capitalize) map ASCII
 * only; integers are 64-bit (overflow is an error, not a bigint); a JSON
 * number without a fraction becomes an int (1.0 renders as 1); strings
 * index and slice by code point, treating each invalid UTF-8 byte as one;
 * tojson supports indent and ensure_ascii (not sort_keys or separators);
 * no autoescape, template inheritance, includes, call blocks, filter
 * blocks or recursive loops (each is a parse error naming it).
 */
#ifndef TS_JINJA_H
#define TS_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

typedef struct jj_tpl jj_tpl;

/* Caps for one render; zero fields take the defaults below. */
typedef struct jj_limits {
    size_t max_output;      /* bytes of rendered text */
    size_t max_memory;      /* bytes the render may allocate for values */
    uint64_t max_steps;     /* statements and expressions evaluated */
    int max_depth;          /* nested macro calls */
} jj_limits;

#define JJ_MAX_OUTPUT  (16u << 20)
#define JJ_MAX_MEMORY  (256u << 20)
#define JJ_MAX_STEPS   10000000u
#define JJ_MAX_DEPTH   32

/* One chat message, as chat.h's chat_msg. */
typedef struct jj_msg {
    const char *role;       /* NUL-terminated */
    const char *content;    /* content_len bytes; NULL when content_len is 0 */
    size_t content_len;
} jj_msg;

/* A byte range of the output that is template text. */
typedef struct jj_span {
    size_t off;
    size_t len;
} jj_span;

/* What a render sees. Variables are looked up in this order: those the
 * template sets, messages (when msgs), trusted, data. */
typedef struct jj_input {
    const jj_msg *msgs;             /* NULL, or n_msgs messages bound to
                                     * "messages" as dicts {role, content}:
                                     * content is data; a role is template
                                     * text when it is one of system, developer,
                                     * user, assistant, tool, else data */
    int n_msgs;
    int add_generation_prompt;      /* bound as a bool */
    const struct cJSON *data;       /* NULL or a JSON object of request
                                     * variables (tools, messages with
                                     * tool_calls, ...): its strings are data */
    const char *const *trusted;     /* NULL or name, value, ..., NULL: string
                                     * variables that are template text
                                     * (bos_token, eos_token) */
    int64_t now;                    /* strftime_now's clock: seconds since
                                     * the epoch, formatted as UTC */
    const jj_limits *lim;           /* NULL: all defaults */
} jj_input;

/*
 * Compile len bytes of template source (need not be NUL-terminated).
 * OUT out: the template, freed with jj_free.
 * Returns 0; TS_ERR_INVAL with "line:col: message" in err for a syntax
 * error or an unsupported construct; TS_ERR_NOMEM.
 */
int jj_parse(const char *src, size_t len, jj_tpl **out, char *err, size_t errlen);

/*
 * Render t with in.
 * OUT out: malloc'd NUL-terminated text (may hold NULs from the data), freed
 *          by the caller; OUT len: its length.
 * OUT spans: malloc'd template ranges of the text, in order, non-empty,
 *            adjacent ones merged (NULL when *n_spans is 0); spans may be
 *            NULL when the caller does not want them.
 * Returns 0; TS_ERR_INVAL with a message for a render error (raise_exception
 * in the template: "template error: <its message>"; a type error; a limit
 * exceeded); TS_ERR_NOMEM. On failure *out and *spans are NULL, the counts 0.
 */
int jj_render(const jj_tpl *t, const jj_input *in, char **out, size_t *len,
              jj_span **spans, size_t *n_spans, char *err, size_t errlen);

void jj_free(jj_tpl *t);

#endif
