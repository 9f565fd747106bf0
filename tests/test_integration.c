/* Integration: a real gllmd on a temporary socket, real client processes, real failures. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
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

#include <cmocka.h>

#include "proto.h"
#include "ring.h"
#include "testutil.h"

/* ---- raw protocol access, for what the library would never send ---- */

static struct proto_buf tx;

static msgpack_packer *req(uint64_t id, const char *method)
{
    proto_buf_init(&tx);
    proto_pack_request(&tx.pk, id, method);
    return &tx.pk;
}

/* Sends tx, expects an error with this code for this id (-1: nil id). */
static void expect_error(int fd, int pass_fd, int64_t id, int code)
{
    raw_send(fd, tx.data, tx.len, pass_fd);
    int64_t got_id;
    int got = raw_reply(fd, &got_id, NULL);
    if (got != code)
        fail_msg("request %lld: got %s (%d), want %s (%d)", (long long)id, gllm_error_name(got),
                 got, gllm_error_name(code), code);
    assert_int_equal(got_id, id);
}

static int sealed_memfd(size_t size, bool seal)
{
    int fd = make_memfd(size, seal ? F_SEAL_SHRINK : 0);
    assert_true(fd >= 0);
    return fd;
}

/* A raw connection past hello, with one arena of `size` bytes (its request had id 2). */
static uint32_t raw_session(const char *sock, size_t size, int *fd, int *mfd)
{
    *fd = raw_connect(sock);
    raw_hello(*fd);
    *mfd = sealed_memfd(size, true);
    return raw_register(*fd, *mfd, size, 2);
}

/* ---- the tests ---- */

static void test_hello_and_status(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    gllm_caps caps = GLLM_CAPS_INIT;
    assert_int_equal(gllm_client_caps(c, &caps), 0);
    assert_int_equal(caps.protocol_version, GLLM_PROTOCOL_VERSION);
    assert_string_equal(caps.backend, test_backend());
    /* One device or more (a multi-GPU host), each listed once, in order, of the backend's
     * kind; status lists the same devices. The CPU backend is one device. */
    assert_true(caps.ndevices >= 1 && caps.ndevices <= GLLM_MAX_DEVICES);
    for (int i = 0; i < caps.ndevices; i++) {
        gllm_device_info dev = GLLM_DEVICE_INFO_INIT;
        assert_int_equal(gllm_client_device(c, i, &dev), 0);
        assert_int_equal(dev.index, i);
        assert_string_equal(dev.kind, caps.backend);
        assert_true(dev.name[0] != '\0');
    }
    if (strcmp(caps.backend, "cpu") == 0)
        assert_int_equal(caps.ndevices, 1);
    gllm_device_info dev = GLLM_DEVICE_INFO_INIT;
    assert_int_equal(gllm_client_device(c, caps.ndevices, &dev), -EINVAL);
    assert_int_equal(caps.dtypes, 7);
    gllm_limits limits = GLLM_LIMITS_INIT;
    assert_int_equal(gllm_client_limits(c, &limits), 0);
    assert_int_equal(limits.max_message_bytes, PROTO_MAX_MESSAGE);
    assert_true(limits.max_head_dim >= 128);
    assert_int_equal(limits.max_page_entries, 1u << 22);   /* the default */
    /* A caller built against an older, smaller struct gets what fits and nothing more. */
    gllm_caps old = {.size = offsetof(gllm_caps, ndevices), .ndevices = -7, .dtypes = 99};
    assert_int_equal(gllm_client_caps(c, &old), 0);
    assert_string_equal(old.backend, test_backend());
    assert_int_equal(old.size, offsetof(gllm_caps, ndevices));
    assert_int_equal(old.ndevices, -7);
    assert_int_equal(old.dtypes, 99);
    gllm_caps zeroed = {0};   /* no size: refused, untouched */
    assert_int_equal(gllm_client_caps(c, &zeroed), -EINVAL);
    assert_int_equal(zeroed.protocol_version, 0);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    assert_true(st.clients >= 1);
    assert_string_equal(st.backend, test_backend());
    bool found = false;   /* the daemon names us: our pid and uid, from SO_PEERCRED */
    for (int i = 0; i < st.nlisted; i++) {
        gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
        assert_int_equal(gllm_status_client(c, i, &ci), 0);
        found |= ci.pid == getpid() && ci.uid == getuid() && strcmp(ci.comm, "test_integratio") == 0;
    }
    assert_int_equal(gllm_status_client(c, st.nlisted, &(gllm_client_info)GLLM_CLIENT_INFO_INIT),
                     -EINVAL);
    assert_true(found);
    gllm_disconnect(c);
}

/* A peer whose process name is not UTF-8 and holds a newline: status still decodes, the
 * name arrives whole with U+FFFD for each bad byte (it used to be cut at the newline and
 * sent raw, breaking strict decoders and gllmctl status --json). */
static void test_process_name_not_utf8(void **state)
{
    (void)state;
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        prctl(PR_SET_NAME, "x\xff\xfe\ny", 0, 0, 0);
        gllm_client *c;
        if (gllm_connect(group_daemon.socket, &c) < 0)
            _exit(10);
        gllm_status st = GLLM_STATUS_INIT;
        if (gllm_status_get(c, &st) < 0)
            _exit(11);
        int found = 0;
        for (int i = 0; i < st.nlisted; i++) {
            gllm_client_info ci = GLLM_CLIENT_INFO_INIT;
            if (gllm_status_client(c, i, &ci) < 0)
                _exit(12);
            if (!proto_utf8_valid(ci.comm, strlen(ci.comm)))
                _exit(13);
            found |= ci.pid == getpid() && strcmp(ci.comm, "x\xef\xbf\xbd\xef\xbf\xbd\ny") == 0;
        }
        gllm_disconnect(c);
        _exit(found ? 0 : 14);
    }
    int st = 0;
    assert_int_equal(waitpid(kid, &st, 0), kid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A job ordered through counters in an arena, by the client API: it waits for the counter,
 * runs when the client raises it, signals; a wait nobody satisfies fails at its deadline and
 * signals all the same. */
static void test_job_ordered_by_counters(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    gllm_memory *counters;
    assert_int_equal(gllm_arena_create(c, 4096, &counters), 0);
    _Atomic uint32_t *ready = gllm_memory_data(counters), *done = ready + 16;
    atomic_store(ready, 0), atomic_store(done, 0);
    const struct job_spec s = {.B = 1, .Hq = 2, .Hkv = 2, .Sq = 32, .Skv = 32, .D = 64,
                               .dtype = GLLM_DTYPE_F32, .causal = true};
    struct live_job j;
    assert_int_equal(job_setup(c, &j, &s, 77), 0);
    j.p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 1};
    j.p.signal = (gllm_counter){.memory = counters, .offset = 64, .value = 9};
    assert_int_equal(gllm_attention_submit(c, &j.p, &j.id), 0);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_poll(c, j.id, &res), -EAGAIN);   /* held by its wait */
    assert_int_equal(atomic_load(done), 0);
    const gllm_counter bad = {.memory = counters, .offset = 4094, .value = 1};
    assert_int_equal(gllm_counter_write(&bad), -EINVAL);        /* not a 4-byte slot inside */
    assert_int_equal(gllm_counter_write(&j.p.wait), 0);         /* inputs ready */
    assert_int_equal(atomic_load(ready), 1);
    assert_int_equal(gllm_job_wait(c, j.id, &res), 0);
    assert_int_equal(atomic_load(done), 9);
    assert_true(job_output_ok(&j));

    j.p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 2, .timeout_ms = 30};
    j.p.signal.value = 10;
    assert_int_equal(gllm_attention(c, &j.p, &res), GLLM_EWAITTIMEOUT);
    assert_int_equal(atomic_load(done), 10);
    j.p.wait.offset = 2;                                        /* not a 4-byte slot */
    assert_int_equal(gllm_attention(c, &j.p, &res), -EINVAL);

    /* A request refused at once still writes its signal, but only after the connection's
     * earlier jobs: here behind one that waits. */
    _Atomic uint32_t *refused_done = ready + 32;
    atomic_store(refused_done, 0);
    j.p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 3};
    j.p.signal = (gllm_counter){.memory = counters, .offset = 64, .value = 11};
    assert_int_equal(gllm_attention_submit(c, &j.p, &j.id), 0);
    gllm_attention_params mismatched = j.p;
    mismatched.wait = (gllm_counter){0};
    mismatched.signal = (gllm_counter){.memory = counters, .offset = 128, .value = 5};
    mismatched.out.dtype = GLLM_DTYPE_F16;                      /* not the inputs' dtype */
    assert_int_equal(gllm_attention(c, &mismatched, &res), GLLM_EDTYPE);
    assert_int_equal(atomic_load(refused_done), 0);             /* still behind the waiting job */
    atomic_store(ready, 3);
    assert_int_equal(gllm_job_wait(c, j.id, &res), 0);
    for (int i = 0; i < 1000 && atomic_load(refused_done) != 5; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(refused_done), 5);
    assert_int_equal(atomic_load(done), 11);

    /* A wait's counter may be in memory shared with the device (where a GPU polls it
     * faster); a signal's may not: the host must be able to write it whatever happens.
     * Written from the host here, so on the CPU backend (memfd) only: on a GPU,
     * ordering_gpu's device-counter mode covers it. */
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(c, &caps);
    if (strcmp(caps.share, "memfd") != 0) {
        gllm_memory_release(j.arena);
        gllm_memory_release(counters);
        gllm_disconnect(c);
        return;
    }
    gllm_memory *shm;
    void *shp;
    assert_int_equal(gllm_memory_create_shared(c, 4096, 0, &shm), 0);
    assert_int_equal(gllm_memory_map(shm, &shp), 0);
    _Atomic uint32_t *dev_ready = shp;
    atomic_store(dev_ready, 0);
    j.p.wait = (gllm_counter){.memory = shm, .offset = 0, .value = 1};
    j.p.signal = (gllm_counter){.memory = counters, .offset = 64, .value = 12};
    assert_int_equal(gllm_attention_submit(c, &j.p, &j.id), 0);
    assert_int_equal(gllm_job_poll(c, j.id, &res), -EAGAIN);   /* held by its wait */
    assert_int_equal(atomic_load(done), 11);
    atomic_store(dev_ready, 1);
    assert_int_equal(gllm_job_wait(c, j.id, &res), 0);
    assert_int_equal(atomic_load(done), 12);
    assert_true(job_output_ok(&j));
    j.p.wait = (gllm_counter){0};
    j.p.signal = (gllm_counter){.memory = shm, .offset = 64, .value = 1};
    assert_int_equal(gllm_attention(c, &j.p, &res), GLLM_ENOARENA);
    gllm_memory_release(shm);
    gllm_memory_release(j.arena);
    gllm_memory_release(counters);
    gllm_disconnect(c);
}

/* A connection's jobs run in its order across its device queue: an unordered job submitted
 * behind one that waits for its counter (in the queue) does not run before it; a second
 * ordered job is queued behind the first and each runs when its own counter comes. */
static void test_order_across_the_queue(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    gllm_memory *counters;
    assert_int_equal(gllm_arena_create(c, 4096, &counters), 0);
    _Atomic uint32_t *ready = gllm_memory_data(counters);
    memset(gllm_memory_data(counters), 0, 4096);
    const struct job_spec s = {.B = 1, .Hq = 2, .Hkv = 1, .Sq = 16, .Skv = 48, .D = 32,
                               .dtype = GLLM_DTYPE_F32, .causal = true};
    struct live_job a, b, d;
    assert_int_equal(job_setup(c, &a, &s, 301), 0);
    assert_int_equal(job_setup(c, &b, &s, 302), 0);
    assert_int_equal(job_setup(c, &d, &s, 303), 0);
    a.p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 1};
    a.p.signal = (gllm_counter){.memory = counters, .offset = 64, .value = 1};
    d.p.wait = (gllm_counter){.memory = counters, .offset = 4, .value = 1};
    d.p.signal = (gllm_counter){.memory = counters, .offset = 68, .value = 1};
    assert_int_equal(gllm_attention_submit(c, &a.p, &a.id), 0);   /* waits for ready[0] */
    assert_int_equal(gllm_attention_submit(c, &d.p, &d.id), 0);   /* then for ready[1] */
    assert_int_equal(gllm_attention_submit(c, &b.p, &b.id), 0);   /* unordered, behind both */
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    sleep_ms(50);
    assert_int_equal(gllm_job_poll(c, b.id, &res), -EAGAIN);
    assert_int_equal(gllm_job_poll(c, a.id, &res), -EAGAIN);
    atomic_store(&ready[0], 1);                                    /* a runs; d still waits */
    assert_int_equal(gllm_job_wait(c, a.id, &res), 0);
    sleep_ms(50);
    assert_int_equal(gllm_job_poll(c, d.id, &res), -EAGAIN);
    assert_int_equal(gllm_job_poll(c, b.id, &res), -EAGAIN);        /* still behind d */
    atomic_store(&ready[1], 1);
    assert_int_equal(gllm_job_wait(c, d.id, &res), 0);
    assert_int_equal(gllm_job_wait(c, b.id, &res), 0);
    assert_true(job_output_ok(&a) && job_output_ok(&d) && job_output_ok(&b));
    gllm_memory_release(a.arena);
    gllm_memory_release(b.arena);
    gllm_memory_release(d.arena);
    gllm_memory_release(counters);
    gllm_disconnect(c);
}

/* A refused request's signal is queued as a job, within max_inflight: at the limit the
 * request is BUSY and nothing is queued (the signal is the client's to write). */
static void test_refused_signals_are_bounded(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(daemon_start_conf(&d, "max_inflight = 1\n"), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    gllm_memory *counters;
    assert_int_equal(gllm_arena_create(c, 4096, &counters), 0);
    _Atomic uint32_t *ready = gllm_memory_data(counters), *refused_done = ready + 32;
    atomic_store(ready, 0), atomic_store(refused_done, 0);
    const struct job_spec s = {.B = 1, .Hq = 2, .Hkv = 2, .Sq = 16, .Skv = 16, .D = 64,
                               .dtype = GLLM_DTYPE_F32};
    struct live_job j;
    assert_int_equal(job_setup(c, &j, &s, 5), 0);
    j.p.wait = (gllm_counter){.memory = counters, .offset = 0, .value = 1};
    assert_int_equal(gllm_attention_submit(c, &j.p, &j.id), 0);   /* the one job allowed */
    gllm_attention_params mismatched = j.p;
    mismatched.wait = (gllm_counter){0};
    mismatched.signal = (gllm_counter){.memory = counters, .offset = 128, .value = 5};
    mismatched.out.dtype = GLLM_DTYPE_F16;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    /* At the limit (the waiting job holds it): BUSY, whatever else is wrong. */
    assert_int_equal(gllm_attention(c, &mismatched, &res), GLLM_EBUSY);
    atomic_store(ready, 1);
    assert_int_equal(gllm_job_wait(c, j.id, &res), 0);
    assert_int_equal(status_of(d.socket).jobs_inflight, 0);
    assert_int_equal(atomic_load(refused_done), 0);             /* never queued */
    /* Below the limit the same refusal's signal is written. */
    assert_int_equal(gllm_attention(c, &mismatched, &res), GLLM_EDTYPE);
    for (int i = 0; i < 1000 && atomic_load(refused_done) != 5; i++)
        sleep_ms(1);
    assert_int_equal(atomic_load(refused_done), 5);
    gllm_memory_release(j.arena);
    gllm_memory_release(counters);
    gllm_disconnect(c);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Several client processes, each with several jobs in flight at once. */
static void test_concurrent_pipelined_clients(void **state)
{
    (void)state;
    enum { CLIENTS = 4, JOBS = 5 };
    uint64_t done_before = status_of(group_daemon.socket).jobs_done;
    pid_t kids[CLIENTS];
    for (int k = 0; k < CLIENTS; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] > 0)
            continue;
        gllm_client *c;
        if (gllm_connect(group_daemon.socket, &c) < 0)
            _exit(10);
        struct live_job jobs[JOBS];
        for (int i = 0; i < JOBS; i++) {
            struct job_spec s = {.B = 1 + i % 2, .Hq = 4, .Hkv = 1 + (i % 2), .Sq = 40 + 7 * i,
                                 .Skv = 40 + 11 * k, .D = i % 2 ? 128 : 64,
                                 .dtype = (gllm_dtype)((i + k) % 3), .causal = (i + k) % 2};
            if (job_setup(c, &jobs[i], &s, (uint64_t)(k * 100 + i)) < 0 ||
                gllm_attention_submit(c, &jobs[i].p, &jobs[i].id) < 0)
                _exit(11);
        }
        /* Claim out of order: results must still land on the right job. */
        for (int i = JOBS - 1; i >= 0; i--) {
            gllm_job_result res = GLLM_JOB_RESULT_INIT;
            if (gllm_job_wait(c, jobs[i].id, &res) != 0 || res.status != 0)
                _exit(12);
            if (!job_output_ok(&jobs[i]))
                _exit(13);
        }
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        if (gllm_job_wait(c, jobs[0].id, &res) != GLLM_ENOJOB)   /* claimed already */
            _exit(14);
        for (int i = 0; i < JOBS; i++)
            gllm_memory_release(jobs[i].arena);
        gllm_disconnect(c);
        _exit(0);
    }
    for (int k = 0; k < CLIENTS; k++) {
        int st;
        assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    gllm_status st = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(st.jobs_done - done_before, CLIENTS * JOBS);
    assert_int_equal(st.arenas, 0);
}

/* One connection's jobs are answered in the order they were sent. */
static void test_replies_in_submission_order(void **state)
{
    (void)state;
    int fd, mfd;
    uint32_t arena = raw_session(group_daemon.socket, 4 * 2 * 256 * 64 * 4, &fd, &mfd);
    enum { N = 24 };
    for (uint64_t id = 10; id < 10 + N; id++) {
        /* Long and short jobs mixed: a short one must not overtake a long one. */
        struct proto_attention a = raw_job(arena, id % 3 == 0 ? 256 : 8);
        proto_pack_attention(req(id, "attention"), &a);
        raw_send(fd, tx.data, tx.len, -1);
    }
    for (uint64_t id = 10; id < 10 + N; id++) {
        int64_t got;
        assert_int_equal(raw_reply(fd, &got, NULL), 0);
        assert_int_equal(got, (int64_t)id);
    }
    close(mfd);
    close(fd);
}

/* A child that keeps running good jobs while the parent misbehaves. */
static pid_t start_good_client(int jobs)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    gllm_client *c;
    if (gllm_connect(group_daemon.socket, &c) < 0)
        _exit(20);
    struct live_job j;
    struct job_spec s = {.B = 1, .Hq = 4, .Hkv = 2, .Sq = 64, .Skv = 96, .D = 64,
                         .dtype = GLLM_DTYPE_F16, .causal = true};
    if (job_setup(c, &j, &s, 5) < 0)
        _exit(21);
    for (int i = 0; i < jobs; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        job_poison(&j);
        if (gllm_attention(c, &j.p, &res) != 0 || !job_output_ok(&j))
            _exit(22);
    }
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
    _exit(0);
}

static void test_bad_requests_get_errors(void **state)
{
    (void)state;
    pid_t good = start_good_client(40);
    int fd = raw_connect(group_daemon.socket);

    proto_pack_attention(req(3, "attention"), &(struct proto_attention){0});
    expect_error(fd, -1, 3, GLLM_ENOHELLO);
    msgpack_pack_map(req(4, "hello"), 1), proto_pack_kv_u64(&tx.pk, "version", 99);
    expect_error(fd, -1, 4, GLLM_EVERSION);
    raw_hello(fd);

    proto_buf_init(&tx);
    tx.len = 2, tx.data[0] = (char)0xc1, tx.data[1] = (char)0xc1;          /* garbage bytes */
    expect_error(fd, -1, -1, GLLM_EMALFORMED);
    proto_buf_init(&tx);
    msgpack_pack_map(&tx.pk, 0);                                            /* msgpack, not rpc */
    expect_error(fd, -1, -1, GLLM_EMALFORMED);
    proto_buf_init(&tx);
    memset(tx.data, 0x91, 40), tx.data[40] = (char)0x90, tx.len = 41;      /* 41 levels deep */
    expect_error(fd, -1, -1, GLLM_ELIMIT);
    msgpack_pack_map(req(5, "no_such_method"), 0);
    expect_error(fd, -1, 5, GLLM_EMETHOD);
    msgpack_pack_int8(req(6, "status"), 3);                                 /* params not a map */
    expect_error(fd, -1, 6, GLLM_EPARAM);
    msgpack_pack_map(req(7, "status"), 0);
    expect_error(fd, 0, 7, GLLM_ENOFD);                                     /* unexpected fd */
    proto_buf_init(&tx);
    proto_pack_result(&tx.pk, 8), msgpack_pack_nil(&tx.pk);                /* a response */
    expect_error(fd, -1, -1, GLLM_EMALFORMED);

    static char huge[PROTO_MAX_MESSAGE + 100];                              /* oversized packet */
    memset(huge, 0x90, sizeof huge);
    raw_send(fd, huge, sizeof huge, -1);
    int64_t id;
    assert_int_equal(raw_reply(fd, &id, NULL), GLLM_ETOOBIG);

    msgpack_pack_map(req(9, "arena_register"), 1), proto_pack_kv_u64(&tx.pk, "size", 4096);
    expect_error(fd, -1, 9, GLLM_ENOFD);
    int unsealed = sealed_memfd(4096, false);
    expect_error(fd, unsealed, 9, GLLM_EUNSEALED);
    int sealed = sealed_memfd(4096, true);
    msgpack_pack_map(req(10, "arena_register"), 1), proto_pack_kv_u64(&tx.pk, "size", 8192);
    expect_error(fd, sealed, 10, GLLM_EARENASIZE);
    int p[2];
    assert_int_equal(pipe(p), 0);
    msgpack_pack_map(req(11, "arena_register"), 1), proto_pack_kv_u64(&tx.pk, "size", 4096);
    expect_error(fd, p[0], 11, GLLM_ENOTMEMFD);
    msgpack_pack_map(req(12, "arena_register"), 1), proto_pack_kv_str(&tx.pk, "size", "big");
    expect_error(fd, sealed, 12, GLLM_EPARAM);
    msgpack_pack_map(req(13, "arena_release"), 1), proto_pack_kv_u64(&tx.pk, "arena", 4242);
    expect_error(fd, -1, 13, GLLM_ENOARENA);

    size_t size = 4 * 2 * 16 * 64 * 4;
    int mfd = sealed_memfd(size, true);
    uint32_t arena = raw_register(fd, mfd, size, 14);
    struct proto_attention a = raw_job(arena + 1000, 16);                   /* nobody's arena */
    proto_pack_attention(req(15, "attention"), &a);
    expect_error(fd, -1, 15, GLLM_ENOARENA);
    a = raw_job(arena, 16), a.out.offset = size - 64;
    proto_pack_attention(req(16, "attention"), &a);
    expect_error(fd, -1, 16, GLLM_EBOUNDS);
    a = raw_job(arena, 16), a.q.shape[2] = (int64_t)1 << 61;
    proto_tensor_contiguous(&a.q);
    proto_pack_attention(req(17, "attention"), &a);
    expect_error(fd, -1, 17, GLLM_EOVERFLOW);
    a = raw_job(arena, 16), a.k.shape[3] = 32;
    proto_pack_attention(req(18, "attention"), &a);
    expect_error(fd, -1, 18, GLLM_ESHAPE);
    msgpack_pack_map(req(19, "attention"), 1), proto_pack_kv_str(&tx.pk, "q", "tensor");
    expect_error(fd, -1, 19, GLLM_EPARAM);
    a = raw_job(arena, 16), a.repeat = GLLM_MAX_REPEAT + 1;                 /* too many runs */
    proto_pack_attention(req(21, "attention"), &a);
    expect_error(fd, -1, 21, GLLM_EPARAM);
    a = raw_job(arena, 16), a.repeat = (uint64_t)1 << 40;
    proto_pack_attention(req(22, "attention"), &a);
    expect_error(fd, -1, 22, GLLM_EPARAM);

    a = raw_job(arena, 16);                   /* after all that, a good job still runs */
    proto_pack_attention(req(20, "attention"), &a);
    raw_send(fd, tx.data, tx.len, -1);
    assert_int_equal(raw_reply(fd, &id, NULL), 0);
    assert_int_equal(id, 20);

    int st;
    assert_int_equal(waitpid(good, &st, 0), good);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    close(unsealed), close(sealed), close(p[0]), close(p[1]), close(mfd), close(fd);
}

/* repeat: the kernel runs that many times, kernel_ns is one run's mean (on the CPU, the runs'
 * time over their count, so the job took at least repeat times it), and the output is right. */
static void test_repeat_runs_the_kernel_again(void **state)
{
    (void)state;
    skip_on_slow_device("100 runs back to back in one job would run past the watchdog");
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    struct live_job j;
    struct job_spec s = {.B = 1, .Hq = 4, .Hkv = 2, .Sq = 64, .Skv = 96, .D = 64,
                         .dtype = GLLM_DTYPE_F16, .causal = true};
    assert_int_equal(job_setup(c, &j, &s, 9), 0);
    for (uint32_t repeat = 0; repeat <= GLLM_MAX_REPEAT; repeat += GLLM_MAX_REPEAT / 4) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        j.p.repeat = repeat;
        job_poison(&j);
        assert_int_equal(gllm_attention(c, &j.p, &res), 0);
        assert_true(job_output_ok(&j));
        assert_true(res.kernel_ns > 0);
        assert_true(res.job_ns >= (repeat > 1 ? repeat : 1) * res.kernel_ns);
    }
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    j.p.repeat = GLLM_MAX_REPEAT + 1;
    assert_int_equal(gllm_attention(c, &j.p, &res), GLLM_EPARAM);
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
}

/* A client killed in the middle of a job frees all it held; others carry on. */
static void test_client_killed_mid_job(void **state)
{
    (void)state;
    skip_on_slow_device("its 2-GFLOP jobs would run past the watchdog");
    gllm_status before = wait_quiet(group_daemon.socket, 0);
    for (int round = 0; round < 3; round++) {
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        pid_t kid = fork();
        assert_true(kid >= 0);
        if (kid == 0) {
            gllm_client *c;
            struct live_job j[3];
            struct job_spec s = {.B = 1, .Hq = 8, .Hkv = 8, .Sq = 1024, .Skv = 1024, .D = 128,
                                 .dtype = GLLM_DTYPE_F32};
            if (gllm_connect(group_daemon.socket, &c) < 0)
                _exit(1);
            for (int i = 0; i < 3; i++)
                if (job_setup(c, &j[i], &s, 1) < 0 || gllm_attention_submit(c, &j[i].p, &j[i].id) < 0)
                    _exit(2);
            if (write(ready[1], "x", 1) != 1)
                _exit(3);
            pause();
            _exit(4);
        }
        close(ready[1]);
        char x;
        assert_int_equal(read(ready[0], &x, 1), 1);
        close(ready[0]);
        if (round > 0)
            sleep_ms(20 * round);         /* at different points of the job */
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
    }
    gllm_status after = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(after.arenas, 0);
    assert_int_equal(after.bytes_mapped, 0);
    assert_int_equal(after.jobs_inflight, 0);
    assert_int_equal(after.clients, before.clients);

    pid_t good = start_good_client(3);
    int st;
    assert_int_equal(waitpid(good, &st, 0), good);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* SIGTERM with jobs in flight: every accepted job is answered, then exit 0. */
static void test_sigterm_drains(void **state)
{
    (void)state;
    skip_on_slow_device("four 0.5-GFLOP jobs must finish within one drain");
    struct daemon d;
    assert_int_equal(daemon_start(&d, NULL), 0);
    gllm_client *c, *watcher;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    assert_int_equal(gllm_connect(d.socket, &watcher), 0);
    enum { N = 4 };
    struct live_job j[N];
    struct job_spec s = {.B = 1, .Hq = 8, .Hkv = 4, .Sq = 512, .Skv = 512, .D = 128,
                         .dtype = GLLM_DTYPE_BF16};
    submit_jobs(c, j, N, &s, 0);
    gllm_status st = GLLM_STATUS_INIT;
    for (int i = 0; i < 3000; i++) {      /* until the daemon has read them all */
        assert_int_equal(gllm_status_get(watcher, &st), 0);
        if (st.jobs_inflight + st.jobs_done >= N)
            break;
        sleep_ms(1);
    }
    if (st.jobs_inflight + st.jobs_done < N)   /* else SIGTERM would race the submissions */
        fail_msg("gllmd had read %llu of %d jobs after 3 s",
                 (unsigned long long)(st.jobs_inflight + st.jobs_done), N);
    assert_int_equal(kill(d.pid, SIGTERM), 0);
    /* A job sent after SIGTERM is refused while the daemon drains (SHUTDOWN), or finds
     * it gone once it has drained (DISCONNECTED): it never runs. Which one depends on how
     * fast the device finishes the accepted jobs. */
    struct live_job late = {0};
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int r = job_setup(watcher, &late, &s, 9);
    if (r == 0)
        r = gllm_attention(watcher, &late.p, &res);
    if (r != GLLM_ESHUTDOWN && r != GLLM_EDISCONNECTED)
        fail_msg("a job sent during the drain got %s", gllm_error_name(r));
    for (int i = 0; i < N; i++) {
        assert_int_equal(gllm_job_wait(c, j[i].id, &res), 0);
        assert_true(job_output_ok(&j[i]));
    }
    gllm_disconnect(watcher);
    gllm_disconnect(c);
    for (int i = 0; i < N; i++)
        assert_int_equal(gllm_memory_release(j[i].arena), 0);   /* detached: local unmap only */
    if (late.arena)
        assert_int_equal(gllm_memory_release(late.arena), 0);
    int status;
    assert_int_equal(waitpid(d.pid, &status, 0), d.pid);
    d.pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(access(d.socket, F_OK), -1);       /* socket removed */
    daemon_stop(&d);
}

/* Device tensors: copies in, attention on them (alone and mixed with arenas), copies out,
 * the errors, and the memory going away with the connection. */
static void test_device_tensors(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    struct live_job j;
    struct job_spec s = {.B = 1, .Hq = 4, .Hkv = 2, .Sq = 96, .Skv = 160, .D = 64,
                         .dtype = GLLM_DTYPE_F16, .causal = true};
    assert_int_equal(job_setup(c, &j, &s, 31), 0);
    uint64_t in_bytes = j.p.out.offset;                 /* q, k, v back to back */
    uint64_t out_bytes = (uint64_t)(s.B * s.Hq * s.Sq * s.D) * 2;
    gllm_memory *dt;
    assert_int_equal(gllm_dtensor_create(c, in_bytes + out_bytes, 0, &dt), 0);
    assert_int_equal(gllm_memory_copy(c, dt, 0, j.arena, 0, in_bytes), 0);
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    assert_int_equal(st.device_bytes, in_bytes + out_bytes);

    /* Everything on the device; the output comes back by a read. */
    gllm_attention_params p = j.p;
    gllm_tensor *ts[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++)
        assert_int_equal(gllm_tensor_init(dt, ts[i]->offset, ts[i]->dtype, 4,
                                                 ts[i]->shape, ts[i]), 0);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_attention(c, &p, &res), 0);
    assert_int_equal(gllm_memory_copy(c, j.arena, j.p.out.offset, dt, j.p.out.offset, out_bytes), 0);
    assert_true(job_output_ok(&j));

    /* Mixed: q and out in the arena, k and v on the device. */
    job_poison(&j);
    p = j.p;
    assert_int_equal(gllm_tensor_init(dt, j.p.k.offset, s.dtype, 4, j.p.k.shape, &p.k), 0);
    assert_int_equal(gllm_tensor_init(dt, j.p.v.offset, s.dtype, 4, j.p.v.shape, &p.v), 0);
    assert_int_equal(gllm_attention(c, &p, &res), 0);
    assert_true(job_output_ok(&j));

    /* Past the end of either side, and more than the per-connection limit. */
    assert_int_equal(gllm_memory_copy(c, j.arena, 0, dt, in_bytes, out_bytes + 2), GLLM_EBOUNDS);
    assert_int_equal(gllm_memory_copy(c, dt, 0, j.arena, gllm_memory_size(j.arena), 2),
                     GLLM_EBOUNDS);
    gllm_memory *huge;
    assert_int_equal(gllm_dtensor_create(c, (size_t)1 << 50, 0, &huge), GLLM_EQUOTA);
    assert_int_equal(gllm_dtensor_create(c, 4096, 99, &huge), GLLM_EPARAM);
    assert_int_equal(gllm_memory_release(dt), 0);
    assert_int_equal(gllm_status_get(c, &st), 0);
    assert_int_equal(st.dtensors, 0);
    assert_int_equal(st.device_bytes, 0);

    /* A connection that ends frees its device tensors. */
    gllm_memory *left;
    assert_int_equal(gllm_dtensor_create(c, 1 << 20, 0, &left), 0);
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
    assert_int_equal(gllm_memory_release(left), 0);                    /* only the handle */
    st = wait_quiet(group_daemon.socket, 0);
    assert_int_equal(st.device_bytes, 0);
    assert_int_equal(st.dtensors, 0);
}

/* Replies that arrived before the daemon went away still complete their jobs: a poll
 * that reads them and then the end of the connection returns the results, not
 * DISCONNECTED, and only a job with no reply gets DISCONNECTED. */
static void test_poll_after_daemon_exit(void **state)
{
    (void)state;
    struct daemon d;
    assert_int_equal(daemon_start(&d, NULL), 0);
    gllm_client *c;
    assert_int_equal(gllm_connect(d.socket, &c), 0);
    enum { N = 3 };
    struct live_job j[N];
    struct job_spec s = {.B = 1, .Hq = 4, .Hkv = 2, .Sq = 64, .Skv = 80, .D = 64,
                         .dtype = GLLM_DTYPE_F16};
    submit_jobs(c, j, N, &s, 40);
    /* The daemon has read all three once it answers a later request on the connection
     * (requests are handled in order), so SIGTERM cannot refuse any of them. */
    gllm_status st = GLLM_STATUS_INIT;
    assert_int_equal(gllm_status_get(c, &st), 0);
    /* SIGTERM: the daemon answers all three, closes the connection and exits (status 0),
     * with the replies still unread in our socket. */
    assert_int_equal(daemon_stop(&d), 0);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    for (int i = 0; i < N; i++) {
        assert_int_equal(gllm_job_poll(c, j[i].id, &res), 0);
        assert_true(job_output_ok(&j[i]));
    }
    uint64_t late;
    int r = gllm_attention_submit(c, &j[0].p, &late);
    if (r == 0)
        r = gllm_job_wait(c, late, &res);
    assert_int_equal(r, GLLM_EDISCONNECTED);
    gllm_disconnect(c);
    for (int i = 0; i < N; i++)
        assert_int_equal(gllm_memory_release(j[i].arena), 0);
}

/* ---- the reply ring (proto/ring.h) ---- */

static struct gllm_ring *raw_ring(int fd, uint64_t id)
{
    int mfd = sealed_memfd(GLLM_RING_BYTES, true);
    struct gllm_ring *rg =
        mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    assert_true(rg != MAP_FAILED);
    msgpack_pack_map(req(id, "ring"), 0);
    raw_send(fd, tx.data, tx.len, mfd);
    close(mfd);
    int64_t got;
    assert_int_equal(raw_reply(fd, &got, NULL), 0);
    assert_int_equal(got, (int64_t)id);
    return rg;
}

/* Waits (bounded) until gllmd has published n replies in all. */
static uint32_t ring_wait_head(struct gllm_ring *rg, uint32_t n)
{
    for (int i = 0; i < 10000 && atomic_load(&rg->reply_head) < n; i++)
        sleep_ms(1);
    return atomic_load(&rg->reply_head);
}

/* The id of the reply in slot i, which must be a success. */
static int64_t ring_reply_id(const struct gllm_ring *rg, uint32_t i)
{
    const struct gllm_ring_reply_slot *s = &rg->reply[i % GLLM_RING_REPLY_SLOTS];
    assert_true(s->len > 0 && s->len <= sizeof s->data);
    struct proto_msg m;
    assert_int_equal(proto_decode(s->data, s->len, &m, NULL), 0);
    assert_int_equal(m.kind, PROTO_RESPONSE);
    assert_int_equal(m.error_code, 0);
    int64_t id = (int64_t)m.id;
    proto_msg_free(&m);
    return id;
}

static void send_small_job(int fd, uint32_t arena, uint64_t id)
{
    struct proto_attention a = raw_job(arena, 8);
    proto_pack_attention(req(id, "attention"), &a);
    raw_send(fd, tx.data, tx.len, -1);
}

/* The id of the next packet on the socket, which must be a success. */
static int64_t socket_reply_id(int fd)
{
    int64_t id;
    assert_int_equal(raw_reply(fd, &id, NULL), 0);
    return id;
}

/* The protocol as a client without the library sees it: which way each reply goes. */
static void test_reply_ring_protocol(void **state)
{
    (void)state;
    int fd, mfd;
    uint32_t arena = raw_session(group_daemon.socket, 4 * 2 * 8 * 64 * 4, &fd, &mfd);

    /* Bad rings: no fd, a file of the wrong size, one that can shrink; then a good one,
     * and no second. */
    msgpack_pack_map(req(3, "ring"), 0);
    expect_error(fd, -1, 3, GLLM_ENOFD);
    int bad = sealed_memfd(GLLM_RING_BYTES + 4096, true);
    msgpack_pack_map(req(4, "ring"), 0);
    expect_error(fd, bad, 4, GLLM_EARENASIZE);
    close(bad);
    bad = sealed_memfd(GLLM_RING_BYTES, false);
    msgpack_pack_map(req(5, "ring"), 0);
    expect_error(fd, bad, 5, GLLM_EUNSEALED);
    struct gllm_ring *rg = raw_ring(fd, 6);
    msgpack_pack_map(req(7, "ring"), 0);
    expect_error(fd, bad, 7, GLLM_EQUOTA);
    close(bad);

    /* Not polling: the reply comes both ways. */
    send_small_job(fd, arena, 10);
    assert_int_equal(socket_reply_id(fd), 10);
    assert_int_equal(ring_wait_head(rg, 1), 1);
    assert_int_equal(ring_reply_id(rg, 0), 10);
    atomic_store(&rg->reply_tail, 1);

    /* Polling: by the ring alone. The reply to a later request is the socket's next packet
     * (the worker would have sent its copy right after publishing). */
    atomic_store(&rg->polling, 1);
    send_small_job(fd, arena, 11);
    assert_int_equal(ring_wait_head(rg, 2), 2);
    assert_int_equal(ring_reply_id(rg, 1), 11);
    msgpack_pack_map(req(12, "status"), 0);
    raw_send(fd, tx.data, tx.len, -1);
    assert_int_equal(socket_reply_id(fd), 12);

    /* A full ring (tail left at 1): the 63 that fit go there, the rest by the socket, in
     * order. */
    enum { N = GLLM_RING_REPLY_SLOTS + 3 };
    for (uint64_t id = 100; id < 100 + N; id++)
        send_small_job(fd, arena, id);
    assert_int_equal(ring_wait_head(rg, 1 + GLLM_RING_REPLY_SLOTS), 1 + GLLM_RING_REPLY_SLOTS);
    for (uint32_t i = 2; i < 1 + GLLM_RING_REPLY_SLOTS; i++)
        assert_int_equal(ring_reply_id(rg, i), 100 + (i - 2));
    for (uint64_t id = 100 + GLLM_RING_REPLY_SLOTS - 1; id < 100 + N; id++)
        assert_int_equal(socket_reply_id(fd), (int64_t)id);

    /* A tail ahead of head is nonsense: the socket, and head stays. */
    atomic_store(&rg->reply_tail, atomic_load(&rg->reply_head) + 5);
    send_small_job(fd, arena, 200);
    assert_int_equal(socket_reply_id(fd), 200);
    assert_int_equal(atomic_load(&rg->reply_head), 1 + GLLM_RING_REPLY_SLOTS);

    munmap(rg, GLLM_RING_BYTES);
    close(mfd);
    close(fd);
}

/* Through the library: spinning on the ring, sleeping on the socket, polling, and more
 * jobs in flight than the ring has slots; every job completes once, with its output. */
static void ring_client_rounds(const char *sock)
{
    gllm_client *c;
    assert_int_equal(gllm_connect(sock, &c), 0);
    struct live_job j;
    struct job_spec s = {.B = 1, .Hq = 2, .Hkv = 1, .Sq = 16, .Skv = 24, .D = 64,
                         .dtype = GLLM_DTYPE_F16, .causal = true};
    assert_int_equal(job_setup(c, &j, &s, 77), 0);
    enum { N = GLLM_RING_REPLY_SLOTS + 16 };
    uint64_t ids[N];
    for (int round = 0; round < 3; round++) {
        gllm_client_set_wait_spin(c, round == 0 ? 20000 : 0);
        job_poison(&j);
        for (int i = 0; i < N; i++)
            assert_int_equal(gllm_attention_submit(c, &j.p, &ids[i]), 0);
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        for (int i = N - 1; i >= 0; i--) {
            int r;
            if (round == 2)
                while ((r = gllm_job_poll(c, ids[i], &res)) == -EAGAIN)
                    sleep_ms(1);
            else
                r = gllm_job_wait(c, ids[i], &res);
            assert_int_equal(r, 0);
            assert_int_equal(res.status, 0);
            assert_int_equal(gllm_job_poll(c, ids[i], &res), GLLM_ENOJOB);
        }
        assert_true(job_output_ok(&j));
        /* One job at a time, as a decode loop runs. */
        for (int i = 0; i < 8; i++)
            assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    }
    assert_int_equal(gllm_memory_release(j.arena), 0);
    gllm_disconnect(c);
}

/* The group's daemon busy polls only on GPU backends: on the CPU one, requests go by the
 * socket and replies by the ring. */
static void test_reply_ring_client(void **state)
{
    (void)state;
    uint64_t before = status_of(group_daemon.socket).ring_requests;
    ring_client_rounds(group_daemon.socket);
    if (strcmp(test_backend(), "cpu") == 0)
        assert_int_equal(status_of(group_daemon.socket).ring_requests, before);
}

/* A gllmd that busy polls, as it does on GPUs: clients may put requests in their rings. */
static void busy_daemon_start(struct daemon *d)
{
    assert_int_equal(daemon_start_conf(d, "busy_poll = on\n"), 0);
}

static void ring_put_request(struct gllm_ring *rg, uint32_t *head, uint32_t after)
{
    struct gllm_ring_request_slot *s = &rg->request[*head % GLLM_RING_REQUEST_SLOTS];
    assert_true(tx.len <= sizeof s->data);
    memcpy(s->data, tx.data, tx.len);
    s->len = (uint32_t)tx.len;
    s->after = after;
    atomic_store(&rg->request_head, ++*head);
}

/* After a request is in the ring: a wake-up through the socket if gllmd stopped polling. */
static void ring_wake_if_needed(int fd, struct gllm_ring *rg, uint32_t *sent)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&rg->gllmd_polling))
        return;
    proto_buf_init(&tx);
    proto_pack_notify(&tx.pk, "ring_wake");
    msgpack_pack_map(&tx.pk, 0);
    raw_send(fd, tx.data, tx.len, -1);
    ++*sent;
}

/* Requests both ways keep one order; bad ring slots get errors. */
static void test_request_ring_protocol(void **state)
{
    (void)state;
    struct daemon d;
    busy_daemon_start(&d);
    int fd, mfd;
    uint32_t arena = raw_session(d.socket, 4 * 2 * 8 * 64 * 4, &fd, &mfd);
    struct gllm_ring *rg = raw_ring(fd, 3);
    uint32_t sent = 3, head = 0;   /* packets so far: hello, arena_register, ring */

    /* ring, socket, ring, socket, ring: answered in that order (one device, one client). */
    for (uint64_t id = 10; id < 15; id++) {
        struct proto_attention a = raw_job(arena, 8);
        proto_pack_attention(req(id, "attention"), &a);
        if (id % 2 == 0) {
            ring_put_request(rg, &head, sent);
            ring_wake_if_needed(fd, rg, &sent);
        } else {
            raw_send(fd, tx.data, tx.len, -1);
            sent++;
        }
    }
    for (uint64_t id = 10; id < 15; id++)
        assert_int_equal(socket_reply_id(fd), (int64_t)id);
    assert_int_equal(status_of(d.socket).ring_requests, 3);

    /* An empty slot: an error without an id. */
    tx.len = 0;
    ring_put_request(rg, &head, sent);
    ring_wake_if_needed(fd, rg, &sent);
    int64_t id;
    assert_int_equal(raw_reply(fd, &id, NULL), GLLM_EMALFORMED);
    assert_int_equal(id, -1);

    /* A head a whole ring past the tail: an error, then the connection closes. */
    atomic_store(&rg->request_head, head + GLLM_RING_REQUEST_SLOTS + 1);
    ring_wake_if_needed(fd, rg, &sent);
    assert_int_equal(raw_reply(fd, &id, NULL), GLLM_EMALFORMED);
    char byte;
    assert_int_equal(recv(fd, &byte, 1, 0), 0);

    munmap(rg, GLLM_RING_BYTES);
    close(mfd);
    close(fd);
    assert_int_equal(daemon_stop(&d), 0);
}

/* The library against a busy-polling gllmd: requests go by the ring. */
static void test_request_ring_client(void **state)
{
    (void)state;
    struct daemon d;
    busy_daemon_start(&d);
    ring_client_rounds(d.socket);
    assert_true(status_of(d.socket).ring_requests > 0);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_not_running(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect("/nonexistent/gllmd.sock", &c), -ENOENT);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(test_hello_and_status),
        cmocka_unit_test(test_process_name_not_utf8),
        cmocka_unit_test(test_job_ordered_by_counters),
        cmocka_unit_test(test_order_across_the_queue),
        cmocka_unit_test(test_refused_signals_are_bounded),
        cmocka_unit_test(test_concurrent_pipelined_clients),
        cmocka_unit_test(test_replies_in_submission_order),
        cmocka_unit_test(test_bad_requests_get_errors),
        cmocka_unit_test(test_repeat_runs_the_kernel_again),
        cmocka_unit_test(test_client_killed_mid_job),
        cmocka_unit_test(test_device_tensors),
        cmocka_unit_test(test_reply_ring_protocol),
        cmocka_unit_test(test_reply_ring_client),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(test_sigterm_drains),
        cmocka_unit_test(test_poll_after_daemon_exit),
        cmocka_unit_test(test_request_ring_protocol),
        cmocka_unit_test(test_request_ring_client),
        cmocka_unit_test(test_not_running),
    };
    int failed = cmocka_run_group_tests_name("integration", shared, group_daemon_start, group_daemon_stop);
    failed += cmocka_run_group_tests_name("lifecycle", alone, NULL, NULL);
    return failed;
}
