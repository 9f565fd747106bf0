// The Hopper consumers' loop, shared by the dense and the paged prefill: Q K^T and P V issued
// as wgmma groups, the walk over a query tile's key tiles in ping-pong turns, the epilogue.
#ifndef GLLM_HOPPER_CONSUMER_CUH
#define GLLM_HOPPER_CONSUMER_CUH

#include "hopper_softmax.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
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
    int k0;                    // the first key tile's index in the head (a split unit's
                               // part, or a variant's first)
    const VarRows *var = nullptr;   // the VAR walks': this thread's rows
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
        // shorter and 0.5-1.4% faster; at D = 128 the same was 0.3-0.6% slower, but with
        // the speculative walk (D = 128 without a causal mask) it takes the loop's 8 R2UR
        // away and is 0.5-0.7% faster.
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

// The ping-pong turns of two consumer warpgroups (the dense kernel's comment on them), run
// on across a block's tiles: begin() waits until the partner has ended its previous turn, end()
// lets the partner start its next; wg 1 skips the arrival after the block's final turn
// (block_final), which nobody waits for, and makes up for it with one arrival when the turns
// are set up (any: the block has turns to take), as if it had ended a turn before wg 0's first.
// So each warpgroup syncs on its own barrier at every turn, with no count of turns and no
// branch (a first-turn test cost the key loop three branches a tile), and per barrier
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
// (64). K and V of a stage have barriers of their own (kv_bar): K of tile j is released as
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
// VAR: the scores are masked and transformed as w.var says (var_tile), on the exact walk.
template <typename T, int D, bool CAUSAL, int STAGES, bool CROSS, bool PINGPONG, bool VAR = false>
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
        if constexpr (VAR)
            var_tile(s, (w.k0 + j) * HP_KEYS, w.Skv, *w.var, w.t, w.masked);
        else
            mask_tile<CAUSAL>(s, (w.k0 + j) * HP_KEYS, w.Skv, w.r_wg, w.row0, w.shift, w.t,
                              w.masked);
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
    // Speculative (D = 128 without a causal mask or a variant): a key tile takes its exponentials
    // against the references as they stand, without its row maxima, and only a sum past
    // HP_SPEC_SUM (a miss) sends it the exact way, out of the loop so that the loop's code
    // stays together. Its K and Q stay until the check. The walk's last tile gives Q back at
    // once (the next tile's Q waits on it), so it is exact, and so is every tile after a miss:
    // scores that keep growing pay for one miss a walk, not one a tile.
    if constexpr (D == 128 && !CAUSAL && !VAR) {
        bool exact = false;
        int j = 1;
        // The references as exp_tile takes them, made again only where an exact tile (or a
        // miss) moves them, not at every tile.
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
                // V of j - 1 is done with once its P V has landed, before the check: the
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
        // and these kernels compile as they did before it. The variants take it too: their
        // edge tiles' masks and transforms leave no registers for the speculation's.
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

// A tile's final turn together with the next tile's turn 0 (CROSS): the last P V of tile
// cur (walk c) when this warpgroup owes it (ow.pv), and S = Q K^T of key tile 0 of tile nxt
// (walk n) into s when it computes any, issued in one turn; then the wait for the P V,
// epilogue() (tile cur's, while the Q K^T is on the tensor cores) and the wait for the Q K^T.
// Before, the final turn held only the P V and the next tile's turn 0 came a turn later, after
// the partner's final turn (H100: D = 128 +0.6 to +2%). Every wgmma is waited for in the branch
// that issued it, epilogue() copied into each: with a wgmma in flight across a join ptxas cannot
// see through (two branches on the same condition, or a loop's back edge), it serialised every
// wgmma of the kernel (its C7515 and C7517 notes), -25 to -30% on every shape.
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
// CLIP: only the columns below cols are written (a head dim padded onto the kernel's D).
template <typename T, int D, bool CLIP = false>
__device__ __forceinline__ void store_o_row(T *orow, const float (&o)[D / 2], int hr, float inv,
                                            int t, bool write, int cols = D)
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
        const int col = 8 * (n + (high ? 2 : 0) + (odd ? 1 : 0));
        if (write && (!CLIP || col < cols))
            *reinterpret_cast<uint4 *>(orow + col) = row;
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

// A consumer warpgroup's O through shared memory and a TMA store, in two steps: put_o_tile
// writes its tile at s_ow once the previous tile's store has read it; send_o_tile has one
// thread (o_thread) send it out as the O map's boxes at rows row0.. of (c2, c3) while the
// warpgroup goes on; rows outside the map are not written. The caller waits for the last store
// (bulk_wait_all) before exit. Two steps: with the send inside the branch that holds
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
