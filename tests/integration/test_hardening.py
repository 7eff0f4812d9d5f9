"""test_hardening.py - black-box tests of the request-level hardening of
`tessera serve` (issue 11), each written to fail against the server before
the fix:

  - request smuggling: Content-Length with Transfer-Encoding (and other
    ambiguous framing) gets 400 and a closed connection, so a request hidden
    in the body is never answered (RFC 9112 6.1);
  - a repeated Authorization header gets 400;
  - a repeated JSON key, at any depth, gets 400 naming the key;
  - a declared Content-Length over max_body_bytes gets 413 on the headers,
    without the body being sent, counted under the tenant whose key it bore;
  - /metrics needs the metrics key or the admin key;
  - response ids are 96 random bits, not a counter;
  - a stream that fails after its 200 (a queue timeout) counts as
    failed_queue_timeout, not as completed, and every request of a tenant
    has exactly one outcome.

Run by tests/serve_hardening.sh with TS_TESSERA, TS_TMPDIR and TS_SRC set.
"""

import json
import os
import re
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Model, RawStream, Server, Tenant, get_metrics, make_model, metric_value,  # noqa: E402
                     request, wait_until)

ENV = Env("serve_hardening")
S = None
SLOW_PATH = None
COMP = "/v1/completions"
MAX_BODY = 65536


def setUpModule():
    global S, SLOW_PATH
    tiny = make_model(ENV)
    SLOW_PATH = make_model(ENV, "slow.gguf", preset="15m")
    S = Server(ENV, "main", [Model("tiny", tiny)], [Tenant(ENV, "a", "gold"), Tenant(ENV, "b", "silver")],
               limits={"max_body_bytes": MAX_BODY, "shutdown_grace_s": 2}).start()


def tearDownModule():
    rc = S.stop(timeout=20)
    if rc != 0:
        raise AssertionError("the server exited with %r; stderr:\n%s" % (rc, S.stderr()[-3000:]))


def exchange(raw, timeout=3.0, port=None):
    """Send raw bytes on a new connection and read until the server closes
    it or timeout passes: (bytes received, closed by the server?, seconds)."""
    s = socket.create_connection(("127.0.0.1", port or S.port), timeout=timeout)
    t0 = time.monotonic()
    data, closed = b"", False
    try:
        s.sendall(raw)
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            data += d
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        pass
    finally:
        s.close()
    return data, closed, time.monotonic() - t0


def statuses(data):
    """The status codes of every HTTP response in data, in order."""
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def completions_sum(server, tenant):
    m = get_metrics(server.port, server.metrics_key)
    return m, sum(v for n, l, v in m if n == "tessera_requests_total" and l.get("tenant") == tenant)


class Framing(unittest.TestCase):
    def test_smuggled_request_is_not_answered(self):
        """CL.TE: a proxy that trusts Content-Length forwards all of this as
        one request; a server that trusts chunked sees an empty body and
        then a second request. tessera must answer 400 once and close."""
        key = S.key("a").encode()
        body = b"0\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key +
               b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
               % len(body) + body)
        data, closed, _ = exchange(raw)
        self.assertEqual(statuses(data), [400], data)
        self.assertTrue(closed, "the connection stayed open after an ambiguous request: %r" % data)
        self.assertIn(b"Connection: close", data)
        self.assertIn(b"Transfer-Encoding and Content-Length", data)

    def test_other_ambiguous_framing(self):
        base = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for name, head in (("two Content-Length", b"Content-Length: 2\r\nContent-Length: 3\r\n"),
                           ("TE not chunked", b"Transfer-Encoding: gzip, chunked\r\n"),
                           ("two TE headers", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")):
            with self.subTest(name):
                data, closed, _ = exchange(base + head + b"\r\n0\r\n\r\n")
                self.assertEqual(statuses(data)[:1], [400], data)
                self.assertTrue(closed, data)

    def test_repeated_authorization_header(self):
        raw = (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + S.key("a").encode() +
               b"\r\nAuthorization: Bearer " + S.key("b").encode() + b"\r\n\r\n")
        data, _, _ = exchange(raw)
        self.assertEqual(statuses(data), [400], data)
        self.assertIn(b"more than one Authorization header", data)


class Bodies(unittest.TestCase):
    def test_repeated_json_key(self):
        for body, param in ((b'{"model":"tiny","prompt":"a","prompt":"b","max_tokens":2}', "prompt"),
                            (b'{"model":"tiny","prompt":"a","max_tokens":2,"stream":true,'
                             b'"stream_options":{"include_usage":true,"include_usage":false}}',
                             "stream_options.include_usage")):
            with self.subTest(param=param):
                r = request(S.port, "POST", COMP, body, key=S.key("a"))
                self.assertEqual(r.status, 400, r)
                e = r.json()["error"]
                self.assertEqual(e["param"], param, e)
                self.assertIn("duplicate key", e["message"])

    def test_declared_body_too_large_refused_on_headers(self):
        """1 GB declared, nothing sent after the headers: the 413 must come
        at once (the server used to wait for the body), on a closed
        connection, counted under the tenant whose key it carried."""
        m0 = get_metrics(S.port, S.metrics_key)
        before = metric_value(m0, "tessera_http_responses_total", tenant="b", code="413") or 0
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
               S.key("b").encode() + b"\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n")
        # Nothing follows the headers: a server waiting for the body never
        # answers, and the read times out (no wall-clock bound asserted:
        # the suite shares the machine with its heaviest tests).
        data, closed, _ = exchange(raw, timeout=10)
        self.assertEqual(statuses(data), [413], data)
        self.assertTrue(closed)
        wait_until(lambda: (metric_value(get_metrics(S.port, S.metrics_key), "tessera_http_responses_total",
                                         tenant="b", code="413") or 0) == before + 1, 10,
                   what="the 413 counted under tenant b")
        m = get_metrics(S.port, S.metrics_key)
        self.assertGreaterEqual(metric_value(m, "tessera_requests_total", tenant="b",
                                             outcome="rejected_body_too_large"), 1)

    def test_chunked_body_too_large(self):
        """Without a declared length the body is read up to the limit; the
        key is still checked first, and a 413 goes to its tenant."""
        chunk = b"a" * (MAX_BODY + 1)
        body = b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n"
        count = lambda: metric_value(get_metrics(S.port, S.metrics_key), "tessera_http_responses_total",  # noqa: E731
                                     tenant="a", code="413") or 0
        before = count()
        for key, want in ((S.key("a"), 413), ("tsk-wrong", 401)):
            with self.subTest(want=want):
                raw = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                       key.encode() + b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + body)
                data, _, _ = exchange(raw)
                self.assertEqual(statuses(data), [want], data[:300])
        wait_until(lambda: count() == before + 1, 10, what="the chunked 413 counted under tenant a")


class Metrics(unittest.TestCase):
    def test_metrics_need_a_metrics_or_admin_key(self):
        self.assertEqual(request(S.port, "GET", "/metrics").status, 401)
        self.assertEqual(request(S.port, "GET", "/metrics", key=S.key("a")).status, 401)
        self.assertEqual(request(S.port, "GET", "/metrics", key="tsk-wrong").status, 401)
        for key in (S.metrics_key, S.admin_key):
            r = request(S.port, "GET", "/metrics", key=key)
            self.assertEqual(r.status, 200, r)
            self.assertIn(b'tenant="a"', r.body)
        # The metrics key reads metrics only.
        self.assertEqual(request(S.port, "GET", "/admin/tenants", key=S.metrics_key).status, 401)
        self.assertEqual(request(S.port, "GET", "/v1/models", key=S.metrics_key).status, 401)
        r = request(S.port, "POST", COMP, {"model": "tiny", "prompt": "x", "max_tokens": 1}, key=S.metrics_key)
        self.assertEqual(r.status, 401, r)

    def test_response_ids_are_random(self):
        ids = []
        for i in range(12):
            r = request(S.port, "POST", COMP, {"model": "tiny", "prompt": "id %d" % i, "max_tokens": 1},
                        key=S.key("a" if i % 2 else "b"))
            self.assertEqual(r.status, 200, r)
            ids.append(r.json()["id"])
        for i in ids:
            self.assertRegex(i, r"^cmpl-[0-9a-f]{24}$")
        self.assertEqual(len(set(ids)), len(ids))
        # Not a counter: consecutive requests are far apart, in any order.
        vals = [int(i[5:], 16) for i in ids]
        gaps = [abs(b - a) for a, b in zip(vals, vals[1:])]
        self.assertGreater(min(gaps), 1 << 40, "ids look sequential: %r" % ids)


class Outcomes(unittest.TestCase):
    def test_stream_queue_timeout_is_a_failure(self):
        """One sequence per step on a slow model: a long stream holds it, and
        a second stream of the same tenant, on a tier with max_queue_ms: 200,
        times out in the queue after its 200 went out. It must count as
        failed_queue_timeout, never completed; the long one, closed by its
        client, as cancelled: two requests, two outcomes."""
        t = Tenant(ENV, "q", "rt")
        s = Server(ENV, "queue", [Model("slow", SLOW_PATH, threads=1, max_seqs=1)], [t],
                   tiers=["{name: rt, band: 0, ttft_ms: 100, max_queue_ms: 200}"],
                   limits={"shutdown_grace_s": 1})
        self.addCleanup(s.kill)
        s.start()
        # ignore_eos: the random model may draw its stop token early, free
        # the seat, and let the second request run. Which token comes when
        # depends on the CPU's float kernels, so no prompt is safe without it.
        # 900 tokens take 1.4 s on one core of the 2-core CI machine kind, so
        # the 200 ms queue limit leaves a margin for faster ones.
        long_stream = RawStream(s.port, COMP, {"model": "slow", "prompt": "a long story", "max_tokens": 900,
                                               "ignore_eos": True, "stream": True}, s.key("q"))
        self.addCleanup(long_stream.close)
        self.assertNotEqual(long_stream.next_event(), "[DONE]")
        r = request(s.port, "POST", COMP, {"model": "slow", "prompt": "my turn", "max_tokens": 4, "stream": True},
                    key=s.key("q"), timeout=20)
        self.assertEqual(r.status, 200, r)     # the stream started...
        events = [e for e in r.body.decode().split("\n\n") if e]
        last = json.loads(events[-2][len("data: "):])
        self.assertIn("error", last, events[-3:])  # ...and ended in an error event
        self.assertIn("max queue wait", last["error"]["message"])
        long_stream.close()

        def outcomes():
            m = get_metrics(s.port, s.metrics_key)
            got = {l["outcome"]: v for n, l, v in m
                   if n == "tessera_requests_total" and l.get("tenant") == "q" and v}
            return got if sum(got.values()) == 2 else None
        got = wait_until(outcomes, 10, what="two outcomes for tenant q")
        self.assertEqual(got, {"failed_queue_timeout": 1, "cancelled": 1})
        m = get_metrics(s.port, s.metrics_key)
        self.assertEqual(metric_value(m, "tessera_http_responses_total", tenant="q", code="200"), 2)
        self.assertEqual(s.stop(), 0)

    def test_one_outcome_per_request(self):
        """A tenant's requests of every kind: the outcome counters move by
        exactly the number of requests, one each."""
        _, before = completions_sum(S, "b")
        key = S.key("b")
        sent = 0
        for body in ({"model": "tiny", "prompt": "ok", "max_tokens": 2},
                     {"model": "tiny", "prompt": "ok", "max_tokens": 2, "stream": True},
                     {"model": "nope", "prompt": "x"},
                     {"model": "tiny", "prompt": "x", "temperature": 9},
                     b"{"):
            request(S.port, "POST", COMP, body, key=key)
            sent += 1
        request(S.port, "GET", "/v1/models", key=key)
        request(S.port, "GET", COMP, key=key)       # 405
        sent += 2
        wait_until(lambda: completions_sum(S, "b")[1] - before == sent, 10,
                   what="tenant b's outcomes to grow by %d" % sent)
        time.sleep(0.2)
        self.assertEqual(completions_sum(S, "b")[1] - before, sent)


if __name__ == "__main__":
    unittest.main(verbosity=2)
