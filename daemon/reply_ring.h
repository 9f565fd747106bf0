/* gllmd's end of a session's reply ring (proto/ring.h): publishing job replies from workers. */
#ifndef GLLMD_REPLY_RING_H
#define GLLMD_REPLY_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

struct arena;

struct reply_ring {
    struct arena *map;              /* the client's sealed memfd, mapped */
    struct gllm_reply_ring *shm;
    pthread_mutex_t lock;           /* workers of several devices may publish at once */
    uint32_t head;                  /* ours; the copy in shm is never read back */
};

/* Maps fd (a sealed memfd of GLLM_RING_BYTES) and starts an empty ring on it. */
int reply_ring_open(int fd, struct reply_ring **out);
void reply_ring_close(struct reply_ring *r);
/* Copies one reply packet into the next slot. false: it does not fit or the ring is full
 * (or the client's tail makes no sense); the caller uses the socket. */
bool reply_ring_publish(struct reply_ring *r, const void *data, size_t len);
/* After a publish: whether the client is polling the ring, so the socket copy can be spared. */
bool reply_ring_client_polling(struct reply_ring *r);

#endif
