/* Test helpers: reference attention in double precision and a real daemon per test. */
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

#include "gllm/elem.h"
#include "testutil.h"

double elem_get(const void *base, gllm_dtype dt, int64_t idx)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return gllm_f16_to_f32(((const uint16_t *)base)[idx]);
    case GLLM_DTYPE_BF16: return gllm_bf16_to_f32(((const uint16_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

void elem_set(void *base, gllm_dtype dt, int64_t idx, double x)
{
    switch (dt) {
    case GLLM_DTYPE_F16: ((uint16_t *)base)[idx] = gllm_f32_to_f16((float)x); break;
    case GLLM_DTYPE_BF16: ((uint16_t *)base)[idx] = gllm_f32_to_bf16((float)x); break;
    default: ((float *)base)[idx] = (float)x; break;
    }
}

uint64_t rng_next(uint64_t *s)
{
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fill_random(void *base, gllm_dtype dt, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        elem_set(base, dt, (int64_t)i, (double)(rng_next(seed) >> 11) / 4503599627370496.0 - 1.0);
}

void ref_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                   struct ref_view q, struct ref_view k, struct ref_view v, bool causal,
                   double scale, double *out, double *lse)
{
    double *s = malloc((size_t)(Skv ? Skv : 1) * sizeof *s);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t hk = h / (Hq / Hkv);
            for (int64_t i = 0; i < Sq; i++) {
                int64_t visible = causal ? i + Skv - Sq + 1 : Skv;
                if (visible > Skv)
                    visible = Skv;
                double mx = -INFINITY;
                for (int64_t j = 0; j < visible; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < D; d++)
                        acc += elem_get(q.data, q.dtype, b * q.st[0] + h * q.st[1] + i * q.st[2] + d * q.st[3]) *
                               elem_get(k.data, k.dtype, b * k.st[0] + hk * k.st[1] + j * k.st[2] + d * k.st[3]);
                    s[j] = acc * scale;
                    mx = fmax(mx, s[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < visible; j++)
                    sum += (s[j] = exp(s[j] - mx));
                double *o = out + ((b * Hq + h) * Sq + i) * D;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < visible; j++)
                        acc += s[j] * elem_get(v.data, v.dtype, b * v.st[0] + hk * v.st[1] + j * v.st[2] + d * v.st[3]);
                    o[d] = visible > 0 ? acc / sum : 0.0;
                }
                if (lse)
                    lse[(b * Hq + h) * Sq + i] = visible > 0 ? mx + log(sum) : -INFINITY;
            }
        }
    free(s);
}

double rel_error_max(const double *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (isnan(got[i]) != isnan(want[i]))
            return INFINITY;
        num = e > num ? e : num;
        den = fabs(want[i]) > den ? fabs(want[i]) : den;
    }
    return den > 0 ? num / den : num;
}

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
