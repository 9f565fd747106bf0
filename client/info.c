/* libgllm-client information: hello's capabilities, limits and devices, and the daemon's status. */
#include <stdint.h>
#include <stdio.h>

#include "client_internal.h"

static void copy_field(const msgpack_object *map, const char *key, char *out, size_t cap)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o || o->type != MSGPACK_OBJECT_STR)
        return;
    size_t n = o->via.str.size < cap - 1 ? o->via.str.size : cap - 1;
    if (n)                         /* an empty string's pointer is NULL */
        memcpy(out, o->via.str.ptr, n);
    out[n] = '\0';
}

static int decode_devices(const msgpack_object *res, gllm_device_info *devs, int *ndev)
{
    const msgpack_object *arr = proto_map_get(res, "devices");
    *ndev = 0;
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY)
        return GLLM_EMALFORMED;
    for (uint32_t i = 0; i < arr->via.array.size && i < GLLM_MAX_DEVICES; i++) {
        const msgpack_object *d = &arr->via.array.ptr[i];
        gllm_device_info *o = &devs[i];
        uint64_t v = 0;
        *o = (gllm_device_info){.size = sizeof *o};
        proto_get_u64(d, "index", false, &v);
        o->index = (int)v;
        copy_field(d, "name", o->name, sizeof o->name);
        copy_field(d, "kind", o->kind, sizeof o->kind);
        copy_field(d, "image", o->image, sizeof o->image);
        char cc[16] = "";
        copy_field(d, "compute_capability", cc, sizeof cc);
        if (sscanf(cc, "%d.%d", &o->cc_major, &o->cc_minor) != 2)
            o->cc_major = o->cc_minor = 0;
        proto_get_u64(d, "memory_bytes", false, &o->memory_bytes);
        v = 0;
        proto_get_u64(d, "threads", false, &v);
        o->threads = (int)v;
        v = 0;
        proto_get_u64(d, "process_pid", false, &v);     /* absent from older daemons: 0 */
        o->process_pid = v <= INT32_MAX ? (int)v : 0;
        (*ndev)++;
    }
    return 0;
}

static void decode_dtypes(const msgpack_object *res, uint32_t *mask)
{
    const msgpack_object *dt = proto_map_get(res, "dtypes");
    for (uint32_t i = 0; dt && dt->type == MSGPACK_OBJECT_ARRAY && i < dt->via.array.size; i++) {
        const msgpack_object *o = &dt->via.array.ptr[i];
        char name[8];
        gllm_dtype d;
        if (o->type == MSGPACK_OBJECT_STR && o->via.str.size < sizeof name) {
            if (o->via.str.size)
                memcpy(name, o->via.str.ptr, o->via.str.size);
            name[o->via.str.size] = '\0';
            if (proto_dtype_parse(name, &d) == 0)
                *mask |= 1u << d;
        }
    }
}

static void decode_limits(const msgpack_object *res, gllm_limits *l)
{
    const msgpack_object *lim = proto_map_get(res, "limits");
    uint64_t x;
    *l = (gllm_limits){.size = sizeof *l};
#define LIMIT_(field) x = 0, proto_get_u64(lim, #field, false, &x), l->field = (__typeof__(l->field))x
    LIMIT_(max_message_bytes);
    LIMIT_(max_arenas);
    LIMIT_(max_arena_bytes);
    LIMIT_(max_device_bytes);
    LIMIT_(max_device_bytes_total);
    LIMIT_(max_inflight);
    LIMIT_(max_inflight_total);
    LIMIT_(max_elements);
    LIMIT_(max_rank);
    LIMIT_(max_page_entries);
#undef LIMIT_
    x = 0;
    proto_get_u64(res, "max_head_dim", false, &x);   /* beside the limits, not inside */
    l->max_head_dim = (uint32_t)x;
}

/* hello's "share": absent when the backend shares no memory. A kind this library does not
 * know reads as none, so the calls that need it fail cleanly with -EOPNOTSUPP. */
static void decode_share(const msgpack_object *res, struct hello_info *h)
{
    const msgpack_object *sh = proto_map_get(res, "share");
    const msgpack_object *kind = sh && sh->type == MSGPACK_OBJECT_MAP ? proto_map_get(sh, "kind")
                                                                      : NULL;
    uint64_t g = 0;
    h->share = SHARE_NONE;
    if (!kind || kind->type != MSGPACK_OBJECT_STR ||
        proto_get_u64(sh, "granularity", true, &g) < 0 || g == 0)
        return;
    h->share = memory_share_parse(kind->via.str.ptr, kind->via.str.size);
    if (h->share == SHARE_NONE)
        return;
    const msgpack_object *sync = proto_map_get(res, "sync");
    const msgpack_object *dw = sync && sync->type == MSGPACK_OBJECT_MAP
                                   ? proto_map_get(sync, "device_waits") : NULL;
    h->device_waits = dw && dw->type == MSGPACK_OBJECT_BOOLEAN && dw->via.boolean;
    copy_field(sh, "kind", h->caps.share, sizeof h->caps.share);
    h->caps.share_granularity = g;
}

int info_hello(gllm_client *c, uint64_t *ring_bytes)
{
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "hello", &id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "version", GLLM_PROTOCOL_VERSION);
    proto_pack_kv_str(pk, "client", "libgllm-client " GLLM_VERSION);
    int r = rpc_call(c, id, -1);
    if (r < 0)
        return r;
    const msgpack_object *res = c->calls.call_msg.result;
    struct hello_info *h = &c->hello;
    gllm_caps *caps = &h->caps;
    uint64_t v = 0;
    *caps = (gllm_caps){.size = sizeof *caps};
    proto_get_u64(res, "version", false, &v);
    caps->protocol_version = (int)v;
    copy_field(res, "daemon", caps->daemon_version, sizeof caps->daemon_version);
    copy_field(res, "backend", caps->backend, sizeof caps->backend);
    r = decode_devices(res, h->devices, &caps->ndevices);
    decode_dtypes(res, &caps->dtypes);
    decode_limits(res, &h->limits);
    variant_decode_hello(res, h);
    proto_get_u64(res, "ring_bytes", false, ring_bytes);
    decode_share(res, h);
    rpc_end(c);
    return r;
}

int gllm_client_caps(const gllm_client *c, gllm_caps *out)
{
    if (out_check(out) < 0)
        return -EINVAL;
    out_fill(out, &c->hello.caps, sizeof c->hello.caps);
    return 0;
}

int gllm_client_limits(const gllm_client *c, gllm_limits *out)
{
    if (out_check(out) < 0)
        return -EINVAL;
    out_fill(out, &c->hello.limits, sizeof c->hello.limits);
    return 0;
}

int gllm_client_device(const gllm_client *c, int index, gllm_device_info *out)
{
    if (index < 0 || index >= c->hello.caps.ndevices || out_check(out) < 0)
        return -EINVAL;
    out_fill(out, &c->hello.devices[index], sizeof c->hello.devices[index]);
    return 0;
}

static void decode_client_list(const msgpack_object *res, struct status_list *l)
{
    const msgpack_object *list = proto_map_get(res, "client_list");
    l->n = 0;
    for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size &&
                        l->n < GLLM_MAX_LISTED_CLIENTS; i++) {
        const msgpack_object *e = &list->via.array.ptr[i];
        gllm_client_info *ci = &l->entries[l->n++];
        *ci = (gllm_client_info){.size = sizeof *ci};
        uint64_t v = 0;
        proto_get_u64(e, "pid", false, &v), ci->pid = (int)v, v = 0;
        proto_get_u64(e, "uid", false, &v), ci->uid = (uint32_t)v, v = 0;
        proto_get_u64(e, "gid", false, &v), ci->gid = (uint32_t)v, v = 0;
        proto_get_u64(e, "arenas", false, &v), ci->arenas = (uint32_t)v, v = 0;
        proto_get_u64(e, "inflight", false, &v), ci->inflight = (uint32_t)v;
        proto_get_u64(e, "arena_bytes", false, &ci->arena_bytes);
        proto_get_u64(e, "device_bytes", false, &ci->device_bytes);
        proto_get_u64(e, "exported_bytes", false, &ci->exported_bytes);
        proto_get_u64(e, "imported_bytes", false, &ci->imported_bytes);
        copy_field(e, "comm", ci->comm, sizeof ci->comm);
    }
}

int gllm_status_get(gllm_client *c, gllm_status *out)
{
    if (out_check(out) < 0)
        return -EINVAL;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "status", &id);
    msgpack_pack_map(pk, 0);
    int r = rpc_call(c, id, -1);
    if (r < 0)
        return r;
    const msgpack_object *res = c->calls.call_msg.result;
    gllm_status st = {.size = sizeof st};
    copy_field(res, "daemon", st.daemon_version, sizeof st.daemon_version);
    copy_field(res, "backend", st.backend, sizeof st.backend);
    proto_get_f64(res, "uptime_s", false, &st.uptime_s);
    uint64_t x = 0;
    proto_get_u64(res, "clients", false, &x);
    st.clients = (uint32_t)x;
    proto_get_u64(res, "jobs_done", false, &st.jobs_done);
    proto_get_u64(res, "jobs_failed", false, &st.jobs_failed);
    proto_get_u64(res, "jobs_inflight", false, &st.jobs_inflight);
    proto_get_u64(res, "bytes_mapped", false, &st.bytes_mapped);
    proto_get_u64(res, "device_bytes", false, &st.device_bytes);
    proto_get_u64(res, "exported_bytes", false, &st.exported_bytes);
    proto_get_u64(res, "imported_bytes", false, &st.imported_bytes);
    x = 0;
    proto_get_u64(res, "dtensors", false, &x);
    st.dtensors = (uint32_t)x;
    proto_get_u64(res, "requests", false, &st.requests);
    proto_get_u64(res, "errors", false, &st.errors);
    proto_get_u64(res, "limit_violations", false, &st.limit_violations);
    proto_get_u64(res, "ring_requests", false, &st.ring_requests);
    x = 0;
    proto_get_u64(res, "arenas", false, &x);
    st.arenas = (uint32_t)x;
    /* Devices are hello's (gllm_client_device); the status reply repeats them, checked here
     * as before so a reply without them still fails. */
    gllm_device_info devices[GLLM_MAX_DEVICES];
    int ndevices;
    r = decode_devices(res, devices, &ndevices);
    struct status_list listed;
    decode_client_list(res, &listed);
    struct status_metrics metrics;
    metrics_decode(res, &metrics);
    rpc_end(c);
    if (r == 0) {
        c->listed = listed;
        c->metrics = metrics;
        st.nlisted = listed.n;
        out_fill(out, &st, sizeof st);
    }
    return r;
}

int gllm_status_client(const gllm_client *c, int index, gllm_client_info *out)
{
    if (index < 0 || index >= c->listed.n || out_check(out) < 0)
        return -EINVAL;
    out_fill(out, &c->listed.entries[index], sizeof c->listed.entries[index]);
    return 0;
}
