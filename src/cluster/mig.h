/*
 * mig.h - MIG geometry: which GPU instance layouts exist, and in which order
 * `nvidia-smi mig -cgi` must create them to land where the planner put them.
 *
 * A GPU has 7 compute slices and 8 memory slices. A GPU instance (GI) of
 * profile p covers the memory-slice interval [start, start + size) on the
 * index line 0..7, where start must be one of p's listed slots. The
 * geometry per GI profile id is the same on every MIG GPU of the catalog
 * (A100, H100, H200, GH200, B200, B300; see gpucat.h for names, SMs and
 * memory), so it is one table here. The A30's 4-slice geometry is not in
 * it, which is why gpucat.c lists the A30 without MIG. A layout is valid when
 *   - every instance starts at a listed slot of its profile,
 *   - the memory-slice intervals do not overlap,
 *   - at most one `+me` instance (media extensions) exists,
 * and from those the per-profile instance limits and the 7 compute slices
 * follow; mig_layout_check() still checks them, with their own message.
 *
 * `nvidia-smi mig -cgi a,b,c` places each instance in turn first-fit, never
 * moving an earlier one, so an order can fail on a layout that exists:
 * `-cgi 19,19,14,9` fails while `9,19,14,19` succeeds. mig_place() picks a
 * creation order that lands the planned layout. The driver's preference
 * among free slots is not documented; MIG_PREF_DRIVER models it from the
 * MIG user guide's transcripts: a one-memory-slice profile (1g.5gb,
 * 1g.10gb on 80 GB parts) takes the lowest free start, every larger one the
 * highest. That reproduces each of them exactly:
 *   `-cgi 9,19,14,19` -> -lgi shows 1g@0, 1g@1, 2g@2, 3g@4;
 *   `-cgi 19,19,14,9` -> the 2g lands at 4, so the 3g finds no room;
 *   `-cgi 14,19x5`    -> 2g@4 and 1g@0,1,2,3,6;
 *   `-cgi 9,9`        -> 3g@4, then 3g@0.
 * A single direction for every profile cannot: highest-first puts the
 * guide's first 1g at 3, lowest-first makes `9,19,14,19` fail. Where the
 * transcripts say nothing (1g.20gb, id 15, is never shown next to others)
 * the profile follows its size, i.e. highest first [D; confirm with -lgi].
 * MIG_PREF_HIGH and MIG_PREF_LOW remain for the tests that show why.
 * Pure functions over small arrays: no allocation, no state.
 */
#ifndef TS_MIG_H
#define TS_MIG_H

#include <stddef.h>

#define MIG_MEM_SLICES 8            /* memory slices of a GPU: the index line 0..7 */
#define MIG_COMPUTE_SLICES 7        /* compute (SM) slices of a GPU */
#define MIG_MAX_INSTANCES 7         /* GIs on one GPU at most (7 x 1g) */

/* Which free start nvidia-smi's first fit takes for each instance: the
 * driver's (see above), or one direction for every profile. */
enum { MIG_PREF_DRIVER = 0, MIG_PREF_HIGH = 1, MIG_PREF_LOW = 2 };

typedef struct mig_geom {
    int gi_id;                      /* nvidia-smi GI profile id */
    int compute;                    /* compute slices, of 7 */
    int mem;                        /* memory slices, of 8: the interval's size */
    unsigned starts;                /* bit s set: s is a valid start slot */
    int max;                        /* instances of this profile per GPU */
    int me;                         /* 1: a +me profile (at most one per GPU) */
} mig_geom;

typedef struct mig_inst {
    int gi_id;                      /* profile */
    int start;                      /* first memory slice, 0..7 */
} mig_inst;

/* Geometry of GI profile gi_id; NULL for an id the table lacks. */
const mig_geom *mig_geom_find(int gi_id);

/* Check the layout v[0..n) against the placement rule.
 *   why, cap: OUT, may be NULL/0; the first broken rule, e.g.
 *             "2g (id 14) at slot 1: valid starts are 0,2,4".
 * Returns 0 or TS_ERR_MIG_LAYOUT (TS_ERR_INVAL for an unknown id). */
int mig_layout_check(const mig_inst *v, size_t n, char *why, size_t cap);

/* Model `nvidia-smi mig -cgi ids[0],ids[1],...`: create each instance in
 * turn at the free listed start that pref prefers.
 *   out: OUT, n entries in creation order, valid up to the failure.
 *   failed: OUT, may be NULL; index of the first id that found no room.
 * Returns 0 when every instance was created, TS_ERR_MIG_LAYOUT when one
 * found no room ("Insufficient Resources"), TS_ERR_INVAL on an unknown id. */
int mig_firstfit(const int *ids, size_t n, int pref, mig_inst *out, size_t *failed);

/* 1 if some valid layout holds the multiset ids[0..n), else 0. */
int mig_fits(const int *ids, size_t n);

/* Sort ids largest first: memory slices, then compute slices, descending;
 * ties by id, so the order is deterministic. */
void mig_sort_largest(int *ids, size_t n);

/* Plan a layout for the multiset ids[0..n) and the creation order that
 * lands it: out[0..n) is the layout in creation order, so
 * `-cgi out[0].gi_id,out[1].gi_id,...` under MIG_PREF_DRIVER creates exactly
 * out. The order is largest first (mig_sort_largest) whenever that lands,
 * which it does for every layout of today's geometry.
 * Returns 0, TS_ERR_MIG_LAYOUT when no valid layout exists, TS_ERR_INVAL
 * for an unknown id or n > MIG_MAX_INSTANCES. */
int mig_place(const int *ids, size_t n, mig_inst *out);

#endif
