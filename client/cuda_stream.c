/* libgllm-client: a job ordered on the caller's CUDA stream. The counters live in an arena,
 * host memory both processes map: the caller's stream writes "inputs ready" there
 * (cuStreamWriteValue32), gllmd's worker sees it without any system call and launches, and
 * gllmd's stream writes "done", which the caller's stream waits for (cuStreamWaitValue32),
 * so neither side synchronises on the host. libcuda.so.1 is opened only when a caller asks
 * for this. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_stream.h"
#include "gllm/errors.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;

#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0

/* X(name, exported symbol, args) */
#define CUDA_STREAM_FUNCS(X)                                                                 \
    X(cuMemHostRegister, "cuMemHostRegister_v2", (void *p, size_t n, unsigned int flags))   \
    X(cuMemHostUnregister, "cuMemHostUnregister", (void *p))                                \
    X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",                            \
      (CUdeviceptr * d, void *p, unsigned int flags))                                       \
    X(cuStreamWriteValue32, "cuStreamWriteValue32_v2",                                      \
      (CUstream s, CUdeviceptr addr, unsigned int value, unsigned int flags))               \
    X(cuStreamWaitValue32, "cuStreamWaitValue32_v2",                                        \
      (CUstream s, CUdeviceptr addr, unsigned int value, unsigned int flags))               \
    X(cuGetErrorName, "cuGetErrorName", (CUresult r, const char **name))

struct cuda_stream_reg {
    void *lib;
#define CUDA_STREAM_PTR_(name, sym, args) CUresult (*name) args;
    CUDA_STREAM_FUNCS(CUDA_STREAM_PTR_)
#undef CUDA_STREAM_PTR_
    void *base;
    CUdeviceptr dev;             /* base as the device addresses it */
};

static int failed(const struct cuda_stream_reg *r, CUresult e, const char *what, char *why,
                  size_t len)
{
    const char *name = NULL;
    if (r->cuGetErrorName(e, &name) != 0 || !name)
        name = "unknown error";
    snprintf(why, len, "%s: %s (%d)", what, name, e);
    return GLLM_EBACKEND;
}

/* Opens libcuda.so.1 and resolves the functions into a new r. */
static int open_driver(struct cuda_stream_reg **out, char *why, size_t len)
{
    struct cuda_stream_reg *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!r->lib) {
        free(r);
        snprintf(why, len, "libcuda.so.1 cannot be opened");
        return -ELIBACC;
    }
#define CUDA_STREAM_SYM_(name, sym, args)                                                    \
    {                                                                                        \
        void *f = dlsym(r->lib, sym);                                                        \
        if (!f) {                                                                            \
            snprintf(why, len, "libcuda.so.1 has no %s", sym);                               \
            dlclose(r->lib);                                                                 \
            free(r);                                                                         \
            return -ELIBACC;                                                                 \
        }                                                                                    \
        memcpy(&r->name, &f, sizeof f);                                                      \
    }
    CUDA_STREAM_FUNCS(CUDA_STREAM_SYM_)
#undef CUDA_STREAM_SYM_
    *out = r;
    return 0;
}

int cuda_stream_register(void *base, size_t size, struct cuda_stream_reg **out, char *why,
                         size_t len)
{
    struct cuda_stream_reg *r;
    int rc = open_driver(&r, why, len);
    if (rc < 0)
        return rc;
    CUresult e = r->cuMemHostRegister(base, size,
                                      CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    if (e == 0 && (e = r->cuMemHostGetDevicePointer(&r->dev, base, 0)) != 0)
        r->cuMemHostUnregister(base);
    if (e != 0) {
        int code = failed(r, e, "registering the arena with this CUDA context", why, len);
        dlclose(r->lib);
        free(r);
        return code;
    }
    r->base = base;
    *out = r;
    return 0;
}

int cuda_stream_write(struct cuda_stream_reg *r, size_t offset, uint32_t value, void *stream,
                      char *why, size_t len)
{
    CUresult e = r->cuStreamWriteValue32((CUstream)stream, r->dev + offset, value,
                                         CU_STREAM_WRITE_VALUE_DEFAULT);
    return e ? failed(r, e, "cuStreamWriteValue32", why, len) : 0;
}

int cuda_stream_wait(struct cuda_stream_reg *r, size_t offset, uint32_t value, void *stream,
                     char *why, size_t len)
{
    CUresult e = r->cuStreamWaitValue32((CUstream)stream, r->dev + offset, value,
                                        CU_STREAM_WAIT_VALUE_GEQ);
    return e ? failed(r, e, "cuStreamWaitValue32", why, len) : 0;
}

int cuda_stream_device(uint64_t dev, struct cuda_stream_reg **out, char *why, size_t len)
{
    struct cuda_stream_reg *r;
    int rc = open_driver(&r, why, len);
    if (rc < 0)
        return rc;
    r->dev = (CUdeviceptr)dev;
    *out = r;
    return 0;
}

void cuda_stream_unregister(struct cuda_stream_reg *r)
{
    if (!r)
        return;
    if (r->base)                 /* host memory it registered; device memory is the mapping's */
        r->cuMemHostUnregister(r->base);
    dlclose(r->lib);
    free(r);
}
