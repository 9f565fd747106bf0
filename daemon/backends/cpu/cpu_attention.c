/* CPU attention planning: a job cut into tasks (GQA rows, query blocks, split-K) for the kernel. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_fa.h"

struct cpu_attention {
    struct cpu_pool *pool;
    enum cpu_isa isa;
    cpu_task_fn *task;
    struct fa_scratch **scratch;
    int nscratch;
};

int cpu_attention_create(struct cpu_pool *pool, enum cpu_isa isa, struct cpu_attention **out)
{
    if (!cpu_isa_runs(isa))
        return -ENOTSUP;
    struct cpu_attention *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->pool = pool;
    c->isa = isa;
    c->task = cpu_isa_task(isa);
    c->nscratch = cpu_pool_threads(pool);
    c->scratch = calloc((size_t)c->nscratch, sizeof *c->scratch);
    if (!c->scratch) {
        free(c);
        return -ENOMEM;
    }
    for (int i = 0; i < c->nscratch; i++) {
        c->scratch[i] = aligned_alloc(64, sizeof(struct fa_scratch));
        if (!c->scratch[i]) {
            cpu_attention_destroy(c);
            return -ENOMEM;
        }
    }
    *out = c;
    return 0;
}

void cpu_attention_destroy(struct cpu_attention *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nscratch; i++)
        free(c->scratch[i]);
    free(c->scratch);
    free(c);
}

enum cpu_isa cpu_attention_isa(const struct cpu_attention *c)
{
    return c->isa;
}

/* Rows per task: a whole GQA group (so each K/V tile serves every head that reads it) times
 * enough query positions to fill FA_MAX_ROWS. Keys are split (split-K) only when the tasks
 * would not keep every thread busy a few times over, as in decode at small batch. */
static int fa_run(struct cpu_attention *c, struct fa_job *j, int64_t max_sq, int64_t max_skv)
{
    const int threads = cpu_pool_threads(c->pool);
    j->group = j->Hq / j->Hkv;
    j->ng = j->group >= FA_MAX_ROWS ? FA_MAX_ROWS : (int)j->group;
    j->nq = j->group >= FA_MAX_ROWS ? 1 : FA_MAX_ROWS / (int)j->group;
    if (j->nq > max_sq)
        j->nq = max_sq > 0 ? (int)max_sq : 1;
    j->hchunks = (int)((j->group + j->ng - 1) / j->ng);
    j->scratch = c->scratch;
    j->nsplit = 1;
    int64_t base = 0;
    for (int64_t b = 0; b < j->B; b++)
        base += j->Hkv * j->hchunks * ((fa_sq(j, b) + j->nq - 1) / j->nq);
    if (base == 0)
        return 0;
    if (threads > 1 && base < 4 * threads) {
        int64_t want = (4 * threads + base - 1) / base, cap = max_skv / FA_SPLIT_MIN_KEYS;
        want = want < cap ? want : cap;
        j->nsplit = want > 1 ? (int)want : 1;
    }
    int rc = 0;
    j->task0 = malloc((size_t)(j->B + 1) * sizeof *j->task0);
    j->row0 = j->nsplit > 1 ? malloc((size_t)(j->B + 1) * sizeof *j->row0) : NULL;
    if (!j->task0 || (j->nsplit > 1 && !j->row0)) {
        rc = -ENOMEM;
        goto out;
    }
    j->task0[0] = 0;
    for (int64_t b = 0; b < j->B; b++)
        j->task0[b + 1] = j->task0[b] + j->Hkv * j->hchunks *
                                            ((fa_sq(j, b) + j->nq - 1) / j->nq) * j->nsplit;
    if (j->nsplit > 1) {
        j->row0[0] = 0;
        for (int64_t b = 0; b < j->B; b++)
            j->row0[b + 1] = j->row0[b] + j->Hq * fa_sq(j, b);
        j->pstride = j->Dv + 3;
        j->partial = malloc((size_t)(j->row0[j->B] * j->nsplit * j->pstride) * sizeof(float));
        if (!j->partial) {
            rc = -ENOMEM;
            goto out;
        }
    }
    cpu_pool_run(c->pool, j->task0[j->B], c->task, j);
    if (j->nsplit > 1)
        cpu_pool_run(c->pool, (j->row0[j->B] + FA_COMBINE_ROWS - 1) / FA_COMBINE_ROWS,
                     fa_combine_task, j);
out:
    free(j->task0);
    free(j->row0);
    free(j->partial);
    j->task0 = j->row0 = NULL;
    j->partial = NULL;
    return rc;
}

static bool variant_transforms(const struct attn_variant *v)
{
    return v->soft_cap > 0.0f || v->alibi_slopes;
}

int cpu_attention_run(struct cpu_attention *c, const struct attn_args *a)
{
    if (a->D < 1 || a->D > CPU_MAX_HEAD_DIM || attn_dv(a) < 1 || attn_dv(a) > a->D || a->Hkv < 1 ||
        a->Hq % a->Hkv != 0)
        return -EINVAL;
    if (a->B == 0 || a->Hq == 0 || a->Sq == 0)
        return 0;
    struct fa_job j = {
        .dtype = a->dtype, .B = a->B, .Hq = a->Hq, .Hkv = a->Hkv, .D = a->D, .Dv = attn_dv(a),
        .qscale = a->scale * (float)M_LOG2E, .causal = a->causal,
        .transform = variant_transforms(&a->variant), .variant = a->variant,
        .q = a->q, .k = a->k, .v = a->v, .out = a->out, .lse = a->lse,
        .Sq = a->Sq, .Skv = a->Skv,
    };
    memcpy(j.q_st, a->q_st, sizeof j.q_st);
    memcpy(j.k_st, a->k_st, sizeof j.k_st);
    memcpy(j.v_st, a->v_st, sizeof j.v_st);
    memcpy(j.o_st, a->o_st, sizeof j.o_st);
    memcpy(j.lse_st, a->lse_st, sizeof j.lse_st);
    const uint64_t t0 = backend_now_ns();
    int rc = 0;
    for (uint32_t i = 0; i < attn_runs(a) && rc == 0; i++)
        rc = fa_run(c, &j, a->Sq, a->Skv);
    /* The compute alone, as a GPU's events time its kernel: status and the metrics then
     * split a job's time the same way on every backend. */
    if (a->exec.timing && rc == 0)
        a->exec.timing->kernel_ns = (backend_now_ns() - t0) / attn_runs(a);
    return rc;
}

/* Each sequence's queries are its last tokens: the bottom-right causal mask with Sq =
 * queries and Skv = cached tokens is exactly that, and so are the variant's positions. */
int cpu_attention_paged(struct cpu_attention *c, const struct paged_args *p)
{
    const int64_t D = p->D, Dv = p->Dv ? p->Dv : p->D;
    if (D < 1 || D > CPU_MAX_HEAD_DIM || Dv < 1 || Dv > D || p->Hkv < 1 || p->Hq % p->Hkv != 0 ||
        p->page_size < 1)
        return -EINVAL;
    if (p->B == 0 || p->Hq == 0)
        return 0;
    struct fa_job j = {
        .dtype = p->dtype, .B = p->B, .Hq = p->Hq, .Hkv = p->Hkv, .D = D, .Dv = Dv,
        .qscale = p->scale * (float)M_LOG2E, .causal = true,
        .transform = variant_transforms(&p->variant), .variant = p->variant,
        .q = p->q, .k = p->k_cache, .v = p->v_cache, .out = p->out,
        .q_st = {0, D, p->Hq * D, 1}, .k_st = {0, D, p->Hkv * D, 1},
        .v_st = {0, Dv, p->Hkv * Dv, 1}, .o_st = {0, Dv, p->Hq * Dv, 1},
        .paged = true, .q_indptr = p->q_indptr, .kv_indptr = p->kv_indptr,
        .kv_indices = p->kv_indices, .kv_len = p->kv_len, .page_size = p->page_size,
    };
    return fa_run(c, &j, p->max_q_len, p->max_kv_len);
}
