/* Paged KV cache against a real gllmd: kv_append, decode and prefill vs float64, and every bad table refused. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gllm/gllm.h"
#include "testutil.h"

/* One test cache: B sequences of ragged lengths over a pool of shuffled pages, and the
 * dense K and V each sequence should read back as (the float64 reference's input). */
struct cache_case {
    int B, Hq, Hkv, D, page_size;
    gllm_dtype dtype;
    const int *len;           /* tokens per sequence after both appends */
    const int *tail;          /* of which the second kv_append writes the last tail[b] */
    const int *qlen;          /* prefill queries per sequence (its last tokens) */
    bool device;              /* pools, q, out and new tokens in device tensors */
    bool device_pages;        /* attention reads kv_indices from the device tensor too */
    bool trim_append;         /* the second kv_append's table holds only its pages */
};

struct cache {
    struct cache_case c;
    gllm_client *cl;
    gllm_memory *arena;       /* tables, staging, and everything when !device */
    gllm_memory *dt;
    char *base;
    size_t used, es, row;     /* bump allocator; element size; bytes per [Hkv, D] row */
    int P, total, nq;
    int *pages;               /* per sequence, its pages in order: pages[first[b] + i] */
    int *first;
    gllm_tensor kc, vc;
};

static uint64_t take(struct cache *k, size_t bytes)
{
    size_t at = (k->used + 255) & ~(size_t)255;
    k->used = at + bytes;
    assert_true(k->used <= gllm_memory_size(k->arena));
    return at;
}

/* A tensor of the case's dtype in the arena or, for device cases, at the same offset in
 * the device tensor (which mirrors the arena's layout). */
static gllm_tensor tensor(struct cache *k, uint64_t off, bool on_device, gllm_dtype dt, int rank,
                          const int64_t *shape)
{
    gllm_tensor t;
    if (on_device)
        assert_int_equal(gllm_tensor_init(k->dt, off, dt, rank, shape, &t), 0);
    else
        assert_int_equal(gllm_tensor_init(k->arena, off, dt, rank, shape, &t), 0);
    return t;
}

static int32_t *i32_at(struct cache *k, uint64_t off)
{
    return (int32_t *)(void *)(k->base + off);
}

static gllm_tensor i32_tensor(struct cache *k, uint64_t off, int64_t n)
{
    return tensor(k, off, false, GLLM_DTYPE_I32, 1, &n);
}

/* The page table of each sequence's tokens [0, to[b]), starting at its page that holds
 * token from[b] (from NULL: at its first page; kv_append needs only the pages its new
 * tokens land in). With on_device, kv_indices is copied to the same offset of the device
 * tensor and read from there. */
static gllm_paged_kv table_span(struct cache *k, const int *from, const int *to, bool on_device)
{
    const struct cache_case *c = &k->c;
    const int ps = c->page_size;
    uint64_t o_ind = take(k, 4 * (size_t)(c->B + 1)), o_idx = take(k, 4 * (size_t)k->P + 4),
             o_last = take(k, 4 * (size_t)c->B + 4);
    int32_t *indptr = i32_at(k, o_ind), *idx = i32_at(k, o_idx), *last = i32_at(k, o_last);
    indptr[0] = 0;
    for (int b = 0; b < c->B; b++) {
        int fp = from ? from[b] / ps : 0, np = to[b] > fp * ps ? (to[b] - 1) / ps + 1 - fp : 0;
        for (int i = 0; i < np; i++)
            idx[indptr[b] + i] = k->pages[k->first[b] + fp + i];
        indptr[b + 1] = indptr[b] + np;
        last[b] = np ? to[b] - (fp + np - 1) * ps : 0;
    }
    int64_t n = indptr[c->B];
    if (on_device)
        assert_int_equal(gllm_memory_copy(k->cl, k->dt, o_idx, k->arena, o_idx, 4 * (size_t)n + 4), 0);
    return (gllm_paged_kv){.k_cache = k->kc, .v_cache = k->vc,
                           .indptr = i32_tensor(k, o_ind, c->B + 1),
                           .indices = tensor(k, o_idx, on_device, GLLM_DTYPE_I32, 1, &n),
                           .last_page_len = i32_tensor(k, o_last, c->B)};
}

static gllm_paged_kv table(struct cache *k, const int *len)
{
    return table_span(k, NULL, len, false);
}

/* The value every test token has: a function of (sequence, position, head, dim, K or V),
 * rounded to the dtype, so the reference needs no copy of the cache. */
static double token_value(const struct cache *k, int b, int pos, int h, int d, int which)
{
    uint64_t s = ((uint64_t)b * 1000003u + (uint64_t)pos) * 977u + (uint64_t)(h * 131 + d) * 2 +
                 (uint64_t)which + 12345;
    for (int i = 0; i < 3; i++)
        s = s * 6364136223846793005ull + 1442695040888963407ull;
    double x = (double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
    char buf[4];
    elem_set(buf, k->c.dtype, 0, x);
    return elem_get(buf, k->c.dtype, 0);
}

static void setup(struct cache *k, gllm_client *cl, const struct cache_case *c, uint64_t seed)
{
    memset(k, 0, sizeof *k);
    k->c = *c;
    k->cl = cl;
    k->es = gllm_dtype_size(c->dtype);
    k->row = (size_t)(c->Hkv * c->D) * k->es;
    k->first = calloc((size_t)c->B + 1, sizeof *k->first);
    for (int b = 0; b < c->B; b++) {
        k->first[b + 1] = k->first[b] + (c->len[b] + c->page_size - 1) / c->page_size;
        k->total += c->len[b];
        k->nq += c->qlen[b];
    }
    k->P = k->first[c->B] + 3;                     /* spare pages no sequence uses */
    k->pages = malloc((size_t)k->P * sizeof *k->pages);
    for (int i = 0; i < k->P; i++)
        k->pages[i] = i;
    for (int i = k->P - 1; i > 0; i--) {           /* shuffled: tables jump around the pool */
        int j = (int)(rng_next(&seed) % (uint64_t)(i + 1)), t = k->pages[i];
        k->pages[i] = k->pages[j], k->pages[j] = t;
    }
    size_t pool = (size_t)k->P * (size_t)c->page_size * k->row;
    size_t qbytes = (size_t)(k->nq > c->B ? k->nq : c->B) * (size_t)(c->Hq * c->D) * k->es;
    size_t size = 2 * pool + 2 * (size_t)k->total * k->row + 4 * qbytes + 16 * (size_t)k->P + 65536;
    assert_int_equal(gllm_arena_create(cl, size, &k->arena), 0);
    k->base = gllm_memory_data(k->arena);
    if (c->device)
        assert_int_equal(gllm_dtensor_create(cl, size, 0, &k->dt), 0);
    int64_t shape[4] = {k->P, c->page_size, c->Hkv, c->D};
    uint64_t okc = take(k, pool), ovc = take(k, pool);
    memset(k->base + okc, 0xff, 2 * pool + 256);   /* NaN: a slot never written shows */
    if (c->device)
        assert_int_equal(gllm_memory_copy(cl, k->dt, okc, k->arena, okc, ovc + pool - okc), 0);
    k->kc = tensor(k, okc, c->device, c->dtype, 4, shape);
    k->vc = tensor(k, ovc, c->device, c->dtype, 4, shape);
}

static void teardown(struct cache *k)
{
    if (k->dt)
        assert_int_equal(gllm_memory_release(k->dt), 0);
    assert_int_equal(gllm_memory_release(k->arena), 0);
    free(k->pages);
    free(k->first);
}

/* Appends tokens [from[b], to[b]) of each sequence with one kv_append; trimmed: its table
 * holds only the pages those tokens land in. */
static void append(struct cache *k, const int *from, const int *to, bool trimmed)
{
    const struct cache_case *c = &k->c;
    gllm_kv_append_params p = {.size = sizeof p,
                               .kv = table_span(k, trimmed ? from : NULL, to, false)};
    int n = 0;
    for (int b = 0; b < c->B; b++)
        n += to[b] - from[b];
    uint64_t ok = take(k, (size_t)n * k->row + 1), ov = take(k, (size_t)n * k->row + 1),
             oa = take(k, 4 * (size_t)(c->B + 1));
    int32_t *aind = i32_at(k, oa);
    aind[0] = 0;
    int t = 0;
    for (int b = 0; b < c->B; b++) {
        for (int pos = from[b]; pos < to[b]; pos++, t++)
            for (int h = 0; h < c->Hkv; h++)
                for (int d = 0; d < c->D; d++) {
                    int64_t i = ((int64_t)t * c->Hkv + h) * c->D + d;
                    elem_set(k->base + ok, c->dtype, i, token_value(k, b, pos, h, d, 0));
                    elem_set(k->base + ov, c->dtype, i, token_value(k, b, pos, h, d, 1));
                }
        aind[b + 1] = t;
    }
    if (c->device)
        assert_int_equal(gllm_memory_copy(k->cl, k->dt, ok, k->arena, ok, ov + (size_t)n * k->row - ok), 0);
    int64_t shape[3] = {n, c->Hkv, c->D};
    p.k = tensor(k, ok, c->device, c->dtype, 3, shape);
    p.v = tensor(k, ov, c->device, c->dtype, 3, shape);
    p.append_indptr = i32_tensor(k, oa, c->B + 1);
    /* Ordered by counters, as a client's stream would: held until the wait is raised (from
     * the host here), then it signals. */
    gllm_memory *ctr;
    assert_int_equal(gllm_arena_create(k->cl, 4096, &ctr), 0);
    const uint32_t *signal = (const uint32_t *)gllm_memory_data(ctr) + 1;
    p.wait = (gllm_counter){.memory = ctr, .offset = 0, .value = 1};
    p.signal = (gllm_counter){.memory = ctr, .offset = 4, .value = 7};
    uint64_t job;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_kv_append_submit(k->cl, &p, &job), 0);
    assert_int_equal(gllm_job_poll(k->cl, job, &res), -EAGAIN);
    assert_int_equal(__atomic_load_n(signal, __ATOMIC_ACQUIRE), 0);
    assert_int_equal(gllm_counter_write(&p.wait), 0);
    int r = gllm_job_wait(k->cl, job, &res);
    if (r != 0)
        fprintf(stderr, "kv_append: %s\n", gllm_client_last_error(k->cl));
    assert_int_equal(r, 0);
    assert_int_equal(__atomic_load_n(signal, __ATOMIC_ACQUIRE), 7);
    assert_int_equal(gllm_memory_release(ctr), 0);
}

/* Every slot a sequence owns holds exactly its token; read back from the pool itself. */
static void check_pool(struct cache *k)
{
    const struct cache_case *c = &k->c;
    size_t pool = (size_t)k->P * (size_t)c->page_size * k->row;
    if (c->device)
        assert_int_equal(gllm_memory_copy(k->cl, k->arena, k->kc.offset, k->dt, k->kc.offset,
                                           k->vc.offset + pool - k->kc.offset), 0);
    int bad = 0;
    for (int b = 0; b < c->B; b++)
        for (int pos = 0; pos < c->len[b]; pos++) {
            int page = k->pages[k->first[b] + pos / c->page_size];
            int64_t slot = ((int64_t)page * c->page_size + pos % c->page_size) * c->Hkv * c->D;
            for (int h = 0; h < c->Hkv; h++)
                for (int d = 0; d < c->D; d++)
                    for (int w = 0; w < 2; w++) {
                        const char *poolp = k->base + (w ? k->vc.offset : k->kc.offset);
                        bad += elem_get(poolp, c->dtype, slot + h * c->D + d) !=
                               token_value(k, b, pos, h, d, w);
                    }
        }
    assert_int_equal(bad, 0);
}

/* The cache's tokens as ref64 reads them: token_value, no copy of the pools. */
static double cache_get(const void *ctx, int64_t b, int64_t hk, int64_t j, int64_t d, bool value)
{
    return token_value(ctx, (int)b, (int)j, (int)hk, (int)d, value);
}

/* float64 attention of query row (dense [Hq, D] at q) of sequence b at position pos. */
static void ref_row(const struct cache *k, int b, int pos, const char *q, double scale, double *out)
{
    const struct cache_case *c = &k->c;
    const struct ref64_kv kv = {cache_get, k};
    double *qd = malloc((size_t)c->D * sizeof *qd);
    assert_non_null(qd);
    for (int h = 0; h < c->Hq; h++) {
        for (int d = 0; d < c->D; d++)
            qd[d] = elem_get(q, c->dtype, h * c->D + d);
        ref64_row(qd, c->D, &kv, b, h / (c->Hq / c->Hkv), pos + 1, scale, out + h * c->D, NULL);
    }
    free(qd);
}

/* Runs decode (prefill == false: one query per sequence) or prefill, checks vs float64. */
static void attend(struct cache *k, bool prefill, uint64_t seed)
{
    const struct cache_case *c = &k->c;
    int n = prefill ? k->nq : c->B;
    size_t qrow = (size_t)(c->Hq * c->D);
    uint64_t oq = take(k, (size_t)n * qrow * k->es + 1), oo = take(k, (size_t)n * qrow * k->es + 1),
             oqi = take(k, 4 * (size_t)(c->B + 1));
    fill_random(k->base + oq, c->dtype, (size_t)n * qrow, &seed);
    memset(k->base + oo, 0xff, (size_t)n * qrow * k->es);   /* poisoned */
    int32_t *qind = i32_at(k, oqi);
    qind[0] = 0;
    for (int b = 0; b < c->B; b++)
        qind[b + 1] = qind[b] + (prefill ? c->qlen[b] : 1);
    if (c->device)
        assert_int_equal(gllm_memory_copy(k->cl, k->dt, oq, k->arena, oq, oo + (size_t)n * qrow * k->es - oq), 0);
    int64_t shape[3] = {n, c->Hq, c->D};
    gllm_paged_attention_params p = {.size = sizeof p, .kv = table_span(k, NULL, c->len, c->device_pages),
                                     .q = tensor(k, oq, c->device, c->dtype, 3, shape),
                                     .out = tensor(k, oo, c->device, c->dtype, 3, shape)};
    if (prefill)
        p.qo_indptr = i32_tensor(k, oqi, c->B + 1);
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int r = prefill ? gllm_attention_prefill(k->cl, &p, &res) : gllm_attention_decode(k->cl, &p, &res);
    if (r != 0)
        fprintf(stderr, "%s: %s\n", prefill ? "prefill" : "decode", gllm_client_last_error(k->cl));
    assert_int_equal(r, 0);
    if (c->device)
        assert_int_equal(gllm_memory_copy(k->cl, k->arena, oo, k->dt, oo, (size_t)n * qrow * k->es), 0);
    double *want = malloc((size_t)n * qrow * sizeof *want), *got = malloc((size_t)n * qrow * sizeof *got);
    for (int b = 0; b < c->B; b++)
        for (int i = qind[b]; i < qind[b + 1]; i++) {
            int pos = c->len[b] - (qind[b + 1] - i);
            ref_row(k, b, pos, k->base + oq + (size_t)i * qrow * k->es, 1.0 / sqrt(c->D),
                    want + (size_t)i * qrow);
        }
    for (size_t i = 0; i < (size_t)n * qrow; i++)
        got[i] = elem_get(k->base + oo, c->dtype, (int64_t)i);
    double err = ref64_rel_error(got, want, (size_t)n * qrow);
    fprintf(stderr, "  %s %s B%d Hq%d Hkv%d D%d page %d%s: rel err %.2e\n",
            prefill ? "prefill" : "decode", gllm_dtype_name(c->dtype), c->B, c->Hq, c->Hkv, c->D,
            c->page_size, c->device_pages ? " device+pages" : c->device ? " device" : "", err);
    assert_true(err <= ref64_tolerance(c->dtype).out);
    free(want);
    free(got);
}

static void run_case(const struct cache_case *c, uint64_t seed)
{
    gllm_client *cl;
    assert_int_equal(gllm_connect(group_daemon.socket, &cl), 0);
    struct cache k;
    setup(&k, cl, c, seed);
    int *zero = calloc((size_t)c->B, sizeof *zero), *mid = malloc((size_t)c->B * sizeof *mid);
    for (int b = 0; b < c->B; b++)
        mid[b] = c->len[b] - c->tail[b];
    append(&k, zero, mid, false);   /* the prompt */
    append(&k, mid, c->len, c->trim_append);   /* then new tokens, from inside a partial page */
    check_pool(&k);
    attend(&k, false, seed + 1);
    attend(&k, true, seed + 2);
    free(zero);
    free(mid);
    teardown(&k);
    gllm_disconnect(cl);
}

static bool backend_is_cpu(void)
{
    return strcmp(test_backend(), "cpu") == 0;
}

static void test_gqa4_f16_page16(void **state)
{
    (void)state;
    static const int len[] = {1, 17, 300, 16, 1100}, tail[] = {1, 2, 5, 16, 3},
                     qlen[] = {1, 5, 40, 16, 2};
    struct cache_case c = {5, 8, 2, 128, 16, GLLM_DTYPE_F16, len, tail, qlen, false, false, false};
    run_case(&c, 1);
    c.device = true;
    run_case(&c, 2);
    c.device_pages = true;
    run_case(&c, 6);
}

static void test_gqa8_bf16_page1(void **state)
{
    (void)state;
    static const int len[] = {33, 2, 700}, tail[] = {1, 1, 4}, qlen[] = {33, 1, 20};
    struct cache_case c = {3, 16, 2, 64, 1, GLLM_DTYPE_BF16, len, tail, qlen, true, true, true};
    run_case(&c, 3);
}

static void test_mha_page64(void **state)
{
    (void)state;
    static const int len[] = {64, 65, 2500}, tail[] = {1, 64, 1}, qlen[] = {3, 65, 7};
    struct cache_case c = {3, 4, 4, 64, 64, GLLM_DTYPE_F16, len, tail, qlen, true, false, true};
    run_case(&c, 4);
    if (backend_is_cpu()) {     /* f32 and odd head dims: the CPU backend only */
        c.dtype = GLLM_DTYPE_F32, c.D = 40, c.device = false;
        run_case(&c, 5);
    }
}

/* Each bad table or tensor is refused with its own code, and the daemon keeps serving. */
static void test_refusals(void **state)
{
    (void)state;
    gllm_client *cl;
    assert_int_equal(gllm_connect(group_daemon.socket, &cl), 0);
    static const int len[] = {20, 5}, tail[] = {20, 5}, qlen[] = {1, 1};
    struct cache_case c = {2, 4, 2, 64, 16, GLLM_DTYPE_F16, len, tail, qlen, true, false, false};
    struct cache k;
    setup(&k, cl, &c, 9);
    int zero[2] = {0, 0};
    append(&k, zero, len, false);
    uint64_t oq = take(&k, 2 * 4 * 64 * 2), oo = take(&k, 2 * 4 * 64 * 2);
    int64_t shape[3] = {2, 4, 64};
    gllm_paged_attention_params good = {.size = sizeof good, .kv = table(&k, len),
                                        .q = tensor(&k, oq, false, c.dtype, 3, shape),
                                        .out = tensor(&k, oo, false, c.dtype, 3, shape)};
    gllm_paged_attention_params p;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    int32_t *idx = i32_at(&k, good.kv.indices.offset), *last = i32_at(&k, good.kv.last_page_len.offset),
            *indptr = i32_at(&k, good.kv.indptr.offset);

    idx[1] = k.P;                                   /* a page past the pool */
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_EBOUNDS);
    assert_non_null(strstr(gllm_client_last_error(cl), "kv_indices[1]"));
    idx[1] = -1;
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_EBOUNDS);
    idx[1] = k.pages[1];
    last[0] = 0;                                    /* a page with no token */
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_EPARAM);
    last[0] = 17;                                   /* more than a page holds */
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_EPARAM);
    last[0] = 4;
    indptr[1] = 3, indptr[2] = 2;                   /* decreasing */
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_EPARAM);
    indptr[1] = 2, indptr[2] = 3;
    assert_int_equal(gllm_attention_decode(cl, &good, &res), 0);   /* repaired */
    indptr[2] = 2, last[1] = 0;                     /* sequence 1 with no page: a query */
    assert_int_equal(gllm_attention_decode(cl, &good, &res), GLLM_ESHAPE);  /* with no key */
    assert_non_null(strstr(gllm_client_last_error(cl), "sequence 1: 1 queries but only 0 tokens"));
    indptr[2] = 3, last[1] = 5;
    assert_int_equal(gllm_attention_decode(cl, &good, &res), 0);

    p = good;                                       /* one query row too many */
    p.q.shape[0] = p.out.shape[0] = 3;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_ESHAPE);
    p = good;                                       /* out over the cache it reads */
    p.out = k.kc, p.out.rank = 3, p.out.shape[0] = 2, p.out.shape[1] = 4, p.out.shape[2] = 64;
    p.out.strides[0] = 256, p.out.strides[1] = 64, p.out.strides[2] = 1;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EALIAS);
    p = good;                                       /* f16 indices */
    p.kv.indices.dtype = GLLM_DTYPE_F16;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EDTYPE);
    p = good;                                       /* a cache with gaps between rows */
    p.kv.k_cache.strides[0] *= 2, p.kv.k_cache.shape[0] /= 2;
    p.kv.v_cache = p.kv.k_cache;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EPARAM);
    p = good;                                       /* Hq not a multiple of Hkv */
    p.q.shape[1] = p.out.shape[1] = 3;
    p.q.strides[0] = p.out.strides[0] = 3 * 64;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_ESHAPE);

    /* Prefill: more queries than tokens in the sequence. */
    uint64_t oqi = take(&k, 12);
    int32_t *qi = i32_at(&k, oqi);
    qi[0] = 0, qi[1] = 1, qi[2] = 7;
    p = good;
    p.qo_indptr = i32_tensor(&k, oqi, 3);
    int64_t qshape[3] = {7, 4, 64};
    uint64_t oq7 = take(&k, 7 * 4 * 64 * 2), oo7 = take(&k, 7 * 4 * 64 * 2);
    p.q = tensor(&k, oq7, false, c.dtype, 3, qshape), p.out = tensor(&k, oo7, false, c.dtype, 3, qshape);
    assert_int_equal(gllm_attention_prefill(cl, &p, &res), GLLM_ESHAPE);
    assert_non_null(strstr(gllm_client_last_error(cl), "sequence 1"));

    /* kv_append: two sequences whose tables share their last page would write one slot twice. */
    gllm_kv_append_params ap = {.size = sizeof ap, .kv = table(&k, len)};
    int32_t *aidx = i32_at(&k, ap.kv.indices.offset), *alast = i32_at(&k, ap.kv.last_page_len.offset);
    aidx[2] = aidx[1];                              /* seq 1's page is seq 0's last page */
    alast[0] = 5;                                   /* both end at slot 4 of that page */
    uint64_t ok = take(&k, 2 * k.row), ov = take(&k, 2 * k.row), oa = take(&k, 12);
    int32_t *ai = i32_at(&k, oa);
    ai[0] = 0, ai[1] = 1, ai[2] = 2;
    int64_t kshape[3] = {2, 2, 64};
    ap.k = tensor(&k, ok, false, c.dtype, 3, kshape), ap.v = tensor(&k, ov, false, c.dtype, 3, kshape);
    ap.append_indptr = i32_tensor(&k, oa, 3);
    assert_int_equal(gllm_kv_append(cl, &ap, &res), GLLM_EALIAS);
    ap.kv.indptr.shape[0] = 2;                      /* tables of different batch sizes */
    assert_int_equal(gllm_kv_append(cl, &ap, &res), GLLM_ESHAPE);

    /* kv_indices in a device tensor: read when the job runs, each page number checked there
     * before anything is read through it; the rest of the table must be in arenas. */
    p = good;
    p.kv = table_span(&k, NULL, len, true);
    assert_int_equal(gllm_attention_decode(cl, &p, &res), 0);
    int32_t *didx = i32_at(&k, p.kv.indices.offset), keep = didx[1];
    didx[1] = k.P;                                  /* past the pool, written to the device */
    assert_int_equal(gllm_memory_copy(cl, k.dt, p.kv.indices.offset, k.arena,
                                        p.kv.indices.offset, 12), 0);
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EBOUNDS);
    assert_non_null(strstr(gllm_client_last_error(cl), "kv_indices[1]"));
    didx[1] = -7;
    assert_int_equal(gllm_memory_copy(cl, k.dt, p.kv.indices.offset, k.arena,
                                        p.kv.indices.offset, 12), 0);
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EBOUNDS);
    assert_non_null(strstr(gllm_client_last_error(cl), "is -7"));
    didx[1] = keep;
    assert_int_equal(gllm_memory_copy(cl, k.dt, p.kv.indices.offset, k.arena,
                                        p.kv.indices.offset, 12), 0);
    assert_int_equal(gllm_attention_decode(cl, &p, &res), 0);     /* repaired */
    gllm_paged_attention_params dp = p;             /* indptr on the device: refused */
    assert_int_equal(gllm_tensor_init(k.dt, p.kv.indptr.offset, GLLM_DTYPE_I32, 1,
                                      p.kv.indptr.shape, &dp.kv.indptr), 0);
    assert_int_equal(gllm_attention_decode(cl, &dp, &res), GLLM_EPARAM);
    ap.kv.indptr.shape[0] = 3;                      /* kv_append: its table in arenas only */
    ap.kv.indices = p.kv.indices;
    assert_int_equal(gllm_kv_append(cl, &ap, &res), GLLM_EPARAM);
    assert_non_null(strstr(gllm_client_last_error(cl), "kv_append"));
    p.out = p.kv.indices;                           /* out over the page numbers it reads */
    p.out.dtype = c.dtype, p.out.rank = 3;
    p.out.shape[0] = 1, p.out.shape[1] = 4, p.out.shape[2] = 64;
    p.out.strides[0] = 256, p.out.strides[1] = 64, p.out.strides[2] = 1;
    p.q.shape[0] = 1, p.kv.indptr.shape[0] = 2, p.kv.last_page_len.shape[0] = 1;
    assert_int_equal(gllm_attention_decode(cl, &p, &res), GLLM_EALIAS);

    assert_int_equal(gllm_attention_decode(cl, &good, &res), 0);   /* still serving */
    teardown(&k);
    gllm_disconnect(cl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_gqa4_f16_page16),
        cmocka_unit_test(test_gqa8_bf16_page1),
        cmocka_unit_test(test_mha_page64),
    };
    return cmocka_run_group_tests_name("paged", tests, group_daemon_start, group_daemon_stop);
}
