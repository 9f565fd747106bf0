/* libgllm-client: connection, request/response matching, arenas, attention jobs. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "ring.h"

/* A job submitted and not yet claimed by wait/poll. */
struct job_slot {
    uint64_t id;
    bool done;
    gllm_job_result res;
    char message[PROTO_MAX_ERRMSG + 1];
};

struct gllm_client {
    int fd;
    uint64_t next_id;
    gllm_caps caps;
    struct job_slot *jobs;
    size_t njobs, capjobs;
    struct gllm_arena *arenas;   /* live arenas, detached on disconnect */
    struct gllm_dtensor *dtensors;  /* live device tensors, likewise */
    /* The reply to the synchronous call in progress. */
    uint64_t call_id;
    bool call_done;
    struct proto_msg call_msg;
    bool call_msg_valid;
    int call_error;
    char last_error[PROTO_MAX_ERRMSG + 1];
    uint64_t wait_spin_ns;       /* gllm_job_wait polls this long before it sleeps */
    struct gllm_ring *ring;      /* requests and job replies by shared memory; NULL: socket */
    uint32_t reply_tail, request_head;
    uint64_t packets_sent;       /* through the socket: a ring request records it (`after`) */
    char rx[PROTO_MAX_MESSAGE];
    struct proto_buf tx;
};

struct gllm_dtensor {
    gllm_client *c;              /* NULL once the client is gone */
    struct gllm_dtensor *prev, *next;
    uint32_t id;
    size_t size;
    int device;
};

struct gllm_arena {
    gllm_client *c;              /* NULL once the client is gone */
    struct gllm_arena *prev, *next;
    uint32_t id;
    void *data;
    size_t size;
};

static struct job_slot *find_job(gllm_client *c, uint64_t id)
{
    for (size_t i = 0; i < c->njobs; i++)
        if (c->jobs[i].id == id)
            return &c->jobs[i];
    return NULL;
}

static int decode_job_reply(const struct proto_msg *m, gllm_job_result *res)
{
    memset(res, 0, sizeof *res);
    res->status = m->error_code;
    if (m->error_code == 0) {
        static const struct proto_key keys[] = {
            PROTO_KEY("kernel_ns"), PROTO_KEY("queue_ns"), PROTO_KEY("job_ns"),
            PROTO_KEY("copy_ns"), PROTO_KEY("copy_bytes"), PROTO_KEY("accept_ns"),
        };
        uint64_t *const out[] = {&res->kernel_ns, &res->queue_ns, &res->job_ns,
                                 &res->copy_ns, &res->copy_bytes, &res->accept_ns};
        const msgpack_object *f[sizeof keys / sizeof *keys];
        proto_map_find(m->result, keys, sizeof keys / sizeof *keys, f);
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (f[i] && f[i]->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                *out[i] = f[i]->via.u64;
    }
    return 0;
}

/* Routes one received packet: the pending call's reply, or a job completion. */
static int handle_packet(gllm_client *c, size_t len)
{
    struct proto_msg m;
    int64_t id = -1;
    int r = proto_decode(c->rx, len, &m, &id);
    if (r < 0)
        return r;   /* the daemon never sends such a packet: the stream is not to be trusted */
    if (m.kind != PROTO_RESPONSE) {
        proto_msg_free(&m);
        return 0;   /* notifications: none defined yet */
    }
    struct job_slot *j = find_job(c, m.id);
    if (j && !j->done) {
        decode_job_reply(&m, &j->res);
        memcpy(j->message, m.error_message, sizeof j->message);
        j->done = true;
        proto_msg_free(&m);
    } else if (m.id == c->call_id && !c->call_done) {
        c->call_msg = m;
        c->call_msg_valid = true;
        c->call_done = true;
    } else if (id < 0 && !c->call_done) {
        /* An error the daemon could not tie to an id: it can only be about the call in flight. */
        c->call_error = m.error_code;
        memcpy(c->last_error, m.error_message, sizeof c->last_error);
        c->call_done = true;
        proto_msg_free(&m);
    } else {
        proto_msg_free(&m);
    }
    return 0;
}

/* Reads packets until none is waiting (nonblocking) or one arrives (blocking). */
static int receive(gllm_client *c, bool block)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->rx, sizeof c->rx, block ? 0 : MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
        if (n == 0)
            return GLLM_EDISCONNECTED;
        int r = handle_packet(c, (size_t)n);
        if (r < 0 || block)
            return r;
    }
}

/* Completes the jobs whose replies gllmd left in the ring since the last look. */
static int drain_ring(gllm_client *c)
{
    struct gllm_ring *rg = c->ring;
    if (!rg)
        return 0;
    const uint32_t head = atomic_load_explicit(&rg->reply_head, memory_order_acquire);
    if (head - c->reply_tail > GLLM_RING_REPLY_SLOTS)
        return GLLM_EMALFORMED;   /* gllmd never publishes past our tail */
    int r = 0;
    for (; r == 0 && c->reply_tail != head; c->reply_tail++) {
        const struct gllm_ring_reply_slot *s = &rg->reply[c->reply_tail % GLLM_RING_REPLY_SLOTS];
        const uint32_t len = s->len;
        if (len > sizeof s->data)
            return GLLM_EMALFORMED;
        memcpy(c->rx, s->data, len);
        r = handle_packet(c, len);
    }
    atomic_store_explicit(&rg->reply_tail, c->reply_tail, memory_order_release);
    return r;
}

/* Sends one packet, reading replies meanwhile so a daemon that waits for us
 * to drain our socket can never deadlock with us. */
static int send_packet(gllm_client *c, const void *data, size_t len, int fd)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctrl;
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctrl, 0, sizeof ctrl);
        mh.msg_control = ctrl.buf;
        mh.msg_controllen = sizeof ctrl.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    for (;;) {
        if (sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
            c->packets_sent++;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EPIPE || errno == ECONNRESET)
            return GLLM_EDISCONNECTED;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLOUT};
        if (poll(&p, 1, -1) < 0 && errno != EINTR)
            return -errno;
        if (p.revents & POLLIN) {
            int r = receive(c, false);
            if (r < 0)
                return r;
        }
    }
}

/* Puts the request in c->tx into the ring while gllmd's loop polls it: no system call.
 * 1: use the socket (no ring, gllmd not polling, too large, ring full). */
static int ring_send(gllm_client *c)
{
    struct gllm_ring *rg = c->ring;
    const size_t len = c->tx.len;
    if (!rg || len > sizeof rg->request[0].data ||
        !atomic_load_explicit(&rg->gllmd_polling, memory_order_acquire) ||
        c->request_head - atomic_load_explicit(&rg->request_tail, memory_order_acquire) >=
            GLLM_RING_REQUEST_SLOTS)
        return 1;
    struct gllm_ring_request_slot *s = &rg->request[c->request_head % GLLM_RING_REQUEST_SLOTS];
    memcpy(s->data, c->tx.data, len);
    s->len = (uint32_t)len;
    s->after = (uint32_t)c->packets_sent;
    atomic_store_explicit(&rg->request_head, ++c->request_head, memory_order_release);
    /* gllmd clears its flag, fences, then looks at our head once more: one of us sees the
     * other. If it stopped polling, wake it through the socket (proto/ring.h). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&rg->gllmd_polling, memory_order_relaxed))
        return 0;
    proto_buf_init(&c->tx);   /* the request is in the ring: c->tx is free */
    proto_pack_notify(&c->tx.pk, "ring_wake");
    msgpack_pack_map(&c->tx.pk, 0);
    return send_packet(c, c->tx.data, c->tx.len, -1);
}

static msgpack_packer *begin_request(gllm_client *c, const char *method, uint64_t *id)
{
    *id = ++c->next_id;
    proto_buf_init(&c->tx);
    proto_pack_request(&c->tx.pk, *id, method);
    return &c->tx.pk;
}

/* Sends the request in c->tx and waits for its reply. On success the reply
 * is in c->call_msg (free with end_call). */
static int call(gllm_client *c, uint64_t id, int fd)
{
    if (c->tx.overflow)
        return GLLM_ETOOBIG;
    c->call_id = id;
    c->call_done = false;
    c->call_error = 0;
    c->call_msg_valid = false;
    int r = send_packet(c, c->tx.data, c->tx.len, fd);
    while (r == 0 && !c->call_done)
        r = receive(c, true);
    if (r < 0)
        return r;
    if (c->call_error)
        return c->call_error;
    if (c->call_msg.error_code) {
        r = c->call_msg.error_code;
        memcpy(c->last_error, c->call_msg.error_message, sizeof c->last_error);
        proto_msg_free(&c->call_msg);
        c->call_msg_valid = false;
        return r;
    }
    return 0;
}

static void end_call(gllm_client *c)
{
    if (c->call_msg_valid)
        proto_msg_free(&c->call_msg);
    c->call_msg_valid = false;
}

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
        memset(o, 0, sizeof *o);
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
        (*ndev)++;
    }
    return 0;
}

/* *ring_bytes: the ring layout gllmd reads (left alone when it offers none). */
static int hello(gllm_client *c, uint64_t *ring_bytes)
{
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "hello", &id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "version", GLLM_PROTOCOL_VERSION);
    proto_pack_kv_str(pk, "client", "libgllm-client " GLLM_VERSION);
    int r = call(c, id, -1);
    if (r < 0)
        return r;
    const msgpack_object *res = c->call_msg.result;
    gllm_caps *caps = &c->caps;
    uint64_t v = 0;
    memset(caps, 0, sizeof *caps);
    proto_get_u64(res, "version", false, &v);
    caps->protocol_version = (int)v;
    copy_field(res, "daemon", caps->daemon_version, sizeof caps->daemon_version);
    copy_field(res, "backend", caps->backend, sizeof caps->backend);
    r = decode_devices(res, caps->devices, &caps->ndevices);
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
                caps->dtypes |= 1u << d;
        }
    }
    const msgpack_object *lim = proto_map_get(res, "limits");
    gllm_limits *l = &caps->limits;
    uint64_t x;
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
    proto_get_u64(res, "ring_bytes", false, ring_bytes);
    x = 0;
    proto_get_u64(res, "max_head_dim", false, &x);
    l->max_head_dim = (uint32_t)x;
    end_call(c);
    return r;
}

/* Hands gllmd a ring when it reads our layout. Best effort: without one, every request
 * and reply goes by the socket, as with a daemon that predates rings. */
static void open_ring(gllm_client *c, uint64_t offered)
{
    if (offered != GLLM_RING_BYTES)
        return;
    int fd = memfd_create("gllm-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)GLLM_RING_BYTES) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) == 0)
        p = mmap(NULL, GLLM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
        uint64_t id;
        msgpack_packer *pk = begin_request(c, "ring", &id);
        msgpack_pack_map(pk, 0);
        if (call(c, id, fd) == 0)
            c->ring = p;
        else
            munmap(p, GLLM_RING_BYTES);
        end_call(c);
    }
    close(fd);
}

int gllm_connect(const char *path, gllm_client **out)
{
    char def[108];
    if (!path) {
        int r = gllm_default_socket_path(def, sizeof def);
        if (r < 0)
            return r;
        path = def;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    gllm_client *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = -errno;
        if (c->fd >= 0)
            close(c->fd);
        free(c);
        return e;
    }
    uint64_t ring_bytes = 0;
    int r = hello(c, &ring_bytes);
    if (r < 0) {
        close(c->fd);
        free(c);
        return r;
    }
    if (strcmp(c->caps.backend, "cpu") != 0)
        c->wait_spin_ns = (uint64_t)GLLM_WAIT_SPIN_US_DEFAULT * 1000;
    open_ring(c, ring_bytes);
    *out = c;
    return 0;
}

void gllm_disconnect(gllm_client *c)
{
    if (!c)
        return;
    for (struct gllm_arena *a = c->arenas; a; a = a->next)
        a->c = NULL;    /* the daemon unmaps its side when the connection closes */
    for (struct gllm_dtensor *t = c->dtensors; t; t = t->next)
        t->c = NULL;    /* and frees the device tensors */
    end_call(c);
    close(c->fd);
    if (c->ring)
        munmap(c->ring, GLLM_RING_BYTES);
    free(c->jobs);
    free(c);
}

const gllm_caps *gllm_client_caps(const gllm_client *c)
{
    return &c->caps;
}

const char *gllm_client_last_error(const gllm_client *c)
{
    return c->last_error;
}

int gllm_client_fd(const gllm_client *c)
{
    return c->fd;
}

int gllm_status_get(gllm_client *c, gllm_status *out)
{
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "status", &id);
    msgpack_pack_map(pk, 0);
    int r = call(c, id, -1);
    if (r < 0)
        return r;
    const msgpack_object *res = c->call_msg.result;
    gllm_status st;
    memset(&st, 0, sizeof st);
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
    r = decode_devices(res, st.devices, &st.ndevices);
    const msgpack_object *list = proto_map_get(res, "client_list");
    for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size &&
                        st.nlisted < GLLM_MAX_LISTED_CLIENTS; i++) {
        const msgpack_object *e = &list->via.array.ptr[i];
        gllm_client_info *ci = &st.client_list[st.nlisted++];
        uint64_t v = 0;
        proto_get_u64(e, "pid", false, &v), ci->pid = (int)v, v = 0;
        proto_get_u64(e, "uid", false, &v), ci->uid = (uint32_t)v, v = 0;
        proto_get_u64(e, "gid", false, &v), ci->gid = (uint32_t)v, v = 0;
        proto_get_u64(e, "arenas", false, &v), ci->arenas = (uint32_t)v, v = 0;
        proto_get_u64(e, "inflight", false, &v), ci->inflight = (uint32_t)v;
        proto_get_u64(e, "arena_bytes", false, &ci->arena_bytes);
        proto_get_u64(e, "device_bytes", false, &ci->device_bytes);
        copy_field(e, "comm", ci->comm, sizeof ci->comm);
    }
    end_call(c);
    if (r == 0)
        *out = st;
    return r;
}

int gllm_arena_create(gllm_client *c, size_t size, gllm_arena **out)
{
    if (size == 0)
        return -EINVAL;
    gllm_arena *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    int r;
    int fd = memfd_create("gllm-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        r = -errno;
        goto fail;
    }
    /* Sealed against shrinking, the daemon's mapping can never lose its pages. */
    if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto fail;
    }
    a->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->data == MAP_FAILED) {
        r = -errno;
        a->data = NULL;
        goto fail;
    }
    a->size = size;
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "arena_register", &id);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "size", size);
    r = call(c, id, fd);
    if (r < 0)
        goto fail;
    uint64_t aid = 0;
    r = proto_get_u64(c->call_msg.result, "arena", true, &aid);
    end_call(c);
    if (r < 0 || aid == 0 || aid > UINT32_MAX) {
        r = GLLM_EMALFORMED;
        goto fail;
    }
    close(fd);
    a->id = (uint32_t)aid;
    a->c = c;
    a->next = c->arenas;
    if (c->arenas)
        c->arenas->prev = a;
    c->arenas = a;
    *out = a;
    return 0;
fail:
    if (a->data)
        munmap(a->data, size);
    if (fd >= 0)
        close(fd);
    free(a);
    return r;
}

void *gllm_arena_data(const gllm_arena *a)
{
    return a->data;
}

size_t gllm_arena_size(const gllm_arena *a)
{
    return a->size;
}

int gllm_arena_release(gllm_arena *a)
{
    if (!a)
        return 0;
    int r = 0;
    gllm_client *c = a->c;
    if (c) {
        uint64_t id;
        msgpack_packer *pk = begin_request(c, "arena_release", &id);
        msgpack_pack_map(pk, 1);
        proto_pack_kv_u64(pk, "arena", a->id);
        r = call(c, id, -1);
        end_call(c);
        if (a->prev)
            a->prev->next = a->next;
        else
            c->arenas = a->next;
        if (a->next)
            a->next->prev = a->prev;
    }
    munmap(a->data, a->size);
    free(a);
    return r;
}

/* Sends the job request in c->tx, registered first: its reply may be read while we send. */
static int send_job(gllm_client *c, uint64_t id)
{
    if (c->tx.overflow)
        return GLLM_ETOOBIG;
    if (c->njobs == c->capjobs) {
        size_t cap = c->capjobs ? c->capjobs * 2 : 16;
        struct job_slot *n = realloc(c->jobs, cap * sizeof *n);
        if (!n)
            return -ENOMEM;
        c->jobs = n;
        c->capjobs = cap;
    }
    c->jobs[c->njobs++] = (struct job_slot){.id = id};
    int r = ring_send(c);
    if (r == 1)
        r = send_packet(c, c->tx.data, c->tx.len, -1);
    if (r < 0)
        c->njobs--;
    return r;
}

int gllm_dtensor_create(gllm_client *c, size_t bytes, int device, gllm_dtensor **out)
{
    if (bytes == 0 || device < 0)
        return -EINVAL;
    gllm_dtensor *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "dtensor_create", &id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "bytes", bytes);
    proto_pack_kv_u64(pk, "device", (uint64_t)device);
    int r = call(c, id, -1);
    uint64_t tid = 0;
    if (r == 0) {
        r = proto_get_u64(c->call_msg.result, "dtensor", true, &tid);
        end_call(c);
        if (r < 0 || tid == 0 || tid > UINT32_MAX)
            r = GLLM_EMALFORMED;
    }
    if (r < 0) {
        free(t);
        return r;
    }
    *t = (gllm_dtensor){.c = c, .id = (uint32_t)tid, .size = bytes, .device = device,
                        .next = c->dtensors};
    if (c->dtensors)
        c->dtensors->prev = t;
    c->dtensors = t;
    *out = t;
    return 0;
}

size_t gllm_dtensor_size(const gllm_dtensor *t)
{
    return t->size;
}

/* Device tensors die with the connection: after gllm_disconnect only the handle is freed. */
int gllm_dtensor_free(gllm_dtensor *t)
{
    if (!t)
        return 0;
    int r = 0;
    gllm_client *c = t->c;
    if (c) {
        uint64_t id;
        msgpack_packer *pk = begin_request(c, "dtensor_free", &id);
        msgpack_pack_map(pk, 1);
        proto_pack_kv_u64(pk, "dtensor", t->id);
        r = call(c, id, -1);
        end_call(c);
        if (t->prev)
            t->prev->next = t->next;
        else
            c->dtensors = t->next;
        if (t->next)
            t->next->prev = t->prev;
    }
    free(t);
    return r;
}

static int dtensor_copy(gllm_client *c, gllm_dtensor *t, uint64_t offset, gllm_arena *a,
                        uint64_t arena_offset, uint64_t bytes, bool to_device)
{
    if (!t || !a || t->c != c || a->c != c)
        return -EINVAL;
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "dtensor_copy", &id);
    msgpack_pack_map(pk, 6);
    proto_pack_kv_u64(pk, "dtensor", t->id);
    proto_pack_kv_u64(pk, "offset", offset);
    proto_pack_kv_u64(pk, "arena", a->id);
    proto_pack_kv_u64(pk, "arena_offset", arena_offset);
    proto_pack_kv_u64(pk, "bytes", bytes);
    proto_pack_kv_bool(pk, "to_device", to_device);
    /* A copy is a job: its reply comes in order with the connection's other jobs. */
    int r = send_job(c, id);
    return r < 0 ? r : gllm_job_wait(c, id, NULL);
}

int gllm_dtensor_write(gllm_client *c, gllm_dtensor *t, uint64_t offset, gllm_arena *a,
                       uint64_t arena_offset, uint64_t bytes)
{
    return dtensor_copy(c, t, offset, a, arena_offset, bytes, true);
}

int gllm_dtensor_read(gllm_client *c, gllm_dtensor *t, uint64_t offset, gllm_arena *a,
                      uint64_t arena_offset, uint64_t bytes)
{
    return dtensor_copy(c, t, offset, a, arena_offset, bytes, false);
}

int gllm_tensor_init_device(gllm_tensor *out, gllm_dtensor *t, uint64_t offset, gllm_dtype dtype,
                            int rank, const int64_t *shape)
{
    int r = gllm_tensor_init(out, NULL, offset, dtype, rank, shape);
    if (r == 0)
        out->dtensor = t;
    return r;
}

int gllm_tensor_init(gllm_tensor *t, gllm_arena *a, uint64_t offset, gllm_dtype dtype, int rank,
                     const int64_t *shape)
{
    if (rank < 0 || rank > GLLM_MAX_RANK || proto_dtype_size(dtype) == 0)
        return -EINVAL;
    gllm_tensor v = {.arena = a, .offset = offset, .dtype = dtype, .rank = rank};
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (shape[i] < 0)
            return -EINVAL;
        v.shape[i] = shape[i];
        v.strides[i] = s;
        if (shape[i] > 0 && __builtin_mul_overflow(s, shape[i], &s))
            return GLLM_EOVERFLOW;
    }
    *t = v;
    return 0;
}

static int to_wire(gllm_client *c, const gllm_tensor *t, struct proto_tensor *w)
{
    if (t->rank < 0 || t->rank > GLLM_MAX_RANK)
        return -EINVAL;
    if (t->dtensor) {
        if (t->dtensor->c != c)
            return -EINVAL;
        w->device = true;
        w->arena = t->dtensor->id;
    } else {
        if (!t->arena || t->arena->c != c)
            return -EINVAL;
        w->device = false;
        w->arena = t->arena->id;
    }
    w->offset = t->offset;
    w->dtype = t->dtype;
    w->rank = (uint32_t)t->rank;
    memcpy(w->shape, t->shape, sizeof w->shape);
    memcpy(w->strides, t->strides, sizeof w->strides);
    return 0;
}

int gllm_attention_submit(gllm_client *c, const gllm_attention_params *p, uint64_t *job)
{
    if (!p || p->size < sizeof *p)
        return -EINVAL;
    struct proto_attention a = {0};
    int r;
    if ((r = to_wire(c, &p->q, &a.q)) < 0 || (r = to_wire(c, &p->k, &a.k)) < 0 ||
        (r = to_wire(c, &p->v, &a.v)) < 0 || (r = to_wire(c, &p->out, &a.out)) < 0)
        return r;
    if (p->flags & GLLM_ATTN_LSE) {
        if ((r = to_wire(c, &p->lse, &a.lse)) < 0)
            return r;
        a.has_lse = true;
    }
    a.causal = p->flags & GLLM_ATTN_CAUSAL;
    a.has_scale = p->flags & GLLM_ATTN_SCALE;
    a.scale = p->scale;
    uint64_t id;
    msgpack_packer *pk = begin_request(c, "attention", &id);
    proto_pack_attention(pk, &a);
    if ((r = send_job(c, id)) < 0)
        return r;
    *job = id;
    return 0;
}

static int paged_kv_to_wire(gllm_client *c, const gllm_paged_kv *kv, struct proto_paged *w)
{
    int r;
    if ((r = to_wire(c, &kv->k_cache, &w->k_cache)) < 0 ||
        (r = to_wire(c, &kv->v_cache, &w->v_cache)) < 0 ||
        (r = to_wire(c, &kv->indptr, &w->kv_indptr)) < 0 ||
        (r = to_wire(c, &kv->indices, &w->kv_indices)) < 0)
        return r;
    return to_wire(c, &kv->last_page_len, &w->kv_last_page_len);
}

static int paged_submit(gllm_client *c, const char *method, const struct proto_paged *w,
                        uint64_t *job)
{
    uint64_t id;
    msgpack_packer *pk = begin_request(c, method, &id);
    proto_pack_paged(pk, w);
    int r = send_job(c, id);
    if (r < 0)
        return r;
    *job = id;
    return 0;
}

int gllm_kv_append_submit(gllm_client *c, const gllm_kv_append_params *p, uint64_t *job)
{
    if (!p || p->size < sizeof *p)
        return -EINVAL;
    struct proto_paged w = {.op = PROTO_KV_APPEND};
    int r;
    if ((r = paged_kv_to_wire(c, &p->kv, &w)) < 0 || (r = to_wire(c, &p->k, &w.k)) < 0 ||
        (r = to_wire(c, &p->v, &w.v)) < 0 || (r = to_wire(c, &p->append_indptr, &w.append_indptr)) < 0)
        return r;
    return paged_submit(c, "kv_append", &w, job);
}

static int paged_attention_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                  enum proto_paged_op op, uint64_t *job)
{
    if (!p || p->size < sizeof *p || (p->flags & ~GLLM_ATTN_SCALE))
        return -EINVAL;
    struct proto_paged w = {.op = op};
    int r;
    if ((r = paged_kv_to_wire(c, &p->kv, &w)) < 0 || (r = to_wire(c, &p->q, &w.q)) < 0 ||
        (r = to_wire(c, &p->out, &w.out)) < 0)
        return r;
    if (op == PROTO_PREFILL && (r = to_wire(c, &p->qo_indptr, &w.qo_indptr)) < 0)
        return r;
    w.has_scale = p->flags & GLLM_ATTN_SCALE;
    w.scale = p->scale;
    return paged_submit(c, op == PROTO_DECODE ? "attention_decode" : "attention_prefill", &w, job);
}

int gllm_attention_decode_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                 uint64_t *job)
{
    return paged_attention_submit(c, p, PROTO_DECODE, job);
}

int gllm_attention_prefill_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                  uint64_t *job)
{
    return paged_attention_submit(c, p, PROTO_PREFILL, job);
}

static int claim(gllm_client *c, struct job_slot *j, gllm_job_result *res)
{
    gllm_job_result out = j->res;
    if (out.status < 0)
        memcpy(c->last_error, j->message, sizeof c->last_error);
    *j = c->jobs[--c->njobs];   /* order of slots does not matter */
    if (res)
        *res = out;
    return out.status;
}

int gllm_job_poll(gllm_client *c, uint64_t job, gllm_job_result *res)
{
    struct job_slot *j = find_job(c, job);
    if (!j)
        return GLLM_ENOJOB;
    if (!j->done) {
        /* Replies read before a disconnect still count: look at the job before r. */
        int r = drain_ring(c);
        if (r == 0)
            r = receive(c, false);
        j = find_job(c, job);
        if (!j->done)
            return r < 0 ? r : -EAGAIN;
    }
    return claim(c, j, res);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gllm_client_set_wait_spin(gllm_client *c, uint32_t us)
{
    c->wait_spin_ns = (uint64_t)us * 1000;
}

/* While spinning with a ring, the socket is read this often: it still carries errors and
 * replies published before `polling` was set. */
#define RING_SOCKET_CHECK_NS 5000

/* The spin of gllm_job_wait with a reply ring: `polling` tells gllmd to spare the socket
 * copy. Before we stop, the flag is cleared and the ring read once more (proto/ring.h). */
static int spin_on_ring(gllm_client *c, uint64_t job, uint64_t until)
{
    struct gllm_ring *rg = c->ring;
    atomic_store_explicit(&rg->polling, 1, memory_order_seq_cst);
    uint64_t next_socket = 0;
    int r = 0;
    for (;;) {
        if ((r = drain_ring(c)) < 0 || find_job(c, job)->done)
            break;
        const uint64_t now = mono_ns();
        if (now >= until)
            break;
        if (now >= next_socket) {
            next_socket = now + RING_SOCKET_CHECK_NS;
            if ((r = receive(c, false)) < 0 || find_job(c, job)->done)
                break;
        }
    }
    atomic_store_explicit(&rg->polling, 0, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    int r2 = drain_ring(c);
    return r < 0 ? r : r2;
}

int gllm_job_wait(gllm_client *c, uint64_t job, gllm_job_result *res)
{
    struct job_slot *j = find_job(c, job);
    if (!j)
        return GLLM_ENOJOB;
    int r = drain_ring(c);
    j = find_job(c, job);
    const uint64_t spin_until = c->wait_spin_ns && !j->done ? mono_ns() + c->wait_spin_ns : 0;
    if (r == 0 && spin_until && c->ring) {
        r = spin_on_ring(c, job, spin_until);
        j = find_job(c, job);
    }
    /* Without a ring's polling flag set, every reply also comes by the socket. */
    while (!j->done) {
        if (r < 0)
            return r;
        r = receive(c, !spin_until || c->ring || mono_ns() >= spin_until);
        const int r2 = drain_ring(c);   /* the same replies: keeps the ring from filling */
        if (r == 0)
            r = r2;
        j = find_job(c, job);
    }
    return claim(c, j, res);
}

/* The synchronous forms: submit, then wait. */
#define GLLM_SYNC_(name, ptype)                                                          \
    int name(gllm_client *c, const ptype *p, gllm_job_result *res)                       \
    {                                                                                    \
        uint64_t job;                                                                    \
        int r = name##_submit(c, p, &job);                                               \
        return r < 0 ? r : gllm_job_wait(c, job, res);                                   \
    }
GLLM_SYNC_(gllm_attention, gllm_attention_params)
GLLM_SYNC_(gllm_kv_append, gllm_kv_append_params)
GLLM_SYNC_(gllm_attention_decode, gllm_paged_attention_params)
GLLM_SYNC_(gllm_attention_prefill, gllm_paged_attention_params)
