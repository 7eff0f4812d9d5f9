/* metrics.c - Prometheus registry, text rendering and fairness helpers; see
 * metrics.h.
 *
 * Families and series are singly linked lists appended under the registry
 * mutex, so a pointer handed out stays valid until met_free and a render
 * walking the lists under the same mutex never sees a half-linked node.
 * Everything an update touches is immutable after creation (the series'
 * family, the family's kind and bounds) except the atomics themselves, which
 * is what lets updates skip the lock. */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fq.h"
#include "strbuf.h"

const double met_latency_buckets[MET_LATENCY_N_BUCKETS] = {
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15,
    0.25,  0.5,  1.0,  2.5,  5.0,  10.0, 30.0, 60.0,
};

const double met_step_buckets[MET_STEP_N_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02,
    0.03,   0.05,  0.075,  0.1,   0.25,   0.5,  1.0,   2.5,
};

enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM };

struct met_series {
    met_series *next;             /* creation order within the family */
    const met_family *fam;        /* immutable: kind and bounds for updates */
    char *labels;                 /* escaped `a="x",b="y"`, "" without labels */
    _Atomic uint64_t value;       /* bits of a double: counter/gauge value,
                                   * histogram _sum */
    _Atomic uint64_t buckets[];   /* histogram: (n_bounds + 1) per-bucket
                                   * counts, not cumulative; +Inf last */
};

struct met_family {
    met_family *next;             /* registration order */
    met_registry *reg;
    int kind;                     /* KIND_* */
    char *name;
    char *help;
    int n_labels;
    char *label_names[MET_MAX_LABELS];
    int n_bounds;
    double *bounds;               /* (n_bounds) strictly increasing, finite */
    met_series *head, *tail;
};

struct met_registry {
    pthread_mutex_t mu;           /* lists and rendering; never updates */
    met_family *head, *tail;
};

/* ---- atomic doubles ----------------------------------------------------- */

static uint64_t f64_bits(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static double bits_f64(uint64_t u) {
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Add v to the double stored in *p. The compare-exchange retries only when
 * another thread changed the value in between, so each add lands exactly
 * once. Relaxed order: a metric orders nothing else. */
static void atomic_add_f64(_Atomic uint64_t *p, double v) {
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    for (;;) {
        uint64_t nw = f64_bits(bits_f64(old) + v);
        if (atomic_compare_exchange_weak_explicit(p, &old, nw, memory_order_relaxed,
                                                  memory_order_relaxed))
            return;
    }
}

/* ---- text helpers over strbuf ------------------------------------------- */

/* Escape for a label value (quotes too) or for HELP text (no quotes). */
static void put_escaped(strbuf *b, const char *s, int quotes) {
    for (const char *run = s;; s++) {
        const char *rep = NULL;
        if (*s == '\\') rep = "\\\\";
        else if (*s == '\n') rep = "\\n";
        else if (*s == '"' && quotes) rep = "\\\"";
        else if (*s != '\0') continue;
        strbuf_put(b, run, (size_t)(s - run));
        if (!rep) return;
        strbuf_puts(b, rep);
        run = s + 1;
    }
}

/* Whole numbers below 1e15 (every count a server reaches) print as plain
 * integers, "400000" rather than %g's "4e+05"; anything else prints as the
 * shortest %g text that reads back as v ("0.005", "1e+21"). The non-finite
 * values take Prometheus' spellings. */
static void fmt_double(char out[40], double v) {
    if (isnan(v)) { strcpy(out, "NaN"); return; }
    if (isinf(v)) { strcpy(out, v > 0 ? "+Inf" : "-Inf"); return; }
    if (v == 0.0) { strcpy(out, "0"); return; }       /* also -0 */
    if (v == trunc(v) && fabs(v) < 1e15) {
        snprintf(out, 40, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

static void put_double(strbuf *b, double v) {
    char t[40];
    fmt_double(t, v);
    strbuf_puts(b, t);
}

static void put_u64(strbuf *b, uint64_t v) { strbuf_printf(b, "%" PRIu64, v); }

/* ---- names -------------------------------------------------------------- */

static int is_alpha_(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int valid_metric_name(const char *s) {
    if (!s || !(is_alpha_(*s) || *s == ':')) return 0;
    for (s++; *s; s++)
        if (!(is_alpha_(*s) || is_digit(*s) || *s == ':')) return 0;
    return 1;
}

static int valid_label_name(const char *s) {
    if (!s || !is_alpha_(*s)) return 0;
    if (s[0] == '_' && s[1] == '_') return 0;        /* reserved by Prometheus */
    for (s++; *s; s++)
        if (!(is_alpha_(*s) || is_digit(*s))) return 0;
    return 1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- registry ----------------------------------------------------------- */

met_registry *met_new(void) {
    met_registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

static void series_free(met_series *s) {
    if (!s) return;
    free(s->labels);
    free(s);
}

static void family_free(met_family *f) {
    if (!f) return;
    for (met_series *s = f->head, *nx; s; s = nx) {
        nx = s->next;
        series_free(s);
    }
    for (int i = 0; i < f->n_labels; i++) free(f->label_names[i]);
    free(f->name);
    free(f->help);
    free(f->bounds);
    free(f);
}

void met_free(met_registry *r) {
    if (!r) return;
    for (met_family *f = r->head, *nx; f; f = nx) {
        nx = f->next;
        family_free(f);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Escaped label text for these values; NULL on a NULL value or no memory. */
static char *labels_text(const met_family *f, const char *const *values) {
    strbuf b = STRBUF_INIT;
    for (int i = 0; i < f->n_labels; i++) {
        if (!values[i]) {
            strbuf_free(&b);
            return NULL;
        }
        if (i) strbuf_puts(&b, ",");
        strbuf_puts(&b, f->label_names[i]);
        strbuf_puts(&b, "=\"");
        put_escaped(&b, values[i], 1);
        strbuf_puts(&b, "\"");
    }
    return strbuf_steal(&b, NULL);                   /* "" for no labels */
}

/* Find or create; the caller holds f->reg->mu. Escaping is injective and
 * the delimiters are fixed, so equal label texts mean equal values. */
static met_series *series_get_locked(met_family *f, const char *const *values) {
    char *labels = labels_text(f, values);
    if (!labels) return NULL;
    for (met_series *s = f->head; s; s = s->next)
        if (strcmp(s->labels, labels) == 0) {
            free(labels);
            return s;
        }
    size_t nb = f->kind == KIND_HISTOGRAM ? (size_t)f->n_bounds + 1 : 0;
    met_series *s = malloc(sizeof *s + nb * sizeof s->buckets[0]);
    if (!s) {
        free(labels);
        return NULL;
    }
    s->next = NULL;
    s->fam = f;
    s->labels = labels;
    atomic_init(&s->value, f64_bits(0.0));
    for (size_t i = 0; i < nb; i++) atomic_init(&s->buckets[i], 0);
    if (f->tail) f->tail->next = s;
    else f->head = s;
    f->tail = s;
    return s;
}

static met_family *family_add(met_registry *r, int kind, const char *name,
                              const char *help, const char *const *label_names,
                              int n_labels, const double *bounds, int n_bounds) {
    if (!r || !valid_metric_name(name)) return NULL;
    if (n_labels < 0 || n_labels > MET_MAX_LABELS || (n_labels > 0 && !label_names))
        return NULL;
    for (int i = 0; i < n_labels; i++) {
        if (!valid_label_name(label_names[i])) return NULL;
        if (kind == KIND_HISTOGRAM && strcmp(label_names[i], "le") == 0) return NULL;
        for (int j = 0; j < i; j++)
            if (strcmp(label_names[i], label_names[j]) == 0) return NULL;
    }
    if (n_bounds < 0 || (n_bounds > 0 && !bounds)) return NULL;
    for (int i = 0; i < n_bounds; i++) {
        if (!isfinite(bounds[i])) return NULL;
        if (i > 0 && !(bounds[i] > bounds[i - 1])) return NULL;
    }

    met_family *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->reg = r;
    f->kind = kind;
    f->name = dup_str(name);
    f->help = dup_str(help ? help : "");
    if (!f->name || !f->help) goto err;
    for (int i = 0; i < n_labels; i++) {
        f->label_names[i] = dup_str(label_names[i]);
        if (!f->label_names[i]) goto err;
        f->n_labels = i + 1;
    }
    if (n_bounds > 0) {
        f->bounds = malloc((size_t)n_bounds * sizeof *f->bounds);
        if (!f->bounds) goto err;
        memcpy(f->bounds, bounds, (size_t)n_bounds * sizeof *f->bounds);
    }
    f->n_bounds = n_bounds;

    pthread_mutex_lock(&r->mu);
    for (met_family *g = r->head; g; g = g->next)
        if (strcmp(g->name, name) == 0) {
            pthread_mutex_unlock(&r->mu);
            goto err;
        }
    /* An unlabelled family has exactly one series; creating it now makes it
     * render 0 before its first update. */
    if (n_labels == 0 && !series_get_locked(f, NULL)) {
        pthread_mutex_unlock(&r->mu);
        goto err;
    }
    if (r->tail) r->tail->next = f;
    else r->head = f;
    r->tail = f;
    pthread_mutex_unlock(&r->mu);
    return f;

err:
    family_free(f);
    return NULL;
}

met_family *met_counter(met_registry *r, const char *name, const char *help,
                        const char *const *label_names, int n_labels) {
    return family_add(r, KIND_COUNTER, name, help, label_names, n_labels, NULL, 0);
}

met_family *met_gauge(met_registry *r, const char *name, const char *help,
                      const char *const *label_names, int n_labels) {
    return family_add(r, KIND_GAUGE, name, help, label_names, n_labels, NULL, 0);
}

met_family *met_histogram(met_registry *r, const char *name, const char *help,
                          const char *const *label_names, int n_labels,
                          const double *bounds, int n_bounds) {
    return family_add(r, KIND_HISTOGRAM, name, help, label_names, n_labels, bounds,
                      n_bounds);
}

met_series *met_series_get(met_family *f, const char *const *label_values) {
    if (!f || (f->n_labels > 0 && !label_values)) return NULL;
    pthread_mutex_lock(&f->reg->mu);
    met_series *s = series_get_locked(f, label_values);
    pthread_mutex_unlock(&f->reg->mu);
    return s;
}

/* ---- updates ------------------------------------------------------------ */

void met_inc(met_series *s, double v) {
    if (!s) return;
    int kind = s->fam->kind;
    if (kind == KIND_COUNTER && !(v >= 0)) return;   /* also drops NaN */
    if (kind == KIND_COUNTER || kind == KIND_GAUGE) atomic_add_f64(&s->value, v);
}

void met_set(met_series *s, double v) {
    if (!s || s->fam->kind != KIND_GAUGE) return;
    atomic_store_explicit(&s->value, f64_bits(v), memory_order_relaxed);
}

void met_observe(met_series *s, double v) {
    if (!s || s->fam->kind != KIND_HISTOGRAM || isnan(v)) return;
    /* First bound >= v by binary search; n_bounds when none (+Inf). */
    const double *b = s->fam->bounds;
    int lo = 0, hi = s->fam->n_bounds;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (b[mid] >= v) hi = mid;
        else lo = mid + 1;
    }
    atomic_fetch_add_explicit(&s->buckets[lo], 1, memory_order_relaxed);
    atomic_add_f64(&s->value, v);
}

double met_value(const met_series *s) {
    if (!s) return 0.0;
    return bits_f64(atomic_load_explicit(&((met_series *)s)->value,
                                         memory_order_relaxed));
}

/* ---- rendering ---------------------------------------------------------- */

static const char *kind_name(int kind) {
    switch (kind) {
    case KIND_COUNTER: return "counter";
    case KIND_GAUGE: return "gauge";
    default: return "histogram";
    }
}

/* name{labels[,extra]} with braces only when there is something inside. */
static void put_sample_name(strbuf *b, const char *name, const char *suffix,
                           const char *labels, const char *extra) {
    strbuf_puts(b, name);
    strbuf_puts(b, suffix);
    if (!labels[0] && !extra) return;
    strbuf_puts(b, "{");
    strbuf_puts(b, labels);
    if (extra) {
        if (labels[0]) strbuf_puts(b, ",");
        strbuf_puts(b, extra);
    }
    strbuf_puts(b, "}");
}

static void render_histogram(strbuf *b, const met_family *f, met_series *s) {
    uint64_t cum = 0;
    char le[64], num[40];
    for (int i = 0; i <= f->n_bounds; i++) {
        cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        if (i < f->n_bounds) fmt_double(num, f->bounds[i]);
        else strcpy(num, "+Inf");
        snprintf(le, sizeof le, "le=\"%s\"", num);
        put_sample_name(b, f->name, "_bucket", s->labels, le);
        strbuf_puts(b, " ");
        put_u64(b, cum);
        strbuf_puts(b, "\n");
    }
    put_sample_name(b, f->name, "_sum", s->labels, NULL);
    strbuf_puts(b, " ");
    put_double(b, met_value(s));
    strbuf_puts(b, "\n");
    /* _count from the same bucket reads, so it equals the +Inf bucket. */
    put_sample_name(b, f->name, "_count", s->labels, NULL);
    strbuf_puts(b, " ");
    put_u64(b, cum);
    strbuf_puts(b, "\n");
}

int met_render(met_registry *r, char **text, size_t *len) {
    strbuf b = STRBUF_INIT;
    pthread_mutex_lock(&r->mu);
    for (met_family *f = r->head; f; f = f->next) {
        strbuf_puts(&b, "# HELP ");
        strbuf_puts(&b, f->name);
        strbuf_puts(&b, " ");
        put_escaped(&b, f->help, 0);
        strbuf_puts(&b, "\n# TYPE ");
        strbuf_puts(&b, f->name);
        strbuf_puts(&b, " ");
        strbuf_puts(&b, kind_name(f->kind));
        strbuf_puts(&b, "\n");
        for (met_series *s = f->head; s; s = s->next) {
            if (f->kind == KIND_HISTOGRAM) {
                render_histogram(&b, f, s);
                continue;
            }
            put_sample_name(&b, f->name, "", s->labels, NULL);
            strbuf_puts(&b, " ");
            put_double(&b, met_value(s));
            strbuf_puts(&b, "\n");
        }
    }
    pthread_mutex_unlock(&r->mu);
    *text = strbuf_steal(&b, len);
    return *text ? 0 : TS_ERR_NOMEM;
}

/* ---- fairness ----------------------------------------------------------- */

#define WIN_SLOTS 60
#define WIN_SLOT_US 1000000LL

struct met_window {
    int n_tenants;
    int have_newest;              /* newest is valid */
    int64_t newest;               /* newest slot seen by an add */
    int64_t stamp[WIN_SLOTS];     /* slot number held by each ring position;
                                   * INT64_MIN = never written */
    double *service;              /* (n_tenants, WIN_SLOTS) weighted service */
    uint8_t *backlogged;          /* (n_tenants, WIN_SLOTS) 0/1 */
};

/* floor(now_us / 1 s): C division truncates toward zero, so step down for
 * negative times that are not whole seconds. */
static int64_t slot_of(int64_t now_us) {
    int64_t q = now_us / WIN_SLOT_US;
    if (now_us % WIN_SLOT_US < 0) q--;
    return q;
}

static int ring_pos(int64_t slot) {
    int64_t m = slot % WIN_SLOTS;
    return (int)(m < 0 ? m + WIN_SLOTS : m);
}

met_window *met_window_new(int n_tenants) {
    if (n_tenants < 1) return NULL;
    met_window *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->n_tenants = n_tenants;
    w->service = calloc((size_t)n_tenants * WIN_SLOTS, sizeof *w->service);
    w->backlogged = calloc((size_t)n_tenants * WIN_SLOTS, sizeof *w->backlogged);
    if (!w->service || !w->backlogged) goto err;
    for (int k = 0; k < WIN_SLOTS; k++) w->stamp[k] = INT64_MIN;
    return w;
err:
    met_window_free(w);
    return NULL;
}

void met_window_free(met_window *w) {
    if (!w) return;
    free(w->service);
    free(w->backlogged);
    free(w);
}

int met_window_add(met_window *w, int tenant, int64_t now_us,
                   double weighted_service, int backlogged) {
    if (!w || tenant < 0 || tenant >= w->n_tenants) return TS_ERR_INVAL;
    if (!(weighted_service >= 0) || isinf(weighted_service)) return TS_ERR_INVAL;
    int64_t slot = slot_of(now_us);
    /* slot_of keeps |slot| below 2^63 / 1e6, so slot - 59 cannot overflow. */
    if (w->have_newest && slot < w->newest - (WIN_SLOTS - 1)) return 0;
    int k = ring_pos(slot);
    if (w->stamp[k] != slot) {
        /* The position held a slot at least 60 s older than this one (or
         * nothing): that data is outside every window from now on. */
        for (int t = 0; t < w->n_tenants; t++) {
            w->service[(size_t)t * WIN_SLOTS + k] = 0.0;
            w->backlogged[(size_t)t * WIN_SLOTS + k] = 0;
        }
        w->stamp[k] = slot;
    }
    size_t i = (size_t)tenant * WIN_SLOTS + (size_t)k;
    w->service[i] += weighted_service;
    if (backlogged) w->backlogged[i] = 1;
    if (!w->have_newest || slot > w->newest) {
        w->newest = slot;
        w->have_newest = 1;
    }
    return 0;
}

double met_window_jain(const met_window *w, int64_t now_us) {
    if (!w) return 1.0;
    int64_t hi = slot_of(now_us), lo = hi - (WIN_SLOTS - 1);
    double sum = 0.0, sum2 = 0.0;
    int n = 0;
    for (int t = 0; t < w->n_tenants; t++) {
        double s = 0.0;
        int b = 0;
        for (int k = 0; k < WIN_SLOTS; k++) {
            if (w->stamp[k] < lo || w->stamp[k] > hi) continue;
            s += w->service[(size_t)t * WIN_SLOTS + k];
            b |= w->backlogged[(size_t)t * WIN_SLOTS + k];
        }
        if (!b) continue;
        sum += s;
        sum2 += s * s;
        n++;
    }
    if (n == 0 || sum2 == 0.0) return 1.0;
    return sum * sum / ((double)n * sum2);
}
