// Paged-KV attention for gllmd's CUDA backend: decode and chunked prefill, split-KV plus a combine.
//
// Decode is bound by memory: every byte of K and V is read once, with 16-byte cp.async
// copies through a three-stage pipeline. The (query token, head) rows that share one KV
// head form a single 16-row tensor-core tile, so a group of 4 or 8 query heads reads its
// pages once; the tile's unused rows cost tensor-core time the memory bound leaves idle.
// Long sequences are cut into key ranges run by separate blocks (flash-decoding); the last
// block of a sequence to finish merges the partial results by their log-sum-exp, which
// saves a second launch and its gap on the GPU. A single split sequence (B1 decode) also
// sums every block's part, scaled to 2^0, in L2, so its last block reads one row back
// instead of a partial per block (paged_combine_sums).
#include "attention_params.h"
#include "kernel_registry.h"
#include "mma_common.cuh"

namespace {

constexpr int PG_THREADS = GLLM_CUDA_PAGED_THREADS;
constexpr int PG_ROWS = GLLM_CUDA_PAGED_ROWS;
constexpr int PG_KEYS = GLLM_CUDA_PAGED_KEYS;
constexpr int PG_STAGES = GLLM_CUDA_PAGED_STAGES;
constexpr int PG_WARPS = PG_THREADS / 32;
static_assert(PG_KEYS == 16 * PG_WARPS, "each warp takes 16 keys of a stage");
constexpr int PG_COMB = 16;                    // partial results a combining thread loads at once

__device__ __forceinline__ void cp_async_wait_stages()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PG_STAGES - 2));
}

// The sink (a key of logit s2, base 2, and value zero) joined to a row's softmax, whose sum L
// and output acc are relative to 2^M (2^0 while M is -inf): both move to the larger of M and s2.
__device__ __forceinline__ void add_sink(float s2, float &M, float &L, float4 &acc)
{
    const float mf = fmaxf(M, s2);
    if (mf == -INFINITY)
        return;
    const float keep = M == -INFINITY ? 0.f : fast_exp2(M - mf);
    L = L * keep + fast_exp2(s2 - mf);
    acc.x *= keep, acc.y *= keep, acc.z *= keep, acc.w *= keep;
    M = mf;
}

// Output element (token qi, head slot hh, columns 4 c4 .. 4 c4 + 3) of combine item c, merged
// exactly from the item's partial results, weighted by 2^(lse - max); the partials are read
// from L2 (ld.cg), where the other blocks' writes landed.
template <typename T, int D, bool VAR = false>
__device__ __forceinline__ void combine_exact(const gllm_cuda_paged_params &p,
                                              const gllm_cuda_paged_combine &c, int head0,
                                              int qi, int hh, int c4,
                                              const gllm_cuda_variant *v = nullptr)
{
    const int r = qi * p.heads_per_cta + hh;
    auto slot = [&](int s) {
        return ((int64_t)(c.part0 + s) * gridDim.y + blockIdx.y) * PG_ROWS + r;
    };
    // One pass, PG_COMB parts at a time: all their loads are in flight together (the L2
    // round trips, not the arithmetic, are what the last block waits for), then the running
    // maximum moves and what was summed so far is rescaled to it.
    float M = -INFINITY, L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < c.nparts; s0 += PG_COMB) {
        float l[PG_COMB];
        float4 x[PG_COMB];
#pragma unroll
        for (int k = 0; k < PG_COMB; k++) {
            const int64_t sl = slot(min(s0 + k, c.nparts - 1));
            l[k] = __ldcg(p.part_lse + sl);
            x[k] = __ldcg(reinterpret_cast<const float4 *>(p.part_o + sl * D) + c4);
        }
        float m = M;
#pragma unroll
        for (int k = 0; k < PG_COMB; k++)
            if (s0 + k < c.nparts)
                m = fmaxf(m, l[k]);
        const float ref = m == -INFINITY ? 0.f : m;
        const float a = fast_exp2(M - ref);
        L *= a, acc.x *= a, acc.y *= a, acc.z *= a, acc.w *= a;
#pragma unroll
        for (int k = 0; k < PG_COMB; k++) {
            const float f = s0 + k < c.nparts ? fast_exp2(l[k] - ref) : 0.f;
            L += f;
            acc.x += f * x[k].x, acc.y += f * x[k].y, acc.z += f * x[k].z, acc.w += f * x[k].w;
        }
        M = m;
    }
    if (VAR && v->sinks)
        add_sink(v->sinks[head0 + hh] * LOG2E, M, L, acc);
    const float inv = L > 0.f ? 1.f / L : 0.f;
    T *O = reinterpret_cast<T *>(p.out) + ((int64_t)(c.q0 + qi) * p.Hq + head0 + hh) * D + c4 * 4;
    *reinterpret_cast<uint2 *>(O) = make_uint2(Elem<T>::pack(acc.x * inv, acc.y * inv),
                                               Elem<T>::pack(acc.z * inv, acc.w * inv));
}

// The last block of combine item c: merges the item's partial results for this block's
// rows, each thread 4 columns of one (token, head) row.
template <typename T, int D, bool VAR = false>
__device__ __forceinline__ void paged_combine(const gllm_cuda_paged_params &p,
                                              const gllm_cuda_paged_combine &c, int head0,
                                              int heads_here, const gllm_cuda_variant *var = nullptr)
{
    constexpr int C4 = D / 4;
    for (int idx = threadIdx.x; idx < c.nq * heads_here * C4; idx += PG_THREADS) {
        const int v = idx / C4;
        combine_exact<T, D, VAR>(p, c, head0, v / heads_here, v % heads_here, idx % C4, var);
    }
}

// Sums of the fast merge: [grid.y][ROWS][D + 4] floats, O in the first D, the softmax sum
// at D; every block of the item adds its part to them relative to 2^0, so the last block
// reads one row instead of every partial. Zero between jobs (the last block clears them).
#define SUM_STRIDE GLLM_CUDA_PAGED_SUM_STRIDE

__device__ __forceinline__ void red_add4(float *a, float4 v)
{
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(a), v);       // one vector reduction
#else
    atomicAdd(a, v.x), atomicAdd(a + 1, v.y), atomicAdd(a + 2, v.z), atomicAdd(a + 3, v.w);
#endif
}

// The last block of the single sequence's combine item, with the sums: out = O / L where
// the row's sums show that no part overflowed and the largest did not vanish (L within
// 2^-90 .. 2^90, O finite: the row's maximum score within about +-90 of 0 in log2 units);
// elsewhere the exact merge above. The sums are cleared for the next job as they are read.
template <typename T, int D, bool VAR = false>
__device__ __forceinline__ void paged_combine_sums(const gllm_cuda_paged_params &p,
                                                   const gllm_cuda_paged_combine &c, int head0,
                                                   int heads_here, float *sums,
                                                   const gllm_cuda_variant *var = nullptr)
{
    constexpr int C4 = D / 4;
    const int rows = c.nq * heads_here;
    for (int idx = threadIdx.x; idx < rows * C4; idx += PG_THREADS) {
        const int v = idx / C4, c4 = idx % C4, qi = v / heads_here, hh = v % heads_here;
        float *a = sums + ((int64_t)blockIdx.y * PG_ROWS + qi * p.heads_per_cta + hh) * SUM_STRIDE(D);
        float L = __ldcg(a + D);
        const float4 x = __ldcg(reinterpret_cast<const float4 *>(a) + c4);
        if (VAR && var->sinks)                 // the sink's term, relative to 2^0 as the sums
            L += fast_exp2(var->sinks[head0 + hh] * LOG2E);
        __stcg(reinterpret_cast<float4 *>(a) + c4, make_float4(0.f, 0.f, 0.f, 0.f));
        if (L >= 0x1p-90f && L <= 0x1p90f && isfinite(x.x + x.y + x.z + x.w)) {
            const float inv = 1.f / L;
            T *O = reinterpret_cast<T *>(p.out) + ((int64_t)(c.q0 + qi) * p.Hq + head0 + hh) * D + c4 * 4;
            *reinterpret_cast<uint2 *>(O) = make_uint2(Elem<T>::pack(x.x * inv, x.y * inv),
                                                       Elem<T>::pack(x.z * inv, x.w * inv));
        } else {
            combine_exact<T, D, VAR>(p, c, head0, qi, hh, c4, var);
        }
    }
    __syncthreads();                           // every thread of a row has read its L
    for (int v = threadIdx.x; v < rows; v += PG_THREADS)
        __stcg(sums + ((int64_t)blockIdx.y * PG_ROWS + (v / heads_here) * p.heads_per_cta +
                       v % heads_here) * SUM_STRIDE(D) + D, 0.f);
}

// w: this block's work item; combine: where its combine item is (with w.part >= 0), read
// only after the block's keys are done; sums: the fast merge's (paged_combine_sums), or null.
// VAR: var is the job's variant (masks narrowing each row's keys, score transforms, sinks);
// without it the code is the plain kernel's.
template <typename T, int D, bool VAR = false>
__device__ __forceinline__ void paged_attention(const gllm_cuda_paged_params &p,
                                                const gllm_cuda_paged_work w,
                                                const gllm_cuda_paged_combine *combine,
                                                float *sums = nullptr,
                                                const gllm_cuda_variant *var = nullptr)
{
    constexpr int CH = D / 8;                  // 16-byte chunks per row
    constexpr int DK = D / 16, DN = D / 8;
    constexpr int PER_THREAD = PG_KEYS * CH / PG_THREADS;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sKV = sQ + PG_ROWS * D;                 // stage s: K [KEYS][D], then V [KEYS][D]

    const int hkv = blockIdx.y / p.head_chunks, hc = blockIdx.y % p.head_chunks;
    const int hpc = p.heads_per_cta;
    const int head0 = hkv * p.group + hc * hpc;
    const int heads_here = min(hpc, p.group - hc * hpc);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3, lm = lane >> 3, lr = lane & 7;

    const T *Q = reinterpret_cast<const T *>(p.q);
    for (int c = threadIdx.x; c < PG_ROWS * CH; c += PG_THREADS) {
        const int r = c / CH, ch = c % CH, qi = r / hpc, hh = r % hpc;
        const bool ok = qi < w.nq && hh < heads_here;
        const T *src = Q + ((int64_t)(w.q0 + qi) * p.Hq + head0 + hh) * D + ch * 8;
        cp_async16(smem_addr(sQ + swz<D>(r, ch)), ok ? src : Q, ok ? 16 : 0);
    }

    // Token tok of the sequence lives in row (page * page_size + tok % page_size) of a pool,
    // whose rows are [Hkv, D]: this block's head is at hkv * D within it.
    const T *Kc = reinterpret_cast<const T *>(p.k_cache) + hkv * D;
    const T *Vc = reinterpret_cast<const T *>(p.v_cache) + hkv * D;
    // The host put the sequence's kv_indptr entry in the work item: one dependent load fewer
    // before the first page number, which every block waits for.
    const int32_t *pages = p.kv_indices + w.page0;
    const int64_t row_elems = (int64_t)p.Hkv * D;
    const int n_tiles = (w.kv1 - w.kv0 + PG_KEYS - 1) / PG_KEYS;
    // Page numbers of the rows this thread copies, fetched one tile ahead of their copies
    // so the load of the page table never stalls a cp.async.
    int32_t pg[PER_THREAD];
    auto fetch_pages = [&](int tile) {
        if (tile < n_tiles) {
#pragma unroll
            for (int i = 0; i < PER_THREAD; i++) {
                const int row = (threadIdx.x + i * PG_THREADS) / CH;
                const int tk = min(w.kv0 + tile * PG_KEYS + row, w.kv1 - 1);
                pg[i] = pages[p.page_shift >= 0 ? tk >> p.page_shift : tk / p.page_size];
            }
        }
    };
    auto load = [&](int tile) {                // uses pg, which must hold tile's pages
        if (tile < n_tiles) {
            const int base = w.kv0 + tile * PG_KEYS;
            const uint32_t sk = smem_addr(sKV + (tile % PG_STAGES) * 2 * PG_KEYS * D);
            const uint32_t sv = sk + PG_KEYS * D * 2;
#pragma unroll
            for (int i = 0; i < PER_THREAD; i++) {
                const int c = threadIdx.x + i * PG_THREADS, row = c / CH, tok = base + row;
                const int tk = min(tok, w.kv1 - 1);
                const int po = p.page_shift >= 0 ? tk & (p.page_size - 1) : tk % p.page_size;
                // Checked here, where the page number is used, not where it is fetched: a
                // compare at the fetch would wait for the load the prefetch is hiding.
                const bool in_pool = (uint32_t)pg[i] < p.num_pages;
                if (!in_pool)
                    *p.bad_page = 1;
                const int64_t off = ((int64_t)(in_pool ? pg[i] : 0) * p.page_size + po) * row_elems +
                                    (c % CH) * 8;
                const bool ok = tok < w.kv1 && in_pool;
                const uint32_t so = (uint32_t)swz<D>(row, c % CH) * 2;
                cp_async16(sk + so, Kc + off, ok ? 16 : 0);
                cp_async16(sv + so, Vc + off, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < PG_STAGES - 1; s++) {  // Q joins the first group
        fetch_pages(s);
        load(s);
    }
    fetch_pages(PG_STAGES - 1);

    float o[DN][4];
#pragma unroll
    for (int i = 0; i < DN; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    // This thread's rows g and g + 8: the last key each may see (causal; decode sees all).
    const int limit[2] = {w.pos0 + g / hpc, w.pos0 + (g + 8) / hpc};
    const float qk_scale = p.scale * LOG2E;
    // With a variant, row hr sees keys [lo, hi] (the window's and its chunk's meet with the
    // causal limit) and adds slope (ALiBi, base 2) times its distance to each score.
    int lo[2] = {0, 0}, hi[2] = {limit[0], limit[1]};
    float slope[2] = {0.f, 0.f};
    if (VAR) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int pos = limit[hr], r = g + 8 * hr;
            if (var->window_left >= 0)
                lo[hr] = max(lo[hr], pos - var->window_left);
            if (var->window_right >= 0)
                hi[hr] = min(hi[hr], pos + var->window_right);
            if (var->chunk > 0) {
                const int c0 = pos / var->chunk * var->chunk;     // positions are never negative
                lo[hr] = max(lo[hr], c0), hi[hr] = min(hi[hr], c0 + var->chunk - 1);
            }
            if (var->alibi && r / hpc < w.nq && r % hpc < heads_here)
                slope[hr] = var->alibi[head0 + r % hpc] * LOG2E;
        }
    }
    // Q's fragments stay in registers up to D 128; above, they are read from shared memory
    // at each k-step (64 more registers at D 256 would spill the accumulators, and the
    // reads cost nothing a memory-bound loop waits for).
    constexpr bool Q_REGS = D <= 128;
    uint32_t qf[Q_REGS ? DK : 1][4];

    for (int j = 0; j < n_tiles; j++) {
        cp_async_wait_stages();                // tile j (and Q) landed, for this thread
        __syncthreads();                       // ... for all; all are done with tile j - 1
        load(j + PG_STAGES - 1);               // into the stage tile j - 1 used
        fetch_pages(j + PG_STAGES);
        if (Q_REGS && j == 0) {
#pragma unroll
            for (int kk = 0; kk < DK; kk++)
                ldmatrix_x4(qf[Q_REGS ? kk : 0], smem_addr(sQ + swz<D>(lr + 8 * (lm & 1), kk * 2 + (lm >> 1))));
        }
        const T *sK = sKV + (j % PG_STAGES) * 2 * PG_KEYS * D, *sV = sK + PG_KEYS * D;
        const int kw = warp * 16;              // this warp's keys within the stage

        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            uint32_t kf[4];
            if (!Q_REGS)
                ldmatrix_x4(qf[0], smem_addr(sQ + swz<D>(lr + 8 * (lm & 1), kk * 2 + (lm >> 1))));
            const uint32_t *qk = qf[Q_REGS ? kk : 0];
            ldmatrix_x4(kf, smem_addr(sK + swz<D>(kw + lr + 8 * (lm >> 1), kk * 2 + (lm & 1))));
            mma16816<T>(s[0], qk, kf);
            mma16816<T>(s[1], qk, kf + 2);
        }
        const int key0 = w.kv0 + j * PG_KEYS + kw;
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nn = 0; nn < 2; nn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key0 + nn * 8 + 2 * t + (e & 1), hr = e >> 1;
                float x = s[nn][e] * qk_scale;
                bool seen = key < w.kv1 && key <= limit[hr];
                if (VAR) {
                    // The cap on the natural-log score, then the bias (Gemma 2's order).
                    float y = s[nn][e] * p.scale;
                    if (var->soft_cap > 0.f)
                        y = var->soft_cap * tanhf(y / var->soft_cap);
                    x = y * LOG2E + slope[hr] * (float)(key - limit[hr]);
                    seen = seen && key >= lo[hr] && key <= hi[hr];
                }
                s[nn][e] = seen ? x : -INFINITY;
                tile_max[hr] = fmaxf(tile_max[hr], s[nn][e]);
            }
        uint32_t pf[4];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float mx = tile_max[hr];
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            mx = fmaxf(mx, row_max[hr]);
            // A row that has seen nothing yet keeps 0 as its reference (no inf - inf).
            const float ref = mx == -INFINITY ? 0.f : mx;
            const float alpha = fast_exp2(row_max[hr] - ref);
            row_max[hr] = mx;
            const float e0 = fast_exp2(s[0][2 * hr] - ref), e1 = fast_exp2(s[0][2 * hr + 1] - ref);
            const float e2 = fast_exp2(s[1][2 * hr] - ref), e3 = fast_exp2(s[1][2 * hr + 1] - ref);
            row_sum[hr] = row_sum[hr] * alpha + (e0 + e1 + e2 + e3);   // quad-partial
#pragma unroll
            for (int dn = 0; dn < DN; dn++)
                o[dn][2 * hr] *= alpha, o[dn][2 * hr + 1] *= alpha;
            pf[hr] = Elem<T>::pack(e0, e1);          // keys 2t, 2t+1 of n-tile 0
            pf[2 + hr] = Elem<T>::pack(e2, e3);      // ... of n-tile 1
        }
#pragma unroll
        for (int dn = 0; dn < DN; dn += 2) {
            uint32_t vf[4];
            ldmatrix_x4_trans(vf, smem_addr(sV + swz<D>(kw + lr + 8 * (lm & 1), dn + (lm >> 1))));
            mma16816<T>(o[dn], pf, vf);
            mma16816<T>(o[dn + 1], pf, vf + 2);
        }
    }
    cp_async_wait_all();
    __syncthreads();

    // Merge the four warps' key slices through shared memory (the stages are free now).
    // Only the tile's real rows (a decode block has 4 of 16 at GQA 4) are written and
    // merged, and rows are padded by 8 floats so a warp's 8 row groups store to different
    // banks: the merge as first written (all rows, unpadded: 8-way conflicts) took
    // 3.5 us of every block, more than B1 L8192 spends streaming after its first tile.
    constexpr int OS = D + 8;
    static_assert((PG_WARPS * PG_ROWS * OS + 2 * PG_WARPS * PG_ROWS) * 4 <= PG_STAGES * 2 * PG_KEYS * D * 2,
                  "the merge fits in the stages");
    float *sO = reinterpret_cast<float *>(sKV);             // [WARPS][ROWS][OS]
    float *sM = sO + PG_WARPS * PG_ROWS * OS, *sL = sM + PG_WARPS * PG_ROWS;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float sum = row_sum[hr];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        const int r = g + 8 * hr;
        if (r / hpc < w.nq && r % hpc < heads_here) {
            float *orow = sO + (warp * PG_ROWS + r) * OS;
#pragma unroll
            for (int dn = 0; dn < DN; dn++)
                *reinterpret_cast<float2 *>(orow + dn * 8 + 2 * t) = make_float2(o[dn][2 * hr], o[dn][2 * hr + 1]);
            if (t == 0)
                sM[warp * PG_ROWS + r] = row_max[hr], sL[warp * PG_ROWS + r] = sum;
        }
    }
    __syncthreads();
    T *O = reinterpret_cast<T *>(p.out);
    // Four columns per thread, as float4: a decode block's 4 real rows take one pass.
    constexpr int C4 = D / 4;
    const int real_rows = w.nq * heads_here;
    for (int idx = threadIdx.x; idx < real_rows * C4; idx += PG_THREADS) {
        const int v = idx / C4, c4 = idx % C4, qi = v / heads_here, hh = v - qi * heads_here;
        const int r = qi * hpc + hh;
        float mk[PG_WARPS], M = -INFINITY;
#pragma unroll
        for (int k = 0; k < PG_WARPS; k++)
            mk[k] = sM[k * PG_ROWS + r], M = fmaxf(M, mk[k]);
        const float ref = M == -INFINITY ? 0.f : M;
        float L = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < PG_WARPS; k++) {
            const float f = fast_exp2(mk[k] - ref);
            const float4 x = *reinterpret_cast<const float4 *>(sO + (k * PG_ROWS + r) * OS + 4 * c4);
            L += sL[k * PG_ROWS + r] * f;
            acc.x += f * x.x, acc.y += f * x.y, acc.z += f * x.z, acc.w += f * x.w;
        }
        if (sums && w.part >= 0) {
            // This block's part of the sums, relative to 2^0: exact while 2^M and the sums
            // stay in fp32's range; the last block checks that, else merges the partials.
            const float e = M == -INFINITY ? 0.f : fast_exp2(M);
            float *a = sums + ((int64_t)blockIdx.y * PG_ROWS + r) * SUM_STRIDE(D);
            red_add4(a + 4 * c4, make_float4(acc.x * e, acc.y * e, acc.z * e, acc.w * e));
            if (c4 == 0)
                atomicAdd(a + D, L * e);
        }
        if (VAR && var->sinks && w.part < 0)     // a split row's sink joins in its combine
            add_sink(var->sinks[head0 + hh] * LOG2E, M, L, acc);
        const float inv = L > 0.f ? 1.f / L : 0.f;
        acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
        if (w.part < 0) {
            T *dst = O + ((int64_t)(w.q0 + qi) * p.Hq + head0 + hh) * D + 4 * c4;
            *reinterpret_cast<uint2 *>(dst) = make_uint2(Elem<T>::pack(acc.x, acc.y), Elem<T>::pack(acc.z, acc.w));
        } else {
            const int64_t slot = (int64_t)w.part * gridDim.y + blockIdx.y;
            *reinterpret_cast<float4 *>(p.part_o + (slot * PG_ROWS + r) * D + 4 * c4) = acc;
            if (c4 == 0)
                p.part_lse[slot * PG_ROWS + r] = L > 0.f ? M + __log2f(L) : -INFINITY;
        }
    }
    if (w.part < 0)
        return;
    // Count this part in; the block that brings the count to nparts merges them all and
    // zeroes the counter for the next job (every other block has counted by then).
    __shared__ int last;
    const gllm_cuda_paged_combine c = *combine;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *ctr = p.counters + (int64_t)w.comb * gridDim.y + blockIdx.y;
        last = atomicAdd(ctr, 1) == c.nparts - 1;
        if (last)
            *ctr = 0;
    }
    __syncthreads();
    if (last) {
        __threadfence();
        if (sums)
            paged_combine_sums<T, D, VAR>(p, c, head0, heads_here, sums, var);
        else
            paged_combine<T, D, VAR>(p, c, head0, heads_here, var);
    }
}

} // namespace

// A batch of one-token sequences, none split: block x's work item is made from the
// launch's parameters (constant memory), not loaded from an uploaded plan.
template <typename T, int D>
__device__ __forceinline__ void paged_batch(const gllm_cuda_paged_batch_params &b)
{
    const int x = blockIdx.x;
    const gllm_cuda_paged_work w = {b.page0[x], x, 1, b.len[x] - 1, 0, b.len[x], -1, -1};
    paged_attention<T, D>(b.p, w, nullptr);
}

// One one-token sequence split into gridDim.x key ranges of s.chunk keys: block x's work
// item and the one combine item come from the launch's parameters.
template <typename T, int D, bool VAR = false>
__device__ __forceinline__ void paged_single(const gllm_cuda_paged_single_params &s,
                                             const gllm_cuda_variant *v = nullptr,
                                             int kv_begin = 0)
{
    const int x = blockIdx.x, kv0 = kv_begin + x * s.chunk;
    const bool split = gridDim.x > 1;
    const gllm_cuda_paged_work w = {s.page0, 0, 1, s.len - 1, kv0, min(kv0 + s.chunk, s.len),
                                    split ? x : -1, split ? 0 : -1};
    paged_attention<T, D, VAR>(s.p, w, &s.comb, s.sums, v);
}

// Entry points, instantiated from the registry's rows (kernel_registry.h).
#define GLLM_CUDA_ENTRY_PAGED(T, D, FLAGS, symbol)                                             \
    extern "C" __global__ void __launch_bounds__(PG_THREADS, 2)                                \
        symbol(const gllm_cuda_paged_params p)                                                 \
    {                                                                                          \
        const gllm_cuda_paged_work w = p.work[blockIdx.x];                                     \
        paged_attention<T, D>(p, w, w.part >= 0 ? p.combine + w.comb : nullptr);               \
    }
#define GLLM_CUDA_ENTRY_PAGED_VAR(T, D, FLAGS, symbol)                                         \
    extern "C" __global__ void __launch_bounds__(PG_THREADS, 2)                                \
        symbol(const __grid_constant__ gllm_cuda_paged_var_params pv)                          \
    {                                                                                          \
        const gllm_cuda_paged_work w = pv.p.work[blockIdx.x];                                  \
        paged_attention<T, D, true>(pv.p, w, w.part >= 0 ? pv.p.combine + w.comb : nullptr,    \
                                    nullptr, &pv.v);                                           \
    }
#define GLLM_CUDA_ENTRY_PAGED_SINGLE_VAR(T, D, FLAGS, symbol)                                  \
    extern "C" __global__ void __launch_bounds__(PG_THREADS, 2)                                \
        symbol(const __grid_constant__ gllm_cuda_paged_single_var_params sv)                   \
    {                                                                                          \
        paged_single<T, D, true>(sv.s, &sv.v, sv.kv_begin);                                    \
    }
#define GLLM_CUDA_ENTRY_PAGED_BATCH(T, D, FLAGS, symbol)                                       \
    extern "C" __global__ void __launch_bounds__(PG_THREADS, 2)                                \
        symbol(const __grid_constant__ gllm_cuda_paged_batch_params b)                         \
    {                                                                                          \
        paged_batch<T, D>(b);                                                                  \
    }
#define GLLM_CUDA_ENTRY_PAGED_SINGLE(T, D, FLAGS, symbol)                                      \
    extern "C" __global__ void __launch_bounds__(PG_THREADS, 2)                                \
        symbol(const __grid_constant__ gllm_cuda_paged_single_params s)                        \
    {                                                                                          \
        paged_single<T, D>(s);                                                                 \
    }
// kv_append: one block per new token copies its K and V rows into their slots.
template <typename T>
__device__ __forceinline__ void kv_append_rows(const gllm_cuda_append_params &p)
{
    const int64_t i = blockIdx.x, dst = p.slot[i] * p.row_bytes, src = i * p.row_bytes;
    const char *kn = static_cast<const char *>(p.k_new) + src, *vn = static_cast<const char *>(p.v_new) + src;
    char *kc = static_cast<char *>(p.k_cache) + dst, *vc = static_cast<char *>(p.v_cache) + dst;
    if (p.vec16) {
        for (int64_t b = threadIdx.x * 16; b < p.row_bytes; b += blockDim.x * 16) {
            *reinterpret_cast<uint4 *>(kc + b) = *reinterpret_cast<const uint4 *>(kn + b);
            *reinterpret_cast<uint4 *>(vc + b) = *reinterpret_cast<const uint4 *>(vn + b);
        }
    } else {
        for (int64_t b = threadIdx.x * 2; b < p.row_bytes; b += blockDim.x * 2) {
            *reinterpret_cast<uint16_t *>(kc + b) = *reinterpret_cast<const uint16_t *>(kn + b);
            *reinterpret_cast<uint16_t *>(vc + b) = *reinterpret_cast<const uint16_t *>(vn + b);
        }
    }
}
// Any dtype (T is void): the rows are copied as bytes.
#define GLLM_CUDA_ENTRY_APPEND(T, D, FLAGS, symbol)                                            \
    extern "C" __global__ void __launch_bounds__(128) symbol(const gllm_cuda_append_params p)  \
    {                                                                                          \
        kv_append_rows<T>(p);                                                                  \
    }
GLLM_CUDA_PAGED_KERNELS(GLLM_CUDA_ENTRY)
