/* CPU attention: tiled online-softmax (flash style) in fp32, the numerical reference backend. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "gllm/elem.h"

/*
 * One task = QB query rows of one (batch, head). The task walks the visible
 * keys in tiles of KB: it widens the tile to fp32 (K transposed, so the score
 * loop runs along keys), computes the QB x KB scores with a 4x16 register
 * micro-kernel, updates the running max and sum per row, and accumulates P V
 * with a second 4x16 micro-kernel. Head dims are padded to a multiple of 16
 * with zeros in the scratch tiles, so any D <= CPU_MAX_HEAD_DIM works.
 */
#define QB 32
#define KB 64
#define DPAD 16

typedef float v8 __attribute__((vector_size(32)));
/* The helpers taking v8 are always inlined, so no v8 ever crosses a call ABI. */
#pragma GCC diagnostic ignored "-Wpsabi"

/* Build a clone per ISA and pick at load time (ifunc), so a generic build
 * still runs AVX2/AVX-512 code where the CPU has it. */
/* GCC only: clang refuses to pass 256-bit vectors between a clone and the always-inline
 * helpers, and clang builds here are the sanitizer and fuzzing ones anyway. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__clang__)
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef HOT
#define HOT
#endif
#define INLINE static inline __attribute__((always_inline))

INLINE v8 ld8(const float *p)
{
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void st8(float *p, v8 v)
{
    memcpy(p, &v, sizeof v);
}

struct tile_scratch {
    float q[QB * CPU_MAX_HEAD_DIM];   /* [QB][Dp], pre-scaled by scale * log2(e) */
    float kt[CPU_MAX_HEAD_DIM * KB];  /* [Dp][KB] */
    float v[KB * CPU_MAX_HEAD_DIM];   /* [KB][Dp] */
    float s[QB * KB];                 /* scores, then probabilities */
    float o[QB * CPU_MAX_HEAD_DIM];   /* unnormalised output accumulator */
    float m[QB], l[QB];               /* running max (log2 domain) and sum */
};

INLINE float load_elem(const void *base, gllm_dtype dt, int64_t idx)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return gllm_f16_to_f32(((const uint16_t *)base)[idx]);
    case GLLM_DTYPE_BF16: return gllm_bf16_to_f32(((const uint16_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

INLINE void store_elem(void *base, gllm_dtype dt, int64_t idx, float x)
{
    switch (dt) {
    case GLLM_DTYPE_F16: ((uint16_t *)base)[idx] = gllm_f32_to_f16(x); break;
    case GLLM_DTYPE_BF16: ((uint16_t *)base)[idx] = gllm_f32_to_bf16(x); break;
    default: ((float *)base)[idx] = x; break;
    }
}

/* s[i][j] = sum_d q[i][d] * kt[d][j] for rows [0, rows4) and all KB columns. */
HOT static void scores(struct tile_scratch *t, int rows4, int Dp)
{
    for (int i = 0; i < rows4; i += 4) {
        for (int j = 0; j < KB; j += 16) {
            v8 a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0};
            v8 a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
            const float *q0 = t->q + (size_t)i * Dp;
            for (int d = 0; d < Dp; d++) {
                v8 k0 = ld8(t->kt + (size_t)d * KB + j), k1 = ld8(t->kt + (size_t)d * KB + j + 8);
                float x0 = q0[d], x1 = q0[Dp + d], x2 = q0[2 * Dp + d], x3 = q0[3 * Dp + d];
                a00 += x0 * k0; a01 += x0 * k1;
                a10 += x1 * k0; a11 += x1 * k1;
                a20 += x2 * k0; a21 += x2 * k1;
                a30 += x3 * k0; a31 += x3 * k1;
            }
            float *s = t->s + (size_t)i * KB + j;
            st8(s, a00); st8(s + 8, a01);
            st8(s + KB, a10); st8(s + KB + 8, a11);
            st8(s + 2 * KB, a20); st8(s + 2 * KB + 8, a21);
            st8(s + 3 * KB, a30); st8(s + 3 * KB + 8, a31);
        }
    }
}

/* o[i][:] += sum_j s[i][j] * v[j][:] for rows [0, rows4), keys [0, cols). */
HOT static void accumulate_pv(struct tile_scratch *t, int rows4, int cols, int Dp)
{
    for (int i = 0; i < rows4; i += 4) {
        for (int d = 0; d < Dp; d += 16) {
            float *o = t->o + (size_t)i * Dp + d;
            v8 a00 = ld8(o), a01 = ld8(o + 8);
            v8 a10 = ld8(o + Dp), a11 = ld8(o + Dp + 8);
            v8 a20 = ld8(o + 2 * Dp), a21 = ld8(o + 2 * Dp + 8);
            v8 a30 = ld8(o + 3 * Dp), a31 = ld8(o + 3 * Dp + 8);
            const float *p = t->s + (size_t)i * KB;
            for (int j = 0; j < cols; j++) {
                v8 v0 = ld8(t->v + (size_t)j * Dp + d), v1 = ld8(t->v + (size_t)j * Dp + d + 8);
                float x0 = p[j], x1 = p[KB + j], x2 = p[2 * KB + j], x3 = p[3 * KB + j];
                a00 += x0 * v0; a01 += x0 * v1;
                a10 += x1 * v0; a11 += x1 * v1;
                a20 += x2 * v0; a21 += x2 * v1;
                a30 += x3 * v0; a31 += x3 * v1;
            }
            st8(o, a00); st8(o + 8, a01);
            st8(o + Dp, a10); st8(o + Dp + 8, a11);
            st8(o + 2 * Dp, a20); st8(o + 2 * Dp + 8, a21);
            st8(o + 3 * Dp, a30); st8(o + 3 * Dp + 8, a31);
        }
    }
}

struct attn_plan {
    const struct attn_args *a;
    int64_t qblocks;
    int Dp, Dvp;                  /* q's and k's head dim, v's, padded to DPAD */
    float qscale;                 /* scale * log2(e): softmax in base 2 */
    bool transform;               /* soft-cap or ALiBi: each visible score is rewritten */
    struct tile_scratch **scratch;
};

static void load_kv_tile(struct tile_scratch *t, const struct attn_args *a, int64_t b, int64_t hk,
                         int64_t k0, int cols, int Dp, int Dvp)
{
    for (int j = 0; j < cols; j++) {
        int64_t kbase = b * a->k_st[0] + hk * a->k_st[1] + (k0 + j) * a->k_st[2];
        int64_t vbase = b * a->v_st[0] + hk * a->v_st[1] + (k0 + j) * a->v_st[2];
        float *vrow = t->v + (size_t)j * Dvp;
        for (int64_t d = 0; d < a->D; d++)
            t->kt[(size_t)d * KB + j] = load_elem(a->k, a->dtype, kbase + d * a->k_st[3]);
        for (int64_t d = 0; d < attn_dv(a); d++)
            vrow[d] = load_elem(a->v, a->dtype, vbase + d * a->v_st[3]);
        for (int d = (int)attn_dv(a); d < Dvp; d++)
            vrow[d] = 0.0f;
    }
    for (int d = (int)a->D; d < Dp; d++)
        for (int j = 0; j < cols; j++)
            t->kt[(size_t)d * KB + j] = 0.0f;
    /* Columns past the tile's end must hold finite values: they are masked after. */
    for (int d = 0; d < Dp; d++)
        for (int j = cols; j < KB; j++)
            t->kt[(size_t)d * KB + j] = 0.0f;
}

static int64_t floor_div(int64_t x, int64_t y)
{
    int64_t q = x / y;
    return q * y > x ? q - 1 : q;
}

/* The keys [*lo, *hi) the query at absolute position pos sees: every mask is an interval
 * (causal, the window, the query's chunk), so their meet is one too. */
static void visible_keys(const struct attn_args *a, int64_t pos, int64_t *lo, int64_t *hi)
{
    const struct attn_variant *v = &a->variant;
    int64_t l = 0, h = a->Skv;
    if (a->causal && pos + 1 < h)
        h = pos + 1;
    if (v->window && v->window_left >= 0 && pos - v->window_left > l)
        l = pos - v->window_left;
    if (v->window && v->window_right >= 0 && pos + v->window_right + 1 < h)
        h = pos + v->window_right + 1;
    if (v->chunk) {
        const int64_t c0 = floor_div(pos, v->chunk) * v->chunk;
        l = c0 > l ? c0 : l;
        h = c0 + v->chunk < h ? c0 + v->chunk : h;
    }
    *lo = l;
    *hi = h > l ? h : l;
}

/* The soft-cap and ALiBi on row i's visible scores s[vlo, vhi) (base 2, scaled): the cap
 * applies to the natural-log score, before the bias (Gemma 2's order). */
static void transform_row(const struct attn_args *a, int64_t h, float *s, int vlo, int vhi,
                          int64_t key0, int64_t pos)
{
    const float cap = a->variant.soft_cap;
    const float slope = a->variant.alibi_slopes ? a->variant.alibi_slopes[h] * (float)M_LOG2E
                                                : 0.0f;
    for (int j = vlo; j < vhi; j++) {
        float x = s[j];
        if (cap > 0.0f)
            x = cap * tanhf(x * (float)M_LN2 / cap) * (float)M_LOG2E;
        s[j] = x + slope * (float)(key0 + j - pos);
    }
}

static void attn_task(void *ctx, int64_t task, int thread)
{
    const struct attn_plan *pl = ctx;
    const struct attn_args *a = pl->a;
    struct tile_scratch *t = pl->scratch[thread];
    const int Dp = pl->Dp, Dvp = pl->Dvp;
    const int64_t Dv = attn_dv(a);

    int64_t qb = task % pl->qblocks, bh = task / pl->qblocks;
    int64_t h = bh % a->Hq, b = bh / a->Hq;
    int64_t hk = h / (a->Hq / a->Hkv);
    int64_t q0 = qb * QB;
    int rows = (int)(a->Sq - q0 < QB ? a->Sq - q0 : QB);
    int rows4 = (rows + 3) & ~3;

    /* Row i is the query at absolute position q0 + i + shift (bottom-right aligned); it sees
     * keys [lo[i], hi[i]), and the block the union of those. */
    const int64_t shift = a->Skv - a->Sq;
    int64_t lo[QB], hi[QB], kv_begin = a->Skv, kv_end = 0;
    for (int i = 0; i < rows4; i++) {
        float *qrow = t->q + (size_t)i * Dp;
        int64_t base = b * a->q_st[0] + h * a->q_st[1] + (q0 + i) * a->q_st[2];
        for (int64_t d = 0; d < a->D; d++)
            qrow[d] = i < rows ? load_elem(a->q, a->dtype, base + d * a->q_st[3]) * pl->qscale : 0.0f;
        for (int d = (int)a->D; d < Dp; d++)
            qrow[d] = 0.0f;
        t->m[i] = -INFINITY;
        t->l[i] = 0.0f;
        if (i < rows) {
            visible_keys(a, q0 + i + shift, &lo[i], &hi[i]);
            if (lo[i] < hi[i]) {
                kv_begin = lo[i] < kv_begin ? lo[i] : kv_begin;
                kv_end = hi[i] > kv_end ? hi[i] : kv_end;
            }
        }
    }
    memset(t->o, 0, (size_t)rows4 * Dvp * sizeof(float));

    for (int64_t k0 = kv_begin; k0 < kv_end; k0 += KB) {
        int cols = (int)(kv_end - k0 < KB ? kv_end - k0 : KB);
        load_kv_tile(t, a, b, hk, k0, cols, Dp, Dvp);
        scores(t, rows4, Dp);
        for (int i = 0; i < rows; i++) {
            float *s = t->s + (size_t)i * KB;
            const int64_t vl = lo[i] - k0, vh = hi[i] - k0;
            const int vlo = vl < 0 ? 0 : vl > cols ? cols : (int)vl;
            const int vhi = vh < vlo ? vlo : vh > cols ? cols : (int)vh;
            if (pl->transform)
                transform_row(a, h, s, vlo, vhi, k0, q0 + i + shift);
            /* A NaN score makes the row's maximum NaN, so it reaches the output as NaN
             * instead of being skipped as "nothing visible". */
            float mx = t->m[i];
            for (int j = vlo; j < vhi; j++)
                mx = s[j] > mx || s[j] != s[j] ? s[j] : mx;
            if (mx == -INFINITY) {
                /* Nothing visible yet (or all -inf): contributes nothing. */
                for (int j = 0; j < KB; j++)
                    s[j] = 0.0f;
                continue;
            }
            float alpha = exp2f(t->m[i] - mx), sum = 0.0f;
            for (int j = 0; j < vlo; j++)
                s[j] = 0.0f;
            for (int j = vlo; j < vhi; j++) {
                s[j] = exp2f(s[j] - mx);
                sum += s[j];
            }
            for (int j = vhi; j < KB; j++)
                s[j] = 0.0f;
            float *o = t->o + (size_t)i * Dvp;
            for (int d = 0; d < Dvp; d++)
                o[d] *= alpha;
            t->l[i] = t->l[i] * alpha + sum;
            t->m[i] = mx;
        }
        for (int i = rows; i < rows4; i++)
            memset(t->s + (size_t)i * KB, 0, KB * sizeof(float));
        accumulate_pv(t, rows4, cols, Dvp);
    }

    for (int i = 0; i < rows; i++) {
        float m = t->m[i], l = t->l[i], keep = 1.0f;
        if (a->variant.sinks) {
            /* The sink: one more key in the softmax, of logit sinks[h] and value zero. */
            const float s2 = a->variant.sinks[h] * (float)M_LOG2E;
            const float mf = s2 > m ? s2 : m;
            if (mf != -INFINITY) {
                keep = m == -INFINITY ? 0.0f : exp2f(m - mf);
                l = l * keep + exp2f(s2 - mf);
                m = mf;
            }
        }
        /* A row that sees no key is defined as zeros, lse -inf (the sink's logit with one). */
        float inv = l > 0.0f ? keep / l : 0.0f;
        const float *o = t->o + (size_t)i * Dvp;
        int64_t base = b * a->o_st[0] + h * a->o_st[1] + (q0 + i) * a->o_st[2];
        for (int64_t d = 0; d < Dv; d++)
            store_elem(a->out, a->dtype, base + d * a->o_st[3], o[d] * inv);
        if (a->lse) {
            float lse = l > 0.0f ? (m + log2f(l)) * (float)M_LN2 : -INFINITY;
            a->lse[b * a->lse_st[0] + h * a->lse_st[1] + (q0 + i) * a->lse_st[2]] = lse;
        }
    }
}

struct cpu_attention {
    struct cpu_pool *pool;
    struct tile_scratch **scratch;
    int nscratch;
};

int cpu_attention_create(struct cpu_pool *pool, struct cpu_attention **out)
{
    struct cpu_attention *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->pool = pool;
    c->nscratch = cpu_pool_threads(pool);
    c->scratch = calloc((size_t)c->nscratch, sizeof *c->scratch);
    if (!c->scratch) {
        free(c);
        return -ENOMEM;
    }
    for (int i = 0; i < c->nscratch; i++) {
        c->scratch[i] = aligned_alloc(64, sizeof(struct tile_scratch));
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

int cpu_attention_run(struct cpu_attention *c, const struct attn_args *a)
{
    if (a->D < 1 || a->D > CPU_MAX_HEAD_DIM || attn_dv(a) < 1 || attn_dv(a) > a->D || a->Hkv < 1 ||
        a->Hq % a->Hkv != 0)
        return -EINVAL;
    if (a->B == 0 || a->Hq == 0 || a->Sq == 0)
        return 0;
    struct attn_plan pl = {
        .a = a,
        .qblocks = (a->Sq + QB - 1) / QB,
        .Dp = (int)((a->D + DPAD - 1) / DPAD * DPAD),
        .Dvp = (int)((attn_dv(a) + DPAD - 1) / DPAD * DPAD),
        .qscale = a->scale * (float)M_LOG2E,
        .transform = a->variant.soft_cap > 0.0f || a->variant.alibi_slopes,
        .scratch = c->scratch,
    };
    const uint64_t t0 = backend_now_ns();
    for (uint32_t i = 0; i < attn_runs(a); i++)
        cpu_pool_run(c->pool, a->B * a->Hq * pl.qblocks, attn_task, &pl);
    /* The compute alone, as a GPU's events time its kernel: status and the metrics then
     * split a job's time the same way on every backend. */
    if (a->exec.timing)
        a->exec.timing->kernel_ns = (backend_now_ns() - t0) / attn_runs(a);
    return 0;
}
