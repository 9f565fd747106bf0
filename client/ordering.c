/* libgllm-client: jobs ordered on the caller's CUDA stream through counters in an arena
 * (gllm_stream_write_counter, gllm_stream_wait_counter, gllm_stream_order, gllm_counter_write,
 * gllm_attention_enqueue). */
#include <stdio.h>

#include "client_internal.h"
#include "cuda_stream.h"

/* The counter memory's registration with the caller's context, made on first use: an
 * arena's host memory registered, or CUDA shared memory as this process maps it. */
static int registered(gllm_memory *m, uint64_t offset)
{
    if (!m || offset % 4 != 0 || offset + 4 > m->size)
        return -EINVAL;
    const bool device = m->kind == GLLM_MEMORY_SHARED && m->share == SHARE_CUDA_VMM &&
                        !m->imported;
    if ((m->kind != GLLM_MEMORY_ARENA || !m->data) && !device)
        return -EINVAL;
    if (m->stream_reg)
        return 0;
    char why[160] = "";
    void *at = NULL;
    int r = device ? gllm_memory_map(m, &at) : 0;
    if (r == 0)
        r = device ? cuda_stream_device((uint64_t)(uintptr_t)at, &m->stream_reg, why, sizeof why)
                   : cuda_stream_register(m->data, m->size, &m->stream_reg, why, sizeof why);
    if (r < 0 && m->c)
        snprintf(m->c->last_error, sizeof m->c->last_error, "%s", why);
    return r;
}

/* Enqueues op (cuda_stream_write or cuda_stream_wait) for the counter at offset of m on
 * stream; the driver's words go to the client's last error. */
static int on_stream(gllm_memory *m, uint64_t offset, uint32_t value, void *stream,
                     int (*op)(struct cuda_stream_reg *, size_t, uint32_t, void *, char *, size_t))
{
    int r = registered(m, offset);
    char why[160] = "";
    if (r == 0 && (r = op(m->stream_reg, offset, value, stream, why, sizeof why)) < 0 && m->c)
        snprintf(m->c->last_error, sizeof m->c->last_error, "%s", why);
    return r;
}

int gllm_stream_write_counter(gllm_memory *m, uint64_t offset, uint32_t value, void *stream)
{
    return on_stream(m, offset, value, stream, cuda_stream_write);
}

int gllm_stream_wait_counter(gllm_memory *m, uint64_t offset, uint32_t value, void *stream)
{
    return on_stream(m, offset, value, stream, cuda_stream_wait);
}

/* The two counters of gllm_stream_order, a cache line apart in an arena of their own. */
#define READY_AT 0
#define DONE_AT 64

int gllm_stream_order(gllm_client *c, void *stream, gllm_counter *wait, gllm_counter *signal)
{
    return gllm_stream_order_on(c, stream, -1, wait, signal);
}

int gllm_stream_order_on(gllm_client *c, void *stream, int device, gllm_counter *wait,
                         gllm_counter *signal)
{
    if (!c || !wait || !signal || device >= GLLM_MAX_DEVICES)
        return -EINVAL;
    int r;
    if (!c->sync && (r = gllm_arena_create(c, 4096, &c->sync)) < 0)
        return r;
    /* The "ready" counter in device memory where gllmd shares CUDA memory: the device polls
     * it faster than host memory. */
    gllm_memory *ready_mem = c->sync;
    if (device >= 0 && c->hello.share == SHARE_CUDA_VMM && c->hello.device_waits) {
        if (!c->sync_dev[device] &&
            (r = gllm_memory_create_shared(c, 4096, device, &c->sync_dev[device])) < 0)
            return r;
        ready_mem = c->sync_dev[device];
    }
    /* The stream raises "ready" once what it queued before is done; the run waits for it
     * and raises "done"; the stream waits for "done" before what is queued after. The
     * stream's wait goes in before the run is submitted: it is on the GPU, so the order of
     * these host calls does not matter, and the run's submission costs no extra step. */
    const uint32_t ready = c->sync_ready + 1, done = c->sync_done + 1;
    if ((r = gllm_stream_write_counter(ready_mem, READY_AT, ready, stream)) < 0)
        return r;
    c->sync_ready = ready;   /* written or not, nothing waits for it yet */
    if ((r = gllm_stream_wait_counter(c->sync, DONE_AT, done, stream)) < 0)
        return r;
    c->sync_done = done;
    *wait = (gllm_counter){.memory = ready_mem, .offset = READY_AT, .value = ready};
    *signal = (gllm_counter){.memory = c->sync, .offset = DONE_AT, .value = done};
    return 0;
}

int gllm_counter_write(const gllm_counter *g)
{
    if (!g || !g->memory || g->memory->kind != GLLM_MEMORY_ARENA || !g->memory->data ||
        g->offset % 4 != 0 || g->offset + 4 > g->memory->size)
        return -EINVAL;
    __atomic_store_n((uint32_t *)((char *)g->memory->data + g->offset), g->value,
                     __ATOMIC_RELEASE);
    return 0;
}

int gllm_attention_enqueue(gllm_client *c, const gllm_attention_params *p, void *stream,
                           uint64_t *job)
{
    if (!c || !p || p->size < sizeof *p || p->wait.memory || p->signal.memory)
        return -EINVAL;
    gllm_attention_params q = *p;
    /* The job's device is its device tensors' (gllmd refuses a job naming two): the wait's
     * counter goes there when q is in device memory. */
    const int device = p->q.memory && p->q.memory->kind != GLLM_MEMORY_ARENA ? p->q.memory->device
                                                                            : -1;
    int r = gllm_stream_order_on(c, stream, device, &q.wait, &q.signal);
    if (r < 0)
        return r;
    if ((r = gllm_attention_submit(c, &q, job)) < 0)
        gllm_counter_write(&q.signal);   /* never submitted: the stream must not wait for it */
    return r;
}
