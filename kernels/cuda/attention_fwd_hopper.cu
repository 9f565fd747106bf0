// Hopper prefill for gllmd's CUDA backend: D = 64 and 128, causal or not, wgmma (sm_90a only).
//
// Why wgmma. The Ampere-style kernel (attention_fwd.cu) feeds the tensor cores through
// mma.sync from registers, and at D = 128 its 255 registers leave the tensor pipe idle most
// cycles. Here wgmma reads Q and K (for S = Q K^T) and V (for O += P V) from shared memory, so a
// warpgroup's registers hold only its scores, its output and P. Q as register fragments (A from
// registers) gave wrong scores from the second key tile on; from shared memory it is right and
// needs 12 fewer registers.
//
// The block. Persistent: one block per SM (fewer when there are fewer tiles) works through the
// tiles of query rows that hopper_schedule.h assigns it, round by round; a block per tile paid a
// prologue and an epilogue with its SM's tensor cores idle (5-25% of a block). A block is one
// producer warpgroup and consumer warpgroups of 64 query rows each: two at D = 128, three at
// D = 64, where a tile has half the GEMM work for the same softmax and two consumers could not
// cover each other. setmaxnreg moves registers from the producer (32 left) to the consumers
// (232 at D = 128, 160 at D = 64; Hp in hopper_common.cuh).
//
// The producer loads K and V tiles of 128 keys in wgmma's 128-byte swizzle into a ring of
// stages (4 at D = 64; 2 at D = 128, whose third stage's shared memory holds the O tile), K and
// V of each stage on mbarriers of their own: full (the tile is in) and empty (every consumer is
// done with it). A consumer gives K back once its Q K^T has completed and V once its P V has,
// so K, needed and released a turn earlier, is loaded ahead of V. It loads with TMA where the
// daemon could encode tensor maps of the tensors (gllm_attn_fwd_hopper_tma_*: one elected
// thread, the bytes announced on the full barrier, rows past the tensor zero-filled), with
// cp.async otherwise (gllm_attn_fwd_hopper_*: the whole warpgroup, any layout tc_eligible
// admits). A tile's Q comes with its first K tile, once every consumer has read the previous
// tile's Q for the last time (q_empty), prefetched into L2 before that wait. The load counter
// and the barriers' phases run on across the block's tiles, so the next tile's K and V go out
// while the consumers finish the current one.
//
// The consumers (hopper_consumer.cuh) walk a tile's key tiles pipelined inside the warpgroup
// (FlashAttention-3, section 3.2): tile j's S = Q K^T is issued before tile j - 1's O += P V, and
// tile j's softmax (hopper_softmax.cuh) runs while P V is on the tensor cores. At D = 128 the
// two consumers take turns at issuing their GEMMs on named barriers (ping-pong), so that one's
// softmax runs under the other's GEMMs by construction, not by drift; at D = 64 three consumers
// drift freely. At D = 128 a tile's last P V and the next tile's first Q K^T share a turn, and
// the epilogue (O to shared memory, then a TMA store) runs under that Q K^T; D = 64 stores O
// from registers, 16 bytes a lane. Without a causal mask at D = 128 the softmax is speculative:
// a tile's exponentials are taken against the row maxima as they stand and the rare tile whose
// sums pass the lazy rescale's bound is computed again exactly.
//
// Split tiles. At D = 128 without a causal mask, where a part-filled last round would leave
// most blocks idle, the schedule cuts the units of the last rounds by keys into equal ranges
// (stream-K's hybrid): each block walks its whole units, then its parts of the split ones; the
// two parts of a cut unit merge through a workspace (split_merge), the second to finish writing.
//
// Built for every target of the fatbin, but its body exists only in the sm_90a image: the
// daemon launches it only on compute capability 9.0 with that image loaded.
#include "hopper_consumer.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
// The block's tiles in schedule order (see hopper_schedule.h), one at a time: next() gives
// the head and m-tile of the next one, false when there is none; done() says whether the one
// just given was the block's last. Producer and consumers walk the same sequence: the whole
// units round by round, then (PARTS, a second walk) the block's parts of the split units,
// key tiles [k0, k0 + nk) of the tile given, its partial result in slot part.
template <bool CAUSAL, bool PARTS> struct TileWalk {
    const gllm_cuda_hp_sched &sc;
    const gllm_cuda_hp_split *sp;                    // PARTS: the launch's split units
    int r = 0, k = 0;                                // the round, the tile of unit u to do next
    int u = PARTS ? -1 : gllm_cuda_hp_round_unit(&sc, 0, (int)blockIdx.x);
    // PARTS: the split units, the block's split key tiles still to do, [a, e); the part given
    int a = PARTS ? gllm_cuda_hp_split_at(&sc, sp, (int)blockIdx.x) : 0;
    int e = PARTS ? gllm_cuda_hp_split_at(&sc, sp, (int)blockIdx.x + 1) : 0;
    int k0 = 0, nk = 0, part = -1;
    __device__ __forceinline__ bool next(int &bh, int &mb)
    {
        int m[2];
        if constexpr (PARTS) {
            if (a >= e)
                return false;
            const gllm_cuda_hp_piece pc =
                gllm_cuda_hp_split_piece(&sc, sp, (int)blockIdx.x, a, e);
            gllm_cuda_hp_unit(&sc, CAUSAL, pc.unit, &bh, m);
            mb = m[0];
            k0 = pc.k0, nk = pc.nk, part = pc.part;
            a += pc.nk;
            return true;
        }
        if (u < 0)
            return false;
        const int n = gllm_cuda_hp_unit(&sc, CAUSAL, u, &bh, m);
        mb = k == 0 ? m[0] : m[1];
        if (k == n - 1)
            u = gllm_cuda_hp_round_unit(&sc, ++r, (int)blockIdx.x), k = 0;
        else
            k++;
        return true;
    }
    __device__ __forceinline__ bool done() const { return PARTS ? a >= e : u < 0; }
    // Of the tile's n key tiles, those given (a part's; all of a whole one), from first().
    __device__ __forceinline__ int tiles_of(int n) const { return PARTS ? nk : n; }
    __device__ __forceinline__ int first() const { return PARTS ? k0 : 0; }
    __device__ __forceinline__ int slot() const { return PARTS ? part : -1; }
};

// f(bh, m_block, walk) for each of the block's tiles of walk TileWalk<CAUSAL, PARTS>,
// walk.done(): the walk's final one. One call site per walk, so the body is inlined: its
// arrays stay in registers.
template <bool CAUSAL, bool PARTS, typename F>
__device__ __forceinline__ void for_each_tile(const gllm_cuda_hp_sched &sc,
                                              const gllm_cuda_hp_split *sp, F &&f)
{
    TileWalk<CAUSAL, PARTS> walk{sc, sp};
    for (int bh, mb; walk.next(bh, mb);)
        f(bh, mb, walk);
}

// Key tiles that query rows [m0, m0 + ROWS) read: causal, those with a key <= the last row
// + shift (none when that is below 0).
template <bool CAUSAL, int ROWS>
__device__ __forceinline__ int key_tiles(int m0, int Skv, int shift)
{
    const int n_end = CAUSAL ? max(0, min(Skv, m0 + ROWS + shift)) : Skv;
    return (n_end + HP_KEYS - 1) / HP_KEYS;
}

template <bool B> struct Flag {
    static constexpr bool value = B;
};

// A split tile's part as consumer warpgroup wg holds it (o unscaled, row_max the reference
// maximum of each of the thread's two rows, row_sum the thread's share of their sums): into
// slot part of the workspace, then counted in on the cut's counter (part / 2). The part that
// counts in second reads the other's slot (part ^ 1), adds it to its own, clears the counter
// for the next launch and returns true: it writes the tile. The first returns false. As the
// paged decode's split (paged_attention.cu): every part writes, the last one merges, so no
// block ever waits for another. s_word: the warpgroup's shared word for the count's answer.
template <int D, int CONSUMERS>
__device__ __forceinline__ bool split_merge(const gllm_cuda_hp_params *hp, int part, int wg,
                                         float (&o)[D / 2], float (&row_max)[2],
                                         float (&row_sum)[2], uint32_t s_word)
{
    constexpr int V4 = GLLM_CUDA_HP_PART_FLOATS(D) / 4;       // float4s a thread
    const int i = threadIdx.x % 128;
    float4 *slot = reinterpret_cast<float4 *>(hp->split_parts) +
                   (int64_t)(part * CONSUMERS + wg) * V4 * 128 + i;
#pragma unroll
    for (int k = 0; k < D / 8; k++)
        __stcg(slot + k * 128, make_float4(o[4 * k], o[4 * k + 1], o[4 * k + 2], o[4 * k + 3]));
    __stcg(slot + (D / 8) * 128, make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]));
    __threadfence();
    wg_sync(wg);
    if (i == 0) {
        uint32_t *count = hp->split_counts + (part >> 1) * CONSUMERS + wg;
        const uint32_t second = atomicAdd(count, 1u) == 1u;
        if (second)
            *count = 0;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(s_word), "r"(second) : "memory");
    }
    wg_sync(wg);
    uint32_t second;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(second) : "r"(s_word) : "memory");
    if (!second)
        return false;
    __threadfence();
    // The sums are taken in slot order, the tile's first part (even slot) the fused one, so
    // they are the same whichever block counted in second: a * x + b * y left to the compiler
    // becomes one fused multiply-add whose rounding depends on which product is fused, and
    // with this block's part always first the result changed with the order the blocks
    // finished in (against deterministic = on's promise). __fmaf_rn and __fmul_rn pin the
    // rounding, so this block's part stays in its registers; only the other's is read.
    const float4 *other = reinterpret_cast<const float4 *>(hp->split_parts) +
                          (int64_t)((part ^ 1) * CONSUMERS + wg) * V4 * 128 + i;
    const bool mine_first = !(part & 1);
    auto merge = [mine_first](float mine, float f_mine, float theirs, float f_theirs) {
        return mine_first ? __fmaf_rn(mine, f_mine, __fmul_rn(theirs, f_theirs))
                          : __fmaf_rn(theirs, f_theirs, __fmul_rn(mine, f_mine));
    };
    const float4 ms = __ldcg(other + (D / 8) * 128);
    const float m_theirs[2] = {ms.x, ms.y}, l_theirs[2] = {ms.z, ms.w};
    float f_mine[2], f_theirs[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float mx = fmaxf(row_max[hr], m_theirs[hr]);
        f_mine[hr] = row_max[hr] == -INFINITY ? 0.f : exp2f(row_max[hr] - mx);
        f_theirs[hr] = m_theirs[hr] == -INFINITY ? 0.f : exp2f(m_theirs[hr] - mx);
        row_sum[hr] = merge(row_sum[hr], f_mine[hr], l_theirs[hr], f_theirs[hr]);
        row_max[hr] = mx;
    }
#pragma unroll
    for (int k = 0; k < D / 8; k++) {
        const float4 b = __ldcg(other + k * 128);
        o[4 * k] = merge(o[4 * k], f_mine[0], b.x, f_theirs[0]);
        o[4 * k + 1] = merge(o[4 * k + 1], f_mine[0], b.y, f_theirs[0]);
        o[4 * k + 2] = merge(o[4 * k + 2], f_mine[1], b.z, f_theirs[1]);
        o[4 * k + 3] = merge(o[4 * k + 3], f_mine[1], b.w, f_theirs[1]);
    }
    return true;
}

// TMA: the producer loads through hp's tensor maps (hp->a is p); else with cp.async from p
// (hp is null). VAR (with TMA): var is the job's variant; a tile reads the key tiles its rows'
// intervals span (from k0 on, var_keys), a warpgroup computes those up to its last row's, and
// the consumers mask and transform scores (var_tile) on the exact walk; the sink joins each
// row in the epilogue. No split units, and V goes behind K (the exact walk's order).
template <typename T, bool CAUSAL, int D, bool TMA, bool VAR = false>
__device__ __forceinline__ void attention_fwd_hopper(const gllm_cuda_attn_params &p,
                                                     const gllm_cuda_hp_params *hp,
                                                     const gllm_cuda_variant *var = nullptr)
{
    using S = Hp<D>;
    static_assert(TMA || !VAR, "the variant kernels load with TMA");
    // Units split by keys in the last rounds (gllm_cuda_hp_schedule) where the launch gave a
    // workspace: D = 128 not causal, the shapes whose part-filled last round cost most.
    constexpr bool SPLIT = TMA && !CAUSAL && D == 128 && !VAR;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // Full K[s], full V[s]: stage s holds its K (V) tile (TMA: the elected producer thread
    // arrives and the bytes land; cp.async: the producer's 128 threads arrive); empty K[s],
    // empty V[s]: every consumer warpgroup is done with it (all their threads arrive), in
    // kv_bar's order; q_empty: every consumer thread has read the tile's Q for the last time
    // (its last Q K^T has completed), so the producer may load the next tile's.
    __shared__ __align__(8) uint64_t bars[4 * S::STAGES + 1];
    __shared__ uint32_t split_second[S::CONSUMERS];  // split_merge's answer to its warpgroup
    // Swizzle atoms must start on 1024-byte boundaries; the launch adds that much slack.
    const uint32_t s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t s_kv = s_q + S::ROWS * D * 2;     // stage s: K at s_kv + 2s tiles, V after it
    const uint32_t s_o = s_kv + S::STAGES * 2 * S::KV_TILE;    // O: 64 rows per warpgroup
    const uint32_t full0 = smem_addr(&bars[0]), empty0 = kv_bar<S::STAGES>(full0, 0, 2);
    const uint32_t q_empty = smem_addr(&bars[4 * S::STAGES]);

    const int warp = threadIdx.x / 32;
    const int Hq = (int)p.Hq, group = (int)(p.Hq / p.Hkv);
    const int Sq = (int)p.Sq, Skv = (int)p.Skv;
    const int shift = Skv - Sq;                      // causal: row r sees keys <= r + shift
    // The schedule, split as the launch's hp->split says (keys 0: no workspace, nothing split).
    const gllm_cuda_hp_sched sc = gllm_cuda_hp_schedule(Sq, S::ROWS, (int)(p.B * p.Hq), CAUSAL,
                                                        (int)gridDim.x, SPLIT ? hp->split.keys : 0);
    // The key tiles of the tile at row m0: n of them from k0 (0 but with a variant).
    auto tile_keys = [&](int m0, int &k0, int &n) {
        if constexpr (VAR) {
            const VarKeys first = var_keys(*var, CAUSAL, m0 + shift, Skv);
            const VarKeys last = var_keys(*var, CAUSAL, min(m0 + S::ROWS, Sq) - 1 + shift, Skv);
            k0 = max(first.lo, 0) / HP_KEYS;
            n = last.hi >= k0 * HP_KEYS ? last.hi / HP_KEYS + 1 - k0 : 0;
        } else {
            k0 = 0, n = key_tiles<CAUSAL, S::ROWS>(m0, Skv, shift);
        }
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2 * S::STAGES; i++) {
            mbar_init(full0 + 8 * i, TMA ? 1 : 128);
            mbar_init(empty0 + 8 * i, S::CONSUMERS * 128);
        }
        mbar_init(q_empty, S::CONSUMERS * 128);
        if constexpr (TMA) {
            // The initialised barriers, visible to the async proxy that completes TMA's bytes.
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            fence_proxy_async();
        }
    }
    __syncthreads();

    // Load g of the block (its K/V tiles counted across its work tiles) goes to stage
    // g % S::STAGES, in that stage's use g / S::STAGES: the full and empty barriers' phases
    // run on across tiles, and Q load n (the block's tiles with keys, counted) waits for
    // q_empty's phase n - 1. A tile with no keys loads nothing, not even Q, and nobody
    // arrives on q_empty for it.
    if (warp >= S::CONSUMERS * 4) {
        regs_dec<S::PRODUCER>();
        uint32_t ld = 0, nq = 0;                     // K/V tiles and Q tiles loaded
        if constexpr (TMA) {
            // Producer, TMA: one thread issues every copy; the rest of the warpgroup only
            // gave its registers back. V goes one load behind K: load g's K as soon as
            // its K slot is free, then load g - 1's V, so K, which the consumers need a turn
            // before V and release a turn earlier, gets the lead. Q comes with a tile's first
            // K tile on its barrier, loaded after it and after the previous tile's last V:
            // those copies go out while the consumers still read the previous tile's Q. TMA
            // writes through the async proxy that wgmma reads, so no proxy fence.
            if (threadIdx.x != S::CONSUMERS * 128)
                return;
            // V_FIRST (D = 128 without a causal mask): load g - 1's V before g's K. The
            // speculative walk (key_rest) holds K of a tile to its check, at the end of the
            // softmax, but gives V of the tile before back as soon as its P V has landed, so
            // there V's slot comes free first, and K, which goes out last, lands sooner after
            // the check than V did behind it.
            constexpr bool V_FIRST = D == 128 && !CAUSAL && !VAR;
            constexpr int BLOCKS = D / GLLM_CUDA_HP_BOX_COLS;       // 64-column boxes per tile
            constexpr uint32_t Q_TILE = S::ROWS * D * 2;
            int v_row = -1, v_hk = 0, v_b = 0;       // the V tile owed (row -1: none), load v_ld
            uint32_t v_ld = 0;
            auto load_v = [&]() {
                if (v_row < 0)
                    return;
                const uint32_t st = v_ld % S::STAGES, bar = kv_bar<S::STAGES>(full0, st, 1);
                if (v_ld >= S::STAGES)
                    mbar_wait(kv_bar<S::STAGES>(empty0, st, 1), (v_ld / S::STAGES - 1) & 1);
                const uint32_t sv = s_kv + st * 2 * S::KV_TILE + S::KV_TILE;
                mbar_arrive_expect_tx(bar, S::KV_TILE);
#pragma unroll
                for (int c = 0; c < BLOCKS; c++)
                    tma_load_4d(sv + (uint32_t)c * HP_KEYS * 128, &hp->v_map, bar,
                                c * GLLM_CUDA_HP_BOX_COLS, v_row, v_hk, v_b);
                v_row = -1;
            };
            // The whole units, then (SPLIT) the block's parts of the split ones.
            auto produce = [&](int bh, int mb, const auto &walk) {
                const int b = bh / Hq, h = bh - b * Hq, hk = h / group;
                const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
                int k0, n_all;
                tile_keys(m0, k0, n_all);
                if (!VAR)
                    k0 = walk.first();
                const int n_tiles = walk.tiles_of(n_all);
                // Q will wait for q_empty, near the end of the previous tile: until then it
                // comes into L2, so that the copy after the wait is not a trip to memory.
                if (nq > 0 && n_tiles > 0) {
#pragma unroll
                    for (int c = 0; c < BLOCKS; c++)
                        tma_prefetch_4d(&hp->q_map, c * GLLM_CUDA_HP_BOX_COLS, m0, h, b);
                }
                for (int j = 0; j < n_tiles; j++, ld++) {
                    const uint32_t st = ld % S::STAGES, bar = kv_bar<S::STAGES>(full0, st, 0);
                    if constexpr (V_FIRST)
                        load_v();
                    if (j == 0)
                        HP_TRACE(30, j);
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 0), (ld / S::STAGES - 1) & 1);
                    if (j == 0)
                        HP_TRACE(31, j);
                    const uint32_t sk = s_kv + st * 2 * S::KV_TILE;
                    mbar_arrive_expect_tx(bar, S::KV_TILE + (j == 0 ? Q_TILE : 0));
#pragma unroll
                    for (int c = 0; c < BLOCKS; c++)
                        tma_load_4d(sk + (uint32_t)c * HP_KEYS * 128, &hp->k_map, bar,
                                    c * GLLM_CUDA_HP_BOX_COLS, (k0 + j) * HP_KEYS, hk, b);
                    if constexpr (!V_FIRST)
                        load_v();
                    if (j == 0) {
                        if (nq > 0)
                            mbar_wait(q_empty, (nq - 1) & 1);
                        HP_TRACE(33, j);
#pragma unroll
                        for (int c = 0; c < BLOCKS; c++)
                            tma_load_4d(s_q + (uint32_t)c * S::ROWS * 128, &hp->q_map, bar,
                                        c * GLLM_CUDA_HP_BOX_COLS, m0, h, b);
                        nq++;
                    }
                    v_row = (k0 + j) * HP_KEYS, v_hk = hk, v_b = b, v_ld = ld;
                }
            };
            for_each_tile<CAUSAL, false>(sc, nullptr, produce);
            if constexpr (SPLIT) {
                if (sc.whole_units < sc.units)
                    for_each_tile<CAUSAL, true>(sc, &hp->split, produce);
            }
            load_v();
            return;
        } else {
            // Producer, cp.async: each K and V tile once its slot is free, then (a tile's
            // first) Q once q_empty allows, each its own commit group. A stage (K and V) is
            // announced when this lane's copies for it have landed (cp.async.wait_group) and
            // are fenced for wgmma's proxy, one load behind the newest, across tiles: after
            // the next K has gone out and before the wait for the next V's slot, which with
            // two stages is free only once the consumers have the announced K (their P V of
            // two loads back goes out with its Q K^T); so too the previous tile's last stage
            // is announced before the wait for q_empty, which its consumers need it for.
            const int i = threadIdx.x - S::CONSUMERS * 128;
            int pend = -1;                           // the stage loaded and not announced
            for_each_tile<CAUSAL, false>(sc, nullptr, [&](int bh, int mb, const auto &) {
                const int b = bh / Hq, h = bh - b * Hq, hk = h / group;
                const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
                const int n_tiles = key_tiles<CAUSAL, S::ROWS>(m0, Skv, shift);
                const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
                const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
                for (int j = 0; j < n_tiles; j++, ld++) {
                    const uint32_t st = ld % S::STAGES, phase = (ld / S::STAGES - 1) & 1;
                    const uint32_t sk = s_kv + st * 2 * S::KV_TILE;
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 0), phase);
                    copy_tile<D, HP_KEYS>(sk, K, p.k_st[2], j * HP_KEYS, Skv, i);
                    cp_async_commit();
                    if (pend >= 0) {
                        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
                        fence_proxy_async();
                        mbar_arrive(kv_bar<S::STAGES>(full0, pend, 0));
                        mbar_arrive(kv_bar<S::STAGES>(full0, pend, 1));
                    }
                    if (ld >= S::STAGES)
                        mbar_wait(kv_bar<S::STAGES>(empty0, st, 1), phase);
                    copy_tile<D, HP_KEYS>(sk + S::KV_TILE, V, p.v_st[2], j * HP_KEYS, Skv, i);
                    cp_async_commit();
                    pend = (int)st;
                    if (j == 0) {
                        if (nq > 0)
                            mbar_wait(q_empty, (nq - 1) & 1);
                        const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] +
                                     h * p.q_st[1];
                        copy_tile<D, S::ROWS>(s_q, Q, p.q_st[2], m0, Sq, i);
                        cp_async_commit();
                        nq++;
                    }
                }
            });
            if (pend >= 0) {
                cp_async_wait_all();
                fence_proxy_async();
                mbar_arrive(kv_bar<S::STAGES>(full0, pend, 0));
                mbar_arrive(kv_bar<S::STAGES>(full0, pend, 1));
            }
            return;
        }
    }

    // Consumers: warpgroup wg takes query rows [m0 + 64 wg, m0 + 64 wg + 64) of each tile.
    regs_inc<S::CONSUMER>();
    Consumer c = consumer_setup<D, D == 64 || !CAUSAL>(p.scale, s_q, s_kv);
    if (VAR && (var->soft_cap > 0.f || var->alibi))
        c.qk_scale = var_xform_scale(*var), c.pos_scale = true, c.masked = -INFINITY;  // var_tile
    const int wg = c.wg, wrow = c.wrow, g = c.g, t = c.t;
    const bool o_thread = threadIdx.x % 128 == 0;    // issues the warpgroup's O stores
    uint32_t base = 0;                               // K/V loads of the block's earlier tiles
    // Ping-pong (S::PINGPONG): each consumer takes n_tiles + 1 turns per tile, the block's
    // count, not its own n_mine, in the order wg 0 turn 0, wg 1 turn 0, wg 0 turn 1, ...,
    // continued from one tile to the next; turn t of a tile holds the wgmma issues that
    // come before S of key tile t is read (Q K^T of tile t and P V of tile t - 1, whichever
    // this warpgroup has), turn n_tiles the last P V, and a turn with nothing to issue (past
    // n_mine: fewer causal tiles, or rows past Sq; every turn of a tile with no keys) is only
    // its sync and arrive, so the partner never waits on a warpgroup that has finished.
    // PingPong (hopper_consumer.cuh): begin() waits until the partner has ended its previous turn
    // (for wg 0's first turn of the block, wg 1's one arrival when the turns are set up),
    // end() lets the partner start its turn. Per barrier, syncs and arrivals match one for one
    // (wg 1 skips the arrival after the block's last turn, which nobody waits for), so no phase
    // is left open at exit. The turns run on across tiles rather than restart: a restart would
    // let wg 0 arrive on barrier 2 for the next tile's turn 0 before wg 1 had synced on it for
    // this tile's last turn, two arrivals of the same warps in one phase.
    // The consumers' tiles in one or two phases, each a copy of the loop below: the whole
    // units, then (SPLIT, when the schedule splits) the block's parts of the split ones. Each
    // phase takes its ping-pong turns from 0, as at the kernel's start; the first ends with the
    // block-final turn, which leaves no barrier phase open, and both warpgroups meet at
    // walk_sync before the second (the restart above: without it the block could hang, as it
    // once did when its softmax was slowed by a few percent). A second copy keeps the first
    // one's code as it was without the split: with the parts in the one walk every shape lost
    // 2-3%, split or not (the tile boundary is that sensitive).
    const gllm_cuda_fastdiv hq_div = gllm_cuda_fastdiv_of((uint32_t)Hq);
    auto consume = [&](auto parts) {
        constexpr bool PARTS = decltype(parts)::value;
        HP_TRACE(2, PARTS);
        // A tile as this warpgroup sees it. The key tiles it computes, [0, n_mine): none for rows
        // past the end (the last tile's spare warpgroups); causal, those with a key <= its last
        // row + shift. The rest, up to the tile's n_tiles, it only waits for and releases: the
        // other warpgroups still need the stage, and the empty barrier counts every consumer
        // thread. Each thread arrives on q_empty once per tile with keys: after its last Q K^T
        // has completed, or (n_mine = 0) once the first stage, and Q, are in: never before the
        // producer has loaded this tile's Q, so never within the phase of the previous one.
        struct Tile {
            int b, h, r_wg, n_tiles, n_mine;
            int k0, part;                                // PARTS: the part's first key tile, slot
            bool last;
        };
        TileWalk<CAUSAL, PARTS> tiles{sc, PARTS ? &hp->split : nullptr};
        auto next_tile = [&](Tile &x) {
            int bh, mb;
            if (!tiles.next(bh, mb))
                return false;
            x.b = (int)gllm_cuda_fastdiv_div(hq_div, (uint32_t)bh), x.h = bh - x.b * Hq;
            const int m0 = gllm_cuda_hp_row0(&sc, S::ROWS, mb);
            int k0, n_all;
            tile_keys(m0, k0, n_all);
            x.n_tiles = tiles.tiles_of(n_all);
            x.k0 = VAR ? k0 : tiles.first(), x.part = tiles.slot();
            x.r_wg = m0 + wg * 64;
            const int last_key = x.r_wg + 63 + shift;
            if constexpr (VAR) {                         // up to the tile of its last row's last key
                const int hi = var_keys(*var, CAUSAL, min(x.r_wg + 63, Sq - 1) + shift, Skv).hi;
                x.n_mine = x.r_wg >= Sq || x.r_wg < 0 || hi < k0 * HP_KEYS
                               ? 0
                               : min(x.n_tiles, hi / HP_KEYS + 1 - k0);
            } else {
                x.n_mine = x.r_wg >= Sq || x.r_wg < 0 ? 0       // rows past Sq, or before 0
                           : !CAUSAL    ? x.n_tiles
                           : last_key < 0 ? 0
                                          : min(x.n_tiles, last_key / HP_KEYS + 1);
            }
            x.last = tiles.done();
            return true;
        };
        // At D = 64 the barriers' base is kept in a register: otherwise the compiler makes it
        // again from the CTA's id (S2R) at every key tile, just before the wait for K and V
        // that depends on it. 0.4-1.0% faster at D = 64; at D = 128, where it adds
        // spills outside the loop, 0.4% slower, so made as before there.
        uint32_t bars0 = full0;
        if constexpr (D == 64)
            asm volatile("mov.b32 %0, %0;" : "+r"(bars0));
        auto walk_of = [&](const Tile &x) {
            return key_walk(c, x.n_mine, x.n_tiles, bars0, base, Skv, x.r_wg, x.r_wg + wrow + g,
                            shift, PARTS || VAR ? x.k0 : 0);
        };
        // At D = 128 (S::CROSS) a tile's final turn and the next tile's turn 0 are one
        // (key_cross): its last P V and the next tile's first Q K^T go out together, and the
        // epilogue runs while the Q K^T is on the tensor cores, rather than the two turns with
        // the partner's final turn between them that a Q K^T alone before the epilogue took.
        float s[64], o[D / 2];
        Owed owed;
        Tile cur, nxt{};
        bool have = next_tile(cur);
        PingPong<S::PINGPONG> turns{wg, have};
        float row_max[2], row_sum[2];
        // A part of a split tile (PARTS) that this warpgroup computed: its epilogue waits until
        // the tile's turns are over, then the part is merged with the other (split_merge), and
        // only the part that counts in second writes the tile.
        auto split_part = [&]() { return PARTS && cur.part >= 0 && cur.n_mine > 0; };
        bool write_o = true;                             // this warpgroup wrote cur's rows
        // The epilogue of tile cur: while it stores, the producer is already loading the next one.
        // O goes to shared memory here and out (send_o_tile) once the next tile's first Q K^T,
        // which this runs under, has landed (S::CROSS).
        auto write_out = [&]() {
            const int b = cur.b, h = cur.h, r_wg = cur.r_wg;
            float inv[2];
    #pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float sum = row_sum[hr];
                sum += __shfl_xor_sync(0xffffffff, sum, 1);
                sum += __shfl_xor_sync(0xffffffff, sum, 2);
                const int row = r_wg + wrow + g + 8 * hr;
                float m = row_max[hr], keep = 1.f;
                if (VAR && var->sinks)
                    keep = var_join_sink(var->sinks[h] * LOG2E, m, sum);
                // A row with keys sums to at least 1 (its reference maximum's exp2(0)), so the
                // approximate reciprocal's 2 ulp lie far below the output's precision (the IEEE
                // division's call sat between two tiles).
                inv[hr] = sum > 0.f ? keep * __fdividef(1.f, sum) : 0.f;
                // lse likewise: the MUFU log2 (2 ulp for sums >= 1) times ln 2, where a division
                // by log2 e put its slow path's call in every copy of the epilogue (a tenth of
                // the D = 128 kernels' code; 0.7-4.7% of a job that asks for lse).
                if (row >= 0 && row < Sq && p.lse && t == 0)
                    p.lse[b * p.lse_st[0] + h * p.lse_st[1] + (int64_t)row * p.lse_st[2]] =
                        sum > 0.f ? (m + __log2f(sum)) * LN2 : -INFINITY;
            }
            HP_TRACE(25, 0);
            if constexpr (TMA && GLLM_CUDA_HP_O_TILE(D)) {
                // O through shared memory and a TMA store (rows past Sq lie outside the map and
                // are not written).
                put_o_tile<T, D>(s_o + (uint32_t)wg * 64 * D * 2, o, inv, wrow, wg, o_thread);
            } else {
                T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];
    #pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int row = r_wg + wrow + g + 8 * hr;
                    store_o_row<T, D>(O + (int64_t)row * p.o_st[2], o, hr, inv[hr], t,
                                      row >= 0 && row < Sq);
                }
            }
        };
        auto epilogue = [&]() {
            HP_TRACE(20, 0);
            if (!split_part())
                write_out();
        };
        if (S::CROSS && have)
            key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
        while (have) {
            // The next tile's place (divisions) is worked out ahead where the registers allow.
            bool more = S::CROSS && next_tile(nxt);
            if (!S::CROSS)
                key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
            HP_TRACE(1, cur.n_mine);
            KeyWalk wc = walk_of(cur);
            [[maybe_unused]] VarRows vr;          // VAR: the walk's rows (wc.var)
            if constexpr (VAR) {
                const int first = cur.r_wg + shift, last = min(cur.r_wg + 63, Sq - 1) + shift;
                vr = var_rows(var, CAUSAL, cur.r_wg + wrow + g + shift, first, last, Skv, p.scale,
                              cur.h);
                wc.var = &vr;
            }
            key_rest<T, D, CAUSAL, S::STAGES, S::CROSS, S::PINGPONG, VAR>(
                wc, s, o, row_max, row_sum, owed, turns, cur.last, q_empty);
            base += (uint32_t)cur.n_tiles;
            if (!S::CROSS)
                more = next_tile(nxt);
#ifdef GLLM_HP_TEST_SLOW_WG1_NS
            // Test hook (tests/gpu/gpu-check.sh's walk race, never in gllmd's image): warpgroup 1
            // late for the first walk's final turn, where walk_sync must hold warpgroup 0.
            if (SPLIT && !PARTS && !more && wg == 1)
                for (int i = 0; i < GLLM_HP_TEST_SLOW_WG1_NS / 1000; i++)
                    __nanosleep(1000);
#endif
            key_end<T, D, S::STAGES, S::CROSS>(wc, walk_of(nxt), more, s, o, owed, turns, epilogue);
            if constexpr (PARTS) {
                write_o = true;
                if (split_part()) {                      // o, row_max and row_sum are still cur's
                    write_o = split_merge<D, S::CONSUMERS>(hp, cur.part, wg, o, row_max, row_sum,
                                                           smem_addr(&split_second[wg]));
                    if (write_o)
                        write_out();
                }
            }
            if constexpr (TMA && GLLM_CUDA_HP_O_TILE(D))
                send_o_tile<D>(s_o + (uint32_t)wg * 64 * D * 2,
                               o_thread && cur.r_wg >= 0 && write_o,
                               &hp->o_map, cur.r_wg, cur.h, cur.b);
            HP_TRACE(21, 0);
            cur = nxt;
            have = more;
        }
    };
    consume(Flag<false>());
    if constexpr (SPLIT) {
        if (sc.whole_units < sc.units) {
            static_assert(S::CONSUMERS * 128 == PP_THREADS, "walk_sync counts both consumers");
            walk_sync();                             // both through the first walk's final turn
            consume(Flag<true>());
        }
    }
    if (TMA && GLLM_CUDA_HP_O_TILE(D) && o_thread)
        bulk_wait_all();                             // shared memory stays until the stores land
}
#endif // GLLM_HAVE_WGMMA

} // namespace

#ifdef GLLM_HAVE_WGMMA
#define HP_BODY(T, CAUSAL, D) attention_fwd_hopper<T, CAUSAL, D, false>(p, nullptr)
#define HP_TMA_BODY(T, CAUSAL, D) attention_fwd_hopper<T, CAUSAL, D, true>(hp.a, &hp)
#define HP_VAR_BODY(T, CAUSAL, D) attention_fwd_hopper<T, CAUSAL, D, true, true>(hv.hp.a, &hv.hp, &hv.v)
#else
#define HP_BODY(T, CAUSAL, D) __trap()  // never launched off sm_90a (see the header comment)
#define HP_TMA_BODY(T, CAUSAL, D) __trap()
#define HP_VAR_BODY(T, CAUSAL, D) __trap()
#endif
// GLLM_CUDA_ENTRY_HOPPER: the producer copies with cp.async (any layout tc_eligible admits);
// GLLM_CUDA_ENTRY_HOPPER_TMA: with TMA, through the tensor maps of its parameter.
#define GLLM_CUDA_ENTRY_HOPPER(T, D, FLAGS, symbol)                                            \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const gllm_cuda_attn_params p)                                                  \
    {                                                                                          \
        HP_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                        \
    }
#define GLLM_CUDA_ENTRY_HOPPER_TMA(T, D, FLAGS, symbol)                                        \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const __grid_constant__ gllm_cuda_hp_params hp)                                 \
    {                                                                                          \
        HP_TMA_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                    \
    }
// GLLM_CUDA_ENTRY_HOPPER_VAR: the TMA kernel with a variant.
#define GLLM_CUDA_ENTRY_HOPPER_VAR(T, D, FLAGS, symbol)                                        \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const __grid_constant__ gllm_cuda_hp_var_params hv)                             \
    {                                                                                          \
        HP_VAR_BODY(T, GLLM_CUDA_KF_HAS(FLAGS, CAUSAL), D);                                    \
    }
GLLM_CUDA_HOPPER_KERNELS(GLLM_CUDA_ENTRY)
