/* The CUDA backend's vtables: probe, open/close over its GPUs (cuda_device.c), device memory,
 * copies and dense attention; paged jobs are cuda_paged.c's. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_device.h"
#include "cuda_pad.h"
#include "cuda_paged.h"
#include "cuda_queue.h"
#include "cuda_share.h"
#include "cuda_sync.h"
#include "cuda_tma.h"
#include "cuda_variant.h"
#include "hopper_schedule.h"
#include "strided.h"

extern const struct backend_iface cuda_backend_iface;

/* What the kernels' variant forms compute: the paged ones (paged_attention.cu) every field
 * but Dv below D; the dense ones (attention_fwd.cu) that too, where the generic form takes v's
 * head dim apart from q's. */
#define PAGED_VARIANTS                                                                      \
    (GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP | GLLM_VARIANT_ALIBI |  \
     GLLM_VARIANT_SINKS)
#define DENSE_VARIANTS (PAGED_VARIANTS | GLLM_VARIANT_HEAD_DIM_V)
#define PAGED_NHEAD_DIMS ((int)(sizeof((int[])GLLM_CUDA_PAGED_HEAD_DIMS) / sizeof(int)))
/* A dense job's tensors: q, k, v, out, lse, alibi slopes, sinks (attn_args.device_mask). */
#define DENSE_TENSORS 7

static const struct backend_device_iface cuda_device_iface;

static int cuda_probe(char *why, size_t len)
{
    const struct cuda_driver *d = cuda_driver_load(why, len);
    if (!d)
        return 0;
    char buf[128];
    CUresult r = d->cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, len, "cuInit: %s", cuda_error_text(d, r, buf, sizeof buf));
        return 0;
    }
    int n = 0;
    if ((r = d->cuDeviceGetCount(&n)) != CUDA_SUCCESS || n == 0) {
        snprintf(why, len, "no CUDA device (%s)",
                 r ? cuda_error_text(d, r, buf, sizeof buf) : "count is 0");
        return 0;
    }
    return 100;
}

static void cuda_close(struct backend *be)
{
    if (!be)
        return;
    struct cuda_ctx *c = be->ctx;
    if (c) {
        for (int i = 0; i < c->ndev; i++) {
            cuda_device_close(c->d, &c->dev[i]);
        }
        cuda_pins_clear(&c->pins);
        pthread_mutex_destroy(&c->pins.lock);
        free(c);
    }
    free(be);
}

/* Dense attention takes every head dim up to the generic kernel's, and every variant (the
 * tensor-core form at D 64 and 128, the generic one elsewhere and for Dv below D); the paged
 * kernels exist for f16 and bf16 at GLLM_CUDA_PAGED_HEAD_DIMS (cuda_paged_check says so too),
 * and their variant form (paged_attention.cu) computes every field but Dv below D. */
static void cuda_declare(struct backend_caps *out)
{
    const uint32_t half = 1u << GLLM_DTYPE_F16 | 1u << GLLM_DTYPE_BF16;
    *out = (struct backend_caps){
        .dtypes = 1u << GLLM_DTYPE_F32 | half,
        .max_head_dim = GLLM_CUDA_GENERIC_MAX_D,
        .modes = {
            [GLLM_MODE_DENSE] = {.variants = DENSE_VARIANTS,
                                 .max_head_dim = GLLM_CUDA_GENERIC_MAX_D},
            [GLLM_MODE_DECODE] = {.dtypes = half, .variants = PAGED_VARIANTS,
                                  .max_head_dim = 256, .nhead_dims = PAGED_NHEAD_DIMS,
                                  .head_dims = GLLM_CUDA_PAGED_HEAD_DIMS},
            [GLLM_MODE_PREFILL] = {.dtypes = half, .variants = PAGED_VARIANTS,
                                   .max_head_dim = 256, .nhead_dims = PAGED_NHEAD_DIMS,
                                   .head_dims = GLLM_CUDA_PAGED_HEAD_DIMS},
        },
    };
}

static int cuda_open(const struct backend_config *cfg, struct backend **out)
{
    char why[256];
    const struct cuda_driver *d = cuda_driver_load(why, sizeof why);
    if (!d)
        return -ENODEV;
    int n = 0;
    if (d->cuInit(0) || d->cuDeviceGetCount(&n) || n == 0)
        return -ENODEV;
    struct backend *be = calloc(1, sizeof *be);
    struct cuda_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return -ENOMEM;
    }
    be->iface = &cuda_backend_iface;
    be->device = &cuda_device_iface;
    be->ctx = c;
    c->d = d;
    pthread_mutex_init(&c->pins.lock, NULL);
    c->deterministic = cfg->deterministic;
    c->log = cfg->log;
    const int first = cfg->one_device ? cfg->device : 0;
    const int end = cfg->one_device ? first + 1 : n;
    for (int i = first < 0 ? n : first; i < end && i < n && c->ndev < GLLM_MAX_DEVICES; i++) {
        struct cuda_dev *x = &c->dev[c->ndev];
        if (cuda_device_open(d, i, x, why, sizeof why) < 0) {
            backend_logf(&cfg->log, BACKEND_LOG_WARNING, "cuda: passing over %s", why);
            cuda_device_close(d, x);
            memset(x, 0, sizeof *x);
            continue;
        }
        x->info.index = c->ndev++;
    }
    if (c->ndev == 0) {
        cuda_close(be);
        return GLLM_EBACKEND;
    }
    be->ndevices = c->ndev;
    be->present = n;
    cuda_declare(&be->caps);
    be->caps.features = BACKEND_FEAT_ARENA_TABLES |
                        (cuda_sync_supported(d) ? BACKEND_FEAT_SYNC | BACKEND_FEAT_QUEUES : 0);
    be->caps.share_granularity = cuda_share_granularity(c);
    be->caps.share_kind = be->caps.share_granularity ? BACKEND_SHARE_CUDA_VMM : BACKEND_SHARE_NONE;
    *out = be;
    return 0;
}

static int cuda_device_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct cuda_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    *out = c->dev[dev].info;
    return 0;
}

static int cuda_memory_info(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    struct cuda_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    size_t free_b = 0, total_b = 0;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    if (c->d->cuMemGetInfo(&free_b, &total_b) != CUDA_SUCCESS)
        return GLLM_EBACKEND;
    *used = total_b - free_b;
    *total = total_b;
    return 0;
}

/* Pinned host memory lets the copy engines read arenas at full DMA speed. */
#define HOST_REGISTER_FLAGS (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)

static int cuda_host_register(struct backend *be, void *p, size_t len)
{
    struct cuda_ctx *c = be->ctx;
    /* Registrations belong to device 0's context. A piece at a time, each piece's pages made
     * first, outside the driver (cuda_pin.c): cuMemHostRegister holds up every other CUDA
     * call of this process while it runs, and making an untouched arena's pages is nearly
     * all of its time (H200: 4 GiB in 2.0 s; made first, 1.7 s outside and 0.14 s in the
     * driver). Mapped too: a paged kernel reads an attention's page table in place
     * (cuda_paged.c). */
    c->d->cuCtxSetCurrent(c->dev[0].ctx);
    CUresult r = cuda_pin(c->d, &c->pins, p, len, HOST_REGISTER_FLAGS);
    if (r != CUDA_SUCCESS) {
        char buf[160];
        backend_logf(&c->log, BACKEND_LOG_WARNING,
                     "cuda: pinning a %zu-byte arena failed (%s); copies will be slower", len,
                     cuda_error_text(c->d, r, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    return 0;
}

static void cuda_host_unregister(struct backend *be, void *p)
{
    struct cuda_ctx *c = be->ctx;
    c->d->cuCtxSetCurrent(c->dev[0].ctx);
    cuda_unpin(c->d, &c->pins, p);
}

/* Whether a's tensors are laid out as the tensor-core and Hopper kernels copy them: f16 or
 * bf16, 16-byte rows, and V's head dim dv. */
static bool tc_layout_dv(const struct attn_args *a, int64_t dv)
{
    if (a->dtype == GLLM_DTYPE_F32 || attn_dv(a) != dv)
        return false;
    const int64_t *st[4] = {a->q_st, a->k_st, a->v_st, a->o_st};
    const void *ptr[4] = {a->q, a->k, a->v, a->out};
    for (int i = 0; i < 4; i++) {
        if (st[i][3] != 1)
            return false;
        /* Staged tensors start 256-byte aligned; device tensors wherever their offset is. */
        if ((a->device_mask & (1u << i)) && (uintptr_t)ptr[i] % 16 != 0)
            return false;
        for (int j = 0; j < 3; j++)
            if (st[i][j] % 8 != 0)       /* 16-byte rows for cp.async */
                return false;
    }
    return true;
}

static bool tc_layout(const struct attn_args *a)
{
    return tc_layout_dv(a, a->D);
}

static bool tc_eligible(const struct attn_args *a)
{
    return (a->D == 64 || a->D == 128) && tc_layout(a);
}

static int cuda_dev_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct cuda_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    CUdeviceptr p = 0;
    CUresult r = c->d->cuMemAlloc(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return GLLM_EDEVMEM;
    if (r != CUDA_SUCCESS)
        return cuda_fail(c, r, "device tensor allocation");
    *out = (void *)(uintptr_t)p;
    return 0;
}

static void cuda_dev_free(struct backend *be, int dev, void *p)
{
    struct cuda_ctx *c = be->ctx;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    c->d->cuMemFree((CUdeviceptr)(uintptr_t)p);
}

static int copy_enqueue(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                        struct cuda_slot *sl, const void *args)
{
    const struct copy_args *cp = args;
    const struct cuda_driver *d = c->d;
    (void)x;
    sl->moved = 0;
    if (!cp->bytes)              /* its wait and signal alone */
        return 0;
    CUresult r;
    d->cuEventRecord(sl->ev[EV_COPY_IN], ln->stream);
    if (cp->to_device)
        r = cuda_copy_htod(d, (CUdeviceptr)(uintptr_t)cp->dst, cp->src, cp->bytes, ln->stream);
    else
        r = cuda_copy_dtoh(d, cp->dst, (CUdeviceptr)(uintptr_t)cp->src, cp->bytes, ln->stream);
    if (r)
        return cuda_fail(c, r, "device tensor copy");
    d->cuEventRecord(sl->ev[EV_KERNEL], ln->stream);
    sl->moved = cp->bytes;
    return 0;
}

static int copy_complete(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_slot *sl,
                         const void *args)
{
    const struct copy_args *cp = args;
    (void)x;
    if (cp->exec.timing && sl->moved) {
        float ms = 0;
        c->d->cuEventElapsedTime(&ms, sl->ev[EV_COPY_IN], sl->ev[EV_KERNEL]);
        cp->exec.timing->copy_ns = (uint64_t)((double)ms * 1e6);
        cp->exec.timing->copy_bytes = cp->bytes;
    }
    return 0;
}

static const struct cuda_op_type copy_op = {copy_enqueue, copy_complete};

/* Around every operation: the job's watchdog deadline for cuda_sync_finish, and a
 * context-fatal error's words into the job's why. */
static void op_begin(struct backend *be, int dev, uint64_t deadline_ns)
{
    struct cuda_ctx *c = be->ctx;
    cuda_fault_clear();
    if (dev >= 0 && dev < c->ndev)
        c->dev[dev].deadline_ns = deadline_ns;
}

static int op_end(struct backend *be, int dev, int r, char *why, size_t len)
{
    struct cuda_ctx *c = be->ctx;
    if (dev >= 0 && dev < c->ndev)
        c->dev[dev].deadline_ns = 0;
    if (r == GLLM_EDEVLOST && why && len && !why[0])
        snprintf(why, len, "%s", cuda_fault_why());
    return r;
}

static int cuda_copy(struct backend *be, int dev, const struct copy_args *cp)
{
    op_begin(be, dev, cp->exec.deadline_ns);
    const char *what = "device tensor copy";
    int r = cp->exec.queue ? cuda_queue_submit(be, dev, &cp->exec, &copy_op, cp, what)
                           : cuda_run_now(be, dev, cp->exec.sync, &copy_op, cp, what);
    return op_end(be, dev, r, cp->exec.why, cp->exec.why_len);
}

/* A query row's key tiles: the dense Hopper prefill's split_keys (hopper_schedule.h). */
static int32_t split_keys(const struct attn_args *a)
{
    return (int32_t)((a->Skv + GLLM_CUDA_HP_KEYS - 1) / GLLM_CUDA_HP_KEYS);
}

/* The dense Hopper prefill's split by keys (D = 128 not causal, where its schedule splits the
 * last rounds' tiles; hopper_schedule.h): hp's split units and the lane's workspace (cleared
 * on the stream when first made or grown). Without them, or out of memory for the workspace,
 * every tile whole. */
static int prefill_split(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                         const struct attn_args *a, unsigned gx, gllm_cuda_hp_params *hp)
{
    memset(&hp->split, 0, sizeof hp->split);
    hp->split_counts = NULL, hp->split_parts = NULL;
    if (a->D != 128 || a->causal)
        return 0;
    const int32_t keys = split_keys(a);
    const gllm_cuda_hp_sched sc = gllm_cuda_hp_schedule(
        (int32_t)a->Sq, GLLM_CUDA_HP_ROWS(128), (int32_t)(a->B * a->Hq), 0, (int32_t)gx, keys);
    if (sc.whole_units == sc.units)
        return 0;
    const int zr = cuda_ensure_zeroed(c, x, ln, &ln->split, &ln->split_size,
                                      (size_t)GLLM_CUDA_HP_SPLIT_BYTES(128, gx),
                                      "the prefill's split workspace");
    if (zr < 0)
        return zr == GLLM_EDEVMEM ? 0 : zr;
    hp->split = gllm_cuda_hp_split_of(&sc, keys);
    hp->split_counts = (uint32_t *)(uintptr_t)ln->split;
    hp->split_parts = (float *)(uintptr_t)(ln->split + GLLM_CUDA_HP_SPLIT_PARTS_AT(128, gx));
    return 0;
}

static int attention_enqueue(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                             struct cuda_slot *sl, const void *args)
{
    const struct attn_args *a = args;
    const struct cuda_driver *d = c->d;
    sl->moved = 0;
    sl->copies = sl->ran = false;
    if (a->D < 1 || a->D > GLLM_CUDA_GENERIC_MAX_D || a->Hkv < 1 || a->Hq % a->Hkv != 0)
        return -EINVAL;
    if (a->B == 0 || a->Hq == 0 || a->Sq == 0)
        return 0;
    if (a->B * a->Hq > 65535)
        return -E2BIG;                   /* grid.y limit */

    size_t es = a->dtype == GLLM_DTYPE_F32 ? 4 : 2;
    const struct attn_variant *var = &a->variant;
    /* q, k, v, out, lse, then the variant's slopes and sinks: device_mask's bits. */
    const void *host[DENSE_TENSORS] = {a->q, a->k, a->v, a->out, a->lse, var->alibi_slopes,
                                       var->sinks};
    const int64_t Dv = attn_dv(a);
    const int64_t qs[4] = {a->B, a->Hq, a->Sq, a->D}, ks[4] = {a->B, a->Hkv, a->Skv, a->D},
                  vs[4] = {a->B, a->Hkv, a->Skv, Dv}, os[4] = {a->B, a->Hq, a->Sq, Dv},
                  ls[3] = {a->B, a->Hq, a->Sq};
    const size_t head_floats = (size_t)a->Hq * 4;
    size_t bytes[DENSE_TENSORS] = {
        strided_span_bytes(4, qs, a->q_st, es), strided_span_bytes(4, ks, a->k_st, es),
        strided_span_bytes(4, vs, a->v_st, es), strided_span_bytes(4, os, a->o_st, es),
        a->lse ? strided_span_bytes(3, ls, a->lse_st, 4) : 0,
        var->alibi_slopes ? head_floats : 0, var->sinks ? head_floats : 0,
    };
    /* An output view with gaps is copied in first, so the gaps go back unchanged. */
    bool copy_in[DENSE_TENSORS] = {true, true, true, !strided_contiguous(4, os, a->o_st),
                                   a->lse && !strided_contiguous(3, ls, a->lse_st), true, true};
    /* Device tensors are used where they are; arena tensors are staged in scratch. */
    size_t off[DENSE_TENSORS], total = 0;
    for (int i = 0; i < DENSE_TENSORS; i++) {
        off[i] = total;
        if (a->device_mask & (1u << i))
            continue;
        total += align256(bytes[i]);
    }
    /* A job whose tensors are all device memory (its own or shared with the client) has
     * nothing to stage: no scratch, and only the kernel's events, each a host call in front
     * of or behind the kernel. */
    const bool staged = total > 0;
    /* A head dim the tensor-core kernels lack (to 128) runs on theirs, padded in scratch
     * after the staged tensors (cuda_pad.h); but D 80 to 127 (16-byte rows, Dv = D) on the
     * D 128 TMA kernels is padded by their tensor maps, with no copies (pad_maps: a box past
     * the last column reads zeros, O's map clips it). */
    const int64_t dp = cuda_pad_dim(x, a);
    const unsigned flags = a->causal ? GLLM_CUDA_KF_CAUSAL : 0;   /* kernel_registry.h */
    const bool pad_maps =
        dp == 128 && a->D > 64 && Dv == a->D && tc_layout(a) &&
        cuda_kernel_find(x, attn_variant_none(var) ? GLLM_CUDA_MODE_HOPPER_TMA
                                                   : GLLM_CUDA_MODE_HOPPER_VAR,
                         a->dtype, 128, flags);
    const int64_t pad = pad_maps ? 0 : dp;
    const size_t pad_at = total;
    if (pad)
        total += cuda_pad_bytes(a, pad);
    if (total > 0) {
        int rc = cuda_ensure_scratch(c, x, ln, total);
        if (rc < 0)
            return rc;
    }

    CUresult r;
    uint64_t moved = 0;
    if (staged)
        d->cuEventRecord(sl->ev[EV_COPY_IN], ln->stream);
    CUdeviceptr dptr[DENSE_TENSORS];
    for (int i = 0; i < DENSE_TENSORS; i++)
        dptr[i] = (a->device_mask & (1u << i)) ? (CUdeviceptr)(uintptr_t)host[i] : ln->scratch + off[i];
    for (int i = 0; i < DENSE_TENSORS; i++) {
        if (!bytes[i] || !copy_in[i] || (a->device_mask & (1u << i)))
            continue;
        if ((r = cuda_copy_htod(d, ln->scratch + off[i], host[i], bytes[i], ln->stream)))
            return cuda_fail(c, r, "copy to device");
        moved += bytes[i];
    }
    d->cuEventRecord(sl->ev[EV_KERNEL], ln->stream);

    gllm_cuda_attn_params p = {
        .q = (const void *)(uintptr_t)dptr[0],
        .k = (const void *)(uintptr_t)dptr[1],
        .v = (const void *)(uintptr_t)dptr[2],
        .out = (void *)(uintptr_t)dptr[3],
        .lse = a->lse ? (float *)(uintptr_t)dptr[4] : NULL,
        .B = a->B, .Hq = a->Hq, .Hkv = a->Hkv, .Sq = a->Sq, .Skv = a->Skv, .D = a->D,
        .scale = a->scale, .causal = a->causal,
    };
    memcpy(p.q_st, a->q_st, sizeof p.q_st);
    memcpy(p.k_st, a->k_st, sizeof p.k_st);
    memcpy(p.v_st, a->v_st, sizeof p.v_st);
    memcpy(p.o_st, a->o_st, sizeof p.o_st);
    memcpy(p.lse_st, a->lse_st, sizeof p.lse_st);
    /* Padded, the kernels see p as cuda_pad_view makes it (job keeps the tensors' own). */
    const gllm_cuda_attn_params job = p;
    if (pad)
        p = cuda_pad_view(a, &job, pad, ln->scratch + pad_at);
    gllm_cuda_hp_params hp;
    /* pad_maps: the maps of the tensors as they are, encoded once here for the kernel below;
     * where the driver refuses them (it has not been seen to), the generic kernel, which takes
     * any head dim. */
    bool mapped = false;
    if (pad_maps) {
        memset(&hp, 0, sizeof hp);
        hp.a = p;
        mapped = cuda_tma_hp_params_as(d, &hp, a->dtype == GLLM_DTYPE_BF16, &x->tma, 128) == 0;
        if (!mapped && !x->tma_refused) {
            x->tma_refused = true;
            backend_logf(&c->log, BACKEND_LOG_WARNING,
                         "cuda: GPU %d: the driver refused a tensor map for a prefill at D %lld; "
                         "such jobs run on the generic kernel", x->ordinal, (long long)a->D);
        }
    }
    const int64_t D = mapped ? 128 : p.D;
    const bool tc = mapped || pad || tc_eligible(a);
    /* D 256 (and, padded, 129 to 255) and Dqk 192 with Dv 128 on Hopper: a kernel of its own,
     * with a variant form. */
    const bool wide_dims = D == 256 ? pad || tc_layout(a)
                                    : D == 192 && !pad && tc_layout_dv(a, GLLM_CUDA_HPW_DV(192));
    CUfunction wide = wide_dims ? cuda_kernel_find(x, attn_variant_none(var)
                                                          ? GLLM_CUDA_MODE_HOPPER_WIDE
                                                          : GLLM_CUDA_MODE_HOPPER_WIDE_VAR,
                                                  a->dtype, D, flags)
                                : NULL;
    const bool plain = attn_variant_none(var) && (pad || Dv == a->D || wide);
    CUfunction hopper = plain ? cuda_kernel_find(x, GLLM_CUDA_MODE_HOPPER, a->dtype, D, flags) : NULL;
    const unsigned heads = (unsigned)(a->B * a->Hq);
    CUfunction f;
    unsigned gx, gy, threads, smem;
    void *param = &p;
    gllm_cuda_attn_var_params vp;
    gllm_cuda_hp_var_params hv;
    if (!plain) {
        /* A variant: D 256's Hopper form, the D 64/128 one where its tensor maps encode, else
         * the tensor-core one at D 64 and 128, else the generic one. */
        vp.a = p, vp.Dv = pad ? pad : Dv, param = &vp;
        vp.v = cuda_variant_of(var, dptr[5], dptr[6]);
        CUfunction hvar = tc && !wide
                              ? cuda_kernel_find(x, GLLM_CUDA_MODE_HOPPER_VAR, a->dtype, D, flags)
                              : NULL;
        if (hvar) {
            memset(&hv, 0, sizeof hv);
            hv.v = vp.v;
            if (mapped) {
                hv.hp = hp;
            } else {
                hv.hp.a = p;
                if (cuda_tma_hp_params(d, &hv.hp, a->dtype == GLLM_DTYPE_BF16, &x->tma) != 0)
                    hvar = NULL;             /* the TC form below, as a refused map's job does */
            }
        }
        f = tc ? cuda_kernel_find(x, GLLM_CUDA_MODE_TC_VAR, a->dtype, D, 0) : NULL;
        if (wide) {
            f = wide;
            gx = (unsigned)((a->Sq + GLLM_CUDA_HPW_ROWS - 1) / GLLM_CUDA_HPW_ROWS), gy = heads;
            threads = GLLM_CUDA_HPW_THREADS, smem = (unsigned)GLLM_CUDA_HPW_SMEM(D);
        } else if (hvar) {
            f = hvar, param = &hv;
            gx = (unsigned)gllm_cuda_hp_grid(a->Sq, D, a->B * a->Hq, x->sm_count), gy = 1;
            threads = (unsigned)GLLM_CUDA_HP_THREADS(D), smem = (unsigned)GLLM_CUDA_HP_SMEM(D);
        } else if (f) {
            const int64_t rows = GLLM_CUDA_TC_ROWS(D);
            gx = (unsigned)((a->Sq + rows - 1) / rows), gy = heads;
            threads = (unsigned)(GLLM_CUDA_TC_WARPS(D) * 32);
            smem = (unsigned)GLLM_CUDA_TC_SMEM(D);
        } else {
            f = cuda_kernel_find(x, GLLM_CUDA_MODE_GENERIC_VAR, a->dtype, D, 0);
            gx = (unsigned)((a->Sq + GLLM_CUDA_GENERIC_ROWS - 1) / GLLM_CUDA_GENERIC_ROWS), gy = heads;
            threads = GLLM_CUDA_GENERIC_ROWS * 32, smem = 0;
        }
    } else if (wide) {
        f = wide;
        gx = (unsigned)((a->Sq + GLLM_CUDA_HPW_ROWS - 1) / GLLM_CUDA_HPW_ROWS), gy = heads;
        threads = GLLM_CUDA_HPW_THREADS, smem = (unsigned)GLLM_CUDA_HPW_SMEM(D);
    } else if (tc && hopper) {
        /* Persistent: a block per SM (fewer when there are fewer tiles, or at D = 128 not
         * causal as few as its rounds need), each working through the schedule of
         * hopper_schedule.h. */
        f = hopper;
        gx = (unsigned)gllm_cuda_hp_grid_even(a->Sq, D, a->B * a->Hq, a->causal,
                                              x->sm_count, split_keys(a));
        gy = 1;
        threads = (unsigned)GLLM_CUDA_HP_THREADS(D), smem = (unsigned)GLLM_CUDA_HP_SMEM(D);
        /* The TMA producer where the driver encodes maps of these tensors; else cp.async. */
        CUfunction tma = cuda_kernel_find(x, GLLM_CUDA_MODE_HOPPER_TMA, a->dtype, D, flags);
        if (tma) {
            if (!mapped)
                hp.a = p;
            const int tr =
                mapped ? 0 : cuda_tma_hp_params(d, &hp, a->dtype == GLLM_DTYPE_BF16, &x->tma);
            if (tr == 0) {
                f = tma, param = &hp;
                const int sr = prefill_split(c, x, ln, a, gx, &hp);
                if (sr < 0)
                    return sr;
            } else if (tr == -EINVAL && !x->tma_refused) {
                x->tma_refused = true;
                backend_logf(&c->log, BACKEND_LOG_WARNING,
                             "cuda: GPU %d: the driver refused a tensor map for a prefill "
                             "(D %lld, strides %lld/%lld/%lld); such jobs copy with cp.async",
                             x->ordinal, (long long)a->D, (long long)a->k_st[0],
                             (long long)a->k_st[1], (long long)a->k_st[2]);
            }
        }
    } else if (tc) {
        const int64_t rows = GLLM_CUDA_TC_ROWS(D);
        f = cuda_kernel_find(x, GLLM_CUDA_MODE_TC, a->dtype, D, flags);
        gx = (unsigned)((a->Sq + rows - 1) / rows), gy = heads;
        threads = (unsigned)(GLLM_CUDA_TC_WARPS(D) * 32), smem = (unsigned)GLLM_CUDA_TC_SMEM(D);
    } else {
        f = cuda_kernel_find(x, GLLM_CUDA_MODE_GENERIC, a->dtype, D, 0); /* reads causal */
        gx = (unsigned)((a->Sq + GLLM_CUDA_GENERIC_ROWS - 1) / GLLM_CUDA_GENERIC_ROWS), gy = heads;
        threads = GLLM_CUDA_GENERIC_ROWS * 32, smem = 0;
    }
    /* repeat > 1 (benchmarks): the runs go out back to back between the kernel's events, so
     * that each but the first is launched while the one before runs. Padded, each run pads
     * its inputs and copies its output back, within the kernel's time. */
    r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < attn_runs(a) && !r; i++) {
        if (pad && (r = cuda_pad_in(d, x, ln, a, &job, &p)))
            break;
        if ((r = cuda_launch(d, x, ln, f, gx, gy, threads, smem, param)))
            break;
        if (pad)
            r = cuda_pad_out(d, x, ln, a, &p, &job);
    }
    if (r)
        return cuda_fail(c, r, "kernel launch");
    d->cuEventRecord(sl->ev[EV_KERNEL_END], ln->stream);
    for (int i = 3; i < 5; i++) {
        if (!bytes[i] || (a->device_mask & (1u << i)))
            continue;
        if ((r = cuda_copy_dtoh(d, (void *)host[i], ln->scratch + off[i], bytes[i], ln->stream)))
            return cuda_fail(c, r, "copy from device");
        moved += bytes[i];
    }
    if (staged)
        d->cuEventRecord(sl->ev[EV_COPY_OUT], ln->stream);
    sl->moved = moved;
    sl->copies = staged;
    sl->ran = true;                      /* its events are there to read */
    return 0;
}

/* Timing from the slot's events, when the kernel ran (a job with nothing to do has none). */
static int attention_complete(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_slot *sl,
                              const void *args)
{
    const struct attn_args *a = args;
    (void)x;
    if (sl->ran) {
        cuda_read_timing(c->d, sl, a->exec.timing);
        if (a->exec.timing)
            a->exec.timing->kernel_ns /= attn_runs(a);
    }
    return 0;
}

static const struct cuda_op_type attention_op = {attention_enqueue, attention_complete};

static int cuda_attention(struct backend *be, int dev, const struct attn_args *a)
{
    op_begin(be, dev, a->exec.deadline_ns);
    int r = a->exec.queue ? cuda_queue_submit(be, dev, &a->exec, &attention_op, a, "attention kernel")
                          : cuda_run_now(be, dev, a->exec.sync, &attention_op, a, "attention kernel");
    return op_end(be, dev, r, a->exec.why, a->exec.why_len);
}

static int cuda_paged_op(struct backend *be, int dev, const struct paged_args *p)
{
    op_begin(be, dev, p->exec.deadline_ns);
    return op_end(be, dev, cuda_paged(be, dev, p), p->exec.why, p->exec.why_len);
}

/* Faults made with the embedded kernels, since no kernel of the image traps or spins: an
 * out-of-bounds read is the generic kernel pointed at an unmapped address; a "trap" the same
 * kernel reading floats from an odd address (CUDA_ERROR_MISALIGNED_ADDRESS, as fatal to the
 * context as a trap); a spin a stream wait for a value nobody writes, which holds the stream
 * as a kernel that never ends does. */
static int cuda_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                             uint64_t deadline_ns, char *why, size_t len)
{
    struct cuda_ctx *c = be->ctx;
    const struct cuda_driver *d = c->d;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    struct cuda_dev *x = &c->dev[dev];
    d->cuCtxSetCurrent(x->ctx);
    int r = cuda_ensure_scratch(c, x, &x->lane, 4096);
    if (r < 0)
        return r;
    op_begin(be, dev, deadline_ns);
    CUresult cr;
    if (kind == BACKEND_FAULT_SPIN) {
        if (!deadline_ns || !d->cuStreamWaitValue32) {
            snprintf(why, len, "a spin needs the watchdog on and stream memory operations");
            return op_end(be, dev, -EOPNOTSUPP, why, len);
        }
        if ((cr = d->cuMemsetD32Async(x->lane.scratch, 0, 1, x->lane.stream)) ||
            (cr = d->cuStreamWaitValue32(x->lane.stream, x->lane.scratch, 1, CU_STREAM_WAIT_VALUE_GEQ)))
            return op_end(be, dev, cuda_fail(c, cr, "injected spin"), why, len);
        r = cuda_stream_finish(c, x, "injected spin");
        if (r == GLLM_EJOBTIMEOUT)
            snprintf(why, len, "a stream wait that nothing satisfies (injected) held the GPU");
        return op_end(be, dev, r, why, len);
    }
    if (kind == BACKEND_FAULT_STICKY)
        kind = BACKEND_FAULT_OOB;    /* every context-fatal fault is sticky on CUDA */
    if (kind != BACKEND_FAULT_OOB && kind != BACKEND_FAULT_TRAP) {
        snprintf(why, len, "no such fault");
        return op_end(be, dev, -EINVAL, why, len);
    }
    /* Page 1 of the address space is never mapped on any GPU. */
    const CUdeviceptr bad = kind == BACKEND_FAULT_OOB ? (CUdeviceptr)0x1000 : x->lane.scratch + 1;
    gllm_cuda_attn_params p = {
        .q = (const void *)(uintptr_t)bad, .k = (const void *)(uintptr_t)bad,
        .v = (const void *)(uintptr_t)bad, .out = (void *)(uintptr_t)(bad + 256),
        .B = 1, .Hq = 1, .Hkv = 1, .Sq = 1, .Skv = 1, .D = 1, .scale = 1.0f,
    };
    for (int i = 0; i < 4; i++)
        p.q_st[i] = p.k_st[i] = p.v_st[i] = p.o_st[i] = 1;
    void *args[] = {&p};
    CUfunction f = cuda_kernel_find(x, GLLM_CUDA_MODE_GENERIC, GLLM_DTYPE_F32, 1, 0);
    if ((cr = d->cuLaunchKernel(f, 1, 1, 1, GLLM_CUDA_GENERIC_ROWS * 32, 1, 1, 0, x->lane.stream,
                                args, NULL)))
        return op_end(be, dev, cuda_fail(c, cr, "injected fault launch"), why, len);
    r = cuda_stream_finish(c, x, kind == BACKEND_FAULT_OOB ? "injected out-of-bounds read"
                                                               : "injected misaligned read");
    if (r == 0) {
        snprintf(why, len, "the injected fault did not fault");
        r = GLLM_EBACKEND;
    }
    return op_end(be, dev, r, why, len);
}

static const struct backend_device_iface cuda_device_iface = {
    .info = cuda_device_info,
    .memory = cuda_memory_info,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .alloc = cuda_dev_alloc,
    .free = cuda_dev_free,
    .copy = cuda_copy,
    .attention = cuda_attention,
    .paged_check = cuda_paged_check,
    .paged = cuda_paged_op,
    .share_alloc = cuda_share_alloc,
    .share_import = cuda_share_import,
    .share_free = cuda_share_free,
    .inject_fault = cuda_inject_fault,
    .queue_open = cuda_queue_open,
    .queue_poll = cuda_queue_poll,
    .queue_close = cuda_queue_close,
};

const struct backend_iface cuda_backend_iface = {
    .api_version = BACKEND_API_VERSION,
    .name = "cuda",
    .probe = cuda_probe,
    .open = cuda_open,
    .close = cuda_close,
    .describe = cuda_images_line,
    .declare = cuda_declare,
};
