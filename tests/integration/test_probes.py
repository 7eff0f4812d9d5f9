"""test_probes.py - the orchestrator's view of `tessera serve`: the probes
(/health/live, /health/ready) and the model-server gauges the Gateway API
Inference Extension's endpoint picker scrapes from /metrics.

The real binary on 127.0.0.1, one model ("slow", the 15m preset) with
max_seqs: 1, so that a second request queues behind the first one and
requests last long enough to watch. Checked:
  - both probes answer without a key (and with any key), in JSON, and count
    in no request series: ten probes move no counter of /metrics;
  - vllm:num_requests_waiting, vllm:num_requests_running,
    vllm:kv_cache_usage_perc and vllm:gpu_cache_usage_perc exist per model
    with the model label, and move: waiting > 0 while requests queue,
    running == 1 during generation, KV usage > 0 during it, all back to 0
    once the requests end; the tessera-named twins read the same;
  - /health/live reports the engine's current turn: above 0 at some poll
    during generation, 0 once idle (the heartbeat the stall check reads);
  - SIGTERM with a long stream in flight: /health/ready turns 503
    {"status":"draining"} on a connection opened before, /health/live stays
    200, and the process exits 0 by itself.

Run by tests/probes.sh (ctest) with TS_TESSERA and TS_TMPDIR set; by hand:
    TS_TESSERA=build/tessera TS_TMPDIR=/tmp/ts /usr/bin/python3 tests/integration/test_probes.py -v
"""

import http.client
import json
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Model, RawStream, Server, Tenant, get_metrics, log, make_model,  # noqa: E402
                     metric_value, request, wait_until)

ENV = Env("probes")
S = None                # the main server
SLOW = None
COMP = "/v1/completions"
VLLM = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc")


def setUpModule():
    global S, SLOW
    SLOW = make_model(ENV, "slow.gguf", preset="15m")
    S = Server(ENV, "main", [Model("slow", SLOW, threads=1, max_seqs=1)], [Tenant(ENV, "t", "gold")],
               limits={"shutdown_grace_s": 2}).start()


def tearDownModule():
    rc = S.stop(timeout=20)
    if rc != 0:
        raise AssertionError("the server exited with %r after SIGTERM (want 0); stderr:\n%s" % (rc, S.stderr()[-3000:]))


def probe(port, path, conn=None, key=None):
    """(status, JSON body) of a probe."""
    r = request(port, "GET", path, key=key, conn=conn, timeout=10)
    if not r.headers.get("content-type", "").startswith("application/json"):
        raise AssertionError("%s: not JSON: %r" % (path, r))
    return r.status, r.json()


def gauges(m, model="slow"):
    """{name: value} of the server-wide gauges of model in one scrape."""
    out = {n: metric_value(m, n, model=model, model_name=model) for n in VLLM}
    for n in ("tessera_requests_waiting", "tessera_requests_running", "tessera_kv_utilization"):
        out[n] = metric_value(m, n, model=model)
    missing = [n for n, v in out.items() if v is None]
    if missing:
        raise AssertionError("no series %s{model=%r}" % (missing, model))
    return out


def counted(m):
    """Every request counter of a scrape, summed: responses by code and outcomes."""
    return (sum(v for n, _, v in m if n == "tessera_http_responses_total"),
            sum(v for n, _, v in m if n == "tessera_requests_total"))


class Probes(unittest.TestCase):
    def test_no_key_json_and_uncounted(self):
        self.assertEqual(probe(S.port, "/health/live")[1]["status"], "ok")
        before = counted(get_metrics(S.port, S.metrics_key))
        for key in (None, S.key("t"), "tsk-not-a-key", None, S.key("t")):
            st, body = probe(S.port, "/health/live", key=key)
            self.assertEqual((st, body["status"]), (200, "ok"), body)
            self.assertIsInstance(body["longest_turn_s"], float)
            st, body = probe(S.port, "/health/ready", key=key)
            self.assertEqual((st, body["status"]), (200, "ready"), body)
        after = counted(get_metrics(S.port, S.metrics_key))
        # Only the first /metrics read itself (200, completed) was counted.
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (1, 1), (before, after))
        r = request(S.port, "POST", "/health/ready", body={})
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.headers.get("allow"), "GET", r.headers)
        # /health is unchanged.
        r = request(S.port, "GET", "/health")
        self.assertEqual((r.status, r.json()), (200, {"status": "ok"}))

    def test_vllm_gauges_move(self):
        idle = gauges(get_metrics(S.port, S.metrics_key))
        self.assertEqual(idle["vllm:num_requests_running"], 0, idle)
        streams = [RawStream(S.port, COMP, {"model": "slow", "prompt": "queue number %d" % i, "max_tokens": 900,
                                            "ignore_eos": True, "temperature": 0, "stream": True}, S.key("t"))
                   for i in range(3)]
        for rs in streams:
            self.addCleanup(rs.close)
        # No stream is read before the poll: the three arrive on different
        # HTTP threads, so any of them may be the one that runs first, and
        # waiting for one's first token may mean waiting for the others' end.
        seen = []

        def busy():
            g = gauges(get_metrics(S.port, S.metrics_key))
            seen.append(g)
            return g if g["vllm:num_requests_running"] == 1 and g["vllm:num_requests_waiting"] == 2 else None
        # Both others waiting, not just one: under a sanitizer and a loaded
        # machine the third request's HTTP thread may not have handed it to
        # the engine yet when the first runs and the second waits.
        try:
            g = wait_until(busy, 10, what="running == 1 and waiting == 2 behind a max_seqs: 1 model")
        except AssertionError:
            log("gauges seen: %r" % (seen[:3] + seen[-3:]))
            raise
        self.assertGreater(g["vllm:kv_cache_usage_perc"], 0, g)
        self.assertLessEqual(g["vllm:kv_cache_usage_perc"], 1, g)
        self.assertEqual(g["vllm:gpu_cache_usage_perc"], g["vllm:kv_cache_usage_perc"], g)
        self.assertEqual(g["tessera_kv_utilization"], g["vllm:kv_cache_usage_perc"], g)
        self.assertEqual(g["tessera_requests_waiting"], g["vllm:num_requests_waiting"], g)
        self.assertEqual(g["tessera_requests_running"], g["vllm:num_requests_running"], g)
        # The heartbeat: the engine is inside a turn at some poll, and the
        # process is alive throughout.
        turns = []
        for _ in range(40):
            st, body = probe(S.port, "/health/live")
            self.assertEqual(st, 200, body)
            turns.append(body["longest_turn_s"])
            if turns[-1] > 0:
                break
            time.sleep(0.01)
        self.assertGreater(max(turns), 0, "no engine turn seen in flight during generation: %r" % turns)
        self.assertLess(max(turns), 30, turns)
        log("probes: busy gauges %r, engine turn %.4fs" % (g, max(turns)))
        for rs in streams:      # hang up: every request is cancelled
            rs.close()

        def back():
            g = gauges(get_metrics(S.port, S.metrics_key))
            return g if all(v == 0 for v in g.values()) else None
        wait_until(back, 10, what="every server-wide gauge back to 0 after the requests ended")
        wait_until(lambda: probe(S.port, "/health/live")[1]["longest_turn_s"] == 0, 5,
                   what="no engine turn in flight once idle")


class PublicPool(unittest.TestCase):
    """public_pool_metrics: the endpoint picker scrapes /metrics without a
    key; it gets the model-server gauges and nothing that names a tenant."""

    def test_keyless_scrape(self):
        r = request(S.port, "GET", "/metrics", timeout=10)
        self.assertEqual(r.status, 401, "without public_pool_metrics /metrics needs a key: %r" % (r,))
        p = Server(ENV, "pool", [Model("slow", SLOW, threads=1, max_seqs=1)], [Tenant(ENV, "acme", "gold")],
                   top={"public_pool_metrics": "true"}).start()
        try:
            r = request(p.port, "GET", "/metrics", timeout=10)
            self.assertEqual(r.status, 200, r)
            text = r.body.decode()
            for n in VLLM + ("tessera_requests_waiting", "tessera_requests_running"):
                self.assertIn('%s{model="slow"' % n, text, "%s missing from the keyless scrape" % n)
            self.assertNotIn("acme", text, "a keyless scrape names a tenant")
            self.assertNotIn("tessera_requests_total", text, "a keyless scrape carries tenants' series")
            full = request(p.port, "GET", "/metrics", key=p.metrics_key, timeout=10)
            self.assertEqual(full.status, 200, full)
            for n in VLLM + ("tessera_requests_total",):
                self.assertIn(n, full.body.decode(), "%s missing from the keyed scrape" % n)
            self.assertIn('tenant="acme"', full.body.decode())
        finally:
            self.assertEqual(p.stop(timeout=20), 0)


class Draining(unittest.TestCase):
    def test_ready_503_while_draining(self):
        grace = 2
        s = Server(ENV, "drain", [Model("slow", SLOW, threads=1, max_seqs=1)], [Tenant(ENV, "t", "gold")],
                   limits={"shutdown_grace_s": grace})
        self.addCleanup(s.kill)
        s.start()
        keep = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        self.addCleanup(keep.close)
        self.assertEqual(probe(s.port, "/health/ready", conn=keep), (200, {"status": "ready", "longest_turn_s": 0.0}))
        rs = RawStream(s.port, COMP, {"model": "slow", "prompt": "go on and on", "max_tokens": 1000,
                                      "ignore_eos": True, "temperature": 0, "stream": True}, s.key("t"))
        self.addCleanup(rs.close)
        self.assertNotEqual(rs.next_event(), "[DONE]")

        def in_flight():
            r = request(s.port, "GET", "/admin/tenants", key=s.admin_key, conn=keep)
            return sum(d["running"] + d["queued"] for d in r.json()["data"]) if r.status == 200 else r
        wait_until(lambda: in_flight() == 1, 3, what="the stream running before SIGTERM")
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        wait_until(lambda: probe(s.port, "/health/ready", conn=keep)[0] == 503, 3,
                   what="/health/ready 503 after SIGTERM")
        st, body = probe(s.port, "/health/ready", conn=keep)
        self.assertEqual((st, body["status"]), (503, "draining"), body)
        st, body = probe(s.port, "/health/live", conn=keep)
        self.assertEqual((st, body["status"]), (200, "ok"), body)
        # ...while the stream was still in flight (else this proves nothing).
        self.assertEqual(in_flight(), 1)
        # The stream then ends explicitly: finished within the grace, or
        # failed with an error event past it.
        events = []
        while True:
            ev = rs.next_event()
            if ev is None or ev == "[DONE]":
                events.append(ev)
                break
            events.append(ev)
        self.assertEqual(events[-1], "[DONE]", events[-3:])
        last = json.loads(events[-2])
        self.assertTrue("error" in last or last["choices"][0]["finish_reason"] == "length", last)
        rc = s.wait(grace + 8 - (time.monotonic() - t0))
        self.assertEqual(rc, 0, "exit status after SIGTERM; stderr: %s" % s.stderr()[-2000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
