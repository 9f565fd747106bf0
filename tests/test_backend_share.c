/* Memory shared between processes at the backend layer, on every backend that opens here:
 * an export mapped by another process (both ways), an import that outlives its exporter,
 * a client's queue, and every refusal of share_import. Each case forks before any backend opens, as CUDA
 * requires; the child's verdict is its exit status. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "testutil.h"

#define WORDS 4096                 /* words of the pattern written through each mapping */

static const char *const names[] = {
#ifdef GLLM_HAVE_CUDA
    "cuda",
#endif
    "cpu",
};

/* Opens backend name, or NULL (why written) when it cannot run here. */
static struct backend *open_backend(const char *name, char *why, size_t len)
{
    struct backend_config cfg = {.threads = 1};
    struct backend *be = NULL;
    if (backend_select(name, &cfg, &be, why, len) < 0)
        return NULL;
    return be;
}

#define NNAMES (sizeof names / sizeof *names)
static bool usable[NNAMES];        /* probed once, in main, before any backend opens here */

/* Whether name opens on this machine: probed in a throwaway child, so the test process
 * itself never initialises a GPU driver before it forks (a child forked after that could
 * not use the GPU). */
static bool probe_in_child(const char *name)
{
    pid_t pid = fork();
    if (pid == 0) {
        char why[256];
        struct backend *be = open_backend(name, why, sizeof why);
        bool shares = be && backend_caps(be)->share_kind != BACKEND_SHARE_NONE;
        if (!shares)
            fprintf(stderr, "backend %s: %s\n", name, be ? "shares no memory" : why);
        _exit(shares ? 0 : 1);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void fill(uint32_t *w, uint32_t seed)
{
    for (uint32_t i = 0; i < WORDS; i++)
        w[i] = seed * 2654435761u + i;
}

static bool matches(const uint32_t *w, uint32_t seed)
{
    for (uint32_t i = 0; i < WORDS; i++)
        if (w[i] != seed * 2654435761u + i)
            return false;
    return true;
}

/* Writes seed's pattern into shared memory through the backend's copy, or reads it back. */
static int put(struct backend *be, void *dev_ptr, uint32_t seed)
{
    uint32_t w[WORDS];
    fill(w, seed);
    struct copy_args c = {.dst = dev_ptr, .src = w, .bytes = sizeof w, .to_device = true};
    return backend_copy(be, 0, &c);
}

static int check(struct backend *be, void *dev_ptr, uint32_t seed)
{
    uint32_t w[WORDS];
    memset(w, 0xa5, sizeof w);     /* poisoned: a copy that writes nothing fails */
    struct copy_args c = {.dst = w, .src = dev_ptr, .bytes = sizeof w, .to_device = false};
    int r = backend_copy(be, 0, &c);
    return r < 0 ? r : matches(w, seed) ? 0 : -EIO;
}

static int send_fd(int sock, int fd)
{
    char byte = 'f';
    return send_packet_fd(sock, &byte, 1, fd, 0) == 1 ? 0 : -errno;
}

static int recv_fd(int sock)
{
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (!h || h->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(h), sizeof fd);
    return fd;
}

static bool send_byte(int sock, char b)
{
    return write(sock, &b, 1) == 1;
}

static char recv_byte(int sock)
{
    char b = 0;
    return read(sock, &b, 1) == 1 ? b : 0;
}

/* The exporter's side, in the child: allocates, writes seed 1, sends the fd; after the
 * importer has checked it and written seed 2, checks that; then frees and exits while the
 * importer still holds its mapping. */
static int exporter(const char *name, int sock)
{
    char why[256];
    struct backend *be = open_backend(name, why, sizeof why);
    if (!be)
        return 10;
    size_t bytes = backend_share_size(be, WORDS * sizeof(uint32_t));
    struct backend_shared s;
    int fd = -1;
    if (bytes == 0 || backend_share_alloc(be, 0, bytes, &s, &fd) < 0)
        return 11;
    if ((fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0)
        return 12;
    if (put(be, s.ptr, 1) < 0 || send_fd(sock, fd) < 0)
        return 13;
    close(fd);
    if (recv_byte(sock) != 'w')    /* the importer wrote seed 2 */
        return 14;
    if (check(be, s.ptr, 2) < 0)
        return 15;
    backend_share_free(be, 0, &s);
    backend_close(be);
    return 0;
}

static void test_export_mapped_elsewhere(const char *name)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(exporter(name, sv[1]));
    }
    close(sv[1]);
    char why[256] = "";
    struct backend *be = open_backend(name, why, sizeof why);
    assert_non_null(be);
    int fd = recv_fd(sv[0]);
    assert_true(fd >= 0);
    size_t bytes = backend_share_size(be, WORDS * sizeof(uint32_t));
    struct backend_shared s;
    assert_int_equal(backend_share_import(be, 0, fd, bytes, &s, why, sizeof why), 0);
    close(fd);
    assert_int_equal(check(be, s.ptr, 1), 0);           /* the exporter's writes, seen here */
    assert_int_equal(put(be, s.ptr, 2), 0);
    assert_true(send_byte(sv[0], 'w'));
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);               /* it saw ours, freed, and is gone */
    /* The exporter freed its allocation and exited: the import still holds the memory. */
    assert_int_equal(check(be, s.ptr, 2), 0);
    assert_int_equal(put(be, s.ptr, 3), 0);
    assert_int_equal(check(be, s.ptr, 3), 0);
    backend_share_free(be, 0, &s);
    backend_close(be);
    close(sv[0]);
}

/* Reads or writes one 32-bit counter in shared memory through the backend's copy. */
static int counter_put(struct backend *be, void *at, uint32_t v)
{
    struct copy_args c = {.dst = at, .src = &v, .bytes = sizeof v, .to_device = true};
    return backend_copy(be, 0, &c);
}

static uint32_t counter_get(struct backend *be, const void *at)
{
    uint32_t v = 0xdeadbeef;
    struct copy_args c = {.dst = &v, .src = at, .bytes = sizeof v, .to_device = false};
    return backend_copy(be, 0, &c) < 0 ? 0xdeadbeef : v;
}

/* The client's side: after "go", writes seed 9's data and only then raises the counter at
 * offset 0 to 1; then waits for gllmd's signal (7 at offset 4) before it exits. */
static int producer(const char *name, int sock)
{
    char why[256];
    struct backend *be = open_backend(name, why, sizeof why);
    if (!be)
        return 20;
    size_t bytes = backend_share_size(be, 4096 + WORDS * sizeof(uint32_t));
    struct backend_shared s;
    int fd = -1;
    if (bytes == 0 || backend_share_alloc(be, 0, bytes, &s, &fd) < 0)
        return 21;
    if (counter_put(be, s.ptr, 0) < 0 || counter_put(be, (char *)s.ptr + 4, 0) < 0 ||
        put(be, (char *)s.ptr + 4096, 1) < 0 || send_fd(sock, fd) < 0)
        return 22;
    close(fd);
    if (recv_byte(sock) != 'g')
        return 23;
    usleep(50000);                  /* let the consumer's job sit on its wait */
    if (put(be, (char *)s.ptr + 4096, 9) < 0 || counter_put(be, s.ptr, 1) < 0)
        return 24;
    for (int i = 0; i < 5000 && counter_get(be, (char *)s.ptr + 4) != 7; i++)
        usleep(1000);
    if (counter_get(be, (char *)s.ptr + 4) != 7)
        return 25;
    if (recv_byte(sock) != 'd')     /* the consumer is done with the memory */
        return 26;
    backend_share_free(be, 0, &s);
    backend_close(be);
    return 0;
}

#define CHECK(x)                                                                           \
    do {                                                                                   \
        if (!(x)) {                                                                        \
            fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #x);                \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

/* The consumer's side (gllmd's role), in a child of its own: the test process must not
 * initialise a GPU driver while it still has children to fork. 0 when every check held. */
static int consumer(const char *name, int sock)
{
    char why[256] = "";
    struct backend *be = open_backend(name, why, sizeof why);
    CHECK(be);
    CHECK(backend_has(be, BACKEND_FEAT_SYNC));
    int fd = recv_fd(sock);
    CHECK(fd >= 0);
    size_t bytes = backend_share_size(be, 4096 + WORDS * sizeof(uint32_t));
    struct backend_shared s;
    CHECK(backend_share_import(be, 0, fd, bytes, &s, why, sizeof why) == 0);
    close(fd);
    CHECK(send_byte(sock, 'g'));
    /* Reads the data once the counter says it is there: the producer's seed 9, not seed 1.
     * Into registered (pinned) memory, as gllmd's arenas are: a copy to pageable memory
     * blocks the calling thread until the stream reaches it, wait included. */
    static uint32_t w[WORDS] __attribute__((aligned(4096)));
    int pinned = backend_host_register(be, w, sizeof w);
    CHECK(pinned == 0 || pinned == -ENOTSUP);
    memset(w, 0xa5, sizeof w);
    struct backend_sync sync = {.wait = s.ptr, .wait_value = 1, .signal = (char *)s.ptr + 4,
                                .signal_value = 7, .wait_timeout_ns = 10000000000ull};
    struct copy_args c = {.dst = w, .src = (char *)s.ptr + 4096, .bytes = sizeof w,
                          .to_device = false, .exec = {.sync = &sync}};
    CHECK(backend_copy(be, 0, &c) == 0);
    CHECK(matches(w, 9));
    /* A wait for 100, which nobody writes: released after 100 ms, the job failed. */
    struct backend_sync never = {.wait = s.ptr, .wait_value = 100, .wait_timeout_ns = 100000000};
    c.exec.sync = &never;
    CHECK(backend_copy(be, 0, &c) == GLLM_EWAITTIMEOUT);
    CHECK(counter_get(be, s.ptr) == 100);               /* the release's write */
    c.exec.sync = NULL;                                      /* and the device still serves */
    memset(w, 0xa5, sizeof w);
    CHECK(backend_copy(be, 0, &c) == 0);
    CHECK(matches(w, 9));
    CHECK(send_byte(sock, 'd'));
    if (pinned == 0)
        backend_host_unregister(be, w);
    backend_share_free(be, 0, &s);
    backend_close(be);
    return 0;
}

/* A job waits on the device for a counter the client raises after writing its data, and
 * signals when done; a wait never satisfied is released at its deadline and the device goes
 * on serving. */
static void test_ordered_by_counters(const char *name)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        pid[k] = fork();
        assert_true(pid[k] >= 0);
        if (pid[k] == 0) {
            close(sv[k]);
            _exit(k == 0 ? producer(name, sv[1]) : consumer(name, sv[0]));
        }
    }
    close(sv[0]);
    close(sv[1]);
    for (int k = 0; k < 2; k++) {
        int st = 0;
        assert_int_equal(waitpid(pid[k], &st, 0), pid[k]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);           /* producer: saw the signal */
    }
}

/* Polls q until its oldest operation is done (at most 5 s): its status, or 1 on timeout.
 * cancel: as the daemon polls for a job whose client left. */
static int queue_finish(struct backend *be, struct backend_queue *q, bool cancel)
{
    for (int i = 0; i < 500000; i++) {
        int r = backend_queue_poll(be, 0, q, cancel);
        if (r != BACKEND_PENDING)
            return r;
        usleep(10);
    }
    return 1;
}

static uint32_t load32(const uint32_t *p)
{
    return atomic_load_explicit((const _Atomic uint32_t *)p, memory_order_acquire);
}

/* A client's queue (backend_api.h, "Queues"), in a child: jobs submitted ahead of their
 * counters stay pending, run in order as the counters come, signal; a wait not met by its
 * deadline, or cancelled, is released and the job fails; a copy of nothing only signals;
 * the queue holds BACKEND_QUEUE_DEPTH jobs. Host memory registered, as gllmd's arenas. */
static int queue_child(const char *name)
{
    char why[256];
    struct backend *be = open_backend(name, why, sizeof why);
    if (!be)
        return 10;
    if (!backend_has_queues(be))
        return 0;                            /* nothing to check on this backend */
    static uint32_t ctr[1024] __attribute__((aligned(4096)));
    static uint32_t in[WORDS] __attribute__((aligned(4096))), out[WORDS] __attribute__((aligned(4096)));
    void *regs[3] = {ctr, in, out};
    const size_t sizes[3] = {sizeof ctr, sizeof in, sizeof out};
    for (int i = 0; i < 3; i++) {
        int r = backend_host_register(be, regs[i], sizes[i]);
        if (r != 0 && r != -ENOTSUP)
            return 11;
    }
    void *dev = NULL;
    if (backend_dev_alloc(be, 0, sizeof in, &dev) < 0)
        return 12;
    struct backend_queue *q = NULL;
    if (backend_queue_open(be, 0, &q) < 0)
        return 13;
    fill(in, 5);
    memset(out, 0xa5, sizeof out);
    const uint64_t long_ns = 10000000000ull;
    struct backend_sync s1 = {.wait = &ctr[0], .wait_value = 1, .signal = &ctr[16],
                              .signal_value = 1, .signal_host = true, .wait_timeout_ns = long_ns};
    struct backend_sync s2 = {.wait = &ctr[1], .wait_value = 1, .signal = &ctr[17],
                              .signal_value = 2, .signal_host = true, .wait_timeout_ns = long_ns};
    struct copy_args up = {.dst = dev, .src = in, .bytes = sizeof in, .to_device = true,
                           .exec = {.sync = &s1, .queue = q}};
    struct copy_args down = {.dst = out, .src = dev, .bytes = sizeof out, .to_device = false,
                             .exec = {.sync = &s2, .queue = q}};
    if (backend_copy(be, 0, &up) != BACKEND_PENDING || backend_copy(be, 0, &down) != BACKEND_PENDING)
        return 14;
    usleep(20000);
    if (backend_queue_poll(be, 0, q, false) != BACKEND_PENDING || load32(&ctr[16]) != 0)
        return 15;                           /* held by its counter */
    atomic_store((_Atomic uint32_t *)&ctr[0], 1);
    if (queue_finish(be, q, false) != 0 || load32(&ctr[16]) != 1)
        return 16;
    usleep(20000);
    if (backend_queue_poll(be, 0, q, false) != BACKEND_PENDING || load32(&ctr[17]) != 0)
        return 17;                           /* the second waits for its own */
    atomic_store((_Atomic uint32_t *)&ctr[1], 1);
    if (queue_finish(be, q, false) != 0 || load32(&ctr[17]) != 2 || !matches(out, 5))
        return 18;
    /* A wait nobody meets: released at its deadline (its counter written), the job failed,
     * its signal written all the same. */
    struct backend_sync s3 = {.wait = &ctr[2], .wait_value = 1, .signal = &ctr[18],
                              .signal_value = 3, .signal_host = true, .wait_timeout_ns = 50000000};
    up.exec.sync = &s3;
    if (backend_copy(be, 0, &up) != BACKEND_PENDING || queue_finish(be, q, false) != GLLM_EWAITTIMEOUT ||
        load32(&ctr[2]) != 1 || load32(&ctr[18]) != 3)
        return 19;
    /* Cancelled (its client left): released at once. */
    struct backend_sync s4 = {.wait = &ctr[3], .wait_value = 1, .signal = &ctr[19],
                              .signal_value = 4, .signal_host = true, .wait_timeout_ns = long_ns};
    up.exec.sync = &s4;
    if (backend_copy(be, 0, &up) != BACKEND_PENDING || queue_finish(be, q, true) == 1 ||
        load32(&ctr[3]) != 1 || load32(&ctr[19]) != 4)
        return 20;
    /* A copy of nothing: its signal alone. */
    struct backend_sync s5 = {.signal = &ctr[20], .signal_value = 5, .signal_host = true};
    struct copy_args none = {.exec = {.sync = &s5, .queue = q}};
    if (backend_copy(be, 0, &none) != BACKEND_PENDING || queue_finish(be, q, false) != 0 ||
        load32(&ctr[20]) != 5)
        return 21;
    /* Full at BACKEND_QUEUE_DEPTH; each then cancelled. */
    struct backend_sync deep[BACKEND_QUEUE_DEPTH];
    struct copy_args deep_ops[BACKEND_QUEUE_DEPTH];   /* alive until polled, as a job's */
    for (int i = 0; i < BACKEND_QUEUE_DEPTH; i++) {
        deep[i] = (struct backend_sync){.wait = &ctr[32 + i], .wait_value = 1,
                                        .wait_timeout_ns = long_ns};
        deep_ops[i] = (struct copy_args){.exec = {.sync = &deep[i], .queue = q}};
        if (backend_copy(be, 0, &deep_ops[i]) != BACKEND_PENDING)
            return 22;
    }
    struct copy_args extra = {.exec = {.sync = &s5, .queue = q}};
    if (backend_copy(be, 0, &extra) != -EAGAIN)
        return 23;
    for (int i = 0; i < BACKEND_QUEUE_DEPTH; i++)
        if (queue_finish(be, q, true) == 1)
            return 24;
    if (backend_queue_poll(be, 0, q, false) != -ENOENT)
        return 25;                           /* nothing left in flight */
    backend_queue_close(be, 0, q);
    backend_dev_free(be, 0, dev);
    for (int i = 0; i < 3; i++)
        backend_host_unregister(be, regs[i]);
    backend_close(be);
    return 0;
}

static void test_queues(const char *name)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(queue_child(name));
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Each refusal of share_import, with the code the protocol documents, and nothing mapped. */
static void test_import_refusals(const char *name)
{
    char why[256] = "";
    struct backend *be = open_backend(name, why, sizeof why);
    assert_non_null(be);
    size_t g = backend_caps(be)->share_granularity;
    struct backend_shared s = {0};

    int pipefd[2];
    assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
    assert_int_equal(backend_share_import(be, 0, pipefd[0], g, &s, why, sizeof why),
                     GLLM_ENOTEXPORT);
    assert_true(why[0] != '\0');
    close(pipefd[0]);
    close(pipefd[1]);

    int mfd = make_memfd(g, F_SEAL_SHRINK);
    assert_true(mfd >= 0);
    int want = backend_caps(be)->share_kind == BACKEND_SHARE_MEMFD ? 0 : GLLM_ENOTEXPORT;
    int r = backend_share_import(be, 0, mfd, g, &s, why, sizeof why);
    assert_int_equal(r, want);
    if (r == 0)
        backend_share_free(be, 0, &s);
    close(mfd);

    /* An export of the backend's own kind, stated wrongly. */
    struct backend_shared mine;
    int fd = -1;
    assert_int_equal(backend_share_alloc(be, 0, g, &mine, &fd), 0);
    assert_int_equal(backend_share_import(be, 0, fd, 2 * g, &s, why, sizeof why),
                     GLLM_EARENASIZE);                  /* more than it holds */
    assert_int_equal(backend_share_import(be, 0, fd, g + 1, &s, why, sizeof why), GLLM_EPARAM);
    assert_int_equal(backend_share_import(be, 0, fd, 0, &s, why, sizeof why), GLLM_EPARAM);
    assert_int_equal(backend_share_import(be, backend_device_count(be), fd, g, &s, why,
                                          sizeof why), -ENODEV);
    close(fd);
    backend_share_free(be, 0, &mine);

    if (backend_caps(be)->share_kind == BACKEND_SHARE_MEMFD) {
        int unsealed = make_memfd(g, 0);
        assert_true(unsealed >= 0);
        assert_int_equal(backend_share_import(be, 0, unsealed, g, &s, why, sizeof why),
                         GLLM_EUNSEALED);
        close(unsealed);
    }
    backend_close(be);
}

/* Every compiled-in backend that opens; one that cannot is reported, loudly, and is a
 * failure where GLLM_TEST_BACKEND names it (the GPU machine). */
static void each_backend(void (*fn)(const char *name))
{
    int ran = 0;
    for (size_t i = 0; i < NNAMES; i++) {
        if (!usable[i]) {
            print_message("SKIPPED on backend %s: it does not open or share memory here\n",
                          names[i]);
            assert_false(strcmp(test_backend(), names[i]) == 0);
            continue;
        }
        print_message("backend %s\n", names[i]);
        fn(names[i]);
        ran++;
    }
    assert_true(ran > 0);
}

static void export_mapped_elsewhere(void **state)
{
    (void)state;
    each_backend(test_export_mapped_elsewhere);
}

static void ordered_by_counters(void **state)
{
    (void)state;
    each_backend(test_ordered_by_counters);
}

static void queues(void **state)
{
    (void)state;
    each_backend(test_queues);
}

static void import_refusals(void **state)
{
    (void)state;
    each_backend(test_import_refusals);
}

int main(void)
{
    for (size_t i = 0; i < NNAMES; i++)
        usable[i] = probe_in_child(names[i]);
    /* In this order: a process that has initialised a GPU driver cannot fork a child that
     * uses it, so the cases that only fork come first, then the one that opens a backend in
     * this process after its fork. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ordered_by_counters),
        cmocka_unit_test(queues),
        cmocka_unit_test(export_mapped_elsewhere),
        cmocka_unit_test(import_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
