/* libgllm-client attention variants: hello's capabilities per mode, and a job's variant checked
 * against them and put on the wire. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client_internal.h"
#include "info.h"

void variant_from_hello(const struct proto_hello *w, struct hello_info *h)
{
    /* A daemon from before capabilities computes no variant, in any mode, with its head dims. */
    for (int i = 0; i < GLLM_MODE_COUNT; i++)
        h->modes[i] = (struct proto_mode_caps){.max_head_dim = w->max_head_dim};
    if (w->has_capabilities) {
        h->modes[GLLM_MODE_DENSE] = w->capabilities.dense;
        h->modes[GLLM_MODE_DECODE] = w->capabilities.decode;
        h->modes[GLLM_MODE_PREFILL] = w->capabilities.prefill;
    }
}

int gllm_client_mode_caps(const gllm_client *c, gllm_mode mode, gllm_mode_caps *out)
{
    if (!c || (unsigned)mode >= GLLM_MODE_COUNT || out_check(out) < 0)
        return -EINVAL;
    const struct proto_mode_caps *m = &c->hello.modes[mode];
    gllm_mode_caps v = {.size = sizeof v, .variants = m->variants,
                        .max_head_dim = m->max_head_dim > INT32_MAX ? INT32_MAX : (int)m->max_head_dim};
    for (uint32_t i = 0; i < m->n_head_dims && i < GLLM_MAX_MODE_HEAD_DIMS; i++)
        if (m->head_dims[i] <= INT32_MAX)
            v.head_dims[v.nhead_dims++] = (int)m->head_dims[i];
    out_fill(out, &v, sizeof v);
    return 0;
}

int variant_to_wire(gllm_client *c, uint32_t flags, const gllm_attention_variant *v,
                    struct proto_variant *w)
{
    *w = (struct proto_variant){0};
    if (!v)
        return 0;
    int r;
    if (flags & GLLM_ATTN_WINDOW) {
        w->window = true;
        w->window_left = v->window_left;
        w->window_right = v->window_right;
    }
    w->attention_chunk = v->attention_chunk;
    w->logits_soft_cap = v->logits_soft_cap;
    if (v->alibi_slopes.memory) {
        if ((r = memory_tensor_to_wire(c, &v->alibi_slopes, &w->alibi_slopes)) < 0)
            return r;
        w->has_alibi = true;
    }
    if (v->sinks.memory) {
        if ((r = memory_tensor_to_wire(c, &v->sinks, &w->sinks)) < 0)
            return r;
        w->has_sinks = true;
    }
    return 0;
}

int variant_check(gllm_client *c, gllm_mode mode, const struct proto_variant *w, int64_t Hq,
                  int64_t D, int64_t Dv)
{
    const int r = proto_variant_check(w, mode, &c->hello.modes[mode], c->hello.caps.backend, Hq,
                                      D, Dv, c->last_error, sizeof c->last_error);
    return r;
}

int gllm_client_check_variant(gllm_client *c, gllm_mode mode, uint32_t flags,
                              const gllm_attention_variant *v, int64_t head_dim,
                              int64_t head_dim_v)
{
    if (!c || (unsigned)mode >= GLLM_MODE_COUNT)
        return -EINVAL;
    struct proto_variant w;
    int r = variant_to_wire(c, flags, v, &w);
    if (r < 0)
        return r;
    /* Slopes and sinks are checked against the job's Hq when it is sent; here their length. */
    const int64_t Hq = w.has_alibi ? w.alibi_slopes.shape[0] : w.has_sinks ? w.sinks.shape[0] : 1;
    return variant_check(c, mode, &w, Hq, head_dim, head_dim_v);
}
