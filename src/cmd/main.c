/*
 * main.c - the tessera binary: one program, one subcommand per job.
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} subcommand;

static const subcommand COMMANDS[] = {
    {"mkmodel", cmd_mkmodel, "write a deterministic random-weight llama GGUF model"},
    {"generate", cmd_generate, "generate text from a GGUF model"},
    {"serve", cmd_serve, "run the OpenAI-compatible multi-tenant server"},
    {"keygen", cmd_keygen, "print a new API key and the SHA-256 the config stores"},
    {"bench", cmd_bench, "open-loop multi-tenant load against a server; isolation and fairness report"},
    {"plan", cmd_plan, "plan GPU sharing (MIG, MPS, time-slicing) for a fleet and emit its configs"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tessera <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n'tessera <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
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
