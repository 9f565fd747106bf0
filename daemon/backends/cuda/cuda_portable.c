/* The "cuda-portable" backend: each NVIDIA GPU with its primary context, one stream and the
 * portable kernels' module; jobs go through the portable job logic (kernels/portable/
 * pk_host.c) exactly as on the HSA backend, so what passes here is the AMD kernels' logic. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "cuda_portable.h"
#include "fatbin.h"
#include "pk_host.h"

extern const unsigned char gllm_cuda_portable_fatbin[];
extern const unsigned char gllm_cuda_portable_fatbin_end[];

const void *cuda_portable_image(void)
{
    return gllm_cuda_portable_fatbin;
}

size_t cuda_portable_image_size(void)
{
    return (size_t)(gllm_cuda_portable_fatbin_end - gllm_cuda_portable_fatbin);
}

static const struct cuda_driver *test_driver;

void cuda_portable_set_driver(const struct cuda_driver *d)
{
    test_driver = d;
}

static const struct cuda_driver *load_driver(char *why, size_t len)
{
    return test_driver ? test_driver : cuda_driver_load(why, len);
}

struct cp_dev {
    const struct cuda_driver *d;
    struct backend_log *log;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream stream;
    CUfunction f[PK_NKERNELS];
    CUdeviceptr scratch;
    size_t scratch_bytes;
    gllm_device_info info;
};

struct cp_ctx {
    const struct cuda_driver *d;
    struct backend_log log;
    int ndev;
    struct cp_dev dev[GLLM_MAX_DEVICES];
};

extern const struct backend_iface cuda_portable_backend_iface;
static const struct backend_device_iface cp_device_iface;

static int fail(struct cp_dev *x, CUresult r, const char *what)
{
    char buf[160];
    backend_logf(x->log, BACKEND_LOG_ERR, "cuda-portable: device %d: %s: %s", x->info.index, what,
                 cuda_error_text(x->d, r, buf, sizeof buf));
    return r == CUDA_ERROR_OUT_OF_MEMORY ? GLLM_EDEVMEM : GLLM_EBACKEND;
}

static int cp_probe(char *why, size_t len)
{
    const struct cuda_driver *d = load_driver(why, len);
    if (!d)
        return 0;
    int n = 0;
    if (d->cuInit(0) != CUDA_SUCCESS || d->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
        snprintf(why, len, "no CUDA device");
        return 0;
    }
    return 10;
}

static int open_device(const struct cuda_driver *d, int ordinal, struct cp_dev *x, char *why,
                       size_t len)
{
    char buf[160];
    CUresult r;
    int major = 0, minor = 0;
    size_t total = 0;
    if ((r = d->cuDeviceGet(&x->dev, ordinal)) || (r = d->cuDevicePrimaryCtxRetain(&x->ctx, x->dev))) {
        snprintf(why, len, "device %d: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    d->cuCtxSetCurrent(x->ctx);
    d->cuDeviceGetName(x->info.name, sizeof x->info.name, x->dev);
    d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, x->dev);
    d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, x->dev);
    d->cuDeviceTotalMem(&total, x->dev);
    x->info.cc_major = major, x->info.cc_minor = minor, x->info.memory_bytes = total;
    snprintf(x->info.kind, sizeof x->info.kind, "cuda");
    struct fatbin_image imgs[FATBIN_MAX_IMAGES];
    int n = fatbin_images(cuda_portable_image(), cuda_portable_image_size(), imgs, FATBIN_MAX_IMAGES);
    char chosen[24] = "";
    if (n <= 0 || !fatbin_choose(imgs, n, major, minor, chosen, sizeof chosen)) {
        snprintf(why, len, "device %d (sm_%d%d): no portable image for it", ordinal, major, minor);
        return GLLM_EBACKEND;
    }
    /* fatbin_choose calls sm_90 code sm_90a (the main image's); this image has plain sm_90. */
    char *a = strstr(chosen, "sm_90a");
    if (a)
        memmove(a + 5, a + 6, strlen(a + 6) + 1);
    snprintf(x->info.image, sizeof x->info.image, "portable %.22s", chosen);   /* fits the 32 */
    if ((r = d->cuModuleLoadData(&x->mod, cuda_portable_image()))) {
        x->mod = NULL;
        snprintf(why, len, "device %d: loading the portable image: %s", ordinal,
                 cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    for (int k = 0; k < PK_NKERNELS; k++)
        if ((r = d->cuModuleGetFunction(&x->f[k], x->mod, pk_kernel_names[k]))) {
            snprintf(why, len, "device %d: kernel %s missing from the portable image", ordinal,
                     pk_kernel_names[k]);
            return GLLM_EBACKEND;
        }
    if ((r = d->cuStreamCreate(&x->stream, CU_STREAM_NON_BLOCKING))) {
        x->stream = NULL;
        snprintf(why, len, "device %d: stream: %s", ordinal, cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    return 0;
}

static void close_device(struct cp_dev *x)
{
    const struct cuda_driver *d = x->d;
    if (!x->ctx)
        return;
    d->cuCtxSetCurrent(x->ctx);
    if (x->scratch)
        d->cuMemFree(x->scratch);
    if (x->stream)
        d->cuStreamDestroy(x->stream);
    if (x->mod)
        d->cuModuleUnload(x->mod);
    d->cuDevicePrimaryCtxRelease(x->dev);
    x->ctx = NULL;
}

static void cp_close(struct backend *be)
{
    if (!be)
        return;
    struct cp_ctx *c = be->ctx;
    if (c) {
        for (int i = 0; i < c->ndev; i++)
            close_device(&c->dev[i]);
        free(c);
    }
    free(be);
}

/* What the portable kernels compute (pk_declare), as the HSA backend declares it too. */
static void cp_declare(struct backend_caps *out)
{
    pk_declare(out);
}

static int cp_open(const struct backend_config *cfg, struct backend **out)
{
    char why[256];
    const struct cuda_driver *d = load_driver(why, sizeof why);
    int n = 0;
    if (!d || d->cuInit(0) || d->cuDeviceGetCount(&n) || n == 0)
        return -ENODEV;
    struct backend *be = calloc(1, sizeof *be);
    struct cp_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return -ENOMEM;
    }
    be->iface = &cuda_portable_backend_iface;
    be->device = &cp_device_iface;
    be->ctx = c;
    c->d = d;
    c->log = cfg->log;
    const int first = cfg->one_device ? cfg->device : 0;
    const int end = cfg->one_device ? first + 1 : n;
    for (int i = first < 0 ? n : first; i < end && i < n && c->ndev < GLLM_MAX_DEVICES; i++) {
        struct cp_dev *x = &c->dev[c->ndev];
        *x = (struct cp_dev){.d = d, .log = &c->log};
        x->info.index = c->ndev;
        if (open_device(d, i, x, why, sizeof why) < 0) {
            backend_logf(&cfg->log, BACKEND_LOG_WARNING, "cuda-portable: passing over %s", why);
            close_device(x);
            continue;
        }
        c->ndev++;
    }
    if (c->ndev == 0) {
        cp_close(be);
        return GLLM_EBACKEND;
    }
    be->ndevices = c->ndev;
    be->present = n;
    cp_declare(&be->caps);
    be->caps.share_kind = BACKEND_SHARE_NONE;
    *out = be;
    return 0;
}

static struct cp_dev *device(struct backend *be, int dev)
{
    struct cp_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return NULL;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    return &c->dev[dev];
}

/* ---- the portable job logic's device interface: everything on the device's stream ---- */

static int op_scratch(void *dev, size_t bytes, uint64_t *base)
{
    struct cp_dev *x = dev;
    if (x->scratch_bytes < bytes) {
        if (x->scratch) {
            x->d->cuStreamSynchronize(x->stream);
            x->d->cuMemFree(x->scratch);
        }
        x->scratch = 0, x->scratch_bytes = 0;
        size_t want = bytes + bytes / 4;
        CUresult r = x->d->cuMemAlloc(&x->scratch, want);
        if (r) {
            x->scratch = 0;
            return fail(x, r, "scratch allocation");
        }
        x->scratch_bytes = want;
    }
    *base = (uint64_t)x->scratch;
    return 0;
}

static int op_to_device(void *dev, uint64_t dst, const void *src, size_t bytes)
{
    struct cp_dev *x = dev;
    CUresult r = x->d->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, bytes, x->stream);
    return r ? fail(x, r, "copy to device") : 0;
}

static int op_to_host(void *dev, void *dst, uint64_t src, size_t bytes)
{
    struct cp_dev *x = dev;
    CUresult r = x->d->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, bytes, x->stream);
    return r ? fail(x, r, "copy from device") : 0;
}

static int op_launch(void *dev, enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx,
                     const void *params, size_t size)
{
    (void)size;
    struct cp_dev *x = dev;
    void *args[] = {(void *)params};
    CUresult r = x->d->cuLaunchKernel(x->f[k], gx, gy, 1, bx, 1, 1, 0, x->stream, args, NULL);
    return r ? fail(x, r, pk_kernel_names[k]) : 0;
}

static int op_finish(void *dev)
{
    struct cp_dev *x = dev;
    CUresult r = x->d->cuStreamSynchronize(x->stream);
    return r ? fail(x, r, "kernel or copy") : 0;
}

static const struct pk_device_ops cp_pk_ops = {
    .scratch = op_scratch,
    .to_device = op_to_device,
    .to_host = op_to_host,
    .launch = op_launch,
    .finish = op_finish,
};

/* ---- the device interface ---- */

static int cp_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct cp_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    *out = x->info;
    return 0;
}

static int cp_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct cp_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    CUdeviceptr p = 0;
    CUresult r = x->d->cuMemAlloc(&p, bytes ? bytes : 1);
    if (r)
        return fail(x, r, "device tensor allocation");
    *out = (void *)(uintptr_t)p;
    return 0;
}

static void cp_free(struct backend *be, int dev, void *p)
{
    struct cp_dev *x = device(be, dev);
    if (x && p)
        x->d->cuMemFree((CUdeviceptr)(uintptr_t)p);
}

static bool has_sync(const struct backend_sync *s)
{
    return s && (s->wait || s->signal);
}

static int cp_copy(struct backend *be, int dev, const struct copy_args *cp)
{
    struct cp_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(cp->exec.sync))
        return -ENOTSUP;
    int rc = cp->to_device ? op_to_device(x, (uint64_t)(uintptr_t)cp->dst, cp->src, cp->bytes)
                           : op_to_host(x, cp->dst, (uint64_t)(uintptr_t)cp->src, cp->bytes);
    if (rc == 0)
        rc = op_finish(x);
    if (rc == 0 && cp->exec.timing)
        cp->exec.timing->copy_bytes = cp->bytes;
    return rc;
}

static int cp_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct cp_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(a->exec.sync))
        return -ENOTSUP;
    const struct pk_device d = {&cp_pk_ops, x, 32};
    return pk_attention(&d, a);
}

static int cp_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    (void)be;
    return pk_paged_check(p, why, len);
}

static int cp_paged(struct backend *be, int dev, const struct paged_args *p)
{
    struct cp_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(p->exec.sync))
        return -ENOTSUP;
    const struct pk_device d = {&cp_pk_ops, x, 32};
    return pk_paged(&d, p);
}

static const char *cp_describe(void)
{
    static char line[96];
    struct fatbin_image imgs[FATBIN_MAX_IMAGES];
    int n = fatbin_images(cuda_portable_image(), cuda_portable_image_size(), imgs, FATBIN_MAX_IMAGES);
    size_t used = (size_t)snprintf(line, sizeof line, "cuda-portable kernels:");
    for (int i = 0; i < n && used < sizeof line; i++)
        used += (size_t)snprintf(line + used, sizeof line - used, " %s_%d", imgs[i].ptx ? "compute" : "sm",
                                 imgs[i].arch);
    return line;
}

static const struct backend_device_iface cp_device_iface = {
    .info = cp_info,
    .alloc = cp_alloc,
    .free = cp_free,
    .copy = cp_copy,
    .attention = cp_attention,
    .paged_check = cp_paged_check,
    .paged = cp_paged,
};

const struct backend_iface cuda_portable_backend_iface = {
    .api_version = BACKEND_API_VERSION,
    .name = "cuda-portable",
    .probe = cp_probe,
    .open = cp_open,
    .close = cp_close,
    .describe = cp_describe,
    .declare = cp_declare,
};
