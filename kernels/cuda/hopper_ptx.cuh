// PTX wrappers of gllmd's Hopper kernels (sm_90a): the swizzled tile layout, wgmma and its
// descriptors, setmaxnreg, proxy fences, named barriers, mbarriers, TMA and bulk stores.
#ifndef GLLM_HOPPER_PTX_CUH
#define GLLM_HOPPER_PTX_CUH

#include "mma_common.cuh"

namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GLLM_HAVE_WGMMA 1
#endif

template <typename T> struct Tag {};

#ifdef GLLM_HAVE_WGMMA
// A [ROWS][D] tile as wgmma's 128-byte swizzle wants it: column blocks of 64 elements
// (ROWS * 128 bytes each), rows of 128 bytes, the 16-byte unit u of row r stored at
// u ^ (r % 8); 8-row groups (1024 bytes) are the swizzle's atoms.
template <int ROWS>
__device__ __forceinline__ uint32_t hp_offset(int row, int col)
{
    return (uint32_t)((col >> 6) * ROWS * 128 + row * 128 + ((((col & 63) >> 3) ^ (row & 7)) << 4) +
                      (col & 7) * 2);
}

// Shared-memory matrix descriptors (PTX ISA, "matrix descriptor"): start address, leading
// and stride byte offsets (all >> 4), 128-byte swizzle (mode 1 in bits 62-63).
// K-major (K tile as B of Q K^T: its rows are the N dimension, the head dim is K and
// contiguous): 8-row groups 1024 bytes apart; the leading offset is unused.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t saddr)
{
    return (uint64_t)((saddr >> 4) & 0x3FFF) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}
// MN-major (V tile as B of P V: keys are the K dimension, the head dim is N and
// contiguous): column blocks of 64 (the N atoms) 16 KiB apart (unused at D = 64), 8-key
// groups 1024 apart.
// BLOCK: the bytes from one column block to the next (a tile's keys times 128).
template <uint32_t BLOCK = 16384>
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t saddr)
{
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)(BLOCK >> 4) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

// The descriptor of the tile `bytes` past the one d describes. The start field is a shared
// address >> 4, and shared addresses lie below 2^18, so the sum never carries out of its 14
// bits: one add, where desc_*_major(addr + bytes) per k-step was about ten instructions
// (shift, masks, moves to uniform registers) before each wgmma: +8 to +11% on every shape.
__device__ __forceinline__ uint64_t desc_add(uint64_t d, uint32_t bytes) { return d + (bytes >> 4); }
// The shared address a descriptor starts at.
__device__ __forceinline__ uint32_t desc_saddr(uint64_t d) { return (uint32_t)(d & 0x3FFF) << 4; }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Wait until at most N committed groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// wgmma reads and writes its accumulators after the instruction has issued, which the
// compiler cannot see: pinning every register with an empty asm after the wait (and
// before the issue) keeps ordinary code on them in order with the wgmma.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}
// The same for P, wgmma's A operand from registers: it is read after the instruction has
// issued too, so P stays untouched until the wait that follows its wgmma.
template <int R>
__device__ __forceinline__ void pin(uint32_t (&r)[R][4])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            asm volatile("" : "+r"(r[i][k])::"memory");
}
// Give registers back to the block's pool (producer) or take them from it (consumers; waits
// until the pool has them). Every warp of the warpgroup executes the same one.
template <int N> __device__ __forceinline__ void regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// cp.async writes through the generic proxy, wgmma reads through the async one.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Named barriers of the ping-pong schedule (ids PP_BAR + consumer warpgroup; 0 is
// __syncthreads'): a warpgroup waits on its own with bar.sync, its partner arrives on it with
// bar.arrive, 128 threads each, so a phase completes at 256.
constexpr int PP_BAR = 1;
constexpr int PP_THREADS = 256;
// The ids are immediates: with an id in a register ptxas reserves all 16 barriers.
template <int ID> __device__ __forceinline__ void named_sync()
{
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(PP_THREADS) : "memory");
}
template <int ID> __device__ __forceinline__ void named_arrive()
{
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(PP_THREADS) : "memory");
}

// mbarriers (shared memory): init by one thread; arrive; wait for a phase by its parity.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
                 : "memory");
}
// The elected producer thread's arrival that also announces the bytes TMA will complete on
// the barrier for this phase (the phase ends when both the arrival and the bytes are in).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 ::"r"(bar), "r"(bytes) : "memory");
}
// Bytes TMA will complete on the barrier in its current phase, without an arrival: a producer
// that learns its copies one at a time announces each before issuing it and arrives once at
// the end, so the phase cannot complete between two of them.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// One TMA box of a 4-D tensor map (coordinates innermost first: column, row, head, batch) into
// shared memory at dst, its bytes counted on bar. Rows outside the tensor arrive as zeros and
// count all the same. map: the generic address of a __grid_constant__ parameter.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void *map, uint32_t bar, int c0,
                                            int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2),
                   "r"(c3), "r"(bar)
                 : "memory");
}
// The same box fetched into L2 only (no barrier, no shared memory): a hint that the copy
// which follows later will find it there.
__device__ __forceinline__ void tma_prefetch_4d(const void *map, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity)
{
    uint32_t done;
    do
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    while (!done);
}

// Two barriers' phases asked at once, so that the two try_waits' latencies overlap; one not
// yet complete is then waited for alone. In the key loop (K of tile j, V of tile j - 1) this
// was 0.5-1.4% faster than two waits in turn: each try_wait takes its round trip even
// when the phase is long complete, and an ncu profile had about 45 cycles a key tile on each.
__device__ __forceinline__ void mbar_wait2(uint32_t a, int pa, uint32_t b, int pb)
{
    uint32_t da, db;
    asm volatile("{\n.reg .pred p, q;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%2], %3;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 q, [%4], %5;\n"
                 "selp.u32 %0, 1, 0, p;\nselp.u32 %1, 1, 0, q;\n}\n"
                 : "=r"(da), "=r"(db) : "r"(a), "r"(pa), "r"(b), "r"(pb) : "memory");
    if (!da)
        mbar_wait(a, pa);
    if (!db)
        mbar_wait(b, pb);
}

// O's TMA store: a consumer warpgroup's tile, written to shared memory by stmatrix in the
// 128-byte swizzle, goes out as boxes of a 4-D tensor map (coordinates innermost first), in a
// bulk group of the issuing thread; wait_read: that thread's groups have read their shared
// memory (the tile may be written again); wait_all: and written it out.
__device__ __forceinline__ void tma_store_4d(const void *map, uint32_t src, int c0, int c1, int c2,
                                             int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(src), "r"(c0), "r"(c1), "r"(c2),
                   "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all()
{
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Four 8x8 matrices of 16-bit elements from the mma accumulator layout (register i: matrix
// i's row lane / 4, columns 2 (lane % 4) and + 1) to shared memory, lane l giving the address
// of row l % 8 of matrix l / 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
// The two consumer warpgroups of the dense D = 128 kernel at the switch between its two walks
// (the whole units, then the split ones' parts), 256 threads: id 3, between the ping-pong pair and
// O_BAR's. Each walk takes its turns from 0. Were warpgroup 0's first turn of the second walk
// not to wait for its partner, it could end that turn, arriving on PP_BAR + 1, before
// warpgroup 1 had synced there for its final turn of the first walk; two arrivals of the same
// warps would then complete one phase of PP_BAR + 1, and the two warpgroups wait for each other
// for ever (a kernel whose softmax was slowed hung so once). PingPong's set-up now has that
// first turn wait for warpgroup 1's arrival, which comes after its final turn of the first walk,
// so this barrier is not the only thing that orders them; it stays, once a block, as the walk
// race test (gpu-check.sh) checks it.
constexpr int WALK_BAR = 3;
__device__ __forceinline__ void walk_sync()
{
    asm volatile("bar.sync %0, %1;\n" ::"n"(WALK_BAR), "n"(PP_THREADS) : "memory");
}
// A consumer warpgroup's own barrier (its 128 threads), ids O_BAR + warpgroup: after the
// ping-pong pair (1, 2) and WALK_BAR, immediates as named_sync's.
constexpr int O_BAR = 4;
__device__ __forceinline__ void wg_sync(int wg)
{
    if (wg == 0)
        asm volatile("bar.sync %0, 128;\n" ::"n"(O_BAR) : "memory");
    else if (wg == 1)
        asm volatile("bar.sync %0, 128;\n" ::"n"(O_BAR + 1) : "memory");
    else
        asm volatile("bar.sync %0, 128;\n" ::"n"(O_BAR + 2) : "memory");
}

// The K/V ring's barriers: four arrays of STAGES mbarriers from bar0, full K, full V,
// empty K, empty V; kv_bar(full0, s, v) is stage s's full barrier for K (v = 0) or V (v = 1),
// kv_bar(empty0, s, v) its empty one, empty0 being kv_bar(full0, 0, 2).
template <int STAGES> __device__ __forceinline__ uint32_t kv_bar(uint32_t bar0, uint32_t s, int v)
{
    return bar0 + 8 * (s + (uint32_t)v * STAGES);
}

// D (64 x 128, fp32, the accumulator layout of mma.sync's m16n8 tiles, warp w holding rows
// 16w..16w+15) = A (64 x 16, registers, mma.sync's A fragment layout) * B (16 x 128, shared
// memory, desc_b) + (scale_d ? D : 0). TRANS_B: B is MN-major.
// The 64 accumulator operands of an m64n128 wgmma, as asm text and as constraints.
#define WG_ACC64_TEXT                                                                              \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_ACC64_OPS(d)                                                                            \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),        \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),     \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),     \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),     \
    "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),     \
    "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
    "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),     \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),     \
    "+f"(d[63])

#define WGMMA_RS_M64N128K16(T, PTX)                                                            \
    template <int TRANS_B>                                                                     \
    __device__ __forceinline__ void wgmma_rs(Tag<T>, float (&d)[64],                   \
                                                     const uint32_t (&a)[4], uint64_t desc_b,  \
                                                     int scale_d)                              \
    {                                                                                          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {"           \
                     WG_ACC64_TEXT "}, {%64, %65, %66, %67}, %69, p, 1, 1, %70;\n}\n"          \
                     : WG_ACC64_OPS(d)                                                         \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(scale_d), "l"(desc_b),  \
                       "n"(TRANS_B));                                                          \
    }
WGMMA_RS_M64N128K16(__half, "f16")
WGMMA_RS_M64N128K16(__nv_bfloat16, "bf16")

// The same with N = 64 (P V at D = 64): 32 accumulators; wgmma_rs picks N by d's size.
#define WG_ACC32_TEXT                                                                              \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_ACC32_OPS(d)                                                                            \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),            \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),        \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),     \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),     \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WGMMA_RS_M64N64K16(T, PTX)                                                             \
    template <int TRANS_B>                                                                     \
    __device__ __forceinline__ void wgmma_rs(Tag<T>, float (&d)[32],                   \
                                                     const uint32_t (&a)[4], uint64_t desc_b,  \
                                                     int scale_d)                              \
    {                                                                                          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {"            \
                     WG_ACC32_TEXT "}, {%32, %33, %34, %35}, %37, p, 1, 1, %38;\n}\n"         \
                     : WG_ACC32_OPS(d)                                                         \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(scale_d), "l"(desc_b),  \
                       "n"(TRANS_B));                                                          \
    }
WGMMA_RS_M64N64K16(__half, "f16")
WGMMA_RS_M64N64K16(__nv_bfloat16, "bf16")

// D = A (64 x 16, shared memory, K-major, desc_a) * B (as above, K-major) + (scale_d ? D : 0).
#define WGMMA_SS_M64N128K16(T, PTX)                                                            \
    __device__ __forceinline__ void wgmma_ss_m64n128k16(Tag<T>, float (&d)[64], uint64_t desc_a,  \
                                                        uint64_t desc_b, int scale_d)          \
    {                                                                                          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " {"           \
                     WG_ACC64_TEXT "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                          \
                     : WG_ACC64_OPS(d)                                                         \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                \
    }
WGMMA_SS_M64N128K16(__half, "f16")
WGMMA_SS_M64N128K16(__nv_bfloat16, "bf16")

// The same with N = 64 (Q K^T over 64-key tiles, attention_fwd_hopper_wide.cu).
#define WGMMA_SS_M64N64K16(T, PTX)                                                             \
    __device__ __forceinline__ void wgmma_ss_m64n64k16(Tag<T>, float (&d)[32], uint64_t desc_a,   \
                                                       uint64_t desc_b, int scale_d)           \
    {                                                                                          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {"            \
                     WG_ACC32_TEXT "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                          \
                     : WG_ACC32_OPS(d)                                                         \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                \
    }
WGMMA_SS_M64N64K16(__half, "f16")
WGMMA_SS_M64N64K16(__nv_bfloat16, "bf16")

// The same with N = 80 (Q K^T over 80-key tiles, FA3's at D = 256).
#define WG_ACC40_TEXT "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39"
#define WG_ACC40_OPS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define WGMMA_SS_M64N80K16(T, PTX)                                                             \
    __device__ __forceinline__ void wgmma_ss_m64n80k16(Tag<T>, float (&d)[40], uint64_t desc_a,   \
                                                       uint64_t desc_b, int scale_d)           \
    {                                                                                          \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                              \
                     "wgmma.mma_async.sync.aligned.m64n80k16.f32." PTX "." PTX " {"            \
                     WG_ACC40_TEXT "}, %40, %41, p, 1, 1, 0, 0;\n}\n"                          \
                     : WG_ACC40_OPS(d)                                                         \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                \
    }
WGMMA_SS_M64N80K16(__half, "f16")
WGMMA_SS_M64N80K16(__nv_bfloat16, "bf16")

#endif // GLLM_HAVE_WGMMA

} // namespace

#endif
