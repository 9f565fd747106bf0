/* The embedded SPIR-V kernels and their compute pipelines on one device: the wave (subgroup
 * size), the workgroup and the keys staged per step set by specialization constants. */
#ifndef GLLMD_VK_PIPELINE_H
#define GLLMD_VK_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "pk_host.h"
#include "vk_device.h"

/* One embedded image (kernels/prebuilt/vulkan/NAME.spv), by enum pk_kernel. */
struct vk_spirv {
    const char *name;
    const uint32_t *words;
    size_t bytes;
};
const struct vk_spirv *vk_spirv_image(enum pk_kernel k);

/* --version's line: what is embedded. */
const char *vk_spirv_line(void);

/* Every kernel's pipeline; one layout: 8 bytes of push constants (the parameters' address).
 * A cooperative-matrix path would add its pipelines here, chosen where the device has
 * VK_KHR_cooperative_matrix; today every device runs the subgroup kernels. */
struct vk_pipes {
    VkPipelineLayout layout;
    VkPipeline p[PK_NKERNELS];
    uint32_t keys;              /* keys staged per step (shared memory) */
};

int vk_pipes_make(struct vk_dev *d, struct vk_pipes *out, char *why, size_t len);
void vk_pipes_free(struct vk_dev *d, struct vk_pipes *p);   /* accepts a zeroed one */

#endif
