/* err.c - lookups over the TS_ERR_TABLE X-macro; see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

const char *err_str(int code) {
    switch (code) {
#define TS_ERR_CASE(name, c, http, msg) case c: return msg;
        TS_ERR_TABLE(TS_ERR_CASE)
#undef TS_ERR_CASE
    }
    return "unknown error";
}

const char *err_name(int code) {
    switch (code) {
#define TS_ERR_CASE(name, c, http, msg) case c: return #name;
        TS_ERR_TABLE(TS_ERR_CASE)
#undef TS_ERR_CASE
    }
    return "UNKNOWN";
}

int err_http_status(int code) {
    switch (code) {
#define TS_ERR_CASE(name, c, http, msg) case c: return http;
        TS_ERR_TABLE(TS_ERR_CASE)
#undef TS_ERR_CASE
    }
    return 500;
}

int err_set(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}
