/* Thread pool for the CPU backend: dynamic task claiming so uneven (causal) work balances. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cpu_pool.h"

struct cpu_pool {
    int nthreads;                /* including the caller of cpu_pool_run */
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation;         /* bumped per run; helpers wait for a new one */
    int busy;                    /* helpers still inside the current run */
    bool stop;
    /* the current run */
    cpu_task_fn *fn;
    void *ctx;
    int64_t ntasks;
    atomic_int_fast64_t next;
};

struct helper_arg {
    struct cpu_pool *pool;
    int index;
};

static void drain(struct cpu_pool *p, int thread)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->ntasks)
            return;
        p->fn(p->ctx, t, thread);
    }
}

static void *helper_main(void *arg)
{
    struct helper_arg a = *(struct helper_arg *)arg;
    free(arg);
    struct cpu_pool *p = a.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        drain(p, a.index);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int cpu_pool_create(int threads, struct cpu_pool **out)
{
    if (threads < 1 || threads > 1024)
        return -EINVAL;
    struct cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->nthreads = threads;
    p->threads = calloc((size_t)threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < threads; i++) {
        struct helper_arg *a = malloc(sizeof *a);
        if (a)
            *a = (struct helper_arg){.pool = p, .index = i};
        int r = a ? pthread_create(&p->threads[i], NULL, helper_main, a) : ENOMEM;
        if (r != 0) {
            free(a);
            p->nthreads = i;
            cpu_pool_destroy(p);
            return -r;
        }
    }
    *out = p;
    return 0;
}

void cpu_pool_destroy(struct cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p);
}

int cpu_pool_threads(const struct cpu_pool *p)
{
    return p->nthreads;
}

void cpu_pool_run(struct cpu_pool *p, int64_t ntasks, cpu_task_fn *fn, void *ctx)
{
    if (ntasks <= 0)
        return;
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    p->busy = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    drain(p, 0);

    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
