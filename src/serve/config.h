/*
 * config.h - the server's YAML configuration: listen address, HTTP limits,
 * models, SLO tiers, tenants with their hashed API keys and rate limits.
 *
 * cfg_load reads one file with util/ydoc.h and checks all of it before
 * anything is returned: a bad file loads nothing (the output stays zeroed,
 * nothing leaks) and the error names the file, the 1-based line and column
 * where the fault starts, and the field, e.g. for examples/demo.yaml with
 * silver-team's tier set to platinum
 *     demo.yaml:85:11: tenants[1].tier: unknown tier 'platinum' (gold, silver, bronze)
 * Unknown keys and repeated keys are errors, so a typo never passes silently;
 * so is a second YAML document. A key whose value is null (empty, ~, null,
 * Null, NULL) counts as absent.
 * It does not open model files: the server loads them and reports their
 * errors itself. The cfg owns all of its memory; cfg_free releases it.
 * Nothing here touches the scheduler or the network: the server turns a cfg
 * into sched_tier_add / sched_tenant_add / lim_tenant_init calls.
 *
 * Schema (all keys optional unless marked required):
 *
 *   listen: 127.0.0.1:8080     host:port, "[v6]:port" for IPv6; port 1..65535
 *   policy: fair               fair | fcfs (SCHED_POLICY_*)
 *   limits:
 *     max_body_bytes: 1048576  request body cap; size (see below), 1 B..1 GiB.
 *                              A larger declared Content-Length is refused
 *                              (413) on its headers, before any body is read
 *     header_timeout_s: 10     1..3600 s: a request must arrive whole, headers
 *                              and body, within this of its start: the accept
 *                              for a connection's first request, the end of the
 *                              previous answer for later ones (so it is also
 *                              how long a kept-alive connection may sit idle)
 *     idle_timeout_s: 60       1..86400 s: libmicrohttpd's inactivity timeout,
 *                              no byte either way (a client that stops reading
 *                              its answer); a suspended request is exempt
 *     max_connections: 2048    1..1000000 open connections in all
 *     max_connections_per_ip: 0  0..1000000 per client address, 0 = unlimited;
 *                              leave 0 behind a gateway, where every
 *                              connection comes from the gateway's address
 *     reserved_connections: 256  0..max_connections-1; default max_connections/8:
 *                              connections that clients without a valid key
 *                              can never hold, so a tenant can always connect
 *     shutdown_grace_s: 10     drain time on SIGTERM, 0..3600
 *     backend: local           where tenants' rate and concurrency limits are
 *                              counted: local (each replica alone) or redis
 *                              (one count across every replica sharing the
 *                              Redis: redisfleet.h); redis needs redis_url
 *     redis_url: redis://[[user]:password@]host[:port][/db]
 *                              port 1..65535 (default 6379), db 0..65535
 *                              (default 0); IPv6 hosts in brackets; %XX
 *                              escapes in user and password. Only with
 *                              backend redis
 *     redis_prefix: tessera    the first part of every key, [A-Za-z0-9._:-],
 *                              1..CFG_REDIS_PREFIX_MAX-1 bytes: fleets sharing
 *                              one Redis give each its own
 *     redis_on_error: open     when Redis cannot answer in time: open (count
 *                              locally, as backend local) or closed (503 with
 *                              Retry-After)
 *     redis_timeout_ms: 100    1..10000: connect and each command
 *     redis_lease_ms: 3000     500..600000: a replica's in-flight counts
 *                              outlive its last heartbeat by this much
 *     redis_sync_ms: 200       20..10000: heartbeat and fair-share exchange
 *                              period; at most lease / 3
 *   models:                    required, at least one
 *     - name: demo             required; the "model" clients send; [A-Za-z0-9._:/-]
 *       path: m.gguf           required; relative to the config file's folder
 *       kv_cache_bytes: 256MiB size > 0 (default 256 MiB)
 *       swap_bytes: 256MiB     host swap space, size; 0 disables swap (default 256 MiB)
 *       block_size: 16         positions per KV block, 1..1024
 *       max_seqs: 64           sequences per step, 1..65536, at most 4 x budget_max
 *       budget_min: 64         tokens per step, 1..budget_max
 *       budget_max: 512        tokens per step, budget_min..1048576
 *       threads: 0             CPU threads, 0 = all cores, 0..4096
 *       device: cpu            cpu, cuda or cuda:N (the Nth device this
 *                              process sees); a build without the CUDA
 *                              backend refuses cuda when the model loads
 *       kv_cache_dtype: auto   the KV cache's elements: auto (the device's:
 *                              f16 on the CPU, f32 on CUDA), f16 (half the
 *                              bytes: twice the tokens in kv_cache_bytes),
 *                              or f32 (keys and values kept exact)
 *       chat_template: "..."   optional Jinja text replacing the GGUF's
 *                              tokenizer.chat_template (the model has none,
 *                              or one the interpreter cannot run)
 *       chat_template_file: t.jinja  the same, read from a file (relative
 *                              to the config's folder, at most 1 MiB); not
 *                              both
 *       price_per_hour: 0      the price of the device, MIG slice or MPS share
 *                              this model's engine runs on, per hour, in the
 *                              operator's currency; a number in
 *                              0..CFG_PRICE_MAX; default: the top-level
 *                              price_per_hour; 0 = unknown (see "Cost" below)
 *       prefix_cache:          automatic prefix caching (sched.h, "Prefix cache")
 *         enabled: true        default true; each tenant's cache is its own
 *         shared_prefixes: []  texts (at most CFG_MAX_SHARED_PREFIXES, each
 *                              1..CFG_SHARED_PREFIX_MAX bytes) declared public:
 *                              a prompt whose tokens start with one's tokens
 *                              (tokenized as a completions prompt, BOS
 *                              included) shares the full blocks inside it
 *                              with every tenant. For chat, declare the
 *                              rendered start of the conversation (the
 *                              template's text through the system message)
 *   tiers:                     optional, 1..SCHED_MAX_TIERS; default: gold,
 *                              silver, bronze as sched_tiers_default()
 *     - name: gold             required; [A-Za-z0-9._-]
 *       band: 0                required; 0 .. SCHED_MAX_TIERS-1, lower first
 *       ttft_ms: 200           0 = best effort
 *       tpot_ms: 0             0 = none
 *       min_share: 0           0..1; the sum over tiers is at most 1
 *       max_queue_ms: 0        0 = unbounded
 *   tenants:                   required, at least one
 *     - name: acme             required; [A-Za-z0-9._-]
 *       tier: gold             required; a tier's name
 *       weight: 1              > 0 (default 1)
 *       key_sha256: <64 hex>   required; one hash or a list of hashes
 *       max_kv_blocks: 0       0 = no limit
 *       max_kv_fraction: 0     of the KV pool, 0..1, 0 = no limit
 *       max_running: 0         0 = no limit
 *       max_queued: 0          0 = no limit
 *       requests_per_minute: 0 0 = unlimited; with backend redis at most
 *                              CFG_REDIS_MAX_RATE, as tokens_per_minute
 *       tokens_per_minute: 0   0 = unlimited
 *       max_concurrent: 0      0 = unlimited
 *   admin_key_sha256: <64 hex> optional; the key for admin routes (and /metrics)
 *   metrics_key_sha256: <64 hex> optional; a key that reads /metrics only.
 *                              Without it /metrics needs the admin key; with
 *                              neither, /metrics answers 401 to everyone
 *   public_pool_metrics: false  true: /metrics without a key answers the
 *                              model-server gauges (per model: requests
 *                              waiting and running, KV in use; vLLM's names
 *                              too), which name no tenant, for a load
 *                              balancer that scrapes without credentials
 *                              (the GIE endpoint picker); a key still reads
 *                              everything
 *   price_per_hour: 0          the default of every model's price_per_hour
 *
 * Cost. A tenant's cost on a model is its engine time on that model's
 * device times the device's price:
 *     cost = engine_seconds x price_per_hour / 3600
 * where engine_seconds is sched_tenant_stats.engine_us / 1e6: each step's
 * measured time split among the step's tenants by their share of its
 * tokens. It leaves out the device's idle time (nobody's: an operator
 * pays for it, no tenant caused it), host-side work outside engine steps
 * (tokenizing, HTTP), and the weights' memory held while idle; so the
 * tenants' costs add up to the price of the device's busy time, not of
 * the hour. A price of 0 means unknown, not free: the server then reports
 * no cost numbers for the model (null in /admin JSON, no cost series in
 * /metrics), so an unpriced model never reads as costing nothing.
 *
 * Sizes are a plain integer of bytes or a number with a unit: B, KB, MB, GB,
 * TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), any case, an
 * optional space between. Names are 1..SCHED_NAME_MAX-1 characters and
 * unique within their list; every key hash is unique across all tenants, the
 * admin key and the metrics key.
 */
#ifndef TS_CONFIG_H
#define TS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "sched.h"

#define CFG_HOST_MAX 256            /* bytes of the listen host, with the NUL */
#define CFG_MAX_SHARED_PREFIXES 16  /* public prefixes per model */
#define CFG_SHARED_PREFIX_MAX (1u << 20) /* bytes of one */
#define CFG_PRICE_MAX 1e9           /* price_per_hour at most, currency units per hour */
#define CFG_REDIS_PREFIX_MAX 64     /* bytes of redis_prefix, with the NUL */
#define CFG_REDIS_SECRET_MAX 256    /* bytes of the URL's user or password, with the NUL */
/* Largest rate a tenant may have with backend redis: Redis runs its
 * scripts in Lua, whose numbers are doubles, exact for integers up to
 * 2^53; a full bucket holds rate x LIM_UNITS_PER_TOKEN units. */
#define CFG_REDIS_MAX_RATE ((1ull << 53) / 60000000ull)

enum { CFG_BACKEND_LOCAL = 0, CFG_BACKEND_REDIS = 1 };

/* Where the fleet's shared limits live (backend redis). */
typedef struct cfg_redis {
    char host[CFG_HOST_MAX];        /* without brackets for IPv6 */
    uint16_t port;
    uint32_t db;                    /* SELECT index */
    char user[CFG_REDIS_SECRET_MAX];     /* "" = none (AUTH password alone) */
    char password[CFG_REDIS_SECRET_MAX]; /* "" = no AUTH */
    char prefix[CFG_REDIS_PREFIX_MAX];
    int fail_closed;                /* 1: 503 while Redis is unreachable */
    uint32_t timeout_ms;            /* ms: connect and each command */
    uint32_t lease_ms;              /* ms: in-flight counts outlive a heartbeat */
    uint32_t sync_ms;               /* ms: heartbeat and fair-share period */
} cfg_redis;

typedef struct cfg_limits {
    uint64_t max_body_bytes;        /* bytes */
    uint32_t header_timeout_s;      /* s */
    uint32_t idle_timeout_s;        /* s */
    uint32_t max_connections;
    uint32_t max_connections_per_ip; /* 0 = unlimited */
    uint32_t reserved_connections;  /* < max_connections; see gate.h */
    uint32_t shutdown_grace_s;      /* s */
    int backend;                    /* CFG_BACKEND_* */
    cfg_redis redis;                /* with CFG_BACKEND_REDIS */
} cfg_limits;

typedef struct cfg_model {
    char name[SCHED_NAME_MAX];
    char *path;                     /* owned; resolved against the config's folder */
    uint64_t kv_cache_bytes;        /* bytes of device KV pool */
    uint64_t swap_bytes;            /* bytes of host swap, 0 = no swap */
    int block_size;                 /* positions per block */
    int max_seqs;                   /* sequences per step */
    int budget_min, budget_max;     /* tokens per step */
    int threads;                    /* 0 = all cores */
    char device[16];                /* engine backend: "cpu", "cuda" or "cuda:N" */
    int kv_dtype;                   /* eng_kv_dtype: ENG_KV_AUTO (the backend's), _F16, _F32 */
    char *chat_template;            /* owned Jinja text overriding the GGUF's, or NULL */
    char *chat_template_from;       /* owned: "config" or the file it was read from */
    int prefix_cache;               /* 1: automatic prefix caching (default) */
    char **shared_prefixes;         /* owned (n_shared_prefixes) public prefix texts */
    size_t n_shared_prefixes;
    double price_per_hour;          /* currency units per hour of the device; 0 = unknown */
} cfg_model;

typedef struct cfg_tenant {
    sched_tenant_cfg sched;         /* name, tier (index into cfg.tiers), weight, quotas */
    uint8_t (*keys)[AUTH_HASH_LEN]; /* owned; n_keys SHA-256 digests */
    size_t n_keys;
    uint64_t requests_per_minute;   /* lim_tenant_init's req_per_min, 0 = unlimited */
    uint64_t tokens_per_minute;     /* lim_tenant_init's tok_per_min, 0 = unlimited */
    uint32_t max_concurrent;        /* 0 = unlimited */
} cfg_tenant;

typedef struct cfg {
    char host[CFG_HOST_MAX];        /* without brackets for IPv6 */
    uint16_t port;
    int policy;                     /* SCHED_POLICY_* */
    cfg_limits limits;
    cfg_model *models;              /* owned, n_models >= 1 */
    size_t n_models;
    sched_tier tiers[SCHED_MAX_TIERS];
    size_t n_tiers;                 /* >= 1; tenant .sched.tier indexes tiers */
    cfg_tenant *tenants;            /* owned, n_tenants >= 1, index = tenant id */
    size_t n_tenants;
    int has_admin;
    uint8_t admin_key[AUTH_HASH_LEN];
    int has_metrics;
    uint8_t metrics_key[AUTH_HASH_LEN];
    int public_pool_metrics;        /* /metrics without a key: the pool gauges */
    double price_per_hour;          /* the file's default for models; 0 = unknown */
} cfg;

/* Cost of engine_us of engine time on a device of price_per_hour:
 * engine_us / 3.6e9 x price_per_hour (see "Cost" above); NaN when the
 * price is unknown (0, or not a positive number), so that no caller can
 * mistake an unpriced model for a free one. The one copy of the formula:
 * /admin/tenants and /metrics both use it. */
double cfg_cost(double price_per_hour, double engine_us);

/* Load and check the YAML file at path into *out.
 *   err, errlen: OUT, may be NULL/0; on failure a one-line message
 *                "path:line:column: field: what is wrong" (NUL-terminated, cut to
 *                fit); bad bytes, which have no column, give "path:line: ...".
 * Returns 0, or TS_ERR_CONFIG (bad content), TS_ERR_IO (unreadable file),
 * TS_ERR_NOMEM, TS_ERR_INVAL (NULL argument). On failure *out is zeroed and
 * owns nothing. */
int cfg_load(const char *path, cfg *out, char *err, size_t errlen);

/* Parse a redis:// URL (the schema above) into r's host, port, db, user
 * and password, leaving its other fields alone. Returns 0, or
 * TS_ERR_CONFIG with why (a short phrase, NUL-terminated) on any fault;
 * r is then unchanged. */
int cfg_redis_url_parse(const char *url, cfg_redis *r, char *why, size_t whylen);

/* Release what c owns and zero it; safe on a zeroed cfg and on NULL. */
void cfg_free(cfg *c);

/* The configuration of `tessera serve --model M.gguf`: defaults everywhere,
 * one model named after the file's stem (the name without folders and the
 * last extension; characters outside the model-name set become '-', cut to
 * SCHED_NAME_MAX-1), at model_path as given; the default tiers; one tenant
 * "default" on tier gold holding the key whose SHA-256 is key_hash_hex.
 * Returns 0, TS_ERR_INVAL (NULL or empty path, bad hex) or TS_ERR_NOMEM; on
 * failure *out is zeroed. */
int cfg_single_model(cfg *out, const char *model_path, const char *key_hash_hex);

/* The key table for c: every tenant's hashes mapped to the tenant's index,
 * and the admin hash if any. Returns 0 and *out (free with
 * auth_table_free), or auth_table_new's errors. */
int cfg_auth_table(const cfg *c, auth_table **out);

/* reserved_connections when the file does not give it: an eighth of
 * max_connections, which leaves anonymous clients most of the room while
 * keeping enough free for tenants to connect during a flood. */
uint32_t cfg_default_reserve(uint32_t max_connections);

/* Index of the model or tenant with that name, or -1. */
int cfg_model_find(const cfg *c, const char *name);
int cfg_tenant_find(const cfg *c, const char *name);

#endif
