/* The device processes' backend: every entry forwarded to a device's process (fwd_*), its
 * reset the replacement of that process (devproc_process.c), and its opening and closing. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "devproc.h"
#include "devproc_process.h"
#include "devproc_wire.h"
#include "log.h"

/* ---- the forwarding backend ---- */

static int fwd_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    if (!p)
        return -ENODEV;
    *out = p->info;
    out->process_pid = (int)atomic_load(&p->pid);     /* never waits on ctl_lock */
    return 0;
}

/* Asked by status on the loop: the last figures while another request (made on the thread
 * pool) holds the channel, so that status never waits for one. */
static int fwd_memory(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    struct dp_msg m = {.op = DP_MEMORY}, rep = {0};
    if (pthread_mutex_trylock(&p->ctl_lock) == 0) {
        int r = dp_ctl_exchange(p, dev, &m, -1, NULL, &rep, NULL, 0, CTL_TIMEOUT_MS);
        if (r < 0)
            return r;
        atomic_store(&p->mem_used, rep.used);
        atomic_store(&p->mem_total, rep.total);
    }
    *used = atomic_load(&p->mem_used);
    *total = atomic_load(&p->mem_total);
    return 0;
}


/* Every device process maps the arena; one that is down gets it when it is replaced. */
static int fwd_host_map(struct backend *be, void *ptr, size_t len, int fd)
{
    struct dp_ctx *x = dp_ctx_of(be);
    struct dp_hostmap *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    *h = (struct dp_hostmap){.p = ptr, .len = len, .fd = fcntl(fd, F_DUPFD_CLOEXEC, 10),
                             .pinned = true};
    if (h->fd < 0) {
        int e = errno;
        free(h);
        return -e;
    }
    int r = 0, mapped = 0;
    pthread_mutex_lock(&x->maps_lock);
    atomic_fetch_add(&x->mapped_bytes, (uint64_t)len);
    for (int i = 0; i < x->nproc; i++, mapped = i) {
        if (atomic_load(&x->proc[i].down))
            continue;          /* its replacement maps it */
        bool pinned;
        r = dp_map_in(&x->proc[i], i, h, &pinned);
        h->pinned = h->pinned && pinned;
        if (r == GLLM_EDEVLOST) {
            r = 0;             /* that process is lost: its replacement maps it */
            continue;
        }
        if (r < 0)
            break;
    }
    if (r < 0) {
        for (int i = 0; i < mapped; i++)
            if (!atomic_load(&x->proc[i].down))
                dp_unmap_in(&x->proc[i], i, ptr, len);
        atomic_fetch_sub(&x->mapped_bytes, (uint64_t)len);
        pthread_mutex_unlock(&x->maps_lock);
        close(h->fd);
        free(h);
        return r;
    }
    h->next = x->maps;
    x->maps = h;
    pthread_mutex_unlock(&x->maps_lock);
    return 0;
}

static void fwd_host_unmap(struct backend *be, void *ptr)
{
    struct dp_ctx *x = dp_ctx_of(be);
    pthread_mutex_lock(&x->maps_lock);
    struct dp_hostmap **pp = &x->maps;
    while (*pp && (*pp)->p != ptr)
        pp = &(*pp)->next;
    struct dp_hostmap *h = *pp;
    if (h) {
        *pp = h->next;
        atomic_fetch_sub(&x->mapped_bytes, (uint64_t)h->len);
        for (int i = 0; i < x->nproc; i++)
            if (!atomic_load(&x->proc[i].down))
                dp_unmap_in(&x->proc[i], i, ptr, h->len);
        close(h->fd);
        free(h);
    }
    pthread_mutex_unlock(&x->maps_lock);
}

/* The device processes registered the arena when they mapped it (unregistered it when they
 * unmap it): this answers whether every one did. */
static int fwd_host_register(struct backend *be, void *ptr, size_t len)
{
    (void)len;
    struct dp_ctx *x = dp_ctx_of(be);
    int r = -ENOTSUP;
    pthread_mutex_lock(&x->maps_lock);
    for (struct dp_hostmap *h = x->maps; h; h = h->next)
        if (h->p == ptr) {
            r = h->pinned ? 0 : GLLM_EBACKEND;
            break;
        }
    pthread_mutex_unlock(&x->maps_lock);
    return r;
}

static void fwd_host_unregister(struct backend *be, void *ptr)
{
    (void)be;
    (void)ptr;
}

static int fwd_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct dp_msg m = {.op = DP_ALLOC, .b = bytes}, rep = {0};
    int r = dp_ctl_call(dp_proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
    if (r == 0)
        *out = (void *)(uintptr_t)rep.a;
    return r;
}

static void fwd_free(struct backend *be, int dev, void *ptr)
{
    struct dp_msg m = {.op = DP_FREE, .a = (uint64_t)(uintptr_t)ptr}, rep = {0};
    dp_ctl_call(dp_proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
}

static int fwd_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                           int *fd)
{
    struct dp_msg m = {.op = DP_SHARE_ALLOC, .b = bytes}, rep = {0};
    int got = -1;
    int r = dp_ctl_call(dp_proc_of(be, dev), dev, &m, -1, &got, &rep, NULL, 0);
    if (r == 0 && got < 0)
        r = GLLM_EBACKEND;
    if (r < 0) {
        if (got >= 0)
            close(got);
        return r;
    }
    *out = rep.shared;
    *fd = got;
    return 0;
}

static int fwd_share_import(struct backend *be, int dev, int fd, size_t bytes,
                            struct backend_shared *out, char *why, size_t len)
{
    struct dp_msg m = {.op = DP_SHARE_IMPORT, .b = bytes}, rep = {0};
    int r = dp_ctl_call(dp_proc_of(be, dev), dev, &m, fd, NULL, &rep, why, len);
    if (r == 0)
        *out = rep.shared;
    return r;
}

static void fwd_share_free(struct backend *be, int dev, const struct backend_shared *s)
{
    struct dp_msg m = {.op = DP_SHARE_FREE, .shared = *s}, rep = {0};
    dp_ctl_call(dp_proc_of(be, dev), dev, &m, -1, NULL, &rep, NULL, 0);
}

/* ---- work: the device's worker thread only ---- */

static int work_timeout_ms(uint64_t deadline_ns)
{
    if (!deadline_ns)
        return -1;
    const uint64_t now = backend_now_ns();
    const uint64_t left_ms = deadline_ns > now ? (deadline_ns - now) / 1000000u : 0;
    return left_ms > 86400000u ? 86400000 : (int)left_ms + JOB_GRACE_MS;
}


/* q opened in p's current process (a queue outlives the process it was opened in). */
static int queue_current(struct dp_proc *p, struct dp_queue *q)
{
    if (q->gen == p->gen)
        return 0;
    struct dp_msg *m = p->work.m;
    m->op = DP_QUEUE_OPEN;
    int r = dp_work_call(p, HELLO_TIMEOUT_MS, GLLM_EDEVLOST);
    if (r < 0 || (r = m->status) < 0)
        return r;
    q->handle = m->a;
    q->gen = p->gen;
    q->head = q->n = 0;
    return 0;
}

/* Sends a job (its args are in p->work.m->job.u already) and answers for it as the backend
 * would, its timing and why written where its exec wants them (for a queued one: when
 * polled). */
static int work_job(struct backend *be, int dev, uint32_t op, const struct backend_exec *e)
{
    struct dp_queue *q = (struct dp_queue *)e->queue;
    const struct backend_sync *sync = e->sync;
    struct attn_timing *timing = e->timing;
    char *why = e->why;
    const size_t why_len = e->why_len;
    struct dp_proc *p = dp_proc_of(be, dev);
    if (atomic_load(&p->down) || !p->work.m)
        return dp_devlost(p, dev, why, why_len);
    struct dp_msg *m = p->work.m;
    if (q) {
        int r = queue_current(p, q);
        if (r < 0)
            return r == GLLM_EDEVLOST ? dp_devlost(p, dev, why, why_len) : r;
        if (q->n == DP_QUEUE_RING) {
            snprintf(why, why_len, "device %d: queue full in gllmd's record", dev);
            return GLLM_EBACKEND;
        }
    }
    m->op = op;
    m->job.has_sync = sync != NULL;
    if (sync)
        m->job.sync = *sync;
    m->job.queue = q ? q->handle : 0;
    int r = dp_work_call(p, work_timeout_ms(e->deadline_ns), GLLM_EJOBTIMEOUT);
    if (r < 0) {
        if (r == GLLM_EJOBTIMEOUT) {
            char prefix[48];
            snprintf(prefix, sizeof prefix, "device %d: its process: ", dev);
            dp_down_reason(p, prefix, why, why_len);
        } else
            dp_devlost(p, dev, why, why_len);
        return r;
    }
    r = m->status;
    if (r == BACKEND_PENDING && q) {
        const unsigned i = (q->head + q->n++) % DP_QUEUE_RING;
        q->out[i].timing = timing;
        q->out[i].why = why;
        q->out[i].why_len = why_len;
        return r;
    }
    if (timing)
        *timing = m->timing;
    if (why && why_len)
        snprintf(why, why_len, "%s", m->why);
    return r;
}

static void clear_tables(struct dp_job *j)
{
    j->tab_indptr = j->tab_indices = j->tab_len = j->tab_qindptr = 0;
}

/* The job part of dev's work message, no tables behind it; NULL while the process is down. */
static struct dp_job *job_slot(struct backend *be, int dev)
{
    struct dp_msg *m = dp_proc_of(be, dev)->work.m;
    if (m)
        clear_tables(&m->job);
    return m ? &m->job : NULL;
}

static int fwd_copy(struct backend *be, int dev, const struct copy_args *c)
{
    struct dp_job *j = job_slot(be, dev);
    if (j)
        j->u.copy = *c;
    return work_job(be, dev, DP_COPY, &c->exec);
}

static int fwd_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct dp_job *j = job_slot(be, dev);
    if (j)
        j->u.attn = *a;
    return work_job(be, dev, DP_ATTENTION, &a->exec);
}

/* The page tables that are gllmd's own copies go behind the message. */
static int put_tables(struct dp_msg *m, const struct paged_args *a)
{
    struct dp_job *j = &m->job;
    clear_tables(j);
    const int64_t nidx = a->kv_indptr ? a->kv_indptr[a->B] : 0;
    j->tab_indptr = a->kv_indptr ? a->B + 1 : 0;
    j->tab_indices = a->kv_indices && !a->indices_on_device && !a->indices_in_arena ? nidx : 0;
    j->tab_len = a->kv_len ? a->B : 0;
    j->tab_qindptr = a->q_indptr ? a->B + 1 : 0;
    if (j->tab_indptr + j->tab_indices + j->tab_len + j->tab_qindptr > DP_TABLE_MAX) {
        clear_tables(j);
        return GLLM_ELIMIT;
    }
    int32_t *t = dp_tables(m);
    memcpy(t, a->kv_indptr, (size_t)j->tab_indptr * 4);
    t += j->tab_indptr;
    memcpy(t, a->kv_indices, (size_t)j->tab_indices * 4);
    t += j->tab_indices;
    memcpy(t, a->kv_len, (size_t)j->tab_len * 4);
    t += j->tab_len;
    memcpy(t, a->q_indptr, (size_t)j->tab_qindptr * 4);
    return 0;
}

static int fwd_paged(struct backend *be, int dev, const struct paged_args *a)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    if (p->work.m) {
        p->work.m->job.u.paged = *a;
        if (put_tables(p->work.m, a) < 0) {
            snprintf(a->exec.why, a->exec.why_len,
                     "the page tables pass what one request carries");
            return GLLM_ELIMIT;
        }
    }
    return work_job(be, dev, DP_PAGED, &a->exec);
}

static int fwd_queue_open(struct backend *be, int dev, struct backend_queue **out)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    struct dp_queue *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    q->gen = p->gen - 1;       /* opened in the process at its first job */
    int r = queue_current(p, q);
    if (r < 0) {
        free(q);
        return r;
    }
    *out = (struct backend_queue *)q;
    return 0;
}

static int fwd_queue_poll(struct backend *be, int dev, struct backend_queue *bq, bool cancel)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    struct dp_queue *q = (struct dp_queue *)bq;
    if (q->gen != p->gen || !q->n)
        return GLLM_EDEVLOST;      /* a reset discarded what was in flight */
    struct dp_msg *m = p->work.m;
    if (atomic_load(&p->down) || !m)
        return GLLM_EDEVLOST;
    m->op = DP_QUEUE_POLL;
    m->a = q->handle;
    m->b = cancel;
    int r = dp_work_call(p, POLL_TIMEOUT_MS, GLLM_EDEVLOST);
    const unsigned i = q->head;
    if (r == 0 && (r = m->status) == BACKEND_PENDING)
        return r;
    if (r == GLLM_EDEVLOST && atomic_load(&p->down)) {
        if (q->out[i].why && q->out[i].why_len)
            dp_devlost(p, dev, q->out[i].why, q->out[i].why_len);
    } else {
        if (q->out[i].timing)
            *q->out[i].timing = m->timing;
        if (q->out[i].why && q->out[i].why_len)
            snprintf(q->out[i].why, q->out[i].why_len, "%s", m->why);
    }
    q->head = (q->head + 1) % DP_QUEUE_RING;
    q->n--;
    return r;
}

static void fwd_queue_close(struct backend *be, int dev, struct backend_queue *bq)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    struct dp_queue *q = (struct dp_queue *)bq;
    if (q->gen == p->gen) {
        struct dp_msg m = {.op = DP_QUEUE_CLOSE, .a = q->handle}, rep = {0};
        dp_ctl_call(p, dev, &m, -1, NULL, &rep, NULL, 0);
    }
    free(q);
}

static int fwd_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                            uint64_t deadline_ns, char *why, size_t len)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    if (atomic_load(&p->down) || !p->work.m)
        return dp_devlost(p, dev, why, len);
    struct dp_msg *m = p->work.m;
    m->op = DP_INJECT_FAULT;
    m->a = kind;
    m->b = deadline_ns;
    int r = dp_work_call(p, work_timeout_ms(deadline_ns), GLLM_EJOBTIMEOUT);
    if (r < 0) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "device %d: its process: ", dev);
        dp_down_reason(p, prefix, why, len);
        return r;
    }
    snprintf(why, len, "%s", m->why);
    return m->status;
}

/* A process lost while nothing of its device ran: found down by a control request, or gone
 * (its socket closed) with no request at all. */
static bool fwd_lost(struct backend *be, int dev, char *why, size_t len)
{
    struct dp_proc *p = dp_proc_of(be, dev);
    if (!atomic_load(&p->down) && p->work.m && dp_peer_gone(p->work.sock))
        dp_lost(p, -EPIPE, 0, GLLM_EDEVLOST);
    if (!atomic_load(&p->down))
        return false;
    dp_down_reason(p, "its process is lost: ", why, len);
    return true;
}

/* The reset maps every arena again (fwd_reset), after any mapping under way: the time that
 * takes beyond the daemon's bound. */
static uint32_t fwd_reset_allowance_ms(struct backend *be, int dev)
{
    (void)dev;
    const uint64_t ms = dp_host_map_ms((size_t)atomic_load(&dp_ctx_of(be)->mapped_bytes));
    return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

static int fwd_reset(struct backend *be, int dev, char *why, size_t len)
{
    return dp_replace(dp_ctx_of(be), dev, why, len);
}

/* ---- open and close ---- */

static void dp_close(struct backend *be)
{
    if (!be)
        return;
    struct dp_ctx *x = dp_ctx_of(be);
    for (int i = 0; i < x->nproc; i++) {
        dp_end_process(&x->proc[i], false);   /* the channels closed: it exits by itself */
    }
    for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
        pthread_mutex_destroy(&x->proc[i].ctl_lock);
        pthread_mutex_destroy(&x->proc[i].why_lock);
    }
    while (x->maps) {
        struct dp_hostmap *h = x->maps;
        x->maps = h->next;
        close(h->fd);
        free(h);
    }
    pthread_mutex_destroy(&x->maps_lock);
    free(x);
}

/* The entries the device processes' backend has, forwarded; reset always. The backend
 * vtable has no probe or open: it is opened by devproc_open, never from the registry. */
static void fill_iface(struct dp_ctx *x)
{
    const uint32_t h = x->has;
    x->iface = (struct backend_iface){.api_version = BACKEND_API_VERSION, .name = x->name,
                                      .close = dp_close};
    x->dev = (struct backend_device_iface){
        .info = fwd_info,
        .memory = h & DP_HAS_MEMORY ? fwd_memory : NULL,
        .host_map = fwd_host_map,
        .host_unmap = fwd_host_unmap,
        .host_register = h & DP_HAS_REGISTER ? fwd_host_register : NULL,
        .host_unregister = h & DP_HAS_REGISTER ? fwd_host_unregister : NULL,
        .alloc = h & DP_HAS_ALLOC ? fwd_alloc : NULL,
        .free = fwd_free,
        .copy = fwd_copy,
        .attention = fwd_attention,
        .paged = h & DP_HAS_PAGED ? fwd_paged : NULL,
        .share_alloc = h & DP_HAS_SHARE ? fwd_share_alloc : NULL,
        .share_import = h & DP_HAS_SHARE ? fwd_share_import : NULL,
        .share_free = h & DP_HAS_SHARE ? fwd_share_free : NULL,
        .reset = fwd_reset,
        .reset_allowance_ms = fwd_reset_allowance_ms,
        .lost = fwd_lost,
        .inject_fault = h & DP_HAS_FAULT ? fwd_inject_fault : NULL,
        .queue_open = h & DP_HAS_QUEUES ? fwd_queue_open : NULL,
        .queue_poll = h & DP_HAS_QUEUES ? fwd_queue_poll : NULL,
        .queue_close = h & DP_HAS_QUEUES ? fwd_queue_close : NULL,
    };
    x->be.iface = &x->iface;
    x->be.device = &x->dev;
}

int devproc_open(const char *name, const struct backend_config *cfg, int log_level,
                 struct backend **out, char *why, size_t len)
{
    struct dp_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->be.ctx = x;
    x->threads = cfg->threads;
    x->deterministic = cfg->deterministic;
    x->log_level = log_level;
    pthread_mutex_init(&x->maps_lock, NULL);
    for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
        pthread_mutex_init(&x->proc[i].ctl_lock, NULL);
        pthread_mutex_init(&x->proc[i].why_lock, NULL);
        x->proc[i].ctl.sock = x->proc[i].work.sock = -1;
    }
    struct dp_hello hello;
    struct dp_proc *first = &x->proc[0];
    int r = dp_spawn(x, first, name, &hello, why, len);
    if (r < 0) {
        for (int i = 0; i < GLLM_MAX_DEVICES; i++) {
            pthread_mutex_destroy(&x->proc[i].ctl_lock);
            pthread_mutex_destroy(&x->proc[i].why_lock);
        }
        pthread_mutex_destroy(&x->maps_lock);
        free(x);
        return r;
    }
    snprintf(x->name, sizeof x->name, "%s", hello.backend);
    x->has = hello.has;
    x->be.caps = hello.caps;
    first->info = hello.info;
    x->nproc = 1;
    const int present = hello.present < GLLM_MAX_DEVICES ? hello.present : GLLM_MAX_DEVICES;
    for (int ord = 1; ord < present; ord++) {
        struct dp_proc *p = &x->proc[x->nproc];
        p->ordinal = ord;
        char reason[200];
        if (dp_spawn(x, p, x->name, &hello, reason, sizeof reason) < 0) {
            log_warn("%s: passing over device %d: %s", x->name, ord, reason);
            continue;
        }
        p->info = hello.info;
        p->info.index = x->nproc++;
    }
    x->be.ndevices = x->nproc;
    x->be.present = hello.present;
    fill_iface(x);
    *out = &x->be;
    return 0;
}
