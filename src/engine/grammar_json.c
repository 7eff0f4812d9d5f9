/*
 * grammar_json.c - JSON Schema (the subset grammar.h lists), any JSON
 * object, and lists of choices, compiled to grammar rules.
 *
 * The JSON rules follow RFC 8259 with three deliberate narrowings, each so
 * that whatever the model writes parses everywhere and cannot run forever:
 * whitespace runs are at most GR_WS_MAX bytes, numbers have at most
 * GR_NUM_DIGITS digits before and after the point and two exponent digits,
 * and strings are valid UTF-8 whose \u escapes never name a surrogate.
 * Object properties of a schema come in the schema's order; that is one of
 * the orders a validator accepts, and it keeps the grammar linear in the
 * number of properties (each optional property is one more alternative).
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "grammar_int.h"
#include "utf8.h"

/* Slots of b->memo for the shared JSON rules (15 is the UTF-8 rule). */
enum { M_WS, M_VALUE, M_STRING, M_CHAR, M_DIGITS, M_INT, M_NUM, M_HEX, M_OBJ_REST, M_OBJ };

typedef struct js_ref {
    const cJSON *node;          /* a schema reached through $ref */
    int32_t rule;
} js_ref;

typedef struct js_ctx {
    gr__b *b;
    const cJSON *root;
    js_ref *refs;
    int32_t n_refs, cap_refs;
    char *err;
    size_t errlen;
} js_ctx;

/* ---- plain JSON ------------------------------------------------------------------ */

static int32_t ws_rule(gr__b *b) {
    if (b->memo[M_WS] >= 0) return b->memo[M_WS];
    /* ws_k ::= "" | [ \t\n\r] ws_{k+1}, up to GR_WS_MAX bytes. */
    int32_t rules[GR_WS_MAX + 1];
    for (int k = 0; k <= GR_WS_MAX; k++) rules[k] = gr__rule_new(b);
    gr__set sp = {{0}};
    gr__set_add(&sp, ' ');
    gr__set_add(&sp, '\t');
    gr__set_add(&sp, '\n');
    gr__set_add(&sp, '\r');
    gr__seq s = {0};
    for (int k = 0; k <= GR_WS_MAX; k++) {
        gr__alt_empty(b, rules[k]);
        if (k == GR_WS_MAX) break;
        gr__seq_set(b, &s, &sp);
        gr__seq_ref(b, &s, rules[k + 1]);
        gr__alt_add(b, rules[k], &s);
    }
    gr__seq_free(&s);
    return b->memo[M_WS] = rules[0];
}

/* One character of a JSON string's content, as its bytes. */
static int32_t char_rule(gr__b *b) {
    if (b->memo[M_CHAR] >= 0) return b->memo[M_CHAR];
    int32_t r = b->memo[M_CHAR] = gr__rule_new(b);
    gr__seq s = {0};
    gr__set plain = {{0}};
    gr__set_range(&plain, 0x20, 0x7f);
    plain.w['"' >> 6] &= ~(1ull << ('"' & 63));
    plain.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    gr__seq_set(b, &s, &plain);
    gr__alt_add(b, r, &s);
    gr__seq_ref(b, &s, gr__rule_utf8_multi(b));
    gr__alt_add(b, r, &s);
    gr__set esc = {{0}};
    for (const char *p = "\"\\/bfnrt"; *p; p++) gr__set_add(&esc, (uint8_t)*p);
    gr__seq_byte(b, &s, '\\');
    gr__seq_set(b, &s, &esc);
    gr__alt_add(b, r, &s);
    /* \uXXXX, never a surrogate (D800-DFFF): a lone one is not UTF-8. */
    gr__set hex = {{0}}, hex_nd = {{0}}, oct = {{0}}, d = {{0}};
    gr__set_range(&hex, '0', '9');
    gr__set_range(&hex, 'a', 'f');
    gr__set_range(&hex, 'A', 'F');
    hex_nd = hex;
    hex_nd.w['d' >> 6] &= ~(1ull << ('d' & 63));
    hex_nd.w['D' >> 6] &= ~(1ull << ('D' & 63));
    gr__set_range(&oct, '0', '7');
    gr__set_add(&d, 'd');
    gr__set_add(&d, 'D');
    gr__seq_lit(b, &s, "\\u", 2);
    gr__seq_set(b, &s, &hex_nd);
    for (int i = 0; i < 3; i++) gr__seq_set(b, &s, &hex);
    gr__alt_add(b, r, &s);
    gr__seq_lit(b, &s, "\\u", 2);
    gr__seq_set(b, &s, &d);
    gr__seq_set(b, &s, &oct);
    gr__seq_set(b, &s, &hex);
    gr__seq_set(b, &s, &hex);
    gr__alt_add(b, r, &s);
    gr__seq_free(&s);
    return r;
}

/* A string with min..max characters (max < 0: unbounded). */
static int32_t string_rule(gr__b *b, long min, long max) {
    int generic = min == 0 && max < 0;
    if (generic && b->memo[M_STRING] >= 0) return b->memo[M_STRING];
    int32_t ch = char_rule(b);
    long top = max < 0 ? min : max;
    int32_t first = -1, prev = -1;
    gr__seq s = {0};
    /* c_k (k characters written) ::= '"' if k >= min | ch c_{k+1} if k < max;
     * without a max, c_min loops on itself. */
    int32_t *rules = malloc((size_t)(top + 1) * sizeof *rules);
    if (!rules) {
        b->oom = 1;
        return 0;
    }
    for (long k = 0; k <= top; k++) rules[k] = gr__rule_new(b);
    for (long k = 0; k <= top; k++) {
        if (k >= min) {
            gr__seq_byte(b, &s, '"');
            gr__alt_add(b, rules[k], &s);
        }
        if (k < top || max < 0) {
            gr__seq_ref(b, &s, ch);
            gr__seq_ref(b, &s, k < top ? rules[k + 1] : rules[k]);
            gr__alt_add(b, rules[k], &s);
        }
    }
    (void)prev;
    first = gr__rule_new(b);
    gr__seq_byte(b, &s, '"');
    gr__seq_ref(b, &s, rules[0]);
    gr__alt_add(b, first, &s);
    gr__seq_free(&s);
    free(rules);
    if (generic) b->memo[M_STRING] = first;
    return first;
}

/* dig_k ::= "" | [0-9] dig_{k-1}: up to GR_NUM_DIGITS - 1 more digits. */
static int32_t digits_rule(gr__b *b) {
    if (b->memo[M_DIGITS] >= 0) return b->memo[M_DIGITS];
    int32_t rules[GR_NUM_DIGITS];
    for (int k = 0; k < GR_NUM_DIGITS; k++) rules[k] = gr__rule_new(b);
    gr__seq s = {0};
    for (int k = 0; k < GR_NUM_DIGITS; k++) {
        gr__alt_empty(b, rules[k]);
        if (k == 0) continue;
        gr__seq_range(b, &s, '0', '9');
        gr__seq_ref(b, &s, rules[k - 1]);
        gr__alt_add(b, rules[k], &s);
    }
    gr__seq_free(&s);
    return b->memo[M_DIGITS] = rules[GR_NUM_DIGITS - 1];
}

static int32_t int_rule(gr__b *b) {
    if (b->memo[M_INT] >= 0) return b->memo[M_INT];
    int32_t r = b->memo[M_INT] = gr__rule_new(b);
    gr__seq s = {0};
    for (int neg = 0; neg < 2; neg++) {
        if (neg) gr__seq_byte(b, &s, '-');
        gr__seq_byte(b, &s, '0');
        gr__alt_add(b, r, &s);
        if (neg) gr__seq_byte(b, &s, '-');
        gr__seq_range(b, &s, '1', '9');
        gr__seq_ref(b, &s, digits_rule(b));
        gr__alt_add(b, r, &s);
    }
    gr__seq_free(&s);
    return r;
}

static int32_t num_rule(gr__b *b) {
    if (b->memo[M_NUM] >= 0) return b->memo[M_NUM];
    int32_t r = b->memo[M_NUM] = gr__rule_new(b);
    int32_t frac = gr__rule_new(b), exp = gr__rule_new(b), sign = gr__rule_new(b), opt = gr__rule_new(b);
    gr__seq s = {0};
    gr__alt_empty(b, frac);
    gr__seq_byte(b, &s, '.');
    gr__seq_range(b, &s, '0', '9');
    gr__seq_ref(b, &s, digits_rule(b));
    gr__alt_add(b, frac, &s);
    gr__alt_empty(b, sign);
    gr__seq_byte(b, &s, '+');
    gr__alt_add(b, sign, &s);
    gr__seq_byte(b, &s, '-');
    gr__alt_add(b, sign, &s);
    gr__alt_empty(b, opt);
    gr__seq_range(b, &s, '0', '9');
    gr__alt_add(b, opt, &s);
    gr__alt_empty(b, exp);
    gr__set e = {{0}};
    gr__set_add(&e, 'e');
    gr__set_add(&e, 'E');
    gr__seq_set(b, &s, &e);
    gr__seq_ref(b, &s, sign);
    gr__seq_range(b, &s, '0', '9');
    gr__seq_ref(b, &s, opt);
    gr__alt_add(b, exp, &s);
    gr__seq_ref(b, &s, int_rule(b));
    gr__seq_ref(b, &s, frac);
    gr__seq_ref(b, &s, exp);
    gr__alt_add(b, r, &s);
    gr__seq_free(&s);
    return r;
}

static int32_t value_rule(gr__b *b);

/* '{' ws ( '}' | key ws ':' ws V rest ), rest ::= ws ( '}' | ',' ws key ws ':' ws V rest ):
 * any object whose values follow rule val. */
static int32_t map_rule(gr__b *b, int32_t val) {
    int32_t ws = ws_rule(b), str = string_rule(b, 0, -1);
    int32_t r = gr__rule_new(b), body = gr__rule_new(b), rest = gr__rule_new(b), rest2 = gr__rule_new(b);
    gr__seq s = {0}, kv = {0};
    gr__seq_ref(b, &kv, str);
    gr__seq_ref(b, &kv, ws);
    gr__seq_byte(b, &kv, ':');
    gr__seq_ref(b, &kv, ws);
    gr__seq_ref(b, &kv, val);
    gr__seq_byte(b, &s, '{');
    gr__seq_ref(b, &s, ws);
    gr__seq_ref(b, &s, body);
    gr__alt_add(b, r, &s);
    gr__seq_byte(b, &s, '}');
    gr__alt_add(b, body, &s);
    gr__seq_cat(b, &s, &kv);
    gr__seq_ref(b, &s, rest);
    gr__alt_add(b, body, &s);
    gr__seq_ref(b, &s, ws);
    gr__seq_ref(b, &s, rest2);
    gr__alt_add(b, rest, &s);
    gr__seq_byte(b, &s, '}');
    gr__alt_add(b, rest2, &s);
    gr__seq_byte(b, &s, ',');
    gr__seq_ref(b, &s, ws);
    gr__seq_cat(b, &s, &kv);
    gr__seq_ref(b, &s, rest);
    gr__alt_add(b, rest2, &s);
    gr__seq_free(&s);
    gr__seq_free(&kv);
    return r;
}

/* An array of min..max items of rule item (max < 0: unbounded). */
static int32_t array_rule(gr__b *b, int32_t item, long min, long max) {
    int32_t ws = ws_rule(b);
    long top = max < 0 ? (min > 1 ? min : 1) : max;
    int32_t r = gr__rule_new(b);
    int32_t *a = malloc((size_t)(top + 1) * sizeof *a);
    if (!a) {
        b->oom = 1;
        return r;
    }
    for (long k = 0; k <= top; k++) a[k] = gr__rule_new(b);
    gr__seq s = {0};
    /* r ::= '[' ws ( ']' if min == 0 | item a_1 );
     * a_k (k items written) ::= ws ']' if k >= min | ws ',' ws item a_{k+1} if k < max. */
    if (min == 0 && top >= 0) {
        gr__seq_byte(b, &s, '[');
        gr__seq_ref(b, &s, ws);
        gr__seq_byte(b, &s, ']');
        gr__alt_add(b, r, &s);
    }
    if (top >= 1) {
        gr__seq_byte(b, &s, '[');
        gr__seq_ref(b, &s, ws);
        gr__seq_ref(b, &s, item);
        gr__seq_ref(b, &s, a[1]);
        gr__alt_add(b, r, &s);
    }
    for (long k = 1; k <= top; k++) {
        if (k >= min) {
            gr__seq_ref(b, &s, ws);
            gr__seq_byte(b, &s, ']');
            gr__alt_add(b, a[k], &s);
        }
        if (k < top || max < 0) {
            gr__seq_ref(b, &s, ws);
            gr__seq_byte(b, &s, ',');
            gr__seq_ref(b, &s, ws);
            gr__seq_ref(b, &s, item);
            gr__seq_ref(b, &s, k < top ? a[k + 1] : a[k]);
            gr__alt_add(b, a[k], &s);
        }
    }
    gr__seq_free(&s);
    free(a);
    return r;
}

static int32_t value_rule(gr__b *b) {
    if (b->memo[M_VALUE] >= 0) return b->memo[M_VALUE];
    int32_t r = b->memo[M_VALUE] = gr__rule_new(b);
    gr__seq s = {0};
    int32_t parts[4] = {map_rule(b, r), array_rule(b, r, 0, -1), string_rule(b, 0, -1), num_rule(b)};
    for (int i = 0; i < 4; i++) {
        gr__seq_ref(b, &s, parts[i]);
        gr__alt_add(b, r, &s);
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        gr__seq_lit(b, &s, lits[i], strlen(lits[i]));
        gr__alt_add(b, r, &s);
    }
    gr__seq_free(&s);
    return r;
}

/* root ::= ws body: a model may open with a space or newline, never close with one. */
static int32_t with_leading_ws(gr__b *b, int32_t body) {
    int32_t r = gr__rule_new(b);
    gr__seq s = {0};
    gr__seq_ref(b, &s, ws_rule(b));
    gr__seq_ref(b, &s, body);
    gr__alt_add(b, r, &s);
    gr__seq_free(&s);
    return r;
}

int gr_compile_json_object(const gr_vocab *v, gr_grammar **out, char *err, size_t errlen) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!v) return err_set(err, errlen, TS_ERR_INVAL, "no vocabulary");
    gr__b b;
    gr__b_init(&b);
    int32_t root = with_leading_ws(&b, map_rule(&b, value_rule(&b)));
    int rc = gr__build(&b, root, v, out, err, errlen);
    gr__b_deinit(&b);
    return rc;
}

/* ---- JSON Schema ----------------------------------------------------------------- */

static const char *const annotations[] = {
    "title", "description", "$schema", "$id", "$comment", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL,
};
static const char *const keywords[] = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "minItems", "maxItems", "minLength", "maxLength",
    "pattern", NULL,
};

static int in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

__attribute__((format(printf, 3, 4)))
static int fail(js_ctx *c, const char *path, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(c->err, c->errlen, TS_ERR_INVAL, "%s at %s", msg, *path ? path : "the schema root");
}

static int compile_node(js_ctx *c, const cJSON *n, const char *path, int depth, int32_t *out);

/* A literal JSON value (enum member, const) as compact JSON text. */
static int literal_alt(js_ctx *c, int32_t r, const cJSON *val) {
    char *text = cJSON_PrintUnformatted(val);
    if (!text) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory");
    gr__seq s = {0};
    gr__seq_lit(c->b, &s, text, strlen(text));
    gr__alt_add(c->b, r, &s);
    gr__seq_free(&s);
    free(text);
    return 0;
}

static int get_bound(js_ctx *c, const cJSON *n, const char *key, const char *path, long *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(n, key);
    if (!x) return 0;
    /* Range first: casting a double beyond long's range is undefined. */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble != floor(x->valuedouble))
        return fail(c, path, "'%s' must be a non-negative integer", key);
    if (x->valuedouble > GR_MAX_REPEAT) {
        return fail(c, path, "'%s' above %d is not supported", key, GR_MAX_REPEAT);
    }
    *out = (long)x->valuedouble;
    return 0;
}

static int compile_object(js_ctx *c, const cJSON *n, const char *path, int depth, int32_t *out) {
    gr__b *b = c->b;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(n, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(n, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(n, "additionalProperties");
    char sub[512];
    if (props && !cJSON_IsObject(props)) return fail(c, path, "'%s' must be an object", "properties");
    if (req && !cJSON_IsArray(req)) return fail(c, path, "'%s' must be an array", "required");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, path, "'%s' must be a boolean or a schema", "additionalProperties");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return fail(c, path, "'%s' must list strings", "required");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(c, path, "required property '%s' is not among the properties", r->valuestring);
    }
    int n_props = props ? cJSON_GetArraySize(props) : 0;
    if (n_props == 0) {
        int32_t val;
        if (addl && cJSON_IsObject(addl)) {
            snprintf(sub, sizeof sub, "%s/additionalProperties", path);
            int rc = compile_node(c, addl, sub, depth + 1, &val);
            if (rc) return rc;
        } else if (addl && cJSON_IsFalse(addl)) {
            *out = gr__rule_new(b);
            gr__seq s = {0};
            gr__seq_byte(b, &s, '{');
            gr__seq_ref(b, &s, ws_rule(b));
            gr__seq_byte(b, &s, '}');
            gr__alt_add(b, *out, &s);
            gr__seq_free(&s);
            return 0;
        } else {
            val = value_rule(b);
        }
        *out = map_rule(b, val);
        return 0;
    }
    int32_t ws = ws_rule(b);
    int32_t *kv = malloc((size_t)n_props * 3 * sizeof *kv);
    if (!kv) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory");
    int32_t *first = kv + n_props, *rest = kv + 2 * n_props;
    int i = 0, rc = 0;
    int8_t opt[GR_MAX_REPEAT];
    if (n_props > GR_MAX_REPEAT) {
        free(kv);
        return fail(c, path, "more than %d properties are not supported", GR_MAX_REPEAT);
    }
    for (const cJSON *p = props->child; p; p = p->next, i++) {
        snprintf(sub, sizeof sub, "%s/properties/%s", path, p->string);
        int32_t val;
        if ((rc = compile_node(c, p, sub, depth + 1, &val))) {
            free(kv);
            return rc;
        }
        opt[i] = 1;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!strcmp(r->valuestring, p->string)) opt[i] = 0;
        /* kv_i ::= "name" ws ':' ws value */
        cJSON *name = cJSON_CreateString(p->string);
        char *text = name ? cJSON_PrintUnformatted(name) : NULL;
        cJSON_Delete(name);
        if (!text) {
            free(kv);
            return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory");
        }
        gr__seq s = {0};
        kv[i] = gr__rule_new(b);
        gr__seq_lit(b, &s, text, strlen(text));
        gr__seq_ref(b, &s, ws);
        gr__seq_byte(b, &s, ':');
        gr__seq_ref(b, &s, ws);
        gr__seq_ref(b, &s, val);
        gr__alt_add(b, kv[i], &s);
        gr__seq_free(&s);
        free(text);
    }
    /* first_i: nothing written yet, properties i.. left; rest_i: something written.
     * first_i ::= kv_i rest_{i+1} | first_{i+1} (if i optional); first_n ::= '}'
     * rest_i ::= ws ',' ws kv_i rest_{i+1} | rest_{i+1} (if i optional); rest_n ::= ws '}' */
    int32_t first_n = gr__rule_new(b), rest_n = gr__rule_new(b);
    for (i = 0; i < n_props; i++) {
        first[i] = gr__rule_new(b);
        rest[i] = gr__rule_new(b);
    }
    gr__seq s = {0};
    gr__seq_byte(b, &s, '}');
    gr__alt_add(b, first_n, &s);
    gr__seq_ref(b, &s, ws);
    gr__seq_byte(b, &s, '}');
    gr__alt_add(b, rest_n, &s);
    for (i = 0; i < n_props; i++) {
        int32_t nf = i + 1 < n_props ? first[i + 1] : first_n, nr = i + 1 < n_props ? rest[i + 1] : rest_n;
        gr__seq_ref(b, &s, kv[i]);
        gr__seq_ref(b, &s, nr);
        gr__alt_add(b, first[i], &s);
        gr__seq_ref(b, &s, ws);
        gr__seq_byte(b, &s, ',');
        gr__seq_ref(b, &s, ws);
        gr__seq_ref(b, &s, kv[i]);
        gr__seq_ref(b, &s, nr);
        gr__alt_add(b, rest[i], &s);
        if (opt[i]) {
            gr__seq_ref(b, &s, nf);
            gr__alt_add(b, first[i], &s);
            gr__seq_ref(b, &s, nr);
            gr__alt_add(b, rest[i], &s);
        }
    }
    *out = gr__rule_new(b);
    gr__seq_byte(b, &s, '{');
    gr__seq_ref(b, &s, ws);
    gr__seq_ref(b, &s, first[0]);
    gr__alt_add(b, *out, &s);
    gr__seq_free(&s);
    free(kv);
    return 0;
}

static int compile_string(js_ctx *c, const cJSON *n, const char *path, int32_t *out) {
    long min = 0, max = -1;
    int rc;
    if ((rc = get_bound(c, n, "minLength", path, &min)) || (rc = get_bound(c, n, "maxLength", path, &max)))
        return rc;
    if (max >= 0 && max < min) return fail(c, path, "maxLength is below minLength");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
    if (!pat) {
        *out = string_rule(c->b, min, max);
        return 0;
    }
    if (!cJSON_IsString(pat)) return fail(c, path, "'%s' must be a string", "pattern");
    if (min != 0 || max >= 0) return fail(c, path, "pattern together with minLength/maxLength is not supported");
    int32_t body;
    char msg[200];
    rc = gr__regex_rule(c->b, pat->valuestring, strlen(pat->valuestring), GR__RE_JSON | GR__RE_SEARCH, &body, msg,
                        sizeof msg);
    if (rc) return fail(c, path, "pattern: %s", msg);
    *out = gr__rule_new(c->b);
    gr__seq s = {0};
    gr__seq_byte(c->b, &s, '"');
    gr__seq_ref(c->b, &s, body);
    gr__seq_byte(c->b, &s, '"');
    gr__alt_add(c->b, *out, &s);
    gr__seq_free(&s);
    return 0;
}

static int compile_type(js_ctx *c, const cJSON *n, const char *type, const char *path, int depth, int32_t *out) {
    gr__b *b = c->b;
    if (!strcmp(type, "object")) return compile_object(c, n, path, depth, out);
    if (!strcmp(type, "string")) return compile_string(c, n, path, out);
    if (!strcmp(type, "array")) {
        long min = 0, max = -1;
        int rc;
        if ((rc = get_bound(c, n, "minItems", path, &min)) || (rc = get_bound(c, n, "maxItems", path, &max)))
            return rc;
        if (max >= 0 && max < min) return fail(c, path, "maxItems is below minItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(n, "items");
        int32_t item = 0;
        if (items) {
            char sub[512];
            snprintf(sub, sizeof sub, "%s/items", path);
            if ((rc = compile_node(c, items, sub, depth + 1, &item))) return rc;
        } else {
            item = value_rule(b);
        }
        *out = array_rule(b, item, min, max);
        return 0;
    }
    const char *lit = NULL;
    if (!strcmp(type, "integer")) {
        *out = int_rule(b);
        return 0;
    }
    if (!strcmp(type, "number")) {
        *out = num_rule(b);
        return 0;
    }
    if (!strcmp(type, "null")) lit = "null";
    if (!strcmp(type, "boolean")) {
        *out = gr__rule_new(b);
        gr__seq s = {0};
        gr__seq_lit(b, &s, "true", 4);
        gr__alt_add(b, *out, &s);
        gr__seq_lit(b, &s, "false", 5);
        gr__alt_add(b, *out, &s);
        gr__seq_free(&s);
        return 0;
    }
    if (!lit) return fail(c, path, "unknown type '%s'", type);
    *out = gr__rule_new(b);
    gr__seq s = {0};
    gr__seq_lit(b, &s, lit, strlen(lit));
    gr__alt_add(b, *out, &s);
    gr__seq_free(&s);
    return 0;
}

static int compile_ref(js_ctx *c, const char *ref, const char *path, int depth, int32_t *out) {
    const cJSON *target = NULL;
    if (!strcmp(ref, "#")) {
        target = c->root;
    } else {
        const char *name = NULL, *defs = NULL;
        if (!strncmp(ref, "#/$defs/", 8)) defs = "$defs", name = ref + 8;
        if (!strncmp(ref, "#/definitions/", 14)) defs = "definitions", name = ref + 14;
        if (!name || strchr(name, '/') || strchr(name, '~'))
            return fail(c, path, "$ref '%s' is not supported (only #, #/$defs/NAME, #/definitions/NAME)", ref);
        target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, defs), name);
        if (!target) return fail(c, path, "$ref '%s' names no definition", ref);
    }
    for (int32_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].node == target) {
            *out = c->refs[i].rule;
            return 0;
        }
    if (c->n_refs == c->cap_refs) {
        int32_t nc = c->cap_refs ? 2 * c->cap_refs : 8;
        js_ref *nr = realloc(c->refs, (size_t)nc * sizeof *nr);
        if (!nr) return err_set(c->err, c->errlen, TS_ERR_NOMEM, "out of memory");
        c->refs = nr;
        c->cap_refs = nc;
    }
    /* The rule exists before its body is compiled, so a recursive reference
     * inside the body finds it. */
    int32_t r = gr__rule_new(c->b), body;
    c->refs[c->n_refs++] = (js_ref){target, r};
    int rc = compile_node(c, target, ref + 1, depth + 1, &body);
    if (rc) return rc;
    gr__seq s = {0};
    gr__seq_ref(c->b, &s, body);
    gr__alt_add(c->b, r, &s);
    gr__seq_free(&s);
    *out = r;
    return 0;
}

/* Which keywords, besides annotations, may stand beside key in one node. */
static int only_beside(js_ctx *c, const cJSON *n, const char *key, const char *path) {
    for (const cJSON *k = n->child; k; k = k->next)
        if (strcmp(k->string, key) && !in_list(annotations, k->string)) {
            return fail(c, path, "'%s' beside '%s' is not supported", k->string, key);
        }
    return 0;
}

static int compile_alts(js_ctx *c, const cJSON *list, const char *key, const char *path, int depth, int32_t *out) {
    if (!cJSON_IsArray(list) || !list->child) return fail(c, path, "'%s' must be a non-empty array", key);
    int32_t r = gr__rule_new(c->b);
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s/%d", path, key, i);
        int32_t sr;
        int rc = compile_node(c, x, sub, depth + 1, &sr);
        if (rc) return rc;
        gr__seq s = {0};
        gr__seq_ref(c->b, &s, sr);
        gr__alt_add(c->b, r, &s);
        gr__seq_free(&s);
    }
    *out = r;
    return 0;
}

static int compile_node(js_ctx *c, const cJSON *n, const char *path, int depth, int32_t *out) {
    if (depth > GR_MAX_SCHEMA_DEPTH) return fail(c, path, "schema nested deeper than %d levels", GR_MAX_SCHEMA_DEPTH);
    if (cJSON_IsTrue(n)) {
        *out = value_rule(c->b);
        return 0;
    }
    if (cJSON_IsFalse(n)) return fail(c, path, "the schema false matches nothing");
    if (!cJSON_IsObject(n)) return fail(c, path, "a schema must be an object or a boolean");
    for (const cJSON *k = n->child; k; k = k->next)
        if (!in_list(keywords, k->string) && !in_list(annotations, k->string))
            return fail(c, path, "unsupported JSON Schema keyword '%s'", k->string);
    const cJSON *x;
    int rc;
    if ((x = cJSON_GetObjectItemCaseSensitive(n, "$ref"))) {
        if ((rc = only_beside(c, n, "$ref", path))) return rc;
        if (!cJSON_IsString(x)) return fail(c, path, "'%s' must be a string", "$ref");
        return compile_ref(c, x->valuestring, path, depth, out);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(n, "const"))) {
        if ((rc = only_beside(c, n, "const", path))) return rc;
        *out = gr__rule_new(c->b);
        return literal_alt(c, *out, x);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(n, "enum"))) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(n, "type");
        /* A type beside enum is allowed only when every member has it; the
         * members are what is emitted, so check rather than trust. */
        for (const cJSON *k = n->child; k; k = k->next)
            if (strcmp(k->string, "enum") && strcmp(k->string, "type") && !in_list(annotations, k->string))
                return fail(c, path, "'%s' beside 'enum' is not supported", k->string);
        if (!cJSON_IsArray(x) || !x->child) return fail(c, path, "'%s' must be a non-empty array", "enum");
        (void)t;
        *out = gr__rule_new(c->b);
        for (const cJSON *e = x->child; e; e = e->next)
            if ((rc = literal_alt(c, *out, e))) return rc;
        return 0;
    }
    const char *alt_keys[] = {"anyOf", "oneOf"};
    for (int i = 0; i < 2; i++)
        if ((x = cJSON_GetObjectItemCaseSensitive(n, alt_keys[i]))) {
            if ((rc = only_beside(c, n, alt_keys[i], path))) return rc;
            return compile_alts(c, x, alt_keys[i], path, depth, out);
        }
    if ((x = cJSON_GetObjectItemCaseSensitive(n, "allOf"))) {
        if ((rc = only_beside(c, n, "allOf", path))) return rc;
        if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 1)
            return fail(c, path, "'%s' with other than one schema is not supported", "allOf");
        char sub[512];
        snprintf(sub, sizeof sub, "%s/allOf/0", path);
        return compile_node(c, x->child, sub, depth + 1, out);
    }
    x = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (cJSON_IsString(x)) return compile_type(c, n, x->valuestring, path, depth, out);
    if (cJSON_IsArray(x) && x->child) {
        int32_t r = gr__rule_new(c->b);
        for (const cJSON *t = x->child; t; t = t->next) {
            if (!cJSON_IsString(t)) return fail(c, path, "'%s' must list type names", "type");
            int32_t tr;
            if ((rc = compile_type(c, n, t->valuestring, path, depth, &tr))) return rc;
            gr__seq s = {0};
            gr__seq_ref(c->b, &s, tr);
            gr__alt_add(c->b, r, &s);
            gr__seq_free(&s);
        }
        *out = r;
        return 0;
    }
    if (x) return fail(c, path, "'%s' must be a type name or a non-empty list of them", "type");
    if (cJSON_GetObjectItemCaseSensitive(n, "properties") || cJSON_GetObjectItemCaseSensitive(n, "required") ||
        cJSON_GetObjectItemCaseSensitive(n, "additionalProperties"))
        return compile_type(c, n, "object", path, depth, out);
    if (cJSON_GetObjectItemCaseSensitive(n, "items") || cJSON_GetObjectItemCaseSensitive(n, "minItems") ||
        cJSON_GetObjectItemCaseSensitive(n, "maxItems"))
        return compile_type(c, n, "array", path, depth, out);
    if (cJSON_GetObjectItemCaseSensitive(n, "pattern") || cJSON_GetObjectItemCaseSensitive(n, "minLength") ||
        cJSON_GetObjectItemCaseSensitive(n, "maxLength"))
        return compile_type(c, n, "string", path, depth, out);
    *out = value_rule(c->b);
    return 0;
}

int gr_compile_json_schema(const char *schema, size_t len, const gr_vocab *v, gr_grammar **out, char *err,
                           size_t errlen) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!v || !schema) return err_set(err, errlen, TS_ERR_INVAL, "no schema or vocabulary");
    /* Names, enum strings and patterns become output bytes: they must be
     * text, or the output would not be. */
    size_t bad = utf8_valid_prefix(schema, len);
    if (bad < len) return err_set(err, errlen, TS_ERR_INVAL, "the schema is not valid UTF-8 (byte %zu)", bad);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, 0);
    if (!root) return err_set(err, errlen, TS_ERR_INVAL, "the schema is not valid JSON");
    gr__b b;
    gr__b_init(&b);
    js_ctx c = {.b = &b, .root = root, .err = err, .errlen = errlen};
    int32_t body = 0;
    int rc = compile_node(&c, root, "", 0, &body);
    if (!rc) rc = gr__build(&b, with_leading_ws(&b, body), v, out, err, errlen);
    gr__b_deinit(&b);
    free(c.refs);
    cJSON_Delete(root);
    return rc;
}

int gr_compile_choice(const char *const *choices, const size_t *lens, size_t n, const gr_vocab *v,
                      gr_grammar **out, char *err, size_t errlen) {
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!v || !choices || n == 0) return err_set(err, errlen, TS_ERR_INVAL, "choices must be a non-empty list");
    gr__b b;
    gr__b_init(&b);
    int32_t r = gr__rule_new(&b);
    gr__seq s = {0};
    for (size_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : (choices[i] ? strlen(choices[i]) : 0);
        if (!choices[i] || l == 0) {
            gr__seq_free(&s);
            gr__b_deinit(&b);
            return err_set(err, errlen, TS_ERR_INVAL, "choice %zu is empty", i);
        }
        gr__seq_lit(&b, &s, choices[i], l);
        gr__alt_add(&b, r, &s);
    }
    gr__seq_free(&s);
    int rc = gr__build(&b, r, v, out, err, errlen);
    gr__b_deinit(&b);
    return rc;
}
