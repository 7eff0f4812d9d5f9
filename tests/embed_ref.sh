#!/usr/bin/env bash
# `tessera embed` (engine/enc.h, the BERT encoder) against the independent
# float64 NumPy reference (tests/ref/bert_ref.py, written from the
# published equations), on tiny random BERTs written the way llama.cpp's
# convert_hf_to_gguf.py writes them (tests/ref/bert_gguf.py).
#
#  1. The reference checks itself (exact GELU at known points, LayerNorm's
#     moments, vectorised against loop attention, no causal mask).
#  2. Six models: mean / CLS / last / absent (= mean) pooling; separate and
#     fused q/k/v; f32, f16 (norms and biases f16 too) and q8_0 matrices;
#     one without the optional token_types.
#     Each embeds one batch of eight sequences of lengths 1 to the full
#     context (64), compared per element and by cosine with the reference:
#       f32, f16: |diff| <= 1e-5 and cosine >= 0.9999. The reference reads
#                 the same stored weights, so only float32 rounding
#                 remains: measured <= 2.6e-7. 1e-5 is tighter than the
#                 issue's 1e-4 on purpose: GELU's tanh approximation in
#                 place of erf moves these models' vectors by 4.7e-5 to
#                 9.7e-5 (tried: every f32/f16 model fails with it).
#       q8_0:     |diff| <= 3e-2 and cosine >= 0.998. The weights are the
#                 same after dequantization, but the engine quantizes the
#                 activations to int8 per block of 32 before each product
#                 (ops.h); over 16 seeds x 2 poolings the worst was 9.7e-3
#                 and 0.99946. A causal mask moves a vector by 0.10
#                 (cosine 0.94), a missing token-type row by 0.25, positions
#                 off by one by 0.18: all far outside.
#  3. Batch isolation: a sequence's vector is the same in two batches of
#     the same total length with other neighbours in another order. Bit
#     for bit on q8_0 (the engine's own kernels); within the solo check's
#     1e-6 on f32 and f16, whose 27-row products go to OpenBLAS's sgemm,
#     which may sum a row in another order depending on where in its tiles
#     the row falls (measured 1.3e-7 on a Zen host without AVX-512; bit
#     for bit on AVX-512 hosts). Solo against batched: not bit for bit, because the products
#     pick their method by the batch's row count (F32/F16 change kernels at
#     13 rows and go to sgemm above 16, Q8_0 takes its tiled kernel from 6,
#     summing in another order): measured <= 2.4e-7 for f32 and f16,
#     where the check is 1e-6; for q8_0 an ulp's difference can flip an
#     activation's int8 rounding (measured up to 2.7e-3), so the solo
#     vectors are held to the q8_0 tolerance against the reference instead.
#  4. Errors: a sequence longer than the context, an id outside the
#     vocabulary, malformed --ids, a llama file, a file with pooling none:
#     exit status 1 and a message saying what is wrong; no input: usage
#     (status 2).
#  5. --text: the tokenizer's WordPiece ids wrapped in [CLS] ... [SEP] give
#     the vector of those ids written by hand.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python with python3-numpy (scripts/deps.sh)
REF="$TS_SRC/tests/ref"
WORK="$TS_TMPDIR/embed_ref"
CTX=64

if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "embed_ref: FAIL: $PY cannot import numpy (install python3-numpy)" >&2
    exit 1
fi
rm -rf "$WORK"
mkdir -p "$WORK"
status=0
summary=()
fail() { summary+=("$1: FAIL"); status=1; echo "embed_ref: FAIL: $1" >&2; }

# 1. The reference's own checks.
"$PY" "$REF/bert_ref.py" --self-test

# Eight sequences: [CLS] word pieces [SEP], lengths 1 .. CTX, in one file.
"$PY" - "$CTX" > "$WORK/ids.txt" <<'EOF'
import random, sys
ctx = int(sys.argv[1])
r = random.Random(3)
for n in (1, 2, 5, 9, 17, 33, ctx, 3):
    ids = [101] + [r.randrange(104, 216) for _ in range(max(0, n - 2))] + ([102] if n > 1 else [])
    print(",".join(map(str, ids[:n])))
EOF
batch_args=()
while read -r line; do batch_args+=(--ids "$line"); done < "$WORK/ids.txt"

# 2 and 3, per model: NAME TYPE ATOL COS SOLO_ATOL BERT_GGUF_OPTIONS...
cases=(
    "mean_f32    f32  1e-5 0.9999 1e-6 --pooling mean --seed 11"
    "cls_f32     f32  1e-5 0.9999 1e-6 --pooling cls --fused --seed 12"
    "absent_f32  f32  1e-5 0.9999 1e-6 --pooling absent --no-types --seed 13"
    "last_f16    f16  1e-5 0.9999 1e-6 --pooling last --vec-type f16 --seed 14"
    "mean_q8_0   q8_0 3e-2 0.998  -    --pooling mean --seed 15"
    "cls_q8_0    q8_0 3e-2 0.998  -    --pooling cls --fused --seed 16"
)
for c in "${cases[@]}"; do
    read -r name type atol cos solo_atol opts <<<"$c"
    model="$WORK/$name.gguf"
    echo "=== $name ==="
    # shellcheck disable=SC2086 # opts is a list of options
    "$PY" "$REF/bert_gguf.py" "$model" --type "$type" --ctx "$CTX" $opts
    if ! "$TS_TESSERA" embed "$model" "${batch_args[@]}" > "$WORK/$name.batch"; then
        fail "$name (tessera embed failed)"
        continue
    fi
    if "$PY" "$REF/bert_ref.py" compare "$model" "$WORK/ids.txt" "$WORK/$name.batch" --atol "$atol" --cos "$cos"; then
        summary+=("$name batched vs reference: pass")
    else
        fail "$name batched vs reference"
    fi

    # Bit for bit: sequence 4 (17 tokens) beside 2 and 3, then beside 3
    # others of the same lengths (1 + 17 + 9 = 27 tokens either way).
    mapfile -t seqs < "$WORK/ids.txt"
    "$TS_TESSERA" embed "$model" --ids "${seqs[3]}" --ids "${seqs[4]}" --ids "${seqs[0]}" > "$WORK/$name.iso1"
    other9=101,105,106,107,108,109,110,111,102
    "$TS_TESSERA" embed "$model" --ids 101 --ids "$other9" --ids "${seqs[4]}" > "$WORK/$name.iso2"
    sed -n 2,3p "$WORK/$name.iso1" > "$WORK/$name.iso1.mine"
    { sed -n 3p "$WORK/$name.iso2"; sed -n 1p "$WORK/$name.iso2"; } > "$WORK/$name.iso2.mine"
    if [ "$other9" = "${seqs[3]}" ]; then
        fail "$name isolation: the other neighbours are not other"
    elif [ "$solo_atol" = "-" ]; then
        if cmp -s "$WORK/$name.iso1.mine" "$WORK/$name.iso2.mine"; then
            summary+=("$name isolation (bit for bit): pass")
        else
            fail "$name isolation: a sequence's vector changed with its neighbours"
        fi
    elif "$PY" "$REF/bert_ref.py" close "$WORK/$name.iso1.mine" "$WORK/$name.iso2.mine" --atol "$solo_atol"; then
        summary+=("$name isolation (within $solo_atol): pass")
    else
        fail "$name isolation: a sequence's vector changed with its neighbours"
    fi

    # Solo against batched.
    : > "$WORK/$name.solo"
    for s in "${seqs[@]}"; do "$TS_TESSERA" embed "$model" --ids "$s" >> "$WORK/$name.solo"; done
    if [ "$solo_atol" = "-" ]; then
        ok=0; "$PY" "$REF/bert_ref.py" compare "$model" "$WORK/ids.txt" "$WORK/$name.solo" --atol "$atol" --cos "$cos" || ok=1
    else
        ok=0; "$PY" "$REF/bert_ref.py" close "$WORK/$name.batch" "$WORK/$name.solo" --atol "$solo_atol" || ok=1
    fi
    if [ "$ok" -eq 0 ]; then summary+=("$name solo vs batched: pass"); else fail "$name solo vs batched"; fi
done

# 4. Errors. expect_error NAME STATUS PATTERN -- ARGS...: tessera embed ARGS
# must exit with STATUS and say PATTERN on stderr.
expect_error() {
    local name=$1 want=$2 pattern=$3 rc=0
    shift 4
    "$TS_TESSERA" embed "$@" > "$WORK/err.out" 2> "$WORK/err.txt" || rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$WORK/err.txt"; then
        summary+=("error $name: pass")
    else
        fail "error $name: status $rc (want $want), stderr: $(head -c 300 "$WORK/err.txt")"
    fi
}
m="$WORK/mean_f32.gguf"
long=$(seq -s, 101 $((101 + CTX)))          # CTX + 1 ids
expect_error "too long" 1 "more than the context length $CTX" -- "$m" --ids 101,102 --ids "$long"
expect_error "id out of range" 1 "id 216 is outside \[0, 216)" -- "$m" --ids 101,216,102
expect_error "malformed ids" 1 "comma-separated" -- "$m" --ids 101,x,102
expect_error "no input" 2 "usage" -- "$m"
"$TS_TESSERA" mkmodel "$WORK/llama.gguf" --preset tiny > /dev/null
expect_error "llama file" 1 "not an encoder" -- "$WORK/llama.gguf" --ids 1,2
"$PY" "$REF/bert_gguf.py" "$WORK/none.gguf" --pooling none > /dev/null
expect_error "pooling none" 1 "pooling_type 0" -- "$WORK/none.gguf" --ids 101,102

# --text: [CLS] + WordPiece(text) + [SEP] must be exactly the vector of
# those ids given by hand (whole words and a "##s" continuation of the
# writer's vocabulary).
text_ids=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import bert_gguf as b
v = b.wordpiece_vocab()
print(",".join(str(i) for i in [101] + [v.index(w) for w in ("the", "water", "is", "hot", "word", "##s")] + [102]))' "$REF")
rc=0
"$TS_TESSERA" embed "$m" --text "the water is hot words" > "$WORK/text.out" 2> "$WORK/text.err" || rc=$?
"$TS_TESSERA" embed "$m" --ids "$text_ids" > "$WORK/text_ids.out"
if [ "$rc" -eq 0 ] && cmp -s "$WORK/text.out" "$WORK/text_ids.out"; then
    summary+=("--text = --ids $text_ids: pass")
else
    fail "--text: status $rc, not the vector of --ids $text_ids; stderr: $(head -c 300 "$WORK/text.err")"
fi

echo "=== summary ==="
printf '  %s\n' "${summary[@]}"
[ "$status" -eq 0 ] || echo "embed_ref: FAIL (see above)" >&2
exit "$status"
