/* The administrators' methods: drain, reload, clients and client_disconnect. Only a peer that
 * config_is_admin admitted when it connected may call them; others get DENIED. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "channel.h"
#include "lifecycle.h"
#include "log.h"
#include "methods.h"

static const char *const method_names[METRICS_NMETHODS] = {
    "attention", "dtensor_copy", "kv_append", "attention_decode", "attention_prefill",
};

/* true: c may go on; false: it was answered DENIED. */
static bool admin_only(struct rpc_call *c, const char *method)
{
    const struct channel *ch = c->ch;
    if (ch->admin)
        return true;
    log_warn("client %llu (pid %d, uid %u, %s) refused %s: not an administrator",
               (unsigned long long)ch->serial, (int)ch->pid, (unsigned)ch->uid, ch->comm, method);
    rpc_reply_error(c, GLLM_EDENIED,
                    "%s: for administrators only (root, gllmd's user, or admin_users and "
                    "admin_groups in gllmd.conf); uid %u is none", method, (unsigned)ch->uid);
    return false;
}

/* "Who" for the log: the administrator's connection. */
static void who(const struct channel *ch, const char *method, char *buf, size_t len)
{
    snprintf(buf, len, "%s from client %llu (pid %d, uid %u, %s)", method,
             (unsigned long long)ch->serial, (int)ch->pid, (unsigned)ch->uid, ch->comm);
}

void method_drain(struct rpc_call *c, const struct proto_msg *m)
{
    (void)m;
    if (!admin_only(c, "drain"))
        return;
    struct server *srv = c->ch->srv;
    const struct proto_admin_drain r = {.inflight = srv->stats.jobs_inflight,
                                        .drain_timeout_s = srv->drain_timeout_s};
    proto_pack_table(rpc_reply_begin(c), &proto_admin_drain_table, &r);
    rpc_reply_end(c);   /* queued before the drain waits for every reply */
    char w[128];
    who(c->ch, "drain", w, sizeof w);
    server_drain(srv, w);
}

void method_reload(struct rpc_call *c, const struct proto_msg *m)
{
    (void)m;
    if (!admin_only(c, "reload"))
        return;
    char w[128], why[256] = "";
    who(c->ch, "reload", w, sizeof w);
    int r = server_reload(c->ch->srv, w, why, sizeof why);
    if (r < 0)
        rpc_reply_error(c, r, "reload: %s; the running configuration is kept", why);
    else
        rpc_reply_empty(c);
}

static void fill_client(const struct channel *ch, uint64_t now, struct proto_admin_client *e)
{
    const struct session *s = &ch->session;
    *e = (struct proto_admin_client){
        .id = ch->serial, .pid = (uint64_t)ch->pid, .uid = ch->uid, .gid = ch->gid,
        .admin = ch->admin, .connected_s = (double)(now - ch->t_connected) / 1e9,
        .inflight = atomic_load(&s->inflight), .arenas = s->narenas,
        .arena_bytes = s->arena_bytes, .device_bytes = s->device_bytes,
        .n_jobs = METRICS_NMETHODS};
    snprintf(e->comm, sizeof e->comm, "%s", ch->comm);
    for (int i = 0; i < METRICS_NMETHODS; i++) {
        snprintf(e->jobs[i].method, sizeof e->jobs[i].method, "%s", method_names[i]);
        e->jobs[i].ok = ch->jobs[i][0];
        e->jobs[i].failed = ch->jobs[i][1];
    }
}

static struct channel *find_client(struct server *srv, uint64_t id)
{
    for (struct channel *ch = srv->channels; ch; ch = ch->next)
        if (ch->serial == id && !ch->closed)
            return ch;
    return NULL;
}

/* Every connection (the first GLLM_MAX_LISTED_CLIENTS), or with "id" that one alone. */
void method_clients(struct rpc_call *c, const struct proto_msg *m)
{
    if (!admin_only(c, "clients"))
        return;
    uint64_t id = 0;
    int r = proto_get_u64(m->params, "id", false, &id);
    if (r < 0) {
        rpc_reply_error(c, r, "clients: id wants a connection number (gllmctl client list)");
        return;
    }
    struct server *srv = c->ch->srv;
    struct proto_admin_clients *out = calloc(1, sizeof *out);   /* 40 KiB: not on the stack */
    if (!out) {
        rpc_reply_error(c, -ENOMEM, "clients: out of memory");
        return;
    }
    const uint64_t now = now_ns();
    for (const struct channel *ch = srv->channels;
         ch && out->n_clients < GLLM_MAX_LISTED_CLIENTS; ch = ch->next)
        if (!ch->closed && (!id || ch->serial == id))
            fill_client(ch, now, &out->clients[out->n_clients++]);
    if (id && out->n_clients == 0)
        rpc_reply_error(c, -ESRCH, "clients: no client %llu (gllmctl client list)",
                        (unsigned long long)id);
    else {
        proto_pack_table(rpc_reply_begin(c), &proto_admin_clients_table, out);
        rpc_reply_end(c);
    }
    free(out);
}

void method_client_disconnect(struct rpc_call *c, const struct proto_msg *m)
{
    if (!admin_only(c, "client_disconnect"))
        return;
    uint64_t id = 0;
    struct channel *ch = proto_get_u64(m->params, "id", true, &id) == 0
                             ? find_client(c->ch->srv, id) : NULL;
    if (!ch) {
        rpc_reply_error(c, -ESRCH, "client_disconnect: no client %llu (gllmctl client list)",
                        (unsigned long long)id);
        return;
    }
    if (ch == c->ch) {
        rpc_reply_error(c, -EINVAL, "client_disconnect: %llu is this connection",
                        (unsigned long long)id);
        return;
    }
    char w[128];
    who(c->ch, "client_disconnect", w, sizeof w);
    log_info("%s: closing client %llu (pid %d, uid %u, %s), %u jobs in flight", w,
               (unsigned long long)ch->serial, (int)ch->pid, (unsigned)ch->uid, ch->comm,
               (unsigned)atomic_load(&ch->session.inflight));
    /* Its jobs in flight finish (unanswered) and its memory goes, as when it hangs up. */
    channel_close(ch);
    rpc_reply_empty(c);
}
