/* Host memory pinned a piece at a time, and host copies split where a piece ends (cuda_pin.h). */
#include <stdlib.h>
#include <sys/mman.h>

#include "cuda_pin.h"
#include "mman_compat.h"

struct cuda_pin {
    void *p;
    size_t len;
    struct cuda_pin *next;
};

static void unregister_pieces(const struct cuda_driver *d, void *p, size_t len)
{
    for (size_t off = 0; off < len; off += cuda_pin_piece((uintptr_t)p + off, len - off))
        d->cuMemHostUnregister((char *)p + off);
}

CUresult cuda_pin(const struct cuda_driver *d, struct cuda_pins *pins, void *p, size_t len,
                  unsigned flags)
{
    struct cuda_pin *rec = malloc(sizeof *rec);
    if (!rec)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t off = 0;
    while (off < len) {
        const size_t n = cuda_pin_piece((uintptr_t)p + off, len - off);
        /* The piece's page tables made first, outside the driver, and a piece at a time: the
         * populating holds the process's mmap lock, which any mmap or munmap of another
         * thread (the driver's, the allocator's) then waits for. Before Linux 5.14 (EINVAL),
         * or on memory that cannot take it, the driver makes them. */
        (void)madvise((char *)p + off, n, MADV_POPULATE_WRITE);
        CUresult r = d->cuMemHostRegister((char *)p + off, n, flags);
        if (r != CUDA_SUCCESS) {
            unregister_pieces(d, p, off);
            free(rec);
            return r;
        }
        off += n;
    }
    *rec = (struct cuda_pin){.p = p, .len = len};
    pthread_mutex_lock(&pins->lock);
    rec->next = pins->list;
    pins->list = rec;
    pthread_mutex_unlock(&pins->lock);
    return CUDA_SUCCESS;
}

void cuda_unpin(const struct cuda_driver *d, struct cuda_pins *pins, void *p)
{
    struct cuda_pin *rec = NULL;
    pthread_mutex_lock(&pins->lock);
    for (struct cuda_pin **at = &pins->list; *at; at = &(*at)->next)
        if ((*at)->p == p) {
            rec = *at;
            *at = rec->next;
            break;
        }
    pthread_mutex_unlock(&pins->lock);
    if (!rec)
        return;
    unregister_pieces(d, rec->p, rec->len);
    free(rec);
}

void cuda_pins_clear(struct cuda_pins *pins)
{
    while (pins->list) {
        struct cuda_pin *rec = pins->list;
        pins->list = rec->next;
        free(rec);
    }
}

CUresult cuda_copy_htod(const struct cuda_driver *d, CUdeviceptr dst, const void *src, size_t n,
                        CUstream s)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t off = 0, k; r == CUDA_SUCCESS && off < n; off += k) {
        k = cuda_pin_piece((uintptr_t)src + off, n - off);
        r = d->cuMemcpyHtoDAsync(dst + off, (const char *)src + off, k, s);
    }
    return r;
}

CUresult cuda_copy_dtoh(const struct cuda_driver *d, void *dst, CUdeviceptr src, size_t n,
                        CUstream s)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t off = 0, k; r == CUDA_SUCCESS && off < n; off += k) {
        k = cuda_pin_piece((uintptr_t)dst + off, n - off);
        r = d->cuMemcpyDtoHAsync((char *)dst + off, src + off, k, s);
    }
    return r;
}
