/* Page-number checks shared by the daemon (tables in arenas) and the backends (tables in device tensors). */
#include <stdint.h>
#include <stdio.h>

#include "backend_api.h"

/* The smallest and largest of n entries (n = 0: lo > hi). Written without branches or
 * early exits so the compiler vectorizes it: a decode step of a big batch checks tens of
 * thousands. */
static void min_max(const int32_t *v, int64_t n, int32_t *lo, int32_t *hi)
{
    int32_t l = INT32_MAX, h = INT32_MIN;
    for (int64_t i = 0; i < n; i++) {
        l = v[i] < l ? v[i] : l;
        h = v[i] > h ? v[i] : h;
    }
    *lo = l, *hi = h;
}

int paged_check_pages(const int32_t *idx, int64_t n, int64_t num_pages, char *why, size_t len)
{
    int32_t lo, hi;
    min_max(idx, n, &lo, &hi);
    if (n == 0 || (lo >= 0 && hi < num_pages))
        return 0;
    for (int64_t i = 0; i < n; i++)            /* the culprit, only on failure */
        if (idx[i] < 0 || idx[i] >= num_pages) {
            snprintf(why, len, "kv_indices[%lld] is %d, outside the pool's %lld pages",
                     (long long)i, idx[i], (long long)num_pages);
            break;
        }
    return GLLM_EBOUNDS;
}
