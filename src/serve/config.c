/* config.c - YAML configuration loading and checking; see config.h.
 *
 * util/ydoc.h loads the file into a node tree whose nodes keep their source
 * marks, and this file walks that tree along the schema: which keys exist,
 * their ranges and defaults, and the checks across fields (unique names,
 * unique key hashes, shares that add up). Walking the schema rather than the
 * tree bounds the depth (an alias cycle such as `&a [*a]` can never recurse)
 * and makes every value's expected type known where it is read, so each
 * error can say where and what.
 *
 * Everything is built into a local cfg and handed over only when the whole
 * file has passed; on any error that cfg is freed, so the caller never sees
 * a half-loaded configuration.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_levers.h"
#include "engine.h"
#include "err.h"
#include "ratelimit.h"
#include "ydoc.h"


/* ---- sections -------------------------------------------------------------- */

static void set_defaults(cfg *g) {
    snprintf(g->host, sizeof g->host, "127.0.0.1");
    g->port = 8080;
    g->policy = SCHED_POLICY_FAIR;
    g->limits.max_body_bytes = 1 << 20;
    g->limits.header_timeout_s = 10;
    g->limits.idle_timeout_s = 60;
    g->limits.max_connections = 2048;
    g->limits.max_connections_per_ip = 0;
    g->limits.reserved_connections = cfg_default_reserve(g->limits.max_connections);
    g->limits.shutdown_grace_s = 10;
    g->limits.backend = CFG_BACKEND_LOCAL;
    snprintf(g->limits.redis.prefix, sizeof g->limits.redis.prefix, "tessera");
    g->limits.redis.timeout_ms = 100;
    g->limits.redis.lease_ms = 3000;
    g->limits.redis.sync_ms = 200;
    /* The scheduler's own defaults: the config needs their names before
     * any scheduler exists, to resolve tenants' tiers. */
    g->n_tiers = SCHED_DEFAULT_TIERS;
    memcpy(g->tiers, sched_default_tiers, sizeof sched_default_tiers);
}

static void model_defaults(cfg_model *m) {
    memset(m, 0, sizeof *m);
    m->kv_cache_bytes = 256ull << 20;
    m->swap_bytes = 256ull << 20;
    m->block_size = 16;
    m->max_seqs = 64;
    m->budget_min = 64;
    m->budget_max = SCHED_DEFAULT_BUDGET_MAX;
    m->threads = 0;
    strcpy(m->device, "cpu");
    m->prefix_cache = 1;
}

static int get_hash(const ydoc *d, const yaml_node_t *n, const char *path, uint8_t out[AUTH_HASH_LEN]) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc) return rc;
    if (auth_hex_decode(s, out, AUTH_HASH_LEN) != 0)
        return ydoc_fail(d, n, path,
                         "expected the SHA-256 of a key as %d hex digits (tessera keygen prints it)",
                         AUTH_HEX_LEN);
    return 0;
}

/* s[0..n) as decimal digits only (leading zeros allowed) in [lo, hi]; -1
 * otherwise. */
static long parse_bounded(const char *s, size_t n, long lo, long hi) {
    long v = 0;
    if (n == 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
        if (v > hi) return -1;
    }
    return v >= lo ? v : -1;
}

/* A port of 1..65535, or -1. */
static long parse_port(const char *s) { return parse_bounded(s, strlen(s), 1, 65535); }

/* "host:port" or "[v6 host]:port". */
static int parse_listen(const ydoc *d, const yaml_node_t *n, cfg *g) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, "listen", &s);
    if (rc || !s) return rc;
    const char *host = s, *colon;
    size_t hlen;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        colon = close && close[1] == ':' ? close + 1 : NULL;
        host = s + 1;
        hlen = close ? (size_t)(close - host) : 0;
    } else {
        colon = strrchr(s, ':');
        hlen = colon ? (size_t)(colon - s) : 0;
        /* An unbracketed host with a colon is an IPv6 address without
         * brackets: its port would be ambiguous. */
        if (colon && memchr(s, ':', hlen)) colon = NULL;
    }
    long port = colon ? parse_port(colon + 1) : -1;
    if (hlen == 0 || hlen >= CFG_HOST_MAX || port < 0)
        return ydoc_fail(d, n, "listen",
                         "expected host:port with a port in 1..65535 (IPv6: [::1]:8080), got '%.60s'", s);
    memcpy(g->host, host, hlen);
    g->host[hlen] = 0;
    g->port = (uint16_t)port;
    return 0;
}

static int parse_policy(const ydoc *d, const yaml_node_t *n, cfg *g) {
    static const char *const names[] = {"fair", "fcfs"};
    static const int policies[] = {SCHED_POLICY_FAIR, SCHED_POLICY_FCFS};
    int i = -1;
    int rc = ydoc_get_enum(d, n, "policy", "policy", names, 2, &i);
    if (rc == 0 && i >= 0) g->policy = policies[i];
    return rc;
}

/* ---- redis_url --------------------------------------------------------------- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* s[0..n) with %XX escapes decoded into out[0..cap); -1 on a bad escape,
 * a NUL, or no room. */
static int url_unescape(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_digit(s[i + 1]) : -1;
            int lo = i + 2 < n ? hex_digit(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || k + 1 >= cap) return -1;
        out[k++] = (char)c;
    }
    out[k] = 0;
    return 0;
}

#define URL_FAIL(...) (snprintf(why, whylen, __VA_ARGS__), TS_ERR_CONFIG)

int cfg_redis_url_parse(const char *url, cfg_redis *out, char *why, size_t whylen) {
    static const char scheme[] = "redis://";
    char dummy[8];
    if (!why || !whylen) why = dummy, whylen = sizeof dummy;
    why[0] = 0;
    if (!url || !out) return URL_FAIL("no URL");
    if (strncmp(url, scheme, sizeof scheme - 1))
        return URL_FAIL(strncmp(url, "rediss://", 9) ? "expected redis://host[:port][/db]"
                                                     : "rediss:// (TLS) is not supported; use redis://");
    cfg_redis r = *out;
    r.user[0] = r.password[0] = 0;
    r.port = 6379;
    r.db = 0;
    const char *p = url + sizeof scheme - 1;
    const char *end = p + strcspn(p, "/?#");
    if (*end == '?' || *end == '#') return URL_FAIL("query and fragment are not supported");
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at) {   /* [user][:password]@ */
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *ue = colon ? colon : at;
        if (url_unescape(p, (size_t)(ue - p), r.user, sizeof r.user))
            return URL_FAIL("bad user (too long, NUL or bad %%XX escape)");
        if (colon && url_unescape(colon + 1, (size_t)(at - colon - 1), r.password, sizeof r.password))
            return URL_FAIL("bad password (too long, NUL or bad %%XX escape)");
        if (r.user[0] && !r.password[0]) return URL_FAIL("a user needs a password (user:password@)");
        p = at + 1;
    }
    const char *host = p, *hend, *port = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close) return URL_FAIL("unclosed [ in the host");
        host = p + 1;
        hend = close;
        if (close + 1 < end) {
            if (close[1] != ':') return URL_FAIL("expected :port after ]");
            port = close + 2;
        }
    } else {
        hend = memchr(p, ':', (size_t)(end - p));
        if (hend) port = hend + 1;
        else hend = end;
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen == 0) return URL_FAIL("no host");
    if (hlen >= sizeof r.host) return URL_FAIL("host longer than %d bytes", CFG_HOST_MAX - 1);
    for (size_t i = 0; i < hlen; i++) {
        char c = host[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_' || (c == ':' && *p == '[');
        if (!ok) return URL_FAIL("bad character '%c' in the host", c);
    }
    if (port) {
        long v = parse_bounded(port, (size_t)(end - port), 1, 65535);
        if (v < 0) return URL_FAIL("expected a port in 1..65535");
        r.port = (uint16_t)v;
    }
    if (*end == '/' && end[1]) {
        long v = parse_bounded(end + 1, strlen(end + 1), 0, 65535);
        if (v < 0) return URL_FAIL("expected a database number in 0..65535 after /");
        r.db = (uint32_t)v;
    }
    memcpy(r.host, host, hlen);
    r.host[hlen] = 0;
    *out = r;
    return 0;
}

#undef URL_FAIL

/* The Redis keys of limits: read after the others, so that backend and
 * redis_url are checked together. */
static int parse_redis(const ydoc *d, const yaml_node_t *const *v, const char *const *keys, cfg_limits *l) {
    enum { BACKEND, URL, PREFIX, ONERR, TIMEOUT, LEASE, SYNC };
    static const char *const backends[] = {"local", "redis"}, *const modes[] = {"open", "closed"};
    char fp[YDOC_PATH_MAX];
    cfg_redis *r = &l->redis;
    int rc;
#define FP(i) ydoc_path_field(fp, "limits", keys[i])
    if ((rc = ydoc_get_enum(d, v[BACKEND], FP(BACKEND), "backend", backends, 2, &l->backend))) return rc;
    if (l->backend != CFG_BACKEND_REDIS) {
        for (int i = URL; i <= SYNC; i++)
            if (v[i]) return ydoc_fail(d, v[i], FP(i), "only with backend: redis");
        return 0;
    }
    if (!v[URL]) return ydoc_fail(d, v[BACKEND], FP(URL), "missing (backend redis needs redis_url)");
    const char *url = NULL;
    char why[160];
    if ((rc = ydoc_get_str(d, v[URL], FP(URL), &url))) return rc;
    if (cfg_redis_url_parse(url, r, why, sizeof why))
        return ydoc_fail(d, v[URL], FP(URL), "%s (redis://[[user]:password@]host[:port][/db])", why);
    if ((rc = ydoc_get_name(d, v[PREFIX], FP(PREFIX), "._:-", r->prefix, sizeof r->prefix))) return rc;
    if ((rc = ydoc_get_enum(d, v[ONERR], FP(ONERR), "mode", modes, 2, &r->fail_closed))) return rc;
    if ((rc = ydoc_get_u32(d, v[TIMEOUT], FP(TIMEOUT), 1, 10000, &r->timeout_ms))) return rc;
    if ((rc = ydoc_get_u32(d, v[LEASE], FP(LEASE), 500, 600000, &r->lease_ms))) return rc;
    if ((rc = ydoc_get_u32(d, v[SYNC], FP(SYNC), 20, 10000, &r->sync_ms))) return rc;
    /* Three heartbeats per lease: one late or lost beat must not expire a
     * live replica's counts. */
    if (r->sync_ms > r->lease_ms / 3)
        return ydoc_fail(d, v[SYNC] ? v[SYNC] : v[LEASE], FP(SYNC), "%u ms is more than a third of redis_lease_ms (%u)",
                         r->sync_ms, r->lease_ms);
    /* A heartbeat may take the whole timeout: one that waited that long
     * after two periods (one late beat) must still land within the lease,
     * or a live replica's counts expire while it is waiting on Redis. */
    if (r->timeout_ms >= r->lease_ms - 2 * r->sync_ms)
        return ydoc_fail(d, v[TIMEOUT] ? v[TIMEOUT] : v[LEASE] ? v[LEASE] : v[SYNC], FP(TIMEOUT),
                         "%u ms is not less than redis_lease_ms - 2 * redis_sync_ms (%u - 2 * %u = %u ms)",
                         r->timeout_ms, r->lease_ms, r->sync_ms, r->lease_ms - 2 * r->sync_ms);
#undef FP
    return 0;
}

static int parse_limits(const ydoc *d, const yaml_node_t *n, cfg_limits *l) {
    enum { BODY, HDR, IDLE, CONNS, PER_IP, RESV, GRACE, BACKEND, NK = BACKEND + 7 };
    static const char *const keys[NK] = {"max_body_bytes", "header_timeout_s", "idle_timeout_s",
                                         "max_connections", "max_connections_per_ip",
                                         "reserved_connections", "shutdown_grace_s",
                                         "backend", "redis_url", "redis_prefix", "redis_on_error",
                                         "redis_timeout_ms", "redis_lease_ms", "redis_sync_ms"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int rc = ydoc_map_fields(d, n, "limits", keys, NK, v);
    if (rc) return rc;
#define FP(i) ydoc_path_field(fp, "limits", keys[i])
    if ((rc = ydoc_get_size(d, v[BODY], FP(BODY), 1, 1ull << 30, &l->max_body_bytes))) return rc;
    if ((rc = ydoc_get_u32(d, v[HDR], FP(HDR), 1, 3600, &l->header_timeout_s))) return rc;
    if ((rc = ydoc_get_u32(d, v[IDLE], FP(IDLE), 1, 86400, &l->idle_timeout_s))) return rc;
    if ((rc = ydoc_get_u32(d, v[CONNS], FP(CONNS), 1, 1000000, &l->max_connections))) return rc;
    if ((rc = ydoc_get_u32(d, v[PER_IP], FP(PER_IP), 0, 1000000, &l->max_connections_per_ip))) return rc;
    /* The reserve's default follows max_connections, so it is set here,
     * once max_connections is known, unless the file gives it. */
    l->reserved_connections = cfg_default_reserve(l->max_connections);
    if ((rc = ydoc_get_u32(d, v[RESV], FP(RESV), 0, l->max_connections - 1, &l->reserved_connections)))
        return rc;
    if ((rc = ydoc_get_u32(d, v[GRACE], FP(GRACE), 0, 3600, &l->shutdown_grace_s))) return rc;
#undef FP
    return parse_redis(d, v + BACKEND, keys + BACKEND, l);
}

/* Resolve a model path against the folder of the config file: a config in
 * another folder must not depend on the server's working directory. */
static char *resolve_path(const char *cfg_path, const char *p) {
    const char *slash = strrchr(cfg_path, '/');
    if (p[0] == '/' || !slash) return strdup(p);
    size_t dl = (size_t)(slash - cfg_path) + 1, pl = strlen(p);
    char *r = malloc(dl + pl + 1);
    if (!r) return NULL;
    memcpy(r, cfg_path, dl);
    memcpy(r + dl, p, pl + 1);
    return r;
}

#define CHAT_TEMPLATE_MAX (1u << 20)   /* bytes of a chat template file */

/* The whole of a small text file, NUL-terminated, or NULL with why. */
static char *read_text_file(const char *path, const char **why) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = strerror(errno);
        return NULL;
    }
    char *buf = malloc(CHAT_TEMPLATE_MAX + 1);
    size_t n = buf ? fread(buf, 1, CHAT_TEMPLATE_MAX + 1, f) : 0;
    int bad = !buf || ferror(f) || n > CHAT_TEMPLATE_MAX || memchr(buf, 0, n);
    *why = !buf ? "out of memory" : ferror(f) ? "read error" : n > CHAT_TEMPLATE_MAX ? "larger than 1 MiB"
                                                                                   : "holds a NUL byte";
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* chat_template (inline) or chat_template_file; the template's syntax is
 * checked when the server loads the model, where the interpreter lives. */
static int parse_chat_template(const ydoc *d, const yaml_node_t *inl, const yaml_node_t *file, const char *ip,
                               const char *fpth, cfg_model *m) {
    const char *s = NULL;
    int rc;
    if (inl && file) return ydoc_fail(d, file, fpth, "give chat_template or chat_template_file, not both");
    if (inl) {
        if ((rc = ydoc_get_str(d, inl, ip, &s))) return rc;
        m->chat_template = strdup(s);
        m->chat_template_from = strdup("config");
    } else if (file) {
        if ((rc = ydoc_get_str(d, file, fpth, &s))) return rc;
        if (!(m->chat_template_from = resolve_path(ydoc_name(d), s))) return ydoc_nomem(d);
        const char *why = NULL;
        if (!(m->chat_template = read_text_file(m->chat_template_from, &why)))
            return ydoc_fail(d, file, fpth, "cannot read '%s': %s", m->chat_template_from, why);
    } else {
        return 0;
    }
    return m->chat_template && m->chat_template_from ? 0 : ydoc_nomem(d);
}

/* A model's prefix_cache: {enabled, shared_prefixes}. */
static int parse_prefix_cache(const ydoc *d, const yaml_node_t *n, const char *path, cfg_model *m) {
    enum { EN, SHARED, NK };
    static const char *const keys[NK] = {"enabled", "shared_prefixes"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX], ip[YDOC_PATH_MAX];
    size_t cnt = 0;
    if (!n) return 0;
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
    if (v[EN] && (rc = ydoc_get_bool(d, v[EN], ydoc_path_field(fp, path, keys[EN]), &m->prefix_cache))) return rc;
    ydoc_path_field(fp, path, keys[SHARED]);
    if ((rc = ydoc_get_seq(d, v[SHARED], fp, &cnt))) return rc;
    if (cnt > CFG_MAX_SHARED_PREFIXES)
        return ydoc_fail(d, v[SHARED], fp, "%zu prefixes, at most %d", cnt, CFG_MAX_SHARED_PREFIXES);
    if (cnt && !(m->shared_prefixes = calloc(cnt, sizeof(char *)))) return ydoc_nomem(d);
    for (size_t i = 0; i < cnt; i++) {
        const char *s = NULL;
        const yaml_node_t *item = ydoc_seq_at(d, v[SHARED], i);
        ydoc_path_index(ip, fp, i);
        if ((rc = ydoc_get_str(d, item, ip, &s))) return rc;
        if (strlen(s) > CFG_SHARED_PREFIX_MAX) return ydoc_fail(d, item, ip, "longer than %u bytes", CFG_SHARED_PREFIX_MAX);
        if (!(m->shared_prefixes[i] = strdup(s))) return ydoc_nomem(d);
        m->n_shared_prefixes = i + 1;
    }
    return 0;
}

/* "cpu", "cuda" or "cuda:N", checked here so a typo is a config error with
 * its line; whether this build has the CUDA backend is the engine's to say
 * when the model loads. */
static int parse_device(const ydoc *d, const yaml_node_t *n, const char *path, cfg_model *m) {
    const char *s;
    char why[128];
    int idx, rc;
    if (!n) return 0;
    if ((rc = ydoc_get_str(d, n, path, &s))) return rc;
    if (strcmp(s, "cpu") != 0 && cudalev_parse_device(s, &idx, why, sizeof why) != 0)
        return ydoc_fail(d, n, path, "'%s' is not cpu, cuda or cuda:N", s);
    snprintf(m->device, sizeof m->device, "%s", s);
    return 0;
}

/* auto, f16 or f32; whether the device keeps such a cache is the engine's
 * to say when the model loads (CUDA keeps f32 only). */
static int parse_kv_dtype(const ydoc *d, const yaml_node_t *n, const char *path, cfg_model *m) {
    const char *s;
    eng_kv_dtype t;
    int rc;
    if (!n) return 0;
    if ((rc = ydoc_get_str(d, n, path, &s))) return rc;
    if (eng_kv_dtype_parse(s, &t)) return ydoc_fail(d, n, path, "'%s' is not auto, f16 or f32", s);
    m->kv_dtype = (int)t;
    return 0;
}

static int parse_model(const ydoc *d, const yaml_node_t *n, const char *path, cfg_model *m) {
    enum { NAME, PATH, KV, SWAP, BS, SEQS, BMIN, BMAX, THREADS, TPL, TPLF, PFX, PRICE, DEVICE, KVT, NK };
    static const char *const keys[NK] = {"name", "path", "kv_cache_bytes", "swap_bytes",
                                         "block_size", "max_seqs", "budget_min", "budget_max",
                                         "threads", "chat_template", "chat_template_file", "prefix_cache",
                                         "price_per_hour", "device", "kv_cache_dtype"};
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    const char *p = NULL;
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(i) ydoc_path_field(fp, path, keys[i])
    if (!v[NAME]) return ydoc_fail(d, n, FP(NAME), "missing (every model needs a name)");
    if (!v[PATH]) return ydoc_fail(d, n, FP(PATH), "missing (every model needs the path of its GGUF file)");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_MODEL_NAME_EXTRA, m->name, sizeof m->name))) return rc;
    if ((rc = ydoc_get_str(d, v[PATH], FP(PATH), &p))) return rc;
    if ((rc = ydoc_get_size(d, v[KV], FP(KV), 1, UINT64_MAX, &m->kv_cache_bytes))) return rc;
    if ((rc = ydoc_get_size(d, v[SWAP], FP(SWAP), 0, UINT64_MAX, &m->swap_bytes))) return rc;
    if ((rc = ydoc_get_i32(d, v[BS], FP(BS), 1, SCHED_MAX_BLOCK_SIZE, &m->block_size))) return rc;
    if ((rc = ydoc_get_i32(d, v[SEQS], FP(SEQS), 1, SCHED_MAX_SEQS, &m->max_seqs))) return rc;
    if ((rc = ydoc_get_i32(d, v[BMIN], FP(BMIN), 1, SCHED_MAX_BUDGET, &m->budget_min))) return rc;
    if ((rc = ydoc_get_i32(d, v[BMAX], FP(BMAX), 1, SCHED_MAX_BUDGET, &m->budget_max))) return rc;
    if ((rc = ydoc_get_i32(d, v[THREADS], FP(THREADS), 0, 4096, &m->threads))) return rc;
    if ((rc = parse_device(d, v[DEVICE], FP(DEVICE), m))) return rc;
    if ((rc = parse_kv_dtype(d, v[KVT], FP(KVT), m))) return rc;
    if (m->budget_min > m->budget_max) {
        const yaml_node_t *at = v[BMIN] ? v[BMIN] : v[BMAX];
        return ydoc_fail(d, at, FP(BMIN), "budget_min %d is larger than budget_max %d", m->budget_min,
                         m->budget_max);
    }
    if ((int64_t)m->max_seqs > (int64_t)SCHED_MAX_SEQS_PER_TOKEN * m->budget_max) {
        const yaml_node_t *at = v[SEQS] ? v[SEQS] : v[BMAX];
        return ydoc_fail(d, at, FP(SEQS), "max_seqs %d is more than %d x budget_max %d, which the scheduler refuses",
                         m->max_seqs, SCHED_MAX_SEQS_PER_TOKEN, m->budget_max);
    }
    if ((rc = parse_chat_template(d, v[TPL], v[TPLF], FP(TPL), FP(TPLF), m))) return rc;
    if ((rc = parse_prefix_cache(d, v[PFX], FP(PFX), m))) return rc;
    if ((rc = ydoc_get_number(d, v[PRICE], FP(PRICE), 0, CFG_PRICE_MAX, 0, &m->price_per_hour))) return rc;
#undef FP
    m->path = resolve_path(ydoc_name(d), p);
    return m->path ? 0 : ydoc_nomem(d);
}

static int parse_models(const ydoc *d, const yaml_node_t *n, cfg *g) {
    size_t cnt;
    int rc = ydoc_get_seq(d, n, "models", &cnt);
    if (rc) return rc;
    if (cnt == 0) return ydoc_fail(d, n, "models", "expected a list of at least one model");
    g->models = calloc(cnt, sizeof *g->models);
    if (!g->models) return ydoc_nomem(d);
    for (size_t i = 0; i < cnt; i++) {
        const yaml_node_t *item = ydoc_seq_at(d, n, i);
        char path[YDOC_PATH_MAX], fp[YDOC_PATH_MAX];
        ydoc_path_index(path, "models", i);
        cfg_model *m = &g->models[i];
        model_defaults(m);
        m->price_per_hour = g->price_per_hour;   /* the file's default, unless the model sets one */
        g->n_models = i + 1;   /* so cfg_free sees m->path even on error */
        if ((rc = parse_model(d, item, path, m))) return rc;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(g->models[j].name, m->name))
                return ydoc_fail(d, item, ydoc_path_field(fp, path, "name"),
                                 "repeated model name '%s' (also models[%zu])", m->name, j);
    }
    return 0;
}

/* Tier i of g; the names of tiers 0..i-1 are known, to refuse a repeat. */
static int parse_tier(const ydoc *d, const yaml_node_t *n, const char *path, cfg *g, size_t i) {
    enum { NAME, BAND, TTFT, TPOT, SHARE, MAXQ, NK };
    static const char *const keys[NK] = {"name", "band", "ttft_ms", "tpot_ms", "min_share",
                                         "max_queue_ms"};
    sched_tier *t = &g->tiers[i];
    const yaml_node_t *v[NK];
    char fp[YDOC_PATH_MAX];
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, keys[k])
    if (!v[NAME]) return ydoc_fail(d, n, FP(NAME), "missing (every tier needs a name)");
    if (!v[BAND]) return ydoc_fail(d, n, FP(BAND), "missing (every tier needs a band, 0 first)");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_NAME_EXTRA, t->name, sizeof t->name))) return rc;
    for (size_t j = 0; j < i; j++)
        if (!strcmp(g->tiers[j].name, t->name))
            return ydoc_fail(d, v[NAME], FP(NAME), "repeated tier name '%s' (also tiers[%zu])", t->name, j);
    if ((rc = ydoc_get_i32(d, v[BAND], FP(BAND), 0, SCHED_MAX_TIERS - 1, &t->band))) return rc;
    if ((rc = ydoc_get_u32(d, v[TTFT], FP(TTFT), 0, UINT32_MAX, &t->ttft_ms))) return rc;
    if ((rc = ydoc_get_u32(d, v[TPOT], FP(TPOT), 0, UINT32_MAX, &t->tpot_ms))) return rc;
    if ((rc = ydoc_get_number(d, v[SHARE], FP(SHARE), 0, 1, 0, &t->min_share))) return rc;
    rc = ydoc_get_u32(d, v[MAXQ], FP(MAXQ), 0, UINT32_MAX, &t->max_queue_ms);
#undef FP
    return rc;
}

static int parse_tiers(const ydoc *d, const yaml_node_t *n, cfg *g) {
    size_t cnt;
    int rc = ydoc_get_seq(d, n, "tiers", &cnt);
    if (rc) return rc;
    if (cnt == 0 || cnt > SCHED_MAX_TIERS)
        return ydoc_fail(d, n, "tiers", "expected a list of 1 to %d tiers", SCHED_MAX_TIERS);
    double share = 0;
    memset(g->tiers, 0, sizeof g->tiers);
    for (size_t i = 0; i < cnt; i++) {
        char path[YDOC_PATH_MAX];
        if ((rc = parse_tier(d, ydoc_seq_at(d, n, i), ydoc_path_index(path, "tiers", i), g, i))) return rc;
        share += g->tiers[i].min_share;
    }
    /* Minimum shares are carved out of one step budget: more than all of
     * it cannot be promised. The slack absorbs decimal rounding. */
    if (share > 1 + 1e-9)
        return ydoc_fail(d, n, "tiers", "min_share values add up to %g; at most 1", share);
    g->n_tiers = cnt;
    return 0;
}

static int find_tier(const cfg *g, const char *name) {
    for (size_t i = 0; i < g->n_tiers; i++)
        if (!strcmp(g->tiers[i].name, name)) return (int)i;
    return -1;
}

/* Store one key hash of tenant ti, refusing one already held by another
 * tenant (or this one) or by the admin key: a key names one principal. */
static int add_key(const ydoc *d, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    uint8_t h[AUTH_HASH_LEN];
    int rc = get_hash(d, n, path, h);
    if (rc) return rc;
    if (g->has_admin && !memcmp(h, g->admin_key, AUTH_HASH_LEN))
        return ydoc_fail(d, n, path, "same key hash as admin_key_sha256 (each key belongs to one holder)");
    if (g->has_metrics && !memcmp(h, g->metrics_key, AUTH_HASH_LEN))
        return ydoc_fail(d, n, path, "same key hash as metrics_key_sha256 (each key belongs to one holder)");
    for (size_t i = 0; i <= ti; i++)
        for (size_t k = 0; k < g->tenants[i].n_keys; k++)
            if (!memcmp(h, g->tenants[i].keys[k], AUTH_HASH_LEN))
                return ydoc_fail(d, n, path,
                                 "key hash already used by tenant '%s' (each key belongs to one tenant)",
                                 g->tenants[i].sched.name);
    cfg_tenant *t = &g->tenants[ti];
    memcpy(t->keys[t->n_keys++], h, AUTH_HASH_LEN);
    return 0;
}

/* One hash or a list of them. */
static int parse_keys(const ydoc *d, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    cfg_tenant *t = &g->tenants[ti];
    size_t cnt = 1;
    int rc = ydoc_is_seq(n) ? ydoc_get_seq(d, n, path, &cnt) : 0;
    if (rc) return rc;
    if (cnt == 0) return ydoc_fail(d, n, path, "expected at least one key hash");
    t->keys = calloc(cnt, sizeof *t->keys);
    if (!t->keys) return ydoc_nomem(d);
    if (!ydoc_is_seq(n)) return add_key(d, n, path, g, ti);
    for (size_t i = 0; i < cnt && rc == 0; i++) {
        char fp[YDOC_PATH_MAX];
        rc = add_key(d, ydoc_seq_at(d, n, i), ydoc_path_index(fp, path, i), g, ti);
    }
    return rc;
}

static int parse_tenant(const ydoc *d, const yaml_node_t *n, const char *path, cfg *g, size_t ti) {
    enum { NAME, TIER, WEIGHT, KEYS, KVB, KVF, RUN, QUE, RPM, TPM, CONC, NK };
    static const char *const keys[NK] = {
        "name", "tier", "weight", "key_sha256", "max_kv_blocks", "max_kv_fraction",
        "max_running", "max_queued", "requests_per_minute", "tokens_per_minute", "max_concurrent"};
    cfg_tenant *t = &g->tenants[ti];
    sched_tenant_cfg *s = &t->sched;
    const yaml_node_t *v[NK];
    const char *tiers[SCHED_MAX_TIERS];
    char fp[YDOC_PATH_MAX];
    int rc = ydoc_map_fields(d, n, path, keys, NK, v);
    if (rc) return rc;
#define FP(k) ydoc_path_field(fp, path, keys[k])
    if (!v[NAME]) return ydoc_fail(d, n, FP(NAME), "missing (every tenant needs a name)");
    if (!v[TIER]) return ydoc_fail(d, n, FP(TIER), "missing (every tenant needs a tier)");
    if (!v[KEYS]) return ydoc_fail(d, n, FP(KEYS), "missing (every tenant needs at least one key hash)");
    if ((rc = ydoc_get_name(d, v[NAME], FP(NAME), YDOC_NAME_EXTRA, s->name, sizeof s->name))) return rc;
    for (size_t j = 0; j < ti; j++)
        if (!strcmp(g->tenants[j].sched.name, s->name))
            return ydoc_fail(d, v[NAME], FP(NAME), "repeated tenant name '%s' (also tenants[%zu])", s->name, j);
    for (size_t i = 0; i < g->n_tiers; i++) tiers[i] = g->tiers[i].name;
    if ((rc = ydoc_get_enum(d, v[TIER], FP(TIER), "tier", tiers, g->n_tiers, &s->tier))) return rc;
    s->weight = 1;
    if ((rc = ydoc_get_number(d, v[WEIGHT], FP(WEIGHT), 0, 1e6, YDOC_LO_OPEN, &s->weight))) return rc;
    if ((rc = parse_keys(d, v[KEYS], FP(KEYS), g, ti))) return rc;
    if ((rc = ydoc_get_i32(d, v[KVB], FP(KVB), 0, INT32_MAX, &s->max_kv_blocks))) return rc;
    if ((rc = ydoc_get_number(d, v[KVF], FP(KVF), 0, 1, 0, &s->max_kv_frac))) return rc;
    if ((rc = ydoc_get_u32(d, v[RUN], FP(RUN), 0, UINT32_MAX, &s->max_running))) return rc;
    if ((rc = ydoc_get_u32(d, v[QUE], FP(QUE), 0, UINT32_MAX, &s->max_queued))) return rc;
    /* A bucket's burst is one minute's worth, so a rate is capped where
     * lim_tenant_init caps the burst. */
    uint64_t max_rate = g->limits.backend == CFG_BACKEND_REDIS ? CFG_REDIS_MAX_RATE : LIM_MAX_BURST;
    if ((rc = ydoc_get_u64(d, v[RPM], FP(RPM), 0, max_rate, &t->requests_per_minute))) return rc;
    if ((rc = ydoc_get_u64(d, v[TPM], FP(TPM), 0, max_rate, &t->tokens_per_minute))) return rc;
    rc = ydoc_get_u32(d, v[CONC], FP(CONC), 0, UINT32_MAX, &t->max_concurrent);
#undef FP
    return rc;
}

static int parse_tenants(const ydoc *d, const yaml_node_t *n, cfg *g) {
    size_t cnt;
    int rc = ydoc_get_seq(d, n, "tenants", &cnt);
    if (rc) return rc;
    if (cnt == 0) return ydoc_fail(d, n, "tenants", "expected a list of at least one tenant");
    if (cnt > INT32_MAX) return ydoc_fail(d, n, "tenants", "too many tenants");
    g->tenants = calloc(cnt, sizeof *g->tenants);
    if (!g->tenants) return ydoc_nomem(d);
    for (size_t i = 0; i < cnt && rc == 0; i++) {
        char path[YDOC_PATH_MAX];
        g->n_tenants = i + 1;   /* so cfg_free sees this tenant's keys even on error */
        rc = parse_tenant(d, ydoc_seq_at(d, n, i), ydoc_path_index(path, "tenants", i), g, i);
    }
    return rc;
}

/* The metrics key: read /metrics and nothing else, so it may sit in a
 * Prometheus config without granting admin or tenant rights. */
static int parse_metrics_key(const ydoc *d, const yaml_node_t *n, cfg *g) {
    const char *path = "metrics_key_sha256";
    int rc = get_hash(d, n, path, g->metrics_key);
    if (rc) return rc;
    if (g->has_admin && !memcmp(g->metrics_key, g->admin_key, AUTH_HASH_LEN))
        return ydoc_fail(d, n, path, "same key hash as admin_key_sha256 (each key belongs to one holder)");
    g->has_metrics = 1;
    return 0;
}

static int parse_root(const ydoc *d, const yaml_node_t *root, cfg *g) {
    enum { LISTEN, POLICY, LIMITS, MODELS, TIERS, TENANTS, ADMIN, METRICS, PRICE, POOL, NK };
    static const char *const keys[NK] = {"listen", "policy", "limits", "models",
                                         "tiers", "tenants", "admin_key_sha256",
                                         "metrics_key_sha256", "price_per_hour", "public_pool_metrics"};
    const yaml_node_t *v[NK];
    int rc = ydoc_map_fields(d, root, "", keys, NK, v);
    if (rc) return rc;
    if (!v[MODELS]) return ydoc_fail(d, root, "models", "missing (at least one model is required)");
    if (!v[TENANTS]) return ydoc_fail(d, root, "tenants", "missing (at least one tenant is required)");
    if ((rc = parse_listen(d, v[LISTEN], g))) return rc;
    if ((rc = parse_policy(d, v[POLICY], g))) return rc;
    if ((rc = parse_limits(d, v[LIMITS], &g->limits))) return rc;
    /* The default price before the models, which inherit it. */
    if ((rc = ydoc_get_number(d, v[PRICE], "price_per_hour", 0, CFG_PRICE_MAX, 0, &g->price_per_hour))) return rc;
    if ((rc = parse_models(d, v[MODELS], g))) return rc;
    if (v[TIERS] && (rc = parse_tiers(d, v[TIERS], g))) return rc;
    /* The admin and metrics keys first, so that tenants' keys are checked
     * against them. */
    if (v[ADMIN]) {
        if ((rc = get_hash(d, v[ADMIN], "admin_key_sha256", g->admin_key))) return rc;
        g->has_admin = 1;
    }
    if (v[METRICS] && (rc = parse_metrics_key(d, v[METRICS], g))) return rc;
    if (v[POOL] && (rc = ydoc_get_bool(d, v[POOL], "public_pool_metrics", &g->public_pool_metrics))) return rc;
    return parse_tenants(d, v[TENANTS], g);
}

/* ---- public ---------------------------------------------------------------- */

int cfg_load(const char *path, cfg *out, char *err, size_t errlen) {
    static const ydoc_opts opts = {TS_ERR_CONFIG, "empty configuration (models and tenants are required)"};
    if (err && errlen) err[0] = 0;
    if (!path || !out) return err_set(err, errlen, TS_ERR_INVAL, "cfg_load: no path or output");
    memset(out, 0, sizeof *out);
    ydoc *d;
    int rc = ydoc_load_file(path, &opts, &d, err, errlen);
    if (rc) return rc;
    cfg g;
    memset(&g, 0, sizeof g);
    set_defaults(&g);
    rc = parse_root(d, ydoc_root(d), &g);
    ydoc_free(d);
    if (rc) {
        cfg_free(&g);
        return rc;
    }
    *out = g;
    return 0;
}

void cfg_free(cfg *c) {
    if (!c) return;
    for (size_t i = 0; c->models && i < c->n_models; i++) {
        free(c->models[i].path);
        free(c->models[i].chat_template);
        free(c->models[i].chat_template_from);
        for (size_t k = 0; k < c->models[i].n_shared_prefixes; k++) free(c->models[i].shared_prefixes[k]);
        free(c->models[i].shared_prefixes);
    }
    free(c->models);
    for (size_t i = 0; c->tenants && i < c->n_tenants; i++) free(c->tenants[i].keys);
    free(c->tenants);
    memset(c, 0, sizeof *c);
}

int cfg_single_model(cfg *out, const char *model_path, const char *key_hash_hex) {
    if (!out) return TS_ERR_INVAL;
    memset(out, 0, sizeof *out);
    if (!model_path || !*model_path || !key_hash_hex) return TS_ERR_INVAL;
    cfg g;
    memset(&g, 0, sizeof g);
    set_defaults(&g);
    uint8_t h[AUTH_HASH_LEN];
    int rc = TS_ERR_INVAL;
    if (auth_hex_decode(key_hash_hex, h, AUTH_HASH_LEN) != 0) goto err;

    rc = TS_ERR_NOMEM;
    g.models = calloc(1, sizeof *g.models);
    g.tenants = calloc(1, sizeof *g.tenants);
    if (!g.models || !g.tenants) goto err;
    g.n_models = g.n_tenants = 1;
    cfg_model *m = &g.models[0];
    model_defaults(m);
    if (!(m->path = strdup(model_path))) goto err;

    /* The stem: after the last '/', before the last '.', unless that dot
     * starts the name (".hidden" keeps its dot). */
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    const char *dot = strrchr(base, '.');
    size_t len = dot && dot > base ? (size_t)(dot - base) : strlen(base);
    if (len > SCHED_NAME_MAX - 1) len = SCHED_NAME_MAX - 1;
    for (size_t i = 0; i < len; i++) {
        char ch = base[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 strchr(YDOC_MODEL_NAME_EXTRA, ch);
        m->name[i] = ok ? ch : '-';
    }
    if (len == 0) snprintf(m->name, sizeof m->name, "model");

    cfg_tenant *t = &g.tenants[0];
    snprintf(t->sched.name, sizeof t->sched.name, "default");
    t->sched.tier = find_tier(&g, "gold");
    t->sched.weight = 1;
    if (!(t->keys = calloc(1, sizeof *t->keys))) goto err;
    memcpy(t->keys[0], h, AUTH_HASH_LEN);
    t->n_keys = 1;
    *out = g;
    return 0;
err:
    cfg_free(&g);
    return rc;
}

int cfg_auth_table(const cfg *c, auth_table **out) {
    if (!c || !out) return TS_ERR_INVAL;
    *out = NULL;
    size_t n = 0;
    for (size_t i = 0; i < c->n_tenants; i++) n += c->tenants[i].n_keys;
    auth_entry *e = n ? malloc(n * sizeof *e) : NULL;
    if (n && !e) return TS_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < c->n_tenants; i++)
        for (size_t j = 0; j < c->tenants[i].n_keys; j++) {
            memcpy(e[k].hash, c->tenants[i].keys[j], AUTH_HASH_LEN);
            e[k++].tenant = (int32_t)i;
        }
    int rc = auth_table_new(e, n, c->has_admin ? c->admin_key : NULL, c->has_metrics ? c->metrics_key : NULL, out);
    free(e);
    return rc;
}

uint32_t cfg_default_reserve(uint32_t max_connections) { return max_connections / 8; }

int cfg_model_find(const cfg *c, const char *name) {
    for (size_t i = 0; c && name && i < c->n_models; i++)
        if (!strcmp(c->models[i].name, name)) return (int)i;
    return -1;
}

int cfg_tenant_find(const cfg *c, const char *name) {
    for (size_t i = 0; c && name && i < c->n_tenants; i++)
        if (!strcmp(c->tenants[i].sched.name, name)) return (int)i;
    return -1;
}

double cfg_cost(double price_per_hour, double engine_us) {
    if (!(price_per_hour > 0)) return NAN;
    return engine_us / 3.6e9 * price_per_hour;
}
