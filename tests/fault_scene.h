/* Helpers of the fault tests (fault_scene.c): a daemon with debug_fault, client A (raw, so
 * its connection can arm a fault) and client B (the library, with device tensors). Each
 * fails the running CMocka test when it cannot do its part. */
#ifndef GLLM_FAULT_SCENE_H
#define GLLM_FAULT_SCENE_H

#include "testutil.h"

/* gllmd's exit status for a device this process cannot bring back (docs/PROTOCOL.md). */
#define EXIT_DEVICE_LOST 3

/* B's jobs: [1, 2, 64, 64] queries over 256 keys, f32, causal. */
extern const struct job_spec SPEC;

/* gllmd-fault ($GLLMD_FAULT_PATH, else the build's) with conf_lines as its gllmd.conf. */
int start_fault_daemon(struct daemon *d, const char *conf_lines);
/* Waits at most timeout_ms for d's gllmd to exit on its own: its exit status (128 + the
 * signal when killed by one), or -ETIMEDOUT with the process left running. */
int wait_daemon_exit(struct daemon *d, int timeout_ms);
/* Starts gllmd-fault again on d's socket path, as the service manager's restart would, and
 * waits (at most 10 s) until the socket accepts: 0, or -ECHILD when it exited instead. */
int restart_fault_daemon(struct daemon *d, const char *conf_lines);
int daemon_fds(const struct daemon *d);
/* The daemon's fds once connections the helpers made have closed on its side. */
int settled_fds(const struct daemon *d);
/* Device 0's bytes in use, as status reports them. */
uint64_t device_used(const char *sock);
/* Device 0's resets from status, its last reason into reason (NULL: not wanted) and, when
 * reset_ns is not NULL, how long that reset took. */
uint64_t device_resets(const char *sock, char *reason, size_t len, uint64_t *reset_ns);
/* The same for device dev. */
uint64_t device_resets_on(const char *sock, int dev, char *reason, size_t len,
                          uint64_t *reset_ns);

/* Client A: a raw connection (debug_fault arms the connection's next job) with one arena. */
struct raw_client {
    int fd, memfd;
    uint32_t arena;
    uint64_t next_id;
};

void raw_client_open(struct raw_client *a, const char *sock);
void raw_client_close(struct raw_client *a);
/* debug_fault {kind, device 0}: the reply's code. */
int raw_debug_fault(struct raw_client *a, const char *kind);
/* One attention job over A's arena: the reply's code, its message in msg (NULL: not wanted). */
int raw_attention(struct raw_client *a, char *msg, size_t len);

/* Client B's attention with K and V in device tensors made from its arena. */
struct dev_job {
    struct live_job j;
    gllm_memory *kd, *vd;
    uint64_t k_off, v_off;      /* K and V in the arena */
    int device;                 /* of kd and vd */
};

void dev_job_setup(gllm_client *c, struct dev_job *d, uint64_t seed);
/* The same with the device tensors on device. */
void dev_job_setup_on(gllm_client *c, struct dev_job *d, uint64_t seed, int device);
/* (Re)makes the device tensors and copies K and V in: 0 or the first error. */
int dev_job_upload(gllm_client *c, struct dev_job *d);
/* Runs it: 0 (output checked against the reference) or the error. */
int dev_job_run(gllm_client *c, struct dev_job *d);
void dev_job_free(struct dev_job *d);

#endif
