/* Lifecycle: sd_notify messages, SIGHUP reload, access policy, socket activation, drain. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

/* A NOTIFY_SOCKET of our own: the datagram socket systemd would listen on. */
struct notify {
    int fd;
    char path[108];
    char env[140];
};

static void notify_open(struct notify *n)
{
    snprintf(n->path, sizeof n->path, "/tmp/gllm-notify-%d-%ld", (int)getpid(), (long)random());
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(n->fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", n->path);
    unlink(n->path);
    assert_int_equal(bind(n->fd, (struct sockaddr *)&a, sizeof a), 0);
    snprintf(n->env, sizeof n->env, "NOTIFY_SOCKET=%s", n->path);
}

static void notify_close(struct notify *n)
{
    close(n->fd);
    unlink(n->path);
}

/* Reads datagrams until one contains `want`; returns it (static buffer) or NULL after
 * timeout_ms. Every datagram read is appended to log when given. */
static const char *notify_wait(struct notify *n, const char *want, int timeout_ms)
{
    static char buf[4096];
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        int left = timeout_ms - (int)((now.tv_sec - start.tv_sec) * 1000 +
                                      (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0)
            return NULL;
        struct pollfd p = {.fd = n->fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t len = recv(n->fd, buf, sizeof buf - 1, 0);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        if (strstr(buf, want))
            return buf;
    }
}

static void write_config(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int wait_exit(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_notify_ready_status_watchdog_reload_stopping(void **state)
{
    (void)state;
    struct notify n;
    notify_open(&n);
    struct daemon d;
    const char *env[] = {n.env, "WATCHDOG_USEC=200000", NULL};
    const char *args[] = {"--config", "/nonexistent-is-refused", NULL};
    /* A config file named on the command line must exist: refused, exit 1. */
    assert_int_equal(daemon_start_env(&d, args, env), -ECHILD);
    daemon_stop(&d);

    assert_int_equal(daemon_start_env(&d, NULL, env), 0);
    const char *m = notify_wait(&n, "READY=1", 5000);
    assert_non_null(m);
    assert_non_null(strstr(m, "MAINPID="));
    m = notify_wait(&n, "STATUS=", 5000);
    assert_non_null(m);
    assert_non_null(strstr(m, "clients"));
    assert_non_null(notify_wait(&n, "WATCHDOG=1", 5000));     /* from the loop, every 100 ms */
    assert_non_null(notify_wait(&n, "WATCHDOG=1", 5000));

    kill(d.pid, SIGHUP);
    m = notify_wait(&n, "RELOADING=1", 5000);
    assert_non_null(m);
    assert_non_null(strstr(m, "MONOTONIC_USEC="));
    assert_non_null(notify_wait(&n, "READY=1", 5000));

    kill(d.pid, SIGTERM);
    assert_non_null(notify_wait(&n, "STOPPING=1", 5000));
    assert_int_equal(wait_exit(d.pid), 0);
    d.pid = 0;
    daemon_stop(&d);
    notify_close(&n);
}

static void test_reload_applies_limits(void **state)
{
    (void)state;
    char conf[] = "/tmp/gllm-conf-XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    close(fd);
    write_config(conf, "max_inflight = 7\n");
    struct notify n;
    notify_open(&n);
    const char *env[] = {n.env, NULL};
    const char *args[] = {"--config", conf, NULL};
    struct daemon d;
    assert_int_equal(daemon_start_env(&d, args, env), 0);
    assert_non_null(notify_wait(&n, "READY=1", 5000));
    gllm_client *c;
    gllm_limits lim = GLLM_LIMITS_INIT;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    assert_int_equal(gllm_client_limits(c, &lim), 0);
    assert_int_equal(lim.max_inflight, 7);
    gllm_disconnect(c);

    write_config(conf, "max_inflight = 11\nlog_level = debug\n");
    kill(d.pid, SIGHUP);
    assert_non_null(notify_wait(&n, "RELOADING=1", 5000));
    assert_non_null(notify_wait(&n, "READY=1", 5000));
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    assert_int_equal(gllm_client_limits(c, &lim), 0);
    assert_int_equal(lim.max_inflight, 11);
    gllm_disconnect(c);

    /* A broken file is refused at reload and the running configuration stays. */
    write_config(conf, "max_inflight = many\n");
    kill(d.pid, SIGHUP);
    assert_non_null(notify_wait(&n, "READY=1", 5000));
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    assert_int_equal(gllm_client_limits(c, &lim), 0);
    assert_int_equal(lim.max_inflight, 11);
    gllm_disconnect(c);

    /* A limit lowered below what a session already holds refuses its next arena. */
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    gllm_memory *a, *b;
    assert_int_equal(gllm_arena_create(c, 1 << 16, &a), 0);
    write_config(conf, "max_arena_bytes = 8K\n");
    kill(d.pid, SIGHUP);
    assert_non_null(notify_wait(&n, "RELOADING=1", 5000));
    assert_non_null(notify_wait(&n, "READY=1", 5000));
    assert_int_equal(gllm_arena_create(c, 4096, &b), GLLM_EQUOTA);
    assert_int_equal(gllm_memory_release(a), 0);
    assert_int_equal(gllm_arena_create(c, 4096, &b), 0);   /* room again once released */
    assert_int_equal(gllm_memory_release(b), 0);
    gllm_disconnect(c);

    assert_int_equal(daemon_stop(&d), 0);
    notify_close(&n);
    unlink(conf);
}

static void test_policy_refuses_peer(void **state)
{
    (void)state;
    char conf[] = "/tmp/gllm-conf-XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    close(fd);
    char text[128];
    snprintf(text, sizeof text, "allow_users = %u\n", (unsigned)getuid() + 1);  /* not us */
    write_config(conf, text);
    const char *args[] = {"--config", conf, NULL};
    struct daemon d;
    assert_int_equal(daemon_start(&d, args), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), GLLM_EDENIED);

    snprintf(text, sizeof text, "allow_users = %u\n", (unsigned)getuid());        /* us */
    write_config(conf, text);
    kill(d.pid, SIGHUP);
    c = connect_until(d.socket, GLLM_EDENIED, 5000);   /* until the reload is in */
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    gllm_disconnect(c);
    assert_int_equal(daemon_stop(&d), 0);
    unlink(conf);
}

/* systemd-socket-activate makes the listening socket and execs gllmd with LISTEN_FDS. */
static void test_socket_activation(void **state)
{
    (void)state;
    if (access("/usr/bin/systemd-socket-activate", X_OK) != 0) {
        fprintf(stderr, "SKIPPED: systemd-socket-activate not installed (package systemd)\n");
        skip();
    }
    char dir[] = "/tmp/gllm-sa-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sock[108], listen_arg[128];
    snprintf(sock, sizeof sock, "%s/gllmd.sock", dir);
    snprintf(listen_arg, sizeof listen_arg, "--listen=%s", sock);
    const char *gllmd = getenv("GLLMD_PATH") ? getenv("GLLMD_PATH") : GLLMD_PATH;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/usr/bin/systemd-socket-activate", "systemd-socket-activate", "--seqpacket",
              listen_arg, gllmd, "--backend", test_backend(), "--threads", "2", (char *)NULL);
        _exit(127);
    }
    gllm_client *c = NULL;
    int r = -1;
    for (int i = 0; i < 500 && r != 0; i++) {
        r = gllm_connect(sock, &c);
        if (r != 0) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(r, 0);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    assert_string_equal(st.backend, test_backend());
    gllm_disconnect(c);
    kill(pid, SIGTERM);
    assert_int_equal(wait_exit(pid), 0);
    /* The socket belongs to whoever made it (systemd): gllmd leaves it in place. */
    assert_int_equal(access(sock, F_OK), 0);
    unlink(sock);
    rmdir(dir);
}

/* Several clients with jobs in flight at SIGTERM: every accepted job is answered. */
static void test_sigterm_with_several_clients(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(daemon_start(&d, NULL), 0);
    enum { CLIENTS = 3, JOBS = 3 };
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t kids[CLIENTS];
    for (int k = 0; k < CLIENTS; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] > 0)
            continue;
        close(ready[0]);
        close(go[1]);
        gllm_client *c;
        if (gllm_connect(d.socket, &c) < 0)
            _exit(10);
        size_t n = 1 * 4 * 256 * 64;
        gllm_memory *a;
        if (gllm_arena_create(c, 4 * n * 4 * JOBS, &a) < 0)
            _exit(11);
        uint64_t seed = (uint64_t)k;
        fill_random(gllm_memory_data(a), GLLM_DTYPE_F32, 4 * n * JOBS, &seed);
        uint64_t ids[JOBS];
        int64_t shape[4] = {1, 4, 256, 64};
        for (int j = 0; j < JOBS; j++) {
            gllm_attention_params p = {.size = sizeof p};
            uint64_t base = (uint64_t)j * 4 * n * 4;
            gllm_tensor_init(a, base, GLLM_DTYPE_F32, 4, shape, &p.q);
            gllm_tensor_init(a, base + n * 4, GLLM_DTYPE_F32, 4, shape, &p.k);
            gllm_tensor_init(a, base + 2 * n * 4, GLLM_DTYPE_F32, 4, shape, &p.v);
            gllm_tensor_init(a, base + 3 * n * 4, GLLM_DTYPE_F32, 4, shape, &p.out);
            if (gllm_attention_submit(c, &p, &ids[j]) < 0)
                _exit(12);
        }
        gllm_status st = GLLM_STATUS_INIT;       /* a round trip: the jobs before it have been read */
        if (gllm_status_get(c, &st) < 0 || write(ready[1], "r", 1) != 1)
            _exit(13);
        char x;
        if (read(go[0], &x, 1) != 1)
            _exit(14);
        for (int j = 0; j < JOBS; j++) {
            gllm_job_result res = GLLM_JOB_RESULT_INIT;
            if (gllm_job_wait(c, ids[j], &res) != 0)
                _exit(15);
        }
        gllm_memory_release(a);
        gllm_disconnect(c);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    for (int k = 0; k < CLIENTS; k++) {
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
    }
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    for (int k = 0; k < CLIENTS; k++)
        assert_int_equal(write(go[1], "g", 1), 1);
    for (int k = 0; k < CLIENTS; k++)
        assert_int_equal(wait_exit(kids[k]), 0);
    assert_int_equal(wait_exit(d.pid), 0);
    d.pid = 0;
    daemon_stop(&d);
    close(ready[0]);
    close(go[1]);
}

/* Past drain_timeout_s, jobs still queued are answered with SHUTDOWN, not dropped. */
static void test_drain_deadline_cancels_queued_jobs(void **state)
{
    (void)state;
    skip_on_slow_device("a 0.5-GFLOP job must finish within the watchdog's 20 s");
    char conf[] = "/tmp/gllm-conf-XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    close(fd);
    write_config(conf, "drain_timeout_s = 0\n");     /* cancel at once */
    const char *args[] = {"--config", conf, NULL};
    struct daemon d;
    assert_int_equal(daemon_start(&d, args), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    enum { JOBS = 12 };
    size_t n = 1 * 8 * 512 * 128;
    gllm_memory *a;
    /* q, k, v shared; an output of its own per job, poisoned, so what ran shows. */
    assert_int_equal(gllm_arena_create(c, (3 + JOBS) * n * 4, &a), 0);
    float *mem = gllm_memory_data(a);
    uint64_t seed = 1;
    fill_random(mem, GLLM_DTYPE_F32, 3 * n, &seed);
    memset(mem + 3 * n, 0xff, JOBS * n * 4);
    int64_t shape[4] = {1, 8, 512, 128};
    gllm_attention_params p = {.size = sizeof p};
    gllm_tensor_init(a, 0, GLLM_DTYPE_F32, 4, shape, &p.q);
    gllm_tensor_init(a, n * 4, GLLM_DTYPE_F32, 4, shape, &p.k);
    gllm_tensor_init(a, 2 * n * 4, GLLM_DTYPE_F32, 4, shape, &p.v);
    uint64_t ids[JOBS];
    for (int j = 0; j < JOBS; j++) {
        gllm_tensor_init(a, (3 + (size_t)j) * n * 4, GLLM_DTYPE_F32, 4, shape, &p.out);
        assert_int_equal(gllm_attention_submit(c, &p, &ids[j]), 0);
    }
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);     /* all read by the daemon */
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    int done = 0, cancelled = 0, first = -1;
    for (int j = 0; j < JOBS; j++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        int r = gllm_job_wait(c, ids[j], &res);       /* every job gets an answer */
        const float *out = mem + (3 + (size_t)j) * n;
        size_t written = 0;
        for (size_t i = 0; i < n; i++)
            written += !isnan(out[i]);
        if (r == 0) {
            /* Finished: every element written, the same as every other finished job. */
            if (written != n)
                fail_msg("job %d finished with %zu of %zu outputs written", j, written, n);
            if (first < 0)
                first = j;
            else if (memcmp(out, mem + (3 + (size_t)first) * n, n * 4) != 0)
                fail_msg("job %d finished with an output unlike job %d's", j, first);
            done++;
        } else if (r == GLLM_ESHUTDOWN) {
            /* Cancelled while queued: it never ran, its output is untouched. */
            if (written != 0)
                fail_msg("job %d was cancelled but wrote %zu outputs", j, written);
            cancelled++;
        } else {
            fail_msg("job %d: %s", j, gllm_error_name(r));
        }
    }
    if (strcmp(test_backend(), "cpu") == 0)
        assert_true(cancelled > 0);   /* 12 jobs of ~1 GFLOP cannot all finish in 0 s */
    gllm_disconnect(c);
    gllm_memory_release(a);
    assert_int_equal(wait_exit(d.pid), 0);
    d.pid = 0;
    daemon_stop(&d);
    unlink(conf);
    fprintf(stderr, "drain deadline: %d jobs finished, %d cancelled\n", done, cancelled);
}

/* gllmd's exit status within ms, or -ETIMEDOUT with it still running. */
static int wait_exit_for(pid_t pid, int ms)
{
    for (int waited = 0; waited <= ms; waited += 5) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        sleep_ms(5);
    }
    return -ETIMEDOUT;
}

/* A client that sends and never reads cannot hold up the drain past its deadline: its
 * replies fill gllmd's queue for it (gllmd stops reading it), and once drain_timeout_s has
 * passed the drain closes it with its replies unsent, and gllmd exits 0. */
static void test_drain_closes_clients_that_stop_reading(void **state)
{
    (void)state;
    char conf[] = "/tmp/gllm-conf-XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    close(fd);
    write_config(conf, "drain_timeout_s = 1\n");
    const char *args[] = {"--config", conf, NULL};
    struct daemon d;
    assert_int_equal(daemon_start(&d, args), 0);
    int deaf = raw_connect(d.socket);
    raw_hello(deaf);
    static struct proto_buf b;
    int sent = 0;
    for (uint64_t id = 10; id < 100000; id++, sent++) {
        proto_buf_init(&b);
        proto_pack_request(&b.pk, id, "status");
        msgpack_pack_map(&b.pk, 0);
        if (send_packet_fd(deaf, b.data, b.len, -1, MSG_DONTWAIT) != (ssize_t)b.len)
            break;                /* gllmd stopped reading: its queue for us is full */
    }
    assert_true(sent > 100);
    assert_true(sent < 99990);
    /* Another client is served and goes; then the drain. */
    gllm_status st = status_of(d.socket);
    assert_true(st.clients >= 2);
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    const int r = wait_exit_for(d.pid, 20000);
    if (r == -ETIMEDOUT) {
        kill(d.pid, SIGKILL);
        waitpid(d.pid, NULL, 0);
        fail_msg("gllmd did not exit within 20 s of SIGTERM with a client that stopped reading");
    }
    assert_int_equal(r, 0);
    d.pid = 0;
    /* Closed by gllmd: what was sent stays readable, then the end. */
    char rx[256];
    ssize_t n;
    while ((n = recv(deaf, rx, sizeof rx, MSG_DONTWAIT)) > 0)
        ;
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
    close(deaf);
    daemon_stop(&d);
    unlink(conf);
}

/* A gllmd that dies with our requests unread makes the kernel answer ECONNRESET, not end of
 * file; the library says GLLM_EDISCONNECTED for both, as documented. */
static void test_daemon_killed_with_requests_unread(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(daemon_start(&d, NULL), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    gllm_client_set_wait_spin(c, 0);
    gllm_memory *a;
    assert_int_equal(gllm_arena_create(c, 4 * 16 * 64 * 4, &a), 0);
    memset(gllm_memory_data(a), 0, 4 * 16 * 64 * 4);
    gllm_attention_params p = {.size = sizeof p};
    const int64_t shape[4] = {1, 1, 16, 64};
    gllm_tensor_init(a, 0, GLLM_DTYPE_F32, 4, shape, &p.q);
    gllm_tensor_init(a, 4096, GLLM_DTYPE_F32, 4, shape, &p.k);
    gllm_tensor_init(a, 8192, GLLM_DTYPE_F32, 4, shape, &p.v);
    gllm_tensor_init(a, 12288, GLLM_DTYPE_F32, 4, shape, &p.out);
    /* Stopped, gllmd reads nothing: the job waits in its socket, and dies there. */
    assert_int_equal(kill(d.pid, SIGSTOP), 0);
    uint64_t job;
    assert_int_equal(gllm_attention_submit(c, &p, &job), 0);
    assert_int_equal(kill(d.pid, SIGKILL), 0);
    assert_int_equal(waitpid(d.pid, NULL, 0), d.pid);
    d.pid = 0;
    assert_int_equal(gllm_job_wait(c, job, NULL), GLLM_EDISCONNECTED);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), GLLM_EDISCONNECTED);
    gllm_memory_release(a);
    gllm_disconnect(c);
    daemon_stop(&d);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    srandom((unsigned)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_ready_status_watchdog_reload_stopping),
        cmocka_unit_test(test_reload_applies_limits),
        cmocka_unit_test(test_policy_refuses_peer),
        cmocka_unit_test(test_socket_activation),
        cmocka_unit_test(test_sigterm_with_several_clients),
        cmocka_unit_test(test_drain_deadline_cancels_queued_jobs),
        cmocka_unit_test(test_drain_closes_clients_that_stop_reading),
        cmocka_unit_test(test_daemon_killed_with_requests_unread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
