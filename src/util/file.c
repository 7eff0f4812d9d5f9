/* file.c - see file.h. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

static const char *file_kind(mode_t mode) {
    if (S_ISFIFO(mode)) return "fifo";
    if (S_ISSOCK(mode)) return "socket";
    if (S_ISCHR(mode)) return "character device";
    if (S_ISBLK(mode)) return "block device";
    if (S_ISDIR(mode)) return "directory";
    return "unknown file type";
}

static int not_regular(const char *path, mode_t mode, char *err, size_t errlen) {
    return err_set(err, errlen, TS_ERR_IO, "%s: not a regular file (%s)", path, file_kind(mode));
}

int file_open_regular(const char *path, int *fd, struct stat *st, char *err, size_t errlen) {
    if (stat(path, st) < 0) return err_set(err, errlen, TS_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st->st_mode)) return not_regular(path, st->st_mode, err, errlen);
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (*fd < 0) return err_set(err, errlen, TS_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = 0;
    if (fstat(*fd, st) < 0) rc = err_set(err, errlen, TS_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st->st_mode)) rc = not_regular(path, st->st_mode, err, errlen);
    if (rc) close(*fd);
    return rc;
}

/* Reads with read(2) on the descriptor file_open_regular gave, growing
 * the buffer from the size fstat saw (the file may change under us: the
 * bytes read decide, never st_size), and at most max + 1 bytes, so a file
 * too large is known without reading it all. */
int file_read_all(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL;
    *len = 0;
    int fd;
    struct stat st;
    int rc = file_open_regular(path, &fd, &st, err, errlen);
    if (rc) return rc;
    size_t cap = st.st_size > 0 && (unsigned long long)st.st_size < max ? (size_t)st.st_size + 1 : 4096;
    if (cap > max + 1) cap = max + 1;
    size_t n = 0;
    char *b = malloc(cap + 1);
    while (b && !rc) {
        if (n == cap) {
            if (n > max) break;                      /* max + 1 bytes: too large */
            size_t nc = cap > max / 2 ? max + 1 : cap * 2;
            char *g = realloc(b, nc + 1);
            if (!g) break;
            b = g;
            cap = nc;
        }
        ssize_t k = read(fd, b + n, cap - n);
        if (k > 0) n += (size_t)k;
        else if (k == 0) break;
        else if (errno != EINTR) rc = err_set(err, errlen, TS_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    close(fd);
    if (!rc && (!b || (n == cap && n <= max)))
        rc = err_set(err, errlen, TS_ERR_NOMEM, "%s: out of memory reading it", path);
    else if (!rc && n > max) {
        rc = err_set(err, errlen, TS_ERR_IO, "%s: larger than %zu bytes", path, max);
        *len = max + 1;
    }
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int file_mkdirs(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

int file_write(const char *dir, const char *name, const char *text) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    int bad = ferror(f);
    return (fclose(f) || bad) ? -1 : 0;
}
