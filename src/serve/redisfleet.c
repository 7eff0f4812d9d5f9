/* redisfleet.c - fleet-wide limits and fair-share figures in Redis; see
 * redisfleet.h.
 *
 * The Lua below is ratelimit.c again, in Redis's Lua 5.1 whose numbers are
 * doubles: every quantity stays an integer below 2^53 (the config caps the
 * rates so that a full bucket does), a product is taken only after the
 * matching quotient shows it fits, and floor division goes through
 * math.fmod, which is exact, instead of rounding a quotient. Numbers go
 * back into Redis through string.format('%.0f'), since Lua's own
 * conversion keeps only 14 digits.
 */
#include "redisfleet.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <math.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "fq.h"

#define BACKOFF_MIN_US 100000       /* first wait before reconnecting */
#define BACKOFF_MAX_US 5000000      /* longest */
#define REPLICA_MAX 96              /* bytes of a replica id, with the NUL */
#define NUM_MAX 24                  /* bytes of a decimal uint64, with the NUL */
#define PENDING_CAP 4096            /* finishes kept for a Redis that is away */
#define REFUSAL_LOG_US 10000000     /* at most one line about error replies this often */

/* A finish whose tokens Redis has not settled yet. */
struct pending {
    int tenant;
    uint64_t reserved, used;        /* tokens */
    uint64_t seq;                   /* its finish's sequence number */
};

/* ---- the scripts ----------------------------------------------------------- */

/* Shared by admit and finish. KEYS[1] is the tenant's bucket hash. A
 * bucket is nil when its rate is 0 (unlimited). A stored time later than
 * now means Redis's clock stepped back: the bucket counts from now, with
 * the level it had, instead of refusing the tenant for the length of the
 * step (ratelimit.c's monotonic clock never does that). */
#define LUA_BUCKETS                                                                                  \
    "local U = 60000000\n"                                                                           \
    "local t = redis.call('TIME')\n"                                                                 \
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                        \
    "local function fdiv(a, b) return (a - math.fmod(a, b)) / b end\n"                               \
    "local function cdiv(a, b) local q = fdiv(a, b) if math.fmod(a, b) ~= 0 then q = q + 1 end return q end\n" \
    "local function bucket(p, rate)\n"                                                                 \
    "  if rate == 0 then return nil end\n"                                                           \
    "  local b = {p = p, rate = rate, cap = rate * U, level = rate * U, last = now}\n"               \
    "  local v = redis.call('HMGET', KEYS[1], p .. 'l', p .. 't', p .. 'r')\n"                       \
    "  local level, last, old = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])\n"                   \
    "  if not level or not last or not old or old <= 0 then return b end\n"                          \
    /* ratelimit.c level_at at the stored rate, then a changed rate's cap */                          \
    "  local oldcap = old * U\n"                                                                     \
    "  if now > last and level < oldcap then\n"                                                      \
    "    if now - last > fdiv(oldcap - level, old) then level = oldcap\n"                           \
    "    else level = level + (now - last) * old end\n"                                              \
    "  end\n"                                                                                        \
    "  if level > b.cap then level = b.cap end\n"                                                    \
    "  b.level = level\n"                                                                            \
    "  return b\n"                                                                                   \
    "end\n"                                                                                          \
    /* lim_bucket_wait_us: 0 now, -1 never, else exact us */                                         \
    "local function wait(b, n)\n"                                                                    \
    "  if not b then return 0 end\n"                                                                 \
    "  if n > b.rate then return -1 end\n"                                                           \
    "  local need = n * U\n"                                                                         \
    "  if b.level >= need then return 0 end\n"                                                       \
    "  return cdiv(need - b.level, b.rate)\n"                                                          \
    "end\n"                                                                                          \
    "local function store(b)\n"                                                                      \
    "  if not b then return end\n"                                                                   \
    "  redis.call('HSET', KEYS[1], b.p .. 'l', string.format('%.0f', b.level),\n"                    \
    "             b.p .. 't', string.format('%.0f', b.last), b.p .. 'r', string.format('%.0f', b.rate))\n" \
    "end\n"                                                                                          \
    /* The key lives until both buckets are full again (what a missing key */                        \
    /* reads as), plus a second. */                                                                  \
    "local function expire(a, b)\n"                                                                  \
    "  local us = 0\n"                                                                               \
    "  for _, x in ipairs({a or false, b or false}) do\n"                                            \
    "    if x then\n"                                                                                \
    "      local w = cdiv(x.cap - x.level, x.rate)\n"                                                 \
    "      if w > us then us = w end\n"                                                              \
    "    end\n"                                                                                      \
    "  end\n"                                                                                        \
    "  if a or b then redis.call('PEXPIRE', KEYS[1], string.format('%.0f', fdiv(us, 1000) + 1000)) end\n" \
    "end\n"

/* KEYS: bucket hash, in-flight hash. ARGV: alive prefix, replica, rpm,
 * tpm, max_concurrent, reserve, lease_ms. Returns {reason, retry_us} with
 * reason a lim_reason. */
static const char LUA_ADMIT[] =
    LUA_BUCKETS
    "local rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local conc, need = tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local rq, tk = bucket('r', rpm), bucket('t', tpm)\n"
    "local wr, wt = wait(rq, 1), wait(tk, need)\n"
    "if wr < 0 or wt < 0 then return {4, -1} end\n"
    "if wr > 0 or wt > 0 then\n"
    "  if wt > wr then return {2, wt} end\n"
    "  return {1, wr}\n"
    "end\n"
    "redis.call('SET', ARGV[1] .. ARGV[2], '1', 'PX', ARGV[7])\n"
    "if conc > 0 then\n"
    "  local n = 0\n"
    "  local h = redis.call('HGETALL', KEYS[2])\n"
    "  for i = 1, #h, 2 do\n"
    "    if redis.call('EXISTS', ARGV[1] .. h[i]) == 1 then n = n + tonumber(h[i + 1])\n"
    "    else redis.call('HDEL', KEYS[2], h[i]) end\n"
    "  end\n"
    "  if n >= conc then return {3, -1} end\n"
    "end\n"
    "redis.call('HINCRBY', KEYS[2], ARGV[2], 1)\n"
    "redis.call('PEXPIRE', KEYS[2], 2 * tonumber(ARGV[7]))\n"
    "if rq then rq.level = rq.level - U end\n"
    "if tk then tk.level = tk.level - need * U end\n"
    "store(rq) store(tk) expire(rq, tk)\n"
    "return {0, 0}\n";

/* KEYS: bucket hash, in-flight hash, this replica's finish sequence.
 * ARGV: alive prefix, replica, rpm, tpm, reserved, used, "1" to end a
 * request in flight or "0" only to settle its tokens (a finish delivered
 * late), and the finish's sequence number. A call that timed out may still
 * run when Redis catches up, and its settlement is then delivered again:
 * the sequence (a replica's finishes reach Redis in order, one connection
 * at a time) applies each one once. Returns 0. */
static const char LUA_FINISH[] =
    LUA_BUCKETS
    "if ARGV[7] == '1' then\n"
    "  local n = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') or 0\n"
    "  if n > 1 then redis.call('HINCRBY', KEYS[2], ARGV[2], -1)\n"
    "  elseif n == 1 then redis.call('HDEL', KEYS[2], ARGV[2]) end\n"
    "end\n"
    "local seq = tonumber(ARGV[8])\n"
    "if seq <= (tonumber(redis.call('GET', KEYS[3]) or '0') or 0) then return 0 end\n"
    "redis.call('SET', KEYS[3], ARGV[8], 'PX', 86400000)\n"
    "local rq, tk = bucket('r', tonumber(ARGV[3])), bucket('t', tonumber(ARGV[4]))\n"
    "if tk then\n"
    "  local reserved, used = tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "  if used < reserved then\n"
    "    local give = reserved - used\n"
    "    if give > fdiv(tk.cap - tk.level, U) then tk.level = tk.cap else tk.level = tk.level + give * U end\n"
    "  elseif used > reserved then\n"
    "    local take = used - reserved\n"
    "    if take > fdiv(tk.level, U) then tk.level = 0 else tk.level = tk.level - take * U end\n"
    "  end\n"
    "  store(tk)\n"
    "end\n"
    "expire(rq, tk)\n"
    "return 0\n";

/* The heartbeat and the fair-share exchange. ARGV: prefix, replica,
 * lease_ms, T (tenants), M (models), T tenant names, T in-flight counts,
 * then per model its name, T service figures and T fair-queue keys (empty
 * for a tenant not queued here). Returns per model, model-major, T sums of
 * the other replicas' figures then T least keys of the tenants queued on
 * another replica (-1: queued on none).
 *
 * The sums are kept, not recomputed: "P:svctot:M" holds every replica's
 * figures added up, and each heartbeat adds what changed since the figures
 * this replica stored last time ("P:svc:M:R"), so a heartbeat costs O(M x
 * T) whatever the fleet's size. Sending whole figures, not deltas, makes a
 * heartbeat that timed out but ran late harmless. The sums never fall when
 * a replica leaves: its figures stay in the total, and its own hash a day,
 * so that one that was only cut off picks up where it was.
 *
 * The keys live a lease ("P:svcq:M:R", only the tenants queued), so a
 * replica that stops takes its queue with it; reading the others' queues
 * costs what is queued. */
static const char LUA_SYNC[] =
    /* unpack() puts its results on Lua's C stack (some 8000 slots): the
     * tenants go 256 at a time. */
    "local CHUNK, DAY = 256, 86400000\n"
    "local P, me, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])\n"
    "local T, M = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
    "redis.call('SET', P .. ':alive:' .. me, '1', 'PX', lease)\n"
    "local names = {}\n"
    "for i = 1, T do\n"
    "  names[i] = ARGV[5 + i]\n"
    "  local k, n = P .. ':inflight:' .. names[i], ARGV[5 + T + i]\n"
    "  if n == '0' then redis.call('HDEL', k, me)\n"
    "  else redis.call('HSET', k, me, n) redis.call('PEXPIRE', k, 2 * lease) end\n"
    "end\n"
    /* Numbers read back: nil when missing, false when not an integer
     * (someone else's value: the script stops before writing). */
    "local function int(v)\n"
    "  if not v then return nil end\n"
    "  local x = tonumber(v)\n"
    "  if not x or x ~= math.floor(x) or x <= -9e18 or x >= 9e18 then return false end\n"
    "  return x\n"
    "end\n"
    "local function hmget(key)\n"
    "  local out = {}\n"
    "  for i = 1, T, CHUNK do\n"
    "    local v = redis.call('HMGET', key, unpack(names, i, math.min(T, i + CHUNK - 1)))\n"
    "    for k = 1, #v do out[i + k - 1] = v[k] or false end\n"
    "  end\n"
    "  return out\n"
    "end\n"
    /* A replica's queue holds only the tenants queued there: read whole. */
    "local at = {}\n"
    "for i = 1, T do at[names[i]] = i end\n"
    "local function lows(least, key)\n"
    "  local h = redis.call('HGETALL', key)\n"
    "  for k = 1, #h, 2 do\n"
    "    local j, x = at[h[k]], tonumber(h[k + 1])\n"
    "    if j and x and x >= 0 and (least[j] < 0 or x < least[j]) then least[j] = x end\n"
    "  end\n"
    "end\n"
    "local out, a = {}, 6 + 2 * T\n"
    "for m = 1, M do\n"
    "  local mine, tot = P .. ':svc:' .. ARGV[a] .. ':' .. me, P .. ':svctot:' .. ARGV[a]\n"
    "  local reps, qk = P .. ':svcreps:' .. ARGV[a], P .. ':svcq:' .. ARGV[a] .. ':'\n"
    /* Everything is read and checked before the first write: Redis keeps
     * a failed script's earlier writes, and a delta applied without the
     * figure it came from would be applied again. */
    "  local old, sum, add, fig = hmget(mine), hmget(tot), {}, {}\n"
    "  for i = 1, T do\n"
    "    local o, t, n = int(old[i]) or 0, int(sum[i]), tonumber(ARGV[a + i])\n"
    "    if t == false then error('ERR ' .. tot .. ' holds a field that is not an integer') end\n"
    "    out[#out + 1] = (t or 0) - o\n"
    "    if n ~= o then add[#add + 1] = names[i] add[#add + 1] = string.format('%.0f', n - o) end\n"
    "    fig[2 * i - 1] = names[i] fig[2 * i] = ARGV[a + i]\n"
    "  end\n"
    "  for i = 1, #add, 2 do redis.call('HINCRBY', tot, add[i], add[i + 1]) end\n"
    "  for i = 1, T, CHUNK do\n"
    "    redis.call('HSET', mine, unpack(fig, 2 * i - 1, 2 * math.min(T, i + CHUNK - 1)))\n"
    "  end\n"
    "  local q = {}\n"
    "  for i = 1, T do\n"
    "    if ARGV[a + T + i] ~= '' then q[#q + 1] = names[i] q[#q + 1] = ARGV[a + T + i] end\n"
    "  end\n"
    "  redis.call('DEL', qk .. me)\n"
    "  for i = 1, #q, 2 * CHUNK do redis.call('HSET', qk .. me, unpack(q, i, math.min(#q, i + 2 * CHUNK - 1))) end\n"
    "  if #q > 0 then redis.call('PEXPIRE', qk .. me, lease) end\n"
    "  redis.call('SADD', reps, me)\n"
    "  for _, k in ipairs({mine, tot, reps}) do redis.call('PEXPIRE', k, DAY) end\n"
    "  local least = {}\n"
    "  for i = 1, T do least[i] = -1 end\n"
    "  for _, r in ipairs(redis.call('SMEMBERS', reps)) do\n"
    "    if r ~= me and redis.call('EXISTS', P .. ':alive:' .. r) == 1 then lows(least, qk .. r)\n"
    "    elseif r ~= me then\n"
    "      redis.call('DEL', qk .. r)\n"
    "      redis.call('SREM', reps, r)\n"
    "    end\n"
    "  end\n"
    "  for i = 1, T do out[#out + 1] = least[i] end\n"
    "  a = a + 1 + 2 * T\n"
    "end\n"
    "return out\n";

enum { S_ADMIT, S_FINISH, S_SYNC, N_SCRIPTS };
static const char *const SCRIPTS[N_SCRIPTS] = {LUA_ADMIT, LUA_FINISH, LUA_SYNC};
static const char *const SCRIPT_NAMES[N_SCRIPTS] = {"admit", "finish", "sync"};

/* ---- state ------------------------------------------------------------------ */

struct rfleet {
    const cfg *c;
    const cfg_redis *r;
    char replica[REPLICA_MAX];  /* this process's id in the fleet */
    char alive_prefix[CFG_REDIS_PREFIX_MAX + 8]; /* "P:alive:" */
    char **lim_keys;            /* (n_tenants) "P:lim:T" */
    char **inflight_keys;       /* (n_tenants) "P:inflight:T" */
    pthread_mutex_t mu;         /* the connection and what follows, to n_pending */
    redisContext *rc;           /* NULL while down */
    char sha[N_SCRIPTS][41];    /* of the loaded scripts */
    int down;                   /* 1 from a failure to the next success */
    int64_t retry_at_us;        /* while down: no attempt before this */
    int64_t backoff_us;
    uint32_t *inflight;         /* (n_tenants) admitted here by Redis, not finished */
    char *fin_key;              /* "P:fin:R": the last finish Redis applied */
    uint64_t fin_seq;           /* finishes sent so far */
    struct pending *pending;    /* (PENDING_CAP) finishes Redis has not confirmed, oldest first */
    size_t n_pending;
    atomic_ullong dropped;      /* settlements given up: the queue was full */
    atomic_ullong errors;       /* failed or late calls */
    atomic_ullong fallbacks;    /* requests decided without Redis */
    atomic_ullong refusals[N_SCRIPTS]; /* error replies to each script (the connection kept) */
    int64_t refusal_log_at;     /* no line about an error reply before this, under mu */
    uint64_t refusals_quiet;    /* ... error replies since the last line */
    atomic_int up;              /* for the gauge: 0 while down */
    /* the sync thread */
    pthread_t th;
    int started;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    int stop;
    wk_worker **workers;        /* (n_workers) owned array, borrowed workers */
    int n_workers;
};

static struct timeval tv_of_ms(uint32_t ms) {
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
}

/* One log line per transition: up -> down here, down -> up in mark_up. */
static void mark_down(rfleet *f, const char *why) {
    atomic_fetch_add(&f->errors, 1);
    if (f->rc) redisFree(f->rc);
    f->rc = NULL;
    if (!f->down)
        fprintf(stderr, "tessera: redis %s:%u: %s; limits %s until it answers again\n", f->r->host,
                (unsigned)f->r->port, why,
                f->r->fail_closed ? "refuse requests with 503 (redis_on_error: closed)"
                                  : "are counted by each replica alone (redis_on_error: open)");
    f->down = 1;
    atomic_store(&f->up, 0);
    f->backoff_us = f->backoff_us ? f->backoff_us * 2 : BACKOFF_MIN_US;
    if (f->backoff_us > BACKOFF_MAX_US) f->backoff_us = BACKOFF_MAX_US;
    f->retry_at_us = clk_mono_us() + f->backoff_us;
}

static void mark_up(rfleet *f) {
    if (f->down)
        fprintf(stderr, "tessera: redis %s:%u answers again; limits are fleet-wide again\n", f->r->host,
                (unsigned)f->r->port);
    f->down = 0;
    f->backoff_us = 0;
    atomic_store(&f->up, 1);
}

/* A reply that is an error, or none, on c: why, for the log, in buf; NULL
 * when fine. hiredis reports a timeout as EAGAIN's text: say what it means. */
static const char *reply_fault(const redisContext *c, uint32_t timeout_ms, const redisReply *rep, char *buf,
                               size_t cap) {
    if (rep && rep->type != REDIS_REPLY_ERROR) return NULL;
    if (rep) snprintf(buf, cap, "error reply: %s", rep->str);
    else if (c->err == REDIS_ERR_IO && !strcmp(c->errstr, strerror(EAGAIN)))
        snprintf(buf, cap, "no answer within redis_timeout_ms (%u ms)", (unsigned)timeout_ms);
    else snprintf(buf, cap, "%s", c->errstr[0] ? c->errstr : "no reply");
    return buf;
}

/* One command on c; NULL with why on any fault. */
static redisReply *command(const rfleet *f, redisContext *c, int argc, const char **argv, char *why, size_t cap) {
    redisReply *rep = redisCommandArgv(c, argc, argv, NULL);
    if (!reply_fault(c, f->r->timeout_ms, rep, why, cap)) return rep;
    if (rep) freeReplyObject(rep);
    return NULL;
}

static int simple(const rfleet *f, redisContext *c, int argc, const char **argv, char *why, size_t cap) {
    redisReply *rep = command(f, c, argc, argv, why, cap);
    if (rep) freeReplyObject(rep);
    return rep ? 0 : -1;
}

/* Load the scripts on c, their SHA-1s into sha. */
static int load_scripts(const rfleet *f, redisContext *c, char sha[N_SCRIPTS][41], char *why, size_t cap) {
    for (int i = 0; i < N_SCRIPTS; i++) {
        redisReply *rep = command(f, c, 3, (const char *[]){"SCRIPT", "LOAD", SCRIPTS[i]}, why, cap);
        if (!rep) return -1;
        int ok = rep->type == REDIS_REPLY_STRING && rep->len == 40;
        if (ok) memcpy(sha[i], rep->str, 41);
        freeReplyObject(rep);
        if (!ok) {
            snprintf(why, cap, "SCRIPT LOAD gave no SHA-1");
            return -1;
        }
    }
    return 0;
}

/* A new connection, authenticated, on the database, with the scripts
 * loaded; or NULL with why. Takes no lock: connecting may take a few
 * timeouts, and no request should wait for that. */
static redisContext *open_conn(const rfleet *f, char sha[N_SCRIPTS][41], char *why, size_t cap) {
    const cfg_redis *r = f->r;
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv_of_ms(r->timeout_ms));
    if (!c || c->err) {
        snprintf(why, cap, "cannot connect: %s", c ? c->errstr : "out of memory");
        goto err;
    }
    if (redisSetTimeout(c, tv_of_ms(r->timeout_ms)) != REDIS_OK) {
        snprintf(why, cap, "cannot set the command timeout");
        goto err;
    }
    char db[NUM_MAX];
    snprintf(db, sizeof db, "%u", (unsigned)r->db);
    if (r->password[0] && r->user[0] && simple(f, c, 3, (const char *[]){"AUTH", r->user, r->password}, why, cap))
        goto err;
    if (r->password[0] && !r->user[0] && simple(f, c, 2, (const char *[]){"AUTH", r->password}, why, cap)) goto err;
    if (r->db && simple(f, c, 2, (const char *[]){"SELECT", db}, why, cap)) goto err;
    if (load_scripts(f, c, sha, why, cap)) goto err;
    return c;
err:
    if (c) redisFree(c);
    return NULL;
}

/* Only the sync thread (and rfleet_new, before it starts) connects, when
 * the backoff allows; the connection is installed under f->mu. Callers on
 * HTTP threads never wait for a connect: while there is no connection they
 * go straight to the failure mode. The first call that succeeds marks
 * Redis up. */
static void reconnect_if_due(rfleet *f) {
    pthread_mutex_lock(&f->mu);
    int due = !f->rc && clk_mono_us() >= f->retry_at_us;
    pthread_mutex_unlock(&f->mu);
    if (!due) return;
    char why[256], sha[N_SCRIPTS][41];
    redisContext *c = open_conn(f, sha, why, sizeof why);
    pthread_mutex_lock(&f->mu);
    if (c) {
        f->rc = c;
        memcpy(f->sha, sha, sizeof sha);
    } else {
        mark_down(f, why);
    }
    pthread_mutex_unlock(&f->mu);
}

/* An error reply that says this server takes no call now, whoever sends
 * it (a replica after a failover, loading its data, a script running
 * long, the authentication gone): a new connection may reach one that
 * does. Any other (WRONGTYPE, OOM, a script's own error) is about this
 * one call, and the connection is fine. */
static int server_unavailable(const char *msg) {
    static const char *const codes[] = {"READONLY", "LOADING", "MASTERDOWN", "BUSY", "NOAUTH"};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        size_t n = strlen(codes[i]);
        if (!strncmp(msg, codes[i], n) && (msg[n] == ' ' || msg[n] == 0)) return 1;
    }
    return 0;
}

/* Redis refused one call of script: counted, and logged at most once per
 * REFUSAL_LOG_US (a bad key refuses every call that touches it). Holds
 * f->mu. */
static void refused(rfleet *f, int script, const char *msg) {
    atomic_fetch_add(&f->errors, 1);
    atomic_fetch_add(&f->refusals[script], 1);
    int64_t now = clk_mono_us();
    if (now < f->refusal_log_at) {
        f->refusals_quiet++;
        return;
    }
    fprintf(stderr, "tessera: redis %s:%u: error reply to the %s script: %.200s (%llu more since the last such line)\n",
            f->r->host, (unsigned)f->r->port, SCRIPT_NAMES[script], msg, (unsigned long long)f->refusals_quiet);
    f->refusal_log_at = now + REFUSAL_LOG_US;
    f->refusals_quiet = 0;
}

/* EVALSHA script with nkeys keys. argv holds argc words: EVAL_HEAD slots
 * that this fills (the command, the SHA-1, nkeys), then the keys, then the
 * arguments. A NOSCRIPT (someone flushed the scripts) reloads them once.
 * NULL without a connection, on a fault (which drops the connection) or
 * on an error reply about the call (*refusal set; the connection stays).
 * Holds f->mu. */
#define EVAL_HEAD 3
static redisReply *evalsha(rfleet *f, int script, int nkeys, int argc, const char **argv, int *refusal) {
    char nk[8], why[256];
    snprintf(nk, sizeof nk, "%d", nkeys);
    *refusal = 0;
    for (int attempt = 0; f->rc && attempt < 2; attempt++) {
        argv[0] = "EVALSHA";
        argv[1] = f->sha[script];
        argv[2] = nk;
        redisReply *rep = redisCommandArgv(f->rc, argc, argv, NULL);
        if (rep && rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "NOSCRIPT", 8) && attempt == 0) {
            freeReplyObject(rep);
            if (load_scripts(f, f->rc, f->sha, why, sizeof why) == 0) continue;
            mark_down(f, why);
            return NULL;
        }
        if (!reply_fault(f->rc, f->r->timeout_ms, rep, why, sizeof why)) {
            mark_up(f);
            return rep;
        }
        if (rep && !server_unavailable(rep->str)) {
            mark_up(f);
            refused(f, script, rep->str);
            freeReplyObject(rep);
            *refusal = 1;
            return NULL;
        }
        if (rep) freeReplyObject(rep);
        mark_down(f, why);
        return NULL;
    }
    return NULL;
}

/* ---- limits ----------------------------------------------------------------- */

static void u64s(char *buf, uint64_t v) { snprintf(buf, NUM_MAX, "%llu", (unsigned long long)v); }

rfleet_verdict rfleet_admit(rfleet *f, int tenant, uint64_t reserve, lim_reason *why, int64_t *retry_us) {
    const cfg_tenant *t = &f->c->tenants[tenant];
    /* Nothing to count fleet-wide: no round trip, and no 503 when failing
     * closed. */
    if (!t->requests_per_minute && !t->tokens_per_minute && !t->max_concurrent) return RFLEET_LOCAL;
    char rpm[NUM_MAX], tpm[NUM_MAX], conc[NUM_MAX], need[NUM_MAX], lease[NUM_MAX];
    u64s(rpm, t->requests_per_minute);
    u64s(tpm, t->tokens_per_minute);
    u64s(conc, t->max_concurrent);
    u64s(need, reserve);
    u64s(lease, f->r->lease_ms);
    const char *argv[] = {NULL, NULL, NULL, f->lim_keys[tenant], f->inflight_keys[tenant], f->alive_prefix,
                          f->replica, rpm, tpm, conc, need, lease};
    int refusal;
    pthread_mutex_lock(&f->mu);
    redisReply *rep = evalsha(f, S_ADMIT, 2, 12, argv, &refusal);
    int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
             rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[1]->type == REDIS_REPLY_INTEGER &&
             rep->element[0]->integer >= LIM_OK && rep->element[0]->integer <= LIM_TOO_LARGE;
    if (ok) {
        *why = (lim_reason)rep->element[0]->integer;
        *retry_us = rep->element[1]->integer < 0 ? LIM_RETRY_NONE : rep->element[1]->integer;
        if (*why == LIM_OK) f->inflight[tenant]++;
    } else if (rep) {
        mark_down(f, "unexpected reply to the admission script");
    }
    pthread_mutex_unlock(&f->mu);
    if (rep) freeReplyObject(rep);
    if (ok) return RFLEET_DECIDED;
    atomic_fetch_add(&f->fallbacks, 1);
    return f->r->fail_closed ? RFLEET_CLOSED : RFLEET_LOCAL;
}

/* Run the finish script for tenant: 0 when Redis took it, 1 when it
 * refused it (an error reply: sending it again would not help), -1 when
 * it did not answer. Holds f->mu. */
static int finish_call(rfleet *f, const struct pending *p, int ends_request) {
    const cfg_tenant *t = &f->c->tenants[p->tenant];
    char rpm[NUM_MAX], tpm[NUM_MAX], res[NUM_MAX], use[NUM_MAX], seq[NUM_MAX];
    u64s(rpm, t->requests_per_minute);
    u64s(tpm, t->tokens_per_minute);
    u64s(res, p->reserved);
    u64s(use, p->used);
    u64s(seq, p->seq);
    const char *argv[] = {NULL, NULL, NULL, f->lim_keys[p->tenant], f->inflight_keys[p->tenant], f->fin_key,
                          f->alive_prefix, f->replica, rpm, tpm, res, use, ends_request ? "1" : "0", seq};
    int refusal;
    redisReply *rep = evalsha(f, S_FINISH, 3, 14, argv, &refusal);
    if (rep) freeReplyObject(rep);
    if (refusal && t->tokens_per_minute) atomic_fetch_add(&f->dropped, 1);
    return rep ? 0 : refusal ? 1 : -1;
}

/* Deliver the settlements that finishes left behind, oldest first (the
 * sequence numbers must reach Redis in order). Holds f->mu; stops when
 * Redis does not answer, and drops one it refuses (finish_call counts it)
 * so that it cannot hold up the others. Returns the number still waiting. */
static size_t settle_pending(rfleet *f) {
    size_t done = 0;
    while (done < f->n_pending && finish_call(f, &f->pending[done], 0) >= 0) done++;
    memmove(f->pending, f->pending + done, (f->n_pending - done) * sizeof *f->pending);
    f->n_pending -= done;
    return f->n_pending;
}

void rfleet_finish(rfleet *f, int tenant, uint64_t reserved, uint64_t used) {
    struct pending p = {tenant, reserved, used, 0};
    pthread_mutex_lock(&f->mu);
    p.seq = ++f->fin_seq;
    /* The local count is the truth the heartbeat writes back, so it drops
     * whether or not Redis hears of this finish. */
    if (f->inflight[tenant]) f->inflight[tenant]--;
    int later = settle_pending(f) > 0 || finish_call(f, &p, 1) < 0;
    /* Keep the refund (or the excess) for later rather than lose it. Only
     * a tokens/min bucket has anything to settle. */
    if (later && f->c->tenants[tenant].tokens_per_minute) {
        if (f->n_pending < PENDING_CAP) f->pending[f->n_pending++] = p;
        else atomic_fetch_add(&f->dropped, 1);
    }
    pthread_mutex_unlock(&f->mu);
}

/* ---- heartbeat and fair share ---------------------------------------------- */

/* Largest figure sent: Lua sums the replicas' figures in doubles, exact
 * to 2^53; a tenant past it (some 8.8e12 weighted tokens at weight 1)
 * stays there, which only stops its key from growing further. */
#define SVC_MAX 9007199254740992.0

/* A figure for the sync script, clamped to SVC_MAX (fq units). */
static void units_s(char *buf, uint64_t v) { u64s(buf, v < (uint64_t)SVC_MAX ? v : (uint64_t)SVC_MAX); }

/* The sync thread's buffers, sized once for T tenants and M models. */
struct sync_buf {
    sched_tenant_stats *snap;   /* (T) */
    uint64_t *remote, *key;     /* (T) */
    uint8_t *queued;            /* (T) */
    char *nums;                 /* ((2M + 1) T) NUM_MAX each: figures, keys, counts */
    const char **argv;
};

/* The sync script's arguments after EVAL_HEAD, into argv: the tenants, and
 * per model its name, this replica's service of each tenant and the keys
 * of those queued here (written into nums, NUM_MAX bytes each). The
 * in-flight counts are left for the caller, under f->mu. Returns argc;
 * *counts_at is where the counts go. */
static int sync_args(rfleet *f, struct sync_buf *sb, char heads[3][NUM_MAX], int *counts_at) {
    int T = (int)f->c->n_tenants, a = EVAL_HEAD, M = 0;
    const char **argv = sb->argv;
    char *nums = sb->nums;
    for (int m = 0; m < f->n_workers; m++) M += f->workers[m] != NULL;
    u64s(heads[0], f->r->lease_ms);
    u64s(heads[1], (uint64_t)T);
    u64s(heads[2], (uint64_t)M);
    argv[a++] = f->r->prefix;
    argv[a++] = f->replica;
    for (int i = 0; i < 3; i++) argv[a++] = heads[i];
    for (int i = 0; i < T; i++) argv[a++] = f->c->tenants[i].sched.name;
    *counts_at = a;
    a += T;
    for (int m = 0; m < f->n_workers; m++) {
        if (!f->workers[m]) continue;
        wk_snapshot(f->workers[m], sb->snap, NULL);
        argv[a++] = f->c->models[m].name;
        for (int i = 0; i < T; i++, nums += NUM_MAX) {
            double units = sb->snap[i].service * FQ_SCALE / f->c->tenants[i].sched.weight;
            u64s(nums, !(units > 0) ? 0 : units < SVC_MAX ? (uint64_t)llround(units) : (uint64_t)SVC_MAX);
            argv[a++] = nums;
        }
        for (int i = 0; i < T; i++, nums += NUM_MAX) {
            if (sb->snap[i].queued > 0) units_s(nums, sb->snap[i].key);
            else nums[0] = 0;
            argv[a++] = nums;
        }
    }
    return a;
}

/* Hand each model's worker the other replicas' figures and queues (the
 * reply, model major). */
static void sync_apply(rfleet *f, const redisReply *rep, struct sync_buf *sb) {
    size_t T = f->c->n_tenants, k = 0;
    for (int m = 0; m < f->n_workers; m++) {
        if (!f->workers[m]) continue;
        for (size_t i = 0; i < T; i++, k++) {
            const redisReply *e = rep->element[k];
            sb->remote[i] = e->type == REDIS_REPLY_INTEGER && e->integer > 0 ? (uint64_t)e->integer : 0;
        }
        for (size_t i = 0; i < T; i++, k++) {
            const redisReply *e = rep->element[k];
            sb->queued[i] = e->type == REDIS_REPLY_INTEGER && e->integer >= 0;
            sb->key[i] = sb->queued[i] ? (uint64_t)e->integer : 0;
        }
        wk_fleet_remote(f->workers[m], sb->remote, sb->queued, sb->key);
    }
}

/* One exchange: the heartbeat with this replica's in-flight counts, its
 * service and queue out and the others' in; then the settlements left
 * behind. */
static void sync_once(rfleet *f, struct sync_buf *sb) {
    size_t T = f->c->n_tenants, M = 0;
    char heads[3][NUM_MAX];
    int counts_at;
    int argc = sync_args(f, sb, heads, &counts_at);
    for (int m = 0; m < f->n_workers; m++) M += f->workers[m] != NULL;
    char *counts = sb->nums + 2 * M * T * NUM_MAX;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < T; i++) {
        u64s(counts + i * NUM_MAX, f->inflight[i]);
        sb->argv[(size_t)counts_at + i] = counts + i * NUM_MAX;
    }
    int refusal;
    redisReply *rep = evalsha(f, S_SYNC, 0, argc, sb->argv, &refusal);
    int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 * M * T;
    if (rep && !ok) mark_down(f, "unexpected reply to the sync script");
    if (ok) settle_pending(f);
    pthread_mutex_unlock(&f->mu);
    if (ok) sync_apply(f, rep, sb);
    if (rep) freeReplyObject(rep);
}

static void sync_buf_free(struct sync_buf *sb) {
    free(sb->snap);
    free(sb->remote);
    free(sb->key);
    free(sb->queued);
    free(sb->nums);
    free(sb->argv);
}

static int sync_buf_init(struct sync_buf *sb, size_t T, size_t M) {
    size_t t = T ? T : 1;
    sb->snap = calloc(t, sizeof *sb->snap);
    sb->remote = calloc(t, sizeof *sb->remote);
    sb->key = calloc(t, sizeof *sb->key);
    sb->queued = calloc(t, sizeof *sb->queued);
    sb->nums = calloc((2 * M + 1) * t, NUM_MAX);
    sb->argv = calloc(EVAL_HEAD + 5 + 2 * T + M * (1 + 2 * T), sizeof *sb->argv);
    return sb->snap && sb->remote && sb->key && sb->queued && sb->nums && sb->argv ? 0 : -1;
}

static void *sync_loop(void *arg) {
    rfleet *f = arg;
    struct sync_buf sb;
    int ok = sync_buf_init(&sb, f->c->n_tenants, (size_t)f->n_workers) == 0;
    pthread_mutex_lock(&f->stop_mu);
    while (!f->stop) {
        pthread_mutex_unlock(&f->stop_mu);
        reconnect_if_due(f);
        if (ok) sync_once(f, &sb);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);    /* stop_cv's clock: a clock step cannot stall the beat */
        int64_t ns = ts.tv_nsec + (int64_t)f->r->sync_ms * 1000000;
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_mutex_lock(&f->stop_mu);
        if (!f->stop) pthread_cond_timedwait(&f->stop_cv, &f->stop_mu, &ts);
    }
    pthread_mutex_unlock(&f->stop_mu);
    sync_buf_free(&sb);
    return NULL;
}

int rfleet_start(rfleet *f, wk_worker *const *workers, int n_workers) {
    if (!f || f->started) return TS_ERR_INVAL;
    free(f->workers);
    f->workers = calloc(n_workers > 0 ? (size_t)n_workers : 1, sizeof *f->workers);
    if (!f->workers) return TS_ERR_NOMEM;
    memcpy(f->workers, workers, (size_t)(n_workers > 0 ? n_workers : 0) * sizeof *workers);
    f->n_workers = n_workers;
    f->stop = 0;
    if (pthread_create(&f->th, NULL, sync_loop, f)) return TS_ERR_NOMEM;
    f->started = 1;
    return 0;
}

void rfleet_stop(rfleet *f) {
    if (!f || !f->started) return;
    pthread_mutex_lock(&f->stop_mu);
    f->stop = 1;
    pthread_cond_signal(&f->stop_cv);
    pthread_mutex_unlock(&f->stop_mu);
    pthread_join(f->th, NULL);
    f->started = 0;
}

/* ---- life ------------------------------------------------------------------- */

/* host-pid-random: readable in redis-cli, unique across restarts. Only
 * [A-Za-z0-9.-] of the host name, so that ':' stays a key separator. */
static void make_replica_id(char *out, size_t cap) {
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '-'))
            *p = '-';
    unsigned char rnd[6] = {0};
    if (RAND_bytes(rnd, sizeof rnd) != 1) {
        uint64_t t = (uint64_t)clk_mono_us() ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, sizeof rnd);
    }
    snprintf(out, cap, "%s-%ld-%02x%02x%02x%02x%02x%02x", host, (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5]);
}

static char *key_of(const char *prefix, const char *kind, const char *name) {
    size_t n = strlen(prefix) + strlen(kind) + strlen(name) + 3;
    char *k = malloc(n);
    if (k) snprintf(k, n, "%s:%s:%s", prefix, kind, name);
    return k;
}

int rfleet_new(const cfg *c, rfleet **out, char *err, size_t errlen) {
    *out = NULL;
    if (!c || c->limits.backend != CFG_BACKEND_REDIS) return err_set(err, errlen, TS_ERR_INVAL, "not a redis backend");
    rfleet *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    f->c = c;
    f->r = &c->limits.redis;
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    make_replica_id(f->replica, sizeof f->replica);
    snprintf(f->alive_prefix, sizeof f->alive_prefix, "%s:alive:", f->r->prefix);
    size_t T = c->n_tenants;
    f->lim_keys = calloc(T, sizeof(char *));
    f->inflight_keys = calloc(T, sizeof(char *));
    f->inflight = calloc(T, sizeof(uint32_t));
    f->pending = calloc(PENDING_CAP, sizeof *f->pending);
    f->fin_key = key_of(f->r->prefix, "fin", f->replica);
    int ok = f->lim_keys && f->inflight_keys && f->inflight && f->pending && f->fin_key;
    for (size_t i = 0; ok && i < T; i++) {
        f->lim_keys[i] = key_of(f->r->prefix, "lim", c->tenants[i].sched.name);
        f->inflight_keys[i] = key_of(f->r->prefix, "inflight", c->tenants[i].sched.name);
        ok = f->lim_keys[i] && f->inflight_keys[i];
    }
    if (!ok) {
        rfleet_free(f);
        return err_set(err, errlen, TS_ERR_NOMEM, "out of memory");
    }
    atomic_store(&f->up, 0);
    reconnect_if_due(f);
    pthread_mutex_lock(&f->mu);
    if (f->rc) mark_up(f);
    pthread_mutex_unlock(&f->mu);
    fprintf(stderr, "tessera: limits are fleet-wide in redis %s:%u/%u (prefix '%s', replica %s)%s\n", f->r->host,
            (unsigned)f->r->port, (unsigned)f->r->db, f->r->prefix, f->replica,
            atomic_load(&f->up) ? "" : ", not reachable yet");
    *out = f;
    return 0;
}

void rfleet_metrics(rfleet *f, strbuf *b) {
    strbuf_puts(b, "# HELP tessera_redis_up 1 while the fleet's Redis answers (limits.backend: redis)\n"
                   "# TYPE tessera_redis_up gauge\n");
    strbuf_printf(b, "tessera_redis_up %d\n", atomic_load(&f->up));
    strbuf_puts(b, "# HELP tessera_redis_errors_total Redis calls that failed or timed out\n"
                   "# TYPE tessera_redis_errors_total counter\n");
    strbuf_printf(b, "tessera_redis_errors_total %llu\n", (unsigned long long)atomic_load(&f->errors));
    strbuf_puts(b, "# HELP tessera_redis_fallback_total Requests whose limits were decided without Redis "
                   "(redis_on_error)\n"
                   "# TYPE tessera_redis_fallback_total counter\n");
    strbuf_printf(b, "tessera_redis_fallback_total{mode=\"%s\"} %llu\n", f->r->fail_closed ? "closed" : "open",
                  (unsigned long long)atomic_load(&f->fallbacks));
    strbuf_puts(b, "# HELP tessera_redis_error_replies_total Calls Redis answered with an error "
                   "(WRONGTYPE, OOM, a script error); the connection is kept and the call not retried\n"
                   "# TYPE tessera_redis_error_replies_total counter\n");
    for (int i = 0; i < N_SCRIPTS; i++)
        strbuf_printf(b, "tessera_redis_error_replies_total{script=\"%s\"} %llu\n", SCRIPT_NAMES[i],
                      (unsigned long long)atomic_load(&f->refusals[i]));
    strbuf_puts(b, "# HELP tessera_redis_settle_dropped_total Refunds given up: the queue of PENDING_CAP was "
                   "full while Redis was away, or Redis refused the settlement (the tenant stays charged)\n"
                   "# TYPE tessera_redis_settle_dropped_total counter\n");
    strbuf_printf(b, "tessera_redis_settle_dropped_total %llu\n", (unsigned long long)atomic_load(&f->dropped));
}

void rfleet_free(rfleet *f) {
    if (!f) return;
    rfleet_stop(f);
    if (f->rc) redisFree(f->rc);
    for (size_t i = 0; i < f->c->n_tenants; i++) {
        if (f->lim_keys) free(f->lim_keys[i]);
        if (f->inflight_keys) free(f->inflight_keys[i]);
    }
    free(f->lim_keys);
    free(f->inflight_keys);
    free(f->inflight);
    free(f->pending);
    free(f->fin_key);
    free(f->workers);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->stop_mu);
    pthread_cond_destroy(&f->stop_cv);
    free(f);
}
