// pool_pods.mjs - every InferencePool of `tessera plan --emit gie` selects
// pods that `--emit k8s` of the same input runs: its matchLabels are a
// subset of at least one pod template's labels, and its target port is a
// containerPort of every pod it selects. A pool that matches no pod routes
// nothing, which no schema check can see.
//
// usage: node pool_pods.mjs NODE_MODULES GIE.yaml K8S.yaml
// Exit status 0 when every pool selects pods on its port, 1 otherwise.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nm, gieFile, k8sFile] = process.argv.slice(2);
const require = createRequire(path.join(nm, "noop.js"));
const YAML = require("yaml");
const docs = (f) => YAML.parseAllDocuments(fs.readFileSync(f, "utf8")).map((d) => d.toJS()).filter(Boolean);

const pods = docs(k8sFile)
    .filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet")
    .map((o) => ({
        name: o.metadata.name,
        labels: o.spec.template.metadata.labels || {},
        ports: o.spec.template.spec.containers.flatMap((c) => (c.ports || []).map((p) => p.containerPort)),
    }));
let bad = 0, pools = 0;
for (const o of docs(gieFile).filter((o) => o.kind === "InferencePool")) {
    pools++;
    const want = o.spec.selector.matchLabels || {};
    const hit = pods.filter((p) => Object.entries(want).every(([k, v]) => p.labels[k] === v));
    const ports = (o.spec.targetPorts || []).map((t) => t.number);
    if (!hit.length) {
        console.error(`pool ${o.metadata.name}: selects no pod of ${k8sFile} (${JSON.stringify(want)})`);
        bad++;
    }
    for (const p of hit)
        for (const n of ports)
            if (!p.ports.includes(n)) {
                console.error(`pool ${o.metadata.name}: target port ${n} is not a containerPort of ${p.name}`);
                bad++;
            }
}
if (!pools) {
    console.error(`${gieFile}: no InferencePool`);
    bad++;
}
process.exit(bad ? 1 : 0);
