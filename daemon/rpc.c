/* The RPC channel: packets from the transport decoded (bounded before anything is
 * allocated), checked against the connection's state and dispatched through one table. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "channel.h"
#include "log.h"
#include "methods.h"
#include "rpc.h"

struct method {
    const char *name;
    void (*handle)(struct rpc_call *c, const struct proto_msg *m);
    bool takes_fd;
    bool before_hello;           /* may come before the connection's hello */
    bool job;                    /* queues a job (which may carry a signal) */
};

static const struct method methods[] = {
    {"hello", method_hello, false, true, false},
    {"status", method_status, false, false, false},
    {"arena_register", method_arena_register, true, false, false},
    {"arena_release", method_arena_release, false, false, false},
    {"ring", method_ring, true, false, false},
    {"attention", method_attention, false, false, true},
    {"dtensor_create", method_dtensor_create, false, false, false},
    {"dtensor_import", method_dtensor_import, true, false, false},
    {"dtensor_free", method_dtensor_free, false, false, false},
    {"dtensor_copy", method_dtensor_copy, false, false, true},
    {"kv_append", method_kv_append, false, false, true},
    {"attention_decode", method_attention_decode, false, false, true},
    {"attention_prefill", method_attention_prefill, false, false, true},
    {"debug_fault", method_debug_fault, false, false, false},
    {"drain", method_drain, false, false, false},
    {"reload", method_reload, false, false, false},
    {"clients", method_clients, false, false, false},
    {"client_disconnect", method_client_disconnect, false, false, false},
};

static const struct method *find_method(const char *name)
{
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strcmp(methods[i].name, name) == 0)
            return &methods[i];
    return NULL;
}

/* Decodes one request and answers it, into a reply buffer of the call's own. */
static void dispatch(struct channel *ch, const struct conn_packet *p)
{
    struct proto_msg m;
    int64_t id = -1;
    int r = proto_decode(p->data, p->len, &m, &id);
    if (r < 0) {
        channel_reply_error(ch, id, r, "%s", gllm_strerror(r));
        return;
    }
    if (ch->denied) {
        channel_reply_error(ch, m.kind == PROTO_REQUEST ? id : -1, GLLM_EDENIED,
                            "uid %u is not allowed by this daemon's access policy",
                            (unsigned)ch->uid);
        proto_msg_free(&m);
        channel_close_when_flushed(ch);
        return;
    }
    if (m.kind != PROTO_REQUEST) {
        /* The one notification, ring_wake, needs no handling: reading its packet took the
         * ring's requests (conn.c). A response from a client is a protocol error. */
        if (m.kind == PROTO_RESPONSE)
            channel_reply_error(ch, -1, GLLM_EMALFORMED, "clients send requests, not responses");
        proto_msg_free(&m);
        return;
    }
    struct proto_buf reply;
    struct rpc_call call = {.ch = ch, .id = m.id, .fds = p->fds, .nfds = p->nfds,
                            .t_read = p->t_read, .reply = &reply};
    const struct method *h = find_method(m.method);
    if (!h)
        rpc_reply_error(&call, GLLM_EMETHOD, "unknown method '%s'", m.method);
    else if (!ch->hello_done && !h->before_hello)
        rpc_reply_error(&call, GLLM_ENOHELLO, "%s: send hello first", m.method);
    else if (!h->takes_fd && p->nfds > 0)
        rpc_reply_error(&call, GLLM_ENOFD, "%s: takes no file descriptor", m.method);
    else
        h->handle(&call, &m);
    if (h && h->job && call.refused)
        method_job_refused(&call, &m);   /* its signal still goes out, in order */
    proto_msg_free(&m);
}

/* The transport's: one packet, or its refusal. */
/* The id to answer a refused packet under: its own when its first bytes show it (a packet
 * cut at the size limit still holds them), else nil. */
static int64_t refused_id(const struct conn_packet *p)
{
    uint64_t id;
    size_t head = p->len < 16 ? p->len : 16;   /* an envelope's id ends within 15 bytes */
    if (p->from_ring || !p->data || proto_peek_id(p->data, head, &id) < 0)
        return -1;
    return (int64_t)id;
}

static void on_packet(void *owner, const struct conn_packet *p)
{
    struct channel *ch = owner;
    struct server *srv = ch->srv;
    srv->stats.requests++;
    if (p->from_ring)
        srv->stats.ring_requests++;
    server_busy_poll(srv);
    channel_ref(ch);
    /* Before its hello a connection may send only small packets: a stranger cannot make
     * the daemon decode much. */
    if (!p->from_ring && !ch->hello_done && !ch->denied && p->len > srv->limits.max_prehello_bytes) {
        channel_reply_error(ch, refused_id(p), GLLM_ETOOBIG, "packet of %zu bytes before hello (limit %u)",
                            p->len, srv->limits.max_prehello_bytes);
    } else if (p->error) {
        channel_reply_error(ch, refused_id(p), p->error, "%s", p->why);
        if (p->fatal)
            channel_close_when_flushed(ch);
    } else {
        dispatch(ch, p);
    }
    channel_unref(ch);
}

static void on_hangup(void *owner)
{
    channel_close(owner);
}

static const struct conn_ops rpc_conn_ops = {on_packet, on_hangup};

/* Who is on the other end, from the kernel (SO_PEERCRED), and whether the policy lets
 * them in. A peer the kernel cannot name is refused. */
static void identify_peer(struct channel *ch, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        ch->denied = true;
        return;
    }
    ch->pid = cred.pid;
    ch->uid = cred.uid;
    ch->gid = cred.gid;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)cred.pid);
    FILE *f = fopen(path, "re");
    if (f) {
        /* The name is any 15 bytes, a newline included: only the one the kernel appends
         * ends it (proto_pack_str and the log make whatever it holds safe to send). */
        size_t n = fread(ch->comm, 1, sizeof ch->comm - 1, f);
        if (n > 0 && ch->comm[n - 1] == '\n')
            n--;
        ch->comm[n] = '\0';
        fclose(f);
    }
    gid_t groups[64];
    socklen_t glen = sizeof groups;
    int ngroups = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
        ngroups = (int)(glen / sizeof(gid_t));
    ch->denied = !config_policy_allows(&ch->srv->policy, cred.uid, cred.gid, groups, ngroups);
    ch->admin = config_is_admin(&ch->srv->admin, cred.uid, cred.gid, groups, ngroups);
    ch->t_connected = now_ns();
    if (ch->denied)
        log_warn("client %llu (pid %d, uid %u, %s) refused by the access policy",
                 (unsigned long long)ch->serial, (int)ch->pid, (unsigned)ch->uid, ch->comm);
}

int rpc_accept(struct server *srv, int fd)
{
    struct channel *ch = channel_new(srv);
    if (!ch)
        return -ENOMEM;
    identify_peer(ch, fd);
    int r = conn_open(&srv->conns, fd, &rpc_conn_ops, ch, &ch->conn);
    if (r < 0) {
        channel_close(ch);   /* no transport: the fd stays the caller's */
        return r;
    }
    log_debug("client %llu connected: pid %d, uid %u, gid %u, %s", (unsigned long long)ch->serial,
              (int)ch->pid, (unsigned)ch->uid, (unsigned)ch->gid, ch->comm);
    return 0;
}
