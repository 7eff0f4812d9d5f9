/*
 * cmd_serve.c - `tessera serve` and `tessera keygen`.
 *
 * serve runs until SIGTERM or SIGINT, then drains: it stops accepting, lets
 * in-flight requests finish within the configured grace, ends the rest with
 * an explicit error, and exits 0. Signals are blocked before any thread
 * starts and taken with sigwait here, so no thread is interrupted mid-step.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "cmd.h"
#include "config.h"
#include "cuda_levers.h"
#include "sched.h"
#include "server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tessera serve (--config tessera.yaml | --model M.gguf) [--listen HOST:PORT]\n"
            "                     [--policy fair|fcfs] [--device cpu|cuda[:N]]\n"
            "  --config   the YAML configuration (see examples/demo.yaml)\n"
            "  --model    serve one GGUF with defaults: one tenant, whose new key is printed\n"
            "  --listen   override the listen address (port 0: any free port)\n"
            "  --policy   fair (tiers, fair share; the default) or fcfs (one arrival-order queue)\n"
            "  --device   run every model there, over the config's device: keys (cuda = cuda:0)\n");
}

/* host:port, [v6]:port, or :port. */
static int parse_listen(const char *s, cfg *c) {
    const char *colon = strrchr(s, ':');
    if (!colon) return -1;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || colon[1] == 0 || port < 0 || port > 65535) return -1;
    size_t hl = (size_t)(colon - s);
    if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    if (hl >= sizeof(c->host)) return -1;
    if (hl) {
        memcpy(c->host, s, hl);
        c->host[hl] = 0;
    }
    c->port = (uint16_t)port;
    return 0;
}

/* Every connection is a file descriptor: raise the soft limit (often 1024)
 * towards the hard one so max_connections clients can actually connect. */
static void raise_fd_limit(uint32_t max_connections) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t want = (rlim_t)max_connections + 256;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
        fprintf(stderr, "serve: only %llu file descriptors allowed; fewer than %u clients can connect\n",
                (unsigned long long)rl.rlim_cur, max_connections);
}

static void banner(const cfg *c, const srv *s, uint16_t port, const char *new_key) {
    printf("tessera: listening on http://%s:%u (policy %s)\n", c->host, (unsigned)port,
           c->policy == SCHED_POLICY_FCFS ? "fcfs" : "fair");
    for (size_t i = 0; i < c->n_models; i++) {
        char what[256];
        srv_model_describe(s, (int)i, what, sizeof(what));
        printf("tessera: model %s from %s: %s\n", c->models[i].name, c->models[i].path, what);
    }
    for (size_t i = 0; i < c->n_tenants; i++)
        printf("tessera: tenant %s (tier %s, weight %g)\n", c->tenants[i].sched.name,
               c->tiers[c->tenants[i].sched.tier].name, c->tenants[i].sched.weight);
    /* /metrics names every tenant: it is closed without a key to read it,
     * and saying so here saves a puzzled operator a 401. */
    printf("tessera: /metrics %s\n", c->has_metrics ? (c->has_admin ? "needs the metrics key or the admin key"
                                                                        : "needs the metrics key")
                                     : c->has_admin ? "needs the admin key (no metrics_key_sha256)"
                                                    : "is off (no metrics_key_sha256 or admin_key_sha256)");
    if (new_key) {
        printf("tessera: API key of tenant 'default': %s\n", new_key);
        printf("  curl -s http://%s:%u/v1/completions -H 'Authorization: Bearer %s' "
               "-H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"prompt\":\"Hello\",\"max_tokens\":16}'\n",
               c->host, (unsigned)port, new_key, c->models[0].name);
    }
    fflush(stdout);
}

static int load_config(const char *config, const char *model, cfg *c, char *key, size_t key_cap) {
    char err[512];
    if (config) {
        if (cfg_load(config, c, err, sizeof(err))) {
            fprintf(stderr, "serve: %s\n", err);
            return -1;
        }
        return 0;
    }
    uint8_t hash[AUTH_HASH_LEN];
    char hex[AUTH_HEX_LEN + 1];
    if (auth_keygen(key, key_cap)) {
        fprintf(stderr, "serve: cannot make a key\n");
        return -1;
    }
    auth_hash(key, strlen(key), hash);
    auth_hex_encode(hash, AUTH_HASH_LEN, hex);
    if (cfg_single_model(c, model, hex)) {
        fprintf(stderr, "serve: bad model path '%s'\n", model);
        return -1;
    }
    return 0;
}

/* main blocks SIGINT and SIGTERM, as does every thread it starts, and
 * takes them with sigwait. A thread started before main (OpenBLAS's
 * worker, from the library's constructor) does not block them, and one
 * sent while main is not yet in sigwait could land there and, with no
 * handler, end the process undrained (a server stopped during start-up
 * exited on SIGTERM 2 times in 6). So a handler passes such a signal on
 * to main, where it waits, blocked, for sigwait. */
static pid_t main_tid;

static void pass_to_main(int sig) {
    const int saved = errno;
    syscall(SYS_tgkill, getpid(), main_tid, sig);
    errno = saved;
}

static void pass_stops_to_main(const sigset_t *sigs) {
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_to_main;
    sa.sa_mask = *sigs;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cmd_serve(int argc, char **argv) {
    static const struct option opts[] = {{"config", required_argument, 0, 'c'}, {"model", required_argument, 0, 'm'},
                                         {"listen", required_argument, 0, 'l'}, {"policy", required_argument, 0, 'p'},
                                         {"device", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *config = NULL, *model = NULL, *listen = NULL, *policy = NULL, *device = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': config = optarg; break;
        case 'm': model = optarg; break;
        case 'l': listen = optarg; break;
        case 'p': policy = optarg; break;
        case 'd': device = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!config == !model || optind != argc || (policy && strcmp(policy, "fair") && strcmp(policy, "fcfs"))) {
        usage(stderr);
        return 2;
    }
    cfg c;
    char key[AUTH_KEY_LEN + 8], err[512] = "";
    if (load_config(config, model, &c, key, sizeof(key))) return 1;
    if (listen && parse_listen(listen, &c)) {
        fprintf(stderr, "serve: bad --listen '%s' (HOST:PORT)\n", listen);
        cfg_free(&c);
        return 2;
    }
    if (policy) c.policy = strcmp(policy, "fcfs") == 0 ? SCHED_POLICY_FCFS : SCHED_POLICY_FAIR;
    if (device) {
        int idx;
        if ((strcmp(device, "cpu") != 0 && cudalev_parse_device(device, &idx, err, sizeof(err))) ||
            strlen(device) >= sizeof(c.models[0].device)) {
            fprintf(stderr, "serve: bad --device '%s' (cpu, cuda or cuda:N)\n", device);
            cfg_free(&c);
            return 2;
        }
        for (size_t i = 0; i < c.n_models; i++) snprintf(c.models[i].device, sizeof(c.models[i].device), "%s", device);
    }
    raise_fd_limit(c.limits.max_connections);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    pass_stops_to_main(&sigs);
    signal(SIGPIPE, SIG_IGN);
    srv *s = NULL;
    if (srv_new(&c, &s, err, sizeof(err)) || srv_start(s, err, sizeof(err))) {
        fprintf(stderr, "serve: %s\n", err);
        srv_free(s); /* NULL when srv_new failed; its engine threads when srv_start did */
        cfg_free(&c);
        return 1;
    }
    banner(&c, s, srv_port(s), config ? NULL : key);
    int sig = 0;
    sigwait(&sigs, &sig);
    printf("tessera: %s: draining (grace %u s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", c.limits.shutdown_grace_s);
    fflush(stdout);
    srv_shutdown(s);
    srv_free(s);
    cfg_free(&c);
    printf("tessera: stopped\n");
    return 0;
}

static void keygen_usage(FILE *f) {
    fprintf(f, "usage: tessera keygen\n"
               "  Prints a new random API key and its SHA-256, the form a config's\n"
               "  tenants[].key_sha256 stores (the server never keeps the key itself).\n");
}

int cmd_keygen(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        keygen_usage(stdout);
        return 0;
    }
    if (argc != 1) {
        keygen_usage(stderr);
        return 2;
    }
    char key[AUTH_KEY_LEN + 8], hex[AUTH_HEX_LEN + 1];
    uint8_t hash[AUTH_HASH_LEN];
    if (auth_keygen(key, sizeof(key))) {
        fprintf(stderr, "keygen: the random number generator failed\n");
        return 1;
    }
    auth_hash(key, strlen(key), hash);
    auth_hex_encode(hash, AUTH_HASH_LEN, hex);
    printf("key:        %s\nkey_sha256: %s\n", key, hex);
    return 0;
}
