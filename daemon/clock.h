/* The daemon's one clock: CLOCK_MONOTONIC in nanoseconds, for timings and deadlines. */
#ifndef GLLMD_CLOCK_H
#define GLLMD_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
