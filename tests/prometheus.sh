#!/usr/bin/env bash
# tessera's /metrics as a real Prometheus sees it: Debian's prometheus
# scrapes a live `tessera serve` every second, some tenants send requests,
# and the per-tenant TTFT p99,
#     histogram_quantile(0.99, sum by (le, tenant) (rate(tessera_ttft_seconds_bucket[1m])))
# must come back as a number for every tenant that sent requests
# (tests/integration/prometheus_check.py).
#
# Prometheus is installed with apt-get when missing (as root; scripts/deps.sh
# lists it). Without it, and without the rights to install it, the test FAILS
# and says so. The test runs its own prometheus on a free 127.0.0.1 port with
# its storage under TS_TMPDIR; a system service the package may have started
# is left alone.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3
fail() { echo "prometheus: FAIL: $*" >&2; exit 1; }

PROM=$(command -v prometheus || true)
if [ -z "$PROM" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        fail "prometheus is not installed and this user cannot install it: run scripts/deps.sh as root (apt-get install prometheus)"
    fi
    echo "prometheus: installing Debian's prometheus package"
    export DEBIAN_FRONTEND=noninteractive
    if ! { $SUDO apt-get install -y -qq --no-install-recommends prometheus ||
           { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends prometheus; }; }; then
        fail "apt-get could not install prometheus (is the Debian mirror reachable? see apt's messages above)"
    fi
    PROM=$(command -v prometheus || true)
    [ -n "$PROM" ] || fail "apt-get finished but there is no prometheus binary on PATH"
fi
echo "prometheus: $("$PROM" --version 2>&1 | head -1)"

rm -rf "$TS_TMPDIR/prometheus"
export TS_PROMETHEUS="$PROM"
exec timeout -k 10 120 "$PY" "$TS_SRC/tests/integration/prometheus_check.py"
