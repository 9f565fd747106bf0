/* The HSA (ROCm) backend's vtables: probe, open/close over the GPU agents (hsa_device.c),
 * device memory, locked arenas, copies, and attention and paged jobs through the portable
 * kernels' job logic (daemon/backends/common/pk_host.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hsa_backend.h"
#include "hsa_codeobj.h"
#include "hsa_device.h"

extern const struct backend_iface hsa_backend_iface;
static const struct backend_device_iface hsa_device_iface;

static const char *kfd_path = "/dev/kfd";

void hsa_backend_set_kfd_path(const char *path)
{
    kfd_path = path;
}

static uint64_t wait_ns = HSA_WAIT_DEFAULT_NS;

void hsa_backend_set_wait_ns(uint64_t ns)
{
    wait_ns = ns ? ns : HSA_WAIT_DEFAULT_NS;
}

struct hsa_ctx {
    const struct hsa_runtime *rt;
    struct backend_log log;
    struct hsa_locked locked;
    int ndev;
    struct hsa_dev dev[GLLM_MAX_DEVICES];
};

/* What iterating the agents found: GPUs, the first CPU, and a reason when no GPU is usable. */
struct agents {
    const struct hsa_runtime *rt;
    int ngpu, nusable;
    hsa_agent_t gpu[GLLM_MAX_DEVICES];
    hsa_agent_t cpu;
    bool have_cpu;
    char why[200];
};

static hsa_status_t see_agent(hsa_agent_t a, void *data)
{
    struct agents *s = data;
    uint32_t type = 99;
    if (s->rt->hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
        return HSA_STATUS_SUCCESS;
    if (type == HSA_DEVICE_TYPE_CPU && !s->have_cpu)
        s->cpu = a, s->have_cpu = true;
    if (type != HSA_DEVICE_TYPE_GPU || s->ngpu == GLLM_MAX_DEVICES)
        return HSA_STATUS_SUCCESS;
    s->gpu[s->ngpu++] = a;
    char proc[32];
    const struct hsaco_image *imgs;
    int n = hsaco_embedded(&imgs);
    if (!hsa_agent_processor(s->rt, a, proc, sizeof proc))
        snprintf(s->why, sizeof s->why, "a GPU agent has no readable ISA name");
    else if (hsaco_choose(imgs, n, proc, s->why, sizeof s->why) >= 0)
        s->nusable++;
    return HSA_STATUS_SUCCESS;
}

static int find_agents(const struct hsa_runtime *rt, struct agents *s)
{
    memset(s, 0, sizeof *s);
    s->rt = rt;
    hsa_status_t r = rt->hsa_iterate_agents(see_agent, s);
    if (r != HSA_STATUS_SUCCESS && r != HSA_STATUS_INFO_BREAK)
        return GLLM_EBACKEND;
    if (s->ngpu == 0)
        snprintf(s->why, sizeof s->why, "no GPU agent (the HSA runtime sees no AMD GPU)");
    else if (!s->have_cpu)
        snprintf(s->why, sizeof s->why, "no CPU agent for host memory");
    return 0;
}

static int hsa_probe(char *why, size_t len)
{
    const struct hsa_runtime *rt = hsa_runtime_load(why, len);
    if (!rt)
        return 0;
    if (access(kfd_path, F_OK) != 0) {
        snprintf(why, len, "no %s (no amdgpu kernel driver)", kfd_path);
        return 0;
    }
    char buf[160];
    hsa_status_t r = rt->hsa_init();
    if (r != HSA_STATUS_SUCCESS) {
        snprintf(why, len, "hsa_init: %s", hsa_error_text(rt, r, buf, sizeof buf));
        return 0;
    }
    struct agents s;
    int rc = find_agents(rt, &s);
    rt->hsa_shut_down();
    if (rc < 0) {
        snprintf(why, len, "hsa_iterate_agents failed");
        return 0;
    }
    if (s.nusable == 0 || !s.have_cpu) {
        snprintf(why, len, "%s", s.why);
        return 0;
    }
    return 50;      /* after CUDA, before the CPU */
}

static void hsa_close(struct backend *be)
{
    if (!be)
        return;
    struct hsa_ctx *c = be->ctx;
    if (c) {
        for (int i = 0; i < c->ndev; i++)
            hsa_device_close(&c->dev[i]);
        for (int i = 0; i < c->locked.n; i++)
            c->rt->hsa_amd_memory_unlock((void *)c->locked.r[i].host);
        pthread_mutex_destroy(&c->locked.lock);
        c->rt->hsa_shut_down();
        free(c);
    }
    free(be);
}

/* What the portable kernels compute (pk_declare), as cuda-portable declares it too. */
static void hsa_declare(struct backend_caps *out)
{
    pk_declare(out);
}

static int hsa_open(const struct backend_config *cfg, struct backend **out)
{
    char why[256];
    const struct hsa_runtime *rt = hsa_runtime_load(why, sizeof why);
    if (!rt)
        return -ENODEV;
    if (rt->hsa_init() != HSA_STATUS_SUCCESS)
        return -ENODEV;
    struct backend *be = calloc(1, sizeof *be);
    struct hsa_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        rt->hsa_shut_down();
        return -ENOMEM;
    }
    be->iface = &hsa_backend_iface;
    be->device = &hsa_device_iface;
    be->ctx = c;
    c->rt = rt;
    c->log = cfg->log;
    pthread_mutex_init(&c->locked.lock, NULL);
    struct agents s;
    if (find_agents(rt, &s) < 0 || !s.have_cpu) {
        hsa_close(be);
        return GLLM_EBACKEND;
    }
    const int first = cfg->one_device ? cfg->device : 0;
    const int end = cfg->one_device ? first + 1 : s.ngpu;
    for (int i = first < 0 ? s.ngpu : first; i < end && i < s.ngpu; i++) {
        struct hsa_dev *x = &c->dev[c->ndev];
        *x = (struct hsa_dev){.rt = rt, .host = s.cpu, .locked = &c->locked, .log = cfg->log};
        x->info.index = c->ndev;
        if (hsa_device_open(x, s.gpu[i], why, sizeof why) < 0) {
            backend_logf(&cfg->log, BACKEND_LOG_WARNING, "hsa: passing over GPU agent %d: %s", i, why);
            hsa_device_close(x);
            continue;
        }
        x->wait_ns = wait_ns;
        c->ndev++;
    }
    if (c->ndev == 0) {
        hsa_close(be);
        return GLLM_EBACKEND;
    }
    be->ndevices = c->ndev;
    be->present = s.ngpu;
    hsa_declare(&be->caps);
    be->caps.share_kind = BACKEND_SHARE_NONE;
    *out = be;
    return 0;
}

static struct hsa_dev *device(struct backend *be, int dev)
{
    struct hsa_ctx *c = be->ctx;
    return dev >= 0 && dev < c->ndev ? &c->dev[dev] : NULL;
}

static int hsa_device_info(struct backend *be, int dev, gllm_device_info *out)
{
    struct hsa_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    *out = x->info;
    return 0;
}

/* Locked (pinned) arenas: copies from them skip the bounce buffer. */
static int hsa_host_register(struct backend *be, void *p, size_t len)
{
    struct hsa_ctx *c = be->ctx;
    hsa_agent_t agents[GLLM_MAX_DEVICES];
    for (int i = 0; i < c->ndev; i++)
        agents[i] = c->dev[i].agent;
    void *agent_ptr = NULL;
    pthread_mutex_lock(&c->locked.lock);
    int rc = 0;
    if (c->locked.n == HSA_MAX_LOCKED) {
        rc = -ENOSPC;
    } else {
        hsa_status_t s = c->rt->hsa_amd_memory_lock(p, len, agents, c->ndev, &agent_ptr);
        if (s != HSA_STATUS_SUCCESS) {
            char buf[160];
            backend_logf(&c->log, BACKEND_LOG_WARNING,
                         "hsa: locking a %zu-byte arena failed (%s); copies will be slower", len,
                         hsa_error_text(c->rt, s, buf, sizeof buf));
            rc = GLLM_EBACKEND;
        } else {
            c->locked.r[c->locked.n].host = p;
            c->locked.r[c->locked.n].bytes = len;
            c->locked.r[c->locked.n].agent_ptr = agent_ptr;
            c->locked.n++;
        }
    }
    pthread_mutex_unlock(&c->locked.lock);
    return rc;
}

static void hsa_host_unregister(struct backend *be, void *p)
{
    struct hsa_ctx *c = be->ctx;
    pthread_mutex_lock(&c->locked.lock);
    for (int i = 0; i < c->locked.n; i++) {
        if (c->locked.r[i].host != p)
            continue;
        c->rt->hsa_amd_memory_unlock(p);
        c->locked.r[i] = c->locked.r[--c->locked.n];
        break;
    }
    pthread_mutex_unlock(&c->locked.lock);
}

static int hsa_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    struct hsa_dev *x = device(be, dev);
    return x ? hsa_device_alloc(x, bytes, out) : -ENODEV;
}

static void hsa_free(struct backend *be, int dev, void *p)
{
    struct hsa_dev *x = device(be, dev);
    if (x)
        hsa_device_free(x, p);
}

/* No GPU-side waits or signals yet (caps do not offer BACKEND_FEAT_SYNC). */
static bool has_sync(const struct backend_sync *s)
{
    return s && (s->wait || s->signal);
}

static int hsa_copy(struct backend *be, int dev, const struct copy_args *cp)
{
    struct hsa_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(cp->exec.sync))
        return -ENOTSUP;
    int rc = hsa_device_copy(x, cp->dst, cp->src, cp->bytes, cp->to_device);
    if (rc == 0 && cp->exec.timing)
        cp->exec.timing->copy_bytes = cp->bytes;
    return rc;
}

static int hsa_attention(struct backend *be, int dev, const struct attn_args *a)
{
    struct hsa_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(a->exec.sync))
        return -ENOTSUP;
    const struct pk_device d = {&hsa_pk_ops, x, x->wave};
    return pk_attention(&d, a);
}

static int hsa_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    (void)be;
    return pk_paged_check(p, why, len);
}

static int hsa_paged(struct backend *be, int dev, const struct paged_args *p)
{
    struct hsa_dev *x = device(be, dev);
    if (!x)
        return -ENODEV;
    if (has_sync(p->exec.sync))
        return -ENOTSUP;
    const struct pk_device d = {&hsa_pk_ops, x, x->wave};
    return pk_paged(&d, p);
}

static const struct backend_device_iface hsa_device_iface = {
    .info = hsa_device_info,
    .host_register = hsa_host_register,
    .host_unregister = hsa_host_unregister,
    .alloc = hsa_alloc,
    .free = hsa_free,
    .copy = hsa_copy,
    .attention = hsa_attention,
    .paged_check = hsa_paged_check,
    .paged = hsa_paged,
};

const struct backend_iface hsa_backend_iface = {
    .api_version = BACKEND_API_VERSION,
    .name = "hsa",
    .probe = hsa_probe,
    .open = hsa_open,
    .close = hsa_close,
    .describe = hsaco_line,
    .declare = hsa_declare,
};
