#!/usr/bin/env bash
# Install the Debian packages tessera needs. Idempotent and quick when
# everything is present: it asks dpkg first and only runs apt-get (as root,
# or through sudo) for what is missing.
#
#   scripts/deps.sh build   what building and running tessera needs
#                           (make, make demo)
#   scripts/deps.sh test    that, plus what the test suite's reference
#                           peers, the benchmark scripts and the fuzzers
#                           need (make test, make bench, make fuzz)
set -euo pipefail

SET=${1:-build}
BUILD=(build-essential cmake pkg-config libopenblas-dev libcmocka-dev
       libmicrohttpd-dev libcjson-dev libyaml-dev libssl-dev libcurl4-openssl-dev
       libpcre2-dev   # the tokenizers' pre-tokenizer regexes (UTF, JIT)
       libhiredis-dev # limits.backend: redis (fleet-wide tenant limits)
       gnuplot-nox    # tessera bench's plots
       curl)          # the requests make demo prints for pasting
# The suite's independent references: NumPy (tests/ref: the model's
# numerics), Node.js and the official OpenAI SDK (tests/openai_compat.sh),
# Prometheus (tests/prometheus.sh parses /metrics with the real server).
# Redis (tests/redis_limits.sh shares one between several replicas).
# make fuzz: clang with its libFuzzer and sanitizer runtimes, and clang's
# OpenMP runtime (the engine is built with -fopenmp).
TEST=(python3 python3-numpy nodejs prometheus redis-server
      clang-14 libclang-rt-14-dev libomp-14-dev)

case "$SET" in
build) PKGS=("${BUILD[@]}") ;;
test)  PKGS=("${BUILD[@]}" "${TEST[@]}")
       # Debian's npm, unless an npm is already there: NodeSource's nodejs
       # bundles its own and conflicts with Debian's npm package.
       command -v npm >/dev/null || PKGS+=(npm) ;;
*)     echo "usage: scripts/deps.sh [build|test]" >&2; exit 2 ;;
esac

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
