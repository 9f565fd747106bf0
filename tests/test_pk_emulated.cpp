/* The portable kernels (kernels/portable/pk_kernels.cpp) run on the host, each workgroup's
 * threads as host threads with real barriers and wave exchanges (portable.h, PK_EMULATE),
 * driven by the same job logic as the HSA and cuda-portable backends (pk_host.c), against a
 * float64 reference: dense attention (f32, f16, bf16; head dims 1..256; causal; GQA;
 * Sq != Skv; strided views; lse), paged attention (page sizes 1..16, decode and chunked
 * prefill, a page number out of range) and appends. No GPU needed: this checks the kernels'
 * indexing and arithmetic, not a compiler's code for a GPU. */
#define PK_WAVE 4
#include "pk_emu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

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
    if (launches == 0)
        failures++;
    printf("%s: %d launches emulated, %d failures\n", failures ? "FAILED" : "passed", launches, failures);
    return failures ? 1 : 0;
}
