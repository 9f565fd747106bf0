/* The CPU backend's default thread count: affinity and cgroup quota, so no oversubscription. */
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cpu_cores.h"

/* The path of this process's cgroup in hierarchy `want` ("" for v2's unified one, "cpu" for
 * v1's controller), from /proc/self/cgroup; 0 when found. */
static int cgroup_path(const char *want, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return -1;
    char line[512];
    int rc = -1;
    while (rc != 0 && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        const char *ctrls = a + 1, *path = b + 1;
        bool match = *want ? false : *ctrls == '\0';
        for (const char *c = ctrls; *want && *c;) {
            size_t n = strcspn(c, ",");
            match |= n == strlen(want) && strncmp(c, want, n) == 0;
            c += n + (c[n] == ',');
        }
        if (match) {
            path = strcmp(path, "/\n") == 0 ? "\n" : path;
            snprintf(out, len, "%.*s", (int)strcspn(path, "\n"), path);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

static int read_two(const char *path, const char *fmt, long long *a, long long *b)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char line[128] = "";
    int n = fgets(line, sizeof line, f) ? sscanf(line, fmt, a, b) : 0;
    fclose(f);
    return n;
}

/* The quota in CPUs, rounded up; 0: none found. */
static int cgroup_quota(void)
{
    char cg[300], path[400];
    long long quota = 0, period = 0;
    if (cgroup_path("", cg, sizeof cg) == 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", cg);
        if (read_two(path, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0)
            return (int)((quota + period - 1) / period);
    }
    if (cgroup_path("cpu", cg, sizeof cg) == 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us", cg);
        if (read_two(path, "%lld", &quota, &period) != 1 || quota <= 0)
            return 0;
        snprintf(path, sizeof path, "/sys/fs/cgroup/cpu%s/cpu.cfs_period_us", cg);
        if (read_two(path, "%lld", &period, &quota) == 1 && period > 0)
            return (int)((quota + period - 1) / period);
    }
    return 0;
}

int cpu_cores_usable(void)
{
    cpu_set_t set;
    long n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    const int q = cgroup_quota();
    if (q > 0 && q < n)
        n = q;
    return n > 0 ? (int)(n < 1024 ? n : 1024) : 1;
}
