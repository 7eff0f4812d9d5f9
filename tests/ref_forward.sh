#!/usr/bin/env bash
# Independent numerical reference check of the llama forward pass.
#
# For each weight type (f32, f16, q8_0, and bf16 when mkmodel offers it) this
# makes a tiny GQA model, runs greedy generation with --ids/--logits, and
# compares every prefill and decode logits row against a float64 NumPy
# implementation written from the equations (tests/ref/llama_ref.py). The
# comparison and its tolerances live in tests/ref/compare.py.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail

: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"

PY=/usr/bin/python3   # Debian's python with python3-numpy (scripts/deps.sh)
REF="$TS_SRC/tests/ref"
WORK="$TS_TMPDIR/ref_forward"
N=33
PROMPT="Hello, tessera! héllo"

if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "ref_forward: FAIL: $PY cannot import numpy (install python3-numpy)" >&2
    exit 1
fi
rm -rf "$WORK"
mkdir -p "$WORK"

# 1. The reference checks itself first (GGUF round trips, RoPE properties,
#    GQA mapping, causal vs. slow KV-cache path). Fast, no binary needed.
"$PY" "$REF/gguf_write_test.py"

# 2. Which weight types can mkmodel write?
types=(f32 f16 q8_0)
mk_help=$("$TS_TESSERA" mkmodel --help 2>&1 || true)
if grep -qiw 'bf16' <<<"$mk_help"; then
    types+=(bf16)
else
    echo "ref_forward: mkmodel does not list bf16; skipping bf16"
fi

status=0
summary=()
for t in "${types[@]}"; do
    model="$WORK/tiny-$t.gguf"
    echo "=== $t ==="
    "$TS_TESSERA" mkmodel "$model" --preset tiny --type "$t" --dims 64 --layers 2 \
        --heads 8 --kv-heads 2 --vocab 512 --seed 7
    "$TS_TESSERA" generate --model "$model" --prompt "$PROMPT" -n "$N" --temp 0 \
        --ids --logits "$WORK/logits-$t.bin" > "$WORK/ids-$t.txt"
    if "$PY" "$REF/compare.py" --model "$model" --ids "$WORK/ids-$t.txt" \
            --logits "$WORK/logits-$t.bin" --type "$t" --n "$N"; then
        summary+=("$t: pass")
    else
        summary+=("$t: FAIL")
        status=1
    fi
done

echo "=== summary ==="
printf '  %s\n' "${summary[@]}"
if [ "$status" -ne 0 ]; then
    echo "ref_forward: FAIL: engine logits disagree with the NumPy reference (see above)" >&2
fi
exit "$status"
