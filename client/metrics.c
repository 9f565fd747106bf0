/* libgllm-client: the job metrics and device memory of the last status reply. */
#include <stdio.h>

#include "client_internal.h"

/* A msgpack number as a double; false for anything else. */
static bool number_of(const msgpack_object *o, double *out)
{
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return true;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return true;
    default: return false;
    }
}

/* One histogram: {le: [bounds], counts: [bounds + 1], sum, count}. More bounds than the
 * struct holds fold into the last bucket, which stays correct once the buckets are added
 * up; arrays that disagree leave the histogram with every job past its (no) bounds. */
static void decode_histogram(const msgpack_object *m, const char *key, gllm_histogram *h)
{
    const msgpack_object *o = m ? proto_map_get(m, key) : NULL;
    *h = (gllm_histogram){0};
    if (!o || o->type != MSGPACK_OBJECT_MAP)
        return;
    proto_get_f64(o, "sum", false, &h->sum);
    proto_get_u64(o, "count", false, &h->count);
    const msgpack_object *le = proto_map_get(o, "le"), *counts = proto_map_get(o, "counts");
    if (!le || !counts || le->type != MSGPACK_OBJECT_ARRAY ||
        counts->type != MSGPACK_OBJECT_ARRAY || counts->via.array.size != le->via.array.size + 1) {
        h->counts[0] = h->count;
        return;
    }
    const uint32_t nb = le->via.array.size;
    const int keep = nb < GLLM_HISTOGRAM_BOUNDS ? (int)nb : GLLM_HISTOGRAM_BOUNDS;
    gllm_histogram t = {.nbounds = keep, .sum = h->sum, .count = h->count};
    for (uint32_t i = 0; i <= nb; i++) {
        const msgpack_object *c = &counts->via.array.ptr[i];
        if (c->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            goto bad;
        t.counts[i < (uint32_t)keep ? i : (uint32_t)keep] += c->via.u64;
        if (i < (uint32_t)keep && (!number_of(&le->via.array.ptr[i], &t.le[i]) ||
                                   (i && t.le[i] <= t.le[i - 1])))
            goto bad;
    }
    *h = t;
    return;
bad:
    h->counts[0] = h->count;
}

static void decode_jobs(const msgpack_object *m, gllm_metrics *out)
{
    const msgpack_object *jobs = proto_map_get(m, "jobs");
    out->nmethods = 0;
    for (uint32_t i = 0; jobs && jobs->type == MSGPACK_OBJECT_ARRAY && i < jobs->via.array.size &&
                        out->nmethods < GLLM_METRICS_MAX_METHODS; i++) {
        const msgpack_object *e = &jobs->via.array.ptr[i];
        gllm_method_jobs j = {0};
        if (proto_get_str(e, "method", true, j.method, sizeof j.method) < 0 || !j.method[0])
            continue;
        proto_get_u64(e, "ok", false, &j.ok);
        proto_get_u64(e, "failed", false, &j.failed);
        out->jobs[out->nmethods++] = j;
    }
}

void metrics_decode(const msgpack_object *res, struct status_metrics *out)
{
    const msgpack_object *m = proto_map_get(res, "metrics");
    out->have = m && m->type == MSGPACK_OBJECT_MAP;
    out->m = (gllm_metrics){.size = sizeof out->m};
    if (out->have) {
        decode_jobs(m, &out->m);
        decode_histogram(m, "queue_seconds", &out->m.queue_seconds);
        decode_histogram(m, "kernel_seconds", &out->m.kernel_seconds);
        decode_histogram(m, "added_seconds", &out->m.added_seconds);
    }
    const msgpack_object *dm = proto_map_get(res, "device_memory");
    out->have_devices = dm && dm->type == MSGPACK_OBJECT_ARRAY;
    out->ndevices = 0;
    for (uint32_t i = 0; out->have_devices && i < dm->via.array.size && i < GLLM_MAX_DEVICES;
         i++) {
        uint64_t used = 0, total = 0;
        proto_get_u64(&dm->via.array.ptr[i], "used", false, &used);
        proto_get_u64(&dm->via.array.ptr[i], "total", false, &total);
        out->used[i] = used;
        out->total[i] = total;
        out->ndevices++;
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
