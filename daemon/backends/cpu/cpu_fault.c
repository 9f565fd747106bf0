/* The CPU device's memory ledger and its simulated faults: a reset releases every block of
 * the device, as a GPU's context reset does, so the daemon's bookkeeping of lost memory is
 * checked by the same tests on both. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_fault.h"
#include "cpu_share.h"

void cpu_ledger_init(struct cpu_ledger *l)
{
    pthread_mutex_init(&l->lock, NULL);
    l->blocks = NULL;
    l->bytes = 0;
    atomic_init(&l->poisoned, false);
    atomic_init(&l->sticky, false);
}

static void release_block(struct cpu_block *b)
{
    if (b->share)
        cpu_share_free(NULL, 0, &b->sh);
    else
        free(b->ptr);
    free(b);
}

void cpu_ledger_release_all(struct cpu_ledger *l)
{
    pthread_mutex_lock(&l->lock);
    struct cpu_block *b = l->blocks;
    l->blocks = NULL;
    l->bytes = 0;
    pthread_mutex_unlock(&l->lock);
    while (b) {
        struct cpu_block *next = b->next;
        release_block(b);
        b = next;
    }
}

int cpu_ledger_add(struct cpu_ledger *l, void *ptr, size_t bytes, const struct backend_shared *sh)
{
    struct cpu_block *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->ptr = ptr;
    b->bytes = bytes;
    if (sh) {
        b->share = true;
        b->sh = *sh;
    }
    pthread_mutex_lock(&l->lock);
    b->next = l->blocks;
    l->blocks = b;
    l->bytes += bytes;
    pthread_mutex_unlock(&l->lock);
    return 0;
}

bool cpu_ledger_remove(struct cpu_ledger *l, void *ptr)
{
    pthread_mutex_lock(&l->lock);
    for (struct cpu_block **p = &l->blocks; *p; p = &(*p)->next) {
        struct cpu_block *b = *p;
        if (b->ptr != ptr)
            continue;
        *p = b->next;
        l->bytes -= b->bytes;
        pthread_mutex_unlock(&l->lock);
        free(b);
        return true;
    }
    pthread_mutex_unlock(&l->lock);
    return false;
}

uint64_t cpu_ledger_bytes(struct cpu_ledger *l)
{
    pthread_mutex_lock(&l->lock);
    uint64_t n = l->bytes;
    pthread_mutex_unlock(&l->lock);
    return n;
}

int cpu_fault_reset(struct cpu_ledger *l, char *why, size_t len)
{
    if (atomic_load(&l->sticky)) {
        snprintf(why, len, "the simulated sticky fault outlives any reset in this process");
        return GLLM_EBACKEND;
    }
    cpu_ledger_release_all(l);
    atomic_store(&l->poisoned, false);
    return 0;
}

int cpu_fault_inject(struct cpu_ledger *l, enum backend_fault kind, uint64_t deadline_ns,
                     char *why, size_t len)
{
    switch (kind) {
    case BACKEND_FAULT_TRAP:
    case BACKEND_FAULT_OOB:
        atomic_store(&l->poisoned, true);
        snprintf(why, len, "%s (simulated by the CPU backend)",
                 kind == BACKEND_FAULT_TRAP ? "a kernel trapped"
                                            : "a kernel read an unmapped address");
        return GLLM_EDEVLOST;
    case BACKEND_FAULT_STICKY:
        atomic_store(&l->poisoned, true);
        atomic_store(&l->sticky, true);
        snprintf(why, len, "a sticky fault (simulated by the CPU backend: no reset undoes it)");
        return GLLM_EDEVLOST;
    case BACKEND_FAULT_SPIN:
        if (!deadline_ns) {
            snprintf(why, len, "a simulated spin needs the watchdog on (watchdog_ms > 0)");
            return -EOPNOTSUPP;
        }
        /* Busy as a hung kernel is, until the watchdog's deadline says to give up on it. */
        while (backend_now_ns() < deadline_ns)
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        snprintf(why, len, "a kernel was still spinning (simulated by the CPU backend)");
        return GLLM_EJOBTIMEOUT;
    case BACKEND_FAULT_NONE:
        break;
    }
    snprintf(why, len, "no such fault");
    return -EINVAL;
}
