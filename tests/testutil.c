/* Test helpers: a real daemon per test or group, raw protocol access, memfds. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

ssize_t send_packet_fd(int sock, const void *p, size_t n, int fd, int flags)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctrl;
    struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctrl, 0, sizeof ctrl);
        mh.msg_control = ctrl.buf;
        mh.msg_controllen = sizeof ctrl.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
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

const char *test_backend(void)
{
    const char *b = getenv("GLLM_TEST_BACKEND");
    return b && b[0] ? b : "cpu";
}

/* Up when its socket accepts a connection (hello may still be refused by policy). */
static bool socket_answers(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int daemon_start(struct daemon *d, const char *const *extra)
{
    return daemon_start_env(d, extra, NULL);
}

int daemon_start_env(struct daemon *d, const char *const *extra, const char *const *env)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/gllm-test-XXXXXX");
    if (!mkdtemp(d->dir))
        return -errno;
    snprintf(d->socket, sizeof d->socket, "%s/gllmd.sock", d->dir);
    /* GLLMD_PATH and GLLM_TEST_BACKEND let scripts/gpu-check.sh run the same tests
     * from a carried build against the CUDA backend. */
    const char *path = getenv("GLLMD_PATH") ? getenv("GLLMD_PATH") : GLLMD_PATH;
    /* GLLMD_WRAPPER runs gllmd under a tool, e.g. "valgrind --error-exitcode=99". */
    const char *argv[48];
    int n = 0;
    static char wrapper[512];
    const char *w = getenv("GLLMD_WRAPPER");
    if (w && w[0]) {
        snprintf(wrapper, sizeof wrapper, "%s", w);
        for (char *save = NULL, *tok = strtok_r(wrapper, " ", &save); tok && n < 16;
             tok = strtok_r(NULL, " ", &save))
            argv[n++] = tok;
    }
    const char *exe = n ? argv[0] : path;
    const char *base[] = {path, "--socket", d->socket, "--threads", "2", "--backend",
                          test_backend()};
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[n++] = base[i];
    for (int i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -errno;
    if (d->pid == 0) {
        /* A test that fails half way never leaves a daemon behind. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(exe, (char *const *)argv);
        _exit(127);
    }
    /* Ready when the socket answers; give up after 10 s (60 s under a wrapper). */
    for (int i = 0; i < (n && w && w[0] ? 6000 : 1000); i++) {
        if (socket_answers(d->socket))
            return 0;
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;   /* reaped: never signal that pid again */
            return -ECHILD;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -ETIMEDOUT;
}

int daemon_stop(struct daemon *d)
{
    int status = -1;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        if (waitpid(d->pid, &status, 0) < 0)
            status = -1;
        d->pid = 0;
    }
    unlink(d->socket);
    rmdir(d->dir);
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct daemon group_daemon;

int group_daemon_start(void **state)
{
    (void)state;
    return daemon_start(&group_daemon, NULL) == 0 ? 0 : -1;
}

int group_daemon_stop(void **state)
{
    (void)state;
    return daemon_stop(&group_daemon) == 0 ? 0 : -1;
}
