/* Job metrics: counters by method and result, and fixed-bucket histograms (Prometheus
 * semantics: the client adds the counts up into cumulative buckets). */
#include <stdio.h>
#include <string.h>

#include "device_health.h"
#include "metrics.h"
#include "info.h"

static const char *const method_names[METRICS_NMETHODS] = {
    "attention", "dtensor_copy", "kv_append", "attention_decode", "attention_prefill",
};

/* 5 us to 5 s in steps of 1-2-5: decode steps sit in the tens of microseconds, prefills and
 * long queues in milliseconds. */
static const double bounds_s[METRICS_NBUCKETS] = {
    5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3,
    2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 1.0, 5.0,
};

enum metrics_method metrics_method_of(const char *name)
{
    for (int i = 0; i < METRICS_NMETHODS; i++)
        if (strcmp(name, method_names[i]) == 0)
            return (enum metrics_method)i;
    return METRICS_ATTENTION;
}

static void observe(struct histogram *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int b = 0;
    while (b < METRICS_NBUCKETS && s > bounds_s[b])
        b++;
    h->counts[b]++;
    h->sum_s += s;
    h->count++;
}

void metrics_job(struct metrics *m, enum metrics_method method, bool ok, uint64_t queue_ns,
                 uint64_t kernel_ns, uint64_t added_ns)
{
    m->jobs[method][ok ? 0 : 1]++;
    if (!ok)
        return;   /* a failed job's times say nothing about serving */
    observe(&m->queue, queue_ns);
    observe(&m->added, added_ns);
    observe(&m->kernel, kernel_ns);
}

static void fill_histogram(struct proto_histogram *out, const struct histogram *h)
{
    out->n_le = METRICS_NBUCKETS;
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        out->le[i] = bounds_s[i];
    out->n_counts = METRICS_NBUCKETS + 1;
    for (int i = 0; i <= METRICS_NBUCKETS; i++)
        out->counts[i] = h->counts[i];
    out->sum = h->sum_s;
    out->count = h->count;
}

_Static_assert(METRICS_NMETHODS <= GLLM_METRICS_MAX_METHODS, "status carries every method");

void metrics_fill(struct proto_metrics *out, const struct metrics *m)
{
    /* Device resets after faults, every device together (a counter). */
    out->device_resets = health_total_resets();
    out->n_jobs = METRICS_NMETHODS;
    for (int i = 0; i < METRICS_NMETHODS; i++) {
        snprintf(out->jobs[i].method, sizeof out->jobs[i].method, "%s", method_names[i]);
        out->jobs[i].ok = m->jobs[i][0];
        out->jobs[i].failed = m->jobs[i][1];
    }
    fill_histogram(&out->queue_seconds, &m->queue);
    fill_histogram(&out->kernel_seconds, &m->kernel);
    fill_histogram(&out->added_seconds, &m->added);
}
