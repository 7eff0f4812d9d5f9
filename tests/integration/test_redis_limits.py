"""test_redis_limits.py - fleet-wide tenant limits and fair share through one
Redis (limits.backend: redis, issue 16), against real `tessera serve`
replicas on 127.0.0.1 sharing a private redis-server:

- requests/min: a tenant allowed 6 a minute sends 12 spread over three
  replicas; exactly 6 get 200 (each replica alone would take 6), the rest
  429 with Retry-After;
- tokens/min with refund: reservations of prompt + max_tokens come back
  when a request stops early, on whichever replica it ran, and a reservation
  that the fleet's bucket cannot hold is refused on another replica;
- concurrency: two requests held on two replicas fill a cap of 2 for the
  third replica; one ending frees the seat there;
- a killed replica's in-flight request stops counting one lease later, and
  its service stays in the fleet's fair-share sums;
- fair share: a tenant sending to two replicas and one sending to one of
  them share the fleet's service about evenly (each replica alone would give
  the first three quarters);
- Redis stopped (SIGSTOP: slow) with a request in flight: answers within the
  timeouts, and the refund its finish could not deliver is settled once, to
  the token, with the in-flight count repaired;
- Redis paused past a lease with its data intact: every replica rejoins,
  the fleet's sums are unchanged and Redis refuses no exchange;
- a key of the wrong type: the calls that touch it fall back and are
  counted, the refused settlement is dropped, the connection stays;
- a bucket stored before Redis's clock stepped back an hour: the tenant
  waits for its level, not for the step;
- Redis killed mid-run: the replicas in fail-open mode answer from local
  limits at once (no hang), the fail-closed one answers 503 with
  Retry-After, /metrics shows tessera_redis_up 0 and the error count, one
  log line each way, and the replicas recover when Redis is back;
- Redis killed and restarted while clients keep requests running on every
  replica: every request gets an answer (200, or 429/503 naming why), none
  hangs or is dropped, and no in-flight count outlives the outage;
- a replica whose Redis is not there yet starts and serves in its failure
  mode;
- the exchange with 600 tenants (the script takes 256 at a time);
- a bad redis_url is a clear start-up error.

Run by tests/redis_limits.sh (ctest) with TS_TESSERA and TS_TMPDIR set.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Model, RawStream, Server, Tenant, free_port, get_metrics, make_model,  # noqa: E402
                     metric_value, request, wait_until)

ENV = Env("redis_limits_test")
PREFIX = "tessera-it"
LEASE_MS, SYNC_MS = 1000, 100
COMP = "/v1/completions"
NO_EOS = {"2": -100}        # mkmodel's EOS id: generate every max_token
EOS_NOW = {"2": 100}        # stop at the first token
REDIS = None
R = []                      # the three replicas
TENANTS = None


# ---- a private redis-server ------------------------------------------------------


def resp_call(port, *args, timeout=2):
    """One command over RESP; the reply (bytes, int, list or None)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        out = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in
                                               (x.encode() if isinstance(x, str) else x for x in args))
        s.sendall(out)
        with s.makefile("rb") as f:
            return _read_reply(f)


def _read_reply(f):
    """One RESP reply from the file f."""
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise RuntimeError("bad RESP line %r" % line)


class Redis:
    def __init__(self):
        self.bin = shutil.which("redis-server") or ("/usr/bin/redis-server"
                                                    if os.access("/usr/bin/redis-server", os.X_OK) else None)
        if not self.bin:
            raise AssertionError("redis-server is not installed: this test needs it "
                                 "(Debian package redis-server; scripts/deps.sh test installs it)")
        self.port = free_port()
        self.dir = os.path.join(ENV.work, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None

    def start(self):
        log = open(os.path.join(self.dir, "redis.log"), "a")
        self.proc = subprocess.Popen([self.bin, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir, "--daemonize", "no"],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

        def pong():
            try:
                return resp_call(self.port, "PING", timeout=0.5) == b"PONG"
            except OSError:
                return False
        wait_until(pong, 10, what="redis-server to answer PING")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


# ---- set-up -----------------------------------------------------------------------


def redis_limits(**more):
    lim = {"backend": "redis", "redis_url": "redis://127.0.0.1:%d" % REDIS.port, "redis_prefix": PREFIX,
           "redis_lease_ms": LEASE_MS, "redis_sync_ms": SYNC_MS, "redis_timeout_ms": 200}
    lim.update(more)
    return lim


def replica(name, closed=False):
    tiny, slow = MODELS
    return Server(ENV, name, [Model("tiny", tiny, threads=1, max_seqs=1, kv_cache_bytes="8MiB"),
                              Model("slow", slow, threads=1, kv_cache_bytes="16MiB")],
                  TENANTS, limits=redis_limits(**({"redis_on_error": "closed"} if closed else {})))


def setUpModule():
    global REDIS, TENANTS, MODELS
    REDIS = Redis()
    REDIS.start()
    MODELS = (make_model(ENV), make_model(ENV, "slow.gguf", preset="15m"))
    TENANTS = [Tenant(ENV, "rpm", "gold", requests_per_minute=6),
               Tenant(ENV, "tpm", "gold", tokens_per_minute=600),
               Tenant(ENV, "conc", "gold", max_concurrent=2),
               Tenant(ENV, "hold", "gold", max_concurrent=1),
               Tenant(ENV, "fa", "silver"), Tenant(ENV, "fb", "silver"),
               Tenant(ENV, "many", "gold", requests_per_minute=100000), Tenant(ENV, "nolimit", "gold"),
               Tenant(ENV, "slowt", "gold", tokens_per_minute=2000)]
    for i in range(3):
        R.append(replica("r%d" % i, closed=(i == 2)).start())


def tearDownModule():
    bad = [(s.name, rc) for s, rc in ((s, s.stop()) for s in R) if rc != 0]
    if REDIS:
        REDIS.kill()
    if bad:
        raise AssertionError("replicas that did not stop cleanly (exit status): %r" % bad)


def comp(srv, tenant, timeout=20, **body):
    b = {"model": "tiny", "prompt": "hello", "max_tokens": 1, "temperature": 0}
    b.update(body)
    return request(srv.port, "POST", COMP, b, key=srv.key(tenant), timeout=timeout)


def hold(srv, tenant):
    """A long streaming request on the slow model, running (first event read)."""
    rs = RawStream(srv.port, COMP, {"model": "slow", "prompt": "a long story", "max_tokens": 900, "stream": True,
                                    "logit_bias": NO_EOS}, srv.key(tenant))
    ev = rs.next_event()
    if rs.status != 200 or ev is None:
        raise AssertionError("hold: status %r" % rs.status)
    return rs


def tenant_row(srv, tenant, model):
    r = request(srv.port, "GET", "/admin/tenants", key=srv.admin_key)
    return next(d for d in r.json()["data"] if d["tenant"] == tenant and d["model"] == model)


def wait_reconnected():
    for srv in R:
        wait_until(lambda: metric_value(get_metrics(srv.port, srv.admin_key), "tessera_redis_up") == 1, 15,
                   interval=0.2, what="%s to reconnect" % srv.name)


def code(r):
    return r.json()["error"]["code"] if r.status != 200 else None


class FleetLimits(unittest.TestCase):
    def test_1_requests_per_minute(self):
        got = [comp(R[i % 3], "rpm") for i in range(12)]
        ok = [r for r in got if r.status == 200]
        denied = [r for r in got if r.status == 429]
        self.assertEqual(len(ok), 6, [r.status for r in got])
        self.assertEqual(len(denied), 6, [r.status for r in got])
        for r in denied:
            self.assertEqual(code(r), "rate_requests")
            # 6/min refills one request in 10 s: the wait is at most that.
            self.assertTrue(1 <= int(r.headers["retry-after"]) <= 10, r.headers)
        # Every replica counted into the same bucket, under the prefix.
        keys = resp_call(REDIS.port, "KEYS", PREFIX + ":lim:*")
        self.assertIn((PREFIX + ":lim:rpm").encode(), keys)
        self.assertEqual(resp_call(REDIS.port, "KEYS", "tessera:*"), [])

    def test_2_tokens_per_minute_with_refund(self):
        # 600 tokens/min, refilling 10 a second. Each of these reserves
        # prompt + 590 and stops at once: only the refund of the one before
        # lets the next in, on another replica, within seconds. (The refund
        # lands when the server has finished the answer, a moment after the
        # client has read it; a denial changes nothing, so ask again.)
        for srv in (R[0], R[1], R[2]):
            r = wait_until(lambda: (lambda x: x if x.status == 200 else None)(
                comp(srv, "tpm", max_tokens=590, logit_bias=EOS_NOW)), 5, what="the refund")
            self.assertLessEqual(r.json()["usage"]["completion_tokens"], 1)
        # Now one that uses what it reserves: about 300 tokens gone.
        r = comp(R[0], "tpm", max_tokens=300, logit_bias=NO_EOS)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["usage"]["completion_tokens"], 300)
        # The fleet's bucket holds less than 400 now: refused on another
        # replica, whose own bucket would be full.
        r = comp(R[1], "tpm", max_tokens=400)
        self.assertEqual(r.status, 429, r)
        self.assertEqual(code(r), "rate_tokens")
        self.assertTrue(1 <= int(r.headers["retry-after"]) <= 60, r.headers)
        # What still fits is admitted anywhere.
        r = comp(R[2], "tpm", max_tokens=100, logit_bias=EOS_NOW)
        self.assertEqual(r.status, 200, r)

    def test_3_concurrency(self):
        a = hold(R[0], "conc")
        b = hold(R[1], "conc")
        try:
            r = comp(R[2], "conc")
            self.assertEqual(r.status, 429, r)
            self.assertEqual(code(r), "concurrency")
            self.assertNotIn("retry-after", r.headers)
        finally:
            a.close()
        # The hang-up cancels it and its seat frees fleet-wide.
        wait_until(lambda: comp(R[2], "conc").status == 200, 10, interval=0.1, what="the seat to free")
        b.close()

    def test_4_killed_replica_expires(self):
        victim = replica("victim").start()
        try:
            h = hold(victim, "hold")
            vid = re.search(r"replica ([^)\s]+)\)", victim.stderr()).group(1)
            mine = "%s:svc:slow:%s" % (PREFIX, vid)
            wait_until(lambda: int(resp_call(REDIS.port, "HGET", mine, "hold") or 0) > 0, 5, interval=0.05,
                       what="the victim to publish its service")
            victim.kill()
            h.close()
            t0 = time.monotonic()
            r = comp(R[0], "hold")
            self.assertEqual(r.status, 429, r)       # its lease still runs
            wait_until(lambda: comp(R[0], "hold").status == 200, 10, interval=0.1,
                       what="the dead replica's in-flight count to expire")
            took = time.monotonic() - t0
            self.assertLess(took, LEASE_MS / 1000 + 3, took)
            # Its service stays in the fleet's sums (the total), and its
            # figures a day, in case it was only cut off; it leaves the
            # replicas whose queues are read.
            wait_until(lambda: vid.encode() not in resp_call(REDIS.port, "SMEMBERS", PREFIX + ":svcreps:slow"), 5,
                       interval=0.1, what="the dead replica to leave the exchange")
            fig = int(resp_call(REDIS.port, "HGET", mine, "hold"))
            self.assertGreater(fig, 0)
            self.assertGreaterEqual(int(resp_call(REDIS.port, "HGET", PREFIX + ":svctot:slow", "hold")), fig)
        finally:
            victim.kill()

    def test_5_fair_share_across_replicas(self):
        # fa sends to r0 and r1, fb only to r0; each replica runs one
        # sequence at a time, so its fair queue decides every admission, and
        # requests are long enough that the clients keep a queue waiting.
        stop = threading.Event()
        errors = []

        def client(srv, tenant):
            while not stop.is_set():
                try:
                    r = comp(srv, tenant, max_tokens=600, logit_bias=NO_EOS, timeout=30)
                    if r.status != 200:
                        errors.append(r)
                except OSError as e:
                    errors.append(e)

        def service():
            out = {"fa": 0.0, "fb": 0.0}
            for srv in R:
                r = request(srv.port, "GET", "/admin/tenants", key=srv.admin_key)
                for d in r.json()["data"]:
                    if d["tenant"] in out and d["model"] == "tiny":
                        out[d["tenant"]] += d["service"]
            return out

        # Six clients each, so that a tenant's queue never runs dry while
        # its clients turn around: a tenant that goes idle is lifted to the
        # others' counters when it returns (idle time is not banked), which
        # would measure the clients, not the fair queue.
        threads = [threading.Thread(target=client, args=(R[0], "fa")) for _ in range(6)]
        threads += [threading.Thread(target=client, args=(R[1], "fa")) for _ in range(6)]
        threads += [threading.Thread(target=client, args=(R[0], "fb")) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            time.sleep(1.5)                 # the exchange settles
            s0 = service()
            # Each replica publishes the keys of the tenants queued on it,
            # which the others lift arrivals against.
            queues = resp_call(REDIS.port, "KEYS", PREFIX + ":svcq:tiny:*")
            self.assertTrue(queues, "no replica published its queue")
            time.sleep(5)
            s1 = service()
        finally:
            stop.set()
            for t in threads:
                t.join(40)
        self.assertEqual(errors, [])
        fa, fb = s1["fa"] - s0["fa"], s1["fb"] - s0["fb"]
        share = fb / (fa + fb)
        print("fair share: fa %.0f fb %.0f, fb's share %.3f (0.5 fleet-wide, 0.25 per replica)" % (fa, fb, share),
              file=sys.stderr)
        self.assertTrue(0.4 <= share <= 0.6, share)

    def test_6_redis_slow(self):
        """Redis stops answering (SIGSTOP) with a request in flight: no
        request waits on it, the finish that cannot reach it is settled once
        when it answers again, and the heartbeat repairs the in-flight count."""
        U, rate = 60000000, 2000            # units per token; units per us at 2000/min
        lim, inflight = PREFIX + ":lim:slowt", PREFIX + ":inflight:slowt"
        # Half the bucket used up, so that no refill below reaches the cap
        # and the bucket's level is exact arithmetic from here on.
        r = comp(R[1], "slowt", max_tokens=1000, logit_bias=NO_EOS)
        self.assertEqual(r.status, 200, r)

        def level():
            """(units, us) as last stored; a missing key (expired: full) as (None, None)."""
            v = resp_call(REDIS.port, "HMGET", lim, "tl", "tt")
            return (int(v[0]), int(v[1])) if v[0] is not None else (None, None)
        l0, t0 = level()
        self.assertIsNotNone(l0)
        h = hold(R[0], "slowt")             # admitted by Redis: in flight on r0
        self.assertEqual(len(resp_call(REDIS.port, "HGETALL", inflight)), 2)
        REDIS.proc.send_signal(signal.SIGSTOP)
        try:
            h.close()                       # its finish cannot reach Redis
            t = time.monotonic()
            r = comp(R[1], "many", timeout=5)
            self.assertEqual(r.status, 200, r)      # fail open, within the timeouts
            self.assertLess(time.monotonic() - t, 2)
            r = comp(R[2], "many", timeout=5)
            self.assertEqual(r.status, 503, r)      # fail closed
            self.assertEqual(r.headers.get("retry-after"), "1")

            def ended():
                d = tenant_row(R[0], "slowt", "slow")
                return d if d["running"] + d["queued"] == 0 and d["cancelled"] + d["completed"] == 1 else None
            d = wait_until(ended, 10, what="the held request to end")
            used = d["prompt_tokens"] + d["output_tokens"]
        finally:
            REDIS.proc.send_signal(signal.SIGCONT)
        wait_reconnected()

        def settled():
            l1, t1 = level()
            if l1 is None:
                return None                 # full: refunded more than once
            miss = l1 - (l0 + (t1 - t0) * rate - used * U)
            return (l1, t1, miss) if abs(miss) <= 3 * U and resp_call(REDIS.port, "HGETALL", inflight) == [] else None
        wait_until(settled, 5, interval=0.1, what="the refund and the in-flight count to be settled")
        time.sleep(0.5)                     # nothing arrives twice
        self.assertTrue(settled(), (level(), l0, t0, used))

    def test_6a_redis_paused_past_lease(self):
        """Redis stops answering for longer than a lease, its data intact:
        each replica finds the others' leases lapsed and takes them
        out of the exchange. Every exchange afterwards succeeds, and the
        fleet's sums are what they were before (nothing is served meanwhile)."""
        def sums():
            out = {}
            for m in ("tiny", "slow"):
                h = resp_call(REDIS.port, "HGETALL", "%s:svctot:%s" % (PREFIX, m)) or []
                out.update({(m, h[i]): int(h[i + 1]) for i in range(0, len(h), 2)})
            return out
        time.sleep(3 * SYNC_MS / 1000)      # the last service is in
        before = sums()
        REDIS.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(LEASE_MS / 1000 + 0.6)
        finally:
            REDIS.proc.send_signal(signal.SIGCONT)
        wait_reconnected()

        def settled():
            for m in ("tiny", "slow"):
                reps = resp_call(REDIS.port, "SMEMBERS", "%s:svcreps:%s" % (PREFIX, m)) or []
                if len(reps) != 3:
                    return False
            return True
        wait_until(settled, 10, interval=0.1, what="every replica to rejoin the exchange")
        time.sleep(10 * SYNC_MS / 1000)     # several exchanges after that
        self.assertEqual(sums(), before)
        for srv in R:
            self.assertNotIn("error reply", srv.stderr(), srv.name)

    def test_6b_error_reply(self):
        """A key of the wrong type makes Redis refuse the scripts that touch
        it: those calls fall back (open: local limits; closed: 503) and are
        counted, the settlement Redis refused is dropped instead of holding
        up the queue, and the connection stays: other tenants are decided
        by Redis meanwhile."""
        lim = PREFIX + ":lim:slowt"

        def refusals(srv, script):
            return metric_value(get_metrics(srv.port, srv.admin_key), "tessera_redis_error_replies_total",
                                script=script)
        m0 = get_metrics(R[0].port, R[0].admin_key)
        admit0 = metric_value(m0, "tessera_redis_error_replies_total", script="admit")
        finish0 = metric_value(m0, "tessera_redis_error_replies_total", script="finish")
        dropped0 = metric_value(m0, "tessera_redis_settle_dropped_total")
        h = hold(R[0], "slowt")             # admitted by Redis
        resp_call(REDIS.port, "DEL", lim)
        resp_call(REDIS.port, "SET", lim, "not a hash")
        try:
            h.close()                       # its finish is refused
            wait_until(lambda: refusals(R[0], "finish") > finish0, 10, interval=0.1, what="the refused finish")
            r = comp(R[0], "slowt", timeout=5)
            self.assertEqual(r.status, 200, r)       # open: local limits
            r = comp(R[2], "slowt", timeout=5)
            self.assertEqual(r.status, 503, r)       # closed
            self.assertGreater(refusals(R[0], "admit"), admit0)
            self.assertGreaterEqual(refusals(R[2], "admit"), 1)
            self.assertEqual(metric_value(get_metrics(R[0].port, R[0].admin_key),
                                          "tessera_redis_settle_dropped_total"), dropped0 + 1)
            # The connection stayed: Redis still decides the rpm tenant.
            r = comp(R[2], "many", timeout=5)
            self.assertEqual(r.status, 200, r)
        finally:
            resp_call(REDIS.port, "DEL", lim)
        r = comp(R[0], "slowt", timeout=5)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(resp_call(REDIS.port, "TYPE", lim), b"hash")   # decided by Redis again
        # Logged, at most a line every 10 s: r0's refused admission came
        # right after its refused finish, and is only counted.
        self.assertIn("error reply to the finish script: WRONGTYPE", R[0].stderr())
        self.assertIn("error reply to the admit script: WRONGTYPE", R[2].stderr())
        self.assertLessEqual(R[0].stderr().count("error reply to the"), 2, R[0].stderr())

    def test_6c_clock_step_back(self):
        """A bucket stored by a Redis whose clock then stepped back an hour
        (its time is later than TIME): the tenant waits for what its level
        lacks, not for the step."""
        lim = PREFIX + ":lim:rpm"
        sec, us = (int(x) for x in resp_call(REDIS.port, "TIME"))
        later = (sec + 3600) * 1000000 + us
        # Half a request left at 6 a minute: the next one is 5 s away.
        resp_call(REDIS.port, "HSET", lim, "rl", "30000000", "rt", str(later), "rr", "6")
        try:
            r = comp(R[0], "rpm", timeout=5)
            self.assertEqual(r.status, 429, r)
            self.assertEqual(code(r), "rate_requests")
            self.assertTrue(1 <= int(r.headers["retry-after"]) <= 6, r.headers)
        finally:
            resp_call(REDIS.port, "DEL", lim)

    def test_7_redis_killed(self):
        REDIS.kill()
        try:
            t0 = time.monotonic()
            for i in range(4):
                r = comp(R[i % 2], "many", timeout=5)
                self.assertEqual(r.status, 200, r)   # fail open: local limits
            self.assertLess(time.monotonic() - t0, 4)
            r = comp(R[2], "many", timeout=5)          # fail closed
            self.assertEqual(r.status, 503, r)
            self.assertEqual(code(r), "limits_unavailable")
            self.assertEqual(r.headers.get("retry-after"), "1")
            r = comp(R[2], "nolimit", timeout=5)       # nothing to count: served
            self.assertEqual(r.status, 200, r)
            m = get_metrics(R[0].port, R[0].admin_key)
            self.assertEqual(metric_value(m, "tessera_redis_up"), 0)
            self.assertGreaterEqual(metric_value(m, "tessera_redis_errors_total"), 1)
            self.assertGreaterEqual(metric_value(m, "tessera_redis_fallback_total", mode="open"), 1)
            m = get_metrics(R[2].port, R[2].admin_key)
            self.assertGreaterEqual(metric_value(m, "tessera_redis_fallback_total", mode="closed"), 1)
        finally:
            REDIS.start()
        wait_reconnected()
        r = comp(R[2], "many")
        self.assertEqual(r.status, 200, r)
        # One line per transition, each way: at least this outage, each
        # one closed by a recovery. (A loaded machine may add a short one of
        # its own: a call late past redis_timeout_ms is an outage too.)
        for srv in R:
            def paired():
                err = srv.stderr()
                downs, ups = err.count("until it answers again"), err.count("answers again; limits are fleet-wide again")
                return downs >= 1 and downs == ups
            wait_until(paired, 5, interval=0.1, what="%s: one log line per transition" % srv.name)

    def test_7a_redis_killed_under_load(self):
        """Redis dies and comes back while requests run on every replica:
        each request gets an answer (200, or a 429/503 that says why), none
        hangs or is dropped, and no in-flight count leaks from the outage."""
        answers, errors, stop = [], [], threading.Event()

        def client(srv, tenant):
            while not stop.is_set():
                try:
                    r = comp(srv, tenant, timeout=15, model="slow", max_tokens=8, logit_bias=NO_EOS)
                    answers.append((srv.name, r.status, code(r) if r.status != 200 else None))
                except Exception as e:      # a dropped or hung request
                    errors.append("%s: %r" % (srv.name, e))
        threads = [threading.Thread(target=client, args=(srv, t)) for srv in R for t in ("many", "conc")]
        for t in threads:
            t.start()
        try:
            time.sleep(1.0)
            REDIS.kill()
            time.sleep(1.5)
        finally:
            REDIS.start()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(30)
        self.assertFalse([t for t in threads if t.is_alive()], "a client never got its answer")
        self.assertEqual(errors, [], "requests without an answer")
        self.assertGreater(len(answers), len(threads), answers)
        bad = [a for a in answers if a[1] != 200 and not (a[1] in (429, 503) and a[2])]
        self.assertEqual(bad, [], "answers that are neither served nor an explicit refusal")
        self.assertTrue(any(a[1] == 200 for a in answers), answers)
        tally = {}
        for _, st, why in answers:
            tally["%d %s" % (st, why or "")] = tally.get("%d %s" % (st, why or ""), 0) + 1
        print("redis_limits: under load through the outage: %r" % tally, file=sys.stderr)
        wait_reconnected()
        # Nothing of the outage stays counted: conc's two seats are free.
        wait_until(lambda: comp(R[0], "conc").status == 200, 10, interval=0.2, what="conc to be served again")
        a = hold(R[0], "conc")
        b = hold(R[1], "conc")
        a.close()
        b.close()

    def test_8_redis_absent_at_start(self):
        """A replica whose Redis is not there yet starts, serves in its failure
        mode, and says so."""
        lone = Server(ENV, "lone", [Model("tiny", MODELS[0], threads=1)], TENANTS,
                      limits=redis_limits(redis_url="redis://127.0.0.1:%d" % free_port()))
        with lone:
            r = comp(lone, "many", timeout=5)
            self.assertEqual(r.status, 200, r)
            m = get_metrics(lone.port, lone.admin_key)
            self.assertEqual(metric_value(m, "tessera_redis_up"), 0)
            self.assertGreaterEqual(metric_value(m, "tessera_redis_fallback_total", mode="open"), 1)
            self.assertIn("not reachable yet", lone.stderr())
            self.assertIn("cannot connect", lone.stderr())

    def test_9_many_tenants(self):
        """The fair-share exchange in several pieces: the script takes the
        tenants 256 at a time (Lua's unpack() has a stack limit near 8000)."""
        class Bare:                         # a tenant without a key to use
            def __init__(self, i):
                self.name, self.tier, self.limits = "t%04d" % i, "gold", {}
                self.hash = "%064x" % (0xfeed0000 + i)
        many = [Bare(i) for i in range(600)]
        prefix = PREFIX + "-many"
        pair = [Server(ENV, "many%d" % i, [Model("tiny", MODELS[0], threads=1)], many,
                       limits=redis_limits(redis_prefix=prefix)) for i in range(2)]
        try:
            for srv in pair:
                srv.start()

            def exchanged():
                reps = resp_call(REDIS.port, "SMEMBERS", prefix + ":svcreps:tiny") or []
                return len(reps) == 2 and all(
                    resp_call(REDIS.port, "HLEN", b"%s:svc:tiny:%s" % (prefix.encode(), r)) == 600 for r in reps)
            wait_until(exchanged, 10, interval=0.2, what="both replicas to publish 600 tenants")
            time.sleep(3 * SYNC_MS / 1000)  # a few exchanges that also read the other's figures
            for srv in pair:
                m = get_metrics(srv.port, srv.admin_key)
                # Redis refused no exchange (a late answer under a loaded
                # machine's 200 ms timeout is not the script's fault).
                self.assertEqual(metric_value(m, "tessera_redis_error_replies_total", script="sync"), 0,
                                 srv.stderr())
                self.assertNotIn("error reply", srv.stderr())
        finally:
            for srv in pair:
                srv.stop()

    def test_10_bad_url(self):
        bad = Server(ENV, "badurl", [Model("tiny", MODELS[0])], TENANTS[:1],
                     limits={"backend": "redis", "redis_url": "redis://127.0.0.1:70000"})
        p = subprocess.run([ENV.tessera, "serve", "--config", bad.config, "--listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("limits.redis_url: expected a port in 1..65535", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
