/* Backend registry and selection by score: the best usable backend wins, CPU last. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

/* In order of preference; GPU backends join this list ahead of the CPU. */
static const struct backend_iface *const registry[] = {
    &cpu_backend_iface,
};

#define NREGISTRY (sizeof registry / sizeof *registry)

int backend_select(const char *name, const struct backend_config *cfg, struct backend **out,
                   char *why, size_t len)
{
    bool any = strcmp(name, "auto") == 0;
    const struct backend_iface *best = NULL;
    int best_score = 0;
    size_t used = 0;
    if (len)
        why[0] = '\0';
    for (size_t i = 0; i < NREGISTRY; i++) {
        const struct backend_iface *b = registry[i];
        if (b->api_version != BACKEND_API_VERSION || (!any && strcmp(name, b->name) != 0))
            continue;
        char reason[160] = "";
        int score = b->probe(reason, sizeof reason);
        if (score > best_score) {
            best = b;
            best_score = score;
        } else if (score <= 0 && used < len) {
            int n = snprintf(why + used, len - used, "%s%s: %s", used ? "; " : "", b->name,
                             reason[0] ? reason : "not usable");
            used += n > 0 ? (size_t)n : 0;
        }
    }
    if (!best) {
        if (used == 0 && len)
            snprintf(why, len, "no backend named '%s' (known: cpu)", name);
        return -ENODEV;
    }
    return best->open(cfg, out);
}
