/* Named limits on what one client may ask of gllmd, in one place. */
#ifndef GLLMD_LIMITS_H
#define GLLMD_LIMITS_H

#include <stdint.h>

struct limits {
    uint32_t max_connections;     /* open client connections */
    uint32_t max_arenas;          /* arenas per session */
    uint64_t max_arena_bytes;     /* bytes of arenas per session */
    uint32_t max_inflight;        /* jobs queued or running per session */
    uint32_t max_outq_bytes;      /* unsent replies before we stop reading a client */
};

#define LIMITS_DEFAULT                                                                   \
    {                                                                                    \
        .max_connections = 256, .max_arenas = 64, .max_arena_bytes = 64ull << 30,        \
        .max_inflight = 256, .max_outq_bytes = 1u << 20,                                 \
    }

#endif
