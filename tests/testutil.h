/* Test helpers: a real gllmd to talk to, raw protocol access, and (ref64.h) the reference. */
#ifndef GLLM_TESTUTIL_H
#define GLLM_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gllm/gllm.h"
#include "proto.h"
#include "ref64.h"

/* Sends one packet on a SOCK_SEQPACKET socket, with fd attached as SCM_RIGHTS when
 * fd >= 0; returns what sendmsg returns. */
ssize_t send_packet_fd(int sock, const void *p, size_t n, int fd, int flags);
/* A memfd of size bytes with seals added (0: none); -errno on failure. */
int make_memfd(size_t size, unsigned seals);

/* The backend the daemon under test runs: $GLLM_TEST_BACKEND, default "cpu". */
/* $GLLM_TEST_SLOW_DEVICE set (the Vulkan ctest entries, on lavapipe): the device runs
 * attention tens of times slower than the CPU backend, so a test whose jobs would take it
 * past the watchdog calls this first: it says so and skips. */
void skip_on_slow_device(const char *why);
const char *test_backend(void);

/* Starts gllmd (path from GLLMD_PATH) on a fresh socket under a temp dir and
 * waits until it answers. extra: further argv entries, NULL-terminated. */
struct daemon {
    pid_t pid;
    char dir[64];
    char socket[108];
};
int daemon_start(struct daemon *d, const char *const *extra);
/* The same with "NAME=VALUE" entries added to gllmd's environment (NULL-terminated). */
int daemon_start_env(struct daemon *d, const char *const *extra, const char *const *env);
/* The same with a configuration file of text (gllmd.conf lines), written to a temporary
 * file that is gone once gllmd has read it at start. */
int daemon_start_conf(struct daemon *d, const char *text);
/* SIGTERM, wait; returns the exit status (or -1). */
int daemon_stop(struct daemon *d);
/* Whether a daemon's socket accepts a connection (hello may still be refused by policy). */
bool daemon_socket_answers(const char *path);
/* The daemon's resident memory in KiB, from /proc (the test fails if it cannot be read). */
long daemon_rss_kib(const struct daemon *d);
/* The pid of one of gllmd's children (a device process), or -1. */
long daemon_child_pid(const struct daemon *d);
/* One gllmd shared by a group of tests: CMocka group setup and teardown for it. */
extern struct daemon group_daemon;
int group_daemon_start(void **state);
int group_daemon_stop(void **state);

void sleep_ms(int ms);

/* ---- through the library; each fails the running CMocka test when it cannot ---- */
/* One status call on a fresh connection. */
gllm_status status_of(const char *sock);
/* Polls status until no more than `clients` other clients are connected and no arena,
 * device tensor or job is left; fails the test after 30 s. */
gllm_status wait_quiet(const char *sock, uint32_t clients);
/* gllm_connect, again every 10 ms while it returns while_code (a reload or a start not in
 * yet); fails the test on any other error or after timeout_ms. */
gllm_client *connect_until(const char *sock, int while_code, int timeout_ms);

/* ---- raw protocol access, for what the library would never send ---- */
int raw_connect(const char *path);
/* One packet, with pass_fd attached when >= 0. */
void raw_send(int fd, const void *p, size_t n, int pass_fd);
/* Reads one reply: its error code (0 for a result), its id (-1: nil) and, for a result,
 * its "arena" when arena_out is not NULL. */
int raw_reply(int fd, int64_t *id, uint64_t *arena_out);
/* hello (id 1) at this build's protocol version; must succeed. */
void raw_hello(int fd);
/* arena_register of memfd (size bytes) as request id; must succeed: the arena's id. */
uint32_t raw_register(int fd, int memfd, size_t size, uint64_t id);
/* The same request, sent only: its reply is the caller's to read. */
void raw_register_send(int fd, int memfd, size_t size, uint64_t id);
/* q, k, v, out of [1, 2, S, 64] f32 back to back from offset 0 of arena, as a request. */
struct proto_attention raw_job(uint32_t arena, int64_t S);

/* ---- a dense job with its reference, through the public API ---- */
struct job_spec {
    int64_t B, Hq, Hkv, Sq, Skv, D;
    gllm_dtype dtype;
    bool causal;
};

struct live_job {
    struct job_spec s;
    gllm_memory *arena;
    gllm_attention_params p;
    uint64_t id;
};

/* A job of spec s in an arena of its own: q, k, v random (seeded), out poisoned; 0 or the
 * error of creating the arena. */
int job_setup(gllm_client *c, struct live_job *j, const struct job_spec *s, uint64_t seed);
/* NaN over the output, so an element the daemon skipped cannot pass. */
void job_poison(struct live_job *j);
/* Sets up and submits n jobs of spec s, seeded seed0, seed0 + 1, ... */
void submit_jobs(gllm_client *c, struct live_job *j, int n, const struct job_spec *s,
                 uint64_t seed0);
/* True when the output matches ref64 within the dtype's tolerance. */
bool job_output_ok(const struct live_job *j);

#endif
