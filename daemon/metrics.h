/* Job metrics for Prometheus: jobs by method and result, histograms of queue time, kernel time
 * and the latency gllmd adds; kept on the loop thread, sent in status. */
#ifndef GLLMD_METRICS_H
#define GLLMD_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include <msgpack.h>

/* The wire methods that are jobs. */
enum metrics_method {
    METRICS_ATTENTION, METRICS_DTENSOR_COPY, METRICS_KV_APPEND, METRICS_DECODE, METRICS_PREFILL,
    METRICS_NMETHODS
};

/* Upper bounds of the histograms' buckets, in seconds, and one more for +Inf. */
#define METRICS_NBUCKETS 16

struct histogram {
    uint64_t counts[METRICS_NBUCKETS + 1];   /* per bucket, not cumulative; last: past all */
    double sum_s;
    uint64_t count;
};

struct metrics {
    uint64_t jobs[METRICS_NMETHODS][2];      /* [method][failed?] */
    struct histogram queue, kernel, added;
};

/* The method's index, or METRICS_ATTENTION for a name that is not a job's. */
enum metrics_method metrics_method_of(const char *name);
/* One settled job: its times in ns (kernel: as its reply's kernel_ns). */
void metrics_job(struct metrics *m, enum metrics_method method, bool ok, uint64_t queue_ns,
                 uint64_t kernel_ns, uint64_t added_ns);
/* The metrics as status's "metrics" carries them. */
struct proto_metrics;
void metrics_fill(struct proto_metrics *out, const struct metrics *m);

#endif
