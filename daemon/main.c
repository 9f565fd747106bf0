/* gllmd: command line and configuration, backend selection, the server's lifetime. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "backend.h"
#include "capabilities.h"
#include "config.h"
#include "devproc.h"
#include "log.h"
#include "lifecycle.h"
#include "methods.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: gllmd [OPTIONS]\n"
            "Serve attention jobs to local clients over a Unix socket.\n\n"
            "  -c, --config PATH     configuration file (default " CONFIG_DEFAULT_PATH ",\n"
            "                        used when it exists)\n"
            "      --check-config    validate the configuration, print it, and exit\n"
            "  -s, --socket PATH     listen here (default: $GLLM_SOCKET, else\n"
            "                        /run/gllm/gllmd.sock for root, else\n"
            "                        $XDG_RUNTIME_DIR/gllm/gllmd.sock); ignored when systemd\n"
            "                        passes a listening socket\n"
            "  -b, --backend NAME    auto (default: the best that opens here) or one of\n"
            "                        %s\n"
            "  -t, --threads N       CPU backend threads (default: one per usable CPU)\n"
            "      --max-inflight N  jobs in flight per client (default 256)\n"
            "  -v, --verbose         log at debug level\n"
            "  -V, --version         print the version and the embedded kernels, and exit\n"
            "      --capabilities    print what each compiled-in backend computes (JSON), and exit\n"
            "  -h, --help            print this help and exit\n\n"
            "Flags override the file. SIGHUP re-reads the file; SIGTERM drains and exits.\n",
            backend_names());
}

static int parse_uint(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < 0 || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

struct options {
    const char *config_path;
    bool config_required;
    struct config_overrides over;
};

static struct server srv;   /* large (packet buffers): not on the stack */

/* defaults < file < flags */
static int effective_config(const struct options *o, struct config *cfg, char *err, size_t len)
{
    config_defaults(cfg);
    int r = config_load(cfg, o->config_path, o->config_required, err, len);
    if (r < 0)
        return r;
    config_apply_overrides(cfg, &o->over);
    return 0;
}

static int reload(struct server *s, void *arg, char *why, size_t len)
{
    const struct options *o = arg;
    struct config cfg;
    if (effective_config(o, &cfg, why, len) < 0) {
        log_err("reload: %s; keeping the running configuration", why);
        return -EINVAL;
    }
    if (cfg.threads != 0 || strcmp(cfg.backend, "auto") != 0 || cfg.socket_path[0] ||
        cfg.deterministic || !cfg.device_processes)
        log_info("reload: socket, backend, threads, deterministic and device_processes take "
                 "effect at the next start");
    server_apply_config(s, &cfg);
    return 0;
}

/* A policy's lists as the config file spells them: PREFIX_users = 0, 1000 and PREFIX_groups. */
static void print_policy(const char *prefix, const struct access_policy *p)
{
    printf("%s_users =", prefix);
    for (int i = 0; i < p->nuids; i++)
        printf("%s%u", i ? ", " : " ", (unsigned)p->uids[i]);
    printf("\n%s_groups =", prefix);
    for (int i = 0; i < p->ngids; i++)
        printf("%s%u", i ? ", " : " ", (unsigned)p->gids[i]);
    printf("\n");
}

static void print_config(const struct config *c, const char *socket_path)
{
    printf("socket = %s\nbackend = %s\nthreads = %d\nlog_level = %s\n", socket_path, c->backend,
           c->threads, config_level_name(c->log_level));
    printf("max_device_bytes = %llu\nmax_device_bytes_total = %llu\n",
           (unsigned long long)c->limits.max_device_bytes,
           (unsigned long long)c->limits.max_device_bytes_total);
    printf("max_connections = %u\nmax_prehello_bytes = %u\nmax_arenas = %u\n"
           "max_arena_bytes = %llu\nmax_inflight = %u\nmax_inflight_total = %u\n"
           "max_elements = %llu\nmax_outq_bytes = %u\nmax_page_entries = %u\n"
           "wait_timeout_ms = %u\ndrain_timeout_s = %u\n"
           "status_interval_s = %u\n",
           c->limits.max_connections, c->limits.max_prehello_bytes, c->limits.max_arenas,
           (unsigned long long)c->limits.max_arena_bytes, c->limits.max_inflight,
           c->limits.max_inflight_total, (unsigned long long)c->limits.max_elements,
           c->limits.max_outq_bytes, c->limits.max_page_entries, c->limits.wait_timeout_ms,
           c->drain_timeout_s,
           c->status_interval_s);
    printf("busy_poll = %s\n", c->busy_poll < 0 ? "auto" : c->busy_poll ? "on" : "off");
    printf("deterministic = %s\n", c->deterministic ? "on" : "off");
    printf("watchdog_ms = %llu\nwatchdog_gflops = %llu\nexit_on_reset_failure = %s\n",
           (unsigned long long)c->watchdog_ms, (unsigned long long)c->watchdog_gflops,
           c->exit_on_reset_failure ? "on" : "off");
    printf("device_processes = %s\n", c->device_processes ? "on" : "off");
    print_policy("allow", &c->policy);
    print_policy("admin", &c->admin);
}

/* The socket systemd passed (gllmd.socket), or -1 to bind our own. */
static int activated_socket(void)
{
    int n = sd_listen_fds(1);
    if (n <= 0)
        return -1;
    if (n > 1)
        log_warn("systemd passed %d sockets; using the first", n);
    if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
        log_err("the socket systemd passed is not a listening SOCK_SEQPACKET Unix socket "
                "(ListenSequentialPacket= in gllmd.socket)");
        return -2;
    }
    return SD_LISTEN_FDS_START;
}

int main(int argc, char **argv)
{
    enum { OPT_MAX_INFLIGHT = 256, OPT_CHECK_CONFIG, OPT_CAPABILITIES };
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, OPT_CHECK_CONFIG},
        {"socket", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},
        {"max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"capabilities", no_argument, NULL, OPT_CAPABILITIES},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
#ifdef GLLM_FAULT_INJECTION
    devproc_test_hooks = true;
#endif
    if (argc > 1 && strcmp(argv[1], "--device-process") == 0)
        return devproc_child_main(argc, argv);     /* started by gllmd itself */
    static struct options o = {.config_path = CONFIG_DEFAULT_PATH};
    bool check_only = false;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "c:s:b:t:vVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o.config_path = optarg; o.config_required = true; break;
        case OPT_CHECK_CONFIG: check_only = true; break;
        case 's':
            if (optarg[0] != '/' && optarg[0] != '.' ) {
                fprintf(stderr, "gllmd: --socket wants a path\n");
                return 2;
            }
            snprintf(o.over.values.socket_path, sizeof o.over.values.socket_path, "%s", optarg);
            o.over.socket_path = true;
            break;
        case 'b':
            if (!backend_known(optarg)) {
                fprintf(stderr, "gllmd: --backend wants auto or one of %s\n", backend_names());
                return 2;
            }
            snprintf(o.over.values.backend, sizeof o.over.values.backend, "%s", optarg);
            o.over.backend = true;
            break;
        case 't':
            if (parse_uint(optarg, 1024, &v) < 0) {
                fprintf(stderr, "gllmd: --threads wants a number from 0 to 1024\n");
                return 2;
            }
            o.over.values.threads = (int)v;
            o.over.threads = true;
            break;
        case OPT_MAX_INFLIGHT:
            if (parse_uint(optarg, 1 << 20, &v) < 0 || v == 0) {
                fprintf(stderr, "gllmd: --max-inflight wants a number from 1 to 1048576\n");
                return 2;
            }
            o.over.values.limits.max_inflight = (uint32_t)v;
            o.over.max_inflight = true;
            break;
        case 'v': o.over.values.log_level = LOG_DEBUG; o.over.log_level = true; break;
        case 'V': {
            char desc[512];
            backend_describe(desc, sizeof desc);
            printf("gllmd %s (protocol %d; backends: %s)\n", GLLM_VERSION, GLLM_PROTOCOL_VERSION,
                   backend_names());
            if (desc[0])
                printf("%s\n", desc);
            return 0;
        }
        case OPT_CAPABILITIES: capabilities_print(stdout); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gllmd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }

    struct config cfg;
    char err[256];
    if (effective_config(&o, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "gllmd: %s\n", err);
        return 1;
    }
    char path[108];
    const char *socket_path = cfg.socket_path;
    if (!socket_path[0]) {
        if (gllm_default_socket_path(path, sizeof path) < 0) {
            fprintf(stderr, "gllmd: no socket path: pass --socket, or set XDG_RUNTIME_DIR or "
                            "GLLM_SOCKET\n");
            return 1;
        }
        socket_path = path;
    }
    if (check_only) {
        print_config(&cfg, socket_path);
        printf("# configuration OK\n");
        return 0;
    }
    log_init(cfg.log_level);
#ifdef GLLM_FAULT_INJECTION
    debug_fault_enabled = true;
    log_warn("fault injection on (debug_fault): a test build, not for serving");
#endif
    signal(SIGPIPE, SIG_IGN);

    int listen_fd = activated_socket();
    if (listen_fd == -2)
        return 1;

    struct backend *be;
    char why[512];
    struct backend_config bcfg = {.threads = cfg.threads, .deterministic = cfg.deterministic,
                                  .log = {.fn = log_hook, .level = LOG_DEBUG}};
    int r = cfg.device_processes
                ? devproc_open(cfg.backend, &bcfg, cfg.log_level, &be, why, sizeof why)
                : backend_select(cfg.backend, &bcfg, &be, why, sizeof why);
    if (r < 0) {
        log_err("backend '%s': %s", cfg.backend, why[0] ? why : gllm_strerror(r));
        return 1;
    }
    if (why[0])
        log_info("backend %s chosen; passed over %s", backend_name(be), why);
    if (cfg.device_processes)
        log_info("each device's backend runs in a process of its own (device_processes = on)");

    uv_loop_t loop;
    uv_loop_init(&loop);
    r = server_init(&srv, &loop, be, &cfg, socket_path, listen_fd);
    if (r < 0) {
        log_err("cannot serve on %s: %s", socket_path,
                r == -EADDRINUSE ? "another gllmd is already listening there" : gllm_strerror(r));
        return 1;
    }
    srv.reload = reload;
    srv.reload_arg = &o;
    log_info("gllmd %s ready: backend %s, %d device(s); socket %s%s", GLLM_VERSION,
             backend_name(be), srv.ndevices, socket_path,
             listen_fd >= 0 ? " (from systemd)" : "");
    for (int i = 0; i < srv.ndevices; i++) {
        gllm_device_info d;
        if (backend_device_info(be, i, &d) < 0)
            continue;
        if (d.cc_major)
            log_info("device %d: %s, compute capability %d.%d, %.1f GiB, kernels: %s", i, d.name,
                     d.cc_major, d.cc_minor, (double)d.memory_bytes / (1ull << 30), d.image);
        else
            log_info("device %d: %s, %d threads", i, d.name, d.threads);
    }
    r = server_run(&srv);
    backend_close(be);
    return r < 0 ? 1 : 0;
}
