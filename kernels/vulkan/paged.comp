#version 460
// Paged attention (decode and chunked prefill). Grid: x = ceil(max queries of a sequence /
// ROWS), y = B * Hq. A sequence's queries are its last tokens: the dense bottom-right mask
// with Sq = its queries, Skv = its tokens. A page number outside the pool is never followed:
// it raises the job's flag and reads as zeros.
#extension GL_GOOGLE_include_directive : require
#include "vk_common.glsl"
#include "vk_attend.glsl"

uint64_t pages, bad;
int64_t num_pages, row_elems, head_off;
int page_size;

bool key_row(int j, out int64_t ko, out int64_t vo)
{
    const int pg = ld_i32(pages, j / page_size);
    if (pg < 0 || pg >= num_pages) {
        I32Ref(bad).v = 1;
        ko = vo = 0;
        return false;
    }
    ko = vo = (int64_t(pg) * page_size + j % page_size) * row_elems + head_off;
    return true;
}

void main()
{
    PagedParams p = PagedParams(pc.params);
    const int bh = int(gl_WorkGroupID.y), b = bh / p.Hq, h = bh % p.Hq;
    const int hk = h / (p.Hq / p.Hkv);
    const int q0 = ld_i32(p.q_indptr, b), nq = ld_i32(p.q_indptr, b + 1) - q0;
    const int Skv = ld_i32(p.kv_len, b);
    const int first = int(gl_WorkGroupID.x) * ROWS, i = first + int(gl_SubgroupID);
    if (first >= nq)
        return;                                    // the whole workgroup leaves together
    const int lastrow = min(first + ROWS - 1, nq - 1);
    VariantParams vp = VariantParams(pc.params + VARIANT_AT);
    const int64_t shift = int64_t(Skv) - nq, pos = i + shift;
    int lo, hi, blo, bhi, unused;
    keys_of(i < nq, pos, Skv, true, vp, lo, hi);
    keys_of(true, first + shift, Skv, true, vp, blo, unused);
    keys_of(true, lastrow + shift, Skv, true, vp, unused, bhi);
    pages = p.kv_indices + uint64_t(ld_i32(p.kv_indptr, b)) * 4ul;
    bad = p.bad;
    num_pages = p.num_pages;
    row_elems = int64_t(p.Hkv) * p.D;
    head_off = int64_t(hk) * p.D;
    page_size = p.page_size;
    const bool row = i < nq;
    const int64_t qoff = row ? (int64_t(q0 + i) * p.Hq + h) * p.D : 0;
    const uint64_t esize = ELEM_BYTES;
    attend(p.k_cache, 1, p.v_cache, 1, p.D, blo, bhi, lo, hi, pos, h, vp, p.scale_log2,
           p.q + uint64_t(qoff) * esize, 1, row ? p.o + uint64_t(qoff) * esize : 0ul, 1, 0ul);
}
