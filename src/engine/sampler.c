/* sampler.c - greedy, temperature, top-k and top-p sampling; see sampler.h.
 *
 * The math. With temperature T, token i has probability
 *     p_i = exp((l_i - m) / T) / Z,   m = max_j l_j,   Z = sum_j exp((l_j - m) / T).
 * Subtracting the max first keeps every exponent <= 0, so nothing overflows
 * and the best token always weighs exactly 1 (Z >= 1). We subtract before we
 * divide: l_i / T - m / T would overflow for large logits and small T.
 *
 * The order. Every filter ranks tokens by logit, highest first, and equal
 * logits by lower id. That is a strict total order, so "the k best" and "the
 * shortest best-first prefix with mass >= top_p" are each one well-defined
 * set, whatever pivots or heap shapes the selection takes on the way, and
 * top_k = 1 and a tiny top_p pick exactly what greedy picks. We rank by the
 * logit rather than by p_i because exp() can round two close logits to the
 * same weight; p_i is monotone in the logit, so the ranking is also by p_i.
 *
 * The cost. Sorting a 32000..150000-entry vocabulary for every token is the
 * obvious way and the slow one, and none of the filters needs a sorted
 * result: the draw itself works in any order. So:
 *   - top-k keeps a heap of the k best seen so far, rooted at the worst of
 *     them, in one sequential pass over the logits. A token only enters if it
 *     beats the root, which for k << n_vocab happens O(k log(n/k)) times, so
 *     the pass is ~n compares; O(n log k) is the worst case. Only the k
 *     survivors are exponentiated.
 *   - top-p needs Z over the whole vocabulary, so every token is
 *     exponentiated. A bound (derived in smp_sample) then drops the tokens
 *     too light to be in any nucleus; on the peaked rows LLMs mostly emit
 *     that leaves tens to hundreds. The nucleus is found among the rest by
 *     quickselect on mass: partition around a pivot, sum the weight of the
 *     better side, and go into whichever side holds the point where the
 *     running mass crosses top_p * Z. That is O(n) expected and sorts
 *     nothing, so flat rows (high temperature), where the bound drops
 *     little, stay O(n) too; sorting the survivors, as llama2.c does, would
 *     make those O(n log n). After 2 log2(n) rounds without converging
 *     (adversarial pivots) it heap-sorts what is left: the worst case is
 *     O(n log n), never O(n^2).
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

/* Below this many candidates the selections finish by heap sort: partitioning
 * tiny ranges costs more than it saves. */
#define SMP_SMALL 16

/* ---- ranking ------------------------------------------------------------ */

/* A logit as the ranking sees it: NaN sorts with -inf, below every number. */
static inline float key(const float *lg, int32_t i) {
    float x = lg[i];
    return isnan(x) ? -INFINITY : x;
}

/* 1 when token a ranks before token b: higher logit, or equal and lower id. */
static inline int before(const float *lg, int32_t a, int32_t b) {
    float x = key(lg, a), y = key(lg, b);
    return x > y || (x == y && a < b);
}

static inline void swap_ids(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Greedy: the first token in the ranking. Ties go to the lowest id because
 * only a strictly greater logit replaces the best so far. A NaN compares
 * false, so it never replaces anything and the loop needs no isnan(). */
static int32_t argmax(const float *lg, int32_t n) {
    int32_t best = 0;
    float bv = key(lg, 0);
    for (int32_t i = 1; i < n; i++) {
        float v = lg[i];
        if (v > bv) {
            bv = v;
            best = i;
        }
    }
    return best;
}

/* ---- heap of candidates, rooted at the worst --------------------------- */

/* Restore the heap below h[i]: every parent ranks after (is worse than) its
 * children, so h[0] is the worst of h[0..n). */
static void sift_down(int32_t *h, size_t n, size_t i, const float *lg) {
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && before(lg, h[w], h[l])) w = l;
        if (r < n && before(lg, h[w], h[r])) w = r;
        if (w == i) return;
        swap_ids(&h[i], &h[w]);
        i = w;
    }
}

/* Sort h[0..n) best first: heapify with the worst at the root, then move the
 * root to the back n-1 times. In place, no recursion, O(n log n). */
static void heap_sort(int32_t *h, size_t n, const float *lg) {
    for (size_t i = n / 2; i-- > 0;)
        sift_down(h, n, i, lg);
    for (size_t end = n; end > 1; end--) {
        swap_ids(&h[0], &h[end - 1]);
        sift_down(h, end - 1, 0, lg);
    }
}

/* Fill h[0..k) with the k best of tokens 0..n-1 (in heap order, not sorted).
 * 1 <= k < n. */
static void select_top_k(int32_t *h, int32_t n, int32_t k, const float *lg) {
    for (int32_t i = 0; i < k; i++)
        h[i] = i;
    for (size_t i = (size_t)k / 2; i-- > 0;)
        sift_down(h, (size_t)k, i, lg);
    /* Every later token has a higher id than all in the heap, so it loses
     * ties and enters only with a strictly greater logit than the root's
     * (which a NaN, comparing false, never has). */
    float worst = key(lg, h[0]);
    for (int32_t i = k; i < n; i++) {
        float v = lg[i];
        if (v > worst) {
            h[0] = i;
            sift_down(h, (size_t)k, 0, lg);
            worst = key(lg, h[0]);
        }
    }
}

/* ---- quickselect on mass ------------------------------------------------ */

/* Partition ids[lo..hi) (hi - lo >= 3) around the median of its first, middle
 * and last entries. Returns q: ids[lo..q) rank before ids[q], ids(q..hi)
 * after it. */
static size_t partition(int32_t *ids, size_t lo, size_t hi, const float *lg) {
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(lg, ids[mid], ids[lo])) swap_ids(&ids[mid], &ids[lo]);
    if (before(lg, ids[last], ids[lo])) swap_ids(&ids[last], &ids[lo]);
    if (before(lg, ids[last], ids[mid])) swap_ids(&ids[last], &ids[mid]);
    swap_ids(&ids[mid], &ids[last]);   /* the median becomes the pivot */
    int32_t pivot = ids[last];
    size_t q = lo;
    for (size_t j = lo; j < last; j++)
        if (before(lg, ids[j], pivot)) swap_ids(&ids[q++], &ids[j]);
    swap_ids(&ids[q], &ids[last]);
    return q;
}

static int log2_floor(size_t n) {
    int r = 0;
    while (n >>= 1) r++;
    return r;
}

/* Rearrange ids[0..n) so that ids[0..c) is the shortest best-first prefix
 * whose weight w[] sums to >= target, and return c, 1 <= c <= n (n when
 * rounding leaves the whole set short of target).
 *
 * Invariant: ids[0..lo) all rank before ids[lo..hi), which rank before
 * ids[hi..n); acc is the weight of ids[0..lo) and is < target; the answer c
 * lies in (lo, hi]. */
static size_t select_mass(int32_t *ids, size_t n, const float *w, double target,
                          const float *lg) {
    size_t lo = 0, hi = n;
    double acc = 0.0;
    int rounds = 2 * log2_floor(n) + 2;
    while (hi - lo > SMP_SMALL && rounds-- > 0) {
        size_t q = partition(ids, lo, hi, lg);
        double m = acc;
        for (size_t j = lo; j < q; j++)
            m += w[ids[j]];
        if (m >= target) {          /* crossed before the pivot */
            hi = q;
            continue;
        }
        m += w[ids[q]];
        if (m >= target) return q + 1;  /* crossed at the pivot */
        acc = m;                    /* crosses after it */
        lo = q + 1;
    }
    heap_sort(ids + lo, hi - lo, lg);
    for (size_t j = lo; j < hi; j++) {
        acc += w[ids[j]];
        if (acc >= target) return j + 1;
    }
    return hi;
}

/* ---- weights and the draw ---------------------------------------------- */

/* w[i] = exp((l_i - m) / t) for each candidate i (ids[0..c), or tokens 0..c-1
 * when ids is NULL); returns their sum. NaN and -inf weigh 0. */
static double weigh(float *w, const int32_t *ids, size_t c, const float *lg, float m,
                    float t) {
    double z = 0.0;
    if (ids) {
        for (size_t j = 0; j < c; j++) {
            int32_t i = ids[j];
            w[i] = expf((key(lg, i) - m) / t);
            z += w[i];
        }
    } else {
        for (size_t i = 0; i < c; i++) {
            w[i] = expf((key(lg, (int32_t)i) - m) / t);
            z += w[i];
        }
    }
    return z;
}

/* Inverse CDF: the first candidate at which the running weight passes
 * target, a point in [0, total weight). The walk sums in the same order as
 * the caller's total, so it ends at exactly that total. The strict > means a
 * zero-weight token (-inf, NaN, or underflowed) is never the one returned.
 * Should u * total have rounded up to the total, the last token with weight
 * is returned; fallback only answers a row where nothing weighs anything,
 * which the caller has ruled out (its best token weighs 1). */
static int32_t draw(const float *w, const int32_t *ids, size_t c, double target,
                    int32_t fallback) {
    double acc = 0.0;
    int32_t last = fallback;
    for (size_t j = 0; j < c; j++) {
        int32_t i = ids ? ids[j] : (int32_t)j;
        if (w[i] <= 0.0f) continue;
        acc += w[i];
        if (acc > target) return i;
        last = i;
    }
    return last;
}

/* min_p keeps tokens with p_i >= min_p * p_best. The best token weighs
 * exactly 1 (see the top of the file), so that is w_i >= min_p: zero the
 * rest and return the new total. A zero weight is never drawn (draw skips
 * it) and ranks below the top-p cut, so the later filters see the cut row. */
static double cut_min_p(float *w, const int32_t *ids, size_t c, float min_p) {
    double z = 0.0;
    for (size_t j = 0; j < c; j++) {
        int32_t i = ids ? ids[j] : (int32_t)j;
        if (w[i] < min_p) w[i] = 0.0f;
        z += w[i];
    }
    return z;
}

/* ---- row processing ------------------------------------------------------ */

/* The prompt's mark in cnt: a count of generated occurrences fits below it. */
#define IN_PROMPT (1 << 30)

static int has_processing(const smp *s, const smp_hist *h) {
    if (s->n_bias > 0) return 1;
    if (!h) return 0;
    if ((h->n_end > 0 || s->n_stop > 0) && h->n_gen < s->min_tokens) return 1;
    if (s->repetition != 1.0f && h->n_prompt + h->n_gen > 0) return 1;
    return (s->presence != 0.0f || s->frequency != 0.0f) && h->n_gen > 0;
}

/* Count the history into cnt (generated occurrences, plus IN_PROMPT for a
 * prompt token), penalise each distinct token once, and leave cnt all zero
 * again: O(history), never O(vocabulary). The order follows vLLM:
 * repetition first (on the biased logit), then frequency and presence. */
static void apply_penalties(const smp *s, int32_t *cnt, float *row, const smp_hist *h) {
    int rep = s->repetition != 1.0f;
    for (int32_t i = 0; rep && i < h->n_prompt; i++) {
        int32_t t = h->prompt[i];
        if (t >= 0 && t < s->n_vocab) cnt[t] |= IN_PROMPT;
    }
    for (int32_t i = 0; i < h->n_gen; i++) {
        int32_t t = h->gen[i];
        if (t >= 0 && t < s->n_vocab) cnt[t]++;
    }
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass ? h->gen : h->prompt;
        int32_t n = pass ? h->n_gen : (rep ? h->n_prompt : 0);
        for (int32_t i = 0; i < n; i++) {
            int32_t t = ids[i];
            if (t < 0 || t >= s->n_vocab || !cnt[t]) continue;
            int32_t k = cnt[t] & ~IN_PROMPT;
            float x = row[t];
            if (rep) x = x > 0.0f ? x / s->repetition : x * s->repetition;
            if (k > 0) x -= (float)k * s->frequency + s->presence;
            row[t] = x;
            cnt[t] = 0;             /* once per distinct token */
        }
    }
}

/* The processed copy of logits in out: bias, penalties, then the mask. */
static void process_row(const smp *s, int32_t *cnt, float *out, const float *logits, const smp_hist *h) {
    memcpy(out, logits, (size_t)s->n_vocab * sizeof *out);
    for (int32_t i = 0; i < s->n_bias; i++) out[s->bias[i].id] += s->bias[i].bias;
    if (!h) return;
    if (s->repetition != 1.0f || s->presence != 0.0f || s->frequency != 0.0f) apply_penalties(s, cnt, out, h);
    if (h->n_gen >= s->min_tokens) return;
    for (int32_t i = 0; i < h->n_end; i++)
        if (h->end_ids[i] >= 0 && h->end_ids[i] < s->n_vocab) out[h->end_ids[i]] = -INFINITY;
    for (int32_t i = 0; i < s->n_stop; i++) out[s->stop[i]] = -INFINITY;
}

/* ---- log-probabilities --------------------------------------------------- */

/* log p_i = l_i - m - log(sum_j exp(l_j - m)): one pass for the max, one
 * of exps; the top alternatives come from the same worst-rooted heap as
 * top-k, over at most SMP_MAX_TOP entries, then sorted best first. */
int smp_logprobs(const float *row, int32_t n, int32_t chosen, int n_top, smp_lp *lp) {
    if (!row || !lp || n <= 0 || chosen < 0 || chosen >= n || n_top < 0 || n_top > SMP_MAX_TOP)
        return TS_ERR_INVAL;
    float m = key(row, argmax(row, n));
    double z = 0.0;
    if (!isinf(m))
        for (int32_t i = 0; i < n; i++)
            z += exp((double)key(row, i) - m);
    double lse = isinf(m) ? m : m + log(z);
    lp->logprob = (float)((double)key(row, chosen) - lse);
    if (isinf(m)) lp->logprob = key(row, chosen) == m && m > 0 ? 0.0f : -INFINITY;
    if (n_top > n) n_top = n;
    lp->n_top = n_top;
    if (n_top == 0) return 0;
    int32_t h[SMP_MAX_TOP];
    if (n_top < n) {
        select_top_k(h, n, n_top, row);
    } else {
        for (int32_t i = 0; i < n; i++) h[i] = i;
    }
    heap_sort(h, (size_t)n_top, row);
    for (int i = 0; i < n_top; i++) {
        lp->top_id[i] = h[i];
        lp->top_lp[i] = isinf(m) ? (key(row, h[i]) == m && m > 0 ? 0.0f : -INFINITY)
                                 : (float)((double)key(row, h[i]) - lse);
    }
    return 0;
}

/* ---- public ------------------------------------------------------------- */

int smp_init_params(smp *s, int n_vocab, const smp_params *p) {
    if (!s) return TS_ERR_INVAL;
    memset(s, 0, sizeof *s);
    if (!p || n_vocab <= 0) return TS_ERR_INVAL;
    /* Written as negations so that NaN, which fails every comparison, fails
     * validation too. */
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) return TS_ERR_INVAL;
    if (p->top_k < 0) return TS_ERR_INVAL;
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return TS_ERR_INVAL;
    if (p->n_stop < 0 || p->n_stop > SMP_MAX_STOP) return TS_ERR_INVAL;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return TS_ERR_INVAL;
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) return TS_ERR_INVAL;
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) return TS_ERR_INVAL;
    if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty)) return TS_ERR_INVAL;
    if (p->n_bias < 0 || p->n_bias > SMP_MAX_BIAS || (p->n_bias > 0 && !p->bias)) return TS_ERR_INVAL;
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].id < 0 || p->bias[i].id >= n_vocab ||
            !(p->bias[i].bias >= -100.0f && p->bias[i].bias <= 100.0f))
            return TS_ERR_INVAL;
    if (p->min_tokens < 0 || p->top_logprobs < 0 || p->top_logprobs > SMP_MAX_TOP) return TS_ERR_INVAL;
    if (p->n_stop > 0 && !p->stop_ids) return TS_ERR_INVAL;
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= n_vocab) return TS_ERR_INVAL;

    s->n_vocab = n_vocab;
    s->temperature = p->temperature;
    /* Keeping n_vocab or more tokens keeps them all: the same as off. */
    s->top_k = p->top_k < n_vocab ? p->top_k : 0;
    s->top_p = p->top_p;
    s->n_stop = p->n_stop;
    if (p->n_stop > 0)
        memcpy(s->stop, p->stop_ids, (size_t)p->n_stop * sizeof *s->stop);
    /* Stream 0 keeps rng_seed(seed), the stream a single request always
     * drew from, so a seeded request reproduces across versions. */
    if (p->stream) rng_seed_stream(&s->rng, p->seed, p->stream);
    else rng_seed(&s->rng, p->seed);
    s->min_p = p->min_p;
    s->presence = p->presence_penalty;
    s->frequency = p->frequency_penalty;
    s->repetition = p->repetition_penalty == 0.0f ? 1.0f : p->repetition_penalty;
    s->n_bias = p->n_bias;
    if (p->n_bias > 0) memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    s->min_tokens = p->min_tokens;
    s->top_logprobs = p->top_logprobs;
    return 0;
}

int smp_init(smp *s, int n_vocab, const smp_params *p) {
    int rc = smp_init_params(s, n_vocab, p);
    if (rc) {
        if (s) memset(s, 0, sizeof *s);
        return rc;
    }
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    if (!s->idx) goto err;
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->w) goto err;
    s->row = malloc((size_t)n_vocab * sizeof *s->row);
    if (!s->row) goto err;
    s->cnt = calloc((size_t)n_vocab, sizeof *s->cnt);
    if (!s->cnt) goto err;
    return 0;

err:
    smp_deinit(s);
    return TS_ERR_NOMEM;
}

int32_t smp_sample_with(smp *s, const smp *scratch, const float *logits) {
    if (!s || !scratch || scratch->n_vocab != s->n_vocab) return TS_ERR_INVAL;
    smp view = *s;
    view.idx = scratch->idx;
    view.w = scratch->w;
    int32_t tok = smp_sample(&view, logits);
    s->rng = view.rng;
    return tok;
}

void smp_deinit(smp *s) {
    if (!s) return;
    free(s->idx);
    free(s->w);
    free(s->row);
    free(s->cnt);
    memset(s, 0, sizeof *s);
}

int32_t smp_sample(smp *s, const float *logits) {
    if (!s || !logits || !s->idx || !s->w) return TS_ERR_INVAL;
    const int32_t n = s->n_vocab;
    if ((s->temperature == 0.0f  || s->top_k == 1)) return argmax(logits, n);

    /* One draw per sampled token, drawn first, so that how the row looks
     * (degenerate or not) never shifts the stream for later tokens. */
    const double u = rng_uniform(&s->rng);
    float *w = s->w;

    /* Candidates: ids[0..c), or every token 0..n-1 while ids is NULL. */
    int32_t *ids = NULL;
    size_t c = (size_t)n;
    int32_t best;
    if (s->top_k > 0) {
        ids = s->idx;
        c = (size_t)s->top_k;
        select_top_k(ids, n, s->top_k, logits);
        best = ids[0];
        for (size_t j = 1; j < c; j++)
            if (before(logits, ids[j], best)) best = ids[j];
    } else {
        best = argmax(logits, n);
    }
    const float m = key(logits, best);
    /* All -inf/NaN: no mass anywhere, so follow greedy. A +inf logit would
     * make (l - m) NaN; it outweighs every finite one, so it wins outright. */
    if (isinf(m)) return best;

    double z = weigh(w, ids, c, logits, m, s->temperature);
    if (s->min_p > 0.0f) z = cut_min_p(w, ids, c, s->min_p);

    if (s->top_p < 1.0f) {
        double target = (double)s->top_p * z;
        if (!ids && n > 1) {
            /* Only tokens that can be in the nucleus go to the quickselect.
             * Say the nucleus ends at rank r >= 1 with probability q. The
             * first r tokens hold less than top_p (else it would end
             * sooner), and the n - r tokens from rank r on hold at most q
             * each, so 1 < top_p + (n - 1) q: q > (1 - top_p) / (n - 1).
             * Every nucleus token ranks at or before the last one, so all
             * of them but the best clear that bar. On a peaked distribution
             * this leaves tens to hundreds of tokens; on a flat one it
             * leaves most, and the quickselect keeps that O(n). The 0.999
             * keeps tokens that float rounding might put on either side. */
            const float cut = (float)(0.999 * (1.0 - s->top_p) * z / (n - 1));
            ids = s->idx;
            c = 0;
            ids[c++] = best;
            for (int32_t i = 0; i < n; i++)
                if (w[i] >= cut && i != best) ids[c++] = i;
        }
        if (ids) {
            c = select_mass(ids, c, w, target, logits);
            z = 0.0;
            for (size_t j = 0; j < c; j++)
                z += w[ids[j]];
        }
    }
    return draw(w, ids, c, u * z, best);
}

int32_t smp_sample_full(smp *s, const smp *scratch, const float *logits, const smp_hist *h, smp_lp *lp) {
    if (!s || !scratch || !logits || scratch->n_vocab != s->n_vocab || !scratch->idx || !scratch->w ||
        !scratch->row || !scratch->cnt)
        return TS_ERR_INVAL;
    const float *row = logits;
    if (has_processing(s, h)) {
        process_row(s, scratch->cnt, scratch->row, logits, h);
        row = scratch->row;
    }
    smp view = *s;
    view.idx = scratch->idx;
    view.w = scratch->w;
    int32_t tok = smp_sample(&view, row);
    s->rng = view.rng;
    if (tok >= 0 && !(row[tok] > -INFINITY)) return SMP_NO_TOKEN; /* all -inf or NaN */
    if (tok >= 0 && lp) smp_logprobs(row, s->n_vocab, tok, s->top_logprobs, lp);
    return tok;
}

int smp_is_stop(const smp *s, int32_t tok) {
    if (!s) return 0;
    for (int32_t i = 0; i < s->n_stop; i++)
        if (s->stop[i] == tok) return 1;
    return 0;
}
