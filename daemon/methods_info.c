/* The information methods: hello (what this daemon offers) and status (what it is doing). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"
#include "device_health.h"
#include "methods.h"
#include "pool_call.h"
#include "scheduler.h"

static void pack_devices(msgpack_packer *pk, struct server *srv)
{
    proto_pack_str(pk, "devices");
    msgpack_pack_array(pk, (size_t)srv->ndevices);
    for (int i = 0; i < srv->ndevices; i++) {
        gllm_device_info d;
        if (backend_device_info(srv->be, i, &d) < 0)
            memset(&d, 0, sizeof d);
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        struct health_info h;
        health_get(i, &h);
        msgpack_pack_map(pk, 12);
        proto_pack_kv_str(pk, "compute_capability", d.cc_major ? cc : "");
        proto_pack_kv_str(pk, "image", d.image);
        proto_pack_kv_u64(pk, "index", (uint64_t)i);
        proto_pack_kv_str(pk, "name", d.name);
        proto_pack_kv_str(pk, "kind", d.kind);
        proto_pack_kv_u64(pk, "memory_bytes", d.memory_bytes);
        proto_pack_kv_u64(pk, "threads", (uint64_t)d.threads);
        /* The device's own process (device_processes = on, docs/hardening.md); 0: gllmd's. */
        proto_pack_kv_u64(pk, "process_pid", d.process_pid > 0 ? (uint64_t)d.process_pid : 0);
        /* Resets after faults (docs/hardening.md): how many, and the last one's why. */
        proto_pack_kv_u64(pk, "resets", h.resets);
        proto_pack_kv_bool(pk, "reset_failed", h.failed);
        proto_pack_kv_str(pk, "last_reset_reason", h.last_reason);
        proto_pack_kv_u64(pk, "last_reset_ns", h.last_ns);
    }
}

void method_hello(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    uint64_t version = 0;
    if (proto_get_u64(m->params, "version", true, &version) < 0) {
        rpc_reply_error(c, GLLM_EPARAM, "hello: 'version' (uint) required");
        return;
    }
    if (version != GLLM_PROTOCOL_VERSION) {
        rpc_reply_error(c, GLLM_EVERSION,
                        "hello: protocol version %llu not supported (this daemon speaks %d)",
                        (unsigned long long)version, GLLM_PROTOCOL_VERSION);
        return;
    }
    c->ch->hello_done = true;
    const char *share = methods_share_kind(srv->be);
    const bool sync = backend_has(srv->be, BACKEND_FEAT_SYNC);
    msgpack_packer *pk = rpc_reply_begin(c);
    msgpack_pack_map(pk, 8 + (share != NULL) + sync);
    if (sync) {    /* jobs take "wait" and "signal" counters in arenas */
        const bool device_waits = backend_has_queues(srv->be) && share != NULL;
        proto_pack_str(pk, "sync");
        msgpack_pack_map(pk, 2 + device_waits);
        proto_pack_kv_u64(pk, "timeout_ms", srv->limits.wait_timeout_ms);
        proto_pack_kv_u64(pk, "timeout_ms_max", GLLM_WAIT_TIMEOUT_MS_MAX);
        if (device_waits)   /* a wait's counter may be in shared device memory */
            proto_pack_kv_bool(pk, "device_waits", true);
    }
    if (share) {   /* memory this daemon can share with clients: dtensor_create export, import */
        proto_pack_str(pk, "share");
        msgpack_pack_map(pk, 2);
        proto_pack_kv_str(pk, "kind", share);
        proto_pack_kv_u64(pk, "granularity", backend_share_size(srv->be, 1));
    }
    proto_pack_kv_u64(pk, "version", GLLM_PROTOCOL_VERSION);
    proto_pack_kv_u64(pk, "ring_bytes", GLLM_RING_BYTES);   /* the ring layout this daemon reads */
    proto_pack_kv_str(pk, "daemon", GLLM_VERSION);
    proto_pack_kv_str(pk, "backend", backend_name(srv->be));
    pack_devices(pk, srv);
    proto_pack_str(pk, "dtypes");
    int n = 0;
    for (int d = 0; d < 3; d++)
        n += !!(srv->caps.dtypes & (1u << d));
    msgpack_pack_array(pk, (size_t)n);
    for (int d = 0; d < 3; d++)
        if (srv->caps.dtypes & (1u << d))
            proto_pack_str(pk, proto_dtype_name((gllm_dtype)d));
    proto_pack_kv_u64(pk, "max_head_dim", (uint64_t)srv->caps.max_head_dim);
    proto_pack_str(pk, "limits");
    msgpack_pack_map(pk, 10);
    proto_pack_kv_u64(pk, "max_message_bytes", PROTO_MAX_MESSAGE);
    proto_pack_kv_u64(pk, "max_device_bytes", srv->limits.max_device_bytes);
    proto_pack_kv_u64(pk, "max_device_bytes_total", srv->limits.max_device_bytes_total);
    proto_pack_kv_u64(pk, "max_inflight_total", srv->limits.max_inflight_total);
    proto_pack_kv_u64(pk, "max_elements", srv->limits.max_elements);
    proto_pack_kv_u64(pk, "max_arenas", srv->limits.max_arenas);
    proto_pack_kv_u64(pk, "max_arena_bytes", srv->limits.max_arena_bytes);
    proto_pack_kv_u64(pk, "max_inflight", srv->limits.max_inflight);
    proto_pack_kv_u64(pk, "max_rank", GLLM_MAX_RANK);
    proto_pack_kv_u64(pk, "max_page_entries", srv->caps.max_page_entries);
    rpc_reply_end(c);
}

void method_status(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    const struct server_stats *st = &srv->stats;
    msgpack_packer *pk = rpc_reply_begin(c);
    msgpack_pack_map(pk, 22);
    proto_pack_kv_str(pk, "daemon", GLLM_VERSION);
    proto_pack_kv_f64(pk, "uptime_s", (double)(now_ns() - srv->start_ns) / 1e9);
    proto_pack_kv_str(pk, "backend", backend_name(srv->be));
    pack_devices(pk, srv);
    proto_pack_kv_u64(pk, "clients", st->clients);
    proto_pack_kv_u64(pk, "jobs_done", st->jobs_done);
    proto_pack_kv_u64(pk, "jobs_failed", st->jobs_failed);
    proto_pack_kv_u64(pk, "jobs_inflight", st->jobs_inflight);
    proto_pack_kv_u64(pk, "bytes_mapped", st->regions.bytes_mapped);
    proto_pack_kv_u64(pk, "arenas", st->regions.arenas);
    proto_pack_kv_u64(pk, "device_bytes", st->regions.device_bytes);
    proto_pack_kv_u64(pk, "dtensors", st->regions.dtensors);
    proto_pack_kv_u64(pk, "exported_bytes", st->regions.exported_bytes);
    proto_pack_kv_u64(pk, "imported_bytes", st->regions.imported_bytes);
    proto_pack_kv_bool(pk, "draining", srv->draining);
    proto_pack_kv_u64(pk, "requests", st->requests);
    proto_pack_kv_u64(pk, "errors", st->errors);
    proto_pack_kv_u64(pk, "limit_violations", st->limit_violations);
    proto_pack_kv_u64(pk, "ring_requests", st->ring_requests);
    proto_pack_str(pk, "metrics");
    metrics_pack(pk, &st->jobs);
    proto_pack_str(pk, "device_memory");   /* bytes in use and in all, per device */
    msgpack_pack_array(pk, (size_t)srv->ndevices);
    for (int i = 0; i < srv->ndevices; i++) {
        uint64_t used = 0, total = 0;
        if (health_lock(i)) {     /* zeros while the device is being reset */
            backend_memory_info(srv->be, i, &used, &total);
            health_unlock(i);
        }
        msgpack_pack_map(pk, 2);
        proto_pack_kv_u64(pk, "used", used);
        proto_pack_kv_u64(pk, "total", total);
    }
    /* Who holds what: at most 64 entries so the reply stays within one packet. */
    uint32_t n = 0;
    for (const struct channel *ch = srv->channels; ch && n < 64; ch = ch->next)
        n++;
    proto_pack_str(pk, "client_list");
    msgpack_pack_array(pk, n);
    const struct channel *ch = srv->channels;
    for (uint32_t i = 0; i < n; i++, ch = ch->next) {
        const struct session *s = &ch->session;
        msgpack_pack_map(pk, 10);
        proto_pack_kv_u64(pk, "pid", (uint64_t)ch->pid);
        proto_pack_kv_u64(pk, "uid", (uint64_t)ch->uid);
        proto_pack_kv_u64(pk, "gid", (uint64_t)ch->gid);
        proto_pack_kv_str(pk, "comm", ch->comm);
        proto_pack_kv_u64(pk, "arenas", s->narenas);
        proto_pack_kv_u64(pk, "arena_bytes", s->arena_bytes);
        proto_pack_kv_u64(pk, "device_bytes", s->device_bytes);
        proto_pack_kv_u64(pk, "exported_bytes", s->exported_bytes);
        proto_pack_kv_u64(pk, "imported_bytes", s->imported_bytes);
        proto_pack_kv_u64(pk, "inflight", atomic_load(&s->inflight));
    }
    rpc_reply_end(c);
}
