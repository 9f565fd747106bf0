/* gllmd's end of a session's reply ring: map it, publish into it, read the client's flag. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "reply_ring.h"

int reply_ring_open(int fd, struct reply_ring **out)
{
    struct reply_ring *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    int e = arena_map(fd, GLLM_RING_BYTES, &r->map);
    if (e < 0) {
        free(r);
        return e;
    }
    r->shm = r->map->base;
    atomic_store_explicit(&r->shm->head, 0, memory_order_relaxed);
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return 0;
}

void reply_ring_close(struct reply_ring *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    arena_unref(r->map);
    free(r);
}

bool reply_ring_publish(struct reply_ring *r, const void *data, size_t len)
{
    if (len > sizeof r->shm->slot[0].data)
        return false;
    pthread_mutex_lock(&r->lock);
    const uint32_t tail = atomic_load_explicit(&r->shm->tail, memory_order_acquire);
    /* In use: head - tail, at most GLLM_RING_SLOTS for an honest client; a tail ahead of
     * head wraps to a huge count and reads as full too. */
    const bool room = r->head - tail < GLLM_RING_SLOTS;
    if (room) {
        struct gllm_ring_slot *s = &r->shm->slot[r->head % GLLM_RING_SLOTS];
        memcpy(s->data, data, len);
        s->len = (uint32_t)len;
        r->head++;
        atomic_store_explicit(&r->shm->head, r->head, memory_order_release);
    }
    pthread_mutex_unlock(&r->lock);
    return room;
}

bool reply_ring_client_polling(struct reply_ring *r)
{
    /* Pairs with the client's fence between clearing `polling` and its last look at head. */
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&r->shm->polling, memory_order_relaxed) != 0;
}
