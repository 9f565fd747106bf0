/* CPU paged KV cache: appends by copying rows, attention by gathering pages for the dense kernel. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_paged.h"

/* v's head dim: D unless the job gave another. */
static int64_t paged_dv(const struct paged_args *p)
{
    return p->Dv ? p->Dv : p->D;
}

static void kv_append(const struct paged_args *p, size_t es)
{
    const size_t krow = (size_t)(p->Hkv * p->D) * es, vrow = (size_t)(p->Hkv * paged_dv(p)) * es;
    for (int64_t b = 0; b < p->B; b++) {
        const int32_t n = p->q_indptr[b + 1] - p->q_indptr[b];
        for (int32_t i = 0; i < n; i++) {
            const int64_t pos = p->kv_len[b] - n + i, src = p->q_indptr[b] + i;
            const size_t row = (size_t)paged_row(p, b, pos);
            memcpy((char *)p->k_cache + row * krow, (const char *)p->k_new + (size_t)src * krow,
                   krow);
            memcpy((char *)p->v_cache + row * vrow, (const char *)p->v_new + (size_t)src * vrow,
                   vrow);
        }
    }
}

/* Copies sequence b's tokens, page by page, into dense [len, Hkv, D] (k) and [len, Hkv, Dv]
 * (v) buffers. */
static void gather(const struct paged_args *p, int64_t b, size_t es, char *k, char *v)
{
    const size_t krow = (size_t)(p->Hkv * p->D) * es, vrow = (size_t)(p->Hkv * paged_dv(p)) * es;
    int64_t left = p->kv_len[b];
    for (int32_t i = p->kv_indptr[b]; left > 0; i++) {
        const int64_t n = left < p->page_size ? left : p->page_size;
        const size_t page = (size_t)(p->kv_indices[i] * p->page_size);
        memcpy(k, (const char *)p->k_cache + page * krow, (size_t)n * krow);
        memcpy(v, (const char *)p->v_cache + page * vrow, (size_t)n * vrow);
        k += (size_t)n * krow;
        v += (size_t)n * vrow;
        left -= n;
    }
}

/* Each sequence's queries are its last tokens: the dense kernel's bottom-right causal mask
 * with Sq = queries and Skv = cached tokens is exactly that, and so are the variant's
 * positions. */
static int attend(struct cpu_attention *dense, const struct paged_args *p, size_t es)
{
    const int64_t D = p->D, Dv = paged_dv(p);
    const size_t krow = (size_t)(p->Hkv * D) * es, vrow = (size_t)(p->Hkv * Dv) * es;
    char *k = malloc((size_t)p->max_kv_len * krow + 1);
    char *v = malloc((size_t)p->max_kv_len * vrow + 1);
    int rc = k && v ? 0 : -ENOMEM;
    const int64_t qrow = p->Hq * D, orow = p->Hq * Dv;   /* elements per query token */
    for (int64_t b = 0; b < p->B && rc == 0; b++) {
        const int64_t q0 = p->q_indptr[b], nq = p->q_indptr[b + 1] - q0;
        if (nq == 0)
            continue;
        gather(p, b, es, k, v);
        const int64_t Skv = p->kv_len[b];
        struct attn_args a = {
            .dtype = p->dtype, .B = 1, .Hq = p->Hq, .Hkv = p->Hkv, .Sq = nq, .Skv = Skv, .D = D,
            .Dv = Dv,
            .q = (const char *)p->q + (size_t)(q0 * qrow) * es, .k = k, .v = v,
            .out = (char *)p->out + (size_t)(q0 * orow) * es,
            .q_st = {nq * qrow, D, qrow, 1},
            .k_st = {Skv * p->Hkv * D, D, p->Hkv * D, 1},
            .v_st = {Skv * p->Hkv * Dv, Dv, p->Hkv * Dv, 1},
            .o_st = {nq * orow, Dv, orow, 1},
            .causal = true, .scale = p->scale, .variant = p->variant,
        };
        rc = cpu_attention_run(dense, &a);
    }
    free(k);
    free(v);
    return rc;
}

static int paged_run(struct cpu_attention *dense, const struct paged_args *p)
{
    const size_t es = p->dtype == GLLM_DTYPE_F32 ? 4 : 2;
    if (p->op == PAGED_APPEND) {
        kv_append(p, es);
        return 0;
    }
    /* A "device" tensor is the daemon's host memory here; its page numbers are read now,
     * after the jobs before this one wrote them, and checked before any is followed. */
    if (p->indices_on_device) {
        int rc = paged_check_pages(p->kv_indices, p->kv_indptr[p->B], p->num_pages, p->exec.why,
                                   p->exec.why ? p->exec.why_len : 0);
        if (rc < 0)
            return rc;
    }
    return attend(dense, p, es);
}

/* Timed whole, as a GPU's events time its kernel (the dense runs inside have no timing). */
int cpu_paged_run(struct cpu_attention *dense, const struct paged_args *p)
{
    const uint64_t t0 = backend_now_ns();
    const int rc = paged_run(dense, p);
    if (p->exec.timing && rc == 0)
        p->exec.timing->kernel_ns = backend_now_ns() - t0;
    return rc;
}
