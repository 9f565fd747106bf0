/* The CPU backend's shared memory: a sealed memfd stands in for an exported GPU allocation, so
 * the whole shared-memory API runs (and is tested) on machines without a GPU. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu_share.h"

/* Both sides seal size and seals: neither can shrink the file under the other's mapping. */
#define CPU_SHARE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

size_t cpu_share_granularity(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

static int map_shared(int fd, size_t bytes, struct backend_shared *out)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    *out = (struct backend_shared){.ptr = p, .bytes = bytes};
    return 0;
}

int cpu_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                    int *fd)
{
    (void)be;
    if (dev != 0)
        return -ENODEV;
    if (bytes == 0 || bytes % cpu_share_granularity() != 0)
        return -EINVAL;
    int f = memfd_create("gllm-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return -errno;
    int r = 0;
    if (ftruncate(f, (off_t)bytes) < 0 || fcntl(f, F_ADD_SEALS, CPU_SHARE_SEALS) < 0)
        r = -errno;
    if (r == 0)
        r = map_shared(f, bytes, out);
    if (r < 0) {
        close(f);
        return r == -EFBIG || r == -ENOSPC ? -ENOMEM : r;
    }
    *fd = f;
    return 0;
}

int cpu_share_import(struct backend *be, int dev, int fd, size_t bytes,
                     struct backend_shared *out, char *why, size_t len)
{
    (void)be;
    if (dev != 0)
        return -ENODEV;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        snprintf(why, len, "the fd is not a memfd (the CPU backend shares memfds)");
        return GLLM_ENOTEXPORT;
    }
    if (!(seals & F_SEAL_SHRINK)) {
        snprintf(why, len, "the memfd is not sealed against shrinking (F_SEAL_SHRINK)");
        return GLLM_EUNSEALED;
    }
    if (bytes == 0 || bytes % cpu_share_granularity() != 0) {
        snprintf(why, len, "%zu bytes is not a positive multiple of the granularity, %zu",
                 bytes, cpu_share_granularity());
        return GLLM_EPARAM;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size != bytes) {
        snprintf(why, len, "the memfd holds %lld bytes, not the %zu stated",
                 (long long)st.st_size, bytes);
        return GLLM_EARENASIZE;
    }
    return map_shared(fd, bytes, out);
}

void cpu_share_free(struct backend *be, int dev, const struct backend_shared *s)
{
    (void)be, (void)dev;
    if (s->ptr)
        munmap(s->ptr, s->bytes);
}
