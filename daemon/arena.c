/* Arena checks and mapping: an unsealed or resized memfd could SIGBUS the daemon, so refuse it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "backend.h"
#include "device_health.h"
#include "gllm/errors.h"
#include "mman_compat.h"

int arena_map(int fd, uint64_t size, struct arena **out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return GLLM_ENOTMEMFD;
    /* Only memfds (and shmem files) answer F_GET_SEALS; other files give EINVAL. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return errno == EINVAL ? GLLM_ENOTMEMFD : -errno;
    if (!(seals & F_SEAL_SHRINK))
        return GLLM_EUNSEALED;
    if (size == 0 || (uint64_t)st.st_size != size || size > SIZE_MAX)
        return GLLM_EARENASIZE;
    struct arena *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        free(a);
        return -e;
    }
    a->refs = 1;
    a->base = p;
    a->size = size;
    *out = a;
    return 0;
}

void arena_populate(const struct arena *a, int fd)
{
    /* In the memfd itself, not mapped here: gllmd has no use for the page tables. Should the
     * memfd refuse (interrupted, say), this mapping makes them; and where that fails too
     * (no room, or before Linux 5.14), the pinning makes them or reports why not. */
    if (fallocate(fd, 0, 0, (off_t)a->size) < 0)
        (void)madvise(a->base, (size_t)a->size, MADV_POPULATE_WRITE);
}

int arena_new_device(struct backend *be, int dev, uint64_t size, struct arena **out)
{
    if (size == 0 || size > SIZE_MAX)
        return GLLM_EPARAM;
    struct arena *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    if (!health_lock(dev)) {       /* the device is being reset: nothing is made on it */
        free(a);
        return GLLM_EDEVLOST;
    }
    a->gen = health_gen(dev);
    int r = backend_dev_alloc(be, dev, (size_t)size, &a->base);
    health_unlock(dev);
    if (r < 0) {
        free(a);
        return r;
    }
    a->refs = 1;
    a->size = size;
    a->device = true;
    a->owner = be;
    a->dev = dev;
    *out = a;
    return 0;
}

/* A region of device memory shared with the client: made and exported here (fd_out set, the
 * caller sends and closes it) or imported from the client's fd (fd_in >= 0). */
static int new_shared(struct backend *be, int dev, uint64_t size, int fd_in, int *fd_out,
                      struct arena **out, char *why, size_t len)
{
    if (size == 0 || size > SIZE_MAX)
        return GLLM_EPARAM;
    struct arena *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    struct backend_shared sh;
    if (!health_lock(dev)) {
        free(a);
        snprintf(why, len, "device %d is being reset after a fault; try again", dev);
        return GLLM_EDEVLOST;
    }
    a->gen = health_gen(dev);
    int r = fd_in >= 0 ? backend_share_import(be, dev, fd_in, (size_t)size, &sh, why, len)
                       : backend_share_alloc(be, dev, (size_t)size, &sh, fd_out);
    health_unlock(dev);
    if (r < 0) {
        free(a);
        return r;
    }
    a->refs = 1;
    a->base = sh.ptr;
    a->size = sh.bytes;
    a->device = true;
    a->owner = be;
    a->dev = dev;
    a->share = fd_in >= 0 ? ARENA_IMPORTED : ARENA_EXPORTED;
    a->share_handle = sh.handle;
    *out = a;
    return 0;
}

int arena_new_exported(struct backend *be, int dev, uint64_t size, struct arena **out, int *fd)
{
    char why[160];
    return new_shared(be, dev, size, -1, fd, out, why, sizeof why);
}

int arena_import(struct backend *be, int dev, int fd, uint64_t size, struct arena **out,
                 char *why, size_t len)
{
    return new_shared(be, dev, size, fd, NULL, out, why, len);
}

bool arena_lost(const struct arena *a)
{
    return a->device && a->gen != health_gen(a->dev);
}

/* Device memory back to its backend, unless a reset took it already (then the same address
 * may belong to someone else now: it is not touched). */
static void free_device(struct arena *a)
{
    if (!health_lock(a->dev))
        return;            /* a reset is running: the memory is the reset's to release */
    if (a->gen == health_gen(a->dev)) {
        if (a->share != ARENA_OWN) {
            struct backend_shared sh = {.ptr = a->base, .bytes = (size_t)a->size,
                                        .handle = a->share_handle};
            backend_share_free(a->owner, a->dev, &sh);
        } else {
            backend_dev_free(a->owner, a->dev, a->base);
        }
    }
    health_unlock(a->dev);
}

struct arena *arena_ref(struct arena *a)
{
    a->refs++;
    return a;
}

void arena_unref(struct arena *a)
{
    if (!a || --a->refs > 0)
        return;
    if (a->reaper && (a->device || a->pinned_by || a->mapped_by))
        a->reaper->reap(a->reaper->ctx, a);
    else
        arena_teardown(a);
}

void arena_teardown(struct arena *a)
{
    if (a->device) {
        free_device(a);
        free(a);
        return;
    }
    if (a->pinned_by)
        backend_host_unregister(a->pinned_by, a->base);
    if (a->mapped_by)
        backend_host_unmap(a->mapped_by, a->base);
    munmap(a->base, (size_t)a->size);
    free(a);
}

int arena_table_add(struct arena_table *t, struct arena *a, uint32_t limit)
{
    if (limit > ARENA_TABLE_MAX)
        limit = ARENA_TABLE_MAX;
    if (t->count >= limit)
        return -ENOSPC;
    for (uint32_t i = 0; i < ARENA_TABLE_MAX; i++) {
        if (!t->slot[i]) {
            a->id = ++t->next_id;   /* id 0 is never valid */
            t->slot[i] = a;
            t->count++;
            return 0;
        }
    }
    return -ENOSPC;
}

struct arena *arena_table_find(const struct arena_table *t, uint32_t id)
{
    for (uint32_t i = 0; id && i < ARENA_TABLE_MAX; i++)
        if (t->slot[i] && t->slot[i]->id == id)
            return t->slot[i];
    return NULL;
}

struct arena *arena_table_remove(struct arena_table *t, uint32_t id)
{
    for (uint32_t i = 0; id && i < ARENA_TABLE_MAX; i++) {
        if (t->slot[i] && t->slot[i]->id == id) {
            struct arena *a = t->slot[i];
            t->slot[i] = NULL;
            t->count--;
            return a;
        }
    }
    return NULL;
}
