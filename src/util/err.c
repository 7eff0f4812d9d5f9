/* err.c - lookups over the TS_ERR_TABLE X-macro; see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

const char *err_escape_ctl(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[5];
        size_t k = 2;
        if (c >= 0x20 && c != 0x7F) {
            e[0] = (char)c;
            k = 1;
        } else if (c == '\n') {
            memcpy(e, "\\n", 2);
        } else if (c == '\r') {
            memcpy(e, "\\r", 2);
        } else if (c == '\t') {
            memcpy(e, "\\t", 2);
        } else {
            snprintf(e, sizeof e, "\\x%02X", c);
            k = 4;
        }
        if (o + k >= cap) break;
        memcpy(out + o, e, k);
        o += k;
    }
    out[o] = 0;
    return out;
}
