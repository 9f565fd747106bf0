/* gllmd's end of a connection's rings: map them, publish replies, read and set the flags. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "conn_ring.h"
#include "gllm/errors.h"

int conn_ring_open(int fd, struct conn_ring **out)
{
    struct conn_ring *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    int e = arena_map(fd, GLLM_RING_BYTES, &r->map);
    if (e < 0) {
        free(r);
        return e;
    }
    r->shm = r->map->base;
    /* The client's counters start at zero: a ring handed over mid-count would have its
     * requests read from the wrong slot or its replies dropped as a full ring. */
    if (atomic_load_explicit(&r->shm->request_head, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&r->shm->reply_tail, memory_order_relaxed) != 0) {
        arena_unref(r->map);
        free(r);
        return GLLM_EPARAM;
    }
    atomic_store_explicit(&r->shm->reply_head, 0, memory_order_relaxed);
    atomic_store_explicit(&r->shm->request_tail, 0, memory_order_relaxed);
    atomic_store_explicit(&r->shm->gllmd_polling, 0, memory_order_relaxed);
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return 0;
}

void conn_ring_close(struct conn_ring *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    arena_unref(r->map);
    free(r);
}

bool conn_ring_publish(struct conn_ring *r, const void *data, size_t len)
{
    if (len > sizeof r->shm->reply[0].data)
        return false;
    pthread_mutex_lock(&r->lock);
    const uint32_t tail = atomic_load_explicit(&r->shm->reply_tail, memory_order_acquire);
    /* In use: head - tail, at most the slot count for an honest client; a tail ahead of
     * head wraps to a huge count and reads as full too. */
    const bool room = r->reply_head - tail < GLLM_RING_REPLY_SLOTS;
    if (room) {
        struct gllm_ring_reply_slot *s = &r->shm->reply[r->reply_head % GLLM_RING_REPLY_SLOTS];
        memcpy(s->data, data, len);
        s->len = (uint32_t)len;
        r->reply_head++;
        atomic_store_explicit(&r->shm->reply_head, r->reply_head, memory_order_release);
    }
    pthread_mutex_unlock(&r->lock);
    return room;
}

bool conn_ring_client_polling(struct conn_ring *r)
{
    /* Pairs with the client's fence between clearing `polling` and its last look. */
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&r->shm->polling, memory_order_relaxed) != 0;
}

void conn_ring_set_polling(struct conn_ring *r, bool on)
{
    atomic_store_explicit(&r->shm->gllmd_polling, on ? 1u : 0u, memory_order_seq_cst);
}
