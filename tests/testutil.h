/* Test helpers: a float64 reference attention, random data, and a real gllmd to talk to. */
#ifndef GLLM_TESTUTIL_H
#define GLLM_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gllm/gllm.h"

/* A strided 4-d (or 3-d for lse) view for the reference. */
struct ref_view {
    const void *data;
    gllm_dtype dtype;
    int64_t st[4];
};

/* Naive attention in double: out[b][h][i][d] (contiguous doubles), lse[b][h][i]. */
void ref_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                   struct ref_view q, struct ref_view k, struct ref_view v, bool causal,
                   double scale, double *out, double *lse);

double elem_get(const void *base, gllm_dtype dt, int64_t idx);
void elem_set(void *base, gllm_dtype dt, int64_t idx, double x);
/* Uniform in [-1, 1), deterministic per seed. */
void fill_random(void *base, gllm_dtype dt, size_t n, uint64_t *seed);
uint64_t rng_next(uint64_t *s);

/* max |a - b| / max |b| over n elements: the figure the tolerances use. */
double rel_error_max(const double *got, const double *want, size_t n);

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
