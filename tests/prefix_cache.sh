#!/usr/bin/env bash
# Automatic prefix caching through the real server: tests/integration/test_prefix_cache.py.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
PY=/usr/bin/python3
rm -rf "$TS_TMPDIR/prefix_cache_test"
mkdir -p "$TS_TMPDIR/prefix_cache_test"
exec timeout -k 10 60 "$PY" "$TS_SRC/tests/integration/test_prefix_cache.py" -v
