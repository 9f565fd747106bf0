/* The scheduler's fault handling (sched_fault.c), for its workers (scheduler.c). */
#ifndef GLLMD_SCHED_FAULT_H
#define GLLMD_SCHED_FAULT_H

#include <stdint.h>

struct job;
struct sched;
struct worker;

/* When j, started at start, has run past the watchdog (0: no watchdog). */
uint64_t sched_job_deadline(const struct sched *s, const struct job *j, uint64_t start);
/* The watchdog's time for j, for its why. */
uint64_t sched_job_budget(const struct worker *w, const struct job *j);
/* A job naming a device tensor made before its device's last reset: GLLM_EDEVLOST, why in j. */
int sched_check_generation(const struct worker *w, struct job *j);
/* j left its device needing a reset: its signal goes out and its why says what happened. */
void sched_describe_loss(const struct worker *w, struct job *j, uint64_t budget_ns);
/* After a context-fatal error or a hung job: the device reset, or the process ended. */
void sched_reset_device(struct worker *w, const char *reason);

#endif
