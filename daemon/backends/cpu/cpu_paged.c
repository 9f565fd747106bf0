/* CPU paged KV cache: appends by copying rows; attention reads the pages in place. */
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
    return cpu_attention_paged(dense, p);
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
