/* Dense jobs whose head dims the tensor-core kernels lack, run on the next ones with rows padded. */
#ifndef GLLM_CUDA_PAD_H
#define GLLM_CUDA_PAD_H

#include <stddef.h>
#include <stdint.h>

#include "backend_api.h"
#include "cuda_device.h"

/* The head dim a's rows are zero-padded to on x (64, 128 or, for a plain job where the Hopper
 * D 256 kernel is loaded, 256: pad_rows.cu says why that computes the same attention), or 0
 * when a runs as it is: f16 and bf16, D up to 256 and not 64, 128 or 256, or Dv below D; each
 * tensor's d-stride 1. (Where it is 128 and the D 128 TMA kernels take the job, cuda_backend.c
 * pads with their tensor maps instead, and nothing here runs.) */
int64_t cuda_pad_dim(const struct cuda_dev *x, const struct attn_args *a);

/* The scratch bytes of the padded q, k, v and out at head dim dp (each 256-byte aligned). */
size_t cuda_pad_bytes(const struct attn_args *a, int64_t dp);

/* job (the parameters of a's tensors, in device memory) as the kernels see it padded: q, k, v
 * and out [B, H, S, dp] contiguous in scratch at base, head dim dp. */
gllm_cuda_attn_params cuda_pad_view(const struct attn_args *a, const gllm_cuda_attn_params *job,
                                    int64_t dp, CUdeviceptr base);

/* q, k and v of job into padded's, zeros in the padding, on ln's stream. */
CUresult cuda_pad_in(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                     const struct attn_args *a, const gllm_cuda_attn_params *job,
                     const gllm_cuda_attn_params *padded);

/* padded's output, its first Dv columns, into job's out. */
CUresult cuda_pad_out(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                      const struct attn_args *a, const gllm_cuda_attn_params *padded,
                      const gllm_cuda_attn_params *job);

#endif
