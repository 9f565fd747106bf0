/* One fd carried by a packet as SCM_RIGHTS ancillary data: the framing gllmd, libgllm-client
 * and the tests share. Builds the message; sending it is the caller's. */
#ifndef GLLM_FDPASS_H
#define GLLM_FDPASS_H

#include <string.h>
#include <sys/socket.h>

/* Room for one fd's control message, aligned as the kernel wants it. */
union proto_fd_control {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
};

/* mh gets one iovec of data/len and, when fd >= 0, fd as SCM_RIGHTS in ctrl (which must
 * outlive the send). */
static inline void proto_fd_message(struct msghdr *mh, struct iovec *iov, const void *data,
                                    size_t len, int fd, union proto_fd_control *ctrl)
{
    *iov = (struct iovec){.iov_base = (void *)data, .iov_len = len};
    *mh = (struct msghdr){.msg_iov = iov, .msg_iovlen = 1};
    if (fd < 0)
        return;
    memset(ctrl, 0, sizeof *ctrl);
    mh->msg_control = ctrl->buf;
    mh->msg_controllen = sizeof ctrl->buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
}

#endif
