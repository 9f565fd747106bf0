/* Dense attention, paged attention (decode and chunked prefill) and KV-cache appends, written
 * once for AMD (clang, HIP language) and NVIDIA (nvcc) over portable.h. Correctness first: a
 * wave takes one query row, its lanes split the head dim, keys are staged PK_KEYS at a time
 * in shared memory as f32, and the softmax is online in f32 (base 2). */
#include "portable.h"

typedef long long i64;

/* Key j of a dense [b, h, s, d] view: K and V element offsets of its row. */
struct dense_keys {
    i64 kbase, vbase, kst, vst;
    __device__ bool row(int j, i64 *ko, i64 *vo) const
    {
        *ko = kbase + (i64)j * kst;
        *vo = vbase + (i64)j * vst;
        return true;
    }
};

/* Key j of sequence b in the paged pools, through its page table; a page number outside the
 * pool is never followed: it raises the job's flag and reads as zeros. */
struct paged_keys {
    const int *pages;     /* this sequence's page numbers */
    i64 num_pages, row_elems, head_off;
    int page_size;
    int *bad;
    __device__ bool row(int j, i64 *ko, i64 *vo) const
    {
        int pg = pages[j / page_size];
        if (pg < 0 || pg >= num_pages) {
            pk_flag(bad);
            return false;
        }
        *ko = *vo = ((i64)pg * page_size + j % page_size) * row_elems + head_off;
        return true;
    }
};

/* One workgroup: up to PK_ROWS query rows of one (sequence, head). limit is how many keys
 * this wave's row sees (0 for a row past the end), nkeys the most any row of the block sees.
 * Every thread reaches every barrier: rows without work still help stage keys. */
template <typename T, typename Keys>
PK_INLINE void attend(const Keys &keys, const T *K, i64 kd, const T *V, i64 vd, int D,
                      int nkeys, int limit, float scale_log2, const T *q, i64 qd, T *out,
                      i64 od, float *lse)
{
    __shared__ float ks[PK_KEYS][PK_MAX_D];
    __shared__ float vs[PK_KEYS][PK_MAX_D];
    const int tid = (int)pk_thread(), lane = tid % PK_WAVE;
    float qv[PK_PER_LANE], acc[PK_PER_LANE];
    for (int e = 0; e < PK_PER_LANE; e++) {
        const int d = lane + e * PK_WAVE;
        qv[e] = limit > 0 && d < D ? pk_load(q + d * qd) * scale_log2 : 0.0f;
        acc[e] = 0.0f;
    }
    float m = pk_neg_inf(), l = 0.0f;
    for (int k0 = 0; k0 < nkeys; k0 += PK_KEYS) {
        pk_barrier();                                /* the previous step's tiles are read */
        for (int idx = tid; idx < PK_KEYS * D; idx += PK_BLOCK) {
            const int t = idx / D, d = idx % D, j = k0 + t;
            i64 ko, vo;
            float kx = 0.0f, vx = 0.0f;
            if (j < nkeys && keys.row(j, &ko, &vo)) {
                kx = pk_load(K + ko + d * kd);
                vx = pk_load(V + vo + d * vd);
            }
            ks[t][d] = kx;
            vs[t][d] = vx;
        }
        pk_barrier();
        const int n = limit - k0 < PK_KEYS ? limit - k0 : PK_KEYS;
        for (int t = 0; t < n; t++) {
            float s = 0.0f;
            for (int e = 0; e < PK_PER_LANE; e++) {
                const int d = lane + e * PK_WAVE;
                if (d < D)
                    s += qv[e] * ks[t][d];
            }
            s = pk_wave_sum(s);
            const float mn = s > m ? s : m;
            const float corr = pk_exp2(m - mn), pr = pk_exp2(s - mn);
            l = l * corr + pr;
            for (int e = 0; e < PK_PER_LANE; e++) {
                const int d = lane + e * PK_WAVE;
                acc[e] = acc[e] * corr + (d < D ? pr * vs[t][d] : 0.0f);
            }
            m = mn;
        }
    }
    if (!out)
        return;
    /* A row that sees no key is zeros with lse -inf, as on the CPU backend. */
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int e = 0; e < PK_PER_LANE; e++) {
        const int d = lane + e * PK_WAVE;
        if (d < D)
            pk_store(out + d * od, acc[e] * inv);
    }
    if (lse && lane == 0)
        *lse = l > 0.0f ? (m + pk_log2(l)) * 0.69314718055994531f : pk_neg_inf();
}

/* Keys row i of Sq sees among Skv (bottom-right causal mask), clamped to [0, Skv]. */
PK_INLINE int visible(int i, int Sq, int Skv, bool causal)
{
    if (i >= Sq)
        return 0;
    if (!causal)
        return Skv;
    const i64 last = (i64)i + Skv - Sq + 1;
    return last < 0 ? 0 : last > Skv ? Skv : (int)last;
}

/* Grid: x = ceil(Sq / PK_ROWS), y = B * Hq. */
template <typename T>
PK_INLINE void dense(const pk_attn_params &p)
{
    const int bh = (int)pk_block_y(), b = bh / p.Hq, h = bh % p.Hq;
    const int hk = h / (p.Hq / p.Hkv);
    const int first = (int)pk_block_x() * PK_ROWS, i = first + (int)pk_thread() / PK_WAVE;
    const int lastrow = first + PK_ROWS - 1 < p.Sq - 1 ? first + PK_ROWS - 1 : p.Sq - 1;
    const int limit = visible(i, p.Sq, p.Skv, p.causal), nkeys = visible(lastrow, p.Sq, p.Skv, p.causal);
    const dense_keys keys = {b * p.k_st[0] + hk * p.k_st[1], b * p.v_st[0] + hk * p.v_st[1],
                             p.k_st[2], p.v_st[2]};
    const bool row = i < p.Sq;
    const T *q = (const T *)p.q + (row ? b * p.q_st[0] + h * p.q_st[1] + i * p.q_st[2] : 0);
    T *out = row ? (T *)p.out + b * p.o_st[0] + h * p.o_st[1] + i * p.o_st[2] : (T *)0;
    float *lse = row && p.lse ? (float *)p.lse + b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]
                              : (float *)0;
    attend<T>(keys, (const T *)p.k, p.k_st[3], (const T *)p.v, p.v_st[3], p.D, nkeys, limit,
              p.scale_log2, q, p.q_st[3], out, p.o_st[3], lse);
}

/* Grid: x = ceil(max queries of a sequence / PK_ROWS), y = B * Hq. A sequence's queries are
 * its last tokens: the dense bottom-right mask with Sq = its queries, Skv = its tokens. */
template <typename T>
PK_INLINE void paged(const pk_paged_params &p)
{
    const int bh = (int)pk_block_y(), b = bh / p.Hq, h = bh % p.Hq;
    const int hk = h / (p.Hq / p.Hkv);
    const int *q_indptr = (const int *)p.q_indptr, *kv_indptr = (const int *)p.kv_indptr;
    const int q0 = q_indptr[b], nq = q_indptr[b + 1] - q0, Skv = ((const int *)p.kv_len)[b];
    const int first = (int)pk_block_x() * PK_ROWS, i = first + (int)pk_thread() / PK_WAVE;
    if (first >= nq)
        return;                                      /* the whole workgroup leaves together */
    const int lastrow = first + PK_ROWS - 1 < nq - 1 ? first + PK_ROWS - 1 : nq - 1;
    const int limit = visible(i, nq, Skv, true), nkeys = visible(lastrow, nq, Skv, true);
    const paged_keys keys = {(const int *)p.kv_indices + kv_indptr[b], p.num_pages,
                             (i64)p.Hkv * p.D, (i64)hk * p.D, p.page_size, (int *)p.bad};
    const bool row = i < nq;
    const i64 qoff = row ? ((i64)(q0 + i) * p.Hq + h) * p.D : 0;
    attend<T>(keys, (const T *)p.k_cache, 1, (const T *)p.v_cache, 1, p.D, nkeys, limit,
              p.scale_log2, (const T *)p.q + qoff, 1, row ? (T *)p.out + qoff : (T *)0, 1,
              (float *)0);
}

PK_KERNEL(PK_BLOCK) gllm_pk_attn_f32(pk_attn_params p) { dense<float>(p); }
PK_KERNEL(PK_BLOCK) gllm_pk_attn_f16(pk_attn_params p) { dense<pk_f16>(p); }
PK_KERNEL(PK_BLOCK) gllm_pk_attn_bf16(pk_attn_params p) { dense<pk_bf16>(p); }
PK_KERNEL(PK_BLOCK) gllm_pk_paged_f32(pk_paged_params p) { paged<float>(p); }
PK_KERNEL(PK_BLOCK) gllm_pk_paged_f16(pk_paged_params p) { paged<pk_f16>(p); }
PK_KERNEL(PK_BLOCK) gllm_pk_paged_bf16(pk_paged_params p) { paged<pk_bf16>(p); }

/* One thread per element of the new rows (grid x = ceil(nnew * Hkv * D / PK_APPEND_THREADS)):
 * token t of sequence b (found by bisecting q_indptr) goes to position kv_len[b] - n + i. */
PK_KERNEL(PK_APPEND_THREADS) gllm_pk_append(pk_paged_params p)
{
    const i64 row = (i64)p.Hkv * p.D;
    const i64 idx = (i64)pk_block_x() * PK_APPEND_THREADS + pk_thread();
    if (idx >= (i64)p.nnew * row)
        return;
    const int t = (int)(idx / row);
    const i64 within = idx % row;
    const int *q_indptr = (const int *)p.q_indptr;
    int lo = 0, hi = p.B;                            /* q_indptr[lo] <= t < q_indptr[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (q_indptr[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    const int b = lo, n = q_indptr[b + 1] - q_indptr[b], pos = ((const int *)p.kv_len)[b] - n + (t - q_indptr[b]);
    const int pg = ((const int *)p.kv_indices)[((const int *)p.kv_indptr)[b] + pos / p.page_size];
    if (pg < 0 || pg >= p.num_pages) {
        pk_flag((int *)p.bad);
        return;
    }
    const i64 dst = ((i64)pg * p.page_size + pos % p.page_size) * row + within, src = (i64)t * row + within;
    if (p.elem_bytes == 4) {
        ((unsigned *)p.k_cache)[dst] = ((const unsigned *)p.k_new)[src];
        ((unsigned *)p.v_cache)[dst] = ((const unsigned *)p.v_new)[src];
    } else {
        ((unsigned short *)p.k_cache)[dst] = ((const unsigned short *)p.k_new)[src];
        ((unsigned short *)p.v_cache)[dst] = ((const unsigned short *)p.v_new)[src];
    }
}
