/* Work ordered on the client's CUDA stream through gllmd, on a GPU: paged decode latency as
 * the stream sees it (B1 L8192, B64 L4096) beside the host-synchronised path; a wait nobody
 * satisfies, released at its deadline while another connection is served on time; a client
 * SIGKILLed while its jobs wait, after which gllmd serves on and holds nothing of it.
 * Runs against $GLLM_SOCKET or a gllmd it starts; exit 77 without a CUDA driver or device. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_client.h"

extern char **environ;

enum { HQ = 32, HKV = 8, D = 128, PAGE = 16 };
#define F16_ONE 0x3c003c00u   /* two f16 1.0s: V all ones makes every output element 1.0 */

/* A paged decode of B sequences of L tokens, everything but the small page-table arrays in
 * this process's own memory imported by gllmd: q, out, both pools, indices (a shuffled
 * permutation of the pages), and 4 KiB of scratch for the producer and consumer. */
struct paged_job {
    struct own_alloc own;
    gllm_memory *mem, *table;   /* table: indptr and last_page_len, an arena */
    gllm_paged_attention_params p;
    CUdeviceptr scratch, out;
    size_t out_bytes;
};

static void paged_setup(gllm_client *c, struct paged_job *j, int64_t B, int64_t L)
{
    const int64_t per_seq = L / PAGE, P = B * per_seq;
    const size_t qb = (size_t)(B * HQ * D) * 2, pool = (size_t)(P * PAGE * HKV * D) * 2,
                 ib = (size_t)P * 4;
    const size_t bytes = round_up(2 * qb + 2 * pool + ib + 4096, own_granularity());
    j->own = own_create(bytes);
    check_gllm(c, gllm_memory_import(c, j->own.fd, bytes, 0, &j->mem), "gllm_memory_import");
    check_gllm(c, gllm_arena_create(c, 4096 + (size_t)B * 8, &j->table), "gllm_arena_create");
    const CUdeviceptr base = j->own.ptr;
    /* q and the pools all ones: out is all ones whatever the weights are. */
    check_cu(cu.cuMemsetD32Async(base, F16_ONE, (2 * qb + 2 * pool) / 4, NULL), "memset");
    int32_t *idx = malloc(ib);
    for (int64_t i = 0; i < P; i++)
        idx[i] = (int32_t)i;
    uint64_t seed = 11;
    for (int64_t i = P - 1; i > 0; i--) {
        const int64_t k = (int64_t)(rng_next(&seed) % (uint64_t)(i + 1));
        const int32_t x = idx[i];
        idx[i] = idx[k], idx[k] = x;
    }
    check_cu(cu.cuMemcpyHtoD(base + 2 * qb + 2 * pool, idx, ib), "cuMemcpyHtoD");
    check_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    free(idx);
    int32_t *indptr = gllm_memory_data(j->table), *last = indptr + B + 1;
    for (int64_t b = 0; b <= B; b++)
        indptr[b] = (int32_t)(b * per_seq);
    for (int64_t b = 0; b < B; b++)
        last[b] = PAGE;
    gllm_paged_attention_params *p = &j->p;
    *p = (gllm_paged_attention_params){.size = sizeof *p};
    const int64_t qs[3] = {B, HQ, D}, ps[4] = {P, PAGE, HKV, D}, is[1] = {P}, ips[1] = {B + 1},
                  ls[1] = {B};
    check_gllm(c, gllm_tensor_init(j->mem, 0, GLLM_DTYPE_F16, 3, qs, &p->q), "q");
    check_gllm(c, gllm_tensor_init(j->mem, qb, GLLM_DTYPE_F16, 3, qs, &p->out), "out");
    check_gllm(c, gllm_tensor_init(j->mem, 2 * qb, GLLM_DTYPE_F16, 4, ps, &p->kv.k_cache), "k");
    check_gllm(c, gllm_tensor_init(j->mem, 2 * qb + pool, GLLM_DTYPE_F16, 4, ps, &p->kv.v_cache),
               "v");
    check_gllm(c, gllm_tensor_init(j->mem, 2 * qb + 2 * pool, GLLM_DTYPE_I32, 1, is,
                                   &p->kv.indices), "indices");
    check_gllm(c, gllm_tensor_init(j->table, 0, GLLM_DTYPE_I32, 1, ips, &p->kv.indptr), "indptr");
    check_gllm(c, gllm_tensor_init(j->table, (uint64_t)(B + 1) * 4, GLLM_DTYPE_I32, 1, ls,
                                   &p->kv.last_page_len), "last_page_len");
    j->scratch = base + 2 * qb + 2 * pool + ib;
    j->out = base + qb;
    j->out_bytes = qb;
}

static void paged_free(gllm_client *c, struct paged_job *j)
{
    check_gllm(c, gllm_memory_release(j->mem), "gllm_memory_release");
    check_gllm(c, gllm_memory_release(j->table), "gllm_memory_release");
    own_free(&j->own);
}

/* Counts output elements that are not f16 1.0 (the output was poisoned before). */
static size_t paged_out_wrong(const struct paged_job *j)
{
    uint16_t *h = malloc(j->out_bytes);
    check_cu(cu.cuMemcpyDtoH(h, j->out, j->out_bytes), "cuMemcpyDtoH");
    size_t bad = 0;
    for (size_t i = 0; i < j->out_bytes / 2; i++)
        bad += h[i] != 0x3c00;
    free(h);
    return bad;
}

/* Latency as the client's stream sees it: from the end of its producer (a memset on its
 * stream) to the start of its consumer, minus gllmd's kernel. Ordered: gllm_stream_order
 * and the decode submitted with its counters, no host synchronisation; once with the wait's
 * counter in an arena, once in device memory (gllm_stream_order_on). Synchronised: the
 * stream synchronised on the host, gllm_attention_decode, then the consumer queued. */
static void paged_latency(gllm_client *c, int64_t B, int64_t L, bool long_producer)
{
    enum { WARMUP = 20, STEPS = 300 };
    struct paged_job j;
    paged_setup(c, &j, B, L);
    /* A long producer (a 256 MiB memset, about 100 us) as a layer's projections would be:
     * the host has submitted the job before the stream gets to its counter, so what is
     * measured is the hand-over on the GPU side alone. Without it the host's submission is
     * part of the measure. */
    struct own_alloc big = {.fd = -1};
    if (long_producer)
        big = own_create(256u << 20);
    void *stream, *ev_a, *ev_b;
    check_cu(cu.cuStreamCreate(&stream, 1), "cuStreamCreate");
    check_cu(cu.cuEventCreate(&ev_a, 0), "cuEventCreate");
    check_cu(cu.cuEventCreate(&ev_b, 0), "cuEventCreate");
    /* Modes: 0 ordered, its wait counter in an arena (gllm_stream_order); 1 synchronised on
     * the host; 2 ordered, its wait counter in device memory (gllm_stream_order_on). */
    static double added[3][STEPS], kern[3][STEPS], host_order[STEPS], host_submit[STEPS];
    size_t wrong[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; mode++) {
        check_cu(cu.cuMemsetD32Async(j.out, 0xffffffffu, j.out_bytes / 4, stream), "poison");
        for (int i = 0; i < WARMUP + STEPS; i++) {
            if (long_producer)
                check_cu(cu.cuMemsetD32Async(big.ptr, (unsigned)i, big.bytes / 4, stream),
                         "long producer");
            check_cu(cu.cuMemsetD32Async(j.scratch, (unsigned)i, 256, stream), "producer");
            check_cu(cu.cuEventRecord(ev_a, stream), "cuEventRecord");
            gllm_job_result res = GLLM_JOB_RESULT_INIT;
            if (mode != 1) {
                gllm_paged_attention_params p = j.p;
                uint64_t job;
                const double h0 = now_s();
                check_gllm(c, gllm_stream_order_on(c, stream, mode == 2 ? 0 : -1, &p.wait,
                                                   &p.signal), "order");
                const double h1 = now_s();
                check_gllm(c, gllm_attention_decode_submit(c, &p, &job), "decode");
                if (i >= WARMUP && mode == 0) {   /* the host's cost of one ordered job */
                    host_order[i - WARMUP] = (h1 - h0) * 1e6;
                    host_submit[i - WARMUP] = (now_s() - h1) * 1e6;
                }
                check_cu(cu.cuEventRecord(ev_b, stream), "cuEventRecord");
                check_cu(cu.cuMemsetD32Async(j.scratch + 1024, (unsigned)i, 256, stream), "consumer");
                check_gllm(c, gllm_job_wait(c, job, &res), "the ordered decode's reply");
            } else {
                check_cu(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
                check_gllm(c, gllm_attention_decode(c, &j.p, &res), "decode");
                check_cu(cu.cuEventRecord(ev_b, stream), "cuEventRecord");
                check_cu(cu.cuMemsetD32Async(j.scratch + 1024, (unsigned)i, 256, stream), "consumer");
            }
            check_cu(cu.cuEventSynchronize(ev_b), "cuEventSynchronize");
            float ms = 0;
            check_cu(cu.cuEventElapsedTime(&ms, ev_a, ev_b), "cuEventElapsedTime");
            if (i >= WARMUP) {
                added[mode][i - WARMUP] = (double)ms * 1e3 - (double)res.kernel_ns / 1e3;
                kern[mode][i - WARMUP] = (double)res.kernel_ns / 1e3;
            }
        }
        wrong[mode] = paged_out_wrong(&j);
    }
    const bool ok = wrong[0] == 0 && wrong[1] == 0 && wrong[2] == 0;
    failures += !ok;
    printf("paged      decode B%lld L%lld Hq%d Hkv%d D%d page %d f16, %s producer, %s (%zu/%zu wrong outputs)\n"
           "           added us as the stream sees it, %d steps: ordered p50 %.1f p99 %.1f "
           "(target p50 <= 12, p99 <= 40); host-synchronised p50 %.1f p99 %.1f; "
           "gllmd kernel p50 %.1f / %.1f us\n"
           "           ordered with the wait's counter in device memory: p50 %.1f p99 %.1f\n",
           (long long)B, (long long)L, HQ, HKV, D, PAGE, long_producer ? "long" : "short",
           ok ? "ok" : "FAIL", wrong[0], wrong[1],
           STEPS, pct(added[0], STEPS, 0.5), pct(added[0], STEPS, 0.99), pct(added[1], STEPS, 0.5),
           pct(added[1], STEPS, 0.99), pct(kern[0], STEPS, 0.5), pct(kern[1], STEPS, 0.5),
           pct(added[2], STEPS, 0.5), pct(added[2], STEPS, 0.99));
    printf("           host time per ordered job, p50: gllm_stream_order %.1f us, the submission "
           "%.1f us\n", pct(host_order, STEPS, 0.5), pct(host_submit, STEPS, 0.5));
    printf("{\"case\": \"paged_decode_ordered\", \"batch\": %lld, \"kv_len\": %lld, "
           "\"producer\": \"%s\", "
           "\"ordered_added_p50_us\": %.1f, \"ordered_added_p99_us\": %.1f, "
           "\"host_synchronised_added_p50_us\": %.1f, \"host_synchronised_added_p99_us\": %.1f, "
           "\"gllmd_kernel_p50_us\": %.1f, \"host_stream_order_p50_us\": %.1f, "
           "\"host_submit_p50_us\": %.1f, \"ordered_device_wait_added_p50_us\": %.1f, "
           "\"ordered_device_wait_added_p99_us\": %.1f}\n",
           (long long)B, (long long)L, long_producer ? "long" : "short",
           pct(added[0], STEPS, 0.5), pct(added[0], STEPS, 0.99),
           pct(added[1], STEPS, 0.5), pct(added[1], STEPS, 0.99), pct(kern[0], STEPS, 0.5),
           pct(host_order, STEPS, 0.5), pct(host_submit, STEPS, 0.5), pct(added[2], STEPS, 0.5),
           pct(added[2], STEPS, 0.99));
    check_cu(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
    paged_free(c, &j);
    if (long_producer)
        own_free(&big);
}

/* Median end-to-end microseconds of n synchronous decodes on connection c. */
static double decode_p50_us(gllm_client *c, const struct paged_job *j, int n)
{
    double us[64];
    for (int i = 0; i < n; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        const double t0 = now_s();
        check_gllm(c, gllm_attention_decode(c, &j->p, &res), "decode");
        us[i] = (now_s() - t0) * 1e6;
    }
    return median(us, n);
}

/* A wait nobody satisfies: the job fails with WAITTIMEOUT at its deadline, still signals
 * (so the client's stream goes on), and a second connection's jobs run on time meanwhile. */
static void wait_never_comes(const char *sock, gllm_client *c)
{
    enum { TIMEOUT_MS = 300, N = 40 };
    gllm_client *other;
    const int rc = gllm_connect(sock, &other);
    if (rc < 0) {
        fprintf(stderr, "FAIL: a second connection: %s\n", gllm_strerror(rc));
        exit(1);
    }
    struct paged_job j, k;
    paged_setup(c, &j, 1, 4096);
    paged_setup(other, &k, 1, 4096);
    const double alone = decode_p50_us(other, &k, N);
    gllm_memory *ctr;
    check_gllm(c, gllm_arena_create(c, 4096, &ctr), "gllm_arena_create");
    gllm_paged_attention_params p = j.p;
    p.wait = (gllm_counter){.memory = ctr, .offset = 0, .value = 1, .timeout_ms = TIMEOUT_MS};
    p.signal = (gllm_counter){.memory = ctr, .offset = 64, .value = 1};
    void *stream;
    check_cu(cu.cuStreamCreate(&stream, 1), "cuStreamCreate");
    check_gllm(c, gllm_stream_wait_counter(ctr, 64, 1, stream), "gllm_stream_wait_counter");
    uint64_t job;
    const double t0 = now_s();
    check_gllm(c, gllm_attention_decode_submit(c, &p, &job), "decode");
    const double during = decode_p50_us(other, &k, N);
    const double served_by = (now_s() - t0) * 1e3;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    const int r = gllm_job_wait(c, job, &res);
    const double failed_after = (now_s() - t0) * 1e3;
    check_cu(cu.cuStreamSynchronize(stream), "the stream waiting on the failed job's signal");
    const bool ok = r == GLLM_EWAITTIMEOUT && served_by < failed_after;
    failures += !ok;
    printf("timeout    %s: the waiting decode failed with %s after %.0f ms (timeout %d ms), its "
           "signal released the stream; the other connection's %d decodes, done %.0f ms after "
           "the submission, p50 %.1f us (%.1f us alone)\n",
           ok ? "ok" : "FAIL", gllm_error_name(r), failed_after, TIMEOUT_MS, N, served_by, during,
           alone);
    printf("{\"case\": \"wait_never_comes\", \"timeout_ms\": %d, \"failed_after_ms\": %.1f, "
           "\"other_p50_us_during\": %.1f, \"other_p50_us_alone\": %.1f}\n", TIMEOUT_MS,
           failed_after, during, alone);
    check_gllm(c, gllm_memory_release(ctr), "gllm_memory_release");
    paged_free(c, &j);
    paged_free(other, &k);
    gllm_disconnect(other);
}

/* The child of killed_while_waiting: its own context and memory, jobs waiting on a counter
 * it never raises; says "ready" on stdout and sleeps until it is killed. */
static int waiting_client(void)
{
    struct gpu_test t;
    int r = gpu_test_start(&t);
    if (r)
        return r;
    struct paged_job j;
    paged_setup(t.c, &j, 4, 2048);
    gllm_memory *ctr;
    check_gllm(t.c, gllm_arena_create(t.c, 4096, &ctr), "gllm_arena_create");
    gllm_paged_attention_params p = j.p;
    p.wait = (gllm_counter){.memory = ctr, .offset = 0, .value = 1, .timeout_ms = 600000};
    p.signal = (gllm_counter){.memory = ctr, .offset = 64, .value = 1};
    uint64_t job;
    for (int i = 0; i < 4; i++)
        check_gllm(t.c, gllm_attention_decode_submit(t.c, &p, &job), "decode");
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}

/* Polls status until the connection count, imported bytes and jobs in flight are want's. */
static bool settles_to(gllm_client *c, const gllm_status *want, double *ms)
{
    const double t0 = now_s();
    gllm_status st = GLLM_STATUS_INIT;
    for (int i = 0; i < 1000; i++) {
        check_gllm(c, gllm_status_get(c, &st), "status");
        if (st.clients == want->clients && st.imported_bytes == want->imported_bytes &&
            st.dtensors == want->dtensors && st.jobs_inflight == want->jobs_inflight &&
            st.arenas == want->arenas) {
            *ms = (now_s() - t0) * 1e3;
            return true;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "gllmd holds %u clients, %llu imported bytes, %u tensors, %u arenas, %llu "
            "jobs after 10 s\n", st.clients, (unsigned long long)st.imported_bytes, st.dtensors,
            st.arenas, (unsigned long long)st.jobs_inflight);
    return false;
}

/* A client SIGKILLed while its jobs wait in gllmd: the others are served meanwhile and
 * after, and gllmd drops everything of it (connection, imported memory, arenas, jobs). */
static void killed_while_waiting(const char *sock, gllm_client *c)
{
    gllm_status before = GLLM_STATUS_INIT;
    check_gllm(c, gllm_status_get(c, &before), "status");
    struct paged_job k;
    paged_setup(c, &k, 1, 4096);
    gllm_status want = GLLM_STATUS_INIT;
    check_gllm(c, gllm_status_get(c, &want), "status");
    const double alone = decode_p50_us(c, &k, 40);
    int out[2];
    if (pipe(out) < 0)
        exit(1);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char self[] = "/proc/self/exe", arg[] = "--waiting-client";
    char *argv[] = {self, arg, NULL};
    setenv("GLLM_SOCKET", sock, 1);
    pid_t kid;
    if (posix_spawn(&kid, "/proc/self/exe", &fa, NULL, argv, environ) != 0) {
        fprintf(stderr, "FAIL: posix_spawn\n");
        exit(1);
    }
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    char line[256] = "";
    FILE *f = fdopen(out[0], "r");
    while (fgets(line, sizeof line, f) && strcmp(line, "ready\n") != 0) {
    }
    const bool child_ready = strcmp(line, "ready\n") == 0;
    gllm_status mid = GLLM_STATUS_INIT;
    check_gllm(c, gllm_status_get(c, &mid), "status");
    const double during = decode_p50_us(c, &k, 40);
    kill(kid, SIGKILL);
    int st;
    waitpid(kid, &st, 0);
    fclose(f);
    double settle_ms = 0;
    const bool settled = settles_to(c, &want, &settle_ms);
    const double after = decode_p50_us(c, &k, 40);
    const bool ok = child_ready && mid.jobs_inflight >= 4 && mid.imported_bytes > want.imported_bytes &&
                    settled;
    failures += !ok;
    printf("killed     %s: a client with %llu jobs waiting and %.1f MiB imported, SIGKILLed; gllmd "
           "back to its earlier state %.0f ms later; the other connection's decode p50 %.1f us "
           "alone, %.1f with the waiting client, %.1f after\n",
           ok ? "ok" : "FAIL", (unsigned long long)(mid.jobs_inflight - want.jobs_inflight),
           (double)(mid.imported_bytes - want.imported_bytes) / (1 << 20), settle_ms, alone,
           during, after);
    printf("{\"case\": \"killed_while_waiting\", \"settled_ms\": %.1f, \"other_p50_us_alone\": %.1f, "
           "\"other_p50_us_during\": %.1f, \"other_p50_us_after\": %.1f}\n", settle_ms, alone,
           during, after);
    paged_free(c, &k);
    gllm_status end = GLLM_STATUS_INIT;
    check_gllm(c, gllm_status_get(c, &end), "status");
    if (end.imported_bytes != before.imported_bytes || end.dtensors != before.dtensors) {
        fprintf(stderr, "FAIL: %llu bytes imported at the end, %llu before\n",
                (unsigned long long)end.imported_bytes, (unsigned long long)before.imported_bytes);
        failures++;
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--waiting-client") == 0)
        return waiting_client();
    struct gpu_test t;
    const int r = gpu_test_start(&t);
    if (r)
        return r;
    for (int long_producer = 0; long_producer < 2; long_producer++) {
        paged_latency(t.c, 1, 8192, long_producer);
        paged_latency(t.c, 64, 4096, long_producer);
    }
    wait_never_comes(t.sock, t.c);
    killed_while_waiting(t.sock, t.c);
    return gpu_test_finish(&t);
}
