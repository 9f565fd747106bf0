/* Shared memory through libgllm-client against a real gllmd (CPU backend: memfds): exports
 * mapped here, the client's memfds imported, attention over them, every refusal, and
 * nothing left behind; plus the client's fd hygiene against a scripted fake daemon. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "proto.h"
#include "testutil.h"

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Open fds of this process: a leak of one shows as a difference. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Polls status until its device_bytes and dtensors are want's: gllmd settles a closed
 * connection on its own loop, a moment after the client is gone. */
static void wait_device_usage(const char *sock, const gllm_status *want)
{
    gllm_status st = status_of(sock);
    for (int i = 0; i < 1000 && (st.device_bytes != want->device_bytes ||
                                 st.dtensors != want->dtensors); i++) {
        sleep_ms(10);
        st = status_of(sock);
    }
    if (st.device_bytes != want->device_bytes || st.dtensors != want->dtensors)
        fail_msg("gllmd holds %llu device bytes in %u tensors, want %llu in %u after 10 s",
                 (unsigned long long)st.device_bytes, st.dtensors,
                 (unsigned long long)want->device_bytes, want->dtensors);
}

/* This process's entry in status' client list, through connection c. */
static gllm_client_info own_entry(gllm_client *c)
{
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    for (int i = 0; i < st.nlisted; i++) {
        gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
        assert_int_equal(gllm_status_client(c, i, &ci), 0);
        if (ci.pid == getpid() && ci.device_bytes)
            return ci;
    }
    fail_msg("status lists no connection of pid %d holding device memory", (int)getpid());
    return (gllm_client_info){0};
}

/* ---- attention with every tensor in shared memory ---- */

enum { B = 1, H = 2, S = 64, D = 64 };
#define DT GLLM_DTYPE_F16
#define NELEM ((size_t)B * H * S * D)

/* q, k, v written through their mappings, out poisoned, attention over the four, out read
 * back through its mapping and checked against float64. */
static void attention_in_shared(gllm_client *c, gllm_memory *mem[4], void *ptr[4], uint64_t seed)
{
    for (int i = 0; i < 3; i++)
        fill_random(ptr[i], DT, NELEM, &seed);
    memset(ptr[3], 0xff, NELEM * gllm_dtype_size(DT));   /* NaN: an unwritten element fails */
    const int64_t shape[4] = {B, H, S, D};
    gllm_attention_params p = {.size = sizeof p, .flags = GLLM_ATTN_CAUSAL};
    gllm_tensor *t[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++)
        assert_int_equal(gllm_tensor_init(mem[i], 0, DT, 4, shape, t[i]), 0);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int r = gllm_attention(c, &p, &res);
    if (r != 0)
        fail_msg("attention over shared memory: %s (%s)", gllm_error_name(r),
                 gllm_client_last_error(c));
    double *want = malloc(NELEM * sizeof *want), *got = malloc(NELEM * sizeof *got);
    assert_non_null(want);
    assert_non_null(got);
    const int64_t st[4] = {H * S * D, S * D, D, 1};
    struct ref_view q = {ptr[0], DT, {st[0], st[1], st[2], st[3]}}, k = q, v = q;
    k.data = ptr[1];
    v.data = ptr[2];
    ref64_attention(B, H, H, S, S, D, q, k, v, true, 1.0 / sqrt((double)D), want, NULL);
    for (size_t i = 0; i < NELEM; i++)
        got[i] = elem_get(ptr[3], DT, (int64_t)i);
    const double err = ref64_rel_error(got, want, NELEM);
    free(want);
    free(got);
    if (!(err <= ref64_tolerance(DT).out))
        fail_msg("output through shared memory: rel err %.3g > %.3g", err, ref64_tolerance(DT).out);
}

static void test_hello_announces_share(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    gllm_caps caps = GLLM_CAPS_INIT;
    assert_int_equal(gllm_client_caps(c, &caps), 0);
    assert_string_equal(caps.share, "memfd");
    assert_int_equal(caps.share_granularity, page_size());
    gllm_disconnect(c);
}

static void test_exported_memory(void **state)
{
    (void)state;
    const gllm_status before = status_of(group_daemon.socket);
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    const size_t bytes = NELEM * gllm_dtype_size(DT);
    gllm_memory *mem[4];
    void *ptr[4];
    for (int i = 0; i < 4; i++) {
        /* Asked for one byte past a page multiple: gllmd rounds up to the granularity. */
        assert_int_equal(gllm_memory_create_shared(c, bytes + 1, 0, &mem[i]), 0);
        assert_int_equal(gllm_memory_kind_of(mem[i]), GLLM_MEMORY_SHARED);
        const size_t g = page_size(), rounded = (bytes + 1 + g - 1) / g * g;
        assert_int_equal(gllm_memory_size(mem[i]), rounded);
        assert_int_equal(gllm_memory_map(mem[i], &ptr[i]), 0);
        assert_non_null(ptr[i]);
        assert_ptr_equal(gllm_memory_data(mem[i]), ptr[i]);
        void *again;
        assert_int_equal(gllm_memory_map(mem[i], &again), 0);
        assert_ptr_equal(again, ptr[i]);
    }
    gllm_status st = status_of(group_daemon.socket);
    assert_int_equal(st.dtensors, before.dtensors + 4);
    assert_int_equal(st.device_bytes, before.device_bytes + 4 * gllm_memory_size(mem[0]));
    attention_in_shared(c, mem, ptr, 11);
    attention_in_shared(c, mem, ptr, 12);   /* the same memory again, new inputs */

    /* An ordinary device tensor to the daemon: copies to and from arenas work. */
    gllm_memory *arena;
    assert_int_equal(gllm_arena_create(c, 4096, &arena), 0);
    memset(gllm_memory_data(arena), 0x5a, 4096);
    assert_int_equal(gllm_memory_copy(c, mem[0], 64, arena, 0, 128), 0);
    for (int i = 0; i < 128; i++)
        assert_int_equal(((unsigned char *)ptr[0])[64 + i], 0x5a);
    memset(ptr[1], 0x3c, 256);
    assert_int_equal(gllm_memory_copy(c, arena, 1024, mem[1], 0, 256), 0);
    for (int i = 0; i < 256; i++)
        assert_int_equal(((unsigned char *)gllm_memory_data(arena))[1024 + i], 0x3c);
    assert_int_equal(gllm_memory_release(arena), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(gllm_memory_release(mem[i]), 0);
    gllm_disconnect(c);
    wait_device_usage(group_daemon.socket, &before);
}

/* A client memfd of bytes, sealed against shrinking, and its mapping. */
static int client_memfd(size_t bytes, void **map)
{
    int fd = make_memfd(bytes, F_SEAL_SHRINK);
    assert_true(fd >= 0);
    *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(*map != MAP_FAILED);
    return fd;
}

static void test_imported_memory(void **state)
{
    (void)state;
    const gllm_status before = status_of(group_daemon.socket);
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    const size_t g = page_size(), bytes = (NELEM * gllm_dtype_size(DT) + g - 1) / g * g;
    gllm_memory *mem[4];
    void *ptr[4];
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = client_memfd(bytes, &ptr[i]);
        assert_int_equal(gllm_memory_import(c, fds[i], bytes, 0, &mem[i]), 0);
        assert_int_equal(gllm_memory_kind_of(mem[i]), GLLM_MEMORY_SHARED);
        assert_int_equal(gllm_memory_size(mem[i]), bytes);
        assert_null(gllm_memory_data(mem[i]));
        void *p;
        assert_int_equal(gllm_memory_map(mem[i], &p), -EINVAL);   /* the caller's mapping is it */
        /* gllmd holds its own reference: the caller may close its fd at once. */
        if (i % 2)
            close(fds[i]);
    }
    gllm_status st = status_of(group_daemon.socket);
    assert_int_equal(st.dtensors, before.dtensors + 4);
    assert_int_equal(st.device_bytes, before.device_bytes + 4 * bytes);
    attention_in_shared(c, mem, ptr, 21);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gllm_memory_release(mem[i]), 0);
        if (i % 2 == 0)
            close(fds[i]);
        munmap(ptr[i], bytes);
    }
    gllm_disconnect(c);
    wait_device_usage(group_daemon.socket, &before);
}

/* ---- refusals ---- */

static void expect_import_error(gllm_client *c, int fd, size_t bytes, int code)
{
    gllm_memory *m = NULL;
    const int r = gllm_memory_import(c, fd, bytes, 0, &m);
    if (r != code)
        fail_msg("import of %zu bytes: %s (%d), want %s (%d)", bytes, gllm_error_name(r), r,
                 gllm_error_name(code), code);
    assert_null(m);
    assert_true(gllm_client_last_error(c)[0] != '\0');   /* the daemon says why */
}

static void test_import_refusals(void **state)
{
    (void)state;
    const gllm_status before = status_of(group_daemon.socket);
    const int fds_before = open_fds();
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    const size_t g = page_size();

    int unsealed = make_memfd(2 * g, 0);
    assert_true(unsealed >= 0);
    expect_import_error(c, unsealed, 2 * g, GLLM_EUNSEALED);
    close(unsealed);

    int fd = make_memfd(2 * g, F_SEAL_SHRINK);
    assert_true(fd >= 0);
    expect_import_error(c, fd, g, GLLM_EARENASIZE);        /* shorter than the memfd */
    expect_import_error(c, fd, 4 * g, GLLM_EARENASIZE);    /* longer */
    close(fd);

    fd = make_memfd(g + 100, F_SEAL_SHRINK);
    assert_true(fd >= 0);
    expect_import_error(c, fd, g + 100, GLLM_EPARAM);      /* not a multiple of the granularity */
    close(fd);

    int pipe_fds[2];
    assert_int_equal(pipe2(pipe_fds, O_CLOEXEC), 0);
    expect_import_error(c, pipe_fds[0], g, GLLM_ENOTEXPORT);
    close(pipe_fds[0]);
    close(pipe_fds[1]);

    /* The library refuses what it can see is wrong before asking. */
    gllm_memory *m = NULL;
    assert_int_equal(gllm_memory_import(c, -1, g, 0, &m), -EINVAL);
    assert_int_equal(gllm_memory_create_shared(c, 0, 0, &m), -EINVAL);
    assert_null(m);

    /* No fd at all, which the library never sends: NOFD, on a raw connection. */
    int raw = raw_connect(group_daemon.socket);
    raw_hello(raw);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "dtensor_import");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "bytes", g);
    raw_send(raw, b.data, b.len, -1);
    int64_t id;
    assert_int_equal(raw_reply(raw, &id, NULL), GLLM_ENOFD);
    assert_int_equal(id, 2);
    close(raw);

    gllm_disconnect(c);
    wait_device_usage(group_daemon.socket, &before);
    assert_int_equal(open_fds(), fds_before);
}

/* A gllmd whose sessions may hold 64 KiB of device memory. */
static void test_quota(void **state)
{
    (void)state;
    const char *backend = getenv("GLLM_TEST_BACKEND");
    if (backend && backend[0] && strcmp(backend, "cpu") != 0) {
        /* Its sizes and memfd imports are the CPU backend's (a GPU's granularity is 2 MiB
         * and it imports only its own kind of export). */
        skip();
    }
    struct daemon d;
    assert_int_equal(daemon_start_conf(&d, "max_device_bytes = 65536\n"), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), 0);

    gllm_memory *m = NULL;
    assert_int_equal(gllm_memory_create_shared(c, 128 * 1024, 0, &m), GLLM_EQUOTA);
    int fd = make_memfd(128 * 1024, F_SEAL_SHRINK);
    assert_true(fd >= 0);
    expect_import_error(c, fd, 128 * 1024, GLLM_EQUOTA);
    /* Within the quota, exported and imported memory count together. */
    gllm_memory *a, *b;
    assert_int_equal(gllm_memory_create_shared(c, 32 * 1024, 0, &a), 0);
    int fd2 = make_memfd(32 * 1024, F_SEAL_SHRINK);
    assert_true(fd2 >= 0);
    assert_int_equal(gllm_memory_import(c, fd2, 32 * 1024, 0, &b), 0);
    int fd3 = make_memfd(page_size(), F_SEAL_SHRINK);
    assert_true(fd3 >= 0);
    expect_import_error(c, fd3, page_size(), GLLM_EQUOTA);
    assert_int_equal(gllm_memory_create_shared(c, 1, 0, &m), GLLM_EQUOTA);
    assert_int_equal(gllm_memory_release(b), 0);
    assert_int_equal(gllm_memory_import(c, fd3, page_size(), 0, &b), 0);
    assert_int_equal(gllm_memory_release(a), 0);
    assert_int_equal(gllm_memory_release(b), 0);
    close(fd);
    close(fd2);
    close(fd3);
    gllm_disconnect(c);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- nothing left behind ---- */

static void test_release_and_reconnect(void **state)
{
    (void)state;
    const gllm_status before = status_of(group_daemon.socket);
    const size_t g = page_size();
    for (int round = 0; round < 2; round++) {
        gllm_client *c;
        assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
        gllm_memory *e, *i;
        void *map, *p;
        assert_int_equal(gllm_memory_create_shared(c, 3 * g, 0, &e), 0);
        assert_int_equal(gllm_memory_map(e, &p), 0);
        int fd = client_memfd(2 * g, &map);
        assert_int_equal(gllm_memory_import(c, fd, 2 * g, 0, &i), 0);
        close(fd);
        gllm_status st = status_of(group_daemon.socket);
        assert_int_equal(st.device_bytes, before.device_bytes + 5 * g);
        assert_int_equal(st.dtensors, before.dtensors + 2);
        assert_int_equal(st.exported_bytes, before.exported_bytes + 3 * g);
        assert_int_equal(st.imported_bytes, before.imported_bytes + 2 * g);
        const gllm_client_info me = own_entry(c);
        assert_int_equal(me.device_bytes, 5 * g);
        assert_int_equal(me.exported_bytes, 3 * g);
        assert_int_equal(me.imported_bytes, 2 * g);
        if (round == 0) {
            /* Released, then the connection closed. */
            assert_int_equal(gllm_memory_release(e), 0);
            assert_int_equal(gllm_memory_release(i), 0);
            st = status_of(group_daemon.socket);
            assert_int_equal(st.device_bytes, before.device_bytes);
            assert_int_equal(st.dtensors, before.dtensors);
            gllm_disconnect(c);
        } else {
            /* The connection closed first: release then frees only our side. */
            gllm_disconnect(c);
            memset(p, 1, g);   /* our mapping outlives the daemon's */
            assert_int_equal(gllm_memory_release(e), 0);
            assert_int_equal(gllm_memory_release(i), 0);
        }
        munmap(map, 2 * g);
        wait_device_usage(group_daemon.socket, &before);
    }
}

static void test_exit_without_release(void **state)
{
    (void)state;
    const gllm_status before = status_of(group_daemon.socket);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gllm_client *c;
        gllm_memory *e, *i;
        void *p, *map;
        const size_t g = page_size();
        if (gllm_connect(group_daemon.socket, &c) != 0 ||
            gllm_memory_create_shared(c, 4 * g, 0, &e) != 0 || gllm_memory_map(e, &p) != 0)
            _exit(2);
        memset(p, 7, 4 * g);
        int fd = make_memfd(4 * g, F_SEAL_SHRINK);
        if (fd < 0 || gllm_memory_import(c, fd, 4 * g, 0, &i) != 0)
            _exit(3);
        map = mmap(NULL, 4 * g, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED)
            _exit(4);
        _exit(0);   /* nothing released, nothing disconnected */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    wait_device_usage(group_daemon.socket, &before);
}

/* A client SIGKILLed while its jobs over shared memory wait for a counter it never raises:
 * another client's jobs run meanwhile (the waiting ones are still counted in flight when
 * they finish), and once the client is gone gllmd holds nothing of it. */
static void test_killed_while_waiting(void **state)
{
    (void)state;
    const gllm_status before = wait_quiet(group_daemon.socket, 0);
    enum { WAITING = 3 };
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        close(ready[0]);
        gllm_client *c;
        gllm_memory *mem[4], *counters;
        void *ptr[4];
        if (gllm_connect(group_daemon.socket, &c) != 0 ||
            gllm_arena_create(c, 4096, &counters) != 0)
            _exit(2);
        memset(gllm_memory_data(counters), 0, 4096);
        const int64_t shape[4] = {B, H, S, D};
        gllm_attention_params p = {.size = sizeof p};
        gllm_tensor *t[4] = {&p.q, &p.k, &p.v, &p.out};
        for (int i = 0; i < 4; i++)
            if (gllm_memory_create_shared(c, NELEM * gllm_dtype_size(DT), 0, &mem[i]) != 0 ||
                gllm_memory_map(mem[i], &ptr[i]) != 0 ||
                gllm_tensor_init(mem[i], 0, DT, 4, shape, t[i]) != 0)
                _exit(3);
        /* The longest wait there is: only the kill ends these jobs. */
        p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 1,
                                .timeout_ms = 600000};
        p.signal = (gllm_counter){.memory = counters, .offset = 64, .value = 1};
        uint64_t job;
        for (int i = 0; i < WAITING; i++)
            if (gllm_attention_submit(c, &p, &job) != 0)
                _exit(4);
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        if (gllm_job_poll(c, job, &res) != -EAGAIN)   /* held by its wait */
            _exit(5);
        if (write(ready[1], "x", 1) != 1)
            _exit(6);
        pause();
        _exit(7);
    }
    close(ready[1]);
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    close(ready[0]);

    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    gllm_memory *mem[4];
    void *ptr[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gllm_memory_create_shared(c, NELEM * gllm_dtype_size(DT), 0, &mem[i]), 0);
        assert_int_equal(gllm_memory_map(mem[i], &ptr[i]), 0);
    }
    for (int round = 0; round < 3; round++)
        attention_in_shared(c, mem, ptr, 40 + (uint64_t)round);
    /* Ours ran while all of the other client's still waited. */
    assert_true(status_of(group_daemon.socket).jobs_inflight >= WAITING);

    assert_int_equal(kill(kid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(kid, &st, 0), kid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    gllm_status want = before;
    want.device_bytes += 4 * NELEM * gllm_dtype_size(DT);
    want.dtensors += 4;
    wait_device_usage(group_daemon.socket, &want);   /* the child's memory is gone, ours not */
    attention_in_shared(c, mem, ptr, 50);            /* and we are still served */
    for (int i = 0; i < 4; i++)
        assert_int_equal(gllm_memory_release(mem[i]), 0);
    gllm_disconnect(c);
    const gllm_status after = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(after.device_bytes, before.device_bytes);
    assert_int_equal(after.exported_bytes, before.exported_bytes);
    assert_int_equal(after.jobs_inflight, 0);
    assert_int_equal(after.arenas, before.arenas);
}

/* ---- fds on replies, against a scripted fake daemon ---- */

/* The fake daemon answers hello, then every request with {dtensor, bytes, export} and as
 * many memfds attached as fds_for[request id] says. */
struct fake {
    const char *kind;   /* the share kind announced and exported */
    int listen_fd;
    char dir[64], path[108];
    int fds_for[16];
    pthread_t thread;
};

static void fake_reply(int conn, const char *kind, uint64_t id, int nfds, bool hello)
{
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_result(&b.pk, id);
    if (hello) {
        msgpack_pack_map(&b.pk, 5);
        proto_pack_kv_u64(&b.pk, "version", GLLM_PROTOCOL_VERSION);
        proto_pack_kv_str(&b.pk, "daemon", "fake");
        proto_pack_kv_str(&b.pk, "backend", "cpu");
        msgpack_pack_str(&b.pk, 7);
        msgpack_pack_str_body(&b.pk, "devices", 7);
        msgpack_pack_array(&b.pk, 1);
        msgpack_pack_map(&b.pk, 1);
        proto_pack_kv_u64(&b.pk, "index", 0);
        msgpack_pack_str(&b.pk, 5);
        msgpack_pack_str_body(&b.pk, "share", 5);
        msgpack_pack_map(&b.pk, 2);
        proto_pack_kv_str(&b.pk, "kind", kind);
        proto_pack_kv_u64(&b.pk, "granularity", page_size());
    } else {
        msgpack_pack_map(&b.pk, 3);
        proto_pack_kv_u64(&b.pk, "dtensor", id);
        proto_pack_kv_u64(&b.pk, "bytes", page_size());
        proto_pack_kv_str(&b.pk, "export", kind);
    }
    int fds[4];
    for (int i = 0; i < nfds; i++)
        fds[i] = make_memfd(page_size(), F_SEAL_SHRINK | F_SEAL_GROW);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctrl;
    struct iovec iov = {.iov_base = b.data, .iov_len = b.len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        memset(&ctrl, 0, sizeof ctrl);
        mh.msg_control = ctrl.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    }
    sendmsg(conn, &mh, MSG_NOSIGNAL);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    int conn = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    static char rx[PROTO_MAX_MESSAGE];
    for (ssize_t n; conn >= 0 && (n = recv(conn, rx, sizeof rx, 0)) > 0;) {
        struct proto_msg m;
        if (proto_decode(rx, (size_t)n, &m, NULL) < 0)
            break;
        const uint64_t id = m.id;
        const bool hello = strcmp(m.method, "hello") == 0;
        proto_msg_free(&m);
        fake_reply(conn, f->kind, id, id < 16 ? f->fds_for[id] : 0, hello);
    }
    if (conn >= 0)
        close(conn);
    return NULL;
}

static void fake_start(struct fake *f, const char *kind, const int *script, size_t n)
{
    *f = (struct fake){.kind = kind};
    snprintf(f->dir, sizeof f->dir, "/tmp/gllm-fake-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/fake.sock", f->dir);
    f->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", f->path);
    assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->listen_fd, 1), 0);
    memcpy(f->fds_for, script, n * sizeof *script);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

static void fake_stop(struct fake *f)
{
    assert_int_equal(pthread_join(f->thread, NULL), 0);
    close(f->listen_fd);
    unlink(f->path);
    rmdir(f->dir);
}

static void test_reply_fds(void **state)
{
    (void)state;
    const int fds_before = open_fds();
    /* Request ids: 1 hello (an fd it did not ask for), 2 a plain dtensor (the same), 3 an
     * export with two fds, 4 its free, 5 an export with none, 6 its free, 7 an export with
     * one, 8 and 9 the releases. */
    static const int script[] = {0, 1, 1, 2, 0, 0, 0, 1, 0, 0};
    struct fake f;
    fake_start(&f, "memfd", script, sizeof script / sizeof *script);
    gllm_client *c;
    assert_int_equal(gllm_connect(f.path, &c), 0);
    gllm_memory *plain, *shared = NULL;
    assert_int_equal(gllm_dtensor_create(c, 100, 0, &plain), 0);
    assert_int_equal(gllm_memory_create_shared(c, 100, 0, &shared), GLLM_EMALFORMED);
    assert_int_equal(gllm_memory_create_shared(c, 100, 0, &shared), GLLM_EMALFORMED);
    assert_null(shared);
    assert_int_equal(gllm_memory_create_shared(c, 100, 0, &shared), 0);
    void *p;
    assert_int_equal(gllm_memory_map(shared, &p), 0);
    memset(p, 9, page_size());
    /* Replies that carried fds nobody asked for: the library closed them. The mapping of the
     * one export is all that is left of the fake daemon's memfds. */
    assert_int_equal(gllm_memory_release(shared), 0);
    assert_int_equal(gllm_memory_release(plain), 0);
    gllm_disconnect(c);
    fake_stop(&f);
    assert_int_equal(open_fds(), fds_before);
}

/* A CUDA export keeps its fd until it is mapped; mapping it opens libcuda.so.1 only then.
 * Here (the fake hands over a memfd) the map fails, and release still closes the fd. */
static void test_cuda_export_unmapped(void **state)
{
    (void)state;
    const int fds_before = open_fds();
    static const int script[] = {0, 0, 1, 0};   /* 2: the export, 3: its release */
    struct fake f;
    fake_start(&f, "cuda_vmm_fd", script, sizeof script / sizeof *script);
    gllm_client *c;
    assert_int_equal(gllm_connect(f.path, &c), 0);
    gllm_caps caps = GLLM_CAPS_INIT;
    assert_int_equal(gllm_client_caps(c, &caps), 0);
    assert_string_equal(caps.share, "cuda_vmm_fd");
    gllm_memory *m;
    assert_int_equal(gllm_memory_create_shared(c, 100, 0, &m), 0);
    assert_null(gllm_memory_data(m));
    /* No libcuda here: -ELIBACC; with a driver but no context in this thread: -ENODEV. */
    void *p = NULL;
    const int r = gllm_memory_map(m, &p);
    if (r != -ELIBACC && r != -ENODEV)
        fail_msg("mapping a CUDA export without a context: %s (%d)", gllm_error_name(r), r);
    assert_null(p);
    assert_true(gllm_client_last_error(c)[0] != '\0');
    assert_int_equal(gllm_memory_release(m), 0);
    gllm_disconnect(c);
    fake_stop(&f);
    assert_int_equal(open_fds(), fds_before);
}

int main(void)
{
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_hello_announces_share),
        cmocka_unit_test(test_exported_memory),
        cmocka_unit_test(test_imported_memory),
        cmocka_unit_test(test_import_refusals),
        cmocka_unit_test(test_release_and_reconnect),
        cmocka_unit_test(test_exit_without_release),
        cmocka_unit_test(test_killed_while_waiting),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_reply_fds),
        cmocka_unit_test(test_cuda_export_unmapped),
    };
    /* The group's cases share memfds, the CPU backend's kind: on a GPU backend (the GPU
     * machine's runs) its own tests (shared_gpu) cover them. */
    const char *backend = getenv("GLLM_TEST_BACKEND");
    const bool cpu = !backend || !backend[0] || strcmp(backend, "cpu") == 0;
    int failed = cpu ? cmocka_run_group_tests_name("shared", shared, group_daemon_start,
                                                   group_daemon_stop)
                     : 0;
    if (!cpu)
        printf("shared: skipped on backend %s (memfd cases; shared_gpu covers a GPU)\n", backend);
    failed += cmocka_run_group_tests_name("shared_alone", alone, NULL, NULL);
    return failed;
}
