/* Parameters of the portable kernels (kernels/portable/): one struct per kernel, passed by
 * value, read by the device code (HIP-language clang, nvcc) and filled by host C code. */
#ifndef GLLM_PK_PARAMS_H
#define GLLM_PK_PARAMS_H

#include <stdint.h>

/* Threads of a workgroup: four waves (256 on CDNA, 128 on RDNA and NVIDIA); a wave takes one
 * query row at a time, so a workgroup covers PK_ROWS rows. The host reads the wave size of a
 * kernel from its descriptor (AMD) or knows it is 32 (NVIDIA). */
#define PK_WAVES 4
#define PK_ROWS PK_WAVES
#define PK_MAX_D 256
/* Keys staged in shared memory per step: K and V as f32, 2 * 16 * 256 * 4 = 32 KiB. */
#define PK_KEYS 16
/* Threads of an append workgroup, whatever the wave size. */
#define PK_APPEND_THREADS 256

/* The attention variant (backend_api.h's struct attn_variant) as the kernels read it, in
 * both parameter structs: 32 bytes, no padding. A field at its "none" value costs nothing
 * but a few uniform instructions, so one kernel serves plain and variant jobs. */
struct pk_variant {
    uint64_t alibi, sinks;            /* f32 [Hq] device addresses; 0: none */
    int32_t window_left, window_right;   /* -1: no edge on that side */
    int32_t chunk;                    /* 0: none */
    float soft_cap;                   /* 0: none */
};

/* Device addresses travel as uint64_t so C and C++ see one layout; every field sits at a
 * multiple of its size, so no compiler pads either struct. */
struct pk_attn_params {
    uint64_t q, k, v, out, lse;       /* lse 0: not wanted */
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];   /* elements, [b, h, s, d] */
    int32_t B, Hq, Hkv, Sq, Skv, D;
    float scale_log2;                 /* softmax scale times log2(e): scores in base 2 */
    int32_t causal;                   /* bottom-right: row i sees keys j <= i + Skv - Sq */
    int32_t Dv;                       /* v's and out's head dim, 1..D */
    struct pk_variant var;            /* row i is at position i + Skv - Sq */
};

/* Paged KV: caches [num_pages, page_size, Hkv, D], q/out [nq, Hq, D], k_new/v_new
 * [nnew, Hkv, D], row-major. Tables are int32 arrays in device memory. */
struct pk_paged_params {
    uint64_t k_cache, v_cache, q, out, k_new, v_new;
    uint64_t kv_indptr, kv_indices, kv_len, q_indptr;   /* [B+1], [..], [B], [B+1] */
    uint64_t bad;                     /* int32: set to 1 when a page number is out of range */
    int64_t num_pages;
    int32_t B, Hq, Hkv, D, page_size, nnew;
    float scale_log2;
    int32_t elem_bytes;               /* append: 2 or 4 */
    struct pk_variant var;            /* attention: a query is at its token's position */
};

#endif
