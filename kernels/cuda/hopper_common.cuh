// Building blocks of gllmd's Hopper (sm_90a, wgmma) kernels, shared by the dense prefill
// (attention_fwd_hopper.cu) and the paged prefill (paged_prefill_hopper.cu): the block shape
// and register plan (Hp), the 128-byte swizzled tile layout, wgmma descriptors and wrappers,
// mbarrier, TMA and named-barrier helpers, and the consumers' per-tile steps (Q K^T, P V,
// masks, online softmax). Moved here unchanged from attention_fwd_hopper.cu; the rationale for
// each lives in that file's header comment.
#ifndef GLLM_HOPPER_COMMON_CUH
#define GLLM_HOPPER_COMMON_CUH

#include "attention_params.h"
#include "kernel_registry.h"
#include "mma_common.cuh"

namespace {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GLLM_HAVE_WGMMA 1
#endif

constexpr int HP_KEYS = GLLM_CUDA_HP_KEYS;       // keys per tile

// Timeline probes (kernels/tools/hp_trace.cu defines GLLM_HP_TRACE and hp_trace; gllmd's image
// never does): HP_TRACE(code, aux) records an event of the calling warpgroup's first thread.
#ifdef GLLM_HP_TRACE
#define HP_TRACE(code, aux) hp_trace((code), (aux))
#else
#define HP_TRACE(code, aux) ((void)0)
#endif
static_assert(HP_KEYS == 128, "tile shapes below");

// Per head dimension: query rows per block (64 per consumer warpgroup), threads, the bytes of
// a K or V tile, and the K/V stages (GLLM_CUDA_HP_STAGES unless named).
template <int D, int STAGES_ = GLLM_CUDA_HP_STAGES(D)> struct Hp {
    static constexpr int STAGES = STAGES_;
    static constexpr int ROWS = GLLM_CUDA_HP_ROWS(D);
    static constexpr int CONSUMERS = ROWS / 64;
    static constexpr int THREADS = GLLM_CUDA_HP_THREADS(D);
    static constexpr uint32_t KV_TILE = HP_KEYS * D * 2;
    static_assert(THREADS == 128 * (CONSUMERS + 1) && (D == 64 || D == 128), "shapes");
    // Registers per thread (setmaxnreg): every thread starts with START (the 64 Ki register
    // file over the block, as __launch_bounds__(THREADS, 1) lets ptxas use, in steps of 8);
    // the producer drops to PRODUCER and the consumers share what it frees. D = 128:
    // 168 -> 32 / 232; D = 64: 128 -> 32 / 160.
    static constexpr int START = 65536 / THREADS / 8 * 8;
    static constexpr int PRODUCER = 32;
    static constexpr int CONSUMER_RAW =
        (START * THREADS - 128 * PRODUCER) / (128 * CONSUMERS) / 8 * 8;
    static constexpr int CONSUMER = CONSUMER_RAW > 256 ? 256 : CONSUMER_RAW;
    // Consumers always issue tile j's Q K^T before tile j - 1's P V (key_rest); v13's one
    // tile at a time, kept until v20b to measure against, went when both kernels came to
    // share the key walk.
    // Two consumers take turns at issuing their GEMMs on named barriers (v17, see the
    // header comment); false: v16, the consumers drift freely.
    static constexpr bool PINGPONG = CONSUMERS == 2;
    // A tile's final turn (its last P V) and the next tile's turn 0 (its first Q K^T) are one
    // turn, the epilogue run under the Q K^T (v27, key_cross; v25 had the Q K^T alone in turn 0
    // before the epilogue, key_first). Not at D = 64: v25's first form spilled the 160-register
    // consumers there, and its epilogue stores from registers, with no shared-memory write for
    // the Q K^T to hide.
    static constexpr bool CROSS = D == 128;
    static_assert(PRODUCER >= 24 && PRODUCER % 8 == 0 && PRODUCER <= START && CONSUMER >= START &&
                      128 * PRODUCER + 128 * CONSUMERS * CONSUMER <= START * THREADS,
                  "setmaxnreg budget");
};

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
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t saddr)
{
    return (uint64_t)((saddr >> 4) & 0x3FFF) | ((uint64_t)(16384 >> 4) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

// The descriptor of the tile `bytes` past the one d describes. The start field is a shared
// address >> 4, and shared addresses lie below 2^18, so the sum never carries out of its 14
// bits: one add, where desc_*_major(addr + bytes) per k-step was about ten instructions
// (shift, masks, moves to uniform registers) before each wgmma (v18c).
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
__device__ __forceinline__ void pin(uint32_t (&r)[8][4])
{
#pragma unroll
    for (int i = 0; i < 8; i++)
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
// was 0.5-1.4% faster than two waits in turn (v53): each try_wait takes its round trip even
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

// O's TMA store (v21): a consumer warpgroup's tile, written to shared memory by stmatrix in the
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
// O_BAR's. Each walk takes its turns from 0. Before v61 warpgroup 0's first turn of the second
// one did not wait for its partner; without this barrier it could end that turn, arriving on
// PP_BAR + 1, before warpgroup 1 had synced there for its final turn of the first walk. Two
// arrivals of the same warps would then complete one phase of PP_BAR + 1, and the two
// warpgroups wait for each other for ever (v34 hung so once its softmax was slowed). Since v61
// (PingPong) that first turn waits for warpgroup 1's arrival as the second walk's turns are set
// up, which comes after its final turn of the first walk, so this barrier is no longer the only
// thing that orders them; it stays, once a block, as the walk race test (gpu-check.sh) checks it.
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

// The K/V ring's barriers (v21): four arrays of STAGES mbarriers from bar0, full K, full V,
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

// The largest (MAX) or smallest score of each of a thread's two rows, across the 4 lanes
// that share them; a uniform branch picks the direction, not a select per score.
template <bool MAX>
__device__ __forceinline__ void row_extreme(const float (&s)[64], float (&out)[2])
{
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float x = s[2 * hr];
#pragma unroll
        for (int n = 0; n < 16; n++)
            x = MAX ? fmaxf(x, fmaxf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]))
                    : fminf(x, fminf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]));
        const float y = __shfl_xor_sync(0xffffffff, x, 1);
        x = MAX ? fmaxf(x, y) : fminf(x, y);
        const float z = __shfl_xor_sync(0xffffffff, x, 2);
        out[hr] = MAX ? fmaxf(x, z) : fminf(x, z);
    }
}

// S = Q K^T for one warpgroup's 64 rows against one K tile, issued and committed as one
// wgmma group; the caller waits. s's old contents are not read (scale_d = 0 at kk = 0).
// dq, dk: the descriptors of the warpgroup's Q rows and of the K tile; each k-step's are
// those plus a constant (see desc_add).
template <typename T, int D>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint64_t dq, uint64_t dk)
{
    pin(s);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t kcol = (uint32_t)(kk & 3) * 32;   // 16 elements within a 64-column block
        wgmma_ss_m64n128k16(Tag<T>(), s, desc_add(dq, (uint32_t)(kk >> 2) * Hp<D>::ROWS * 128 + kcol),
                            desc_add(dk, (uint32_t)(kk >> 2) * HP_KEYS * 128 + kcol), kk > 0);
    }
    wg_commit();
}

// O += P V for one V tile (keys are wgmma's K, 16 per step), issued and committed as one
// group; the caller waits. dv: the V tile's MN-major descriptor.
template <typename T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&pf)[8][4], uint64_t dv)
{
    pin(o);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wgmma_rs<1>(Tag<T>(), o, pf[kk], desc_add(dv, (uint32_t)kk * 2048), 1);
    wg_commit();
}

// Mask the tail tile (keys >= Skv) and, causal, the tiles crossing this warpgroup's
// diagonal (row sees keys <= row + shift). row0: this thread's first row.
template <bool CAUSAL>
__device__ __forceinline__ void mask_tile(float (&s)[64], int n0, int Skv, int r_wg, int row0,
                                          int shift, int t, float masked)
{
    if (n0 + HP_KEYS > Skv || (CAUSAL && n0 + HP_KEYS - 1 > r_wg + shift)) {
#pragma unroll
        for (int i = 0; i < 64; i++) {
            const int key = n0 + (i / 4) * 8 + 2 * t + (i & 1);
            if (key >= Skv || (CAUSAL && key > row0 + 8 * ((i >> 1) & 1) + shift))
                s[i] = masked;
        }
    }
}

// Online softmax of one score tile, base 2, with attention_fwd.cu's lazy rescale: the
// reference max moves only when a row's maximum passes it by more than slack (log2 units; 8
// in the walk). rescale_to_max takes the tile's row maxima and moves the references, rescaling
// row_sum at once; it returns whether O must be multiplied by scale_o (warp-uniform). exp_tile
// leaves exp2(s * qk_scale - reference) in s and adds them to sum, row by row.
__device__ __forceinline__ bool rescale_to_max(const float (&s)[64], float (&row_max)[2],
                                               float (&row_sum)[2], float (&scale_o)[2],
                                               float qk_scale, bool pos_scale, float slack)
{
    float tile_max[2];
    if (pos_scale)
        row_extreme<true>(s, tile_max);
    else
        row_extreme<false>(s, tile_max);
    tile_max[0] *= qk_scale;
    tile_max[1] *= qk_scale;
    const bool grow = tile_max[0] > row_max[0] + slack || tile_max[1] > row_max[1] + slack;
    const bool rescale = __any_sync(0xffffffff, grow);
    if (rescale) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const float mx = fmaxf(row_max[hr], tile_max[hr]);
            scale_o[hr] = mx == -INFINITY ? 1.f : fast_exp2(row_max[hr] - mx);
            row_max[hr] = mx;
            row_sum[hr] *= scale_o[hr];
        }
    }
    return rescale;
}

// The reference a row's exponentials are taken against: its maximum, or 0 while it has none.
__device__ __forceinline__ float exp_ref(float row_max)
{
    return row_max == -INFINITY ? 0.f : row_max;
}

// exp2(s * qk_scale - ref) in s, row by row, each added to its row's sum.
__device__ __forceinline__ void exp_tile_ref(float (&s)[64], const float (&ref)[2], float qk_scale,
                                             float (&sum)[2])
{
#pragma unroll
    for (int n = 0; n < 16; n++) {
        s[4 * n] = fast_exp2(fmaf(s[4 * n], qk_scale, -ref[0]));
        s[4 * n + 1] = fast_exp2(fmaf(s[4 * n + 1], qk_scale, -ref[0]));
        s[4 * n + 2] = fast_exp2(fmaf(s[4 * n + 2], qk_scale, -ref[1]));
        s[4 * n + 3] = fast_exp2(fmaf(s[4 * n + 3], qk_scale, -ref[1]));
        sum[0] += s[4 * n] + s[4 * n + 1];
        sum[1] += s[4 * n + 2] + s[4 * n + 3];
    }
}

__device__ __forceinline__ void exp_tile(float (&s)[64], const float (&row_max)[2], float qk_scale,
                                         float (&sum)[2])
{
    const float ref[2] = {exp_ref(row_max[0]), exp_ref(row_max[1])};
    exp_tile_ref(s, ref, qk_scale, sum);
}

// Both, for a tile whose maxima are taken first; row_sum gets the tile's sums.
__device__ __forceinline__ bool softmax_tile(float (&s)[64], float (&row_max)[2],
                                             float (&row_sum)[2], float (&scale_o)[2],
                                             float qk_scale, bool pos_scale)
{
    const bool rescale = rescale_to_max(s, row_max, row_sum, scale_o, qk_scale, pos_scale, 8.f);
    exp_tile(s, row_max, qk_scale, row_sum);
    return rescale;
}

// A thread's sum of its 32 exponentials of a row past which a speculative tile is taken again
// (key_rest): below it, none of them is above 2^8, the bound the lazy rescale keeps.
#define HP_SPEC_SUM 256.f

// S = Q K^T again for one warp's 16 rows of its warpgroup (Q at q_wg, the tile's K at k_tile,
// both laid out as hp_offset says), with mma.sync from shared memory: the rare path of
// key_rest's speculative softmax. The accumulator of mma.sync's m16n8 tiles is each warp's
// share of wgmma's m64n128 one, so s comes out as issue_qk leaves it.
template <typename T, int D>
__device__ __forceinline__ void qk_again(float (&s)[64], uint32_t q_wg, uint32_t k_tile)
{
    const int lane = threadIdx.x % 32, wrow = (threadIdx.x / 32 % 4) * 16;
#pragma unroll
    for (int i = 0; i < 64; i++)
        s[i] = 0.f;
#pragma unroll 1
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4(a, q_wg + hp_offset<Hp<D>::ROWS>(wrow + (lane & 15), kk * 16 + (lane >> 4) * 8));
        const int key = (lane & 7) + ((lane >> 4) << 3), col = kk * 16 + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int n = 0; n < 16; n += 2) {
            uint32_t b[4];
            ldmatrix_x4(b, k_tile + hp_offset<HP_KEYS>(n * 8 + key, col));
            mma16816<T>(&s[4 * n], a, b);
            mma16816<T>(&s[4 * n + 4], a, b + 2);
        }
    }
}

// O's columns of each of a thread's two rows times that row's scale.
template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&scale_o)[2])
{
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        o[4 * n] *= scale_o[0], o[4 * n + 1] *= scale_o[0];
        o[4 * n + 2] *= scale_o[1], o[4 * n + 3] *= scale_o[1];
    }
}

// P (the exponentials in s) as wgmma's A fragments: the accumulator layout of an m64n128
// tile is, 16 keys at a time, the A layout of an m64k16 one.
template <typename T>
__device__ __forceinline__ void pack_p(const float (&s)[64], uint32_t (&pf)[8][4])
{
#pragma unroll
    for (int n = 0; n < 16; n++) {
        pf[n / 2][(n & 1) * 2] = Elem<T>::pack(s[4 * n], s[4 * n + 1]);
        pf[n / 2][(n & 1) * 2 + 1] = Elem<T>::pack(s[4 * n + 2], s[4 * n + 3]);
    }
}


// What the consumers' walk over one query tile's key tiles needs (KeyWalk): the tiles this
// warpgroup computes, [0, n_mine), and the block's, [0, n_tiles); the descriptors of its Q
// rows and of stage 0's K and V; the K/V ring (kv_bar's first barrier, and load0: the
// block's loads before this tile's first, so that key tile j is load load0 + j, in stage
// (load0 + j) % STAGES, phase (load0 + j) / STAGES); the mask's terms (mask_tile); the
// softmax's scale.
struct KeyWalk {
    int n_mine, n_tiles;
    uint64_t dq, dk0, dv0;
    uint32_t full0, load0;
    int Skv, r_wg, row0, shift, t;
    float masked, qk_scale;
    bool pos_scale;
    int k0;                    // the first key tile's index in the head (a split unit's part)
};

// A consumer thread's place in its block and the walk's constant terms, the same in the dense
// kernel and the paged prefill. The warpgroup is broadcast from lane 0 so that the compiler
// knows it is warp-uniform and keeps what derives from it (the wgmma descriptors: Q's rows of
// this warpgroup, stage 0's K, K-major, and V, MN-major; a stage's are those plus its
// offset, desc_add) in uniform registers; wrow is the warp's first row in the warpgroup.
struct Consumer {
    int wg, wrow, g, t;
    uint64_t dq, dk0, dv0;
    float qk_scale, masked;
    bool pos_scale;
};

template <int D, bool OPAQUE_DESC = D == 64>
__device__ __forceinline__ Consumer consumer_setup(float scale, uint32_t s_q, uint32_t s_kv)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    Consumer c;
    c.wg = __shfl_sync(0xffffffff, warp / 4, 0);
    c.wrow = (warp % 4) * 16;
    c.g = lane >> 2;
    c.t = lane & 3;
    c.dq = desc_k_major(s_q + (uint32_t)c.wg * 64 * 128);
    c.dk0 = desc_k_major(s_kv);
    c.dv0 = desc_mn_major(s_kv + Hp<D>::KV_TILE);
    if constexpr (OPAQUE_DESC) {
        // Kept as made here: otherwise the compiler makes Q's and the stage's K descriptors
        // again from their shared addresses at every turn, a chain of about ten uniform
        // instructions before the first wgmma. Kept, the D = 64 key loop is 11 instructions
        // shorter and 0.5-1.4% faster (v52); at D = 128 the same was 0.3-0.6% slower, but
        // with v57's speculative walk (D = 128 without a causal mask) it takes the loop's 8
        // R2UR away and is 0.5-0.7% faster (v57o).
        asm volatile("mov.b64 %0, %0;" : "+l"(c.dq));
        asm volatile("mov.b64 %0, %0;" : "+l"(c.dk0));
        asm volatile("mov.b64 %0, %0;" : "+l"(c.dv0));
    }
    c.qk_scale = scale != 0.f ? scale * LOG2E : FLT_MIN;      // as attention_fwd.cu
    c.pos_scale = c.qk_scale > 0.f;
    c.masked = c.pos_scale ? -INFINITY : INFINITY;
    return c;
}

// The walk over one tile for consumer c: its rows from r_wg (row0: this thread's first),
// the tiles it computes and the block's, keys up to Skv, the mask's shift; the tiles are the
// head's key tiles from k0 on.
__device__ __forceinline__ KeyWalk key_walk(const Consumer &c, int n_mine, int n_tiles,
                                            uint32_t full0, uint32_t load0, int Skv, int r_wg,
                                            int row0, int shift, int k0 = 0)
{
    return {n_mine, n_tiles, c.dq, c.dk0, c.dv0, full0, load0, Skv, r_wg, row0, shift, c.t,
            c.masked, c.qk_scale, c.pos_scale, k0};
}

// The K/V ring as one tile's walk sees it: key tile j is load w.load0 + j.
template <int D, int STAGES> struct KeyRing {
    const KeyWalk &w;
    __device__ __forceinline__ uint32_t stage(int j) const
    {
        return (w.load0 + (uint32_t)j) % STAGES;
    }
    __device__ __forceinline__ void full_wait(int j, int v) const
    {
        mbar_wait(kv_bar<STAGES>(w.full0, stage(j), v), ((w.load0 + (uint32_t)j) / STAGES) & 1);
    }
    // K of key tile j and V of key tile j - 1, asked at once (mbar_wait2).
    __device__ __forceinline__ void full_wait_kv(int j) const
    {
        mbar_wait2(kv_bar<STAGES>(w.full0, stage(j), 0), ((w.load0 + (uint32_t)j) / STAGES) & 1,
                   kv_bar<STAGES>(w.full0, stage(j - 1), 1),
                   ((w.load0 + (uint32_t)j - 1) / STAGES) & 1);
    }
    __device__ __forceinline__ uint64_t k_desc(int j) const
    {
        return desc_add(w.dk0, stage(j) * 2 * Hp<D>::KV_TILE);
    }
    __device__ __forceinline__ uint64_t v_desc(int j) const
    {
        return desc_add(w.dv0, stage(j) * 2 * Hp<D>::KV_TILE);
    }
    __device__ __forceinline__ void release(int j, int v) const
    {
        mbar_arrive(kv_bar<STAGES>(kv_bar<STAGES>(w.full0, 0, 2), stage(j), v));
    }
};

// The ping-pong turns of two consumer warpgroups (v17; the dense kernel's comment on them), run
// on across a block's tiles: begin() waits until the partner has ended its previous turn, end()
// lets the partner start its next; wg 1 skips the arrival after the block's final turn
// (block_final), which nobody waits for, and makes up for it with one arrival when the turns
// are set up (any: the block has turns to take), as if it had ended a turn before wg 0's first.
// So each warpgroup syncs on its own barrier at every turn, with no count of turns and no
// branch (v61: the first-turn test cost the key loop three branches a tile), and per barrier
// syncs and arrivals still match one for one. Without ping-pong (PINGPONG false) nothing is
// done.
template <bool PINGPONG> struct PingPong {
    int wg;
    __device__ __forceinline__ PingPong(int wg_, bool any) : wg(wg_)
    {
        if constexpr (PINGPONG) {
            if (wg == 1 && any)
                named_arrive<PP_BAR>();
        }
    }
    __device__ __forceinline__ void begin() const
    {
        if constexpr (PINGPONG) {
            if (wg == 1)
                named_sync<PP_BAR + 1>();
            else
                named_sync<PP_BAR>();
        }
    }
    __device__ __forceinline__ void end(bool block_final) const
    {
        if constexpr (PINGPONG) {
            if (wg == 0)
                named_arrive<PP_BAR + 1>();
            else if (!block_final)
                named_arrive<PP_BAR>();
        }
    }
};

// The consumers' walk over the key tiles of one query tile (the dense kernel) or work item (the
// paged prefill): key_first's turn 0, then key_rest's turns. Tiles [0, n_mine) are computed with
// intra-warpgroup pipelining (FlashAttention-3, section 3.2): tile j's S = Q K^T is issued before
// tile j - 1's O += P V, and the softmax of tile j runs while P V is on the tensor cores; O's
// rescale for tile j waits for the next iteration (P V of j - 1 must land first), row_sum's happens
// at once. Live across the softmax: O (D / 2), P of j - 1 (32, read by the wgmma in flight), S of j
// (64). K and V of a stage have barriers of their own (v21, kv_bar): K of tile j is released as
// soon as its Q K^T has completed, a turn before V of tile j, whose P V comes a turn later, so the
// producer can refill K that much earlier. Tiles [n_mine, n_tiles) are only waited for and
// released: the other warpgroups still need the stage, and the empty barriers count every consumer
// thread. Each warpgroup takes n_tiles + 1 ping-pong turns (turn j: the issues before S of tile j
// is read; the last: the last P V; a turn with nothing to issue is only its sync and arrive) on
// the caller's PingPong, last_tile being whether this is the block's last tile; with CROSS, a
// tile's turn 0 is the previous tile's final turn (key_cross), and a tile without keys takes
// two. Each thread arrives on q_empty once this warpgroup no longer reads Q (its last Q K^T has
// completed; with nothing to compute, once the first tile, and Q with it, is in). o, row_max and
// row_sum start anew here and are left for the epilogue.
// A tile's first turn: S = Q K^T of key tile 0 issued into s when this warpgroup computes any,
// and the wait for it; key_rest goes on from there. CROSS: the block's first tile only (the
// others' turn 0 is key_cross's), and an empty turn when this warpgroup computes nothing (else
// key_rest takes it).
template <typename T, int D, int STAGES, bool CROSS, bool PINGPONG>
__device__ __forceinline__ void key_first(const KeyWalk &w, float (&s)[64], PingPong<PINGPONG> &turns)
{
    if (w.n_mine > 0) {
#pragma unroll
        for (int i = 0; i < 64; i++)                   // defined before the wgmma reads them
            s[i] = 0.f;
        const KeyRing<D, STAGES> ring{w};
        ring.full_wait(0, 0);
        HP_TRACE(10, 0);
        turns.begin();
        HP_TRACE(11, 0);
        issue_qk<T, D>(s, w.dq, ring.k_desc(0));
        turns.end(false);                              // turn 0 < n_tiles: not the final one
        HP_TRACE(12, 0);
        wg_wait<0>();
        pin(s);
        HP_TRACE(13, 0);
    } else if (CROSS) {
        turns.begin();
        turns.end(false);
    }
}

// What key_rest leaves for a tile's final turn (turn n_tiles) when the caller takes it (CROSS,
// key_cross or key_last): pv, whether this warpgroup still owes P V of its last key tile; P of
// that tile; O's rescale owed before it.
struct Owed {
    uint32_t pf[8][4];
    float scale_o[2];
    bool pending, pv;
};

// The rest of the walk after key_first, s holding key tile 0's scores. CROSS: the tile's final
// turn is left to the caller (key_cross, key_last), with what it owes in ow.
template <typename T, int D, bool CAUSAL, int STAGES, bool CROSS, bool PINGPONG>
__device__ __forceinline__ void key_rest(const KeyWalk &w, float (&s)[64], float (&o)[D / 2],
                                         float (&row_max)[2], float (&row_sum)[2], Owed &ow,
                                         PingPong<PINGPONG> &turns, bool last_tile,
                                         uint32_t q_empty)
{
    const KeyRing<D, STAGES> ring{w};
    uint32_t(&pf)[8][4] = ow.pf;
    float(&scale_o)[2] = ow.scale_o;
    bool &pending = ow.pending;                        // O still owes scale_o
    scale_o[0] = scale_o[1] = 1.f;
    pending = false;
    ow.pv = false;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
#pragma unroll
    for (int i = 0; i < D / 2; i++)
        o[i] = 0.f;
    auto mask = [&](int j) {                           // key tile j's masked scores
        mask_tile<CAUSAL>(s, (w.k0 + j) * HP_KEYS, w.Skv, w.r_wg, w.row0, w.shift, w.t, w.masked);
    };
    if (w.n_mine > 0) {
        ring.release(0, 0);
        if (w.n_mine == 1)
            mbar_arrive(q_empty);
        mask(0);
        softmax_tile(s, row_max, row_sum, scale_o, w.qk_scale, w.pos_scale);   // O is 0
        pack_p<T>(s, pf);
        HP_TRACE(14, 0);
    }
    // Turn j of tiles 1 .. n_mine - 1: S = Q K^T of key tile j and O += P V of tile j - 1 issued,
    // then the wait for S.
    auto turn = [&](int j) {
        ring.full_wait_kv(j);
        turns.begin();
        HP_TRACE(11, j);
        issue_qk<T, D>(s, w.dq, ring.k_desc(j));
        if (pending)
            rescale_o<D>(o, scale_o);
        issue_pv<T, D>(o, pf, ring.v_desc(j - 1));
        turns.end(false);
        wg_wait<1>();                                  // S of j is in; P V of j - 1 may not be
        pin(s);
        HP_TRACE(13, j);
    };
    // Speculative (v57, D = 128 without a causal mask): a key tile takes its exponentials
    // against the references as they stand, without its row maxima, and only a sum past
    // HP_SPEC_SUM (a miss) sends it the exact way, out of the loop so that the loop's code
    // stays together. Its K and Q stay until the check. The walk's last tile gives Q back at
    // once (the next tile's Q waits on it), so it is exact, and so is every tile after a miss:
    // scores that keep growing pay for one miss a walk, not one a tile.
    if constexpr (D == 128 && !CAUSAL) {
        bool exact = false;
        int j = 1;
        // The references as exp_tile takes them, made again only where an exact tile (or a
        // miss) moves them, not at every tile (v61).
        float ref[2];
        auto remake_ref = [&]() { ref[0] = exp_ref(row_max[0]), ref[1] = exp_ref(row_max[1]); };
        remake_ref();
        while (j < w.n_mine) {
            bool missed = false;
            float sum[2];
            for (; j < w.n_mine; j++) {
                turn(j);
                const bool spec = !exact && j + 1 < w.n_mine;
                if (!spec)
                    ring.release(j, 0);
                if (j == w.n_mine - 1)
                    mbar_arrive(q_empty);
                mask(j);
                if (spec) {
                    pending = false;
                } else {
                    pending = rescale_to_max(s, row_max, row_sum, scale_o, w.qk_scale,
                                             w.pos_scale, 8.f);
                    remake_ref();
                }
                sum[0] = sum[1] = 0.f;                 // the tile's own, added to row_sum below
                exp_tile_ref(s, ref, w.qk_scale, sum);
                wg_wait<0>();
                pin(o);
                pin(pf);
                // V of j - 1 is done with once its P V has landed, before the check (v63): the
                // producer loads it ahead of K here (V_FIRST), whose slot the check holds.
                ring.release(j - 1, 1);
                pack_p<T>(s, pf);                      // before the check, among the exp2
                if (spec &&
                    __any_sync(0xffffffff, sum[0] > HP_SPEC_SUM || sum[1] > HP_SPEC_SUM)) {
                    missed = true;
                    break;
                }
                if (spec)
                    ring.release(j, 0);
                row_sum[0] += sum[0];
                row_sum[1] += sum[1];
            }
            if (missed) {                              // S of j again, then its exact softmax
                exact = true;
                qk_again<T, D>(s, desc_saddr(w.dq), desc_saddr(ring.k_desc(j)));
                mask(j);
                pending = rescale_to_max(s, row_max, row_sum, scale_o, w.qk_scale, w.pos_scale,
                                         0.f);
                remake_ref();
                exp_tile_ref(s, ref, w.qk_scale, row_sum);
                pack_p<T>(s, pf);
                ring.release(j, 0);
                j++;
            }
        }
    } else {
        // The exact walk as its own loop: the speculation lost 0.2-3.6% at D = 64 and causal,
        // and these kernels compile as they did before it.
        for (int j = 1; j < w.n_mine; j++) {
            turn(j);
            ring.release(j, 0);                        // this thread is done with K of j
            if (j == w.n_mine - 1)
                mbar_arrive(q_empty);                  // the last Q K^T has read Q
            mask(j);
            pending = softmax_tile(s, row_max, row_sum, scale_o, w.qk_scale, w.pos_scale);
            wg_wait<0>();
            pin(o);
            pin(pf);
            ring.release(j - 1, 1);                    // and with V of j - 1
            pack_p<T>(s, pf);
        }
    }
    if (CROSS && w.n_mine > 0 && w.n_mine == w.n_tiles) {
        ow.pv = true;                                  // the last P V goes in the final turn
    } else if (w.n_mine > 0) {
        ring.full_wait(w.n_mine - 1, 1);
        HP_TRACE(16, w.n_mine);
        turns.begin();
        HP_TRACE(17, w.n_mine);
        if (pending)
            rescale_o<D>(o, scale_o);
        issue_pv<T, D>(o, pf, ring.v_desc(w.n_mine - 1));
        turns.end(last_tile && w.n_mine == w.n_tiles);
        wg_wait<0>();
        pin(o);
        pin(pf);
        HP_TRACE(18, w.n_mine);
        ring.release(w.n_mine - 1, 1);
    } else if (!CROSS) {
        turns.begin();                                  // turn 0, with nothing to issue
        turns.end(last_tile && w.n_tiles == 0);
    }
    for (int j = w.n_mine; j < w.n_tiles; j++) {
        ring.full_wait(j, 0);
        if (j == 0)
            mbar_arrive(q_empty);                      // Q is in and this warpgroup skips it
        ring.release(j, 0);
        ring.full_wait(j, 1);
        ring.release(j, 1);
        if (!CROSS || j + 1 < w.n_tiles) {             // turn j + 1; CROSS: not the final one
            turns.begin();
            turns.end(last_tile && j + 1 == w.n_tiles);
        }
    }
}

// A final turn that holds only the last P V of tile c (walk c), and the wait for it.
template <typename T, int D, int STAGES, bool PINGPONG>
__device__ __forceinline__ void last_pv_turn(const KeyWalk &c, float (&o)[D / 2], Owed &ow,
                                             PingPong<PINGPONG> &turns, bool block_final)
{
    const KeyRing<D, STAGES> rc{c};
    rc.full_wait(c.n_mine - 1, 1);
    turns.begin();
    if (ow.pending)
        rescale_o<D>(o, ow.scale_o);
    issue_pv<T, D>(o, ow.pf, rc.v_desc(c.n_mine - 1));
    turns.end(block_final);
    wg_wait<0>();
    pin(o);
    pin(ow.pf);
    rc.release(c.n_mine - 1, 1);
}

// A tile's final turn together with the next tile's turn 0 (CROSS, v27): the last P V of tile
// cur (walk c) when this warpgroup owes it (ow.pv), and S = Q K^T of key tile 0 of tile nxt
// (walk n) into s when it computes any, issued in one turn; then the wait for the P V,
// epilogue() (tile cur's, while the Q K^T is on the tensor cores) and the wait for the Q K^T.
// Before, the final turn held only the P V and the next tile's turn 0 came a turn later, after
// the partner's final turn. Every wgmma is waited for in the branch that issued it, epilogue()
// copied into each: with a wgmma in flight across a join ptxas cannot see through (two branches
// on the same condition, or a loop's back edge), it serialised every wgmma of the kernel (its
// C7515 and C7517 notes), -25 to -30% on every shape (v25). Measured against v25 in one call
// (H100, two rounds): D = 128 S512 +1.2%, S1k +0.6%, S2k +1.4%, S4k +2%, causal S1k-2k +2%,
// causal S512 level; the prediction was +5-8% at S512.
template <typename T, int D, int STAGES, bool PINGPONG, typename Epilogue>
__device__ __forceinline__ void key_cross(const KeyWalk &c, const KeyWalk &n, float (&s)[64],
                                          float (&o)[D / 2], Owed &ow,
                                          PingPong<PINGPONG> &turns, Epilogue &&epilogue)
{
    const KeyRing<D, STAGES> rc{c}, rn{n};
    auto issue_last_pv = [&]() {
        if (ow.pending)
            rescale_o<D>(o, ow.scale_o);
        issue_pv<T, D>(o, ow.pf, rc.v_desc(c.n_mine - 1));
    };
    if (ow.pv && n.n_mine > 0) {
#pragma unroll
        for (int i = 0; i < 64; i++)                   // defined before the wgmma reads them
            s[i] = 0.f;
        rc.full_wait(c.n_mine - 1, 1);
        rn.full_wait(0, 0);
        HP_TRACE(16, c.n_mine);
        turns.begin();
        HP_TRACE(17, c.n_mine);
        issue_last_pv();
        issue_qk<T, D>(s, n.dq, rn.k_desc(0));
        turns.end(false);
        wg_wait<1>();                                  // the P V has landed, the Q K^T may not
        pin(o);
        pin(ow.pf);
        HP_TRACE(18, c.n_mine);
        rc.release(c.n_mine - 1, 1);
        epilogue();
        wg_wait<0>();
        pin(s);
        HP_TRACE(13, 0);
    } else if (ow.pv) {
        last_pv_turn<T, D, STAGES>(c, o, ow, turns, false);
        epilogue();
    } else if (n.n_mine > 0) {
#pragma unroll
        for (int i = 0; i < 64; i++)
            s[i] = 0.f;
        rn.full_wait(0, 0);
        turns.begin();
        issue_qk<T, D>(s, n.dq, rn.k_desc(0));
        turns.end(false);
        epilogue();
        wg_wait<0>();
        pin(s);
    } else {
        turns.begin();
        turns.end(false);
        epilogue();
    }
}

// The block's final turn (CROSS): the last tile's last P V when this warpgroup owes it.
template <typename T, int D, int STAGES, bool PINGPONG>
__device__ __forceinline__ void key_last(const KeyWalk &c, float (&o)[D / 2], Owed &ow,
                                         PingPong<PINGPONG> &turns)
{
    if (ow.pv) {
        last_pv_turn<T, D, STAGES>(c, o, ow, turns, true);
    } else {
        turns.begin();
        turns.end(true);
    }
}
// A tile's end in either kernel: with CROSS and a next tile (walk n), key_cross; else the final
// turn (CROSS: key_last; without, key_rest took it) and epilogue().
template <typename T, int D, int STAGES, bool CROSS, bool PINGPONG, typename Epilogue>
__device__ __forceinline__ void key_end(const KeyWalk &c, const KeyWalk &n, bool more,
                                        float (&s)[64], float (&o)[D / 2], Owed &ow,
                                        PingPong<PINGPONG> &turns, Epilogue &&epilogue)
{
    if (CROSS && more) {
        key_cross<T, D, STAGES>(c, n, s, o, ow, turns, epilogue);
    } else {
        if (CROSS)
            key_last<T, D, STAGES>(c, o, ow, turns);
        epilogue();
    }
}
// One output row of a consumer's tile (row g + 8 hr of its warp), scaled by inv and stored
// when write is set; every lane of the warp must call it (shuffles), write or not. The
// wgmma accumulator gives lane t of a quad columns 8n + 2t and 8n + 2t + 1 of each 8-column
// block n, so a store per block writes 4 bytes and a quad covers 16 bytes of a row: half of
// each 32-byte sector per instruction. Here the quad transposes its four blocks n..n + 3 in
// two rounds of shuffles so that each lane stores one whole block, 16 bytes, and the quad 64
// contiguous bytes. (An epilogue that stored nothing ran S512 D128 24% faster and S2k 6%: the
// stores, not the Q load behind them, held the consumers at a tile's end. Measured on an
// H100 at D = 128: 8-byte pairs +6-8% at S512 against 4-byte stores, 16-byte blocks another
// +1-3% at S512-1k; at D = 64 the pairs lost 2% at S4096, the 16-byte blocks gained 1-3%
// everywhere up to S4096.)
template <typename T, int D>
__device__ __forceinline__ void store_o_row(T *orow, const float (&o)[D / 2], int hr, float inv,
                                            int t, bool write)
{
    static_assert(D % 32 == 0, "blocks are transposed four at a time");
    const bool odd = t & 1, high = t & 2;
#pragma unroll
    for (int n = 0; n < D / 8; n += 4) {
        uint32_t v[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = Elem<T>::pack(o[4 * (n + i) + 2 * hr] * inv, o[4 * (n + i) + 2 * hr + 1] * inv);
        // Round 1 (lanes t, t ^ 1): x holds 4 columns of block n + odd, y 4 of block
        // n + 2 + odd, both at half high of the block.
        const uint32_t ga = __shfl_xor_sync(0xffffffff, odd ? v[0] : v[1], 1);
        const uint32_t gb = __shfl_xor_sync(0xffffffff, odd ? v[2] : v[3], 1);
        const uint2 x = odd ? make_uint2(ga, v[1]) : make_uint2(v[0], ga);
        const uint2 y = odd ? make_uint2(gb, v[3]) : make_uint2(v[2], gb);
        // Round 2 (lanes t, t ^ 2, the other half of the same blocks): the low lane gathers
        // block n + odd, the high one block n + 2 + odd, 8 columns each.
        const uint2 send = high ? x : y;
        const uint2 got = make_uint2(__shfl_xor_sync(0xffffffff, send.x, 2),
                                     __shfl_xor_sync(0xffffffff, send.y, 2));
        const uint4 row = high ? make_uint4(got.x, got.y, y.x, y.y)
                               : make_uint4(x.x, x.y, got.x, got.y);
        if (write)
            *reinterpret_cast<uint4 *>(orow + 8 * (n + (high ? 2 : 0) + (odd ? 1 : 0))) = row;
    }
}

// A consumer warpgroup's O tile (its 64 rows, o scaled by each row's inv) into shared memory
// at s_ow as the O map's boxes want it: column blocks of 64 (64 rows of 128 bytes each),
// hp_offset<64>'s swizzle, so that the eight rows of each 8x8 matrix land in eight different
// 16-byte bank groups. stmatrix takes matrices (row half 0, block n), (1, n), (0, n + 1),
// (1, n + 1) per instruction: D / 16 of them instead of store_o_row's shuffles and D / 32
// 16-byte global stores per row half.
template <typename T, int D>
__device__ __forceinline__ void write_o_tile(uint32_t s_ow, const float (&o)[D / 2],
                                             const float (&inv)[2], int wrow)
{
    const int lane = threadIdx.x % 32, m = lane >> 3;
    const int row = wrow + (lane & 7) + 8 * (m & 1);
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
        const uint32_t a = s_ow + hp_offset<64>(row, 8 * (n + (m >> 1)));
        stmatrix_x4(a, Elem<T>::pack(o[4 * n] * inv[0], o[4 * n + 1] * inv[0]),
                    Elem<T>::pack(o[4 * n + 2] * inv[1], o[4 * n + 3] * inv[1]),
                    Elem<T>::pack(o[4 * n + 4] * inv[0], o[4 * n + 5] * inv[0]),
                    Elem<T>::pack(o[4 * n + 6] * inv[1], o[4 * n + 7] * inv[1]));
    }
}

// A consumer warpgroup's O through shared memory and a TMA store (v21), in two steps: put_o_tile
// writes its tile at s_ow once the previous tile's store has read it; send_o_tile has one
// thread (o_thread) send it out as the O map's boxes at rows row0.. of (c2, c3) while the
// warpgroup goes on; rows outside the map are not written. The caller waits for the last store
// (bulk_wait_all) before exit. Two steps since v25: with the send inside the branch that holds
// the next tile's first Q K^T (key_first), ptxas moved the key loop's stage counters out of
// uniform registers (its TMA coordinates must be uniform), an R2UR before every wgmma.
template <typename T, int D>
__device__ __forceinline__ void put_o_tile(uint32_t s_ow, const float (&o)[D / 2],
                                           const float (&inv)[2], int wrow, int wg, bool o_thread)
{
    if (o_thread)
        bulk_wait_read();
    wg_sync(wg);
    HP_TRACE(22, 0);
    write_o_tile<T, D>(s_ow, o, inv, wrow);
    HP_TRACE(23, 0);
    fence_proxy_async();
    wg_sync(wg);
    HP_TRACE(24, 0);
}
template <int D>
__device__ __forceinline__ void send_o_tile(uint32_t s_ow, bool o_thread, const void *o_map,
                                            int row0, int c2, int c3)
{
    if (o_thread) {
#pragma unroll
        for (int cb = 0; cb < D / GLLM_CUDA_HP_BOX_COLS; cb++)
            tma_store_4d(o_map, s_ow + (uint32_t)cb * 64 * 128, cb * GLLM_CUDA_HP_BOX_COLS, row0,
                         c2, c3);
        bulk_commit();
    }
}

#endif // GLLM_HAVE_WGMMA

} // namespace


#endif
