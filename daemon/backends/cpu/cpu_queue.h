/* The CPU backend's queues (backend_api.h, "Queues"): operations kept in order and run by
 * queue_poll, on the worker thread, once their wait is met. */
#ifndef GLLM_CPU_QUEUE_H
#define GLLM_CPU_QUEUE_H

#include <pthread.h>

#include "backend_api.h"

enum cpu_op_kind { CPU_OP_COPY, CPU_OP_ATTENTION, CPU_OP_PAGED };

/* Runs one operation to completion (its args with queue NULL and deadline_ns set anew). */
typedef int cpu_op_run_fn(struct backend *be, int dev, enum cpu_op_kind kind, const void *args);

/* Every queue of the backend, so that a reset can empty them. */
struct cpu_queues {
    pthread_mutex_t lock;
    struct backend_queue *all;
    cpu_op_run_fn *run;
};

void cpu_queues_init(struct cpu_queues *qs, cpu_op_run_fn *run);
int cpu_queue_open(struct cpu_queues *qs, struct backend_queue **out);
void cpu_queue_close(struct cpu_queues *qs, struct backend_queue *q);
/* Appends an operation: BACKEND_PENDING, or -EAGAIN when BACKEND_QUEUE_DEPTH are in flight. */
int cpu_queue_submit(struct backend_queue *q, enum cpu_op_kind kind, const void *args);
int cpu_queue_poll(struct cpu_queues *qs, struct backend *be, int dev, struct backend_queue *q,
                   bool cancel);
/* A reset: every operation in flight is forgotten. */
void cpu_queues_discard(struct cpu_queues *qs);

#endif
