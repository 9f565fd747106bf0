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
/* Work items for an attention job: with work and comb NULL it only counts; else it also
 * writes them (room for the counts). */
void paged_plan(const struct paged_args *p, const struct paged_tiling *t, int64_t chunk_target,
                gllm_cuda_paged_work *work, gllm_cuda_paged_combine *comb, int64_t *nwork,
                int64_t *ncomb, int64_t *nparts);

#endif
