/* The daemon's lifetime: listening, accepting, systemd notifications, reload and drain. */
#ifndef GLLMD_LIFECYCLE_H
#define GLLMD_LIFECYCLE_H

#include <uv.h>

#include "backend.h"
#include "config.h"
#include "server.h"

/* Listens on listen_fd (socket activation) or, when it is -1, binds socket_path
 * (creating its directory); then starts the scheduler's device workers. */
int server_init(struct server *srv, uv_loop_t *loop, struct backend *be,
                const struct config *cfg, const char *socket_path, int listen_fd);
/* Applies what a reload may change: limits, policy, timeouts, busy polling. */
void server_apply_config(struct server *srv, const struct config *cfg);
/* What SIGTERM does, for who (named in the log): stop accepting, refuse new jobs, answer
 * the accepted ones (cancelling those still queued at drain_timeout_s), then exit. */
void server_drain(struct server *srv, const char *who);
/* What SIGHUP does: re-reads the configuration. 0, or a code and why, the running
 * configuration kept. */
int server_reload(struct server *srv, const char *who, char *why, size_t len);
/* Serves until SIGINT/SIGTERM, then drains: stops accepting, answers every
 * accepted request, closes everything. Returns 0 after a clean drain. */
int server_run(struct server *srv);

#endif
