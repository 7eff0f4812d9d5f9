#!/usr/bin/env bash
# bench/isolation.sh - tessera's isolation and fairness comparison, in one run
# on the demo model:
#
#   1. scenarios/isolation.yaml (a victim at 1 request/s, an aggressor at 10x
#      capacity, same tier and weight) against `tessera serve --policy fcfs`
#      and against the default (fair) policy, each also with the victim alone
#      (--tenants victim: the same victim arrivals); prints the victim's p99
#      TTFT with the aggressor over its p99 TTFT alone, per policy;
#   2. scenarios/fairness.yaml (four backlogged tenants, short and long
#      requests) against the default policy: Jain's index;
#   3. scenarios/tiers.yaml (gold, silver, bronze over capacity) against
#      examples/demo.yaml: gold's SLO attainment and bronze's progress;
#   4. the fair isolation runs again at 16 and 32 seats (bench-server.yaml
#      with max_seqs changed): the victim's ratio and the aggregate output
#      tokens/s at 6, 16 and 32 seats, from this one run;
#   5. scenarios/floors.yaml (gold floods, silver and bronze send more than
#      their floors) against examples/demo.yaml: each band's share of the
#      service against its min_share.
#
#     bench/isolation.sh [OUT_DIR]        (default bench-out/isolation)
#
# Every server is started fresh for each run (no state carried between runs),
# listens on 127.0.0.1 on a free port, and is stopped by this script (also
# on Ctrl-C). Every bench run is bounded by its scenario (send window +
# drain) and by a timeout around it; the whole script takes about ten
# minutes. SEATS (default "16 32") lists the extra seat counts of part 4. Environment: TESSERA (the binary; default build/tessera, made by
# `make`), SEED (default 1), OMP_WAIT_POLICY (default passive, see below).
set -euo pipefail

# The load generator runs on the same machine as the server. With OpenMP's
# default active waiting, an engine thread that reaches a barrier spins
# while its partner is descheduled by any other busy process (the load
# generator, or anything else on the box), and a forward pass has a barrier
# per kernel: on 2 cores with one other busy process, the victim's TPOT went
# from 8 ms to 51 ms (TTFT 25 -> 299 ms), which measures the machine, not the
# scheduler. Passive waiting sleeps at barriers instead. Set
# OMP_WAIT_POLICY=active to measure the default.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/build/tessera}
OUT=${1:-bench-out/isolation}
SEED=${SEED:-1}
MODEL=$ROOT/models/demo-15m.gguf
PY=/usr/bin/python3

[ -x "$TESSERA" ] || { echo "isolation: no tessera binary at $TESSERA (run make, or set TESSERA)" >&2; exit 1; }
if [ ! -f "$MODEL" ]; then
    mkdir -p "$ROOT/models"
    "$TESSERA" mkmodel "$MODEL" --preset 15m --type f32
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

. "$ROOT/bench/server.sh"
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM

# run NAME CONFIG POLICY SCENARIO [bench options...]: one fresh server, one
# bench run into $OUT/NAME.
run() {
    local name=$1 config=$2 policy=$3 scenario=$4
    shift 4
    echo "=== $name: $(basename "$scenario") against $(basename "$config") --policy $policy $*"
    start_server "$config" "$policy" "$OUT/$name.server.log"
    # The scenario bounds the run (window + drain + 5 s); the timeout is a
    # second fence in case anything hangs.
    timeout -k 5 120 "$TESSERA" bench --scenario "$scenario" --url "$URL" --out "$OUT/$name" --seed "$SEED" "$@" \
        | tee "$OUT/$name.txt"
    stop_server
}

date -u +"isolation: started %Y-%m-%dT%H:%M:%SZ on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), OMP_WAIT_POLICY=$OMP_WAIT_POLICY" \
    | tee "$OUT/summary.txt"
BS=$ROOT/scenarios/bench-server.yaml
run fcfs-alone "$BS" fcfs "$ROOT/scenarios/isolation.yaml" --tenants victim
run fcfs-flood "$BS" fcfs "$ROOT/scenarios/isolation.yaml"
run fair-alone "$BS" fair "$ROOT/scenarios/isolation.yaml" --tenants victim
run fair-flood "$BS" fair "$ROOT/scenarios/isolation.yaml"
run fairness "$BS" fair "$ROOT/scenarios/fairness.yaml"
run tiers "$ROOT/examples/demo.yaml" fair "$ROOT/scenarios/tiers.yaml"
for n in ${SEATS-16 32}; do
    # The same server at n seats; the model path made absolute, since the
    # copy lives in $OUT.
    sed -e "s/^    max_seqs: 6\$/    max_seqs: $n/" -e "s#\.\./models/demo-15m\.gguf#$MODEL#" "$BS" >"$OUT/bench-server-$n.yaml"
    grep -q "max_seqs: $n\$" "$OUT/bench-server-$n.yaml" || { echo "isolation: could not set max_seqs in a copy of $BS" >&2; exit 1; }
    run "fair-alone-$n" "$OUT/bench-server-$n.yaml" fair "$ROOT/scenarios/isolation.yaml" --tenants victim
    run "fair-flood-$n" "$OUT/bench-server-$n.yaml" fair "$ROOT/scenarios/isolation.yaml"
done
run floors "$ROOT/examples/demo.yaml" fair "$ROOT/scenarios/floors.yaml"

"$PY" - "$OUT" "${SEATS-16 32}" <<'EOF' | tee -a "$OUT/summary.txt"
import json, os, sys
out, seats = sys.argv[1], sys.argv[2].split()
def load(name):
    with open(os.path.join(out, name, "report.json")) as f:
        return json.load(f)
def tenant(rep, name):
    return next(t for t in rep["tenants"] if t["name"] == name)
print()
print("| policy | victim p99 TTFT alone | victim p99 TTFT with the aggressor | ratio (target <= 1.5) | victim SLO attainment with the aggressor |")
print("|---|---|---|---|---|")
for pol in ("fcfs", "fair"):
    alone, flood = tenant(load(pol + "-alone"), "victim"), tenant(load(pol + "-flood"), "victim")
    a, f = alone["ttft"]["p99_s"], flood["ttft"]["p99_s"]
    cens = flood["ttft_censored"]
    note = f" ({cens} of {flood['due']} never got a first token: a lower bound)" if cens else ""
    ratio = f / a if a > 0 else float("inf")
    slo = flood["slo_attainment"]
    print(f"| {pol} | {a*1e3:.0f} ms | {f*1e3:.0f} ms{note} | {ratio:.1f} | {slo*100:.1f}% |")
fair = load("fairness")
rates = ", ".join(f"{t['name']} {t['weighted_service_rate']:.0f}" for t in fair["tenants"] if t["backlogged_s"] > 0)
print()
print(f"fairness.yaml (fair policy): Jain's index {fair['jain']['index']:.3f} over "
      f"{fair['jain']['backlogged_tenants']} backlogged tenants (target >= 0.95); weighted service/s: {rates}")
tiers = load("tiers")
g, b = tenant(tiers, "gold-team"), tenant(tiers, "bronze-team")
print(f"tiers.yaml (demo.yaml, fair policy): gold SLO attainment {g['slo_attainment']*100:.1f}% "
      f"(target >= 99%, TTFT p99 {g['ttft']['p99_s']*1e3:.0f} ms); bronze completed {b['completed']} of {b['due']}, "
      f"{b['output_tokens_per_s']:.1f} output tokens/s (progress: {'yes' if b['completed'] > 0 else 'NO'})")
print()
print("| seats (fair policy) | victim p99 TTFT alone | with the aggressor | ratio (target <= 1.5) | aggregate output tokens/s with the aggressor |")
print("|---|---|---|---|---|")
for n in ["6"] + seats:
    sfx = "" if n == "6" else "-" + n
    alone, rep = tenant(load("fair-alone" + sfx), "victim"), load("fair-flood" + sfx)
    a, f = alone["ttft"]["p99_s"], tenant(rep, "victim")["ttft"]["p99_s"]
    agg = sum(t["output_tokens_per_s"] for t in rep["tenants"])
    print(f"| {n} | {a*1e3:.0f} ms | {f*1e3:.0f} ms | {f / a if a > 0 else float('inf'):.2f} | {agg:.0f} |")
fl = load("floors")
total = sum(t["service"] for t in fl["tenants"])
floors = {"gold-team": 0.0, "silver-team": 0.10, "bronze-team": 0.05}
print()
print("floors.yaml (demo.yaml, gold flooding): share of the service by band, against min_share:")
for t in fl["tenants"]:
    share = t["service"] / total if total > 0 else 0.0
    print(f"  {t['name']}: {share*100:.1f}% (min_share {floors.get(t['name'], 0)*100:.0f}%), completed {t['completed']} of {t['due']}, "
          f"TTFT p99 {t['ttft']['p99_s']*1e3:.0f} ms")
EOF
# One plot of the victim's TTFT in the four isolation runs (the victim is the
# first block of each ttft_cdf.dat, see src/bench/plot.c).
if command -v gnuplot >/dev/null && head -1 "$OUT/fair-flood/ttft_cdf.dat" | grep -q '^# victim$'; then
    {
        for fmt in svg png; do
            if [ $fmt = svg ]; then
                echo "set terminal svg size 900,500 dynamic background rgb 'white' font 'sans,12'"
            else
                echo "set terminal pngcairo size 900,500 background rgb 'white' font 'sans,10'"
            fi
            cat <<GP
set output 'victim_ttft.$fmt'
set title "victim's TTFT, isolation.yaml: alone and with a 10x aggressor, per policy"
set xlabel 'time to first token (ms, log scale)'
set ylabel 'share of the victim requests'
set logscale x
set yrange [0:1]
set grid
set key bottom right
plot 'fair-alone/ttft_cdf.dat' index 0 using 1:2 with steps lw 2 title 'fair, alone', \\
     'fair-flood/ttft_cdf.dat' index 0 using 1:2 with steps lw 2 title 'fair, with the aggressor', \\
     'fcfs-alone/ttft_cdf.dat' index 0 using 1:2 with steps lw 2 dt 2 title 'fcfs, alone', \\
     'fcfs-flood/ttft_cdf.dat' index 0 using 1:2 with steps lw 2 dt 2 title 'fcfs, with the aggressor'
GP
        done
    } >"$OUT/victim_ttft.gp"
    (cd "$OUT" && gnuplot victim_ttft.gp) || echo "isolation: gnuplot failed on $OUT/victim_ttft.gp" >&2
fi
echo "isolation: reports, plots and server logs in $OUT; finished at load average $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee -a "$OUT/summary.txt"
