/* scrape.c - reading a tessera server's admin routes; see scrape.h.
 *
 * The parsers walk the answer along its expected shape ({"data": [...]},
 * then each entry's known fields) rather than the tree, so each error can
 * say which entry and which field, and a field the parser does not read
 * cannot fail it.
 */
#include "scrape.h"

#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "loadgen.h"
#include "strbuf.h"

/* ---- fetch -------------------------------------------------------------------- */

typedef struct sink {
    strbuf b;
    int over;               /* the body passed SCR_BODY_MAX */
} sink;

static size_t on_body(char *p, size_t size, size_t n, void *ctx) {
    sink *s = ctx;
    size_t k = size * n;
    if (s->b.len + k > SCR_BODY_MAX) {
        s->over = 1;
        return 0;           /* ends the transfer with CURLE_WRITE_ERROR */
    }
    strbuf_put(&s->b, p, k);
    return strbuf_failed(&s->b) ? 0 : k;
}

/* The "message" of an OpenAI-shaped error answer, or "" when it is not one. */
static const char *error_message(const char *body, size_t len, char *buf, size_t cap) {
    buf[0] = 0;
    cJSON *j = body ? cJSON_ParseWithLength(body, len) : NULL;
    const char *m = lg_error_message(j);
    if (m && *m) snprintf(buf, cap, ": %s", m);
    cJSON_Delete(j);
    return buf;
}

/* One GET on an easy handle the caller made; the answer's status in *code. */
static CURLcode get(CURL *h, const char *target, struct curl_slist *hdrs, double timeout_s, sink *s, long *code,
                    char *cerr) {
    curl_easy_setopt(h, CURLOPT_URL, target);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    if (hdrs) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1e3));
    lg_curl_safe(h);   /* only ever the URL given, as loadgen's requests */
    CURLcode res = curl_easy_perform(h);
    *code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    return res;
}

int scr_fetch(const char *url, const char *path, const char *key, double timeout_s, char **body, size_t *len,
              char *err, size_t errlen) {
    if (body) *body = NULL;
    if (len) *len = 0;
    if (!url || !path || path[0] != '/' || !body || !len || !(timeout_s > 0) || timeout_s > 3600)
        return err_set(err, errlen, TS_ERR_INVAL, "scr_fetch: no URL, a path without '/', or a timeout outside (0, 3600] s");
    int rc = lg_url_check(url, err, errlen);
    if (rc) return rc;
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/') ul--;
    char target[1024], auth[600], cerr[CURL_ERROR_SIZE] = "", msg[256];
    if (snprintf(target, sizeof target, "%.*s%s", (int)ul, url, path) >= (int)sizeof target)
        return err_set(err, errlen, TS_ERR_INVAL, "URL too long");
    if (key && snprintf(auth, sizeof auth, "Authorization: Bearer %s", key) >= (int)sizeof auth)
        return err_set(err, errlen, TS_ERR_INVAL, "key too long");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return err_set(err, errlen, TS_ERR_IO, "libcurl failed to initialise");
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = key ? curl_slist_append(NULL, auth) : NULL;
    sink s = {STRBUF_INIT, 0};
    long code = 0;
    if (!h || (key && !hdrs)) {
        rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
        goto out;
    }
    CURLcode res = get(h, target, hdrs, timeout_s, &s, &code, cerr);
    if (strbuf_failed(&s.b)) rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory reading %s", target);
    else if (s.over) rc = err_set(err, errlen, TS_ERR_IO, "%s: answer larger than %u bytes", target, SCR_BODY_MAX);
    else if (res != CURLE_OK)
        rc = err_set(err, errlen, TS_ERR_IO, "%s: %s", target, cerr[0] ? cerr : curl_easy_strerror(res));
    else if (code == 401)
        rc = err_set(err, errlen, TS_ERR_AUTH, "%s: the server refused the admin key (401)%s", target,
                     error_message(s.b.p, s.b.len, msg, sizeof msg));
    else if (code != 200)
        rc = err_set(err, errlen, TS_ERR_IO, "%s: HTTP %ld%s", target, code,
                     error_message(s.b.p, s.b.len, msg, sizeof msg));
    if (!rc && !(*body = strbuf_steal(&s.b, len))) rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
out:
    strbuf_free(&s.b);
    curl_slist_free_all(hdrs);
    if (h) curl_easy_cleanup(h);
    curl_global_cleanup();
    return rc;
}

/* ---- parse -------------------------------------------------------------------- */

/* Where a parser is, for messages: the route, the entry and the object
 * inside it ("" for the entry itself, "cost_model." for a nested one). */
typedef struct where {
    const char *route;
    size_t i;
    const char *in;
    char *err;
    size_t errlen;
} where;

/* The value of a required field; NULL with the error set when missing. */
static const cJSON *field(const where *w, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) err_set(w->err, w->errlen, TS_ERR_INVAL, "%s: data[%zu].%s%s: missing", w->route, w->i, w->in, key);
    return v;
}

static int bad(const where *w, const char *key, const char *what) {
    return err_set(w->err, w->errlen, TS_ERR_INVAL, "%s: data[%zu].%s%s: expected %s", w->route, w->i, w->in, key,
                   what);
}

/* A finite number >= lo; with nullable, null reads as -1 (unknown). */
static int get_num(const where *w, const cJSON *o, const char *key, double lo, int nullable, double *out) {
    const cJSON *v = field(w, o, key);
    if (!v) return TS_ERR_INVAL;
    if (nullable && cJSON_IsNull(v)) {
        *out = -1;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo) {
        char what[64];
        snprintf(what, sizeof what, "a number >= %g%s", lo, nullable ? " or null" : "");
        return bad(w, key, what);
    }
    *out = v->valuedouble;
    return 0;
}

/* A count: a whole number in [0, 2^53] (what a double holds exactly). */
static int get_count(const where *w, const cJSON *o, const char *key, uint64_t *out) {
    double d;
    if (get_num(w, o, key, 0, 0, &d)) return TS_ERR_INVAL;
    if (d != floor(d) || d > 9007199254740992.0) return bad(w, key, "a whole number in 0..2^53");
    *out = (uint64_t)d;
    return 0;
}

/* A whole number in [lo, hi]. */
static int get_i32(const where *w, const cJSON *o, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    const cJSON *v = field(w, o, key);
    if (!v) return TS_ERR_INVAL;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d)) {
        char what[64];
        snprintf(what, sizeof what, "a whole number in %d..%d", lo, hi);
        return bad(w, key, what);
    }
    *out = (int32_t)d;
    return 0;
}

/* A name of 1..SCHED_NAME_MAX-1 bytes, none a control character (a
 * server's names have none, and messages quote them). */
static int get_name(const where *w, const cJSON *o, const char *key, char out[SCHED_NAME_MAX]) {
    const cJSON *v = field(w, o, key);
    if (!v) return TS_ERR_INVAL;
    size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0, ctl = 0;
    for (size_t i = 0; i < n; i++) ctl += (unsigned char)v->valuestring[i] < 0x20 || v->valuestring[i] == 0x7F;
    if (n == 0 || n >= SCHED_NAME_MAX || ctl) {
        char what[80];
        snprintf(what, sizeof what, "a name of 1..%d bytes without control characters", SCHED_NAME_MAX - 1);
        return bad(w, key, what);
    }
    memcpy(out, v->valuestring, n + 1);
    return 0;
}

/* One of names; its index in *out. */
static int get_enum(const where *w, const cJSON *o, const char *key, const char *const *names, int n, const char *what,
                    int *out) {
    const cJSON *v = field(w, o, key);
    if (!v) return TS_ERR_INVAL;
    for (int k = 0; cJSON_IsString(v) && k < n; k++)
        if (!strcmp(v->valuestring, names[k])) {
            *out = k;
            return 0;
        }
    return bad(w, key, what);
}

static int parse_tenant(const where *w, const cJSON *o, scr_tenant *t) {
    if (!cJSON_IsObject(o))
        return err_set(w->err, w->errlen, TS_ERR_INVAL, "%s: data[%zu]: expected an object", w->route, w->i);
    if (get_name(w, o, "tenant", t->name) || get_name(w, o, "model", t->model) ||
        get_num(w, o, "engine_seconds", 0, 0, &t->engine_seconds) || get_num(w, o, "cost", 0, 1, &t->cost) ||
        get_num(w, o, "price_per_hour", 0, 1, &t->price_per_hour) || get_count(w, o, "submitted", &t->submitted) ||
        get_count(w, o, "completed", &t->completed) || get_count(w, o, "prompt_tokens", &t->prompt_tokens) ||
        get_count(w, o, "output_tokens", &t->output_tokens))
        return TS_ERR_INVAL;
    /* Optional together: servers before them did not say. */
    t->first_tokens = 0;
    t->ttft_sum_s = -1;
    if (!cJSON_GetObjectItemCaseSensitive(o, "first_tokens") && !cJSON_GetObjectItemCaseSensitive(o, "ttft_seconds_sum"))
        return 0;
    return get_count(w, o, "first_tokens", &t->first_tokens) || get_num(w, o, "ttft_seconds_sum", 0, 0, &t->ttft_sum_s)
               ? TS_ERR_INVAL
               : 0;
}

const char *const scr_coef_names[4] = {"a_us", "b_us_per_prefill_token", "c_us_per_decode_seq",
                                       "d_us_per_attended_position"};

/* A fit's four coefficients, its err_us, and its err_autocorr when present
 * (else 0: no runs of slow steps; servers before it did not say). */
static int get_fit(const where *in, const cJSON *f, double theta[4], double *err_us, double *err_ac) {
    for (int k = 0; k < 4; k++)
        if (get_num(in, f, scr_coef_names[k], 0, 0, &theta[k])) return TS_ERR_INVAL;
    if (get_num(in, f, "err_us", 0, 0, err_us)) return TS_ERR_INVAL;
    *err_ac = 0;
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(f, "err_autocorr");
    if (ac && (!cJSON_IsNumber(ac) || !(ac->valuedouble >= -1 && ac->valuedouble <= 1)))
        return bad(in, "err_autocorr", "a number from -1 to 1");
    if (ac) *err_ac = ac->valuedouble;
    return 0;
}

/* An object that servers before it did not give: *out NULL when o has no
 * key, refused when it is not an object; in names where its fields are
 * (prefix, as "step_fit."). */
static int optional_object(const where *w, const cJSON *o, const char *key, const char *prefix, const cJSON **out,
                           where *in) {
    *out = cJSON_GetObjectItemCaseSensitive(o, key);
    if (*out && !cJSON_IsObject(*out)) return bad(w, key, "an object");
    *in = *w;
    in->in = prefix;
    return 0;
}

/* The optional seed object of cost_model: its four coefficients. */
static int parse_seed(const where *w, const cJSON *f, scr_model *m) {
    m->has_seed = 0;
    const cJSON *s;
    where in;
    if (optional_object(w, f, "seed", "cost_model.seed.", &s, &in)) return TS_ERR_INVAL;
    if (!s) return 0;
    for (int k = 0; k < 4; k++)
        if (get_num(&in, s, scr_coef_names[k], 0, 0, &m->seed[k])) return TS_ERR_INVAL;
    m->has_seed = 1;
    return 0;
}

/* The cost_model object of a model entry. */
static int parse_fit(const where *w, const cJSON *o, scr_model *m) {
    const cJSON *f = field(w, o, "cost_model");
    if (!f) return TS_ERR_INVAL;
    if (!cJSON_IsObject(f)) return bad(w, "cost_model", "an object");
    where in = *w;
    in.in = "cost_model.";
    if (get_fit(&in, f, m->theta, &m->err_us, &m->err_autocorr) || get_count(&in, f, "steps", &m->fit_steps) ||
        get_num(&in, f, "copy_bytes_per_us", 0, 0, &m->copy_bytes_per_us) || parse_seed(&in, f, m))
        return TS_ERR_INVAL;
    return 0;
}

/* What a list of numbers must be: each in [lo, hi] (and a whole number
 * with whole), ascending strictly, non-decreasing or in any order, what
 * naming that in the message; per names what fixes its length. */
enum { ORDER_ANY, ORDER_NONDEC, ORDER_ASC };
typedef struct list_rule {
    double lo, hi;
    int order, whole;
    const char *what, *per;
} list_rule;

/* The open ranges as closed ones: (0, 1) is [the least double > 0, the greatest < 1]. */
static const list_rule LEVELS = {0x1p-1074, 1 - 0x1p-53, ORDER_ASC, 0, "ascending numbers in (0, 1)", "levels"};
static const list_rule QUANTILES = {0x1p-1074, DBL_MAX, ORDER_NONDEC, 0, "non-decreasing numbers > 0", "levels"};
static const list_rule ACF_LAGS = {1, 1e6, ORDER_ASC, 1, "ascending whole numbers in 1..1e6", "lags"};
static const list_rule ACF_VALUES = {-1, 1, ORDER_ANY, 0, "numbers from -1 to 1", "lags"};

/* One list: 1..max numbers by rule r; *n the length a list before it fixed
 * (0: none, and then it is this one's). */
static int num_list(const where *w, const cJSON *o, const char *key, const list_rule *r, int max, double *out,
                    int *n) {
    const cJSON *v = field(w, o, key), *x;
    if (!v) return TS_ERR_INVAL;
    int k = 0, len = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (len < 1 || len > max || (*n && len != *n)) {
        char what[64];
        if (*n) snprintf(what, sizeof what, "a list of %d numbers, as many as %s", *n, r->per);
        else snprintf(what, sizeof what, "a list of 1..%d numbers", max);
        return bad(w, key, what);
    }
    cJSON_ArrayForEach(x, v) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        int order_ok = !k || r->order == ORDER_ANY || (r->order == ORDER_ASC ? d > out[k - 1] : d >= out[k - 1]);
        if (!(d >= r->lo && d <= r->hi) || (r->whole && d != floor(d)) || !order_ok) return bad(w, key, r->what);
        out[k++] = d;
    }
    *n = len;
    return 0;
}

/* The optional step_ratio object of a model entry. */
static int parse_ratio(const where *w, const cJSON *o, scr_model *m) {
    m->n_ratio = 0;
    m->ratio_steps = 0;
    const cJSON *r;
    where in;
    if (optional_object(w, o, "step_ratio", "step_ratio.", &r, &in)) return TS_ERR_INVAL;
    if (!r) return 0;
    int n = 0;
    if (get_count(&in, r, "steps", &m->ratio_steps) ||
        num_list(&in, r, "levels", &LEVELS, SCR_RATIO_MAX, m->ratio_level, &n) ||
        num_list(&in, r, "quantiles", &QUANTILES, SCR_RATIO_MAX, m->ratio_q, &n))
        return TS_ERR_INVAL;
    m->n_ratio = n;
    return 0;
}

/* step_fit's optional acf object (servers before it have none: sf_n_acf 0). */
static int parse_acf(const where *w, const cJSON *f, scr_model *m) {
    const cJSON *a;
    where in;
    if (optional_object(w, f, "acf", "step_fit.acf.", &a, &in)) return TS_ERR_INVAL;
    if (!a) return 0;
    int n = 0;
    if (num_list(&in, a, "lags", &ACF_LAGS, SCR_ACF_MAX, m->sf_acf_lag, &n) ||
        num_list(&in, a, "values", &ACF_VALUES, SCR_ACF_MAX, m->sf_acf, &n))
        return TS_ERR_INVAL;
    m->sf_n_acf = n;
    return 0;
}

static const list_rule SHAPE_ROWS = {1, 1e9, ORDER_ASC, 1, "ascending whole numbers", "rows_max"};
/* e^-1 .. e^1 (cost.h: COST_ACF_CLIP), as the server prints them (%.6g) */
static const list_rule SHAPE_FACTORS = {0.36787, 2.71829, ORDER_ANY, 0, "numbers from 0.36787 to 2.71829 (e^-1 to e^1)",
                                        "rows_max has, plus one"};
static const list_rule SHAPE_STEPS = {0, 9007199254740992.0, ORDER_ANY, 1, "whole numbers in 0..2^53",
                                      "rows_max has, plus one"};

/* step_fit's optional shape object (servers before it have none:
 * sf_has_shape 0, sf_shape zero as the caller left it), in this build's
 * buckets: rows_max 1, 2, 4, ..., 2^(COST_SHAPE_ROWS - 2), then a factor
 * and a count of steps per bucket for steps without (decode) and with a
 * prefill chunk (prefill). */
static int parse_shape(const where *w, const cJSON *f, scr_model *m) {
    const cJSON *sh;
    where in;
    if (optional_object(w, f, "shape", "step_fit.shape.", &sh, &in)) return TS_ERR_INVAL;
    if (!sh) return 0;
    double rows[COST_SHAPE_ROWS - 1];
    int n = 0;
    _Static_assert(COST_SHAPE_ROWS == 11, "the message below names the buckets");
    if (num_list(&in, sh, "rows_max", &SHAPE_ROWS, COST_SHAPE_ROWS - 1, rows, &n)) return TS_ERR_INVAL;
    int same = n == COST_SHAPE_ROWS - 1;
    for (int k = 0; same && k < COST_SHAPE_ROWS - 1; k++) same = rows[k] == ldexp(1.0, k);
    if (!same) return bad(&in, "rows_max", "1, 2, 4, 8, 16, 32, 64, 128, 256, 512: this build's buckets");
    static const char *const kinds[2] = {"decode", "prefill"};
    for (int kind = 0; kind < 2; kind++) {
        const cJSON *o;
        where ink;
        char prefix[32];
        snprintf(prefix, sizeof prefix, "step_fit.shape.%s.", kinds[kind]);
        double fac[COST_SHAPE_ROWS], steps[COST_SHAPE_ROWS];
        int len = COST_SHAPE_ROWS;
        if (optional_object(&in, sh, kinds[kind], prefix, &o, &ink)) return TS_ERR_INVAL;
        if (!o) return bad(&in, kinds[kind], "an object (factor, steps)");
        if (num_list(&ink, o, "factor", &SHAPE_FACTORS, COST_SHAPE_ROWS, fac, &len) ||
            num_list(&ink, o, "steps", &SHAPE_STEPS, COST_SHAPE_ROWS, steps, &len))
            return TS_ERR_INVAL;
        for (int k = 0; k < COST_SHAPE_ROWS; k++) {
            m->sf_shape.log_f[kind][k] = log(fac[k]);
            m->sf_shape.n[kind][k] = (uint64_t)steps[k];
        }
    }
    m->sf_has_shape = 1;
    return 0;
}

/* The optional step_fit object of a model entry (after parse_ratio: its
 * quantiles are at step_ratio's levels). */
static int parse_step_fit(const where *w, const cJSON *o, scr_model *m) {
    m->sf_steps = 0;
    m->sf_n_acf = 0;
    m->sf_has_shape = 0;
    memset(&m->sf_shape, 0, sizeof m->sf_shape);
    const cJSON *f;
    where in;
    if (optional_object(w, o, "step_fit", "step_fit.", &f, &in)) return TS_ERR_INVAL;
    if (!f) return 0;
    if (m->n_ratio == 0) return bad(w, "step_fit", "step_ratio beside it (its quantiles are at those levels)");
    int n = m->n_ratio;
    if (get_fit(&in, f, m->sf_theta, &m->sf_err_us, &m->sf_err_autocorr) ||
        get_count(&in, f, "steps", &m->sf_steps) ||
        num_list(&in, f, "quantiles", &QUANTILES, SCR_RATIO_MAX, m->sf_q, &n) || parse_acf(&in, f, m) ||
        parse_shape(&in, f, m))
        return TS_ERR_INVAL;
    return 0;
}

static int parse_model(const where *w, const cJSON *o, scr_model *m) {
    static const char *const kinds[] = {"chat", "embedding"}, *const policies[] = {"fair", "fcfs"};
    static const int policy_of[] = {SCHED_POLICY_FAIR, SCHED_POLICY_FCFS};
    int pol = 0;
    if (!cJSON_IsObject(o))
        return err_set(w->err, w->errlen, TS_ERR_INVAL, "%s: data[%zu]: expected an object", w->route, w->i);
    if (get_name(w, o, "model", m->name) || get_enum(w, o, "kind", kinds, 2, "\"chat\" or \"embedding\"", &m->embedding) ||
        get_enum(w, o, "policy", policies, 2, "\"fair\" or \"fcfs\"", &pol) ||
        get_i32(w, o, "context_length", 1, INT32_MAX, &m->context_length) ||
        get_i32(w, o, "n_blocks", 1, INT32_MAX, &m->n_blocks) || get_i32(w, o, "block_size", 1, INT32_MAX, &m->block_size) ||
        get_num(w, o, "block_bytes", 0, 0, &m->block_bytes) ||
        get_i32(w, o, "swap_blocks", 0, INT32_MAX, &m->swap_blocks) ||
        get_i32(w, o, "max_seqs", 1, INT32_MAX, &m->max_seqs) ||
        get_i32(w, o, "budget_min", 1, INT32_MAX, &m->budget_min) ||
        get_i32(w, o, "budget_max", 1, INT32_MAX, &m->budget_max) || get_num(w, o, "kv_high", 0, 0, &m->kv_high) ||
        get_num(w, o, "kv_low", 0, 0, &m->kv_low) || get_count(w, o, "steps", &m->steps) || parse_fit(w, o, m) ||
        get_num(w, o, "price_per_hour", 0, 1, &m->price_per_hour) || parse_ratio(w, o, m) ||
        parse_step_fit(w, o, m))
        return TS_ERR_INVAL;
    m->policy = policy_of[pol];
    if (m->budget_min > m->budget_max) return bad(w, "budget_min", "at most budget_max");
    if (m->kv_high > 1 || m->kv_low > m->kv_high) return bad(w, "kv_low", "kv_low <= kv_high <= 1");
    return 0;
}

typedef int (*parse_fn)(const where *w, const cJSON *o, void *row);

static int parse_tenant_v(const where *w, const cJSON *o, void *row) { return parse_tenant(w, o, row); }
static int parse_model_v(const where *w, const cJSON *o, void *row) { return parse_model(w, o, row); }

/* {"data": [entry, ...]} into a calloc'd array of n rows of size bytes. */
static int parse_list(const char *route, const char *text, size_t len, size_t size, parse_fn fn, void **rows,
                      size_t *n, char *err, size_t errlen) {
    if (rows) *rows = NULL;
    if (n) *n = 0;
    if (!text || !rows || !n) return err_set(err, errlen, TS_ERR_INVAL, "%s: no text or output", route);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    int cnt = cJSON_IsArray(data) ? cJSON_GetArraySize(data) : 0;
    int rc = 0;
    char *out = NULL;
    /* Past the value, whitespace only: "{...} junk" is not an answer. */
    size_t tail = j && end ? (size_t)(end - text) : len;
    while (tail < len && strchr(" \t\n\r", text[tail]) && text[tail]) tail++;
    if (!j) rc = err_set(err, errlen, TS_ERR_INVAL, "%s: not JSON (near byte %zu)", route,
                         end ? (size_t)(end - text) : (size_t)0);
    else if (tail < len)
        rc = err_set(err, errlen, TS_ERR_INVAL, "%s: more after the JSON (at byte %zu)", route, tail);
    else if (!cJSON_IsArray(data)) rc = err_set(err, errlen, TS_ERR_INVAL, "%s: expected an object with a \"data\" list", route);
    else if (cnt && !(out = calloc((size_t)cnt, size))) rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    where w = {route, 0, "", err, errlen};
    const cJSON *e = data ? data->child : NULL;
    for (; !rc && e; e = e->next, w.i++) rc = fn(&w, e, out + w.i * size);
    cJSON_Delete(j);
    if (rc) {
        free(out);
        return rc;
    }
    *rows = out;
    *n = (size_t)cnt;
    return 0;
}

int scr_parse_tenants(const char *text, size_t len, scr_tenant **rows, size_t *n, char *err, size_t errlen) {
    return parse_list("/admin/tenants", text, len, sizeof(scr_tenant), parse_tenant_v, (void **)rows, n, err, errlen);
}

int scr_parse_models(const char *text, size_t len, scr_model **rows, size_t *n, char *err, size_t errlen) {
    return parse_list("/admin/models", text, len, sizeof(scr_model), parse_model_v, (void **)rows, n, err, errlen);
}

size_t scr_tenant_total(const scr_tenant *rows, size_t n, const char *tenant, const char *model, scr_tenant *out) {
    memset(out, 0, sizeof *out);
    out->cost = out->price_per_hour = -1;
    out->ttft_sum_s = -1;
    if (!rows || !tenant) return 0;
    snprintf(out->name, sizeof out->name, "%s", tenant);
    if (model) snprintf(out->model, sizeof out->model, "%s", model);
    size_t k = 0;
    int cost_known = 1, price_same = 1, ttft_known = 1;
    double cost = 0, price = -1, ttft = 0;
    for (size_t i = 0; i < n; i++) {
        const scr_tenant *r = &rows[i];
        if (strcmp(r->name, tenant) || (model && strcmp(r->model, model))) continue;
        out->engine_seconds += r->engine_seconds;
        out->submitted += r->submitted;
        out->completed += r->completed;
        out->prompt_tokens += r->prompt_tokens;
        out->output_tokens += r->output_tokens;
        out->first_tokens += r->first_tokens;
        if (r->ttft_sum_s >= 0) ttft += r->ttft_sum_s;
        else ttft_known = 0;
        /* An unpriced model where the tenant ran nothing costs it nothing
         * either way; where it ran, its share of the cost is unknown. */
        if (r->cost >= 0) cost += r->cost;
        else if (r->engine_seconds > 0) cost_known = 0;
        if (k == 0) price = r->price_per_hour;
        else if (r->price_per_hour != price) price_same = 0;
        k++;
    }
    if (k && cost_known) out->cost = cost;
    if (k && ttft_known) out->ttft_sum_s = ttft;
    if (k && price_same && price >= 0) out->price_per_hour = price;
    return k;
}

int scr_get_tenants(const char *url, const char *admin_key, double timeout_s, scr_tenant **rows, size_t *n,
                    char *err, size_t errlen) {
    char *body;
    size_t len;
    if (rows) *rows = NULL;
    if (n) *n = 0;
    int rc = scr_fetch(url, "/admin/tenants", admin_key, timeout_s, &body, &len, err, errlen);
    if (rc) return rc;
    rc = scr_parse_tenants(body, len, rows, n, err, errlen);
    free(body);
    return rc;
}

int scr_get_models(const char *url, const char *admin_key, double timeout_s, scr_model **rows, size_t *n,
                   char *err, size_t errlen) {
    char *body;
    size_t len;
    if (rows) *rows = NULL;
    if (n) *n = 0;
    int rc = scr_fetch(url, "/admin/models", admin_key, timeout_s, &body, &len, err, errlen);
    if (rc) return rc;
    rc = scr_parse_models(body, len, rows, n, err, errlen);
    free(body);
    return rc;
}
