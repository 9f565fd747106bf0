// Timeline of the dense Hopper prefill: runs one shape outside gllmd and records, per warpgroup
// of the first blocks, when each step of each tile happened (SM clock), for hp_trace.py.
//
// Build (sm_90a; the driver's libcuda at run time):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/cuda -o hp_trace \
//        kernels/tools/hp_trace.cu -lcuda
// Run: hp_trace D B H S causal[0|1] out.bin  (f16, [B, S, H, D] tensors, scale 1/sqrt(D))
// Environment, to match gpu_compare.py's runs: HP_LAYOUT=bhsd ([B, H, S, D] tensors, as
// PyTorch's), HP_DATA=normal (standard normal values, not uniform in [-0.5, 0.5)),
// HP_SINGLE=1 (each launch alone on an idle GPU between its own events, as gllmd times a job,
// not 20 back to back), HP_ITERS=n (n timed launches, not 20: a sustained load for the clock).
// HP_RAMP=g adds scores that grow by about g / sqrt(D) a key tile (see below), which sends
// every key tile of the walk's speculative softmax the exact way.
// HP_OUT=file writes O as the last launch left it (raw f16, the run's layout), to compare
// two builds' results (kernels/tools/hp_ab.py runs builds against each other with it).
// HP_GRID=n launches n blocks (at most one per SM and unit; the schedule made for them) instead
// of gllmd's choice (gllm_cuda_hp_grid_even).
// HP_LSE=1 has the kernel write each row's lse too (gllmd's jobs may ask for it; gpu_compare.py's
// timed runs do not).
// HP_L2_PROMO=none|64|128|256 encodes the maps with that L2 promotion (gllmd's: 256).
// HP_CPASYNC=1 times the cp.async producer's kernel instead (gllm_attn_fwd_hopper_f16_*, what
// gllmd launches when the driver refuses a tensor map), never split: no timeline, no clock.
// A probe (results wrong): HP_KV_L2=1 lays K's and V's heads and batches a row apart, so every
// head reads nearly the same rows and they stay in L2 (what missing L2 costs).
// Besides the time it prints the SMs' clock over the last timed launch (each block's clock64
// against globaltimer, the median block) and the tensor cores' use at that clock (4096 dense
// f16/bf16 flop per SM per cycle).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <vector>

#define TRACE_BLOCKS 16
#define TRACE_AGENTS 4
#define TRACE_N 8192
#define TRACE_MAX_GRID 1024
__device__ uint64_t g_trace[TRACE_BLOCKS][TRACE_AGENTS][TRACE_N];
__device__ uint32_t g_count[TRACE_BLOCKS][TRACE_AGENTS];
__device__ uint64_t g_span[TRACE_MAX_GRID][3];   // globaltimer at start, end; SM id
__device__ uint64_t g_clk[TRACE_MAX_GRID][2];    // the SM's clock64 at start, end
__shared__ uint32_t s_trace_n[TRACE_AGENTS];

// An event of the calling warpgroup (its first thread records it): code, aux, SM clock.
__device__ __forceinline__ void hp_trace(int code, int aux)
{
    if (threadIdx.x % 128 != 0 || blockIdx.x >= TRACE_BLOCKS)
        return;
    const unsigned a = threadIdx.x / 128;
    const unsigned n = s_trace_n[a];
    if (n < TRACE_N)
        g_trace[blockIdx.x][a][n] =
            (uint64_t)(uint32_t)clock() | (uint64_t)(code & 0xff) << 32 | (uint64_t)(aux & 0xffffff) << 40;
    s_trace_n[a] = n + 1;
}

#ifndef HP_NO_TRACE                                 // -DHP_NO_TRACE: the same run, untraced
#define GLLM_HP_TRACE 1
#endif
#include "attention_fwd_hopper.cu"

__device__ __forceinline__ uint64_t globaltimer()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

template <bool CAUSAL, int D>
__global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)
    traced(const __grid_constant__ gllm_cuda_hp_params hp)
{
    if (threadIdx.x < TRACE_AGENTS)
        s_trace_n[threadIdx.x] = 0;
    if (threadIdx.x == 0 && blockIdx.x < TRACE_MAX_GRID) {
        uint32_t sm;
        asm volatile("mov.u32 %0, %smid;" : "=r"(sm));
        g_span[blockIdx.x][0] = globaltimer();
        g_span[blockIdx.x][2] = sm;
        g_clk[blockIdx.x][0] = clock64();
    }
#ifdef GLLM_HAVE_WGMMA
    attention_fwd_hopper<__half, CAUSAL, D, true>(hp.a, &hp);
#endif
    if (threadIdx.x == 0 && blockIdx.x < TRACE_MAX_GRID) {
        g_clk[blockIdx.x][1] = clock64();
        g_span[blockIdx.x][1] = globaltimer();
    }
    if (threadIdx.x % 128 == 0 && blockIdx.x < TRACE_BLOCKS)
        g_count[blockIdx.x][threadIdx.x / 128] = s_trace_n[threadIdx.x / 128];
}

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                           \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

// The maps' L2 promotion: HP_L2_PROMO (none, 64, 128 or 256), gllmd's 256 unless named.
static CUtensorMapL2promotion l2_promotion()
{
    const char *v = getenv("HP_L2_PROMO");
    if (!v || !strcmp(v, "256"))
        return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    if (!strcmp(v, "128"))
        return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    if (!strcmp(v, "64"))
        return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    if (!strcmp(v, "none"))
        return CU_TENSOR_MAP_L2_PROMOTION_NONE;
    fprintf(stderr, "HP_L2_PROMO: none, 64, 128 or 256, not %s\n", v);
    exit(2);
}

// [B, S, H, D] as the kernel's 4-D map (D, S, H, B), box_rows rows.
// overlap: HP_KV_L2's layout (above), each head and batch a row after the one before.
static void encode(CUtensorMap *m, void *base, int64_t B, int64_t H, int64_t S, int64_t D,
                   unsigned box_rows, bool bhsd, CUtensorMapL2promotion promo,
                   bool overlap = false)
{
    cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)H, (cuuint64_t)B};
    cuuint64_t st[3] = {(cuuint64_t)((bhsd ? 1 : H) * D * 2), (cuuint64_t)((bhsd ? S : 1) * D * 2),
                        (cuuint64_t)(S * H * D * 2)};
    if (overlap)
        st[1] = st[0], st[2] = 2 * st[0];
    cuuint32_t box[4] = {GLLM_CUDA_HP_BOX_COLS, box_rows, 1, 1}, one[4] = {1, 1, 1, 1};
    CUresult r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, base, dims, st, box,
                                        one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_SWIZZLE_128B,
                                        promo,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
    }
}

template <bool CAUSAL, int D> static void *kernel() { return (void *)traced<CAUSAL, D>; }

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: hp_trace D B H S causal out.bin\n");
        return 2;
    }
    const int D = atoi(argv[1]), B = atoi(argv[2]), H = atoi(argv[3]), S = atoi(argv[4]);
    const bool causal = atoi(argv[5]) != 0;
    if ((D != 64 && D != 128) || B < 1 || H < 1 || S < 1)
        return 2;
    const char *layout = getenv("HP_LAYOUT"), *data = getenv("HP_DATA"), *single = getenv("HP_SINGLE");
    const bool bhsd = layout && !strcmp(layout, "bhsd"), normal = data && !strcmp(data, "normal");
    const bool alone = single && !strcmp(single, "1");
    const size_t n = (size_t)B * S * H * D;
    std::vector<__half> h(n);
    uint32_t x = 12345;
    auto uniform = [&]() {
        x = x * 1664525u + 1013904223u;
        return (((x >> 8) & 0xffff) + 0.5f) / 65536.0f;
    };
    auto fill = [&]() {      // normal: Box-Muller on two uniforms
        for (auto &v : h)
            v = __float2half(normal ? sqrtf(-2.f * logf(uniform())) * cospif(2.f * uniform())
                                    : uniform() - 0.5f);
    };
    void *q, *k, *v, *o;
    CK(cudaMalloc(&q, n * 2));
    CK(cudaMalloc(&k, n * 2));
    CK(cudaMalloc(&v, n * 2));
    CK(cudaMalloc(&o, n * 2));
    // HP_RAMP=g: every query's column 0 is 1 and key j's is j * g / 128, so each key tile's
    // scores pass the last one's by about g / sqrt(D) (past 8 log2 units, the walk's rescale;
    // past 128, exp2 overflows a tile taken against the last maximum).
    const char *ramp_env = getenv("HP_RAMP");
    const float ramp = ramp_env ? (float)atof(ramp_env) : 0.f;
    for (void *dst : {q, k, v}) {               // Q, K and V each their own values
        fill();
        if (ramp != 0.f && dst != v)
            for (size_t i = 0; i < n; i += D) {
                const size_t key = bhsd ? i / D % S : i / ((size_t)H * D) % S;
                h[i] = __float2half(dst == q ? 1.f : (float)key * ramp / 128.f);
            }
        CK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
    }
    gllm_cuda_hp_params hp = {};
    gllm_cuda_attn_params &p = hp.a;
    p.q = q, p.k = k, p.v = v, p.out = o, p.lse = nullptr;
    p.B = B, p.Hq = H, p.Hkv = H, p.Sq = S, p.Skv = S, p.D = D;
    if (const char *lse_env = getenv("HP_LSE"); lse_env && !strcmp(lse_env, "1")) {
        CK(cudaMalloc(&p.lse, (size_t)B * H * S * sizeof(float)));
        p.lse_st[0] = (int64_t)H * S, p.lse_st[1] = S, p.lse_st[2] = 1;
    }
    const int64_t st[4] = {(int64_t)S * H * D, bhsd ? (int64_t)S * D : D, bhsd ? D : (int64_t)H * D, 1};
    for (int i = 0; i < 4; i++)
        p.q_st[i] = p.k_st[i] = p.v_st[i] = p.o_st[i] = st[i];
    p.scale = 1.0f / sqrtf((float)D);
    p.causal = causal;
    const CUtensorMapL2promotion promo = l2_promotion();
    encode((CUtensorMap *)&hp.q_map, q, B, H, S, D, GLLM_CUDA_HP_ROWS(D), bhsd, promo);
    const char *kv_l2 = getenv("HP_KV_L2");
    const bool overlap = kv_l2 && !strcmp(kv_l2, "1");
    encode((CUtensorMap *)&hp.k_map, k, B, H, S, D, GLLM_CUDA_HP_KEYS, bhsd, promo, overlap);
    encode((CUtensorMap *)&hp.v_map, v, B, H, S, D, GLLM_CUDA_HP_KEYS, bhsd, promo, overlap);
    encode((CUtensorMap *)&hp.o_map, o, B, H, S, D, GLLM_CUDA_HP_O_ROWS, bhsd, promo);

    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int keys = (S + GLLM_CUDA_HP_KEYS - 1) / GLLM_CUDA_HP_KEYS;
    const int most = (int)gllm_cuda_hp_grid(S, D, (int64_t)B * H, sms);
    int grid = (int)gllm_cuda_hp_grid_even(S, D, (int64_t)B * H, causal, sms, keys);
    if (const char *grid_env = getenv("HP_GRID"); grid_env && atoi(grid_env) > 0)
        grid = std::min(most, atoi(grid_env));

    // D = 128 not causal: the last rounds split by keys as gllmd launches it (HP_SPLIT=0: whole).
    const char *split_env = getenv("HP_SPLIT");
    const gllm_cuda_hp_sched sc =
        gllm_cuda_hp_schedule(S, GLLM_CUDA_HP_ROWS(D), B * H, causal, grid, D == 128 ? keys : 0);
    const char *cpasync_env = getenv("HP_CPASYNC");
    const bool cpasync = cpasync_env && !strcmp(cpasync_env, "1");
    const bool split =
        !cpasync && !(split_env && !strcmp(split_env, "0")) && sc.whole_units < sc.units;
    if (split) {
        char *ws;
        CK(cudaMalloc(&ws, GLLM_CUDA_HP_SPLIT_BYTES(128, grid)));
        CK(cudaMemset(ws, 0, GLLM_CUDA_HP_SPLIT_BYTES(128, grid)));
        hp.split = gllm_cuda_hp_split_of(&sc, keys);
        hp.split_counts = (uint32_t *)ws;
        hp.split_parts = (float *)(ws + GLLM_CUDA_HP_SPLIT_PARTS_AT(128, grid));
    }
    const int smem = GLLM_CUDA_HP_SMEM(D), threads = GLLM_CUDA_HP_THREADS(D);
    void *fn = D == 128 ? (causal ? kernel<true, 128>() : kernel<false, 128>())
                        : (causal ? kernel<true, 64>() : kernel<false, 64>());
    if (cpasync)           // the included file's cp.async entries, which take the plain params
        fn = D == 128 ? (causal ? (void *)gllm_attn_fwd_hopper_f16_d128_causal
                                : (void *)gllm_attn_fwd_hopper_f16_d128)
                      : (causal ? (void *)gllm_attn_fwd_hopper_f16_d64_causal
                                : (void *)gllm_attn_fwd_hopper_f16_d64);
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    void *args[] = {cpasync ? (void *)&hp.a : (void *)&hp};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const char *iters_env = getenv("HP_ITERS");
    const int iters = iters_env && atoi(iters_env) > 0 ? atoi(iters_env) : 20;
    for (int i = 0; i < 3; i++)
        CK(cudaLaunchKernel(fn, grid, threads, args, smem, 0));
    float ms = 0;
    if (alone) {
        for (int i = 0; i < iters; i++) {
            float one;
            CK(cudaDeviceSynchronize());
            CK(cudaEventRecord(e0));
            CK(cudaLaunchKernel(fn, grid, threads, args, smem, 0));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&one, e0, e1));
            ms += one;
        }
    } else {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < iters; i++)
            CK(cudaLaunchKernel(fn, grid, threads, args, smem, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
    }
    const double flop = 4.0 * B * H * (double)S * S * D * (causal ? 0.5 : 1.0);
    const double us = ms * 1000.0 / iters;
    // The last timed launch's blocks: cycles over nanoseconds, the median block.
    static uint64_t clk[TRACE_MAX_GRID][2], sp[TRACE_MAX_GRID][3];
    CK(cudaMemcpyFromSymbol(clk, g_clk, sizeof clk));
    CK(cudaMemcpyFromSymbol(sp, g_span, sizeof sp));
    std::vector<double> mhz;
    for (int b = 0; b < grid && b < TRACE_MAX_GRID; b++)
        if (sp[b][1] > sp[b][0])
            mhz.push_back((double)(clk[b][1] - clk[b][0]) * 1e3 / (double)(sp[b][1] - sp[b][0]));
    std::sort(mhz.begin(), mhz.end());
    const double clock_mhz = mhz.empty() ? 0 : mhz[mhz.size() / 2];
    const double tensor = clock_mhz > 0 ? flop / (us * 1e-6) / (clock_mhz * 1e6 * sms * 4096.0) : 0;
    printf("D%d B%d H%d S%d causal %d%s: grid %d, %.1f us, %.1f TFLOP/s, %.0f MHz, tensor %.1f%%\n",
           D, B, H, S, causal, split ? " split" : cpasync ? " cp.async" : "", grid, us,
           flop / us * 1e-6, clock_mhz,
           tensor * 100);

    if (const char *out_env = getenv("HP_OUT")) {
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), o, n * 2, cudaMemcpyDeviceToHost));
        FILE *fo = fopen(out_env, "wb");
        const bool wrote = fo && fwrite(h.data(), 2, n, fo) == n;
        if ((fo && fclose(fo) != 0) || !wrote) {
            fprintf(stderr, "%s: cannot write O\n", out_env);
            return 1;
        }
    }

    // The recorded launch: the last one above left its trace; one more, alone, for a clean one.
    CK(cudaLaunchKernel(fn, grid, threads, args, smem, 0));
    CK(cudaDeviceSynchronize());
    static uint64_t tr[TRACE_BLOCKS][TRACE_AGENTS][TRACE_N];
    static uint32_t cnt[TRACE_BLOCKS][TRACE_AGENTS];
    static uint64_t span[TRACE_MAX_GRID][3];
    CK(cudaMemcpyFromSymbol(tr, g_trace, sizeof tr));
    CK(cudaMemcpyFromSymbol(cnt, g_count, sizeof cnt));
    CK(cudaMemcpyFromSymbol(span, g_span, sizeof span));
    FILE *f = fopen(argv[6], "wb");
    if (!f)
        return 1;
    const int32_t hdr[8] = {D, B, H, S, causal, grid, TRACE_BLOCKS, TRACE_AGENTS};
    fwrite(hdr, sizeof hdr, 1, f);
    const float perf[2] = {(float)us, (float)(flop / us * 1e-6)};
    fwrite(perf, sizeof perf, 1, f);
    fwrite(cnt, sizeof cnt, 1, f);
    for (int b = 0; b < TRACE_BLOCKS; b++)
        for (int a = 0; a < TRACE_AGENTS; a++)
            fwrite(tr[b][a], 8, cnt[b][a] < TRACE_N ? cnt[b][a] : TRACE_N, f);
    fwrite(span, sizeof(uint64_t) * 3, grid < TRACE_MAX_GRID ? grid : TRACE_MAX_GRID, f);
    fclose(f);
    return 0;
}
