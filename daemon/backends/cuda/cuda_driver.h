/* The CUDA driver API, declared here and resolved from libcuda.so.1 with dlopen at run time. */
#ifndef GLLMD_CUDA_DRIVER_H
#define GLLMD_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* Only what gllmd uses, with the driver's values; building needs no CUDA toolkit. */
#include "cuda_vmm.h"   /* CUresult, CUdevice, CUcontext, CUdeviceptr, the VMM structs */

typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

/* A kernel node's launch, the driver's CUDA_KERNEL_NODE_PARAMS_v2 (kern and ctx stay NULL:
 * func, in the current context). */
typedef struct {
    CUfunction func;
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    void **kernelParams;
    void **extra;
    void *kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;

enum {                             /* beyond cuda_vmm.h's */
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
    CUDA_ERROR_NOT_READY = 600,
    /* Sticky errors: the process's CUDA state is unusable from then on (cuda_device.c). */
    CUDA_ERROR_ECC_UNCORRECTABLE = 214,
    CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_TIMEOUT = 702,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_ASSERT = 710,
    CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
    CUDA_ERROR_MISALIGNED_ADDRESS = 716,
    CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
    CUDA_ERROR_INVALID_PC = 718,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_UNKNOWN = 999,
};

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91,
};

#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_CTX_SCHED_SPIN 0x01
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_DISABLE_TIMING 0x2

/* X(return, name, symbol, args): the symbol is the versioned name the driver exports. */
#define CUDA_DRIVER_FUNCS(X)                                                                \
    X(CUresult, cuInit, "cuInit", (unsigned int flags))                                     \
    X(CUresult, cuDriverGetVersion, "cuDriverGetVersion", (int *version))                   \
    X(CUresult, cuGetErrorName, "cuGetErrorName", (CUresult e, const char **s))             \
    X(CUresult, cuGetErrorString, "cuGetErrorString", (CUresult e, const char **s))         \
    X(CUresult, cuDeviceGetCount, "cuDeviceGetCount", (int *count))                         \
    X(CUresult, cuDeviceGet, "cuDeviceGet", (CUdevice * dev, int ordinal))                  \
    X(CUresult, cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))    \
    X(CUresult, cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t * bytes, CUdevice dev))    \
    X(CUresult, cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *v, int attr, CUdevice dev)) \
    X(CUresult, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * c, CUdevice dev)) \
    X(CUresult, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))  \
    X(CUresult, cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", (CUdevice dev))      \
    X(CUresult, cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", (CUdevice dev, unsigned int flags)) \
    X(CUresult, cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext c))                          \
    X(CUresult, cuModuleLoadData, "cuModuleLoadData", (CUmodule * m, const void *image))    \
    X(CUresult, cuModuleUnload, "cuModuleUnload", (CUmodule m))                             \
    X(CUresult, cuModuleGetFunction, "cuModuleGetFunction", (CUfunction * f, CUmodule m, const char *name)) \
    X(CUresult, cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction f, int attr, int value)) \
    X(CUresult, cuLaunchKernel, "cuLaunchKernel",                                           \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,       \
       unsigned bz, unsigned smem, CUstream s, void **params, void **extra))                \
    X(CUresult, cuGraphCreate, "cuGraphCreate", (CUgraph * g, unsigned int flags))          \
    X(CUresult, cuGraphDestroy, "cuGraphDestroy", (CUgraph g))                              \
    X(CUresult, cuGraphAddKernelNode, "cuGraphAddKernelNode_v2",                            \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *deps, size_t ndeps,                   \
       const CUDA_KERNEL_NODE_PARAMS *p))                                                   \
    X(CUresult, cuGraphInstantiate, "cuGraphInstantiateWithFlags",                          \
      (CUgraphExec * e, CUgraph g, unsigned long long flags))                               \
    X(CUresult, cuGraphExecDestroy, "cuGraphExecDestroy", (CUgraphExec e))                  \
    X(CUresult, cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",        \
      (CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p))                     \
    X(CUresult, cuGraphLaunch, "cuGraphLaunch", (CUgraphExec e, CUstream s))                \
    X(CUresult, cuStreamCreate, "cuStreamCreate", (CUstream * s, unsigned int flags))       \
    X(CUresult, cuStreamDestroy, "cuStreamDestroy_v2", (CUstream s))                        \
    X(CUresult, cuStreamSynchronize, "cuStreamSynchronize", (CUstream s))                   \
    X(CUresult, cuEventCreate, "cuEventCreate", (CUevent * e, unsigned int flags))          \
    X(CUresult, cuEventDestroy, "cuEventDestroy_v2", (CUevent e))                           \
    X(CUresult, cuEventRecord, "cuEventRecord", (CUevent e, CUstream s))                    \
    X(CUresult, cuEventElapsedTime, "cuEventElapsedTime", (float *ms, CUevent a, CUevent b)) \
    X(CUresult, cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * p, size_t bytes))               \
    X(CUresult, cuMemFree, "cuMemFree_v2", (CUdeviceptr p))                                 \
    X(CUresult, cuMemGetInfo, "cuMemGetInfo_v2", (size_t * free_bytes, size_t * total))     \
    X(CUresult, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr dst, const void *src, size_t n, CUstream s)) \
    X(CUresult, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, CUdeviceptr src, size_t n, CUstream s)) \
    X(CUresult, cuMemHostRegister, "cuMemHostRegister_v2", (void *p, size_t n, unsigned int flags)) \
    X(CUresult, cuMemHostUnregister, "cuMemHostUnregister", (void *p))                     \
    X(CUresult, cuMemAllocHost, "cuMemAllocHost_v2", (void **p, size_t bytes))              \
    X(CUresult, cuMemFreeHost, "cuMemFreeHost", (void *p))                                 \
    X(CUresult, cuMemsetD32Async, "cuMemsetD32Async", (CUdeviceptr p, unsigned int v, size_t n, CUstream s)) \
    X(CUresult, cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity",             \
      (size_t * g, const CUmemAllocationProp *prop, int option))                            \
    X(CUresult, cuMemCreate, "cuMemCreate",                                                 \
      (CUmemGenericAllocationHandle * h, size_t bytes, const CUmemAllocationProp *prop,     \
       unsigned long long flags))                                                           \
    X(CUresult, cuMemRelease, "cuMemRelease", (CUmemGenericAllocationHandle h))             \
    X(CUresult, cuMemAddressReserve, "cuMemAddressReserve",                                 \
      (CUdeviceptr * p, size_t bytes, size_t align, CUdeviceptr addr, unsigned long long flags)) \
    X(CUresult, cuMemAddressFree, "cuMemAddressFree", (CUdeviceptr p, size_t bytes))       \
    X(CUresult, cuMemMap, "cuMemMap",                                                       \
      (CUdeviceptr p, size_t bytes, size_t offset, CUmemGenericAllocationHandle h,          \
       unsigned long long flags))                                                           \
    X(CUresult, cuMemUnmap, "cuMemUnmap", (CUdeviceptr p, size_t bytes))                   \
    X(CUresult, cuMemSetAccess, "cuMemSetAccess",                                           \
      (CUdeviceptr p, size_t bytes, const CUmemAccessDesc *desc, size_t count))             \
    X(CUresult, cuMemExportToShareableHandle, "cuMemExportToShareableHandle",               \
      (void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags)) \
    X(CUresult, cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle",           \
      (CUmemGenericAllocationHandle * h, void *os_handle, int type))                        \
    X(CUresult, cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", \
      (CUmemAllocationProp * prop, CUmemGenericAllocationHandle h))

/* A TMA descriptor (cuTensorMapEncodeTiled's output): opaque, 128 bytes; the driver wants it
 * 64-byte aligned, its own header aligns it to 128. The enum values are the driver's. */
typedef struct {
    __attribute__((aligned(128))) unsigned long long opaque[16];
} CUtensorMap;
#define CU_TENSOR_MAP_DATA_TYPE_FLOAT16 6
#define CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 9
#define CU_TENSOR_MAP_INTERLEAVE_NONE 0
#define CU_TENSOR_MAP_SWIZZLE_128B 3
#define CU_TENSOR_MAP_L2_PROMOTION_L2_256B 3
#define CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE 0       /* out-of-bounds elements read as zeros */

/* Functions a driver may lack without the backend failing: NULL when absent, and the
 * features built on them are reported as missing. */
#define CU_STREAM_WAIT_VALUE_GEQ 0x0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0x0
#define CUDA_DRIVER_OPTIONAL_FUNCS(X)                                                        \
    X(CUresult, cuStreamWaitValue32, "cuStreamWaitValue32_v2",                              \
      (CUstream s, CUdeviceptr addr, unsigned int value, unsigned int flags))               \
    X(CUresult, cuStreamWriteValue32, "cuStreamWriteValue32_v2",                            \
      (CUstream s, CUdeviceptr addr, unsigned int value, unsigned int flags))               \
    X(CUresult, cuStreamQuery, "cuStreamQuery", (CUstream s))                               \
    X(CUresult, cuEventQuery, "cuEventQuery", (CUevent e))                                  \
    X(CUresult, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",                  \
      (CUdeviceptr * d, void *host, unsigned int flags))                                    \
    X(CUresult, cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled",                           \
      (CUtensorMap * map, int dtype, unsigned rank, void *base, const unsigned long long *dims, \
       const unsigned long long *strides, const unsigned *box, const unsigned *elem_strides, \
       int interleave, int swizzle, int l2_promotion, int oob_fill))

struct cuda_driver {
    void *handle;
#define CUDA_DRIVER_FIELD_(ret, name, sym, args) ret(*name) args;
    CUDA_DRIVER_FUNCS(CUDA_DRIVER_FIELD_)
    CUDA_DRIVER_OPTIONAL_FUNCS(CUDA_DRIVER_FIELD_)
#undef CUDA_DRIVER_FIELD_
};

/* Opens libcuda.so.1 (once per process) and resolves every symbol. Returns NULL
 * and a one-line reason when the driver is missing or lacks a symbol. */
const struct cuda_driver *cuda_driver_load(char *why, size_t len);
/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" style text for logs and replies. */
const char *cuda_error_text(const struct cuda_driver *d, CUresult r, char *buf, size_t len);

#endif
