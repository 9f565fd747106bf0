/* dlopen of libcuda.so.1 with a typed symbol table: gllmd links no CUDA library. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"

static struct cuda_driver driver;
static char load_error[160];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    driver.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver.handle) {
        snprintf(load_error, sizeof load_error, "libcuda.so.1 not loadable (no NVIDIA driver)");
        return;
    }
#define CUDA_DRIVER_RESOLVE_(ret, name, sym, args)                                        \
    *(void **)&driver.name = dlsym(driver.handle, sym);                                  \
    if (!driver.name) {                                                                  \
        snprintf(load_error, sizeof load_error, "libcuda.so.1 lacks %s (driver too old)", sym); \
        dlclose(driver.handle);                                                          \
        driver.handle = NULL;                                                            \
        return;                                                                          \
    }
    CUDA_DRIVER_FUNCS(CUDA_DRIVER_RESOLVE_)
#undef CUDA_DRIVER_RESOLVE_
#define CUDA_DRIVER_OPTIONAL_(ret, name, sym, args) *(void **)&driver.name = dlsym(driver.handle, sym);
    CUDA_DRIVER_OPTIONAL_FUNCS(CUDA_DRIVER_OPTIONAL_)
#undef CUDA_DRIVER_OPTIONAL_
}

const struct cuda_driver *cuda_driver_load(char *why, size_t len)
{
    pthread_once(&load_once, load);
    if (!driver.handle) {
        if (len)
            snprintf(why, len, "%s", load_error);
        return NULL;
    }
    return &driver;
}

const char *cuda_error_text(const struct cuda_driver *d, CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (d) {
        d->cuGetErrorName(r, &name);
        d->cuGetErrorString(r, &text);
    }
    snprintf(buf, len, "%s: %s", name ? name : "CUDA error", text ? text : "unknown");
    return buf;
}
