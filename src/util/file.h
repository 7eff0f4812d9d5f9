/*
 * file.h - opening a file a user named (a model, a configuration, a
 * scenario or trace): regular files only.
 *
 * A FIFO, socket or device given where a file is expected must be refused,
 * never opened: opening a FIFO for reading waits for a writer (a server
 * that never starts, with nothing in its log), and opening some devices
 * acts by itself (a watchdog starts counting).
 */
#ifndef TS_FILE_H
#define TS_FILE_H

#include <stddef.h>
#include <sys/stat.h>

/* Open path read-only if it is a regular file: 0 with *fd (the caller
 * closes it) and *st describing what was opened, or TS_ERR_IO with
 * "<path>: <strerror>" or "<path>: not a regular file (fifo)" in err.
 * The path is stat'ed before it is opened; since it may be replaced in
 * between, the open cannot block either (O_NONBLOCK, which changes nothing
 * for reading or mapping a regular file) and the fstat of what was opened
 * has the last word. */
int file_open_regular(const char *path, int *fd, struct stat *st, char *err, size_t errlen);

/* The whole of the regular file path (file_open_regular's rules), at most
 * max bytes (max < SIZE_MAX - 1). OUT buf: the bytes, NUL-terminated (the
 * file may hold NULs of its own: len counts them), malloc'd, the caller
 * frees it; OUT len: their count. 0, or on failure *buf NULL, *len 0 and
 * err naming the path: TS_ERR_IO (cannot open or read, not a regular file,
 * or larger than max: then "<path>: larger than <max> bytes" and *len is
 * max + 1, so a caller can add advice) or TS_ERR_NOMEM. */
int file_read_all(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen);

/* mkdir -p: path and every folder above it that is missing (mode 0755).
 * 0, or -1 with errno set. */
int file_mkdirs(const char *path);

/* Write text to dir/name, replacing it. 0, or -1 with errno set (a partial
 * write removes nothing, but is reported). */
int file_write(const char *dir, const char *name, const char *text);

#endif
