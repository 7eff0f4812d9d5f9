#!/usr/bin/env bash
# Cost per device-hour in /admin/tenants and /metrics, and /admin/models'
# geometry and cost-model fit, through the real server:
# tests/integration/test_cost_admin.py.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
PY=/usr/bin/python3
rm -rf "$TS_TMPDIR/cost_admin_test"
mkdir -p "$TS_TMPDIR/cost_admin_test"
exec timeout -k 10 90 "$PY" "$TS_SRC/tests/integration/test_cost_admin.py" -v
