#!/usr/bin/env bash
# End-to-end test of `tessera bench` against a real `tessera serve` on
# 127.0.0.1 (about 20 s): every arrival process and a trace replay, a tenant
# with a wrong key (401s counted, not fatal), --requests, --tenants, the
# report files and plots, a stop by SIGINT that still reports, the usage
# and scenario errors, the trace options (--load, --time-scale,
# --tenant-map, --assign; --stream refused), and engine time and cost read
# from /admin/tenants for the scenario's model only.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
PY=/usr/bin/python3
W="$TS_TMPDIR/bench_e2e"
rm -rf "$W"
mkdir -p "$W"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT
fail() { echo "bench_e2e: FAIL: $*" >&2; exit 1; }

"$TS_TESSERA" mkmodel "$W/tiny.gguf" --preset tiny --type f32 >/dev/null
K1=$("$TS_TESSERA" keygen); K2=$("$TS_TESSERA" keygen)
KEY1=$(sed -n 's/^key: *//p' <<<"$K1"); HASH1=$(sed -n 's/^key_sha256: *//p' <<<"$K1")
KEY2=$(sed -n 's/^key: *//p' <<<"$K2"); HASH2=$(sed -n 's/^key_sha256: *//p' <<<"$K2")
KA=$("$TS_TESSERA" keygen)
ADMIN=$(sed -n 's/^key: *//p' <<<"$KA"); HASHA=$(sed -n 's/^key_sha256: *//p' <<<"$KA")

cat >"$W/server.yaml" <<EOF
listen: 127.0.0.1:8080   # overridden by --listen 127.0.0.1:0 below
admin_key_sha256: $HASHA
models:
  - {name: tiny, path: tiny.gguf, kv_cache_bytes: 8MiB, swap_bytes: 8MiB, max_seqs: 16, threads: 1,
     price_per_hour: 3.6}
  - {name: other, path: tiny.gguf, kv_cache_bytes: 2MiB, swap_bytes: 1MiB, max_seqs: 4, threads: 1}
tenants:
  - {name: alpha, tier: gold, weight: 1, key_sha256: $HASH1}
  - {name: beta, tier: silver, weight: 1, key_sha256: $HASH2}
limits: {shutdown_grace_s: 1}
EOF
cat >"$W/trace.csv" <<EOF
timestamp_s,tenant,prompt_tokens,output_tokens
0.3,replay,8,4
1.1,replay,12,6
0.7,replay,5,3
EOF
cat >"$W/scn.yaml" <<EOF
name: e2e
model: tiny
duration: 3s
drain: 5s
token_ids: {min: 10, max: 500}
trace: trace.csv
tenants:
  - name: poisson
    key: $KEY1
    arrival: {process: poisson, rate: 4}
    prompt_tokens: {dist: uniform, min: 4, max: 16}
    output_tokens: {dist: fixed, value: 8}
    slo: {ttft_ms: 5000, tpot_ms: 1000}
  - name: bursty
    key: $KEY2
    arrival: {process: gamma, rate: 4, cv: 2}
    prompt_tokens: {dist: lognormal, mean: 12, cv: 0.5, min: 2, max: 40}
    output_tokens: {dist: uniform, min: 2, max: 10}
  - name: steady
    key: $KEY2
    arrival: {process: constant, rate: 2}
    prompt_tokens: {dist: fixed, value: 6}
    output_tokens: {dist: fixed, value: 6}
  - name: replay
    key: $KEY1
  - name: stranger
    key: tsk-not-a-real-key
    arrival: {process: constant, rate: 1}
    prompt_tokens: {dist: fixed, value: 4}
    output_tokens: {dist: fixed, value: 4}
EOF

: >"$W/server.log"   # before the server's own redirect opens it: sed below reads it at once
"$TS_TESSERA" serve --config "$W/server.yaml" --listen 127.0.0.1:0 >"$W/server.log" 2>&1 &
SERVER_PID=$!
URL=""
for _ in $(seq 100); do
    URL=$(sed -n 's/^tessera: listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$W/server.log")
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] || { cat "$W/server.log" >&2; fail "the server did not start"; }

# 1. A full run: exit 0, the table, the files, the figures.
timeout 30 "$TS_TESSERA" bench --scenario "$W/scn.yaml" --url "$URL" --out "$W/out" --seed 3 \
    >"$W/run.out" 2>"$W/run.err" || { cat "$W/run.out" "$W/run.err" >&2; fail "bench exited $?"; }
cat "$W/run.out"
grep -q "Jain's index" "$W/run.out" || fail "no Jain line in the table"
grep -q "bench e2e:.*sent" "$W/run.err" || fail "no progress line on stderr"
grep -q "first 401 from tenant stranger" "$W/run.err" || fail "the first 401 was not reported"
for f in report.json report.txt ttft_cdf.dat tokens.dat plots.gp; do
    [ -s "$W/out/$f" ] || fail "$f missing"
done
if command -v gnuplot >/dev/null; then
    for f in ttft_cdf.svg ttft_cdf.png tokens.svg tokens.png; do [ -s "$W/out/$f" ] || fail "$f missing"; done
    head -c 8 "$W/out/tokens.png" | od -An -c | grep -q "P   N   G" || fail "tokens.png is not a PNG"
    grep -q "<svg" "$W/out/ttft_cdf.svg" || fail "ttft_cdf.svg is not an SVG"
fi
"$PY" - "$W/out/report.json" <<'EOF' || fail "report.json figures"
import json, sys
r = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in r["tenants"]}
assert r["scenario"] == "e2e" and r["seed"] == "3", r["scenario"]
for name in ("poisson", "bursty", "steady", "replay"):
    x = t[name]
    assert x["due"] > 0 and x["completed"] == x["due"], (name, x["due"], x["completed"], x["errors_by_status"])
    assert x["ttft"]["n"] == x["completed"] and 0 < x["ttft"]["p50_s"] <= x["ttft"]["p99_s"] <= x["ttft"]["max_s"]
    assert x["e2e"]["p50_s"] >= x["ttft"]["p50_s"] * 0.999
    assert x["output_tokens"] > 0 and x["output_tokens_per_s"] > 0
assert t["replay"]["due"] == 3 and t["replay"]["prompt_tokens"] == 25, t["replay"]
assert t["steady"]["due"] == 5, t["steady"]["due"]          # constant 2/s over 3 s: 0.5, 1, ..., 2.5
assert t["stranger"]["completed"] == 0 and t["stranger"]["errors_by_status"] == {"401": t["stranger"]["due"]}
assert t["poisson"]["slo_attainment"] == 1.0, t["poisson"]["slo_attainment"]
assert t["bursty"]["slo_attainment"] is None
assert len(r["requests"]) == r["due"] and r["completed"] + r["errors"] == r["due"]
assert r["send_lag_max_s"] < 0.5, r["send_lag_max_s"]
print("bench_e2e: report.json checks pass")
EOF

# 2. --requests and --tenants: exactly that many, only that tenant.
timeout 30 "$TS_TESSERA" bench --scenario "$W/scn.yaml" --url "$URL" --out "$W/req" --requests 5 --tenants poisson --quiet \
    >"$W/req.out" 2>&1 || { cat "$W/req.out" >&2; fail "--requests run"; }
"$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["due"] == 5 and r["completed"] == 5, (r["due"], r["completed"])
assert all(q[0] == "poisson" for q in r["requests"])
' "$W/req/report.json" || fail "--requests 5 --tenants poisson"

# 3. SIGINT stops a long run early and still reports.
"$TS_TESSERA" bench --scenario "$W/scn.yaml" --url "$URL" --out "$W/sig" --duration 60s --quiet >"$W/sig.out" 2>&1 &
BENCH=$!
sleep 2
kill -INT "$BENCH"
for _ in $(seq 50); do kill -0 "$BENCH" 2>/dev/null || break; sleep 0.1; done
kill -0 "$BENCH" 2>/dev/null && { kill -KILL "$BENCH"; fail "bench did not stop on SIGINT"; }
wait "$BENCH" || fail "bench exited $? after SIGINT"
grep -q "stopped by a signal" "$W/sig.out" || fail "no stop message"
[ -s "$W/sig/report.json" ] || fail "no report after SIGINT"

# 4. Usage and scenario errors: clear messages, no request sent.
expect() {   # expect STATUS PATTERN ARGS...
    local want=$1 pat=$2 rc=0
    shift 2
    "$TS_TESSERA" bench "$@" >"$W/err.out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || { cat "$W/err.out" >&2; fail "bench $*: exit $rc, wanted $want"; }
    grep -q -- "$pat" "$W/err.out" || { cat "$W/err.out" >&2; fail "bench $*: no '$pat'"; }
}
expect 2 "give the server's base URL" --scenario "$W/scn.yaml" --url "$URL/v1"
expect 2 "the scheme must be http or https" --scenario "$W/scn.yaml" --url "ftp://127.0.0.1:1"
expect 2 "not both" --scenario "$W/scn.yaml" --url "$URL" --duration 1s --requests 3
expect 2 "no tenant 'nobody'" --scenario "$W/scn.yaml" --url "$URL" --tenants nobody
expect 2 "usage" --scenario "$W/scn.yaml"
printf 'model: tiny\ntenants:\n  - {name: a, key: k, arrival: {process: gamma, rate: 1}}\n' >"$W/bad.yaml"
expect 1 "bad.yaml:3:32: tenants\[0\].arrival.cv: required for a gamma process" --scenario "$W/bad.yaml" --url "$URL"
expect 1 "No such file" --scenario "$W/missing.yaml" --url "$URL"
printf 'name: "x'"'"'.system('"'"'touch pwned'"'"').'"'"'"\nmodel: tiny\ntenants:\n  - {name: a, key: k, arrival: {process: constant, rate: 1}, prompt_tokens: {dist: fixed, value: 1}, output_tokens: {dist: fixed, value: 1}}\n' >"$W/quote.yaml"
expect 1 "quote.yaml:1:7: name: may not contain spaces, quotes" --scenario "$W/quote.yaml" --url "$URL"

# 5. The trace options, as tessera sim takes them (scenario.h).
expect 2 "bench: --stream is tessera sim's" --scenario "$W/scn.yaml" --url "$URL" --stream
expect 2 "bench: --load wants a factor" --scenario "$W/scn.yaml" --url "$URL" --load 0
expect 2 "bench: --assign wants column, round-robin or weighted" --scenario "$W/scn.yaml" --url "$URL" --assign x
expect 1 "tenant_map: 'replay=nobody': no tenant 'nobody'" --scenario "$W/scn.yaml" --url "$URL" --tenant-map replay=nobody
expect 1 "tenant 'replay' has no arrival process and no rows" --scenario "$W/scn.yaml" --url "$URL" --tenant-map '*=-'
# --load 2: steady's 2/s becomes 4/s (0.25, 0.5, ..., 2.75: 11 in 3 s) and the
# trace runs twice as fast; --time-scale 10 slows it tenfold: rows at 0.3,
# 0.7, 1.1 s land at 1.5, 3.5, 5.5 s, so one is due in the window.
timeout 30 "$TS_TESSERA" bench --scenario "$W/scn.yaml" --url "$URL" --out "$W/opts" --tenants steady,replay \
    --load 2 --time-scale 10 --assign round-robin --quiet >"$W/opts.out" 2>&1 || { cat "$W/opts.out" >&2; fail "trace options run"; }
"$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in r["tenants"]}
assert t["steady"]["due"] == 11, t["steady"]["due"]
assert t["replay"]["due"] == 1 and t["replay"]["prompt_tokens"] == 8, t["replay"]
' "$W/opts/report.json" || fail "--load 2 --time-scale 10"

# 6. Engine time and cost over the run, for the scenario's model only: alpha
# also ran on the unpriced model "other" (before the run), whose unknown cost
# must not make alpha's cost on the priced "tiny" unknown.
"$PY" - "$URL" "$KEY1" <<'EOF' || fail "a completion on the other model"
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/completions", method="POST",
    data=json.dumps({"model": "other", "prompt": "hello there", "max_tokens": 4}).encode(),
    headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
assert urllib.request.urlopen(req, timeout=20).status == 200
EOF
cat >"$W/cost.yaml" <<EOF
model: tiny
duration: 1s
drain: 5s
token_ids: {min: 10, max: 500}
tenants:
  - name: alpha
    key: $KEY1
    arrival: {process: constant, rate: 3}
    prompt_tokens: {dist: fixed, value: 8}
    output_tokens: {dist: fixed, value: 4}
EOF
TESSERA_ADMIN_KEY="$ADMIN" timeout 30 "$TS_TESSERA" bench --scenario "$W/cost.yaml" --url "$URL" --out "$W/cost" \
    --quiet >"$W/cost.out" 2>&1 || { cat "$W/cost.out" >&2; fail "cost run"; }
"$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
a = r["tenants"][0]
assert a["name"] == "alpha" and a["completed"] == 2, a   # 3/s from 1/3 s: at 0.33, 0.67
assert a["engine_s"] is not None and a["engine_s"] > 0, a["engine_s"]
assert a["cost"] is not None and abs(a["cost"] - a["engine_s"] * 3.6 / 3600) < 1e-6, (a["cost"], a["engine_s"])
' "$W/cost/report.json" || { cat "$W/cost.out" >&2; fail "alpha cost on tiny"; }
echo "bench_e2e: pass"
