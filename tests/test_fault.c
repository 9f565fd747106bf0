/* One client's fault is not every client's (docs/hardening.md, "Faults and resets"): against
 * gllmd-fault (debug_fault on), client A's job faults or hangs; A gets the error, the device
 * is reset, client B keeps being served, B's old device tensors answer DEVLOST and are made
 * again, and nothing leaks. Also: out of device memory is a clean DEVMEM, and a release
 * gllmd has no debug_fault. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "proto.h"
#include "fault_scene.h"

/* The whole scene for one kind of fault: A's armed job fails with want, B is served
 * throughout and after, B's device tensors are lost and made again, nothing leaks. */
static void scene(const char *kind, int want, const char *conf, const char *reason_has)
{
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, conf), 0);
    const uint64_t used0 = device_used(d.socket);
    const int fds0 = settled_fds(&d);
    const long rss0 = daemon_rss_kib(&d);
    assert_int_equal(device_resets(d.socket, NULL, 0, NULL), 0);

    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct dev_job dj;
    dev_job_setup(b, &dj, 7);
    assert_int_equal(dev_job_run(b, &dj), 0);
    assert_true(device_used(d.socket) > used0);

    struct raw_client a;
    raw_client_open(&a, d.socket);
    assert_int_equal(raw_debug_fault(&a, kind), 0);

    /* B's jobs in flight around A's fault: each completes correctly or fails cleanly. */
    enum { N = 6 };
    struct live_job inflight[N];
    submit_jobs(b, inflight, N, &SPEC, 100);
    char msg[256];
    int r = raw_attention(&a, msg, sizeof msg);
    assert_int_equal(r, want);
    assert_non_null(strstr(msg, "device 0 reset"));
    for (int i = 0; i < N; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        int s = gllm_job_wait(b, inflight[i].id, &res);
        assert_true(s == 0 || s == GLLM_EDEVLOST);
        if (s == 0)
            assert_true(job_output_ok(&inflight[i]));
        assert_int_equal(gllm_memory_release(inflight[i].arena), 0);
    }

    /* The device serves again: A's next job and B's jobs from arenas run. */
    assert_int_equal(raw_attention(&a, NULL, 0), 0);
    struct live_job after;
    submit_jobs(b, &after, 1, &SPEC, 200);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, after.id, &res), 0);
    assert_true(job_output_ok(&after));
    assert_int_equal(gllm_memory_release(after.arena), 0);

    /* B's device tensors went with the old context: DEVLOST, saying what to do. */
    assert_int_equal(dev_job_run(b, &dj), GLLM_EDEVLOST);
    assert_non_null(strstr(gllm_client_last_error(b), "create it again"));
    char reason[160];
    assert_int_equal(device_resets(d.socket, reason, sizeof reason, NULL), 1);
    assert_non_null(strstr(reason, reason_has));

    /* Freed (which works and gives the quota back) and made again, they serve. */
    assert_int_equal(gllm_memory_release(dj.kd), 0);
    assert_int_equal(gllm_memory_release(dj.vd), 0);
    assert_int_equal(dev_job_upload(b, &dj), 0);
    assert_int_equal(dev_job_run(b, &dj), 0);

    /* Nothing leaks: device memory and the daemon's fds back to where they started. */
    dev_job_free(&dj);
    raw_client_close(&a);
    gllm_disconnect(b);
    wait_quiet(d.socket, 0);
    assert_int_equal(device_used(d.socket), used0);
    assert_int_equal(settled_fds(&d), fds0);
    /* Host memory: the allocator keeps some of what it was given; a leak of the tensors
     * (several hundred KiB per scene) repeated would pass this quickly. */
    assert_true(daemon_rss_kib(&d) - rss0 < 16 * 1024);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Each scene runs twice: the device's backend in a device process of its own (the default;
 * the reset replaces the process), and in gllmd's own process (the CPU backend's reset). */
#define IN_PROCESS "device_processes = off\n"

static void test_trap_contained(void **state)
{
    (void)state;
    scene("trap", GLLM_EDEVLOST, "", "trapped");
    scene("trap", GLLM_EDEVLOST, IN_PROCESS, "trapped");
}

static void test_oob_contained(void **state)
{
    (void)state;
    scene("oob", GLLM_EDEVLOST, "", "unmapped");
    scene("oob", GLLM_EDEVLOST, IN_PROCESS, "unmapped");
}

/* A job that never ends: the watchdog (300 ms here) fails it and resets the device. */
static void test_hang_watchdog(void **state)
{
    (void)state;
    scene("spin", GLLM_EJOBTIMEOUT, "watchdog_ms = 300\n", "watchdog");
    scene("spin", GLLM_EJOBTIMEOUT, "watchdog_ms = 300\n" IN_PROCESS, "watchdog");
}

/* A fault no reset in the process that met it undoes (every context-fatal fault on CUDA):
 * with device processes it is contained like the others, since the reset is a new process. */
static void test_sticky_contained(void **state)
{
    (void)state;
    scene("sticky", GLLM_EDEVLOST, "", "sticky");
}

/* The device process killed from outside (the OOM killer, an operator) while its device is
 * idle: the idle worker finds it gone and resets the device without a job having to fail
 * first; B's connection and arenas stay, and its next job runs. */
static void test_device_process_killed(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, ""), 0);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct live_job first;
    submit_jobs(b, &first, 1, &SPEC, 100);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, first.id, &res), 0);

    const long child = daemon_child_pid(&d);
    assert_true(child > 0);
    assert_int_equal(kill((pid_t)child, SIGKILL), 0);
    char reason[160] = "";
    int waited_ms = 0;
    while (device_resets(d.socket, reason, sizeof reason, NULL) == 0) {
        assert_true(waited_ms < 5000);     /* the worker looks every 100 ms */
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
        waited_ms += 10;
    }
    assert_non_null(strstr(reason, "killed by signal 9"));
    assert_true(daemon_child_pid(&d) != child);

    /* The arena B made before the kill serves the new process too. */
    job_poison(&first);
    assert_int_equal(gllm_attention_submit(b, &first.p, &first.id), 0);
    assert_int_equal(gllm_job_wait(b, first.id, &res), 0);
    assert_true(job_output_ok(&first));
    assert_int_equal(gllm_memory_release(first.arena), 0);
    struct live_job after;
    submit_jobs(b, &after, 1, &SPEC, 300);
    assert_int_equal(gllm_job_wait(b, after.id, &res), 0);
    assert_true(job_output_ok(&after));
    assert_int_equal(gllm_memory_release(after.arena), 0);
    assert_int_equal(device_resets(d.socket, NULL, 0, NULL), 1);
    gllm_disconnect(b);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Twenty faults in a row, each losing 2 MiB of B's device tensors: every reset releases
 * them (device memory back to where it started), every free works, and gllmd's fds and
 * resident memory come back (a leak of the tensors would be 40 MiB). */
static void test_repeated_faults(void **state)
{
    (void)state;
    enum { ROUNDS = 20 };
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, ""), 0);
    const uint64_t used0 = device_used(d.socket);
    const int fds0 = settled_fds(&d);
    const long rss0 = daemon_rss_kib(&d);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct raw_client a;
    raw_client_open(&a, d.socket);
    for (int i = 0; i < ROUNDS; i++) {
        gllm_memory *m[2];
        for (int k = 0; k < 2; k++)
            assert_int_equal(gllm_dtensor_create(b, 1 << 20, 0, &m[k]), 0);
        assert_true(device_used(d.socket) >= used0 + (2u << 20));
        assert_int_equal(raw_debug_fault(&a, i % 2 ? "oob" : "trap"), 0);
        assert_int_equal(raw_attention(&a, NULL, 0), GLLM_EDEVLOST);
        assert_int_equal(raw_attention(&a, NULL, 0), 0);   /* behind the reset */
        assert_int_equal(device_used(d.socket), used0);    /* the reset released them */
        for (int k = 0; k < 2; k++)
            assert_int_equal(gllm_memory_release(m[k]), 0);
    }
    assert_int_equal(device_resets(d.socket, NULL, 0, NULL), ROUNDS);
    raw_client_close(&a);
    gllm_disconnect(b);
    wait_quiet(d.socket, 0);
    assert_int_equal(device_used(d.socket), used0);
    assert_int_equal(settled_fds(&d), fds0);
    assert_true(daemon_rss_kib(&d) - rss0 < 8 * 1024);
    assert_int_equal(daemon_stop(&d), 0);
}

/* With the backend in gllmd's process (device_processes off), a fault that no reset in this
 * process undoes (every context-fatal fault on CUDA; the CPU backend's reset fails after
 * this one): A gets DEVLOST, B's jobs in flight each end (done,
 * DEVLOST or DISCONNECTED, never a hang), gllmd exits with EXIT_DEVICE_LOST within its flush
 * bound, and a gllmd started again on the same socket serves B's new connection. */
static void test_sticky_exits(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, IN_PROCESS), 0);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct raw_client a;
    raw_client_open(&a, d.socket);
    assert_int_equal(raw_debug_fault(&a, "sticky"), 0);
    enum { N = 6 };
    struct live_job inflight[N];
    submit_jobs(b, inflight, N, &SPEC, 100);
    char msg[256];
    assert_int_equal(raw_attention(&a, msg, sizeof msg), GLLM_EDEVLOST);
    assert_non_null(strstr(msg, "sticky"));
    for (int i = 0; i < N; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        int s = gllm_job_wait(b, inflight[i].id, &res);
        assert_true(s == 0 || s == GLLM_EDEVLOST || s == GLLM_EDISCONNECTED);
        if (s == 0)
            assert_true(job_output_ok(&inflight[i]));
        /* Once gllmd has gone, the release is the client's own (its memory is freed). */
        int rel = gllm_memory_release(inflight[i].arena);
        assert_true(rel == 0 || rel == GLLM_EDISCONNECTED);
    }
    /* The flush bound is 1 s; the rest is slack for a loaded machine. */
    assert_int_equal(wait_daemon_exit(&d, 3000), EXIT_DEVICE_LOST);
    raw_client_close(&a);
    gllm_disconnect(b);

    assert_int_equal(restart_fault_daemon(&d, IN_PROCESS), 0);
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct live_job next;
    submit_jobs(b, &next, 1, &SPEC, 200);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, next.id, &res), 0);
    assert_true(job_output_ok(&next));
    assert_int_equal(gllm_memory_release(next.arena), 0);
    gllm_disconnect(b);
    assert_int_equal(daemon_stop(&d), 0);
}

/* The same fault with exit_on_reset_failure off: gllmd stays up and the device's jobs fail
 * with DEVLOST, saying the reset failed, until it is restarted by hand. */
static void test_sticky_kept_failed(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, "exit_on_reset_failure = off\n" IN_PROCESS), 0);
    struct raw_client a;
    raw_client_open(&a, d.socket);
    assert_int_equal(raw_debug_fault(&a, "sticky"), 0);
    assert_int_equal(raw_attention(&a, NULL, 0), GLLM_EDEVLOST);
    char msg[256];
    assert_int_equal(raw_attention(&a, msg, sizeof msg), GLLM_EDEVLOST);
    assert_non_null(strstr(msg, "could not be reset"));
    assert_int_equal(wait_daemon_exit(&d, 200), -ETIMEDOUT);
    raw_client_close(&a);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A device tensor larger than the device is DEVMEM with nothing half made: no tensor, no
 * quota taken, no memory held; the next one of a sensible size is made. */
static void test_devmem_clean(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, "max_device_bytes = 1024T\n"
                                            "max_device_bytes_total = 1024T\n"), 0);
    gllm_client *c = NULL;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    const uint64_t used0 = device_used(d.socket);
    gllm_memory *m = NULL;
    assert_int_equal(gllm_dtensor_create(c, (size_t)1 << 48, 0, &m), GLLM_EDEVMEM);
    assert_null(m);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    assert_int_equal(st.dtensors, 0);
    assert_int_equal(st.device_bytes, 0);
    assert_int_equal(device_used(d.socket), used0);
    assert_int_equal(gllm_dtensor_create(c, 4096, 0, &m), 0);
    assert_int_equal(gllm_memory_release(m), 0);
    gllm_disconnect(c);
    assert_int_equal(daemon_stop(&d), 0);
}

/* gllmd (a fault build) whose device processes take ms longer to map (var
 * GLLM_TEST_SLOW_MAP_MS) or unmap (GLLM_TEST_SLOW_UNMAP_MS) an arena of 16 MiB or more, as
 * pinning and unpinning tens of GiB do on a GPU's host. */
static void start_slow_daemon(struct daemon *d, const char *var, const char *ms)
{
    setenv(var, ms, 1);
    setenv("GLLM_TEST_SLOW_MAP_BYTES", "16777216", 1);
    int started = start_fault_daemon(d, "");
    unsetenv(var);
    unsetenv("GLLM_TEST_SLOW_MAP_BYTES");
    assert_int_equal(started, 0);
}

/* A raw connection past hello whose replies must come within sec seconds. */
static int raw_connect_within(const char *socket, long sec)
{
    int fd = raw_connect(socket);
    raw_hello(fd);
    struct timeval limit = {.tv_sec = sec};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit), 0);
    return fd;
}

/* A request of method with one unsigned argument, sent only. */
static void send_u64_request(int fd, uint64_t id, const char *method, const char *key,
                             uint64_t value)
{
    struct proto_buf req;
    proto_buf_init(&req);
    proto_pack_request(&req.pk, id, method);
    msgpack_pack_map(&req.pk, 1);
    proto_pack_kv_u64(&req.pk, key, value);
    raw_send(fd, req.data, req.len, -1);
}

/* A large arena's registration (its mapping made 4 s slow in the device process by the test
 * hook, as pinning tens of GiB is on a GPU's host) holds up no other client: a status, C's
 * arena release (whose unmapping waits for A's mapping) and B's job are answered while A's
 * registration is not yet, and so is D's device tensor, made in the device process that is
 * mapping A's arena; A's own next request waits for it (docs/PROTOCOL.md: an immediate
 * method is answered before the next request is read), and the registration succeeds.
 * Before, the loop waited for every mapping and unmapping, and then a device tensor waited
 * for the mapping's control request. */
static void test_registration_holds_nobody(void **state)
{
    (void)state;
    struct daemon d;
    start_slow_daemon(&d, "GLLM_TEST_SLOW_MAP_MS", "4000");
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct live_job j;
    assert_int_equal(job_setup(b, &j, &SPEC, 11), 0);     /* a small arena: not slowed */
    struct raw_client cc;                                 /* C, with a small arena too */
    raw_client_open(&cc, d.socket);

    int a = raw_connect_within(d.socket, 30);
    const size_t big = 32u << 20;
    int memfd = make_memfd(big, F_SEAL_SHRINK);
    assert_true(memfd >= 0);
    raw_register_send(a, memfd, big, 2);
    struct proto_buf req;
    proto_buf_init(&req);
    proto_pack_request(&req.pk, 3, "status");
    msgpack_pack_map(&req.pk, 0);
    raw_send(a, req.data, req.len, -1);
    sleep_ms(200);                               /* the loop has A's registration under way */
    /* D's device tensor, in the device process that is mapping A's arena: its control
     * channel serves D meanwhile, and the loop the others. */
    int dd = raw_connect_within(d.socket, 30);
    send_u64_request(dd, 7, "dtensor_create", "bytes", 1 << 20);
    sleep_ms(100);

    gllm_status st = status_of(d.socket);
    assert_true(st.clients >= 3);
    send_u64_request(cc.fd, cc.next_id, "arena_release", "arena", cc.arena);
    int64_t id = 0;
    assert_int_equal(raw_reply(cc.fd, &id, NULL), 0);
    assert_int_equal(id, (int64_t)cc.next_id);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_attention(b, &j.p, &res), 0);
    assert_true(job_output_ok(&j));
    assert_int_equal(raw_reply(dd, &id, NULL), 0);   /* D's device tensor, made meanwhile */
    assert_int_equal(id, 7);
    struct pollfd pa = {.fd = a, .events = POLLIN};
    assert_int_equal(poll(&pa, 1, 0), 0);        /* A's answer is still to come */

    uint64_t arena = 0;
    assert_int_equal(raw_reply(a, &id, &arena), 0);
    assert_int_equal(id, 2);                     /* the registration, then A's status */
    assert_true(arena > 0);
    assert_int_equal(raw_reply(a, &id, NULL), 0);
    assert_int_equal(id, 3);

    assert_int_equal(gllm_memory_release(j.arena), 0);
    gllm_disconnect(b);
    raw_client_close(&cc);
    close(a);
    close(dd);
    close(memfd);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A large arena's unmapping (made 4 s slow in the device process by the test hook, as
 * unpinning tens of GiB takes seconds) holds up no device tensor: D's is answered within 2 s
 * while it goes on, where it waited for the whole unmapping before, and the next registration
 * (which waits for the unmapping) succeeds once it is done. */
static void test_unmapping_holds_nobody(void **state)
{
    (void)state;
    struct daemon d;
    start_slow_daemon(&d, "GLLM_TEST_SLOW_UNMAP_MS", "4000");

    int a = raw_connect_within(d.socket, 30);
    const size_t big = 32u << 20;
    int memfd = make_memfd(big, F_SEAL_SHRINK);
    assert_true(memfd >= 0);
    const uint32_t arena = raw_register(a, memfd, big, 2);
    send_u64_request(a, 3, "arena_release", "arena", arena);
    int64_t id = 0;
    assert_int_equal(raw_reply(a, &id, NULL), 0);
    assert_int_equal(id, 3);
    sleep_ms(200);                               /* the unmapping is under way */

    int dd = raw_connect_within(d.socket, 2);
    send_u64_request(dd, 7, "dtensor_create", "bytes", 1 << 20);
    assert_int_equal(raw_reply(dd, &id, NULL), 0);
    assert_int_equal(id, 7);

    int small = make_memfd(1u << 20, F_SEAL_SHRINK);
    assert_true(small >= 0);
    assert_true(raw_register(a, small, 1u << 20, 4) > 0);
    close(small);
    close(dd);
    close(a);
    close(memfd);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A replacement device process killed while it maps the arenas again (here inside a 32 MiB
 * mapping the test hook makes 3 s slow) is that process lost, not the device: gllmd starts
 * another, which maps them and serves, where it used to count the reset as failed and exit
 * with status 3 (found by the soak, tests/soak/). */
static void test_replacement_killed_while_mapping(void **state)
{
    (void)state;
    struct daemon d;
    start_slow_daemon(&d, "GLLM_TEST_SLOW_MAP_MS", "3000");
    gllm_client *a = NULL, *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &a), 0);
    gllm_memory *big;
    assert_int_equal(gllm_arena_create(a, 32u << 20, &big), 0);
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct live_job j;
    submit_jobs(b, &j, 1, &SPEC, 7);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, j.id, &res), 0);

    const long first = daemon_child_pid(&d);
    assert_true(first > 0);
    assert_int_equal(kill((pid_t)first, SIGKILL), 0);
    long second = -1;
    for (int waited = 0; second < 0 || second == first; waited += 5) {
        assert_true(waited < 10000);
        sleep_ms(5);
        second = daemon_child_pid(&d);
    }
    sleep_ms(500);                         /* the replacement is inside its 3 s mapping */
    assert_int_equal(kill((pid_t)second, SIGKILL), 0);

    /* B's job waits for the reset and runs on a third process. */
    job_poison(&j);
    assert_int_equal(gllm_attention_submit(b, &j.p, &j.id), 0);
    assert_int_equal(gllm_job_wait(b, j.id, &res), 0);
    assert_true(job_output_ok(&j));
    assert_int_equal(wait_daemon_exit(&d, 0), -ETIMEDOUT);
    const long third = daemon_child_pid(&d);
    assert_true(third > 0 && third != first && third != second);
    assert_int_equal(gllm_memory_release(j.arena), 0);
    assert_int_equal(gllm_memory_release(big), 0);
    gllm_disconnect(b);
    gllm_disconnect(a);
    assert_int_equal(daemon_stop(&d), 0);
}

/* The same with the replacement killed before its hello (the test hook holds every start
 * 1.5 s): a process gone by a signal before it served is replaced too. */
static void test_replacement_killed_before_hello(void **state)
{
    (void)state;
    struct daemon d;
    setenv("GLLM_TEST_SLOW_HELLO_MS", "1500", 1);
    int started = start_fault_daemon(&d, "");
    unsetenv("GLLM_TEST_SLOW_HELLO_MS");
    assert_int_equal(started, 0);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    struct live_job j;
    submit_jobs(b, &j, 1, &SPEC, 9);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, j.id, &res), 0);

    const long first = daemon_child_pid(&d);
    assert_true(first > 0);
    assert_int_equal(kill((pid_t)first, SIGKILL), 0);
    long second = -1;
    for (int waited = 0; second < 0 || second == first; waited += 5) {
        assert_true(waited < 10000);
        sleep_ms(5);
        second = daemon_child_pid(&d);
    }
    sleep_ms(300);                         /* inside its 1.5 s start */
    assert_int_equal(kill((pid_t)second, SIGKILL), 0);

    job_poison(&j);
    assert_int_equal(gllm_attention_submit(b, &j.p, &j.id), 0);
    assert_int_equal(gllm_job_wait(b, j.id, &res), 0);
    assert_true(job_output_ok(&j));
    assert_int_equal(wait_daemon_exit(&d, 0), -ETIMEDOUT);
    const long third = daemon_child_pid(&d);
    assert_true(third > 0 && third != first && third != second);
    assert_int_equal(gllm_memory_release(j.arena), 0);
    gllm_disconnect(b);
    assert_int_equal(daemon_stop(&d), 0);
}

/* A release gllmd answers debug_fault as an unknown method. */
static void test_release_has_no_debug_fault(void **state)
{
    (void)state;
    setenv("GLLMD_PATH", GLLMD_PATH, 1);
    struct daemon d;
    assert_int_equal(daemon_start(&d, NULL), 0);
    struct raw_client a;
    raw_client_open(&a, d.socket);
    assert_int_equal(raw_debug_fault(&a, "trap"), GLLM_EMETHOD);
    assert_int_equal(raw_attention(&a, NULL, 0), 0);
    raw_client_close(&a);
    assert_int_equal(daemon_stop(&d), 0);
}

int main(void)
{
    /* The CPU backend's simulated faults; tests/gpu/fault_gpu.c is this on a GPU. */
    if (strcmp(test_backend(), "cpu") != 0) {
        printf("SKIPPED: test_fault runs on the CPU backend (see tests/gpu/fault_gpu.c)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trap_contained),
        cmocka_unit_test(test_oob_contained),
        cmocka_unit_test(test_hang_watchdog),
        cmocka_unit_test(test_repeated_faults),
        cmocka_unit_test(test_sticky_contained),
        cmocka_unit_test(test_device_process_killed),
        cmocka_unit_test(test_sticky_exits),
        cmocka_unit_test(test_sticky_kept_failed),
        cmocka_unit_test(test_devmem_clean),
        cmocka_unit_test(test_release_has_no_debug_fault),
        cmocka_unit_test(test_registration_holds_nobody),
        cmocka_unit_test(test_unmapping_holds_nobody),
        cmocka_unit_test(test_replacement_killed_while_mapping),
        cmocka_unit_test(test_replacement_killed_before_hello),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
