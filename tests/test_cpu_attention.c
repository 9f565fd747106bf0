/* CPU attention against a float64 reference: random shapes, dtypes, masks, GQA, strides. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sched.h>

#include "cpu_attention.h"
#include "cpu_cores.h"
#include "testutil.h"

static struct cpu_pool *pool;
static struct cpu_attention *attn;
static enum cpu_isa cur_isa;    /* the ISA level the group runs */

static int setup(void **state)
{
    (void)state;
    if (cpu_pool_create(3, &pool) < 0 || cpu_attention_create(pool, cur_isa, &attn) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cpu_attention_destroy(attn);
    cpu_pool_destroy(pool);
    return 0;
}

struct config {
    int64_t B, Hq, Hkv, Sq, Skv, D;
    gllm_dtype dtype;
    bool causal, bshd, lse;   /* bshd: tensors laid out [B, S, H, D], viewed through strides */
    double scale;             /* 0: default */
};

static void strides_for(const struct config *c, int64_t H, int64_t S, int64_t st[4])
{
    if (c->bshd) {
        st[3] = 1, st[1] = c->D, st[2] = H * c->D, st[0] = S * H * c->D;
    } else {
        st[3] = 1, st[2] = c->D, st[1] = S * c->D, st[0] = H * S * c->D;
    }
}

static void run_config(const struct config *c, uint64_t seed)
{
    size_t es = c->dtype == GLLM_DTYPE_F32 ? 4 : 2;
    size_t nq = (size_t)(c->B * c->Hq * c->Sq * c->D), nk = (size_t)(c->B * c->Hkv * c->Skv * c->D);
    size_t nl = (size_t)(c->B * c->Hq * c->Sq);
    void *q = malloc(nq * es + 1), *k = malloc(nk * es + 1), *v = malloc(nk * es + 1);
    void *o = malloc(nq * es + 1);
    float *lse = malloc(nl * sizeof(float) + 1);
    double *want = malloc(nq * sizeof(double) + 1), *got = malloc(nq * sizeof(double) + 1);
    double *want_lse = malloc(nl * sizeof(double) + 1), *got_lse = malloc(nl * sizeof(double) + 1);
    assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(o);
    assert_non_null(lse), assert_non_null(want), assert_non_null(got);
    assert_non_null(want_lse), assert_non_null(got_lse);
    fill_random(q, c->dtype, nq, &seed);
    fill_random(k, c->dtype, nk, &seed);
    fill_random(v, c->dtype, nk, &seed);
    memset(o, 0xff, nq * es);              /* NaN in every dtype: unwritten elements show */
    memset(lse, 0xff, nl * sizeof(float));

    struct attn_args a = {
        .dtype = c->dtype, .B = c->B, .Hq = c->Hq, .Hkv = c->Hkv, .Sq = c->Sq, .Skv = c->Skv,
        .D = c->D, .q = q, .k = k, .v = v, .out = o, .lse = c->lse ? lse : NULL,
        .causal = c->causal,
        .scale = c->scale != 0 ? (float)c->scale : (float)(1.0 / sqrt((double)c->D)),
    };
    strides_for(c, c->Hq, c->Sq, a.q_st);
    strides_for(c, c->Hkv, c->Skv, a.k_st);
    strides_for(c, c->Hkv, c->Skv, a.v_st);
    strides_for(c, c->Hq, c->Sq, a.o_st);
    a.lse_st[0] = c->Hq * c->Sq, a.lse_st[1] = c->Sq, a.lse_st[2] = 1;
    assert_int_equal(cpu_attention_run(attn, &a), 0);

    struct ref_view rq = {q, c->dtype, {0}}, rk = {k, c->dtype, {0}}, rv = {v, c->dtype, {0}};
    memcpy(rq.st, a.q_st, sizeof rq.st);
    memcpy(rk.st, a.k_st, sizeof rk.st);
    memcpy(rv.st, a.v_st, sizeof rv.st);
    ref64_attention(c->B, c->Hq, c->Hkv, c->Sq, c->Skv, c->D, rq, rk, rv, c->causal, a.scale, want,
                  want_lse);
    size_t n = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Sq; i++) {
                for (int64_t d = 0; d < c->D; d++)
                    got[n++] = elem_get(o, c->dtype, b * a.o_st[0] + h * a.o_st[1] + i * a.o_st[2] + d);
                got_lse[(b * c->Hq + h) * c->Sq + i] = lse[(b * c->Hq + h) * c->Sq + i];
            }
    const struct ref64_tol tol = ref64_tolerance(c->dtype);
    double err = ref64_rel_error(got, want, nq);
    if (!(err <= tol.out))
        fail_msg("B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld %s%s%s: rel err %.3g > %.3g",
                 (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->Sq,
                 (long long)c->Skv, (long long)c->D, gllm_dtype_name(c->dtype),
                 c->causal ? " causal" : "", c->bshd ? " bshd" : "", err, tol.out);
    double lerr = c->lse ? ref64_lse_error(got_lse, want_lse, nl) : 0;
    if (!(lerr <= tol.lse))
        fail_msg("lse err %.3g > %.0e", lerr, tol.lse);
    free(q), free(k), free(v), free(o), free(lse);
    free(want), free(got), free(want_lse), free(got_lse);
}

static void test_random_shapes(void **state)
{
    (void)state;
    static const int64_t dims[] = {64, 128, 16, 40, 96, 1, 256};
    uint64_t seed = 12345;
    for (int t = 0; t < 60; t++) {
        struct config c = {0};
        c.B = 1 + (int64_t)(rng_next(&seed) % 2);
        c.Hkv = 1 + (int64_t)(rng_next(&seed) % 2);
        c.Hq = c.Hkv * (int64_t[]){1, 2, 4}[rng_next(&seed) % 3];
        c.Sq = 1 + (int64_t)(rng_next(&seed) % 90);
        c.Skv = rng_next(&seed) % 4 == 0 ? c.Sq : 1 + (int64_t)(rng_next(&seed) % 150);
        c.D = dims[t % 7];
        c.dtype = (gllm_dtype)(t % 3);
        c.causal = rng_next(&seed) % 2;
        c.bshd = rng_next(&seed) % 2;
        c.lse = rng_next(&seed) % 2;
        run_config(&c, (uint64_t)t);
    }
}

static void test_each_dtype_causal_gqa(void **state)
{
    (void)state;
    for (int dt = 0; dt < 3; dt++)
        for (int causal = 0; causal < 2; causal++) {
            struct config c = {.B = 2, .Hq = 8, .Hkv = 2, .Sq = 130, .Skv = 130, .D = 64,
                               .dtype = (gllm_dtype)dt, .causal = causal, .lse = true};
            run_config(&c, 7);
            c.D = 128;
            c.Sq = 33, c.Skv = 200;  /* chunked prefill: queries at the end of a longer cache */
            run_config(&c, 8);
            c.B = 1, c.Sq = 1, c.Skv = 1500;   /* decode: the keys split across threads */
            run_config(&c, 9);
        }
}

/* More queries than keys with a bottom-right causal mask: the first rows see
 * nothing, and come out as zeros with lse = -inf, not NaN. */
static void test_fully_masked_rows(void **state)
{
    (void)state;
    struct config c = {.B = 1, .Hq = 2, .Hkv = 1, .Sq = 50, .Skv = 20, .D = 64,
                       .dtype = GLLM_DTYPE_F32, .causal = true, .lse = true};
    run_config(&c, 3);
}

static void test_explicit_scale_and_mqa(void **state)
{
    (void)state;
    struct config c = {.B = 1, .Hq = 8, .Hkv = 1, .Sq = 70, .Skv = 70, .D = 128,
                       .dtype = GLLM_DTYPE_F16, .scale = 0.3, .bshd = true};
    run_config(&c, 4);
}

static void test_empty_and_bad_jobs(void **state)
{
    (void)state;
    struct attn_args a = {.dtype = GLLM_DTYPE_F32, .B = 0, .Hq = 1, .Hkv = 1, .Sq = 1, .Skv = 1, .D = 64};
    assert_int_equal(cpu_attention_run(attn, &a), 0);       /* nothing to do, nothing touched */
    a.B = 1, a.D = 300;
    assert_int_equal(cpu_attention_run(attn, &a), -EINVAL);
    a.D = 64, a.Hq = 3, a.Hkv = 2;
    assert_int_equal(cpu_attention_run(attn, &a), -EINVAL);
}

/* The default thread count: at least one, never more CPUs than the process may run on. */
static void test_usable_cores(void **state)
{
    (void)state;
    cpu_set_t set;
    const int n = cpu_cores_usable();
    assert_true(n >= 1);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        assert_true(n <= CPU_COUNT(&set));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_each_dtype_causal_gqa),
        cmocka_unit_test(test_fully_masked_rows),
        cmocka_unit_test(test_explicit_scale_and_mqa),
        cmocka_unit_test(test_empty_and_bad_jobs),
        cmocka_unit_test(test_usable_cores),
    };
    /* $GLLM_TEST_CPU_ISA as in test_backend_ops: unset, every level this CPU runs; "best",
     * that one; a level's name, that one alone (77, skipped, where the CPU lacks it or it
     * is the best). */
    const char *only = getenv("GLLM_TEST_CPU_ISA");
    if (only && strcmp(only, "best") != 0) {
        char why[200] = "";
        const int isa = cpu_isa_pick(only, why, sizeof why);
        if (isa == -EINVAL) {
            fprintf(stderr, "FAILED: %s\n", why);
            return 1;
        }
        if (isa < 0 || isa == (int)cpu_isa_best()) {
            fprintf(stderr, "SKIPPED: ISA level %s: %s\n", only,
                    isa < 0 ? why : "the best level here, run by the test without a level");
            return 77;
        }
    }
    int failed = 0;
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        cur_isa = (enum cpu_isa)i;
        const bool wanted = !only                    ? cpu_isa_runs(cur_isa)
                            : strcmp(only, "best") == 0 ? cur_isa == cpu_isa_best()
                                                       : strcmp(only, cpu_isa_name(cur_isa)) == 0;
        if (!wanted)
            continue;
        char group[48];
        snprintf(group, sizeof group, "cpu %s", cpu_isa_name(cur_isa));
        failed += cmocka_run_group_tests_name(group, tests, setup, teardown);
    }
    return failed ? 1 : 0;
}
