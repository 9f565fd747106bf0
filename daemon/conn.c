/* Transport: SOCK_SEQPACKET packets with SCM_RIGHTS in, requests from the shared-memory ring
 * in socket order, replies out through a bounded queue or, from a worker, at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "fdpass.h"
#include "clock.h"
#include "conn.h"
#include "log.h"
#include "conn_ring.h"

#define PACKETS_PER_WAKEUP 32   /* then yield to other clients */

struct out_packet {
    struct out_packet *next;
    int fd;                      /* sent with the packet and closed then, or -1 */
    size_t len;
    char data[];
};

struct conn {
    struct conn_set *set;
    struct conn *prev, *next;
    const struct conn_ops *ops;
    void *owner;
    int fd;
    uv_poll_t poll;
    int events;                  /* UV_READABLE / UV_WRITABLE currently polled */
    atomic_bool gone;            /* read by workers: no fast reply to a closed connection */
    bool closed;
    bool hung_up;
    bool close_when_flushed;
    struct out_packet *out_head, *out_tail;
    size_t out_bytes;
    unsigned held;               /* conn_hold: no request is read while nonzero */
    /* Requests and replies through shared memory, or NULL; set once, read by workers. */
    struct conn_ring *_Atomic ring;
    uint64_t packets_in;         /* packets read from the socket: orders them with the ring */
};

static void on_poll(uv_poll_t *h, int status, int events);

static void hang_up(struct conn *c)
{
    if (c->hung_up)
        return;
    c->hung_up = true;
    c->ops->hangup(c->owner);
}

static void update_poll(struct conn *c)
{
    if (c->closed)
        return;
    /* Stop reading a client whose replies pile up unread: its memory stays bounded. */
    int want = !c->held && c->out_bytes < c->set->max_outq_bytes ? UV_READABLE : 0;
    if (c->out_head)
        want |= UV_WRITABLE;
    if (want == c->events)
        return;
    c->events = want;
    if (want)
        uv_poll_start(&c->poll, want, on_poll);
    else
        uv_poll_stop(&c->poll);
}

int conn_open(struct conn_set *set, int fd, const struct conn_ops *ops, void *owner,
              struct conn **out)
{
    struct conn *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    *c = (struct conn){.set = set, .ops = ops, .owner = owner, .fd = fd};
    atomic_init(&c->gone, false);
    atomic_init(&c->ring, NULL);
    int r = uv_poll_init(set->loop, &c->poll, fd);
    if (r < 0) {
        free(c);
        return r;
    }
    c->poll.data = c;
    c->next = set->head;
    if (set->head)
        set->head->prev = c;
    set->head = c;
    *out = c;
    update_poll(c);
    return 0;
}

int conn_fd(const struct conn *c)
{
    return c->fd;
}

bool conn_gone(const struct conn *c)
{
    return atomic_load_explicit(&c->gone, memory_order_acquire);
}

bool conn_flushed(const struct conn *c)
{
    return !c->out_head;
}

bool conn_has_ring(const struct conn *c)
{
    return atomic_load_explicit(&c->ring, memory_order_relaxed) != NULL;
}

int conn_attach_ring(struct conn *c, int fd, bool loop_polls)
{
    if (conn_has_ring(c))
        return -EEXIST;
    struct conn_ring *ring;
    int r = conn_ring_open(fd, &ring);
    if (r < 0)
        return r;
    conn_ring_set_polling(ring, loop_polls);
    atomic_store_explicit(&c->ring, ring, memory_order_release);
    return 0;
}

void conn_shutdown(struct conn *c)
{
    if (c->closed)
        return;
    c->closed = true;
    c->hung_up = true;           /* the owner knows: no hangup after this */
    atomic_store_explicit(&c->gone, true, memory_order_release);
    uv_poll_stop(&c->poll);
    shutdown(c->fd, SHUT_RDWR);
    while (c->out_head) {
        struct out_packet *p = c->out_head;
        c->out_head = p->next;
        if (p->fd >= 0)
            close(p->fd);
        free(p);
    }
    c->out_tail = NULL;
    c->out_bytes = 0;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->set->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void free_conn(uv_handle_t *h)
{
    struct conn *c = h->data;
    close(c->fd);
    conn_ring_close(atomic_load_explicit(&c->ring, memory_order_relaxed));
    free(c);
}

void conn_free(struct conn *c)
{
    /* The poll handle's memory is ours until libuv says it has let go. */
    uv_close((uv_handle_t *)&c->poll, free_conn);
}

/* 1: sent, 0: would block, <0: the peer is gone. pass_fd >= 0 goes with the packet as
 * SCM_RIGHTS (the peer gets its own descriptor; ours stays open). */
static int send_packet(int fd, const void *data, size_t len, int pass_fd)
{
    union proto_fd_control ctrl;
    struct iovec iov;
    struct msghdr mh;
    proto_fd_message(&mh, &iov, data, len, pass_fd, &ctrl);
    for (;;) {
        ssize_t n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0)
            return 1;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return 0;
        return -errno;
    }
}

/* Worker thread. The ring first: no system call on either side. The fd cannot be reused
 * under us: conn_free comes only after the last job of the connection has settled. A reply
 * sent from here may overtake ones the loop has queued; ids tie them together. */
bool conn_send_fast(struct conn *c, const void *data, size_t len)
{
    if (conn_gone(c))
        return false;
    bool sent = false;
    struct conn_ring *ring = atomic_load_explicit(&c->ring, memory_order_acquire);
    if (ring && conn_ring_publish(ring, data, len)) {
        sent = true;
        if (conn_ring_client_polling(ring))
            return true;
        /* The client may be blocked on the socket or watching it: the reply goes there too. */
    }
    return send_packet(c->fd, data, len, -1) > 0 || sent;
}

void conn_send(struct conn *c, const void *data, size_t len)
{
    conn_send_fd(c, data, len, -1);
}

void conn_send_fd(struct conn *c, const void *data, size_t len, int fd)
{
    if (c->closed) {
        if (fd >= 0)
            close(fd);
        return;
    }
    if (!c->out_head) {
        int r = send_packet(c->fd, data, len, fd);
        if (r != 0 && fd >= 0)
            close(fd);
        if (r > 0)
            return;
        if (r < 0) {
            hang_up(c);
            return;
        }
    }
    struct out_packet *p = malloc(sizeof *p + len);
    if (!p) {
        /* Dropping a reply would leave the client waiting forever: cut it off instead. */
        log_err("out of memory queueing a reply: disconnecting the client");
        if (fd >= 0)
            close(fd);
        hang_up(c);
        return;
    }
    p->next = NULL;
    p->fd = fd;
    p->len = len;
    memcpy(p->data, data, len);
    if (c->out_tail)
        c->out_tail->next = p;
    else
        c->out_head = p;
    c->out_tail = p;
    c->out_bytes += len;
    update_poll(c);
}

void conn_close_when_flushed(struct conn *c)
{
    if (!c->out_head)
        hang_up(c);
    else
        c->close_when_flushed = true;
}

static void flush(struct conn *c)
{
    while (c->out_head) {
        struct out_packet *p = c->out_head;
        int r = send_packet(c->fd, p->data, p->len, p->fd);
        if (r == 0)
            break;
        if (r < 0) {
            hang_up(c);
            return;
        }
        if (p->fd >= 0)
            close(p->fd);
        c->out_head = p->next;
        if (!c->out_head)
            c->out_tail = NULL;
        c->out_bytes -= p->len;
        free(p);
    }
    if (!c->out_head && c->close_when_flushed) {
        hang_up(c);
        return;
    }
    update_poll(c);
}

static void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void deliver(struct conn *c, struct conn_packet *p)
{
    p->t_read = now_ns();
    c->ops->packet(c->owner, p);
}

/* Takes the requests waiting in the ring that the client sent after at most `upto` socket
 * packets, in order; a few per call, for fairness, unless a socket packet waits behind
 * them (before_packet). */
static void take_requests(struct conn *c, struct conn_ring *r, uint64_t upto,
                          bool before_packet)
{
    struct gllm_ring *shm = r->shm;
    /* Before a socket packet, all that precede it (a ring's worth at most, from an honest
     * client) go, whatever the reply queue holds: the packet is read already and must not
     * overtake them. The bound holds even against a client that keeps publishing. */
    const unsigned most = before_packet ? GLLM_RING_REQUEST_SLOTS : PACKETS_PER_WAKEUP;
    for (unsigned n = 0; n < most && !c->closed; n++) {
        if (c->held || (!before_packet && c->out_bytes >= c->set->max_outq_bytes))
            return;
        const uint32_t head = atomic_load_explicit(&shm->request_head, memory_order_acquire);
        if (head == r->request_tail)
            return;
        if (head - r->request_tail > GLLM_RING_REQUEST_SLOTS) {
            char why[96];
            snprintf(why, sizeof why, "request ring: head %u is more than %u past tail %u", head,
                     GLLM_RING_REQUEST_SLOTS, r->request_tail);
            deliver(c, &(struct conn_packet){.from_ring = true, .error = GLLM_EMALFORMED,
                                             .why = why, .fatal = true});
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
            memcpy(c->set->ring_rx, slot->data, len);   /* rx may hold a socket packet */
        r->request_tail++;
        atomic_store_explicit(&shm->request_tail, r->request_tail, memory_order_release);
        char why[48];
        if (!fits)
            snprintf(why, sizeof why, "request ring: slot length %u", len);
        deliver(c, &(struct conn_packet){.data = c->set->ring_rx, .len = fits ? len : 0,
                                         .from_ring = true, .error = fits ? 0 : GLLM_EMALFORMED,
                                         .why = why});
    }
}

static void read_packets(struct conn *c)
{
    struct conn_set *set = c->set;
    for (int n = 0; n < PACKETS_PER_WAKEUP && !c->closed; n++) {
        if (c->held || c->out_bytes >= set->max_outq_bytes)
            break;
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * CONN_MAX_FDS)];
        } ctrl;
        struct iovec iov = {.iov_base = set->rx, .iov_len = sizeof set->rx};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                            .msg_controllen = sizeof ctrl.buf};
        ssize_t len = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (len < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                hang_up(c);
            return;
        }
        if (len == 0) {            /* orderly shutdown by the peer */
            hang_up(c);
            return;
        }
        int fds[CONN_MAX_FDS], nfds = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k && nfds < CONN_MAX_FDS; i++)
                memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        }
        /* Requests the client put in its ring before this packet go first. */
        c->packets_in++;
        struct conn_ring *ring = atomic_load_explicit(&c->ring, memory_order_relaxed);
        if (ring)
            take_requests(c, ring, c->packets_in - 1, true);
        if (c->closed) {
            close_fds(fds, nfds);
            return;
        }
        struct conn_packet p = {.data = set->rx, .len = (size_t)len, .fds = fds, .nfds = nfds};
        char why[64];
        if (mh.msg_flags & MSG_TRUNC) {
            snprintf(why, sizeof why, "packet larger than %u bytes", PROTO_MAX_MESSAGE);
            p.error = GLLM_ETOOBIG, p.why = why;
        } else if (mh.msg_flags & MSG_CTRUNC) {
            snprintf(why, sizeof why, "more than %d fds in one packet", CONN_MAX_FDS);
            p.error = GLLM_ENOFD, p.why = why;
        }
        deliver(c, &p);
        close_fds(fds, nfds);
    }
}

void conn_hold(struct conn *c)
{
    c->held++;
    update_poll(c);
}

void conn_release(struct conn *c)
{
    if (!c->held || --c->held > 0 || c->closed)
        return;
    update_poll(c);
    /* The socket is polled again; requests already in the ring are taken now, since the
     * client's wake-up for them may have come while the connection was held. */
    struct conn_ring *ring = atomic_load_explicit(&c->ring, memory_order_relaxed);
    if (ring)
        take_requests(c, ring, c->packets_in, false);
}

void conn_set_take_ring_requests(struct conn_set *set)
{
    /* A connection may close (and leave the list) in its turn, never another: the next one
     * is read first. Its memory stays until conn_free's callback, a later loop turn. */
    for (struct conn *c = set->head, *next; c; c = next) {
        next = c->next;
        struct conn_ring *ring = atomic_load_explicit(&c->ring, memory_order_relaxed);
        if (ring)
            take_requests(c, ring, c->packets_in, false);
    }
}

void conn_set_ring_polling(struct conn_set *set, bool on)
{
    for (struct conn *c = set->head; c; c = c->next) {
        struct conn_ring *ring = atomic_load_explicit(&c->ring, memory_order_relaxed);
        if (ring)
            conn_ring_set_polling(ring, on);
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    if (status < 0) {
        hang_up(c);
        return;
    }
    if (events & UV_WRITABLE)
        flush(c);
    if ((events & UV_READABLE) && !c->closed)
        read_packets(c);
    if (!c->closed)
        update_poll(c);
}
