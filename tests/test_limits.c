/* test_limits.c - unit tests of the admission limits (src/core/limits.c).
 *
 * All arithmetic in limits.c is integer, so every expectation here is exact:
 * levels in units at hand-computed times, Retry-After values checked by
 * asking again exactly then (admitted) and one microsecond sooner (denied),
 * and denials checked to leave the tenant bitwise unchanged. A property test
 * drives random traffic from a seeded generator of its own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "err.h"
#include "ratelimit.h"

#define U LIM_UNITS_PER_TOKEN
#define SEC 1000000LL   /* us */
#define MIN (60 * SEC)  /* us */

static uint64_t rng_state;
static uint64_t rng_next(void) {     /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Admit, expecting a denial that leaves t bitwise unchanged. */
static lim_reason deny(lim_tenant *t, uint64_t reserve, int64_t now, int64_t *retry) {
    lim_tenant before = *t;
    lim_reason r = lim_admit(t, reserve, now, retry);
    assert_int_not_equal(r, LIM_OK);
    assert_memory_equal(t, &before, sizeof *t);
    return r;
}

static void admit(lim_tenant *t, uint64_t reserve, int64_t now) {
    int64_t retry = 12345;
    assert_int_equal(lim_admit(t, reserve, now, &retry), LIM_OK);
    assert_int_equal(retry, 0);
}

/* ---- buckets ------------------------------------------------------------- */

static void test_bucket_init(void **st) {
    (void)st;
    lim_bucket b;
    assert_int_equal(lim_bucket_init(&b, 600, 0, 5), 0);
    assert_int_equal(b.burst, 600);                 /* burst 0 = one minute */
    assert_int_equal(b.level, 600 * U);             /* starts full */
    assert_int_equal(b.last_us, 5);
    assert_int_equal(lim_bucket_available(&b, 5), 600);
    assert_int_equal(lim_bucket_init(&b, 600, 10, 0), 0);
    assert_int_equal(lim_bucket_available(&b, 0), 10);

    lim_bucket ref = b;
    assert_int_equal(lim_bucket_init(&b, LIM_MAX_BURST + 1, 0, 0), TS_ERR_INVAL);
    assert_int_equal(lim_bucket_init(&b, 1, LIM_MAX_BURST + 1, 0), TS_ERR_INVAL);
    assert_int_equal(lim_bucket_init(NULL, 1, 1, 0), TS_ERR_INVAL);
    assert_memory_equal(&b, &ref, sizeof b);
    assert_int_equal(lim_bucket_init(&b, 1, LIM_MAX_BURST, 0), 0);   /* the edge fits */
    assert_int_equal(lim_bucket_available(&b, 0), LIM_MAX_BURST);

    lim_tenant t, tref;
    memset(&t, 0x5a, sizeof t);
    tref = t;
    assert_int_equal(lim_tenant_init(&t, 1, LIM_MAX_BURST + 1, 1, 0), TS_ERR_INVAL);
    assert_int_equal(lim_tenant_init(NULL, 1, 1, 1, 0), TS_ERR_INVAL);
    assert_memory_equal(&t, &tref, sizeof t);
}

static void test_refill_exact(void **st) {
    (void)st;
    lim_tenant t;
    /* 60 tokens/min = one token per second = 60 units per us; burst 10. */
    assert_int_equal(lim_tenant_init(&t, 0, 60, 0, 0), 0);
    assert_int_equal(lim_bucket_init(&t.tokens, 60, 10, 0), 0);
    admit(&t, 10, 0);
    assert_int_equal(t.tokens.level, 0);
    assert_int_equal(lim_bucket_available(&t.tokens, SEC - 1), 0);
    assert_int_equal(lim_bucket_available(&t.tokens, SEC), 1);
    assert_int_equal(lim_bucket_available(&t.tokens, 2500000), 2);
    admit(&t, 0, 2500000);                            /* commits the refill */
    assert_int_equal(t.tokens.level, 2500000ull * 60);  /* 2.5 tokens, exactly */
    assert_int_equal(t.tokens.level, 5 * U / 2);
    /* Refill stops at the burst: 7.5 more tokens fit, then it is full. */
    assert_int_equal(lim_bucket_available(&t.tokens, 2500000 + 7500000 - 1), 9);
    assert_int_equal(lim_bucket_available(&t.tokens, 2500000 + 7500000), 10);
    assert_int_equal(lim_bucket_available(&t.tokens, 1000 * MIN), 10);

    /* A rate that does not divide anything evenly: 7 tokens/min. One minute
     * refills exactly 7 tokens, one microsecond exactly 7 units. */
    lim_bucket b;
    assert_int_equal(lim_bucket_init(&b, 7, 100, 0), 0);
    b.level = 0;
    assert_int_equal(lim_bucket_available(&b, MIN - 1), 6);
    assert_int_equal(lim_bucket_available(&b, MIN), 7);
    assert_int_equal(lim_bucket_wait_us(&b, 1, 0), 8571429);   /* ceil(6e7 / 7) */
    assert_int_equal(lim_bucket_wait_us(&b, 7, 0), MIN);
    assert_int_equal(lim_bucket_wait_us(&b, 101, 0), LIM_RETRY_NONE);
}

static void test_burst(void **st) {
    (void)st;
    lim_tenant t;
    /* 600 requests/min (one per 100 ms) with a burst of 5. */
    assert_int_equal(lim_tenant_init(&t, 600, 0, 0, 0), 0);
    assert_int_equal(lim_bucket_init(&t.requests, 600, 5, 0), 0);
    for (int i = 0; i < 5; i++) admit(&t, 0, 1000);
    int64_t retry;
    assert_int_equal(deny(&t, 0, 1000, &retry), LIM_RATE_REQUESTS);
    assert_int_equal(retry, 100000);
    assert_int_equal(deny(&t, 0, 1000 + 99999, &retry), LIM_RATE_REQUESTS);
    assert_int_equal(retry, 1);
    admit(&t, 0, 1000 + 100000);
    /* After a long idle time the burst is back, and no more than that. */
    for (int i = 0; i < 5; i++) admit(&t, 0, 10 * MIN);
    assert_int_equal(deny(&t, 0, 10 * MIN, &retry), LIM_RATE_REQUESTS);
}

/* Retry-After is exact: at now + retry the same request is admitted, at
 * now + retry - 1 it is not. Random rates, bursts and sizes. */
static void test_retry_exact(void **st) {
    (void)st;
    rng_state = 42;
    for (int round = 0; round < 2000; round++) {
        uint64_t rpm = 1 + rng_next() % 1000, tpm = 1 + rng_next() % 200000;
        lim_tenant t;
        assert_int_equal(lim_tenant_init(&t, rpm, tpm, 0, 0), 0);
        int64_t now = (int64_t)(rng_next() % (uint64_t)MIN);
        /* Drain with random requests until one is denied. */
        for (int i = 0; i < 100000; i++) {
            uint64_t n = 1 + rng_next() % (tpm < 5000 ? tpm : 5000);
            int64_t retry;
            lim_tenant before = t;
            lim_reason r = lim_admit(&t, n, now, &retry);
            if (r == LIM_OK) {
                now += (int64_t)(rng_next() % 1000);
                continue;
            }
            assert_memory_equal(&t, &before, sizeof t);
            assert_true(r == LIM_RATE_REQUESTS || r == LIM_RATE_TOKENS);
            assert_true(retry > 0);
            int64_t r2;
            /* One us sooner the limit that set the wait still denies it. */
            assert_int_equal(deny(&t, n, now + retry - 1, &r2), r);
            assert_int_equal(r2, 1);
            admit(&t, n, now + retry);
            break;
        }
    }
}

static void test_all_or_nothing(void **st) {
    (void)st;
    lim_tenant t;
    int64_t retry;
    assert_int_equal(lim_tenant_init(&t, 60, 1000, 2, 0), 0);
    admit(&t, 900, 0);
    /* Tokens deny: the request bucket keeps its token, nothing else moves. */
    assert_int_equal(deny(&t, 200, 10, &retry), LIM_RATE_TOKENS);
    assert_int_equal(t.requests.level, 59 * U);
    assert_int_equal(t.in_flight, 1);
    /* 100 tokens short at 1000/min = 6 s minus the 10 us that have refilled
     * 10 * 1000 units: ceil((100 * 6e7 - 10000) / 1000) = 5999990 us. */
    assert_int_equal(retry, 5999990);

    /* Requests deny: the token bucket keeps its tokens. */
    lim_tenant u;
    assert_int_equal(lim_tenant_init(&u, 1, 1000, 0, 0), 0);
    admit(&u, 1, 0);
    assert_int_equal(deny(&u, 1, 1, &retry), LIM_RATE_REQUESTS);
    assert_int_equal(retry, MIN - 1);
    assert_int_equal(u.tokens.level, 999 * U);

    /* Concurrency deny: neither bucket moves. */
    admit(&t, 50, 20);
    assert_int_equal(deny(&t, 1, 30, &retry), LIM_CONCURRENCY);
    assert_int_equal(retry, LIM_RETRY_NONE);
    /* NULL retry pointer is fine. */
    assert_int_equal(deny(&t, 1, 30, NULL), LIM_CONCURRENCY);
}

static void test_precedence(void **st) {
    (void)st;
    lim_tenant t;
    int64_t retry;
    /* Both rates exhausted: the longer wait wins and is the retry time. */
    assert_int_equal(lim_tenant_init(&t, 1, 60, 1, 0), 0);
    admit(&t, 60, 0);
    /* requests: 1 per minute -> 60 s; tokens: 30 per 30 s. */
    assert_int_equal(deny(&t, 30, 0, &retry), LIM_RATE_REQUESTS);
    assert_int_equal(retry, MIN);
    assert_int_equal(deny(&t, 60, 0, &retry), LIM_RATE_REQUESTS);   /* tie */
    assert_int_equal(retry, MIN);
    assert_int_equal(lim_bucket_init(&t.requests, 120, 1, 0), 0);
    t.requests.level = 0;
    assert_int_equal(deny(&t, 60, 0, &retry), LIM_RATE_TOKENS);
    assert_int_equal(retry, MIN);
    /* Rate and concurrency both deny (in_flight 1 of 1): rate first. */
    assert_int_equal(deny(&t, 1, 0, &retry), LIM_RATE_TOKENS);
    assert_int_equal(retry, SEC);
    /* Too large beats everything. */
    assert_int_equal(deny(&t, 61, 0, &retry), LIM_TOO_LARGE);
    assert_int_equal(retry, LIM_RETRY_NONE);
    /* Once the rates allow, concurrency speaks. */
    assert_int_equal(deny(&t, 1, MIN, &retry), LIM_CONCURRENCY);
}

static void test_refund(void **st) {
    (void)st;
    lim_tenant t;
    assert_int_equal(lim_tenant_init(&t, 0, 100, 0, 0), 0);
    admit(&t, 100, 0);
    assert_int_equal(t.tokens.level, 0);
    /* Used 30 of 100 at t = 6 s (10 tokens refilled): 10 + 70 = 80. */
    assert_int_equal(lim_finish(&t, 100, 30, 6 * SEC), 0);
    assert_int_equal(t.tokens.level, 80 * U);
    assert_int_equal(t.in_flight, 0);

    /* A refund never lifts the bucket above its burst. */
    admit(&t, 50, 6 * SEC);                           /* 30 left */
    assert_int_equal(lim_finish(&t, 50, 0, 60 * SEC), 0);  /* refilled to 100 first */
    assert_int_equal(t.tokens.level, 100 * U);
    admit(&t, 1, 60 * SEC);
    assert_int_equal(lim_finish(&t, UINT64_MAX, 0, 60 * SEC), 0);   /* no overflow */
    assert_int_equal(t.tokens.level, 100 * U);

    /* Using more than reserved charges the excess, stopping at empty. */
    admit(&t, 10, 60 * SEC);                          /* 90 left */
    assert_int_equal(lim_finish(&t, 10, 25, 60 * SEC), 0);
    assert_int_equal(t.tokens.level, 75 * U);
    admit(&t, 10, 60 * SEC);
    assert_int_equal(lim_finish(&t, 10, UINT64_MAX, 60 * SEC), 0);
    assert_int_equal(t.tokens.level, 0);
    assert_int_equal(t.in_flight, 0);

    /* Finishing twice is refused and changes nothing. */
    lim_tenant before = t;
    assert_int_equal(lim_finish(&t, 10, 0, 61 * SEC), TS_ERR_INVAL);
    assert_memory_equal(&t, &before, sizeof t);
    assert_int_equal(lim_finish(NULL, 1, 1, 0), TS_ERR_INVAL);
}

static void test_concurrency(void **st) {
    (void)st;
    lim_tenant t;
    int64_t retry;
    assert_int_equal(lim_tenant_init(&t, 0, 0, 2, 0), 0);
    admit(&t, 5, 0);
    admit(&t, 5, 0);
    assert_int_equal(t.in_flight, 2);
    assert_int_equal(deny(&t, 5, 0, &retry), LIM_CONCURRENCY);
    assert_int_equal(retry, LIM_RETRY_NONE);
    assert_int_equal(lim_finish(&t, 5, 5, 1), 0);
    admit(&t, 5, 1);
    assert_int_equal(deny(&t, 5, 1, &retry), LIM_CONCURRENCY);
    assert_int_equal(lim_finish(&t, 5, 5, 2), 0);
    assert_int_equal(lim_finish(&t, 5, 5, 2), 0);
    assert_int_equal(t.in_flight, 0);
    assert_int_equal(lim_finish(&t, 5, 5, 2), TS_ERR_INVAL);
}

static void test_unlimited(void **st) {
    (void)st;
    lim_tenant t;
    assert_int_equal(lim_tenant_init(&t, 0, 0, 0, 0), 0);
    lim_bucket rq = t.requests, tk = t.tokens;
    for (int i = 0; i < 100000; i++) admit(&t, UINT64_MAX, i);
    assert_int_equal(t.in_flight, 100000);
    assert_memory_equal(&t.requests, &rq, sizeof rq);   /* buckets never move */
    assert_memory_equal(&t.tokens, &tk, sizeof tk);
    assert_int_equal(lim_bucket_available(&t.tokens, 0), UINT64_MAX);
    assert_int_equal(lim_bucket_wait_us(&t.tokens, UINT64_MAX, 0), 0);
    for (int i = 0; i < 100000; i++) assert_int_equal(lim_finish(&t, UINT64_MAX, 0, i), 0);
    assert_memory_equal(&t.tokens, &tk, sizeof tk);
    assert_int_equal(t.in_flight, 0);
    /* The counter itself cannot wrap, even when unlimited. */
    t.in_flight = UINT32_MAX;
    int64_t retry;
    assert_int_equal(deny(&t, 1, 0, &retry), LIM_CONCURRENCY);
    /* One limit set, the others unlimited. */
    assert_int_equal(lim_tenant_init(&t, 0, 0, 1, 0), 0);
    admit(&t, 1, 0);
    assert_int_equal(deny(&t, 1, 0, &retry), LIM_CONCURRENCY);
}

static void test_clock_backwards(void **st) {
    (void)st;
    lim_tenant t;
    int64_t retry;
    const int64_t T = 1000 * MIN;
    assert_int_equal(lim_tenant_init(&t, 0, 60, 0, T), 0);   /* 1 token / s */
    admit(&t, 60, T);
    /* The clock jumps back an hour: nothing refills, the bucket's clock stays. */
    assert_int_equal(lim_bucket_available(&t.tokens, T - 60 * MIN), 0);
    assert_int_equal(deny(&t, 1, T - 60 * MIN, &retry), LIM_RATE_TOKENS);
    /* The wait counts from the caller's clock: the hour back plus one second. */
    assert_int_equal(retry, 60 * MIN + SEC);
    assert_int_equal(deny(&t, 1, T - 60 * MIN + retry - 1, &retry), LIM_RATE_TOKENS);
    admit(&t, 1, T + SEC);
    assert_int_equal(t.tokens.last_us, T + SEC);
    /* An admission stamped in the past does not rewind the bucket's clock,
     * and later refill is counted once, from the latest time seen. */
    assert_int_equal(lim_finish(&t, 1, 1, T), 0);
    assert_int_equal(t.tokens.last_us, T + SEC);
    assert_int_equal(lim_bucket_available(&t.tokens, T + 2 * SEC), 1);
    /* Going back and forth many times mints nothing. */
    for (int i = 0; i < 1000; i++) {
        lim_reason r = lim_admit(&t, 0, (i % 2) ? T - i * SEC : T + 2 * SEC, NULL);
        assert_int_equal(r, LIM_OK);
        assert_int_equal(lim_finish(&t, 0, 0, T - i), 0);
    }
    assert_int_equal(lim_bucket_available(&t.tokens, T + 2 * SEC), 1);
    /* Extreme times neither crash nor invent tokens. */
    assert_int_equal(lim_bucket_available(&t.tokens, INT64_MIN), 1);
    assert_int_equal(lim_bucket_available(&t.tokens, INT64_MAX), 60);   /* full */
    (void)lim_admit(&t, 1, INT64_MIN, &retry);
    (void)lim_admit(&t, 1, INT64_MAX, &retry);
    (void)lim_bucket_wait_us(&t.tokens, 60, INT64_MIN);
    lim_bucket b;
    assert_int_equal(lim_bucket_init(&b, 1, LIM_MAX_BURST, INT64_MAX), 0);
    b.level = 0;
    assert_int_equal(lim_bucket_wait_us(&b, LIM_MAX_BURST, INT64_MIN), INT64_MAX);
}

static void test_too_large(void **st) {
    (void)st;
    lim_tenant t;
    int64_t retry = 0;
    assert_int_equal(lim_tenant_init(&t, 10, 1000, 1, 0), 0);
    assert_int_equal(deny(&t, 1001, 0, &retry), LIM_TOO_LARGE);
    assert_int_equal(retry, LIM_RETRY_NONE);
    assert_int_equal(deny(&t, UINT64_MAX, 0, &retry), LIM_TOO_LARGE);
    /* Too large even when the bucket is full and time has passed. */
    assert_int_equal(deny(&t, 1001, 100 * MIN, &retry), LIM_TOO_LARGE);
    admit(&t, 1000, 0);                      /* exactly the burst fits */
    assert_int_equal(deny(&t, 1001, 0, &retry), LIM_TOO_LARGE);   /* beats concurrency */
}

static void test_reconfig(void **st) {
    (void)st;
    lim_bucket b;
    assert_int_equal(lim_bucket_init(&b, 60, 100, 0), 0);
    b.level = 40 * U;
    /* Refill at the old rate to 10 s (50 tokens), then shrink the burst. */
    assert_int_equal(lim_bucket_reconfig(&b, 600, 45, 10 * SEC), 0);
    assert_int_equal(b.level, 45 * U);
    assert_int_equal(b.per_minute, 600);
    /* Growing it keeps the level; the new rate applies from now. */
    assert_int_equal(lim_bucket_reconfig(&b, 600, 1000, 10 * SEC), 0);
    assert_int_equal(b.level, 45 * U);
    assert_int_equal(lim_bucket_available(&b, 11 * SEC), 55);
    lim_bucket ref = b;
    assert_int_equal(lim_bucket_reconfig(&b, 1, LIM_MAX_BURST + 1, 0), TS_ERR_INVAL);
    assert_memory_equal(&b, &ref, sizeof b);
    /* Unlimited -> limited starts full. */
    assert_int_equal(lim_bucket_init(&b, 0, 0, 0), 0);
    assert_int_equal(lim_bucket_reconfig(&b, 30, 0, 5), 0);
    assert_int_equal(lim_bucket_available(&b, 5), 30);
}

/* Random traffic against a plain reference count: every admission fits in
 * what a burst-capped bucket refilled since the start could hold, and the
 * tokens taken over [0, T] never exceed burst + rate * T. */
static void test_never_exceeds_rate(void **st) {
    (void)st;
    rng_state = 7;
    lim_tenant t;
    const uint64_t tpm = 6000, burst = 500;
    assert_int_equal(lim_tenant_init(&t, 0, tpm, 8, 0), 0);
    assert_int_equal(lim_bucket_init(&t.tokens, tpm, burst, 0), 0);
    uint64_t taken = 0;
    uint64_t res[8], used[8];
    int n = 0;
    int64_t now = 0;
    for (int i = 0; i < 200000; i++) {
        now += (int64_t)(rng_next() % 20000);
        if (n > 0 && rng_next() % 2) {
            int k = (int)(rng_next() % (uint64_t)n);
            assert_int_equal(lim_finish(&t, res[k], used[k], now), 0);
            taken -= res[k] - used[k];
            res[k] = res[n - 1];
            used[k] = used[n - 1];
            n--;
        } else {
            uint64_t r = rng_next() % 600, u = r ? rng_next() % (r + 1) : 0;
            if (lim_admit(&t, r, now, NULL) == LIM_OK) {
                taken += r;
                res[n] = r;
                used[n++] = u;
            }
        }
        /* taken * 60e6 <= burst * 60e6 + tpm * now (both sides in units) */
        assert_true(taken * U <= burst * U + tpm * (uint64_t)now);
        assert_true(t.tokens.level <= burst * U);
    }
}

static void test_reason_str(void **st) {
    (void)st;
    const char *s[5];
    for (int i = 0; i < 5; i++) {
        s[i] = lim_reason_str((lim_reason)i);
        assert_non_null(s[i]);
        for (int j = 0; j < i; j++) assert_string_not_equal(s[i], s[j]);
    }
    assert_string_equal(lim_reason_str(LIM_OK), "ok");
    assert_string_equal(lim_reason_str((lim_reason)99), "unknown limit reason");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_init),
        cmocka_unit_test(test_refill_exact),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_retry_exact),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_refund),
        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_reconfig),
        cmocka_unit_test(test_never_exceeds_rate),
        cmocka_unit_test(test_reason_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
