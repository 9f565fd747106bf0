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

/* Appends one fuzz_session record: [flags][len lo][len hi][bytes]. */
static size_t record(unsigned char *out, size_t at, int flags)
{
    out[at] = (unsigned char)flags;
    out[at + 1] = (unsigned char)(b.len & 0xff);
    out[at + 2] = (unsigned char)(b.len >> 8);
    memcpy(out + at + 3, b.data, b.len);
    return at + 3 + b.len;
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
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "status");
    msgpack_pack_map(&b.pk, 0);
    save(pd, "status", b.data, b.len);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 3, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", 65536);
    save(pd, "arena_register", b.data, b.len);
    struct proto_attention a = job(1, 8, true);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 4, "attention");
    proto_pack_attention(&b.pk, &a);
    save(pd, "attention", b.data, b.len);
    proto_buf_init(&b);
    proto_pack_result(&b.pk, 4);
    msgpack_pack_map(&b.pk, 2);
    proto_pack_kv_u64(&b.pk, "kernel_ns", 1000);
    proto_pack_kv_u64(&b.pk, "queue_ns", 10);
    save(pd, "result", b.data, b.len);
    proto_buf_init(&b);
    proto_pack_error(&b.pk, 5, GLLM_EBOUNDS, "q: outside");
    save(pd, "error", b.data, b.len);

    static unsigned char s[1 << 16];
    size_t n = 0;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", 65536);
    n = record(s, n, 1);                       /* with a sealed memfd */
    for (int i = 0; i < 3; i++) {
        a = job(1, 4 + 8 * i, i == 1);
        a.causal = i != 2;
        proto_buf_init(&b);
        proto_pack_request(&b.pk, 10 + (uint64_t)i, "attention");
        proto_pack_attention(&b.pk, &a);
        n = record(s, n, 0);
    }
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 20, "status");
    msgpack_pack_map(&b.pk, 0);
    n = record(s, n, 0);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 21, "arena_release");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "arena", 1);
    n = record(s, n, 0);
    save(sd, "register_attention_release", s, n);
    n = 0;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", 65536);
    n = record(s, n, 2);                       /* unsealed: refused */
    n = record(s, n, 4);                       /* a pipe: refused */
    save(sd, "bad_fds", s, n);

    /* A ring, an arena, a job by the ring (after: 3 packets: hello, ring, arena), a status
     * by the socket that takes it out. */
    n = 0;
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 2, "ring");
    msgpack_pack_map(&b.pk, 0);
    n = record(s, n, 8);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 3, "arena_register");
    msgpack_pack_map(&b.pk, 1);
    proto_pack_kv_u64(&b.pk, "size", 65536);
    n = record(s, n, 1);
    a = job(1, 8, false);
    proto_buf_init(&b);
    const uint32_t after = 3;
    memcpy(b.data, &after, 4);
    b.len = 4;
    proto_pack_request(&b.pk, 4, "attention");
    proto_pack_attention(&b.pk, &a);
    n = record(s, n, 16);
    proto_buf_init(&b);
    proto_pack_request(&b.pk, 5, "status");
    msgpack_pack_map(&b.pk, 0);
    n = record(s, n, 0);
    save(sd, "ring_request", s, n);
    return 0;
}
