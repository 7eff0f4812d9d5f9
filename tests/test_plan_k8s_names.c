/* test_plan_k8s_names.c - the Kubernetes names of --emit gie and --emit
 * kueue (src/cluster/emit_gie.c, emit_kueue.c): plan_dns_label's rule,
 * tenant and tier names that become distinct labels are emitted under
 * them, and names that clash (or have no letter or digit) are refused with
 * TS_ERR_INVAL, no files and a message naming both. The objects themselves
 * are checked against the CRDs by tests/gie_kueue.sh and byte for byte by
 * test_plan_emit's goldens.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/emit.h"
#include "cluster/plan.h"
#include "cluster/planio.h"
#include "err.h"

#define PATH_LEN 4096

/* rel: a path under the repository root. */
static void src_path(char *buf, size_t cap, const char *rel) {
    const char *env = getenv("TS_SRC"), *f = __FILE__, *end = strstr(f, "tests/test_plan_k8s_names.c");
    if (f[0] == '/' && end) snprintf(buf, cap, "%.*s%s", (int)(end - f), f, rel);
    else snprintf(buf, cap, "%s/%s", env ? env : ".", rel);
}

typedef struct fixture {
    plan_input in;
    plan p;
} fixture;

/* mixed.yaml planned, with tenant t (if t >= 0) renamed to tenant_name and
 * tier k (if k >= 0) to tier_name: names only reach the emitters, so the
 * plan is the same. */
static void load_from(fixture *fx, const char *rel, int t, const char *tenant_name, int k, const char *tier_name) {
    char path[PATH_LEN], err[512];
    src_path(path, sizeof path, rel);
    if (planio_load(path, &fx->in, err, sizeof err)) fail_msg("%s: %s", path, err);
    assert_int_equal(plan_build(&fx->in, &fx->p), 0);
    if (t >= 0) snprintf(fx->in.tenants[t].name, sizeof fx->in.tenants[t].name, "%s", tenant_name);
    if (k >= 0) snprintf(fx->in.tiers[k].name, sizeof fx->in.tiers[k].name, "%s", tier_name);
}

static void load(fixture *fx, int t, const char *tenant_name, int k, const char *tier_name) {
    load_from(fx, "tests/golden/plan/mixed.yaml", t, tenant_name, k, tier_name);
}

static void unload(fixture *fx) {
    plan_free(&fx->p);
    plan_input_free(&fx->in);
}

static int tenant_index(const fixture *fx, const char *name) {
    for (size_t t = 0; t < fx->in.n_tenants; t++)
        if (!strcmp(fx->in.tenants[t].name, name)) return (int)t;
    fail_msg("mixed.yaml has no tenant %s", name);
    return -1;
}

static void test_dns_label(void **st) {
    (void)st;
    static const char *const cases[][2] = {
        {"Acme.Corp_EU", "acme-corp-eu"}, {"shop", "shop"}, {"--a..b__", "a-b"},
        {"GOLD", "gold"}, {"x9", "x9"}, {"a_-_b", "a-b"},
    };
    char out[PLAN_NAME_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_dns_label(out, sizeof out, cases[i][0]);
        assert_string_equal(out, cases[i][1]);
    }
    /* Cut to the buffer, still without a trailing '-'. */
    plan_dns_label(out, 6, "abcd-efgh");
    assert_string_equal(out, "abcd");
}

/* emit_run of kind must refuse, with no files and a why holding want. */
static void refused(const fixture *fx, int kind, const char *want) {
    emit_out out;
    assert_int_equal(emit_run(&fx->p, kind, &out), TS_ERR_INVAL);
    assert_int_equal(out.n, 0);
    assert_null(out.files);
    if (!strstr(out.why, want)) fail_msg("--emit %s: '%s' does not say '%s'", emit_kind_name(kind), out.why, want);
}

/* emit_run of kind must succeed, one of its files holding want. */
static void emitted(const fixture *fx, int kind, const char *want) {
    emit_out out;
    assert_int_equal(emit_run(&fx->p, kind, &out), 0);
    assert_true(out.n >= 1);
    assert_string_equal(out.why, "");
    size_t i = 0;
    while (i < out.n && !strstr(out.files[i].data, want)) i++;
    if (i == out.n) fail_msg("--emit %s has no '%s'", emit_kind_name(kind), want);
    emit_out_free(&out);
}

static void test_distinct_names_sanitised(void **st) {
    (void)st;
    fixture fx;
    load(&fx, -1, NULL, -1, NULL);
    int blog = tenant_index(&fx, "blog");
    unload(&fx);
    load(&fx, blog, "Blog.Corp_EU", 1, "Silver.Tier");
    emitted(&fx, EMIT_GIE, "kind: InferenceObjective\nmetadata:\n  name: blog-corp-eu\n");
    emitted(&fx, EMIT_KUEUE, "  name: tessera-batch\n  namespace: blog-corp-eu\n");
    emitted(&fx, EMIT_KUEUE, "  cohortName: tessera-silver-tier\n");
    unload(&fx);
}

static void test_clashing_names_refused(void **st) {
    (void)st;
    fixture fx;
    load(&fx, -1, NULL, -1, NULL);
    int blog = tenant_index(&fx, "blog");
    unload(&fx);

    load(&fx, blog, "Shop", -1, NULL);
    refused(&fx, EMIT_GIE, "tenants 'shop' and 'Shop' both become 'shop'");
    refused(&fx, EMIT_KUEUE, "tenants 'shop' and 'Shop' both become 'shop'");
    /* The other emitters do not name tenants in Kubernetes: unaffected. */
    emitted(&fx, EMIT_SERVE, "Shop");
    unload(&fx);

    load(&fx, blog, "._.", -1, NULL);
    refused(&fx, EMIT_GIE, "tenant '._.' has no letter or digit");
    unload(&fx);

    /* Tiers name Kueue cohorts only; GIE priorities come from their bands. */
    load(&fx, -1, NULL, 1, "GOLD");
    refused(&fx, EMIT_KUEUE, "tiers 'gold' and 'GOLD' both become 'gold'");
    emitted(&fx, EMIT_GIE, "kind: InferencePool");
    unload(&fx);
}

/* The sum of the values of every line "<key> N" of text. */
static long sum_of(const char *text, const char *key) {
    long sum = 0;
    size_t n = strlen(key);
    for (const char *at = strstr(text, key); at; at = strstr(at + n, key)) sum += strtol(at + n, NULL, 10);
    return sum;
}

/* Kueue does not count the serving pods, so the quotas may hold only the
 * GPUs the plan leaves free: fleet.yaml's plan uses 8 of its 24 GPUs and
 * time-slices or runs MPS on nodes a100-0 and h100-0, whose device plugin
 * then shares every GPU alike; the 8 idle A100s of a100-1 are what is free.
 * mixed.yaml's plan uses every GPU: no quota at all. */
static void test_kueue_quotas_free_gpus(void **st) {
    (void)st;
    fixture fx;
    load_from(&fx, "examples/plan/fleet.yaml", -1, NULL, -1, NULL);
    emit_out out;
    assert_int_equal(emit_run(&fx.p, EMIT_KUEUE, &out), 0);
    const char *y = out.files[0].data;
    assert_int_equal(sum_of(y, "nominalQuota: "), 8);
    assert_null(strstr(y, "nvidia.com/mig-"));
    assert_non_null(strstr(y, "kubectl label node a100-1 tessera.dev/batch-gpus=a100-80gb"));
    assert_null(strstr(y, "kubectl label node h100-0"));
    emit_out_free(&out);
    unload(&fx);

    load(&fx, -1, NULL, -1, NULL);
    assert_int_equal(emit_run(&fx.p, EMIT_KUEUE, &out), 0);
    assert_null(strstr(out.files[0].data, "nominalQuota"));
    assert_null(strstr(out.files[0].data, "kind: ResourceFlavor"));
    assert_non_null(strstr(out.files[0].data, "the plan leaves no GPU free"));
    emit_out_free(&out);
    unload(&fx);
}

/* GIE v1.0's picker sheds priority < 0: best effort (crawler, bronze) is
 * -1, the other tiers >= 0 with gold highest. */
static void test_gie_priorities(void **st) {
    (void)st;
    fixture fx;
    load(&fx, -1, NULL, -1, NULL);
    emitted(&fx, EMIT_GIE, "name: tessera-mistral-7b-gold\n  priority: 1\n");
    emitted(&fx, EMIT_GIE, "name: tessera-lawfirm-mistral-7b\n  priority: 0\n");
    emitted(&fx, EMIT_GIE, "name: tessera-qwen2-0-5b-be\n  priority: -1\n");
    unload(&fx);
}

/* Kueue: without WorkloadPriorityClasses every job has priority 0, so only
 * reclaimWithinCohort Any lets a tenant take back its quota; every band but
 * the last has it. fleet.yaml's gold tenant chat rounds to no free GPU: the
 * header says so. */
static void test_kueue_preemption(void **st) {
    (void)st;
    fixture fx;
    load_from(&fx, "examples/plan/fleet.yaml", -1, NULL, -1, NULL);
    emit_out out;
    assert_int_equal(emit_run(&fx.p, EMIT_KUEUE, &out), 0);
    const char *y = out.files[0].data;
    static const char *const want[][2] = {
        {"tessera-bank", "Any"}, {"tessera-docs", "Any"}, {"tessera-analytics", "Any"}, {"tessera-batch", "Never"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char head[128];
        snprintf(head, sizeof head, "  name: %s\n  labels:", want[i][0]);
        const char *cq = strstr(y, head), *pre = cq ? strstr(cq, "reclaimWithinCohort: ") : NULL;
        if (!pre) fail_msg("no ClusterQueue %s with a preemption", want[i][0]);
        if (strncmp(pre + strlen("reclaimWithinCohort: "), want[i][1], strlen(want[i][1])) != 0)
            fail_msg("ClusterQueue %s does not reclaim %s", want[i][0], want[i][1]);
    }
    assert_non_null(strstr(y, "# NOTE tenant chat (tier gold, band 0) gets no GPU of its own"));
    assert_null(strstr(y, "# NOTE tenant bank"));
    emit_out_free(&out);
    unload(&fx);
}

/* A worker name that cannot make "tessera-<worker>" a Helm release name (53
 * characters) or a label is refused; at the limit the EPP Service is the
 * chart's: the release name cut to 40 characters, then "-epp". plan_build's
 * names are labels, but a plan read back from JSON need not be. */
static void test_worker_names(void **st) {
    (void)st;
    fixture fx;
    load(&fx, -1, NULL, -1, NULL);
    plan_worker *w = &fx.p.workers[0];
    snprintf(w->name, sizeof w->name, "Bad_Name");
    refused(&fx, EMIT_GIE, "worker 'Bad_Name' cannot name an InferencePool");
    snprintf(w->name, sizeof w->name, "%s", "a23456789-123456789-123456789-123456789-123456");  /* 46 */
    refused(&fx, EMIT_GIE, "cannot name an InferencePool: tessera-<worker> must be a Helm release name");
    snprintf(w->name, sizeof w->name, "-lead");
    refused(&fx, EMIT_GIE, "worker '-lead' cannot name an InferencePool");
    snprintf(w->name, sizeof w->name, "%s", "a23456789-123456789-123456789-123456789-12345");   /* 45 */
    emitted(&fx, EMIT_GIE, "  name: tessera-a23456789-123456789-123456789-123456789-12345\n");
    emitted(&fx, EMIT_GIE, "  endpointPickerRef:\n    name: tessera-a23456789-123456789-123456789-12-epp\n");
    unload(&fx);
}

/* Kueue gives each tenant its namespace: never Kubernetes' own. */
static void test_reserved_namespaces_refused(void **st) {
    (void)st;
    static const char *const bad[][2] = {
        {"Default", "'default'"}, {"kube-system", "'kube-system'"}, {"Kube_Ops", "'kube-ops'"}};
    fixture fx;
    load(&fx, -1, NULL, -1, NULL);
    int blog = tenant_index(&fx, "blog");
    unload(&fx);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        load(&fx, blog, bad[i][0], -1, NULL);
        refused(&fx, EMIT_KUEUE, bad[i][1]);
        refused(&fx, EMIT_KUEUE, "which Kubernetes keeps for itself");
        /* GIE objects live in the pods' namespace: unaffected. */
        emitted(&fx, EMIT_GIE, "kind: InferenceObjective");
        unload(&fx);
    }
    load(&fx, blog, "kubeflow", -1, NULL);
    emitted(&fx, EMIT_KUEUE, "  namespace: kubeflow\n");
    unload(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dns_label),
        cmocka_unit_test(test_distinct_names_sanitised),
        cmocka_unit_test(test_clashing_names_refused),
        cmocka_unit_test(test_kueue_quotas_free_gpus),
        cmocka_unit_test(test_gie_priorities),
        cmocka_unit_test(test_kueue_preemption),
        cmocka_unit_test(test_worker_names),
        cmocka_unit_test(test_reserved_namespaces_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
