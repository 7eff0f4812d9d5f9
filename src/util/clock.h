/*
 * clock.h - the monotonic clock, read the one way every module reads it:
 * step times, deadlines, backoffs and benchmark walls must not jump when
 * the wall clock is set. Inline: the engine reads it twice a step.
 */
#ifndef TS_CLOCK_H
#define TS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clk_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline double clk_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
