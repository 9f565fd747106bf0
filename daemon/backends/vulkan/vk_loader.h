/* libvulkan.so.1 through dlopen: the loader's entry point and a table of the functions the
 * backend calls, fetched per instance. Types come from the Vulkan headers; nothing is linked. */
#ifndef GLLMD_VK_LOADER_H
#define GLLMD_VK_LOADER_H

#include <stddef.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

/* Instance-level and device-level functions, all fetched through vkGetInstanceProcAddr. */
#define VK_FNS(X)                                                                          \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)    \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                      \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)     \
    X(vkCreateDevice) X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle)           \
    X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)                  \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory)               \
    X(vkGetBufferDeviceAddress) X(vkCreateShaderModule) X(vkDestroyShaderModule)           \
    X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines)       \
    X(vkDestroyPipeline) X(vkCreateCommandPool) X(vkDestroyCommandPool)                    \
    X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)              \
    X(vkResetCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch)    \
    X(vkCmdPipelineBarrier) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence)            \
    X(vkWaitForFences) X(vkResetFences) X(vkCreateQueryPool) X(vkDestroyQueryPool)         \
    X(vkCmdResetQueryPool) X(vkCmdWriteTimestamp) X(vkGetQueryPoolResults)

struct vk_fns {
#define VK_FN_MEMBER(name) PFN_##name name;
    VK_FNS(VK_FN_MEMBER)
#undef VK_FN_MEMBER
};

/* The loader's global entries, from dlopen("libvulkan.so.1") once per process. */
struct vk_lib {
    PFN_vkGetInstanceProcAddr get_instance_proc;
    PFN_vkCreateInstance create_instance;
    PFN_vkEnumerateInstanceVersion enumerate_version;   /* NULL: a Vulkan 1.0 loader */
};

/* The loader, or NULL with a one-line reason (no libvulkan.so.1, a symbol missing). */
const struct vk_lib *vk_lib_load(char *why, size_t len);

/* Fills every entry of fns for inst; -ENOSYS naming the first the loader lacks. */
int vk_fns_load(const struct vk_lib *lib, VkInstance inst, struct vk_fns *fns, char *why,
                size_t len);

/* VK_ERROR_DEVICE_LOST and friends by name, for reasons in logs and replies. */
const char *vk_result_name(VkResult r);

#endif
