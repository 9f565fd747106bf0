/* Per-device health: the generation that says which device memory is still valid, the lock
 * that keeps allocations out of a reset, and the count and reason of resets for status. */
#ifndef GLLMD_DEVICE_HEALTH_H
#define GLLMD_DEVICE_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

/* A device's generation goes up by one at each reset: memory made in an earlier generation
 * is lost (its tensors answer GLLM_EDEVLOST). Any thread. */
uint32_t health_gen(int dev);

/* Around every allocation and free of dev's memory (the loop, the thread pool; any number at
 * once): false while dev is being reset (the caller treats dev's existing memory as lost and
 * makes none). While held, the generation does not change. */
bool health_lock(int dev);
void health_unlock(int dev);

/* dev's worker thread: a reset begins (waits for every holder to let go of dev, then bumps the
 * generation) and ends (status 0: serving again), with why it was needed, for status. */
void health_reset_begin(int dev, const char *reason);
void health_reset_end(int dev, int status, const char *why);

struct health_info {
    uint32_t gen;
    uint64_t resets;            /* resets that brought the device back */
    uint64_t failed_resets;
    bool failed;                /* the last reset did not bring it back */
    uint64_t last_unix_s;       /* when the last reset began; 0: never */
    uint64_t last_ns;           /* how long it took, fault to serving again */
    char last_reason[160];
};
/* Any thread. */
void health_get(int dev, struct health_info *out);
/* Resets on every device together (metrics). */
uint64_t health_total_resets(void);

#endif
