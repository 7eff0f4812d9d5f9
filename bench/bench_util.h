/*
 * bench_util.h - the median every benchmark program uses (and the clock, util/clock.h).
 *
 * Each bench/NAME.c is its own program (CMake builds one per file), so the
 * shared helpers are static inline here rather than a module of their own.
 */
#ifndef TS_BENCH_UTIL_H
#define TS_BENCH_UTIL_H

#include <stdlib.h>

#include "clock.h"

static inline int bu_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (n >= 1); sorts v. */
static inline double bu_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), bu_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
