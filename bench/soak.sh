#!/usr/bin/env bash
# bench/soak.sh - a long mixed load against one tessera serve, then a
# reckoning (tests/integration/soak.py says exactly what is checked): six
# tenants with steady traffic, disconnect storms, slow readers and bursts
# past their rate limits for SOAK_SECONDS (default 1800), then every
# request's one outcome on both sides, /admin idle, file descriptors back
# to the baseline, the RSS slope after warm-up, and a drain on SIGTERM.
# (Config reload is not supported by tessera serve, so the soak has none.)
# Only 127.0.0.1; bounded: the run stops by itself, and a timeout of the
# window plus five minutes fences it.
#
#     bench/soak.sh [OUT_DIR]           SOAK_SECONDS=120 for a short run (CI)
#
# Environment: TESSERA (the binary; default build/tessera), SOAK_SECONDS,
# SEED (default 1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/build/tessera}
SECONDS_=${SOAK_SECONDS:-1800}
OUT=${1:-bench-out/soak}
[ -x "$TESSERA" ] || { echo "soak: no tessera binary at $TESSERA (run make, or set TESSERA)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Threads of the soak client and its sockets.
ulimit -n 4096 2>/dev/null || true
export TS_TESSERA=$(cd "$(dirname "$TESSERA")" && pwd)/$(basename "$TESSERA")
export TS_TMPDIR=${TS_TMPDIR:-$OUT/tmp}
export TS_SRC=$ROOT
mkdir -p "$TS_TMPDIR"
exec timeout -k 10 $(( ${SECONDS_%.*} + 300 )) /usr/bin/python3 "$ROOT/tests/integration/soak.py" \
    --seconds "$SECONDS_" --out "$OUT" --seed "${SEED:-1}"
