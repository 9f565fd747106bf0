/* The CUDA driver calls, VMM allocations and timing helpers that the GPU client tests share. */
#ifndef GLLM_TESTS_GPU_CLIENT_H
#define GLLM_TESTS_GPU_CLIENT_H

#include <stddef.h>

#include "cuda_vmm.h"
#include "testutil.h"

#define DRIVER_FUNCS(X)                                                                       \
    X(cuInit, "cuInit", (unsigned flags))                                                    \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *n))                                        \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice * d, int ordinal))                               \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * ctx, CUdevice d))   \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice d))               \
    X(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", (CUdevice d, unsigned f)) \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                   \
    X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                          \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr dst, const void *src, size_t n))         \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, CUdeviceptr src, size_t n))               \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",                        \
      (size_t * g, const CUmemAllocationProp *prop, int option))                             \
    X(cuMemCreate, "cuMemCreate",                                                            \
      (CUmemGenericAllocationHandle * h, size_t n, const CUmemAllocationProp *prop,          \
       unsigned long long flags))                                                            \
    X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle",                          \
      (void *out, CUmemGenericAllocationHandle h, int type, unsigned long long flags))       \
    X(cuMemAddressReserve, "cuMemAddressReserve",                                            \
      (CUdeviceptr * p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags)) \
    X(cuMemAddressFree, "cuMemAddressFree", (CUdeviceptr p, size_t n))                       \
    X(cuMemMap, "cuMemMap",                                                                  \
      (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h,                  \
       unsigned long long flags))                                                            \
    X(cuMemUnmap, "cuMemUnmap", (CUdeviceptr p, size_t n))                                   \
    X(cuMemSetAccess, "cuMemSetAccess",                                                      \
      (CUdeviceptr p, size_t n, const CUmemAccessDesc *desc, size_t count))                  \
    X(cuMemRelease, "cuMemRelease", (CUmemGenericAllocationHandle h))                        \
    X(cuGetErrorName, "cuGetErrorName", (CUresult r, const char **name))                    \
    X(cuStreamCreate, "cuStreamCreate", (void **s, unsigned flags))                          \
    X(cuStreamSynchronize, "cuStreamSynchronize", (void *s))                                 \
    X(cuEventCreate, "cuEventCreate", (void **e, unsigned flags))                            \
    X(cuEventRecord, "cuEventRecord", (void *e, void *s))                                    \
    X(cuEventSynchronize, "cuEventSynchronize", (void *e))                                   \
    X(cuEventElapsedTime, "cuEventElapsedTime", (float *ms, void *a, void *b))               \
    X(cuMemsetD32Async, "cuMemsetD32Async", (CUdeviceptr p, unsigned v, size_t n, void *s))

struct cuda_test_driver {
#define DRIVER_PTR_(name, sym, args) CUresult (*name) args;
    DRIVER_FUNCS(DRIVER_PTR_)
#undef DRIVER_PTR_
};

extern struct cuda_test_driver cu;
extern CUdevice device;   /* the device the test runs on */
extern int failures;      /* checks failed so far: the test fails when not 0 */

/* 0, or 77 with the reason printed: no driver, a driver without these calls, no device. */
int load_driver(void);
/* A driver or gllm call that must succeed: the program stops with its name otherwise. */
void check_cu(CUresult r, const char *what);
void check_gllm(gllm_client *c, int r, const char *what);

double now_s(void);
double median(double *v, int n);           /* sorts v */
double pct(double *v, int n, double q);    /* sorts v; q in [0, 1] */

/* Memory this process makes with cuMemCreate, exportable as a POSIX fd, mapped here. */
struct own_alloc {
    CUmemGenericAllocationHandle h;
    CUdeviceptr ptr;
    size_t bytes;
    int fd;
};

size_t own_granularity(void);
struct own_alloc own_create(size_t bytes);
void own_free(struct own_alloc *a);
size_t round_up(size_t n, size_t g);

/* A test's gllmd ($GLLM_SOCKET, or one it starts on the CUDA backend), its context on
 * device 0 and its connection. */
struct gpu_test {
    struct daemon d;
    const char *sock;
    CUcontext ctx;
    gllm_client *c;
};

/* 0, 77 (skipped: no driver or device, reason printed) or 1 (failed, reason printed). */
int gpu_test_start(struct gpu_test *t);
/* Disconnects, stops the gllmd it started; the exit status: 0 passed, 1 failed. */
int gpu_test_finish(struct gpu_test *t);

#endif
