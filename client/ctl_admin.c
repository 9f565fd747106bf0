/* gllmctl drain, reload and client: the administrators' commands (gllm_admin_*). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ctl.h"

/* A refused or failed call, said once: DENIED is exit status 4, with who may. */
static int admin_failed(gllm_client *c, const char *cmd, int r)
{
    const char *why = gllm_client_last_error(c);
    if (why && why[0])
        ctl_error("%s", why);   /* gllmd's words name the method already */
    else
        ctl_error("%s: %s", cmd, gllm_strerror(r));
    if (r == GLLM_EDENIED) {
        fprintf(stderr, "gllmctl: run it as root (sudo) or as gllmd's user, or have your user "
                        "or group named\n  in admin_users or admin_groups of gllmd.conf "
                        "(gllmctl(1), ADMINISTRATION)\n");
        return CTL_EXIT_NO_PERMISSION;
    }
    return CTL_EXIT_FAILURE;
}

/* Until gllmd closes the connection (it does when the drain is done). */
static void wait_closed(gllm_client *c)
{
    const int fd = gllm_client_fd(c);
    char byte;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return;
        if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
            return;
        if ((p.revents & POLLIN) && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
            return;
        if (p.revents & POLLIN)
            return;     /* something unasked for: not ours to read; the drain is under way */
    }
}

int ctl_cmd_drain(const struct ctl_globals *g, int argc, char **argv)
{
    bool wait = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0) {
            wait = true;
        } else {
            ctl_error("drain: unknown argument '%s'", argv[i]);
            return CTL_EXIT_USAGE;
        }
    }
    gllm_client *c;
    int r = ctl_connect(g->socket, &c);
    if (r)
        return r;
    uint64_t inflight = 0;
    r = gllm_admin_drain(c, &inflight);
    if (r < 0) {
        r = admin_failed(c, "drain", r);
        gllm_disconnect(c);
        return r;
    }
    if (g->json)
        printf("{\"schema_version\": 1, \"draining\": true, \"jobs_inflight\": %llu}\n",
               (unsigned long long)inflight);
    else
        printf("gllmd: draining, %llu jobs in flight\n", (unsigned long long)inflight);
    fflush(stdout);
    if (wait) {
        wait_closed(c);
        if (!g->json)
            printf("gllmd: drained and stopped\n");
    }
    gllm_disconnect(c);
    return 0;
}

int ctl_cmd_reload(const struct ctl_globals *g, int argc, char **argv)
{
    if (argc > 1) {
        ctl_error("reload takes no arguments, not '%s'", argv[1]);
        return CTL_EXIT_USAGE;
    }
    gllm_client *c;
    int r = ctl_connect(g->socket, &c);
    if (r)
        return r;
    r = gllm_admin_reload(c);
    if (r < 0) {
        r = admin_failed(c, "reload", r);
    } else {
        printf(g->json ? "{\"schema_version\": 1, \"reloaded\": true}\n"
                       : "gllmd: configuration reloaded\n");
        r = 0;
    }
    gllm_disconnect(c);
    return r;
}

static void print_clients_text(const gllm_admin_client *v, int n)
{
    printf("%6s %7s %6s %-15s %5s %8s %6s %10s %10s %5s %8s\n", "ID", "PID", "UID", "COMMAND",
           "ADMIN", "UP", "ARENAS", "MAPPED", "DEVICE", "JOBS", "DONE");
    for (int i = 0; i < n; i++) {
        uint64_t done = 0;
        for (int j = 0; j < v[i].nmethods; j++)
            done += v[i].jobs[j].ok + v[i].jobs[j].failed;
        printf("%6llu %7d %6u %-15s %5s %7.0fs %6u %8.1f M %8.1f M %5u %8llu\n",
               (unsigned long long)v[i].id, v[i].pid, v[i].uid, v[i].comm,
               v[i].admin ? "yes" : "no", v[i].connected_s, v[i].arenas,
               (double)v[i].arena_bytes / (1 << 20), (double)v[i].device_bytes / (1 << 20),
               v[i].inflight, (unsigned long long)done);
    }
}

static void print_client_json(const gllm_admin_client *ci)
{
    printf("{\"id\": %llu, \"pid\": %d, \"uid\": %u, \"gid\": %u, \"comm\": ",
           (unsigned long long)ci->id, ci->pid, ci->uid, ci->gid);
    ctl_json_str(ci->comm);
    printf(", \"admin\": %s, \"connected_s\": %.3f, \"inflight\": %u, \"arenas\": %u, "
           "\"arena_bytes\": %llu, \"device_bytes\": %llu, \"jobs\": [", ci->admin ? "true" : "false",
           ci->connected_s, ci->inflight, ci->arenas, (unsigned long long)ci->arena_bytes,
           (unsigned long long)ci->device_bytes);
    for (int j = 0; j < ci->nmethods; j++) {
        printf("%s{\"method\": ", j ? ", " : "");
        ctl_json_str(ci->jobs[j].method);
        printf(", \"ok\": %llu, \"failed\": %llu}", (unsigned long long)ci->jobs[j].ok,
               (unsigned long long)ci->jobs[j].failed);
    }
    printf("]}");
}

static void print_clients(const struct ctl_globals *g, const gllm_admin_client *v, int n)
{
    if (g->format == CTL_FORMAT_JSON) {
        printf("{\"schema_version\": 1, \"clients\": [");
        for (int i = 0; i < n; i++) {
            printf("%s", i ? ", " : "");
            print_client_json(&v[i]);
        }
        printf("]}\n");
    } else if (g->format == CTL_FORMAT_CSV) {
        printf("id,pid,uid,gid,comm,admin,connected_s,inflight,arenas,arena_bytes,device_bytes\n");
        for (int i = 0; i < n; i++) {
            printf("%llu,%d,%u,%u,", (unsigned long long)v[i].id, v[i].pid, v[i].uid, v[i].gid);
            ctl_csv_str(v[i].comm);
            printf(",%s,%.3f,%u,%u,%llu,%llu\n", v[i].admin ? "yes" : "no", v[i].connected_s,
                   v[i].inflight, v[i].arenas, (unsigned long long)v[i].arena_bytes,
                   (unsigned long long)v[i].device_bytes);
        }
    } else {
        print_clients_text(v, n);
    }
}

static void print_jobs(const struct ctl_globals *g, const gllm_admin_client *ci)
{
    if (g->format == CTL_FORMAT_JSON) {
        printf("{\"schema_version\": 1, \"client\": ");
        print_client_json(ci);
        printf("}\n");
        return;
    }
    if (g->format == CTL_FORMAT_CSV) {
        printf("id,method,ok,failed\n");
        for (int j = 0; j < ci->nmethods; j++)
            printf("%llu,%s,%llu,%llu\n", (unsigned long long)ci->id, ci->jobs[j].method,
                   (unsigned long long)ci->jobs[j].ok, (unsigned long long)ci->jobs[j].failed);
        return;
    }
    printf("client %llu: pid %d, uid %u, %s, connected %.0f s; %u jobs in flight\n",
           (unsigned long long)ci->id, ci->pid, ci->uid, ci->comm, ci->connected_s, ci->inflight);
    printf("  %-18s %10s %10s\n", "METHOD", "OK", "FAILED");
    for (int j = 0; j < ci->nmethods; j++)
        printf("  %-18s %10llu %10llu\n", ci->jobs[j].method, (unsigned long long)ci->jobs[j].ok,
               (unsigned long long)ci->jobs[j].failed);
}

/* A connection's ID: a whole number from 1. */
static int parse_id(const char *sub, const char *s, uint64_t *id)
{
    long v;
    if (!s || ctl_parse_int(s, 1, 0x7fffffffL, &v) < 0) {
        ctl_error("client %s wants a connection ID (gllmctl client list)%s%s%s", sub,
                  s ? ", not '" : "", s ? s : "", s ? "'" : "");
        return CTL_EXIT_USAGE;
    }
    *id = (uint64_t)v;
    return 0;
}

int ctl_cmd_client(const struct ctl_globals *g, int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : NULL;
    uint64_t id = 0;
    if (!sub) {
        ctl_error("client wants list, jobs ID or disconnect ID");
        return CTL_EXIT_USAGE;
    }
    const bool list = strcmp(sub, "list") == 0, jobs = strcmp(sub, "jobs") == 0,
               disconnect = strcmp(sub, "disconnect") == 0;
    if (!list && !jobs && !disconnect) {
        ctl_error("client: unknown subcommand '%s'; want list, jobs ID or disconnect ID", sub);
        return CTL_EXIT_USAGE;
    }
    if (argc > (list ? 2 : 3)) {
        ctl_error("client %s: unexpected argument '%s'", sub, argv[list ? 2 : 3]);
        return CTL_EXIT_USAGE;
    }
    int r = list ? 0 : parse_id(sub, argc > 2 ? argv[2] : NULL, &id);
    if (r)
        return r;
    gllm_client *c;
    r = ctl_connect(g->socket, &c);
    if (r)
        return r;
    if (disconnect) {
        r = gllm_admin_disconnect(c, id);
        if (r == 0 && !g->json)
            printf("client %llu disconnected\n", (unsigned long long)id);
        else if (r == 0)
            printf("{\"schema_version\": 1, \"disconnected\": %llu}\n", (unsigned long long)id);
    } else {
        gllm_admin_client *v = malloc(GLLM_MAX_LISTED_CLIENTS * sizeof *v);
        if (!v) {
            gllm_disconnect(c);
            ctl_error("client: out of memory");
            return CTL_EXIT_FAILURE;
        }
        v[0] = (gllm_admin_client)GLLM_ADMIN_CLIENT_INIT;
        r = gllm_admin_clients(c, id, v, GLLM_MAX_LISTED_CLIENTS);
        if (r >= 0 && list)
            print_clients(g, v, r);
        else if (r > 0)
            print_jobs(g, &v[0]);
        free(v);
    }
    r = r < 0 ? admin_failed(c, sub[0] == 'l' ? "client list" : sub[0] == 'j' ? "client jobs"
                                                                 : "client disconnect", r)
              : 0;
    gllm_disconnect(c);
    return r;
}
