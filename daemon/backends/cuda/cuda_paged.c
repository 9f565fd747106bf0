/* CUDA paged KV cache: plans the split-KV work on the host, uploads it with the page table, launches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_device.h"
#include "cuda_paged.h"
#include "cuda_plan.h"
#include "cuda_queue.h"
#include "cuda_sync.h"
#include "cuda_variant.h"
#include "hopper_schedule.h"

int cuda_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    (void)be;
    if (p->op == PAGED_APPEND)
        return 0;                           /* a row copy: any dtype, any head dim */
    if (p->dtype != GLLM_DTYPE_F16 && p->dtype != GLLM_DTYPE_BF16) {
        snprintf(why, len, "the CUDA backend's paged attention takes f16 and bf16, not %s",
                 p->dtype == GLLM_DTYPE_F32 ? "f32" : "this dtype");
        return GLLM_EDTYPE;
    }
    static const int dims[] = GLLM_CUDA_PAGED_HEAD_DIMS;
    bool have = false;
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        have |= p->D == dims[i];
    if (!have) {
        char list[64];
        size_t n = 0;
        for (size_t i = 0; i < sizeof dims / sizeof *dims && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", i ? " " : "", dims[i]);
        snprintf(why, len, "the CUDA backend's paged attention takes head dims %s, not %lld", list,
                 (long long)p->D);
        return GLLM_EHEADDIM;
    }
    const void *ptr[4] = {p->k_cache, p->v_cache, p->q, p->out};
    static const char *const names[4] = {"k_cache", "v_cache", "q", "out"};
    for (int i = 0; i < 4; i++)
        if ((p->device_mask & (1u << i)) && (uintptr_t)ptr[i] % 16 != 0) {
            snprintf(why, len, "%s: device tensors for paged attention start 16-byte aligned",
                     names[i]);
            return GLLM_EPARAM;
        }
    if (paged_tiling(p).gy > 65535) {
        snprintf(why, len, "Hkv %lld with this group size passes the grid limit", (long long)p->Hkv);
        return GLLM_ESHAPE;
    }
    return 0;
}

static int ensure_hstage(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_slot *sl,
                         size_t need)
{
    const struct cuda_driver *d = c->d;
    if (need <= sl->hstage_size)
        return 0;
    cuda_free_host(d, x, sl->hstage);
    sl->hstage = NULL;
    sl->hstage_size = 0;
    size_t want = need + need / 4;
    CUresult r = d->cuMemAllocHost(&sl->hstage, want);
    if (r != CUDA_SUCCESS) {
        sl->hstage = NULL;
        return cuda_fail(c, r, "pinned staging for page tables");
    }
    sl->hstage_size = want;
    return 0;
}

/* The kernel met a page number outside the pool (and read nothing through it). A table in
 * a device tensor, or the device's copy of one left in its arena, is fetched back (tbl) to
 * name the first bad entry, as the loop does for the tables it checks; one the kernel read
 * in its arena is looked at there (in_place). A table the loop checked cannot get here:
 * that is a bug, not bad input. The read-back goes on the device's own stream (the job's
 * may be a queue's, busy with later jobs). */
static int report_bad_page(const struct cuda_ctx *c, struct cuda_dev *x,
                           const struct paged_args *p, CUdeviceptr tbl, bool in_place)
{
    const struct cuda_driver *d = c->d;
    if (!p->indices_on_device && !p->indices_in_arena) {
        backend_logf(&c->log, BACKEND_LOG_ERR,
                     "paged kernel: a checked page table failed the kernel's check");
        return -EIO;
    }
    const int64_t n = p->kv_indptr[p->B];
    if (in_place) {
        const int rc = paged_check_pages(p->kv_indices, n, p->num_pages, p->exec.why,
                                         p->exec.why_len);
        return rc < 0 ? rc : GLLM_EBOUNDS;   /* rewritten since the kernel read it */
    }
    int32_t *idx = malloc((size_t)n * sizeof *idx);
    CUresult r = idx ? cuda_copy_dtoh(d, idx, tbl, (size_t)n * sizeof *idx, x->lane.stream)
                     : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        r = d->cuStreamSynchronize(x->lane.stream);
    int rc = r == CUDA_SUCCESS
                 ? paged_check_pages(idx, n, p->num_pages, p->exec.why, p->exec.why_len)
                 : cuda_fail(c, r, "reading back a bad page table");
    free(idx);
    return rc < 0 ? rc : GLLM_EBOUNDS;   /* changed since the kernel read it: still refused */
}

/* One tensor of the job: where the backend got it, where the kernel reads it. */
struct staged {
    void *host;
    size_t bytes;
    bool in, out;
    CUdeviceptr dev;
};

/* The Hopper paged prefill (paged_prefill_hopper.cu) for chunked prefill: the one switch. Off,
 * every attention job runs on the paged kernel. */
#define PP_HOPPER_ON 1

/* paged_enqueue_as's answer when the Hopper path's tensor maps were refused before anything
 * was enqueued: the job goes to the paged kernel instead. */
#define PP_REFUSED 1

/* The Hopper paged prefill's mode for job p: its variant form when p has a variant. */
static enum gllm_cuda_mode pp_mode(const struct paged_args *p)
{
    return attn_variant_none(&p->variant) ? GLLM_CUDA_MODE_PAGED_PREFILL
                                          : GLLM_CUDA_MODE_PAGED_PREFILL_VAR;
}

/* Work items of the Hopper paged prefill for this job on this device, or 0: the paged kernel. */
static int64_t pp_wanted(const struct cuda_dev *x, const struct paged_args *p)
{
    if (!PP_HOPPER_ON || p->op != PAGED_ATTEND || !pp_kernel_dim(p->D) ||
        !cuda_kernel_find(x, pp_mode(p), p->dtype, pp_kernel_dim(p->D), 0))
        return 0;
    return pp_items(p);
}

/* hopper: pp_items' count of the Hopper paged prefill's work items, or 0. */
static int paged_enqueue_as(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                            struct cuda_slot *sl, const struct paged_args *p, int64_t hopper)
{
    const struct cuda_driver *d = c->d;
    const bool append = p->op == PAGED_APPEND;
    const int64_t nrows = append ? p->nnew : p->nq;
    sl->moved = 0;
    sl->copies = sl->check_pages = sl->ran = false;
    if (p->B == 0 || nrows == 0)
        return 0;
    const size_t es = p->dtype == GLLM_DTYPE_F32 ? 4 : 2;
    const size_t pool = (size_t)(p->num_pages * p->page_size * p->Hkv * p->D) * es;
    const size_t qbytes = (size_t)(p->nq * p->Hq * p->D) * es;
    const size_t nbytes = (size_t)(p->nnew * p->Hkv * p->D) * es;
    struct staged st[PG_COUNT] = {
        [PG_KCACHE] = {p->k_cache, pool, true, append, 0},
        [PG_VCACHE] = {p->v_cache, pool, true, append, 0},
        [PG_Q] = {(void *)p->q, append ? 0 : qbytes, true, false, 0},
        [PG_OUT] = {p->out, append ? 0 : qbytes, false, true, 0},
        [PG_KNEW] = {(void *)p->k_new, append ? nbytes : 0, true, false, 0},
        [PG_VNEW] = {(void *)p->v_new, append ? nbytes : 0, true, false, 0},
        [PG_ALIBI] = {(void *)p->variant.alibi_slopes,
                      p->variant.alibi_slopes ? (size_t)p->Hq * 4 : 0, true, false, 0},
        [PG_SINKS] = {(void *)p->variant.sinks, p->variant.sinks ? (size_t)p->Hq * 4 : 0, true,
                      false, 0},
    };
    /* A variant runs on the paged kernel's variant form, its plan uploaded. */
    const bool var = !append && !attn_variant_none(&p->variant);

    /* What goes up besides the tensors: attention, the page table and the plan; append,
     * the destination slot of each new token. */
    struct paged_tiling t = {0};
    /* Page numbers in a device tensor are read there, and those left in an arena are read
     * in place when the arena is pinned and mapped (B64 L4096: 64 KiB over PCIe, fetched a
     * tile ahead; its copy to the device cost the worker 10 us), else copied to the device
     * as they are, like a tensor. The kernel checks each. Only a table the loop checked
     * goes up with the plan. */
    const int64_t nidx = p->indices_on_device || p->indices_in_arena ? 0 : p->kv_indptr[p->B];
    /* Device 0 only: arenas are registered in its context (portable and mapped, which
     * should reach every GPU), but a kernel faulting on a mapping another GPU lacks would
     * end that GPU's context for every client, and no multi-GPU host has run it yet. */
    const bool idx_in_place = p->indices_in_arena && p->indices_pinned && x->host_pointers &&
                              x->info.index == 0;
    const size_t arena_idx_bytes =
        p->indices_in_arena && !idx_in_place ? (size_t)p->kv_indptr[p->B] * 4 : 0;
    int64_t nwork = 0, ncomb = 0, nparts = 0, target = 0, chunk1 = 0;
    int32_t kv_begin1 = 0;
    size_t up_bytes, part_bytes = 0;
    bool batch = false, single = false;
    if (append) {
        up_bytes = (size_t)p->nnew * sizeof(int64_t);
    } else if (hopper) {
        /* Work items after the page table (when it goes up), as the paged kernel's. */
        nwork = hopper;
        up_bytes = align256((size_t)nidx * 4) + (size_t)nwork * sizeof(gllm_cuda_pp_work);
    } else {
        t = paged_tiling(p);
        int64_t total = 0, with_queries = 0;
        for (int64_t b = 0; b < p->B; b++) {
            const int32_t qn = p->q_indptr[b + 1] - p->q_indptr[b];
            const int32_t first = var && qn ? paged_kv_begin(p, p->kv_len[b] - qn) : 0;
            total += (int64_t)qn * (p->kv_len[b] - first);
            with_queries += qn > 0;
        }
        target = paged_chunk_target(total, &t, x->sm_count);
        /* When no sequence is split and none has more query tokens than a block takes (a
         * batch of decode steps that fills the chip), each sequence with queries is one work
         * item and the counting pass over the batch is not needed. */
        if (p->max_kv_len <= target && p->max_q_len <= t.tpc) {
            nwork = with_queries;
        } else if (p->B == 1 && p->max_q_len == 1) {
            /* One one-token sequence longer than a block's share: its key ranges are the
             * whole plan (the counting pass would find the same), from the first key its
             * query sees. */
            kv_begin1 = var ? paged_kv_begin(p, p->kv_len[0] - 1) : 0;
            paged_split_keys(p->kv_len[0] - kv_begin1, target, &nwork, &chunk1);
            ncomb = nwork > 1, nparts = nwork > 1 ? nwork : 0;
        } else {
            paged_plan(p, &t, target, NULL, NULL, &nwork, &ncomb, &nparts);
        }
        if (nwork > INT32_MAX || ncomb > INT32_MAX / t.gy)
            return -E2BIG;
        /* One query token per sequence, none split, the page numbers on the device: the
         * plan goes in the launch's parameters and nothing is uploaded (the upload's call
         * and copy were 3.5-4 us of a B64 step's 20). */
        batch = !var && nidx == 0 && ncomb == 0 && nwork == p->B && p->max_q_len == 1 &&
                p->B <= GLLM_CUDA_PAGED_BATCH;
        /* The same for one one-token sequence that is split (B1 decode): its plan is the
         * range length, in the parameters too. */
        single = nidx == 0 && p->B == 1 && p->max_q_len == 1 && ncomb == 1;
        up_bytes = batch || single ? 0
                         : align256((size_t)nidx * 4) +
                               align256((size_t)nwork * sizeof(gllm_cuda_paged_work)) +
                               (size_t)ncomb * sizeof(gllm_cuda_paged_combine);
        part_bytes = (size_t)nparts * (size_t)t.gy * GLLM_CUDA_PAGED_ROWS * (size_t)(p->D + 1) * 4;
    }
    size_t total = 0;
    for (int i = 0; i < PG_COUNT; i++)
        if (st[i].bytes && !(p->device_mask & (1u << i)))
            total += align256(st[i].bytes);
    const size_t idx_at = total;
    total += align256(arena_idx_bytes);
    const size_t up_at = total;
    total += align256(up_bytes);
    const size_t part_at = total;
    total += part_bytes;
    int rc = cuda_ensure_scratch(c, x, ln, total ? total : 256);
    if (rc == 0)
        rc = ensure_hstage(c, x, sl, up_bytes ? up_bytes : 16);
    if (rc == 0)
        rc = cuda_ensure_zeroed(c, x, ln, &ln->counters, &ln->counters_size,
                                (size_t)ncomb * (size_t)t.gy * 4, "split-KV counters");
    /* Sums added in L2 in the order blocks finish: not when results must repeat bit for bit. */
    const bool sums = single && !c->deterministic;
    if (rc == 0 && sums)
        rc = cuda_ensure_zeroed(c, x, ln, &ln->sums, &ln->sums_size,
                                (size_t)t.gy * GLLM_CUDA_PAGED_ROWS *
                                    (size_t)GLLM_CUDA_PAGED_SUM_STRIDE(p->D) * 4,
                                "split-KV sums");
    if (rc < 0)
        return rc;

    /* Fill the pinned upload: append, slots; attention, indices, work, combine (or, for a
     * batch or a single split sequence, the launch's parameters). */
    char *h = sl->hstage;
    gllm_cuda_paged_batch_params bp;
    gllm_cuda_paged_single_params sp;
    gllm_cuda_paged_work *work = NULL;
    gllm_cuda_paged_combine *comb = NULL;
    const size_t tab_bytes = align256((size_t)nidx * 4);
    if (append) {
        int64_t *slot = (int64_t *)(void *)h;
        for (int64_t b = 0, n = 0; b < p->B; b++)
            for (int32_t i = p->q_indptr[b]; i < p->q_indptr[b + 1]; i++, n++)
                slot[n] = paged_row(p, b, p->kv_len[b] - (p->q_indptr[b + 1] - i));
    } else if (batch) {
        for (int64_t b = 0; b < p->B; b++)
            bp.page0[b] = p->kv_indptr[b], bp.len[b] = p->kv_len[b];
    } else if (hopper) {
        memcpy(h, p->kv_indices, (size_t)nidx * 4);
        pp_plan(p, (gllm_cuda_pp_work *)(void *)(h + tab_bytes));
    } else if (single) {
        sp.page0 = p->kv_indptr[0], sp.len = p->kv_len[0], sp.chunk = (int32_t)chunk1;
        sp.comb = (gllm_cuda_paged_combine){0, 1, 0, (int32_t)nwork};
    } else {
        memcpy(h, p->kv_indices, (size_t)nidx * 4);   /* work items carry each kv_indptr */
        work = (gllm_cuda_paged_work *)(void *)(h + tab_bytes);
        comb = (gllm_cuda_paged_combine *)(void *)(h + tab_bytes +
                                                  align256((size_t)nwork * sizeof *work));
        paged_plan(p, &t, target, work, comb, &nwork, &ncomb, &nparts);
    }

    CUresult r;
    uint64_t moved = 0;
    size_t at = 0;
    for (int i = 0; i < PG_COUNT; i++) {
        if (p->device_mask & (1u << i)) {
            st[i].dev = (CUdeviceptr)(uintptr_t)st[i].host;
        } else if (st[i].bytes) {
            st[i].dev = ln->scratch + at;
            at += align256(st[i].bytes);
        }
    }
    /* The Hopper path's tensor maps, from where the kernel will read the tensors; refused,
     * nothing is enqueued yet and the paged kernel takes the job. */
    gllm_cuda_pp_params pp;
    if (hopper) {
        const int tr = cuda_tma_pp_params(
            d, &pp, p->dtype == GLLM_DTYPE_BF16, (const void *)(uintptr_t)st[PG_Q].dev,
            (const void *)(uintptr_t)st[PG_OUT].dev, p->nq, p->Hq,
            (const void *)(uintptr_t)st[PG_KCACHE].dev, (const void *)(uintptr_t)st[PG_VCACHE].dev,
            p->num_pages, p->page_size, p->Hkv, p->D, pp_kernel_dim(p->D), &x->pp_tma);
        if (tr != 0) {
            if (tr == -EINVAL && !x->tma_refused) {
                x->tma_refused = true;
                backend_logf(&c->log, BACKEND_LOG_WARNING,
                             "cuda: GPU %d: the driver refused a tensor map for a paged prefill "
                             "(D %lld, page size %lld); such jobs run on the paged kernel",
                             x->ordinal, (long long)p->D, (long long)p->page_size);
            }
            return PP_REFUSED;
        }
    }
    const bool staged = up_at > 0;        /* tensors in arenas: copies to time */
    if (staged)
        d->cuEventRecord(sl->ev[EV_COPY_IN], ln->stream);
    for (int i = 0; i < PG_COUNT; i++) {
        if ((p->device_mask & (1u << i)) || !st[i].bytes)
            continue;
        if (st[i].in) {
            if ((r = cuda_copy_htod(d, st[i].dev, st[i].host, st[i].bytes, ln->stream)))
                return cuda_fail(c, r, "copy to device");
            moved += st[i].bytes;
        }
    }
    const CUdeviceptr up = ln->scratch + up_at;
    if (up_bytes && (r = cuda_copy_htod(d, up, h, up_bytes, ln->stream)))
        return cuda_fail(c, r, "page table upload");
    if (arena_idx_bytes) {
        if ((r = cuda_copy_htod(d, ln->scratch + idx_at, p->kv_indices, arena_idx_bytes, ln->stream)))
            return cuda_fail(c, r, "page table copy");
        moved += arena_idx_bytes;
    }
    const CUdeviceptr tbl = p->indices_on_device || idx_in_place ? (CUdeviceptr)(uintptr_t)p->kv_indices
                            : p->indices_in_arena ? ln->scratch + idx_at : up;

    if (append) {
        const size_t row = (size_t)(p->Hkv * p->D) * es;
        gllm_cuda_append_params a = {
            .k_new = (const void *)(uintptr_t)st[PG_KNEW].dev,
            .v_new = (const void *)(uintptr_t)st[PG_VNEW].dev,
            .k_cache = (void *)(uintptr_t)st[PG_KCACHE].dev,
            .v_cache = (void *)(uintptr_t)st[PG_VCACHE].dev,
            .slot = (const int64_t *)(uintptr_t)up, .row_bytes = (int64_t)row,
        };
        a.vec16 = row % 16 == 0;
        for (int i = 0; i < PG_COUNT; i++)
            a.vec16 &= st[i].dev % 16 == 0;
        d->cuEventRecord(sl->ev[EV_KERNEL], ln->stream);
        r = cuda_launch(d, x, ln, cuda_kernel_find(x, GLLM_CUDA_MODE_APPEND, p->dtype, 0, 0),
                        (unsigned)p->nnew, 1, 128, 0, &a);
    } else if (hopper) {
        /* Persistent: a block per SM over the units (head h of item i is unit i * Hq + h,
         * heads fastest, so that the units in flight share K and V in L2). */
        pp.out = (void *)(uintptr_t)st[PG_OUT].dev;
        pp.kv_indices = (const int32_t *)(uintptr_t)tbl;
        pp.work = (const gllm_cuda_pp_work *)(uintptr_t)(up + tab_bytes);
        pp.bad_page = (int32_t *)sl->bad_page;
        pp.num_pages = (uint32_t)p->num_pages;
        pp.Hq = (int32_t)p->Hq, pp.group = (int32_t)(p->Hq / p->Hkv);
        pp.page_size = (int32_t)p->page_size, pp.scale = p->scale;
        pp.units = (int32_t)(nwork * p->Hq);
        pp.head_dim = (int32_t)p->D;
        const int kd = pp_kernel_dim(p->D);       /* 80 and 96 padded onto 128 by the maps */
        gllm_cuda_pp_var_params pv = {.pp = pp};
        void *param = &pp;
        if (var) {
            pv.v = cuda_variant_of(&p->variant, st[PG_ALIBI].dev, st[PG_SINKS].dev);
            param = &pv;
        }
        *sl->bad_page = 0;      /* the launch orders this store before the kernel's reads */
        d->cuEventRecord(sl->ev[EV_KERNEL], ln->stream);
        r = cuda_launch(d, x, ln, cuda_kernel_find(x, pp_mode(p), p->dtype, kd, 0),
                        (unsigned)gllm_cuda_persistent_grid(pp.units, x->sm_count), 1,
                        (unsigned)GLLM_CUDA_HP_THREADS(kd), (unsigned)GLLM_CUDA_PP_SMEM(kd),
                        param);
    } else {
        const CUdeviceptr dwork = up + tab_bytes;
        gllm_cuda_paged_params k = {
            .q = (const void *)(uintptr_t)st[PG_Q].dev,
            .out = (void *)(uintptr_t)st[PG_OUT].dev,
            .k_cache = (const void *)(uintptr_t)st[PG_KCACHE].dev,
            .v_cache = (const void *)(uintptr_t)st[PG_VCACHE].dev,
            .kv_indices = (const int32_t *)(uintptr_t)tbl,
            .work = (const gllm_cuda_paged_work *)(uintptr_t)dwork,
            .combine = (const gllm_cuda_paged_combine *)(uintptr_t)(
                dwork + align256((size_t)nwork * sizeof(gllm_cuda_paged_work))),
            .part_o = (float *)(uintptr_t)(ln->scratch + part_at),
            .part_lse = (float *)(uintptr_t)(ln->scratch + part_at +
                                             (size_t)nparts * (size_t)t.gy * GLLM_CUDA_PAGED_ROWS *
                                                 (size_t)p->D * 4),
            .counters = (int32_t *)(uintptr_t)ln->counters,
            .Hq = (int32_t)p->Hq, .Hkv = (int32_t)p->Hkv, .page_size = (int32_t)p->page_size,
            .page_shift = -1, .group = (int32_t)(p->Hq / p->Hkv), .heads_per_cta = t.hpc,
            .head_chunks = t.head_chunks, .scale = p->scale,
            .num_pages = p->num_pages < INT32_MAX ? (uint32_t)p->num_pages : (uint32_t)INT32_MAX + 1,
            .bad_page = (int32_t *)sl->bad_page,
        };
        *sl->bad_page = 0;      /* the launch orders this store before the kernel's reads */
        for (int s = 0; s < 31; s++)
            if ((int64_t)1 << s == p->page_size)
                k.page_shift = s;
        void *param = &k;
        enum gllm_cuda_mode mode = GLLM_CUDA_MODE_PAGED;
        gllm_cuda_paged_var_params vp;
        gllm_cuda_paged_single_var_params svp;
        if (var) {
            const struct attn_variant *v = &p->variant;
            vp.p = k, param = &vp, mode = GLLM_CUDA_MODE_PAGED_VAR;
            vp.v = cuda_variant_of(v, st[PG_ALIBI].dev, st[PG_SINKS].dev);
            if (single) {       /* B1 decode: the plan in the parameters, as without one */
                sp.p = k, sp.sums = sums ? (float *)(uintptr_t)ln->sums : NULL;
                svp.s = sp, svp.v = vp.v, svp.kv_begin = kv_begin1;
                param = &svp, mode = GLLM_CUDA_MODE_PAGED_SINGLE_VAR;
            }
        } else if (batch) {
            bp.p = k, param = &bp, mode = GLLM_CUDA_MODE_PAGED_BATCH;
        } else if (single) {
            sp.p = k, sp.sums = sums ? (float *)(uintptr_t)ln->sums : NULL, param = &sp;
            mode = GLLM_CUDA_MODE_PAGED_SINGLE;
        }
        CUfunction f = cuda_kernel_find(x, mode, p->dtype, p->D, 0);
        if (!f) {           /* left out at load: more shared memory than this GPU gives */
            snprintf(p->exec.why, p->exec.why_len,
                     "GPU %d has too little shared memory for the paged kernels at head dim %lld",
                     x->ordinal, (long long)p->D);
            return GLLM_EHEADDIM;
        }
        d->cuEventRecord(sl->ev[EV_KERNEL], ln->stream);     /* the events hold only the launch */
        r = cuda_launch(d, x, ln, f, (unsigned)nwork, (unsigned)t.gy, GLLM_CUDA_PAGED_THREADS,
                        (unsigned)GLLM_CUDA_PAGED_SMEM(p->D), param);
    }
    if (r)
        return cuda_fail(c, r, "paged kernel launch");
    d->cuEventRecord(sl->ev[EV_KERNEL_END], ln->stream);
    for (int i = 0; i < PG_COUNT; i++) {
        if (!st[i].out || !st[i].bytes || (p->device_mask & (1u << i)))
            continue;
        if ((r = cuda_copy_dtoh(d, st[i].host, st[i].dev, st[i].bytes, ln->stream)))
            return cuda_fail(c, r, "copy from device");
        moved += st[i].bytes;
    }
    if (staged)
        d->cuEventRecord(sl->ev[EV_COPY_OUT], ln->stream);
    sl->moved = moved + up_bytes;
    sl->copies = staged;
    sl->check_pages = !append;
    sl->table = tbl;
    sl->table_in_place = idx_in_place;
    sl->ran = true;
    return 0;
}

static int paged_complete(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_slot *sl,
                          const void *args)
{
    const struct paged_args *p = args;
    if (!sl->ran)
        return 0;
    if (sl->check_pages && *sl->bad_page)
        return report_bad_page(c, x, p, sl->table, sl->table_in_place);
    cuda_read_timing(c->d, sl, p->exec.timing);
    return 0;
}

static int paged_enqueue(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                         struct cuda_slot *sl, const void *args)
{
    const struct paged_args *p = args;
    const int64_t hopper = pp_wanted(x, p);
    if (hopper) {
        const int rc = paged_enqueue_as(c, x, ln, sl, p, hopper);
        if (rc != PP_REFUSED)
            return rc;
    }
    return paged_enqueue_as(c, x, ln, sl, p, 0);
}

static const struct cuda_op_type paged_op = {paged_enqueue, paged_complete};


int cuda_paged(struct backend *be, int dev, const struct paged_args *p)
{
    const char *what = p->op == PAGED_APPEND ? "kv_append kernel" : "paged attention kernel";
    if (p->exec.queue)
        return cuda_queue_submit(be, dev, &p->exec, &paged_op, p, what);
    return cuda_run_now(be, dev, p->exec.sync, &paged_op, p, what);
}
