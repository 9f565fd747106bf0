/* The few things a kernel needs from its compiler, mapped once: thread and block indices,
 * shared memory, barriers, wave shuffles, exp2/log2 and 16-bit float conversions. Built by
 * clang as HIP without any GPU headers or device libraries (-nogpuinc -nogpulib), so only
 * __builtin_amdgcn_* and generic builtins are used there, and by nvcc with CUDA intrinsics.
 * PK_WAVE, the wave size, is a compile-time parameter: 64 on CDNA, 32 on RDNA and NVIDIA. */
#ifndef GLLM_PORTABLE_H
#define GLLM_PORTABLE_H

#ifndef PK_WAVE
#error "PK_WAVE (the wave size: 32 or 64) must be defined"
#endif

#include "pk_params.h"

#if defined(__HIP__) && defined(__AMDGPU__)
#define PK_AMD 1
#elif defined(__CUDACC__)
#define PK_NV 1
#include <cuda_fp16.h>
#elif defined(PK_EMULATE)
#define PK_EMU 1
#else
#error "kernels/portable builds with clang -x hip (AMDGPU), nvcc, or on the host with PK_EMULATE"
#endif

#if PK_AMD
/* No HIP headers: the language keywords are clang's attributes. */
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != PK_WAVE
#error "PK_WAVE differs from the target's wave size"
#endif
#define PK_KERNEL(threads) \
    extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, threads))) void
#define PK_INLINE __device__ static inline __attribute__((always_inline))

PK_INLINE unsigned pk_thread(void) { return __builtin_amdgcn_workitem_id_x(); }
PK_INLINE unsigned pk_block_x(void) { return __builtin_amdgcn_workgroup_id_x(); }
PK_INLINE unsigned pk_block_y(void) { return __builtin_amdgcn_workgroup_id_y(); }

/* __syncthreads: make this workgroup's shared and global writes visible, then meet. */
PK_INLINE void pk_barrier(void)
{
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

/* Lane (lane ^ mask)'s value; ds_bpermute addresses lanes in bytes. */
PK_INLINE float pk_shfl_xor(float v, int mask)
{
    int lane = (int)(pk_thread() % PK_WAVE);
    int r = __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __builtin_bit_cast(int, v));
    return __builtin_bit_cast(float, r);
}

PK_INLINE float pk_exp2(float x) { return __builtin_exp2f(x); }
PK_INLINE float pk_log2(float x) { return __builtin_log2f(x); }
PK_INLINE float pk_bits_f32(unsigned u) { return __builtin_bit_cast(float, u); }
PK_INLINE unsigned pk_f32_bits(float f) { return __builtin_bit_cast(unsigned, f); }
PK_INLINE float pk_f16_load(const unsigned short *p) { return (float)*(const _Float16 *)p; }
PK_INLINE void pk_f16_store(unsigned short *p, float x) { *(_Float16 *)p = (_Float16)x; }
PK_INLINE void pk_flag(int *p) { __atomic_store_n(p, 1, __ATOMIC_RELAXED); }
#endif

#if PK_NV
#define PK_KERNEL(threads) extern "C" __global__ void __launch_bounds__(threads)
#define PK_INLINE __device__ static __forceinline__

PK_INLINE unsigned pk_thread(void) { return threadIdx.x; }
PK_INLINE unsigned pk_block_x(void) { return blockIdx.x; }
PK_INLINE unsigned pk_block_y(void) { return blockIdx.y; }
PK_INLINE void pk_barrier(void) { __syncthreads(); }
PK_INLINE float pk_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
PK_INLINE float pk_exp2(float x) { return exp2f(x); }
PK_INLINE float pk_log2(float x) { return log2f(x); }
PK_INLINE float pk_bits_f32(unsigned u) { return __uint_as_float(u); }
PK_INLINE unsigned pk_f32_bits(float f) { return __float_as_uint(f); }
PK_INLINE float pk_f16_load(const unsigned short *p) { return __half2float(*(const __half *)p); }
PK_INLINE void pk_f16_store(unsigned short *p, float x) { *(__half *)p = __float2half_rn(x); }
PK_INLINE void pk_flag(int *p) { atomicExch(p, 1); }
#endif

#if PK_EMU
/* The host, for tests (tests/test_pk_emulated.cpp): a workgroup's threads are host threads
 * (blocks run one after another, so function-scope statics serve as shared memory), its
 * barrier a pthread barrier, a wave's shuffle an exchange through memory between two of
 * the wave's own barriers. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#define __global__
#define __device__
#define __shared__ static
#define PK_KERNEL(threads) extern "C" void
#define PK_INLINE static inline
struct pk_emu_block {
    unsigned x, y;
    pthread_barrier_t all;
    pthread_barrier_t wave[PK_WAVES];
    float xchg[PK_WAVES * PK_WAVE];
};
extern struct pk_emu_block *pk_emu;
extern thread_local unsigned pk_emu_thread;

PK_INLINE unsigned pk_thread(void) { return pk_emu_thread; }
PK_INLINE unsigned pk_block_x(void) { return pk_emu->x; }
PK_INLINE unsigned pk_block_y(void) { return pk_emu->y; }
PK_INLINE void pk_barrier(void) { pthread_barrier_wait(&pk_emu->all); }
PK_INLINE float pk_shfl_xor(float v, int mask)
{
    const unsigned t = pk_thread(), w = t / PK_WAVE;
    pk_emu->xchg[t] = v;
    pthread_barrier_wait(&pk_emu->wave[w]);
    const float r = pk_emu->xchg[w * PK_WAVE + ((t % PK_WAVE) ^ (unsigned)mask)];
    pthread_barrier_wait(&pk_emu->wave[w]);
    return r;
}
PK_INLINE float pk_exp2(float x) { return exp2f(x); }
PK_INLINE float pk_log2(float x) { return log2f(x); }
PK_INLINE float pk_bits_f32(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
PK_INLINE unsigned pk_f32_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
/* IEEE half by hand: host compilers differ in _Float16 support. */
PK_INLINE float pk_f16_load(const unsigned short *p)
{
    const unsigned h = *p, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float mag = e == 0 ? ldexpf((float)m, -24)
                    : e == 31 ? (m ? __builtin_nanf("") : __builtin_inff())
                              : ldexpf((float)(m | 0x400), (int)e - 25);
    return h & 0x8000 ? -mag : mag;
}
PK_INLINE void pk_f16_store(unsigned short *p, float x)
{
    unsigned a = pk_f32_bits(x) & 0x7fffffffu, h;
    if (a > 0x7f800000u)
        h = 0x7e00;                                  /* NaN */
    else if (a >= 0x477ff000u)
        h = 0x7c00;                                  /* rounds past 65504: infinity */
    else if (a < 0x38800000u)
        h = (unsigned)nearbyintf(fabsf(x) * 16777216.0f);   /* subnormal: units of 2^-24 */
    else
        h = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;   /* nearest even */
    *p = (unsigned short)(h | ((pk_f32_bits(x) >> 16) & 0x8000u));
}
PK_INLINE void pk_flag(int *p) { __atomic_store_n(p, 1, __ATOMIC_RELAXED); }
#endif

#define PK_BLOCK (PK_WAVES * PK_WAVE)
#define PK_PER_LANE (PK_MAX_D / PK_WAVE)   /* head-dim elements a lane holds */

PK_INLINE float pk_neg_inf(void) { return -__builtin_inff(); }

/* bfloat16 is the top half of a float; stores round to nearest even and keep NaNs quiet. */
PK_INLINE float pk_bf16_load(const unsigned short *p) { return pk_bits_f32((unsigned)*p << 16); }
PK_INLINE void pk_bf16_store(unsigned short *p, float x)
{
    unsigned u = pk_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        *p = (unsigned short)((u >> 16) | 0x40);
    else
        *p = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Element access by storage type: T is float, or one of the tags below for 16-bit formats. */
struct pk_f16 { unsigned short bits; };
struct pk_bf16 { unsigned short bits; };

PK_INLINE float pk_load(const float *p) { return *p; }
PK_INLINE float pk_load(const pk_f16 *p) { return pk_f16_load(&p->bits); }
PK_INLINE float pk_load(const pk_bf16 *p) { return pk_bf16_load(&p->bits); }
PK_INLINE void pk_store(float *p, float x) { *p = x; }
PK_INLINE void pk_store(pk_f16 *p, float x) { pk_f16_store(&p->bits, x); }
PK_INLINE void pk_store(pk_bf16 *p, float x) { pk_bf16_store(&p->bits, x); }

/* tanh from exp2 alone (AMD builds have no device libraries, so no tanhf): (1 - e^-2a) /
 * (1 + e^-2a) for a = |x|, and near 0, where 1 - e^-2a would lose its digits, the Taylor
 * series to x^7 (below 2^-3 its next term is under 1e-9 of the value). */
PK_INLINE float pk_tanh(float x)
{
    const float a = x < 0.0f ? -x : x;
    float t;
    if (a < 0.125f) {
        const float a2 = a * a;
        t = a * (1.0f + a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f))));
    } else {
        const float e = pk_exp2(-2.8853900817779268f * a);   /* e^-2a: 2 log2(e) a */
        t = (1.0f - e) / (1.0f + e);
    }
    return x < 0.0f ? -t : t;
}

/* Sum over the wave, every lane getting the total (xor butterfly). */
PK_INLINE float pk_wave_sum(float v)
{
    for (int m = PK_WAVE / 2; m > 0; m >>= 1)
        v += pk_shfl_xor(v, m);
    return v;
}

#endif
