/* Attention variants through a real gllmd: hello's capabilities, the wire's checks (each bad
 * field answered under its request's id, naming the field), unknown keys refused, and jobs
 * through the public API against ref64. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto.h"
#include "ref64.h"
#include "testutil.h"



/* ---- hello ---- */

static void test_hello_capabilities(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    const uint32_t every = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                           GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS | GLLM_VARIANT_HEAD_DIM_V;
    for (int m = 0; m < GLLM_MODE_COUNT; m++) {
        gllm_mode_caps mc = GLLM_MODE_CAPS_INIT;
        assert_int_equal(gllm_client_mode_caps(c, (gllm_mode)m, &mc), 0);
        assert_int_equal(mc.variants, every);        /* the CPU reference computes them all */
        assert_int_equal(mc.max_head_dim, 256);
        assert_int_equal(mc.nhead_dims, 0);
    }
    gllm_mode_caps mc = GLLM_MODE_CAPS_INIT;
    assert_int_equal(gllm_client_mode_caps(c, (gllm_mode)GLLM_MODE_COUNT, &mc), -EINVAL);
    mc.size = 0;
    assert_int_equal(gllm_client_mode_caps(c, GLLM_MODE_DENSE, &mc), -EINVAL);
    gllm_disconnect(c);
}

/* ---- the wire: bad fields answered under their ids ---- */

static struct proto_buf tx;

/* Sends tx; the reply must be error code for id, its message holding word. */
static void expect_refused(int fd, int64_t id, int code, const char *word)
{
    raw_send(fd, tx.data, tx.len, -1);
    static char rx[PROTO_MAX_MESSAGE];
    ssize_t n = recv(fd, rx, sizeof rx, 0);
    assert_true(n > 0);
    struct proto_msg m;
    assert_int_equal(proto_decode(rx, (size_t)n, &m, NULL), 0);
    if (m.error_code != code || (int64_t)m.id != id || !strstr(m.error_message, word))
        fail_msg("request %lld: got %s (id %lld, \"%s\"), want %s naming '%s'", (long long)id,
                 gllm_error_name(m.error_code), (long long)m.id, m.error_message,
                 gllm_error_name(code), word);
    proto_msg_free(&m);
}

static void send_attention(uint64_t id, const struct proto_attention *a)
{
    proto_buf_init(&tx);
    proto_pack_request(&tx.pk, id, "attention");
    proto_pack_attention(&tx.pk, a);
}

/* q, k, v, out [1, 2, 16, 64] f32 at 0, then 2 f32 per-head values at 32 KiB. */
#define HEADS_AT (4 * 2 * 16 * 64 * 4)

static struct proto_tensor heads(uint32_t arena, gllm_dtype dt, int64_t n)
{
    struct proto_tensor t = {.arena = arena, .offset = HEADS_AT, .dtype = dt, .rank = 1,
                             .shape = {n}};
    proto_tensor_contiguous(&t);
    return t;
}

static void test_wire_refusals(void **state)
{
    (void)state;
    int fd = raw_connect(group_daemon.socket);
    raw_hello(fd);
    const size_t size = HEADS_AT + 4096;
    int mfd = make_memfd(size, F_SEAL_SHRINK);
    assert_true(mfd >= 0);
    const uint32_t arena = raw_register(fd, mfd, size, 2);
    uint64_t id = 10;

    struct proto_attention a = raw_job(arena, 16);
    a.variant = (struct proto_variant){.window = true, .window_left = -2, .window_right = -1};
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_EPARAM, "window_left");

    a.variant = (struct proto_variant){.attention_chunk = -4};
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_EPARAM, "attention_chunk");

    const double caps[] = {-1.0, NAN, INFINITY, 1e300};
    for (size_t i = 0; i < sizeof caps / sizeof *caps; i++) {
        a.variant = (struct proto_variant){.logits_soft_cap = caps[i]};
        send_attention(id, &a);
        expect_refused(fd, (int64_t)id++, GLLM_EPARAM, "logits_soft_cap");
    }

    a.variant = (struct proto_variant){.has_alibi = true, .alibi_slopes = heads(arena, GLLM_DTYPE_F16, 2)};
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_EDTYPE, "alibi_slopes");
    a.variant = (struct proto_variant){.has_alibi = true, .alibi_slopes = heads(arena, GLLM_DTYPE_F32, 3)};
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_ESHAPE, "alibi_slopes");
    a.variant = (struct proto_variant){.has_sinks = true, .sinks = heads(arena, GLLM_DTYPE_F32, 2)};
    a.variant.sinks.rank = 2, a.variant.sinks.shape[1] = 1, a.variant.sinks.strides[1] = 1;
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_ESHAPE, "sinks");
    /* Per-head values outside the arena: resolved like every tensor. */
    a.variant = (struct proto_variant){.has_sinks = true, .sinks = heads(arena, GLLM_DTYPE_F32, 2)};
    a.variant.sinks.offset = size;
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_EBOUNDS, "sinks");

    /* v's head dim above q's and k's: v [1, 2, 16, 64] against q and k of 32. */
    a = raw_job(arena, 16);
    a.q.shape[3] = a.k.shape[3] = 32;
    proto_tensor_contiguous(&a.q);
    proto_tensor_contiguous(&a.k);
    send_attention(id, &a);
    expect_refused(fd, (int64_t)id++, GLLM_EHEADDIM, "v's head dim");

    /* A key no job method knows: refused, not ignored. */
    a = raw_job(arena, 16);
    proto_buf_init(&tx);
    proto_pack_request(&tx.pk, id, "attention");
    {
        struct proto_buf inner;
        proto_buf_init(&inner);
        proto_pack_attention(&inner.pk, &a);
        /* The same map with one more pair: rewrite its fixmap header (5 pairs + causal). */
        unsigned char head = (unsigned char)inner.data[0];
        assert_true((head & 0xf0) == 0x80 && (head & 0x0f) < 15);
        char byte = (char)(head + 1);
        msgpack_pack_str_body(&tx.pk, &byte, 1);
        msgpack_pack_str_body(&tx.pk, inner.data + 1, inner.len - 1);
        proto_pack_kv_i64(&tx.pk, "window_size", 128);
    }
    expect_refused(fd, (int64_t)id++, GLLM_EPARAM, "window_size");

    /* kv_append has no attention to vary. */
    struct proto_paged p = {.op = PROTO_KV_APPEND};
    struct proto_tensor *t[] = {&p.k_cache, &p.v_cache, &p.kv_indptr, &p.kv_indices,
                                &p.kv_last_page_len, &p.k, &p.v, &p.append_indptr};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        *t[i] = heads(arena, GLLM_DTYPE_I32, 1);
    p.variant = (struct proto_variant){.window = true, .window_left = 8, .window_right = -1};
    proto_buf_init(&tx);
    proto_pack_request(&tx.pk, id, "kv_append");
    msgpack_pack_map(&tx.pk, 10);
    const char *names[] = {"k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len",
                           "k", "v", "append_indptr"};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        proto_pack_str(&tx.pk, names[i]);
        proto_pack_tensor(&tx.pk, t[i]);
    }
    proto_pack_variant(&tx.pk, &p.variant);
    expect_refused(fd, (int64_t)id++, GLLM_EPARAM, "kv_append");

    close(fd);
    close(mfd);
}

/* ---- jobs through the public API ---- */

/* A dense job B1 Hq4 Hkv2 Sq Skv D (v: Dv) in one arena: random q, k, v, slopes, sinks. */
struct vjob {
    gllm_memory *arena;
    gllm_attention_params p;
    int64_t Sq, Skv, D, Dv;
    float *alibi, *sinks;
};

#define VJ_HQ 4
#define VJ_HKV 2

static void vjob_setup(gllm_client *c, struct vjob *j, int64_t Sq, int64_t Skv, int64_t D,
                       int64_t Dv, uint64_t seed)
{
    j->Sq = Sq, j->Skv = Skv, j->D = D, j->Dv = Dv;
    const size_t nq = (size_t)(VJ_HQ * Sq * D), nk = (size_t)(VJ_HKV * Skv * D),
                 nv = (size_t)(VJ_HKV * Skv * Dv), no = (size_t)(VJ_HQ * Sq * Dv);
    const size_t bytes = (nq + nk + nv + no + 2 * VJ_HQ) * 4 + (size_t)VJ_HQ * Sq * 4;
    assert_int_equal(gllm_arena_create(c, bytes, &j->arena), 0);
    float *base = gllm_memory_data(j->arena);
    fill_random(base, GLLM_DTYPE_F32, nq + nk + nv, &seed);
    memset(base + nq + nk + nv, 0xff, no * 4);
    j->alibi = base + nq + nk + nv + no;
    j->sinks = j->alibi + VJ_HQ;
    for (int h = 0; h < VJ_HQ; h++) {
        j->alibi[h] = (float)exp2(-8.0 * (h + 1) / VJ_HQ);
        j->sinks[h] = (float)h - 1.5f;
    }
    j->p = (gllm_attention_params){.size = sizeof j->p};
    const int64_t qs[4] = {1, VJ_HQ, Sq, D}, ks[4] = {1, VJ_HKV, Skv, D},
                  vs[4] = {1, VJ_HKV, Skv, Dv}, os[4] = {1, VJ_HQ, Sq, Dv}, hs[1] = {VJ_HQ},
                  ls[3] = {1, VJ_HQ, Sq};
    uint64_t at = 0;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 4, qs, &j->p.q), 0);
    at += nq * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 4, ks, &j->p.k), 0);
    at += nk * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 4, vs, &j->p.v), 0);
    at += nv * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 4, os, &j->p.out), 0);
    at += no * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 1, hs,
                                      &j->p.variant.alibi_slopes), 0);
    at += VJ_HQ * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 1, hs, &j->p.variant.sinks), 0);
    at += VJ_HQ * 4;
    assert_int_equal(gllm_tensor_init(j->arena, at, GLLM_DTYPE_F32, 3, ls, &j->p.lse), 0);
}

/* The job's output and lse against ref64 with the same variant. */
static void vjob_check(const struct vjob *j, bool causal, const struct ref64_variant *var)
{
    const float *base = gllm_memory_data(j->arena);
    const size_t rows = (size_t)(VJ_HQ * j->Sq), no = rows * (size_t)j->Dv;
    struct ref_view q = {base, GLLM_DTYPE_F32, {VJ_HQ * j->Sq * j->D, j->Sq * j->D, j->D, 1}};
    struct ref_view k = {base + VJ_HQ * j->Sq * j->D, GLLM_DTYPE_F32,
                         {VJ_HKV * j->Skv * j->D, j->Skv * j->D, j->D, 1}};
    struct ref_view v = {base + VJ_HQ * j->Sq * j->D + VJ_HKV * j->Skv * j->D, GLLM_DTYPE_F32,
                         {VJ_HKV * j->Skv * j->Dv, j->Skv * j->Dv, j->Dv, 1}};
    double *want = malloc(no * sizeof *want), *got = malloc(no * sizeof *got);
    double *wl = malloc(rows * sizeof *wl), *gl = malloc(rows * sizeof *gl);
    assert_non_null(want), assert_non_null(got), assert_non_null(wl), assert_non_null(gl);
    struct ref64_variant rv = *var;
    rv.causal = causal;
    ref64_attention_variant(1, VJ_HQ, VJ_HKV, j->Sq, j->Skv, j->D, j->Dv, q, k, v, &rv,
                            1.0 / sqrt((double)j->D), want, wl);
    const float *out = (const float *)((const char *)base + j->p.out.offset);
    const float *lse = (const float *)((const char *)base + j->p.lse.offset);
    for (size_t i = 0; i < no; i++)
        got[i] = out[i];
    for (size_t i = 0; i < rows; i++)
        gl[i] = lse[i];
    const double err = ref64_rel_error(got, want, no), lerr = ref64_lse_error(gl, wl, rows);
    if (!(err <= 1e-5) || !(lerr <= 1e-4))
        fail_msg("out err %.3g, lse err %.3g (Sq %lld Skv %lld D %lld Dv %lld)", err, lerr,
                 (long long)j->Sq, (long long)j->Skv, (long long)j->D, (long long)j->Dv);
    free(want), free(got), free(wl), free(gl);
}

static void test_dense_through_daemon(void **state)
{
    (void)state;
    gllm_client *c;
    assert_int_equal(gllm_connect(group_daemon.socket, &c), 0);
    struct vjob j;
    /* GPT-OSS's mix: a left window, sinks, causal; more queries than keys, so the first rows
     * see nothing (zeros, lse = the sink). */
    vjob_setup(c, &j, 40, 30, 32, 32, 7);
    j.p.flags = GLLM_ATTN_CAUSAL | GLLM_ATTN_WINDOW | GLLM_ATTN_LSE;
    j.p.variant.window_left = 6;
    j.p.variant.window_right = -1;
    j.p.variant.alibi_slopes.memory = NULL;
    gllm_job_result res = GLLM_JOB_RESULT_INIT;
    assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    struct ref64_variant rv = {.window = true, .window_left = 6, .window_right = -1,
                               .sinks = j.sinks};
    vjob_check(&j, true, &rv);
    gllm_memory_release(j.arena);

    /* Chunks, a soft-cap, ALiBi and v's head dim below q's, not causal. */
    vjob_setup(c, &j, 24, 50, 48, 16, 8);
    j.p.flags = GLLM_ATTN_LSE;
    j.p.variant.attention_chunk = 16;
    j.p.variant.logits_soft_cap = 0.75f;
    j.p.variant.sinks.memory = NULL;
    assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    rv = (struct ref64_variant){.chunk = 16, .soft_cap = (double)0.75f, .alibi_slopes = j.alibi};
    vjob_check(&j, false, &rv);

    /* The library refuses what gllmd would, before sending, with the reason. */
    j.p.variant.logits_soft_cap = -1.0f;
    assert_int_equal(gllm_attention(c, &j.p, &res), GLLM_EPARAM);
    assert_non_null(strstr(gllm_client_last_error(c), "logits_soft_cap"));
    j.p.variant.logits_soft_cap = 0.0f;
    j.p.flags |= GLLM_ATTN_WINDOW;
    j.p.variant.window_left = -3;
    assert_int_equal(gllm_attention(c, &j.p, &res), GLLM_EPARAM);
    assert_non_null(strstr(gllm_client_last_error(c), "window_left"));
    /* Without GLLM_ATTN_WINDOW the window fields are not read: zeroed params stay plain. */
    j.p.flags &= ~GLLM_ATTN_WINDOW;
    assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    rv.soft_cap = 0;
    vjob_check(&j, false, &rv);
    /* A params struct from before the variant (its size) gets none, whatever follows it. */
    j.p.size = offsetof(gllm_attention_params, variant);
    assert_int_equal(gllm_attention(c, &j.p, &res), 0);
    vjob_check(&j, false, &(struct ref64_variant){0});
    gllm_memory_release(j.arena);
    gllm_disconnect(c);
}

int main(void)
{
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_capabilities),
        cmocka_unit_test(test_wire_refusals),
        cmocka_unit_test(test_dense_through_daemon),
    };
    return cmocka_run_group_tests(tests, group_daemon_start, group_daemon_stop);
}
