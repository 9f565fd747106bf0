/* Times what a launch costs on this host: the launch call, and the event interval around a near-empty kernel and around B1 decode, with cuLaunchKernel and through gllmd's graphs, one launch alone and 20 back to back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention_params.h"
#include "cuda_driver.h"
#include "cuda_device.h"
#include "fatbin.h"

#define N 2000

static const struct cuda_driver *d;
static CUstream stream;
static struct cuda_dev graphs;      /* only its stream and its graph slots are used */

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        char buf[160];
        fprintf(stderr, "%s: %s\n", what, cuda_error_text(d, r, buf, sizeof buf));
        exit(1);
    }
}

struct launch {
    const char *name;
    CUfunction f;
    unsigned gx, gy, smem;
    void *params;
    bool graph;                     /* through cuda_launch, as gllmd launches */
};

/* One launch of l: through cuda_launch's graphs, as gllmd launches, or with cuLaunchKernel. */
static CUresult launch_once(const struct launch *l)
{
    void *args[] = {l->params};
    return l->graph ? cuda_launch(d, &graphs, &graphs.lane, l->f, l->gx, l->gy, 128, l->smem,
                                  l->params)
                    : d->cuLaunchKernel(l->f, l->gx, l->gy, 1, 128, 1, 1, l->smem, stream, args,
                                        NULL);
}

/* N launches, each alone on an idle stream: the call's host time, the events' interval, and the
 * host's round trip (from recording the start event to the stream's synchronize returning),
 * p10/p50/p90 of each. */
static void measure(const struct launch *l)
{
    static double call[N], ev[N], trip[N];
    CUevent a, b;
    must(d->cuEventCreate(&a, CU_EVENT_DEFAULT), "event");
    must(d->cuEventCreate(&b, CU_EVENT_DEFAULT), "event");
    for (int i = -50; i < N; i++) {
        const double t00 = now_us();
        must(d->cuEventRecord(a, stream), "record");
        const double t0 = now_us();
        must(launch_once(l), l->name);
        const double t1 = now_us();
        must(d->cuEventRecord(b, stream), "record");
        must(d->cuStreamSynchronize(stream), l->name);
        const double t2 = now_us();
        float ms;
        must(d->cuEventElapsedTime(&ms, a, b), "elapsed");
        if (i >= 0)
            call[i] = t1 - t0, ev[i] = ms * 1e3, trip[i] = t2 - t00;
    }
    qsort(call, N, sizeof *call, cmp);
    qsort(ev, N, sizeof *ev, cmp);
    qsort(trip, N, sizeof *trip, cmp);
    printf("%-34s launch call p10/p50/p90 %5.2f %5.2f %5.2f us   events %6.2f %6.2f %6.2f us"
           "   round trip %6.2f %6.2f %6.2f us\n",
           l->name, call[N / 10], call[N / 2], call[N * 9 / 10], ev[N / 10], ev[N / 2],
           ev[N * 9 / 10], trip[N / 10], trip[N / 2], trip[N * 9 / 10]);
    d->cuEventDestroy(a);
    d->cuEventDestroy(b);
}

/* Back to back, as a peer replayed from a CUDA graph is timed (tests/gpu/gpu_compare.py's
 * graph_ms): REPS launches between two events, the next launched while the one before runs, so
 * that the launch's share is one REPS-th; the interval over REPS, p10/p50/p90 over NBB. */
static void measure_back_to_back(const struct launch *l)
{
    enum { REPS = 20, NBB = 200 };
    static double per[NBB];
    CUevent a, b;
    must(d->cuEventCreate(&a, CU_EVENT_DEFAULT), "event");
    must(d->cuEventCreate(&b, CU_EVENT_DEFAULT), "event");
    for (int i = -5; i < NBB; i++) {
        must(d->cuEventRecord(a, stream), "record");
        for (int r = 0; r < REPS; r++)
            must(launch_once(l), l->name);
        must(d->cuEventRecord(b, stream), "record");
        must(d->cuStreamSynchronize(stream), l->name);
        float ms;
        must(d->cuEventElapsedTime(&ms, a, b), "elapsed");
        if (i >= 0)
            per[i] = ms * 1e3 / REPS;
    }
    qsort(per, NBB, sizeof *per, cmp);
    printf("%-34s back to back (%d a pair of events) p10/p50/p90 %6.2f %6.2f %6.2f us\n",
           l->name, REPS, per[NBB / 10], per[NBB / 2], per[NBB * 9 / 10]);
    d->cuEventDestroy(a);
    d->cuEventDestroy(b);
}

/* What a shape's first graph costs cuda_launch: building it (create, add the node,
 * instantiate) and, when it is replaced, destroying it; p10/p50/p90 over 200. */
static void measure_build(const struct launch *l)
{
    enum { NB = 200 };
    static double build[NB], destroy[NB];
    void *args[] = {l->params};
    const CUDA_KERNEL_NODE_PARAMS kp = {.func = l->f, .gridDimX = l->gx, .gridDimY = l->gy,
                                        .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                                        .blockDimZ = 1, .sharedMemBytes = l->smem,
                                        .kernelParams = args};
    for (int i = 0; i < NB; i++) {
        CUgraph g;
        CUgraphNode n;
        CUgraphExec e;
        const double t0 = now_us();
        must(d->cuGraphCreate(&g, 0), "graph");
        must(d->cuGraphAddKernelNode(&n, g, NULL, 0, &kp), "graph node");
        must(d->cuGraphInstantiate(&e, g, 0), "graph instantiate");
        const double t1 = now_us();
        d->cuGraphExecDestroy(e);
        d->cuGraphDestroy(g);
        build[i] = t1 - t0, destroy[i] = now_us() - t1;
    }
    qsort(build, NB, sizeof *build, cmp);
    qsort(destroy, NB, sizeof *destroy, cmp);
    printf("%-34s graph build p10/p50/p90 %6.1f %6.1f %6.1f us   destroy %5.1f %5.1f %5.1f us\n",
           l->name, build[NB / 10], build[NB / 2], build[NB * 9 / 10], destroy[NB / 10],
           destroy[NB / 2], destroy[NB * 9 / 10]);
}

static CUdeviceptr alloc(size_t bytes, unsigned fill)
{
    CUdeviceptr p;
    must(d->cuMemAlloc(&p, bytes), "alloc");
    must(d->cuMemsetD32Async(p, fill, bytes / 4, stream), "memset");
    return p;
}

/* bytes of f16 values spread over about [-2, 2] (a sum of uniforms), as random attention data. */
static CUdeviceptr alloc_random(size_t bytes, uint32_t seed)
{
    const CUdeviceptr p = alloc(bytes, 0);
    uint16_t *h = malloc(bytes);
    if (!h) {
        fprintf(stderr, "out of memory for %zu bytes of random data\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i < bytes / 2; i++) {
        int sum = 0;
        for (int k = 0; k < 4; k++)
            seed = seed * 1664525u + 1013904223u, sum += (int)(seed >> 24) - 128;
        const float x = sum / 128.f;                 /* in (-4, 4), mostly within 2 */
        /* to f16: sign, exponent and 10 mantissa bits of the float (no denormals needed) */
        uint32_t b;
        memcpy(&b, &x, 4);
        const int e = (int)((b >> 23) & 0xff) - 127 + 15;
        h[i] = x == 0.f || e <= 0 ? 0 : (uint16_t)(((b >> 16) & 0x8000) | (e << 10) | ((b >> 13) & 0x3ff));
    }
    must(d->cuMemcpyHtoDAsync(p, h, bytes, stream), "random data");
    must(d->cuStreamSynchronize(stream), "random data");
    free(h);
    return p;
}

int main(void)
{
    char why[160];
    if (!(d = cuda_driver_load(why, sizeof why))) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    must(d->cuInit(0), "init");
    must(d->cuDeviceGet(&dev, 0), "device");
    d->cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_SPIN);     /* as gllmd does */
    must(d->cuDevicePrimaryCtxRetain(&ctx, dev), "context");
    must(d->cuCtxSetCurrent(ctx), "context");
    must(d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
    must(d->cuModuleLoadData(&mod, fatbin_data()), "module");

    /* A near-empty kernel: kv_append of one row of zero bytes (it reads one slot). */
    CUfunction append, single;
    must(d->cuModuleGetFunction(&append, mod, "gllm_kv_append_rows"), "append");
    const CUdeviceptr slot = alloc(256, 0);
    gllm_cuda_append_params ap = {.slot = (const int64_t *)(uintptr_t)slot, .row_bytes = 0};
    struct launch empty = {"near-empty kernel (40 B params)", append, 1, 1, 0, &ap, false};

    /* B1 decode as gllmd launches it: Hq 32, Hkv 8, L 8192, D 128, f16, pages of 16 in
     * order, 32 ranges of 256 keys. */
    enum { HQ = 32, HKV = 8, L = 8192, D = 128, PS = 16, PAGES = L / PS, SPLIT = 32 };
    must(d->cuModuleGetFunction(&single, mod, "gllm_paged_attn_single_f16_d128"), "single");
    must(d->cuFuncSetAttribute(single, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               GLLM_CUDA_PAGED_SMEM(D)), "smem");
    const size_t pool = (size_t)L * HKV * D * 2;
    int32_t idx[PAGES];
    for (int i = 0; i < PAGES; i++)
        idx[i] = i;
    for (int i = PAGES - 1; i > 0; i--) {         /* shuffled, each page once */
        const int j = (int)(((uint32_t)i * 2654435761u) % (uint32_t)(i + 1)), x = idx[i];
        idx[i] = idx[j], idx[j] = x;
    }
    const CUdeviceptr kv_idx = alloc(sizeof idx, 0);
    must(d->cuMemcpyHtoDAsync(kv_idx, idx, sizeof idx, stream), "indices");
    int32_t *bad;
    must(d->cuMemAllocHost((void **)&bad, 64), "pinned");
    *bad = 0;
    gllm_cuda_paged_single_params sp = {
        .p = {.q = (const void *)(uintptr_t)alloc_random((size_t)HQ * D * 2, 1),
              .out = (void *)(uintptr_t)alloc((size_t)HQ * D * 2, 0),
              .k_cache = (const void *)(uintptr_t)alloc_random(pool, 2),
              .v_cache = (const void *)(uintptr_t)alloc_random(pool, 3),
              .kv_indices = (const int32_t *)(uintptr_t)kv_idx,
              .part_o = (float *)(uintptr_t)alloc((size_t)SPLIT * HKV * 16 * D * 4, 0),
              .part_lse = (float *)(uintptr_t)alloc((size_t)SPLIT * HKV * 16 * 4, 0),
              .counters = (int32_t *)(uintptr_t)alloc(256, 0),
              .Hq = HQ, .Hkv = HKV, .page_size = PS, .page_shift = 4, .group = HQ / HKV,
              .heads_per_cta = HQ / HKV, .head_chunks = 1, .scale = 1.f / sqrtf(D),
              .num_pages = PAGES, .bad_page = bad},
        .sums = (float *)(uintptr_t)alloc((size_t)HKV * 16 * GLLM_CUDA_PAGED_SUM_STRIDE(D) * 4, 0),
        .comb = {0, 1, 0, SPLIT}, .page0 = 0, .len = L, .chunk = L / SPLIT};
    struct launch b1 = {"B1 L8192 D128 f16 (single, 32x8)", single, SPLIT, HKV,
                        GLLM_CUDA_PAGED_SMEM(D), &sp, false};
    must(d->cuStreamSynchronize(stream), "setup");
    graphs.lane = (struct cuda_lane){.stream = stream, .graphs = true};
    struct launch empty_graph = empty, b1_graph = b1;
    empty_graph.graph = b1_graph.graph = true;
    empty_graph.name = "near-empty kernel, graph";
    b1_graph.name = "B1 L8192 D128 f16, graph";

    measure_build(&b1);
    for (int round = 0; round < 3; round++) {
        measure(&empty);
        measure(&empty_graph);
        measure(&b1);
        measure(&b1_graph);
        measure_back_to_back(&empty_graph);
        measure_back_to_back(&b1_graph);
    }
    if (*bad)
        printf("the kernel reported a bad page: the probe's table is wrong\n");
    return 0;
}
