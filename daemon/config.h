/* gllmd's configuration: defaults, then /etc/gllm/gllmd.conf (key = value), then flags. */
#ifndef GLLMD_CONFIG_H
#define GLLMD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "server_limits.h"

#define CONFIG_DEFAULT_PATH "/etc/gllm/gllmd.conf"
#define CONFIG_MAX_IDS 32

/* Who may use the daemon once connected (the socket's mode decides who may connect).
 * Both lists empty: everyone who can connect. Otherwise a peer is let in when its uid
 * is listed or its primary or a supplementary group is. */
struct access_policy {
    uid_t uids[CONFIG_MAX_IDS];
    int nuids;
    gid_t gids[CONFIG_MAX_IDS];
    int ngids;
};

struct config {
    char socket_path[108];        /* "" = the default for this user */
    char backend[16];
    int threads;
    struct limits limits;
    int log_level;                /* syslog priority: 3 err .. 7 debug */
    struct access_policy policy;
    struct access_policy admin;   /* admin_users, admin_groups: the control methods' */
    unsigned drain_timeout_s;     /* SIGTERM: then queued jobs are cancelled */
    unsigned status_interval_s;   /* sd_notify STATUS= refresh */
    int busy_poll;                /* 1 on, 0 off, -1 auto (on for GPU backends) */
    bool deterministic;           /* GPU kernels merge split parts in a fixed order */
    /* The watchdog: a job still running watchdog_ms plus its work at watchdog_gflops after
     * it started is failed (GLLM_EJOBTIMEOUT) and its device reset; watchdog_ms 0: off. */
    uint64_t watchdog_ms;
    uint64_t watchdog_gflops;
    /* A device this process cannot bring back (CUDA after any fault, a failed reset): exit
     * (status 3, for Restart=on-failure) or keep serving the other devices while its jobs
     * fail. */
    bool exit_on_reset_failure;
    /* Each device's backend in a process of its own (daemon/devproc.c), so a fault that
     * poisons a device's context ends that process alone and gllmd starts another while every
     * connection stays up; off: in gllmd's process (a fault on CUDA then ends gllmd). */
    bool device_processes;
};

/* Which fields the command line set, so a reload keeps them over the file's. */
struct config_overrides {
    bool socket_path, backend, threads, max_inflight, log_level;
    struct config values;
};

void config_defaults(struct config *cfg);
/* The name log_level takes for a syslog level ("info"), as --check-config prints it. */
const char *config_level_name(int level);
/* Reads path into cfg (over what cfg holds). A missing file is an error only when
 * required. On error, err holds "PATH:LINE: what is wrong". */
int config_load(struct config *cfg, const char *path, bool required, char *err, size_t errlen);
void config_apply_overrides(struct config *cfg, const struct config_overrides *o);
/* True when the policy lets a peer with these credentials in. */
/* Whether a peer may use the administrators' methods (drain, reload, clients,
 * client_disconnect): root, gllmd's own user, or a user or group of p. */
bool config_is_admin(const struct access_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                     int ngroups);
bool config_policy_allows(const struct access_policy *p, uid_t uid, gid_t gid, const gid_t *groups,
                          int ngroups);

#endif
