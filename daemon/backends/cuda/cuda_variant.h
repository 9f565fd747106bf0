/* A job's attention variant as the CUDA kernels read it (attention_params.h's gllm_cuda_variant). */
#ifndef GLLM_CUDA_VARIANT_H
#define GLLM_CUDA_VARIANT_H

#include <stdint.h>

#include "attention_params.h"
#include "backend_api.h"

/* v with its slopes and sinks at the device addresses alibi and sinks (0 where v has none). */
static inline gllm_cuda_variant cuda_variant_of(const struct attn_variant *v, uint64_t alibi,
                                                uint64_t sinks)
{
    return (gllm_cuda_variant){
        .window_left = attn_window_left(v),
        .window_right = attn_window_right(v),
        .chunk = (int32_t)v->chunk,
        .soft_cap = v->soft_cap,
        .alibi = v->alibi_slopes ? (const float *)(uintptr_t)alibi : NULL,
        .sinks = v->sinks ? (const float *)(uintptr_t)sinks : NULL,
    };
}

#endif
