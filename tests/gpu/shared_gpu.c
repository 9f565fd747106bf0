/* Shared device memory on a GPU through gllmd: gllmd's exports mapped into this process's
 * context, this process's own VMM allocations imported by gllmd, attention over each checked
 * against float64, and prefill end-to-end time against kernel time with imported tensors.
 * Runs against $GLLM_SOCKET, or a gllmd it starts on the CUDA backend; exit 77 (skipped)
 * where libcuda.so.1 cannot be opened or has no device. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_client.h"

/* ---- attention over four device tensors, checked against float64 ---- */

struct shape {
    int64_t B, H, S, D;
    bool causal;
};

static size_t tensor_elems(const struct shape *s)
{
    return (size_t)(s->B * s->H * s->S * s->D);
}

/* Q, K, V written with cuMemcpyHtoD to ptr[0..2], out (ptr[3]) poisoned; attention through
 * gllmd over mem[]; out read with cuMemcpyDtoH. Returns the relative error; *us the job's
 * kernel time. */
static double attention_on_device(gllm_client *c, gllm_memory *mem[4], const CUdeviceptr ptr[4],
                                  const struct shape *s, uint64_t seed, double *us)
{
    const size_t n = tensor_elems(s), bytes = n * 2;
    void *host[4];
    for (int i = 0; i < 4; i++) {
        host[i] = malloc(bytes);
        if (!host[i]) {
            fprintf(stderr, "FAIL: out of host memory\n");
            exit(1);
        }
    }
    for (int i = 0; i < 3; i++) {
        fill_random(host[i], GLLM_DTYPE_F16, n, &seed);
        check_cu(cu.cuMemcpyHtoD(ptr[i], host[i], bytes), "cuMemcpyHtoD");
    }
    memset(host[3], 0xff, bytes);   /* NaN: an element gllmd does not write fails the check */
    check_cu(cu.cuMemcpyHtoD(ptr[3], host[3], bytes), "cuMemcpyHtoD");
    check_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");   /* our writes before its reads */
    const int64_t shape[4] = {s->B, s->H, s->S, s->D};
    gllm_attention_params p = {.size = sizeof p, .flags = s->causal ? GLLM_ATTN_CAUSAL : 0};
    gllm_tensor *t[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++)
        check_gllm(c, gllm_tensor_init(mem[i], 0, GLLM_DTYPE_F16, 4, shape, t[i]), "tensor");
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    check_gllm(c, gllm_attention(c, &p, &res), "attention");
    *us = (double)res.kernel_ns / 1e3;
    check_cu(cu.cuMemcpyDtoH(host[3], ptr[3], bytes), "cuMemcpyDtoH");
    double *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    const struct ref_view q = {host[0], GLLM_DTYPE_F16,
                               {s->H * s->S * s->D, s->S * s->D, s->D, 1}};
    struct ref_view k = q, v = q;
    k.data = host[1];
    v.data = host[2];
    ref64_attention(s->B, s->H, s->H, s->S, s->S, s->D, q, k, v, s->causal,
                    1.0 / sqrt((double)s->D), want, NULL);
    for (size_t i = 0; i < n; i++)
        got[i] = elem_get(host[3], GLLM_DTYPE_F16, (int64_t)i);
    const double err = ref64_rel_error(got, want, n);
    free(want);
    free(got);
    for (int i = 0; i < 4; i++)
        free(host[i]);
    return err;
}

static void report(const char *name, const struct shape *s, double err, double us)
{
    const double tol = ref64_tolerance(GLLM_DTYPE_F16).out;
    const bool ok = err <= tol;
    printf("%-10s B%lld H%lld S%lld D%lld f16%s  %-4s rel err %.2e (tol %.1e)  kernel %.1f us\n",
           name, (long long)s->B, (long long)s->H, (long long)s->S, (long long)s->D,
           s->causal ? " causal" : "", ok ? "ok" : "FAIL", err, tol, us);
    failures += !ok;
}

/* gllmd's exports, mapped here with gllm_memory_map. */
static void exported_case(gllm_client *c, CUcontext ctx)
{
    const struct shape s = {1, 4, 256, 64, true};
    gllm_memory *mem[4];
    CUdeviceptr ptr[4];
    for (int i = 0; i < 4; i++) {
        check_gllm(c, gllm_memory_create_shared(c, tensor_elems(&s) * 2, 0, &mem[i]),
                   "gllm_memory_create_shared");
        void *p = NULL;
        if (i == 0) {
            /* Without a current context there is nothing to map into. */
            check_cu(cu.cuCtxSetCurrent(NULL), "cuCtxSetCurrent(NULL)");
            const int r = gllm_memory_map(mem[i], &p);
            check_cu(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
            if (r != -ENODEV) {
                fprintf(stderr, "FAIL: gllm_memory_map without a context: %s, want -ENODEV\n",
                        gllm_error_name(r));
                failures++;
            }
        }
        check_gllm(c, gllm_memory_map(mem[i], &p), "gllm_memory_map");
        void *again = NULL;
        check_gllm(c, gllm_memory_map(mem[i], &again), "gllm_memory_map again");
        if (again != p || gllm_memory_data(mem[i]) != NULL) {
            fprintf(stderr, "FAIL: a second map moved the pointer, or data is not NULL\n");
            failures++;
        }
        ptr[i] = (CUdeviceptr)(uintptr_t)p;
    }
    double us;
    const double err = attention_on_device(c, mem, ptr, &s, 1, &us);
    report("exported", &s, err, us);
    for (int i = 0; i < 4; i++)
        check_gllm(c, gllm_memory_release(mem[i]), "gllm_memory_release");
}

/* This process's allocations, imported by gllmd. */
static void imported_case(gllm_client *c)
{
    const struct shape s = {1, 4, 256, 64, true};
    const size_t bytes = round_up(tensor_elems(&s) * 2, own_granularity());
    struct own_alloc own[4];
    gllm_memory *mem[4];
    CUdeviceptr ptr[4];
    for (int i = 0; i < 4; i++) {
        own[i] = own_create(bytes);
        check_gllm(c, gllm_memory_import(c, own[i].fd, bytes, 0, &mem[i]), "gllm_memory_import");
        close(own[i].fd);   /* gllmd holds its own reference */
        own[i].fd = -1;
        ptr[i] = own[i].ptr;
    }
    double us;
    const double err = attention_on_device(c, mem, ptr, &s, 2, &us);
    report("imported", &s, err, us);
    for (int i = 0; i < 4; i++) {
        check_gllm(c, gllm_memory_release(mem[i]), "gllm_memory_release");
        own_free(&own[i]);
    }
}

/* Key or value element of the prefill's host copies, for spot-checked rows. */
struct host_kv {
    const void *k, *v;
    int64_t H, S, D;
};

static double host_kv_get(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value)
{
    const struct host_kv *x = ctx;
    return elem_get(value ? x->v : x->k, GLLM_DTYPE_F16, ((b * x->H + hk) * x->S + j) * x->D + d);
}

/* B4 H32 S2048 D128 prefill (the shape, and its causal variant) with imported
 * tensors: end to end (clock_gettime around gllm_attention) against the reply's kernel_ns,
 * 20 calls after warm-up. */
static void prefill_timing(gllm_client *c, bool causal)
{
    const struct shape s = {4, 32, 2048, 128, causal};
    enum { WARMUP = 3, CALLS = 20, CHECKED_ROWS = 16 };
    const size_t n = tensor_elems(&s), bytes = round_up(n * 2, own_granularity());
    struct own_alloc own[4];
    gllm_memory *mem[4];
    void *host[4];
    uint64_t seed = 3;
    for (int i = 0; i < 4; i++) {
        own[i] = own_create(bytes);
        check_gllm(c, gllm_memory_import(c, own[i].fd, bytes, 0, &mem[i]), "gllm_memory_import");
        host[i] = malloc(n * 2);
        if (!host[i]) {
            fprintf(stderr, "FAIL: out of host memory\n");
            exit(1);
        }
        if (i < 3) {
            fill_random(host[i], GLLM_DTYPE_F16, n, &seed);
            check_cu(cu.cuMemcpyHtoD(own[i].ptr, host[i], n * 2), "cuMemcpyHtoD");
        }
    }
    check_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    const int64_t shape[4] = {s.B, s.H, s.S, s.D};
    gllm_attention_params p = {.size = sizeof p, .flags = causal ? GLLM_ATTN_CAUSAL : 0};
    gllm_tensor *t[4] = {&p.q, &p.k, &p.v, &p.out};
    for (int i = 0; i < 4; i++)
        check_gllm(c, gllm_tensor_init(mem[i], 0, GLLM_DTYPE_F16, 4, shape, t[i]), "tensor");
    double e2e[CALLS], kernel[CALLS], accept[CALLS], queue[CALLS], worker[CALLS];
    for (int i = 0; i < WARMUP + CALLS; i++) {
        gllm_job_result res = GLLM_JOB_RESULT_INIT;
        const double t0 = now_s();
        check_gllm(c, gllm_attention(c, &p, &res), "prefill");
        const double t1 = now_s();
        if (i >= WARMUP) {
            e2e[i - WARMUP] = (t1 - t0) * 1e3;
            kernel[i - WARMUP] = (double)res.kernel_ns / 1e6;
            accept[i - WARMUP] = (double)res.accept_ns / 1e3;
            queue[i - WARMUP] = (double)res.queue_ns / 1e3;
            worker[i - WARMUP] = (double)(res.job_ns - res.kernel_ns) / 1e3;
        }
    }
    /* Spot-check rows of the output against float64 (the whole of it would take minutes). */
    check_cu(cu.cuMemcpyDtoH(host[3], own[3].ptr, n * 2), "cuMemcpyDtoH");
    const struct host_kv hkv = {host[1], host[2], s.H, s.S, s.D};
    const struct ref64_kv kv = {host_kv_get, &hkv};
    double want[CHECKED_ROWS * 128], got[CHECKED_ROWS * 128], q[128];
    uint64_t pick = 99;
    for (int r = 0; r < CHECKED_ROWS; r++) {
        const int64_t b = (int64_t)(rng_next(&pick) % (uint64_t)s.B);
        const int64_t h = (int64_t)(rng_next(&pick) % (uint64_t)s.H);
        const int64_t i = r == 0 ? 0 : r == 1 ? s.S - 1 : (int64_t)(rng_next(&pick) % (uint64_t)s.S);
        const int64_t row = ((b * s.H + h) * s.S + i) * s.D;
        for (int64_t d = 0; d < s.D; d++) {
            q[d] = elem_get(host[0], GLLM_DTYPE_F16, row + d);
            got[r * s.D + d] = elem_get(host[3], GLLM_DTYPE_F16, row + d);
        }
        ref64_row(q, s.D, &kv, b, h, causal ? i + 1 : s.S, 1.0 / sqrt((double)s.D),
                  &want[r * s.D], NULL);
    }
    const double err = ref64_rel_error(got, want, (size_t)(CHECKED_ROWS * s.D));
    const double tol = ref64_tolerance(GLLM_DTYPE_F16).out;
    const double me2e = median(e2e, CALLS), mkernel = median(kernel, CALLS);
    printf("prefill    B4 H32 S2048 D128 f16%s, imported tensors, %d calls after %d warm-up\n",
           causal ? " causal" : "", CALLS, WARMUP);
    printf("           %-4s rel err %.2e over %d rows (tol %.1e)\n", err <= tol ? "ok" : "FAIL",
           err, CHECKED_ROWS, tol);
    printf("           median e2e %.3f ms  median kernel %.3f ms  added %.1f us  ratio %.3f "
           "(target <= 1.05)\n", me2e, mkernel, (me2e - mkernel) * 1e3, me2e / mkernel);
    printf("           of the added, medians: accept %.1f us, queue %.1f us, worker beside the "
           "kernel %.1f us\n", median(accept, CALLS), median(queue, CALLS), median(worker, CALLS));
    failures += !(err <= tol);
    for (int i = 0; i < 4; i++) {
        check_gllm(c, gllm_memory_release(mem[i]), "gllm_memory_release");
        own_free(&own[i]);
        free(host[i]);
    }
}

/* Latency as the client's stream sees it: from the end of its producer (a memset on its
 * stream) to the start of its consumer, minus gllmd's kernel, for one query row over a
 * long sequence (decode B1 L8192 and B64 L4096 as dense attention with Sq = 1, all tensors
 * in the client's own memory imported by gllmd). Ordered: gllm_attention_enqueue, no host
 * synchronisation between producer and consumer. Synchronous: the stream synchronised on
 * the host, gllm_attention, then the consumer queued. */
static void ordered_latency(gllm_client *c, int64_t B, int64_t L)
{
    enum { WARMUP = 20, STEPS = 300 };
    const int64_t Hq = 32, Hkv = 8, D = 128;
    const size_t qb = (size_t)(B * Hq * D) * 2, kb = (size_t)(B * Hkv * L * D) * 2;
    const size_t bytes = round_up(2 * qb + 2 * kb + 4096, own_granularity());
    struct own_alloc own = own_create(bytes);
    gllm_memory *mem;
    check_gllm(c, gllm_memory_import(c, own.fd, bytes, 0, &mem), "gllm_memory_import");
    void *host = calloc(1, 2 * qb + 2 * kb);
    uint64_t seed = 5;
    fill_random(host, GLLM_DTYPE_F16, (qb + 2 * kb) / 2, &seed);
    check_cu(cu.cuMemcpyHtoD(own.ptr, host, 2 * qb + 2 * kb), "cuMemcpyHtoD");
    free(host);
    const CUdeviceptr scratch = own.ptr + 2 * qb + 2 * kb;   /* the producer's and consumer's */
    gllm_attention_params p = {.size = sizeof p};
    const int64_t qs[4] = {B, Hq, 1, D}, ks[4] = {B, Hkv, L, D};
    check_gllm(c, gllm_tensor_init(mem, 0, GLLM_DTYPE_F16, 4, qs, &p.q), "q");
    check_gllm(c, gllm_tensor_init(mem, qb, GLLM_DTYPE_F16, 4, ks, &p.k), "k");
    check_gllm(c, gllm_tensor_init(mem, qb + kb, GLLM_DTYPE_F16, 4, ks, &p.v), "v");
    check_gllm(c, gllm_tensor_init(mem, qb + 2 * kb, GLLM_DTYPE_F16, 4, qs, &p.out), "out");
    void *stream, *ev_a, *ev_b;
    check_cu(cu.cuStreamCreate(&stream, 1), "cuStreamCreate");
    check_cu(cu.cuEventCreate(&ev_a, 0), "cuEventCreate");
    check_cu(cu.cuEventCreate(&ev_b, 0), "cuEventCreate");
    double ordered[STEPS], sync[STEPS], span[2][STEPS], kern[2][STEPS], host_us[STEPS];
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < WARMUP + STEPS; i++) {
            check_cu(cu.cuMemsetD32Async(scratch, (unsigned)i, 256, stream), "producer");
            check_cu(cu.cuEventRecord(ev_a, stream), "cuEventRecord");
            gllm_job_result res = GLLM_JOB_RESULT_INIT;
            if (mode == 0) {
                uint64_t job;
                check_gllm(c, gllm_attention_enqueue(c, &p, stream, &job), "enqueue");
                check_cu(cu.cuEventRecord(ev_b, stream), "cuEventRecord");
                check_cu(cu.cuMemsetD32Async(scratch + 1024, (unsigned)i, 256, stream), "consumer");
                check_gllm(c, gllm_job_wait(c, job, &res), "the enqueued job's reply");
            } else {
                check_cu(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
                const double t0 = now_s();
                check_gllm(c, gllm_attention(c, &p, &res), "attention");
                if (i >= WARMUP)   /* the host's view: the reply, not the GPU's next op */
                    host_us[i - WARMUP] = (now_s() - t0) * 1e6 - (double)res.kernel_ns / 1e3;
                check_cu(cu.cuEventRecord(ev_b, stream), "cuEventRecord");
                check_cu(cu.cuMemsetD32Async(scratch + 1024, (unsigned)i, 256, stream), "consumer");
            }
            check_cu(cu.cuEventSynchronize(ev_b), "cuEventSynchronize");
            float ms = 0;
            check_cu(cu.cuEventElapsedTime(&ms, ev_a, ev_b), "cuEventElapsedTime");
            if (i >= WARMUP) {
                (mode == 0 ? ordered : sync)[i - WARMUP] = (double)ms * 1e3 - (double)res.kernel_ns / 1e3;
                span[mode][i - WARMUP] = (double)ms * 1e3;
                kern[mode][i - WARMUP] = (double)res.kernel_ns / 1e3;
            }
        }
    }
    printf("stream     dense B%lld Hq32 Hkv8 Sq1 Skv%lld D128 f16, added us as the stream sees it, %d steps\n"
           "           ordered on the GPU p50 %.1f p99 %.1f (target p50 <= 12, p99 <= 40)   "
           "host-synchronised p50 %.1f p99 %.1f\n",
           (long long)B, (long long)L, STEPS, pct(ordered, STEPS, 0.5), pct(ordered, STEPS, 0.99),
           pct(sync, STEPS, 0.5), pct(sync, STEPS, 0.99));
    printf("           producer end to consumer start p50 %.1f / %.1f us, gllmd kernel p50 %.1f / %.1f us "
           "(ordered / synchronised)\n", pct(span[0], STEPS, 0.5), pct(span[1], STEPS, 0.5),
           pct(kern[0], STEPS, 0.5), pct(kern[1], STEPS, 0.5));
    printf("           host-synchronised, as the host sees it (call to reply, minus the kernel): "
           "p50 %.1f us\n", pct(host_us, STEPS, 0.5));
    check_cu(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
    check_gllm(c, gllm_memory_release(mem), "gllm_memory_release");
    own_free(&own);
}

int main(void)
{
    struct gpu_test t;
    const int r = gpu_test_start(&t);
    if (r)
        return r;
    gllm_client *c = t.c;
    exported_case(c, t.ctx);
    imported_case(c);
    prefill_timing(c, false);
    prefill_timing(c, true);
    ordered_latency(c, 1, 512);
    ordered_latency(c, 1, 8192);
    ordered_latency(c, 64, 4096);
    return gpu_test_finish(&t);
}
