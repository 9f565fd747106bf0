/* The parameter block of gllmd's CUDA attention kernels, shared by the .cu and the daemon. */
#ifndef GLLM_CUDA_ATTENTION_PARAMS_H
#define GLLM_CUDA_ATTENTION_PARAMS_H

#include <stdint.h>

/* Passed by value as the kernel's only parameter; plain C so the daemon (built without
 * CUDA headers) lays it out identically. Strides in elements, indices [b, h, s, d]. */
typedef struct gllm_cuda_attn_params {
    const void *q, *k, *v;
    void *out;
    float *lse;                 /* NULL: not wanted */
    int64_t B, Hq, Hkv, Sq, Skv, D;
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];
    float scale;
    int32_t causal;
} gllm_cuda_attn_params;

/* Tensor-core kernels gllm_attn_fwd_{f16,bf16}_d{64,128}[_causal]: grid
 * (ceil(Sq / GLLM_CUDA_TC_ROWS), B * Hq), block GLLM_CUDA_TC_WARPS * 32 threads, dynamic
 * shared memory GLLM_CUDA_TC_SMEM(D) bytes (Q plus two stages of K and V). Need d-stride
 * 1, the other strides and the base addresses 16-byte aligned. */
#define GLLM_CUDA_TC_WARPS(D) 4
#define GLLM_CUDA_TC_MTILES 2      /* 16-row tiles per warp */
#define GLLM_CUDA_TC_ROWS(D) (GLLM_CUDA_TC_WARPS(D) * GLLM_CUDA_TC_MTILES * 16)
#define GLLM_CUDA_TC_KEYS(D) 64
#define GLLM_CUDA_TC_SMEM(D) ((GLLM_CUDA_TC_ROWS(D) + 4 * GLLM_CUDA_TC_KEYS(D)) * (D) * 2)

/* Generic kernels gllm_attn_generic_{f32,f16,bf16}: any strides, D <= 256; grid
 * (ceil(Sq / GLLM_CUDA_GENERIC_ROWS), B * Hq), block GLLM_CUDA_GENERIC_ROWS * 32. */
#define GLLM_CUDA_GENERIC_ROWS 4
#define GLLM_CUDA_GENERIC_MAX_D 256

#endif
