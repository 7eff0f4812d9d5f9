"""test_cost_admin.py - cost per device-hour and the cost-model fit, against
the real `tessera serve` on 127.0.0.1 (issue 15):

- three models on the tiny synthetic GGUF: "priced" sets its own
  price_per_hour, "inherits" takes the file's top-level price_per_hour,
  "unknown" sets 0 (unknown, which overrides the default);
- two tenants send completions to each; once the server has settled,
  /admin/tenants' cost of every row equals engine_seconds x price / 3600
  (to the printed rounding), cost_per_request and cost_per_1k_tokens follow
  from it, and the unknown model's row has null price and costs;
- every row's first_tokens counts its completed requests, and its
  ttft_seconds_sum (the engine's side of TTFT) is more than nothing and
  less than the requests' whole time as the client measured it;
- /metrics has tessera_tenant_cost_total{tenant, model} equal to that cost
  and tessera_model_price_per_hour for the priced models, and neither for
  the unknown one;
- GET /admin/models (admin key only) gives each model's scheduler geometry
  as configured (block_size, max_seqs, budgets, KV and swap blocks from the
  configured bytes) and its step-time fit, which has seen the steps run,
  with the spread of the step times around it (step_ratio), and the second
  fit that only describes them (step_fit).

Run by tests/cost_admin.sh (ctest) with TS_TESSERA and TS_TMPDIR set.
"""

import json
import math
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Env, Model, Server, Tenant, get_metrics, make_model, metric_value, request, wait_until  # noqa: E402

ENV = Env("cost_admin_test")
S = None
WALL = {}  # (model, tenant): seconds the client waited for its requests
PRICE = {"priced": 3.6, "inherits": 1.8, "unknown": None}
GEOMETRY = {"block_size": 8, "max_seqs": 4, "budget_min": 16, "budget_max": 128}
KV_BYTES, SWAP_BYTES = 4 << 20, 1 << 20


def setUpModule():
    global S
    tiny = make_model(ENV)
    geo = dict(GEOMETRY, threads=1, kv_cache_bytes="4MiB", swap_bytes="1MiB")
    S = Server(ENV, "cost", [
        Model("priced", tiny, price_per_hour=3.6, kv_cache_dtype="f32", **geo),
        Model("inherits", tiny, **geo),
        Model("unknown", tiny, price_per_hour=0, **geo),
    ], [Tenant(ENV, "a", "gold"), Tenant(ENV, "b", "silver")])
    # The file's default price, which "inherits" takes.
    with open(S.config, "a") as f:
        f.write("price_per_hour: 1.8\n")
    S.start()
    for model in PRICE:
        for tenant, n in (("a", 3), ("b", 1)):
            for i in range(n):
                t0 = time.monotonic()
                r = request(S.port, "POST", "/v1/completions",
                            {"model": model, "prompt": "cost test %d %s" % (i, tenant), "max_tokens": 5,
                             "temperature": 0}, key=S.key(tenant))
                if r.status != 200:
                    raise AssertionError(r)
                WALL[(model, tenant)] = WALL.get((model, tenant), 0) + time.monotonic() - t0


def tearDownModule():
    if S:
        S.stop()


def admin(path):
    r = request(S.port, "GET", path, key=S.admin_key)
    if r.status != 200:
        raise AssertionError(r)
    return r.json()["data"]


def settled_rows():
    """/admin/tenants once nothing is live and two reads agree."""
    def idle():
        rows = admin("/admin/tenants")
        if not all(d["running"] + d["queued"] + d["swapped"] == 0 and
                   d["submitted"] == d["completed"] + d["cancelled"] + d["failed"] for d in rows):
            return None
        return json.dumps(rows, sort_keys=True)

    def stable():
        a = idle()
        return a if a is not None and a == idle() else None
    return json.loads(wait_until(stable, 20, what="the server to settle"))


def close(a, b, rel=1e-8, abs_=1e-12):
    return abs(a - b) <= abs_ + rel * max(abs(a), abs(b))


class Cost(unittest.TestCase):
    def test_1_admin_tenants_cost(self):
        rows = settled_rows()
        self.assertEqual(len(rows), 6)
        for d in rows:
            price = PRICE[d["model"]]
            self.assertEqual(d["completed"], 3 if d["tenant"] == "a" else 1, d)
            if price is None:
                for k in ("price_per_hour", "cost", "cost_per_request", "cost_per_1k_tokens"):
                    self.assertIsNone(d[k], (k, d))
                continue
            self.assertEqual(d["price_per_hour"], price, d)
            self.assertGreater(d["engine_seconds"], 0, d)
            # engine_seconds is printed to the microsecond: 5e-7 s of rounding.
            want = d["engine_seconds"] * price / 3600
            self.assertTrue(abs(d["cost"] - want) <= 5e-7 * price / 3600 + 1e-9 * want, (d, want))
            self.assertTrue(close(d["cost_per_request"], d["cost"] / d["completed"]), d)
            tokens = d["prompt_tokens"] + d["output_tokens"]
            self.assertTrue(close(d["cost_per_1k_tokens"], d["cost"] / tokens * 1000), d)

    def test_1b_engine_ttft(self):
        for d in settled_rows():
            self.assertEqual(d["first_tokens"], d["completed"], d)
            self.assertGreater(d["ttft_seconds_sum"], 0, d)
            self.assertLess(d["ttft_seconds_sum"], WALL[(d["model"], d["tenant"])], d)

    def test_2_metrics_cost(self):
        rows = settled_rows()
        m = get_metrics(S.port, S.admin_key)
        for d in rows:
            v = metric_value(m, "tessera_tenant_cost_total", tenant=d["tenant"], model=d["model"])
            if d["cost"] is None:
                self.assertIsNone(v, d)
            else:
                self.assertIsNotNone(v, d)
                self.assertTrue(close(v, d["cost"], rel=1e-7), (v, d))
        self.assertEqual(metric_value(m, "tessera_model_price_per_hour", model="priced"), 3.6)
        self.assertEqual(metric_value(m, "tessera_model_price_per_hour", model="inherits"), 1.8)
        self.assertIsNone(metric_value(m, "tessera_model_price_per_hour", model="unknown"))

    def test_3_admin_models(self):
        settled_rows()
        data = admin("/admin/models")
        self.assertEqual([d["model"] for d in data], list(PRICE))
        for d in data:
            self.assertEqual(d["price_per_hour"], PRICE[d["model"]], d)
            self.assertEqual(d["kind"], "chat")
            self.assertEqual(d["policy"], "fair")
            for k, v in GEOMETRY.items():
                self.assertEqual(d[k], v, (k, d))
            bb = d["block_bytes"]
            self.assertGreater(bb, 0)
            # The CPU's cache is f16 unless the model asks for f32, which
            # takes twice the bytes a block (the same file for all three).
            self.assertEqual(d["kv_cache_dtype"], "f32" if d["model"] == "priced" else "f16", d)
            f16_bb = next(x["block_bytes"] for x in data if x["model"] == "inherits")
            self.assertEqual(bb, 2 * f16_bb if d["model"] == "priced" else f16_bb, d)
            self.assertEqual(d["n_blocks"], KV_BYTES // bb, d)
            self.assertEqual(d["swap_blocks"], SWAP_BYTES // bb, d)
            self.assertEqual(d["kv_high"], 0.85)
            self.assertEqual(d["kv_low"], 0.7)
            self.assertEqual(d["context_length"], 1024)
            self.assertGreater(d["steps"], 0, d)
            fit = d["cost_model"]
            for k in ("a_us", "b_us_per_prefill_token", "c_us_per_decode_seq", "d_us_per_attended_position",
                      "err_us", "copy_bytes_per_us"):
                self.assertTrue(isinstance(fit[k], (int, float)) and math.isfinite(fit[k]) and fit[k] >= 0, (k, fit))
            # Every step the model ran was fed to the fit (none skipped this early).
            self.assertGreater(fit["steps"], 0, fit)
            self.assertLessEqual(fit["steps"], d["steps"], d)
            self.assertGreater(fit["a_us"] + fit["b_us_per_prefill_token"] + fit["c_us_per_decode_seq"], 0, fit)
            # Where the fit started: sched_config_default's seed (src/core/sched.c),
            # which no config changes, so a simulator's scheduler can start there too.
            self.assertEqual(fit["seed"], {"a_us": 2000, "b_us_per_prefill_token": 50, "c_us_per_decode_seq": 500,
                                           "d_us_per_attended_position": 0.02}, fit)
            # The spread of step times around the fit: every step with work
            # counted, quantiles of measured / predicted at ascending levels.
            sr = d["step_ratio"]
            self.assertTrue(0 < sr["steps"] <= d["steps"], d)
            self.assertEqual(len(sr["levels"]), 17, sr)
            self.assertEqual(len(sr["quantiles"]), 17, sr)
            self.assertTrue(all(0 < a < b < 1 for a, b in zip(sr["levels"], sr["levels"][1:])), sr)
            self.assertTrue(all(0 < a <= b for a, b in zip(sr["quantiles"], sr["quantiles"][1:])), sr)
            # ...and apart by step kind: every step is one or the other.
            self.assertEqual(sr["decode"]["steps"] + sr["prefill"]["steps"], sr["steps"], sr)
            self.assertGreater(sr["prefill"]["steps"], 0, sr)
            for k in ("decode", "prefill"):
                q = sr[k]["quantiles"]
                self.assertEqual(len(q), 17, sr)
                self.assertTrue(all(0 < a <= b for a, b in zip(q, q[1:])), sr)
            # The describing fit: it saw every step the scheduler's did,
            # with its own spread at the same levels.
            sf = d["step_fit"]
            for k in ("a_us", "b_us_per_prefill_token", "c_us_per_decode_seq", "d_us_per_attended_position",
                      "err_us"):
                self.assertTrue(isinstance(sf[k], (int, float)) and math.isfinite(sf[k]) and sf[k] >= 0, (k, sf))
            self.assertTrue(-1 <= sf["err_autocorr"] <= 1, sf)
            self.assertTrue(0 < sf["steps"] <= sr["steps"], d)
            self.assertGreater(sf["a_us"] + sf["b_us_per_prefill_token"] + sf["c_us_per_decode_seq"], 0, sf)
            self.assertEqual(len(sf["quantiles"]), 17, sf)
            self.assertTrue(all(0 < a <= b for a, b in zip(sf["quantiles"], sf["quantiles"][1:])), sf)
            # How long its slow spells last: the autocorrelation at five lags,
            # each 0 until four lags' worth of steps were seen.
            acf = sf["acf"]
            self.assertEqual(acf["lags"], [1, 4, 16, 64, 256], acf)
            self.assertEqual(len(acf["values"]), 5, acf)
            self.assertTrue(all(isinstance(v, (int, float)) and -1 <= v <= 1 for v in acf["values"]), acf)
            for lag, v in zip(acf["lags"], acf["values"]):
                if sf["steps"] < 5 * lag:
                    self.assertEqual(v, 0, (lag, sf["steps"], acf))
            # Its shape by rows: every step it saw counted once, in the
            # bucket of its rows and kind, each factor within the clip.
            sh = sf["shape"]
            self.assertEqual(sh["rows_max"], [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], sh)
            self.assertEqual(sum(sh["decode"]["steps"]) + sum(sh["prefill"]["steps"]), sf["steps"], d)
            self.assertGreater(sum(sh["prefill"]["steps"]), 0, sh)
            for k in ("decode", "prefill"):
                self.assertEqual(len(sh[k]["factor"]), 11, sh)
                self.assertEqual(len(sh[k]["steps"]), 11, sh)
                self.assertTrue(all(math.exp(-1) - 1e-6 <= f <= math.exp(1) + 1e-6 for f in sh[k]["factor"]), sh)
                self.assertTrue(all(f == 1 for f, n in zip(sh[k]["factor"], sh[k]["steps"]) if n == 0), sh)

    def test_3b_engine_metrics(self):
        # What each model's engine holds and the device's part of its steps:
        # the pool /admin/models describes, within what the engine allocated;
        # no device memory on the CPU; the forward passes' time within the
        # steps' (the rest is host work and copies: scheduling, sampling,
        # streaming, swaps).
        settled_rows()
        data = admin("/admin/models")
        m = get_metrics(S.port, S.admin_key)
        for d in data:
            name = d["model"]
            kv = metric_value(m, "tessera_kv_pool_bytes", model=name)
            self.assertEqual(kv, d["n_blocks"] * d["block_bytes"], d)
            self.assertGreater(metric_value(m, "tessera_engine_memory_bytes", model=name), kv)
            self.assertEqual(metric_value(m, "tessera_device_memory_bytes", model=name), 0)
            busy = metric_value(m, "tessera_engine_busy_seconds_total", model=name)
            comp = metric_value(m, "tessera_engine_compute_seconds_total", model=name)
            self.assertTrue(0 < comp <= busy, (name, comp, busy))

    def test_4_admin_models_needs_the_admin_key(self):
        self.assertEqual(request(S.port, "GET", "/admin/models").status, 401)
        self.assertEqual(request(S.port, "GET", "/admin/models", key=S.key("a")).status, 401)
        self.assertEqual(request(S.port, "GET", "/admin/models", key=S.metrics_key).status, 401)
        self.assertEqual(request(S.port, "POST", "/admin/models", {}, key=S.admin_key).status, 405)


if __name__ == "__main__":
    unittest.main()
