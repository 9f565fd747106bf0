/* Runs the portable kernels (kernels/portable/pk_kernels.cpp) on the host for tests: each
 * workgroup's threads are host threads with real barriers and wave exchanges (portable.h
 * with PK_EMULATE); workgroups run one after another. Define PK_WAVE before including it;
 * include it in one file of a program. */
#ifndef GLLM_TESTS_PK_EMU_H
#define GLLM_TESTS_PK_EMU_H

#define PK_EMULATE 1
#include "pk_kernels.cpp"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

extern "C" {
#include "pk_host.h"
}

struct pk_emu_block *pk_emu;
thread_local unsigned pk_emu_thread;

struct pk_emu_thread_args {
    enum pk_kernel k;
    const void *params;
    unsigned tid;
    pthread_barrier_t *gate;         /* the workgroup's threads and the launcher */
    const bool *stop;
};

/* One thread of the workgroup, for every workgroup of the grid in turn: the launcher opens
 * the gate on each with its coordinates set, and waits at it for all threads to finish. */
static void *pk_emu_thread_main(void *arg)
{
    struct pk_emu_thread_args *l = (struct pk_emu_thread_args *)arg;
    typedef void (*attn_fn)(pk_attn_params);
    typedef void (*paged_fn)(pk_paged_params);
    static const attn_fn attn[3] = {gllm_pk_attn_f32, gllm_pk_attn_f16, gllm_pk_attn_bf16};
    static const paged_fn paged[3] = {gllm_pk_paged_f32, gllm_pk_paged_f16, gllm_pk_paged_bf16};
    pk_emu_thread = l->tid;
    for (;;) {
        pthread_barrier_wait(l->gate);
        if (*l->stop)
            return NULL;
        if (l->k <= PK_ATTN_BF16)
            attn[l->k - PK_ATTN_F32](*(const pk_attn_params *)l->params);
        else
            paged[l->k - PK_PAGED_F32](*(const pk_paged_params *)l->params);
        pthread_barrier_wait(l->gate);
    }
}

/* Kernel k on a gx x gy grid of bx-thread workgroups, as a GPU would run it; -EINVAL when bx
 * is not the kernel's workgroup size or size not its parameters'. */
static int pk_emu_run(enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx, const void *params,
                      size_t size)
{
    if (k == PK_APPEND) {                       /* no barriers: threads one after another */
        if (bx != PK_APPEND_THREADS || size != sizeof(pk_paged_params))
            return -EINVAL;
        struct pk_emu_block blk = {};
        pk_emu = &blk;
        for (blk.y = 0; blk.y < gy; blk.y++)
            for (blk.x = 0; blk.x < gx; blk.x++)
                for (unsigned t = 0; t < bx; t++) {
                    pk_emu_thread = t;
                    gllm_pk_append(*(const pk_paged_params *)params);
                }
        pk_emu = NULL;
        return 0;
    }
    if (bx != PK_BLOCK || size != (k <= PK_ATTN_BF16 ? sizeof(pk_attn_params) : sizeof(pk_paged_params)))
        return -EINVAL;
    struct pk_emu_block blk = {};
    pthread_barrier_t gate;
    bool stop = false;
    pthread_barrier_init(&blk.all, NULL, PK_BLOCK);
    pthread_barrier_init(&gate, NULL, PK_BLOCK + 1);
    for (int w = 0; w < PK_WAVES; w++)
        pthread_barrier_init(&blk.wave[w], NULL, PK_WAVE);
    pk_emu = &blk;
    pthread_t th[PK_BLOCK];
    struct pk_emu_thread_args l[PK_BLOCK];
    for (unsigned t = 0; t < PK_BLOCK; t++) {
        l[t] = {k, params, t, &gate, &stop};
        if (pthread_create(&th[t], NULL, pk_emu_thread_main, &l[t]) != 0)
            abort();                            /* the gate would never open */
    }
    for (blk.y = 0; blk.y < gy; blk.y++)
        for (blk.x = 0; blk.x < gx; blk.x++) {
            pthread_barrier_wait(&gate);        /* go */
            pthread_barrier_wait(&gate);        /* every thread done */
        }
    stop = true;
    pthread_barrier_wait(&gate);
    for (unsigned t = 0; t < PK_BLOCK; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&gate);
    pthread_barrier_destroy(&blk.all);
    for (int w = 0; w < PK_WAVES; w++)
        pthread_barrier_destroy(&blk.wave[w]);
    pk_emu = NULL;
    return 0;
}

#endif
