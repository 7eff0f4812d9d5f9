# bench/server.sh - start and stop a fresh `tessera serve` for the benchmark
# scripts (sourced, not run). Needs TESSERA (the binary); sets SERVER_PID and
# URL. The caller traps stop_server on EXIT. DEVICE, when set, is passed as
# --device (DEVICE=cuda runs the same scenarios on the CUDA backend).
#
# PIN=1 (a caller's choice): the server runs on every CPU but the last and
# the load generator, started as "${CLIENT_PIN[@]}" "$TESSERA" bench ..., on
# the last, so the two never take each other's time. On the 2-core VM,
# sharing both cores, the server repeated 29 of 46 of its own figures
# between two runs of the same seed; pinned, 41 to 47 of 47 in four runs
# (bench/sim_real.sh).
# The engine then has one thread fewer. Nothing is pinned (and a line on
# stderr says so) on one CPU, without taskset, or where this process may not
# use every CPU (their numbers unknown). Written ${A[@]+"${A[@]}"} where A
# may be empty, which bash before 4.4 calls unbound under set -u.

SERVER_PID=""
SERVER_PIN=()
CLIENT_PIN=()
if [ "${PIN:-0}" = 1 ]; then
    # nproc counts OMP_NUM_THREADS and OMP_THREAD_LIMIT as limits: not here.
    _ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    if command -v taskset >/dev/null && [ "$_ncpu" -ge 2 ] &&
        [ "$_ncpu" = "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc --all)" ]; then
        SERVER_PIN=(taskset -c "0-$((_ncpu - 2))")
        CLIENT_PIN=(taskset -c "$((_ncpu - 1))")
    else
        echo "$(basename "$0"): PIN=1 but nothing pinned (one CPU, no taskset, or a restricted CPU set):" \
            "server and load generator share the CPUs" >&2
    fi
fi

# stop_server: TERM, then at most 15 s of drain (the configs' grace is
# 2 s in bench-server.yaml and 10 s in demo.yaml), then KILL.
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 150); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}

# start_server CONFIG POLICY LOG: start on a free port of 127.0.0.1, set URL.
start_server() {
    local config=$1 policy=$2 log=$3
    : >"$log"   # before the server's own redirect opens it: sed below reads it at once
    ${SERVER_PIN[@]+"${SERVER_PIN[@]}"} "$TESSERA" serve --config "$config" --policy "$policy" --listen 127.0.0.1:0 \
        ${DEVICE:+--device "$DEVICE"} \
        >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 300); do
        URL=$(sed -n 's/^tessera: listening on \(http:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$log")
        [ -n "$URL" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "$(basename "$0"): the server did not start; its log ($log):" >&2
    cat "$log" >&2
    exit 1
}
