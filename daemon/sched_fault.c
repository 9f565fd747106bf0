/* What follows a fault on a device, on its worker: the watchdog, the reset, the exit if lost.
 * The watchdog's deadline for a job, the words a lost job's reply gets, the device's reset
 * (guarded against one that never returns), and the process's exit when the device cannot be
 * brought back. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device_health.h"
#include "log.h"
#include "sched_fault.h"
#include "sched_internal.h"

/* Work of a job in floating-point operations, for its watchdog deadline; a copy counts four
 * per byte (host memory may be pageable and slow). */
static double job_work(const struct job *j)
{
    switch (j->kind) {
    case JOB_ATTENTION: {
        const struct attn_args *a = &j->args;      /* every run of a repeated job */
        return 4.0 * (double)a->B * (double)a->Hq * (double)a->Sq * (double)a->Skv * (double)a->D *
               (double)attn_runs(a);
    }
    case JOB_COPY:
        return 4.0 * (double)j->copy.bytes;
    case JOB_PAGED: {
        const struct paged_args *p = &j->paged;
        if (p->op == PAGED_APPEND)
            return 4.0 * (double)p->nnew * (double)p->Hkv * (double)p->D;
        return 4.0 * (double)p->nq * (double)p->Hq * (double)p->max_kv_len * (double)p->D;
    }
    }
    return 0;
}

uint64_t sched_job_deadline(const struct sched *s, const struct job *j, uint64_t start)
{
    uint64_t floor_ns = atomic_load_explicit(&s->watchdog_floor_ns, memory_order_relaxed);
    uint64_t gflops = atomic_load_explicit(&s->watchdog_gflops, memory_order_relaxed);
    if (!floor_ns)
        return 0;
    double extra = gflops ? job_work(j) / (double)gflops : 0;   /* flops / (Gflop/s) = ns */
    if (extra > 1e18)
        extra = 1e18;
    return start + floor_ns + (uint64_t)extra;
}

/* A job naming a device tensor made before its device's last reset fails without running:
 * the memory went with the old context, and the address may be another tensor's now. */
int sched_check_generation(const struct worker *w, struct job *j)
{
    for (int i = 0; i < j->narenas; i++) {
        const struct arena *a = j->arenas[i];
        if (!arena_lost(a))
            continue;
        struct health_info h;
        health_get(a->dev, &h);
        snprintf(j->why, sizeof j->why, "device %d was reset after a fault (%.60s): device "
                 "tensor %u is lost; free it and create it again", w->dev, h.last_reason, a->id);
        return GLLM_EDEVLOST;
    }
    return 0;
}

/* How long a worker ending the process waits for the loop to answer the jobs it failed: a
 * hung GPU must not hold the exit, and a reply the client's socket cannot take at once is
 * not worth more than a restart (that client reads DISCONNECTED instead). */
#define EXIT_FLUSH_MS 1000

/* Worker thread: every job queued on w fails with GLLM_EDEVLOST (why: reason) and goes to
 * the loop to be answered, as if it had run. */
static void fail_queued(struct worker *w, const char *reason)
{
    struct job *all = NULL, **tail = &all;
    pthread_mutex_lock(&w->lock);
    for (struct lane *l = w->ring_head; l; l = l->next) {
        *tail = l->head;
        tail = &l->tail->next;
        l->head = l->tail = NULL;
        l->in_ring = false;
    }
    w->ring_head = w->ring_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    for (struct job *j = all, *next; j; j = next) {
        next = j->next;
        j->next = NULL;
        j->t_start = j->t_end = now_ns();
        j->status = GLLM_EDEVLOST;
        int n = snprintf(j->why, sizeof j->why, "device %d lost: gllmd is restarting; connect "
                         "again and create device tensors again (", w->dev);
        if (n > 0 && (size_t)n < sizeof j->why)
            snprintf(j->why + n, sizeof j->why - (size_t)n, "%s)", reason);
        if (j->sync.signal)    /* the client's stream does not wait for ever */
            atomic_store_explicit((_Atomic uint32_t *)j->sync.signal, j->sync.signal_value,
                                  memory_order_release);
        j->ops->finished(j, w->scratch);
        pthread_mutex_lock(&w->lock);
        done_append(w, j);
        pthread_mutex_unlock(&w->lock);
    }
}

/* Worker thread, for a device this process cannot bring back (its backend cannot reset in
 * process, or a reset failed): what the driver's documentation prescribes after a sticky
 * error is a new process. The device's queued jobs fail with DEVLOST, the loop answers
 * them (the faulting job's answer is already on its way), and the process exits with
 * GLLMD_EXIT_DEVICE_LOST, which the service manager's Restart=on-failure answers with a
 * new gllmd. Every other client loses its connection: see docs/hardening.md. */
static _Noreturn void exit_device_lost(struct worker *w, const char *reason)
{
    struct sched *s = w->sched;
    uint64_t t0 = now_ns();
    log_err("device %d: %s: it cannot be brought back in this process; failing its jobs and "
            "exiting with status %d so that a new gllmd starts", w->dev, reason,
            GLLMD_EXIT_DEVICE_LOST);
    fail_queued(w, reason);
    const struct timespec until = clock_after_ms(CLOCK_REALTIME, EXIT_FLUSH_MS);
    pthread_mutex_lock(&s->exit_lock);
    s->exit_wanted = true;
    uv_async_send(&w->async);
    while (!s->exit_settled)
        if (pthread_cond_timedwait(&s->exit_cond, &s->exit_lock, &until) != 0)
            break;
    bool settled = s->exit_settled;
    pthread_mutex_unlock(&s->exit_lock);
    log_err("device %d: exiting (status %d) after %.1f ms%s", w->dev, GLLMD_EXIT_DEVICE_LOST,
            (double)(now_ns() - t0) / 1e6,
            settled ? "" : "; the loop had not answered every failed job");
    _exit(GLLMD_EXIT_DEVICE_LOST);
}

/* A reset that does not come back (a driver waiting on work that never ends) would hold its
 * worker for ever: past RESET_GUARD_S, plus what the backend allows for the arenas it maps
 * again (backend_reset_allowance_ms), a guard thread ends the process, as a failed reset
 * does, when exit_on_reset_failure allows; else it only says so. */
#define RESET_GUARD_S 10

struct reset_guard {
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done, may_exit;
    int dev;
    uint64_t limit_ms;
};

static void *reset_guard_main(void *arg)
{
    struct reset_guard *g = arg;
    const struct timespec until = clock_after_ms(CLOCK_REALTIME, g->limit_ms);
    pthread_mutex_lock(&g->lock);
    while (!g->done)
        if (pthread_cond_timedwait(&g->done_cond, &g->lock, &until) != 0)
            break;
    bool stuck = !g->done;
    pthread_mutex_unlock(&g->lock);
    if (stuck && g->may_exit) {
        log_err("device %d: reset still running after %.1f s; exiting with status %d so that a "
                "new gllmd starts (exit_on_reset_failure)", g->dev, (double)g->limit_ms / 1e3,
                GLLMD_EXIT_DEVICE_LOST);
        _exit(GLLMD_EXIT_DEVICE_LOST);
    }
    if (stuck)
        log_err("device %d: reset still running after %.1f s", g->dev,
                (double)g->limit_ms / 1e3);
    return NULL;
}

/* Marks the worker's device failed for good with exit_on_reset_failure off: its jobs fail
 * with DEVLOST until gllmd is restarted by hand; the other devices serve. */
static void keep_failed(struct worker *w, const char *why)
{
    w->failed = true;
    w->retry_ns = UINT64_MAX;
    snprintf(w->failed_why, sizeof w->failed_why, "%s", why);
}

/* After a context-fatal error or a hung job (reason: why), on the worker's thread so nothing
 * else runs on the device meanwhile. A backend that recovers in process (the CPU backend)
 * resets the device: jobs still queued stay queued; those naming the device's old tensors
 * fail when taken (check_generation), the others run on the new context. One that cannot
 * (CUDA: after a sticky error the driver refuses the process a new context, and a reset
 * behind a hung wait never returns) ends the process, unless exit_on_reset_failure is off. */
void sched_reset_device(struct worker *w, const char *reason)
{
    const bool may_exit = atomic_load(&w->sched->exit_on_reset_failure);
    if (!backend_recovers_in_process(w->be)) {
        if (may_exit)
            exit_device_lost(w, reason);
        health_reset_begin(w->dev, reason);
        health_reset_end(w->dev, GLLM_EDEVLOST, "not possible in this process");
        keep_failed(w, reason);
        log_err("device %d: %s: it cannot be brought back in this process and "
                "exit_on_reset_failure is off: its jobs fail until gllmd is restarted",
                w->dev, reason);
        return;
    }
    char why[160] = "";
    uint64_t t0 = now_ns();
    log_err("device %d: %s: resetting its context", w->dev, reason);
    health_reset_begin(w->dev, reason);
    struct reset_guard guard = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                .done_cond = PTHREAD_COND_INITIALIZER, .dev = w->dev,
                                .may_exit = may_exit,
                                .limit_ms = RESET_GUARD_S * 1000ull +
                                            backend_reset_allowance_ms(w->be, w->dev)};
    pthread_t guard_thread;
    bool guarded = pthread_create(&guard_thread, NULL, reset_guard_main, &guard) == 0;
    int r = backend_reset(w->be, w->dev, why, sizeof why);
    if (guarded) {
        pthread_mutex_lock(&guard.lock);
        guard.done = true;
        pthread_cond_signal(&guard.done_cond);
        pthread_mutex_unlock(&guard.lock);
        pthread_join(guard_thread, NULL);
    }
    health_reset_end(w->dev, r, why);
    double ms = (double)(now_ns() - t0) / 1e6;
    if (r == 0) {
        w->failed = false;
        log_warn("device %d: reset in %.1f ms; serving again (device tensors made before it are "
                 "lost)", w->dev, ms);
        return;
    }
    w->failed = true;
    w->retry_ns = now_ns() + 1000000000ull;   /* again in a second, when a job comes */
    snprintf(w->failed_why, sizeof w->failed_why, "%s", why[0] ? why : gllm_strerror(r));
    if (may_exit) {
        char what[200];
        snprintf(what, sizeof what, "reset failed after %.1f ms (%.150s)", ms, w->failed_why);
        exit_device_lost(w, what);
    }
    log_err("device %d: reset failed after %.1f ms (%s); its jobs fail until one succeeds",
            w->dev, ms, w->failed_why);
}

/* The watchdog's time for j, for its why. */
uint64_t sched_job_budget(const struct worker *w, const struct job *j)
{
    const uint64_t deadline = sched_job_deadline(w->sched, j, j->t_start);
    return deadline ? deadline - j->t_start : 0;
}

/* j left its device needing a reset (status: GLLM_EDEVLOST or GLLM_EJOBTIMEOUT): its
 * signal goes out from here and its why says what happened, in the client's terms. budget:
 * the watchdog's time for it. */
void sched_describe_loss(const struct worker *w, struct job *j, uint64_t budget_ns)
{
    if (j->sync.signal_host)
        signal_from_host(j);
    char cause[sizeof j->why];
    if (j->status == GLLM_EJOBTIMEOUT)
        snprintf(cause, sizeof cause, "job ran past its watchdog deadline of %.0f ms%s%.80s",
                 (double)budget_ns / 1e6, j->why[0] ? ": " : "", j->why);
    else
        snprintf(cause, sizeof cause, "%s", j->why[0] ? j->why : "context-fatal device error");
    if (backend_recovers_in_process(w->be))
        snprintf(j->why, sizeof j->why, "device %d reset: %.130s", w->dev, cause);
    else
        snprintf(j->why, sizeof j->why, "device %d lost, gllmd restarts: %.120s", w->dev, cause);
}

