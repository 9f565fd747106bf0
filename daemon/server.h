/* The server: listening socket, sessions, device workers, statistics and shutdown. */
#ifndef GLLMD_SERVER_H
#define GLLMD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "job.h"
#include "server_limits.h"
#include "proto.h"

struct session;
struct worker;

struct server_stats {
    uint32_t clients;
    uint64_t connections;     /* accepted since start */
    uint64_t jobs_done, jobs_failed, jobs_inflight;
    uint64_t requests, errors;
    uint64_t bytes_mapped;
    uint32_t arenas;
};

struct server {
    uv_loop_t *loop;
    struct backend *be;
    int ndevices;
    struct worker *workers[GLLM_MAX_DEVICES];
    struct job_caps caps;
    struct limits limits;
    char socket_path[108];
    int listen_fd;
    uv_poll_t listen_poll;
    bool listening;
    uv_signal_t sig_int, sig_term;
    uv_timer_t drain_timer;
    bool draining;
    struct session *sessions;
    struct server_stats stats;
    uint64_t start_ns;
    /* Loop-thread scratch: one packet in, one packet out at a time. */
    char rx[PROTO_MAX_MESSAGE];
    struct proto_buf tx;
};

/* Binds the socket (creating its directory) and starts the device workers. */
int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct limits *limits, const char *socket_path);
/* Serves until SIGINT/SIGTERM, then drains: stops accepting, answers every
 * accepted request, closes everything. Returns 0 after a clean drain. */
int server_run(struct server *srv);
/* Called by the worker completion path on the loop thread. */
void server_job_done(struct job *job, void *srv);

#endif
