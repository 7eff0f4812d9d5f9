"""soak.py - a long mixed load against one `tessera serve`, then a reckoning.

Six tenants on the three default tiers, for --seconds of:
  - steady traffic: per tenant two clients sending completions and chats,
    streamed or not, with random prompts (ASCII and multi-byte) and lengths;
  - disconnect storms: every few seconds a burst of streams that hang up
    after their first event;
  - slow readers: streams whose client reads one event at a time, slowly,
    through a small receive buffer;
  - bursts past the rate limits: one tenant limited to 120 requests/minute
    and 4 at once fires 40 requests at a time; another limited in tokens;
and at the end a SIGTERM while streams are in flight.

What must hold, checked at the end (each failure is listed, and the exit
status is 1 if there is any):
  - every request the clients sent has exactly one outcome in the client
    log (by construction: each request records one, in a finally) and the
    server's tessera_requests_total{tenant, outcome} agrees per tenant:
    the same total; its completed are the clients' completed plus some of
    the streams they cut (a stream may finish before its hang-up is seen),
    its cancelled the rest of those; every refusal the clients saw (an HTTP
    error status) is one of its rejected_*, every error event one of its
    failed_*;
  - /admin/tenants shows nothing queued or running once the clients are
    done, and submitted = completed + cancelled + failed;
  - the server's open file descriptors are back to the count before the
    load (once the clients' connections are closed);
  - RSS is flat after warm-up: the least-squares slope of the samples after
    the first quarter of the window is reported, and fails past
    --rss-slope-mib-min (default 1 MiB/min) when the rise also exceeds
    8 MiB (under AddressSanitizer, whose quarantine grows RSS by design, it
    is reported only; ASan's own leak check covers that build);
  - on SIGTERM the server drains: every stream in flight ends (completed or
    an error event), the process exits 0 within the grace time plus 5 s.

Everything talks to 127.0.0.1 only; every socket has a timeout; the run
stops by itself. Results: DIR/soak.json and a summary on stdout.

usage: soak.py --seconds N [--out DIR] [--seed S]
Environment: TS_TESSERA, TS_TMPDIR (and TS_SRC), as for the other script
tests; harness.py starts the server.
"""

import argparse
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
WORDS = ["alpha", "beta", "gamma", "delta", "über", "naïve", "日本語", "тест", "emoji 🙂", "x" * 40]


class Log:
    """The client log: one outcome per request, per tenant."""

    def __init__(self):
        self.mu = threading.Lock()
        self.counts = {}            # tenant -> {outcome: n}
        self.sent = 0

    def record(self, tenant, outcome):
        with self.mu:
            d = self.counts.setdefault(tenant, {})
            d[outcome] = d.get(outcome, 0) + 1
            self.sent += 1


def prompt(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))


def body_for(rng, path, stream, max_tokens):
    b = {"model": "tiny", "max_tokens": max_tokens, "stream": stream, "temperature": rng.choice([0, 0.8])}
    if path == CHAT:
        b["messages"] = [{"role": "user", "content": prompt(rng)}]
    else:
        b["prompt"] = prompt(rng)
    return b


def stream_outcome(events):
    """completed, or error_event when the stream ended with an error."""
    for e in events:
        if e == "[DONE]":
            continue
        if "error" in json.loads(e):
            return "error_event"
    return "completed" if events and events[-1] == "[DONE]" else "truncated"


def one_request(srv, log, rng, tenant, path=None, stream=None, max_tokens=None):
    """One request, recorded exactly once whatever happens. Returns the
    outcome."""
    path = path or rng.choice([COMPLETIONS, CHAT])
    stream = rng.random() < 0.5 if stream is None else stream
    max_tokens = max_tokens or rng.randint(1, 48)
    outcome = "exception"
    try:
        if stream:
            r, events = H.stream(srv.port, path, body_for(rng, path, True, max_tokens), srv.key(tenant), timeout=60)
            outcome = stream_outcome(events) if r.status == 200 else "http_%d" % r.status
        else:
            r = H.request(srv.port, "POST", path, body_for(rng, path, False, max_tokens), key=srv.key(tenant),
                          timeout=60)
            outcome = "completed" if r.status == 200 else "http_%d" % r.status
    except Exception as e:  # noqa: BLE001 - every failure is an outcome to count
        outcome = "exception"
        H.log("soak: %s request failed: %r" % (tenant, e))
    finally:
        log.record(tenant, outcome)
    return outcome


def steady(srv, log, stop, tenant, seed):
    """A well-behaved client: after a 429 it waits (about what Retry-After
    says for these limits) instead of hammering."""
    rng = random.Random(seed)
    while not stop.is_set():
        refused = one_request(srv, log, rng, tenant) == "http_429"
        stop.wait(rng.uniform(0.5, 1.0) if refused else rng.random() * 0.05)


def cut_stream(srv, log, rng, tenant):
    """A stream that hangs up after its first event."""
    outcome = "exception"
    s = None
    phase, t0 = "connecting", time.monotonic()
    try:
        s = H.RawStream(srv.port, COMPLETIONS, body_for(rng, COMPLETIONS, True, 200), srv.key(tenant), timeout=30)
        phase = "reading the head"
        s._read_head()  # a refusal is a whole JSON answer, not a stream
        if s.status != 200:
            outcome = "http_%d" % s.status
        else:
            phase = "reading the first event"
            outcome = "cut" if s.next_event() is not None else "truncated"
    except Exception as e:  # noqa: BLE001
        H.log("soak: cut stream of %s failed %s, %.2f s in: %r" % (tenant, phase, time.monotonic() - t0, e))
    finally:
        if s:
            s.close()
        log.record(tenant, outcome)


def at_once(n, target, args_of, join_s):
    """n threads of target at once (args_of(i) gives each its arguments),
    waited for up to join_s seconds each."""
    ts = [threading.Thread(target=target, args=args_of(i)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(join_s)


def storms(srv, log, stop, tenants, seed):
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(3, 8)):
        at_once(30, cut_stream, lambda i: (srv, log, random.Random(rng.random()), rng.choice(tenants)), 60)


def slow_reader(srv, log, stop, tenant, seed):
    """Streams read one small recv at a time, with pauses: the server must
    keep everyone else going while this client dawdles."""
    rng = random.Random(seed)
    while not stop.is_set():
        outcome = "exception"
        sock = None
        try:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(60)
            sock.connect(("127.0.0.1", srv.port))
            data = json.dumps(body_for(rng, COMPLETIONS, True, 64)).encode()
            sock.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                          "Content-Length: %d\r\nConnection: close\r\n\r\n" % (COMPLETIONS, srv.key(tenant), len(data))
                          ).encode() + data)
            raw = b""
            while True:
                d = sock.recv(256)
                if not d:
                    break
                raw += d
                time.sleep(0.02)
            head, _, rest = raw.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            if status != 200:
                outcome = "http_%d" % status
            else:
                outcome = "completed" if b"data: [DONE]" in rest else "truncated"
                if b'"error"' in rest:
                    outcome = "error_event"
        except Exception as e:  # noqa: BLE001
            H.log("soak: slow reader of %s failed: %r" % (tenant, e))
        finally:
            if sock:
                sock.close()
            log.record(tenant, outcome)


def bursts(srv, log, stop, tenant, seed):
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(5, 12)):
        at_once(40, one_request, lambda i: (srv, log, random.Random(rng.random()), tenant), 90)


def proc_sample(pid):
    """(RSS in KiB, open file descriptors) of the server."""
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def monitor(pid, stop, samples, t0):
    while not stop.wait(2.0):
        try:
            rss, fds = proc_sample(pid)
        except (OSError, StopIteration):
            return
        samples.append((time.monotonic() - t0, rss, fds))


def under_asan(pid):
    """Whether the server runs under AddressSanitizer: its quarantine
    holds freed memory back (up to 256 MB by default), so RSS then grows by
    design and says nothing about the server; the slope is reported only."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            return "libasan" in f.read()
    except OSError:
        return False


def slope_kib_per_min(points):
    """Least-squares slope of (seconds, KiB) points, in KiB/min."""
    n = len(points)
    if n < 3:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    return 60.0 * sxy / sxx if sxx > 0 else 0.0


def server_outcomes(srv):
    out = {}
    for name, labels, v in H.get_metrics(srv.port, srv.metrics_key):
        if name == "tessera_requests_total" and "outcome" in labels and v:
            out.setdefault(labels.get("tenant", "?"), {})[labels["outcome"]] = int(v)
    return out


def reconcile(tenant, client, server, failures):
    """Client log against the server's counters for one tenant."""
    c_total, s_total = sum(client.values()), sum(server.values())
    if c_total != s_total:
        failures.append("%s: the clients sent %d requests, the server counted %d outcomes (%r vs %r)"
                        % (tenant, c_total, s_total, client, server))
    done, cut = client.get("completed", 0), client.get("cut", 0)
    s_done, s_cancel = server.get("completed", 0), server.get("cancelled", 0)
    if not (done <= s_done <= done + cut and s_done + s_cancel == done + cut):
        failures.append("%s: completed/cut %d/%d by the clients, completed/cancelled %d/%d by the server"
                        % (tenant, done, cut, s_done, s_cancel))
    refused = sum(v for k, v in client.items() if k.startswith("http_"))
    s_refused = sum(v for k, v in server.items() if k.startswith("rejected_"))
    if refused != s_refused:
        failures.append("%s: %d refusals seen by the clients, %d rejected_* counted" % (tenant, refused, s_refused))
    errors = client.get("error_event", 0)
    s_failed = sum(v for k, v in server.items() if k.startswith("failed_"))
    if errors != s_failed:
        failures.append("%s: %d error events seen by the clients, %d failed_* counted" % (tenant, errors, s_failed))
    for bad in ("exception", "truncated"):
        if client.get(bad):
            failures.append("%s: %d requests ended as %s on the client" % (tenant, client[bad], bad))


def admin_idle(srv):
    r = H.request(srv.port, "GET", "/admin/tenants", key=srv.admin_key)
    rows = r.json()["data"] if r.status == 200 else None
    return rows if rows is not None and all(t["queued"] + t["running"] == 0 for t in rows) else None


def drain_on_sigterm(srv, failures, grace):
    """SIGTERM with streams in flight: each ends once, the server exits 0."""
    results = []
    mu = threading.Lock()

    def streamer(i):
        try:
            r, events = H.stream(srv.port, COMPLETIONS, {"model": "tiny", "prompt": "drain %d" % i,
                                                         "max_tokens": 400, "stream": True},
                                 srv.key("gold-a"), timeout=grace + 20)
            o = stream_outcome(events) if r.status == 200 else "http_%d" % r.status
        except Exception as e:  # noqa: BLE001
            o = "exception: %r" % e
        with mu:
            results.append(o)

    ts = [threading.Thread(target=streamer, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    srv.signal()
    rc = srv.wait(grace + 5)
    took = time.monotonic() - t0
    for t in ts:
        t.join(grace + 25)
    if rc != 0:
        failures.append("SIGTERM: exit status %r after %.1f s (grace %d s)" % (rc, took, grace))
    bad = [o for o in results if o not in ("completed", "error_event", "http_503")]
    if len(results) != len(ts) or bad:
        failures.append("SIGTERM: %d of %d streams ended, unexpected ends %r" % (len(results), len(ts), bad))
    return {"exit_status": rc, "seconds": round(took, 2), "streams": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-slope-mib-min", type=float, default=1.0)
    a = ap.parse_args()
    env = H.Env("soak")
    out = a.out or env.work
    os.makedirs(out, exist_ok=True)
    model = H.make_model(env)
    tenants = [H.Tenant(env, "gold-a", "gold"), H.Tenant(env, "gold-b", "gold"),
               H.Tenant(env, "silver-a", "silver"), H.Tenant(env, "silver-b", "silver"),
               H.Tenant(env, "bronze-a", "bronze", requests_per_minute=120, max_concurrent=4),
               H.Tenant(env, "bronze-b", "bronze", tokens_per_minute=6000, max_queued=8)]
    grace = 3
    srv = H.Server(env, "soak", [H.Model("tiny", model, kv_cache_bytes="16MiB", max_seqs=16)], tenants,
                   limits={"max_connections": 512, "reserved_connections": 64, "header_timeout_s": 5,
                           "idle_timeout_s": 10, "shutdown_grace_s": grace}).start()
    failures = []
    report = {"seconds": a.seconds, "seed": a.seed}
    try:
        H.request(srv.port, "GET", "/health")
        rss0, fds0 = proc_sample(srv.proc.pid)
        report["baseline"] = {"rss_kib": rss0, "fds": fds0}
        log, stop, samples = Log(), threading.Event(), []
        t0 = time.monotonic()
        names = [t.name for t in tenants]
        workers = [threading.Thread(target=monitor, args=(srv.proc.pid, stop, samples, t0))]
        for i, n in enumerate(names):
            for k in range(2):
                workers.append(threading.Thread(target=steady, args=(srv, log, stop, n, a.seed * 100 + 2 * i + k)))
        workers.append(threading.Thread(target=storms, args=(srv, log, stop, names, a.seed + 7)))
        for k in range(2):
            workers.append(threading.Thread(target=slow_reader, args=(srv, log, stop, names[2 + k], a.seed + 11 + k)))
        workers.append(threading.Thread(target=bursts, args=(srv, log, stop, "bronze-a", a.seed + 13)))
        workers.append(threading.Thread(target=bursts, args=(srv, log, stop, "bronze-b", a.seed + 17)))
        for w in workers:
            w.start()
        stop.wait(a.seconds)
        stop.set()
        for w in workers:
            w.join(120)
        if any(w.is_alive() for w in workers):
            failures.append("a client thread did not finish within 120 s of the end")
        H.wait_until(lambda: admin_idle(srv), 30, 0.2, "nothing queued or running")
        rows = admin_idle(srv)
        for t in rows:
            if t["submitted"] != t["completed"] + t["cancelled"] + t["failed"]:
                failures.append("/admin/tenants %s: submitted %d != completed %d + cancelled %d + failed %d"
                                % (t["tenant"], t["submitted"], t["completed"], t["cancelled"], t["failed"]))
        # The clients' connections are closed; the server closes its side at
        # once, so within a few seconds every socket of the load is gone.
        try:
            fds_end = H.wait_until(lambda: proc_sample(srv.proc.pid)[1] <= fds0 and proc_sample(srv.proc.pid)[1],
                                   15, 0.2, "file descriptors back to the baseline")
        except AssertionError:
            fds_end = proc_sample(srv.proc.pid)[1]
            failures.append("file descriptors: %d before the load, %d after it" % (fds0, fds_end))
        server = server_outcomes(srv)
        for n in names:
            reconcile(n, log.counts.get(n, {}), server.get(n, {}), failures)
        warm = [p for p in samples if p[0] >= a.seconds / 4]
        slope = slope_kib_per_min([(p[0], p[1]) for p in warm])
        rise = (max(p[1] for p in warm) - min(p[1] for p in warm)) if warm else 0
        asan = under_asan(srv.proc.pid)
        if slope > a.rss_slope_mib_min * 1024 and rise > 8 * 1024 and not asan:
            failures.append("RSS grows %.0f KiB/min after warm-up (rise %d KiB)" % (slope, rise))
        report["rss_checked"] = not asan
        report.update({"requests": log.sent, "client": log.counts, "server": server,
                       "rss_kib": {"first": samples[0][1] if samples else None,
                                   "last": samples[-1][1] if samples else None,
                                   "slope_after_warmup_kib_per_min": round(slope, 1),
                                   "rise_after_warmup_kib": rise},
                       "fds": {"before": fds0, "after": fds_end,
                               "peak": max((p[2] for p in samples), default=fds0)}})
        report["sigterm"] = drain_on_sigterm(srv, failures, grace)
    finally:
        srv.kill()
    report["failures"] = failures
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    totals = {}
    for d in report.get("client", {}).values():
        for k, v in d.items():
            totals[k] = totals.get(k, 0) + v
    print("soak: %.0f s, %d requests: %s" % (a.seconds, report.get("requests", 0),
                                              ", ".join("%s %d" % kv for kv in sorted(totals.items()))))
    r = report.get("rss_kib", {})
    print("soak: RSS %s -> %s KiB, slope after warm-up %s KiB/min%s; fds %s before, %s after, peak %s"
          % (r.get("first"), r.get("last"), r.get("slope_after_warmup_kib_per_min"),
             "" if report.get("rss_checked", True) else " (AddressSanitizer's quarantine: reported, not checked)",
             report.get("fds", {}).get("before"), report.get("fds", {}).get("after"),
             report.get("fds", {}).get("peak")))
    print("soak: SIGTERM: %r" % report.get("sigterm"))
    for fl in failures:
        print("soak: FAIL: " + fl)
    print("soak: %s (%s)" % ("FAIL" if failures else "PASS", os.path.join(out, "soak.json")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
