/* The cuda-portable backend against a fake driver whose GPU runs the portable kernels on the
 * host (pk_emu.h, 32-wide waves as on NVIDIA): devices opened and passed over, the kernels
 * found by name, launches (grid, block, parameters), scratch, copies and failures, and its
 * results against the CPU backend's for dense attention (host and device tensors) and paged
 * decode and prefill, plain and with a variant (its slopes and sinks on the device too). */
#define PK_WAVE 32
#include "pk_emu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" {
#include "backend_api.h"
#include "cuda_driver.h"
#include "cuda_portable.h"
extern const struct backend_iface cpu_backend_iface;
}

static int failures;
#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);             \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* ---- the fake driver ---- */

static struct {
    int live_allocs, live_modules, live_streams, retained, launches;
    bool fail_alloc, fail_launch;
    unsigned last_bx, last_smem;
} fk;

static CUresult f_init(unsigned) { return CUDA_SUCCESS; }
static CUresult f_count(int *n) { *n = 2; return CUDA_SUCCESS; }
static CUresult f_get(CUdevice *d, int i) { *d = i; return CUDA_SUCCESS; }
static CUresult f_retain(CUcontext *c, CUdevice d) { *c = (CUcontext)(uintptr_t)(0x100 + d); fk.retained++; return CUDA_SUCCESS; }
static CUresult f_release(CUdevice) { fk.retained--; return CUDA_SUCCESS; }
static CUresult f_set_current(CUcontext) { return CUDA_SUCCESS; }
static CUresult f_name(char *name, int len, CUdevice d) { snprintf(name, (size_t)len, "Fake GPU %d", d); return CUDA_SUCCESS; }
static CUresult f_total(size_t *b, CUdevice) { *b = (size_t)80 << 30; return CUDA_SUCCESS; }

static CUresult f_attr(int *v, int attr, CUdevice d)
{
    /* Device 0 is a 9.0 part; device 1 a 7.0 one, older than every portable image. */
    if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        *v = d == 0 ? 9 : 7;
    else if (attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        *v = 0;
    else
        *v = 0;
    return CUDA_SUCCESS;
}

static CUresult f_load(CUmodule *m, const void *image)
{
    if (image != cuda_portable_image())
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    *m = (CUmodule)(uintptr_t)0x200;
    fk.live_modules++;
    return CUDA_SUCCESS;
}

static CUresult f_unload(CUmodule) { fk.live_modules--; return CUDA_SUCCESS; }

static CUresult f_function(CUfunction *f, CUmodule, const char *name)
{
    for (int k = 0; k < PK_NKERNELS; k++)
        if (strcmp(name, pk_kernel_names[k]) == 0) {
            *f = (CUfunction)(uintptr_t)(0x1000 + k);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult f_stream_create(CUstream *s, unsigned) { *s = (CUstream)(uintptr_t)0x300; fk.live_streams++; return CUDA_SUCCESS; }
static CUresult f_stream_destroy(CUstream) { fk.live_streams--; return CUDA_SUCCESS; }
static CUresult f_sync(CUstream) { return CUDA_SUCCESS; }

static CUresult f_alloc(CUdeviceptr *p, size_t bytes)
{
    if (fk.fail_alloc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    memset(m, 0xcd, bytes);                     /* stale bytes, as fresh device memory has */
    *p = (CUdeviceptr)(uintptr_t)m;
    fk.live_allocs++;
    return CUDA_SUCCESS;
}

static CUresult f_free(CUdeviceptr p) { free((void *)(uintptr_t)p); fk.live_allocs--; return CUDA_SUCCESS; }
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream) { memcpy((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream) { memcpy(d, (const void *)(uintptr_t)s, n); return CUDA_SUCCESS; }

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned smem, CUstream, void **params, void **extra)
{
    if (fk.fail_launch)
        return CUDA_ERROR_NOT_READY;
    fk.launches++, fk.last_bx = bx, fk.last_smem = smem;
    if (gz != 1 || by != 1 || bz != 1 || extra)
        return CUDA_ERROR_NOT_INITIALIZED;
    const enum pk_kernel k = (enum pk_kernel)((uintptr_t)f - 0x1000);
    const size_t size = k <= PK_ATTN_BF16 ? sizeof(pk_attn_params) : sizeof(pk_paged_params);
    return pk_emu_run(k, gx, gy, bx, params[0], size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult f_error_name(CUresult, const char **s) { *s = "CUDA_ERROR_FAKE"; return CUDA_SUCCESS; }
static CUresult f_error_string(CUresult, const char **s) { *s = "fake"; return CUDA_SUCCESS; }

static struct cuda_driver fake_driver(void)
{
    struct cuda_driver d;
    memset(&d, 0, sizeof d);
    d.cuInit = f_init, d.cuDeviceGetCount = f_count, d.cuDeviceGet = f_get;
    d.cuDevicePrimaryCtxRetain = f_retain, d.cuDevicePrimaryCtxRelease = f_release;
    d.cuCtxSetCurrent = f_set_current, d.cuDeviceGetName = f_name, d.cuDeviceTotalMem = f_total;
    d.cuDeviceGetAttribute = f_attr, d.cuModuleLoadData = f_load, d.cuModuleUnload = f_unload;
    d.cuModuleGetFunction = f_function, d.cuStreamCreate = f_stream_create;
    d.cuStreamDestroy = f_stream_destroy, d.cuStreamSynchronize = f_sync, d.cuMemAlloc = f_alloc;
    d.cuMemFree = f_free, d.cuMemcpyHtoDAsync = f_htod, d.cuMemcpyDtoHAsync = f_dtoh;
    d.cuLaunchKernel = f_launch, d.cuGetErrorName = f_error_name, d.cuGetErrorString = f_error_string;
    return d;
}

static char logged[1024];

static void log_line(void *, int, const char *line)
{
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof logged - used, "%s\n", line);
}

/* ---- jobs on both backends ---- */

static float rnd(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static std::vector<uint16_t> f16_random(size_t n, unsigned seed)
{
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; i++)
        pk_f16_store(&v[i], rnd(&seed));
    return v;
}

static double max_diff_f16(const std::vector<uint16_t> &a, const std::vector<uint16_t> &b)
{
    double worst = 0;
    for (size_t i = 0; i < a.size(); i++) {
        double e = fabs((double)pk_f16_load(&a[i]) - pk_f16_load(&b[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Gemma's and GPT-OSS's fields and more at once: a window, a soft-cap, ALiBi and sinks
 * (slopes and sinks in device memory too when the tensors are). */
static const float var_slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
static const float var_sinks[4] = {1.5f, -0.5f, 0.25f, 2.0f};
static struct attn_variant some_variant(const float *slopes, const float *sinks)
{
    struct attn_variant v = {};
    v.window = true, v.window_left = 6, v.window_right = -1, v.soft_cap = 1.5f;
    v.alibi_slopes = slopes, v.sinks = sinks;
    return v;
}

static void dense(struct backend *gpu, struct backend *cpu, bool on_device, bool variant)
{
    enum { B = 2, H = 4, HKV = 2, SQ = 7, SKV = 20, D = 64 };
    std::vector<uint16_t> q = f16_random(B * H * SQ * D, 1), k = f16_random(B * HKV * SKV * D, 2),
                          v = f16_random(B * HKV * SKV * D, 3), out(q.size()), ref(q.size());
    std::vector<float> lse(B * H * SQ), ref_lse(lse.size());
    struct attn_args a = {};
    a.dtype = GLLM_DTYPE_F16, a.B = B, a.Hq = H, a.Hkv = HKV, a.Sq = SQ, a.Skv = SKV, a.D = D;
    a.causal = true, a.scale = 0.125f;
    const int64_t qs[4] = {H * SQ * D, SQ * D, D, 1}, ks[4] = {HKV * SKV * D, SKV * D, D, 1};
    memcpy(a.q_st, qs, sizeof qs), memcpy(a.o_st, qs, sizeof qs);
    memcpy(a.k_st, ks, sizeof ks), memcpy(a.v_st, ks, sizeof ks);
    a.lse_st[0] = H * SQ, a.lse_st[1] = SQ, a.lse_st[2] = 1;
    if (variant)
        a.variant = some_variant(var_slopes, var_sinks);
    struct attn_args c = a;
    c.q = q.data(), c.k = k.data(), c.v = v.data(), c.out = ref.data(), c.lse = ref_lse.data();
    CHECK(cpu->device->attention(cpu, 0, &c) == 0);
    if (!on_device) {
        a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data(), a.lse = lse.data();
        CHECK(gpu->device->attention(gpu, 0, &a) == 0);
    } else {
        /* Device tensors, filled and read through the backend's copies. */
        void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL, *dheads = NULL;
        const size_t qb = q.size() * 2, kb = k.size() * 2;
        CHECK(gpu->device->alloc(gpu, 0, qb, &dq) == 0 && gpu->device->alloc(gpu, 0, kb, &dk) == 0 &&
              gpu->device->alloc(gpu, 0, kb, &dv) == 0 && gpu->device->alloc(gpu, 0, qb, &dout) == 0 &&
              gpu->device->alloc(gpu, 0, lse.size() * 4, &dlse) == 0 &&
              gpu->device->alloc(gpu, 0, 2 * H * sizeof(float), &dheads) == 0);
        if (!dq || !dk || !dv || !dout || !dlse || !dheads)
            return;
        struct copy_args cp = {};
        cp.to_device = true;
        cp.dst = dq, cp.src = q.data(), cp.bytes = qb;
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        cp.dst = dk, cp.src = k.data(), cp.bytes = kb;
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        cp.dst = dv, cp.src = v.data();
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        /* The slopes and the sinks side by side in one device buffer. */
        float heads[2 * H];
        memcpy(heads, var_slopes, sizeof var_slopes), memcpy(heads + H, var_sinks, sizeof var_sinks);
        cp.dst = dheads, cp.src = heads, cp.bytes = sizeof heads;
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        a.q = dq, a.k = dk, a.v = dv, a.out = dout, a.lse = (float *)dlse, a.device_mask = 0x1f;
        if (variant) {
            a.variant = some_variant((const float *)dheads, (const float *)dheads + H);
            a.device_mask |= 0x60;                       /* bits 5, 6: slopes, sinks */
        }
        CHECK(gpu->device->attention(gpu, 0, &a) == 0);
        cp.to_device = false;
        cp.dst = out.data(), cp.src = dout, cp.bytes = qb;
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        cp.dst = lse.data(), cp.src = dlse, cp.bytes = lse.size() * 4;
        CHECK(gpu->device->copy(gpu, 0, &cp) == 0);
        for (void *p : {dq, dk, dv, dout, dlse, dheads})
            gpu->device->free(gpu, 0, p);
    }
    CHECK(fk.last_bx == 128 && fk.last_smem == 0);      /* four 32-wide warps, static LDS */
    const double e = max_diff_f16(out, ref);
    double el = 0;
    for (size_t i = 0; i < lse.size(); i++)
        el = fabs(lse[i] - ref_lse[i]) > el ? fabs(lse[i] - ref_lse[i]) : el;
    printf("%s dense f16 GQA causal%s, %s tensors: max |diff| vs the CPU backend %.2e, lse %.2e\n",
           e < 2e-3 && el < 1e-4 ? "ok  " : "FAIL", variant ? " window cap alibi sinks" : "",
           on_device ? "device" : "host", e, el);
    failures += !(e < 2e-3 && el < 1e-4);
}

static void paged(struct backend *gpu, struct backend *cpu, bool prefill, bool variant)
{
    enum { B = 3, HQ = 4, HKV = 2, D = 128, PS = 16, PAGES = 12 };
    const int32_t len[B] = {40, 1, 33}, indptr[B + 1] = {0, 3, 4, 7}, indices[7] = {11, 2, 5, 0, 7, 3, 9};
    const int32_t qdec[B + 1] = {0, 1, 2, 3}, qpre[B + 1] = {0, 5, 6, 16};
    const int32_t *qptr = prefill ? qpre : qdec;
    const int nq = qptr[B];
    std::vector<uint16_t> kc = f16_random(PAGES * PS * HKV * D, 4), vc = f16_random(kc.size(), 5),
                          q = f16_random((size_t)nq * HQ * D, 6), out(q.size()), ref(q.size());
    struct paged_args p = {};
    p.op = PAGED_ATTEND, p.dtype = GLLM_DTYPE_F16, p.B = B, p.Hq = HQ, p.Hkv = HKV, p.D = D;
    p.page_size = PS, p.num_pages = PAGES, p.k_cache = kc.data(), p.v_cache = vc.data();
    p.q = q.data(), p.nq = nq, p.kv_indptr = indptr, p.kv_indices = indices, p.kv_len = len;
    p.q_indptr = qptr, p.max_kv_len = 40, p.max_q_len = prefill ? 10 : 1, p.scale = 0.088f;
    p.causal = true;
    if (variant)
        p.variant = some_variant(var_slopes, var_sinks);
    struct paged_args c = p;
    c.out = ref.data();
    p.out = out.data();
    CHECK(cpu->device->paged(cpu, 0, &c) == 0);
    CHECK(gpu->device->paged(gpu, 0, &p) == 0);
    const double e = max_diff_f16(out, ref);
    printf("%s paged %s%s: max |diff| vs the CPU backend %.2e\n", e < 2e-3 ? "ok  " : "FAIL",
           prefill ? "chunked prefill" : "decode", variant ? " window cap alibi sinks" : "", e);
    failures += !(e < 2e-3);
}

int main(void)
{
    const struct cuda_driver d = fake_driver();
    cuda_portable_set_driver(&d);
    struct backend_config cfg = {};
    cfg.log.fn = log_line, cfg.log.level = BACKEND_LOG_DEBUG;
    char why[200] = "";
    CHECK(cuda_portable_backend_iface.probe(why, sizeof why) > 0);
    struct backend *gpu = NULL, *cpu = NULL;
    CHECK(cuda_portable_backend_iface.open(&cfg, &gpu) == 0 && gpu);
    struct backend_config ccfg = {};
    ccfg.threads = 2;
    CHECK(cpu_backend_iface.open(&ccfg, &cpu) == 0 && cpu);
    if (!gpu || !cpu)
        return 1;
    CHECK(gpu->ndevices == 1);
    CHECK(strstr(logged, "passing over device 1 (sm_70): no portable image for it") != NULL);
    gllm_device_info info;
    CHECK(gpu->device->info(gpu, 0, &info) == 0);
    CHECK(strcmp(info.image, "portable sm_90 SASS") == 0 && info.cc_major == 9);
    CHECK(strcmp(gpu->iface->name, "cuda-portable") == 0 && gpu->caps.max_head_dim == 256);

    const uint32_t every = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                           GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS;
    CHECK(gpu->caps.modes[GLLM_MODE_DENSE].variants == (every | GLLM_VARIANT_HEAD_DIM_V));
    CHECK(gpu->caps.modes[GLLM_MODE_DECODE].variants == every &&
          gpu->caps.modes[GLLM_MODE_PREFILL].variants == every);

    for (bool variant : {false, true}) {
        dense(gpu, cpu, false, variant);
        dense(gpu, cpu, true, variant);
        paged(gpu, cpu, false, variant);
        paged(gpu, cpu, true, variant);
    }

    /* Failures: no memory for a bigger scratch, a launch the driver refuses. */
    std::vector<uint16_t> big(1 << 20);
    struct attn_args a = {};
    a.dtype = GLLM_DTYPE_F16, a.B = 1, a.Hq = 1, a.Hkv = 1, a.Sq = 4096, a.Skv = 64, a.D = 128;
    a.q = big.data(), a.k = big.data(), a.v = big.data(), a.out = big.data() + (1 << 19);
    const int64_t qs[4] = {4096 * 128, 4096 * 128, 128, 1}, ks[4] = {64 * 128, 64 * 128, 128, 1};
    memcpy(a.q_st, qs, sizeof qs), memcpy(a.o_st, qs, sizeof qs);
    memcpy(a.k_st, ks, sizeof ks), memcpy(a.v_st, ks, sizeof ks);
    fk.fail_alloc = true;
    CHECK(gpu->device->attention(gpu, 0, &a) == GLLM_EDEVMEM);
    fk.fail_alloc = false;
    a.Sq = 4;
    fk.fail_launch = true;
    CHECK(gpu->device->attention(gpu, 0, &a) == GLLM_EBACKEND);
    CHECK(strstr(logged, "gllm_pk_attn_f16: CUDA_ERROR_FAKE") != NULL);
    fk.fail_launch = false;
    CHECK(gpu->device->attention(gpu, 0, &a) == 0);
    CHECK(gpu->device->attention(gpu, 1, &a) == -ENODEV);

    cuda_portable_backend_iface.close(gpu);
    cpu_backend_iface.close(cpu);
    CHECK(fk.live_allocs == 0 && fk.live_modules == 0 && fk.live_streams == 0 && fk.retained == 0);
    CHECK(fk.launches >= 5);
    cuda_portable_set_driver(NULL);
    printf("%s: %d launches, %d failures\n", failures ? "FAILED" : "passed", fk.launches, failures);
    return failures ? 1 : 0;
}
