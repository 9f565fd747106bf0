/* A device process's life on gllmd's side: spawned, asked, marked lost, reaped and replaced.
 * It is asked through its channels: control requests, and the work channel's doorbell. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "devproc_process.h"
#include "log.h"

extern char **environ;

/* Mapping an arena pins it, in time that grows with its bytes: on H200 hosts 0.45-0.87 s a
 * GiB with its pages made on the way, a 24 GiB arena past CTL_TIMEOUT_MS (which then cost the
 * device a reset), and a reset mapping 16 GiB again took 4 s. So a mapping's request, and a
 * reset that maps arenas again, get a second per HOST_MAP_BYTES_PER_S of them on top of
 * their own bound: 4 s a GiB, five to nine times what was measured. */
#define HOST_MAP_BYTES_PER_S (256ull << 20)
/* A killed process's driver teardown: waited for this long, then left to be reaped later. */
#define REAP_WAIT_MS 5000

/* ---- starting and ending a process ---- */

static void close_chan(struct dp_chan *c)
{
    if (c->sock >= 0)
        close(c->sock);
    if (c->m)
        munmap(c->m, DP_AREA_BYTES);
    c->sock = -1;
    c->m = NULL;
}

/* An fd above the four a device process gets, so dup2 onto them never meets itself. */
static int high_fd(int fd)
{
    if (fd < 0)
        return fd;
    int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return h;
}

static int new_area(struct dp_msg **m)
{
    int fd = high_fd(memfd_create("gllmd-devproc", MFD_CLOEXEC));
    if (fd < 0)
        return -errno;
    void *p = MAP_FAILED;
    if (ftruncate(fd, DP_AREA_BYTES) == 0)
        p = mmap(NULL, DP_AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    *m = p;
    return fd;
}

/* Waits up to ms for pid to end; true when it was reaped. */
static bool reap(pid_t pid, int ms, int *status)
{
    for (int waited = 0;; waited++) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (waited >= ms)
            return false;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
}

/* Whether pid has ended, waiting up to ms, its status left for reap (so its pid cannot be
 * reused while gllmd may still kill it). */
static bool ended(pid_t pid, int ms, int *status)
{
    for (int waited = 0;; waited++) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) {
            *status = si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8
                                               : si.si_status & 0x7f;
            return true;
        }
        if (waited >= ms)
            return false;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
}

static void describe_status(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    else if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "ended");
}

/* Starts the device process for ordinal with backend name and waits for its hello. */
int dp_spawn(struct dp_ctx *x, struct dp_proc *p, const char *name, struct dp_hello *hello,
             char *why, size_t len)
{
    int ctl[2] = {-1, -1}, work[2] = {-1, -1}, ctl_area = -1, work_area = -1, r;
    struct dp_msg *cm = NULL, *wm = NULL;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, work) < 0) {
        r = -errno;
        snprintf(why, len, "socketpair: %s", strerror(-r));
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        ctl[i] = high_fd(ctl[i]);
        work[i] = high_fd(work[i]);
    }
    if ((ctl_area = new_area(&cm)) < 0 || (work_area = new_area(&wm)) < 0) {
        r = ctl_area < 0 ? ctl_area : work_area;
        snprintf(why, len, "shared area: %s", strerror(-r));
        goto fail;
    }
    char dev[16], threads[16], level[16], parent[24];
    snprintf(dev, sizeof dev, "%d", p->ordinal);
    snprintf(threads, sizeof threads, "%d", x->threads);
    snprintf(level, sizeof level, "%d", x->log_level);
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    char *argv[16];
    int n = 0;
    argv[n++] = "gllmd";
    argv[n++] = "--device-process";
    argv[n++] = "--backend";
    argv[n++] = (char *)name;
    argv[n++] = "--device";
    argv[n++] = dev;
    argv[n++] = "--threads";
    argv[n++] = threads;
    argv[n++] = "--log-level";
    argv[n++] = level;
    argv[n++] = "--parent";
    argv[n++] = parent;
    if (x->deterministic)
        argv[n++] = "--deterministic";
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ctl[1], DP_FD_CTL);
    posix_spawn_file_actions_adddup2(&fa, work[1], DP_FD_WORK);
    posix_spawn_file_actions_adddup2(&fa, ctl_area, DP_FD_CTL_AREA);
    posix_spawn_file_actions_adddup2(&fa, work_area, DP_FD_WORK_AREA);
    /* The device process is this binary, started through an fd of /proc/self/exe rather
     * than the path itself: both name the running file, not one an upgrade put in its place,
     * but under valgrind only the open is redirected to gllmd (an exec of the path would
     * start valgrind's own tool, which refuses to run). Above 10, so that no dup2 above
     * lands on it; the path is looked up before close-on-exec closes it. */
    pid_t pid;
    const int exe = high_fd(open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
    if (exe < 0) {
        r = -errno;
    } else {
        char exe_path[32];
        snprintf(exe_path, sizeof exe_path, "/proc/self/fd/%d", exe);
        r = -posix_spawn(&pid, exe_path, &fa, NULL, argv, environ);
        close(exe);
    }
    posix_spawn_file_actions_destroy(&fa);
    close(ctl[1]);
    close(work[1]);
    close(ctl_area);
    close(work_area);
    ctl[1] = work[1] = ctl_area = work_area = -1;
    if (r < 0) {
        snprintf(why, len, "cannot start a device process: %s", strerror(-r));
        goto fail;
    }
    int fd;
    r = dp_wait(ctl[0], HELLO_TIMEOUT_MS, &fd);
    if (fd >= 0)
        close(fd);
    if (r < 0 || cm->op != DP_HELLO || cm->status < 0) {
        int st = 0;
        char how[64] = "did not answer";
        if (r == 0)
            snprintf(why, len, "%s", cm->why[0] ? cm->why : gllm_strerror(cm->status));
        /* Gone before its hello, by a signal (killed from outside, the OOM killer): that
         * process is lost, DEVLOST; one that said why it cannot open the device, or never
         * answered, is the backend's failure. */
        const bool died = r < 0 && r != -ETIMEDOUT;
        kill(pid, SIGKILL);
        const bool reaped = reap(pid, REAP_WAIT_MS, &st);
        if (reaped && r < 0)
            describe_status(st, how, sizeof how);
        if (r < 0)
            snprintf(why, len, "the device process %s", how);
        if (r == 0)
            r = cm->status;
        else
            r = died && reaped && WIFSIGNALED(st) ? GLLM_EDEVLOST : GLLM_EBACKEND;
        goto fail;
    }
    *hello = cm->hello;
    snprintf(why, len, "%s", cm->why);      /* what the backend's selection passed over */
    p->pid = pid;
    p->spin_ns = strcmp(cm->hello.backend, "cpu") != 0 ? DP_SPIN_REPLY_NS : 0;
    p->ctl = (struct dp_chan){.sock = ctl[0], .m = cm};
    p->work = (struct dp_chan){.sock = work[0], .m = wm};
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (ctl[i] >= 0)
            close(ctl[i]);
        if (work[i] >= 0)
            close(work[i]);
    }
    if (ctl_area >= 0)
        close(ctl_area);
    if (work_area >= 0)
        close(work_area);
    if (cm)
        munmap(cm, DP_AREA_BYTES);
    if (wm)
        munmap(wm, DP_AREA_BYTES);
    return r < 0 ? r : GLLM_EBACKEND;
}

/* ---- one request ---- */

/* p is down (lost or being replaced) for why; the first reason found stays. */
static void mark_down(struct dp_proc *p, const char *why)
{
    pthread_mutex_lock(&p->why_lock);
    if (!atomic_load(&p->down)) {
        snprintf(p->down_why, sizeof p->down_why, "%s", why);
        atomic_store(&p->down, true);
    }
    pthread_mutex_unlock(&p->why_lock);
}

/* Writes prefix and why p is down into buf. */
void dp_down_reason(struct dp_proc *p, const char *prefix, char *buf, size_t len)
{
    pthread_mutex_lock(&p->why_lock);
    snprintf(buf, len, "%s%s", prefix, p->down_why);
    pthread_mutex_unlock(&p->why_lock);
}

int dp_devlost(struct dp_proc *p, int dev, char *why, size_t len)
{
    if (why && len) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "device %d: its process is lost: ", dev);
        dp_down_reason(p, prefix, why, len);
    }
    return GLLM_EDEVLOST;
}

/* Marks p lost after a failed exchange (r: -ETIMEDOUT after timeout_ms, else the peer gone
 * or an error) and answers late_code for a timeout, DEVLOST otherwise. */
int dp_lost(struct dp_proc *p, int r, int timeout_ms, int late_code)
{
    char what[120];
    int st;
    if (r == -ETIMEDOUT)
        snprintf(what, sizeof what, "pid %ld did not answer within %d ms", (long)p->pid,
                 timeout_ms);
    else if (ended(p->pid, 200, &st)) {
        char how[64];
        describe_status(st, how, sizeof how);
        snprintf(what, sizeof what, "pid %ld %s", (long)p->pid, how);
    } else {
        snprintf(what, sizeof what, "pid %ld: %s", (long)p->pid, strerror(-r));
    }
    mark_down(p, what);
    return r == -ETIMEDOUT ? late_code : GLLM_EDEVLOST;
}

/* Rings c with the request already in c->m and waits for the reply through the socket: 0
 * (the reply in c->m), or the process is lost (marked down) and the call answers late_code. */
static int call(struct dp_proc *p, struct dp_chan *c, int fd_in, int timeout_ms, int *fd_out,
                int late_code)
{
    int fd = -1;
    int r = dp_ring(c->sock, fd_in);
    if (r == 0)
        r = dp_wait(c->sock, timeout_ms, &fd);
    if (r < 0)
        return dp_lost(p, r, timeout_ms, late_code);
    if (fd_out)
        *fd_out = fd;
    else if (fd >= 0)
        close(fd);
    return 0;
}

/* The work channel's exchange through its doorbell (devproc_wire.h, struct dp_bell). */
static int bell_call(struct dp_proc *p, int timeout_ms, int late_code)
{
    struct dp_chan *c = &p->work;
    struct dp_bell *b = &c->m->bell;
    const uint64_t n = atomic_load_explicit(&b->req, memory_order_relaxed) + 1;
    atomic_store_explicit(&b->req, n, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    int r = 0;
    if (atomic_load_explicit(&b->child_waiting, memory_order_relaxed) &&
        (r = dp_ring(c->sock, -1)) < 0)
        return dp_lost(p, r, timeout_ms, late_code);
    const uint64_t deadline =
        timeout_ms < 0 ? 0 : backend_now_ns() + (uint64_t)timeout_ms * 1000000u;
    bool gone = false;
    for (;;) {
        if (dp_spin(&b->rep, n, p->spin_ns, c->sock, &gone))
            return 0;
        if (gone)
            return dp_lost(p, -EPIPE, timeout_ms, late_code);
        atomic_store_explicit(&b->parent_waiting, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&b->rep, memory_order_acquire) == n) {
            atomic_store_explicit(&b->parent_waiting, 0, memory_order_relaxed);
            return 0;
        }
        int ms = -1;
        if (deadline) {
            const uint64_t now = backend_now_ns();
            if (now >= deadline)
                return dp_lost(p, -ETIMEDOUT, timeout_ms, late_code);
            ms = (int)((deadline - now + 999999u) / 1000000u);
        }
        int fd;
        r = dp_wait(c->sock, ms, &fd);
        atomic_store_explicit(&b->parent_waiting, 0, memory_order_relaxed);
        if (fd >= 0)
            close(fd);
        if (r < 0)
            return dp_lost(p, r, timeout_ms, late_code);
    }
}

/* What mapping (or unmapping) len bytes of arena may take beyond a control request's bound. */
uint64_t dp_host_map_ms(size_t len)
{
    return (uint64_t)len / (HOST_MAP_BYTES_PER_S / 1000u);
}

/* A control request of p within timeout_ms, ctl_lock held by the caller and released here:
 * m prepared by fill under the lock. */
int dp_ctl_exchange(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                    struct dp_msg *reply, char *why, size_t len, uint64_t timeout_ms)
{
    if (atomic_load(&p->down) || !p->ctl.m) {
        pthread_mutex_unlock(&p->ctl_lock);
        return dp_devlost(p, dev, why, len);
    }
    memcpy(p->ctl.m, req, offsetof(struct dp_msg, job));
    int r = call(p, &p->ctl, fd_in, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms, fd_out,
                 GLLM_EDEVLOST);
    if (r == 0)
        memcpy(reply, p->ctl.m, offsetof(struct dp_msg, job));
    pthread_mutex_unlock(&p->ctl_lock);
    if (r < 0)
        return dp_devlost(p, dev, why, len);
    if (reply->status < 0 && why && len && reply->why[0])
        snprintf(why, len, "%s", reply->why);
    return reply->status;
}

int dp_ctl_call(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                struct dp_msg *reply, char *why, size_t len)
{
    pthread_mutex_lock(&p->ctl_lock);
    return dp_ctl_exchange(p, dev, req, fd_in, fd_out, reply, why, len, CTL_TIMEOUT_MS);
}

/* A mapping or unmapping goes on in the device process while its control channel serves
 * other requests (device tensors made and freed, memory figures): after r, the request's
 * answer, this asks whether it is done after 20 us, then twice as long each time up to
 * HOST_POLL_NS (a small arena's answer is not held up by a long first wait), until the bound
 * for len bytes has passed and the process counts as lost. */
#define HOST_POLL_NS 2000000L
static int host_wait(struct dp_proc *p, int dev, int r, size_t len, struct dp_msg *rep,
                     const char *what)
{
    const uint64_t bound_ms = CTL_TIMEOUT_MS + dp_host_map_ms(len);
    const uint64_t until = backend_now_ns() + bound_ms * 1000000u;
    struct dp_msg m = {.op = DP_HOST_DONE};
    long wait_ns = 20000;
    while (r == DP_PENDING) {
        if (backend_now_ns() > until) {
            char why[120];
            snprintf(why, sizeof why, "pid %ld did not %s an arena within %llu ms",
                     (long)p->pid, what, (unsigned long long)bound_ms);
            mark_down(p, why);
            return GLLM_EDEVLOST;
        }
        nanosleep(&(struct timespec){.tv_nsec = wait_ns}, NULL);
        wait_ns = wait_ns < HOST_POLL_NS / 2 ? 2 * wait_ns : HOST_POLL_NS;
        r = dp_ctl_call(p, dev, &m, -1, NULL, rep, NULL, 0);
    }
    return r;
}

int dp_map_in(struct dp_proc *p, int dev, struct dp_hostmap *h, bool *pinned)
{
    struct dp_msg m = {.op = DP_HOST_MAP, .a = (uint64_t)(uintptr_t)h->p, .b = h->len}, rep = {0};
    int r = dp_ctl_call(p, dev, &m, h->fd, NULL, &rep, NULL, 0);
    r = host_wait(p, dev, r, h->len, &rep, "map");
    *pinned = r == 0 && rep.pinned;
    return r;
}

void dp_unmap_in(struct dp_proc *p, int dev, void *ptr, size_t len)
{
    struct dp_msg m = {.op = DP_HOST_UNMAP, .a = (uint64_t)(uintptr_t)ptr}, rep = {0};
    host_wait(p, dev, dp_ctl_call(p, dev, &m, -1, NULL, &rep, NULL, 0), len, &rep, "unmap");
}

/* A work request already in p->work.m: 0 with the reply there, or the process is lost. */
int dp_work_call(struct dp_proc *p, int timeout_ms, int late_code)
{
    if (atomic_load(&p->down) || !p->work.m)
        return GLLM_EDEVLOST;
    return bell_call(p, timeout_ms, late_code);
}

/* ---- ending a process, and a new one in place of the lost one ---- */

void dp_end_process(struct dp_proc *p, bool kill_first)
{
    if (kill_first && p->pid > 0)
        kill(p->pid, SIGKILL);
    pthread_mutex_lock(&p->ctl_lock);     /* a control request on the old process ends */
    close_chan(&p->ctl);
    pthread_mutex_unlock(&p->ctl_lock);
    close_chan(&p->work);
    if (p->pid > 0) {
        int st;
        if (!kill_first && !reap(p->pid, 2000, &st))
            kill(p->pid, SIGKILL);
        if (!reap(p->pid, REAP_WAIT_MS, &st))
            log_warn("device %d: process %ld not reaped after %d ms; going on without it",
                     p->info.index, (long)p->pid, REAP_WAIT_MS);
    }
    p->pid = 0;
}

/* A new process that dies by a signal before its hello or while its arenas are mapped again
 * (killed from outside, the OOM killer) is the loss of that process, not of the device:
 * another is started, this many times in all, before the reset counts as failed (the
 * reset's own bound, sched_fault.c's guard, holds over them all). */
#define REPLACE_ATTEMPTS 5

/* One replacement: *lost_new when the new process was lost before it served. */
static int replace_once(struct dp_ctx *x, int dev, char *why, size_t len, bool *lost_new)
{
    struct dp_proc *p = &x->proc[dev];
    *lost_new = false;
    mark_down(p, "being replaced after a fault");
    dp_end_process(p, true);
    struct dp_hello hello;
    struct dp_proc fresh = {.ordinal = p->ordinal};
    int r = dp_spawn(x, &fresh, x->name, &hello, why, len);
    if (r < 0) {
        *lost_new = r == GLLM_EDEVLOST;
        return r;
    }
    pthread_mutex_lock(&p->ctl_lock);
    p->pid = fresh.pid;
    p->ctl = fresh.ctl;
    p->work = fresh.work;
    p->gen++;
    pthread_mutex_unlock(&p->ctl_lock);
    /* The arenas again, before anything else can reach the new process. */
    pthread_mutex_lock(&x->maps_lock);
    atomic_store(&p->down, false);
    for (struct dp_hostmap *h = x->maps; h && r == 0; h = h->next) {
        bool pinned;
        r = dp_map_in(p, dev, h, &pinned);
        h->pinned = h->pinned && pinned;
    }
    pthread_mutex_unlock(&x->maps_lock);
    if (r < 0) {
        *lost_new = r == GLLM_EDEVLOST && atomic_load(&p->down);
        char reason[160];
        dp_down_reason(p, "", reason, sizeof reason);
        mark_down(p, "could not map the arenas again");
        snprintf(why, len, "the new device process could not map the arenas (%s: %s)",
                 gllm_strerror(r), reason);
        return r;
    }
    return 0;
}

int dp_replace(struct dp_ctx *x, int dev, char *why, size_t len)
{
    struct dp_proc *p = &x->proc[dev];
    const pid_t old = p->pid;
    for (int attempt = 1;; attempt++) {
        bool lost_new;
        int r = replace_once(x, dev, why, len, &lost_new);
        if (r == 0)
            break;
        if (!lost_new || attempt == REPLACE_ATTEMPTS)
            return r;
        log_warn("device %d: %s; starting another", dev, why);
    }
    log_info("device %d: process %ld replaced by %ld", dev, (long)old, (long)p->pid);
    return 0;
}
