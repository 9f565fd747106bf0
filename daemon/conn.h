/* Transport: one client connection's socket, shared-memory rings and reply queue. */
#ifndef GLLMD_CONN_H
#define GLLMD_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto.h"
#include "ring.h"

#define CONN_MAX_FDS 4   /* per packet */

/* One packet as the transport read it, from the socket or the request ring. */
struct conn_packet {
    const void *data;
    size_t len;
    int *fds;                    /* those that came with it; a handler that keeps one sets
                                  * its slot to -1, the transport closes the rest */
    int nfds;
    uint64_t t_read;             /* CLOCK_MONOTONIC ns */
    bool from_ring;
    int error;                   /* nonzero: refused by the transport (why says how); data
                                  * is not a whole message */
    const char *why;
    bool fatal;                  /* with error: the connection cannot go on after the answer */
};

/* What a connection tells its owner, on the loop thread. */
struct conn_ops {
    void (*packet)(void *owner, const struct conn_packet *p);
    /* The peer went away, the socket failed, or a close_when_flushed queue drained: the
     * owner closes the connection (conn_shutdown). Called at most once. */
    void (*hangup)(void *owner);
};

struct conn;

/* The transport's daemon-wide part: every open connection and the loop thread's receive
 * buffers (one packet is read at a time; a ring request may be taken while a socket packet
 * waits in rx). */
struct conn_set {
    uv_loop_t *loop;
    struct conn *head;
    uint32_t max_outq_bytes;     /* unsent replies before a connection stops being read */
    char rx[PROTO_MAX_MESSAGE];
    char ring_rx[GLLM_RING_REQUEST_SLOT_BYTES];
};

/* Takes ownership of a connected, non-blocking, close-on-exec fd and starts reading it. */
int conn_open(struct conn_set *set, int fd, const struct conn_ops *ops, void *owner,
              struct conn **out);
int conn_fd(const struct conn *c);
/* Loop thread: sends or queues one packet; a peer that went away hangs up. */
void conn_send(struct conn *c, const void *data, size_t len);
/* The same with fd sent alongside (SCM_RIGHTS); takes fd, closing it once sent or dropped. */
void conn_send_fd(struct conn *c, const void *data, size_t len, int fd);
/* A worker thread: a reply into the reply ring and, unless the client spins on that ring,
 * the socket, if either takes it at once. True when the client has it. Never blocks and
 * never queues: a false answer is the loop's to send (conn_send). */
bool conn_send_fast(struct conn *c, const void *data, size_t len);
/* Maps fd as the connection's rings (one per connection, for its whole life). */
int conn_attach_ring(struct conn *c, int fd, bool loop_polls);
bool conn_has_ring(const struct conn *c);
/* Stops reading c's requests, from the socket and the ring alike, until as many
 * conn_release calls: a request answered off the loop (an arena's registration) is still
 * answered before the connection's next request is read. */
void conn_hold(struct conn *c);
void conn_release(struct conn *c);
/* Hangs up once every queued packet has been sent (at once if none is). */
void conn_close_when_flushed(struct conn *c);
bool conn_flushed(const struct conn *c);   /* nothing queued */
/* Any thread: the connection is shut down. */
bool conn_gone(const struct conn *c);
/* Stops all I/O, drops what is queued and leaves the set; the fd stays open until
 * conn_free, so a worker's conn_send_fast never writes to a reused fd. */
void conn_shutdown(struct conn *c);
/* After conn_shutdown, once no worker can reach the connection any more. */
void conn_free(struct conn *c);

/* Busy polling (loop thread): takes what waits in every connection's request ring, and
 * tells the clients whether the loop polls their rings (then they need not wake it). */
void conn_set_take_ring_requests(struct conn_set *set);
void conn_set_ring_polling(struct conn_set *set, bool on);

#endif
