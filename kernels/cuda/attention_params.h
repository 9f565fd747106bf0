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
/* Keys per tile: 128 at D = 64 (FA2's shape there: +4%), 64 at D = 128 (registers). */
#define GLLM_CUDA_TC_KEYS(D) ((D) == 64 ? 128 : 64)
#define GLLM_CUDA_TC_SMEM(D) ((GLLM_CUDA_TC_ROWS(D) + 4 * GLLM_CUDA_TC_KEYS(D)) * (D) * 2)

/* Hopper kernels gllm_attn_fwd_hopper_{f16,bf16}_d{64,128}[_causal] (sm_90a image only),
 * persistent: grid (gllm_cuda_hp_grid_even(...), gllm_cuda_hp_grid(...) but at D = 128 not
 * causal, 1), block GLLM_CUDA_HP_THREADS(D), dynamic shared memory GLLM_CUDA_HP_SMEM(D) (Q,
 * GLLM_CUDA_HP_STAGES(D) stages of K and V, the O tile where GLLM_CUDA_HP_O_TILE(D), and 1 KiB
 * to align them). Same layout needs as the tensor-core kernels. 64 query rows per consumer
 * warpgroup: two at D = 128, three at D = 64; one producer warpgroup. Each block works through
 * the units gllm_cuda_hp_schedule defines, one a round, as gllm_cuda_hp_round_unit gives them. */
#define GLLM_CUDA_HP_ROWS(D) ((D) == 64 ? 192 : 128)
#define GLLM_CUDA_HP_KEYS 128
#define GLLM_CUDA_HP_THREADS(D) (2 * GLLM_CUDA_HP_ROWS(D) + 128)  /* 128 per warpgroup */
/* K/V stages of the dense kernels: 4 at D = 64 (0.4-1.4% faster than 5, whose loads issued far
 * ahead cost L2 requests or, evicted before use, DRAM bytes; 5 were 2-4% faster than 3); 2 at
 * D = 128, where a third stage's shared memory holds the O tile instead (with K and V on
 * barriers of their own, two stages ran level with three, and O through shared memory and a TMA
 * store gained 2-10% at S512-1k). D = 64 stores O from registers (its TMA store measured level
 * to -3%). The paged prefill has the same stages and O tile (+2-6% once it was persistent), so
 * its macros are the dense ones; it stores through the tile only
 * for a warpgroup whose 64 rows are all the item's (rows past its tokens belong to the next
 * sequence). Dynamic shared memory (GLLM_CUDA_HP_SMEM_OF): 1024 bytes of
 * slack for the swizzle atoms' alignment, Q, the stages' K and V, and the O tile if any. */
#define GLLM_CUDA_HP_STAGES(D) ((D) == 64 ? 4 : 2)
#define GLLM_CUDA_PP_STAGES(D) GLLM_CUDA_HP_STAGES(D)
#define GLLM_CUDA_HP_O_TILE(D) ((D) == 128)
#define GLLM_CUDA_HP_SMEM_OF(D, STAGES, O_TILE)                                               \
    (1024 + ((1 + (O_TILE)) * GLLM_CUDA_HP_ROWS(D) + 2 * (STAGES) * GLLM_CUDA_HP_KEYS) * (D) * 2)
#define GLLM_CUDA_HP_SMEM(D) \
    GLLM_CUDA_HP_SMEM_OF(D, GLLM_CUDA_HP_STAGES(D), GLLM_CUDA_HP_O_TILE(D))
#define GLLM_CUDA_PP_O_TILE(D) GLLM_CUDA_HP_O_TILE(D)
#define GLLM_CUDA_PP_SMEM(D) GLLM_CUDA_HP_SMEM(D)

/* Hopper kernels gllm_attn_fwd_hopper_wide_{f16,bf16}_d256[_causal] and _d192v128 (sm_90a
 * image only, attention_fwd_hopper_wide.cu): grid (ceil(Sq / GLLM_CUDA_HPW_ROWS), B * Hq),
 * block GLLM_CUDA_HPW_THREADS, dynamic shared memory GLLM_CUDA_HPW_SMEM(D) (1 KiB of
 * alignment slack, Q, GLLM_CUDA_HPW_STAGES stages of K and V tiles of GLLM_CUDA_HPW_KEYS
 * keys). The tensor-core kernels' layout needs. V's head dim is GLLM_CUDA_HPW_DV(D): D at
 * 256, 128 at D 192 (DeepSeek's prefill: Dqk 192 = 128 + 64 rotary, Dv 128). */
#define GLLM_CUDA_HPW_ROWS 128
#define GLLM_CUDA_HPW_KEYS 80
#define GLLM_CUDA_HPW_STAGES 2
#define GLLM_CUDA_HPW_THREADS (GLLM_CUDA_HPW_ROWS * 2 + 128)
#define GLLM_CUDA_HPW_DV(D) ((D) == 192 ? 128 : (D))
#define GLLM_CUDA_HPW_SMEM(D)                                   \
    (1024 + (GLLM_CUDA_HPW_ROWS * (D) +                         \
             GLLM_CUDA_HPW_STAGES * GLLM_CUDA_HPW_KEYS * ((D) + GLLM_CUDA_HPW_DV(D))) * 2)

/* The split units of a dense Hopper launch (hopper_schedule.h, gllm_cuda_hp_split_of): their key
 * tiles each (0: none split), all of them, and a divider by the first (n / d by a
 * multiply-high, an add and a shift, gllm_cuda_fastdiv_div). */
typedef struct gllm_cuda_fastdiv {
    uint32_t d, m, s;
} gllm_cuda_fastdiv;
typedef struct gllm_cuda_hp_split {
    int32_t keys, work;
    gllm_cuda_fastdiv div;
} gllm_cuda_hp_split;

/* gllm_attn_fwd_hopper_tma_{f16,bf16}_d{64,128}[_causal] (sm_90a image only): the same
 * kernels, launched the same way, whose producer loads Q, K and V with TMA and whose
 * consumers store O with TMA where GLLM_CUDA_HP_O_TILE(D). Their parameter is a
 * gllm_cuda_hp_params, passed __grid_constant__ (the tensor maps are read where they lie in
 * parameter memory): a as for the others, and q_map, k_map, v_map and o_map from
 * cuTensorMapEncodeTiled: 4-D (D, S, H, B) with byte strides, 16-bit elements, boxes of
 * GLLM_CUDA_HP_BOX_COLS columns by GLLM_CUDA_HP_ROWS(D) rows (Q), GLLM_CUDA_HP_KEYS rows (K, V)
 * or GLLM_CUDA_HP_O_ROWS rows (O: a consumer warpgroup's), the 128-byte swizzle, rows outside
 * the tensor read as zeros (and not written). */
#define GLLM_CUDA_HP_BOX_COLS 64
#define GLLM_CUDA_HP_O_ROWS 64
typedef struct gllm_cuda_tmap {
    __attribute__((aligned(128))) uint64_t opaque[16];   /* the driver's CUtensorMap */
} gllm_cuda_tmap;
typedef struct gllm_cuda_hp_params {
    gllm_cuda_tmap q_map, k_map, v_map, o_map;
    gllm_cuda_attn_params a;
    /* D = 128 not causal: the split units (gllm_cuda_hp_split_of of the launch's schedule, its
     * split_keys the key tiles of a row) and a zeroed GLLM_CUDA_HP_SPLIT_BYTES(D, grid)
     * workspace; split.keys 0 keeps every unit whole. */
    gllm_cuda_hp_split split;
    uint32_t *split_counts;
    float *split_parts;
} gllm_cuda_hp_params;

/* gllm_paged_prefill_hopper_{f16,bf16}_d{64,128} (sm_90a image only): chunked prefill over the
 * paged cache, causal over it, with the dense Hopper kernel's consumers and a TMA producer.
 * Persistent: grid (gllm_cuda_persistent_grid(units, SMs), 1), block GLLM_CUDA_HP_THREADS(D),
 * dynamic shared memory GLLM_CUDA_PP_SMEM(D). A unit is head h of work item i (unit i * Hq + h:
 * heads fastest); each block takes the units gllm_cuda_pp_unit gives it, round by round. A work
 * item is up to GLLM_CUDA_HP_ROWS(D) query tokens of one sequence, token i seeing keys <= pos0 + i.
 * The parameter is passed __grid_constant__: q_map is q [N, Hq, D] as 4-D (D, N, Hq, 1), boxes
 * of GLLM_CUDA_HP_BOX_COLS columns by GLLM_CUDA_HP_ROWS(D) tokens; k_map and v_map are the pools
 * [num_pages, page_size, Hkv, D] as 4-D (D, page_size, Hkv, num_pages), boxes of
 * GLLM_CUDA_HP_BOX_COLS columns by page_size rows (one page of one head); all with the 128-byte
 * swizzle, as cuda_tma_map encodes them. page_size divides GLLM_CUDA_HP_KEYS and is at least
 * GLLM_CUDA_PP_MIN_PAGE; out [N, Hq, D] contiguous. */
#define GLLM_CUDA_PP_MIN_PAGE 16
typedef struct gllm_cuda_pp_work {
    int32_t q0;           /* the item's first query token (row of q and out) */
    int32_t nq;           /* its query tokens, 1 .. GLLM_CUDA_HP_ROWS(D) */
    int32_t pos0;         /* the position of token q0 in its sequence */
    int32_t kv_len;       /* the sequence's tokens (keys) */
    int32_t page0;        /* the sequence's first entry in kv_indices (its kv_indptr[b]) */
} gllm_cuda_pp_work;

typedef struct gllm_cuda_pp_params {
    gllm_cuda_tmap q_map, k_map, v_map, o_map;
    void *out;
    const int32_t *kv_indices;
    const gllm_cuda_pp_work *work;
    int32_t *bad_page;    /* set (pinned host memory) when a page number is >= num_pages */
    uint32_t num_pages;
    int32_t Hq, group, page_size;
    float scale;
    int32_t units;        /* work items times Hq */
    int32_t head_dim;     /* the tensors' D: the kernel's, or below it (80 and 96 on the D 128
                           * kernel), the maps' columns past it reading as zeros and out's
                           * rows head_dim apart, its columns past head_dim never written */
} gllm_cuda_pp_params;

/* Generic kernels gllm_attn_generic_{f32,f16,bf16}: any strides, D <= 256; grid
 * (ceil(Sq / GLLM_CUDA_GENERIC_ROWS), B * Hq), block GLLM_CUDA_GENERIC_ROWS * 32. */
#define GLLM_CUDA_GENERIC_ROWS 4
#define GLLM_CUDA_GENERIC_MAX_D 256

/* ---- paged KV cache ---------------------------------------------------------------------
 * gllm_paged_attn_{f16,bf16}_d{64,128}: grid (work items, Hkv * head_chunks), block
 * GLLM_CUDA_PAGED_THREADS, dynamic shared memory GLLM_CUDA_PAGED_SMEM(D). Each block takes
 * GLLM_CUDA_PAGED_ROWS rows of (query token, head) pairs that share one KV head: row r is
 * token r / heads_per_cta of the item and head r % heads_per_cta of the block's chunk of
 * the group. It reads keys [kv0, kv1) of its sequence through the page table, with the
 * causal limit pos0 + token; it writes out directly (part < 0) or a partial result, and the
 * last block of a combine item to finish (counted in counters) merges the item's partials.
 * Pools and q/out 16-byte aligned, D-stride 1, contiguous. */
#define GLLM_CUDA_PAGED_THREADS 128
#define GLLM_CUDA_PAGED_ROWS 16
#define GLLM_CUDA_PAGED_KEYS 64          /* keys per pipeline stage; 16 per warp */
#define GLLM_CUDA_PAGED_STAGES 3
#define GLLM_CUDA_PAGED_SMEM(D) \
    ((GLLM_CUDA_PAGED_ROWS + GLLM_CUDA_PAGED_STAGES * 2 * GLLM_CUDA_PAGED_KEYS) * (D) * 2)

typedef struct gllm_cuda_paged_work {
    int32_t page0;        /* the sequence's first entry in kv_indices (its kv_indptr[b]) */
    int32_t q0;           /* first query token (row of q and out) */
    int32_t nq;           /* query tokens, <= 16 / heads_per_cta */
    int32_t pos0;         /* position of token q0 in its sequence */
    int32_t kv0, kv1;     /* keys read */
    int32_t part;         /* -1: final; else the partial slot written */
    int32_t comb;         /* with part >= 0: the combine item that merges it */
} gllm_cuda_paged_work;

typedef struct gllm_cuda_paged_combine {
    int32_t q0, nq;       /* as the work items it merges */
    int32_t part0, nparts;
} gllm_cuda_paged_combine;

typedef struct gllm_cuda_paged_params {
    const void *q;
    void *out;
    const void *k_cache, *v_cache;
    const int32_t *kv_indices;
    const gllm_cuda_paged_work *work;
    const gllm_cuda_paged_combine *combine;
    float *part_o;        /* [part][grid.y][ROWS][D] */
    float *part_lse;      /* [part][grid.y][ROWS], log2 domain */
    int32_t *counters;    /* [combine item][grid.y]: parts done; zero between jobs */
    int32_t Hq, Hkv, page_size, page_shift;   /* page_shift: log2(page_size), or -1 */
    int32_t group, heads_per_cta, head_chunks;
    float scale;
    uint32_t num_pages;   /* a page number at or past it is not followed: */
    int32_t *bad_page;    /* ... the kernel sets this (pinned host memory) instead */
} gllm_cuda_paged_params;

/* An attention variant as the paged kernels read it (backend_api.h's struct attn_variant):
 * -1 window edges and chunk 0 are none; slopes and sinks [Hq] f32 in device memory, or NULL. */
typedef struct gllm_cuda_variant {
    int32_t window_left, window_right;
    int32_t chunk;
    float soft_cap;       /* 0: none */
    const float *alibi;
    const float *sinks;
} gllm_cuda_variant;

/* gllm_attn_tc_var_{f16,bf16}_d{64,128} (the tensor-core kernels with a variant, launched as
 * they are, causality in a.causal) and gllm_attn_generic_var_{f32,f16,bf16} (the generic one
 * with a variant and v's head dim Dv, 1 .. GLLM_CUDA_GENERIC_MAX_D; the TC forms take Dv = D):
 * positions bottom-right aligned, query row r at r + Skv - Sq. */
typedef struct gllm_cuda_attn_var_params {
    gllm_cuda_attn_params a;
    gllm_cuda_variant v;
    int64_t Dv;
} gllm_cuda_attn_var_params;

/* gllm_attn_fwd_hopper_var_{f16,bf16}_d{64,128}[_causal] (sm_90a image only): the TMA kernels
 * with a variant, launched as they are on gllm_cuda_hp_grid's blocks, hp.split zeroed (the
 * variant kernels split no unit). */
typedef struct gllm_cuda_hp_var_params {
    gllm_cuda_hp_params hp;
    gllm_cuda_variant v;
} gllm_cuda_hp_var_params;

/* gllm_paged_prefill_hopper_var_{f16,bf16}_d{64,128} (sm_90a image only): the Hopper paged
 * prefill with a variant, launched as it is; an item's key tiles start at the tile of the
 * first key its first token sees. */
typedef struct gllm_cuda_pp_var_params {
    gllm_cuda_pp_params pp;
    gllm_cuda_variant v;
} gllm_cuda_pp_var_params;

/* gllm_paged_attn_var_{f16,bf16}_d{64,128}: the paged kernel with a variant, its plan uploaded
 * as the plain kernel's (no batch or single forms: a variant job is not the latency path yet). */
typedef struct gllm_cuda_paged_var_params {
    gllm_cuda_paged_params p;
    gllm_cuda_variant v;
} gllm_cuda_paged_var_params;

/* gllm_paged_attn_batch_{f16,bf16}_d{64,128}: the same kernel for a batch of sequences with
 * one query token each, none split (block x takes sequence x, B <= GLLM_CUDA_PAGED_BATCH):
 * the plan travels in the launch's parameters (its work and combine pointers are unused), so
 * the job needs no upload before its launch. */
#define GLLM_CUDA_PAGED_BATCH 64
typedef struct gllm_cuda_paged_batch_params {
    gllm_cuda_paged_params p;
    int32_t page0[GLLM_CUDA_PAGED_BATCH];   /* sequence x's first entry in kv_indices */
    int32_t len[GLLM_CUDA_PAGED_BATCH];     /* its length in tokens, >= 1 */
} gllm_cuda_paged_batch_params;

/* gllm_paged_attn_single_{f16,bf16}_d{64,128}: the same for one one-token sequence split
 * into grid.x ranges of chunk keys (block x reads [x * chunk, min((x + 1) * chunk, len))),
 * merged by the one combine item in comb: its plan, too, travels in the parameters. Every
 * block also adds its part, scaled to 2^0, to sums, and the last block divides them instead
 * of reading every partial back, unless they left fp32's range (then the exact merge). */
#define GLLM_CUDA_PAGED_SUM_STRIDE(D) ((D) + 4)   /* O in the first D floats, the sum at D */
typedef struct gllm_cuda_paged_single_params {
    gllm_cuda_paged_params p;
    float *sums;          /* [grid.y][ROWS][SUM_STRIDE(D)], zero between jobs: the fast merge's;
                           * NULL: the exact merge only, bit-for-bit repeatable */
    gllm_cuda_paged_combine comb;
    int32_t page0, len, chunk;
} gllm_cuda_paged_single_params;

/* gllm_paged_attn_single_var_{f16,bf16}_d{64,128}: the single-sequence form with a variant:
 * block x reads [kv_begin + x * chunk, ...), kv_begin the first key the query sees. */
typedef struct gllm_cuda_paged_single_var_params {
    gllm_cuda_paged_single_params s;
    gllm_cuda_variant v;
    int32_t kv_begin;
} gllm_cuda_paged_single_var_params;

/* gllm_pad_rows (pad_rows.cu): rows [B, H, S] of 16-bit elements, their first cols copied from
 * src to dst and columns cols .. dst_cols of dst zeroed; strides in elements; grid
 * (ceil(B H S / GLLM_CUDA_PAD_ROWS)), block GLLM_CUDA_PAD_ROWS * 32. */
#define GLLM_CUDA_PAD_ROWS 4
typedef struct gllm_cuda_pad_params {
    const void *src;
    void *dst;
    int64_t B, H, S;
    int64_t src_st[3], dst_st[3];
    int32_t cols, dst_cols;
} gllm_cuda_pad_params;

/* gllm_kv_append_rows: grid (new tokens), block 128; row_bytes per [Hkv, D] row, vec16 when
 * rows and pointers allow 16-byte copies. */
typedef struct gllm_cuda_append_params {
    const void *k_new, *v_new;
    void *k_cache, *v_cache;
    const int64_t *slot;  /* [n]: destination row (page * page_size + offset) */
    int64_t row_bytes;
    int32_t vec16;
} gllm_cuda_append_params;

#endif
