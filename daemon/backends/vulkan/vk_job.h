/* One Vulkan device serving jobs: its logical device, pipelines, memory, and the command
 * buffer the portable job logic (pk_host.c) records dispatches into through pk_device_ops:
 * copies are host copies into mapped memory, launches are dispatches recorded in order with
 * a barrier between them, finish submits them and waits on a fence until the job's deadline. */
#ifndef GLLMD_VK_JOB_H
#define GLLMD_VK_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "backend_api.h"
#include "pk_host.h"
#include "vk_memory.h"
#include "vk_pipeline.h"

/* Parameter blocks per command buffer; past it, a flush. A slot holds the kernel's
 * parameters (pk_attn_params or pk_paged_params, at most VK_VARIANT_AT bytes) and, at
 * VK_VARIANT_AT, the job's variant (kernels/vulkan/vk_common.glsl's VariantParams; its
 * VARIANT_AT is the same number). */
#define VK_PARAM_SLOTS 64
#define VK_PARAM_SLOT_BYTES 512
#define VK_VARIANT_AT 320

struct vk_variant {
    uint64_t alibi, sinks;          /* device addresses of [Hq] f32; 0: none */
    int32_t window_left, window_right;   /* -1: no edge */
    int32_t chunk;                  /* 0: none */
    float soft_cap;                 /* 0: none */
};

struct vk_gpu {
    struct vk_dev d;
    struct vk_pipes pipes;
    struct vk_memory mem;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkQueryPool ts;             /* two timestamps around a batch; VK_NULL_HANDLE: none */
    struct vk_buf scratch;      /* staged host tensors (pk_host's scratch) */
    struct vk_buf params;       /* VK_PARAM_SLOTS parameter blocks */
    int nparams;
    bool recording;
    bool in_flight;             /* submitted, its fence not yet seen signalled */
    /* The running job's: its deadline (0: none), where its kernel time goes, its why. */
    uint64_t deadline_ns;
    struct attn_timing *timing;
    char *why;
    size_t why_len;
    bool lost;                  /* the device answered VK_ERROR_DEVICE_LOST */
    struct vk_variant variant;  /* the running job's */
    struct vk_buf varbuf;       /* its host-memory slopes and sinks, copied here */
};

/* The device's job half on an open d (taken over: vk_gpu_close closes it). */
int vk_gpu_open(struct vk_gpu *g, char *why, size_t len);
void vk_gpu_close(struct vk_gpu *g);

/* Before a job: its exec (deadline, timing, why); after it, vk_gpu_end_job. */
void vk_gpu_begin_job(struct vk_gpu *g, const struct backend_exec *e);
void vk_gpu_end_job(struct vk_gpu *g);

/* The running job's variant: slopes and sinks in host memory are copied to device-visible
 * memory (on_device bits: 1 alibi, 2 sinks, already in device memory). */
int vk_gpu_set_variant(struct vk_gpu *g, const struct attn_variant *v, int64_t Hq,
                       unsigned on_device);

/* Waits up to ns for work still submitted (after a timeout): 0 once none is. */
int vk_gpu_drain(struct vk_gpu *g, uint64_t ns);

/* A host<->device copy of a device tensor (the copy entry). */
int vk_gpu_copy(struct vk_gpu *g, void *dst, const void *src, size_t bytes, bool to_device);

extern const struct pk_device_ops vk_pk_ops;

#endif
