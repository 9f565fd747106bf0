/* gllmd's end of a session's rings (proto/ring.h): replies from workers, the polling flags. */
#ifndef GLLMD_SESSION_RING_H
#define GLLMD_SESSION_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

struct arena;

struct session_ring {
    struct arena *map;              /* the client's sealed memfd, mapped */
    struct gllm_ring *shm;
    pthread_mutex_t lock;           /* workers of several devices may publish at once */
    uint32_t reply_head;            /* ours; the copies in shm are never read back */
    uint32_t request_tail;          /* loop thread only */
};

/* Maps fd (a sealed memfd of GLLM_RING_BYTES) and starts empty rings on it. */
int session_ring_open(int fd, struct session_ring **out);
void session_ring_close(struct session_ring *r);
/* Worker threads. Copies one reply packet into the next slot; false when it does not fit
 * or the ring is full (or the client's tail makes no sense): the caller uses the socket. */
bool session_ring_publish(struct session_ring *r, const void *data, size_t len);
/* After a publish: whether the client spins on the ring, so the socket copy can be spared. */
bool session_ring_client_polling(struct session_ring *r);
/* Loop thread: tells the client whether the loop polls its requests (no wake needed). */
void session_ring_set_polling(struct session_ring *r, bool on);

#endif
