/* Device memory shared with clients through the driver's virtual memory management: gllmd's
 * exports are cuMemCreate allocations with a POSIX fd handle, and a client's exports are
 * imported from theirs. An imported handle keeps its physical memory alive until gllmd
 * unmaps and releases it, so a client that frees or dies cannot make a job touch freed
 * memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_share.h"

static CUmemAllocationProp share_prop(const struct cuda_dev *x)
{
    return (CUmemAllocationProp){
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)x->dev},
    };
}

size_t cuda_share_granularity(const struct cuda_ctx *c)
{
    size_t most = 0;
    for (int i = 0; i < c->ndev; i++) {
        CUmemAllocationProp prop = share_prop(&c->dev[i]);
        size_t g = 0;
        if (c->d->cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
                CUDA_SUCCESS && g > most)
            most = g;
    }
    return most;
}

/* Reserves an address range for handle h on x, maps it and opens it to x: the steps an
 * exporter and an importer share. *p is 0 after a failure. */
static CUresult map_handle(const struct cuda_driver *d, const struct cuda_dev *x,
                           CUmemGenericAllocationHandle h, size_t bytes, CUdeviceptr *p)
{
    CUresult r = d->cuMemAddressReserve(p, bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        *p = 0;
        return r;
    }
    r = d->cuMemMap(*p, bytes, 0, h, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access = {
            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)x->dev},
            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        r = d->cuMemSetAccess(*p, bytes, &access, 1);
        if (r != CUDA_SUCCESS)
            d->cuMemUnmap(*p, bytes);
    }
    if (r != CUDA_SUCCESS) {
        d->cuMemAddressFree(*p, bytes);
        *p = 0;
    }
    return r;
}

int cuda_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                     int *fd)
{
    struct cuda_ctx *c = be->ctx;
    const struct cuda_driver *d = c->d;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    if (bytes == 0 || bytes % be->caps.share_granularity != 0)
        return -EINVAL;
    struct cuda_dev *x = &c->dev[dev];
    d->cuCtxSetCurrent(x->ctx);
    CUmemAllocationProp prop = share_prop(x);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d->cuMemCreate(&h, bytes, &prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return GLLM_EDEVMEM;
    if (r != CUDA_SUCCESS)
        return cuda_fail(c, r, "shared device memory (cuMemCreate)");
    CUdeviceptr p = 0;
    int exported = -1;
    r = map_handle(d, x, h, bytes, &p);
    if (r == CUDA_SUCCESS)
        r = d->cuMemExportToShareableHandle(&exported, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                            0);
    if (r != CUDA_SUCCESS) {
        if (p) {
            d->cuMemUnmap(p, bytes);
            d->cuMemAddressFree(p, bytes);
        }
        d->cuMemRelease(h);
        return r == CUDA_ERROR_OUT_OF_MEMORY ? GLLM_EDEVMEM
                                              : cuda_fail(c, r, "shared device memory (export)");
    }
    /* The driver's fd would otherwise leak into anything gllmd ever executes. */
    fcntl(exported, F_SETFD, FD_CLOEXEC);
    *out = (struct backend_shared){.ptr = (void *)(uintptr_t)p, .bytes = bytes, .handle = h};
    *fd = exported;
    return 0;
}

int cuda_share_import(struct backend *be, int dev, int fd, size_t bytes,
                      struct backend_shared *out, char *why, size_t len)
{
    struct cuda_ctx *c = be->ctx;
    const struct cuda_driver *d = c->d;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    struct cuda_dev *x = &c->dev[dev];
    if (bytes == 0 || bytes % be->caps.share_granularity != 0) {
        snprintf(why, len, "%zu bytes is not a positive multiple of the allocation granularity, %zu",
                 bytes, be->caps.share_granularity);
        return GLLM_EPARAM;
    }
    /* A memfd, a dmabuf or a plain file is refused by the driver below too; saying which it
     * is makes the error useful. */
    if (fcntl(fd, F_GET_SEALS) >= 0) {
        snprintf(why, len, "the fd is a memfd, not a CUDA allocation's export (use an arena "
                           "for host memory)");
        return GLLM_ENOTEXPORT;
    }
    d->cuCtxSetCurrent(x->ctx);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d->cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
        char buf[96];
        snprintf(why, len, "the fd is not an exported CUDA allocation (%s)",
                 cuda_error_text(d, r, buf, sizeof buf));
        return GLLM_ENOTEXPORT;
    }
    CUmemAllocationProp prop = {0};
    int code = 0;
    if ((r = d->cuMemGetAllocationPropertiesFromHandle(&prop, h)) != CUDA_SUCCESS) {
        snprintf(why, len, "the allocation's properties cannot be read");
        code = GLLM_ENOTEXPORT;
    } else if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
        snprintf(why, len, "the allocation is not device memory");
        code = GLLM_ENOTEXPORT;
    } else if (prop.location.id != (int)x->dev) {
        snprintf(why, len, "the allocation lives on GPU ordinal %d, not on device %d (ordinal %d)",
                 prop.location.id, dev, (int)x->dev);
        code = GLLM_ENOTEXPORT;
    }
    CUdeviceptr p = 0;
    if (code == 0 && (r = map_handle(d, x, h, bytes, &p)) != CUDA_SUCCESS) {
        /* cuMemMap refuses a range past the allocation's end. */
        snprintf(why, len, "the allocation cannot be mapped for %zu bytes: smaller than stated?",
                 bytes);
        code = r == CUDA_ERROR_OUT_OF_MEMORY ? GLLM_EDEVMEM : GLLM_EARENASIZE;
    }
    if (code) {
        d->cuMemRelease(h);
        return code;
    }
    *out = (struct backend_shared){.ptr = (void *)(uintptr_t)p, .bytes = bytes, .handle = h};
    return 0;
}

void cuda_share_free(struct backend *be, int dev, const struct backend_shared *s)
{
    struct cuda_ctx *c = be->ctx;
    const struct cuda_driver *d = c->d;
    if (dev < 0 || dev >= c->ndev || !s->ptr)
        return;
    d->cuCtxSetCurrent(c->dev[dev].ctx);
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)s->ptr;
    /* Jobs using it have finished (the daemon frees it after their references go), but the
     * stream may still hold their copies: unmapping waits for nothing, so finish them. */
    d->cuStreamSynchronize(c->dev[dev].lane.stream);
    d->cuMemUnmap(p, s->bytes);
    d->cuMemAddressFree(p, s->bytes);
    d->cuMemRelease((CUmemGenericAllocationHandle)s->handle);
}
