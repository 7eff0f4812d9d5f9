"""prometheus_check.py - a real Prometheus scrapes a live `tessera serve`.

Run by tests/prometheus.sh (TS_PROMETHEUS names the binary). Steps, each
with a deadline:
  1. start tessera (four tenants, a metrics key) and prometheus (its own
     127.0.0.1 port, storage under TS_TMPDIR, scraping tessera every second
     twice: job "tessera" with the metrics key as its bearer credentials,
     the way a real deployment configures it, and job "anonymous" without);
  2. wait until prometheus has scraped tessera once (up == 1), so the
     histogram counters are seen at zero before any request, and check that
     the keyless job is refused (up == 0: /metrics is not public);
  3. three tenants send requests; the fourth sends none;
  4. poll the HTTP API until
        histogram_quantile(0.99, sum by (le, tenant) (rate(tessera_ttft_seconds_bucket[1m])))
     gives a finite number for each of the three, and check a few other
     series the way a dashboard would read them, and the vLLM-named
     model-server gauges the GIE endpoint picker reads.
Both processes are stopped at the end whatever happens; tessera must exit 0.
"""

import json
import math
import os
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Env, Model, Server, Tenant, _die_with_parent, free_port, log, make_model,  # noqa: E402
                     request, wait_until)

QUERY = "histogram_quantile(0.99, sum by (le, tenant) (rate(tessera_ttft_seconds_bucket[1m])))"
SENDERS = ("gold-a", "silver-b", "bronze-c")
VLLM_GAUGES = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
               "vllm:gpu_cache_usage_perc")


def prom_query(port, q):
    """Result vector of an instant query: {tenant or "": float}."""
    r = request(port, "GET", "/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=5)
    if r.status != 200:
        raise AssertionError("prometheus query %r: %r" % (q, r))
    j = r.json()
    if j.get("status") != "success" or j["data"]["resultType"] != "vector":
        raise AssertionError("prometheus query %r: %r" % (q, j))
    return {s["metric"].get("tenant", ""): float(s["value"][1]) for s in j["data"]["result"]}


def prom_series(port, q):
    """[(labels, float)] of an instant query."""
    r = request(port, "GET", "/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=5)
    j = r.json() if r.status == 200 else None
    if not j or j.get("status") != "success":
        raise AssertionError("prometheus query %r: %r" % (q, r))
    return [(x["metric"], float(x["value"][1])) for x in j["data"]["result"]]


def main():
    env = Env("prometheus")
    prom_bin = os.environ.get("TS_PROMETHEUS", "prometheus")
    model = make_model(env)
    tenants = [Tenant(env, n, tier) for n, tier in
               (("gold-a", "gold"), ("silver-b", "silver"), ("bronze-c", "bronze"), ("idle-d", "bronze"))]
    srv = Server(env, "tessera", [Model("tiny", model)], tenants, limits={"shutdown_grace_s": 2})
    prom = None
    ok = False
    try:
        srv.start()
        pport = free_port()
        data = os.path.join(env.work, "tsdb")
        cfg = os.path.join(env.work, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: tessera\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
                    "    authorization:\n      type: Bearer\n      credentials: '%s'\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
                    "  - job_name: anonymous\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
                    % (srv.metrics_key, srv.port, srv.port))
        plog = open(os.path.join(env.work, "prometheus.log"), "w")
        prom = subprocess.Popen([prom_bin, "--config.file=" + cfg, "--storage.tsdb.path=" + data,
                                 "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"],
                                stdout=plog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=_die_with_parent, cwd=env.work)
        plog.close()

        def ready():
            if prom.poll() is not None:
                raise AssertionError("prometheus exited with %s; see %s/prometheus.log" % (prom.returncode, env.work))
            try:
                return request(pport, "GET", "/-/ready", timeout=2).status == 200
            except OSError:
                return False
        wait_until(ready, 30, interval=0.2, what="prometheus /-/ready")
        wait_until(lambda: prom_query(pport, 'up{job="tessera"}').get("") == 1.0, 20, interval=0.2,
                   what="prometheus to scrape tessera once (up == 1)")
        wait_until(lambda: prom_query(pport, 'up{job="anonymous"}').get("") == 0.0, 20, interval=0.2,
                   what="the scrape without the metrics key to be refused (up == 0)")
        log("prometheus: ready on 127.0.0.1:%d, scraping tessera on port %d" % (pport, srv.port))

        sent = {}
        tokens = {}
        for rnd in range(4):
            for t in SENDERS:
                r = request(srv.port, "POST", "/v1/completions",
                            {"model": "tiny", "prompt": "scrape me %d" % rnd, "max_tokens": 4},
                            key=srv.key(t), timeout=20)
                assert r.status == 200, r
                sent[t] = sent.get(t, 0) + 1
                # Sampling may draw end-of-text before max_tokens: the
                # counter must match what the responses said, not 4 each.
                tokens[t] = tokens.get(t, 0) + r.json()["usage"]["completion_tokens"]
            time.sleep(0.3)

        def p99_for_all():
            res = prom_query(pport, QUERY)
            if all(t in res and math.isfinite(res[t]) for t in SENDERS):
                return res
            return None
        res = wait_until(p99_for_all, 20, interval=0.5, what="a finite TTFT p99 per sending tenant from " + QUERY)
        for t in SENDERS:
            assert 0 < res[t] <= 60, "p99 TTFT of %s is %r" % (t, res[t])
        log("prometheus: p99 TTFT by tenant: %s" % json.dumps(res, sort_keys=True))
        # A tenant with no traffic has no rate to take a quantile of.
        assert not math.isfinite(res.get("idle-d", math.nan)), res

        # The counters as Prometheus stored them agree with what was sent:
        # every request completed, and answered 200.
        def counts_seen():
            c = prom_query(pport, 'sum by (tenant) (tessera_requests_total{job="tessera",outcome="completed"})')
            h = prom_query(pport, 'sum by (tenant) (tessera_http_responses_total{job="tessera",code="200"})')
            return c if all(c.get(t) == sent[t] and h.get(t) == sent[t] for t in SENDERS) else None
        wait_until(counts_seen, 10, interval=0.5,
                   what="tessera_requests_total{outcome=completed} == http 200s == requests sent, per tenant")
        c = prom_query(pport, "sum by (tenant) (tessera_completion_tokens_total)")
        for t in SENDERS:
            assert c.get(t) == tokens[t], (c, tokens)
        # The model-server gauges under vLLM's names (a colon in a metric
        # name is valid exposition format): Prometheus stores one series per
        # model, with the model under tessera's label and vLLM's.
        for name in VLLM_GAUGES:
            got = prom_series(pport, '%s{job="tessera"}' % name)
            assert len(got) == 1, (name, got)
            labels, value = got[0]
            assert labels.get("__name__") == name and labels.get("model") == "tiny" and \
                labels.get("model_name") == "tiny", (name, labels)
            assert 0 <= value <= (1 if "perc" in name else 16384), (name, value)
        log("prometheus: %s stored per model" % ", ".join(VLLM_GAUGES))
        ok = True
    finally:
        if prom is not None and prom.poll() is None:
            prom.terminate()
            try:
                prom.wait(10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(5)
        rc = srv.stop()
        if rc != 0:
            log("prometheus: tessera exited with %r; stderr:\n%s" % (rc, srv.stderr()[-3000:]))
            ok = False
    print("prometheus: %s" % ("all checks passed" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
