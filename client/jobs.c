/* libgllm-client jobs: submission, and their results by wait (spinning, then sleeping) or poll. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "client_internal.h"

int jobs_submit(gllm_client *c, uint64_t id)
{
    if (c->tx.overflow)
        return GLLM_ETOOBIG;
    int r = calls_add_job(&c->calls, id);
    if (r < 0)
        return r;
    r = conn_ring_send(c);
    if (r == 1)
        r = conn_send(c, c->tx.data, c->tx.len, -1);
    if (r < 0) {
        struct call_job *j = calls_find_job(&c->calls, id);
        free(j->message);
        calls_remove_job(&c->calls, j);
    }
    return r;
}

/* Hands the finished job's result to the caller and forgets the job. */
static int claim(gllm_client *c, struct call_job *j, gllm_job_result *res)
{
    const gllm_job_result out = j->res;
    if (out.status < 0)
        snprintf(c->last_error, sizeof c->last_error, "%s", j->message ? j->message : "");
    free(j->message);
    calls_remove_job(&c->calls, j);
    if (res)
        out_fill(res, &out, sizeof out);
    return out.status;
}

/* The job's slot, which moves only when jobs are added or removed: look it up again
 * after anything that may submit or claim. */
static struct call_job *job(gllm_client *c, uint64_t id)
{
    return calls_find_job(&c->calls, id);
}

int gllm_job_poll(gllm_client *c, uint64_t id, gllm_job_result *res)
{
    if (res && out_check(res) < 0)
        return -EINVAL;
    struct call_job *j = job(c, id);
    if (!j)
        return GLLM_ENOJOB;
    if (!j->done) {
        /* Replies read before a disconnect still count: look at the job before r. */
        int r = conn_ring_drain(c);
        if (r == 0)
            r = conn_receive(c, false);
        j = job(c, id);
        if (!j->done)
            return r < 0 ? r : -EAGAIN;
    }
    return claim(c, j, res);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gllm_client_set_wait_spin(gllm_client *c, uint32_t us)
{
    c->wait_spin_ns = (uint64_t)us * 1000;
}

/* While spinning with a ring, the socket is read this often: it still carries errors and
 * replies published before `polling` was set. */
#define RING_SOCKET_CHECK_NS 5000

/* The spin of gllm_job_wait with a reply ring: `polling` tells gllmd to spare the socket
 * copy. Before we stop, the flag is cleared and the ring read once more (proto/ring.h). */
static int spin_on_ring(gllm_client *c, uint64_t id, uint64_t until)
{
    conn_ring_set_polling(c, true);
    uint64_t next_socket = 0;
    int r = 0;
    for (;;) {
        if ((r = conn_ring_drain(c)) < 0 || job(c, id)->done)
            break;
        const uint64_t now = mono_ns();
        if (now >= until)
            break;
        if (now >= next_socket) {
            next_socket = now + RING_SOCKET_CHECK_NS;
            if ((r = conn_receive(c, false)) < 0 || job(c, id)->done)
                break;
        }
    }
    conn_ring_set_polling(c, false);
    atomic_thread_fence(memory_order_seq_cst);
    int r2 = conn_ring_drain(c);
    return r < 0 ? r : r2;
}

int gllm_job_wait(gllm_client *c, uint64_t id, gllm_job_result *res)
{
    if (res && out_check(res) < 0)
        return -EINVAL;
    struct call_job *j = job(c, id);
    if (!j)
        return GLLM_ENOJOB;
    int r = conn_ring_drain(c);
    j = job(c, id);
    const uint64_t spin_until = c->wait_spin_ns && !j->done ? mono_ns() + c->wait_spin_ns : 0;
    if (r == 0 && spin_until && c->ring) {
        r = spin_on_ring(c, id, spin_until);
        j = job(c, id);
    }
    /* Without a ring's polling flag set, every reply also comes by the socket. */
    while (!j->done) {
        if (r < 0)
            return r;
        r = conn_receive(c, !spin_until || c->ring || mono_ns() >= spin_until);
        const int r2 = conn_ring_drain(c);   /* the same replies: keeps the ring from filling */
        if (r == 0)
            r = r2;
        j = job(c, id);
    }
    return claim(c, j, res);
}
