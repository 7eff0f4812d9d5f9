/*
 * emit.h - turning a plan into what applies it: the report (table, json)
 * and the configurations for nvidia-smi, nvidia-mig-parted, MPS,
 * Kubernetes and `tessera serve`.
 *
 * Every emitter renders into memory as a list of files with relative paths
 * (one file for table, json, mig-parted and k8s; one per node for
 * nvidia-smi; one per instance and per node for mps; one per instance for
 * serve), so the caller either writes them under a folder (--out DIR) or
 * prints them one after the other. Output is deterministic: the same plan
 * gives the same bytes (no timestamps, no hash-order iteration), which is
 * what the golden-file tests rely on.
 *
 * What the configurations assume, where NVIDIA documents nothing firmer:
 *   nvidia-smi  `-cgi` lists are in the creation order mig_place() found, so
 *               first-fit lands the planned slots on an emptied GPU; the
 *               script destroys existing instances first (CIs, then GIs).
 *   mps         one control daemon per MPS GPU or GI, started with its
 *               CUDA_VISIBLE_DEVICES; its clients see that device as ordinal
 *               0, so they set no CUDA_VISIBLE_DEVICES of their own (the
 *               physical index would name a device the daemon lacks) and
 *               the pinned limit, the instance's planned mem_limit, is
 *               written "0=<MiB>M"; MIG instances are named by a
 *               placeholder to replace with the UUID `nvidia-smi -L`
 *               prints; CUDA_MPS_CLIENT_PRIORITY 0 (normal) for band 0 and 1
 *               (below normal) otherwise [S].
 *   k8s         NVIDIA's device plugin shares per node and equally: MPS
 *               only on nodes without MIG GPUs and only where every planned
 *               share fits the grant of one replica (100/replicas % of SMs,
 *               memory/replicas), time-slicing otherwise on MIG nodes (said
 *               in a NOTE), and HAMi's nvidia.com/gpumem and gpucores where
 *               the plugin cannot express the plan (emit_k8s.c has the
 *               rules). Shared-GPU instances are StatefulSets, MIG and
 *               whole-GPU ones Deployments; models come from one
 *               ReadWriteMany PVC mounted read-only at /models.
 *   gie         an InferencePool per worker selecting the pods --emit k8s
 *               labels, its endpoint picker behind the Service the GIE Helm
 *               chart names for release tessera-<worker>, and an
 *               InferenceObjective per tenant with the tier as priority
 *               (best effort -1); see emit_gie.c.
 *   kueue       a ResourceFlavor per GPU type the plan leaves GPUs free of
 *               (Kueue does not count the serving pods), a ClusterQueue per
 *               tenant with its plan share of the free GPUs as quota, a
 *               cohort per tier and a LocalQueue in the tenant's namespace
 *               (never default or kube-*); see emit_kueue.c.
 *               Tenant names become DNS-1123 labels (lower case, '-' for
 *               the rest); two tenants that would share one are refused.
 *   serve       one tessera.yaml per instance in serve's schema (config.h):
 *               KV pool, max_seqs and price_per_hour (where the pool is
 *               priced) from the plan; tenants without a
 *               key_sha256 in the input get a placeholder that serve
 *               rejects, so a config without real keys cannot start.
 * The json report carries, beside its rounded figures for people, the
 * input the plan came from and its workers and slices unrounded, so that
 * planjson.h rebuilds the same plan from it.
 * Nothing here decides anything: it reads the plan and formats.
 */
#ifndef TS_EMIT_H
#define TS_EMIT_H

#include <stddef.h>
#include <stdio.h>

#include "plan.h"

enum {
    EMIT_TABLE = 0,
    EMIT_JSON,
    EMIT_NVIDIA_SMI,
    EMIT_MIG_PARTED,
    EMIT_MPS,
    EMIT_K8S,
    EMIT_SERVE,
    EMIT_GIE,
    EMIT_KUEUE,
    EMIT_KINDS
};

typedef struct emit_file {
    char path[256];                 /* relative: "serve/acme-llama.yaml" */
    char *data;                     /* owned, NUL-terminated */
    size_t len;                     /* bytes, without the NUL */
} emit_file;

typedef struct emit_out {
    emit_file *files;               /* owned */
    size_t n;
    char why[256];                  /* on TS_ERR_INVAL: what the plan cannot be
                                     * emitted as ("tenants 'A' and 'a' both ...") */
} emit_out;

/* The kind named name ("table", "json", "nvidia-smi", "mig-parted", "mps",
 * "k8s", "serve", "gie", "kueue"), or -1; and the name of a kind. */
int emit_kind_parse(const char *name);
const char *emit_kind_name(int kind);

/* Render p as kind into *out (emit_out_free releases it). Returns 0,
 * TS_ERR_INVAL or TS_ERR_NOMEM; on failure *out has no files, and for
 * TS_ERR_INVAL out->why says what was refused. */
int emit_run(const plan *p, int kind, emit_out *out);
void emit_out_free(emit_out *out);

/* Print every file to f; when there is more than one, each starts with a
 * "# ==> path <==" line. */
int emit_print(const emit_out *out, FILE *f);

/* Print to f, one "plan: NOTE node ...: ..." line each, the nodes whose
 * k8s manifests do not run the plan as planned by NVIDIA's device plugin
 * (HAMi nodes, MPS time-sliced on MIG nodes): what the k8s.yaml header
 * says, for the operator who reads only the command's messages. Returns
 * 0, TS_ERR_NOMEM or TS_ERR_IO. */
int emit_k8s_notes(const plan *p, FILE *f);

/* The name of instance i: its worker's, with "-r<k>" when the worker has
 * several replicas. */
void emit_inst_name(const plan *p, size_t i, char *buf, size_t cap);

#endif
