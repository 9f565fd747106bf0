/* CPU ISA levels: CPUID probes, names, and each level's build of the attention kernel. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "cpu_fa.h"
#include "cpu_isa.h"

struct level {
    const char *name, *features;
    cpu_task_fn *task;
};

static const struct level levels[CPU_ISA_COUNT] = {
    [CPU_ISA_GENERIC] = {"generic", "the compiler's default target", fa_task_generic},
#if defined(__x86_64__)
    [CPU_ISA_X86_64_V2] = {"x86-64-v2", "SSE4.2, POPCNT", fa_task_x86_64_v2},
    [CPU_ISA_X86_64_V3] = {"x86-64-v3", "AVX2, FMA, F16C", fa_task_x86_64_v3},
    [CPU_ISA_X86_64_V4] = {"x86-64-v4", "AVX-512 F/BW/DQ/VL", fa_task_x86_64_v4},
#else
    [CPU_ISA_X86_64_V2] = {"x86-64-v2", "SSE4.2, POPCNT", NULL},
    [CPU_ISA_X86_64_V3] = {"x86-64-v3", "AVX2, FMA, F16C", NULL},
    [CPU_ISA_X86_64_V4] = {"x86-64-v4", "AVX-512 F/BW/DQ/VL", NULL},
#endif
};

const char *cpu_isa_name(enum cpu_isa isa)
{
    return (unsigned)isa < CPU_ISA_COUNT ? levels[isa].name : NULL;
}

const char *cpu_isa_features(enum cpu_isa isa)
{
    return (unsigned)isa < CPU_ISA_COUNT ? levels[isa].features : NULL;
}

#if defined(__x86_64__)
/* F16C by CPUID leaf 1 (ECX bit 29): not every compiler's __builtin_cpu_supports knows it. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

/* __builtin_cpu_supports also checks that the OS saves the AVX and AVX-512 state (XCR0). */
bool cpu_isa_runs(enum cpu_isa isa)
{
    if ((unsigned)isa >= CPU_ISA_COUNT || !levels[isa].task)
        return false;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt") &&
                    __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
    const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi2") && has_f16c();
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
    switch (isa) {
    case CPU_ISA_X86_64_V2: return v2;
    case CPU_ISA_X86_64_V3: return v3;
    case CPU_ISA_X86_64_V4: return v4;
    default: return true;
    }
#else
    return isa == CPU_ISA_GENERIC;
#endif
}

enum cpu_isa cpu_isa_best(void)
{
    for (int i = CPU_ISA_COUNT - 1; i > 0; i--)
        if (cpu_isa_runs((enum cpu_isa)i))
            return (enum cpu_isa)i;
    return CPU_ISA_GENERIC;
}

int cpu_isa_pick(const char *force, char *why, size_t len)
{
    if (!force || !*force || strcmp(force, "best") == 0)
        return (int)cpu_isa_best();
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        if (strcmp(force, levels[i].name) != 0)
            continue;
        if (cpu_isa_runs((enum cpu_isa)i))
            return i;
        snprintf(why, len, "%s=%s: this %s lacks it (%s); the best it runs is %s", CPU_ISA_ENV,
                 force, levels[i].task ? "CPU" : "build", levels[i].features,
                 levels[cpu_isa_best()].name);
        return -ENOTSUP;
    }
    snprintf(why, len, "%s=%.40s: not a level (generic, x86-64-v2, x86-64-v3, x86-64-v4, best)",
             CPU_ISA_ENV, force);
    return -EINVAL;
}

cpu_task_fn *cpu_isa_task(enum cpu_isa isa)
{
    return (unsigned)isa < CPU_ISA_COUNT ? levels[isa].task : NULL;
}
