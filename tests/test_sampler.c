/* test_sampler.c - unit tests of the token sampler (src/engine/sampler.c).
 *
 * Exact properties (greedy, ties, determinism, filters that collapse to
 * greedy, bad parameters, NaN) are checked exactly; the sampling law is
 * checked statistically with fixed seeds, so every run draws the same numbers
 * and a pass or a failure is reproducible. The filters are also checked
 * against an independent reference that sorts the whole vocabulary with
 * qsort. Leaks are caught by building with -fsanitize=address (LeakSanitizer
 * runs at exit).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "sampler.h"

/* ---- helpers ------------------------------------------------------------ */

static smp_params params(float t, int k, float p, uint64_t seed) {
    smp_params sp = {.temperature = t, .top_k = k, .top_p = p, .seed = seed};
    return sp;
}

/* A small independent generator for test data, so the data does not share
 * code with the sampler's own stream. */
static uint64_t lcg_state;
static double lcg_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}

/* The greedy answer, written out independently of the sampler. */
static int32_t ref_argmax(const float *lg, int n) {
    int32_t best = -1;
    for (int i = 0; i < n; i++) {
        if (isnan(lg[i])) continue;
        if (best < 0 || lg[i] > lg[best]) best = i;
    }
    return best < 0 ? 0 : best;
}

/* Draw `draws` tokens with params p from logits and compare the frequencies
 * with expect[] (over all n_vocab ids; tokens with expect 0 must never come
 * up): each within +-0.01 absolute, and Pearson's chi-square below the
 * 0.001 critical value for its degrees of freedom. */
static void check_law(const float *logits, int n_vocab, const double *expect,
                      smp_params p, int draws) {
    smp s;
    assert_int_equal(smp_init(&s, n_vocab, &p), 0);
    int *count = calloc((size_t)n_vocab, sizeof *count);
    assert_non_null(count);
    for (int d = 0; d < draws; d++) {
        int32_t t = smp_sample(&s, logits);
        assert_true(t >= 0 && t < n_vocab);
        count[t]++;
    }
    /* chi-square critical values at alpha = 0.001, df = 1..5 */
    static const double crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52};
    double chi2 = 0.0;
    int live = 0;
    for (int i = 0; i < n_vocab; i++) {
        if (expect[i] == 0.0) {
            if (count[i] != 0)
                fail_msg("token %d has probability 0 but came up %d times", i, count[i]);
            continue;
        }
        live++;
        double f = (double)count[i] / draws;
        if (fabs(f - expect[i]) > 0.01)
            fail_msg("token %d: frequency %.4f, expected %.4f", i, f, expect[i]);
        double e = expect[i] * draws;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    assert_true(live >= 1 && live <= 6);
    if (live > 1 && chi2 > crit[live - 1])
        fail_msg("chi-square %.2f over %d tokens exceeds %.2f", chi2, live, crit[live - 1]);
    free(count);
    smp_deinit(&s);
}

/* The four-token law used throughout: ids 0..3 with these probabilities, in
 * no particular order so that rank and id differ. Ranked: 1, 3, 0, 2. */
static const double P4[4] = {0.20, 0.40, 0.15, 0.25};

static void p4_logits(float *lg) {
    for (int i = 0; i < 4; i++)
        lg[i] = (float)log(P4[i]) + 3.0f;   /* a shift must not matter */
}

/* ---- greedy ------------------------------------------------------------- */

static void test_greedy_argmax_and_ties(void **state) {
    (void)state;
    smp_params p = params(0.0f, 0, 1.0f, 1);
    smp s;
    assert_int_equal(smp_init(&s, 6, &p), 0);

    const float a[6] = {0.1f, -2.0f, 3.5f, 3.4f, -1e30f, 0.0f};
    assert_int_equal(smp_sample(&s, a), 2);
    const float ties[6] = {1.0f, 7.0f, 2.0f, 7.0f, 7.0f, -3.0f};
    assert_int_equal(smp_sample(&s, ties), 1);
    const float last[6] = {-5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f};
    assert_int_equal(smp_sample(&s, last), 5);
    const float all_eq[6] = {2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f};
    assert_int_equal(smp_sample(&s, all_eq), 0);

    /* Random rows against the independent argmax. */
    lcg_state = 42;
    float r[6];
    for (int it = 0; it < 1000; it++) {
        for (int i = 0; i < 6; i++)
            r[i] = (float)floor(lcg_uniform() * 4.0);  /* many ties */
        assert_int_equal(smp_sample(&s, r), ref_argmax(r, 6));
    }
    smp_deinit(&s);
}

/* ---- determinism -------------------------------------------------------- */

static void draw_seq(smp_params p, int n_vocab, const float *lg, int32_t *out, int n) {
    smp s;
    assert_int_equal(smp_init(&s, n_vocab, &p), 0);
    for (int i = 0; i < n; i++)
        out[i] = smp_sample(&s, lg);
    smp_deinit(&s);
}

static void test_seed_determinism(void **state) {
    (void)state;
    enum { V = 100, N = 500 };
    float flat[V];
    for (int i = 0; i < V; i++)
        flat[i] = 0.0f;
    int32_t a[N], b[N], c[N];
    /* Plain, top-k and top-p paths each. */
    const smp_params ps[3] = {params(1.0f, 0, 1.0f, 7), params(1.0f, 20, 1.0f, 7),
                              params(1.0f, 0, 0.5f, 7)};
    for (int k = 0; k < 3; k++) {
        smp_params p = ps[k];
        draw_seq(p, V, flat, a, N);
        draw_seq(p, V, flat, b, N);
        assert_memory_equal(a, b, sizeof a);
        p.seed = 8;
        draw_seq(p, V, flat, c, N);
        int same = 0;
        for (int i = 0; i < N; i++)
            same += a[i] == c[i];
        /* Independent streams agree on ~1/20 .. 1/100 of the draws. */
        assert_true(same < N / 4);
    }
    /* Seed 0 is a seed like any other. */
    draw_seq(params(1.0f, 0, 1.0f, 0), V, flat, a, N);
    draw_seq(params(1.0f, 0, 1.0f, 0), V, flat, b, N);
    assert_memory_equal(a, b, sizeof a);
}

/* top_k >= n_vocab keeps everything: the same stream as top_k off. */
static void test_top_k_at_least_vocab_is_off(void **state) {
    (void)state;
    enum { V = 50, N = 300 };
    float lg[V];
    lcg_state = 3;
    for (int i = 0; i < V; i++)
        lg[i] = (float)(lcg_uniform() * 4.0);
    int32_t a[N], b[N], c[N];
    draw_seq(params(1.0f, 0, 1.0f, 11), V, lg, a, N);
    draw_seq(params(1.0f, V, 1.0f, 11), V, lg, b, N);
    draw_seq(params(1.0f, 1000, 1.0f, 11), V, lg, c, N);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(a, c, sizeof a);
}

/* ---- filters that collapse to greedy ------------------------------------ */

/* Rows of n distinct logits spaced `gap` apart, shuffled; some rows get a
 * tie at the top. */
static void shuffled_row(float *lg, int n, float gap, int tie_top) {
    for (int i = 0; i < n; i++)
        lg[i] = (float)i * gap - 20.0f;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(lcg_uniform() * (i + 1));
        float t = lg[i];
        lg[i] = lg[j];
        lg[j] = t;
    }
    if (tie_top) {
        int top = ref_argmax(lg, n);
        int other = (int)(lcg_uniform() * n);
        lg[other] = lg[top];
    }
}

static void expect_greedy(smp_params p, int n, float gap, int rows) {
    smp s;
    assert_int_equal(smp_init(&s, n, &p), 0);
    float *lg = malloc((size_t)n * sizeof *lg);
    assert_non_null(lg);
    for (int r = 0; r < rows; r++) {
        shuffled_row(lg, n, gap, r % 3 == 0);
        assert_int_equal(smp_sample(&s, lg), ref_argmax(lg, n));
    }
    free(lg);
    smp_deinit(&s);
}

static void test_small_temperature_is_greedy(void **state) {
    (void)state;
    lcg_state = 5;
    /* At T = 1e-3 a gap of 0.05 is a factor exp(-50) ~ 2e-22: never drawn.
     * Ties at the top are real ties, though, so rows here have none. */
    smp_params p = params(1e-3f, 0, 1.0f, 99);
    smp s;
    assert_int_equal(smp_init(&s, 1000, &p), 0);
    float lg[1000];
    for (int r = 0; r < 300; r++) {
        shuffled_row(lg, 1000, 0.05f, 0);
        assert_int_equal(smp_sample(&s, lg), ref_argmax(lg, 1000));
    }
    smp_deinit(&s);
}

static void test_top_k_one_is_greedy(void **state) {
    (void)state;
    lcg_state = 6;
    const float temps[] = {0.5f, 1.0f, 5.0f, 100.0f};
    for (int i = 0; i < 4; i++)
        expect_greedy(params(temps[i], 1, 1.0f, 3), 1000, 0.01f, 100);
}

static void test_tiny_top_p_is_greedy(void **state) {
    (void)state;
    lcg_state = 7;
    /* Small vocabularies take the heap-sort path, large ones quickselect. */
    const int sizes[] = {5, 17, 1000, 40000};
    for (int i = 0; i < 4; i++) {
        expect_greedy(params(1.0f, 0, 1e-6f, 4), sizes[i], 0.001f, 50);
        expect_greedy(params(3.0f, 50 < sizes[i] ? 50 : 0, 1e-6f, 4), sizes[i], 0.001f, 50);
    }
}

/* ---- the sampling law --------------------------------------------------- */

static void test_law_four_tokens(void **state) {
    (void)state;
    float lg[4];
    p4_logits(lg);
    enum { D = 100000 };

    check_law(lg, 4, P4, params(1.0f, 0, 1.0f, 1001), D);

    /* top_k = 2 keeps ids 1 and 3, renormalised over .65. */
    const double k2[4] = {0, 0.40 / 0.65, 0, 0.25 / 0.65};
    check_law(lg, 4, k2, params(1.0f, 2, 1.0f, 1002), D);

    /* top_p = 0.7: .40 + .25 = .65 falls short, so id 0 joins; mass .85. */
    const double p7[4] = {0.20 / 0.85, 0.40 / 0.85, 0, 0.25 / 0.85};
    check_law(lg, 4, p7, params(1.0f, 0, 0.7f, 1003), D);

    /* Temperature 2 takes square roots of the probabilities. */
    double t2[4], z = 0;
    for (int i = 0; i < 4; i++)
        z += t2[i] = sqrt(P4[i]);
    for (int i = 0; i < 4; i++)
        t2[i] /= z;
    check_law(lg, 4, t2, params(2.0f, 0, 1.0f, 1004), D);

    /* top_k = 3 then top_p = 0.75 over the renormalised three: .47 + .29
     * crosses .75 after two tokens. (Measured against the unrenormalised
     * mass it would take three: .40 + .25 = .65 < .75.) */
    const double k3p75[4] = {0, 0.40 / 0.65, 0, 0.25 / 0.65};
    check_law(lg, 4, k3p75, params(1.0f, 3, 0.75f, 1005), D);
}

/* The same law hidden in a large vocabulary of negligible, -inf and NaN
 * tokens, so the heap and the quickselect do real work. */
static void test_law_in_large_vocab(void **state) {
    (void)state;
    enum { V = 1024, D = 50000 };
    static const int32_t at[4] = {701, 17, 1023, 512};
    float *lg = malloc(V * sizeof *lg);
    double *e = calloc(V, sizeof *e);
    assert_non_null(lg);
    assert_non_null(e);
    lcg_state = 8;
    for (int i = 0; i < V; i++) {
        double r = lcg_uniform();
        /* exp(-40 .. -30) each: about 1e-10 in all, never seen in D draws. */
        lg[i] = r < 0.05 ? NAN : r < 0.1 ? -INFINITY : (float)(-30.0 - 10.0 * lcg_uniform());
    }
    float four[4];
    p4_logits(four);
    for (int i = 0; i < 4; i++)
        lg[at[i]] = four[i] - 3.0f;

    for (int i = 0; i < 4; i++)
        e[at[i]] = P4[i];
    check_law(lg, V, e, params(1.0f, 0, 1.0f, 2001), D);

    memset(e, 0, V * sizeof *e);
    e[at[1]] = 0.40 / 0.65;
    e[at[3]] = 0.25 / 0.65;
    check_law(lg, V, e, params(1.0f, 2, 1.0f, 2002), D);

    memset(e, 0, V * sizeof *e);
    e[at[0]] = 0.20 / 0.85;
    e[at[1]] = 0.40 / 0.85;
    e[at[3]] = 0.25 / 0.85;
    check_law(lg, V, e, params(1.0f, 0, 0.7f, 2003), D);
    check_law(lg, V, e, params(1.0f, 100, 0.7f, 2004), D);
    free(lg);
    free(e);
}

/* ---- against a full-sort reference ------------------------------------- */

static const float *ref_lg;
static float ref_key(int32_t i) {
    return isnan(ref_lg[i]) ? -INFINITY : ref_lg[i];
}
static int ref_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float kx = ref_key(x), ky = ref_key(y);
    if (kx != ky) return kx > ky ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Rank all tokens with qsort, keep k, then the shortest prefix reaching
 * p * (mass of the k). Fills rank (best first) and prob (renormalised, by
 * rank); returns the number kept, or 0 when the top-p boundary sits within
 * 1e-6 of the mass of a prefix sum around it (too close to call when the
 * sampler sums float weights). */
static int ref_filter(const float *lg, int n, float t, int k, float p, int32_t *rank,
                      double *prob) {
    ref_lg = lg;
    for (int i = 0; i < n; i++)
        rank[i] = i;
    qsort(rank, (size_t)n, sizeof *rank, ref_cmp);
    int c = (k > 0 && k < n) ? k : n;
    double m = ref_key(rank[0]), z = 0;
    for (int j = 0; j < c; j++)
        z += prob[j] = exp(((double)ref_key(rank[j]) - m) / t);
    if (p < 1.0f) {
        double target = (double)p * z, acc = 0;
        int j = 0;
        while (j < c) {
            double before = acc;
            acc += prob[j++];
            if (acc >= target) {
                if (target - before < 1e-6 * z || acc - target < 1e-6 * z) return 0;
                break;
            }
        }
        c = j;
        z = acc;
    }
    for (int j = 0; j < c; j++)
        prob[j] /= z;
    return c;
}

static void test_filters_match_reference(void **state) {
    (void)state;
    enum { V = 3000, D = 4000 };
    struct { float t; int k; float p; } cases[] = {
        {1.0f, 0, 0.9f}, {0.7f, 0, 0.5f}, {1.5f, 0, 0.99f}, {1.0f, 50, 1.0f},
        {1.0f, 50, 0.8f}, {2.0f, 500, 0.95f}, {1.0f, V - 1, 0.9f}, {1.0f, 7, 0.3f},
        {5.0f, 0, 0.9f}, {0.3f, 2, 1.0f},
    };
    float *lg = malloc(V * sizeof *lg);
    int32_t *rank = malloc(V * sizeof *rank);
    int32_t *pos = malloc(V * sizeof *pos);
    double *prob = malloc(V * sizeof *prob);
    int *count = malloc(V * sizeof *count);
    assert_true(lg && rank && pos && prob && count);
    lcg_state = 9;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int c;
        do {
            /* Logits on a grid of 0.25 make many ties, so cuts fall inside
             * runs of equal logits and the id tie-break decides them. */
            for (int i = 0; i < V; i++) {
                double g = 0;
                for (int j = 0; j < 4; j++)
                    g += lcg_uniform();
                lg[i] = (float)(floor((g - 2.0) * 12.0) * 0.25);
            }
            c = ref_filter(lg, V, cases[ci].t, cases[ci].k, cases[ci].p, rank, prob);
        } while (c == 0);
        for (int j = 0; j < V; j++)
            pos[rank[j]] = j;

        smp_params p = params(cases[ci].t, cases[ci].k, cases[ci].p, 3000 + ci);
        smp s;
        assert_int_equal(smp_init(&s, V, &p), 0);
        memset(count, 0, V * sizeof *count);
        for (int d = 0; d < D; d++) {
            int32_t tok = smp_sample(&s, lg);
            assert_true(tok >= 0 && tok < V);
            if (pos[tok] >= c)
                fail_msg("case %zu: token %d has rank %d, reference keeps %d",
                         ci, tok, pos[tok], c);
            count[pos[tok]]++;
        }
        /* The best few ranks come up as often as the renormalised reference
         * says (5 standard deviations, plus slack for the float sums). */
        for (int j = 0; j < 3 && j < c; j++) {
            double f = (double)count[j] / D;
            double sd = sqrt(prob[j] * (1 - prob[j]) / D);
            if (fabs(f - prob[j]) > 5 * sd + 1e-3)
                fail_msg("case %zu: rank %d frequency %.4f, reference %.4f", ci, j, f,
                         prob[j]);
        }
        smp_deinit(&s);
    }
    free(lg);
    free(rank);
    free(pos);
    free(prob);
    free(count);
}

/* Cuts that fall inside a run of equal logits keep the lowest ids of the
 * run, for top-k (the heap) and for top-p (the quickselect) alike. */
static void test_ties_at_the_cut(void **state) {
    (void)state;
    enum { V = 1000, TIED = 40, D = 20000 };
    float lg[V];
    int32_t tied[TIED];
    int count[V];
    for (int i = 0; i < V; i++)
        lg[i] = -INFINITY;
    /* 40 equal logits at scattered ids, listed in increasing id order. */
    for (int j = 0; j < TIED; j++) {
        tied[j] = (int32_t)(j * 24 + (j * 7) % 5);
        lg[tied[j]] = 1.5f;
    }
    /* top_k = 5 keeps tied[0..5); top_p = 0.21 of 40 equal weights needs
     * 9 of them (8 make 0.2, short of it); top_k 20 then top_p 0.31: 7.
     * top_p = 0.5 is exact in binary and each weight is exactly 1, so 20
     * tokens reach exactly half: mass >= top_p, not >, keeps 20. */
    const struct { smp_params p; int keep; } cases[] = {
        {params(1.0f, 5, 1.0f, 51), 5},
        {params(1.0f, 0, 0.21f, 52), 9},
        {params(1.0f, 20, 0.31f, 53), 7},
        {params(1.0f, 0, 0.5f, 54), 20},
        {params(1.0f, 8, 0.25f, 55), 2},
    };
    for (int ci = 0; ci < 5; ci++) {
        smp s;
        assert_int_equal(smp_init(&s, V, &cases[ci].p), 0);
        memset(count, 0, sizeof count);
        for (int d = 0; d < D; d++) {
            int32_t t = smp_sample(&s, lg);
            assert_true(t >= 0 && t < V);
            count[t]++;
        }
        for (int j = 0; j < TIED; j++) {
            int kept = j < cases[ci].keep;
            double f = (double)count[tied[j]] / D, e = kept ? 1.0 / cases[ci].keep : 0.0;
            if (fabs(f - e) > 0.02)
                fail_msg("case %d: tied token %d (id %d) frequency %.4f, expected %.4f",
                         ci, j, tied[j], f, e);
        }
        smp_deinit(&s);
    }
}

/* The bound that drops tokens before the top-p quickselect,
 * p > (1 - top_p) / (n - 1), is nearly tight on a row where the best token
 * falls short of top_p by half of q and the other n - 1 tokens all have q:
 * then q = (1 - top_p) / (n - 1.5), only 1.0005x the bound, and the nucleus
 * is the best plus one of them (the lowest id). */
static void test_top_p_bound_tight(void **state) {
    (void)state;
    enum { V = 1000, BEST = 700, D = 20000 };
    const double q = 0.5 / (V - 1.5), pbest = 0.5 - q / 2;
    float lg[V];
    for (int i = 0; i < V; i++)
        lg[i] = (float)log(q);
    lg[BEST] = (float)log(pbest);
    smp s;
    smp_params p = params(1.0f, 0, 0.5f, 61);
    assert_int_equal(smp_init(&s, V, &p), 0);
    int second = 0;
    for (int d = 0; d < D; d++) {
        int32_t t = smp_sample(&s, lg);
        if (t == 0) second++;
        else if (t != BEST) fail_msg("token %d drawn outside the nucleus {%d, 0}", t, BEST);
    }
    /* Expected q / (pbest + q) * D ~ 20. */
    if (second < 5 || second > 45) fail_msg("second token drawn %d times, expected ~20", second);
    smp_deinit(&s);
}

/* Many rows of near-flat logits, so the nucleus boundary lands on every kind
 * of position the quickselect can put it (inside a partition, on a pivot,
 * in the final sorted run): each row must draw only from the reference
 * nucleus and must draw its last member. */
static void test_nucleus_boundary_many_rows(void **state) {
    (void)state;
    enum { V = 100, ROWS = 200, D = 2000 };
    float lg[V];
    int32_t rank[V], pos[V];
    double prob[V];
    int count[V];
    lcg_state = 10;
    int checked = 0;
    for (int r = 0; r < ROWS; r++) {
        float top_p = (float)(0.3 + 0.65 * lcg_uniform());
        for (int i = 0; i < V; i++)
            lg[i] = (float)(0.5 * lcg_uniform());
        int c = ref_filter(lg, V, 1.0f, 0, top_p, rank, prob);
        if (c == 0) continue;   /* too close to call */
        for (int j = 0; j < V; j++)
            pos[rank[j]] = j;
        smp_params p = params(1.0f, r % 2 ? 0 : 60, top_p, 4000 + r);
        if (p.top_k) {
            c = ref_filter(lg, V, 1.0f, 60, top_p, rank, prob);
            if (c == 0) continue;
        }
        smp s;
        assert_int_equal(smp_init(&s, V, &p), 0);
        memset(count, 0, sizeof count);
        for (int d = 0; d < D; d++) {
            int32_t t = smp_sample(&s, lg);
            assert_true(t >= 0 && t < V);
            if (pos[t] >= c)
                fail_msg("row %d: token of rank %d drawn, nucleus has %d", r, pos[t], c);
            count[pos[t]]++;
        }
        /* Expected at least ~10 times; never seeing it means it was cut. */
        if (prob[c - 1] * D >= 10.0) {
            checked++;
            if (count[c - 1] == 0)
                fail_msg("row %d: nucleus of %d never drew its last member", r, c);
        }
        smp_deinit(&s);
    }
    assert_true(checked > ROWS / 2);
}

/* ---- parameters --------------------------------------------------------- */

static void expect_inval(int n_vocab, smp_params p) {
    smp s;
    memset(&s, 0xab, sizeof s);   /* init must not trust what was there */
    assert_int_equal(smp_init(&s, n_vocab, &p), TS_ERR_INVAL);
    smp_deinit(&s);               /* harmless after a failed init */
}

static void test_invalid_params(void **state) {
    (void)state;
    const int32_t stops[3] = {1, 2, 3};
    int32_t many[SMP_MAX_STOP + 1];
    for (int i = 0; i <= SMP_MAX_STOP; i++)
        many[i] = i;
    smp_params ok = params(1.0f, 0, 1.0f, 0);
    smp_params p;

    assert_int_equal(smp_init(NULL, 10, &ok), TS_ERR_INVAL);
    smp s;
    assert_int_equal(smp_init(&s, 10, NULL), TS_ERR_INVAL);
    smp_deinit(&s);
    expect_inval(0, ok);
    expect_inval(-5, ok);

    const float bad_t[] = {-1.0f, -1e-30f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++) {
        p = ok;
        p.temperature = bad_t[i];
        expect_inval(10, p);
    }
    p = ok;
    p.top_k = -1;
    expect_inval(10, p);
    const float bad_p[] = {0.0f, -0.0f, -0.5f, 1.0001f, 2.0f, NAN, INFINITY};
    for (int i = 0; i < 7; i++) {
        p = ok;
        p.top_p = bad_p[i];
        expect_inval(10, p);
    }
    p = ok;
    p.n_stop = -1;
    expect_inval(10, p);
    p = ok;
    p.stop_ids = many;
    p.n_stop = SMP_MAX_STOP + 1;
    expect_inval(100, p);
    p = ok;
    p.n_stop = 2;   /* stop_ids NULL */
    expect_inval(10, p);
    p = ok;
    p.stop_ids = stops;
    p.n_stop = 3;
    expect_inval(3, p);   /* id 3 is outside a 3-token vocabulary */
    const int32_t neg[1] = {-1};
    p.stop_ids = neg;
    p.n_stop = 1;
    expect_inval(10, p);

    /* The edges that are valid. */
    const smp_params valid[] = {params(0.0f, 0, 1.0f, 0), params(1e-30f, 0, 1e-30f, 0),
                                params(1e30f, 1000, 1.0f, UINT64_MAX)};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(smp_init(&s, 1, &valid[i]), 0);
        float one = 0.5f;
        assert_int_equal(smp_sample(&s, &one), 0);
        smp_deinit(&s);
    }
    p = ok;
    p.stop_ids = many;
    p.n_stop = SMP_MAX_STOP;
    assert_int_equal(smp_init(&s, SMP_MAX_STOP, &p), 0);
    smp_deinit(&s);
    smp_deinit(&s);   /* twice is harmless */

    /* Calls on nothing. */
    float lg[10] = {0};
    assert_int_equal(smp_sample(NULL, lg), TS_ERR_INVAL);
    assert_int_equal(smp_init(&s, 10, &ok), 0);
    assert_int_equal(smp_sample(&s, NULL), TS_ERR_INVAL);
    smp_deinit(&s);
    assert_int_equal(smp_sample(&s, lg), TS_ERR_INVAL);   /* after deinit */
    assert_int_equal(smp_is_stop(NULL, 1), 0);
}

/* ---- non-finite logits -------------------------------------------------- */

static void test_nan_logits(void **state) {
    (void)state;
    smp s;
    /* Greedy skips NaN, wherever it sits. */
    assert_int_equal(smp_init(&s, 5, &(smp_params){.top_p = 1.0f}), 0);
    const float g1[5] = {NAN, 1.0f, 3.0f, NAN, 3.0f};
    assert_int_equal(smp_sample(&s, g1), 2);
    const float g2[5] = {NAN, NAN, NAN, NAN, NAN};
    assert_int_equal(smp_sample(&s, g2), 0);
    const float g3[5] = {-INFINITY, NAN, -INFINITY, -5.0f, NAN};
    assert_int_equal(smp_sample(&s, g3), 3);
    smp_deinit(&s);

    /* Sampling never draws a NaN or -inf token: plain, top-k wider than the
     * finite tokens (so NaN ids sit among the candidates), and top-p. */
    enum { V = 64 };
    float lg[V];
    for (int i = 0; i < V; i++)
        lg[i] = (i % 7 == 3) ? (float)(i % 5) : (i % 2 ? NAN : -INFINITY);
    const smp_params ps[] = {params(1.0f, 0, 1.0f, 1), params(1.0f, 20, 1.0f, 2),
                             params(1.0f, 0, 0.9f, 3), params(10.0f, 5, 0.99f, 4)};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(smp_init(&s, V, &ps[k]), 0);
        for (int d = 0; d < 5000; d++) {
            int32_t t = smp_sample(&s, lg);
            assert_true(t >= 0 && t < V);
            assert_true(isfinite(lg[t]));
        }
        /* A row with no finite logit at all still gives a valid id. */
        float none[V];
        for (int i = 0; i < V; i++)
            none[i] = i % 2 ? NAN : -INFINITY;
        assert_int_equal(smp_sample(&s, none), 0);
        /* +inf outweighs everything: the lowest such id. */
        float inf[V];
        memcpy(inf, lg, sizeof inf);
        inf[40] = INFINITY;
        inf[50] = INFINITY;
        for (int d = 0; d < 20; d++)
            assert_int_equal(smp_sample(&s, inf), 40);
        /* Extreme finite logits with a tiny temperature: no overflow to NaN. */
        float ext[V];
        for (int i = 0; i < V; i++)
            ext[i] = i % 2 ? -FLT_MAX : FLT_MAX * 0.5f;
        ext[33] = FLT_MAX;
        for (int d = 0; d < 20; d++)
            assert_int_equal(smp_sample(&s, ext), 33);
        smp_deinit(&s);
    }
}

/* ---- stop ids ----------------------------------------------------------- */

static void test_stop_ids(void **state) {
    (void)state;
    int32_t stops[3] = {2, 9, 0};
    smp_params p = params(1.0f, 0, 1.0f, 0);
    p.stop_ids = stops;
    p.n_stop = 3;
    smp s;
    assert_int_equal(smp_init(&s, 10, &p), 0);
    stops[0] = 5;   /* the sampler kept its own copy */
    assert_true(smp_is_stop(&s, 2));
    assert_true(smp_is_stop(&s, 9));
    assert_true(smp_is_stop(&s, 0));
    assert_false(smp_is_stop(&s, 5));
    assert_false(smp_is_stop(&s, 1));
    assert_false(smp_is_stop(&s, -1));
    assert_false(smp_is_stop(&s, 10));
    smp_deinit(&s);

    p.n_stop = 0;
    p.stop_ids = NULL;
    assert_int_equal(smp_init(&s, 10, &p), 0);
    for (int i = -1; i <= 10; i++)
        assert_false(smp_is_stop(&s, i));
    smp_deinit(&s);
}

/* A sequence sampling through a shared scratch draws exactly the stream
 * it would with its own. */
static void test_shared_scratch(void **state) {
    (void)state;
    enum { V = 300 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)((i * 37) % 101) / 25.0f;
    smp_params p = params(0.9f, 40, 0.95f, 1234);
    smp own, mine, scratch;
    assert_int_equal(smp_init(&own, V, &p), 0);
    assert_int_equal(smp_init_params(&mine, V, &p), 0);
    smp_params q = params(0.0f, 0, 1.0f, 1);
    assert_int_equal(smp_init(&scratch, V, &q), 0);
    assert_int_equal(smp_sample(&mine, logits), TS_ERR_INVAL); /* no scratch of its own */
    for (int i = 0; i < 200; i++)
        assert_int_equal(smp_sample(&own, logits), smp_sample_with(&mine, &scratch, logits));
    smp_params r = p;
    smp other;
    assert_int_equal(smp_init_params(&other, V + 1, &r), 0);
    assert_int_equal(smp_sample_with(&other, &scratch, logits), TS_ERR_INVAL); /* size mismatch */
    smp_deinit(&own);
    smp_deinit(&mine);
    smp_deinit(&scratch);
    smp_deinit(&other);
}

/* ---- row processing and logprobs ---------------------------------------- */

/* Greedy on a processed row: the processing alone decides the winner, so
 * each edit is checked exactly by which token wins and by the logprobs,
 * which are the log_softmax of the processed row. */
static int32_t greedy_full(const smp_params *p, const float *lg, int n, const smp_hist *h, smp_lp *lp) {
    smp s;
    assert_int_equal(smp_init(&s, n, p), 0);
    int32_t t = smp_sample_full(&s, &s, lg, h, lp);
    smp_deinit(&s);
    return t;
}

/* log_softmax of row at i, written out in double. */
static double ref_logprob(const float *row, int n, int i) {
    double m = -INFINITY, z = 0;
    for (int j = 0; j < n; j++) if (row[j] > m) m = row[j];
    for (int j = 0; j < n; j++) z += exp((double)row[j] - m);
    return (double)row[i] - m - log(z);
}

static void test_logit_bias(void **state) {
    (void)state;
    float lg[4] = {1.0f, 2.0f, 3.0f, 0.5f};
    smp_bias b[2] = {{0, 5.0f}, {2, -100.0f}};
    smp_params p = params(0.0f, 0, 1.0f, 1);
    p.bias = b;
    p.n_bias = 2;
    p.top_logprobs = 4;
    smp_lp lp;
    assert_int_equal(greedy_full(&p, lg, 4, NULL, &lp), 0);
    float want[4] = {6.0f, 2.0f, -97.0f, 0.5f};
    assert_true(fabs(lp.logprob - ref_logprob(want, 4, 0)) < 1e-6);
    assert_int_equal(lp.n_top, 4);
    int order[4] = {0, 1, 3, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(lp.top_id[i], order[i]);
        assert_true(fabs(lp.top_lp[i] - ref_logprob(want, 4, order[i])) < 1e-5);
    }
    /* Out of range ids and biases are refused. */
    smp s;
    smp_bias bad[1] = {{4, 1.0f}};
    p.bias = bad;
    p.n_bias = 1;
    assert_int_equal(smp_init(&s, 4, &p), TS_ERR_INVAL);
    bad[0] = (smp_bias){1, 100.5f};
    assert_int_equal(smp_init(&s, 4, &p), TS_ERR_INVAL);
    bad[0] = (smp_bias){1, NAN};
    assert_int_equal(smp_init(&s, 4, &p), TS_ERR_INVAL);
}

/* Frequency and presence count generated tokens only; repetition covers the
 * prompt too, dividing positive logits and multiplying negative ones. */
static void test_penalties_exact(void **state) {
    (void)state;
    const float lg[5] = {2.0f, 1.0f, -1.0f, 0.0f, 1.5f};
    const int32_t prompt[2] = {2, 4};
    const int32_t gen[3] = {0, 0, 1};
    smp_hist h = {prompt, 2, gen, 3, NULL, 0};
    smp_params p = params(0.0f, 0, 1.0f, 1);
    p.top_logprobs = 5;
    smp_lp lp;

    p.frequency_penalty = 0.5f;   /* 0: 2 - 1 = 1; 1: 1 - 0.5 = 0.5 */
    p.presence_penalty = 0.25f;   /* 0: 0.75; 1: 0.25 */
    assert_int_equal(greedy_full(&p, lg, 5, &h, &lp), 4);
    float want[5] = {0.75f, 0.25f, -1.0f, 0.0f, 1.5f};
    for (int i = 0; i < 5; i++) {
        int id = lp.top_id[i];
        assert_true(fabs(lp.top_lp[i] - ref_logprob(want, 5, id)) < 1e-5);
    }
    assert_true(fabs(lp.logprob - ref_logprob(want, 5, 4)) < 1e-6);

    p.frequency_penalty = p.presence_penalty = 0;
    p.repetition_penalty = 2.0f;  /* 0: 1; 1: 0.5; 2: -2; 4: 0.75; 3 unseen */
    assert_int_equal(greedy_full(&p, lg, 5, &h, &lp), 0);
    float want2[5] = {1.0f, 0.5f, -2.0f, 0.0f, 0.75f};
    assert_true(fabs(lp.logprob - ref_logprob(want2, 5, 0)) < 1e-6);
    for (int i = 0; i < 5; i++)
        assert_true(fabs(lp.top_lp[i] - ref_logprob(want2, 5, lp.top_id[i])) < 1e-5);

    /* A negative presence penalty favours repeats: token 1 (1 + 2) passes
     * token 4 (1.5), which was never generated. */
    p.repetition_penalty = 0;
    p.presence_penalty = -2.0f;
    const float lg2[5] = {-5.0f, 1.0f, -1.0f, 0.0f, 1.5f};
    assert_int_equal(greedy_full(&p, lg2, 5, &h, NULL), 1);

    /* The scratch counts are left clean: the same call again gives the same. */
    smp s;
    p.presence_penalty = 0;
    p.frequency_penalty = 2.0f;
    assert_int_equal(smp_init(&s, 5, &p), 0);
    for (int k = 0; k < 3; k++) assert_int_equal(smp_sample_full(&s, &s, lg, &h, NULL), 4);
    for (int i = 0; i < 5; i++) assert_int_equal(s.cnt[i], 0);
    smp_deinit(&s);

    /* Ranges. */
    p = params(0.0f, 0, 1.0f, 1);
    p.presence_penalty = 2.5f;
    assert_int_equal(smp_init(&s, 5, &p), TS_ERR_INVAL);
    p.presence_penalty = 0;
    p.frequency_penalty = -2.01f;
    assert_int_equal(smp_init(&s, 5, &p), TS_ERR_INVAL);
    p.frequency_penalty = 0;
    p.repetition_penalty = -1.0f;
    assert_int_equal(smp_init(&s, 5, &p), TS_ERR_INVAL);
    p.repetition_penalty = INFINITY;
    assert_int_equal(smp_init(&s, 5, &p), TS_ERR_INVAL);
}

/* End tokens cannot win before min_tokens tokens were generated, and can
 * from then on. */
static void test_min_tokens_mask(void **state) {
    (void)state;
    const float lg[4] = {0.0f, 1.0f, 9.0f, 8.0f};
    const int32_t end[2] = {2, 3};
    const int32_t gen[2] = {1, 1};
    smp_params p = params(0.0f, 0, 1.0f, 1);
    p.min_tokens = 2;
    p.top_logprobs = 2;
    smp_lp lp;
    smp_hist h = {NULL, 0, gen, 1, end, 2};
    assert_int_equal(greedy_full(&p, lg, 4, &h, &lp), 1);
    assert_true(isinf(lp.top_lp[1]) == 0);        /* token 0 is next, finite */
    assert_int_equal(lp.top_id[1], 0);
    float want[4] = {0.0f, 1.0f, -INFINITY, -INFINITY};
    assert_true(fabs(lp.logprob - ref_logprob(want, 4, 1)) < 1e-6);
    h.n_gen = 2;
    assert_int_equal(greedy_full(&p, lg, 4, &h, NULL), 2);
    /* Sampling too never draws a masked token. */
    smp s;
    p.temperature = 5.0f;
    h.n_gen = 0;
    assert_int_equal(smp_init(&s, 4, &p), 0);
    for (int i = 0; i < 2000; i++) {
        int32_t t = smp_sample_full(&s, &s, lg, &h, NULL);
        assert_true(t == 0 || t == 1);
    }
    smp_deinit(&s);
}

/* min_p keeps exactly the tokens with p >= min_p * p_max after temperature. */
static void test_min_p(void **state) {
    (void)state;
    /* T = 1: weights relative to the best are 1, e^-1 = .368, e^-2 = .135,
     * e^-3 = .050. min_p 0.2 keeps tokens 0 and 1. */
    const float lg[4] = {3.0f, 2.0f, 1.0f, 0.0f};
    smp_params p = params(1.0f, 0, 1.0f, 7);
    p.min_p = 0.2f;
    smp s;
    assert_int_equal(smp_init(&s, 4, &p), 0);
    int hits[4] = {0};
    for (int i = 0; i < 20000; i++) hits[smp_sample_full(&s, &s, lg, NULL, NULL)]++;
    assert_int_equal(hits[2] + hits[3], 0);
    double want1 = exp(-1.0) / (1 + exp(-1.0));
    assert_true(fabs(hits[1] / 20000.0 - want1) < 0.02);
    smp_deinit(&s);
    /* min_p 1 keeps only the best (and its ties). */
    p.min_p = 1.0f;
    assert_int_equal(smp_init(&s, 4, &p), 0);
    for (int i = 0; i < 100; i++) assert_int_equal(smp_sample(&s, lg), 0);
    smp_deinit(&s);
    p.min_p = 1.5f;
    assert_int_equal(smp_init(&s, 4, &p), TS_ERR_INVAL);
    p.min_p = -0.1f;
    assert_int_equal(smp_init(&s, 4, &p), TS_ERR_INVAL);
}

/* Logprobs in a large vocabulary: the chosen token's equals log_softmax of
 * the row, the top-k come best first with ties by lower id, and they match
 * a full sort. */
static const float *sort_row;
static int cmp_rank(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_row[x] != sort_row[y]) return sort_row[x] > sort_row[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

static void test_logprobs_topk(void **state) {
    (void)state;
    enum { V = 5000 };
    static float lg[V];
    static int32_t ord[V];
    lcg_state = 99;
    for (int i = 0; i < V; i++) lg[i] = (float)(int)(lcg_uniform() * 200) / 10.0f; /* many ties */
    for (int i = 0; i < V; i++) ord[i] = i;
    sort_row = lg;
    qsort(ord, V, sizeof ord[0], cmp_rank);
    smp_lp lp;
    for (int k = 0; k <= SMP_MAX_TOP; k += 5) {
        assert_int_equal(smp_logprobs(lg, V, 17, k, &lp), 0);
        assert_int_equal(lp.n_top, k);
        assert_true(fabs(lp.logprob - ref_logprob(lg, V, 17)) < 1e-4);
        for (int i = 0; i < k; i++) {
            assert_int_equal(lp.top_id[i], ord[i]);
            assert_true(fabs(lp.top_lp[i] - ref_logprob(lg, V, ord[i])) < 1e-4);
        }
    }
    /* The probabilities sum to 1. */
    double z = 0;
    for (int i = 0; i < V; i++) {
        smp_lp one;
        smp_logprobs(lg, V, i, 0, &one);
        z += exp(one.logprob);
    }
    assert_true(fabs(z - 1.0) < 1e-3);
    /* A small vocabulary with k above it gives every token. */
    float small[3] = {1, 3, 2};
    assert_int_equal(smp_logprobs(small, 3, 0, 20, &lp), 0);
    assert_int_equal(lp.n_top, 3);
    assert_int_equal(lp.top_id[0], 1);
    assert_int_equal(lp.top_id[2], 0);
    /* Bad arguments. */
    assert_int_equal(smp_logprobs(small, 3, 3, 1, &lp), TS_ERR_INVAL);
    assert_int_equal(smp_logprobs(small, 3, 0, 21, &lp), TS_ERR_INVAL);
    assert_int_equal(smp_logprobs(NULL, 3, 0, 1, &lp), TS_ERR_INVAL);
    /* NaN reads as -inf: no mass. */
    float nan_row[3] = {NAN, 0.0f, 0.0f};
    assert_int_equal(smp_logprobs(nan_row, 3, 0, 3, &lp), 0);
    assert_true(isinf(lp.logprob) && lp.logprob < 0);
    assert_true(fabs(lp.top_lp[0] - logf(0.5f)) < 1e-6);
    assert_int_equal(lp.top_id[2], 0);
}

/* With nothing to process, smp_sample_full draws exactly what smp_sample
 * draws from the same seed, and the chosen logprob is the raw row's. */
static void test_full_matches_plain(void **state) {
    (void)state;
    enum { V = 257 };
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = (float)((i * 53) % 97) / 13.0f;
    smp_params p = params(0.8f, 50, 0.9f, 4242);
    p.top_logprobs = 3;
    smp a, b;
    assert_int_equal(smp_init(&a, V, &p), 0);
    assert_int_equal(smp_init(&b, V, &p), 0);
    const int32_t gen[1] = {5};
    smp_hist h = {NULL, 0, gen, 1, NULL, 0};
    for (int i = 0; i < 100; i++) {
        smp_lp lp;
        int32_t t = smp_sample_full(&b, &b, lg, &h, &lp);
        assert_int_equal(smp_sample(&a, lg), t);
        assert_true(fabs(lp.logprob - ref_logprob(lg, V, t)) < 1e-5);
        assert_int_equal(lp.n_top, 3);
    }
    smp_deinit(&a);
    smp_deinit(&b);
    /* Parameter ranges of the new fields. */
    smp s;
    p.top_logprobs = 21;
    assert_int_equal(smp_init(&s, V, &p), TS_ERR_INVAL);
    p.top_logprobs = 0;
    p.min_tokens = -1;
    assert_int_equal(smp_init(&s, V, &p), TS_ERR_INVAL);
    p.min_tokens = 0;
    p.n_bias = 1;
    p.bias = NULL;
    assert_int_equal(smp_init(&s, V, &p), TS_ERR_INVAL);
}

/* A row the processing leaves without a finite logit (min_tokens masks the
 * only token a grammar allowed) has no token to draw: SMP_NO_TOKEN, not
 * the argmax fallback (token 0), for greedy and random draws alike. */
static void test_no_finite_logit(void **state) {
    (void)state;
    const float lg[4] = {-INFINITY, -INFINITY, 3.0f, -INFINITY};
    const int32_t end[1] = {2};
    smp_hist h = {NULL, 0, NULL, 0, end, 1};
    for (int greedy = 0; greedy < 2; greedy++) {
        smp_params p = params(greedy ? 0.0f : 1.0f, 0, 1.0f, 3);
        p.min_tokens = 1;
        smp s;
        smp_lp lp;
        assert_int_equal(smp_init(&s, 4, &p), 0);
        assert_int_equal(smp_sample_full(&s, &s, lg, &h, &lp), SMP_NO_TOKEN);
        p.min_tokens = 0;                     /* unmasked: the one token */
        smp_deinit(&s);
        assert_int_equal(smp_init(&s, 4, &p), 0);
        assert_int_equal(smp_sample_full(&s, &s, lg, &h, &lp), 2);
        smp_deinit(&s);
    }
}

/* The first n draws of b are a copy of a's shifted by some 0 <= k < n (in
 * either direction). */
static int shifted_copy(const uint64_t *a, const uint64_t *b, int n) {
    for (int k = 0; k < n; k++) {
        int fwd = 1, back = 1;
        for (int i = 0; i + k < n; i++) {
            fwd &= a[i + k] == b[i];
            back &= b[i + k] == a[i];
        }
        if (fwd || back) return 1;
    }
    return 0;
}

/* The n choices of one request draw from streams 0..n-1 of one seed: no
 * two of them are the same sequence shifted. The old per-choice seed
 * (seed + j * the splitmix increment) was exactly that: choice 1's state
 * was choice 0's expander one step on. */
static void test_streams_do_not_overlap(void **state) {
    (void)state;
    enum { N = 64 };
    const uint64_t seeds[3] = {0, 42, 0x9E3779B97F4A7C15ull * 7};
    for (int si = 0; si < 3; si++) {
        uint64_t d[4][N];
        for (int j = 0; j < 4; j++) {
            smp_params p = params(1.0f, 0, 1.0f, seeds[si]);
            p.stream = (uint64_t)j;
            smp s;
            assert_int_equal(smp_init(&s, 4, &p), 0);
            for (int i = 0; i < N; i++) d[j][i] = rng_next(&s.rng);
            smp_deinit(&s);
        }
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++) assert_false(shifted_copy(d[a], d[b], N));
        /* Stream 0 is the plain seed, as a single request always drew. */
        rng r;
        rng_seed(&r, seeds[si]);
        assert_true(rng_next(&r) == d[0][0]);
        /* Nor do two streams share a word of their starting states. The
         * old per-choice seed did: choice 1's state was choice 0's
         * expander one step on, three of four words the same. */
        rng st[4];
        for (int j = 0; j < 4; j++) {
            smp_params p = params(1.0f, 0, 1.0f, seeds[si]);
            p.stream = (uint64_t)j;
            smp s;
            assert_int_equal(smp_init(&s, 4, &p), 0);
            st[j] = s.rng;
            smp_deinit(&s);
        }
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++)
                for (int x = 0; x < 4; x++)
                    for (int y = 0; y < 4; y++) assert_true(st[a].s[x] != st[b].s[y]);
        rng o0, o1;
        rng_seed(&o0, seeds[si]);
        rng_seed(&o1, seeds[si] + 0x9E3779B97F4A7C15ull);
        assert_true(o0.s[1] == o1.s[0] && o0.s[2] == o1.s[1] && o0.s[3] == o1.s[2]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_argmax_and_ties),
        cmocka_unit_test(test_seed_determinism),
        cmocka_unit_test(test_top_k_at_least_vocab_is_off),
        cmocka_unit_test(test_small_temperature_is_greedy),
        cmocka_unit_test(test_top_k_one_is_greedy),
        cmocka_unit_test(test_tiny_top_p_is_greedy),
        cmocka_unit_test(test_law_four_tokens),
        cmocka_unit_test(test_law_in_large_vocab),
        cmocka_unit_test(test_filters_match_reference),
        cmocka_unit_test(test_ties_at_the_cut),
        cmocka_unit_test(test_nucleus_boundary_many_rows),
        cmocka_unit_test(test_top_p_bound_tight),
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_nan_logits),
        cmocka_unit_test(test_stop_ids),
        cmocka_unit_test(test_shared_scratch),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_penalties_exact),
        cmocka_unit_test(test_min_tokens_mask),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_logprobs_topk),
        cmocka_unit_test(test_full_matches_plain),
        cmocka_unit_test(test_no_finite_logit),
        cmocka_unit_test(test_streams_do_not_overlap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
