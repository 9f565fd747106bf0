/* The daemon-wide state every layer reads: backend, devices, limits, counters, channels. */
#ifndef GLLMD_SERVER_H
#define GLLMD_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "conn.h"
#include "job.h"
#include "metrics.h"
#include "server_limits.h"
#include "session.h"

struct channel;
struct sched;

struct server_stats {
    uint32_t clients;
    uint64_t connections;     /* accepted since start */
    uint64_t jobs_done, jobs_failed;
    _Atomic uint64_t jobs_inflight;  /* queued or running: down as a worker finishes one */
    uint64_t requests, errors;
    uint64_t limit_violations;    /* replies TOOBIG, LIMIT, QUOTA or BUSY */
    uint64_t ring_requests;       /* requests taken from shared-memory rings */
    struct region_totals regions;
    struct metrics jobs;          /* by method and result, with time histograms */
};

struct server {
    uv_loop_t *loop;
    struct backend *be;
    int ndevices;
    struct sched *sched;
    struct job_caps caps;
    struct limits limits;
    struct access_policy policy;
    struct access_policy admin;   /* who may drain, reload, list and disconnect clients */
    struct server_stats stats;
    uint64_t start_ns;
    bool draining;
    uint32_t controls_inflight;   /* pool calls (pool_call.h) and teardowns on the thread pool */
    struct arena_reaper arena_reaper;   /* methods_reap_arena: registered arenas, device tensors */
    atomic_bool abort_jobs;       /* past the drain deadline: queued jobs are not run */
    uint64_t drain_unread_ns;     /* then: clients not reading their replies are closed */
    struct conn_set conns;        /* the transport's: every connection, the receive buffers */
    struct channel *channels;     /* every client's RPC channel (channel.h) */
    /* Busy polling: while jobs run and for a moment after, the loop polls its sockets
     * without sleeping, so the next request is read at once instead of after its core
     * wakes from idle. */
    uv_idle_t busy_idle;
    bool busy_poll;
    uint64_t busy_until;
    /* The lifetime's (lifecycle.c): listening, signals, drain, systemd notifications. */
    unsigned drain_timeout_s, status_interval_s;
    char socket_path[108];
    int listen_fd;
    bool activated;               /* listen_fd came from systemd: not ours to unlink */
    uv_poll_t listen_poll;
    bool listening;
    uv_signal_t sig_int, sig_term, sig_hup;
    uv_timer_t drain_timer, deadline_timer, status_timer, watchdog_timer;
    /* SIGHUP: re-reads the configuration; returns 0, or logs why not and says it in why. */
    int (*reload)(struct server *srv, void *arg, char *why, size_t len);
    void *reload_arg;
    uint64_t status_jobs_last, status_ns_last;
};

/* Busy polling. mode: 1 on, 0 off, -1 auto (on for GPU backends, whose loop has a core to
 * spare while the GPU works; off on the CPU backend, whose compute threads need every core). */
void server_busy_poll_init(struct server *srv, int mode);
void server_set_busy_poll(struct server *srv, int mode);
/* A request came in or a job ended (loop thread): keep polling a while if enabled. */
void server_busy_poll(struct server *srv);
bool server_busy_polling(const struct server *srv);   /* the loop polls: rings need no wake */
void server_busy_poll_close(struct server *srv);
/* Room for one more job in all (the per-session limit is the session's). */
bool server_may_submit(const struct server *srv);

#endif
