// The dense kernels' reading of an attention variant (backend_api.h's struct attn_variant):
// which keys a query position sees, and a visible score's transforms.
#ifndef GLLM_VARIANT_CUH
#define GLLM_VARIANT_CUH

#include "attention_params.h"
#include "mma_common.cuh"

namespace {

// floor(a / b) for b > 0: dense positions i = r + Skv - Sq are negative where Sq > Skv, and
// a chunk is floor(i / chunk), not C's truncation toward zero.
__device__ __forceinline__ int floor_div(int a, int b)
{
    const int q = a / b;
    return q * b > a ? q - 1 : q;
}

// The keys [lo, hi] (inclusive; empty when lo > hi) that query position i sees among
// [0, skv): causality, the window's edges and the chunk all narrow one interval, and each
// bound is non-decreasing in i, so a tile of rows sees [lo(first row), hi(last row)].
struct VarKeys {
    int lo, hi;
};
__device__ __forceinline__ VarKeys var_keys(const gllm_cuda_variant &v, bool causal, int i, int skv)
{
    int lo = 0, hi = skv - 1;
    if (causal)
        hi = min(hi, i);
    if (v.window_left >= 0)
        lo = max(lo, i - v.window_left);
    if (v.window_right >= 0)
        hi = min(hi, i + v.window_right);
    if (v.chunk > 0) {
        const int c0 = floor_div(i, v.chunk) * v.chunk;
        lo = max(lo, c0), hi = min(hi, c0 + v.chunk - 1);
    }
    return {lo, hi};
}

// tanh on the SFU (sm_75 and later: every image gllm builds); its error, about 2^-11
// relative, is below what the 16-bit probabilities keep.
__device__ __forceinline__ float fast_tanh(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// A visible key's score in log2 units: s the raw q.k, cap the soft-cap (0: none) with
// inv_cap its inverse, slope2 the head's ALiBi slope times log2(e), dist j - i.
__device__ __forceinline__ float var_score(float s, float scale, float cap, float inv_cap,
                                           float slope2, int dist)
{
    float y = s * scale;
    if (cap > 0.f)
        y = cap * fast_tanh(y * inv_cap);
    return fmaf(slope2, (float)dist, y * LOG2E);
}

// The sink (a key of logit s2 in log2 units and value zero) joined to a finished row whose
// sum is relative to 2^m (m -inf: the row saw nothing): returns the factor its output takes
// and moves m and sum to the joined softmax's.
__device__ __forceinline__ float var_join_sink(float s2, float &m, float &sum)
{
    const float mf = fmaxf(m, s2);
    const float keep = m == -INFINITY ? 0.f : fast_exp2(m - mf);
    sum = sum * keep + fast_exp2(s2 - mf);
    m = mf;
    return keep;
}

} // namespace

#endif
