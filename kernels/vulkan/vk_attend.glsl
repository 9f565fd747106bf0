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

// limit: the keys this subgroup's row sees (0 for a row past the end); nkeys: the most any
// row of the workgroup sees. Every invocation reaches every barrier. out_base 0: no output (o 0).
void attend(uint64_t K, int64_t kd, uint64_t V, int64_t vd, int D, int nkeys, int limit,
            float scale_log2, uint64_t q, int64_t qd, uint64_t o, int64_t od, uint64_t lse)
{
    const int tid = int(gl_LocalInvocationID.x), lane = int(gl_SubgroupInvocationID);
    const int block = ROWS * WAVE;
    float qv[PER_LANE], acc[PER_LANE];
    for (int e = 0; e < PER_LANE; e++) {
        const int d = lane + e * WAVE;
        qv[e] = limit > 0 && d < D ? ld(q, int64_t(d) * qd) * scale_log2 : 0.0;
        acc[e] = 0.0;
    }
    float m = uintBitsToFloat(0xff800000u), l = 0.0;
    for (int k0 = 0; k0 < nkeys; k0 += KEYS) {
        barrier();                                 // the previous step's tiles are read
        for (int idx = tid; idx < KEYS * D; idx += block) {
            const int t = idx / D, d = idx % D, j = k0 + t;
            int64_t ko, vo;
            float kx = 0.0, vx = 0.0;
            if (j < nkeys && key_row(j, ko, vo)) {
                kx = ld(K, ko + int64_t(d) * kd);
                vx = ld(V, vo + int64_t(d) * vd);
            }
            ks[t * MAX_D + d] = kx;
            vs[t * MAX_D + d] = vx;
        }
        barrier();
        const int n = min(limit - k0, KEYS);
        for (int t = 0; t < n; t++) {
            float s = 0.0;
            for (int e = 0; e < PER_LANE; e++) {
                const int d = lane + e * WAVE;
                if (d < D)
                    s += qv[e] * ks[t * MAX_D + d];
            }
            s = subgroupAdd(s);
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
    // A row that sees no key is zeros with lse -inf, as on the CPU backend.
    const float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (int e = 0; e < PER_LANE; e++) {
        const int d = lane + e * WAVE;
        if (d < D)
            st(o, int64_t(d) * od, acc[e] * inv);
    }
    if (lse != 0ul && lane == 0)
        F32Ref(lse).v = l > 0.0 ? (m + log2(l)) * 0.69314718055994531 : uintBitsToFloat(0xff800000u);
}

// Keys row i of Sq sees among Skv (bottom-right causal mask), clamped to [0, Skv].
int visible(int i, int Sq, int Skv, bool causal)
{
    if (i >= Sq)
        return 0;
    if (!causal)
        return Skv;
    const int64_t last = int64_t(i) + Skv - Sq + 1;
    return last < 0 ? 0 : last > Skv ? Skv : int(last);
}
