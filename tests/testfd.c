/* Test helpers the fuzzer shares: packets with an fd attached, and sealed memfds. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"
#include "testutil.h"

ssize_t send_packet_fd(int sock, const void *p, size_t n, int fd, int flags)
{
    union proto_fd_control ctrl;
    struct iovec iov;
    struct msghdr mh;
    proto_fd_message(&mh, &iov, p, n, fd, &ctrl);
    return sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
}

int make_memfd(size_t size, unsigned seals)
{
    int fd = memfd_create("gllm-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)size) < 0 || (seals && fcntl(fd, F_ADD_SEALS, seals) < 0)) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}
