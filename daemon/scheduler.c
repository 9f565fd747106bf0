/* The scheduler: a worker thread per device takes jobs fairly from lanes and runs them (or
 * leaves them in flight on their lane's queue); the loop settles what finished in one place
 * (settle_finished), woken by uv_async. What follows a fault is sched_fault.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched_fault.h"
#include "sched_internal.h"
#include "scheduler.h"

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

/* Whether j's wait counter (in host memory: a job polled by the worker) has reached its
 * value; counters may wrap. */
static bool wait_met(const struct job *j)
{
    return (int32_t)(atomic_load_explicit(j->wait, memory_order_acquire) - j->wait_value) >= 0;
}

/* A job waiting for its client's counter is not ready until the counter reaches its value
 * or its deadline passes (then it runs only to fail), or its owner would skip it anyway. */
static bool job_ready(const struct job *j, uint64_t now)
{
    return !j->wait || wait_met(j) || now >= j->wait_deadline ||
           j->ops->skip(j) != 0;   /* its client left: skip it now */
}

/* Whether j goes through its lane's queue: ordered with its client, on a backend with
 * queues, its wait's counter where the device can read it (else the worker polls it, as
 * before queues). A job armed with a fault runs as before, so the fault meets it alone.
 * Under w->lock. */
static bool queued_job(const struct worker *w, const struct job *j)
{
    if (j->wait_on_device)
        return true;     /* the host cannot read its counter: only a queue can wait for it */
    return w->queues && (j->wait || j->sync.signal) && (!j->wait || j->wait_mapped) &&
           !(w->armed && w->armed_cookie == j->cookie);
}

/* Whether lane l's next job can be taken: a queued job at once (its device waits for its
 * counter) while the queue has room; any other only once nothing of the lane is in flight,
 * and then as before. */
static bool lane_ready(const struct worker *w, const struct lane *l, uint64_t *now)
{
    const struct job *j = l->head;
    if (queued_job(w, j))
        return l->nfly < BACKEND_QUEUE_DEPTH;
    if (l->nfly)
        return false;
    if (j->wait && !*now)
        *now = now_ns();
    return job_ready(j, *now);
}

/* The first lane in ring order whose next job is ready, taken out of the ring (NULL: none
 * is). A lane whose job waits keeps its place, and its later jobs wait behind it: jobs of
 * one client on one device still run in order, and other clients' run meanwhile. */
static struct lane *ready_lane(struct worker *w)
{
    uint64_t now = 0;
    for (struct lane *l = w->ring_head, *prev = NULL; l; prev = l, l = l->next) {
        if (!lane_ready(w, l, &now))
            continue;
        if (prev)
            prev->next = l->next;
        else
            w->ring_head = l->next;
        if (w->ring_tail == l)
            w->ring_tail = prev;
        return l;
    }
    return NULL;
}

static struct job *take_job(struct worker *w, struct lane **lane)
{
    struct lane *l = ready_lane(w);
    if (!l)
        return NULL;
    *lane = l;
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
/* How often an idle worker asks whether its device was lost meanwhile (backend_device_lost). */
#define LOST_CHECK_MS 100
/* Polling waiting jobs' counters: spinning this long, then sleeping this long between looks
 * (a sleep costs 50-80 us with the kernel's timer slack). A serving loop's producers (a
 * layer's projections) run hundreds of microseconds to milliseconds: spinning through them
 * keeps the hand-over at the latency of a memory read. */
#define WAIT_POLL_SPIN_NS 2000000
#define WAIT_POLL_SLEEP_NS 20000

static void spin_for_work(struct worker *w, unsigned seen)
{
    uint64_t until = now_ns() + WORKER_SPIN_NS;
    while (atomic_load_explicit(&w->submitted, memory_order_acquire) == seen && now_ns() < until)
        for (int i = 0; i < 64; i++)
            __asm__ __volatile__("" ::: "memory");
}

/* What a backend returned that leaves its device needing a reset. */
static bool context_lost(int status)
{
    return status == GLLM_EDEVLOST || status == GLLM_EJOBTIMEOUT;
}

/* What keeps j from running, checked when it is taken: 0 to run it, else the status it
 * fails with. A job taken at its wait deadline rather than its counter fails here too; a
 * queued job's counter is the device's to wait for (queued: true). */
static int job_precheck(struct worker *w, struct job *j, bool queued)
{
    int st = j->ops->skip(j);
    if (st == 0 && j->refused)
        st = j->refused;                   /* runs nothing: writes its signal */
    if (st == 0 && !queued && j->wait && !wait_met(j))
        st = GLLM_EWAITTIMEOUT;            /* taken at its deadline, not its counter */
    if (st == 0 && w->failed && j->t_start >= w->retry_ns)
        sched_reset_device(w, w->failed_why);
    if (st == 0 && w->failed) {
        snprintf(j->why, sizeof j->why, "device %d could not be reset after a fault (%.100s)",
                 w->dev, w->failed_why);
        st = GLLM_EDEVLOST;
    }
    if (st == 0)
        st = sched_check_generation(w, j);
    return st;
}


/* Points the exec of j's kind's args at its timing, deadline, why, sync and queue. */
static void bind_args(struct job *j, uint64_t deadline, const struct backend_sync *sync,
                      struct backend_queue *queue)
{
    const struct backend_exec e = {.timing = &j->timing, .sync = sync, .deadline_ns = deadline,
                                   .why = j->why, .why_len = sizeof j->why, .queue = queue};
    switch (j->kind) {
    case JOB_COPY: j->copy.exec = e; break;
    case JOB_PAGED: j->paged.exec = e; break;
    case JOB_ATTENTION: j->args.exec = e; break;
    }
}

static int call_backend(struct worker *w, struct job *j)
{
    switch (j->kind) {
    case JOB_COPY: return backend_copy(w->be, w->dev, &j->copy);
    case JOB_PAGED: return backend_paged(w->be, w->dev, &j->paged);
    case JOB_ATTENTION: return backend_attention(w->be, w->dev, &j->args);
    }
    return -EINVAL;
}

/* The backend's, for the job's kind, run to completion; the owner may say to skip it
 * instead. true: the job left the device needing a reset. */
static bool run_job(struct worker *w, struct job *j)
{
    j->t_start = now_ns();
    j->status = job_precheck(w, j, false);
    if (j->status != 0) {
        signal_from_host(j);
        j->t_end = now_ns();
        return false;
    }
    const uint64_t deadline = sched_job_deadline(w->sched, j, j->t_start);
    enum backend_fault fault = BACKEND_FAULT_NONE;
    pthread_mutex_lock(&w->lock);
    if (w->armed && w->armed_cookie == j->cookie) {
        fault = w->armed;
        w->armed = BACKEND_FAULT_NONE;
    }
    pthread_mutex_unlock(&w->lock);
    if (fault) {
        j->status = backend_inject_fault(w->be, w->dev, fault, deadline, j->why, sizeof j->why);
        if (j->status == 0)
            j->status = GLLM_EBACKEND;     /* a fault that did not happen is still a failure */
    } else {
        bind_args(j, deadline, j->sync.signal ? &j->sync : NULL, NULL);
        j->status = call_backend(w, j);
    }
    j->t_end = now_ns();
    if (!context_lost(j->status))
        return false;
    sched_describe_loss(w, j, deadline ? deadline - j->t_start : 0);
    return true;
}

/* Hands a job that is done to its owner and the loop. */
static void job_done(struct worker *w, struct job *j)
{
    j->ops->finished(j, w->scratch);
    pthread_mutex_lock(&w->lock);
    done_append(w, j);
    uv_async_send(&w->async);
    pthread_mutex_unlock(&w->lock);
}

static void fly_push(struct worker *w, struct lane *l, struct job *j)
{
    j->next = NULL;
    if (l->fly_tail)
        l->fly_tail->next = j;
    else
        l->fly_head = j;
    l->fly_tail = j;
    if (l->nfly++ == 0) {
        l->fly_next = w->fly;
        w->fly = l;
    }
    w->fly_events++;
}

static struct job *fly_pop(struct worker *w, struct lane *l)
{
    struct job *j = l->fly_head;
    l->fly_head = j->next;
    if (!l->fly_head)
        l->fly_tail = NULL;
    l->nfly--;
    j->next = NULL;
    w->fly_events++;
    return j;
}

/* Takes lanes that have nothing in flight off the worker's list. */
static void fly_prune(struct worker *w)
{
    for (struct lane **pl = &w->fly; *pl;)
        if ((*pl)->nfly == 0)
            *pl = (*pl)->fly_next;
        else
            pl = &(*pl)->fly_next;
}

/* Hands the jobs of list (linked by next) to their owners and the loop. After the last job
 * of a session is handed over its lanes may be freed at any moment: the worker must no
 * longer hold them in its lists. */
static void jobs_done(struct worker *w, struct job *list)
{
    for (struct job *j = list, *next; j; j = next) {
        next = j->next;
        j->next = NULL;
        job_done(w, j);
    }
}

/* After a device lost its context or was reset: every job in its queues fails with
 * GLLM_EDEVLOST (the reset discarded them on the device) and its signal goes out from here.
 * The failed jobs are added to *done. */
static void fail_flying(struct worker *w, const char *reason, struct job ***done)
{
    for (struct lane *l = w->fly; l; l = l->fly_next)
        while (l->fly_head) {
            struct job *j = fly_pop(w, l);
            j->t_end = now_ns();
            if (j->status == 0) {
                j->status = GLLM_EDEVLOST;
                snprintf(j->why, sizeof j->why, "device %d: %.100s; this job was queued there "
                         "and did not run", w->dev, reason);
            }
            signal_from_host(j);
            **done = j;
            *done = &j->next;
        }
    w->fly = NULL;
}

/* A job taken from lane l that goes through its queue: checked, then submitted, then left
 * in flight for poll_flying. One that fails first still signals in order: through the queue
 * behind the lane's jobs in flight, else from the host. true: the device needs a reset
 * (the reason in reason; the job is answered). */
static bool submit_job(struct worker *w, struct lane *l, struct job *j, char *reason,
                       size_t len)
{
    const uint64_t now = j->t_start = now_ns();
    int st = job_precheck(w, j, true);
    if (st == 0 && !l->queue && (st = backend_queue_open(w->be, w->dev, &l->queue)) < 0)
        snprintf(j->why, sizeof j->why, "device %d: no queue for this client (%s)", w->dev,
                 gllm_strerror(st));
    if (st == 0) {
        if (j->wait) {
            j->sync.wait = (const void *)j->wait;
            j->sync.wait_device = j->wait_on_device;
            j->sync.wait_value = j->wait_value;
            j->sync.wait_timeout_ns = j->wait_deadline > now ? j->wait_deadline - now : 1;
        }
        bind_args(j, sched_job_deadline(w->sched, j, now), &j->sync, l->queue);
        st = call_backend(w, j);
        if (st == BACKEND_PENDING) {
            fly_push(w, l, j);
            return false;
        }
        if (st == 0)
            st = GLLM_EBACKEND;    /* the interface promises pending or a failure */
        if (context_lost(st)) {
            j->status = st;
            j->t_end = now_ns();
            sched_describe_loss(w, j, sched_job_budget(w, j));
            snprintf(reason, len, "%s", j->why);
            job_done(w, j);
            return true;
        }
    }
    j->status = st;
    if (j->sync.signal && l->nfly) {
        j->signal_sync = (struct backend_sync){.signal = j->sync.signal,
                                               .signal_value = j->sync.signal_value,
                                               .signal_host = j->sync.signal_host};
        j->signal_op = (struct copy_args){.exec = {.sync = &j->signal_sync, .queue = l->queue}};
        if (backend_copy(w->be, w->dev, &j->signal_op) == BACKEND_PENDING) {
            fly_push(w, l, j);
            return false;
        }
    }
    signal_from_host(j);
    j->t_end = now_ns();
    job_done(w, j);
    return false;
}

/* Finishes what the device has done in the lanes' queues, oldest first in each. Returns
 * true when a job left the device needing a reset (its reason in reason), with every job
 * of the queues failed. */
static bool poll_flying(struct worker *w, char *reason, size_t len)
{
    bool lost = false;
    struct job *done = NULL, **tail = &done;
    for (struct lane *l = w->fly; l && !lost; l = l->fly_next)
        while (l->fly_head && !lost) {
            /* A job whose client left is not waited for: its wait is released now. */
            const int skip = l->fly_head->ops->skip(l->fly_head);
            int r = backend_queue_poll(w->be, w->dev, l->queue, skip != 0);
            if (r == BACKEND_PENDING)
                break;
            struct job *j = fly_pop(w, l);
            j->t_end = now_ns();
            if (j->status == 0)     /* else it failed before and only its signal was queued */
                j->status = skip && !context_lost(r) ? skip : r;
            if (context_lost(r)) {
                j->status = r;
                sched_describe_loss(w, j, sched_job_budget(w, j));
                snprintf(reason, len, "%s", j->why);
                lost = true;
            }
            *tail = j;
            tail = &j->next;
        }
    if (lost)
        fail_flying(w, reason, &tail);
    else
        fly_prune(w);
    jobs_done(w, done);
    return lost;
}

/* Between looks at counters and queues with nothing else to do: spinning for a while (a
 * client's producer usually finishes within microseconds of submitting), then short sleeps. */
static void idle_pause(uint64_t *since)
{
    const uint64_t now = now_ns();
    if (!*since)
        *since = now;
    if (now - *since < WAIT_POLL_SPIN_NS)
        for (int i = 0; i < 64; i++)
            __asm__ __volatile__("" ::: "memory");
    else
        nanosleep(&(struct timespec){.tv_nsec = WAIT_POLL_SLEEP_NS}, NULL);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint64_t polling_since = 0;       /* since when nothing has been taken or finished */
    char reason[sizeof ((struct job *)0)->why];
    for (;;) {
        if (w->fly) {
            const uint64_t events = w->fly_events;
            if (poll_flying(w, reason, sizeof reason)) {
                sched_reset_device(w, reason);
                polling_since = 0;
                continue;
            }
            if (w->fly_events != events)
                polling_since = 0;
        }
        pthread_mutex_lock(&w->lock);
        if (!w->ring_head && !w->fly && !w->stop) {
            /* Read under the lock: a job queued after this point changes the count. */
            unsigned seen = atomic_load_explicit(&w->submitted, memory_order_relaxed);
            pthread_mutex_unlock(&w->lock);
            spin_for_work(w, seen);
            pthread_mutex_lock(&w->lock);
        }
        while (!w->ring_head && !w->fly && !w->stop) {
            if (!w->watch_loss) {
                pthread_cond_wait(&w->wake, &w->lock);
                continue;
            }
            const struct timespec until = clock_after_ms(CLOCK_MONOTONIC, LOST_CHECK_MS);
            if (pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT || w->failed)
                continue;
            pthread_mutex_unlock(&w->lock);
            if (backend_device_lost(w->be, w->dev, reason, sizeof reason))
                sched_reset_device(w, reason);
            pthread_mutex_lock(&w->lock);
        }
        if (!w->ring_head && !w->fly) {
            pthread_mutex_unlock(&w->lock);
            break;
        }
        struct lane *l = NULL;
        struct job *j = w->ring_head ? take_job(w, &l) : NULL;
        const bool queued = j && queued_job(w, j);
        pthread_mutex_unlock(&w->lock);
        if (!j) {
            /* Every queued job waits for its client's counter, which no wake-up announces,
             * or the device is busy with what is in flight. */
            idle_pause(&polling_since);
            continue;
        }
        polling_since = 0;
        if (queued) {
            if (submit_job(w, l, j, reason, sizeof reason)) {
                struct job *failed = NULL, **tail = &failed;
                fail_flying(w, reason, &tail);
                jobs_done(w, failed);
                sched_reset_device(w, reason);
            }
            continue;
        }
        bool lost = run_job(w, j);
        if (lost)    /* the job may be settled and freed as soon as it is on the list */
            memcpy(reason, j->why, sizeof reason);
        job_done(w, j);
        /* The failed job's owner hears of it while the device resets (or, where it cannot
         * be, before the process exits). */
        if (lost)
            sched_reset_device(w, reason);
    }
    return NULL;
}

/* Takes what one worker has finished, in completion order. */
static struct job *take_finished(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    struct job *j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    return j;
}

/* The one place finished jobs are settled: from the loop's wake-up, between callbacks,
 * never from inside a request's handling (an admission sees only the counts the owner
 * keeps in finished). */
static void settle_finished(struct sched *s)
{
    for (int i = 0; i < s->nworkers; i++) {
        for (struct job *j = take_finished(s->workers[i]), *next; j; j = next) {
            next = j->next;
            s->unsettled--;
            j->ops->settle(j);
        }
    }
}

static void on_finished(uv_async_t *h)
{
    struct worker *w = h->data;
    struct sched *s = w->sched;
    settle_finished(s);
    pthread_mutex_lock(&s->exit_lock);
    bool wanted = s->exit_wanted;
    pthread_mutex_unlock(&s->exit_lock);
    if (!wanted)
        return;
    /* The exiting worker queued its failed jobs before it asked: a second look settles any
     * the first took too early to see. */
    settle_finished(s);
    pthread_mutex_lock(&s->exit_lock);
    s->exit_settled = true;
    pthread_cond_signal(&s->exit_cond);
    pthread_mutex_unlock(&s->exit_lock);
}

static void free_worker(uv_handle_t *h)
{
    struct worker *w = h->data;
    struct sched *s = w->sched;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w->scratch);
    free(w);
    if (--s->open_handles == 0 && s->stopping)
        free(s);
}

static int start_worker(struct sched *s, uv_loop_t *loop, struct backend *be, int dev,
                        struct worker **out)
{
    struct worker *w = calloc(1, sizeof *w);
    struct proto_buf *scratch = malloc(sizeof *scratch);
    if (!w || !scratch) {
        free(w);
        free(scratch);
        return -ENOMEM;
    }
    *w = (struct worker){.sched = s, .be = be, .dev = dev, .scratch = scratch,
                         .queues = backend_has_queues(be), .watch_loss = backend_watches_loss(be)};
    int r = uv_async_init(loop, &w->async, on_finished);
    if (r < 0) {
        free(scratch);
        free(w);
        return r;
    }
    w->async.data = w;
    s->open_handles++;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;     /* the idle wait's deadline is on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    r = pthread_create(&w->thread, NULL, worker_main, w);
    if (r != 0) {
        uv_close((uv_handle_t *)&w->async, free_worker);
        return -r;
    }
    *out = w;
    return 0;
}

int sched_start(uv_loop_t *loop, struct backend *be, int ndevices, struct sched **out)
{
    struct sched *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (ndevices > GLLM_MAX_DEVICES)
        ndevices = GLLM_MAX_DEVICES;
    pthread_mutex_init(&s->exit_lock, NULL);
    pthread_cond_init(&s->exit_cond, NULL);
    for (int i = 0; i < ndevices; i++) {
        int r = start_worker(s, loop, be, i, &s->workers[i]);
        if (r < 0) {
            sched_stop(s);
            return r;
        }
        s->nworkers++;
    }
    *out = s;
    return 0;
}

void sched_submit(struct sched *s, struct lane *lane, struct job *job)
{
    struct worker *w = s->workers[job->dev];
    job->next = NULL;
    job->t_submit = now_ns();
    s->unsettled++;
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

void sched_set_faults(struct sched *s, uint64_t floor_ms, uint64_t gflops,
                      bool exit_on_reset_failure)
{
    atomic_store_explicit(&s->exit_on_reset_failure, exit_on_reset_failure,
                          memory_order_relaxed);
    atomic_store_explicit(&s->watchdog_floor_ns, floor_ms * 1000000ull, memory_order_relaxed);
    atomic_store_explicit(&s->watchdog_gflops, gflops, memory_order_relaxed);
}

int sched_arm_fault(struct sched *s, int dev, const void *owner, enum backend_fault kind)
{
    if (dev < 0 || dev >= s->nworkers)
        return -ENODEV;
    struct worker *w = s->workers[dev];
    pthread_mutex_lock(&w->lock);
    w->armed = kind;
    w->armed_cookie = owner;
    pthread_mutex_unlock(&w->lock);
    return 0;
}

uint64_t sched_unsettled(const struct sched *s)
{
    return s->unsettled;
}

void sched_stop(struct sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nworkers; i++) {
        struct worker *w = s->workers[i];
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
    }
    settle_finished(s);
    s->stopping = true;
    for (int i = 0; i < s->nworkers; i++)
        uv_close((uv_handle_t *)&s->workers[i]->async, free_worker);
    if (s->open_handles == 0)
        free(s);
}

