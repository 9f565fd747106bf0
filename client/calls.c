/* libgllm-client call matching: replies found by request id in a hash table, never searched. */
#include <stdlib.h>
#include <unistd.h>

#include "client_internal.h"

/* Fibonacci hashing: sequential ids spread over the whole table. */
static size_t slot_of(const struct call_table *t, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (t->cap - 1);
}

void calls_free(struct call_table *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->slots[i].message);
    free(t->slots);
    t->slots = NULL;
    t->cap = t->count = 0;
    calls_end(t);
}

static void insert(struct call_table *t, const struct call_job *j)
{
    size_t i = slot_of(t, j->id);
    while (t->slots[i].id)
        i = (i + 1) & (t->cap - 1);
    t->slots[i] = *j;
}

static int grow(struct call_table *t)
{
    const size_t cap = t->cap ? t->cap * 2 : 32;
    struct call_job *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    struct call_table old = *t;
    t->slots = slots;
    t->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].id)
            insert(t, &old.slots[i]);
    free(old.slots);
    return 0;
}

int calls_add_job(struct call_table *t, uint64_t id)
{
    if (t->count >= GLLM_MAX_PENDING_JOBS)
        return GLLM_EBUSY;
    if (2 * (t->count + 1) > t->cap) {
        int r = grow(t);
        if (r < 0)
            return r;
    }
    insert(t, &(struct call_job){.id = id});
    t->count++;
    return 0;
}

struct call_job *calls_find_job(struct call_table *t, uint64_t id)
{
    if (id == 0 || t->count == 0)
        return NULL;
    for (size_t i = slot_of(t, id); t->slots[i].id; i = (i + 1) & (t->cap - 1))
        if (t->slots[i].id == id)
            return &t->slots[i];
    return NULL;
}

void calls_remove_job(struct call_table *t, struct call_job *j)
{
    /* Backward-shift deletion: later members of the probe run move up into the hole
     * unless their home slot lies cyclically after it, so no tombstones are needed. */
    const size_t mask = t->cap - 1;
    size_t hole = (size_t)(j - t->slots);
    for (size_t i = (hole + 1) & mask; t->slots[i].id; i = (i + 1) & mask) {
        const size_t home = slot_of(t, t->slots[i].id);
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            t->slots[hole] = t->slots[i];
            hole = i;
        }
    }
    t->slots[hole] = (struct call_job){0};
    t->count--;
}

void calls_expect(struct call_table *t, uint64_t id)
{
    calls_end(t);
    t->call_id = id;
    t->call_done = false;
    t->call_error = 0;
    t->call_wants_fd = false;
}

void calls_end(struct call_table *t)
{
    if (t->call_msg_valid)
        proto_msg_free(&t->call_msg);
    t->call_msg_valid = false;
    if (t->call_has_fd)
        close(t->call_fd);   /* a reply's fd nobody took: never leaked */
    t->call_has_fd = false;
}

static void decode_job_reply(const struct proto_msg *m, gllm_job_result *res)
{
    *res = (gllm_job_result){.size = sizeof *res, .status = m->error_code};
    if (m->error_code != 0)
        return;
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

int calls_route(struct call_table *t, const char *packet, size_t len, char *last_error)
{
    return calls_route_fd(t, packet, len, last_error, -1);
}

int calls_route_fd(struct call_table *t, const char *packet, size_t len, char *last_error,
                   int fd)
{
    struct proto_msg m;
    int64_t id = -1;
    int r = proto_decode(packet, len, &m, &id);
    if (r < 0) {
        if (fd >= 0)
            close(fd);
        return r;   /* the daemon never sends such a packet: the stream is not to be trusted */
    }
    if (m.kind != PROTO_RESPONSE) {
        proto_msg_free(&m);
        if (fd >= 0)
            close(fd);
        return 0;   /* notifications: none defined yet */
    }
    struct call_job *j = id >= 0 ? calls_find_job(t, m.id) : NULL;
    if (j && !j->done) {
        decode_job_reply(&m, &j->res);
        /* A message is kept only for a failure: a claimed failure copies it to last_error. */
        if (m.error_code && m.error_message[0])
            j->message = strdup(m.error_message);
        j->done = true;
        proto_msg_free(&m);
    } else if (id >= 0 && m.id == t->call_id && !t->call_done) {
        t->call_msg = m;
        t->call_msg_valid = true;
        t->call_done = true;
        if (fd >= 0 && t->call_wants_fd && !t->call_has_fd) {
            t->call_fd = fd;
            t->call_has_fd = true;
            fd = -1;
        }
    } else if (id < 0 && !t->call_done) {
        /* An error the daemon could not tie to an id: it can only be about the call in flight. */
        t->call_error = m.error_code;
        memcpy(last_error, m.error_message, PROTO_MAX_ERRMSG + 1);
        t->call_done = true;
        proto_msg_free(&m);
    } else {
        proto_msg_free(&m);
    }
    if (fd >= 0)
        close(fd);   /* a reply that expects none: an fd must never leak into this process */
    return 0;
}
