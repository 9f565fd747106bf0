/* Named limits on what clients may ask of gllmd, in one place (gllmd.conf sets them). */
#ifndef GLLMD_LIMITS_H
#define GLLMD_LIMITS_H

#include <stdint.h>

#include "proto.h"

/* Every one is checked before anything is allocated for the request, and a request that
 * passes one gets an error reply with a stable code (counted in status). */
struct limits {
    uint32_t max_connections;     /* open client connections */
    uint32_t max_prehello_bytes;  /* packet size before a connection's hello */
    uint32_t max_arenas;          /* arenas per session */
    uint64_t max_arena_bytes;     /* bytes of arenas per session */
    uint64_t max_device_bytes;    /* bytes of device tensors per session */
    uint64_t max_device_bytes_total; /* ... in all sessions together */
    uint32_t max_inflight;        /* jobs queued or running per session */
    uint32_t max_inflight_total;  /* ... in all sessions together */
    uint64_t max_elements;        /* elements of one tensor */
    uint32_t max_outq_bytes;      /* unsent replies before we stop reading a client */
    uint32_t max_page_entries;    /* page-table entries, queries or new tokens of a paged job */
    uint32_t wait_timeout_ms;     /* a job's counter wait when it names no timeout_ms */
};

/* The longest wait a job may ask for: the codec's bound (proto.h), which refuses more. */
#define GLLM_WAIT_TIMEOUT_MS_MAX PROTO_WAIT_TIMEOUT_MS_MAX

#define LIMITS_DEFAULT                                                                   \
    {                                                                                    \
        .max_connections = 256, .max_prehello_bytes = 1024, .max_arenas = 64,            \
        .max_arena_bytes = 64ull << 30, .max_device_bytes = 16ull << 30,                 \
        .max_device_bytes_total = 64ull << 30, .max_inflight = 256,                     \
        .max_inflight_total = 4096,                                                      \
        .max_elements = 1ull << 36, .max_outq_bytes = 1u << 20,                          \
        .max_page_entries = 1u << 22, .wait_timeout_ms = 2000,                           \
    }

#endif
