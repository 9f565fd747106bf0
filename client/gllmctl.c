/* gllmctl: the operator's tool, built only on libgllm-client: options, then one command. */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

int main(int argc, char **argv)
{
    const char *sock = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            sock = argv[++i];
        } else if (strncmp(argv[i], "--socket=", 9) == 0) {
            sock = argv[i] + 9;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            ctl_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gllmctl %s\n", gllm_version());
            return 0;
        } else {
            fprintf(stderr, "gllmctl: unknown option '%s'\n", argv[i]);
            ctl_usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        ctl_usage(stderr);
        return 2;
    }
    const char *cmd = argv[i];
    if (strcmp(cmd, "status") == 0)
        return ctl_cmd_status(sock, argc - i, argv + i);
    if (strcmp(cmd, "attn") == 0)
        return ctl_cmd_attn(sock, argc - i, argv + i);
    if (strcmp(cmd, "bench") == 0) {
        struct ctl_bench_opts o;
        int r = ctl_bench_parse(argc - i, argv + i, &o);
        if (r)
            return r;
        return o.decode ? ctl_cmd_bench_decode(sock, &o) : ctl_cmd_bench(sock, &o);
    }
    fprintf(stderr, "gllmctl: unknown command '%s'\n", cmd);
    ctl_usage(stderr);
    return 2;
}
