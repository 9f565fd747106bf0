/* Dispatches of the portable job logic on a Vulkan device (see vk_job.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gllm/errors.h"
#include "pk_params.h"
#include "vk_job.h"

/* A slot holds either parameter block, then the variant at VK_VARIANT_AT. */
_Static_assert(sizeof(struct pk_attn_params) <= VK_VARIANT_AT &&
                   sizeof(struct pk_paged_params) <= VK_VARIANT_AT &&
                   VK_VARIANT_AT + sizeof(struct vk_variant) <= VK_PARAM_SLOT_BYTES,
               "a parameter slot holds a parameter block and the variant");

static int fail(struct vk_gpu *g, const char *what, VkResult r)
{
    if (r == VK_ERROR_DEVICE_LOST)
        g->lost = true;
    if (g->why && g->why_len)
        snprintf(g->why, g->why_len, "%s: %s", what, vk_result_name(r));
    return vk_code(r);
}

int vk_gpu_open(struct vk_gpu *g, char *why, size_t len)
{
    struct vk_dev *d = &g->d;
    const struct vk_fns *fn = d->fn;
    vk_memory_init(&g->mem);
    g->variant = (struct vk_variant){.window_left = -1, .window_right = -1};
    int rc = vk_pipes_make(d, &g->pipes, why, len);
    if (rc < 0)
        return rc;
    const VkCommandPoolCreateInfo pi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        .queueFamilyIndex = d->phys.family,
    };
    VkResult r = fn->vkCreateCommandPool(d->dev, &pi, NULL, &g->pool);
    if (r != VK_SUCCESS) {
        g->pool = VK_NULL_HANDLE;
        snprintf(why, len, "vkCreateCommandPool: %s", vk_result_name(r));
        return vk_code(r);
    }
    const VkCommandBufferAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
        .commandPool = g->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
        .commandBufferCount = 1,
    };
    const VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = fn->vkAllocateCommandBuffers(d->dev, &ai, &g->cmd)) != VK_SUCCESS ||
        (r = fn->vkCreateFence(d->dev, &fi, NULL, &g->fence)) != VK_SUCCESS) {
        snprintf(why, len, "command buffer or fence: %s", vk_result_name(r));
        return vk_code(r);
    }
    if (d->phys.timestamps) {
        const VkQueryPoolCreateInfo qi = {
            .sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
            .queryType = VK_QUERY_TYPE_TIMESTAMP,
            .queryCount = 2,
        };
        if (fn->vkCreateQueryPool(d->dev, &qi, NULL, &g->ts) != VK_SUCCESS)
            g->ts = VK_NULL_HANDLE;     /* no kernel times, nothing worse */
    }
    if ((rc = vk_buf_make(d, VK_PARAM_SLOTS * VK_PARAM_SLOT_BYTES, &g->params)) < 0) {
        snprintf(why, len, "no memory for kernel parameters");
        return rc;
    }
    return 0;
}

void vk_gpu_close(struct vk_gpu *g)
{
    struct vk_dev *d = &g->d;
    if (d->dev) {
        /* Nothing of ours may run while its memory goes; a lost device returns at once. */
        if (g->in_flight)
            vk_gpu_drain(g, 5000000000ull);
        vk_memory_destroy(&g->mem, d);
        vk_buf_free(d, &g->scratch);
        vk_buf_free(d, &g->params);
        vk_buf_free(d, &g->varbuf);
        if (g->ts)
            d->fn->vkDestroyQueryPool(d->dev, g->ts, NULL);
        if (g->fence)
            d->fn->vkDestroyFence(d->dev, g->fence, NULL);
        if (g->pool)
            d->fn->vkDestroyCommandPool(d->dev, g->pool, NULL);
        vk_pipes_free(d, &g->pipes);
    }
    vk_dev_close(d);
    memset(g, 0, sizeof *g);
}

void vk_gpu_begin_job(struct vk_gpu *g, const struct backend_exec *e)
{
    g->deadline_ns = e->deadline_ns;
    g->timing = e->timing;
    g->why = e->why;
    g->why_len = e->why_len;
}

int vk_gpu_set_variant(struct vk_gpu *g, const struct attn_variant *v, int64_t Hq,
                       unsigned on_device)
{
    struct vk_variant x = {.window_left = -1, .window_right = -1};
    if (v->window) {
        x.window_left = v->window_left < 0 ? -1 : v->window_left;
        x.window_right = v->window_right < 0 ? -1 : v->window_right;
    }
    /* Positions are below INT32_MAX: a longer chunk acts as that one. */
    x.chunk = v->chunk > INT32_MAX ? INT32_MAX : (int32_t)v->chunk;
    x.soft_cap = v->soft_cap;
    const size_t row = (size_t)Hq * sizeof(float);
    const bool host_alibi = v->alibi_slopes && !(on_device & 1);
    const bool host_sinks = v->sinks && !(on_device & 2);
    if (host_alibi || host_sinks) {
        /* No job of this device runs now (each ran to completion), so the buffer is free. */
        if (g->in_flight && vk_gpu_drain(g, 0) < 0)
            return GLLM_EJOBTIMEOUT;
        if (g->varbuf.bytes < 2 * row) {
            vk_buf_free(&g->d, &g->varbuf);
            int rc = vk_buf_make(&g->d, 2 * row, &g->varbuf);
            if (rc < 0)
                return rc;
        }
    }
    if (v->alibi_slopes) {
        if (host_alibi) {
            memcpy(g->varbuf.map, v->alibi_slopes, row);
            x.alibi = g->varbuf.addr;
        } else {
            x.alibi = (uint64_t)(uintptr_t)v->alibi_slopes;
        }
    }
    if (v->sinks) {
        if (host_sinks) {
            memcpy((char *)g->varbuf.map + row, v->sinks, row);
            x.sinks = g->varbuf.addr + row;
        } else {
            x.sinks = (uint64_t)(uintptr_t)v->sinks;
        }
    }
    g->variant = x;
    return 0;
}

void vk_gpu_end_job(struct vk_gpu *g)
{
    g->variant = (struct vk_variant){.window_left = -1, .window_right = -1};
    /* A job that failed half way leaves dispatches recorded: they are dropped, never run
     * with the next job's (begin resets the buffer). */
    if (g->recording) {
        g->d.fn->vkEndCommandBuffer(g->cmd);
        g->recording = false;
        g->nparams = 0;
    }
    g->deadline_ns = 0;
    g->timing = NULL;
    g->why = NULL;
    g->why_len = 0;
}

int vk_gpu_drain(struct vk_gpu *g, uint64_t ns)
{
    if (!g->in_flight)
        return 0;
    VkResult r = g->d.fn->vkWaitForFences(g->d.dev, 1, &g->fence, VK_TRUE, ns);
    if (r == VK_SUCCESS || r == VK_ERROR_DEVICE_LOST) {
        /* A lost device runs nothing any more: its fence is as good as signalled. */
        g->in_flight = false;
        g->d.fn->vkResetFences(g->d.dev, 1, &g->fence);
        return 0;
    }
    return GLLM_EJOBTIMEOUT;
}

/* Submits what is recorded and waits for it, up to the job's deadline. */
static int flush(struct vk_gpu *g)
{
    if (!g->recording)
        return 0;
    const struct vk_fns *fn = g->d.fn;
    /* Kernel writes made available to the host before the fence says they are done. */
    const VkMemoryBarrier host = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT,
    };
    fn->vkCmdPipelineBarrier(g->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &host, 0, NULL, 0, NULL);
    if (g->ts)
        fn->vkCmdWriteTimestamp(g->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, g->ts, 1);
    g->recording = false;
    g->nparams = 0;
    VkResult r = fn->vkEndCommandBuffer(g->cmd);
    if (r != VK_SUCCESS)
        return fail(g, "vkEndCommandBuffer", r);
    const VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
        .commandBufferCount = 1,
        .pCommandBuffers = &g->cmd,
    };
    if ((r = fn->vkQueueSubmit(g->d.queue, 1, &si, g->fence)) != VK_SUCCESS)
        return fail(g, "vkQueueSubmit", r);
    g->in_flight = true;
    uint64_t wait = UINT64_MAX;
    if (g->deadline_ns) {
        const uint64_t now = backend_now_ns();
        wait = g->deadline_ns > now ? g->deadline_ns - now : 0;
    }
    r = fn->vkWaitForFences(g->d.dev, 1, &g->fence, VK_TRUE, wait);
    if (r == VK_TIMEOUT) {
        if (g->why && g->why_len)
            snprintf(g->why, g->why_len, "Vulkan kernels still running at the job's deadline");
        return GLLM_EJOBTIMEOUT;
    }
    if (r != VK_SUCCESS)
        return fail(g, "vkWaitForFences", r);
    g->in_flight = false;
    fn->vkResetFences(g->d.dev, 1, &g->fence);
    if (g->ts && g->timing) {
        uint64_t t[2];
        if (fn->vkGetQueryPoolResults(g->d.dev, g->ts, 0, 2, sizeof t, t, sizeof t[0],
                                      VK_QUERY_RESULT_64_BIT) == VK_SUCCESS && t[1] >= t[0])
            g->timing->kernel_ns +=
                (uint64_t)((double)(t[1] - t[0]) * g->d.phys.props.limits.timestampPeriod);
    }
    return 0;
}

/* The host address of device range [addr, addr + bytes): scratch, parameters or a tensor. */
static void *host_of(struct vk_gpu *g, uint64_t addr, size_t bytes)
{
    const struct vk_buf *s = &g->scratch;
    if (s->buf && addr >= s->addr && addr - s->addr <= s->bytes && bytes <= s->bytes - (addr - s->addr))
        return (char *)s->map + (addr - s->addr);
    return vk_memory_host(&g->mem, addr, bytes);
}

static int op_scratch(void *dev, size_t bytes, uint64_t *base)
{
    struct vk_gpu *g = dev;
    int rc = flush(g);
    if (rc < 0)
        return rc;
    if (g->scratch.bytes < bytes) {
        size_t want = g->scratch.bytes ? g->scratch.bytes : (size_t)1 << 20;
        while (want < bytes)
            want = want > SIZE_MAX / 2 ? bytes : want * 2;
        vk_buf_free(&g->d, &g->scratch);
        if ((rc = vk_buf_make(&g->d, want, &g->scratch)) < 0) {
            if (g->why && g->why_len)
                snprintf(g->why, g->why_len, "no device memory for %zu bytes of staging", want);
            return rc;
        }
    }
    *base = g->scratch.addr;
    return 0;
}

static int op_to_device(void *dev, uint64_t dst, const void *src, size_t bytes)
{
    struct vk_gpu *g = dev;
    int rc = flush(g);      /* in order with the dispatches asked for before */
    if (rc < 0)
        return rc;
    void *p = host_of(g, dst, bytes);
    if (!p)
        return -EFAULT;
    memcpy(p, src, bytes);
    return 0;
}

static int op_to_host(void *dev, void *dst, uint64_t src, size_t bytes)
{
    struct vk_gpu *g = dev;
    int rc = flush(g);
    if (rc < 0)
        return rc;
    const void *p = host_of(g, src, bytes);
    if (!p)
        return -EFAULT;
    memcpy(dst, p, bytes);
    return 0;
}

static int begin(struct vk_gpu *g)
{
    const struct vk_fns *fn = g->d.fn;
    /* After a timeout the command buffer may still run: never record into it again. */
    if (g->in_flight && vk_gpu_drain(g, 0) < 0)
        return GLLM_EJOBTIMEOUT;
    const VkCommandBufferBeginInfo bi = {
        .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
    };
    VkResult r = fn->vkResetCommandBuffer(g->cmd, 0);
    if (r == VK_SUCCESS)
        r = fn->vkBeginCommandBuffer(g->cmd, &bi);
    if (r != VK_SUCCESS)
        return fail(g, "vkBeginCommandBuffer", r);
    if (g->ts) {
        fn->vkCmdResetQueryPool(g->cmd, g->ts, 0, 2);
        fn->vkCmdWriteTimestamp(g->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, g->ts, 0);
    }
    g->recording = true;
    g->nparams = 0;
    return 0;
}

static int op_launch(void *dev, enum pk_kernel k, unsigned gx, unsigned gy, unsigned bx,
                     const void *params, size_t size)
{
    struct vk_gpu *g = dev;
    const struct vk_fns *fn = g->d.fn;
    const uint32_t *lim = g->d.phys.props.limits.maxComputeWorkGroupCount;
    const unsigned want = k == PK_APPEND ? PK_APPEND_THREADS : PK_WAVES * g->d.phys.subgroup;
    if ((unsigned)k >= PK_NKERNELS || bx != want || size > VK_VARIANT_AT)
        return -EINVAL;
    /* The append kernel numbers its workgroups x + y * (groups in x): fold a long x. */
    if (k == PK_APPEND && gx > lim[0]) {
        gy = (gx + lim[0] - 1) / lim[0];
        gx = lim[0];
    }
    if (gx > lim[0] || gy > lim[1])
        return -E2BIG;
    if (g->nparams == VK_PARAM_SLOTS) {
        int rc = flush(g);
        if (rc < 0)
            return rc;
    }
    if (!g->recording) {
        int rc = begin(g);
        if (rc < 0)
            return rc;
    } else {
        /* Each dispatch sees the writes of the ones before it. */
        const VkMemoryBarrier mb = {
            .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
        };
        fn->vkCmdPipelineBarrier(g->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    }
    const size_t off = (size_t)g->nparams++ * VK_PARAM_SLOT_BYTES;
    memcpy((char *)g->params.map + off, params, size);
    memcpy((char *)g->params.map + off + VK_VARIANT_AT, &g->variant, sizeof g->variant);
    const uint64_t addr = g->params.addr + off;
    fn->vkCmdBindPipeline(g->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, g->pipes.p[k]);
    fn->vkCmdPushConstants(g->cmd, g->pipes.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 8, &addr);
    fn->vkCmdDispatch(g->cmd, gx, gy, 1);
    return 0;
}

static int op_finish(void *dev)
{
    return flush(dev);
}

const struct pk_device_ops vk_pk_ops = {
    .scratch = op_scratch,
    .to_device = op_to_device,
    .to_host = op_to_host,
    .launch = op_launch,
    .finish = op_finish,
};

int vk_gpu_copy(struct vk_gpu *g, void *dst, const void *src, size_t bytes, bool to_device)
{
    if (bytes == 0)
        return 0;
    const uint64_t addr = (uint64_t)(uintptr_t)(to_device ? dst : src);
    void *p = vk_memory_host(&g->mem, addr, bytes);
    if (!p)
        return -EFAULT;
    if (to_device)
        memcpy(p, src, bytes);
    else
        memcpy(dst, p, bytes);
    return 0;
}
