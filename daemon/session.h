/* Sessions: what one client owns (arenas, device tensors, quotas, lanes) and nothing else. */
#ifndef GLLMD_SESSION_H
#define GLLMD_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "scheduler.h"
#include "server_limits.h"

/* What every session together holds, kept in step by the sessions (status reports it). */
struct region_totals {
    uint64_t bytes_mapped;        /* in arenas */
    uint32_t arenas;
    uint64_t device_bytes;        /* in device tensors */
    uint32_t dtensors;
    uint64_t pending_device_bytes;   /* of device tensors still being made (methods.c) */
    uint64_t exported_bytes;      /* of device_bytes: gllmd's memory mapped by clients too */
    uint64_t imported_bytes;      /* of device_bytes: clients' own memory mapped by gllmd */
};

struct session {
    struct region_totals *totals; /* the daemon's */
    struct arena_table regions;   /* arenas and device tensors, one id space */
    uint32_t narenas;             /* shared-memory arenas (the table also holds device tensors) */
    uint64_t arena_bytes;
    uint32_t pending_arenas;      /* being registered (methods.c): not in the table yet */
    uint64_t pending_arena_bytes;
    uint64_t device_bytes;
    uint64_t pending_device_bytes;   /* of device tensors still being made: quota'd as made */
    uint64_t exported_bytes;      /* of device_bytes, as in region_totals */
    uint64_t imported_bytes;
    _Atomic uint32_t inflight;    /* jobs queued or running: down as a worker finishes one */
    struct lane lanes[GLLM_MAX_DEVICES];
};

void session_init(struct session *s, struct region_totals *totals);
/* Drops every region; jobs still using one keep it until they finish. */
void session_release(struct session *s);
/* Arenas and device tensors share the table; these keep the session's and the daemon's
 * counters in step with it. add takes the caller's reference (-ENOSPC when the table is
 * full); take removes the region of that kind and returns the table's reference, or NULL
 * when the session has no such region. */
int session_region_add(struct session *s, struct arena *a);
struct arena *session_region_take(struct session *s, uint64_t id, bool device);

/* Quotas (a reload may lower a limit below what a session already holds). */
bool session_may_add_arena(const struct session *s, const struct limits *l, uint64_t bytes);
bool session_may_add_device(const struct session *s, const struct limits *l, uint64_t bytes);
/* A device tensor's bytes while it is being made (sign 1), then no longer (-1). */
void session_device_pending(struct session *s, uint64_t bytes, int sign);
/* Jobs: counted from submission until their worker finishes them. */
bool session_may_submit(const struct session *s, const struct limits *l);
void session_job_started(struct session *s);
void session_job_finished(struct session *s);   /* any thread */

#endif
