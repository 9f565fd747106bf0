/* The key tables of hello's and status's results (docs/PROTOCOL.md), one per map. */

/* In the order gllmd has always packed them. A new key is a member of its struct (info.h)
 * named as the key, one PF_<type>(T, key) line in its table here, the daemon's fill
 * (methods_info.c) and the client's use (client/info.c). An optional one has a bool
 * has_<key> beside it (PF_OPT_MAP, PF_OPT_MAPS; PF_TRUE for a bool sent only when true). A
 * nested map: its own struct and table here, then PF_MAP(T, key, key_table) (or
 * PF_OPT_MAP); an array of maps: the array member with a uint32_t n_<key> beside it and
 * PF_MAPS(T, key, item_table); arrays of numbers: PF_U64S, PF_F64S. A reader that predates a
 * key skips it; a key a reader knows that a reply lacks reads as zero (its has_ false). */
#include "info.h"

#define T struct proto_device
static const struct proto_field device_fields[] = {
    PF_STR(T, compute_capability), PF_STR(T, image), PF_U64(T, index), PF_STR(T, name),
    PF_STR(T, kind), PF_U64(T, memory_bytes), PF_U64(T, threads), PF_U64(T, process_pid),
    PF_U64(T, resets), PF_BOOL(T, reset_failed), PF_STR(T, last_reset_reason),
    PF_U64(T, last_reset_ns),
};
static const struct proto_table device_table = PROTO_TABLE(T, device_fields);
#undef T

#define T struct proto_hello_sync
static const struct proto_field sync_fields[] = {
    PF_U64(T, timeout_ms), PF_U64(T, timeout_ms_max), PF_TRUE(T, device_waits),
};
static const struct proto_table sync_table = PROTO_TABLE(T, sync_fields);
#undef T

#define T struct proto_hello_share
static const struct proto_field share_fields[] = {
    PF_STR(T, kind), PF_U64(T, granularity),
};
static const struct proto_table share_table = PROTO_TABLE(T, share_fields);
#undef T

#define T struct proto_hello_limits
static const struct proto_field limits_fields[] = {
    PF_U64(T, max_message_bytes), PF_U64(T, max_device_bytes), PF_U64(T, max_device_bytes_total),
    PF_U64(T, max_inflight_total), PF_U64(T, max_elements), PF_U64(T, max_arenas),
    PF_U64(T, max_arena_bytes), PF_U64(T, max_inflight), PF_U64(T, max_rank),
    PF_U64(T, max_page_entries),
};
static const struct proto_table limits_table = PROTO_TABLE(T, limits_fields);
#undef T

#define T struct proto_mode_caps
static const struct proto_field mode_fields[] = {
    PF_NAMES(T, variants, proto_variant_names, PROTO_NVARIANTS),
    PF_U64(T, max_head_dim),
    PF_OPT_U64S(T, head_dims),
};
static const struct proto_table mode_table = PROTO_TABLE(T, mode_fields);
#undef T

#define T struct proto_hello_capabilities
static const struct proto_field capabilities_fields[] = {
    PF_MAP(T, dense, mode_table), PF_MAP(T, decode, mode_table), PF_MAP(T, prefill, mode_table),
};
const struct proto_table proto_capabilities_table = PROTO_TABLE(T, capabilities_fields);
#undef T

#define T struct proto_hello
static const struct proto_field hello_fields[] = {
    PF_OPT_MAP(T, sync, sync_table),
    PF_OPT_MAP(T, share, share_table),
    PF_U64(T, version),
    PF_U64(T, ring_bytes),
    PF_STR(T, daemon),
    PF_STR(T, backend),
    PF_REQ_MAPS(T, devices, device_table),
    PF_DTYPES(T, dtypes),
    PF_U64(T, max_head_dim),
    PF_OPT_MAP(T, capabilities, proto_capabilities_table),
    PF_MAP(T, limits, limits_table),
};
const struct proto_table proto_hello_table = PROTO_TABLE(T, hello_fields);
#undef T

#define T struct proto_histogram
static const struct proto_field histogram_fields[] = {
    PF_F64S(T, le), PF_U64S(T, counts), PF_F64(T, sum), PF_U64(T, count),
};
static const struct proto_table histogram_table = PROTO_TABLE(T, histogram_fields);
#undef T

#define T struct proto_method_jobs
static const struct proto_field method_jobs_fields[] = {
    PF_STR(T, method), PF_U64(T, ok), PF_U64(T, failed),
};
const struct proto_table proto_method_jobs_table = PROTO_TABLE(T, method_jobs_fields);
#undef T

#define T struct proto_metrics
static const struct proto_field metrics_fields[] = {
    PF_U64(T, device_resets),
    PF_MAPS(T, jobs, proto_method_jobs_table),
    PF_MAP(T, queue_seconds, histogram_table),
    PF_MAP(T, kernel_seconds, histogram_table),
    PF_MAP(T, added_seconds, histogram_table),
};
static const struct proto_table metrics_table = PROTO_TABLE(T, metrics_fields);
#undef T

#define T struct proto_status_memory
static const struct proto_field memory_fields[] = {
    PF_U64(T, used), PF_U64(T, total),
};
static const struct proto_table memory_table = PROTO_TABLE(T, memory_fields);
#undef T

#define T struct proto_status_client
static const struct proto_field client_fields[] = {
    PF_U64(T, pid), PF_U64(T, uid), PF_U64(T, gid), PF_STR(T, comm), PF_U64(T, arenas),
    PF_U64(T, arena_bytes), PF_U64(T, device_bytes), PF_U64(T, exported_bytes),
    PF_U64(T, imported_bytes), PF_U64(T, inflight),
};
static const struct proto_table client_table = PROTO_TABLE(T, client_fields);
#undef T

#define T struct proto_status
static const struct proto_field status_fields[] = {
    PF_STR(T, daemon),
    PF_F64(T, uptime_s),
    PF_STR(T, backend),
    PF_REQ_MAPS(T, devices, device_table),
    PF_U64(T, clients),
    PF_U64(T, jobs_done),
    PF_U64(T, jobs_failed),
    PF_U64(T, jobs_inflight),
    PF_U64(T, bytes_mapped),
    PF_U64(T, arenas),
    PF_U64(T, device_bytes),
    PF_U64(T, dtensors),
    PF_U64(T, exported_bytes),
    PF_U64(T, imported_bytes),
    PF_BOOL(T, draining),
    PF_U64(T, requests),
    PF_U64(T, errors),
    PF_U64(T, limit_violations),
    PF_U64(T, ring_requests),
    PF_OPT_MAP(T, metrics, metrics_table),
    PF_OPT_MAPS(T, device_memory, memory_table),
    PF_MAPS(T, client_list, client_table),
};
const struct proto_table proto_status_table = PROTO_TABLE(T, status_fields);
#undef T

/* The reader keeps a table's keys in a 64-bit set. */
_Static_assert(sizeof status_fields / sizeof *status_fields <= 64, "status: too many keys");
_Static_assert(sizeof hello_fields / sizeof *hello_fields <= 64, "hello: too many keys");
