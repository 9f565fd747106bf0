/* libgllm-client transport: the socket, packets both ways and the two shared-memory rings. */
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fdpass.h"
#include "client_internal.h"

int conn_open(const char *path, int *fd)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = -errno;
        if (s >= 0)
            close(s);
        return e;
    }
    *fd = s;
    return 0;
}

/* Replies carry at most one fd; room for a few more lets us see (and close) extras. */
#define CONN_RX_MAX_FDS 4

/* The one fd a received packet carried, or -1: with none, with more than one, or with
 * some cut off (MSG_CTRUNC), every fd that came is closed. */
static int take_fd(struct msghdr *mh)
{
    int fds[CONN_RX_MAX_FDS];
    int n = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        const size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && n < CONN_RX_MAX_FDS; i++)
            memcpy(&fds[n++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
    }
    if (n == 1 && !(mh->msg_flags & MSG_CTRUNC))
        return fds[0];
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return -1;
}

int conn_receive(gllm_client *c, bool block)
{
    for (;;) {
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(CONN_RX_MAX_FDS * sizeof(int))];
        } ctrl;
        struct iovec iov = {.iov_base = c->rx, .iov_len = sizeof c->rx};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                            .msg_controllen = sizeof ctrl.buf};
        /* Close-on-exec from the start: a fork+exec in another thread never inherits it. */
        ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        /* gllmd gone with requests of ours unread: the kernel says ECONNRESET, not EOF. */
        if (n < 0)
            return errno == ECONNRESET || errno == EPIPE ? GLLM_EDISCONNECTED : -errno;
        const int fd = take_fd(&mh);
        if (n == 0) {
            if (fd >= 0)
                close(fd);
            return GLLM_EDISCONNECTED;
        }
        int r = calls_route_fd(&c->calls, c->rx, (size_t)n, c->last_error, fd);
        if (r < 0 || block)
            return r;
    }
}

int conn_ring_drain(gllm_client *c)
{
    struct gllm_ring *rg = c->ring;
    if (!rg)
        return 0;
    const uint32_t head = atomic_load_explicit(&rg->reply_head, memory_order_acquire);
    if (head - c->reply_tail > GLLM_RING_REPLY_SLOTS)
        return GLLM_EMALFORMED;   /* gllmd never publishes past our tail */
    int r = 0;
    for (; r == 0 && c->reply_tail != head; c->reply_tail++) {
        const struct gllm_ring_reply_slot *s = &rg->reply[c->reply_tail % GLLM_RING_REPLY_SLOTS];
        const uint32_t len = s->len;
        if (len > sizeof s->data)
            return GLLM_EMALFORMED;
        memcpy(c->rx, s->data, len);
        r = calls_route(&c->calls, c->rx, len, c->last_error);
    }
    atomic_store_explicit(&rg->reply_tail, c->reply_tail, memory_order_release);
    return r;
}

void conn_ring_set_polling(gllm_client *c, bool on)
{
    atomic_store_explicit(&c->ring->polling, on ? 1 : 0, memory_order_seq_cst);
}

/* Reads replies while a send waits, so a daemon that waits for us to drain our socket can
 * never deadlock with us. */
int conn_send(gllm_client *c, const void *data, size_t len, int fd)
{
    union proto_fd_control ctrl;
    struct iovec iov;
    struct msghdr mh;
    proto_fd_message(&mh, &iov, data, len, fd, &ctrl);
    for (;;) {
        if (sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
            c->packets_sent++;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET)
            return GLLM_EDISCONNECTED;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLOUT};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return -errno;
        if (p.revents & POLLIN) {
            int r = conn_receive(c, false);
            if (r < 0)
                return r;
        }
    }
}

/* No system call while gllmd's loop polls the ring. */
int conn_ring_send(gllm_client *c)
{
    struct gllm_ring *rg = c->ring;
    const size_t len = c->tx.len;
    if (!rg || len > sizeof rg->request[0].data ||
        !atomic_load_explicit(&rg->gllmd_polling, memory_order_acquire) ||
        c->request_head - atomic_load_explicit(&rg->request_tail, memory_order_acquire) >=
            GLLM_RING_REQUEST_SLOTS)
        return 1;
    struct gllm_ring_request_slot *s = &rg->request[c->request_head % GLLM_RING_REQUEST_SLOTS];
    memcpy(s->data, c->tx.data, len);
    s->len = (uint32_t)len;
    s->after = (uint32_t)c->packets_sent;
    atomic_store_explicit(&rg->request_head, ++c->request_head, memory_order_release);
    /* gllmd clears its flag, fences, then looks at our head once more: one of us sees the
     * other. If it stopped polling, wake it through the socket (proto/ring.h). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rg->gllmd_polling, memory_order_relaxed))
        return 0;
    proto_buf_init(&c->tx);   /* the request is in the ring: c->tx is free */
    proto_pack_notify(&c->tx.pk, "ring_wake");
    msgpack_pack_map(&c->tx.pk, 0);
    return conn_send(c, c->tx.data, c->tx.len, -1);
}

struct gllm_ring *conn_ring_create(int *fd)
{
    int f = memfd_create("gllm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return NULL;
    void *p = MAP_FAILED;
    if (ftruncate(f, (off_t)GLLM_RING_BYTES) == 0 &&
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
        p = mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) {
        close(f);
        return NULL;
    }
    *fd = f;
    return p;
}

void conn_ring_unmap(struct gllm_ring *rg)
{
    if (rg)
        munmap(rg, GLLM_RING_BYTES);
}
