/* Device workers: one thread per device runs jobs, round-robin across sessions. */
#ifndef GLLMD_WORKER_H
#define GLLMD_WORKER_H

#include <stdbool.h>
#include <uv.h>

#include "job.h"

/* A session's queue on one device. Lanes with work sit in the worker's ring;
 * the worker takes one job from the lane at the head and moves it to the tail,
 * so a deep queue from one client never delays another's next job for long.
 * Fields belong to the worker's lock. */
struct lane {
    struct job *head, *tail;
    struct lane *next;
    bool in_ring;
};

struct worker;

/* done(job, arg) runs on the loop thread for every job, in completion order. */
typedef void worker_done_fn(struct job *job, void *arg);
/* reply(job, arg, scratch) runs on the worker thread as soon as a job finishes, before
 * done: it may answer the client from there (scratch: the worker's own buffer). */
typedef void worker_reply_fn(struct job *job, void *arg, struct proto_buf *scratch);

int worker_start(uv_loop_t *loop, struct backend *be, int dev, worker_reply_fn *reply,
                 worker_done_fn *done, void *arg, struct worker **out);
/* Runs done for the jobs finished so far, now (loop thread). */
void worker_reap(struct worker *w);
void worker_submit(struct worker *w, struct lane *lane, struct job *job);
/* Stops the thread after the jobs it holds are finished and answered. The
 * handle closes asynchronously; the worker frees itself when it has. */
void worker_stop(struct worker *w);

#endif
