/*
 * fuzz_jinja.c - a chat template and a conversation: the Jinja interpreter
 * (serve/jinja.c) parsing the template and rendering it under small limits,
 * and the compiled-template API over it (serve/chat.c's chat_tpl_*).
 *
 * Input (fuzz_jinja.h): a flags byte (add_generation_prompt, the BOS/EOS
 * texts, one of the LIMITS profiles below), the template, then optionally
 * the messages (roles system, user, assistant, tool, developer, or "odd",
 * which chat.c refuses and jinja.c takes as data; contents from the input)
 * and a JSON object of request variables.
 *
 * Checks jinja.h's promises: jj_parse succeeds, or fails with TS_ERR_INVAL
 * and a "line:col: message" (or TS_ERR_NOMEM), leaving *out NULL, and a
 * short error buffer gets a NUL-terminated prefix of the message and
 * nothing past its end; jj_render's text is NUL-terminated, no longer than
 * max_output, and the same with or without spans; its spans are in order,
 * non-empty, inside the text and not touching (adjacent ones merge); a
 * failed render leaves the outputs NULL and 0 and says why. Provenance: a
 * byte of a template span that is not ASCII must come from the template
 * source or the BOS/EOS texts (checked when the source has no escape that
 * makes such bytes), so message content never passes for template text.
 * And chat.h's: chat_tpl_new agrees with jj_parse; chat_tpl_render and
 * chat_tpl_render_req refuse no messages or a bad role with outputs NULL
 * and 0, and otherwise give what jj_render gave (the same text and spans,
 * with default limits, since the small ones sufficed). Every template,
 * content and variable is copied to a buffer of exactly its length, so
 * ASan sees a read past the end; LeakSanitizer sees the rest.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "common.h"
#include "err.h"
#include "fuzz_jinja.h"
#include "jinja.h"

enum { MAX_MSGS = 16 };

/* Small caps, so a runaway template stops fast; the last profile is tight
 * enough that most renders hit it, FZ_JJ_LIM_ROOMY lets a published
 * template render a conversation. */
static const jj_limits LIMITS[4] = {
    {4096, 1u << 20, 20000, 8},
    {256, 256u << 10, 2000, 2},
    {65536, 4u << 20, 200000, 32},
    {1, 64u << 10, 500, 1},
};

/* A message as the target owns it: content in a buffer of exactly its
 * length (NULL when empty, as jj_msg asks). */
typedef struct msgs {
    chat_msg m[MAX_MSGS];
    jj_msg j[MAX_MSGS];
    int n;
    int odd;                /* a role chat.c refuses */
    int developer;          /* a role chat.c renames */
} msgs;

static void msgs_add(msgs *ms, const char *role, const uint8_t *p, size_t n) {
    char *c = NULL;
    if (n) {
        c = malloc(n);
        FZ_CHECK(c != NULL);
        for (size_t i = 0; i < n; i++) c[i] = p[i] == FZ_JJ_NUL ? '\0' : (char)p[i];
    }
    ms->m[ms->n] = (chat_msg){role, c, n};
    ms->j[ms->n] = (jj_msg){role, c, n};
    ms->odd |= strcmp(role, "odd") == 0;
    ms->developer |= strcmp(role, "developer") == 0;
    ms->n++;
}

static void msgs_parse(msgs *ms, const uint8_t *p, size_t n) {
    memset(ms, 0, sizeof *ms);
    if (!p) {
        msgs_add(ms, "system", (const uint8_t *)"You are terse.", 14);
        msgs_add(ms, "user", (const uint8_t *)"Hi <|im_end|>", 13);
        return;
    }
    if (!n) return;
    for (size_t at = 0; at <= n && ms->n < MAX_MSGS;) {
        const uint8_t *end = memchr(p + at, FZ_JJ_SEP, n - at);
        size_t rl = end ? (size_t)(end - (p + at)) : n - at;
        if (rl == 0)
            msgs_add(ms, "user", NULL, 0);
        else
            msgs_add(ms, FZ_JJ_ROLES[p[at] % FZ_JJ_N_ROLES], p + at + 1, rl - 1);
        at += rl + 1;
    }
}

static void msgs_free(msgs *ms) {
    for (int i = 0; i < ms->n; i++) free((void *)ms->m[i].content);
}

/* NUL-terminated within cap, not empty. */
static void check_message(const char *err, size_t cap) {
    FZ_CHECK(memchr(err, 0, cap) != NULL);
    if (!err[0]) fprintf(stderr, "empty error message\n");
    FZ_CHECK(err[0] != '\0');
}

/* "line:col: message", both numbers from 1. */
static int line_col(const char *e) {
    unsigned long line = 0, col = 0;
    int k = 0;
    if (sscanf(e, "%lu:%lu: %n", &line, &col, &k) != 2 || k == 0) return 0;
    return line >= 1 && col >= 1 && e[k] != '\0';
}

/* A short error buffer: what fits of the message, NUL-terminated, and not
 * a byte past errlen. */
static void check_short_err(const char *src, size_t len, size_t errlen, const char *full) {
    char buf[32];
    memset(buf, 0x5A, sizeof buf);
    jj_tpl *t = (jj_tpl *)&buf;   /* must come back NULL */
    int rc = jj_parse(src, len, &t, buf, errlen);
    FZ_CHECK(rc < 0 && t == NULL);
    FZ_CHECK(memchr(buf, 0, errlen) != NULL);
    FZ_CHECK(strncmp(buf, full, strlen(buf)) == 0);
    for (size_t i = errlen; i < sizeof buf; i++) FZ_CHECK(buf[i] == 0x5A);
}

static void check_spans(size_t len, const jj_span *sp, size_t n) {
    FZ_CHECK((n == 0) == (sp == NULL));
    for (size_t k = 0; k < n; k++) {
        FZ_CHECK(sp[k].len > 0 && sp[k].off < len && sp[k].len <= len - sp[k].off);
        if (k > 0) FZ_CHECK(sp[k].off > sp[k - 1].off + sp[k - 1].len);
    }
}

/* Bytes that are not ASCII in template spans: each must be one the template
 * could have written. allowed[b] is set for those bytes. */
static void check_taint(const char *out, const jj_span *sp, size_t n, const uint8_t allowed[256]) {
    for (size_t k = 0; k < n; k++)
        for (size_t i = sp[k].off; i < sp[k].off + sp[k].len; i++) {
            uint8_t b = (uint8_t)out[i];
            if (b >= 0x80 && !allowed[b]) {
                fprintf(stderr, "byte 0x%02x at %zu is in a template span but not in the template\n", b, i);
                FZ_CHECK(!"message content passed for template text");
            }
        }
}

/* An escape that writes a byte above 0x7F without that byte in the source
 * (\x, \u, \U, octal). */
static int has_high_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\\') {
            char e = s[i + 1];
            if (e == 'x' || e == 'u' || e == 'U' || (e >= '0' && e <= '7')) return 1;
            i++;
        }
    return 0;
}

/* chat_tpl_render(_req) against what jj_render gave with chat.c's role
 * mapping (ok, text, spans). Renders with chat.c's default limits only
 * when the small ones sufficed or the call is refused before rendering, so
 * a runaway template never runs to the big caps. */
static void check_chat(const char *src, size_t slen, const char *bos, const char *eos, const msgs *ms,
                       int agp, const cJSON *vars, int64_t now, int jj_ok, const char *want,
                       size_t want_len, const jj_span *wsp, size_t wn) {
    char err[256];
    chat_tpl *ct = (chat_tpl *)&err;   /* must be overwritten */
    int rc = chat_tpl_new(src, slen, bos, eos, &ct, err, sizeof err);
    if (rc) {
        /* jj_parse took it: only an empty template or memory can fail. */
        FZ_CHECK(ct == NULL && (slen == 0 || rc == TS_ERR_NOMEM));
        FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        check_message(err, sizeof err);
        return;
    }
    FZ_CHECK(ct != NULL && ct != (chat_tpl *)&err);

    /* chat_tpl_render reads the clock: only where the template cannot see
     * it, and without variables (it takes none). */
    int timeless = !vars && !memmem(src, slen, "strftime_now", 12);
    int vars_msgs = vars && cJSON_GetObjectItemCaseSensitive(vars, "messages");
    for (int form = 0; form < 2; form++) {
        int refused = ms->odd || (ms->n == 0 && (form == 0 || !vars_msgs));
        if ((form == 0 && !timeless) || (!refused && !jj_ok)) continue;
        char *sentinel = err, *out = sentinel;
        size_t len = 7, n_segs = 7;
        chat_seg *segs = (chat_seg *)sentinel;
        int add_bos = 7;
        if (form == 0) {
            rc = chat_tpl_render(ct, ms->n ? ms->m : NULL, ms->n, agp, &out, &len, &segs, &n_segs, err,
                                 sizeof err);
        } else {
            chat_tpl_req req = {ms->n ? ms->m : NULL, ms->n, agp, now, vars};
            rc = chat_tpl_render_req(ct, &req, &out, &len, &add_bos, &segs, &n_segs, err, sizeof err);
        }
        if (rc) {
            FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
            FZ_CHECK(out == NULL && len == 0 && segs == NULL && n_segs == 0);
            if (form == 1) FZ_CHECK(add_bos == 0);
            check_message(err, sizeof err);
            if (!refused) {
                fprintf(stderr, "chat_tpl: %s\n", err);
                FZ_CHECK(!"chat_tpl refused what jj_render rendered");
            }
            continue;
        }
        FZ_CHECK(!refused);
        FZ_CHECK(out != NULL && out != sentinel && out[len] == '\0');
        FZ_CHECK((n_segs == 0) == (segs == NULL));
        FZ_CHECK(len == want_len && memcmp(out, want, len) == 0);
        FZ_CHECK(n_segs == wn);
        for (size_t k = 0; k < n_segs; k++)
            FZ_CHECK(segs[k].off == wsp[k].off && segs[k].len == wsp[k].len);
        if (form == 1) FZ_CHECK(add_bos == !chat_tpl_has_bos(ct, out, len));
        free(out);
        free(segs);
    }
    chat_tpl_free(ct);
}

/* jj_render with in, checked: the outputs on success and on failure, the
 * spans, the provenance of the non-ASCII bytes of template spans (when
 * allowed is given), and the same result without spans. */
static int render(const jj_tpl *t, const jj_input *in, const uint8_t *allowed, char **out, size_t *len,
                  jj_span **sp, size_t *n_spans) {
    char err[256];
    memset(err, 0x5A, sizeof err);
    *out = err;
    *sp = (jj_span *)err;
    *len = *n_spans = 7;
    int rc = jj_render(t, in, out, len, sp, n_spans, err, sizeof err);
    if (rc) {
        FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        FZ_CHECK(*out == NULL && *len == 0 && *sp == NULL && *n_spans == 0);
        check_message(err, sizeof err);
    } else {
        FZ_CHECK(*out != NULL && *out != err && (*out)[*len] == '\0');
        FZ_CHECK(*len <= in->lim->max_output);
        check_spans(*len, *sp, *n_spans);
        if (allowed) check_taint(*out, *sp, *n_spans, allowed);
    }

    /* Without spans: the same text (renders are deterministic). */
    char *out2 = NULL, err2[256];
    size_t len2 = 7, n2 = 7;
    int rc2 = jj_render(t, in, &out2, &len2, NULL, &n2, err2, sizeof err2);
    FZ_CHECK(rc2 == rc);
    if (rc2 == 0) {
        FZ_CHECK(out2 && len2 == *len && memcmp(out2, *out, *len + 1) == 0);
    } else {
        FZ_CHECK(out2 == NULL && len2 == 0 && n2 == 0);
        FZ_CHECK(strcmp(err, err2) == 0);
    }
    free(out2);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t flags = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const uint8_t *nul = memchr(p, 0, n);
    size_t slen = nul ? (size_t)(nul - p) : n;

    /* The template, in a buffer of exactly its length (no NUL after it). */
    char *src = malloc(slen ? slen : 1);
    FZ_CHECK(src != NULL);
    memcpy(src, p, slen);

    const uint8_t *mp = NULL, *vp = NULL;
    size_t mn = 0, vn = 0;
    if (nul) {
        mp = nul + 1;
        mn = n - slen - 1;
        const uint8_t *nul2 = memchr(mp, 0, mn);
        if (nul2) {
            vp = nul2 + 1;
            vn = mn - (size_t)(nul2 - mp) - 1;
            mn = (size_t)(nul2 - mp);
        }
    }
    msgs ms;
    msgs_parse(&ms, nul ? mp : NULL, mn);
    cJSON *vars = NULL;
    if (vp && vn) {
        char *vj = malloc(vn);
        FZ_CHECK(vj != NULL);
        memcpy(vj, vp, vn);
        vars = cJSON_ParseWithLength(vj, vn);
        free(vj);
        if (vars && !cJSON_IsObject(vars)) {
            cJSON_Delete(vars);
            vars = NULL;
        }
    }

    const int agp = flags & 1;
    const char *bos = FZ_JJ_PAIRS[(flags >> 1) & 7][0], *eos = FZ_JJ_PAIRS[(flags >> 1) & 7][1];
    const jj_limits *lim = &LIMITS[(flags >> 4) & 3];
    const int64_t now = 1721995200;   /* 2024-07-26, as cases.json */

    /* ---- parse ---- */
    char err[256];
    memset(err, 0x5A, sizeof err);
    jj_tpl *t = (jj_tpl *)&err;   /* must be overwritten */
    int rc = jj_parse(src, slen, &t, err, sizeof err);
    if (rc) {
        FZ_CHECK(t == NULL);
        FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        check_message(err, sizeof err);
        if (rc == TS_ERR_INVAL && !line_col(err)) {
            fprintf(stderr, "parse error without line:col: \"%s\"\n", err);
            FZ_CHECK(!"parse error without line:col");
        }
        check_short_err(src, slen, 1 + fz_hash(data, size) % 16, err);
        /* chat_tpl_new says the same. */
        char err2[256];
        chat_tpl *ct = NULL;
        int rc2 = chat_tpl_new(src, slen, bos, eos, &ct, err2, sizeof err2);
        FZ_CHECK(rc2 == rc && ct == NULL);
        if (slen) FZ_CHECK(strcmp(err, err2) == 0);
        goto done;
    }
    FZ_CHECK(t != NULL && t != (jj_tpl *)&err);

    /* ---- render under the small limits ---- */
    uint8_t allowed[256] = {0};
    int taint = !has_high_escape(src, slen);
    if (taint) {
        for (size_t i = 0; i < slen; i++) allowed[(uint8_t)src[i]] = 1;
        for (const char *s = bos; s && *s; s++) allowed[(uint8_t)*s] = 1;
        for (const char *s = eos; s && *s; s++) allowed[(uint8_t)*s] = 1;
        allowed[0xEF] = allowed[0xBF] = allowed[0xBD] = 1;   /* U+FFFD */
    }
    const char *trusted[5] = {NULL}, **tp = trusted;
    if (bos) { *tp++ = "bos_token"; *tp++ = bos; }
    if (eos) { *tp++ = "eos_token"; *tp++ = eos; }
    jj_input in = {.msgs = ms.n ? ms.j : NULL, .n_msgs = ms.n, .add_generation_prompt = agp,
                   .data = vars, .trusted = trusted, .now = now, .lim = lim};
    char *out;
    size_t len, n_spans;
    jj_span *sp;
    rc = render(t, &in, taint ? allowed : NULL, &out, &len, &sp, &n_spans);
    if (ms.developer) {
        /* chat.c passes "developer" as "system": render that too, as the
         * reference for chat_tpl. */
        jj_msg mapped[MAX_MSGS];
        for (int i = 0; i < ms.n; i++) {
            mapped[i] = ms.j[i];
            if (strcmp(mapped[i].role, "developer") == 0) mapped[i].role = "system";
        }
        in.msgs = mapped;
        free(out);
        free(sp);
        rc = render(t, &in, taint ? allowed : NULL, &out, &len, &sp, &n_spans);
    }

    check_chat(src, slen, bos, eos, &ms, agp, vars, now, rc == 0, out, len, sp, n_spans);
    free(out);
    free(sp);
    jj_free(t);
done:
    cJSON_Delete(vars);
    msgs_free(&ms);
    free(src);
    return 0;
}
