/* oai.c - OpenAI wire format: request validation and response bodies; see oai.h. */
#include "oai.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "err.h"
#include "strbuf.h"
#include "utf8.h"

#define T_INVALID "invalid_request_error"
#define C_UNSUPPORTED_PARAM "unsupported_parameter"
#define C_UNSUPPORTED_VALUE "unsupported_value"

/* ---- response text -------------------------------------------------------- */

/* Responses are written by hand rather than through a cJSON tree because
 * cJSON's printer copies bytes >= 0x80 through unchecked, so text would need
 * a sanitising copy first anyway; writing directly does escaping and U+FFFD
 * replacement in one pass, fixes the key order and byte layout exactly, and
 * costs one buffer per streamed token instead of a tree of nodes. */

/* s (n bytes, any content) as a JSON string literal: quotes, backslashes and
 * control characters escaped, ill-formed UTF-8 replaced by U+FFFD, all else
 * copied. NULL reads as "". */
static void put_jstr(strbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    /* Worst case 6 bytes out per byte in (\u00XX); reserving it up front
     * keeps the loop free of checks. */
    if (n > (SIZE_MAX / 2) / 6 || strbuf_reserve(b, 6 * n + 2)) {
        b->failed = 1;
        return;
    }
    char *o = b->p + b->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        if (c < 0x80) {
            *o++ = '\\';
            switch (c) {
            case '"':  *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            default:
                *o++ = 'u', *o++ = '0', *o++ = '0';
                *o++ = hex[c >> 4], *o++ = hex[c & 15];
            }
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_decode_subpart(s + i, n - i, &cp);
        if (cp != UTF8_INVALID) {
            memcpy(o, u + i, k);
            o += k;
        } else {              /* U+FFFD: 3 bytes for >= 1 in, fits the 6x */
            *o++ = (char)0xEF, *o++ = (char)0xBF, *o++ = (char)0xBD;
        }
        i += k;
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
}

static void put_jcstr(strbuf *b, const char *s) { put_jstr(b, s, s ? strlen(s) : 0); }

/* ---- errors -------------------------------------------------------------- */

/* The one place an oai_error is filled; see oai_error_set. */
__attribute__((format(printf, 6, 0)))
static void error_vset(oai_error *e, int status, const char *type, const char *param,
                       const char *code, const char *fmt, va_list ap) {
    e->status = status;
    e->type = type ? type : "server_error";
    e->code = code;
    size_t pl = param ? utf8_cut(param, strlen(param), sizeof e->param - 1) : 0;
    if (pl) memcpy(e->param, param, pl);
    e->param[pl] = '\0';

    int k = vsnprintf(e->message, sizeof e->message, fmt, ap);
    if (k < 0) {
        e->message[0] = '\0';
    } else if ((size_t)k >= sizeof e->message) {
        /* Cut at a character boundary and say so. */
        size_t m = utf8_cut(e->message, sizeof e->message - 1, sizeof e->message - 4);
        memcpy(e->message + m, "...", 4);
    }
}

void oai_error_set(oai_error *e, int status, const char *type, const char *param,
                   const char *code, const char *fmt, ...) {
    if (!e) return;
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, param, code, fmt, ap);
    va_end(ap);
}

static void put_error_obj(strbuf *b, const oai_error *e) {
    strbuf_puts(b, "{\"error\":{\"message\":");
    put_jcstr(b, e->message);
    strbuf_puts(b, ",\"type\":");
    put_jcstr(b, e->type ? e->type : "server_error");
    strbuf_puts(b, ",\"param\":");
    if (e->param[0]) put_jcstr(b, e->param);
    else strbuf_puts(b, "null");
    strbuf_puts(b, ",\"code\":");
    if (e->code) put_jcstr(b, e->code);
    else strbuf_puts(b, "null");
    strbuf_puts(b, "}}");
}

char *oai_error_json(const oai_error *e) {
    if (!e) return NULL;
    strbuf b = STRBUF_INIT;
    put_error_obj(&b, e);
    return strbuf_steal(&b, NULL);
}

char *oai_error_sse(const oai_error *e) {
    if (!e) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "data: ");
    put_error_obj(&b, e);
    strbuf_puts(&b, "\n\n");
    return strbuf_steal(&b, NULL);
}

/* ---- request parsing: helpers -------------------------------------------- */

/* Every validation failure goes through here: a 400 naming the field. */
__attribute__((format(printf, 4, 5)))
static int bad(oai_error *e, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, 400, T_INVALID, param, code, fmt, ap);
    va_end(ap);
    return TS_ERR_INVAL;
}

static int nomem(oai_error *e) {
    oai_error_set(e, err_http_status(TS_ERR_NOMEM), "server_error", NULL, NULL,
                  "out of memory while reading the request");
    return TS_ERR_NOMEM;
}

static int unsupported(oai_error *e, const char *param, const char *what) {
    return bad(e, param, C_UNSUPPORTED_PARAM, "'%s' is not supported by this server: %s",
               param, what);
}

/* The member name of obj, or NULL when absent or JSON null: null means
 * "not given" for every optional field, as OpenAI's own SDKs send it. */
static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* A number that must be an integer within [lo, hi]. Sets *present. The range
 * check is on the double, so infinities (1e999) and huge values are refused
 * before any conversion could overflow. */
static int get_int(const cJSON *obj, const char *name, double lo, double hi,
                   double *out, bool *present, oai_error *e) {
    const cJSON *v = field(obj, name);
    *present = v != NULL;
    if (!v) return 0;
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || (isfinite(d) && d != floor(d)))
        return bad(e, name, NULL, "'%s' must be an integer", name);
    if (!(d >= lo && d <= hi))
        return bad(e, name, NULL, "'%s' must be between %.15g and %.15g, got %.15g",
                   name, lo, hi, d);
    *out = d;
    return 0;
}

/* A finite number; the range check is the caller's (bounds differ in kind). */
static int get_num(const cJSON *obj, const char *name, double *out, bool *present,
                   oai_error *e) {
    const cJSON *v = field(obj, name);
    *present = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad(e, name, NULL, "'%s' must be a number", name);
    if (!isfinite(v->valuedouble))
        return bad(e, name, NULL, "'%s' must be a finite number", name);
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *obj, const char *name, bool *out, oai_error *e) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad(e, name, NULL, "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* An optional string, copied. */
static int get_str(const cJSON *obj, const char *name, char **out, size_t *len,
                   oai_error *e) {
    const cJSON *v = field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return bad(e, name, NULL, "'%s' must be a string", name);
    size_t n = strlen(v->valuestring);
    if (!(*out = dup_n(v->valuestring, n))) return nomem(e);
    if (len) *len = n;
    return 0;
}

/* ---- request parsing: the raw body ---------------------------------------- */

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

/* What cJSON lets through or reports too vaguely, checked on the raw bytes
 * before parsing: a NUL byte (cJSON's strings are C strings, so text after
 * it would vanish silently), the \u0000 escape (same), raw control
 * characters inside strings (RFC 8259 forbids them; cJSON accepts them), and
 * surrogate escapes that do not pair up (cJSON refuses them, but only as
 * "malformed JSON"). Strings are tracked so that a backslash or quote inside
 * one is read as what it is. */
static int scan_raw(const char *s, size_t n, oai_error *e) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0)
            return bad(e, NULL, NULL, "the request body contains a NUL byte at offset %zu", i);
        if (!in_str) {
            in_str = c == '"';
            continue;
        }
        if (c == '"') {
            in_str = false;
        } else if (c < 0x20) {
            return bad(e, NULL, NULL,
                       "unescaped control character 0x%02x inside a string at offset %zu",
                       c, i);
        } else if (c == '\\') {
            unsigned cp, lo;
            if (i + 5 < n && s[i + 1] == 'u' && hex4(s + i + 2, &cp) == 0) {
                if (cp == 0)
                    return bad(e, NULL, NULL,
                               "the \\u0000 escape (NUL) at offset %zu is not supported", i);
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return bad(e, NULL, NULL,
                               "invalid Unicode escape at offset %zu: lone low surrogate", i);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (!(i + 11 < n && s[i + 6] == '\\' && s[i + 7] == 'u' &&
                          hex4(s + i + 8, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF))
                        return bad(e, NULL, NULL,
                                   "invalid Unicode escape at offset %zu: "
                                   "high surrogate without a low surrogate", i);
                    i += 6;   /* the pair's second escape is consumed too */
                }
                i += 5;
            } else {
                i++;          /* the escaped character; cJSON judges the rest */
            }
        }
    }
    return 0;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that appears twice among obj's members, or NULL. Small objects (the
 * usual case) are compared pairwise; a large one is sorted, so a body of a
 * hundred thousand keys costs n log n, not n^2. *oom is set when the sort
 * could not get its array. */
static const char *repeated_key(const cJSON *obj, bool *oom) {
    enum { PAIRWISE_MAX = 16 };
    size_t n = 0;
    *oom = false;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    if (n <= PAIRWISE_MAX) {
        for (const cJSON *a = obj->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (strcmp(a->string, b->string) == 0) return a->string;
        return NULL;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        *oom = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c->string;
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    return dup;
}

/* An object's keys: each well-formed UTF-8 and none repeated (cJSON keeps
 * every copy, and which one a reader finds first is an accident of its
 * code; another parser in front of tessera may take the last). */
static int check_keys(const cJSON *obj, char *path, size_t plen, size_t cap, oai_error *e) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t kl = strlen(c->string);
        if (utf8_valid_prefix(c->string, kl) != kl)
            return bad(e, plen ? path : NULL, NULL, "a key inside %s is not valid UTF-8",
                       plen ? path : "the request body");
    }
    bool oom;
    const char *dup = repeated_key(obj, &oom);
    if (oom) return nomem(e);
    if (!dup) return 0;
    char where[OAI_ERR_PARAM_MAX];
    snprintf(where, sizeof where, "%s", plen ? path : "the request body");
    snprintf(path + plen, cap - plen, "%s%s", plen ? "." : "", dup);
    return bad(e, path, NULL, "duplicate key '%s' in %s", dup, where);
}

/* Every string value and key in the tree must be well-formed UTF-8 (cJSON
 * copies raw bytes through unchecked), and no object may repeat a key.
 * path is the field being visited, in the param syntax of errors:
 * messages[1].content[0].text. Depth is bounded by cJSON's nesting limit
 * (CJSON_NESTING_LIMIT, 1000). */
static int check_tree(const cJSON *v, char *path, size_t plen, size_t cap, oai_error *e) {
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t n = strlen(s), at = utf8_valid_prefix(s, n);
        if (at != n)
            return bad(e, path, NULL, "'%s' is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                       path, (unsigned char)s[at], at);
        return 0;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return 0;
    if (cJSON_IsObject(v)) {
        int rc = check_keys(v, path, plen, cap, e);
        if (rc) return rc;
    }
    size_t idx = 0;
    for (const cJSON *c = v->child; c; c = c->next, idx++) {
        int k = cJSON_IsObject(v) ? snprintf(path + plen, cap - plen, "%s%s", plen ? "." : "", c->string)
                                  : snprintf(path + plen, cap - plen, "[%zu]", idx);
        size_t nl = k < 0 ? plen : plen + (size_t)k;
        if (nl >= cap) nl = cap - 1;   /* a truncated path still names the field */
        int rc = check_tree(c, path, nl, cap, e);
        path[plen] = '\0';
        if (rc) return rc;
    }
    return 0;
}

/* ---- request parsing: fields --------------------------------------------- */

static int parse_model(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "model");
    if (!v) return bad(e, "model", NULL, "you must provide a model parameter");
    if (!cJSON_IsString(v)) return bad(e, "model", NULL, "'model' must be a string");
    if (!v->valuestring[0]) return bad(e, "model", NULL, "'model' must not be empty");
    if (!(r->model = dup_n(v->valuestring, strlen(v->valuestring)))) return nomem(e);
    return 0;
}

/* An array of token ids: non-empty integers in 0..INT32_MAX. OUT *out
 * (malloc'd) and *n on success. */
static int parse_token_ids(const cJSON *arr, const char *name, int32_t **out, size_t *n_out,
                           oai_error *e) {
    int n = cJSON_GetArraySize(arr);
    if (n <= 0) return bad(e, name, NULL, "'%s' must not be empty", name);
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!t) return nomem(e);
    size_t i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        double d = c->valuedouble;
        if (!cJSON_IsNumber(c) || !(d >= 0 && d <= INT32_MAX) || d != floor(d)) {
            free(t);
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "%s[%zu]", name, i);
            return bad(e, p, NULL,
                       "'%s' must be a token id (an integer from 0 to 2147483647)", p);
        }
        t[i] = (int32_t)d;
    }
    *out = t;
    *n_out = i;
    return 0;
}

static int parse_prompt_list(const cJSON *v, oai_request *r, oai_error *e);

/* prompt: a string, an array of exactly one string, an array of token ids,
 * or an array of exactly one array of token ids; a completion may also send
 * several prompts (parse_prompt_list), tokenize may not. */
static int parse_prompt(const cJSON *root, oai_request *r, oai_error *e) {
    static const char shape[] = "'prompt' must be a string, an array of one string, "
                                "or an array of token ids";
    const cJSON *v = field(root, "prompt");
    if (!v) return bad(e, "prompt", NULL, "'prompt' is required");
    if (cJSON_IsString(v)) {
        r->prompt_len = strlen(v->valuestring);
        if (!(r->prompt = dup_n(v->valuestring, r->prompt_len))) return nomem(e);
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad(e, "prompt", NULL, "%s", shape);
    const cJSON *first = v->child;
    if (!first) return bad(e, "prompt", NULL, "'prompt' must not be empty");
    if (cJSON_IsNumber(first)) return parse_token_ids(v, "prompt", &r->prompt_tokens, &r->n_prompt_tokens, e);
    if (!cJSON_IsString(first) && !cJSON_IsArray(first))
        return bad(e, "prompt", NULL, "%s", shape);
    if (first->next && r->kind == OAI_COMPLETION) return parse_prompt_list(v, r, e);
    if (first->next)
        return bad(e, "prompt", C_UNSUPPORTED_VALUE,
                   "'prompt' holds more than one prompt; batched prompts are not "
                   "supported, send one request per prompt");
    if (cJSON_IsArray(first))
        return parse_token_ids(first, "prompt[0]", &r->prompt_tokens, &r->n_prompt_tokens, e);
    r->prompt_len = strlen(first->valuestring);
    if (!(r->prompt = dup_n(first->valuestring, r->prompt_len))) return nomem(e);
    return 0;
}

static int parse_role(const cJSON *msg, const char *base, oai_role *role, oai_error *e) {
    static const struct { const char *name; oai_role role; } roles[] = {
        {"system", OAI_ROLE_SYSTEM}, {"developer", OAI_ROLE_SYSTEM},
        {"user", OAI_ROLE_USER}, {"assistant", OAI_ROLE_ASSISTANT}, {"tool", OAI_ROLE_TOOL},
    };
    char p[OAI_ERR_PARAM_MAX];
    snprintf(p, sizeof p, "%s.role", base);
    const cJSON *v = field(msg, "role");
    if (!v) return bad(e, p, NULL, "'%s' is required", p);
    if (!cJSON_IsString(v)) return bad(e, p, NULL, "'%s' must be a string", p);
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        if (strcmp(v->valuestring, roles[i].name) == 0) {
            *role = roles[i].role;
            return 0;
        }
    }
    const char *s = v->valuestring;
    return bad(e, p, NULL,
               "'%s' must be one of system, developer, user, assistant, tool; got '%.*s'",
               p, (int)utf8_cut(s, strlen(s), 32), s);
}

/* content: a string, or an array of {type:"text", text} parts concatenated
 * in order with nothing in between (the parts are pieces of one text; a
 * chat template sees one string per message). Other part types (images,
 * audio, files) need a model tessera does not run, so they are refused. */
static int parse_content(const cJSON *msg, const char *base, oai_role role,
                         oai_message *m, oai_error *e) {
    char p[OAI_ERR_PARAM_MAX];
    snprintf(p, sizeof p, "%s.content", base);
    const cJSON *v = field(msg, "content");
    if (!v) {
        /* Only an assistant turn may come without content (OpenAI allows it
         * next to tool_calls, which are refused separately). */
        if (role != OAI_ROLE_ASSISTANT) return bad(e, p, NULL, "'%s' is required", p);
        if (!(m->content = dup_n("", 0))) return nomem(e);
        return 0;
    }
    if (cJSON_IsString(v)) {
        m->content_len = strlen(v->valuestring);
        if (!(m->content = dup_n(v->valuestring, m->content_len))) return nomem(e);
        return 0;
    }
    if (!cJSON_IsArray(v))
        return bad(e, p, NULL, "'%s' must be a string or an array of content parts", p);

    size_t total = 0, j = 0;
    for (const cJSON *c = v->child; c; c = c->next, j++) {
        char pp[OAI_ERR_PARAM_MAX + 24], pt[OAI_ERR_PARAM_MAX + 32];
        snprintf(pp, sizeof pp, "%s[%zu]", p, j);
        if (!cJSON_IsObject(c)) return bad(e, pp, NULL, "'%s' must be an object", pp);
        const cJSON *type = field(c, "type");
        snprintf(pt, sizeof pt, "%s.type", pp);
        if (!cJSON_IsString(type)) return bad(e, pt, NULL, "'%s' must be a string", pt);
        if (strcmp(type->valuestring, "text") != 0) {
            const char *s = type->valuestring;
            return bad(e, pt, C_UNSUPPORTED_VALUE,
                       "content parts of type '%.*s' are not supported by this server; "
                       "only 'text' is", (int)utf8_cut(s, strlen(s), 32), s);
        }
        const cJSON *text = field(c, "text");
        snprintf(pt, sizeof pt, "%s.text", pp);
        if (!cJSON_IsString(text)) return bad(e, pt, NULL, "'%s' must be a string", pt);
        total += strlen(text->valuestring);   /* <= the body's length: no overflow */
    }
    char *out = malloc(total + 1);
    if (!out) return nomem(e);
    size_t at = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(out + at, t, n);
        at += n;
    }
    out[at] = '\0';
    m->content = out;
    m->content_len = at;
    return 0;
}

static int parse_messages(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "messages");
    if (!v) return bad(e, "messages", NULL, "'messages' is required");
    if (!cJSON_IsArray(v)) return bad(e, "messages", NULL, "'messages' must be an array");
    int n = cJSON_GetArraySize(v);
    if (n <= 0) return bad(e, "messages", NULL, "'messages' must not be empty");
    if (!(r->messages = calloc((size_t)n, sizeof *r->messages))) return nomem(e);

    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char base[48];            /* "messages[" + 20 digits + "]" */
        snprintf(base, sizeof base, "messages[%zu]", i);
        if (!cJSON_IsObject(c)) return bad(e, base, NULL, "'%s' must be an object", base);
        oai_message *m = &r->messages[i];
        r->n_messages = i + 1;   /* so oai_request_free sees what was filled */
        int rc = parse_role(c, base, &m->role, e);
        if (rc) return rc;
        const cJSON *tc = field(c, "tool_calls");
        if (tc && !(cJSON_IsArray(tc) && !tc->child)) {
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "%s.tool_calls", base);
            return bad(e, p, C_UNSUPPORTED_PARAM,
                       "'%s' is not supported by this server: no tool calling", p);
        }
        if (field(c, "function_call")) {
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "%s.function_call", base);
            return bad(e, p, C_UNSUPPORTED_PARAM,
                       "'%s' is not supported by this server: no function calling", p);
        }
        const cJSON *name = field(c, "name");
        if (name && !cJSON_IsString(name)) {
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "%s.name", base);
            return bad(e, p, NULL, "'%s' must be a string", p);
        }
        if ((rc = parse_content(c, base, m->role, m, e))) return rc;
    }
    return 0;
}

/* max_tokens, and its newer name max_completion_tokens (chat's, honoured on
 * completions too, as vLLM does); when both
 * are given they must agree, since either reading of a conflict would
 * surprise someone. */
static int parse_max_tokens(const cJSON *root, oai_request *r, oai_error *e) {
    double a = 0, b = 0;
    bool has_a, has_b = false;
    int rc = get_int(root, "max_tokens", 1, OAI_MAX_TOKENS_CAP, &a, &has_a, e);
    if (rc) return rc;
    if ((rc = get_int(root, "max_completion_tokens", 1, OAI_MAX_TOKENS_CAP, &b, &has_b, e)))
        return rc;
    if (has_a && has_b && a != b)
        return bad(e, "max_completion_tokens", NULL,
                   "'max_completion_tokens' (%.15g) and 'max_tokens' (%.15g) disagree; "
                   "send one of them", b, a);
    r->max_tokens = (uint32_t)(has_b ? b : a);
    return 0;
}

static int parse_sampling(const cJSON *root, oai_request *r, oai_error *e) {
    double d;
    bool present;
    int rc;

    if ((rc = get_num(root, "temperature", &d, &present, e))) return rc;
    if (present) {
        if (d < 0 || d > 2)
            return bad(e, "temperature", NULL,
                       "'temperature' must be between 0 and 2, got %.15g", d);
        r->temperature = (float)d;
    }
    if ((rc = get_num(root, "top_p", &d, &present, e))) return rc;
    if (present) {
        /* (float) of a tiny positive double could round to 0, which the
         * sampler refuses: keep the smallest positive float instead. */
        if (!(d > 0 && d <= 1))
            return bad(e, "top_p", NULL,
                       "'top_p' must be greater than 0 and at most 1, got %.15g", d);
        r->top_p = (float)d > 0 ? (float)d : 1e-45f;
    }
    /* top_k is an extension (vLLM, llama.cpp); -1 is their spelling of "off". */
    if ((rc = get_int(root, "top_k", -1, INT32_MAX, &d, &present, e))) return rc;
    if (present) r->top_k = d < 0 ? 0 : (int32_t)d;

    if ((rc = get_int(root, "seed", -9223372036854775808.0, 18446744073709551615.0,
                      &d, &present, e)))
        return rc;
    if (present) {
        /* 2^64 itself passes the <= check (UINT64_MAX rounds up to it as a
         * double) but does not convert: refuse it. */
        if (d >= 18446744073709551616.0)
            return bad(e, "seed", NULL, "'seed' must fit in 64 bits");
        r->has_seed = true;
        r->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    }
    return 0;
}

static int parse_stop(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "stop");
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return bad(e, "stop", NULL, "'stop' must not be empty");
        if (!(r->stop[0] = dup_n(v->valuestring, strlen(v->valuestring)))) return nomem(e);
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return bad(e, "stop", NULL, "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > OAI_MAX_STOP)
        return bad(e, "stop", NULL, "'stop' may hold at most %d strings", OAI_MAX_STOP);
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c) || !c->valuestring[0]) {
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "stop[%zu]", i);
            return bad(e, p, NULL, "'%s' must be a non-empty string", p);
        }
        if (!(r->stop[i] = dup_n(c->valuestring, strlen(c->valuestring)))) return nomem(e);
        r->n_stop = i + 1;
    }
    return 0;
}

static int parse_stream(const cJSON *root, oai_request *r, oai_error *e) {
    int rc = get_bool(root, "stream", &r->stream, e);
    if (rc) return rc;
    const cJSON *so = field(root, "stream_options");
    if (!so) return 0;
    if (!cJSON_IsObject(so))
        return bad(e, "stream_options", NULL, "'stream_options' must be an object");
    if (!r->stream)
        return bad(e, "stream_options", NULL,
                   "'stream_options' is only allowed when 'stream' is true");
    /* include_usage is the only option: another (vLLM's
     * continuous_usage_stats) would be silently ignored otherwise. */
    for (const cJSON *c = so->child; c; c = c->next)
        if (strcmp(c->string, "include_usage")) {
            char p[OAI_ERR_PARAM_MAX];
            snprintf(p, sizeof p, "stream_options.%.40s", c->string);
            return bad(e, p, "unknown_parameter", "Unrecognized request argument supplied: %s", p);
        }
    const cJSON *iu = field(so, "include_usage");
    if (iu && !cJSON_IsBool(iu))
        return bad(e, "stream_options.include_usage", NULL,
                   "'stream_options.include_usage' must be a boolean");
    r->include_usage = cJSON_IsTrue(iu);
    return 0;
}

/* Features tessera does not implement. Each is accepted at the value that
 * means "off" and refused otherwise: answering without them would return
 * something the client did not ask for. A rule names the field, the request
 * kinds that take it, the type it must have and its "off" value; an integer
 * field (hi > 0) is checked by get_int and is off at lo. */
typedef struct off_rule {
    const char *name;
    unsigned kinds;                   /* KIND_* bits */
    double lo, hi;                    /* integer fields: the range, off at lo */
    bool (*typed)(const cJSON *v);    /* other fields: the type; NULL for any */
    const char *type;                 /* what typed accepts, for its message */
    bool (*off)(const cJSON *v);      /* the value that means "off" */
    bool names_value;                 /* refused as an unsupported value, not
                                       * parameter: why follows the number */
    const char *why;
} off_rule;

#define KIND_COMPLETION (1u << OAI_COMPLETION)
#define KIND_CHAT (1u << OAI_CHAT)
#define KIND_ANY (KIND_COMPLETION | KIND_CHAT)

static bool is_string(const cJSON *v) { return cJSON_IsString(v); }
static bool is_empty_string(const cJSON *v) { return cJSON_IsString(v) && !v->valuestring[0]; }
static bool is_array(const cJSON *v) { return cJSON_IsArray(v); }
static bool is_empty_array(const cJSON *v) { return cJSON_IsArray(v) && !v->child; }
static bool never_off(const cJSON *v) { return false; }

static bool is_none_or_auto(const cJSON *v) {
    return cJSON_IsString(v) &&
           (strcmp(v->valuestring, "none") == 0 || strcmp(v->valuestring, "auto") == 0);
}

/* In the order they are checked, which decides the error a request with
 * several of them gets. */
static const off_rule off_rules[] = {
    {.name = "suffix", .kinds = KIND_COMPLETION, .typed = is_string, .type = "a string",
     .off = is_empty_string, .why = "no insertion"},
    {.name = "tools", .kinds = KIND_ANY, .typed = is_array, .type = "an array",
     .off = is_empty_array, .why = "no tool calling"},
    {.name = "tool_choice", .kinds = KIND_ANY, .off = is_none_or_auto,
     .why = "no tool calling (only \"none\" or \"auto\")"},
    {.name = "functions", .kinds = KIND_ANY, .off = is_empty_array,
     .why = "no function calling"},
    {.name = "function_call", .kinds = KIND_ANY, .off = never_off,
     .why = "no function calling"},
};

/* 1 when the request asks for the rule's feature (an integer's value in
 * *d), 0 when the field is absent or off, or the error of a badly typed
 * value. */
static int off_rule_check(const cJSON *root, const off_rule *u, double *d, oai_error *e) {
    if (u->hi > 0) {
        bool present;
        int rc = get_int(root, u->name, u->lo, u->hi, d, &present, e);
        return rc ? rc : present && *d != u->lo;
    }
    const cJSON *v = field(root, u->name);
    if (!v) return 0;
    if (u->typed && !u->typed(v))
        return bad(e, u->name, NULL, "'%s' must be %s", u->name, u->type);
    return !u->off(v);
}

static int parse_unsupported(const cJSON *root, oai_request *r, oai_error *e) {
    for (size_t i = 0; i < sizeof off_rules / sizeof off_rules[0]; i++) {
        const off_rule *u = &off_rules[i];
        double d = 0;
        if (!(u->kinds & (1u << r->kind))) continue;
        int rc = off_rule_check(root, u, &d, e);
        if (rc < 0) return rc;
        if (rc == 0) continue;
        if (u->names_value)
            return bad(e, u->name, C_UNSUPPORTED_VALUE, "'%s' = %.15g is not supported%s",
                       u->name, d, u->why);
        return unsupported(e, u->name, u->why);
    }
    return 0;
}

/* ---- request parsing: choices, logprobs, penalties, extensions ----------- */

/* prompt as a list of several prompts (completions): strings (may be
 * empty) or lists of token ids, into r->inputs, one choice set each. */
static int parse_prompt_list(const cJSON *v, oai_request *r, oai_error *e) {
    int n = cJSON_GetArraySize(v);
    if (n > OAI_MAX_SEQS)
        return bad(e, "prompt", NULL, "'prompt' holds %d prompts; at most %d are allowed", n, OAI_MAX_SEQS);
    if (!(r->inputs = calloc((size_t)n, sizeof *r->inputs))) return nomem(e);
    r->n_inputs = (size_t)n;
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char p[OAI_ERR_PARAM_MAX];
        snprintf(p, sizeof p, "prompt[%zu]", i);
        oai_input *in = &r->inputs[i];
        if (cJSON_IsArray(c)) {
            int rc = parse_token_ids(c, p, &in->tokens, &in->n_tokens, e);
            if (rc) return rc;
            continue;
        }
        if (!cJSON_IsString(c))
            return bad(e, p, NULL, "'%s' must be a string or an array of token ids", p);
        in->len = strlen(c->valuestring);
        if (!(in->text = dup_n(c->valuestring, in->len))) return nomem(e);
    }
    return 0;
}

/* A float field within [lo, hi] (lo excluded when open_lo). */
static int get_float(const cJSON *root, const char *name, double lo, double hi, bool open_lo, float *out,
                     oai_error *e) {
    double d;
    bool present;
    int rc = get_num(root, name, &d, &present, e);
    if (rc || !present) return rc;
    if (!(open_lo ? d > lo : d >= lo) || d > hi)
        return bad(e, name, NULL, "'%s' must be %s %.15g and at most %.15g, got %.15g", name,
                   open_lo ? "greater than" : "at least", lo, hi, d);
    *out = (float)d;
    return 0;
}

/* Penalties and min_p: OpenAI's presence/frequency over the generated
 * tokens, vLLM's repetition over prompt and output, and min_p. */
static int parse_penalties(const cJSON *root, oai_request *r, oai_error *e) {
    int rc;
    if ((rc = get_float(root, "presence_penalty", -2, 2, false, &r->presence_penalty, e))) return rc;
    if ((rc = get_float(root, "frequency_penalty", -2, 2, false, &r->frequency_penalty, e))) return rc;
    if ((rc = get_float(root, "repetition_penalty", 0, 100, true, &r->repetition_penalty, e))) return rc;
    return get_float(root, "min_p", 0, 1, false, &r->min_p, e);
}

/* logit_bias: {"<token id>": bias in [-100, 100]} (OpenAI's shape: the ids
 * are the object's keys). The vocabulary's range is the server's check. */
static int parse_logit_bias(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return bad(e, "logit_bias", NULL, "'logit_bias' must be an object");
    int n = cJSON_GetArraySize(v);
    if (n > SMP_MAX_BIAS)
        return bad(e, "logit_bias", NULL, "'logit_bias' may hold at most %d entries", SMP_MAX_BIAS);
    if (!n) return 0;
    if (!(r->logit_bias = calloc((size_t)n, sizeof *r->logit_bias))) return nomem(e);
    for (const cJSON *c = v->child; c; c = c->next) {
        const char *k = c->string;
        /* Canonical decimal only: "07" or " 7" would be token 7 again,
         * and two spellings of one id would stack their biases unseen. */
        size_t len = strspn(k, "0123456789");
        long long id = len && len <= 10 && !k[len] && (k[0] != '0' || len == 1) ? strtoll(k, NULL, 10) : -1;
        char p[OAI_ERR_PARAM_MAX];
        snprintf(p, sizeof p, "logit_bias.%.40s", k);
        if (id < 0 || id > INT32_MAX)
            return bad(e, p, NULL, "the keys of 'logit_bias' must be token ids (0 to 2147483647), got \"%.40s\"", k);
        if (!cJSON_IsNumber(c) || !(c->valuedouble >= -100 && c->valuedouble <= 100))
            return bad(e, p, NULL, "'%s' must be a number from -100 to 100", p);
        r->logit_bias[r->n_logit_bias++] = (smp_bias){(int32_t)id, (float)c->valuedouble};
    }
    return 0;
}

/* n, and for completions best_of (>= n) and echo. Every sequence is a
 * sequence the engine runs, so their product with the prompts is capped. */
static int parse_choices(const cJSON *root, oai_request *r, oai_error *e) {
    double d = 1;
    bool has;
    int rc = get_int(root, "n", 1, OAI_MAX_N, &d, &has, e);
    if (rc) return rc;
    r->n = (uint32_t)d;
    if (r->kind == OAI_COMPLETION) {
        if ((rc = get_int(root, "best_of", 1, OAI_MAX_N, &d, &has, e))) return rc;
        if (has && d < r->n)
            return bad(e, "best_of", NULL, "'best_of' (%.15g) must be at least 'n' (%u)", d, r->n);
        r->best_of = has ? (uint32_t)d : 0;
        if (r->best_of > r->n && r->stream)
            return bad(e, "best_of", C_UNSUPPORTED_VALUE,
                       "'best_of' greater than 'n' cannot be streamed: the best are known only at the end");
        if ((rc = get_bool(root, "echo", &r->echo, e))) return rc;
    }
    size_t prompts = r->n_inputs ? r->n_inputs : 1;
    size_t seqs = prompts * (r->best_of > r->n ? r->best_of : r->n);
    if (seqs > OAI_MAX_SEQS)
        return bad(e, r->best_of > r->n ? "best_of" : "n", NULL,
                   "this request asks for %zu sequences (prompts x %s); at most %d are allowed", seqs,
                   r->best_of > r->n ? "best_of" : "n", OAI_MAX_SEQS);
    return 0;
}

/* logprobs: an integer 0..20 for completions (false reads as none); for
 * chat a boolean, with top_logprobs 0..20 alongside it. */
static int parse_logprobs(const cJSON *root, oai_request *r, oai_error *e) {
    double d = 0;
    bool has;
    int rc;
    const cJSON *v = field(root, "logprobs");
    if (r->kind == OAI_COMPLETION) {
        if (cJSON_IsFalse(v)) return 0;
        if ((rc = get_int(root, "logprobs", 0, OAI_MAX_LOGPROBS, &d, &has, e))) return rc;
        if (has) r->logprobs = (int32_t)d;
        return 0;
    }
    bool on = false;
    if ((rc = get_bool(root, "logprobs", &on, e))) return rc;
    if ((rc = get_int(root, "top_logprobs", 0, OAI_MAX_LOGPROBS, &d, &has, e))) return rc;
    if (has && d > 0 && !on)
        return bad(e, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs' set to true");
    if (on) r->logprobs = has ? (int32_t)d : 0;
    return 0;
}

/* vLLM's extensions tessera implements. */
static int parse_extensions(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "stop_token_ids");
    int rc;
    if (v) {
        if (!cJSON_IsArray(v)) return bad(e, "stop_token_ids", NULL, "'stop_token_ids' must be an array of token ids");
        if (cJSON_GetArraySize(v) > SMP_MAX_STOP)
            return bad(e, "stop_token_ids", NULL, "'stop_token_ids' may hold at most %d ids", SMP_MAX_STOP);
        if (v->child && (rc = parse_token_ids(v, "stop_token_ids", &r->stop_token_ids, &r->n_stop_token_ids, e)))
            return rc;
    }
    double d = 0;
    bool has;
    if ((rc = get_int(root, "min_tokens", 0, OAI_MAX_TOKENS_CAP, &d, &has, e))) return rc;
    r->min_tokens = (uint32_t)d;
    if (r->max_tokens && r->min_tokens > r->max_tokens)
        return bad(e, "min_tokens", NULL, "'min_tokens' (%u) must not exceed 'max_tokens' (%u)", r->min_tokens,
                   r->max_tokens);
    if ((rc = get_bool(root, "ignore_eos", &r->ignore_eos, e))) return rc;
    if (r->kind == OAI_CHAT && (rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e)))
        return rc;
    return 0;
}

/* ---- structured output ---- */

/* Several ways to ask for the same thing; one request may use one. */
static int set_guided(oai_request *r, oai_guided_kind kind, const char *field_name, oai_error *e) {
    if (r->guided.kind != OAI_GUIDED_NONE)
        return bad(e, field_name, NULL, "'%s' and '%s' both constrain the output; send one of them", field_name,
                   r->guided.field);
    r->guided.kind = kind;
    r->guided.field = field_name;
    return 0;
}

/* A schema given as an object (or, for guided_json, as JSON text), kept as
 * compact JSON text. */
static int keep_schema(const cJSON *s, const char *name, oai_request *r, oai_error *e) {
    if (cJSON_IsString(s)) {
        cJSON *p = cJSON_ParseWithOpts(s->valuestring, NULL, 1);
        bool ok = p && (cJSON_IsObject(p) || cJSON_IsBool(p));
        cJSON_Delete(p);
        if (!ok) return bad(e, name, NULL, "'%s' must be a JSON schema (an object, or its JSON text)", name);
        return (r->guided.spec = dup_n(s->valuestring, strlen(s->valuestring))) ? 0 : nomem(e);
    }
    if (!cJSON_IsObject(s) && !cJSON_IsBool(s))
        return bad(e, name, NULL, "'%s' must be a JSON schema (an object)", name);
    return (r->guided.spec = cJSON_PrintUnformatted(s)) ? 0 : nomem(e);
}

/* response_format: {"type": "text" | "json_object" | "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}}. */
static int parse_response_format(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "response_format");
    if (!v) return 0;
    const cJSON *t = cJSON_IsObject(v) ? field(v, "type") : NULL;
    if (!cJSON_IsString(t))
        return bad(e, "response_format", NULL, "'response_format' must be an object with a string 'type'");
    if (!strcmp(t->valuestring, "text")) return 0;
    if (!strcmp(t->valuestring, "json_object")) return set_guided(r, OAI_GUIDED_JSON_OBJECT, "response_format", e);
    if (strcmp(t->valuestring, "json_schema"))
        return bad(e, "response_format.type", C_UNSUPPORTED_VALUE,
                   "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    const cJSON *js = field(v, "json_schema");
    if (!cJSON_IsObject(js))
        return bad(e, "response_format.json_schema", NULL, "'response_format.json_schema' must be an object");
    const cJSON *name = field(js, "name"), *strict = field(js, "strict"), *schema = field(js, "schema");
    if (name && !cJSON_IsString(name))
        return bad(e, "response_format.json_schema.name", NULL, "'response_format.json_schema.name' must be a string");
    if (strict && !cJSON_IsBool(strict))
        return bad(e, "response_format.json_schema.strict", NULL,
                   "'response_format.json_schema.strict' must be a boolean");
    int rc = set_guided(r, OAI_GUIDED_JSON_SCHEMA, "response_format", e);
    if (rc) return rc;
    if (!schema) return (r->guided.spec = dup_n("{}", 2)) ? 0 : nomem(e); /* any JSON, as OpenAI reads it */
    return keep_schema(schema, "response_format.json_schema.schema", r, e);
}

/* vLLM's guided_json, guided_regex and guided_choice. */
static int parse_guided(const cJSON *root, oai_request *r, oai_error *e) {
    int rc = parse_response_format(root, r, e);
    if (rc) return rc;
    const cJSON *v;
    if ((v = field(root, "guided_json"))) {
        if ((rc = set_guided(r, OAI_GUIDED_JSON_SCHEMA, "guided_json", e))) return rc;
        if ((rc = keep_schema(v, "guided_json", r, e))) return rc;
    }
    if ((v = field(root, "guided_regex"))) {
        if (!cJSON_IsString(v) || !v->valuestring[0])
            return bad(e, "guided_regex", NULL, "'guided_regex' must be a non-empty string");
        if ((rc = set_guided(r, OAI_GUIDED_REGEX, "guided_regex", e))) return rc;
        if (!(r->guided.spec = dup_n(v->valuestring, strlen(v->valuestring)))) return nomem(e);
    }
    if ((v = field(root, "guided_choice"))) {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
        if (n < 1 || n > OAI_MAX_CHOICES)
            return bad(e, "guided_choice", NULL, "'guided_choice' must be an array of 1 to %d strings", OAI_MAX_CHOICES);
        if ((rc = set_guided(r, OAI_GUIDED_CHOICE, "guided_choice", e))) return rc;
        if (!(r->guided.choices = calloc((size_t)n, sizeof(char *)))) return nomem(e);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (!cJSON_IsString(c) || !c->valuestring[0])
                return bad(e, "guided_choice", NULL, "'guided_choice' must hold non-empty strings");
            if (!(r->guided.choices[r->guided.n_choices++] = dup_n(c->valuestring, strlen(c->valuestring))))
                return nomem(e);
        }
    }
    return 0;
}

/* ---- unknown fields ---- */

/* Every field a completion or chat request may carry. A field that is not
 * here is refused with a 400 naming it, as OpenAI refuses an unrecognised
 * argument: a silently ignored field (a guided_json the server does not
 * know) would make a client believe something that is not so. The fields
 * that change nothing are documented in oai.h (OAI_NOOP_FIELDS). */
static const char *const known_completion[] = {
    "model", "prompt", "suffix", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
    "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "best_of", "logit_bias",
    "user", "seed", "top_k", "min_p", "repetition_penalty", "stop_token_ids", "min_tokens", "ignore_eos",
    "cache_salt", "parse_special_tokens", "response_format", "guided_json", "guided_regex", "guided_choice",
    "metadata", "store", "service_tier",
    /* Refused unless off (off_rules), with a clearer message than "unknown". */
    "tools", "tool_choice", "functions", "function_call", NULL,
};
static const char *const known_chat[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
    "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
    "user", "seed", "response_format", "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls",
    "top_k", "min_p", "repetition_penalty", "stop_token_ids", "min_tokens", "ignore_eos", "cache_salt",
    "guided_json", "guided_regex", "guided_choice", "add_generation_prompt", "metadata", "store", "service_tier",
    NULL,
};

static int check_unknown(const cJSON *root, oai_kind kind, oai_error *e) {
    const char *const *known = kind == OAI_CHAT ? known_chat : known_completion;
    for (const cJSON *c = root->child; c; c = c->next) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], c->string)) i++;
        if (!known[i])
            return bad(e, c->string, "unknown_parameter", "Unrecognized request argument supplied: %s", c->string);
    }
    /* The documented no-ops still have to be well-formed. */
    const cJSON *v;
    if ((v = field(root, "metadata")) && !cJSON_IsObject(v))
        return bad(e, "metadata", NULL, "'metadata' must be an object");
    if ((v = field(root, "store")) && !cJSON_IsBool(v)) return bad(e, "store", NULL, "'store' must be a boolean");
    if ((v = field(root, "service_tier")) && !cJSON_IsString(v))
        return bad(e, "service_tier", NULL, "'service_tier' must be a string");
    if ((v = field(root, "parallel_tool_calls")) && !cJSON_IsBool(v))
        return bad(e, "parallel_tool_calls", NULL, "'parallel_tool_calls' must be a boolean");
    return 0;
}

/* Everything of this section, in the order its errors take precedence. */
static int parse_params(const cJSON *root, oai_request *r, oai_error *e) {
    int rc;
    if ((rc = check_unknown(root, r->kind, e))) return rc;
    if ((rc = parse_penalties(root, r, e))) return rc;
    if ((rc = parse_logit_bias(root, r, e))) return rc;
    if ((rc = parse_choices(root, r, e))) return rc;
    if ((rc = parse_logprobs(root, r, e))) return rc;
    if ((rc = parse_extensions(root, r, e))) return rc;
    return parse_guided(root, r, e);
}

/* ---- request parsing: embeddings, tokenize, detokenize -------------------- */

/* One element of an embeddings input list: a non-empty string or a
 * non-empty list of token ids. */
static int parse_input_item(const cJSON *v, const char *name, oai_input *in, oai_error *e) {
    if (cJSON_IsArray(v)) return parse_token_ids(v, name, &in->tokens, &in->n_tokens, e);
    if (!cJSON_IsString(v))
        return bad(e, name, NULL, "'%s' must be a string or an array of token ids", name);
    if (!v->valuestring[0]) return bad(e, name, NULL, "'%s' must not be an empty string", name);
    in->len = strlen(v->valuestring);
    return (in->text = dup_n(v->valuestring, in->len)) ? 0 : nomem(e);
}

/* input: a string, token ids, or a list of either. */
static int parse_inputs(const cJSON *root, oai_request *r, oai_error *e) {
    const cJSON *v = field(root, "input");
    if (!v) return bad(e, "input", NULL, "'input' is required");
    bool one = cJSON_IsString(v) || (cJSON_IsArray(v) && cJSON_IsNumber(v->child));
    int n = one ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0)
        return bad(e, "input", NULL, "'input' must be a string, an array of strings, an array of "
                   "token ids, or an array of arrays of token ids");
    if (n == 0) return bad(e, "input", NULL, "'input' must not be empty");
    if (n > OAI_MAX_INPUTS)
        return bad(e, "input", NULL, "'input' holds %d items; at most %d are allowed", n, OAI_MAX_INPUTS);
    if (!(r->inputs = calloc((size_t)n, sizeof *r->inputs))) return nomem(e);
    r->n_inputs = (size_t)n;
    if (one) return parse_input_item(v, "input", &r->inputs[0], e);
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        char p[OAI_ERR_PARAM_MAX];
        snprintf(p, sizeof p, "input[%zu]", i);
        int rc = parse_input_item(c, p, &r->inputs[i], e);
        if (rc) return rc;
    }
    return 0;
}

static int parse_embeddings(const cJSON *root, oai_request *r, oai_error *e) {
    int rc;
    if ((rc = parse_model(root, r, e)) || (rc = parse_inputs(root, r, e))) return rc;
    const cJSON *f = field(root, "encoding_format");
    if (f) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
            return bad(e, "encoding_format", NULL, "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = strcmp(f->valuestring, "base64") == 0;
    }
    double d = 0;
    bool has;
    if ((rc = get_int(root, "dimensions", 1, 1 << 20, &d, &has, e))) return rc;
    r->dimensions = has ? (uint32_t)d : 0;
    return get_str(root, "user", &r->user, NULL, e);
}

/* model is optional for tokenize and detokenize (vLLM's shape). */
static int parse_model_opt(const cJSON *root, oai_request *r, oai_error *e) {
    return field(root, "model") ? parse_model(root, r, e) : 0;
}

static int parse_tokenize(const cJSON *root, oai_request *r, oai_error *e) {
    int rc = parse_model_opt(root, r, e);
    if (rc) return rc;
    bool has_p = field(root, "prompt") != NULL, has_m = field(root, "messages") != NULL;
    if (has_p == has_m) return bad(e, has_p ? "messages" : "prompt", NULL, "send either 'prompt' or 'messages'");
    r->has_messages = has_m;
    if ((rc = has_m ? parse_messages(root, r, e) : parse_prompt(root, r, e))) return rc;
    if ((rc = get_bool(root, "add_special_tokens", &r->add_special_tokens, e))) return rc;
    if ((rc = get_bool(root, "parse_special_tokens", &r->parse_special, e))) return rc;
    return get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e);
}

static int parse_detokenize(const cJSON *root, oai_request *r, oai_error *e) {
    int rc = parse_model_opt(root, r, e);
    if (rc) return rc;
    const cJSON *v = field(root, "tokens");
    if (!v) return bad(e, "tokens", NULL, "'tokens' is required");
    if (!cJSON_IsArray(v)) return bad(e, "tokens", NULL, "'tokens' must be an array of token ids");
    return parse_token_ids(v, "tokens", &r->prompt_tokens, &r->n_prompt_tokens, e);
}

static int parse_other(const cJSON *root, oai_request *r, oai_error *e) {
    switch (r->kind) {
    case OAI_EMBEDDINGS: return parse_embeddings(root, r, e);
    case OAI_TOKENIZE: return parse_tokenize(root, r, e);
    default: return parse_detokenize(root, r, e);
    }
}

/* ---- request parsing: entry points --------------------------------------- */

/* Fills out (defaults already set); the caller empties it on failure. */
static int parse_body(oai_kind kind, const char *body, size_t len, oai_request *out,
                      oai_error *err) {
    if (len == 0 || !body)
        return bad(err, NULL, NULL, "the request body is empty; expected a JSON object");
    int rc = scan_raw(body, len, err);
    if (rc) return rc;

    /* The parse-end pointer, not cJSON_GetErrorPtr: that one is a global,
     * and HTTP threads parse concurrently. cJSON also answers NULL when it
     * runs out of memory, which is then reported as malformed: rare enough
     * to accept, and still a clean refusal. */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return bad(err, NULL, NULL,
                   "We could not parse the JSON body of your request: malformed JSON at "
                   "byte offset %zu", at);
    }
    size_t at = (size_t)(end - body);
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' ||
                        body[at] == '\r'))
        at++;
    if (at < len) {
        rc = bad(err, NULL, NULL,
                 "We could not parse the JSON body of your request: unexpected data after "
                 "the JSON value at byte offset %zu", at);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = bad(err, NULL, NULL, "the request body must be a JSON object");
        goto out;
    }

    char path[128] = "";
    if ((rc = check_tree(root, path, 0, sizeof path, err))) goto out;
    if (kind >= OAI_EMBEDDINGS) {
        rc = parse_other(root, out, err);
        goto out;
    }
    if ((rc = parse_model(root, out, err))) goto out;
    rc = kind == OAI_CHAT ? parse_messages(root, out, err) : parse_prompt(root, out, err);
    if (rc) goto out;
    if ((rc = parse_max_tokens(root, out, err))) goto out;
    if ((rc = parse_sampling(root, out, err))) goto out;
    if ((rc = parse_stop(root, out, err))) goto out;
    if ((rc = parse_stream(root, out, err))) goto out;
    if ((rc = get_str(root, "user", &out->user, NULL, err))) goto out;
    if ((rc = get_str(root, "cache_salt", &out->cache_salt, NULL, err))) goto out;
    if (kind == OAI_COMPLETION && (rc = get_bool(root, "parse_special_tokens", &out->parse_special, err))) goto out;
    if ((rc = parse_params(root, out, err))) goto out;
    rc = parse_unsupported(root, out, err);
out:
    cJSON_Delete(root);
    return rc;
}

static int parse(oai_kind kind, const char *body, size_t len, oai_request *out,
                 oai_error *err) {
    oai_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    if (!out) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "no request to fill");
        return TS_ERR_INVAL;
    }
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->temperature = 1.0f;
    out->top_p = 1.0f;
    out->add_special_tokens = true;
    out->add_generation_prompt = true;
    out->n = 1;
    out->logprobs = -1;
    out->repetition_penalty = 1.0f;
    int rc = parse_body(kind, body, len, out, err);
    if (rc) oai_request_free(out);
    return rc;
}

int oai_parse_completion(const char *body, size_t len, oai_request *out, oai_error *err) {
    return parse(OAI_COMPLETION, body, len, out, err);
}

int oai_parse_chat(const char *body, size_t len, oai_request *out, oai_error *err) {
    return parse(OAI_CHAT, body, len, out, err);
}

int oai_parse_embeddings(const char *body, size_t len, oai_request *out, oai_error *err) {
    return parse(OAI_EMBEDDINGS, body, len, out, err);
}

int oai_parse_tokenize(const char *body, size_t len, oai_request *out, oai_error *err) {
    return parse(OAI_TOKENIZE, body, len, out, err);
}

int oai_parse_detokenize(const char *body, size_t len, oai_request *out, oai_error *err) {
    return parse(OAI_DETOKENIZE, body, len, out, err);
}

void oai_request_free(oai_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_tokens);
    for (size_t i = 0; i < r->n_messages; i++) free(r->messages[i].content);
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->user);
    free(r->cache_salt);
    for (size_t i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].tokens);
    }
    free(r->inputs);
    free(r->logit_bias);
    free(r->stop_token_ids);
    free(r->guided.spec);
    for (size_t i = 0; i < r->guided.n_choices; i++) free(r->guided.choices[i]);
    free(r->guided.choices);
    memset(r, 0, sizeof *r);
}

/* ---- responses ----------------------------------------------------------- */

static const char *finish_str(oai_finish f) {
    switch (f) {
    case OAI_FINISH_STOP: return "\"stop\"";
    case OAI_FINISH_LENGTH: return "\"length\"";
    default: return "null";
    }
}

/* {"id":...,"object":...,"created":...,"model":..., -- the shared opening. */
static void put_head(strbuf *b, const oai_head *h, const char *object) {
    const char *prefix = h->kind == OAI_CHAT ? "chatcmpl" : "cmpl";
    char id[2 * OAI_ID_BYTES + 1];
    auth_hex_encode(h->id, OAI_ID_BYTES, id);
    strbuf_printf(b, "{\"id\":\"%s-%s\",\"object\":\"%s\",\"created\":%" PRId64
                  ",\"model\":", prefix, id, object, h->created);
    put_jcstr(b, h->model);
}

static void put_usage(strbuf *b, const oai_usage *u) {
    oai_usage zero = {0};
    if (!u) u = &zero;
    strbuf_printf(b, "\"usage\":{\"prompt_tokens\":%" PRIu32 ",\"completion_tokens\":%" PRIu32
                  ",\"total_tokens\":%" PRIu64 "}", u->prompt_tokens, u->completion_tokens,
                  (uint64_t)u->prompt_tokens + u->completion_tokens);
}

/* A text_completion object up to its finish_reason value: the same in the
 * whole answer and in each streamed chunk. */
static void put_text_choice(strbuf *b, const oai_head *h, const char *text, size_t len) {
    put_head(b, h, "text_completion");
    strbuf_puts(b, ",\"choices\":[{\"index\":0,\"text\":");
    put_jstr(b, text, len);
    strbuf_puts(b, ",\"logprobs\":null,\"finish_reason\":");
}

char *oai_response_json(const oai_head *h, const char *text, size_t len,
                        oai_finish finish, const oai_usage *usage) {
    if (!h || (!text && len)) return NULL;
    strbuf b = STRBUF_INIT;
    if (h->kind == OAI_CHAT) {
        put_head(&b, h, "chat.completion");
        strbuf_puts(&b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        put_jstr(&b, text, len);
        strbuf_puts(&b, "},\"logprobs\":null,\"finish_reason\":");
    } else {
        put_text_choice(&b, h, text, len);
    }
    strbuf_puts(&b, finish_str(finish));
    strbuf_puts(&b, "}],");
    put_usage(&b, usage);
    strbuf_puts(&b, "}");
    return strbuf_steal(&b, NULL);
}

char *oai_chunk_sse(const oai_head *h, bool first, const char *text, size_t len,
                    oai_finish finish) {
    if (!h || (!text && len)) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "data: ");
    if (h->kind == OAI_CHAT) {
        put_head(&b, h, "chat.completion.chunk");
        strbuf_puts(&b, ",\"choices\":[{\"index\":0,\"delta\":{");
        if (first) strbuf_puts(&b, "\"role\":\"assistant\"");
        if (text) {
            if (first) strbuf_puts(&b, ",");
            strbuf_puts(&b, "\"content\":");
            put_jstr(&b, text, len);
        }
        strbuf_puts(&b, "},\"logprobs\":null,\"finish_reason\":");
    } else {
        put_text_choice(&b, h, text, len);
    }
    strbuf_puts(&b, finish_str(finish));
    strbuf_puts(&b, "}]}\n\n");
    return strbuf_steal(&b, NULL);
}

char *oai_usage_sse(const oai_head *h, const oai_usage *usage) {
    if (!h) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "data: ");
    put_head(&b, h, h->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    strbuf_puts(&b, ",\"choices\":[],");
    put_usage(&b, usage);
    strbuf_puts(&b, "}\n\n");
    return strbuf_steal(&b, NULL);
}

char *oai_models_json(const char *const *ids, size_t n, int64_t created) {
    if (n && !ids) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_puts(&b, i ? ",{\"id\":" : "{\"id\":");
        put_jcstr(&b, ids[i]);
        strbuf_puts(&b, ",\"object\":\"model\",\"created\":");
        strbuf_printf(&b, "%" PRId64, created);
        strbuf_puts(&b, ",\"owned_by\":\"tessera\"}");
    }
    strbuf_puts(&b, "]}");
    return strbuf_steal(&b, NULL);
}

const char *oai_role_name(oai_role r) {
    switch (r) {
    case OAI_ROLE_SYSTEM: return "system";
    case OAI_ROLE_USER: return "user";
    case OAI_ROLE_ASSISTANT: return "assistant";
    default: return "tool";
    }
}

char *oai_models_info_json(const oai_model_info *m, size_t n, int64_t created) {
    if (n && !m) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_puts(&b, i ? ",{\"id\":" : "{\"id\":");
        put_jcstr(&b, m[i].id);
        strbuf_printf(&b, ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":\"tessera\",\"kind\":",
                      created);
        put_jcstr(&b, m[i].kind);
        strbuf_printf(&b, ",\"max_model_len\":%" PRId32 ",\"chat_template\":", m[i].max_model_len);
        if (m[i].chat_template) put_jcstr(&b, m[i].chat_template);
        else strbuf_puts(&b, "null");
        strbuf_puts(&b, "}");
    }
    strbuf_puts(&b, "]}");
    return strbuf_steal(&b, NULL);
}

/* One vector as base64 of its little-endian float32 bytes. */
static void put_b64_floats(strbuf *b, const float *v, size_t dim) {
    unsigned char *raw = malloc(dim * 4 + 1);
    char *enc = malloc(4 * ((dim * 4 + 2) / 3) + 1);
    if (!raw || !enc) {
        free(raw);
        free(enc);
        b->failed = 1;      /* strbuf's sticky failure: the answer becomes NULL */
        return;
    }
    for (size_t i = 0; i < dim; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) raw[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    int n = EVP_EncodeBlock((unsigned char *)enc, raw, (int)(dim * 4));
    strbuf_puts(b, "\"");
    strbuf_put(b, enc, n > 0 ? (size_t)n : 0);
    strbuf_puts(b, "\"");
    free(raw);
    free(enc);
}

/* %.9g round-trips a float; a non-finite value (which the encoder's
 * normalisation never produces) is written as 0 to keep the JSON valid. */
static void put_float_list(strbuf *b, const float *v, size_t dim) {
    strbuf_puts(b, "[");
    for (size_t i = 0; i < dim; i++) strbuf_printf(b, i ? ",%.9g" : "%.9g", isfinite(v[i]) ? (double)v[i] : 0.0);
    strbuf_puts(b, "]");
}

char *oai_embeddings_json(const char *model, const float *emb, size_t n, size_t dim, bool base64,
                          uint64_t prompt_tokens) {
    if (n && !emb) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        if (base64) put_b64_floats(&b, emb + i * dim, dim);
        else put_float_list(&b, emb + i * dim, dim);
        strbuf_puts(&b, "}");
    }
    strbuf_puts(&b, "],\"model\":");
    put_jcstr(&b, model);
    strbuf_printf(&b, ",\"usage\":{\"prompt_tokens\":%" PRIu64 ",\"total_tokens\":%" PRIu64 "}}", prompt_tokens,
                  prompt_tokens);
    return strbuf_steal(&b, NULL);
}

char *oai_tokenize_json(const int32_t *ids, size_t n, int32_t max_model_len) {
    if (n && !ids) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_printf(&b, "{\"count\":%zu,\"max_model_len\":%" PRId32 ",\"tokens\":[", n, max_model_len);
    for (size_t i = 0; i < n; i++) strbuf_printf(&b, i ? ",%" PRId32 : "%" PRId32, ids[i]);
    strbuf_puts(&b, "]}");
    return strbuf_steal(&b, NULL);
}

char *oai_detokenize_json(const char *text, size_t len) {
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"prompt\":");
    put_jstr(&b, text, len);
    strbuf_puts(&b, "}");
    return strbuf_steal(&b, NULL);
}

/* ---- responses with choices and logprobs ---------------------------------- */

/* A logprob as JSON: NaN (no context: a prompt's first token) is null, and
 * -inf, which JSON cannot write, is -9999 as OpenAI and vLLM write it. */
static void put_lp(strbuf *b, float lp) {
    if (isnan(lp)) strbuf_puts(b, "null");
    else if (isinf(lp) || lp < -9999.0f) strbuf_puts(b, "-9999.0");
    else strbuf_printf(b, "%.9g", (double)lp);
}

/* A token's text through the caller's callback. */
static const char *piece(const oai_pieces *p, int32_t id, char *buf, size_t cap, size_t *len) {
    *len = 0;
    const char *s = p && p->text ? p->text(p->ctx, id, buf, cap, len) : NULL;
    if (!s) *len = 0;
    return s ? s : "";
}

/* Chat: {"token":..., "logprob":..., "bytes":[...]} without the closing brace. */
static void put_chat_token(strbuf *b, const char *s, size_t n, float lp) {
    strbuf_puts(b, "{\"token\":");
    put_jstr(b, s, n);
    strbuf_puts(b, ",\"logprob\":");
    put_lp(b, lp);
    strbuf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) strbuf_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)s[i]);
    strbuf_puts(b, "]");
}

/* {"content":[{token, logprob, bytes, top_logprobs:[...]}...]} */
static void put_chat_logprobs(strbuf *b, const oai_choice *c, const oai_pieces *p) {
    char buf[OAI_PIECE_MAX];
    size_t n;
    strbuf_puts(b, "{\"content\":[");
    for (size_t i = 0; i < c->n_lp; i++) {
        const char *s = piece(p, c->ids[i], buf, sizeof buf, &n);
        if (i) strbuf_puts(b, ",");
        put_chat_token(b, s, n, c->lps[i].logprob);
        strbuf_puts(b, ",\"top_logprobs\":[");
        for (int32_t k = 0; k < c->lps[i].n_top; k++) {
            const char *t = piece(p, c->lps[i].top_id[k], buf, sizeof buf, &n);
            if (k) strbuf_puts(b, ",");
            put_chat_token(b, t, n, c->lps[i].top_lp[k]);
            strbuf_puts(b, "}");
        }
        strbuf_puts(b, "]}");
    }
    strbuf_puts(b, "]}");
}

/* Completions: {"tokens":[...], "token_logprobs":[...], "top_logprobs":
 * [{text: logprob}...], "text_offset":[...]}. A position without context
 * has null for both its logprob and its alternatives. Two alternatives
 * with the same text would repeat a key: the later (less likely) one is
 * left out. text_offset counts the token texts' bytes from *c->text_offset
 * (0 when NULL), which it advances. */
static void put_text_logprobs(strbuf *b, const oai_choice *c, const oai_pieces *p) {
    char buf[OAI_PIECE_MAX], buf2[OAI_PIECE_MAX];
    size_t n;
    strbuf_puts(b, "{\"tokens\":[");
    for (size_t i = 0; i < c->n_lp; i++) {
        const char *s = piece(p, c->ids[i], buf, sizeof buf, &n);
        if (i) strbuf_puts(b, ",");
        put_jstr(b, s, n);
    }
    strbuf_puts(b, "],\"token_logprobs\":[");
    for (size_t i = 0; i < c->n_lp; i++) {
        if (i) strbuf_puts(b, ",");
        put_lp(b, c->lps[i].logprob);
    }
    strbuf_puts(b, "],\"top_logprobs\":[");
    for (size_t i = 0; i < c->n_lp; i++) {
        const smp_lp *l = &c->lps[i];
        if (i) strbuf_puts(b, ",");
        if (isnan(l->logprob)) {
            strbuf_puts(b, "null");
            continue;
        }
        strbuf_puts(b, "{");
        for (int32_t k = 0; k < l->n_top; k++) {
            const char *s = piece(p, l->top_id[k], buf, sizeof buf, &n);
            int dup = 0;
            for (int32_t j = 0; j < k && !dup; j++) {
                size_t m;
                const char *t = piece(p, l->top_id[j], buf2, sizeof buf2, &m);
                dup = m == n && memcmp(s, t, n) == 0;
            }
            if (dup) continue;
            if (b->len && b->p[b->len - 1] != '{') strbuf_puts(b, ",");
            put_jstr(b, s, n);
            strbuf_puts(b, ":");
            put_lp(b, l->top_lp[k]);
        }
        strbuf_puts(b, "}");
    }
    strbuf_puts(b, "],\"text_offset\":[");
    size_t off = c->text_offset ? *c->text_offset : 0;
    for (size_t i = 0; i < c->n_lp; i++) {
        piece(p, c->ids[i], buf, sizeof buf, &n);
        strbuf_printf(b, i ? ",%zu" : "%zu", off);
        off += n;
    }
    if (c->text_offset) *c->text_offset = off;
    strbuf_puts(b, "]}");
}

static void put_choice_logprobs(strbuf *b, oai_kind kind, const oai_choice *c, const oai_pieces *p) {
    strbuf_puts(b, ",\"logprobs\":");
    if (!c->has_logprobs) strbuf_puts(b, "null");
    else if (kind == OAI_CHAT) put_chat_logprobs(b, c, p);
    else put_text_logprobs(b, c, p);
}

static bool choice_ok(const oai_choice *c) {
    return (c->text || !c->len) && (!c->has_logprobs || !c->n_lp || (c->ids && c->lps));
}

char *oai_choices_json(const oai_head *h, const oai_choice *c, size_t n, const oai_usage *usage,
                       const oai_pieces *p) {
    if (!h || (n && !c)) return NULL;
    for (size_t i = 0; i < n; i++)
        if (!choice_ok(&c[i])) return NULL;
    strbuf b = STRBUF_INIT;
    put_head(&b, h, h->kind == OAI_CHAT ? "chat.completion" : "text_completion");
    strbuf_puts(&b, ",\"choices\":[");
    for (size_t i = 0; i < n; i++) {
        strbuf_printf(&b, "%s{\"index\":%" PRIu32 ",", i ? "," : "", c[i].index);
        if (h->kind == OAI_CHAT) {
            strbuf_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
            put_jstr(&b, c[i].text, c[i].len);
            strbuf_puts(&b, "}");
        } else {
            strbuf_puts(&b, "\"text\":");
            put_jstr(&b, c[i].text, c[i].len);
        }
        put_choice_logprobs(&b, h->kind, &c[i], p);
        strbuf_puts(&b, ",\"finish_reason\":");
        strbuf_puts(&b, finish_str(c[i].finish));
        strbuf_puts(&b, "}");
    }
    strbuf_puts(&b, "],");
    put_usage(&b, usage);
    strbuf_puts(&b, "}");
    return strbuf_steal(&b, NULL);
}

char *oai_choice_sse(const oai_head *h, const oai_choice *c, const oai_pieces *p) {
    if (!h || !c || !choice_ok(c)) return NULL;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "data: ");
    put_head(&b, h, h->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    strbuf_printf(&b, ",\"choices\":[{\"index\":%" PRIu32 ",", c->index);
    if (h->kind == OAI_CHAT) {
        strbuf_puts(&b, "\"delta\":{");
        if (c->first) strbuf_puts(&b, "\"role\":\"assistant\"");
        if (c->text) {
            if (c->first) strbuf_puts(&b, ",");
            strbuf_puts(&b, "\"content\":");
            put_jstr(&b, c->text, c->len);
        }
        strbuf_puts(&b, "}");
    } else {
        strbuf_puts(&b, "\"text\":");
        put_jstr(&b, c->text, c->len);
    }
    put_choice_logprobs(&b, h->kind, c, p);
    strbuf_puts(&b, ",\"finish_reason\":");
    strbuf_puts(&b, finish_str(c->finish));
    strbuf_puts(&b, "}]}\n\n");
    return strbuf_steal(&b, NULL);
}
