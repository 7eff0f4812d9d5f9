/* chat.c - chat template detection and rendering; see chat.h.
 *
 * Every family is written as a sequence of two kinds of appends: tpl() for
 * template text, recorded as a segment, and body() for message content,
 * which is not. Keeping the split at the point of writing is what makes the
 * segments exact: nothing has to be re-parsed afterwards. */
#include "chat.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "jinja.h"
#include "strbuf.h"

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL, R_BAD };

static int role_of(const char *r) {
    if (!r) return R_BAD;
    if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0) return R_SYSTEM;
    if (strcmp(r, "user") == 0) return R_USER;
    if (strcmp(r, "assistant") == 0) return R_ASSISTANT;
    if (strcmp(r, "tool") == 0) return R_TOOL;
    return R_BAD;
}

/* ---- detection ---------------------------------------------------------- */

static int has(const char *s, size_t len, const char *marker) {
    size_t m = strlen(marker);
    if (m > len) return 0;
    for (size_t i = 0; i + m <= len; i++)
        if (s[i] == marker[0] && memcmp(s + i, marker, m) == 0) return 1;
    return 0;
}

chat_family chat_detect(const char *jinja, size_t len) {
    if (!jinja || len == 0) return CHAT_DEFAULT;
    /* Most specific first: "<|user|>" alone would match Phi-3 too, and
     * "[INST]" alone would match Llama 2 too. */
    if (has(jinja, len, "<|im_start|>"))
        return has(jinja, len, "<|im_sep|>") ? CHAT_DEFAULT : CHAT_CHATML;
    if (has(jinja, len, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (has(jinja, len, "<start_of_turn>")) return CHAT_GEMMA;
    if (has(jinja, len, "[INST]"))
        return has(jinja, len, "<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    if (has(jinja, len, "<|user|>"))
        return has(jinja, len, "<|end|>") ? CHAT_PHI3 : CHAT_ZEPHYR;
    return CHAT_DEFAULT;
}

const char *chat_family_name(chat_family f) {
    static const char *const names[CHAT_N_FAMILIES] = {
        [CHAT_DEFAULT] = "default", [CHAT_CHATML] = "chatml",
        [CHAT_LLAMA3] = "llama3",   [CHAT_LLAMA2] = "llama2",
        [CHAT_MISTRAL] = "mistral", [CHAT_ZEPHYR] = "zephyr",
        [CHAT_GEMMA] = "gemma",     [CHAT_PHI3] = "phi3",
    };
    if ((int)f < 0 || f >= CHAT_N_FAMILIES) return "unknown";
    return names[f];
}

/* ---- writer ------------------------------------------------------------- */

typedef struct wr {
    strbuf text;
    chat_seg *segs;               /* (cap_segs) NULL when not tracking */
    size_t n_segs, cap_segs;
    int track;                    /* record template segments */
    int segs_failed;              /* sticky: growing segs ran out of memory */
} wr;

/* Room for one more segment; -1 when out of memory. */
static int segs_reserve(wr *w) {
    if (w->n_segs < w->cap_segs) return 0;
    size_t cap = w->cap_segs ? w->cap_segs * 2 : 16;
    if (cap > SIZE_MAX / sizeof *w->segs) return -1;
    chat_seg *q = realloc(w->segs, cap * sizeof *q);
    if (!q) return -1;
    w->segs = q;
    w->cap_segs = cap;
    return 0;
}

/* Template text: appended and, when tracking, recorded (merged with the
 * previous segment when they touch). */
static void tpl(wr *w, const char *s) {
    size_t n = strlen(s), off = w->text.len;
    strbuf_put(&w->text, s, n);
    if (strbuf_failed(&w->text) || w->segs_failed || !w->track || n == 0) return;
    if (w->n_segs > 0) {
        chat_seg *last = &w->segs[w->n_segs - 1];
        if (last->off + last->len == off) {
            last->len += n;
            return;
        }
    }
    if (segs_reserve(w)) {
        w->segs_failed = 1;
        return;
    }
    w->segs[w->n_segs++] = (chat_seg){off, n};
}

/* Message content: appended, never a segment. */
static void body(wr *w, const char *s, size_t n) { strbuf_put(&w->text, s, n); }

/* ---- trimming ----------------------------------------------------------- */

typedef struct span {
    const char *p;
    size_t n;
} span;

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static span rtrim(span s) {
    while (s.n > 0 && is_ws(s.p[s.n - 1])) s.n--;
    return s;
}

/* Jinja's |trim and Python's str.strip(), for ASCII whitespace. */
static span trim(span s) {
    while (s.n > 0 && is_ws(s.p[0])) {
        s.p++;
        s.n--;
    }
    return rtrim(s);
}

static span text_of(const chat_msg *m) { return (span){m->content, m->content_len}; }

/* ---- families with a turn per role -------------------------------------- */

static void render_default(wr *w, const chat_msg *m, const int *role, int n) {
    static const char *const prefix[] = {"system: ", "user: ", "assistant: ", "tool: "};
    for (int i = 0; i < n; i++) {
        tpl(w, prefix[role[i]]);
        body(w, m[i].content, m[i].content_len);
        tpl(w, "\n");
    }
    tpl(w, "assistant:");
}

static void render_chatml(wr *w, const chat_msg *m, const int *role, int n) {
    static const char *const open[] = {
        "<|im_start|>system\n", "<|im_start|>user\n", "<|im_start|>assistant\n",
        "<|im_start|>tool\n"};
    for (int i = 0; i < n; i++) {
        tpl(w, open[role[i]]);
        body(w, m[i].content, m[i].content_len);
        tpl(w, "<|im_end|>\n");
    }
    tpl(w, "<|im_start|>assistant\n");
}

static void render_llama3(wr *w, const chat_msg *m, const int *role, int n) {
    static const char *const open[] = {
        "<|start_header_id|>system<|end_header_id|>\n\n",
        "<|start_header_id|>user<|end_header_id|>\n\n",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|start_header_id|>ipython<|end_header_id|>\n\n"};   /* Llama 3.1 tools */
    tpl(w, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) {
        span c = trim(text_of(&m[i]));
        tpl(w, open[role[i]]);
        body(w, c.p, c.n);
        tpl(w, "<|eot_id|>");
    }
    tpl(w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Zephyr and Phi-3 differ only in the end-of-turn text; neither has a tool
 * role, so tools speak as the user. */
static void render_tagged(wr *w, const chat_msg *m, const int *role, int n,
                          const char *eot) {
    static const char *const open[] = {"<|system|>\n", "<|user|>\n", "<|assistant|>\n",
                                       "<|user|>\n"};
    for (int i = 0; i < n; i++) {
        tpl(w, open[role[i]]);
        body(w, m[i].content, m[i].content_len);
        tpl(w, eot);
    }
    tpl(w, "<|assistant|>\n");
}

/* ---- families without a free-standing system turn ----------------------- */

/* System messages held for the next user turn: msgs[first .. first+count). */
typedef struct held {
    int first, count;
} held;

/* The held system texts, joined by blank lines, as content. */
static void held_body(wr *w, const chat_msg *m, held h) {
    for (int i = 0; i < h.count; i++) {
        if (i) tpl(w, "\n\n");
        body(w, m[h.first + i].content, m[h.first + i].content_len);
    }
}

/* One user turn of the family f carrying the held system prompt (if any)
 * and the user text u (NULL for a system prompt standing alone). */
static void user_turn(wr *w, chat_family f, const chat_msg *m, held h, const span *u) {
    span t = u ? *u : (span){"", 0};
    switch (f) {
    case CHAT_LLAMA2:
        /* The template strips the whole "<<SYS>>...<</SYS>>\n\n" + user
         * text, so with a system block only the user text's tail is trimmed,
         * and an empty user text takes the blank line with it. */
        tpl(w, "<s>[INST] ");
        if (h.count) {
            tpl(w, "<<SYS>>\n");
            held_body(w, m, h);
            tpl(w, "\n<</SYS>>");
            t = rtrim(t);
            if (t.n) tpl(w, "\n\n");
        } else {
            t = trim(t);
        }
        body(w, t.p, t.n);
        tpl(w, " [/INST]");
        break;
    case CHAT_MISTRAL:
        tpl(w, "[INST] ");
        if (h.count) {
            held_body(w, m, h);
            if (u) tpl(w, "\n\n");
        }
        body(w, t.p, t.n);
        tpl(w, " [/INST]");
        break;
    default: /* CHAT_GEMMA */
        tpl(w, "<start_of_turn>user\n");
        if (h.count) {
            held_body(w, m, h);
            if (u) tpl(w, "\n\n");
        }
        t = trim(t);
        body(w, t.p, t.n);
        tpl(w, "<end_of_turn>\n");
        break;
    }
}

static void assistant_turn(wr *w, chat_family f, const chat_msg *a) {
    span t = text_of(a);
    switch (f) {
    case CHAT_LLAMA2:
        t = trim(t);
        tpl(w, " ");
        body(w, t.p, t.n);
        tpl(w, " </s>");
        break;
    case CHAT_MISTRAL:
        body(w, t.p, t.n);
        tpl(w, "</s>");
        break;
    default: /* CHAT_GEMMA */
        t = trim(t);
        tpl(w, "<start_of_turn>model\n");
        body(w, t.p, t.n);
        tpl(w, "<end_of_turn>\n");
        break;
    }
}

static void render_folded(wr *w, chat_family f, const chat_msg *m, const int *role,
                          int n) {
    held h = {0, 0};
    if (f == CHAT_MISTRAL) tpl(w, "<s>");
    if (f == CHAT_GEMMA) tpl(w, "<bos>");
    for (int i = 0; i < n; i++) {
        if (role[i] == R_SYSTEM) {
            if (h.count == 0) h.first = i;
            h.count++;
            continue;
        }
        if (role[i] == R_ASSISTANT) {
            if (h.count) user_turn(w, f, m, h, NULL);
            h.count = 0;
            assistant_turn(w, f, &m[i]);
            continue;
        }
        span u = text_of(&m[i]);                     /* user or tool */
        user_turn(w, f, m, h, &u);
        h.count = 0;
    }
    if (h.count) user_turn(w, f, m, h, NULL);
    /* Llama 2 and Mistral: the closing [/INST] already opens the answer. */
    if (f == CHAT_GEMMA) tpl(w, "<start_of_turn>model\n");
}

/* ---- entry points ------------------------------------------------------- */

int chat_render_segs(chat_family f, const chat_msg *msgs, int n,
                     char **out, size_t *len, int *add_bos,
                     chat_seg **segs, size_t *n_segs) {
    *out = NULL;
    *len = 0;
    *add_bos = 0;
    if (segs) *segs = NULL;
    if (n_segs) *n_segs = 0;
    if (!msgs || n < 1 || (int)f < 0 || f >= CHAT_N_FAMILIES) return TS_ERR_INVAL;
    int *role = malloc((size_t)n * sizeof *role);
    if (!role) return TS_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        role[i] = role_of(msgs[i].role);
        if (role[i] == R_BAD || (!msgs[i].content && msgs[i].content_len > 0)) {
            free(role);
            return TS_ERR_INVAL;
        }
    }

    wr w = {.text = STRBUF_INIT, .track = segs != NULL};
    int bos_in_text = 0;
    switch (f) {
    case CHAT_DEFAULT: render_default(&w, msgs, role, n); break;
    case CHAT_CHATML: render_chatml(&w, msgs, role, n); break;
    case CHAT_LLAMA3: render_llama3(&w, msgs, role, n); bos_in_text = 1; break;
    case CHAT_ZEPHYR: render_tagged(&w, msgs, role, n, "</s>\n"); break;
    case CHAT_PHI3: render_tagged(&w, msgs, role, n, "<|end|>\n"); break;
    default:
        render_folded(&w, f, msgs, role, n);
        bos_in_text = 1;
        break;
    }
    free(role);
    char *text = strbuf_steal(&w.text, len);
    if (!text || w.segs_failed) {
        free(text);
        free(w.segs);
        *len = 0;
        return TS_ERR_NOMEM;
    }
    *out = text;
    *add_bos = !bos_in_text;
    if (segs) {
        *segs = w.segs;
        *n_segs = w.n_segs;
    }
    return 0;
}

int chat_render(chat_family f, const chat_msg *msgs, int n,
                char **out, size_t *len, int *add_bos) {
    return chat_render_segs(f, msgs, n, out, len, add_bos, NULL, NULL);
}

/* text tokenized into ids: special tokens by their text inside the
 * template segments only, the text between them as one fragment whatever
 * segments it crosses (tks_encode_spans: a content fragment encoded on its
 * own would get a second SPM space prefix and other merges), BOS first
 * when add_bos and the vocabulary wants it. */
static int encode_segs(const char *text, size_t len, const chat_seg *segs, size_t n_segs,
                       int add_bos, const tok *t, const tks_set *specials, tks_ids *ids) {
    return tks_encode_spans(specials, text, len, segs, n_segs, add_bos && tok_add_bos(t), ids);
}

int chat_tokenize(chat_family f, const chat_msg *msgs, int n, const tok *t, const tks_set *specials,
                  tks_ids *ids) {
    char *text = NULL;
    size_t len = 0, n_segs = 0;
    int add_bos = 0;
    chat_seg *segs = NULL;
    int rc = chat_render_segs(f, msgs, n, &text, &len, &add_bos, &segs, &n_segs);
    if (!rc) rc = encode_segs(text, len, segs, n_segs, add_bos, t, specials, ids);
    free(text);
    free(segs);
    return rc;
}

/* ---- compiled templates -------------------------------------------------- */

struct chat_tpl {
    jj_tpl *jj;
    char *bos, *eos;            /* NULL when the model has none */
};

int chat_tpl_new(const char *jinja, size_t len, const char *bos_token, const char *eos_token,
                 chat_tpl **out, char *err, size_t errlen) {
    *out = NULL;
    if (!jinja || !len) return err_set(err, errlen, TS_ERR_INVAL, "empty chat template");
    chat_tpl *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    int rc = jj_parse(jinja, len, &t->jj, err, errlen);
    if (rc) goto err;
    rc = TS_ERR_NOMEM;
    if (bos_token && !(t->bos = strdup(bos_token))) goto err;
    if (eos_token && !(t->eos = strdup(eos_token))) goto err;
    *out = t;
    return 0;
err:
    if (rc == TS_ERR_NOMEM) err_set(err, errlen, rc, "out of memory");
    chat_tpl_free(t);
    return rc;
}

void chat_tpl_free(chat_tpl *t) {
    if (!t) return;
    jj_free(t->jj);
    free(t->bos);
    free(t->eos);
    free(t);
}

int chat_tpl_has_bos(const chat_tpl *t, const char *text, size_t len) {
    size_t n = t && t->bos ? strlen(t->bos) : 0;
    return n > 0 && len >= n && memcmp(text, t->bos, n) == 0;
}

/* The messages as the interpreter takes them; "developer" speaks as
 * "system", since no published template knows the newer name. */
static int tpl_msgs(const chat_msg *msgs, int n, jj_msg **out, char *err, size_t errlen) {
    *out = NULL;
    if (n == 0) return 0;
    jj_msg *m = malloc((size_t)n * sizeof *m);
    if (!m) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int r = role_of(msgs[i].role);
        if (r == R_BAD || (!msgs[i].content && msgs[i].content_len > 0)) {
            free(m);
            return err_set(err, errlen, TS_ERR_INVAL, "message %d: bad role or content", i);
        }
        m[i] = (jj_msg){r == R_SYSTEM ? "system" : msgs[i].role, msgs[i].content,
                        msgs[i].content_len};
    }
    *out = m;
    return 0;
}

int chat_tpl_render_req(const chat_tpl *t, const chat_tpl_req *req, char **out, size_t *len,
                        int *add_bos, chat_seg **segs, size_t *n_segs, char *err, size_t errlen) {
    *out = NULL;
    *len = 0;
    if (add_bos) *add_bos = 0;
    if (segs) *segs = NULL;
    if (n_segs) *n_segs = 0;
    int vars_msgs = req->vars && cJSON_GetObjectItemCaseSensitive(req->vars, "messages");
    if (!t || (!vars_msgs && (!req->msgs || req->n < 1)) || req->n < 0)
        return err_set(err, errlen, TS_ERR_INVAL, "no messages");
    jj_msg *m = NULL;
    int rc = tpl_msgs(req->msgs, req->msgs ? req->n : 0, &m, err, errlen);
    if (rc) return rc;
    const char *trusted[5] = {NULL}, **tp = trusted;
    if (t->bos) { *tp++ = "bos_token"; *tp++ = t->bos; }
    if (t->eos) { *tp++ = "eos_token"; *tp++ = t->eos; }
    jj_input in = {.msgs = m, .n_msgs = m ? req->n : 0, .data = req->vars,
                   .add_generation_prompt = req->add_generation_prompt, .trusted = trusted,
                   .now = req->now};
    jj_span *sp = NULL;
    size_t ns = 0;
    rc = jj_render(t->jj, &in, out, len, segs ? &sp : NULL, &ns, err, errlen);
    free(m);
    if (!rc && segs && ns) {
        chat_seg *cs = malloc(ns * sizeof *cs);
        if (!cs) {
            free(*out);
            *out = NULL;
            *len = 0;
            rc = err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
        } else {
            for (size_t i = 0; i < ns; i++) cs[i] = (chat_seg){sp[i].off, sp[i].len};
            *segs = cs;
            *n_segs = ns;
        }
    }
    free(sp);
    if (!rc && add_bos) *add_bos = !chat_tpl_has_bos(t, *out, *len);
    return rc;
}

int chat_tpl_render(const chat_tpl *t, const chat_msg *msgs, int n, int add_generation_prompt,
                    char **out, size_t *len, chat_seg **segs, size_t *n_segs, char *err,
                    size_t errlen) {
    chat_tpl_req req = {msgs, n, add_generation_prompt, (int64_t)time(NULL), NULL};
    return chat_tpl_render_req(t, &req, out, len, NULL, segs, n_segs, err, errlen);
}

int chat_tpl_tokenize_req(const chat_tpl *t, const chat_tpl_req *req, const tok *tk,
                          const tks_set *specials, tks_ids *ids, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0, n_segs = 0;
    int add_bos = 0;
    chat_seg *segs = NULL;
    int rc = chat_tpl_render_req(t, req, &text, &len, &add_bos, &segs, &n_segs, err, errlen);
    if (!rc) {
        rc = encode_segs(text, len, segs, n_segs, add_bos, tk, specials, ids);
        if (rc) err_set(err, errlen, rc, "tokenizing the rendered chat: %s", err_str(rc));
    }
    free(text);
    free(segs);
    return rc;
}

int chat_tpl_tokenize(const chat_tpl *t, const chat_msg *msgs, int n, int add_generation_prompt,
                      const tok *tk, const tks_set *specials, tks_ids *ids, char *err,
                      size_t errlen) {
    chat_tpl_req req = {msgs, n, add_generation_prompt, (int64_t)time(NULL), NULL};
    return chat_tpl_tokenize_req(t, &req, tk, specials, ids, err, errlen);
}
