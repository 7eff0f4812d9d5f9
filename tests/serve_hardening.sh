#!/usr/bin/env bash
# Request-level hardening of `tessera serve`, black box:
# tests/integration/test_hardening.py sends smuggling attempts (Content-Length
# with Transfer-Encoding), repeated Authorization headers and JSON keys, a
# 1 GB declared body, keyless /metrics reads, and a stream that times out in
# the queue, to a real server on 127.0.0.1, and checks the answers, the
# response ids and the per-tenant outcome counters.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python, standard library only
rm -rf "$TS_TMPDIR/serve_hardening"
# The suite takes well under a minute; the bound only catches a hang.
exec timeout -k 10 180 "$PY" "$TS_SRC/tests/integration/test_hardening.py" -v
