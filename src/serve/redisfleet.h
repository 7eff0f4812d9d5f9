/*
 * redisfleet.h - tenant limits and fair-share figures shared by every
 * replica through one Redis (limits.backend: redis in config.h).
 *
 * Limits. One replica alone counts a tenant's requests/min, tokens/min and
 * requests in flight in its own lim_tenant (ratelimit.h); N replicas would
 * give the tenant N times its quota. With this module every replica asks
 * Redis instead, through two Lua scripts that Redis runs atomically (loaded
 * once, called by EVALSHA; nothing is read in C and written back):
 *   admit   the semantics of lim_admit: token buckets in 1/60,000,000-token
 *           units refilled lazily, all-or-nothing across the three limits,
 *           the same precedence and the exact Retry-After; the time is
 *           Redis's own (TIME), so the replicas' clocks do not matter;
 *   finish  those of lim_finish: the request leaves the in-flight count
 *           and the unused part of its reservation goes back (the excess
 *           of one that used more is charged, down to empty).
 * Lua's numbers are doubles, exact to 2^53, so with this backend a rate is
 * at most CFG_REDIS_MAX_RATE per minute (the config refuses more), and
 * every product is guarded as ratelimit.c guards it.
 *
 * In flight. Each replica counts its own requests in a field of the
 * tenant's in-flight hash, and proves it is alive with a key that expires
 * after redis_lease_ms unless its heartbeat (every redis_sync_ms) renews
 * it. The admit script sums only the fields of live replicas and deletes
 * the others, so the requests of a replica that died stop counting one
 * lease after its last heartbeat. The heartbeat also writes the replica's
 * own counts (it knows them exactly), repairing a count that a finish
 * lost while Redis was away.
 *
 * Keys, under the prefix P (redis_prefix), tenant T, model M, replica R:
 *   P:lim:T          hash: the two buckets (rl/rt/rr, tl/tt/tr: level,
 *                    time, rate); expires when both would be full again,
 *                    which is what a missing key reads as
 *   P:inflight:T     hash R -> requests in flight on R
 *   P:alive:R        "1", expires one lease after R's last heartbeat
 *   P:svc:M:R        hash T -> T's service on R as last added to the
 *                    total (fair share, below; a day)
 *   P:svctot:M       hash T -> the sum of every replica's P:svc:M:R
 *   P:svcq:M:R       hash T -> T's fair-queue key on R, while queued there
 *                    (a lease)
 *   P:svcreps:M      set of the live replicas that published for M
 *   P:fin:R          the last finish of R that Redis applied (a day)
 * Two fleets sharing one Redis need two prefixes. Keys are named inside
 * the scripts, so Redis Cluster is not supported: one Redis (or a
 * primary with replicas behind a failover address).
 *
 * Failure. Every call is bounded by redis_timeout_ms (connect, then each
 * command). A failed or late call counts in tessera_redis_errors_total,
 * drops the connection and marks Redis down, logging one line. Only the
 * sync thread reconnects, after a backoff (100 ms doubling to 5 s), so no
 * request ever waits for a connect, and while there is no connection a
 * request goes straight to the failure mode. While down, a
 * request's limits are decided by redis_on_error: open, the replica's own
 * local limits (as backend local: the fleet may then admit up to N times
 * the quota); closed, a 503 with Retry-After. The first call that succeeds
 * logs the recovery. A request is finished where it was admitted, so none
 * is counted twice: one admitted by Redis whose finish cannot reach it
 * leaves this replica's count at once (the heartbeat writes the counts
 * back when Redis answers again), and its refund (or the excess it used)
 * waits in the replica (up to 4096 of them; beyond, the tenant stays
 * charged, counted in tessera_redis_settle_dropped_total) and is delivered
 * by the next call that gets through. A call that timed out may still run
 * when a slow Redis catches up: each finish carries the replica's sequence
 * number and Redis applies a settlement once; a late admission charges the
 * bucket for a request the replica decided locally (over, never under).
 * What fail open cannot give: requests admitted locally during the outage
 * are not in the fleet's counts after it, and each replica's local
 * buckets allow a tenant its whole quota. Host names are resolved without
 * a time bound (getaddrinfo): give an address, or a name the local
 * resolver answers at once (/etc/hosts, a cluster DNS).
 *
 * Fair share. Every redis_sync_ms a thread publishes each model's tenants'
 * service on this replica (sched_tenant_stats.service over the weight, in
 * FQ_SCALE units) and reads back the sum over the other live replicas,
 * which it hands to the model's worker (wk_fleet_remote): the fair queue
 * then orders and lifts tenants by their fleet-wide counters (fq.h,
 * "Fleet-wide"). It also publishes the keys of the tenants queued here
 * (P:svcq:M:R, for a lease) and hands in the least key of each tenant
 * queued elsewhere, so that a tenant is lifted against the fleet's queue,
 * not this replica's alone. The figures lag by up to one period, so
 * fairness holds fleet-wide to within one period's service. A replica
 * that leaves takes nothing away: its figures stay in P:svctot:M, so the
 * sums only grow (one cut off for more than a day, whose own hash has
 * expired, is counted again when it returns). Figures lost with Redis's
 * data are absorbed by the fair queue, whose keys never move back.
 *
 * Threads: rfleet_admit and rfleet_finish are called from HTTP threads;
 * one mutex guards the single connection, the counts and the state, and no
 * caller waits on it longer than a few bounded calls. rfleet_metrics may
 * be called from any thread.
 */
#ifndef TS_REDISFLEET_H
#define TS_REDISFLEET_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "ratelimit.h"
#include "strbuf.h"
#include "worker.h"

typedef struct rfleet rfleet;

typedef enum rfleet_verdict {
    RFLEET_DECIDED = 0,     /* Redis decided: see why and retry_us */
    RFLEET_LOCAL,           /* decide locally: Redis is down and failing open,
                               or the tenant has no limits to count */
    RFLEET_CLOSED,          /* Redis is down, fail closed: answer 503 */
} rfleet_verdict;

/* Seconds a fail-closed 503 asks the client to wait: about the first
 * reconnection attempts. */
#define RFLEET_RETRY_CLOSED_S 1

/* A fleet state for c (backend redis), for the tenants of c in order. It
 * connects at once; an unreachable Redis is not an error (the replica
 * starts in the failure mode, logs it, and keeps trying). Returns 0, or
 * TS_ERR_NOMEM / TS_ERR_INVAL with err set. */
int rfleet_new(const cfg *c, rfleet **out, char *err, size_t errlen);

/* Start the heartbeat and fair-share thread over the models' workers
 * (n_workers, in c's model order; NULL entries are skipped; the array is
 * copied). They must outlive the thread: rfleet_stop before freeing them. */
int rfleet_start(rfleet *f, wk_worker *const *workers, int n_workers);

/* Stop the thread (if started). Idempotent. */
void rfleet_stop(rfleet *f);

/* Admit one request of tenant reserving reserve tokens. RFLEET_DECIDED
 * sets *why (LIM_OK: admitted, and it must be finished with rfleet_finish)
 * and *retry_us as lim_admit does; otherwise the caller decides with its
 * local limits (RFLEET_LOCAL) or refuses (RFLEET_CLOSED). A tenant without
 * any limit is always RFLEET_LOCAL: Redis is not asked, and a Redis that
 * is down never refuses it. */
rfleet_verdict rfleet_admit(rfleet *f, int tenant, uint64_t reserve, lim_reason *why, int64_t *retry_us);

/* End a request that rfleet_admit admitted (exactly once). */
void rfleet_finish(rfleet *f, int tenant, uint64_t reserved, uint64_t used);

/* Append the Prometheus series: tessera_redis_up, tessera_redis_errors_total,
 * tessera_redis_fallback_total, tessera_redis_settle_dropped_total. */
void rfleet_metrics(rfleet *f, strbuf *out);

/* Stop and free; safe on NULL. */
void rfleet_free(rfleet *f);

#endif
