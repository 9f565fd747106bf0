/* Time to pack and to decode one attention_decode request (B64's shapes), best of 30 rounds. */
#include <stdio.h>
#include <time.h>

#include "proto.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static struct proto_tensor tensor(bool device, gllm_dtype dtype, uint32_t rank, const int64_t *shape)
{
    struct proto_tensor t = {.arena = 3, .device = device, .offset = 4096, .dtype = dtype, .rank = rank};
    for (uint32_t i = 0; i < rank; i++)
        t.shape[i] = shape[i];
    proto_tensor_contiguous(&t);
    return t;
}

int main(void)
{
    /* What `gllmctl bench --decode` sends for B64 L4096: everything on the device but the
     * three small index arrays. */
    struct proto_paged p = {.op = PROTO_DECODE};
    p.k_cache = p.v_cache = tensor(true, GLLM_DTYPE_F16, 4, (const int64_t[]){16384, 16, 8, 128});
    p.kv_indptr = tensor(false, GLLM_DTYPE_I32, 1, (const int64_t[]){65});
    p.kv_indices = tensor(true, GLLM_DTYPE_I32, 1, (const int64_t[]){16384});
    p.kv_last_page_len = tensor(false, GLLM_DTYPE_I32, 1, (const int64_t[]){64});
    p.q = p.out = tensor(true, GLLM_DTYPE_F16, 3, (const int64_t[]){64, 32, 128});
    static struct proto_buf b;
    proto_buf_init(&b);
    enum { N = 20000, ROUNDS = 30 };
    double pack = 1e30, decode = 1e30;
    for (int round = 0; round < ROUNDS; round++) {
        double t0 = now_ns();
        for (int i = 0; i < N; i++) {
            proto_buf_init(&b);
            proto_pack_request(&b.pk, (uint64_t)i, "attention_decode");
            proto_pack_paged(&b.pk, &p);
        }
        double t1 = now_ns();
        for (int i = 0; i < N; i++) {
            struct proto_msg m;
            struct proto_paged out;
            if (proto_decode(b.data, b.len, &m, NULL) < 0 ||
                proto_decode_paged(m.params, PROTO_DECODE, &out) < 0) {
                fprintf(stderr, "codec_bench: the request does not decode\n");
                return 1;
            }
            proto_msg_free(&m);
        }
        double t2 = now_ns();
        pack = (t1 - t0) / N < pack ? (t1 - t0) / N : pack;
        decode = (t2 - t1) / N < decode ? (t2 - t1) / N : decode;
    }
    printf("attention_decode request, %zu bytes: pack %.0f ns, decode %.0f ns (best of %d rounds of %d)\n",
           b.len, pack, decode, ROUNDS, N);
    return 0;
}
