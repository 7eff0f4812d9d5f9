// k8s_validate.mjs - validates the manifests `tessera plan --emit k8s` writes
// (tests/k8s_manifests.sh runs it).
//
//     node k8s_validate.mjs FILE...
//     env: TS_NPM_DIR (the npm cache holding kubernetes-models, yaml, ajv),
//          TS_DP_SCHEMA (tests/data/k8s/device-plugin-config.schema.json)
//
// Every YAML document is parsed with the npm `yaml` package and each core
// object is checked by kubernetes-models' validate() against the Kubernetes
// OpenAPI schema of its kind. Objects of the GIE and Kueue CRD groups are
// skipped (their own test validates them); any other kind is an error.
// Then what the schemas cannot see:
//   - each device-plugin config (ConfigMap tessera-device-plugin) against
//     NVIDIA's documented config schema, with ajv, and a "default" config
//     (migStrategy none, no sharing) for the nodes without the label;
//   - container env: only NVIDIA's documented MPS variables, in their
//     documented forms, and never CUDA_VISIBLE_DEVICES beside them (an MPS
//     client sees its daemon's GPU as device 0);
//   - an MPS client only on a node whose plugin config runs MPS, asking at
//     most the 100/replicas % of SMs that one replica is given;
//   - HAMi resources only on a node without a plugin config, with the GPU
//     UUID annotation that pins the planned GPU;
//   - the models' PVC is ReadWriteMany (fillable) and mounted read-only;
//   - references hold: ConfigMaps, the PVC, a StatefulSet's (headless) Service, each
//     Service's selector and target port, the probes' named port;
//   - CPU and memory requests (the engine's threads, more than the KV pool)
//     with the memory limit equal to the request;
//   - probes on /health/live and /health/ready that survive one late answer
//     (timeout of 2 s or more, 2 failures or more), and a grace period longer
//     than the preStop pause plus serve's shutdown_grace_s.
// Prints each problem and exits 1 if there is any.
import { createRequire } from "node:module";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const npmDir = process.env.TS_NPM_DIR;
const schemaPath = process.env.TS_DP_SCHEMA;
if (!npmDir || !schemaPath) {
    console.error("k8s_validate: TS_NPM_DIR and TS_DP_SCHEMA must be set");
    process.exit(2);
}
const modules = join(npmDir, "node_modules");
const require = createRequire(join(modules, "noop.js"));
const YAML = require("yaml");
const Ajv = require("ajv");
const ajv = new Ajv({ allErrors: true, strict: false });
const checkPluginConfig = ajv.compile(JSON.parse(readFileSync(schemaPath, "utf8")));

const CRD_GROUPS = ["inference.networking.k8s.io", "inference.networking.x-k8s.io", "kueue.x-k8s.io"];
// NVIDIA's MPS guide, appendix "Environment variables", and the forms
// tessera uses: the pinned limit names device 0, the client's only device.
const MPS_VARS = {
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: /^(100|[1-9][0-9]?)$/,
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: /^0=[1-9][0-9]*[MG]$/,
    CUDA_MPS_CLIENT_PRIORITY: /^[01]$/,
    CUDA_MPS_PIPE_DIRECTORY: /^\/\S+$/,
    CUDA_MPS_LOG_DIRECTORY: /^\/\S+$/,
};
const GPU_RESOURCE = /^nvidia\.com\/(gpu|mig-[0-9]+g\.[0-9]+gb(\+[a-z]+)?|gpumem|gpumem-percentage|gpucores)$/;
const HAMI_RESOURCES = ["nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"];

const problems = [];
let validated = 0, skipped = 0, configs = 0;

async function modelOf(apiVersion, kind) {
    const group = apiVersion.includes("/") ? apiVersion : `v1`;
    const file = join(modules, "kubernetes-models", group, `${kind}.js`);
    if (!/^[A-Za-z]+$/.test(kind) || !existsSync(file)) return null;
    return (await import(pathToFileURL(file).href))[kind];
}

function podOf(o) {
    return o.spec && o.spec.template && o.spec.template.spec;
}

async function readFile(file) {
    const objs = [];
    for (const doc of YAML.parseAllDocuments(readFileSync(file, "utf8"))) {
        for (const e of doc.errors) problems.push(`${file}: YAML: ${e.message}`);
        const o = doc.toJS();
        if (o === null || o === undefined) continue;
        const where = `${file}: ${o.kind}/${o.metadata && o.metadata.name}`;
        if (typeof o.apiVersion !== "string" || typeof o.kind !== "string") {
            problems.push(`${where}: no apiVersion or kind`);
            continue;
        }
        const group = o.apiVersion.includes("/") ? o.apiVersion.split("/")[0] : "";
        if (CRD_GROUPS.includes(group)) {
            skipped++;
            continue;
        }
        const Model = await modelOf(o.apiVersion, o.kind);
        if (!Model) {
            problems.push(`${where}: unknown kind ${o.apiVersion} ${o.kind}`);
            continue;
        }
        try {
            new Model(o).validate();
            validated++;
        } catch (e) {
            problems.push(`${where}: invalid: ${e.message}`);
        }
        objs.push({ file, where, o });
    }
    return objs;
}

// node name -> {mps: replicas or 0} from the device plugin's ConfigMap.
function pluginConfigs(objs) {
    const nodes = new Map();
    for (const { where, o } of objs) {
        if (o.kind !== "ConfigMap" || o.metadata.name !== "tessera-device-plugin") continue;
        // The config-manager falls back to the config named "default" on a
        // node without the label, and fails there without one.
        let dflt = null;
        try {
            dflt = o.data && o.data.default !== undefined ? YAML.parse(o.data.default) : null;
        } catch (e) {
            // the loop below reports the YAML error
        }
        if (!dflt) problems.push(`${where}: no "default" config: the plugin fails on a GPU node without the label`);
        else if (dflt.sharing || !dflt.flags || dflt.flags.migStrategy !== "none")
            problems.push(`${where}: the "default" config shares GPUs or uses MIG: unplanned nodes must get whole GPUs`);
        for (const [node, text] of Object.entries(o.data || {})) {
            configs++;
            let c;
            try {
                c = YAML.parse(text);
            } catch (e) {
                problems.push(`${where}: config ${node}: YAML: ${e.message}`);
                continue;
            }
            if (!checkPluginConfig(c))
                for (const e of checkPluginConfig.errors)
                    problems.push(`${where}: config ${node}: ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
            const mps = c && c.sharing && c.sharing.mps;
            nodes.set(node, { mps: mps ? Math.max(...mps.resources.map((r) => r.replicas)) : 0 });
        }
    }
    return nodes;
}

function checkEnv(where, node, env, plugin) {
    const names = env.map((e) => e.name);
    const mps = names.filter((n) => n.startsWith("CUDA_MPS_"));
    for (const { name, value } of env) {
        if (!name.startsWith("CUDA_")) continue;
        if (name === "CUDA_VISIBLE_DEVICES") {
            if (mps.length) problems.push(`${where}: an MPS client sets CUDA_VISIBLE_DEVICES (its daemon's GPU is device 0)`);
            continue;
        }
        if (!MPS_VARS[name]) problems.push(`${where}: ${name} is not one of NVIDIA's documented MPS variables`);
        else if (!MPS_VARS[name].test(String(value))) problems.push(`${where}: ${name}=${value} is not in its documented form`);
    }
    const pct = env.find((e) => e.name === "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (!pct) return;
    const cfg = plugin.get(node);
    if (!cfg || !cfg.mps) {
        problems.push(`${where}: MPS env on node ${node}, whose device plugin config runs no MPS`);
        return;
    }
    const grant = Math.floor(100 / cfg.mps);
    if (Number(pct.value) > grant)
        problems.push(`${where}: asks ${pct.value}% of SMs, the plugin's MPS gives each of ${cfg.mps} replicas ${grant}%`);
}

const MIB = { Ki: 1 / 1024, Mi: 1, Gi: 1024, Ti: 1024 * 1024, KiB: 1 / 1024, MiB: 1, GiB: 1024, TiB: 1024 * 1024 };

function mibOf(q) {
    const m = /^([0-9]+)(Ki|Mi|Gi|Ti|KiB|MiB|GiB|TiB)?$/.exec(String(q));
    return m ? Number(m[1]) * (m[2] ? MIB[m[2]] : 1 / (1024 * 1024)) : NaN;
}

// CPU and memory requested (not BestEffort), the memory limit equal to the
// request, at least the KV pool in memory and the engine's threads in CPUs.
function checkRequests(where, res, model) {
    const req = res.requests || {}, lim = res.limits || {};
    if (req.cpu === undefined || req.memory === undefined) {
        problems.push(`${where}: requests no cpu or memory: the pod is BestEffort, the first evicted`);
        return;
    }
    if (String(lim.memory) !== String(req.memory))
        problems.push(`${where}: memory limit ${lim.memory} is not its request ${req.memory}`);
    if (!model) return;
    if (model.threads !== undefined && Number(req.cpu) < model.threads)
        problems.push(`${where}: requests ${req.cpu} CPUs for ${model.threads} engine threads`);
    if (model.kv_cache_bytes !== undefined && !(mibOf(req.memory) > mibOf(model.kv_cache_bytes)))
        problems.push(`${where}: requests ${req.memory} of memory, not more than its KV pool ${model.kv_cache_bytes}`);
}

function probePath(c, which) {
    const p = c[which];
    return p && p.httpGet ? p.httpGet.path : undefined;
}

function checkWorkload(where, o, objs, plugin) {
    const pod = podOf(o);
    const node = pod.nodeSelector && pod.nodeSelector["kubernetes.io/hostname"];
    if (!node) problems.push(`${where}: not pinned to a node (nodeSelector kubernetes.io/hostname)`);
    const byName = (kind, name) => objs.find((x) => x.o.kind === kind && x.o.metadata.name === name);
    if (o.kind === "StatefulSet") {
        const svc = byName("Service", o.spec.serviceName);
        if (!svc) problems.push(`${where}: serviceName ${o.spec.serviceName} names no Service`);
        // A StatefulSet's governing Service gives its pods their DNS names:
        // it must be headless.
        else if (svc.o.spec.clusterIP !== "None")
            problems.push(`${where}: serviceName ${o.spec.serviceName} is not headless (clusterIP: None)`);
    }
    let grace = 10;     // serve's default shutdown_grace_s
    let model = null;   // the tessera.yaml's model entry
    for (const v of pod.volumes || []) {
        if (v.configMap) {
            const cm = byName("ConfigMap", v.configMap.name);
            if (!cm) problems.push(`${where}: volume ${v.name}: no ConfigMap ${v.configMap.name}`);
            else if (cm.o.data && cm.o.data["tessera.yaml"]) {
                const t = YAML.parse(cm.o.data["tessera.yaml"]);
                if (t && t.limits && t.limits.shutdown_grace_s !== undefined) grace = t.limits.shutdown_grace_s;
                if (t && Array.isArray(t.models) && t.models.length) model = t.models[0];
            }
        }
        if (v.persistentVolumeClaim) {
            const pvc = byName("PersistentVolumeClaim", v.persistentVolumeClaim.claimName);
            if (!pvc) problems.push(`${where}: volume ${v.name}: no PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}`);
            // Filled once by another pod, read by many: a ReadOnlyMany claim
            // could never be filled, a writable mount lets a pod spoil it.
            else if (!(pvc.o.spec.accessModes || []).includes("ReadWriteMany"))
                problems.push(`${where}: volume ${v.name}: claim ${pvc.o.metadata.name} is not ReadWriteMany: nothing can fill it while pods read it`);
            for (const c of pod.containers || [])
                for (const m of c.volumeMounts || [])
                    if (m.name === v.name && m.readOnly !== true)
                        problems.push(`${where}: container ${c.name} mounts the shared volume ${v.name} writable`);
        }
    }
    const hami = Object.keys((pod.containers || []).reduce((a, c) => Object.assign(a, (c.resources || {}).limits), {}))
        .some((r) => HAMI_RESOURCES.includes(r));
    if (hami && plugin.has(node)) problems.push(`${where}: HAMi resources on node ${node}, which the NVIDIA plugin config serves`);
    const ann = o.spec.template.metadata.annotations || {};
    if (hami && !ann["nvidia.com/use-gpuuuid"]) problems.push(`${where}: HAMi pod without nvidia.com/use-gpuuuid: the planned GPU is not pinned`);
    for (const c of pod.containers || []) {
        const w = `${where}: container ${c.name}`;
        checkEnv(w, node, c.env || [], plugin);
        checkRequests(w, c.resources || {}, model);
        for (const r of Object.keys((c.resources || {}).limits || {}))
            if (r.startsWith("nvidia.com/") && !GPU_RESOURCE.test(r)) problems.push(`${w}: unknown GPU resource ${r}`);
        // One late answer (timeoutSeconds defaults to 1) must neither drop
        // the pod from its endpoints nor restart it.
        for (const which of ["livenessProbe", "readinessProbe"]) {
            const pr = c[which] || {};
            if ((pr.failureThreshold === undefined ? 3 : pr.failureThreshold) < 2 || (pr.timeoutSeconds || 1) < 2)
                problems.push(`${w}: ${which} gives up on one late answer (failureThreshold ${pr.failureThreshold}, timeoutSeconds ${pr.timeoutSeconds})`);
        }
        if (probePath(c, "livenessProbe") !== "/health/live") problems.push(`${w}: no liveness probe on /health/live`);
        if (probePath(c, "readinessProbe") !== "/health/ready") problems.push(`${w}: no readiness probe on /health/ready`);
        const ports = (c.ports || []).map((p) => p.name);
        for (const which of ["livenessProbe", "readinessProbe", "startupProbe"])
            if (c[which] && c[which].httpGet && !ports.includes(c[which].httpGet.port))
                problems.push(`${w}: ${which} port ${c[which].httpGet.port} is not a container port`);
        const cmd = c.lifecycle && c.lifecycle.preStop && c.lifecycle.preStop.exec && c.lifecycle.preStop.exec.command;
        const pause = cmd && cmd[0] === "sleep" ? Number(cmd[1]) : 0;
        const period = pod.terminationGracePeriodSeconds === undefined ? 30 : pod.terminationGracePeriodSeconds;
        if (period <= pause + grace)
            problems.push(`${w}: terminationGracePeriodSeconds ${period} does not cover the preStop pause ${pause} s and shutdown_grace_s ${grace} s`);
    }
}

function checkService(where, o, objs) {
    const sel = o.spec.selector || {};
    const pods = objs.filter((x) => podOf(x.o) && Object.entries(sel).every(([k, v]) => (x.o.spec.template.metadata.labels || {})[k] === v));
    if (!Object.keys(sel).length || !pods.length) {
        problems.push(`${where}: its selector matches no pod template`);
        return;
    }
    for (const p of o.spec.ports || [])
        for (const x of pods)
            if (typeof p.targetPort === "string" && !podOf(x.o).containers.some((c) => (c.ports || []).some((cp) => cp.name === p.targetPort)))
                problems.push(`${where}: targetPort ${p.targetPort} is no port of ${x.where}`);
}

const files = process.argv.slice(2);
if (!files.length) {
    console.error("usage: node k8s_validate.mjs FILE...");
    process.exit(2);
}
for (const file of files) {
    const objs = await readFile(file);
    const plugin = pluginConfigs(objs);
    for (const { where, o } of objs) {
        if (o.kind === "Deployment" || o.kind === "StatefulSet") checkWorkload(where, o, objs, plugin);
        if (o.kind === "Service") checkService(where, o, objs);
    }
}
for (const p of problems) console.log(p);
console.log(`k8s_validate: ${validated} objects valid, ${configs} device-plugin configs, ${skipped} CRD objects left to their test; ` +
    `${problems.length} problem(s)`);
process.exit(problems.length || validated === 0 ? 1 : 0);
