/* The RPC channel of one client: its connection, its session, the protocol state, and the
 * replies a call builds (into a buffer of its own) and sends. */
#ifndef GLLMD_CHANNEL_H
#define GLLMD_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conn.h"
#include "proto.h"
#include "server.h"
#include "session.h"

struct channel {
    struct server *srv;
    struct channel *prev, *next;  /* srv->channels */
    uint64_t serial;              /* connection number, for logs */
    unsigned refs;                /* the connection itself + one per job until it settles */
    struct conn *conn;
    struct session session;
    bool closed;
    bool hello_done;
    bool denied;                  /* outside the access policy: answered, then closed */
    bool admin;                   /* may use the administrators' methods (methods_admin.c) */
    uint64_t t_connected;         /* now_ns() at accept */
    uint64_t jobs[METRICS_NMETHODS][2];   /* settled jobs by method and failed?, for clients */
    pid_t pid;                    /* SO_PEERCRED at accept */
    uid_t uid;
    gid_t gid;
    char comm[16];
};

/* One request being answered. */
struct rpc_call {
    struct channel *ch;
    uint64_t id;
    int *fds;                     /* that came with the request; a handler that keeps one
                                   * sets its slot to -1 */
    int nfds;
    uint64_t t_read;              /* when its packet was read */
    struct proto_buf *reply;      /* this call's own */
    int refused;                  /* the code of the error reply it got, or 0 */
};

/* A new channel on srv's list, with one reference (the connection's); no transport yet. */
struct channel *channel_new(struct server *srv);
struct channel *channel_ref(struct channel *ch);
void channel_unref(struct channel *ch);
/* Shuts the connection and releases the session's regions; jobs in flight finish first and
 * the channel goes when the last reference does. */
void channel_close(struct channel *ch);
/* Closes once every queued reply has been sent. */
void channel_close_when_flushed(struct channel *ch);
bool channel_idle(const struct channel *ch);   /* nothing in flight, nothing unsent */

/* Sends an encoded message (loop thread); nothing on a closed channel. */
void channel_send(struct channel *ch, const void *data, size_t len);
/* An error reply (id -1: nil, when the request's could not be read); counted. */
void channel_reply_error(struct channel *ch, int64_t id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A call's replies: begin packs the result header into the call's buffer and returns the
 * packer for its one object; end sends it (or TOOBIG when it outgrew a message). */
msgpack_packer *rpc_reply_begin(struct rpc_call *c);
void rpc_reply_end(struct rpc_call *c);
/* rpc_reply_end with fd sent alongside the reply (SCM_RIGHTS); takes fd in every case. */
void rpc_reply_end_fd(struct rpc_call *c, int fd);
/* A result that carries nothing: an empty map. */
void rpc_reply_empty(struct rpc_call *c);
void rpc_reply_error(struct rpc_call *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
