/* The CPU flash-attention job: what the planner (cpu_attention.c) hands the per-ISA kernels. */
#ifndef GLLMD_CPU_FA_H
#define GLLMD_CPU_FA_H

#include <stdbool.h>
#include <stdint.h>

#include "backend_api.h"
#include "cpu_pool.h"

#define FA_MAX_D 256        /* head dims up to this (CPU_MAX_HEAD_DIM) */
#define FA_KB 64            /* keys per tile: a tile's K and V rows stay in L1/L2 */
#define FA_MAX_ROWS 64      /* query rows (heads x positions) per task, a multiple of 16 */
#define FA_DOT_ROWS 8       /* at most this many rows: scores as dot products along d */
#define FA_SPLIT_MIN_KEYS 256   /* split-K gives each part at least this many keys */

/* One thread's tiles, sized for the largest job. */
struct fa_scratch {
    float q[FA_MAX_ROWS * FA_MAX_D];   /* dot: rows [R][Dp]; outer: transposed [D][Rp] */
    float k[FA_KB * FA_MAX_D];         /* key rows widened to f32 [KB][Dp] */
    float v[FA_KB * FA_MAX_D];         /* value rows [KB][Dvp] */
    float s[FA_KB * FA_MAX_ROWS];      /* scores then probabilities, [key][row] */
    float o[FA_MAX_ROWS * FA_MAX_D];   /* unnormalised output [R][Dvp] */
    float m[FA_MAX_ROWS], l[FA_MAX_ROWS], alpha[FA_MAX_ROWS];   /* base-2 running max, sum */
    int32_t nan[FA_MAX_ROWS];          /* -1: the row met a NaN score */
    int32_t rlo[FA_MAX_ROWS], rhi[FA_MAX_ROWS];   /* visible keys relative to a tile */
    int64_t lo[FA_MAX_ROWS], hi[FA_MAX_ROWS];     /* visible keys [lo, hi) of each row */
    const float *kp[FA_KB], *vp[FA_KB];           /* each key's f32 row, in place or widened */
};

/* A dense job (B sequences of Sq queries and Skv keys) or a paged one (ragged sequences whose
 * keys are read through page tables), with how it is cut into tasks. */
struct fa_job {
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, D, Dv, group;
    float qscale;               /* scale * log2(e): the softmax runs in base 2 */
    bool causal, transform;     /* transform: soft-cap or ALiBi rewrite each score */
    struct attn_variant variant;
    const void *q, *k, *v;
    void *out;
    float *lse;                 /* dense only; NULL: not wanted */
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];
    int64_t Sq, Skv;            /* dense */
    bool paged;                 /* q and out [tokens, H, D]; k and v rows through pages */
    const int32_t *q_indptr, *kv_indptr, *kv_indices, *kv_len;
    int64_t page_size;
    /* The cut: a task is (sequence, kv head, head chunk, query block, key split). */
    int ng, nq, hchunks, nsplit;
    int64_t *task0;             /* [B + 1] first task of each sequence */
    int64_t *row0;              /* [B + 1] first output row (h, i) of each sequence */
    float *partial;             /* nsplit > 1: [rows][nsplit][pstride] */
    int64_t pstride;            /* floats per partial: m, l, nan, then o[Dv] */
    struct fa_scratch *const *scratch;
};

static inline int64_t fa_sq(const struct fa_job *j, int64_t b)
{
    return j->paged ? j->q_indptr[b + 1] - j->q_indptr[b] : j->Sq;
}

static inline int64_t fa_skv(const struct fa_job *j, int64_t b)
{
    return j->paged ? j->kv_len[b] : j->Skv;
}

/* Element offset of (b, h, i, 0) in q and out. */
static inline int64_t fa_q_off(const struct fa_job *j, int64_t b, int64_t h, int64_t i)
{
    return (j->paged ? j->q_indptr[b] * j->q_st[2] : b * j->q_st[0]) + h * j->q_st[1] +
           i * j->q_st[2];
}

static inline int64_t fa_o_off(const struct fa_job *j, int64_t b, int64_t h, int64_t i)
{
    return (j->paged ? j->q_indptr[b] * j->o_st[2] : b * j->o_st[0]) + h * j->o_st[1] +
           i * j->o_st[2];
}

/* Element offset of key pos's row (d = 0) of kv head hk in k (st = k_st) or v (v_st): a
 * paged sequence's row is read where its page lies. */
static inline int64_t fa_kv_off(const struct fa_job *j, const int64_t st[4], int64_t b,
                                int64_t hk, int64_t pos)
{
    if (!j->paged)
        return b * st[0] + hk * st[1] + pos * st[2];
    const int64_t page = j->kv_indices[j->kv_indptr[b] + pos / j->page_size];
    return (page * j->page_size + pos % j->page_size) * st[2] + hk * st[1];
}

static inline int64_t fa_floor_div(int64_t x, int64_t y)
{
    int64_t q = x / y;
    return q * y > x ? q - 1 : q;
}

/* The keys [*lo, *hi) of a sequence of skv keys that the query at absolute position pos
 * sees: every mask is an interval (causal, the window, the query's chunk), so their meet is
 * one too. */
static inline void fa_visible(const struct fa_job *j, int64_t skv, int64_t pos, int64_t *lo,
                              int64_t *hi)
{
    const struct attn_variant *v = &j->variant;
    int64_t l = 0, h = skv;
    if (j->causal && pos + 1 < h)
        h = pos + 1;
    if (v->window && v->window_left >= 0 && pos - v->window_left > l)
        l = pos - v->window_left;
    if (v->window && v->window_right >= 0 && pos + v->window_right + 1 < h)
        h = pos + v->window_right + 1;
    if (v->chunk) {
        const int64_t c0 = fa_floor_div(pos, v->chunk) * v->chunk;
        l = c0 > l ? c0 : l;
        h = c0 + v->chunk < h ? c0 + v->chunk : h;
    }
    *lo = l;
    *hi = h > l ? h : l;
}

/* The sequence task belongs to (task0 is sorted). */
static inline int64_t fa_seq_of(const struct fa_job *j, int64_t task)
{
    int64_t lo = 0, hi = j->B - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (j->task0[mid] <= task)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Writes row (b, h, i) from its running max m (base 2), sum l and unnormalised o[Dv]: the
 * sink joins here, a row that saw nothing is zeros (lse -inf), one that met a NaN is NaN
 * (cpu_fa_finish.c). */
void fa_finish_row(const struct fa_job *j, int64_t b, int64_t h, int64_t i, float m, float l,
                   const float *o, bool nan);

/* The combine pass after a split job: FA_COMBINE_ROWS rows per task. */
#define FA_COMBINE_ROWS 16
void fa_combine_task(void *ctx, int64_t task, int thread);

/* One task of a job (fn of cpu_pool_run, ctx the fa_job), one build per ISA level. */
void fa_task_generic(void *ctx, int64_t task, int thread);
#if defined(__x86_64__)
void fa_task_x86_64_v2(void *ctx, int64_t task, int thread);
void fa_task_x86_64_v3(void *ctx, int64_t task, int thread);
void fa_task_x86_64_v4(void *ctx, int64_t task, int thread);
#endif

#endif
