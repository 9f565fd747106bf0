// The block of gllmd's Hopper kernels (the dense prefill, attention_fwd_hopper.cu, and the
// paged prefill, paged_prefill_hopper.cu): its shape and register plan (Hp), the key tile.
#ifndef GLLM_HOPPER_COMMON_CUH
#define GLLM_HOPPER_COMMON_CUH

#include "attention_params.h"
#include "hopper_ptx.cuh"
#include "hopper_schedule.h"
#include "kernel_registry.h"

namespace {

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
    // Two consumers take turns at issuing their GEMMs on named barriers (PingPong); three
    // drift freely. The consumers always issue tile j's Q K^T before tile j - 1's P V.
    static constexpr bool PINGPONG = CONSUMERS == 2;
    // A tile's final turn (its last P V) and the next tile's turn 0 (its first Q K^T) are one
    // turn, the epilogue run under the Q K^T (key_cross). Not at D = 64: it spilled the
    // 160-register consumers there, and their epilogue stores from registers, with no
    // shared-memory write for the Q K^T to hide.
    static constexpr bool CROSS = D == 128;
    static_assert(PRODUCER >= 24 && PRODUCER % 8 == 0 && PRODUCER <= START && CONSUMER >= START &&
                      128 * PRODUCER + 128 * CONSUMERS * CONSUMER <= START * THREADS,
                  "setmaxnreg budget");
};

#ifdef GLLM_HAVE_WGMMA
// The producer warpgroup's copy of rows [row0, row0 + ROWS) of one head into a swizzled
// [ROWS][D] tile; rows >= nrows or below 0 (a causal head's first m-tile, m_pad) are zeros.
// Thread i copies 16-byte column i % TPR (and, at D = 256, that one plus 16; at D = 192, plus 8
// and 16: CPR of them) of rows i / TPR + STEP k, TPR = min(D / 8, 16), 8 where 16 does not
// divide D / 8: a pass covers a multiple of 8 rows, so one swizzle offset serves all its rows.
template <int D, int ROWS, typename T>
__device__ __forceinline__ void copy_tile(uint32_t tile, const T *base, int64_t row_stride, int row0,
                                          int nrows, int i)
{
    constexpr int CHUNKS = D / 8;                        // 16-byte columns
    constexpr int TPR = CHUNKS < 16 ? CHUNKS : CHUNKS % 16 ? 8 : 16;   // threads per row
    constexpr int KBLK = TPR / 8;                        // 64-column blocks from a column to the next
    constexpr int STEP = 128 / TPR, CPR = CHUNKS / TPR;  // rows per pass, columns per thread
    static_assert(CHUNKS % TPR == 0 && STEP % 8 == 0 && ROWS % STEP == 0, "tile shape");
    const int r0 = i / TPR, c = i % TPR;
    const T *src = base + (int64_t)(row0 + r0) * row_stride + c * 8;
    const int64_t step = (int64_t)STEP * row_stride;
    const uint32_t soff = tile + hp_offset<ROWS>(r0, c * 8);
    // One pointer walked down the rows, hidden from the optimiser at each step: the
    // producer runs on Hp::PRODUCER registers, and the per-row offsets (it * step) that
    // the compiler would otherwise hoist out of the tile loop, 16 64-bit values per copy,
    // spill there.
    int rows_left = nrows - (row0 + r0);
#pragma unroll
    for (int it = 0; it < ROWS / STEP; it++) {
        const bool ok = rows_left > 0 && rows_left <= nrows;       // 0 <= row < nrows
#pragma unroll
        for (int k = 0; k < CPR; k++)                    // column TPR k: KBLK k column blocks on
            cp_async16(soff + it * STEP * 128 + k * KBLK * ROWS * 128,
                       ok ? src + k * TPR * 8 : base, ok ? 16 : 0);
        src += step;
        asm volatile("" : "+l"(src));
        rows_left -= STEP;
    }
}
#endif

} // namespace

#endif
