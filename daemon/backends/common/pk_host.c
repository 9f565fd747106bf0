/* The host half of the portable kernels: staging of host tensors through device scratch,
 * kernel parameters and grids, the page-number flag; see pk_host.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_host.h"
#include "strided.h"

const char *const pk_kernel_names[PK_NKERNELS] = {
    [PK_ATTN_F32] = "gllm_pk_attn_f32", [PK_ATTN_F16] = "gllm_pk_attn_f16",
    [PK_ATTN_BF16] = "gllm_pk_attn_bf16", [PK_PAGED_F32] = "gllm_pk_paged_f32",
    [PK_PAGED_F16] = "gllm_pk_paged_f16", [PK_PAGED_BF16] = "gllm_pk_paged_bf16",
    [PK_APPEND] = "gllm_pk_append",
};

#define LOG2E 1.4426950408889634f
/* Scratch starts with the page-number flag, then the staged tensors, each 256-aligned. */
#define FLAG_BYTES 256

static size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static size_t elem_bytes(gllm_dtype t)
{
    return t == GLLM_DTYPE_F32 ? 4 : 2;
}

/* enum pk_kernel of a dtype's attention (base PK_ATTN_F32) or paged kernel (PK_PAGED_F32). */
static enum pk_kernel by_dtype(enum pk_kernel base, gllm_dtype t)
{
    return (enum pk_kernel)(base + (t == GLLM_DTYPE_F16 ? 1 : t == GLLM_DTYPE_BF16 ? 2 : 0));
}

/* Up to 16 tensors of one job: host ones get a place in scratch, device ones stay. */
struct stage {
    const struct pk_device *d;
    int n;
    size_t total;
    uint64_t base;
    struct {
        void *host;
        size_t bytes, off;
        bool on_device, in, out;
    } t[16];
};

static int stage_add(struct stage *s, const void *p, size_t bytes, bool on_device, bool in, bool out)
{
    int i = s->n++;
    s->t[i].host = (void *)p;
    s->t[i].bytes = bytes;
    s->t[i].on_device = on_device;
    s->t[i].in = in && bytes;
    s->t[i].out = out && bytes;
    s->t[i].off = s->total;
    if (!on_device)
        s->total += align256(bytes);
    return i;
}

static uint64_t stage_addr(const struct stage *s, int i)
{
    return s->t[i].on_device ? (uint64_t)(uintptr_t)s->t[i].host : s->base + s->t[i].off;
}

/* Scratch for the job, the flag cleared, every staged input copied up. */
static int stage_in(struct stage *s)
{
    const struct pk_device_ops *o = s->d->ops;
    int rc = o->scratch(s->d->dev, FLAG_BYTES + s->total, &s->base);
    if (rc < 0)
        return rc;
    static const int32_t zero;
    if ((rc = o->to_device(s->d->dev, s->base, &zero, sizeof zero)) < 0)
        return rc;
    s->base += FLAG_BYTES;
    for (int i = 0; i < s->n; i++)
        if (!s->t[i].on_device && s->t[i].in &&
            (rc = o->to_device(s->d->dev, stage_addr(s, i), s->t[i].host, s->t[i].bytes)) < 0)
            return rc;
    return 0;
}

/* Waits for the kernels, copies staged outputs back; *bad gets the page-number flag. */
static int stage_out(struct stage *s, int32_t *bad)
{
    const struct pk_device_ops *o = s->d->ops;
    int rc = o->finish(s->d->dev);
    for (int i = 0; i < s->n && rc == 0; i++)
        if (!s->t[i].on_device && s->t[i].out)
            rc = o->to_host(s->d->dev, s->t[i].host, stage_addr(s, i), s->t[i].bytes);
    if (rc == 0 && bad)
        rc = o->to_host(s->d->dev, bad, s->base - FLAG_BYTES, sizeof *bad);
    if (rc == 0)
        rc = o->finish(s->d->dev);
    return rc;
}

/* The variant's [Hq] slopes and sinks join the job's tensors (host ones staged, device ones
 * as they are: on_dev says which); *ia and *is are their places, -1 for none. */
static void stage_variant(struct stage *s, const struct attn_variant *v, int64_t Hq,
                          bool alibi_on_dev, bool sinks_on_dev, int *ia, int *is)
{
    const size_t bytes = (size_t)Hq * sizeof(float);
    *ia = v->alibi_slopes ? stage_add(s, v->alibi_slopes, bytes, alibi_on_dev, true, false) : -1;
    *is = v->sinks ? stage_add(s, v->sinks, bytes, sinks_on_dev, true, false) : -1;
}

/* The variant as the kernels read it (pk_params.h), from a staged job. */
static struct pk_variant kernel_variant(const struct stage *s, const struct attn_variant *v,
                                        int ia, int is)
{
    return (struct pk_variant){
        .alibi = ia >= 0 ? stage_addr(s, ia) : 0,
        .sinks = is >= 0 ? stage_addr(s, is) : 0,
        .window_left = attn_window_left(v),
        .window_right = attn_window_right(v),
        .chunk = (int32_t)v->chunk,
        .soft_cap = v->soft_cap,
    };
}

void pk_declare(struct backend_caps *out)
{
    const uint32_t every = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                           GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS;
    *out = (struct backend_caps){
        .dtypes = 1u << GLLM_DTYPE_F32 | 1u << GLLM_DTYPE_F16 | 1u << GLLM_DTYPE_BF16,
        .max_head_dim = PK_MAX_D,
        .modes = {
            [GLLM_MODE_DENSE] = {.variants = every | GLLM_VARIANT_HEAD_DIM_V},
            [GLLM_MODE_DECODE] = {.variants = every},
            [GLLM_MODE_PREFILL] = {.variants = every},
        },
    };
}

static unsigned block_threads(const struct pk_device *d)
{
    return (unsigned)(PK_WAVES * d->wave);
}

int pk_attention(const struct pk_device *d, const struct attn_args *a)
{
    const int64_t Dv = attn_dv(a);
    if (a->D < 1 || a->D > PK_MAX_D || Dv < 1 || Dv > a->D)
        return GLLM_EHEADDIM;
    if (a->Hkv < 1 || a->Hq % a->Hkv != 0)
        return GLLM_ESHAPE;
    if (a->B == 0 || a->Hq == 0 || a->Sq == 0)
        return 0;
    const int64_t gx = (a->Sq + PK_ROWS - 1) / PK_ROWS, gy = a->B * a->Hq;
    if (gy > PK_MAX_GRID_Y || gx * block_threads(d) > UINT32_MAX || a->Sq > INT32_MAX ||
        a->Skv > INT32_MAX)
        return -E2BIG;
    const size_t es = elem_bytes(a->dtype);
    const int64_t qs[4] = {a->B, a->Hq, a->Sq, a->D}, ks[4] = {a->B, a->Hkv, a->Skv, a->D},
                  vs[4] = {a->B, a->Hkv, a->Skv, Dv}, os[4] = {a->B, a->Hq, a->Sq, Dv},
                  ls[3] = {a->B, a->Hq, a->Sq};
    struct stage s = {.d = d};
    /* An output view with gaps is copied in first, so the gaps go back unchanged. */
    const uint32_t on_dev = a->device_mask;
    int iq = stage_add(&s, a->q, strided_span_bytes(4, qs, a->q_st, es), on_dev & 1, true, false);
    int ik = stage_add(&s, a->k, strided_span_bytes(4, ks, a->k_st, es), on_dev & 2, true, false);
    int iv = stage_add(&s, a->v, strided_span_bytes(4, vs, a->v_st, es), on_dev & 4, true, false);
    int io = stage_add(&s, a->out, strided_span_bytes(4, os, a->o_st, es), on_dev & 8,
                       !strided_contiguous(4, os, a->o_st), true);
    int il = a->lse ? stage_add(&s, a->lse, strided_span_bytes(3, ls, a->lse_st, 4), on_dev & 16,
                                !strided_contiguous(3, ls, a->lse_st), true)
                    : -1;
    int ia, is;
    stage_variant(&s, &a->variant, a->Hq, on_dev & 32, on_dev & 64, &ia, &is);
    int rc = stage_in(&s);
    if (rc < 0)
        return rc;
    struct pk_attn_params p = {
        .q = stage_addr(&s, iq), .k = stage_addr(&s, ik), .v = stage_addr(&s, iv),
        .out = stage_addr(&s, io), .lse = il >= 0 ? stage_addr(&s, il) : 0,
        .B = (int32_t)a->B, .Hq = (int32_t)a->Hq, .Hkv = (int32_t)a->Hkv, .Sq = (int32_t)a->Sq,
        .Skv = (int32_t)a->Skv, .D = (int32_t)a->D, .scale_log2 = a->scale * LOG2E,
        .causal = a->causal, .Dv = (int32_t)Dv, .var = kernel_variant(&s, &a->variant, ia, is),
    };
    memcpy(p.q_st, a->q_st, sizeof p.q_st);
    memcpy(p.k_st, a->k_st, sizeof p.k_st);
    memcpy(p.v_st, a->v_st, sizeof p.v_st);
    memcpy(p.o_st, a->o_st, sizeof p.o_st);
    memcpy(p.lse_st, a->lse_st, sizeof p.lse_st);
    /* repeat (benchmarks): the runs back to back, timed on the host from the copies' end to
     * the last run's, over their count; one run leaves the job's own time to stand for it. */
    const uint32_t runs = attn_runs(a);
    if (runs > 1 && (rc = d->ops->finish(d->dev)) < 0)
        return rc;
    const uint64_t t0 = backend_now_ns();
    for (uint32_t i = 0; i < runs && rc >= 0; i++)
        rc = d->ops->launch(d->dev, by_dtype(PK_ATTN_F32, a->dtype), (unsigned)gx, (unsigned)gy,
                            block_threads(d), &p, sizeof p);
    if (rc >= 0 && runs > 1 && (rc = d->ops->finish(d->dev)) >= 0 && a->exec.timing)
        a->exec.timing->kernel_ns = (backend_now_ns() - t0) / runs;
    if (rc < 0)
        return rc;
    return stage_out(&s, NULL);
}

int pk_paged_check(const struct paged_args *p, char *why, size_t len)
{
    if (p->D < 1 || p->D > PK_MAX_D) {
        snprintf(why, len, "head dim %lld: the portable kernels take 1..%d", (long long)p->D, PK_MAX_D);
        return GLLM_EHEADDIM;
    }
    if (p->Dv && p->Dv != p->D) {
        snprintf(why, len, "v's head dim %lld differs from k's (%lld): the portable paged kernel "
                 "takes one head dim", (long long)p->Dv, (long long)p->D);
        return GLLM_EVARIANT;
    }
    if (p->indices_in_arena) {
        snprintf(why, len, "page tables must be copied by the daemon for this backend");
        return GLLM_EPARAM;
    }
    if (p->B * p->Hq > PK_MAX_GRID_Y) {
        snprintf(why, len, "batch x query heads %lld is over %d", (long long)(p->B * p->Hq),
                 PK_MAX_GRID_Y);
        return -E2BIG;
    }
    return 0;
}

int pk_paged(const struct pk_device *d, const struct paged_args *p)
{
    char why[160];
    int rc = pk_paged_check(p, why, sizeof why);
    if (rc < 0) {
        if (p->exec.why)
            snprintf(p->exec.why, p->exec.why_len, "%s", why);
        return rc;
    }
    if (p->B == 0 || (p->op == PAGED_APPEND ? p->nnew == 0 : p->max_q_len == 0))
        return 0;
    const size_t es = elem_bytes(p->dtype), row = (size_t)(p->Hkv * p->D) * es;
    const size_t pool = (size_t)(p->num_pages * p->page_size) * row;
    const bool append = p->op == PAGED_APPEND;
    const uint32_t m = p->device_mask;
    struct stage s = {.d = d};
    /* An append rewrites some rows of host caches: the whole pools go up and come back. */
    int kc = stage_add(&s, p->k_cache, pool, m & (1u << PG_KCACHE), true, append);
    int vc = stage_add(&s, p->v_cache, pool, m & (1u << PG_VCACHE), true, append);
    int q = -1, out = -1, kn = -1, vn = -1;
    if (append) {
        kn = stage_add(&s, p->k_new, (size_t)p->nnew * row, m & (1u << PG_KNEW), true, false);
        vn = stage_add(&s, p->v_new, (size_t)p->nnew * row, m & (1u << PG_VNEW), true, false);
    } else {
        const size_t qb = (size_t)(p->nq * p->Hq * p->D) * es;
        q = stage_add(&s, p->q, qb, m & (1u << PG_Q), true, false);
        /* Rows no sequence owns (none, when q_indptr covers every query) keep their values. */
        out = stage_add(&s, p->out, qb, m & (1u << PG_OUT), p->q_indptr[p->B] != p->nq, true);
    }
    const size_t ptrs = (size_t)(p->B + 1) * sizeof(int32_t);
    int ip = stage_add(&s, p->kv_indptr, ptrs, false, true, false);
    int ix = stage_add(&s, p->kv_indices, (size_t)p->kv_indptr[p->B] * sizeof(int32_t),
                       !append && p->indices_on_device, true, false);
    int il = stage_add(&s, p->kv_len, (size_t)p->B * sizeof(int32_t), false, true, false);
    int iq = stage_add(&s, p->q_indptr, ptrs, false, true, false);
    int ia = -1, is = -1;
    if (!append)
        stage_variant(&s, &p->variant, p->Hq, m & (1u << PG_ALIBI), m & (1u << PG_SINKS), &ia, &is);
    if ((rc = stage_in(&s)) < 0)
        return rc;
    struct pk_paged_params k = {
        .k_cache = stage_addr(&s, kc), .v_cache = stage_addr(&s, vc),
        .q = q >= 0 ? stage_addr(&s, q) : 0, .out = out >= 0 ? stage_addr(&s, out) : 0,
        .k_new = kn >= 0 ? stage_addr(&s, kn) : 0, .v_new = vn >= 0 ? stage_addr(&s, vn) : 0,
        .kv_indptr = stage_addr(&s, ip), .kv_indices = stage_addr(&s, ix),
        .kv_len = stage_addr(&s, il), .q_indptr = stage_addr(&s, iq),
        .bad = s.base - FLAG_BYTES, .num_pages = p->num_pages,
        .B = (int32_t)p->B, .Hq = (int32_t)p->Hq, .Hkv = (int32_t)p->Hkv, .D = (int32_t)p->D,
        .page_size = (int32_t)p->page_size, .nnew = (int32_t)p->nnew,
        .scale_log2 = p->scale * LOG2E, .elem_bytes = (int32_t)es,
        .var = kernel_variant(&s, &p->variant, ia, is),
    };
    if (append) {
        const uint64_t elems = (uint64_t)p->nnew * (uint64_t)(p->Hkv * p->D);
        const uint64_t gx = (elems + PK_APPEND_THREADS - 1) / PK_APPEND_THREADS;
        if (gx * PK_APPEND_THREADS > UINT32_MAX)
            return -E2BIG;
        rc = d->ops->launch(d->dev, PK_APPEND, (unsigned)gx, 1, PK_APPEND_THREADS, &k, sizeof k);
    } else {
        const unsigned gx = (unsigned)((p->max_q_len + PK_ROWS - 1) / PK_ROWS);
        rc = d->ops->launch(d->dev, by_dtype(PK_PAGED_F32, p->dtype), gx,
                            (unsigned)(p->B * p->Hq), block_threads(d), &k, sizeof k);
    }
    if (rc < 0)
        return rc;
    int32_t bad = 0;
    if ((rc = stage_out(&s, &bad)) < 0)
        return rc;
    if (bad) {
        /* The kernel only flags it: the entry, named as the daemon's own check names it, from
         * the table as the kernel read it. */
        const int64_t n = p->kv_indptr[p->B];
        int32_t *table = p->indices_on_device ? malloc((size_t)n * sizeof *table) : NULL;
        const int32_t *look = p->indices_on_device ? table : p->kv_indices;
        if (table && (d->ops->to_host(d->dev, table, stage_addr(&s, ix), (size_t)n * sizeof *table) < 0 ||
                      d->ops->finish(d->dev) < 0))
            look = NULL;
        const struct backend_exec *e = &p->exec;
        if (e->why && !(look && paged_check_pages(look, n, p->num_pages, e->why, e->why_len) < 0))
            snprintf(e->why, e->why_len,
                     "a page number in kv_indices is outside the pool of %lld pages",
                     (long long)p->num_pages);
        free(table);
        return GLLM_EBOUNDS;
    }
    return 0;
}
