/* Request handlers: hello, status, arenas, device tensors, attention and the paged KV cache;
 * and what a submitted job tells its channel (job_ops) until it is settled. */
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

/* How long a job's "wait" may hold it by default, and at most (a request's timeout_ms). */

/* The wire name of the kind of memory the backend shares, or NULL when it shares none. */
static const char *share_kind_name(const struct backend *be)
{
    if (backend_share_size(be, 1) == 0)
        return NULL;
    switch (backend_caps(be)->share_kind) {
    case BACKEND_SHARE_MEMFD: return "memfd";
    case BACKEND_SHARE_CUDA_VMM: return "cuda_vmm_fd";
    default: return NULL;
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
    const char *share = share_kind_name(srv->be);
    const bool sync = backend_has(srv->be, BACKEND_FEAT_SYNC);
    msgpack_packer *pk = rpc_reply_begin(c);
    msgpack_pack_map(pk, 9 + (share != NULL) + sync);
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
    proto_pack_str(pk, "capabilities");     /* variants and head dims per mode */
    proto_pack_capabilities(pk, srv->caps.modes);
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

/* An arena being registered: its mapping (and pinning) runs on libuv's thread pool, since it
 * takes time in proportion to its bytes (seconds for tens of GiB on a GPU's host) that the
 * loop must not spend waiting while it serves every other client; the reply comes after. */
struct arena_reg {
    struct pool_call pc;
    struct arena *a;
    uint64_t size;
    int fd;                       /* the request's, kept until the device processes have it */
    int mapped;                   /* backend_host_map's answer */
    bool pinned;
};

static void arena_reg_run(struct pool_call *pc)
{
    struct arena_reg *g = (struct arena_reg *)pc;
    struct backend *be = pc->ch->srv->be;
    if (backend_registers_host(be))
        arena_populate(g->a, g->fd);   /* here, not in the device process's control request */
    g->mapped = backend_host_map(be, g->a->base, g->size, g->fd);
    if (g->mapped == 0 || g->mapped == -ENOTSUP)
        g->pinned = backend_host_register(be, g->a->base, g->size) == 0;
}

static void arena_reg_answer(struct pool_call *pc, struct rpc_call *c)
{
    struct arena_reg *g = (struct arena_reg *)pc;
    struct server *srv = c->ch->srv;
    struct session *s = &c->ch->session;
    struct arena *a = g->a;
    close(g->fd);
    s->pending_arenas--;
    s->pending_arena_bytes -= g->size;
    if (g->mapped == 0)
        a->mapped_by = srv->be;
    if (g->pinned)
        a->pinned_by = srv->be;
    a->reaper = &srv->arena_reaper;   /* its unpinning, too, off the loop */
    if (g->mapped < 0 && g->mapped != -ENOTSUP) {
        arena_unref(a);
        rpc_reply_error(c, g->mapped, "arena_register: the device process cannot map it (%s)",
                        gllm_strerror(g->mapped));
    } else if (c->ch->closed) {
        arena_unref(a);           /* its session went meanwhile */
    } else if (session_region_add(s, a) < 0) {
        arena_unref(a);
        rpc_reply_error(c, GLLM_EQUOTA, "arena_register: arena table full");
    } else {
        msgpack_packer *pk = rpc_reply_begin(c);
        msgpack_pack_map(pk, 2);
        proto_pack_kv_u64(pk, "arena", a->id);
        proto_pack_kv_u64(pk, "size", g->size);
        rpc_reply_end(c);
    }
    free(g);
}

/* An arena's or a device tensor's teardown on the thread pool (arena_reaper): unpinning and
 * unmapping take time in proportion to the bytes, and the device process's mapping lock or
 * control channel may be held by another arena's registration meanwhile. */
struct arena_reap {
    uv_work_t work;
    struct server *srv;
    struct arena *a;
};

static void arena_reap_work(uv_work_t *w)
{
    arena_teardown(((struct arena_reap *)w->data)->a);
}

static void arena_reap_done(uv_work_t *w, int status)
{
    (void)status;
    struct arena_reap *r = w->data;
    r->srv->controls_inflight--;
    free(r);
}

void methods_reap_arena(void *ctx, struct arena *a)
{
    struct server *srv = ctx;
    struct arena_reap *r = malloc(sizeof *r);
    if (r) {
        *r = (struct arena_reap){.srv = srv, .a = a};
        r->work.data = r;
        if (uv_queue_work(srv->loop, &r->work, arena_reap_work, arena_reap_done) == 0) {
            srv->controls_inflight++;
            return;
        }
        free(r);
    }
    arena_teardown(a);            /* no pool: here, as before */
}

void method_arena_register(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    struct session *s = &c->ch->session;
    uint64_t size = 0;
    if (c->nfds != 1) {
        rpc_reply_error(c, GLLM_ENOFD, "arena_register: needs exactly one fd, got %d", c->nfds);
        return;
    }
    if (proto_get_u64(m->params, "size", true, &size) < 0) {
        rpc_reply_error(c, GLLM_EPARAM, "arena_register: 'size' (uint) required");
        return;
    }
    /* Arenas still being registered count against the limits as registered ones do. */
    if (s->narenas + s->pending_arenas >= srv->limits.max_arenas) {
        rpc_reply_error(c, GLLM_EQUOTA, "arena_register: session has %u arenas (limit)",
                        s->narenas + s->pending_arenas);
        return;
    }
    if (!session_may_add_arena(s, &srv->limits, size)) {
        rpc_reply_error(c, GLLM_EQUOTA,
                        "arena_register: %llu more bytes would pass the session limit %llu",
                        (unsigned long long)size, (unsigned long long)srv->limits.max_arena_bytes);
        return;
    }
    struct arena *a;
    int r = arena_map(c->fds[0], size, &a);
    if (r < 0) {
        rpc_reply_error(c, r, "arena_register: %s", gllm_strerror(r));
        return;
    }
    struct arena_reg *g = calloc(1, sizeof *g);
    if (!g) {
        arena_unref(a);
        rpc_reply_error(c, -ENOMEM, "arena_register: out of memory");
        return;
    }
    *g = (struct arena_reg){.pc = {.run = arena_reg_run, .answer = arena_reg_answer}, .a = a,
                            .size = size, .fd = c->fds[0]};
    if ((r = pool_call_start(c, &g->pc)) < 0) {
        free(g);
        arena_unref(a);
        rpc_reply_error(c, GLLM_EBACKEND, "arena_register: %s", uv_strerror(r));
        return;
    }
    c->fds[0] = -1;               /* the registration's now */
    s->pending_arenas++;
    s->pending_arena_bytes += size;
}

/* The connection's rings (proto/ring.h): one file per connection, for its whole life. */
void method_ring(struct rpc_call *c, const struct proto_msg *m)
{
    (void)m;
    struct conn *conn = c->ch->conn;
    if (c->nfds != 1) {
        rpc_reply_error(c, GLLM_ENOFD, "ring: needs exactly one fd, got %d", c->nfds);
        return;
    }
    if (conn_has_ring(conn)) {
        rpc_reply_error(c, GLLM_EQUOTA, "ring: the session has one already");
        return;
    }
    int r = conn_attach_ring(conn, c->fds[0], server_busy_polling(c->ch->srv));
    if (r < 0) {
        rpc_reply_error(c, r, "ring: %s (a sealed, zeroed memfd of %llu bytes)",
                        gllm_strerror(r), (unsigned long long)GLLM_RING_BYTES);
        return;
    }
    msgpack_packer *pk = rpc_reply_begin(c);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "bytes", GLLM_RING_BYTES);
    rpc_reply_end(c);
}

void method_arena_release(struct rpc_call *c, const struct proto_msg *m)
{
    uint64_t which = 0;
    if (proto_get_u64(m->params, "arena", true, &which) < 0) {
        rpc_reply_error(c, GLLM_EPARAM, "arena_release: 'arena' (uint) required");
        return;
    }
    /* A device tensor's id is refused here: those go with dtensor_free. */
    struct arena *a = session_region_take(&c->ch->session, which, false);
    if (!a) {
        rpc_reply_error(c, GLLM_ENOARENA, "arena_release: no arena %llu",
                        (unsigned long long)which);
        return;
    }
    arena_unref(a);  /* jobs still using it keep it mapped until they finish */
    rpc_reply_empty(c);
}

/* A finished job's success reply: its timings. */
static void pack_job_result(struct proto_buf *b, const struct job *job)
{
    proto_buf_init(b);
    proto_pack_result(&b->pk, job->req_id);
    uint64_t job_ns = job->t_end - job->t_start;
    msgpack_pack_map(&b->pk, 6);
    proto_pack_kv_u64(&b->pk, "kernel_ns", job->timing.kernel_ns ? job->timing.kernel_ns : job_ns);
    proto_pack_kv_u64(&b->pk, "accept_ns", job->t_submit - job->t_read);
    proto_pack_kv_u64(&b->pk, "queue_ns", job->t_start - job->t_submit);
    proto_pack_kv_u64(&b->pk, "job_ns", job_ns);
    proto_pack_kv_u64(&b->pk, "copy_ns", job->timing.copy_ns);
    proto_pack_kv_u64(&b->pk, "copy_bytes", job->timing.copy_bytes);
}

/* Worker thread: a job of a closed channel, or one queued past the drain deadline, is not
 * run. Both flags are reached through the cookie. */
static int job_skip(const struct job *job)
{
    const struct channel *ch = job->cookie;
    if (conn_gone(ch->conn))
        return GLLM_EDISCONNECTED;
    if (atomic_load_explicit(&ch->srv->abort_jobs, memory_order_acquire))
        return GLLM_ESHUTDOWN;
    return 0;
}

/* Worker thread. The job no longer counts against the limits: a client that has its reply
 * may send the next job before the loop settles this one. A success reply goes out from
 * here when the connection takes it at once: the hand-off to the loop and its wake-up would
 * add several microseconds to every job. Errors and a full socket are left to settle. */
static void job_finished(struct job *job, struct proto_buf *scratch)
{
    struct channel *ch = job->cookie;
    session_job_finished(&ch->session);
    atomic_fetch_sub_explicit(&ch->srv->stats.jobs_inflight, 1, memory_order_relaxed);
    if (job->status != 0)
        return;
    pack_job_result(scratch, job);
    job->replied = conn_send_fast(ch->conn, scratch->data, scratch->len);
}

/* Loop thread, at the scheduler's settle point. */
static void job_settle(struct job *job)
{
    struct channel *ch = job->cookie;
    struct server *srv = ch->srv;
    if (job->refused)
        ;                        /* counted as the error reply it got */
    else if (job->status == 0)
        srv->stats.jobs_done++;
    else
        srv->stats.jobs_failed++;
    uint64_t kernel = job->timing.kernel_ns, total = job->t_end - job->t_read;
    if (!job->refused)
        metrics_job(&srv->stats.jobs, (enum metrics_method)job->method, job->status == 0,
                    job->t_start - job->t_submit, kernel, total > kernel ? total - kernel : 0);
    if (!ch->closed && !job->replied) {
        if (job->status < 0 && job->why[0]) {
            channel_reply_error(ch, (int64_t)job->req_id, job->status, "%s", job->why);
        } else if (job->status < 0) {
            channel_reply_error(ch, (int64_t)job->req_id, job->status, "attention: %s",
                                gllm_strerror(job->status));
        } else {
            struct proto_buf b;
            pack_job_result(&b, job);
            channel_send(ch, b.data, b.len);
        }
    }
    job_release_arenas(job);
    channel_unref(ch);
    free(job);
    server_busy_poll(srv);
}

static const struct job_ops channel_job_ops = {job_skip, job_finished, job_settle};

/* Queues a prepared job on its device's worker; a job naming another device's tensor is
 * refused here, for every kind of job. */
/* One of a job's counters, {"arena": id, "offset": o, "value": v}: a 32-bit slot in one of
 * the connection's arenas, held by the job; a wait's may also be in memory shared with the
 * device (exported or imported) on a backend with queues, where only the device reads it
 * (docs/PROTOCOL.md). 0 and the slot, or a code and err. */
static int sync_counter(struct rpc_call *c, struct job *job, const msgpack_object *o,
                        const char *key, _Atomic uint32_t **slot, uint32_t *value, char *err,
                        size_t errlen)
{
    uint64_t id = 0, off = 0, v = 0;
    if (o->type != MSGPACK_OBJECT_MAP || proto_get_u64(o, "arena", true, &id) < 0 ||
        proto_get_u64(o, "offset", true, &off) < 0 || proto_get_u64(o, "value", true, &v) < 0 ||
        v > UINT32_MAX) {
        snprintf(err, errlen, "'%s' wants {arena, offset, value (uint32)}", key);
        return GLLM_EPARAM;
    }
    struct arena *a = id <= UINT32_MAX ? arena_table_find(&c->ch->session.regions, (uint32_t)id)
                                       : NULL;
    const bool on_device = a && a->device && a->share != ARENA_OWN &&
                           strcmp(key, "wait") == 0 && backend_has_queues(c->ch->srv->be);
    if (!a || (a->device && !on_device)) {
        snprintf(err, errlen, "%s: no arena %llu in this connection (counters live in arenas%s)",
                 key, (unsigned long long)id,
                 strcmp(key, "wait") == 0 && backend_has_queues(c->ch->srv->be)
                     ? " or, for a wait, in shared device memory" : "");
        return GLLM_ENOARENA;
    }
    if (off % 4 != 0 || off > a->size - 4 || a->size < 4) {
        snprintf(err, errlen, "%s: offset %llu is not a 4-byte slot inside arena %u's %llu bytes",
                 key, (unsigned long long)off, a->id, (unsigned long long)a->size);
        return GLLM_EBOUNDS;
    }
    /* The device writes a signal into the arena: it must be mapped for the GPU. */
    if (slot && strcmp(key, "signal") == 0 && !a->pinned_by &&
        backend_registers_host(c->ch->srv->be)) {
        snprintf(err, errlen, "signal: arena %u is not registered with the device", a->id);
        return GLLM_EPARAM;
    }
    if (job->narenas >= JOB_MAX_ARENAS) {
        snprintf(err, errlen, "%s: the job names too many regions", key);
        return GLLM_ELIMIT;
    }
    job->arenas[job->narenas++] = arena_ref(a);
    *slot = (_Atomic uint32_t *)(void *)((char *)a->base + off);
    *value = (uint32_t)v;
    return 0;
}

/* A job's optional "wait" (with "timeout_ms", default the limit wait_timeout_ms) and "signal". */
static int take_sync(struct rpc_call *c, const struct proto_msg *m, struct job *job, char *err,
                     size_t errlen)
{
    const msgpack_object *wait = m->params ? proto_map_get(m->params, "wait") : NULL;
    const msgpack_object *signal = m->params ? proto_map_get(m->params, "signal") : NULL;
    if ((wait && wait->type == MSGPACK_OBJECT_NIL) || !wait)
        wait = NULL;
    if ((signal && signal->type == MSGPACK_OBJECT_NIL) || !signal)
        signal = NULL;
    if (!wait && !signal)
        return 0;
    if (!backend_has(c->ch->srv->be, BACKEND_FEAT_SYNC)) {
        snprintf(err, errlen, "wait/signal: the %s backend cannot order jobs with counters",
                 backend_name(c->ch->srv->be));
        return -EOPNOTSUPP;
    }
    int r;
    if (wait) {
        _Atomic uint32_t *slot;
        uint64_t ms = c->ch->srv->limits.wait_timeout_ms;
        if ((r = sync_counter(c, job, wait, "wait", &slot, &job->wait_value, err, errlen)) < 0)
            return r;
        if (proto_get_u64(wait, "timeout_ms", false, &ms) < 0 || ms == 0 ||
            ms > GLLM_WAIT_TIMEOUT_MS_MAX) {
            snprintf(err, errlen, "wait: timeout_ms must be 1 to %d", GLLM_WAIT_TIMEOUT_MS_MAX);
            return GLLM_EPARAM;
        }
        job->wait = slot;
        job->wait_deadline = now_ns() + ms * 1000000ull;
        const struct arena *held = job->arenas[job->narenas - 1];   /* sync_counter's */
        job->wait_on_device = held->device;
        job->wait_mapped = held->device || held->pinned_by ||
                           !backend_registers_host(c->ch->srv->be);
    }
    if (signal) {
        _Atomic uint32_t *slot;
        if ((r = sync_counter(c, job, signal, "signal", &slot, &job->sync.signal_value, err,
                              errlen)) < 0)
            return r;
        job->sync.signal = (void *)slot;
        job->sync.signal_host = true;
        switch (job->kind) {     /* the backend writes it after the job's last operation */
        case JOB_ATTENTION: job->args.sync = &job->sync; break;
        case JOB_COPY: job->copy.sync = &job->sync; break;
        case JOB_PAGED: job->paged.sync = &job->sync; break;
        }
    }
    return 0;
}

/* Queues job on dev's lane of the connection: it counts as in flight from now. */
static void enqueue(struct rpc_call *c, struct job *job, int dev)
{
    struct channel *ch = c->ch;
    job->req_id = c->id;
    job->dev = dev;
    job->t_read = c->t_read;
    job->ops = &channel_job_ops;
    job->cookie = channel_ref(ch);
    session_job_started(&ch->session);
    ch->srv->stats.jobs_inflight++;
    sched_submit(ch->srv->sched, &ch->session.lanes[dev], job);
}

void method_job_refused(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    const msgpack_object *signal = m->params ? proto_map_get(m->params, "signal") : NULL;
    /* BUSY and SHUTDOWN refuse for want of room: queueing anything would defeat them, so
     * those leave the signal to the client (docs/PROTOCOL.md). */
    if (!signal || signal->type == MSGPACK_OBJECT_NIL || c->refused == GLLM_EBUSY ||
        c->refused == GLLM_ESHUTDOWN || !backend_has(srv->be, BACKEND_FEAT_SYNC))
        return;
    /* Signal-only jobs count as jobs: a client cannot queue more than max_inflight of them
     * behind a job that waits. */
    if (!session_may_submit(&c->ch->session, &srv->limits) || !server_may_submit(srv))
        return;
    uint64_t dev = 0;
    if (proto_get_u64(m->params, "device", false, &dev) < 0 || dev >= (uint64_t)srv->ndevices)
        dev = 0;
    struct job *job = calloc(1, sizeof *job);
    if (!job)
        return;
    char err[PROTO_MAX_ERRMSG];
    _Atomic uint32_t *slot;
    if (sync_counter(c, job, signal, "signal", &slot, &job->sync.signal_value, err,
                     sizeof err) < 0) {
        job_release_arenas(job);   /* the signal itself was bad: nothing to write */
        free(job);
        return;
    }
    job->sync.signal = (void *)slot;
    job->sync.signal_host = true;  /* signals live in arenas (sync_counter) */
    job->refused = c->refused;
    job->replied = true;           /* the refusal was the reply */
    job->method = (uint8_t)metrics_method_of(m->method);
    enqueue(c, job, (int)dev);
}

static void submit(struct rpc_call *c, const struct proto_msg *m, struct job *job, int dev,
                   const char *method)
{
    char err[PROTO_MAX_ERRMSG];
    int r = take_sync(c, m, job, err, sizeof err);
    if (r == 0)
        r = job_check_device(job, dev, err, sizeof err);
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    job->method = (uint8_t)metrics_method_of(method);
    enqueue(c, job, dev);
}

/* Room for one more job, or an error reply and false. Finished jobs stopped counting on
 * their worker (job_finished): nothing is settled from here. */
static bool admit(struct rpc_call *c, const char *method)
{
    struct server *srv = c->ch->srv;
    const struct session *s = &c->ch->session;
    if (srv->draining) {
        rpc_reply_error(c, GLLM_ESHUTDOWN, "%s: daemon is shutting down", method);
        return false;
    }
    if (!session_may_submit(s, &srv->limits)) {
        rpc_reply_error(c, GLLM_EBUSY, "%s: %u jobs in flight on this connection (limit)",
                        method, (unsigned)s->inflight);
        return false;
    }
    if (!server_may_submit(srv)) {
        rpc_reply_error(c, GLLM_EBUSY, "%s: %llu jobs in flight in all (limit)", method,
                        (unsigned long long)srv->stats.jobs_inflight);
        return false;
    }
    return true;
}

static bool get_device(struct rpc_call *c, const struct proto_msg *m, const char *method,
                       uint64_t *dev)
{
    const struct server *srv = c->ch->srv;
    *dev = 0;
    if (proto_get_u64(m->params, "device", false, dev) < 0 || *dev >= (uint64_t)srv->ndevices) {
        rpc_reply_error(c, GLLM_EPARAM, "%s: 'device' must be below %d", method, srv->ndevices);
        return false;
    }
    return true;
}

/* The quota check both kinds of device tensor pass; false: answered with QUOTA. */
static bool device_quota(struct rpc_call *c, const char *method, uint64_t bytes)
{
    const struct limits *l = &c->ch->srv->limits;
    if (session_may_add_device(&c->ch->session, l, bytes))
        return true;
    rpc_reply_error(c, GLLM_EQUOTA,
                    "%s: %llu more bytes would pass the device-memory limit "
                    "(%llu per connection, %llu in all)", method, (unsigned long long)bytes,
                    (unsigned long long)l->max_device_bytes,
                    (unsigned long long)l->max_device_bytes_total);
    return false;
}

/* Adds a new device tensor to the session and answers {dtensor, bytes[, export]}, with fd
 * (>= 0: an export for the client) sent alongside; takes a and fd in every case. */
static void reply_dtensor(struct rpc_call *c, const char *method, struct arena *a, int fd,
                          const char *export_kind)
{
    int r = session_region_add(&c->ch->session, a);
    if (r < 0) {
        arena_unref(a);
        if (fd >= 0)
            close(fd);
        rpc_reply_error(c, GLLM_EQUOTA, "%s: the connection's table of regions is full", method);
        return;
    }
    msgpack_packer *pk = rpc_reply_begin(c);
    msgpack_pack_map(pk, export_kind ? 3 : 2);
    proto_pack_kv_u64(pk, "dtensor", a->id);
    proto_pack_kv_u64(pk, "bytes", a->size);
    if (export_kind)
        proto_pack_kv_str(pk, "export", export_kind);
    rpc_reply_end_fd(c, fd);
}

/* A device tensor being made or imported: on the thread pool, since the device's process may
 * be busy for seconds with another client's arena registration (its control channel is one
 * at a time). Its bytes count against the quotas meanwhile. */
struct dtensor_make {
    struct pool_call pc;
    const char *method;
    const char *kind;             /* an export's kind ("memfd", ...); NULL: not exported */
    int dev;
    uint64_t bytes;
    int fd_in;                    /* an import's: the client's memory */
    int fd_out;                   /* an export's: for the client */
    struct arena *a;
    int r;
    char why[160];
};

static void dtensor_make_run(struct pool_call *pc)
{
    struct dtensor_make *t = (struct dtensor_make *)pc;
    struct backend *be = pc->ch->srv->be;
    if (t->fd_in >= 0)
        t->r = arena_import(be, t->dev, t->fd_in, t->bytes, &t->a, t->why, sizeof t->why);
    else if (t->kind)
        t->r = arena_new_exported(be, t->dev, t->bytes, &t->a, &t->fd_out);
    else
        t->r = arena_new_device(be, t->dev, t->bytes, &t->a);
}

static void dtensor_make_answer(struct pool_call *pc, struct rpc_call *c)
{
    struct dtensor_make *t = (struct dtensor_make *)pc;
    if (t->fd_in >= 0)
        close(t->fd_in);
    session_device_pending(&c->ch->session, t->bytes, -1);
    if (t->r < 0) {
        rpc_reply_error(c, t->r, "%s: %s", t->method, t->why[0] ? t->why : gllm_strerror(t->r));
    } else {
        t->a->reaper = &c->ch->srv->arena_reaper;   /* freed off the loop too */
        if (c->ch->closed) {
            arena_unref(t->a);    /* its session went meanwhile */
            if (t->fd_out >= 0)
                close(t->fd_out);
        } else {
            reply_dtensor(c, t->method, t->a, t->fd_out, t->kind);
        }
    }
    free(t);
}

/* Starts t (filled but for its pool_call) for c, or answers c with why not; takes t. */
static void dtensor_make_start(struct rpc_call *c, struct dtensor_make *t)
{
    t->pc = (struct pool_call){.run = dtensor_make_run, .answer = dtensor_make_answer};
    t->fd_out = -1;
    int r = pool_call_start(c, &t->pc);
    if (r < 0) {
        rpc_reply_error(c, GLLM_EBACKEND, "%s: %s", t->method, uv_strerror(r));
        free(t);
        return;
    }
    if (t->fd_in >= 0)
        c->fds[0] = -1;           /* the import's now */
    session_device_pending(&c->ch->session, t->bytes, 1);
}

void method_dtensor_create(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    uint64_t bytes = 0, dev;
    bool export = false;
    if (proto_get_u64(m->params, "bytes", true, &bytes) < 0 || bytes == 0 ||
        proto_get_bool(m->params, "export", false, &export) < 0) {
        rpc_reply_error(c, GLLM_EPARAM,
                        "dtensor_create: 'bytes' (uint > 0) required, 'export' a bool");
        return;
    }
    if (!get_device(c, m, "dtensor_create", &dev))
        return;
    const char *kind = NULL;
    if (export) {
        /* Exports are whole granules, so both sides map the same size. */
        size_t rounded = bytes <= SIZE_MAX ? backend_share_size(srv->be, (size_t)bytes) : 0;
        if (!(kind = share_kind_name(srv->be)) || rounded == 0) {
            rpc_reply_error(c, kind ? GLLM_EPARAM : -EOPNOTSUPP,
                            "dtensor_create: %s", kind ? "'bytes' too large to export"
                                                       : "this backend shares no memory");
            return;
        }
        bytes = rounded;
    }
    if (!device_quota(c, "dtensor_create", bytes))
        return;
    struct dtensor_make *t = calloc(1, sizeof *t);
    if (!t) {
        rpc_reply_error(c, -ENOMEM, "dtensor_create: out of memory");
        return;
    }
    *t = (struct dtensor_make){.method = "dtensor_create", .kind = kind, .dev = (int)dev,
                               .bytes = bytes, .fd_in = -1};
    dtensor_make_start(c, t);
}

void method_dtensor_import(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    uint64_t bytes = 0, dev;
    if (c->nfds != 1) {
        rpc_reply_error(c, GLLM_ENOFD, "dtensor_import: needs exactly one fd, got %d", c->nfds);
        return;
    }
    if (proto_get_u64(m->params, "bytes", true, &bytes) < 0 || bytes == 0) {
        rpc_reply_error(c, GLLM_EPARAM, "dtensor_import: 'bytes' (uint > 0) required");
        return;
    }
    if (!get_device(c, m, "dtensor_import", &dev))
        return;
    if (!share_kind_name(srv->be)) {
        rpc_reply_error(c, -EOPNOTSUPP, "dtensor_import: the %s backend shares no memory",
                        backend_name(srv->be));
        return;
    }
    if (!device_quota(c, "dtensor_import", bytes))
        return;
    if (bytes > SIZE_MAX) {
        rpc_reply_error(c, GLLM_EARENASIZE, "dtensor_import: %s", gllm_strerror(GLLM_EARENASIZE));
        return;
    }
    struct dtensor_make *t = calloc(1, sizeof *t);
    if (!t) {
        rpc_reply_error(c, -ENOMEM, "dtensor_import: out of memory");
        return;
    }
    *t = (struct dtensor_make){.method = "dtensor_import", .dev = (int)dev, .bytes = bytes,
                               .fd_in = c->fds[0]};
    dtensor_make_start(c, t);
}

/* A device tensor freed by its client while no job holds it: on the thread pool as it is
 * made, and answered once its memory is back, so that the client may make another of its
 * size at once. */
struct dtensor_drop {
    struct pool_call pc;
    struct arena *a;
};

static void dtensor_drop_run(struct pool_call *pc)
{
    arena_teardown(((struct dtensor_drop *)pc)->a);
}

static void dtensor_drop_answer(struct pool_call *pc, struct rpc_call *c)
{
    rpc_reply_empty(c);
    free(pc);
}

void method_dtensor_free(struct rpc_call *c, const struct proto_msg *m)
{
    uint64_t which = 0;
    struct arena *a = NULL;
    if (proto_get_u64(m->params, "dtensor", true, &which) == 0)
        a = session_region_take(&c->ch->session, which, true);
    if (!a) {
        rpc_reply_error(c, GLLM_ENOARENA, "dtensor_free: no device tensor %llu",
                        (unsigned long long)which);
        return;
    }
    struct dtensor_drop *t = a->refs == 1 && a->reaper ? malloc(sizeof *t) : NULL;
    if (t) {
        *t = (struct dtensor_drop){.pc = {.run = dtensor_drop_run, .answer = dtensor_drop_answer},
                                   .a = a};
        if (pool_call_start(c, &t->pc) == 0)
            return;
        free(t);
    }
    arena_unref(a);   /* jobs still using it keep it until they finish */
    rpc_reply_empty(c);
}

void method_dtensor_copy(struct rpc_call *c, const struct proto_msg *m)
{
    struct session *s = &c->ch->session;
    uint64_t dt = 0, dt_off = 0, ar = 0, ar_off = 0, bytes = 0;
    bool to_device = true;
    if (proto_get_u64(m->params, "dtensor", true, &dt) < 0 ||
        proto_get_u64(m->params, "offset", false, &dt_off) < 0 ||
        proto_get_u64(m->params, "arena", true, &ar) < 0 ||
        proto_get_u64(m->params, "arena_offset", false, &ar_off) < 0 ||
        proto_get_u64(m->params, "bytes", true, &bytes) < 0 ||
        proto_get_bool(m->params, "to_device", true, &to_device) < 0 || dt > UINT32_MAX ||
        ar > UINT32_MAX) {
        rpc_reply_error(c, GLLM_EPARAM, "dtensor_copy: needs dtensor, arena, bytes (uint) "
                        "and to_device (bool); offset and arena_offset optional");
        return;
    }
    if (!admit(c, "dtensor_copy"))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "dtensor_copy: out of memory");
        return;
    }
    char err[PROTO_MAX_ERRMSG];
    int r = job_prepare_copy(job, &s->regions, (uint32_t)dt, dt_off, (uint32_t)ar, ar_off, bytes,
                             to_device, err, sizeof err);
    if (r < 0) {
        free(job);
        rpc_reply_error(c, r, "dtensor_copy: %s", err);
        return;
    }
    submit(c, m, job, arena_table_find(&s->regions, (uint32_t)dt)->dev, "dtensor_copy");
}

void method_attention(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    if (!admit(c, "attention"))
        return;
    struct proto_attention pa;
    char err[PROTO_MAX_ERRMSG];
    int r = proto_job_keys_check(m->params, err, sizeof err);
    if (r < 0) {
        rpc_reply_error(c, r, "attention: %s", err);
        return;
    }
    r = proto_decode_attention(m->params, &pa);
    if (r < 0) {
        rpc_reply_error(c, r, "attention: %s (fields q, k, v, out: tensors)", gllm_strerror(r));
        return;
    }
    uint64_t dev;
    if (!get_device(c, m, "attention", &dev))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "attention: out of memory");
        return;
    }
    r = job_prepare_attention(job, &pa, &c->ch->session.regions, &srv->caps, err, sizeof err);
    if (r < 0) {
        free(job);
        rpc_reply_error(c, r, "attention: %s", err);
        return;
    }
    submit(c, m, job, (int)dev, "attention");
}

/* kv_append, attention_decode and attention_prefill: validated like attention, plus the
 * backend's own say on shapes it can run. */
static void paged(struct rpc_call *c, const struct proto_msg *m, enum proto_paged_op op,
                  const char *method)
{
    struct server *srv = c->ch->srv;
    if (!admit(c, method))
        return;
    struct proto_paged pp;
    char err[PROTO_MAX_ERRMSG];
    int r = proto_job_keys_check(m->params, err, sizeof err);
    if (r < 0) {
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    r = proto_decode_paged(m->params, op, &pp);
    if (r < 0) {
        rpc_reply_error(c, r, "%s: %s (see docs/PROTOCOL.md for its fields)", method,
                        gllm_strerror(r));
        return;
    }
    uint64_t dev;
    if (!get_device(c, m, method, &dev))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "%s: out of memory", method);
        return;
    }
    r = job_prepare_paged(job, &pp, &c->ch->session.regions, &srv->caps, err, sizeof err);
    if (r == 0)
        r = backend_paged_check(srv->be, &job->paged, err, sizeof err);
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    submit(c, m, job, (int)dev, method);
}

void method_kv_append(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_KV_APPEND, "kv_append");
}

void method_attention_decode(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_DECODE, "attention_decode");
}

void method_attention_prefill(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_PREFILL, "attention_prefill");
}
