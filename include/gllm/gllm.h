/* libgllm-client: the public C API for talking to gllmd. */
#ifndef GLLM_GLLM_H
#define GLLM_GLLM_H

#include <stddef.h>
#include <stdint.h>

#include "gllm/errors.h"
#include "gllm/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's public functions: the library builds with hidden visibility, so only
 * these are exported from libgllm-client.so (tests/package/exports.sh checks both ways). */
#if defined(GLLM_BUILDING_LIBRARY)
#define GLLM_EXPORT __attribute__((visibility("default")))
#else
#define GLLM_EXPORT
#endif

/*
 * Thread-safety: a gllm_client and the memory made through it belong to one
 * thread at a time. Use one client per thread, or serialise calls on a client
 * with your own lock. Different clients are fully independent: the library
 * has no global state and never logs.
 *
 * Errors: functions return 0 (or a count) on success and a negative code on
 * failure (a negative errno or a GLLM_E* code, see gllm/errors.h); output
 * parameters are left untouched on failure.
 *
 * Argument order: the client first, then the object the call acts on, then its
 * inputs, then its outputs. Calls that only inspect or give back a handle take
 * the handle alone: it remembers its client.
 *
 * Handles are given back with a function named _release (gllm_memory_release);
 * the client itself with gllm_disconnect.
 *
 * Structs that grow: every struct the library fills in (gllm_caps, gllm_limits,
 * gllm_device_info, gllm_status, gllm_client_info, gllm_metrics, gllm_job_result) and every
 * params struct it reads starts with `size_t size`, which the caller sets to
 * sizeof the struct it was compiled with; the GLLM_*_INIT macros do that and zero
 * the rest. New fields are only ever appended. The library fills only the first
 * `size` bytes of an output struct (an older, smaller one gets the fields it
 * knows), leaves fields it does not know as the caller set them, and fails with
 * -EINVAL when size is too small to hold the size itself (a zeroed struct).
 */

#define GLLM_PROTOCOL_VERSION 1
#define GLLM_MAX_RANK 8
#define GLLM_MAX_DEVICES 16
/* Jobs submitted and not yet claimed by gllm_job_wait/poll, per client: past it,
 * submitting fails with GLLM_EBUSY. */
#define GLLM_MAX_PENDING_JOBS 65536

typedef enum gllm_dtype {
    GLLM_DTYPE_F32 = 0,
    GLLM_DTYPE_F16 = 1,
    GLLM_DTYPE_BF16 = 2,
    GLLM_DTYPE_I32 = 3,     /* page tables and other index tensors */
} gllm_dtype;

typedef struct gllm_client gllm_client;

/* Memory a job's tensors live in: one handle type for every kind. */
typedef struct gllm_memory gllm_memory;

typedef enum gllm_memory_kind {
    GLLM_MEMORY_ARENA = 1,   /* shared host memory (a sealed memfd) gllmd maps */
    GLLM_MEMORY_DEVICE = 2,  /* daemon-owned device memory (host memory on the CPU backend) */
    GLLM_MEMORY_SHARED = 3,  /* device memory both processes map: exported by gllmd
                              * (gllm_memory_create_shared) or the client's own, imported
                              * (gllm_memory_import) */
} gllm_memory_kind;

/* A view into memory; strides are in elements, offset in bytes. */
typedef struct gllm_tensor {
    gllm_memory *memory;
    uint64_t offset;
    gllm_dtype dtype;
    int rank;
    int64_t shape[GLLM_MAX_RANK];
    int64_t strides[GLLM_MAX_RANK];
} gllm_tensor;

typedef struct gllm_device_info {
    size_t size;            /* sizeof(gllm_device_info): GLLM_DEVICE_INFO_INIT */
    int index;
    char name[96];
    char kind[16];          /* "cpu", "cuda", ... */
    uint64_t memory_bytes;
    int threads;            /* worker threads serving this device (CPU) */
    int cc_major, cc_minor; /* compute capability (GPUs), 0 otherwise */
    char image[32];         /* kernel image loaded: "sm_90a SASS", "compute_80 PTX (JIT)", "" */
    int process_pid;        /* the device's own process (device_processes = on) when the daemon
                             * answered hello; 0 where gllmd runs the device itself */
} gllm_device_info;
#define GLLM_DEVICE_INFO_INIT {.size = sizeof(gllm_device_info)}

typedef struct gllm_limits {
    size_t size;                  /* sizeof(gllm_limits): GLLM_LIMITS_INIT */
    uint32_t max_message_bytes;
    uint32_t max_arenas;
    uint64_t max_arena_bytes;     /* all arenas of one session together */
    uint64_t max_device_bytes;    /* all device tensors of one session together */
    uint64_t max_device_bytes_total; /* ... of all sessions */
    uint32_t max_inflight;        /* jobs in flight per session */
    uint32_t max_inflight_total;  /* jobs in flight in all sessions */
    uint64_t max_elements;        /* elements of one tensor */
    uint32_t max_rank;
    uint32_t max_head_dim;
    uint32_t max_page_entries;    /* page-table entries, queries, new tokens or sequences of a paged job */
} gllm_limits;
#define GLLM_LIMITS_INIT {.size = sizeof(gllm_limits)}

/* What the daemon announced in hello; its devices and limits have their own calls. */
typedef struct gllm_caps {
    size_t size;                  /* sizeof(gllm_caps): GLLM_CAPS_INIT */
    int protocol_version;
    char daemon_version[32];
    char backend[16];
    int ndevices;                 /* gllm_client_device(c, 0 .. ndevices - 1) */
    uint32_t dtypes;              /* bit (1 << gllm_dtype) per supported dtype */
    char share[16];               /* how device memory is shared: "memfd" (CPU backend),
                                   * "cuda_vmm_fd" (CUDA), "" (not at all) */
    uint64_t share_granularity;   /* shared sizes are multiples of it; 0 with share "" */
} gllm_caps;
#define GLLM_CAPS_INIT {.size = sizeof(gllm_caps)}

#define GLLM_MAX_LISTED_CLIENTS 64

typedef struct gllm_client_info {
    size_t size;            /* sizeof(gllm_client_info): GLLM_CLIENT_INFO_INIT */
    int pid;                /* from the kernel (SO_PEERCRED) when the client connected */
    uint32_t uid, gid;
    char comm[16];          /* the process's command name */
    uint32_t arenas;
    uint64_t arena_bytes;
    uint64_t device_bytes;  /* in device tensors */
    uint32_t inflight;      /* jobs queued or running */
    uint64_t exported_bytes; /* of device_bytes: gllmd's memory this client maps too */
    uint64_t imported_bytes; /* of device_bytes: this client's own memory gllmd maps */
} gllm_client_info;
#define GLLM_CLIENT_INFO_INIT {.size = sizeof(gllm_client_info)}

typedef struct gllm_status {
    size_t size;                /* sizeof(gllm_status): GLLM_STATUS_INIT */
    char daemon_version[32];
    char backend[16];
    double uptime_s;
    uint32_t clients;
    uint64_t jobs_done;
    uint64_t jobs_failed;
    uint64_t jobs_inflight;
    uint64_t bytes_mapped;
    uint32_t arenas;
    uint64_t device_bytes;      /* in device tensors, all clients */
    uint32_t dtensors;
    uint64_t requests;          /* requests received since start, both ways */
    uint64_t ring_requests;     /* of which taken from shared-memory rings */
    uint64_t errors;            /* error replies sent */
    uint64_t limit_violations;  /* of which TOOBIG, LIMIT, QUOTA or BUSY */
    int nlisted;                /* gllm_status_client(c, 0 .. nlisted - 1): the first 64 clients */
    uint64_t exported_bytes;    /* of device_bytes: shared with clients, gllmd's memory */
    uint64_t imported_bytes;    /* of device_bytes: shared with clients, theirs */
} gllm_status;
#define GLLM_STATUS_INIT {.size = sizeof(gllm_status)}

#define GLLM_ATTN_CAUSAL (1u << 0) /* mask aligned bottom-right: query i sees keys j <= i + Skv - Sq */
#define GLLM_ATTN_SCALE  (1u << 1) /* use .scale instead of 1/sqrt(D) */
#define GLLM_ATTN_LSE    (1u << 2) /* write log-sum-exp per row into .lse (f32, [B, Hq, Sq]) */
#define GLLM_ATTN_WINDOW (1u << 3) /* read variant.window_left and variant.window_right */

/*
 * Attention variants (docs/PROTOCOL.md, "Variants": FlashInfer's and FA3's names and
 * meanings). Positions are bottom-right aligned as GLLM_ATTN_CAUSAL's: query row r of a
 * dense job has absolute position i = r + Skv - Sq; a paged job's queries are the last
 * tokens of their sequence. Every field's zero is "none" except the window's, which is read
 * only with GLLM_ATTN_WINDOW, so params zeroed but for their size keep full attention.
 * Query i sees key j when every mask given allows it:
 *  - causal: j <= i;
 *  - window: i - window_left <= j (unless window_left is -1) and j <= i + window_right
 *    (unless window_right is -1);
 *  - attention_chunk c > 0: floor(i / c) == floor(j / c) (Llama 4's chunked local attention).
 * The score of a visible key is s = scale * q.k, then cap * tanh(s / cap) with
 * logits_soft_cap cap > 0 (Gemma 2's order), then s + slope[h] * (j - i) with ALiBi slopes.
 * With sinks, a virtual key of logit sinks[h] (not scaled) and value zero joins each row's
 * softmax (GPT-OSS). A row that sees no key is zeros, with lse -inf (sinks[h] with sinks).
 * Which fields a backend computes, per mode, is in gllm_client_mode_caps; a job with a field
 * the backend does not compute is refused (GLLM_EVARIANT), never run without it.
 */
typedef struct gllm_attention_variant {
    int32_t window_left;          /* with GLLM_ATTN_WINDOW: >= -1 (-1: no left edge) */
    int32_t window_right;         /* with GLLM_ATTN_WINDOW: >= -1 (-1: no right edge) */
    uint32_t attention_chunk;     /* 0: none */
    float logits_soft_cap;        /* 0: none; else finite and > 0 */
    gllm_tensor alibi_slopes;     /* memory NULL: none; else f32 [Hq] */
    gllm_tensor sinks;            /* memory NULL: none; else f32 [Hq] */
} gllm_attention_variant;

/*
 * out = softmax(scale * Q K^T + mask) V with Q [B,Hq,Sq,Dqk], K [B,Hkv,Skv,Dqk], V
 * [B,Hkv,Skv,Dv] and out [B,Hq,Sq,Dv]; Hq must be a multiple of Hkv, Dv at most Dqk (Dv != Dqk
 * where the mode's caps have GLLM_VARIANT_HEAD_DIM_V). Q, K, V and out share one dtype;
 * accumulation is fp32. The scale defaults to 1/sqrt(Dqk).
 */
/*
 * A 32-bit counter in an arena that orders a job with the caller's own work: the job's
 * `wait` holds it until the counter reaches `value` ((int32_t)(counter - value) >= 0, so
 * counters may wrap), and fails it with GLLM_EWAITTIMEOUT after timeout_ms (0: the
 * daemon's default, hello's sync.timeout_ms); its `signal` is written with `value` after
 * the job's last operation on the device (and when it fails). memory NULL: none. The
 * caller's CUDA stream writes and waits on such counters with gllm_stream_write_counter and
 * gllm_stream_wait_counter; gllm_attention_enqueue does both around one job.
 */
typedef struct gllm_counter {
    gllm_memory *memory;          /* an arena of this client, or NULL */
    uint64_t offset;              /* a multiple of 4 */
    uint32_t value;
    uint32_t timeout_ms;          /* wait only */
} gllm_counter;

typedef struct gllm_attention_params {
    size_t size;                  /* sizeof(gllm_attention_params) */
    uint32_t flags;
    float scale;
    gllm_tensor q, k, v, out, lse;
    gllm_counter wait, signal;    /* optional; callers built before them omit them */
    /* Benchmarks: run the kernel this many times back to back (0 or 1: once, at most
     * GLLM_MAX_REPEAT), the result's kernel_ns being one run's mean, as a peer replayed
     * from a CUDA graph is timed. Callers built before it omit it. */
    uint32_t repeat;
    /* Callers built before it omit it: no variant. */
    gllm_attention_variant variant;
} gllm_attention_params;
#define GLLM_MAX_REPEAT 100

typedef struct gllm_job_result {
    size_t size;             /* sizeof(gllm_job_result): GLLM_JOB_RESULT_INIT */
    int status;              /* 0 or a negative error code */
    uint64_t kernel_ns;      /* GPU: events around the kernel's launch; CPU: the compute
                              * threads' time (with repeat: one run's mean) */
    uint64_t queue_ns;       /* time the job waited for its device */
    uint64_t job_ns;         /* time the worker spent on the job, copies included */
    uint64_t copy_ns;        /* GPU: device time of the arena <-> device copies */
    uint64_t copy_bytes;     /* GPU: bytes those copies moved */
    uint64_t accept_ns;      /* time the daemon took to read and check the request */
} gllm_job_result;
#define GLLM_JOB_RESULT_INIT {.size = sizeof(gllm_job_result)}

/*
 * A paged KV cache: K and V page pools [num_pages, page_size, Hkv, D] (row-major, one
 * dtype, usually in device memory) and the page table of a batch of B sequences in the
 * FlashInfer layout, as i32 tensors in arenas: sequence b owns pages
 * indices[indptr[b] .. indptr[b + 1]) in order, and uses last_page_len[b] slots (1 ..
 * page_size) of its last page. Its length is (pages - 1) * page_size + last_page_len[b].
 * The daemon copies and checks every entry before a kernel sees it. For attention, indices
 * may be in device memory instead: it is read when the job runs, each page number is checked
 * before anything is read through it, and a bad one fails the job with GLLM_EBOUNDS.
 */
typedef struct gllm_paged_kv {
    gllm_tensor k_cache, v_cache;
    gllm_tensor indptr;           /* i32 [B + 1], indptr[0] = 0, non-decreasing */
    gllm_tensor indices;          /* i32 [>= indptr[B]], each in [0, num_pages); arena or device */
    gllm_tensor last_page_len;    /* i32 [B] */
} gllm_paged_kv;

/*
 * Writes the K and V of new tokens, k and v [N, Hkv, D], into the cache: tokens
 * append_indptr[b] .. append_indptr[b + 1] (i32 [B + 1]) of k and v become the last
 * tokens of sequence b, whose page table (kv) already counts them. No two new tokens may
 * land in the same slot.
 */
typedef struct gllm_kv_append_params {
    size_t size;                  /* sizeof(gllm_kv_append_params) */
    gllm_paged_kv kv;
    gllm_tensor k, v, append_indptr;
    gllm_counter wait, signal;    /* optional, as for gllm_attention_params */
} gllm_kv_append_params;

/*
 * Attention over a paged cache. Decode: q and out [B, Hq, D], one query per sequence,
 * seeing all of it. Prefill: q and out [N, Hq, D], queries qo_indptr[b] .. qo_indptr[b +
 * 1] (i32 [B + 1]) are the last tokens of sequence b (already appended) and attend
 * causally to the cached prefix and to each other. Hq must be a multiple of Hkv; v_cache's
 * head dim (Dv, out's) may be below k_cache's as for gllm_attention_params. flags takes
 * GLLM_ATTN_SCALE and GLLM_ATTN_WINDOW; the mask is always causal, and variant adds to it.
 */
typedef struct gllm_paged_attention_params {
    size_t size;                  /* sizeof(gllm_paged_attention_params) */
    uint32_t flags;
    float scale;
    gllm_paged_kv kv;
    gllm_tensor q, out;
    gllm_tensor qo_indptr;        /* prefill only */
    gllm_counter wait, signal;    /* optional, as for gllm_attention_params */
    gllm_attention_variant variant; /* optional: callers built before it omit it */
} gllm_paged_attention_params;

/* Connection. path NULL: the default socket (gllm_default_socket_path). Performs the
 * hello exchange. */
GLLM_EXPORT int gllm_connect(const char *path, gllm_client **out);
GLLM_EXPORT void gllm_disconnect(gllm_client *c);
/* The default socket path, looked up in this order: $GLLM_SOCKET if set and not empty;
 * else /run/gllm/gllmd.sock when running as root; else $XDG_RUNTIME_DIR/gllm/gllmd.sock
 * when XDG_RUNTIME_DIR is an absolute path. Writes it into buf and returns its length,
 * or -ENAMETOOLONG (buf too small) or -ENOENT (none applies). */
GLLM_EXPORT int gllm_default_socket_path(char *buf, size_t len);
/* What the daemon announced in hello: capabilities, limits, and device index's info
 * (0 <= index < caps.ndevices, else -EINVAL). */
GLLM_EXPORT int gllm_client_caps(const gllm_client *c, gllm_caps *out);
GLLM_EXPORT int gllm_client_limits(const gllm_client *c, gllm_limits *out);
GLLM_EXPORT int gllm_client_device(const gllm_client *c, int index, gllm_device_info *out);
/* What a backend computes per mode, from hello's "capabilities" (docs/PROTOCOL.md). A
 * daemon from before it reports no variants, and the head dims of its limits. */
typedef enum gllm_mode {
    GLLM_MODE_DENSE = 0,          /* gllm_attention */
    GLLM_MODE_DECODE = 1,         /* gllm_attention_decode */
    GLLM_MODE_PREFILL = 2,        /* gllm_attention_prefill (chunked prefill) */
} gllm_mode;
#define GLLM_MODE_COUNT 3
/* The variant fields, one bit each; the wire names are the field names. */
#define GLLM_VARIANT_WINDOW     (1u << 0)   /* window_left, window_right */
#define GLLM_VARIANT_CHUNK      (1u << 1)   /* attention_chunk */
#define GLLM_VARIANT_SOFT_CAP   (1u << 2)   /* logits_soft_cap */
#define GLLM_VARIANT_ALIBI      (1u << 3)   /* alibi_slopes */
#define GLLM_VARIANT_SINKS      (1u << 4)   /* sinks */
#define GLLM_VARIANT_HEAD_DIM_V (1u << 5)   /* v's head dim below q's and k's */
#define GLLM_MAX_MODE_HEAD_DIMS 16
typedef struct gllm_mode_caps {
    size_t size;                  /* sizeof(gllm_mode_caps): GLLM_MODE_CAPS_INIT */
    uint32_t variants;            /* GLLM_VARIANT_* bits the mode computes */
    int max_head_dim;             /* q's head dim is 1 .. max_head_dim ... */
    int nhead_dims;               /* ... or, when > 0, one of head_dims[0 .. nhead_dims - 1] */
    int head_dims[GLLM_MAX_MODE_HEAD_DIMS];
} gllm_mode_caps;
#define GLLM_MODE_CAPS_INIT {.size = sizeof(gllm_mode_caps)}
/* Mode's capabilities as hello announced them: -EINVAL for a mode not in gllm_mode. */
GLLM_EXPORT int gllm_client_mode_caps(const gllm_client *c, gllm_mode mode, gllm_mode_caps *out);
/* Whether the daemon computes every variant field p sets (and its head dims) in mode: 0, or
 * GLLM_EVARIANT / GLLM_EHEADDIM with the reason in gllm_client_last_error. The job calls check
 * this themselves before anything is sent. */
GLLM_EXPORT int gllm_client_check_variant(gllm_client *c, gllm_mode mode, uint32_t flags,
                                          const gllm_attention_variant *v, int64_t head_dim,
                                          int64_t head_dim_v);

/* The socket fd, readable when a reply is waiting: poll it from your event
 * loop, then call gllm_job_poll(). Do not read or close it yourself. */
GLLM_EXPORT int gllm_client_fd(const gllm_client *c);

/* The daemon's counters now. The client list comes with it: gllm_status_client reads
 * entry index (0 <= index < out->nlisted) of the last status c received. */
GLLM_EXPORT int gllm_status_get(gllm_client *c, gllm_status *out);
GLLM_EXPORT int gllm_status_client(const gllm_client *c, int index, gllm_client_info *out);

/* Job metrics since the daemon started, for monitoring (gllmctl metrics). A histogram's
 * buckets are per bucket, not cumulative: counts[i] jobs took at most le[i] seconds and more
 * than le[i - 1]; counts[nbounds] took longer than every bound. */
#define GLLM_HISTOGRAM_BOUNDS 16
typedef struct gllm_histogram {
    int nbounds;                                /* bounds used, <= GLLM_HISTOGRAM_BOUNDS */
    double le[GLLM_HISTOGRAM_BOUNDS];           /* upper bounds in seconds, ascending */
    uint64_t counts[GLLM_HISTOGRAM_BOUNDS + 1];
    double sum;                                 /* seconds, all jobs together */
    uint64_t count;                             /* jobs observed: the counts added up */
} gllm_histogram;

#define GLLM_METRICS_MAX_METHODS 16
typedef struct gllm_method_jobs {
    char method[32];                            /* the wire method: "attention", ... */
    uint64_t ok, failed;
} gllm_method_jobs;

typedef struct gllm_metrics {
    size_t size;                                /* sizeof(gllm_metrics): GLLM_METRICS_INIT */
    int nmethods;                               /* jobs[0 .. nmethods - 1] */
    gllm_method_jobs jobs[GLLM_METRICS_MAX_METHODS];
    /* Of successful jobs: time waiting for the device, the kernel's time (as kernel_ns), and
     * the latency gllmd adds (from reading the request to the job's end, minus the kernel). */
    gllm_histogram queue_seconds, kernel_seconds, added_seconds;
    uint64_t device_resets;                     /* resets after faults, every device together */
} gllm_metrics;
#define GLLM_METRICS_INIT {.size = sizeof(gllm_metrics)}

/* The metrics of the last status c received (gllm_status_get first): -ENODATA when c has
 * received none, or the daemon sent no metrics. */
GLLM_EXPORT int gllm_status_metrics(const gllm_client *c, gllm_metrics *out);
/* Device dev's memory in bytes, in use and in all, as the last status c received reported it
 * (on the CPU backend: the host memory gllmd holds for device tensors and shared memory, and
 * the host's physical memory): -EINVAL when dev is not a device it reported, -ENODATA when
 * c has received no status. */
GLLM_EXPORT int gllm_status_device_memory(const gllm_client *c, int dev, uint64_t *used,
                                          uint64_t *total);

/* Administration (gllmctl drain, reload, client): only for root, gllmd's own user and the
 * admin_users and admin_groups of gllmd.conf; anyone else gets GLLM_EDENIED, and
 * gllm_client_last_error says why. */
typedef struct gllm_admin_client {
    size_t size;            /* sizeof(gllm_admin_client): GLLM_ADMIN_CLIENT_INIT */
    uint64_t id;            /* the connection's number (gllm_admin_disconnect) */
    int pid;                /* from the kernel when it connected */
    uint32_t uid, gid;
    char comm[16];
    int admin;              /* 1: it may use these calls */
    double connected_s;     /* seconds since it connected */
    uint32_t inflight;      /* jobs queued or running */
    uint32_t arenas;
    uint64_t arena_bytes, device_bytes;
    int nmethods;           /* jobs[0 .. nmethods - 1]: its settled jobs by wire method */
    gllm_method_jobs jobs[GLLM_METRICS_MAX_METHODS];
} gllm_admin_client;
#define GLLM_ADMIN_CLIENT_INIT {.size = sizeof(gllm_admin_client)}

/* Drains gllmd as SIGTERM does: it accepts no more connections or jobs, answers those it
 * accepted, and exits. *inflight (optional): the jobs it was still running. */
GLLM_EXPORT int gllm_admin_drain(gllm_client *c, uint64_t *inflight);
/* Re-reads gllmd.conf as SIGHUP does: a file with an error is refused (-EINVAL, the
 * reason in gllm_client_last_error) and the running configuration kept. */
GLLM_EXPORT int gllm_admin_reload(gllm_client *c);
/* The daemon's connections (at most max, the first GLLM_MAX_LISTED_CLIENTS), or with id
 * not 0 that one alone (-ESRCH when there is none): the number written to out[0 ..], each
 * out[0].size bytes (GLLM_ADMIN_CLIENT_INIT). */
GLLM_EXPORT int gllm_admin_clients(gllm_client *c, uint64_t id, gllm_admin_client *out, int max);
/* Closes connection id, as if its client had hung up: its jobs in flight finish unanswered
 * and its memory is released. -ESRCH: no such connection; -EINVAL: c's own. */
GLLM_EXPORT int gllm_admin_disconnect(gllm_client *c, uint64_t id);

/* Memory. An arena is shared memory the daemon maps; its bytes are at gllm_memory_data.
 * Device memory is daemon-owned memory on a device (GPU memory; host memory on the CPU
 * backend); the client cannot touch it (gllm_memory_data is NULL) but copies to and from
 * arenas with gllm_memory_copy. gllm_memory_release gives either back on both sides; when
 * the connection closes first, gllmd gives back its side and release frees the handle. */
GLLM_EXPORT int gllm_arena_create(gllm_client *c, size_t bytes, gllm_memory **out);
GLLM_EXPORT int gllm_dtensor_create(gllm_client *c, size_t bytes, int device, gllm_memory **out);
GLLM_EXPORT int gllm_memory_release(gllm_memory *m);
GLLM_EXPORT gllm_memory_kind gllm_memory_kind_of(const gllm_memory *m);
GLLM_EXPORT void *gllm_memory_data(const gllm_memory *m);
GLLM_EXPORT size_t gllm_memory_size(const gllm_memory *m);
/*
 * Shared memory (GLLM_MEMORY_SHARED): device memory that the client's own code and gllmd's
 * jobs both address, named by tensors like any other memory. caps.share says how the
 * daemon's backend shares it; with share "" these calls fail with -EOPNOTSUPP.
 *
 * gllm_memory_create_shared: gllmd allocates bytes on device, rounded up to a multiple of
 * caps.share_granularity (gllm_memory_size gives the rounded size), and hands this process
 * a handle to it. gllm_memory_map then gives the address this process uses:
 *  - share "memfd" (CPU backend): the host mapping, made at creation (gllm_memory_data
 *    returns the same pointer);
 *  - share "cuda_vmm_fd" (CUDA): a CUdeviceptr, returned as a void *, mapped read-write into
 *    the calling thread's current CUDA context on the first call (the same pointer after);
 *    gllm_memory_data returns NULL. The first such mapping opens libcuda.so.1 (dlopen); a
 *    client that never maps device memory never loads the driver. Fails with -ENODEV when
 *    the thread has no current context, -ELIBACC when libcuda.so.1 cannot be opened or
 *    lacks a function, -ENOMEM when no address range is left, GLLM_EBACKEND when the driver
 *    refuses the memory (the driver's error is in gllm_client_last_error).
 *
 * gllm_memory_import: the client's own memory, which gllmd maps for its jobs. fd is, with
 * share "memfd", a memfd of exactly bytes sealed at least with F_SEAL_SHRINK; with share
 * "cuda_vmm_fd", the POSIX fd of a cuMemCreate allocation of exactly bytes on the GPU of
 * device (requested with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR and exported with
 * cuMemExportToShareableHandle). bytes must be a multiple of caps.share_granularity. The caller keeps fd (close it when
 * you like: gllmd holds its own reference) and its own mapping, which is the address to use:
 * gllm_memory_map fails with -EINVAL on imported memory and gllm_memory_data is NULL.
 * gllmd refuses anything else: GLLM_ENOTEXPORT (not such an export, or of another device),
 * GLLM_EUNSEALED, GLLM_EARENASIZE (the fd's size differs), GLLM_EPARAM (not a multiple of
 * the granularity), GLLM_EQUOTA.
 *
 * Both count against the session's max_device_bytes, copy to and from arenas with
 * gllm_memory_copy, and are given back by gllm_memory_release, which unmaps what this
 * library mapped and frees the daemon's side. Jobs reading or writing shared memory are
 * ordered with the client's own GPU work by the host for now: finish your kernels that
 * write it before submitting, and read the output after the job's reply.
 */
GLLM_EXPORT int gllm_memory_create_shared(gllm_client *c, size_t bytes, int device,
                                          gllm_memory **out);
GLLM_EXPORT int gllm_memory_import(gllm_client *c, int fd, size_t bytes, int device,
                                   gllm_memory **out);
GLLM_EXPORT int gllm_memory_map(gllm_memory *m, void **ptr);

/* Copies bytes from src at src_offset to dst at dst_offset: an arena into device memory
 * (GLLM_MEMORY_DEVICE or GLLM_MEMORY_SHARED) or back. A copy is a job: it runs in order with the connection's attention jobs on that
 * device, and this call waits for it. */
GLLM_EXPORT int gllm_memory_copy(gllm_client *c, gllm_memory *dst, uint64_t dst_offset,
                                 gllm_memory *src, uint64_t src_offset, uint64_t bytes);

/* A contiguous (row-major) tensor at offset in memory m, of any kind. */
GLLM_EXPORT int gllm_tensor_init(gllm_memory *m, uint64_t offset, gllm_dtype dtype, int rank,
                                 const int64_t *shape, gllm_tensor *out);
GLLM_EXPORT size_t gllm_dtype_size(gllm_dtype dtype);
GLLM_EXPORT const char *gllm_dtype_name(gllm_dtype dtype);

/* Attention, synchronously: returns the job's status. res may be NULL. */
GLLM_EXPORT int gllm_attention(gllm_client *c, const gllm_attention_params *p,
                               gllm_job_result *res);
/* Asynchronously: submit, then wait (blocking) or poll (-EAGAIN while running). */
GLLM_EXPORT int gllm_attention_submit(gllm_client *c, const gllm_attention_params *p,
                                      uint64_t *job);
GLLM_EXPORT int gllm_job_wait(gllm_client *c, uint64_t job, gllm_job_result *res);

/*
 * Work ordered on the caller's CUDA stream (a CUstream, NULL for the default stream) with
 * gllmd's, with no host synchronisation. write_counter enqueues "write value at offset of
 * arena" on stream; wait_counter enqueues "wait until that counter reaches value". The arena
 * is registered with the caller's current CUDA context on first use (libcuda.so.1 is opened
 * only then: -ELIBACC without it). gllm_attention_enqueue(c, p, stream, &job) is the usual
 * pattern in one call: a counter the stream raises when the work queued before it is done,
 * the job waiting for it and signalling another, and the stream waiting for that before
 * anything queued after it; p->wait and p->signal are the library's. The reply still comes:
 * claim it with gllm_job_poll or gllm_job_wait (it carries the job's errors and times).
 */
GLLM_EXPORT int gllm_stream_write_counter(gllm_memory *arena, uint64_t offset, uint32_t value,
                                          void *stream);
GLLM_EXPORT int gllm_stream_wait_counter(gllm_memory *arena, uint64_t offset, uint32_t value,
                                         void *stream);
GLLM_EXPORT int gllm_attention_enqueue(gllm_client *c, const gllm_attention_params *p,
                                       void *stream, uint64_t *job);
/*
 * A run of jobs ordered on the caller's stream, any methods: gllm_stream_order enqueues on
 * stream a write of a fresh "ready" value (once the work queued before it is done) and a
 * wait for a fresh "done" value (holding the work queued after it), and fills *wait and
 * *signal with the two counters, in an arena of the library's. Put wait on the run's first
 * job and signal on its last (one job may carry both): a connection's jobs on a device run
 * in the order they were submitted. The stream waits until gllmd writes done, also when the
 * job fails; if the run is never submitted, gllm_counter_write(signal) releases it.
 */
GLLM_EXPORT int gllm_stream_order(gllm_client *c, void *stream, gllm_counter *wait,
                                  gllm_counter *signal);
/* The same for a run of jobs on device (-1: any, as gllm_stream_order): where gllmd shares
 * CUDA memory the wait's counter is in device memory of that device, shared with gllmd,
 * which the GPU polls faster than an arena (the run's jobs must be on that device). */
GLLM_EXPORT int gllm_stream_order_on(gllm_client *c, void *stream, int device,
                                     gllm_counter *wait, gllm_counter *signal);
/* Writes counter->value into its arena from the CPU (a store that releases what this
 * thread wrote before it): raises a wait from the host. */
GLLM_EXPORT int gllm_counter_write(const gllm_counter *counter);
GLLM_EXPORT int gllm_job_poll(gllm_client *c, uint64_t job, gllm_job_result *res);
/* How long gllm_job_wait (and the synchronous job calls) poll for the reply before they
 * sleep on the socket: a sleeping thread takes microseconds to wake when the reply lands,
 * which a decode step that lasts tens of microseconds feels. While polling, the client
 * reads the shared-memory reply ring it gave the daemon at connect (no system call per
 * reply) and looks at the socket every few microseconds. The default is
 * GLLM_WAIT_SPIN_US_DEFAULT on GPU backends and 0 on the CPU backend, whose jobs need
 * every core; 0 sleeps at once. Spinning keeps the calling CPU busy. */
#define GLLM_WAIT_SPIN_US_DEFAULT 1000
GLLM_EXPORT void gllm_client_set_wait_spin(gllm_client *c, uint32_t us);

/* Paged KV cache jobs; the _submit forms return at once like gllm_attention_submit. */
GLLM_EXPORT int gllm_kv_append_submit(gllm_client *c, const gllm_kv_append_params *p,
                                      uint64_t *job);
GLLM_EXPORT int gllm_attention_decode_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                             uint64_t *job);
GLLM_EXPORT int gllm_attention_prefill_submit(gllm_client *c, const gllm_paged_attention_params *p,
                                              uint64_t *job);
GLLM_EXPORT int gllm_kv_append(gllm_client *c, const gllm_kv_append_params *p,
                               gllm_job_result *res);
GLLM_EXPORT int gllm_attention_decode(gllm_client *c, const gllm_paged_attention_params *p,
                                      gllm_job_result *res);
GLLM_EXPORT int gllm_attention_prefill(gllm_client *c, const gllm_paged_attention_params *p,
                                       gllm_job_result *res);

/* The daemon's message for the last failed call or claimed failed job on c
 * ("" if none): it names the field and the limit that was hit. */
GLLM_EXPORT const char *gllm_client_last_error(const gllm_client *c);

GLLM_EXPORT const char *gllm_strerror(int code);
GLLM_EXPORT const char *gllm_error_name(int code);
GLLM_EXPORT const char *gllm_version(void);

#ifdef __cplusplus
}
#endif
#endif
