// Masking and the online softmax of the Hopper consumers' score tiles: what a new attention
// variant (a window, a soft-cap) changes, applied to a tile between its Q K^T and its P V.
#ifndef GLLM_HOPPER_SOFTMAX_CUH
#define GLLM_HOPPER_SOFTMAX_CUH

#include "hopper_common.cuh"
#include "variant.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
// The largest (MAX) or smallest score of each of a thread's two rows, across the 4 lanes
// that share them; a uniform branch picks the direction, not a select per score.
template <bool MAX, int N>
__device__ __forceinline__ void row_extreme(const float (&s)[N], float (&out)[2])
{
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float x = s[2 * hr];
#pragma unroll
        for (int n = 0; n < N / 4; n++)
            x = MAX ? fmaxf(x, fmaxf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]))
                    : fminf(x, fminf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]));
        const float y = __shfl_xor_sync(0xffffffff, x, 1);
        x = MAX ? fmaxf(x, y) : fminf(x, y);
        const float z = __shfl_xor_sync(0xffffffff, x, 2);
        out[hr] = MAX ? fmaxf(x, z) : fminf(x, z);
    }
}

// Mask the tail tile (keys >= Skv) and, causal, the tiles crossing this warpgroup's
// diagonal (row sees keys <= row + shift). row0: this thread's first row. A tile of N
// scores a thread holds 2 N keys (HP_KEYS at N = 64).
template <bool CAUSAL, int N>
__device__ __forceinline__ void mask_tile(float (&s)[N], int n0, int Skv, int r_wg, int row0,
                                          int shift, int t, float masked)
{
    constexpr int KEYS = 2 * N;
    if (n0 + KEYS > Skv || (CAUSAL && n0 + KEYS - 1 > r_wg + shift)) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int key = n0 + (i / 4) * 8 + 2 * t + (i & 1);
            if (key >= Skv || (CAUSAL && key > row0 + 8 * ((i >> 1) & 1) + shift))
                s[i] = masked;
        }
    }
}

// A consumer thread's rows as a variant sees them (the VAR kernels): pos0 the position of its
// first row (the second is pos0 + 8), and the warpgroup's edges: a key tile inside [edge_lo,
// edge_hi] (the last row's first key, the first row's last) is seen whole by every row of the
// warpgroup, so it needs no mask. With xform (a soft-cap or ALiBi) every score is transformed
// into log2 units, up to the softmax's scale (var_xform_scale): a soft-cap alone leaves
// tanh(s s_over) (s_over = scale / cap) and the scale is cap2 = cap log2 e, folded into the
// exponential's FMA; with ALiBi the score becomes cap2 tanh(s s_over) or s sc2 (sc2 = scale
// log2 e), plus slope2 (key - pos) (slope2 = the slope times log2 e), and the scale is 1.
struct VarRows {
    const gllm_cuda_variant *v;
    int pos0, edge_lo, edge_hi;
    float sc2, s_over, cap2, slope2;
    bool causal, cap, alibi;
};

// The softmax's scale of the scores var_tile has transformed (above).
__device__ __forceinline__ float var_xform_scale(const gllm_cuda_variant &v)
{
    return v.alibi ? 1.f : v.soft_cap * LOG2E;
}

// The rows of warpgroup positions [first, last] (this thread's first at pos0), head h.
__device__ __forceinline__ VarRows var_rows(const gllm_cuda_variant *v, bool causal, int pos0,
                                            int first, int last, int Skv, float scale, int h)
{
    VarRows r;
    r.v = v, r.causal = causal, r.pos0 = pos0;
    r.edge_lo = var_keys(*v, causal, last, Skv).lo;
    r.edge_hi = var_keys(*v, causal, first, Skv).hi;
    const float cap = v->soft_cap;
    r.sc2 = scale * LOG2E;
    r.s_over = cap > 0.f ? scale / cap : 0.f;
    r.cap2 = cap * LOG2E;
    r.slope2 = v->alibi ? v->alibi[h] * LOG2E : 0.f;
    r.cap = cap > 0.f;
    r.alibi = v->alibi != nullptr;
    return r;
}

// Every score of a tile transformed (VarRows), one form per instance: the loop has no branch,
// so the compiler interleaves the scores' tanh and FMAs. With the form chosen per score inside
// one loop it did not: each score's tanh waited on the last, among branches (0.40x of the
// plain kernel's speed).
template <bool CAP, bool ALIBI, int N>
__device__ __forceinline__ void var_xform(float (&s)[N], int n0, const VarRows &r, int t)
{
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float base = r.slope2 * (float)(n0 + 2 * t - r.pos0 - 8 * hr);  // ALiBi at column 0
#pragma unroll
        for (int n = 0; n < N / 4; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 4 * n + 2 * hr + e;
                float x = CAP ? fast_tanh(s[i] * r.s_over) : s[i];
                if (ALIBI)
                    x = fmaf(x, CAP ? r.cap2 : r.sc2, fmaf(r.slope2, (float)(8 * n + e), base));
                s[i] = x;
            }
    }
}

// The scores of keys outside each row's interval masked, on a tile across an edge (the tail
// among them: a row's interval ends before Skv). A score's key is n0 + 2 t + c for a
// compile-time c, so each is two compares against the row's bounds moved by n0 + 2 t.
template <int N>
__device__ __forceinline__ void var_mask(float (&s)[N], int n0, int Skv, const VarRows &r, int t,
                                         float masked)
{
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const VarKeys k = var_keys(*r.v, r.causal, r.pos0 + 8 * hr, Skv);
        const int lo = k.lo - n0 - 2 * t, hi = k.hi - n0 - 2 * t;
#pragma unroll
        for (int n = 0; n < N / 4; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 4 * n + 2 * hr + e, c = 8 * n + e;
                s[i] = c >= lo && c <= hi ? s[i] : masked;
            }
    }
}

// mask_tile for a variant: every score transformed where r has a transform, then on a tile
// across an edge the keys outside each row's interval masked. The transform's form and the
// edge are warpgroup-uniform branches, each around a whole tile's loop. A tile of N scores a
// thread holds 2 N keys (HP_KEYS at N = 64).
template <int N>
__device__ __forceinline__ void var_tile(float (&s)[N], int n0, int Skv, const VarRows &r, int t,
                                         float masked)
{
    if (r.cap && r.alibi)
        var_xform<true, true>(s, n0, r, t);
    else if (r.cap)
        var_xform<true, false>(s, n0, r, t);
    else if (r.alibi)
        var_xform<false, true>(s, n0, r, t);
    if (n0 < r.edge_lo || n0 + 2 * N - 1 > r.edge_hi)
        var_mask(s, n0, Skv, r, t, masked);
}

// Online softmax of one score tile, base 2, with attention_fwd.cu's lazy rescale: the
// reference max moves only when a row's maximum passes it by more than slack (log2 units; 8
// in the walk). rescale_to_max takes the tile's row maxima and moves the references, rescaling
// row_sum at once; it returns whether O must be multiplied by scale_o (warp-uniform). exp_tile
// leaves exp2(s * qk_scale - reference) in s and adds them to sum, row by row.
template <int N>
__device__ __forceinline__ bool rescale_to_max(const float (&s)[N], float (&row_max)[2],
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
template <int N>
__device__ __forceinline__ void exp_tile_ref(float (&s)[N], const float (&ref)[2], float qk_scale,
                                             float (&sum)[2])
{
#pragma unroll
    for (int n = 0; n < N / 4; n++) {
        s[4 * n] = fast_exp2(fmaf(s[4 * n], qk_scale, -ref[0]));
        s[4 * n + 1] = fast_exp2(fmaf(s[4 * n + 1], qk_scale, -ref[0]));
        s[4 * n + 2] = fast_exp2(fmaf(s[4 * n + 2], qk_scale, -ref[1]));
        s[4 * n + 3] = fast_exp2(fmaf(s[4 * n + 3], qk_scale, -ref[1]));
        sum[0] += s[4 * n] + s[4 * n + 1];
        sum[1] += s[4 * n + 2] + s[4 * n + 3];
    }
}

template <int N>
__device__ __forceinline__ void exp_tile(float (&s)[N], const float (&row_max)[2], float qk_scale,
                                         float (&sum)[2])
{
    const float ref[2] = {exp_ref(row_max[0]), exp_ref(row_max[1])};
    exp_tile_ref(s, ref, qk_scale, sum);
}

// Both, for a tile whose maxima are taken first; row_sum gets the tile's sums.
template <int N>
__device__ __forceinline__ bool softmax_tile(float (&s)[N], float (&row_max)[2],
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
// (m64n64) tile is, 16 keys at a time, the A layout of an m64k16 one.
template <typename T, int N>
__device__ __forceinline__ void pack_p(const float (&s)[N], uint32_t (&pf)[N / 8][4])
{
#pragma unroll
    for (int n = 0; n < N / 4; n++) {
        pf[n / 2][(n & 1) * 2] = Elem<T>::pack(s[4 * n], s[4 * n + 1]);
        pf[n / 2][(n & 1) * 2 + 1] = Elem<T>::pack(s[4 * n + 2], s[4 * n + 3]);
    }
}

#endif // GLLM_HAVE_WGMMA

} // namespace

#endif
