#!/usr/bin/env bash
# Compatibility with the official OpenAI client: the `openai` npm package (v4)
# drives a real `tessera serve` (tests/integration/openai_compat.mjs): a
# streamed chat completion, a completion, logprobs, echo, n, penalties,
# json_schema outputs (validated with npm `ajv`), the model list, and errors
# that surface as the SDK's typed exceptions (401, 429, 400, 404).
#
# The package is installed once into the shared npm cache
# (tests/lib/npm_cache.sh); if it cannot be installed the test FAILS.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3
. "$TS_SRC/tests/lib/npm_cache.sh"
npm_cache_install openai_compat openai@4 ajv@8
CACHE=$NPM_CACHE_DIR
echo "openai_compat: openai $(node -p 'require(process.argv[1] + "/node_modules/openai/package.json").version' "$CACHE")"

rm -rf "$TS_TMPDIR/openai_compat"
export TS_OPENAI_DIR="$CACHE/node_modules/openai"
export TS_AJV_DIR="$CACHE/node_modules/ajv"
exec timeout -k 10 180 "$PY" "$TS_SRC/tests/integration/harness.py" serve-and-run --name openai_compat \
    --tenant gold-a:gold --tenant limited:bronze:requests_per_minute=1 --timeout 120 \
    -- node "$TS_SRC/tests/integration/openai_compat.mjs"
