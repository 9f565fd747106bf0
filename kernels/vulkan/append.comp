#version 460
// KV-cache append: one invocation per element of the new rows; workgroups are numbered
// x + y * (groups in x), so a grid past the x limit folds into y. Token t of sequence b
// (found by bisecting q_indptr) goes to position kv_len[b] - n + i of its sequence.
#extension GL_GOOGLE_include_directive : require
#include "vk_common.glsl"

layout(local_size_x = 256) in;

void main()
{
    PagedParams p = PagedParams(pc.params);
    const int64_t row = int64_t(p.Hkv) * p.D;
    const int64_t blk = int64_t(gl_WorkGroupID.x) + int64_t(gl_WorkGroupID.y) * gl_NumWorkGroups.x;
    const int64_t idx = blk * 256 + gl_LocalInvocationID.x;
    if (idx >= int64_t(p.nnew) * row)
        return;
    const int t = int(idx / row);
    const int64_t within = idx % row;
    int lo = 0, hi = p.B;                          // q_indptr[lo] <= t < q_indptr[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (ld_i32(p.q_indptr, mid) <= t)
            lo = mid;
        else
            hi = mid;
    }
    const int b = lo, q0 = ld_i32(p.q_indptr, b), n = ld_i32(p.q_indptr, b + 1) - q0;
    const int pos = ld_i32(p.kv_len, b) - n + (t - q0);
    const int pg = ld_i32(p.kv_indices, ld_i32(p.kv_indptr, b) + pos / p.page_size);
    if (pg < 0 || pg >= p.num_pages) {
        I32Ref(p.bad).v = 1;
        return;
    }
    const int64_t dst = (int64_t(pg) * p.page_size + pos % p.page_size) * row + within;
    const int64_t src = int64_t(t) * row + within;
    if (p.elem_bytes == 4) {
        U32Ref(p.k_cache + uint64_t(dst) * 4ul).v = U32Ref(p.k_new + uint64_t(src) * 4ul).v;
        U32Ref(p.v_cache + uint64_t(dst) * 4ul).v = U32Ref(p.v_new + uint64_t(src) * 4ul).v;
    } else {
        U16Ref(p.k_cache + uint64_t(dst) * 2ul).v = U16Ref(p.k_new + uint64_t(src) * 2ul).v;
        U16Ref(p.v_cache + uint64_t(dst) * 2ul).v = U16Ref(p.v_new + uint64_t(src) * 2ul).v;
    }
}
