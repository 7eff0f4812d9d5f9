/* pack.c - first-fit decreasing and branch-and-bound packing; see pack.h. */
#include "pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "mig.h"

#define EPS 1e-9
#define DIMS 2                      /* dimensions per kind for the bound */

typedef struct bin_state {
    int kind;                       /* PACK_*, -1 while empty */
    int n;                          /* items on the GPU */
    int ids[MIG_MAX_INSTANCES];     /* PACK_MIG: profiles, in arrival order */
    int mem_slices, compute;        /* PACK_MIG: sums, for a quick reject */
    double pct, mem;                /* PACK_MPS / PACK_TS: sums */
} bin_state;

/* The two bound dimensions of item it on type t, as fractions of a GPU. */
static void item_dims(const pack_problem *p, const pack_item *it, size_t t, double d[DIMS]) {
    const pack_size *s = &it->size[t];
    d[0] = d[1] = 0;
    switch (it->kind) {
    case PACK_MIG: {
        const mig_geom *g = mig_geom_find(s->gi_id);
        if (g) {
            d[0] = (double)g->mem / MIG_MEM_SLICES;
            d[1] = (double)g->compute / MIG_COMPUTE_SLICES;
        }
        break;
    }
    case PACK_MPS:
    case PACK_TS:
        d[0] = s->pct / 100.0;
        d[1] = p->type_mem[t] > 0 ? s->mem / p->type_mem[t] : 1.0;
        break;
    default:
        d[0] = d[1] = 1.0;
    }
}

/* Smallest dims over the types the item fits; 0 if it fits none. */
static int item_min_dims(const pack_problem *p, const pack_item *it, double d[DIMS]) {
    int any = 0;
    d[0] = d[1] = INFINITY;
    for (size_t t = 0; t < p->n_types; t++) {
        if (!it->size[t].ok) continue;
        double x[DIMS];
        item_dims(p, it, t, x);
        for (int k = 0; k < DIMS; k++)
            if (x[k] < d[k]) d[k] = x[k];
        any = 1;
    }
    if (!any) d[0] = d[1] = 0;
    return any;
}

int pack_lower_bound(const pack_problem *p, double *frac) {
    double sum[PACK_KINDS][DIMS] = {{0}};
    for (size_t i = 0; i < p->n_items; i++) {
        double d[DIMS];
        if (!item_min_dims(p, &p->items[i], d)) continue;
        for (int k = 0; k < DIMS; k++) sum[p->items[i].kind][k] += d[k];
    }
    int lb = 0;
    double f = 0;
    for (int k = 0; k < PACK_KINDS; k++) {
        double m = sum[k][0] > sum[k][1] ? sum[k][0] : sum[k][1];
        f += m;
        lb += (int)ceil(m - 1e-6);
    }
    if (frac) *frac = f;
    return lb;
}

static int fits(const pack_problem *p, const bin_state *b, const pack_item *it, size_t t) {
    const pack_size *s = &it->size[t];
    if (!s->ok) return 0;
    if (b->kind < 0) return 1;
    if (b->kind != it->kind) return 0;
    switch (it->kind) {
    case PACK_MIG: {
        const mig_geom *g = mig_geom_find(s->gi_id);
        if (!g || b->n >= MIG_MAX_INSTANCES) return 0;
        if (b->mem_slices + g->mem > MIG_MEM_SLICES || b->compute + g->compute > MIG_COMPUTE_SLICES)
            return 0;
        int ids[MIG_MAX_INSTANCES];
        memcpy(ids, b->ids, (size_t)b->n * sizeof *ids);
        ids[b->n] = s->gi_id;
        return mig_fits(ids, (size_t)b->n + 1);
    }
    case PACK_MPS:
        if (b->n >= PACK_MPS_CLIENTS) return 0;
        /* fall through */
    case PACK_TS:
        return b->pct + s->pct <= 100.0 + EPS && b->mem + s->mem <= p->type_mem[t] * (1 + EPS);
    default:
        return 0;                   /* a whole-GPU item never shares */
    }
}

static void bin_add(bin_state *b, const pack_item *it, const pack_size *s) {
    b->kind = it->kind;
    if (it->kind == PACK_MIG) {
        const mig_geom *g = mig_geom_find(s->gi_id);
        b->ids[b->n] = s->gi_id;
        b->mem_slices += g->mem;
        b->compute += g->compute;
    }
    b->pct += s->pct;
    b->mem += s->mem;
    b->n++;
}

static void bin_remove(bin_state *b, const pack_item *it, const pack_size *s) {
    b->n--;
    if (it->kind == PACK_MIG) {
        const mig_geom *g = mig_geom_find(s->gi_id);
        b->mem_slices -= g->mem;
        b->compute -= g->compute;
    }
    b->pct -= s->pct;
    b->mem -= s->mem;
    if (b->n == 0) memset(b, 0, sizeof *b), b->kind = -1;
}

/* A GPU that cannot take anything more of its kind is skipped by the
 * first-fit scan; it keeps 1,000-GPU fleets fast. */
static int bin_full(const bin_state *b) {
    switch (b->kind) {
    case PACK_MIG: return b->mem_slices >= MIG_MEM_SLICES || b->n >= MIG_MAX_INSTANCES;
    case PACK_MPS: return b->pct >= 100.0 - EPS || b->n >= PACK_MPS_CLIENTS;
    case PACK_TS: return b->pct >= 100.0 - EPS;
    case PACK_WHOLE: return 1;
    default: return 0;
    }
}

/* Sort key: the item's share of a GPU on the first type it fits. */
static double item_key(const pack_problem *p, const pack_item *it) {
    for (size_t t = 0; t < p->n_types; t++)
        if (it->size[t].ok) {
            double d[DIMS];
            item_dims(p, it, t, d);
            return d[0] > d[1] ? d[0] : d[1];
        }
    return 0;
}

typedef struct keyed {
    double key;
    size_t i;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Items in decreasing size, ties by index: the order both searches use. */
static size_t *sorted_items(const pack_problem *p) {
    keyed *k = malloc((p->n_items ? p->n_items : 1) * sizeof *k);
    size_t *order = malloc((p->n_items ? p->n_items : 1) * sizeof *order);
    if (!k || !order) {
        free(k);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < p->n_items; i++) k[i] = (keyed){item_key(p, &p->items[i]), i};
    qsort(k, p->n_items, sizeof *k, cmp_keyed);
    for (size_t i = 0; i < p->n_items; i++) order[i] = k[i].i;
    free(k);
    return order;
}

static int check_problem(const pack_problem *p, const int *assign) {
    if (!p || !assign || (p->n_items && !p->items) || (p->n_bins && !p->bin_type) ||
        (p->n_types && !p->type_mem))
        return TS_ERR_INVAL;
    for (size_t b = 0; b < p->n_bins; b++)
        if (p->bin_type[b] < 0 || (size_t)p->bin_type[b] >= p->n_types) return TS_ERR_INVAL;
    return 0;
}

/* The first unused GPU of type t at or after *next[t]; n_bins if none. */
static size_t next_unused(const pack_problem *p, const bin_state *bins, size_t from, size_t t) {
    size_t b = from;
    while (b < p->n_bins && (p->bin_type[b] != (int)t || bins[b].kind >= 0)) b++;
    return b;
}

static void summarise(const pack_problem *p, const int *assign, pack_result *r) {
    char *used = calloc(p->n_bins ? p->n_bins : 1, 1);
    r->bins_used = 0;
    r->mem_used = 0;
    r->unplaced = 0;
    for (size_t i = 0; i < p->n_items; i++) {
        if (assign[i] < 0) {
            r->unplaced++;
            continue;
        }
        if (used && !used[assign[i]]) {
            used[assign[i]] = 1;
            r->bins_used++;
            r->mem_used += p->type_mem[p->bin_type[assign[i]]];
        }
    }
    free(used);
}

int pack_ffd(const pack_problem *p, int *assign, pack_result *r) {
    int rc = check_problem(p, assign);
    if (rc) return rc;
    memset(r, 0, sizeof *r);
    size_t *order = sorted_items(p);
    bin_state *bins = malloc((p->n_bins ? p->n_bins : 1) * sizeof *bins);
    size_t *opened = malloc((p->n_bins ? p->n_bins : 1) * sizeof *opened);
    size_t *next = calloc(p->n_types ? p->n_types : 1, sizeof *next);
    if (!order || !bins || !opened || !next) {
        rc = TS_ERR_NOMEM;
        goto out;
    }
    for (size_t b = 0; b < p->n_bins; b++) memset(&bins[b], 0, sizeof bins[b]), bins[b].kind = -1;
    size_t n_open = 0, first_live = 0;
    for (size_t k = 0; k < p->n_items; k++) {
        size_t i = order[k];
        const pack_item *it = &p->items[i];
        assign[i] = -1;
        /* Skip over a prefix of full GPUs once, so long runs of full GPUs
         * cost nothing on later items. */
        while (first_live < n_open && bin_full(&bins[opened[first_live]])) first_live++;
        for (size_t o = first_live; o < n_open; o++) {
            size_t b = opened[o];
            if (bin_full(&bins[b]) || !fits(p, &bins[b], it, (size_t)p->bin_type[b])) continue;
            bin_add(&bins[b], it, &it->size[p->bin_type[b]]);
            assign[i] = (int)b;
            break;
        }
        if (assign[i] >= 0) continue;
        size_t best = p->n_bins;
        for (size_t t = 0; t < p->n_types; t++) {
            if (!it->size[t].ok) continue;
            next[t] = next_unused(p, bins, next[t], t);
            if (next[t] < best) best = next[t];
        }
        if (best == p->n_bins) continue;
        bin_add(&bins[best], it, &it->size[p->bin_type[best]]);
        opened[n_open++] = best;
        assign[i] = (int)best;
    }
    summarise(p, assign, r);
    r->proven = 0;
out:
    free(order);
    free(bins);
    free(opened);
    free(next);
    return rc;
}

/* ---- branch and bound ------------------------------------------------------ */

typedef struct bb {
    const pack_problem *p;
    const size_t *order;            /* items, largest first */
    double (*mind)[DIMS];           /* [n_items] smallest dims over types */
    bin_state *bins;
    size_t *opened;                 /* GPUs in use, in opening order */
    size_t n_open;
    int *cur;                       /* current assignment */
    int *best;                      /* best assignment so far */
    size_t cur_unplaced, best_unplaced;
    int best_bins;
    double cur_mem, best_mem;
    int allow_skip;                 /* FFD left items unplaced: search may too */
    long nodes, budget;
} bb;

/* GPUs the remaining items k.. still need beyond the open ones, at least. */
static int bb_extra(const bb *s, size_t k) {
    const pack_problem *p = s->p;
    double need[PACK_KINDS][DIMS] = {{0}}, freecap[PACK_KINDS][DIMS] = {{0}};
    int any[PACK_KINDS] = {0};
    for (size_t j = k; j < p->n_items; j++) {
        size_t i = s->order[j];
        int kind = p->items[i].kind;
        any[kind] = 1;
        for (int d = 0; d < DIMS; d++) need[kind][d] += s->mind[i][d];
    }
    for (size_t o = 0; o < s->n_open; o++) {
        const bin_state *b = &s->bins[s->opened[o]];
        if (b->kind < 0 || b->kind == PACK_WHOLE) continue;
        size_t t = (size_t)p->bin_type[s->opened[o]];
        if (b->kind == PACK_MIG) {
            freecap[b->kind][0] += (double)(MIG_MEM_SLICES - b->mem_slices) / MIG_MEM_SLICES;
            freecap[b->kind][1] += (double)(MIG_COMPUTE_SLICES - b->compute) / MIG_COMPUTE_SLICES;
        } else {
            freecap[b->kind][0] += 1.0 - b->pct / 100.0;
            freecap[b->kind][1] += p->type_mem[t] > 0 ? 1.0 - b->mem / p->type_mem[t] : 0;
        }
    }
    int extra = 0;
    for (int kind = 0; kind < PACK_KINDS; kind++) {
        if (!any[kind]) continue;
        double m = 0;
        for (int d = 0; d < DIMS; d++) {
            double x = need[kind][d] - freecap[kind][d];
            if (x > m) m = x;
        }
        extra += (int)ceil(m - 1e-6);
    }
    return extra;
}

/* 1 if (u, bins, mem) beats the best so far. */
static int better(const bb *s, size_t u, int bins, double mem) {
    if (u != s->best_unplaced) return u < s->best_unplaced;
    if (bins != s->best_bins) return bins < s->best_bins;
    return mem < s->best_mem - 1.0;
}

static void bb_search(bb *s, size_t k) {
    const pack_problem *p = s->p;
    if (s->nodes >= s->budget) return;
    s->nodes++;
    int used = (int)s->n_open;
    if (k == p->n_items) {
        if (better(s, s->cur_unplaced, used, s->cur_mem)) {
            memcpy(s->best, s->cur, p->n_items * sizeof *s->cur);
            s->best_unplaced = s->cur_unplaced;
            s->best_bins = used;
            s->best_mem = s->cur_mem;
        }
        return;
    }
    if (s->cur_unplaced > s->best_unplaced) return;
    if (!s->allow_skip || s->best_unplaced == 0) {
        int bound = used + bb_extra(s, k);
        if (s->cur_unplaced == s->best_unplaced &&
            (bound > s->best_bins || (bound == s->best_bins && s->cur_mem >= s->best_mem - 1.0)))
            return;
    }
    size_t i = s->order[k];
    const pack_item *it = &p->items[i];
    /* Into a GPU already in use. */
    for (size_t o = 0; o < s->n_open; o++) {
        size_t b = s->opened[o];
        size_t t = (size_t)p->bin_type[b];
        if (!fits(p, &s->bins[b], it, t)) continue;
        bin_add(&s->bins[b], it, &it->size[t]);
        s->cur[i] = (int)b;
        bb_search(s, k + 1);
        bin_remove(&s->bins[b], it, &it->size[t]);
        if (s->nodes >= s->budget) return;
    }
    /* Onto a new GPU: the first unused one of each type it fits. */
    for (size_t t = 0; t < p->n_types; t++) {
        if (!it->size[t].ok) continue;
        size_t b = next_unused(p, s->bins, 0, t);
        if (b == p->n_bins) continue;
        bin_add(&s->bins[b], it, &it->size[t]);
        s->opened[s->n_open++] = b;
        s->cur[i] = (int)b;
        s->cur_mem += p->type_mem[t];
        bb_search(s, k + 1);
        s->cur_mem -= p->type_mem[t];
        s->n_open--;
        bin_remove(&s->bins[b], it, &it->size[t]);
        if (s->nodes >= s->budget) return;
    }
    if (s->allow_skip) {
        s->cur[i] = -1;
        s->cur_unplaced++;
        bb_search(s, k + 1);
        s->cur_unplaced--;
    }
}

int pack_exact(const pack_problem *p, long node_budget, int *assign, pack_result *r) {
    int rc = pack_ffd(p, assign, r);
    if (rc) return rc;
    size_t n = p->n_items ? p->n_items : 1, nb = p->n_bins ? p->n_bins : 1;
    bb s = {0};
    s.p = p;
    s.order = sorted_items(p);
    s.mind = malloc(n * sizeof *s.mind);
    s.bins = malloc(nb * sizeof *s.bins);
    s.opened = malloc(nb * sizeof *s.opened);
    s.cur = malloc(n * sizeof *s.cur);
    s.best = malloc(n * sizeof *s.best);
    if (!s.order || !s.mind || !s.bins || !s.opened || !s.cur || !s.best) {
        rc = TS_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < p->n_items; i++) item_min_dims(p, &p->items[i], s.mind[i]);
    for (size_t b = 0; b < p->n_bins; b++) memset(&s.bins[b], 0, sizeof s.bins[b]), s.bins[b].kind = -1;
    memcpy(s.best, assign, p->n_items * sizeof *assign);
    s.best_unplaced = r->unplaced;
    s.best_bins = r->bins_used;
    s.best_mem = r->mem_used;
    s.allow_skip = r->unplaced > 0;
    s.budget = node_budget > 0 ? node_budget : 1;
    bb_search(&s, 0);
    memcpy(assign, s.best, p->n_items * sizeof *assign);
    summarise(p, assign, r);
    r->nodes = s.nodes;
    r->proven = s.nodes < s.budget;
out:
    free((void *)s.order);
    free(s.mind);
    free(s.bins);
    free(s.opened);
    free(s.cur);
    free(s.best);
    return rc;
}
