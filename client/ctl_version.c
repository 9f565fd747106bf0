/* gllmctl version: gllmctl's own version, the libgllm-client it runs with, and gllmd's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

int ctl_cmd_version(const struct ctl_globals *g, int argc, char **argv)
{
    if (argc > 1) {
        ctl_error("version takes no arguments, not '%s'", argv[1]);
        return CTL_EXIT_USAGE;
    }
    /* The daemon is optional here: quietly, without the usual advice on stderr. */
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client *c = NULL;
    char path[108] = "";
    if (g->socket)
        snprintf(path, sizeof path, "%s", g->socket);
    else
        gllm_default_socket_path(path, sizeof path);
    int r = path[0] ? gllm_connect(path, &c) : -ENOENT;
    if (r < 0 && !g->socket && !(getenv("GLLM_SOCKET") && getenv("GLLM_SOCKET")[0]) &&
        strcmp(path, "/run/gllm/gllmd.sock") != 0) {
        snprintf(path, sizeof path, "/run/gllm/gllmd.sock");
        r = gllm_connect(path, &c);
    }
    if (r == 0) {
        gllm_client_caps(c, &caps);
        gllm_disconnect(c);
    }
    if (g->json) {
        printf("{\"schema_version\": 1, \"gllmctl\": \"%s\", \"libgllm_client\": ",
               GLLM_VERSION_STRING);
        ctl_json_str(gllm_version());
        printf(", \"gllmd\": ");
        if (r == 0) {
            ctl_json_str(caps.daemon_version);
            printf(", \"protocol\": %d, \"backend\": ", caps.protocol_version);
            ctl_json_str(caps.backend);
        } else {
            printf("null");
        }
        printf("}\n");
        return 0;
    }
    printf("gllmctl %s\nlibgllm-client %s\n", GLLM_VERSION_STRING, gllm_version());
    if (r == 0)
        printf("gllmd %s (protocol %d, backend %s) at %s\n", caps.daemon_version,
               caps.protocol_version, caps.backend, path);
    else
        printf("gllmd: not reachable at %s (%s)\n", path[0] ? path : "(no default path)",
               gllm_strerror(r));
    return 0;
}

int ctl_print_own_version(const struct ctl_globals *g)
{
    if (g->json) {
        printf("{\"schema_version\": 1, \"gllmctl\": \"%s\", \"libgllm_client\": ",
               GLLM_VERSION_STRING);
        ctl_json_str(gllm_version());
        printf("}\n");
    } else {
        printf("gllmctl %s\nlibgllm-client %s\n", GLLM_VERSION_STRING, gllm_version());
    }
    return 0;
}
