/* A device process: one device's backend in a process of its own, serving gllmd's requests
 * (devproc_wire.h) until gllmd closes the channels or dies. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "devproc.h"
#include "devproc_wire.h"
#include "log.h"

/* An arena as both processes map it. */
struct hmap {
    uintptr_t gllmd;            /* gllmd's address */
    size_t len;
    char *here;
    bool pinned;
};

/* A job of a queue, kept with what its args point to until queue_poll returns it. */
struct op {
    struct dp_job job;
    int32_t *tables;
    struct attn_timing timing;
    char why[256];
    struct op *next;
};

/* gllmd's handle for a queue is the address of one of these; each is checked against the list. */
struct cq {
    struct backend_queue *q;
    struct op *head, *tail;
    struct cq *next;
};

static struct {
    struct backend *be;
    /* Requests each thread has finished. gllmd sends a job naming memory only after the
     * control request that made it was answered, and a free only after the last job that
     * used it was; that order runs through gllmd, so each thread also reads the other's count
     * (acquire) before a request and bumps its own (release) after one, which makes it an
     * order within this process too (for ThreadSanitizer; it costs an atomic each way). */
    atomic_ulong ctl_done, work_done;
    pthread_rwlock_t maps_lock;
    struct hmap *maps;
    int nmaps, cap;
    pthread_mutex_t queues_lock;
    struct cq *queues;
} dp = {.maps_lock = PTHREAD_RWLOCK_INITIALIZER, .queues_lock = PTHREAD_MUTEX_INITIALIZER};

/* gllmd's pointer p into an arena, as this process maps it; NULL stays NULL. false when p is
 * in no arena (gllmd validated it: this would be a bug, refused rather than followed). The
 * caller holds maps_lock for reading. */
static bool here(const void *p, void **out)
{
    if (!p) {
        *out = NULL;
        return true;
    }
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < dp.nmaps; i++)
        if (a >= dp.maps[i].gllmd && a - dp.maps[i].gllmd < dp.maps[i].len) {
            *out = dp.maps[i].here + (a - dp.maps[i].gllmd);
            return true;
        }
    return false;
}

#define HERE(field)                                                                        \
    do {                                                                                   \
        void *h_;                                                                          \
        if (!here((field), &h_))                                                           \
            return false;                                                                  \
        (field) = h_;                                                                      \
    } while (0)
#define HOST_UNLESS(mask, bit, field)                                                      \
    do {                                                                                   \
        if (!((mask) & (1u << (bit))))                                                     \
            HERE(field);                                                                   \
    } while (0)

/* Points o's args at its own sync, timing, why and tables, and its host pointers at this
 * process's mappings (maps_lock held for reading). */
static bool bind_args(struct op *o, uint32_t op, struct backend_queue *q)
{
    struct dp_job *j = &o->job;
    struct backend_sync *sync = j->has_sync ? &j->sync : NULL;
    if (sync) {
        if (!sync->wait_device)
            HERE(sync->wait);
        if (sync->signal_host)
            HERE(sync->signal);
    }
/* The job's exec, made this process's (its deadline is gllmd's and stays). */
#define BIND(a)                                                                            \
    ((a).exec = (struct backend_exec){.timing = &o->timing, .sync = sync,                  \
                                      .deadline_ns = (a).exec.deadline_ns, .why = o->why,  \
                                      .why_len = sizeof o->why, .queue = q})
    switch (op) {
    case DP_ATTENTION: {
        struct attn_args *a = &j->u.attn;
        BIND(*a);
        HOST_UNLESS(a->device_mask, 0, a->q);
        HOST_UNLESS(a->device_mask, 1, a->k);
        HOST_UNLESS(a->device_mask, 2, a->v);
        HOST_UNLESS(a->device_mask, 3, a->out);
        HOST_UNLESS(a->device_mask, 4, a->lse);
        HOST_UNLESS(a->device_mask, 5, a->variant.alibi_slopes);
        HOST_UNLESS(a->device_mask, 6, a->variant.sinks);
        return true;
    }
    case DP_COPY: {
        struct copy_args *c = &j->u.copy;
        BIND(*c);
        if (c->to_device)
            HERE(c->src);
        else
            HERE(c->dst);
        return true;
    }
    case DP_PAGED: {
        struct paged_args *p = &j->u.paged;
        BIND(*p);
        HOST_UNLESS(p->device_mask, PG_KCACHE, p->k_cache);
        HOST_UNLESS(p->device_mask, PG_VCACHE, p->v_cache);
        HOST_UNLESS(p->device_mask, PG_Q, p->q);
        HOST_UNLESS(p->device_mask, PG_OUT, p->out);
        HOST_UNLESS(p->device_mask, PG_KNEW, p->k_new);
        HOST_UNLESS(p->device_mask, PG_VNEW, p->v_new);
        HOST_UNLESS(p->device_mask, PG_ALIBI, p->variant.alibi_slopes);
        HOST_UNLESS(p->device_mask, PG_SINKS, p->variant.sinks);
        int32_t *t = o->tables;
        if (j->tab_indptr)
            p->kv_indptr = t, t += j->tab_indptr;
        if (j->tab_indices)
            p->kv_indices = t, t += j->tab_indices;
        else if (p->indices_in_arena)
            HERE(p->kv_indices);
        if (j->tab_len)
            p->kv_len = t, t += j->tab_len;
        if (j->tab_qindptr)
            p->q_indptr = t;
        return true;
    }
    }
#undef BIND
    return false;
}

static bool bind_op(struct op *o, uint32_t op, struct backend_queue *q)
{
    pthread_rwlock_rdlock(&dp.maps_lock);
    const bool ok = bind_args(o, op, q);
    pthread_rwlock_unlock(&dp.maps_lock);
    return ok;
}

static struct cq *find_queue(uint64_t handle, bool unlink)
{
    pthread_mutex_lock(&dp.queues_lock);
    struct cq **pp = &dp.queues;
    while (*pp && (uint64_t)(uintptr_t)*pp != handle)
        pp = &(*pp)->next;
    struct cq *q = *pp;
    if (q && unlink)
        *pp = q->next;
    pthread_mutex_unlock(&dp.queues_lock);
    return q;
}

static void reply_op(struct dp_msg *m, const struct op *o, int status)
{
    m->status = status;
    m->timing = o->timing;
    snprintf(m->why, sizeof m->why, "%s", o->why);
}

/* A job: run to its end, or submitted to its queue and kept there until polled. */
static void serve_job(struct dp_msg *m)
{
    struct cq *q = NULL;
    if (m->job.queue && !(q = find_queue(m->job.queue, false))) {
        m->status = GLLM_EBACKEND;
        snprintf(m->why, sizeof m->why, "device process: no such queue");
        return;
    }
    const int64_t ntab = m->job.tab_indptr + m->job.tab_indices + m->job.tab_len +
                         m->job.tab_qindptr;
    struct op *o = calloc(1, sizeof *o);
    if (o && ntab > 0 && ntab <= DP_TABLE_MAX && (o->tables = malloc((size_t)ntab * 4)))
        memcpy(o->tables, dp_tables(m), (size_t)ntab * 4);
    if (!o || (ntab > 0 && !o->tables)) {
        free(o);
        m->status = -ENOMEM;
        snprintf(m->why, sizeof m->why, "device process: out of memory");
        return;
    }
    o->job = m->job;
    int r;
    if (!bind_op(o, m->op, q ? q->q : NULL)) {
        snprintf(o->why, sizeof o->why, "device process: a host pointer in no arena");
        r = GLLM_EBACKEND;
    } else if (m->op == DP_ATTENTION) {
        r = backend_attention(dp.be, 0, &o->job.u.attn);
    } else if (m->op == DP_COPY) {
        r = backend_copy(dp.be, 0, &o->job.u.copy);
    } else {
        /* gllmd's loop cannot ask this process before it queues a paged job: asked here. */
        r = backend_paged_check(dp.be, &o->job.u.paged, o->why, sizeof o->why);
        if (r == 0)
            r = backend_paged(dp.be, 0, &o->job.u.paged);
    }
    if (r == BACKEND_PENDING && q) {
        if (q->tail)
            q->tail->next = o;
        else
            q->head = o;
        q->tail = o;
        m->status = r;
        return;
    }
    reply_op(m, o, r);
    free(o->tables);
    free(o);
}

static void free_ops(struct op *o)
{
    while (o) {
        struct op *next = o->next;
        free(o->tables);
        free(o);
        o = next;
    }
}

static void serve_work(struct dp_msg *m)
{
    m->why[0] = '\0';
    switch (m->op) {
    case DP_COPY:
    case DP_ATTENTION:
    case DP_PAGED:
        serve_job(m);
        return;
    case DP_QUEUE_OPEN: {
        struct cq *q = calloc(1, sizeof *q);
        int r = q ? backend_queue_open(dp.be, 0, &q->q) : -ENOMEM;
        if (r < 0) {
            free(q);
            m->status = r;
            return;
        }
        pthread_mutex_lock(&dp.queues_lock);
        q->next = dp.queues;
        dp.queues = q;
        pthread_mutex_unlock(&dp.queues_lock);
        m->a = (uint64_t)(uintptr_t)q;
        m->status = 0;
        return;
    }
    case DP_QUEUE_POLL: {
        struct cq *q = find_queue(m->a, false);
        if (!q || !q->head) {
            m->status = GLLM_EBACKEND;
            snprintf(m->why, sizeof m->why, "device process: nothing in flight on that queue");
            return;
        }
        int r = backend_queue_poll(dp.be, 0, q->q, m->b != 0);
        m->status = r;
        if (r == BACKEND_PENDING)
            return;
        struct op *o = q->head;
        if (!(q->head = o->next))
            q->tail = NULL;
        reply_op(m, o, r);
        o->next = NULL;
        free_ops(o);
        return;
    }
    case DP_INJECT_FAULT:
        m->status = backend_inject_fault(dp.be, 0, (enum backend_fault)m->a, m->b, m->why,
                                         sizeof m->why);
        return;
    }
    m->status = -EPROTO;
}

bool devproc_test_hooks;

/* The test hooks (devproc.h): a large arena's mapping or unmapping made slower. */
static void test_slow(const char *ms_var, uint64_t bytes)
{
    const char *ms = devproc_test_hooks ? getenv(ms_var) : NULL;
    const char *min = devproc_test_hooks ? getenv("GLLM_TEST_SLOW_MAP_BYTES") : NULL;
    if (!ms || !min || bytes < strtoull(min, NULL, 10))
        return;
    const unsigned long long n = strtoull(ms, NULL, 10);
    nanosleep(&(struct timespec){.tv_sec = (time_t)(n / 1000), .tv_nsec = (long)(n % 1000) * 1000000L},
              NULL);
}

static int map_arena(struct dp_msg *m, int fd)
{
    if (fd < 0 || m->b == 0 || m->b > SIZE_MAX)
        return -EBADF;
    void *p = mmap(NULL, (size_t)m->b, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    /* Pinned before the maps' write lock, which every job's pointer lookup waits for: pinning
     * takes time in proportion to the bytes (seconds for tens of GiB), and nothing can name
     * this arena until gllmd has the reply. */
    test_slow("GLLM_TEST_SLOW_MAP_MS", m->b);
    const bool pinned = backend_host_register(dp.be, p, (size_t)m->b) == 0;
    pthread_rwlock_wrlock(&dp.maps_lock);
    if (dp.nmaps == dp.cap) {
        int cap = dp.cap ? 2 * dp.cap : 64;
        struct hmap *n = realloc(dp.maps, (size_t)cap * sizeof *n);
        if (!n) {
            pthread_rwlock_unlock(&dp.maps_lock);
            if (pinned)
                backend_host_unregister(dp.be, p);
            munmap(p, (size_t)m->b);
            return -ENOMEM;
        }
        dp.maps = n;
        dp.cap = cap;
    }
    struct hmap *h = &dp.maps[dp.nmaps++];
    *h = (struct hmap){.gllmd = (uintptr_t)m->a, .len = (size_t)m->b, .here = p, .pinned = pinned};
    m->pinned = pinned;
    pthread_rwlock_unlock(&dp.maps_lock);
    return 0;
}

static void unmap_arena(uint64_t gllmd)
{
    struct hmap h = {0};
    pthread_rwlock_wrlock(&dp.maps_lock);
    for (int i = 0; i < dp.nmaps; i++)
        if (dp.maps[i].gllmd == gllmd) {
            h = dp.maps[i];
            dp.maps[i] = dp.maps[--dp.nmaps];
            break;
        }
    pthread_rwlock_unlock(&dp.maps_lock);
    if (!h.here)
        return;
    /* Unpinned after the lock, as map_arena pins before it: no job names it any more. */
    test_slow("GLLM_TEST_SLOW_UNMAP_MS", h.len);
    if (h.pinned)
        backend_host_unregister(dp.be, h.here);
    munmap(h.here, h.len);
}

/* A mapping or unmapping under way on a thread of its own: pinning takes seconds for tens of
 * GiB, unpinning about 0.1 s a GiB, and the control channel serves the device's other
 * requests (device tensors, memory) meanwhile. gllmd maps or unmaps one arena at a time and
 * waits for each, so there is one such slot. */
static struct {
    pthread_mutex_t lock;
    bool busy, done;
    struct dp_msg m;              /* op, a, b as asked; status, pinned when done */
    int fd;                       /* DP_HOST_MAP's arena */
} host_work = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *host_work_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&host_work.lock);
    struct dp_msg m = host_work.m;
    const int fd = host_work.fd;
    pthread_mutex_unlock(&host_work.lock);
    if (m.op == DP_HOST_MAP) {
        m.status = map_arena(&m, fd);
        close(fd);
    } else {
        unmap_arena(m.a);
        m.status = 0;
    }
    pthread_mutex_lock(&host_work.lock);
    host_work.m.status = m.status;
    host_work.m.pinned = m.pinned;
    host_work.done = true;
    pthread_mutex_unlock(&host_work.lock);
    return NULL;
}

/* DP_HOST_MAP (taking fd) or DP_HOST_UNMAP (fd -1) started: DP_PENDING, or why it could not
 * start (fd closed then). */
static int host_work_start(const struct dp_msg *m, int fd)
{
    pthread_mutex_lock(&host_work.lock);
    int r = DP_PENDING;
    pthread_attr_t at;
    pthread_t t;
    if (host_work.busy) {
        r = -EBUSY;
    } else {
        host_work.busy = true;
        host_work.done = false;
        host_work.m = *m;
        host_work.fd = fd;
        fd = -1;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, host_work_main, NULL) != 0) {
            host_work.busy = false;
            fd = host_work.fd;
            r = -EAGAIN;
        }
        pthread_attr_destroy(&at);
    }
    pthread_mutex_unlock(&host_work.lock);
    if (fd >= 0)
        close(fd);
    return r;
}

/* DP_HOST_DONE: the mapping's or unmapping's status (and pinned flag) in m once it is done. */
static void host_work_poll(struct dp_msg *m)
{
    pthread_mutex_lock(&host_work.lock);
    if (!host_work.busy) {
        m->status = -EPROTO;
    } else if (!host_work.done) {
        m->status = DP_PENDING;
    } else {
        m->status = host_work.m.status;
        m->pinned = host_work.m.pinned;
        host_work.busy = false;
    }
    pthread_mutex_unlock(&host_work.lock);
}

/* One control request; *fd_out: an fd for the reply to carry (closed after). */
static void serve_ctl(struct dp_msg *m, int fd, int *fd_out)
{
    m->why[0] = '\0';
    m->status = 0;
    switch (m->op) {
    case DP_MEMORY:
        m->status = backend_memory_info(dp.be, 0, &m->used, &m->total);
        break;
    case DP_HOST_MAP:
        m->status = fd < 0 ? -EBADF : host_work_start(m, fd);
        fd = -1;                  /* host_work_start's */
        break;
    case DP_HOST_DONE:
        host_work_poll(m);
        break;
    case DP_HOST_UNMAP:
        /* Done here when no thread can take it: an arena must not stay mapped (and pinned)
         * after gllmd has let it go. */
        m->status = host_work_start(m, -1);
        if (m->status < 0) {
            unmap_arena(m->a);
            m->status = 0;
        }
        break;
    case DP_ALLOC: {
        void *p = NULL;
        m->status = backend_dev_alloc(dp.be, 0, (size_t)m->b, &p);
        m->a = (uint64_t)(uintptr_t)p;
        break;
    }
    case DP_FREE:
        backend_dev_free(dp.be, 0, (void *)(uintptr_t)m->a);
        break;
    case DP_SHARE_ALLOC:
        m->status = backend_share_alloc(dp.be, 0, (size_t)m->b, &m->shared, fd_out);
        break;
    case DP_SHARE_IMPORT:
        m->status = fd < 0 ? -EBADF
                           : backend_share_import(dp.be, 0, fd, (size_t)m->b, &m->shared,
                                                  m->why, sizeof m->why);
        break;
    case DP_SHARE_FREE:
        backend_share_free(dp.be, 0, &m->shared);
        break;
    case DP_QUEUE_CLOSE: {
        struct cq *q = find_queue(m->a, true);
        if (q) {
            backend_queue_close(dp.be, 0, q->q);
            free_ops(q->head);
            free(q);
        }
        break;
    }
    default:
        m->status = -EPROTO;
    }
    if (fd >= 0)
        close(fd);
}

static struct dp_msg *map_area(int fd)
{
    void *p = mmap(NULL, DP_AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* The work channel: requests through its doorbell (devproc_wire.h, struct dp_bell). */
static void *work_main(void *arg)
{
    struct dp_msg *m = arg;
    struct dp_bell *b = &m->bell;
    uint64_t done = 0;
    for (;;) {
        bool gone = false;
        while (!dp_spin(&b->req, done + 1, DP_SPIN_REQUEST_NS, DP_FD_WORK, &gone)) {
            if (gone)
                _exit(0);           /* gllmd closed the channel or is gone */
            atomic_store_explicit(&b->child_waiting, 1, memory_order_relaxed);
            atomic_thread_fence(memory_order_seq_cst);
            if (atomic_load_explicit(&b->req, memory_order_acquire) != done + 1) {
                int fd;
                if (dp_wait(DP_FD_WORK, -1, &fd) < 0)
                    _exit(0);
                if (fd >= 0)
                    close(fd);
            }
            atomic_store_explicit(&b->child_waiting, 0, memory_order_relaxed);
        }
        (void)atomic_load_explicit(&dp.ctl_done, memory_order_acquire);
        serve_work(m);
        atomic_fetch_add_explicit(&dp.work_done, 1, memory_order_release);
        atomic_store_explicit(&b->rep, ++done, memory_order_release);
        atomic_thread_fence(memory_order_seq_cst);
        if (atomic_load_explicit(&b->parent_waiting, memory_order_relaxed) &&
            dp_ring(DP_FD_WORK, -1) < 0)
            _exit(0);
    }
    return NULL;
}

int devproc_child_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"device-process", no_argument, NULL, 'P'},
        {"backend", required_argument, NULL, 'b'},
        {"device", required_argument, NULL, 'd'},
        {"threads", required_argument, NULL, 't'},
        {"deterministic", no_argument, NULL, 'D'},
        {"log-level", required_argument, NULL, 'l'},
        {"parent", required_argument, NULL, 'p'},
        {0},
    };
    const char *name = "auto";
    struct backend_config cfg = {.one_device = true, .log = {.fn = log_hook, .level = LOG_DEBUG}};
    int level = LOG_INFO;
    long parent = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'P': break;
        case 'b': name = optarg; break;
        case 'd': cfg.device = atoi(optarg); break;
        case 't': cfg.threads = atoi(optarg); break;
        case 'D': cfg.deterministic = true; break;
        case 'l': level = atoi(optarg); break;
        case 'p': parent = atol(optarg); break;
        default: return 2;
        }
    }
    /* Ends with gllmd, whatever ends gllmd; signals meant for gllmd (a service manager's
     * SIGTERM to the whole group, a terminal's SIGINT) are gllmd's to act on: this process
     * goes when gllmd closes its channels. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != (pid_t)parent)
        return 1;
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    char who[32];
    snprintf(who, sizeof who, "gllmd[device %d]", cfg.device);
    log_init(level);
    log_set_who(who);
    struct dp_msg *ctl = map_area(DP_FD_CTL_AREA), *work = map_area(DP_FD_WORK_AREA);
    if (!ctl || !work)
        return 1;

    memset(ctl, 0, sizeof *ctl);
    ctl->op = DP_HELLO;
    /* The test hook: a start made slower, so a test can end a process before its hello. */
    const char *slow = devproc_test_hooks ? getenv("GLLM_TEST_SLOW_HELLO_MS") : NULL;
    if (slow) {
        const unsigned long long n = strtoull(slow, NULL, 10);
        nanosleep(&(struct timespec){.tv_sec = (time_t)(n / 1000),
                                     .tv_nsec = (long)(n % 1000) * 1000000L}, NULL);
    }
    int r = backend_select(name, &cfg, &dp.be, ctl->why, sizeof ctl->why);
    ctl->status = r;
    if (r == 0) {
        struct dp_hello *h = &ctl->hello;
        const struct backend_device_iface *d = dp.be->device;
        snprintf(h->backend, sizeof h->backend, "%s", backend_name(dp.be));
        h->present = dp.be->present;
        h->caps = *backend_caps(dp.be);
        h->has = (d->memory ? DP_HAS_MEMORY : 0) | (d->host_register ? DP_HAS_REGISTER : 0) |
                 (d->alloc ? DP_HAS_ALLOC : 0) | (d->paged ? DP_HAS_PAGED : 0) |
                 (backend_share_size(dp.be, 1) ? DP_HAS_SHARE : 0) |
                 (d->inject_fault ? DP_HAS_FAULT : 0) |
                 (backend_has_queues(dp.be) ? DP_HAS_QUEUES : 0);
        r = backend_device_info(dp.be, 0, &h->info);
        ctl->status = r;
    }
    if (dp_ring(DP_FD_CTL, -1) < 0 || r < 0)
        return 1;

    pthread_t t;
    if (pthread_create(&t, NULL, work_main, work) != 0)
        return 1;
    for (;;) {
        int fd, out = -1;
        if (dp_wait(DP_FD_CTL, -1, &fd) < 0)
            _exit(0);
        (void)atomic_load_explicit(&dp.work_done, memory_order_acquire);
        serve_ctl(ctl, fd, &out);
        atomic_fetch_add_explicit(&dp.ctl_done, 1, memory_order_release);
        int rr = dp_ring(DP_FD_CTL, out);
        if (out >= 0)
            close(out);
        if (rr < 0)
            _exit(0);
    }
}
