// Row copies with a pitch for gllmd's CUDA backend: a head dim the fast kernels lack runs on the
// next one they have, its rows zero-padded to it in scratch, and its output copied back.
//
// Zeros appended to q and k leave every score q.k as it was, and zero columns of v only add
// output columns nobody reads: a job at D = 96 is the D = 128 kernel's job on padded rows, so
// head dims below 128 run at the fast kernels' rate less the padding's share (D = 96: 3/4 of
// D = 128's flops do work) instead of on the one-warp-per-row kernel. The copies move
// O(S D) bytes against the attention's O(S^2 D) flops.
#include "attention_params.h"
#include "kernel_registry.h"
#include "mma_common.cuh"

namespace {

// One warp per row: row r of [B, H, S] (r = (b H + h) S + s) copies cols 16-bit elements from
// src + b src_st[0] + h src_st[1] + s src_st[2] to the same place in dst, and writes zeros in
// columns cols .. dst_cols.
__device__ __forceinline__ void pad_rows(const gllm_cuda_pad_params &p)
{
    const int64_t row = (int64_t)blockIdx.x * GLLM_CUDA_PAD_ROWS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= p.B * p.H * p.S)
        return;
    const int64_t s = row % p.S, bh = row / p.S, h = bh % p.H, b = bh / p.H;
    const uint16_t *src = static_cast<const uint16_t *>(p.src) + b * p.src_st[0] +
                          h * p.src_st[1] + s * p.src_st[2];
    uint16_t *dst = static_cast<uint16_t *>(p.dst) + b * p.dst_st[0] + h * p.dst_st[1] +
                    s * p.dst_st[2];
    for (int c = lane; c < p.dst_cols; c += 32)
        dst[c] = c < p.cols ? src[c] : (uint16_t)0;
}

} // namespace

#define GLLM_CUDA_ENTRY_PAD(T, D, FLAGS, symbol)                                               \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_PAD_ROWS * 32)                      \
        symbol(const gllm_cuda_pad_params p)                                                   \
    {                                                                                          \
        pad_rows(p);                                                                           \
    }
GLLM_CUDA_PAD_KERNELS(GLLM_CUDA_ENTRY)
