/* test_plan_mig.c - MIG placement rules and the GPU catalog (src/cluster/
 * mig.c, gpucat.c).
 *
 * Known valid and invalid layouts against the placement rule, each invalid
 * one with the rule it breaks; the driver's first fit slot by slot as the
 * MIG guide's transcripts show it (`-cgi 19,19,14,9` fails, `9,19,14,19`
 * lands 3g@4, 1g@0, 2g@2, 1g@1, `14,19x5` lands 2g@4 and 1g@0,1,2,3,6);
 * every multiset of profiles that has a valid layout is landed by
 * mig_place's largest-first order, and the layout it lands is valid; and
 * the catalog's numbers are internally consistent and match their sources
 * where a test can pin them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cluster/gpucat.h"
#include "cluster/mig.h"
#include "err.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the placement rule ------------------------------------------------------- */

typedef struct layout_case {
    const char *what;
    mig_inst v[8];
    size_t n;
    int valid;
    const char *why;                /* substring of the message when invalid */
} layout_case;

static void test_layouts(void **st) {
    (void)st;
    static const layout_case cases[] = {
        {"7 x 1g", {{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}, {19, 6}}, 7, 1, NULL},
        {"guide: 2g@4 + 1g@0,1,2,3,6", {{14, 4}, {19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 6}}, 6, 1, NULL},
        {"3g@0 + 3g@4", {{9, 0}, {9, 4}}, 2, 1, NULL},
        {"4g@0 + 3g@4 (R510+)", {{5, 0}, {9, 4}}, 2, 1, NULL},
        {"7g", {{0, 0}}, 1, 1, NULL},
        {"4 x 1g.20gb", {{15, 0}, {15, 2}, {15, 4}, {15, 6}}, 4, 1, NULL},
        {"3 x 2g + 1g@6", {{14, 0}, {14, 2}, {14, 4}, {19, 6}}, 4, 1, NULL},
        {"2g, 1g.20gb, 2g, 1g.20gb", {{14, 0}, {15, 2}, {14, 4}, {15, 6}}, 4, 1, NULL},
        {"one +me with 1g", {{20, 0}, {19, 1}}, 2, 1, NULL},
        {"empty", {{0, 0}}, 0, 1, NULL},
        {"1g at slot 7", {{19, 7}}, 1, 0, "valid starts are 0,1,2,3,4,5,6"},
        {"2g at odd slot", {{14, 1}}, 1, 0, "valid starts are 0,2,4"},
        {"2g at slot 6", {{14, 6}}, 1, 0, "valid starts are 0,2,4"},
        {"3g at slot 2", {{9, 2}}, 1, 0, "valid starts are 0,4"},
        {"4g at slot 4", {{5, 4}}, 1, 0, "valid starts are 0"},
        {"3g@0 overlaps 2g@2", {{9, 0}, {14, 2}}, 2, 0, "overlap"},
        {"two 1g at one slot", {{19, 3}, {19, 3}}, 2, 0, "overlap"},
        {"7g with a 1g", {{0, 0}, {19, 6}}, 2, 0, "overlap"},
        {"4g@0 with 3g@0", {{5, 0}, {9, 0}}, 2, 0, "overlap"},
        {"two +me", {{20, 0}, {20, 1}}, 2, 0, "+me"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        char why[256];
        int rc = mig_layout_check(cases[i].v, cases[i].n, why, sizeof why);
        if (cases[i].valid) {
            if (rc != 0) fail_msg("%s: expected valid, got %d (%s)", cases[i].what, rc, why);
        } else {
            if (rc != TS_ERR_MIG_LAYOUT) fail_msg("%s: expected MIG_LAYOUT, got %d", cases[i].what, rc);
            if (!strstr(why, cases[i].why))
                fail_msg("%s: message '%s' lacks '%s'", cases[i].what, why, cases[i].why);
        }
    }
    mig_inst bad = {42, 0};
    assert_int_equal(mig_layout_check(&bad, 1, NULL, 0), TS_ERR_INVAL);
}

/* ---- first fit and its ordering trap ------------------------------------------ */

/* Run `-cgi ids` under pref and compare each instance with want[] exactly. */
static void expect_cgi(const int *ids, size_t n, int pref, const mig_inst *want) {
    mig_inst out[8];
    assert_int_equal(mig_firstfit(ids, n, pref, out, NULL), 0);
    for (size_t k = 0; k < n; k++)
        if (out[k].gi_id != want[k].gi_id || out[k].start != want[k].start)
            fail_msg("-cgi entry %zu: got id %d@%d, the driver gives id %d@%d", k, out[k].gi_id, out[k].start,
                     want[k].gi_id, want[k].start);
}

static void test_firstfit_trap(void **st) {
    (void)st;
    mig_inst out[8];
    size_t failed = 99;
    /* MIG user guide: -cgi 19,19,14,9 fails ("Insufficient Resources") at
     * the 3g, while the same multiset in the order 9,19,14,19 works and
     * -lgi then shows 1g@0, 1g@1, 2g@2, 3g@4: in creation order 3g@4,
     * 1g@0, 2g@2, 1g@1. */
    const int trap[] = {19, 19, 14, 9}, ok[] = {9, 19, 14, 19};
    assert_int_equal(mig_firstfit(trap, 4, MIG_PREF_DRIVER, out, &failed), TS_ERR_MIG_LAYOUT);
    assert_int_equal(failed, 3);
    const mig_inst ok_lgi[] = {{9, 4}, {19, 0}, {14, 2}, {19, 1}};
    expect_cgi(ok, 4, MIG_PREF_DRIVER, ok_lgi);
    /* Both orders hold a valid layout: the trap is the order. */
    assert_true(mig_fits(trap, 4));
    /* -cgi 14,19,19,19,19,19 gives 2g@4 and 1g at 0,1,2,3,6 (guide). */
    const int g[] = {14, 19, 19, 19, 19, 19};
    const mig_inst g_lgi[] = {{14, 4}, {19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 6}};
    expect_cgi(g, 6, MIG_PREF_DRIVER, g_lgi);
    /* -cgi 9,9 (the guide's "-cgi 9,3g.20gb"): the first 3g at 4:4. */
    const int two3g[] = {9, 9};
    const mig_inst two3g_lgi[] = {{9, 4}, {9, 0}};
    expect_cgi(two3g, 2, MIG_PREF_DRIVER, two3g_lgi);
    /* One direction for every profile contradicts the guide: highest
     * first puts the first 1g of 9,19,14,19 at 3, lowest first makes that
     * order fail and the trap pass. */
    assert_int_equal(mig_firstfit(ok, 4, MIG_PREF_HIGH, out, NULL), 0);
    assert_int_equal(out[1].start, 3);
    assert_int_equal(mig_firstfit(trap, 4, MIG_PREF_LOW, out, NULL), 0);
    assert_int_equal(mig_firstfit(ok, 4, MIG_PREF_LOW, out, NULL), TS_ERR_MIG_LAYOUT);
    /* Instance limits: an 8th 1g, a second +me. */
    const int eight[] = {19, 19, 19, 19, 19, 19, 19, 19}, me2[] = {20, 20};
    assert_int_equal(mig_firstfit(eight, 8, MIG_PREF_DRIVER, out, &failed), TS_ERR_MIG_LAYOUT);
    assert_int_equal(failed, 7);
    assert_int_equal(mig_firstfit(me2, 2, MIG_PREF_DRIVER, out, &failed), TS_ERR_MIG_LAYOUT);
    assert_int_equal(failed, 1);
}

/* The emitter's order must land the trap's multiset: mig_place orders it
 * largest first, 9,14,19,19, which lands the guide's layout (3g@4, 2g@2,
 * 1g@0, 1g@1, the 1gs in creation order), and its -cgi replay under the
 * driver's model lands exactly the same slots. */
static void test_place_orders_trap(void **st) {
    (void)st;
    const int trap[] = {19, 19, 14, 9};
    mig_inst out[8], again[8];
    assert_int_equal(mig_place(trap, 4, out), 0);
    const mig_inst want[] = {{9, 4}, {14, 2}, {19, 0}, {19, 1}};
    int ids[8];
    for (int k = 0; k < 4; k++) {
        assert_int_equal(out[k].gi_id, want[k].gi_id);
        assert_int_equal(out[k].start, want[k].start);
        ids[k] = out[k].gi_id;
    }
    assert_int_equal(mig_layout_check(out, 4, NULL, 0), 0);
    assert_int_equal(mig_firstfit(ids, 4, MIG_PREF_DRIVER, again, NULL), 0);
    assert_memory_equal(out, again, 4 * sizeof *out);
    /* No layout at all: 3g + 3g + 1g (9 memory slices). */
    const int none[] = {9, 9, 19};
    assert_int_equal(mig_place(none, 3, out), TS_ERR_MIG_LAYOUT);
    const int unknown[] = {9, 42};
    assert_int_equal(mig_place(unknown, 2, out), TS_ERR_INVAL);
}

/* Every multiset of the seven profiles (within their instance limits)
 * that has a valid layout is placed, largest first lands it, and the
 * layout passes the rule; every multiset without one is refused. */
static void test_place_exhaustive(void **st) {
    (void)st;
    static const int ids[7] = {19, 20, 15, 14, 9, 5, 0}, maxc[7] = {7, 1, 4, 3, 2, 1, 1};
    int c[7], fitting = 0;
    for (c[0] = 0; c[0] <= maxc[0]; c[0]++)
        for (c[1] = 0; c[1] <= maxc[1]; c[1]++)
            for (c[2] = 0; c[2] <= maxc[2]; c[2]++)
                for (c[3] = 0; c[3] <= maxc[3]; c[3]++)
                    for (c[4] = 0; c[4] <= maxc[4]; c[4]++)
                        for (c[5] = 0; c[5] <= maxc[5]; c[5]++)
                            for (c[6] = 0; c[6] <= maxc[6]; c[6]++) {
                                int v[32];
                                size_t n = 0;
                                for (int k = 0; k < 7; k++)
                                    for (int j = 0; j < c[k]; j++) v[n++] = ids[k];
                                if (n == 0 || n > MIG_MAX_INSTANCES) continue;
                                mig_inst out[8];
                                int fits = mig_fits(v, n), rc = mig_place(v, n, out);
                                if (!fits) {
                                    assert_int_equal(rc, TS_ERR_MIG_LAYOUT);
                                    continue;
                                }
                                fitting++;
                                assert_int_equal(rc, 0);
                                assert_int_equal(mig_layout_check(out, n, NULL, 0), 0);
                                int sorted[8];
                                memcpy(sorted, v, n * sizeof *v);
                                mig_sort_largest(sorted, n);
                                for (size_t k = 0; k < n; k++) assert_int_equal(out[k].gi_id, sorted[k]);
                            }
    /* The count is a property of the geometry table; it changes only if
     * the table does. */
    assert_int_equal(fitting, 127);
}

/* ---- the catalog -------------------------------------------------------------- */

static void test_catalog(void **st) {
    (void)st;
    static const char *const must[] = {"A100-40GB", "A100-80GB", "H100-80GB", "H100-PCIe", "H100-94GB", "H200-141GB",
                                       "B200", "L4", "L40S", "A30", "H20", "GH200", "B300"};
    for (size_t i = 0; i < N(must); i++)
        if (!gpucat_find(must[i])) fail_msg("catalog lacks %s", must[i]);
    assert_ptr_equal(gpucat_find("a100-80gb"), gpucat_find("A100-80GB"));
    assert_null(gpucat_find("V100"));
    static const int order[7] = {19, 20, 15, 14, 9, 5, 0};
    for (size_t i = 0; i < gpucat_count(); i++) {
        const gpucat_gpu *g = gpucat_at(i);
        assert_true(g->mem_gib > 0 && g->bw_gbs > 0 && g->fp16_tflops > 0 && g->sms > 0 && g->host_gbs > 0);
        if (!g->n_mig) continue;
        assert_int_equal(g->n_mig, 7);
        double prev_mem = 0;
        for (int k = 0; k < g->n_mig; k++) {
            const gpucat_mig *m = &g->mig[k];
            const mig_geom *geo = mig_geom_find(m->gi_id);
            assert_non_null(geo);
            assert_int_equal(m->gi_id, order[k]);
            /* Names: "<compute>g.<N>gb", "+me" exactly on the +me profile. */
            char want[8];
            snprintf(want, sizeof want, "%dg.", geo->compute);
            if (strncmp(m->name, want, strlen(want)) != 0) fail_msg("%s %s: compute slices", g->name, m->name);
            assert_int_equal(strstr(m->name, "+me") != NULL, geo->me);
            assert_true(m->sms > 0 && m->sms <= g->sms);
            assert_true(m->mem_gib > 0 && m->mem_gib <= g->mem_gib + 1e-9);
            /* Memory grows with memory slices, and equals within a size. */
            if (k > 0 && mig_geom_find(g->mig[k - 1].gi_id)->mem == geo->mem)
                assert_true(m->mem_gib == prev_mem);
            prev_mem = m->mem_gib;
        }
        /* The 7g profile is the whole GPU's usable memory. */
        assert_true(g->mig[6].mem_gib == g->mem_gib);
        assert_ptr_equal(gpucat_mig_find(g, g->mig[3].name), &g->mig[3]);
        assert_ptr_equal(gpucat_mig_by_id(g, 9), &g->mig[4]);
    }
    /* Spot checks against the facts file's -lgip tables [V]. */
    const gpucat_gpu *h = gpucat_find("H100-80GB");
    assert_int_equal(gpucat_mig_find(h, "3g.40gb")->sms, 60);
    assert_int_equal(gpucat_mig_find(h, "1g.20gb")->sms, 26);
    /* H100 PCIe, `nvidia-smi mig -lgip` on driver 570: 1g/2g/3g/4g have
     * 14/30/46/62 SMs, not the SXM counts scaled by 114/132. */
    const gpucat_gpu *hp = gpucat_find("H100-PCIe");
    static const struct { const char *name; int sms; } pcie[] = {
        {"1g.20gb", 14}, {"2g.20gb", 30}, {"3g.40gb", 46}, {"4g.40gb", 62}};
    for (size_t i = 0; i < N(pcie); i++)
        if (gpucat_mig_find(hp, pcie[i].name)->sms != pcie[i].sms)
            fail_msg("H100-PCIe %s: %d SMs, -lgip says %d", pcie[i].name, gpucat_mig_find(hp, pcie[i].name)->sms,
                     pcie[i].sms);
    assert_true(gpucat_mig_find(gpucat_find("A100-40GB"), "1g.5gb")->mem_gib == 4.75);
    assert_true(gpucat_mig_find(gpucat_find("A100-80GB"), "2g.20gb")->mem_gib == 19.50);
    /* The rows added for issue 16, against their cited sources: GH200's
     * 2g.24gb has 32 SMs and its 1g.24gb 26 (Miyabi-G), B300 keeps the
     * guide's seven-slot geometry under its own names, and A30 and H20
     * carry no MIG rows (their profiles are not modelled, see gpucat.c). */
    const gpucat_gpu *gh = gpucat_find("GH200"), *b3 = gpucat_find("B300");
    assert_int_equal(gpucat_mig_find(gh, "2g.24gb")->sms, 32);
    assert_int_equal(gpucat_mig_find(gh, "1g.24gb")->sms, 26);
    assert_int_equal(gh->sms, 132);
    assert_non_null(gpucat_mig_find(b3, "7g.269gb"));
    assert_int_equal(gpucat_mig_by_id(b3, 9)->sms * 2 <= b3->sms, 1);
    assert_true(b3->fp16_tflops == 2250 && b3->bw_gbs == 8000);
    assert_int_equal(gpucat_find("A30")->n_mig, 0);
    assert_int_equal(gpucat_find("A30")->sms, 56);
    assert_true(gpucat_find("A30")->fp8_tflops == 0);
    assert_int_equal(gpucat_find("H20")->n_mig, 0);
    assert_true(gpucat_find("H20")->fp16_tflops == 148 && gpucat_find("H20")->sms == 78);
    char names[512];
    gpucat_names(names, sizeof names);
    assert_non_null(strstr(names, "A100-40GB, A100-80GB"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_firstfit_trap),
        cmocka_unit_test(test_place_orders_trap),
        cmocka_unit_test(test_place_exhaustive),
        cmocka_unit_test(test_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
