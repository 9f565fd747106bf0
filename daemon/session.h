/* Sessions: one per client connection; packet I/O, reply queue, ownership of arenas and jobs. */
#ifndef GLLMD_SESSION_H
#define GLLMD_SESSION_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "arena.h"
#include "scheduler.h"

struct server;
struct out_packet;

struct session {
    struct server *srv;
    struct session *prev, *next;
    uint64_t serial;             /* connection number, for logs */
    int fd;
    uv_poll_t poll;
    int events;                  /* UV_READABLE / UV_WRITABLE currently polled */
    unsigned refs;               /* the connection itself + one per job in flight */
    atomic_bool gone;            /* read by workers: jobs of a dead session are skipped */
    bool closed;
    bool hello_done;
    bool denied;                 /* outside the access policy: answered, then closed */
    bool close_when_flushed;
    pid_t pid;                   /* SO_PEERCRED at accept */
    uid_t uid;
    gid_t gid;
    char comm[16];
    struct arena_table arenas;
    uint32_t narenas;            /* shared-memory arenas (the table also holds device tensors) */
    uint64_t arena_bytes;
    uint64_t device_bytes;
    _Atomic uint32_t inflight;   /* jobs queued or running: down as a worker finishes one */
    struct out_packet *out_head, *out_tail;
    size_t out_bytes;
    struct lane lanes[GLLM_MAX_DEVICES];
    /* Requests and job replies through shared memory, or NULL; set once, read by workers. */
    struct session_ring *_Atomic ring;
    uint64_t packets_in;         /* packets read from the socket: orders them with the ring */
};

/* Takes ownership of a connected, non-blocking, close-on-exec fd. */
int session_accept(struct server *srv, int fd);
/* Sends or queues one packet; a peer that went away closes the session. */
void session_send(struct session *s, const void *data, size_t len);
void session_reply_error(struct session *s, int64_t id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Closes the transport and releases the arenas; jobs in flight finish first
 * and the memory goes when the last reference does. */
void session_close(struct session *s);
/* Arenas and device tensors share the session's table; these keep the session's and the
 * server's counters in step with it. add takes the caller's reference (-ENOSPC when the
 * table is full); take removes the region of that kind and returns the table's reference,
 * or NULL when the session has no such region. */
int session_region_add(struct session *s, struct arena *a);
struct arena *session_region_take(struct session *s, uint64_t id, bool device);

/* Takes the requests waiting in the session's ring (proto/ring.h) that the client sent
 * after at most `upto` socket packets, in order; a few per call, for fairness, unless a
 * socket packet waits behind them (before_packet). */
void session_take_requests(struct session *s, uint64_t upto, bool before_packet);

/* Closes once every queued reply has been sent (at once if none is queued). */
void session_close_when_flushed(struct session *s);
struct session *session_ref(struct session *s);
void session_unref(struct session *s);
bool session_idle(const struct session *s);  /* nothing in flight, nothing unsent */

/* methods.c: decodes one request packet and answers it. fds: those that came
 * with the packet; a handler that keeps one sets its slot to -1. */
void methods_dispatch(struct session *s, const void *buf, size_t len, int *fds, int nfds);

#endif
