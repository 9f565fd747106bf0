/* The scheduler's and its workers' state, shared by scheduler.c and sched_fault.c. */
#ifndef GLLMD_SCHED_INTERNAL_H
#define GLLMD_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "backend.h"
#include "sched_types.h"

struct worker {
    struct sched *sched;
    struct backend *be;
    int dev;
    struct proto_buf *scratch;            /* job->ops->finished's, worker thread only */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct lane *ring_head, *ring_tail;   /* lanes with queued jobs */
    bool stop;
    atomic_uint submitted;                /* bumped per job: what an idle worker spins on */
    struct job *done_head, *done_tail;    /* finished, not yet settled; under lock */
    uv_async_t async;
    /* After a failed reset the device serves nothing until one succeeds: tried again before
     * a job once the retry time has come (worker thread only). */
    bool failed;
    uint64_t retry_ns;
    char failed_why[160];
    /* Fault injection: the next job of this owner on this device meets the fault instead of
     * running (under lock). */
    enum backend_fault armed;
    const void *armed_cookie;
    /* The backend has queues: jobs ordered with their client are submitted to their lane's
     * and finished by polling (poll_flying); fly lists the lanes with jobs there. */
    bool queues;
    /* The backend says when the device is lost while idle (a device process that ended):
     * the idle worker looks every LOST_CHECK_MS and resets it. */
    bool watch_loss;
    struct lane *fly;                     /* worker thread only */
    uint64_t fly_events;                  /* jobs submitted or finished through queues */
};

struct sched {
    int nworkers;
    struct worker *workers[GLLM_MAX_DEVICES];
    uint64_t unsettled;                   /* loop thread: submitted, not yet settled */
    unsigned open_handles;                /* worker asyncs libuv still holds */
    bool stopping;
    /* The watchdog: a job's deadline is floor + its work at the slowest rate a device is
     * expected to reach; floor 0 turns it off. Set by the loop, read by the workers. */
    _Atomic uint64_t watchdog_floor_ns;
    _Atomic uint64_t watchdog_gflops;
    atomic_bool exit_on_reset_failure;
    /* A device lost for good (exit_device_lost): its worker waits, at most EXIT_FLUSH_MS,
     * for the loop to have answered the jobs it failed, then ends the process. */
    pthread_mutex_t exit_lock;
    pthread_cond_t exit_cond;
    bool exit_wanted, exit_settled;
};

/* Puts a finished job on the worker's list for the loop to settle; under w->lock. */
static inline void done_append(struct worker *w, struct job *j)
{
    if (w->done_tail)
        w->done_tail->next = j;
    else
        w->done_head = j;
    w->done_tail = j;
}

/* clk's time ms milliseconds from now, as pthread_cond_timedwait takes a deadline. */
static inline struct timespec clock_after_ms(clockid_t clk, uint64_t ms)
{
    struct timespec t;
    clock_gettime(clk, &t);
    t.tv_sec += (time_t)(ms / 1000u);
    t.tv_nsec += (long)(ms % 1000u) * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    return t;
}

/* Writes j's signal from the host: a job that never reached the device, or whose device's
 * own write went with its context, must not leave the client's stream waiting for ever
 * (its reply says it failed). */
static inline void signal_from_host(struct job *j)
{
    if (j->sync.signal)
        atomic_store_explicit((_Atomic uint32_t *)j->sync.signal, j->sync.signal_value,
                              memory_order_release);
}

#endif
