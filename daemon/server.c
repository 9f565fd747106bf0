/* Server: binds the socket, accepts sessions, answers finished jobs, drains on SIGINT/SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "session.h"

#define DRAIN_POLL_MS 5

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

void server_job_done(struct job *job, void *arg)
{
    struct server *srv = arg;
    struct session *s = job->session;
    s->inflight--;
    srv->stats.jobs_inflight--;
    if (job->status == 0)
        srv->stats.jobs_done++;
    else
        srv->stats.jobs_failed++;
    if (!s->closed) {
        if (job->status < 0) {
            session_reply_error(s, (int64_t)job->req_id, job->status, "attention: %s",
                                gllm_strerror(job->status));
        } else {
            struct proto_buf *b = &srv->tx;
            proto_buf_init(b);
            proto_pack_result(&b->pk, job->req_id);
            uint64_t job_ns = job->t_end - job->t_start;
            msgpack_pack_map(&b->pk, 5);
            proto_pack_kv_u64(&b->pk, "kernel_ns", job->timing.kernel_ns ? job->timing.kernel_ns : job_ns);
            proto_pack_kv_u64(&b->pk, "queue_ns", job->t_start - job->t_submit);
            proto_pack_kv_u64(&b->pk, "job_ns", job_ns);
            proto_pack_kv_u64(&b->pk, "copy_ns", job->timing.copy_ns);
            proto_pack_kv_u64(&b->pk, "copy_bytes", job->timing.copy_bytes);
            session_send(s, b->data, b->len);
        }
    }
    job_release_arenas(job);
    session_unref(s);
    free(job);
}

static void stop_listening(struct server *srv)
{
    if (!srv->listening)
        return;
    srv->listening = false;
    uv_close((uv_handle_t *)&srv->listen_poll, NULL);
    close(srv->listen_fd);
    unlink(srv->socket_path);
}

/* Every accepted job answered and every reply sent (or its client gone): finish. */
static void drain_check(uv_timer_t *t)
{
    struct server *srv = t->data;
    for (struct session *s = srv->sessions; s; s = s->next)
        if (!session_idle(s))
            return;
    if (srv->stats.jobs_inflight > 0)
        return;   /* jobs of sessions that already closed */
    while (srv->sessions)
        session_close(srv->sessions);
    for (int i = 0; i < srv->ndevices; i++)
        worker_stop(srv->workers[i]);
    uv_timer_stop(t);
    uv_close((uv_handle_t *)&srv->drain_timer, NULL);
    uv_close((uv_handle_t *)&srv->sig_int, NULL);
    uv_close((uv_handle_t *)&srv->sig_term, NULL);
    log_info("drained: %llu jobs done, %llu failed; exiting",
             (unsigned long long)srv->stats.jobs_done, (unsigned long long)srv->stats.jobs_failed);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct server *srv = h->data;
    if (srv->draining)
        return;
    log_info("%s: no new connections or jobs; finishing %llu in flight",
             signum == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)srv->stats.jobs_inflight);
    srv->draining = true;
    stop_listening(srv);
    uv_timer_start(&srv->drain_timer, drain_check, 0, DRAIN_POLL_MS);
}

int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct limits *limits, const char *socket_path)
{
    srv->loop = loop;
    srv->be = be;
    srv->limits = *limits;
    srv->start_ns = now_ns();
    srv->caps.dtypes = be->iface->dtypes(be);
    srv->caps.max_head_dim = be->iface->max_head_dim(be);
    srv->ndevices = be->iface->device_count(be);
    if (srv->ndevices > GLLM_MAX_DEVICES)
        srv->ndevices = GLLM_MAX_DEVICES;
    if (snprintf(srv->socket_path, sizeof srv->socket_path, "%s", socket_path) >=
        (int)sizeof srv->socket_path)
        return -ENAMETOOLONG;

    int fd = bind_socket(socket_path);
    if (fd < 0)
        return fd;
    srv->listen_fd = fd;
    int r;
    for (int i = 0; i < srv->ndevices; i++)
        if ((r = worker_start(loop, be, i, server_job_done, srv, &srv->workers[i])) < 0)
            return r;
    uv_poll_init(loop, &srv->listen_poll, fd);
    srv->listen_poll.data = srv;
    uv_poll_start(&srv->listen_poll, UV_READABLE, on_accept);
    srv->listening = true;
    uv_timer_init(loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    uv_signal_init(loop, &srv->sig_int);
    uv_signal_init(loop, &srv->sig_term);
    srv->sig_int.data = srv->sig_term.data = srv;
    uv_signal_start(&srv->sig_int, on_signal, SIGINT);
    uv_signal_start(&srv->sig_term, on_signal, SIGTERM);
    return 0;
}

int server_run(struct server *srv)
{
    uv_run(srv->loop, UV_RUN_DEFAULT);
    return uv_loop_close(srv->loop) == 0 ? 0 : -EBUSY;
}
