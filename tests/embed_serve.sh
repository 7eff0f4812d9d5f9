#!/usr/bin/env bash
# A chat model and a BERT embedding model served side by side, two tenants
# each on its own model: /v1/embeddings against the NumPy reference,
# /tokenize, /detokenize, /v1/models (tests/integration/test_embed_serve.py).
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python with python3-numpy (scripts/deps.sh)
rm -rf "$TS_TMPDIR/embed_serve"
mkdir -p "$TS_TMPDIR/embed_serve"
exec timeout -k 10 240 "$PY" "$TS_SRC/tests/integration/test_embed_serve.py" -v
