/* gllmd's side of the device processes: starting them, the backend that forwards each entry
 * to a device's process, and the reset that replaces a process whose context is lost. */
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
#include "devproc.h"
#include "devproc_wire.h"
#include "log.h"

extern char **environ;

/* How long a device process may take: to open its backend (CUDA with its kernels loaded),
 * to answer a control request, to answer a poll, and past a job's own deadline (the
 * process's watchdog answers first; this catches a process that cannot). Past any of them
 * the process counts as lost and the device is reset. */
#define HELLO_TIMEOUT_MS 60000
#define CTL_TIMEOUT_MS 10000
/* Mapping an arena pins it, in time that grows with its bytes: on H200 hosts 0.45-0.87 s a
 * GiB with its pages made on the way, a 24 GiB arena past CTL_TIMEOUT_MS (which then cost the
 * device a reset), and a reset mapping 16 GiB again took 4 s. So a mapping's request, and a
 * reset that maps arenas again, get a second per HOST_MAP_BYTES_PER_S of them on top of
 * their own bound: 4 s a GiB, five to nine times what was measured. */
#define HOST_MAP_BYTES_PER_S (256ull << 20)
#define POLL_TIMEOUT_MS 5000
#define JOB_GRACE_MS 2000
/* A killed process's driver teardown: waited for this long, then left to be reaped later. */
#define REAP_WAIT_MS 5000

struct dp_chan {
    int sock;
    struct dp_msg *m;
};

struct dp_proc {
    int ordinal;                /* the device among those the driver reports */
    _Atomic pid_t pid;          /* 0 while none runs; atomic: read by hello and status (fwd_info)
                                 * and by workers finding a loss, while a reset replaces it */
    struct dp_chan ctl, work;
    pthread_mutex_t ctl_lock;   /* one control request at a time */
    atomic_bool down;           /* lost or being replaced: every call answers DEVLOST */
    pthread_mutex_t why_lock;   /* down_why, written by whichever thread found the loss */
    char down_why[160];
    _Atomic uint32_t gen;       /* bumped by each new process: queues opened before are gone */
    uint64_t spin_ns;           /* gllmd spins this long for a reply (0: the CPU backend, whose
                                 * jobs need the cores a spin would take) */
    gllm_device_info info;
    /* The last memory figures it gave (fwd_memory), answered while another control request
     * holds ctl_lock (a large device allocation, or one queued behind it). */
    _Atomic uint64_t mem_used, mem_total;
};

/* An arena, kept for every device process started later. */
struct dp_hostmap {
    void *p;
    size_t len;
    int fd;
    bool pinned;                /* registered by every device process's backend */
    struct dp_hostmap *next;
};

/* A queue of a client: the device process's handle, and where each job in flight wants its
 * timing and why. */
#define DP_QUEUE_RING 64
struct dp_queue {
    uint64_t handle;
    uint32_t gen;
    struct {
        struct attn_timing *timing;
        char *why;
        size_t why_len;
    } out[DP_QUEUE_RING];
    unsigned head, n;
};

struct dp_ctx {
    struct backend be;
    struct backend_iface iface;
    struct backend_device_iface dev;
    char name[16];
    int threads, log_level;
    bool deterministic;
    uint32_t has;
    int nproc;
    struct dp_proc proc[GLLM_MAX_DEVICES];
    pthread_mutex_t maps_lock;
    struct dp_hostmap *maps;
    /* Of maps and of a mapping under way, read without maps_lock (the reset's allowance): a
     * reset waits for that lock while a mapping holds it, then maps every arena again. */
    _Atomic uint64_t mapped_bytes;
};

static struct dp_ctx *ctx_of(struct backend *be)
{
    return be->ctx;
}

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
static int spawn(struct dp_ctx *x, struct dp_proc *p, const char *name, struct dp_hello *hello,
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
        kill(pid, SIGKILL);
        if (reap(pid, REAP_WAIT_MS, &st) && r < 0)
            describe_status(st, how, sizeof how);
        if (r < 0)
            snprintf(why, len, "the device process %s", how);
        r = r < 0 ? GLLM_EBACKEND : cm->status;
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
static void down_reason(struct dp_proc *p, const char *prefix, char *buf, size_t len)
{
    pthread_mutex_lock(&p->why_lock);
    snprintf(buf, len, "%s%s", prefix, p->down_why);
    pthread_mutex_unlock(&p->why_lock);
}

static int devlost(struct dp_proc *p, int dev, char *why, size_t len)
{
    if (why && len) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "device %d: its process is lost: ", dev);
        down_reason(p, prefix, why, len);
    }
    return GLLM_EDEVLOST;
}

/* Marks p lost after a failed exchange (r: -ETIMEDOUT after timeout_ms, else the peer gone
 * or an error) and answers late_code for a timeout, DEVLOST otherwise. */
static int lost(struct dp_proc *p, int r, int timeout_ms, int late_code)
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
        return lost(p, r, timeout_ms, late_code);
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
        return lost(p, r, timeout_ms, late_code);
    const uint64_t deadline =
        timeout_ms < 0 ? 0 : backend_now_ns() + (uint64_t)timeout_ms * 1000000u;
    bool gone = false;
    for (;;) {
        if (dp_spin(&b->rep, n, p->spin_ns, c->sock, &gone))
            return 0;
        if (gone)
            return lost(p, -EPIPE, timeout_ms, late_code);
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
                return lost(p, -ETIMEDOUT, timeout_ms, late_code);
            ms = (int)((deadline - now + 999999u) / 1000000u);
        }
        int fd;
        r = dp_wait(c->sock, ms, &fd);
        atomic_store_explicit(&b->parent_waiting, 0, memory_order_relaxed);
        if (fd >= 0)
            close(fd);
        if (r < 0)
            return lost(p, r, timeout_ms, late_code);
    }
}

/* What mapping (or unmapping) len bytes of arena may take beyond a control request's bound. */
static uint64_t host_map_ms(size_t len)
{
    return (uint64_t)len / (HOST_MAP_BYTES_PER_S / 1000u);
}

/* A control request of p within timeout_ms, ctl_lock held by the caller and released here:
 * m prepared by fill under the lock. */
static int ctl_exchange(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                        struct dp_msg *reply, char *why, size_t len, uint64_t timeout_ms)
{
    if (atomic_load(&p->down) || !p->ctl.m) {
        pthread_mutex_unlock(&p->ctl_lock);
        return devlost(p, dev, why, len);
    }
    memcpy(p->ctl.m, req, offsetof(struct dp_msg, job));
    int r = call(p, &p->ctl, fd_in, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms, fd_out,
                 GLLM_EDEVLOST);
    if (r == 0)
        memcpy(reply, p->ctl.m, offsetof(struct dp_msg, job));
    pthread_mutex_unlock(&p->ctl_lock);
    if (r < 0)
        return devlost(p, dev, why, len);
    if (reply->status < 0 && why && len && reply->why[0])
        snprintf(why, len, "%s", reply->why);
    return reply->status;
}

static int ctl_call(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                    struct dp_msg *reply, char *why, size_t len)
{
    pthread_mutex_lock(&p->ctl_lock);
    return ctl_exchange(p, dev, req, fd_in, fd_out, reply, why, len, CTL_TIMEOUT_MS);
}

static struct dp_proc *proc_of(struct backend *be, int dev)
{
    struct dp_ctx *x = ctx_of(be);
    return dev >= 0 && dev < x->nproc ? &x->proc[dev] : NULL;
}

/* ---- the forwarding backend ---- */

static int fwd_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct dp_proc *p = proc_of(be, dev);
    if (!p)
        return -ENODEV;
    *out = p->info;
    out->process_pid = (int)atomic_load(&p->pid);     /* never waits on ctl_lock */
    return 0;
}

/* Asked by status on the loop: the last figures while another request (made on the thread
 * pool) holds the channel, so that status never waits for one. */
static int fwd_memory(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    struct dp_proc *p = proc_of(be, dev);
    struct dp_msg m = {.op = DP_MEMORY}, rep = {0};
    if (pthread_mutex_trylock(&p->ctl_lock) == 0) {
        int r = ctl_exchange(p, dev, &m, -1, NULL, &rep, NULL, 0, CTL_TIMEOUT_MS);
        if (r < 0)
            return r;
        atomic_store(&p->mem_used, rep.used);
        atomic_store(&p->mem_total, rep.total);
    }
    *used = atomic_load(&p->mem_used);
    *total = atomic_load(&p->mem_total);
    return 0;
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
    const uint64_t bound_ms = CTL_TIMEOUT_MS + host_map_ms(len);
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
        r = ctl_call(p, dev, &m, -1, NULL, rep, NULL, 0);
    }
    return r;
}

static int map_in(struct dp_proc *p, int dev, struct dp_hostmap *h, bool *pinned)
{
    struct dp_msg m = {.op = DP_HOST_MAP, .a = (uint64_t)(uintptr_t)h->p, .b = h->len}, rep = {0};
    int r = ctl_call(p, dev, &m, h->fd, NULL, &rep, NULL, 0);
    r = host_wait(p, dev, r, h->len, &rep, "map");
    *pinned = r == 0 && rep.pinned;
    return r;
}

static void unmap_in(struct dp_proc *p, int dev, void *ptr, size_t len)
{
    struct dp_msg m = {.op = DP_HOST_UNMAP, .a = (uint64_t)(uintptr_t)ptr}, rep = {0};
    host_wait(p, dev, ctl_call(p, dev, &m, -1, NULL, &rep, NULL, 0), len, &rep, "unmap");
}

/* Every device process maps the arena; one that is down gets it when it is replaced. */
static int fwd_host_map(struct backend *be, void *ptr, size_t len, int fd)
{
    struct dp_ctx *x = ctx_of(be);
    struct dp_hostmap *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    *h = (struct dp_hostmap){.p = ptr, .len = len, .fd = fcntl(fd, F_DUPFD_CLOEXEC, 10),
                             .pinned = true};
    if (h->fd < 0) {
        int e = errno;
        free(h);
        return -e;
    }
    int r = 0, mapped = 0;
    pthread_mutex_lock(&x->maps_lock);
    atomic_fetch_add(&x->mapped_bytes, (uint64_t)len);
    for (int i = 0; i < x->nproc; i++, mapped = i) {
        if (atomic_load(&x->proc[i].down))
            continue;          /* its replacement maps it */
        bool pinned;
        r = map_in(&x->proc[i], i, h, &pinned);
        h->pinned = h->pinned && pinned;
        if (r == GLLM_EDEVLOST) {
            r = 0;             /* that process is lost: its replacement maps it */
            continue;
        }
        if (r < 0)
            break;
    }
    if (r < 0) {
        for (int i = 0; i < mapped; i++)
            if (!atomic_load(&x->proc[i].down))
                unmap_in(&x->proc[i], i, ptr, len);
        atomic_fetch_sub(&x->mapped_bytes, (uint64_t)len);
        pthread_mutex_unlock(&x->maps_lock);
        close(h->fd);
        free(h);
        return r;
    }
    h->next = x->maps;
    x->maps = h;
    pthread_mutex_unlock(&x->maps_lock);
    return 0;
}

static void fwd_host_unmap(struct backend *be, void *ptr)
{
    struct dp_ctx *x = ctx_of(be);
    pthread_mutex_lock(&x->maps_lock);
    struct dp_hostmap **pp = &x->maps;
    while (*pp && (*pp)->p != ptr)
        pp = &(*pp)->next;
    struct dp_hostmap *h = *pp;
    if (h) {
        *pp = h->next;
        atomic_fetch_sub(&x->mapped_bytes, (uint64_t)h->len);
        for (int i = 0; i < x->nproc; i++)
            if (!atomic_load(&x->proc[i].down))
                unmap_in(&x->proc[i], i, ptr, h->len);
        close(h->fd);
        free(h);
    }
    pthread_mutex_unlock(&x->maps_lock);
}

/* The device processes registered the arena when they mapped it (unregistered it when they
 * unmap it): this answers whether every one did. */
static int fwd_host_register(struct backend *be, void *ptr, size_t len)
{
    (void)len;
    struct dp_ctx *x = ctx_of(be);
    int r = -ENOTSUP;
    pthread_mutex_lock(&x->maps_lock);
    for (struct dp_hostmap *h = x->maps; h; h = h->next)
        if (h->p == ptr) {
            r = h->pinned ? 0 : GLLM_EBACKEND;
            break;
        }
    pthread_mutex_unlock(&x->maps_lock);
    return r;
}

static void fwd_host_unregister(struct backend *be, void *ptr)
{
    (void)be;
    (void)ptr;
}

static int fwd_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct dp_msg m = {.op = DP_ALLOC, .b = bytes}, rep = {0};
    int r = ctl_call(proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
    if (r == 0)
        *out = (void *)(uintptr_t)rep.a;
    return r;
}

static void fwd_free(struct backend *be, int dev, void *ptr)
{
    struct dp_msg m = {.op = DP_FREE, .a = (uint64_t)(uintptr_t)ptr}, rep = {0};
    ctl_call(proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
}

static int fwd_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                           int *fd)
{
    struct dp_msg m = {.op = DP_SHARE_ALLOC, .b = bytes}, rep = {0};
    int got = -1;
    int r = ctl_call(proc_of(be, dev), dev, &m, -1, &got, &rep, NULL, 0);
    if (r == 0 && got < 0)
        r = GLLM_EBACKEND;
    if (r < 0) {
        if (got >= 0)
            close(got);
        return r;
    }
    *out = rep.shared;
    *fd = got;
    return 0;
}

static int fwd_share_import(struct backend *be, int dev, int fd, size_t bytes,
                            struct backend_shared *out, char *why, size_t len)
{
    struct dp_msg m = {.op = DP_SHARE_IMPORT, .b = bytes}, rep = {0};
    int r = ctl_call(proc_of(be, dev), dev, &m, fd, NULL, &rep, why, len);
    if (r == 0)
        *out = rep.shared;
    return r;
}

static void fwd_share_free(struct backend *be, int dev, const struct backend_shared *s)
{
    struct dp_msg m = {.op = DP_SHARE_FREE, .shared = *s}, rep = {0};
    ctl_call(proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
}

/* ---- work: the device's worker thread only ---- */

static int work_timeout_ms(uint64_t deadline_ns)
{
    if (!deadline_ns)
        return -1;
    const uint64_t now = backend_now_ns();
    const uint64_t left_ms = deadline_ns > now ? (deadline_ns - now) / 1000000u : 0;
    return left_ms > 86400000u ? 86400000 : (int)left_ms + JOB_GRACE_MS;
}

/* A work request already in p->work.m: 0 with the reply there, or the process is lost. */
static int work_call(struct dp_proc *p, int timeout_ms, int late_code)
{
    if (atomic_load(&p->down) || !p->work.m)
        return GLLM_EDEVLOST;
    return bell_call(p, timeout_ms, late_code);
}

/* q opened in p's current process (a queue outlives the process it was opened in). */
static int queue_current(struct dp_proc *p, struct dp_queue *q)
{
    if (q->gen == p->gen)
        return 0;
    struct dp_msg *m = p->work.m;
    m->op = DP_QUEUE_OPEN;
    int r = work_call(p, HELLO_TIMEOUT_MS, GLLM_EDEVLOST);
    if (r < 0 || (r = m->status) < 0)
        return r;
    q->handle = m->a;
    q->gen = p->gen;
    q->head = q->n = 0;
    return 0;
}

/* Sends a job (its args are in p->work.m->job.u already) and answers for it as the backend
 * would, its timing and why written where args want them (for a queued one: when polled). */
static int work_job(struct backend *be, int dev, uint32_t op, struct dp_queue *q,
                    const struct backend_sync *sync, uint64_t deadline_ns,
                    struct attn_timing *timing, char *why, size_t why_len)
{
    struct dp_proc *p = proc_of(be, dev);
    if (atomic_load(&p->down) || !p->work.m)
        return devlost(p, dev, why, why_len);
    struct dp_msg *m = p->work.m;
    if (q) {
        int r = queue_current(p, q);
        if (r < 0)
            return r == GLLM_EDEVLOST ? devlost(p, dev, why, why_len) : r;
        if (q->n == DP_QUEUE_RING) {
            snprintf(why, why_len, "device %d: queue full in gllmd's record", dev);
            return GLLM_EBACKEND;
        }
    }
    m->op = op;
    m->job.has_sync = sync != NULL;
    if (sync)
        m->job.sync = *sync;
    m->job.queue = q ? q->handle : 0;
    int r = work_call(p, work_timeout_ms(deadline_ns), GLLM_EJOBTIMEOUT);
    if (r < 0) {
        if (r == GLLM_EJOBTIMEOUT) {
            char prefix[48];
            snprintf(prefix, sizeof prefix, "device %d: its process: ", dev);
            down_reason(p, prefix, why, why_len);
        } else
            devlost(p, dev, why, why_len);
        return r;
    }
    r = m->status;
    if (r == BACKEND_PENDING && q) {
        const unsigned i = (q->head + q->n++) % DP_QUEUE_RING;
        q->out[i].timing = timing;
        q->out[i].why = why;
        q->out[i].why_len = why_len;
        return r;
    }
    if (timing)
        *timing = m->timing;
    if (why && why_len)
        snprintf(why, why_len, "%s", m->why);
    return r;
}

static void clear_tables(struct dp_job *j)
{
    j->tab_indptr = j->tab_indices = j->tab_len = j->tab_qindptr = 0;
}

/* The job part of dev's work message, no tables behind it; NULL while the process is down. */
static struct dp_job *job_slot(struct backend *be, int dev)
{
    struct dp_msg *m = proc_of(be, dev)->work.m;
    if (m)
        clear_tables(&m->job);
    return m ? &m->job : NULL;
}

static int fwd_copy(struct backend *be, int dev, const struct copy_args *c)
{
    struct dp_job *j = job_slot(be, dev);
    if (j)
        j->u.copy = *c;
    return work_job(be, dev, DP_COPY, (struct dp_queue *)c->queue, c->sync, c->deadline_ns,
                    c->timing, c->why, c->why_len);
}

static int fwd_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct dp_job *j = job_slot(be, dev);
    if (j)
        j->u.attn = *a;
    return work_job(be, dev, DP_ATTENTION, (struct dp_queue *)a->queue, a->sync, a->deadline_ns,
                    a->timing, a->why, a->why_len);
}

/* The page tables that are gllmd's own copies go behind the message. */
static int put_tables(struct dp_msg *m, const struct paged_args *a)
{
    struct dp_job *j = &m->job;
    clear_tables(j);
    const int64_t nidx = a->kv_indptr ? a->kv_indptr[a->B] : 0;
    j->tab_indptr = a->kv_indptr ? a->B + 1 : 0;
    j->tab_indices = a->kv_indices && !a->indices_on_device && !a->indices_in_arena ? nidx : 0;
    j->tab_len = a->kv_len ? a->B : 0;
    j->tab_qindptr = a->q_indptr ? a->B + 1 : 0;
    if (j->tab_indptr + j->tab_indices + j->tab_len + j->tab_qindptr > DP_TABLE_MAX) {
        clear_tables(j);
        return GLLM_ELIMIT;
    }
    int32_t *t = dp_tables(m);
    memcpy(t, a->kv_indptr, (size_t)j->tab_indptr * 4);
    t += j->tab_indptr;
    memcpy(t, a->kv_indices, (size_t)j->tab_indices * 4);
    t += j->tab_indices;
    memcpy(t, a->kv_len, (size_t)j->tab_len * 4);
    t += j->tab_len;
    memcpy(t, a->q_indptr, (size_t)j->tab_qindptr * 4);
    return 0;
}

static int fwd_paged(struct backend *be, int dev, const struct paged_args *a)
{
    struct dp_proc *p = proc_of(be, dev);
    if (p->work.m) {
        p->work.m->job.u.paged = *a;
        if (put_tables(p->work.m, a) < 0) {
            snprintf(a->why, a->why_len, "the page tables pass what one request carries");
            return GLLM_ELIMIT;
        }
    }
    return work_job(be, dev, DP_PAGED, (struct dp_queue *)a->queue, a->sync, a->deadline_ns,
                    a->timing, a->why, a->why_len);
}

static int fwd_queue_open(struct backend *be, int dev, struct backend_queue **out)
{
    struct dp_proc *p = proc_of(be, dev);
    struct dp_queue *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    q->gen = p->gen - 1;       /* opened in the process at its first job */
    int r = queue_current(p, q);
    if (r < 0) {
        free(q);
        return r;
    }
    *out = (struct backend_queue *)q;
    return 0;
}

static int fwd_queue_poll(struct backend *be, int dev, struct backend_queue *bq, bool cancel)
{
    struct dp_proc *p = proc_of(be, dev);
    struct dp_queue *q = (struct dp_queue *)bq;
    if (q->gen != p->gen || !q->n)
        return GLLM_EDEVLOST;      /* a reset discarded what was in flight */
    struct dp_msg *m = p->work.m;
    if (atomic_load(&p->down) || !m)
        return GLLM_EDEVLOST;
    m->op = DP_QUEUE_POLL;
    m->a = q->handle;
    m->b = cancel;
    int r = work_call(p, POLL_TIMEOUT_MS, GLLM_EDEVLOST);
    const unsigned i = q->head;
    if (r == 0 && (r = m->status) == BACKEND_PENDING)
        return r;
    if (r == GLLM_EDEVLOST && atomic_load(&p->down)) {
        if (q->out[i].why && q->out[i].why_len)
            devlost(p, dev, q->out[i].why, q->out[i].why_len);
    } else {
        if (q->out[i].timing)
            *q->out[i].timing = m->timing;
        if (q->out[i].why && q->out[i].why_len)
            snprintf(q->out[i].why, q->out[i].why_len, "%s", m->why);
    }
    q->head = (q->head + 1) % DP_QUEUE_RING;
    q->n--;
    return r;
}

static void fwd_queue_close(struct backend *be, int dev, struct backend_queue *bq)
{
    struct dp_proc *p = proc_of(be, dev);
    struct dp_queue *q = (struct dp_queue *)bq;
    if (q->gen == p->gen) {
        struct dp_msg m = {.op = DP_QUEUE_CLOSE, .a = q->handle}, rep = {0};
        ctl_call(p, dev, &m, -1, NULL, &rep, NULL, 0);
    }
    free(q);
}

static int fwd_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                            uint64_t deadline_ns, char *why, size_t len)
{
    struct dp_proc *p = proc_of(be, dev);
    if (atomic_load(&p->down) || !p->work.m)
        return devlost(p, dev, why, len);
    struct dp_msg *m = p->work.m;
    m->op = DP_INJECT_FAULT;
    m->a = kind;
    m->b = deadline_ns;
    int r = work_call(p, work_timeout_ms(deadline_ns), GLLM_EJOBTIMEOUT);
    if (r < 0) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "device %d: its process: ", dev);
        down_reason(p, prefix, why, len);
        return r;
    }
    snprintf(why, len, "%s", m->why);
    return m->status;
}

/* A process lost while nothing of its device ran: found down by a control request, or gone
 * (its socket closed) with no request at all. */
static bool fwd_lost(struct backend *be, int dev, char *why, size_t len)
{
    struct dp_proc *p = proc_of(be, dev);
    if (!atomic_load(&p->down) && p->work.m && dp_peer_gone(p->work.sock))
        lost(p, -EPIPE, 0, GLLM_EDEVLOST);
    if (!atomic_load(&p->down))
        return false;
    down_reason(p, "its process is lost: ", why, len);
    return true;
}

/* ---- the reset: a new process in place of the lost one ---- */

static void end_process(struct dp_proc *p, bool kill_first)
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

/* The reset maps every arena again (fwd_reset), after any mapping under way: the time that
 * takes beyond the daemon's bound. */
static uint32_t fwd_reset_allowance_ms(struct backend *be, int dev)
{
    (void)dev;
    const uint64_t ms = host_map_ms((size_t)atomic_load(&ctx_of(be)->mapped_bytes));
    return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

static int fwd_reset(struct backend *be, int dev, char *why, size_t len)
{
    struct dp_ctx *x = ctx_of(be);
    struct dp_proc *p = proc_of(be, dev);
    mark_down(p, "being replaced after a fault");
    const pid_t old = p->pid;
    end_process(p, true);
    struct dp_hello hello;
    struct dp_proc fresh = {.ordinal = p->ordinal};
    int r = spawn(x, &fresh, x->name, &hello, why, len);
    if (r < 0)
        return r;
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
        r = map_in(p, dev, h, &pinned);
        h->pinned = h->pinned && pinned;
    }
    pthread_mutex_unlock(&x->maps_lock);
    if (r < 0) {
        mark_down(p, "could not map the arenas again");
        snprintf(why, len, "the new device process could not map the arenas (%s)",
                 gllm_strerror(r));
        return r;
    }
    log_info("device %d: process %ld replaced by %ld", dev, (long)old, (long)p->pid);
    return 0;
}

/* ---- open and close ---- */

static void dp_close(struct backend *be)
{
    if (!be)
        return;
    struct dp_ctx *x = ctx_of(be);
    for (int i = 0; i < x->nproc; i++) {
        end_process(&x->proc[i], false);   /* the channels closed: it exits by itself */
    }
    for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
        pthread_mutex_destroy(&x->proc[i].ctl_lock);
        pthread_mutex_destroy(&x->proc[i].why_lock);
    }
    while (x->maps) {
        struct dp_hostmap *h = x->maps;
        x->maps = h->next;
        close(h->fd);
        free(h);
    }
    pthread_mutex_destroy(&x->maps_lock);
    free(x);
}

/* The entries the device processes' backend has, forwarded; reset always. The backend
 * vtable has no probe or open: it is opened by devproc_open, never from the registry. */
static void fill_iface(struct dp_ctx *x)
{
    const uint32_t h = x->has;
    x->iface = (struct backend_iface){.api_version = BACKEND_API_VERSION, .name = x->name,
                                      .close = dp_close};
    x->dev = (struct backend_device_iface){
        .info = fwd_info,
        .memory = h & DP_HAS_MEMORY ? fwd_memory : NULL,
        .host_map = fwd_host_map,
        .host_unmap = fwd_host_unmap,
        .host_register = h & DP_HAS_REGISTER ? fwd_host_register : NULL,
        .host_unregister = h & DP_HAS_REGISTER ? fwd_host_unregister : NULL,
        .alloc = h & DP_HAS_ALLOC ? fwd_alloc : NULL,
        .free = fwd_free,
        .copy = fwd_copy,
        .attention = fwd_attention,
        .paged = h & DP_HAS_PAGED ? fwd_paged : NULL,
        .share_alloc = h & DP_HAS_SHARE ? fwd_share_alloc : NULL,
        .share_import = h & DP_HAS_SHARE ? fwd_share_import : NULL,
        .share_free = h & DP_HAS_SHARE ? fwd_share_free : NULL,
        .reset = fwd_reset,
        .reset_allowance_ms = fwd_reset_allowance_ms,
        .lost = fwd_lost,
        .inject_fault = h & DP_HAS_FAULT ? fwd_inject_fault : NULL,
        .queue_open = h & DP_HAS_QUEUES ? fwd_queue_open : NULL,
        .queue_poll = h & DP_HAS_QUEUES ? fwd_queue_poll : NULL,
        .queue_close = h & DP_HAS_QUEUES ? fwd_queue_close : NULL,
    };
    x->be.iface = &x->iface;
    x->be.device = &x->dev;
}

int devproc_open(const char *name, const struct backend_config *cfg, int log_level,
                 struct backend **out, char *why, size_t len)
{
    struct dp_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->be.ctx = x;
    x->threads = cfg->threads;
    x->deterministic = cfg->deterministic;
    x->log_level = log_level;
    pthread_mutex_init(&x->maps_lock, NULL);
    for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
        pthread_mutex_init(&x->proc[i].ctl_lock, NULL);
        pthread_mutex_init(&x->proc[i].why_lock, NULL);
        x->proc[i].ctl.sock = x->proc[i].work.sock = -1;
    }
    struct dp_hello hello;
    struct dp_proc *first = &x->proc[0];
    int r = spawn(x, first, name, &hello, why, len);
    if (r < 0) {
        for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
            pthread_mutex_destroy(&x->proc[i].ctl_lock);
            pthread_mutex_destroy(&x->proc[i].why_lock);
        }
        pthread_mutex_destroy(&x->maps_lock);
        free(x);
        return r;
    }
    snprintf(x->name, sizeof x->name, "%s", hello.backend);
    x->has = hello.has;
    x->be.caps = hello.caps;
    first->info = hello.info;
    x->nproc = 1;
    const int present = hello.present < GLLM_MAX_DEVICES ? hello.present : GLLM_MAX_DEVICES;
    for (int ord = 1; ord < present; ord++) {
        struct dp_proc *p = &x->proc[x->nproc];
        p->ordinal = ord;
        char reason[200];
        if (spawn(x, p, x->name, &hello, reason, sizeof reason) < 0) {
            log_warn("%s: passing over device %d: %s", x->name, ord, reason);
            continue;
        }
        p->info = hello.info;
        p->info.index = x->nproc++;
    }
    x->be.ndevices = x->nproc;
    x->be.present = hello.present;
    fill_iface(x);
    *out = &x->be;
    return 0;
}
