/* Backend registry, selection by score (the best usable backend wins, CPU last) and the
 * wrappers through which the daemon calls the backend it opened. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "proto.h"

/* Each backend library defines one (daemon/backends/<name>/<name>_backend.c). */
extern const struct backend_iface cpu_backend_iface;
#ifdef GLLM_HAVE_CUDA
extern const struct backend_iface cuda_backend_iface;
extern const struct backend_iface cuda_portable_backend_iface;
#endif
#ifdef GLLM_HAVE_HSA
extern const struct backend_iface hsa_backend_iface;
#endif
#ifdef GLLM_HAVE_VULKAN
extern const struct backend_iface vulkan_backend_iface;
#endif

/* In order of preference. */
static const struct backend_iface *const registry[] = {
#ifdef GLLM_HAVE_CUDA
    &cuda_backend_iface,
#endif
#ifdef GLLM_HAVE_HSA
    &hsa_backend_iface,
#endif
#ifdef GLLM_HAVE_VULKAN
    &vulkan_backend_iface,
#endif
    &cpu_backend_iface,
#ifdef GLLM_HAVE_CUDA
    &cuda_portable_backend_iface,
#endif
};

/* Variants opened only when named (checks of one backend's kernels on another's hardware),
 * never chosen by auto. */
static bool by_name_only(const struct backend_iface *b)
{
#ifdef GLLM_HAVE_CUDA
    if (b == &cuda_portable_backend_iface)
        return true;
#endif
    (void)b;
    return false;
}

#define NREGISTRY (sizeof registry / sizeof *registry)

const char *backend_names(void)
{
    static char names[128];
    if (!names[0]) {
        size_t used = 0;
        for (size_t i = 0; i < NREGISTRY && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                     registry[i]->name);
    }
    return names;
}

bool backend_known(const char *name)
{
    if (strcmp(name, "auto") == 0)
        return true;
    for (size_t i = 0; i < NREGISTRY; i++)
        if (strcmp(name, registry[i]->name) == 0)
            return true;
    return false;
}

void backend_describe(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NREGISTRY && used < len; i++)
        if (registry[i]->describe)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "; " : "",
                                     registry[i]->describe());
}

static void note(char *why, size_t len, size_t *used, const char *name, const char *reason)
{
    if (*used >= len)
        return;
    int n = snprintf(why + *used, len - *used, "%s%s: %s", *used ? "; " : "", name, reason);
    *used += n > 0 ? (size_t)n : 0;
}

int backend_select(const char *name, const struct backend_config *cfg, struct backend **out,
                   char *why, size_t len)
{
    bool any = strcmp(name, "auto") == 0;
    int scores[NREGISTRY];
    size_t used = 0;
    bool known = any;
    if (len)
        why[0] = '\0';
    for (size_t i = 0; i < NREGISTRY; i++) {
        const struct backend_iface *b = registry[i];
        scores[i] = 0;
        if (b->api_version != BACKEND_API_VERSION || (!any && strcmp(name, b->name) != 0) ||
            (any && by_name_only(b)))
            continue;
        known = true;
        char reason[200] = "";
        scores[i] = b->probe(reason, sizeof reason);
        if (scores[i] <= 0)
            note(why, len, &used, b->name, reason[0] ? reason : "not usable here");
    }
    if (!known) {
        snprintf(why, len, "no backend named '%s' (this gllmd has: %s)", name, backend_names());
        return -ENODEV;
    }
    /* Best score first; one that fails to open gives way to the next. */
    int last = -ENODEV;
    for (;;) {
        size_t best = NREGISTRY;
        for (size_t i = 0; i < NREGISTRY; i++)
            if (scores[i] > 0 && (best == NREGISTRY || scores[i] > scores[best]))
                best = i;
        if (best == NREGISTRY)
            return last;
        scores[best] = 0;
        last = registry[best]->open(cfg, out);
        if (last == 0)
            return 0;
        char reason[120];
        snprintf(reason, sizeof reason, "failed to open (%s)", gllm_strerror(last));
        note(why, len, &used, registry[best]->name, reason);
    }
}

void backend_close(struct backend *be)
{
    if (be)
        be->iface->close(be);
}

const char *backend_name(const struct backend *be)
{
    return be->iface->name;
}

int backend_device_count(const struct backend *be)
{
    return be->ndevices;
}

const struct backend_caps *backend_caps(const struct backend *be)
{
    return &be->caps;
}

void backend_caps_modes(const struct backend_caps *caps, struct proto_mode_caps *out,
                        uint32_t *dtypes)
{
    for (int i = 0; i < GLLM_MODE_COUNT; i++) {
        const struct backend_mode_caps *m = &caps->modes[i];
        struct proto_mode_caps c = {.variants = m->variants};
        c.max_head_dim = (uint64_t)(m->max_head_dim > 0 ? m->max_head_dim : caps->max_head_dim);
        c.n_head_dims = m->nhead_dims > 0 && m->nhead_dims <= GLLM_MAX_MODE_HEAD_DIMS
                            ? (uint32_t)m->nhead_dims : 0;
        c.has_head_dims = c.n_head_dims > 0;
        for (uint32_t d = 0; d < c.n_head_dims; d++)
            c.head_dims[d] = (uint64_t)m->head_dims[d];
        out[i] = c;
        if (dtypes)
            dtypes[i] = m->dtypes ? m->dtypes & caps->dtypes : caps->dtypes;
    }
}

void backend_mode_caps(const struct backend *be, struct proto_mode_caps *out, uint32_t *dtypes)
{
    backend_caps_modes(&be->caps, out, dtypes);
}

size_t backend_registered(void)
{
    return NREGISTRY;
}

bool backend_declared(size_t i, const char **name, bool *by_auto, struct backend_caps *caps)
{
    if (i >= NREGISTRY)
        return false;
    const struct backend_iface *b = registry[i];
    *name = b->name;
    *by_auto = !by_name_only(b);
    memset(caps, 0, sizeof *caps);
    if (b->api_version != BACKEND_API_VERSION || !b->declare)
        return false;
    b->declare(caps);
    return true;
}

bool backend_has(const struct backend *be, uint32_t feature)
{
    return (be->caps.features & feature) == feature;
}

int backend_device_info(struct backend *be, int dev, gllm_device_info *out)
{
    return be->device->info(be, dev, out);
}

int backend_memory_info(struct backend *be, int dev, uint64_t *used, uint64_t *total)
{
    return be->device->memory ? be->device->memory(be, dev, used, total) : -ENOTSUP;
}

int backend_host_map(struct backend *be, void *p, size_t len, int fd)
{
    return be->device->host_map ? be->device->host_map(be, p, len, fd) : -ENOTSUP;
}

void backend_host_unmap(struct backend *be, void *p)
{
    if (be->device->host_unmap)
        be->device->host_unmap(be, p);
}

int backend_host_register(struct backend *be, void *p, size_t len)
{
    return be->device->host_register ? be->device->host_register(be, p, len) : -ENOTSUP;
}

void backend_host_unregister(struct backend *be, void *p)
{
    if (be->device->host_unregister)
        be->device->host_unregister(be, p);
}

int backend_dev_alloc(struct backend *be, int dev, size_t bytes, void **out)
{
    return be->device->alloc ? be->device->alloc(be, dev, bytes, out) : -ENOTSUP;
}

void backend_dev_free(struct backend *be, int dev, void *p)
{
    be->device->free(be, dev, p);
}

static bool shares(const struct backend *be)
{
    return be->caps.share_kind != BACKEND_SHARE_NONE && be->caps.share_granularity &&
           be->device->share_alloc && be->device->share_import && be->device->share_free;
}

size_t backend_share_size(const struct backend *be, size_t bytes)
{
    size_t g = be->caps.share_granularity;
    if (!shares(be) || bytes == 0 || bytes > SIZE_MAX - (g - 1))
        return 0;
    return (bytes + g - 1) / g * g;
}

int backend_share_alloc(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                        int *fd)
{
    return shares(be) ? be->device->share_alloc(be, dev, bytes, out, fd) : -ENOTSUP;
}

int backend_share_import(struct backend *be, int dev, int fd, size_t bytes,
                         struct backend_shared *out, char *why, size_t len)
{
    if (!shares(be)) {
        snprintf(why, len, "the %s backend shares no memory", be->iface->name);
        return -ENOTSUP;
    }
    return be->device->share_import(be, dev, fd, bytes, out, why, len);
}

void backend_share_free(struct backend *be, int dev, const struct backend_shared *s)
{
    if (shares(be))
        be->device->share_free(be, dev, s);
}

bool backend_registers_host(const struct backend *be)
{
    return be->device->host_register != NULL;
}

int backend_copy(struct backend *be, int dev, const struct copy_args *c)
{
    return be->device->copy(be, dev, c);
}

int backend_attention(struct backend *be, int dev, const struct attn_args *a)
{
    return be->device->attention(be, dev, a);
}

int backend_paged(struct backend *be, int dev, const struct paged_args *p)
{
    return be->device->paged(be, dev, p);
}

int backend_paged_check(struct backend *be, const struct paged_args *p, char *why, size_t len)
{
    if (!be->device->paged) {
        snprintf(why, len, "not supported by the %s backend", be->iface->name);
        return GLLM_EMETHOD;
    }
    return be->device->paged_check ? be->device->paged_check(be, p, why, len) : 0;
}

int backend_reset(struct backend *be, int dev, char *why, size_t len)
{
    if (!be->device->reset) {
        snprintf(why, len, "the %s backend cannot reset a device", be->iface->name);
        return -ENOTSUP;
    }
    return be->device->reset(be, dev, why, len);
}

bool backend_watches_loss(const struct backend *be)
{
    return be->device->lost != NULL && be->device->reset != NULL;
}

bool backend_device_lost(struct backend *be, int dev, char *why, size_t len)
{
    return backend_watches_loss(be) && be->device->lost(be, dev, why, len);
}

uint32_t backend_reset_allowance_ms(struct backend *be, int dev)
{
    return be->device->reset_allowance_ms ? be->device->reset_allowance_ms(be, dev) : 0;
}

bool backend_recovers_in_process(const struct backend *be)
{
    return be->device->reset != NULL;
}

int backend_inject_fault(struct backend *be, int dev, enum backend_fault kind,
                         uint64_t deadline_ns, char *why, size_t len)
{
    if (!be->device->inject_fault) {
        snprintf(why, len, "the %s backend injects no faults in this build", be->iface->name);
        return -EOPNOTSUPP;
    }
    return be->device->inject_fault(be, dev, kind, deadline_ns, why, len);
}

bool backend_has_queues(const struct backend *be)
{
    return backend_has(be, BACKEND_FEAT_QUEUES) && be->device->queue_open &&
           be->device->queue_poll && be->device->queue_close;
}

int backend_queue_open(struct backend *be, int dev, struct backend_queue **out)
{
    return backend_has_queues(be) ? be->device->queue_open(be, dev, out) : -ENOTSUP;
}

int backend_queue_poll(struct backend *be, int dev, struct backend_queue *q, bool cancel)
{
    return be->device->queue_poll(be, dev, q, cancel);
}

void backend_queue_close(struct backend *be, int dev, struct backend_queue *q)
{
    if (q)
        be->device->queue_close(be, dev, q);
}
