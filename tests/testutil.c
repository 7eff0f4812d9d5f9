/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *tu_tmpdir(void) {
    const char *d = getenv("TS_TMPDIR");
    return d && *d ? d : "/tmp";
}

char *tu_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%ld-%s", tu_tmpdir(), (long)getpid(), name);
    return buf;
}

void *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf && len) *len = (size_t)n;
    return buf;
}

int tu_write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

static uint64_t tu_rng_state;

void tu_rng_seed(uint64_t s) { tu_rng_state = s * 0x9e3779b97f4a7c15ull + 1; }

uint64_t tu_rng_next(void) {
    tu_rng_state ^= tu_rng_state >> 12;
    tu_rng_state ^= tu_rng_state << 25;
    tu_rng_state ^= tu_rng_state >> 27;
    return tu_rng_state * 0x2545f4914f6cdd1dull;
}

float tu_rng_float(void) { return (float)((double)(tu_rng_next() >> 40) / (double)(1ull << 23) - 1.0); }
