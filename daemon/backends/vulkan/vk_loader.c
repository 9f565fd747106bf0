/* libvulkan.so.1 through dlopen (see vk_loader.h). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "vk_loader.h"

static struct vk_lib lib;
static char lib_why[200];
static bool lib_ok;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void load_once(void)
{
    /* Never closed: drivers the loader pulled in keep threads and atexit handlers. */
    void *h = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lib_why, sizeof lib_why, "no libvulkan.so.1 (no Vulkan loader installed)");
        return;
    }
    lib.get_instance_proc = (PFN_vkGetInstanceProcAddr)dlsym(h, "vkGetInstanceProcAddr");
    if (!lib.get_instance_proc) {
        snprintf(lib_why, sizeof lib_why, "libvulkan.so.1 has no vkGetInstanceProcAddr");
        return;
    }
    lib.create_instance = (PFN_vkCreateInstance)lib.get_instance_proc(NULL, "vkCreateInstance");
    lib.enumerate_version =
        (PFN_vkEnumerateInstanceVersion)lib.get_instance_proc(NULL, "vkEnumerateInstanceVersion");
    if (!lib.create_instance) {
        snprintf(lib_why, sizeof lib_why, "libvulkan.so.1 gives no vkCreateInstance");
        return;
    }
    lib_ok = true;
}

const struct vk_lib *vk_lib_load(char *why, size_t len)
{
    pthread_once(&lib_once, load_once);
    if (!lib_ok && len)
        snprintf(why, len, "%s", lib_why);
    return lib_ok ? &lib : NULL;
}

int vk_fns_load(const struct vk_lib *l, VkInstance inst, struct vk_fns *fns, char *why,
                size_t len)
{
#define VK_FN_LOAD(name)                                                                   \
    fns->name = (PFN_##name)l->get_instance_proc(inst, #name);                             \
    if (!fns->name) {                                                                      \
        snprintf(why, len, "the Vulkan loader has no %s", #name);                          \
        return -ENOSYS;                                                                    \
    }
    VK_FNS(VK_FN_LOAD)
#undef VK_FN_LOAD
    return 0;
}

const char *vk_result_name(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    default: return "VkResult (other)";
    }
}
