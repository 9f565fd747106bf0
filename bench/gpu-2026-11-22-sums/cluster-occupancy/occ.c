#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
static void chk(CUresult r, const char *w) { if (r) { const char *s; cuGetErrorString(r, &s); printf("%s: %s\n", w, s); } }
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f[2];
    chk(cuInit(0), "init"); chk(cuDeviceGet(&dev, 0), "dev"); chk(cuDevicePrimaryCtxRetain(&ctx, dev), "ctx"); chk(cuCtxSetCurrent(ctx), "cur");
    chk(cuModuleLoad(&mod, "dummy.cubin"), "mod");
    chk(cuModuleGetFunction(&f[0], mod, "dummy256"), "f0"); chk(cuModuleGetFunction(&f[1], mod, "dummy128"), "f1");
    int threads[2] = {256, 128}, smem[2] = {200 * 1024, 100 * 1024};
    for (int k = 0; k < 2; k++) {
        chk(cuFuncSetAttribute(f[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem[k]), "smem");
        chk(cuFuncSetAttribute(f[k], CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), "np");
        for (int cs = 1; cs <= 16; cs *= 2) {
            CUlaunchAttribute at = {0};
            at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            at.value.clusterDim.x = cs; at.value.clusterDim.y = 1; at.value.clusterDim.z = 1;
            CUlaunchConfig cfg = {0};
            cfg.gridDimX = 16 * cs; cfg.gridDimY = 1; cfg.gridDimZ = 1; cfg.blockDimX = threads[k]; cfg.blockDimY = 1; cfg.blockDimZ = 1;
            cfg.sharedMemBytes = smem[k]; cfg.attrs = &at; cfg.numAttrs = 1;
            int n = -1;
            CUresult r = cuOccupancyMaxActiveClusters(&n, f[k], &cfg);
            printf("threads %d smem %d KB cluster %2d: max active clusters %d (%d blocks) %s\n", threads[k], smem[k] / 1024, cs, n, n * cs, r ? "ERR" : "");
        }
    }
    int sms; cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev); printf("SMs %d\n", sms);
    return 0;
}
