/* hello's and status's results as C structs, and the key tables they are packed and read by.
 * gllmd packs them and libgllm-client reads them through one table per map (info.c): a key is
 * one line there, and a map's size is counted. */
#ifndef GLLM_PROTO_INFO_H
#define GLLM_PROTO_INFO_H

#include <stddef.h>

#include "proto.h"

/* ---- key tables (table.c) ---- */

enum proto_ftype {
    PROTO_FT_U64,     /* uint64_t */
    PROTO_FT_F64,     /* double; read from any number */
    PROTO_FT_BOOL,    /* bool */
    PROTO_FT_STR,     /* char[cap], NUL-terminated; read cut to cap - 1 bytes */
    PROTO_FT_DTYPES,  /* uint32_t, bit (1 << gllm_dtype) per dtype; an array of names on the wire */
    PROTO_FT_MAP,     /* a struct, by the table sub */
    PROTO_FT_MAPS,    /* an array of at most cap structs (item bytes each) by sub; count at n */
    PROTO_FT_U64S,    /* at most cap uint64_t in an array; uint32_t count at n */
    PROTO_FT_F64S,    /* at most cap doubles in an array; uint32_t count at n */
    PROTO_FT_NAMES,   /* uint32_t, bit i for names[i] (cap names); an array of them on the wire,
                       * one this side does not know passed over */
};

struct proto_table;
/* One key of a map and where its value lives in the struct the map is read into. */
struct proto_field {
    const char *key;
    uint32_t key_len;
    enum proto_ftype type;
    size_t off;
    /* 0: always packed. Else 1 + the offset of a bool: packed when it is true, and set when
     * the key was read, well formed (a bool field may be its own: packed only when true). */
    size_t has;
    bool required;    /* read: a map without it, well formed, is GLLM_EMALFORMED */
    uint32_t cap;
    size_t n, item;
    const struct proto_table *sub;
    const char *const *names;         /* PROTO_FT_NAMES */
};

struct proto_table {
    const struct proto_field *fields;
    uint32_t nfields;                 /* at most 64 */
    size_t size;                      /* of the struct */
};
#define PROTO_TABLE(T, fields) {fields, sizeof fields / sizeof *fields, sizeof(T)}

/* Entries, each named as its struct member (the key is the member's name): */
#define PROTO_F_(T, name, ty)                                                              \
    .key = #name, .key_len = sizeof #name - 1, .type = ty, .off = offsetof(T, name)
#define PROTO_A_(T, name)                                                                  \
    .cap = sizeof ((T *)0)->name / sizeof ((T *)0)->name[0], .n = offsetof(T, n_##name)
#define PF_U64(T, name) {PROTO_F_(T, name, PROTO_FT_U64)}
#define PF_F64(T, name) {PROTO_F_(T, name, PROTO_FT_F64)}
#define PF_BOOL(T, name) {PROTO_F_(T, name, PROTO_FT_BOOL)}
/* A bool on the wire only when true. */
#define PF_TRUE(T, name) {PROTO_F_(T, name, PROTO_FT_BOOL), .has = offsetof(T, name) + 1}
#define PF_STR(T, name) {PROTO_F_(T, name, PROTO_FT_STR), .cap = sizeof ((T *)0)->name}
#define PF_DTYPES(T, name) {PROTO_F_(T, name, PROTO_FT_DTYPES)}
#define PF_U64S(T, name) {PROTO_F_(T, name, PROTO_FT_U64S), PROTO_A_(T, name)}
#define PF_F64S(T, name) {PROTO_F_(T, name, PROTO_FT_F64S), PROTO_A_(T, name)}
#define PF_MAP(T, name, table) {PROTO_F_(T, name, PROTO_FT_MAP), .sub = &(table)}
/* A bit set as an array of names, bit i for list[i] of count. */
#define PF_NAMES(T, name, list, count)                                                     \
    {PROTO_F_(T, name, PROTO_FT_NAMES), .names = (list), .cap = (count)}
/* An array of numbers on the wire only when bool has_<name> is set. */
#define PF_OPT_U64S(T, name)                                                               \
    {PROTO_F_(T, name, PROTO_FT_U64S), PROTO_A_(T, name), .has = offsetof(T, has_##name) + 1}
/* Optional maps and arrays: bool has_<name> beside them says whether they are there. */
#define PF_OPT_MAP(T, name, table)                                                         \
    {PROTO_F_(T, name, PROTO_FT_MAP), .sub = &(table), .has = offsetof(T, has_##name) + 1}
#define PF_MAPS_(T, name, table)                                                           \
    PROTO_F_(T, name, PROTO_FT_MAPS), PROTO_A_(T, name),                                   \
        .item = sizeof ((T *)0)->name[0], .sub = &(table)
#define PF_MAPS(T, name, table) {PF_MAPS_(T, name, table)}
#define PF_REQ_MAPS(T, name, table) {PF_MAPS_(T, name, table), .required = true}
#define PF_OPT_MAPS(T, name, table) {PF_MAPS_(T, name, table), .has = offsetof(T, has_##name) + 1}

/* obj as the map t describes: the keys in t's order, those whose flag is false left out. */
void proto_pack_table(msgpack_packer *pk, const struct proto_table *t, const void *obj);
/* map into obj, zeroed first: in one walk, the first of a key counting, anything not of its
 * type, and keys t does not know, left out (a newer peer's). Arrays past cap are cut; an
 * array of numbers with one of another type reads as absent. GLLM_EMALFORMED when a
 * required key is missing (obj still holds the rest), else 0. */
int proto_read_table(const msgpack_object *map, const struct proto_table *t, void *obj);

/* ---- hello ---- */

/* One device, in hello and status (docs/PROTOCOL.md). */
struct proto_device {
    char compute_capability[16];      /* "9.0"; "" on the CPU */
    char image[32];
    uint64_t index;
    char name[96];
    char kind[16];
    uint64_t memory_bytes;
    uint64_t threads;
    uint64_t process_pid;
    uint64_t resets;
    bool reset_failed;
    char last_reset_reason[160];
    uint64_t last_reset_ns;
};

struct proto_hello_sync {
    uint64_t timeout_ms, timeout_ms_max;
    bool device_waits;                /* on the wire only when true */
};

struct proto_hello_share {
    char kind[16];                    /* "memfd", "cuda_vmm_fd" */
    uint64_t granularity;
};

struct proto_hello_limits {
    uint64_t max_message_bytes, max_device_bytes, max_device_bytes_total, max_inflight_total,
        max_elements, max_arenas, max_arena_bytes, max_inflight, max_rank, max_page_entries;
};

/* What each mode computes (proto.h's proto_mode_caps, one per gllm_mode). */
struct proto_hello_capabilities {
    struct proto_mode_caps dense, decode, prefill;
};
extern const struct proto_table proto_capabilities_table;

struct proto_hello {
    bool has_sync;                    /* jobs take wait and signal counters */
    struct proto_hello_sync sync;
    bool has_share;                   /* the backend shares device memory */
    struct proto_hello_share share;
    uint64_t version, ring_bytes;
    char daemon[32], backend[16];
    uint32_t n_devices;
    struct proto_device devices[GLLM_MAX_DEVICES];
    uint32_t dtypes;
    uint64_t max_head_dim;
    bool has_capabilities;            /* absent from daemons before variants */
    struct proto_hello_capabilities capabilities;
    struct proto_hello_limits limits;
};

extern const struct proto_table proto_hello_table;

/* ---- status ---- */

struct proto_status_memory {
    uint64_t used, total;
};

struct proto_status_client {
    uint64_t pid, uid, gid;
    char comm[16];
    uint64_t arenas, arena_bytes, device_bytes, exported_bytes, imported_bytes, inflight;
};

struct proto_method_jobs {
    char method[32];
    uint64_t ok, failed;
};
extern const struct proto_table proto_method_jobs_table;   /* also the admin methods' */

/* Per bucket, not cumulative: n_counts is n_le + 1, the last past every bound. Room for the
 * longest array a message may hold, so that nothing a reply sends is cut. */
struct proto_histogram {
    uint32_t n_le;
    double le[PROTO_MAX_CONTAINER];
    uint32_t n_counts;
    uint64_t counts[PROTO_MAX_CONTAINER];
    double sum;
    uint64_t count;
};

struct proto_metrics {
    uint64_t device_resets;
    uint32_t n_jobs;
    struct proto_method_jobs jobs[GLLM_METRICS_MAX_METHODS];
    struct proto_histogram queue_seconds, kernel_seconds, added_seconds;
};

struct proto_status {
    char daemon[32];
    double uptime_s;
    char backend[16];
    uint32_t n_devices;
    struct proto_device devices[GLLM_MAX_DEVICES];
    uint64_t clients, jobs_done, jobs_failed, jobs_inflight, bytes_mapped, arenas, device_bytes,
        dtensors, exported_bytes, imported_bytes;
    bool draining;
    uint64_t requests, errors, limit_violations, ring_requests;
    bool has_metrics;
    struct proto_metrics metrics;
    bool has_device_memory;
    uint32_t n_device_memory;
    struct proto_status_memory device_memory[GLLM_MAX_DEVICES];
    uint32_t n_client_list;           /* the first GLLM_MAX_LISTED_CLIENTS connections */
    struct proto_status_client client_list[GLLM_MAX_LISTED_CLIENTS];
};

extern const struct proto_table proto_status_table;

#endif
