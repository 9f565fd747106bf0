/* Attention request validation: arenas, bounds, shapes, dtypes, head dims, aliasing; where a paged job's page table is read from. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "job.h"

#define ARENA_BYTES (1u << 20)

static struct arena_table table;
static struct arena *arena1, *arena2;
/* A backend computing plain attention with head dims 1..256 in every mode. */
#define PLAIN_MODES                                                                        \
    .backend = "test", .modes = {{.max_head_dim = 256}, {.max_head_dim = 256}, {.max_head_dim = 256}}
static const struct job_caps caps = {.dtypes = 7, .max_head_dim = 256, PLAIN_MODES};

static struct arena *make_arena(void)
{
    int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, ARENA_BYTES), 0);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    struct arena *a;
    assert_int_equal(arena_map(fd, ARENA_BYTES, &a), 0);
    close(fd);
    assert_int_equal(arena_table_add(&table, a, 8), 0);
    return a;
}

static int setup(void **state)
{
    (void)state;
    memset(&table, 0, sizeof table);
    arena1 = make_arena();
    arena2 = make_arena();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    arena_unref(arena_table_remove(&table, arena1->id));
    arena_unref(arena_table_remove(&table, arena2->id));
    return 0;
}

static struct proto_tensor tensor(struct arena *a, uint64_t offset, gllm_dtype dt, int64_t B,
                                  int64_t H, int64_t S, int64_t D)
{
    struct proto_tensor t = {.arena = a->id, .offset = offset, .dtype = dt, .rank = 4,
                             .shape = {B, H, S, D}};
    proto_tensor_contiguous(&t);
    return t;
}

/* A valid GQA job: q/out [1,8,64,64], k/v [1,2,64,64] in f16, 64 KiB each. */
static struct proto_attention good_job(void)
{
    struct proto_attention a = {0};
    a.q = tensor(arena1, 0, GLLM_DTYPE_F16, 1, 8, 64, 64);
    a.k = tensor(arena1, 65536, GLLM_DTYPE_F16, 1, 2, 64, 64);
    a.v = tensor(arena1, 2 * 65536, GLLM_DTYPE_F16, 1, 2, 64, 64);
    a.out = tensor(arena2, 0, GLLM_DTYPE_F16, 1, 8, 64, 64);
    return a;
}

static int prepare(const struct proto_attention *pa, struct job *job)
{
    char err[200];
    memset(job, 0, sizeof *job);
    int r = job_prepare_attention(job, pa, &table, &caps, err, sizeof err);
    if (r == 0)
        assert_true(job->narenas > 0);
    else
        assert_true(err[0] != '\0');   /* every refusal says why */
    return r;
}

static void test_good_job_binds_arenas(void **state)
{
    (void)state;
    struct proto_attention pa = good_job();
    struct job job;
    assert_int_equal(prepare(&pa, &job), 0);
    assert_int_equal(job.narenas, 2);          /* each arena referenced once */
    assert_int_equal(arena1->refs, 2);
    assert_ptr_equal(job.args.q, arena1->base);
    assert_ptr_equal(job.args.k, (char *)arena1->base + 65536);
    assert_int_equal(job.args.Hq, 8);
    assert_int_equal(job.args.Hkv, 2);
    assert_true(job.args.scale == 0.125f);     /* 1/sqrt(64) by default */
    job_release_arenas(&job);
    assert_int_equal(arena1->refs, 1);
}

/* The scheduler picks the backend call by kind over a union of arguments: each prepare
 * sets its own kind, whatever the job held before. */
static void test_prepare_sets_kind(void **state)
{
    (void)state;
    struct proto_attention pa = good_job();
    struct job job;
    char err[200];
    memset(&job, 0, sizeof job);
    job.kind = JOB_PAGED;
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &caps, err, sizeof err), 0);
    assert_int_equal(job.kind, JOB_ATTENTION);
    job_release_arenas(&job);
    memset(&job, 0, sizeof job);
    job.kind = JOB_PAGED;
    arena2->device = true;            /* a device tensor, as the copy wants */
    assert_int_equal(job_prepare_copy(&job, &table, arena2->id, 0, arena1->id, 0, 64, true, err,
                                      sizeof err), 0);
    arena2->device = false;
    assert_int_equal(job.kind, JOB_COPY);
    assert_ptr_equal(job.copy.src, arena1->base);
    job_release_arenas(&job);
}

static void test_refusals(void **state)
{
    (void)state;
    struct job job;
    struct proto_attention pa;

    pa = good_job(), pa.k.arena = 77;
    assert_int_equal(prepare(&pa, &job), GLLM_ENOARENA);
    pa = good_job(), pa.out.offset = ARENA_BYTES - 100;
    assert_int_equal(prepare(&pa, &job), GLLM_EBOUNDS);
    pa = good_job(), pa.q.offset = UINT64_MAX - 11;
    assert_int_equal(prepare(&pa, &job), GLLM_EOVERFLOW);
    pa = good_job(), pa.q.offset = 3;                                  /* misaligned f16 */
    assert_int_equal(prepare(&pa, &job), GLLM_EPARAM);
    pa = good_job(), pa.q.strides[1] = INT64_MAX / 2;                  /* 7 strides overflow */
    assert_int_equal(prepare(&pa, &job), GLLM_EOVERFLOW);
    pa = good_job(), pa.q.strides[1] = 1 << 20;                        /* far past the arena */
    assert_int_equal(prepare(&pa, &job), GLLM_EBOUNDS);
    pa = good_job(), pa.q.shape[2] = INT64_MAX / 4;
    proto_tensor_contiguous(&pa.q);
    assert_int_equal(prepare(&pa, &job), GLLM_EOVERFLOW);
    pa = good_job(), pa.v.dtype = GLLM_DTYPE_BF16;
    assert_int_equal(prepare(&pa, &job), GLLM_EDTYPE);
    pa = good_job(), pa.v.shape[2] = 32;                               /* k and v lengths differ */
    assert_int_equal(prepare(&pa, &job), GLLM_ESHAPE);
    pa = good_job(), pa.out.shape[2] = 32;
    assert_int_equal(prepare(&pa, &job), GLLM_ESHAPE);
    pa = good_job(), pa.q.rank = 3;
    assert_int_equal(prepare(&pa, &job), GLLM_ESHAPE);
    pa = good_job();                                                   /* Hq 8 over Hkv 3 */
    pa.k = tensor(arena1, 65536, GLLM_DTYPE_F16, 1, 3, 16, 64);
    pa.v = tensor(arena1, 2 * 65536, GLLM_DTYPE_F16, 1, 3, 16, 64);
    assert_int_equal(prepare(&pa, &job), GLLM_ESHAPE);
    pa = good_job();                                                   /* D 512 */
    pa.q = tensor(arena1, 0, GLLM_DTYPE_F16, 1, 1, 8, 512);
    pa.k = tensor(arena1, 65536, GLLM_DTYPE_F16, 1, 1, 8, 512);
    pa.v = tensor(arena1, 2 * 65536, GLLM_DTYPE_F16, 1, 1, 8, 512);
    pa.out = tensor(arena2, 0, GLLM_DTYPE_F16, 1, 1, 8, 512);
    assert_int_equal(prepare(&pa, &job), GLLM_EHEADDIM);
    pa = good_job(), pa.out.arena = arena1->id, pa.out.offset = 4096; /* out over q */
    assert_int_equal(prepare(&pa, &job), GLLM_EALIAS);
    pa = good_job(), pa.out.strides[2] = 0;                            /* rows written twice */
    assert_int_equal(prepare(&pa, &job), GLLM_EALIAS);
    pa = good_job(), pa.has_lse = true;
    pa.lse = (struct proto_tensor){.arena = arena2->id, .offset = 65536, .dtype = GLLM_DTYPE_F16,
                                   .rank = 3, .shape = {1, 8, 64}};
    proto_tensor_contiguous(&pa.lse);
    assert_int_equal(prepare(&pa, &job), GLLM_EDTYPE);                 /* lse must be f32 */
    pa.lse.dtype = GLLM_DTYPE_F32, pa.lse.shape[2] = 63;
    proto_tensor_contiguous(&pa.lse);
    assert_int_equal(prepare(&pa, &job), GLLM_ESHAPE);
    pa.lse.shape[2] = 64;
    proto_tensor_contiguous(&pa.lse);
    assert_int_equal(prepare(&pa, &job), 0);
    job_release_arenas(&job);
    /* Nothing refused kept a reference. */
    assert_int_equal(arena1->refs, 1);
    assert_int_equal(arena2->refs, 1);
}

static void test_dtype_not_supported_by_backend(void **state)
{
    (void)state;
    struct proto_attention pa = good_job();
    struct job job;
    char err[200];
    const struct job_caps f32_only = {.dtypes = 1, .max_head_dim = 256, PLAIN_MODES};
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &f32_only, err, sizeof err),
                     GLLM_EDTYPE);
}

static void test_strided_views_accepted(void **state)
{
    (void)state;
    /* [B, S, H, D] memory viewed as [B, H, S, D]: legal, non-overlapping. */
    struct proto_attention pa = good_job();
    pa.q.strides[1] = 64, pa.q.strides[2] = 8 * 64;
    pa.out.strides[1] = 64, pa.out.strides[2] = 8 * 64;
    struct job job;
    assert_int_equal(prepare(&pa, &job), 0);
    assert_int_equal(job.args.o_st[2], 512);
    job_release_arenas(&job);
}

/* A job on one device may not name a device tensor of another (stands in for one here:
 * the region is marked as device 1's). */
static void test_device_tensor_on_another_device(void **state)
{
    (void)state;
    arena2->device = true, arena2->dev = 1;
    struct proto_attention pa = good_job();
    pa.out.device = true;
    struct job job;
    assert_int_equal(prepare(&pa, &job), 0);
    char err[200] = "";
    assert_int_equal(job_check_device(&job, 0, err, sizeof err), GLLM_EPARAM);
    assert_non_null(strstr(err, "lives on device 1"));
    assert_int_equal(job_check_device(&job, 1, err, sizeof err), 0);
    job_release_arenas(&job);
    arena2->device = false, arena2->dev = 0;
    pa = good_job();                               /* arenas belong to no device */
    assert_int_equal(prepare(&pa, &job), 0);
    assert_int_equal(job_check_device(&job, 1, err, sizeof err), 0);
    job_release_arenas(&job);
}

static struct proto_tensor tensor_n(struct arena *a, uint64_t offset, gllm_dtype dt, int rank,
                                    const int64_t *shape)
{
    struct proto_tensor t = {.arena = a->id, .offset = offset, .dtype = dt, .rank = rank};
    memcpy(t.shape, shape, (size_t)rank * sizeof *shape);
    proto_tensor_contiguous(&t);
    return t;
}

/* A decode step of two sequences over a pool of 8 pages of 16 tokens (Hkv 2, D 64) in
 * arena1, its table in arena2: pages {3, 5} and {7}, 20 and 9 tokens. */
static struct proto_paged paged_job(enum proto_paged_op op, int32_t bad)
{
    int32_t *t = arena2->base;
    const int32_t tables[] = {0, 2, 3, /* indices */ 3, 5, bad, /* last_page_len */ 4, 9};
    memcpy(t, tables, sizeof tables);
    struct proto_paged p = {.op = op};
    const int64_t pool[4] = {8, 16, 2, 64}, rows[3] = {2, 4, 64}, kv[3] = {2, 2, 64};
    p.k_cache = tensor_n(arena1, 0, GLLM_DTYPE_F16, 4, pool);
    p.v_cache = tensor_n(arena1, 65536, GLLM_DTYPE_F16, 4, pool);
    p.kv_indptr = tensor_n(arena2, 0, GLLM_DTYPE_I32, 1, (int64_t[]){3});
    p.kv_indices = tensor_n(arena2, 12, GLLM_DTYPE_I32, 1, (int64_t[]){3});
    p.kv_last_page_len = tensor_n(arena2, 24, GLLM_DTYPE_I32, 1, (int64_t[]){2});
    if (op == PROTO_KV_APPEND) {
        p.k = tensor_n(arena1, 2 * 65536, GLLM_DTYPE_F16, 3, kv);
        p.v = tensor_n(arena1, 2 * 65536 + 4096, GLLM_DTYPE_F16, 3, kv);
        p.append_indptr = tensor_n(arena2, 64, GLLM_DTYPE_I32, 1, (int64_t[]){3});
        memcpy((char *)arena2->base + 64, (const int32_t[]){0, 1, 2}, 12);
    } else {
        p.q = tensor_n(arena1, 2 * 65536, GLLM_DTYPE_F16, 3, rows);
        p.out = tensor_n(arena1, 2 * 65536 + 4096, GLLM_DTYPE_F16, 3, rows);
    }
    return p;
}

/* The loop copies a page table out of its arena and checks every page number, unless the
 * backend reads kv_indices where it lies and checks each entry itself (attention only:
 * kv_append's slots are worked out on the host). */
static void test_page_table_copied_or_left(void **state)
{
    (void)state;
    struct job_caps c = caps;
    c.max_page_entries = 1024;
    char err[200];
    struct job job;
    struct proto_paged pp = paged_job(PROTO_DECODE, 7);
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    assert_false(job.paged.indices_in_arena);
    assert_ptr_not_equal(job.paged.kv_indices, (int32_t *)arena2->base + 3);   /* a copy */
    assert_int_equal(job.paged.kv_indices[2], 7);
    assert_int_equal(job.paged.kv_len[0], 20);
    job_release_arenas(&job);

    pp = paged_job(PROTO_DECODE, 8);                 /* past the pool: refused here */
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), GLLM_EBOUNDS);
    assert_non_null(strstr(err, "kv_indices[2]"));

    c.reads_arena_tables = true;                     /* left for the backend to check */
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    assert_true(job.paged.indices_in_arena);
    assert_false(job.paged.indices_on_device);
    assert_ptr_equal(job.paged.kv_indices, (int32_t *)arena2->base + 3);
    assert_false(job.paged.indices_pinned);          /* not registered: copied to the device */
    assert_int_equal(job.paged.kv_len[1], 9);       /* the rest of the table still checked */
    job_release_arenas(&job);
    static struct backend pinner;
    arena2->pinned_by = &pinner;                     /* registered: the kernel may read it there */
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    assert_true(job.paged.indices_pinned);
    job_release_arenas(&job);
    arena2->pinned_by = NULL;

    pp = paged_job(PROTO_KV_APPEND, 8);              /* kv_append: always copied and checked */
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), GLLM_EBOUNDS);
    pp = paged_job(PROTO_KV_APPEND, 7);
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    assert_false(job.paged.indices_in_arena);
    assert_ptr_not_equal(job.paged.kv_indices, (int32_t *)arena2->base + 3);
    job_release_arenas(&job);
}

/* A mode may take fewer dtypes than the backend (CUDA's paged attention: f16 and bf16): its
 * attention jobs in another are refused, naming what it takes; an append, a row copy, is
 * not a mode's and goes through. */
static void test_dtype_not_taken_by_mode(void **state)
{
    (void)state;
    struct job_caps c = caps;
    c.max_page_entries = 1024;
    c.mode_dtypes[GLLM_MODE_DECODE] = 1u << GLLM_DTYPE_BF16;
    char err[200];
    struct job job;
    struct proto_paged pp = paged_job(PROTO_DECODE, 7);     /* f16 */
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), GLLM_EDTYPE);
    assert_non_null(strstr(err, "dtype f16: the test backend's decode takes bf16"));
    pp = paged_job(PROTO_KV_APPEND, 7);
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    job_release_arenas(&job);
    c.mode_dtypes[GLLM_MODE_DECODE] = 1u << GLLM_DTYPE_BF16 | 1u << GLLM_DTYPE_F16;
    pp = paged_job(PROTO_DECODE, 7);
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_paged(&job, &pp, &table, &c, err, sizeof err), 0);
    job_release_arenas(&job);

    c.mode_dtypes[GLLM_MODE_DENSE] = 1u << GLLM_DTYPE_F32;
    struct proto_attention pa = good_job();
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &c, err, sizeof err), GLLM_EDTYPE);
    assert_non_null(strstr(err, "the test backend's dense takes f32"));
}

/* A backend refuses, through its capabilities, every variant field it does not compute and
 * every head dim its mode does not take, naming the field and itself; one that computes a
 * field gets it in the args. */
static void test_variants_against_capabilities(void **state)
{
    (void)state;
    struct job_caps some = caps;
    some.backend = "gpu";
    some.modes[GLLM_MODE_DENSE] = (struct proto_mode_caps){
        .variants = GLLM_VARIANT_WINDOW, .max_head_dim = 256, .has_head_dims = true,
        .n_head_dims = 2, .head_dims = {64, 128}};
    char err[200];
    struct job job;
    struct proto_attention pa = good_job();
    pa.variant = (struct proto_variant){.window = true, .window_left = 32, .window_right = -1};
    memset(&job, 0, sizeof job);
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &some, err, sizeof err), 0);
    assert_true(job.args.variant.window && job.args.variant.window_left == 32 &&
                job.args.variant.window_right == -1);
    job_release_arenas(&job);
    /* A window of -1 on both sides asks for nothing: a backend without windows takes it. */
    pa.variant.window_left = -1;
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &caps, err, sizeof err), 0);
    assert_false(job.args.variant.window);
    job_release_arenas(&job);

    pa.variant = (struct proto_variant){.logits_soft_cap = 30.0};
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &some, err, sizeof err),
                     GLLM_EVARIANT);
    assert_non_null(strstr(err, "logits_soft_cap"));
    assert_non_null(strstr(err, "gpu"));
    pa.variant = (struct proto_variant){.attention_chunk = 8192};
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &some, err, sizeof err),
                     GLLM_EVARIANT);
    assert_non_null(strstr(err, "attention_chunk"));
    /* v's head dim below q's is a field too. */
    pa = good_job();
    pa.v = tensor(arena1, 2 * 65536, GLLM_DTYPE_F16, 1, 2, 64, 32);
    pa.out = tensor(arena2, 0, GLLM_DTYPE_F16, 1, 8, 64, 32);
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &some, err, sizeof err),
                     GLLM_EVARIANT);
    assert_non_null(strstr(err, "head_dim_v"));
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &caps, err, sizeof err),
                     GLLM_EVARIANT);
    /* Head dims the mode lists: 64 and 128 only. */
    pa = good_job();
    pa.q = tensor(arena1, 0, GLLM_DTYPE_F16, 1, 8, 64, 80);
    pa.k = tensor(arena1, 65536 + 16384, GLLM_DTYPE_F16, 1, 2, 64, 80);
    pa.v = tensor(arena1, 2 * 65536 + 32768, GLLM_DTYPE_F16, 1, 2, 64, 80);
    pa.out = tensor(arena2, 0, GLLM_DTYPE_F16, 1, 8, 64, 80);
    assert_int_equal(job_prepare_attention(&job, &pa, &table, &some, err, sizeof err),
                     GLLM_EHEADDIM);
    assert_non_null(strstr(err, "64, 128"));
    assert_int_equal(arena1->refs, 1);           /* no refusal holds a reference */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_job_binds_arenas),
        cmocka_unit_test(test_prepare_sets_kind),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_dtype_not_supported_by_backend),
        cmocka_unit_test(test_strided_views_accepted),
        cmocka_unit_test(test_device_tensor_on_another_device),
        cmocka_unit_test(test_page_table_copied_or_left),
        cmocka_unit_test(test_dtype_not_taken_by_mode),
        cmocka_unit_test(test_variants_against_capabilities),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
