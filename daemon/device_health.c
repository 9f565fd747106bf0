/* Device generations and reset bookkeeping (device_health.h): one process, one backend, so
 * the table is the process's own. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "device_health.h"
#include "gllm/gllm.h"

struct health {
    /* Read-held around each allocation and free of the device's memory (the loop, the thread
     * pool), write-held by a reset throughout: makers never wait for one another. */
    pthread_rwlock_t lock;
    _Atomic uint32_t gen;
    pthread_mutex_t info_lock;  /* guards the rest */
    struct health_info info;
    uint64_t began_ns;
};

static struct health table[GLLM_MAX_DEVICES] = {
    [0 ... GLLM_MAX_DEVICES - 1] = {.lock = PTHREAD_RWLOCK_INITIALIZER,
                                    .info_lock = PTHREAD_MUTEX_INITIALIZER},
};

static struct health *at(int dev)
{
    return dev >= 0 && dev < GLLM_MAX_DEVICES ? &table[dev] : NULL;
}

uint32_t health_gen(int dev)
{
    struct health *h = at(dev);
    return h ? atomic_load_explicit(&h->gen, memory_order_acquire) : 0;
}

/* Nobody waits for a reset: a try, false while one runs (glibc's default rwlock prefers
 * readers, so a reset waiting for the lock does not turn the try away). */
bool health_lock(int dev)
{
    struct health *h = at(dev);
    return h && pthread_rwlock_tryrdlock(&h->lock) == 0;
}

void health_unlock(int dev)
{
    struct health *h = at(dev);
    if (h)
        pthread_rwlock_unlock(&h->lock);
}

void health_reset_begin(int dev, const char *reason)
{
    struct health *h = at(dev);
    if (!h)
        return;
    pthread_rwlock_wrlock(&h->lock);
    atomic_fetch_add_explicit(&h->gen, 1, memory_order_acq_rel);
    pthread_mutex_lock(&h->info_lock);
    h->began_ns = now_ns();
    h->info.last_unix_s = (uint64_t)time(NULL);
    snprintf(h->info.last_reason, sizeof h->info.last_reason, "%s", reason);
    pthread_mutex_unlock(&h->info_lock);
}

void health_reset_end(int dev, int status, const char *why)
{
    struct health *h = at(dev);
    if (!h)
        return;
    pthread_mutex_lock(&h->info_lock);
    h->info.last_ns = now_ns() - h->began_ns;
    h->info.failed = status != 0;
    if (status == 0) {
        h->info.resets++;
    } else {
        h->info.failed_resets++;
        size_t n = strlen(h->info.last_reason);
        snprintf(h->info.last_reason + n, sizeof h->info.last_reason - n, "; reset failed: %s",
                 why);
    }
    pthread_mutex_unlock(&h->info_lock);
    pthread_rwlock_unlock(&h->lock);
}

void health_get(int dev, struct health_info *out)
{
    struct health *h = at(dev);
    memset(out, 0, sizeof *out);
    if (!h)
        return;
    pthread_mutex_lock(&h->info_lock);
    *out = h->info;
    pthread_mutex_unlock(&h->info_lock);
    out->gen = health_gen(dev);
}

uint64_t health_total_resets(void)
{
    uint64_t n = 0;
    for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
        pthread_mutex_lock(&table[i].info_lock);
        n += table[i].info.resets + table[i].info.failed_resets;
        pthread_mutex_unlock(&table[i].info_lock);
    }
    return n;
}
