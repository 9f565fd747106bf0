/* Allocation-free pre-check of raw msgpack bytes: size, nesting, lengths, well-formedness. */
#include <string.h>

#include "proto.h"

static uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads the n-byte big-endian length at *p, advancing *p; -1 if truncated. */
static int64_t read_len(const unsigned char **p, const unsigned char *end, int n)
{
    if (end - *p < n)
        return -1;
    uint32_t v = n == 1 ? (*p)[0] : n == 2 ? be16(*p) : be32(*p);
    *p += n;
    return v;
}

/* Skips `len` payload bytes; GLLM_EMALFORMED if the packet ends first. */
static int skip(const unsigned char **p, const unsigned char *end, uint64_t len)
{
    if ((uint64_t)(end - *p) < len)
        return GLLM_EMALFORMED;
    *p += len;
    return 0;
}

static int scan_object(const unsigned char **p, const unsigned char *end, unsigned depth,
                       bool want_string, struct proto_shape *n);

/* Counts the container's children into n: what proto_tree_build() will need. */
static int scan_container(const unsigned char **p, const unsigned char *end, unsigned depth,
                          int64_t count, bool is_map, struct proto_shape *n)
{
    if (count < 0)
        return GLLM_EMALFORMED;
    if (count > PROTO_MAX_CONTAINER || depth >= PROTO_MAX_DEPTH)
        return GLLM_ELIMIT;
    if (is_map)
        n->kvs += (size_t)count;
    else
        n->objs += (size_t)count;
    for (int64_t i = 0; i < count; i++) {
        int r;
        if (is_map && (r = scan_object(p, end, depth + 1, true, n)) < 0)
            return r;
        if ((r = scan_object(p, end, depth + 1, false, n)) < 0)
            return r;
    }
    return 0;
}

static int scan_string(const unsigned char **p, const unsigned char *end, int64_t len)
{
    if (len < 0)
        return GLLM_EMALFORMED;
    if (len > PROTO_MAX_STRING)
        return GLLM_ELIMIT;
    return skip(p, end, (uint64_t)len);
}

/* Map keys must be strings: every field name in the protocol is one. */
static int scan_object(const unsigned char **p, const unsigned char *end, unsigned depth,
                       bool want_string, struct proto_shape *n)
{
    if (*p >= end)
        return GLLM_EMALFORMED;
    unsigned char t = *(*p)++;
    bool is_string = (t >= 0xa0 && t <= 0xbf) || (t >= 0xd9 && t <= 0xdb);
    if (want_string && !is_string)
        return GLLM_EMALFORMED;

    if (t <= 0x7f || t >= 0xe0)                 /* fixints */
        return 0;
    if (t <= 0x8f)
        return scan_container(p, end, depth, t & 0x0f, true, n);
    if (t <= 0x9f)
        return scan_container(p, end, depth, t & 0x0f, false, n);
    if (t <= 0xbf)
        return scan_string(p, end, t & 0x1f);
    switch (t) {
    case 0xc0: case 0xc2: case 0xc3:           /* nil, false, true */
        return 0;
    case 0xc4: return scan_string(p, end, read_len(p, end, 1)); /* bin: same bound */
    case 0xc5: return scan_string(p, end, read_len(p, end, 2));
    case 0xc6: return scan_string(p, end, read_len(p, end, 4));
    case 0xc7: case 0xc8: case 0xc9: {         /* ext: nothing in the protocol uses it */
        int64_t len = read_len(p, end, t == 0xc7 ? 1 : t == 0xc8 ? 2 : 4);
        if (len < 0)
            return GLLM_EMALFORMED;
        return len > PROTO_MAX_STRING ? GLLM_ELIMIT : skip(p, end, (uint64_t)len + 1);
    }
    case 0xca: return skip(p, end, 4);
    case 0xcb: return skip(p, end, 8);
    case 0xcc: case 0xd0: return skip(p, end, 1);
    case 0xcd: case 0xd1: return skip(p, end, 2);
    case 0xce: case 0xd2: return skip(p, end, 4);
    case 0xcf: case 0xd3: return skip(p, end, 8);
    case 0xd4: return skip(p, end, 2);
    case 0xd5: return skip(p, end, 3);
    case 0xd6: return skip(p, end, 5);
    case 0xd7: return skip(p, end, 9);
    case 0xd8: return skip(p, end, 17);
    case 0xd9: return scan_string(p, end, read_len(p, end, 1));
    case 0xda: return scan_string(p, end, read_len(p, end, 2));
    case 0xdb: return scan_string(p, end, read_len(p, end, 4));
    case 0xdc: return scan_container(p, end, depth, read_len(p, end, 2), false, n);
    case 0xdd: return scan_container(p, end, depth, read_len(p, end, 4), false, n);
    case 0xde: return scan_container(p, end, depth, read_len(p, end, 2), true, n);
    case 0xdf: return scan_container(p, end, depth, read_len(p, end, 4), true, n);
    default:   return GLLM_EMALFORMED;        /* 0xc1 is never used */
    }
}

int proto_scan_shape(const void *buf, size_t len, struct proto_shape *n)
{
    *n = (struct proto_shape){0, 0};
    if (len > PROTO_MAX_MESSAGE)
        return GLLM_ETOOBIG;
    if (len == 0)
        return GLLM_EMALFORMED;
    const unsigned char *p = buf, *end = p + len;
    int r = scan_object(&p, end, 0, false, n);
    if (r < 0)
        return r;
    return p == end ? 0 : GLLM_EMALFORMED;   /* one message per packet, nothing after it */
}

int proto_scan(const void *buf, size_t len)
{
    struct proto_shape n;
    return proto_scan_shape(buf, len, &n);
}
