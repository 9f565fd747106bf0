/* Jobs ordered on the GPU with a client (backend_sync): the wait before a job's first
 * operation, the signal after its last, and the end of a job that may have to be released. */
#ifndef GLLM_CUDA_SYNC_H
#define GLLM_CUDA_SYNC_H

#include "cuda_device.h"

/* Whether this driver has the stream memory operations the waits and signals need. */
bool cuda_sync_supported(const struct cuda_driver *d);
/* Enqueues s's wait on x's stream (nothing when s has none). */
int cuda_sync_wait(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s);
/* After a job failed with s's wait enqueued: releases that wait if it still blocks, so
 * later jobs on the stream run, writes s's signal (a failed job signals too) and waits for
 * the stream. */
void cuda_sync_release(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s);
/* Enqueues s's signal, then waits for the stream: past s's wait deadline it releases the
 * wait from the release stream and returns GLLM_EWAITTIMEOUT once the stream has drained.
 * what names the job for the log. */
int cuda_sync_finish(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s,
                     const char *what);

/* Runs job(be, dev, args) between s's wait and its signal: the wait is enqueued first; a
 * job that returns before its own cuda_sync_finish (an error, or nothing to do) has its wait
 * released or its signal written and the stream finished here. Without s, job alone. */
typedef int cuda_job_fn(struct backend *be, int dev, const void *args);
int cuda_sync_run(struct backend *be, int dev, const struct backend_sync *s, cuda_job_fn *job,
                  const void *args, const char *what);

#endif
