/* Backend conformance: every operation on every compiled-in backend against ref64 (float64). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "cpu_isa.h"
#include "proto.h"
#include "ref64.h"

/* ==== Adapter: every call into the backend interface (daemon/backend.h) is in this section.
 * The rest of the file describes operations in its own terms (struct dense_job, struct
 * paged_job) and reaches a backend only through the be_* functions below. ==== */

struct be {
    struct backend *b;
    int dev;
};

/* Names of the compiled-in backends, from the registry: up to max, each < 16 bytes. */
static int be_names(char names[][16], int max)
{
    const char *s = backend_names();     /* "cuda, cpu" */
    int n = 0;
    while (*s && n < max) {
        size_t len = strcspn(s, ", ");
        if (len > 0 && len < 16) {
            memcpy(names[n], s, len);
            names[n++][len] = '\0';
        }
        s += len;
        s += strspn(s, ", ");
    }
    return n;
}

/* 0 and an open backend, or an error and a one-line reason it cannot open here. */
static int be_open(const char *name, struct be *out, char *why, size_t len)
{
    struct backend_config cfg = {.threads = 2, .deterministic = true};
    out->dev = 0;
    return backend_select(name, &cfg, &out->b, why, len);
}

static void be_close(struct be *be)
{
    if (be->b)
        backend_close(be->b);
    be->b = NULL;
}

/* Whether the open backend computes what it declares without a device (what gllmd
 * --capabilities and docs/backends.md say): dtypes, max head dim and every mode. false with
 * the first difference in why, or with why "none" for a backend that declares nothing. */
static bool be_as_declared(const struct be *be, char *why, size_t len)
{
    const char *bname = backend_name(be->b);
    for (size_t i = 0; i < backend_registered(); i++) {
        const char *name;
        bool by_auto;
        struct backend_caps d;
        if (!backend_declared(i, &name, &by_auto, &d)) {
            if (strcmp(name, bname) == 0) {
                snprintf(why, len, "none");
                return false;
            }
            continue;
        }
        if (strcmp(name, bname) != 0)
            continue;
        const struct backend_caps *c = backend_caps(be->b);
        if (d.dtypes != c->dtypes || d.max_head_dim != c->max_head_dim) {
            snprintf(why, len, "dtypes %#x max_head_dim %d declared, %#x %d open", d.dtypes,
                     d.max_head_dim, c->dtypes, c->max_head_dim);
            return false;
        }
        for (int m = 0; m < GLLM_MODE_COUNT; m++)
            if (memcmp(&d.modes[m], &c->modes[m], sizeof d.modes[m]) != 0) {
                snprintf(why, len, "mode %s differs", proto_mode_name((gllm_mode)m));
                return false;
            }
        return true;
    }
    snprintf(why, len, "not in the registry");
    return false;
}

static bool be_has_dtype(const struct be *be, gllm_dtype dt)
{
    return (backend_caps(be->b)->dtypes >> dt) & 1u;
}

static int be_max_head_dim(const struct be *be)
{
    return backend_caps(be->b)->max_head_dim;
}

/* The GLLM_VARIANT_* fields mode computes, and whether it takes head dim D. */
static uint32_t be_variants(const struct be *be, gllm_mode mode, int64_t D, bool *head_dim_ok)
{
    struct proto_mode_caps m[GLLM_MODE_COUNT];
    backend_mode_caps(be->b, m, NULL);
    *head_dim_ok = proto_head_dim_ok(&m[mode], D);
    return m[mode].variants;
}

/* A variant as the cases ask for it, in gllm.h's terms; slopes and sinks [Hq] made by the
 * case. */
struct var_case {
    bool window;
    int window_left, window_right;
    int chunk;
    double soft_cap;
    bool alibi, sinks;
    int64_t Dv;                 /* v's head dim; 0: D */
};

static struct attn_variant variant_of(const struct var_case *v, const float *alibi,
                                      const float *sinks)
{
    if (!v)
        return (struct attn_variant){0};
    return (struct attn_variant){.window = v->window, .window_left = v->window_left,
                                 .window_right = v->window_right, .chunk = (uint32_t)v->chunk,
                                 .soft_cap = (float)v->soft_cap, .alibi_slopes = alibi,
                                 .sinks = sinks};
}

static int be_alloc(const struct be *be, size_t bytes, void **out)
{
    return backend_dev_alloc(be->b, be->dev, bytes ? bytes : 1, out);
}

static void be_free(const struct be *be, void *p)
{
    if (p)
        backend_dev_free(be->b, be->dev, p);
}

static int be_copy(const struct be *be, void *dst, const void *src, size_t bytes, bool to_device)
{
    struct copy_args c = {.dst = dst, .src = src, .bytes = bytes, .to_device = to_device};
    return backend_copy(be->b, be->dev, &c);
}

/* A dense attention job: strides in elements, [b, h, s, d] (lse [b, h, s]). */
struct dense_job {
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, Sq, Skv, D, Dv;
    const struct var_case *var;   /* NULL: none */
    const float *alibi, *sinks;   /* [Hq], device memory with on_device */
    const void *q, *k, *v;
    void *out;
    float *lse;
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];
    bool causal, on_device;     /* on_device: every tensor is device memory (be_alloc) */
    double scale;
};

static int be_attention(const struct be *be, const struct dense_job *j)
{
    struct attn_args a = {
        .dtype = j->dtype, .B = j->B, .Hq = j->Hq, .Hkv = j->Hkv, .Sq = j->Sq, .Skv = j->Skv,
        .D = j->D, .Dv = j->Dv, .q = j->q, .k = j->k, .v = j->v, .out = j->out, .lse = j->lse,
        .causal = j->causal, .scale = (float)j->scale,
        .variant = variant_of(j->var, j->alibi, j->sinks),
        .device_mask = j->on_device ? 0x7fu : 0u,
    };
    memcpy(a.q_st, j->q_st, sizeof a.q_st);
    memcpy(a.k_st, j->k_st, sizeof a.k_st);
    memcpy(a.v_st, j->v_st, sizeof a.v_st);
    memcpy(a.o_st, j->o_st, sizeof a.o_st);
    memcpy(a.lse_st, j->lse_st, sizeof a.lse_st);
    return backend_attention(be->b, be->dev, &a);
}

/* A paged-KV job: an append (k_new/v_new, their last tokens of each sequence by q_indptr)
 * or an attention (q/out, the queries of each sequence by q_indptr, causal). Tables are
 * host memory, already consistent, except kv_indices when indices_on_device. */
struct paged_job {
    bool append;
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, D, Dv, page_size, num_pages;
    const struct var_case *var;   /* attention; NULL: none */
    const float *alibi, *sinks;
    void *k_cache, *v_cache;
    const void *q, *k_new, *v_new;
    void *out;
    int64_t nrows;              /* queries (attention) or new tokens (append) */
    const int32_t *kv_indptr, *kv_indices, *kv_len, *q_indptr;
    int32_t max_kv_len, max_q_len;
    double scale;
    bool on_device, indices_on_device;
};

static struct paged_args paged_args_of(const struct paged_job *j)
{
    struct paged_args p = {
        .op = j->append ? PAGED_APPEND : PAGED_ATTEND, .dtype = j->dtype, .B = j->B,
        .Hq = j->append ? 0 : j->Hq, .Hkv = j->Hkv, .D = j->D, .Dv = j->Dv,
        .page_size = j->page_size, .variant = variant_of(j->var, j->alibi, j->sinks),
        .num_pages = j->num_pages, .k_cache = j->k_cache, .v_cache = j->v_cache,
        .kv_indptr = j->kv_indptr, .kv_indices = j->kv_indices, .kv_len = j->kv_len,
        .q_indptr = j->q_indptr, .max_kv_len = j->max_kv_len, .max_q_len = j->max_q_len,
        .causal = !j->append, .indices_on_device = j->indices_on_device,
    };
    if (j->append) {
        p.k_new = j->k_new, p.v_new = j->v_new, p.nnew = j->nrows;
        if (j->on_device)
            p.device_mask = 1u << PG_KCACHE | 1u << PG_VCACHE | 1u << PG_KNEW | 1u << PG_VNEW;
    } else {
        p.q = j->q, p.out = j->out, p.nq = j->nrows, p.scale = (float)j->scale;
        if (j->on_device)
            p.device_mask = 1u << PG_KCACHE | 1u << PG_VCACHE | 1u << PG_Q | 1u << PG_OUT |
                            1u << PG_ALIBI | 1u << PG_SINKS;
    }
    return p;
}

/* 0 when the backend takes this job; else its code and reason (a capability, not a fault). */
static int be_paged_check(const struct be *be, const struct paged_job *j, char *why, size_t len)
{
    struct paged_args p = paged_args_of(j);
    return backend_paged_check(be->b, &p, why, len);
}

static int be_paged(const struct be *be, const struct paged_job *j, char *why, size_t len)
{
    struct paged_args p = paged_args_of(j);
    p.exec.why = why, p.exec.why_len = len;
    return backend_paged(be->b, be->dev, &p);
}

/* ==== End of the adapter. ==== */

static struct be cur;                /* the backend the running group tests */
static char cur_name[32];

#define POISON 0xff                  /* every byte: NaN in f32, f16 and bf16 */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static bool all_poison(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != POISON)
            return false;
    return true;
}

/* Host buffer h of n bytes into fresh device memory (when on_device) or itself. */
static void *place(bool on_device, const void *h, size_t n)
{
    if (!on_device)
        return (void *)h;
    void *d = NULL;
    assert_int_equal(be_alloc(&cur, n, &d), 0);
    assert_int_equal(be_copy(&cur, d, h, n, true), 0);
    return d;
}

/* Device memory d back into host buffer h (poisoned first, so a copy that writes nothing
 * shows), and freed. */
static void fetch(bool on_device, void *h, void *d, size_t n)
{
    if (!on_device)
        return;
    memset(h, POISON, n);
    assert_int_equal(be_copy(&cur, h, d, n, false), 0);
}

static void release(bool on_device, void *d)
{
    if (on_device)
        be_free(&cur, d);
}

static void skip_case(const char *what, const char *why)
{
    fprintf(stderr, "  [%s] SKIPPED %s: %s\n", cur_name, what, why);
}

/* ---- dense attention ---- */

enum layout { BHSD, BSHD, PADDED };  /* contiguous; [b, s, h, d] through strides; rows with gaps */

struct dense_case {
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, Sq, Skv, D;
    bool causal, lse;
    enum layout layout;
    double scale;                    /* 0: 1/sqrt(D) */
    const struct var_case *var;      /* NULL: none */
};

static void strides_for(enum layout l, int64_t H, int64_t S, int64_t D, int64_t st[4])
{
    int64_t row = l == PADDED ? D + 8 : D;   /* 8: rows stay 16-byte aligned in f16 */
    if (l == BSHD)
        st[3] = 1, st[1] = D, st[2] = H * D, st[0] = S * H * D;
    else
        st[3] = 1, st[2] = row, st[1] = S * row + (l == PADDED ? 8 : 0), st[0] = H * st[1];
}

/* Elements a view of shape n[4] with strides st spans. */
static size_t span(const int64_t *n, const int64_t *st, int rank)
{
    int64_t last = 0;
    for (int i = 0; i < rank; i++) {
        if (n[i] == 0)
            return 0;
        last += (n[i] - 1) * st[i];
    }
    return (size_t)last + 1;
}

/* " window 16/-1 chunk 32 cap 5 alibi sinks Dv 48", or "" for none. */
static void describe_variant(const struct var_case *v, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!v)
        return;
    size_t n = 0;
    if (v->window)
        n += (size_t)snprintf(buf + n, len - n, " window %d/%d", v->window_left, v->window_right);
    if (v->chunk && n < len)
        n += (size_t)snprintf(buf + n, len - n, " chunk %d", v->chunk);
    if (v->soft_cap != 0 && n < len)
        n += (size_t)snprintf(buf + n, len - n, " cap %g", v->soft_cap);
    if (v->alibi && n < len)
        n += (size_t)snprintf(buf + n, len - n, " alibi");
    if (v->sinks && n < len)
        n += (size_t)snprintf(buf + n, len - n, " sinks");
    if (v->Dv && n < len)
        snprintf(buf + n, len - n, " Dv %lld", (long long)v->Dv);
}

/* The GLLM_VARIANT_* fields a case asks for (head dim D). */
static uint32_t variant_fields(const struct var_case *v, int64_t D)
{
    if (!v)
        return 0;
    return (v->window && (v->window_left >= 0 || v->window_right >= 0) ? GLLM_VARIANT_WINDOW : 0) |
           (v->chunk ? GLLM_VARIANT_CHUNK : 0) | (v->soft_cap != 0 ? GLLM_VARIANT_SOFT_CAP : 0) |
           (v->alibi ? GLLM_VARIANT_ALIBI : 0) | (v->sinks ? GLLM_VARIANT_SINKS : 0) |
           (v->Dv && v->Dv != D ? GLLM_VARIANT_HEAD_DIM_V : 0);
}

/* Whether the backend computes what the case asks in mode; a case it does not is skipped,
 * loudly (a capability, not a fault: the daemon refuses such a job before it runs). */
static bool backend_takes(gllm_mode mode, const struct var_case *v, int64_t D, const char *what)
{
    bool dim_ok;
    const uint32_t have = be_variants(&cur, mode, D, &dim_ok);
    if (!dim_ok) {
        skip_case(what, "head dim not among the mode's");
        return false;
    }
    if (variant_fields(v, D) & ~have) {
        skip_case(what, "a variant field this backend does not compute in this mode");
        return false;
    }
    return true;
}

/* ALiBi's slopes (the geometric series of the paper, 2^(-8 (h + 1) / Hq)) and sinks
 * (uniform in [-2, 2)), [Hq] each; NULL when the case has none. */
static float *per_head(bool want, bool slopes, int64_t Hq, uint64_t *seed)
{
    if (!want)
        return NULL;
    float *p = xmalloc((size_t)Hq * sizeof *p);
    for (int64_t h = 0; h < Hq; h++)
        p[h] = slopes ? (float)exp2(-8.0 * (double)(h + 1) / (double)Hq)
                      : (float)((double)(rng_next(seed) >> 11) / 4503599627370496.0 * 4.0 - 2.0);
    return p;
}

static struct ref64_variant ref_variant(const struct var_case *v, bool causal, const float *alibi,
                                        const float *sinks)
{
    struct ref64_variant r = {.causal = causal, .alibi_slopes = alibi, .sinks = sinks};
    if (v) {
        r.window = v->window, r.window_left = v->window_left, r.window_right = v->window_right;
        r.chunk = v->chunk, r.soft_cap = v->soft_cap;
    }
    return r;
}

static void describe(const struct dense_case *c, char *buf, size_t len)
{
    static const char *const lname[] = {"", " bshd", " padded"};
    char var[96];
    describe_variant(c->var, var, sizeof var);
    snprintf(buf, len, "dense %s B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld%s%s%s%s",
             gllm_dtype_name(c->dtype), (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
             (long long)c->Sq, (long long)c->Skv, (long long)c->D, c->causal ? " causal" : "",
             c->lse ? " lse" : "", lname[c->layout], var);
}

/* Runs one case, once from host memory and once from device memory, against ref64. */
static void run_dense(const struct dense_case *c, uint64_t seed)
{
    char what[200];
    describe(c, what, sizeof what);
    if (!be_has_dtype(&cur, c->dtype)) {
        skip_case(what, "dtype not offered");
        return;
    }
    if (c->D > be_max_head_dim(&cur)) {
        skip_case(what, "head dim over the backend's maximum");
        return;
    }
    if (c->var && !backend_takes(GLLM_MODE_DENSE, c->var, c->D, what))
        return;
    const size_t es = gllm_dtype_size(c->dtype);
    const int64_t Dv = c->var && c->var->Dv ? c->var->Dv : c->D;
    struct dense_job j = {.dtype = c->dtype, .B = c->B, .Hq = c->Hq, .Hkv = c->Hkv, .Sq = c->Sq,
                          .Skv = c->Skv, .D = c->D, .Dv = Dv, .causal = c->causal, .var = c->var,
                          .scale = c->scale ? c->scale : 1.0 / sqrt((double)c->D)};
    strides_for(c->layout, c->Hq, c->Sq, c->D, j.q_st);
    strides_for(c->layout, c->Hkv, c->Skv, c->D, j.k_st);
    strides_for(c->layout, c->Hkv, c->Skv, Dv, j.v_st);
    strides_for(c->layout, c->Hq, c->Sq, Dv, j.o_st);
    int64_t lpad = c->layout == PADDED ? 4 : 0;
    j.lse_st[2] = 1, j.lse_st[1] = c->Sq + lpad, j.lse_st[0] = c->Hq * j.lse_st[1];
    const int64_t qn[4] = {c->B, c->Hq, c->Sq, c->D}, kn[4] = {c->B, c->Hkv, c->Skv, c->D};
    const int64_t vn[4] = {c->B, c->Hkv, c->Skv, Dv}, on[4] = {c->B, c->Hq, c->Sq, Dv};
    const size_t nq = span(qn, j.q_st, 4), nk = span(kn, j.k_st, 4), nv = span(vn, j.v_st, 4),
                 no = span(on, j.o_st, 4), nl = span(qn, j.lse_st, 3),
                 rows = (size_t)(c->B * c->Hq * c->Sq);
    void *q = xmalloc(nq * es), *k = xmalloc(nk * es), *v = xmalloc(nv * es), *o = xmalloc(no * es);
    float *lse = xmalloc(nl * sizeof *lse);
    fill_random(q, c->dtype, nq, &seed);
    fill_random(k, c->dtype, nk, &seed);
    fill_random(v, c->dtype, nv, &seed);
    float *alibi = per_head(c->var && c->var->alibi, true, c->Hq, &seed);
    float *sinks = per_head(c->var && c->var->sinks, false, c->Hq, &seed);

    double *want = xmalloc(rows * (size_t)Dv * sizeof *want), *want_lse = xmalloc(rows * sizeof(double));
    double *got = xmalloc(rows * (size_t)Dv * sizeof *got), *got_lse = xmalloc(rows * sizeof(double));
    struct ref_view rq = {q, c->dtype, {0}}, rk = {k, c->dtype, {0}}, rv = {v, c->dtype, {0}};
    memcpy(rq.st, j.q_st, sizeof rq.st);
    memcpy(rk.st, j.k_st, sizeof rk.st);
    memcpy(rv.st, j.v_st, sizeof rv.st);
    const struct ref64_variant rvar = ref_variant(c->var, c->causal, alibi, sinks);
    ref64_attention_variant(c->B, c->Hq, c->Hkv, c->Sq, c->Skv, c->D, Dv, rq, rk, rv, &rvar,
                            (double)(float)j.scale, want, want_lse);
    /* Which output elements the view covers: everything else must come back untouched. */
    unsigned char *in_view = calloc(no + 1, 1), *l_in_view = calloc(nl + 1, 1);
    assert_non_null(in_view), assert_non_null(l_in_view);

    const struct ref64_tol tol = ref64_tolerance(c->dtype);
    const size_t nh = (size_t)c->Hq * sizeof(float);
    for (int device = 0; device < 2; device++) {
        memset(o, POISON, no * es);
        memset(lse, POISON, nl * sizeof *lse);
        j.on_device = device;
        j.q = place(device, q, nq * es), j.k = place(device, k, nk * es);
        j.v = place(device, v, nv * es), j.out = place(device, o, no * es);
        j.lse = c->lse ? place(device, lse, nl * sizeof *lse) : NULL;
        j.alibi = alibi ? place(device, alibi, nh) : NULL;
        j.sinks = sinks ? place(device, sinks, nh) : NULL;
        int rc = be_attention(&cur, &j);
        if (rc != 0)
            fail_msg("[%s] %s (%s memory): %s", cur_name, what, device ? "device" : "host",
                     gllm_strerror(rc));
        fetch(device, o, j.out, no * es);
        if (c->lse)
            fetch(device, lse, j.lse, nl * sizeof *lse);
        release(device, (void *)j.q), release(device, (void *)j.k), release(device, (void *)j.v);
        release(device, j.out);
        if (c->lse)
            release(device, j.lse);
        if (alibi)
            release(device, (void *)j.alibi);
        if (sinks)
            release(device, (void *)j.sinks);

        size_t n = 0;
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Sq; i++) {
                    for (int64_t d = 0; d < Dv; d++) {
                        int64_t at = b * j.o_st[0] + h * j.o_st[1] + i * j.o_st[2] + d * j.o_st[3];
                        in_view[at] = 1;
                        got[n++] = elem_get(o, c->dtype, at);
                    }
                    int64_t at = b * j.lse_st[0] + h * j.lse_st[1] + i * j.lse_st[2];
                    l_in_view[at] = 1;
                    got_lse[(b * c->Hq + h) * c->Sq + i] = lse[at];
                }
        double err = ref64_rel_error(got, want, n);
        double lerr = c->lse ? ref64_lse_error(got_lse, want_lse, rows) : 0;
        fprintf(stderr, "  [%s] %s, %s memory: rel err %.2e (tol %.0e)%s", cur_name, what,
                device ? "device" : "host", err, tol.out, c->lse ? "" : "\n");
        if (c->lse)
            fprintf(stderr, ", lse err %.2e (tol %.0e)\n", lerr, tol.lse);
        if (!(err <= tol.out) || !(lerr <= tol.lse))
            fail_msg("[%s] %s (%s memory): out err %.3g (tol %.0e), lse err %.3g (tol %.0e)",
                     cur_name, what, device ? "device" : "host", err, tol.out, lerr, tol.lse);
        for (size_t e = 0; e < no; e++)
            if (!in_view[e] && !all_poison((char *)o + e * es, es))
                fail_msg("[%s] %s: out element %zu, outside the view, was written", cur_name,
                         what, e);
        for (size_t e = 0; c->lse && e < nl; e++)
            if (!l_in_view[e] && !all_poison(&lse[e], sizeof *lse))
                fail_msg("[%s] %s: lse element %zu, outside the view, was written", cur_name,
                         what, e);
    }
    free(in_view), free(l_in_view);
    free(q), free(k), free(v), free(o), free(lse), free(alibi), free(sinks);
    free(want), free(want_lse), free(got), free(got_lse);
}

static void run_dense_table(const struct dense_case *cases, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        run_dense(&cases[i], seed + i);
}

#define RUN_DENSE(cases, seed) run_dense_table(cases, sizeof cases / sizeof *cases, seed)

static void test_dense_dtypes_and_masks(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 2, 4, 4, 130, 130, 64, false, false, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 2, 4, 4, 130, 130, 64, true, false, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 2, 4, 4, 130, 130, 64, false, false, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 2, 4, 4, 130, 130, 64, true, false, BHSD, 0, NULL},
        {GLLM_DTYPE_F32, 2, 4, 4, 70, 70, 64, false, false, BHSD, 0, NULL},
        {GLLM_DTYPE_F32, 2, 4, 4, 70, 70, 64, true, false, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 8, 1, 70, 70, 128, false, false, BSHD, 0.3, NULL},   /* explicit scale */
    };
    RUN_DENSE(cases, 100);
}

/* Grouped heads (Hq a multiple of Hkv, MQA included) and Sq != Skv both ways: chunked
 * prefill (queries at the end of a longer cache) and more queries than keys under a causal
 * mask, whose first rows see nothing (zeros, lse -inf). */
static void test_dense_gqa_and_lengths(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 2, 8, 2, 33, 200, 128, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 8, 1, 1, 257, 64, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 6, 3, 100, 37, 64, false, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F32, 1, 2, 1, 50, 20, 64, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 2, 1, 50, 20, 64, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 3, 4, 2, 17, 95, 128, false, false, BHSD, 0, NULL},
        /* Decode with few rows over long keys: the CPU splits the keys across threads
         * (split-K) and combines the parts. */
        {GLLM_DTYPE_F32, 1, 8, 2, 1, 1500, 128, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 4, 4, 3, 1100, 64, false, true, BSHD, 0, NULL},
    };
    RUN_DENSE(cases, 200);
}

/* 64 and 128 (the tensor-core kernels on GPUs) and small odd ones (the generic path). */
static void test_dense_head_dims(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 1, 2, 1, 65, 65, 64, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 65, 65, 128, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 2, 2, 40, 40, 7, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F32, 1, 2, 1, 40, 50, 7, false, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 40, 40, 40, false, false, BHSD, 0, NULL},
        {GLLM_DTYPE_F32, 1, 1, 1, 9, 9, 1, true, true, BHSD, 0, NULL},
        /* Head dims a GPU runs padded to the next fast kernel's (CUDA: 64 or 128), in every
         * layout, and one past them. */
        {GLLM_DTYPE_F16, 1, 4, 2, 300, 300, 96, true, true, BSHD, 0, NULL},
        {GLLM_DTYPE_BF16, 2, 2, 1, 257, 400, 80, false, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 2, 130, 130, 112, true, true, PADDED, 0, NULL},
        {GLLM_DTYPE_F16, 1, 4, 1, 200, 200, 32, false, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 2, 1, 150, 150, 256, true, true, BHSD, 0, NULL},
    };
    RUN_DENSE(cases, 300);
}

/* Views through strides: [b, s, h, d] layouts and rows with gaps the job must not write. */
static void test_dense_strided_views(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 2, 4, 2, 80, 80, 64, true, true, BSHD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 4, 4, 33, 60, 128, false, true, BSHD, 0, NULL},
        {GLLM_DTYPE_F16, 2, 4, 2, 80, 80, 64, true, true, PADDED, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 20, 70, 128, true, true, PADDED, 0, NULL},
        {GLLM_DTYPE_F32, 1, 2, 2, 30, 30, 40, false, true, PADDED, 0, NULL},
    };
    RUN_DENSE(cases, 400);
}

/* ---- copies between host and device memory ---- */

/* Each variant field alone and in the combinations models use, every dtype, Sq != Skv both
 * ways, and rows that see no key (zeros, lse -inf, or the sink's logit with sinks). */
static const struct var_case v_left16 = {.window = true, .window_left = 16, .window_right = -1};
static const struct var_case v_both8 = {.window = true, .window_left = 8, .window_right = 8};
static const struct var_case v_self = {.window = true, .window_left = 0, .window_right = 0};
static const struct var_case v_right4 = {.window = true, .window_left = -1, .window_right = 4};
static const struct var_case v_chunk32 = {.chunk = 32};
static const struct var_case v_chunk16 = {.chunk = 16};
static const struct var_case v_cap = {.soft_cap = 0.5};
static const struct var_case v_alibi = {.alibi = true};
static const struct var_case v_sinks = {.sinks = true};
static const struct var_case v_gptoss = {.window = true, .window_left = 20, .window_right = -1,
                                         .soft_cap = 1.0, .sinks = true};
static const struct var_case v_mixed = {.window = true, .window_left = 40, .window_right = 3,
                                        .chunk = 24, .alibi = true};
static const struct var_case v_dv128 = {.Dv = 128};
static const struct var_case v_dv40_sinks = {.Dv = 40, .window = true, .window_left = 5,
                                             .window_right = -1, .sinks = true};

static const struct var_case v_gemma_dv = {.chunk = 16, .soft_cap = 0.75, .alibi = true,
                                           .Dv = 16};

/* Windows, chunks and transforms over sequences of several 128-key tiles: the GPU kernels'
 * tile ranges (the first and last tiles a block of rows reads) and edge masks. */
static const struct var_case v_win130 = {.window = true, .window_left = 130, .window_right = -1};
static const struct var_case v_chunk200_sinks = {.chunk = 200, .sinks = true};
static const struct var_case v_win127_sinks = {.window = true, .window_left = 127,
                                               .window_right = -1, .sinks = true};
static const struct var_case v_win60_sinks = {.window = true, .window_left = 60,
                                              .window_right = -1, .sinks = true};
static const struct var_case v_cap20_alibi = {.soft_cap = 20.0, .alibi = true};
static const struct var_case v_dv64 = {.Dv = 64};
static const struct var_case v_gemma = {.window = true, .window_left = 200, .window_right = -1,
                                        .soft_cap = 30.0, .alibi = true};

/* Head dims above 128 (Gemma's 256; 160 and 192, and D 192 with Dv 128, which a GPU may pad
 * onto its D 256 kernel): several 128-row query tiles and 64-key tiles, causal with fewer and
 * with more queries than keys (rows that see no key), GQA, every layout, a negative scale. */
static void test_dense_wide_head_dims(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 2, 4, 2, 300, 300, 256, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 200, 333, 256, false, true, BSHD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 4, 4, 260, 130, 256, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_F16, 1, 8, 2, 129, 700, 256, true, false, PADDED, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 70, 70, 256, true, true, BHSD, -0.05, NULL},
        {GLLM_DTYPE_F16, 1, 4, 2, 200, 200, 192, true, true, BHSD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 2, 1, 150, 180, 160, false, true, BSHD, 0, NULL},
        {GLLM_DTYPE_BF16, 1, 4, 1, 257, 257, 192, true, true, BHSD, 0, &v_dv128},
        /* DeepSeek's Dqk 192 / Dv 128 (a kernel of its own on Hopper): GQA, every layout,
         * Sq > Skv, not causal, a negative scale */
        {GLLM_DTYPE_F16, 2, 4, 2, 300, 300, 192, true, true, BHSD, 0, &v_dv128},
        {GLLM_DTYPE_BF16, 1, 4, 4, 260, 130, 192, true, true, BSHD, 0, &v_dv128},
        {GLLM_DTYPE_F16, 1, 8, 2, 129, 700, 192, false, true, PADDED, 0, &v_dv128},
        {GLLM_DTYPE_BF16, 1, 2, 1, 70, 90, 192, false, true, BHSD, -0.05, &v_dv128},
    };
    RUN_DENSE(cases, 350);
}

static const struct var_case v_win300_cap = {.window = true, .window_left = 300,
                                             .window_right = -1, .soft_cap = 50.0};
static const struct var_case v_dv128_win_sinks = {.Dv = 128, .window = true, .window_left = 100,
                                                  .window_right = -1, .soft_cap = 30.0,
                                                  .sinks = true};

/* Variants at head dims above 128 (Gemma 2 and 3's local layers: D 256, window, soft-cap):
 * windows across several 80-key tiles whose first tile differs between a block's two halves,
 * rows that see no key, a bidirectional window, chunks with sinks, D 192 padded onto 256. */

static void test_dense_wide_variants(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 1, 4, 2, 600, 600, 256, true, true, BHSD, 0, &v_win130},
        {GLLM_DTYPE_BF16, 1, 2, 1, 700, 700, 256, true, true, BSHD, 0, &v_win300_cap},
        {GLLM_DTYPE_BF16, 1, 4, 4, 300, 700, 256, false, true, BHSD, 0, &v_chunk200_sinks},
        {GLLM_DTYPE_BF16, 1, 2, 1, 400, 400, 256, true, true, BHSD, 0, &v_gemma},
        {GLLM_DTYPE_F16, 1, 4, 2, 300, 200, 256, true, true, PADDED, 0, &v_win60_sinks},
        {GLLM_DTYPE_F16, 1, 4, 2, 260, 260, 256, false, true, BHSD, 0, &v_both8},
        {GLLM_DTYPE_BF16, 1, 4, 4, 200, 260, 256, true, true, BHSD, -0.05, &v_cap20_alibi},
        {GLLM_DTYPE_F16, 1, 4, 2, 450, 450, 192, true, false, BHSD, 0, &v_gptoss},
        {GLLM_DTYPE_BF16, 1, 4, 1, 257, 300, 192, false, true, BSHD, 0, &v_mixed},
        {GLLM_DTYPE_F16, 1, 4, 2, 350, 350, 192, true, true, BHSD, 0, &v_dv128_win_sinks},
        {GLLM_DTYPE_BF16, 1, 2, 2, 200, 330, 192, false, true, BSHD, 0, &v_dv128_win_sinks},
    };
    RUN_DENSE(cases, 360);
}

static void test_dense_variants(void **state)
{
    (void)state;
    static const struct dense_case cases[] = {
        {GLLM_DTYPE_F16, 1, 4, 2, 520, 520, 128, true, true, BHSD, 0, &v_win130},
        {GLLM_DTYPE_BF16, 1, 4, 1, 300, 700, 64, false, true, BSHD, 0, &v_chunk200_sinks},
        {GLLM_DTYPE_BF16, 1, 2, 2, 400, 400, 128, true, true, BHSD, 0, &v_gemma},
        {GLLM_DTYPE_F16, 1, 6, 2, 450, 450, 64, true, false, BHSD, 0, &v_gptoss},
        {GLLM_DTYPE_BF16, 2, 8, 2, 600, 600, 64, true, true, BSHD, 0, &v_win127_sinks},
        {GLLM_DTYPE_F16, 1, 2, 1, 300, 200, 128, true, true, BHSD, 0, &v_win130},
        {GLLM_DTYPE_F16, 1, 4, 2, 330, 330, 96, true, true, BSHD, 0, &v_win60_sinks},
        {GLLM_DTYPE_BF16, 1, 4, 4, 200, 260, 80, true, true, BHSD, 0, &v_cap20_alibi},
        {GLLM_DTYPE_BF16, 1, 4, 2, 260, 260, 128, true, true, BHSD, 0, &v_dv64},
        {GLLM_DTYPE_F16, 1, 2, 1, 140, 140, 96, false, true, PADDED, 0, &v_dv64},
        {GLLM_DTYPE_F16, 1, 4, 2, 100, 100, 64, true, true, BHSD, 0, &v_left16},
        {GLLM_DTYPE_BF16, 2, 4, 4, 70, 90, 64, false, true, BHSD, 0, &v_both8},
        {GLLM_DTYPE_F32, 1, 2, 1, 30, 30, 16, false, true, BHSD, 0, &v_self},
        {GLLM_DTYPE_F32, 1, 2, 2, 50, 45, 24, false, true, BSHD, 0, &v_right4},
        {GLLM_DTYPE_F16, 1, 4, 1, 100, 100, 64, true, true, BHSD, 0, &v_chunk32},
        {GLLM_DTYPE_F32, 1, 2, 1, 40, 64, 40, false, true, BHSD, 0, &v_chunk16},
        {GLLM_DTYPE_F32, 1, 2, 1, 70, 20, 32, false, true, BHSD, 0, &v_chunk16},
        {GLLM_DTYPE_F16, 1, 4, 4, 70, 70, 128, true, true, BHSD, 1.0, &v_cap},
        {GLLM_DTYPE_BF16, 1, 8, 2, 60, 130, 64, true, true, BHSD, 0, &v_alibi},
        {GLLM_DTYPE_F32, 2, 4, 4, 33, 50, 32, false, true, PADDED, 0, &v_sinks},
        {GLLM_DTYPE_F16, 1, 8, 2, 77, 77, 64, true, true, BHSD, 0, &v_gptoss},
        {GLLM_DTYPE_BF16, 1, 8, 2, 65, 100, 64, true, false, BSHD, 0, &v_gptoss},
        {GLLM_DTYPE_F32, 1, 4, 2, 20, 100, 32, false, true, BHSD, 0, &v_mixed},
        {GLLM_DTYPE_F32, 1, 2, 1, 50, 20, 16, true, true, BHSD, 0, &v_gptoss},
        {GLLM_DTYPE_BF16, 1, 4, 1, 70, 70, 192, true, true, BHSD, 0, &v_dv128},
        {GLLM_DTYPE_F16, 1, 4, 2, 40, 60, 64, true, true, PADDED, 0, &v_dv40_sinks},
        {GLLM_DTYPE_F32, 1, 4, 2, 24, 50, 48, false, true, BHSD, 0, &v_gemma_dv},
        {GLLM_DTYPE_F32, 1, 4, 1, 2, 1200, 64, true, true, BHSD, 0, &v_gptoss},   /* split-K */
    };
    RUN_DENSE(cases, 500);
}

static void test_copies(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 3, 64, 4097, 1 << 20};
    uint64_t seed = 5;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s], off = s % 2 ? 3 : 0;   /* odd offsets into device memory */
        unsigned char *src = xmalloc(n), *back = xmalloc(n + 2), *d = NULL;
        for (size_t i = 0; i < n; i++)
            src[i] = (unsigned char)rng_next(&seed);
        assert_int_equal(be_alloc(&cur, n + off, (void **)&d), 0);
        assert_int_equal(be_copy(&cur, d + off, src, n, true), 0);
        memset(back, POISON, n + 2);
        assert_int_equal(be_copy(&cur, back + 1, d + off, n, false), 0);
        if (memcmp(back + 1, src, n) != 0)
            fail_msg("[%s] %zu bytes at offset %zu did not come back", cur_name, n, off);
        assert_true(back[0] == POISON && back[n + 1] == POISON);   /* no byte outside */
        be_free(&cur, d);
        free(src), free(back);
        fprintf(stderr, "  [%s] copy %zu bytes at device offset %zu: ok\n", cur_name, n, off);
    }
}

/* ---- paged KV cache ---- */

struct paged_case {
    const char *what;
    gllm_dtype dtype;
    int B, Hq, Hkv, D, page_size;
    const int *len;          /* tokens per sequence */
    const int *tail;         /* of which the second append writes the last tail[b] */
    const int *qlen;         /* queries per sequence; NULL: decode, one each */
    const struct var_case *var;   /* attention's variant (and v's head dim); NULL: none */
};

/* v's head dim of a paged case. */
static int case_dv(const struct paged_case *c)
{
    return c->var && c->var->Dv ? (int)c->var->Dv : c->D;
}

/* A cache: its pool of shuffled pages, the tokens it should hold, host copies. */
struct cache {
    const struct paged_case *c;
    size_t es, row, vrow;    /* element size; bytes of one [Hkv, D] (k) and [Hkv, Dv] (v) row */
    int P, T;                /* pages in the pool; tokens in all */
    int *first, *pages;      /* sequence b owns pages[first[b] .. first[b + 1]) in order */
    int *tok0;               /* its tokens are rows tok0[b] .. of kt/vt */
    char *kt, *vt;           /* every token's K and V row, dtype-rounded */
    char *kc, *vc;           /* host pools */
    size_t pool, vpool;      /* bytes of the K and the V pool */
};

static void cache_init(struct cache *k, const struct paged_case *c, uint64_t seed)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->es = gllm_dtype_size(c->dtype);
    k->row = (size_t)(c->Hkv * c->D) * k->es;
    k->vrow = (size_t)(c->Hkv * case_dv(c)) * k->es;
    k->first = xmalloc((size_t)(c->B + 1) * sizeof *k->first);
    k->tok0 = xmalloc((size_t)(c->B + 1) * sizeof *k->tok0);
    k->first[0] = k->tok0[0] = 0;
    for (int b = 0; b < c->B; b++) {
        k->first[b + 1] = k->first[b] + (c->len[b] + c->page_size - 1) / c->page_size;
        k->tok0[b + 1] = k->tok0[b] + c->len[b];
    }
    k->T = k->tok0[c->B];
    k->P = k->first[c->B] + 3;                  /* spare pages no sequence owns */
    k->pages = xmalloc((size_t)k->P * sizeof *k->pages);
    for (int i = 0; i < k->P; i++)
        k->pages[i] = i;
    for (int i = k->P - 1; i > 0; i--) {        /* shuffled: no sequence's pages are adjacent */
        int j = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = k->pages[i];
        k->pages[i] = k->pages[j], k->pages[j] = t;
    }
    k->kt = xmalloc((size_t)k->T * k->row);
    k->vt = xmalloc((size_t)k->T * k->vrow);
    fill_random(k->kt, c->dtype, (size_t)k->T * (size_t)(c->Hkv * c->D), &seed);
    fill_random(k->vt, c->dtype, (size_t)k->T * (size_t)(c->Hkv * case_dv(c)), &seed);
    k->pool = (size_t)k->P * (size_t)c->page_size * k->row;
    k->vpool = (size_t)k->P * (size_t)c->page_size * k->vrow;
    k->kc = xmalloc(k->pool);
    k->vc = xmalloc(k->vpool);
}

static void cache_free(struct cache *k)
{
    free(k->first), free(k->tok0), free(k->pages), free(k->kt), free(k->vt);
    free(k->kc), free(k->vc);
}

/* The page table of tokens [0, upto[b]) of each sequence: indptr [B + 1], indices, kv_len. */
struct table {
    int32_t *indptr, *indices, *kv_len, max_kv_len;
};

static struct table table_for(const struct cache *k, const int *upto)
{
    const struct paged_case *c = k->c;
    struct table t = {xmalloc((size_t)(c->B + 1) * 4), xmalloc((size_t)k->P * 4 + 4),
                      xmalloc((size_t)c->B * 4 + 4), 0};
    t.indptr[0] = 0;
    for (int b = 0; b < c->B; b++) {
        int np = (upto[b] + c->page_size - 1) / c->page_size;
        for (int i = 0; i < np; i++)
            t.indices[t.indptr[b] + i] = k->pages[k->first[b] + i];
        t.indptr[b + 1] = t.indptr[b] + np;
        t.kv_len[b] = upto[b];
        if (upto[b] > t.max_kv_len)
            t.max_kv_len = upto[b];
    }
    return t;
}

static void table_free(struct table *t)
{
    free(t->indptr), free(t->indices), free(t->kv_len);
}

/* Device copies of the pools when on_device (kd, vd), else the host pools themselves. */
struct pools {
    void *k, *v;
};

/* Appends tokens [from[b], to[b]) of every sequence in one job. */
static void append(struct cache *k, struct pools *pl, bool on_device, const int *from, const int *to)
{
    const struct paged_case *c = k->c;
    int32_t *qind = xmalloc((size_t)(c->B + 1) * 4);
    qind[0] = 0;
    for (int b = 0; b < c->B; b++)
        qind[b + 1] = qind[b] + to[b] - from[b];
    const int n = qind[c->B];
    char *kn = xmalloc((size_t)n * k->row + 1), *vn = xmalloc((size_t)n * k->vrow + 1);
    int32_t max_q = 0;
    for (int b = 0; b < c->B; b++) {
        size_t rows = (size_t)(to[b] - from[b]);
        memcpy(kn + (size_t)qind[b] * k->row, k->kt + (size_t)(k->tok0[b] + from[b]) * k->row, rows * k->row);
        memcpy(vn + (size_t)qind[b] * k->vrow, k->vt + (size_t)(k->tok0[b] + from[b]) * k->vrow, rows * k->vrow);
        max_q = (int32_t)rows > max_q ? (int32_t)rows : max_q;
    }
    struct table t = table_for(k, to);
    struct paged_job j = {
        .append = true, .dtype = c->dtype, .B = c->B, .Hkv = c->Hkv, .D = c->D, .Dv = case_dv(c),
        .page_size = c->page_size, .num_pages = k->P, .k_cache = pl->k, .v_cache = pl->v,
        .k_new = place(on_device, kn, (size_t)n * k->row), .v_new = place(on_device, vn, (size_t)n * k->vrow),
        .nrows = n, .kv_indptr = t.indptr, .kv_indices = t.indices, .kv_len = t.kv_len,
        .q_indptr = qind, .max_kv_len = t.max_kv_len, .max_q_len = max_q, .on_device = on_device,
    };
    char why[200] = "";
    int rc = be_paged(&cur, &j, why, sizeof why);
    if (rc != 0)
        fail_msg("[%s] %s: append (%s memory): %s %s", cur_name, c->what,
                 on_device ? "device" : "host", gllm_strerror(rc), why);
    release(on_device, (void *)j.k_new), release(on_device, (void *)j.v_new);
    table_free(&t);
    free(qind), free(kn), free(vn);
}

/* Every slot a sequence owns holds exactly its token; every other slot is untouched. */
static void check_pools(struct cache *k, struct pools *pl, bool on_device)
{
    const struct paged_case *c = k->c;
    fetch(on_device, k->kc, pl->k, k->pool);
    fetch(on_device, k->vc, pl->v, k->vpool);
    int *owner = xmalloc((size_t)k->P * sizeof *owner), *index = xmalloc((size_t)k->P * sizeof *index);
    for (int p = 0; p < k->P; p++)
        owner[p] = -1;
    for (int b = 0; b < c->B; b++)
        for (int i = k->first[b]; i < k->first[b + 1]; i++)
            owner[k->pages[i]] = b, index[k->pages[i]] = i - k->first[b];
    int wrong = 0, touched = 0;
    for (int p = 0; p < k->P; p++)
        for (int s = 0; s < c->page_size; s++) {
            const size_t slot = (size_t)p * (size_t)c->page_size + (size_t)s;
            const size_t at = slot * k->row, vat = slot * k->vrow;
            int b = owner[p], pos = b < 0 ? -1 : index[p] * c->page_size + s;
            if (b >= 0 && pos < c->len[b]) {
                const size_t tok = (size_t)(k->tok0[b] + pos);
                wrong += memcmp(k->kc + at, k->kt + tok * k->row, k->row) != 0;
                wrong += memcmp(k->vc + vat, k->vt + tok * k->vrow, k->vrow) != 0;
            } else {
                touched += !all_poison(k->kc + at, k->row) || !all_poison(k->vc + vat, k->vrow);
            }
        }
    free(owner), free(index);
    if (wrong || touched)
        fail_msg("[%s] %s (%s memory): %d token rows wrong, %d slots no token owns written",
                 cur_name, c->what, on_device ? "device" : "host", wrong, touched);
}

static double paged_get(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value)
{
    const struct cache *k = ctx;
    const struct paged_case *c = k->c;
    const int64_t Dx = value ? case_dv(c) : c->D;
    return elem_get(value ? k->vt : k->kt, c->dtype, ((k->tok0[b] + j) * c->Hkv + hk) * Dx + d);
}

/* Attention over the filled cache: each sequence's queries are its last qlen[b] tokens. */
static void attend(struct cache *k, struct pools *pl, bool on_device, bool indices_on_device,
                   uint64_t seed)
{
    const struct paged_case *c = k->c;
    int32_t *qind = xmalloc((size_t)(c->B + 1) * 4), max_q = 0;
    qind[0] = 0;
    for (int b = 0; b < c->B; b++) {
        int n = c->qlen ? c->qlen[b] : 1;
        qind[b + 1] = qind[b] + n;
        max_q = n > max_q ? n : max_q;
    }
    const int nq = qind[c->B], Dv = case_dv(c);
    const size_t qrow = (size_t)(c->Hq * c->D), qbytes = (size_t)nq * qrow * k->es;
    const size_t orow = (size_t)(c->Hq * Dv), obytes = (size_t)nq * orow * k->es;
    char *q = xmalloc(qbytes + 1), *o = xmalloc(obytes + 1);
    fill_random(q, c->dtype, (size_t)nq * qrow, &seed);
    memset(o, POISON, obytes);
    float *alibi = per_head(c->var && c->var->alibi, true, c->Hq, &seed);
    float *sinks = per_head(c->var && c->var->sinks, false, c->Hq, &seed);
    const size_t nh = (size_t)c->Hq * sizeof(float);
    struct table t = table_for(k, c->len);
    const size_t nidx = (size_t)t.indptr[c->B] * 4;
    struct paged_job j = {
        .dtype = c->dtype, .B = c->B, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D, .Dv = Dv,
        .page_size = c->page_size, .num_pages = k->P, .k_cache = pl->k, .v_cache = pl->v,
        .q = place(on_device, q, qbytes), .out = place(on_device, o, obytes), .nrows = nq,
        .var = c->var, .alibi = alibi ? place(on_device, alibi, nh) : NULL,
        .sinks = sinks ? place(on_device, sinks, nh) : NULL,
        .kv_indptr = t.indptr, .kv_len = t.kv_len, .q_indptr = qind,
        .kv_indices = indices_on_device ? place(true, t.indices, nidx) : t.indices,
        .max_kv_len = t.max_kv_len, .max_q_len = max_q, .scale = 1.0 / sqrt((double)c->D),
        .on_device = on_device, .indices_on_device = indices_on_device,
    };
    char why[200] = "";
    int rc = be_paged(&cur, &j, why, sizeof why);
    const char *mem = indices_on_device ? "device memory, page numbers on the device"
                      : on_device       ? "device memory" : "host memory";
    if (rc != 0)
        fail_msg("[%s] %s: attention (%s): %s %s", cur_name, c->what, mem, gllm_strerror(rc), why);
    fetch(on_device, o, j.out, obytes);
    release(on_device, (void *)j.q), release(on_device, j.out);
    if (alibi)
        release(on_device, (void *)j.alibi);
    if (sinks)
        release(on_device, (void *)j.sinks);
    if (indices_on_device)
        release(true, (void *)j.kv_indices);

    double *want = xmalloc((size_t)nq * orow * sizeof *want), *got = xmalloc((size_t)nq * orow * sizeof *got);
    double *qd = xmalloc((size_t)c->D * sizeof *qd);
    struct ref64_kv kv = {paged_get, k};
    const struct ref64_variant rvar = ref_variant(c->var, true, alibi, sinks);
    for (int b = 0; b < c->B; b++)
        for (int i = qind[b]; i < qind[b + 1]; i++) {
            int pos = c->len[b] - (qind[b + 1] - i);      /* the query's own token */
            for (int h = 0; h < c->Hq; h++) {
                for (int d = 0; d < c->D; d++)
                    qd[d] = elem_get(q, c->dtype, (int64_t)((size_t)i * qrow) + h * c->D + d);
                ref64_row_variant(qd, c->D, Dv, &kv, b, h, h / (c->Hq / c->Hkv), c->len[b], pos,
                                  (double)(float)j.scale, &rvar,
                                  want + (size_t)i * orow + (size_t)(h * Dv), NULL);
            }
        }
    for (size_t i = 0; i < (size_t)nq * orow; i++)
        got[i] = elem_get(o, c->dtype, (int64_t)i);
    const double err = ref64_rel_error(got, want, (size_t)nq * orow), tol = ref64_tolerance(c->dtype).out;
    char var[96];
    describe_variant(c->var, var, sizeof var);
    fprintf(stderr, "  [%s] %s%s %s, %s: rel err %.2e (tol %.0e)\n", cur_name, c->what, var,
            c->qlen ? "prefill" : "decode", mem, err, tol);
    if (!(err <= tol))
        fail_msg("[%s] %s (%s): rel err %.3g > %.0e", cur_name, c->what, mem, err, tol);
    table_free(&t);
    free(qind), free(q), free(o), free(want), free(got), free(qd), free(alibi), free(sinks);
}

/* Two appends (the prompt, then new tokens from inside a partial page), the pools checked,
 * then attention; from host memory, from device memory, and with page numbers on the device. */
static void run_paged(const struct paged_case *c, uint64_t seed)
{
    char why[200] = "";
    struct paged_job probe = {.dtype = c->dtype, .B = c->B, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
                              .Dv = case_dv(c), .page_size = c->page_size, .scale = 1};
    int rc = be_paged_check(&cur, &probe, why, sizeof why);
    if (rc != 0) {
        skip_case(c->what, why);
        return;
    }
    if (c->var && !backend_takes(c->qlen ? GLLM_MODE_PREFILL : GLLM_MODE_DECODE, c->var, c->D,
                                 c->what))
        return;
    struct cache k;
    cache_init(&k, c, seed);
    int *zero = calloc((size_t)c->B, sizeof *zero), *mid = xmalloc((size_t)c->B * sizeof *mid);
    assert_non_null(zero);
    for (int b = 0; b < c->B; b++)
        mid[b] = c->len[b] - c->tail[b];
    for (int mode = 0; mode < 3; mode++) {
        const bool on_device = mode > 0;
        memset(k.kc, POISON, k.pool);
        memset(k.vc, POISON, k.vpool);
        struct pools pl = {place(on_device, k.kc, k.pool), place(on_device, k.vc, k.vpool)};
        append(&k, &pl, on_device, zero, mid);
        append(&k, &pl, on_device, mid, c->len);
        check_pools(&k, &pl, on_device);
        attend(&k, &pl, on_device, mode == 2, seed + (uint64_t)mode);
        release(on_device, pl.k), release(on_device, pl.v);
    }
    free(zero), free(mid);
    cache_free(&k);
}

/* Decode: one query per sequence, over sequences of very different lengths. */
static void test_paged_decode(void **state)
{
    (void)state;
    static const int len1[] = {1, 17, 300, 16, 1100}, tail1[] = {1, 2, 5, 16, 3};
    static const int len2[] = {33, 2, 700}, tail2[] = {1, 1, 4};
    static const int len3[] = {64, 65, 900}, tail3[] = {1, 64, 1};
    static const int len4[] = {5, 130}, tail4[] = {2, 3};
    const struct paged_case cases[] = {
        {"paged f16 GQA4 D128 page 16", GLLM_DTYPE_F16, 5, 8, 2, 128, 16, len1, tail1, NULL, NULL},
        {"paged bf16 GQA8 D64 page 1", GLLM_DTYPE_BF16, 3, 16, 2, 64, 1, len2, tail2, NULL, NULL},
        {"paged f16 MHA D64 page 64", GLLM_DTYPE_F16, 3, 4, 4, 64, 64, len3, tail3, NULL, NULL},
        {"paged f32 GQA2 D40 page 16", GLLM_DTYPE_F32, 2, 4, 2, 40, 16, len4, tail4, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_paged(&cases[i], 10 + i);
}

/* Chunked prefill: several queries per sequence, the last tokens of each. */
static void test_paged_prefill(void **state)
{
    (void)state;
    static const int len1[] = {1, 17, 300, 16, 700}, tail1[] = {1, 2, 5, 16, 3},
                     q1[] = {1, 5, 40, 16, 2};
    static const int len2[] = {33, 2, 500}, tail2[] = {1, 1, 4}, q2[] = {33, 1, 20};
    static const int len3[] = {64, 65, 300}, tail3[] = {1, 64, 1}, q3[] = {3, 65, 7};
    const struct paged_case cases[] = {
        {"paged f16 GQA4 D128 page 16", GLLM_DTYPE_F16, 5, 8, 2, 128, 16, len1, tail1, q1, NULL},
        {"paged bf16 GQA8 D64 page 1", GLLM_DTYPE_BF16, 3, 16, 2, 64, 1, len2, tail2, q2, NULL},
        {"paged bf16 MHA D128 page 64", GLLM_DTYPE_BF16, 3, 4, 4, 128, 64, len3, tail3, q3, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_paged(&cases[i], 20 + i);
}

/* A sequence with no pages (no tokens, no queries) between others. */
static void test_paged_empty_sequence(void **state)
{
    (void)state;
    static const int len[] = {20, 0, 45}, tail[] = {3, 0, 45}, q[] = {4, 0, 1};
    const struct paged_case c = {"paged f16 GQA2 D64 page 16, an empty sequence", GLLM_DTYPE_F16,
                                 3, 4, 2, 64, 16, len, tail, q, NULL};
    run_paged(&c, 30);
}

/* Decode and chunked prefill with each variant field and the combinations models use; the
 * page size and the window, chunk and query counts cut through pages. */
static void test_paged_variants(void **state)
{
    (void)state;
    static const int len1[] = {1, 17, 300, 16, 90}, tail1[] = {1, 2, 5, 16, 3},
                     q1[] = {1, 5, 40, 16, 2};
    static const int len2[] = {33, 2, 200}, tail2[] = {1, 1, 4}, q2[] = {33, 1, 20};
    static const struct var_case v_chunk8 = {.chunk = 8};
    static const struct var_case v_cap_alibi = {.soft_cap = 0.5, .alibi = true, .chunk = 3000};
    static const int len5[] = {7000}, tail5[] = {3};
    const struct paged_case cases[] = {
        {"paged f16 GQA4 D64 page 16", GLLM_DTYPE_F16, 5, 8, 2, 64, 16, len1, tail1, NULL, &v_left16},
        {"paged bf16 GQA4 D64 page 16", GLLM_DTYPE_BF16, 5, 8, 2, 64, 16, len1, tail1, q1, &v_left16},
        {"paged f32 GQA2 D32 page 7", GLLM_DTYPE_F32, 3, 4, 2, 32, 7, len2, tail2, q2, &v_chunk8},
        {"paged f16 GQA2 D64 page 16", GLLM_DTYPE_F16, 3, 4, 2, 64, 16, len2, tail2, NULL, &v_cap},
        {"paged f32 GQA4 D32 page 16", GLLM_DTYPE_F32, 5, 8, 2, 32, 16, len1, tail1, q1, &v_alibi},
        {"paged bf16 MQA D64 page 1", GLLM_DTYPE_BF16, 3, 4, 1, 64, 1, len2, tail2, NULL, &v_sinks},
        {"paged f16 GQA4 D64 page 16", GLLM_DTYPE_F16, 5, 8, 2, 64, 16, len1, tail1, q1, &v_gptoss},
        {"paged f32 GQA2 D32 page 5", GLLM_DTYPE_F32, 3, 4, 2, 32, 5, len2, tail2, q2, &v_mixed},
        {"paged bf16 GQA2 D192 page 16", GLLM_DTYPE_BF16, 3, 4, 2, 192, 16, len2, tail2, q2, &v_dv128},
        {"paged f16 GQA2 D64 page 16", GLLM_DTYPE_F16, 3, 4, 2, 64, 16, len2, tail2, NULL, &v_dv40_sinks},
        /* The GPU kernels' dtypes and head dims: chunks, ALiBi and the mix there too, and
         * long single sequences whose keys are split across blocks and merged (the sink
         * joins in the merge). */
        {"paged bf16 GQA4 D128 page 16", GLLM_DTYPE_BF16, 5, 8, 2, 128, 16, len1, tail1, q1, &v_chunk8},
        {"paged f16 GQA4 D128 page 16", GLLM_DTYPE_F16, 5, 8, 2, 128, 16, len1, tail1, NULL, &v_alibi},
        {"paged f16 GQA2 D64 page 16", GLLM_DTYPE_F16, 3, 4, 2, 64, 16, len2, tail2, q2, &v_mixed},
        {"paged bf16 GQA8 D128 page 16, one long", GLLM_DTYPE_BF16, 1, 8, 1, 128, 16, len5, tail5, NULL, &v_gptoss},
        {"paged f16 GQA4 D64 page 64, one long", GLLM_DTYPE_F16, 1, 8, 2, 64, 64, len5, tail5, NULL, &v_sinks},
        {"paged f16 GQA4 D128 page 16, one long", GLLM_DTYPE_F16, 1, 8, 2, 128, 16, len5, tail5, NULL, &v_cap_alibi},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_paged(&cases[i], 40 + i);
}

/* The head dims of the models past 64 and 128 (Phi-3's 96, Gemma's 256, 80 and 192), plain
 * and with the variants those models use: decode, chunked prefill, and one long sequence
 * whose keys are split and merged. */
static void test_paged_head_dims(void **state)
{
    (void)state;
    static const int len1[] = {1, 17, 300, 90}, tail1[] = {1, 2, 5, 3}, q1[] = {1, 5, 40, 2};
    static const int len5[] = {3000}, tail5[] = {3};
    static const struct var_case v_phi3 = {.window = true, .window_left = 100, .window_right = -1};
    static const struct var_case v_gemma2 = {.window = true, .window_left = 64, .window_right = -1,
                                             .soft_cap = 0.5};
    const struct paged_case cases[] = {
        {"paged f16 GQA4 D96 page 16", GLLM_DTYPE_F16, 4, 8, 2, 96, 16, len1, tail1, NULL, NULL},
        {"paged bf16 GQA4 D96 page 16", GLLM_DTYPE_BF16, 4, 8, 2, 96, 16, len1, tail1, q1, &v_phi3},
        {"paged bf16 GQA2 D80 page 16", GLLM_DTYPE_BF16, 4, 4, 2, 80, 16, len1, tail1, q1, NULL},
        {"paged f16 GQA2 D192 page 16", GLLM_DTYPE_F16, 4, 4, 2, 192, 16, len1, tail1, NULL, &v_sinks},
        {"paged bf16 GQA2 D256 page 16", GLLM_DTYPE_BF16, 4, 4, 2, 256, 16, len1, tail1, NULL, NULL},
        {"paged f16 GQA2 D256 page 16", GLLM_DTYPE_F16, 4, 4, 2, 256, 16, len1, tail1, q1, &v_gemma2},
        {"paged bf16 GQA2 D256 page 16, one long", GLLM_DTYPE_BF16, 1, 4, 2, 256, 16, len5, tail5, NULL, NULL},
        {"paged f16 GQA4 D96 page 16, one long", GLLM_DTYPE_F16, 1, 8, 2, 96, 16, len5, tail5, NULL, &v_gemma2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_paged(&cases[i], 60 + i);
}

/* Chunked prefill long enough for the CUDA backend's Hopper paged prefill (at least 64
 * queries a sequence on average, a fifth of its whole tiles' scores used), with the variants of
 * the models that run it: windows from mid-tile, Gemma's window with a soft-cap, GPT-OSS's
 * with sinks, a chunk, ALiBi with a soft-cap, sinks alone, and head dims 96 and 80 (padded
 * onto its D = 128 kernel); ragged, pages cutting the tiles.
 * CUDA only: the other backends compute these jobs on the paths test_paged_variants covers,
 * and at this size their float64 checks took minutes of CI's time (the CPU at every level,
 * Vulkan on lavapipe, the sanitizer builds). */
static void test_paged_prefill_long_variants(void **state)
{
    (void)state;
    if (strcmp(cur_name, "cuda") != 0) {
        skip_case("paged prefill, long", "sized for the CUDA backend's Hopper paged prefill");
        return;
    }
    static const int len[] = {1000, 200}, tail[] = {3, 16}, q[] = {500, 150};
    static const struct var_case v_win300 = {.window = true, .window_left = 300, .window_right = -1};
    static const struct var_case v_gemma_local = {.window = true, .window_left = 600,
                                                  .window_right = -1, .soft_cap = 0.5};
    static const struct var_case v_oss = {.window = true, .window_left = 500, .window_right = -1,
                                          .sinks = true};
    static const struct var_case v_chunk768 = {.chunk = 768};
    const struct paged_case cases[] = {
        {"paged prefill f16 GQA2 D128 page 16, long", GLLM_DTYPE_F16, 2, 2, 1, 128, 16, len, tail, q, &v_win300},
        {"paged prefill bf16 GQA2 D128 page 64, long", GLLM_DTYPE_BF16, 2, 4, 2, 128, 64, len, tail, q, &v_gemma_local},
        {"paged prefill bf16 GQA2 D64 page 32, long", GLLM_DTYPE_BF16, 2, 2, 1, 64, 32, len, tail, q, &v_oss},
        {"paged prefill f16 MHA D64 page 16, long", GLLM_DTYPE_F16, 2, 2, 2, 64, 16, len, tail, q, &v_cap20_alibi},
        {"paged prefill bf16 GQA2 D128 page 128, long", GLLM_DTYPE_BF16, 2, 2, 1, 128, 128, len, tail, q, &v_chunk768},
        {"paged prefill f16 GQA2 D128 page 16, long", GLLM_DTYPE_F16, 2, 2, 1, 128, 16, len, tail, q, &v_sinks},
        /* Phi-3's head dim and 80, padded onto the D = 128 kernel by its tensor maps. */
        {"paged prefill bf16 GQA2 D96 page 16, long", GLLM_DTYPE_BF16, 2, 4, 2, 96, 16, len, tail, q, NULL},
        {"paged prefill f16 GQA2 D96 page 32, long", GLLM_DTYPE_F16, 2, 2, 1, 96, 32, len, tail, q, &v_win300},
        {"paged prefill bf16 MHA D80 page 16, long", GLLM_DTYPE_BF16, 2, 2, 2, 80, 16, len, tail, q, &v_oss},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_paged(&cases[i], 80 + i);
}

/* ---- one group per compiled-in backend ---- */

/* $GLLM_TEST_BACKEND names a backend that must open (the GPU machine sets it to cuda). */
/* $GLLM_TEST_ONLY_BACKEND runs that backend's group alone; $GLLM_TEST_SKIP_BACKEND (a comma
 * list) passes over groups another ctest entry runs (the Vulkan one, on lavapipe). */
static bool selected(const char *name)
{
    const char *only = getenv("GLLM_TEST_ONLY_BACKEND"), *skip = getenv("GLLM_TEST_SKIP_BACKEND");
    if (only && only[0])
        return strcmp(only, name) == 0;
    const size_t n = strlen(name);
    for (const char *s = skip; s && *s;) {
        const size_t len = strcspn(s, ",");
        if (len == n && strncmp(s, name, n) == 0)
            return false;
        s += len + (s[len] == ',');
    }
    return true;
}

static bool required(const char *name)
{
    const char *want = getenv("GLLM_TEST_BACKEND");
    return strcmp(name, "cpu") == 0 || (want && strcmp(want, name) == 0);
}

static int group_open(void **state)
{
    (void)state;
    char why[300] = "";
    int rc = be_open(cur_name, &cur, why, sizeof why);
    if (rc == 0)
        return 0;
    cur.b = NULL;
    fprintf(stderr, "%s backend '%s' cannot open here: %s (%s)\n",
            required(cur_name) ? "FAILED:" : "SKIPPED:", cur_name, why, gllm_strerror(rc));
    return required(cur_name) ? -1 : 0;
}

static int group_close(void **state)
{
    (void)state;
    be_close(&cur);
    return 0;
}

/* Open caps are the declaration (a device adds features and sharing, never compute). */
static void test_caps_as_declared(void **state)
{
    (void)state;
    char why[160] = "";
    if (!be_as_declared(&cur, why, sizeof why))
        fail_msg("[%s] open caps are not what it declares: %s", cur_name, why);
}

/* Each test skips, loudly, when its group's backend could not open. */
#define BACKEND_TEST(fn)                                                                   \
    static void fn##_on_backend(void **state)                                              \
    {                                                                                      \
        if (!cur.b) {                                                                      \
            fprintf(stderr, "SKIPPED: %s on backend %s (not available here)\n", #fn,       \
                    cur_name);                                                             \
            skip();                                                                        \
        }                                                                                  \
        fn(state);                                                                         \
    }
BACKEND_TEST(test_dense_dtypes_and_masks)
BACKEND_TEST(test_dense_gqa_and_lengths)
BACKEND_TEST(test_dense_head_dims)
BACKEND_TEST(test_dense_wide_head_dims)
BACKEND_TEST(test_dense_strided_views)
BACKEND_TEST(test_dense_variants)
BACKEND_TEST(test_dense_wide_variants)
BACKEND_TEST(test_copies)
BACKEND_TEST(test_paged_decode)
BACKEND_TEST(test_paged_prefill)
BACKEND_TEST(test_paged_empty_sequence)
BACKEND_TEST(test_paged_variants)
BACKEND_TEST(test_paged_head_dims)
BACKEND_TEST(test_paged_prefill_long_variants)
BACKEND_TEST(test_caps_as_declared)

int main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_dtypes_and_masks_on_backend),
        cmocka_unit_test(test_dense_gqa_and_lengths_on_backend),
        cmocka_unit_test(test_dense_head_dims_on_backend),
        cmocka_unit_test(test_dense_wide_head_dims_on_backend),
        cmocka_unit_test(test_dense_strided_views_on_backend),
        cmocka_unit_test(test_dense_variants_on_backend),
        cmocka_unit_test(test_dense_wide_variants_on_backend),
        cmocka_unit_test(test_copies_on_backend),
        cmocka_unit_test(test_paged_decode_on_backend),
        cmocka_unit_test(test_paged_prefill_on_backend),
        cmocka_unit_test(test_paged_empty_sequence_on_backend),
        cmocka_unit_test(test_paged_variants_on_backend),
        cmocka_unit_test(test_paged_head_dims_on_backend),
        cmocka_unit_test(test_paged_prefill_long_variants_on_backend),
        cmocka_unit_test(test_caps_as_declared_on_backend),
    };
    /* $GLLM_TEST_CPU_ISA: unset, every backend and the CPU at every level it runs; "best",
     * every backend and the CPU at its best level; a level's name, the CPU alone at that
     * level (77, skipped, where the CPU lacks it or it is the best, run by "best"): ctest
     * runs the levels as tests of their own, each within its time limit. */
    const char *only = getenv("GLLM_TEST_CPU_ISA");
    const bool one_level = only && strcmp(only, "best") != 0;
    if (one_level) {
        char why[200] = "";
        const int isa = cpu_isa_pick(only, why, sizeof why);
        if (isa == -EINVAL) {
            fprintf(stderr, "FAILED: %s\n", why);
            return 1;
        }
        if (isa < 0 || isa == (int)cpu_isa_best()) {
            fprintf(stderr, "SKIPPED: backend cpu at %s: %s\n", only,
                    isa < 0 ? why : "the best level here, run by the test without a level");
            return 77;
        }
    }
    char names[8][16];
    const int n = be_names(names, 8);
    int failed = 0;
    bool seen_required = false;
    const char *want = getenv("GLLM_TEST_BACKEND");
    for (int i = 0; i < n; i++) {
        if (!selected(names[i])) {
            fprintf(stderr, "SKIPPED: backend %s (GLLM_TEST_ONLY_BACKEND / GLLM_TEST_SKIP_BACKEND: "
                    "another test runs it)\n", names[i]);
            continue;
        }
        snprintf(cur_name, sizeof cur_name, "%.15s", names[i]);
        seen_required |= want && strcmp(want, names[i]) == 0;
        char group[64];
        if (strcmp(cur_name, "cpu") != 0) {
            if (one_level)
                continue;
            snprintf(group, sizeof group, "backend %s", cur_name);
            failed += cmocka_run_group_tests_name(group, tests, group_open, group_close);
            continue;
        }
        /* The CPU backend once per ISA level of its kernel that the variable asks for,
         * forced through GLLM_CPU_ISA as an operator would. */
        for (int l = 0; l < CPU_ISA_COUNT; l++) {
            const enum cpu_isa isa = (enum cpu_isa)l;
            if (one_level ? strcmp(only, cpu_isa_name(isa)) != 0
                          : only ? isa != cpu_isa_best() : !cpu_isa_runs(isa))
                continue;
            setenv(CPU_ISA_ENV, cpu_isa_name(isa), 1);
            snprintf(group, sizeof group, "backend cpu %s", cpu_isa_name(isa));
            failed += cmocka_run_group_tests_name(group, tests, group_open, group_close);
        }
        unsetenv(CPU_ISA_ENV);
    }
    if (want && want[0] && !seen_required) {
        fprintf(stderr, "FAILED: GLLM_TEST_BACKEND=%s, but this build has only: %s\n", want,
                backend_names());
        failed++;
    }
    return failed ? 1 : 0;
}
