"""test_serve.py - black-box tests of `tessera serve`: the real binary, a real
config, HTTP over 127.0.0.1.

One main server (setUpModule) carries most tests: two models ("tiny", fast,
for volume; "slow", the 15m preset, so a request lasts long enough to hang up
on) and tenants on gold/silver/bronze, one with requests_per_minute: 2. Its
clean exit (status 0 after SIGTERM) is checked in tearDownModule. The
shutdown tests start their own servers, since they end them.

Run by tests/serve_test.sh (ctest) with TS_TESSERA and TS_TMPDIR set; also
runnable by hand:
    TS_TESSERA=build/tessera TS_TMPDIR=/tmp/ts /usr/bin/python3 tests/integration/test_serve.py -v
"""

import http.client
import json
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Model, RawStream, Server, Tenant, get_metrics, log, make_model,  # noqa: E402
                     metric_value, request, stream, wait_until)

ENV = Env("serve_test")
S = None                # the main server
SLOW_PATH = None
TINY_PATH = None
COMP = "/v1/completions"
CHAT = "/v1/chat/completions"
TENANTS = ("gold-a", "silver-b", "bronze-c", "dc")   # unlimited tenants


def setUpModule():
    global S, SLOW_PATH, TINY_PATH
    tiny = TINY_PATH = make_model(ENV)
    SLOW_PATH = make_model(ENV, "slow.gguf", preset="15m", ctx=4096)
    tenants = [Tenant(ENV, "gold-a", "gold"), Tenant(ENV, "silver-b", "silver"),
               Tenant(ENV, "bronze-c", "bronze"), Tenant(ENV, "dc", "silver"),
               Tenant(ENV, "limited", "bronze", requests_per_minute=2)]
    # threads: 1 on "slow" is deliberate: fewer threads than the OpenMP
    # default once overran the engine's per-thread scratch.
    S = Server(ENV, "main", [Model("tiny", tiny, threads=2), Model("slow", SLOW_PATH, threads=1)],
               tenants, limits={"max_body_bytes": 65536, "shutdown_grace_s": 2}).start()


def tearDownModule():
    rc = S.stop(timeout=20)
    if rc != 0:
        raise AssertionError("the main server exited with %r after SIGTERM (want 0); stderr:\n%s"
                             % (rc, S.stderr()[-3000:]))


def admin_rows(server=None):
    s = server or S
    r = request(s.port, "GET", "/admin/tenants", key=s.admin_key)
    assert r.status == 200, r
    return r.json()["data"]


def admin_sum(field, tenant, server=None):
    """field summed over models for one tenant."""
    return sum(d[field] for d in admin_rows(server) if d["tenant"] == tenant)


def settled(field="submitted", server=None, timeout=5):
    """{tenant: field summed over models} once nothing is live, every
    submitted request has ended, and two reads 0.1 s apart agree. A worker
    publishes these numbers just after it hands a request its end, so they
    can trail, by a moment, a response the client already has."""
    def idle():
        rows = admin_rows(server)
        if not all(d["running"] + d["queued"] + d["swapped"] == 0 and
                   d["submitted"] == d["completed"] + d["cancelled"] + d["failed"] for d in rows):
            return None
        return json.dumps(rows, sort_keys=True)

    def stable():
        a = idle()
        time.sleep(0.1)
        return a if a is not None and a == idle() else None
    out = {}
    for d in json.loads(wait_until(stable, timeout, what="the server to settle (nothing live in /admin/tenants)")):
        out[d["tenant"]] = out.get(d["tenant"], 0) + d[field]
    return out


class OaiAsserts(unittest.TestCase):
    def assertOaiError(self, r, status, type_=None, param=None, code=None):
        """r is an OpenAI-shaped error: {"error":{"message","type","param","code"}}."""
        self.assertEqual(r.status, status, r)
        self.assertTrue(r.headers.get("content-type", "").startswith("application/json"), r.headers)
        j = r.json()
        self.assertEqual(set(j), {"error"}, j)
        e = j["error"]
        self.assertEqual(set(e), {"message", "type", "param", "code"}, e)
        self.assertIsInstance(e["message"], str)
        self.assertTrue(e["message"], e)
        self.assertIsInstance(e["type"], str)
        self.assertTrue(e["param"] is None or isinstance(e["param"], str), e)
        self.assertTrue(e["code"] is None or isinstance(e["code"], str), e)
        if type_ is not None:
            self.assertEqual(e["type"], type_, e)
        if param is not None:
            self.assertEqual(e["param"], param, e)
        if code is not None:
            self.assertEqual(e["code"], code, e)
        return e


# ---- 1. errors ---------------------------------------------------------------------


class Errors(OaiAsserts):
    def post(self, body, key="gold-a", path=COMP, **kw):
        return request(S.port, "POST", path, body, key=S.key(key) if key else None, **kw)

    def test_400_malformed_json(self):
        self.assertOaiError(self.post(b'{"model": "tiny", "prompt": '), 400, "invalid_request_error")
        self.assertOaiError(self.post(b'not json at all', path=CHAT), 400, "invalid_request_error")

    def test_400_bad_parameters(self):
        base = {"model": "tiny", "prompt": "hi", "max_tokens": 4}
        for field, value in (("temperature", 5), ("max_tokens", -1), ("n", 0), ("top_p", 0),
                             ("temperature", "hot"), ("stream", "yes")):
            with self.subTest(field=field, value=value):
                self.assertOaiError(self.post(dict(base, **{field: value})), 400, "invalid_request_error",
                                    param=field)
        chat = {"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]}
        self.assertOaiError(self.post(chat, path=CHAT), 400, "invalid_request_error")
        self.assertOaiError(self.post({"model": "tiny", "messages": []}, path=CHAT), 400,
                            "invalid_request_error", param="messages")

    def test_400_invalid_utf8(self):
        self.assertOaiError(self.post(b'{"model":"tiny","prompt":"ab\xff\xfecd","max_tokens":2}'), 400,
                            "invalid_request_error", param="prompt")
        # An overlong encoding of '/', and a lone surrogate, in a chat message.
        self.assertOaiError(self.post(b'{"model":"tiny","messages":[{"role":"user","content":"x\xc0\xafy"}]}',
                                      path=CHAT), 400, "invalid_request_error")
        self.assertOaiError(self.post(b'{"model":"tiny","messages":[{"role":"user","content":"\xed\xa0\x80"}]}',
                                      path=CHAT), 400, "invalid_request_error")

    def test_400_max_tokens_beyond_context(self):
        # ctx is 1024: 5000 can never fit.
        self.assertOaiError(self.post({"model": "tiny", "prompt": "hi", "max_tokens": 5000}), 400,
                            "invalid_request_error", param="max_tokens", code="context_length_exceeded")
        self.assertOaiError(self.post({"model": "tiny", "prompt": "hi", "max_tokens": 10 ** 9}), 400,
                            "invalid_request_error", param="max_tokens")

    def test_401_missing_and_wrong_key(self):
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        self.assertOaiError(self.post(body, key=None), 401, "authentication_error")
        self.assertOaiError(request(S.port, "POST", COMP, body, key="tsk-not-a-real-key"), 401,
                            "authentication_error")
        self.assertOaiError(request(S.port, "POST", COMP, body, headers={"Authorization": "Basic Zm9vOmJhcg=="}),
                            401, "authentication_error")
        # A key that differs from a real one in its last character.
        k = S.key("gold-a")
        self.assertOaiError(request(S.port, "POST", CHAT, {"model": "tiny", "messages": [{"role": "user",
                            "content": "hi"}]}, key=k[:-1] + ("A" if k[-1] != "A" else "B")), 401,
                            "authentication_error")

    def test_404_unknown_model_and_route(self):
        self.assertOaiError(self.post({"model": "no-such-model", "prompt": "hi"}), 404, param="model")
        self.assertOaiError(request(S.port, "GET", "/v1/nothing-here", key=S.key("gold-a")), 404)
        self.assertOaiError(request(S.port, "POST", "/v1/completion", {"model": "tiny"}, key=S.key("gold-a")), 404)

    def test_405_wrong_method(self):
        for method, path in (("GET", COMP), ("GET", CHAT), ("POST", "/v1/models"), ("DELETE", "/health"),
                             ("POST", "/metrics")):
            with self.subTest(method=method, path=path):
                r = request(S.port, method, path, key=S.key("gold-a"))
                self.assertOaiError(r, 405)
                # RFC 9110 15.5.6: a 405 must say which methods the route takes.
                self.assertIn("allow", r.headers, r.headers)
                self.assertNotIn(method, r.headers["allow"])

    def test_413_body_too_large(self):
        big = b'{"model":"tiny","prompt":"' + b"a" * 70000 + b'","max_tokens":1}'
        self.assertOaiError(self.post(big), 413)
        # Just under the limit the same shape of request gets past the size check
        # (and is then refused for its length in tokens, not its bytes).
        r = self.post(b'{"model":"tiny","prompt":"' + b"a b " * 15000 + b'","max_tokens":1}')
        self.assertNotEqual(r.status, 413, r)

    def test_429_rate_limit_with_retry_after(self):
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 1}
        for _ in range(2):      # requests_per_minute: 2, a full bucket holds 2
            self.assertEqual(self.post(body, key="limited").status, 200)
        r = self.post(body, key="limited")
        self.assertOaiError(r, 429, "rate_limit_error")
        self.assertIn("retry-after", r.headers, r.headers)
        ra = r.headers["retry-after"]
        self.assertTrue(ra.isdigit() and int(ra) > 0, "Retry-After %r is not a positive integer" % ra)
        self.assertLessEqual(int(ra), 60)
        m = get_metrics(S.port, S.metrics_key)
        self.assertGreaterEqual(metric_value(m, "tessera_http_responses_total", tenant="limited", code="429"), 1)
        self.assertGreaterEqual(metric_value(m, "tessera_requests_total", tenant="limited",
                                             outcome="rejected_rate_requests"), 1)
        self.assertGreaterEqual(metric_value(m, "tessera_rejections_total", tenant="limited",
                                             reason="rate_requests"), 1)
        # Another tenant is not affected.
        self.assertEqual(self.post(body, key="bronze-c").status, 200)

    def test_bad_requests_change_nothing(self):
        """Invariant 4: a refused request never reaches the scheduler."""
        before = settled()
        self.post(b"{", key="silver-b")
        self.post({"model": "tiny", "prompt": "hi", "temperature": 9}, key="silver-b")
        self.post({"model": "tiny", "prompt": "hi", "max_tokens": 5000}, key="silver-b")
        self.post({"model": "nope", "prompt": "hi"}, key="silver-b")
        self.post({"model": "tiny", "prompt": "hi"}, key=None)
        time.sleep(0.1)     # anything wrongly submitted would show by now
        self.assertEqual(settled(), before)


# ---- 2. non-streaming -------------------------------------------------------------


def complete(prompt, key="gold-a", max_tokens=12, model="tiny", **kw):
    r = request(S.port, "POST", COMP, dict({"model": model, "prompt": prompt, "max_tokens": max_tokens}, **kw),
                key=S.key(key))
    assert r.status == 200, r
    return r.json()


def chat(content, key="gold-a", max_tokens=12, model="tiny", **kw):
    body = dict({"model": model, "max_tokens": max_tokens,
                 "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]}, **kw)
    r = request(S.port, "POST", CHAT, body, key=S.key(key))
    assert r.status == 200, r
    return r.json()


class NonStreaming(OaiAsserts):
    def check_usage(self, j, max_tokens):
        u = j["usage"]
        self.assertGreater(u["prompt_tokens"], 0)
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        fr = j["choices"][0]["finish_reason"]
        self.assertEqual(fr, "length", "the fixed synthetic model should not stop early here: %r" % j)
        self.assertEqual(u["completion_tokens"], max_tokens)

    def test_completion(self):
        j = complete("The quick brown fox", max_tokens=12, temperature=0)
        self.assertEqual(j["object"], "text_completion")
        self.assertTrue(j["id"].startswith("cmpl-"), j)
        self.assertEqual(j["model"], "tiny")
        self.assertIsInstance(j["created"], int)
        self.assertEqual(len(j["choices"]), 1)
        self.assertEqual(j["choices"][0]["index"], 0)
        self.assertIsInstance(j["choices"][0]["text"], str)
        self.assertTrue(j["choices"][0]["text"])
        self.check_usage(j, 12)

    def test_chat(self):
        j = chat("Say something.", max_tokens=10, temperature=0)
        self.assertEqual(j["object"], "chat.completion")
        self.assertTrue(j["id"].startswith("chatcmpl-"), j)
        msg = j["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        self.assertIsInstance(msg["content"], str)
        self.check_usage(j, 10)

    def test_greedy_is_deterministic(self):
        a = complete("Once upon a time", max_tokens=16, temperature=0)
        b = complete("Once upon a time", max_tokens=16, temperature=0, key="silver-b")
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        self.assertNotEqual(a["id"], b["id"])
        c = chat("Once upon a time", max_tokens=16, temperature=0)
        d = chat("Once upon a time", max_tokens=16, temperature=0)
        self.assertEqual(c["choices"][0]["message"]["content"], d["choices"][0]["message"]["content"])
        # And the prompt matters: a different one gives a different answer.
        e = complete("Completely different words here", max_tokens=16, temperature=0)
        self.assertNotEqual(a["choices"][0]["text"], e["choices"][0]["text"])

    def test_seed_reproducible(self):
        kw = dict(max_tokens=24, temperature=1.0)
        a = complete("Sample me", seed=1234, **kw)["choices"][0]["text"]
        b = complete("Sample me", seed=1234, **kw)["choices"][0]["text"]
        c = complete("Sample me", seed=99, **kw)["choices"][0]["text"]
        self.assertEqual(a, b, "the same seed must give the same sample")
        self.assertNotEqual(a, c, "a different seed should give a different sample")
        # Unseeded requests are not all the same sample.
        u = {complete("Sample me", **kw)["choices"][0]["text"] for _ in range(3)}
        self.assertGreater(len(u), 1, u)
        x = chat("Sample me", seed=7, **kw)["choices"][0]["message"]["content"]
        y = chat("Sample me", seed=7, **kw)["choices"][0]["message"]["content"]
        self.assertEqual(x, y)


# ---- 3. streaming -------------------------------------------------------------------


class Streaming(OaiAsserts):
    def stream(self, path, body, key="gold-a"):
        r, events = stream(S.port, path, body, S.key(key))
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers.get("content-type", "").startswith("text/event-stream"), r.headers)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(events.count("[DONE]"), 1)
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertTrue(chunks)
        self.assertEqual(len({c["id"] for c in chunks}), 1, "one id per stream")
        return chunks

    def check_finish(self, chunks, want="length"):
        with_choices = [c for c in chunks if c["choices"]]
        self.assertEqual(with_choices[-1]["choices"][0]["finish_reason"], want)
        for c in with_choices[:-1]:
            self.assertIsNone(c["choices"][0]["finish_reason"], c)

    def test_completion_stream_matches_non_streaming(self):
        prompt, n = "Streaming equals batch", 20
        want = complete(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]
        chunks = self.stream(COMP, {"model": "tiny", "prompt": prompt, "max_tokens": n, "temperature": 0,
                                    "stream": True})
        for c in chunks:
            self.assertEqual(c["object"], "text_completion")
            self.assertTrue(c["id"].startswith("cmpl-"))
            self.assertEqual(c["model"], "tiny")
            self.assertEqual(c["choices"][0]["index"], 0)
            self.assertNotIn("usage", c)
        self.check_finish(chunks)
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks), want)

    def test_chat_stream_matches_non_streaming(self):
        msgs = [{"role": "user", "content": "Tell me a story"}]
        n = 20
        r = request(S.port, "POST", CHAT, {"model": "tiny", "messages": msgs, "max_tokens": n, "temperature": 0},
                    key=S.key("silver-b"))
        want = r.json()["choices"][0]["message"]["content"]
        chunks = self.stream(CHAT, {"model": "tiny", "messages": msgs, "max_tokens": n, "temperature": 0,
                                    "stream": True}, key="silver-b")
        self.assertEqual(chunks[0]["choices"][0]["delta"].get("role"), "assistant")
        for c in chunks:
            self.assertEqual(c["object"], "chat.completion.chunk")
            self.assertTrue(c["id"].startswith("chatcmpl-"))
        for c in chunks[1:]:
            self.assertNotIn("role", c["choices"][0]["delta"])
        self.check_finish(chunks)
        self.assertEqual("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), want)

    def test_include_usage(self):
        n = 9
        for path, body in ((COMP, {"prompt": "usage please"}),
                           (CHAT, {"messages": [{"role": "user", "content": "usage please"}]})):
            with self.subTest(path=path):
                base = dict(body, model="tiny", max_tokens=n, temperature=0)
                plain = request(S.port, "POST", path, base, key=S.key("bronze-c")).json()
                chunks = self.stream(path, dict(base, stream=True, stream_options={"include_usage": True}),
                                     key="bronze-c")
                last = chunks[-1]
                self.assertEqual(last["choices"], [])
                self.assertEqual(last["usage"], plain["usage"])
                self.assertEqual(last["usage"]["completion_tokens"], n)
                self.check_finish(chunks[:-1])
                for c in chunks[:-1]:
                    self.assertIsNone(c.get("usage"), c)

    def test_stream_error_before_start_is_plain_json(self):
        r = request(S.port, "POST", COMP, {"model": "tiny", "prompt": "x", "stream": True, "temperature": 7},
                    key=S.key("gold-a"))
        self.assertOaiError(r, 400, param="temperature")


# ---- 4. disconnect mid-stream ---------------------------------------------------


class Disconnect(OaiAsserts):
    def gauges(self, tenant):
        m = get_metrics(S.port, S.metrics_key)
        return (metric_value(m, "tessera_kv_blocks", tenant=tenant),
                metric_value(m, "tessera_running_requests", tenant=tenant))

    def test_hang_up_frees_everything(self):
        cancelled0 = settled("cancelled")["dc"]
        rs = RawStream(S.port, COMP, {"model": "slow", "prompt": "a long story", "max_tokens": 900,
                                      "ignore_eos": True, "temperature": 0, "stream": True}, S.key("dc"))
        try:
            for _ in range(3):
                ev = rs.next_event()
                self.assertIsNotNone(ev)
                self.assertNotEqual(ev, "[DONE]")
            self.assertEqual(rs.status, 200)
            # While it runs the tenant holds blocks: the gauges are live.
            wait_until(lambda: (lambda kv, run: kv and kv > 0 and run == 1)(*self.gauges("dc")), 3,
                       what="dc's kv gauge > 0 while streaming")
        finally:
            rs.close()
        t0 = time.monotonic()
        wait_until(lambda: self.gauges("dc") == (0, 0), 3,
                   what="tessera_kv_blocks and tessera_running_requests of dc back to 0 after the hang-up")
        wait_until(lambda: admin_sum("cancelled", "dc") == cancelled0 + 1, 3, what="dc's cancelled count + 1")
        rows = [d for d in admin_rows() if d["tenant"] == "dc"]
        self.assertEqual(sum(d["running"] + d["queued"] + d["kv_blocks"] for d in rows), 0, rows)
        log("disconnect: freed %.2fs after the hang-up" % (time.monotonic() - t0))


    def test_hang_up_while_suspended(self):
        """A whole-answer request sleeps suspended in MHD until it is done,
        so only the hang-up watcher can notice its client leaving: the
        request must be cancelled and everything it held freed."""
        cancelled0 = settled("cancelled")["dc"]
        rs = RawStream(S.port, COMP, {"model": "slow", "prompt": "a long story", "max_tokens": 900,
                                      "ignore_eos": True, "temperature": 0, "stream": False}, S.key("dc"))
        try:
            wait_until(lambda: (lambda kv, run: kv and kv > 0 and run == 1)(*self.gauges("dc")), 3,
                       what="dc running its whole-answer request")
        finally:
            rs.close()
        wait_until(lambda: self.gauges("dc") == (0, 0), 3,
                   what="dc's gauges back to 0 after hanging up on a suspended request")
        wait_until(lambda: admin_sum("cancelled", "dc") == cancelled0 + 1, 3, what="dc's cancelled count + 1")

    def test_gauges_add_up_across_models(self):
        """A tenant's gauges cover all models: traffic on "tiny" must not
        hide the blocks the same tenant holds on "slow"."""
        rs = RawStream(S.port, COMP, {"model": "slow", "prompt": "keep going", "max_tokens": 900,
                                      "ignore_eos": True, "temperature": 0, "stream": True}, S.key("dc"))
        try:
            self.assertNotEqual(rs.next_event(), "[DONE]")
            wait_until(lambda: (self.gauges("dc")[1] or 0) >= 1, 3, what="dc running on slow")
            zeros = 0
            for i in range(20):
                complete("short %d" % i, key="dc", max_tokens=2)
                kv, running = self.gauges("dc")
                zeros += kv == 0 or running == 0
            self.assertEqual(zeros, 0, "dc's gauges read 0 in %d of 20 reads while it held KV on slow" % zeros)
        finally:
            rs.close()
        wait_until(lambda: self.gauges("dc") == (0, 0), 3, what="dc's gauges back to 0")


# ---- 5. concurrency -------------------------------------------------------------


class Concurrency(OaiAsserts):
    N = 200

    def test_200_concurrent_streams(self):
        done0, sub0 = settled("completed"), settled("submitted")
        counts0 = {t: (done0[t], sub0[t]) for t in TENANTS}
        m0 = get_metrics(S.port, S.metrics_key)
        ok0 = {t: metric_value(m0, "tessera_http_responses_total", tenant=t, code="200") for t in TENANTS}
        done_m0 = {t: metric_value(m0, "tessera_requests_total", tenant=t, outcome="completed") for t in TENANTS}
        results = [None] * self.N
        go = threading.Barrier(self.N, timeout=30)

        def one(i):
            tenant = TENANTS[i % len(TENANTS)]
            kind = CHAT if i % 2 else COMP
            body = {"model": "tiny", "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}
            if kind == CHAT:
                body["messages"] = [{"role": "user", "content": "request %d" % i}]
            else:
                body["prompt"] = "request %d" % i
            try:
                go.wait()
                results[i] = (tenant,) + stream(S.port, kind, body, S.key(tenant), timeout=60)
            except Exception as e:  # recorded, asserted below
                results[i] = (tenant, e, None)

        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(self.N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        self.assertFalse(any(t.is_alive() for t in threads), "some streams never finished")
        log("concurrency: %d streams in %.2fs" % (self.N, time.monotonic() - t0))
        ids = []
        per_tenant = {t: 0 for t in TENANTS}
        for i, res in enumerate(results):
            tenant, r, events = res
            self.assertNotIsInstance(r, Exception, "stream %d failed: %r" % (i, r))
            self.assertEqual(r.status, 200, r)
            self.assertEqual(events[-1], "[DONE]", "stream %d" % i)
            self.assertEqual(events.count("[DONE]"), 1)
            chunks = [json.loads(e) for e in events[:-1]]
            self.assertEqual(len({c["id"] for c in chunks}), 1, "stream %d mixes ids" % i)
            finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
            self.assertEqual(len(finals), 1, "stream %d: %r" % (i, events))
            self.assertIn(finals[0]["choices"][0]["finish_reason"], ("length", "stop"))
            self.assertEqual(chunks[-1]["choices"], [])
            self.assertGreater(chunks[-1]["usage"]["completion_tokens"], 0)
            ids.append(chunks[0]["id"])
            per_tenant[tenant] += 1
        self.assertEqual(len(ids), self.N)
        self.assertEqual(len(set(ids)), self.N, "duplicate ids")

        def counts_match():
            for t in TENANTS:
                c, s = admin_sum("completed", t), admin_sum("submitted", t)
                if (c - counts0[t][0], s - counts0[t][1]) != (per_tenant[t], per_tenant[t]):
                    return False
            return True
        wait_until(counts_match, 5, what="/admin/tenants completed == submitted == streams sent, per tenant")
        self.assertEqual(sum(per_tenant.values()), self.N)

        # A request is counted when its connection completes, a moment after
        # the client read [DONE].
        def metrics_match():
            m = get_metrics(S.port, S.metrics_key)
            return all(metric_value(m, "tessera_http_responses_total", tenant=t, code="200") - ok0[t] == per_tenant[t]
                       and metric_value(m, "tessera_requests_total", tenant=t, outcome="completed") - done_m0[t]
                       == per_tenant[t]
                       and metric_value(m, "tessera_running_requests", tenant=t) == 0
                       and metric_value(m, "tessera_kv_blocks", tenant=t) == 0 for t in TENANTS)
        wait_until(metrics_match, 5, what="tessera_http_responses_total{code=200} and tessera_requests_total"
                   "{outcome=completed} += streams per tenant, gauges at 0")


# ---- 7. other routes -------------------------------------------------------------


class Routes(OaiAsserts):
    def test_models_needs_a_key(self):
        r = request(S.port, "GET", "/v1/models", key=S.key("bronze-c"))
        self.assertEqual(r.status, 200, r)
        j = r.json()
        self.assertEqual(j["object"], "list")
        self.assertEqual(sorted(m["id"] for m in j["data"]), ["slow", "tiny"])
        for m in j["data"]:
            self.assertEqual(m["object"], "model")
        self.assertOaiError(request(S.port, "GET", "/v1/models"), 401, "authentication_error")
        self.assertOaiError(request(S.port, "GET", "/v1/models", key="tsk-wrong"), 401, "authentication_error")

    def test_health(self):
        r = request(S.port, "GET", "/health")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"], "ok")

    def test_metrics_per_tenant(self):
        complete("metrics please", key="bronze-c", max_tokens=3)
        r = request(S.port, "GET", "/metrics", key=S.metrics_key)
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith("text/plain"), r.headers)
        text = r.body.decode()
        m = get_metrics(S.port, S.metrics_key)
        self.assertGreaterEqual(metric_value(m, "tessera_ttft_seconds_bucket", tenant="bronze-c", le="+Inf"), 1)
        self.assertGreaterEqual(metric_value(m, "tessera_ttft_seconds_count", tenant="bronze-c"), 1)
        for t in TENANTS + ("limited",):
            self.assertIn('tessera_ttft_seconds_bucket{tenant="%s",le="+Inf"}' % t, text)
        # Every family is introduced by HELP and TYPE.
        for fam in ("tessera_requests_total", "tessera_http_responses_total", "tessera_ttft_seconds", "tessera_kv_blocks",
                    "tessera_running_requests", "tessera_queue_depth", "tessera_step_seconds"):
            self.assertIn("# HELP %s " % fam, text)
            self.assertIn("# TYPE %s " % fam, text)
        # Each model's weights are resident once: at most its file (the
        # kernels read the mapping's layout, never a copy) plus its norms
        # made f32, and not nothing once it has answered.
        for name, path in (("tiny", TINY_PATH), ("slow", SLOW_PATH)):
            res = metric_value(m, "tessera_model_weights_resident_bytes", model=name)
            self.assertGreater(res, 0)
            self.assertLessEqual(res, os.path.getsize(path) * 1.1, name)
        # Histogram buckets are cumulative.
        buckets = [(l["le"], v) for n, l, v in m if n == "tessera_ttft_seconds_bucket" and l["tenant"] == "bronze-c"]
        vals = [v for _, v in buckets]
        self.assertEqual(vals, sorted(vals))
        self.assertEqual(buckets[-1][0], "+Inf")

    def test_admin_needs_the_admin_key(self):
        self.assertOaiError(request(S.port, "GET", "/admin/tenants"), 401, "authentication_error")
        self.assertOaiError(request(S.port, "GET", "/admin/tenants", key=S.key("gold-a")), 401,
                            "authentication_error")
        rows = admin_rows()
        self.assertEqual({(d["model"], d["tenant"]) for d in rows},
                         {(m, t) for m in ("tiny", "slow") for t in TENANTS + ("limited",)})
        tiers = {d["tenant"]: d["tier"] for d in rows}
        self.assertEqual(tiers["gold-a"], "gold")
        self.assertEqual(tiers["bronze-c"], "bronze")
        # The admin key is not a tenant key.
        self.assertOaiError(request(S.port, "POST", COMP, {"model": "tiny", "prompt": "x"}, key=S.admin_key),
                            401, "authentication_error")


# ---- 1 (503) and 6: shutdown -----------------------------------------------------


class Shutdown(OaiAsserts):
    def slow_server(self, name, grace):
        t = Tenant(ENV, "t", "gold")
        s = Server(ENV, name, [Model("slow", SLOW_PATH, threads=1)], [t],
                   limits={"shutdown_grace_s": grace})
        self.addCleanup(s.kill)
        return s.start()

    def test_503_while_draining_and_error_past_grace(self):
        """SIGTERM with a long stream in flight: the server stops listening
        (a new connection is refused), a request on a kept-alive connection
        gets 503 shutting_down, and the stream, which cannot finish within
        the 1 s grace, ends with an error event and [DONE]. The process then
        exits 0 by itself."""
        grace = 1
        s = self.slow_server("drain503", grace)
        keep = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        self.addCleanup(keep.close)
        self.assertEqual(request(s.port, "GET", "/health", conn=keep).status, 200)
        rs = RawStream(s.port, COMP, {"model": "slow", "prompt": "go on and on", "max_tokens": 3000,
                                      "ignore_eos": True, "temperature": 0, "stream": True}, s.key("t"))
        self.addCleanup(rs.close)
        self.assertNotEqual(rs.next_event(), "[DONE]")
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)

        # /health turns 503 on the kept connection once draining starts.
        def draining():
            try:
                return request(s.port, "GET", "/health", conn=keep).status == 503
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                return "conn: %r" % e
        how = wait_until(draining, 3, what="/health 503 after SIGTERM")
        if how is True:
            r = request(s.port, "POST", COMP, {"model": "slow", "prompt": "x", "max_tokens": 2}, key=s.key("t"),
                        conn=keep)
            self.assertOaiError(r, 503, "server_error", code="shutting_down")
        else:
            # Acceptable, documented alternative: the server dropped idle
            # keep-alive connections when it started draining.
            log("shutdown: kept-alive connection closed on drain (%s); no 503 body to check" % how)
        # A new connection is refused (the listener is closed) or answered 503.
        try:
            r = request(s.port, "POST", COMP, {"model": "slow", "prompt": "x", "max_tokens": 2}, key=s.key("t"),
                        timeout=5)
            self.assertOaiError(r, 503)
        except ConnectionRefusedError:
            pass
        # The long stream ends with an explicit error, not silently.
        events = []
        while True:
            ev = rs.next_event()
            if ev is None:
                break
            events.append(ev)
            if ev == "[DONE]":
                break
        t_end = time.monotonic() - t0
        self.assertEqual(events[-1], "[DONE]", events[-3:])
        err = json.loads(events[-2])
        self.assertIn("error", err, events[-3:])
        self.assertEqual(err["error"]["type"], "server_error", err)
        self.assertGreaterEqual(t_end, grace * 0.8, "the stream was cut before the grace ran out")
        rc = s.wait(grace + 8 - (time.monotonic() - t0))
        self.assertEqual(rc, 0, "exit status after SIGTERM; stderr: %s" % s.stderr()[-2000:])
        log("shutdown: stream failed %.2fs after SIGTERM (grace %ds), exit %.2fs after"
            % (t_end, grace, time.monotonic() - t0))

    def test_sigterm_lets_streams_finish(self):
        # The grace must outlast 150 tokens of three streams on one thread
        # even in the sanitizer build beside the soak (10 s did not, once);
        # the test then checks the server did not wait it out.
        grace, n = 40, 150
        s = self.slow_server("drain", grace)
        streams = [RawStream(s.port, COMP, {"model": "slow", "prompt": "stream %d" % i, "max_tokens": n,
                                            "temperature": 0, "stream": True,
                                            "stream_options": {"include_usage": True}}, s.key("t"))
                   for i in range(3)]
        for rs in streams:
            self.addCleanup(rs.close)
            self.assertNotEqual(rs.next_event(), "[DONE]")
        # All three are still generating when the signal comes (150 tokens
        # of the 15m model take far longer than this check).
        wait_until(lambda: sum(d["running"] + d["queued"] for d in admin_rows(s)) == 3, 2,
                   what="3 streams running before SIGTERM (else the test proves nothing)")
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        for i, rs in enumerate(streams):
            events = []
            while True:
                ev = rs.next_event()
                if ev is None or ev == "[DONE]":
                    events.append(ev)
                    break
                events.append(ev)
            self.assertEqual(events[-1], "[DONE]", "stream %d: %r" % (i, events[-3:]))
            usage = json.loads(events[-2])
            self.assertIn("usage", usage, "stream %d did not finish within the grace: %r" % (i, events[-3:]))
            self.assertEqual(usage["usage"]["completion_tokens"], n, usage)
            fin = json.loads(events[-3])
            self.assertEqual(fin["choices"][0]["finish_reason"], "length", fin)
        rc = s.wait(grace + 5 - (time.monotonic() - t0))
        self.assertEqual(rc, 0, "exit status after SIGTERM; stderr: %s" % s.stderr()[-2000:])
        took = time.monotonic() - t0
        self.assertLess(took, grace, "with nothing left to do it should not wait out the grace")
        self.assertTrue(any("draining" in ln for ln in s.lines), s.lines)
        log("drain: 3 streams finished and the server exited %.2fs after SIGTERM" % took)


if __name__ == "__main__":
    unittest.main(verbosity=2)
