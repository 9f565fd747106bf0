/* The Vulkan backend's vtables: probe (one line why a device was passed over), open/close
 * over the usable physical devices, device memory by device address, copies, and attention
 * and paged jobs through the portable kernels' job logic (pk_host.c) on SPIR-V kernels. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pk_params.h"
#include "vk_job.h"

extern const struct backend_iface vulkan_backend_iface;
static const struct backend_device_iface vk_device_iface;

/* Scores: after CUDA (100) and HSA (50), before the CPU (10); a CPU implementation of
 * Vulkan (lavapipe) is slower than gllm's own CPU kernels, so it only wins when named. */
#define SCORE_GPU 30
#define SCORE_SOFTWARE 5
#define MAX_PHYS 16

struct vk_ctx {
    struct vk_instance vi;
    struct backend_log log;
    int ngpu;
    struct vk_gpu gpu[GLLM_MAX_DEVICES];
    struct vk_phys phys[GLLM_MAX_DEVICES];   /* each gpu's, to open it again on a reset */
};

/* The usable physical devices, hardware ones only when there is one; *present: all. */
static int usable(const struct vk_instance *vi, struct vk_phys *out, int max, int *present,
                  bool *software, char *why, size_t len)
{
    VkPhysicalDevice pds[MAX_PHYS];
    uint32_t n = MAX_PHYS;
    VkResult r = vi->fn.vkEnumeratePhysicalDevices(vi->inst, &n, pds);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        snprintf(why, len, "vkEnumeratePhysicalDevices: %s", vk_result_name(r));
        return 0;
    }
    *present = (int)n;
    if (n == 0) {
        snprintf(why, len, "no Vulkan device (the loader found no driver with a device)");
        return 0;
    }
    int nok = 0, nhw = 0;
    struct vk_phys all[MAX_PHYS];
    for (uint32_t i = 0; i < n; i++) {
        char one[160];
        if (!vk_phys_check(vi, pds[i], &all[nok], one, sizeof one)) {
            snprintf(why, len, "%s", one);
            continue;
        }
        nhw += !all[nok].software;
        nok++;
    }
    int k = 0;
    for (int i = 0; i < nok && k < max; i++)
        if (!nhw || !all[i].software)
            out[k++] = all[i];
    *software = k > 0 && nhw == 0;
    return k;
}

static int vk_probe(char *why, size_t len)
{
    struct vk_instance vi;
    if (vk_instance_open(&vi, why, len) < 0)
        return 0;
    struct vk_phys p[GLLM_MAX_DEVICES];
    int present = 0;
    bool software = false;
    int n = usable(&vi, p, GLLM_MAX_DEVICES, &present, &software, why, len);
    vk_instance_close(&vi);
    if (n == 0)
        return 0;
    return software ? SCORE_SOFTWARE : SCORE_GPU;
}

static void vk_close(struct backend *be)
{
    if (!be)
        return;
    struct vk_ctx *c = be->ctx;
    if (c) {
        for (int i = 0; i < c->ngpu; i++)
            vk_gpu_close(&c->gpu[i]);
        vk_instance_close(&c->vi);
        free(c);
    }
    free(be);
}

/* A device and its job half on p; logs and returns a code when either fails. */
static int open_gpu(struct vk_ctx *c, struct vk_gpu *g, const struct vk_phys *p, char *why,
                    size_t len)
{
    memset(g, 0, sizeof *g);
    int rc = vk_dev_open(&g->d, &c->vi, p, why, len);
    if (rc == 0 && (rc = vk_gpu_open(g, why, len)) < 0)
        vk_gpu_close(g);
    return rc;
}

/* What the shaders compute, device or not: f32, f16 and bf16, head dims to PK_MAX_D, every
 * variant field in every mode; q's and v's head dims are one (no HEAD_DIM_V: the portable job
 * logic has one D). */
static void vk_declare(struct backend_caps *out)
{
    *out = (struct backend_caps){
        .dtypes = 1u << GLLM_DTYPE_F32 | 1u << GLLM_DTYPE_F16 | 1u << GLLM_DTYPE_BF16,
        .max_head_dim = PK_MAX_D,
    };
    for (int m = 0; m < GLLM_MODE_COUNT; m++)
        out->modes[m] = (struct backend_mode_caps){
            .variants = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                        GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS,
            .max_head_dim = PK_MAX_D,
        };
}

static int vk_open(const struct backend_config *cfg, struct backend **out)
{
    char why[256];
    struct backend *be = calloc(1, sizeof *be);
    struct vk_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return -ENOMEM;
    }
    be->iface = &vulkan_backend_iface;
    be->device = &vk_device_iface;
    be->ctx = c;
    c->log = cfg->log;
    int rc = vk_instance_open(&c->vi, why, sizeof why);
    if (rc < 0) {
        backend_logf(&cfg->log, BACKEND_LOG_WARNING, "vulkan: %s", why);
        vk_close(be);
        return rc;
    }
    struct vk_phys p[GLLM_MAX_DEVICES];
    int present = 0;
    bool software = false;
    const int n = usable(&c->vi, p, GLLM_MAX_DEVICES, &present, &software, why, sizeof why);
    const int first = cfg->one_device ? cfg->device : 0;
    const int end = cfg->one_device ? first + 1 : n;
    for (int i = first < 0 ? n : first; i < end && i < n; i++) {
        struct vk_gpu *g = &c->gpu[c->ngpu];
        if (open_gpu(c, g, &p[i], why, sizeof why) < 0) {
            backend_logf(&cfg->log, BACKEND_LOG_WARNING, "vulkan: passing over %s: %s",
                         p[i].props.deviceName, why);
            continue;
        }
        c->phys[c->ngpu] = p[i];
        backend_logf(&cfg->log, BACKEND_LOG_INFO,
                     "vulkan: %s (%s), subgroup %u, %u keys per step%s", p[i].props.deviceName,
                     software ? "software" : "GPU", p[i].subgroup, g->pipes.keys,
                     p[i].require_size ? ", subgroup size required" : "");
        c->ngpu++;
    }
    if (c->ngpu == 0) {
        vk_close(be);
        return GLLM_EBACKEND;
    }
    be->ndevices = c->ngpu;
    be->present = n;
    vk_declare(&be->caps);
    be->caps.features = BACKEND_FEAT_SYNC;
    be->caps.share_kind = BACKEND_SHARE_NONE;
    *out = be;
    return 0;
}

static struct vk_gpu *gpu(struct backend *be, int dev)
{
    struct vk_ctx *c = be->ctx;
    return dev >= 0 && dev < c->ngpu && c->gpu[dev].d.dev ? &c->gpu[dev] : NULL;
}

static int vk_device_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct vk_gpu *g = gpu(be, dev);
    if (!g)
        return -ENODEV;
    const struct vk_phys *p = &g->d.phys;
    memset((char *)out + sizeof out->size, 0, sizeof *out - sizeof out->size);
    out->index = dev;
    snprintf(out->name, sizeof out->name, "%.80s%s", p->props.deviceName,
             p->software ? " (software)" : "");
    snprintf(out->kind, sizeof out->kind, "vulkan");
    out->memory_bytes = p->heap_bytes;
    snprintf(out->image, sizeof out->image, "SPIR-V, subgroup %u", p->subgroup);
    return 0;
}

static int vk_memory_info(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    struct vk_gpu *g = gpu(be, dev);
    if (!g)
        return -ENODEV;
    pthread_mutex_lock(&g->mem.lock);
    *used = g->mem.used;
    pthread_mutex_unlock(&g->mem.lock);
    *total = g->d.phys.heap_bytes;
    return 0;
}

static int vk_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct vk_gpu *g = gpu(be, dev);
    return g ? vk_memory_alloc(&g->mem, &g->d, bytes, out) : -ENODEV;
}

static void vk_free(struct backend *be, int dev, void *p)
{
    struct vk_gpu *g = gpu(be, dev);
    if (g)
        vk_memory_free(&g->mem, &g->d, p);
}

/* Ordering with a client through counters in host memory (BACKEND_FEAT_SYNC without
 * queues): the daemon's worker polls a job's wait itself, so what reaches the backend is at
 * most a wait it already saw met, and the signal. Operations run to completion here, their
 * outputs in host-visible memory by then, so the signal is a host store after the last one,
 * made whether the job succeeded or not. A counter in device memory (wait_device, or a
 * signal not in host memory) would need a queue: refused. */
static int sync_before(const struct backend_exec *e)
{
    const struct backend_sync *s = e->sync;
    if (!s)
        return 0;
    if ((s->wait && s->wait_device) || (s->signal && !s->signal_host)) {
        if (e->why)
            snprintf(e->why, e->why_len, "the vulkan backend orders jobs only through counters "
                     "in host memory");
        return -ENOTSUP;
    }
    if (!s->wait)
        return 0;
    const _Atomic uint32_t *w = s->wait;
    const uint64_t until = backend_now_ns() + s->wait_timeout_ns;
    while ((int32_t)(atomic_load_explicit(w, memory_order_acquire) - s->wait_value) < 0) {
        if (backend_now_ns() >= until) {
            atomic_store_explicit((_Atomic uint32_t *)w, s->wait_value, memory_order_release);
            if (e->why)
                snprintf(e->why, e->why_len, "its wait was not satisfied in time");
            return GLLM_EWAITTIMEOUT;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20000}, NULL);
    }
    return 0;
}

static int sync_after(const struct backend_exec *e, int rc)
{
    const struct backend_sync *s = e->sync;
    if (s && s->signal && s->signal_host)
        atomic_store_explicit((_Atomic uint32_t *)s->signal, s->signal_value, memory_order_release);
    return rc;
}

static int vk_copy(struct backend *be, int dev, const struct copy_args *cp)
{
    struct vk_gpu *g = gpu(be, dev);
    if (!g)
        return -ENODEV;
    int rc = sync_before(&cp->exec);
    if (rc == 0)
        rc = vk_gpu_copy(g, cp->dst, cp->src, cp->bytes, cp->to_device);
    if (rc == 0 && cp->exec.timing)
        cp->exec.timing->copy_bytes = cp->bytes;
    return sync_after(&cp->exec, rc);
}

/* Lost or past its deadline: the device needs a reset before anything else runs on it. */
static int ended(struct vk_gpu *g, int rc, const struct backend_exec *e)
{
    vk_gpu_end_job(g);
    if (rc < 0 && e->why && !e->why[0])
        snprintf(e->why, e->why_len, "vulkan: %s", gllm_strerror(rc));
    return rc;
}

static int vk_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct vk_gpu *g = gpu(be, dev);
    if (!g)
        return -ENODEV;
    int rc = sync_before(&a->exec);
    if (rc == 0) {
        vk_gpu_begin_job(g, &a->exec);
        const struct pk_device d = {&vk_pk_ops, g, (int)g->d.phys.subgroup};
        rc = vk_gpu_set_variant(g, &a->variant, a->Hq,
                                (a->device_mask >> 5 & 1u) | (a->device_mask >> 6 & 1u) << 1);
        rc = ended(g, rc < 0 ? rc : pk_attention(&d, a), &a->exec);
    }
    return sync_after(&a->exec, rc);
}

static int vk_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    (void)be;
    return pk_paged_check(p, why, len);
}

static int vk_paged(struct backend *be, int dev, const struct paged_args *p)
{
    struct vk_gpu *g = gpu(be, dev);
    if (!g)
        return -ENODEV;
    int rc = sync_before(&p->exec);
    if (rc == 0) {
        vk_gpu_begin_job(g, &p->exec);
        const struct pk_device d = {&vk_pk_ops, g, (int)g->d.phys.subgroup};
        const unsigned m = p->device_mask;
        rc = p->op == PAGED_ATTEND
                 ? vk_gpu_set_variant(g, &p->variant, p->Hq,
                                      (m >> PG_ALIBI & 1u) | (m >> PG_SINKS & 1u) << 1)
                 : 0;
        rc = ended(g, rc < 0 ? rc : pk_paged(&d, p), &p->exec);
    }
    return sync_after(&p->exec, rc);
}

/* A new logical device on the same physical one: every buffer of the old one goes with it.
 * Work still running past a timeout is given 5 s to end; a device that will not stop cannot
 * be destroyed safely, so the reset fails and the daemon takes the device out of service. */
static int vk_reset(struct backend *be, int dev, char *why, size_t len)
{
    struct vk_ctx *c = be->ctx;
    if (dev < 0 || dev >= c->ngpu)
        return -ENODEV;
    struct vk_gpu *g = &c->gpu[dev];
    if (g->d.dev && vk_gpu_drain(g, 5000000000ull) < 0) {
        snprintf(why, len, "vulkan: kernels still running 5 s after the deadline");
        return GLLM_EJOBTIMEOUT;
    }
    vk_gpu_close(g);
    int rc = open_gpu(c, g, &c->phys[dev], why, len);
    if (rc < 0)
        return rc;
    backend_logf(&c->log, BACKEND_LOG_INFO, "vulkan: device %d reset (%s)", dev,
                 c->phys[dev].props.deviceName);
    return 0;
}

static const struct backend_device_iface vk_device_iface = {
    .info = vk_device_info,
    .memory = vk_memory_info,
    .alloc = vk_alloc,
    .free = vk_free,
    .copy = vk_copy,
    .attention = vk_attention,
    .paged_check = vk_paged_check,
    .paged = vk_paged,
    .reset = vk_reset,
};

const struct backend_iface vulkan_backend_iface = {
    .api_version = BACKEND_API_VERSION,
    .name = "vulkan",
    .probe = vk_probe,
    .open = vk_open,
    .close = vk_close,
    .describe = vk_spirv_line,
    .declare = vk_declare,
};
