/* plot.c - bench plots through gnuplot; see plot.h.
 *
 * Names (scenario, tenants) reach plots.gp from scenario files, plans and
 * traces, so the script must hold whatever they hold as text: every name
 * goes in a single-quoted gnuplot string through put_sq, which doubles a '
 * (the only escape there is in such a string; gnuplot does no backslash,
 * `command` or @macro substitution inside one), and replaces control
 * characters, which would end the command line. A name that closed its
 * string could run anything through system(). Comments (in the script and
 * the data files) get the same control-character rule, since a newline
 * would end them. The terminals are noenhanced, so a name's _ or ^ is
 * printed, not read as a subscript or superscript. */
#include "plot.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"

/* s inside a gnuplot single-quoted string: ' doubled, control characters
 * (which would end the line, and so the string) as '?'. */
static void put_sq(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\'') fputs("''", f);
        else fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
    }
}

/* s inside a comment line (#...): control characters as '?'. */
static void put_comment(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
}

static FILE *open_in(const char *dir, const char *name, char *err, size_t errlen) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f && err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return f;
}

static int close_ok(FILE *f, const char *dir, const char *name, char *err, size_t errlen) {
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad && err && errlen) snprintf(err, errlen, "%s/%s: write failed", dir, name);
    return bad ? TS_ERR_IO : 0;
}

/* The CDF a plot draws: TTFT or TPOT. */
typedef struct cdf_kind {
    const char *file;         /* the data file, and the plot's base name */
    const char *what;         /* the x axis */
    const char *slo;          /* the target's label */
    int tpot;                 /* 0: TTFT, 1: TPOT */
} cdf_kind;

static const cdf_kind CDF_TTFT = {"ttft_cdf", "time to first token", "TTFT", 0};
static const cdf_kind CDF_TPOT = {"tpot_cdf", "time per output token", "TPOT", 1};

static const rpt_cdf *cdf_of(const rpt *p, int i, const cdf_kind *k) {
    return k->tpot ? &p->t[i].tpot_cdf : &p->t[i].ttft_cdf;
}

/* <file>.dat: one block per tenant with samples (gnuplot's index k is the
 * k-th block), "ms share" per line. */
static int write_cdf(const char *dir, const scn *s, const rpt *p, const cdf_kind *k, char *err, size_t errlen) {
    char name[64];
    snprintf(name, sizeof name, "%s.dat", k->file);
    FILE *f = open_in(dir, name, err, errlen);
    if (!f) return TS_ERR_IO;
    int block = 0;
    for (int i = 0; i < s->n_tenants; i++) {
        const rpt_cdf *c = cdf_of(p, i, k);
        if (!c->n) continue;
        fprintf(f, "%s# ", block++ ? "\n\n" : "");
        put_comment(f, s->tenants[i].name);
        fputc('\n', f);
        /* From share 0 at the first sample, so the first step (and a tenant
         * with one sample) is drawn; a log axis would lose 0 ms, so 1 us. */
        for (int64_t j = -1; j < c->n; j++) {
            double ms = c->x[j < 0 ? 0 : j] * 1e3;
            fprintf(f, "%.3f %.6f\n", ms > 0.001 ? ms : 0.001, j < 0 ? 0.0 : c->share[j]);
        }
    }
    return close_ok(f, dir, name, err, errlen);
}

/* tokens.dat: a comment row of tenant names (the plot's titles are in the
 * script, where they can be quoted), then per bin its middle time and each
 * tenant's output tokens per second. */
static int write_tokens(const char *dir, const scn *s, const rpt *p, char *err, size_t errlen) {
    FILE *f = open_in(dir, "tokens.dat", err, errlen);
    if (!f) return TS_ERR_IO;
    fprintf(f, "# t_s");
    for (int i = 0; i < s->n_tenants; i++) {
        fputc(' ', f);
        put_comment(f, s->tenants[i].name);
    }
    fprintf(f, "\n");
    for (int b = 0; b < p->n_bins; b++) {
        fprintf(f, "%.2f", (b + 0.5) * p->bin_s);
        for (int i = 0; i < s->n_tenants; i++)
            fprintf(f, " %.2f", p->tokens[(size_t)i * (size_t)p->n_bins + (size_t)b] / p->bin_s);
        fprintf(f, "\n");
    }
    return close_ok(f, dir, "tokens.dat", err, errlen);
}

/* One CDF plot: a curve per tenant with samples, each in its own line
 * type, and a dashed vertical line of the same type at the tenant's target
 * (when it has one), labelled, so a curve can be read against its SLO. */
static void cdf_plot(FILE *f, const scn *s, const rpt *p, const cdf_kind *k, const char *ext) {
    fprintf(f, "set output '%s.%s'\n", k->file, ext);
    fprintf(f, "set title '%s CDF - scenario ", k->slo);
    put_sq(f, s->name);
    fprintf(f, "'\n");
    fprintf(f, "set xlabel '%s (ms, log scale)'\nset ylabel 'share of requests'\n", k->what);
    fprintf(f, "set logscale x\nset yrange [0:1]\nset key bottom right\n");
    int block = 0;
    for (int i = 0; i < s->n_tenants; i++) {
        if (!cdf_of(p, i, k)->n) continue;
        block++;
        double ms = k->tpot ? s->tenants[i].tpot_ms : s->tenants[i].ttft_ms;
        if (ms <= 0) continue;
        fprintf(f, "set arrow from first %g, graph 0 to first %g, graph 1 nohead dashtype 2 lt %d\n", ms, ms, block);
        fprintf(f, "set label '");
        put_sq(f, s->tenants[i].name);
        fprintf(f, " SLO %g ms' at first %g, graph 0.02 rotate by 90 offset 1.2,0 front tc lt %d\n", ms, ms, block);
    }
    fprintf(f, "plot ");
    block = 0;
    for (int i = 0; i < s->n_tenants; i++) {
        if (!cdf_of(p, i, k)->n) continue;
        fprintf(f, "%s'%s.dat' index %d using 1:2 with steps lt %d lw 2 title '", block ? ", \\\n     " : "",
                k->file, block, block + 1);
        put_sq(f, s->tenants[i].name);
        fputc('\'', f);
        block++;
    }
    if (!block) fprintf(f, "NaN title 'no samples'");
    fprintf(f, "\nunset arrow\nunset label\nunset logscale x\nset autoscale y\n");
}

/* The plotting commands for one output format (ext: svg or png). */
static void plots_for(FILE *f, const scn *s, const rpt *p, const char *ext) {
    cdf_plot(f, s, p, &CDF_TTFT, ext);
    cdf_plot(f, s, p, &CDF_TPOT, ext);
    fprintf(f, "set output 'tokens.%s'\n", ext);
    fprintf(f, "set title 'output tokens per second per tenant - scenario ");
    put_sq(f, s->name);
    fprintf(f, "'\n");
    fprintf(f, "set xlabel 'time since the start (s)'\nset ylabel 'tokens/s'\nset yrange [0:*]\nset key top right\n");
    fprintf(f, "plot ");
    for (int i = 0; i < s->n_tenants; i++) {
        fprintf(f, "%s'tokens.dat' using 1:%d with lines lw 2 title '", i ? ", \\\n     " : "", i + 2);
        put_sq(f, s->tenants[i].name);
        fputc('\'', f);
    }
    if (!s->n_tenants) fprintf(f, "NaN title 'no tenants'");
    fputc('\n', f);
}

static int write_script(const char *dir, const scn *s, const rpt *p, char *err, size_t errlen) {
    FILE *f = open_in(dir, "plots.gp", err, errlen);
    if (!f) return TS_ERR_IO;
    fprintf(f, "# Written by tessera; redraw with: cd ");
    put_comment(f, dir);
    fprintf(f, " && gnuplot plots.gp\n");
    fprintf(f, "set grid\nset border lw 1\n");
    fprintf(f, "set terminal svg size 900,500 dynamic noenhanced background rgb 'white' font 'sans,12'\n");
    plots_for(f, s, p, "svg");
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size 900,500 noenhanced background rgb 'white' font 'sans,10'\n"
               "} else {\n"
               "    set terminal png size 900,500 noenhanced background rgb 'white'\n"
               "}\n");
    plots_for(f, s, p, "png");
    fprintf(f, "unset output\n");
    return close_ok(f, dir, "plots.gp", err, errlen);
}

/* Run gnuplot plots.gp inside dir; its messages go to our stderr. */
static int run_gnuplot(const char *dir, char *err, size_t errlen) {
    pid_t pid = fork();
    if (pid < 0) {
        if (err && errlen) snprintf(err, errlen, "fork: %s", strerror(errno));
        return TS_ERR_IO;
    }
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        execlp("gnuplot", "gnuplot", "plots.gp", (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            if (err && errlen) snprintf(err, errlen, "waitpid: %s", strerror(errno));
            return TS_ERR_IO;
        }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (err && errlen) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
            snprintf(err, errlen, "gnuplot not found (apt-get install gnuplot-nox); the data and %s/plots.gp are written",
                     dir);
        else
            snprintf(err, errlen, "gnuplot failed (status %d) on %s/plots.gp", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                     dir);
    }
    return TS_ERR_IO;
}

int plot_write(const char *dir, const scn *s, const rpt *p, char *err, size_t errlen) {
    int rc = write_cdf(dir, s, p, &CDF_TTFT, err, errlen);
    if (!rc) rc = write_cdf(dir, s, p, &CDF_TPOT, err, errlen);
    if (!rc) rc = write_tokens(dir, s, p, err, errlen);
    if (!rc) rc = write_script(dir, s, p, err, errlen);
    if (!rc) rc = run_gnuplot(dir, err, errlen);
    return rc;
}
