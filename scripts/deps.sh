#!/usr/bin/env bash
# Install the Debian packages tessera builds and tests with. Idempotent and
# quick when everything is present: it asks dpkg first and only runs apt-get
# (as root, or through sudo) for what is missing.
set -euo pipefail

PKGS=(build-essential cmake pkg-config libopenblas-dev libcmocka-dev
      libmicrohttpd-dev libcjson-dev libyaml-dev libssl-dev python3 python3-numpy libcurl4-openssl-dev gnuplot-nox
      nodejs prometheus)  # node (+ npm) and prometheus: tests/openai_compat.sh, tests/prometheus.sh
# Debian's npm, unless an npm is already there: NodeSource's nodejs bundles
# its own and conflicts with Debian's npm package.
command -v npm >/dev/null || PKGS+=(npm)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
