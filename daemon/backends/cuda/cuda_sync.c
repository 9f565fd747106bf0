/* GPU-side waits and signals through 32-bit counters in memory shared with a client
 * (cuStreamWaitValue32 / cuStreamWriteValue32): measured at 10-12 us a cross-process round
 * trip on an H100, against 200-300 us for interprocess events. A wait the client never
 * satisfies would hold the stream for ever, so a job with a wait is finished by polling the
 * stream against its deadline, and released from a second stream when it passes. */
#include <errno.h>

#include "cuda_sync.h"

bool cuda_sync_supported(const struct cuda_driver *d)
{
    return d->cuStreamWaitValue32 && d->cuStreamWriteValue32 && d->cuStreamQuery &&
           d->cuEventQuery && d->cuMemHostGetDevicePointer;
}

/* Where the device writes s's signal: device memory as it is; registered host memory (a
 * counter in a client's arena) through its device mapping. */
static CUresult signal_address(const struct cuda_ctx *c, const struct cuda_dev *x,
                               const struct backend_sync *s, CUdeviceptr *out)
{
    if (!s->signal_host || x->host_pointers) {
        *out = (CUdeviceptr)(uintptr_t)s->signal;
        return CUDA_SUCCESS;
    }
    return c->d->cuMemHostGetDevicePointer(out, s->signal, 0);
}

int cuda_sync_wait(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s)
{
    if (!s || !s->wait)
        return 0;
    if (!cuda_sync_supported(c->d))
        return -ENOTSUP;
    CUresult r = c->d->cuStreamWaitValue32(x->stream, (CUdeviceptr)(uintptr_t)s->wait,
                                           s->wait_value, CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS)   /* tells a wait still blocking from a job still running */
        r = c->d->cuEventRecord(x->waited, x->stream);
    return r ? cuda_fail(c, r, "GPU-side wait") : 0;
}

void cuda_sync_release(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s)
{
    if (!s || !cuda_sync_supported(c->d))
        return;
    if (s->wait && c->d->cuEventQuery(x->waited) == CUDA_ERROR_NOT_READY)
        c->d->cuStreamWriteValue32(x->release, (CUdeviceptr)(uintptr_t)s->wait, s->wait_value,
                                   CU_STREAM_WRITE_VALUE_DEFAULT);
    /* A failed job signals all the same: the client's stream must not wait for ever; the
     * reply tells it the job failed. */
    CUdeviceptr sig;
    if (s->signal && signal_address(c, x, s, &sig) == CUDA_SUCCESS)
        c->d->cuStreamWriteValue32(x->stream, sig, s->signal_value, CU_STREAM_WRITE_VALUE_DEFAULT);
    c->d->cuStreamSynchronize(x->stream);
}

/* The running job passed its watchdog deadline with its stream still busy. */
static int watchdog_expired(const struct cuda_ctx *c, const struct cuda_dev *x, const char *what)
{
    backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: GPU %d: %s still running at its watchdog "
                 "deadline", x->info.index, what);
    return GLLM_EJOBTIMEOUT;
}

int cuda_sync_finish(const struct cuda_ctx *c, struct cuda_dev *x, const struct backend_sync *s,
                     const char *what)
{
    const struct cuda_driver *d = c->d;
    CUresult r;
    x->sync_finished = true;
    if (s && s->signal) {
        if (!cuda_sync_supported(d))
            return -ENOTSUP;
        CUdeviceptr sig;
        if ((r = signal_address(c, x, s, &sig)) ||
            (r = d->cuStreamWriteValue32(x->stream, sig, s->signal_value,
                                         CU_STREAM_WRITE_VALUE_DEFAULT)))
            return cuda_fail(c, r, "GPU-side signal");
    }
    if (!s || !s->wait) {
        if (!x->deadline_ns || !d->cuStreamQuery) {
            r = d->cuStreamSynchronize(x->stream);
            return r ? cuda_fail(c, r, what) : 0;
        }
        /* Under the watchdog: spin on the stream as a spin-scheduled synchronize does, and
         * give up on it at the deadline (the daemon then ends the process, and the work
         * with it). */
        while ((r = d->cuStreamQuery(x->stream)) == CUDA_ERROR_NOT_READY)
            if (backend_now_ns() >= x->deadline_ns)
                return watchdog_expired(c, x, what);
        return r ? cuda_fail(c, r, what) : 0;
    }
    /* The worker's thread spins here as it does in a spin-scheduled synchronize. Past the
     * deadline only a wait still blocking is released: a job whose wait was met and whose
     * kernel is merely long is left to finish. */
    const uint64_t deadline = backend_now_ns() + s->wait_timeout_ns;
    while ((r = d->cuStreamQuery(x->stream)) == CUDA_ERROR_NOT_READY) {
        if (x->deadline_ns && backend_now_ns() >= x->deadline_ns)
            return watchdog_expired(c, x, what);
        if (backend_now_ns() < deadline || d->cuEventQuery(x->waited) != CUDA_ERROR_NOT_READY)
            continue;
        /* Write the awaited value from the release stream: the job's stream goes on, its
         * work runs on whatever the inputs hold, and the job is failed. */
        backend_logf(&c->log, BACKEND_LOG_WARNING,
                     "cuda: %s: GPU-side wait for %u not satisfied in %llu ms: released", what,
                     s->wait_value, (unsigned long long)(s->wait_timeout_ns / 1000000));
        if ((r = d->cuStreamWriteValue32(x->release, (CUdeviceptr)(uintptr_t)s->wait,
                                         s->wait_value, CU_STREAM_WRITE_VALUE_DEFAULT)))
            return cuda_fail(c, r, "releasing a GPU-side wait");
        if ((r = d->cuStreamSynchronize(x->stream)))
            return cuda_fail(c, r, what);
        return GLLM_EWAITTIMEOUT;
    }
    return r ? cuda_fail(c, r, what) : 0;
}

int cuda_sync_run(struct backend *be, int dev, const struct backend_sync *s, cuda_job_fn *job,
                  const void *args, const char *what)
{
    struct cuda_ctx *c = be->ctx;
    if (!s || (!s->wait && !s->signal))
        return job(be, dev, args);
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    if (!cuda_sync_supported(c->d))
        return -ENOTSUP;
    struct cuda_dev *x = &c->dev[dev];
    c->d->cuCtxSetCurrent(x->ctx);
    int r = cuda_sync_wait(c, x, s);
    if (r < 0)
        return r;
    x->sync_finished = false;
    r = job(be, dev, args);
    if (x->sync_finished)
        return r;
    if (r < 0) {
        cuda_sync_release(c, x, s);
        return r;
    }
    return cuda_sync_finish(c, x, s, what);   /* nothing to run: still ordered */
}
