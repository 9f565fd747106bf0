/* dlopen of libhsa-runtime64.so.1 with a typed symbol table: gllmd links no ROCm library. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "hsa_runtime.h"

static struct hsa_runtime runtime;
static char load_error[160];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const struct hsa_runtime *_Atomic override;

static void load(void)
{
    runtime.handle = dlopen("libhsa-runtime64.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!runtime.handle) {
        snprintf(load_error, sizeof load_error, "libhsa-runtime64.so.1 not loadable (no ROCm runtime)");
        return;
    }
#define HSA_RUNTIME_RESOLVE_(ret, name, args)                                             \
    *(void **)&runtime.name = dlsym(runtime.handle, #name);                              \
    if (!runtime.name) {                                                                 \
        snprintf(load_error, sizeof load_error,                                          \
                 "libhsa-runtime64.so.1 lacks %s (runtime too old)", #name);             \
        dlclose(runtime.handle);                                                         \
        runtime.handle = NULL;                                                           \
        return;                                                                          \
    }
    HSA_RUNTIME_FUNCS(HSA_RUNTIME_RESOLVE_)
#undef HSA_RUNTIME_RESOLVE_
}

void hsa_runtime_override(const struct hsa_runtime *rt)
{
    atomic_store(&override, rt);
}

const struct hsa_runtime *hsa_runtime_load(char *why, size_t len)
{
    const struct hsa_runtime *o = atomic_load(&override);
    if (o)
        return o;
    pthread_once(&load_once, load);
    if (!runtime.handle) {
        if (len)
            snprintf(why, len, "%s", load_error);
        return NULL;
    }
    return &runtime;
}

const char *hsa_error_text(const struct hsa_runtime *rt, hsa_status_t s, char *buf, size_t len)
{
    const char *text = NULL;
    if (rt && rt->hsa_status_string(s, &text) != HSA_STATUS_SUCCESS)
        text = NULL;
    snprintf(buf, len, "HSA status 0x%x: %s", (unsigned)s, text ? text : "unknown");
    return buf;
}
