/* mig.c - MIG placement rules, first-fit model and creation order; see mig.h. */
#include "mig.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

/* GI profile geometry, from `nvidia-smi mig -lgipp` ({starts}:size) and the
 * MIG user guide's profile tables. Identical on A100-40GB (guide example)
 * [V] and H100-80GB / H100 NVL transcripts [S]; confirmed for A100-40/80 and
 * H100-80/94 [V]; assumed the same for H200, GH200, B200 and B300 [U]
 * (H200 and B200 names and instance counts are [V] from guide Tables 8
 * and 9, GH200 and B300 names [S]). Row order is largest
 * last; gpucat.c lists each GPU's profiles in this order. */
static const mig_geom GEOM[] = {
    /* id  compute mem  starts                  max me */
    {19, 1, 1, 0x7f /* 0,1,2,3,4,5,6 */, 7, 0},
    {20, 1, 1, 0x7f /* 0,1,2,3,4,5,6 */, 1, 1},
    {15, 1, 2, 0x55 /* 0,2,4,6 */,       4, 0},
    {14, 2, 2, 0x15 /* 0,2,4 */,         3, 0},
    {9,  3, 4, 0x11 /* 0,4 */,           2, 0},
    {5,  4, 4, 0x01 /* 0 */,             1, 0},
    {0,  7, 8, 0x01 /* 0 */,             1, 0},
};
#define N_GEOM (sizeof(GEOM) / sizeof(GEOM[0]))

const mig_geom *mig_geom_find(int gi_id) {
    for (size_t i = 0; i < N_GEOM; i++)
        if (GEOM[i].gi_id == gi_id) return &GEOM[i];
    return NULL;
}

static void starts_str(unsigned mask, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int s = 0; s < MIG_MEM_SLICES && len < cap; s++)
        if (mask & (1u << s)) {
            int k = snprintf(buf + len, cap - len, "%s%d", len ? "," : "", s);
            if (k < 0) break;
            len += (size_t)k;
        }
}

/* Bits [start, start + size) of the memory line. */
static unsigned span(int start, int size) { return ((1u << size) - 1u) << start; }

int mig_layout_check(const mig_inst *v, size_t n, char *why, size_t cap) {
    if (why && cap) why[0] = 0;
    if (n && !v) return TS_ERR_INVAL;
    unsigned used = 0;
    int count[N_GEOM] = {0};
    int compute = 0, me = 0;
    for (size_t i = 0; i < n; i++) {
        const mig_geom *g = mig_geom_find(v[i].gi_id);
        if (!g) {
            if (why && cap) snprintf(why, cap, "instance %zu: unknown GI profile id %d", i, v[i].gi_id);
            return TS_ERR_INVAL;
        }
        if (v[i].start < 0 || v[i].start >= MIG_MEM_SLICES || !(g->starts & (1u << v[i].start))) {
            char s[32];
            starts_str(g->starts, s, sizeof s);
            return err_set(why, cap, TS_ERR_MIG_LAYOUT, "profile id %d at slot %d: valid starts are %s", g->gi_id,
                           v[i].start, s);
        }
        unsigned m = span(v[i].start, g->mem);
        if (used & m)
            return err_set(why, cap, TS_ERR_MIG_LAYOUT, "profile id %d at slot %d: memory slices [%d,%d) overlap another instance",
                           g->gi_id, v[i].start, v[i].start, v[i].start + g->mem);
        used |= m;
        if (g->me && ++me > 1) return err_set(why, cap, TS_ERR_MIG_LAYOUT, "more than one +me instance");
        if (++count[g - GEOM] > g->max)
            return err_set(why, cap, TS_ERR_MIG_LAYOUT, "more than %d instances of profile id %d", g->max, g->gi_id);
        if ((compute += g->compute) > MIG_COMPUTE_SLICES)
            return err_set(why, cap, TS_ERR_MIG_LAYOUT, "instances need %d compute slices, the GPU has %d", compute,
                           MIG_COMPUTE_SLICES);
    }
    return 0;
}

/* The start pref takes for g on a line whose taken slices are `used`, or -1.
 * The driver's preference is per profile size; mig.h gives the transcripts
 * it reproduces. */
static int first_free(const mig_geom *g, unsigned used, int pref) {
    int high = pref == MIG_PREF_HIGH || (pref == MIG_PREF_DRIVER && g->mem > 1);
    for (int k = 0; k < MIG_MEM_SLICES; k++) {
        int s = high ? MIG_MEM_SLICES - 1 - k : k;
        if ((g->starts & (1u << s)) && !(used & span(s, g->mem))) return s;
    }
    return -1;
}

int mig_firstfit(const int *ids, size_t n, int pref, mig_inst *out, size_t *failed) {
    unsigned used = 0;
    int count[N_GEOM] = {0};
    int me = 0;
    for (size_t i = 0; i < n; i++) {
        const mig_geom *g = mig_geom_find(ids[i]);
        if (!g) return TS_ERR_INVAL;
        int s = -1;
        /* The driver refuses a profile past its instance limit or a second
         * +me even when slices are free. */
        if (count[g - GEOM] < g->max && !(g->me && me)) s = first_free(g, used, pref);
        if (s < 0) {
            if (failed) *failed = i;
            return TS_ERR_MIG_LAYOUT;
        }
        used |= span(s, g->mem);
        count[g - GEOM]++;
        me += g->me;
        out[i].gi_id = g->gi_id;
        out[i].start = s;
    }
    return 0;
}

/* Largest first: by memory slices, then compute slices, then id. */
static int larger(const mig_geom *a, const mig_geom *b) {
    if (a->mem != b->mem) return a->mem > b->mem;
    if (a->compute != b->compute) return a->compute > b->compute;
    return a->gi_id < b->gi_id;
}

void mig_sort_largest(int *ids, size_t n) {
    /* Insertion sort: n <= 7 in every use, and it is stable. */
    for (size_t i = 1; i < n; i++) {
        int x = ids[i];
        const mig_geom *gx = mig_geom_find(x);
        size_t j = i;
        while (j > 0 && gx && mig_geom_find(ids[j - 1]) && larger(gx, mig_geom_find(ids[j - 1]))) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = x;
    }
}

/* Backtracking: place ids[k..n) on a line with `used` taken. Largest-first
 * input keeps the tree tiny (at most 7 levels of at most 7 starts). */
static int fits_from(const mig_geom *const *g, size_t k, size_t n, unsigned used) {
    if (k == n) return 1;
    for (int s = 0; s < MIG_MEM_SLICES; s++) {
        if (!(g[k]->starts & (1u << s))) continue;
        unsigned m = span(s, g[k]->mem);
        if (used & m) continue;
        if (fits_from(g, k + 1, n, used | m)) return 1;
    }
    return 0;
}

/* Resolve ids to geometry and check the counting rules that need no search:
 * known ids, instance limits, one +me, 8 memory and 7 compute slices. */
static int precheck(const int *ids, size_t n, const mig_geom **g) {
    if (n > MIG_MAX_INSTANCES) return 0;
    int count[N_GEOM] = {0}, mem = 0, compute = 0, me = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(g[i] = mig_geom_find(ids[i]))) return -1;
        if (++count[g[i] - GEOM] > g[i]->max) return 0;
        mem += g[i]->mem;
        compute += g[i]->compute;
        me += g[i]->me;
    }
    return mem <= MIG_MEM_SLICES && compute <= MIG_COMPUTE_SLICES && me <= 1;
}

int mig_fits(const int *ids, size_t n) {
    int sorted[MIG_MAX_INSTANCES];
    const mig_geom *g[MIG_MAX_INSTANCES];
    if (n > MIG_MAX_INSTANCES) return 0;
    memcpy(sorted, ids, n * sizeof *ids);
    mig_sort_largest(sorted, n);
    if (precheck(sorted, n, g) != 1) return 0;
    return fits_from(g, 0, n, 0);
}

/* Next permutation of a multiset in lexicographic order of rank[]; 0 after
 * the last. Generates each distinct order once. */
static int next_perm(int *rank, size_t n) {
    if (n < 2) return 0;
    size_t i = n - 1;
    while (i > 0 && rank[i - 1] >= rank[i]) i--;
    if (i == 0) return 0;
    size_t j = n - 1;
    while (rank[j] <= rank[i - 1]) j--;
    int t = rank[i - 1];
    rank[i - 1] = rank[j];
    rank[j] = t;
    for (size_t a = i, b = n - 1; a < b; a++, b--) {
        t = rank[a];
        rank[a] = rank[b];
        rank[b] = t;
    }
    return 1;
}

int mig_place(const int *ids, size_t n, mig_inst *out) {
    int sorted[MIG_MAX_INSTANCES], order[MIG_MAX_INSTANCES] = {0}, rank[MIG_MAX_INSTANCES];
    const mig_geom *g[MIG_MAX_INSTANCES];
    if (n > MIG_MAX_INSTANCES) return TS_ERR_INVAL;
    if (n && (!ids || !out)) return TS_ERR_INVAL;
    memcpy(sorted, ids, n * sizeof *ids);
    mig_sort_largest(sorted, n);
    int pc = precheck(sorted, n, g);
    if (pc < 0) return TS_ERR_INVAL;
    if (pc == 0 || !fits_from(g, 0, n, 0)) return TS_ERR_MIG_LAYOUT;
    /* Largest first lands every layout of the geometry table (the tests
     * check all 127 multisets that fit); the search over other orders is
     * a guard for a future table where it might not. rank[i] indexes
     * sorted[], equal profiles sharing a rank, so each distinct order is
     * visited once and largest first is the first. */
    for (size_t i = 0; i < n; i++) rank[i] = i && sorted[i] == sorted[i - 1] ? rank[i - 1] : (int)i;
    do {
        for (size_t i = 0; i < n; i++) order[i] = sorted[rank[i]];
        if (mig_firstfit(order, n, MIG_PREF_DRIVER, out, NULL) == 0) return 0;
    } while (next_perm(rank, n));
    return TS_ERR_MIG_LAYOUT;
}
