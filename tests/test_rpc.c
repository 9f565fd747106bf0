/* The RPC channel over a socketpair: a real server on the CPU backend, turned by hand, one
 * client per test; replies carry their request's id, refusals are counted. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "clock.h"
#include "lifecycle.h"
#include "log.h"
#include "rpc.h"
#include "scheduler.h"
#include "testutil.h"

#define WAIT_NS 5000000000ull   /* a reply not here by then fails its test */

static struct server *srv;
static uv_loop_t loop;
static char rx[PROTO_MAX_MESSAGE];

static int group_setup(void **state)
{
    (void)state;
    struct backend *be;
    struct backend_config bcfg = {.threads = 1};
    char why[256];
    if (backend_select("cpu", &bcfg, &be, why, sizeof why) < 0)
        return -1;
    log_init(LOG_CRIT);
    uv_loop_init(&loop);
    srv = calloc(1, sizeof *srv);
    struct config cfg;
    config_defaults(&cfg);
    char path[64];
    snprintf(path, sizeof path, "/tmp/gllm-test-rpc-%d.sock", (int)getpid());
    if (!srv || server_init(srv, &loop, be, &cfg, path, -1) < 0)
        return -1;
    unlink(path);   /* never connected to: the socketpairs are the clients */
    return 0;
}

/* A client: its end of a socketpair whose other end the daemon serves. */
static int connect_client(void)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
    assert_int_equal(rpc_accept(srv, sv[0]), 0);
    return sv[1];
}

/* Turns the loop until the client has a packet, and decodes it; fails the test past WAIT_NS. */
static void wait_reply(int fd, struct proto_msg *m)
{
    uint64_t until = now_ns() + WAIT_NS;
    for (;;) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = recv(fd, rx, sizeof rx, MSG_DONTWAIT);
        if (n > 0) {
            int64_t id;
            assert_int_equal(proto_decode(rx, (size_t)n, m, &id), 0);
            assert_int_equal(m->kind, PROTO_RESPONSE);
            return;
        }
        if (now_ns() > until)
            fail_msg("no reply within %llu ms", (unsigned long long)(WAIT_NS / 1000000));
        usleep(100);
    }
}

static void send_raw(int fd, const void *p, size_t n, int pass_fd)
{
    assert_int_equal(send_packet_fd(fd, p, n, pass_fd, 0), (ssize_t)n);
}

static void send_hello(int fd, uint64_t id)
{
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, "hello");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "version", GLLM_PROTOCOL_VERSION);
    send_raw(fd, b.data, b.len, -1);
}

/* A client past its hello. */
static int hello_client(void)
{
    int fd = connect_client();
    send_hello(fd, 1);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 1);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);
    return fd;
}

static void expect_error(int fd, uint64_t id, int code)
{
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, id);
    assert_int_equal(m.error_code, code);
    assert_true(m.error_message[0] != '\0');
    proto_msg_free(&m);
}

static void test_valid_request_answered_with_its_id(void **state)
{
    (void)state;
    uint64_t requests = srv->stats.requests, errors = srv->stats.errors;
    int fd = connect_client();
    send_hello(fd, 4242);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 4242);
    assert_int_equal(m.error_code, 0);
    assert_non_null(m.result);
    uint64_t version = 0;
    assert_int_equal(proto_get_u64(m.result, "version", true, &version), 0);
    assert_int_equal(version, GLLM_PROTOCOL_VERSION);
    proto_msg_free(&m);

    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 7, "status");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    wait_reply(fd, &m);
    assert_int_equal(m.id, 7);
    assert_int_equal(m.error_code, 0);
    uint64_t counted = 0;
    assert_int_equal(proto_get_u64(m.result, "requests", true, &counted), 0);
    assert_int_equal(counted, requests + 2);
    proto_msg_free(&m);
    assert_int_equal(srv->stats.requests, requests + 2);
    assert_int_equal(srv->stats.errors, errors);
    close(fd);
}

static void test_malformed_request_answered_with_its_id(void **state)
{
    (void)state;
    int fd = hello_client();
    uint64_t errors = srv->stats.errors;
    /* [0, 77, "hello", 5]: a request whose params are not a map. */
    static const uint8_t bad_params[] = {0x94, 0x00, 0x4d, 0xa5, 'h', 'e', 'l', 'l', 'o', 0x05};
    send_raw(fd, bad_params, sizeof bad_params, -1);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 77);
    assert_true(m.error_code != 0);
    proto_msg_free(&m);

    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 78, "no_such_method");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    expect_error(fd, 78, GLLM_EMETHOD);

    /* Attention without its tensors: refused by its handler, with its id. */
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 79, "attention");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    expect_error(fd, 79, GLLM_EPARAM);

    /* Not msgpack at all: no id to read, so nil. */
    static const uint8_t garbage[] = {0xc1, 0xc1, 0xc1};
    send_raw(fd, garbage, sizeof garbage, -1);
    wait_reply(fd, &m);
    assert_int_equal(m.id, PROTO_NO_ID);
    assert_true(m.error_code != 0);
    proto_msg_free(&m);
    assert_int_equal(srv->stats.errors, errors + 4);
    close(fd);
}

/* A request of `pad` bytes of payload: [0, id, "status", {"pad": bin}]. */
static size_t padded_request(struct proto_buf *b, char *big, size_t cap, uint64_t id, size_t pad)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    proto_pack_request(&pk, id, "status");
    msgpack_pack_map(&pk, 1);
    proto_pack_str(&pk, "pad");
    msgpack_pack_bin(&pk, pad);
    char *zeros = calloc(1, pad);
    msgpack_pack_bin_body(&pk, zeros, pad);
    free(zeros);
    size_t n = sb.size < cap ? sb.size : cap;
    memcpy(big, sb.data, n);
    msgpack_sbuffer_destroy(&sb);
    (void)b;
    return n;
}

/* Packets the transport or a limit refuses are still answered under the request's id when
 * its first bytes show it; and every string in the answer is UTF-8. */
static void test_refused_packets_answered_with_their_id(void **state)
{
    (void)state;
    static char big[80000];
    struct proto_buf b;
    /* Before hello, a packet over the pre-hello limit (1024 bytes by default). */
    int fd = connect_client();
    size_t n = padded_request(&b, big, sizeof big, 31, 2000);
    send_raw(fd, big, n, -1);
    expect_error(fd, 31, GLLM_ETOOBIG);
    close(fd);

    fd = hello_client();
    /* Over the 64 KiB message limit: the transport reads it cut short. */
    n = padded_request(&b, big, sizeof big, 32, 70000);
    send_raw(fd, big, n, -1);
    expect_error(fd, 32, GLLM_ETOOBIG);

    /* More than four fds. */
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 33, "status");
    msgpack_pack_map(&b.pk, 0);
    int fds[5];
    for (int i = 0; i < 5; i++)
        assert_true((fds[i] = make_memfd(4096, 0)) >= 0);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof fds)];
    } ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    struct iovec iov = {.iov_base = b.data, .iov_len = b.len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                        .msg_controllen = sizeof ctrl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    assert_int_equal(sendmsg(fd, &mh, 0), (ssize_t)b.len);
    for (int i = 0; i < 5; i++)
        close(fds[i]);
    expect_error(fd, 33, GLLM_ENOFD);

    /* Nested past the depth limit, after a readable id. */
    uint8_t deep[48] = {0x94, 0x00, 34, 0xa6, 's', 't', 'a', 't', 'u', 's', 0x81, 0xa1, 'k'};
    size_t len = 13;
    for (unsigned i = 0; i < PROTO_MAX_DEPTH; i++)
        deep[len++] = 0x91;
    deep[len++] = 0x01;
    send_raw(fd, deep, len, -1);
    expect_error(fd, 34, GLLM_ELIMIT);

    /* A method name that is not UTF-8 is echoed as UTF-8. */
    static const uint8_t bad_name[] = {0x94, 0x00, 35, 0xa2, 0xff, 0xfe, 0x80};
    send_raw(fd, bad_name, sizeof bad_name, -1);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 35);
    assert_int_equal(m.error_code, GLLM_EMETHOD);
    assert_true(proto_utf8_valid(m.error_message, strlen(m.error_message)));
    assert_non_null(strstr(m.error_message, "\xef\xbf\xbd"));
    proto_msg_free(&m);

    /* A ring whose client counters do not start at zero. */
    int rfd = make_memfd(GLLM_RING_BYTES, F_SEAL_SHRINK);
    assert_true(rfd >= 0);
    struct gllm_ring *ring = mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    assert_true(ring != MAP_FAILED);
    atomic_store(&ring->request_head, 3);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 36, "ring");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, rfd);
    expect_error(fd, 36, GLLM_EPARAM);
    munmap(ring, GLLM_RING_BYTES);
    close(rfd);
    close(fd);
}

static void test_method_before_hello_refused(void **state)
{
    (void)state;
    int fd = connect_client();
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 5, "status");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    expect_error(fd, 5, GLLM_ENOHELLO);
    close(fd);
}

static void test_limits_counted(void **state)
{
    (void)state;
    uint64_t violations = srv->stats.limit_violations;
    /* Before hello, a packet over max_prehello_bytes is refused unread. */
    int fd = connect_client();
    size_t big = srv->limits.max_prehello_bytes + 1;
    char *p = calloc(1, big);
    assert_non_null(p);
    send_raw(fd, p, big, -1);
    free(p);
    expect_error(fd, PROTO_NO_ID, GLLM_ETOOBIG);
    assert_int_equal(srv->stats.limit_violations, violations + 1);
    close(fd);

    /* A job past the per-connection limit: EBUSY with its id. */
    fd = hello_client();
    uint32_t saved = srv->limits.max_inflight;
    srv->limits.max_inflight = 0;
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 90, "attention");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    expect_error(fd, 90, GLLM_EBUSY);
    srv->limits.max_inflight = saved;
    assert_int_equal(srv->stats.limit_violations, violations + 2);

    /* An arena past the session's byte quota: EQUOTA, and the fd is not kept. */
    int mfd = make_memfd(1 << 16, F_SEAL_SHRINK);
    assert_true(mfd >= 0);
    uint64_t saved_bytes = srv->limits.max_arena_bytes;
    srv->limits.max_arena_bytes = 4096;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 91, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", 1 << 16);
    send_raw(fd, b.data, b.len, mfd);
    close(mfd);
    expect_error(fd, 91, GLLM_EQUOTA);
    srv->limits.max_arena_bytes = saved_bytes;
    assert_int_equal(srv->stats.limit_violations, violations + 3);
    assert_int_equal(srv->stats.regions.arenas, 0);
    close(fd);
}

static void send_status(int fd, uint64_t id)
{
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, "status");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
}

/* Requests through the shared-memory ring keep their place among socket packets, are
 * counted, and a slot that makes no sense gets an error reply. */
static void test_ring_requests_in_socket_order(void **state)
{
    (void)state;
    int fd = hello_client();                              /* socket packet 1 */
    int rfd = make_memfd(GLLM_RING_BYTES, F_SEAL_SHRINK);
    assert_true(rfd >= 0);
    struct gllm_ring *ring = mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    assert_true(ring != MAP_FAILED);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 20, "ring");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, rfd);                     /* socket packet 2 */
    close(rfd);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 20);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);

    uint64_t requests = srv->stats.requests, ring_requests = srv->stats.ring_requests;
    /* Status 21 in the ring after two socket packets, then status 22 by the socket: 21
     * must be answered first, though only the socket packet wakes the daemon. */
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 21, "status");
    msgpack_pack_map(&b.pk, 0);
    ring->request[0].after = 2;
    ring->request[0].len = (uint32_t)b.len;
    memcpy(ring->request[0].data, b.data, b.len);
    atomic_store(&ring->request_head, 1);
    send_status(fd, 22);                                  /* socket packet 3 */
    wait_reply(fd, &m);
    assert_int_equal(m.id, 21);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);
    wait_reply(fd, &m);
    assert_int_equal(m.id, 22);
    proto_msg_free(&m);
    assert_int_equal(srv->stats.requests, requests + 2);
    assert_int_equal(srv->stats.ring_requests, ring_requests + 1);
    assert_int_equal(atomic_load(&ring->request_tail), 1);

    /* An empty slot, found when the client's wake-up arrives: an error with no id. */
    ring->request[1].after = 3;
    ring->request[1].len = 0;
    atomic_store(&ring->request_head, 2);
    proto_buf_init(&b);
    proto_pack_notify(&b.pk, "ring_wake");
    msgpack_pack_map(&b.pk, 0);
    send_raw(fd, b.data, b.len, -1);
    expect_error(fd, PROTO_NO_ID, GLLM_EMALFORMED);
    munmap(ring, GLLM_RING_BYTES);
    close(fd);
}

static struct proto_tensor tensor(uint32_t arena, uint64_t offset, int64_t H, int64_t S,
                                  int64_t D)
{
    struct proto_tensor t = {.arena = arena, .offset = offset, .dtype = GLLM_DTYPE_F32,
                             .rank = 4, .shape = {1, H, S, D}};
    proto_tensor_contiguous(&t);
    return t;
}

/* A job end to end: the reply comes from the scheduler, with its id, and the job is
 * settled (counted done, its arena reference dropped) once the loop has turned. */
static void test_job_reply_carries_its_id(void **state)
{
    (void)state;
    int fd = hello_client();
    const size_t bytes = 1 << 16;
    int mfd = make_memfd(bytes, F_SEAL_SHRINK);
    assert_true(mfd >= 0);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 10, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", bytes);
    send_raw(fd, b.data, b.len, mfd);
    close(mfd);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.id, 10);
    assert_int_equal(m.error_code, 0);
    uint64_t arena = 0;
    assert_int_equal(proto_get_u64(m.result, "arena", true, &arena), 0);
    proto_msg_free(&m);

    uint64_t done = srv->stats.jobs_done;
    struct proto_attention pa = {0};
    const uint64_t t = 2 * 16 * 32 * 4;   /* H=2, S=16, D=32, f32 */
    pa.q = tensor((uint32_t)arena, 0, 2, 16, 32);
    pa.k = tensor((uint32_t)arena, t, 2, 16, 32);
    pa.v = tensor((uint32_t)arena, 2 * t, 2, 16, 32);
    pa.out = tensor((uint32_t)arena, 3 * t, 2, 16, 32);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 11, "attention");
    proto_pack_attention(&b.pk, &pa);
    send_raw(fd, b.data, b.len, -1);
    wait_reply(fd, &m);
    assert_int_equal(m.id, 11);
    assert_int_equal(m.error_code, 0);
    uint64_t job_ns = 0;
    assert_int_equal(proto_get_u64(m.result, "job_ns", true, &job_ns), 0);
    proto_msg_free(&m);
    uint64_t until = now_ns() + WAIT_NS;
    while (sched_unsettled(srv->sched) > 0 && now_ns() < until) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(100);
    }
    assert_int_equal(sched_unsettled(srv->sched), 0);
    assert_int_equal(srv->stats.jobs_done, done + 1);
    assert_int_equal(srv->stats.jobs_inflight, 0);

    /* The client goes: its arena with it. */
    close(fd);
    until = now_ns() + WAIT_NS;
    while (srv->stats.regions.arenas > 0 && now_ns() < until) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(100);
    }
    assert_int_equal(srv->stats.regions.arenas, 0);
    assert_int_equal(srv->stats.regions.bytes_mapped, 0);
}

/* An attention job of [1, 2, 16, 32] f32 in arena at 0, with an optional wait (wait_value
 * >= 0, counter at wait_off, timeout_ms if nonzero) and signal (counter at sig_off). */
static void pack_ordered_job(struct proto_buf *b, uint64_t id, uint64_t arena, int64_t wait_value,
                             uint64_t wait_off, uint64_t timeout_ms, int64_t sig_value,
                             uint64_t sig_off)
{
    const uint64_t t = 2 * 16 * 32 * 4;
    struct proto_tensor q = tensor((uint32_t)arena, 0, 2, 16, 32),
                        k = tensor((uint32_t)arena, t, 2, 16, 32),
                        v = tensor((uint32_t)arena, 2 * t, 2, 16, 32),
                        o = tensor((uint32_t)arena, 3 * t, 2, 16, 32);
    proto_buf_init(b);
    proto_pack_request(&b->pk, id, "attention");
    msgpack_pack_map(&b->pk, 4 + (wait_value >= 0) + (sig_value >= 0));
    proto_pack_str(&b->pk, "q"), proto_pack_tensor(&b->pk, &q);
    proto_pack_str(&b->pk, "k"), proto_pack_tensor(&b->pk, &k);
    proto_pack_str(&b->pk, "v"), proto_pack_tensor(&b->pk, &v);
    proto_pack_str(&b->pk, "out"), proto_pack_tensor(&b->pk, &o);
    if (wait_value >= 0) {
        proto_pack_str(&b->pk, "wait");
        msgpack_pack_map(&b->pk, 3 + (timeout_ms > 0));
        proto_pack_kv_u64(&b->pk, "arena", arena);
        proto_pack_kv_u64(&b->pk, "offset", wait_off);
        proto_pack_kv_u64(&b->pk, "value", (uint64_t)wait_value);
        if (timeout_ms)
            proto_pack_kv_u64(&b->pk, "timeout_ms", timeout_ms);
    }
    if (sig_value >= 0) {
        proto_pack_str(&b->pk, "signal");
        msgpack_pack_map(&b->pk, 3);
        proto_pack_kv_u64(&b->pk, "arena", arena);
        proto_pack_kv_u64(&b->pk, "offset", sig_off);
        proto_pack_kv_u64(&b->pk, "value", (uint64_t)sig_value);
    }
}

/* A client with a registered 64 KiB arena that the test maps too; returns its id. */
static uint64_t client_arena(int fd, uint64_t id, uint8_t **map)
{
    const size_t bytes = 1 << 16;
    int mfd = make_memfd(bytes, F_SEAL_SHRINK);
    assert_true(mfd >= 0);
    *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    assert_true(*map != MAP_FAILED);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", bytes);
    send_raw(fd, b.data, b.len, mfd);
    close(mfd);
    struct proto_msg m;
    wait_reply(fd, &m);
    assert_int_equal(m.error_code, 0);
    uint64_t arena = 0;
    assert_int_equal(proto_get_u64(m.result, "arena", true, &arena), 0);
    proto_msg_free(&m);
    return arena;
}

/* Jobs ordered with their client through counters in its arena: a job waits for its
 * client's counter while another client's job runs past it, runs when the counter is
 * raised, and signals; a wait nobody satisfies fails at its deadline and signals anyway. */
static void test_jobs_ordered_by_counters(void **state)
{
    (void)state;
    int a = hello_client(), bfd = hello_client();
    uint8_t *amap, *bmap;
    uint64_t aa = client_arena(a, 40, &amap), ba = client_arena(bfd, 41, &bmap);
    _Atomic uint32_t *wait = (_Atomic uint32_t *)(void *)(amap + 60000),
                     *sig = (_Atomic uint32_t *)(void *)(amap + 60004);
    atomic_store(wait, 0), atomic_store(sig, 0);
    struct proto_buf b;
    pack_ordered_job(&b, 42, aa, 1, 60000, 0, 5, 60004);
    send_raw(a, b.data, b.len, -1);
    pack_ordered_job(&b, 43, ba, -1, 0, 0, -1, 0);      /* another client, no wait */
    send_raw(bfd, b.data, b.len, -1);
    struct proto_msg m;
    wait_reply(bfd, &m);                               /* runs while the first one waits */
    assert_int_equal(m.id, 43);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);
    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(recv(a, rx, sizeof rx, MSG_DONTWAIT), -1);   /* still waiting */
    assert_int_equal(atomic_load(sig), 0);
    atomic_store(wait, 1);                             /* the client's producer is done */
    wait_reply(a, &m);
    assert_int_equal(m.id, 42);
    assert_int_equal(m.error_code, 0);
    proto_msg_free(&m);
    assert_int_equal(atomic_load(sig), 5);

    pack_ordered_job(&b, 44, aa, 2, 60000, 50, 6, 60004);   /* 2 never comes */
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 44, GLLM_EWAITTIMEOUT);
    assert_int_equal(atomic_load(sig), 6);              /* signalled all the same */

    pack_ordered_job(&b, 45, 99, 1, 60000, 0, -1, 0);   /* no such arena */
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 45, GLLM_ENOARENA);
    pack_ordered_job(&b, 46, aa, 1, 60001, 0, -1, 0);   /* not a 4-byte slot */
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 46, GLLM_EBOUNDS);
    pack_ordered_job(&b, 47, aa, -1, 0, 0, 5, 65536);   /* past the arena */
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 47, GLLM_EBOUNDS);
    pack_ordered_job(&b, 48, aa, (int64_t)1 << 32, 60000, 0, -1, 0);
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 48, GLLM_EPARAM);
    pack_ordered_job(&b, 49, aa, 1, 60000, 600001, -1, 0);
    send_raw(a, b.data, b.len, -1);
    expect_error(a, 49, GLLM_EPARAM);
    munmap(amap, 1 << 16);
    munmap(bmap, 1 << 16);
    close(a);
    close(bfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_request_answered_with_its_id),
        cmocka_unit_test(test_malformed_request_answered_with_its_id),
        cmocka_unit_test(test_method_before_hello_refused),
        cmocka_unit_test(test_refused_packets_answered_with_their_id),
        cmocka_unit_test(test_limits_counted),
        cmocka_unit_test(test_ring_requests_in_socket_order),
        cmocka_unit_test(test_job_reply_carries_its_id),
        cmocka_unit_test(test_jobs_ordered_by_counters),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
