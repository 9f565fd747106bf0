/* Busy polling of the connections' rings and the daemon-wide job limit. */
#include <string.h>

#include "clock.h"
#include "scheduler.h"
#include "server.h"

/* Busy polling goes on this long after the last request or job end with none running: a
 * client stepping a decode loop sends its next job within microseconds of a reply. */
#define BUSY_POLL_LINGER_NS 200000

static void busy_poll_tick(uv_idle_t *h)
{
    struct server *srv = h->data;
    conn_set_take_ring_requests(&srv->conns);
    /* Until every job has been settled, not just run: a job finishes on its worker before
     * the loop settles it and restarts the linger, and a kernel longer than the linger
     * would otherwise let the loop stop polling just as the client's next request comes. */
    if (sched_unsettled(srv->sched) || now_ns() < srv->busy_until)
        return;
    /* Clients see the flag go down, then we look once more: a request put in a ring just
     * before comes with a wake-up packet, or is found here (proto/ring.h). */
    uv_idle_stop(h);
    conn_set_ring_polling(&srv->conns, false);
    atomic_thread_fence(memory_order_seq_cst);
    conn_set_take_ring_requests(&srv->conns);
}

void server_busy_poll(struct server *srv)
{
    if (!srv->busy_poll)
        return;
    srv->busy_until = now_ns() + BUSY_POLL_LINGER_NS;
    if (!uv_is_active((uv_handle_t *)&srv->busy_idle)) {
        uv_idle_start(&srv->busy_idle, busy_poll_tick);
        conn_set_ring_polling(&srv->conns, true);
    }
}

bool server_busy_polling(const struct server *srv)
{
    return uv_is_active((const uv_handle_t *)&srv->busy_idle);
}

void server_set_busy_poll(struct server *srv, int mode)
{
    srv->busy_poll = mode < 0 ? strcmp(backend_name(srv->be), "cpu") != 0 : mode > 0;
    if (!srv->busy_poll && uv_is_active((uv_handle_t *)&srv->busy_idle))
        uv_idle_stop(&srv->busy_idle);
}

void server_busy_poll_init(struct server *srv, int mode)
{
    uv_idle_init(srv->loop, &srv->busy_idle);
    srv->busy_idle.data = srv;
    server_set_busy_poll(srv, mode);
}

void server_busy_poll_close(struct server *srv)
{
    uv_close((uv_handle_t *)&srv->busy_idle, NULL);
}

bool server_may_submit(const struct server *srv)
{
    return srv->stats.jobs_inflight < srv->limits.max_inflight_total;
}
