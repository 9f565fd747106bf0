/* gllmctl's shared helpers: connecting, JSON output, timing and sorting for the benchmarks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

void ctl_usage(FILE *f)
{
    fprintf(f,
            "Usage: gllmctl [--socket PATH] COMMAND [ARGS]\n\n"
            "Commands:\n"
            "  status [--json]                    daemon, devices, clients and job counts\n"
            "  attn Q.npy K.npy V.npy -o OUT.npy  run one attention job on .npy files\n"
            "       [--causal] [--scale X] [--dtype f32|f16|bf16] [--lse LSE.npy]\n"
            "  bench [--json] [--iters N]         standard prefill shapes through the daemon\n"
            "  bench --decode [--json] [--iters N] paged decode, device-resident: added latency\n\n"
            "Exit status: 0 ok, 1 failure, 2 usage error, 3 daemon not running.\n");
}

int ctl_connect(const char *socket_path, gllm_client **c)
{
    int r = gllm_connect(socket_path, c);
    if (r == 0)
        return 0;
    char path[108] = "";
    if (socket_path)
        snprintf(path, sizeof path, "%s", socket_path);
    else
        gllm_default_socket_path(path, sizeof path);
    fprintf(stderr, "gllmctl: cannot reach gllmd at %s: %s\n", path[0] ? path : "(no default)",
            gllm_strerror(r));
    if (r == -ENOENT || r == -ECONNREFUSED)
        return CTL_EXIT_NOT_RUNNING;
    return 1;
}

uint64_t ctl_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void ctl_sort_u64(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
}

void ctl_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

const char *ctl_first_device_name(gllm_client *c, gllm_device_info *buf)
{
    *buf = (gllm_device_info)GLLM_DEVICE_INFO_INIT;
    return gllm_client_device(c, 0, buf) == 0 ? buf->name : "";
}

void ctl_json_open(gllm_client *c, const char *list)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    printf("{\"backend\": ");
    ctl_json_str(caps.backend);
    printf(", \"device\": ");
    ctl_json_str(ctl_first_device_name(c, &dev));
    printf(", \"%s\": [", list);
}

int ctl_bench_parse(int argc, char **argv, struct ctl_bench_opts *o)
{
    *o = (struct ctl_bench_opts){.iters = 5};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            o->json = true;
        } else if (strcmp(argv[i], "--decode") == 0) {
            o->decode = true;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            o->iters = atoi(argv[++i]);
            if (o->iters < 1 || o->iters > 100000) {
                fprintf(stderr, "gllmctl bench: --iters wants 1 to 100000\n");
                return 2;
            }
        } else {
            fprintf(stderr, "gllmctl bench: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    return 0;
}
