/*
 * test_cuda_levers.c - the CUDA backend's host-side decisions, which need
 * no GPU and run in every build: device strings, the MPS environment
 * (thread percentage, pinned-memory limit by index and by UUID), the KV
 * budget under free memory, an MPS limit and a MIG slice, and the stream
 * priority of each band over real devices' priority ranges. Every malformed
 * value is refused with a message naming what is wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_levers.h"
#include "err.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static void test_device_strings(void **state) {
    (void)state;
    char err[256];
    int idx = -1;
    assert_int_equal(cudalev_parse_device("cuda", &idx, err, sizeof err), 0);
    assert_int_equal(idx, 0);
    assert_int_equal(cudalev_parse_device("cuda:3", &idx, err, sizeof err), 0);
    assert_int_equal(idx, 3);
    assert_int_equal(cudalev_parse_device("cuda:1023", &idx, err, sizeof err), 0);
    assert_int_equal(idx, 1023);
    static const char *const bad[] = {"cuda:", "cuda:-1", "cuda:1x", "cuda:1024", "cudax", "cuda: 1",
                                      "cpu", "", "cuda:99999999999999999999", "cuda:+1", "CUDA"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        idx = 77;
        err[0] = 0;
        assert_int_equal(cudalev_parse_device(bad[i], &idx, err, sizeof err), TS_ERR_INVAL);
        assert_int_equal(idx, 77);
        assert_non_null(strstr(err, "cuda"));
    }
    assert_int_equal(cudalev_parse_device(NULL, &idx, err, sizeof err), TS_ERR_INVAL);
}

static void test_thread_percentage(void **state) {
    (void)state;
    char err[256];
    double p = 0;
    assert_int_equal(cudalev_parse_thread_pct(NULL, &p, err, sizeof err), 0);
    assert_true(p == 100.0);
    assert_int_equal(cudalev_parse_thread_pct("25", &p, err, sizeof err), 0);
    assert_true(p == 25.0);
    assert_int_equal(cudalev_parse_thread_pct("12.5", &p, err, sizeof err), 0);
    assert_true(p == 12.5);
    assert_int_equal(cudalev_parse_thread_pct("100", &p, err, sizeof err), 0);
    static const char *const bad[] = {"", "0", "-5", "100.5", "101", "abc", "50%", " 50", "nan", "inf", "1e9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = 7;
        assert_int_equal(cudalev_parse_thread_pct(bad[i], &p, err, sizeof err), TS_ERR_INVAL);
        assert_true(p == 7);
        assert_non_null(strstr(err, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    }
}

static void test_pinned_limit(void **state) {
    (void)state;
    char err[256];
    uint64_t b = 1;
    const char *uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
    assert_int_equal(cudalev_parse_pinned_limit(NULL, 0, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 0);
    assert_int_equal(cudalev_parse_pinned_limit("0=4096M", 0, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 4096 * MiB);
    assert_int_equal(cudalev_parse_pinned_limit("0=2G", 0, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 2 * GiB);
    /* Another device's entry is no limit for this one. */
    assert_int_equal(cudalev_parse_pinned_limit("1=2G", 0, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 0);
    assert_int_equal(cudalev_parse_pinned_limit("0=1G,1=3G", 1, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 3 * GiB);
    /* By UUID, only when the caller knows its UUID. */
    char list[160];
    snprintf(list, sizeof list, "%s=512M,1=1G", uuid);
    assert_int_equal(cudalev_parse_pinned_limit(list, 0, uuid, &b, err, sizeof err), 0);
    assert_int_equal(b, 512 * MiB);
    assert_int_equal(cudalev_parse_pinned_limit(list, 0, NULL, &b, err, sizeof err), 0);
    assert_int_equal(b, 0);
    /* The same device by index and by UUID is set twice. */
    snprintf(list, sizeof list, "0=1G,%s=512M", uuid);
    assert_int_equal(cudalev_parse_pinned_limit(list, 0, uuid, &b, err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "twice"));
    static const char *const bad[] = {"",       "0",     "0=",    "=1G",       "0=1",    "0=1T",   "0=1GB",
                                      "0=-1G",  "0=0M",  "x=1G",  "0=1G,",     ",0=1G",  "0=1G,,1=1G",
                                      "0=1G,0=2G", "0 =1G", "0=1G ", "0=99999999999999999999G", "GPU-=1G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = 9;
        err[0] = 0;
        int rc = cudalev_parse_pinned_limit(bad[i], 0, uuid, &b, err, sizeof err);
        if (rc != TS_ERR_INVAL) fail_msg("'%s' accepted", bad[i]);
        assert_non_null(strstr(err, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
    }
}

static void test_kv_budget(void **state) {
    (void)state;
    /* A whole H200: free memory less the reserve. */
    cudalev_mem m = {.free_bytes = 130 * GiB, .total_bytes = 141 * GiB, .used_by_us = 3 * GiB,
                     .reserve = 1 * GiB};
    assert_int_equal(cudalev_kv_budget(&m), 129 * GiB);
    /* Under MPS with a 16 GiB limit: the limit less what we already hold. */
    m.mps_limit = 16 * GiB;
    assert_int_equal(cudalev_kv_budget(&m), 12 * GiB);
    /* A limit smaller than what we hold leaves nothing, not a wrap-around. */
    m.mps_limit = 2 * GiB;
    assert_int_equal(cudalev_kv_budget(&m), 0);
    /* A limit above the free memory does not raise the budget. */
    m.mps_limit = 500 * GiB;
    assert_int_equal(cudalev_kv_budget(&m), 129 * GiB);
    /* A MIG 1g.18gb slice: the runtime reports the slice; with MPS on the
     * slice the limit still applies. */
    cudalev_mem mig = {.free_bytes = 15 * GiB, .total_bytes = 17 * GiB, .used_by_us = 2 * GiB,
                       .reserve = 512 * MiB};
    assert_int_equal(cudalev_kv_budget(&mig), 15 * GiB - 512 * MiB);
    mig.mps_limit = 8 * GiB;
    assert_int_equal(cudalev_kv_budget(&mig), 8 * GiB - 2 * GiB - 512 * MiB);
    /* Less free than the reserve. */
    cudalev_mem full = {.free_bytes = 100 * MiB, .total_bytes = 80 * GiB, .reserve = 256 * MiB};
    assert_int_equal(cudalev_kv_budget(&full), 0);
}

static void test_band_priority(void **state) {
    (void)state;
    /* Hopper and Ampere report least 0, greatest -5. */
    assert_int_equal(cudalev_band_priority(0, 3, 0, -5), -5);
    assert_int_equal(cudalev_band_priority(2, 3, 0, -5), 0);
    int mid = cudalev_band_priority(1, 3, 0, -5);
    assert_true(mid > -5 && mid < 0);
    /* Monotone and distinct where the range allows, for every band count. */
    for (int n = 1; n <= 6; n++)
        for (int b = 1; b < n; b++)
            assert_true(cudalev_band_priority(b, n, 0, -5) > cudalev_band_priority(b - 1, n, 0, -5));
    /* More bands than levels: shared, never out of order. */
    for (int b = 1; b < 10; b++)
        assert_true(cudalev_band_priority(b, 10, 0, -2) >= cudalev_band_priority(b - 1, 10, 0, -2));
    assert_int_equal(cudalev_band_priority(0, 10, 0, -2), -2);
    assert_int_equal(cudalev_band_priority(9, 10, 0, -2), 0);
    /* One band, or a device without priorities, or a band out of range. */
    assert_int_equal(cudalev_band_priority(0, 1, 0, -5), -5);
    assert_int_equal(cudalev_band_priority(2, 3, 0, 0), 0);
    assert_int_equal(cudalev_band_priority(-4, 3, 0, -5), -5);
    assert_int_equal(cudalev_band_priority(99, 3, 0, -5), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_strings),  cmocka_unit_test(test_thread_percentage),
        cmocka_unit_test(test_pinned_limit),    cmocka_unit_test(test_kv_budget),
        cmocka_unit_test(test_band_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
