/* gllmctl bench --decode: paged decode with everything device-resident; what the daemon adds to the kernel. */
/* (kv_indptr and kv_last_page_len stay in an arena: the daemon plans the split from them.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "ctl_bench.h"

struct decode_shape {
    int64_t B, Hq, Hkv, L, D, page_size;
    bool sleep;                    /* the client sleeps in its wait instead of polling */
    bool pages_in_arena;           /* kv_indices in the arena beside the rest of the table */
};

/* The shapes on a GPU; on the CPU, small enough for two cores. */
static const struct decode_shape gpu_decode[] = {
    {64, 32, 8, 4096, 128, 16, false, false},
    {64, 32, 8, 4096, 128, 16, false, true},  /* what checking the pages on the host costs */
    {64, 32, 8, 256, 128, 16, false, false},  /* B64's plan with a short kernel */
    {1, 32, 8, 8192, 128, 16, false, false},
    {1, 32, 8, 512, 128, 16, false, false},  /* a short sequence: latency, not bandwidth */
    {1, 32, 8, 512, 128, 16, true, false},   /* what the client's wait spin is worth */
};
static const struct decode_shape cpu_decode[] = {
    {4, 8, 2, 1024, 128, 16, false, false},
    {4, 8, 2, 1024, 128, 16, false, true},
    {1, 8, 2, 256, 128, 16, false, false},
    {1, 8, 2, 256, 128, 16, true, false},
};

/* The q-th quantile (0..1) of v, which it sorts. */
static uint64_t quantile(uint64_t *v, int n, double q)
{
    ctl_sort_u64(v, n);
    int i = (int)(q * (n - 1) + 0.5);
    return v[i];
}

/* Fills the device tensor with bytes from a random arena, a chunk at a time. */
static int fill_device(gllm_client *c, gllm_memory *t, gllm_memory *rnd)
{
    size_t n = gllm_memory_size(t), chunk = gllm_memory_size(rnd);
    for (size_t at = 0; at < n; at += chunk) {
        int r = gllm_memory_copy(c, t, at, rnd, 0, n - at < chunk ? n - at : chunk);
        if (r < 0)
            return r;
    }
    return 0;
}

static int run_decode(gllm_client *c, const struct decode_shape *s, uint32_t spin_us, int iters,
                      gllm_memory *rnd, bool json, bool wide, bool cpu, bool first, double slow)
{
    const gllm_dtype dt = GLLM_DTYPE_F16;
    const int64_t pages_per_seq = (s->L + s->page_size - 1) / s->page_size, P = s->B * pages_per_seq;
    const size_t pool = (size_t)(P * s->page_size * s->Hkv * s->D) * 2;
    const size_t qbytes = (size_t)(s->B * s->Hq * s->D) * 2;
    gllm_memory *kc = NULL, *vc = NULL, *qo = NULL, *pages = NULL;
    gllm_memory *tab = NULL;
    uint64_t *kern = calloc((size_t)iters, sizeof *kern), *e2e = calloc((size_t)iters, sizeof *e2e);
    uint64_t *added = calloc((size_t)iters, sizeof *added);
    uint64_t *worker = calloc((size_t)iters, sizeof *worker), *wire = calloc((size_t)iters, sizeof *wire);
    uint64_t *accept = calloc((size_t)iters, sizeof *accept), *queue = calloc((size_t)iters, sizeof *queue);
    int r = worker && wire && accept && queue && kern && e2e && added ? 0 : -12;
    if (r == 0 && (r = gllm_dtensor_create(c, pool, 0, &kc)) == 0 &&
        (r = gllm_dtensor_create(c, pool, 0, &vc)) == 0 &&
        (r = gllm_dtensor_create(c, 2 * qbytes, 0, &qo)) == 0 &&
        (s->pages_in_arena || (r = gllm_dtensor_create(c, (size_t)P * 4, 0, &pages)) == 0) &&
        (r = gllm_arena_create(c, (size_t)(2 * s->B + 2 + P) * 4, &tab)) == 0 &&
        (r = fill_device(c, kc, rnd)) == 0 && (r = fill_device(c, vc, rnd)) == 0)
        r = fill_device(c, qo, rnd);
    if (r < 0)
        goto fail;
    /* Pages dealt out in a shuffled order, as a cache that has been running a while is. */
    int32_t *indptr = gllm_memory_data(tab), *last = indptr + s->B + 1, *idx = last + s->B;
    for (int64_t i = 0; i < P; i++)
        idx[i] = (int32_t)i;
    uint64_t seed = 7;
    for (int64_t i = P - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)((seed >> 33) % (uint64_t)(i + 1));
        int32_t t = idx[i];
        idx[i] = idx[j], idx[j] = t;
    }
    for (int64_t b = 0; b <= s->B; b++)
        indptr[b] = (int32_t)(b * pages_per_seq);
    for (int64_t b = 0; b < s->B; b++)
        last[b] = (int32_t)(s->L - (pages_per_seq - 1) * s->page_size);
    int64_t pshape[4] = {P, s->page_size, s->Hkv, s->D}, qshape[3] = {s->B, s->Hq, s->D};
    gllm_paged_attention_params p = {.size = sizeof p};
    gllm_tensor_init(kc, 0, dt, 4, pshape, &p.kv.k_cache);
    gllm_tensor_init(vc, 0, dt, 4, pshape, &p.kv.v_cache);
    gllm_tensor_init(qo, 0, dt, 3, qshape, &p.q);
    gllm_tensor_init(qo, qbytes, dt, 3, qshape, &p.out);
    int64_t n1 = s->B + 1, nb = s->B;
    gllm_tensor_init(tab, 0, GLLM_DTYPE_I32, 1, &n1, &p.kv.indptr);
    gllm_tensor_init(tab, (uint64_t)(s->B + 1) * 4, GLLM_DTYPE_I32, 1, &nb, &p.kv.last_page_len);
    const uint64_t idx_at = (uint64_t)(2 * s->B + 1) * 4;
    if (s->pages_in_arena)
        gllm_tensor_init(tab, idx_at, GLLM_DTYPE_I32, 1, &P, &p.kv.indices);
    else if ((r = gllm_memory_copy(c, pages, 0, tab, idx_at, (size_t)P * 4)) == 0)
        gllm_tensor_init(pages, 0, GLLM_DTYPE_I32, 1, &P, &p.kv.indices);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    gllm_client_set_wait_spin(c, s->sleep ? 0 : spin_us);
    for (int i = 0; i < 3 && r == 0; i++)            /* warm-up */
        r = gllm_attention_decode(c, &p, &res);
    for (int i = 0; i < iters && r == 0; i++) {
        uint64_t t0 = ctl_mono_ns();
        r = gllm_attention_decode(c, &p, &res);
        /* The slowdown hook scales what was measured, each part alike, so the parts still
         * add up to e2e. */
        e2e[i] = ctl_bench_scaled(ctl_mono_ns() - t0, slow);
        kern[i] = ctl_bench_scaled(res.kernel_ns, slow);
        res.job_ns = ctl_bench_scaled(res.job_ns, slow);
        res.accept_ns = ctl_bench_scaled(res.accept_ns, slow);
        res.queue_ns = ctl_bench_scaled(res.queue_ns, slow);
        added[i] = e2e[i] > kern[i] ? e2e[i] - kern[i] : 0;
        /* Where the added time goes: reading and checking the request (accept), waiting
         * for the worker (queue), the worker's own work around the kernel (plan, upload,
         * launch, wait), and the rest: the trip both ways (ring or socket), the client
         * included. */
        worker[i] = res.job_ns > kern[i] ? res.job_ns - kern[i] : 0;
        accept[i] = res.accept_ns;
        queue[i] = res.queue_ns;
        uint64_t in_daemon = res.accept_ns + res.queue_ns + res.job_ns;
        wire[i] = e2e[i] > in_daemon ? e2e[i] - in_daemon : 0;
    }
    if (r < 0)
        goto fail;
    double kv_bytes = 2.0 * (double)(s->B * s->L * s->Hkv * s->D) * 2;
    uint64_t k50 = quantile(kern, iters, 0.5), e50 = quantile(e2e, iters, 0.5),
             e99 = quantile(e2e, iters, 0.99), a50 = quantile(added, iters, 0.5),
             a99 = quantile(added, iters, 0.99), w50 = quantile(worker, iters, 0.5),
             x50 = quantile(accept, iters, 0.5), q50 = quantile(queue, iters, 0.5),
             o50 = quantile(wire, iters, 0.5);
    char name[96];
    snprintf(name, sizeof name, "B%lld Hq%lld Hkv%lld L%lld D%lld f16 page %lld%s%s",
             (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->L,
             (long long)s->D, (long long)s->page_size, s->sleep ? " sleep" : "",
             s->pages_in_arena ? " arena-pages" : "");
    double gbps = kv_bytes / (double)k50;
    if (json) {
        char params[256];
        snprintf(params, sizeof params, "\"batch\": %lld, \"q_heads\": %lld, \"kv_heads\": %lld, "
                 "\"kv_len\": %lld, \"head_dim\": %lld, \"dtype\": \"f16\", \"page_size\": %lld%s",
                 (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->L,
                 (long long)s->D, (long long)s->page_size,
                 s->sleep ? ", \"variant\": \"sleep\"" : s->pages_in_arena ? ", \"variant\": \"arena-pages\"" : "");
        ctl_bench_json_case_open(first, "ctl-decode", name, params);
        ctl_bench_json_figure("kernel_us", k50 / 1e3);
        ctl_bench_json_figure("e2e_p50_us", e50 / 1e3);
        ctl_bench_json_figure("e2e_p99_us", e99 / 1e3);
        ctl_bench_json_figure("added_p50_us", a50 / 1e3);
        ctl_bench_json_figure("added_p99_us", a99 / 1e3);
        ctl_bench_json_figure("accept_p50_us", x50 / 1e3);
        ctl_bench_json_figure("queue_p50_us", q50 / 1e3);
        ctl_bench_json_figure("worker_p50_us", w50 / 1e3);
        ctl_bench_json_figure("wire_p50_us", o50 / 1e3);
        ctl_bench_json_figure("kv_gbps", gbps);
        /* Only the kernel is gated: host-side times differ by up to 25% between machines
         * of one kind (docs/performance.md), more than a stored baseline can absorb. */
        static const char *const gate[] = {"kernel_us"};
        ctl_bench_json_case_close(gate, 1);
    } else if (wide) {
        /* On the CPU the job is the kernel: no worker time beside it to show. */
        char worker_s[16] = "-";
        if (!cpu)
            snprintf(worker_s, sizeof worker_s, "%.1f", w50 / 1e3);
        printf("decode %-49s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7s %7.1f %8.1f\n", name,
               k50 / 1e3, e50 / 1e3, e99 / 1e3, a50 / 1e3, a99 / 1e3, x50 / 1e3, q50 / 1e3,
               worker_s, o50 / 1e3, gbps);
    } else {   /* 80 columns: the shape in short, the kernel, end to end, what gllmd adds */
        char brief[40];
        snprintf(brief, sizeof brief, "B%lld L%lld Hq%lld/%lld D%lld%s", (long long)s->B,
                 (long long)s->L, (long long)s->Hq, (long long)s->Hkv, (long long)s->D,
                 s->sleep ? " sleep" : s->pages_in_arena ? " arena" : "");
        printf("decode %-28s %7.1f %7.1f %7.1f %7.1f %8.1f\n", brief, k50 / 1e3, e50 / 1e3,
               a50 / 1e3, a99 / 1e3, gbps);
    }
    goto out;
fail:
    ctl_error("bench --decode: %s %s", gllm_strerror(r), gllm_client_last_error(c));
out:
    if (kc)
        gllm_memory_release(kc);
    if (vc)
        gllm_memory_release(vc);
    if (qo)
        gllm_memory_release(qo);
    if (pages)
        gllm_memory_release(pages);
    if (tab)
        gllm_memory_release(tab);
    free(kern);
    free(e2e);
    free(added);
    free(worker);
    free(wire);
    free(accept);
    free(queue);
    return r < 0 ? 1 : 0;
}

static int bench_decode(gllm_client *c, int iters, bool json, bool wide, double slow)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    bool cpu = strcmp(caps.backend, "cpu") == 0;
    const uint32_t spin_us = cpu ? 0 : GLLM_WAIT_SPIN_US_DEFAULT;   /* the client's default */
    const struct decode_shape *shapes = cpu ? cpu_decode : gpu_decode;
    int n = (int)(cpu ? sizeof cpu_decode / sizeof *cpu_decode : sizeof gpu_decode / sizeof *gpu_decode);
    gllm_memory *rnd;
    const size_t chunk = 32u << 20;
    int r = gllm_arena_create(c, chunk, &rnd);
    if (r < 0) {
        ctl_error("bench --decode: arena: %s", gllm_strerror(r));
        return 1;
    }
    uint16_t *h = gllm_memory_data(rnd);
    uint64_t seed = 42;
    for (size_t i = 0; i < chunk / 2; i++) {   /* f16 in [-1, 1): sign, small exponents */
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (uint16_t)(((seed >> 40) & 0x83ffu) | 0x3000u);
    }
    if (json) {
        ctl_bench_json_open(c, "gllmctl bench --decode", iters, slow);
    } else if (!wide) {
        printf("backend %s, device %s, %d runs, times in us\n"
               "(tensors device-resident; add = e2e - kernel; --wide for the breakdown)\n"
               "%-35s %7s %7s %7s %7s %8s\n", caps.backend,
               caps.ndevices ? ctl_first_device_name(c, &dev) : "?", iters, "decode shape (page 16)",
               "kern", "e2e50", "add50", "add99", "KV GB/s");
    } else {
        printf("backend %s, device %s, %d runs; tensors and kv_indices device-resident "
               "(arena-pages: kv_indices in the arena), kv_indptr and last_page_len in an arena; "
               "times in us\nadd = e2e - kernel = accept (read, check) + queue + worker "
               "(around the kernel) + wire (ring or socket, both ends, client); the last four "
               "are p50s\n"
               "%-56s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s\n", caps.backend,
               caps.ndevices ? ctl_first_device_name(c, &dev) : "?", iters, "decode shape", "kern",
               "e2e50", "e2e99", "add50", "add99", "accept", "queue", "worker", "wire", "KV GB/s");
    }
    int rc = 0;
    const double started = ctl_now_s();
    for (int i = 0; i < n && rc == 0; i++) {
        char what[64];
        snprintf(what, sizeof what, "decode B%lld L%lld", (long long)shapes[i].B,
                 (long long)shapes[i].L);
        ctl_progress(i, n, what, started);
        rc = run_decode(c, &shapes[i], spin_us, iters, rnd, json, wide, cpu, i == 0, slow);
    }
    ctl_progress(n, n, "", started);
    gllm_client_set_wait_spin(c, spin_us);
    if (json)
        ctl_bench_json_close();
    gllm_memory_release(rnd);
    return rc;
}

int ctl_cmd_bench_decode(const char *socket_path, const struct ctl_bench_opts *o)
{
    double slow;
    gllm_client *c;
    int r = ctl_bench_connect(socket_path, &slow, &c);
    if (r)
        return r;
    r = bench_decode(c, o->iters, o->json, o->wide, slow);
    gllm_disconnect(c);
    return r;
}
