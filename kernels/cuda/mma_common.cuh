// Tensor-core building blocks shared by gllmd's CUDA kernels: element types, mma.sync,
// ldmatrix, cp.async and the swizzled shared-memory tile layout.
#ifndef GLLM_MMA_COMMON_CUH
#define GLLM_MMA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <stdint.h>

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;       // 1 / LOG2E: lse as a product, not a division

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

// ex2.approx: 2 ulp, one MUFU op; exp2f without fast-math is a multi-instruction sequence.
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Tiles are [rows][D] with 16-byte chunks swizzled (chunk ^ row % 8), so the 8 rows one
// ldmatrix reads fall in 8 different bank groups. A row of D / 8 chunks that is not a
// multiple of 8 (D 80, 96) swizzles its last, partial group of 2 or 4 chunks within itself
// (chunk ^ row % 2 or % 4), so no chunk leaves its row; its ldmatrix reads conflict at most
// 2-way there.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk)
{
    constexpr int CH = D / 8, FULL = CH & ~7, TAIL = CH - FULL;
    static_assert(D % 16 == 0 && (TAIL & (TAIL - 1)) == 0, "a tail group of 0, 2 or 4 chunks");
    if constexpr (TAIL == 0)
        return row * D + ((chunk ^ (row & 7)) << 3);
    else
        return row * D + ((chunk < FULL ? chunk ^ (row & 7) : chunk ^ (row & (TAIL - 1))) << 3);
}

} // namespace

#endif
