/* Split-KV planning for the paged kernels: how a job's keys are cut into blocks. */
#ifndef GLLMD_CUDA_PLAN_H
#define GLLMD_CUDA_PLAN_H

#include <stdint.h>

#include "attention_params.h"
#include "backend_api.h"

/* Keys per block never go below this when a sequence is split: a block must stream a few
 * tiles for its pipeline to pay off. */
#define PAGED_MIN_CHUNK 128
/* Split until there are about this many blocks per SM: two are resident at a time, so one
 * full wave. More splits only add partial results to write and merge (measured: B64 L4096
 * ran 0.92x cuDNN at four per SM, the combine costing more than the tail it saved). */
#define PAGED_BLOCKS_PER_SM 2

/* The (query token, head) tiling of a group: heads per block, blocks per group (grid.y),
 * tokens per block. */
struct paged_tiling {
    int hpc, head_chunks, tpc, gy;
};

struct paged_tiling paged_tiling(const struct paged_args *p);
/* Keys per block that make about PAGED_BLOCKS_PER_SM blocks per SM for a job of
 * query_keys (each query token's keys, summed), at least PAGED_MIN_CHUNK. */
int64_t paged_chunk_target(int64_t query_keys, const struct paged_tiling *t, int sm_count);
/* kv_end keys cut into *nsplit ranges of *chunk keys (a multiple of 64, the last range
 * shorter), about chunk_target each; the count rounded to the nearest. */
void paged_split_keys(int64_t kv_end, int64_t chunk_target, int64_t *nsplit, int64_t *chunk);
/* The first key the query at pos sees under p's variant (0 without a window or chunk); keys
 * before it are not planned. */
int32_t paged_kv_begin(const struct paged_args *p, int32_t pos);
/* Work items for an attention job: with work and comb NULL it only counts; else it also
 * writes them (room for the counts). */
void paged_plan(const struct paged_args *p, const struct paged_tiling *t, int64_t chunk_target,
                gllm_cuda_paged_work *work, gllm_cuda_paged_combine *comb, int64_t *nwork,
                int64_t *ncomb, int64_t *nparts);

/* ---- Hopper paged prefill (gllm_paged_prefill_hopper_*, attention_params.h) ----
 * Worth it when the query tokens fill its 128- or 192-row tiles: on average at least this
 * many per sequence (a decode-like job, one or a few tokens per sequence, stays on the paged
 * kernel, whose 16-row blocks split the keys instead). */
#define PP_MIN_Q_PER_SEQ 64
/* ... and when at least this share (percent) of the scores its whole tiles compute are ones a
 * query needs: a batch that mixes a long prefill with many decode steps at long contexts would
 * give each decode step a 128-row tile streaming every key of its sequence (1 row in 128 used),
 * and stays on the paged kernel. A causal prompt from an empty prefix uses about 90%. With a
 * window or chunk the tiles start at each item's first key and the keys are counted token by
 * token. The paged kernel runs a prefill at 53-78 TFLOP/s on an H200, this one at 500-650 when
 * every score counts, so it wins down to about an eighth used: GPT-OSS's 128-key window with
 * sinks (D64, 192-row tiles, 34% used) ran 3.5x faster here (105 TFLOP/s against 30) than at
 * the 50% this was before. */
#define PP_MIN_USED_PCT 20
/* The most work items (the kernel's units, items times Hq, must stay within int32 too). */
#define PP_MAX_ITEMS 65535

/* The head dim of the Hopper paged prefill kernel that takes head dim D: 64 and 128 their own,
 * 80 and 96 (any multiple of 8 between: 16-byte rows) 128's, padded by its tensor maps (the
 * columns past D read as zeros, not stored); else 0. */
int pp_kernel_dim(int64_t D);
/* The Hopper paged prefill's work items for an attention job whose shape it takes (dtype
 * f16/bf16, pp_kernel_dim(D), Dv = D, page_size a power of two from GLLM_CUDA_PP_MIN_PAGE to
 * GLLM_CUDA_HP_KEYS, at least PP_MIN_Q_PER_SEQ query tokens per sequence on average and
 * PP_MIN_USED_PCT of the computed scores used, every sequence's queries within its keys, at
 * most PP_MAX_ITEMS items and items times Hq within int32): their count, else 0. The
 * device's part (the sm_90a image, tensor maps) is cuda_paged.c's. */
int64_t pp_items(const struct paged_args *p);
/* Writes pp_items(p) items, each up to GLLM_CUDA_HP_ROWS(pp_kernel_dim(p->D)) query tokens of
 * one sequence:
 * round k takes every sequence's k-th m-tile from its last (the causal limit makes the last
 * the heaviest), so the items run heaviest first. */
void pp_plan(const struct paged_args *p, gllm_cuda_pp_work *work);

#endif
