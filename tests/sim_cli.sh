#!/usr/bin/env bash
# `tessera sim` from the command line (about 10 s): a plan simulated from its
# input and from its JSON (the same report, to the byte), determinism, the
# load factor, CSV traces (tessera's and Azure's columns), a calibrated
# server config with a bench scenario, --compare and its exit status, the
# planner's plans checked (one that holds; one that bursty traffic breaks,
# which --fix re-plans until it holds), and usage and input errors.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
T=$TS_TESSERA
PY=/usr/bin/python3
W="$TS_TMPDIR/sim_cli"
rm -rf "$W"
mkdir -p "$W"
fail() { echo "sim_cli: FAIL: $*" >&2; exit 1; }
FLEET=$TS_SRC/examples/plan/fleet.yaml

# status CMD...: the exit status, output in $W/out.txt and $W/err.txt.
status() { local rc=0; "$@" >"$W/out.txt" 2>"$W/err.txt" || rc=$?; echo "$rc"; }

# 1. A plan from its input, twice with one seed: byte-identical files.
for k in 1 2; do
    rc=$(status "$T" sim --input "$FLEET" --duration 20s --seed 3 --out "$W/a$k")
    [ "$rc" -le 1 ] || fail "sim --input exited $rc: $(cat "$W/err.txt")"
done
for f in report.json report.txt instances.csv series.csv; do
    cmp -s "$W/a1/$f" "$W/a2/$f" || fail "$f differs between two runs of the same inputs and seed"
done
grep -q "plan check" "$W/a1/report.txt" || fail "no plan check in report.txt"
grep -q "^verdict: the plan holds" "$W/a1/report.txt" || fail "fleet.yaml's plan does not hold: $(tail -20 "$W/a1/report.txt")"

# 2. The same plan read back from tessera plan --emit json: the same report.
"$T" plan --input "$FLEET" --emit json >"$W/plan.json" || fail "plan --emit json"
rc=$(status "$T" sim --plan "$W/plan.json" --duration 20s --seed 3 --out "$W/b")
[ "$rc" -le 1 ] || fail "sim --plan exited $rc: $(cat "$W/err.txt")"
cmp -s "$W/a1/report.json" "$W/b/report.json" || fail "--plan JSON and --input give different reports"

# 3. Twice the load: about twice the requests.
"$T" sim --input "$FLEET" --duration 20s --seed 3 --load 2 --out "$W/c" >/dev/null 2>&1 || true
"$PY" - "$W/a1/report.json" "$W/c/report.json" <<'EOF' || fail "--load 2 did not double the traffic"
import json, sys
a = json.load(open(sys.argv[1]))["due"]; b = json.load(open(sys.argv[2]))["due"]
assert 1.7 < b / a < 2.3, (a, b)
EOF

# 4. CSV traces: tessera's columns for two of the fleet's tenants; Azure's,
# assigned round-robin over every tenant.
cat >"$W/trace.csv" <<EOF
timestamp_s,tenant,prompt_tokens,output_tokens
0.5,bank,512,64
1.0,search,256,32
1.2,bank,128,16
EOF
rc=$(status "$T" sim --input "$FLEET" --trace "$W/trace.csv" --out "$W/d")
[ "$rc" -le 1 ] || fail "sim --trace csv exited $rc: $(cat "$W/err.txt")"
"$PY" - "$W/d/report.json" <<'EOF' || fail "the CSV trace's requests are not in the report"
import json, sys
r = json.load(open(sys.argv[1])); t = {x["name"]: x for x in r["tenants"]}
assert r["due"] == 3 and t["bank"]["completed"] == 2 and t["search"]["completed"] == 1, r["due"]
EOF
rc=$(status "$T" sim --input "$FLEET" --trace "$TS_SRC/tests/data/traces/azure_2023.csv" --assign round-robin \
    --out "$W/e")
[ "$rc" -le 1 ] || fail "sim --trace azure exited $rc: $(cat "$W/err.txt")"
grep -q "^(all) " "$W/e/report.txt" || fail "no all-tenants row for the Azure trace"

# 5. A calibrated server config and a bench scenario; --compare against
# itself holds, against a report with TTFTs doubled it does not.
CAL=$TS_SRC/tests/data/sim/calibration.json
SRV=$TS_SRC/scenarios/bench-server.yaml
SCN=$TS_SRC/scenarios/isolation.yaml
rc=$(status "$T" sim --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --duration 5s --out "$W/f")
[ "$rc" -le 1 ] || fail "sim --serve-config exited $rc: $(cat "$W/err.txt")"
grep -q "^victim " "$W/f/report.txt" || fail "no victim row"
rc=$(status "$T" sim --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --duration 5s --out "$W/g" \
    --compare "$W/f/report.json")
[ "$rc" -eq 0 ] || fail "--compare against the same run exited $rc"
grep -q "0 figures outside tolerance" "$W/g/compare.txt" || fail "compare.txt: $(cat "$W/g/compare.txt")"
"$PY" - "$W/f/report.json" "$W/slow.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["tenants"]:
    for k in ("p50_s", "p99_s"): t["ttft"][k] *= 2
json.dump(r, open(sys.argv[2], "w"))
EOF
rc=$(status "$T" sim --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --duration 5s --out "$W/h" \
    --compare "$W/slow.json")
[ "$rc" -eq 1 ] || fail "--compare against doubled TTFTs exited $rc, not 1"
grep -q "OUTSIDE" "$W/h/compare.txt" || fail "compare.txt marks nothing outside"
# --replicas: the report is the first run's, to the byte; the comparison
# lays the median of the runs, and their range, beside the measured figure.
rc=$(status "$T" sim --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --duration 5s --out "$W/k" \
    --compare "$W/f/report.json" --replicas 4)
[ "$rc" -le 1 ] || fail "--replicas 4 exited $rc: $(cat "$W/err.txt")"
cmp -s "$W/f/report.json" "$W/k/report.json" || fail "--replicas changed the first run's report"
grep -q "the median of 4 runs" "$W/k/compare.txt" || fail "compare.txt: $(cat "$W/k/compare.txt")"
"$PY" - "$W/k/compare.txt" <<'EOF' || fail "medians and ranges: $(cat "$W/k/compare.txt")"
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if re.search(r"\s(ok|OUTSIDE)$", l)]
assert rows
spread = 0
for r in rows:
    med = float(r[3]); lo, hi = (float(x) for x in r[4].split(".."))
    assert lo <= med <= hi, r
    spread += lo < hi
assert spread, "every run drew the same noise"
EOF

# 6. Bursty traffic the planner did not plan for (gamma arrivals, CV 4, at
# the planned rates) breaks the plan; --fix re-plans with headroom until the
# simulation holds.
"$PY" - "$FLEET" "$W/bursty.yaml" <<'EOF'
import re, sys
# The planned tenants and rates, as a bench scenario with bursts.
text = open(sys.argv[1]).read()
tenants = text[text.index("\ntenants:"):]
rows = re.findall(r"- name: (\S+)[^\n]*\n(?:(?!- name:).)*?load: \{rps: ([0-9.]+), "
                  r"prompt_tokens: (\d+), output_tokens: (\d+)", tenants, re.S)
assert len(rows) == 9, rows
out = ["name: bursty", "model: any", "duration: 60s", "drain: 30s", "tenants:"]
for n, rps, p, o in rows:
    out += [f"  - name: {n}", "    key: none", f"    arrival: {{process: gamma, rate: {rps}, cv: 4}}",
            f"    prompt_tokens: {{dist: fixed, value: {p}}}", f"    output_tokens: {{dist: fixed, value: {o}}}"]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
rc=$(status "$T" sim --input "$FLEET" --trace "$W/bursty.yaml" --out "$W/i")
[ "$rc" -eq 1 ] || fail "bursty traffic: the plan held (exit $rc); the check would not catch a miss"
grep -q " misses" "$W/i/report.txt" || fail "bursty traffic: no tenant marked as missing"
# Under the plan's own load a miss is the plan's: flagged optimistic (none here).
! grep -q "plan optimistic" "$W/i/report.txt" || fail "bursty traffic: a miss blamed on the plan"
rc=$(status "$T" sim --input "$FLEET" --trace "$W/bursty.yaml" --fix --out "$W/j")
[ "$rc" -eq 0 ] || fail "--fix did not make the plan hold (exit $rc): $(tail -30 "$W/out.txt")"
grep -q "headroom" "$W/j/fix.txt" || fail "--fix wrote no headroom"
grep -q "^verdict: the plan holds" "$W/j/report.txt" || fail "--fix's final report does not hold"

# 7. Usage and input errors: status 2 and a message that names the problem.
expect2() {
    local want=$1; shift
    rc=$(status "$T" sim "$@")
    [ "$rc" -eq 2 ] || fail "sim $* exited $rc, not 2"
    grep -q -- "$want" "$W/err.txt" || fail "sim $*: no '$want' in: $(cat "$W/err.txt")"
}
expect2 "exactly one of" --duration 5s
expect2 "only gives --compare" --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --replicas 2
expect2 "wants an integer 1 .. 64" --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --replicas 65
expect2 "wants a number >= 1" --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" --replicas 0
expect2 "with --no-noise every run is the same" --serve-config "$SRV" --calibration "$CAL" --trace "$SCN" \
    --compare "$W/f/report.json" --replicas 2 --no-noise
expect2 "exactly one of" --input "$FLEET" --plan "$W/plan.json"
expect2 "needs one of --calibrate" --serve-config "$SRV" --trace "$SCN"
expect2 "--route" --input "$FLEET" --route sideways
expect2 "--load" --input "$FLEET" --load -1
expect2 "duration" --input "$FLEET" --duration soon
echo '{"placement": {}, "gpus": [], "instances": 7}' >"$W/bad.json"
expect2 "bad.json" --plan "$W/bad.json"
expect2 "no-such.yaml" --input "$W/no-such.yaml"
expect2 "not in the fleet" --input "$FLEET" --trace "$SCN"
sed 's/"budget_max":256/"budget_max":2147483647/' "$CAL" >"$W/cal-huge.json"
grep -q 2147483647 "$W/cal-huge.json" || fail "the calibration's budget_max was not edited"
expect2 "budget_max 2147483647 is outside 32..1048576: no server has it" \
    --serve-config "$SRV" --calibration "$W/cal-huge.json" --trace "$SCN"
echo "sim_cli: ok"
