/* The job methods: attention and paged jobs checked, their counters taken, submitted, settled.
 * A submitted job reports to its channel through job_ops until it is settled. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "methods.h"
#include "scheduler.h"

/* A job's kernel time as its reply and the metrics both report it: the backend's measure,
 * or the whole job's where the backend measured none (a copy on some backends). */
static uint64_t job_kernel_ns(const struct job *job)
{
    return job->timing.kernel_ns ? job->timing.kernel_ns : job->t_end - job->t_start;
}

/* A finished job's success reply: its timings. */
static void pack_job_result(struct proto_buf *b, const struct job *job)
{
    proto_buf_init(b);
    proto_pack_result(&b->pk, job->req_id);
    uint64_t job_ns = job->t_end - job->t_start;
    msgpack_pack_map(&b->pk, 6);
    proto_pack_kv_u64(&b->pk, "kernel_ns", job_kernel_ns(job));
    proto_pack_kv_u64(&b->pk, "accept_ns", job->t_submit - job->t_read);
    proto_pack_kv_u64(&b->pk, "queue_ns", job->t_start - job->t_submit);
    proto_pack_kv_u64(&b->pk, "job_ns", job_ns);
    proto_pack_kv_u64(&b->pk, "copy_ns", job->timing.copy_ns);
    proto_pack_kv_u64(&b->pk, "copy_bytes", job->timing.copy_bytes);
}

/* Worker thread: a job of a closed channel, or one queued past the drain deadline, is not
 * run. Both flags are reached through the cookie. */
static int job_skip(const struct job *job)
{
    const struct channel *ch = job->cookie;
    if (conn_gone(ch->conn))
        return GLLM_EDISCONNECTED;
    if (atomic_load_explicit(&ch->srv->abort_jobs, memory_order_acquire))
        return GLLM_ESHUTDOWN;
    return 0;
}

/* Worker thread. The job no longer counts against the limits: a client that has its reply
 * may send the next job before the loop settles this one. A success reply goes out from
 * here when the connection takes it at once: the hand-off to the loop and its wake-up would
 * add several microseconds to every job. Errors and a full socket are left to settle. */
static void job_finished(struct job *job, struct proto_buf *scratch)
{
    struct channel *ch = job->cookie;
    session_job_finished(&ch->session);
    atomic_fetch_sub_explicit(&ch->srv->stats.jobs_inflight, 1, memory_order_relaxed);
    if (job->status != 0)
        return;
    pack_job_result(scratch, job);
    job->replied = conn_send_fast(ch->conn, scratch->data, scratch->len);
}

/* Loop thread, at the scheduler's settle point. */
static void job_settle(struct job *job)
{
    struct channel *ch = job->cookie;
    struct server *srv = ch->srv;
    if (job->refused)
        ;                        /* counted as the error reply it got */
    else if (job->status == 0)
        srv->stats.jobs_done++;
    else
        srv->stats.jobs_failed++;
    uint64_t kernel = job_kernel_ns(job), total = job->t_end - job->t_read;
    if (!job->refused)
        ch->jobs[job->method][job->status == 0 ? 0 : 1]++;
    if (!job->refused)
        metrics_job(&srv->stats.jobs, (enum metrics_method)job->method, job->status == 0,
                    job->t_start - job->t_submit, kernel, total > kernel ? total - kernel : 0);
    if (!ch->closed && !job->replied) {
        if (job->status < 0 && job->why[0]) {
            channel_reply_error(ch, (int64_t)job->req_id, job->status, "%s", job->why);
        } else if (job->status < 0) {
            channel_reply_error(ch, (int64_t)job->req_id, job->status, "attention: %s",
                                gllm_strerror(job->status));
        } else {
            struct proto_buf b;
            pack_job_result(&b, job);
            channel_send(ch, b.data, b.len);
        }
    }
    job_release_arenas(job);
    channel_unref(ch);
    free(job);
    server_busy_poll(srv);
}

static const struct job_ops channel_job_ops = {job_skip, job_finished, job_settle};

/* One of a job's counters, as decoded (proto_decode_job): a 32-bit slot in one of the
 * connection's arenas, held by the job; a wait's may also be in memory shared with the
 * device (exported or imported) on a backend with queues, where only the device reads it
 * (docs/PROTOCOL.md). 0 and the slot, or a code and err. */
static int sync_counter(struct rpc_call *c, struct job *job, const struct proto_counter *k,
                        const char *key, _Atomic uint32_t **slot, uint32_t *value, char *err,
                        size_t errlen)
{
    const bool wait = strcmp(key, "wait") == 0;
    struct arena *a = arena_table_find(&c->ch->session.regions, k->arena);
    const bool on_device = a && a->device && a->share != ARENA_OWN && wait &&
                           backend_has_queues(c->ch->srv->be);
    if (!a || (a->device && !on_device)) {
        snprintf(err, errlen, "%s: no arena %llu in this connection (counters live in arenas%s)",
                 key, (unsigned long long)k->arena,
                 wait && backend_has_queues(c->ch->srv->be)
                     ? " or, for a wait, in shared device memory" : "");
        return GLLM_ENOARENA;
    }
    const uint64_t off = k->offset;
    if (off % 4 != 0 || off > a->size - 4 || a->size < 4) {
        snprintf(err, errlen, "%s: offset %llu is not a 4-byte slot inside arena %u's %llu bytes",
                 key, (unsigned long long)off, a->id, (unsigned long long)a->size);
        return GLLM_EBOUNDS;
    }
    /* The device writes a signal into the arena: it must be mapped for the GPU. */
    if (!wait && !a->pinned_by && backend_registers_host(c->ch->srv->be)) {
        snprintf(err, errlen, "signal: arena %u is not registered with the device", a->id);
        return GLLM_EPARAM;
    }
    if (job->narenas >= JOB_MAX_ARENAS) {
        snprintf(err, errlen, "%s: the job names too many regions", key);
        return GLLM_ELIMIT;
    }
    job->arenas[job->narenas++] = arena_ref(a);
    *slot = (_Atomic uint32_t *)(void *)((char *)a->base + off);
    *value = k->value;
    return 0;
}

/* A job's optional "wait" (its timeout_ms, when 0 the limit wait_timeout_ms) and "signal". */
static int take_sync(struct rpc_call *c, struct job *job, const struct proto_counter *wait,
                     const struct proto_counter *signal, char *err, size_t errlen)
{
    if (!wait->set && !signal->set)
        return 0;
    if (!backend_has(c->ch->srv->be, BACKEND_FEAT_SYNC)) {
        snprintf(err, errlen, "wait/signal: the %s backend cannot order jobs with counters",
                 backend_name(c->ch->srv->be));
        return -EOPNOTSUPP;
    }
    int r;
    if (wait->set) {
        _Atomic uint32_t *slot;
        const uint64_t ms = wait->timeout_ms ? wait->timeout_ms
                                             : c->ch->srv->limits.wait_timeout_ms;
        if ((r = sync_counter(c, job, wait, "wait", &slot, &job->wait_value, err, errlen)) < 0)
            return r;
        job->wait = slot;
        job->wait_deadline = now_ns() + ms * 1000000ull;
        const struct arena *held = job->arenas[job->narenas - 1];   /* sync_counter's */
        job->wait_on_device = held->device;
        job->wait_mapped = held->device || held->pinned_by ||
                           !backend_registers_host(c->ch->srv->be);
    }
    if (signal->set) {
        _Atomic uint32_t *slot;
        if ((r = sync_counter(c, job, signal, "signal", &slot, &job->sync.signal_value, err,
                              errlen)) < 0)
            return r;
        job->sync.signal = (void *)slot;
        job->sync.signal_host = true;
        switch (job->kind) {     /* the backend writes it after the job's last operation */
        case JOB_ATTENTION: job->args.exec.sync = &job->sync; break;
        case JOB_COPY: job->copy.exec.sync = &job->sync; break;
        case JOB_PAGED: job->paged.exec.sync = &job->sync; break;
        }
    }
    return 0;
}

/* Queues job on dev's lane of the connection: it counts as in flight from now. */
static void enqueue(struct rpc_call *c, struct job *job, int dev)
{
    struct channel *ch = c->ch;
    job->req_id = c->id;
    job->dev = dev;
    job->t_read = c->t_read;
    job->ops = &channel_job_ops;
    job->cookie = channel_ref(ch);
    session_job_started(&ch->session);
    ch->srv->stats.jobs_inflight++;
    sched_submit(ch->srv->sched, &ch->session.lanes[dev], job);
}

void method_job_refused(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    uint64_t dev = 0;
    struct proto_counter signal;
    /* BUSY and SHUTDOWN refuse for want of room: queueing anything would defeat them, so
     * those leave the signal to the client (docs/PROTOCOL.md). A broken signal is nothing
     * to write. */
    if (proto_decode_job_signal(m->params, &dev, &signal) < 0 || !signal.set ||
        c->refused == GLLM_EBUSY || c->refused == GLLM_ESHUTDOWN ||
        !backend_has(srv->be, BACKEND_FEAT_SYNC))
        return;
    /* Signal-only jobs count as jobs: a client cannot queue more than max_inflight of them
     * behind a job that waits. */
    if (!session_may_submit(&c->ch->session, &srv->limits) || !server_may_submit(srv))
        return;
    if (dev >= (uint64_t)srv->ndevices)
        dev = 0;
    struct job *job = calloc(1, sizeof *job);
    if (!job)
        return;
    char err[PROTO_MAX_ERRMSG];
    _Atomic uint32_t *slot;
    if (sync_counter(c, job, &signal, "signal", &slot, &job->sync.signal_value, err,
                     sizeof err) < 0) {
        job_release_arenas(job);   /* the signal itself was bad: nothing to write */
        free(job);
        return;
    }
    job->sync.signal = (void *)slot;
    job->sync.signal_host = true;  /* signals live in arenas (sync_counter) */
    job->refused = c->refused;
    job->replied = true;           /* the refusal was the reply */
    job->method = (uint8_t)metrics_method_of(m->method);
    enqueue(c, job, (int)dev);
}

/* Queues a prepared job on its device's worker, with its counters; a job naming another
 * device's tensor is refused here, for every kind of job. */
void methods_submit(struct rpc_call *c, struct job *job, int dev, const struct proto_counter *wait,
                    const struct proto_counter *signal, const char *method)
{
    char err[PROTO_MAX_ERRMSG];
    int r = take_sync(c, job, wait, signal, err, sizeof err);
    if (r == 0)
        r = job_check_device(job, dev, err, sizeof err);
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    job->method = (uint8_t)metrics_method_of(method);
    enqueue(c, job, dev);
}

const char *methods_job_why(const struct proto_msg *m, bool takes_device)
{
    struct proto_job j;
    const char *why = NULL;
    return proto_decode_job(m->params, takes_device, &j, &why) < 0 ? why : NULL;
}

/* Room for one more job, or an error reply and false. Finished jobs stopped counting on
 * their worker (job_finished): nothing is settled from here. */
bool methods_admit(struct rpc_call *c, const char *method)
{
    struct server *srv = c->ch->srv;
    const struct session *s = &c->ch->session;
    if (srv->draining) {
        rpc_reply_error(c, GLLM_ESHUTDOWN, "%s: daemon is shutting down", method);
        return false;
    }
    if (!session_may_submit(s, &srv->limits)) {
        rpc_reply_error(c, GLLM_EBUSY, "%s: %u jobs in flight on this connection (limit)",
                        method, (unsigned)s->inflight);
        return false;
    }
    if (!server_may_submit(srv)) {
        rpc_reply_error(c, GLLM_EBUSY, "%s: %llu jobs in flight in all (limit)", method,
                        (unsigned long long)srv->stats.jobs_inflight);
        return false;
    }
    return true;
}

/* dev decoded from a job's params: one of this daemon's devices, or an error reply and false. */
static bool device_ok(struct rpc_call *c, const char *method, uint64_t dev)
{
    const struct server *srv = c->ch->srv;
    if (dev < (uint64_t)srv->ndevices)
        return true;
    rpc_reply_error(c, GLLM_EPARAM, "%s: 'device' must be below %d", method, srv->ndevices);
    return false;
}

void method_attention(struct rpc_call *c, const struct proto_msg *m)
{
    struct server *srv = c->ch->srv;
    if (!methods_admit(c, "attention"))
        return;
    struct proto_attention pa;
    char err[PROTO_MAX_ERRMSG];
    int r = proto_job_keys_check(m->params, err, sizeof err);
    if (r < 0) {
        rpc_reply_error(c, r, "attention: %s", err);
        return;
    }
    r = proto_decode_attention(m->params, &pa);
    if (r < 0) {
        const char *why = methods_job_why(m, true);
        if (why)
            rpc_reply_error(c, r, "attention: %s", why);
        else
            rpc_reply_error(c, r, "attention: %s (fields q, k, v, out: tensors)",
                            gllm_strerror(r));
        return;
    }
    if (!device_ok(c, "attention", pa.device))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "attention: out of memory");
        return;
    }
    r = job_prepare_attention(job, &pa, &c->ch->session.regions, &srv->caps, err, sizeof err);
    if (r < 0) {
        free(job);
        rpc_reply_error(c, r, "attention: %s", err);
        return;
    }
    methods_submit(c, job, (int)pa.device, &pa.wait, &pa.signal, "attention");
}

/* kv_append, attention_decode and attention_prefill: validated like attention, plus the
 * backend's own say on shapes it can run. */
static void paged(struct rpc_call *c, const struct proto_msg *m, enum proto_paged_op op,
                  const char *method)
{
    struct server *srv = c->ch->srv;
    if (!methods_admit(c, method))
        return;
    struct proto_paged pp;
    char err[PROTO_MAX_ERRMSG];
    int r = proto_job_keys_check(m->params, err, sizeof err);
    if (r < 0) {
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    r = proto_decode_paged(m->params, op, &pp);
    if (r < 0) {
        const char *why = methods_job_why(m, true);
        if (why)
            rpc_reply_error(c, r, "%s: %s", method, why);
        else
            rpc_reply_error(c, r, "%s: %s (see docs/PROTOCOL.md for its fields)", method,
                            gllm_strerror(r));
        return;
    }
    if (!device_ok(c, method, pp.device))
        return;
    struct job *job = calloc(1, sizeof *job);
    if (!job) {
        rpc_reply_error(c, -ENOMEM, "%s: out of memory", method);
        return;
    }
    r = job_prepare_paged(job, &pp, &c->ch->session.regions, &srv->caps, err, sizeof err);
    if (r == 0)
        r = backend_paged_check(srv->be, &job->paged, err, sizeof err);
    if (r < 0) {
        job_release_arenas(job);
        free(job);
        rpc_reply_error(c, r, "%s: %s", method, err);
        return;
    }
    methods_submit(c, job, (int)pp.device, &pp.wait, &pp.signal, method);
}

void method_kv_append(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_KV_APPEND, "kv_append");
}

void method_attention_decode(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_DECODE, "attention_decode");
}

void method_attention_prefill(struct rpc_call *c, const struct proto_msg *m)
{
    paged(c, m, PROTO_PREFILL, "attention_prefill");
}
