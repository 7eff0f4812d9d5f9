/*
 * cmd_bench.c - `tessera bench`: run a scenario's open-loop multi-tenant
 * load against an OpenAI-compatible server and report isolation and
 * fairness.
 *
 * The run is bounded three ways: the send window (--duration, or the
 * scenario's), or a request count (--requests); the scenario's drain time
 * after it; and a hard end a few seconds later, after which everything still
 * open is cut. SIGINT or SIGTERM stops early and still writes the report of
 * what ran. Exit status: 0 when the run happened (request errors are
 * results, not failures), 1 when nothing could be measured (bad scenario
 * file, no request reached the server, outputs not writable), 2 on usage.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/arrivals.h"
#include "bench/loadgen.h"
#include "bench/plot.h"
#include "bench/report.h"
#include "bench/scenario.h"
#include "bench/scrape.h"
#include "cmd.h"
#include "err.h"
#include "file.h"

#define HARD_MARGIN_S 5.0   /* after send window + drain, the run is cut whatever happens */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera bench --scenario S.yaml --url http://127.0.0.1:8080\n"
            "                     [--duration 60s | --requests N] [--out DIR] [--seed N]\n"
            "                     [--tenants NAME,...] [--quiet]\n"
            "                     [--load X] [--time-scale X] [--tenant-map M] [--assign A]\n"
            "  --scenario  tenants, keys, arrival processes, lengths, SLOs (see scenarios/*.yaml)\n"
            "  --url       the server's base URL; nothing else is ever contacted\n"
            "  --duration  send window (default: the scenario's duration)\n"
            "  --requests  send this many requests in schedule order instead of a window\n"
            "  --out       folder for report.txt, report.json and the plots (default bench-out)\n"
            "  --seed      the schedule's seed (default 1): same seed, same traffic\n"
            "  --tenants   send only these tenants' requests; each keeps exactly the arrivals\n"
            "              it has in the full scenario (e.g. a victim alone, for a baseline)\n"
            "  --quiet     no live progress line\n"
            "  --load X        every arrival rate x X and trace timestamps / X (2: twice the traffic)\n"
            "  --time-scale X  trace timestamps x X\n"
            "  --tenant-map M  trace tenant names: from=to,... (to '-' drops, from '*' any)\n"
            "  --assign A      trace rows to tenants: column, round-robin, weighted (by --seed)\n"
            "  (no --stream: the load generator needs the whole schedule; tessera sim streams)\n"
            "With the server's admin key in TESSERA_ADMIN_KEY, bench also reads each tenant's\n"
            "engine time and cost over the run (GET /admin/tenants before and after) into the\n"
            "report, and saves the server's step-time fit and KV geometry (GET /admin/models, read\n"
            "as the send window closes) as calibration.json, which `tessera sim --calibration` reads.\n");
}

static int parse_u64(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-') return -1;
    *v = x;
    return 0;
}

/* --tenants a,b: keep[i] = 1 for the tenants named (all when list is NULL).
 * Prints the error and returns -1 for an unknown name. */
static int select_tenants(const scn *s, const char *list, uint8_t *keep) {
    memset(keep, list ? 0 : 1, SCN_MAX_TENANTS);
    if (!list) return 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    int any = 0;
    for (char *p = buf, *name; (name = strsep(&p, ","));) {
        if (!*name) continue;
        int found = 0;
        for (int i = 0; i < s->n_tenants; i++)
            if (!strcmp(s->tenants[i].name, name)) keep[i] = 1, found = any = 1;
        if (!found) {
            fprintf(stderr, "bench: --tenants: no tenant '%s' in the scenario\n", name);
            return -1;
        }
    }
    if (!any) fprintf(stderr, "bench: --tenants names no tenant\n");
    return any ? 0 : -1;
}

/*
 * The schedule, keeping only the tenants in keep. Filtering comes after
 * scheduling, so the tenants kept see the very arrivals they have in the
 * full scenario (each tenant draws from its own streams). A count bound
 * applies to what is kept: the full schedule is built with a growing count
 * until enough of it is kept or it runs dry.
 */
static int build_schedule(const scn *s, uint64_t seed, double until_s, size_t count, const uint8_t *keep,
                          arr_event **ev, size_t *n) {
    for (size_t want = count;; want *= 2) {
        int rc = arr_schedule(s, seed, until_s, want, ev, n);
        if (rc) return rc;
        size_t k = 0, total = *n;
        for (size_t i = 0; i < total; i++)
            if (keep[(*ev)[i].tenant] && (!count || k < count)) (*ev)[k++] = (*ev)[i];
        *n = k;
        if (!count || k >= count || total < want || want > ((size_t)1 << 40)) return 0;
        free(*ev);
    }
}

/* Every tenant's engine time and cost so far, from the server (NULL when
 * no admin key is set, or the server would not say: then said once). */
static scr_tenant *admin_rows(const char *url, size_t *n) {
    const char *key = getenv("TESSERA_ADMIN_KEY");
    scr_tenant *rows = NULL;
    char err[512];
    *n = 0;
    if (!key || !*key) return NULL;
    if (scr_get_tenants(url, key, 10.0, &rows, n, err, sizeof err)) {
        fprintf(stderr, "bench: no engine time or cost in the report: %s\n", err);
        return NULL;
    }
    return rows;
}

/* Each tenant's engine time, cost and engine-side TTFT over the run: the
 * server's counters after it less before it, matched by tenant name, on
 * the scenario's model only (bench sends nothing else; a tenant's use of
 * other models on the same server is not this run's). */
static void admin_costs(const scn *s, rpt *p, const scr_tenant *b, size_t nb, const scr_tenant *a, size_t na) {
    for (int i = 0; i < s->n_tenants; i++) {
        scr_tenant x, y;
        if (!scr_tenant_total(a, na, s->tenants[i].name, s->model, &y)) continue;
        scr_tenant_total(b, nb, s->tenants[i].name, s->model, &x);
        double cost = y.cost >= 0 && x.cost >= 0 ? y.cost - x.cost : -1;
        rpt_cost_set(p, i, y.engine_seconds - x.engine_seconds, cost);
        int known = y.ttft_sum_s >= 0 && x.ttft_sum_s >= 0 && y.first_tokens >= x.first_tokens;
        rpt_engine_ttft_set(p, i, known ? y.ttft_sum_s - x.ttft_sum_s : -1,
                            known ? (int64_t)(y.first_tokens - x.first_tokens) : 0);
    }
}

/* The server's /admin/models answer, read by its own thread as the send
 * window closes: the step-time fit then is that of the scenario's load,
 * where after the drain it has followed the last few requests' small
 * batches (the fit forgets within a few hundred steps). */
typedef struct snapshot {
    const char *url, *key;
    struct timespec due;    /* CLOCK_REALTIME, for the timed wait */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;               /* the run ended first: no read */
    char *body;             /* the answer, or NULL */
} snapshot;

static void *snapshot_main(void *arg) {
    snapshot *sn = arg;
    pthread_mutex_lock(&sn->mu);
    int rc = 0;
    while (!sn->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&sn->cv, &sn->mu, &sn->due);
    int go = !sn->stop;
    pthread_mutex_unlock(&sn->mu);
    char err[256];
    size_t len;
    if (go && scr_fetch(sn->url, "/admin/models", sn->key, 10.0, &sn->body, &len, err, sizeof err)) {
        free(sn->body);
        sn->body = NULL;
    }
    return NULL;
}

/* Start the snapshot due send_s from now; 0 when started (and then
 * snapshot_end must be called). */
static int snapshot_start(snapshot *sn, pthread_t *th, const char *url, const char *key, double send_s) {
    memset(sn, 0, sizeof *sn);
    sn->url = url;
    sn->key = key;
    clock_gettime(CLOCK_REALTIME, &sn->due);
    double whole = floor(send_s);
    sn->due.tv_sec += (time_t)whole;
    sn->due.tv_nsec += (long)((send_s - whole) * 1e9);
    if (sn->due.tv_nsec >= 1000000000L) { sn->due.tv_sec++; sn->due.tv_nsec -= 1000000000L; }
    pthread_mutex_init(&sn->mu, NULL);
    pthread_cond_init(&sn->cv, NULL);
    /* The thread starts with SIGINT and SIGTERM blocked, so they reach the
     * load generator's thread, whose epoll_wait they interrupt. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(th, NULL, snapshot_main, sn);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) return 0;
    pthread_mutex_destroy(&sn->mu);
    pthread_cond_destroy(&sn->cv);
    return -1;
}

/* Stop the snapshot if it is still waiting, and wait for it. */
static void snapshot_end(snapshot *sn, pthread_t th) {
    pthread_mutex_lock(&sn->mu);
    sn->stop = 1;
    pthread_cond_signal(&sn->cv);
    pthread_mutex_unlock(&sn->mu);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&sn->mu);
    pthread_cond_destroy(&sn->cv);
}

/* The server's /admin/models answer as calibration.json, for tessera sim:
 * the snapshot's, or read now when the run ended before it was taken. */
static void save_calibration(const char *url, const char *key, const char *snap_body, const char *out) {
    char *body = NULL, err[512];
    size_t len;
    const char *what = snap_body;
    if (!what) {
        if (scr_fetch(url, "/admin/models", key, 10.0, &body, &len, err, sizeof err)) {
            fprintf(stderr, "bench: no calibration.json: %s\n", err);
            free(body);
            return;
        }
        what = body;
    }
    if (file_write(out, "calibration.json", what)) fprintf(stderr, "bench: no calibration.json: cannot write it\n");
    free(body);
}

/* The report: table on stdout and in report.txt, JSON, plots. */
static int write_report(const char *out, const scn *s, const rpt *p, const rpt_req *r, size_t n, const char *url,
                        uint64_t seed) {
    rpt_table(stdout, s, p);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/report.txt", out);
    FILE *f = fopen(path, "w");
    int bad = !f;
    if (f) {
        fprintf(f, "tessera bench: scenario %s against %s, seed %llu\n", s->name, url, (unsigned long long)seed);
        rpt_table(f, s, p);
        bad |= ferror(f) | (fclose(f) != 0);
    }
    char *json = rpt_json(s, p, r, n, url, seed);
    bad |= !json || file_write(out, "report.json", json);
    free(json);
    if (bad) {
        fprintf(stderr, "bench: cannot write the report into %s\n", out);
        return 1;
    }
    char err[512] = "";
    fflush(stdout);
    if (plot_write(out, s, p, err, sizeof err)) fprintf(stderr, "bench: plots: %s\n", err);
    printf("bench: report.txt, report.json, ttft_cdf.{svg,png}, tpot_cdf.{svg,png}, tokens.{svg,png} in %s\n", out);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    static const struct option opts[] = {
        {"scenario", required_argument, 0, 's'}, {"url", required_argument, 0, 'u'},
        {"duration", required_argument, 0, 'd'}, {"requests", required_argument, 0, 'n'},
        {"out", required_argument, 0, 'o'},      {"seed", required_argument, 0, 'S'},
        {"quiet", no_argument, 0, 'q'},          {"tenants", required_argument, 0, 't'},
        {"load", required_argument, 0, 'l'},     {"time-scale", required_argument, 0, 'T'},
        {"tenant-map", required_argument, 0, 'M'}, {"assign", required_argument, 0, 'A'},
        {"stream", no_argument, 0, 'R'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *path = NULL, *url = NULL, *out = "bench-out", *dur = NULL, *only = NULL;
    uint64_t seed = 1, n_req = 0;
    int quiet = 0, ch, have_req = 0;
    scn_opts so = {0};
    char err[1024];
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's': path = optarg; break;
        case 'u': url = optarg; break;
        case 'd': dur = optarg; break;
        case 'n':
            if (parse_u64(optarg, &n_req) || n_req < 1 || n_req > 10000000) {
                fprintf(stderr, "bench: --requests wants a count from 1 to 10000000, got '%s'\n", optarg);
                return 2;
            }
            have_req = 1;
            break;
        case 'o': out = optarg; break;
        case 'S':
            if (parse_u64(optarg, &seed)) {
                fprintf(stderr, "bench: --seed wants a non-negative integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'q': quiet = 1; break;
        case 't': only = optarg; break;
        case 'l': case 'T': case 'M': case 'A': {
            const char *name = ch == 'l' ? "load" : ch == 'T' ? "time-scale" : ch == 'M' ? "tenant-map" : "assign";
            if (scn_opts_arg(&so, name, optarg, err, sizeof err)) {
                fprintf(stderr, "bench: %s\n", err);
                return 2;
            }
            break;
        }
        case 'R':
            fprintf(stderr, "bench: --stream is tessera sim's: bench sends a schedule it builds whole before the "
                            "run, so the trace is loaded whole (up to 64 MiB)\n");
            return 2;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!path || !url || optind != argc || (dur && have_req)) {
        if (dur && have_req) fprintf(stderr, "bench: give --duration or --requests, not both\n");
        usage(stderr);
        return 2;
    }
    if (lg_url_check(url, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        return 2;
    }
    double window = 0;
    if (dur && (scn_duration_parse(dur, &window) || window <= 0)) {
        fprintf(stderr, "bench: --duration wants a duration such as 60s, 500ms or 2m, got '%s'\n", dur);
        return 2;
    }
    so.assign_seed = seed;   /* weighted assignment: the same seed, the same rows per tenant */
    scn s;
    if (scn_load_opts(path, &so, &s, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        return 1;
    }
    if (!have_req && window <= 0) window = s.duration_s;
    if (!have_req && window <= 0) {
        fprintf(stderr, "bench: %s has no duration: give --duration or --requests\n", path);
        scn_free(&s);
        return 2;
    }
    if (file_mkdirs(out)) {
        fprintf(stderr, "bench: cannot make the output folder %s: %s\n", out, strerror(errno));
        scn_free(&s);
        return 1;
    }
    uint8_t keep[SCN_MAX_TENANTS];
    if (select_tenants(&s, only, keep)) {
        scn_free(&s);
        return 2;
    }
    arr_event *ev;
    size_t n;
    int rc = build_schedule(&s, seed, have_req ? 0 : window, have_req ? (size_t)n_req : 0, keep, &ev, &n);
    if (rc) {
        fprintf(stderr, "bench: cannot build the schedule: %s (is a rate absurdly high?)\n", err_str(rc));
        scn_free(&s);
        return 1;
    }
    double send_s = have_req ? (n ? ev[n - 1].t_s + 1e-6 : 0) : window;
    printf("bench: scenario %s: %zu requests from %d tenants over %.1f s to %s (seed %llu, drain %.0f s)\n", s.name, n,
           s.n_tenants, send_s, url, (unsigned long long)seed, s.drain_s);
    fflush(stdout);
    rpt_req *r = calloc(n ? n : 1, sizeof *r);
    if (!r) {
        free(ev);
        scn_free(&s);
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);   /* libcurl with NOSIGNAL leaves SIGPIPE to us */
    lg_opts o = {url, send_s, s.drain_s, send_s + s.drain_s + HARD_MARGIN_S, 5.0, !quiet, &stop_flag};
    size_t done, n_before = 0, n_after = 0;
    double run_s;
    scr_tenant *before = admin_rows(url, &n_before);
    const char *key = getenv("TESSERA_ADMIN_KEY");   /* set: admin_rows answered with it */
    snapshot snap;
    pthread_t snap_th;
    int snapping = before && snapshot_start(&snap, &snap_th, url, key, send_s) == 0;
    rc = lg_run(&s, ev, n, &o, r, &done, &run_s, err, sizeof err);
    free(ev);
    if (snapping) snapshot_end(&snap, snap_th);
    char *snap_body = snapping ? snap.body : NULL;
    scr_tenant *after = before ? admin_rows(url, &n_after) : NULL;
    if (rc) {
        fprintf(stderr, "bench: %s\n", err);
        rpt_reqs_free(r, n);
        free(r);
        free(before);
        free(after);
        free(snap_body);
        scn_free(&s);
        return 1;
    }
    if (stop_flag) fprintf(stderr, "bench: stopped by a signal after %.1f s; reporting what ran\n", run_s);
    rpt p;
    int status = 0;
    if (rpt_compute(&s, r, done, run_s, &p)) {
        fprintf(stderr, "bench: out of memory computing the report\n");
        status = 1;
    } else {
        if (after) admin_costs(&s, &p, before, n_before, after, n_after);
        status = write_report(out, &s, &p, r, done, url, seed);
        if (after) save_calibration(url, key, snap_body, out);
        int transport = 0;
        for (size_t i = 0; i < done; i++) transport += r[i].status == RPT_ST_TRANSPORT;
        if (done && p.completed == 0 && transport == (int)done) {
            fprintf(stderr, "bench: no request reached %s\n", url);
            status = 1;
        }
        rpt_free(&p);
    }
    rpt_reqs_free(r, done);
    free(r);
    free(before);
    free(after);
    free(snap_body);
    scn_free(&s);
    return status;
}
