#!/usr/bin/env bash
# The orchestrator's view of `tessera serve` (tests/integration/test_probes.py):
# /health/live and /health/ready without a key and uncounted, ready 503 while
# draining, and the vLLM-named server-wide gauges of /metrics that the
# Gateway API Inference Extension's endpoint picker reads, moving with load.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python, standard library only
rm -rf "$TS_TMPDIR/probes"
mkdir -p "$TS_TMPDIR/probes"
# A few seconds of work; the bound only catches a hang.
exec timeout -k 10 120 "$PY" "$TS_SRC/tests/integration/test_probes.py" -v
