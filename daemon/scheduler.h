/* The scheduler: one worker thread per device runs jobs, round-robin across lanes, and
 * settles finished jobs at one point on the loop thread. */
#ifndef GLLMD_SCHEDULER_H
#define GLLMD_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "sched_types.h"

struct sched;

/* Starts one worker per device of be (at most GLLM_MAX_DEVICES). */
int sched_start(uv_loop_t *loop, struct backend *be, int ndevices, struct sched **out);
/* Queues job (job->dev set, job->ops and job->cookie filled) on lane. job->ops->settle
 * runs for it later, whatever happens, on the loop thread. */
void sched_submit(struct sched *s, struct lane *lane, struct job *job);
/* Faults (docs/hardening.md). The watchdog: a job still running floor_ms plus its work at
 * gflops after it started fails with GLLM_EJOBTIMEOUT and its device is reset; floor_ms 0:
 * off. A device that cannot be brought back in this process (its backend cannot reset in
 * process, as CUDA's cannot, or a reset failed): with exit_on_reset_failure its queued jobs
 * fail with GLLM_EDEVLOST and the process exits with GLLMD_EXIT_DEVICE_LOST within about a
 * second, so the service manager starts a fresh one; else that device's jobs fail with
 * GLLM_EDEVLOST until a reset works (or, with no reset, until gllmd is restarted). */
void sched_set_faults(struct sched *s, uint64_t floor_ms, uint64_t gflops,
                      bool exit_on_reset_failure);
/* Fault injection: the next job owner (a job's cookie) runs on dev meets a fault of kind
 * in place of its work (backend_inject_fault). The owner is compared by address, so a
 * fault armed by a connection that closes first may meet a later one's job: test builds
 * only, where that is harmless. */
int sched_arm_fault(struct sched *s, int dev, const void *owner, enum backend_fault kind);
/* Jobs submitted and not yet settled (loop thread). */
uint64_t sched_unsettled(const struct sched *s);
/* Stops the workers after the jobs they hold have run, settles them, and frees the
 * scheduler once libuv has let go of its handles. */
void sched_stop(struct sched *s);

#endif
