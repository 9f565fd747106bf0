/* Pieces of the public API that the daemon shares: error strings, dtypes, the default socket. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"

const char *gllm_strerror(int code)
{
    switch (code) {
#define GLLM_ERROR_TEXT_(name, num, text) case num: return text;
        GLLM_ERROR_MAP(GLLM_ERROR_TEXT_)
#undef GLLM_ERROR_TEXT_
    }
    if (code == 0)
        return "success";
    if (code < 0 && code > -4096) {
        const char *s = strerrordesc_np(-code);   /* thread-safe, unlike strerror() */
        if (s)
            return s;
    }
    return "unknown error";
}

const char *gllm_error_name(int code)
{
    switch (code) {
#define GLLM_ERROR_NAME_(name, num, text) case num: return "GLLM_E" #name;
        GLLM_ERROR_MAP(GLLM_ERROR_NAME_)
#undef GLLM_ERROR_NAME_
    }
    if (code < 0 && code > -4096) {
        const char *s = strerrorname_np(-code);
        if (s)
            return s;
    }
    return code == 0 ? "OK" : "UNKNOWN";
}

size_t gllm_dtype_size(gllm_dtype dtype)
{
    return proto_dtype_size(dtype);
}

const char *gllm_dtype_name(gllm_dtype dtype)
{
    return proto_dtype_name(dtype);
}

/* The header's numbers, so a program can compare what it was built against with what it runs. */
const char *gllm_version(void)
{
    return GLLM_VERSION_STRING;
}

int gllm_default_socket_path(char *buf, size_t len)
{
    const char *env = getenv("GLLM_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (env && env[0])
        n = snprintf(buf, len, "%s", env);
    else if (geteuid() == 0)
        n = snprintf(buf, len, "/run/gllm/gllmd.sock");
    else if (xdg && xdg[0] == '/')
        n = snprintf(buf, len, "%s/gllm/gllmd.sock", xdg);
    else
        return -ENOENT;
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return n;
}
