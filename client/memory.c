/* libgllm-client memory handles: arenas, device and shared memory behind one handle type, and tensors in them. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"
#include "cuda_stream.h"

void memory_attach(gllm_client *c, gllm_memory *m)
{
    m->c = c;
    m->prev = NULL;
    m->next = c->memory;
    if (c->memory)
        c->memory->prev = m;
    c->memory = m;
}

static void detach(gllm_memory *m)
{
    if (m->prev)
        m->prev->next = m->next;
    else
        m->c->memory = m->next;
    if (m->next)
        m->next->prev = m->prev;
    m->c = NULL;
}

void memory_detach_all(gllm_client *c)
{
    for (gllm_memory *m = c->memory; m; m = m->next)
        m->c = NULL;
    c->memory = NULL;
}

/* The daemon's id for what it made of our request: in (0, UINT32_MAX]. */
static int reply_id(gllm_client *c, const char *key, uint32_t *out)
{
    uint64_t id = 0;
    int r = proto_get_u64(c->calls.call_msg.result, key, true, &id);
    rpc_end(c);
    if (r < 0 || id == 0 || id > UINT32_MAX)
        return GLLM_EMALFORMED;
    *out = (uint32_t)id;
    return 0;
}

int gllm_arena_create(gllm_client *c, size_t bytes, gllm_memory **out)
{
    if (bytes == 0)
        return -EINVAL;
    gllm_memory *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    int r;
    int fd = memfd_create("gllm-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        r = -errno;
        goto fail;
    }
    /* Sealed against shrinking, the daemon's mapping can never lose its pages. */
    if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
        r = -errno;
        goto fail;
    }
    m->data = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m->data == MAP_FAILED) {
        r = -errno;
        m->data = NULL;
        goto fail;
    }
    m->kind = GLLM_MEMORY_ARENA;
    m->size = bytes;
    m->device = -1;
    m->fd = -1;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "arena_register", &id);
    msgpack_pack_map(pk, 1);
    proto_pack_kv_u64(pk, "size", bytes);
    if ((r = rpc_call(c, id, fd)) < 0 || (r = reply_id(c, "arena", &m->id)) < 0)
        goto fail;
    close(fd);
    memory_attach(c, m);
    *out = m;
    return 0;
fail:
    if (m->data)
        munmap(m->data, bytes);
    if (fd >= 0)
        close(fd);
    free(m);
    return r;
}

int gllm_dtensor_create(gllm_client *c, size_t bytes, int device, gllm_memory **out)
{
    if (bytes == 0 || device < 0)
        return -EINVAL;
    gllm_memory *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "dtensor_create", &id);
    msgpack_pack_map(pk, 2);
    proto_pack_kv_u64(pk, "bytes", bytes);
    proto_pack_kv_u64(pk, "device", (uint64_t)device);
    int r;
    if ((r = rpc_call(c, id, -1)) < 0 || (r = reply_id(c, "dtensor", &m->id)) < 0) {
        free(m);
        return r;
    }
    m->kind = GLLM_MEMORY_DEVICE;
    m->size = bytes;
    m->device = device;
    m->fd = -1;
    memory_attach(c, m);
    *out = m;
    return 0;
}

/* After gllm_disconnect only the handle (and our own mapping of it) is freed: the daemon
 * gave back its side when the connection closed. Shared memory is unmapped here after
 * gllmd let go of it, so a job of ours still running can never see it vanish first. */
int gllm_memory_release(gllm_memory *m)
{
    if (!m)
        return 0;
    int r = 0;
    gllm_client *c = m->c;
    if (c) {
        const bool arena = m->kind == GLLM_MEMORY_ARENA;
        uint64_t id;
        msgpack_packer *pk = rpc_begin(c, arena ? "arena_release" : "dtensor_free", &id);
        msgpack_pack_map(pk, 1);
        proto_pack_kv_u64(pk, arena ? "arena" : "dtensor", m->id);
        r = rpc_call(c, id, -1);
        rpc_end(c);
        detach(m);
    }
    cuda_stream_unregister(m->stream_reg);   /* before the memory it registered goes */
    if (m->data)
        munmap(m->data, m->size);
    cuda_unmap(m->cuda);
    if (m->fd >= 0)
        close(m->fd);
    free(m);
    return r;
}

enum share_kind memory_share_parse(const char *s, size_t n)
{
    static const struct {
        const char *name;
        enum share_kind kind;
    } kinds[] = {{"memfd", SHARE_MEMFD}, {"cuda_vmm_fd", SHARE_CUDA_VMM}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (n == strlen(kinds[i].name) && memcmp(s, kinds[i].name, n) == 0)
            return kinds[i].kind;
    return SHARE_NONE;
}

gllm_memory_kind gllm_memory_kind_of(const gllm_memory *m)
{
    return m->kind;
}

void *gllm_memory_data(const gllm_memory *m)
{
    return m->data;
}

size_t gllm_memory_size(const gllm_memory *m)
{
    return m->size;
}

int gllm_tensor_init(gllm_memory *m, uint64_t offset, gllm_dtype dtype, int rank,
                     const int64_t *shape, gllm_tensor *out)
{
    if (rank < 0 || rank > GLLM_MAX_RANK || proto_dtype_size(dtype) == 0)
        return -EINVAL;
    gllm_tensor v = {.memory = m, .offset = offset, .dtype = dtype, .rank = rank};
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        if (shape[i] < 0)
            return -EINVAL;
        v.shape[i] = shape[i];
        v.strides[i] = s;
        if (shape[i] > 0 && __builtin_mul_overflow(s, shape[i], &s))
            return GLLM_EOVERFLOW;
    }
    *out = v;
    return 0;
}

int memory_tensor_to_wire(gllm_client *c, const gllm_tensor *t, struct proto_tensor *w)
{
    if (t->rank < 0 || t->rank > GLLM_MAX_RANK || !t->memory || t->memory->c != c)
        return -EINVAL;
    w->device = t->memory->kind != GLLM_MEMORY_ARENA;   /* device and shared: a dtensor */
    w->arena = t->memory->id;
    w->offset = t->offset;
    w->dtype = t->dtype;
    w->rank = (uint32_t)t->rank;
    memcpy(w->shape, t->shape, sizeof w->shape);
    memcpy(w->strides, t->strides, sizeof w->strides);
    return 0;
}
