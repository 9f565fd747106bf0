/* A lane (sessions own it, a worker drains it) and the exit status of a device lost for good. */
#ifndef GLLMD_SCHED_TYPES_H
#define GLLMD_SCHED_TYPES_H

#include <stdbool.h>

#include "job.h"

/* One owner's queue on one device. Lanes with work sit in the worker's ring; the worker
 * takes one job from the lane at the head and moves it to the tail, so a deep queue from
 * one client never delays another's next job for long. Fields belong to the worker's lock. */
struct lane {
    struct job *head, *tail;
    struct lane *next;
    bool in_ring;
    /* On a backend with queues, jobs ordered with the client (a wait or a signal) are
     * submitted to the lane's own queue and sit here, oldest first, until the device has
     * done them; the lane's other jobs wait until it is empty. Worker thread only. */
    struct backend_queue *queue;   /* opened at the lane's first such job; closed by the
                                    * owner (backend_queue_close) once nothing is in flight */
    struct job *fly_head, *fly_tail;
    unsigned nfly;
    struct lane *fly_next;         /* the worker's list of lanes with jobs in flight */
};

/* The status gllmd exits with when a device cannot be brought back in this process
 * (sched_set_faults), so that the service manager starts a fresh one. */
#define GLLMD_EXIT_DEVICE_LOST 3

#endif
