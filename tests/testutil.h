/* testutil.h - small helpers shared by the cmocka test programs. */
#ifndef TS_TESTUTIL_H
#define TS_TESTUTIL_H

#include <stddef.h>

/* Scratch folder for test files: $TS_TMPDIR, else /tmp. */
const char *tu_tmpdir(void);
/* Write "<tmpdir>/<pid>-<name>" into buf (cap bytes) and return buf. */
char *tu_path(char *buf, size_t cap, const char *name);
/* Read a whole file into a malloc'd buffer; NULL on error. */
void *tu_read_file(const char *path, size_t *len);
/* Write len bytes to path; 0 on success. */
int tu_write_file(const char *path, const void *buf, size_t len);

#endif
