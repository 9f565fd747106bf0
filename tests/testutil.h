/* Test helpers: a real gllmd to talk to, raw protocol access, and (ref64.h) the reference. */
#ifndef GLLM_TESTUTIL_H
#define GLLM_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gllm/gllm.h"
#include "ref64.h"

/* Sends one packet on a SOCK_SEQPACKET socket, with fd attached as SCM_RIGHTS when
 * fd >= 0; returns what sendmsg returns. */
ssize_t send_packet_fd(int sock, const void *p, size_t n, int fd, int flags);
/* A memfd of size bytes with seals added (0: none); -errno on failure. */
int make_memfd(size_t size, unsigned seals);

/* The backend the daemon under test runs: $GLLM_TEST_BACKEND, default "cpu". */
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
/* SIGTERM, wait; returns the exit status (or -1). */
int daemon_stop(struct daemon *d);
/* One gllmd shared by a group of tests: CMocka group setup and teardown for it. */
extern struct daemon group_daemon;
int group_daemon_start(void **state);
int group_daemon_stop(void **state);

#endif
