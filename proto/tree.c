/* One walk over a packet's bytes: its bounds checked, and its msgpack_object tree built. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/*
 * The walk checks what the limits in proto.h promise (size, nesting, container and string
 * lengths, map keys that are strings, one object and nothing after it) as it goes, and in
 * build mode fills the tree as it goes. A tree needs at most one object (24 bytes) per byte
 * of packet, an element being at least a byte and a pair at least two, so build mode takes
 * everything from one region of 24 bytes per packet byte: elements from its front, pairs
 * from its back. Count mode (proto_scan) has no region and allocates nothing.
 */
struct walk {
    const unsigned char *p, *end;
    char *front, *back;         /* build mode: the free part of the region; NULL: count mode */
    bool short_of_room;         /* a header claimed more than the packet holds */
};

static uint64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The next n bytes, consumed; NULL if the packet ends first. */
static const unsigned char *take(struct walk *w, uint64_t n)
{
    if ((uint64_t)(w->end - w->p) < n)
        return NULL;
    const unsigned char *at = w->p;
    w->p += n;
    return at;
}

/* The n-byte big-endian length or count at the cursor. */
static bool read_len(struct walk *w, int n, uint64_t *v)
{
    const unsigned char *at = take(w, (uint64_t)n);
    if (at)
        *v = be(at, n);
    return at != NULL;
}

/* Room for n elements or pairs at the front or back of the region. A well-formed packet
 * always has it; a header that claims more than the rest of the packet can hold may not,
 * and then the walk goes on counting only, to fail where proto_scan fails, with its code. */
static void *take_nodes(struct walk *w, uint64_t n, bool pairs)
{
    const size_t bytes = (size_t)n * (pairs ? sizeof(msgpack_object_kv) : sizeof(msgpack_object));
    if (bytes > (size_t)(w->back - w->front)) {
        w->front = w->back = NULL;
        w->short_of_room = true;
        return NULL;
    }
    if (pairs)
        return w->back -= bytes;
    void *at = w->front;
    w->front += bytes;
    return at;
}

static int walk_object(struct walk *w, msgpack_object *o, unsigned depth, bool want_string);

static int walk_container(struct walk *w, msgpack_object *o, uint64_t n, unsigned depth, bool map)
{
    if (n > PROTO_MAX_CONTAINER || depth >= PROTO_MAX_DEPTH)
        return GLLM_ELIMIT;
    o->type = map ? MSGPACK_OBJECT_MAP : MSGPACK_OBJECT_ARRAY;
    o->via.array.size = (uint32_t)n;  /* array and map share the layout of size and ptr */
    const bool build = w->front && n;
    msgpack_object_kv *pairs = map && build ? take_nodes(w, n, true) : NULL;
    msgpack_object *elems = !map && build ? take_nodes(w, n, false) : NULL;
    if (map)
        o->via.map.ptr = pairs;
    else
        o->via.array.ptr = elems;
    for (uint64_t i = 0; i < n; i++) {
        msgpack_object key, val;     /* count mode: filled and dropped */
        int r;
        if (map) {
            if ((r = walk_object(w, pairs ? &pairs[i].key : &key, depth + 1, true)) < 0 ||
                (r = walk_object(w, pairs ? &pairs[i].val : &val, depth + 1, false)) < 0)
                return r;
        } else if ((r = walk_object(w, elems ? &elems[i] : &val, depth + 1, false)) < 0) {
            return r;
        }
    }
    return 0;
}

/* str, bin and ext: n bytes in place (ext: a type byte first). */
static int walk_bytes(struct walk *w, msgpack_object *o, msgpack_object_type type, uint64_t n)
{
    if (n > PROTO_MAX_STRING)
        return GLLM_ELIMIT;
    const unsigned char *at = take(w, n + (type == MSGPACK_OBJECT_EXT));
    if (!at)
        return GLLM_EMALFORMED;
    o->type = type;
    if (type == MSGPACK_OBJECT_EXT) {
        o->via.ext.type = (int8_t)at[0];
        o->via.ext.size = (uint32_t)n;
        o->via.ext.ptr = (const char *)at + 1;
    } else {
        o->via.str.size = (uint32_t)n;
        o->via.str.ptr = (const char *)at;
    }
    return 0;
}

/* An integer of n bytes; signed ones that are not negative are positive, as msgpack-c has it. */
static int walk_int(struct walk *w, msgpack_object *o, int n, bool is_signed)
{
    uint64_t v;
    if (!read_len(w, n, &v))
        return GLLM_EMALFORMED;
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

static int walk_object(struct walk *w, msgpack_object *o, unsigned depth, bool want_string)
{
    const unsigned char *at = take(w, 1);
    if (!at)
        return GLLM_EMALFORMED;
    const unsigned char t = *at;
    /* Map keys must be strings: every field name in the protocol is one. */
    if (want_string && !((t >= 0xa0 && t <= 0xbf) || (t >= 0xd9 && t <= 0xdb)))
        return GLLM_EMALFORMED;
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
        return walk_container(w, o, t & 0x0f, depth, true);
    if (t <= 0x9f)
        return walk_container(w, o, t & 0x0f, depth, false);
    if (t <= 0xbf)
        return walk_bytes(w, o, MSGPACK_OBJECT_STR, t & 0x1f);
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
        if (!read_len(w, 1 << (t - 0xc4), &n))
            return GLLM_EMALFORMED;
        return walk_bytes(w, o, MSGPACK_OBJECT_BIN, n);
    case 0xc7: case 0xc8: case 0xc9:             /* ext 8, 16, 32: nothing in the protocol uses it */
        if (!read_len(w, 1 << (t - 0xc7), &n))
            return GLLM_EMALFORMED;
        return walk_bytes(w, o, MSGPACK_OBJECT_EXT, n);
    case 0xca: {
        if (!read_len(w, 4, &n))
            return GLLM_EMALFORMED;
        const uint32_t bits = (uint32_t)n;
        float f;
        memcpy(&f, &bits, sizeof f);
        o->type = MSGPACK_OBJECT_FLOAT32;
        o->via.f64 = f;
        return 0;
    }
    case 0xcb:
        if (!read_len(w, 8, &n))
            return GLLM_EMALFORMED;
        memcpy(&o->via.f64, &n, sizeof n);
        o->type = MSGPACK_OBJECT_FLOAT64;
        return 0;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        return walk_int(w, o, 1 << (t - 0xcc), false);
    case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        return walk_int(w, o, 1 << (t - 0xd0), true);
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:   /* fixext 1 to 16 */
        return walk_bytes(w, o, MSGPACK_OBJECT_EXT, (uint64_t)1 << (t - 0xd4));
    case 0xd9: case 0xda: case 0xdb:             /* str 8, 16, 32 */
        if (!read_len(w, 1 << (t - 0xd9), &n))
            return GLLM_EMALFORMED;
        return walk_bytes(w, o, MSGPACK_OBJECT_STR, n);
    case 0xdc: case 0xdd:                         /* array 16, 32 */
        if (!read_len(w, t == 0xdc ? 2 : 4, &n))
            return GLLM_EMALFORMED;
        return walk_container(w, o, n, depth, false);
    case 0xde: case 0xdf:                         /* map 16, 32 */
        if (!read_len(w, t == 0xde ? 2 : 4, &n))
            return GLLM_EMALFORMED;
        return walk_container(w, o, n, depth, true);
    default:
        return GLLM_EMALFORMED;                  /* 0xc1 is never used */
    }
}

static int walk_packet(struct walk *w, size_t len, msgpack_object *root)
{
    if (len > PROTO_MAX_MESSAGE)
        return GLLM_ETOOBIG;
    if (len == 0)
        return GLLM_EMALFORMED;
    int r = walk_object(w, root, 0, false);
    if (r < 0)
        return r;
    return w->p == w->end ? 0 : GLLM_EMALFORMED;   /* one message per packet, nothing after it */
}

int proto_scan(const void *buf, size_t len)
{
    struct walk w = {.p = buf, .end = (const unsigned char *)buf + len};
    msgpack_object root;
    return walk_packet(&w, len, &root);
}

int proto_tree_build(const void *buf, size_t len, msgpack_object *root, void **nodes)
{
    *nodes = NULL;
    if (len > PROTO_MAX_MESSAGE || len == 0)
        return proto_scan(buf, len);  /* refused before any walk: nothing to build */
    char *region = malloc(len * sizeof(msgpack_object));
    if (!region)
        return -ENOMEM;
    struct walk w = {.p = buf, .end = (const unsigned char *)buf + len, .front = region,
                     .back = region + len * sizeof(msgpack_object)};
    int r = walk_packet(&w, len, root);
    if (r == 0 && w.short_of_room)
        r = GLLM_EMALFORMED;          /* cannot be: such a packet does not end well */
    if (r < 0) {
        free(region);
        return r;
    }
    *nodes = region;
    return 0;
}
