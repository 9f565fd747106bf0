/* gllmd: command line, backend selection, and the server's lifetime. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "log.h"
#include "server.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: gllmd [OPTIONS]\n"
            "Serve attention jobs to local clients over a Unix socket.\n\n"
            "  -s, --socket PATH     listen here (default: $GLLM_SOCKET, else\n"
            "                        $XDG_RUNTIME_DIR/gllm/gllmd.sock, or\n"
            "                        /run/gllm/gllmd.sock for root)\n"
            "  -b, --backend NAME    auto (default: cuda if usable, else cpu), cuda or cpu\n"
            "  -t, --threads N       CPU backend threads (default: one per online CPU)\n"
            "      --max-inflight N  jobs in flight per client (default 256)\n"
            "  -v, --verbose         log every connection\n"
            "  -V, --version         print the version and exit\n"
            "  -h, --help            print this help and exit\n");
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

static struct server srv;   /* large (packet buffers): not on the stack */

int main(int argc, char **argv)
{
    enum { OPT_MAX_INFLIGHT = 256 };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"backend", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},
        {"max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *socket_path = NULL, *backend_name = "auto";
    struct backend_config cfg = {0};
    struct limits limits = LIMITS_DEFAULT;
    int level = LOG_INFO;
    int c;
    long v;
    while ((c = getopt_long(argc, argv, "s:b:t:vVh", opts, NULL)) != -1) {
        switch (c) {
        case 's': socket_path = optarg; break;
        case 'b': backend_name = optarg; break;
        case 't':
            if (parse_uint(optarg, 1024, &v) < 0) {
                fprintf(stderr, "gllmd: --threads wants a number from 0 to 1024\n");
                return 2;
            }
            cfg.threads = (int)v;
            break;
        case OPT_MAX_INFLIGHT:
            if (parse_uint(optarg, 1 << 20, &v) < 0 || v == 0) {
                fprintf(stderr, "gllmd: --max-inflight wants a number from 1 to 1048576\n");
                return 2;
            }
            limits.max_inflight = (uint32_t)v;
            break;
        case 'v': level = LOG_DEBUG; break;
        case 'V': {
            char desc[512];
            backend_describe(desc, sizeof desc);
            printf("gllmd %s (protocol %d; backends: %s)\n", GLLM_VERSION, GLLM_PROTOCOL_VERSION,
                   backend_names());
            if (desc[0])
                printf("%s\n", desc);
            return 0;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gllmd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    log_init(level);
    signal(SIGPIPE, SIG_IGN);

    char path[108];
    if (!socket_path) {
        int r = gllm_default_socket_path(path, sizeof path);
        if (r < 0) {
            log_err("no socket path: pass --socket, or set XDG_RUNTIME_DIR or GLLM_SOCKET");
            return 1;
        }
        socket_path = path;
    }

    struct backend *be;
    char why[512];
    int r = backend_select(backend_name, &cfg, &be, why, sizeof why);
    if (r < 0) {
        log_err("backend '%s': %s", backend_name, why[0] ? why : gllm_strerror(r));
        return 1;
    }
    if (why[0])
        log_info("backend %s chosen; passed over %s", be->iface->name, why);

    uv_loop_t loop;
    uv_loop_init(&loop);
    r = server_init(&srv, &loop, be, &limits, socket_path);
    if (r < 0) {
        log_err("cannot serve on %s: %s", socket_path,
                r == -EADDRINUSE ? "another gllmd is already listening there" : gllm_strerror(r));
        return 1;
    }
    log_info("gllmd %s ready: backend %s, %d device(s); socket %s", GLLM_VERSION,
             be->iface->name, srv.ndevices, socket_path);
    for (int i = 0; i < srv.ndevices; i++) {
        gllm_device_info d;
        if (be->iface->device_info(be, i, &d) < 0)
            continue;
        if (d.cc_major)
            log_info("device %d: %s, compute capability %d.%d, %.1f GiB, kernels: %s", i, d.name,
                     d.cc_major, d.cc_minor, (double)d.memory_bytes / (1ull << 30), d.image);
        else
            log_info("device %d: %s, %d threads", i, d.name, d.threads);
    }
    r = server_run(&srv);
    be->iface->close(be);
    return r < 0 ? 1 : 0;
}
