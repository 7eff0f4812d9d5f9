#!/usr/bin/env bash
# The OpenAI parameters end to end: tests/integration/test_params.py starts
# the real binary and checks n / best_of, several prompts, echo with prompt
# logprobs, logprobs, logit_bias, stop_token_ids, min_tokens, ignore_eos,
# penalties, default max_tokens and the unknown-field refusals.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python, standard library only
rm -rf "$TS_TMPDIR/params_test"
mkdir -p "$TS_TMPDIR/params_test"
exec timeout -k 10 120 "$PY" "$TS_SRC/tests/integration/test_params.py" -v
