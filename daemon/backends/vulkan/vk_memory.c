/* A device's buffers by device address (see vk_memory.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vk_memory.h"

void vk_memory_init(struct vk_memory *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

void vk_memory_release(struct vk_memory *m, struct vk_dev *d)
{
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++)
        vk_buf_free(d, &m->b[i]);
    m->n = 0;
    m->used = 0;
    pthread_mutex_unlock(&m->lock);
}

void vk_memory_destroy(struct vk_memory *m, struct vk_dev *d)
{
    vk_memory_release(m, d);
    free(m->b);
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof *m);
}

/* Index of the first buffer whose address is above addr. */
static int upper(const struct vk_memory *m, uint64_t addr)
{
    int lo = 0, hi = m->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->b[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int vk_memory_alloc(struct vk_memory *m, struct vk_dev *d, size_t bytes, void **out)
{
    struct vk_buf b;
    int rc = vk_buf_make(d, bytes, &b);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&m->lock);
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        struct vk_buf *nb = realloc(m->b, (size_t)cap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&m->lock);
            vk_buf_free(d, &b);
            return -ENOMEM;
        }
        m->b = nb;
        m->cap = cap;
    }
    int at = upper(m, b.addr);
    memmove(&m->b[at + 1], &m->b[at], (size_t)(m->n - at) * sizeof *m->b);
    m->b[at] = b;
    m->n++;
    m->used += bytes;
    pthread_mutex_unlock(&m->lock);
    *out = (void *)(uintptr_t)b.addr;
    return 0;
}

void vk_memory_free(struct vk_memory *m, struct vk_dev *d, void *p)
{
    const uint64_t addr = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&m->lock);
    int at = upper(m, addr) - 1;
    if (at >= 0 && m->b[at].addr == addr) {
        struct vk_buf b = m->b[at];
        memmove(&m->b[at], &m->b[at + 1], (size_t)(m->n - at - 1) * sizeof *m->b);
        m->n--;
        m->used -= b.bytes;
        vk_buf_free(d, &b);
    }
    pthread_mutex_unlock(&m->lock);
}

void *vk_memory_host(struct vk_memory *m, uint64_t addr, size_t bytes)
{
    void *host = NULL;
    pthread_mutex_lock(&m->lock);
    int at = upper(m, addr) - 1;
    if (at >= 0) {
        const struct vk_buf *b = &m->b[at];
        const uint64_t off = addr - b->addr;
        if (off <= b->bytes && bytes <= b->bytes - off)
            host = (char *)b->map + off;
    }
    pthread_mutex_unlock(&m->lock);
    return host;
}
