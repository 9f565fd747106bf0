/* The interface every compute backend (cpu, cuda, hsa) implements and the daemon calls: the
 * only daemon-side header a backend sees. */
#ifndef GLLM_BACKEND_API_H
#define GLLM_BACKEND_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "gllm/errors.h"
#include "gllm/gllm.h"

/* Bumped when a vtable or an argument struct changes; the registry passes over a backend
 * built against another version. */
#define BACKEND_API_VERSION 8   /* 8: declare, per-mode dtypes */

/* ---- Logging: the daemon's logger, handed in through backend_config ---- */

/* Levels are syslog priorities, so the daemon passes them through unchanged. */
enum backend_log_level {
    BACKEND_LOG_ERR = 3,
    BACKEND_LOG_WARNING = 4,
    BACKEND_LOG_INFO = 6,
    BACKEND_LOG_DEBUG = 7,
};

/* fn gets one formatted line (no newline); lines above level are not formatted at all.
 * fn NULL: the backend stays silent. */
struct backend_log {
    void (*fn)(void *user, int level, const char *line);
    void *user;
    int level;
};

/* Formats and hands one line to log's hook (backend_log.c). */
void backend_logf(const struct backend_log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CLOCK_MONOTONIC in ns: deadlines of GPU-side waits (backends cannot see the daemon's). */
static inline uint64_t backend_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- Jobs: validated by the daemon, in elements and raw pointers ---- */

struct backend_queue;           /* a backend's own (see Queues below) */

/* Work ordered on the device with a client, through 32-bit counters in memory shared with
 * it (share_alloc or share_import): before the job's first operation the device waits until
 * the counter at wait reaches wait_value, (int32_t)(*wait - wait_value) >= 0 so counters
 * may wrap; after its last it writes signal_value at signal. A wait not satisfied within
 * wait_timeout_ns is released by the backend (it writes wait_value itself) and the job
 * fails with GLLM_EWAITTIMEOUT, its outputs undefined. A job that fails still signals, so
 * the client's stream never waits for ever. NULL pointers: no wait, no signal. The wait's
 * counter is in host memory (an arena, registered with host_register on backends that
 * register), so a backend may also read it from the host, unless wait_device says it is in
 * shared device memory (a device polls that faster: 4.7 against 6.3 us for a round trip of
 * two flags between streams on an H100). */
struct backend_sync {
    const void *wait;
    uint32_t wait_value;
    void *signal;
    uint32_t signal_value;
    bool signal_host;           /* signal is in host memory registered with host_register */
    uint64_t wait_timeout_ns;
    bool wait_device;           /* wait is in shared device memory (share_alloc or
                                 * share_import): read it on the device only. Queued
                                 * operations only. */
};

/* What a backend may report about one job (zeros: not measured). */
struct attn_timing {
    uint64_t kernel_ns;         /* device time of the kernel alone */
    uint64_t copy_ns;           /* device time of host<->device copies */
    uint64_t copy_bytes;
};

/* How an operation runs, whatever it computes: ordered, timed, bounded and explained. Every
 * operation's args (attn_args, copy_args, paged_args) carry one. */
struct backend_exec {
    struct attn_timing *timing; /* out, optional */
    const struct backend_sync *sync;   /* optional */
    uint64_t deadline_ns;       /* the watchdog's (see Faults below); 0: none */
    char *why;                  /* out, optional: a failed job's reason, one line */
    size_t why_len;
    struct backend_queue *queue;       /* optional: submit to it (see Queues below) */
};

/* An attention variant (gllm.h's gllm_attention_variant, validated): zeroed, it is plain
 * attention. A backend computes the fields its caps.modes list and is
 * never handed one it does not (the daemon refuses such a job first). Positions are
 * bottom-right aligned: dense row r is at i = r + Skv - Sq, a paged query at its token's
 * place in its sequence. Query i sees key j when causal allows it (j <= i), with window when
 * i - window_left <= j (window_left >= 0) and j <= i + window_right (window_right >= 0), and
 * when floor(i / chunk) == floor(j / chunk) (chunk > 0). A visible key's score is s = scale
 * q.k, then soft_cap tanh(s / soft_cap) (soft_cap > 0), then s + alibi_slopes[h] (j - i); a
 * virtual key of logit sinks[h] and value zero joins the softmax. A row that sees no key is
 * zeros, lse -inf (sinks[h] with sinks); lse is log of the softmax's whole denominator. */
struct attn_variant {
    bool window;                        /* false: window_left and window_right are not read */
    int32_t window_left, window_right;  /* -1: no edge on that side */
    uint32_t chunk;                     /* 0: none */
    float soft_cap;                     /* 0: none */
    const float *alibi_slopes;          /* [Hq] f32, or NULL */
    const float *sinks;                 /* [Hq] f32, or NULL */
};

/* v's window edges as the kernels read them: -1 for no edge, and for both with the window
 * off (window_left and window_right are then not read). */
static inline int32_t attn_window_left(const struct attn_variant *v)
{
    return v->window ? v->window_left : -1;
}

static inline int32_t attn_window_right(const struct attn_variant *v)
{
    return v->window ? v->window_right : -1;
}

/* Whether v asks for anything beyond plain (causal or full) attention. */
static inline bool attn_variant_none(const struct attn_variant *v)
{
    return (!v->window || (v->window_left < 0 && v->window_right < 0)) && v->chunk == 0 &&
           v->soft_cap == 0.0f && !v->alibi_slopes && !v->sinks;
}

/* A validated attention job: a backend never sees sessions, arenas or the wire. Strides are
 * in elements and index [b, h, s, d] (q, k, v, out) or [b, h, s] (lse). D is q's and k's
 * head dim, Dv v's and out's (0: D; another value only where the mode's caps have
 * GLLM_VARIANT_HEAD_DIM_V). */
struct attn_args {
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, Sq, Skv, D, Dv;
    const void *q, *k, *v;
    void *out;
    float *lse;                 /* NULL: not wanted */
    int64_t q_st[4], k_st[4], v_st[4], o_st[4], lse_st[3];
    bool causal;                /* bottom-right aligned: row i sees keys j <= i + Skv - Sq */
    float scale;
    struct attn_variant variant;
    uint32_t repeat;            /* runs of the kernel back to back (benchmarks; 0 or 1:
                                 * one, attn_runs); kernel_ns is one run's mean */
    uint32_t device_mask;       /* bit i: tensor i (q, k, v, out, lse, alibi_slopes, sinks)
                                 * is in device memory */
    struct backend_exec exec;
};

/* v's and out's head dim. */
static inline int64_t attn_dv(const struct attn_args *a)
{
    return a->Dv ? a->Dv : a->D;
}

/* How many times a backend runs an attention job's kernel (attn_args.repeat). */
static inline uint32_t attn_runs(const struct attn_args *a)
{
    return a->repeat > 1 ? a->repeat : 1;
}

/* A copy between host memory (an arena) and device memory (a device tensor). */
struct copy_args {
    void *dst;
    const void *src;
    size_t bytes;
    bool to_device;             /* host -> device, else device -> host */
    struct backend_exec exec;   /* its timing: copy_ns, copy_bytes */
};

/* A validated paged-KV job. The page table arrays are the daemon's own checked copies in
 * host memory (every length consistent, every index in range), except kv_indices when
 * indices_on_device: then it points into a device tensor of at least kv_indptr[B] entries,
 * read when the job runs, and the backend checks each page number before it reads through
 * it (paged_check_pages on host memory; in the kernel on a GPU); or when indices_in_arena
 * (only for a backend with BACKEND_FEAT_ARENA_TABLES): then it points into the client's
 * arena, which the client may still be writing, unchecked, and the backend reads each page
 * number once (in place when indices_pinned allows, or from one copy) and checks the value
 * it uses. Tensors are row-major:
 * caches [num_pages, page_size, Hkv, D] (v_cache: Dv), q [nq, Hq, D], out [nq, Hq, Dv],
 * k_new [nnew, Hkv, D], v_new [nnew, Hkv, Dv]; Dv 0 is D. */
enum paged_op { PAGED_APPEND, PAGED_ATTEND };
enum paged_tensor { PG_KCACHE, PG_VCACHE, PG_Q, PG_OUT, PG_KNEW, PG_VNEW, PG_ALIBI, PG_SINKS,
                    PG_COUNT };
struct paged_args {
    enum paged_op op;
    gllm_dtype dtype;
    int64_t B, Hq, Hkv, D, Dv, page_size, num_pages;
    void *k_cache, *v_cache;
    const void *q;              /* attend */
    void *out;
    int64_t nq;
    const void *k_new, *v_new;  /* append */
    int64_t nnew;
    const int32_t *kv_indptr;   /* [B + 1] */
    const int32_t *kv_indices;  /* [kv_indptr[B]] */
    const int32_t *kv_len;      /* [B] tokens in each sequence, derived */
    const int32_t *q_indptr;    /* [B + 1] attend: the queries of each sequence (its last
                                 * tokens); append: the new tokens of each sequence */
    int32_t max_kv_len, max_q_len;
    float scale;
    bool causal;                /* attend: always true (decode sees the whole sequence) */
    struct attn_variant variant;    /* attend */
    uint32_t device_mask;       /* bit (1 << enum paged_tensor): in device memory */
    bool indices_on_device;     /* attend only; see above */
    bool indices_in_arena;      /* attend only; see above */
    bool indices_pinned;        /* with indices_in_arena: its arena is registered (host_register) */
    struct backend_exec exec;
};

/* ---- Queues (BACKEND_FEAT_QUEUES): one client's work on a device, not waited for ----
 *
 * Jobs ordered with a client through counters (backend_sync) would hold a device's only
 * stream while their wait is unmet, so the daemon gives each client its own queue on each
 * device (a stream on a GPU). An operation whose args name a queue is submitted, not run:
 * the backend puts its wait, its work and its signal on the queue behind the queue's earlier
 * operations and returns BACKEND_PENDING at once, or a final status when it failed before
 * anything was queued. The device starts the work when the counter arrives, with no host in
 * the loop. The daemon then calls queue_poll for the queue's oldest operation: it returns
 * BACKEND_PENDING while that one is not done, else its status and timing and why, as the
 * running entry would have, and forgets it. Deadlines count from the time the operation's
 * wait was seen met: past wait_timeout_ns from its submission with the wait unmet, the
 * backend releases it (it writes the awaited value) and the operation fails with
 * GLLM_EWAITTIMEOUT; past (deadline_ns - its submission) from then, GLLM_EJOBTIMEOUT. A poll
 * with cancel set (the job's client is gone) releases an unmet wait at once instead. The
 * args (and what they point to) stay valid until queue_poll has returned the operation's
 * status. A copy of zero bytes is a valid operation: its wait and signal alone, in order. At
 * most BACKEND_QUEUE_DEPTH operations of a queue are in flight. A reset discards every
 * operation in flight on the device's queues (the daemon fails their jobs itself); the
 * queues stay usable. */
#define BACKEND_PENDING 1
#define BACKEND_QUEUE_DEPTH 8

/* ---- Faults (docs/hardening.md, "Faults and resets") ----
 *
 * An operation ends in one of three ways besides success. A job-local error (arguments
 * refused before launch, no device memory for this job's scratch: GLLM_EDEVMEM) fails that
 * job alone. A context-fatal error (the device's context is poisoned: an illegal address,
 * a trap, an uncorrectable ECC error) returns GLLM_EDEVLOST with the driver's words in why.
 * A job still running at its deadline_ns (CLOCK_MONOTONIC, backend_now_ns) returns
 * GLLM_EJOBTIMEOUT once the backend has stopped waiting for it. After either of the last
 * two the daemon calls the device's reset entry before anything else runs on the device; a
 * backend without one (CUDA: a sticky error is the process's until it exits) has the daemon
 * fail the device's jobs and exit for a new process to serve. */

/* What inject_fault simulates (fault-injection builds only). */
enum backend_fault {
    BACKEND_FAULT_NONE = 0,
    BACKEND_FAULT_TRAP,         /* a kernel that traps */
    BACKEND_FAULT_OOB,          /* a kernel that reads an unmapped device address */
    BACKEND_FAULT_SPIN,         /* work that never ends: only the watchdog stops it */
    BACKEND_FAULT_STICKY,       /* a context-fatal fault that no reset in this process undoes,
                                 * as every one is on CUDA (the CPU backend's reset then fails) */
};

/* ---- Page numbers (paged_pages.c): shared by the daemon and the backends ---- */

/* 0 when each of the n page numbers is in [0, num_pages); else GLLM_EBOUNDS, naming the
 * first one that is not in why. */
int paged_check_pages(const int32_t *idx, int64_t n, int64_t num_pages, char *why, size_t len);

/* Row of the pools (page * page_size + slot) that holds token pos of sequence b. */
static inline int64_t paged_row(const struct paged_args *p, int64_t b, int64_t pos)
{
    return (int64_t)p->kv_indices[p->kv_indptr[b] + pos / p->page_size] * p->page_size +
           pos % p->page_size;
}

/* ---- The backend, its devices, its capabilities ---- */

struct backend_config {
    int threads;                /* CPU worker threads; 0 = one per online CPU */
    bool deterministic;         /* results may not depend on the order GPU blocks finish in */
    struct backend_log log;     /* the daemon's logger; zero: silent */
    /* A device process's backend (daemon/devproc.c) opens one device: the one numbered
     * device among those present (the driver's order), as device 0. false: every device. */
    bool one_device;
    int device;
};

/* Attention's kv_indices may stay in its arena (indices_in_arena): the backend checks every
 * page number where it uses it anyway (the CUDA kernel does), so the daemon need not copy
 * and check the table first. */
#define BACKEND_FEAT_ARENA_TABLES (1u << 0)
/* Jobs honour backend_sync (waits and signals in shared memory, ordered on the device). */
#define BACKEND_FEAT_SYNC (1u << 1)
/* Operations may be submitted to queues (see Queues): queue_open, queue_close, queue_poll. */
#define BACKEND_FEAT_QUEUES (1u << 2)

/* How memory shared with another process is handed over (docs/shared-memory.md): the kind
 * of fd share_alloc returns and share_import takes. */
enum backend_share_kind {
    BACKEND_SHARE_NONE = 0,     /* the backend shares no memory */
    BACKEND_SHARE_MEMFD,        /* a sealed memfd, mapped with mmap (the CPU backend) */
    BACKEND_SHARE_CUDA_VMM,     /* a cuMemCreate allocation exported as a POSIX fd */
};

/* Memory mapped both in gllmd and in a client: made here and exported, or a client's export
 * imported. Jobs use ptr as they use alloc's pointers. */
struct backend_shared {
    void *ptr;
    size_t bytes;               /* mapped bytes, a multiple of the share granularity */
    uint64_t handle;            /* the backend's own (CUDA: the allocation's handle) */
};

/* What one mode (gllm_mode: dense, paged decode, chunked prefill) computes: hello reports
 * its variants and head dims, job validation refuses what it lacks. A mode left zeroed by
 * the backend is plain attention in the backend's dtypes with head dims 1..max_head_dim
 * (backend.c fills it in). */
struct backend_mode_caps {
    uint32_t dtypes;            /* bit (1 << gllm_dtype) each; 0: the backend's dtypes */
    uint32_t variants;          /* GLLM_VARIANT_* */
    int max_head_dim;           /* q's head dim 1..max_head_dim, or one of head_dims */
    int nhead_dims;             /* > 0: only head_dims[0 .. nhead_dims) */
    int head_dims[GLLM_MAX_MODE_HEAD_DIMS];
};

/* What a backend can do, as data: filled by open, read by the daemon's job validation.
 * (Per-tensor element bounds are the daemon's limits today: no backend has its own.) */
struct backend_caps {
    uint32_t dtypes;            /* bit (1 << gllm_dtype) each, dense attention and copies */
    int max_head_dim;           /* dense attention takes head dims 1..max_head_dim */
    struct backend_mode_caps modes[GLLM_MODE_COUNT];
    uint32_t features;          /* BACKEND_FEAT_* */
    enum backend_share_kind share_kind;
    size_t share_granularity;   /* shared sizes are multiples of it; 0 with SHARE_NONE */
};

struct backend;

/* Per-device entries; dev is in [0, backend.ndevices). Entries marked optional may be NULL
 * (the daemon's wrappers, daemon/backend.c, say what that means). The memory entries, info
 * to share_free, are called from any thread, several at once (the loop and libuv's thread
 * pool: daemon/pool_call.c); the operations and what follows them say their thread. */
struct backend_device_iface {
    int (*info)(struct backend *be, int dev, gllm_device_info *out);
    /* Optional: device memory in use and in all (GPUs), for status lines. */
    int (*memory)(struct backend *be, int dev, uint64_t *used, uint64_t *total);
    /* Optional: host memory jobs will name (an arena: fd, a sealed memfd of len bytes, mapped
     * at p), before host_register; host_unmap after host_unregister, when it goes. Only a
     * backend that runs in another process (daemon/devproc.c) needs the fd: it maps fd there
     * too and takes pointers into [p, p + len) as pointers into its own mapping. */
    int (*host_map)(struct backend *be, void *p, size_t len, int fd);
    void (*host_unmap)(struct backend *be, void *p);
    /* Optional: make host memory fast to copy from/to (pinning on GPUs), for every device. */
    int (*host_register)(struct backend *be, void *p, size_t len);
    void (*host_unregister)(struct backend *be, void *p);
    /* Optional: device memory for device tensors (host memory on the CPU backend). The
     * pointer is opaque to the daemon: only the backend dereferences it. */
    int (*alloc)(struct backend *be, int dev, size_t bytes, void **out);
    void (*free)(struct backend *be, int dev, void *p);
    /* The operations run on the device's worker thread only, to completion: they may block. */
    int (*copy)(struct backend *be, int dev, const struct copy_args *c);
    int (*attention)(struct backend *be, int dev, const struct attn_args *a);
    /* Optional, both or neither: paged KV cache jobs. paged_check (optional even with paged)
     * runs on the event loop before a job is queued: 0 when this backend can run it, else a
     * code and a one-line reason. */
    int (*paged_check)(struct backend *be, const struct paged_args *p, char *why, size_t len);
    int (*paged)(struct backend *be, int dev, const struct paged_args *p);
    /* Optional, all three or none (caps.share_kind says which kind): memory shared with
     * another process. share_alloc makes bytes (a multiple of the granularity) on dev and an
     * O_CLOEXEC fd another process maps it with; the caller sends the fd and closes it, the
     * mapping here stays. share_import maps a client's fd (not consumed) of exactly bytes
     * on dev, and refuses, with a specific code and a one-line why, anything that is not an
     * export of this kind of memory on dev. share_free unmaps either; what an importer
     * mapped stays alive until it is freed, whatever the exporter does meanwhile. */
    int (*share_alloc)(struct backend *be, int dev, size_t bytes, struct backend_shared *out,
                       int *fd);
    int (*share_import)(struct backend *be, int dev, int fd, size_t bytes,
                        struct backend_shared *out, char *why, size_t len);
    void (*share_free)(struct backend *be, int dev, const struct backend_shared *s);
    /* Optional, on dev's worker thread, after an operation returned GLLM_EDEVLOST or
     * GLLM_EJOBTIMEOUT: discards dev's context with everything in it (work still running
     * included) and makes the device serve again: a new context, the kernels loaded again,
     * new streams, events, graphs and scratch. Every pointer alloc, share_alloc and
     * share_import gave on dev before is released by the reset itself: the daemon passes
     * none of them to free or share_free afterwards (the same address may be handed out
     * again). The daemon calls no other entry for dev while reset runs. 0 when dev serves
     * again, else a code and a one-line why; NULL: the device cannot be brought back in this
     * process (the daemon exits, or with exit_on_reset_failure off the device stays failed). */
    int (*reset)(struct backend *be, int dev, char *why, size_t len);
    /* Optional, with reset, on dev's worker thread just before it: the milliseconds a reset
     * of dev may take beyond the daemon's own bound on one, for work that grows with what
     * clients hold (the arenas a device process maps and pins again); NULL: none. */
    uint32_t (*reset_allowance_ms)(struct backend *be, int dev);
    /* Optional, on dev's worker thread while it has nothing to run, every LOST_CHECK_MS or so:
     * whether dev's context is known lost without a job having met it (a device process that
     * ended while idle, or on another thread's request), with why; the worker then resets
     * it at once, so a device does not wait for a job to fail first. */
    bool (*lost)(struct backend *be, int dev, char *why, size_t len);
    /* Optional, fault-injection builds (GLLM_FAULT_INJECTION), on dev's worker thread: runs
     * a fault of kind on dev in place of a job and returns what that job would: GLLM_EDEVLOST
     * for a trap, an out-of-bounds read or a sticky fault, GLLM_EJOBTIMEOUT once deadline_ns (non-zero) has
     * passed for a spin; -EOPNOTSUPP with why for a kind this backend cannot make. */
    int (*inject_fault)(struct backend *be, int dev, enum backend_fault kind,
                        uint64_t deadline_ns, char *why, size_t len);
    /* Optional, all three or none (BACKEND_FEAT_QUEUES): a client's queue on dev (see
     * Queues). open and poll on dev's worker thread; close on any thread, with nothing of
     * the queue in flight. */
    int (*queue_open)(struct backend *be, int dev, struct backend_queue **out);
    int (*queue_poll)(struct backend *be, int dev, struct backend_queue *q, bool cancel);
    void (*queue_close)(struct backend *be, int dev, struct backend_queue *q);
};

/* The backend as the registry sees it: found, scored, opened. */
struct backend_iface {
    int api_version;            /* BACKEND_API_VERSION */
    const char *name;
    /* Score for auto-selection: > 0 usable (higher wins), 0 not here. Writes a one-line
     * reason into why when it returns 0. */
    int (*probe)(char *why, size_t len);
    /* Fills *out (iface, device, ctx, ndevices, caps) or returns a code. */
    int (*open)(const struct backend_config *cfg, struct backend **out);
    void (*close)(struct backend *be);  /* accepts NULL */
    /* Optional: one line for --version (what is embedded, e.g. kernel images). */
    const char *(*describe)(void);
    /* What the backend computes wherever it opens, without a device: dtypes, max_head_dim
     * and modes of *out (the rest zeroed). open starts its caps from the same declaration,
     * so `gllmd --capabilities` and the table generated from it (docs/backends.md) say what
     * hello will. NULL: the backend declares nothing before it opens. */
    void (*declare)(struct backend_caps *out);
};

/* An open backend. */
struct backend {
    const struct backend_iface *iface;
    const struct backend_device_iface *device;
    void *ctx;                  /* the backend's own */
    int ndevices;
    int present;                /* devices the driver reports, opened or not (one_device) */
    struct backend_caps caps;
};

#endif
