/* Dense attention, paged attention (decode and chunked prefill) and KV-cache appends, written
 * once for AMD (clang, HIP language) and NVIDIA (nvcc) over portable.h. Correctness first: a
 * wave takes one query row, its lanes split the head dim, keys are staged PK_KEYS at a time
 * in shared memory as f32, and the softmax is online in f32 (base 2). The attention variant
 * (pk_params.h's struct pk_variant) is read the CPU backend's way: its masks narrow each
 * row's keys to one interval, so a workgroup stages only the union of its rows' intervals
 * and a row computes only its own; the soft-cap and ALiBi transform a visible score; the
 * sink joins the softmax when the row is done. Dense attention's V and out may have a head
 * dim Dv below D; the paged caches have one head dim. */
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

#define PK_LOG2E 1.4426950408889634f
#define PK_LN2 0.69314718055994531f

/* floor(a / b) for b > 0: dense positions are negative where Sq > Skv, and a chunk is
 * floor(position / chunk), not C's truncation toward zero. */
PK_INLINE i64 floor_div(i64 a, i64 b)
{
    const i64 q = a / b;
    return q * b > a ? q - 1 : q;
}

/* Keys [lo, hi) (lo == hi: none). */
struct span {
    int lo, hi;
};

/* The keys of [0, skv) the query at position pos sees: causality, the window's edges and
 * the chunk each narrow one interval, so their meet is one too (backend_api.h's definition;
 * 64-bit, since a window edge may be INT32_MAX). */
PK_INLINE span keys_seen(const pk_variant &v, bool causal, i64 pos, int skv)
{
    i64 lo = 0, hi = skv;
    if (causal && pos + 1 < hi)
        hi = pos + 1;
    if (v.window_left >= 0 && pos - v.window_left > lo)
        lo = pos - v.window_left;
    if (v.window_right >= 0 && pos + v.window_right + 1 < hi)
        hi = pos + v.window_right + 1;
    if (v.chunk > 0) {
        const i64 c0 = floor_div(pos, v.chunk) * v.chunk;
        lo = c0 > lo ? c0 : lo;
        hi = c0 + v.chunk < hi ? c0 + v.chunk : hi;
    }
    if (lo > skv)
        lo = skv;
    return {(int)lo, (int)(hi > lo ? hi : lo)};
}

/* The keys a workgroup stages: the smallest interval holding what its rows first ..
 * first + PK_ROWS - 1 (of nrows, row r at position r + skv - nrows) see; rows that see
 * nothing add nothing. Consecutive positions' intervals overlap or touch, so no key in it
 * goes unused by every row. */
PK_INLINE span block_keys(const pk_variant &v, bool causal, int first, int nrows, int skv)
{
    span u = {0, 0};
    for (int r = first; r < first + PK_ROWS && r < nrows; r++) {
        const span s = keys_seen(v, causal, (i64)r + skv - nrows, skv);
        if (s.lo == s.hi)
            continue;
        u.lo = u.lo < u.hi && u.lo < s.lo ? u.lo : s.lo;
        u.hi = u.hi > s.hi ? u.hi : s.hi;
    }
    return u;
}

/* A visible score's transforms for one row of head h, in base 2 (scores arrive as scale q.k
 * log2(e)): the soft-cap on the natural-log score, cap tanh(s / cap), then ALiBi's slope
 * (j - pos); and the sink's logit (-inf: none, which joins nothing). */
struct score_terms {
    float cap2, icap;      /* cap log2(e) and ln(2) / cap; cap2 0: no soft-cap */
    float slope2;          /* slope log2(e); 0 without ALiBi */
    float sink2;
    i64 pos;
    __device__ float operator()(float s, int j) const
    {
        if (cap2 > 0.0f)
            s = cap2 * pk_tanh(s * icap);
        return s + slope2 * (float)(j - pos);
    }
};

PK_INLINE score_terms terms_of(const pk_variant &v, int h, i64 pos)
{
    score_terms t;
    t.cap2 = v.soft_cap > 0.0f ? v.soft_cap * PK_LOG2E : 0.0f;
    t.icap = v.soft_cap > 0.0f ? PK_LN2 / v.soft_cap : 0.0f;
    t.slope2 = v.alibi ? ((const float *)v.alibi)[h] * PK_LOG2E : 0.0f;
    t.sink2 = v.sinks ? ((const float *)v.sinks)[h] * PK_LOG2E : pk_neg_inf();
    t.pos = pos;
    return t;
}

/* One wave's row: its query (head dim D), output (Dv; NULL: a row past the end, which only
 * helps stage keys), lse (NULL: not wanted), the keys it sees and its score terms. */
template <typename T>
struct row_io {
    const T *q;
    i64 qd;
    T *out;
    i64 od;
    float *lse;
    span seen;
    score_terms sc;
};

/* One workgroup: up to PK_ROWS query rows of one (sequence, head), over the keys blk (the
 * union of the rows' own). Every thread reaches every barrier: rows without work still help
 * stage keys. */
template <typename T, typename Keys>
PK_INLINE void attend(const Keys &keys, const T *K, i64 kd, const T *V, i64 vd, int D, int Dv,
                      span blk, float scale_log2, const row_io<T> &r)
{
    __shared__ float ks[PK_KEYS][PK_MAX_D];
    __shared__ float vs[PK_KEYS][PK_MAX_D];
    const int tid = (int)pk_thread(), lane = tid % PK_WAVE;
    float qv[PK_PER_LANE], acc[PK_PER_LANE];
    for (int e = 0; e < PK_PER_LANE; e++) {
        const int d = lane + e * PK_WAVE;
        qv[e] = r.seen.lo < r.seen.hi && d < D ? pk_load(r.q + d * r.qd) * scale_log2 : 0.0f;
        acc[e] = 0.0f;
    }
    float m = pk_neg_inf(), l = 0.0f;
    for (int k0 = blk.lo; k0 < blk.hi; k0 += PK_KEYS) {
        pk_barrier();                                /* the previous step's tiles are read */
        for (int idx = tid; idx < PK_KEYS * D; idx += PK_BLOCK) {
            const int t = idx / D, d = idx % D, j = k0 + t;
            i64 ko, vo;
            float kx = 0.0f, vx = 0.0f;
            if (j < blk.hi && keys.row(j, &ko, &vo)) {
                kx = pk_load(K + ko + d * kd);
                vx = d < Dv ? pk_load(V + vo + d * vd) : 0.0f;
            }
            ks[t][d] = kx;
            vs[t][d] = vx;
        }
        pk_barrier();
        /* This row's keys of the tile: wave-uniform bounds, so every lane shuffles alike. */
        const int t0 = r.seen.lo > k0 ? r.seen.lo - k0 : 0;
        const int t1 = r.seen.hi - k0 < PK_KEYS ? r.seen.hi - k0 : PK_KEYS;
        for (int t = t0; t < t1; t++) {
            float s = 0.0f;
            for (int e = 0; e < PK_PER_LANE; e++) {
                const int d = lane + e * PK_WAVE;
                if (d < D)
                    s += qv[e] * ks[t][d];
            }
            s = r.sc(pk_wave_sum(s), k0 + t);
            const float mn = s > m ? s : m;
            const float corr = pk_exp2(m - mn), pr = pk_exp2(s - mn);
            l = l * corr + pr;
            for (int e = 0; e < PK_PER_LANE; e++) {
                const int d = lane + e * PK_WAVE;
                acc[e] = acc[e] * corr + (d < Dv ? pr * vs[t][d] : 0.0f);
            }
            m = mn;
        }
    }
    if (!r.out)
        return;
    /* The sink: one more key of logit sink2 and value zero, joined as the CPU backend joins
     * it (a row that saw no key then has the sink's lse and zeros). */
    float keep = 1.0f;
    const float s2 = r.sc.sink2, mf = s2 > m ? s2 : m;
    if (mf != pk_neg_inf()) {
        keep = m == pk_neg_inf() ? 0.0f : pk_exp2(m - mf);
        l = l * keep + pk_exp2(s2 - mf);
        m = mf;
    }
    /* A row that sees no key is zeros with lse -inf, as on the CPU backend. */
    const float inv = l > 0.0f ? keep / l : 0.0f;
    for (int e = 0; e < PK_PER_LANE; e++) {
        const int d = lane + e * PK_WAVE;
        if (d < Dv)
            pk_store(r.out + d * r.od, acc[e] * inv);
    }
    if (r.lse && lane == 0)
        *r.lse = l > 0.0f ? (m + pk_log2(l)) * PK_LN2 : pk_neg_inf();
}

/* Grid: x = ceil(Sq / PK_ROWS), y = B * Hq. Row i is at position i + Skv - Sq. */
template <typename T>
PK_INLINE void dense(const pk_attn_params &p)
{
    const int bh = (int)pk_block_y(), b = bh / p.Hq, h = bh % p.Hq;
    const int hk = h / (p.Hq / p.Hkv);
    const int first = (int)pk_block_x() * PK_ROWS, i = first + (int)pk_thread() / PK_WAVE;
    const bool row = i < p.Sq;
    const i64 pos = (i64)i + p.Skv - p.Sq;
    const dense_keys keys = {b * p.k_st[0] + hk * p.k_st[1], b * p.v_st[0] + hk * p.v_st[1],
                             p.k_st[2], p.v_st[2]};
    row_io<T> r;
    r.q = (const T *)p.q + (row ? b * p.q_st[0] + h * p.q_st[1] + i * p.q_st[2] : 0);
    r.qd = p.q_st[3];
    r.out = row ? (T *)p.out + b * p.o_st[0] + h * p.o_st[1] + i * p.o_st[2] : (T *)0;
    r.od = p.o_st[3];
    r.lse = row && p.lse ? (float *)p.lse + b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]
                         : (float *)0;
    r.seen = row ? keys_seen(p.var, p.causal, pos, p.Skv) : span{0, 0};
    r.sc = terms_of(p.var, h, pos);
    attend<T>(keys, (const T *)p.k, p.k_st[3], (const T *)p.v, p.v_st[3], p.D, p.Dv,
              block_keys(p.var, p.causal, first, p.Sq, p.Skv), p.scale_log2, r);
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
    const paged_keys keys = {(const int *)p.kv_indices + kv_indptr[b], p.num_pages,
                             (i64)p.Hkv * p.D, (i64)hk * p.D, p.page_size, (int *)p.bad};
    const bool row = i < nq;
    const i64 pos = (i64)i + Skv - nq, qoff = row ? ((i64)(q0 + i) * p.Hq + h) * p.D : 0;
    row_io<T> r;
    r.q = (const T *)p.q + qoff;
    r.qd = 1;
    r.out = row ? (T *)p.out + qoff : (T *)0;
    r.od = 1;
    r.lse = (float *)0;
    r.seen = row ? keys_seen(p.var, true, pos, Skv) : span{0, 0};
    r.sc = terms_of(p.var, h, pos);
    attend<T>(keys, (const T *)p.k_cache, 1, (const T *)p.v_cache, 1, p.D, p.D,
              block_keys(p.var, true, first, nq, Skv), p.scale_log2, r);
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
