/* libgllm-client synchronous calls: build a request, send it, wait for its reply. */
#include "client_internal.h"

msgpack_packer *rpc_begin(gllm_client *c, const char *method, uint64_t *id)
{
    *id = ++c->next_id;
    proto_buf_init(&c->tx);
    proto_pack_request(&c->tx.pk, *id, method);
    return &c->tx.pk;
}

static int call(gllm_client *c, uint64_t id, int fd, bool wants_fd)
{
    if (c->tx.overflow)
        return GLLM_ETOOBIG;
    struct call_table *t = &c->calls;
    calls_expect(t, id);
    t->call_wants_fd = wants_fd;
    int r = conn_send(c, c->tx.data, c->tx.len, fd);
    while (r == 0 && !t->call_done)
        r = conn_receive(c, true);
    if (r < 0)
        return r;
    if (t->call_error)
        return t->call_error;
    if (t->call_msg.error_code) {
        r = t->call_msg.error_code;
        memcpy(c->last_error, t->call_msg.error_message, sizeof c->last_error);
        calls_end(t);
        return r;
    }
    return 0;
}

int rpc_call(gllm_client *c, uint64_t id, int fd)
{
    return call(c, id, fd, false);
}

int rpc_call_fd(gllm_client *c, uint64_t id, int fd, int *fd_out)
{
    struct call_table *t = &c->calls;
    int r = call(c, id, fd, true);
    t->call_wants_fd = false;
    if (r < 0)
        return r;
    *fd_out = t->call_has_fd ? t->call_fd : -1;
    t->call_has_fd = false;
    return 0;
}

void rpc_end(gllm_client *c)
{
    calls_end(&c->calls);
}
