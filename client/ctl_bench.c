/* gllmctl bench: standard prefill shapes through the daemon; kernel and end-to-end times; the benchmarks' JSON document. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "ctl_bench.h"
#include "gllm/elem.h"

int ctl_bench_slowdown(double *factor)
{
    *factor = 1;
    const char *raw = getenv("GLLM_BENCH_SLOWDOWN");
    if (!raw || !*raw)
        return 0;
    char *end;
    errno = 0;
    double f = strtod(raw, &end);
    if (errno || end == raw || *end || !(f >= 0 && f <= 10)) {
        ctl_error("bench: GLLM_BENCH_SLOWDOWN='%s': want a number from 0 to 10 "
                "(0.1 reports times 10%% longer than measured)", raw);
        return 2;
    }
    *factor = 1 + f;
    if (f > 0)
        fprintf(stderr, "gllmctl bench: GLLM_BENCH_SLOWDOWN=%s: a test hook; every time is "
                "reported as %.3gx what was measured\n", raw, *factor);
    return 0;
}

uint64_t ctl_bench_scaled(uint64_t ns, double factor)
{
    return factor == 1 ? ns : (uint64_t)llround((double)ns * factor);
}

/* The first line a command prints, without its newline; "" when it cannot run. */
static void first_line(const char *cmd, char *buf, size_t size)
{
    buf[0] = 0;
    FILE *f = popen(cmd, "re");
    if (!f)
        return;
    if (fgets(buf, (int)size, f))
        buf[strcspn(buf, "\r\n")] = 0;
    while (fgetc(f) != EOF) { }
    if (pclose(f) != 0)
        buf[0] = 0;
}

/* GLLM_COMMIT, else HEAD of the gllm checkout gllmctl runs in (one with include/gllm/gllm.h
 * at its top: another project's commit would mislabel the run), with "+dirty" when tracked
 * files differ from HEAD (a build of uncommitted changes is not HEAD's), else "unknown". */
static void bench_commit(char *buf, size_t size)
{
    const char *env = getenv("GLLM_COMMIT");
    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    char top[512], header[600];
    first_line("git rev-parse --show-toplevel 2>/dev/null", top, sizeof top);
    snprintf(header, sizeof header, "%s/include/gllm/gllm.h", top);
    buf[0] = 0;
    if (top[0] && access(header, R_OK) == 0)
        first_line("git rev-parse --short=12 HEAD 2>/dev/null", buf, size);
    if (!buf[0]) {
        snprintf(buf, size, "unknown");
        return;
    }
    char changed[256];
    first_line("git status --porcelain --untracked-files=no 2>/dev/null", changed, sizeof changed);
    if (changed[0] && strlen(buf) + sizeof "+dirty" <= size)
        strcat(buf, "+dirty");
}

/* The command line from /proc/self/cmdline, its arguments separated by spaces. */
static void bench_command(char *buf, size_t size)
{
    snprintf(buf, size, "gllmctl bench");
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0) {
        snprintf(buf, size, "gllmctl bench");
        return;
    }
    buf[n] = 0;
    while (n > 0 && buf[n - 1] == 0)
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == 0)
            buf[i] = ' ';
}

void ctl_bench_json_open(gllm_client *c, const char *tool, int iters, double factor)
{
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    char date[32] = "", commit[64], command[1024], smi[128] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    bench_commit(commit, sizeof commit);
    bench_command(command, sizeof command);
    /* Driver and SM clock describe a GPU: asked of nvidia-smi only when gllmd runs on CUDA. */
    if (strcmp(caps.backend, "cuda") == 0)
        first_line("nvidia-smi --query-gpu=driver_version,clocks.sm --format=csv,noheader "
                   "2>/dev/null", smi, sizeof smi);
    /* schema_version: the number every gllmctl --json document carries; schema names it. */
    printf("{\"schema\": \"gllm-bench-run/1\", \"schema_version\": 1,\n \"meta\": {\"date\": ");
    ctl_json_str(date);
    printf(", \"commit\": ");
    ctl_json_str(commit);
    printf(", \"gllmd_version\": ");
    ctl_json_str(caps.daemon_version);
    printf(", \"backend\": ");
    ctl_json_str(caps.backend);
    printf(", \"device\": ");
    ctl_json_str(caps.ndevices ? ctl_first_device_name(c, &dev) : "");
    char *comma = strchr(smi, ',');
    if (smi[0] && comma) {   /* "580.159.04, 1980 MHz" */
        *comma = 0;
        printf(", \"driver\": ");
        ctl_json_str(smi);
        char *end;
        long mhz = strtol(comma + 1, &end, 10);
        if (end != comma + 1 && mhz > 0)
            printf(", \"sm_clock_mhz\": %ld", mhz);
    }
    printf(",\n  \"command\": ");
    ctl_json_str(command);
    printf(", \"tool\": ");
    ctl_json_str(tool);
    printf(", \"iters\": %d", iters);
    if (factor != 1)
        printf(", \"test_slowdown\": %.6g", factor - 1);
    printf("},\n \"cases\": [");
}

/* How many figures the open case has printed: the first goes without a comma. */
static int case_figures;

void ctl_bench_json_case_open(bool first, const char *suite, const char *name, const char *params)
{
    case_figures = 0;
    printf("%s\n  {\"suite\": ", first ? "" : ",");
    ctl_json_str(suite);
    printf(", \"name\": ");
    ctl_json_str(name);
    printf(", \"params\": {%s},\n   \"figures\": {", params);
}

void ctl_bench_json_figure(const char *key, double value)
{
    if (isfinite(value))
        printf("%s\"%s\": [%.6g]", case_figures++ ? ", " : "", key, value);
}

void ctl_bench_json_case_close(const char *const *gate, int ngate)
{
    printf("},\n   \"gate\": [");
    for (int i = 0; i < ngate; i++)
        printf("%s\"%s\"", i ? ", " : "", gate[i]);
    printf("]}");
}

void ctl_bench_json_close(void)
{
    printf("\n ]}\n");
}

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

/* Back to back (GPU backends): jobs of CTL_BENCH_REPEAT runs each, their kernel_ns one run's
 * mean: the kernel as a peer replayed from a CUDA graph is timed, without the launch and the
 * idle GPU's start that a job of one run holds. */
#define CTL_BENCH_REPEAT 20
#define CTL_BENCH_B2B_JOBS 5

/* unit: 1 prints GFLOP/s, 1000 TFLOP/s (the header says which); b2b: time back to back too. */
static int run_shape(gllm_client *c, const struct shape *s, int iters, bool json, bool wide, bool first,
                     double unit, double slow, bool b2b)
{
    size_t es = gllm_dtype_size(s->dtype);
    size_t nq = (size_t)(s->B * s->Hq * s->S * s->D), nk = (size_t)(s->B * s->Hkv * s->S * s->D);
    size_t total = (2 * nq + 2 * nk) * es;
    gllm_memory *a;
    int r = gllm_arena_create(c, total, &a);
    if (r < 0) {
        ctl_error("bench: arena of %zu bytes: %s", total, gllm_strerror(r));
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
    uint64_t *added = calloc((size_t)iters, sizeof *added), back[CTL_BENCH_B2B_JOBS];
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
        e2e[i] = ctl_bench_scaled(ctl_mono_ns() - t0, slow);
        kern[i] = ctl_bench_scaled(res.kernel_ns, slow);
        /* What the daemon and the copies add to the kernel, as the client sees it. */
        added[i] = e2e[i] > kern[i] ? e2e[i] - kern[i] : 0;
        if (res.copy_ns)
            copy_gbps += (double)res.copy_bytes / (double)ctl_bench_scaled(res.copy_ns, slow) / iters;
    }
    for (int i = 0; b2b && i < CTL_BENCH_B2B_JOBS; i++) {
        p.repeat = CTL_BENCH_REPEAT;
        if ((r = gllm_attention(c, &p, &res)) < 0)
            goto fail;
        back[i] = ctl_bench_scaled(res.kernel_ns, slow);
    }
    double flops = 4.0 * (double)(s->B * s->Hq) * (double)s->S * (double)s->S * (double)s->D;
    if (s->causal)
        flops /= 2;
    uint64_t mk = median(kern, iters), me = median(e2e, iters), ma = median(added, iters);
    uint64_t mb = b2b ? median(back, CTL_BENCH_B2B_JOBS) : 0;
    double gk = flops / (double)mk, ge = flops / (double)me;   /* GFLOP/s */
    char name[96];
    snprintf(name, sizeof name, "B%lld Hq%lld Hkv%lld S%lld D%lld %s%s", (long long)s->B,
             (long long)s->Hq, (long long)s->Hkv, (long long)s->S, (long long)s->D,
             gllm_dtype_name(s->dtype), s->causal ? " causal" : "");
    if (json) {
        char params[192];
        snprintf(params, sizeof params, "\"batch\": %lld, \"q_heads\": %lld, \"kv_heads\": %lld, "
                 "\"seq_len\": %lld, \"head_dim\": %lld, \"dtype\": \"%s\", \"causal\": %s",
                 (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->S,
                 (long long)s->D, gllm_dtype_name(s->dtype), s->causal ? "true" : "false");
        ctl_bench_json_case_open(first, "ctl-prefill", name, params);
        ctl_bench_json_figure("kernel_tflops", gk / 1000);
        ctl_bench_json_figure("e2e_tflops", ge / 1000);
        ctl_bench_json_figure("kernel_ms", mk / 1e6);
        ctl_bench_json_figure("e2e_ms", me / 1e6);
        ctl_bench_json_figure("added_ms", ma / 1e6);
        if (b2b)
            ctl_bench_json_figure("kernel_back_to_back_tflops", flops / (double)mb / 1000);
        if (copy_gbps > 0)   /* the CPU backend works in the arenas: nothing is copied */
            ctl_bench_json_figure("copy_gbps", copy_gbps);
        static const char *const gate[] = {"kernel_tflops"};
        ctl_bench_json_case_close(gate, 1);
    }
    else {
        char copy[16] = "-";   /* the CPU backend works in the arenas: nothing is copied */
        if (copy_gbps > 0)
            snprintf(copy, sizeof copy, "%.1f", copy_gbps);
        if (wide && b2b)
            printf("%-38s %10.3f %10.3f %12.1f %12.1f %9s %12.1f\n", name, mk / 1e6, me / 1e6,
                   gk / unit, ge / unit, copy, flops / (double)mb / unit);
        else if (wide)
            printf("%-38s %10.3f %10.3f %12.1f %12.1f %9s\n", name, mk / 1e6, me / 1e6,
                   gk / unit, ge / unit, copy);
        else   /* 80 columns */
            printf("%-36.36s %9.3f %9.3f %11.1f %9s\n", name, mk / 1e6, me / 1e6, gk / unit, copy);
    }
    rc = 0;
    goto out;
fail:
    ctl_error("bench: %s: %s %s", "attention", gllm_strerror(r),
            gllm_client_last_error(c));
out:
    free(kern);
    free(e2e);
    free(added);
    gllm_memory_release(a);
    return rc;
}

int ctl_bench_connect(const char *socket_path, double *slow, gllm_client **c)
{
    int r = ctl_bench_slowdown(slow);
    return r ? r : ctl_connect(socket_path, c);
}

int ctl_cmd_bench(const char *socket_path, const struct ctl_bench_opts *o)
{
    double slow;
    gllm_client *c;
    int r = ctl_bench_connect(socket_path, &slow, &c);
    if (r)
        return r;
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_device_info dev;
    gllm_client_caps(c, &caps);
    bool cpu = strcmp(caps.backend, "cpu") == 0;
    const struct shape *shapes = cpu ? cpu_shapes : gpu_shapes;
    int n = (int)(cpu ? sizeof cpu_shapes / sizeof *cpu_shapes : sizeof gpu_shapes / sizeof *gpu_shapes);
    char b2b_note[128];
    snprintf(b2b_note, sizeof b2b_note, "; b2b: jobs that run the kernel %d times back to back, "
             "as a peer replayed from a CUDA graph is timed", CTL_BENCH_REPEAT);
    if (o->json)
        ctl_bench_json_open(c, "gllmctl bench", o->iters, slow);
    else if (o->wide)
        printf("backend %s, device %s, median of %d runs (e2e: client submit to reply, "
               "tensors in arenas%s)\n%-38s %10s %10s %12s %12s %9s%s\n",
               caps.backend, caps.ndevices ? ctl_first_device_name(c, &dev) : "?", o->iters,
               cpu ? "" : b2b_note,
               "shape", "kernel ms", "e2e ms", cpu ? "kern GFLOP/s" : "kern TFLOP/s",
               cpu ? "e2e GFLOP/s" : "e2e TFLOP/s", "copy GB/s", cpu ? "" : "  b2b TFLOP/s");
    else
        printf("backend %s, device %s, median of %d runs\n(e2e: submit to reply, tensors in "
               "arenas; --wide adds e2e throughput)\n%-36s %9s %9s %11s %9s\n",
               caps.backend, caps.ndevices ? ctl_first_device_name(c, &dev) : "?", o->iters,
               "shape", "kernel ms", "e2e ms", cpu ? "GFLOP/s" : "TFLOP/s", "copy GB/s");
    int rc = 0;
    const double started = ctl_now_s();
    for (int i = 0; i < n && rc == 0; i++) {
        char what[64];
        snprintf(what, sizeof what, "B%lld H%lld S%lld D%lld", (long long)shapes[i].B,
                 (long long)shapes[i].Hq, (long long)shapes[i].S, (long long)shapes[i].D);
        ctl_progress(i, n, what, started);
        rc = run_shape(c, &shapes[i], o->iters, o->json, o->wide, i == 0, cpu ? 1 : 1000, slow, !cpu);
    }
    ctl_progress(n, n, "", started);
    if (o->json)
        ctl_bench_json_close();
    gllm_disconnect(c);
    return rc;
}
