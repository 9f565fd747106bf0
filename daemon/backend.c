/* Backend registry and selection by score: the best usable backend wins, CPU last. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "log.h"

/* In order of preference. */
static const struct backend_iface *const registry[] = {
#ifdef GLLM_HAVE_CUDA
    &cuda_backend_iface,
#endif
    &cpu_backend_iface,
};

#define NREGISTRY (sizeof registry / sizeof *registry)

const char *backend_names(void)
{
#ifdef GLLM_HAVE_CUDA
    return "cuda, cpu";
#else
    return "cpu";
#endif
}

void backend_describe(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NREGISTRY && used < len; i++)
        if (registry[i]->describe)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "; " : "",
                                     registry[i]->describe());
}

static void note(char *why, size_t len, size_t *used, const char *name, const char *reason)
{
    if (*used >= len)
        return;
    int n = snprintf(why + *used, len - *used, "%s%s: %s", *used ? "; " : "", name, reason);
    *used += n > 0 ? (size_t)n : 0;
}

int backend_select(const char *name, const struct backend_config *cfg, struct backend **out,
                   char *why, size_t len)
{
    bool any = strcmp(name, "auto") == 0;
    int scores[NREGISTRY];
    size_t used = 0;
    bool known = any;
    if (len)
        why[0] = '\0';
    for (size_t i = 0; i < NREGISTRY; i++) {
        const struct backend_iface *b = registry[i];
        scores[i] = 0;
        if (b->api_version != BACKEND_API_VERSION || (!any && strcmp(name, b->name) != 0))
            continue;
        known = true;
        char reason[200] = "";
        scores[i] = b->probe(reason, sizeof reason);
        if (scores[i] <= 0)
            note(why, len, &used, b->name, reason[0] ? reason : "not usable here");
    }
    if (!known) {
        snprintf(why, len, "no backend named '%s' (this gllmd has: %s)", name, backend_names());
        return -ENODEV;
    }
    /* Best score first; one that fails to open gives way to the next. */
    int last = -ENODEV;
    for (;;) {
        size_t best = NREGISTRY;
        for (size_t i = 0; i < NREGISTRY; i++)
            if (scores[i] > 0 && (best == NREGISTRY || scores[i] > scores[best]))
                best = i;
        if (best == NREGISTRY)
            return last;
        scores[best] = 0;
        last = registry[best]->open(cfg, out);
        if (last == 0)
            return 0;
        char reason[120];
        snprintf(reason, sizeof reason, "failed to open (%s)", gllm_strerror(last));
        note(why, len, &used, registry[best]->name, reason);
    }
}
