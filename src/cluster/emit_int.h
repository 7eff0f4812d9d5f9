/*
 * emit_int.h - what the emitters (emit.c, emit_k8s.c, emit_gie.c,
 * emit_kueue.c) share: their views of the plan and the file list they
 * render into. Internal to src/cluster.
 */
#ifndef TS_EMIT_INT_H
#define TS_EMIT_INT_H

#include <math.h>
#include <stddef.h>

#include "emit.h"
#include "plan.h"
#include "strbuf.h"

#define MIB 1048576.0
#define EMIT_SERVE_PORT 8080        /* first port of a node's workers; k8s pods all use it */
/* s: serve's drain on SIGTERM in every emitted tessera.yaml. Long enough
 * for a streamed answer of a few hundred tokens to finish; k8s waits this
 * plus its preStop pause before it kills the pod. */
#define EMIT_SHUTDOWN_GRACE_S 30

/* Move the builder's text into a new file of out, named by fmt; b is
 * consumed either way. Returns 0 or TS_ERR_NOMEM. */
int emit_add_file(emit_out *out, strbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The GPU instance in runs on, or NULL for an unplaced instance. */
const plan_gpu *emit_inst_gpu(const plan *p, const plan_inst *in);

/* "3g.40gb@4", "mps 45%", "timeslice 20%", "whole GPU". */
void emit_slice_desc(const plan *p, const plan_inst *in, char *buf, size_t cap);

/* MPS client priority from the tier's band: 0 normal, 1 below normal [S]. */
int emit_mps_priority(const plan *p, const plan_worker *w);

/* Whether node n has a GPU the plan uses. */
int emit_node_used(const plan *p, size_t n);

/* tessera.yaml of instance i listening on port, each line prefixed by
 * indent (k8s nests it in a ConfigMap). The model's path is the input's,
 * or with model_dir non-NULL the file's name under model_dir. pool_public:
 * /metrics answers the model-server gauges without a key (the GIE endpoint
 * picker scrapes so). threads: the engine's compute threads, 0 = serve's
 * default (all cores; k8s sets what its pod requests). */
void emit_serve_yaml(const plan *p, size_t i, int port, const char *model_dir, int pool_public, int threads,
                     strbuf *b, const char *indent);

static inline double emit_mib_up(double bytes) { return ceil(bytes / MIB); }

/* The lowest band (largest number) of the input's tiers: best effort. */
static inline int emit_last_band(const plan_input *in) {
    int b = 0;
    for (size_t k = 0; k < in->n_tiers; k++)
        if (in->tiers[k].band > b) b = in->tiers[k].band;
    return b;
}

int emit_k8s(const plan *p, emit_out *out);

/* ---- Kubernetes names (emit_gie.c) ---- */

#define EMIT_EPP_PORT 9002          /* the endpoint picker's ext-proc port: GIE's default */

typedef char emit_label[PLAN_NAME_MAX];     /* a DNS-1123 label made from a plan name */

/* The DNS-1123 label of each of the n names (plan_dns_label) into *labels,
 * allocated here (the caller frees it). what names them in messages
 * ("tenant", "tier"). Returns 0; TS_ERR_INVAL with out->why set when a name
 * has no letter or digit or two names give one label (the refusal names
 * both); TS_ERR_NOMEM. */
int emit_labels(const char *what, const char *const *names, size_t n, emit_label **labels, emit_out *out);

/* The tenants' labels (emit_labels over the input's tenant names). */
int emit_tenant_labels(const plan *p, emit_label **labels, emit_out *out);

/* Whether worker w has an instance placed on a GPU: only those get pods. */
int emit_worker_placed(const plan *p, const plan_worker *w);

int emit_gie(const plan *p, emit_out *out);
int emit_kueue(const plan *p, emit_out *out);

#endif
