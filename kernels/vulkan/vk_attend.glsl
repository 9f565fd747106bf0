// The attention body of the dense and paged kernels: one subgroup takes one query row, its
// lanes split the head dim, keys are staged KEYS at a time in shared memory as f32, and the
// softmax is online in f32 (base 2). The subgroup is the wave: its size is a specialization
// constant the host sets to the device's (and requires, where the driver lets it), so a row's
// dot product is one subgroupAdd. The including kernel defines key_row(j, ko, vo).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#define MAX_D 256
#define ROWS 4                                     // subgroups (rows) per workgroup
layout(constant_id = 0) const int WAVE = 32;       // the subgroup size
layout(constant_id = 1) const int KEYS = 16;       // keys staged per step (shared memory)
layout(local_size_x_id = 2) in;                    // ROWS * WAVE, set by the host
const int PER_LANE = MAX_D / WAVE;

shared float ks[KEYS * MAX_D];
shared float vs[KEYS * MAX_D];

bool key_row(int j, out int64_t ko, out int64_t vo);

// The keys [lo, hi) the query at position pos (bottom-right aligned) sees among Skv: every
// mask (causal, the window, the query's chunk) is an interval, so their meet is one too, and
// both ends grow with pos, so a workgroup's rows see the union [lo of its first, hi of its
// last). A row past the end sees none.
void keys_of(bool row, int64_t pos, int Skv, bool causal, VariantParams vp, out int lo, out int hi)
{
    int64_t l = 0, h = Skv;
    if (causal)
        h = min(h, pos + 1);
    if (vp.window_left >= 0)
        l = max(l, pos - vp.window_left);
    if (vp.window_right >= 0)
        h = min(h, pos + vp.window_right + 1);
    if (vp.chunk > 0) {
        const int64_t c = vp.chunk, q = pos >= 0 ? pos / c : -((-pos + c - 1) / c);
        l = max(l, q * c);
        h = min(h, q * c + c);
    }
    lo = row ? int(clamp(l, int64_t(0), int64_t(Skv))) : 0;
    hi = row ? int(clamp(h, int64_t(lo), int64_t(Skv))) : 0;
}

// tanh without exp overflowing to inf/inf for a large argument (some drivers' tanh does).
float safe_tanh(float x)
{
    const float e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// The workgroup stages keys [blo, bhi); this subgroup's row sees [lo, hi) of them and is
// at position pos, of head h (its ALiBi slope and sink). Scores are in base 2, q scaled by
// scale log2(e); the soft cap applies to the natural-log score, before the ALiBi bias.
// Every invocation reaches every barrier. o 0: no output; lse 0: none wanted.
void attend(uint64_t K, int64_t kd, uint64_t V, int64_t vd, int D, int blo, int bhi, int lo,
            int hi, int64_t pos, int h, VariantParams vp, float scale_log2, uint64_t q,
            int64_t qd, uint64_t o, int64_t od, uint64_t lse)
{
    const float LOG2E = 1.4426950408889634, LN2 = 0.69314718055994531;
    const int tid = int(gl_LocalInvocationID.x), lane = int(gl_SubgroupInvocationID);
    const int block = ROWS * WAVE;
    const float cap = vp.soft_cap;
    const float slope = vp.alibi != 0ul ? F32Ref(vp.alibi + uint64_t(h) * 4ul).v * LOG2E : 0.0;
    float qv[PER_LANE], acc[PER_LANE];
    for (int e = 0; e < PER_LANE; e++) {
        const int d = lane + e * WAVE;
        qv[e] = hi > lo && d < D ? ld(q, int64_t(d) * qd) * scale_log2 : 0.0;
        acc[e] = 0.0;
    }
    const float NEG_INF = uintBitsToFloat(0xff800000u);
    float m = NEG_INF, l = 0.0;
    for (int k0 = blo; k0 < bhi; k0 += KEYS) {
        barrier();                                 // the previous step's tiles are read
        for (int idx = tid; idx < KEYS * D; idx += block) {
            const int t = idx / D, d = idx % D, j = k0 + t;
            int64_t ko, vo;
            float kx = 0.0, vx = 0.0;
            if (j < bhi && key_row(j, ko, vo)) {
                kx = ld(K, ko + int64_t(d) * kd);
                vx = ld(V, vo + int64_t(d) * vd);
            }
            ks[t * MAX_D + d] = kx;
            vs[t * MAX_D + d] = vx;
        }
        barrier();
        const int t0 = max(lo - k0, 0), t1 = min(hi - k0, KEYS);
        for (int t = t0; t < t1; t++) {
            float s = 0.0;
            for (int e = 0; e < PER_LANE; e++) {
                const int d = lane + e * WAVE;
                if (d < D)
                    s += qv[e] * ks[t * MAX_D + d];
            }
            s = subgroupAdd(s);
            if (cap > 0.0)
                s = cap * safe_tanh(s * LN2 / cap) * LOG2E;
            s += slope * float(int64_t(k0 + t) - pos);
            const float mn = max(s, m);
            const float corr = exp2(m - mn), pr = exp2(s - mn);
            l = l * corr + pr;
            for (int e = 0; e < PER_LANE; e++) {
                const int d = lane + e * WAVE;
                acc[e] = acc[e] * corr + (d < D ? pr * vs[t * MAX_D + d] : 0.0);
            }
            m = mn;
        }
    }
    if (o == 0ul)
        return;
    float keep = 1.0;
    if (vp.sinks != 0ul) {
        // The sink: one more key in the softmax, of logit sinks[h] and value zero.
        const float s2 = F32Ref(vp.sinks + uint64_t(h) * 4ul).v * LOG2E;
        const float mf = max(s2, m);
        if (mf != NEG_INF) {
            keep = m == NEG_INF ? 0.0 : exp2(m - mf);
            l = l * keep + exp2(s2 - mf);
            m = mf;
        }
    }
    // A row that sees no key is zeros with lse -inf (the sink's logit with one), as on the
    // CPU backend.
    const float inv = l > 0.0 ? keep / l : 0.0;
    for (int e = 0; e < PER_LANE; e++) {
        const int d = lane + e * WAVE;
        if (d < D)
            st(o, int64_t(d) * od, acc[e] * inv);
    }
    if (lse != 0ul && lane == 0)
        F32Ref(lse).v = l > 0.0 ? (m + log2(l)) * LN2 : NEG_INF;
}
