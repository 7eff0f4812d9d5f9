#!/usr/bin/env bash
# gpu-deps.sh - fetch, on a Debian machine with apt, the .deb files of the
# libraries the engine needs (OpenBLAS, PCRE2, cJSON, libyaml, cmocka) and
# pkgconf, into .gpu-deps/ (git-ignored), for a GPU machine whose image has
# CUDA but not these and cannot fetch anything itself. scripts/gpu-check.sh
# unpacks them there into a private folder (dpkg -x, never into /) and
# builds against them with TESSERA_ENGINE_ONLY. About 15 MB.
#
#   scripts/gpu-deps.sh            then carry .gpu-deps to the GPU machine
#
# The packages are Debian 12's; their libraries need glibc 2.36 or newer,
# which any current CUDA image has.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(pkgconf pkgconf-bin libpkgconf3
      libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libcjson-dev libcjson1 libyaml-dev libyaml-0-2 libcmocka-dev libcmocka0)
command -v apt-get >/dev/null || { echo "gpu-deps: needs apt-get (a Debian or Ubuntu machine)" >&2; exit 1; }
mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
apt-get download "${PKGS[@]}"
echo "gpu-deps: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .gpu-deps/"
