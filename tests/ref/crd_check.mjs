// crd_check.mjs - validates the objects of a multi-document YAML file
// against vendored CustomResourceDefinitions (tests/data/crds/), as the API
// server would on create, and stricter where the server would silently
// drop what it does not know:
//   - apiVersion (group/version) and kind name a CRD version that is served;
//   - metadata: name a DNS-1123 label, namespace a DNS-1123 label and only
//     on namespaced kinds, labels with valid keys and values, no other keys
//     but annotations;
//   - the rest against the version's openAPIV3Schema with ajv, every object
//     closed (a field the schema does not name is an error: the API server
//     would prune it and the setting would be lost without a word), formats
//     int32/int64/date-time, list-type map/set uniqueness, and each
//     x-kubernetes-validations (CEL) rule through a JavaScript rendering of
//     it; a rule this file does not know fails the check, so a new CRD
//     cannot pass unread. Transition rules (oldSelf) only apply to updates
//     and are skipped;
//   - quantities (Kueue quotas) parse, are >= 0, and are whole numbers for
//     extended resources such as nvidia.com/gpu, which Kubernetes counts in
//     whole units.
// With --plan PLAN.json (tessera plan --emit json of the same input) it also
// checks the objects against the plan they came from: Kueue flavors are the
// GPU types the plan leaves GPUs free of (on nodes that share none), and
// their quotas add up to exactly those free GPUs (Kueue does not count the
// serving pods, so a quota of their GPUs would admit jobs onto taken ones),
// borrowing limits are the rest of the tier's cohort, every ClusterQueue has
// its LocalQueue; every InferenceObjective names an emitted pool of its
// tenant's worker with its tier's priority (best effort -1, the others >= 0).
//
// usage: node crd_check.mjs NODE_MODULES CRD_DIR FILE.yaml LABEL [--plan P.json] [--expect Kind,Kind]
// Exit status 0 when every object is valid, 1 otherwise (each error on stderr).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nm, crdDir, file, label, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = rest[i + 1];
const require = createRequire(path.join(nm, "noop.js"));
const YAML = require("yaml");
const Ajv = require("ajv").default;

const errors = [];
const fail = (where, msg) => errors.push(`${where}: ${msg}`);

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const QUANTITY = /^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$/;

// ---- the CRDs ----------------------------------------------------------------

const crds = [];
for (const f of fs.readdirSync(crdDir).filter((f) => f.endsWith(".yaml")).sort()) {
    const doc = YAML.parse(fs.readFileSync(path.join(crdDir, f), "utf8"));
    if (doc?.kind !== "CustomResourceDefinition") throw new Error(`${f} is not a CustomResourceDefinition`);
    crds.push(doc);
}

// CEL rules, as JavaScript over the object after the API server's defaults.
// Keys are the rules with runs of white space collapsed.
const CEL = {
    "self.kind != 'Service' || has(self.port)": (s) => (s.kind ?? "Service") !== "Service" || s.port !== undefined,
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (s) =>
        s.every((x) => ["NoSchedule", "PreferNoSchedule", "NoExecute"].includes(x.effect)),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": (s) =>
        s.every((x) => x.key !== undefined || x.operator === "Exists"),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": (s) =>
        s.every((x) => x.tolerationSeconds === undefined || x.effect === "NoExecute"),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": (s) =>
        s.every((x) => x.operator === undefined || ["Equal", "Exists"].includes(x.operator)),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": (s) =>
        s.every((x) => x.operator !== "Exists" || x.value === undefined),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (s) =>
        s.every((x) => x.effect === undefined || ["NoSchedule", "PreferNoSchedule", "NoExecute"].includes(x.effect)),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": (s) =>
        s.topologyName === undefined || Object.keys(s.nodeLabels ?? {}).length >= 1,
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (s) =>
        s.preference === undefined ||
        ((s.whenCanBorrow ?? "MayStopSearch") === "TryNextFlavor" && (s.whenCanPreempt ?? "TryNextFlavor") === "TryNextFlavor"),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && self.borrowWithinCohort.policy != 'Never')": (s) =>
        !((s.reclaimWithinCohort ?? "Never") === "Never" && ((s.borrowWithinCohort ?? {}).policy ?? "Never") !== "Never"),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": (s) =>
        s.flavors.every((x) => x.resources.length === s.coveredResources.length),
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true": (s) =>
        s.cohortName !== undefined || s.resourceGroups === undefined ||
        s.resourceGroups.every((rg) => rg.flavors.every((f) => f.resources.every((r) => r.borrowingLimit === undefined))),
};

const ajv = new Ajv({ allErrors: true, strict: false });
ajv.addFormat("int32", { type: "number", validate: (x) => Number.isInteger(x) && x >= -(2 ** 31) && x < 2 ** 31 });
ajv.addFormat("int64", { type: "number", validate: (x) => Number.isSafeInteger(x) });
ajv.addFormat("date-time", /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/i);
for (const k of ["x-kubernetes-int-or-string", "x-kubernetes-map-type", "x-kubernetes-list-map-keys"]) ajv.addKeyword(k);
ajv.addKeyword({
    keyword: "x-kubernetes-validations",
    schemaType: "array",
    errors: true,
    validate: function cel(rules, data) {
        cel.errors = [];
        for (const r of rules) {
            const rule = r.rule.replace(/\s+/g, " ").trim();
            if (rule.includes("oldSelf")) continue;        // a transition rule: updates only
            const f = CEL[rule];
            if (!f) {
                cel.errors.push({ keyword: "x-kubernetes-validations", message: `CEL rule not known to crd_check.mjs: ${rule}`, params: {} });
                continue;
            }
            // A field the rule reads may be missing (the schema reports that
            // too); the API server's CEL then fails with "no such key", and so
            // does the check, reported, not thrown.
            let ok;
            try {
                ok = f(data);
            } catch (e) {
                cel.errors.push({ keyword: "x-kubernetes-validations", message: `CEL rule could not be evaluated (${e.message}): ${rule}`, params: {} });
                continue;
            }
            if (!ok) cel.errors.push({ keyword: "x-kubernetes-validations", message: r.message, params: {} });
        }
        return cel.errors.length === 0;
    },
});
ajv.addKeyword({
    keyword: "x-kubernetes-list-type",
    errors: true,
    validate: function lt(type, data, parent) {
        lt.errors = [];
        if (!Array.isArray(data) || type === "atomic") return true;
        const keys = type === "map" ? parent["x-kubernetes-list-map-keys"] : null;
        const seen = new Set();
        for (const x of data) {
            const k = JSON.stringify(keys ? keys.map((k) => x[k]) : x);
            if (seen.has(k)) lt.errors.push({ keyword: "x-kubernetes-list-type", message: `duplicate ${keys ? keys.join(",") : "item"} ${k} in a list of type ${type}`, params: {} });
            seen.add(k);
        }
        return lt.errors.length === 0;
    },
});

// Close every object the schema describes, so unknown fields fail.
function close(s) {
    if (!s || typeof s !== "object") return s;
    if (s.type === "object" && s.properties && s.additionalProperties === undefined && !s["x-kubernetes-preserve-unknown-fields"])
        s.additionalProperties = false;
    for (const p of Object.values(s.properties ?? {})) close(p);
    if (s.items) close(s.items);
    if (typeof s.additionalProperties === "object") close(s.additionalProperties);
    for (const k of ["anyOf", "allOf", "oneOf"]) for (const x of s[k] ?? []) close(x);
    return s;
}

const validators = new Map();
function versionOf(apiVersion, kind) {
    const slash = apiVersion.lastIndexOf("/");
    const group = slash < 0 ? "" : apiVersion.slice(0, slash), version = apiVersion.slice(slash + 1);
    const crd = crds.find((c) => c.spec.group === group && c.spec.names.kind === kind);
    if (!crd) return { err: `no vendored CRD for kind ${kind} in group '${group}'` };
    const v = crd.spec.versions.find((v) => v.name === version);
    if (!v || !v.served) return { err: `${crd.metadata.name} serves no version '${version}' (served: ${crd.spec.versions.filter((v) => v.served).map((v) => v.name).join(", ")})` };
    const key = `${crd.metadata.name}/${version}`;
    if (!validators.has(key)) validators.set(key, ajv.compile(close(structuredClone(v.schema.openAPIV3Schema))));
    return { crd, validate: validators.get(key) };
}

// ---- per object ---------------------------------------------------------------

function checkMetadata(where, md, namespaced) {
    if (!md || typeof md !== "object") return fail(where, "no metadata");
    for (const k of Object.keys(md))
        if (!["name", "namespace", "labels", "annotations"].includes(k)) fail(where, `metadata.${k} is not something tessera should set`);
    if (typeof md.name !== "string" || md.name.length > 63 || !DNS_LABEL.test(md.name))
        fail(where, `metadata.name '${md.name}' is not a DNS-1123 label`);
    if (md.namespace !== undefined) {
        if (!namespaced) fail(where, "metadata.namespace on a cluster-scoped kind");
        if (typeof md.namespace !== "string" || md.namespace.length > 63 || !DNS_LABEL.test(md.namespace))
            fail(where, `metadata.namespace '${md.namespace}' is not a DNS-1123 label`);
    }
    for (const [k, v] of Object.entries(md.labels ?? {})) {
        const slash = k.lastIndexOf("/"), prefix = slash < 0 ? null : k.slice(0, slash), name = k.slice(slash + 1);
        if ((prefix !== null && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) || name.length > 63 || !LABEL_NAME.test(name))
            fail(where, `label key '${k}' is not a qualified name`);
        if (typeof v !== "string" || v.length > 63 || !LABEL_VALUE.test(v)) fail(where, `label ${k}: value '${v}' is not a label value`);
    }
}

// A Kubernetes quantity as a number, or NaN.
function quantity(q) {
    if (typeof q === "number") return Number.isInteger(q) ? q : NaN;
    if (typeof q !== "string" || !QUANTITY.test(q)) return NaN;
    const m = q.match(/^([+-]?[0-9.]+)(.*)$/);
    const mult = { "": 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
                   Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
    if (m[2] in mult) return Number(m[1]) * mult[m[2]];
    return Number(q);                                   // decimal exponent: 1e3
}

function checkQuotas(where, obj) {
    for (const [g, rg] of (obj.spec?.resourceGroups ?? []).entries())
        for (const f of rg.flavors ?? [])
            for (const r of f.resources ?? [])
                for (const k of ["nominalQuota", "borrowingLimit", "lendingLimit"]) {
                    if (r[k] === undefined) continue;
                    const v = quantity(r[k]);
                    const at = `resourceGroups[${g}] flavor ${f.name} ${r.name}.${k}`;
                    if (!Number.isFinite(v) || v < 0) fail(where, `${at} '${r[k]}' is not a non-negative quantity`);
                    else if (r.name.includes("/") && !Number.isInteger(v)) fail(where, `${at} '${r[k]}' is not whole: ${r.name} is counted in units`);
                }
}

const text = fs.readFileSync(file, "utf8");
const docs = YAML.parseAllDocuments(text);
const objs = [];
docs.forEach((d, i) => {
    const where0 = `${label}: document ${i + 1}`;
    if (d.errors.length) return fail(where0, `YAML: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o === null || o === undefined) return;
    const where = `${where0} (${o.kind} ${o.metadata?.name})`;
    if (typeof o.apiVersion !== "string" || typeof o.kind !== "string") return fail(where, "no apiVersion or kind");
    const v = versionOf(o.apiVersion, o.kind);
    if (v.err) return fail(where, v.err);
    checkMetadata(where, o.metadata, v.crd.spec.scope === "Namespaced");
    if (!v.validate(o))
        for (const e of v.validate.errors) fail(where, `${e.instancePath || "/"}: ${e.message}${e.params?.additionalProperty ? ` '${e.params.additionalProperty}'` : ""}${e.params?.allowedValues ? ` (${e.params.allowedValues.join(", ")})` : ""}`);
    checkQuotas(where, o);
    objs.push(o);
});

// ---- against the plan ----------------------------------------------------------

const dnsLabel = (s) => s.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
const of = (kind) => objs.filter((o) => o.kind === kind);

function checkKueue(plan) {
    // Free units per flavor: the GPUs the plan leaves idle, by type, on the
    // nodes whose device plugin hands out whole GPUs (none of the node's
    // GPUs runs MPS or time-slicing). The report lists only the GPUs in use,
    // by node name (<pool>-<i>) and index; the rest of a node is idle. The
    // serving pods hold the others, and Kueue does not count them.
    const units = new Map();
    for (const pool of plan.input.pools)
        for (let n = 0; n < pool.nodes; n++) {
            const used = plan.gpus.filter((g) => g.node === `${pool.name}-${n}`);
            if (used.some((g) => ["mps", "timeslice"].includes(g.mode))) continue;
            const idle = pool.gpus_per_node - used.length;
            if (idle > 0) units.set(dnsLabel(pool.gpu), (units.get(dnsLabel(pool.gpu)) ?? 0) + idle);
        }
    for (const f of of("ResourceFlavor"))
        if (!units.has(f.metadata.name)) fail(label, `ResourceFlavor ${f.metadata.name} offers GPUs the plan does not leave free`);
    const flavors = new Set(of("ResourceFlavor").map((f) => f.metadata.name));
    for (const [name, n] of units) if (!flavors.has(name)) fail(label, `the plan leaves ${n} GPUs of flavor ${name} free, but there is no ResourceFlavor ${name}`);
    const tierOf = new Map(plan.input.tenants.map((t) => [dnsLabel(t.name), t.tier]));
    const quota = new Map(), cohort = new Map();
    const cqs = of("ClusterQueue");
    for (const cq of cqs) {
        const ns = cq.spec.namespaceSelector?.matchLabels?.["kubernetes.io/metadata.name"];
        if (!tierOf.has(ns)) fail(label, `ClusterQueue ${cq.metadata.name} admits namespace '${ns}', no tenant's`);
        if (cq.spec.cohortName !== `tessera-${dnsLabel(tierOf.get(ns) ?? "")}`)
            fail(label, `ClusterQueue ${cq.metadata.name}: cohort ${cq.spec.cohortName} is not its tier's`);
        const lq = of("LocalQueue").find((q) => q.metadata.namespace === ns && q.spec.clusterQueue === cq.metadata.name);
        if (!lq) fail(label, `ClusterQueue ${cq.metadata.name} has no LocalQueue in namespace ${ns}`);
        for (const rg of cq.spec.resourceGroups ?? [])
            for (const f of rg.flavors) {
                if (!flavors.has(f.name)) fail(label, `ClusterQueue ${cq.metadata.name} names flavor ${f.name}, which is not emitted`);
                const r = f.resources[0], q = quantity(r.nominalQuota);
                if (r.name !== "nvidia.com/gpu") fail(label, `ClusterQueue ${cq.metadata.name} flavor ${f.name}: quota of ${r.name}, not of free GPUs (nvidia.com/gpu)`);
                quota.set(f.name, (quota.get(f.name) ?? 0) + q);
                const ck = `${cq.spec.cohortName}/${f.name}`;
                cohort.set(ck, (cohort.get(ck) ?? 0) + q);
            }
    }
    for (const [name, n] of units)
        if ((quota.get(name) ?? 0) !== n) fail(label, `flavor ${name}: nominal quotas add up to ${quota.get(name) ?? 0}, the plan leaves ${n} GPUs free`);
    for (const cq of cqs)
        for (const rg of cq.spec.resourceGroups ?? [])
            for (const f of rg.flavors) {
                const r = f.resources[0], total = cohort.get(`${cq.spec.cohortName}/${f.name}`);
                if (quantity(r.borrowingLimit) !== total - quantity(r.nominalQuota))
                    fail(label, `ClusterQueue ${cq.metadata.name} flavor ${f.name}: borrowingLimit ${r.borrowingLimit} is not the cohort's ${total} less its own ${r.nominalQuota}`);
            }
}

function checkGie(plan) {
    const pools = new Map(of("InferencePool").map((p) => [p.metadata.name, p]));
    for (const p of pools.values()) {
        const w = p.spec.selector.matchLabels["tessera.dev/worker"];
        if (!plan.workers.some((x) => x.name === w)) fail(label, `InferencePool ${p.metadata.name} selects worker '${w}', which the plan has not`);
        if (p.spec.selector.matchLabels["app.kubernetes.io/name"] !== "tessera") fail(label, `InferencePool ${p.metadata.name} does not select tessera pods`);
        if (!DNS_1035.test(p.spec.endpointPickerRef.name) || p.spec.endpointPickerRef.name.length > 63)
            fail(label, `InferencePool ${p.metadata.name}: EPP Service name '${p.spec.endpointPickerRef.name}' is not a DNS-1035 label`);
    }
    const bands = new Map(plan.input.tiers.map((t) => [t.name, t.band]));
    const last = Math.max(...bands.values());
    for (const t of plan.tenants) {
        const o = of("InferenceObjective").find((x) => x.metadata.name === dnsLabel(t.name));
        const placed = plan.instances.some((i) => i.worker === t.worker && i.placed);
        if (!placed) {
            if (o) fail(label, `tenant ${t.name} is not served, yet has InferenceObjective ${o.metadata.name}`);
            continue;
        }
        if (!o) { fail(label, `tenant ${t.name} has no InferenceObjective`); continue; }
        if (o.spec.poolRef.name !== `tessera-${t.worker}` || !pools.has(o.spec.poolRef.name))
            fail(label, `InferenceObjective ${o.metadata.name} names pool ${o.spec.poolRef.name}, not its worker's emitted pool tessera-${t.worker}`);
        // The v1.0 EPP sheds priority < 0: best effort (the last band) is -1,
        // the bands above it >= 0 with band 0 highest; a single tier is 0.
        const want = last > 0 ? last - 1 - bands.get(t.tier) : 0;
        if (o.spec.priority !== want)
            fail(label, `InferenceObjective ${o.metadata.name}: priority ${o.spec.priority}, tier ${t.tier} has band ${bands.get(t.tier)} of ${last} (wants ${want})`);
    }
}

if (opt.plan) {
    const plan = JSON.parse(fs.readFileSync(opt.plan, "utf8"));
    if (of("ClusterQueue").length || of("ResourceFlavor").length) checkKueue(plan);
    if (of("InferencePool").length || of("InferenceObjective").length) checkGie(plan);
}
for (const k of (opt.expect ?? "").split(",").filter(Boolean))
    if (!of(k).length) fail(label, `no ${k} among the objects`);

if (errors.length) {
    for (const e of errors) console.error(e);
    process.exit(1);
}
const kinds = {};
for (const o of objs) kinds[o.kind] = (kinds[o.kind] ?? 0) + 1;
console.log(`${label}: ${objs.length} objects valid (${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(", ")})`);
