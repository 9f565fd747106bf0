// How long a consumer warp's exponentials take outside the prefill kernel: the cycles a warp
// spends on a tile of 64 ex2 a thread, alone (ex2 only) and in softmax_tile's mix (the scaling
// FFMA, the ex2, the row sums, P packed to f16), with one or two such warps on each SM
// sub-partition. The key loop spends about 940 cycles a key tile there (docs/performance.md,
// v50-v51); this says what the pipes allow.
//
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o softmax_probe kernels/tools/softmax_probe.cu
//   ./softmax_probe
#include <cstdint>
#include <cstdio>
#include <cuda_fp16.h>

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Each iteration sees scores the compiler cannot know, as the kernel's come from a wgmma.
template <int N> __device__ __forceinline__ void pin(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

__device__ __forceinline__ uint32_t pack(float a, float b)
{
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

// MIX false: 64 ex2 a thread an iteration; true: softmax_tile's exponentials and row sums and
// pack_p's packing. cyc: each warp's clock64 cycles over the iterations.
template <bool MIX>
__global__ void __launch_bounds__(256, 1) probe(float *out, long long *cyc, int iters, float qk,
                                                float m0, float m1)
{
    float s[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        s[i] = (threadIdx.x * 64 + i) * 1e-4f;
    float rs0 = 0.f, rs1 = 0.f;
    uint32_t pf[32], acc = 0;
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        pin(s);
        if (!MIX) {
#pragma unroll
            for (int i = 0; i < 64; i++)
                s[i] = ex2(-s[i]);
        } else {
#pragma unroll
            for (int n = 0; n < 16; n++) {
                s[4 * n] = ex2(fmaf(s[4 * n], qk, -m0));
                s[4 * n + 1] = ex2(fmaf(s[4 * n + 1], qk, -m0));
                s[4 * n + 2] = ex2(fmaf(s[4 * n + 2], qk, -m1));
                s[4 * n + 3] = ex2(fmaf(s[4 * n + 3], qk, -m1));
                rs0 += s[4 * n] + s[4 * n + 1];
                rs1 += s[4 * n + 2] + s[4 * n + 3];
            }
#pragma unroll
            for (int n = 0; n < 32; n++) {
                pf[n] = pack(s[2 * n], s[2 * n + 1]);
                asm volatile("" : "+r"(pf[n])::"memory");
            }
            acc ^= pf[it & 31];
        }
    }
    const long long t1 = clock64();
    float t = rs0 + rs1 + (float)acc;
#pragma unroll
    for (int i = 0; i < 64; i++)
        t += s[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = t;
    if (threadIdx.x % 32 == 0)
        cyc[blockIdx.x * 8 + threadIdx.x / 32] = t1 - t0;
}

int main()
{
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms > 512) {
        fprintf(stderr, "softmax_probe: no usable GPU\n");
        return 1;
    }
    float *out;
    long long *cyc;
    if (cudaMalloc(&out, sms * 256 * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&cyc, sms * 8 * sizeof(long long)) != cudaSuccess) {
        fprintf(stderr, "softmax_probe: cudaMalloc failed\n");
        return 1;
    }
    const int iters = 2000;
    static long long h[512 * 8];
    for (int mix = 0; mix < 2; mix++)
        for (int warps = 4; warps <= 8; warps += 4) {
            for (int rep = 0; rep < 2; rep++) {            // the first a warm-up
                if (mix)
                    probe<true><<<sms, warps * 32>>>(out, cyc, iters, 0.1f, 0.5f, 0.25f);
                else
                    probe<false><<<sms, warps * 32>>>(out, cyc, iters, 0.1f, 0.5f, 0.25f);
            }
            const cudaError_t e = cudaDeviceSynchronize();
            if (e != cudaSuccess ||
                cudaMemcpy(h, cyc, sms * 8 * sizeof(long long), cudaMemcpyDeviceToHost) != cudaSuccess) {
                fprintf(stderr, "softmax_probe: %s\n", cudaGetErrorString(e));
                return 1;
            }
            double sum = 0;
            for (int b = 0; b < sms; b++)
                for (int w = 0; w < warps; w++)
                    sum += (double)h[b * 8 + w];
            printf("%-11s %d warp(s) a sub-partition: %.1f cycles a tile of 64 a thread\n",
                   mix ? "softmax mix" : "ex2 only", warps / 4, sum / (sms * warps) / iters);
        }
    return 0;
}
