#!/usr/bin/env bash
# Run the libFuzzer targets built in $BUILD (make fuzz builds them), one at
# a time: first replay fuzz/regress/<target>/ (inputs that once crashed),
# then fuzz for FUZZ_SECONDS from the checked-in seeds in
# fuzz/corpus/<target>/ plus what earlier runs found ($BUILD/fuzz-corpus,
# never the checked-in folder). Each input is bounded in memory, time and
# length. Prints executions, speed and coverage per target and fails if
# any target crashed, leaked, timed out or ran out of memory; the input
# that did it is kept under $BUILD/fuzz-artifacts/<target>/.
#
#   fuzz/run.sh                    every target, FUZZ_SECONDS (60) each
#   fuzz/run.sh fuzz_oai fuzz_tok  just these
#   FUZZ_SECONDS=600 fuzz/run.sh fuzz_gguf
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-60}
RSS_MB=${FUZZ_RSS_MB:-2048}       # memory per process (also the malloc limit)
TIMEOUT_S=${FUZZ_TIMEOUT_S:-10}   # seconds per input

# The longest input a target is given: room for its largest seed.
max_len() {
    case "$1" in
    fuzz_gguf) echo 327680 ;;     # the model seeds are 20-30 KB, the q4_K one 270 KB
    fuzz_tok)  echo 4096 ;;
    fuzz_oai)  echo 8192 ;;
    fuzz_jinja) echo 16384 ;;     # the published templates are up to 4.5 KB
    fuzz_simplan) echo 32768 ;;   # the golden plans' json reports are up to 20 KB
    *)         echo 16384 ;;      # YAML: the examples are up to 4 KB
    esac
}

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for src in fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi

# Stacks for UBSan reports too (libFuzzer sets ASan's options itself).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$BUILD/fuzz-logs"
summary=()
failed=0
for t in "${targets[@]}"; do
    bin="$BUILD/$t"
    name=${t#fuzz_}
    if [ ! -x "$bin" ]; then
        echo "fuzz: $bin is missing (make fuzz builds it)" >&2
        summary+=("$(printf '%-14s %s' "$t" "MISSING")")
        failed=1
        continue
    fi
    log="$BUILD/fuzz-logs/$t.log"
    art="$BUILD/fuzz-artifacts/$t/"
    work="$BUILD/fuzz-corpus/$name"
    mkdir -p "$art" "$work"
    common=(-rss_limit_mb="$RSS_MB" -timeout="$TIMEOUT_S" -max_len="$(max_len "$t")"
            -artifact_prefix="$art")
    [ -f "fuzz/dict/$name.dict" ] && common+=(-dict="fuzz/dict/$name.dict")

    # Regression inputs: each must run clean.
    regress=(fuzz/regress/"$name"/*)
    n_regress=0
    status="ok"
    if [ -e "${regress[0]}" ]; then
        n_regress=${#regress[@]}
        echo "== $t: replaying $n_regress regression input(s)"
        if ! "$bin" "${common[@]}" "${regress[@]}" >"$log.regress" 2>&1; then
            echo "fuzz: $t fails on a regression input:" >&2
            grep -E "Running:|ERROR|SUMMARY|invariant broken|runtime error" "$log.regress" | head -20 >&2
            status="REGRESSION"
            failed=1
        fi
    fi

    echo "== $t: fuzzing for ${SECONDS_EACH}s"
    timeout $((SECONDS_EACH + 300)) "$bin" "${common[@]}" -max_total_time="$SECONDS_EACH" \
        -print_final_stats=1 "$work" "fuzz/corpus/$name" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "fuzz: $t failed (exit $rc); the report:" >&2
        grep -vE '^#[0-9]+\s+(NEW|REDUCE|pulse|RELOAD)' "$log" | tail -60 >&2
        ls "$art" 2>/dev/null | sed "s|^|fuzz: reproducer: $art|" >&2
        status="CRASH"
        failed=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+\s+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    summary+=("$(printf '%-14s %-10s %12s %9s %7s %7s %14s %8s' "$t" "$status" "${execs:--}" \
        "${speed:--}" "${cov:--}" "${ft:--}" "${corp:--}" "$n_regress")")
done

echo
printf '%-14s %-10s %12s %9s %7s %7s %14s %8s\n' target status executions exec/s cov ft corpus regress
for line in "${summary[@]}"; do echo "$line"; done
echo "(logs: $BUILD/fuzz-logs/; corpus grown: $BUILD/fuzz-corpus/)"
exit $failed
