/* Request handlers: hello, status, arenas, device tensors, attention and the paged KV cache. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "session_ring.h"
#include "server.h"
#include "session.h"

struct method {
    const char *name;
    void (*handle)(struct session *s, const struct proto_msg *m, int *fds, int nfds);
    bool takes_fd;
};

static msgpack_packer *begin_result(struct session *s, uint64_t id)
{
    proto_buf_init(&s->srv->tx);
    proto_pack_result(&s->srv->tx.pk, id);
    return &s->srv->tx.pk;
}

static void end_result(struct session *s, uint64_t id)
{
    struct proto_buf *b = &s->srv->tx;
    if (b->overflow) {
        session_reply_error(s, (int64_t)id, GLLM_ETOOBIG, "reply exceeds the message limit");
        return;
    }
    session_send(s, b->data, b->len);
}

static void pack_devices(msgpack_packer *pk, struct server *srv)
{
    proto_pack_str(pk, "devices");
    msgpack_pack_array(pk, (size_t)srv->ndevices);
    for (int i = 0; i < srv->ndevices; i++) {
        gllm_device_info d;
        if (srv->be->iface->device_info(srv->be, i, &d) < 0)
            memset(&d, 0, sizeof d);
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
        msgpack_pack_map(pk, 7);
        proto_pack_kv_str(pk, "compute_capability", d.cc_major ? cc : "");
        proto_pack_kv_str(pk, "image", d.image);
        proto_pack_kv_u64(pk, "index", (uint64_t)i);
        proto_pack_kv_str(pk, "name", d.name);
        proto_pack_kv_str(pk, "kind", d.kind);
        proto_pack_kv_u64(pk, "memory_bytes", d.memory_bytes);
        proto_pack_kv_u64(pk, "threads", (uint64_t)d.threads);
    }
}

static void h_hello(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    struct server *srv = s->srv;
    uint64_t version = 0;
    if (proto_get_u64(m->params, "version", true, &version) < 0) {
        session_reply_error(s, (int64_t)m->id, GLLM_EPARAM, "hello: 'version' (uint) required");
        return;
    }
    if (version != GLLM_PROTOCOL_VERSION) {
        session_reply_error(s, (int64_t)m->id, GLLM_EVERSION,
                            "hello: protocol version %llu not supported (this daemon speaks %d)",
                            (unsigned long long)version, GLLM_PROTOCOL_VERSION);
        return;
    }
    s->hello_done = true;
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 8);
    proto_pack_kv_u64(pk, "version", GLLM_PROTOCOL_VERSION);
    proto_pack_kv_u64(pk, "ring_bytes", GLLM_RING_BYTES);   /* the ring layout this daemon reads */
    proto_pack_kv_str(pk, "daemon", GLLM_VERSION);
    proto_pack_kv_str(pk, "backend", srv->be->iface->name);
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
    end_result(s, m->id);
}

static void h_status(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    struct server *srv = s->srv;
    const struct server_stats *st = &srv->stats;
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 18);
    proto_pack_kv_str(pk, "daemon", GLLM_VERSION);
    proto_pack_kv_f64(pk, "uptime_s", (double)(now_ns() - srv->start_ns) / 1e9);
    proto_pack_kv_str(pk, "backend", srv->be->iface->name);
    pack_devices(pk, srv);
    proto_pack_kv_u64(pk, "clients", st->clients);
    proto_pack_kv_u64(pk, "jobs_done", st->jobs_done);
    proto_pack_kv_u64(pk, "jobs_failed", st->jobs_failed);
    proto_pack_kv_u64(pk, "jobs_inflight", st->jobs_inflight);
    proto_pack_kv_u64(pk, "bytes_mapped", st->bytes_mapped);
    proto_pack_kv_u64(pk, "arenas", st->arenas);
    proto_pack_kv_u64(pk, "device_bytes", st->device_bytes);
    proto_pack_kv_u64(pk, "dtensors", st->dtensors);
    proto_pack_kv_bool(pk, "draining", srv->draining);
    proto_pack_kv_u64(pk, "requests", st->requests);
    proto_pack_kv_u64(pk, "errors", st->errors);
    proto_pack_kv_u64(pk, "limit_violations", st->limit_violations);
    proto_pack_kv_u64(pk, "ring_requests", st->ring_requests);
    /* Who holds what: at most 64 entries so the reply stays within one packet. */
    uint32_t n = 0;
    for (struct session *c = srv->sessions; c && n < 64; c = c->next)
        n++;
    proto_pack_str(pk, "client_list");
    msgpack_pack_array(pk, n);
    struct session *c = srv->sessions;
    for (uint32_t i = 0; i < n; i++, c = c->next) {
        msgpack_pack_map(pk, 8);
        proto_pack_kv_u64(pk, "pid", (uint64_t)c->pid);
        proto_pack_kv_u64(pk, "uid", (uint64_t)c->uid);
        proto_pack_kv_u64(pk, "gid", (uint64_t)c->gid);
        proto_pack_kv_str(pk, "comm", c->comm);
        proto_pack_kv_u64(pk, "arenas", c->narenas);
        proto_pack_kv_u64(pk, "arena_bytes", c->arena_bytes);
        proto_pack_kv_u64(pk, "device_bytes", c->device_bytes);
        proto_pack_kv_u64(pk, "inflight", atomic_load(&c->inflight));
    }
    end_result(s, m->id);
}

static void h_arena_register(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    struct server *srv = s->srv;
    int64_t id = (int64_t)m->id;
    uint64_t size = 0;
    if (nfds != 1) {
        session_reply_error(s, id, GLLM_ENOFD, "arena_register: needs exactly one fd, got %d",
                            nfds);
        return;
    }
    if (proto_get_u64(m->params, "size", true, &size) < 0) {
        session_reply_error(s, id, GLLM_EPARAM, "arena_register: 'size' (uint) required");
        return;
    }
    if (s->narenas >= srv->limits.max_arenas) {
        session_reply_error(s, id, GLLM_EQUOTA, "arena_register: session has %u arenas (limit)",
                            s->narenas);
        return;
    }
    /* A reload may have lowered the limit below what the session already holds. */
    if (s->arena_bytes > srv->limits.max_arena_bytes ||
        size > srv->limits.max_arena_bytes - s->arena_bytes) {
        session_reply_error(s, id, GLLM_EQUOTA,
                            "arena_register: %llu more bytes would pass the session limit %llu",
                            (unsigned long long)size,
                            (unsigned long long)srv->limits.max_arena_bytes);
        return;
    }
    struct arena *a;
    int r = arena_map(fds[0], size, &a);
    if (r < 0) {
        session_reply_error(s, id, r, "arena_register: %s", gllm_strerror(r));
        return;
    }
    if (srv->be->iface->host_register && srv->be->iface->host_register(srv->be, a->base, size) == 0)
        a->pinned_by = srv->be;
    if ((r = session_region_add(s, a)) < 0) {
        arena_unref(a);
        session_reply_error(s, id, GLLM_EQUOTA, "arena_register: arena table full");
        return;
    }
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "arena", a->id);
    proto_pack_kv_u64(pk, "size", size);
    end_result(s, m->id);
}

/* The session's rings (proto/ring.h): one file per session, for its whole life. */
static void h_ring(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    int64_t id = (int64_t)m->id;
    if (nfds != 1) {
        session_reply_error(s, id, GLLM_ENOFD, "ring: needs exactly one fd, got %d", nfds);
        return;
    }
    if (s->ring) {
        session_reply_error(s, id, GLLM_EQUOTA, "ring: the session has one already");
        return;
    }
    struct session_ring *ring;
    int r = session_ring_open(fds[0], &ring);
    if (r < 0) {
        session_reply_error(s, id, r, "ring: %s (a sealed memfd of %llu bytes)",
                            gllm_strerror(r), (unsigned long long)GLLM_RING_BYTES);
        return;
    }
    session_ring_set_polling(ring, server_busy_polling(s->srv));
    atomic_store_explicit(&s->ring, ring, memory_order_release);
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "bytes", GLLM_RING_BYTES);
    end_result(s, m->id);
}

static void h_arena_release(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    uint64_t which = 0;
    if (proto_get_u64(m->params, "arena", true, &which) < 0) {
        session_reply_error(s, (int64_t)m->id, GLLM_EPARAM, "arena_release: 'arena' (uint) required");
        return;
    }
    /* A device tensor's id is refused here: those go with dtensor_free. */
    struct arena *a = session_region_take(s, which, false);
    if (!a) {
        session_reply_error(s, (int64_t)m->id, GLLM_ENOARENA, "arena_release: no arena %llu",
                            (unsigned long long)which);
        return;
    }
    arena_unref(a);  /* jobs still using it keep it mapped until they finish */
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 0);
    end_result(s, m->id);
}

/* Queues a job on the session's lane of device dev; the reply comes when it is done. */
/* Queues a prepared job on its device's worker; a job naming another device's tensor is
 * refused here, for every kind of job. */
static void submit(struct session *s, struct job *job, uint64_t req_id, int dev, const char *method)
{
    struct server *srv = s->srv;
    char err[PROTO_MAX_ERRMSG];
    int r = job_check_device(job, dev, err, sizeof err);
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        session_reply_error(s, (int64_t)req_id, r, "%s: %s", method, err);
        return;
    }
    job->req_id = req_id;
    job->dev = dev;
    job->t_read = srv->packet_ns;
    job->ops = &server_job_ops;
    job->cookie = session_ref(s);
    s->inflight++;
    srv->stats.jobs_inflight++;
    sched_submit(srv->sched, &s->lanes[dev], job);
}

/* Room for one more job, or an error reply and false. */
static bool admit(struct session *s, int64_t id, const char *method)
{
    struct server *srv = s->srv;
    if (srv->draining) {
        session_reply_error(s, id, GLLM_ESHUTDOWN, "%s: daemon is shutting down", method);
        return false;
    }
    /* A job stops counting when its worker finishes it (job_finished), before the loop
     * settles it: a client at the limit that got its reply may send the next job. */
    if (s->inflight >= srv->limits.max_inflight) {
        session_reply_error(s, id, GLLM_EBUSY, "%s: %u jobs in flight on this connection (limit)",
                            method, (unsigned)s->inflight);
        return false;
    }
    if (srv->stats.jobs_inflight >= srv->limits.max_inflight_total) {
        session_reply_error(s, id, GLLM_EBUSY, "%s: %llu jobs in flight in all (limit)", method,
                            (unsigned long long)srv->stats.jobs_inflight);
        return false;
    }
    return true;
}

static bool get_device(struct session *s, const struct proto_msg *m, const char *method,
                       uint64_t *dev)
{
    *dev = 0;
    if (proto_get_u64(m->params, "device", false, dev) < 0 || *dev >= (uint64_t)s->srv->ndevices) {
        session_reply_error(s, (int64_t)m->id, GLLM_EPARAM, "%s: 'device' must be below %d",
                            method, s->srv->ndevices);
        return false;
    }
    return true;
}

static void h_dtensor_create(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    struct server *srv = s->srv;
    int64_t id = (int64_t)m->id;
    uint64_t bytes = 0, dev;
    if (proto_get_u64(m->params, "bytes", true, &bytes) < 0 || bytes == 0) {
        session_reply_error(s, id, GLLM_EPARAM, "dtensor_create: 'bytes' (uint > 0) required");
        return;
    }
    if (!get_device(s, m, "dtensor_create", &dev))
        return;
    const struct limits *l = &srv->limits;
    if (s->device_bytes > l->max_device_bytes || bytes > l->max_device_bytes - s->device_bytes ||
        srv->stats.device_bytes > l->max_device_bytes_total ||
        bytes > l->max_device_bytes_total - srv->stats.device_bytes) {
        session_reply_error(s, id, GLLM_EQUOTA,
                            "dtensor_create: %llu more bytes would pass the device-memory limit "
                            "(%llu per connection, %llu in all)", (unsigned long long)bytes,
                            (unsigned long long)l->max_device_bytes,
                            (unsigned long long)l->max_device_bytes_total);
        return;
    }
    struct arena *a;
    int r = arena_new_device(srv->be, (int)dev, bytes, &a);
    if (r == 0 && (r = session_region_add(s, a)) < 0) {
        arena_unref(a);
        r = GLLM_EQUOTA;
    }
    if (r < 0) {
        session_reply_error(s, id, r, "dtensor_create: %s", gllm_strerror(r));
        return;
    }
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "dtensor", a->id);
    proto_pack_kv_u64(pk, "bytes", bytes);
    end_result(s, m->id);
}

static void h_dtensor_free(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    uint64_t which = 0;
    struct arena *a = NULL;
    if (proto_get_u64(m->params, "dtensor", true, &which) == 0)
        a = session_region_take(s, which, true);
    if (!a) {
        session_reply_error(s, (int64_t)m->id, GLLM_ENOARENA, "dtensor_free: no device tensor %llu",
                            (unsigned long long)which);
        return;
    }
    arena_unref(a);   /* jobs still using it keep it until they finish */
    msgpack_packer *pk = begin_result(s, m->id);
    msgpack_pack_map(pk, 0);
    end_result(s, m->id);
}

static void h_dtensor_copy(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    int64_t id = (int64_t)m->id;
    uint64_t dt = 0, dt_off = 0, ar = 0, ar_off = 0, bytes = 0;
    bool to_device = true;
    if (proto_get_u64(m->params, "dtensor", true, &dt) < 0 ||
        proto_get_u64(m->params, "offset", false, &dt_off) < 0 ||
        proto_get_u64(m->params, "arena", true, &ar) < 0 ||
        proto_get_u64(m->params, "arena_offset", false, &ar_off) < 0 ||
        proto_get_u64(m->params, "bytes", true, &bytes) < 0 ||
        proto_get_bool(m->params, "to_device", true, &to_device) < 0 || dt > UINT32_MAX ||
        ar > UINT32_MAX) {
        session_reply_error(s, id, GLLM_EPARAM, "dtensor_copy: needs dtensor, arena, bytes (uint) "
                            "and to_device (bool); offset and arena_offset optional");
        return;
    }
    if (!admit(s, id, "dtensor_copy"))
        return;
    struct arena *d = arena_table_find(&s->arenas, (uint32_t)dt);
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        session_reply_error(s, id, -ENOMEM, "dtensor_copy: out of memory");
        return;
    }
    char err[PROTO_MAX_ERRMSG];
    int r = job_prepare_copy(job, &s->arenas, (uint32_t)dt, dt_off, (uint32_t)ar, ar_off, bytes,
                             to_device, err, sizeof err);
    if (r < 0) {
        free(job);
        session_reply_error(s, id, r, "dtensor_copy: %s", err);
        return;
    }
    submit(s, job, m->id, d->dev, "dtensor_copy");
}

static void h_attention(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    struct server *srv = s->srv;
    int64_t id = (int64_t)m->id;
    if (!admit(s, id, "attention"))
        return;
    struct proto_attention pa;
    int r = proto_decode_attention(m->params, &pa);
    if (r < 0) {
        session_reply_error(s, id, r, "attention: %s (fields q, k, v, out: tensors)",
                            gllm_strerror(r));
        return;
    }
    uint64_t dev;
    if (!get_device(s, m, "attention", &dev))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        session_reply_error(s, id, -ENOMEM, "attention: out of memory");
        return;
    }
    char err[PROTO_MAX_ERRMSG];
    r = job_prepare_attention(job, &pa, &s->arenas, &srv->caps, err, sizeof err);
    if (r < 0) {
        free(job);
        session_reply_error(s, id, r, "attention: %s", err);
        return;
    }
    submit(s, job, m->id, (int)dev, "attention");
}

/* kv_append, attention_decode and attention_prefill: validated like attention, plus the
 * backend's own say on shapes it can run. */
static void paged(struct session *s, const struct proto_msg *m, enum proto_paged_op op,
                  const char *method)
{
    struct server *srv = s->srv;
    int64_t id = (int64_t)m->id;
    if (!admit(s, id, method))
        return;
    struct proto_paged pp;
    int r = proto_decode_paged(m->params, op, &pp);
    if (r < 0) {
        session_reply_error(s, id, r, "%s: %s (see docs/PROTOCOL.md for its fields)", method,
                            gllm_strerror(r));
        return;
    }
    uint64_t dev;
    if (!get_device(s, m, method, &dev))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        session_reply_error(s, id, -ENOMEM, "%s: out of memory", method);
        return;
    }
    char err[PROTO_MAX_ERRMSG];
    r = job_prepare_paged(job, &pp, &s->arenas, &srv->caps, err, sizeof err);
    if (r == 0 && !srv->be->iface->paged) {
        snprintf(err, sizeof err, "not supported by the %s backend", srv->be->iface->name);
        r = GLLM_EMETHOD;
    } else if (r == 0 && srv->be->iface->paged_check) {
        r = srv->be->iface->paged_check(srv->be, &job->paged, err, sizeof err);
    }
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        session_reply_error(s, id, r, "%s: %s", method, err);
        return;
    }
    submit(s, job, m->id, (int)dev, method);
}

static void h_kv_append(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    paged(s, m, PROTO_KV_APPEND, "kv_append");
}

static void h_attention_decode(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    paged(s, m, PROTO_DECODE, "attention_decode");
}

static void h_attention_prefill(struct session *s, const struct proto_msg *m, int *fds, int nfds)
{
    (void)fds, (void)nfds;
    paged(s, m, PROTO_PREFILL, "attention_prefill");
}

static const struct method methods[] = {
    {"hello", h_hello, false},
    {"status", h_status, false},
    {"arena_register", h_arena_register, true},
    {"arena_release", h_arena_release, false},
    {"ring", h_ring, true},
    {"attention", h_attention, false},
    {"dtensor_create", h_dtensor_create, false},
    {"dtensor_free", h_dtensor_free, false},
    {"dtensor_copy", h_dtensor_copy, false},
    {"kv_append", h_kv_append, false},
    {"attention_decode", h_attention_decode, false},
    {"attention_prefill", h_attention_prefill, false},
};

void methods_dispatch(struct session *s, const void *buf, size_t len, int *fds, int nfds)
{
    struct proto_msg m;
    int64_t id = -1;
    int r = proto_decode(buf, len, &m, &id);
    if (r < 0) {
        session_reply_error(s, id, r, "%s", gllm_strerror(r));
        return;
    }
    if (s->denied) {
        session_reply_error(s, m.kind == PROTO_REQUEST ? id : -1, GLLM_EDENIED,
                            "uid %u is not allowed by this daemon's access policy",
                            (unsigned)s->uid);
        proto_msg_free(&m);
        session_close_when_flushed(s);
        return;
    }
    if (m.kind != PROTO_REQUEST) {
        /* The one notification, ring_wake, needs no handling: reading its packet took the
         * ring's requests (session.c). A response from a client is a protocol error. */
        if (m.kind == PROTO_RESPONSE)
            session_reply_error(s, -1, GLLM_EMALFORMED, "clients send requests, not responses");
        proto_msg_free(&m);
        return;
    }
    const struct method *h = NULL;
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strcmp(methods[i].name, m.method) == 0)
            h = &methods[i];
    if (!h)
        session_reply_error(s, id, GLLM_EMETHOD, "unknown method '%s'", m.method);
    else if (!s->hello_done && h->handle != h_hello)
        session_reply_error(s, id, GLLM_ENOHELLO, "%s: send hello first", m.method);
    else if (!h->takes_fd && nfds > 0)
        session_reply_error(s, id, GLLM_ENOFD, "%s: takes no file descriptor", m.method);
    else
        h->handle(s, &m, fds, nfds);
    proto_msg_free(&m);
}
