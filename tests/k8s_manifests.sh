#!/usr/bin/env bash
# The Kubernetes manifests of `tessera plan --emit k8s`:
#  1. deploy/<example>/k8s.yaml are what the planner writes today for each
#     examples/plan/<example>.yaml (regenerated here and diffed);
#  2. they, and the manifests of the golden fixtures mixed.yaml (MIG, MPS,
#     time-slicing on one node), k8s-mps.yaml (the device plugin's MPS) and
#     k8s-hami.yaml (HAMi), pass tests/integration/k8s_validate.mjs: every
#     object through kubernetes-models' validate() (the Kubernetes OpenAPI
#     schemas: types, required fields, enums; they do not refuse unknown
#     fields), each device-plugin config against NVIDIA's documented schema
#     (tests/data/k8s/device-plugin-config.schema.json, with ajv), the MPS env
#     against NVIDIA's documented variables, and the references, probes and
#     grace periods between the objects;
#  3. broken copies are each refused, naming the fault, so the validation is
#     seen to fail.
# The npm packages are installed once into the shared cache
# (tests/lib/npm_cache.sh); if they cannot be, the test FAILS.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
fail() { echo "k8s_manifests: FAIL: $*" >&2; exit 1; }

D="$TS_TMPDIR/k8s_manifests"
rm -rf "$D"
mkdir -p "$D"

# 1. deploy/ is the planner's output for the examples.
mkdir -p "$D/deploy"
n=0
for input in "$TS_SRC"/examples/plan/*.yaml; do
    stem=$(basename "$input" .yaml)
    timeout 60 "$TS_TESSERA" plan --input "$input" --emit k8s --out "$D/deploy/$stem" 2>/dev/null ||
        fail "tessera plan --input examples/plan/$stem.yaml --emit k8s failed"
    diff -u "$TS_SRC/deploy/$stem/k8s.yaml" "$D/deploy/$stem/k8s.yaml" >"$D/diff" ||
        { cat "$D/diff" >&2; fail "deploy/$stem/k8s.yaml is stale: regenerate it with
    tessera plan --input examples/plan/$stem.yaml --emit k8s --out deploy/$stem"; }
    n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "no examples/plan/*.yaml"
extra=$(cd "$TS_SRC/deploy" && for d in */; do [ -f "$TS_SRC/examples/plan/${d%/}.yaml" ] || echo "${d%/}"; done)
[ -z "$extra" ] || fail "deploy/ has manifests of no example: $extra"
echo "k8s_manifests: deploy/ matches the planner for $n examples"

for stem in mixed k8s-mps k8s-hami; do
    timeout 60 "$TS_TESSERA" plan --input "$TS_SRC/tests/golden/plan/$stem.yaml" --emit k8s >"$D/$stem.yaml" \
        2>"$D/$stem.err" || fail "tessera plan --input tests/golden/plan/$stem.yaml --emit k8s failed"
done
# Where the manifests do not run the plan as planned, the command says so too.
grep -q "^plan: NOTE node l40s-0: HAMi resources instead" "$D/k8s-hami.err" || fail "no HAMi note on stderr"
grep -q "^plan: NOTE node a40-0: the device plugin runs no MPS on a node with MIG" "$D/mixed.err" ||
    fail "no note on stderr that mixed.yaml's MPS is time-sliced"
[ ! -s "$D/k8s-mps.err" ] || fail "k8s-mps.yaml runs as planned, yet: $(cat "$D/k8s-mps.err")"

# 2. Validation.
. "$TS_SRC/tests/lib/npm_cache.sh"
npm_cache_install k8s_manifests kubernetes-models@5.1.0 yaml@2.9.1 ajv@8
export TS_NPM_DIR=$NPM_CACHE_DIR
export TS_DP_SCHEMA="$TS_SRC/tests/data/k8s/device-plugin-config.schema.json"
VALIDATE=(timeout 120 node "$TS_SRC/tests/integration/k8s_validate.mjs")
"${VALIDATE[@]}" "$TS_SRC"/deploy/*/k8s.yaml "$D"/mixed.yaml "$D"/k8s-mps.yaml "$D"/k8s-hami.yaml ||
    fail "the manifests do not validate (problems above)"

# 3. Broken copies: FILE is a sed of SRC; the validator must refuse it with WANT.
refused() {
    local what=$1 src=$2 want=$3 out
    shift 3
    sed "$@" "$D/$src.yaml" >"$D/broken.yaml"
    cmp -s "$D/$src.yaml" "$D/broken.yaml" && fail "$what: the edit changed nothing"
    if out=$("${VALIDATE[@]}" "$D/broken.yaml"); then fail "$what: accepted"; fi
    grep -qF -- "$want" <<<"$out" || fail "$what: refused, but not for '$want': $out"
    echo "k8s_manifests: $what: refused"
}
refused "replicas not an integer" k8s-mps "spec/replicas must be integer" -e 's/^  replicas: 1$/  replicas: one/'
refused "MPS with migStrategy mixed" k8s-mps "config l40s-0: / must NOT be valid" \
    -e 's/migStrategy: none/migStrategy: mixed/'
refused "no default plugin config" k8s-mps 'no "default" config' -e '/^  default: |-$/,/^  [a-z0-9-]*-[0-9]*: |-$/{/^  [a-z0-9-]*-[0-9]*: |-$/!d}'
refused "a default config that shares" k8s-mps 'the "default" config shares GPUs' \
    -e '0,/^      migStrategy: none$/s//      migStrategy: none\n    sharing: {timeSlicing: {resources: [{name: nvidia.com\/gpu, replicas: 2}]}}/'
refused "a misspelt plugin config key" k8s-mps "must NOT have additional properties" \
    -e 's/      migStrategy: none/      migStrategyy: none/'
refused "MPS of a MIG resource" k8s-mps 'must be equal to constant' \
    -e 's|          - name: nvidia.com/gpu$|          - name: nvidia.com/mig-1g.12gb|'
refused "an MPS client naming its GPU" k8s-mps "sets CUDA_VISIBLE_DEVICES" \
    -e 's|            - {name: CUDA_MPS_CLIENT_PRIORITY, value: "0"}|&\n            - {name: CUDA_VISIBLE_DEVICES, value: "1"}|'
refused "an undocumented MPS variable" k8s-mps "is not one of NVIDIA's documented MPS variables" \
    -e 's/CUDA_MPS_CLIENT_PRIORITY/CUDA_MPS_CLIENT_PRIO/'
refused "a pinned limit on the physical index" k8s-mps "is not in its documented form" \
    -e 's/value: "0=\([0-9]*M\)"/value: "1=\1"/'
refused "more SMs than the plugin's replica" k8s-mps "the plugin's MPS gives each of 2 replicas 50%" \
    -e 's/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: "4"/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: "80"/'
refused "MPS env on a time-sliced node" mixed "whose device plugin config runs no MPS" \
    -e 's|          resources:|          env: [{name: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: "10"}]\n&|'
refused "HAMi without the GPU pin" k8s-hami "without nvidia.com/use-gpuuuid" -e '/nvidia.com\/use-gpuuuid/d'
refused "a grace period shorter than the drain" k8s-mps "does not cover the preStop pause" \
    -e 's/terminationGracePeriodSeconds: [0-9]*/terminationGracePeriodSeconds: 20/'
refused "no readiness probe" k8s-mps "no readiness probe on /health/ready" -e 's|path: /health/ready|path: /health/live|'
refused "readiness lost on one miss" k8s-mps "readinessProbe gives up on one late answer" \
    -e '/readinessProbe:/,/failureThreshold/s/failureThreshold: [0-9]*/failureThreshold: 1/'
refused "liveness with the 1 s default timeout" k8s-mps "livenessProbe gives up on one late answer" \
    -e '/livenessProbe:/,/timeoutSeconds/{/timeoutSeconds/d}'
refused "a StatefulSet without its Service" k8s-mps "names no Service" -e 's/serviceName: tessera-/serviceName: nothing-/'
refused "a StatefulSet's Service with a cluster IP" k8s-mps "is not headless" -e '/^  clusterIP: None$/d'
refused "a volume of no claim" k8s-mps "no PersistentVolumeClaim" -e 's/claimName: tessera-models/claimName: models/'
refused "a models claim nothing can fill" k8s-mps "is not ReadWriteMany" -e 's/accessModes: \[ReadWriteMany\]/accessModes: [ReadOnlyMany]/'
refused "a writable models mount" k8s-mps "mounts the shared volume models writable" \
    -e 's|{name: models, mountPath: /models, readOnly: true}|{name: models, mountPath: /models}|'
refused "a BestEffort pod" k8s-mps "requests no cpu or memory" -e '/^            requests:$/,/^              memory: /d'
refused "a memory limit above the request" k8s-mps "is not its request" \
    -e '/^            limits:$/{n;s/memory: [0-9]*Mi/memory: 999999Mi/}'
refused "fewer CPUs than engine threads" k8s-mps "CPUs for 2 engine threads" -e 's/cpu: "2"/cpu: "1"/'
refused "an unknown kind" k8s-mps "unknown kind v1 Servic" -e 's/^kind: Service$/kind: Servic/'
refused "a GIE kind in another group" k8s-mps "unknown kind example.com/v1 InferencePool" \
    -e '0,/^apiVersion: v1$/s//apiVersion: example.com\/v1/' \
    -e '0,/^kind: ConfigMap$/s//kind: InferencePool/'
# A GIE object of its own group is left to its test, and the rest still passes.
printf -- '---\napiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: x}\n' |
    cat "$D/k8s-mps.yaml" - >"$D/crd.yaml"
"${VALIDATE[@]}" "$D/crd.yaml" | grep -q "1 CRD objects left to their test" || fail "a GIE InferencePool was not left to its test"
rm -rf "$D"
echo "k8s_manifests: PASS"
