/* Session transport: SOCK_SEQPACKET packets with SCM_RIGHTS in, a bounded reply queue out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "session_ring.h"
#include "session.h"

#define MAX_FDS_PER_PACKET 4
#define PACKETS_PER_WAKEUP 32   /* then yield to other clients */

struct out_packet {
    struct out_packet *next;
    size_t len;
    char data[];
};

static void on_poll(uv_poll_t *h, int status, int events);

static void update_poll(struct session *s)
{
    if (s->closed)
        return;
    /* Stop reading a client whose replies pile up unread: its memory stays bounded. */
    int want = s->out_bytes < s->srv->limits.max_outq_bytes ? UV_READABLE : 0;
    if (s->out_head)
        want |= UV_WRITABLE;
    if (want == s->events)
        return;
    s->events = want;
    if (want)
        uv_poll_start(&s->poll, want, on_poll);
    else
        uv_poll_stop(&s->poll);
}

/* Who is on the other end, from the kernel (SO_PEERCRED), and whether the policy lets
 * them in. A peer the kernel cannot name is refused. */
static void identify_peer(struct session *s)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(s->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        s->denied = true;
        return;
    }
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)cred.pid);
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(s->comm, sizeof s->comm, f))
            s->comm[strcspn(s->comm, "\n")] = '\0';
        fclose(f);
    }
    gid_t groups[64];
    socklen_t glen = sizeof groups;
    int ngroups = 0;
    if (getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
        ngroups = (int)(glen / sizeof(gid_t));
    s->denied = !config_policy_allows(&s->srv->policy, cred.uid, cred.gid, groups, ngroups);
    if (s->denied)
        log_warn("client %llu (pid %d, uid %u, %s) refused by the access policy",
                 (unsigned long long)s->serial, (int)s->pid, (unsigned)s->uid, s->comm);
}

int session_accept(struct server *srv, int fd)
{
    struct session *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->srv = srv;
    s->fd = fd;
    s->refs = 1;
    atomic_init(&s->gone, false);
    int r = uv_poll_init(srv->loop, &s->poll, fd);
    if (r < 0) {
        free(s);
        return r;
    }
    s->poll.data = s;
    s->serial = ++srv->stats.connections;
    s->next = srv->sessions;
    if (srv->sessions)
        srv->sessions->prev = s;
    srv->sessions = s;
    srv->stats.clients++;
    identify_peer(s);
    update_poll(s);
    log_debug("client %llu connected: pid %d, uid %u, gid %u, %s", (unsigned long long)s->serial,
              (int)s->pid, (unsigned)s->uid, (unsigned)s->gid, s->comm);
    return 0;
}

struct session *session_ref(struct session *s)
{
    s->refs++;
    return s;
}

static void free_session(uv_handle_t *h)
{
    struct session *s = h->data;
    close(s->fd);
    session_ring_close(s->ring);  /* no job is left to publish: each held a reference */
    free(s);
}

void session_unref(struct session *s)
{
    if (--s->refs > 0)
        return;
    /* The poll handle's memory is ours until libuv says it has let go. */
    uv_close((uv_handle_t *)&s->poll, free_session);
}

void session_close(struct session *s)
{
    if (s->closed)
        return;
    s->closed = true;
    atomic_store_explicit(&s->gone, true, memory_order_release);
    uv_poll_stop(&s->poll);
    shutdown(s->fd, SHUT_RDWR);

    struct server *srv = s->srv;
    for (uint32_t i = 0; i < ARENA_TABLE_MAX; i++)
        if (s->arenas.slot[i])
            arena_unref(session_region_take(s, s->arenas.slot[i]->id, s->arenas.slot[i]->device));
    while (s->out_head) {
        struct out_packet *p = s->out_head;
        s->out_head = p->next;
        free(p);
    }
    s->out_tail = NULL;
    s->out_bytes = 0;

    if (s->prev)
        s->prev->next = s->next;
    else
        srv->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    srv->stats.clients--;
    log_debug("client %llu closed (%u jobs still running)", (unsigned long long)s->serial,
              s->inflight);
    session_unref(s);
}

/* Adds (sign 1) or removes (sign -1) a region's bytes from the counters. */
static void account(struct session *s, const struct arena *a, int sign)
{
    struct server_stats *st = &s->srv->stats;
    uint64_t n = a->size;
    if (a->device) {
        s->device_bytes = sign > 0 ? s->device_bytes + n : s->device_bytes - n;
        st->device_bytes = sign > 0 ? st->device_bytes + n : st->device_bytes - n;
        st->dtensors += (uint32_t)sign;
    } else {
        s->narenas += (uint32_t)sign;
        s->arena_bytes = sign > 0 ? s->arena_bytes + n : s->arena_bytes - n;
        st->bytes_mapped = sign > 0 ? st->bytes_mapped + n : st->bytes_mapped - n;
        st->arenas += (uint32_t)sign;
    }
}

int session_region_add(struct session *s, struct arena *a)
{
    int r = arena_table_add(&s->arenas, a, ARENA_TABLE_MAX);
    if (r == 0)
        account(s, a, 1);
    return r;
}

struct arena *session_region_take(struct session *s, uint64_t id, bool device)
{
    struct arena *a = id <= UINT32_MAX ? arena_table_find(&s->arenas, (uint32_t)id) : NULL;
    if (!a || a->device != device)
        return NULL;
    arena_table_remove(&s->arenas, (uint32_t)id);
    account(s, a, -1);
    return a;
}

void session_close_when_flushed(struct session *s)
{
    if (!s->out_head)
        session_close(s);
    else
        s->close_when_flushed = true;
}

bool session_idle(const struct session *s)
{
    return s->inflight == 0 && !s->out_head;
}

/* 1: sent, 0: would block, <0: the peer is gone. */
static int send_packet(struct session *s, const void *data, size_t len)
{
    for (;;) {
        ssize_t n = send(s->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0)
            return 1;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return 0;
        return -errno;
    }
}

void session_send(struct session *s, const void *data, size_t len)
{
    if (s->closed)
        return;
    if (!s->out_head) {
        int r = send_packet(s, data, len);
        if (r > 0)
            return;
        if (r < 0) {
            session_close(s);
            return;
        }
    }
    struct out_packet *p = malloc(sizeof *p + len);
    if (!p) {
        /* Dropping a reply would leave the client waiting forever: cut it off instead. */
        log_err("client %llu: out of memory queueing a reply, disconnecting",
                (unsigned long long)s->serial);
        session_close(s);
        return;
    }
    p->next = NULL;
    p->len = len;
    memcpy(p->data, data, len);
    if (s->out_tail)
        s->out_tail->next = p;
    else
        s->out_head = p;
    s->out_tail = p;
    s->out_bytes += len;
    update_poll(s);
}

void session_reply_error(struct session *s, int64_t id, int code, const char *fmt, ...)
{
    char msg[PROTO_MAX_ERRMSG + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct proto_buf *b = &s->srv->tx;
    proto_buf_init(b);
    proto_pack_error(&b->pk, id, code, msg);
    s->srv->stats.errors++;
    if (code == GLLM_ETOOBIG || code == GLLM_ELIMIT || code == GLLM_EQUOTA || code == GLLM_EBUSY)
        s->srv->stats.limit_violations++;
    session_send(s, b->data, b->len);
}

static void flush(struct session *s)
{
    while (s->out_head) {
        struct out_packet *p = s->out_head;
        int r = send_packet(s, p->data, p->len);
        if (r == 0)
            break;
        if (r < 0) {
            session_close(s);
            return;
        }
        s->out_head = p->next;
        if (!s->out_head)
            s->out_tail = NULL;
        s->out_bytes -= p->len;
        free(p);
    }
    if (!s->out_head && s->close_when_flushed) {
        session_close(s);
        return;
    }
    update_poll(s);
}

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void read_packets(struct session *s)
{
    struct server *srv = s->srv;
    for (int n = 0; n < PACKETS_PER_WAKEUP && !s->closed; n++) {
        if (s->out_bytes >= srv->limits.max_outq_bytes)
            break;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * MAX_FDS_PER_PACKET)];
        } ctrl;
        struct iovec iov = {.iov_base = srv->rx, .iov_len = sizeof srv->rx};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                            .msg_controllen = sizeof ctrl.buf};
        ssize_t len = recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (len < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                session_close(s);
            return;
        }
        if (len == 0) {            /* orderly shutdown by the peer */
            session_close(s);
            return;
        }
        int fds[MAX_FDS_PER_PACKET], nfds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k && nfds < MAX_FDS_PER_PACKET; i++)
                memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
        /* Requests the client put in its ring before this packet go first. */
        s->packets_in++;
        if (s->ring)
            session_take_requests(s, s->packets_in - 1, true);
        if (s->closed) {
            close_fds(fds, nfds);
            return;
        }
        srv->stats.requests++;
        srv->packet_ns = now_ns();
        server_busy_poll(srv);
        if (!s->hello_done && !s->denied && (size_t)len > srv->limits.max_prehello_bytes)
            session_reply_error(s, -1, GLLM_ETOOBIG, "packet of %zd bytes before hello (limit %u)",
                                len, srv->limits.max_prehello_bytes);
        else if (mh.msg_flags & MSG_TRUNC)
            session_reply_error(s, -1, GLLM_ETOOBIG, "packet larger than %u bytes",
                                PROTO_MAX_MESSAGE);
        else if (mh.msg_flags & MSG_CTRUNC)
            session_reply_error(s, -1, GLLM_ENOFD, "more than %d fds in one packet",
                                MAX_FDS_PER_PACKET);
        else
            methods_dispatch(s, srv->rx, (size_t)len, fds, nfds);
        close_fds(fds, nfds);
    }
}

void session_take_requests(struct session *s, uint64_t upto, bool before_packet)
{
    struct server *srv = s->srv;
    struct session_ring *r = s->ring;
    struct gllm_ring *shm = r->shm;
    /* Before a socket packet, all that precede it (a ring's worth at most, from an honest
     * client) go, whatever the reply queue holds: the packet is read already and must not
     * overtake them. The bound holds even against a client that keeps publishing. */
    const unsigned most = before_packet ? GLLM_RING_REQUEST_SLOTS : PACKETS_PER_WAKEUP;
    for (unsigned n = 0; n < most && !s->closed; n++) {
        if (!before_packet && s->out_bytes >= srv->limits.max_outq_bytes)
            return;
        const uint32_t head = atomic_load_explicit(&shm->request_head, memory_order_acquire);
        if (head == r->request_tail)
            return;
        if (head - r->request_tail > GLLM_RING_REQUEST_SLOTS) {
            session_reply_error(s, -1, GLLM_EMALFORMED,
                                "request ring: head %u is more than %u past tail %u", head,
                                GLLM_RING_REQUEST_SLOTS, r->request_tail);
            session_close_when_flushed(s);
            return;
        }
        /* Copy out before looking: the client can rewrite the slot at any moment. */
        const struct gllm_ring_request_slot *slot =
            &shm->request[r->request_tail % GLLM_RING_REQUEST_SLOTS];
        /* Counted modulo 2^32 on both sides: "after > upto", wrap-safe. */
        if ((int32_t)(slot->after - (uint32_t)upto) > 0)
            return;              /* a socket packet sent before it is still unread */
        const uint32_t len = slot->len;
        const bool fits = len > 0 && len <= sizeof slot->data;
        if (fits)
            memcpy(srv->ring_rx, slot->data, len);   /* srv->rx may hold a socket packet */
        r->request_tail++;
        atomic_store_explicit(&shm->request_tail, r->request_tail, memory_order_release);
        srv->stats.requests++;
        srv->stats.ring_requests++;
        srv->packet_ns = now_ns();
        server_busy_poll(srv);
        if (!fits)
            session_reply_error(s, -1, GLLM_EMALFORMED, "request ring: slot length %u", len);
        else
            methods_dispatch(s, srv->ring_rx, len, NULL, 0);
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct session *s = h->data;
    session_ref(s);
    if (status < 0) {
        session_close(s);
    } else {
        if (events & UV_WRITABLE)
            flush(s);
        if ((events & UV_READABLE) && !s->closed)
            read_packets(s);
        if (!s->closed)
            update_poll(s);
    }
    session_unref(s);
}
