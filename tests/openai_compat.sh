#!/usr/bin/env bash
# Compatibility with the official OpenAI client: the `openai` npm package (v4)
# drives a real `tessera serve` (tests/integration/openai_compat.mjs): a
# streamed chat completion, a completion, the model list, and errors that
# surface as the SDK's typed exceptions (401, 429, 400, 404).
#
# The package is installed once into a cache folder (TESSERA_NPM_CACHE, else
# ~/.cache/tessera-npm) and reused. If it cannot be installed (no node, no
# registry) the test FAILS, saying why: a skipped compatibility test would
# pass silently exactly when nobody is looking.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3
fail() { echo "openai_compat: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is not installed (scripts/deps.sh installs nodejs and npm)"
command -v npm >/dev/null || fail "npm is not installed (scripts/deps.sh installs nodejs and npm)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || fail "node $(node --version) is too old; the openai package needs 18 or newer"

CACHE="${TESSERA_NPM_CACHE:-${HOME:-$TS_TMPDIR}/.cache/tessera-npm}"
mkdir -p "$CACHE" 2>/dev/null || CACHE="$TS_TMPDIR/tessera-npm"
mkdir -p "$CACHE"
have_openai() {
    node -e 'const v = require(process.argv[1] + "/node_modules/openai/package.json").version;
             process.exit(v.startsWith("4.") ? 0 : 1)' "$CACHE" 2>/dev/null
}
(
    # One installer at a time when several test runs share the cache.
    flock -w 300 9 || fail "timed out waiting for the lock on $CACHE"
    if ! have_openai; then
        echo "openai_compat: installing openai@4 into $CACHE"
        if ! timeout 300 npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error openai@4; then
            fail "cannot install the openai npm package into $CACHE: is the npm registry reachable? (npm's messages above)"
        fi
        have_openai || fail "npm finished but $CACHE/node_modules/openai is not a 4.x release"
    fi
) 9>"$CACHE/.lock"
echo "openai_compat: openai $(node -p 'require(process.argv[1] + "/node_modules/openai/package.json").version' "$CACHE")"

rm -rf "$TS_TMPDIR/openai_compat"
export TS_OPENAI_DIR="$CACHE/node_modules/openai"
exec timeout -k 10 180 "$PY" "$TS_SRC/tests/integration/harness.py" serve-and-run --name openai_compat \
    --tenant gold-a:gold --tenant limited:bronze:requests_per_minute=1 --timeout 120 \
    -- node "$TS_SRC/tests/integration/openai_compat.mjs"
