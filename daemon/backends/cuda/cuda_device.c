/* The CUDA backend's per-device context: opening a GPU (context, module, kernels, stream,
 * events), closing it, its scratch buffers, its errors and timings. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cuda_device.h"
#include "fatbin.h"

static char describe_line[160];

const char *cuda_images_line(void)
{
    struct fatbin_image imgs[FATBIN_MAX_IMAGES];
    int n = fatbin_images(fatbin_data(), fatbin_size(), imgs, FATBIN_MAX_IMAGES);
    size_t used = (size_t)snprintf(describe_line, sizeof describe_line, "cuda kernels:");
    for (int i = 0; i < n && used < sizeof describe_line; i++)
        used += (size_t)snprintf(describe_line + used, sizeof describe_line - used, " %s_%d%s",
                                 imgs[i].ptx ? "compute" : "sm", imgs[i].arch,
                                 imgs[i].ptx ? " (PTX)" : imgs[i].arch == 90 ? "a" : "");
    if (n < 0)
        snprintf(describe_line, sizeof describe_line, "cuda kernels: embedded image unreadable");
    return describe_line;
}

/* The registry's rows as the loader reads them: the element type (-1: any), in table order. */
#define KDT_F32 GLLM_DTYPE_F32
#define KDT_F16 GLLM_DTYPE_F16
#define KDT_BF16 GLLM_DTYPE_BF16
#define KDT_ANY (-1)
static const struct kernel_row {
    enum gllm_cuda_mode mode;
    int dtype, D;
    unsigned flags;
    const char *name;
} rows[GLLM_CUDA_KERNEL_COUNT] = {
#define ROW(mode, dtype, D, flags, symbol) {GLLM_CUDA_MODE_##mode, KDT_##dtype, D, flags, #symbol},
    GLLM_CUDA_KERNELS(ROW)
#undef ROW
};

/* A mode's dynamic shared memory at head dim D, and the image its code needs. */
static int mode_smem(enum gllm_cuda_mode m, int D)
{
    switch (m) {
#define SMEM(mode, smem, image) case GLLM_CUDA_MODE_##mode: return smem(D);
    GLLM_CUDA_MODES(SMEM)
#undef SMEM
    default:
        return 0;
    }
}

static enum gllm_cuda_image mode_image(enum gllm_cuda_mode m)
{
    switch (m) {
#define IMAGE(mode, smem, image) case GLLM_CUDA_MODE_##mode: return GLLM_CUDA_IMAGE_##image;
    GLLM_CUDA_MODES(IMAGE)
#undef IMAGE
    default:
        return GLLM_CUDA_IMAGE_ALL;
    }
}

CUfunction cuda_kernel_find(const struct cuda_dev *x, enum gllm_cuda_mode mode, gllm_dtype dtype,
                            int64_t D, unsigned flags)
{
    if ((unsigned)mode >= GLLM_CUDA_MODE_COUNT)
        return NULL;
    for (int i = x->mode_at[mode]; i < x->mode_at[mode + 1]; i++) {
        const struct cuda_kernel *k = &x->kernels[i];
        if ((k->dtype < 0 || k->dtype == (int)dtype) && (k->D == 0 || k->D == D) &&
            k->flags == flags)
            return k->f;
    }
    return NULL;
}

/* Every kernel of the registry whose image this GPU loaded (sm90a: the sm_90a one; tma: and
 * the driver encodes tensor maps), with its dynamic shared memory allowed, into x->kernels
 * grouped by mode; nonzero with why filled in when the driver refuses one. A kernel needing
 * more shared memory than a block may have here (smem_max; the paged ones at D 256 want
 * 200 KiB, a 9.0 GPU's 227 but not an 8.6's 99) is left out, as one of an image the GPU
 * did not load: its jobs are refused by name, and the GPU serves the rest. */
static int load_kernels(const struct cuda_driver *d, struct cuda_dev *x, bool sm90a, bool tma,
                        int smem_max, char *why, size_t len)
{
    _Static_assert(GLLM_CUDA_KERNEL_COUNT < 256, "mode_at is 8-bit");
    int n = 0;
    for (int m = 0; m < GLLM_CUDA_MODE_COUNT; m++) {
        x->mode_at[m] = (uint8_t)n;
        const enum gllm_cuda_image need = mode_image((enum gllm_cuda_mode)m);
        const bool here = need == GLLM_CUDA_IMAGE_ALL || (sm90a && need == GLLM_CUDA_IMAGE_SM90A) ||
                          (tma && need == GLLM_CUDA_IMAGE_SM90A_TMA);
        for (int i = 0; i < GLLM_CUDA_KERNEL_COUNT; i++) {
            const struct kernel_row *r = &rows[i];
            if (r->mode != (enum gllm_cuda_mode)m)
                continue;
            struct cuda_kernel *k = &x->kernels[n++];
            *k = (struct cuda_kernel){.dtype = (int16_t)r->dtype, .D = (uint16_t)r->D,
                                      .flags = r->flags};
            const int smem = mode_smem(r->mode, r->D);
            if (!here || (smem_max > 0 && smem > smem_max))
                continue;
            char buf[128];
            CUresult e;
            if ((e = d->cuModuleGetFunction(&k->f, x->mod, r->name)) ||
                (smem && (e = d->cuFuncSetAttribute(
                              k->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)))) {
                k->f = NULL;
                snprintf(why, len, "GPU %d: kernel %s (%d bytes of shared memory): %s", x->ordinal,
                         r->name, smem, cuda_error_text(d, e, buf, sizeof buf));
                return -1;
            }
        }
    }
    x->mode_at[GLLM_CUDA_MODE_COUNT] = (uint8_t)n;
    return 0;
}

void cuda_read_timing(const struct cuda_driver *d, const struct cuda_slot *sl,
                      struct attn_timing *t)
{
    if (!t)
        return;
    float in_ms = 0, k_ms = 0, out_ms = 0;
    d->cuEventElapsedTime(&k_ms, sl->ev[EV_KERNEL], sl->ev[EV_KERNEL_END]);
    if (sl->copies) {
        d->cuEventElapsedTime(&in_ms, sl->ev[EV_COPY_IN], sl->ev[EV_KERNEL]);
        d->cuEventElapsedTime(&out_ms, sl->ev[EV_KERNEL_END], sl->ev[EV_COPY_OUT]);
    }
    t->kernel_ns = (uint64_t)((double)k_ms * 1e6);
    t->copy_ns = (uint64_t)((double)(in_ms + out_ms) * 1e6);
    t->copy_bytes = sl->moved;
}

static void release_grave(const struct cuda_driver *d, struct cuda_grave g)
{
    if (g.dev)
        d->cuMemFree(g.dev);
    if (g.host)
        d->cuMemFreeHost(g.host);
}

/* Frees g now, or keeps it for cuda_graveyard_drain while a queued wait is pending. */
static void bury(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_grave g)
{
    if (x && x->waits_armed && x->ngraves < CUDA_GRAVEYARD)
        x->graveyard[x->ngraves++] = g;
    else
        release_grave(d, g);
}

void cuda_free_device(const struct cuda_driver *d, struct cuda_dev *x, CUdeviceptr p)
{
    if (p)
        bury(d, x, (struct cuda_grave){.dev = p});
}

void cuda_free_host(const struct cuda_driver *d, struct cuda_dev *x, void *p)
{
    if (p)
        bury(d, x, (struct cuda_grave){.host = p});
}

void cuda_graveyard_drain(const struct cuda_driver *d, struct cuda_dev *x)
{
    while (x->ngraves > 0)
        release_grave(d, x->graveyard[--x->ngraves]);
}

int cuda_lane_open(const struct cuda_driver *d, struct cuda_lane *ln, char *why, size_t len)
{
    char buf[128];
    CUresult r = d->cuStreamCreate(&ln->stream, CU_STREAM_NON_BLOCKING);
    if (r) {
        ln->stream = NULL;
        snprintf(why, len, "stream: %s", cuda_error_text(d, r, buf, sizeof buf));
        return r == CUDA_ERROR_OUT_OF_MEMORY ? GLLM_EDEVMEM : GLLM_EBACKEND;
    }
    return 0;
}

void cuda_lane_close(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln)
{
    cuda_free_device(d, x, ln->scratch);
    cuda_free_device(d, x, ln->counters);
    cuda_free_device(d, x, ln->sums);
    cuda_free_device(d, x, ln->split);
    if (ln->stream)
        d->cuStreamDestroy(ln->stream);
    memset(ln, 0, sizeof *ln);
}

int cuda_slot_open(const struct cuda_driver *d, struct cuda_slot *sl, char *why, size_t len)
{
    char buf[128];
    CUresult r;
    void *flag = NULL;
    CUevent *evs[EV_COUNT + 2] = {&sl->waited, &sl->done};
    for (int i = 0; i < EV_COUNT; i++)
        evs[2 + i] = &sl->ev[i];
    for (int i = 0; i < EV_COUNT + 2; i++)
        if ((r = d->cuEventCreate(evs[i], i < 2 ? CU_EVENT_DISABLE_TIMING : CU_EVENT_DEFAULT))) {
            *evs[i] = NULL;
            snprintf(why, len, "event: %s", cuda_error_text(d, r, buf, sizeof buf));
            return GLLM_EBACKEND;
        }
    if ((r = d->cuMemAllocHost(&flag, 64))) {
        snprintf(why, len, "pinned memory for the paged kernel's flag: %s",
                 cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EDEVMEM;
    }
    sl->bad_page = flag;
    *sl->bad_page = 0;
    return 0;
}

void cuda_slot_close(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_slot *sl)
{
    cuda_free_host(d, x, sl->hstage);
    cuda_free_host(d, x, (void *)sl->bad_page);
    CUevent evs[EV_COUNT + 2] = {sl->waited, sl->done};
    for (int i = 0; i < EV_COUNT; i++)
        evs[2 + i] = sl->ev[i];
    for (int i = 0; i < EV_COUNT + 2; i++)
        if (evs[i])
            d->cuEventDestroy(evs[i]);
    memset(sl, 0, sizeof *sl);
}

/* Per worker thread: each device's operations run on its own worker. */
static _Thread_local char fault_why[160];

bool cuda_error_sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_UNKNOWN:       /* what the driver says after most Xids: assume the worst */
        return true;
    default:
        return false;
    }
}

const char *cuda_fault_why(void)
{
    return fault_why;
}

void cuda_fault_clear(void)
{
    fault_why[0] = '\0';
}

int cuda_fail(const struct cuda_ctx *c, CUresult r, const char *what)
{
    char buf[160];
    cuda_error_text(c->d, r, buf, sizeof buf);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        backend_logf(&c->log, BACKEND_LOG_WARNING, "cuda: %s: %s", what, buf);
        return GLLM_EDEVMEM;
    }
    backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: %s: %s", what, buf);
    if (!cuda_error_sticky(r))
        return GLLM_EBACKEND;
    snprintf(fault_why, sizeof fault_why, "%.120s (%.30s)", buf, what);
    return GLLM_EDEVLOST;
}

void cuda_device_close(const struct cuda_driver *d, struct cuda_dev *x)
{
    if (!x->ctx)
        return;
    d->cuCtxSetCurrent(x->ctx);
    cuda_launch_free(d, x);
    x->waits_armed = 0;
    cuda_lane_close(d, x, &x->lane);
    cuda_slot_close(d, x, &x->slot);
    cuda_graveyard_drain(d, x);
    if (x->release)
        d->cuStreamDestroy(x->release);
    if (x->mod)
        d->cuModuleUnload(x->mod);
    d->cuDevicePrimaryCtxRelease(x->dev);
    x->ctx = NULL;
}

int cuda_device_open(const struct cuda_driver *d, int ordinal, struct cuda_dev *x, char *why,
                     size_t len)
{
    x->ordinal = ordinal;
    char buf[160];
    CUresult r;
    gllm_device_info *info = &x->info;
    memset(info, 0, sizeof *info);
    info->index = ordinal;
    snprintf(info->kind, sizeof info->kind, "cuda");
    size_t mem = 0;
    if ((r = d->cuDeviceGet(&x->dev, ordinal)) ||
        (r = d->cuDeviceGetName(info->name, sizeof info->name, x->dev)) ||
        (r = d->cuDeviceTotalMem(&mem, x->dev)) ||
        (r = d->cuDeviceGetAttribute(&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, x->dev)) ||
        (r = d->cuDeviceGetAttribute(&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, x->dev))) {
        snprintf(why, len, "GPU %d: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    info->memory_bytes = mem;
    struct fatbin_image imgs[FATBIN_MAX_IMAGES];
    int nimg = fatbin_images(fatbin_data(), fatbin_size(), imgs, FATBIN_MAX_IMAGES);
    if (!fatbin_choose(imgs, nimg > 0 ? nimg : 0, info->cc_major, info->cc_minor, info->image,
                       sizeof info->image)) {
        snprintf(why, len, "GPU %d (%s, compute capability %d.%d): no kernel image for it in this "
                 "gllmd (%s)", ordinal, info->name, info->cc_major, info->cc_minor, cuda_images_line());
        return GLLM_EBACKEND;
    }
    /* Each GPU has its own worker thread, so its waits may spin: a decode job's answer comes
     * microseconds after its kernel ends, not after the thread has been woken. */
    d->cuDevicePrimaryCtxSetFlags(x->dev, CU_CTX_SCHED_SPIN);
    if ((r = d->cuDevicePrimaryCtxRetain(&x->ctx, x->dev))) {
        x->ctx = NULL;
        snprintf(why, len, "GPU %d: context: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    d->cuCtxSetCurrent(x->ctx);
    if ((r = d->cuModuleLoadData(&x->mod, fatbin_data()))) {
        x->mod = NULL;
        if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_INSUFFICIENT_DRIVER)
            snprintf(why, len, "GPU %d (%s): the driver is too old for the embedded PTX (%s); "
                     "update the NVIDIA driver", ordinal, info->name, cuda_error_text(d, r, buf, sizeof buf));
        else if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
            snprintf(why, len, "GPU %d (%s, %d.%d): no kernel image for this GPU", ordinal,
                     info->name, info->cc_major, info->cc_minor);
        else if (r == CUDA_ERROR_OUT_OF_MEMORY)
            snprintf(why, len, "GPU %d (%s): out of device memory loading the kernels", ordinal,
                     info->name);
        else
            snprintf(why, len, "GPU %d: loading kernels: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    /* The wgmma kernels run only from the sm_90a image, which the driver takes only on a
     * 9.0 GPU; anywhere else the tensor-core kernels serve. Those with a TMA producer need a
     * driver that encodes tensor maps (else the cp.async producer serves alone, and paged
     * prefill runs on the paged kernel). */
    const bool sm90a = strncmp(info->image, "sm_90a", 6) == 0;
    int smem_max = 0;      /* unknown: every kernel is tried, and a refusal says which */
    if (d->cuDeviceGetAttribute(&smem_max, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                x->dev) != CUDA_SUCCESS)
        smem_max = 0;
    if (load_kernels(d, x, sm90a, sm90a && d->cuTensorMapEncodeTiled != NULL, smem_max, why, len))
        return GLLM_EBACKEND;
    /* What the paged kernels need from the device: the SM count for planning, whether a
     * registered host pointer serves as it is. */
    if ((r = d->cuDeviceGetAttribute(&x->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, x->dev)))
        x->sm_count = 0;
    if (x->sm_count < 1)
        x->sm_count = 1;
    int host_ptr = 0;
    x->host_pointers = d->cuDeviceGetAttribute(&host_ptr, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                                               x->dev) == CUDA_SUCCESS && host_ptr;
    if ((r = d->cuStreamCreate(&x->release, CU_STREAM_NON_BLOCKING))) {
        x->release = NULL;
        snprintf(why, len, "GPU %d: stream: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    char what[128];
    if (cuda_lane_open(d, &x->lane, what, sizeof what) < 0 ||
        cuda_slot_open(d, &x->slot, what, sizeof what) < 0) {
        snprintf(why, len, "GPU %d: %s", ordinal, what);
        return GLLM_EBACKEND;
    }
    x->lane.graphs = true;
    return 0;
}

CUresult cuda_grow(const struct cuda_driver *d, struct cuda_dev *x, CUdeviceptr *p,
                   size_t *size, size_t need)
{
    if (need <= *size)
        return CUDA_SUCCESS;
    cuda_free_device(d, x, *p);
    *p = 0;
    *size = 0;
    size_t want = need + need / 4;     /* grow with headroom: fewer reallocations */
    CUresult r = d->cuMemAlloc(p, want);
    if (r != CUDA_SUCCESS) {
        *p = 0;
        return r;
    }
    *size = want;
    return CUDA_SUCCESS;
}

int cuda_ensure_zeroed(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                       CUdeviceptr *p, size_t *size, size_t bytes, const char *what)
{
    const struct cuda_driver *d = c->d;
    if (bytes <= *size)
        return 0;
    CUresult r = cuda_grow(d, x, p, size, bytes);
    if (r == CUDA_SUCCESS &&
        (r = d->cuMemsetD32Async(*p, 0, *size / 4, ln->stream)) != CUDA_SUCCESS) {
        cuda_free_device(d, x, *p);    /* never leave an uncleared buffer to a later job */
        *p = 0;
        *size = 0;
    }
    return r == CUDA_SUCCESS ? 0 : cuda_fail(c, r, what);
}

int cuda_ensure_scratch(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                        size_t need)
{
    CUresult r = cuda_grow(c->d, x, &ln->scratch, &ln->scratch_size, need);
    if (r != CUDA_SUCCESS) {
        char buf[160];
        backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: GPU %d: out of device memory for a "
                     "%zu-byte job (%s)", x->info.index, need,
                     cuda_error_text(c->d, r, buf, sizeof buf));
        return GLLM_EDEVMEM;
    }
    return 0;
}
