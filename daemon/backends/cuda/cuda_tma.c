/* TMA tensor maps for the Hopper prefill kernels, from a job's tensors, cached per device. */
#include <errno.h>
#include <string.h>

#include "cuda_tma.h"

_Static_assert(sizeof(gllm_cuda_tmap) == sizeof(CUtensorMap) &&
                   _Alignof(gllm_cuda_tmap) == _Alignof(CUtensorMap) && sizeof(CUtensorMap) == 128,
               "a kernel's tensor map is the driver's CUtensorMap");

#define TMA_MAX_STRIDE (1ull << 40)
#define TMA_MAX_DIM (1ull << 32)

int cuda_tma_map(const struct cuda_driver *d, gllm_cuda_tmap *map, bool bf16, const void *base,
                 const int64_t dims[4], const int64_t st[4], unsigned box_rows)
{
    if (!d->cuTensorMapEncodeTiled || (uintptr_t)base % 16 != 0 || st[3] != 1 ||
        dims[3] % 8 != 0)
        return -EOPNOTSUPP;
    /* The driver's order is innermost first: D, S, H, B. */
    const int order[4] = {3, 2, 1, 0};
    unsigned long long gdim[4], gstride[3];
    for (int i = 0; i < 4; i++) {
        const int64_t n = dims[order[i]];
        if (n < 1 || (unsigned long long)n > TMA_MAX_DIM)
            return -EOPNOTSUPP;
        gdim[i] = (unsigned long long)n;
        if (i == 0)
            continue;
        const int64_t s = st[order[i]];
        /* A dimension of 1 is never stepped along: any stride the driver takes will do. */
        if (n == 1 && (s <= 0 || (uint64_t)s * 2 % 16 != 0 || (uint64_t)s * 2 >= TMA_MAX_STRIDE)) {
            gstride[i - 1] = 16;
            continue;
        }
        if (s <= 0 || (uint64_t)s * 2 % 16 != 0 || (uint64_t)s * 2 >= TMA_MAX_STRIDE)
            return -EOPNOTSUPP;
        gstride[i - 1] = (unsigned long long)s * 2;
    }
    const unsigned box[4] = {GLLM_CUDA_HP_BOX_COLS, box_rows, 1, 1}, one[4] = {1, 1, 1, 1};
    const int dtype = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    CUresult r = d->cuTensorMapEncodeTiled((CUtensorMap *)map, dtype, 4, (void *)base, gdim,
                                           gstride, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -EINVAL;
}

/* One of hp's maps, from c when it was encoded from the same arguments. */
static int map_cached(const struct cuda_driver *d, gllm_cuda_tmap *map, bool bf16,
                      const void *base, const int64_t dims[4], const int64_t st[4],
                      unsigned box_rows, struct cuda_tma_cached *c, uint64_t *hits,
                      uint64_t *encodes)
{
    if (c && c->valid && c->bf16 == bf16 && c->box_rows == box_rows && c->base == base &&
        memcmp(c->dims, dims, sizeof c->dims) == 0 && memcmp(c->st, st, sizeof c->st) == 0) {
        memcpy(map->opaque, c->map, sizeof c->map);
        ++*hits;
        return 0;
    }
    const int r = cuda_tma_map(d, map, bf16, base, dims, st, box_rows);
    if (c) {
        c->valid = r == 0;
        if (r == 0) {
            c->bf16 = bf16, c->box_rows = box_rows, c->base = base;
            memcpy(c->dims, dims, sizeof c->dims);
            memcpy(c->st, st, sizeof c->st);
            memcpy(c->map, map->opaque, sizeof c->map);
            ++*encodes;
        }
    }
    return r;
}

/* The n maps of a kernel's Q, K and V (and O), each through map_cached (cache may be NULL). */
static int maps_cached(const struct cuda_driver *d, int n, gllm_cuda_tmap *const maps[],
                       bool bf16, const void *const base[], const int64_t *const dims[],
                       const int64_t *const st[], const unsigned rows[],
                       struct cuda_tma_cache *cache)
{
    uint64_t unused = 0;
    for (int i = 0; i < n; i++) {
        const int r = map_cached(d, maps[i], bf16, base[i], dims[i], st[i], rows[i],
                                 cache ? &cache->t[i] : NULL, cache ? &cache->hits : &unused,
                                 cache ? &cache->encodes : &unused);
        if (r)
            return r;
    }
    return 0;
}

int cuda_tma_hp_params_as(const struct cuda_driver *d, gllm_cuda_hp_params *hp, bool bf16,
                          struct cuda_tma_cache *cache, int64_t kernel_D)
{
    const gllm_cuda_attn_params *p = &hp->a;
    if (kernel_D % GLLM_CUDA_HP_BOX_COLS != 0 || p->D > kernel_D)
        return -EOPNOTSUPP;
    const int64_t qd[4] = {p->B, p->Hq, p->Sq, p->D}, kd[4] = {p->B, p->Hkv, p->Skv, p->D};
    gllm_cuda_tmap *maps[4] = {&hp->q_map, &hp->k_map, &hp->v_map, &hp->o_map};
    const void *base[4] = {p->q, p->k, p->v, p->out};
    const int64_t *dims[4] = {qd, kd, kd, qd}, *st[4] = {p->q_st, p->k_st, p->v_st, p->o_st};
    const unsigned rows[4] = {GLLM_CUDA_HP_ROWS(kernel_D), GLLM_CUDA_HP_KEYS, GLLM_CUDA_HP_KEYS,
                              GLLM_CUDA_HP_O_ROWS};
    /* O's map only where the kernel stores O with TMA. */
    return maps_cached(d, GLLM_CUDA_HP_O_TILE(kernel_D) ? 4 : 3, maps, bf16, base, dims, st, rows,
                       cache);
}

int cuda_tma_hp_params(const struct cuda_driver *d, gllm_cuda_hp_params *hp, bool bf16,
                       struct cuda_tma_cache *cache)
{
    return cuda_tma_hp_params_as(d, hp, bf16, cache, hp->a.D);
}

/* Each tensor as cuda_tma_map's [B, H, S, D]: q as [1, Hq, nq, D] (a token's rows Hq * D apart,
 * a head's D), a pool as [num_pages, Hkv, page_size, D]. */
int cuda_tma_pp_params(const struct cuda_driver *d, gllm_cuda_pp_params *pp, bool bf16,
                       const void *q, const void *out, int64_t nq, int64_t Hq, const void *k,
                       const void *v, int64_t num_pages, int64_t page_size, int64_t Hkv,
                       int64_t D, int64_t kernel_D, struct cuda_tma_cache *cache)
{
    const int64_t qd[4] = {1, Hq, nq, D}, qs[4] = {nq * Hq * D, D, Hq * D, 1};
    const int64_t kd[4] = {num_pages, Hkv, page_size, D},
                  ks[4] = {page_size * Hkv * D, D, Hkv * D, 1};
    gllm_cuda_tmap *maps[4] = {&pp->q_map, &pp->k_map, &pp->v_map, &pp->o_map};
    const void *base[4] = {q, k, v, out};
    const int64_t *dims[4] = {qd, kd, kd, qd}, *st[4] = {qs, ks, ks, qs};
    const unsigned rows[4] = {GLLM_CUDA_HP_ROWS(kernel_D), (unsigned)page_size,
                              (unsigned)page_size, GLLM_CUDA_HP_O_ROWS};
    /* O's map only where the kernel stores O with TMA. */
    return maps_cached(d, GLLM_CUDA_PP_O_TILE(kernel_D) ? 4 : 3, maps, bf16, base, dims, st, rows,
                       cache);
}
