/* The administrators' methods' results (docs/PROTOCOL.md, "Administration") as C structs,
 * and the key tables gllmd packs them and libgllm-client reads them by (admin.c). */
#ifndef GLLM_PROTO_ADMIN_H
#define GLLM_PROTO_ADMIN_H

#include "info.h"

/* One connection, as `clients` lists it. */
struct proto_admin_client {
    uint64_t id, pid, uid, gid;
    char comm[16];
    bool admin;
    double connected_s;
    uint64_t inflight, arenas, arena_bytes, device_bytes;
    uint32_t n_jobs;                  /* settled jobs by method, as status's metrics */
    struct proto_method_jobs jobs[GLLM_METRICS_MAX_METHODS];
};

struct proto_admin_clients {
    uint32_t n_clients;               /* the first GLLM_MAX_LISTED_CLIENTS connections */
    struct proto_admin_client clients[GLLM_MAX_LISTED_CLIENTS];
};

extern const struct proto_table proto_admin_clients_table;

/* drain's result: the jobs it waits for. */
struct proto_admin_drain {
    uint64_t inflight;
    uint64_t drain_timeout_s;
};

extern const struct proto_table proto_admin_drain_table;

#endif
