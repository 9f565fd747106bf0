/* The administrators' calls: drain, reload, the connections, and closing one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "client_internal.h"

int gllm_admin_drain(gllm_client *c, uint64_t *inflight)
{
    uint64_t id;
    msgpack_pack_map(rpc_begin(c, "drain", &id), 0);
    int r = rpc_call(c, id, -1);
    if (r < 0)
        return r;
    struct proto_admin_drain w;
    r = proto_read_table(c->calls.call_msg.result, &proto_admin_drain_table, &w);
    rpc_end(c);
    if (r == 0 && inflight)
        *inflight = w.inflight;
    return r;
}

int gllm_admin_reload(gllm_client *c)
{
    uint64_t id;
    msgpack_pack_map(rpc_begin(c, "reload", &id), 0);
    int r = rpc_call(c, id, -1);
    if (r == 0)
        rpc_end(c);
    return r;
}

static void client_from(const struct proto_admin_client *e, gllm_admin_client *ci)
{
    *ci = (gllm_admin_client){
        .size = sizeof *ci, .id = e->id, .pid = (int)e->pid, .uid = (uint32_t)e->uid,
        .gid = (uint32_t)e->gid, .admin = e->admin, .connected_s = e->connected_s,
        .inflight = (uint32_t)e->inflight, .arenas = (uint32_t)e->arenas,
        .arena_bytes = e->arena_bytes, .device_bytes = e->device_bytes};
    snprintf(ci->comm, sizeof ci->comm, "%s", e->comm);
    for (uint32_t i = 0; i < e->n_jobs && ci->nmethods < GLLM_METRICS_MAX_METHODS; i++)
        if (e->jobs[i].method[0]) {
            gllm_method_jobs *j = &ci->jobs[ci->nmethods++];
            snprintf(j->method, sizeof j->method, "%s", e->jobs[i].method);
            j->ok = e->jobs[i].ok;
            j->failed = e->jobs[i].failed;
        }
}

int gllm_admin_clients(gllm_client *c, uint64_t which, gllm_admin_client *out, int max)
{
    if (max < 0 || (max > 0 && (!out || out_check(out) < 0)))
        return -EINVAL;
    const size_t stride = max > 0 ? out[0].size : 0;
    struct proto_admin_clients *w = malloc(sizeof *w);   /* 40 KiB: not on a caller's stack */
    if (!w)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "clients", &id);
    msgpack_pack_map(pk, which ? 1 : 0);
    if (which)
        proto_pack_kv_u64(pk, "id", which);
    int r = rpc_call(c, id, -1);
    if (r < 0) {
        free(w);
        return r;
    }
    r = proto_read_table(c->calls.call_msg.result, &proto_admin_clients_table, w);
    rpc_end(c);
    int n = 0;
    for (uint32_t i = 0; r == 0 && i < w->n_clients && n < max; i++, n++) {
        gllm_admin_client ci;
        client_from(&w->clients[i], &ci);
        void *dst = (char *)out + (size_t)n * stride;
        memcpy(dst, &stride, sizeof stride);
        out_fill(dst, &ci, sizeof ci);
    }
    free(w);
    return r < 0 ? r : n;
}

int gllm_admin_disconnect(gllm_client *c, uint64_t which)
{
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "client_disconnect", &id);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "id", which);
    int r = rpc_call(c, id, -1);
    if (r == 0)
        rpc_end(c);
    return r;
}
