/*
 * ratelimit.h - per-tenant admission limits: a token bucket for requests per
 * minute, a token bucket for tokens per minute, and a cap on requests in
 * flight. The HTTP layer asks lim_admit before a request enters the
 * scheduler and calls lim_finish exactly once when an admitted request ends
 * (completed, cancelled or failed).
 *
 * Tokens per minute are reserved pessimistically at admission (prompt +
 * max_tokens, since the output length is not known yet) and the unused part
 * is refunded at finish, so a tenant is held to what it really used without
 * being able to overrun its rate while requests are in flight.
 *
 * Arithmetic is exact integer arithmetic. A bucket counts in units of
 * 1/LIM_UNITS_PER_TOKEN token, and LIM_UNITS_PER_TOKEN is the number of
 * microseconds in a minute, so a rate of r per minute refills exactly r
 * units per microsecond: no rounding, no drift, the same answer on every
 * machine. Refill is lazy (computed from the time elapsed since the bucket
 * was last touched), capped at the burst capacity, and never negative: a
 * clock that steps backwards adds nothing, and the bucket's time only moves
 * forward (like fair.c's min_vruntime), so going back and forth never mints
 * tokens. Times are int64 microseconds compared as plain integers: they do
 * not wrap in 292,000 years, so a jump of any size backwards reads as
 * backwards.
 *
 * Every check answers allow or deny; a denial carries how long to wait until
 * the same request would be allowed (HTTP Retry-After), exactly: after that
 * many microseconds it is admitted, one microsecond sooner it is not (given
 * no other traffic in between). A request that can never fit (it reserves
 * more tokens than the bucket holds when full) is denied as LIM_TOO_LARGE
 * with no retry time. Admission is all-or-nothing across the three limits: a
 * denial leaves the tenant bitwise unchanged. A limit of 0 means unlimited.
 *
 * The caller owns every struct here (plain values, no heap, no pointers).
 * Nothing here reads a clock, allocates, locks or does I/O: time is the
 * now_us argument, and a caller that shares a lim_tenant between threads
 * must serialise the calls itself.
 */
#ifndef TS_RATELIMIT_H
#define TS_RATELIMIT_H

#include <stdint.h>

/* Units per token: us per minute, so r per minute = r units per us. */
#define LIM_UNITS_PER_TOKEN 60000000ull
/* Largest representable burst, tokens (about 3.07e11). */
#define LIM_MAX_BURST       (UINT64_MAX / LIM_UNITS_PER_TOKEN)
/* retry_after_us when no wait can be promised (too large, concurrency). */
#define LIM_RETRY_NONE      ((int64_t)-1)

typedef enum lim_reason {
    LIM_OK = 0,               /* admitted */
    LIM_RATE_REQUESTS,        /* requests/min exhausted; retry time given */
    LIM_RATE_TOKENS,          /* tokens/min exhausted; retry time given */
    LIM_CONCURRENCY,          /* too many requests in flight; no retry time */
    LIM_TOO_LARGE,            /* reserves more than the token burst; never fits */
} lim_reason;

/* A token bucket. Fields are private to limits.c except for reading. */
typedef struct lim_bucket {
    uint64_t per_minute;      /* refill, tokens/min = units/us; 0 = unlimited */
    uint64_t burst;           /* tokens; capacity when full */
    uint64_t level;           /* units held, <= burst * LIM_UNITS_PER_TOKEN */
    int64_t last_us;          /* us; latest time seen, never moves back */
} lim_bucket;

typedef struct lim_tenant {
    lim_bucket requests;      /* one token per request */
    lim_bucket tokens;        /* prompt + max_tokens reserved per request */
    uint32_t max_concurrent;  /* requests; 0 = unlimited */
    uint32_t in_flight;       /* requests admitted and not yet finished */
} lim_tenant;

/* Set b up, full, at time now_us.
 *   per_minute: refill rate in tokens per minute; 0 = unlimited (the bucket
 *               always allows and never changes).
 *   burst:      capacity in tokens; 0 = per_minute (one minute's worth).
 * Returns 0, or TS_ERR_INVAL (b untouched) for a NULL b or a capacity above
 * LIM_MAX_BURST. */
int lim_bucket_init(lim_bucket *b, uint64_t per_minute, uint64_t burst, int64_t now_us);

/* Change b's rate and burst at now_us (a configuration reload) keeping what
 * it holds: it refills at the old rate up to now_us, then is capped at the
 * new capacity. A bucket that was unlimited starts full. Same arguments and
 * errors as lim_bucket_init. */
int lim_bucket_reconfig(lim_bucket *b, uint64_t per_minute, uint64_t burst,
                        int64_t now_us);

/* Microseconds from now_us until n tokens are available in b: 0 when they
 * are now (or b is unlimited), LIM_RETRY_NONE when n > burst, saturating at
 * INT64_MAX. Pure: b is not changed. */
int64_t lim_bucket_wait_us(const lim_bucket *b, uint64_t n, int64_t now_us);

/* Whole tokens available in b at now_us (rounded down), for headers such as
 * x-ratelimit-remaining-tokens; UINT64_MAX when unlimited. Pure. */
uint64_t lim_bucket_available(const lim_bucket *b, int64_t now_us);

/* Set t up with full buckets whose bursts are one minute's worth.
 *   req_per_min:    requests per minute; 0 = unlimited.
 *   tok_per_min:    tokens per minute; 0 = unlimited.
 *   max_concurrent: requests in flight; 0 = unlimited.
 * For other bursts, call lim_bucket_init on t->requests or t->tokens
 * afterwards. Returns 0, or TS_ERR_INVAL (t untouched) as lim_bucket_init. */
int lim_tenant_init(lim_tenant *t, uint64_t req_per_min, uint64_t tok_per_min,
                    uint32_t max_concurrent, int64_t now_us);

/* Try to admit one request that reserves reserve_tokens (prompt +
 * max_tokens) at now_us. On LIM_OK it takes one request token and
 * reserve_tokens tokens and counts the request in flight; on any denial t is
 * left bitwise unchanged. Precedence when several limits deny: LIM_TOO_LARGE
 * (permanent) first; then the rate limits, reporting the one with the longer
 * wait (requests on a tie) and the wait after which both allow; then
 * LIM_CONCURRENCY.
 *   retry_after_us: OUT, may be NULL. 0 on LIM_OK; for the rate limits the
 *                   exact wait in us (> 0); LIM_RETRY_NONE for LIM_TOO_LARGE
 *                   and LIM_CONCURRENCY (a slot frees when another request
 *                   ends, which no clock can promise). */
lim_reason lim_admit(lim_tenant *t, uint64_t reserve_tokens, int64_t now_us,
                     int64_t *retry_after_us);

/* End an admitted request at now_us: it leaves the in-flight count, and the
 * unused part of its reservation, reserved_tokens - used_tokens, goes back to
 * the token bucket (capped at the burst). If it used more than it reserved
 * (an estimate that fell short), the excess is charged, stopping at an empty
 * bucket. Returns 0, or TS_ERR_INVAL (t untouched) when nothing is in flight:
 * a request finished twice. */
int lim_finish(lim_tenant *t, uint64_t reserved_tokens, uint64_t used_tokens,
               int64_t now_us);

/* A short English message for a reason ("token rate limit exceeded");
 * "unknown limit reason" for values outside the enum. */
const char *lim_reason_str(lim_reason r);

#endif
