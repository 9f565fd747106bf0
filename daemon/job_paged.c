/* Paged KV cache request validation: tensors resolved, page table copied out and every entry checked. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "job.h"

#define PAGE_SIZE_MAX 1024

enum { R_KC, R_VC, R_A, R_B, R_INDPTR, R_INDICES, R_LAST, R_QIND, R_MAX };

static bool contiguous(const struct proto_tensor *t)
{
    int64_t s = 1;
    for (int i = (int)t->rank - 1; i >= 0; i--) {
        if (t->shape[i] > 1 && t->strides[i] != s)
            return false;
        s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
    return true;
}

static int shape_err(char *err, size_t errlen, const char *name, const struct proto_tensor *t,
                     const char *want)
{
    char got[96] = "";
    size_t n = 0;
    for (uint32_t i = 0; i < t->rank && n < sizeof got; i++)
        n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    snprintf(err, errlen, "%s: shape [%s], expected %s", name, got, want);
    return GLLM_ESHAPE;
}

/* Reads one i32 index tensor of n entries into dst (the daemon's copy). */
static void snapshot(int32_t *dst, const struct resolved *r, int64_t n)
{
    memcpy(dst, (const char *)r->arena->base + r->t->offset, (size_t)n * sizeof *dst);
}

/* An indptr array: starts at 0, never decreases, ends at want_end (or at most max_end). */
static int check_indptr(const int32_t *p, int64_t B, const char *name, int64_t want_end,
                        int64_t max_end, char *err, size_t errlen)
{
    if (p[0] != 0) {
        snprintf(err, errlen, "%s[0] is %d, must be 0", name, p[0]);
        return GLLM_EPARAM;
    }
    for (int64_t b = 0; b < B; b++)
        if (p[b + 1] < p[b]) {
            snprintf(err, errlen, "%s decreases at %lld (%d after %d)", name, (long long)b + 1,
                     p[b + 1], p[b]);
            return GLLM_EPARAM;
        }
    if (want_end >= 0 && p[B] != want_end) {
        snprintf(err, errlen, "%s[%lld] is %d, must be %lld", name, (long long)B, p[B],
                 (long long)want_end);
        return GLLM_ESHAPE;
    }
    if (p[B] > max_end) {
        snprintf(err, errlen, "%s[%lld] is %d, past the %lld entries there are", name,
                 (long long)B, p[B], (long long)max_end);
        return GLLM_EBOUNDS;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* kv_append: no two new tokens may land in one cache slot, or the result would depend on
 * the order the kernel happens to write them in. */
static int check_slots_distinct(const struct paged_args *a, char *err, size_t errlen)
{
    if (a->nnew < 2)
        return 0;
    int64_t *slot = malloc((size_t)a->nnew * sizeof *slot);
    if (!slot) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int64_t n = 0;
    for (int64_t b = 0; b < a->B; b++)
        for (int32_t i = a->q_indptr[b]; i < a->q_indptr[b + 1]; i++) {
            slot[n++] = paged_row(a, b, a->kv_len[b] - (a->q_indptr[b + 1] - i));
        }
    qsort(slot, (size_t)n, sizeof *slot, cmp_i64);
    int rc = 0;
    for (int64_t i = 1; i < n && rc == 0; i++)
        if (slot[i] == slot[i - 1]) {
            snprintf(err, errlen, "two new tokens land in slot %lld of page %lld",
                     (long long)(slot[i] % a->page_size), (long long)(slot[i] / a->page_size));
            rc = GLLM_EALIAS;
        }
    free(slot);
    return rc;
}

static int check_tables(struct paged_args *a, int64_t nindices, char *err, size_t errlen)
{
    int rc = check_indptr(a->kv_indptr, a->B, "kv_indptr", -1, nindices, err, errlen);
    if (rc < 0)
        return rc;
    int64_t nq = a->op == PAGED_APPEND ? a->nnew : a->nq;
    const char *qname = a->op == PAGED_APPEND ? "append_indptr" : "qo_indptr";
    if ((rc = check_indptr(a->q_indptr, a->B, qname, nq, nq, err, errlen)) < 0)
        return rc;
    /* Page numbers the backend reads itself are its to check, when the job runs. */
    if (!a->indices_on_device && !a->indices_in_arena &&
        (rc = paged_check_pages(a->kv_indices, a->kv_indptr[a->B], a->num_pages, err, errlen)) < 0)
        return rc;
    int32_t *kv_len = (int32_t *)a->kv_len;   /* ours: filled here */
    a->max_kv_len = a->max_q_len = 0;
    for (int64_t b = 0; b < a->B; b++) {
        int64_t pages = a->kv_indptr[b + 1] - a->kv_indptr[b];
        int32_t last = kv_len[b];               /* holds last_page_len until replaced */
        if (pages == 0 ? last != 0 : last < 1 || last > a->page_size) {
            snprintf(err, errlen, "kv_last_page_len[%lld] is %d; with %lld pages it must be %s",
                     (long long)b, last, (long long)pages, pages ? "in [1, page_size]" : "0");
            return GLLM_EPARAM;
        }
        int64_t len = pages ? (pages - 1) * a->page_size + last : 0;
        if (len > INT32_MAX) {
            snprintf(err, errlen, "sequence %lld has %lld tokens (limit %d)", (long long)b,
                     (long long)len, INT32_MAX);
            return GLLM_ELIMIT;
        }
        int32_t qn = a->q_indptr[b + 1] - a->q_indptr[b];
        if (qn > len) {
            snprintf(err, errlen, "sequence %lld: %d %s but only %lld tokens in its pages",
                     (long long)b, qn, a->op == PAGED_APPEND ? "new tokens" : "queries",
                     (long long)len);
            return GLLM_ESHAPE;
        }
        kv_len[b] = (int32_t)len;
        if (kv_len[b] > a->max_kv_len)
            a->max_kv_len = kv_len[b];
        if (qn > a->max_q_len)
            a->max_q_len = qn;
    }
    return a->op == PAGED_APPEND ? check_slots_distinct(a, err, errlen) : 0;
}

int job_prepare_paged(struct job *job, const struct proto_paged *pp,
                      const struct arena_table *arenas, const struct job_caps *caps,
                      char *err, size_t errlen)
{
    const bool append = pp->op == PROTO_KV_APPEND, decode = pp->op == PROTO_DECODE;
    struct resolved r[R_MAX + 2] = {     /* then the variant's slopes and sinks */
        [R_KC] = {"k_cache", &pp->k_cache, NULL, 0, 0},
        [R_VC] = {"v_cache", &pp->v_cache, NULL, 0, 0},
        [R_A] = append ? (struct resolved){"k", &pp->k, NULL, 0, 0}
                       : (struct resolved){"q", &pp->q, NULL, 0, 0},
        [R_B] = append ? (struct resolved){"v", &pp->v, NULL, 0, 0}
                       : (struct resolved){"out", &pp->out, NULL, 0, 0},
        [R_INDPTR] = {"kv_indptr", &pp->kv_indptr, NULL, 0, 0},
        [R_INDICES] = {"kv_indices", &pp->kv_indices, NULL, 0, 0},
        [R_LAST] = {"kv_last_page_len", &pp->kv_last_page_len, NULL, 0, 0},
        [R_QIND] = append ? (struct resolved){"append_indptr", &pp->append_indptr, NULL, 0, 0}
                          : (struct resolved){"qo_indptr", &pp->qo_indptr, NULL, 0, 0},
    };
    const int n = decode ? R_QIND : R_MAX;     /* decode has no qo_indptr */
    int rc;
    for (int i = 0; i < n; i++) {
        if ((rc = job_resolve(&r[i], arenas, caps->max_elements, err, errlen)) < 0)
            return rc;
        if (!contiguous(r[i].t)) {
            snprintf(err, errlen, "%s: must be contiguous (row-major)", r[i].name);
            return GLLM_EPARAM;
        }
        const bool index = i >= R_INDPTR;
        if (index && (r[i].t->dtype != GLLM_DTYPE_I32 || r[i].t->rank != 1)) {
            snprintf(err, errlen, "%s: must be a 1-d i32 tensor", r[i].name);
            return r[i].t->dtype != GLLM_DTYPE_I32 ? GLLM_EDTYPE : GLLM_ESHAPE;
        }
        /* kv_indices may stay on the device for attention: its entries are checked where
         * they are read. The rest the loop needs on the host, to check the lengths and plan
         * the split; kv_append needs every new token's page there to check no two share a
         * slot (its table can be just the pages that take new tokens). */
        if (index && r[i].t->device && (i != R_INDICES || append)) {
            snprintf(err, errlen, "%s: must be in an arena%s", r[i].name,
                     i == R_INDICES ? " for kv_append (kv_indices may be a device tensor "
                                      "for attention)" : " (only kv_indices may be a device tensor)");
            return GLLM_EPARAM;
        }
        if (!index && r[i].t->dtype != pp->k_cache.dtype) {
            snprintf(err, errlen, "%s is %s but k_cache is %s: one dtype for all", r[i].name,
                     proto_dtype_name(r[i].t->dtype), proto_dtype_name(pp->k_cache.dtype));
            return GLLM_EDTYPE;
        }
    }
    const struct proto_tensor *kc = &pp->k_cache, *a = r[R_A].t, *b = r[R_B].t;
    if (!(caps->dtypes & (1u << kc->dtype))) {
        snprintf(err, errlen, "dtype %s not supported by this backend", proto_dtype_name(kc->dtype));
        return GLLM_EDTYPE;
    }
    /* An append copies rows in any dtype; attention takes its mode's. */
    const gllm_mode mode = decode ? GLLM_MODE_DECODE : GLLM_MODE_PREFILL;
    if (!append && (rc = job_mode_dtype_check(caps, mode, kc->dtype, err, errlen)) < 0)
        return rc;
    const struct proto_tensor *vc = &pp->v_cache;
    if (kc->rank != 4 || vc->rank != 4 || memcmp(kc->shape, vc->shape, 3 * sizeof *kc->shape))
        return shape_err(err, errlen, "k_cache and v_cache", kc,
                         "[num_pages, page_size, Hkv, D] and [num_pages, page_size, Hkv, Dv]");
    const int64_t P = kc->shape[0], ps = kc->shape[1], Hkv = kc->shape[2], D = kc->shape[3];
    const int64_t Dv = vc->shape[3];
    if (ps < 1 || ps > PAGE_SIZE_MAX) {
        snprintf(err, errlen, "page_size %lld not in [1, %d]", (long long)ps, PAGE_SIZE_MAX);
        return GLLM_EPARAM;
    }
    if (Hkv < 1 || D < 1 || D > caps->max_head_dim) {
        snprintf(err, errlen, "Hkv %lld and D %lld: need Hkv >= 1, D in [1, %d]", (long long)Hkv,
                 (long long)D, caps->max_head_dim);
        return D > caps->max_head_dim || D < 1 ? GLLM_EHEADDIM : GLLM_ESHAPE;
    }
    /* k [N, Hkv, D] and v [N, Hkv, Dv]; q [N, Hq, D] and out [N, Hq, Dv]. */
    if (a->rank != 3 || b->rank != 3 || memcmp(a->shape, b->shape, 2 * sizeof *a->shape) ||
        a->shape[2] != D || b->shape[2] != Dv || (append && a->shape[1] != Hkv))
        return shape_err(err, errlen, append ? "k and v" : "q and out", a,
                         append ? "[N, Hkv, D] and [N, Hkv, Dv], the caches' head dims"
                                : "[N, Hq, D] and [N, Hq, Dv], the caches' head dims");
    const int64_t Hq = a->shape[1];
    if (!append && (Hq < 1 || Hq % Hkv != 0)) {
        snprintf(err, errlen, "Hq (%lld) must be a positive multiple of Hkv (%lld)", (long long)Hq,
                 (long long)Hkv);
        return GLLM_ESHAPE;
    }
    const int64_t nindptr = pp->kv_indptr.shape[0], B = nindptr - 1;
    const int64_t nindices = pp->kv_indices.shape[0], N = a->shape[0];
    if (nindptr < 1 || pp->kv_last_page_len.shape[0] != B ||
        (!decode && r[R_QIND].t->shape[0] != nindptr))
        return shape_err(err, errlen, "kv_indptr", &pp->kv_indptr,
                         "[B + 1], with kv_last_page_len [B] and qo/append_indptr [B + 1]");
    if (decode && N != B) {
        snprintf(err, errlen, "q has %lld rows for %lld sequences: decode takes one query each",
                 (long long)N, (long long)B);
        return GLLM_ESHAPE;
    }
    struct job_variant jv = {0};
    if (append && Dv != D) {
        if (!(caps->modes[GLLM_MODE_DECODE].variants & GLLM_VARIANT_HEAD_DIM_V)) {
            snprintf(err, errlen, "head_dim_v: the %s backend's caches take one head dim for K "
                     "and V", caps->backend);
            return GLLM_EVARIANT;
        }
        if (Dv > D || Dv < 1) {
            snprintf(err, errlen, "v_cache's head dim %lld: 1 to k_cache's (%lld)",
                     (long long)Dv, (long long)D);
            return Dv < 1 ? GLLM_ESHAPE : GLLM_EHEADDIM;
        }
    }
    if (!append && (rc = job_variant_prepare(&jv, &pp->variant, mode, caps,
                                             arenas, Hq, D, Dv, err, errlen)) < 0)
        return rc;
    for (int i = 0; i < jv.n; i++)
        r[n + i] = jv.r[i];
    const int nall = n + jv.n;
    if (nindices > caps->max_page_entries || N > caps->max_page_entries ||
        B > caps->max_page_entries) {
        snprintf(err, errlen, "%lld page entries, %lld tokens, %lld sequences: limit %u each",
                 (long long)nindices, (long long)N, (long long)B, caps->max_page_entries);
        return GLLM_ELIMIT;
    }
    /* Writers: out (attention) or both caches (append); nothing they write may overlap
     * anything else the job touches. */
    const int writers[2] = {append ? R_KC : R_B, append ? R_VC : -1};
    for (int w = 0; w < 2; w++) {
        if (writers[w] < 0)
            continue;
        for (int i = 0; i < nall; i++)
            if (i != writers[w] && job_overlaps(&r[writers[w]], &r[i])) {
                snprintf(err, errlen, "%s overlaps %s", r[writers[w]].name, r[i].name);
                return GLLM_EALIAS;
            }
    }

    /* The daemon's copy: kv_indptr, kv_indices (unless on the device, or left in its
     * arena for a backend that checks it where it reads it), kv_len (last_page_len, then
     * lengths), q_indptr. Copying and checking B64 L4096's 16384 entries cost the loop 12-13
     * us of the step; the CUDA kernel checks them anyway. */
    const bool dev_indices = pp->kv_indices.device;
    const bool arena_indices = !dev_indices && !append && caps->reads_arena_tables;
    const int64_t ncopied = dev_indices || arena_indices ? 0 : nindices;
    size_t entries = (size_t)(nindptr + ncopied + B + nindptr);
    int32_t *tables = malloc(entries * sizeof *tables + 1);
    if (!tables) {
        snprintf(err, errlen, "out of memory for a page table of %zu entries", entries);
        return -ENOMEM;
    }
    int32_t *indptr = tables, *indices = indptr + nindptr, *kv_len = indices + ncopied,
            *q_indptr = kv_len + B;
    snapshot(indptr, &r[R_INDPTR], nindptr);
    if (dev_indices || arena_indices)
        indices = (int32_t *)(void *)((char *)r[R_INDICES].arena->base + pp->kv_indices.offset);
    else
        snapshot(indices, &r[R_INDICES], nindices);
    snapshot(kv_len, &r[R_LAST], B);
    if (decode)
        for (int64_t i = 0; i < nindptr; i++)
            q_indptr[i] = (int32_t)i;
    else
        snapshot(q_indptr, &r[R_QIND], nindptr);

    struct paged_args *pa = &job->paged;
    *pa = (struct paged_args){
        .op = append ? PAGED_APPEND : PAGED_ATTEND,
        .dtype = kc->dtype,
        .B = B, .Hq = append ? 0 : Hq, .Hkv = Hkv, .D = D, .Dv = Dv, .page_size = ps,
        .num_pages = P, .variant = jv.v,
        .k_cache = (char *)r[R_KC].arena->base + kc->offset,
        .v_cache = (char *)r[R_VC].arena->base + pp->v_cache.offset,
        .kv_indptr = indptr, .kv_indices = indices, .kv_len = kv_len, .q_indptr = q_indptr,
        .causal = !append, .indices_on_device = dev_indices, .indices_in_arena = arena_indices,
        .indices_pinned = arena_indices && r[R_INDICES].arena->pinned_by != NULL,
    };
    void *pa_ptr = (char *)r[R_A].arena->base + a->offset;
    void *pb_ptr = (char *)r[R_B].arena->base + b->offset;
    if (append) {
        pa->k_new = pa_ptr, pa->v_new = pb_ptr, pa->nnew = N;
    } else {
        pa->q = pa_ptr, pa->out = pb_ptr, pa->nq = N;
        pa->scale = job_scale(pp->has_scale, pp->scale, D);
    }
    pa->device_mask |= (jv.device & 1u ? 1u << PG_ALIBI : 0) | (jv.device & 2u ? 1u << PG_SINKS : 0);
    const int bit_of[4] = {PG_KCACHE, PG_VCACHE, append ? PG_KNEW : PG_Q, append ? PG_VNEW : PG_OUT};
    for (int i = 0; i < 4; i++)
        if (r[i].arena->device)
            pa->device_mask |= 1u << bit_of[i];
    if ((rc = check_tables(pa, nindices, err, errlen)) < 0) {
        free(tables);
        return rc;
    }
    job->kind = JOB_PAGED;
    job->tables = tables;
    job_hold(job, r, nall);
    return 0;
}
