/* libgllm-client CUDA mappings: a shared-memory export imported into the caller's current context. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "client_internal.h"
#include "cuda_vmm.h"

/* The driver entry points a mapping needs, by their exported names (none of these has a
 * versioned _v2 symbol). Each mapping holds its own reference to the library: the driver
 * stays loaded exactly while something is mapped, and the library keeps no global state. */
#define CUDA_MAP_FUNCS(X)                                                                    \
    X(cuCtxGetCurrent, (CUcontext * ctx))                                                   \
    X(cuCtxGetDevice, (CUdevice * dev))                                                     \
    X(cuMemImportFromShareableHandle,                                                       \
      (CUmemGenericAllocationHandle * h, void *os_handle, int handle_type))                 \
    X(cuMemAddressReserve,                                                                  \
      (CUdeviceptr * p, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)) \
    X(cuMemAddressFree, (CUdeviceptr p, size_t size))                                       \
    X(cuMemMap, (CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, \
                 unsigned long long flags))                                                 \
    X(cuMemUnmap, (CUdeviceptr p, size_t size))                                             \
    X(cuMemSetAccess, (CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count)) \
    X(cuMemRelease, (CUmemGenericAllocationHandle h))                                       \
    X(cuGetErrorName, (CUresult r, const char **name))

struct cuda_mapping {
    void *lib;
#define CUDA_MAP_PTR_(name, args) CUresult (*name) args;
    CUDA_MAP_FUNCS(CUDA_MAP_PTR_)
#undef CUDA_MAP_PTR_
    CUmemGenericAllocationHandle handle;
    CUdeviceptr ptr;
    size_t bytes;
};

/* Opens libcuda.so.1 into m; -ELIBACC when it or one of its functions is missing. */
static int load(struct cuda_mapping *m, char *why, size_t len)
{
    m->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) {
        snprintf(why, len, "libcuda.so.1 cannot be opened");
        return -ELIBACC;
    }
    /* POSIX lets a data pointer from dlsym become a function pointer through memcpy. */
#define CUDA_MAP_SYM_(name, args)                                                            \
    {                                                                                        \
        void *f = dlsym(m->lib, #name);                                                      \
        if (!f) {                                                                            \
            snprintf(why, len, "libcuda.so.1 has no %s", #name);                             \
            dlclose(m->lib);                                                                 \
            return -ELIBACC;                                                                 \
        }                                                                                    \
        memcpy(&m->name, &f, sizeof f);                                                      \
    }
    CUDA_MAP_FUNCS(CUDA_MAP_SYM_)
#undef CUDA_MAP_SYM_
    return 0;
}

static int driver_error(const struct cuda_mapping *m, CUresult r, const char *what, char *why,
                        size_t len)
{
    const char *name = NULL;
    if (m->cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown error";
    snprintf(why, len, "%s: %s (%d)", what, name, r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : GLLM_EBACKEND;
}

/* The steps after load: a failure undoes what came before it. */
static int import_and_map(struct cuda_mapping *m, int fd, char *why, size_t len)
{
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    CUresult r = m->cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS || !ctx || m->cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
        snprintf(why, len, "the calling thread has no current CUDA context");
        return -ENODEV;
    }
    r = m->cuMemImportFromShareableHandle(&m->handle, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS)
        return driver_error(m, r, "importing the shared memory", why, len);
    r = m->cuMemAddressReserve(&m->ptr, m->bytes, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        m->cuMemRelease(m->handle);
        return driver_error(m, r, "reserving an address range", why, len);
    }
    const char *what = "mapping the shared memory";
    r = m->cuMemMap(m->ptr, m->bytes, 0, m->handle, 0);
    if (r == CUDA_SUCCESS) {
        const CUmemAccessDesc access = {
            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        what = "opening the mapping to the context's device";
        r = m->cuMemSetAccess(m->ptr, m->bytes, &access, 1);
        if (r != CUDA_SUCCESS)
            m->cuMemUnmap(m->ptr, m->bytes);
    }
    if (r != CUDA_SUCCESS) {
        m->cuMemAddressFree(m->ptr, m->bytes);
        m->cuMemRelease(m->handle);
        return driver_error(m, r, what, why, len);
    }
    return 0;
}

int cuda_map_fd(int fd, size_t bytes, struct cuda_mapping **out, uint64_t *ptr, char *why,
                size_t len)
{
    struct cuda_mapping *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->bytes = bytes;
    int r = load(m, why, len);
    if (r == 0 && (r = import_and_map(m, fd, why, len)) < 0)
        dlclose(m->lib);
    if (r < 0) {
        free(m);
        return r;
    }
    *out = m;
    *ptr = m->ptr;
    return 0;
}

uint64_t cuda_mapping_ptr(const struct cuda_mapping *m)
{
    return m->ptr;
}

void cuda_unmap(struct cuda_mapping *m)
{
    if (!m)
        return;
    /* Best effort: a context torn down before us took its mappings with it. */
    m->cuMemUnmap(m->ptr, m->bytes);
    m->cuMemAddressFree(m->ptr, m->bytes);
    m->cuMemRelease(m->handle);
    dlclose(m->lib);
    free(m);
}
