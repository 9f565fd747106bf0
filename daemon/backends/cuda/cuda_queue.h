/* A client's queue on a GPU (backend_api.h, "Queues"): its own stream, where a job's wait,
 * work and signal are enqueued at once and the device starts the work when the client's
 * counter arrives, with no host in the loop. */
#ifndef GLLM_CUDA_QUEUE_H
#define GLLM_CUDA_QUEUE_H

#include "cuda_sync.h"

int cuda_queue_open(struct backend *be, int dev, struct backend_queue **out);
void cuda_queue_close(struct backend *be, int dev, struct backend_queue *q);
int cuda_queue_poll(struct backend *be, int dev, struct backend_queue *q, bool cancel);
/* Enqueues a job of type t on q: BACKEND_PENDING, or a code when nothing was queued. s may
 * be NULL; deadline_ns is the job's watchdog deadline (0: none); why, len: where a
 * context-fatal error's words go. */
int cuda_queue_submit(struct backend *be, int dev, struct backend_queue *q,
                      const struct cuda_op_type *t, const void *args,
                      const struct backend_sync *s, uint64_t deadline_ns, const char *what,
                      char *why, size_t len);

#endif
