/* The ring between gllmd and a device process: a one-byte packet and at most one fd. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "devproc_wire.h"

int dp_ring(int sock, int fd)
{
    char byte = 1;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        msg.msg_control = ctl.buf;
        msg.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    for (;;) {
        if (sendmsg(sock, &msg, MSG_NOSIGNAL) == 1)
            return 0;
        if (errno != EINTR)
            return errno == ECONNRESET ? -EPIPE : -errno;
    }
}

int dp_wait(int sock, int timeout_ms, int *fd)
{
    *fd = -1;
    struct pollfd p = {.fd = sock, .events = POLLIN};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            break;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    while ((n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return errno == ECONNRESET ? -EPIPE : -errno;
    if (n == 0)
        return -EPIPE;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
            c->cmsg_len == CMSG_LEN(sizeof(int))) {
            int got;
            memcpy(&got, CMSG_DATA(c), sizeof got);
            if (*fd >= 0)
                close(got);          /* one fd per ring: extras are not ours to keep */
            else
                *fd = got;
        }
    if (msg.msg_flags & MSG_CTRUNC) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return -EPROTO;
    }
    return 0;
}

bool dp_peer_gone(int sock)
{
    struct pollfd p = {.fd = sock, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

bool dp_spin(_Atomic uint64_t *counter, uint64_t want, uint64_t spin_ns, int sock, bool *gone)
{
    const uint64_t until = backend_now_ns() + spin_ns;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(counter, memory_order_acquire) == want)
            return true;
        if (i % 256 == 0) {
            if (backend_now_ns() >= until)
                return false;
            if (i % 4096 == 0 && dp_peer_gone(sock)) {
                *gone = true;
                return false;
            }
        }
        __asm__ __volatile__("" ::: "memory");
    }
}
