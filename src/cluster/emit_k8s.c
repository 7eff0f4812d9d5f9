/*
 * emit_k8s.c - the Kubernetes manifests of a plan; see emit.h.
 *
 * One file, k8s.yaml: the NVIDIA device plugin's per-node configs, the
 * models' volume, and per placed instance a ConfigMap (its tessera.yaml), a
 * Service and a workload pinned to its node.
 *
 * Sharing is decided per node, because the device plugin takes one config
 * per node (selected by the node label nvidia.com/device-plugin.config) and
 * shares every GPU of a resource name alike: it ignores per-device
 * selection in its sharing config, and its MPS replicas are equal, each
 * with 100/replicas % of the SMs and total memory/replicas as its pinned
 * limit. So a node gets
 *   none   nothing shared (at most one instance per GPU): nvidia.com/gpu,
 *          or nvidia.com/mig-<profile> for a MIG instance;
 *   mps    the plugin's MPS, only on a node without MIG GPUs (the plugin
 *          refuses MPS with migStrategy mixed) and only where every shared
 *          instance's planned SM share and memory fit one replica's grant,
 *          so a planned share never exceeds what the plugin gives;
 *   ts     the plugin's time-slicing, for best-effort GPUs, and on a node
 *          with MIG GPUs for its MPS GPUs and MPS-shared GIs too: the plan's
 *          MPS cannot be expressed there, and the manifest says so;
 *   hami   HAMi's vGPU resources (nvidia.com/gpumem, nvidia.com/gpucores)
 *          on a node without MIG whose plan the plugin cannot express:
 *          unequal MPS shares, or whole-GPU instances beside shared GPUs.
 *          The pod carries its planned memory (at most the MiB the driver
 *          reports; a whole GPU asks nvidia.com/gpumem-percentage: 100)
 *          and core share, and HAMi's nvidia.com/use-gpuuuid annotation
 *          for the planned GPU.
 * Workloads: an instance that shares a GPU or GI (mps, mig+mps, timeslice)
 * is a StatefulSet of one, its Service headless as a StatefulSet's must be: the plan binds it to one GPU's share, and a
 * StatefulSet never runs a second pod of the same identity while the first
 * is terminating, where a Deployment's replacement would take a second
 * share of the GPU the plan did not give. A MIG or whole-GPU instance is a
 * Deployment with the Recreate strategy: any free GI of its profile (or any
 * free GPU) on its node is the planned one, mig-parted created exactly the
 * planned counts.
 * Models: one PersistentVolumeClaim mounted read-only at /models in every
 * pod, each model's file by its name. The claim is ReadWriteMany, not
 * ReadOnlyMany: a ReadOnlyMany volume is one nothing can write, so a
 * dynamically provisioned one could never be filled; the pods' mounts keep
 * them from writing. An image volume would tie the
 * weights to an image; it is still off by default in current Kubernetes
 * releases and needs runtime support, while a PVC works on every cluster,
 * keeps one copy of tens of GB per storage backend, and lets a model be
 * replaced without rebuilding anything.
 * Drain: serve stops listening at SIGTERM and finishes its requests within
 * shutdown_grace_s (EMIT_SHUTDOWN_GRACE_S in the tessera.yaml); a preStop
 * pause first gives the endpoints and the gateway time to stop sending new
 * requests, and the grace period covers both, plus a margin.
 */
#include "emit.h"
#include "emit_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strbuf.h"

#define K8S_IMAGE "tessera:latest"      /* what the repository's Dockerfile builds */
#define K8S_UID 10001                   /* the Dockerfile's non-root user */
#define K8S_MODEL_DIR "/models"
#define K8S_PRESTOP_S 5                 /* s: endpoints and gateway stop routing to the pod */
#define K8S_GRACE_S (K8S_PRESTOP_S + EMIT_SHUTDOWN_GRACE_S + 5)
#define K8S_STARTUP_TRIES 120           /* x 5 s: loading a large model from the volume */
/* The engine's compute threads, and the CPUs its pod requests: serve's
 * default (every core of the node) would contend with the node's other
 * pods, and a request below the threads would starve every step. Two, so
 * that a node of 8 GPUs cut into 7 GIs each (56 pods) asks 112 CPUs; the
 * CPU engine runs faster with more (raise threads and cpu together). */
#define K8S_THREADS 2
#define K8S_SWAP_MIB 256                /* MiB: serve's default swap_bytes, which the tessera.yaml keeps */
#define K8S_MARGIN_MIB 512              /* MiB: the runtime, HTTP and per-sequence buffers */

enum { SHARE_NONE = 0, SHARE_MPS, SHARE_TS, SHARE_HAMI };

typedef struct k8s_node {
    int share;                          /* SHARE_* */
    int has_mig;                        /* a MIG GPU: migStrategy mixed */
    int replicas;                       /* of nvidia.com/gpu under mps or ts; < 2 = not shared */
    char why[1024];                     /* why the plan does not run as planned here, "" = it does */
} k8s_node;

/* Append a clause to k->why, "; " between clauses. */
static void why_add(k8s_node *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why_add(k8s_node *k, const char *fmt, ...) {
    size_t len = strlen(k->why);
    if (len && len + 2 < sizeof k->why) len += (size_t)snprintf(k->why + len, sizeof k->why - len, "; ");
    va_list ap;
    va_start(ap, fmt);
    if (len < sizeof k->why) vsnprintf(k->why + len, sizeof k->why - len, fmt, ap);
    va_end(ap);
}

/* Whether node n time-slices MIG profile prof: a GI of it there is shared
 * by MPS clients, which the plugin can only time-slice, and it shares every
 * GI of a profile alike. */
static int profile_time_sliced(const plan *p, size_t n, const char *prof) {
    for (size_t t = 0; t < p->n_slices; t++) {
        const plan_slice *o = &p->slices[t];
        if (o->mode == PLAN_MODE_MIG_MPS && o->n_inst > 1 && o->gpu >= 0 && p->gpus[o->gpu].node == (int)n &&
            strcmp(plan_slice_profile(p, o), prof) == 0)
            return 1;
    }
    return 0;
}

/* The first profile of a static GI on node n that is time-sliced there, or
 * NULL: that GI becomes one replica among the shared one's. */
static const char *ts_static_profile(const plan *p, size_t n) {
    for (size_t s = 0; s < p->n_slices; s++) {
        const plan_slice *sl = &p->slices[s];
        if (sl->mode == PLAN_MODE_MIG && sl->gpu >= 0 && p->gpus[sl->gpu].node == (int)n &&
            profile_time_sliced(p, n, plan_slice_profile(p, sl)))
            return plan_slice_profile(p, sl);
    }
    return NULL;
}

static int shares_gpu(int mode) {
    return mode == PLAN_MODE_MPS || mode == PLAN_MODE_MIG_MPS || mode == PLAN_MODE_TIMESLICE;
}

/* Instances on GPU gi. */
static int gpu_clients(const plan *p, size_t gi) {
    int n = 0;
    for (size_t s = 0; s < p->n_slices; s++)
        if (p->slices[s].gpu == (int)gi) n += p->slices[s].n_inst;
    return n;
}

/* The planned share of instance in, percent of its GPU or GI: SMs for MPS
 * (what its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE asks), time for time-slicing,
 * 100 for a whole GPU. */
static double inst_pct(const plan *p, const plan_inst *in) {
    const plan_slice *s = &p->slices[in->slice];
    if (s->mode == PLAN_MODE_MIG_MPS || s->mode == PLAN_MODE_MPS) return in->pct;
    if (s->mode == PLAN_MODE_TIMESLICE) return s->pct;
    return 100.0;
}

/* MiB of GPU g as the driver reports them: what the device plugin divides
 * among its MPS replicas and what HAMi registers, so no request may exceed
 * it. The catalog's nvidia-smi figure where it has one; else its usable GiB,
 * which for MIG types is the 7g profile's and below the driver's total. */
static double gpu_mib(const plan *p, const plan_gpu *g) {
    const gpucat_gpu *t = p->types[g->type];
    return t->smi_mib > 0 ? t->smi_mib : floor(t->mem_gib * 1024.0);
}

/* The first shared instance of node n that the plugin's MPS grant (replicas
 * equal shares) cannot hold, or -1. */
static long mps_misfit(const plan *p, size_t n, int replicas) {
    for (size_t i = 0; i < p->n_insts; i++) {
        const plan_inst *in = &p->insts[i];
        const plan_gpu *g = emit_inst_gpu(p, in);
        if (!g || g->node != (int)n || !shares_gpu(p->slices[in->slice].mode)) continue;
        if (inst_pct(p, in) > 100 / replicas || emit_mib_up(in->mem_limit) > floor(gpu_mib(p, g) / replicas))
            return (long)i;
    }
    return -1;
}

static void node_share(const plan *p, size_t n, k8s_node *k) {
    const plan_node *nd = &p->nodes[n];
    int max_clients = 0, mps = 0, whole = 0, mig_mps = 0;
    memset(k, 0, sizeof *k);
    for (int j = 0; j < nd->n_gpus; j++) {
        size_t gi = nd->first_gpu + (size_t)j;
        const plan_gpu *g = &p->gpus[gi];
        k->has_mig |= g->mode == PLAN_GPU_MIG;
        whole |= g->mode == PLAN_GPU_WHOLE;
        mps |= g->mode == PLAN_GPU_MPS && gpu_clients(p, gi) > 1;
        if (g->mode == PLAN_GPU_MPS || g->mode == PLAN_GPU_TIMESLICE) {
            int c = gpu_clients(p, gi);
            if (c > max_clients) max_clients = c;
        }
    }
    for (size_t s = 0; s < p->n_slices; s++)
        if (p->slices[s].mode == PLAN_MODE_MIG_MPS && p->slices[s].gpu >= 0 &&
            p->gpus[p->slices[s].gpu].node == (int)n && p->slices[s].n_inst > 1)
            mig_mps = 1;
    k->replicas = max_clients;
    if (k->has_mig) {
        /* No HAMi here: time-slicing is all the plugin offers, and whatever
         * it turns into a replica the operator must hear of. */
        if (max_clients > 1 || mig_mps) k->share = SHARE_TS;
        const char *prof = ts_static_profile(p, n);
        if (mps || mig_mps)
            why_add(k, "the device plugin runs no MPS on a node with MIG GPUs (migStrategy mixed refuses it), so "
                       "this node's MPS clients are time-sliced");
        if (whole && max_clients > 1)
            why_add(k, "the device plugin shares every GPU of a node alike, so this node's whole-GPU instances are "
                       "time-slice replicas of nvidia.com/gpu like its time-sliced GPUs' clients");
        if (prof)
            why_add(k, "the device plugin shares every GI of a profile alike, so this node's static %s GIs are "
                       "time-slice replicas like its MPS-shared %s GI's clients", prof, prof);
        if (k->why[0])
            why_add(k, "time-sliced replicas are not placed by the plan (a pod gets any GPU or GI of its resource "
                       "on the node) and neither their SM share nor their memory is limited. Plan MPS on a "
                       "pool without MIG and whole GPUs and static GIs on nodes that time-slice nothing, or run "
                       "MPS outside the plugin (--emit mps), to get the plan");
        return;
    }
    if (max_clients < 2) return;
    if (whole) {
        k->share = SHARE_HAMI;
        snprintf(k->why, sizeof k->why,
                 "the device plugin shares every GPU of a node alike, and this node has whole-GPU instances "
                 "beside shared GPUs");
        return;
    }
    if (!mps) {
        k->share = SHARE_TS;
        return;
    }
    long bad = mps_misfit(p, n, max_clients);
    if (bad < 0) {
        k->share = SHARE_MPS;
        return;
    }
    const plan_inst *in = &p->insts[bad];
    char name[80];
    emit_inst_name(p, (size_t)bad, name, sizeof name);
    k->share = SHARE_HAMI;
    snprintf(k->why, sizeof k->why,
             "instance %s plans %.0f%% of a GPU and %.0f MiB, but the device plugin's MPS gives each of its %d "
             "replicas %d%% and %.0f MiB",
             name, inst_pct(p, in), emit_mib_up(in->mem_limit), max_clients, 100 / max_clients,
             floor(gpu_mib(p, emit_inst_gpu(p, in)) / max_clients));
}

/* ---- the device plugin's configs ---------------------------------------------- */

/* Time-sliced MIG profiles of node n: each GI shared by MPS clients becomes
 * replicas of its profile's resource (the plugin has no MPS on MIG). */
static void ts_mig_resources(const plan *p, size_t n, strbuf *b) {
    for (size_t s = 0; s < p->n_slices; s++) {
        const plan_slice *sl = &p->slices[s];
        if (sl->mode != PLAN_MODE_MIG_MPS || sl->gpu < 0 || p->gpus[sl->gpu].node != (int)n || sl->n_inst < 2)
            continue;
        const char *prof = plan_slice_profile(p, sl);
        int first = 1, most = 0;
        for (size_t t = 0; t < p->n_slices; t++) {
            const plan_slice *o = &p->slices[t];
            if (o->mode != PLAN_MODE_MIG_MPS || o->gpu < 0 || p->gpus[o->gpu].node != (int)n ||
                strcmp(plan_slice_profile(p, o), prof) != 0)
                continue;
            if (t < s && o->n_inst > 1) first = 0;
            if (o->n_inst > most) most = o->n_inst;
        }
        if (first)
            strbuf_printf(b, "          - name: nvidia.com/mig-%s\n            replicas: %d\n", prof, most);
    }
}

static void plugin_config(const plan *p, size_t n, const k8s_node *k, strbuf *b) {
    strbuf_printf(b, "  %s: |-\n    version: v1\n    flags:\n      migStrategy: %s\n", p->nodes[n].name,
                  k->has_mig ? "mixed" : "none");
    if (k->share == SHARE_MPS) {
        strbuf_printf(b, "    sharing:\n      mps:\n        resources:\n          - name: nvidia.com/gpu\n"
                         "            replicas: %d\n", k->replicas);
    } else if (k->share == SHARE_TS) {
        strbuf_printf(b, "    sharing:\n      timeSlicing:\n        resources:\n");
        if (k->replicas > 1)
            strbuf_printf(b, "          - name: nvidia.com/gpu\n            replicas: %d\n", k->replicas);
        ts_mig_resources(p, n, b);
    }
}

/* text as YAML comment lines of at most ~96 columns, each line led by lead
 * (the first) or by "#   " (the rest). */
static void comment_wrapped(strbuf *b, const char *lead, const char *text) {
    const char *t = text;
    int first = 1;
    while (*t) {
        size_t room = 92, n = strlen(t);
        if (n > room) {
            n = room;
            while (n > 0 && t[n] != ' ') n--;
            if (n == 0) n = room;
        }
        strbuf_printf(b, "%s%.*s\n", first ? lead : "#   ", (int)n, t);
        t += n;
        while (*t == ' ') t++;
        first = 0;
    }
}

static void k8s_header(const plan *p, const k8s_node *nodes, strbuf *b) {
    strbuf_printf(b,
                  "# tessera plan: Kubernetes manifests (emit_k8s.c explains each choice).\n"
                  "# 1. Image: docker build -t tessera:latest . (the repository's Dockerfile); push it and\n"
                  "#    set the image below to its registry path.\n"
                  "# 2. MIG layouts: --emit mig-parted (GPU Operator: node label nvidia.com/mig.config).\n"
                  "# 3. Device plugin: install it with config.name=tessera-device-plugin and\n"
                  "#    config.default=default, and label each node nvidia.com/device-plugin.config=<node name>;\n"
                  "#    the ConfigMap has one config per node and a default for unlabelled GPU nodes.\n"
                  "# 4. Models: fill the tessera-models volume (ReadWriteMany) with each model's GGUF file\n"
                  "#    under its name, e.g. by kubectl cp through a one-off pod that mounts it.\n"
                  "# 5. Per instance: a ConfigMap (its tessera.yaml), a Service, and a StatefulSet (shares a\n"
                  "#    GPU; its Service headless) or Deployment (a MIG instance or whole GPU), pinned to its\n"
                  "#    node.\n");
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!emit_node_used(p, n)) continue;
        const k8s_node *k = &nodes[n];
        char text[sizeof k->why + 400];
        if (k->share == SHARE_HAMI)
            snprintf(text, sizeof text,
                     "node %s: HAMi resources (nvidia.com/gpumem, nvidia.com/gpucores) instead of the NVIDIA "
                     "device plugin's: %s. Install HAMi, label the node gpu=on (and "
                     "nvidia.com/gpu.deploy.device-plugin=false under the GPU Operator), and replace the "
                     "GPU-UUID-... annotations with the UUIDs nvidia-smi -L prints.",
                     p->nodes[n].name, k->why);
        else if (k->why[0])
            snprintf(text, sizeof text, "node %s: %s.", p->nodes[n].name, k->why);
        else
            continue;
        comment_wrapped(b, "# NOTE ", text);
    }
}

/* One config per planned node, and a "default" for every other GPU node:
 * the plugin's config-manager takes the config its node label names, else
 * the one named "default", and fails on an unlabelled node when there is
 * none. Node names are "<pool>-<k>", so none is "default". */
static void k8s_device_plugin(const plan *p, const k8s_node *nodes, strbuf *b) {
    strbuf_printf(b, "# The NVIDIA device plugin's configs: one per node the plan uses, selected by the node label\n"
                     "# nvidia.com/device-plugin.config=<node name>, and \"default\" (whole GPUs, nothing shared)\n"
                     "# for GPU nodes without the label, which the plugin would otherwise fail on.\n"
                     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tessera-device-plugin\n"
                     "  namespace: nvidia-device-plugin\ndata:\n"
                     "  default: |-\n    version: v1\n    flags:\n      migStrategy: none\n");
    for (size_t n = 0; n < p->n_nodes; n++)
        if (emit_node_used(p, n) && nodes[n].share != SHARE_HAMI) plugin_config(p, n, &nodes[n], b);
}

/* The models' volume: every model a placed instance serves, with a tenth
 * spare for the GGUF metadata and a model's next version. */
static void k8s_models_pvc(const plan *p, strbuf *b) {
    double bytes = 0;
    for (size_t m = 0; m < p->in->n_models; m++) {
        int used = 0;
        for (size_t i = 0; i < p->n_insts && !used; i++)
            used = emit_inst_gpu(p, &p->insts[i]) && p->workers[p->insts[i].worker].model == (int)m;
        const perf_model *pm = &p->in->models[m].m;
        if (used) bytes += pm->params * pm->weight_bytes;
    }
    double gib = ceil(bytes * 1.1 / (1024.0 * MIB));
    strbuf_printf(b,
                  "---\n# The models' files, which every instance mounts read-only at /models. ReadWriteMany, so\n"
                  "# that a one-off pod can fill it (kubectl cp; README.md, \"Deploying on Kubernetes\", step 4)\n"
                  "# while the instances read it: set storageClassName to a class that offers RWX (NFS,\n"
                  "# CephFS, AWS EFS, GCP Filestore, Azure Files), or bind a pre-provisioned PV holding them.\n"
                  "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: tessera-models\n"
                  "spec:\n  accessModes: [ReadWriteMany]\n  resources:\n    requests:\n      storage: %.0fGi\n",
                  gib < 1 ? 1 : gib);
}

/* ---- one instance ------------------------------------------------------------- */

static void k8s_labels(const char *w, const char *name, const char *indent, strbuf *b) {
    strbuf_printf(b, "%sapp.kubernetes.io/name: tessera\n%stessera.dev/worker: %s\n%stessera.dev/instance: %s\n",
                  indent, indent, w, indent, name);
}

/* The instance's Service. Headless (clusterIP: None) for a StatefulSet,
 * which names it as its governing Service: its DNS name then resolves to
 * the one pod while it is ready, so clients reach it by the same name and
 * port as a Deployment's ClusterIP Service. Nothing needs a virtual IP:
 * the gateway's InferencePool selects the pods themselves. */
static void k8s_service(const char *w, const char *name, int headless, strbuf *b) {
    strbuf_printf(b, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: tessera-%s\n  labels:\n", name);
    k8s_labels(w, name, "    ", b);
    strbuf_printf(b, "spec:\n%s  selector:\n    tessera.dev/instance: %s\n  ports:\n"
                     "    - {name: http, port: %d, targetPort: http}\n",
                  headless ? "  clusterIP: None\n" : "", name, EMIT_SERVE_PORT);
}

/* MPS env of a client of the plugin's daemon: the planned share, below the
 * replica's grant (a client may lower its own limits); the pinned limit
 * names device 0, the only one the daemon shows its clients. */
static void mps_env(const plan *p, const plan_inst *in, strbuf *b) {
    strbuf_printf(b, "          env:\n            - {name: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: \"%.0f\"}\n"
                     "            - {name: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, value: \"0=%.0fM\"}\n"
                     "            - {name: CUDA_MPS_CLIENT_PRIORITY, value: \"%d\"}\n",
                  in->pct, emit_mib_up(in->mem_limit), emit_mps_priority(p, &p->workers[in->worker]));
}

/* MiB of host memory instance in needs: the weights (the plan's bytes; it
 * does not know the file's size), the KV pool its tessera.yaml sets, serve's
 * host swap, a tenth more and a margin. The CPU engine holds all of it in
 * host memory; a GPU engine would hold less, and the request stays an upper
 * bound. */
static double pod_mib(const plan *p, const plan_inst *in) {
    const perf_model *pm = &p->in->models[p->workers[in->worker].model].m;
    double need = emit_mib_up(perf_weight_bytes(pm)) + emit_mib_up(in->est.kv_bytes);
    return ceil(need * 1.1) + K8S_SWAP_MIB + K8S_MARGIN_MIB;
}

/* CPU and memory, requested so that the pod is not BestEffort (the first
 * evicted), with the memory limit equal to the request: an instance that
 * outgrows its sum is killed and restarted rather than squeezing the node's
 * other pods. No CPU limit: the CFS quota would stall steps. */
static void k8s_requests(const plan *p, const plan_inst *in, strbuf *b) {
    strbuf_printf(b,
                  "          # memory = (weights + KV pool) x 1.1 + host swap %d MiB + %d MiB; cpu = the engine's"
                  " threads.\n"
                  "          resources:\n            requests:\n              cpu: \"%d\"\n"
                  "              memory: %.0fMi\n",
                  K8S_SWAP_MIB, K8S_MARGIN_MIB, K8S_THREADS, pod_mib(p, in));
}

static void k8s_gpu(const plan *p, const plan_inst *in, const k8s_node *k, strbuf *b) {
    const plan_slice *s = &p->slices[in->slice];
    const plan_gpu *g = emit_inst_gpu(p, in);
    int mig = s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS;
    if (k->share == SHARE_HAMI) {
        strbuf_printf(b, "          # HAMi: the planned memory and share of GPU %d, not a device plugin replica.\n",
                      g->index);
    } else if (k->share == SHARE_MPS && s->mode == PLAN_MODE_MPS) {
        strbuf_printf(b, "          # The plugin's MPS replica gives %d%% and %.0f MiB; the env lowers it to the"
                         " plan.\n",
                      100 / k->replicas, floor(gpu_mib(p, g) / k->replicas));
        mps_env(p, in, b);
    } else if (k->share == SHARE_MPS && s->mode == PLAN_MODE_TIMESLICE) {
        strbuf_printf(b, "          # Best effort as an MPS client: the plugin shares this node by MPS only.\n");
    } else if (k->share == SHARE_TS && (s->mode == PLAN_MODE_MPS || s->mode == PLAN_MODE_MIG_MPS) &&
               (s->mode == PLAN_MODE_MIG_MPS ? s->n_inst > 1 : k->replicas > 1)) {
        strbuf_printf(b, "          # Planned as an MPS client (%.0f%%, %.0f MiB); time-sliced here (see the NOTE"
                         " above).\n",
                      inst_pct(p, in), emit_mib_up(in->mem_limit));
    }
    if (s->mode == PLAN_MODE_WHOLE && k->share != SHARE_HAMI && k->replicas > 1)
        strbuf_printf(b, "          # This node shares its GPUs: nvidia.com/gpu: 1 is a replica, not a whole GPU.\n");
    if (s->mode == PLAN_MODE_MIG && k->share == SHARE_TS &&
        profile_time_sliced(p, (size_t)g->node, plan_slice_profile(p, s)))
        strbuf_printf(b, "          # Its profile is time-sliced on this node: this is a replica of a GI.\n");
    k8s_requests(p, in, b);
    strbuf_printf(b, "            limits:\n              memory: %.0fMi\n", pod_mib(p, in));
    if (mig) {
        strbuf_printf(b, "              nvidia.com/mig-%s: 1\n", plan_slice_profile(p, s));
    } else if (k->share == SHARE_HAMI && s->mode == PLAN_MODE_WHOLE) {
        /* All of it by percentage: a MiB figure from the catalog can exceed
         * what HAMi registered for the card, and the pod would stay Pending. */
        strbuf_printf(b, "              nvidia.com/gpu: 1\n              nvidia.com/gpumem-percentage: 100\n"
                         "              nvidia.com/gpucores: 100\n");
    } else if (k->share == SHARE_HAMI) {
        strbuf_printf(b, "              nvidia.com/gpu: 1\n              nvidia.com/gpumem: %.0f\n"
                         "              nvidia.com/gpucores: %.0f\n",
                      fmin(emit_mib_up(in->mem_limit), gpu_mib(p, g)), ceil(inst_pct(p, in)));
    } else {
        strbuf_printf(b, "              nvidia.com/gpu: 1\n");
    }
}

/* Probes answer from the HTTP threads, but a busy node can delay one: each
 * waits K8S_PROBE_TIMEOUT_S and counts only after K8S_PROBE_MISSES misses
 * in a row, so one late answer neither drops a pod from its endpoints
 * (readiness, 15 s to notice) nor restarts it (liveness, 30 s). Draining is
 * seen within 15 s, inside the preStop pause plus serve's grace. Startup
 * allows K8S_STARTUP_TRIES x 5 s for loading before liveness takes over. */
#define K8S_PROBE_TIMEOUT_S 3
#define K8S_PROBE_MISSES 3

static void k8s_probes(strbuf *b) {
    strbuf_printf(b,
                  "          startupProbe:\n            httpGet: {path: /health/live, port: http}\n"
                  "            periodSeconds: 5\n            timeoutSeconds: %d\n            failureThreshold: %d\n"
                  "          livenessProbe:\n            httpGet: {path: /health/live, port: http}\n"
                  "            periodSeconds: 10\n            timeoutSeconds: %d\n            failureThreshold: %d\n"
                  "          readinessProbe:\n            httpGet: {path: /health/ready, port: http}\n"
                  "            periodSeconds: 5\n            timeoutSeconds: %d\n            failureThreshold: %d\n"
                  "          lifecycle:\n            preStop:\n              exec:\n"
                  "                command: [\"sleep\", \"%d\"]\n",
                  K8S_PROBE_TIMEOUT_S, K8S_STARTUP_TRIES, K8S_PROBE_TIMEOUT_S, K8S_PROBE_MISSES, K8S_PROBE_TIMEOUT_S,
                  K8S_PROBE_MISSES, K8S_PRESTOP_S);
}

static void k8s_workload(const plan *p, size_t i, const k8s_node *k, const char *name, strbuf *b) {
    const plan_inst *in = &p->insts[i];
    const plan_worker *w = &p->workers[in->worker];
    const plan_slice *s = &p->slices[in->slice];
    const plan_gpu *g = emit_inst_gpu(p, in);
    int sts = shares_gpu(s->mode);
    strbuf_printf(b, "---\napiVersion: apps/v1\nkind: %s\nmetadata:\n  name: tessera-%s\n  labels:\n",
                  sts ? "StatefulSet" : "Deployment", name);
    k8s_labels(w->name, name, "    ", b);
    strbuf_printf(b, "spec:\n  replicas: 1\n");
    if (sts) strbuf_printf(b, "  serviceName: tessera-%s\n", name);
    else strbuf_printf(b, "  strategy:\n    type: Recreate\n");
    strbuf_printf(b, "  selector:\n    matchLabels:\n      tessera.dev/instance: %s\n  template:\n    metadata:\n"
                     "      labels:\n", name);
    k8s_labels(w->name, name, "        ", b);
    if (k->share == SHARE_HAMI)
        strbuf_printf(b, "      annotations:\n        nvidia.com/use-gpuuuid: GPU-UUID-%s-gpu%d\n",
                      p->nodes[g->node].name, g->index);
    strbuf_printf(b,
                  "    spec:\n      nodeSelector:\n        kubernetes.io/hostname: %s\n"
                  "      terminationGracePeriodSeconds: %d\n"
                  "      securityContext:\n        runAsNonRoot: true\n        runAsUser: %d\n        runAsGroup: %d\n"
                  "        seccompProfile: {type: RuntimeDefault}\n"
                  "      containers:\n        - name: tessera\n          image: %s\n"
                  "          imagePullPolicy: IfNotPresent\n"
                  "          args: [\"serve\", \"--config\", \"/etc/tessera/tessera.yaml\"]\n"
                  "          ports:\n            - {name: http, containerPort: %d}\n",
                  p->nodes[g->node].name, K8S_GRACE_S, K8S_UID, K8S_UID, K8S_IMAGE, EMIT_SERVE_PORT);
    k8s_probes(b);
    strbuf_printf(b, "          securityContext:\n            allowPrivilegeEscalation: false\n"
                     "            capabilities: {drop: [ALL]}\n");
    k8s_gpu(p, in, k, b);
    strbuf_printf(b,
                  "          volumeMounts:\n            - {name: config, mountPath: /etc/tessera, readOnly: true}\n"
                  "            - {name: models, mountPath: %s, readOnly: true}\n"
                  "      volumes:\n        - name: config\n          configMap:\n            name: tessera-%s\n"
                  "        - name: models\n          persistentVolumeClaim:\n            claimName: tessera-models\n"
                  "            readOnly: true\n",
                  K8S_MODEL_DIR, name);
}

static void k8s_instance(const plan *p, size_t i, const k8s_node *nodes, strbuf *b) {
    const plan_inst *in = &p->insts[i];
    const plan_worker *w = &p->workers[in->worker];
    const plan_gpu *g = emit_inst_gpu(p, in);
    char name[80];
    emit_inst_name(p, i, name, sizeof name);
    strbuf_printf(b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tessera-%s\n  labels:\n", name);
    k8s_labels(w->name, name, "    ", b);
    strbuf_printf(b, "data:\n  tessera.yaml: |\n");
    emit_serve_yaml(p, i, EMIT_SERVE_PORT, K8S_MODEL_DIR, 1, K8S_THREADS, b, "    ");
    k8s_service(w->name, name, shares_gpu(p->slices[in->slice].mode), b);
    k8s_workload(p, i, &nodes[g->node], name, b);
}

int emit_k8s_notes(const plan *p, FILE *f) {
    k8s_node k;
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!emit_node_used(p, n)) continue;
        node_share(p, n, &k);
        if (!k.why[0]) continue;
        if (fprintf(f, "plan: NOTE node %s: %s%s\n", p->nodes[n].name,
                    k.share == SHARE_HAMI ? "HAMi resources instead of the NVIDIA device plugin's: " : "", k.why) < 0)
            return TS_ERR_IO;
    }
    return 0;
}

int emit_k8s(const plan *p, emit_out *out) {
    k8s_node *nodes = calloc(p->n_nodes ? p->n_nodes : 1, sizeof *nodes);
    if (!nodes) return TS_ERR_NOMEM;
    for (size_t n = 0; n < p->n_nodes; n++) node_share(p, n, &nodes[n]);
    strbuf b = STRBUF_INIT;
    k8s_header(p, nodes, &b);
    k8s_device_plugin(p, nodes, &b);
    k8s_models_pvc(p, &b);
    for (size_t i = 0; i < p->n_insts; i++)
        if (emit_inst_gpu(p, &p->insts[i])) k8s_instance(p, i, nodes, &b);
    free(nodes);
    return emit_add_file(out, &b, "k8s.yaml");
}
