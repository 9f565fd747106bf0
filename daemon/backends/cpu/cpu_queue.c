/* The CPU backend's queues: what a GPU stream does with a job's wait, work and signal, done
 * by the worker thread when the daemon polls, so the daemon's queue path runs in CI. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_queue.h"

struct cpu_queue_op {
    enum cpu_op_kind kind;
    const void *args;
    uint64_t submitted;            /* backend_now_ns */
};

struct backend_queue {
    struct backend_queue *next, **pprev;   /* in cpu_queues.all */
    struct cpu_queue_op ops[BACKEND_QUEUE_DEPTH];
    unsigned head, count;
};

void cpu_queues_init(struct cpu_queues *qs, cpu_op_run_fn *run)
{
    pthread_mutex_init(&qs->lock, NULL);
    qs->all = NULL;
    qs->run = run;
}

int cpu_queue_open(struct cpu_queues *qs, struct backend_queue **out)
{
    struct backend_queue *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    pthread_mutex_lock(&qs->lock);
    q->next = qs->all;
    if (qs->all)
        qs->all->pprev = &q->next;
    q->pprev = &qs->all;
    qs->all = q;
    pthread_mutex_unlock(&qs->lock);
    *out = q;
    return 0;
}

void cpu_queue_close(struct cpu_queues *qs, struct backend_queue *q)
{
    pthread_mutex_lock(&qs->lock);
    *q->pprev = q->next;
    if (q->next)
        q->next->pprev = q->pprev;
    pthread_mutex_unlock(&qs->lock);
    free(q);
}

int cpu_queue_submit(struct backend_queue *q, enum cpu_op_kind kind, const void *args)
{
    if (q->count == BACKEND_QUEUE_DEPTH)
        return -EAGAIN;
    q->ops[(q->head + q->count++) % BACKEND_QUEUE_DEPTH] =
        (struct cpu_queue_op){kind, args, backend_now_ns()};
    return BACKEND_PENDING;
}

static const struct backend_sync *op_sync(const struct cpu_queue_op *op)
{
    switch (op->kind) {
    case CPU_OP_COPY: return ((const struct copy_args *)op->args)->exec.sync;
    case CPU_OP_ATTENTION: return ((const struct attn_args *)op->args)->exec.sync;
    case CPU_OP_PAGED: return ((const struct paged_args *)op->args)->exec.sync;
    }
    return NULL;
}

/* Runs op on a copy of its args: not queued, its watchdog deadline counted from now. */
static int run_now(struct cpu_queues *qs, struct backend *be, int dev,
                   const struct cpu_queue_op *op)
{
    const uint64_t now = backend_now_ns();
    union {
        struct copy_args c;
        struct attn_args a;
        struct paged_args p;
    } u;
    uint64_t *deadline;
    switch (op->kind) {
    case CPU_OP_COPY:
        u.c = *(const struct copy_args *)op->args;
        u.c.exec.queue = NULL;
        deadline = &u.c.exec.deadline_ns;
        break;
    case CPU_OP_ATTENTION:
        u.a = *(const struct attn_args *)op->args;
        u.a.exec.queue = NULL;
        deadline = &u.a.exec.deadline_ns;
        break;
    default:
        u.p = *(const struct paged_args *)op->args;
        u.p.exec.queue = NULL;
        deadline = &u.p.exec.deadline_ns;
        break;
    }
    if (*deadline)
        *deadline = now + (*deadline > op->submitted ? *deadline - op->submitted : 0);
    return qs->run(be, dev, op->kind, &u);
}

int cpu_queue_poll(struct cpu_queues *qs, struct backend *be, int dev, struct backend_queue *q,
                   bool cancel)
{
    if (!q->count)
        return -ENOENT;
    const struct cpu_queue_op *op = &q->ops[q->head];
    const struct backend_sync *s = op_sync(op);
    int r;
    if (s && s->wait &&
        (int32_t)(atomic_load_explicit((const _Atomic uint32_t *)(uintptr_t)s->wait,
                                       memory_order_acquire) - s->wait_value) < 0) {
        if (!cancel && backend_now_ns() - op->submitted < s->wait_timeout_ns)
            return BACKEND_PENDING;
        /* Released as a GPU's would be: the counter gets the value, the job fails. */
        atomic_store_explicit((_Atomic uint32_t *)(uintptr_t)s->wait, s->wait_value,
                              memory_order_release);
        if (s->signal)
            atomic_store_explicit((_Atomic uint32_t *)s->signal, s->signal_value,
                                  memory_order_release);
        r = GLLM_EWAITTIMEOUT;
    } else {
        r = run_now(qs, be, dev, op);
    }
    q->head = (q->head + 1) % BACKEND_QUEUE_DEPTH;
    q->count--;
    return r;
}

void cpu_queues_discard(struct cpu_queues *qs)
{
    pthread_mutex_lock(&qs->lock);
    for (struct backend_queue *q = qs->all; q; q = q->next)
        q->head = q->count = 0;
    pthread_mutex_unlock(&qs->lock);
}
