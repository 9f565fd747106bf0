/* A struct packed as a map, and a map read into a struct, by the struct's key table (info.h). */
#include <string.h>

#include "info.h"

#define AT(obj, off, T) ((T *)(void *)((char *)(obj) + (off)))
#define AT_C(obj, off, T) ((const T *)(const void *)((const char *)(obj) + (off)))

static bool field_on(const struct proto_field *f, const void *obj)
{
    return f->has == 0 || *AT_C(obj, f->has - 1, bool);
}

/* The dtypes a mask holds, as their wire names, in gllm_dtype order. */
static void pack_dtypes(msgpack_packer *pk, uint32_t mask)
{
    static const gllm_dtype all[] = {GLLM_DTYPE_F32, GLLM_DTYPE_F16, GLLM_DTYPE_BF16,
                                     GLLM_DTYPE_I32};
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        n += !!(mask & (1u << all[i]));
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (mask & (1u << all[i]))
            proto_pack_str(pk, proto_dtype_name(all[i]));
}

/* The names of the bits set in mask, in bit order. */
static void pack_names(msgpack_packer *pk, const char *const *names, uint32_t count, uint32_t mask)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < count && i < 32; i++)
        n += !!(mask & (1u << i));
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < count && i < 32; i++)
        if (mask & (1u << i))
            proto_pack_str(pk, names[i]);
}

static uint32_t read_names(const msgpack_object *o, const char *const *names, uint32_t count)
{
    uint32_t mask = 0;
    for (uint32_t k = 0; k < o->via.array.size; k++) {
        const msgpack_object *e = &o->via.array.ptr[k];
        if (e->type != MSGPACK_OBJECT_STR)
            continue;
        for (uint32_t i = 0; i < count && i < 32; i++)
            if (e->via.str.size == strlen(names[i]) && e->via.str.size &&
                memcmp(e->via.str.ptr, names[i], e->via.str.size) == 0)
                mask |= 1u << i;
    }
    return mask;
}

void proto_pack_table(msgpack_packer *pk, const struct proto_table *t, const void *obj)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->nfields; i++)
        n += field_on(&t->fields[i], obj);
    msgpack_pack_map(pk, n);
    for (uint32_t i = 0; i < t->nfields; i++) {
        const struct proto_field *f = &t->fields[i];
        if (!field_on(f, obj))
            continue;
        proto_pack_str(pk, f->key);
        const bool array = f->type == PROTO_FT_MAPS || f->type == PROTO_FT_U64S ||
                           f->type == PROTO_FT_F64S;
        const uint32_t count = array ? *AT_C(obj, f->n, uint32_t) : 0;
        const uint32_t items = count < f->cap ? count : f->cap;
        switch (f->type) {
        case PROTO_FT_U64: msgpack_pack_uint64(pk, *AT_C(obj, f->off, uint64_t)); break;
        case PROTO_FT_F64: msgpack_pack_double(pk, *AT_C(obj, f->off, double)); break;
        case PROTO_FT_BOOL:
            if (*AT_C(obj, f->off, bool))
                msgpack_pack_true(pk);
            else
                msgpack_pack_false(pk);
            break;
        case PROTO_FT_STR: {
            /* Packed as far as its NUL, or its buffer's end for one that has none. */
            char s[PROTO_MAX_STRING + 1];
            const char *v = AT_C(obj, f->off, char);
            const size_t len = strnlen(v, f->cap < sizeof s ? f->cap : sizeof s - 1);
            memcpy(s, v, len);
            s[len] = '\0';
            proto_pack_str(pk, s);
            break;
        }
        case PROTO_FT_DTYPES: pack_dtypes(pk, *AT_C(obj, f->off, uint32_t)); break;
        case PROTO_FT_NAMES: pack_names(pk, f->names, f->cap, *AT_C(obj, f->off, uint32_t)); break;
        case PROTO_FT_MAP: proto_pack_table(pk, f->sub, AT_C(obj, f->off, char)); break;
        case PROTO_FT_MAPS:
            msgpack_pack_array(pk, items);
            for (uint32_t k = 0; k < items; k++)
                proto_pack_table(pk, f->sub, AT_C(obj, f->off + k * f->item, char));
            break;
        case PROTO_FT_U64S:
            msgpack_pack_array(pk, items);
            for (uint32_t k = 0; k < items; k++)
                msgpack_pack_uint64(pk, AT_C(obj, f->off, uint64_t)[k]);
            break;
        case PROTO_FT_F64S:
            msgpack_pack_array(pk, items);
            for (uint32_t k = 0; k < items; k++)
                msgpack_pack_double(pk, AT_C(obj, f->off, double)[k]);
            break;
        }
    }
}

static bool read_f64(const msgpack_object *o, double *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return true;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return true;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return true;
    default: return false;
    }
}

static uint32_t read_dtypes(const msgpack_object *o)
{
    uint32_t mask = 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        char name[8];
        gllm_dtype d;
        if (e->type != MSGPACK_OBJECT_STR || e->via.str.size >= sizeof name)
            continue;
        if (e->via.str.size)          /* an empty string's pointer is NULL */
            memcpy(name, e->via.str.ptr, e->via.str.size);
        name[e->via.str.size] = '\0';
        if (proto_dtype_parse(name, &d) == 0)
            mask |= 1u << d;
    }
    return mask;
}

static int read_map(const msgpack_object *map, const struct proto_table *t, void *obj);

/* One value o for f into obj: true when it was of f's type. */
static bool read_field(const msgpack_object *o, const struct proto_field *f, void *obj)
{
    const bool array = o->type == MSGPACK_OBJECT_ARRAY;
    const uint32_t items = array ? (o->via.array.size < f->cap ? o->via.array.size : f->cap) : 0;
    switch (f->type) {
    case PROTO_FT_U64:
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return false;
        *AT(obj, f->off, uint64_t) = o->via.u64;
        return true;
    case PROTO_FT_F64: return read_f64(o, AT(obj, f->off, double));
    case PROTO_FT_BOOL:
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return false;
        *AT(obj, f->off, bool) = o->via.boolean;
        return true;
    case PROTO_FT_STR: {
        if (o->type != MSGPACK_OBJECT_STR || f->cap == 0)
            return false;
        const size_t n = o->via.str.size < f->cap - 1 ? o->via.str.size : f->cap - 1;
        char *s = AT(obj, f->off, char);
        if (n)
            memcpy(s, o->via.str.ptr, n);
        s[n] = '\0';
        return true;
    }
    case PROTO_FT_DTYPES:
        if (!array)
            return false;
        *AT(obj, f->off, uint32_t) = read_dtypes(o);
        return true;
    case PROTO_FT_NAMES:
        if (!array)
            return false;
        *AT(obj, f->off, uint32_t) = read_names(o, f->names, f->cap);
        return true;
    case PROTO_FT_MAP:
        if (o->type != MSGPACK_OBJECT_MAP)
            return false;
        read_map(o, f->sub, AT(obj, f->off, char));
        return true;
    case PROTO_FT_MAPS:
        if (!array)
            return false;
        /* An item that is no map reads as a zeroed struct, and counts. */
        for (uint32_t k = 0; k < items; k++)
            read_map(&o->via.array.ptr[k], f->sub, AT(obj, f->off + k * f->item, char));
        *AT(obj, f->n, uint32_t) = items;
        return true;
    case PROTO_FT_U64S:
        if (!array)
            return false;
        for (uint32_t k = 0; k < o->via.array.size; k++)
            if (o->via.array.ptr[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return false;
        for (uint32_t k = 0; k < items; k++)
            AT(obj, f->off, uint64_t)[k] = o->via.array.ptr[k].via.u64;
        *AT(obj, f->n, uint32_t) = items;
        return true;
    case PROTO_FT_F64S: {
        if (!array)
            return false;
        double v;
        for (uint32_t k = 0; k < o->via.array.size; k++)
            if (!read_f64(&o->via.array.ptr[k], &v))
                return false;
        for (uint32_t k = 0; k < items; k++)
            read_f64(&o->via.array.ptr[k], &AT(obj, f->off, double)[k]);
        *AT(obj, f->n, uint32_t) = items;
        return true;
    }
    }
    return false;
}

static int read_map(const msgpack_object *map, const struct proto_table *t, void *obj)
{
    uint64_t seen = 0, ok = 0;        /* tables have at most 64 keys */
    if (map && map->type == MSGPACK_OBJECT_MAP)
        for (uint32_t k = 0; k < map->via.map.size; k++) {
            const msgpack_object *key = &map->via.map.ptr[k].key;
            if (key->type != MSGPACK_OBJECT_STR)
                continue;
            for (uint32_t i = 0; i < t->nfields && i < 64; i++) {
                const struct proto_field *f = &t->fields[i];
                if (key->via.str.size != f->key_len || (f->key_len &&
                    memcmp(key->via.str.ptr, f->key, f->key_len) != 0))
                    continue;
                /* The first of a key is the one read, as proto_map_get reads it. */
                if (!(seen & (1ull << i))) {
                    seen |= 1ull << i;
                    if (read_field(&map->via.map.ptr[k].val, f, obj)) {
                        ok |= 1ull << i;
                        if (f->has && f->has - 1 != f->off)   /* a bool may be its own flag */
                            *AT(obj, f->has - 1, bool) = true;
                    }
                }
                break;
            }
        }
    for (uint32_t i = 0; i < t->nfields && i < 64; i++)
        if (t->fields[i].required && !(ok & (1ull << i)))
            return GLLM_EMALFORMED;
    return 0;
}

int proto_read_table(const msgpack_object *map, const struct proto_table *t, void *obj)
{
    memset(obj, 0, t->size);
    return read_map(map, t, obj);
}
