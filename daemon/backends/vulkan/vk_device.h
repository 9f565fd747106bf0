/* One Vulkan instance and the devices on it: which physical devices can run the kernels (and
 * why not), a logical device with one compute queue, and buffers with device addresses in
 * host-visible memory. */
#ifndef GLLMD_VK_DEVICE_H
#define GLLMD_VK_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vk_loader.h"

/* An instance and its function table. */
struct vk_instance {
    const struct vk_lib *lib;
    struct vk_fns fn;
    VkInstance inst;
    uint32_t api;               /* the version asked for: 1.3 where the loader has it, else 1.2 */
};

/* 0 and an instance (Vulkan 1.2 or 1.3), or a code and one line why. */
int vk_instance_open(struct vk_instance *vi, char *why, size_t len);
void vk_instance_close(struct vk_instance *vi);   /* accepts a zeroed one */

/* What a physical device offers the kernels, read before any device is made. */
struct vk_phys {
    VkPhysicalDevice pd;
    VkPhysicalDeviceProperties props;
    uint32_t family;            /* a queue family with compute */
    uint32_t subgroup;          /* subgroup size: the kernels' wave */
    bool require_size;          /* the subgroup size can be required of a pipeline (1.3) */
    uint32_t mem_type;          /* host-visible, coherent; device-local when there is one */
    uint64_t heap_bytes;        /* that type's heap */
    bool timestamps;            /* the compute family counts timestamps */
    bool software;              /* a CPU implementation (lavapipe, SwiftShader) */
};

/* true when pd can run the kernels: Vulkan 1.2, a compute queue, buffer device addresses,
 * 64-bit integers, 16-bit storage, subgroup arithmetic in compute, 16 KiB of shared memory
 * and host-visible memory; else false with one line why. */
bool vk_phys_check(const struct vk_instance *vi, VkPhysicalDevice pd, struct vk_phys *out,
                   char *why, size_t len);

/* A logical device on one physical device, its queue and what the kernels are sized by. */
struct vk_dev {
    const struct vk_fns *fn;
    struct vk_phys phys;
    VkDevice dev;
    VkQueue queue;
};

int vk_dev_open(struct vk_dev *d, const struct vk_instance *vi, const struct vk_phys *p,
                char *why, size_t len);
void vk_dev_close(struct vk_dev *d);    /* accepts a zeroed one */

/* A buffer of host-visible memory, mapped at map, at device address addr. */
struct vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map;
    uint64_t addr;
    size_t bytes;
};

/* 0 or GLLM_EDEVMEM (the driver has no memory for it) / GLLM_EBACKEND. */
int vk_buf_make(struct vk_dev *d, size_t bytes, struct vk_buf *out);
void vk_buf_free(struct vk_dev *d, struct vk_buf *b);   /* accepts a zeroed one */

/* The gllm code of a failed Vulkan call: GLLM_EDEVLOST, GLLM_EDEVMEM or GLLM_EBACKEND. */
int vk_code(VkResult r);

#endif
