/*
 * cuda_levers.c - device strings, the MPS environment, the KV budget and
 * band priorities; see cuda_levers.h. Pure: no CUDA, no environment reads.
 */
#include "cuda_levers.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

/* Decimal digits only, no sign or space, at most max. Returns the number of
 * characters read (0: none), -1 when the value is over max. */
static int read_uint(const char *s, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    int n = 0;
    for (; isdigit((unsigned char)s[n]); n++) {
        uint64_t d = (uint64_t)(s[n] - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return n;
}

int cudalev_parse_device(const char *spec, int *index, char *err, size_t errlen) {
    if (!spec || strncmp(spec, "cuda", 4) != 0 || (spec[4] != '\0' && spec[4] != ':'))
        return err_set(err, errlen, TS_ERR_INVAL, "device '%s' is not cuda or cuda:N", spec ? spec : "(null)");
    if (spec[4] == '\0') {
        *index = 0;
        return 0;
    }
    uint64_t v;
    int n = read_uint(spec + 5, CUDALEV_MAX_DEVICE, &v);
    if (n <= 0 || spec[5 + n] != '\0')
        return err_set(err, errlen, TS_ERR_INVAL, "device '%s': N in cuda:N must be a device index 0..%d", spec,
                       CUDALEV_MAX_DEVICE);
    *index = (int)v;
    return 0;
}

int cudalev_parse_thread_pct(const char *val, double *pct, char *err, size_t errlen) {
    if (!val) {
        *pct = 100.0;
        return 0;
    }
    char *end;
    double v = isdigit((unsigned char)val[0]) ? strtod(val, &end) : NAN;
    if (!(v > 0.0 && v <= 100.0) || *end != '\0')
        return err_set(err, errlen, TS_ERR_INVAL,
                       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='%s' is not a percentage in (0, 100]", val);
    *pct = v;
    return 0;
}

/* One "<device>=<size>" entry of [s, e). Out: whether it names this device
 * (by index or by uuid) and its size in bytes. */
static int pinned_entry(const char *s, const char *e, int device, const char *uuid, int *match, uint64_t *bytes,
                        char *err, size_t errlen) {
    const char *eq = memchr(s, '=', (size_t)(e - s));
    int len = (int)(e - s);
    if (!eq || eq == s)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: entry '%.*s' is not <device>=<size>", len, s);
    uint64_t idx, v;
    int n = read_uint(s, CUDALEV_MAX_DEVICE, &idx);
    size_t klen = (size_t)(eq - s);
    if (n > 0 && s + n == eq) {
        *match = (int)idx == device;
    } else if (klen > 4 && strncmp(s, "GPU-", 4) == 0) {
        *match = uuid && strlen(uuid) == klen && strncmp(uuid, s, klen) == 0;
    } else {
        return err_set(err, errlen, TS_ERR_INVAL,
                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: entry '%.*s' names neither a device index nor a GPU UUID",
                       len, s);
    }
    n = read_uint(eq + 1, UINT64_MAX >> 30, &v);
    const char *suf = eq + 1 + (n > 0 ? n : 0);
    if (n <= 0 || suf + 1 != e || (*suf != 'M' && *suf != 'G') || v == 0)
        return err_set(err, errlen, TS_ERR_INVAL,
                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: entry '%.*s' needs a size > 0 with M or G (as 0=4096M)",
                       len, s);
    *bytes = v << (*suf == 'G' ? 30 : 20);
    return 0;
}

int cudalev_parse_pinned_limit(const char *val, int device, const char *uuid, uint64_t *bytes, char *err,
                               size_t errlen) {
    *bytes = 0;
    if (!val) return 0;
    if (!*val) return err_set(err, errlen, TS_ERR_INVAL, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is set but empty");
    uint64_t found = 0;
    for (const char *s = val;;) {
        const char *e = strchr(s, ',');
        if (!e) e = s + strlen(s);
        int match = 0;
        uint64_t b = 0;
        int rc = pinned_entry(s, e, device, uuid, &match, &b, err, errlen);
        if (rc) return rc;
        if (match && found)
            return err_set(err, errlen, TS_ERR_INVAL,
                           "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='%s' sets device %d's limit twice", val, device);
        if (match) found = b;
        if (!*e) break;
        s = e + 1;
    }
    *bytes = found;
    return 0;
}

uint64_t cudalev_kv_budget(const cudalev_mem *m) {
    uint64_t b = m->free_bytes > m->reserve ? m->free_bytes - m->reserve : 0;
    if (m->mps_limit) {
        uint64_t held = m->used_by_us + m->reserve;
        uint64_t left = m->mps_limit > held ? m->mps_limit - held : 0;
        if (left < b) b = left;
    }
    return b;
}

int cudalev_band_priority(int band, int n_bands, int least, int greatest) {
    if (n_bands <= 1 || least == greatest) return greatest;
    if (band < 0) band = 0;
    if (band > n_bands - 1) band = n_bands - 1;
    /* CUDA: a smaller number is a higher priority, so greatest <= least. */
    int levels = least - greatest;
    int step = (band * levels + (n_bands - 1) / 2) / (n_bands - 1);
    return greatest + step;
}
