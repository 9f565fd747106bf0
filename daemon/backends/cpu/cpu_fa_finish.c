/* The end of a CPU attention row: split-K parts combined, the sink, normalisation, stores. */
#include <math.h>

#include "cpu_fa.h"
#include "gllm/elem.h"

static void store_elem(void *base, gllm_dtype dt, int64_t idx, float x)
{
    switch (dt) {
    case GLLM_DTYPE_F16: ((uint16_t *)base)[idx] = gllm_f32_to_f16(x); break;
    case GLLM_DTYPE_BF16: ((uint16_t *)base)[idx] = gllm_f32_to_bf16(x); break;
    default: ((float *)base)[idx] = x; break;
    }
}

void fa_finish_row(const struct fa_job *j, int64_t b, int64_t h, int64_t i, float m, float l,
                   const float *o, bool nan)
{
    float keep = 1.0f;
    if (j->variant.sinks) {
        /* The sink: one more key in the softmax, of logit sinks[h] and value zero. */
        const float s2 = j->variant.sinks[h] * (float)M_LOG2E;
        const float mf = s2 > m ? s2 : m;
        if (mf != -INFINITY) {
            keep = m == -INFINITY ? 0.0f : exp2f(m - mf);
            l = l * keep + exp2f(s2 - mf);
            m = mf;
        }
    }
    /* A row that sees no key is defined as zeros, lse -inf (the sink's logit with one). */
    const float inv = nan ? NAN : l > 0.0f ? keep / l : 0.0f;
    const int64_t base = fa_o_off(j, b, h, i);
    for (int64_t d = 0; d < j->Dv; d++)
        store_elem(j->out, j->dtype, base + d * j->o_st[3], o[d] * inv);
    if (j->lse) {
        const float lse = nan ? NAN : l > 0.0f ? (m + log2f(l)) * (float)M_LN2 : -INFINITY;
        j->lse[b * j->lse_st[0] + h * j->lse_st[1] + i * j->lse_st[2]] = lse;
    }
}

/* Task = FA_COMBINE_ROWS output rows of the job, in (sequence, head, position) order: each
 * row's split-K parts rescaled to their common max and summed, then finished. */
void fa_combine_task(void *ctx, int64_t task, int thread)
{
    const struct fa_job *j = ctx;
    const int64_t total = j->row0[j->B];
    float o[FA_MAX_D];
    (void)thread;
    for (int64_t row = task * FA_COMBINE_ROWS; row < total && row < (task + 1) * FA_COMBINE_ROWS;
         row++) {
        int64_t b = 0;
        while (j->row0[b + 1] <= row)      /* rows are few per task; sequences ascend */
            b++;
        const int64_t Sq = fa_sq(j, b), r = row - j->row0[b];
        const float *p = j->partial + row * j->nsplit * j->pstride;
        float m = -INFINITY, l = 0.0f;
        bool nan = false;
        for (int s = 0; s < j->nsplit; s++) {
            const float ms = p[s * j->pstride];
            m = ms > m ? ms : m;
            nan |= p[s * j->pstride + 2] != 0.0f;
        }
        for (int64_t d = 0; d < j->Dv; d++)
            o[d] = 0.0f;
        if (m != -INFINITY)
            for (int s = 0; s < j->nsplit; s++) {
                const float *ps = p + s * j->pstride;
                if (ps[0] == -INFINITY)
                    continue;
                const float a = exp2f(ps[0] - m);
                l += ps[1] * a;
                for (int64_t d = 0; d < j->Dv; d++)
                    o[d] += ps[3 + d] * a;
            }
        fa_finish_row(j, b, r / Sq, r % Sq, m, l, o, nan);
    }
}
