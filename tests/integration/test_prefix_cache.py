"""test_prefix_cache.py - automatic prefix caching end to end, against the
real `tessera serve` on 127.0.0.1: a repeated prompt is served from the
cache (the per-tenant hit counters of /metrics move) with the same greedy
text as a miss and as a model with the cache off; tenants never share
blocks unless a declared public prefix says so; cache_salt separates
requests of one tenant; a bad cache_salt is a 400.

The model is the tiny synthetic one (random weights). The engine-level
check that a hit's logits are bit-identical to a miss's is
tests/test_engine_cache.c; here the text must match.

Run by tests/prefix_cache.sh (ctest) with TS_TESSERA and TS_TMPDIR set.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Env, Model, Server, Tenant, get_metrics, make_model, metric_value, request  # noqa: E402

ENV = Env("prefix_cache_test")
S = None
COMP = "/v1/completions"
# A long prompt: the tiny vocabulary spells it in a few hundred tokens.
SYSTEM = " ".join("rule %d: answer briefly and politely, citing section %d." % (i, i * 7) for i in range(12))


def setUpModule():
    global S
    tiny = make_model(ENV)
    S = Server(ENV, "prefix", [
        Model("cached", tiny, threads=2),
        # A step takes every choice's whole prompt at once: without
        # wk_req_after they would all be computed in one step, sharing none.
        Model("wide", tiny, threads=2, budget_max=8192, max_seqs=8),
        Model("plain", tiny, threads=1, prefix_cache="{enabled: false}"),
        Model("public", tiny, threads=1, prefix_cache='{shared_prefixes: ["%s"]}' % SYSTEM),
    ], [Tenant(ENV, "a", "gold"), Tenant(ENV, "b", "gold")]).start()


def tearDownModule():
    if S:
        S.stop()


def complete(model, prompt, tenant="a", **extra):
    body = {"model": model, "prompt": prompt, "max_tokens": 6, "temperature": 0}
    body.update(extra)
    r = request(S.port, "POST", COMP, body, key=S.key(tenant))
    return r


def counters(tenant):
    m = get_metrics(S.port, S.admin_key)
    return (metric_value(m, "tessera_prefix_cache_query_tokens_total", tenant=tenant) or 0,
            metric_value(m, "tessera_prefix_cache_hit_tokens_total", tenant=tenant) or 0)


def text(model, prompt, tenant="a", **extra):
    """The greedy text; returns once the tenant's counters show the request
    (the worker publishes them after the step that may have ended it; a
    model without the cache looks nothing up)."""
    before, _ = counters(tenant)
    r = complete(model, prompt, tenant, **extra)
    if r.status != 200:
        raise AssertionError(r)
    deadline = time.time() + 5
    while model != "plain" and counters(tenant)[0] == before and time.time() < deadline:
        time.sleep(0.02)
    return r.json()["choices"][0]["text"]


def blocks(model):
    return metric_value(get_metrics(S.port, S.admin_key), "tessera_prefix_cache_blocks", model=model)


class PrefixCache(unittest.TestCase):
    def test_1_hit_same_text_as_miss(self):
        prompt = SYSTEM + " Question one: what is rule 3?"
        q0, h0 = counters("a")
        miss = text("cached", prompt)
        q1, h1 = counters("a")
        self.assertGreater(q1, q0)
        self.assertEqual(h1, h0, "a first prompt finds nothing")
        hit = text("cached", prompt)
        q2, h2 = counters("a")
        self.assertGreater(h2 - h1, 0.5 * (q2 - q1), "the second time most of the prompt is cached")
        self.assertEqual(hit, miss)
        self.assertEqual(text("plain", prompt), miss)
        self.assertGreater(blocks("cached"), 0)
        self.assertEqual(blocks("plain"), 0)

    def test_2_tenants_do_not_share(self):
        prompt = SYSTEM + " Question two: what is rule 5?"
        text("cached", prompt, "a")
        _, hb0 = counters("b")
        text("cached", prompt, "b")
        _, hb1 = counters("b")
        self.assertEqual(hb1, hb0, "b must not find a's blocks")
        text("cached", prompt, "b")
        _, hb2 = counters("b")
        self.assertGreater(hb2, hb1, "b finds its own")

    def test_3_cache_salt(self):
        prompt = SYSTEM + " Question three: what is rule 9?"
        text("cached", prompt)
        _, h0 = counters("a")
        text("cached", prompt, cache_salt="s1")
        _, h1 = counters("a")
        self.assertEqual(h1, h0, "another salt: another cache")
        text("cached", prompt, cache_salt="s1")
        _, h2 = counters("a")
        self.assertGreater(h2, h1, "the same salt shares")
        r = complete("cached", prompt, cache_salt=7)
        self.assertEqual(r.status, 400, r)
        self.assertIn("cache_salt", r.body.decode())

    def test_4_public_prefix_shared(self):
        text("public", SYSTEM + " Question four: who are you?", "a")
        qb0, hb0 = counters("b")
        text("public", SYSTEM + " Question five: where are you?", "b")
        qb1, hb1 = counters("b")
        self.assertGreater(hb1 - hb0, 0.5 * (qb1 - qb0), "the declared prefix is shared across tenants")

    def test_5_choices_share_the_prompt(self):
        """n choices of one prompt: the first computes the prompt, the
        others start after it and find its blocks (wk_req_after); the
        cache-off model computes every one."""
        prompt = SYSTEM + " Question six: how many rules?"
        q0, h0 = counters("a")
        r = complete("wide", prompt, n=4, temperature=1, seed=5)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(r.json()["choices"]), 4)
        deadline = time.time() + 5
        while counters("a")[0] - q0 < 4 and time.time() < deadline:
            time.sleep(0.02)
        q1, h1 = counters("a")
        looked = q1 - q0                      # four prompts looked up
        self.assertGreater(h1 - h0, 0.6 * looked, "three of the four choices found the prompt cached")
        r = complete("plain", prompt, n=4, temperature=1, seed=5)
        self.assertEqual(r.status, 200, r)


if __name__ == "__main__":
    unittest.main()
