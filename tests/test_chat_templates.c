/* test_chat_templates.c - real published chat templates rendered by
 * tessera (src/serve/jinja.c through chat.h) against @huggingface/jinja.
 *
 * The cases file is written by tests/ref/jinja_ref.mjs: the templates
 * (Llama 3/3.1/3.2, Qwen 1.5/2.5/3, Gemma 3, Mistral v0.1/v0.3/Nemo,
 * Phi-3/3.5, ChatML, DeepSeek V3, ChatGLM3, InternLM2) and, per
 * conversation, the variables and the reference's output or the fact that
 * the template raised. Every case must match byte for byte; a raise must be
 * an error here too, carrying the template's own message.
 *
 * Which cases file: $TS_JINJA_CASES when set (tests/chat_templates.sh
 * writes a fresh one with Node and runs this program on it), else the
 * checked-in tests/golden/chat_templates/cases.json, so that ctest checks
 * the templates without Node too; chat_templates.sh also checks that the
 * golden file is exactly what the reference produces today.
 *
 * For conversations of plain role/content messages the same bytes must
 * also come out of chat_tpl_render (the chat_msg path the server uses),
 * and no byte of any message's content may lie inside a template segment.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "serve/chat.h"
#include "serve/jinja.h"
#include "testutil.h"

static const char *cases_path(char *buf, size_t cap) {
    const char *env = getenv("TS_JINJA_CASES");
    if (env && *env) return env;
    const char *src = __FILE__;            /* .../tests/test_chat_templates.c */
    const char *slash = strrchr(src, '/');
    size_t dir = slash ? (size_t)(slash - src) : 0;
    snprintf(buf, cap, "%.*s%sgolden/chat_templates/cases.json", (int)dir, src, dir ? "/" : "");
    return buf;
}

static void show_diff(const char *name, const char *got, size_t got_len, const char *want) {
    size_t wl = strlen(want), i = 0;
    while (i < got_len && i < wl && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    print_message("  %s: differs at byte %zu\n    got:  \"%.*s\"\n    want: \"%.*s\"\n", name, i,
                  (int)(got_len - from < 120 ? got_len - from : 120), got + from,
                  (int)(wl - from < 120 ? wl - from : 120), want + from);
}

/* Plain messages (string role and content, no other keys, no other
 * variables): as chat_msg, or 0 when the case is not plain. */
static int plain_msgs(const cJSON *vars, chat_msg *m, int cap) {
    int n = 0;
    for (const cJSON *v = vars->child; v; v = v->next)
        if (strcmp(v->string, "messages") && strcmp(v->string, "add_generation_prompt")) return 0;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(vars, "messages");
    for (const cJSON *x = msgs ? msgs->child : NULL; x; x = x->next) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(x, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(x, "content");
        if (n == cap || !cJSON_IsString(r) || !cJSON_IsString(c) || cJSON_GetArraySize(x) != 2)
            return 0;
        m[n++] = (chat_msg){r->valuestring, c->valuestring, strlen(c->valuestring)};
    }
    return n;
}

/* The chat_msg path: same bytes, and content never inside a segment. */
static int check_chat_path(const char *name, const chat_tpl *ct, const cJSON *vars,
                           int64_t now, const char *want) {
    chat_msg m[16];
    int n = plain_msgs(vars, m, 16);
    if (!n) return 0;
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(vars, "add_generation_prompt");
    chat_tpl_req req = {m, n, cJSON_IsTrue(agp), now, NULL};
    char *out = NULL, err[512];
    size_t len = 0, ns = 0;
    chat_seg *segs = NULL;
    int bad = 0, rc = chat_tpl_render_req(ct, &req, &out, &len, NULL, &segs, &ns, err, sizeof err);
    if (rc) {
        print_message("  %s (chat_msg path): error %s\n", name, err);
        return 1;
    }
    if (len != strlen(want) || memcmp(out, want, len)) {
        show_diff(name, out, len, want);
        bad = 1;
    }
    char *mask = calloc(len + 1, 1);
    for (size_t i = 0; i < ns; i++) memset(mask + segs[i].off, 1, segs[i].len);
    for (int i = 0; i < n && !bad; i++) {
        /* Short or blank texts recur in the markup itself. */
        size_t ink = 0;
        for (size_t k = 0; k < m[i].content_len; k++) ink += m[i].content[k] > ' ';
        if (m[i].content_len < 4 || ink == 0) continue;
        for (const char *p = out; (p = memmem(p, len - (size_t)(p - out), m[i].content,
                                             m[i].content_len)); p++) {
            for (size_t k = 0; k < m[i].content_len; k++)
                if (mask[(size_t)(p - out) + k]) {
                    print_message("  %s: content of message %d inside a template segment\n",
                                  name, i);
                    bad = 1;
                    break;
                }
            if (bad) break;
        }
    }
    free(mask);
    free(segs);
    free(out);
    return bad;
}

static int run_case(const cJSON *tpls, const cJSON *c, int64_t now, int *n_plain) {
    const char *tname = cJSON_GetObjectItemCaseSensitive(c, "template")->valuestring;
    const char *conv = cJSON_GetObjectItemCaseSensitive(c, "conversation")->valuestring;
    const cJSON *vars = cJSON_GetObjectItemCaseSensitive(c, "vars");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tpls, tname);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(t, "source");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(t, "bos");
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(t, "eos");
    char name[128], err[512];
    snprintf(name, sizeof name, "%s/%s", tname, conv);
    chat_tpl *ct = NULL;
    int rc = chat_tpl_new(src->valuestring, strlen(src->valuestring),
                          cJSON_IsString(bos) ? bos->valuestring : NULL,
                          cJSON_IsString(eos) ? eos->valuestring : NULL, &ct, err, sizeof err);
    if (rc) {
        print_message("  %s: template does not compile: %s\n", name, err);
        return 1;
    }
    /* The full variables (tools, tool_calls) go in as request data. */
    chat_tpl_req req = {NULL, 0, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vars, "add_generation_prompt")),
                        now, vars};
    char *out = NULL;
    size_t len = 0;
    int bad = 0;
    rc = chat_tpl_render_req(ct, &req, &out, &len, NULL, NULL, NULL, err, sizeof err);
    if (cJSON_IsString(want)) {
        if (rc) {
            print_message("  %s: error where the reference renders: %s\n", name, err);
            bad = 1;
        } else if (len != strlen(want->valuestring) || memcmp(out, want->valuestring, len)) {
            show_diff(name, out, len, want->valuestring);
            bad = 1;
        } else {
            int r = check_chat_path(name, ct, vars, now, want->valuestring);
            bad |= r;
            *n_plain += !r && plain_msgs(vars, (chat_msg[16]){0}, 16);
        }
    } else {
        const char *ref = cJSON_GetObjectItemCaseSensitive(c, "error")->valuestring;
        if (!rc) {
            print_message("  %s: renders where the reference raises \"%s\"\n", name, ref);
            bad = 1;
        } else if (!strstr(err, ref)) {
            print_message("  %s: error \"%s\", reference \"%s\"\n", name, err, ref);
            bad = 1;
        }
    }
    free(out);
    chat_tpl_free(ct);
    return bad;
}

static void test_real_templates(void **st) {
    (void)st;
    char buf[4096];
    const char *path = cases_path(buf, sizeof buf);
    size_t len = 0;
    char *text = tu_read_file(path, &len);
    if (!text) fail_msg("cannot read %s", path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) fail_msg("%s is not JSON", path);
    const cJSON *tpls = cJSON_GetObjectItemCaseSensitive(j, "templates");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases");
    int64_t now = (int64_t)cJSON_GetObjectItemCaseSensitive(j, "now")->valuedouble;
    int n = 0, bad = 0, n_err = 0, n_plain = 0;
    for (const cJSON *c = cases ? cases->child : NULL; c; c = c->next) {
        n++;
        n_err += cJSON_GetObjectItemCaseSensitive(c, "error") != NULL;
        bad += run_case(tpls, c, now, &n_plain);
    }
    print_message("%s: %d templates, %d cases (%d raise, %d also through chat_msg), %d mismatches\n",
                  path, cJSON_GetArraySize(tpls), n, n_err, n_plain, bad);
    cJSON_Delete(j);
    assert_true(n >= 100);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
