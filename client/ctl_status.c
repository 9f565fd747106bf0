/* gllmctl status: the daemon's counters, devices and clients, as text or JSON. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* Device i as hello announced it (the status reply carries the same). */
static gllm_device_info device(gllm_client *c, int i)
{
    gllm_device_info d = GLLM_DEVICE_INFO_INIT;
    gllm_client_device(c, i, &d);
    return d;
}

static gllm_client_info listed(gllm_client *c, int i)
{
    gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
    gllm_status_client(c, i, &ci);
    return ci;
}

static void print_json(gllm_client *c, const gllm_status *st)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    printf("{\"daemon\": ");
    ctl_json_str(st->daemon_version);
    printf(", \"backend\": ");
    ctl_json_str(st->backend);
    printf(", \"uptime_s\": %.3f, \"clients\": %u, \"jobs_done\": %llu, \"jobs_failed\": %llu, "
           "\"jobs_inflight\": %llu, \"arenas\": %u, \"bytes_mapped\": %llu, \"dtensors\": %u, "
           "\"device_bytes\": %llu, \"requests\": %llu, \"ring_requests\": %llu, "
           "\"errors\": %llu, \"limit_violations\": %llu, \"devices\": [",
           st->uptime_s, st->clients, (unsigned long long)st->jobs_done,
           (unsigned long long)st->jobs_failed, (unsigned long long)st->jobs_inflight, st->arenas,
           (unsigned long long)st->bytes_mapped, st->dtensors,
           (unsigned long long)st->device_bytes, (unsigned long long)st->requests,
           (unsigned long long)st->ring_requests, (unsigned long long)st->errors,
           (unsigned long long)st->limit_violations);
    for (int i = 0; i < caps.ndevices; i++) {
        const gllm_device_info d = device(c, i);
        printf("%s{\"index\": %d, \"kind\": ", i ? ", " : "", d.index);
        ctl_json_str(d.kind);
        printf(", \"name\": ");
        ctl_json_str(d.name);
        char cc[16] = "";
        if (d.cc_major)
            snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        printf(", \"memory_bytes\": %llu, \"threads\": %d, \"compute_capability\": \"%s\", "
               "\"image\": ", (unsigned long long)d.memory_bytes, d.threads, cc);
        ctl_json_str(d.image);
        printf("}");
    }
    printf("], \"client_list\": [");
    for (int i = 0; i < st->nlisted; i++) {
        const gllm_client_info ci = listed(c, i);
        printf("%s{\"pid\": %d, \"uid\": %u, \"gid\": %u, \"comm\": ", i ? ", " : "",
               ci.pid, ci.uid, ci.gid);
        ctl_json_str(ci.comm);
        printf(", \"arenas\": %u, \"arena_bytes\": %llu, \"device_bytes\": %llu, "
               "\"inflight\": %u}", ci.arenas, (unsigned long long)ci.arena_bytes,
               (unsigned long long)ci.device_bytes, ci.inflight);
    }
    printf("]}\n");
}

static void print_text(gllm_client *c, const gllm_status *st)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    printf("gllmd %s, up %.0f s, backend %s\n", st->daemon_version, st->uptime_s, st->backend);
    for (int i = 0; i < caps.ndevices; i++) {
        const gllm_device_info d = device(c, i);
        if (d.cc_major)
            printf("  device %d: %s (%s), compute capability %d.%d, %.1f GiB, kernels: %s\n",
                   d.index, d.name, d.kind, d.cc_major, d.cc_minor,
                   (double)d.memory_bytes / (1ull << 30), d.image);
        else
            printf("  device %d: %s (%s), %.1f GiB, %d threads\n", d.index, d.name, d.kind,
                   (double)d.memory_bytes / (1ull << 30), d.threads);
    }
    printf("clients: %u   arenas: %u (%.1f MiB mapped)   device tensors: %u (%.1f MiB)\n",
           st->clients, st->arenas, (double)st->bytes_mapped / (1 << 20), st->dtensors,
           (double)st->device_bytes / (1 << 20));
    printf("jobs: %llu done, %llu failed, %llu in flight\n", (unsigned long long)st->jobs_done,
           (unsigned long long)st->jobs_failed, (unsigned long long)st->jobs_inflight);
    printf("requests: %llu (%llu by shared-memory ring), error replies: %llu (limits hit: %llu)\n",
           (unsigned long long)st->requests, (unsigned long long)st->ring_requests,
           (unsigned long long)st->errors, (unsigned long long)st->limit_violations);
    if (st->nlisted)
        printf("\n  %8s %6s %-16s %7s %12s %12s %8s\n", "PID", "UID", "COMMAND", "ARENAS",
               "MAPPED", "DEVICE", "IN FLIGHT");
    for (int i = 0; i < st->nlisted; i++) {
        const gllm_client_info ci = listed(c, i);
        printf("  %8d %6u %-16s %7u %10.1f M %10.1f M %8u\n", ci.pid, ci.uid, ci.comm,
               ci.arenas, (double)ci.arena_bytes / (1 << 20),
               (double)ci.device_bytes / (1 << 20), ci.inflight);
    }
}

int ctl_cmd_status(const char *sock, int argc, char **argv)
{
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else {
            fprintf(stderr, "gllmctl status: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    gllm_client *c;
    int r = ctl_connect(sock, &c);
    if (r)
        return r;
    gllm_status st = GLLM_STATUS_INIT;
    r = gllm_status_get(c, &st);
    if (r < 0) {
        fprintf(stderr, "gllmctl: status: %s\n", gllm_strerror(r));
        gllm_disconnect(c);
        return 1;
    }
    if (json)
        print_json(c, &st);
    else
        print_text(c, &st);
    gllm_disconnect(c);
    return 0;
}
