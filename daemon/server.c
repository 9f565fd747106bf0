/* Server: binds the socket, accepts sessions, answers finished jobs, drains on SIGINT/SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "session_ring.h"
#include "server.h"
#include "session.h"

#define DRAIN_POLL_MS 5
/* Busy polling goes on this long after the last request or job end with none running: a
 * client stepping a decode loop sends its next job within microseconds of a reply. */
#define BUSY_POLL_LINGER_NS 200000

/* mkdir -p for the socket's parent directory. */
static int make_parent_dir(const char *path, mode_t mode)
{
    char dir[sizeof((struct sockaddr_un *)0)->sun_path];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(dir, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* A socket file left by a crashed daemon is removed; a live daemon's is not. */
static int clear_stale_socket(const struct sockaddr_un *addr)
{
    struct stat st;
    if (lstat(addr->sun_path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int r = connect(fd, (const struct sockaddr *)addr, sizeof *addr);
    int e = errno;
    close(fd);
    if (r == 0)
        return -EADDRINUSE;
    if (e != ECONNREFUSED)
        return -e;
    return unlink(addr->sun_path) < 0 ? -errno : 0;
}

static int bind_socket(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int r = make_parent_dir(path, 0755);
    if (r < 0)
        return r;
    if ((r = clear_stale_socket(&addr)) < 0)
        return r;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    /* Group may connect, others may not (the socket unit uses the same mode). */
    mode_t old = umask(0117);
    r = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (r < 0 || listen(fd, 128) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static void on_accept(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct server *srv = h->data;
    if (status < 0)
        return;
    for (int n = 0; n < 64; n++) {
        int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        if (srv->stats.clients >= srv->limits.max_connections) {
            log_warn("refusing a connection: %u clients (limit)", srv->stats.clients);
            close(fd);
            continue;
        }
        int r = session_accept(srv, fd);
        if (r < 0) {
            log_warn("cannot accept a client: %s", gllm_strerror(r));
            close(fd);
        }
    }
}

/* A finished job's success reply: its timings. */
static void pack_job_result(struct proto_buf *b, const struct job *job)
{
    proto_buf_init(b);
    proto_pack_result(&b->pk, job->req_id);
    uint64_t job_ns = job->t_end - job->t_start;
    msgpack_pack_map(&b->pk, 6);
    proto_pack_kv_u64(&b->pk, "kernel_ns", job->timing.kernel_ns ? job->timing.kernel_ns : job_ns);
    proto_pack_kv_u64(&b->pk, "accept_ns", job->t_submit - job->t_read);
    proto_pack_kv_u64(&b->pk, "queue_ns", job->t_start - job->t_submit);
    proto_pack_kv_u64(&b->pk, "job_ns", job_ns);
    proto_pack_kv_u64(&b->pk, "copy_ns", job->timing.copy_ns);
    proto_pack_kv_u64(&b->pk, "copy_bytes", job->timing.copy_bytes);
}

/* Worker thread: a job of a gone session, or one queued past the drain deadline, is not run. */
static int job_skip(const struct job *job)
{
    const struct session *s = job->cookie;
    if (atomic_load_explicit(&s->gone, memory_order_acquire))
        return GLLM_EDISCONNECTED;
    if (atomic_load_explicit(&s->srv->abort_jobs, memory_order_acquire))
        return GLLM_ESHUTDOWN;
    return 0;
}

/* Worker thread. The job no longer counts against its session's limits: a client that
 * has its reply may send the next job before the loop settles this one. A success reply
 * goes out from here: into the session's reply ring when it has one (no system call on
 * either side), else through the socket when it takes the packet at once: the hand-off to
 * the loop and its wake-up would add several microseconds to every job. The fd cannot be
 * reused under us: the job's session reference keeps it open until it is settled. Replies
 * may overtake ones the loop has queued; ids tie them together. Errors, a full socket and
 * gone clients are left to the loop, which logs and queues. */
static void job_finished(struct job *job, struct proto_buf *scratch)
{
    struct session *s = job->cookie;
    atomic_fetch_sub_explicit(&s->inflight, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&s->srv->stats.jobs_inflight, 1, memory_order_relaxed);
    if (job->status != 0 || atomic_load_explicit(&s->gone, memory_order_acquire))
        return;
    pack_job_result(scratch, job);
    struct session_ring *ring = atomic_load_explicit(&s->ring, memory_order_acquire);
    if (ring && session_ring_publish(ring, scratch->data, scratch->len)) {
        job->replied = true;
        if (session_ring_client_polling(ring))
            return;
        /* The client may be blocked on the socket or watching it: the reply goes there too. */
    }
    ssize_t n;
    do
        n = send(s->fd, scratch->data, scratch->len, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    job->replied |= n >= 0;
}

/* Loop thread, at the scheduler's settle point. */
static void job_settle(struct job *job)
{
    struct session *s = job->cookie;
    struct server *srv = s->srv;
    if (job->status == 0)
        srv->stats.jobs_done++;
    else
        srv->stats.jobs_failed++;
    if (!s->closed && !job->replied) {
        if (job->status < 0 && job->why[0]) {
            session_reply_error(s, (int64_t)job->req_id, job->status, "%s", job->why);
        } else if (job->status < 0) {
            session_reply_error(s, (int64_t)job->req_id, job->status, "attention: %s",
                                gllm_strerror(job->status));
        } else {
            pack_job_result(&srv->tx, job);
            session_send(s, srv->tx.data, srv->tx.len);
        }
    }
    job_release_arenas(job);
    session_unref(s);
    free(job);
    server_busy_poll(srv);
}

const struct job_ops server_job_ops = {job_skip, job_finished, job_settle};

/* Takes what waits in every session's request ring. A session may close (and leave the
 * list) in its turn, never another: the next one is read first. */
static void take_ring_requests(struct server *srv)
{
    for (struct session *s = srv->sessions, *next; s; s = next) {
        next = s->next;
        if (!s->ring)
            continue;
        session_ref(s);
        session_take_requests(s, s->packets_in, false);
        session_unref(s);
    }
}

static void set_ring_polling(struct server *srv, bool on)
{
    for (struct session *s = srv->sessions; s; s = s->next)
        if (s->ring)
            session_ring_set_polling(s->ring, on);
}

static void busy_poll_tick(uv_idle_t *h)
{
    struct server *srv = h->data;
    take_ring_requests(srv);
    if (srv->stats.jobs_inflight || now_ns() < srv->busy_until)
        return;
    /* Clients see the flag go down, then we look once more: a request put in a ring just
     * before comes with a wake-up packet, or is found here (proto/ring.h). */
    uv_idle_stop(h);
    set_ring_polling(srv, false);
    atomic_thread_fence(memory_order_seq_cst);
    take_ring_requests(srv);
}

void server_busy_poll(struct server *srv)
{
    if (!srv->busy_poll)
        return;
    srv->busy_until = now_ns() + BUSY_POLL_LINGER_NS;
    if (!uv_is_active((uv_handle_t *)&srv->busy_idle)) {
        uv_idle_start(&srv->busy_idle, busy_poll_tick);
        set_ring_polling(srv, true);
    }
}

bool server_busy_polling(const struct server *srv)
{
    return uv_is_active((const uv_handle_t *)&srv->busy_idle);
}

static void stop_listening(struct server *srv)
{
    if (!srv->listening)
        return;
    srv->listening = false;
    uv_close((uv_handle_t *)&srv->listen_poll, NULL);
    close(srv->listen_fd);
    /* A socket systemd made stays with systemd, which keeps listening for the restart. */
    if (!srv->activated)
        unlink(srv->socket_path);
}

/* Every accepted job answered and every reply sent (or its client gone): finish. */
static void drain_check(uv_timer_t *t)
{
    struct server *srv = t->data;
    for (struct session *s = srv->sessions; s; s = s->next)
        if (!session_idle(s))
            return;
    if (srv->stats.jobs_inflight > 0 || sched_unsettled(srv->sched) > 0)
        return;   /* jobs of sessions that already closed, or answers not yet sent */
    while (srv->sessions)
        session_close(srv->sessions);
    sched_stop(srv->sched);
    srv->sched = NULL;
    uv_timer_stop(t);
    uv_handle_t *handles[] = {
        (uv_handle_t *)&srv->drain_timer, (uv_handle_t *)&srv->deadline_timer,
        (uv_handle_t *)&srv->status_timer, (uv_handle_t *)&srv->watchdog_timer,
        (uv_handle_t *)&srv->sig_int, (uv_handle_t *)&srv->sig_term, (uv_handle_t *)&srv->sig_hup,
        (uv_handle_t *)&srv->busy_idle,
    };
    for (size_t i = 0; i < sizeof handles / sizeof *handles; i++)
        uv_close(handles[i], NULL);
    log_info("drained: %llu jobs done, %llu failed; exiting",
             (unsigned long long)srv->stats.jobs_done, (unsigned long long)srv->stats.jobs_failed);
}

/* Past the deadline, jobs still queued are answered with SHUTDOWN instead of run: the
 * stop must finish before systemd's TimeoutStopSec kills us and drops every reply. */
static void drain_deadline(uv_timer_t *t)
{
    struct server *srv = t->data;
    log_warn("drain deadline (%u s) passed: cancelling %llu queued jobs", srv->drain_timeout_s,
             (unsigned long long)srv->stats.jobs_inflight);
    atomic_store(&srv->abort_jobs, true);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct server *srv = h->data;
    if (srv->draining)
        return;
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    log_info("%s: no new connections or jobs; finishing %llu in flight",
             signum == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)srv->stats.jobs_inflight);
    srv->draining = true;
    stop_listening(srv);
    uv_timer_stop(&srv->status_timer);
    uv_timer_start(&srv->drain_timer, drain_check, 0, DRAIN_POLL_MS);
    uv_timer_start(&srv->deadline_timer, drain_deadline, (uint64_t)srv->drain_timeout_s * 1000, 0);
}

static void notify_status(uv_timer_t *t)
{
    struct server *srv = t->data;
    uint64_t now = now_ns();
    double dt = (double)(now - srv->status_ns_last) / 1e9;
    double rate = dt > 0 ? (double)(srv->stats.jobs_done - srv->status_jobs_last) / dt : 0;
    srv->status_ns_last = now;
    srv->status_jobs_last = srv->stats.jobs_done;
    char mem[160] = "";
    size_t used_len = 0;
    for (int i = 0; srv->be->iface->memory_info && i < srv->ndevices && used_len < sizeof mem; i++) {
        uint64_t used, total;
        if (srv->be->iface->memory_info(srv->be, i, &used, &total) == 0)
            used_len += (size_t)snprintf(mem + used_len, sizeof mem - used_len,
                                         ", GPU%d %.1f/%.1f GiB", i, (double)used / (1ull << 30),
                                         (double)total / (1ull << 30));
    }
    sd_notifyf(0, "STATUS=%u clients, %.1f jobs/s, %llu in flight, %llu done, %llu failed, "
               "%.1f MiB mapped%s", srv->stats.clients, rate,
               (unsigned long long)srv->stats.jobs_inflight, (unsigned long long)srv->stats.jobs_done,
               (unsigned long long)srv->stats.jobs_failed,
               (double)srv->stats.bytes_mapped / (1 << 20), mem);
}

/* From the loop itself: a loop that stops turning stops the pings, and systemd restarts us. */
static void notify_watchdog(uv_timer_t *t)
{
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    struct server *srv = h->data;
    if (srv->draining || !srv->reload)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
               (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    int r = srv->reload(srv, srv->reload_arg);
    sd_notify(0, "READY=1");
    notify_status(&srv->status_timer);
    log_info("SIGHUP: configuration %s", r == 0 ? "reloaded" : "kept (reload failed)");
}

/* auto: on for GPU backends, whose loop has a core to spare while the GPU works; off on
 * the CPU backend, whose compute threads need every core. */
static void set_busy_poll(struct server *srv, int mode)
{
    srv->busy_poll = mode < 0 ? strcmp(srv->be->iface->name, "cpu") != 0 : mode > 0;
    if (!srv->busy_poll && uv_is_active((uv_handle_t *)&srv->busy_idle))
        uv_idle_stop(&srv->busy_idle);
}

void server_apply_config(struct server *srv, const struct config *cfg)
{
    srv->limits = cfg->limits;
    srv->caps.max_elements = cfg->limits.max_elements;
    srv->caps.max_page_entries = cfg->limits.max_page_entries;
    srv->policy = cfg->policy;
    srv->drain_timeout_s = cfg->drain_timeout_s;
    if (srv->status_interval_s != cfg->status_interval_s && uv_is_active((uv_handle_t *)&srv->status_timer)) {
        uint64_t ms = (uint64_t)cfg->status_interval_s * 1000;
        uv_timer_start(&srv->status_timer, notify_status, ms, ms);
    }
    srv->status_interval_s = cfg->status_interval_s;
    set_busy_poll(srv, cfg->busy_poll);
    log_init(cfg->log_level);
}

int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct config *cfg, const char *socket_path, int listen_fd)
{
    srv->loop = loop;
    srv->be = be;
    srv->limits = cfg->limits;
    srv->policy = cfg->policy;
    srv->drain_timeout_s = cfg->drain_timeout_s;
    srv->status_interval_s = cfg->status_interval_s;
    atomic_init(&srv->abort_jobs, false);
    srv->start_ns = srv->status_ns_last = now_ns();
    srv->caps.dtypes = be->iface->dtypes(be);
    srv->caps.max_head_dim = be->iface->max_head_dim(be);
    srv->caps.reads_arena_tables = be->iface->reads_arena_tables;
    srv->caps.max_elements = cfg->limits.max_elements;
    srv->caps.max_page_entries = cfg->limits.max_page_entries;
    srv->ndevices = be->iface->device_count(be);
    if (srv->ndevices > GLLM_MAX_DEVICES)
        srv->ndevices = GLLM_MAX_DEVICES;
    if (snprintf(srv->socket_path, sizeof srv->socket_path, "%s", socket_path) >=
        (int)sizeof srv->socket_path)
        return -ENAMETOOLONG;

    int fd = listen_fd;
    if (fd >= 0) {
        srv->activated = true;
        /* systemd's socket may be blocking; accept4 must not be. */
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
            fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
            return -errno;
    } else if ((fd = bind_socket(socket_path)) < 0) {
        return fd;
    }
    srv->listen_fd = fd;
    int r = sched_start(loop, be, srv->ndevices, &srv->sched);
    if (r < 0)
        return r;
    uv_idle_init(loop, &srv->busy_idle);
    srv->busy_idle.data = srv;
    set_busy_poll(srv, cfg->busy_poll);
    uv_poll_init(loop, &srv->listen_poll, fd);
    srv->listen_poll.data = srv;
    uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
    srv->listening = true;
    uv_timer_t *timers[] = {&srv->drain_timer, &srv->deadline_timer, &srv->status_timer,
                            &srv->watchdog_timer};
    for (size_t i = 0; i < sizeof timers / sizeof *timers; i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = srv;
    }
    uv_signal_t *sigs[] = {&srv->sig_int, &srv->sig_term, &srv->sig_hup};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        uv_signal_init(loop, sigs[i]);
        sigs[i]->data = srv;
    }
    uv_signal_start(&srv->sig_int, on_signal, SIGINT);
    uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
    uv_signal_start(&srv->sig_hup, on_hup, SIGHUP);
    return 0;
}

/* Tells systemd we are up and starts the status and watchdog pings. */
static void notify_ready(struct server *srv)
{
    sd_notifyf(0, "READY=1\nMAINPID=%lu", (unsigned long)getpid());
    notify_status(&srv->status_timer);
    uint64_t ms = (uint64_t)srv->status_interval_s * 1000;
    uv_timer_start(&srv->status_timer, notify_status, ms, ms);
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        uint64_t every = usec / 2000 ? usec / 2000 : 1;   /* twice per period, in ms */
        uv_timer_start(&srv->watchdog_timer, notify_watchdog, 0, every);
        log_debug("watchdog: pinging every %llu ms", (unsigned long long)every);
    }
}

int server_run(struct server *srv)
{
    notify_ready(srv);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    return uv_loop_close(srv->loop) == 0 ? 0 : -EBUSY;
}
