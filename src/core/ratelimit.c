/* ratelimit.c - token buckets and concurrency caps; see ratelimit.h.
 *
 * Every quantity is a uint64_t count of units (LIM_UNITS_PER_TOKEN per
 * token) or an int64_t count of microseconds. Each multiplication is guarded
 * by the matching division first, so nothing overflows: x * r <= room is
 * tested as x <= room / r, which is exact for integers. */
#include "ratelimit.h"

#include <stddef.h>

#include "err.h"

#define U LIM_UNITS_PER_TOKEN

/* Microseconds from b forward to a, or 0 when a is not after b. Times are
 * int64 us that do not wrap (292,000 years), so they are ordered by plain
 * comparison; a wrap-safe difference would read a backwards jump of more
 * than 2^63 us as a forward one. The unsigned subtraction is exact for any
 * a > b, so there is no signed overflow either. */
static uint64_t time_after(int64_t a, int64_t b) {
    return a > b ? (uint64_t)a - (uint64_t)b : 0;
}

static uint64_t cap_units(const lim_bucket *b) { return b->burst * U; }

/* Units in b at now_us, refilled lazily; b is not changed. A time at or
 * before b->last_us adds nothing. */
static uint64_t level_at(const lim_bucket *b, int64_t now_us) {
    uint64_t cap = cap_units(b);
    uint64_t dt = time_after(now_us, b->last_us);
    if (dt == 0 || b->level >= cap) return b->level;
    uint64_t room = cap - b->level;
    if (dt > room / b->per_minute) return cap;     /* dt * r > room */
    return b->level + dt * b->per_minute;
}

/* The bucket's clock after seeing now_us: it only moves forward. */
static int64_t last_at(const lim_bucket *b, int64_t now_us) {
    return now_us > b->last_us ? now_us : b->last_us;
}

/* Bring b up to now_us (refill and clock). */
static void bucket_advance(lim_bucket *b, int64_t now_us) {
    b->level = level_at(b, now_us);
    b->last_us = last_at(b, now_us);
}

static int burst_ok(uint64_t per_minute, uint64_t *burst) {
    if (*burst == 0) *burst = per_minute;
    return *burst <= LIM_MAX_BURST;
}

int lim_bucket_init(lim_bucket *b, uint64_t per_minute, uint64_t burst, int64_t now_us) {
    if (!b || !burst_ok(per_minute, &burst)) return TS_ERR_INVAL;
    b->per_minute = per_minute;
    b->burst = burst;
    b->level = burst * U;
    b->last_us = now_us;
    return 0;
}

int lim_bucket_reconfig(lim_bucket *b, uint64_t per_minute, uint64_t burst,
                        int64_t now_us) {
    if (!b || !burst_ok(per_minute, &burst)) return TS_ERR_INVAL;
    if (b->per_minute == 0) return lim_bucket_init(b, per_minute, burst, now_us);
    bucket_advance(b, now_us);
    b->per_minute = per_minute;
    b->burst = burst;
    if (b->level > burst * U) b->level = burst * U;
    if (per_minute == 0) b->level = burst * U;   /* unlimited: keep it tidy */
    return 0;
}

int64_t lim_bucket_wait_us(const lim_bucket *b, uint64_t n, int64_t now_us) {
    if (b->per_minute == 0) return 0;
    if (n > b->burst) return LIM_RETRY_NONE;
    uint64_t need = n * U, have = level_at(b, now_us);
    if (have >= need) return 0;
    /* Refill resumes from the bucket's clock, which may be ahead of now_us
     * if the caller's clock went back: wait out that gap too. */
    uint64_t deficit = need - have, r = b->per_minute;
    uint64_t wait = deficit / r + (deficit % r != 0);           /* ceil */
    uint64_t gap = time_after(b->last_us, now_us);
    if (wait > (uint64_t)INT64_MAX || gap > (uint64_t)INT64_MAX - wait) return INT64_MAX;
    return (int64_t)(wait + gap);
}

uint64_t lim_bucket_available(const lim_bucket *b, int64_t now_us) {
    if (b->per_minute == 0) return UINT64_MAX;
    return level_at(b, now_us) / U;
}

int lim_tenant_init(lim_tenant *t, uint64_t req_per_min, uint64_t tok_per_min,
                    uint32_t max_concurrent, int64_t now_us) {
    if (!t) return TS_ERR_INVAL;
    lim_tenant z = {0};
    if (lim_bucket_init(&z.requests, req_per_min, 0, now_us) < 0 ||
        lim_bucket_init(&z.tokens, tok_per_min, 0, now_us) < 0)
        return TS_ERR_INVAL;
    z.max_concurrent = max_concurrent;
    *t = z;
    return 0;
}

/* Take n tokens from b at now_us; the caller has checked that they are there. */
static void bucket_take(lim_bucket *b, uint64_t n, int64_t now_us) {
    if (b->per_minute == 0) return;
    bucket_advance(b, now_us);
    b->level -= n * U;
}

static int concurrency_full(const lim_tenant *t) {
    if (t->in_flight == UINT32_MAX) return 1;     /* the counter itself is full */
    return t->max_concurrent != 0 && t->in_flight >= t->max_concurrent;
}

lim_reason lim_admit(lim_tenant *t, uint64_t reserve_tokens, int64_t now_us,
                     int64_t *retry_after_us) {
    int64_t ignored;
    if (!retry_after_us) retry_after_us = &ignored;
    *retry_after_us = LIM_RETRY_NONE;

    /* Decide with pure queries first; write only when every limit allows. */
    int64_t wr = lim_bucket_wait_us(&t->requests, 1, now_us);
    int64_t wt = lim_bucket_wait_us(&t->tokens, reserve_tokens, now_us);
    if (wr == LIM_RETRY_NONE || wt == LIM_RETRY_NONE) return LIM_TOO_LARGE;
    if (wr > 0 || wt > 0) {
        *retry_after_us = wt > wr ? wt : wr;
        return wt > wr ? LIM_RATE_TOKENS : LIM_RATE_REQUESTS;
    }
    if (concurrency_full(t)) return LIM_CONCURRENCY;

    bucket_take(&t->requests, 1, now_us);
    bucket_take(&t->tokens, reserve_tokens, now_us);
    t->in_flight++;
    *retry_after_us = 0;
    return LIM_OK;
}

/* Give n tokens back to b, capped at its capacity. */
static void bucket_credit(lim_bucket *b, uint64_t n) {
    uint64_t room = cap_units(b) - b->level;
    b->level = n > room / U ? cap_units(b) : b->level + n * U;
}

/* Charge n more tokens to b, stopping at empty. */
static void bucket_debit(lim_bucket *b, uint64_t n) {
    b->level = n > b->level / U ? 0 : b->level - n * U;
}

int lim_finish(lim_tenant *t, uint64_t reserved_tokens, uint64_t used_tokens,
               int64_t now_us) {
    if (!t || t->in_flight == 0) return TS_ERR_INVAL;
    t->in_flight--;
    lim_bucket *b = &t->tokens;
    if (b->per_minute == 0) return 0;
    bucket_advance(b, now_us);
    if (used_tokens < reserved_tokens)
        bucket_credit(b, reserved_tokens - used_tokens);
    else if (used_tokens > reserved_tokens)
        bucket_debit(b, used_tokens - reserved_tokens);
    return 0;
}

const char *lim_reason_str(lim_reason r) {
    switch (r) {
    case LIM_OK:            return "ok";
    case LIM_RATE_REQUESTS: return "request rate limit exceeded";
    case LIM_RATE_TOKENS:   return "token rate limit exceeded";
    case LIM_CONCURRENCY:   return "too many concurrent requests";
    case LIM_TOO_LARGE:     return "request needs more tokens than the token limit allows";
    }
    return "unknown limit reason";
}
