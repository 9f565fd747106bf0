/* Dense jobs at head dims the tensor-core kernels lack: rows padded in scratch, the output copied back. */
#include "cuda_pad.h"

#include <string.h>

int64_t cuda_pad_dim(const struct cuda_dev *x, const struct attn_args *a)
{
    if (!cuda_kernel_find(x, GLLM_CUDA_MODE_PAD, a->dtype, 0, 0))
        return 0;
    const int64_t dv = attn_dv(a);
    if (a->dtype == GLLM_DTYPE_F32 || ((a->D == 64 || a->D == 128 || a->D == 256) && dv == a->D))
        return 0;
    if (a->q_st[3] != 1 || a->k_st[3] != 1 || a->v_st[3] != 1 || a->o_st[3] != 1)
        return 0;
    if (a->D <= 128)
        return a->D <= 64 ? 64 : 128;
    /* Above 128: onto the Hopper D 256 kernel (or its variant form) where there is one, but
     * Dqk 192 with Dv 128, which has a kernel of its own there. */
    const unsigned flags = a->causal ? GLLM_CUDA_KF_CAUSAL : 0;
    const enum gllm_cuda_mode wide = attn_variant_none(&a->variant)
                                         ? GLLM_CUDA_MODE_HOPPER_WIDE
                                         : GLLM_CUDA_MODE_HOPPER_WIDE_VAR;
    if (a->D == 192 && dv == GLLM_CUDA_HPW_DV(192) && cuda_kernel_find(x, wide, a->dtype, 192, flags))
        return 0;
    return cuda_kernel_find(x, wide, a->dtype, 256, flags) ? 256 : 0;
}

static size_t padded_bytes(int64_t B, int64_t H, int64_t S, int64_t dp)
{
    return align256((size_t)(B * H * S * dp) * 2);
}

size_t cuda_pad_bytes(const struct attn_args *a, int64_t dp)
{
    return 2 * padded_bytes(a->B, a->Hq, a->Sq, dp) + 2 * padded_bytes(a->B, a->Hkv, a->Skv, dp);
}

/* Rows [B, H, S] of cols elements from src (strides st) to dst (strides dst_st), zeros in
 * columns cols .. dst_cols. */
static CUresult pad_launch(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                           const void *src, const int64_t *st, void *dst, const int64_t *dst_st,
                           int64_t B, int64_t H, int64_t S, int64_t cols, int64_t dst_cols)
{
    gllm_cuda_pad_params pp = {.src = src, .dst = dst, .B = B, .H = H, .S = S,
                               .cols = (int32_t)cols, .dst_cols = (int32_t)dst_cols};
    memcpy(pp.src_st, st, sizeof pp.src_st);
    memcpy(pp.dst_st, dst_st, sizeof pp.dst_st);
    const int64_t rows = B * H * S;
    CUfunction f = cuda_kernel_find(x, GLLM_CUDA_MODE_PAD, GLLM_DTYPE_F16, 0, 0);  /* cuda_pad_dim's */
    return cuda_launch(d, x, ln, f, (unsigned)((rows + GLLM_CUDA_PAD_ROWS - 1) / GLLM_CUDA_PAD_ROWS),
                       1, GLLM_CUDA_PAD_ROWS * 32, 0, &pp);
}

/* The strides of a contiguous [B, H, S, dp] tensor. */
static void packed_strides(int64_t H, int64_t S, int64_t dp, int64_t st[4])
{
    st[3] = 1, st[2] = dp, st[1] = S * dp, st[0] = H * S * dp;
}

gllm_cuda_attn_params cuda_pad_view(const struct attn_args *a, const gllm_cuda_attn_params *job,
                                    int64_t dp, CUdeviceptr base)
{
    gllm_cuda_attn_params p = *job;
    const CUdeviceptr q = base, k = q + padded_bytes(a->B, a->Hq, a->Sq, dp),
                      v = k + padded_bytes(a->B, a->Hkv, a->Skv, dp),
                      o = v + padded_bytes(a->B, a->Hkv, a->Skv, dp);
    p.q = (const void *)(uintptr_t)q, p.k = (const void *)(uintptr_t)k;
    p.v = (const void *)(uintptr_t)v, p.out = (void *)(uintptr_t)o;
    packed_strides(a->Hq, a->Sq, dp, p.q_st);
    packed_strides(a->Hq, a->Sq, dp, p.o_st);
    packed_strides(a->Hkv, a->Skv, dp, p.k_st);
    packed_strides(a->Hkv, a->Skv, dp, p.v_st);
    p.D = dp;
    return p;
}

CUresult cuda_pad_in(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                     const struct attn_args *a, const gllm_cuda_attn_params *job,
                     const gllm_cuda_attn_params *padded)
{
    const int64_t dp = padded->D;
    CUresult r;
    if ((r = pad_launch(d, x, ln, job->q, job->q_st, (void *)(uintptr_t)padded->q, padded->q_st, a->B, a->Hq,
                        a->Sq, a->D, dp)) ||
        (r = pad_launch(d, x, ln, job->k, job->k_st, (void *)(uintptr_t)padded->k, padded->k_st, a->B,
                        a->Hkv, a->Skv, a->D, dp)))
        return r;
    return pad_launch(d, x, ln, job->v, job->v_st, (void *)(uintptr_t)padded->v, padded->v_st, a->B, a->Hkv,
                      a->Skv, attn_dv(a), dp);
}

CUresult cuda_pad_out(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                      const struct attn_args *a, const gllm_cuda_attn_params *padded,
                      const gllm_cuda_attn_params *job)
{
    const int64_t dv = attn_dv(a);
    return pad_launch(d, x, ln, padded->out, padded->o_st, job->out, job->o_st, a->B, a->Hq,
                      a->Sq, dv, dv);
}
