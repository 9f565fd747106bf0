/* Attention variant validation: values and fields against the backend's mode, per-head tensors resolved. */
#include <stdio.h>

#include "job.h"

int job_variant_prepare(struct job_variant *jv, const struct proto_variant *pv, gllm_mode mode,
                        const struct job_caps *caps, const struct arena_table *arenas,
                        int64_t Hq, int64_t D, int64_t Dv, char *err, size_t errlen)
{
    int rc = proto_variant_check(pv, mode, &caps->modes[mode], caps->backend, Hq, D, Dv, err,
                                 errlen);
    if (rc < 0)
        return rc;
    *jv = (struct job_variant){0};
    if (proto_variant_fields(pv, D, Dv) & GLLM_VARIANT_WINDOW) {
        jv->v.window = true;
        jv->v.window_left = (int32_t)pv->window_left;
        jv->v.window_right = (int32_t)pv->window_right;
    }
    jv->v.chunk = (uint32_t)pv->attention_chunk;
    jv->v.soft_cap = (float)pv->logits_soft_cap;
    const struct {
        const char *name;
        bool given;
        const struct proto_tensor *t;
        const float **dst;
    } heads[2] = {
        {"alibi_slopes", pv->has_alibi, &pv->alibi_slopes, &jv->v.alibi_slopes},
        {"sinks", pv->has_sinks, &pv->sinks, &jv->v.sinks},
    };
    for (int i = 0; i < 2; i++) {
        if (!heads[i].given)
            continue;
        struct resolved *r = &jv->r[jv->n];
        *r = (struct resolved){heads[i].name, heads[i].t, NULL, 0, 0};
        if ((rc = job_resolve(r, arenas, caps->max_elements, err, errlen)) < 0)
            return rc;
        if (Hq > 1 && heads[i].t->strides[0] != 1) {
            snprintf(err, errlen, "%s: must be contiguous (stride 1)", heads[i].name);
            return GLLM_EPARAM;
        }
        *heads[i].dst = (const float *)(const void *)((const char *)r->arena->base +
                                                      heads[i].t->offset);
        if (r->arena->device)
            jv->device |= 1u << i;
        jv->n++;
    }
    return 0;
}
