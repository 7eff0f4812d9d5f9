#!/usr/bin/env bash
# The Dockerfile, checked without docker (tests/integration/check_dockerfile.py):
# its runtime stage installs exactly the Debian 12 packages whose libraries the
# built binary loads, and runs as a non-root uid that the manifests in deploy/
# name as runAsUser; and the build stage installs every library -dev package
# scripts/deps.sh builds with. Then broken copies of it (a library's package dropped, an
# unneeded package added, USER root) must each be refused, so the check is seen
# to fail.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
PY=/usr/bin/python3
CHECK="$TS_SRC/tests/integration/check_dockerfile.py"
fail() { echo "dockerfile: FAIL: $*" >&2; exit 1; }

grep -q '^12\.' /etc/debian_version 2>/dev/null ||
    fail "the check maps libraries to Debian 12 packages with dpkg, and this machine is not Debian 12"
for t in dpkg dpkg-query readelf ldd; do
    command -v "$t" >/dev/null || fail "$t is not installed"
done

D="$TS_TMPDIR/dockerfile_test"
rm -rf "$D"
mkdir -p "$D"
MANIFESTS=("$TS_SRC"/deploy/*/k8s.yaml)

echo "dockerfile: $TS_SRC/Dockerfile"
timeout 60 "$PY" "$CHECK" "$TS_SRC/Dockerfile" "$TS_TESSERA" "${MANIFESTS[@]}" ||
    fail "the Dockerfile does not match the binary (problems above)"

# Each broken copy must be refused, naming what is wrong. The copies sit
# beside their own scripts/deps.sh, which the build stage is checked against.
mkdir -p "$D/scripts"
cp "$TS_SRC/scripts/deps.sh" "$D/scripts/deps.sh"
refused() {
    local what=$1 want=$2 out
    if out=$(timeout 60 "$PY" "$CHECK" "$D/Dockerfile" "$TS_TESSERA" "${MANIFESTS[@]}"); then
        fail "$what: accepted"
    fi
    grep -q -- "$want" <<<"$out" || fail "$what: refused, but without '$want': $out"
    echo "dockerfile: $what: refused"
}
sed 's/ libcjson1 / /' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "libcjson1 dropped" "libcjson.so.1: its package libcjson1 is not installed"
sed 's/ libcjson1 / libcjson1 gnupg /' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "gnupg added" "gnupg: installed by the runtime stage, but the binary links no library of it"
sed 's/ libhiredis-dev / /' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "libhiredis-dev dropped from the build stage" "libhiredis-dev: scripts/deps.sh builds with it"
sed 's/^USER .*/USER root/' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "USER root" "USER root: give the numeric uid"
sed 's/^USER .*/USER 0:0/' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "USER 0" "USER 0:0 is root"
sed '/^USER /d' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "no USER" "sets no USER"
sed 's/^USER .*/USER 10002:10002/' "$TS_SRC/Dockerfile" >"$D/Dockerfile"
refused "a uid nobody creates" "creates no user with that uid"
rm -rf "$D"
echo "dockerfile: PASS"
