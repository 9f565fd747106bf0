// Prefill attention kernels for gllmd's CUDA backend: FlashAttention-2-style tensor-core tiles.
//
// Compiled ahead of time into one fatbin (kernels/prebuilt/) and loaded through the driver
// API; entry points are extern "C" with a fixed parameter struct so the daemon needs no
// CUDA headers. Layout and semantics match daemon/backend.h's struct attn_args.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "attention_params.h"

namespace {

constexpr int BLOCK_N = GLLM_CUDA_TC_KEYS; // keys per tile
constexpr float LOG2E = 1.4426950408889634f;

// ---- element types ------------------------------------------------------------------------

template <typename T> struct Elem;
template <> struct Elem<__half> {
    __device__ static uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    __device__ static float to_float(__half x) { return __half2float(x); }
    __device__ static __half from_float(float x) { return __float2half_rn(x); }
};
template <> struct Elem<__nv_bfloat16> {
    __device__ static uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    __device__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};
template <> struct Elem<float> {
    __device__ static float to_float(float x) { return x; }
    __device__ static float from_float(float x) { return x; }
};

// D += A * B for one m16n8k16 tile, fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma16816(float *d, const uint32_t *a, const uint32_t *b);
template <>
__device__ __forceinline__ void mma16816<__half>(float *d, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float *d, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// 16-byte global -> shared copy; src_bytes 0 fills the destination with zeros (tails).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Tiles are [rows][D] with 16-byte chunks swizzled (chunk ^ row % 8), so the 8 rows one
// ldmatrix reads fall in 8 different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// Copies rows [row0, row0 + ROWS) of one head into a swizzled tile; rows >= nrows are zeros.
template <int D, int ROWS, int THREADS, typename T>
__device__ __forceinline__ void load_tile(T *tile, const T *base, int64_t row_stride, int row0,
                                          int nrows)
{
    constexpr int CHUNKS = D / 8;
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
        int r = i / CHUNKS, c = i % CHUNKS;
        int row = row0 + r;
        bool ok = row < nrows;
        const T *src = base + (int64_t)(ok ? row : 0) * row_stride + c * 8;
        cp_async16(smem_addr(tile + swz<D>(r, c)), src, ok ? 16 : 0);
    }
}

// One block: WARPS * 16 query rows of one (batch, head); each warp owns 16 rows and
// keeps its Q fragments, scores and output accumulators in registers.
template <typename T, int D, int WARPS, bool CAUSAL>
__device__ __forceinline__ void attention_fwd_tc(const gllm_cuda_attn_params &p)
{
    constexpr int BLOCK_M = WARPS * 16;
    constexpr int THREADS = WARPS * 32;
    constexpr int DK = D / 16;          // k-steps over the head dim
    constexpr int DN = D / 8;           // n-tiles over the head dim (P V)
    constexpr int NN = BLOCK_N / 8;     // n-tiles over keys (Q K^T)
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BLOCK_M * D;
    T *sV = sK + BLOCK_N * D;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int num_m = (int)((p.Sq + BLOCK_M - 1) / BLOCK_M);
    const int m_block = num_m - 1 - (int)blockIdx.x;   // heaviest (causal) blocks first
    const int bh = blockIdx.y;
    const int b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    const int m0 = m_block * BLOCK_M;
    const int Sq = (int)p.Sq, Skv = (int)p.Skv;
    const int shift = Skv - Sq;

    const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1];
    const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
    const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];

    int n_end = Skv;
    if (CAUSAL)
        n_end = min(Skv, m0 + BLOCK_M + shift);
    const int n_tiles = n_end > 0 ? (n_end + BLOCK_N - 1) / BLOCK_N : 0;

    load_tile<D, BLOCK_M, THREADS>(sQ, Q, p.q_st[2], m0, Sq);
    if (n_tiles > 0)
        load_tile<D, BLOCK_N, THREADS>(sK, K, p.k_st[2], 0, Skv);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    // Q fragments of this warp's 16 rows, for every k-step of the head dim.
    uint32_t qf[DK][4];
    {
        const int m = lane >> 3, r = lane & 7;
        const int row = warp * 16 + r + 8 * (m & 1);
#pragma unroll
        for (int kk = 0; kk < DK; kk++)
            ldmatrix_x4(qf[kk], smem_addr(sQ + swz<D>(row, kk * 2 + (m >> 1))));
    }

    float o[DN][4];
#pragma unroll
    for (int i = 0; i < DN; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    const float qk_scale = p.scale * LOG2E;
    const int row_lo = m0 + warp * 16 + g;   // this thread's two rows: row_lo, row_lo + 8

    for (int j = 0; j < n_tiles; j++) {
        const int n0 = j * BLOCK_N;
        // V_j streams in while Q K_j^T runs.
        load_tile<D, BLOCK_N, THREADS>(sV, V, p.v_st[2], n0, Skv);
        cp_async_commit();

        float s[NN][4];
#pragma unroll
        for (int i = 0; i < NN; i++)
            s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
#pragma unroll
            for (int nn = 0; nn < NN; nn += 2) {
                const int m = lane >> 3, r = lane & 7;
                const int key = nn * 8 + r + 8 * (m >> 1);
                uint32_t kf[4];
                ldmatrix_x4(kf, smem_addr(sK + swz<D>(key, kk * 2 + (m & 1))));
                mma16816<T>(s[nn], qf[kk], kf);
                mma16816<T>(s[nn + 1], qf[kk], kf + 2);
            }
        }

        // Mask the tail tile and, when causal, the tiles crossing the diagonal.
        const bool need_mask = n0 + BLOCK_N > Skv || (CAUSAL && n0 + BLOCK_N - 1 > m0 + shift);
        if (need_mask) {
#pragma unroll
            for (int nn = 0; nn < NN; nn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = n0 + nn * 8 + 2 * t + (e & 1);
                    const int row = row_lo + 8 * (e >> 1);
                    if (key >= Skv || (CAUSAL && key > row + shift))
                        s[nn][e] = -INFINITY;
                }
        }

        // Online softmax, base 2; each row is spread over the 4 threads of a quad.
        float scale_o[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float mx = row_max[hr];
#pragma unroll
            for (int nn = 0; nn < NN; nn++)
                mx = fmaxf(mx, fmaxf(s[nn][2 * hr], s[nn][2 * hr + 1]) * qk_scale);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            // A row that has seen only -inf so far keeps a finite reference point.
            const float ref = mx == -INFINITY ? 0.f : mx;
            scale_o[hr] = exp2f(row_max[hr] - ref);
            row_max[hr] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nn = 0; nn < NN; nn++) {
                s[nn][2 * hr] = exp2f(s[nn][2 * hr] * qk_scale - ref);
                s[nn][2 * hr + 1] = exp2f(s[nn][2 * hr + 1] * qk_scale - ref);
                sum += s[nn][2 * hr] + s[nn][2 * hr + 1];
            }
            row_sum[hr] = row_sum[hr] * scale_o[hr] + sum;   // quad-partial; reduced at the end
        }
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            o[dn][0] *= scale_o[0], o[dn][1] *= scale_o[0];
            o[dn][2] *= scale_o[1], o[dn][3] *= scale_o[1];
        }

        cp_async_wait_all();
        __syncthreads();                  // V_j landed; everyone is done reading K_j
        if (j + 1 < n_tiles) {
            load_tile<D, BLOCK_N, THREADS>(sK, K, p.k_st[2], n0 + BLOCK_N, Skv);
            cp_async_commit();
        }

        // O += P V_j: P comes straight from the score registers.
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
            uint32_t pf[4];
            pf[0] = Elem<T>::pack(s[2 * kk][0], s[2 * kk][1]);
            pf[1] = Elem<T>::pack(s[2 * kk][2], s[2 * kk][3]);
            pf[2] = Elem<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pf[3] = Elem<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dn = 0; dn < DN; dn += 2) {
                const int m = lane >> 3, r = lane & 7;
                const int key = kk * 16 + r + 8 * (m & 1);
                uint32_t vf[4];
                ldmatrix_x4_trans(vf, smem_addr(sV + swz<D>(key, dn + (m >> 1))));
                mma16816<T>(o[dn], pf, vf);
                mma16816<T>(o[dn + 1], pf, vf + 2);
            }
        }
        cp_async_wait_all();
        __syncthreads();                  // K_{j+1} landed; everyone is done reading V_j
    }

    // Normalise and store. Rows that saw no key are zeros with lse = -inf.
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float sum = row_sum[hr];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        const int row = row_lo + 8 * hr;
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        if (row < Sq) {
            T *orow = O + (int64_t)row * p.o_st[2];
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {
                uint32_t v = Elem<T>::pack(o[dn][2 * hr] * inv, o[dn][2 * hr + 1] * inv);
                *reinterpret_cast<uint32_t *>(orow + dn * 8 + 2 * t) = v;
            }
            if (p.lse && t == 0)
                p.lse[b * p.lse_st[0] + h * p.lse_st[1] + (int64_t)row * p.lse_st[2]] =
                    sum > 0.f ? (row_max[hr] + log2f(sum)) / LOG2E : -INFINITY;
        }
    }
}

// Any dtype, any head dim up to 256, any strides: one warp per query row. The fallback
// for f32 and for layouts the tensor-core kernel cannot take.
template <typename T>
__device__ __forceinline__ void attention_fwd_generic(const gllm_cuda_attn_params &p)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * GLLM_CUDA_GENERIC_ROWS + warp;
    const int bh = blockIdx.y;
    const int b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    if (row >= p.Sq)
        return;
    const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1] + row * p.q_st[2];
    const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
    const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
    constexpr int PER_LANE = 8;   // D <= 256
    float q[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        q[i] = d < p.D ? Elem<T>::to_float(Q[d * p.q_st[3]]) * p.scale * LOG2E : 0.f;
        acc[i] = 0.f;
    }
    int64_t n_end = p.Skv;
    if (p.causal)
        n_end = min(p.Skv, row + p.Skv - p.Sq + 1);
    float mx = -INFINITY, sum = 0.f;
    for (int64_t j = 0; j < n_end; j++) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < p.D)
                dot += q[i] * Elem<T>::to_float(K[j * p.k_st[2] + d * p.k_st[3]]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(0xffffffff, dot, off);
        const float nmx = fmaxf(mx, dot);
        const float corr = exp2f(mx - nmx), pj = exp2f(dot - nmx);
        sum = sum * corr + pj;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            acc[i] = acc[i] * corr + (d < p.D ? pj * Elem<T>::to_float(V[j * p.v_st[2] + d * p.v_st[3]]) : 0.f);
        }
        mx = nmx;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1] + row * p.o_st[2];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < p.D)
            O[d * p.o_st[3]] = Elem<T>::from_float(acc[i] * inv);
    }
    if (p.lse && lane == 0)
        p.lse[b * p.lse_st[0] + h * p.lse_st[1] + row * p.lse_st[2]] =
            sum > 0.f ? (mx + log2f(sum)) / LOG2E : -INFINITY;
}

} // namespace

// Entry points, looked up by name with cuModuleGetFunction (attention_params.h lists them).
#define TC_ENTRY(T, tname, D, CAUSAL, suffix)                                                  \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_TC_WARPS * 32)                      \
        gllm_attn_fwd_##tname##_d##D##suffix(const gllm_cuda_attn_params p)                    \
    {                                                                                          \
        attention_fwd_tc<T, D, GLLM_CUDA_TC_WARPS, CAUSAL>(p);                                 \
    }
#define TC_ENTRIES(T, tname, D) TC_ENTRY(T, tname, D, false, ) TC_ENTRY(T, tname, D, true, _causal)
TC_ENTRIES(__half, f16, 64)
TC_ENTRIES(__half, f16, 128)
TC_ENTRIES(__nv_bfloat16, bf16, 64)
TC_ENTRIES(__nv_bfloat16, bf16, 128)

#define GENERIC_ENTRY(T, tname)                                                                \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_GENERIC_ROWS * 32)                  \
        gllm_attn_generic_##tname(const gllm_cuda_attn_params p)                               \
    {                                                                                          \
        attention_fwd_generic<T>(p);                                                           \
    }
GENERIC_ENTRY(float, f32)
GENERIC_ENTRY(__half, f16)
GENERIC_ENTRY(__nv_bfloat16, bf16)
