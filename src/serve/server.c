/*
 * server.c - see server.h.
 *
 * A request's life (conn): libmicrohttpd calls on_request several times
 * per request: once with no data (we set up), then with body pieces (we
 * collect up to max_body_bytes), then with none (we act). Acting on a
 * generation request ends with the request handed to a worker and the
 * connection suspended; the worker's notify resumes it, on_request runs
 * again and queues the answer: an SSE stream whose reader pulls text from
 * the outbox (suspending again whenever it is empty), or the whole JSON
 * once the request is done. on_completed runs once per request at its
 * very end, whatever happened: it cancels work the client no longer
 * waits for, returns rate-limit reservations and counts the status.
 *
 * A connection's life (gate.h) spans its requests: the start notification
 * (on_connection) puts it in the gate, where it must deliver each whole
 * request before a deadline; the first call of a request (its headers)
 * checks the framing and the key, which makes the connection authenticated
 * when valid; the last call marks it busy; on_completed, when the answer
 * went out whole, starts the wait for the next request; the close
 * notification takes it out. libmicrohttpd sends the close notification
 * before it closes the socket, so a socket the gate names is always still
 * this connection's: the gate's lock is held from the decision to the
 * shutdown(), and libmicrohttpd, seeing the socket shut, closes the
 * connection from its own thread.
 */
#include "server.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <openssl/rand.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "chat.h"
#include "err.h"
#include "gate.h"
#include "grammar.h"
#include "oai.h"
#include "obs.h"
#include "ratelimit.h"
#include "redisfleet.h"
#include "strbuf.h"
#include "tokspecial.h"
#include "worker.h"

#define DEFAULT_MAX_TOKENS 16       /* a completion's when it names none (OpenAI's, vLLM's);
                                     * a chat's is the rest of the context */
#define MAX_REQUESTS 16384          /* per model, queued + running */
/* MHD's thread pool, the HTTP threads: one per HTTP_CONNS_PER_THREAD of
 * limits.max_connections, HTTP_THREADS_MIN to HTTP_THREADS_MAX. On each
 * resume libmicrohttpd walks every connection its thread holds suspended,
 * and a queued request's connection is suspended until its first token,
 * so under a flood that walk grows with the backlog. With 3,000 queued
 * (isolation.yaml under FCFS) and the server pinned to one CPU, two
 * threads took 16-19% of it and eight 11-13%, the engine keeping 89-92%
 * instead of 82-85%. MHD splits max_connections evenly among the threads,
 * hence a share of at least HTTP_CONNS_PER_THREAD each. */
#define HTTP_CONNS_PER_THREAD 256u
#define HTTP_THREADS_MIN 2u
#define HTTP_THREADS_MAX 8u
#define SSE_BLOCK_BYTES 16384       /* MHD's buffer for a streamed answer */
#define DETOK_MAX_BYTES (16u << 20) /* text /detokenize answers at most */
/* Prompt logprob entries (prompt tokens x sequences x (logprobs + 1)) an
 * echo with logprobs may answer: each is some 30 to 60 bytes of JSON, so
 * this bounds such an answer near 100 MB. */
#define ECHO_LP_MAX_ENTRIES (2u << 20)
#define WATCH_PERIOD_NS (50 * 1000000L)   /* between hang-up polls */
/* The gate's clock runs at most this far past the watcher's last beat
 * (gate_now): a pause longer than that (the process stopped, the machine
 * paused, the watcher starved) does not count against the read deadlines. */
#define GATE_STALL_CAP_US 500000
#define DRAIN_FLUSH_TRIES 200       /* waits for connections to finish... */
#define DRAIN_FLUSH_NS (10 * 1000000L)    /* ...of this long each: 2 s */
/* An engine turn (one step: a forward pass under the step budget) running
 * longer than this means the engine loop is wedged, and /health/live fails
 * so that the orchestrator restarts the process. Generous on purpose: a
 * chunked prefill of a 70B model on a CPU takes around a minute, and a
 * false alarm kills every request in flight, while a late one only delays
 * a restart that nothing else would bring. */
#define ENGINE_STALL_US (300LL * 1000000)

typedef struct srv_model {
    wk_worker *w;
    int embed;              /* an embedding model: /v1/embeddings only */
    chat_tpl *tpl;          /* the model's chat template, compiled; or NULL: */
    chat_family chat;       /* then the plain transcript (CHAT_DEFAULT) */
    const char *template_src; /* "gguf", "config" or NULL: where the chat template came from */
    tks_set *specials;      /* control and user-defined tokens by text */
    gr_vocab *gv;           /* the token trie structured output compiles
                             * against (a decoder's), or NULL: then refused */
} srv_model;

struct srv {
    const cfg *c;
    srv_model *models;
    int n_models;
    auth_table *auth;
    lim_tenant *lims;       /* (n_tenants) under lim_mu */
    pthread_mutex_t lim_mu;
    rfleet *fleet;          /* limits.backend redis: the fleet's limits; else NULL */
    obs *obs;
    struct MHD_Daemon *d;
    uint16_t port;
    atomic_int draining;
    atomic_int n_conns;     /* connections with a context, for the drain */
    gate gate;              /* read deadlines and the anonymous cap, under gate_mu */
    pthread_mutex_t gate_mu;
    int64_t beat_real_us;   /* under gate_mu: the watcher's last beat (gate_beat), */
    int64_t beat_gate_us;   /* on the monotonic clock and on the gate's */
    /* The watcher: MHD does not notice a client leaving while its
     * connection is suspended (queued, or waiting for a whole answer), so a
     * thread polls those sockets for hang-ups and cancels their requests.
     * It also closes connections past their read deadline (gate). */
    pthread_t watcher;
    int watching;
    pthread_mutex_t watch_mu;
    int watch_ep;           /* epoll set of the connections with a request in flight,
                               for hang-ups; -1 if none could be made */
    struct conn *watched;   /* ... and a list of those epoll would not take */
    int stop_watch;
};

enum { R_NONE, R_COMPLETIONS, R_CHAT, R_EMBEDDINGS, R_TOKENIZE, R_DETOKENIZE, R_MODELS, R_HEALTH, R_LIVE, R_READY,
       R_METRICS, R_ADMIN, R_ADMIN_MODELS, R_BAD_METHOD };

typedef struct conn {
    srv *s;
    struct MHD_Connection *mc;
    int route;
    const char *allow;      /* static: the method the path takes, for a 405 */
    char *body;
    size_t len, cap;
    int too_big;
    int acted;              /* the request was acted on */
    int status;             /* HTTP status answered */
    int settled;            /* its outcome is counted */
    int uncounted;          /* a probe's answer: in no request counter */
    int close;              /* answer with Connection: close */
    int who;                /* the key's holder: a tenant, AUTH_ADMIN, _METRICS, _NONE */
    gate_conn *gc;          /* the connection's entry in the gate, or NULL */
    int tenant, model;
    oai_kind kind;
    int stream, include_usage;
    char model_name[SCHED_NAME_MAX];
    uint8_t id[OAI_ID_BYTES];   /* random, from RAND_bytes */
    int64_t created;
    wk_req *req;
    int suspended;          /* under req->mu (embeddings: under emb_mu) */
    /* embeddings: one request per input, answered when all are done */
    wk_req **ereqs;         /* (n_ereqs) */
    int n_ereqs;
    atomic_int n_edone;     /* of them done (a request reaches WK_DONE once) */
    atomic_int efailed;     /* one of them failed: answer now, cancel the rest */
    pthread_mutex_t emb_mu; /* orders the last wake-up against the suspend */
    int has_emb_mu;
    int base64;
    /* generation: ereqs are its sequences, prompt-major (see "generation") */
    int gen;
    int n_prompts, n_choices, best_of; /* per prompt: best_of run, n_choices answered */
    int echo, logprobs;     /* logprobs: -1 none, else alternatives per token */
    wk_grammar *grammar;    /* structured output, compiled once; each
                             * sequence holds its own reference */
    atomic_int gen_seq;     /* bumped by every notify of a sequence */
    char **echo_text;       /* (n_prompts) the prompts' text, with echo */
    size_t *echo_len;
    struct gen_stream *gs;  /* (n_ereqs) what each sequence has streamed */
    uint64_t reserved;      /* tokens reserved with the tenant's limits */
    int lim_taken;
    int lim_fleet;          /* ... in the fleet's (Redis), not this replica's */
    int fd;                 /* the client's socket */
    struct conn *wprev, *wnext; /* watch list */
    int in_watch;           /* WATCH_* */
    /* streaming */
    size_t sent_text;
    int sent_first, final_sent;
    char *pend;
    size_t pend_len, pend_off;
} conn;

/* ---- the connection gate --------------------------------------------------------- */

/* Make libmicrohttpd close a connection from its own thread: a shut socket
 * reads as the peer's end. The gate's lock is held, so the socket cannot
 * have been closed and its number reused (see the top of this file). */
static void shut(const gate_conn *g) {
    if (g) shutdown(g->fd, SHUT_RDWR);
}

/* The gate's now, under gate_mu: the monotonic clock, except that it runs
 * at most GATE_STALL_CAP_US past the watcher's last beat. The watcher beats
 * every WATCH_PERIOD_NS, so the cap only bites when nothing ran for a
 * while; then a request that arrived during the pause, read by an HTTP
 * thread just before the watcher wakes, is not cut at a deadline that
 * passed while the server could not read it. Never goes backwards. */
static int64_t gate_now(const srv *s, int64_t now_us) {
    int64_t ran = now_us - s->beat_real_us;
    return s->beat_gate_us + (ran < GATE_STALL_CAP_US ? ran : GATE_STALL_CAP_US);
}

/* The watcher's beat, under gate_mu: the gate's clock resumes from here.
 * Returns the gate's now, and sets *stalled when the cap bit (nothing ran
 * for a while). */
static int64_t gate_beat(srv *s, int *stalled) {
    int64_t now = wk_now_us(), g = gate_now(s, now);
    *stalled = now - s->beat_real_us > GATE_STALL_CAP_US;
    s->beat_real_us = now;
    s->beat_gate_us = g;
    return g;
}

/* Start and close notifications of every connection. A connection that
 * cannot be tracked (no memory) is refused: without a deadline it could
 * be held open forever. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci) return;
        gate_conn *g = malloc(sizeof(*g));
        if (!g) {
            shutdown(ci->connect_fd, SHUT_RDWR);
            return;
        }
        pthread_mutex_lock(&s->gate_mu);
        shut(gate_open(&s->gate, g, ci->connect_fd, gate_now(s, wk_now_us())));
        pthread_mutex_unlock(&s->gate_mu);
        *socket_context = g;
        return;
    }
    gate_conn *g = *socket_context;
    if (!g) return;
    pthread_mutex_lock(&s->gate_mu);
    gate_close(&s->gate, g);
    pthread_mutex_unlock(&s->gate_mu);
    free(g);
    *socket_context = NULL;
}

static gate_conn *gate_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The gate calls a request makes, each under the gate's lock. */
static void conn_authed(conn *c) {
    if (!c->gc) return;
    pthread_mutex_lock(&c->s->gate_mu);
    gate_auth(&c->s->gate, c->gc);
    pthread_mutex_unlock(&c->s->gate_mu);
}

/* Returns 0 when the gate has already closed the connection (a request
 * read whole just as its deadline passed): nobody will read an answer. */
static int conn_busy(conn *c) {
    if (!c->gc) return 1;
    pthread_mutex_lock(&c->s->gate_mu);
    int open = c->gc->state != GATE_CLOSING;
    gate_busy(&c->s->gate, c->gc);
    pthread_mutex_unlock(&c->s->gate_mu);
    return open;
}

static void conn_idle(conn *c) {
    if (!c->gc) return;
    pthread_mutex_lock(&c->s->gate_mu);
    gate_idle(&c->s->gate, c->gc, gate_now(c->s, wk_now_us()));
    pthread_mutex_unlock(&c->s->gate_mu);
}

/* Close every connection past its read deadline; but not on the beat that
 * ends a stall: the HTTP threads first get a period to read the requests
 * that arrived meanwhile, whose deadlines may have been near when the
 * stall began. */
static void reap_expired(srv *s) {
    pthread_mutex_lock(&s->gate_mu);
    int stalled;
    int64_t now = gate_beat(s, &stalled);
    for (gate_conn *g; !stalled && (g = gate_expired(&s->gate, now));) shut(g);
    pthread_mutex_unlock(&s->gate_mu);
}

/* Why the gate closed c's connection, GATE_OPEN if it did not. */
static gate_why gate_closed_by(const conn *c) {
    if (!c->gc) return GATE_OPEN;
    pthread_mutex_lock(&c->s->gate_mu);
    gate_why why = c->gc->closed_by;
    pthread_mutex_unlock(&c->s->gate_mu);
    return why;
}

/* ---- replies ---------------------------------------------------------------- */

/* Count c's outcome, once. The first call wins, so a site that knows more
 * (a rate limit's reason, the worker's end) settles it before the reply,
 * which would otherwise name it by its status. */
static void settle(conn *c, obs_outcome oc) {
    if (c->settled) return;
    c->settled = 1;
    obs_outcome_count(c->s->obs, c->tenant, oc);
}

static enum MHD_Result reply(conn *c, int status, const char *ctype, char *body, size_t len,
                             int64_t retry_after_s) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (c->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    /* RFC 9110 15.5.6: a 405 names the methods the resource takes. */
    if (status == 405 && c->allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, c->allow);
    if (retry_after_s > 0) {
        char v[32];
        snprintf(v, sizeof(v), "%lld", (long long)retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    conn_busy(c);   /* an answer before the body (an early 413) ends the reading */
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    /* Counted as the answer is queued, not when the connection ends: a
     * client that reads /metrics right after its answer sees it. */
    if (!c->uncounted) obs_request(c->s->obs, c->tenant, status);
    settle(c, obs_outcome_of_status(status));
    return ok;
}

static enum MHD_Result reply_text(conn *c, int status, const char *ctype, const char *text) {
    char *b = strdup(text);
    return b ? reply(c, status, ctype, b, strlen(b), 0) : MHD_NO;
}

static enum MHD_Result reply_err(conn *c, int status, const char *type, const char *param, const char *code,
                                 int64_t retry_after_s, const char *msg) {
    oai_error e;
    oai_error_set(&e, status, type, param, code, "%s", msg);
    char *j = oai_error_json(&e);
    return j ? reply(c, status, "application/json", j, strlen(j), retry_after_s) : MHD_NO;
}

static enum MHD_Result reply_oai_err(conn *c, const oai_error *e) {
    char *j = oai_error_json(e);
    return j ? reply(c, e->status, "application/json", j, strlen(j), 0) : MHD_NO;
}

/* ---- authentication and limits ------------------------------------------------ */

/* The tenant behind the Authorization header, AUTH_ADMIN, AUTH_METRICS or
 * AUTH_NONE. */
static int authenticate(conn *c) {
    const char *h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Authorization");
    const char *key;
    size_t len;
    if (!h || auth_parse_bearer(h, &key, &len)) return AUTH_NONE;
    return auth_lookup(c->s->auth, key, len);
}

static obs_outcome lim_outcome(lim_reason r) {
    switch (r) {
    case LIM_RATE_REQUESTS: return OBS_REJ_RATE_REQUESTS;
    case LIM_RATE_TOKENS: return OBS_REJ_RATE_TOKENS;
    case LIM_CONCURRENCY: return OBS_REJ_CONCURRENCY;
    default: return OBS_REJ_BAD_REQUEST;
    }
}

static const char *lim_obs_name(lim_reason r) {
    switch (r) {
    case LIM_RATE_REQUESTS: return "rate_requests";
    case LIM_RATE_TOKENS: return "rate_tokens";
    case LIM_CONCURRENCY: return "concurrency";
    default: return "too_large";
    }
}

/* Reserve prompt + max_tokens with the tenant's limits; on a denial,
 * answer 429 (with Retry-After when a wait would help). */
static int take_limits(conn *c, uint64_t tokens, enum MHD_Result *res) {
    srv *s = c->s;
    int64_t retry = 0;
    lim_reason why = LIM_OK;
    rfleet_verdict v = s->fleet ? rfleet_admit(s->fleet, c->tenant, tokens, &why, &retry) : RFLEET_LOCAL;
    if (v == RFLEET_CLOSED) {
        *res = reply_err(c, 503, "server_error", NULL, "limits_unavailable", RFLEET_RETRY_CLOSED_S,
                         "the fleet's limit store (Redis) does not answer; retry shortly");
        return -1;
    }
    if (v == RFLEET_LOCAL) {
        pthread_mutex_lock(&s->lim_mu);
        why = lim_admit(&s->lims[c->tenant], tokens, wk_now_us(), &retry);
        pthread_mutex_unlock(&s->lim_mu);
    }
    if (why == LIM_OK) {
        c->reserved = tokens;
        c->lim_taken = 1;
        c->lim_fleet = v == RFLEET_DECIDED;
        return 0;
    }
    obs_reject(s->obs, c->tenant, lim_obs_name(why));
    settle(c, lim_outcome(why));
    char msg[160];
    snprintf(msg, sizeof(msg), "rate limit: %s", lim_reason_str(why));
    int64_t secs = retry > 0 ? (retry + 999999) / 1000000 : 0;
    *res = reply_err(c, 429, "rate_limit_error", NULL, lim_obs_name(why), secs, msg);
    return -1;
}

static void give_back_limits(conn *c) {
    if (!c->lim_taken) return;
    uint64_t used = 0;
    if (c->req) {
        pthread_mutex_lock(&c->req->mu);
        used = (uint64_t)c->req->n_prompt + (uint64_t)c->req->n_generated;
        pthread_mutex_unlock(&c->req->mu);
    }
    for (int i = 0; i < c->n_ereqs; i++) {   /* an input counts once embedded */
        pthread_mutex_lock(&c->ereqs[i]->mu);
        if (c->gen) used += (uint64_t)c->ereqs[i]->n_prompt + (uint64_t)c->ereqs[i]->n_generated;
        else used += c->ereqs[i]->n_generated ? (uint64_t)c->ereqs[i]->n_prompt : 0;
        pthread_mutex_unlock(&c->ereqs[i]->mu);
    }
    c->lim_taken = 0;
    /* Finished where it was admitted: the fleet's count, or this replica's. */
    if (c->lim_fleet) {
        rfleet_finish(c->s->fleet, c->tenant, c->reserved, used);
        return;
    }
    pthread_mutex_lock(&c->s->lim_mu);
    /* More than reserved (a defaulted max_tokens reserves at most the
     * burst: see reservation) is charged, as far as the bucket goes. */
    lim_finish(&c->s->lims[c->tenant], c->reserved, used, wk_now_us());
    pthread_mutex_unlock(&c->s->lim_mu);
}

/* ---- tokenizing ------------------------------------------------------------- */

/* The chat, rendered by the model's template (or as the plain transcript
 * when it has none) and tokenized: template text with special tokens,
 * message content as text. A template's own refusal (raise_exception, a
 * role it does not take) is in err. */
static int tokenize_chat(const srv_model *m, const tok *t, const oai_request *q, tks_ids *ids, char *err,
                         size_t errlen) {
    chat_msg *msgs = calloc(q->n_messages, sizeof(chat_msg));
    if (!msgs) return TS_ERR_NOMEM;
    for (size_t i = 0; i < q->n_messages; i++)
        msgs[i] = (chat_msg){oai_role_name(q->messages[i].role), q->messages[i].content, q->messages[i].content_len};
    int rc;
    if (m->tpl) {
        chat_tpl_req req = {msgs, (int)q->n_messages, q->add_generation_prompt, (int64_t)time(NULL), NULL};
        rc = chat_tpl_tokenize_req(m->tpl, &req, t, m->specials, ids, err, errlen);
    } else {
        rc = chat_tokenize(m->chat, msgs, (int)q->n_messages, t, m->specials, ids);
    }
    free(msgs);
    return rc;
}

/* Prompt text: plain text, or with the request's parse_special_tokens its
 * special tokens by their text (tks_encode_template), after a BOS when
 * add_bos. */
static int encode_prompt(const srv_model *m, const tok *t, const oai_request *q, int add_bos, tks_ids *ids) {
    if (!q->parse_special) return tks_encode_text(t, q->prompt, q->prompt_len, add_bos, ids);
    /* One call, one span over the whole text: WordPiece's BOS is [CLS]
     * before and [SEP] after, which two calls would split. */
    const tok_span all = {0, q->prompt_len};
    return tks_encode_spans(m->specials, q->prompt, q->prompt_len, &all, 1, add_bos, ids);
}

/* The prompt's token ids, appended to ids (empty on entry). */
static int tokenize(conn *c, const oai_request *q, tks_ids *ids, char *err, size_t errlen) {
    const srv_model *m = &c->s->models[c->model];
    const tok *t = wk_tok(m->w);
    if (q->kind == OAI_CHAT) return tokenize_chat(m, t, q, ids, err, errlen);
    if (!q->prompt_tokens) return encode_prompt(m, t, q, tok_add_bos(t), ids);
    ids->p = malloc(q->n_prompt_tokens * sizeof(int32_t));
    if (!ids->p) return TS_ERR_NOMEM;
    ids->cap = (int)q->n_prompt_tokens;
    for (size_t i = 0; i < q->n_prompt_tokens; i++) {
        if (q->prompt_tokens[i] < 0 || q->prompt_tokens[i] >= tok_n_vocab(t)) return TS_ERR_TOK_RANGE;
        ids->p[i] = q->prompt_tokens[i];
    }
    ids->n = (int)q->n_prompt_tokens;
    return 0;
}

/* ---- the hang-up watcher ----------------------------------------------------- */

/* Where a watched connection is: in the epoll set, or on the list (when
 * epoll would not take it), each polled for hang-ups. */
enum { WATCH_NONE, WATCH_LIST, WATCH_EPOLL };

static void watch_add(conn *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    c->fd = ci->connect_fd;
    srv *s = c->s;
    pthread_mutex_lock(&s->watch_mu);
    struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = c};
    if (s->watch_ep >= 0 && epoll_ctl(s->watch_ep, EPOLL_CTL_ADD, c->fd, &ev) == 0) {
        c->in_watch = WATCH_EPOLL;
    } else {
        c->wprev = NULL;
        c->wnext = s->watched;
        if (c->wnext) c->wnext->wprev = c;
        s->watched = c;
        c->in_watch = WATCH_LIST;
    }
    pthread_mutex_unlock(&s->watch_mu);
}

static void watch_remove(conn *c) {
    srv *s = c->s;
    pthread_mutex_lock(&s->watch_mu);
    if (c->in_watch == WATCH_EPOLL) {
        (void)epoll_ctl(s->watch_ep, EPOLL_CTL_DEL, c->fd, NULL);
    } else if (c->in_watch == WATCH_LIST) {
        if (c->wprev) c->wprev->wnext = c->wnext; else s->watched = c->wnext;
        if (c->wnext) c->wnext->wprev = c->wprev;
    }
    c->in_watch = WATCH_NONE;
    pthread_mutex_unlock(&s->watch_mu);
}

/* The client left: cancel what the connection has in flight. */
static void conn_cancel(conn *c) {
    wk_worker *w = c->s->models[c->model].w;
    if (c->req) wk_cancel(w, c->req);
    for (int i = 0; i < c->n_ereqs; i++) wk_cancel(w, c->ereqs[i]);
}

#define WATCH_EVENTS 256    /* hang-ups taken per look; the rest stay ready for the next */

/* Every WATCH_PERIOD_NS, close connections past their read deadline (so a
 * deadline is kept to within that period) and cancel the requests of
 * peers that hung up. A flood queues thousands of connections: the epoll
 * set answers with the hung-up ones alone, where one poll over them all
 * took 4% of a CPU at 3,000. The socket stays open until on_completed has
 * taken the connection out of the set (under the same lock), so an event
 * is always this connection's. */
static void *watch_loop(void *arg) {
    srv *s = arg;
    struct epoll_event ev[WATCH_EVENTS];
    for (;;) {
        struct timespec ts = {.tv_nsec = WATCH_PERIOD_NS};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->watch_mu);
        if (s->stop_watch) {
            pthread_mutex_unlock(&s->watch_mu);
            break;
        }
        int n = s->watch_ep >= 0 ? epoll_wait(s->watch_ep, ev, WATCH_EVENTS, 0) : 0;
        for (int i = 0; i < n; i++)
            if (ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) conn_cancel(ev[i].data.ptr);
        for (conn *c = s->watched; c; c = c->wnext) {
            struct pollfd p = {c->fd, POLLRDHUP, 0};
            if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) conn_cancel(c);
        }
        pthread_mutex_unlock(&s->watch_mu);
        reap_expired(s);
    }
    return NULL;
}

/* ---- generation ------------------------------------------------------------- */

/* A request of /v1/completions or /v1/chat/completions becomes one worker
 * request per sequence: prompts x best_of of them (best_of is n unless the
 * request asks for more), in c->ereqs prompt-major, so sequence k belongs
 * to prompt k / best_of. They share one answer: a whole one once every
 * sequence is done, or one stream whose chunks carry their choice's index.
 *
 * Wake-ups: the worker's notify (with r->mu held) counts a finished
 * sequence in n_edone and bumps gen_seq, then resumes the connection under
 * emb_mu if it sleeps. The HTTP side reads gen_seq before it looks at the
 * sequences and goes to sleep only if gen_seq has not moved since, checked
 * under emb_mu, so no wake-up is lost. emb_mu is never held while a
 * request's mu is taken, which keeps the two locks in one order. */

/* What each sequence of a stream has sent so far. */
typedef struct gen_stream {
    size_t sent_text;       /* bytes of its text */
    int32_t sent_lp;        /* generated tokens whose logprobs went out */
    size_t text_offset;     /* completions' text_offset of the next token */
    int first_sent, done_sent;
} gen_stream;

/* Called by the worker with r->mu held. A non-streaming answer has nothing
 * to act on until every sequence is done, or one failed: then its error is
 * the answer at once, and the others are cancelled (continue_generation),
 * not run to max_tokens for nothing. */
static void on_gen_outbox(wk_req *r) {
    conn *c = r->user;
    if (!c) return;
    int done = r->phase == WK_DONE ? atomic_fetch_add(&c->n_edone, 1) + 1 : atomic_load(&c->n_edone);
    atomic_fetch_add(&c->gen_seq, 1);
    int first_failure = r->status && !atomic_exchange(&c->efailed, 1);
    if (!c->stream && done < c->n_ereqs && !first_failure) return;
    pthread_mutex_lock(&c->emb_mu);
    if (c->suspended) {
        c->suspended = 0;
        MHD_resume_connection(c->mc);
    }
    pthread_mutex_unlock(&c->emb_mu);
}

/* Sleep until the next notify, unless one came since seq was read: then
 * answer 0 and the caller looks again. */
static int gen_sleep(conn *c, int seq) {
    pthread_mutex_lock(&c->emb_mu);
    int sleep = atomic_load(&c->gen_seq) == seq;
    if (sleep) {
        c->suspended = 1;
        MHD_suspend_connection(c->mc);
    }
    pthread_mutex_unlock(&c->emb_mu);
    return sleep;
}

/* The first failed sequence's error, copied under its lock. */
typedef struct gen_fail {
    int status;
    const char *type;
    obs_outcome oc;
    char msg[sizeof(((wk_req *)0)->error)];
} gen_fail;

/* How far the sequences are: admitted (or done) and done counts, and the
 * first failure in f (f->status 0 when none). */
static void gen_scan(conn *c, gen_fail *f, int *started, int *done) {
    f->status = 0;
    *started = *done = 0;
    for (int i = 0; i < c->n_ereqs; i++) {
        wk_req *r = c->ereqs[i];
        pthread_mutex_lock(&r->mu);
        *started += r->phase >= WK_ADMITTED;
        *done += r->phase == WK_DONE;
        if (r->status && !f->status) {
            f->status = r->status;
            f->type = r->error_type;
            f->oc = obs_outcome_of_req(r);
            memcpy(f->msg, r->error, sizeof(f->msg));
        }
        pthread_mutex_unlock(&r->mu);
    }
}

static oai_head head_of(const conn *c) {
    oai_head h = {.kind = c->kind, .created = c->created, .model = c->model_name};
    memcpy(h.id, c->id, sizeof(h.id));
    return h;
}

static oai_finish finish_of(const wk_req *r) {
    return r->finish && strcmp(r->finish, "stop") == 0 ? OAI_FINISH_STOP : OAI_FINISH_LENGTH;
}

/* A token's text for logprobs: its decoded piece, or for a control token
 * (which decodes to nothing) its vocabulary text, as OpenAI shows
 * "<|endoftext|>". */
static const char *token_piece(void *ctx, int32_t id, char *buf, size_t cap, size_t *len) {
    const tok *t = ctx;
    if (tok_is_control(t, id)) {
        const char *s = tok_text(t, id, len);
        if (s) return s;
    }
    int n = tok_decode(t, id, buf, cap);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

static oai_pieces pieces_of(const conn *c) {
    oai_pieces p = {token_piece, (void *)wk_tok(c->s->models[c->model].w)};
    return p;
}

static int32_t n_out(const wk_req *r) { return r->n_generated < r->max_new ? r->n_generated : r->max_new; }

/* ---- generation: the whole answer ---- */

/* Sequence order within one prompt for best_of: highest cumulative logprob
 * first, ties by sequence. */
static void rank_sequences(wk_req *const *seqs, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && seqs[order[j]]->cum_logprob > seqs[order[j - 1]]->cum_logprob; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

/* One choice of the answer from sequence r, with the prompt echoed (its
 * text and, with logprobs, its tokens first) when asked. The prompt's
 * logprobs are its first sequence's, src (the only one that computes
 * them: every sequence of a prompt has the same). The buffers it fills
 * are freed by the caller. */
static int fill_choice(conn *c, wk_req *r, const wk_req *src, int prompt, uint32_t index, oai_choice *ch,
                       strbuf *text, smp_lp **lps, int32_t **ids) {
    int32_t ng = n_out(r);
    *ch = (oai_choice){.index = index, .finish = finish_of(r)};
    if (c->echo) {
        strbuf_put(text, c->echo_text[prompt], c->echo_len[prompt]);
        strbuf_put(text, r->text.p ? r->text.p : "", r->text.len);
        if (text->len < c->echo_len[prompt] + r->text.len) return TS_ERR_NOMEM;
        ch->text = text->p;
        ch->len = text->len;
    } else {
        ch->text = r->text.p;
        ch->len = r->text.len;
    }
    if (c->logprobs < 0 || !r->lps) return 0;
    ch->has_logprobs = true;
    if (!c->echo || !src->plps) {
        ch->ids = r->tokens + r->n_prompt;
        ch->lps = r->lps;
        ch->n_lp = (size_t)ng;
        return 0;
    }
    size_t n = (size_t)r->n_prompt + (size_t)ng;
    if (!(*lps = malloc(n * sizeof(**lps))) || !(*ids = malloc(n * sizeof(**ids)))) return TS_ERR_NOMEM;
    memcpy(*lps, src->plps, (size_t)r->n_prompt * sizeof(**lps));
    memcpy(*lps + r->n_prompt, r->lps, (size_t)ng * sizeof(**lps));
    memcpy(*ids, r->tokens, n * sizeof(**ids));
    ch->ids = *ids;
    ch->lps = *lps;
    ch->n_lp = n;
    return 0;
}

/* Every sequence is done and none failed: the answer, n choices per
 * prompt at index prompt * n + j. */
static enum MHD_Result answer_gen(conn *c) {
    int n = c->n_choices, bo = c->best_of, total = c->n_prompts * n;
    oai_choice *ch = calloc((size_t)total, sizeof(*ch));
    strbuf *texts = calloc((size_t)total, sizeof(*texts));
    smp_lp **lps = calloc((size_t)total, sizeof(*lps));
    int32_t **ids = calloc((size_t)total, sizeof(*ids));
    int *order = calloc((size_t)bo, sizeof(*order));
    oai_usage u = {0, 0};
    int rc = ch && texts && lps && ids && order ? 0 : TS_ERR_NOMEM;
    for (int p = 0; !rc && p < c->n_prompts; p++) {
        wk_req **seqs = c->ereqs + (size_t)p * (size_t)bo;
        for (int k = 0; k < bo; k++) {     /* done: the worker has let go; the lock orders our reads */
            pthread_mutex_lock(&seqs[k]->mu);
            pthread_mutex_unlock(&seqs[k]->mu);
        }
        rank_sequences(seqs, bo, order);
        u.prompt_tokens += (uint32_t)seqs[0]->n_prompt;
        for (int j = 0; !rc && j < n; j++) {
            int at = p * n + j;
            wk_req *r = seqs[bo > n ? order[j] : j];
            u.completion_tokens += (uint32_t)r->n_generated;
            rc = fill_choice(c, r, seqs[0], p, (uint32_t)at, &ch[at], &texts[at], &lps[at], &ids[at]);
        }
    }
    oai_head h = head_of(c);
    oai_pieces pc = pieces_of(c);
    char *j = rc ? NULL : oai_choices_json(&h, ch, (size_t)total, &u, &pc);
    for (int i = 0; texts && i < total; i++) strbuf_free(&texts[i]);
    for (int i = 0; lps && i < total; i++) free(lps[i]);
    for (int i = 0; ids && i < total; i++) free(ids[i]);
    free(ch), free(texts), free(lps), free(ids), free(order);
    if (!j) {
        settle(c, OBS_FAIL_INTERNAL);
        return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
    }
    settle(c, OBS_COMPLETED);
    return reply(c, 200, "application/json", j, strlen(j), 0);
}

/* ---- generation: the stream ---- */

/* What one sequence has new for the stream, copied under its lock so that
 * the formatting (a large echo with logprobs can take a while) runs
 * without it: the worker never waits on the HTTP side's JSON. */
typedef struct gen_news {
    int status;             /* the sequence failed: nothing else is set */
    char *text;             /* (len) text not yet sent, or NULL */
    size_t len;
    smp_lp *lps;            /* (n_lp) logprobs not yet sent, with ids */
    int32_t *ids;
    int32_t n_lp, ng;       /* ng: generated tokens counted so far */
    int done;
    oai_finish finish;
} gen_news;

static void gen_news_free(gen_news *n) {
    free(n->text);
    free(n->lps);
    free(n->ids);
}

/* Copy sequence k's news past what c->gs[k] says went out. Caller holds
 * r->mu. 0, or TS_ERR_NOMEM. */
static int gen_news_take(conn *c, int k, wk_req *r, gen_news *n) {
    const gen_stream *g = &c->gs[k];
    *n = (gen_news){.status = r->status};
    if (r->status) return 0;
    n->ng = n_out(r);
    n->done = r->phase == WK_DONE;
    n->finish = finish_of(r);
    if (r->text.len > g->sent_text) {
        n->len = r->text.len - g->sent_text;
        if (!(n->text = malloc(n->len))) return TS_ERR_NOMEM;
        memcpy(n->text, r->text.p + g->sent_text, n->len);
    }
    if (c->logprobs >= 0 && r->lps && n->ng > g->sent_lp) {
        n->n_lp = n->ng - g->sent_lp;
        n->lps = malloc((size_t)n->n_lp * sizeof(*n->lps));
        n->ids = malloc((size_t)n->n_lp * sizeof(*n->ids));
        if (!n->lps || !n->ids) return TS_ERR_NOMEM;
        memcpy(n->lps, r->lps + g->sent_lp, (size_t)n->n_lp * sizeof(*n->lps));
        memcpy(n->ids, r->tokens + r->n_prompt + g->sent_lp, (size_t)n->n_lp * sizeof(*n->ids));
    }
    return 0;
}

/* The echoed prompt of sequence k, once it can go out: its text, and with
 * logprobs the prompt's tokens and logprobs from the prompt's first
 * sequence (the one that computes them), complete once that sequence has
 * a generated token or is done. 1 when ready (the ids and logprobs set, or NULL
 * without logprobs), 0 when not yet, TS_ERR_NOMEM. Takes the first
 * sequence's lock; the caller holds none. */
static int echo_take(conn *c, int k, int32_t **ids, smp_lp **lps, int32_t *n) {
    *ids = NULL, *lps = NULL, *n = 0;
    if (c->logprobs < 0) return 1;
    wk_req *src = c->ereqs[(k / c->best_of) * c->best_of];
    int ready = 0, rc = 0;
    pthread_mutex_lock(&src->mu);
    if (src->n_generated || src->phase == WK_DONE) {
        ready = 1;
        if (src->plps && !src->status) {
            *n = src->n_prompt;
            *ids = malloc((size_t)*n * sizeof(**ids));
            *lps = malloc((size_t)*n * sizeof(**lps));
            if (*ids && *lps) {
                memcpy(*ids, src->tokens, (size_t)*n * sizeof(**ids));
                memcpy(*lps, src->plps, (size_t)*n * sizeof(**lps));
            } else {
                rc = TS_ERR_NOMEM;
            }
        }
    }
    pthread_mutex_unlock(&src->mu);
    if (rc) {
        free(*ids), free(*lps);
        *ids = NULL, *lps = NULL;
        return rc;
    }
    return ready;
}

/* Append sequence k's news to out: the echoed prompt first, then new text
 * and logprobs, then its finish once done. No lock held. */
static void stream_news(conn *c, int k, const gen_news *n, const int32_t *eids, const smp_lp *elps, int32_t en,
                        strbuf *out) {
    gen_stream *g = &c->gs[k];
    oai_head h = head_of(c);
    oai_pieces pc = pieces_of(c);
    int prompt = k / c->best_of;
    if (c->echo && !g->first_sent) {
        oai_choice e = {.index = (uint32_t)k, .text = c->echo_text[prompt], .len = c->echo_len[prompt],
                        .first = true, .text_offset = &g->text_offset};
        if (elps) e.has_logprobs = true, e.ids = eids, e.lps = elps, e.n_lp = (size_t)en;
        char *ev = oai_choice_sse(&h, &e, &pc);
        if (ev) strbuf_put(out, ev, strlen(ev));
        free(ev);
        g->first_sent = 1;
    }
    if (n->len || n->n_lp) {
        oai_choice ch = {.index = (uint32_t)k, .first = !g->first_sent, .text_offset = &g->text_offset};
        if (n->len || c->kind != OAI_CHAT) ch.text = n->text ? n->text : "", ch.len = n->len;
        if (n->n_lp) ch.has_logprobs = true, ch.ids = n->ids, ch.lps = n->lps, ch.n_lp = (size_t)n->n_lp;
        char *ev = oai_choice_sse(&h, &ch, &pc);
        if (ev) strbuf_put(out, ev, strlen(ev));
        free(ev);
        g->sent_text += n->len;
        g->sent_lp += n->n_lp;
        g->first_sent = 1;
    }
    /* The finish goes in a chunk of its own, as OpenAI sends it: the
     * stream's shape must not depend on whether the last text was read
     * before or after the sequence ended. */
    if (n->done) {
        oai_choice ch = {.index = (uint32_t)k, .first = !g->first_sent, .text_offset = &g->text_offset,
                         .finish = n->finish};
        if (c->kind != OAI_CHAT) ch.text = "";
        char *ev = oai_choice_sse(&h, &ch, &pc);
        if (ev) strbuf_put(out, ev, strlen(ev));
        free(ev);
        g->first_sent = 1;
        g->done_sent = 1;
    }
}

/* The stream's end: the usage chunk when asked, then [DONE]. */
static void stream_end(conn *c, strbuf *out) {
    uint64_t prompt = 0, gen = 0;
    for (int i = 0; i < c->n_ereqs; i++) {
        wk_req *r = c->ereqs[i];
        pthread_mutex_lock(&r->mu);
        if (i % c->best_of == 0) prompt += (uint64_t)r->n_prompt;
        gen += (uint64_t)r->n_generated;
        pthread_mutex_unlock(&r->mu);
    }
    if (c->include_usage) {
        oai_head h = head_of(c);
        oai_usage u = {(uint32_t)prompt, (uint32_t)gen};
        char *ev = oai_usage_sse(&h, &u);
        if (ev) strbuf_put(out, ev, strlen(ev));
        free(ev);
    }
    strbuf_put(out, OAI_SSE_DONE, strlen(OAI_SSE_DONE));
}

/* The next SSE bytes for the client, or NULL when there is nothing new
 * (*end set once everything went out). A sequence that fails ends the
 * whole stream with its error, and the others are cancelled. */
static char *next_gen_event(conn *c, int *end) {
    *end = c->final_sent;
    if (c->final_sent) return NULL;
    strbuf out = {0};
    gen_fail f = {0};
    int done = 0, oom = 0;
    for (int k = 0; k < c->n_ereqs && !oom; k++) {
        wk_req *r = c->ereqs[k];
        if (c->gs[k].done_sent) {
            done++;
            continue;
        }
        int32_t *eids = NULL, en = 0;
        smp_lp *elps = NULL;
        int ready = c->echo && !c->gs[k].first_sent ? echo_take(c, k, &eids, &elps, &en) : 1;
        oom |= ready < 0;
        gen_news n = {0};
        pthread_mutex_lock(&r->mu);
        if (r->status && !f.status) {
            f.status = r->status;
            f.type = r->error_type;
            f.oc = obs_outcome_of_req(r);
            memcpy(f.msg, r->error, sizeof(f.msg));
        }
        if (ready > 0) oom |= gen_news_take(c, k, r, &n) != 0;
        else n.status = -1;     /* the echo is not ready: nothing goes out */
        pthread_mutex_unlock(&r->mu);
        if (!n.status && !oom) stream_news(c, k, &n, eids, elps, en, &out);
        done += c->gs[k].done_sent;
        gen_news_free(&n);
        free(eids), free(elps);
    }
    if (oom && !f.status) {
        f.status = 503;
        f.type = "server_error";
        f.oc = OBS_FAIL_INTERNAL;
        snprintf(f.msg, sizeof(f.msg), "out of memory");
    }
    if (f.status) {
        conn_cancel(c);
        oai_error e;
        oai_error_set(&e, f.status, f.type, NULL, NULL, "%s", f.msg);
        char *ev = oai_error_sse(&e);
        if (ev) strbuf_put(&out, ev, strlen(ev));
        free(ev);
        strbuf_put(&out, OAI_SSE_DONE, strlen(OAI_SSE_DONE));
        settle(c, f.oc);
        c->final_sent = 1;
    } else if (done == c->n_ereqs) {
        stream_end(c, &out);
        settle(c, OBS_COMPLETED);
        c->final_sent = 1;
    }
    if (!out.len) {
        strbuf_free(&out);
        return NULL;
    }
    return out.p;
}

static ssize_t gen_sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    conn *c = cls;
    (void)pos;
    while (!c->pend || c->pend_off == c->pend_len) {
        free(c->pend);
        c->pend = NULL;
        int seq = atomic_load(&c->gen_seq), end;
        char *ev = next_gen_event(c, &end);
        if (ev) {
            c->pend = ev;
            c->pend_len = strlen(ev);
            c->pend_off = 0;
            break;
        }
        if (end) return MHD_CONTENT_READER_END_OF_STREAM;
        if (gen_sleep(c, seq)) return 0;
    }
    size_t n = c->pend_len - c->pend_off < max ? c->pend_len - c->pend_off : max;
    memcpy(buf, c->pend + c->pend_off, n);
    c->pend_off += n;
    return (ssize_t)n;
}

static enum MHD_Result start_stream(conn *c) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK_BYTES, gen_sse_reader,
                                                                  c, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c->mc, 200, resp);
    MHD_destroy_response(resp);
    c->status = 200;
    obs_request(c->s->obs, c->tenant, 200);
    return ok;
}

/* The worker moved a sequence on: answer now, or sleep again. A stream
 * starts once every sequence is admitted, so that a refusal still gets its
 * HTTP status; a whole answer waits for all to finish. */
static enum MHD_Result continue_generation(conn *c) {
    for (;;) {
        int seq = atomic_load(&c->gen_seq), started, done;
        gen_fail f;
        gen_scan(c, &f, &started, &done);
        if (f.status) {
            conn_cancel(c);     /* the others' work would be thrown away */
            settle(c, f.oc);
            return reply_err(c, f.status, f.type, NULL, NULL, 0, f.msg);
        }
        if (c->stream && started == c->n_ereqs) return start_stream(c);
        if (!c->stream && done == c->n_ereqs) return answer_gen(c);
        if (gen_sleep(c, seq)) return MHD_YES;
    }
}

/* ---- generation: the start ---- */

static wk_req *build_req(conn *c, const oai_request *q, int32_t *ids, int n, uint32_t max_new) {
    wk_req *r = wk_req_new(n, (int32_t)max_new);
    if (!r) return NULL;
    memcpy(r->tokens, ids, (size_t)n * sizeof(int32_t));
    r->tenant = c->tenant;
    if (q->cache_salt) r->cache_salt = wk_cache_salt(q->cache_salt, strlen(q->cache_salt));
    r->sp.temperature = q->temperature;
    r->sp.top_p = q->top_p;
    r->sp.top_k = q->top_k > 0 ? q->top_k : 0;
    uint64_t seed;
    memcpy(&seed, c->id, sizeof(seed));     /* unseeded: random per request */
    r->sp.seed = q->has_seed ? q->seed : seed;
    r->n_stops = (int)(q->n_stop < DTK_MAX_STOPS ? q->n_stop : DTK_MAX_STOPS);
    for (int i = 0; i < r->n_stops; i++) snprintf(r->stops[i], DTK_MAX_STOP_LEN, "%s", q->stop[i]);
    r->notify = on_gen_outbox;
    r->user = c;
    return r;
}

/* The parameters beyond build_req's for sequence j of its prompt. Choice j
 * draws from stream j of the seed (rng_seed_stream): a seeded request is
 * reproducible, its choices differ, and no two of them (seeded or not)
 * start from overlapping random states. Only sequence 0 of a prompt
 * computes the prompt's logprobs for echo: the others are the same prompt
 * and answer with its (fill_choice, echo_take). */
static int apply_params(conn *c, const oai_request *q, wk_req *r, int j) {
    r->sp.stream = (uint64_t)j;
    r->sp.min_p = q->min_p;
    r->sp.presence_penalty = q->presence_penalty;
    r->sp.frequency_penalty = q->frequency_penalty;
    r->sp.repetition_penalty = q->repetition_penalty;
    r->sp.min_tokens = (int)q->min_tokens;
    r->ignore_eos = q->ignore_eos;
    r->sp.n_stop = (int)q->n_stop_token_ids;
    if (q->n_stop_token_ids) memcpy(r->stop_ids, q->stop_token_ids, q->n_stop_token_ids * sizeof(int32_t));
    int rc = wk_req_set_bias(r, q->logit_bias, (int)q->n_logit_bias);
    if (!rc && (c->logprobs >= 0 || c->best_of > c->n_choices))
        rc = wk_req_want_logprobs(r, c->logprobs > 0 ? c->logprobs : 0, c->echo && c->logprobs >= 0 && j == 0);
    r->grammar = wk_grammar_ref(c->grammar);
    return rc;
}

/* Prompt p's token ids: the request's only prompt, or one of its list. */
static int tokenize_prompt(conn *c, const oai_request *q, int p, tks_ids *ids, char *err, size_t errlen) {
    if (!q->n_inputs || q->kind == OAI_CHAT) return tokenize(c, q, ids, err, errlen);
    oai_request one = *q;
    one.prompt = q->inputs[p].text;
    one.prompt_len = q->inputs[p].len;
    one.prompt_tokens = q->inputs[p].tokens;
    one.n_prompt_tokens = q->inputs[p].n_tokens;
    return tokenize(c, &one, ids, err, errlen);
}

/* The echoed text of prompt p: as sent, or a token prompt decoded. */
static int keep_echo(conn *c, const oai_request *q, int p, const tks_ids *ids) {
    const char *text = q->n_inputs ? q->inputs[p].text : q->prompt;
    size_t len = q->n_inputs ? q->inputs[p].len : q->prompt_len;
    if (text) {
        if (!(c->echo_text[p] = malloc(len + 1))) return TS_ERR_NOMEM;
        memcpy(c->echo_text[p], text, len);
        c->echo_len[p] = len;
        return 0;
    }
    const tok *t = wk_tok(c->s->models[c->model].w);
    size_t need = 0;
    tok_decode_seq(t, ids->p, (size_t)ids->n, 1, NULL, 0, &need);
    if (!(c->echo_text[p] = malloc(need + 1))) return TS_ERR_NOMEM;
    if (tok_decode_seq(t, ids->p, (size_t)ids->n, 1, c->echo_text[p], need + 1, &need)) need = 0;
    c->echo_len[p] = need;
    return 0;
}

/* Prompt p's tokens and its max_tokens: the request's, or by default 16 for
 * a completion (OpenAI's and vLLM's default) and for a chat the rest of
 * the context (vLLM's), capped by what this model's KV pool can hold for
 * one request of the tenant (wk_kv_tokens: the pool, or the tenant's KV
 * quota): an absent max_tokens never makes a request impossible. On
 * failure the reply is queued in *res. */
static int prepare_prompt(conn *c, const oai_request *q, int p, tks_ids *ids, uint32_t *max_new,
                          enum MHD_Result *res) {
    wk_worker *w = c->s->models[c->model].w;
    int32_t ctx = wk_model(w)->cfg.ctx_len;
    int32_t room = wk_kv_tokens(w, c->tenant);
    char why[OAI_ERR_MSG_MAX] = "", param[32];
    if (q->kind == OAI_COMPLETION && q->n_inputs > 1) snprintf(param, sizeof(param), "prompt[%d]", p);
    else snprintf(param, sizeof(param), "%s", q->kind == OAI_CHAT ? "messages" : "prompt");
    int rc = tokenize_prompt(c, q, p, ids, why, sizeof(why));
    int n = ids->n;
    if (rc || n < 1) {
        *res = reply_err(c, 400, "invalid_request_error", param, NULL, 0,
                         rc == TS_ERR_TOK_RANGE ? "prompt token id out of range"
                         : why[0]               ? why
                                                : "the prompt is empty or cannot be tokenized");
        return -1;
    }
    uint32_t m = q->max_tokens;
    /* A prompt the pool cannot hold gets 1 and the scheduler's refusal,
     * which names the pool, not the context. */
    if (!m && q->kind == OAI_CHAT) m = (uint32_t)(room > n ? room - n : ctx > n ? 1 : 0);
    if (!m) m = DEFAULT_MAX_TOKENS;
    if (!q->max_tokens && (int64_t)n + m > ctx) m = (uint32_t)(ctx > n ? ctx - n : 0);
    if (m < 1 || (int64_t)n + m > ctx) {
        char msg[200];
        snprintf(msg, sizeof(msg), "this model's context length is %d tokens; the prompt has %d and max_tokens is %u",
                 ctx, n, m);
        *res = reply_err(c, 400, "invalid_request_error", "max_tokens", "context_length_exceeded", 0, msg);
        return -1;
    }
    *max_new = m;
    return 0;
}

/* Build and hand in every sequence. */
static enum MHD_Result submit_generation(conn *c, const oai_request *q, tks_ids *ids, const uint32_t *max_new) {
    wk_worker *w = c->s->models[c->model].w;
    for (int p = 0; p < c->n_prompts; p++)
        for (int j = 0; j < c->best_of; j++) {
            wk_req *r = build_req(c, q, ids[p].p, ids[p].n, max_new[p]);
            if (r) c->ereqs[c->n_ereqs++] = r;
            if (!r || apply_params(c, q, r, j)) {
                settle(c, OBS_FAIL_INTERNAL);
                return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
            }
            /* The prompt's other choices start once its first has computed
             * the prompt, and find its blocks in the prefix cache. */
            if (j > 0 && wk_prefix_cache(w)) wk_req_after(r, c->ereqs[c->n_ereqs - 1 - j]);
        }
    for (int i = 0; i < c->n_ereqs; i++)
        if (wk_submit(w, c->ereqs[i]))
            return reply_err(c, 503, "server_error", NULL, "shutting_down", 0, "the server is shutting down");
    watch_add(c);
    /* The worker may already have admitted or failed them: answer now, or
     * sleep. Returning MHD_YES with neither a response queued nor the
     * connection suspended would leave MHD polling the handler. */
    return continue_generation(c);
}

/* The request's shape on the connection: prompts, sequences, echo. */
static int setup_generation(conn *c, const oai_request *q) {
    c->gen = 1;
    c->kind = q->kind;
    c->stream = q->stream;
    c->include_usage = q->include_usage;
    c->n_prompts = q->kind == OAI_COMPLETION && q->n_inputs ? (int)q->n_inputs : 1;
    c->n_choices = q->n > 0 ? (int)q->n : 1;
    c->best_of = q->best_of > (uint32_t)c->n_choices ? (int)q->best_of : c->n_choices;
    c->echo = q->echo;
    c->logprobs = q->logprobs;
    size_t seqs = (size_t)c->n_prompts * (size_t)c->best_of;
    c->ereqs = calloc(seqs, sizeof(wk_req *));
    c->gs = calloc(seqs, sizeof(gen_stream));
    c->echo_text = calloc((size_t)c->n_prompts, sizeof(char *));
    c->echo_len = calloc((size_t)c->n_prompts, sizeof(size_t));
    if (!c->ereqs || !c->gs || !c->echo_text || !c->echo_len || pthread_mutex_init(&c->emb_mu, NULL))
        return TS_ERR_NOMEM;
    c->has_emb_mu = 1;
    return 0;
}

/* The grammar a request's structured output asks for, compiled against
 * the model's token trie; err says why not (a schema outside the subset
 * grammar.h covers, a malformed regex). */
static int compile_guided(const srv_model *sm, const oai_guided *g, gr_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    if (!sm->gv) {
        snprintf(err, errlen, "structured output is not available for this model");
        return TS_ERR_INVAL;
    }
    switch (g->kind) {
    case OAI_GUIDED_JSON_OBJECT: return gr_compile_json_object(sm->gv, out, err, errlen);
    case OAI_GUIDED_JSON_SCHEMA:
        return gr_compile_json_schema(g->spec, strlen(g->spec), sm->gv, out, err, errlen);
    case OAI_GUIDED_REGEX: return gr_compile_regex(g->spec, strlen(g->spec), sm->gv, out, err, errlen);
    case OAI_GUIDED_CHOICE:
        return gr_compile_choice((const char *const *)g->choices, NULL, g->n_choices, sm->gv, out, err, errlen);
    default: return 0;
    }
}

/* What oai.c cannot check without the model: token ids against its
 * vocabulary, and that the structured output asked for compiles. The
 * grammar is compiled here once, kept in c->grammar, and shared by the
 * request's sequences (apply_params). */
static int check_params(conn *c, const oai_request *q, enum MHD_Result *res) {
    int32_t nv = tok_n_vocab(wk_tok(c->s->models[c->model].w));
    char msg[OAI_ERR_MSG_MAX];
    if (q->guided.kind != OAI_GUIDED_NONE) {
        gr_grammar *g = NULL;
        char why[256] = "";
        int rc = compile_guided(&c->s->models[c->model], &q->guided, &g, why, sizeof(why));
        if (!rc && !(c->grammar = wk_grammar_new(g))) rc = TS_ERR_NOMEM;
        else if (rc) gr_free(g);
        if (rc == TS_ERR_NOMEM) {
            *res = reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
            return -1;
        }
        if (rc) {
            snprintf(msg, sizeof(msg), "'%s' cannot be used: %s", q->guided.field, why);
            *res = reply_err(c, 400, "invalid_request_error", q->guided.field, NULL, 0, msg);
            return -1;
        }
    }
    for (size_t i = 0; i < q->n_logit_bias; i++)
        if (q->logit_bias[i].id >= nv) {
            snprintf(msg, sizeof(msg), "logit_bias names token %d; this model's vocabulary has %d tokens",
                     (int)q->logit_bias[i].id, (int)nv);
            *res = reply_err(c, 400, "invalid_request_error", "logit_bias", NULL, 0, msg);
            return -1;
        }
    for (size_t i = 0; i < q->n_stop_token_ids; i++)
        if (q->stop_token_ids[i] >= nv) {
            snprintf(msg, sizeof(msg), "stop_token_ids names token %d; this model's vocabulary has %d tokens",
                     (int)q->stop_token_ids[i], (int)nv);
            *res = reply_err(c, 400, "invalid_request_error", "stop_token_ids", NULL, 0, msg);
            return -1;
        }
    return 0;
}

/* The tokens a request reserves with the tenant's rate limit: prompt +
 * max_tokens of every sequence. A max_tokens the request left out (a
 * chat's default is the rest of the context) is an estimate, not a
 * demand: when it would reserve more than the tenant's token burst, which
 * lim_admit refuses outright (too_large), the reservation is the burst (or
 * the prompts, if more); what the request really uses is charged when it
 * ends (give_back_limits, lim_finish). */
static uint64_t reservation(conn *c, const oai_request *q, uint64_t prompts, uint64_t total) {
    if (q->max_tokens) return total;
    pthread_mutex_lock(&c->s->lim_mu);
    const lim_bucket *b = &c->s->lims[c->tenant].tokens;
    uint64_t burst = b->per_minute ? b->burst : UINT64_MAX;
    pthread_mutex_unlock(&c->s->lim_mu);
    if (total <= burst) return total;
    return burst > prompts ? burst : prompts;
}

/* Validate, tokenize, check limits and hand the sequences to the worker. */
static enum MHD_Result start_generation(conn *c, const oai_request *q) {
    srv *s = c->s;
    enum MHD_Result res;
    int m = cfg_model_find(s->c, q->model);
    if (m < 0) return reply_err(c, 404, "not_found_error", "model", "model_not_found", 0, "the model does not exist");
    c->model = m;
    snprintf(c->model_name, sizeof(c->model_name), "%s", q->model);
    if (s->models[m].embed)
        return reply_err(c, 400, "invalid_request_error", "model", "model_not_generative", 0,
                         "this model makes embeddings; use /v1/embeddings");
    /* build_req copies stop strings into DTK_MAX_STOP_LEN bytes: a longer
     * one would be cut silently and stop the text at its prefix. */
    for (size_t i = 0; i < q->n_stop; i++)
        if (strlen(q->stop[i]) >= DTK_MAX_STOP_LEN) {
            char msg[96];
            snprintf(msg, sizeof(msg), "each stop string must be shorter than %d bytes", DTK_MAX_STOP_LEN);
            return reply_err(c, 400, "invalid_request_error", "stop", NULL, 0, msg);
        }
    if (check_params(c, q, &res)) return res;
    if (setup_generation(c, q)) {
        settle(c, OBS_FAIL_INTERNAL);
        return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
    }
    /* Each sequence is a queued request of the tenant's: more than its
     * queue takes could never all be admitted. */
    uint32_t maxq = s->c->tenants[c->tenant].sched.max_queued;
    if (maxq && (uint64_t)c->n_prompts * (uint64_t)c->best_of > maxq) {
        char msg[200];
        snprintf(msg, sizeof(msg), "%d prompt(s) x %d sequences each exceed the %u requests this tenant may queue",
                 c->n_prompts, c->best_of, maxq);
        return reply_err(c, 400, "invalid_request_error", c->best_of > c->n_choices ? "best_of" : "n", NULL, 0,
                         msg);
    }
    tks_ids *ids = calloc((size_t)c->n_prompts, sizeof(*ids));
    uint32_t *max_new = calloc((size_t)c->n_prompts, sizeof(*max_new));
    if (!ids || !max_new) {
        free(ids);
        free(max_new);
        return MHD_NO;
    }
    res = MHD_NO;
    uint64_t total = 0, prompts = 0, echo_lp = 0;
    int p = 0;
    for (; p < c->n_prompts; p++) {
        if (prepare_prompt(c, q, p, &ids[p], &max_new[p], &res)) break;
        if (c->echo && keep_echo(c, q, p, &ids[p])) {
            res = MHD_NO;
            break;
        }
        total += ((uint64_t)ids[p].n + max_new[p]) * (uint64_t)c->best_of;
        prompts += (uint64_t)ids[p].n * (uint64_t)c->best_of;
        echo_lp += (uint64_t)ids[p].n * (uint64_t)c->best_of * (uint64_t)(c->logprobs + 1);
    }
    if (p == c->n_prompts && c->echo && c->logprobs >= 0 && echo_lp > ECHO_LP_MAX_ENTRIES) {
        char msg[OAI_ERR_MSG_MAX];
        snprintf(msg, sizeof(msg),
                 "echo with logprobs would answer %llu prompt logprob entries (prompt tokens x sequences x "
                 "(logprobs + 1)); at most %u are answered",
                 (unsigned long long)echo_lp, ECHO_LP_MAX_ENTRIES);
        res = reply_err(c, 400, "invalid_request_error", "echo", NULL, 0, msg);
        p = -1;
    }
    if (p == c->n_prompts && !take_limits(c, reservation(c, q, prompts, total), &res))
        res = submit_generation(c, q, ids, max_new);
    for (int i = 0; i < c->n_prompts; i++) free(ids[i].p);
    free(ids);
    free(max_new);
    return res;
}

/* ---- other routes ------------------------------------------------------------ */

static enum MHD_Result route_models(conn *c) {
    oai_model_info *mi = malloc((size_t)c->s->n_models * sizeof(*mi));
    if (!mi) return MHD_NO;
    for (int i = 0; i < c->s->n_models; i++) {
        const srv_model *sm = &c->s->models[i];
        mi[i] = (oai_model_info){c->s->c->models[i].name, sm->embed ? "embedding" : "chat", wk_ctx_len(sm->w),
                                 sm->template_src};
    }
    char *j = oai_models_info_json(mi, (size_t)c->s->n_models, (int64_t)time(NULL));
    free(mi);
    return j ? reply(c, 200, "application/json", j, strlen(j), 0) : MHD_NO;
}

/* Every tenant's names and usage: for the metrics key or the admin key
 * only. With neither configured nobody reads it (see config.h). */
static enum MHD_Result route_metrics(conn *c) {
    char *text;
    size_t len;
    /* Without a key: the pool gauges when the config makes them public
     * (config.h); they name no tenant. A load balancer scrapes them many
     * times a second, so, like a probe, a scrape counts as no traffic. */
    if (c->who == AUTH_NONE && c->s->c->public_pool_metrics) {
        c->uncounted = 1;
        c->settled = 1;
        if (obs_render_pool(c->s->obs, &text, &len))
            return reply_err(c, 500, "server_error", NULL, NULL, 0, "metrics failed");
        return reply(c, 200, "text/plain; version=0.0.4", text, len, 0);
    }
    if (c->who != AUTH_METRICS && c->who != AUTH_ADMIN)
        return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0,
                         c->s->c->has_metrics || c->s->c->has_admin
                             ? "this route needs the metrics key or the admin key"
                             : "metrics are off: configure metrics_key_sha256 to read them");
    if (obs_render(c->s->obs, &text, &len)) return reply_err(c, 500, "server_error", NULL, NULL, 0, "metrics failed");
    if (c->s->fleet) {
        strbuf b = {text, len, len + 1, 0};
        rfleet_metrics(c->s->fleet, &b);
        if (strbuf_failed(&b)) {
            strbuf_free(&b);
            return reply_err(c, 500, "server_error", NULL, NULL, 0, "metrics failed");
        }
        text = strbuf_steal(&b, &len);
    }
    return reply(c, 200, "text/plain; version=0.0.4", text, len, 0);
}

/* ,"key":v with that many significant digits, or ,"key":null when v is
 * not finite (a cost whose price is unknown, a ratio over nothing). */
static void put_num(strbuf *b, const char *key, int digits, double v) {
    if (isfinite(v)) strbuf_printf(b, ",\"%s\":%.*g", key, digits, v);
    else strbuf_printf(b, ",\"%s\":null", key);
}

/* A tenant's cost on model m (config.h, "Cost"): the total, per completed
 * request and per 1000 tokens processed (prompt and output), each null
 * where the price is unknown or the divisor is 0; and the model's price. */
static void put_tenant_cost(strbuf *b, const cfg_model *cm, const sched_tenant_stats *st) {
    double cost = cfg_cost(cm->price_per_hour, st->engine_us);
    double tokens = (double)st->prompt_tokens + (double)st->output_tokens;
    put_num(b, "price_per_hour", 15, cm->price_per_hour > 0 ? cm->price_per_hour : NAN);
    put_num(b, "cost", 9, cost);
    put_num(b, "cost_per_request", 9, st->completed ? cost / (double)st->completed : NAN);
    put_num(b, "cost_per_1k_tokens", 9, tokens > 0 ? cost / tokens * 1000 : NAN);
}

/* One tenant's row of /admin/tenants; first_tokens and ttft_seconds_sum
 * are the engine's side of its TTFT (wk_tenant_ttft). */
static void put_tenant_row(strbuf *b, const srv *s, int m, size_t i, const sched_tenant_stats *st) {
    const cfg *c = s->c;
    const cfg_tenant *t = &c->tenants[i];
    double ttft_s;
    uint64_t firsts;
    wk_tenant_ttft(s->models[m].w, (int32_t)i, &ttft_s, &firsts);
    strbuf_printf(b,
        "%s{\"model\":\"%s\",\"tenant\":\"%s\",\"tier\":\"%s\",\"weight\":%g,\"queued\":%d,\"running\":%d,"
        "\"swapped\":%d,\"kv_blocks\":%d,\"service\":%.0f,\"prompt_tokens\":%llu,\"output_tokens\":%llu,"
        "\"engine_seconds\":%.6f,\"submitted\":%llu,\"completed\":%llu,\"cancelled\":%llu,\"failed\":%llu,"
        "\"preempt_swap\":%llu,\"preempt_recompute\":%llu",
        (m || i) ? "," : "", c->models[m].name, t->sched.name, c->tiers[t->sched.tier].name,
        t->sched.weight, st->queued, st->running, st->swapped, st->kv_blocks, st->service,
        (unsigned long long)st->prompt_tokens, (unsigned long long)st->output_tokens,
        st->engine_us / 1e6, (unsigned long long)st->submitted, (unsigned long long)st->completed,
        (unsigned long long)st->cancelled, (unsigned long long)st->failed,
        (unsigned long long)st->preempt_swap, (unsigned long long)st->preempt_recompute);
    strbuf_printf(b, ",\"first_tokens\":%llu,\"ttft_seconds_sum\":%.6f", (unsigned long long)firsts, ttft_s);
    put_tenant_cost(b, &c->models[m], st);
    strbuf_puts(b, "}");
}

/* Live per-tenant state of every model, from the workers' snapshots. An
 * entry's length depends on names and on counters that only grow, so the
 * text is built in a growable buffer, not a fixed size per entry. */
static enum MHD_Result route_admin(conn *c) {
    srv *s = c->s;
    size_t nt = s->c->n_tenants, len;
    sched_tenant_stats *st = calloc(nt ? nt : 1, sizeof(*st));
    if (!st) return MHD_NO;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int m = 0; m < s->n_models; m++) {
        sched_stats pool;
        wk_snapshot(s->models[m].w, st, &pool);
        for (size_t i = 0; i < nt; i++) put_tenant_row(&b, s, m, i, &st[i]);
    }
    free(st);
    strbuf_puts(&b, "]}");
    char *out = strbuf_steal(&b, &len);
    return out ? reply(c, 200, "application/json", out, len, 0) : MHD_NO;
}

/* "steps":n,"quantiles":[...]: the spread of one kind of step's times
 * around the fit's predictions (wk_step_ratio), as quantiles of measured /
 * predicted at cost_ratio_levels over the steps of that kind run. */
/* "quantiles":[...] of measured / predicted step time at cost_ratio_levels. */
static void put_quantiles(strbuf *b, const double q[COST_RATIO_NQ]) {
    strbuf_puts(b, "\"quantiles\":[");
    for (int i = 0; i < COST_RATIO_NQ; i++) strbuf_printf(b, "%s%.6g", i ? "," : "", q[i]);
    strbuf_puts(b, "]");
}

static void put_ratio_quantiles(strbuf *b, wk_worker *w, int kind) {
    double q[COST_RATIO_NQ];
    uint64_t n;
    wk_step_ratio(w, kind, q, &n);
    strbuf_printf(b, "\"steps\":%llu,", (unsigned long long)n);
    put_quantiles(b, q);
}

/* step_ratio: over every step, and apart for decode-only steps and those
 * holding a prefill chunk (wk_step_ratio). */
static void put_step_ratio(strbuf *b, wk_worker *w) {
    strbuf_puts(b, ",\"step_ratio\":{\"levels\":[");
    for (int i = 0; i < COST_RATIO_NQ; i++) strbuf_printf(b, "%s%g", i ? "," : "", cost_ratio_levels[i]);
    strbuf_puts(b, "],");
    put_ratio_quantiles(b, w, WK_STEPS_ALL);
    strbuf_puts(b, ",\"decode\":{");
    put_ratio_quantiles(b, w, WK_STEPS_DECODE);
    strbuf_puts(b, "},\"prefill\":{");
    put_ratio_quantiles(b, w, WK_STEPS_PREFILL);
    strbuf_puts(b, "}}");
}

/* A step-time fit's four coefficients (cost.h's a, b, c, d in raw units),
 * by the names every fit object of /admin/models gives them. */
static void put_coefs(strbuf *b, const double th[4]) {
    strbuf_printf(b, "\"a_us\":%.9g,\"b_us_per_prefill_token\":%.9g,\"c_us_per_decode_seq\":%.9g,"
                  "\"d_us_per_attended_position\":%.9g", th[0], th[1], th[2], th[3]);
}

/* step_fit.shape (cost.h): per bucket of rows (rows_max: the most each
 * holds but the last, which holds the rest), the factor of steps without
 * and with a prefill chunk and the steps it is over. */
static void put_shape(strbuf *b, const cost_shape *sh) {
    strbuf_puts(b, ",\"shape\":{\"rows_max\":[");
    for (int k = 0; k < COST_SHAPE_ROWS - 1; k++) strbuf_printf(b, "%s%d", k ? "," : "", 1 << k);
    strbuf_puts(b, "]");
    for (int kind = 0; kind < 2; kind++) {
        strbuf_printf(b, ",\"%s\":{\"factor\":[", kind ? "prefill" : "decode");
        for (int k = 0; k < COST_SHAPE_ROWS; k++) strbuf_printf(b, "%s%.6g", k ? "," : "", exp(sh->log_f[kind][k]));
        strbuf_puts(b, "],\"steps\":[");
        for (int k = 0; k < COST_SHAPE_ROWS; k++)
            strbuf_printf(b, "%s%llu", k ? "," : "", (unsigned long long)sh->n[kind][k]);
        strbuf_puts(b, "]}");
    }
    strbuf_puts(b, "}");
}

/* step_fit: the describing fit (wk_step_fit), the spread of the step times
 * around it (times its shape) at step_ratio's levels, how long its spells
 * last (acf: the autocorrelation of log(measured / its shaped prediction)
 * at lags in steps), and its shape by rows. */
static void put_step_fit(strbuf *b, wk_worker *w) {
    wk_fit f;
    wk_step_fit(w, &f);
    strbuf_puts(b, ",\"step_fit\":{");
    put_coefs(b, f.theta);
    strbuf_printf(b, ",\"err_us\":%.9g,\"err_autocorr\":%.6f,\"steps\":%llu,", f.err_us, f.err_ac,
                  (unsigned long long)f.n);
    put_quantiles(b, f.q);
    strbuf_puts(b, ",\"acf\":{\"lags\":[");
    for (int k = 0; k < COST_ACF_NLAGS; k++) strbuf_printf(b, "%s%d", k ? "," : "", cost_ratio_acf_lags[k]);
    strbuf_puts(b, "],\"values\":[");
    for (int k = 0; k < COST_ACF_NLAGS; k++) strbuf_printf(b, "%s%.6f", k ? "," : "", f.acf[k]);
    strbuf_puts(b, "]}");
    put_shape(b, &f.shape);
    strbuf_puts(b, "}");
}

/* cost_model: the scheduler's step-time fit, err_us its running residual
 * scale, steps the step times it has used (0: still the seed), and seed
 * where it started, so that a simulator's scheduler can start there too
 * and learn as this one did. */
static void put_cost_model(strbuf *b, const sched_stats *p) {
    strbuf_puts(b, ",\"cost_model\":{");
    put_coefs(b, p->cost_theta);
    strbuf_printf(b, ",\"err_us\":%.9g,\"err_autocorr\":%.6f,\"steps\":%llu,\"copy_bytes_per_us\":%.9g,\"seed\":{",
                  p->cost_err_us, p->cost_err_ac, (unsigned long long)p->cost_steps, p->copy_bytes_per_us);
    put_coefs(b, p->cost_seed);
    strbuf_puts(b, "}}");
}

/* One model's entry of /admin/models: what a simulator needs to run the
 * same scheduler on a modelled device (README, "GET /admin/models"). The
 * geometry is the scheduler's own (sched_stats), not the config's: n_blocks
 * is what the KV bytes made, max_seqs the seats. */
static void put_model_entry(strbuf *b, const srv *s, int m, const sched_stats *p) {
    const cfg_model *cm = &s->c->models[m];
    strbuf_printf(b,
        "%s{\"model\":\"%s\",\"kind\":\"%s\",\"policy\":\"%s\",\"context_length\":%d,\"kv_cache_dtype\":\"%s\","
        "\"n_blocks\":%d,\"block_size\":%d,\"block_bytes\":%.0f,\"swap_blocks\":%d,\"max_seqs\":%d,"
        "\"budget_min\":%d,\"budget_max\":%d,\"kv_high\":%.15g,\"kv_low\":%.15g,\"kv_used\":%d,\"steps\":%llu",
        m ? "," : "", cm->name, s->models[m].embed ? "embedding" : "chat",
        p->policy == SCHED_POLICY_FCFS ? "fcfs" : "fair", wk_ctx_len(s->models[m].w), wk_kv_dtype(s->models[m].w),
        p->kv_total, p->block_size,
        p->block_bytes, p->swap_total, p->max_running, p->budget_min, p->budget_max, p->kv_high, p->kv_low,
        p->kv_used, (unsigned long long)p->steps);
    put_cost_model(b, p);
    put_num(b, "price_per_hour", 15, cm->price_per_hour > 0 ? cm->price_per_hour : NAN);
    put_step_ratio(b, s->models[m].w);
    put_step_fit(b, s->models[m].w);
    strbuf_puts(b, "}");
}

/* Every model's scheduler geometry and cost-model fit, from the workers'
 * snapshots (the latest step's). */
static enum MHD_Result route_admin_models(conn *c) {
    srv *s = c->s;
    size_t len;
    strbuf b = STRBUF_INIT;
    strbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int m = 0; m < s->n_models; m++) {
        sched_stats pool;
        wk_snapshot(s->models[m].w, NULL, &pool);
        put_model_entry(&b, s, m, &pool);
    }
    strbuf_puts(&b, "]}");
    char *out = strbuf_steal(&b, &len);
    return out ? reply(c, 200, "application/json", out, len, 0) : MHD_NO;
}

static enum MHD_Result reply_too_large(conn *c) {
    return reply_err(c, 413, "invalid_request_error", NULL, "request_too_large", 0, "the request body is too large");
}

/* The key first, then the body's size: a 413 is then counted under the
 * tenant that sent it. */
static enum MHD_Result route_generate(conn *c) {
    int who = c->who;
    if (who < 0)
        return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0,
                         who == AUTH_NONE ? "missing or invalid API key (Authorization: Bearer <key>)"
                                          : "this key cannot generate; use a tenant key");
    if (c->too_big) return reply_too_large(c);
    if (atomic_load(&c->s->draining))
        return reply_err(c, 503, "server_error", NULL, "shutting_down", 0, "the server is shutting down");
    /* 96 random bits: ids neither collide nor reveal how many requests
     * others made. Without the generator there is no safe id. */
    if (RAND_bytes(c->id, OAI_ID_BYTES) != 1) {
        settle(c, OBS_FAIL_INTERNAL);
        return reply_err(c, 503, "server_error", NULL, NULL, 0, "the random number generator failed");
    }
    oai_request q;
    oai_error e;
    int rc = c->route == R_CHAT ? oai_parse_chat(c->body ? c->body : "", c->len, &q, &e)
                                : oai_parse_completion(c->body ? c->body : "", c->len, &q, &e);
    if (rc) return reply_oai_err(c, &e);
    enum MHD_Result res = start_generation(c, &q);
    oai_request_free(&q);
    return res;
}

/* ---- tokenize, detokenize ---------------------------------------------------- */

/* The model a request names, or the server's only model when it names
 * none (tokenize and detokenize allow that, as vLLM does); -1 and the
 * reply queued in *res otherwise. */
static int model_named(conn *c, const char *name, enum MHD_Result *res) {
    int m = name ? cfg_model_find(c->s->c, name) : c->s->n_models == 1 ? 0 : -1;
    if (m >= 0) return m;
    *res = name ? reply_err(c, 404, "not_found_error", "model", "model_not_found", 0, "the model does not exist")
                : reply_err(c, 400, "invalid_request_error", "model", NULL, 0,
                            "this server has several models: name one in 'model'");
    return -1;
}

/* Token ids the client sent, checked against the vocabulary. */
static int copy_ids(const tok *t, const int32_t *p, size_t n, tks_ids *ids) {
    if (!(ids->p = malloc((n ? n : 1) * sizeof(int32_t)))) return TS_ERR_NOMEM;
    ids->cap = (int)n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= tok_n_vocab(t)) return TS_ERR_TOK_RANGE;
        ids->p[i] = p[i];
    }
    ids->n = (int)n;
    return 0;
}

static enum MHD_Result answer_tokenize(conn *c, const oai_request *q, int m) {
    const srv_model *sm = &c->s->models[m];
    const tok *t = wk_tok(sm->w);
    tks_ids ids = {0};
    char why[OAI_ERR_MSG_MAX] = "";
    int rc;
    if (q->has_messages) rc = tokenize_chat(sm, t, q, &ids, why, sizeof(why));
    else if (q->prompt_tokens) rc = copy_ids(t, q->prompt_tokens, q->n_prompt_tokens, &ids);
    else rc = encode_prompt(sm, t, q, q->add_special_tokens && tok_add_bos(t), &ids);
    char *j = rc ? NULL : oai_tokenize_json(ids.p, (size_t)ids.n, wk_ctx_len(sm->w));
    free(ids.p);
    if (rc == TS_ERR_TOK_RANGE)
        return reply_err(c, 400, "invalid_request_error", "prompt", NULL, 0, "prompt token id out of range");
    if (rc) return reply_err(c, 400, "invalid_request_error", q->has_messages ? "messages" : "prompt", NULL, 0,
                             why[0] ? why : "the input cannot be tokenized");
    return j ? reply(c, 200, "application/json", j, strlen(j), 0) : MHD_NO;
}

/* Control tokens decode to nothing and an SPM space prefix is dropped, as
 * a completion's text is written. */
static enum MHD_Result answer_detokenize(conn *c, const oai_request *q, int m) {
    const tok *t = wk_tok(c->s->models[m].w);
    size_t need = 0;
    int rc = tok_decode_seq(t, q->prompt_tokens, q->n_prompt_tokens, 1, NULL, 0, &need);
    if (rc == TS_ERR_TOK_RANGE)
        return reply_err(c, 400, "invalid_request_error", "tokens", NULL, 0, "token id out of range");
    /* Long tokens decode to far more bytes than their ids took: bound the
     * answer as a body is bounded. */
    if (need > DETOK_MAX_BYTES)
        return reply_err(c, 400, "invalid_request_error", "tokens", NULL, 0, "the decoded text would be too large");
    char *buf = malloc(need + 1);
    rc = buf ? tok_decode_seq(t, q->prompt_tokens, q->n_prompt_tokens, 1, buf, need, &need) : TS_ERR_NOMEM;
    char *j = rc ? NULL : oai_detokenize_json(buf, need);
    free(buf);
    if (!j) return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
    return reply(c, 200, "application/json", j, strlen(j), 0);
}

/* Any tenant's key or the admin key. A tenant's call counts against its
 * request rate and concurrency (it runs on an HTTP thread: a template
 * render and the tokenizer over up to a whole body), with no tokens
 * reserved: it uses no engine time. */
static enum MHD_Result route_tokenize(conn *c) {
    if (c->who < 0 && c->who != AUTH_ADMIN)
        return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0,
                         "missing or invalid API key (Authorization: Bearer <key>)");
    if (c->too_big) return reply_too_large(c);
    enum MHD_Result lim;
    if (c->who >= 0 && take_limits(c, 0, &lim)) return lim;
    oai_request q;
    oai_error e;
    int rc = c->route == R_TOKENIZE ? oai_parse_tokenize(c->body ? c->body : "", c->len, &q, &e)
                                    : oai_parse_detokenize(c->body ? c->body : "", c->len, &q, &e);
    if (rc) return reply_oai_err(c, &e);
    enum MHD_Result res;
    int m = model_named(c, q.model, &res);
    if (m >= 0) res = c->route == R_TOKENIZE ? answer_tokenize(c, &q, m) : answer_detokenize(c, &q, m);
    oai_request_free(&q);
    return res;
}

/* ---- embeddings ---------------------------------------------------------------- */

/* Called by the worker with r->mu held. An input's request is done exactly
 * once (finalize or a refusal); the last one wakes the connection. The
 * count moves before emb_mu is taken, and continue_embeddings reads it
 * under emb_mu before it sleeps, so the last wake-up cannot be missed. */
static void on_embed_outbox(wk_req *r) {
    conn *c = r->user;
    if (!c || r->phase != WK_DONE) return;
    /* The first failure wakes the connection at once: its answer is that
     * error, and the inputs still queued are cancelled, not computed. */
    int last = atomic_fetch_add(&c->n_edone, 1) + 1 == c->n_ereqs;
    if (!last && !(r->status && !atomic_exchange(&c->efailed, 1))) return;
    pthread_mutex_lock(&c->emb_mu);
    if (c->suspended) {
        c->suspended = 0;
        MHD_resume_connection(c->mc);
    }
    pthread_mutex_unlock(&c->emb_mu);
}

/* The first failure among the inputs (the ones still running are
 * cancelled), or all the vectors. */
static enum MHD_Result answer_embeddings(conn *c) {
    if (atomic_load(&c->efailed)) conn_cancel(c);
    uint64_t prompt = 0;
    int32_t dim = wk_embed_dim(c->s->models[c->model].w);
    float *all = malloc((size_t)c->n_ereqs * (size_t)dim * sizeof(float));
    for (int i = 0; i < c->n_ereqs; i++) {
        wk_req *r = c->ereqs[i];
        pthread_mutex_lock(&r->mu);
        if (r->phase != WK_DONE) {      /* cancelled after another's failure */
            pthread_mutex_unlock(&r->mu);
            continue;
        }
        if (r->status) {
            char msg[sizeof(r->error)];
            const char *type = r->error_type;
            int status = r->status;
            memcpy(msg, r->error, sizeof(msg));
            settle(c, obs_outcome_of_req(r));
            pthread_mutex_unlock(&r->mu);
            free(all);
            return reply_err(c, status, type, NULL, NULL, 0, msg);
        }
        if (all) memcpy(all + (size_t)i * (size_t)dim, r->embedding, (size_t)dim * sizeof(float));
        prompt += (uint64_t)r->n_prompt;
        pthread_mutex_unlock(&r->mu);
    }
    char *j = all ? oai_embeddings_json(c->model_name, all, (size_t)c->n_ereqs, (size_t)dim, c->base64, prompt)
                  : NULL;
    free(all);
    if (!j) {
        settle(c, OBS_FAIL_INTERNAL);
        return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
    }
    settle(c, OBS_COMPLETED);
    return reply(c, 200, "application/json", j, strlen(j), 0);
}

/* Answer once every input is done, or sleep until on_embed_outbox. */
static enum MHD_Result continue_embeddings(conn *c) {
    pthread_mutex_lock(&c->emb_mu);
    if (atomic_load(&c->n_edone) < c->n_ereqs && !atomic_load(&c->efailed)) {
        c->suspended = 1;
        MHD_suspend_connection(c->mc);
        pthread_mutex_unlock(&c->emb_mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&c->emb_mu);
    return answer_embeddings(c);
}

/* Every input's token ids, each within the model's context. On failure
 * the reply is queued in *res. */
static int embed_inputs(conn *c, const oai_request *q, const tok *t, int ctx, tks_ids *ids,
                        uint64_t *total, enum MHD_Result *res) {
    *total = 0;
    for (size_t i = 0; i < q->n_inputs; i++) {
        const oai_input *in = &q->inputs[i];
        int rc = in->tokens ? copy_ids(t, in->tokens, in->n_tokens, &ids[i])
                            : tks_encode_text(t, in->text, in->len, tok_add_bos(t), &ids[i]);
        char param[32], msg[200];
        snprintf(param, sizeof(param), q->n_inputs > 1 ? "input[%zu]" : "input", i);
        if (rc || ids[i].n < 1) {
            *res = reply_err(c, 400, "invalid_request_error", param, NULL, 0,
                             rc == TS_ERR_TOK_RANGE ? "token id out of range" : "the input cannot be tokenized");
            return -1;
        }
        if (ids[i].n > ctx) {
            snprintf(msg, sizeof(msg), "this model's context length is %d tokens; %s has %d", ctx, param, ids[i].n);
            *res = reply_err(c, 400, "invalid_request_error", param, "context_length_exceeded", 0, msg);
            return -1;
        }
        *total += (uint64_t)ids[i].n;
    }
    return 0;
}

/* One request per input, each an embedding request of the tenant's:
 * prefill-only work the fair scheduler orders like any other. */
static enum MHD_Result submit_embeddings(conn *c, const oai_request *q, tks_ids *ids) {
    wk_worker *w = c->s->models[c->model].w;
    if (!(c->ereqs = calloc(q->n_inputs, sizeof(wk_req *))) || pthread_mutex_init(&c->emb_mu, NULL)) {
        settle(c, OBS_FAIL_INTERNAL);
        return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
    }
    c->has_emb_mu = 1;
    for (size_t i = 0; i < q->n_inputs; i++) {
        wk_req *r = wk_req_new_embed(ids[i].n, wk_embed_dim(w));
        if (!r) {
            settle(c, OBS_FAIL_INTERNAL);
            return reply_err(c, 503, "server_error", NULL, NULL, 0, "out of memory");
        }
        memcpy(r->tokens, ids[i].p, (size_t)ids[i].n * sizeof(int32_t));
        r->tenant = c->tenant;
        r->notify = on_embed_outbox;
        r->user = c;
        c->ereqs[c->n_ereqs++] = r;
    }
    for (int i = 0; i < c->n_ereqs; i++)
        if (wk_submit(w, c->ereqs[i])) {
            /* Draining: the ones already in are cancelled when the
             * connection completes. */
            return reply_err(c, 503, "server_error", NULL, "shutting_down", 0, "the server is shutting down");
        }
    watch_add(c);
    return continue_embeddings(c);
}

static enum MHD_Result start_embeddings(conn *c, const oai_request *q) {
    enum MHD_Result res;
    int m = model_named(c, q->model, &res);
    if (m < 0) return res;
    const srv_model *sm = &c->s->models[m];
    c->model = m;
    snprintf(c->model_name, sizeof(c->model_name), "%s", q->model);
    if (!sm->embed)
        return reply_err(c, 400, "invalid_request_error", "model", "model_not_embedding", 0,
                         "this model generates text; /v1/embeddings needs an embedding model");
    /* Each input is a queued request of the tenant's: more than its queue
     * takes could never all be admitted. */
    uint32_t maxq = c->s->c->tenants[c->tenant].sched.max_queued;
    if (maxq && q->n_inputs > maxq) {
        char msg[160];
        snprintf(msg, sizeof(msg), "'input' holds %zu items; this tenant may queue at most %u", q->n_inputs, maxq);
        return reply_err(c, 400, "invalid_request_error", "input", NULL, 0, msg);
    }
    int32_t dim = wk_embed_dim(sm->w);
    if (q->dimensions && q->dimensions != (uint32_t)dim) {
        char msg[160];
        snprintf(msg, sizeof(msg), "this model's embeddings have %d dimensions; other values are not supported", dim);
        return reply_err(c, 400, "invalid_request_error", "dimensions", NULL, 0, msg);
    }
    tks_ids *ids = calloc(q->n_inputs, sizeof(*ids));
    if (!ids) return MHD_NO;
    uint64_t total;
    if (!embed_inputs(c, q, wk_tok(sm->w), wk_ctx_len(sm->w), ids, &total, &res) && !take_limits(c, total, &res)) {
        c->base64 = q->base64;
        res = submit_embeddings(c, q, ids);
    }
    for (size_t i = 0; i < q->n_inputs; i++) free(ids[i].p);
    free(ids);
    return res;
}

static enum MHD_Result route_embeddings(conn *c) {
    if (c->who < 0)
        return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0,
                         c->who == AUTH_NONE ? "missing or invalid API key (Authorization: Bearer <key>)"
                                             : "this key cannot embed; use a tenant key");
    if (c->too_big) return reply_too_large(c);
    if (atomic_load(&c->s->draining))
        return reply_err(c, 503, "server_error", NULL, "shutting_down", 0, "the server is shutting down");
    oai_request q;
    oai_error e;
    if (oai_parse_embeddings(c->body ? c->body : "", c->len, &q, &e)) return reply_oai_err(c, &e);
    enum MHD_Result res = start_embeddings(c, &q);
    oai_request_free(&q);
    return res;
}

static int route_of(const char *method, const char *url, const char **allow) {
    static const struct { const char *method, *url; int route; } routes[] = {
        {"POST", "/v1/completions", R_COMPLETIONS}, {"POST", "/v1/chat/completions", R_CHAT},
        {"GET", "/v1/models", R_MODELS},           {"GET", "/health", R_HEALTH},
        {"GET", "/health/live", R_LIVE},           {"GET", "/health/ready", R_READY},
        {"GET", "/metrics", R_METRICS},            {"GET", "/admin/tenants", R_ADMIN},
        {"GET", "/admin/models", R_ADMIN_MODELS},
        {"POST", "/v1/embeddings", R_EMBEDDINGS},  {"POST", "/tokenize", R_TOKENIZE},
        {"POST", "/detokenize", R_DETOKENIZE},
    };
    int path_known = 0;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(url, routes[i].url)) continue;
        path_known = 1;
        *allow = routes[i].method;
        if (strcmp(method, routes[i].method) == 0) return routes[i].route;
    }
    return path_known ? R_BAD_METHOD : R_NONE;
}

/* ---- probes ------------------------------------------------------------------ */

/* The model whose engine turn has run longest, and for how long (us). */
static int longest_turn(srv *s, int64_t *turn_us) {
    int64_t now = wk_now_us();
    int worst = 0;
    *turn_us = 0;
    for (int m = 0; m < s->n_models; m++) {
        int64_t t = wk_turn_us(s->models[m].w, now);
        if (t > *turn_us) {
            *turn_us = t;
            worst = m;
        }
    }
    return worst;
}

/*
 * GET /health/live and /health/ready, for an orchestrator's probes: no key
 * (a probe has none), and counted in no request series, so a kubelet's
 * polling never reads as a tenant's traffic or as unauthenticated clients.
 *
 * Live: the process answers HTTP and no engine loop is wedged (a turn past
 * ENGINE_STALL_US), 200 {"status":"ok"} else 503 {"status":"stalled"}. It
 * says nothing about load or draining: a busy or stopping server is alive,
 * and failing it would restart a pod in the middle of its work.
 *
 * Ready: 200 {"status":"ready"} when the server takes new requests; 503
 * {"status":"draining"} from SIGTERM on, or "stalled" as above. Every
 * model is loaded before the server listens (srv_new, then srv_start), so
 * no answer ever says "loading": while a model loads, the port is closed,
 * which a probe reads as a failure too. Draining also closes the port to
 * new connections, so the 503 reaches only connections opened before.
 *
 * Both bodies carry longest_turn_s, the longest current engine turn.
 * /health stays as it was: 200 ok, 503 draining, counted like any route.
 */
static enum MHD_Result route_probe(conn *c) {
    srv *s = c->s;
    int64_t turn;
    int m = longest_turn(s, &turn);
    int stalled = turn > ENGINE_STALL_US;
    const char *status = stalled                                            ? "stalled"
                         : c->route == R_READY && atomic_load(&s->draining) ? "draining"
                         : c->route == R_READY                              ? "ready"
                                                                            : "ok";
    strbuf b = STRBUF_INIT;
    strbuf_printf(&b, "{\"status\":\"%s\",\"longest_turn_s\":%.6f", status, (double)turn / 1e6);
    /* Model names are letters, digits and "._:/-" (config.c): JSON-safe. */
    if (stalled) strbuf_printf(&b, ",\"model\":\"%s\"", s->c->models[m].name);
    strbuf_puts(&b, "}");
    size_t len;
    char *body = strbuf_steal(&b, &len);
    if (!body) return MHD_NO;
    c->uncounted = 1;
    c->settled = 1;
    int ok = strcmp(status, "ok") == 0 || strcmp(status, "ready") == 0;
    return reply(c, ok ? 200 : 503, "application/json", body, len, 0);
}

static enum MHD_Result act(conn *c) {
    /* Closed by the gate: no work for a socket nobody reads. on_completed
     * counts it a read timeout, as the gate decided. */
    if (!conn_busy(c)) return MHD_NO;
    c->acted = 1;
    switch (c->route) {
    case R_COMPLETIONS:
    case R_CHAT: return route_generate(c);
    case R_EMBEDDINGS: return route_embeddings(c);
    case R_TOKENIZE:
    case R_DETOKENIZE: return route_tokenize(c);
    case R_HEALTH:
        return atomic_load(&c->s->draining) ? reply_text(c, 503, "application/json", "{\"status\":\"draining\"}")
                                            : reply_text(c, 200, "application/json", "{\"status\":\"ok\"}");
    case R_LIVE:
    case R_READY: return route_probe(c);
    case R_METRICS: return route_metrics(c);
    case R_MODELS:
        if (c->who == AUTH_NONE || c->who == AUTH_METRICS)
            return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0, "missing or invalid API key");
        return route_models(c);
    case R_ADMIN:
        if (c->who != AUTH_ADMIN)
            return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0, "this route needs the admin key");
        return route_admin(c);
    case R_ADMIN_MODELS:
        if (c->who != AUTH_ADMIN)
            return reply_err(c, 401, "authentication_error", NULL, "invalid_api_key", 0, "this route needs the admin key");
        return route_admin_models(c);
    case R_BAD_METHOD: return reply_err(c, 405, "invalid_request_error", NULL, "method_not_allowed", 0, "method not allowed on this route");
    default: return reply_err(c, 404, "not_found_error", NULL, "unknown_route", 0, "no such route");
    }
}

/* Collect the body up to the limit; past it, keep reading (and dropping)
 * so the 413 goes out on a connection still in a sane state. */
static void take_body(conn *c, const char *data, size_t n) {
    if (c->too_big || c->len + n > c->s->c->limits.max_body_bytes) {
        c->too_big = 1;
        return;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4096;
        while (cap < c->len + n + 1) cap *= 2;
        char *nb = realloc(c->body, cap);
        if (!nb) {
            c->too_big = 1;
            return;
        }
        c->body = nb;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = 0;
}

/* ---- the request's head ------------------------------------------------------- */

/* The headers that frame a request and the one that authenticates it,
 * counted: libmicrohttpd keeps every copy, but looks up only the first. */
typedef struct head_scan {
    int n_auth, n_length, n_te;
    const char *te;         /* the Transfer-Encoding value, when one */
} head_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    head_scan *h = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION)) h->n_auth++;
    else if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) h->n_length++;
    else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) h->n_te++, h->te = value;
    return MHD_YES;
}

/* 1 when v is "chunked", in any case, with optional spaces around. */
static int is_chunked(const char *v) {
    if (!v) return 0;
    while (*v == ' ' || *v == '\t') v++;
    if (strncasecmp(v, "chunked", 7)) return 0;
    for (v += 7; *v == ' ' || *v == '\t'; v++) {}
    return *v == 0;
}

/* Why the body's framing is ambiguous, or NULL (RFC 9112 6.1 and 6.3). A
 * request with both Transfer-Encoding and Content-Length is how requests
 * are smuggled: a proxy that trusts one header and a server that trusts
 * the other split one byte stream into different requests. libmicrohttpd
 * silently prefers chunked; tessera refuses and closes the connection,
 * which RFC 9112 6.1 asks for, since the next request's start is unknown. */
static const char *bad_framing(const head_scan *h, const char *version) {
    if (h->n_te && h->n_length) return "both Transfer-Encoding and Content-Length";
    if (h->n_length > 1) return "more than one Content-Length header";
    if (h->n_te && strcmp(version, MHD_HTTP_VERSION_1_1) != 0) return "Transfer-Encoding in an HTTP/1.0 request";
    if (h->n_te > 1 || (h->n_te && !is_chunked(h->te))) return "a Transfer-Encoding other than chunked";
    return NULL;
}

/* The declared body length, or 0 when none (chunked, or no body). The
 * header is well formed: libmicrohttpd answers 400 itself otherwise. */
static uint64_t declared_length(conn *c) {
    const char *v = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return v ? strtoull(v, NULL, 10) : 0;
}

static enum MHD_Result reply_bad_head(conn *c, const char *why) {
    char msg[160];
    snprintf(msg, sizeof(msg), "malformed request: %s", why);
    c->close = 1;
    return reply_err(c, 400, "invalid_request_error", NULL, "bad_request", 0, msg);
}

/* The first call of a request: its headers are in, its body is not. Check
 * what the headers alone decide, so a refusal costs no body: the framing,
 * a repeated Authorization, the key (which makes the connection
 * authenticated, and the request counted under its tenant), and a
 * declared length over the limit (RFC 9110 15.5.14 lets a server close
 * rather than read a body it refuses). Returns 1 with *res when answered. */
static int check_head(conn *c, const char *version, enum MHD_Result *res) {
    head_scan h = {0};
    MHD_get_connection_values(c->mc, MHD_HEADER_KIND, scan_header, &h);
    const char *why = bad_framing(&h, version);
    if (why) {
        *res = reply_bad_head(c, why);
        return 1;
    }
    if (h.n_auth > 1) {
        *res = reply_bad_head(c, "more than one Authorization header");
        return 1;
    }
    c->who = authenticate(c);
    if (c->who >= 0) c->tenant = c->who;
    if (c->who != AUTH_NONE) conn_authed(c);
    if (declared_length(c) > c->s->c->limits.max_body_bytes) {
        c->too_big = 1;
        c->close = 1;
        *res = reply_too_large(c);
        return 1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c) return MHD_NO;
        c->s = cls;
        c->mc = mc;
        c->tenant = -1;
        c->who = AUTH_NONE;
        c->gc = gate_of(mc);
        c->route = route_of(method, url, &c->allow);
        c->created = (int64_t)time(NULL);
        atomic_fetch_add(&c->s->n_conns, 1);
        *con_cls = c;
        enum MHD_Result res;
        return check_head(c, version, &res) ? res : MHD_YES;
    }
    if (*data_size) {
        take_body(c, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (c->acted && c->gen) return continue_generation(c);
    return c->acted && c->n_ereqs ? continue_embeddings(c) : act(c);
}

/* The outcome of a request that ended without one: cut off while it was
 * still arriving (the gate's deadline, libmicrohttpd's idle timeout), or
 * left by its client. */
static obs_outcome unsettled_outcome(const conn *c, enum MHD_RequestTerminationCode why) {
    if (c->acted) return OBS_CANCELLED;
    if (gate_closed_by(c) != GATE_OPEN || why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED) return OBS_REJ_READ_TIMEOUT;
    return OBS_CANCELLED;
}

/* The connection stops listening to r: no notify reaches it any more, and
 * work still in flight is cancelled. */
static void let_go(wk_worker *w, wk_req *r) {
    pthread_mutex_lock(&r->mu);
    r->notify = NULL;
    r->user = NULL;
    int done = r->phase == WK_DONE;
    pthread_mutex_unlock(&r->mu);
    if (!done) wk_cancel(w, r);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)mc;
    conn *c = *con_cls;
    if (!c) return;
    srv *s = cls;
    watch_remove(c);
    /* The next request on this connection is due within the read timeout
     * from now. A connection that failed is closing: it waits for nothing,
     * and must not stand in the anonymous set as if it did. */
    if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK) conn_idle(c);
    if (c->req) let_go(s->models[c->model].w, c->req);
    for (int i = 0; i < c->n_ereqs; i++) let_go(s->models[c->model].w, c->ereqs[i]);
    give_back_limits(c);
    if (!c->status) obs_request(s->obs, c->tenant, 499); /* left before any answer */
    settle(c, unsettled_outcome(c, why));
    wk_req_release(c->req);
    for (int i = 0; i < c->n_ereqs; i++) wk_req_release(c->ereqs[i]);
    free(c->ereqs);
    for (int i = 0; c->echo_text && i < c->n_prompts; i++) free(c->echo_text[i]);
    free(c->echo_text);
    free(c->echo_len);
    free(c->gs);
    wk_grammar_release(c->grammar);
    if (c->has_emb_mu) pthread_mutex_destroy(&c->emb_mu);
    free(c->pend);
    free(c->body);
    free(c);
    *con_cls = NULL;
    atomic_fetch_sub(&s->n_conns, 1);
}

/* ---- lifecycle ----------------------------------------------------------------- */

/* A token's text as the template's bos_token/eos_token ("" for none). */
static char *token_text(const tok *t, int32_t id) {
    size_t n = 0;
    const char *p = id >= 0 ? tok_text(t, id, &n) : NULL;
    char *r = malloc(n + 1);
    if (r) {
        if (n) memcpy(r, p, n);
        r[n] = '\0';
    }
    return r;
}

/* The model's chat template: the config's override, else the GGUF's
 * tokenizer.chat_template, compiled once here. One the interpreter cannot
 * run stops the start with the construct named, and the way out. Without
 * any, chat requests get the plain transcript (CHAT_DEFAULT). */
static int setup_template(srv_model *sm, const cfg_model *cm, const model *m, char *err, size_t errlen) {
    gguf_str g = {0};
    const char *text = cm->chat_template;
    size_t len = text ? strlen(text) : 0;
    if (text) sm->template_src = "config";
    else if (gguf_get_str(m->gguf, "tokenizer.chat_template", &g) == 0 && g.len) {
        text = g.ptr;
        len = g.len;
        sm->template_src = "gguf";
    }
    if (!text) return 0;
    const tok *t = wk_tok(sm->w);
    char *bos = token_text(t, tok_bos(t)), *eos = token_text(t, tok_eos(t)), inner[256];
    int rc = bos && eos ? chat_tpl_new(text, len, bos, eos, &sm->tpl, inner, sizeof(inner)) : TS_ERR_NOMEM;
    free(bos);
    free(eos);
    if (rc == TS_ERR_NOMEM) snprintf(err, errlen, "model '%s': out of memory for its chat template", cm->name);
    else if (rc)
        snprintf(err, errlen, "model '%s': the chat template from %s cannot be used: %s (give the model a "
                 "chat_template or chat_template_file in the config)", cm->name,
                 cm->chat_template ? cm->chat_template_from : "the GGUF file", inner);
    return rc;
}

/* The model's kind, its chat template, and the vocabulary's special tokens
 * that template text may spell out. */
static int setup_chat(srv_model *sm, const cfg_model *cm, char *err, size_t errlen) {
    const model *m = wk_model(sm->w);
    sm->embed = m == NULL;
    sm->chat = CHAT_DEFAULT;
    int rc = tks_set_new(wk_tok(sm->w), &sm->specials);
    if (rc) {
        snprintf(err, errlen, "model '%s': out of memory", cm->name);
        return rc;
    }
    if (sm->embed && cm->chat_template) {
        snprintf(err, errlen, "model '%s' makes embeddings: a chat_template has nothing to do", cm->name);
        return TS_ERR_INVAL;
    }
    return sm->embed ? 0 : setup_template(sm, cm, m, err, errlen);
}

static int start_workers(srv *s, char *err, size_t errlen) {
    const cfg *c = s->c;
    sched_tenant_cfg *tc = calloc(c->n_tenants, sizeof(*tc));
    if (!tc) return TS_ERR_NOMEM;
    for (size_t i = 0; i < c->n_tenants; i++) tc[i] = c->tenants[i].sched;
    int rc = 0;
    for (int m = 0; m < s->n_models && !rc; m++) {
        const cfg_model *cm = &c->models[m];
        wk_opts o = {
            .path = cm->path,
            .kv_bytes = cm->kv_cache_bytes,
            .swap_bytes = cm->swap_bytes,
            .block_size = cm->block_size,
            .max_seqs = cm->max_seqs,
            .budget_min = cm->budget_min,
            .budget_max = cm->budget_max,
            .threads = cm->threads,
            .device = cm->device,
            .kv_dtype = cm->kv_dtype,
            .policy = c->policy,
            .max_requests = MAX_REQUESTS,
            .tiers = c->tiers,
            .n_tiers = (int)c->n_tiers,
            .tenants = tc,
            .n_tenants = (int)c->n_tenants,
            .hooks = obs_hooks(s->obs, m),
            .prefix_cache = cm->prefix_cache,
            .shared_prefixes = (const char *const *)cm->shared_prefixes,
            .n_shared_prefixes = (int)cm->n_shared_prefixes,
        };
        char inner[384];
        rc = wk_new(&o, &s->models[m].w, inner, sizeof(inner));
        if (rc) snprintf(err, errlen, "model '%s': %s", cm->name, inner);
        else rc = setup_chat(&s->models[m], cm, err, errlen);
        /* Without the trie (out of memory) the model still serves; only
         * structured output is refused. */
        if (!rc && wk_model(s->models[m].w) && gr_vocab_new(wk_tok(s->models[m].w), &s->models[m].gv))
            s->models[m].gv = NULL;
        if (!rc) {
            const model *dm = wk_model(s->models[m].w);
            const enc_model *em = wk_encoder(s->models[m].w);
            if (dm) obs_model_weights(s->obs, m, dm->gguf, dm->f32_owned_bytes);
            else obs_model_weights(s->obs, m, em->gguf, em->f32_owned_n * sizeof(float));
            eng_dev_stats ds;
            wk_dev_stats(s->models[m].w, &ds);
            obs_model_engine(s->obs, m, &ds);
        }
    }
    free(tc);
    return rc;
}

void srv_model_describe(const srv *s, int i, char *buf, size_t cap) {
    const srv_model *sm = &s->models[i];
    if (sm->embed) {
        const enc_model *em = wk_encoder(sm->w);
        snprintf(buf, cap, "embedding model, %d dimensions, %s pooling, context %d", enc_dim(em),
                 enc_pool_name(enc_pool(em)), wk_ctx_len(sm->w));
        return;
    }
    const cfg_model *cm = &s->c->models[i];
    const char *from = !sm->template_src           ? "none (chats get a plain role-prefixed transcript)"
                       : !cm->chat_template        ? "tokenizer.chat_template of the GGUF file"
                       : strcmp(cm->chat_template_from, "config") ? cm->chat_template_from
                                                                  : "chat_template of the config";
    snprintf(buf, cap, "chat model, context %d, chat template: %s", wk_ctx_len(sm->w), from);
}

int srv_new(const cfg *c, srv **out, char *err, size_t errlen) {
    *out = NULL;
    srv *s = calloc(1, sizeof(*s));
    if (!s) return TS_ERR_NOMEM;
    s->c = c;
    s->n_models = (int)c->n_models;
    pthread_mutex_init(&s->lim_mu, NULL);
    pthread_mutex_init(&s->watch_mu, NULL);
    s->watch_ep = epoll_create1(EPOLL_CLOEXEC);
    pthread_mutex_init(&s->gate_mu, NULL);
    s->beat_real_us = s->beat_gate_us = wk_now_us();
    /* Anonymous connections may hold all but the reserve (config.h). */
    gate_init(&s->gate, (int64_t)c->limits.header_timeout_s * 1000000,
              c->limits.max_connections - c->limits.reserved_connections);
    const char **tn = calloc(c->n_tenants, sizeof(char *)), **mn = calloc(c->n_models, sizeof(char *));
    double *wt = calloc(c->n_tenants, sizeof(double)), *price = calloc(c->n_models, sizeof(double));
    s->models = calloc(c->n_models, sizeof(srv_model));
    s->lims = calloc(c->n_tenants, sizeof(lim_tenant));
    int rc = TS_ERR_NOMEM;
    if (!tn || !mn || !wt || !price || !s->models || !s->lims) goto err;
    for (size_t i = 0; i < c->n_tenants; i++) {
        tn[i] = c->tenants[i].sched.name;
        wt[i] = c->tenants[i].sched.weight;
        lim_tenant_init(&s->lims[i], c->tenants[i].requests_per_minute, c->tenants[i].tokens_per_minute,
                        c->tenants[i].max_concurrent, wk_now_us());
    }
    for (size_t i = 0; i < c->n_models; i++) {
        mn[i] = c->models[i].name;
        price[i] = c->models[i].price_per_hour;
    }
    if (!(s->obs = obs_new(tn, wt, (int)c->n_tenants, mn, price, (int)c->n_models))) goto err;
    if ((rc = cfg_auth_table(c, &s->auth))) {
        snprintf(err, errlen, "cannot build the key table");
        goto err;
    }
    if ((rc = start_workers(s, err, errlen))) goto err;
    if (c->limits.backend == CFG_BACKEND_REDIS) {
        wk_worker **wks = calloc(s->n_models > 0 ? (size_t)s->n_models : 1, sizeof *wks);
        rc = wks ? 0 : TS_ERR_NOMEM;
        for (int m = 0; wks && m < s->n_models; m++) wks[m] = s->models[m].w;
        if (!rc && !(rc = rfleet_new(c, &s->fleet, err, errlen))) rc = rfleet_start(s->fleet, wks, s->n_models);
        free(wks);      /* rfleet_start keeps a copy */
        if (rc) goto err;
    }
    free(tn); free(mn); free(wt); free(price);
    *out = s;
    return 0;
err:
    if (rc == TS_ERR_NOMEM && err && !err[0]) snprintf(err, errlen, "out of memory");
    free(tn); free(mn); free(wt); free(price);
    srv_free(s);
    return rc;
}

static unsigned http_threads(uint32_t max_connections) {
    unsigned n = max_connections / HTTP_CONNS_PER_THREAD;
    return n < HTTP_THREADS_MIN ? HTTP_THREADS_MIN : n > HTTP_THREADS_MAX ? HTTP_THREADS_MAX : n;
}

int srv_start(srv *s, char *err, size_t errlen) {
    struct addrinfo hints = {0}, *ai = NULL;
    char port[8];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(port, sizeof(port), "%u", (unsigned)s->c->port);
    int gai = getaddrinfo(s->c->host, port, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "listen address %s: %s", s->c->host, gai_strerror(gai));
        return TS_ERR_CONFIG;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, s->c->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->c->limits.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->c->limits.max_connections_per_ip,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->c->limits.idle_timeout_s,
                            MHD_OPTION_THREAD_POOL_SIZE, http_threads(s->c->limits.max_connections),
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s:%u (in use, or not an address of this machine)", s->c->host,
                 (unsigned)s->c->port);
        return TS_ERR_IO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->c->port;
    s->watching = pthread_create(&s->watcher, NULL, watch_loop, s) == 0;
    return 0;
}

uint16_t srv_port(const srv *s) { return s->port; }

void srv_shutdown(srv *s) {
    if (!s->d || atomic_exchange(&s->draining, 1)) return;
    /* The quiesced listen socket is ours to close, but only after
     * MHD_stop_daemon: a pool thread may still be using it (microhttpd.h),
     * and a closed fd number may be reused meanwhile. shutdown() stops the
     * listening at once (new clients are refused) and keeps the number. */
    MHD_socket lfd = MHD_quiesce_daemon(s->d);
    if (lfd != MHD_INVALID_SOCKET) shutdown(lfd, SHUT_RDWR);
    /* One deadline for every model: draining them one after another with
     * a full grace each would let the last model's requests run for
     * n_models graces. */
    int64_t deadline = wk_now_us() + (int64_t)s->c->limits.shutdown_grace_s * 1000000;
    for (int m = 0; m < s->n_models; m++) {
        int64_t left = deadline - wk_now_us();
        wk_drain(s->models[m].w, left > 0 ? left : 0);
    }
    /* Every request is done and its connection resumed: give them a moment
     * to write their last bytes before the daemon closes them. */
    for (int i = 0; i < DRAIN_FLUSH_TRIES && atomic_load(&s->n_conns) > 0; i++) {
        struct timespec ts = {.tv_nsec = DRAIN_FLUSH_NS};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(s->d);
    s->d = NULL;
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
}

static void stop_watcher(srv *s) {
    if (!s->watching) return;
    pthread_mutex_lock(&s->watch_mu);
    s->stop_watch = 1;
    pthread_mutex_unlock(&s->watch_mu);
    pthread_join(s->watcher, NULL);
    s->watching = 0;
}

void srv_free(srv *s) {
    if (!s) return;
    stop_watcher(s);
    if (s->d) MHD_stop_daemon(s->d);
    rfleet_free(s->fleet);     /* its thread reads the workers: before them */
    for (int m = 0; s->models && m < s->n_models; m++) {
        wk_free(s->models[m].w);
        gr_vocab_free(s->models[m].gv);    /* after every grammar compiled on it */
        tks_set_free(s->models[m].specials);
        chat_tpl_free(s->models[m].tpl);
    }
    free(s->models);
    auth_table_free(s->auth);
    obs_free(s->obs);
    free(s->lims);
    pthread_mutex_destroy(&s->lim_mu);
    pthread_mutex_destroy(&s->watch_mu);
    if (s->watch_ep >= 0) close(s->watch_ep);
    pthread_mutex_destroy(&s->gate_mu);
    free(s);
}
