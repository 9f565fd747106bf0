/* The RPC channel object: its lifetime, its error replies and counters, a call's reply. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>

#include "channel.h"
#include "log.h"

struct channel *channel_new(struct server *srv)
{
    struct channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->srv = srv;
    ch->refs = 1;
    session_init(&ch->session, &srv->stats.regions);
    ch->serial = ++srv->stats.connections;
    ch->next = srv->channels;
    if (srv->channels)
        srv->channels->prev = ch;
    srv->channels = ch;
    srv->stats.clients++;
    return ch;
}

struct channel *channel_ref(struct channel *ch)
{
    ch->refs++;
    return ch;
}

void channel_unref(struct channel *ch)
{
    if (--ch->refs > 0)
        return;
    /* The last job has settled: nothing of the session is in its queues any more. */
    for (int d = 0; d < GLLM_MAX_DEVICES; d++)
        backend_queue_close(ch->srv->be, d, ch->session.lanes[d].queue);
    if (ch->conn)
        conn_free(ch->conn);
    free(ch);
}

void channel_close(struct channel *ch)
{
    if (ch->closed)
        return;
    ch->closed = true;
    if (ch->conn)
        conn_shutdown(ch->conn);
    session_release(&ch->session);
    struct server *srv = ch->srv;
    if (ch->prev)
        ch->prev->next = ch->next;
    else
        srv->channels = ch->next;
    if (ch->next)
        ch->next->prev = ch->prev;
    srv->stats.clients--;
    log_debug("client %llu closed (%u jobs still running)", (unsigned long long)ch->serial,
              (unsigned)ch->session.inflight);
    channel_unref(ch);
}

void channel_close_when_flushed(struct channel *ch)
{
    if (ch->closed)
        return;
    if (conn_flushed(ch->conn))
        channel_close(ch);
    else
        conn_close_when_flushed(ch->conn);
}

bool channel_idle(const struct channel *ch)
{
    return ch->session.inflight == 0 && (!ch->conn || conn_flushed(ch->conn));
}

void channel_send(struct channel *ch, const void *data, size_t len)
{
    if (!ch->closed)
        conn_send(ch->conn, data, len);
}

static void send_error(struct channel *ch, struct proto_buf *b, int64_t id, int code,
                       const char *fmt, va_list ap)
{
    char msg[PROTO_MAX_ERRMSG + 1];
    vsnprintf(msg, sizeof msg, fmt, ap);
    proto_buf_init(b);
    proto_pack_error(&b->pk, id, code, msg);
    struct server_stats *st = &ch->srv->stats;
    st->errors++;
    if (code == GLLM_ETOOBIG || code == GLLM_ELIMIT || code == GLLM_EQUOTA || code == GLLM_EBUSY)
        st->limit_violations++;
    channel_send(ch, b->data, b->len);
}

void channel_reply_error(struct channel *ch, int64_t id, int code, const char *fmt, ...)
{
    struct proto_buf b;
    va_list ap;
    va_start(ap, fmt);
    send_error(ch, &b, id, code, fmt, ap);
    va_end(ap);
}

void rpc_reply_error(struct rpc_call *c, int code, const char *fmt, ...)
{
    c->refused = code;
    va_list ap;
    va_start(ap, fmt);
    send_error(c->ch, c->reply, (int64_t)c->id, code, fmt, ap);
    va_end(ap);
}

msgpack_packer *rpc_reply_begin(struct rpc_call *c)
{
    proto_buf_init(c->reply);
    proto_pack_result(&c->reply->pk, c->id);
    return &c->reply->pk;
}

void rpc_reply_end(struct rpc_call *c)
{
    rpc_reply_end_fd(c, -1);
}

void rpc_reply_empty(struct rpc_call *c)
{
    msgpack_pack_map(rpc_reply_begin(c), 0);
    rpc_reply_end(c);
}

void rpc_reply_end_fd(struct rpc_call *c, int fd)
{
    if (c->reply->overflow) {
        if (fd >= 0)
            close(fd);
        rpc_reply_error(c, GLLM_ETOOBIG, "reply exceeds the message limit");
        return;
    }
    if (c->ch->closed) {
        if (fd >= 0)
            close(fd);
        return;
    }
    conn_send_fd(c->ch->conn, c->reply->data, c->reply->len, fd);
}
