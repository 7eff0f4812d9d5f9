/*
 * cmd_plan.c - `tessera plan --input fleet.yaml [--emit KIND] [--out DIR]
 * [--exact-limit N]`: plan GPU sharing for a fleet and its tenants (see
 * cluster/plan.h) and print the report or the configurations that apply it.
 *
 * Exit status: 0 when every tenant is served within its targets, 1 when the
 * plan is infeasible (the output is still written and the problems go to
 * stderr, each naming a tenant, the failing constraint and the fix) or on a
 * runtime error, 2 on a usage or input error.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster/emit.h"
#include "cluster/plan.h"
#include "cluster/planio.h"
#include "cmd.h"
#include "err.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera plan --input FLEET.yaml [--emit KIND] [--out DIR] [--exact-limit N]\n"
            "Plans how the fleet's GPUs are shared (MIG, MPS, time-slicing) so every tenant meets\n"
            "its tier's TTFT/TPOT targets at its load, packs the slices onto the fewest GPUs, and\n"
            "prints the report or the configuration that applies the plan.\n"
            "  --emit KIND        table (default), json, nvidia-smi, mig-parted, mps, k8s, serve, gie,\n"
            "                     kueue\n"
            "  --out DIR          write the files under DIR instead of printing them\n"
            "  --exact-limit N    run the exact branch and bound when there are at most N slices\n"
            "                     (default: options.exact_limit of the input, else 12; 0 = never)\n"
            "Exit status: 0 feasible, 1 infeasible (problems on stderr), 2 bad usage or input.\n"
            "The input schema is in src/cluster/planio.h; examples/plan/ has examples.\n");
}

/* mkdir -p for the folders of path (not its last component). */
static int make_parents(char *path) {
    for (char *s = path + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        int rc = mkdir(path, 0777);
        *s = '/';
        if (rc != 0 && errno != EEXIST) return -1;
    }
    return 0;
}

static int write_files(const emit_out *out, const char *dir) {
    for (size_t i = 0; i < out->n; i++) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/%s", dir, out->files[i].path);
        if (n < 0 || (size_t)n >= sizeof path) {
            fprintf(stderr, "plan: path too long: %s/%s\n", dir, out->files[i].path);
            return -1;
        }
        if (make_parents(path) != 0) {
            fprintf(stderr, "plan: cannot create the folders of %s: %s\n", path, strerror(errno));
            return -1;
        }
        FILE *f = fopen(path, "wb");
        if (!f) {
            fprintf(stderr, "plan: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
        size_t w = fwrite(out->files[i].data, 1, out->files[i].len, f);
        if (fclose(f) != 0 || w != out->files[i].len) {
            fprintf(stderr, "plan: error writing %s\n", path);
            return -1;
        }
        /* Shell scripts are meant to be run. */
        size_t len = strlen(path);
        if (len > 3 && strcmp(path + len - 3, ".sh") == 0) chmod(path, 0755);
    }
    return 0;
}

int cmd_plan(int argc, char **argv) {
    static const struct option opts[] = {{"input", required_argument, 0, 'i'},
                                         {"emit", required_argument, 0, 'e'},
                                         {"out", required_argument, 0, 'o'},
                                         {"exact-limit", required_argument, 0, 'x'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *input = NULL, *dir = NULL;
    int kind = EMIT_TABLE, exact = -1, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': input = optarg; break;
        case 'o': dir = optarg; break;
        case 'e':
            if ((kind = emit_kind_parse(optarg)) < 0) {
                fprintf(stderr,
                        "plan: unknown --emit '%s' (table, json, nvidia-smi, mig-parted, mps, k8s, serve, gie, "
                        "kueue)\n",
                        optarg);
                return 2;
            }
            break;
        case 'x': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 64) {
                fprintf(stderr, "plan: --exact-limit wants an integer in 0..64, got '%s'\n", optarg);
                return 2;
            }
            exact = (int)v;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!input || optind < argc) {
        if (optind < argc) fprintf(stderr, "plan: unexpected argument '%s'\n", argv[optind]);
        else fprintf(stderr, "plan: --input is required\n");
        usage(stderr);
        return 2;
    }
    plan_input in;
    char err[1024];
    int rc = planio_load(input, &in, err, sizeof err);
    if (rc) {
        fprintf(stderr, "plan: %s\n", err[0] ? err : err_str(rc));
        return rc == TS_ERR_NOMEM ? 1 : 2;
    }
    if (exact >= 0) in.exact_limit = exact;
    plan p;
    if ((rc = plan_build(&in, &p))) {
        fprintf(stderr, "plan: %s\n", err_str(rc));
        plan_input_free(&in);
        return rc == TS_ERR_INVAL ? 2 : 1;
    }
    emit_out out;
    int status = 0;
    if ((rc = emit_run(&p, kind, &out))) {
        /* A plan that cannot be written as asked (tenant names that clash as
         * Kubernetes names) is the input's fault, and the emitter says why:
         * status 2, like bad input. An error without a why is tessera's own. */
        fprintf(stderr, "plan: %s\n", out.why[0] ? out.why : err_str(rc));
        status = rc == TS_ERR_INVAL && out.why[0] ? 2 : 1;
    } else {
        if (dir) {
            if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "plan: cannot create %s: %s\n", dir, strerror(errno));
                status = 1;
            } else if (write_files(&out, dir) != 0) {
                status = 1;
            } else {
                for (size_t i = 0; i < out.n; i++) fprintf(stderr, "plan: wrote %s/%s\n", dir, out.files[i].path);
            }
        } else if (emit_print(&out, stdout) != 0) {
            fprintf(stderr, "plan: error writing the output\n");
            status = 1;
        }
        emit_out_free(&out);
        if (kind == EMIT_K8S && emit_k8s_notes(&p, stderr) != 0) status = 1;
    }
    /* The table already lists the problems; other outputs would hide them. */
    if (!p.feasible) {
        if (kind != EMIT_TABLE || dir)
            for (size_t i = 0; i < p.n_problems; i++) fprintf(stderr, "plan: %s\n", p.problems[i].text);
        fprintf(stderr, "plan: infeasible: %zu problem%s\n", p.n_problems, p.n_problems == 1 ? "" : "s");
        if (!status) status = 1;
    }
    plan_free(&p);
    plan_input_free(&in);
    return status;
}
