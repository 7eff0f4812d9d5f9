#!/usr/bin/env bash
# gpu-check.sh - everything a short GPU session should run, in one go:
# configure and build the CUDA backend for sm_90 in its own build folder
# (build-gpu), run the CUDA tests (kernels and engines against the CPU
# backend), the device CLI test, and the GPU benchmark (bench_gpu: decode
# at batch 1/16/64/256 on the 110m preset and the Llama-3.2-1B shape,
# prefill, swap bandwidth), and write every log and result under one
# folder. Each step runs under `timeout` within an overall budget
# (GPU_CHECK_BUDGET_S, default 450 s), so the whole stays under 8 minutes
# on an H200 even when a step hangs.
#
#   scripts/gpu-check.sh [OUTDIR]      OUTDIR default: $OUT, else ./gpu-check-out
#
# Libraries: with all of tessera's (pkg-config finds them) it builds
# everything and also runs tests/device_cli.sh; with only the engine's, or
# with none but the .deb files of scripts/gpu-deps.sh in .gpu-deps/ (which
# it unpacks into its scratch folder, never into /), it builds the engine
# alone (TESSERA_ENGINE_ONLY). A GPU image without Debian's libraries and
# without a network needs the second way: run gpu-deps.sh where apt works
# and carry .gpu-deps (it is git-ignored) with the working tree.
#
# Exit status: 0 when every step passed; 3 when the build worked but there
# is no GPU (the tests' "skipped"); 1 when a step failed. The summary at
# the end (also OUTDIR/summary.txt) names each step's result and its log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-./gpu-check-out}}
BUDGET=${GPU_CHECK_BUDGET_S:-450}
BUILD=${GPU_CHECK_BUILD:-build-gpu}
ARCH=${GPU_CHECK_ARCH:-90}
mkdir -p "$OUTDIR" || { echo "gpu-check: cannot make $OUTDIR" >&2; exit 1; }
OUTDIR=$(cd "$OUTDIR" && pwd)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") # model files: GBs, never under OUTDIR
trap 'rm -rf "$SCRATCH"' EXIT
START=$(date +%s)
SUMMARY="$OUTDIR/summary.txt"
: >"$SUMMARY"
STATUS=0

say() { echo "gpu-check: $*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME LOG CAP_S CMD...: run CMD under timeout (CAP_S or what is left
# of the budget, the lower), its output appended to OUTDIR/LOG.log under a
# header. Returns CMD's status. Steps share logs because the device tool
# brings back at most 8 files: summary, machine, nvidia-smi-q, build,
# test_cuda, tests, bench_gpu (.log and .jsonl).
step() {
    local name=$1 log=$2.log cap=$3 rc=0 t0
    shift 3
    local lim
    lim=$(left)
    [ "$cap" -lt "$lim" ] || cap=$lim
    if [ "$cap" -lt 5 ]; then
        say "$name: NOT RUN (the ${BUDGET} s budget is spent)"
        return 124
    fi
    t0=$(date +%s)
    echo "==== $name: $*" >>"$OUTDIR/$log"
    timeout --kill-after=10 "$cap" "$@" >>"$OUTDIR/$log" 2>&1 || rc=$?
    local dt=$(($(date +%s) - t0))
    case $rc in
        0) say "$name: ok (${dt} s)" ;;
        77) say "$name: skipped (${dt} s; see $log)" ;;
        124 | 137) say "$name: TIMED OUT after ${cap} s (see $log)" ;;
        *) say "$name: FAILED, status $rc (${dt} s; see $log)" ;;
    esac
    return $rc
}

# ---- what machine this is ---------------------------------------------------------
{
    date -u
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)," \
        "$(git status --porcelain 2>/dev/null | wc -l) changed files"
    uname -a
    nproc
    command -v nvcc >/dev/null && nvcc --version
    cmake --version | head -1
} >"$OUTDIR/machine.txt" 2>&1
if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi -q >"$OUTDIR/nvidia-smi-q.txt" 2>&1
    timeout 30 nvidia-smi >>"$OUTDIR/machine.txt" 2>&1
    say "GPU: $(timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version,mig.mode.current \
                  --format=csv,noheader 2>/dev/null | head -1)"
else
    say "GPU: nvidia-smi not found"
fi

# ---- libraries ----------------------------------------------------------------------
ENGINE_LIBS="openblas libpcre2-8 libcjson yaml-0.1 cmocka"
SERVER_LIBS="libcrypto libmicrohttpd libcurl"
PKGCONF=$(command -v pkg-config || true)
EXTRA=()
# Unpack .gpu-deps/*.deb into SYS and point pkg-config, the compiler, the
# linker and the loader at it, and at it alone for pkg-config.
use_sysroot() {
    local SYS="$PWD/$BUILD-sysroot" ML
    rm -rf "$SYS"
    ML="$SYS/usr/lib/x86_64-linux-gnu"
    for d in .gpu-deps/*.deb; do dpkg-deb -x "$d" "$SYS" || return 1; done
    # Debian selects the OpenBLAS variant by update-alternatives, which an
    # unpacked package does not run: the pthread variant's own folder goes
    # on the paths.
    export PKG_CONFIG_LIBDIR="$ML/pkgconfig:$ML/openblas-pthread/pkgconfig:$SYS/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$SYS"
    export CPATH="$SYS/usr/include:$SYS/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$ML:$ML/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$ML:$ML/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -n "$PKGCONF" ] || PKGCONF="$SYS/usr/bin/pkgconf"
}
MODE=full
if [ -n "$PKGCONF" ] && [ -z "${GPU_CHECK_SYSROOT:-}" ] && "$PKGCONF" --exists $ENGINE_LIBS; then
    "$PKGCONF" --exists $SERVER_LIBS || MODE=engine
    say "libraries: the system's ($MODE build)"
elif ls .gpu-deps/*.deb >/dev/null 2>&1; then
    use_sysroot || { say "result: FAILED unpacking .gpu-deps"; exit 1; }
    MODE=engine
    say "libraries: unpacked from .gpu-deps ($(ls .gpu-deps/*.deb | wc -l) packages; engine build)"
else
    say "libraries: the engine's ($ENGINE_LIBS) are missing and there is no .gpu-deps/:"
    say "  run scripts/gpu-deps.sh where apt works and carry .gpu-deps here"
    say "result: FAILED (no libraries to build with)"
    exit 1
fi
if [ "$MODE" = full ]; then EXTRA+=(-DTESSERA_ENGINE_ONLY=OFF); else EXTRA+=(-DTESSERA_ENGINE_ONLY=ON); fi
# CMake caches what pkg-config found: a build folder configured against
# other libraries (the system's, or the unpacked ones) starts afresh. The
# unpacked ones always lie at the same path, so a second run (after a fix)
# keeps its build folder and only recompiles what changed.
WHERE="$MODE ${PKG_CONFIG_SYSROOT_DIR:-system}"
if [ -f "$BUILD/.gpu-check-libs" ] && [ "$(cat "$BUILD/.gpu-check-libs")" != "$WHERE" ]; then
    rm -rf "$BUILD"
fi
mkdir -p "$BUILD" && echo "$WHERE" >"$BUILD/.gpu-check-libs"
[ -z "$PKGCONF" ] || EXTRA+=(-DPKG_CONFIG_EXECUTABLE="$PKGCONF")

# ---- build ------------------------------------------------------------------------
JOBS=$(nproc)
TARGETS=(test_cuda test_cuda_levers bench_gpu)
[ "$MODE" = engine ] || TARGETS+=(tessera)
if ! step configure build 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${EXTRA[@]}"; then
    say "result: FAILED at configure"
    exit 1
fi
if ! step build build 300 cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"; then
    say "result: FAILED at build"
    exit 1
fi

# ---- is there a GPU? ----------------------------------------------------------------
# test_cuda's own probe decides: 77 is "no device" (with the runtime's reason).
step test_cuda test_cuda 150 "$BUILD/test_cuda"
rc=$?
if [ "$rc" -eq 77 ]; then
    say "no GPU: $(grep -m1 SKIPPED "$OUTDIR/test_cuda.log")"
    say "result: the build is good; nothing was tested on a GPU"
    exit 3
fi
[ "$rc" -eq 0 ] || STATUS=1

step test_cuda_levers tests 30 "$BUILD/test_cuda_levers" || STATUS=1
if [ "$MODE" = full ]; then
    # device_cli writes a BERT with NumPy: the first python3 that has it.
    PY=python3
    for p in /usr/bin/python3 python3; do
        if "$p" -c "import numpy" 2>/dev/null; then PY=$p; break; fi
    done
    step device_cli tests 60 env TS_TESSERA="$BUILD/tessera" TS_TMPDIR="$SCRATCH" TS_SRC="$PWD" PY="$PY" \
        bash tests/device_cli.sh || STATUS=1
else
    say "device_cli: not run (an engine-only build has no tessera binary; test_cuda covers greedy decoding)"
fi

# ---- benchmark ------------------------------------------------------------------------
step bench_gpu bench_gpu 240 "$BUILD/bench_gpu" --models "${GPU_CHECK_MODELS:-110m,1b}" \
    --types "${GPU_CHECK_TYPES:-f16,q8_0}" \
    --tmp "$SCRATCH" --out "$OUTDIR/bench_gpu.jsonl" || STATUS=1
# ---- memcheck: out-of-bounds and misaligned accesses in the kernels --------------------
# Last, with what is left of the budget: a timeout here says nothing about the
# code; status 9 is memcheck's report of errors, and fails the check.
if command -v compute-sanitizer >/dev/null && [ "$(left)" -gt 60 ]; then
    step memcheck tests 180 env TEST_CUDA_FILTER="${GPU_CHECK_MEMCHECK_FILTER:-*}" \
        compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 "$BUILD/test_cuda"
    rc=$?
    [ "$rc" -ne 9 ] || { STATUS=1; say "memcheck: compute-sanitizer found errors (tests.log)"; }
else
    say "memcheck: not run (no compute-sanitizer, or under 60 s of budget left)"
fi

{
    echo "---- after the benchmark"
    timeout 10 nvidia-smi --query-gpu=memory.used,temperature.gpu,clocks.sm,clocks.mem --format=csv
} >>"$OUTDIR/machine.txt" 2>&1

# ---- summary ---------------------------------------------------------------------------
{
    echo "---- test_cuda: each comparison's worst error (tolerances are first guesses)"
    grep -E "worst relative|greedy|round trip|pool:|limit:|q2_K:|FAILED|PASSED|ERROR|out of tolerance" \
        "$OUTDIR/test_cuda.log"
    echo "---- bench_gpu"
    grep -vE '^(\{|====)' "$OUTDIR/bench_gpu.log" 2>/dev/null
    echo "---- files in $OUTDIR"
    ls "$OUTDIR"
} | tee -a "$SUMMARY"
say "total $(($(date +%s) - START)) s of a ${BUDGET} s budget"
if [ "$STATUS" -eq 0 ]; then say "result: PASS"; else say "result: FAILED (see the logs named above)"; fi
exit $STATUS
