/* loadgen.c - the open-loop client; see loadgen.h.
 *
 * One loop over epoll, with libcurl's socket interface (the "hiperfifo"
 * pattern): libcurl says which sockets to watch and when its own timer is
 * due; the loop sends what is due, sleeps in epoll_wait until a socket is
 * ready, the next request is due or libcurl's timer fires, and hands exactly
 * the ready sockets to curl_multi_socket_action. The work per wake-up is in
 * proportion to the sockets that moved, not to the requests open, so the
 * client stays cheap with thousands of streams open. That matters here: the
 * client usually shares the machine with the server it measures, and every
 * cycle it burns is taken from the server (curl_multi_perform, which visits
 * every open transfer on every call, cost a fifth of a core at 800 open
 * streams on the 2-core test machine).
 *
 * Each open request has a slot (its easy handle, body, SSE line buffer and
 * event times); slots are kept in a free list and reused, so a long run
 * allocates about as many as were ever open at once.
 */
#include "loadgen.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "rng.h"
#include "strbuf.h"

#define LINE_MAX_BYTES (1u << 20)   /* an SSE line longer than this breaks the stream */
#define ERR_BODY_BYTES 300          /* of an error body, kept for the first-error notes */
#define MAX_NOTED 16                /* distinct statuses whose first error is printed */

typedef struct run run;

typedef struct slot {
    run *run;
    CURL *h;
    size_t idx;               /* into the schedule and the records */
    char *body;
    char *line;               /* bytes of the current SSE line, or of an error body */
    size_t len, cap;
    int done_seen;            /* data: [DONE] arrived */
    int stream_err;           /* an error event, bad JSON or an overlong line */
    int usage_seen;
    float *ev;                /* content event times */
    int n_ev, cap_ev;
    char errbuf[CURL_ERROR_SIZE];
    char stream_msg[160];     /* the message of an error event, for the first-error note */
    struct slot *next_free;
} slot;

struct run {
    const scn *s;
    const arr_event *ev;
    rpt_req *r;
    const lg_opts *o;
    struct timespec t0;
    CURLM *m;
    struct curl_slist **hdrs; /* (n_tenants) */
    char endpoint[600];
    slot *free_slots;
    slot **all;               /* every slot ever made, for the final free */
    size_t n_all, cap_all;
    int open;
    size_t sent, completed, errors;
    int noted[MAX_NOTED];
    int n_noted;
    int tty;
    double last_progress;
    int ep;                   /* epoll descriptor */
    double curl_due;          /* s; when libcurl's timer fires; < 0: not set */
};

static double now_s(const run *R) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - R->t0.tv_sec) + (double)(t.tv_nsec - R->t0.tv_nsec) * 1e-9;
}

int lg_url_check(const char *url, char *err, size_t errlen) {
    CURLU *u = curl_url();
    if (!u) return TS_ERR_NOMEM;
    char *scheme = NULL, *user = NULL, *path = NULL, *query = NULL, *frag = NULL, *host = NULL;
    const char *why = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) why = "not a URL";
    else {
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        curl_url_get(u, CURLUPART_HOST, &host, 0);
        curl_url_get(u, CURLUPART_USER, &user, 0);
        curl_url_get(u, CURLUPART_PATH, &path, 0);
        curl_url_get(u, CURLUPART_QUERY, &query, 0);
        curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
        if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https"))) why = "the scheme must be http or https";
        else if (!host || !*host) why = "no host";
        else if (user) why = "credentials in the URL are not accepted (keys come from the scenario)";
        else if (path && strcmp(path, "/") && *path) why = "give the server's base URL, without a path";
        else if (query || frag) why = "no query or fragment";
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(path);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    if (why) {
        if (err && errlen) snprintf(err, errlen, "bad --url '%s': %s (like http://127.0.0.1:8080)", url, why);
        return TS_ERR_INVAL;
    }
    return 0;
}

/* ---- request bodies --------------------------------------------------------- */

/* The JSON body of request e. Scenario names and models were checked to hold
 * no quote, backslash or control character, so they print as they are. The
 * prompt's ids (or words) come from e's own seed, so a request's body does
 * not depend on which others were sent. */
static char *make_body(const scn *s, const arr_event *e) {
    strbuf b = STRBUF_INIT;
    rng r;
    rng_seed_stream(&r, e->seed, 0);
    uint64_t span = (uint64_t)(s->token_max - s->token_min) + 1;
    strbuf_printf(&b, "{\"model\":\"%s\",", s->model);
    if (!s->chat) {
        strbuf_puts(&b, "\"prompt\":[");
        for (int32_t i = 0; i < e->prompt_tokens && !strbuf_failed(&b); i++)
            strbuf_printf(&b, "%s%lld", i ? "," : "", (long long)(s->token_min + (int64_t)(rng_next(&r) % span)));
        strbuf_puts(&b, "],");
    } else {
        strbuf_puts(&b, "\"messages\":[{\"role\":\"user\",\"content\":\"");
        for (int32_t i = 0; i < e->prompt_tokens && !strbuf_failed(&b); i++) {
            char w[8];
            int wl = 3 + (int)(rng_next(&r) % 4);
            for (int c = 0; c < wl; c++) w[c] = (char)('a' + rng_next(&r) % 26);
            w[wl] = 0;
            strbuf_printf(&b, "%s%s", i ? " " : "", w);
        }
        strbuf_puts(&b, "\"}],");
    }
    strbuf_printf(&b,
                  "\"max_tokens\":%d,\"temperature\":%g,\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true}",
                  (int)e->output_tokens, s->temperature);
    return strbuf_steal(&b, NULL);
}

/* ---- responses -------------------------------------------------------------- */

static int add_event(slot *sl, double t) {
    if (sl->n_ev == sl->cap_ev) {
        int nc = sl->cap_ev ? sl->cap_ev * 2 : 64;
        float *g = realloc(sl->ev, (size_t)nc * sizeof *g);
        if (!g) return -1;
        sl->ev = g;
        sl->cap_ev = nc;
    }
    sl->ev[sl->n_ev++] = (float)t;
    return 0;
}

void lg_curl_safe(CURL *h) {
    /* Only ever the URL given: no redirects, no proxy from the environment,
     * no other protocol. */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
}

const char *lg_error_message(const cJSON *j) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!e) return NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    return cJSON_IsString(m) ? m->valuestring : "";
}

/* One SSE line of a 200 stream. Only data: lines matter; tessera and the
 * OpenAI API put each JSON event on one line. */
static void on_line(slot *sl, char *line, size_t len) {
    run *R = sl->run;
    rpt_req *q = &R->r[sl->idx];
    if (len < 5 || memcmp(line, "data:", 5)) return;
    line += 5;
    len -= 5;
    if (len && *line == ' ') line++, len--;
    if (len == 6 && !memcmp(line, "[DONE]", 6)) {
        sl->done_seen = 1;
        return;
    }
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j) {
        snprintf(sl->stream_msg, sizeof sl->stream_msg, "an SSE data line that is not JSON");
        sl->stream_err = 1;
        return;
    }
    const char *em = lg_error_message(j);
    if (em) {
        snprintf(sl->stream_msg, sizeof sl->stream_msg, "error event: %s", *em ? em : "(no message)");
        sl->stream_err = 1;
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *text = R->s->chat ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "delta"), "content")
                                   : cJSON_GetObjectItemCaseSensitive(ch, "text");
    if (cJSON_IsString(text) && text->valuestring[0]) {
        double t = now_s(R);
        if (q->t_first < 0) q->t_first = t;
        if (add_event(sl, t)) sl->stream_err = 1;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    if (cJSON_IsNumber(pt) && cJSON_IsNumber(ct)) {
        q->n_prompt = (int32_t)pt->valuedouble;
        q->n_out = (int32_t)ct->valuedouble;
        sl->usage_seen = 1;
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud) {
    slot *sl = ud;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(sl->h, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) {
        /* Keep the start of an error body for the first-error note. */
        size_t k = sl->len < ERR_BODY_BYTES ? ERR_BODY_BYTES - sl->len : 0;
        if (k > n) k = n;
        if (k && sl->len + k + 1 <= sl->cap) {
            memcpy(sl->line + sl->len, p, k);
            sl->len += k;
            sl->line[sl->len] = 0;
        }
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\n') {
            if (sl->len && sl->line[sl->len - 1] == '\r') sl->len--;
            sl->line[sl->len] = 0;
            on_line(sl, sl->line, sl->len);
            sl->len = 0;
            continue;
        }
        if (sl->len + 2 > sl->cap) {
            size_t nc = sl->cap * 2;
            char *g = nc <= LINE_MAX_BYTES ? realloc(sl->line, nc) : NULL;
            if (!g) {
                sl->stream_err = 1;
                return 0;   /* ends the transfer with CURLE_WRITE_ERROR */
            }
            sl->line = g;
            sl->cap = nc;
        }
        sl->line[sl->len++] = c;
    }
    return n;
}

/* ---- slots ------------------------------------------------------------------ */

static slot *slot_get(run *R) {
    slot *sl = R->free_slots;
    if (sl) {
        R->free_slots = sl->next_free;
        curl_easy_reset(sl->h);
    } else {
        if (R->n_all == R->cap_all) {
            size_t nc = R->cap_all ? R->cap_all * 2 : 64;
            slot **g = realloc(R->all, nc * sizeof *g);
            if (!g) return NULL;
            R->all = g;
            R->cap_all = nc;
        }
        sl = calloc(1, sizeof *sl);
        if (!sl) return NULL;
        sl->h = curl_easy_init();
        sl->cap = 4096;
        sl->line = malloc(sl->cap);
        if (!sl->h || !sl->line) {
            curl_easy_cleanup(sl->h);
            free(sl->line);
            free(sl);
            return NULL;
        }
        sl->run = R;
        R->all[R->n_all++] = sl;
    }
    sl->len = 0;
    sl->done_seen = sl->stream_err = sl->usage_seen = 0;
    sl->ev = NULL;
    sl->n_ev = sl->cap_ev = 0;
    sl->errbuf[0] = 0;
    sl->stream_msg[0] = 0;
    return sl;
}

static void slot_put(run *R, slot *sl) {
    free(sl->body);
    sl->body = NULL;
    free(sl->ev);
    sl->ev = NULL;
    sl->next_free = R->free_slots;
    R->free_slots = sl;
}

/* Print the first error of each distinct status, so a wrong key or model is
 * obvious at once rather than only as a count at the end. */
static void note_error(run *R, const slot *sl, int status) {
    for (int i = 0; i < R->n_noted; i++)
        if (R->noted[i] == status) return;
    if (R->n_noted == MAX_NOTED) return;
    R->noted[R->n_noted++] = status;
    const rpt_req *q = &R->r[sl->idx];
    char b[16];
    const char *what = status == RPT_ST_TRANSPORT ? sl->errbuf
                       : status != RPT_ST_STREAM  ? sl->line
                       : sl->stream_msg[0]        ? sl->stream_msg
                                                  : "the stream ended without data: [DONE]";
    if (R->tty && R->o->progress) fputc('\n', stderr);
    fprintf(stderr, "bench: first %s from tenant %s: %.*s\n", rpt_status_name(status, b),
            R->s->tenants[q->tenant].name, ERR_BODY_BYTES, what);
}

/* A transfer ended: record it and free its slot. */
static void finish(run *R, slot *sl, CURLcode res, int aborted) {
    rpt_req *q = &R->r[sl->idx];
    q->t_end = now_s(R);
    long code = 0;
    curl_easy_getinfo(sl->h, CURLINFO_RESPONSE_CODE, &code);
    if (aborted) q->status = RPT_ST_ABORTED;
    else if (res != CURLE_OK && !(res == CURLE_WRITE_ERROR && sl->stream_err)) q->status = RPT_ST_TRANSPORT;
    else if (code == 200) q->status = sl->stream_err || !sl->done_seen ? RPT_ST_STREAM : 200;
    else q->status = code > 0 ? (int)code : RPT_ST_TRANSPORT;
    if (code != 200) sl->line[sl->len < sl->cap ? sl->len : sl->cap - 1] = 0;
    if (!sl->usage_seen) q->n_out = sl->n_ev;
    q->n_events = sl->n_ev;
    q->ev_t = sl->ev;         /* handed over */
    sl->ev = NULL;
    curl_multi_remove_handle(R->m, sl->h);
    R->open--;
    if (q->status == 200) R->completed++;
    else {
        R->errors++;
        if (q->status != RPT_ST_ABORTED) note_error(R, sl, q->status);
    }
    slot_put(R, sl);
}

static void skip(run *R, size_t i, double t) {
    rpt_req *q = &R->r[i];
    q->status = RPT_ST_SKIPPED;
    q->t_sent = q->t_end = t;
    R->errors++;
}

/* Send request i now. */
static int start(run *R, size_t i) {
    const arr_event *e = &R->ev[i];
    rpt_req *q = &R->r[i];
    memset(q, 0, sizeof *q);
    q->tenant = e->tenant;
    q->t_sched = e->t_s;
    q->t_first = -1;
    q->t_end = -1;
    q->n_prompt = e->prompt_tokens;
    double t = now_s(R);
    if (R->open >= R->s->max_in_flight) {
        skip(R, i, t);
        return 0;
    }
    slot *sl = slot_get(R);
    if (!sl) return TS_ERR_NOMEM;
    sl->idx = i;
    if (!(sl->body = make_body(R->s, e))) {
        slot_put(R, sl);
        return TS_ERR_NOMEM;
    }
    CURL *h = sl->h;
    curl_easy_setopt(h, CURLOPT_URL, R->endpoint);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, sl->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(sl->body));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, R->hdrs[e->tenant]);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sl);
    curl_easy_setopt(h, CURLOPT_PRIVATE, sl);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, sl->errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(R->o->connect_timeout_s * 1e3));
    lg_curl_safe(h);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (curl_multi_add_handle(R->m, h) != CURLM_OK) {
        slot_put(R, sl);
        return TS_ERR_NOMEM;
    }
    q->t_sent = t;
    R->open++;
    R->sent++;
    return 0;
}

static void abort_all(run *R) {
    for (size_t i = 0; i < R->n_all; i++) {
        slot *sl = R->all[i];
        if (sl->body) finish(R, sl, CURLE_OK, 1);   /* a slot with a body is open */
    }
}

static void progress(run *R, double t, double send_end, int final) {
    if (!R->o->progress) return;
    double every = R->tty ? 0.5 : 5.0;
    if (!final && t - R->last_progress < every) return;
    R->last_progress = t;
    char line[200];
    snprintf(line, sizeof line, "bench %s: %6.1fs/%.0fs  sent %zu  completed %zu  errors %zu  open %d", R->s->name, t,
             send_end, R->sent, R->completed, R->errors, R->open);
    if (R->tty) fprintf(stderr, "\r%-100s%s", line, final ? "\n" : "");
    else fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

/* libcurl: watch socket fd for what (CURL_POLL_*). socketp is non-NULL once
 * the socket is in the epoll set (curl_multi_assign keeps that for us). */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy;
    run *R = userp;
    if (what == CURL_POLL_REMOVE) {
        if (socketp) epoll_ctl(R->ep, EPOLL_CTL_DEL, fd, NULL);
        curl_multi_assign(R->m, fd, NULL);
        return 0;
    }
    struct epoll_event e = {0};
    e.data.fd = fd;
    e.events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    if (epoll_ctl(R->ep, socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) != 0) return -1;
    if (!socketp) curl_multi_assign(R->m, fd, R);   /* any non-NULL mark */
    return 0;
}

/* libcurl: call back after timeout_ms (-1: cancel). Never act from here:
 * the loop does, when the time comes. */
static int on_timer(CURLM *m, long timeout_ms, void *userp) {
    (void)m;
    run *R = userp;
    R->curl_due = timeout_ms < 0 ? -1 : now_s(R) + (double)timeout_ms * 1e-3;
    return 0;
}

static void collect(run *R) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(R->m, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        slot *sl = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&sl);
        if (sl) finish(R, sl, msg->data.result, 0);
    }
}

static void run_free(run *R) {
    for (size_t i = 0; i < R->n_all; i++) {
        curl_easy_cleanup(R->all[i]->h);
        free(R->all[i]->line);
        free(R->all[i]->body);
        free(R->all[i]->ev);
        free(R->all[i]);
    }
    free(R->all);
    for (int i = 0; R->hdrs && i < R->s->n_tenants; i++) curl_slist_free_all(R->hdrs[i]);
    free(R->hdrs);
    if (R->m) curl_multi_cleanup(R->m);
    if (R->ep >= 0) close(R->ep);
}

int lg_run(const scn *s, const arr_event *ev, size_t n, const lg_opts *o, rpt_req *r, size_t *n_done,
           double *run_s, char *err, size_t errlen) {
    *n_done = 0;
    *run_s = 0;
    int rc = lg_url_check(o->url, err, errlen);
    if (rc) return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        if (err && errlen) snprintf(err, errlen, "libcurl failed to initialise");
        return TS_ERR_IO;
    }
    run R;
    memset(&R, 0, sizeof R);
    R.s = s;
    R.ev = ev;
    R.r = r;
    R.o = o;
    R.tty = isatty(STDERR_FILENO);
    size_t ul = strlen(o->url);
    while (ul && o->url[ul - 1] == '/') ul--;
    snprintf(R.endpoint, sizeof R.endpoint, "%.*s%s", (int)ul, o->url, s->chat ? "/v1/chat/completions" : "/v1/completions");
    R.curl_due = -1;
    R.ep = epoll_create1(EPOLL_CLOEXEC);
    R.m = curl_multi_init();
    R.hdrs = calloc((size_t)s->n_tenants, sizeof *R.hdrs);
    rc = R.m && R.hdrs && R.ep >= 0 ? 0 : TS_ERR_NOMEM;
    for (int i = 0; !rc && i < s->n_tenants; i++) {
        char auth[600];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", s->tenants[i].key);
        struct curl_slist *h = NULL, *g;
        const char *lines[] = {auth, "Content-Type: application/json", "Accept: text/event-stream",
                               "Expect:"};   /* no 100-continue round trip for big prompts */
        for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
            if (!(g = curl_slist_append(h, lines[k]))) {
                rc = TS_ERR_NOMEM;
                break;
            }
            h = g;
        }
        R.hdrs[i] = h;
    }
    if (rc) {
        run_free(&R);
        curl_global_cleanup();
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return rc;
    }
    /* Keep every connection for reuse: a run has at most max_in_flight open. */
    curl_multi_setopt(R.m, CURLMOPT_MAXCONNECTS, (long)s->max_in_flight);
    curl_multi_setopt(R.m, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(R.m, CURLMOPT_SOCKETDATA, &R);
    curl_multi_setopt(R.m, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(R.m, CURLMOPT_TIMERDATA, &R);

    double send_end = o->send_s > 0 ? o->send_s : (n ? ev[n - 1].t_s : 0);
    double cut_at = send_end + o->drain_s;
    if (o->hard_s > 0 && cut_at > o->hard_s) cut_at = o->hard_s;
    size_t next = 0;
    clock_gettime(CLOCK_MONOTONIC, &R.t0);
    R.last_progress = -1e9;
    int stopped = 0;
    for (;;) {
        double t = now_s(&R);
        if (o->stop && *o->stop) {
            stopped = 1;
            abort_all(&R);
            break;
        }
        while (!rc && next < n && ev[next].t_s <= t && ev[next].t_s < send_end + 1e-9)
            rc = start(&R, next++);
        if (rc) {
            abort_all(&R);
            if (err && errlen) snprintf(err, errlen, "out of memory while sending");
            break;
        }
        /* Events past the send window are not due in this run. */
        if (next < n && ev[next].t_s >= send_end + 1e-9) n = next;
        int running;
        if (R.curl_due >= 0 && now_s(&R) >= R.curl_due) {
            R.curl_due = -1;
            curl_multi_socket_action(R.m, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        collect(&R);
        t = now_s(&R);
        progress(&R, t, send_end, 0);
        if (next >= n && R.open == 0) break;
        if (t >= cut_at) {
            abort_all(&R);
            break;
        }
        double wake = cut_at;
        if (next < n && ev[next].t_s < wake) wake = ev[next].t_s;
        if (R.curl_due >= 0 && R.curl_due < wake) wake = R.curl_due;
        double wait = wake - t;
        if (wait > 0.1) wait = 0.1;   /* the progress line and the stop flag */
        /* Round up: waking a little late is harmless (latencies count from
         * the scheduled time), spinning on a sub-millisecond wait is not. */
        int ms = wait > 0 ? (int)ceil(wait * 1e3) : 0;
        struct epoll_event evs[256];
        int k = epoll_wait(R.ep, evs, 256, ms);
        for (int i = 0; i < k; i++) {
            int flags = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                        (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                        (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(R.m, evs[i].data.fd, flags, &running);
        }
        collect(&R);
    }
    *run_s = now_s(&R);
    progress(&R, *run_s, send_end, 1);
    *n_done = stopped ? next : n;
    run_free(&R);
    curl_global_cleanup();
    return rc;
}
