/*
 * fuzz_config.c - the server's YAML configuration (serve/config.c over
 * util/ydoc.c and libyaml). cfg_load only reads a path, so the input is
 * written to a memfd first and loaded by its /proc/self/fd name.
 *
 * Checks config.h's promises: a refused file leaves the cfg zeroed and the
 * message is one NUL-terminated line; an accepted one has at least one
 * model and one tenant, every tenant's tier names an existing tier, and the
 * key table builds (every hash unique) and finds each tenant by its keys;
 * a redis backend has a host, a port, a prefix and rates within Lua's
 * exact range. The input's first line also goes through the redis_url
 * parser (cfg_redis_url_parse).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "common.h"
#include "config.h"
#include "err.h"

/* The input's first line as a redis_url: parsed into a host and a port,
 * or refused with a message and the output untouched. */
static void check_url(const uint8_t *data, size_t size) {
    char url[600], why[160];
    size_t n = 0;
    while (n < size && n < sizeof url - 1 && data[n] != '\n') n++;
    memcpy(url, data, n);
    url[n] = 0;
    cfg_redis r, before;
    memset(&r, 0x5a, sizeof r);
    before = r;
    if (cfg_redis_url_parse(url, &r, why, sizeof why) == 0) {
        FZ_CHECK(r.host[0] && r.port >= 1 && memchr(r.host, 0, sizeof r.host));
        FZ_CHECK(!strncmp(url, "redis://", 8));
    } else {
        FZ_CHECK(why[0] && memcmp(&r, &before, sizeof r) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_url(data, size);
    const char *path = fz_file(data, size);
    cfg c;
    char err[512];
    int rc = cfg_load(path, &c, err, sizeof err);
    if (rc < 0) {
        static const cfg zero;
        FZ_CHECK(rc == TS_ERR_CONFIG || rc == TS_ERR_NOMEM);
        FZ_CHECK(memcmp(&c, &zero, sizeof c) == 0);
        fz_check_message(err, sizeof err);
        return 0;
    }
    FZ_CHECK(c.n_models >= 1 && c.models && c.n_tenants >= 1 && c.tenants);
    FZ_CHECK(c.n_tiers >= 1 && c.n_tiers <= SCHED_MAX_TIERS);
    FZ_CHECK(c.port >= 1);
    for (size_t i = 0; i < c.n_models; i++) {
        FZ_CHECK(c.models[i].path && c.models[i].name[0]);
        FZ_CHECK(cfg_model_find(&c, c.models[i].name) == (int)i);
        FZ_CHECK(c.models[i].budget_min >= 1 && c.models[i].budget_min <= c.models[i].budget_max);
    }
    for (size_t i = 0; i < c.n_tenants; i++) {
        FZ_CHECK(c.tenants[i].sched.tier >= 0 && (size_t)c.tenants[i].sched.tier < c.n_tiers);
        FZ_CHECK(c.tenants[i].n_keys >= 1 && c.tenants[i].keys);
        FZ_CHECK(cfg_tenant_find(&c, c.tenants[i].sched.name) == (int)i);
    }
    if (c.limits.backend == CFG_BACKEND_REDIS) {
        const cfg_redis *r = &c.limits.redis;
        FZ_CHECK(r->host[0] && r->port >= 1 && r->prefix[0] && r->timeout_ms >= 1);
        FZ_CHECK(r->sync_ms >= 20 && r->sync_ms <= r->lease_ms / 3);
        for (size_t i = 0; i < c.n_tenants; i++)
            FZ_CHECK(c.tenants[i].requests_per_minute <= CFG_REDIS_MAX_RATE &&
                     c.tenants[i].tokens_per_minute <= CFG_REDIS_MAX_RATE);
    }
    auth_table *a = NULL;
    FZ_CHECK(cfg_auth_table(&c, &a) == 0);
    auth_table_free(a);
    cfg_free(&c);
    cfg_free(&c);
    return 0;
}
