/* The CPU flash-attention kernel body, built once per ISA level (cpu_fa_<level>.c). */
/*
 * Included by a file compiled with one level's target flags (-march=x86-64-v3, ...), after
 * it defines FA_TASK (the entry's name); the lane width W follows those flags: 16 floats
 * with AVX-512, 8 with AVX2, 4 otherwise. Everything here is static, so each build is
 * its own copy and nothing of one level's code runs on a CPU picked for another.
 *
 * A task is a block of query rows that share a kv head: up to FA_MAX_ROWS (heads of the GQA
 * group) x (query positions), so each K/V tile is read once for every head of its group.
 * The task walks its visible keys in tiles of FA_KB keys; per tile it computes the scores
 * into s[key][row] (rows in vector lanes), masks, runs the online softmax in f32 (base 2:
 * exp2 from a polynomial, the max and the sum per row in lanes), rescales the output and
 * accumulates P V. Scores come from one of two micro-kernels: with many rows an outer
 * product over Q transposed (rows in lanes, one key broadcast), with few rows (decode) dot
 * products along d. K and V rows are read in place when they are f32 with unit stride
 * (dense or paged alike), else widened row by row into the scratch. A decode job with too
 * few tasks for the threads is split along the keys (split-K): each part leaves its max,
 * sum and output in fa_job.partial and the planner combines them.
 */
#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu_fa.h"
#include "gllm/elem.h"

#if defined(__AVX512F__)
#define W 16
#elif defined(__AVX2__)
#define W 8
#else
#define W 4
#endif

typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));
typedef uint16_t vh __attribute__((vector_size(W * 2)));

/* The helpers taking vectors are always inlined, so no vector crosses a call ABI. */
#pragma GCC diagnostic ignored "-Wpsabi"
#define INLINE static inline __attribute__((always_inline))

INLINE vf ld(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void st(float *p, vf v)
{
    memcpy(p, &v, sizeof v);
}

INLINE vi ldi(const int32_t *p)
{
    vi v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void sti(int32_t *p, vi v)
{
    memcpy(p, &v, sizeof v);
}

/* x - 0 is x for every x (0 + x is not, for -0), so this folds to one broadcast, from
 * memory where x comes from there. */
INLINE vf splat(float x)
{
    return x - (vf){0};
}

INLINE vf vsel(vi m, vf a, vf b)
{
    return (vf)((m & (vi)a) | (~m & (vi)b));
}

/* max that drops a NaN (the NaN flag carries it instead). */
INLINE vf vmax(vf a, vf b)
{
    return vsel(a > b, a, b);
}

INLINE float hsum(vf v)
{
#if defined(__AVX512F__)
    return _mm512_reduce_add_ps((__m512)v);
#elif defined(__AVX__)
    __m128 x = _mm_add_ps(_mm256_castps256_ps128((__m256)v), _mm256_extractf128_ps((__m256)v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
#else
    float s = 0.0f;
    for (int i = 0; i < W; i++)
        s += v[i];
    return s;
#endif
}

/* 2^x for x <= 0: x = n + f with n an integer and |f| <= 1/2, 2^f from its Taylor series to
 * f^7 (relative error below 2e-7), 2^n put in the exponent. x <= -127 (and -inf, and NaN)
 * gives exactly 0, so a masked score's probability is 0. */
INLINE vf vexp2(vf x)
{
    x = vmax(x, splat(-127.0f));
    const vf magic = splat(12582912.0f);   /* 1.5 * 2^23: adding it rounds to an integer */
    const vf n = (x + magic) - magic;
    const vf f = x - n;
    vf p = splat(1.5252734e-5f);
    p = p * f + 1.5403530e-4f;
    p = p * f + 1.3333558e-3f;
    p = p * f + 9.6181291e-3f;
    p = p * f + 5.5504109e-2f;
    p = p * f + 2.4022651e-1f;
    p = p * f + 6.9314718e-1f;
    p = p * f + 1.0f;
    const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)e;
}

INLINE float load_elem(const void *base, gllm_dtype dt, int64_t idx)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return gllm_f16_to_f32(((const uint16_t *)base)[idx]);
    case GLLM_DTYPE_BF16: return gllm_bf16_to_f32(((const uint16_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

/* dst[0, n) = src[off + d * stride] widened to f32, dst[n, npad) = 0. */
INLINE void widen_row(float *dst, const void *src, gllm_dtype dt, int64_t off, int64_t stride,
                      int n, int npad)
{
    int d = 0;
    if (stride == 1) {
        if (dt == GLLM_DTYPE_F32) {
            memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float));
            d = n;
        } else if (dt == GLLM_DTYPE_BF16) {
            const uint16_t *s = (const uint16_t *)src + off;
            for (; d + W <= n; d += W) {
                vh h;
                memcpy(&h, s + d, sizeof h);
                st(dst + d, (vf)(__builtin_convertvector(h, vu) << 16));
            }
        } else {
#if defined(__AVX512F__)
            const uint16_t *s = (const uint16_t *)src + off;
            for (; d + 16 <= n; d += 16)
                _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(s + d))));
#elif defined(__F16C__)
            const uint16_t *s = (const uint16_t *)src + off;
            for (; d + 8 <= n; d += 8)
                _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(s + d))));
#endif
        }
    }
    for (; d < n; d++)
        dst[d] = load_elem(src, dt, off + d * stride);
    for (; d < npad; d++)
        dst[d] = 0.0f;
}

/* s[j][r] = q[r] . k[j] for R (a constant after inlining) rows of q [R][Dp], NK keys at a
 * time (a constant too): each q vector loaded serves NK keys, and the sums do not wait on
 * each other. */
INLINE void dot_scores_n(float *restrict s, const float *restrict q, const float *const *kp,
                         int cols, int Dp, int Rp, const int R, const int NK)
{
    int j = 0;
    for (; j + NK <= cols; j += NK) {
        vf a[4][FA_DOT_ROWS];
        for (int n = 0; n < NK; n++)
            for (int r = 0; r < R; r++)
                a[n][r] = splat(0.0f);
        for (int d = 0; d < Dp; d += W) {
            vf x[4];
            for (int n = 0; n < NK; n++)
                x[n] = ld(kp[j + n] + d);
            for (int r = 0; r < R; r++) {
                const vf y = ld(q + (size_t)r * Dp + d);
                for (int n = 0; n < NK; n++)
                    a[n][r] += y * x[n];
            }
        }
        for (int n = 0; n < NK; n++)
            for (int r = 0; r < R; r++)
                s[(size_t)(j + n) * Rp + r] = hsum(a[n][r]);
    }
    for (; j < cols; j++) {
        vf a0[FA_DOT_ROWS];
        for (int r = 0; r < R; r++)
            a0[r] = splat(0.0f);
        for (int d = 0; d < Dp; d += W) {
            const vf x0 = ld(kp[j] + d);
            for (int r = 0; r < R; r++)
                a0[r] += ld(q + (size_t)r * Dp + d) * x0;
        }
        for (int r = 0; r < R; r++)
            s[(size_t)j * Rp + r] = hsum(a0[r]);
    }
}

static void dot_scores(float *restrict s, const float *restrict q, const float *const *kp,
                       int cols, int Dp, int Rp, int R)
{
    switch (R) {
    case 1: dot_scores_n(s, q, kp, cols, Dp, Rp, 1, 4); break;
    case 2: dot_scores_n(s, q, kp, cols, Dp, Rp, 2, 4); break;
    case 3: dot_scores_n(s, q, kp, cols, Dp, Rp, 3, 4); break;
    case 4: dot_scores_n(s, q, kp, cols, Dp, Rp, 4, 4); break;
    case 5: dot_scores_n(s, q, kp, cols, Dp, Rp, 5, 2); break;
    case 6: dot_scores_n(s, q, kp, cols, Dp, Rp, 6, 2); break;
    case 7: dot_scores_n(s, q, kp, cols, Dp, Rp, 7, 2); break;
    default: dot_scores_n(s, q, kp, cols, Dp, Rp, FA_DOT_ROWS, 2); break;
    }
}

/* s[j][c..c+W) = sum_d qt[d][c..] * k[j][d]: rows in lanes, each key element broadcast;
 * a 2-vector x 4-key block of accumulators. */
static void outer_scores(float *restrict s, const float *restrict qt, const float *const *kp,
                         int cols, int D, int Rp)
{
    int j = 0;
    for (; j + 4 <= cols; j += 4) {
        const float *k0 = kp[j], *k1 = kp[j + 1], *k2 = kp[j + 2], *k3 = kp[j + 3];
        int c = 0;
        for (; c + 2 * W <= Rp; c += 2 * W) {
            vf a00 = splat(0.0f), a01 = a00, a02 = a00, a03 = a00;
            vf a10 = a00, a11 = a00, a12 = a00, a13 = a00;
            for (int d = 0; d < D; d++) {
                const vf x0 = ld(qt + (size_t)d * Rp + c), x1 = ld(qt + (size_t)d * Rp + c + W);
                const vf b0 = splat(k0[d]), b1 = splat(k1[d]), b2 = splat(k2[d]), b3 = splat(k3[d]);
                a00 += x0 * b0; a01 += x0 * b1; a02 += x0 * b2; a03 += x0 * b3;
                a10 += x1 * b0; a11 += x1 * b1; a12 += x1 * b2; a13 += x1 * b3;
            }
            float *o = s + (size_t)j * Rp + c;
            st(o, a00), st(o + W, a10);
            st(o + Rp, a01), st(o + Rp + W, a11);
            st(o + 2 * Rp, a02), st(o + 2 * Rp + W, a12);
            st(o + 3 * Rp, a03), st(o + 3 * Rp + W, a13);
        }
        for (; c < Rp; c += W) {
            vf a0 = splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < D; d++) {
                const vf x0 = ld(qt + (size_t)d * Rp + c);
                a0 += x0 * splat(k0[d]); a1 += x0 * splat(k1[d]);
                a2 += x0 * splat(k2[d]); a3 += x0 * splat(k3[d]);
            }
            float *o = s + (size_t)j * Rp + c;
            st(o, a0), st(o + Rp, a1), st(o + 2 * Rp, a2), st(o + 3 * Rp, a3);
        }
    }
    for (; j < cols; j++) {
        const float *k0 = kp[j];
        for (int c = 0; c < Rp; c += W) {
            vf a0 = splat(0.0f), a1 = a0;
            int d = 0;
            for (; d + 2 <= D; d += 2) {
                a0 += ld(qt + (size_t)d * Rp + c) * splat(k0[d]);
                a1 += ld(qt + (size_t)(d + 1) * Rp + c) * splat(k0[d + 1]);
            }
            if (d < D)
                a0 += ld(qt + (size_t)d * Rp + c) * splat(k0[d]);
            st(s + (size_t)j * Rp + c, a0 + a1);
        }
    }
}

/* o[r][:] += sum_j s[j][r] * v[j][:] for rows [0, R4) (a multiple of 4), 4 rows x 4 vectors
 * of accumulators. */
static void accumulate_pv(float *restrict o, const float *restrict s, const float *const *vp,
                          int cols, int Dvp, int Rp, int R4)
{
    for (int r = 0; r < R4; r += 4) {
        float *o0 = o + (size_t)r * Dvp, *o1 = o0 + Dvp, *o2 = o1 + Dvp, *o3 = o2 + Dvp;
        int d = 0;
        for (; d + 4 * W <= Dvp; d += 4 * W) {
            vf a00 = ld(o0 + d), a01 = ld(o0 + d + W), a02 = ld(o0 + d + 2 * W), a03 = ld(o0 + d + 3 * W);
            vf a10 = ld(o1 + d), a11 = ld(o1 + d + W), a12 = ld(o1 + d + 2 * W), a13 = ld(o1 + d + 3 * W);
            vf a20 = ld(o2 + d), a21 = ld(o2 + d + W), a22 = ld(o2 + d + 2 * W), a23 = ld(o2 + d + 3 * W);
            vf a30 = ld(o3 + d), a31 = ld(o3 + d + W), a32 = ld(o3 + d + 2 * W), a33 = ld(o3 + d + 3 * W);
            for (int j = 0; j < cols; j++) {
                const float *v = vp[j] + d, *p = s + (size_t)j * Rp + r;
                const vf v0 = ld(v), v1 = ld(v + W), v2 = ld(v + 2 * W), v3 = ld(v + 3 * W);
                const vf p0 = splat(p[0]), p1 = splat(p[1]), p2 = splat(p[2]), p3 = splat(p[3]);
                a00 += p0 * v0; a01 += p0 * v1; a02 += p0 * v2; a03 += p0 * v3;
                a10 += p1 * v0; a11 += p1 * v1; a12 += p1 * v2; a13 += p1 * v3;
                a20 += p2 * v0; a21 += p2 * v1; a22 += p2 * v2; a23 += p2 * v3;
                a30 += p3 * v0; a31 += p3 * v1; a32 += p3 * v2; a33 += p3 * v3;
            }
            st(o0 + d, a00), st(o0 + d + W, a01), st(o0 + d + 2 * W, a02), st(o0 + d + 3 * W, a03);
            st(o1 + d, a10), st(o1 + d + W, a11), st(o1 + d + 2 * W, a12), st(o1 + d + 3 * W, a13);
            st(o2 + d, a20), st(o2 + d + W, a21), st(o2 + d + 2 * W, a22), st(o2 + d + 3 * W, a23);
            st(o3 + d, a30), st(o3 + d + W, a31), st(o3 + d + 2 * W, a32), st(o3 + d + 3 * W, a33);
        }
        for (; d < Dvp; d += W) {
            vf a0 = ld(o0 + d), a1 = ld(o1 + d), a2 = ld(o2 + d), a3 = ld(o3 + d);
            for (int j = 0; j < cols; j++) {
                const vf v = ld(vp[j] + d);
                const float *p = s + (size_t)j * Rp + r;
                a0 += splat(p[0]) * v; a1 += splat(p[1]) * v;
                a2 += splat(p[2]) * v; a3 += splat(p[3]) * v;
            }
            st(o0 + d, a0), st(o1 + d, a1), st(o2 + d, a2), st(o3 + d, a3);
        }
    }
}

/* The soft-cap and ALiBi on every score of the tile (base 2, scaled): the cap applies to the
 * natural-log score, before the bias (Gemma 2's order). Masked keys are set to -inf after. */
static void transform_tile(const struct fa_job *jb, float *s, int cols, int Rp, int R, int nqt,
                           int64_t hbase, int64_t k0, int64_t pos0)
{
    const float cap = jb->variant.soft_cap;
    for (int r = 0; r < R; r++) {
        const int64_t h = hbase + r / nqt, pos = pos0 + r % nqt;
        const float slope = jb->variant.alibi_slopes
                                ? jb->variant.alibi_slopes[h] * (float)M_LOG2E : 0.0f;
        for (int j = 0; j < cols; j++) {
            float x = s[(size_t)j * Rp + r];
            if (cap > 0.0f)
                x = cap * tanhf(x * (float)M_LN2 / cap) * (float)M_LOG2E;
            s[(size_t)j * Rp + r] = x + slope * (float)(k0 + j - pos);
        }
    }
}

/* Scores of keys outside a row's [lo, hi) become -inf; rlo/rhi are relative to the tile. */
static void mask_tile(float *s, const int32_t *rlo, const int32_t *rhi, int cols, int Rp)
{
    for (int c = 0; c < Rp; c += W) {
        const vi lo = ldi(rlo + c), hi = ldi(rhi + c);
        for (int j = 0; j < cols; j++) {
            const vi jv = (vi){0} + j;
            const vi vis = (lo <= jv) & (jv < hi);
            float *p = s + (size_t)j * Rp + c;
            st(p, vsel(vis, ld(p), splat(-INFINITY)));
        }
    }
}

/* The online softmax over one tile, rows in lanes: new max, the rescale factor alpha of what
 * was accumulated, probabilities in place of the scores, the running sum. */
static void softmax_tile(struct fa_scratch *t, int cols, int Rp)
{
    for (int c = 0; c < Rp; c += W) {
        const vf mold = ld(t->m + c);
        vf mx = mold;
        vi nan = ldi(t->nan + c);
        for (int j = 0; j < cols; j++) {
            const vf x = ld(t->s + (size_t)j * Rp + c);
            mx = vmax(mx, x);
            nan |= x != x;
        }
        /* A row with nothing visible yet keeps max -inf; subtracting 0 then keeps its
         * probabilities at exactly 0 instead of NaN. */
        const vf msub = vsel(mx == splat(-INFINITY), splat(0.0f), mx);
        const vf alpha = vexp2(mold - msub);
        vf sum = splat(0.0f);
        for (int j = 0; j < cols; j++) {
            float *p = t->s + (size_t)j * Rp + c;
            const vf e = vexp2(ld(p) - msub);
            st(p, e);
            sum += e;
        }
        st(t->l + c, ld(t->l + c) * alpha + sum);
        st(t->m + c, mx);
        st(t->alpha + c, alpha);
        sti(t->nan + c, nan);
    }
}

static int imin(int a, int b)
{
    return a < b ? a : b;
}

void FA_TASK(void *ctx, int64_t task, int thread)
{
    const struct fa_job *jb = ctx;
    struct fa_scratch *t = jb->scratch[thread];
    const gllm_dtype dt = jb->dtype;

    /* Which rows and keys: the heaviest query block (the last, under a causal mask) first. */
    const int64_t b = fa_seq_of(jb, task);
    int64_t lt = task - jb->task0[b];
    const int64_t Sq = fa_sq(jb, b), Skv = fa_skv(jb, b);
    const int64_t qblocks = (Sq + jb->nq - 1) / jb->nq;
    const int split = (int)(lt % jb->nsplit);
    lt /= jb->nsplit;
    const int64_t qb = qblocks - 1 - lt % qblocks;
    lt /= qblocks;
    const int hc = (int)(lt % jb->hchunks);
    const int64_t hk = lt / jb->hchunks;
    const int64_t q0 = qb * jb->nq;
    const int nqt = (int)(Sq - q0 < jb->nq ? Sq - q0 : jb->nq);
    const int g0 = hc * jb->ng;
    const int ngt = imin(jb->ng, (int)jb->group - g0);
    const int R = ngt * nqt, R4 = (R + 3) & ~3, Rp = (R + W - 1) / W * W;
    const int D = (int)jb->D, Dv = (int)jb->Dv;
    const int Dp = (D + W - 1) / W * W, Dvp = (Dv + W - 1) / W * W;
    const bool dot = R <= FA_DOT_ROWS;
    const int64_t hbase = hk * jb->group + g0;   /* row r is head hbase + r / nqt */
    const int64_t shift = Skv - Sq;              /* row r is at position q0 + r % nqt + shift */

    /* This split's keys. */
    const int64_t per = (Skv + jb->nsplit - 1) / jb->nsplit;
    const int64_t chunk = (per + FA_KB - 1) / FA_KB * FA_KB;
    const int64_t sk0 = split * chunk < Skv ? split * chunk : Skv;
    const int64_t sk1 = sk0 + chunk < Skv ? sk0 + chunk : Skv;

    int64_t kv_begin = sk1, kv_end = sk0;
    for (int r = 0; r < Rp; r++) {
        t->m[r] = -INFINITY;
        t->l[r] = 0.0f;
        t->nan[r] = 0;
        if (r >= R) {
            t->lo[r] = t->hi[r] = 0;
            if (!dot)
                for (int d = 0; d < D; d++)
                    t->q[(size_t)d * Rp + r] = 0.0f;
            continue;
        }
        const int64_t h = hbase + r / nqt, i = q0 + r % nqt;
        int64_t lo, hi;
        fa_visible(jb, Skv, i + shift, &lo, &hi);
        lo = lo > sk0 ? lo : sk0;
        hi = hi < sk1 ? hi : sk1;
        if (hi < lo)
            hi = lo;
        t->lo[r] = lo, t->hi[r] = hi;
        if (lo < hi) {
            kv_begin = lo < kv_begin ? lo : kv_begin;
            kv_end = hi > kv_end ? hi : kv_end;
        }
        /* Pre-scaled by scale * log2(e); the outer kernel wants it transposed. */
        float *row = dot ? t->q + (size_t)r * Dp : t->k;
        widen_row(row, jb->q, dt, fa_q_off(jb, b, h, i), jb->q_st[3], D, Dp);
        for (int d = 0; d < Dp; d++)
            row[d] *= jb->qscale;
        if (!dot)
            for (int d = 0; d < D; d++)
                t->q[(size_t)d * Rp + r] = row[d];
    }
    memset(t->o, 0, (size_t)R4 * Dvp * sizeof(float));
    /* The dot kernel writes rows [0, R) only: the lanes past them stay finite zeros. */
    if (dot)
        memset(t->s, 0, (size_t)FA_KB * Rp * sizeof(float));

    const bool k_in_place = dt == GLLM_DTYPE_F32 && jb->k_st[3] == 1 && (!dot || D == Dp);
    const bool v_in_place = dt == GLLM_DTYPE_F32 && jb->v_st[3] == 1 && Dv == Dvp;
    for (int64_t k0 = kv_begin; k0 < kv_end; k0 += FA_KB) {
        const int cols = (int)(kv_end - k0 < FA_KB ? kv_end - k0 : FA_KB);
        for (int j = 0; j < cols; j++) {
            const int64_t ko = fa_kv_off(jb, jb->k_st, b, hk, k0 + j);
            if (k_in_place) {
                t->kp[j] = (const float *)jb->k + ko;
            } else {
                widen_row(t->k + (size_t)j * Dp, jb->k, dt, ko, jb->k_st[3], D, Dp);
                t->kp[j] = t->k + (size_t)j * Dp;
            }
        }
        if (dot)
            dot_scores(t->s, t->q, t->kp, cols, Dp, Rp, R);
        else
            outer_scores(t->s, t->q, t->kp, cols, D, Rp);
        if (jb->transform)
            transform_tile(jb, t->s, cols, Rp, R, nqt, hbase, k0, q0 + shift);
        bool full = true;
        for (int r = 0; r < R; r++)
            full &= t->lo[r] <= k0 && t->hi[r] >= k0 + cols;
        if (!full) {
            for (int r = 0; r < Rp; r++) {
                const int64_t lo = t->lo[r] - k0, hi = t->hi[r] - k0;
                t->rlo[r] = (int32_t)(lo < 0 ? 0 : lo > FA_KB ? FA_KB : lo);
                t->rhi[r] = (int32_t)(hi < 0 ? 0 : hi > FA_KB ? FA_KB : hi);
                if (t->rhi[r] < t->rlo[r])
                    t->rhi[r] = t->rlo[r];
            }
            mask_tile(t->s, t->rlo, t->rhi, cols, Rp);
        }
        softmax_tile(t, cols, Rp);
        for (int r = 0; r < R4; r++) {
            const float a = t->alpha[r];
            if (a != 1.0f) {
                float *o = t->o + (size_t)r * Dvp;
                for (int d = 0; d < Dvp; d += W)
                    st(o + d, ld(o + d) * a);
            }
        }
        for (int j = 0; j < cols; j++) {
            const int64_t vo = fa_kv_off(jb, jb->v_st, b, hk, k0 + j);
            if (v_in_place) {
                t->vp[j] = (const float *)jb->v + vo;
            } else {
                widen_row(t->v + (size_t)j * Dvp, jb->v, dt, vo, jb->v_st[3], Dv, Dvp);
                t->vp[j] = t->v + (size_t)j * Dvp;
            }
        }
        accumulate_pv(t->o, t->s, t->vp, cols, Dvp, Rp, R4);
    }

    for (int r = 0; r < R; r++) {
        const int64_t h = hbase + r / nqt, i = q0 + r % nqt;
        const float *o = t->o + (size_t)r * Dvp;
        if (jb->nsplit == 1) {
            fa_finish_row(jb, b, h, i, t->m[r], t->l[r], o, t->nan[r] != 0);
            continue;
        }
        float *p = jb->partial +
                   ((jb->row0[b] + h * Sq + i) * jb->nsplit + split) * jb->pstride;
        p[0] = t->m[r], p[1] = t->l[r], p[2] = t->nan[r] ? 1.0f : 0.0f;
        memcpy(p + 3, o, (size_t)Dv * sizeof(float));
    }
}
