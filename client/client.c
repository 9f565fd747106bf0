/* libgllm-client's client handle: connect (socket, hello, ring), disconnect, and its accessors. */
#include <stdlib.h>
#include <unistd.h>

#include "client_internal.h"

/* Hands gllmd a ring when it reads our layout. Best effort: without one, every request
 * and reply goes by the socket, as with a daemon that predates rings. */
static void open_ring(gllm_client *c, uint64_t offered)
{
    if (offered != GLLM_RING_BYTES)
        return;
    int fd;
    struct gllm_ring *rg = conn_ring_create(&fd);
    if (!rg)
        return;
    uint64_t id;
    msgpack_packer *pk = rpc_begin(c, "ring", &id);
    msgpack_pack_map(pk, 0);
    if (rpc_call(c, id, fd) == 0)
        c->ring = rg;
    else
        conn_ring_unmap(rg);
    rpc_end(c);
    close(fd);
}

int gllm_connect(const char *path, gllm_client **out)
{
    char def[108];
    if (!path) {
        int r = gllm_default_socket_path(def, sizeof def);
        if (r < 0)
            return r;
        path = def;
    }
    int fd;
    int r = conn_open(path, &fd);
    if (r < 0)
        return r;
    gllm_client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return -ENOMEM;
    }
    c->fd = fd;
    uint64_t ring_bytes = 0;
    r = info_hello(c, &ring_bytes);
    if (r < 0) {
        calls_free(&c->calls);
        close(c->fd);
        free(c);
        return r;
    }
    if (strcmp(c->hello.caps.backend, "cpu") != 0)
        c->wait_spin_ns = (uint64_t)GLLM_WAIT_SPIN_US_DEFAULT * 1000;
    open_ring(c, ring_bytes);
    *out = c;
    return 0;
}

void gllm_disconnect(gllm_client *c)
{
    if (!c)
        return;
    memory_detach_all(c);    /* the daemon gives back its side when the connection closes */
    gllm_memory_release(c->sync);   /* gllm_attention_enqueue's counters: ours alone */
    for (int d = 0; d < GLLM_MAX_DEVICES; d++)
        gllm_memory_release(c->sync_dev[d]);
    calls_free(&c->calls);
    close(c->fd);
    conn_ring_unmap(c->ring);
    free(c);
}

const char *gllm_client_last_error(const gllm_client *c)
{
    return c->last_error;
}

int gllm_client_fd(const gllm_client *c)
{
    return c->fd;
}
