#!/usr/bin/env bash
# Choosing where the forward pass runs: `generate --device`, `serve
# --device` and a model's `device:` key. cpu runs; a malformed device is
# refused with a message naming it; cuda either runs (a CUDA build on a
# GPU machine: the tokens must then be the CPU's, greedy), or fails fast
# saying why: "this build has no CUDA backend" (built without nvcc) or "no
# CUDA device" (built with it, no GPU or driver here). Every command runs
# under `timeout`, so a hang fails instead of stalling the suite.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (sources).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
W="$TS_TMPDIR/device_cli"
fail() { echo "device_cli: FAIL: $*" >&2; exit 1; }
rm -rf "$W"
mkdir -p "$W"
timeout 30 "$TS_TESSERA" mkmodel "$W/m.gguf" --preset tiny >/dev/null 2>&1 || fail "mkmodel"

gen() { timeout 60 "$TS_TESSERA" generate --model "$W/m.gguf" --prompt "hello there" -n 8 --temp 0 --ids "$@"; }

gen --device cpu >"$W/cpu.out" 2>"$W/cpu.err" || fail "generate --device cpu: $(cat "$W/cpu.err")"
gen >"$W/default.out" 2>/dev/null || fail "generate without --device"
cmp -s "$W/cpu.out" "$W/default.out" || fail "--device cpu and the default differ"
grep -qF "(f16)" "$W/cpu.err" || fail "the CPU's default KV cache is not f16: $(cat "$W/cpu.err")"
# The CUDA backend keeps an f32 cache: the CPU run it is held to does too.
gen --device cpu --kv-cache-dtype f32 >"$W/cpu32.out" 2>"$W/cpu32.err" ||
    fail "generate --kv-cache-dtype f32: $(cat "$W/cpu32.err")"
grep -qF "(f32)" "$W/cpu32.err" || fail "--kv-cache-dtype f32 did not take: $(cat "$W/cpu32.err")"
rc=0
gen --kv-cache-dtype f8 >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -eq 2 ] || fail "--kv-cache-dtype f8: status $rc (want 2, a usage error)"

# refused: status non-zero, the device named in the message
for bad in gpu cuda: cuda:-1 cuda:1x CUDA; do
    rc=0
    gen --device "$bad" >/dev/null 2>"$W/err" || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "--device $bad: status $rc"
    grep -qF "'$bad'" "$W/err" || fail "--device $bad: stderr is '$(cat "$W/err")'"
done

rc=0
gen --device cuda >"$W/cuda.out" 2>"$W/cuda.err" || rc=$?
if [ "$rc" -eq 0 ]; then
    cmp -s "$W/cpu32.out" "$W/cuda.out" || fail "greedy tokens on cuda differ from cpu: $(cat "$W/cuda.out")"
    echo "device_cli: cuda ran, the same greedy tokens as cpu"
else
    [ "$rc" -ne 124 ] || fail "generate --device cuda hung"
    grep -qE "this build has no CUDA backend|no CUDA device" "$W/cuda.err" ||
        fail "--device cuda: status $rc, stderr '$(cat "$W/cuda.err")'"
    echo "device_cli: cuda refused as it should be here: $(cat "$W/cuda.err")"
fi

# An f16 cache on CUDA is refused, naming the cache (or, in a build
# without the backend, the backend).
rc=0
gen --device cuda --kv-cache-dtype f16 >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "--device cuda --kv-cache-dtype f16: status $rc"
grep -qE "the cuda backend has no f16 KV cache|this build has no CUDA backend" "$W/err" ||
    fail "--device cuda --kv-cache-dtype f16: stderr '$(cat "$W/err")'"

# serve: a bad --device is a usage error; a bad device: key a config error
# with its place in the file.
rc=0
timeout 10 "$TS_TESSERA" serve --model "$W/m.gguf" --device tpu --listen 127.0.0.1:0 >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -eq 2 ] || fail "serve --device tpu: status $rc"
grep -qF "bad --device 'tpu'" "$W/err" || fail "serve --device tpu: stderr '$(cat "$W/err")'"
cat >"$W/c.yaml" <<EOF
listen: 127.0.0.1:1
models:
  - name: m
    path: m.gguf
    device: cuda:one
tenants:
  - name: t
    key_sha256: "0000000000000000000000000000000000000000000000000000000000000000"
EOF
rc=0
timeout 10 "$TS_TESSERA" serve --config "$W/c.yaml" >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "device: cuda:one: status $rc"
grep -qF "'cuda:one' is not cpu, cuda or cuda:N" "$W/err" || fail "device: cuda:one: stderr '$(cat "$W/err")'"
grep -qF "device" "$W/err" || fail "device: cuda:one: the key is not named"
sed -i 's/device: cuda:one/kv_cache_dtype: f8/' "$W/c.yaml"
rc=0
timeout 10 "$TS_TESSERA" serve --config "$W/c.yaml" >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "kv_cache_dtype: f8: status $rc"
grep -qF "kv_cache_dtype" "$W/err" && grep -qF "'f8' is not auto, f16 or f32" "$W/err" ||
    fail "kv_cache_dtype: f8: stderr '$(cat "$W/err")'"
# An embedding model has a CPU implementation only: a device is refused,
# not ignored. (tests/ref/bert_gguf.py writes a tiny BERT; it needs NumPy,
# which scripts/deps.sh installs for the test suite.)
: "${TS_SRC:?TS_SRC must name the source tree}"
PY=${PY:-/usr/bin/python3}
"$PY" -c "import numpy" 2>/dev/null || fail "$PY cannot import numpy (scripts/deps.sh installs python3-numpy)"
"$PY" "$TS_SRC/tests/ref/bert_gguf.py" "$W/bert.gguf" --pooling mean --ctx 64 --seed 7 >/dev/null ||
    fail "bert_gguf.py could not write an encoder"
rc=0
timeout 10 "$TS_TESSERA" serve --model "$W/bert.gguf" --device cuda --listen 127.0.0.1:0 >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "an encoder on --device cuda: status $rc"
grep -qF "an embedding model runs on the CPU only, not on device 'cuda'" "$W/err" ||
    fail "an encoder on --device cuda: stderr '$(cat "$W/err")'"
cat >"$W/e.yaml" <<EOF
listen: 127.0.0.1:1
models:
  - name: e
    path: bert.gguf
    kv_cache_dtype: f32
tenants:
  - name: t
    tier: gold
    key_sha256: "0000000000000000000000000000000000000000000000000000000000000000"
EOF
rc=0
timeout 10 "$TS_TESSERA" serve --config "$W/e.yaml" >/dev/null 2>"$W/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "an encoder with kv_cache_dtype: status $rc"
grep -qF "an embedding model keeps no KV cache: drop kv_cache_dtype" "$W/err" ||
    fail "an encoder with kv_cache_dtype: stderr '$(cat "$W/err")'"

# serve --device cuda reaches the engine: it serves (a GPU here), or it
# stops before listening with the reason.
timeout 30 "$TS_TESSERA" serve --model "$W/m.gguf" --device cuda --listen 127.0.0.1:0 >"$W/s.out" 2>"$W/s.err" &
pid=$!
for _ in $(seq 100); do
    grep -q "listening" "$W/s.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
if grep -q "listening" "$W/s.out"; then
    kill -TERM "$pid"
    wait "$pid" || true
    echo "device_cli: serve --device cuda listened"
else
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "serve --device cuda: status $rc without listening"
    grep -qE "this build has no CUDA backend|no CUDA device" "$W/s.err" ||
        fail "serve --device cuda: stderr '$(cat "$W/s.err")'"
    echo "device_cli: serve --device cuda refused: $(head -1 "$W/s.err")"
fi
echo "device_cli: PASS"
