/* The CPU backend: one device, a thread pool, the reference attention kernel. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_api.h"
#include "cpu_attention.h"
#include "cpu_cores.h"
#include "cpu_fault.h"
#include "cpu_isa.h"
#include "cpu_paged.h"
#include "cpu_pool.h"
#include "cpu_queue.h"
#include "cpu_share.h"

extern const struct backend_iface cpu_backend_iface;
static const struct backend_device_iface cpu_device_iface;

struct cpu_ctx {
    struct cpu_pool *pool;
    struct cpu_attention *attn;
    char model[96];
    struct cpu_ledger ledger;   /* the device's memory, for resets and status */
    struct cpu_queues queues;
};

static cpu_op_run_fn run_op;

static int cpu_probe(char *why, size_t len)
{
    (void)why;
    (void)len;
    return 10; /* always usable; below every GPU, above a software Vulkan device (5) */
}

static void read_cpu_model(char *out, size_t len)
{
    snprintf(out, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 2;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(out, len, "%s", colon);
            break;
        }
    }
    fclose(f);
}

static void cpu_close(struct backend *be)
{
    if (!be)
        return;
    struct cpu_ctx *c = be->ctx;
    if (c) {
        cpu_ledger_release_all(&c->ledger);
        cpu_attention_destroy(c->attn);
        cpu_pool_destroy(c->pool);
        free(c);
    }
    free(be);
}

/* The reference computes every variant field in every mode, in every dtype. */
static void cpu_declare(struct backend_caps *out)
{
    const uint32_t every = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                           GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS | GLLM_VARIANT_HEAD_DIM_V;
    *out = (struct backend_caps){
        .dtypes = 1u << GLLM_DTYPE_F32 | 1u << GLLM_DTYPE_F16 | 1u << GLLM_DTYPE_BF16,
        .max_head_dim = CPU_MAX_HEAD_DIM,
    };
    for (int m = 0; m < GLLM_MODE_COUNT; m++)
        out->modes[m] = (struct backend_mode_caps){.variants = every,
                                                   .max_head_dim = CPU_MAX_HEAD_DIM};
}

static int cpu_open(const struct backend_config *cfg, struct backend **out)
{
    int threads = cfg->threads;
    if (threads <= 0)
        threads = cpu_cores_usable();   /* affinity and cgroup quota: never oversubscribed */
    struct backend *be = calloc(1, sizeof *be);
    struct cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return -ENOMEM;
    }
    be->iface = &cpu_backend_iface;
    be->device = &cpu_device_iface;
    be->ctx = c;
    be->ndevices = 1;
    be->present = 1;            /* one device whatever one_device says */
    cpu_ledger_init(&c->ledger);
    cpu_queues_init(&c->queues, run_op);
    cpu_declare(&be->caps);
    be->caps.features = BACKEND_FEAT_SYNC | BACKEND_FEAT_QUEUES;
    be->caps.share_kind = BACKEND_SHARE_MEMFD;
    be->caps.share_granularity = cpu_share_granularity();
    /* The kernel's ISA level: the newest this CPU runs, or the one GLLM_CPU_ISA forces
     * (tests run every level; a level this CPU lacks is refused, never run). */
    char why[160] = "";
    int isa = cpu_isa_pick(getenv(CPU_ISA_ENV), why, sizeof why);
    if (isa < 0) {
        backend_logf(&cfg->log, BACKEND_LOG_ERR, "cpu: %s", why);
        cpu_close(be);
        return isa;
    }
    int r = cpu_pool_create(threads, &c->pool);
    if (r == 0)
        r = cpu_attention_create(c->pool, (enum cpu_isa)isa, &c->attn);
    if (r < 0) {
        cpu_close(be);
        return r;
    }
    backend_logf(&cfg->log, BACKEND_LOG_INFO, "cpu: attention kernels for %s (%s)%s, %d thread%s",
                 cpu_isa_name((enum cpu_isa)isa), cpu_isa_features((enum cpu_isa)isa),
                 isa == (int)cpu_isa_best() ? "" : ", forced by " CPU_ISA_ENV, threads,
                 threads == 1 ? "" : "s");
    read_cpu_model(c->model, sizeof c->model);
    *out = be;
    return 0;
}

static int cpu_device_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    memset(out, 0, sizeof *out);
    out->index = 0;
    snprintf(out->name, sizeof out->name, "%s", c->model);
    snprintf(out->kind, sizeof out->kind, "cpu");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    out->threads = cpu_pool_threads(c->pool);
    return 0;
}

/* The CPU's side of backend_sync: the counters live in memfds shared with the client, so a
 * wait is a poll of that memory (a few microseconds of spinning, then short sleeps) and a
 * signal a release store. Past the deadline the wait is released as on a GPU: the counter
 * gets the awaited value and the job fails without running. */
static int sync_wait(const struct backend_sync *s)
{
    if (!s || !s->wait)
        return 0;
    _Atomic uint32_t *w = (_Atomic uint32_t *)(uintptr_t)s->wait;
    const uint64_t start = backend_now_ns();
    for (unsigned spins = 0;; spins++) {
        if ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - s->wait_value) >= 0)
            return 0;
        uint64_t t = backend_now_ns();
        if (t - start >= s->wait_timeout_ns) {
            atomic_store_explicit(w, s->wait_value, memory_order_release);
            return GLLM_EWAITTIMEOUT;
        }
        if (spins > 1000)
            nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    }
}

static int sync_signal(const struct backend_sync *s, int status)
{
    if (s && s->signal)
        atomic_store_explicit((_Atomic uint32_t *)s->signal, s->signal_value, memory_order_release);
    return status;
}

/* After a simulated context-fatal fault every operation fails until the reset, as on a GPU
 * whose context is poisoned. */
static int poisoned(struct cpu_ctx *c, char *why, size_t len)
{
    if (!atomic_load(&c->ledger.poisoned))
        return 0;
    if (why)
        snprintf(why, len, "the device's context is poisoned by an earlier fault");
    return GLLM_EDEVLOST;
}

static int cpu_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    if (a->exec.queue)
        return cpu_queue_submit(a->exec.queue, CPU_OP_ATTENTION, a);
    if (poisoned(c, a->exec.why, a->exec.why_len))
        return sync_signal(a->exec.sync, GLLM_EDEVLOST);
    int r = sync_wait(a->exec.sync);
    return r < 0 ? r : sync_signal(a->exec.sync, cpu_attention_run(c->attn, a));
}

static int cpu_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    (void)be, (void)p, (void)why, (void)len;
    return 0;      /* every dtype and head dim the daemon lets through */
}

static int cpu_paged(struct backend *be, int dev, const struct paged_args *p)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    if (p->exec.queue)
        return cpu_queue_submit(p->exec.queue, CPU_OP_PAGED, p);
    if (poisoned(c, p->exec.why, p->exec.why_len))
        return sync_signal(p->exec.sync, GLLM_EDEVLOST);
    int r = sync_wait(p->exec.sync);
    return r < 0 ? r : sync_signal(p->exec.sync, cpu_paged_run(c->attn, p));
}

/* On the CPU, "device" memory is host memory the daemon owns; running out of it is DEVMEM
 * as on a GPU. */
static int cpu_dev_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    /* More than the machine has is refused before asking for it (an overcommitting
     * allocator would say yes and fault later). */
    if (rounded < bytes || (pages > 0 && page > 0 && rounded / (size_t)page > (size_t)pages))
        return GLLM_EDEVMEM;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return GLLM_EDEVMEM;
    if (cpu_ledger_add(&c->ledger, p, rounded, NULL) < 0) {
        free(p);
        return GLLM_EDEVMEM;
    }
    *out = p;
    return 0;
}

static void cpu_dev_free(struct backend *be, int dev, void *p)
{
    struct cpu_ctx *c = be->ctx;
    (void)dev;
    if (cpu_ledger_remove(&c->ledger, p))   /* else a reset released it already */
        free(p);
}

/* Shared memory goes through the ledger too, so a reset releases it like a GPU's. */
static int cpu_share_alloc_dev(struct backend *be, int dev, size_t bytes,
                               struct backend_shared *out, int *fd)
{
    struct cpu_ctx *c = be->ctx;
    int r = cpu_share_alloc(be, dev, bytes, out, fd);
    if (r == 0 && cpu_ledger_add(&c->ledger, out->ptr, out->bytes, out) < 0) {
        cpu_share_free(be, dev, out);
        close(*fd);
        *fd = -1;
        return GLLM_EDEVMEM;
    }
    return r;
}

static int cpu_share_import_dev(struct backend *be, int dev, int fd, size_t bytes,
                                struct backend_shared *out, char *why, size_t len)
{
    struct cpu_ctx *c = be->ctx;
    int r = cpu_share_import(be, dev, fd, bytes, out, why, len);
    if (r == 0 && cpu_ledger_add(&c->ledger, out->ptr, out->bytes, out) < 0) {
        cpu_share_free(be, dev, out);
        snprintf(why, len, "out of memory");
        return GLLM_EDEVMEM;
    }
    return r;
}

static void cpu_share_free_dev(struct backend *be, int dev, const struct backend_shared *s)
{
    struct cpu_ctx *c = be->ctx;
    if (cpu_ledger_remove(&c->ledger, s->ptr))
        cpu_share_free(be, dev, s);
}

/* Used: what device tensors and shared mappings hold now (the tests' leak check). */
static int cpu_memory(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *used = cpu_ledger_bytes(&c->ledger);
    *total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    return 0;
}

static int cpu_reset(struct backend *be, int dev, char *why, size_t len)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    cpu_queues_discard(&c->queues);
    return cpu_fault_reset(&c->ledger, why, len);
}

static int cpu_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                            uint64_t deadline_ns, char *why, size_t len)
{
    struct cpu_ctx *c = be->ctx;
    if (dev != 0)
        return -ENODEV;
    return cpu_fault_inject(&c->ledger, kind, deadline_ns, why, len);
}

static int cpu_copy(struct backend *be, int dev, const struct copy_args *c)
{
    if (dev != 0)
        return -ENODEV;
    if (c->exec.queue)
        return cpu_queue_submit(c->exec.queue, CPU_OP_COPY, c);
    if (poisoned(be->ctx, c->exec.why, c->exec.why_len))
        return sync_signal(c->exec.sync, GLLM_EDEVLOST);
    int r = sync_wait(c->exec.sync);
    if (r < 0)
        return r;
    if (c->bytes)           /* zero bytes: an operation of its wait and signal alone */
        memcpy(c->dst, c->src, c->bytes);
    if (c->exec.timing)
        c->exec.timing->copy_bytes = c->bytes;
    return sync_signal(c->exec.sync, 0);
}

static int run_op(struct backend *be, int dev, enum cpu_op_kind kind, const void *args)
{
    switch (kind) {
    case CPU_OP_COPY: return cpu_copy(be, dev, args);
    case CPU_OP_ATTENTION: return cpu_attention(be, dev, args);
    case CPU_OP_PAGED: return cpu_paged(be, dev, args);
    }
    return -EINVAL;
}

static int cpu_queue_open_dev(struct backend *be, int dev, struct backend_queue **out)
{
    struct cpu_ctx *c = be->ctx;
    return dev != 0 ? -ENODEV : cpu_queue_open(&c->queues, out);
}

static int cpu_queue_poll_dev(struct backend *be, int dev, struct backend_queue *q, bool cancel)
{
    struct cpu_ctx *c = be->ctx;
    return cpu_queue_poll(&c->queues, be, dev, q, cancel);
}

static void cpu_queue_close_dev(struct backend *be, int dev, struct backend_queue *q)
{
    struct cpu_ctx *c = be->ctx;
    (void)dev;
    cpu_queue_close(&c->queues, q);
}

static const struct backend_device_iface cpu_device_iface = {
    .info = cpu_device_info,
    .memory = cpu_memory,
    .alloc = cpu_dev_alloc,
    .free = cpu_dev_free,
    .copy = cpu_copy,
    .attention = cpu_attention,
    .paged_check = cpu_paged_check,
    .paged = cpu_paged,
    .share_alloc = cpu_share_alloc_dev,
    .share_import = cpu_share_import_dev,
    .share_free = cpu_share_free_dev,
    .reset = cpu_reset,
    .inject_fault = cpu_inject_fault,
    .queue_open = cpu_queue_open_dev,
    .queue_poll = cpu_queue_poll_dev,
    .queue_close = cpu_queue_close_dev,
};

const struct backend_iface cpu_backend_iface = {
    .api_version = BACKEND_API_VERSION,
    .name = "cpu",
    .probe = cpu_probe,
    .open = cpu_open,
    .close = cpu_close,
    .declare = cpu_declare,
};
