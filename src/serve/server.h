/*
 * server.h - tessera serve: the OpenAI-compatible HTTP front (libmicrohttpd)
 * over one worker per configured model.
 *
 * HTTP threads authenticate (API key -> tenant), apply the tenant's rate
 * and concurrency limits, parse and validate the request, tokenize it, and
 * hand it to the model's worker; they never touch the scheduler or the
 * engine. A connection waiting for tokens is suspended (not a blocked
 * thread), and the worker resumes it when its outbox changes, so thousands
 * of slow streaming clients cost memory, not threads.
 *
 * Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
 * GET /health, GET /health/live and /health/ready (probes: no key, counted
 * in no request series; server.c says what each checks), GET /metrics
 * (metrics or admin key), GET /admin/tenants (admin key). Errors use
 * OpenAI's JSON error shape with 400/401/404/405/413/429/503.
 *
 * What it promises at the door (gate.h): each request arrives whole within
 * header_timeout_s of its start or its connection is closed; clients
 * without a valid key never hold more than max_connections -
 * reserved_connections connections, so a tenant can always connect; one
 * address holds at most max_connections_per_ip (when set); a request with
 * ambiguous framing (Content-Length with Transfer-Encoding, two lengths, a
 * coding other than chunked) or two Authorization headers gets 400, and a
 * declared body over max_body_bytes gets 413 before it is read; both close
 * the connection. Each request counts once under one outcome (obs.h).
 *
 * Shutdown (srv_shutdown): stop accepting, let in-flight requests finish
 * within the configured grace, end the rest with an explicit 503 error,
 * then stop.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct srv srv;

/* Load every model and build the server from a validated configuration
 * (which must outlive it). Nothing listens yet. */
int srv_new(const cfg *c, srv **out, char *err, size_t errlen);
/* Listen on the configured address (port 0: any free port). */
int srv_start(srv *s, char *err, size_t errlen);
uint16_t srv_port(const srv *s);
/* One line about model i for the start-up log: its kind, context length
 * and the chat template in force with where it came from. */
void srv_model_describe(const srv *s, int i, char *buf, size_t cap);
/* Graceful stop; see above. Safe to call once after srv_start. */
void srv_shutdown(srv *s);
void srv_free(srv *s);

#endif
