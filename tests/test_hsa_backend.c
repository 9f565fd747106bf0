/* The HSA backend against a fake runtime (a function table standing in for
 * libhsa-runtime64.so.1 and the GPU): probe reasons, agents and code-object choice, queue,
 * AQL packets, kernargs and signals, copies through locked and bounce memory, and every
 * error path, each with what it leaves behind checked. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_api.h"
#include "hsa_backend.h"
#include "hsa_runtime.h"
#include "pk_host.h"

extern const struct backend_iface hsa_backend_iface;

/* ---- the fake runtime ---- */

enum { CPU_AGENT = 1, GPU_AGENT = 10, DEVICE_POOL = 100, KERNARG_POOL = 200, KOBJ = 0x5000 };

struct fsignal {
    int64_t value;
    bool copy_in_flight;            /* the first wait sees it not done yet */
    struct fqueue *doorbell_of;     /* non-NULL: a queue's doorbell */
};

struct fqueue {
    hsa_queue_t q;                  /* first: the runtime hands out &q */
    uint64_t write, read;
    struct fsignal doorbell;
    hsa_queue_error_cb cb;
    void *cb_data;
};

/* One dispatch as the packet processor saw it. */
struct fdispatch {
    uint16_t header, setup, wg[3];
    uint32_t grid[3], group, private_;
    uint64_t object;
    int kernel;                     /* enum pk_kernel, from the object */
    unsigned char kernarg[256];
};

static struct {
    int ngpu;
    const char *isa[4];             /* each GPU's ISA name */
    int inits, shutdowns;
    int live_allocs, live_queues, live_signals, live_exes, live_readers, locks, unlocks;
    int ndispatch;
    struct fdispatch d[8];
    int copies, copies_from_locked;
    const void *locked_host;
    /* What to break. */
    bool no_cpu, fail_queue, fail_load, fail_copy, fail_alloc_device, short_kernarg;
    bool queue_fault;               /* the next dispatch faults: the runtime calls back, the
                                     * signal never completes */
    int queues_made;
    int64_t completion;             /* what a dispatch leaves in its signal: 0 done, 1 hang, -1 fault */
    void (*kernel)(const struct fdispatch *d);   /* runs "on the GPU" after a dispatch */
    void *last_scratch;
} fk;

static hsa_status_t f_init(void) { fk.inits++; return HSA_STATUS_SUCCESS; }
static hsa_status_t f_shut_down(void) { fk.shutdowns++; return HSA_STATUS_SUCCESS; }

static hsa_status_t f_status_string(hsa_status_t s, const char **text)
{
    *text = s == HSA_STATUS_ERROR_OUT_OF_RESOURCES ? "out of resources" : "fake failure";
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_iterate_agents(hsa_agent_cb cb, void *data)
{
    if (!fk.no_cpu && cb((hsa_agent_t){CPU_AGENT}, data) == HSA_STATUS_INFO_BREAK)
        return HSA_STATUS_INFO_BREAK;
    for (int i = 0; i < fk.ngpu; i++)
        if (cb((hsa_agent_t){GPU_AGENT + (uint64_t)i}, data) == HSA_STATUS_INFO_BREAK)
            return HSA_STATUS_INFO_BREAK;
    return HSA_STATUS_SUCCESS;
}

static bool is_gpu(hsa_agent_t a)
{
    return a.handle >= GPU_AGENT && a.handle < GPU_AGENT + (uint64_t)fk.ngpu;
}

static hsa_status_t f_agent_get_info(hsa_agent_t a, int attr, void *value)
{
    if (a.handle != CPU_AGENT && !is_gpu(a))
        return HSA_STATUS_ERROR_INVALID_AGENT;
    const char *isa = is_gpu(a) ? fk.isa[a.handle - GPU_AGENT] : "";
    switch (attr) {
    case HSA_AGENT_INFO_DEVICE:
        *(uint32_t *)value = is_gpu(a) ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU;
        return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_WAVEFRONT_SIZE:
        *(uint32_t *)value = strstr(isa, "gfx9") ? 64 : 32;
        return HSA_STATUS_SUCCESS;
    case HSA_AGENT_INFO_QUEUE_MAX_SIZE:
        *(uint32_t *)value = 131072;
        return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT:
        *(uint32_t *)value = 104;
        return HSA_STATUS_SUCCESS;
    case HSA_AMD_AGENT_INFO_PRODUCT_NAME:
        memset(value, 0, 64);
        strcpy(value, "Fake Instinct");
        return HSA_STATUS_SUCCESS;
    }
    return HSA_STATUS_ERROR;
}

static hsa_status_t f_iterate_isas(hsa_agent_t a, hsa_isa_cb cb, void *data)
{
    if (!is_gpu(a))
        return HSA_STATUS_SUCCESS;
    cb((hsa_isa_t){a.handle}, data);
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_isa_get_info(hsa_isa_t isa, int attr, void *value)
{
    const char *name = fk.isa[isa.handle - GPU_AGENT];
    if (attr == HSA_ISA_INFO_NAME_LENGTH)
        *(uint32_t *)value = (uint32_t)strlen(name);
    else if (attr == HSA_ISA_INFO_NAME)
        memcpy(value, name, strlen(name));      /* not terminated, as the runtime's */
    else
        return HSA_STATUS_ERROR;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_iterate_pools(hsa_agent_t a, hsa_pool_cb cb, void *data)
{
    /* Each agent has a pool that must be passed over first (fine-grained, no kernarg). */
    if (cb((hsa_amd_memory_pool_t){1}, data) == HSA_STATUS_INFO_BREAK)
        return HSA_STATUS_SUCCESS;
    cb((hsa_amd_memory_pool_t){is_gpu(a) ? DEVICE_POOL : KERNARG_POOL}, data);
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_pool_get_info(hsa_amd_memory_pool_t p, int attr, void *value)
{
    switch (attr) {
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT:
        *(uint32_t *)value = HSA_AMD_SEGMENT_GLOBAL;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
        *(uint32_t *)value = p.handle == DEVICE_POOL ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
                             : p.handle == KERNARG_POOL ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT |
                                                              HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                                                        : HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED:
        *(bool *)value = true;
        break;
    case HSA_AMD_MEMORY_POOL_INFO_SIZE:
        *(size_t *)value = (size_t)64 << 30;
        break;
    default:
        return HSA_STATUS_ERROR;
    }
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_pool_allocate(hsa_amd_memory_pool_t p, size_t bytes, uint32_t flags, void **ptr)
{
    (void)flags;
    if (p.handle != DEVICE_POOL && p.handle != KERNARG_POOL)
        return HSA_STATUS_ERROR;
    if (p.handle == DEVICE_POOL && fk.fail_alloc_device)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    /* "Device" memory is host memory here, page-aligned as the runtime's. */
    *ptr = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (*ptr)
        memset(*ptr, 0, bytes);
    fk.live_allocs++;
    if (p.handle == DEVICE_POOL)
        fk.last_scratch = *ptr;
    return *ptr ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_OUT_OF_RESOURCES;
}

static hsa_status_t f_pool_free(void *ptr)
{
    free(ptr);
    fk.live_allocs--;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_allow_access(uint32_t n, const hsa_agent_t *agents, const uint32_t *flags, const void *ptr)
{
    (void)flags, (void)ptr;
    return n == 1 && is_gpu(agents[0]) ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_AGENT;
}

static hsa_status_t f_lock(void *host, size_t bytes, hsa_agent_t *agents, int n, void **agent_ptr)
{
    (void)bytes;
    for (int i = 0; i < n; i++)
        if (!is_gpu(agents[i]))
            return HSA_STATUS_ERROR_INVALID_AGENT;
    fk.locks++;
    fk.locked_host = host;
    *agent_ptr = host;                    /* the same address, as on a host with full SVM */
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_unlock(void *host)
{
    (void)host;
    fk.unlocks++;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_async_copy(void *dst, hsa_agent_t da, const void *src, hsa_agent_t sa,
                                 size_t bytes, uint32_t ndeps, const hsa_signal_t *deps,
                                 hsa_signal_t done)
{
    (void)ndeps, (void)deps;
    if (fk.fail_copy)
        return HSA_STATUS_ERROR;
    /* One end on the GPU, the other on the host agent. */
    assert_true((is_gpu(da) && sa.handle == CPU_AGENT) || (is_gpu(sa) && da.handle == CPU_AGENT));
    fk.copies++;
    if (fk.locked_host && (src == fk.locked_host || dst == fk.locked_host))
        fk.copies_from_locked++;
    memcpy(dst, src, bytes);
    ((struct fsignal *)(uintptr_t)done.handle)->copy_in_flight = true;
    return HSA_STATUS_SUCCESS;
}

static void run_packets(struct fqueue *fq, uint64_t upto)
{
    for (; fq->read <= upto && fq->read < fq->write; fq->read++) {
        hsa_kernel_dispatch_packet_t *p =
            (hsa_kernel_dispatch_packet_t *)fq->q.base_address + (fq->read % fq->q.size);
        assert_true(fk.ndispatch < 8);
        struct fdispatch *d = &fk.d[fk.ndispatch++];
        d->header = p->header, d->setup = p->setup;
        d->wg[0] = p->workgroup_size_x, d->wg[1] = p->workgroup_size_y, d->wg[2] = p->workgroup_size_z;
        d->grid[0] = p->grid_size_x, d->grid[1] = p->grid_size_y, d->grid[2] = p->grid_size_z;
        d->group = p->group_segment_size, d->private_ = p->private_segment_size;
        d->object = p->kernel_object;
        d->kernel = (int)(p->kernel_object - KOBJ);
        memcpy(d->kernarg, p->kernarg_address, sizeof d->kernarg);
        if (fk.queue_fault) {
            fk.queue_fault = false;
            fq->cb(0x1016 /* HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION */, &fq->q, fq->cb_data);
            continue;                       /* the packet never completes */
        }
        if (fk.kernel)
            fk.kernel(d);
        p->header = HSA_PACKET_TYPE_INVALID;
        ((struct fsignal *)(uintptr_t)p->completion_signal.handle)->value = fk.completion;
    }
}

static hsa_status_t f_queue_create(hsa_agent_t a, uint32_t size, uint32_t type, hsa_queue_error_cb cb,
                                   void *data, uint32_t ps, uint32_t gs, hsa_queue_t **queue)
{
    (void)type, (void)ps, (void)gs;
    if (fk.fail_queue || !is_gpu(a) || size == 0 || (size & (size - 1)))
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    struct fqueue *fq = calloc(1, sizeof *fq);
    fq->cb = cb, fq->cb_data = data;
    fk.queues_made++;
    fq->q.size = size;
    fq->q.base_address = calloc(size, 64);
    fq->doorbell.doorbell_of = fq;
    fq->q.doorbell_signal.handle = (uint64_t)(uintptr_t)&fq->doorbell;
    for (uint32_t i = 0; i < size; i++)
        ((hsa_kernel_dispatch_packet_t *)fq->q.base_address)[i].header = HSA_PACKET_TYPE_INVALID;
    fk.live_queues++;
    *queue = &fq->q;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_queue_destroy(hsa_queue_t *q)
{
    struct fqueue *fq = (struct fqueue *)q;
    free(q->base_address);
    free(fq);
    fk.live_queues--;
    return HSA_STATUS_SUCCESS;
}

static uint64_t f_add_write_index(const hsa_queue_t *q, uint64_t n)
{
    struct fqueue *fq = (struct fqueue *)(uintptr_t)q;
    uint64_t old = fq->write;
    fq->write += n;
    return old;
}

static uint64_t f_load_read_index(const hsa_queue_t *q)
{
    return ((const struct fqueue *)q)->read;
}

static hsa_status_t f_signal_create(hsa_signal_value_t v, uint32_t n, const hsa_agent_t *c, hsa_signal_t *s)
{
    (void)n, (void)c;
    struct fsignal *fs = calloc(1, sizeof *fs);
    fs->value = v;
    s->handle = (uint64_t)(uintptr_t)fs;
    fk.live_signals++;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_signal_destroy(hsa_signal_t s)
{
    free((void *)(uintptr_t)s.handle);
    fk.live_signals--;
    return HSA_STATUS_SUCCESS;
}

static void f_signal_store(hsa_signal_t s, hsa_signal_value_t v)
{
    struct fsignal *fs = (struct fsignal *)(uintptr_t)s.handle;
    if (fs->doorbell_of)
        run_packets(fs->doorbell_of, (uint64_t)v);   /* the packet processor wakes */
    else
        fs->value = v;
}

static hsa_signal_value_t f_signal_wait(hsa_signal_t s, int cond, hsa_signal_value_t cmp, uint64_t hint, int state)
{
    (void)hint, (void)state;
    assert_int_equal(cond, HSA_SIGNAL_CONDITION_LT);
    struct fsignal *fs = (struct fsignal *)(uintptr_t)s.handle;
    if (fs->copy_in_flight) {               /* done by the next look */
        fs->copy_in_flight = false;
        hsa_signal_value_t v = fs->value;
        fs->value = 0;
        return v;
    }
    if (fs->value >= cmp) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);                  /* a timed-out wait, as the hint allows */
    }
    return fs->value;
}

static hsa_status_t f_reader_create(const void *image, size_t bytes, hsa_code_object_reader_t *r)
{
    assert_true(bytes > 64 && memcmp(image, "\x7f" "ELF", 4) == 0);
    r->handle = 1;
    fk.live_readers++;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_reader_destroy(hsa_code_object_reader_t r)
{
    (void)r;
    fk.live_readers--;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_exe_create(int profile, int rounding, const char *options, hsa_executable_t *e)
{
    (void)profile, (void)rounding, (void)options;
    e->handle = 1;
    fk.live_exes++;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_exe_load(hsa_executable_t e, hsa_agent_t a, hsa_code_object_reader_t r,
                               const char *options, hsa_loaded_code_object_t *loaded)
{
    (void)e, (void)a, (void)r, (void)options, (void)loaded;
    return fk.fail_load ? HSA_STATUS_ERROR_INVALID_CODE_OBJECT : HSA_STATUS_SUCCESS;
}

static hsa_status_t f_exe_freeze(hsa_executable_t e, const char *options)
{
    (void)e, (void)options;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_exe_destroy(hsa_executable_t e)
{
    (void)e;
    fk.live_exes--;
    return HSA_STATUS_SUCCESS;
}

static hsa_status_t f_get_symbol(hsa_executable_t e, const char *name, const hsa_agent_t *a,
                                 hsa_executable_symbol_t *s)
{
    (void)e, (void)a;
    for (int i = 0; i < PK_NKERNELS; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s.kd", pk_kernel_names[i]);
        if (strcmp(name, want) == 0) {
            s->handle = (uint64_t)i;
            return HSA_STATUS_SUCCESS;
        }
    }
    return HSA_STATUS_ERROR;
}

static hsa_status_t f_symbol_info(hsa_executable_symbol_t s, int attr, void *value)
{
    const int k = (int)s.handle;
    const uint32_t kernarg = k <= PK_ATTN_BF16 ? sizeof(struct pk_attn_params) : sizeof(struct pk_paged_params);
    switch (attr) {
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT:
        *(uint64_t *)value = KOBJ + (uint64_t)k;
        break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE:
        *(uint32_t *)value = fk.short_kernarg ? 16 : kernarg;
        break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE:
        *(uint32_t *)value = k == PK_APPEND ? 0 : 32768;
        break;
    case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE:
        *(uint32_t *)value = 0;
        break;
    default:
        return HSA_STATUS_ERROR;
    }
    return HSA_STATUS_SUCCESS;
}

static const struct hsa_runtime fake = {
    .hsa_init = f_init, .hsa_shut_down = f_shut_down, .hsa_status_string = f_status_string,
    .hsa_iterate_agents = f_iterate_agents, .hsa_agent_get_info = f_agent_get_info,
    .hsa_agent_iterate_isas = f_iterate_isas, .hsa_isa_get_info_alt = f_isa_get_info,
    .hsa_amd_agent_iterate_memory_pools = f_iterate_pools,
    .hsa_amd_memory_pool_get_info = f_pool_get_info, .hsa_amd_memory_pool_allocate = f_pool_allocate,
    .hsa_amd_memory_pool_free = f_pool_free, .hsa_amd_agents_allow_access = f_allow_access,
    .hsa_amd_memory_lock = f_lock, .hsa_amd_memory_unlock = f_unlock,
    .hsa_amd_memory_async_copy = f_async_copy, .hsa_queue_create = f_queue_create,
    .hsa_queue_destroy = f_queue_destroy, .hsa_queue_add_write_index_scacq_screl = f_add_write_index,
    .hsa_queue_load_read_index_scacquire = f_load_read_index, .hsa_signal_create = f_signal_create,
    .hsa_signal_destroy = f_signal_destroy, .hsa_signal_store_screlease = f_signal_store,
    .hsa_signal_wait_scacquire = f_signal_wait,
    .hsa_code_object_reader_create_from_memory = f_reader_create,
    .hsa_code_object_reader_destroy = f_reader_destroy, .hsa_executable_create_alt = f_exe_create,
    .hsa_executable_load_agent_code_object = f_exe_load, .hsa_executable_freeze = f_exe_freeze,
    .hsa_executable_destroy = f_exe_destroy, .hsa_executable_get_symbol_by_name = f_get_symbol,
    .hsa_executable_symbol_get_info = f_symbol_info,
};

/* The backend's log lines, for the tests that look for a reason. */
static char logged[2048];

static void log_line(void *user, int level, const char *line)
{
    (void)user, (void)level;
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof logged - used, "%s\n", line);
}

static const struct backend_config cfg = {.log = {.fn = log_line, .level = BACKEND_LOG_DEBUG}};

static int setup(void **state)
{
    (void)state;
    memset(&fk, 0, sizeof fk);
    logged[0] = '\0';
    fk.ngpu = 1;
    fk.isa[0] = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";
    hsa_runtime_override(&fake);
    hsa_backend_set_kfd_path("/dev/null");     /* stands in for /dev/kfd */
    hsa_backend_set_wait_ns(200 * 1000000ull);
    return 0;
}

/* Everything the backend made is gone, and hsa_init/hsa_shut_down are balanced. */
static void assert_released(void)
{
    assert_int_equal(fk.live_allocs, 0);
    assert_int_equal(fk.live_queues, 0);
    assert_int_equal(fk.live_signals, 0);
    assert_int_equal(fk.live_exes, 0);
    assert_int_equal(fk.live_readers, 0);
    assert_int_equal(fk.inits, fk.shutdowns);
}

static int teardown(void **state)
{
    (void)state;
    hsa_runtime_override(NULL);
    hsa_backend_set_kfd_path("/dev/kfd");
    hsa_backend_set_wait_ns(0);
    return 0;
}

static struct backend *open_ok(void)
{
    struct backend *be = NULL;
    assert_int_equal(hsa_backend_iface.open(&cfg, &be), 0);
    assert_non_null(be);
    return be;
}

/* ---- probe and open ---- */

static void test_probe_reasons(void **state)
{
    (void)state;
    char why[200] = "";
    assert_int_equal(hsa_backend_iface.probe(why, sizeof why), 50);
    assert_int_equal(fk.inits, fk.shutdowns);
    hsa_backend_set_kfd_path("/nonexistent/kfd");
    assert_int_equal(hsa_backend_iface.probe(why, sizeof why), 0);
    assert_string_equal(why, "no /nonexistent/kfd (no amdgpu kernel driver)");
    hsa_backend_set_kfd_path("/dev/null");
    fk.ngpu = 0;
    assert_int_equal(hsa_backend_iface.probe(why, sizeof why), 0);
    assert_string_equal(why, "no GPU agent (the HSA runtime sees no AMD GPU)");
    fk.ngpu = 1;
    fk.isa[0] = "amdgcn-amd-amdhsa--gfx1030";
    assert_int_equal(hsa_backend_iface.probe(why, sizeof why), 0);
    assert_string_equal(why, "no code object for gfx1030 (gllmd has: gfx90a gfx942 gfx1100 gfx1201)");
    assert_int_equal(fk.inits, fk.shutdowns);
    /* Without the fake, this machine's runtime: missing, or no /dev/kfd here (CI has no GPU). */
    hsa_runtime_override(NULL);
    hsa_backend_set_kfd_path("/nonexistent/kfd");
    assert_int_equal(hsa_backend_iface.probe(why, sizeof why), 0);
    assert_true(strstr(why, "libhsa-runtime64.so.1 not loadable") || strstr(why, "no /nonexistent/kfd"));
}

static void test_open_devices(void **state)
{
    (void)state;
    fk.ngpu = 3;
    fk.isa[0] = "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-";
    fk.isa[1] = "amdgcn-amd-amdhsa--gfx1030";               /* no object: passed over */
    fk.isa[2] = "amdgcn-amd-amdhsa--gfx1100";
    struct backend *be = open_ok();
    assert_int_equal(be->ndevices, 2);
    assert_non_null(strstr(logged, "passing over GPU agent 1: no code object for gfx1030"));
    gllm_device_info info;
    assert_int_equal(be->device->info(be, 0, &info), 0);
    assert_string_equal(info.name, "Fake Instinct (gfx942, 104 CUs)");
    assert_string_equal(info.kind, "hsa");
    assert_string_equal(info.image, "gfx942 HSACO");
    assert_int_equal(info.memory_bytes, (uint64_t)64 << 30);
    assert_int_equal(be->device->info(be, 1, &info), 0);
    assert_int_equal(info.index, 1);
    assert_string_equal(info.image, "gfx1100 HSACO");
    assert_int_equal(be->device->info(be, 2, &info), -ENODEV);
    assert_int_equal(be->caps.max_head_dim, 256);
    assert_int_equal(be->caps.features & BACKEND_FEAT_SYNC, 0);
    /* Every variant field in every mode; v's head dim below q's in dense attention only. */
    const uint32_t every = GLLM_VARIANT_WINDOW | GLLM_VARIANT_CHUNK | GLLM_VARIANT_SOFT_CAP |
                           GLLM_VARIANT_ALIBI | GLLM_VARIANT_SINKS;
    assert_int_equal(be->caps.modes[GLLM_MODE_DENSE].variants, every | GLLM_VARIANT_HEAD_DIM_V);
    assert_int_equal(be->caps.modes[GLLM_MODE_DECODE].variants, every);
    assert_int_equal(be->caps.modes[GLLM_MODE_PREFILL].variants, every);
    hsa_backend_iface.close(be);
    assert_released();
}

static void test_open_failures(void **state)
{
    (void)state;
    struct backend *be = NULL;
    /* Each failure passes the only GPU over, so open fails, leaving nothing behind. */
    bool *breaks[] = {&fk.fail_queue, &fk.fail_load, &fk.short_kernarg, &fk.no_cpu};
    char needs[48];
    snprintf(needs, sizeof needs, "gllmd needs %zu bytes", sizeof(struct pk_attn_params));
    const char *reason[] = {"creating a 1024-packet queue", "loading the gfx90a code object",
                            needs, ""};
    for (int i = 0; i < 4; i++) {
        logged[0] = '\0';
        *breaks[i] = true;
        assert_int_equal(hsa_backend_iface.open(&cfg, &be), GLLM_EBACKEND);
        if (!strstr(logged, reason[i]))
            fail_msg("case %d: log '%s' lacks '%s'", i, logged, reason[i]);
        *breaks[i] = false;
        assert_released();
    }
}

/* ---- jobs ---- */

/* The fake GPU's attention: writes 0.5 into every output element (contiguous f16) and
 * -1 into lse, so the copies back can be seen. */
static void fake_attention(const struct fdispatch *d)
{
    struct pk_attn_params p;
    memcpy(&p, d->kernarg, sizeof p);
    uint16_t *out = (uint16_t *)(uintptr_t)p.out;
    for (int64_t i = 0; i < (int64_t)p.B * p.Hq * p.Sq * p.D; i++)
        out[i] = 0x3800;                                   /* 0.5 in f16 */
    for (int64_t i = 0; p.lse && i < (int64_t)p.B * p.Hq * p.Sq; i++)
        ((float *)(uintptr_t)p.lse)[i] = -1.0f;
}

static void test_attention_packet_and_kernargs(void **state)
{
    (void)state;
    struct backend *be = open_ok();
    enum { B = 2, H = 4, HKV = 2, S = 9, D = 64 };
    static uint16_t q[B][H][S][D], k[B][HKV][S][D], v[B][HKV][S][D], out[B][H][S][D];
    static float lse[B][H][S];
    for (size_t i = 0; i < sizeof q / 2; i++)
        (&q[0][0][0][0])[i] = (uint16_t)i;
    struct attn_args a = {
        .dtype = GLLM_DTYPE_F16, .B = B, .Hq = H, .Hkv = HKV, .Sq = S, .Skv = S, .D = D,
        .q = q, .k = k, .v = v, .out = out, .lse = &lse[0][0][0], .causal = true, .scale = 0.125f,
        .q_st = {H * S * D, S * D, D, 1}, .k_st = {HKV * S * D, S * D, D, 1},
        .v_st = {HKV * S * D, S * D, D, 1}, .o_st = {H * S * D, S * D, D, 1},
        .lse_st = {H * S, S, 1},
    };
    fk.kernel = fake_attention;
    assert_int_equal(be->device->attention(be, 0, &a), 0);
    assert_int_equal(fk.ndispatch, 1);
    const struct fdispatch *d = &fk.d[0];
    /* A kernel dispatch with a barrier and system-scope fences, two dimensions. */
    assert_int_equal(d->header & 0xff, HSA_PACKET_TYPE_KERNEL_DISPATCH);
    assert_int_equal((d->header >> HSA_PACKET_HEADER_BARRIER) & 1, 1);
    assert_int_equal((d->header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3, HSA_FENCE_SCOPE_SYSTEM);
    assert_int_equal((d->header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3, HSA_FENCE_SCOPE_SYSTEM);
    assert_int_equal(d->setup, 2);
    /* gfx90a: 64-wide waves, four to a workgroup; grid sizes in work-items. */
    assert_int_equal(d->wg[0], 256);
    assert_int_equal(d->wg[1], 1);
    assert_int_equal(d->grid[0], (S + PK_ROWS - 1) / PK_ROWS * 256);
    assert_int_equal(d->grid[1], B * H);
    assert_int_equal(d->grid[2], 1);
    assert_int_equal(d->kernel, PK_ATTN_F16);
    assert_int_equal(d->group, 32768);
    /* The kernargs: the parameter struct, device addresses of the staged tensors. */
    struct pk_attn_params p;
    memcpy(&p, d->kernarg, sizeof p);
    assert_int_equal(p.B, B);
    assert_int_equal(p.Hq, H);
    assert_int_equal(p.Hkv, HKV);
    assert_int_equal(p.Sq, S);
    assert_int_equal(p.D, D);
    assert_int_equal(p.causal, 1);
    assert_true(fabsf(p.scale_log2 - 0.125f * 1.4426950408889634f) < 1e-7f);
    assert_memory_equal(p.q_st, a.q_st, sizeof p.q_st);
    assert_memory_equal(p.lse_st, a.lse_st, sizeof p.lse_st);
    assert_true(p.q != (uint64_t)(uintptr_t)q && p.q % 256 == 0);   /* staged, aligned */
    assert_memory_equal((const void *)(uintptr_t)p.q, q, sizeof q);
    assert_int_equal(p.k - p.q, sizeof q);                          /* packed, 256-aligned */
    /* The outputs came back. */
    assert_int_equal(out[1][3][8][63], 0x3800);
    assert_true(lse[1][3][8] == -1.0f);
    hsa_backend_iface.close(be);
    assert_released();
}

static void test_attention_failures(void **state)
{
    (void)state;
    struct backend *be = open_ok();
    static float q[4 * 8], kv[4 * 8], out[4 * 8];
    struct attn_args a = {
        .dtype = GLLM_DTYPE_F32, .B = 1, .Hq = 1, .Hkv = 1, .Sq = 4, .Skv = 4, .D = 8,
        .q = q, .k = kv, .v = kv, .out = out, .scale = 1,
        .q_st = {32, 32, 8, 1}, .k_st = {32, 32, 8, 1}, .v_st = {32, 32, 8, 1}, .o_st = {32, 32, 8, 1},
    };
    /* A kernel that never completes: the wait gives up after the device's limit. */
    fk.completion = 1;
    uint64_t t0 = backend_now_ns();
    assert_int_equal(be->device->attention(be, 0, &a), GLLM_EBACKEND);
    assert_true(backend_now_ns() - t0 < 5000000000ull);
    assert_non_null(strstr(logged, "gllm_pk_attn_f32 not done after 200 ms"));
    /* One that faults (the runtime leaves a negative value). */
    fk.completion = -1;
    assert_int_equal(be->device->attention(be, 0, &a), GLLM_EBACKEND);
    assert_non_null(strstr(logged, "gllm_pk_attn_f32 failed (signal -1)"));
    fk.completion = 0;
    /* A fault on the queue: the job fails at once (not at the time limit), the next job
     * runs on a new queue. */
    fk.queue_fault = true;
    t0 = backend_now_ns();
    assert_int_equal(be->device->attention(be, 0, &a), GLLM_EBACKEND);
    assert_true(backend_now_ns() - t0 < 150000000ull);
    assert_non_null(strstr(logged, "queue error: HSA status 0x1016: fake failure"));
    assert_non_null(strstr(logged, "gllm_pk_attn_f32 failed: the queue faulted"));
    assert_int_equal(fk.queues_made, 1);
    assert_int_equal(be->device->attention(be, 0, &a), 0);
    assert_int_equal(fk.queues_made, 2);
    assert_int_equal(fk.live_queues, 1);
    assert_non_null(strstr(logged, "new queue after a fault"));
    /* A copy the runtime refuses. */
    fk.fail_copy = true;
    assert_int_equal(be->device->attention(be, 0, &a), GLLM_EBACKEND);
    assert_non_null(strstr(logged, "hsa_amd_memory_async_copy failed"));
    fk.fail_copy = false;
    /* No device memory: the job says so (the scratch it has is too small for this one). */
    static float big_q[64 * 1024 * 8], big_out[64 * 1024 * 8];
    struct attn_args big = a;
    big.q = big_q, big.out = big_out, big.Sq = 64 * 1024;
    big.q_st[0] = big.o_st[0] = 64 * 1024 * 8;
    fk.fail_alloc_device = true;
    assert_int_equal(be->device->attention(be, 0, &big), GLLM_EDEVMEM);
    fk.fail_alloc_device = false;
    /* What the interface refuses before any work. */
    struct attn_args bad = a;
    bad.D = 257;
    assert_int_equal(be->device->attention(be, 0, &bad), GLLM_EHEADDIM);
    bad = a;
    bad.B = 70000;
    assert_int_equal(be->device->attention(be, 0, &bad), -E2BIG);
    struct backend_sync sync = {.signal = out};
    bad = a;
    bad.exec.sync = &sync;
    assert_int_equal(be->device->attention(be, 0, &bad), -ENOTSUP);
    assert_int_equal(be->device->attention(be, 1, &a), -ENODEV);
    /* And the device still works afterwards. */
    int before = fk.ndispatch;
    assert_int_equal(be->device->attention(be, 0, &a), 0);
    assert_int_equal(fk.ndispatch, before + 1);
    hsa_backend_iface.close(be);
    assert_released();
}

/* The fake GPU's paged attention meets a page number outside the pool. */
static void fake_bad_page(const struct fdispatch *d)
{
    struct pk_paged_params p;
    memcpy(&p, d->kernarg, sizeof p);
    *(int32_t *)(uintptr_t)p.bad = 1;
}

/* The fake GPU's append: the kernel's placement rule, for whole rows. */
static void fake_append(const struct fdispatch *d)
{
    struct pk_paged_params p;
    memcpy(&p, d->kernarg, sizeof p);
    const int32_t *qi = (const int32_t *)(uintptr_t)p.q_indptr, *ki = (const int32_t *)(uintptr_t)p.kv_indptr;
    const int32_t *idx = (const int32_t *)(uintptr_t)p.kv_indices, *len = (const int32_t *)(uintptr_t)p.kv_len;
    const size_t row = (size_t)p.Hkv * p.D * p.elem_bytes;
    for (int b = 0; b < p.B; b++)
        for (int t = qi[b]; t < qi[b + 1]; t++) {
            int pos = len[b] - (qi[b + 1] - qi[b]) + (t - qi[b]);
            size_t dst = ((size_t)idx[ki[b] + pos / p.page_size] * p.page_size + pos % p.page_size) * row;
            memcpy((char *)(uintptr_t)p.k_cache + dst, (char *)(uintptr_t)p.k_new + t * row, row);
            memcpy((char *)(uintptr_t)p.v_cache + dst, (char *)(uintptr_t)p.v_new + t * row, row);
        }
}

static void test_paged(void **state)
{
    (void)state;
    fk.isa[0] = "amdgcn-amd-amdhsa--gfx1201";              /* 32-wide waves */
    struct backend *be = open_ok();
    enum { PAGES = 4, PS = 2, HKV = 1, D = 4 };
    static float kc[PAGES * PS * HKV * D], vc[PAGES * PS * HKV * D], kn[3 * D], vn[3 * D];
    for (int i = 0; i < 3 * D; i++)
        kn[i] = (float)(i + 1), vn[i] = (float)-(i + 1);
    /* One sequence on pages 3 and 1, 3 tokens long after appending its 3 new ones. */
    const int32_t indptr[] = {0, 2}, indices[] = {3, 1}, len[] = {3}, qptr[] = {0, 3};
    struct paged_args p = {
        .op = PAGED_APPEND, .dtype = GLLM_DTYPE_F32, .B = 1, .Hq = 1, .Hkv = HKV, .D = D,
        .page_size = PS, .num_pages = PAGES, .k_cache = kc, .v_cache = vc, .k_new = kn,
        .v_new = vn, .nnew = 3, .kv_indptr = indptr, .kv_indices = indices, .kv_len = len,
        .q_indptr = qptr, .max_kv_len = 3, .max_q_len = 3,
    };
    fk.kernel = fake_append;
    assert_int_equal(be->device->paged(be, 0, &p), 0);
    const struct fdispatch *d = &fk.d[fk.ndispatch - 1];
    assert_int_equal(d->kernel, PK_APPEND);
    assert_int_equal(d->wg[0], PK_APPEND_THREADS);
    assert_int_equal(d->grid[0], PK_APPEND_THREADS);        /* 12 elements: one workgroup */
    assert_true(kc[3 * PS * D] == 1.0f && kc[3 * PS * D + D] == 5.0f);   /* page 3, slots 0, 1 */
    assert_true(vc[1 * PS * D + 3] == -12.0f);                          /* page 1, slot 0 */
    /* Attention: 32-wide waves make 128-thread workgroups; a bad page fails the job. */
    static float q[2 * 2 * D], out[2 * 2 * D];
    const int32_t aqptr[] = {0, 2};
    struct paged_args at = p;
    char why[160] = "";
    at.op = PAGED_ATTEND, at.Hq = 2, at.q = q, at.out = out, at.nq = 2, at.q_indptr = aqptr;
    at.max_q_len = 2, at.causal = true, at.scale = 0.5f;
    at.exec.why = why, at.exec.why_len = sizeof why;
    fk.kernel = fake_bad_page;
    assert_int_equal(be->device->paged(be, 0, &at), GLLM_EBOUNDS);
    assert_string_equal(why, "a page number in kv_indices is outside the pool of 4 pages");
    d = &fk.d[fk.ndispatch - 1];
    assert_int_equal(d->kernel, PK_PAGED_F32);
    assert_int_equal(d->wg[0], 128);
    assert_int_equal(d->grid[0], 128);
    assert_int_equal(d->grid[1], 2);
    struct pk_paged_params kp;
    memcpy(&kp, d->kernarg, sizeof kp);
    assert_int_equal(kp.num_pages, PAGES);
    assert_int_equal(kp.page_size, PS);
    assert_memory_equal((const void *)(uintptr_t)kp.kv_indices, indices, sizeof indices);
    /* The next job starts with the flag cleared. */
    fk.kernel = NULL;
    assert_int_equal(be->device->paged(be, 0, &at), 0);
    /* Checks before queueing. */
    at.D = 300;
    assert_int_equal(be->device->paged_check(be, &at, why, sizeof why), GLLM_EHEADDIM);
    at.D = D, at.indices_in_arena = true;
    assert_int_equal(be->device->paged_check(be, &at, why, sizeof why), GLLM_EPARAM);
    hsa_backend_iface.close(be);
    assert_released();
}

static void test_locked_arena_and_copies(void **state)
{
    (void)state;
    struct backend *be = open_ok();
    static char arena[1 << 16], back[1 << 16];
    for (size_t i = 0; i < sizeof arena; i++)
        arena[i] = (char)(i * 7);
    assert_int_equal(be->device->host_register(be, arena, sizeof arena), 0);
    assert_int_equal(fk.locks, 1);
    void *dev = NULL;
    assert_int_equal(be->device->alloc(be, 0, sizeof arena, &dev), 0);
    struct attn_timing t = {0};
    struct copy_args up = {.dst = dev, .src = arena + 100, .bytes = 1000, .to_device = true,
                           .exec = {.timing = &t}};
    assert_int_equal(be->device->copy(be, 0, &up), 0);
    assert_int_equal(t.copy_bytes, 1000);
    assert_int_equal(fk.copies_from_locked, 0);   /* from inside the range, not its start */
    up.src = arena, up.bytes = sizeof arena;
    assert_int_equal(be->device->copy(be, 0, &up), 0);
    assert_int_equal(fk.copies_from_locked, 1);   /* directly, no bounce */
    /* Unlocked memory goes through the bounce buffer, and comes back the same. */
    struct copy_args down = {.dst = back, .src = dev, .bytes = sizeof back, .to_device = false};
    int before = fk.copies;
    assert_int_equal(be->device->copy(be, 0, &down), 0);
    assert_int_equal(fk.copies, before + 1);
    assert_int_equal(fk.copies_from_locked, 1);
    assert_memory_equal(back, arena, sizeof back);
    be->device->free(be, 0, dev);
    be->device->host_unregister(be, arena);
    assert_int_equal(fk.unlocks, 1);
    fk.fail_alloc_device = true;
    assert_int_equal(be->device->alloc(be, 0, 4096, &dev), GLLM_EDEVMEM);
    hsa_backend_iface.close(be);
    assert_released();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_probe_reasons, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_packet_and_kernargs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attention_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locked_arena_and_copies, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
