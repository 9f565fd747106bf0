/* Device worker thread: takes jobs fairly from session lanes, runs them, reports back via uv_async. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "worker.h"

struct worker {
    uv_loop_t *loop;
    struct backend *be;
    int dev;
    worker_reply_fn *reply_fn;
    worker_done_fn *done_fn;
    void *done_arg;
    struct proto_buf *scratch;            /* the reply hook's, worker thread only */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct lane *ring_head, *ring_tail;   /* lanes with queued jobs */
    bool stop;
    atomic_uint submitted;                /* bumped per job: what an idle worker spins on */
    struct job *done_head, *done_tail;    /* finished, not yet reported; under lock */
    uv_async_t async;
};

static void ring_push(struct worker *w, struct lane *l)
{
    l->next = NULL;
    l->in_ring = true;
    if (w->ring_tail)
        w->ring_tail->next = l;
    else
        w->ring_head = l;
    w->ring_tail = l;
}

static struct job *take_job(struct worker *w)
{
    struct lane *l = w->ring_head;
    w->ring_head = l->next;
    if (!w->ring_head)
        w->ring_tail = NULL;
    l->in_ring = false;
    struct job *j = l->head;
    l->head = j->next;
    if (!l->head)
        l->tail = NULL;
    else
        ring_push(w, l);
    j->next = NULL;
    return j;
}

/* After a job, an idle worker watches for the next one this long before it sleeps: a
 * client stepping a decode loop sends its next job within microseconds, and catching it
 * awake saves the futex wake-up (several microseconds of the daemon's added latency). */
#define WORKER_SPIN_NS 50000

static void spin_for_work(struct worker *w, unsigned seen)
{
    uint64_t until = now_ns() + WORKER_SPIN_NS;
    while (atomic_load_explicit(&w->submitted, memory_order_acquire) == seen && now_ns() < until)
        for (int i = 0; i < 64; i++)
            __asm__ __volatile__("" ::: "memory");
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        if (!w->ring_head && !w->stop) {
            /* Read under the lock: a job queued after this point changes the count. */
            unsigned seen = atomic_load_explicit(&w->submitted, memory_order_relaxed);
            pthread_mutex_unlock(&w->lock);
            spin_for_work(w, seen);
            pthread_mutex_lock(&w->lock);
        }
        while (!w->ring_head && !w->stop)
            pthread_cond_wait(&w->wake, &w->lock);
        if (!w->ring_head)
            break;
        struct job *j = take_job(w);
        pthread_mutex_unlock(&w->lock);

        j->t_start = now_ns();
        j->args.timing = &j->timing;
        if (atomic_load_explicit(j->cancel, memory_order_acquire))
            j->status = GLLM_EDISCONNECTED;
        else if (j->abort && atomic_load_explicit(j->abort, memory_order_acquire))
            j->status = GLLM_ESHUTDOWN;
        else if (j->kind == JOB_COPY) {
            j->copy.timing = &j->timing;
            j->status = backend_copy(w->be, w->dev, &j->copy);
        } else if (j->kind == JOB_PAGED) {
            j->paged.timing = &j->timing;
            j->paged.why = j->why, j->paged.why_len = sizeof j->why;
            j->status = backend_paged(w->be, w->dev, &j->paged);
        } else
            j->status = backend_attention(w->be, w->dev, &j->args);
        j->t_end = now_ns();
        w->reply_fn(j, w->done_arg, w->scratch);

        pthread_mutex_lock(&w->lock);
        if (w->done_tail)
            w->done_tail->next = j;
        else
            w->done_head = j;
        w->done_tail = j;
        uv_async_send(&w->async);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

void worker_reap(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    struct job *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    while (j) {
        struct job *next = j->next;
        w->done_fn(j, w->done_arg);
        j = next;
    }
}

static void report_done(uv_async_t *h)
{
    worker_reap(h->data);
}

static void free_worker(uv_handle_t *h)
{
    struct worker *w = h->data;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w->scratch);
    free(w);
}

int worker_start(uv_loop_t *loop, struct backend *be, int dev, worker_reply_fn *reply,
                 worker_done_fn *done, void *arg, struct worker **out)
{
    struct worker *w = calloc(1, sizeof *w);
    struct proto_buf *scratch = malloc(sizeof *scratch);
    if (!w || !scratch) {
        free(w);
        free(scratch);
        return -ENOMEM;
    }
    *w = (struct worker){.loop = loop, .be = be, .dev = dev, .reply_fn = reply, .done_fn = done,
                         .done_arg = arg, .scratch = scratch};
    int r = uv_async_init(loop, &w->async, report_done);
    if (r < 0) {
        free(scratch);
        free(w);
        return r;
    }
    w->async.data = w;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    r = pthread_create(&w->thread, NULL, worker_main, w);
    if (r != 0) {
        uv_close((uv_handle_t *)&w->async, free_worker);
        return -r;
    }
    *out = w;
    return 0;
}

void worker_submit(struct worker *w, struct lane *lane, struct job *job)
{
    job->next = NULL;
    job->t_submit = now_ns();
    pthread_mutex_lock(&w->lock);
    if (lane->tail)
        lane->tail->next = job;
    else
        lane->head = job;
    lane->tail = job;
    if (!lane->in_ring)
        ring_push(w, lane);
    atomic_fetch_add_explicit(&w->submitted, 1, memory_order_release);
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

void worker_stop(struct worker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    worker_reap(w);
    uv_close((uv_handle_t *)&w->async, free_worker);
}
