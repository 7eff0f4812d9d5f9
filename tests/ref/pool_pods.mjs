// pool_pods.mjs - every InferencePool of `tessera plan --emit gie` selects
// exactly the pods of its worker that `--emit k8s` of the same input runs:
// each pod template its matchLabels select carries the pool's worker label
// (tessera.dev/worker), no pod of another worker is selected, every pod of
// its worker is, and with PLAN.json (--emit json of the same input) those
// pods are all the worker's placed replicas (tessera.dev/instance), none
// missing. Its target port must be a containerPort of every pod it selects.
// A pool that matches no pod routes nothing, and one that matches another
// worker's pods sends a tenant's requests to a server that does not know
// its key; no schema check can see either.
//
// usage: node pool_pods.mjs NODE_MODULES GIE.yaml K8S.yaml [PLAN.json]
// Exit status 0 when every pool selects its worker's pods on its port, 1 otherwise.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nm, gieFile, k8sFile, planFile] = process.argv.slice(2);
const require = createRequire(path.join(nm, "noop.js"));
const YAML = require("yaml");
const docs = (f) => YAML.parseAllDocuments(fs.readFileSync(f, "utf8")).map((d) => d.toJS()).filter(Boolean);
const plan = planFile ? JSON.parse(fs.readFileSync(planFile, "utf8")) : null;
const WORKER = "tessera.dev/worker", INSTANCE = "tessera.dev/instance";

const pods = docs(k8sFile)
    .filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet")
    .map((o) => ({
        name: o.metadata.name,
        labels: o.spec.template.metadata.labels || {},
        ports: o.spec.template.spec.containers.flatMap((c) => (c.ports || []).map((p) => p.containerPort)),
    }));
let bad = 0, pools = 0;
const err = (msg) => {
    console.error(msg);
    bad++;
};
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
for (const o of docs(gieFile).filter((o) => o.kind === "InferencePool")) {
    pools++;
    const name = o.metadata.name;
    const want = o.spec.selector.matchLabels || {};
    const worker = o.metadata.labels?.[WORKER];
    const hit = pods.filter((p) => Object.entries(want).every(([k, v]) => p.labels[k] === v));
    const ports = (o.spec.targetPorts || []).map((t) => t.number);
    if (!hit.length) err(`pool ${name}: selects no pod of ${k8sFile} (${JSON.stringify(want)})`);
    if (!worker) err(`pool ${name}: names no worker (label ${WORKER})`);
    for (const p of hit)
        if (p.labels[WORKER] !== worker) err(`pool ${name}: selects pod ${p.name} of worker '${p.labels[WORKER]}', not its worker '${worker}'`);
    for (const p of pods)
        if (p.labels[WORKER] === worker && !hit.includes(p)) err(`pool ${name}: does not select pod ${p.name} of its worker '${worker}'`);
    if (plan) {
        const replicas = plan.instances.filter((i) => i.worker === worker && i.placed).map((i) => i.name).sort();
        const got = hit.map((p) => p.labels[INSTANCE]).sort();
        if (!replicas.length) err(`pool ${name}: the plan has no placed replica of worker '${worker}'`);
        else if (!same(got, replicas))
            err(`pool ${name}: selects the pods of instances [${got.join(", ")}], the plan places [${replicas.join(", ")}]`);
    }
    for (const p of hit)
        for (const n of ports)
            if (!p.ports.includes(n)) err(`pool ${name}: target port ${n} is not a containerPort of ${p.name}`);
}
if (!pools) err(`${gieFile}: no InferencePool`);
process.exit(bad ? 1 : 0);
