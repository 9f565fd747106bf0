/* The tests' one float64 attention reference and one tolerance table. */
#include <math.h>
#include <stdlib.h>

#include "gllm/elem.h"
#include "ref64.h"

double elem_get(const void *base, gllm_dtype dt, int64_t idx)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return gllm_f16_to_f32(((const uint16_t *)base)[idx]);
    case GLLM_DTYPE_BF16: return gllm_bf16_to_f32(((const uint16_t *)base)[idx]);
    default: return ((const float *)base)[idx];
    }
}

void elem_set(void *base, gllm_dtype dt, int64_t idx, double x)
{
    switch (dt) {
    case GLLM_DTYPE_F16: ((uint16_t *)base)[idx] = gllm_f32_to_f16((float)x); break;
    case GLLM_DTYPE_BF16: ((uint16_t *)base)[idx] = gllm_f32_to_bf16((float)x); break;
    default: ((float *)base)[idx] = (float)x; break;
    }
}

uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fill_random(void *base, gllm_dtype dt, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        elem_set(base, dt, (int64_t)i, (double)(rng_next(seed) >> 11) / 4503599627370496.0 - 1.0);
}

static double floor_div(int64_t x, int64_t y)
{
    return floor((double)x / (double)y);
}

/* Whether the query at pos sees key j: gllm.h's definition, mask by mask. */
static bool sees(const struct ref64_variant *v, int64_t pos, int64_t j)
{
    if (v->causal && j > pos)
        return false;
    if (v->window && v->window_left >= 0 && j < pos - v->window_left)
        return false;
    if (v->window && v->window_right >= 0 && j > pos + v->window_right)
        return false;
    if (v->chunk > 0 && floor_div(pos, v->chunk) != floor_div(j, v->chunk))
        return false;
    return true;
}

void ref64_row_variant(const double *q, int64_t D, int64_t Dv, const struct ref64_kv *kv,
                       int64_t b, int64_t h, int64_t hk, int64_t Skv, int64_t pos, double scale,
                       const struct ref64_variant *v, double *out, double *lse)
{
    double *s = malloc((size_t)(Skv > 0 ? Skv : 1) * sizeof *s);
    bool *seen = malloc((size_t)(Skv > 0 ? Skv : 1) * sizeof *seen);
    if (!s || !seen)
        abort();   /* a test helper: no way to go on */
    double mx = v->sinks ? (double)v->sinks[h] : -INFINITY, sum = 0;
    int64_t visible = 0;
    for (int64_t j = 0; j < Skv; j++) {
        if (!(seen[j] = sees(v, pos, j)))
            continue;
        visible++;
        double acc = 0;
        for (int64_t d = 0; d < D; d++)
            acc += q[d] * kv->get(kv->ctx, b, hk, j, d, false);
        acc *= scale;
        if (v->soft_cap > 0)
            acc = v->soft_cap * tanh(acc / v->soft_cap);
        if (v->alibi_slopes)
            acc += (double)v->alibi_slopes[h] * (double)(j - pos);
        s[j] = acc;
        mx = fmax(mx, acc);
    }
    for (int64_t j = 0; j < Skv; j++)
        if (seen[j])
            sum += (s[j] = exp(s[j] - mx));
    if (v->sinks && mx != -INFINITY)
        sum += exp((double)v->sinks[h] - mx);
    for (int64_t d = 0; d < Dv; d++) {
        double acc = 0;
        for (int64_t j = 0; j < Skv; j++)
            if (seen[j])
                acc += s[j] * kv->get(kv->ctx, b, hk, j, d, true);
        out[d] = visible > 0 ? acc / sum : 0.0;
    }
    if (lse)
        *lse = sum > 0 ? mx + log(sum) : -INFINITY;
    free(s);
    free(seen);
}

void ref64_row(const double *q, int64_t D, const struct ref64_kv *kv, int64_t b, int64_t hk,
               int64_t visible, double scale, double *out, double *lse)
{
    const struct ref64_variant causal = {.causal = true};
    ref64_row_variant(q, D, D, kv, b, 0, hk, visible, visible - 1, scale, &causal, out, lse);
}

struct dense_kv {
    const struct ref_view *k, *v;
};

static double dense_get(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value)
{
    const struct dense_kv *c = ctx;
    const struct ref_view *t = value ? c->v : c->k;
    return elem_get(t->data, t->dtype, b * t->st[0] + hk * t->st[1] + j * t->st[2] + d * t->st[3]);
}

void ref64_attention_variant(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv,
                             int64_t D, int64_t Dv, struct ref_view q, struct ref_view k,
                             struct ref_view v, const struct ref64_variant *var, double scale,
                             double *out, double *lse)
{
    struct dense_kv ctx = {&k, &v};
    struct ref64_kv kv = {dense_get, &ctx};
    double *row = malloc((size_t)(D > 0 ? D : 1) * sizeof *row);
    if (!row)
        abort();
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Sq; i++) {
                for (int64_t d = 0; d < D; d++)
                    row[d] = elem_get(q.data, q.dtype,
                                      b * q.st[0] + h * q.st[1] + i * q.st[2] + d * q.st[3]);
                int64_t r = (b * Hq + h) * Sq + i;
                ref64_row_variant(row, D, Dv, &kv, b, h, h / (Hq / Hkv), Skv, i + Skv - Sq,
                                  scale, var, out + r * Dv, lse ? lse + r : NULL);
            }
    free(row);
}

void ref64_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                     struct ref_view q, struct ref_view k, struct ref_view v, bool causal,
                     double scale, double *out, double *lse)
{
    const struct ref64_variant var = {.causal = causal};
    ref64_attention_variant(B, Hq, Hkv, Sq, Skv, D, D, q, k, v, &var, scale, out, lse);
}

struct ref64_tol ref64_tolerance(gllm_dtype dt)
{
    switch (dt) {
    case GLLM_DTYPE_F16: return (struct ref64_tol){3e-3, 5e-3};
    case GLLM_DTYPE_BF16: return (struct ref64_tol){2e-2, 5e-2};
    default: return (struct ref64_tol){1e-5, 1e-4};
    }
}

double ref64_rel_error(const double *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i]))
            return INFINITY;
        double e = fabs(got[i] - want[i]);
        num = e > num ? e : num;
        den = fabs(want[i]) > den ? fabs(want[i]) : den;
    }
    return den > 0 ? num / den : num;
}

double ref64_lse_error(const double *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(want[i]) || isinf(got[i]) || isnan(got[i])) {
            if (!(got[i] == want[i]))
                return INFINITY;
            continue;
        }
        double e = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}
