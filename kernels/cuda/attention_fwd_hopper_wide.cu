// Hopper prefill at head dim 256 (Gemma 2 and 3, and head dims padded onto it) and at Dqk 192
// with Dv 128 (DeepSeek's prefill): wgmma, sm_90a.
//
// Why a kernel of its own. The D = 64/128 kernel (attention_fwd_hopper.cu) walks key tiles of
// 128: at D = 256 one K or V tile is 64 KiB, so Q and two stages would need 320 KiB of shared
// memory, and a warpgroup's O (64 x 256 fp32, 128 registers a thread) beside 128-key scores (64)
// and P (32) leaves nothing for addresses. Here a key tile is 80 keys (GLLM_CUDA_HPW_KEYS, as
// FA3 takes at D = 256): Q (64 KiB) and two stages of K and V (160 KiB) fit in 225 KiB, and a
// consumer holds O (128), S (40) and P (20). 80 keys ran 2.6-4.6% faster than 64 on an H200
// (Q K^T reads 35.5 flops a byte of shared memory against 32, and there are fewer tiles). Each
// of the D = 128 kernel's tuning steps (persistence, ping-pong turns, the split, the
// epilogue under the next tile's Q K^T) is written for its 128-key walk; this one keeps the
// parts that carry over unchanged and no more: one producer warpgroup loading K, V and Q with
// cp.async into the 128-byte swizzle, two consumer warpgroups of 64 query rows each that run
// free of each other (so one's softmax runs under the other's GEMMs as they drift), and inside
// each the FlashAttention-3 pipeline: tile j's S = Q K^T issued before tile j - 1's O += P V,
// tile j's softmax run while P V is on the tensor cores. A block takes one 128-row tile of one
// head, the heaviest (causal) tiles first. DV, V's head dim, may be below D (192 / 128: Q K^T
// over three 64-column blocks, P V over one 128-column one; K and V tiles of their own sizes).
//
// VAR (a window, a chunk, a soft-cap, ALiBi, sinks: Gemma 2 and 3's local layers): the block
// reads the key tiles its rows' intervals span (var_keys), each warpgroup computes those its own
// rows span and only waits for and releases the others, and scores are transformed and masked
// by var_tile, as the D = 64/128 variant kernel does; the sink joins each row at the end.
//
// Built for every target of the fatbin, but its body exists only in the sm_90a image: the
// daemon launches it only on compute capability 9.0 with that image loaded.
#include "hopper_consumer.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
template <typename T, bool CAUSAL, int D, int DV, bool VAR>
__device__ __forceinline__ void attention_fwd_wide(const gllm_cuda_attn_params &p,
                                                   const gllm_cuda_variant *var)
{
    constexpr int ROWS = GLLM_CUDA_HPW_ROWS, KEYS = GLLM_CUDA_HPW_KEYS;
    constexpr int STAGES = GLLM_CUDA_HPW_STAGES, THREADS = GLLM_CUDA_HPW_THREADS;
    constexpr uint32_t K_TILE = KEYS * D * 2, V_TILE = KEYS * DV * 2;   // bytes of a K, a V tile
    constexpr uint32_t STAGE = K_TILE + V_TILE;
    constexpr uint32_t BLOCK = KEYS * 128;           // one 64-column block of such a tile
    static_assert(D % 64 == 0 && DV % 128 == 0 && DV <= D && ROWS == 128 &&
                      (KEYS == 64 || KEYS == 80), "tile shapes below");
    // setmaxnreg as Hp's: 168 a thread at launch, the producer down to 32, the consumers up to
    // what that frees (232).
    constexpr int START = 65536 / THREADS / 8 * 8, PRODUCER = 32;
    constexpr int CONSUMER = (START * THREADS - 128 * PRODUCER) / 256 / 8 * 8;
    static_assert(CONSUMER <= 256 && 128 * PRODUCER + 256 * CONSUMER <= START * THREADS, "regs");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // kv_bar's four arrays: full K, full V (the producer's 128 threads arrive once their copies
    // have landed), empty K, empty V (both consumer warpgroups' 256 threads are done with it).
    __shared__ __align__(8) uint64_t bars[4 * STAGES];
    const uint32_t s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;   // swizzle atoms: 1 KiB
    const uint32_t s_kv = s_q + ROWS * D * 2;        // stage s: K at s_kv + s STAGE, V after
    const uint32_t full0 = smem_addr(&bars[0]), empty0 = kv_bar<STAGES>(full0, 0, 2);

    const int warp = threadIdx.x / 32;
    const int Sq = (int)p.Sq, Skv = (int)p.Skv, shift = Skv - Sq;
    const int num_m = (Sq + ROWS - 1) / ROWS;
    const int m0 = (num_m - 1 - (int)blockIdx.x) * ROWS;       // heaviest (causal) tiles first
    const int bh = (int)blockIdx.y, b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    // Key tiles the block reads, [k_first, k_first + n_tiles): causal, those with a key <= its
    // last row + shift; with a variant, those its first row's to its last row's intervals span.
    int k_first = 0, n_tiles;
    if constexpr (VAR) {
        const int lo = var_keys(*var, CAUSAL, m0 + shift, Skv).lo;
        const int hi = var_keys(*var, CAUSAL, min(m0 + ROWS, Sq) - 1 + shift, Skv).hi;
        k_first = lo / KEYS;
        n_tiles = hi >= k_first * KEYS ? hi / KEYS + 1 - k_first : 0;
    } else {
        const int n_end = CAUSAL ? max(0, min(Skv, m0 + ROWS + shift)) : Skv;
        n_tiles = (n_end + KEYS - 1) / KEYS;
    }
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2 * STAGES; i++) {
            mbar_init(full0 + 8 * i, 128);
            mbar_init(empty0 + 8 * i, 256);
        }
    }
    __syncthreads();

    if (warp >= 8) {
        // The producer: K and V of key tile j into stage j % STAGES once both consumers are
        // done with it, Q after tile 0's V, each its own commit group; a stage is announced
        // once its copies have landed (wait_group 1: all but the newest, the next K), fenced
        // for wgmma's proxy: attention_fwd_hopper.cu's cp.async producer on one tile.
        regs_dec<PRODUCER>();
        const int i = threadIdx.x - 256;
        const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
        const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
        int pend = -1;
        for (int j = 0; j < n_tiles; j++) {
            const uint32_t st = (uint32_t)j % STAGES, phase = ((uint32_t)j / STAGES - 1) & 1;
            const uint32_t sk = s_kv + st * STAGE;
            if (j >= STAGES)
                mbar_wait(kv_bar<STAGES>(empty0, st, 0), phase);
            copy_tile<D, KEYS>(sk, K, p.k_st[2], (k_first + j) * KEYS, Skv, i);
            cp_async_commit();
            if (pend >= 0) {
                asm volatile("cp.async.wait_group 1;\n" ::: "memory");
                fence_proxy_async();
                mbar_arrive(kv_bar<STAGES>(full0, pend, 0));
                mbar_arrive(kv_bar<STAGES>(full0, pend, 1));
            }
            if (j >= STAGES)
                mbar_wait(kv_bar<STAGES>(empty0, st, 1), phase);
            copy_tile<DV, KEYS>(sk + K_TILE, V, p.v_st[2], (k_first + j) * KEYS, Skv, i);
            cp_async_commit();
            pend = (int)st;
            if (j == 0) {
                const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1];
                copy_tile<D, ROWS>(s_q, Q, p.q_st[2], m0, Sq, i);
                cp_async_commit();
            }
        }
        if (pend >= 0) {
            cp_async_wait_all();
            fence_proxy_async();
            mbar_arrive(kv_bar<STAGES>(full0, pend, 0));
            mbar_arrive(kv_bar<STAGES>(full0, pend, 1));
        }
        return;
    }

    // Consumers: warpgroup wg takes query rows [m0 + 64 wg, m0 + 64 wg + 64). It computes the
    // block's key tiles [c_first, c_end) (causal: up to its last row's diagonal; with a variant,
    // its rows' intervals; none for rows past Sq) and only waits for and releases the rest,
    // which the other warpgroup still reads.
    regs_inc<CONSUMER>();
    // The warpgroup broadcast from lane 0, so that what derives from it (the descriptors of its
    // Q rows, stage 0's K, K-major, and V, MN-major) stays in uniform registers.
    const int lane = threadIdx.x % 32, wg = __shfl_sync(0xffffffff, warp / 4, 0);
    const int t = lane & 3;
    const uint64_t dq = desc_k_major(s_q + (uint32_t)wg * 64 * 128), dk0 = desc_k_major(s_kv);
    const uint64_t dv0 = desc_mn_major<BLOCK>(s_kv + K_TILE);
    // As attention_fwd.cu: a zero scale becomes the smallest normal float, masked scores are
    // -inf once scaled whatever the scale's sign.
    // var_tile leaves transformed scores in units of var_xform_scale.
    const bool xform = VAR && (var->soft_cap > 0.f || var->alibi);
    const float qk_scale = xform ? var_xform_scale(*var) : p.scale != 0.f ? p.scale * LOG2E : FLT_MIN;
    const bool pos_scale = qk_scale > 0.f;
    const float masked = pos_scale ? -INFINITY : INFINITY;
    const int r_wg = m0 + wg * 64, row0 = r_wg + (warp % 4) * 16 + (lane >> 2);
    int c_first = 0, c_end;
    [[maybe_unused]] VarRows vr;
    if constexpr (VAR) {
        const int first = r_wg + shift, last = min(r_wg + 63, Sq - 1) + shift;
        const int lo = var_keys(*var, CAUSAL, first, Skv).lo, hi = var_keys(*var, CAUSAL, last, Skv).hi;
        c_first = lo / KEYS - k_first;
        c_end = r_wg >= Sq || hi < lo ? c_first : min(n_tiles, hi / KEYS + 1 - k_first);
        vr = var_rows(var, CAUSAL, row0 + shift, first, last, Skv, p.scale, h);
    } else {
        const int last_key = r_wg + 63 + shift;
        c_end = r_wg >= Sq     ? 0
                : !CAUSAL      ? n_tiles
                : last_key < 0 ? 0
                               : min(n_tiles, last_key / KEYS + 1);
    }
    auto full = [&](int j, int v) {
        mbar_wait(kv_bar<STAGES>(full0, (uint32_t)j % STAGES, v), ((uint32_t)j / STAGES) & 1);
    };
    auto release = [&](int j, int v) {
        mbar_arrive(kv_bar<STAGES>(empty0, (uint32_t)j % STAGES, v));
    };
    float s[KEYS / 2], o[DV / 2];
    uint32_t pf[KEYS / 16][4];
    // S = Q K^T of key tile j (Q's and K's 64-column blocks ROWS and KEYS rows of 128 bytes).
    auto issue_qk = [&](int j) {
        const uint64_t dk = desc_add(dk0, (uint32_t)j % STAGES * STAGE);
        pin(s);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t kcol = (uint32_t)(kk & 3) * 32;
            const uint64_t a = desc_add(dq, (uint32_t)(kk >> 2) * ROWS * 128 + kcol);
            const uint64_t k = desc_add(dk, (uint32_t)(kk >> 2) * BLOCK + kcol);
            if constexpr (KEYS == 80)
                wgmma_ss_m64n80k16(Tag<T>(), s, a, k, kk > 0);
            else
                wgmma_ss_m64n64k16(Tag<T>(), s, a, k, kk > 0);
        }
        wg_commit();
    };
    // O += P V of key tile j: per 16 keys, one m64n128 wgmma per 128 columns of O (the
    // accumulator of columns 128 q.. is o[64 q..], the layout store_o_row reads).
    auto issue_pv = [&](int j) {
        const uint64_t dv = desc_add(dv0, (uint32_t)j % STAGES * STAGE);
        pin(o);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; kk++)
#pragma unroll
            for (int q = 0; q < DV / 128; q++)
                wgmma_rs<1>(Tag<T>(), *reinterpret_cast<float(*)[64]>(&o[64 * q]), pf[kk],
                            desc_add(dv, (uint32_t)kk * 2048 + (uint32_t)q * 2 * BLOCK), 1);
        wg_commit();
    };
    auto mask = [&](int j) {
        if constexpr (VAR)
            var_tile(s, (k_first + j) * KEYS, Skv, vr, t, masked);
        else
            mask_tile<CAUSAL>(s, j * KEYS, Skv, r_wg, row0, shift, t, masked);
    };
    auto drain = [&](int j) {                            // a tile the other warpgroup computes
        full(j, 0);
        release(j, 0);
        full(j, 1);
        release(j, 1);
    };
    for (int j = 0; j < c_first; j++)
        drain(j);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, scale_o[2];
#pragma unroll
    for (int i = 0; i < DV / 2; i++)
        o[i] = 0.f;
    if (c_end > c_first) {
#pragma unroll
        for (int i = 0; i < KEYS / 2; i++)               // defined before the wgmma reads them
            s[i] = 0.f;
        full(c_first, 0);
        issue_qk(c_first);
        wg_wait<0>();
        pin(s);
        release(c_first, 0);
        mask(c_first);
        softmax_tile(s, row_max, row_sum, scale_o, qk_scale, pos_scale);   // O is 0
        pack_p<T>(s, pf);
        bool pending = false;                            // O owes scale_o before its next P V
        for (int j = c_first + 1; j < c_end; j++) {
            full(j, 0);
            full(j - 1, 1);
            issue_qk(j);
            if (pending)
                rescale_o<DV>(o, scale_o);
            issue_pv(j - 1);
            wg_wait<1>();                                // S of j is in; P V of j - 1 may not be
            pin(s);
            release(j, 0);
            mask(j);
            pending = softmax_tile(s, row_max, row_sum, scale_o, qk_scale, pos_scale);
            wg_wait<0>();
            pin(o);
            pin(pf);
            release(j - 1, 1);
            pack_p<T>(s, pf);
        }
        full(c_end - 1, 1);
        if (pending)
            rescale_o<DV>(o, scale_o);
        issue_pv(c_end - 1);
        wg_wait<0>();
        pin(o);
        pin(pf);
        release(c_end - 1, 1);
    }
    for (int j = max(c_first, c_end); j < n_tiles; j++)
        drain(j);

    // The epilogue as the D = 64 kernel's: lse, then O from registers, 16 bytes a lane.
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float sum = row_sum[hr];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        const int row = row0 + 8 * hr;
        float m = row_max[hr], keep = 1.f;
        if (VAR && var->sinks)
            keep = var_join_sink(var->sinks[h] * LOG2E, m, sum);
        const float inv = sum > 0.f ? keep * __fdividef(1.f, sum) : 0.f;
        if (row < Sq && p.lse && t == 0)
            p.lse[b * p.lse_st[0] + h * p.lse_st[1] + (int64_t)row * p.lse_st[2]] =
                sum > 0.f ? (m + __log2f(sum)) * LN2 : -INFINITY;
        store_o_row<T, DV>(O + (int64_t)row * p.o_st[2], o, hr, inv, t, row < Sq);
    }
}
#endif // GLLM_HAVE_WGMMA

} // namespace

#ifdef GLLM_HAVE_WGMMA
#define HPW_BODY(T, CAUSAL, D) attention_fwd_wide<T, CAUSAL, D, GLLM_CUDA_HPW_DV(D), false>(p, nullptr)
#define HPW_VAR_BODY(T, CAUSAL, D) \
    attention_fwd_wide<T, CAUSAL, D, GLLM_CUDA_HPW_DV(D), true>(vp.a, &vp.v)
#else
#define HPW_BODY(T, CAUSAL, D) __trap()  // never launched off sm_90a (see the header comment)
#define HPW_VAR_BODY(T, CAUSAL, D) __trap()
#endif
#define GLLM_CUDA_ENTRY_HOPPER_WIDE(T, D, FLAGS, symbol)                                       \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HPW_THREADS, 1)                     \
        symbol(const gllm_cuda_attn_params p)                                                  \
    {                                                                                          \
        HPW_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                       \
    }
GLLM_CUDA_HOPPER_WIDE_KERNELS(GLLM_CUDA_ENTRY)

// GLLM_CUDA_ENTRY_HOPPER_WIDE_VAR: the same with a variant (vp.Dv is GLLM_CUDA_HPW_DV(D): other
// Dv below D are padded).
#define GLLM_CUDA_ENTRY_HOPPER_WIDE_VAR(T, D, FLAGS, symbol)                                   \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HPW_THREADS, 1)                     \
        symbol(const __grid_constant__ gllm_cuda_attn_var_params vp)                           \
    {                                                                                          \
        HPW_VAR_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                   \
    }
GLLM_CUDA_HOPPER_WIDE_VAR_KERNELS(GLLM_CUDA_ENTRY)
