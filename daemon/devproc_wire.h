/* What gllmd and a device process say to each other (devproc.c, devproc_child.c): one
 * request at a time per channel, written into a memory area both map, rung with a one-byte
 * packet that carries any fd beside it; the reply comes back the same way. */
#ifndef GLLMD_DEVPROC_WIRE_H
#define GLLMD_DEVPROC_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend_api.h"

/* Both sides run the same executable (gllmd starts /proc/self/exe), so the argument structs
 * travel as they are; pointers in them are gllmd's and the device process translates each
 * host pointer into its own mapping of the arena (devproc_child.c). */

/* Two channels per device process: control (any thread of gllmd, under a lock: memory,
 * arenas, queues closed) and work (the device's worker thread: jobs, queues, faults), so a
 * long job never holds a control request up. fds in the device process: */
#define DP_FD_CTL 3
#define DP_FD_WORK 4
#define DP_FD_CTL_AREA 5
#define DP_FD_WORK_AREA 6

/* The area's bytes: the message and the paged job's tables behind it (max_page_entries
 * allows 2^28 entries; what does not fit is refused with GLLM_ELIMIT). Pages are touched only
 * as far as a request reaches. */
#define DP_AREA_BYTES (64u << 20)

enum dp_op {
    /* control */
    DP_HELLO = 1,               /* the device process's first message, unasked */
    DP_MEMORY,
    DP_HOST_MAP,                /* fd: an arena; a = gllmd's address, b = bytes; answered
                                 * DP_PENDING at once, the mapping going on meanwhile */
    DP_HOST_DONE,               /* the mapping's or unmapping's answer, or DP_PENDING while
                                 * it goes on */
    DP_HOST_UNMAP,              /* a = gllmd's address; answered DP_PENDING at once, the
                                 * unmapping going on meanwhile (or 0, done already) */
    DP_ALLOC,                   /* b = bytes; reply a = pointer */
    DP_FREE,                    /* a = pointer */
    DP_SHARE_ALLOC,             /* b = bytes; reply shared, fd */
    DP_SHARE_IMPORT,            /* fd, b = bytes; reply shared */
    DP_SHARE_FREE,              /* shared */
    DP_QUEUE_CLOSE,             /* a = queue */
    /* work */
    DP_COPY,
    DP_ATTENTION,
    DP_PAGED,
    DP_QUEUE_OPEN,              /* reply a = queue */
    DP_QUEUE_POLL,              /* a = queue, b = cancel */
    DP_INJECT_FAULT,            /* a = kind, b = deadline */
};

/* A control request's status while its work goes on (DP_HOST_MAP, DP_HOST_UNMAP). */
#define DP_PENDING 1

/* Which optional entries the device process's backend has (DP_HELLO). */
#define DP_HAS_MEMORY (1u << 0)
#define DP_HAS_REGISTER (1u << 1)
#define DP_HAS_ALLOC (1u << 2)
#define DP_HAS_PAGED (1u << 3)
#define DP_HAS_SHARE (1u << 4)
#define DP_HAS_FAULT (1u << 5)
#define DP_HAS_QUEUES (1u << 6)

struct dp_hello {
    char backend[16];
    int present;                /* devices the driver reports */
    uint32_t has;               /* DP_HAS_* */
    struct backend_caps caps;
    gllm_device_info info;
};

/* A job as it travels: its args with the sync they point to; a paged job's tables that are
 * gllmd's own copies follow the message (tab_* are their counts, 0: not carried). */
struct dp_job {
    union {
        struct attn_args attn;
        struct copy_args copy;
        struct paged_args paged;
    } u;
    bool has_sync;
    struct backend_sync sync;
    uint64_t queue;             /* the device process's queue, 0: none */
    int64_t tab_indptr, tab_indices, tab_len, tab_qindptr;
};

/* The work channel's doorbell in its area: each side spins on the other's counter for a
 * while (a device's jobs come microseconds apart in a decode loop, and a wake-up through the
 * socket costs several), then sets its waiting flag and sleeps on the socket, which the
 * other side rings only while that flag is set. Every ring only wakes: the counters say what
 * happened, so a ring that comes late is harmless. */
struct dp_bell {
    _Atomic uint64_t req;       /* requests gllmd has written */
    _Atomic uint64_t rep;       /* replies the device process has written */
    _Atomic uint32_t child_waiting, parent_waiting;
};

/* How long each side spins: the device process for gllmd's next request (as gllmd's device
 * worker spins for a client's next job, scheduler.c), gllmd for the reply (as it would spin
 * on the stream). */
#define DP_SPIN_REQUEST_NS 50000u
#define DP_SPIN_REPLY_NS 2000000u

struct dp_msg {
    uint32_t op;                /* enum dp_op */
    int32_t status;             /* the reply's: 0, BACKEND_PENDING or a code */
    uint64_t a, b;              /* the op's scalars */
    uint64_t used, total;       /* DP_MEMORY's reply */
    bool pinned;                /* DP_HOST_MAP's reply: registered with the backend */
    struct attn_timing timing;  /* a job's reply */
    char why[256];              /* a failed request's reason */
    struct backend_shared shared;
    struct dp_hello hello;
    struct dp_job job;
    struct dp_bell bell;        /* the work channel's; unused on the control channel */
    /* int32_t tables[] follow, aligned: dp_tables() */
};

static inline int32_t *dp_tables(struct dp_msg *m)
{
    return (int32_t *)(void *)((char *)m + ((sizeof *m + 63) & ~(size_t)63));
}

/* The table entries that fit behind the message in an area. */
#define DP_TABLE_MAX ((int64_t)((DP_AREA_BYTES - ((sizeof(struct dp_msg) + 63) & ~(size_t)63)) \
                                / sizeof(int32_t)))

/* Rings the other side: one byte, with fd (>= 0) beside it. 0 or -errno. */
int dp_ring(int sock, int fd);
/* Waits for the other side's ring at most timeout_ms (-1: for ever); *fd gets an fd that
 * came with it, else -1. 0, -ETIMEDOUT, -EPIPE when the other side is gone, or -errno. */
int dp_wait(int sock, int timeout_ms, int *fd);
/* Whether the other side of sock has gone (a look, no wait). */
bool dp_peer_gone(int sock);
/* Spins on *counter until it reaches want, at most spin_ns; true when it did. On a look every
 * few microseconds sock's peer is checked: gone, *gone is set and it returns false. */
bool dp_spin(_Atomic uint64_t *counter, uint64_t want, uint64_t spin_ns, int sock, bool *gone);

#endif
