#!/usr/bin/env bash
# Fleet-wide tenant limits and fair share through one Redis: three real
# `tessera serve` replicas and a private redis-server on 127.0.0.1,
# tests/integration/test_redis_limits.py.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
if ! command -v redis-server >/dev/null; then
    echo "redis_limits: redis-server is not installed; install the Debian package redis-server" \
         "(scripts/deps.sh test does)" >&2
    exit 1
fi
PY=/usr/bin/python3
rm -rf "$TS_TMPDIR/redis_limits_test"
mkdir -p "$TS_TMPDIR/redis_limits_test"
# The Python harness kills every server and redis-server it started when it
# exits (and the kernel kills them if it dies: PR_SET_PDEATHSIG).
exec timeout -k 10 150 "$PY" "$TS_SRC/tests/integration/test_redis_limits.py" -v
