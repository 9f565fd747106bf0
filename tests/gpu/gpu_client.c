/* The CUDA driver calls, VMM allocations and timing helpers that the GPU client tests share
 * (shared_gpu, ordering_gpu), by the driver's exported names through dlopen. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_client.h"

struct cuda_test_driver cu;
CUdevice device;
int failures;

/* 0, or 77 with the reason printed: no driver, a driver without these calls, no device. */
int load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("SKIPPED: libcuda.so.1 cannot be opened (%s)\n", dlerror());
        return 77;
    }
#define DRIVER_SYM_(name, sym, args)                                                          \
    {                                                                                         \
        void *f = dlsym(lib, sym);                                                            \
        if (!f) {                                                                             \
            printf("SKIPPED: libcuda.so.1 has no %s\n", sym);                                 \
            return 77;                                                                        \
        }                                                                                     \
        memcpy(&cu.name, &f, sizeof f);                                                       \
    }
    DRIVER_FUNCS(DRIVER_SYM_)
#undef DRIVER_SYM_
    int n = 0;
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
        printf("SKIPPED: the CUDA driver has no device\n");
        return 77;
    }
    return 0;
}

/* A driver call that must succeed: the program stops with its name otherwise. */
void check_cu(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    fprintf(stderr, "FAIL: %s: %s (%d)\n", what, name, r);
    exit(1);
}

void check_gllm(gllm_client *c, int r, const char *what)
{
    if (r == 0)
        return;
    fprintf(stderr, "FAIL: %s: %s (%s)\n", what, gllm_error_name(r), gllm_client_last_error(c));
    exit(1);
}

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory this process makes and exports (cuMemCreate, POSIX fd) ---- */

static CUmemAllocationProp own_prop(void)
{
    return (CUmemAllocationProp){
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
    };
}

size_t own_granularity(void)
{
    CUmemAllocationProp prop = own_prop();
    size_t g = 0;
    check_cu(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             "cuMemGetAllocationGranularity");
    return g;
}

struct own_alloc own_create(size_t bytes)
{
    CUmemAllocationProp prop = own_prop();
    struct own_alloc a = {.bytes = bytes, .fd = -1};
    check_cu(cu.cuMemCreate(&a.h, bytes, &prop, 0), "cuMemCreate");
    check_cu(cu.cuMemExportToShareableHandle(&a.fd, a.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
             "cuMemExportToShareableHandle");
    check_cu(cu.cuMemAddressReserve(&a.ptr, bytes, 0, 0, 0), "cuMemAddressReserve");
    check_cu(cu.cuMemMap(a.ptr, bytes, 0, a.h, 0), "cuMemMap");
    const CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
                                    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check_cu(cu.cuMemSetAccess(a.ptr, bytes, &access, 1), "cuMemSetAccess");
    return a;
}

void own_free(struct own_alloc *a)
{
    cu.cuMemUnmap(a->ptr, a->bytes);
    cu.cuMemAddressFree(a->ptr, a->bytes);
    cu.cuMemRelease(a->h);
    if (a->fd >= 0)
        close(a->fd);
}

size_t round_up(size_t n, size_t g)
{
    return (n + g - 1) / g * g;
}

double pct(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(int)(q * (n - 1) + 0.5)];
}

int gpu_test_start(struct gpu_test *t)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    *t = (struct gpu_test){0};
    /* Our own gllmd, unless one is named: started before this process makes a context (the
     * child execs at once and never uses the driver state it inherits). */
    t->sock = getenv("GLLM_SOCKET");
    int skip = load_driver();
    if (skip)
        return skip;
    if (!t->sock || !t->sock[0]) {
        setenv("GLLM_TEST_BACKEND", "cuda", 0);
        int r = daemon_start(&t->d, NULL);
        if (r < 0) {
            fprintf(stderr, "FAIL: starting gllmd: %s\n", gllm_strerror(r));
            return 1;
        }
        t->sock = t->d.socket;
    }
    check_cu(cu.cuDeviceGet(&device, 0), "cuDeviceGet");
    /* Spin scheduling, as gllmd's own context: a context that yields or blocks makes the
     * GPU's switches between the two processes cost hundreds of microseconds
     * (GLLM_CLIENT_SCHED=auto keeps the driver's default, to measure that). */
    const char *sched = getenv("GLLM_CLIENT_SCHED");
    if (!sched || strcmp(sched, "auto") != 0)
        cu.cuDevicePrimaryCtxSetFlags(device, 0x01 /* CU_CTX_SCHED_SPIN */);
    check_cu(cu.cuDevicePrimaryCtxRetain(&t->ctx, device), "cuDevicePrimaryCtxRetain");
    check_cu(cu.cuCtxSetCurrent(t->ctx), "cuCtxSetCurrent");
    int r = gllm_connect(t->sock, &t->c);
    if (r < 0) {
        fprintf(stderr, "FAIL: connecting to %s: %s\n", t->sock, gllm_strerror(r));
        return 1;
    }
    gllm_caps caps = GLLM_CAPS_INIT;
    gllm_client_caps(t->c, &caps);
    printf("gllmd %s, backend %s, share \"%s\" (granularity %llu)\n", caps.daemon_version,
           caps.backend, caps.share, (unsigned long long)caps.share_granularity);
    if (strcmp(caps.share, "cuda_vmm_fd") != 0) {
        fprintf(stderr, "FAIL: gllmd does not share CUDA memory (backend %s)\n", caps.backend);
        return 1;
    }
    return 0;
}

int gpu_test_finish(struct gpu_test *t)
{
    gllm_disconnect(t->c);
    cu.cuDevicePrimaryCtxRelease(device);
    if (t->d.pid)
        daemon_stop(&t->d);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
