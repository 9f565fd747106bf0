/* libgllm-client: the job metrics and device memory of the last status reply. */
#include <stdio.h>

#include "client_internal.h"
#include "info.h"

/* One histogram: {le: [bounds], counts: [bounds + 1], sum, count}. More bounds than the
 * struct holds fold into the last bucket, which stays correct once the buckets are added
 * up; arrays that disagree leave the histogram with every job past its (no) bounds. */
static void histogram_from(const struct proto_histogram *w, gllm_histogram *h)
{
    *h = (gllm_histogram){.sum = w->sum, .count = w->count};
    const uint32_t nb = w->n_le;
    if (w->n_counts != nb + 1) {
        h->counts[0] = h->count;
        return;
    }
    const int keep = nb < GLLM_HISTOGRAM_BOUNDS ? (int)nb : GLLM_HISTOGRAM_BOUNDS;
    gllm_histogram t = {.nbounds = keep, .sum = h->sum, .count = h->count};
    for (uint32_t i = 0; i <= nb; i++) {
        t.counts[i < (uint32_t)keep ? i : (uint32_t)keep] += w->counts[i];
        if (i < (uint32_t)keep) {
            t.le[i] = w->le[i];
            if (i && t.le[i] <= t.le[i - 1]) {
                h->counts[0] = h->count;
                return;
            }
        }
    }
    *h = t;
}

void metrics_from(const struct proto_status *w, struct status_metrics *out)
{
    out->have = w->has_metrics;
    out->m = (gllm_metrics){.size = sizeof out->m};
    if (out->have) {
        /* An entry without its method name says nothing: left out. */
        for (uint32_t i = 0; i < w->metrics.n_jobs; i++)
            if (w->metrics.jobs[i].method[0] && out->m.nmethods < GLLM_METRICS_MAX_METHODS) {
                gllm_method_jobs *j = &out->m.jobs[out->m.nmethods++];
                snprintf(j->method, sizeof j->method, "%s", w->metrics.jobs[i].method);
                j->ok = w->metrics.jobs[i].ok;
                j->failed = w->metrics.jobs[i].failed;
            }
        histogram_from(&w->metrics.queue_seconds, &out->m.queue_seconds);
        histogram_from(&w->metrics.kernel_seconds, &out->m.kernel_seconds);
        histogram_from(&w->metrics.added_seconds, &out->m.added_seconds);
        out->m.device_resets = w->metrics.device_resets;
    }
    out->have_devices = w->has_device_memory;
    out->ndevices = (int)w->n_device_memory;
    for (uint32_t i = 0; i < w->n_device_memory; i++) {
        out->used[i] = w->device_memory[i].used;
        out->total[i] = w->device_memory[i].total;
    }
}

int gllm_status_metrics(const gllm_client *c, gllm_metrics *out)
{
    if (out_check(out) < 0)
        return -EINVAL;
    if (!c->metrics.have)
        return -ENODATA;
    out_fill(out, &c->metrics.m, sizeof c->metrics.m);
    return 0;
}

int gllm_status_device_memory(const gllm_client *c, int dev, uint64_t *used, uint64_t *total)
{
    if (!c->metrics.have_devices)
        return -ENODATA;
    if (dev < 0 || dev >= c->metrics.ndevices)
        return -EINVAL;
    if (used)
        *used = c->metrics.used[dev];
    if (total)
        *total = c->metrics.total[dev];
    return 0;
}
