/* Fault and abuse: clients killed mid-job hundreds of times, hostile fds, floods, odd data. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto.h"
#include "testutil.h"

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The daemon's open fds, from /proc (its resident memory: daemon_rss_kib). */
static int daemon_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)group_daemon.pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A causal f32/f16/bf16 job of [1, 2, S, 64] in an arena of its own. */
static int small_job(gllm_client *c, struct live_job *j, int64_t S, gllm_dtype dt, uint64_t seed)
{
    const struct job_spec s = {.B = 1, .Hq = 2, .Hkv = 2, .Sq = S, .Skv = S, .D = 64,
                               .dtype = dt, .causal = true};
    return job_setup(c, j, &s, seed);
}

/* A child that runs good jobs until told to stop, exiting non-zero on any failure. */
static pid_t bystander(int stop_fd)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    gllm_client *c;
    struct live_job j;
    if (gllm_connect(group_daemon.socket, &c) < 0 || small_job(c, &j, 64, GLLM_DTYPE_F16, 9) < 0)
        _exit(30);
    int ok = 0;
    for (;;) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        if (gllm_attention(c, &j.p, &res) != 0)
            _exit(31);
        ok++;
        char x;
        if (read(stop_fd, &x, 1) == 1 || ok > 1000000)
            break;
    }
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
    _exit(ok > 0 ? 0 : 32);
}

static void test_clients_killed_hundreds_of_times(void **state)
{
    (void)state;
    gllm_status before = wait_quiet(group_daemon.socket, 0);
    sleep_us(50000);                                /* let our status connection close */
    long rss_before = daemon_rss_kib(&group_daemon);
    int fds_before = daemon_fds();
    int stop[2];
    assert_int_equal(pipe2(stop, O_NONBLOCK), 0);
    pid_t good = bystander(stop[0]);

    enum { KILLS = 200 };
    uint64_t rng = 77;
    for (int k = 0; k < KILLS; k++) {
        pid_t kid = fork();
        assert_true(kid >= 0);
        if (kid == 0) {
            /* Dies wherever the kill finds it: connecting, registering, submitting, waiting. */
            gllm_client *c;
            if (gllm_connect(group_daemon.socket, &c) < 0)
                _exit(1);
            struct live_job j[3];
            for (int i = 0; i < 3; i++) {
                if (small_job(c, &j[i], 32 + 32 * i, (gllm_dtype)(i % 3), (uint64_t)k) < 0)
                    _exit(2);
                uint64_t id;
                gllm_attention_submit(c, &j[i].p, &id);
            }
            pause();
            _exit(3);
        }
        sleep_us((long)(rng_next(&rng) % 3000));
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
    }
    assert_int_equal(write(stop[1], "s", 1), 1);
    int st;
    assert_int_equal(waitpid(good, &st, 0), good);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);          /* the bystander never saw a failure */

    gllm_status after = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(after.arenas, 0);
    assert_int_equal(after.bytes_mapped, 0);
    assert_int_equal(after.jobs_inflight, 0);
    assert_int_equal(after.clients, before.clients);
    /* No fd leaked. (Our own status connections close asynchronously: wait, bounded.) */
    for (int i = 0; i < 300 && daemon_fds() != fds_before; i++)
        sleep_us(10000);
    assert_int_equal(daemon_fds(), fds_before);
    long rss_after = daemon_rss_kib(&group_daemon);
    fprintf(stderr, "after %d kills: RSS %ld -> %ld KiB, fds %d -> %d, jobs done %llu\n", KILLS,
            rss_before, rss_after, fds_before, daemon_fds(),
            (unsigned long long)after.jobs_done);
    assert_true(rss_after - rss_before < 64 * 1024); /* nothing per client survives */
    close(stop[0]);
    close(stop[1]);
}

/* A peer that floods requests and never reads: its replies pile up only to a bound, the
 * daemon stops reading it, and everyone else is served. */
static void test_flood_without_reading(void **state)
{
    (void)state;
    long rss_before = daemon_rss_kib(&group_daemon);
    int fd = raw_connect(group_daemon.socket);
    static struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 1, "hello");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "version", 1);
    assert_true(send(fd, b.data, b.len, 0) > 0);
    int sent = 0;
    bool stalled = false;
    for (int i = 0; i < 200000 && !stalled; i++) {
        proto_buf_init(&b);
        proto_pack_request(&b.pk, (uint64_t)i + 2, "status");
        msgpack_pack_map(&b.pk, 0);
        while (send(fd, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
            assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
            /* Two seconds without room: the daemon has stopped reading us. */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 2000) == 0) {
                stalled = true;
                break;
            }
        }
        sent += !stalled;
    }
    assert_true(stalled);                           /* back-pressure reached the sender */
    gllm_status st = status_of(group_daemon.socket);                  /* others are still served */
    assert_true(st.clients >= 2);
    long rss_flood = daemon_rss_kib(&group_daemon);
    fprintf(stderr, "flood: %d requests sent before back-pressure, RSS %ld -> %ld KiB\n", sent,
            rss_before, rss_flood);
    assert_true(rss_flood - rss_before < 64 * 1024);
    close(fd);
    st = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(st.arenas, 0);
}

/* Garbage of every size, and truncated messages cut from a valid one. */
static void test_garbage_and_truncation(void **state)
{
    (void)state;
    int fd = raw_connect(group_daemon.socket);
    uint64_t rng = 5;
    static unsigned char buf[2048];
    int answered = 0;
    for (int i = 0; i < 300; i++) {
        size_t n = 1 + (size_t)(rng_next(&rng) % 1000);
        for (size_t k = 0; k < n; k++)
            buf[k] = (unsigned char)rng_next(&rng);
        assert_true(send(fd, buf, n, MSG_NOSIGNAL) > 0);
        ssize_t r = recv(fd, buf, sizeof buf, 0);   /* every packet is answered */
        assert_true(r > 0);
        answered++;
    }
    static struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 7, "hello");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "version", 1);
    for (size_t cut = 1; cut < b.len; cut++) {     /* every proper prefix */
        assert_true(send(fd, b.data, cut, MSG_NOSIGNAL) > 0);
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        assert_true(r > 0);
        struct proto_msg m;
        assert_int_equal(proto_decode(buf, (size_t)r, &m, NULL), 0);
        assert_true(m.error_code == GLLM_EMALFORMED || m.error_code == GLLM_ENOHELLO);
        proto_msg_free(&m);
        answered++;
    }
    assert_true(send(fd, b.data, b.len, MSG_NOSIGNAL) > 0);   /* and the whole works */
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    struct proto_msg m;
    assert_int_equal(proto_decode(buf, (size_t)r, &m, NULL), 0);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);
    close(fd);
    fprintf(stderr, "garbage: %d bad packets answered\n", answered);
}

/* A sealed arena cannot shrink under the daemon; growing it is harmless. */
/* raw_job as request id, in b. */
static void pack_job(struct proto_buf *b, uint64_t id, uint32_t arena, int64_t S)
{
    struct proto_attention a = raw_job(arena, S);
    proto_buf_init(b);
    proto_pack_request(&b->pk, id, "attention");
    proto_pack_attention(&b->pk, &a);
}

/* A hostile client seals its memfd against shrinking only, registers it, then grows it:
 * gllmd keeps to the size it registered (a job past it is refused, though the file now
 * has those bytes), jobs inside it still run and come out right. */
static void test_arena_resized_after_registration(void **state)
{
    (void)state;
    const size_t size = 1 << 16;
    int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    assert_int_equal(ftruncate(fd, 4096), -1);      /* the seal holds */
    assert_int_equal(errno, EPERM);
    int sock = raw_connect(group_daemon.socket);
    raw_hello(sock);
    uint32_t arena = raw_register(sock, fd, size, 2);
    assert_int_equal(ftruncate(fd, 1 << 20), 0);    /* grown after registration */

    float *mem = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(mem != MAP_FAILED);
    const int64_t S = 8;
    const size_t n = (size_t)(2 * S * 64);
    uint64_t seed = 11;
    fill_random(mem, GLLM_DTYPE_F32, 3 * n, &seed);
    memset(mem + 3 * n, 0xff, n * sizeof *mem);     /* out poisoned */
    static struct proto_buf b;
    int64_t id;
    pack_job(&b, 3, arena, S);
    raw_send(sock, b.data, b.len, -1);
    assert_int_equal(raw_reply(sock, &id, NULL), 0);
    assert_int_equal(id, 3);
    double *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    assert_non_null(want), assert_non_null(got);
    const int64_t st[4] = {2 * S * 64, S * 64, 64, 1};
    struct ref_view q = {mem, GLLM_DTYPE_F32, {st[0], st[1], st[2], st[3]}}, k = q, v = q;
    k.data = mem + n, v.data = mem + 2 * n;
    ref64_attention(1, 2, 2, S, S, 64, q, k, v, false, 1.0 / 8.0, want, NULL);
    for (size_t i = 0; i < n; i++)
        got[i] = mem[3 * n + i];
    assert_true(ref64_rel_error(got, want, n) <= ref64_tolerance(GLLM_DTYPE_F32).out);
    free(want), free(got);

    /* 4 x 32 KiB: inside the grown file, past the registered 64 KiB. */
    pack_job(&b, 4, arena, 64);
    raw_send(sock, b.data, b.len, -1);
    assert_int_equal(raw_reply(sock, &id, NULL), GLLM_EBOUNDS);
    assert_int_equal(id, 4);
    pack_job(&b, 5, arena, S);                      /* and the arena still serves */
    raw_send(sock, b.data, b.len, -1);
    assert_int_equal(raw_reply(sock, &id, NULL), 0);
    munmap(mem, 1 << 20);
    close(sock);
    close(fd);
    wait_quiet(group_daemon.socket, 0);
}

/* Empty tensors run and touch nothing; oversized ones are refused by the element limit;
 * NaN and Inf propagate to the rows they touch and nowhere else. */
static void test_zero_huge_and_nan(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    struct live_job j;
    assert_int_equal(small_job(c, &j, 64, GLLM_DTYPE_F32, 4), 0);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    gllm_attention_params p = j.p;
    p.q.shape[2] = p.out.shape[2] = 0;              /* Sq = 0 */
    assert_int_equal(gllm_attention(c, &p, &res), 0);
    p = j.p;
    p.q.shape[0] = p.k.shape[0] = p.v.shape[0] = p.out.shape[0] = 0;   /* B = 0 */
    assert_int_equal(gllm_attention(c, &p, &res), 0);
    p = j.p;
    int64_t huge[4] = {1 << 20, 1 << 10, 1 << 10, 64};   /* 2^46 elements, strides 0 */
    for (int i = 0; i < 4; i++) {
        p.q.shape[i] = p.k.shape[i] = p.v.shape[i] = p.out.shape[i] = huge[i];
        p.q.strides[i] = p.k.strides[i] = p.v.strides[i] = 0;
    }
    assert_int_equal(gllm_attention(c, &p, &res), GLLM_ELIMIT);

    float *q = gllm_memory_data(j.arena);
    size_t n = 2 * 64 * 64;
    q[5 * 64 + 3] = NAN;                              /* head 0, query row 5 */
    float *v = q + 2 * n;
    v[(64 + 40) * 64] = INFINITY;                     /* head 1, key 40's value */
    assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    const float *out = q + 3 * n;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 64; i++) {
            bool bad = false;
            for (int d = 0; d < 64; d++)
                bad |= !isfinite(out[(h * 64 + i) * 64 + d]);
            /* Row 5 of head 0 has a NaN query; rows of head 1 that see key 40 (causal:
             * i >= 40) mix in an infinite value. Head 0's other rows stay finite. Head 1's
             * earlier rows are left open: a masked probability is 0 and 0 * inf is NaN
             * wherever a tile holds both (PyTorch's matmul-based SDPA does the same). */
            if (h == 1 && i < 40)
                continue;
            bool expect = (h == 0 && i == 5) || h == 1;
            if (expect != bad)
                fail_msg("head %d row %d: %s expected", h, i, expect ? "non-finite" : "finite");
        }
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
}

/* Fairness: a client with a deep queue does not hold up another's single job behind it.
 * The worker takes jobs round-robin across connections, so the small job runs after at
 * most one of the deep client's. */
static void test_deep_queue_does_not_starve_others(void **state)
{
    (void)state;
    gllm_client *deep, *small;
    assert_int_equal(gllm_connect(group_daemon.socket, &deep), 0);
    assert_int_equal(gllm_connect(group_daemon.socket, &small), 0);
    struct live_job dj, sj;
    assert_int_equal(small_job(deep, &dj, 256, GLLM_DTYPE_F32, 1), 0);
    assert_int_equal(small_job(small, &sj, 16, GLLM_DTYPE_F32, 2), 0);
    enum { DEEP = 64 };
    uint64_t ids[DEEP];
    for (int i = 0; i < DEEP; i++)
        assert_int_equal(gllm_attention_submit(deep, &dj.p, &ids[i]), 0);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(deep, &st), 0);   /* all 64 are queued now */
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_attention(small, &sj.p, &res), 0);
    assert_int_equal(gllm_status_get(small, &st), 0);
    uint32_t deep_left = 0;
    for (int i = 0; i < st.nlisted; i++) {
        gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
        assert_int_equal(gllm_status_client(small, i, &ci), 0);
        deep_left += ci.inflight;
    }
    fprintf(stderr, "fairness: the small job finished with %u of the deep client's %d still queued\n",
            deep_left, DEEP);
    assert_true(deep_left > DEEP / 2);
    for (int i = 0; i < DEEP; i++)
        assert_int_equal(gllm_job_wait(deep, ids[i], &res), 0);
    gllm_memory_release(dj.arena);
    gllm_memory_release(sj.arena);
    gllm_disconnect(deep);
    gllm_disconnect(small);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clients_killed_hundreds_of_times),
        cmocka_unit_test(test_flood_without_reading),
        cmocka_unit_test(test_garbage_and_truncation),
        cmocka_unit_test(test_arena_resized_after_registration),
        cmocka_unit_test(test_zero_huge_and_nan),
        cmocka_unit_test(test_deep_queue_does_not_starve_others),
    };
    return cmocka_run_group_tests(tests, group_daemon_start, group_daemon_stop);
}
