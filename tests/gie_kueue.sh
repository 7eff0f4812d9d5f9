#!/usr/bin/env bash
# gie_kueue.sh - `tessera plan --emit gie` and `--emit kueue` against the
# CRDs they are for: every object of both inputs (examples/plan/fleet.yaml
# and tests/golden/plan/mixed.yaml) validates with npm `ajv` against the
# openAPIV3Schema of the served version of the vendored CRD
# (tests/data/crds/, see its README), with names checked as DNS-1123, quota
# quantities parsed, and the objects checked against the plan's own JSON
# report (tests/ref/crd_check.mjs says what exactly), and every
# InferencePool selects pods of `--emit k8s` of the same input on their
# containerPort (tests/ref/pool_pods.mjs). Then the checker is
# shown to reject broken objects, one defect each, and the binary to refuse
# tenant or tier names that clash as Kubernetes names (exit 2, naming both)
# while it sanitises the others.
#
# The npm packages are installed once into the shared cache
# (tests/lib/npm_cache.sh); if they cannot be installed the test FAILS.
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch), TS_SRC (repo root).
set -euo pipefail
name=gie_kueue
: "${TS_TESSERA:?TS_TESSERA must name the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
fail() { echo "$name: FAIL: $*" >&2; exit 1; }

. "$TS_SRC/tests/lib/npm_cache.sh"
npm_cache_install "$name" ajv@8.20.0 yaml@2.9.1
NM="$NPM_CACHE_DIR/node_modules"
CRDS="$TS_SRC/tests/data/crds"

W="$TS_TMPDIR/$name.$$"
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT

check() { timeout 60 node "$TS_SRC/tests/ref/crd_check.mjs" "$NM" "$CRDS" "$@"; }

# emit STEM INPUT: the json report, gie and kueue of INPUT under $W/STEM.*
emit() {
    local stem=$1 input=$2 kind rc
    for kind in json gie kueue; do
        rc=0
        timeout 30 "$TS_TESSERA" plan --input "$input" --emit "$kind" >"$W/$stem.$kind" 2>"$W/$stem.$kind.err" || rc=$?
        # 1 is an infeasible plan, still written; 2 or more is an error.
        [ "$rc" -le 1 ] || { cat "$W/$stem.$kind.err" >&2; fail "plan --emit $kind of $input exited $rc"; }
    done
}

# valid STEM [KUEUE_KINDS]: both files of STEM validate, against the plan
# too. mixed.yaml's plan uses every GPU, so its queues have no flavor.
valid() {
    local stem=$1 kinds=${2:-ResourceFlavor,ClusterQueue,LocalQueue}
    check "$W/$stem.gie" "$stem gie" --plan "$W/$stem.json" --expect InferencePool,InferenceObjective ||
        fail "$stem: the GIE objects do not validate (above)"
    check "$W/$stem.kueue" "$stem kueue" --plan "$W/$stem.json" --expect "$kinds" ||
        fail "$stem: the Kueue objects do not validate (above)"
}

emit fleet "$TS_SRC/examples/plan/fleet.yaml"
emit mixed "$TS_SRC/tests/golden/plan/mixed.yaml"
valid fleet
valid mixed ClusterQueue,LocalQueue
grep -q '^kind: ResourceFlavor$' "$W/mixed.kueue" && fail "mixed.yaml's plan leaves no GPU free, yet has a ResourceFlavor"
# Kueue does not count the serving pods: the fleet's quotas are its 8 idle
# A100s of node a100-1 (a100-0 and h100-0 time-slice or run MPS), no more.
[ "$(awk '/nominalQuota:/ { s += $2 } END { print s }' "$W/fleet.kueue")" = 8 ] ||
    fail "fleet.yaml's quotas do not add up to the 8 GPUs its plan leaves free"
grep -q 'mig-' "$W/fleet.kueue" && fail "fleet.yaml's queues offer MIG instances, which all serve"

# The pools select the pods --emit k8s runs, on their port.
for stem in fleet mixed; do
    input=$TS_SRC/examples/plan/fleet.yaml
    [ "$stem" = mixed ] && input=$TS_SRC/tests/golden/plan/mixed.yaml
    timeout 30 "$TS_TESSERA" plan --input "$input" --emit k8s >"$W/$stem.k8s" 2>/dev/null || [ $? -le 1 ] ||
        fail "plan --emit k8s of $input failed"
    timeout 60 node "$TS_SRC/tests/ref/pool_pods.mjs" "$NM" "$W/$stem.gie" "$W/$stem.k8s" "$W/$stem.json" ||
        fail "$stem: an InferencePool does not select exactly its worker's pods of --emit k8s (above)"
done
# pools BROKEN WANT: pool_pods.mjs must fail the pools of BROKEN, saying WANT.
pools() {
    local out
    if out=$(timeout 60 node "$TS_SRC/tests/ref/pool_pods.mjs" "$NM" "$1" "$W/fleet.k8s" "$W/fleet.json" 2>&1); then
        fail "pool_pods.mjs accepted $1"
    fi
    grep -qF -- "$2" <<<"$out" || { echo "$out" >&2; fail "pool_pods.mjs rejected $1, but not for '$2'"; }
}
sed 's/tessera.dev\/worker: /tessera.dev\/worker: x-/' "$W/fleet.gie" >"$W/nopods"
pools "$W/nopods" "selects no pod"
# A selector without the worker label takes every tessera pod of the namespace.
sed '0,/^      tessera.dev\/worker: .*/{//d}' "$W/fleet.gie" >"$W/allpods"
pools "$W/allpods" "not its worker"
# The 3 replicas of mistral-7b-gold in mixed.yaml's plan, one dropped from k8s.
awk '/^---$/ { if (doc !~ /tessera.dev\/instance: mistral-7b-gold-r1/) printf "%s", doc; doc = "" } { doc = doc $0 "\n" }
     END { if (doc !~ /tessera.dev\/instance: mistral-7b-gold-r1/) printf "%s", doc }' "$W/mixed.k8s" >"$W/mixed-r1.k8s"
grep -q 'mistral-7b-gold-r0' "$W/mixed-r1.k8s" || fail "the replica edit of mixed.k8s removed too much"
if out=$(timeout 60 node "$TS_SRC/tests/ref/pool_pods.mjs" "$NM" "$W/mixed.gie" "$W/mixed-r1.k8s" "$W/mixed.json" 2>&1); then
    fail "pool_pods.mjs accepted a pool missing a replica of its worker"
fi
grep -qF "the plan places [mistral-7b-gold-r0, mistral-7b-gold-r1, mistral-7b-gold-r2]" <<<"$out" ||
    { echo "$out" >&2; fail "a pool missing a replica was rejected, but not for the missing replica"; }

# ---- the checker rejects what the API server would (or would silently drop) ----

# reject LABEL WANT FILE [--plan P]: the checker must fail FILE, saying WANT.
reject() {
    local what=$1 want=$2 file=$3 out
    shift 3
    if out=$(check "$file" "$what" "$@" 2>&1); then fail "the checker accepted $what"; fi
    grep -qF -- "$want" <<<"$out" || { echo "$out" >&2; fail "$what was rejected, but not for '$want'"; }
    echo "$name: rejected as it should: $what"
}
G="$W/mixed.gie" K="$W/fleet.kueue"
sed '0,/inference.networking.k8s.io\/v1$/s//inference.networking.k8s.io\/v1alpha9/' "$G" >"$W/b1"
reject "an InferencePool of a version the CRD does not serve" "serves no version 'v1alpha9'" "$W/b1"
sed '0,/endpointPickerRef:/s//extensionRef:/' "$G" >"$W/b2"
reject "a pool with the pre-v1 extensionRef" "additional properties 'extensionRef'" "$W/b2"
sed '0,/^  name: tessera-/s//  name: Tessera_/' "$G" >"$W/b3"
reject "a name that is not DNS-1123" "is not a DNS-1123 label" "$W/b3"
awk '!done && /^    port:$/ { getline; done = 1; next } 1' "$G" >"$W/b4"
reject "an EPP reference without its port (a CEL rule)" "port is required when kind is 'Service'" "$W/b4"
sed '0,/priority: 1$/s//priority: 0/' "$G" >"$W/b5"
reject "a gold objective without gold's priority" "priority 0, tier gold" "$W/b5" --plan "$W/mixed.json"
sed 's/priority: -1$/priority: 0/' "$G" >"$W/b13"
reject "a best-effort objective the picker would not shed" "priority 0, tier bronze" "$W/b13" --plan "$W/mixed.json"
sed '0,/nominalQuota: 1$/s//nominalQuota: 1,5/' "$K" >"$W/b6"
reject "a quota that is no quantity" "must match pattern" "$W/b6"
sed '0,/nominalQuota: 1$/s//nominalQuota: 500m/' "$K" >"$W/b7"
reject "half a GPU of quota" "is counted in units" "$W/b7"
sed '0,/cohortName:/s//cohort:/' "$K" >"$W/b8"
reject "the v1beta1 field cohort in v1beta2" "additional properties 'cohort'" "$W/b8"
sed '0,/reclaimWithinCohort: Any/s//reclaimWithinCohort: Sometimes/' "$K" >"$W/b9"
reject "a preemption policy Kueue does not have" "allowed values (Never, LowerPriority, Any)" "$W/b9"
sed '0,/nominalQuota: 0$/s//nominalQuota: 3/' "$K" >"$W/b10"
reject "quotas that add up to more GPUs than the plan leaves free" "nominal quotas add up to" "$W/b10" --plan "$W/fleet.json"
sed '0,/tessera.dev\/batch-gpus: a100-80gb/s//tessera.dev\/batch-gpus: h100-80gb/; s/^  name: a100-80gb$/  name: h100-80gb/; s/- name: a100-80gb$/- name: h100-80gb/' "$K" >"$W/b12"
reject "a flavor of GPUs the serving pods hold" "offers GPUs the plan does not leave free" "$W/b12" --plan "$W/fleet.json"
sed '0,/^          resources:$/s//          resourcez:/' "$K" >"$W/b14"
reject "a flavor without resources (its CEL rule cannot run)" "CEL rule could not be evaluated" "$W/b14"
sed '0,/^      flavors:$/s//      flavours:/' "$K" >"$W/b15"
reject "a resource group without flavors (its CEL rule cannot run)" "CEL rule could not be evaluated" "$W/b15"
sed 's/^kind: LocalQueue$/kind: LocalQueues/' "$K" >"$W/b11"
reject "a kind no vendored CRD defines" "no vendored CRD for kind LocalQueues" "$W/b11"

# ---- names: sanitised when distinct, refused when they clash ----

MIX="$TS_SRC/tests/golden/plan/mixed.yaml"
sed 's/^  - name: blog$/  - name: Blog.Corp_EU/' "$MIX" >"$W/sane.yaml"
grep -q 'Blog.Corp_EU' "$W/sane.yaml" || fail "the fixture edit did not apply (mixed.yaml changed?)"
emit sane "$W/sane.yaml"
valid sane ClusterQueue,LocalQueue
grep -q '^  name: blog-corp-eu$' "$W/sane.gie" || fail "tenant Blog.Corp_EU is not the objective blog-corp-eu"
grep -q '^  namespace: blog-corp-eu$' "$W/sane.kueue" || fail "tenant Blog.Corp_EU has no namespace blog-corp-eu"

# refuse INPUT KIND WANT: plan --emit KIND of INPUT exits 2 and says WANT.
refuse() {
    local input=$1 kind=$2 want=$3 rc=0
    timeout 30 "$TS_TESSERA" plan --input "$input" --emit "$kind" >"$W/out" 2>"$W/err" || rc=$?
    [ "$rc" -eq 2 ] || { cat "$W/err" >&2; fail "--emit $kind of $(basename "$input") exited $rc, not 2"; }
    [ ! -s "$W/out" ] || fail "--emit $kind of $(basename "$input") refused but still wrote output"
    grep -qF -- "$want" "$W/err" || { cat "$W/err" >&2; fail "--emit $kind of $(basename "$input"): no '$want'"; }
    echo "$name: refused as it should: $(basename "$input") --emit $kind"
}
sed 's/^  - name: blog$/  - name: Shop/' "$MIX" >"$W/clash.yaml"
refuse "$W/clash.yaml" gie "tenants 'shop' and 'Shop' both become 'shop'"
refuse "$W/clash.yaml" kueue "tenants 'shop' and 'Shop' both become 'shop'"
sed "s/^  - name: blog\$/  - name: '._.'/" "$MIX" >"$W/noname.yaml"
refuse "$W/noname.yaml" kueue "tenant '._.' has no letter or digit"
sed 's/^  - name: blog$/  - name: kube-system/' "$MIX" >"$W/kube.yaml"
refuse "$W/kube.yaml" kueue "tenant 'kube-system' would have the namespace 'kube-system'"
sed 's/silver/Gold/g' "$MIX" >"$W/tiers.yaml"
refuse "$W/tiers.yaml" kueue "tiers 'gold' and 'Gold' both become 'gold'"

echo "$name: PASS"
