/* The key tables of the administrators' methods' results (docs/PROTOCOL.md). */
#include "admin.h"

#define T struct proto_admin_client
static const struct proto_field client_fields[] = {
    PF_U64(T, id), PF_U64(T, pid), PF_U64(T, uid), PF_U64(T, gid), PF_STR(T, comm),
    PF_BOOL(T, admin), PF_F64(T, connected_s), PF_U64(T, inflight), PF_U64(T, arenas),
    PF_U64(T, arena_bytes), PF_U64(T, device_bytes), PF_MAPS(T, jobs, proto_method_jobs_table),
};
static const struct proto_table client_table = PROTO_TABLE(T, client_fields);
#undef T

#define T struct proto_admin_clients
static const struct proto_field clients_fields[] = {
    PF_MAPS(T, clients, client_table),
};
const struct proto_table proto_admin_clients_table = PROTO_TABLE(T, clients_fields);
#undef T

#define T struct proto_admin_drain
static const struct proto_field drain_fields[] = {
    PF_U64(T, inflight), PF_U64(T, drain_timeout_s),
};
const struct proto_table proto_admin_drain_table = PROTO_TABLE(T, drain_fields);
#undef T
