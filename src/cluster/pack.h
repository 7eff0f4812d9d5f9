/*
 * pack.h - bin packing of GPU slices onto a fleet's GPUs: first-fit
 * decreasing as the fast path and an exact branch and bound for small
 * problems, both minimising GPUs used, then the memory of the GPUs used
 * (on a mixed fleet, the smaller GPU wins a tie).
 *
 * An item is one slice a GPU must give: a MIG GPU instance of some profile,
 * an MPS client's share (percent of the SMs and a pinned memory limit), a
 * time-sliced share, or a whole GPU. Its size depends on the GPU type, so
 * each item carries one pack_size per fleet type, or "does not fit". A bin
 * is one physical GPU of the fleet; a GPU holds items of one kind only
 * (MIG on, or MPS, or time-slicing, or one whole-GPU item). The fit rules:
 *   MIG:   the profiles on the GPU have a valid layout (mig_fits);
 *   MPS:   shares sum to <= 100%, limits to <= the GPU's memory, and at
 *          most PACK_MPS_CLIENTS clients;
 *   TS:    shares to <= 100%, memory to <= the GPU's memory;
 *   WHOLE: alone on its GPU.
 * GPUs are opened in fleet order: a new GPU of type t is always the
 * lowest-numbered unused GPU of type t, which is what lets the exact search
 * treat unused GPUs of one type as interchangeable.
 * The lower bound is, per kind, the larger of the per-dimension sums
 * (memory slices / 8 and compute slices / 7 for MIG; share and memory for
 * MPS and TS; one per whole-GPU item), each item at its smallest over the
 * types it fits, rounded up and summed over kinds: no packing can use fewer
 * GPUs. The caller owns all arrays; pack_* allocate only their own scratch
 * and free it before returning.
 */
#ifndef TS_PACK_H
#define TS_PACK_H

#include <stddef.h>

#define PACK_MPS_CLIENTS 48         /* MPS client contexts per device, Volta and later [V] */

enum { PACK_MIG = 0, PACK_MPS, PACK_TS, PACK_WHOLE, PACK_KINDS };

typedef struct pack_size {
    int ok;                         /* 1: the item fits this GPU type at all */
    int gi_id;                      /* PACK_MIG: GI profile id */
    double pct;                     /* PACK_MPS / PACK_TS: share of the GPU, percent */
    double mem;                     /* PACK_MPS / PACK_TS: bytes */
} pack_size;

typedef struct pack_item {
    int kind;                       /* PACK_* */
    const pack_size *size;          /* [n_types] */
} pack_item;

typedef struct pack_problem {
    size_t n_items;
    const pack_item *items;
    size_t n_bins;                  /* the fleet's GPUs, in fleet order */
    const int *bin_type;            /* [n_bins] type index of each GPU */
    size_t n_types;
    const double *type_mem;         /* [n_types] usable bytes of a whole GPU of the type */
} pack_problem;

typedef struct pack_result {
    int bins_used;                  /* GPUs holding at least one item */
    double mem_used;                /* sum of type_mem over the GPUs used */
    size_t unplaced;                /* items left without a GPU */
    long nodes;                     /* exact search: nodes visited */
    int proven;                     /* exact search: 1 if it finished within its budget */
} pack_result;

/* First-fit decreasing: items by decreasing size (their memory share on the
 * first type they fit), each to the first GPU already in use that takes it,
 * else to the lowest-numbered unused GPU of a type it fits.
 *   assign: OUT [n_items], the GPU of each item, -1 if none had room.
 * Returns 0, TS_ERR_NOMEM or TS_ERR_INVAL. */
int pack_ffd(const pack_problem *p, int *assign, pack_result *r);

/* Exact branch and bound from the FFD solution: the fewest GPUs, then the
 * least memory of GPUs used, placing every item (if FFD could not place
 * them all, the search also maximises the number placed). At most
 * node_budget nodes are visited; r->proven says whether the result is
 * optimal or only the best found.
 *   assign: OUT [n_items].
 * Returns 0, TS_ERR_NOMEM or TS_ERR_INVAL. */
int pack_exact(const pack_problem *p, long node_budget, int *assign, pack_result *r);

/* The lower bound on GPUs described above (fractional, before rounding, in
 * *frac if not NULL), over the items that fit some type. */
int pack_lower_bound(const pack_problem *p, double *frac);

#endif
