/* Clients' queues on a GPU: a stream each, so a GPU-side wait holds only its own client's
 * jobs, and a job is on the GPU before its inputs are ready (the launch leaves the
 * hand-over). The worker polls each job's events: it releases a wait past its deadline and
 * gives up on work past its watchdog deadline. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_queue.h"

/* One job in flight. */
struct queued {
    struct cuda_slot sl;           /* events and pinned memory made at the slot's first use */
    const struct cuda_op_type *type;
    const void *args;
    const struct backend_sync *s;
    const char *what;
    char *why;
    size_t why_len;
    uint64_t submitted, started;   /* backend_now_ns; started: its wait seen met */
    uint64_t budget_ns;            /* the watchdog's time for its work; 0: none */
    int status;                    /* failed while enqueued: reported in its turn */
    bool armed;                    /* its wait counts in x->waits_armed */
    bool released;                 /* its wait was released from the host */
};

struct backend_queue {
    struct cuda_lane lane;
    struct queued ops[BACKEND_QUEUE_DEPTH];
    unsigned head, count;
};

int cuda_queue_open(struct backend *be, int dev, struct backend_queue **out)
{
    struct cuda_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    struct backend_queue *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    char why[128];
    int r = cuda_lane_open(c->d, &q->lane, why, sizeof why);
    if (r < 0) {
        backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: GPU %d: a client's queue: %s", dev, why);
        free(q);
        return r;
    }
    *out = q;
    return 0;
}

/* On the loop's thread, with nothing in flight: frees at once (NULL device: no graveyard,
 * which is the worker's), waiting at most for other clients' waits to be met or released. */
void cuda_queue_close(struct backend *be, int dev, struct backend_queue *q)
{
    struct cuda_ctx *c = be->ctx;
    c->d->cuCtxSetCurrent(c->dev[dev].ctx);
    for (int i = 0; i < BACKEND_QUEUE_DEPTH; i++)
        if (q->ops[i].sl.done)
            cuda_slot_close(c->d, NULL, &q->ops[i].sl);
    cuda_lane_close(c->d, NULL, &q->lane);
    free(q);
}

static void disarm(const struct cuda_ctx *c, struct cuda_dev *x, struct queued *op)
{
    if (!op->armed)
        return;
    op->armed = false;
    if (--x->waits_armed == 0)
        cuda_graveyard_drain(c->d, x);
}

int cuda_queue_submit(struct backend *be, int dev, const struct backend_exec *e,
                      const struct cuda_op_type *t, const void *args, const char *what)
{
    struct backend_queue *q = e->queue;
    const struct backend_sync *s = e->sync;
    const uint64_t deadline_ns = e->deadline_ns;
    char *why = e->why;
    const size_t len = e->why_len;
    struct cuda_ctx *c = be->ctx;
    const struct cuda_driver *d = c->d;
    if (dev < 0 || dev >= c->ndev)
        return -ENODEV;
    if (q->count == BACKEND_QUEUE_DEPTH)
        return -EAGAIN;
    if (s && !cuda_sync_supported(d))
        return -ENOTSUP;
    struct cuda_dev *x = &c->dev[dev];
    d->cuCtxSetCurrent(x->ctx);
    struct queued *op = &q->ops[(q->head + q->count) % BACKEND_QUEUE_DEPTH];
    if (!op->sl.done) {
        char buf[128];
        int r = cuda_slot_open(d, &op->sl, buf, sizeof buf);
        if (r < 0) {
            cuda_slot_close(d, x, &op->sl);
            snprintf(why, len, "%s", buf);
            return r;
        }
    }
    const uint64_t now = backend_now_ns();
    *op = (struct queued){.sl = op->sl, .type = t, .args = args, .s = s, .what = what,
                          .why = why, .why_len = len, .submitted = now,
                          .budget_ns = deadline_ns > now ? deadline_ns - now : deadline_ns ? 1 : 0};
    CUresult r;
    if (s && s->wait) {
        /* A counter in host memory: no event behind the wait, the worker reads whether it
         * has come (an event there would stand between the counter and the kernel on the
         * GPU). In device memory: the event tells the worker. */
        if ((r = cuda_wait_on(c, x, q->lane.stream, s)) ||
            (s->wait_device && (r = d->cuEventRecord(op->sl.waited, q->lane.stream))))
            return cuda_fail(c, r, "GPU-side wait");
        op->armed = true;
        x->waits_armed++;
    }
    int st = t->enqueue(c, x, &q->lane, &op->sl, args);
    if (st == GLLM_EDEVLOST) {
        disarm(c, x, op);
        return st;
    }
    op->status = st < 0 ? st : 0;     /* its wait and signal stay in order all the same */
    if (s && s->signal && (r = cuda_signal_on(c, x, q->lane.stream, s))) {
        disarm(c, x, op);
        return cuda_fail(c, r, "GPU-side signal");
    }
    if ((r = d->cuEventRecord(op->sl.done, q->lane.stream))) {
        disarm(c, x, op);
        return cuda_fail(c, r, what);
    }
    q->count++;
    return BACKEND_PENDING;
}

/* The oldest job, not done: its wait released past its deadline (or at once when cancel),
 * its work given up on past its watchdog time. */
static int still_running(struct cuda_ctx *c, struct cuda_dev *x, struct queued *op, bool cancel)
{
    const struct cuda_driver *d = c->d;
    const uint64_t now = backend_now_ns();
    if (op->armed) {
        CUresult r = CUDA_SUCCESS;
        bool unmet;
        if (op->s->wait_device) {
            r = d->cuEventQuery(op->sl.waited);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
                return cuda_fail(c, r, op->what);
            unmet = r == CUDA_ERROR_NOT_READY;
        } else {
            const uint32_t seen = atomic_load_explicit((const _Atomic uint32_t *)op->s->wait,
                                                       memory_order_acquire);
            unmet = (int32_t)(seen - op->s->wait_value) < 0;
        }
        if (unmet) {
            if (!op->released && (cancel || now - op->submitted >= op->s->wait_timeout_ns)) {
                if (!cancel)
                    backend_logf(&c->log, BACKEND_LOG_WARNING, "cuda: %s: GPU-side wait for %u "
                                 "not satisfied in %llu ms: released", op->what,
                                 op->s->wait_value,
                                 (unsigned long long)(op->s->wait_timeout_ns / 1000000));
                if ((r = cuda_release_wait(c, x, op->s)))
                    return cuda_fail(c, r, "releasing a GPU-side wait");
                op->released = true;
            }
            return BACKEND_PENDING;
        }
        disarm(c, x, op);
    }
    if (!op->started)
        op->started = now;
    if (op->budget_ns && now - op->started >= op->budget_ns) {
        backend_logf(&c->log, BACKEND_LOG_ERR, "cuda: GPU %d: %s still running at its "
                     "watchdog deadline", x->info.index, op->what);
        return GLLM_EJOBTIMEOUT;
    }
    return BACKEND_PENDING;
}

int cuda_queue_poll(struct backend *be, int dev, struct backend_queue *q, bool cancel)
{
    struct cuda_ctx *c = be->ctx;
    if (!q->count)
        return -ENOENT;
    struct cuda_dev *x = &c->dev[dev];
    const struct cuda_driver *d = c->d;
    d->cuCtxSetCurrent(x->ctx);
    struct queued *op = &q->ops[q->head];
    cuda_fault_clear();
    CUresult r = d->cuEventQuery(op->sl.done);
    int st;
    if (r == CUDA_ERROR_NOT_READY) {
        st = still_running(c, x, op, cancel);
        if (st == BACKEND_PENDING)
            return st;
    } else if (r != CUDA_SUCCESS) {
        st = cuda_fail(c, r, op->what);
    } else if (op->released) {
        st = GLLM_EWAITTIMEOUT;         /* it ran on whatever its inputs held */
    } else if (op->status) {
        st = op->status;
    } else {
        st = op->type->complete(c, x, &op->sl, op->args);
    }
    if (st == GLLM_EDEVLOST && op->why && op->why_len && !op->why[0])
        snprintf(op->why, op->why_len, "%s", cuda_fault_why());
    disarm(c, x, op);
    q->head = (q->head + 1) % BACKEND_QUEUE_DEPTH;
    q->count--;
    return st;
}
