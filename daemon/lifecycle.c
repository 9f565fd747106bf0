/* The daemon's lifetime: binds the socket, accepts clients, notifies systemd, reloads on
 * SIGHUP and drains on SIGINT/SIGTERM. */
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

#include "channel.h"
#include "clock.h"
#include "device_health.h"
#include "lifecycle.h"
#include "log.h"
#include "methods.h"
#include "rpc.h"
#include "scheduler.h"

#define DRAIN_POLL_MS 5
/* Past the drain deadline, a client gets this long to read the replies already made for it;
 * then a connection with nothing in flight and replies still unsent (a client that stopped
 * reading) is closed, so that it cannot hold the stop up for ever. */
#define DRAIN_UNREAD_GRACE_NS 1000000000ull

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
        int r = rpc_accept(srv, fd);
        if (r < 0) {
            log_warn("cannot accept a client: %s", gllm_strerror(r));
            close(fd);
        }
    }
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
    if (srv->drain_unread_ns && now_ns() >= srv->drain_unread_ns) {
        for (struct channel *ch = srv->channels, *next; ch; ch = next) {
            next = ch->next;
            if (ch->session.inflight == 0 && !channel_idle(ch)) {
                log_warn("drain: closing client %llu (pid %ld), which stopped reading its "
                         "replies", (unsigned long long)ch->serial, (long)ch->pid);
                channel_close(ch);
            }
        }
    }
    for (const struct channel *ch = srv->channels; ch; ch = ch->next)
        if (!channel_idle(ch))
            return;
    if (srv->stats.jobs_inflight > 0 || sched_unsettled(srv->sched) > 0 ||
        srv->controls_inflight > 0)
        return;   /* jobs of sessions that already closed, answers not yet sent, or arenas
                   * still being registered */
    while (srv->channels)
        channel_close(srv->channels);
    sched_stop(srv->sched);
    srv->sched = NULL;
    uv_timer_stop(t);
    uv_handle_t *handles[] = {
        (uv_handle_t *)&srv->drain_timer, (uv_handle_t *)&srv->deadline_timer,
        (uv_handle_t *)&srv->status_timer, (uv_handle_t *)&srv->watchdog_timer,
        (uv_handle_t *)&srv->sig_int, (uv_handle_t *)&srv->sig_term, (uv_handle_t *)&srv->sig_hup,
    };
    for (size_t i = 0; i < sizeof handles / sizeof *handles; i++)
        uv_close(handles[i], NULL);
    server_busy_poll_close(srv);
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
    srv->drain_unread_ns = now_ns() + DRAIN_UNREAD_GRACE_NS;
}

void server_drain(struct server *srv, const char *who)
{
    if (srv->draining)
        return;
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    log_info("%s: no new connections or jobs; finishing %llu in flight", who,
             (unsigned long long)srv->stats.jobs_inflight);
    srv->draining = true;
    stop_listening(srv);
    uv_timer_stop(&srv->status_timer);
    uv_timer_start(&srv->drain_timer, drain_check, 0, DRAIN_POLL_MS);
    uv_timer_start(&srv->deadline_timer, drain_deadline, (uint64_t)srv->drain_timeout_s * 1000, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server_drain(h->data, signum == SIGINT ? "SIGINT" : "SIGTERM");
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
    for (int i = 0; i < srv->ndevices && used_len < sizeof mem; i++) {
        uint64_t used, total;
        if (!health_lock(i))      /* being reset: said nothing of until it is back */
            continue;
        int r = backend_memory_info(srv->be, i, &used, &total);
        health_unlock(i);
        if (r == 0)
            used_len += (size_t)snprintf(mem + used_len, sizeof mem - used_len,
                                         ", GPU%d %.1f/%.1f GiB", i, (double)used / (1ull << 30),
                                         (double)total / (1ull << 30));
    }
    sd_notifyf(0, "STATUS=%u clients, %.1f jobs/s, %llu in flight, %llu done, %llu failed, "
               "%.1f MiB mapped%s", srv->stats.clients, rate,
               (unsigned long long)srv->stats.jobs_inflight, (unsigned long long)srv->stats.jobs_done,
               (unsigned long long)srv->stats.jobs_failed,
               (double)srv->stats.regions.bytes_mapped / (1 << 20), mem);
}

/* From the loop itself: a loop that stops turning stops the pings, and systemd restarts us. */
static void notify_watchdog(uv_timer_t *t)
{
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

int server_reload(struct server *srv, const char *who, char *why, size_t len)
{
    if (srv->draining || !srv->reload) {
        snprintf(why, len, "%s", srv->draining ? "gllmd is draining" : "nothing to reload");
        return GLLM_ESHUTDOWN;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
               (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    int r = srv->reload(srv, srv->reload_arg, why, len);
    sd_notify(0, "READY=1");
    notify_status(&srv->status_timer);
    log_info("%s: configuration %s", who, r == 0 ? "reloaded" : "kept (reload failed)");
    return r;
}

static void on_hup(uv_signal_t *h, int signum)
{
    (void)signum;
    char why[256];
    server_reload(h->data, "SIGHUP", why, sizeof why);
}

void server_apply_config(struct server *srv, const struct config *cfg)
{
    srv->limits = cfg->limits;
    srv->caps.max_elements = cfg->limits.max_elements;
    srv->caps.max_page_entries = cfg->limits.max_page_entries;
    srv->policy = cfg->policy;
    srv->admin = cfg->admin;
    srv->drain_timeout_s = cfg->drain_timeout_s;
    if (srv->status_interval_s != cfg->status_interval_s && uv_is_active((uv_handle_t *)&srv->status_timer)) {
        uint64_t ms = (uint64_t)cfg->status_interval_s * 1000;
        uv_timer_start(&srv->status_timer, notify_status, ms, ms);
    }
    srv->status_interval_s = cfg->status_interval_s;
    srv->conns.max_outq_bytes = cfg->limits.max_outq_bytes;
    server_set_busy_poll(srv, cfg->busy_poll);
    if (srv->sched)
        sched_set_faults(srv->sched, cfg->watchdog_ms, cfg->watchdog_gflops,
                         cfg->exit_on_reset_failure);
    log_init(cfg->log_level);
}

int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct config *cfg, const char *socket_path, int listen_fd)
{
    srv->loop = loop;
    srv->conns.loop = loop;
    srv->conns.max_outq_bytes = cfg->limits.max_outq_bytes;
    srv->be = be;
    srv->arena_reaper = (struct arena_reaper){.reap = methods_reap_arena, .ctx = srv};
    srv->limits = cfg->limits;
    srv->policy = cfg->policy;
    srv->drain_timeout_s = cfg->drain_timeout_s;
    srv->status_interval_s = cfg->status_interval_s;
    atomic_init(&srv->abort_jobs, false);
    srv->start_ns = srv->status_ns_last = now_ns();
    srv->caps.dtypes = backend_caps(be)->dtypes;
    srv->caps.max_head_dim = backend_caps(be)->max_head_dim;
    srv->caps.backend = backend_name(be);
    backend_mode_caps(be, srv->caps.modes, srv->caps.mode_dtypes);
    srv->caps.reads_arena_tables = backend_has(be, BACKEND_FEAT_ARENA_TABLES);
    srv->caps.max_elements = cfg->limits.max_elements;
    srv->caps.max_page_entries = cfg->limits.max_page_entries;
    srv->ndevices = backend_device_count(be);
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
    server_busy_poll_init(srv, cfg->busy_poll);
    sched_set_faults(srv->sched, cfg->watchdog_ms, cfg->watchdog_gflops,
                         cfg->exit_on_reset_failure);
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
