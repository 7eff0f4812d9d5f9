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

/* A penalty-like number that tessera only supports at its neutral value. */
static int only_neutral(const cJSON *obj, const char *name, double lo, double hi,
                        double neutral, oai_error *e) {
    double d = neutral;
    bool present;
    int rc = get_num(obj, name, &d, &present, e);
    if (rc || !present) return rc;
    if (d < lo || d > hi)
        return bad(e, name, NULL, "'%s' must be between %.15g and %.15g, got %.15g",
                   name, lo, hi, d);
    if (d != neutral)
        return bad(e, name, C_UNSUPPORTED_VALUE,
                   "'%s' is not supported by this server (only %.15g is accepted)",
                   name, neutral);
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

/* prompt: a string, an array of exactly one string, an array of token ids,
 * or an array of exactly one array of token ids. Several prompts in one
 * request (a batch) would need several choices, which tessera does not
 * produce, so they are refused rather than truncated to the first. */
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

/* max_tokens, and for chat its newer name max_completion_tokens; when both
 * are given they must agree, since either reading of a conflict would
 * surprise someone. */
static int parse_max_tokens(const cJSON *root, oai_request *r, oai_error *e) {
    double a = 0, b = 0;
    bool has_a, has_b = false;
    int rc = get_int(root, "max_tokens", 1, OAI_MAX_TOKENS_CAP, &a, &has_a, e);
    if (rc) return rc;
    if (r->kind == OAI_CHAT &&
        (rc = get_int(root, "max_completion_tokens", 1, OAI_MAX_TOKENS_CAP, &b, &has_b, e)))
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

    if ((rc = only_neutral(root, "presence_penalty", -2, 2, 0, e))) return rc;
    if ((rc = only_neutral(root, "frequency_penalty", -2, 2, 0, e))) return rc;
    if ((rc = only_neutral(root, "repetition_penalty", 0, 1e9, 1, e))) return rc;
    if ((rc = only_neutral(root, "min_p", 0, 1, 0, e))) return rc;
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

static bool is_bool(const cJSON *v) { return cJSON_IsBool(v); }
static bool is_false(const cJSON *v) { return cJSON_IsFalse(v); }
static bool is_number_or_false(const cJSON *v) { return cJSON_IsNumber(v) || cJSON_IsFalse(v); }
static bool is_string(const cJSON *v) { return cJSON_IsString(v); }
static bool is_empty_string(const cJSON *v) { return cJSON_IsString(v) && !v->valuestring[0]; }
static bool is_object(const cJSON *v) { return cJSON_IsObject(v); }
static bool is_empty_object(const cJSON *v) { return cJSON_IsObject(v) && !v->child; }
static bool is_array(const cJSON *v) { return cJSON_IsArray(v); }
static bool is_empty_array(const cJSON *v) { return cJSON_IsArray(v) && !v->child; }
static bool never_off(const cJSON *v) { return false; }

static bool is_none_or_auto(const cJSON *v) {
    return cJSON_IsString(v) &&
           (strcmp(v->valuestring, "none") == 0 || strcmp(v->valuestring, "auto") == 0);
}

static const cJSON *format_type(const cJSON *v) {
    return cJSON_IsObject(v) ? field(v, "type") : NULL;
}

static bool is_format(const cJSON *v) { return cJSON_IsString(format_type(v)); }

/* {"type":"text"} is the default behaviour itself, not a feature. */
static bool is_text_format(const cJSON *v) {
    const cJSON *t = format_type(v);
    return cJSON_IsString(t) && strcmp(t->valuestring, "text") == 0;
}

/* In the order they are checked, which decides the error a request with
 * several of them gets. */
static const off_rule off_rules[] = {
    {.name = "n", .kinds = KIND_ANY, .lo = 1, .hi = 1e9, .names_value = true,
     .why = ": this server returns exactly one choice (n = 1)"},
    {.name = "logprobs", .kinds = KIND_CHAT, .typed = is_bool, .type = "a boolean",
     .off = is_false, .why = "no log probabilities"},
    {.name = "top_logprobs", .kinds = KIND_CHAT, .lo = 0, .hi = 20,
     .why = "no log probabilities"},
    /* Completions take an integer here; false is tolerated as "off". */
    {.name = "logprobs", .kinds = KIND_COMPLETION, .typed = is_number_or_false,
     .type = "an integer", .off = is_false, .why = "no log probabilities"},
    {.name = "echo", .kinds = KIND_COMPLETION, .typed = is_bool, .type = "a boolean",
     .off = is_false, .why = "the prompt is not echoed"},
    {.name = "suffix", .kinds = KIND_COMPLETION, .typed = is_string, .type = "a string",
     .off = is_empty_string, .why = "no insertion"},
    {.name = "best_of", .kinds = KIND_COMPLETION, .lo = 1, .hi = 1e9, .names_value = true,
     .why = " (only 1)"},
    {.name = "logit_bias", .kinds = KIND_ANY, .typed = is_object, .type = "an object",
     .off = is_empty_object, .why = "no logit bias"},
    {.name = "response_format", .kinds = KIND_ANY, .typed = is_format,
     .type = "an object with a string 'type'", .off = is_text_format,
     .why = "no structured output (only {\"type\": \"text\"})"},
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
    if (kind == OAI_COMPLETION && (rc = get_bool(root, "parse_special_tokens", &out->parse_special, err))) goto out;
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
    for (size_t i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].tokens);
    }
    free(r->inputs);
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
