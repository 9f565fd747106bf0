/* gllmd's end of a connection's rings (proto/ring.h): replies from workers, the polling flags. */
#ifndef GLLMD_CONN_RING_H
#define GLLMD_CONN_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

struct arena;

struct conn_ring {
    struct arena *map;              /* the client's sealed memfd, mapped */
    struct gllm_ring *shm;
    pthread_mutex_t lock;           /* workers of several devices may publish at once */
    uint32_t reply_head;            /* ours; the copies in shm are never read back */
    uint32_t request_tail;          /* loop thread only */
};

/* Maps fd (a sealed memfd of GLLM_RING_BYTES) and starts empty rings on it. */
int conn_ring_open(int fd, struct conn_ring **out);
void conn_ring_close(struct conn_ring *r);
/* Worker threads. Copies one reply packet into the next slot; false when it does not fit
 * or the ring is full (or the client's tail makes no sense): the caller uses the socket. */
bool conn_ring_publish(struct conn_ring *r, const void *data, size_t len);
/* After a publish: whether the client spins on the ring, so the socket copy can be spared. */
bool conn_ring_client_polling(struct conn_ring *r);
/* Loop thread: tells the client whether the loop polls its requests (no wake needed). */
void conn_ring_set_polling(struct conn_ring *r, bool on);

#endif
