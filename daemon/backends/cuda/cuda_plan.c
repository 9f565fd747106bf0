/* Planning for the paged kernels: split-KV tiling, keys per block, work and combine items, and
 * the Hopper paged prefill's work items. */
#include "cuda_plan.h"

struct paged_tiling paged_tiling(const struct paged_args *p)
{
    struct paged_tiling t;
    const int group = (int)(p->Hq / p->Hkv);
    t.hpc = group < GLLM_CUDA_PAGED_ROWS ? group : GLLM_CUDA_PAGED_ROWS;
    t.head_chunks = (group + t.hpc - 1) / t.hpc;
    t.tpc = GLLM_CUDA_PAGED_ROWS / t.hpc;
    t.gy = (int)p->Hkv * t.head_chunks;
    return t;
}

int64_t paged_chunk_target(int64_t query_keys, const struct paged_tiling *t, int sm_count)
{
    const int64_t target = query_keys * t->gy / ((int64_t)sm_count * PAGED_BLOCKS_PER_SM) + 1;
    return target < PAGED_MIN_CHUNK ? PAGED_MIN_CHUNK : target;
}

/* The count is rounded to the nearest, not up: chunk_target is what fills one wave of
 * blocks, and rounding up put B4 L8192 at 288 blocks (9 per sequence and head) on an H100's
 * 264 slots, a second wave for 24 of them (16% slower than 256). */
void paged_split_keys(int64_t kv_end, int64_t chunk_target, int64_t *nsplit, int64_t *chunk)
{
    int64_t n = (kv_end + chunk_target / 2) / chunk_target;
    if (n < 1)
        n = 1;
    *chunk = ((kv_end + n - 1) / n + 63) & ~(int64_t)63;
    *nsplit = (kv_end + *chunk - 1) / *chunk;
}

int32_t paged_kv_begin(const struct paged_args *p, int32_t pos)
{
    const struct attn_variant *v = &p->variant;
    int32_t lo = 0;
    if (v->window && v->window_left >= 0 && pos - v->window_left > lo)
        lo = pos - v->window_left;
    if (v->chunk && (int32_t)(pos / (int32_t)v->chunk * (int32_t)v->chunk) > lo)
        lo = pos / (int32_t)v->chunk * (int32_t)v->chunk;
    return lo;
}

void paged_plan(const struct paged_args *p, const struct paged_tiling *t, int64_t chunk_target,
                gllm_cuda_paged_work *work, gllm_cuda_paged_combine *comb, int64_t *nwork,
                int64_t *ncomb, int64_t *nparts)
{
    int64_t nw = 0, nc = 0, np = 0;
    for (int64_t b = 0; b < p->B; b++) {
        const int32_t q_begin = p->q_indptr[b], qn = p->q_indptr[b + 1] - q_begin;
        for (int32_t q = 0; q < qn; q += t->tpc) {
            const int32_t nq = qn - q < t->tpc ? qn - q : t->tpc;
            const int32_t pos0 = p->kv_len[b] - qn + q, kv_end = pos0 + nq;
            /* A window or chunk hides the keys before the item's first query sees any:
             * they are not read. */
            const int32_t kv_begin = paged_kv_begin(p, pos0);
            /* Unsplit unless the sequence is longer than a block's share: in a batch that
             * fills the chip by itself, no item is, and the plan costs no division (three
             * per item, twice, were 1.6 us of a B64 decode step on the H200's host). */
            int64_t nsplit = 1, chunk = kv_end - kv_begin;
            if (kv_end - kv_begin > chunk_target)
                paged_split_keys(kv_end - kv_begin, chunk_target, &nsplit, &chunk);
            if (comb && nsplit > 1)
                comb[nc] = (gllm_cuda_paged_combine){q_begin + q, nq, (int32_t)np, (int32_t)nsplit};
            for (int64_t s = 0; s < nsplit; s++) {
                if (work) {
                    const int64_t kv0 = kv_begin + s * chunk;
                    const int64_t kv1 = kv0 + chunk < kv_end ? kv0 + chunk : kv_end;
                    work[nw] = (gllm_cuda_paged_work){
                        .page0 = p->kv_indptr[b], .q0 = q_begin + q, .nq = nq, .pos0 = pos0,
                        .kv0 = (int32_t)kv0, .kv1 = (int32_t)kv1,
                        .part = nsplit > 1 ? (int32_t)(np + s) : -1,
                        .comb = nsplit > 1 ? (int32_t)nc : -1};
                }
                nw++;
            }
            if (nsplit > 1)
                nc++, np += nsplit;
        }
    }
    *nwork = nw, *ncomb = nc, *nparts = np;
}

int pp_kernel_dim(int64_t D)
{
    if (D == 64 || D == 128)
        return (int)D;
    return D > 64 && D < 128 && D % 8 == 0 ? 128 : 0;
}

int64_t pp_items(const struct paged_args *p)
{
    if (p->op != PAGED_ATTEND || (p->dtype != GLLM_DTYPE_F16 && p->dtype != GLLM_DTYPE_BF16) ||
        !pp_kernel_dim(p->D) || (p->Dv != 0 && p->Dv != p->D) ||
        p->page_size < GLLM_CUDA_PP_MIN_PAGE ||
        p->page_size > GLLM_CUDA_HP_KEYS || GLLM_CUDA_HP_KEYS % p->page_size != 0 ||
        p->B < 1 || p->nq < (int64_t)PP_MIN_Q_PER_SEQ * p->B || p->nq > INT32_MAX ||
        p->num_pages < 1 || p->num_pages > INT32_MAX || p->Hq > INT32_MAX)
        return 0;
    const int64_t rows = GLLM_CUDA_HP_ROWS(pp_kernel_dim(p->D)), keys = GLLM_CUDA_HP_KEYS;
    /* A window or chunk: an item's tiles start at its first token's first key's, and each
     * token's keys are counted one by one (a host loop over the job's tokens). */
    const bool masks = !attn_variant_none(&p->variant);
    int64_t n = 0, used = 0, computed = 0;     /* scores: needed, and computed in whole tiles */
    for (int64_t b = 0; b < p->B; b++) {
        const int64_t qn = p->q_indptr[b + 1] - p->q_indptr[b], kv = p->kv_len[b];
        if (qn < 0 || qn > kv)
            return 0;
        for (int64_t first = 0; first < qn; first += rows, n++) {
            const int64_t nq = qn - first < rows ? qn - first : rows, pos0 = kv - qn + first;
            int64_t k0 = 0;
            if (masks) {
                k0 = paged_kv_begin(p, (int32_t)pos0) / keys;
                for (int64_t i = pos0; i < pos0 + nq; i++)
                    used += i + 1 - paged_kv_begin(p, (int32_t)i);
            } else {
                used += nq * (pos0 + 1) + nq * (nq - 1) / 2;
            }
            computed += ((pos0 + nq + keys - 1) / keys - k0) * keys * rows;
        }
    }
    return n <= PP_MAX_ITEMS && n * p->Hq <= INT32_MAX && used * 100 >= computed * PP_MIN_USED_PCT
               ? n
               : 0;
}

void pp_plan(const struct paged_args *p, gllm_cuda_pp_work *work)
{
    const int32_t rows = GLLM_CUDA_HP_ROWS(pp_kernel_dim(p->D));
    int64_t n = 0;
    for (int32_t k = 0, more = 1; more; k++) {
        more = 0;
        for (int64_t b = 0; b < p->B; b++) {
            const int32_t q0 = p->q_indptr[b], qn = p->q_indptr[b + 1] - q0;
            const int32_t tiles = (qn + rows - 1) / rows;
            if (k >= tiles)
                continue;
            more |= k + 1 < tiles;
            const int32_t m = tiles - 1 - k, first = m * rows;
            work[n++] = (gllm_cuda_pp_work){
                .q0 = q0 + first,
                .nq = qn - first < rows ? qn - first : rows,
                .pos0 = p->kv_len[b] - qn + first,
                .kv_len = p->kv_len[b],
                .page0 = p->kv_indptr[b],
            };
        }
    }
}
