/* GPU-side waits and signals through 32-bit counters in memory shared with a client
 * (cuStreamWaitValue32 / cuStreamWriteValue32): measured at 10-12 us a cross-process round
 * trip on an H100, against 200-300 us for interprocess events. Here a job runs on the
 * device's own stream and the worker waits for it: a wait the client never satisfies would
 * hold the stream for ever, so the stream is polled against the wait's deadline and the
 * wait released from a second stream when it passes. */
#include <errno.h>

#include "cuda_sync.h"

bool cuda_sync_supported(const struct cuda_driver *d)
{
    return d->cuStreamWaitValue32 && d->cuStreamWriteValue32 && d->cuStreamQuery &&
           d->cuEventQuery && d->cuMemHostGetDevicePointer;
}

CUresult cuda_counter_address(const struct cuda_ctx *c, const struct cuda_dev *x, const void *p,
                              bool host, CUdeviceptr *out)
{
    if (!host || x->host_pointers) {
        *out = (CUdeviceptr)(uintptr_t)p;
        return CUDA_SUCCESS;
    }
    return c->d->cuMemHostGetDevicePointer(out, (void *)(uintptr_t)p, 0);
}

CUresult cuda_wait_on(const struct cuda_ctx *c, const struct cuda_dev *x, CUstream stream,
                      const struct backend_sync *s)
{
    CUdeviceptr at;
    CUresult r = cuda_counter_address(c, x, s->wait, !s->wait_device, &at);
    return r ? r : c->d->cuStreamWaitValue32(stream, at, s->wait_value, CU_STREAM_WAIT_VALUE_GEQ);
}

CUresult cuda_signal_on(const struct cuda_ctx *c, const struct cuda_dev *x, CUstream stream,
                        const struct backend_sync *s)
{
    CUdeviceptr at;
    CUresult r = cuda_counter_address(c, x, s->signal, s->signal_host, &at);
    return r ? r : c->d->cuStreamWriteValue32(stream, at, s->signal_value,
                                              CU_STREAM_WRITE_VALUE_DEFAULT);
}

CUresult cuda_release_wait(const struct cuda_ctx *c, const struct cuda_dev *x,
                           const struct backend_sync *s)
{
    CUdeviceptr at;
    CUresult r = cuda_counter_address(c, x, s->wait, !s->wait_device, &at);
    return r ? r : c->d->cuStreamWriteValue32(x->release, at, s->wait_value,
                                              CU_STREAM_WRITE_VALUE_DEFAULT);
}

/* The running job passed its watchdog deadline with its stream still busy. */
static int watchdog_expired(const struct cuda_ctx *c, const struct cuda_dev *x, const char *what)
{
    backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: GPU %d: %s still running at its watchdog "
                 "deadline", x->info.index, what);
    return GLLM_EJOBTIMEOUT;
}

int cuda_stream_finish(const struct cuda_ctx *c, struct cuda_dev *x, const char *what)
{
    const struct cuda_driver *d = c->d;
    CUresult r;
    if (!x->deadline_ns || !d->cuStreamQuery) {
        r = d->cuStreamSynchronize(x->lane.stream);
        return r ? cuda_fail(c, r, what) : 0;
    }
    /* Under the watchdog: spin on the stream as a spin-scheduled synchronize does, and give
     * up on it at the deadline (the daemon then ends the process, and the work with it). */
    while ((r = d->cuStreamQuery(x->lane.stream)) == CUDA_ERROR_NOT_READY)
        if (backend_now_ns() >= x->deadline_ns)
            return watchdog_expired(c, x, what);
    return r ? cuda_fail(c, r, what) : 0;
}

/* Enqueues s's signal on the device's stream, then waits for the stream: past s's wait
 * deadline it releases the wait from the release stream and returns GLLM_EWAITTIMEOUT once
 * the stream has drained. */
static int finish(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s,
                  uint64_t wait_deadline, const char *what)
{
    const struct cuda_driver *d = c->d;
    CUresult r;
    if (s && s->signal && (r = cuda_signal_on(c, x, x->lane.stream, s)))
        return cuda_fail(c, r, "GPU-side signal");
    if (!s || !s->wait)
        return cuda_stream_finish(c, x, what);
    /* The worker's thread spins here as it does in a spin-scheduled synchronize. Past the
     * deadline only a wait still blocking is released: a job whose wait was met and whose
     * kernel is merely long is left to finish. */
    while ((r = d->cuStreamQuery(x->lane.stream)) == CUDA_ERROR_NOT_READY) {
        if (x->deadline_ns && backend_now_ns() >= x->deadline_ns)
            return watchdog_expired(c, x, what);
        if (backend_now_ns() < wait_deadline || d->cuEventQuery(x->slot.waited) != CUDA_ERROR_NOT_READY)
            continue;
        /* Write the awaited value from the release stream: the job's stream goes on, its
         * work runs on whatever the inputs hold, and the job is failed. */
        backend_logf(&c->log, BACKEND_LOG_WARNING,
                     "cuda: %s: GPU-side wait for %u not satisfied in %llu ms: released", what,
                     s->wait_value, (unsigned long long)(s->wait_timeout_ns / 1000000));
        if ((r = cuda_release_wait(c, x, s)))
            return cuda_fail(c, r, "releasing a GPU-side wait");
        if ((r = d->cuStreamSynchronize(x->lane.stream)))
            return cuda_fail(c, r, what);
        return GLLM_EWAITTIMEOUT;
    }
    return r ? cuda_fail(c, r, what) : 0;
}

/* After a job failed with s's wait enqueued: releases that wait if it still blocks, so later
 * jobs on the stream run, writes s's signal (a failed job signals too) and waits for the
 * stream. */
static void release(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s)
{
    if (s->wait && c->d->cuEventQuery(x->slot.waited) == CUDA_ERROR_NOT_READY)
        cuda_release_wait(c, x, s);
    if (s->signal)
        cuda_signal_on(c, x, x->lane.stream, s);
    c->d->cuStreamSynchronize(x->lane.stream);
}

int cuda_run_now(struct backend *be, int dev, const struct backend_sync *s,
                 const struct cuda_op_type *t, const void *args, const char *what)
{
    struct cuda_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    if (s && !s->wait && !s->signal)
        s = NULL;
    if (s && !cuda_sync_supported(c->d))
        return -ENOTSUP;
    struct cuda_dev *x = &c->dev[dev];
    const struct cuda_driver *d = c->d;
    d->cuCtxSetCurrent(x->ctx);
    const uint64_t wait_deadline = s && s->wait ? backend_now_ns() + s->wait_timeout_ns : 0;
    if (s && s->wait) {
        CUresult r = cuda_wait_on(c, x, x->lane.stream, s);
        if (r == CUDA_SUCCESS)   /* tells a wait still blocking from a job still running */
            r = d->cuEventRecord(x->slot.waited, x->lane.stream);
        if (r)
            return cuda_fail(c, r, "GPU-side wait");
    }
    int r = t->enqueue(c, x, &x->lane, &x->slot, args);
    if (r < 0) {
        if (s)
            release(c, x, s);
        return r;
    }
    if ((r = finish(c, x, s, wait_deadline, what)) < 0)
        return r;
    return t->complete(c, x, &x->slot, args);
}
