/* Jobs: a validated request bound to its arenas, queued on a device worker. */
#ifndef GLLMD_JOB_H
#define GLLMD_JOB_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "clock.h"
#include "proto.h"

#define JOB_MAX_ARENAS 12   /* a paged job's eight tensors, its slopes and sinks, a wait and a signal */

enum job_kind { JOB_ATTENTION, JOB_COPY, JOB_PAGED };

struct job;
struct proto_buf;

/* What the owner of a job (whoever submitted it) is told, through the job's cookie. The
 * scheduler knows nothing else of the owner: no session, ring or server flag. */
struct job_ops {
    /* Worker thread, before the job runs: 0 to run it, or the status it fails with
     * instead (its client went away, the daemon is past its drain deadline). */
    int (*skip)(const struct job *job);
    /* Worker thread, as soon as the job has run: may answer the client from there
     * (scratch: the worker's own buffer) and set job->replied. */
    void (*finished)(struct job *job, struct proto_buf *scratch);
    /* Loop thread, at the scheduler's one settle point: answers what finished did not,
     * releases what the job holds and frees it. */
    void (*settle)(struct job *job);
};

struct job {
    struct job *next;             /* worker queue, then the finished list */
    enum job_kind kind;
    uint8_t method;               /* enum metrics_method: the wire method, for metrics */
    int dev;
    uint64_t req_id;
    const struct job_ops *ops;
    void *cookie;                 /* the owner's, for ops; the job holds a reference */
    struct arena *arenas[JOB_MAX_ARENAS]; /* each holds a reference */
    int narenas;
    union {                       /* by kind */
        struct attn_args args;    /* JOB_ATTENTION */
        struct copy_args copy;    /* JOB_COPY */
        struct paged_args paged;  /* JOB_PAGED */
    };
    int32_t *tables;              /* JOB_PAGED: the checked copy of its page table (owned) */
    /* Ordered with the client through counters in its arenas: the job runs once the counter
     * at wait reaches wait_value (the worker polls it: another client's jobs run meanwhile),
     * or fails with WAITTIMEOUT at wait_deadline; after it, the device writes sync.signal. */
    const _Atomic uint32_t *wait; /* NULL: none */
    uint32_t wait_value;
    uint64_t wait_deadline;       /* CLOCK_MONOTONIC ns */
    bool wait_mapped;             /* the device can read the wait's counter (its arena is
                                   * registered, or the backend needs no registration) */
    bool wait_on_device;          /* the counter is in shared device memory: only the
                                   * device reads it (the job always goes to a queue) */
    struct backend_sync sync;     /* the signal the backend writes; its args point here */
    /* A job that failed before reaching its lane's queue, while earlier jobs of the lane
     * were in flight there: its signal goes through the queue behind them, as a copy of
     * nothing (backend_api.h, "Queues"). */
    struct copy_args signal_op;
    struct backend_sync signal_sync;
    int status;
    int refused;                  /* a refused request's code: the job only writes its signal */
    bool replied;                 /* answered from the worker thread: settle sends nothing */
    struct attn_timing timing;    /* what the backend measured */
    uint64_t t_read, t_submit, t_start, t_end;  /* CLOCK_MONOTONIC ns; read: its packet */
    char why[160];                /* a failed job's reason from its backend, when it gave one */
};

/* What a backend can do, as job validation needs it. */
struct job_caps {
    uint32_t dtypes;
    int max_head_dim;
    const char *backend;          /* its name, for errors */
    struct proto_mode_caps modes[GLLM_MODE_COUNT];  /* by gllm_mode: what hello reports */
    uint32_t mode_dtypes[GLLM_MODE_COUNT];          /* by gllm_mode; 0: dtypes */
    uint64_t max_elements;        /* per tensor; 0 = no limit */
    uint32_t max_page_entries;    /* page-table entries, queries or new tokens of a paged job */
    bool reads_arena_tables;      /* the backend's: attention's kv_indices left in its arena */
};

/* Shared by the job_prepare_* functions: a tensor reference resolved to its region. */
struct resolved {
    const char *name;
    const struct proto_tensor *t;
    struct arena *arena;
    uint64_t first, end;          /* byte range in the region */
};
int job_resolve(struct resolved *r, const struct arena_table *arenas, uint64_t max_elements,
                char *err, size_t errlen);
bool job_overlaps(const struct resolved *a, const struct resolved *b);
bool job_injective(const struct proto_tensor *t);
void job_hold(struct job *job, const struct resolved *r, int n);

/* A job's variant, checked (proto_variant_check against caps' mode) and resolved: v for the
 * backend, r[0 .. n) the given slopes and sinks for the job to hold and check for overlaps,
 * device bit 0 (slopes) and 1 (sinks) set for those in device memory. Holds no reference. */
struct job_variant {
    struct attn_variant v;
    struct resolved r[2];
    int n;
    uint32_t device;
};
int job_variant_prepare(struct job_variant *jv, const struct proto_variant *pv, gllm_mode mode,
                        const struct job_caps *caps, const struct arena_table *arenas,
                        int64_t Hq, int64_t D, int64_t Dv, char *err, size_t errlen);
/* 0 when mode takes dtype (caps.mode_dtypes), else GLLM_EDTYPE naming what it takes. */
int job_mode_dtype_check(const struct job_caps *caps, gllm_mode mode, gllm_dtype dtype,
                         char *err, size_t errlen);
/* The scale a job runs with: the caller's, else 1/sqrt(D) of q's head dim. */
static inline float job_scale(bool has_scale, double scale, int64_t D)
{
    return has_scale ? (float)scale : (float)(1.0 / sqrt((double)D));
}

/* Resolves and checks every tensor of an attention request against the
 * session's arenas and the backend's caps, fills job->args and takes a
 * reference on each arena used. On failure writes a message into err and
 * holds no reference. */
int job_prepare_attention(struct job *job, const struct proto_attention *pa,
                          const struct arena_table *arenas, const struct job_caps *caps,
                          char *err, size_t errlen);
/* A copy of bytes between an arena and a device tensor, both bounds-checked. */
int job_prepare_copy(struct job *job, const struct arena_table *regions, uint32_t dtensor,
                     uint64_t dt_offset, uint32_t arena, uint64_t arena_offset, uint64_t bytes,
                     bool to_device, char *err, size_t errlen);
/* A paged KV cache job: resolves the tensors, copies the page table out of its arenas and
 * checks every entry of that copy (which is what the backend then reads), so a client
 * changing its arena afterwards cannot put a bad index in front of a kernel. kv_indices in
 * a device tensor is not copied: the backend checks its entries when the job runs; nor,
 * for attention on a backend that reads_arena_tables, is kv_indices in an arena. */
int job_prepare_paged(struct job *job, const struct proto_paged *pp,
                      const struct arena_table *arenas, const struct job_caps *caps,
                      char *err, size_t errlen);
/* A job runs on one device: 0 when every device tensor it holds lives on dev, else
 * GLLM_EPARAM with the first that does not in err. A kernel on one GPU reading another's
 * memory without peer access faults, and a fault ends that GPU's context for every client. */
int job_check_device(const struct job *job, int dev, char *err, size_t errlen);
/* Drops the arena references and frees what the job owns. */
void job_release_arenas(struct job *job);

#endif
