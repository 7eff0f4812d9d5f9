#!/usr/bin/env bash
# bench/sim_real.sh - tessera sim against the real server on this machine:
# the same scenario measured with `tessera bench` against `tessera serve` and
# simulated with `tessera sim` from a calibration, side by side.
#
# For each scenario (isolation, fairness, tiers; isolation also under FCFS):
#   1. calibrate: a fresh server, the scenario for CAL_S seconds with another
#      seed (7); bench saves the server's step-time fit and KV geometry
#      (/admin/models) as calibration.json; the client-to-engine overhead is
#      the profile's measured TTFT p50 less the simulated one, for the tenant
#      with the lowest p50 (the least queued: what is left is HTTP and
#      streaming, not scheduling);
#   2. measure: a fresh server, the scenario with seed SEED, whole;
#   3. simulate: tessera sim of the same scenario and seed on the calibrated
#      instance, with --compare against the measured report.
# Prints each comparison (compare.txt) and a summary table; the folders keep
# everything. Every server listens on 127.0.0.1, is started fresh and stopped
# by this script; every run is bounded by its scenario. About 5 minutes.
#
#     bench/sim_real.sh [OUT_DIR]        (default bench-out/sim_real)
#
# Environment: TESSERA (default build/tessera), SEED (default 1), CAL_S
# (default 15), SCENARIOS (default "isolation fairness tiers"), FCFS (1:
# isolation under FCFS too; default 1), DURATION (the measured and simulated
# send window; default the scenario's).
set -euo pipefail
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # see bench/isolation.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/build/tessera}
OUT=${1:-bench-out/sim_real}
SEED=${SEED:-1}
CAL_S=${CAL_S:-15}
SCENARIOS=${SCENARIOS:-isolation fairness tiers}
FCFS=${FCFS:-1}
DURATION=${DURATION:-}
DUR_ARGS=()
[ -n "$DURATION" ] && DUR_ARGS=(--duration "$DURATION")
MODEL=$ROOT/models/demo-15m.gguf
PY=/usr/bin/python3
export TESSERA_ADMIN_KEY=tsk-demo-admin   # the demo configs' admin key

[ -x "$TESSERA" ] || { echo "sim_real: no tessera binary at $TESSERA" >&2; exit 1; }
[ -f "$MODEL" ] || { mkdir -p "$ROOT/models"; "$TESSERA" mkmodel "$MODEL" --preset 15m --type f32 >/dev/null; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

. "$ROOT/bench/server.sh"
trap stop_server EXIT

config_of() { [ "$1" = tiers ] && echo "$ROOT/examples/demo.yaml" || echo "$ROOT/scenarios/bench-server.yaml"; }

# The overhead from a profile: measured p50 TTFT less simulated, for the
# tenant with the lowest measured p50.
overhead_ms() {
    "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
sim = {t["name"]: t for t in s["tenants"]}
best = None
for t in m["tenants"]:
    if t["completed"] > 0 and t["name"] in sim and sim[t["name"]]["completed"] > 0:
        if best is None or t["ttft"]["p50_s"] < best["ttft"]["p50_s"]:
            best = t
d = (best["ttft"]["p50_s"] - sim[best["name"]]["ttft"]["p50_s"]) * 1e3 if best else 0.0
print("%.3f" % max(d, 0.0))
PYEOF
}

run_one() {   # NAME POLICY
    local name=$1 policy=$2 dir="$OUT/$1-$2" cfg scn
    cfg=$(config_of "$name"); scn="$ROOT/scenarios/$name.yaml"
    mkdir -p "$dir"
    echo "== $name ($policy): calibrating (${CAL_S} s, seed 7)"
    start_server "$cfg" "$policy" "$dir/server-cal.log"
    "$TESSERA" bench --scenario "$scn" --url "$URL" --seed 7 --duration "${CAL_S}s" --out "$dir/cal" --quiet >"$dir/cal.txt"
    stop_server
    "$TESSERA" sim --serve-config "$cfg" --calibration "$dir/cal/calibration.json" --policy "$policy" \
        --trace "$scn" --seed 7 --duration "${CAL_S}s" --out "$dir/cal-sim" >/dev/null || true
    local oh; oh=$(overhead_ms "$dir/cal/report.json" "$dir/cal-sim/report.json")
    echo "   overhead ${oh} ms; measuring (seed $SEED)"
    start_server "$cfg" "$policy" "$dir/server.log"
    "$TESSERA" bench --scenario "$scn" --url "$URL" --seed "$SEED" "${DUR_ARGS[@]}" --out "$dir/measured" --quiet \
        >"$dir/measured.txt"
    stop_server
    "$TESSERA" sim --serve-config "$cfg" --calibration "$dir/cal/calibration.json" --policy "$policy" \
        --trace "$scn" --seed "$SEED" "${DUR_ARGS[@]}" --overhead-ms "$oh" --out "$dir/sim" \
        --compare "$dir/measured/report.json" >"$dir/sim.txt" || true
    sed -n '/simulated beside/,$p' "$dir/sim.txt"
}

for s in $SCENARIOS; do run_one "$s" fair; done
[ "$FCFS" = 1 ] && run_one isolation fcfs

# The FCFS-vs-fair ordering: the victim's p99 TTFT, measured and simulated.
if [ "$FCFS" = 1 ] && [ -d "$OUT/isolation-fair" ]; then
    "$PY" - "$OUT" <<'PYEOF'
import json, sys
o = sys.argv[1]
def p99(path):
    for t in json.load(open(path))["tenants"]:
        if t["name"] == "victim": return t["ttft"]["p99_s"] * 1e3
m = {p: p99(f"{o}/isolation-{p}/measured/report.json") for p in ("fair", "fcfs")}
s = {p: p99(f"{o}/isolation-{p}/sim/report.json") for p in ("fair", "fcfs")}
print("victim p99 TTFT, ms: measured fair %.0f fcfs %.0f; simulated fair %.0f fcfs %.0f; ordering %s"
      % (m["fair"], m["fcfs"], s["fair"], s["fcfs"],
         "preserved" if (m["fair"] < m["fcfs"]) == (s["fair"] < s["fcfs"]) else "NOT preserved"))
PYEOF
fi
