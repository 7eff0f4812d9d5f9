/*
 * cmd.h - the subcommands of the tessera binary. Each takes the arguments
 * after its name (argv[0] is the subcommand) and returns the process exit
 * status: 0 on success, 1 on a runtime failure, 2 on a usage error.
 */
#ifndef TS_CMD_H
#define TS_CMD_H

int cmd_mkmodel(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_sim(int argc, char **argv);

#endif
