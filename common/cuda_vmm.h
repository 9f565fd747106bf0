/* The CUDA driver types and values that libgllm-client and gllmd's CUDA backend both use. */
#ifndef GLLM_CUDA_VMM_H
#define GLLM_CUDA_VMM_H

#include <stdint.h>

/*
 * Declared here, with the driver's own layouts and values (cuda.h, CUDA 11.2 and later), so
 * neither needs a CUDA toolkit to build; both look the functions up in libcuda.so.1 at run
 * time (client/cuda_map.c, daemon/backends/cuda/cuda_driver.c). One copy, so the two sides'
 * views of the virtual memory management structs they exchange handles through cannot drift.
 */
typedef int CUresult;                              /* CUDA_SUCCESS = 0 */
typedef int CUdevice;                              /* a device ordinal */
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
    int type;                                      /* CU_MEM_LOCATION_TYPE_* */
    int id;                                        /* the device ordinal for TYPE_DEVICE */
} CUmemLocation;

typedef struct {
    CUmemLocation location;
    int flags;                                     /* CU_MEM_ACCESS_FLAGS_* */
} CUmemAccessDesc;

/* cuMemCreate's properties (CUmemAllocationProp), for programs that make their own exports. */
typedef struct {
    int type;                                      /* CU_MEM_ALLOCATION_TYPE_* */
    int requestedHandleTypes;                      /* CU_MEM_HANDLE_TYPE_* */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_CONTEXT = 201,
};
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0

#endif
