/* Job metrics: counters by method and result, and fixed-bucket histograms (Prometheus
 * semantics: the client adds the counts up into cumulative buckets). */
#include <string.h>

#include "device_health.h"
#include "metrics.h"
#include "proto.h"

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
    if (kernel_ns)
        observe(&m->kernel, kernel_ns);
}

static void pack_histogram(msgpack_packer *pk, const char *name, const struct histogram *h)
{
    proto_pack_str(pk, name);
    msgpack_pack_map(pk, 4);
    proto_pack_str(pk, "le");
    msgpack_pack_array(pk, METRICS_NBUCKETS);
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        msgpack_pack_double(pk, bounds_s[i]);
    proto_pack_str(pk, "counts");
    msgpack_pack_array(pk, METRICS_NBUCKETS + 1);
    for (int i = 0; i <= METRICS_NBUCKETS; i++)
        msgpack_pack_uint64(pk, h->counts[i]);
    proto_pack_kv_f64(pk, "sum", h->sum_s);
    proto_pack_kv_u64(pk, "count", h->count);
}

void metrics_pack(msgpack_packer *pk, const struct metrics *m)
{
    msgpack_pack_map(pk, 5);
    /* Device resets after faults, every device together (a counter). */
    proto_pack_kv_u64(pk, "device_resets", health_total_resets());
    proto_pack_str(pk, "jobs");
    msgpack_pack_array(pk, METRICS_NMETHODS);
    for (int i = 0; i < METRICS_NMETHODS; i++) {
        msgpack_pack_map(pk, 3);
        proto_pack_kv_str(pk, "method", method_names[i]);
        proto_pack_kv_u64(pk, "ok", m->jobs[i][0]);
        proto_pack_kv_u64(pk, "failed", m->jobs[i][1]);
    }
    pack_histogram(pk, "queue_seconds", &m->queue);
    pack_histogram(pk, "kernel_seconds", &m->kernel);
    pack_histogram(pk, "added_seconds", &m->added);
}
