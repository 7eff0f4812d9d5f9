/* file.c - see file.h. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
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
