/* The portable kernels (kernels/portable/pk_kernels.cpp) run on the host, each workgroup's
 * threads as host threads with real barriers and wave exchanges (portable.h, PK_EMULATE),
 * driven by the same job logic as the HSA and cuda-portable backends (pk_host.c), against a
 * float64 reference: dense attention (f32, f16, bf16; head dims 1..256; causal; GQA;
 * Sq != Skv; strided views; lse), paged attention (page sizes 1..16, decode and chunked
 * prefill, a page number out of range) and appends; and attention variants against the
 * float64 reference of tests/ref64.c (each field alone and as models combine them, Dv < D,
 * rows that see no key, keys and pages no query sees made unreadable). No GPU needed: this checks the kernels'
 * indexing and arithmetic, not a compiler's code for a GPU. */
#define PK_WAVE 4
#include "pk_emu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

extern "C" {
#include "ref64.h"
}

/* ---- an emulated device: host memory, kernels run as host threads ---- */

static std::vector<unsigned char> scratch_mem;
static int launches;

static int emu_scratch(void *, size_t bytes, uint64_t *base)
{
    if (scratch_mem.size() < bytes + 256)
        scratch_mem.assign(bytes + 256, 0xcd);      /* stale bytes, as device scratch has */
    *base = ((uint64_t)(uintptr_t)scratch_mem.data() + 255) & ~(uint64_t)255;
    return 0;
}

static int emu_to_device(void *, uint64_t dst, const void *src, size_t bytes)
{
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return 0;
}

static int emu_to_host(void *, void *dst, uint64_t src, size_t bytes)
{
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

static int emu_launch(void *, enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx,
                      const void *params, size_t size)
{
    launches++;
    return pk_emu_run(k, gx, gy, bx, params, size);
}

static int emu_finish(void *)
{
    return 0;
}

static const struct pk_device_ops emu_ops = {emu_scratch, emu_to_device, emu_to_host, emu_launch, emu_finish};
static const struct pk_device emu = {&emu_ops, NULL, PK_WAVE};

/* ---- values in each storage format ---- */

static int failures;

static size_t esize(gllm_dtype t)
{
    return t == GLLM_DTYPE_F32 ? 4 : 2;
}

static float decode(gllm_dtype t, const void *p, int64_t i)
{
    if (t == GLLM_DTYPE_F32)
        return ((const float *)p)[i];
    const unsigned short *h = (const unsigned short *)p + i;
    return t == GLLM_DTYPE_F16 ? pk_f16_load(h) : pk_bf16_load(h);
}

static void encode(gllm_dtype t, void *p, int64_t i, float x)
{
    if (t == GLLM_DTYPE_F32)
        ((float *)p)[i] = x;
    else if (t == GLLM_DTYPE_F16)
        pk_f16_store((unsigned short *)p + i, x);
    else
        pk_bf16_store((unsigned short *)p + i, x);
}

static float rnd(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static double tolerance(gllm_dtype t)
{
    return t == GLLM_DTYPE_F32 ? 2e-5 : t == GLLM_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

/* Softmax(q k^T * scale) v for one row over keys [0, n) given as functions of the key. */
template <typename K, typename V>
static void reference_row(const double *q, int D, int n, double scale, K key, V val, double *out,
                          double *lse)
{
    std::vector<double> s(n > 0 ? n : 1);
    double m = -INFINITY, l = 0;
    for (int j = 0; j < n; j++) {
        s[j] = 0;
        for (int d = 0; d < D; d++)
            s[j] += q[d] * key(j, d);
        s[j] *= scale;
        m = s[j] > m ? s[j] : m;
    }
    for (int j = 0; j < n; j++)
        l += exp(s[j] - m);
    for (int d = 0; d < D; d++) {
        double acc = 0;
        for (int j = 0; j < n; j++)
            acc += exp(s[j] - m) * val(j, d);
        out[d] = n > 0 ? acc / l : 0;
    }
    *lse = n > 0 ? m + log(l) : -INFINITY;
}

/* ---- dense attention ---- */

enum layout { BHSD, BSHD, PADDED };

/* repeat: runs of the kernel asked for (attn_args.repeat); the case checks that many were
 * launched and that the runs' time was written. */
static void dense_case(gllm_dtype dt, int B, int Hq, int Hkv, int Sq, int Skv, int D, bool causal,
                       enum layout lay, uint32_t repeat = 0)
{
    const int pad = lay == PADDED ? 3 : 0;
    auto strides = [&](int H, int S, int64_t st[4]) {
        const int64_t Dp = D + pad;
        if (lay == BSHD) {
            st[0] = (int64_t)S * H * Dp, st[1] = Dp, st[2] = H * Dp, st[3] = 1;
        } else {
            st[0] = (int64_t)H * S * Dp, st[1] = S * Dp, st[2] = Dp, st[3] = 1;
        }
    };
    struct attn_args a = {};
    a.dtype = dt, a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = Skv, a.D = D;
    a.causal = causal, a.scale = 1.0f / sqrtf((float)D);
    strides(Hq, Sq, a.q_st), strides(Hkv, Skv, a.k_st), strides(Hkv, Skv, a.v_st), strides(Hq, Sq, a.o_st);
    a.lse_st[0] = (int64_t)Hq * Sq, a.lse_st[1] = Sq, a.lse_st[2] = 1;
    const size_t nq = (size_t)B * Hq * Sq * (D + pad), nk = (size_t)B * Hkv * Skv * (D + pad);
    std::vector<unsigned char> q(nq * esize(dt)), k(nk * esize(dt)), v(nk * esize(dt)), out(nq * esize(dt));
    std::vector<float> lse((size_t)B * Hq * Sq, 7.0f);
    unsigned seed = (unsigned)(B * 131 + Hq * 17 + Sq * 7 + Skv * 3 + D + dt * 1000);
    for (size_t i = 0; i < nq; i++) {
        encode(dt, q.data(), (int64_t)i, rnd(&seed));
        encode(dt, out.data(), (int64_t)i, 42.0f);        /* the padding must stay 42 */
    }
    for (size_t i = 0; i < nk; i++) {
        encode(dt, k.data(), (int64_t)i, rnd(&seed));
        encode(dt, v.data(), (int64_t)i, rnd(&seed));
    }
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data(), a.lse = lse.data();
    struct attn_timing timing = {UINT64_MAX, 0, 0};
    a.repeat = repeat, a.exec.timing = &timing;
    const int launched = launches;
    int rc = pk_attention(&emu, &a);
    if (rc == 0 && (launches - launched != (repeat > 1 ? (int)repeat : 1) ||
                    (repeat > 1) == (timing.kernel_ns == UINT64_MAX))) {
        printf("FAIL dense repeat %u: %d launches, kernel_ns %s\n", repeat, launches - launched,
               timing.kernel_ns == UINT64_MAX ? "not written" : "written");
        failures++;
    }
    if (rc != 0) {
        printf("FAIL dense dtype %d B%d H%d/%d S%d/%d D%d: rc %d\n", dt, B, Hq, Hkv, Sq, Skv, D, rc);
        failures++;
        return;
    }
    double worst = 0, worst_lse = 0;
    bool pad_ok = true;
    std::vector<double> qr(D), ref(D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++) {
            const int hk = h / (Hq / Hkv);
            for (int i = 0; i < Sq; i++) {
                for (int d = 0; d < D; d++)
                    qr[d] = decode(dt, q.data(), b * a.q_st[0] + h * a.q_st[1] + i * a.q_st[2] + d);
                int n = Skv;
                if (causal) {
                    long last = (long)i + Skv - Sq + 1;
                    n = last < 0 ? 0 : last > Skv ? Skv : (int)last;
                }
                double l;
                auto key = [&](int j, int d) {
                    return (double)decode(dt, k.data(), b * a.k_st[0] + hk * a.k_st[1] + j * a.k_st[2] + d);
                };
                auto val = [&](int j, int d) {
                    return (double)decode(dt, v.data(), b * a.v_st[0] + hk * a.v_st[1] + j * a.v_st[2] + d);
                };
                reference_row(qr.data(), D, n, a.scale, key, val, ref.data(), &l);
                for (int d = 0; d < D + pad; d++) {
                    const int64_t at = b * a.o_st[0] + h * a.o_st[1] + i * a.o_st[2] + d;
                    if (d >= D) {
                        pad_ok &= decode(dt, out.data(), at) == 42.0f;
                        continue;
                    }
                    double e = fabs(decode(dt, out.data(), at) - ref[d]);
                    worst = e > worst ? e : worst;
                }
                const float got = lse[(size_t)(b * a.lse_st[0] + h * a.lse_st[1] + i)];
                double el = isinf(l) ? (isinf(got) && got < 0 ? 0 : 1) : fabs(got - l);
                worst_lse = el > worst_lse ? el : worst_lse;
            }
        }
    const bool ok = worst <= tolerance(dt) && worst_lse <= 1e-4 && pad_ok;
    printf("%s dense %s B%d Hq%d Hkv%d Sq%d Skv%d D%d%s%s: max |err| %.2e, lse %.2e%s\n",
           ok ? "ok  " : "FAIL", dt == GLLM_DTYPE_F32 ? "f32" : dt == GLLM_DTYPE_F16 ? "f16" : "bf16",
           B, Hq, Hkv, Sq, Skv, D, causal ? " causal" : "",
           lay == BSHD ? " bshd" : lay == PADDED ? " padded" : "", worst, worst_lse,
           pad_ok ? "" : ", padding overwritten");
    failures += !ok;
}

/* ---- paged KV: append, then attend over what was appended ---- */

static void paged_case(gllm_dtype dt, int Hq, int Hkv, int D, int ps, std::vector<int> lens,
                       std::vector<int> queries)
{
    const int B = (int)lens.size();
    int pages = 0;
    for (int n : lens)
        pages += (n + ps - 1) / ps;
    pages += 2;                                         /* spare pages, never used */
    const size_t es = esize(dt), row = (size_t)Hkv * D;
    std::vector<unsigned char> kc(pages * ps * row * es), vc(kc.size());
    /* Page tables: pages handed out back to front, so a sequence's pages are not in order. */
    std::vector<int32_t> indptr(B + 1, 0), indices, len(lens.begin(), lens.end()), new_ptr(B + 1, 0);
    int next = pages - 1;
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < (lens[b] + ps - 1) / ps; p++)
            indices.push_back(next--);
        indptr[b + 1] = (int32_t)indices.size();
        new_ptr[b + 1] = new_ptr[b] + lens[b];
    }
    /* Every token arrives through one append. */
    const int nnew = new_ptr[B];
    std::vector<unsigned char> kn(nnew * row * es), vn(kn.size());
    unsigned seed = (unsigned)(D * 7 + ps * 31 + B);
    for (size_t i = 0; i < (size_t)nnew * row; i++) {
        encode(dt, kn.data(), (int64_t)i, rnd(&seed));
        encode(dt, vn.data(), (int64_t)i, rnd(&seed));
    }
    struct paged_args p = {};
    p.op = PAGED_APPEND, p.dtype = dt, p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
    p.page_size = ps, p.num_pages = pages, p.k_cache = kc.data(), p.v_cache = vc.data();
    p.k_new = kn.data(), p.v_new = vn.data(), p.nnew = nnew;
    p.kv_indptr = indptr.data(), p.kv_indices = indices.data(), p.kv_len = len.data();
    p.q_indptr = new_ptr.data();
    char why[160] = "";
    p.exec.why = why, p.exec.why_len = sizeof why;
    int rc = pk_paged(&emu, &p);
    bool ok = rc == 0;
    for (int b = 0; b < B && ok; b++)
        for (int t = 0; t < lens[b]; t++) {
            const int64_t r = (int64_t)indices[indptr[b] + t / ps] * ps + t % ps;
            ok &= memcmp(&kc[r * row * es], &kn[(new_ptr[b] + t) * row * es], row * es) == 0 &&
                  memcmp(&vc[r * row * es], &vn[(new_ptr[b] + t) * row * es], row * es) == 0;
        }
    /* Attention: each sequence's last queries[b] tokens ask. */
    std::vector<int32_t> qptr(B + 1, 0);
    int maxq = 0, maxkv = 0;
    for (int b = 0; b < B; b++) {
        qptr[b + 1] = qptr[b] + queries[b];
        maxq = queries[b] > maxq ? queries[b] : maxq;
        maxkv = lens[b] > maxkv ? lens[b] : maxkv;
    }
    const int nq = qptr[B];
    std::vector<unsigned char> q((size_t)nq * Hq * D * es), out(q.size());
    for (size_t i = 0; i < (size_t)nq * Hq * D; i++)
        encode(dt, q.data(), (int64_t)i, rnd(&seed));
    struct paged_args at = p;
    at.op = PAGED_ATTEND, at.q = q.data(), at.out = out.data(), at.nq = nq, at.q_indptr = qptr.data();
    at.max_q_len = maxq, at.max_kv_len = maxkv, at.causal = true, at.scale = 1.0f / sqrtf((float)D);
    rc = ok ? pk_paged(&emu, &at) : rc;
    ok &= rc == 0;
    double worst = 0;
    std::vector<double> qr(D), ref(D);
    for (int b = 0; b < B && ok; b++)
        for (int i = 0; i < queries[b]; i++)
            for (int h = 0; h < Hq; h++) {
                const int hk = h / (Hq / Hkv);
                const int64_t qrow = ((int64_t)(qptr[b] + i) * Hq + h) * D;
                for (int d = 0; d < D; d++)
                    qr[d] = decode(dt, q.data(), qrow + d);
                const int n = lens[b] - queries[b] + i + 1;          /* causal, bottom-right */
                auto at_tok = [&](int j) { return (int64_t)indices[indptr[b] + j / ps] * ps + j % ps; };
                auto key = [&](int j, int d) { return (double)decode(dt, kc.data(), at_tok(j) * (int64_t)row + hk * D + d); };
                auto val = [&](int j, int d) { return (double)decode(dt, vc.data(), at_tok(j) * (int64_t)row + hk * D + d); };
                double l;
                reference_row(qr.data(), D, n, at.scale, key, val, ref.data(), &l);
                for (int d = 0; d < D; d++) {
                    double e = fabs(decode(dt, out.data(), qrow + d) - ref[d]);
                    worst = e > worst ? e : worst;
                }
            }
    ok &= worst <= tolerance(dt);
    /* A page number outside the pool is caught on the device, never followed. */
    indices[0] = pages + 5;
    at.indices_on_device = true;                        /* read in place, as from a device tensor */
    why[0] = '\0';
    const int bad = pk_paged(&emu, &at);
    ok &= bad == GLLM_EBOUNDS && strstr(why, "kv_indices[0] is") && strstr(why, "outside the pool");
    printf("%s paged %s Hq%d Hkv%d D%d page %d, %d sequences: rc %d, max |err| %.2e, bad page -> %d\n",
           ok ? "ok  " : "FAIL", dt == GLLM_DTYPE_F32 ? "f32" : dt == GLLM_DTYPE_F16 ? "f16" : "bf16",
           Hq, Hkv, D, ps, B, rc, worst, bad);
    failures += !ok;
}

/* ---- attention variants, against the float64 reference (tests/ref64.c) ---- */

/* A variant as a case asks for it; slopes and sinks are made per head by the case. */
struct var_spec {
    bool window;
    int wl, wr;              /* -1: no edge */
    int chunk;               /* 0: none */
    float cap;               /* 0: none */
    bool alibi, sinks;
    int Dv;                  /* v's head dim; 0: D */
};

static const char *dt_name(gllm_dtype t)
{
    return t == GLLM_DTYPE_F32 ? "f32" : t == GLLM_DTYPE_F16 ? "f16" : "bf16";
}

/* " window 6/-1 chunk 8 cap 2 alibi sinks Dv 24", or "" for none. */
static std::string describe(const var_spec &v)
{
    char part[48];
    std::string d;
    if (v.window)
        snprintf(part, sizeof part, " window %d/%d", v.wl, v.wr), d += part;
    if (v.chunk)
        snprintf(part, sizeof part, " chunk %d", v.chunk), d += part;
    if (v.cap > 0)
        snprintf(part, sizeof part, " cap %g", v.cap), d += part;
    if (v.alibi)
        d += " alibi";
    if (v.sinks)
        d += " sinks";
    if (v.Dv)
        snprintf(part, sizeof part, " Dv %d", v.Dv), d += part;
    return d;
}

/* ALiBi's slopes 2^-(h+1) (the first heads' bias is large next to these scores) and sinks in
 * [-0.5, 2.5), where the sink takes a share of the softmax worth checking. */
static void per_head(int Hq, unsigned seed, std::vector<float> &alibi, std::vector<float> &sinks)
{
    alibi.resize(Hq), sinks.resize(Hq);
    for (int h = 0; h < Hq; h++) {
        alibi[h] = ldexpf(1.0f, -(h + 1));
        sinks[h] = 1.0f + 1.5f * rnd(&seed);
    }
}

static struct attn_variant variant_of(const var_spec &v, const float *alibi, const float *sinks)
{
    struct attn_variant a = {};
    a.window = v.window, a.window_left = v.wl, a.window_right = v.wr;
    a.chunk = (uint32_t)v.chunk, a.soft_cap = v.cap;
    a.alibi_slopes = v.alibi ? alibi : NULL, a.sinks = v.sinks ? sinks : NULL;
    return a;
}

static struct ref64_variant ref_of(const var_spec &v, bool causal, const float *alibi,
                                   const float *sinks)
{
    struct ref64_variant r = {};
    r.causal = causal, r.window = v.window, r.window_left = v.wl, r.window_right = v.wr;
    r.chunk = v.chunk, r.soft_cap = v.cap;
    r.alibi_slopes = v.alibi ? alibi : NULL, r.sinks = v.sinks ? sinks : NULL;
    return r;
}

/* Whether the query at pos sees key j, from gllm.h's definition (for poisoning keys no query
 * sees: a kernel that computed one would turn its row NaN). */
static bool sees(const var_spec &v, bool causal, long pos, long j)
{
    auto fdiv = [](long a, long b) { return (long)floor((double)a / (double)b); };
    return !(causal && j > pos) && !(v.window && v.wl >= 0 && j < pos - v.wl) &&
           !(v.window && v.wr >= 0 && j > pos + v.wr) &&
           !(v.chunk && fdiv(pos, v.chunk) != fdiv(j, v.chunk));
}

/* The verdict of one variant case: within the table's tolerance of the reference, and (for
 * a case that asks for a field) outside it from the plain reference, so a kernel that
 * ignored the field would fail. */
static void verdict(const char *what, gllm_dtype dt, int rc, const std::vector<double> &got,
                    const std::vector<double> &want, const std::vector<double> &plain,
                    const std::vector<double> *got_lse, const std::vector<double> *want_lse,
                    bool extra_ok, const char *extra)
{
    const struct ref64_tol tol = ref64_tolerance(dt);
    const double e = rc ? INFINITY : ref64_rel_error(got.data(), want.data(), got.size());
    const double el = rc || !got_lse ? 0 : ref64_lse_error(got_lse->data(), want_lse->data(), got_lse->size());
    const double ep = plain.empty() ? INFINITY : ref64_rel_error(got.data(), plain.data(), got.size());
    const bool ok = rc == 0 && e <= tol.out && el <= tol.lse && ep > tol.out && extra_ok;
    char lse[32] = "";
    if (got_lse)
        snprintf(lse, sizeof lse, ", lse %.2e", el);
    printf("%s %s: rc %d, err %.2e%s, from plain %.2e%s\n", ok ? "ok  " : "FAIL", what, rc, e,
           lse, ep, extra_ok ? "" : extra);
    failures += !ok;
}

/* Dense attention with variant v over [B, H, S, D] views (out rows padded by 2, the padding
 * checked untouched). Keys no query sees are NaN. */
static void dense_variant(gllm_dtype dt, int B, int Hq, int Hkv, int Sq, int Skv, int D,
                          bool causal, const var_spec &v)
{
    const int Dv = v.Dv ? v.Dv : D, Op = Dv + 2;
    const size_t es = esize(dt), nq = (size_t)B * Hq * Sq * D, nk = (size_t)B * Hkv * Skv * D;
    const size_t nv = (size_t)B * Hkv * Skv * Dv, no = (size_t)B * Hq * Sq * Op;
    std::vector<unsigned char> q(nq * es), k(nk * es), vv(nv * es), out(no * es);
    unsigned seed = (unsigned)(Sq * 131 + Skv * 17 + D * 7 + Dv + dt * 1000 + v.wl * 3 + v.chunk);
    for (size_t i = 0; i < nq; i++)
        encode(dt, q.data(), (int64_t)i, rnd(&seed));
    for (size_t i = 0; i < nk; i++)
        encode(dt, k.data(), (int64_t)i, rnd(&seed));
    for (size_t i = 0; i < nv; i++)
        encode(dt, vv.data(), (int64_t)i, rnd(&seed));
    for (size_t i = 0; i < no; i++)
        encode(dt, out.data(), (int64_t)i, NAN);      /* an unwritten element stays NaN */
    std::vector<float> alibi, sinks, lse((size_t)B * Hq * Sq, NAN);
    per_head(Hq, seed, alibi, sinks);
    struct attn_args a = {};
    a.dtype = dt, a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Sq = Sq, a.Skv = Skv, a.D = D, a.Dv = Dv;
    a.causal = causal, a.scale = 2.0f / sqrtf((float)D);   /* scores large enough to cap */
    const int64_t qst[4] = {(int64_t)Hq * Sq * D, (int64_t)Sq * D, D, 1};
    const int64_t kst[4] = {(int64_t)Hkv * Skv * D, (int64_t)Skv * D, D, 1};
    const int64_t vst[4] = {(int64_t)Hkv * Skv * Dv, (int64_t)Skv * Dv, Dv, 1};
    const int64_t ost[4] = {(int64_t)Hq * Sq * Op, (int64_t)Sq * Op, Op, 1};
    memcpy(a.q_st, qst, sizeof qst), memcpy(a.k_st, kst, sizeof kst);
    memcpy(a.v_st, vst, sizeof vst), memcpy(a.o_st, ost, sizeof ost);
    a.lse_st[0] = (int64_t)Hq * Sq, a.lse_st[1] = Sq, a.lse_st[2] = 1;
    a.q = q.data(), a.k = k.data(), a.v = vv.data(), a.out = out.data(), a.lse = lse.data();
    a.variant = variant_of(v, alibi.data(), sinks.data());
    const struct ref_view rq = {q.data(), dt, {qst[0], qst[1], qst[2], qst[3]}};
    const struct ref_view rk = {k.data(), dt, {kst[0], kst[1], kst[2], kst[3]}};
    const struct ref_view rv = {vv.data(), dt, {vst[0], vst[1], vst[2], vst[3]}};
    const size_t rows = (size_t)B * Hq * Sq;
    std::vector<double> want(rows * Dv), want_lse(rows), plain, got(rows * Dv), got_lse(rows);
    const bool fields = v.window || v.chunk || v.cap > 0 || v.alibi || v.sinks;
    if (fields) {                                       /* before the poison below */
        struct ref64_variant none = {};
        none.causal = causal;
        plain.resize(rows * Dv);
        ref64_attention_variant(B, Hq, Hkv, Sq, Skv, D, Dv, rq, rk, rv, &none, a.scale,
                                plain.data(), NULL);
    }
    int poisoned = 0;
    for (int j = 0; j < Skv; j++) {
        bool seen = false;
        for (int i = 0; i < Sq && !seen; i++)
            seen = sees(v, causal, (long)i + Skv - Sq, j);
        for (int bh = 0; bh < B * Hkv && !seen; bh++) {
            for (int d = 0; d < D; d++)
                encode(dt, k.data(), (int64_t)bh * Skv * D + (int64_t)j * D + d, NAN);
            for (int d = 0; d < Dv; d++)
                encode(dt, vv.data(), (int64_t)bh * Skv * Dv + (int64_t)j * Dv + d, NAN);
        }
        poisoned += !seen;
    }
    const int rc = pk_attention(&emu, &a);
    const struct ref64_variant rvar = ref_of(v, causal, alibi.data(), sinks.data());
    ref64_attention_variant(B, Hq, Hkv, Sq, Skv, D, Dv, rq, rk, rv, &rvar, a.scale, want.data(),
                            want_lse.data());
    bool pad_ok = true;
    for (size_t r = 0; r < rows; r++) {
        for (int d = 0; d < Op; d++) {
            const double x = decode(dt, out.data(), (int64_t)(r * Op + d));
            if (d < Dv)
                got[r * Dv + d] = x;
            else
                pad_ok &= isnan(x);
        }
        got_lse[r] = lse[r];
    }
    char what[256];
    snprintf(what, sizeof what, "dense %s B%d Hq%d Hkv%d Sq%d Skv%d D%d%s%s (%d keys NaN)",
             dt_name(dt), B, Hq, Hkv, Sq, Skv, D, causal ? " causal" : "", describe(v).c_str(),
             poisoned);
    verdict(what, dt, rc, got, want, plain, &got_lse, &want_lse, pad_ok, ", padding written");
}

/* Keys and values of the paged pools for ref64: token j of sequence b through its table. */
struct pool_view {
    const unsigned char *kc, *vc;
    gllm_dtype dt;
    const int32_t *indptr, *indices;
    int ps, Hkv, D;
};

static double pool_get(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value)
{
    const pool_view *p = (const pool_view *)ctx;
    const int64_t r = (int64_t)p->indices[p->indptr[b] + j / p->ps] * p->ps + j % p->ps;
    return decode(p->dt, value ? p->vc : p->kc, (r * p->Hkv + hk) * p->D + d);
}

/* Paged attention with variant v: sequences of lens[b] tokens, the last queries[b] of each
 * asking. A page no query of its sequence sees gets a number outside the pool, which the
 * kernel must never follow; then a page every sequence's last query sees gets one, which it
 * must catch. */
static void paged_variant(gllm_dtype dt, int Hq, int Hkv, int D, int ps, std::vector<int> lens,
                          std::vector<int> queries, const var_spec &v)
{
    const int B = (int)lens.size();
    std::vector<int32_t> indptr(B + 1, 0), indices, len(lens.begin(), lens.end()), qptr(B + 1, 0);
    int pages = 0, maxq = 0, maxkv = 0;
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < (lens[b] + ps - 1) / ps; p++)
            indices.push_back(pages++);
        indptr[b + 1] = (int32_t)indices.size();
        qptr[b + 1] = qptr[b] + queries[b];
        maxq = queries[b] > maxq ? queries[b] : maxq;
        maxkv = lens[b] > maxkv ? lens[b] : maxkv;
    }
    std::reverse(indices.begin(), indices.end());       /* pages out of order */
    for (int b = 0; b < B; b++)
        std::reverse(indices.begin() + indptr[b], indices.begin() + indptr[b + 1]);
    const size_t es = esize(dt), pool = (size_t)pages * ps * Hkv * D, nq = (size_t)qptr[B];
    std::vector<unsigned char> kc(pool * es), vc(pool * es), q(nq * Hq * D * es), out(q.size());
    unsigned seed = (unsigned)(D * 7 + ps * 31 + B + v.wl * 5 + v.chunk * 3 + dt * 100);
    for (size_t i = 0; i < pool; i++) {
        encode(dt, kc.data(), (int64_t)i, rnd(&seed));
        encode(dt, vc.data(), (int64_t)i, rnd(&seed));
    }
    for (size_t i = 0; i < nq * Hq * D; i++) {
        encode(dt, q.data(), (int64_t)i, rnd(&seed));
        encode(dt, out.data(), (int64_t)i, NAN);
    }
    std::vector<float> alibi, sinks;
    per_head(Hq, seed, alibi, sinks);
    struct paged_args p = {};
    p.op = PAGED_ATTEND, p.dtype = dt, p.B = B, p.Hq = Hq, p.Hkv = Hkv, p.D = D;
    p.page_size = ps, p.num_pages = pages, p.k_cache = kc.data(), p.v_cache = vc.data();
    p.q = q.data(), p.out = out.data(), p.nq = (int64_t)nq, p.q_indptr = qptr.data();
    p.kv_indptr = indptr.data(), p.kv_indices = indices.data(), p.kv_len = len.data();
    p.max_q_len = maxq, p.max_kv_len = maxkv, p.causal = true, p.scale = 2.0f / sqrtf((float)D);
    p.variant = variant_of(v, alibi.data(), sinks.data());
    char why[160] = "";
    p.exec.why = why, p.exec.why_len = sizeof why;
    /* The reference first, while every page number is in range. */
    const pool_view pv = {kc.data(), vc.data(), dt, indptr.data(), indices.data(), ps, Hkv, D};
    const struct ref64_kv kv = {pool_get, &pv};
    const struct ref64_variant rvar = ref_of(v, true, alibi.data(), sinks.data());
    struct ref64_variant none = {};
    none.causal = true;
    std::vector<double> want(nq * Hq * D), plain(want.size()), got(want.size()), qd(D);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < queries[b]; i++)
            for (int h = 0; h < Hq; h++) {
                const size_t r = (size_t)(qptr[b] + i) * Hq + h;
                for (int d = 0; d < D; d++)
                    qd[d] = decode(dt, q.data(), (int64_t)(r * D + d));
                const int64_t pos = lens[b] - queries[b] + i;
                ref64_row_variant(qd.data(), D, D, &kv, b, h, h / (Hq / Hkv), lens[b], pos,
                                  p.scale, &rvar, &want[r * D], NULL);
                ref64_row_variant(qd.data(), D, D, &kv, b, h, h / (Hq / Hkv), lens[b], pos,
                                  p.scale, &none, &plain[r * D], NULL);
            }
    int unseen = 0;
    for (int b = 0; b < B; b++)
        for (int pg = 0; pg < indptr[b + 1] - indptr[b]; pg++) {
            bool seen = false;
            for (int j = pg * ps; j < (pg + 1) * ps && j < lens[b] && !seen; j++)
                for (int i = 0; i < queries[b] && !seen; i++)
                    seen = sees(v, true, lens[b] - queries[b] + i, j);
            if (!seen) {
                indices[indptr[b] + pg] = pages + 1000;
                unseen++;
            }
        }
    p.indices_on_device = true;                         /* checked by the kernel alone */
    const int rc = pk_paged(&emu, &p);
    for (size_t i = 0; i < got.size(); i++)
        got[i] = decode(dt, out.data(), (int64_t)i);
    indices[indptr[1] - 1] = -1;                        /* sequence 0's last page */
    why[0] = '\0';
    const int bad = pk_paged(&emu, &p);
    const bool caught = bad == GLLM_EBOUNDS && strstr(why, "outside the pool");
    char what[256];
    snprintf(what, sizeof what, "paged %s Hq%d Hkv%d D%d page %d, %d sequences, %d queries%s "
             "(%d pages out of range, unread)", dt_name(dt), Hq, Hkv, D, ps, B, (int)nq,
             describe(v).c_str(), unseen);
    verdict(what, dt, rc, got, want, plain, NULL, NULL, caught, ", a bad page not caught");
}

static void variant_cases(void)
{
    const gllm_dtype all[3] = {GLLM_DTYPE_F32, GLLM_DTYPE_F16, GLLM_DTYPE_BF16};
    const var_spec sliding = {true, 6, -1, 0, 0, false, false, 0};
    const var_spec both_edges = {true, 4, 3, 0, 0, false, false, 0};
    const var_spec chunk = {false, -1, -1, 8, 0, false, false, 0};
    const var_spec cap = {false, -1, -1, 0, 1.5f, false, false, 0};
    const var_spec alibi = {false, -1, -1, 0, 0, true, false, 0};
    const var_spec sinks = {false, -1, -1, 0, 0, false, true, 0};
    const var_spec gemma = {true, 7, -1, 0, 2.0f, false, false, 0};     /* window + soft-cap */
    const var_spec gpt_oss = {true, 7, -1, 0, 0, false, true, 0};       /* window + sinks */
    const var_spec right_edge = {true, -1, 0, 0, 0, false, false, 0};   /* negative rows: none */
    const var_spec every = {true, 9, 2, 8, 2.0f, true, true, 0};
    const var_spec dv = {false, -1, -1, 0, 0, false, false, 24};
    const var_spec dv_gpt_oss = {true, 5, -1, 0, 0, false, true, 128};  /* D 192 / Dv 128 */
    for (gllm_dtype dt : all) {
        dense_variant(dt, 1, 4, 2, 21, 21, 32, true, sliding);
        dense_variant(dt, 1, 4, 2, 21, 21, 32, true, gpt_oss);
        dense_variant(dt, 1, 4, 1, 13, 30, 32, true, gemma);            /* Sq < Skv */
        paged_variant(dt, 4, 2, 32, 4, {29, 3, 18}, {1, 1, 1}, gpt_oss);       /* decode */
        paged_variant(dt, 4, 1, 32, 3, {26, 9, 17}, {11, 9, 1}, chunk);        /* ragged prefill */
    }
    dense_variant(GLLM_DTYPE_F32, 2, 2, 2, 17, 17, 16, false, both_edges);
    dense_variant(GLLM_DTYPE_F16, 1, 4, 2, 20, 37, 32, true, chunk);     /* Llama 4, Sq < Skv */
    dense_variant(GLLM_DTYPE_F32, 1, 2, 1, 19, 7, 16, false, chunk);     /* Sq > Skv: position < 0 */
    dense_variant(GLLM_DTYPE_BF16, 1, 2, 2, 9, 9, 64, false, cap);
    dense_variant(GLLM_DTYPE_F32, 1, 4, 2, 15, 15, 32, true, alibi);
    dense_variant(GLLM_DTYPE_F16, 1, 4, 4, 9, 23, 16, false, alibi);
    dense_variant(GLLM_DTYPE_F32, 1, 3, 1, 14, 6, 16, true, sinks);      /* rows that see no key */
    dense_variant(GLLM_DTYPE_BF16, 1, 2, 1, 10, 4, 8, false, right_edge); /* the same, lse -inf */
    dense_variant(GLLM_DTYPE_F32, 1, 4, 2, 26, 31, 32, true, every);
    dense_variant(GLLM_DTYPE_F16, 1, 2, 1, 26, 20, 32, false, every);    /* Sq > Skv */
    dense_variant(GLLM_DTYPE_F32, 1, 2, 1, 6, 11, 40, true, dv);
    dense_variant(GLLM_DTYPE_BF16, 1, 2, 1, 9, 14, 192, true, dv_gpt_oss);
    paged_variant(GLLM_DTYPE_F16, 4, 2, 64, 16, {70, 5}, {1, 1}, sliding);     /* pages skipped */
    paged_variant(GLLM_DTYPE_BF16, 2, 1, 16, 5, {23, 12}, {8, 12}, gemma);
    paged_variant(GLLM_DTYPE_F32, 4, 2, 16, 2, {15, 6}, {5, 6}, alibi);
    paged_variant(GLLM_DTYPE_F32, 2, 2, 16, 4, {13, 1, 9}, {4, 1, 9}, sinks);
    paged_variant(GLLM_DTYPE_F16, 2, 1, 16, 3, {33}, {13}, cap);
    paged_variant(GLLM_DTYPE_F32, 4, 2, 24, 4, {40, 17}, {12, 17}, every);
}

int main(void)
{
    const gllm_dtype all[3] = {GLLM_DTYPE_F32, GLLM_DTYPE_F16, GLLM_DTYPE_BF16};
    for (gllm_dtype dt : all) {
        dense_case(dt, 2, 4, 4, 9, 9, 64, false, BHSD);
        dense_case(dt, 2, 4, 4, 9, 9, 64, true, BHSD);
        dense_case(dt, 1, 8, 2, 5, 37, 128, true, BSHD);        /* GQA, Sq < Skv */
    }
    dense_case(GLLM_DTYPE_F16, 1, 2, 1, 12, 5, 16, true, BHSD);   /* Sq > Skv: rows that see nothing */
    dense_case(GLLM_DTYPE_F32, 1, 2, 2, 3, 20, 1, false, PADDED); /* D = 1 */
    dense_case(GLLM_DTYPE_BF16, 1, 2, 1, 6, 6, 7, true, PADDED);  /* odd D, gaps in the output */
    dense_case(GLLM_DTYPE_F16, 1, 1, 1, 5, 40, 256, true, BHSD);  /* the largest head dim */
    dense_case(GLLM_DTYPE_F32, 1, 3, 1, 1, 33, 96, true, BSHD);   /* one query row, decode-like */
    dense_case(GLLM_DTYPE_F16, 2, 4, 2, 9, 17, 64, true, BHSD, 3); /* repeat: three runs, one result */
    paged_case(GLLM_DTYPE_F16, 4, 2, 64, 16, {37, 1, 16}, {1, 1, 1});          /* decode */
    paged_case(GLLM_DTYPE_BF16, 4, 1, 32, 1, {9, 4}, {3, 4});                  /* page size 1 */
    paged_case(GLLM_DTYPE_F32, 2, 2, 40, 3, {20, 7, 11}, {6, 2, 11});          /* chunked prefill */
    paged_case(GLLM_DTYPE_F16, 8, 2, 128, 5, {23}, {17});
    variant_cases();
    if (launches == 0)
        failures++;
    printf("%s: %d launches emulated, %d failures\n", failures ? "FAILED" : "passed", launches, failures);
    return failures ? 1 : 0;
}
