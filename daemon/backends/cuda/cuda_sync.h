/* Jobs ordered on the GPU with a client (backend_sync), run to completion on the device's own
 * stream: the wait before a job's first operation, the signal after its last, and the end of
 * a job that may have to be released. Queued jobs are cuda_queue.c's. */
#ifndef GLLM_CUDA_SYNC_H
#define GLLM_CUDA_SYNC_H

#include "cuda_device.h"

/* How one kind of job puts its work on a lane's stream and reads what it left. */
struct cuda_op_type {
    /* Enqueues the job's work on ln's stream (after its wait, before its signal) and records
     * in sl what complete needs: 0, or a code (some of the work may be enqueued). */
    int (*enqueue)(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                   struct cuda_slot *sl, const void *args);
    /* Once the stream has done the work: the job's status (a bad page met by the kernel) and
     * its timing. */
    int (*complete)(struct cuda_ctx *c, struct cuda_dev *x, struct cuda_slot *sl,
                    const void *args);
};

/* Whether this driver has the stream memory operations the waits and signals need. */
bool cuda_sync_supported(const struct cuda_driver *d);
/* The device address of a counter at p: device memory as it is; a counter in a client's
 * registered arena (host) through its device mapping. */
CUresult cuda_counter_address(const struct cuda_ctx *c, const struct cuda_dev *x, const void *p,
                              bool host, CUdeviceptr *out);
/* On stream: wait until s's counter reaches its value, or write s's signal value. */
CUresult cuda_wait_on(const struct cuda_ctx *c, const struct cuda_dev *x, CUstream stream,
                      const struct backend_sync *s);
CUresult cuda_signal_on(const struct cuda_ctx *c, const struct cuda_dev *x, CUstream stream,
                        const struct backend_sync *s);
/* Releases s's wait: writes its value from the release stream, so the stream waiting for it
 * goes on (past its deadline, or for a client that left). */
CUresult cuda_release_wait(const struct cuda_ctx *c, const struct cuda_dev *x,
                           const struct backend_sync *s);
/* Runs one job of type t on the device's own stream, between s's wait and its signal (s
 * may be NULL), and waits for it, within the job's watchdog deadline (x->deadline_ns) and
 * s's wait deadline: past the latter the wait is released from the release stream and the
 * job fails with GLLM_EWAITTIMEOUT. A job that fails still signals. what names it for the
 * log. */
int cuda_run_now(struct backend *be, int dev, const struct backend_sync *s,
                 const struct cuda_op_type *t, const void *args, const char *what);
/* Waits for the device's own stream with its watchdog deadline (the injected faults). */
int cuda_stream_finish(const struct cuda_ctx *c, struct cuda_dev *x, const char *what);

#endif
