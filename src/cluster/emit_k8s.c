/* emit_k8s.c - the Kubernetes manifests of a plan; see emit.h. */
#include "emit.h"
#include "emit_int.h"

#include <stdio.h>

#include "strbuf.h"

/* ---- k8s ---------------------------------------------------------------------- */

/* Clients on the node's busiest MPS and time-sliced GPU: the device
 * plugin's replicas are per node, so the busiest GPU sets them. */
static void node_clients(const plan *p, size_t n, int *max_mps, int *max_ts) {
    const plan_node *nd = &p->nodes[n];
    *max_mps = *max_ts = 0;
    for (int k = 0; k < nd->n_gpus; k++) {
        size_t gi = nd->first_gpu + (size_t)k;
        int clients = 0;
        for (size_t s = 0; s < p->n_slices; s++) clients += p->slices[s].gpu == (int)gi;
        if (p->gpus[gi].mode == PLAN_GPU_MPS && clients > *max_mps) *max_mps = clients;
        if (p->gpus[gi].mode == PLAN_GPU_TIMESLICE && clients > *max_ts) *max_ts = clients;
    }
}

static void k8s_device_plugin(const plan *p, strbuf *b) {
    strbuf_printf(b,
              "# tessera plan: Kubernetes manifests.\n"
              "# 1. MIG layouts: --emit mig-parted (GPU Operator: node label nvidia.com/mig.config).\n"
              "# 2. Device plugin: the ConfigMap below has one config per node; select it with the node\n"
              "#    label nvidia.com/device-plugin.config=<node> and MIG strategy mixed, so MIG\n"
              "#    instances appear as nvidia.com/mig-<profile>.\n"
              "# 3. One Deployment (and its tessera.yaml ConfigMap) per worker instance, pinned to its node.\n"
              "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tessera-device-plugin\n"
              "  namespace: nvidia-device-plugin\ndata:\n");
    for (size_t n = 0; n < p->n_nodes; n++) {
        if (!emit_node_used(p, n)) continue;
        int max_mps, max_ts;
        node_clients(p, n, &max_mps, &max_ts);
        int rep = max_mps > max_ts ? max_mps : max_ts;
        strbuf_printf(b, "  %s: |-\n    version: v1\n    flags:\n      migStrategy: mixed\n", p->nodes[n].name);
        if (rep < 2) {
            if (max_mps || max_ts)
                strbuf_printf(b, "    # one worker per shared GPU on this node: nothing to share\n");
            continue;
        }
        strbuf_printf(b, "    sharing:\n      %s:\n        resources:\n          - name: nvidia.com/gpu\n"
                     "            replicas: %d\n", max_mps ? "mps" : "timeSlicing", rep);
        if (max_mps && max_ts)
            strbuf_printf(b, "    # time-sliced GPUs of this node run their best-effort workers as MPS\n"
                         "    # clients: the device plugin shares node-wide, MPS or time-slicing.\n");
    }
}

static void k8s_instance(const plan *p, size_t i, strbuf *b) {
    const plan_inst *in = &p->insts[i];
    const plan_worker *w = &p->workers[in->worker];
    const plan_slice *s = &p->slices[in->slice];
    const plan_gpu *g = emit_inst_gpu(p, in);
    char name[80];
    emit_inst_name(p, i, name, sizeof name);
    strbuf_printf(b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tessera-%s\ndata:\n  tessera.yaml: |\n",
              name);
    emit_serve_yaml(p, i, EMIT_SERVE_PORT, b, "    ");
    strbuf_printf(b, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: tessera-%s\n  labels:\n"
                 "    app.kubernetes.io/name: tessera\n    tessera.dev/worker: %s\nspec:\n  replicas: 1\n"
                 "  selector:\n    matchLabels:\n      tessera.dev/instance: %s\n  template:\n    metadata:\n"
                 "      labels:\n        app.kubernetes.io/name: tessera\n        tessera.dev/instance: %s\n"
                 "    spec:\n      nodeSelector:\n        kubernetes.io/hostname: %s\n      containers:\n"
                 "        - name: tessera\n          image: tessera:latest\n"
                 "          args: [\"serve\", \"--config\", \"/etc/tessera/tessera.yaml\"]\n"
                 "          ports:\n            - containerPort: %d\n",
              name, w->name, name, name, p->nodes[g->node].name, EMIT_SERVE_PORT);
    if (s->mode == PLAN_MODE_MPS) {
        strbuf_printf(b, "          env:\n            - {name: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: \"%.0f\"}\n"
                     "            - {name: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, value: \"0=%.0fM\"}\n"
                     "            - {name: CUDA_MPS_CLIENT_PRIORITY, value: \"%d\"}\n",
                  in->pct, emit_mib_up(in->mem_limit), emit_mps_priority(p, w));
        /* The plugin's daemon gives each client 100/replicas %; a client may
         * only lower it. Say so where the plan wants more. */
        int max_mps, max_ts;
        node_clients(p, (size_t)g->node, &max_mps, &max_ts);
        int rep = max_mps > max_ts ? max_mps : max_ts;
        if (rep >= 2 && in->pct > 100.0 / rep + 1e-9)
            strbuf_printf(b, "          # WARNING: planned %.0f%% of SMs, but the device plugin's MPS daemon caps each\n"
                         "          # client at 100/%d = %.0f%%; run MPS outside the plugin (--emit mps) to get it.\n",
                      in->pct, rep, 100.0 / rep);
    } else if (s->mode == PLAN_MODE_MIG_MPS) {
        strbuf_printf(b, "          # MPS inside this MIG instance needs an nvidia-cuda-mps-control daemon in the\n"
                     "          # pod or on the node (the device plugin shares whole GPUs only); then:\n"
                     "          env:\n            - {name: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, value: \"%.0f\"}\n"
                     "            - {name: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, value: \"0=%.0fM\"}\n",
                  in->pct, emit_mib_up(in->mem_limit));
    }
    if (s->mode == PLAN_MODE_WHOLE) {
        int max_mps, max_ts;
        node_clients(p, (size_t)g->node, &max_mps, &max_ts);
        if ((max_mps > max_ts ? max_mps : max_ts) >= 2)
            strbuf_printf(b, "          # This node shares its GPUs, so nvidia.com/gpu: 1 is one replica of a GPU,\n"
                         "          # not a whole one: give whole-GPU instances a node without sharing.\n");
    }
    strbuf_printf(b, "          resources:\n            limits:\n");
    if (s->mode == PLAN_MODE_MIG || s->mode == PLAN_MODE_MIG_MPS)
        strbuf_printf(b, "              nvidia.com/mig-%s: 1\n", plan_slice_profile(p, s));
    else
        strbuf_printf(b, "              nvidia.com/gpu: 1\n");
    strbuf_printf(b, "          volumeMounts:\n            - {name: config, mountPath: /etc/tessera}\n"
                 "      volumes:\n        - name: config\n          configMap:\n            name: tessera-%s\n",
              name);
}

int emit_k8s(const plan *p, emit_out *out) {
    strbuf b = STRBUF_INIT;
    k8s_device_plugin(p, &b);
    for (size_t i = 0; i < p->n_insts; i++)
        if (emit_inst_gpu(p, &p->insts[i])) k8s_instance(p, i, &b);
    return emit_add_file(out, &b, "k8s.yaml");
}
