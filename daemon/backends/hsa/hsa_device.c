/* One HSA GPU agent: pools, queue, signal, the code object for its ISA, kernel dispatch
 * through AQL packets and copies through hsa_amd_memory_async_copy, each waited for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hsa_codeobj.h"
#include "hsa_device.h"

static int fail(struct hsa_dev *x, hsa_status_t s, const char *what)
{
    char buf[160];
    backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): %s failed: %s", x->info.index,
                 x->processor, what, hsa_error_text(x->rt, s, buf, sizeof buf));
    return s == HSA_STATUS_ERROR_OUT_OF_RESOURCES ? GLLM_EDEVMEM : GLLM_EBACKEND;
}

struct isa_search {
    const struct hsa_runtime *rt;
    char *out;
    size_t len;
    bool found;
};

static hsa_status_t first_isa(hsa_isa_t isa, void *data)
{
    struct isa_search *s = data;
    uint32_t n = 0;
    char name[128];
    if (s->rt->hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, &n) != HSA_STATUS_SUCCESS ||
        n == 0 || n >= sizeof name)
        return HSA_STATUS_SUCCESS;
    if (s->rt->hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, name) != HSA_STATUS_SUCCESS)
        return HSA_STATUS_SUCCESS;
    name[n] = '\0';
    s->found = hsaco_isa_processor(name, s->out, s->len);
    return s->found ? HSA_STATUS_INFO_BREAK : HSA_STATUS_SUCCESS;
}

bool hsa_agent_processor(const struct hsa_runtime *rt, hsa_agent_t a, char *out, size_t len)
{
    struct isa_search s = {rt, out, len, false};
    rt->hsa_agent_iterate_isas(a, first_isa, &s);
    return s.found;
}

struct pool_search {
    const struct hsa_runtime *rt;
    uint32_t flag;                 /* HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_* wanted */
    hsa_amd_memory_pool_t pool;
    size_t bytes;
    bool found;
};

static hsa_status_t pick_pool(hsa_amd_memory_pool_t p, void *data)
{
    struct pool_search *s = data;
    uint32_t segment = 99, flags = 0;
    bool alloc = false;
    size_t bytes = 0;
    if (s->rt->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment) ||
        segment != HSA_AMD_SEGMENT_GLOBAL ||
        s->rt->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags) ||
        !(flags & s->flag) ||
        s->rt->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &alloc) ||
        !alloc)
        return HSA_STATUS_SUCCESS;
    s->rt->hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SIZE, &bytes);
    s->pool = p, s->bytes = bytes, s->found = true;
    return HSA_STATUS_INFO_BREAK;
}

static bool find_pool(const struct hsa_runtime *rt, hsa_agent_t a, uint32_t flag,
                      hsa_amd_memory_pool_t *out, size_t *bytes)
{
    struct pool_search s = {.rt = rt, .flag = flag};
    rt->hsa_amd_agent_iterate_memory_pools(a, pick_pool, &s);
    if (s.found) {
        *out = s.pool;
        if (bytes)
            *bytes = s.bytes;
    }
    return s.found;
}

/* Memory from the host's kernarg pool that this GPU may read and write. */
static hsa_status_t host_alloc(struct hsa_dev *x, size_t bytes, void **out)
{
    hsa_status_t s = x->rt->hsa_amd_memory_pool_allocate(x->kernarg_pool, bytes, 0, out);
    if (s == HSA_STATUS_SUCCESS &&
        (s = x->rt->hsa_amd_agents_allow_access(1, &x->agent, NULL, *out)) != HSA_STATUS_SUCCESS) {
        x->rt->hsa_amd_memory_pool_free(*out);
        *out = NULL;
    }
    return s;
}

/* The runtime's report of a fault on the queue (a memory violation, an illegal instruction):
 * the queue is dead from here; the job waiting on it fails at once and the next job gets a
 * new queue (op_launch). Runs on a runtime thread. */
static void queue_error(hsa_status_t status, hsa_queue_t *q, void *data)
{
    (void)q;
    struct hsa_dev *x = data;
    char buf[160];
    backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): queue error: %s", x->info.index,
                 x->processor, hsa_error_text(x->rt, status, buf, sizeof buf));
    __atomic_store_n(&x->queue_fault, status ? (int)status : HSA_STATUS_ERROR, __ATOMIC_RELEASE);
}

static hsa_status_t make_queue(struct hsa_dev *x)
{
    hsa_status_t s = x->rt->hsa_queue_create(x->agent, x->queue_size, HSA_QUEUE_TYPE_SINGLE,
                                             queue_error, x, UINT32_MAX, UINT32_MAX, &x->queue);
    if (s != HSA_STATUS_SUCCESS)
        x->queue = NULL;
    return s;
}

/* The kernels by name from the frozen executable, checked against the descriptors read
 * from the same code object (hsaco_parse): both must hold our parameter struct. */
static int load_kernels(struct hsa_dev *x, const struct hsaco_info *info, char *why, size_t len)
{
    const struct hsa_runtime *rt = x->rt;
    for (int i = 0; i < PK_NKERNELS; i++) {
        const char *name = pk_kernel_names[i];
        const struct hsaco_kernel *kd = hsaco_find(info, name);
        const size_t need = i == PK_ATTN_F32 || i == PK_ATTN_F16 || i == PK_ATTN_BF16
                                ? sizeof(struct pk_attn_params) : sizeof(struct pk_paged_params);
        char sym_name[64];
        snprintf(sym_name, sizeof sym_name, "%s.kd", name);
        hsa_executable_symbol_t sym;
        struct hsa_kernel_sym *k = &x->k[i];
        if (!kd) {
            snprintf(why, len, "%s code object has no kernel %s", x->processor, name);
            return GLLM_EBACKEND;
        }
        if (rt->hsa_executable_get_symbol_by_name(x->exe, sym_name, &x->agent, &sym) ||
            rt->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &k->object) ||
            rt->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, &k->kernarg_bytes) ||
            rt->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, &k->group_bytes) ||
            rt->hsa_executable_symbol_get_info(sym, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, &k->private_bytes)) {
            snprintf(why, len, "kernel %s not found in the loaded executable", name);
            return GLLM_EBACKEND;
        }
        if (k->kernarg_bytes < need || kd->kernarg_bytes < need || kd->wave != x->wave) {
            snprintf(why, len, "kernel %s: kernarg %u bytes (descriptor %u), wave %d: gllmd needs %zu bytes, wave %d",
                     name, k->kernarg_bytes, kd->kernarg_bytes, kd->wave, need, x->wave);
            return GLLM_EBACKEND;
        }
        if (k->kernarg_bytes > x->kernarg_bytes)
            x->kernarg_bytes = k->kernarg_bytes;
    }
    return 0;
}

int hsa_device_open(struct hsa_dev *x, hsa_agent_t a, char *why, size_t len)
{
    const struct hsa_runtime *rt = x->rt;
    x->agent = a;
    x->wait_ns = HSA_WAIT_DEFAULT_NS;
    snprintf(x->info.kind, sizeof x->info.kind, "hsa");
    if (!hsa_agent_processor(rt, a, x->processor, sizeof x->processor)) {
        snprintf(why, len, "GPU agent without a readable ISA name");
        return GLLM_EBACKEND;
    }
    const struct hsaco_image *imgs;
    int n = hsaco_embedded(&imgs), pick = hsaco_choose(imgs, n, x->processor, why, len);
    if (pick < 0)
        return GLLM_EBACKEND;
    struct hsaco_info info;
    char pwhy[120];
    if (hsaco_parse(imgs[pick].data, imgs[pick].size, &info, pwhy, sizeof pwhy) < 0) {
        snprintf(why, len, "embedded %s code object unreadable: %s", x->processor, pwhy);
        return GLLM_EBACKEND;
    }
    uint32_t wave = 0, cus = 0, qmax = 0;
    char product[64] = "";
    rt->hsa_agent_get_info(a, HSA_AGENT_INFO_WAVEFRONT_SIZE, &wave);
    rt->hsa_agent_get_info(a, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, &cus);
    rt->hsa_agent_get_info(a, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &qmax);
    rt->hsa_agent_get_info(a, HSA_AMD_AGENT_INFO_PRODUCT_NAME, product);
    product[sizeof product - 1] = '\0';
    x->wave = (int)wave;
    if (wave != 32 && wave != 64) {
        snprintf(why, len, "%s reports a wave size of %u", x->processor, wave);
        return GLLM_EBACKEND;
    }
    /* 60 + 16 + the rest (at most 95) fits name whatever the runtime reports. */
    snprintf(x->info.name, sizeof x->info.name, "%.60s (%.16s, %u CUs)",
             product[0] ? product : "AMD GPU", x->processor, cus);
    snprintf(x->info.image, sizeof x->info.image, "%.20s HSACO", x->processor);
    size_t pool_bytes = 0;
    if (!find_pool(rt, a, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, &x->device_pool, &pool_bytes)) {
        snprintf(why, len, "%s has no coarse-grained memory pool", x->processor);
        return GLLM_EBACKEND;
    }
    x->info.memory_bytes = pool_bytes;
    if (!find_pool(rt, x->host, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, &x->kernarg_pool, NULL)) {
        snprintf(why, len, "the host agent has no kernarg memory pool");
        return GLLM_EBACKEND;
    }
    char buf[160];
    hsa_status_t s;
    if ((s = rt->hsa_code_object_reader_create_from_memory(imgs[pick].data, imgs[pick].size, &x->reader))) {
        snprintf(why, len, "reading the %s code object: %s", x->processor, hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    x->have_reader = true;
    if ((s = rt->hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                                           NULL, &x->exe))) {
        snprintf(why, len, "creating an executable: %s", hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    x->have_exe = true;
    if ((s = rt->hsa_executable_load_agent_code_object(x->exe, a, x->reader, NULL, NULL)) ||
        (s = rt->hsa_executable_freeze(x->exe, NULL))) {
        snprintf(why, len, "loading the %s code object: %s", x->processor, hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    int rc = load_kernels(x, &info, why, len);
    if (rc < 0)
        return rc;
    x->queue_size = qmax < 1024 ? qmax : 1024;
    if ((s = make_queue(x))) {
        snprintf(why, len, "creating a %u-packet queue: %s", x->queue_size,
                 hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    if ((s = rt->hsa_signal_create(0, 0, NULL, &x->signal))) {
        snprintf(why, len, "creating a signal: %s", hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    x->have_signal = true;
    if ((s = host_alloc(x, x->kernarg_bytes, &x->kernarg))) {
        snprintf(why, len, "kernarg memory: %s", hsa_error_text(rt, s, buf, sizeof buf));
        return GLLM_EBACKEND;
    }
    return 0;
}

void hsa_device_close(struct hsa_dev *x)
{
    const struct hsa_runtime *rt = x->rt;
    if (!rt)
        return;
    if (x->scratch)
        rt->hsa_amd_memory_pool_free(x->scratch);
    if (x->bounce)
        rt->hsa_amd_memory_pool_free(x->bounce);
    if (x->kernarg)
        rt->hsa_amd_memory_pool_free(x->kernarg);
    if (x->queue)
        rt->hsa_queue_destroy(x->queue);
    if (x->have_signal)
        rt->hsa_signal_destroy(x->signal);
    if (x->have_exe)
        rt->hsa_executable_destroy(x->exe);
    if (x->have_reader)
        rt->hsa_code_object_reader_destroy(x->reader);
    x->scratch = x->bounce = x->kernarg = NULL;
    x->queue = NULL;
    x->have_signal = x->have_exe = x->have_reader = false;
}

/* Waits until the signal drops below 1: 0 when it reached 0, an error when the runtime set
 * it negative (a failed copy or dispatch), when the queue faulted under a dispatch (on_queue)
 * or past x->wait_ns (a hung device). */
static int wait_done(struct hsa_dev *x, const char *what, bool on_queue)
{
    const uint64_t start = backend_now_ns();
    for (;;) {
        hsa_signal_value_t v = x->rt->hsa_signal_wait_scacquire(x->signal, HSA_SIGNAL_CONDITION_LT, 1,
                                                                 1000000, HSA_WAIT_STATE_BLOCKED);
        if (v == 0)
            return 0;
        if (on_queue && __atomic_load_n(&x->queue_fault, __ATOMIC_ACQUIRE)) {
            backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): %s failed: the queue faulted",
                         x->info.index, x->processor, what);
            return GLLM_EBACKEND;
        }
        if (v < 0) {
            backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): %s failed (signal %lld)",
                         x->info.index, x->processor, what, (long long)v);
            return GLLM_EBACKEND;
        }
        if (backend_now_ns() - start >= x->wait_ns) {
            backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): %s not done after %llu ms",
                         x->info.index, x->processor, what,
                         (unsigned long long)(x->wait_ns / 1000000));
            return GLLM_EBACKEND;
        }
    }
}

int hsa_device_alloc(struct hsa_dev *x, size_t bytes, void **out)
{
    hsa_status_t s = x->rt->hsa_amd_memory_pool_allocate(x->device_pool, bytes ? bytes : 1, 0, out);
    if (s != HSA_STATUS_SUCCESS)
        return fail(x, s, "device memory allocation");
    return 0;
}

void hsa_device_free(struct hsa_dev *x, void *p)
{
    if (p)
        x->rt->hsa_amd_memory_pool_free(p);
}

/* The GPU's address of locked host range [p, p + bytes), or NULL when it is not locked. */
static void *locked_ptr(struct hsa_dev *x, const void *p, size_t bytes)
{
    struct hsa_locked *l = x->locked;
    void *found = NULL;
    if (!l)
        return NULL;
    pthread_mutex_lock(&l->lock);
    for (int i = 0; i < l->n && !found; i++) {
        const char *h = l->r[i].host, *c = p;
        if (c >= h && (size_t)(c - h) <= l->r[i].bytes && bytes <= l->r[i].bytes - (size_t)(c - h))
            found = l->r[i].agent_ptr + (c - h);
    }
    pthread_mutex_unlock(&l->lock);
    return found;
}

static int async_copy(struct hsa_dev *x, void *dst, hsa_agent_t da, const void *src, hsa_agent_t sa,
                      size_t bytes)
{
    x->rt->hsa_signal_store_screlease(x->signal, 1);
    hsa_status_t s = x->rt->hsa_amd_memory_async_copy(dst, da, src, sa, bytes, 0, NULL, x->signal);
    if (s != HSA_STATUS_SUCCESS)
        return fail(x, s, "hsa_amd_memory_async_copy");
    return wait_done(x, "copy", false);
}

/* Copies between device memory and any host memory: locked memory directly, other memory
 * through the bounce buffer, a chunk at a time. */
int hsa_device_copy(struct hsa_dev *x, void *dst, const void *src, size_t bytes, bool to_device)
{
    if (bytes == 0)
        return 0;
    const void *host = to_device ? src : dst;
    char *agent_ptr = locked_ptr(x, host, bytes);
    if (agent_ptr)
        return to_device ? async_copy(x, dst, x->agent, agent_ptr, x->host, bytes)
                         : async_copy(x, agent_ptr, x->host, src, x->agent, bytes);
    size_t want = bytes < HSA_BOUNCE_MAX ? bytes : HSA_BOUNCE_MAX;
    if (x->bounce_bytes < want) {
        if (x->bounce)
            x->rt->hsa_amd_memory_pool_free(x->bounce);
        x->bounce = NULL, x->bounce_bytes = 0;
        hsa_status_t s = host_alloc(x, want, &x->bounce);
        if (s != HSA_STATUS_SUCCESS)
            return fail(x, s, "bounce buffer allocation");
        x->bounce_bytes = want;
    }
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < x->bounce_bytes ? bytes - done : x->bounce_bytes;
        int rc;
        if (to_device) {
            memcpy(x->bounce, (const char *)src + done, n);
            rc = async_copy(x, (char *)dst + done, x->agent, x->bounce, x->host, n);
        } else {
            rc = async_copy(x, x->bounce, x->host, (const char *)src + done, x->agent, n);
            if (rc == 0)
                memcpy((char *)dst + done, x->bounce, n);
        }
        if (rc < 0)
            return rc;
        done += n;
    }
    return 0;
}

/* ---- the portable job logic's device interface ---- */

static int op_scratch(void *dev, size_t bytes, uint64_t *base)
{
    struct hsa_dev *x = dev;
    if (x->scratch_bytes < bytes) {
        if (x->scratch)
            x->rt->hsa_amd_memory_pool_free(x->scratch);
        x->scratch = NULL, x->scratch_bytes = 0;
        size_t want = bytes + bytes / 4;     /* headroom: the next job is often a bit larger */
        hsa_status_t s = x->rt->hsa_amd_memory_pool_allocate(x->device_pool, want, 0, &x->scratch);
        if (s != HSA_STATUS_SUCCESS) {
            x->scratch = NULL;
            return fail(x, s, "scratch allocation");
        }
        x->scratch_bytes = want;
    }
    *base = (uint64_t)(uintptr_t)x->scratch;
    return 0;
}

static int op_to_device(void *dev, uint64_t dst, const void *src, size_t bytes)
{
    return hsa_device_copy(dev, (void *)(uintptr_t)dst, src, bytes, true);
}

static int op_to_host(void *dev, void *dst, uint64_t src, size_t bytes)
{
    return hsa_device_copy(dev, dst, (const void *)(uintptr_t)src, bytes, false);
}

static uint16_t dispatch_header(void)
{
    return (uint16_t)(HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE |
                      1 << HSA_PACKET_HEADER_BARRIER |
                      HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE |
                      HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
}

/* One AQL kernel dispatch packet: the body first, then header and setup in one release
 * store (the packet processor may read the slot as soon as the header is valid), then the
 * doorbell; waited for on the completion signal. */
static int op_launch(void *dev, enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx,
                     const void *params, size_t size)
{
    struct hsa_dev *x = dev;
    const struct hsa_runtime *rt = x->rt;
    const struct hsa_kernel_sym *ks = &x->k[k];
    if (size > ks->kernarg_bytes || bx == 0 || bx > 1024 || (uint64_t)gx * bx > UINT32_MAX)
        return -EINVAL;
    if (__atomic_load_n(&x->queue_fault, __ATOMIC_ACQUIRE) || !x->queue) {
        /* A faulted queue is not reused: the device gets a new one, the job goes on. */
        if (x->queue)
            rt->hsa_queue_destroy(x->queue);
        __atomic_store_n(&x->queue_fault, 0, __ATOMIC_RELEASE);
        hsa_status_t s = make_queue(x);
        if (s != HSA_STATUS_SUCCESS)
            return fail(x, s, "replacing the faulted queue");
        backend_logf(&x->log, BACKEND_LOG_WARNING, "hsa: device %d (%s): new queue after a fault",
                     x->info.index, x->processor);
    }
    memset(x->kernarg, 0, ks->kernarg_bytes);
    memcpy(x->kernarg, params, size);
    hsa_queue_t *q = x->queue;
    const uint64_t idx = rt->hsa_queue_add_write_index_scacq_screl(q, 1);
    if (idx - rt->hsa_queue_load_read_index_scacquire(q) >= q->size) {
        backend_logf(&x->log, BACKEND_LOG_ERR, "hsa: device %d (%s): queue full", x->info.index,
                     x->processor);
        return GLLM_EBACKEND;
    }
    hsa_kernel_dispatch_packet_t *p = (hsa_kernel_dispatch_packet_t *)q->base_address + (idx & (q->size - 1));
    rt->hsa_signal_store_screlease(x->signal, 1);
    p->workgroup_size_x = (uint16_t)bx;
    p->workgroup_size_y = p->workgroup_size_z = 1;
    p->reserved0 = 0;
    p->grid_size_x = gx * bx;
    p->grid_size_y = gy;
    p->grid_size_z = 1;
    p->private_segment_size = ks->private_bytes;
    p->group_segment_size = ks->group_bytes;
    p->kernel_object = ks->object;
    p->kernarg_address = x->kernarg;
    p->reserved2 = 0;
    p->completion_signal = x->signal;
    const uint32_t setup = 2u << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
    __atomic_store_n((uint32_t *)p, dispatch_header() | setup << 16, __ATOMIC_RELEASE);
    rt->hsa_signal_store_screlease(q->doorbell_signal, (hsa_signal_value_t)idx);
    return wait_done(x, pk_kernel_names[k], true);
}

static int op_finish(void *dev)
{
    (void)dev;
    return 0;      /* every copy and dispatch was waited for as it was made */
}

const struct pk_device_ops hsa_pk_ops = {
    .scratch = op_scratch,
    .to_device = op_to_device,
    .to_host = op_to_host,
    .launch = op_launch,
    .finish = op_finish,
};
