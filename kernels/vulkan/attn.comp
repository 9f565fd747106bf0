#version 460
// Dense attention over [b, h, s, d] views with element strides. Grid: x = ceil(Sq / ROWS),
// y = B * Hq; a workgroup is ROWS query rows of one (batch, head), one per subgroup.
#extension GL_GOOGLE_include_directive : require
#include "vk_common.glsl"
#include "vk_attend.glsl"

int64_t kbase, vbase, kst, vst;

bool key_row(int j, out int64_t ko, out int64_t vo)
{
    ko = kbase + int64_t(j) * kst;
    vo = vbase + int64_t(j) * vst;
    return true;
}

void main()
{
    AttnParams p = AttnParams(pc.params);
    const int bh = int(gl_WorkGroupID.y), b = bh / p.Hq, h = bh % p.Hq;
    const int hk = h / (p.Hq / p.Hkv);
    const int first = int(gl_WorkGroupID.x) * ROWS, i = first + int(gl_SubgroupID);
    const int lastrow = min(first + ROWS - 1, p.Sq - 1);
    const bool causal = p.causal != 0;
    VariantParams vp = VariantParams(pc.params + VARIANT_AT);
    const int64_t shift = int64_t(p.Skv) - p.Sq, pos = i + shift;
    int lo, hi, blo, bhi, unused;
    keys_of(i < p.Sq, pos, p.Skv, causal, vp, lo, hi);
    keys_of(true, first + shift, p.Skv, causal, vp, blo, unused);
    keys_of(true, lastrow + shift, p.Skv, causal, vp, unused, bhi);
    kbase = b * p.k_st[0] + hk * p.k_st[1];
    vbase = b * p.v_st[0] + hk * p.v_st[1];
    kst = p.k_st[2];
    vst = p.v_st[2];
    const bool row = i < p.Sq;
    const int esize = ELEM_BYTES;
    const uint64_t q = p.q + uint64_t(row ? b * p.q_st[0] + h * p.q_st[1] + i * p.q_st[2] : 0) * esize;
    const uint64_t o = row ? p.o + uint64_t(b * p.o_st[0] + h * p.o_st[1] + i * p.o_st[2]) * esize : 0ul;
    const uint64_t lse = row && p.lse != 0ul
        ? p.lse + uint64_t(b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]) * 4ul : 0ul;
    attend(p.k, p.k_st[3], p.v, p.v_st[3], p.D, blo, bhi, lo, hi, pos, h, vp, p.scale_log2, q,
           p.q_st[3], o, p.o_st[3], lse);
}
