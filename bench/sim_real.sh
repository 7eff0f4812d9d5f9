#!/usr/bin/env bash
# bench/sim_real.sh - tessera sim against the real server on this machine:
# the same scenario measured with `tessera bench` against `tessera serve` and
# simulated with `tessera sim` from a calibration, side by side.
#
# For each scenario (isolation, fairness, tiers; isolation also under FCFS):
#   1. calibrate: a fresh server, the scenario with another seed (7), for
#      as long as the measured run sends (or CAL_S seconds: a shorter run
#      sees only the scenario's first phase, as a queue fills); bench saves
#      the server's step-time fit and KV geometry (/admin/models) as
#      calibration.json, and the client-to-engine overhead (HTTP,
#      tokenizing, streaming) is the run's measured mean TTFT less the
#      server's own count of it (overhead_ms below);
#   2. measure: a fresh server, the scenario with seed SEED, whole;
#   3. simulate: tessera sim of the same scenario and seed on the calibrated
#      instance, with --compare against the measured report: REPLICAS runs,
#      each with its own step-time noise, whose median is laid beside each
#      measured figure (one run's p99 of a hundred requests is one draw of
#      its noise: eight runs from one calibration put the victim's p99 TTFT
#      anywhere in 16.1-23.0 ms, and tiers.yaml's bronze p50 TTFT in
#      1.45-1.66 s);
#   4. replay: the same simulation on the measured server's own fit (bench
#      reads it as the send window closes) and overhead, which leaves out how far the
#      machine's speed moved between the calibration run and the measured
#      one (on a shared VM, 10-40% in minutes), so the scheduling's part of
#      any error shows alone;
#   5. (REPEAT=1) the noise floor: a second fresh server measured with the
#      same seed, held against the first with the same tolerances. A figure
#      the server does not repeat within them cannot be judged by them.
# Prints each comparison (compare.txt) and a summary table; the folders keep
# everything. With RUNS=N, N whole runs (OUT_DIR/run-1..N) and, figure by
# figure, the median error over them (across.txt). Every server listens on
# 127.0.0.1, is started fresh and stopped by this script; every run is
# bounded by its scenario. About 9 minutes a run (6 with REPEAT=0).
#
#     bench/sim_real.sh [OUT_DIR]        (default bench-out/sim_real)
#
# The server and the load generator run on CPUs of their own (PIN=1, see
# bench/server.sh): sharing this 2-core VM's two cores, they took each
# other's time unevenly from run to run, and the server repeated only 29 of
# 46 of its own figures; pinned, 41-47 of 47 in four runs, and the
# simulation from calibration went from 15-27 to 41-43.
#
# Environment: TESSERA (default build/tessera), SEED (default 1), CAL_S
# (the calibration's send window in seconds; default the measured run's),
# SCENARIOS (default "isolation fairness tiers"), FCFS (1: isolation under
# FCFS too; default 1), DURATION (the measured and simulated send window;
# default the scenario's), REPEAT (1: measure twice; default 1),
# PIN (default 1; 0: server and load generator share every CPU), REPLICAS
# (simulated runs per comparison, default 8), RESIM (1: no server; simulate
# the calibration and measured runs already in OUT_DIR again, as this
# tessera sim does, and summarise), RUNS (whole runs, default 1; more:
# each into OUT_DIR/run-I, then the median error of each figure over them).
set -euo pipefail
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # see bench/isolation.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/build/tessera}
OUT=${1:-bench-out/sim_real}
SEED=${SEED:-1}
CAL_S=${CAL_S:-}
SCENARIOS=${SCENARIOS:-isolation fairness tiers}
FCFS=${FCFS:-1}
REPEAT=${REPEAT:-1}
REPLICAS=${REPLICAS:-8}
RESIM=${RESIM:-0}
case $REPLICAS in
    ''|*[!0-9]*) REPLICAS_OK=0 ;;
    *) REPLICAS_OK=$(( 10#$REPLICAS >= 1 && 10#$REPLICAS <= 64 )) ;;
esac
[ "$REPLICAS_OK" = 1 ] || { echo "sim_real: REPLICAS wants a whole number 1..64, got '$REPLICAS'" >&2; exit 2; }
RUNS=${RUNS:-1}
case $RUNS in
    ''|*[!0-9]*) RUNS_OK=0 ;;
    *) RUNS_OK=$(( 10#$RUNS >= 1 && 10#$RUNS <= 20 )) ;;
esac
[ "$RUNS_OK" = 1 ] || { echo "sim_real: RUNS wants a whole number 1..20, got '$RUNS'" >&2; exit 2; }
DURATION=${DURATION:-}
DUR_ARGS=()
[ -n "$DURATION" ] && DUR_ARGS=(--duration "$DURATION")
CAL_DUR=${CAL_S:+${CAL_S}s}
CAL_DUR=${CAL_DUR:-$DURATION}   # '': the scenario's window, as the measured run
MODEL=$ROOT/models/demo-15m.gguf
PY=/usr/bin/python3
export TESSERA_ADMIN_KEY=tsk-demo-admin   # the demo configs' admin key

[ -x "$TESSERA" ] || { echo "sim_real: no tessera binary at $TESSERA" >&2; exit 1; }
[ -f "$MODEL" ] || { mkdir -p "$ROOT/models"; "$TESSERA" mkmodel "$MODEL" --preset 15m --type f32 >/dev/null; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

PIN=${PIN:-1}
. "$ROOT/bench/server.sh"
trap stop_server EXIT

config_of() { [ "$1" = tiers ] && echo "$ROOT/examples/demo.yaml" || echo "$ROOT/scenarios/bench-server.yaml"; }

# The client-to-engine overhead of a measured run: the measured mean TTFT
# less the server's own (engine_ttft_mean_s: from hand-over to the first
# token, /admin/tenants), for the tenant with the lowest measured p50 among
# those whose every request got its first token (the measured mean of one
# that did not counts the cut requests' waits, the server's does not). A
# measurement, not a fit to the simulation. Without such a tenant (every
# one backlogged to the end, where a few ms do not matter) or the server's
# figure: the measured p50 less the simulated one (SIM_REPORT), when given;
# else nothing is printed.
overhead_ms() {
    "$PY" - "$1" "${2:-}" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
def lowest(ok):
    best = None
    for t in m["tenants"]:
        if t["completed"] > 0 and ok(t) and (best is None or t["ttft"]["p50_s"] < best["ttft"]["p50_s"]):
            best = t
    return best
best = lowest(lambda t: t.get("engine_ttft_mean_s") is not None and t["ttft_censored"] == 0)
if best is not None:
    d = (best["ttft"]["mean_s"] - best["engine_ttft_mean_s"]) * 1e3
elif not sys.argv[2]:
    sys.exit(0)
else:
    d, best = 0.0, lowest(lambda t: True)
    sim = {t["name"]: t for t in json.load(open(sys.argv[2]))["tenants"]}
    if best is not None and best["name"] in sim and sim[best["name"]]["completed"] > 0:
        d = (best["ttft"]["p50_s"] - sim[best["name"]]["ttft"]["p50_s"]) * 1e3
print("%.3f" % max(d, 0.0))
PYEOF
}

# Measured run B against measured run A, figure by figure, with tessera
# sim --compare's tolerances (p50 10%, p99 20%, Jain 0.02); each figure into
# FILE in compare.txt's columns.
repeat_ok() {   # A B FILE
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
tb = {t["name"]: t for t in b["tenants"]}
n = ok = 0
worst = []
lines = ["%-20s %-10s %12s %12s %10s %9s" % ("tenant", "figure", "first", "second", "error", "tolerance")]
for t in a["tenants"]:
    u = tb.get(t["name"])
    if not u or t["completed"] <= 0 or u["completed"] <= 0:
        continue
    for fig in ("ttft", "tpot"):
        for q, tol in (("p50_s", 0.10), ("p99_s", 0.20)):
            x, y = t[fig][q], u[fig][q]
            if not x:
                continue
            e = abs(y - x) / x
            n += 1
            ok += e <= tol
            worst.append((e, "%s %s %s" % (t["name"], fig, q[:3])))
            lines.append("%-20s %-10s %12.4g %12.4g %9.3f%% %8.0f%%  %s" % (
                t["name"], fig + "_" + q[:3], x * 1e3, y * 1e3, 100 * e, 100 * tol, "ok" if e <= tol else "OUTSIDE"))
ja, jb = a.get("jain", {}).get("index"), b.get("jain", {}).get("index")
if ja is not None and jb is not None and a["jain"].get("backlogged_tenants", 0) >= 2:
    n += 1
    ok += abs(ja - jb) <= 0.02
    lines.append("%-20s %-10s %12.4g %12.4g %10.3f %9s  %s" % (
        "(all)", "jain", ja, jb, abs(ja - jb), "0.02", "ok" if abs(ja - jb) <= 0.02 else "OUTSIDE"))
open(sys.argv[3], "w").write("\n".join(lines) + "\n")
worst.sort(reverse=True)
print("%d of %d figures within tolerance of the first run; furthest: %s" %
      (ok, n, ", ".join("%s %.0f%%" % (w, 100 * e) for e, w in worst[:3])))
PYEOF
}

# The calibration run, the measured run and (REPEAT=1) its repeat, each
# against a fresh server, into dir.
measure() {   # DIR CFG SCN POLICY NAME
    local dir=$1 cfg=$2 scn=$3 policy=$4 name=$5
    rm -rf "$dir"   # nothing of an earlier run may be summed as this one's
    mkdir -p "$dir"
    echo "== $name ($policy): calibrating (${CAL_DUR:+$CAL_DUR, }seed 7)"
    echo "$CAL_DUR" >"$dir/cal-duration"   # for RESIM ('': the scenario's window)
    start_server "$cfg" "$policy" "$dir/server-cal.log"
    ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$TESSERA" bench --scenario "$scn" --url "$URL" --seed 7 ${CAL_DUR:+--duration "$CAL_DUR"} \
        --out "$dir/cal" --quiet >"$dir/cal.txt"
    stop_server
    echo "   measuring (seed $SEED)"
    start_server "$cfg" "$policy" "$dir/server.log"
    ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$TESSERA" bench --scenario "$scn" --url "$URL" --seed "$SEED" ${DUR_ARGS[@]+"${DUR_ARGS[@]}"} --out "$dir/measured" --quiet \
        >"$dir/measured.txt"
    stop_server
    if [ "$REPEAT" = 1 ]; then
        start_server "$cfg" "$policy" "$dir/server-repeat.log"
        ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} "$TESSERA" bench --scenario "$scn" --url "$URL" --seed "$SEED" ${DUR_ARGS[@]+"${DUR_ARGS[@]}"} --out "$dir/repeat" \
            --quiet >"$dir/repeat.txt"
        stop_server
        repeat_ok "$dir/measured/report.json" "$dir/repeat/report.json" "$dir/repeat-compare.txt" \
            >"$dir/noise-floor.txt"
        echo "   measured again (the noise floor): $(cat "$dir/noise-floor.txt")"
    fi
}

run_one() {   # NAME POLICY
    local name=$1 policy=$2 dir="$OUT/$1-$2" cfg scn
    cfg=$(config_of "$name"); scn="$ROOT/scenarios/$name.yaml"
    if [ "$RESIM" = 1 ]; then
        [ -f "$dir/measured/report.json" ] || { echo "sim_real: RESIM=1: no measured run in $dir" >&2; return 1; }
        local was
        was=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("seed"))' \
            "$dir/measured/report.json")
        if [ "$was" != "$SEED" ]; then
            echo "sim_real: RESIM=1: $dir was measured with seed $was, not SEED=$SEED" >&2
            return 1
        fi
        # What an earlier simulation left must not pass for this one's.
        rm -rf "$dir/cal-sim" "$dir/sim" "$dir/replay" "$dir/sim.txt" "$dir/replay.txt"
        [ ! -f "$dir/repeat/report.json" ] ||
            repeat_ok "$dir/measured/report.json" "$dir/repeat/report.json" "$dir/repeat-compare.txt" \
                >"$dir/noise-floor.txt"
        echo "== $name ($policy): simulating the runs in $dir again"
    else
        measure "$dir" "$cfg" "$scn" "$policy" "$name"
    fi
    local cal_dur   # runs from before cal-duration calibrated for 15 s
    cal_dur=$(cat "$dir/cal-duration" 2>/dev/null || echo 15s)
    "$TESSERA" sim --serve-config "$cfg" --calibration "$dir/cal/calibration.json" --policy "$policy" \
        --trace "$scn" --seed 7 ${cal_dur:+--duration "$cal_dur"} --out "$dir/cal-sim" >/dev/null || true
    local oh; oh=$(overhead_ms "$dir/cal/report.json" "$dir/cal-sim/report.json")
    echo "   overhead ${oh} ms"
    "$TESSERA" sim --serve-config "$cfg" --calibration "$dir/cal/calibration.json" --policy "$policy" \
        --trace "$scn" --seed "$SEED" ${DUR_ARGS[@]+"${DUR_ARGS[@]}"} --overhead-ms "$oh" --out "$dir/sim" \
        --compare "$dir/measured/report.json" --replicas "$REPLICAS" >"$dir/sim.txt" || true
    sed -n '/simulated beside/,$p' "$dir/sim.txt"
    [ -f "$dir/measured/calibration.json" ] || return 0
    local moh; moh=$(overhead_ms "$dir/measured/report.json"); moh=${moh:-$oh}
    "$TESSERA" sim --serve-config "$cfg" --calibration "$dir/measured/calibration.json" --policy "$policy" \
        --trace "$scn" --seed "$SEED" ${DUR_ARGS[@]+"${DUR_ARGS[@]}"} --overhead-ms "$moh" --out "$dir/replay" \
        --compare "$dir/measured/report.json" --replicas "$REPLICAS" >"$dir/replay.txt" || true
    echo "   replayed on the measured server's own fit (overhead ${moh} ms):"
    sed -n '/simulated beside/,$p' "$dir/replay.txt" | grep -E "OUTSIDE|outside tolerance" | sed 's/^/   /'
}

# Figure by figure over several whole runs (RUNS > 1): the median error and
# the largest, for the server against itself, the simulation from
# calibration and the replay. One run's figure is one draw of the machine's
# noise (the server against itself misses some in most runs); the median
# over runs is the error a figure typically has. A cell over fewer runs than
# were given (a simulation that failed, a tenant with nothing done) says how
# many.
across() {   # RUN_DIR...
    "$PY" - "$SCENARIOS" "$FCFS" "$@" <<'PYEOF'
import os, statistics, sys
scenarios, fcfs, runs = sys.argv[1].split(), sys.argv[2] == "1", sys.argv[3:]
dirs = [s + "-fair" for s in scenarios] + (["isolation-fcfs"] if fcfs and "isolation" in scenarios else [])
kinds = (("server against itself", "repeat-compare.txt"), ("simulated from calibration", "sim/compare.txt"),
         ("replayed on the run's fit", "replay/compare.txt"))
def figures(path):
    got = {}
    if os.path.exists(path):
        for line in open(path):
            f = line.split()
            if len(f) >= 7 and f[-1] in ("ok", "OUTSIDE"):
                got[(f[0], f[1])] = (float(f[-3].rstrip("%")), float(f[-2].rstrip("%")), f[-3].endswith("%"))
    return got
print("median error over %d runs (the largest in brackets)" % len(runs))
print("%-32s %6s  %s" % ("figure", "tol", "  ".join("%-26s" % k for k, _ in kinds)))
within = {k: [0, 0, 0] for k, _ in kinds}   # within, figures, figures over fewer runs
for d in dirs:
    per = {k: [figures(os.path.join(r, d, f)) for r in runs] for k, f in kinds}
    keys = []
    for k, _ in kinds:
        for run in per[k]:
            keys += [x for x in run if x not in keys]
    print("== %s" % d)
    for key in keys:
        cells, tol, pct = [], None, True
        for k, _ in kinds:
            errs = [run[key][0] for run in per[k] if key in run]
            if not errs:
                cells.append("%-26s" % "-")
                continue
            tol, pct = next(run[key][1:] for run in per[k] if key in run)
            m = statistics.median(errs)
            within[k][0] += m <= tol
            within[k][1] += 1
            u = "%" if pct else ""
            few = "" if len(errs) == len(runs) else " %d/%d" % (len(errs), len(runs))
            within[k][2] += few != ""
            cells.append("%-26s" % ("%.3g%s (%.3g%s)%s%s" % (m, u, max(errs), u, few, "" if m <= tol else " OUT")))
        print("%-32s %6s  %s" % (" ".join(key), "%g%s" % (tol, "%" if pct else ""), "  ".join(cells)))
print("figures whose median error is within tolerance: " +
      ", ".join("%s %d/%d%s" % (k, w[0], w[1], " (%d over fewer runs)" % w[2] if w[2] else "")
                for k, w in within.items()))
PYEOF
}

if [ "$RUNS" -gt 1 ]; then
    run_dirs=()
    for i in $(seq 1 "$RUNS"); do
        echo "=== run $i of $RUNS"
        RUNS=1 "$BASH" "$ROOT/bench/sim_real.sh" "$OUT/run-$i"
        run_dirs+=("$OUT/run-$i")
    done
    across "${run_dirs[@]}" | tee "$OUT/across.txt"
    exit 0
fi

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
print("victim p99 TTFT, ms: measured fair %.0f fcfs %.0f; simulated (the first run) fair %.0f fcfs %.0f; ordering %s"
      % (m["fair"], m["fcfs"], s["fair"], s["fcfs"],
         "preserved" if (m["fair"] < m["fcfs"]) == (s["fair"] < s["fcfs"]) else "NOT preserved"))
PYEOF
fi

# The summary: figures within tolerance per scenario, for the server against
# itself (REPEAT=1), the simulation from calibration and the replay.
summary() {
    "$PY" - "$OUT" "$SCENARIOS" "$FCFS" <<'PYEOF'
import os, re, sys
out, scenarios, fcfs = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1"
dirs = [s + "-fair" for s in scenarios] + (["isolation-fcfs"] if fcfs and "isolation" in scenarios else [])
def counts(path):
    if not os.path.exists(path):
        return None
    ok = n = 0
    for line in open(path):
        m = re.search(r"\s(ok|OUTSIDE)$", line.rstrip())
        if m:
            n += 1
            ok += m.group(1) == "ok"
    return ok, n
def floor(path):
    m = re.match(r"(\d+) of (\d+) figures", open(path).read()) if os.path.exists(path) else None
    return (int(m.group(1)), int(m.group(2))) if m else None
rows = {"server against itself": lambda d: floor(os.path.join(out, d, "noise-floor.txt")),
        "simulated from calibration": lambda d: counts(os.path.join(out, d, "sim", "compare.txt")),
        "replayed on the run's fit": lambda d: counts(os.path.join(out, d, "replay", "compare.txt"))}
print("%-28s %s  total" % ("figures within tolerance", "  ".join("%-15s" % d for d in dirs)))
for label, get in rows.items():
    cells, tok, tn = [], 0, 0
    for d in dirs:
        c = get(d)
        cells.append("%-15s" % ("%d/%d" % c if c else "-"))
        if c:
            tok, tn = tok + c[0], tn + c[1]
    print("%-28s %s  %d/%d" % (label, "  ".join(cells), tok, tn))
PYEOF
}
summary
