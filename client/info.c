/* libgllm-client information: hello's capabilities, limits and devices, and the daemon's status. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "info.h"

/* A device as the public struct has it, from hello's or status's. */
static void device_from(const struct proto_device *d, gllm_device_info *o)
{
    *o = (gllm_device_info){.size = sizeof *o, .index = (int)d->index,
                            .memory_bytes = d->memory_bytes, .threads = (int)d->threads};
    snprintf(o->name, sizeof o->name, "%s", d->name);
    snprintf(o->kind, sizeof o->kind, "%s", d->kind);
    snprintf(o->image, sizeof o->image, "%s", d->image);
    if (sscanf(d->compute_capability, "%d.%d", &o->cc_major, &o->cc_minor) != 2)
        o->cc_major = o->cc_minor = 0;
    /* absent from older daemons: 0 */
    o->process_pid = d->process_pid <= INT32_MAX ? (int)d->process_pid : 0;
}

static void limits_from(const struct proto_hello *h, gllm_limits *l)
{
    const struct proto_hello_limits *w = &h->limits;
    *l = (gllm_limits){
        .size = sizeof *l,
        .max_message_bytes = (uint32_t)w->max_message_bytes,
        .max_arenas = (uint32_t)w->max_arenas,
        .max_arena_bytes = w->max_arena_bytes,
        .max_device_bytes = w->max_device_bytes,
        .max_device_bytes_total = w->max_device_bytes_total,
        .max_inflight = (uint32_t)w->max_inflight,
        .max_inflight_total = (uint32_t)w->max_inflight_total,
        .max_elements = w->max_elements,
        .max_rank = (uint32_t)w->max_rank,
        .max_head_dim = (uint32_t)h->max_head_dim,   /* beside the limits, not inside */
        .max_page_entries = (uint32_t)w->max_page_entries,
    };
}

/* hello's "share": absent when the backend shares no memory. A kind this library does not
 * know reads as none, so the calls that need it fail cleanly with -EOPNOTSUPP. */
static void share_from(const struct proto_hello *w, struct hello_info *h)
{
    h->share = SHARE_NONE;
    if (!w->has_share || w->share.granularity == 0)
        return;
    h->share = memory_share_parse(w->share.kind, strlen(w->share.kind));
    if (h->share == SHARE_NONE)
        return;
    h->device_waits = w->has_sync && w->sync.device_waits;
    snprintf(h->caps.share, sizeof h->caps.share, "%s", w->share.kind);
    h->caps.share_granularity = w->share.granularity;
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
    struct proto_hello w;
    r = proto_read_table(c->calls.call_msg.result, &proto_hello_table, &w);
    rpc_end(c);
    struct hello_info *h = &c->hello;
    gllm_caps *caps = &h->caps;
    *caps = (gllm_caps){.size = sizeof *caps, .protocol_version = (int)w.version,
                        .ndevices = (int)w.n_devices, .dtypes = w.dtypes};
    snprintf(caps->daemon_version, sizeof caps->daemon_version, "%s", w.daemon);
    snprintf(caps->backend, sizeof caps->backend, "%s", w.backend);
    for (uint32_t i = 0; i < w.n_devices; i++)
        device_from(&w.devices[i], &h->devices[i]);
    limits_from(&w, &h->limits);
    variant_from_hello(&w, h);
    if (w.ring_bytes)
        *ring_bytes = w.ring_bytes;
    share_from(&w, h);
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

static void client_list_from(const struct proto_status *w, struct status_list *l)
{
    l->n = (int)w->n_client_list;
    for (uint32_t i = 0; i < w->n_client_list; i++) {
        const struct proto_status_client *e = &w->client_list[i];
        gllm_client_info *ci = &l->entries[i];
        *ci = (gllm_client_info){
            .size = sizeof *ci, .pid = (int)e->pid, .uid = (uint32_t)e->uid,
            .gid = (uint32_t)e->gid, .arenas = (uint32_t)e->arenas,
            .arena_bytes = e->arena_bytes, .device_bytes = e->device_bytes,
            .inflight = (uint32_t)e->inflight, .exported_bytes = e->exported_bytes,
            .imported_bytes = e->imported_bytes};
        snprintf(ci->comm, sizeof ci->comm, "%s", e->comm);
    }
}

int gllm_status_get(gllm_client *c, gllm_status *out)
{
    if (out_check(out) < 0)
        return -EINVAL;
    struct proto_status *w = malloc(sizeof *w);   /* 25 KiB: not on a caller's stack */
    if (!w)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "status", &id);
    msgpack_pack_map(pk, 0);
    int r = rpc_call(c, id, -1);
    if (r < 0) {
        free(w);
        return r;
    }
    /* Devices are hello's (gllm_client_device); the status reply repeats them, and a reply
     * without them still fails. */
    r = proto_read_table(c->calls.call_msg.result, &proto_status_table, w);
    rpc_end(c);
    if (r == 0) {
        gllm_status st = {
            .size = sizeof st, .uptime_s = w->uptime_s, .clients = (uint32_t)w->clients,
            .jobs_done = w->jobs_done, .jobs_failed = w->jobs_failed,
            .jobs_inflight = w->jobs_inflight, .bytes_mapped = w->bytes_mapped,
            .arenas = (uint32_t)w->arenas, .device_bytes = w->device_bytes,
            .dtensors = (uint32_t)w->dtensors, .requests = w->requests,
            .ring_requests = w->ring_requests, .errors = w->errors,
            .limit_violations = w->limit_violations, .nlisted = (int)w->n_client_list,
            .exported_bytes = w->exported_bytes, .imported_bytes = w->imported_bytes};
        snprintf(st.daemon_version, sizeof st.daemon_version, "%s", w->daemon);
        snprintf(st.backend, sizeof st.backend, "%s", w->backend);
        client_list_from(w, &c->listed);
        metrics_from(w, &c->metrics);
        out_fill(out, &st, sizeof st);
    }
    free(w);
    return r;
}

int gllm_status_client(const gllm_client *c, int index, gllm_client_info *out)
{
    if (index < 0 || index >= c->listed.n || out_check(out) < 0)
        return -EINVAL;
    out_fill(out, &c->listed.entries[index], sizeof c->listed.entries[index]);
    return 0;
}
