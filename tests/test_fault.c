/* One client's fault is not every client's (docs/hardening.md, "Faults and resets"): against
 * gllmd-fault (debug_fault on), client A's job faults or hangs; A gets the error, the device
 * is reset, client B keeps being served, B's old device tensors answer DEVLOST and are made
 * again, and nothing leaks. Also: out of device memory is a clean DEVMEM, and a release
 * gllmd has no debug_fault. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "proto.h"
#include "testutil.h"

static const struct job_spec SPEC = {.B = 1, .Hq = 2, .Hkv = 2, .Sq = 64, .Skv = 256, .D = 64,
                                     .dtype = GLLM_DTYPE_F32, .causal = true};

/* gllmd-fault, unless GLLMD_FAULT_PATH names another (the GPU machine's carried build). */
static int start_fault_daemon(struct daemon *d, const char *conf_lines)
{
    const char *path = getenv("GLLMD_FAULT_PATH") ? getenv("GLLMD_FAULT_PATH") : GLLMD_FAULT_PATH;
    setenv("GLLMD_PATH", path, 1);
    static char conf[128];
    snprintf(conf, sizeof conf, "/tmp/gllm-fault-conf-%d", (int)getpid());
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs(conf_lines, f);
    fclose(f);
    const char *extra[] = {"-c", conf, NULL};
    int r = daemon_start(d, extra);
    unlink(conf);
    return r;
}

static int daemon_fds(const struct daemon *d)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* The daemon's fds once the connections the helpers made have closed on its side: the same
 * count twice 100 ms apart, within 3 s. */
static int settled_fds(const struct daemon *d)
{
    int prev = daemon_fds(d);
    for (int i = 0; i < 30; i++) {
        sleep_ms(100);
        int n = daemon_fds(d);
        if (n == prev)
            return n;
        prev = n;
    }
    fail_msg("gllmd's fd count did not settle");
    return -1;
}

/* Device 0's bytes in use, as status reports them. */
static uint64_t device_used(const char *sock)
{
    gllm_client *c = NULL;
    assert_int_equal(gllm_connect(sock, &c), 0);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    uint64_t used = 0, total = 0;
    assert_int_equal(gllm_status_device_memory(c, 0, &used, &total), 0);
    gllm_disconnect(c);
    return used;
}

/* Device 0's "resets" and "last_reset_reason" from a raw status. */
static uint64_t device_resets(const char *sock, char *reason, size_t len)
{
    int fd = raw_connect(sock);
    raw_hello(fd);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "status");
    msgpack_pack_map(&b.pk, 0);
    raw_send(fd, b.data, b.len, -1);
    static char rx[PROTO_MAX_MESSAGE];
    ssize_t n = recv(fd, rx, sizeof rx, 0);
    assert_true(n > 0);
    struct proto_msg m;
    assert_int_equal(proto_decode(rx, (size_t)n, &m, NULL), 0);
    assert_int_equal(m.error_code, 0);
    const msgpack_object *devs = proto_map_get(m.result, "devices");
    assert_non_null(devs);
    assert_int_equal(devs->type, MSGPACK_OBJECT_ARRAY);
    assert_true(devs->via.array.size >= 1);
    uint64_t resets = 0;
    assert_int_equal(proto_get_u64(&devs->via.array.ptr[0], "resets", true, &resets), 0);
    if (reason)
        assert_int_equal(proto_get_str(&devs->via.array.ptr[0], "last_reset_reason", true,
                                       reason, len), 0);
    proto_msg_free(&m);
    close(fd);
    return resets;
}

/* Client A: a raw connection (debug_fault arms the connection's next job) with one arena. */
struct raw_client {
    int fd, memfd;
    uint32_t arena;
    uint64_t next_id;
};

static void raw_client_open(struct raw_client *a, const char *sock)
{
    const size_t size = 4 * 2 * 64 * 64 * 4;
    a->fd = raw_connect(sock);
    raw_hello(a->fd);
    a->memfd = make_memfd(size, F_SEAL_SHRINK);
    assert_true(a->memfd >= 0);
    a->arena = raw_register(a->fd, a->memfd, size, 2);
    a->next_id = 10;
}

static void raw_client_close(struct raw_client *a)
{
    close(a->fd);
    close(a->memfd);
}

/* One request and its reply's code (the message in msg). */
static int raw_call(struct raw_client *a, struct proto_buf *b, char *msg, size_t len)
{
    raw_send(a->fd, b->data, b->len, -1);
    static char rx[PROTO_MAX_MESSAGE];
    ssize_t n = recv(a->fd, rx, sizeof rx, 0);
    assert_true(n > 0);
    struct proto_msg m;
    assert_int_equal(proto_decode(rx, (size_t)n, &m, NULL), 0);
    int code = m.error_code;
    if (msg)
        snprintf(msg, len, "%s", code ? m.error_message : "");
    proto_msg_free(&m);
    return code;
}

static int raw_debug_fault(struct raw_client *a, const char *kind)
{
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, a->next_id++, "debug_fault");
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_str(&b.pk, "kind", kind);
    proto_pack_kv_u64(&b.pk, "device", 0);
    return raw_call(a, &b, NULL, 0);
}

static int raw_attention(struct raw_client *a, char *msg, size_t len)
{
    struct proto_attention job = raw_job(a->arena, 64);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, a->next_id++, "attention");
    proto_pack_attention(&b.pk, &job);
    return raw_call(a, &b, msg, len);
}

/* Client B's attention with K and V in device tensors made from its arena. */
struct dev_job {
    struct live_job j;
    gllm_memory *kd, *vd;
    uint64_t k_off, v_off;      /* K and V in the arena */
};

static size_t kv_bytes(void)
{
    return (size_t)(SPEC.B * SPEC.Hkv * SPEC.Skv * SPEC.D) * gllm_dtype_size(SPEC.dtype);
}

/* (Re)makes the device tensors and copies K and V in; 0 or the first error. */
static int dev_job_upload(gllm_client *c, struct dev_job *d)
{
    int r;
    if ((r = gllm_dtensor_create(c, kv_bytes(), 0, &d->kd)) < 0 ||
        (r = gllm_dtensor_create(c, kv_bytes(), 0, &d->vd)) < 0)
        return r;
    if ((r = gllm_memory_copy(c, d->kd, 0, d->j.arena, d->k_off, kv_bytes())) < 0 ||
        (r = gllm_memory_copy(c, d->vd, 0, d->j.arena, d->v_off, kv_bytes())) < 0)
        return r;
    int64_t ks[4] = {SPEC.B, SPEC.Hkv, SPEC.Skv, SPEC.D};
    gllm_tensor_init(d->kd, 0, SPEC.dtype, 4, ks, &d->j.p.k);
    gllm_tensor_init(d->vd, 0, SPEC.dtype, 4, ks, &d->j.p.v);
    return 0;
}

static void dev_job_setup(gllm_client *c, struct dev_job *d, uint64_t seed)
{
    assert_int_equal(job_setup(c, &d->j, &SPEC, seed), 0);
    d->k_off = d->j.p.k.offset;
    d->v_off = d->j.p.v.offset;
    assert_int_equal(dev_job_upload(c, d), 0);
}

static int dev_job_run(gllm_client *c, struct dev_job *d)
{
    job_poison(&d->j);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int r = gllm_attention(c, &d->j.p, &res);
    if (r == 0)
        assert_true(job_output_ok(&d->j));
    return r;
}

static void dev_job_free(struct dev_job *d)
{
    assert_int_equal(gllm_memory_release(d->kd), 0);
    assert_int_equal(gllm_memory_release(d->vd), 0);
    assert_int_equal(gllm_memory_release(d->j.arena), 0);
}

/* The whole scene for one kind of fault: A's armed job fails with want, B is served
 * throughout and after, B's device tensors are lost and made again, nothing leaks. */
static void scene(const char *kind, int want, const char *conf, const char *reason_has)
{
    struct daemon d;
    assert_int_equal(start_fault_daemon(&d, conf), 0);
    const uint64_t used0 = device_used(d.socket);
    const int fds0 = settled_fds(&d);
    assert_int_equal(device_resets(d.socket, NULL, 0), 0);

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
    assert_int_equal(device_resets(d.socket, reason, sizeof reason), 1);
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
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_trap_contained(void **state)
{
    (void)state;
    scene("trap", GLLM_EDEVLOST, "", "trapped");
}

static void test_oob_contained(void **state)
{
    (void)state;
    scene("oob", GLLM_EDEVLOST, "", "unmapped");
}

/* A job that never ends: the watchdog (300 ms here) fails it and resets the device. */
static void test_hang_watchdog(void **state)
{
    (void)state;
    scene("spin", GLLM_EJOBTIMEOUT, "watchdog_ms = 300\n", "watchdog");
}

/* Tensors made after a reset are whole; a lost tensor freed while another client holds
 * jobs works; and a device tensor larger than the device is DEVMEM with nothing half made. */
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trap_contained),
        cmocka_unit_test(test_oob_contained),
        cmocka_unit_test(test_hang_watchdog),
        cmocka_unit_test(test_devmem_clean),
        cmocka_unit_test(test_release_has_no_debug_fault),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
