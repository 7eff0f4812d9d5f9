/*
 * loadgen.h - the open-loop HTTP client of `tessera bench`: sends each
 * request of a schedule at its time, streams the answers, and records what
 * happened to each one.
 *
 * Open loop: a request leaves at its scheduled time whether or not earlier
 * ones have been answered, so a slow server meets the same offered load as a
 * fast one and its queueing shows in the latencies (measured from the
 * scheduled time; see report.h). One thread drives libcurl's multi
 * interface: thousands of concurrent streaming requests cost sockets and
 * buffers, not threads. The clock (CLOCK_MONOTONIC) is read here and only
 * here; every time recorded is seconds since the run started.
 *
 * Bounds. Requests are only sent to the base URL given, over http or https,
 * with redirects not followed and any proxy in the environment ignored. No
 * request is sent after send_s (or after the schedule ends); requests still
 * open drain_s later are cut (RPT_ST_ABORTED), and so is everything at
 * hard_s, so a run always ends by itself. A stop flag (set from a signal
 * handler) ends the run early, cutting what is open; the requests that were
 * not yet due are then left out of the result.
 *
 * Requests are POST /v1/completions with the prompt as token ids (exact
 * prompt lengths on any OpenAI-compatible server; ids from the scenario's
 * token_ids range), or POST /v1/chat/completions with a user message of as
 * many short random words (about one token each: approximate). Both ask for
 * max_tokens = the output length, stream: true with include_usage (the
 * usage chunk gives the exact token counts), temperature from the scenario,
 * and ignore_eos: true (a vLLM extension that other servers, tessera
 * included, ignore) so that lengths hold where supported.
 */
#ifndef TS_BENCH_LOADGEN_H
#define TS_BENCH_LOADGEN_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <signal.h>
#include <stddef.h>

#include "arrivals.h"
#include "report.h"
#include "scenario.h"

typedef struct lg_opts {
    const char *url;          /* base URL, "http://127.0.0.1:8080" (no path) */
    double send_s;            /* s; nothing is sent at or after this; 0 = the schedule's end */
    double drain_s;           /* s after the last send before open requests are cut */
    double hard_s;            /* s; absolute end of the run */
    double connect_timeout_s; /* per connection attempt */
    int progress;             /* 1: a live progress line on stderr */
    volatile sig_atomic_t *stop;   /* may be NULL; nonzero: stop now */
} lg_opts;

/*
 * Run schedule ev[0..n) against o->url. OUT r: n records (the caller's
 * array), filled for every request that was due; OUT n_done: how many of
 * them (n unless stopped early); OUT run_s: the run's length in seconds.
 * Returns 0, TS_ERR_INVAL (bad URL or options, err says why) or
 * TS_ERR_NOMEM / TS_ERR_IO (libcurl could not start). Free the records'
 * event times with rpt_reqs_free(r, *n_done).
 */
int lg_run(const scn *s, const arr_event *ev, size_t n, const lg_opts *o, rpt_req *r, size_t *n_done,
           double *run_s, char *err, size_t errlen);

/* The options that keep a libcurl easy handle on the URL it was given: no
 * redirects followed, no proxy from the environment, http and https only.
 * Every handle bench makes (loadgen's requests, scrape.h's admin GETs) gets
 * them, from here, so the rule has one copy. */
void lg_curl_safe(CURL *h);

/* The message of an OpenAI-shaped error object j ({"error": {"message":
 * "..."}}, an error answer or an SSE error event): the message (owned by
 * j); "" when j has an "error" but no string message in it; NULL when j has
 * no "error" (or j is NULL). */
const char *lg_error_message(const cJSON *j);

/* Check that url is an http(s) base URL without a path, query or user
 * part, as lg_run requires. 0 or TS_ERR_INVAL with err set. */
int lg_url_check(const char *url, char *err, size_t errlen);

#endif
