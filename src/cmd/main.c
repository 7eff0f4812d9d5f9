/*
 * main.c - the tessera binary: one program, one subcommand per job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "ops.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} subcommand;

static const subcommand COMMANDS[] = {
    {"mkmodel", cmd_mkmodel, "write a deterministic random-weight llama GGUF model"},
    {"generate", cmd_generate, "generate text from a GGUF model"},
    {"tokenize", cmd_tokenize, "text to token ids (and back) with a GGUF model's tokenizer"},
    {"embed", cmd_embed, "embeddings of token-id sequences from a BERT-family GGUF encoder"},
    {"serve", cmd_serve, "run the OpenAI-compatible multi-tenant server"},
    {"keygen", cmd_keygen, "print a new API key and the SHA-256 the config stores"},
    {"bench", cmd_bench, "open-loop multi-tenant load against a server; isolation and fairness report"},
    {"plan", cmd_plan, "plan GPU sharing (MIG, MPS, time-slicing) for a fleet and emit its configs"},
    {"sim", cmd_sim, "simulate a plan's fleet under a scenario with the real scheduler; check its SLOs"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tessera <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n'tessera <command> --help' describes a command's options.\n");
}

/* Settings the libraries read only as they load, so that the process
 * executes itself again (once) to apply them:
 * - libgomp's default lets a thread that reaches a barrier spin for a
 *   long while (hundreds of thousands of iterations) before it sleeps. On
 *   a machine the engine shares with its own HTTP threads, a load
 *   generator or anything else, a spinning thread steals the core its
 *   partner needs: measured on 2 cores, a server's TPOT went from 8 ms to
 *   51 ms. A short spin keeps the fast wake-up of active waiting for the
 *   back-to-back parallel regions of a forward pass (measured as fast as
 *   the default on an idle machine) without burning a core while waiting.
 *   An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT is left alone.
 * - OpenBLAS's kernels where it fell back to its generic ones on a CPU it
 *   does not know (ops_blas_env).
 * If the exec fails the process runs with the libraries' defaults. */
static void load_time_settings(char **argv) {
    int exec = 0;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "10000", 1) == 0)
        exec = 1;
    exec |= ops_blas_env();
    if (exec) execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    load_time_settings(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
