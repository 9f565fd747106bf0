/* libFuzzer harness for the wire codec: raw packets into proto_decode and the field readers. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "info.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* msgpack_object_equal, except that floats compare by their bits: a NaN is not equal to
 * itself, but both trees must hold the same one. */
static bool same_tree(const msgpack_object *a, const msgpack_object *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return memcmp(&a->via.f64, &b->via.f64, sizeof a->via.f64) == 0;
    case MSGPACK_OBJECT_ARRAY:
        if (a->via.array.size != b->via.array.size)
            return false;
        for (uint32_t i = 0; i < a->via.array.size; i++)
            if (!same_tree(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                return false;
        return true;
    case MSGPACK_OBJECT_MAP:
        if (a->via.map.size != b->via.map.size)
            return false;
        for (uint32_t i = 0; i < a->via.map.size; i++)
            if (!same_tree(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
                !same_tree(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
                return false;
        return true;
    default:
        return msgpack_object_equal(*a, *b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Building the tree fails exactly where the scan fails, with the same code. */
    msgpack_object root;
    void *nodes;
    const int built = proto_tree_build(data, size, &root, &nodes);
    if (built != proto_scan(data, size))
        __builtin_trap();
    free(nodes);
    struct proto_msg m;
    int64_t id = -1;
    if (proto_decode(data, size, &m, &id) < 0)
        return 0;
    /* The tree proto_decode built must be the one msgpack-c's unpacker builds. */
    msgpack_unpacked theirs;
    msgpack_unpacked_init(&theirs);
    if (msgpack_unpack_next(&theirs, (const char *)data, size, NULL) != MSGPACK_UNPACK_SUCCESS ||
        !same_tree(&m.root, &theirs.data))
        __builtin_trap();
    msgpack_unpacked_destroy(&theirs);
    const msgpack_object *map = m.kind == PROTO_RESPONSE ? m.result : m.params;
    uint64_t u;
    int64_t i;
    double f;
    bool b;
    char s[64];
    static const char *const keys[] = {"version", "size",    "arena",   "scale",
                                       "causal",  "repeat",  "device",  "client",
                                       "code",    "message", "kernel_ns"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        proto_get_u64(map, keys[k], false, &u);
        proto_get_i64(map, keys[k], false, &i);
        proto_get_f64(map, keys[k], false, &f);
        proto_get_bool(map, keys[k], false, &b);
        proto_get_str(map, keys[k], false, s, sizeof s);
    }
    /* The paged operations' fields, each operation's way (seeds: attention_decode,
     * attention_prefill, kv_append). */
    for (int op = PROTO_KV_APPEND; op <= PROTO_PREFILL; op++) {
        struct proto_paged p;
        if (proto_decode_paged(map, (enum proto_paged_op)op, &p) == 0) {
            uint64_t first, end;
            proto_tensor_span(&p.k_cache, &first, &end);
            proto_tensor_span(&p.kv_indices, &first, &end);
        }
    }
    /* The keys every job takes, and dtensor_copy's; what decodes must decode the same again. */
    struct proto_job j;
    const char *why = NULL;
    if (proto_decode_job(map, true, &j, &why) < 0 && !why)
        __builtin_trap();          /* every refusal says why */
    uint64_t dev;
    struct proto_counter sig;
    proto_decode_job_signal(map, &dev, &sig);
    struct proto_copy cp;
    if (proto_decode_copy(map, &cp) == 0) {
        struct proto_buf *out = malloc(sizeof *out);
        if (out) {
            proto_buf_init(out);
            proto_pack_request(&out->pk, 1, "dtensor_copy");
            proto_pack_copy(&out->pk, &cp);
            struct proto_msg again;
            struct proto_copy cp2;
            if (out->overflow || proto_decode(out->data, out->len, &again, NULL) != 0)
                __builtin_trap();
            if (proto_decode_copy(again.params, &cp2) != 0 ||
                cp.wait.set != cp2.wait.set || cp.wait.value != cp2.wait.value ||
                cp.wait.timeout_ms != cp2.wait.timeout_ms ||
                cp.signal.offset != cp2.signal.offset ||
                cp.bytes != cp2.bytes)
                __builtin_trap();
            proto_msg_free(&again);
            free(out);
        }
    }
    /* hello's and status's readers (a result from a daemon that is not gllmd), and what they
     * read packs as a message again. */
    struct proto_hello *h = malloc(sizeof *h);
    struct proto_status *st = malloc(sizeof *st);
    struct proto_buf *hb = malloc(sizeof *hb);
    if (h && st && hb) {
        proto_read_table(map, &proto_hello_table, h);
        proto_read_table(map, &proto_status_table, st);
        proto_buf_init(hb);
        proto_pack_result(&hb->pk, 1);
        proto_pack_table(&hb->pk, &proto_hello_table, h);
        struct proto_msg again;
        if (hb->overflow || proto_decode(hb->data, hb->len, &again, NULL) != 0)
            __builtin_trap();
        proto_msg_free(&again);
    }
    free(h);
    free(st);
    free(hb);
    /* The administrators' results, as the library reads them. */
    struct proto_admin_clients *ac = malloc(sizeof *ac);
    if (ac)
        proto_read_table(map, &proto_admin_clients_table, ac);
    free(ac);
    struct proto_admin_drain dr;
    proto_read_table(map, &proto_admin_drain_table, &dr);
    /* The variant side: the job-key check, hello's capabilities as the library reads them,
     * and the one check of a decoded variant against them. */
    char err[PROTO_MAX_ERRMSG];
    proto_job_keys_check(map, err, sizeof err);
    struct proto_hello_capabilities modes;
    proto_read_table(proto_map_get(map, "capabilities"), &proto_capabilities_table, &modes);
    struct proto_attention a;
    if (proto_decode_attention(map, &a) == 0) {
        proto_variant_check(&a.variant, GLLM_MODE_DENSE, &modes.dense, "fuzz",
                            a.q.shape[1], a.q.shape[a.q.rank ? a.q.rank - 1 : 0],
                            a.v.shape[a.v.rank ? a.v.rank - 1 : 0], err, sizeof err);
        uint64_t first, end;
        proto_tensor_span(&a.q, &first, &end);
        proto_tensor_span(&a.out, &first, &end);
        /* What decodes must encode again within the limits. */
        struct proto_buf *out = malloc(sizeof *out);
        if (out) {
            proto_buf_init(out);
            proto_pack_request(&out->pk, 1, "attention");
            proto_pack_attention(&out->pk, &a);
            if (!out->overflow) {
                struct proto_msg again;
                if (proto_decode(out->data, out->len, &again, NULL) != 0)
                    __builtin_trap();
                proto_msg_free(&again);
            }
            free(out);
        }
    }
    proto_msg_free(&m);
    return 0;
}
