/* libgllm-client shared memory: gllmd's exports mapped here, the client's own memory imported by gllmd. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"

/* Frees dtensor id in the daemon after a reply we cannot use: best effort, the connection
 * closing would free it anyway. */
static void free_in_daemon(gllm_client *c, uint64_t dtensor)
{
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "dtensor_free", &id);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "dtensor", dtensor);
    rpc_call(c, id, -1);
    rpc_end(c);
}

/* The reply's "dtensor" and "bytes", and its "export" kind when kind is not NULL; the reply
 * is ended either way. The daemon may round up, never down. */
static int decode_reply(gllm_client *c, size_t asked, uint64_t *dtensor, size_t *bytes,
                        enum share_kind *kind)
{
    const msgpack_object *res = c->calls.call_msg.result;
    uint64_t id = 0, got = 0;
    int r = 0;
    if (proto_get_u64(res, "dtensor", true, &id) < 0 || id == 0 || id > UINT32_MAX)
        r = GLLM_EMALFORMED;
    *dtensor = r == 0 ? id : 0;
    if (r == 0 && (proto_get_u64(res, "bytes", true, &got) < 0 || got < asked || got > SIZE_MAX))
        r = GLLM_EMALFORMED;
    if (r == 0 && kind) {
        const msgpack_object *k = proto_map_get(res, "export");
        *kind = k && k->type == MSGPACK_OBJECT_STR
                    ? memory_share_parse(k->via.str.ptr, k->via.str.size)
                    : SHARE_NONE;
        if (*kind != c->hello.share)
            r = GLLM_EMALFORMED;
    }
    rpc_end(c);
    *bytes = (size_t)got;
    return r;
}

/* A shared-memory handle the daemon answered for, filled in and put on the client's list. */
static void attach_shared(gllm_client *c, gllm_memory *m, uint64_t dtensor, size_t size,
                          int device, enum share_kind kind, bool imported, int fd)
{
    m->kind = GLLM_MEMORY_SHARED;
    m->id = (uint32_t)dtensor;
    m->size = size;
    m->device = device;
    m->share = kind;
    m->imported = imported;
    m->fd = fd;
    memory_attach(c, m);
}

int gllm_memory_create_shared(gllm_client *c, size_t bytes, int device, gllm_memory **out)
{
    if (bytes == 0 || device < 0)
        return -EINVAL;
    if (c->hello.share == SHARE_NONE)
        return -EOPNOTSUPP;
    gllm_memory *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "dtensor_create", &id);
    msgpack_pack_map(pk, 3);
    proto_pack_kv_u64(pk, "bytes", bytes);
    proto_pack_kv_u64(pk, "device", (uint64_t)device);
    proto_pack_kv_bool(pk, "export", true);
    int fd = -1;
    int r = rpc_call_fd(c, id, -1, &fd);
    if (r < 0) {
        free(m);
        return r;
    }
    uint64_t dtensor;
    size_t size;
    enum share_kind kind;
    r = decode_reply(c, bytes, &dtensor, &size, &kind);
    if (r == 0 && fd < 0)
        r = GLLM_EMALFORMED;   /* an export's reply carries exactly one fd */
    if (r == 0 && kind == SHARE_MEMFD) {
        /* Mapped now, so gllm_memory_data has it at once; the mapping keeps the memfd. */
        m->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m->data == MAP_FAILED) {
            r = -errno;
            m->data = NULL;
        }
        close(fd);
        fd = -1;
    }
    if (r < 0) {
        if (fd >= 0)
            close(fd);
        if (dtensor)
            free_in_daemon(c, dtensor);
        free(m);
        return r;
    }
    attach_shared(c, m, dtensor, size, device, kind, false, fd);   /* CUDA: its fd is
                                                 * imported on the first gllm_memory_map */
    *out = m;
    return 0;
}

int gllm_memory_import(gllm_client *c, int fd, size_t bytes, int device, gllm_memory **out)
{
    if (fd < 0 || bytes == 0 || device < 0)
        return -EINVAL;
    if (c->hello.share == SHARE_NONE)
        return -EOPNOTSUPP;
    gllm_memory *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "dtensor_import", &id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "bytes", bytes);
    proto_pack_kv_u64(pk, "device", (uint64_t)device);
    int r = rpc_call(c, id, fd);
    uint64_t dtensor = 0;
    size_t size = 0;
    if (r == 0 && (r = decode_reply(c, bytes, &dtensor, &size, NULL)) < 0 && dtensor)
        free_in_daemon(c, dtensor);
    if (r < 0) {
        free(m);
        return r;
    }
    attach_shared(c, m, dtensor, size, device, c->hello.share, true, -1);
    *out = m;
    return 0;
}

int gllm_memory_map(gllm_memory *m, void **ptr)
{
    if (!m || !ptr || m->kind != GLLM_MEMORY_SHARED || m->imported)
        return -EINVAL;
    if (m->share == SHARE_MEMFD) {
        *ptr = m->data;
        return 0;
    }
    if (!m->cuda) {
        char why[PROTO_MAX_ERRMSG + 1];
        uint64_t p;
        int r = cuda_map_fd(m->fd, m->size, &m->cuda, &p, why, sizeof why);
        if (r < 0) {
            if (m->c)
                snprintf(m->c->last_error, sizeof m->c->last_error, "%s", why);
            return r;
        }
        /* The imported handle holds the allocation now: the fd has done its work. */
        close(m->fd);
        m->fd = -1;
    }
    *ptr = (void *)(uintptr_t)cuda_mapping_ptr(m->cuda);
    return 0;
}
