/* The server: listening socket, sessions, device workers, statistics and shutdown. */
#ifndef GLLMD_SERVER_H
#define GLLMD_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "job.h"
#include "server_limits.h"
#include "proto.h"
#include "ring.h"

struct session;
struct sched;

struct server_stats {
    uint32_t clients;
    uint64_t connections;     /* accepted since start */
    uint64_t jobs_done, jobs_failed;
    _Atomic uint64_t jobs_inflight;  /* queued or running: down as a worker finishes one */
    uint64_t requests, errors;
    uint64_t limit_violations;    /* replies TOOBIG, LIMIT, QUOTA or BUSY */
    uint64_t ring_requests;       /* requests taken from shared-memory rings */
    uint64_t bytes_mapped;
    uint32_t arenas;
    uint64_t device_bytes;        /* in device tensors */
    uint32_t dtensors;
};

struct server {
    uv_loop_t *loop;
    struct backend *be;
    int ndevices;
    struct sched *sched;
    struct job_caps caps;
    struct limits limits;
    struct access_policy policy;
    unsigned drain_timeout_s, status_interval_s;
    char socket_path[108];
    int listen_fd;
    bool activated;               /* listen_fd came from systemd: not ours to unlink */
    uv_poll_t listen_poll;
    bool listening;
    uv_signal_t sig_int, sig_term, sig_hup;
    uv_timer_t drain_timer, deadline_timer, status_timer, watchdog_timer;
    /* Busy polling: while jobs run and for a moment after, the loop polls its sockets
     * without sleeping, so the next request is read at once instead of after its core
     * wakes from idle. */
    uv_idle_t busy_idle;
    bool busy_poll;
    uint64_t busy_until;
    bool draining;
    atomic_bool abort_jobs;       /* past the drain deadline: queued jobs are cancelled */
    /* SIGHUP: re-reads the configuration; returns 0 or logs why not. */
    int (*reload)(struct server *srv, void *arg);
    void *reload_arg;
    uint64_t status_jobs_last, status_ns_last;
    struct session *sessions;
    struct server_stats stats;
    uint64_t start_ns;
    uint64_t packet_ns;           /* when the packet being dispatched was read */
    /* Loop-thread scratch: one packet in, one packet out at a time. */
    char rx[PROTO_MAX_MESSAGE];
    char ring_rx[GLLM_RING_REQUEST_SLOT_BYTES];  /* a ring request, copied out of its slot */
    struct proto_buf tx;
};

/* Listens on listen_fd (socket activation) or, when it is -1, binds socket_path
 * (creating its directory); then starts the device workers. */
int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct config *cfg, const char *socket_path, int listen_fd);
/* Applies what a reload may change: limits, policy, timeouts. */
void server_apply_config(struct server *srv, const struct config *cfg);
/* Serves until SIGINT/SIGTERM, then drains: stops accepting, answers every
 * accepted request, closes everything. Returns 0 after a clean drain. */
int server_run(struct server *srv);
/* What a session's jobs tell it (their cookie is the session). */
extern const struct job_ops server_job_ops;
/* A request came in or a job ended (loop thread): keep polling a while if enabled. */
void server_busy_poll(struct server *srv);
bool server_busy_polling(const struct server *srv);   /* the loop polls: rings need no wake */


#endif
