/* The information methods: hello (what this daemon offers) and status (what it is doing). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "info.h"
#include "device_health.h"
#include "methods.h"

/* The devices as hello and status show them. */
static void fill_devices(struct server *srv, struct proto_device *out, uint32_t *n)
{
    *n = (uint32_t)srv->ndevices;
    for (int i = 0; i < srv->ndevices; i++) {
        gllm_device_info d;
        if (backend_device_info(srv->be, i, &d) < 0)
            memset(&d, 0, sizeof d);
        struct health_info h;
        health_get(i, &h);
        struct proto_device *o = &out[i];
        if (d.cc_major)
            snprintf(o->compute_capability, sizeof o->compute_capability, "%d.%d", d.cc_major,
                     d.cc_minor);
        snprintf(o->image, sizeof o->image, "%s", d.image);
        o->index = (uint64_t)i;
        snprintf(o->name, sizeof o->name, "%s", d.name);
        snprintf(o->kind, sizeof o->kind, "%s", d.kind);
        o->memory_bytes = d.memory_bytes;
        o->threads = (uint64_t)d.threads;
        /* The device's own process (device_processes = on, docs/hardening.md); 0: gllmd's. */
        o->process_pid = d.process_pid > 0 ? (uint64_t)d.process_pid : 0;
        /* Resets after faults (docs/hardening.md): how many, and the last one's why. */
        o->resets = h.resets;
        o->reset_failed = h.failed;
        snprintf(o->last_reset_reason, sizeof o->last_reset_reason, "%s", h.last_reason);
        o->last_reset_ns = h.last_ns;
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
    struct proto_hello h = {
        .version = GLLM_PROTOCOL_VERSION,
        .ring_bytes = GLLM_RING_BYTES,      /* the ring layout this daemon reads */
        /* What attention takes: i32 is for page tables only. */
        .dtypes = srv->caps.dtypes &
                  (1u << GLLM_DTYPE_F32 | 1u << GLLM_DTYPE_F16 | 1u << GLLM_DTYPE_BF16),
        .max_head_dim = srv->caps.max_head_dim,
        .limits = {
            .max_message_bytes = PROTO_MAX_MESSAGE,
            .max_device_bytes = srv->limits.max_device_bytes,
            .max_device_bytes_total = srv->limits.max_device_bytes_total,
            .max_inflight_total = srv->limits.max_inflight_total,
            .max_elements = srv->limits.max_elements,
            .max_arenas = srv->limits.max_arenas,
            .max_arena_bytes = srv->limits.max_arena_bytes,
            .max_inflight = srv->limits.max_inflight,
            .max_rank = GLLM_MAX_RANK,
            .max_page_entries = srv->caps.max_page_entries,
        },
    };
    /* Jobs take "wait" and "signal" counters in arenas; a wait's may be in shared device
     * memory where the backend has queues. */
    h.has_sync = backend_has(srv->be, BACKEND_FEAT_SYNC);
    h.sync = (struct proto_hello_sync){
        .timeout_ms = srv->limits.wait_timeout_ms, .timeout_ms_max = GLLM_WAIT_TIMEOUT_MS_MAX,
        .device_waits = backend_has_queues(srv->be) && share != NULL};
    /* Memory this daemon can share with clients: dtensor_create export, dtensor_import. */
    h.has_share = share != NULL;
    if (share) {
        snprintf(h.share.kind, sizeof h.share.kind, "%s", share);
        h.share.granularity = backend_share_size(srv->be, 1);
    }
    snprintf(h.daemon, sizeof h.daemon, "%s", GLLM_VERSION);
    snprintf(h.backend, sizeof h.backend, "%s", backend_name(srv->be));
    fill_devices(srv, h.devices, &h.n_devices);
    /* What each mode computes: the variant fields and head dims jobs are checked against. */
    h.has_capabilities = true;
    h.capabilities = (struct proto_hello_capabilities){srv->caps.modes[GLLM_MODE_DENSE],
                                                       srv->caps.modes[GLLM_MODE_DECODE],
                                                       srv->caps.modes[GLLM_MODE_PREFILL]};
    proto_pack_table(rpc_reply_begin(c), &proto_hello_table, &h);
    rpc_reply_end(c);
}

void method_status(struct rpc_call *c, const struct proto_msg *m)
{
    (void)m;
    struct server *srv = c->ch->srv;
    const struct server_stats *st = &srv->stats;
    struct proto_status *r = calloc(1, sizeof *r);   /* 25 KiB, histograms mostly */
    if (!r) {
        rpc_reply_error(c, -ENOMEM, "status: out of memory");
        return;
    }
    snprintf(r->daemon, sizeof r->daemon, "%s", GLLM_VERSION);
    r->uptime_s = (double)(now_ns() - srv->start_ns) / 1e9;
    snprintf(r->backend, sizeof r->backend, "%s", backend_name(srv->be));
    fill_devices(srv, r->devices, &r->n_devices);
    r->clients = st->clients;
    r->jobs_done = st->jobs_done;
    r->jobs_failed = st->jobs_failed;
    r->jobs_inflight = st->jobs_inflight;
    r->bytes_mapped = st->regions.bytes_mapped;
    r->arenas = st->regions.arenas;
    r->device_bytes = st->regions.device_bytes;
    r->dtensors = st->regions.dtensors;
    r->exported_bytes = st->regions.exported_bytes;
    r->imported_bytes = st->regions.imported_bytes;
    r->draining = srv->draining;
    r->requests = st->requests;
    r->errors = st->errors;
    r->limit_violations = st->limit_violations;
    r->ring_requests = st->ring_requests;
    r->has_metrics = true;
    metrics_fill(&r->metrics, &st->jobs);
    r->has_device_memory = true;       /* bytes in use and in all, per device */
    r->n_device_memory = (uint32_t)srv->ndevices;
    for (int i = 0; i < srv->ndevices; i++)
        if (health_lock(i)) {          /* zeros while the device is being reset */
            backend_memory_info(srv->be, i, &r->device_memory[i].used,
                                &r->device_memory[i].total);
            health_unlock(i);
        }
    /* Who holds what: at most 64 entries so the reply stays within one packet. */
    for (const struct channel *ch = srv->channels;
         ch && r->n_client_list < GLLM_MAX_LISTED_CLIENTS; ch = ch->next) {
        const struct session *s = &ch->session;
        r->client_list[r->n_client_list++] = (struct proto_status_client){
            .pid = (uint64_t)ch->pid, .uid = (uint64_t)ch->uid, .gid = (uint64_t)ch->gid,
            .arenas = s->narenas, .arena_bytes = s->arena_bytes, .device_bytes = s->device_bytes,
            .exported_bytes = s->exported_bytes, .imported_bytes = s->imported_bytes,
            .inflight = atomic_load(&s->inflight)};
        snprintf(r->client_list[r->n_client_list - 1].comm, sizeof r->client_list[0].comm, "%s",
                 ch->comm);
    }
    proto_pack_table(rpc_reply_begin(c), &proto_status_table, r);
    rpc_reply_end(c);
    free(r);
}
