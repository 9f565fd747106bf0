/* CPU paged KV cache: appends by copying rows, attention by gathering pages for the dense kernel. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_paged.h"

static void kv_append(const struct paged_args *p, size_t es)
{
    const size_t row = (size_t)(p->Hkv * p->D) * es;
    for (int64_t b = 0; b < p->B; b++) {
        const int32_t n = p->q_indptr[b + 1] - p->q_indptr[b];
        for (int32_t i = 0; i < n; i++) {
            const int64_t pos = p->kv_len[b] - n + i, src = p->q_indptr[b] + i;
            const size_t dst = (size_t)paged_row(p, b, pos) * row;
            memcpy((char *)p->k_cache + dst, (const char *)p->k_new + (size_t)src * row, row);
            memcpy((char *)p->v_cache + dst, (const char *)p->v_new + (size_t)src * row, row);
        }
    }
}

/* Copies sequence b's tokens, page by page, into dense [len, Hkv, D] buffers. */
static void gather(const struct paged_args *p, int64_t b, size_t es, char *k, char *v)
{
    const size_t row = (size_t)(p->Hkv * p->D) * es;
    int64_t left = p->kv_len[b];
    for (int32_t i = p->kv_indptr[b]; left > 0; i++) {
        const int64_t n = left < p->page_size ? left : p->page_size;
        const size_t src = (size_t)(p->kv_indices[i] * p->page_size) * row;
        memcpy(k, (const char *)p->k_cache + src, (size_t)n * row);
        memcpy(v, (const char *)p->v_cache + src, (size_t)n * row);
        k += (size_t)n * row;
        v += (size_t)n * row;
        left -= n;
    }
}

/* Each sequence's queries are its last tokens: the dense kernel's bottom-right causal mask
 * with Sq = queries and Skv = cached tokens is exactly that. */
static int attend(struct cpu_attention *dense, const struct paged_args *p, size_t es)
{
    const size_t row = (size_t)(p->Hkv * p->D) * es;
    char *k = malloc((size_t)p->max_kv_len * row + 1), *v = malloc((size_t)p->max_kv_len * row + 1);
    int rc = k && v ? 0 : -ENOMEM;
    const int64_t qrow = p->Hq * p->D;    /* elements per query token */
    for (int64_t b = 0; b < p->B && rc == 0; b++) {
        const int64_t q0 = p->q_indptr[b], nq = p->q_indptr[b + 1] - q0;
        if (nq == 0)
            continue;
        gather(p, b, es, k, v);
        const int64_t Skv = p->kv_len[b];
        struct attn_args a = {
            .dtype = p->dtype, .B = 1, .Hq = p->Hq, .Hkv = p->Hkv, .Sq = nq, .Skv = Skv, .D = p->D,
            .q = (const char *)p->q + (size_t)(q0 * qrow) * es, .k = k, .v = v,
            .out = (char *)p->out + (size_t)(q0 * qrow) * es,
            .q_st = {nq * qrow, p->D, qrow, 1},
            .k_st = {Skv * p->Hkv * p->D, p->D, p->Hkv * p->D, 1},
            .v_st = {Skv * p->Hkv * p->D, p->D, p->Hkv * p->D, 1},
            .o_st = {nq * qrow, p->D, qrow, 1},
            .causal = true, .scale = p->scale,
        };
        rc = cpu_attention_run(dense, &a);
    }
    free(k);
    free(v);
    return rc;
}

int cpu_paged_run(struct cpu_attention *dense, const struct paged_args *p)
{
    const size_t es = p->dtype == GLLM_DTYPE_F32 ? 4 : 2;
    if (p->op == PAGED_APPEND) {
        kv_append(p, es);
        return 0;
    }
    /* A "device" tensor is the daemon's host memory here; its page numbers are read now,
     * after the jobs before this one wrote them, and checked before any is followed. */
    if (p->indices_on_device) {
        int rc = paged_check_pages(p->kv_indices, p->kv_indptr[p->B], p->num_pages, p->why,
                                   p->why ? p->why_len : 0);
        if (rc < 0)
            return rc;
    }
    return attend(dense, p, es);
}
