/* TMA tensor maps for the Hopper prefill kernels' producers (gllm_cuda_hp_params, gllm_cuda_pp_params). */
#ifndef GLLMD_CUDA_TMA_H
#define GLLMD_CUDA_TMA_H

#include <stdbool.h>
#include <stdint.h>

#include "attention_params.h"
#include "cuda_driver.h"

/* Encodes into map the tensor map of a [B, H, S, D] tensor (dims in that order) of 16-bit
 * elements at base, strides in elements: 4-D (D, S, H, B) with byte strides, boxes of
 * GLLM_CUDA_HP_BOX_COLS columns by box_rows rows, the 128-byte swizzle, L2 promotion by 256
 * bytes, rows and columns outside the tensor read as zeros (a box may run past D: the paged
 * prefill pads D 80 and 96 so) and are not written by stores. Returns 0; -EOPNOTSUPP where TMA
 * cannot take the tensor (no cuTensorMapEncodeTiled in the driver, base not 16-byte aligned,
 * rows of D elements not a multiple of 16 bytes, D-stride not 1, a stride not a positive multiple of 16
 * bytes below 2^40 on a dimension longer than 1, a dimension past 2^32); -EINVAL where the
 * driver refused the map. */
int cuda_tma_map(const struct cuda_driver *d, gllm_cuda_tmap *map, bool bf16, const void *base,
                 const int64_t dims[4], const int64_t st[4], unsigned box_rows);

/* The maps of a device's last call, by what they were encoded from: a prefill repeated on
 * the same buffers (staged jobs reuse the same scratch) skips the driver. Plain words, not
 * a gllm_cuda_tmap, so that it may live in calloc'd memory. */
struct cuda_tma_cached {
    bool valid, bf16;
    unsigned box_rows;
    const void *base;
    int64_t dims[4], st[4];
    uint64_t map[16];
};
struct cuda_tma_cache {
    struct cuda_tma_cached t[4];         /* Q, K, V, O */
    uint64_t hits, encodes;
};

/* hp's q_map, k_map, v_map and (where GLLM_CUDA_HP_O_TILE(D)) o_map for the tensors of hp->a
 * (Q boxes GLLM_CUDA_HP_ROWS(D) rows, K and V GLLM_CUDA_HP_KEYS, O GLLM_CUDA_HP_O_ROWS), from
 * cache where it holds the same tensor (cache may be NULL); 0, or the first failure as
 * cuda_tma_map's. */
int cuda_tma_hp_params(const struct cuda_driver *d, gllm_cuda_hp_params *hp, bool bf16,
                       struct cuda_tma_cache *cache);
/* The same for the kernel of head dim kernel_D (a multiple of GLLM_CUDA_HP_BOX_COLS) and
 * tensors of hp->a.D up to it: boxes past D read zeros and O's map clips them, which pads D 80
 * to 127 onto the D 128 kernels with no copies. cuda_tma_hp_params is kernel_D = hp->a.D. */
int cuda_tma_hp_params_as(const struct cuda_driver *d, gllm_cuda_hp_params *hp, bool bf16,
                          struct cuda_tma_cache *cache, int64_t kernel_D);

/* pp's q_map, k_map, v_map and (where GLLM_CUDA_PP_O_TILE(kernel_D)) o_map (attention_params.h,
 * gllm_cuda_pp_params) for q and out [nq, Hq, D] at q and out and the pools [num_pages,
 * page_size, Hkv, D] at k and v, for the kernel of head dim kernel_D (D or above it: the boxes
 * past D read zeros): Q boxes GLLM_CUDA_HP_ROWS(kernel_D) tokens, O GLLM_CUDA_HP_O_ROWS, K and
 * V boxes one page (page_size rows); cached as cuda_tma_hp_params's. */
int cuda_tma_pp_params(const struct cuda_driver *d, gllm_cuda_pp_params *pp, bool bf16,
                       const void *q, const void *out, int64_t nq, int64_t Hq, const void *k,
                       const void *v, int64_t num_pages, int64_t page_size, int64_t Hkv,
                       int64_t D, int64_t kernel_D, struct cuda_tma_cache *cache);

#endif
