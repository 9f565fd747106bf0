// Hopper chunked prefill over the paged KV cache: D = 64 and 128, and 80 and 96 on the D = 128
// kernel, causal over the cache, wgmma with a TMA producer (sm_90a only).
//
// The paged kernel (paged_attention.cu) is built for decode: 16 (token, head) rows per block,
// mma.sync, split-KV. A prefill chunk of thousands of tokens per sequence runs it far below the
// tensor cores' rate (an H100 serving loop's B64 x 2048-token prefill spent about 10x the dense
// Hopper kernel's time in attention: 0.16x its rate). Here the dense Hopper kernel's consumers
// (attention_fwd_hopper.cu says why each piece is as it is) run over the cache: what differs is
// only where the producer finds a key tile and which keys a row sees.
//
// Work: units of (work item, head), an item being up to Hp::ROWS query tokens of one sequence
// (128 at D = 128, 192 at D = 64: the dense kernel's m-tile). The host plans the items
// (cuda_paged.c) into the job's scratch, heaviest first (each sequence's last m-tile, which
// reads the most keys under the causal limit, before its earlier ones, interleaved across
// sequences); unit i * Hq + h is head h of item i, heads fastest so that the units in flight
// share K/V in L2. Persistent, as the dense kernel: a block per SM takes its units round by
// round (gllm_cuda_pp_unit, hopper_schedule.h: grid units per round in the plan's order,
// alternating direction), and the producer runs on across units: the next unit's first K/V
// tiles go out while the consumers finish the current one, and its Q once every consumer has
// completed its last Q K^T (q_empty). Persistence took the long chunks from 0.89 to 0.95x the
// dense kernel on the same tokens and B32 x 512 from 0.73 to 0.91x (H100).
//
// Producer: the producer warpgroup's warps, one per (K or V, 64-column block): two at D = 64,
// four at D = 128, each walking the item's key tiles on its own, so that none waits on another's
// issues (+11-13% on long chunks against one warp for K and V); lane i of a warp issues page i's
// box of every key tile (one thread issuing all of them, as the dense TMA producer does, cost
// 20-25%). A key tile of 128 keys is 128 / page_size pages; each page is one TMA box of
// page_size rows by 64 columns per 64-column block, from a map over the pool viewed as 4-D (D,
// page_size, Hkv, num_pages), at the page's number read from kv_indices. The box lands at its
// row offset within the stage (page i of the tile at row i * page_size, a multiple of 16 rows,
// so of the swizzle's 8-row atom), so the stage is laid out exactly as the dense kernel's
// (hp_offset) and the consumer steps are shared as they are. Each lane reads its page's number
// of the next tile right after issuing this tile's box, so the load's latency passes under the
// wait for a free stage rather than as a chain of dependent loads before every tile. A page
// number outside the pool sets *bad_page and loads nothing; the bytes announced on a barrier
// (mbarrier.expect_tx by each lane before its page's box, one arrival per warp by lane 0 after
// the warp has synced: a stage's full barriers count one arrival per column block) count only
// the boxes issued, so a bad page never leaves a barrier short. The D = 64 producer spills 4
// bytes at its 32 registers (the stage-free part of its destination), outside any consumer's
// path.
// Q: a box of ROWS tokens per 64-column block, issued by that block's K warp with the item's
// first K tile, from a map over q [N, Hq, D] as (D, N, Hq, 1), at the item's first token; rows
// past the item's tokens belong to the next sequence (or read as zeros past N): computed
// harmlessly, never stored.
//
// Keys past the sequence's end: a tile's pages past the sequence's last one are not loaded,
// and the last page's rows past kv_len hold whatever the pool holds there, which may be NaN.
// Their scores are masked (-inf, P = 0), but 0 * NaN in P V is NaN, so in the one tile that has
// such rows (the item's last, when kv_len is not a multiple of 128) the V warps zero V from
// the sequence's end down, each its column block: that tile's V boxes complete on a barrier
// of their own, each V warp waits for it, zeroes, fences for the async proxy and arrives on
// the stage's full V barrier. K needs no zeros: masking overwrites the scores.
//
// Masks: token i of the item (i local, from 0) sees keys <= pos0 + i and < kv_len; that is the
// dense kernel's causal mask with shift = pos0 and rows counted from the item's first token,
// so mask_tile is used as it is. Every item has at least one key (pos0 + 1 >= 1).
//
// Epilogue: at D = 128 a warpgroup whose 64 rows are all the item's stores O through shared
// memory and a TMA store, as the dense kernel (+2-6%); the others store from registers.
//
// Head dims below the kernel's (p.head_dim: 80 and 96 on the D = 128 kernel) are padded by the
// maps, not copied: their boxes run past the tensors' last column, and TMA reads those columns
// as zeros (Q and K's add nothing to a score, V's make O columns that are not stored: the O
// map clips them, the register stores skip them).
//
// Eligibility (cuda_paged.c): the sm_90a image and cuTensorMapEncodeTiled, f16/bf16, D 64 or
// 128 (80, 96: pp_kernel_dim), page_size 16..128 dividing 128, the maps encoded, on average at least PP_MIN_Q_PER_SEQ
// (64) query tokens per sequence, and at least PP_MIN_USED_PCT (20%) of the scores its whole
// tiles compute needed by a query (cuda_plan.c: a long prompt batched with many decode steps
// would otherwise give each step a 128-row tile over its whole context); else the paged kernel.
//
// Variants (the PAGED_PREFILL_VAR kernels): as in the dense variant kernels, an item's key
// tiles start at the tile of the first key its first token sees (a window's or a chunk's
// start: the tiles before it are never loaded), a warpgroup computes up to the tile of its
// last token's last key, and the consumers mask and transform the scores (var_tile) on the
// exact walk; the sink joins each row at the epilogue. The last tile is the item's last
// token's, as without a variant (the mask is causal), so the tail zeroing is unchanged.
//
// Registers: the same plan as the dense kernel (Hp: the producer gives all but 32 back).
#include "hopper_consumer.cuh"

namespace {

#ifdef GLLM_HAVE_WGMMA
// What a unit's walk needs of its item: h, the item, and its key tiles (n_tiles from tile k0:
// up to the last key any token sees), the last one's keys (tail_rows, 1..128; tail: fewer
// than 128, so its V rows past the sequence's end are zeroed).
struct PpUnit {
    int h;
    gllm_cuda_pp_work w;
    int k0, n_tiles, tail_rows;
    bool tail;
};

// hq: p.Hq as a gllm_cuda_fastdiv (the division sat between two units, as the dense kernel's
// did). var: the variant (VAR kernels), else null.
__device__ __forceinline__ PpUnit pp_unit(const gllm_cuda_pp_params &p, int u,
                                          const gllm_cuda_pp_work &w, gllm_cuda_fastdiv hq,
                                          const gllm_cuda_variant *var)
{
    PpUnit x;
    x.h = u < 0 ? 0 : u - (int)gllm_cuda_fastdiv_div(hq, (uint32_t)u) * p.Hq;
    x.w = w;
    const int n_end = min(w.kv_len, w.pos0 + w.nq);   // one past the last key any token sees
    x.k0 = var ? var_keys(*var, true, w.pos0, w.kv_len).lo / HP_KEYS : 0;
    x.n_tiles = (n_end + HP_KEYS - 1) / HP_KEYS - x.k0;
    x.tail_rows = w.kv_len - (x.k0 + x.n_tiles - 1) * HP_KEYS;
    x.tail = x.tail_rows < HP_KEYS;
    return x;
}

// The work item of unit u, or zeros when u < 0 (no unit).
__device__ __forceinline__ gllm_cuda_pp_work pp_work_of(const gllm_cuda_pp_params &p, int u,
                                                      gllm_cuda_fastdiv hq)
{
    return u >= 0 ? p.work[gllm_cuda_fastdiv_div(hq, (uint32_t)u)]
                  : gllm_cuda_pp_work{0, 0, 0, 0, 0};
}

template <typename T, int D, bool VAR>
__device__ __forceinline__ void paged_prefill_hopper(const gllm_cuda_pp_params &p,
                                                     const gllm_cuda_variant *var)
{
    using S = Hp<D, GLLM_CUDA_PP_STAGES(D)>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // full[s] / empty[s] as the dense kernel's; tail: the last key tile's boxes of an item whose
    // V must be zeroed past the sequence's end before the consumers see it (one phase per such
    // item); q_empty: every consumer thread has read the unit's Q for the last time.
    __shared__ __align__(8) uint64_t bars[4 * S::STAGES + 2];
    const uint32_t s_q = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const uint32_t s_kv = s_q + S::ROWS * D * 2;     // stage s: K at s_kv + 2s tiles, V after it
    const uint32_t s_o = s_kv + S::STAGES * 2 * S::KV_TILE;    // O (GLLM_CUDA_PP_O_TILE): 64 rows
                                                               // per warpgroup
    const uint32_t full0 = smem_addr(&bars[0]), empty0 = kv_bar<S::STAGES>(full0, 0, 2);
    const uint32_t tail_bar = smem_addr(&bars[4 * S::STAGES]);
    const uint32_t q_empty = smem_addr(&bars[4 * S::STAGES + 1]);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int x = (int)blockIdx.x, grid = (int)gridDim.x;
    const gllm_cuda_fastdiv hq = gllm_cuda_fastdiv_of((uint32_t)p.Hq);
    if (threadIdx.x == 0) {
        for (int i = 0; i < 2 * S::STAGES; i++) {
            mbar_init(full0 + 8 * i, D / GLLM_CUDA_HP_BOX_COLS);   // a producer warp per block
            mbar_init(empty0 + 8 * i, S::CONSUMERS * 128);
        }
        mbar_init(tail_bar, D / GLLM_CUDA_HP_BOX_COLS);
        mbar_init(q_empty, S::CONSUMERS * 128);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        fence_proxy_async();
    }
    __syncthreads();

    // Load g of the block (its K/V tiles counted across its units) goes to stage g % STAGES in
    // that stage's use g / STAGES, as in the dense kernel; Q of the block's unit n waits for
    // q_empty's phase n - 1 (every unit has keys), the tail zeroing of its k-th tail item for
    // tail_bar's phase k.
    if (warp >= S::CONSUMERS * 4) {
        regs_dec<S::PRODUCER>();
        constexpr int BLOCKS = D / GLLM_CUDA_HP_BOX_COLS;       // 64-column blocks per tile
        // Producer warp pw: K (v = 0) or V (v = 1) of 64-column block cb (and Q, and the
        // zeros past a sequence's end, of that block).
        const int pw = warp - S::CONSUMERS * 4, v = pw & 1, cb = pw >> 1;
        if (cb >= BLOCKS)
            return;
        constexpr uint32_t Q_TILE = S::ROWS * D * 2;
        const int ps = p.page_size, per_tile = HP_KEYS / ps;
        const uint32_t page_bytes = (uint32_t)ps * 128;        // one box: ps rows of 128 bytes
        uint32_t ld = 0, ntail = 0;            // loads and tail items so far
        // The producer runs stages ahead of the consumers, so it reads each unit's item when
        // it comes to it (its registers are few).
        for (int r = 0, u; (u = gllm_cuda_pp_unit(r, x, grid, p.units)) >= 0; r++) {
            const PpUnit un = pp_unit(p, u, pp_work_of(p, u, hq), hq, var);
            const gllm_cuda_pp_work &w = un.w;
            const int seq_pages = (w.kv_len + ps - 1) / ps, hk = un.h / p.group;
            // Q will wait for q_empty, near the end of the previous unit: until then it comes
            // into L2, so that the copy after the wait is not a trip to memory.
            if (v == 0 && lane == 0 && r > 0)
                tma_prefetch_4d(&p.q_map, cb * GLLM_CUDA_HP_BOX_COLS, w.q0, un.h, 0);
            // Lane i < 128 / page_size owns page i of every key tile: it reads the page's
            // number (the next tile's as soon as this tile's box is out, so the load's latency
            // passes under the wait for a free stage), announces its bytes and issues its box;
            // lane 0 arrives once every lane's box is announced, and (K warps) adds Q's block
            // to the unit's first tile once the consumers are done with the previous Q.
            auto fetch = [&](int j) {
                const int pgi = (un.k0 + j) * per_tile + lane;
                return lane < per_tile && pgi < seq_pages ? (uint32_t)p.kv_indices[w.page0 + pgi]
                                                          : 0u;
            };
            uint32_t my_pg = fetch(0);
            for (int j = 0; j < un.n_tiles; j++) {
                const uint32_t g = ld + (uint32_t)j, st = g % S::STAGES;
                if (g >= S::STAGES)
                    mbar_wait(kv_bar<S::STAGES>(empty0, st, v), (g / S::STAGES - 1) & 1);
                const uint32_t bar = v && un.tail && j == un.n_tiles - 1
                                         ? tail_bar
                                         : kv_bar<S::STAGES>(full0, st, v);
                const uint32_t dst = s_kv + st * 2 * S::KV_TILE + (uint32_t)v * S::KV_TILE;
                const int npg = min(per_tile, seq_pages - (un.k0 + j) * per_tile);
                if (lane < npg) {
                    if (my_pg >= p.num_pages) {
                        *p.bad_page = 1;
                    } else {
                        mbar_expect_tx(bar, page_bytes);
                        tma_load_4d(dst + (uint32_t)lane * page_bytes +
                                        (uint32_t)cb * HP_KEYS * 128,
                                    v ? &p.v_map : &p.k_map, bar, cb * GLLM_CUDA_HP_BOX_COLS, 0,
                                    hk, (int)my_pg);
                    }
                }
                if (j + 1 < un.n_tiles)
                    my_pg = fetch(j + 1);
                if (j == 0 && v == 0 && lane == 0) {
                    if (r > 0)
                        mbar_wait(q_empty, (r - 1) & 1);
                    mbar_expect_tx(bar, Q_TILE / BLOCKS);
                    tma_load_4d(s_q + (uint32_t)cb * S::ROWS * 128, &p.q_map, bar,
                                cb * GLLM_CUDA_HP_BOX_COLS, w.q0, un.h, 0);
                }
                __syncwarp();
                if (lane == 0)
                    mbar_arrive(bar);
            }
            ld += (uint32_t)un.n_tiles;
            if (un.tail) {
                if (v == 1) {
                    // The last tile's V rows [tail_rows, 128) as zeros, once its boxes are in
                    // (they would otherwise land over the zeros).
                    const uint32_t st = (ld - 1) % S::STAGES;
                    const uint32_t sv = s_kv + st * 2 * S::KV_TILE + S::KV_TILE;
                    mbar_wait(tail_bar, ntail & 1);
                    const int units = (HP_KEYS - un.tail_rows) * 8;   // 16-byte units per block
                    for (int i = lane; i < units; i += 32) {
                        const uint32_t a = sv + (uint32_t)cb * HP_KEYS * 128 +
                                           (uint32_t)(un.tail_rows * 128 + i * 16);
                        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0)
                                     : "memory");
                    }
                    fence_proxy_async();               // the zeros, for wgmma's proxy
                    __syncwarp();
                    if (lane == 0)
                        mbar_arrive(kv_bar<S::STAGES>(full0, st, 1));
                }
                ntail++;
            }
        }
        return;
    }

    // Consumers: warpgroup wg takes the unit's tokens [64 wg, 64 wg + 64).
    regs_inc<S::CONSUMER>();
    Consumer c = consumer_setup<D>(p.scale, s_q, s_kv);
    if (VAR && (var->soft_cap > 0.f || var->alibi))
        c.qk_scale = var_xform_scale(*var), c.pos_scale = true, c.masked = -INFINITY;  // var_tile
    const int wg = c.wg, wrow = c.wrow, t = c.t;
    const bool o_thread = threadIdx.x % 128 == 0;    // issues the warpgroup's O stores
    uint32_t base = 0;                               // K/V loads of the block's earlier units
    // The key tiles a unit's warpgroup computes (none for tokens past the item's), the rest of
    // n_tiles it only waits for and releases, as in the dense kernel.
    const int r_wg = wg * 64, row0 = r_wg + wrow + c.g;
    auto walk_of = [&](const PpUnit &x) {
        int n_mine;
        if constexpr (VAR) {                         // up to the tile of its last token's last key
            const int hi = var_keys(*var, true, min(r_wg + 63, x.w.nq - 1) + x.w.pos0,
                                    x.w.kv_len).hi;
            n_mine = r_wg >= x.w.nq || hi < x.k0 * HP_KEYS
                         ? 0
                         : min(x.n_tiles, hi / HP_KEYS + 1 - x.k0);
        } else {
            n_mine = r_wg >= x.w.nq ? 0 : min(x.n_tiles, (r_wg + 63 + x.w.pos0) / HP_KEYS + 1);
        }
        return key_walk(c, n_mine, x.n_tiles, full0, base, x.w.kv_len, r_wg, row0, x.w.pos0,
                        x.k0);
    };
    // As in the dense kernel, a unit's first turn is the previous unit's final turn, its
    // epilogue run under the first Q K^T. The unit after the next one's item is read ahead, so
    // that its load is not on the path either.
    int u = gllm_cuda_pp_unit(0, x, grid, p.units);
    PpUnit cur = pp_unit(p, u, pp_work_of(p, u, hq), hq, var);
    bool have = u >= 0;
    PingPong<S::PINGPONG> turns{wg, have};           // run on across units
    u = gllm_cuda_pp_unit(1, x, grid, p.units);
    gllm_cuda_pp_work w_next = pp_work_of(p, u, hq);
    float s[64], o[D / 2];
    Owed owed;
    PpUnit nxt = cur;
    float row_max[2], row_sum[2];
    // The epilogue of unit cur in two steps: O to shared memory when the warpgroup's 64 rows
    // are all the item's (run under the next unit's first Q K^T, and sent once that has
    // landed), else, in the second step, straight out from registers: with those stores, or
    // the send, in the branch that holds the Q K^T, ptxas took the key loop's stage counters
    // out of uniform registers (put_o_tile).
    float inv[2];
    auto epilogue = [&]() {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float sum = row_sum[hr];
            sum += __shfl_xor_sync(0xffffffff, sum, 1);
            sum += __shfl_xor_sync(0xffffffff, sum, 2);
            float m = row_max[hr], keep = 1.f;
            if (VAR && var->sinks)
                keep = var_join_sink(var->sinks[cur.h] * LOG2E, m, sum);
            // A row with keys sums to at least 1 (its reference maximum's exp2(0)), so the
            // approximate reciprocal's 2 ulp lie far below the output's precision (the IEEE
            // division's call sat between two tiles).
            inv[hr] = sum > 0.f ? keep * __fdividef(1.f, sum) : 0.f;
        }
        // The warpgroup's 64 rows are all the item's: O through shared memory and a TMA store
        // as in the dense kernel, sent by one thread while the warpgroup goes on to the
        // next unit, waited for only before the buffer is written again. Rows past the item's
        // tokens belong to the next sequence, so a warpgroup that has any stores from registers.
        if (GLLM_CUDA_PP_O_TILE(D) && r_wg + 64 <= cur.w.nq)
            put_o_tile<T, D>(s_o + (uint32_t)wg * 64 * D * 2, o, inv, wrow, wg, o_thread);
    };
    auto epilogue_out = [&]() {
        const gllm_cuda_pp_work &w = cur.w;
        if (GLLM_CUDA_PP_O_TILE(D) && r_wg + 64 <= w.nq) {
            send_o_tile<D>(s_o + (uint32_t)wg * 64 * D * 2, o_thread, &p.o_map, w.q0 + r_wg,
                           cur.h, 0);
        } else {
            T *O = reinterpret_cast<T *>(p.out) + (int64_t)cur.h * p.head_dim;
            const int64_t o_row = (int64_t)p.Hq * p.head_dim;
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int row = row0 + 8 * hr;
                store_o_row<T, D, true>(O + (int64_t)(w.q0 + row) * o_row, o, hr, inv[hr], t,
                                        row < w.nq, p.head_dim);
            }
        }
    };
    if (S::CROSS && have)
        key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
    for (int r = 2; have; r++) {
        if (!S::CROSS)
            key_first<T, D, S::STAGES, S::CROSS>(walk_of(cur), s, turns);
        const bool more = u >= 0;
        nxt = pp_unit(p, u, w_next, hq, var);
        u = gllm_cuda_pp_unit(r, x, grid, p.units);
        w_next = pp_work_of(p, u, hq);
        // The dense kernel's walk over the key tiles, causal over the cache.
        KeyWalk wc = walk_of(cur);
        [[maybe_unused]] VarRows vr;                 // VAR: the walk's rows (wc.var)
        if constexpr (VAR) {
            const int first = r_wg + cur.w.pos0, last = min(r_wg + 63, cur.w.nq - 1) + cur.w.pos0;
            vr = var_rows(var, true, row0 + cur.w.pos0, first, last, cur.w.kv_len, p.scale, cur.h);
            wc.var = &vr;
        }
        key_rest<T, D, true, S::STAGES, S::CROSS, S::PINGPONG, VAR>(wc, s, o, row_max, row_sum,
                                                                    owed, turns, !more, q_empty);
        base += (uint32_t)cur.n_tiles;
        key_end<T, D, S::STAGES, S::CROSS>(wc, walk_of(nxt), more, s, o, owed, turns, epilogue);
        epilogue_out();
        cur = nxt;
        have = more;
    }
    if (GLLM_CUDA_PP_O_TILE(D) && o_thread)
        bulk_wait_all();                             // shared memory stays until the stores land
}
#endif // GLLM_HAVE_WGMMA

} // namespace

#ifdef GLLM_HAVE_WGMMA
#define PP_BODY(T, D) paged_prefill_hopper<T, D, false>(p, nullptr)
#define PP_VAR_BODY(T, D) paged_prefill_hopper<T, D, true>(pv.pp, &pv.v)
#else
#define PP_BODY(T, D) __trap()  // never launched off sm_90a
#define PP_VAR_BODY(T, D) __trap()
#endif
#define GLLM_CUDA_ENTRY_PAGED_PREFILL(T, D, FLAGS, symbol)                                     \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const __grid_constant__ gllm_cuda_pp_params p)                                  \
    {                                                                                          \
        PP_BODY(T, D);                                                                         \
    }
#define GLLM_CUDA_ENTRY_PAGED_PREFILL_VAR(T, D, FLAGS, symbol)                                 \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_HP_THREADS(D), 1)                   \
        symbol(const __grid_constant__ gllm_cuda_pp_var_params pv)                             \
    {                                                                                          \
        PP_VAR_BODY(T, D);                                                                     \
    }
GLLM_CUDA_PAGED_PREFILL_KERNELS(GLLM_CUDA_ENTRY)
