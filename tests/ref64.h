/* The tests' one float64 attention reference and one tolerance table, shared by every test. */
#ifndef GLLM_REF64_H
#define GLLM_REF64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gllm/gllm.h"

/* Element i of an f32, f16 or bf16 array, widened; and stored rounded to the dtype. */
double elem_get(const void *base, gllm_dtype dt, int64_t idx);
void elem_set(void *base, gllm_dtype dt, int64_t idx, double x);
/* Uniform in [-1, 1), rounded to the dtype, deterministic per seed (splitmix64). */
void fill_random(void *base, gllm_dtype dt, size_t n, uint64_t *seed);
uint64_t rng_next(uint64_t *s);

/* Keys and values as the reference reads them: element d of key (or value) j of kv head hk
 * of sequence b. Dense views and paged caches each provide one. */
struct ref64_kv {
    double (*get)(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value);
    const void *ctx;
};

/* One query row q[D] over keys [0, visible) of (b, hk): out[D]; *lse (optional) the row's
 * log-sum-exp. A row that sees no key comes out as zeros with lse = -inf. */
void ref64_row(const double *q, int64_t D, const struct ref64_kv *kv, int64_t b, int64_t hk,
               int64_t visible, double scale, double *out, double *lse);

/* An attention variant as gllm.h defines it, written from that definition alone (not from
 * any backend's code): masks per (query position, key) and the score's transforms. */
struct ref64_variant {
    bool causal;
    bool window;                  /* window_left/right read (-1: no edge that side) */
    int64_t window_left, window_right;
    int64_t chunk;                /* 0: none */
    double soft_cap;              /* 0: none */
    const float *alibi_slopes;    /* [Hq] or NULL */
    const float *sinks;           /* [Hq] or NULL */
};
/* Query head h's row q[D] at absolute position pos over keys [0, Skv) of (b, h / group hk):
 * out[Dv] and *lse (optional; the log of the softmax's whole denominator, the sink's term
 * included). A row that sees no key is zeros, lse -inf (sinks[h] with sinks). */
void ref64_row_variant(const double *q, int64_t D, int64_t Dv, const struct ref64_kv *kv,
                       int64_t b, int64_t h, int64_t hk, int64_t Skv, int64_t pos, double scale,
                       const struct ref64_variant *v, double *out, double *lse);

/* A strided 4-d view [b, h, s, d] in elements. */
struct ref_view {
    const void *data;
    gllm_dtype dtype;
    int64_t st[4];
};

/* Dense attention (GQA by h / (Hq / Hkv); causal aligned bottom-right): out[b][h][i][d] as
 * contiguous doubles, lse[b][h][i] when lse is not NULL. */
void ref64_attention(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv, int64_t D,
                     struct ref_view q, struct ref_view k, struct ref_view v, bool causal,
                     double scale, double *out, double *lse);
/* The same with v's head dim Dv (out [b][h][i][Dv]) and a variant (its causal replaces the
 * argument above); row i is at position i + Skv - Sq. */
void ref64_attention_variant(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Skv,
                             int64_t D, int64_t Dv, struct ref_view q, struct ref_view k,
                             struct ref_view v, const struct ref64_variant *var, double scale,
                             double *out, double *lse);

/* The one tolerance table: what is left after the reference reads the same rounded inputs
 * (fp32 accumulation, probabilities rounded to the dtype on tensor cores, the output rounded
 * to the dtype). out: max |got - want| / max |want|; lse: |got - want| / max(1, |want|). */
struct ref64_tol {
    double out, lse;
};
struct ref64_tol ref64_tolerance(gllm_dtype dt);

/* max |got - want| / max |want| over n; infinite when either side has a NaN the other has
 * not (an unwritten, NaN-poisoned element). */
double ref64_rel_error(const double *got, const double *want, size_t n);
/* Largest lse error over n in the table's measure; infinite when -inf (a row that sees no
 * key) is not matched exactly or when got is NaN. */
double ref64_lse_error(const double *got, const double *want, size_t n);

#endif
