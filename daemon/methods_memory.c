/* The memory methods: arenas, rings, device tensors (made, imported, freed) and copies. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"
#include "methods.h"
#include "pool_call.h"

/* The wire name of the kind of memory the backend shares, or NULL when it shares none. */
const char *methods_share_kind(const struct backend *be)
{
    if (backend_share_size(be, 1) == 0)
        return NULL;
    switch (backend_caps(be)->share_kind) {
    case BACKEND_SHARE_MEMFD: return "memfd";
    case BACKEND_SHARE_CUDA_VMM: return "cuda_vmm_fd";
    default: return NULL;
    }
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
        if (!(kind = methods_share_kind(srv->be)) || rounded == 0) {
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
    if (!methods_share_kind(srv->be)) {
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
    struct proto_copy pc;
    int r = proto_decode_copy(m->params, &pc);
    if (r < 0) {
        const char *why = methods_job_why(m, false);
        if (why)
            rpc_reply_error(c, r, "dtensor_copy: %s", why);
        else
            rpc_reply_error(c, GLLM_EPARAM, "dtensor_copy: needs dtensor, arena, bytes (uint) "
                            "and to_device (bool); offset and arena_offset optional");
        return;
    }
    if (!methods_admit(c, "dtensor_copy"))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "dtensor_copy: out of memory");
        return;
    }
    char err[PROTO_MAX_ERRMSG];
    r = job_prepare_copy(job, &s->regions, pc.dtensor, pc.offset, pc.arena, pc.arena_offset,
                         pc.bytes, pc.to_device, err, sizeof err);
    if (r < 0) {
        free(job);
        rpc_reply_error(c, r, "dtensor_copy: %s", err);
        return;
    }
    methods_submit(c, job, arena_table_find(&s->regions, pc.dtensor)->dev, &pc.wait, &pc.signal,
                   "dtensor_copy");
}
