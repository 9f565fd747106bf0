/* The Vulkan instance, the physical-device check, the logical device and its buffers (see
 * vk_device.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gllm/errors.h"
#include "vk_device.h"

/* The kernels stage two tiles of at least 8 keys x 256 f32 lanes. */
#define MIN_SHARED_BYTES 16384u

int vk_code(VkResult r)
{
    switch (r) {
    case VK_ERROR_DEVICE_LOST: return GLLM_EDEVLOST;
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_HOST_MEMORY: return GLLM_EDEVMEM;
    default: return GLLM_EBACKEND;
    }
}

int vk_instance_open(struct vk_instance *vi, char *why, size_t len)
{
    memset(vi, 0, sizeof *vi);
    vi->lib = vk_lib_load(why, len);
    if (!vi->lib)
        return -ENODEV;
    uint32_t version = VK_API_VERSION_1_0;
    if (vi->lib->enumerate_version)
        vi->lib->enumerate_version(&version);
    if (version < VK_API_VERSION_1_2) {
        snprintf(why, len, "the Vulkan loader is %u.%u (1.2 needed)", VK_API_VERSION_MAJOR(version),
                 VK_API_VERSION_MINOR(version));
        return -ENODEV;
    }
    /* A device's usable version is the lower of its own and this: 1.3 where the loader has
     * it, for subgroup size control; a 1.2 device still runs everything else. */
    vi->api = version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
    const VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "gllmd",
        .pEngineName = "gllm",
        .apiVersion = vi->api,
    };
    const VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pApplicationInfo = &app,
    };
    VkResult r = vi->lib->create_instance(&ci, NULL, &vi->inst);
    if (r != VK_SUCCESS) {
        snprintf(why, len, "vkCreateInstance: %s%s", vk_result_name(r),
                 r == VK_ERROR_INCOMPATIBLE_DRIVER ? " (no Vulkan driver installed)" : "");
        vi->inst = VK_NULL_HANDLE;
        return -ENODEV;
    }
    int rc = vk_fns_load(vi->lib, vi->inst, &vi->fn, why, len);
    if (rc < 0) {
        PFN_vkDestroyInstance destroy =
            (PFN_vkDestroyInstance)vi->lib->get_instance_proc(vi->inst, "vkDestroyInstance");
        if (destroy)
            destroy(vi->inst, NULL);
        vi->inst = VK_NULL_HANDLE;
        return rc;
    }
    return 0;
}

void vk_instance_close(struct vk_instance *vi)
{
    if (vi->inst)
        vi->fn.vkDestroyInstance(vi->inst, NULL);
    vi->inst = VK_NULL_HANDLE;
}

/* Host-visible and coherent, device-local first (integrated GPUs, resizable BAR, CPU
 * drivers); UINT32_MAX when there is none. */
static uint32_t pick_memory(const VkPhysicalDeviceMemoryProperties *m, uint64_t *heap)
{
    const VkMemoryPropertyFlags want =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < m->memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = m->memoryTypes[i].propertyFlags;
        if ((f & want) != want)
            continue;
        const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        if (best == UINT32_MAX ||
            (local && !(m->memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)))
            best = i;
    }
    if (best != UINT32_MAX)
        *heap = m->memoryHeaps[m->memoryTypes[best].heapIndex].size;
    return best;
}

bool vk_phys_check(const struct vk_instance *vi, VkPhysicalDevice pd, struct vk_phys *out,
                   char *why, size_t len)
{
    const struct vk_fns *fn = &vi->fn;
    memset(out, 0, sizeof *out);
    out->pd = pd;
    fn->vkGetPhysicalDeviceProperties(pd, &out->props);
    const char *name = out->props.deviceName;
    if (out->props.apiVersion < VK_API_VERSION_1_2) {
        snprintf(why, len, "%.60s: Vulkan %u.%u (1.2 needed)", name,
                 VK_API_VERSION_MAJOR(out->props.apiVersion),
                 VK_API_VERSION_MINOR(out->props.apiVersion));
        return false;
    }
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlProperties ctl = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    const bool v13 = out->props.apiVersion >= VK_API_VERSION_1_3 && vi->api >= VK_API_VERSION_1_3;
    if (v13)
        sub.pNext = &ctl;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
    fn->vkGetPhysicalDeviceProperties2(pd, &p2);

    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = v13 ? &f13 : NULL};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    fn->vkGetPhysicalDeviceFeatures2(pd, &f);
    const VkSubgroupFeatureFlags ops = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    const char *lack = !f12.bufferDeviceAddress ? "buffer device addresses"
                     : !f.features.shaderInt64 ? "64-bit integers in shaders"
                     : !f11.storageBuffer16BitAccess ? "16-bit storage buffer access"
                     : !(sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
                               (sub.supportedOperations & ops) != ops
                         ? "subgroup arithmetic in compute shaders"
                     : sub.subgroupSize < 4 || sub.subgroupSize > 128 ||
                               (sub.subgroupSize & (sub.subgroupSize - 1))
                         ? "a power-of-two subgroup size in 4..128"
                     : out->props.limits.maxComputeSharedMemorySize < MIN_SHARED_BYTES
                         ? "16 KiB of workgroup shared memory"
                     : out->props.limits.maxComputeWorkGroupSize[0] < 4 * sub.subgroupSize ||
                               out->props.limits.maxComputeWorkGroupInvocations < 4 * sub.subgroupSize ||
                               out->props.limits.maxComputeWorkGroupSize[0] < 256
                         ? "workgroups of four subgroups and of 256 invocations"
                         : NULL;
    if (lack) {
        snprintf(why, len, "%.60s: no %s", name, lack);
        return false;
    }
    out->subgroup = sub.subgroupSize;
    out->require_size = v13 && f13.subgroupSizeControl && f13.computeFullSubgroups &&
                        (ctl.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                        ctl.minSubgroupSize <= sub.subgroupSize &&
                        sub.subgroupSize <= ctl.maxSubgroupSize;

    uint32_t nfam = 0;
    fn->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, NULL);
    VkQueueFamilyProperties fams[32];
    if (nfam > 32)
        nfam = 32;
    fn->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, fams);
    uint32_t fam = UINT32_MAX;
    for (uint32_t i = 0; i < nfam; i++) {
        if (!(fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || fams[i].queueCount == 0)
            continue;
        /* A compute-only family first: on GPUs it does not share the graphics engine. */
        if (fam == UINT32_MAX || !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            fam = i;
    }
    if (fam == UINT32_MAX) {
        snprintf(why, len, "%.60s: no compute queue", name);
        return false;
    }
    out->family = fam;
    out->timestamps = fams[fam].timestampValidBits > 0 && out->props.limits.timestampPeriod > 0;

    VkPhysicalDeviceMemoryProperties mem;
    fn->vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    out->mem_type = pick_memory(&mem, &out->heap_bytes);
    if (out->mem_type == UINT32_MAX) {
        snprintf(why, len, "%.60s: no host-visible coherent memory", name);
        return false;
    }
    out->software = out->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    return true;
}

int vk_dev_open(struct vk_dev *d, const struct vk_instance *vi, const struct vk_phys *p,
                char *why, size_t len)
{
    memset(d, 0, sizeof *d);
    d->fn = &vi->fn;
    d->phys = *p;
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo q = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
        .queueFamilyIndex = p->family,
        .queueCount = 1,
        .pQueuePriorities = &prio,
    };
    VkPhysicalDeviceVulkan13Features f13 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
        .subgroupSizeControl = p->require_size,
        .computeFullSubgroups = p->require_size,
    };
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = p->require_size ? &f13 : NULL,
        .bufferDeviceAddress = VK_TRUE,
    };
    VkPhysicalDeviceVulkan11Features f11 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
        .pNext = &f12,
        .storageBuffer16BitAccess = VK_TRUE,
    };
    const VkPhysicalDeviceFeatures2 f = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
        .pNext = &f11,
        .features = {.shaderInt64 = VK_TRUE},
    };
    const VkDeviceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
        .pNext = &f,
        .queueCreateInfoCount = 1,
        .pQueueCreateInfos = &q,
    };
    VkResult r = d->fn->vkCreateDevice(p->pd, &ci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        snprintf(why, len, "vkCreateDevice: %s", vk_result_name(r));
        d->dev = VK_NULL_HANDLE;
        return vk_code(r);
    }
    d->fn->vkGetDeviceQueue(d->dev, p->family, 0, &d->queue);
    return 0;
}

void vk_dev_close(struct vk_dev *d)
{
    if (d->dev)
        d->fn->vkDestroyDevice(d->dev, NULL);
    d->dev = VK_NULL_HANDLE;
}

int vk_buf_make(struct vk_dev *d, size_t bytes, struct vk_buf *out)
{
    const struct vk_fns *fn = d->fn;
    struct vk_buf b = {.bytes = bytes};
    const VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = bytes ? bytes : 4,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = fn->vkCreateBuffer(d->dev, &bi, NULL, &b.buf);
    if (r != VK_SUCCESS)
        return vk_code(r);
    VkMemoryRequirements req;
    fn->vkGetBufferMemoryRequirements(d->dev, b.buf, &req);
    if (!(req.memoryTypeBits & (1u << d->phys.mem_type))) {
        fn->vkDestroyBuffer(d->dev, b.buf, NULL);
        return GLLM_EBACKEND;
    }
    const VkMemoryAllocateFlagsInfo flags = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
        .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT,
    };
    const VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
        .pNext = &flags,
        .allocationSize = req.size,
        .memoryTypeIndex = d->phys.mem_type,
    };
    if ((r = fn->vkAllocateMemory(d->dev, &ai, NULL, &b.mem)) != VK_SUCCESS ||
        (r = fn->vkBindBufferMemory(d->dev, b.buf, b.mem, 0)) != VK_SUCCESS ||
        (r = fn->vkMapMemory(d->dev, b.mem, 0, VK_WHOLE_SIZE, 0, &b.map)) != VK_SUCCESS) {
        vk_buf_free(d, &b);
        return vk_code(r);
    }
    const VkBufferDeviceAddressInfo addr = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
        .buffer = b.buf,
    };
    b.addr = fn->vkGetBufferDeviceAddress(d->dev, &addr);
    if (b.addr == 0) {
        vk_buf_free(d, &b);
        return GLLM_EBACKEND;
    }
    *out = b;
    return 0;
}

void vk_buf_free(struct vk_dev *d, struct vk_buf *b)
{
    if (b->buf)
        d->fn->vkDestroyBuffer(d->dev, b->buf, NULL);
    if (b->mem)     /* freeing the memory unmaps it */
        d->fn->vkFreeMemory(d->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}
