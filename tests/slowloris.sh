#!/usr/bin/env bash
# Connection hardening of `tessera serve` (serve/gate.h), black box:
# tests/integration/slowloris.py floods a real server with 2,000 connections
# that drip header bytes (more than its whole connection limit) and checks
# that a tenant is still answered within 1 s and that every slow connection
# is closed by its read deadline (header_timeout_s) plus a stated slack; then
# that max_connections_per_ip refuses one address's extra connection while
# another address is served. Only 127.0.0.x is used; it stops by itself.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python, standard library only
rm -rf "$TS_TMPDIR/slowloris"
# The script takes about 15 s; the bound only catches a hang.
exec timeout -k 10 120 "$PY" "$TS_SRC/tests/integration/slowloris.py"
