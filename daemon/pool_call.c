/* Requests answered from libuv's thread pool (pool_call.h). */
#include "pool_call.h"

static void pool_run(uv_work_t *w)
{
    struct pool_call *pc = w->data;
    pc->run(pc);
}

static void pool_done(uv_work_t *w, int status)
{
    (void)status;                 /* never cancelled */
    struct pool_call *pc = w->data;
    struct channel *ch = pc->ch;
    struct proto_buf reply;
    struct rpc_call c = {.ch = ch, .id = pc->id, .reply = &reply};
    ch->srv->controls_inflight--;
    pc->answer(pc, &c);           /* frees pc */
    if (!ch->closed && ch->conn)
        conn_release(ch->conn);   /* its next request may be read now */
    channel_unref(ch);
}

int pool_call_start(struct rpc_call *c, struct pool_call *pc)
{
    struct server *srv = c->ch->srv;
    pc->ch = c->ch;
    pc->id = c->id;
    pc->work.data = pc;
    int r = uv_queue_work(srv->loop, &pc->work, pool_run, pool_done);
    if (r < 0)
        return r;
    channel_ref(c->ch);
    if (c->ch->conn)
        conn_hold(c->ch->conn);
    srv->controls_inflight++;
    return 0;
}
