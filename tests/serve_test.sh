#!/usr/bin/env bash
# Black-box tests of `tessera serve`: tests/integration/test_serve.py starts
# the real binary with a generated config and talks HTTP to it on 127.0.0.1
# (errors, completions, streaming, hang-ups, 200 concurrent streams,
# SIGTERM draining, metrics and admin routes).
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python, standard library only
rm -rf "$TS_TMPDIR/serve_test"
mkdir -p "$TS_TMPDIR/serve_test"
# The suite takes well under a minute; the bound only catches a hang.
exec timeout -k 10 240 "$PY" "$TS_SRC/tests/integration/test_serve.py" -v
