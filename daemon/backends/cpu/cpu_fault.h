/* The CPU device's ledger of its memory, and the faults and resets it simulates so the
 * daemon's recovery path runs in CI the way it runs on a GPU. */
#ifndef GLLM_CPU_FAULT_H
#define GLLM_CPU_FAULT_H

#include <pthread.h>
#include <stdatomic.h>

#include "backend_api.h"

/* One allocation: device-tensor memory (share false) or a shared mapping. */
struct cpu_block {
    struct cpu_block *next;
    void *ptr;
    size_t bytes;
    bool share;
    struct backend_shared sh;
};

struct cpu_ledger {
    pthread_mutex_t lock;       /* the loop allocates, the worker resets */
    struct cpu_block *blocks;
    uint64_t bytes;
    atomic_bool poisoned;       /* a simulated context-fatal fault: every operation fails */
    atomic_bool sticky;         /* a simulated sticky fault: resets fail, as on CUDA */
};

void cpu_ledger_init(struct cpu_ledger *l);
/* Releases every block (the backend's close; a reset). */
void cpu_ledger_release_all(struct cpu_ledger *l);
/* Records a block; -ENOMEM (the block is not recorded) when the entry cannot be made. */
int cpu_ledger_add(struct cpu_ledger *l, void *ptr, size_t bytes, const struct backend_shared *sh);
/* Forgets ptr's block; false when the ledger has none (it was released by a reset). */
bool cpu_ledger_remove(struct cpu_ledger *l, void *ptr);
uint64_t cpu_ledger_bytes(struct cpu_ledger *l);

/* What a GPU's reset does, simulated: every allocation of the device goes, the poison is
 * cleared. */
int cpu_fault_reset(struct cpu_ledger *l, char *why, size_t len);
/* A trap or an out-of-bounds read: poisons the device and returns GLLM_EDEVLOST; a spin:
 * returns GLLM_EJOBTIMEOUT once deadline_ns passes. */
int cpu_fault_inject(struct cpu_ledger *l, enum backend_fault kind, uint64_t deadline_ns,
                     char *why, size_t len);

#endif
