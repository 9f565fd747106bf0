/* The ISA levels the CPU attention kernel is built for, and which one runs here. */
#ifndef GLLMD_CPU_ISA_H
#define GLLMD_CPU_ISA_H

#include <stdbool.h>
#include <stddef.h>

#include "cpu_pool.h"

/* Oldest first; CPU_ISA_GENERIC runs on any CPU. */
enum cpu_isa { CPU_ISA_GENERIC, CPU_ISA_X86_64_V2, CPU_ISA_X86_64_V3, CPU_ISA_X86_64_V4,
               CPU_ISA_COUNT };

/* The environment variable that forces a level (its name, or "best"). */
#define CPU_ISA_ENV "GLLM_CPU_ISA"

/* "generic", "x86-64-v2", ...; NULL for a value outside the enum. */
const char *cpu_isa_name(enum cpu_isa isa);
/* What the level adds, in a few words ("AVX2, FMA, F16C"). */
const char *cpu_isa_features(enum cpu_isa isa);
/* Whether this build has the level and this CPU (by CPUID) runs it. */
bool cpu_isa_runs(enum cpu_isa isa);
/* The newest level cpu_isa_runs. */
enum cpu_isa cpu_isa_best(void);
/* The level force names ("best", "" or NULL: cpu_isa_best), or -EINVAL (unknown name) or
 * -ENOTSUP (this CPU or build lacks it), with a one-line why. */
int cpu_isa_pick(const char *force, char *why, size_t len);
/* The level's kernel task (cpu_fa.h). */
cpu_task_fn *cpu_isa_task(enum cpu_isa isa);

#endif
