#!/usr/bin/env bash
# tessera's quantized formats against the independent NumPy reader
# (tests/ref/quants.py), on files tessera did not write.
#
#  1. The reference checks itself (tests/ref/gguf_write_test.py: hand-built
#     blocks per type, a loop-by-loop transcription of ggml's dequantizers,
#     GGUF round trips).
#  2. tests/ref/gguf_quant_write.py writes a fixture of random valid blocks
#     of every quantized type with NumPy's dequantization beside them, and
#     test_quant_ref (tests/test_quant_ref.c) checks quant_dequant bit for
#     bit, quant_act_row against its stated rule, and the scalar and AVX2
#     dot kernels against the float64 dot within the activation rounding's
#     rigorous bound (the derivation is in test_quant_ref.c).
#  3. Whole models: three llama files of random valid blocks mixed per
#     tensor (q4_k_m: llama.cpp's Q4_K_M recipe, Q4_K / Q6_K / Q5_0 + F32
#     norms; legacy: the 32-element types; kmix: the other K-quants and
#     IQ4_XS), tokenizer copied from a mkmodel file. Greedy generation with
#     --ids/--logits is compared row by row against the float64 reference
#     (weights dequantized by quants.py, activations exact) by
#     tests/ref/compare.py, at the loosest tolerance of the file's types
#     (the tolerances and their measurement are in compare.py). --act-sim
#     also prints the error against the reference with the engine's int8
#     activation rounding emulated, which tells a rounding difference from
#     anything else when a row fails.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python with python3-numpy (scripts/deps.sh)
REF="$TS_SRC/tests/ref"
WORK="$TS_TMPDIR/quant_ref"
UNIT="$(dirname "$TS_TESSERA")/test_quant_ref"
N=16
PROMPT="Hello, tessera! héllo"

if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "quant_ref: FAIL: $PY cannot import numpy (install python3-numpy)" >&2
    exit 1
fi
if [ ! -x "$UNIT" ]; then
    echo "quant_ref: FAIL: $UNIT is not built (make test_quant_ref)" >&2
    exit 1
fi
rm -rf "$WORK"
mkdir -p "$WORK"

status=0
summary=()

# 1. The reference's own checks.
"$PY" "$REF/gguf_write_test.py"

# 2. Formats and kernels, type by type.
echo "=== formats: dequant bit-exactness, activations, dot kernels ==="
"$PY" "$REF/gguf_quant_write.py" fixture "$WORK/fixture.gguf"
if "$UNIT" "$WORK/fixture.gguf"; then
    summary+=("formats (test_quant_ref): pass")
else
    summary+=("formats (test_quant_ref): FAIL")
    status=1
fi

# 3. Whole models. NAME RECIPE TYPE (TYPE: the file's loosest for compare.py).
"$TS_TESSERA" mkmodel "$WORK/vocab.gguf" --preset tiny --type f32 --dims 64 --layers 1 \
    --heads 8 --kv-heads 2 --vocab 512 --seed 7 >/dev/null
cases=("q4_k_m q4_k_m q4_K" "legacy legacy q4_0" "kmix kmix q4_K")
for c in "${cases[@]}"; do
    read -r name recipe t <<<"$c"
    model="$WORK/$name.gguf"
    echo "=== model $name ==="
    "$PY" "$REF/gguf_quant_write.py" model "$model" --tokenizer-from "$WORK/vocab.gguf" --recipe "$recipe"
    if ! "$TS_TESSERA" generate --model "$model" --prompt "$PROMPT" -n "$N" --temp 0 \
            --ids --logits "$WORK/$name.logits" > "$WORK/$name.ids"; then
        echo "quant_ref: tessera generate failed on $model"
        summary+=("model $name: FAIL (generate failed)")
        status=1
        continue
    fi
    if "$PY" "$REF/compare.py" --model "$model" --ids "$WORK/$name.ids" --logits "$WORK/$name.logits" \
            --type "$t" --n "$N" --name "$name" --act-sim; then
        summary+=("model $name: pass")
    else
        summary+=("model $name: FAIL")
        status=1
    fi
done

echo "=== summary ==="
printf '  %s\n' "${summary[@]}"
if [ "$status" -ne 0 ]; then
    echo "quant_ref: FAIL (see above)" >&2
fi
exit "$status"
