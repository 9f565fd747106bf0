/* How many CPUs this process may use: its affinity mask, capped by a cgroup CPU quota. */
#ifndef GLLMD_CPU_CORES_H
#define GLLMD_CPU_CORES_H

/* At least 1: the CPUs of sched_getaffinity (else the online ones), no more than the quota
 * of the process's cgroup rounded up (v2 cpu.max, v1 cpu.cfs_quota_us / cfs_period_us). */
int cpu_cores_usable(void);

#endif
