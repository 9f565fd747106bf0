// Prefill attention kernels for gllmd's CUDA backend: FlashAttention-2-style tensor-core tiles.
//
// Compiled ahead of time into one fatbin (kernels/prebuilt/) and loaded through the driver
// API; entry points are extern "C" with a fixed parameter struct so the daemon needs no
// CUDA headers. Layout and semantics match struct attn_args (backend_api.h).
//
// A block takes GLLM_CUDA_TC_ROWS query rows of one head; each of its four warps owns two
// 16-row m-tiles and keeps their scores and outputs in registers (mma.sync), so every K or V
// fragment it reads from shared memory feeds four tensor-core ops. K and V stream through two
// cp.async stages, tile j + 1 landing while tile j is used, one barrier per tile. The online
// softmax is base 2 and rescales lazily (RESCALE_SLACK). The generic kernel, one warp per
// query row, takes what the tensor-core one cannot: f32, other head dims, any strides.
#include "attention_params.h"
#include "kernel_registry.h"
#include "mma_common.cuh"
#include "variant.cuh"

namespace {

constexpr float RESCALE_SLACK = 8.f;  // log2 units a row max may grow before a rescale

template <int N> struct IntC {};   // a tile's stage, as a type
template <int N> __device__ __forceinline__ constexpr int stage_of(IntC<N>) { return N; }
__device__ __forceinline__ int stage_of(int s) { return s; }       // see the online softmax in attention_fwd_tc

// Copies rows [row0, row0 + ROWS) of one head into a swizzled tile; rows >= nrows are zeros.
// Each thread always copies the same 16-byte column of rows r0, r0 + STEP, ...: its shared
// offsets differ by a constant and its swizzle (row % 8) is fixed, so the per-tile cost is
// one add and one cp.async per chunk. This matters: the kernel is bound by issue slots.
template <int D, int ROWS, int THREADS>
struct TileCopier {
    static constexpr int CHUNKS = D / 8;
    static constexpr int STEP = THREADS / CHUNKS;     // rows per pass
    static_assert(THREADS % CHUNKS == 0 && ROWS % STEP == 0 && STEP % 8 == 0, "tile shape");
    int r0;            // first row this thread copies
    uint32_t soff;     // its byte offset in the tile (pass 0)

    __device__ __forceinline__ TileCopier()
    {
        r0 = threadIdx.x / CHUNKS;
        const int c = threadIdx.x % CHUNKS;
        soff = (uint32_t)(r0 * D + ((c ^ (r0 & 7)) << 3)) * 2;
    }

    template <typename T>
    __device__ __forceinline__ void copy(uint32_t tile, const T *base, int64_t row_stride, int row0,
                                         int nrows) const
    {
        const T *src = base + (int64_t)(row0 + r0) * row_stride + (threadIdx.x % CHUNKS) * 8;
        const int64_t step = (int64_t)STEP * row_stride;
        if (row0 + ROWS <= nrows) {      // the common case: no bounds to check
#pragma unroll
            for (int it = 0; it < ROWS / STEP; it++)
                cp_async16(tile + soff + it * STEP * D * 2, src + it * step, 16);
        } else {
#pragma unroll
            for (int it = 0; it < ROWS / STEP; it++) {
                const bool ok = row0 + r0 + it * STEP < nrows;
                cp_async16(tile + soff + it * STEP * D * 2, ok ? src + it * step : base, ok ? 16 : 0);
            }
        }
    }
};

// One block: WARPS * MT * 16 query rows of one (batch, head). Each warp owns MT m-tiles of
// 16 rows and keeps their scores and output accumulators in registers; every K or V
// fragment read from shared memory feeds 2 * MT tensor-core ops, so MT = 2 halves the
// shared-memory traffic per flop. Q fragments are re-read from shared memory per tile
// when MT > 1 (registers are short), kept in registers when MT == 1.
//
// VAR: var is the job's variant and p.causal its causality (CAUSAL is false). The block reads
// the key tiles its rows' intervals (var_keys) span; a tile that crosses one of their edges is
// masked per score, and with a soft-cap or ALiBi every score is transformed (var_score) into
// log2 units, so the softmax's scale is 1. The sink joins each row at the end.
template <typename T, int D, int WARPS, int MT, int BLOCK_N, bool CAUSAL, bool VAR = false>
__device__ __forceinline__ void attention_fwd_tc(const gllm_cuda_attn_params &p,
                                                 const gllm_cuda_variant *var = nullptr)
{
    constexpr int BLOCK_M = WARPS * MT * 16;
    constexpr int THREADS = WARPS * 32;
    constexpr int DK = D / 16;          // k-steps over the head dim
    constexpr int DN = D / 8;           // n-tiles over the head dim (P V)
    constexpr int NN = BLOCK_N / 8;     // n-tiles over keys (Q K^T)
    constexpr bool Q_IN_REGS = MT == 1;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // Q, then two stages of (K, V): tile j+1 streams in while tile j is used.
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK0 = sQ + BLOCK_M * D;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int lm = lane >> 3, lr = lane & 7;   // ldmatrix: which 8x8 matrix, which row of it
    const int num_m = (int)((p.Sq + BLOCK_M - 1) / BLOCK_M);
    const int m_block = num_m - 1 - (int)blockIdx.x;   // heaviest (causal) blocks first
    const int bh = blockIdx.y;
    const int b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    const int m0 = m_block * BLOCK_M;
    const int Sq = (int)p.Sq, Skv = (int)p.Skv;
    const int shift = Skv - Sq;

    const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1];
    const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
    const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];

    int n_end = Skv;
    if (CAUSAL)
        n_end = min(Skv, m0 + BLOCK_M + shift);
    int j0 = 0;                          // the first key tile read
    // VAR: the keys of the block's first and last rows (edges of every row's between them).
    VarKeys first{0, Skv - 1}, last{0, Skv - 1};
    if (VAR) {
        first = var_keys(*var, p.causal, m0 + shift, Skv);
        last = var_keys(*var, p.causal, min(m0 + BLOCK_M, Sq) - 1 + shift, Skv);
        j0 = max(first.lo, 0) / BLOCK_N;
        n_end = last.hi + 1;
    }
    const int n_tiles = n_end > j0 * BLOCK_N ? (n_end + BLOCK_N - 1) / BLOCK_N - j0 : 0;

    auto stage_k = [&](int st) { return sK0 + st * 2 * BLOCK_N * D; };
    auto stage_v = [&](int st) { return sK0 + st * 2 * BLOCK_N * D + BLOCK_N * D; };
    const TileCopier<D, BLOCK_N, THREADS> kv_copier;
    auto load_kv = [&](int tile) {
        if (tile < n_tiles) {
            kv_copier.copy(smem_addr(stage_k(tile & 1)), K, p.k_st[2], (j0 + tile) * BLOCK_N, Skv);
            kv_copier.copy(smem_addr(stage_v(tile & 1)), V, p.v_st[2], (j0 + tile) * BLOCK_N, Skv);
        }
        cp_async_commit();   // empty groups keep the wait_group arithmetic uniform
    };

    TileCopier<D, BLOCK_M, THREADS>().copy(smem_addr(sQ), Q, p.q_st[2], m0, Sq);
    load_kv(0);
    cp_async_wait_all();
    __syncthreads();

    // Row of this lane's ldmatrix address within m-tile mi of this warp.
    auto q_row = [&](int mi) { return (warp * MT + mi) * 16 + lr + 8 * (lm & 1); };

    // ldmatrix addresses, precomputed. A lane reads row r of an 8x8 matrix and chunk c of
    // 16 bytes; swizzled, that is chunk (c ^ r % 8). Every row a lane reads has the same
    // r % 8 (lr), and c = 8 * hi + lo with lo < 8, so the swizzled chunk is 8 * hi +
    // (lo ^ lr): four per-lane offsets (lo = 0, 2, 4, 6 plus the lane's low bit) cover a
    // tile, and everything else (row blocks, hi, the stage) is a constant offset that
    // folds into the instruction. Q and V read rows lr + 8 * (lm & 1) at low bit lm >> 1
    // (pattern A); K reads rows lr + 8 * (lm >> 1) at low bit lm & 1 (pattern B).
    //
    // Measured on an H200: +3% non-causal, but -3 to -4% causal, whose masking code already
    // fills the registers (the 8 offsets push it into spills); causal kernels compute the
    // addresses per use instead.
    constexpr bool PRE = !CAUSAL && !VAR;
    const uint32_t sbase = smem_addr(smem_raw);
    uint32_t off_a[4], off_b[4];
#pragma unroll
    for (int i = 0; i < 4 && PRE; i++) {
        off_a[i] = sbase + (uint32_t)(((lr + 8 * (lm & 1)) * D + (((2 * i + (lm >> 1)) ^ lr) << 3)) * 2);
        off_b[i] = sbase + (uint32_t)(((lr + 8 * (lm >> 1)) * D + (((2 * i + (lm & 1)) ^ lr) << 3)) * 2);
    }
    const uint32_t q_warp = (uint32_t)(warp * MT * 16 * D * 2);
    constexpr uint32_t K0_BYTES = BLOCK_M * D * 2;              // stage 0's K, after Q
    constexpr uint32_t STAGE_BYTES = 2 * BLOCK_N * D * 2;       // K and V of one stage
    constexpr uint32_t V_BYTES = BLOCK_N * D * 2;               // V after K in a stage
    uint32_t qreg[Q_IN_REGS ? DK : 1][4];
    if (Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < DK; kk++)
            ldmatrix_x4(qreg[kk], smem_addr(sQ + swz<D>(q_row(0), kk * 2 + (lm >> 1))));
    }

    float o[MT][DN][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int i = 0; i < DN; i++)
            o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.f;
    float row_max[MT][2], row_sum[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
        row_max[mi][0] = row_max[mi][1] = -INFINITY, row_sum[mi][0] = row_sum[mi][1] = 0.f;
    // A zero scale becomes the smallest normal float: the scores still vanish, but a masked
    // score (+-inf) times it stays infinite instead of turning into NaN.
    // VAR with a soft-cap or ALiBi: scores arrive transformed, in log2 units.
    const bool xform = VAR && (var->soft_cap > 0.f || var->alibi);
    const float qk_scale = xform ? 1.f : p.scale != 0.f ? p.scale * LOG2E : FLT_MIN;
    const bool pos_scale = qk_scale > 0.f;
    // Masked raw scores: whatever the scale's sign, scaled they become -inf.
    const float masked = pos_scale ? -INFINITY : INFINITY;
    // This thread's rows: row_base(mi) and row_base(mi) + 8.
    auto row_base = [&](int mi) { return m0 + (warp * MT + mi) * 16 + g; };
    // VAR: the head's transforms (a row's keys are worked out where a tile needs them:
    // kept in registers they cost the D = 64 kernel spills).
    float cap = 0.f, inv_cap = 0.f, slope2 = 0.f;
    if constexpr (VAR) {
        cap = var->soft_cap, inv_cap = cap > 0.f ? 1.f / cap : 0.f;
        slope2 = var->alibi ? var->alibi[h] * LOG2E : 0.f;
    }

    // One tile. With PRE, ST (its stage) is a compile-time constant, so stage offsets fold
    // into the ldmatrix instructions and tiles run in pairs; otherwise it is j & 1 (two
    // copies of the body cost the causal kernels more registers than they save).
    auto tile = [&](auto stage, int j) {
        const int ST = stage_of(stage);
        const int n0 = (j0 + j) * BLOCK_N;
        // Tile j is in; every warp is past tile j - 1, so its stage takes tile j + 1 while
        // this one is used. One barrier per tile.
        load_kv(j + 1);

        float s[MT][NN][4];
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int i = 0; i < NN; i++)
                s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            uint32_t qf[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                if (Q_IN_REGS) {
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        qf[mi][e] = qreg[kk][e];
                } else {
                    ldmatrix_x4(qf[mi], PRE ? off_a[kk & 3] + q_warp + (uint32_t)(mi * 16 * D * 2 + (kk >> 2) * 128)
                                            : smem_addr(sQ + swz<D>(q_row(mi), kk * 2 + (lm >> 1))));
                }
            }
#pragma unroll
            for (int nn = 0; nn < NN; nn += 2) {
                uint32_t kf[4];
                const int key = nn * 8 + lr + 8 * (lm >> 1);
                ldmatrix_x4(kf, PRE ? off_b[kk & 3] + (uint32_t)(K0_BYTES + ST * STAGE_BYTES +
                                                                 nn * 8 * D * 2 + (kk >> 2) * 128)
                                    : smem_addr(stage_k(ST) + swz<D>(key, kk * 2 + (lm & 1))));
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    mma16816<T>(s[mi][nn], qf[mi], kf);
                    mma16816<T>(s[mi][nn + 1], qf[mi], kf + 2);
                }
            }
        }

        // Mask the tail tile and, when causal, the tiles crossing the diagonal; VAR: the tiles
        // crossing a row's edge, and transform every score where the variant asks.
        if constexpr (VAR) {
            if (xform || n0 + BLOCK_N > Skv || n0 < last.lo || n0 + BLOCK_N - 1 > first.hi) {
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        const int pos = row_base(mi) + 8 * hr + shift;
                        const VarKeys k = var_keys(*var, p.causal, pos, Skv);
#pragma unroll
                        for (int nn = 0; nn < NN; nn++)
#pragma unroll
                            for (int e = 2 * hr; e < 2 * hr + 2; e++) {
                                const int key = n0 + nn * 8 + 2 * t + (e & 1);
                                float x = s[mi][nn][e];
                                if (xform)
                                    x = var_score(x, p.scale, cap, inv_cap, slope2, key - pos);
                                s[mi][nn][e] = key >= k.lo && key <= k.hi ? x : masked;
                            }
                    }
            }
        }
        const bool need_mask = !VAR && (n0 + BLOCK_N > Skv || (CAUSAL && n0 + BLOCK_N - 1 > m0 + shift));
        if (need_mask) {
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int nn = 0; nn < NN; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = n0 + nn * 8 + 2 * t + (e & 1);
                        const int row = row_base(mi) + 8 * (e >> 1);
                        if (key >= Skv || (CAUSAL && key > row + shift))
                            s[mi][nn][e] = masked;
                    }
        }

        // Online softmax, base 2; each row is spread over the 4 threads of a quad. The
        // probabilities are packed to 16 bits as soon as they exist: as tensor-core A
        // fragments they take half the registers the fp32 scores did.
        uint32_t pf[MT][BLOCK_N / 16][4];
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            // row_max is the reference the sums and outputs are relative to. It moves only
            // when a row's true maximum passes it by more than RESCALE_SLACK (log2 units), and
            // then for the whole warp at once: until then probabilities may reach
            // 2^RESCALE_SLACK, harmless in fp32 sums and in f16/bf16 P, and the 2 * D
            // multiplies of a rescale are skipped on most tiles.
            float sum[2] = {0.f, 0.f}, tile_max[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float raw = s[mi][0][2 * hr];
#pragma unroll
                for (int nn = 0; nn < NN; nn++)
                    raw = pos_scale ? fmaxf(raw, fmaxf(s[mi][nn][2 * hr], s[mi][nn][2 * hr + 1]))
                                    : fminf(raw, fminf(s[mi][nn][2 * hr], s[mi][nn][2 * hr + 1]));
                raw = pos_scale ? fmaxf(raw, __shfl_xor_sync(0xffffffff, raw, 1))
                                : fminf(raw, __shfl_xor_sync(0xffffffff, raw, 1));
                raw = pos_scale ? fmaxf(raw, __shfl_xor_sync(0xffffffff, raw, 2))
                                : fminf(raw, __shfl_xor_sync(0xffffffff, raw, 2));
                tile_max[hr] = raw * qk_scale;    // largest scaled score of the tile (or -inf)
            }
            const bool grow = tile_max[0] > row_max[mi][0] + RESCALE_SLACK ||
                              tile_max[1] > row_max[mi][1] + RESCALE_SLACK;
            if (__any_sync(0xffffffff, grow)) {
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const float mx = fmaxf(row_max[mi][hr], tile_max[hr]);
                    // 0 when the row had seen nothing; 1 for a row that still sees nothing.
                    const float scale_o = mx == -INFINITY ? 1.f : fast_exp2(row_max[mi][hr] - mx);
                    row_max[mi][hr] = mx;
                    row_sum[mi][hr] *= scale_o;
#pragma unroll
                    for (int dn = 0; dn < DN; dn++)
                        o[mi][dn][2 * hr] *= scale_o, o[mi][dn][2 * hr + 1] *= scale_o;
                }
            }
            // A row that has seen only masked keys keeps a finite reference point.
            const float ref[2] = {row_max[mi][0] == -INFINITY ? 0.f : row_max[mi][0],
                                  row_max[mi][1] == -INFINITY ? 0.f : row_max[mi][1]};
#pragma unroll
            for (int nn = 0; nn < NN; nn++) {
                const float e0 = fast_exp2(fmaf(s[mi][nn][0], qk_scale, -ref[0]));
                const float e1 = fast_exp2(fmaf(s[mi][nn][1], qk_scale, -ref[0]));
                const float e2 = fast_exp2(fmaf(s[mi][nn][2], qk_scale, -ref[1]));
                const float e3 = fast_exp2(fmaf(s[mi][nn][3], qk_scale, -ref[1]));
                sum[0] += e0 + e1;
                sum[1] += e2 + e3;
                // n-tile nn holds keys 8nn..8nn+7: the low or high half of k-step nn / 2.
                pf[mi][nn / 2][(nn & 1) * 2] = Elem<T>::pack(e0, e1);
                pf[mi][nn / 2][(nn & 1) * 2 + 1] = Elem<T>::pack(e2, e3);
            }
            row_sum[mi][0] += sum[0];     // quad-partial; reduced at the end
            row_sum[mi][1] += sum[1];
        }

        // O += P V_j.
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; kk++) {
#pragma unroll
            for (int dn = 0; dn < DN; dn += 2) {
                uint32_t vf[4];
                const int key = kk * 16 + lr + 8 * (lm & 1);
                ldmatrix_x4_trans(vf, PRE ? off_a[(dn >> 1) & 3] +
                                                (uint32_t)(K0_BYTES + ST * STAGE_BYTES + V_BYTES +
                                                           kk * 16 * D * 2 + (dn >> 3) * 128)
                                          : smem_addr(stage_v(ST) + swz<D>(key, dn + (lm >> 1))));
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    mma16816<T>(o[mi][dn], pf[mi][kk], vf);
                    mma16816<T>(o[mi][dn + 1], pf[mi][kk], vf + 2);
                }
            }
        }
        cp_async_wait_all();              // tile j + 1 has landed (for this thread)
        __syncthreads();                  // ... for all, and all are done with tile j
    };
    if constexpr (PRE) {
        for (int j = 0; j < n_tiles; j += 2) {
            tile(IntC<0>(), j);
            if (j + 1 < n_tiles)
                tile(IntC<1>(), j + 1);
        }
    } else {
        for (int j = 0; j < n_tiles; j++)
            tile(j & 1, j);
    }

    // Normalise and store. Rows that saw no key are zeros with lse = -inf.
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float sum = row_sum[mi][hr];
            sum += __shfl_xor_sync(0xffffffff, sum, 1);
            sum += __shfl_xor_sync(0xffffffff, sum, 2);
            const int row = row_base(mi) + 8 * hr;
            float keep = 1.f, m = row_max[mi][hr];
            if (VAR && var->sinks)
                keep = var_join_sink(var->sinks[h] * LOG2E, m, sum);
            const float inv = sum > 0.f ? keep / sum : 0.f;
            if (row < Sq) {
                T *orow = O + (int64_t)row * p.o_st[2];
#pragma unroll
                for (int dn = 0; dn < DN; dn++) {
                    uint32_t v = Elem<T>::pack(o[mi][dn][2 * hr] * inv, o[mi][dn][2 * hr + 1] * inv);
                    *reinterpret_cast<uint32_t *>(orow + dn * 8 + 2 * t) = v;
                }
                if (p.lse && t == 0)
                    p.lse[b * p.lse_st[0] + h * p.lse_st[1] + (int64_t)row * p.lse_st[2]] =
                        sum > 0.f ? (m + __log2f(sum)) * LN2 : -INFINITY;
            }
        }
}

// Any dtype, any head dim up to 256, any strides: one warp per query row. The fallback
// for f32 and for layouts the tensor-core kernel cannot take.
template <typename T>
__device__ __forceinline__ void attention_fwd_generic(const gllm_cuda_attn_params &p)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * GLLM_CUDA_GENERIC_ROWS + warp;
    const int bh = blockIdx.y;
    const int b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    if (row >= p.Sq)
        return;
    const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1] + row * p.q_st[2];
    const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
    const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
    constexpr int PER_LANE = 8;   // D <= 256
    float q[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        q[i] = d < p.D ? Elem<T>::to_float(Q[d * p.q_st[3]]) * p.scale * LOG2E : 0.f;
        acc[i] = 0.f;
    }
    int64_t n_end = p.Skv;
    if (p.causal)
        n_end = min(p.Skv, row + p.Skv - p.Sq + 1);
    float mx = -INFINITY, sum = 0.f;
    for (int64_t j = 0; j < n_end; j++) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < p.D)
                dot += q[i] * Elem<T>::to_float(K[j * p.k_st[2] + d * p.k_st[3]]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(0xffffffff, dot, off);
        const float nmx = fmaxf(mx, dot);
        const float corr = exp2f(mx - nmx), pj = exp2f(dot - nmx);
        sum = sum * corr + pj;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            acc[i] = acc[i] * corr + (d < p.D ? pj * Elem<T>::to_float(V[j * p.v_st[2] + d * p.v_st[3]]) : 0.f);
        }
        mx = nmx;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1] + row * p.o_st[2];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < p.D)
            O[d * p.o_st[3]] = Elem<T>::from_float(acc[i] * inv);
    }
    if (p.lse && lane == 0)
        p.lse[b * p.lse_st[0] + h * p.lse_st[1] + row * p.lse_st[2]] =
            sum > 0.f ? (mx + log2f(sum)) * LN2 : -INFINITY;
}

// The generic kernel with a variant and v's head dim Dv: each row walks only the keys its
// interval holds (var_keys); exact tanh, the sink joined at the end.
template <typename T>
__device__ __forceinline__ void attention_fwd_generic_var(const gllm_cuda_attn_var_params &pv)
{
    const gllm_cuda_attn_params &p = pv.a;
    const gllm_cuda_variant &v = pv.v;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * GLLM_CUDA_GENERIC_ROWS + warp;
    const int bh = blockIdx.y;
    const int b = bh / (int)p.Hq, h = bh % (int)p.Hq;
    const int hk = h / (int)(p.Hq / p.Hkv);
    if (row >= p.Sq)
        return;
    const int Dv = (int)pv.Dv;
    const T *Q = reinterpret_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1] + row * p.q_st[2];
    const T *K = reinterpret_cast<const T *>(p.k) + b * p.k_st[0] + hk * p.k_st[1];
    const T *V = reinterpret_cast<const T *>(p.v) + b * p.v_st[0] + hk * p.v_st[1];
    constexpr int PER_LANE = 8;   // D, Dv <= 256
    float q[PER_LANE], acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        q[i] = d < p.D ? Elem<T>::to_float(Q[d * p.q_st[3]]) : 0.f;
        acc[i] = 0.f;
    }
    const int pos = (int)(row + p.Skv - p.Sq);
    const VarKeys keys = var_keys(v, p.causal, pos, (int)p.Skv);
    const float slope2 = v.alibi ? v.alibi[h] * LOG2E : 0.f;
    float mx = -INFINITY, sum = 0.f;
    for (int j = keys.lo; j <= keys.hi; j++) {
        float dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < p.D)
                dot += q[i] * Elem<T>::to_float(K[j * p.k_st[2] + d * p.k_st[3]]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            dot += __shfl_xor_sync(0xffffffff, dot, off);
        float y = dot * p.scale;
        if (v.soft_cap > 0.f)
            y = v.soft_cap * tanhf(y / v.soft_cap);
        const float x = fmaf(slope2, (float)(j - pos), y * LOG2E);
        const float nmx = fmaxf(mx, x);
        const float corr = exp2f(mx - nmx), pj = exp2f(x - nmx);
        sum = sum * corr + pj;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            const int d = lane + 32 * i;
            acc[i] = acc[i] * corr + (d < Dv ? pj * Elem<T>::to_float(V[j * p.v_st[2] + d * p.v_st[3]]) : 0.f);
        }
        mx = nmx;
    }
    float keep = 1.f;
    if (v.sinks)
        keep = var_join_sink(v.sinks[h] * LOG2E, mx, sum);
    const float inv = sum > 0.f ? keep / sum : 0.f;
    T *O = reinterpret_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1] + row * p.o_st[2];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < Dv)
            O[d * p.o_st[3]] = Elem<T>::from_float(acc[i] * inv);
    }
    if (p.lse && lane == 0)
        p.lse[b * p.lse_st[0] + h * p.lse_st[1] + row * p.lse_st[2]] =
            sum > 0.f ? (mx + log2f(sum)) * LN2 : -INFINITY;
}

} // namespace

// Entry points, instantiated from the registry's rows (kernel_registry.h) and looked up by
// name with cuModuleGetFunction.
#define GLLM_CUDA_ENTRY_TC(T, D, FLAGS, symbol)                                                \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_TC_WARPS(D) * 32,                  \
                                                 D == 64 ? 2 : 8 / GLLM_CUDA_TC_WARPS(D))      \
        symbol(const gllm_cuda_attn_params p)                                                  \
    {                                                                                          \
        attention_fwd_tc<T, D, GLLM_CUDA_TC_WARPS(D), GLLM_CUDA_TC_MTILES, GLLM_CUDA_TC_KEYS(D), \
                         GLLM_CUDA_KF_HAS(FLAGS, CAUSAL)>(p);                                  \
    }
#define GLLM_CUDA_ENTRY_GENERIC(T, D, FLAGS, symbol)                                           \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_GENERIC_ROWS * 32)                  \
        symbol(const gllm_cuda_attn_params p)                                                  \
    {                                                                                          \
        attention_fwd_generic<T>(p);                                                           \
    }
#define GLLM_CUDA_ENTRY_TC_VAR(T, D, FLAGS, symbol)                                            \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_TC_WARPS(D) * 32,                  \
                                                 D == 64 ? 2 : 8 / GLLM_CUDA_TC_WARPS(D))      \
        symbol(const gllm_cuda_attn_var_params pv)                                             \
    {                                                                                          \
        attention_fwd_tc<T, D, GLLM_CUDA_TC_WARPS(D), GLLM_CUDA_TC_MTILES, GLLM_CUDA_TC_KEYS(D), \
                         false, true>(pv.a, &pv.v);                                            \
    }
#define GLLM_CUDA_ENTRY_GENERIC_VAR(T, D, FLAGS, symbol)                                       \
    extern "C" __global__ void __launch_bounds__(GLLM_CUDA_GENERIC_ROWS * 32)                  \
        symbol(const gllm_cuda_attn_var_params pv)                                             \
    {                                                                                          \
        attention_fwd_generic_var<T>(pv);                                                      \
    }
GLLM_CUDA_DENSE_KERNELS(GLLM_CUDA_ENTRY)
