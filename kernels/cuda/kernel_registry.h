/* Every CUDA kernel of gllmd's image, one row each: the .cu files instantiate their entry
 * points from it and the daemon's loader (cuda_device.c) finds them by it. Plain C. */
#ifndef GLLM_CUDA_KERNEL_REGISTRY_H
#define GLLM_CUDA_KERNEL_REGISTRY_H

#include "attention_params.h"      /* the modes' shared memory by head dim */

/* A kernel's mode: how it is launched and what its parameter is (attention_params.h).
 *   TC             dense prefill on mma.sync tensor cores (attention_fwd.cu)
 *   GENERIC        dense, any layout and head dim up to GLLM_CUDA_GENERIC_MAX_D (the same)
 *   TC_VAR         the TC kernels with a variant, causality read from the parameters
 *   GENERIC_VAR    the GENERIC kernel with a variant and v's head dim
 *   HOPPER         dense prefill on wgmma, cp.async producer (attention_fwd_hopper.cu)
 *   HOPPER_TMA     the same with a TMA producer and tensor maps in its parameter
 *   HOPPER_VAR     the HOPPER_TMA kernels with a variant
 *   PAGED          paged decode and prefill, the plan uploaded (paged_attention.cu)
 *   PAGED_BATCH    the same, a batch's plan in the parameters
 *   PAGED_SINGLE   the same, one split sequence's plan in them
 *   PAGED_VAR      the PAGED kernel with a variant (window, chunk, soft-cap, ALiBi, sinks)
 *   PAGED_SINGLE_VAR  the PAGED_SINGLE kernel with one
 *   PAGED_PREFILL  chunked prefill over the paged cache on wgmma (paged_prefill_hopper.cu)
 *   PAGED_PREFILL_VAR  the PAGED_PREFILL kernels with a variant
 *   APPEND         new K and V rows into the paged cache (paged_attention.cu)
 *   PAD            rows copied with zeros to a wider pitch, or back (pad_rows.cu)
 *   HOPPER_WIDE    dense prefill on wgmma at D 256, and Dqk 192 with Dv 128 (GLLM_CUDA_HPW_DV),
 *                  80-key tiles (attention_fwd_hopper_wide.cu)
 *   HOPPER_WIDE_VAR  the HOPPER_WIDE kernels with a variant
 * X(mode, smem, image): the dynamic shared memory its kernels are allowed, by head dim, and
 * which loaded image holds their code: ALL, SM90A (wgmma: elsewhere the entry point traps and
 * is never loaded) or SM90A_TMA (and a driver that encodes tensor maps, cuda_tma.h). */
#define GLLM_CUDA_NO_SMEM(D) 0
#define GLLM_CUDA_MODES(X)                                                                   \
    X(TC, GLLM_CUDA_TC_SMEM, ALL)                                                            \
    X(GENERIC, GLLM_CUDA_NO_SMEM, ALL)                                                       \
    X(TC_VAR, GLLM_CUDA_TC_SMEM, ALL)                                                        \
    X(GENERIC_VAR, GLLM_CUDA_NO_SMEM, ALL)                                                   \
    X(HOPPER, GLLM_CUDA_HP_SMEM, SM90A)                                                      \
    X(HOPPER_TMA, GLLM_CUDA_HP_SMEM, SM90A_TMA)                                              \
    X(HOPPER_VAR, GLLM_CUDA_HP_SMEM, SM90A_TMA)                                              \
    X(PAGED, GLLM_CUDA_PAGED_SMEM, ALL)                                                      \
    X(PAGED_BATCH, GLLM_CUDA_PAGED_SMEM, ALL)                                                \
    X(PAGED_SINGLE, GLLM_CUDA_PAGED_SMEM, ALL)                                               \
    X(PAGED_VAR, GLLM_CUDA_PAGED_SMEM, ALL)                                                  \
    X(PAGED_SINGLE_VAR, GLLM_CUDA_PAGED_SMEM, ALL)                                           \
    X(PAGED_PREFILL, GLLM_CUDA_PP_SMEM, SM90A_TMA)                                           \
    X(PAGED_PREFILL_VAR, GLLM_CUDA_PP_SMEM, SM90A_TMA)                                       \
    X(APPEND, GLLM_CUDA_NO_SMEM, ALL)                                                        \
    X(PAD, GLLM_CUDA_NO_SMEM, ALL)                                                           \
    X(HOPPER_WIDE, GLLM_CUDA_HPW_SMEM, SM90A)                                                \
    X(HOPPER_WIDE_VAR, GLLM_CUDA_HPW_SMEM, SM90A)

enum gllm_cuda_mode {
#define GLLM_CUDA_MODE_ENUM(mode, smem, image) GLLM_CUDA_MODE_##mode,
    GLLM_CUDA_MODES(GLLM_CUDA_MODE_ENUM)
#undef GLLM_CUDA_MODE_ENUM
    GLLM_CUDA_MODE_COUNT
};
enum gllm_cuda_image { GLLM_CUDA_IMAGE_ALL, GLLM_CUDA_IMAGE_SM90A, GLLM_CUDA_IMAGE_SM90A_TMA };

/* Compile-time variant flags, the table's flags column (0: none). A new variant (a window, a
 * soft-cap) is a bit here, read by the entry macro of its mode, and rows that set it. */
#define GLLM_CUDA_KF_CAUSAL 1u
#define GLLM_CUDA_KF_HAS(flags, f) (((flags) & GLLM_CUDA_KF_##f) != 0)

/* The kernels: X(mode, dtype, D, flags, symbol) with dtype F32, F16, BF16 or ANY and D 0 for
 * any head dim. In sections by the source file that instantiates them (each .cu expands its
 * own, so that it compiles alone), in definition order, which is the image's. The generic
 * kernel reads causality from its parameters and the paged ones mask by each query token's
 * position, so they carry no flag for it. */
#define GLLM_CUDA_DENSE_KERNELS(X)                                                           \
    X(TC, F16, 64, 0, gllm_attn_fwd_f16_d64)                                                 \
    X(TC, F16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_f16_d64_causal)                        \
    X(TC, F16, 128, 0, gllm_attn_fwd_f16_d128)                                               \
    X(TC, F16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_f16_d128_causal)                      \
    X(TC, BF16, 64, 0, gllm_attn_fwd_bf16_d64)                                               \
    X(TC, BF16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_bf16_d64_causal)                      \
    X(TC, BF16, 128, 0, gllm_attn_fwd_bf16_d128)                                             \
    X(TC, BF16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_bf16_d128_causal)                    \
    X(GENERIC, F32, 0, 0, gllm_attn_generic_f32)                                             \
    X(GENERIC, F16, 0, 0, gllm_attn_generic_f16)                                             \
    X(GENERIC, BF16, 0, 0, gllm_attn_generic_bf16)                                           \
    X(TC_VAR, F16, 64, 0, gllm_attn_tc_var_f16_d64)                                          \
    X(TC_VAR, F16, 128, 0, gllm_attn_tc_var_f16_d128)                                        \
    X(TC_VAR, BF16, 64, 0, gllm_attn_tc_var_bf16_d64)                                        \
    X(TC_VAR, BF16, 128, 0, gllm_attn_tc_var_bf16_d128)                                      \
    X(GENERIC_VAR, F32, 0, 0, gllm_attn_generic_var_f32)                                     \
    X(GENERIC_VAR, F16, 0, 0, gllm_attn_generic_var_f16)                                     \
    X(GENERIC_VAR, BF16, 0, 0, gllm_attn_generic_var_bf16)

#define GLLM_CUDA_HOPPER_KERNELS(X)                                                          \
    X(HOPPER, F16, 128, 0, gllm_attn_fwd_hopper_f16_d128)                                    \
    X(HOPPER_TMA, F16, 128, 0, gllm_attn_fwd_hopper_tma_f16_d128)                            \
    X(HOPPER, F16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_f16_d128_causal)           \
    X(HOPPER_TMA, F16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_tma_f16_d128_causal)   \
    X(HOPPER, BF16, 128, 0, gllm_attn_fwd_hopper_bf16_d128)                                  \
    X(HOPPER_TMA, BF16, 128, 0, gllm_attn_fwd_hopper_tma_bf16_d128)                          \
    X(HOPPER, BF16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_bf16_d128_causal)         \
    X(HOPPER_TMA, BF16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_tma_bf16_d128_causal) \
    X(HOPPER, F16, 64, 0, gllm_attn_fwd_hopper_f16_d64)                                      \
    X(HOPPER_TMA, F16, 64, 0, gllm_attn_fwd_hopper_tma_f16_d64)                              \
    X(HOPPER, F16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_f16_d64_causal)             \
    X(HOPPER_TMA, F16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_tma_f16_d64_causal)     \
    X(HOPPER, BF16, 64, 0, gllm_attn_fwd_hopper_bf16_d64)                                    \
    X(HOPPER_TMA, BF16, 64, 0, gllm_attn_fwd_hopper_tma_bf16_d64)                            \
    X(HOPPER, BF16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_bf16_d64_causal)           \
    X(HOPPER_TMA, BF16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_tma_bf16_d64_causal)   \
    X(HOPPER_VAR, F16, 128, 0, gllm_attn_fwd_hopper_var_f16_d128)                            \
    X(HOPPER_VAR, F16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_var_f16_d128_causal)   \
    X(HOPPER_VAR, BF16, 128, 0, gllm_attn_fwd_hopper_var_bf16_d128)                          \
    X(HOPPER_VAR, BF16, 128, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_var_bf16_d128_causal) \
    X(HOPPER_VAR, F16, 64, 0, gllm_attn_fwd_hopper_var_f16_d64)                              \
    X(HOPPER_VAR, F16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_var_f16_d64_causal)     \
    X(HOPPER_VAR, BF16, 64, 0, gllm_attn_fwd_hopper_var_bf16_d64)                            \
    X(HOPPER_VAR, BF16, 64, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_var_bf16_d64_causal)

#define GLLM_CUDA_PAGED_KERNELS(X)                                                           \
    X(PAGED, F16, 64, 0, gllm_paged_attn_f16_d64)                                            \
    X(PAGED_BATCH, F16, 64, 0, gllm_paged_attn_batch_f16_d64)                                \
    X(PAGED_SINGLE, F16, 64, 0, gllm_paged_attn_single_f16_d64)                              \
    X(PAGED, F16, 128, 0, gllm_paged_attn_f16_d128)                                          \
    X(PAGED_BATCH, F16, 128, 0, gllm_paged_attn_batch_f16_d128)                              \
    X(PAGED_SINGLE, F16, 128, 0, gllm_paged_attn_single_f16_d128)                            \
    X(PAGED, BF16, 64, 0, gllm_paged_attn_bf16_d64)                                          \
    X(PAGED_BATCH, BF16, 64, 0, gllm_paged_attn_batch_bf16_d64)                              \
    X(PAGED_SINGLE, BF16, 64, 0, gllm_paged_attn_single_bf16_d64)                            \
    X(PAGED, BF16, 128, 0, gllm_paged_attn_bf16_d128)                                        \
    X(PAGED_BATCH, BF16, 128, 0, gllm_paged_attn_batch_bf16_d128)                            \
    X(PAGED_SINGLE, BF16, 128, 0, gllm_paged_attn_single_bf16_d128)                          \
    X(APPEND, ANY, 0, 0, gllm_kv_append_rows)                                                \
    X(PAGED_VAR, F16, 64, 0, gllm_paged_attn_var_f16_d64)                                    \
    X(PAGED_VAR, F16, 128, 0, gllm_paged_attn_var_f16_d128)                                  \
    X(PAGED_VAR, BF16, 64, 0, gllm_paged_attn_var_bf16_d64)                                  \
    X(PAGED_VAR, BF16, 128, 0, gllm_paged_attn_var_bf16_d128)                                \
    X(PAGED_SINGLE_VAR, F16, 64, 0, gllm_paged_attn_single_var_f16_d64)                      \
    X(PAGED_SINGLE_VAR, F16, 128, 0, gllm_paged_attn_single_var_f16_d128)                    \
    X(PAGED_SINGLE_VAR, BF16, 64, 0, gllm_paged_attn_single_var_bf16_d64)                    \
    X(PAGED_SINGLE_VAR, BF16, 128, 0, gllm_paged_attn_single_var_bf16_d128)                   \
    GLLM_CUDA_PAGED_DIM(X, 80)                                                               \
    GLLM_CUDA_PAGED_DIM(X, 96)                                                               \
    GLLM_CUDA_PAGED_DIM(X, 192)                                                              \
    GLLM_CUDA_PAGED_DIM(X, 256)
/* The other head dims' paged kernels, every form and both dtypes of one head dim a row. */
#define GLLM_CUDA_PAGED_DIM(X, D)                                                            \
    GLLM_CUDA_PAGED_DIM_T(X, F16, f16, D)                                                    \
    GLLM_CUDA_PAGED_DIM_T(X, BF16, bf16, D)
#define GLLM_CUDA_PAGED_DIM_T(X, T, t, D)                                                    \
    X(PAGED, T, D, 0, gllm_paged_attn_##t##_d##D)                                            \
    X(PAGED_BATCH, T, D, 0, gllm_paged_attn_batch_##t##_d##D)                                \
    X(PAGED_SINGLE, T, D, 0, gllm_paged_attn_single_##t##_d##D)                              \
    X(PAGED_VAR, T, D, 0, gllm_paged_attn_var_##t##_d##D)                                    \
    X(PAGED_SINGLE_VAR, T, D, 0, gllm_paged_attn_single_var_##t##_d##D)
/* Head dims with paged kernels: the daemon's capabilities and checks read this list. */
#define GLLM_CUDA_PAGED_HEAD_DIMS {64, 80, 96, 128, 192, 256}

#define GLLM_CUDA_PAGED_PREFILL_KERNELS(X)                                                   \
    X(PAGED_PREFILL, F16, 128, 0, gllm_paged_prefill_hopper_f16_d128)                        \
    X(PAGED_PREFILL, BF16, 128, 0, gllm_paged_prefill_hopper_bf16_d128)                      \
    X(PAGED_PREFILL, F16, 64, 0, gllm_paged_prefill_hopper_f16_d64)                          \
    X(PAGED_PREFILL, BF16, 64, 0, gllm_paged_prefill_hopper_bf16_d64)                        \
    X(PAGED_PREFILL_VAR, F16, 128, 0, gllm_paged_prefill_hopper_var_f16_d128)                \
    X(PAGED_PREFILL_VAR, BF16, 128, 0, gllm_paged_prefill_hopper_var_bf16_d128)              \
    X(PAGED_PREFILL_VAR, F16, 64, 0, gllm_paged_prefill_hopper_var_f16_d64)                  \
    X(PAGED_PREFILL_VAR, BF16, 64, 0, gllm_paged_prefill_hopper_var_bf16_d64)

#define GLLM_CUDA_PAD_KERNELS(X) X(PAD, ANY, 0, 0, gllm_pad_rows)

#define GLLM_CUDA_HOPPER_WIDE_KERNELS(X)                                                     \
    X(HOPPER_WIDE, F16, 256, 0, gllm_attn_fwd_hopper_wide_f16_d256)                          \
    X(HOPPER_WIDE, F16, 256, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_wide_f16_d256_causal) \
    X(HOPPER_WIDE, BF16, 256, 0, gllm_attn_fwd_hopper_wide_bf16_d256)                        \
    X(HOPPER_WIDE, BF16, 256, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_wide_bf16_d256_causal) \
    X(HOPPER_WIDE, F16, 192, 0, gllm_attn_fwd_hopper_wide_f16_d192v128)                      \
    X(HOPPER_WIDE, F16, 192, GLLM_CUDA_KF_CAUSAL, gllm_attn_fwd_hopper_wide_f16_d192v128_causal) \
    X(HOPPER_WIDE, BF16, 192, 0, gllm_attn_fwd_hopper_wide_bf16_d192v128)                    \
    X(HOPPER_WIDE, BF16, 192, GLLM_CUDA_KF_CAUSAL,                                           \
      gllm_attn_fwd_hopper_wide_bf16_d192v128_causal)

#define GLLM_CUDA_HOPPER_WIDE_VAR_KERNELS(X)                                                 \
    X(HOPPER_WIDE_VAR, F16, 256, 0, gllm_attn_fwd_hopper_wide_var_f16_d256)                  \
    X(HOPPER_WIDE_VAR, F16, 256, GLLM_CUDA_KF_CAUSAL,                                        \
      gllm_attn_fwd_hopper_wide_var_f16_d256_causal)                                         \
    X(HOPPER_WIDE_VAR, BF16, 256, 0, gllm_attn_fwd_hopper_wide_var_bf16_d256)                \
    X(HOPPER_WIDE_VAR, BF16, 256, GLLM_CUDA_KF_CAUSAL,                                       \
      gllm_attn_fwd_hopper_wide_var_bf16_d256_causal)                                        \
    X(HOPPER_WIDE_VAR, F16, 192, 0, gllm_attn_fwd_hopper_wide_var_f16_d192v128)              \
    X(HOPPER_WIDE_VAR, F16, 192, GLLM_CUDA_KF_CAUSAL,                                        \
      gllm_attn_fwd_hopper_wide_var_f16_d192v128_causal)                                     \
    X(HOPPER_WIDE_VAR, BF16, 192, 0, gllm_attn_fwd_hopper_wide_var_bf16_d192v128)            \
    X(HOPPER_WIDE_VAR, BF16, 192, GLLM_CUDA_KF_CAUSAL,                                       \
      gllm_attn_fwd_hopper_wide_var_bf16_d192v128_causal)

#define GLLM_CUDA_KERNELS(X)                                                                 \
    GLLM_CUDA_DENSE_KERNELS(X)                                                               \
    GLLM_CUDA_HOPPER_KERNELS(X)                                                              \
    GLLM_CUDA_PAGED_KERNELS(X)                                                               \
    GLLM_CUDA_PAGED_PREFILL_KERNELS(X)                                                       \
    GLLM_CUDA_PAD_KERNELS(X)                                                                 \
    GLLM_CUDA_HOPPER_WIDE_KERNELS(X)                                                         \
    GLLM_CUDA_HOPPER_WIDE_VAR_KERNELS(X)

#define GLLM_CUDA_KERNEL_ONE(mode, dtype, D, flags, symbol) +1
enum { GLLM_CUDA_KERNEL_COUNT = 0 GLLM_CUDA_KERNELS(GLLM_CUDA_KERNEL_ONE) };
#undef GLLM_CUDA_KERNEL_ONE

#ifdef __CUDACC__
/* A row's element type, and its entry point: GLLM_CUDA_ENTRY_<mode>(T, D, flags, symbol),
 * which the .cu file of its section defines. */
#define GLLM_CUDA_T_F32 float
#define GLLM_CUDA_T_F16 __half
#define GLLM_CUDA_T_BF16 __nv_bfloat16
#define GLLM_CUDA_T_ANY void
#define GLLM_CUDA_ENTRY(mode, dtype, D, flags, symbol)                                       \
    GLLM_CUDA_ENTRY_##mode(GLLM_CUDA_T_##dtype, D, flags, symbol)
#endif

#endif
