/* plot.c - bench plots through gnuplot; see plot.h. */
#include "plot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"

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

/* ttft_cdf.dat: one block per tenant with samples (gnuplot's index k is the
 * k-th block), "ttft_ms share" per line. has[i] says whether tenant i got a
 * block. */
static int write_cdf(const char *dir, const scn *s, const rpt_req *r, size_t n, int *has, char *err,
                     size_t errlen) {
    FILE *f = open_in(dir, "ttft_cdf.dat", err, errlen);
    if (!f) return TS_ERR_IO;
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) {
        fclose(f);
        return TS_ERR_NOMEM;
    }
    int block = 0;
    for (int i = 0; i < s->n_tenants; i++) {
        size_t k = rpt_ttft_samples(r, n, i, v, NULL);
        has[i] = k > 0;
        if (!k) continue;
        rpt_dist d;
        rpt_dist_of(v, k, &d);   /* sorts v */
        fprintf(f, "%s# %s\n", block++ ? "\n\n" : "", s->tenants[i].name);
        for (size_t j = 0; j < k; j++) fprintf(f, "%.3f %.6f\n", v[j] * 1e3 > 0.001 ? v[j] * 1e3 : 0.001, (double)(j + 1) / (double)k);
    }
    free(v);
    return close_ok(f, dir, "ttft_cdf.dat", err, errlen);
}

/* tokens.dat: a header row of tenant names, then per bin its middle time
 * and each tenant's output tokens per second. */
static int write_tokens(const char *dir, const scn *s, const rpt *p, char *err, size_t errlen) {
    FILE *f = open_in(dir, "tokens.dat", err, errlen);
    if (!f) return TS_ERR_IO;
    fprintf(f, "t_s");
    for (int i = 0; i < s->n_tenants; i++) fprintf(f, " %s", s->tenants[i].name);
    fprintf(f, "\n");
    for (int b = 0; b < p->n_bins; b++) {
        fprintf(f, "%.2f", (b + 0.5) * p->bin_s);
        for (int i = 0; i < s->n_tenants; i++)
            fprintf(f, " %.2f", p->tokens[(size_t)i * (size_t)p->n_bins + (size_t)b] / p->bin_s);
        fprintf(f, "\n");
    }
    return close_ok(f, dir, "tokens.dat", err, errlen);
}

/* The plotting commands for one output format (ext: svg or png). */
static void plots_for(FILE *f, const scn *s, const int *has, const char *ext) {
    fprintf(f, "set output 'ttft_cdf.%s'\n", ext);
    fprintf(f, "set title 'TTFT CDF - scenario %s'\n", s->name);
    fprintf(f, "set xlabel 'time to first token (ms, log scale)'\nset ylabel 'share of requests'\n");
    fprintf(f, "set logscale x\nset yrange [0:1]\nset key bottom right\n");
    int block = 0, first = 1;
    fprintf(f, "plot ");
    for (int i = 0; i < s->n_tenants; i++) {
        if (!has[i]) continue;
        fprintf(f, "%s'ttft_cdf.dat' index %d using 1:2 with steps lw 2 title '%s'", first ? "" : ", \\\n     ",
                block++, s->tenants[i].name);
        first = 0;
    }
    if (first) fprintf(f, "NaN title 'no requests got a first token'");
    fprintf(f, "\nunset logscale x\nset autoscale y\n");
    fprintf(f, "set output 'tokens.%s'\n", ext);
    fprintf(f, "set title 'output tokens per second per tenant - scenario %s'\n", s->name);
    fprintf(f, "set xlabel 'time since the start (s)'\nset ylabel 'tokens/s'\nset yrange [0:*]\nset key top right\n");
    fprintf(f, "plot for [i=2:%d] 'tokens.dat' using 1:i with lines lw 2 title columnheader(i)\n",
            s->n_tenants + 1);
}

static int write_script(const char *dir, const scn *s, const int *has, char *err, size_t errlen) {
    FILE *f = open_in(dir, "plots.gp", err, errlen);
    if (!f) return TS_ERR_IO;
    fprintf(f, "# Written by tessera bench; redraw with: cd %s && gnuplot plots.gp\n", dir);
    fprintf(f, "set grid\nset border lw 1\n");
    fprintf(f, "set terminal svg size 900,500 dynamic background rgb 'white' font 'sans,12'\n");
    plots_for(f, s, has, "svg");
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size 900,500 background rgb 'white' font 'sans,10'\n"
               "} else {\n"
               "    set terminal png size 900,500 background rgb 'white'\n"
               "}\n");
    plots_for(f, s, has, "png");
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

int plot_write(const char *dir, const scn *s, const rpt *p, const rpt_req *r, size_t n, char *err, size_t errlen) {
    int *has = calloc((size_t)s->n_tenants, sizeof *has);
    if (!has) return TS_ERR_NOMEM;
    int rc = write_cdf(dir, s, r, n, has, err, errlen);
    if (!rc) rc = write_tokens(dir, s, p, err, errlen);
    if (!rc) rc = write_script(dir, s, has, err, errlen);
    free(has);
    if (!rc) rc = run_gnuplot(dir, err, errlen);
    return rc;
}
