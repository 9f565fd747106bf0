/* The keys every job method shares (its device, its wait and signal counters) and dtensor_copy. */
#include <string.h>

#include "proto.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static bool as_u64(const msgpack_object *o, uint64_t *out)
{
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *out = o->via.u64;
        return true;
    }
    return false;
}

static bool present(const msgpack_object *o)
{
    return o && o->type != MSGPACK_OBJECT_NIL;
}

/* {"arena": id, "offset": o, "value": v[, "timeout_ms": ms]}, o absent or nil: unset. A wait
 * may name its timeout; a signal's timeout_ms is not read (it never had one). */
static int decode_counter(const msgpack_object *o, bool wait, struct proto_counter *out,
                          const char **why)
{
    *out = (struct proto_counter){0};
    if (!present(o))
        return 0;
    enum { F_ARENA, F_OFFSET, F_VALUE, F_TIMEOUT, F_COUNT };
    static const struct proto_key keys[F_COUNT] = {
        PROTO_KEY("arena"), PROTO_KEY("offset"), PROTO_KEY("value"), PROTO_KEY("timeout_ms"),
    };
    const msgpack_object *f[F_COUNT];
    proto_map_find(o, keys, F_COUNT, f);
    uint64_t arena, offset, value, ms = 0;
    if (o->type != MSGPACK_OBJECT_MAP || !as_u64(f[F_ARENA], &arena) ||
        !as_u64(f[F_OFFSET], &offset) || !as_u64(f[F_VALUE], &value) || value > UINT32_MAX) {
        *why = wait ? "'wait' wants {arena, offset, value (uint32)}"
                    : "'signal' wants {arena, offset, value (uint32)}";
        return GLLM_EPARAM;
    }
    /* An id no arena can have: what the daemon answers for an id it does not know. */
    if (arena > UINT32_MAX) {
        *why = wait ? "wait: no arena of this connection has that id (ids are 32-bit)"
                    : "signal: no arena of this connection has that id (ids are 32-bit)";
        return GLLM_ENOARENA;
    }
    if (wait && f[F_TIMEOUT] &&
        (!as_u64(f[F_TIMEOUT], &ms) || ms == 0 || ms > PROTO_WAIT_TIMEOUT_MS_MAX)) {
        *why = "wait: timeout_ms must be 1 to " STR(PROTO_WAIT_TIMEOUT_MS_MAX);
        return GLLM_EPARAM;
    }
    *out = (struct proto_counter){.set = true, .arena = (uint32_t)arena, .offset = offset,
                                  .value = (uint32_t)value, .timeout_ms = (uint32_t)ms};
    return 0;
}

enum { J_DEVICE, J_WAIT, J_SIGNAL, J_COUNT };
static const struct proto_key job_keys[J_COUNT] = {
    PROTO_KEY("device"), PROTO_KEY("wait"), PROTO_KEY("signal"),
};

int proto_decode_job(const msgpack_object *params, bool takes_device, struct proto_job *j,
                     const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    const msgpack_object *f[J_COUNT];
    proto_map_find(params, job_keys, J_COUNT, f);
    struct proto_job v = {0};
    int r;
    /* Present means a uint, nil included: as "device" was always read. */
    if (takes_device && f[J_DEVICE] && !as_u64(f[J_DEVICE], &v.device)) {
        *why = "'device' must be a uint, the index of one of hello's devices";
        return GLLM_EPARAM;
    }
    if ((r = decode_counter(f[J_WAIT], true, &v.wait, why)) < 0 ||
        (r = decode_counter(f[J_SIGNAL], false, &v.signal, why)) < 0)
        return r;
    *j = v;
    return 0;
}

int proto_decode_job_signal(const msgpack_object *params, uint64_t *device,
                            struct proto_counter *signal)
{
    const msgpack_object *f[J_COUNT];
    proto_map_find(params, job_keys, J_COUNT, f);
    const char *why;
    struct proto_counter s;
    int r = decode_counter(f[J_SIGNAL], false, &s, &why);
    if (r < 0)
        return r;
    uint64_t dev = 0;
    if (!as_u64(f[J_DEVICE], &dev))
        dev = 0;
    *device = dev;
    *signal = s;
    return 0;
}

int proto_decode_copy(const msgpack_object *params, struct proto_copy *c)
{
    struct proto_job j;
    int r = proto_decode_job(params, false, &j, NULL);
    if (r < 0)
        return r;
    enum { F_DTENSOR, F_OFFSET, F_ARENA, F_ARENA_OFFSET, F_BYTES, F_TO_DEVICE, F_COUNT };
    static const struct proto_key keys[F_COUNT] = {
        PROTO_KEY("dtensor"), PROTO_KEY("offset"), PROTO_KEY("arena"),
        PROTO_KEY("arena_offset"), PROTO_KEY("bytes"), PROTO_KEY("to_device"),
    };
    const msgpack_object *f[F_COUNT];
    proto_map_find(params, keys, F_COUNT, f);
    struct proto_copy v = {.wait = j.wait, .signal = j.signal};
    uint64_t dtensor, arena;
    /* Ids past 32 bits are a PARAM here (not NOARENA as in a tensor): as they always were. */
    if (!as_u64(f[F_DTENSOR], &dtensor) || dtensor > UINT32_MAX ||
        !as_u64(f[F_ARENA], &arena) || arena > UINT32_MAX || !as_u64(f[F_BYTES], &v.bytes) ||
        (f[F_OFFSET] && !as_u64(f[F_OFFSET], &v.offset)) ||
        (f[F_ARENA_OFFSET] && !as_u64(f[F_ARENA_OFFSET], &v.arena_offset)) ||
        !f[F_TO_DEVICE] || f[F_TO_DEVICE]->type != MSGPACK_OBJECT_BOOLEAN)
        return GLLM_EPARAM;
    v.dtensor = (uint32_t)dtensor;
    v.arena = (uint32_t)arena;
    v.to_device = f[F_TO_DEVICE]->via.boolean;
    *c = v;
    return 0;
}
