/* The kernel registry as the loader uses it (cuda_device.c), against a fake driver: each row
 * loaded by its symbol with its mode's shared memory, found by mode, dtype, head dim and flags,
 * and only where the GPU's image and the driver have its code and the GPU the shared memory it
 * needs; a refused kernel fails the open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_device.h"

#define MAX_FN 256

/* What the fake driver was asked: each function by name, the shared memory allowed it. */
static struct {
    int cc_major, cc_minor;
    int smem_max;                  /* a block's opt-in shared memory; 0: the attribute fails */
    const char *refuse;            /* cuModuleGetFunction fails for this name */
    int nfn;
    char name[MAX_FN][64];
    int smem[MAX_FN];
} fk;

static CUresult f_error_text(CUresult e, const char **s)
{
    (void)e;
    *s = "fake";
    return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *dev, int ordinal)
{
    *dev = ordinal;
    return CUDA_SUCCESS;
}

static CUresult f_name(char *name, int len, CUdevice dev)
{
    (void)dev;
    snprintf(name, (size_t)len, "Fake GPU");
    return CUDA_SUCCESS;
}

static CUresult f_mem(size_t *bytes, CUdevice dev)
{
    (void)dev;
    *bytes = (size_t)1 << 34;
    return CUDA_SUCCESS;
}

static CUresult f_attribute(int *v, int attr, CUdevice dev)
{
    (void)dev;
    if (attr == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) {
        *v = fk.smem_max;
        return fk.smem_max ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    }
    *v = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? fk.cc_major
         : attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? fk.cc_minor
         : attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? 132
                                                                : 0;
    return CUDA_SUCCESS;
}

static CUresult f_ctx_retain(CUcontext *c, CUdevice dev)
{
    (void)dev;
    *c = (CUcontext)(uintptr_t)0x10;
    return CUDA_SUCCESS;
}

static CUresult f_ctx_flags(CUdevice dev, unsigned flags)
{
    (void)dev, (void)flags;
    return CUDA_SUCCESS;
}

static CUresult f_dev(CUdevice dev)
{
    (void)dev;
    return CUDA_SUCCESS;
}

static CUresult f_ctx(CUcontext c)
{
    (void)c;
    return CUDA_SUCCESS;
}

static CUresult f_module_load(CUmodule *m, const void *image)
{
    (void)image;
    *m = (CUmodule)(uintptr_t)0x20;
    return CUDA_SUCCESS;
}

static CUresult f_module_unload(CUmodule m)
{
    (void)m;
    return CUDA_SUCCESS;
}

/* A function is its index in fk.name plus one. */
static CUresult f_get_function(CUfunction *f, CUmodule m, const char *name)
{
    (void)m;
    if ((fk.refuse && !strcmp(name, fk.refuse)) || fk.nfn == MAX_FN)
        return (CUresult)500;         /* CUDA_ERROR_NOT_FOUND */
    snprintf(fk.name[fk.nfn], sizeof fk.name[0], "%s", name);
    fk.smem[fk.nfn] = 0;
    *f = (CUfunction)(uintptr_t)++fk.nfn;
    return CUDA_SUCCESS;
}

static CUresult f_set_attribute(CUfunction f, int attr, int value)
{
    assert_int_equal(attr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    fk.smem[(uintptr_t)f - 1] = value;
    return CUDA_SUCCESS;
}

static CUresult f_stream_create(CUstream *s, unsigned flags)
{
    (void)flags;
    *s = (CUstream)(uintptr_t)0x30;
    return CUDA_SUCCESS;
}

static CUresult f_stream_destroy(CUstream s)
{
    (void)s;
    return CUDA_SUCCESS;
}

static CUresult f_event_create(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = (CUevent)(uintptr_t)0x40;
    return CUDA_SUCCESS;
}

static CUresult f_event_destroy(CUevent e)
{
    (void)e;
    return CUDA_SUCCESS;
}

static CUresult f_alloc_host(void **p, size_t bytes)
{
    *p = calloc(1, bytes);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult f_free_host(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

static CUresult f_free(CUdeviceptr p)
{
    (void)p;
    return CUDA_SUCCESS;
}

static CUresult f_encode(CUtensorMap *map, int dtype, unsigned rank, void *base,
                         const unsigned long long *dims, const unsigned long long *strides,
                         const unsigned *box, const unsigned *elem_strides, int interleave,
                         int swizzle, int l2_promotion, int oob_fill)
{
    (void)map, (void)dtype, (void)rank, (void)base, (void)dims, (void)strides, (void)box;
    (void)elem_strides, (void)interleave, (void)swizzle, (void)l2_promotion, (void)oob_fill;
    return CUDA_SUCCESS;
}

static struct cuda_driver drv;

/* Opens a fake GPU of compute capability major.minor into x; tma: the driver encodes maps.
 * Its blocks may have what a GPU of that capability allows of shared memory (fk.smem_max
 * set after this call is kept: a test of another amount sets it and calls reopen_fake). */
static int reopen_fake(struct cuda_dev *x, int major, int minor, bool tma, char *why, size_t len);
static int open_fake(struct cuda_dev *x, int major, int minor, bool tma, char *why, size_t len)
{
    fk.smem_max = major == 9 ? 232448 : major == 8 && minor == 0 ? 166912 : 101376;
    return reopen_fake(x, major, minor, tma, why, len);
}

static int reopen_fake(struct cuda_dev *x, int major, int minor, bool tma, char *why, size_t len)
{
    memset(&drv, 0, sizeof drv);
    drv.cuGetErrorName = f_error_text, drv.cuGetErrorString = f_error_text;
    drv.cuDeviceGet = f_device_get, drv.cuDeviceGetName = f_name, drv.cuDeviceTotalMem = f_mem;
    drv.cuDeviceGetAttribute = f_attribute, drv.cuDevicePrimaryCtxRetain = f_ctx_retain;
    drv.cuDevicePrimaryCtxSetFlags = f_ctx_flags, drv.cuDevicePrimaryCtxRelease = f_dev;
    drv.cuCtxSetCurrent = f_ctx, drv.cuModuleLoadData = f_module_load;
    drv.cuModuleUnload = f_module_unload, drv.cuModuleGetFunction = f_get_function;
    drv.cuFuncSetAttribute = f_set_attribute, drv.cuStreamCreate = f_stream_create;
    drv.cuStreamDestroy = f_stream_destroy, drv.cuEventCreate = f_event_create;
    drv.cuEventDestroy = f_event_destroy, drv.cuMemAllocHost = f_alloc_host;
    drv.cuMemFreeHost = f_free_host, drv.cuMemFree = f_free;
    drv.cuTensorMapEncodeTiled = tma ? f_encode : NULL;
    fk.cc_major = major, fk.cc_minor = minor, fk.nfn = 0;
    memset(x, 0, sizeof *x);
    return cuda_device_open(&drv, 0, x, why, len);
}

/* The symbol of what find returned, and the shared memory it was allowed; "" for NULL. */
static const char *name_of(CUfunction f, int *smem)
{
    if (!f)
        return "";
    *smem = fk.smem[(uintptr_t)f - 1];
    return fk.name[(uintptr_t)f - 1];
}

static void expect(const struct cuda_dev *x, enum gllm_cuda_mode mode, gllm_dtype t, int64_t D,
                   unsigned flags, const char *symbol, int smem)
{
    int got = -1;
    assert_string_equal(name_of(cuda_kernel_find(x, mode, t, D, flags), &got), symbol);
    if (symbol[0])
        assert_int_equal(got, smem);
}

static void test_hopper(void **state)
{
    (void)state;
    struct cuda_dev x;
    char why[256] = "";
    assert_int_equal(open_fake(&x, 9, 0, true, why, sizeof why), 0);
    assert_int_equal(fk.nfn, GLLM_CUDA_KERNEL_COUNT);               /* every row loaded */
    const unsigned C = GLLM_CUDA_KF_CAUSAL;
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_F16, 64, 0, "gllm_attn_fwd_f16_d64", GLLM_CUDA_TC_SMEM(64));
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_BF16, 128, C, "gllm_attn_fwd_bf16_d128_causal",
           GLLM_CUDA_TC_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_HOPPER, GLLM_DTYPE_F16, 128, C, "gllm_attn_fwd_hopper_f16_d128_causal",
           GLLM_CUDA_HP_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_HOPPER_TMA, GLLM_DTYPE_BF16, 64, 0,
           "gllm_attn_fwd_hopper_tma_bf16_d64", GLLM_CUDA_HP_SMEM(64));
    expect(&x, GLLM_CUDA_MODE_PAGED_PREFILL, GLLM_DTYPE_BF16, 128, 0,
           "gllm_paged_prefill_hopper_bf16_d128", GLLM_CUDA_PP_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_F16, 128, 0, "gllm_paged_attn_f16_d128",
           GLLM_CUDA_PAGED_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_PAGED_BATCH, GLLM_DTYPE_BF16, 64, 0, "gllm_paged_attn_batch_bf16_d64",
           GLLM_CUDA_PAGED_SMEM(64));
    expect(&x, GLLM_CUDA_MODE_PAGED_SINGLE, GLLM_DTYPE_F16, 64, 0, "gllm_paged_attn_single_f16_d64",
           GLLM_CUDA_PAGED_SMEM(64));
    /* Every paged head dim, in every form. */
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_BF16, 96, 0, "gllm_paged_attn_bf16_d96",
           GLLM_CUDA_PAGED_SMEM(96));
    expect(&x, GLLM_CUDA_MODE_PAGED_BATCH, GLLM_DTYPE_F16, 80, 0, "gllm_paged_attn_batch_f16_d80",
           GLLM_CUDA_PAGED_SMEM(80));
    expect(&x, GLLM_CUDA_MODE_PAGED_VAR, GLLM_DTYPE_BF16, 256, 0, "gllm_paged_attn_var_bf16_d256",
           GLLM_CUDA_PAGED_SMEM(256));
    expect(&x, GLLM_CUDA_MODE_PAGED_SINGLE_VAR, GLLM_DTYPE_F16, 192, 0,
           "gllm_paged_attn_single_var_f16_d192", GLLM_CUDA_PAGED_SMEM(192));
    /* Rows of any head dim or dtype, without a shared-memory attribute. */
    expect(&x, GLLM_CUDA_MODE_GENERIC, GLLM_DTYPE_F32, 1, 0, "gllm_attn_generic_f32", 0);
    expect(&x, GLLM_CUDA_MODE_GENERIC, GLLM_DTYPE_BF16, 256, 0, "gllm_attn_generic_bf16", 0);
    expect(&x, GLLM_CUDA_MODE_APPEND, GLLM_DTYPE_F32, 0, 0, "gllm_kv_append_rows", 0);
    expect(&x, GLLM_CUDA_MODE_APPEND, GLLM_DTYPE_BF16, 0, 0, "gllm_kv_append_rows", 0);
    /* What the registry has no row for. */
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_F32, 64, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_F16, 96, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_F16, 64, C, "", 0);
    expect(&x, GLLM_CUDA_MODE_GENERIC, GLLM_DTYPE_F16, 64, C, "", 0);  /* causal: a parameter */
    assert_null(cuda_kernel_find(&x, GLLM_CUDA_MODE_COUNT, GLLM_DTYPE_F16, 64, 0));
    cuda_device_close(&drv, &x);
}

static void test_no_tma(void **state)
{
    (void)state;
    struct cuda_dev x;
    char why[256] = "";
    assert_int_equal(open_fake(&x, 9, 0, false, why, sizeof why), 0);
    expect(&x, GLLM_CUDA_MODE_HOPPER, GLLM_DTYPE_BF16, 64, GLLM_CUDA_KF_CAUSAL,
           "gllm_attn_fwd_hopper_bf16_d64_causal", GLLM_CUDA_HP_SMEM(64));
    expect(&x, GLLM_CUDA_MODE_HOPPER_TMA, GLLM_DTYPE_BF16, 64, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_PAGED_PREFILL, GLLM_DTYPE_F16, 64, 0, "", 0);
    cuda_device_close(&drv, &x);
}

static void test_ampere(void **state)
{
    (void)state;
    struct cuda_dev x;
    char why[256] = "";
    assert_int_equal(open_fake(&x, 8, 0, true, why, sizeof why), 0);   /* sm_80's image */
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_F16, 128, 0, "gllm_attn_fwd_f16_d128", GLLM_CUDA_TC_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_HOPPER, GLLM_DTYPE_F16, 128, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_HOPPER_TMA, GLLM_DTYPE_F16, 128, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_PAGED_PREFILL, GLLM_DTYPE_F16, 128, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_BF16, 128, 0, "gllm_paged_attn_bf16_d128",
           GLLM_CUDA_PAGED_SMEM(128));
    cuda_device_close(&drv, &x);
}

/* A GPU whose blocks get less shared memory than some kernels want (8.6: 99 KiB) serves
 * with the rest; where the attribute cannot be read, every kernel is tried. */
static void test_small_shared_memory(void **state)
{
    (void)state;
    struct cuda_dev x;
    char why[256] = "";
    assert_int_equal(open_fake(&x, 8, 6, true, why, sizeof why), 0);
    expect(&x, GLLM_CUDA_MODE_TC, GLLM_DTYPE_F16, 128, 0, "gllm_attn_fwd_f16_d128", GLLM_CUDA_TC_SMEM(128));
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_F16, 64, 0, "gllm_paged_attn_f16_d64",
           GLLM_CUDA_PAGED_SMEM(64));
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_F16, 256, 0, "", 0);
    expect(&x, GLLM_CUDA_MODE_PAGED_VAR, GLLM_DTYPE_BF16, 192, 0, "", 0);
    cuda_device_close(&drv, &x);
    fk.smem_max = 0;
    assert_int_equal(reopen_fake(&x, 8, 6, true, why, sizeof why), 0);
    expect(&x, GLLM_CUDA_MODE_PAGED, GLLM_DTYPE_F16, 256, 0, "gllm_paged_attn_f16_d256",
           GLLM_CUDA_PAGED_SMEM(256));
    cuda_device_close(&drv, &x);
}

static void test_refused(void **state)
{
    (void)state;
    struct cuda_dev x;
    char why[256] = "";
    fk.refuse = "gllm_paged_attn_single_bf16_d64";
    assert_int_equal(open_fake(&x, 9, 0, true, why, sizeof why), GLLM_EBACKEND);
    fk.refuse = NULL;
    assert_non_null(strstr(why, "gllm_paged_attn_single_bf16_d64"));
    cuda_device_close(&drv, &x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hopper),
        cmocka_unit_test(test_no_tma),
        cmocka_unit_test(test_ampere),
        cmocka_unit_test(test_small_shared_memory),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
