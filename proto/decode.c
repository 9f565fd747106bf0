/* Message decoding and typed field access for gllm's msgpack-rpc messages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

void proto_map_find(const msgpack_object *map, const struct proto_key *keys, size_t n,
                    const msgpack_object **found)
{
    for (size_t i = 0; i < n; i++)
        found[i] = NULL;
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t k = 0; k < map->via.map.size; k++) {
        const msgpack_object *key = &map->via.map.ptr[k].key;
        if (key->type != MSGPACK_OBJECT_STR)
            continue;
        for (size_t i = 0; i < n; i++)
            /* msgpack-c's unpacker (the tests' trees) gives an empty string a NULL
             * pointer, which memcmp must not see. */
            if (!found[i] && key->via.str.size == keys[i].len &&
                (keys[i].len == 0 || memcmp(key->via.str.ptr, keys[i].name, keys[i].len) == 0)) {
                found[i] = &map->via.map.ptr[k].val;
                break;
            }
    }
}

static int copy_str(const msgpack_object *o, char *out, size_t cap)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
        return GLLM_EPARAM;
    if (o->via.str.size)          /* an empty string's pointer is NULL */
        memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = '\0';
    if (memchr(out, '\0', o->via.str.size))
        return GLLM_EPARAM;
    return 0;
}

static bool as_u64(const msgpack_object *o, uint64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return true;
    }
    return false;
}

static int decode_error(const msgpack_object *err, struct proto_msg *msg)
{
    /* {code: int, message: str}; anything else is still an error, code unknown. */
    msg->error_code = GLLM_EMALFORMED;
    msg->error_message[0] = '\0';
    if (err->type != MSGPACK_OBJECT_MAP)
        return 0;
    int64_t code;
    if (proto_get_i64(err, "code", true, &code) == 0 && code < 0 && code >= INT32_MIN)
        msg->error_code = (int)code;
    const msgpack_object *m = proto_map_get(err, "message");
    if (m && m->type == MSGPACK_OBJECT_STR) {
        size_t n = m->via.str.size < PROTO_MAX_ERRMSG ? m->via.str.size : PROTO_MAX_ERRMSG;
        if (n)
            memcpy(msg->error_message, m->via.str.ptr, n);
        msg->error_message[n] = '\0';
    }
    return 0;
}

static int decode_envelope(const msgpack_object *root, struct proto_msg *msg, int64_t *id_out)
{
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 3)
        return GLLM_EMALFORMED;
    const msgpack_object *e = root->via.array.ptr;
    uint64_t kind;
    if (!as_u64(&e[0], &kind) || kind > PROTO_NOTIFY)
        return GLLM_EMALFORMED;
    msg->kind = (enum proto_kind)kind;

    if (kind == PROTO_NOTIFY) {
        if (root->via.array.size != 3 || copy_str(&e[1], msg->method, sizeof msg->method) < 0)
            return GLLM_EMALFORMED;
        msg->params = &e[2];
        /* As for requests, an empty array stands for "no params". */
        if (e[2].type == MSGPACK_OBJECT_ARRAY && e[2].via.array.size == 0)
            msg->params = NULL;
        else if (e[2].type != MSGPACK_OBJECT_MAP)
            return GLLM_EPARAM;
        return 0;
    }
    if (root->via.array.size != 4)
        return GLLM_EMALFORMED;
    if (kind == PROTO_RESPONSE && e[1].type == MSGPACK_OBJECT_NIL) {
        /* An error about a request whose id could not be read. */
        msg->id = PROTO_NO_ID;
    } else if (!as_u64(&e[1], &msg->id) || msg->id > INT64_MAX) {
        return GLLM_EMALFORMED;
    } else if (id_out) {
        *id_out = (int64_t)msg->id;
    }
    if (kind == PROTO_REQUEST) {
        if (e[2].type != MSGPACK_OBJECT_STR)
            return GLLM_EMALFORMED;
        if (copy_str(&e[2], msg->method, sizeof msg->method) < 0)
            return GLLM_EMETHOD;
        msg->params = &e[3];
        /* Params are a map (fields by name); an empty array is tolerated as "no params". */
        if (e[3].type == MSGPACK_OBJECT_ARRAY && e[3].via.array.size == 0)
            msg->params = NULL;
        else if (e[3].type != MSGPACK_OBJECT_MAP)
            return GLLM_EPARAM;
        return 0;
    }
    msg->result = &e[3];
    if (e[2].type == MSGPACK_OBJECT_NIL) {
        msg->error_code = 0;
        return 0;
    }
    return decode_error(&e[2], msg);
}

/* Reads one msgpack integer at p that is not negative, in any of its encodings (the full
 * decoder takes a signed encoding of a non-negative value too); bytes used, or 0. */
static size_t peek_uint(const uint8_t *p, size_t len, uint64_t *v)
{
    if (len == 0)
        return 0;
    if (p[0] <= 0x7f) {
        *v = p[0];
        return 1;
    }
    static const uint8_t width[4] = {1, 2, 4, 8};   /* 0xcc uint8 .. 0xcf uint64, 0xd0 int8 .. */
    bool is_signed = p[0] >= 0xd0 && p[0] <= 0xd3;
    if (!is_signed && (p[0] < 0xcc || p[0] > 0xcf))
        return 0;
    size_t n = width[p[0] - (is_signed ? 0xd0 : 0xcc)];
    if (len < 1 + n || (is_signed && (p[1] & 0x80)))
        return 0;
    uint64_t x = 0;
    for (size_t i = 1; i <= n; i++)
        x = x << 8 | p[i];
    *v = x;
    return 1 + n;
}

int proto_peek_id(const void *buf, size_t len, uint64_t *id)
{
    const uint8_t *p = buf;
    size_t at;
    /* A four-element array: fixarray, or array 16/32 with the count spelled long. */
    if (len >= 1 && p[0] == 0x94)
        at = 1;
    else if (len >= 3 && p[0] == 0xdc && p[1] == 0 && p[2] == 4)
        at = 3;
    else if (len >= 5 && p[0] == 0xdd && p[1] == 0 && p[2] == 0 && p[3] == 0 && p[4] == 4)
        at = 5;
    else
        return GLLM_EMALFORMED;
    uint64_t kind, v;
    size_t n = peek_uint(p + at, len - at, &kind);
    if (n == 0 || kind != PROTO_REQUEST)
        return GLLM_EMALFORMED;
    at += n;
    if (peek_uint(p + at, len - at, &v) == 0 || v > INT64_MAX)
        return GLLM_EMALFORMED;
    *id = v;
    return 0;
}

int proto_decode(const void *buf, size_t len, struct proto_msg *msg, int64_t *id_out)
{
    memset(msg, 0, sizeof *msg);
    int r = proto_tree_build(buf, len, &msg->root, &msg->nodes);
    if (r < 0) {
        /* A request broken past its id (a limit, a bad key, trailing bytes) is still
         * answered under its id. */
        uint64_t id;
        if (id_out && proto_peek_id(buf, len, &id) == 0)
            *id_out = (int64_t)id;
        return r;
    }
    r = decode_envelope(&msg->root, msg, id_out);
    if (r < 0) {
        proto_msg_free(msg);
        return r;
    }
    return 0;
}

void proto_msg_free(struct proto_msg *msg)
{
    if (msg) {
        free(msg->nodes);
        msg->nodes = NULL;
    }
}

const msgpack_object *proto_map_get(const msgpack_object *map, const char *key)
{
    const struct proto_key k = {key, (uint32_t)strlen(key)};
    const msgpack_object *found;
    proto_map_find(map, &k, 1, &found);
    return found;
}

int proto_get_u64(const msgpack_object *map, const char *key, bool required, uint64_t *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return required ? GLLM_EPARAM : 0;
    return as_u64(o, out) ? 0 : GLLM_EPARAM;
}

int proto_get_i64(const msgpack_object *map, const char *key, bool required, int64_t *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return required ? GLLM_EPARAM : 0;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return 0;
    }
    return GLLM_EPARAM;
}

/* A number of any msgpack kind, as a double. */
static int object_f64(const msgpack_object *o, double *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return 0;
    default: return GLLM_EPARAM;
    }
}

int proto_get_f64(const msgpack_object *map, const char *key, bool required, double *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return required ? GLLM_EPARAM : 0;
    return object_f64(o, out);
}

int proto_get_bool(const msgpack_object *map, const char *key, bool required, bool *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return required ? GLLM_EPARAM : 0;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return GLLM_EPARAM;
    *out = o->via.boolean;
    return 0;
}

int proto_get_str(const msgpack_object *map, const char *key, bool required, char *out, size_t cap)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return required ? GLLM_EPARAM : 0;
    return copy_str(o, out, cap);
}

static const char *const dtype_names[] = {
    [GLLM_DTYPE_F32] = "f32", [GLLM_DTYPE_F16] = "f16", [GLLM_DTYPE_BF16] = "bf16",
    [GLLM_DTYPE_I32] = "i32",
};

int proto_dtype_parse(const char *name, gllm_dtype *out)
{
    for (int i = 0; i < (int)(sizeof dtype_names / sizeof *dtype_names); i++)
        if (strcmp(name, dtype_names[i]) == 0) {
            *out = (gllm_dtype)i;
            return 0;
        }
    return GLLM_EDTYPE;
}

size_t proto_dtype_size(gllm_dtype dtype)
{
    switch (dtype) {
    case GLLM_DTYPE_F32:
    case GLLM_DTYPE_I32: return 4;
    case GLLM_DTYPE_F16:
    case GLLM_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *proto_dtype_name(gllm_dtype dtype)
{
    return (unsigned)dtype < sizeof dtype_names / sizeof *dtype_names ? dtype_names[dtype] : "?";
}

static int decode_dims(const msgpack_object *arr, uint32_t rank, int64_t *dims)
{
    if (arr->type != MSGPACK_OBJECT_ARRAY || arr->via.array.size != rank)
        return GLLM_EPARAM;
    for (uint32_t i = 0; i < rank; i++) {
        uint64_t v;
        if (!as_u64(&arr->via.array.ptr[i], &v) || v > INT64_MAX)
            return GLLM_EPARAM;
        dims[i] = (int64_t)v;
    }
    return 0;
}

int proto_decode_tensor(const msgpack_object *obj, struct proto_tensor *t)
{
    if (!obj || obj->type != MSGPACK_OBJECT_MAP)
        return GLLM_EPARAM;
    enum { F_DTENSOR, F_ARENA, F_OFFSET, F_DTYPE, F_SHAPE, F_STRIDES, F_COUNT };
    static const struct proto_key keys[F_COUNT] = {
        PROTO_KEY("dtensor"), PROTO_KEY("arena"), PROTO_KEY("offset"),
        PROTO_KEY("dtype"),   PROTO_KEY("shape"), PROTO_KEY("strides"),
    };
    const msgpack_object *f[F_COUNT];
    proto_map_find(obj, keys, F_COUNT, f);
    struct proto_tensor v = {0};
    uint64_t arena = 0;
    char dtype[8];
    int r;
    v.device = f[F_DTENSOR] != NULL;
    if (v.device && f[F_ARENA])
        return GLLM_EPARAM;              /* one region, not two */
    const msgpack_object *region = v.device ? f[F_DTENSOR] : f[F_ARENA];
    if (!region || !f[F_OFFSET] || !f[F_DTYPE] || !as_u64(region, &arena) ||
        !as_u64(f[F_OFFSET], &v.offset))
        return GLLM_EPARAM;
    if ((r = copy_str(f[F_DTYPE], dtype, sizeof dtype)) < 0)
        return r;
    if (arena > UINT32_MAX)
        return GLLM_ENOARENA;
    v.arena = (uint32_t)arena;
    if ((r = proto_dtype_parse(dtype, &v.dtype)) < 0)
        return r;
    const msgpack_object *shape = f[F_SHAPE];
    if (!shape || shape->type != MSGPACK_OBJECT_ARRAY)
        return GLLM_EPARAM;
    if (shape->via.array.size > GLLM_MAX_RANK)
        return GLLM_ELIMIT;
    v.rank = shape->via.array.size;
    if ((r = decode_dims(shape, v.rank, v.shape)) < 0)
        return r;
    const msgpack_object *strides = f[F_STRIDES];
    if (strides && strides->type != MSGPACK_OBJECT_NIL) {
        if ((r = decode_dims(strides, v.rank, v.strides)) < 0)
            return r;
    } else {
        proto_tensor_contiguous(&v);
    }
    *t = v;
    return 0;
}

static int decode_scale(const msgpack_object *params, bool *has, double *scale)
{
    const msgpack_object *o = proto_map_get(params, "scale");
    if (!o || o->type == MSGPACK_OBJECT_NIL)
        return 0;
    int r = object_f64(o, scale);
    if (r < 0)
        return r;
    if (!isfinite(*scale))
        return GLLM_EPARAM;
    *has = true;
    return 0;
}

int proto_decode_attention(const msgpack_object *params, struct proto_attention *a)
{
    struct proto_attention v = {0};
    struct proto_job j;
    int r;
    if ((r = proto_decode_job(params, true, &j, NULL)) < 0)
        return r;
    v.device = j.device;
    v.wait = j.wait;
    v.signal = j.signal;
    if ((r = proto_decode_tensor(proto_map_get(params, "q"), &v.q)) < 0 ||
        (r = proto_decode_tensor(proto_map_get(params, "k"), &v.k)) < 0 ||
        (r = proto_decode_tensor(proto_map_get(params, "v"), &v.v)) < 0 ||
        (r = proto_decode_tensor(proto_map_get(params, "out"), &v.out)) < 0)
        return r;
    const msgpack_object *lse = proto_map_get(params, "lse");
    if (lse && lse->type != MSGPACK_OBJECT_NIL) {
        if ((r = proto_decode_tensor(lse, &v.lse)) < 0)
            return r;
        v.has_lse = true;
    }
    if ((r = proto_get_bool(params, "causal", false, &v.causal)) < 0)
        return r;
    if ((r = decode_scale(params, &v.has_scale, &v.scale)) < 0)
        return r;
    if ((r = proto_get_u64(params, "repeat", false, &v.repeat)) < 0)    /* range: the job's */
        return r;
    if ((r = proto_decode_variant(params, &v.variant)) < 0)
        return r;
    *a = v;
    return 0;
}

int proto_decode_paged(const msgpack_object *params, enum proto_paged_op op, struct proto_paged *p)
{
    if (!params || params->type != MSGPACK_OBJECT_MAP)
        return GLLM_EPARAM;
    struct proto_job j;
    int r = proto_decode_job(params, true, &j, NULL);
    if (r < 0)
        return r;
    struct proto_paged v = {.op = op, .device = j.device, .wait = j.wait, .signal = j.signal};
    enum { NFIELDS = 11 };
    static const struct proto_key keys[NFIELDS] = {
        PROTO_KEY("k_cache"),   PROTO_KEY("v_cache"), PROTO_KEY("kv_indptr"),
        PROTO_KEY("kv_indices"), PROTO_KEY("kv_last_page_len"), PROTO_KEY("q"),
        PROTO_KEY("out"),       PROTO_KEY("qo_indptr"), PROTO_KEY("k"),
        PROTO_KEY("v"),         PROTO_KEY("append_indptr"),
    };
    struct proto_tensor *const dst[NFIELDS] = {
        &v.k_cache, &v.v_cache, &v.kv_indptr, &v.kv_indices, &v.kv_last_page_len, &v.q, &v.out,
        &v.qo_indptr, &v.k, &v.v, &v.append_indptr,
    };
    const bool needed[NFIELDS] = {
        true, true, true, true, true, op != PROTO_KV_APPEND, op != PROTO_KV_APPEND,
        op == PROTO_PREFILL, op == PROTO_KV_APPEND, op == PROTO_KV_APPEND, op == PROTO_KV_APPEND,
    };
    const msgpack_object *f[NFIELDS];
    proto_map_find(params, keys, NFIELDS, f);
    for (size_t i = 0; i < NFIELDS; i++) {
        if (!needed[i]) {
            if (f[i] && f[i]->type != MSGPACK_OBJECT_NIL)
                return GLLM_EPARAM;      /* a field this operation does not take */
            continue;
        }
        if ((r = proto_decode_tensor(f[i], dst[i])) < 0)
            return r;
    }
    if (op != PROTO_KV_APPEND && (r = decode_scale(params, &v.has_scale, &v.scale)) < 0)
        return r;
    if ((r = proto_decode_variant(params, &v.variant)) < 0)
        return r;
    if (op == PROTO_KV_APPEND && proto_variant_keys(&v.variant) > 0)
        return GLLM_EPARAM;              /* an append has no attention to vary */
    *p = v;
    return 0;
}

void proto_tensor_contiguous(struct proto_tensor *t)
{
    int64_t s = 1;
    for (int i = (int)t->rank - 1; i >= 0; i--) {
        t->strides[i] = s;
        /* Saturate instead of overflowing: proto_tensor_span rejects such shapes. */
        if (t->shape[i] > 0 && s > INT64_MAX / t->shape[i])
            s = INT64_MAX;
        else
            s *= t->shape[i] > 0 ? t->shape[i] : 1;
    }
}

int proto_tensor_span(const struct proto_tensor *t, uint64_t *first, uint64_t *end)
{
    size_t esize = proto_dtype_size(t->dtype);
    if (esize == 0)
        return GLLM_EDTYPE;
    uint64_t last = 0; /* element offset of the last element */
    for (uint32_t i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0 || t->strides[i] < 0)
            return GLLM_EPARAM;
        if (t->shape[i] == 0) {
            *first = *end = t->offset;
            return 0;
        }
        uint64_t step;
        if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), (uint64_t)t->strides[i], &step) ||
            __builtin_add_overflow(last, step, &last))
            return GLLM_EOVERFLOW;
    }
    uint64_t bytes;
    if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, esize, &bytes) ||
        __builtin_add_overflow(t->offset, bytes, end))
        return GLLM_EOVERFLOW;
    *first = t->offset;
    return 0;
}
