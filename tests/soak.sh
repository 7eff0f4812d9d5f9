#!/usr/bin/env bash
# The soak (bench/soak.sh, tests/integration/soak.py) for 2 minutes: mixed
# traffic from six tenants with disconnect storms, slow readers and bursts
# past the rate limits; every request's one outcome on the client and the
# server, nothing left queued, file descriptors back to the baseline, RSS
# flat after warm-up, and a clean drain on SIGTERM.
# Environment: TS_TESSERA, TS_TMPDIR, TS_SRC (ctest sets them).
set -euo pipefail
: "${TS_TESSERA:?}" "${TS_TMPDIR:?}" "${TS_SRC:?}"
rm -rf "$TS_TMPDIR/soak"
TESSERA=$TS_TESSERA SOAK_SECONDS=${SOAK_SECONDS:-120} exec bash "$TS_SRC/bench/soak.sh" "$TS_TMPDIR/soak"
