/* Test helpers: a real gllmd per test or group, its status, raw protocol access, dense jobs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "proto.h"
#include "testutil.h"

const char *test_backend(void)
{
    const char *b = getenv("GLLM_TEST_BACKEND");
    return b && b[0] ? b : "cpu";
}

void skip_on_slow_device(const char *why)
{
    const char *slow = getenv("GLLM_TEST_SLOW_DEVICE");
    if (slow && slow[0] && strcmp(slow, "0") != 0) {
        fprintf(stderr, "SKIPPED on a slow device (%s backend, GLLM_TEST_SLOW_DEVICE): %s\n",
                test_backend(), why);
        skip();
    }
}

bool daemon_socket_answers(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

long daemon_rss_kib(const struct daemon *d)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)d->pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

long daemon_child_pid(const struct daemon *d)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)d->pid);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    long pid = -1;
    struct dirent *e;
    while (pid < 0 && (e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char kids[384];
        snprintf(kids, sizeof kids, "%s/%s/children", path, e->d_name);
        FILE *f = fopen(kids, "r");
        if (!f)
            continue;
        if (fscanf(f, "%ld", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    closedir(dir);
    return pid;
}

int daemon_start(struct daemon *d, const char *const *extra)
{
    return daemon_start_env(d, extra, NULL);
}

int daemon_start_conf(struct daemon *d, const char *text)
{
    char conf[] = "/tmp/gllm-conf-XXXXXX";
    int fd = mkstemp(conf);
    if (fd < 0)
        return -errno;
    const size_t len = strlen(text);
    const bool written = write(fd, text, len) == (ssize_t)len;
    close(fd);
    const char *extra[] = {"--config", conf, NULL};
    int r = written ? daemon_start(d, extra) : -EIO;
    unlink(conf);
    return r;
}

int daemon_start_env(struct daemon *d, const char *const *extra, const char *const *env)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/gllm-test-XXXXXX");
    if (!mkdtemp(d->dir))
        return -errno;
    snprintf(d->socket, sizeof d->socket, "%s/gllmd.sock", d->dir);
    /* GLLMD_PATH and GLLM_TEST_BACKEND let scripts/gpu-check.sh run the same tests
     * from a carried build against the CUDA backend. */
    const char *path = getenv("GLLMD_PATH") ? getenv("GLLMD_PATH") : GLLMD_PATH;
    /* GLLMD_WRAPPER runs gllmd under a tool, e.g. "valgrind --error-exitcode=99". */
    const char *argv[48];
    int n = 0;
    static char wrapper[512];
    const char *w = getenv("GLLMD_WRAPPER");
    if (w && w[0]) {
        snprintf(wrapper, sizeof wrapper, "%s", w);
        for (char *save = NULL, *tok = strtok_r(wrapper, " ", &save); tok && n < 16;
             tok = strtok_r(NULL, " ", &save))
            argv[n++] = tok;
    }
    const char *exe = n ? argv[0] : path;
    const char *base[] = {path, "--socket", d->socket, "--threads", "2", "--backend",
                          test_backend()};
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        argv[n++] = base[i];
    for (int i = 0; extra && extra[i] && n < 47; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid < 0)
        return -errno;
    if (d->pid == 0) {
        /* A test that fails half way never leaves a daemon behind. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(exe, (char *const *)argv);
        _exit(127);
    }
    /* Ready when the socket answers; give up after 10 s (60 s under a wrapper). */
    for (int i = 0; i < (n && w && w[0] ? 6000 : 1000); i++) {
        if (daemon_socket_answers(d->socket))
            return 0;
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;   /* reaped: never signal that pid again */
            return -ECHILD;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -ETIMEDOUT;
}

int daemon_stop(struct daemon *d)
{
    int status = -1;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        if (waitpid(d->pid, &status, 0) < 0)
            status = -1;
        d->pid = 0;
    }
    unlink(d->socket);
    rmdir(d->dir);
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct daemon group_daemon;

int group_daemon_start(void **state)
{
    (void)state;
    return daemon_start(&group_daemon, NULL) == 0 ? 0 : -1;
}

int group_daemon_stop(void **state)
{
    (void)state;
    return daemon_stop(&group_daemon) == 0 ? 0 : -1;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

gllm_status status_of(const char *sock)
{
    gllm_client *c;
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_connect(sock, &c), 0);
    assert_int_equal(gllm_status_get(c, &st), 0);
    gllm_disconnect(c);
    return st;
}

gllm_status wait_quiet(const char *sock, uint32_t clients)
{
    gllm_status st = status_of(sock);
    for (int i = 0; i < 3000 && (st.clients > clients + 1 || st.arenas || st.dtensors ||
                                 st.jobs_inflight); i++) {
        sleep_ms(10);
        st = status_of(sock);
    }
    if (st.clients > clients + 1 || st.arenas || st.dtensors || st.jobs_inflight)
        fail_msg("gllmd still holds %u clients (want %u), %u arenas, %u device tensors, %llu "
                 "jobs after 30 s", st.clients - 1, clients, st.arenas, st.dtensors,
                 (unsigned long long)st.jobs_inflight);
    return st;
}

gllm_client *connect_until(const char *sock, int while_code, int timeout_ms)
{
    gllm_client *c = NULL;
    int r = while_code;
    for (int waited = 0; r == while_code && waited <= timeout_ms; waited += 10) {
        r = gllm_connect(sock, &c);
        if (r == while_code)
            sleep_ms(10);
    }
    if (r != 0)
        fail_msg("connecting to %s: %s after %d ms", sock, gllm_error_name(r), timeout_ms);
    return c;
}

int raw_connect(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

void raw_send(int fd, const void *p, size_t n, int pass_fd)
{
    assert_int_equal(send_packet_fd(fd, p, n, pass_fd, 0), (ssize_t)n);
}

int raw_reply(int fd, int64_t *id, uint64_t *arena_out)
{
    static char rx[PROTO_MAX_MESSAGE];
    ssize_t n = recv(fd, rx, sizeof rx, 0);
    assert_true(n > 0);
    struct proto_msg m;
    assert_int_equal(proto_decode(rx, (size_t)n, &m, NULL), 0);
    assert_int_equal(m.kind, PROTO_RESPONSE);
    *id = m.id == PROTO_NO_ID ? -1 : (int64_t)m.id;
    int code = m.error_code;
    if (code == 0 && arena_out)
        proto_get_u64(m.result, "arena", false, arena_out);
    if (code)
        assert_true(m.error_message[0] != '\0');
    proto_msg_free(&m);
    return code;
}

void raw_hello(int fd)
{
    static struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 1, "hello");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "version", GLLM_PROTOCOL_VERSION);
    raw_send(fd, b.data, b.len, -1);
    int64_t id;
    assert_int_equal(raw_reply(fd, &id, NULL), 0);
    assert_int_equal(id, 1);
}

void raw_register_send(int fd, int memfd, size_t size, uint64_t id)
{
    static struct proto_buf b;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", size);
    raw_send(fd, b.data, b.len, memfd);
}

uint32_t raw_register(int fd, int memfd, size_t size, uint64_t id)
{
    raw_register_send(fd, memfd, size, id);
    int64_t got_id;
    uint64_t arena = 0;
    int code = raw_reply(fd, &got_id, &arena);
    if (code != 0)
        fail_msg("arena_register of %zu bytes: %s", size, gllm_error_name(code));
    assert_int_equal(got_id, (int64_t)id);
    assert_true(arena > 0 && arena <= UINT32_MAX);
    return (uint32_t)arena;
}

/* q, k, v, out of [1, 2, S, 64] f32 back to back in one arena. */
struct proto_attention raw_job(uint32_t arena, int64_t S)
{
    struct proto_attention a = {0};
    struct proto_tensor *t[4] = {&a.q, &a.k, &a.v, &a.out};
    for (int i = 0; i < 4; i++) {
        *t[i] = (struct proto_tensor){.arena = arena, .offset = (uint64_t)(i * 2 * S * 64 * 4),
                                      .dtype = GLLM_DTYPE_F32, .rank = 4, .shape = {1, 2, S, 64}};
        proto_tensor_contiguous(t[i]);
    }
    return a;
}

/* NaN over the output, so an element the daemon skipped cannot pass. */
void job_poison(struct live_job *j)
{
    size_t es = gllm_dtype_size(j->s.dtype);
    size_t nq = (size_t)(j->s.B * j->s.Hq * j->s.Sq * j->s.D);
    memset((char *)gllm_memory_data(j->arena) + j->p.out.offset, 0xff, nq * es);
}

int job_setup(gllm_client *c, struct live_job *j, const struct job_spec *s, uint64_t seed)
{
    j->s = *s;
    size_t es = gllm_dtype_size(s->dtype);
    size_t nq = (size_t)(s->B * s->Hq * s->Sq * s->D), nk = (size_t)(s->B * s->Hkv * s->Skv * s->D);
    int r = gllm_arena_create(c, (2 * nq + 2 * nk) * es, &j->arena);
    if (r < 0)
        return r;
    char *base = gllm_memory_data(j->arena);
    fill_random(base, s->dtype, nq + 2 * nk, &seed);
    j->p = (gllm_attention_params){.size = sizeof j->p, .flags = s->causal ? GLLM_ATTN_CAUSAL : 0};
    int64_t qs[4] = {s->B, s->Hq, s->Sq, s->D}, ks[4] = {s->B, s->Hkv, s->Skv, s->D};
    gllm_tensor_init(j->arena, 0, s->dtype, 4, qs, &j->p.q);
    gllm_tensor_init(j->arena, nq * es, s->dtype, 4, ks, &j->p.k);
    gllm_tensor_init(j->arena, (nq + nk) * es, s->dtype, 4, ks, &j->p.v);
    gllm_tensor_init(j->arena, (nq + 2 * nk) * es, s->dtype, 4, qs, &j->p.out);
    job_poison(j);
    return 0;
}

/* Sets up and submits n jobs of spec s, seeded seed0, seed0 + 1, ... */
void submit_jobs(gllm_client *c, struct live_job *j, int n, const struct job_spec *s,
                        uint64_t seed0)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(job_setup(c, &j[i], s, seed0 + (uint64_t)i), 0);
        assert_int_equal(gllm_attention_submit(c, &j[i].p, &j[i].id), 0);
    }
}

/* True when the output matches the float64 reference within the dtype's tolerance. */
bool job_output_ok(const struct live_job *j)
{
    const struct job_spec *s = &j->s;
    size_t es = gllm_dtype_size(s->dtype);
    size_t nq = (size_t)(s->B * s->Hq * s->Sq * s->D), nk = (size_t)(s->B * s->Hkv * s->Skv * s->D);
    const char *base = gllm_memory_data(j->arena);
    double *want = malloc(nq * sizeof *want), *got = malloc(nq * sizeof *got);
    struct ref_view q = {base, s->dtype, {s->Hq * s->Sq * s->D, s->Sq * s->D, s->D, 1}};
    struct ref_view k = {base + nq * es, s->dtype, {s->Hkv * s->Skv * s->D, s->Skv * s->D, s->D, 1}};
    struct ref_view v = k;
    v.data = base + (nq + nk) * es;
    ref64_attention(s->B, s->Hq, s->Hkv, s->Sq, s->Skv, s->D, q, k, v, s->causal,
                  1.0 / sqrt((double)s->D), want, NULL);
    for (size_t i = 0; i < nq; i++)
        got[i] = elem_get(base + (nq + 2 * nk) * es, s->dtype, (int64_t)i);
    double err = ref64_rel_error(got, want, nq), tol = ref64_tolerance(s->dtype).out;
    free(want);
    free(got);
    if (!(err <= tol))
        fprintf(stderr, "pid %d: rel err %.3g > %.3g\n", (int)getpid(), err, tol);
    return err <= tol;
}
