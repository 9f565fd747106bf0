/* Writes the checked-in seed corpora of the fuzzers (run by hand when the protocol grows). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static struct proto_buf b;

static void save(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

static struct proto_attention job(uint32_t arena, int64_t S, bool lse)
{
    struct proto_attention a = {.causal = true, .has_lse = lse};
    struct proto_tensor *t[4] = {&a.q, &a.k, &a.v, &a.out};
    for (int i = 0; i < 4; i++) {
        *t[i] = (struct proto_tensor){.arena = arena, .offset = (uint64_t)(i * 2 * S * 16 * 4),
                                      .dtype = GLLM_DTYPE_F32, .rank = 4, .shape = {1, 2, S, 16}};
        proto_tensor_contiguous(t[i]);
    }
    a.lse = (struct proto_tensor){.arena = arena, .offset = (uint64_t)(8 * S * 16 * 4),
                                  .dtype = GLLM_DTYPE_F32, .rank = 3, .shape = {1, 2, S}};
    proto_tensor_contiguous(&a.lse);
    return a;
}

/* A paged request as a client sends it (proto_decode_paged_request's path in gllmd). */
static void paged_request(uint64_t id, enum proto_paged_op op, const char *method)
{
    struct proto_paged p = {.op = op, .has_scale = op == PROTO_PREFILL, .scale = 0.125};
    struct proto_tensor *t[] = {&p.k_cache, &p.v_cache, &p.kv_indptr, &p.kv_indices,
                                &p.kv_last_page_len, &p.q, &p.out, &p.qo_indptr, &p.k, &p.v,
                                &p.append_indptr};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        const bool index = i >= 2 && i <= 4;
        *t[i] = (struct proto_tensor){.arena = 1, .device = i == 3, .offset = 256 * i,
                                      .dtype = index ? GLLM_DTYPE_I32 : GLLM_DTYPE_F16,
                                      .rank = index ? 1 : 3, .shape = {4, 2, 64}};
        proto_tensor_contiguous(t[i]);
    }
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, method);
    proto_pack_paged(&b.pk, &p);
}

/* Appends one fuzz_session record: [flags][len lo][len hi][bytes]. */
static size_t record(unsigned char *out, size_t at, int flags)
{
    out[at] = (unsigned char)flags;
    out[at + 1] = (unsigned char)(b.len & 0xff);
    out[at + 2] = (unsigned char)(b.len >> 8);
    memcpy(out + at + 3, b.data, b.len);
    return at + 3 + b.len;
}

/* Fills b with a request whose params are an empty map. */
static void request_empty(uint64_t id, const char *method)
{
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, method);
    msgpack_pack_map(&b.pk, 0);
}

/* Fills b with a request whose params are one unsigned key. */
static void request_u64(uint64_t id, const char *method, const char *key, uint64_t val)
{
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, method);
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, key, val);
}

/* Fills b with a fuzz_session arena write (flags bit 6): [offset lo][offset hi][bytes]. */
static void arena_bytes(unsigned at, const void *p, size_t n)
{
    b.data[0] = (char)(at & 0xff);
    b.data[1] = (char)(at >> 8);
    memcpy(b.data + 2, p, n);
    b.len = 2 + n;
}

/* Fills b with a dtensor_copy of 4096 bytes from arena 1 at `from` to device tensor 2. */
static void copy_to_dtensor(uint64_t id, uint64_t from)
{
    proto_buf_init(&b);
    proto_pack_request(&b.pk, id, "dtensor_copy");
    msgpack_pack_map(&b.pk, 6);
    proto_pack_kv_u64(&b.pk, "dtensor", 2);
    proto_pack_kv_u64(&b.pk, "offset", 0);
    proto_pack_kv_u64(&b.pk, "arena", 1);
    proto_pack_kv_u64(&b.pk, "arena_offset", from);
    proto_pack_kv_u64(&b.pk, "bytes", 4096);
    proto_pack_kv_bool(&b.pk, "to_device", true);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gen_seeds PROTO_DIR SESSION_DIR\n");
        return 2;
    }
    const char *pd = argv[1], *sd = argv[2];
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 1, "hello");
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_u64(&b.pk, "version", 1);
    proto_pack_kv_str(&b.pk, "client", "seed");
    save(pd, "hello", b.data, b.len);
    request_empty(2, "status");
    save(pd, "status", b.data, b.len);
    request_u64(3, "arena_register", "size", 65536);
    save(pd, "arena_register", b.data, b.len);
    struct proto_attention a = job(1, 8, true);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 4, "attention");
    proto_pack_attention(&b.pk, &a);
    save(pd, "attention", b.data, b.len);
    {   /* Every variant key, as a client sends them (proto/variant.c). */
        struct proto_attention va = job(1, 8, true);
        va.variant = (struct proto_variant){.window = true, .window_left = 4, .window_right = -1,
                                            .attention_chunk = 16, .logits_soft_cap = 30.0,
                                            .has_alibi = true, .alibi_slopes = va.lse,
                                            .has_sinks = true, .sinks = va.lse};
        va.variant.alibi_slopes.rank = va.variant.sinks.rank = 1;
        proto_buf_init(&b);
        proto_pack_request(&b.pk, 5, "attention");
        proto_pack_attention(&b.pk, &va);
        save(pd, "attention_variant", b.data, b.len);
    }
    proto_buf_init(&b);
    proto_pack_result(&b.pk, 4);
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_u64(&b.pk, "kernel_ns", 1000);
    proto_pack_kv_u64(&b.pk, "queue_ns", 10);
    save(pd, "result", b.data, b.len);
    proto_buf_init(&b);
    proto_pack_error(&b.pk, 5, GLLM_EBOUNDS, "q: outside");
    save(pd, "error", b.data, b.len);
    paged_request(6, PROTO_DECODE, "attention_decode");
    save(pd, "attention_decode", b.data, b.len);
    paged_request(7, PROTO_PREFILL, "attention_prefill");
    save(pd, "attention_prefill", b.data, b.len);
    paged_request(8, PROTO_KV_APPEND, "kv_append");
    save(pd, "kv_append", b.data, b.len);

    static unsigned char s[1 << 16];
    size_t n = 0;
    request_u64(2, "arena_register", "size", 65536);
    n = record(s, n, 1);                       /* with a sealed memfd */
    for (int i = 0; i < 3; i++) {
        a = job(1, 4 + 8 * i, i == 1);
        a.causal = i != 2;
        proto_buf_init(&b);
        proto_pack_request(&b.pk, 10 + (uint64_t)i, "attention");
        proto_pack_attention(&b.pk, &a);
        n = record(s, n, 0);
    }
    request_empty(20, "status");
    n = record(s, n, 0);
    request_u64(21, "arena_release", "arena", 1);
    n = record(s, n, 0);
    save(sd, "register_attention_release", s, n);
    n = 0;
    request_u64(2, "arena_register", "size", 65536);
    n = record(s, n, 2);                       /* unsealed: refused */
    n = record(s, n, 4);                       /* a pipe: refused */
    save(sd, "bad_fds", s, n);

    /* A ring, an arena, a job by the ring (after: 3 packets: hello, ring, arena), a status
     * by the socket that takes it out. */
    n = 0;
    request_empty(2, "ring");
    n = record(s, n, 8);
    request_u64(3, "arena_register", "size", 65536);
    n = record(s, n, 1);
    a = job(1, 8, false);
    proto_buf_init(&b);
    const uint32_t after = 3;
    memcpy(b.data, &after, 4);
    b.len = 4;
    proto_pack_request(&b.pk, 4, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 16);
    request_empty(5, "status");
    n = record(s, n, 0);
    save(sd, "ring_request", s, n);

    /* An arena whose tables the harness writes (two sequences: 5 tokens on page 1, 3 on
     * page 3 of a 4-page pool), a device tensor that takes kv_indices from it, a decode
     * that runs, the same with page 9 (refused when it runs), and a kv_append with the
     * device table (refused). */
    n = 0;
    request_u64(2, "arena_register", "size", 65536);
    n = record(s, n, 1);
    const int32_t indptr[3] = {0, 1, 2}, last[2] = {5, 3}, pages[2] = {1, 3}, bad[2] = {1, 9};
    arena_bytes(16384, indptr, sizeof indptr);
    n = record(s, n, 64);
    arena_bytes(16400, last, sizeof last);
    n = record(s, n, 64);
    arena_bytes(20000, pages, sizeof pages);
    n = record(s, n, 64);
    request_u64(3, "dtensor_create", "bytes", 4096);
    n = record(s, n, 0);
    copy_to_dtensor(4, 20000);
    n = record(s, n, 0);
    struct proto_paged pg = {.op = PROTO_DECODE};
    const struct {
        struct proto_tensor *t;
        uint64_t off;
        gllm_dtype dt;
        uint32_t rank;
        int64_t shape[4];
    } ts[] = {
        {&pg.k_cache, 0, GLLM_DTYPE_F16, 4, {4, 16, 1, 64}},
        {&pg.v_cache, 8192, GLLM_DTYPE_F16, 4, {4, 16, 1, 64}},
        {&pg.kv_indptr, 16384, GLLM_DTYPE_I32, 1, {3}},
        {&pg.kv_indices, 0, GLLM_DTYPE_I32, 1, {8}},
        {&pg.kv_last_page_len, 16400, GLLM_DTYPE_I32, 1, {2}},
        {&pg.q, 16512, GLLM_DTYPE_F16, 3, {2, 1, 64}},
        {&pg.out, 16768, GLLM_DTYPE_F16, 3, {2, 1, 64}},
        {&pg.k, 17024, GLLM_DTYPE_F16, 3, {2, 1, 64}},
        {&pg.v, 17280, GLLM_DTYPE_F16, 3, {2, 1, 64}},
        {&pg.append_indptr, 17536, GLLM_DTYPE_I32, 1, {3}},
    };
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        *ts[i].t = (struct proto_tensor){.arena = ts[i].t == &pg.kv_indices ? 2 : 1,
                                         .device = ts[i].t == &pg.kv_indices, .offset = ts[i].off,
                                         .dtype = ts[i].dt, .rank = ts[i].rank};
        memcpy(ts[i].t->shape, ts[i].shape, sizeof ts[i].shape);
        proto_tensor_contiguous(ts[i].t);
    }
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 5, "attention_decode");
    proto_pack_paged(&b.pk, &pg);
    n = record(s, n, 0);
    arena_bytes(20000, bad, sizeof bad);
    n = record(s, n, 64);
    copy_to_dtensor(7, 20000);
    n = record(s, n, 0);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 8, "attention_decode");
    proto_pack_paged(&b.pk, &pg);
    n = record(s, n, 0);
    pg.op = PROTO_KV_APPEND;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 6, "kv_append");
    proto_pack_paged(&b.pk, &pg);
    n = record(s, n, 0);
    save(sd, "paged_device_indices", s, n);

    /* Shared device memory: an export (its fd comes back with the reply), the client's
     * sealed 64 KiB memfd imported as a device tensor, a copy into it and a job reading it,
     * then both freed; and an import of a pipe (refused). */
    n = 0;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "dtensor_create");
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_u64(&b.pk, "bytes", 8192);
    proto_pack_kv_bool(&b.pk, "export", true);
    n = record(s, n, 0);
    request_u64(3, "arena_register", "size", 65536);
    n = record(s, n, 1);
    request_u64(4, "dtensor_import", "bytes", 65536);
    n = record(s, n, 1);
    copy_to_dtensor(5, 0);
    n = record(s, n, 0);
    a = job(1, 8, false);
    a.q.arena = 3, a.q.device = true;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 6, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 0);
    request_u64(7, "dtensor_free", "dtensor", 3);
    n = record(s, n, 0);
    request_u64(8, "dtensor_free", "dtensor", 1);
    n = record(s, n, 0);
    request_u64(9, "dtensor_import", "bytes", 4096);
    n = record(s, n, 4);
    request_empty(10, "status");
    n = record(s, n, 0);
    save(sd, "shared_memory", s, n);

    /* Jobs ordered by counters in arena 1: one waiting for a counter the arena write below
     * raises, one waiting for one nobody raises (5 ms), a refused job whose signal is still
     * queued behind them, and a paged append waiting too. */
    n = 0;
    request_u64(2, "arena_register", "size", 65536);
    n = record(s, n, 1);
    a = job(1, 8, false);
    a.wait = (struct proto_counter){.set = true, .arena = 1, .offset = 60000, .value = 1,
                                    .timeout_ms = 5};
    a.signal = (struct proto_counter){.set = true, .arena = 1, .offset = 60004, .value = 2};
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 3, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 0);
    const uint32_t one = 1;
    arena_bytes(60000, &one, sizeof one);
    n = record(s, n, 64);
    a.wait.offset = 60008;
    a.signal.value = 3;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 4, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 0);
    a.wait.set = false;
    a.out.dtype = GLLM_DTYPE_F16;               /* refused: its signal still goes out */
    a.signal.value = 4;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 5, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 0);
    paged_request(6, PROTO_KV_APPEND, "kv_append");
    n = record(s, n, 0);
    request_empty(7, "status");
    n = record(s, n, 0);
    save(sd, "ordered_jobs", s, n);
    return 0;
}
