/* testutil.h - small helpers shared by the cmocka test programs. */
#ifndef TS_TESTUTIL_H
#define TS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Scratch folder for test files: $TS_TMPDIR, else /tmp. */
const char *tu_tmpdir(void);
/* Write "<tmpdir>/<pid>-<name>" into buf (cap bytes) and return buf. */
char *tu_path(char *buf, size_t cap, const char *name);
/* Read a whole file into a malloc'd buffer; NULL on error. */
void *tu_read_file(const char *path, size_t *len);
/* Write len bytes to path; 0 on success. */
int tu_write_file(const char *path, const void *buf, size_t len);

/* A seeded xorshift64* stream for test data: the same seed, the same
 * numbers on every machine. One stream per test program. */
void tu_rng_seed(uint64_t s);
uint64_t tu_rng_next(void);
/* Uniform in [-1, 1), 23 random bits. */
float tu_rng_float(void);

#endif
