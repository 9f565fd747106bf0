/* The scene of the fault tests (tests/test_fault.c on the CPU backend, tests/gpu/fault_gpu.c
 * on a GPU): gllmd-fault, client A on a raw connection that arms debug_fault, client B with
 * device tensors through the library, and what status says of the device. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fault_scene.h"

const struct job_spec SPEC = {.B = 1, .Hq = 2, .Hkv = 2, .Sq = 64, .Skv = 256, .D = 64,
                              .dtype = GLLM_DTYPE_F32, .causal = true};

/* gllmd-fault, unless GLLMD_FAULT_PATH names another (the GPU machine's carried build). */
int start_fault_daemon(struct daemon *d, const char *conf_lines)
{
    const char *path = getenv("GLLMD_FAULT_PATH") ? getenv("GLLMD_FAULT_PATH") : GLLMD_FAULT_PATH;
    setenv("GLLMD_PATH", path, 1);
    return daemon_start_conf(d, conf_lines);
}

int wait_daemon_exit(struct daemon *d, int timeout_ms)
{
    for (int i = 0; i < timeout_ms * 10; i++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    }
    return -ETIMEDOUT;
}

int restart_fault_daemon(struct daemon *d, const char *conf_lines)
{
    const char *path = getenv("GLLMD_FAULT_PATH") ? getenv("GLLMD_FAULT_PATH") : GLLMD_FAULT_PATH;
    char conf[128];
    snprintf(conf, sizeof conf, "%s/restart.conf", d->dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs(conf_lines, f);
    fclose(f);
    const char *argv[] = {path, "--socket", d->socket, "--threads", "2", "--backend",
                          test_backend(), "-c", conf, NULL};
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    /* Looked at every 100 us: the restart is what the fault tests time. */
    int r = -ETIMEDOUT;
    for (int i = 0; i < 100000; i++) {
        if (daemon_socket_answers(d->socket)) {
            r = 0;
            break;
        }
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            r = -ECHILD;
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
    }
    unlink(conf);
    return r;
}

int daemon_fds(const struct daemon *d)
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
int settled_fds(const struct daemon *d)
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
uint64_t device_used(const char *sock)
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

uint64_t device_resets(const char *sock, char *reason, size_t len, uint64_t *reset_ns)
{
    return device_resets_on(sock, 0, reason, len, reset_ns);
}

uint64_t device_resets_on(const char *sock, int dev, char *reason, size_t len,
                          uint64_t *reset_ns)
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
    assert_true(dev >= 0 && devs->via.array.size > (uint32_t)dev);
    const msgpack_object *d = &devs->via.array.ptr[dev];
    uint64_t resets = 0;
    assert_int_equal(proto_get_u64(d, "resets", true, &resets), 0);
    if (reason)
        assert_int_equal(proto_get_str(d, "last_reset_reason", true, reason, len), 0);
    if (reset_ns)
        assert_int_equal(proto_get_u64(d, "last_reset_ns", true, reset_ns), 0);
    proto_msg_free(&m);
    close(fd);
    return resets;
}

void raw_client_open(struct raw_client *a, const char *sock)
{
    const size_t size = 4 * 2 * 64 * 64 * 4;
    a->fd = raw_connect(sock);
    raw_hello(a->fd);
    a->memfd = make_memfd(size, F_SEAL_SHRINK);
    assert_true(a->memfd >= 0);
    a->arena = raw_register(a->fd, a->memfd, size, 2);
    a->next_id = 10;
    /* A reply that never comes fails the test instead of hanging it. */
    struct timeval limit = {.tv_sec = 60};
    assert_int_equal(setsockopt(a->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit), 0);
}

void raw_client_close(struct raw_client *a)
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

int raw_debug_fault(struct raw_client *a, const char *kind)
{
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, a->next_id++, "debug_fault");
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_str(&b.pk, "kind", kind);
    proto_pack_kv_u64(&b.pk, "device", 0);
    return raw_call(a, &b, NULL, 0);
}

int raw_attention(struct raw_client *a, char *msg, size_t len)
{
    struct proto_attention job = raw_job(a->arena, 64);
    struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, a->next_id++, "attention");
    proto_pack_attention(&b.pk, &job);
    return raw_call(a, &b, msg, len);
}

static size_t kv_bytes(void)
{
    return (size_t)(SPEC.B * SPEC.Hkv * SPEC.Skv * SPEC.D) * gllm_dtype_size(SPEC.dtype);
}

/* (Re)makes the device tensors and copies K and V in; 0 or the first error. */
int dev_job_upload(gllm_client *c, struct dev_job *d)
{
    int r;
    if ((r = gllm_dtensor_create(c, kv_bytes(), d->device, &d->kd)) < 0 ||
        (r = gllm_dtensor_create(c, kv_bytes(), d->device, &d->vd)) < 0)
        return r;
    if ((r = gllm_memory_copy(c, d->kd, 0, d->j.arena, d->k_off, kv_bytes())) < 0 ||
        (r = gllm_memory_copy(c, d->vd, 0, d->j.arena, d->v_off, kv_bytes())) < 0)
        return r;
    int64_t ks[4] = {SPEC.B, SPEC.Hkv, SPEC.Skv, SPEC.D};
    gllm_tensor_init(d->kd, 0, SPEC.dtype, 4, ks, &d->j.p.k);
    gllm_tensor_init(d->vd, 0, SPEC.dtype, 4, ks, &d->j.p.v);
    return 0;
}

void dev_job_setup(gllm_client *c, struct dev_job *d, uint64_t seed)
{
    dev_job_setup_on(c, d, seed, 0);
}

void dev_job_setup_on(gllm_client *c, struct dev_job *d, uint64_t seed, int device)
{
    d->device = device;
    assert_int_equal(job_setup(c, &d->j, &SPEC, seed), 0);
    d->k_off = d->j.p.k.offset;
    d->v_off = d->j.p.v.offset;
    assert_int_equal(dev_job_upload(c, d), 0);
}

int dev_job_run(gllm_client *c, struct dev_job *d)
{
    job_poison(&d->j);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int r = gllm_attention(c, &d->j.p, &res);
    if (r == 0)
        assert_true(job_output_ok(&d->j));
    return r;
}

void dev_job_free(struct dev_job *d)
{
    assert_int_equal(gllm_memory_release(d->kd), 0);
    assert_int_equal(gllm_memory_release(d->vd), 0);
    assert_int_equal(gllm_memory_release(d->j.arena), 0);
}
