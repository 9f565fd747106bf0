/* gllmctl bench: standard prefill shapes through the daemon; kernel and end-to-end times. */
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "gllm/elem.h"

struct shape {
    int64_t B, Hq, Hkv, S, D;
    gllm_dtype dtype;
    bool causal;
};

/* Sized so each shape takes well under a second on two cores. */
static const struct shape cpu_shapes[] = {
    {1, 8, 8, 512, 64, GLLM_DTYPE_F32, false},
    {1, 8, 8, 1024, 128, GLLM_DTYPE_F16, false},
    {1, 8, 8, 1024, 128, GLLM_DTYPE_F16, true},
    {2, 8, 2, 1024, 128, GLLM_DTYPE_BF16, true},
};

/* The shapes the GPU issue is measured on. */
static const struct shape gpu_shapes[] = {
    {4, 32, 32, 2048, 128, GLLM_DTYPE_F16, false},
    {4, 32, 32, 2048, 128, GLLM_DTYPE_F16, true},
    {2, 32, 32, 4096, 128, GLLM_DTYPE_BF16, true},
    {8, 16, 16, 1024, 64, GLLM_DTYPE_F16, false},
};

static uint64_t median(uint64_t *v, int n)
{
    ctl_sort_u64(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fill_random(void *p, gllm_dtype dt, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((double)(*state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        if (dt == GLLM_DTYPE_F32)
            ((float *)p)[i] = x;
        else
            ((uint16_t *)p)[i] = dt == GLLM_DTYPE_F16 ? gllm_f32_to_f16(x) : gllm_f32_to_bf16(x);
    }
}

/* unit: 1 prints GFLOP/s, 1000 TFLOP/s (the header says which). */
static int run_shape(gllm_client *c, const struct shape *s, int iters, bool json, bool first,
                     double unit)
{
    size_t es = gllm_dtype_size(s->dtype);
    size_t nq = (size_t)(s->B * s->Hq * s->S * s->D), nk = (size_t)(s->B * s->Hkv * s->S * s->D);
    size_t total = (2 * nq + 2 * nk) * es;
    gllm_memory *a;
    int r = gllm_arena_create(c, total, &a);
    if (r < 0) {
        fprintf(stderr, "gllmctl bench: arena of %zu bytes: %s\n", total, gllm_strerror(r));
        return 1;
    }
    char *base = gllm_memory_data(a);
    uint64_t seed = 42;
    fill_random(base, s->dtype, 2 * nq + 2 * nk, &seed);
    gllm_attention_params p = {.size = sizeof p, .flags = s->causal ? GLLM_ATTN_CAUSAL : 0};
    int64_t qs[4] = {s->B, s->Hq, s->S, s->D}, ks[4] = {s->B, s->Hkv, s->S, s->D};
    gllm_tensor_init(a, 0, s->dtype, 4, qs, &p.q);
    gllm_tensor_init(a, nq * es, s->dtype, 4, ks, &p.k);
    gllm_tensor_init(a, (nq + nk) * es, s->dtype, 4, ks, &p.v);
    gllm_tensor_init(a, (nq + 2 * nk) * es, s->dtype, 4, qs, &p.out);

    uint64_t *kern = calloc((size_t)iters, sizeof *kern), *e2e = calloc((size_t)iters, sizeof *e2e);
    uint64_t *added = calloc((size_t)iters, sizeof *added);
    double copy_gbps = 0;
    int rc = 1;
    if (!kern || !e2e || !added)
        goto out;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    if ((r = gllm_attention(c, &p, &res)) < 0)   /* warm-up: first touch of the pages */
        goto fail;
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = ctl_mono_ns();
        if ((r = gllm_attention(c, &p, &res)) < 0)
            goto fail;
        e2e[i] = ctl_mono_ns() - t0;
        kern[i] = res.kernel_ns;
        /* What the daemon and the copies add to the kernel, as the client sees it. */
        added[i] = e2e[i] > res.kernel_ns ? e2e[i] - res.kernel_ns : 0;
        if (res.copy_ns)
            copy_gbps += (double)res.copy_bytes / (double)res.copy_ns / iters;
    }
    double flops = 4.0 * (double)(s->B * s->Hq) * (double)s->S * (double)s->S * (double)s->D;
    if (s->causal)
        flops /= 2;
    uint64_t mk = median(kern, iters), me = median(e2e, iters), ma = median(added, iters);
    double gk = flops / (double)mk, ge = flops / (double)me;   /* GFLOP/s */
    char name[96];
    snprintf(name, sizeof name, "B%lld Hq%lld Hkv%lld S%lld D%lld %s%s", (long long)s->B,
             (long long)s->Hq, (long long)s->Hkv, (long long)s->S, (long long)s->D,
             gllm_dtype_name(s->dtype), s->causal ? " causal" : "");
    if (json)
        printf("%s{\"shape\": \"%s\", \"iters\": %d, \"kernel_ms\": %.4f, \"e2e_ms\": %.4f, "
               "\"added_ms\": %.4f, \"kernel_gflops\": %.2f, \"e2e_gflops\": %.2f, "
               "\"copy_gbps\": %.2f}",
               first ? "" : ",\n ", name, iters, mk / 1e6, me / 1e6, ma / 1e6, gk, ge, copy_gbps);
    else if (copy_gbps > 0)
        printf("%-38s %10.3f %10.3f %12.1f %12.1f %9.1f\n", name, mk / 1e6, me / 1e6, gk / unit,
               ge / unit, copy_gbps);
    else   /* the CPU backend works in the arenas: nothing is copied */
        printf("%-38s %10.3f %10.3f %12.1f %12.1f %9s\n", name, mk / 1e6, me / 1e6, gk / unit,
               ge / unit, "-");
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "gllmctl bench: %s: %s %s\n", "attention", gllm_strerror(r),
            gllm_client_last_error(c));
out:
    free(kern);
    free(e2e);
    free(added);
    gllm_memory_release(a);
    return rc;
}

int ctl_cmd_bench(const char *socket_path, const struct ctl_bench_opts *o)
{
    gllm_client *c;
    int r = ctl_connect(socket_path, &c);
    if (r)
        return r;
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    bool cpu = strcmp(caps.backend, "cpu") == 0;
    const struct shape *shapes = cpu ? cpu_shapes : gpu_shapes;
    int n = (int)(cpu ? sizeof cpu_shapes / sizeof *cpu_shapes : sizeof gpu_shapes / sizeof *gpu_shapes);
    if (o->json)
        ctl_json_open(c, "results");
    else
        printf("backend %s, device %s, median of %d runs (e2e: client submit to reply, "
               "tensors in arenas)\n%-38s %10s %10s %12s %12s %9s\n",
               caps.backend, caps.ndevices ? ctl_first_device_name(c, &dev) : "?", o->iters,
               "shape", "kernel ms", "e2e ms", cpu ? "kern GFLOP/s" : "kern TFLOP/s",
               cpu ? "e2e GFLOP/s" : "e2e TFLOP/s", "copy GB/s");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = run_shape(c, &shapes[i], o->iters, o->json, i == 0, cpu ? 1 : 1000);
    if (o->json)
        printf("]}\n");
    gllm_disconnect(c);
    return rc;
}
