/* A device's buffers as the daemon sees them: device tensors handed out as their device
 * addresses, found again by address for copies and staging (any thread; one lock). */
#ifndef GLLMD_VK_MEMORY_H
#define GLLMD_VK_MEMORY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "vk_device.h"

struct vk_memory {
    pthread_mutex_t lock;
    struct vk_buf *b;           /* sorted by addr */
    int n, cap;
    uint64_t used;
};

void vk_memory_init(struct vk_memory *m);
/* Frees every buffer still held (a reset, a close) and keeps m usable. */
void vk_memory_release(struct vk_memory *m, struct vk_dev *d);
void vk_memory_destroy(struct vk_memory *m, struct vk_dev *d);

/* A buffer of bytes; *out is its device address, as the pointer jobs name it by. */
int vk_memory_alloc(struct vk_memory *m, struct vk_dev *d, size_t bytes, void **out);
void vk_memory_free(struct vk_memory *m, struct vk_dev *d, void *p);

/* The host mapping of [addr, addr + bytes) when one buffer holds it all, else NULL. */
void *vk_memory_host(struct vk_memory *m, uint64_t addr, size_t bytes);

#endif
