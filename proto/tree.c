/* The msgpack_object tree of a scanned packet: one allocation, strings left in the packet. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* Where the next children go: the two arrays of the one allocation, filled in order. Each
 * take is checked against what the scan counted, so bytes that changed since the scan can
 * only fail the build, never overrun it. */
struct builder {
    const unsigned char *p, *end;
    msgpack_object *objs;
    msgpack_object_kv *kvs;
    size_t objs_left, kvs_left;
};

static uint64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Takes the next n bytes; NULL if the packet ends first. */
static const unsigned char *take(struct builder *b, uint64_t n)
{
    if ((uint64_t)(b->end - b->p) < n)
        return NULL;
    const unsigned char *at = b->p;
    b->p += n;
    return at;
}

/* The n-byte big-endian length or count at the cursor. */
static bool read_len(struct builder *b, int n, uint64_t *v)
{
    const unsigned char *at = take(b, (uint64_t)n);
    if (at)
        *v = be(at, n);
    return at != NULL;
}

static int build(struct builder *b, msgpack_object *o, unsigned depth);

static int build_array(struct builder *b, msgpack_object *o, uint64_t n, unsigned depth)
{
    if (n > b->objs_left || depth >= PROTO_MAX_DEPTH)
        return GLLM_EMALFORMED;
    o->type = MSGPACK_OBJECT_ARRAY;
    o->via.array.size = (uint32_t)n;
    o->via.array.ptr = NULL;
    if (n) {                          /* an empty array may have no storage at all */
        o->via.array.ptr = b->objs;
        b->objs += n, b->objs_left -= n;
    }
    for (uint64_t i = 0; i < n; i++) {
        int r = build(b, &o->via.array.ptr[i], depth + 1);
        if (r < 0)
            return r;
    }
    return 0;
}

static int build_map(struct builder *b, msgpack_object *o, uint64_t n, unsigned depth)
{
    if (n > b->kvs_left || depth >= PROTO_MAX_DEPTH)
        return GLLM_EMALFORMED;
    o->type = MSGPACK_OBJECT_MAP;
    o->via.map.size = (uint32_t)n;
    o->via.map.ptr = NULL;
    if (n) {
        o->via.map.ptr = b->kvs;
        b->kvs += n, b->kvs_left -= n;
    }
    for (uint64_t i = 0; i < n; i++) {
        int r;
        if ((r = build(b, &o->via.map.ptr[i].key, depth + 1)) < 0 ||
            (r = build(b, &o->via.map.ptr[i].val, depth + 1)) < 0)
            return r;
    }
    return 0;
}

/* str, bin: n bytes in place. */
static int build_bytes(struct builder *b, msgpack_object *o, msgpack_object_type type, uint64_t n)
{
    const unsigned char *at = take(b, n);
    if (!at || n > PROTO_MAX_STRING)
        return GLLM_EMALFORMED;
    o->type = type;
    o->via.str.size = (uint32_t)n;
    o->via.str.ptr = (const char *)at;
    return 0;
}

static int build_ext(struct builder *b, msgpack_object *o, uint64_t n)
{
    const unsigned char *at = take(b, n + 1);
    if (!at || n > PROTO_MAX_STRING)
        return GLLM_EMALFORMED;
    o->type = MSGPACK_OBJECT_EXT;
    o->via.ext.type = (int8_t)at[0];
    o->via.ext.size = (uint32_t)n;
    o->via.ext.ptr = (const char *)at + 1;
    return 0;
}

/* An integer of n bytes; signed ones that are not negative are positive, as msgpack-c has it. */
static int build_int(struct builder *b, msgpack_object *o, int n, bool is_signed)
{
    const unsigned char *at = take(b, (uint64_t)n);
    if (!at)
        return GLLM_EMALFORMED;
    uint64_t v = be(at, n);
    if (is_signed && n < 8 && (v >> (8 * n - 1)))
        v |= ~(uint64_t)0 << (8 * n);           /* sign-extend */
    if (is_signed && (int64_t)v < 0) {
        o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        o->via.i64 = (int64_t)v;
    } else {
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        o->via.u64 = v;
    }
    return 0;
}

static int build(struct builder *b, msgpack_object *o, unsigned depth)
{
    const unsigned char *at = take(b, 1);
    if (!at)
        return GLLM_EMALFORMED;
    const unsigned char t = *at;
    if (t <= 0x7f) {
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        o->via.u64 = t;
        return 0;
    }
    if (t >= 0xe0) {
        o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        o->via.i64 = (int8_t)t;
        return 0;
    }
    if (t <= 0x8f)
        return build_map(b, o, t & 0x0f, depth);
    if (t <= 0x9f)
        return build_array(b, o, t & 0x0f, depth);
    if (t <= 0xbf)
        return build_bytes(b, o, MSGPACK_OBJECT_STR, t & 0x1f);
    const unsigned char *at8;
    uint64_t n;
    switch (t) {
    case 0xc0:
        o->type = MSGPACK_OBJECT_NIL;
        return 0;
    case 0xc2: case 0xc3:
        o->type = MSGPACK_OBJECT_BOOLEAN;
        o->via.boolean = t == 0xc3;
        return 0;
    case 0xc4: case 0xc5: case 0xc6:             /* bin 8, 16, 32 */
        if (!read_len(b, 1 << (t - 0xc4), &n))
            return GLLM_EMALFORMED;
        return build_bytes(b, o, MSGPACK_OBJECT_BIN, n);
    case 0xc7: case 0xc8: case 0xc9:             /* ext 8, 16, 32 */
        if (!read_len(b, 1 << (t - 0xc7), &n))
            return GLLM_EMALFORMED;
        return build_ext(b, o, n);
    case 0xca: {
        if (!read_len(b, 4, &n))
            return GLLM_EMALFORMED;
        const uint32_t bits = (uint32_t)n;
        float f;
        memcpy(&f, &bits, sizeof f);
        o->type = MSGPACK_OBJECT_FLOAT32;
        o->via.f64 = f;
        return 0;
    }
    case 0xcb:
        if (!(at8 = take(b, 8)))
            return GLLM_EMALFORMED;
        n = be(at8, 8);
        memcpy(&o->via.f64, &n, sizeof n);
        o->type = MSGPACK_OBJECT_FLOAT64;
        return 0;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        return build_int(b, o, 1 << (t - 0xcc), false);
    case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        return build_int(b, o, 1 << (t - 0xd0), true);
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:   /* fixext 1 to 16 */
        return build_ext(b, o, (uint64_t)1 << (t - 0xd4));
    case 0xd9: case 0xda: case 0xdb:             /* str 8, 16, 32 */
        if (!read_len(b, 1 << (t - 0xd9), &n))
            return GLLM_EMALFORMED;
        return build_bytes(b, o, MSGPACK_OBJECT_STR, n);
    case 0xdc: case 0xdd:                         /* array 16, 32 */
        if (!read_len(b, t == 0xdc ? 2 : 4, &n))
            return GLLM_EMALFORMED;
        return build_array(b, o, n, depth);
    case 0xde: case 0xdf:                         /* map 16, 32 */
        if (!read_len(b, t == 0xde ? 2 : 4, &n))
            return GLLM_EMALFORMED;
        return build_map(b, o, n, depth);
    default:
        return GLLM_EMALFORMED;
    }
}

int proto_tree_build(const void *buf, size_t len, const struct proto_shape *n, msgpack_object *root,
                     void **nodes)
{
    *nodes = NULL;
    /* The scan bounds both counts by the packet's length, so the sizes cannot overflow. */
    const size_t bytes = n->objs * sizeof(msgpack_object) + n->kvs * sizeof(msgpack_object_kv);
    void *mem = NULL;
    if (bytes && !(mem = malloc(bytes)))
        return -ENOMEM;
    struct builder b = {
        .p = buf, .end = (const unsigned char *)buf + len,
        .objs = mem, .kvs = mem ? (msgpack_object_kv *)((msgpack_object *)mem + n->objs) : NULL,
        .objs_left = n->objs, .kvs_left = n->kvs,
    };
    int r = build(&b, root, 0);
    if (r == 0 && b.p != b.end)
        r = GLLM_EMALFORMED;
    if (r < 0) {
        free(mem);
        return r;
    }
    *nodes = mem;
    return 0;
}
