/* A client's queue on a GPU (backend_api.h, "Queues"): its own stream, where a job's wait,
 * work and signal are enqueued at once and the device starts the work when the client's
 * counter arrives, with no host in the loop. */
#ifndef GLLM_CUDA_QUEUE_H
#define GLLM_CUDA_QUEUE_H

#include "cuda_sync.h"

int cuda_queue_open(struct backend *be, int dev, struct backend_queue **out);
void cuda_queue_close(struct backend *be, int dev, struct backend_queue *q);
int cuda_queue_poll(struct backend *be, int dev, struct backend_queue *q, bool cancel);
/* Enqueues a job of type t on e's queue: BACKEND_PENDING, or a code when nothing was
 * queued. e's sync may be NULL, its deadline_ns 0 (none); its why is where a context-fatal
 * error's words go. */
int cuda_queue_submit(struct backend *be, int dev, const struct backend_exec *e,
                      const struct cuda_op_type *t, const void *args, const char *what);

#endif
