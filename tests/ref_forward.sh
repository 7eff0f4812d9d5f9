#!/usr/bin/env bash
# Independent numerical reference check of the forward pass.
#
# For each weight type (f32, f16, q8_0, bf16, and the quantized types
# q4_0 .. iq4_xs and a Q4_K_M-like mix, each when mkmodel offers it), for
# qwen2 with tied output (f32, q8_0), for each further architecture (llama3
# with rope_freqs and linear rope scaling, qwen3, gemma3, phi3: f32 and one
# quantized type each, every feature of the arch exercised), and for one
# file mixing four types
# across the fused groups (q/k q8_0 beside v f16, gate f32 beside up q8_0,
# output bf16, as quantized checkpoints mix them), this makes a tiny GQA
# model, runs greedy generation with --ids/--logits, and compares every
# prefill and decode logits row against a float64 NumPy implementation
# written from the equations (tests/ref/llama_ref.py), which rounds keys and
# values to f16 as the CPU's default KV cache stores them; one more case
# runs the f32 cache against the unrounded reference. The comparison, its
# tolerances and a self-check that it can fail live in tests/ref/compare.py.
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

# 2. Cases: NAME TYPE [extra mkmodel args]. The four weight types on the
#    llama tiny GQA model (bf16 only when mkmodel lists it), plus qwen2 (neox
#    rope, q/k/v biases) with a tied output matrix in f32 and q8_0.
mk_help=$("$TS_TESSERA" mkmodel --help 2>&1 || true)
cases=("llama-f32 f32" "llama-f16 f16" "llama-q8_0 q8_0")
if grep -qiw 'bf16' <<<"$mk_help"; then
    cases+=("llama-bf16 bf16")
else
    echo "ref_forward: mkmodel does not list bf16; skipping bf16"
fi
# The reference dequantizes each tensor by its own type, so a mixed file
# needs nothing new from it; it is held to its loosest type's tolerance.
if grep -q -- '--tensor-type' <<<"$mk_help"; then
    cases+=("llama-mixed q8_0 --tensor-type attn_v=f16 --tensor-type ffn_gate=f32 --tensor-type output=bf16")
else
    echo "ref_forward: mkmodel does not list --tensor-type; skipping the mixed-type file"
fi
# The quantized types mkmodel writes (its own quantizer, so these are files
# tessera wrote; tests/quant_ref.sh covers files it did not). The reference
# dequantizes them bit-exactly as ggml does (tests/ref/quants.py); the
# engine's int8 activations are what compare.py's per-type tolerance covers.
# The 256-element types need rows of whole super-blocks: dim 256, ffn 512.
for t in q4_0 q4_1 q5_0 q5_1 iq4_nl; do
    if grep -qw -- "$t" <<<"$mk_help"; then
        cases+=("llama-$t $t")
    else
        echo "ref_forward: mkmodel does not list $t; skipping it"
    fi
done
for t in q2_K q3_K q4_K q5_K q6_K iq4_xs; do
    if grep -qw -- "$t" <<<"$mk_help"; then
        cases+=("llama-$t $t --dims 256 --ffn 512")
    else
        echo "ref_forward: mkmodel does not list $t; skipping it"
    fi
done
# llama.cpp's Q4_K_M recipe as mkmodel can state it (held to q4_K's tolerance).
if grep -qw -- "q6_K" <<<"$mk_help" && grep -q -- '--tensor-type' <<<"$mk_help"; then
    q4km="--tensor-type attn_v=q6_K --tensor-type ffn_down=q6_K --tensor-type output=q6_K"
    q4km+=" --tensor-type token_embd=q5_0"
    cases+=("llama-q4_K_M q4_K --dims 256 --ffn 512 $q4km")
fi
if grep -qiw 'qwen2' <<<"$mk_help"; then
    cases+=("qwen2-tied-f32 f32 --arch qwen2 --tied" "qwen2-tied-q8_0 q8_0 --arch qwen2 --tied")
else
    echo "ref_forward: mkmodel does not list --arch qwen2; skipping qwen2"
fi

# Further architectures, every feature exercised (mkmodel's --arch
# defaults: qwen3/gemma3 heads of 2 * dims / heads, gemma3's window of 8
# under the ~50-token sequence with 6 layers so layer 5 is global, rope
# scale 8 there; phi3's fused tensors and rotary over 3/4 of each head;
# llama3's rope_freqs, here with linear scaling too). compare.py checks
# that the reference without each feature would differ (its self-checks).
cases+=("llama3-scaled-f32 f32 --arch llama3 --rope-scale 4"
        "llama3-q4_0 q4_0 --arch llama3"
        "qwen3-tied-f32 f32 --arch qwen3 --tied"
        "qwen3-tied-q8_0 q8_0 --arch qwen3 --tied"
        "gemma3-f32 f32 --arch gemma3 --layers 6"
        "gemma3-q5_0 q5_0 --arch gemma3 --layers 6"
        "phi3-f32 f32 --arch phi3"
        "phi3-q5_1 q5_1 --arch phi3")

status=0
summary=()
for c in "${cases[@]}"; do
    read -r name t extra <<<"$c"
    model="$WORK/$name.gguf"
    echo "=== $name ==="
    # shellcheck disable=SC2086  # $extra is a list of flags
    "$TS_TESSERA" mkmodel "$model" --preset tiny --type "$t" --dims 64 --layers 2 \
        --heads 8 --kv-heads 2 --vocab 512 --seed 7 $extra
    "$TS_TESSERA" generate --model "$model" --prompt "$PROMPT" -n "$N" --temp 0 \
        --ids --logits "$WORK/$name.logits" > "$WORK/$name.ids"
    if "$PY" "$REF/compare.py" --model "$model" --ids "$WORK/$name.ids" \
            --logits "$WORK/$name.logits" --type "$t" --n "$N" --name "$name"; then
        summary+=("$name: pass")
    else
        summary+=("$name: FAIL")
        status=1
    fi
done

# The f32 cache: the engine keeps keys and values exact, and the reference
# does not round them (every case above runs the CPU's default f16 cache,
# which the reference emulates).
name=llama-f32-kv-f32
echo "=== $name ==="
"$TS_TESSERA" mkmodel "$WORK/$name.gguf" --preset tiny --type f32 --dims 64 --layers 2 --heads 8 --kv-heads 2 \
    --vocab 512 --seed 7
"$TS_TESSERA" generate --model "$WORK/$name.gguf" --prompt "$PROMPT" -n "$N" --temp 0 --kv-cache-dtype f32 \
    --ids --logits "$WORK/$name.logits" > "$WORK/$name.ids"
if "$PY" "$REF/compare.py" --model "$WORK/$name.gguf" --ids "$WORK/$name.ids" --logits "$WORK/$name.logits" \
        --type f32 --n "$N" --name "$name" --kv-cache-dtype f32; then
    summary+=("$name: pass")
else
    summary+=("$name: FAIL")
    status=1
fi
# ... and the reference's rounding is real: the f32 cache's logits against
# the rounding reference must miss the f32 tolerance (1e-4) somewhere.
if "$PY" "$REF/compare.py" --model "$WORK/$name.gguf" --ids "$WORK/$name.ids" --logits "$WORK/$name.logits" \
        --type f32 --n "$N" --name "$name-vs-f16-ref" --kv-cache-dtype f16 --tol 1e-4 > "$WORK/$name.cross" 2>&1 ||
   ! grep -q "exceed rel err" "$WORK/$name.cross"; then
    summary+=("$name against the f16 reference: FAIL (the emulated rounding changes nothing, or compare failed)")
    status=1
else
    summary+=("$name against the f16 reference: misses the f32 tolerance, as it must: pass")
fi

echo "=== summary ==="
printf '  %s\n' "${summary[@]}"
if [ "$status" -ne 0 ]; then
    echo "ref_forward: FAIL: engine logits disagree with the NumPy reference (see above)" >&2
fi
exit "$status"
