/* A fixed pool of threads that runs parallel-for loops for the CPU backend. */
#ifndef GLLMD_CPU_POOL_H
#define GLLMD_CPU_POOL_H

#include <stdint.h>

struct cpu_pool;

/* fn(ctx, task, thread) for task in [0, ntasks); thread in [0, pool threads). */
typedef void cpu_task_fn(void *ctx, int64_t task, int thread);

int cpu_pool_create(int threads, struct cpu_pool **out);
void cpu_pool_destroy(struct cpu_pool *p);
int cpu_pool_threads(const struct cpu_pool *p);
/* Runs all tasks, the caller's thread included, and returns when all are done.
 * One parallel_for at a time per pool. */
void cpu_pool_run(struct cpu_pool *p, int64_t ntasks, cpu_task_fn *fn, void *ctx);

#endif
