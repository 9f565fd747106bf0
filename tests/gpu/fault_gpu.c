/* Faults on a GPU (issue 24): gllmd-fault on the CUDA backend; for each injected fault
 * (an out-of-bounds read, a misaligned read standing in for a trap, a stream wait that
 * nothing satisfies) client A's job fails with DEVLOST or JOBTIMEOUT and client B's jobs in
 * flight end (done or DEVLOST, never a hang).
 *
 * With device processes (the default): gllmd replaces the device's process and keeps
 * serving; B's connection stays up, B's next job runs on it, B's device tensors answer
 * DEVLOST and are made again, and device memory and gllmd's fds come back to where they
 * started. With device_processes off: gllmd exits with status 3 (CUDA cannot give a process a
 * new context after a sticky error), is started again on the same socket as systemd's
 * Restart=on-failure would, and B connects again.
 *
 * Prints one JSON line per fault with the time from A's submission of the faulting job to
 * B's next job done (target: under 1 s). Exit 77 without a GPU. Run it without MPS: under MPS
 * the fault would end the MPS server's other clients too, and the times are not gllmd's.
 * Usage: fault_gpu   (GLLMD_FAULT_PATH: another gllmd-fault than the build's) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "../fault_scene.h"

/* 0 when libcuda.so.1 opens and sees a device; else 77 with the reason printed. */
static int have_gpu(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("SKIPPED: libcuda.so.1 not loadable\n");
        return 77;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int n = 0;
    int r = init && count && init(0) == 0 && count(&n) == 0 && n > 0 ? 0 : 77;
    if (r)
        printf("SKIPPED: no CUDA device\n");
    dlclose(lib);
    return r;
}

static uint64_t now_ns_test(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0)
{
    return (double)(now_ns_test() - t0) / 1e6;
}

static void json_escape(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; *in && o + 2 < len; in++) {
        if (*in == '"' || *in == '\\')
            out[o++] = '\\';
        out[o++] = (*in >= 32 && *in < 127) ? *in : '?';
    }
    out[o] = '\0';
}

/* A release once gllmd may have gone: the client frees its side either way. */
static void release_any(gllm_memory *m)
{
    int r = gllm_memory_release(m);
    assert_true(r == 0 || r == GLLM_EDISCONNECTED);
}

static const char CONF[] = "watchdog_ms = 500\n";
static const char CONF_IN_PROCESS[] = "watchdog_ms = 500\ndevice_processes = off\n";

/* B's jobs in flight around A's fault: each done (and right) or DEVLOST, or with gllmd
 * gone (in process) DISCONNECTED. */
static void end_inflight(gllm_client *b, struct live_job *jobs, int n, int counts[3])
{
    for (int i = 0; i < n; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        int s = gllm_job_wait(b, jobs[i].id, &res);
        assert_true(s == 0 || s == GLLM_EDEVLOST || s == GLLM_EDISCONNECTED);
        if (s == 0)
            assert_true(job_output_ok(&jobs[i]));
        counts[0] += s == 0, counts[1] += s == GLLM_EDEVLOST, counts[2] += s == GLLM_EDISCONNECTED;
        release_any(jobs[i].arena);
    }
}

static void print_result(const char *mode, const char *kind, int want, const char *msg,
                         int status, double detect_ms, double exit_ms, double start_ms,
                         double serving_ms, const int counts[3], long long used_delta,
                         long long fds_delta, uint64_t reset_ns, long rss_delta_kib)
{
    char esc_msg[300];
    json_escape(msg, esc_msg, sizeof esc_msg);
    /* detect: A's submission to its error; exit (in process): to gllmd's exit; start (in
     * process): the new gllmd's start to its socket accepting; reset (device processes):
     * gllmd's own time for the reset, the old process reaped and a new one serving;
     * fault_to_serving: A's submission to B's next job done (no RestartSec counted). */
    printf("{\"test\": \"fault_gpu\", \"mode\": \"%s\", \"kind\": \"%s\", \"code\": %d, "
           "\"message\": \"%s\", \"exit_status\": %d, \"detect_ms\": %.2f, \"exit_ms\": %.2f, "
           "\"start_ms\": %.2f, \"reset_ms\": %.2f, \"fault_to_serving_ms\": %.2f, "
           "\"target_ms\": 1000, \"b_inflight_ok\": %d, \"b_inflight_devlost\": %d, "
           "\"b_inflight_disconnected\": %d, \"device_used_delta_bytes\": %lld, "
           "\"gllmd_fds_delta\": %lld, \"gllmd_rss_delta_kib\": %ld}\n",
           mode, kind, want, esc_msg, status, detect_ms, exit_ms, start_ms,
           (double)reset_ns / 1e6, serving_ms, counts[0], counts[1], counts[2], used_delta,
           fds_delta, rss_delta_kib);
    fflush(stdout);
}

/* What every scene does up to the fault: gllmd-fault with conf, client B with device tensors
 * and 16 jobs in flight, client A armed with kind, A's faulting job answered with want, B's
 * jobs in flight ended (counts: done, DEVLOST, DISCONNECTED). */
struct scene {
    struct daemon d;
    gllm_client *b;
    struct raw_client a;
    struct dev_job dj;
    uint64_t used0, t0;
    int fds0;
    long rss0;
    double detect_ms;
    int counts[3];
    char msg[256];
};

static void scene_fault(struct scene *sc, const char *conf, const char *kind, int want)
{
    memset(sc, 0, sizeof *sc);
    setenv("GLLM_TEST_BACKEND", "cuda", 1);
    assert_int_equal(start_fault_daemon(&sc->d, conf), 0);
    sc->used0 = device_used(sc->d.socket);
    sc->fds0 = settled_fds(&sc->d);
    sc->rss0 = daemon_rss_kib(&sc->d);
    assert_int_equal(gllm_connect(sc->d.socket, &sc->b), 0);
    dev_job_setup(sc->b, &sc->dj, 7);
    assert_int_equal(dev_job_run(sc->b, &sc->dj), 0);
    raw_client_open(&sc->a, sc->d.socket);
    assert_int_equal(raw_debug_fault(&sc->a, kind), 0);
    enum { N = 16 };
    struct live_job inflight[N];
    submit_jobs(sc->b, inflight, N, &SPEC, 100);
    sc->t0 = now_ns_test();
    assert_int_equal(raw_attention(&sc->a, sc->msg, sizeof sc->msg), want);
    sc->detect_ms = ms_since(sc->t0);
    end_inflight(sc->b, inflight, N, sc->counts);
}

/* Device processes: the device comes back under B's open connection. */
static void gpu_scene(const char *kind, int want)
{
    struct scene sc;
    scene_fault(&sc, CONF, kind, want);
    assert_int_equal(sc.counts[2], 0);          /* no connection ended */

    /* B's next job on the same connection, behind the reset. */
    struct live_job next;
    submit_jobs(sc.b, &next, 1, &SPEC, 300);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(sc.b, next.id, &res), 0);
    const double serving_ms = ms_since(sc.t0);
    assert_true(job_output_ok(&next));
    assert_int_equal(gllm_memory_release(next.arena), 0);
    /* A's next job too. */
    assert_int_equal(raw_attention(&sc.a, NULL, 0), 0);

    /* B's device tensors went with the old process: DEVLOST; freed and made again, they serve. */
    assert_int_equal(dev_job_run(sc.b, &sc.dj), GLLM_EDEVLOST);
    assert_int_equal(gllm_memory_release(sc.dj.kd), 0);
    assert_int_equal(gllm_memory_release(sc.dj.vd), 0);
    assert_int_equal(dev_job_upload(sc.b, &sc.dj), 0);
    assert_int_equal(dev_job_run(sc.b, &sc.dj), 0);
    uint64_t reset_ns = 0;
    assert_int_equal(device_resets(sc.d.socket, NULL, 0, &reset_ns), 1);

    dev_job_free(&sc.dj);
    raw_client_close(&sc.a);
    gllm_disconnect(sc.b);
    wait_quiet(sc.d.socket, 0);
    const long long used_delta = (long long)device_used(sc.d.socket) - (long long)sc.used0;
    const long long fds_delta = (long long)settled_fds(&sc.d) - sc.fds0;
    const long rss_delta = daemon_rss_kib(&sc.d) - sc.rss0;
    print_result("device_processes", kind, want, sc.msg, -1, sc.detect_ms, 0, 0, serving_ms,
                 sc.counts, used_delta, fds_delta, reset_ns, rss_delta);
    /* The old process's device memory went back to the driver (status counts the GPU's);
     * the new process has its own context, so a little more or less is in use. */
    assert_true(used_delta < 256ll << 20);
    assert_int_equal(fds_delta, 0);
    /* gllmd's host memory: the allocator keeps some of what it was given. */
    assert_true(rss_delta < 16 * 1024);
    assert_int_equal(daemon_stop(&sc.d), 0);
}

/* device_processes off: gllmd exits with status 3 and a new gllmd serves. */
static void gpu_scene_in_process(const char *kind, int want)
{
    struct scene sc;
    scene_fault(&sc, CONF_IN_PROCESS, kind, want);
    /* gllmd bounds its exit by a 1 s flush of replies; 5 s is a failure, not a wait. */
    const int status = wait_daemon_exit(&sc.d, 5000);
    const double exit_ms = ms_since(sc.t0);
    assert_int_equal(status, EXIT_DEVICE_LOST);
    release_any(sc.dj.kd);
    release_any(sc.dj.vd);
    release_any(sc.dj.j.arena);
    gllm_disconnect(sc.b);
    raw_client_close(&sc.a);

    const uint64_t t_restart = now_ns_test();
    assert_int_equal(restart_fault_daemon(&sc.d, CONF_IN_PROCESS), 0);
    const double start_ms = ms_since(t_restart);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(sc.d.socket, &b), 0);
    struct live_job next;
    submit_jobs(b, &next, 1, &SPEC, 300);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_job_wait(b, next.id, &res), 0);
    const double serving_ms = ms_since(sc.t0);
    assert_true(job_output_ok(&next));
    assert_int_equal(gllm_memory_release(next.arena), 0);
    gllm_disconnect(b);
    print_result("in_process", kind, want, sc.msg, status, sc.detect_ms, exit_ms, start_ms,
                 serving_ms, sc.counts, 0, 0, 0, 0);
    assert_int_equal(daemon_stop(&sc.d), 0);
}

static void test_oob(void **state)
{
    (void)state;
    gpu_scene("oob", GLLM_EDEVLOST);
}

static void test_trap(void **state)
{
    (void)state;
    gpu_scene("trap", GLLM_EDEVLOST);
}

static void test_spin(void **state)
{
    (void)state;
    gpu_scene("spin", GLLM_EJOBTIMEOUT);
}

static void test_repeated(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        gpu_scene(i % 2 ? "trap" : "oob", GLLM_EDEVLOST);
}

/* Two devices or more: A's fault on device 0 leaves device 1 alone. B's device tensors on
 * device 1 and its jobs there run through the fault and after it, device 1 is never reset,
 * and only device 0's tensors are lost. Skipped (passing) on one device. */
static void test_other_device_untouched(void **state)
{
    (void)state;
    struct daemon d;
    setenv("GLLM_TEST_BACKEND", "cuda", 1);
    assert_int_equal(start_fault_daemon(&d, CONF), 0);
    gllm_client *b = NULL;
    assert_int_equal(gllm_connect(d.socket, &b), 0);
    gllm_caps caps = GLLM_CAPS_INIT;
    assert_int_equal(gllm_client_caps(b, &caps), 0);
    if (caps.ndevices < 2) {
        printf("{\"test\": \"fault_gpu\", \"scene\": \"other_device_untouched\", "
               "\"skipped\": \"one device\"}\n");
        gllm_disconnect(b);
        assert_int_equal(daemon_stop(&d), 0);
        return;
    }
    struct dev_job on0, on1;
    dev_job_setup_on(b, &on0, 7, 0);
    dev_job_setup_on(b, &on1, 8, 1);
    assert_int_equal(dev_job_run(b, &on0), 0);
    assert_int_equal(dev_job_run(b, &on1), 0);

    struct raw_client a;
    raw_client_open(&a, d.socket);
    assert_int_equal(raw_debug_fault(&a, "oob"), 0);
    char msg[256];
    assert_int_equal(raw_attention(&a, msg, sizeof msg), GLLM_EDEVLOST);
    /* Device 1 served throughout: its tensors are the same ones, never lost. */
    int ok1 = 0;
    for (int i = 0; i < 20; i++)
        ok1 += dev_job_run(b, &on1) == 0;
    assert_int_equal(ok1, 20);
    assert_int_equal(dev_job_run(b, &on0), GLLM_EDEVLOST);
    assert_int_equal(device_resets_on(d.socket, 0, NULL, 0, NULL), 1);
    assert_int_equal(device_resets_on(d.socket, 1, NULL, 0, NULL), 0);
    printf("{\"test\": \"fault_gpu\", \"scene\": \"other_device_untouched\", \"devices\": %d, "
           "\"device1_jobs_ok_after_fault\": %d, \"device0_resets\": 1, "
           "\"device1_resets\": 0}\n", caps.ndevices, ok1);
    fflush(stdout);
    dev_job_free(&on1);
    assert_int_equal(gllm_memory_release(on0.kd), 0);
    assert_int_equal(gllm_memory_release(on0.vd), 0);
    assert_int_equal(gllm_memory_release(on0.j.arena), 0);
    raw_client_close(&a);
    gllm_disconnect(b);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_oob_in_process(void **state)
{
    (void)state;
    gpu_scene_in_process("oob", GLLM_EDEVLOST);
}

int main(void)
{
    int r = have_gpu();
    if (r)
        return r;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oob),
        cmocka_unit_test(test_trap),
        cmocka_unit_test(test_spin),
        cmocka_unit_test(test_repeated),
        cmocka_unit_test(test_other_device_untouched),
        cmocka_unit_test(test_oob_in_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
