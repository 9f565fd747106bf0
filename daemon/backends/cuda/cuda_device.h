/* The CUDA backend's per-device context (context, module and kernels, stream, events,
 * scratch) and its helpers: used by cuda_backend.c and cuda_paged.c, calling neither. */
#ifndef GLLM_CUDA_DEVICE_H
#define GLLM_CUDA_DEVICE_H


#include "attention_params.h"
#include "backend_api.h"
#include "cuda_driver.h"
#include "cuda_pin.h"
#include "cuda_tma.h"
#include "kernel_registry.h"

enum { EV_COPY_IN, EV_KERNEL, EV_KERNEL_END, EV_COPY_OUT, EV_COUNT };

/* One launch shape and, from its second launch, its one-node graph (cuda_launch.c). */
#define GLLM_CUDA_GRAPH_SLOTS 16
struct cuda_graph_slot {
    CUfunction f;                  /* NULL: a free slot */
    unsigned gx, gy, bx, smem;
    uint64_t used;                 /* the device's launch clock at its last launch */
    bool failed;                   /* no graph could be built: launched directly */
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
};

/* What the jobs of one stream use one after another (stream order makes reuse safe): the
 * device's own stream, or a client's queue (cuda_queue.c). */
struct cuda_lane {
    CUstream stream;
    bool graphs;                   /* launches through the device's graphs (its own stream:
                                    * a graph shared by two streams would order them) */
    CUdeviceptr scratch;           /* inputs and outputs of the running job */
    size_t scratch_size;
    CUdeviceptr counters;          /* split-KV arrival counters (cuda_paged.c) */
    size_t counters_size;          /* bytes */
    CUdeviceptr sums;              /* a split sequence's fast-merge sums (cuda_paged.c) */
    size_t sums_size;              /* bytes */
    CUdeviceptr split;             /* the dense Hopper prefill's split workspace (zeroed) */
    size_t split_size;             /* bytes */
};

/* What one job in flight uses alone, and what it must remember until it is done. */
struct cuda_slot {
    CUevent ev[EV_COUNT];
    CUevent waited;                /* recorded behind the job's GPU-side wait (run to
                                    * completion; a queued job's counter is read on the host) */
    CUevent done;                  /* recorded behind its signal (queued jobs) */
    void *hstage;                  /* pinned: page tables and plans on their way up */
    size_t hstage_size;
    volatile int32_t *bad_page;    /* pinned, mapped: the paged kernel sets it when it meets a
                                    * page number outside the pool (never followed) */
    /* Filled by the job's enqueue for its completion. */
    uint64_t moved;                /* bytes copied */
    bool ran;                      /* its work was enqueued: the events are there to read */
    bool copies;                   /* tensors were staged: the copy events were recorded */
    bool check_pages;              /* paged attention: look at bad_page */
    CUdeviceptr table;             /* where the kernel read the page table */
    bool table_in_place;
};

/* Device memory a worker could not free at once: cuMemFree and cuMemFreeHost wait for
 * every stream of the context, so with a GPU-side wait pending they would hold the worker
 * until a client's counter came (an H100 showed it: 300 ms for a 300 ms wait). */
#define CUDA_GRAVEYARD 16
struct cuda_grave {
    CUdeviceptr dev;
    void *host;
};

/* A kernel of the registry as a device loaded it: its row's dtype (-1: any), head dim (0: any)
 * and flags, and the function. */
struct cuda_kernel {
    CUfunction f;
    int16_t dtype;
    uint16_t D;
    uint32_t flags;
};

/* One GPU: its context, module, its own stream and slot, and its kernels. */
struct cuda_dev {
    int ordinal;                   /* the driver's; info.index is gllmd's */
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    struct cuda_lane lane;         /* jobs run to completion, one at a time */
    struct cuda_slot slot;
    CUstream release;              /* releases a job's GPU-side wait past its deadline */
    /* The registry's kernels (kernel_registry.h) grouped by mode, those of mode m at
     * [mode_at[m], mode_at[m + 1]): f NULL where this GPU's image has no code for its mode
     * (the wgmma kernels off sm_90a, the TMA ones where the driver encodes no tensor maps). */
    struct cuda_kernel kernels[GLLM_CUDA_KERNEL_COUNT];
    uint8_t mode_at[GLLM_CUDA_MODE_COUNT + 1];
    struct cuda_graph_slot graphs[GLLM_CUDA_GRAPH_SLOTS];
    uint64_t graph_clock;          /* launches through cuda_launch */
    int sm_count;
    bool host_pointers;            /* kernels may use a registered host pointer as it is */
    bool tma_refused;              /* the driver refused a tensor map once (logged once) */
    struct cuda_tma_cache tma;     /* the Hopper prefill's last tensor maps */
    struct cuda_tma_cache pp_tma;  /* the Hopper paged prefill's (cuda_paged.c) */
    gllm_device_info info;
    uint64_t deadline_ns;          /* the running job's watchdog deadline; 0: none */
    /* Queued jobs whose GPU-side wait has not been seen met (worker thread only): while
     * any is, frees go to the graveyard. */
    unsigned waits_armed;
    struct cuda_grave graveyard[CUDA_GRAVEYARD];
    int ngraves;
};
struct cuda_ctx {
    const struct cuda_driver *d;
    struct backend_log log;        /* the daemon's, from backend_config */
    bool deterministic;            /* gllmd.conf: no sums added in L2 (cuda_paged.c) */
    int ndev;
    struct cuda_dev dev[GLLM_MAX_DEVICES];
    struct cuda_pins pins;         /* registered arenas (cuda_pin.c) */
};

/* Opens GPU ordinal into x (zeroed): its context, the embedded module and every kernel the
 * backend launches, stream, events. On failure, why says what failed; close it anyway. */
int cuda_device_open(const struct cuda_driver *d, int ordinal, struct cuda_dev *x, char *why,
                     size_t len);
/* The kernel of mode for dtype, head dim D and variant flags (GLLM_CUDA_KF_*): NULL when
 * the registry has none or x did not load it. Rows of any dtype or head dim match every one. */
CUfunction cuda_kernel_find(const struct cuda_dev *x, enum gllm_cuda_mode mode, gllm_dtype dtype,
                            int64_t D, unsigned flags);
/* Releases what cuda_device_open made (a device it never opened included). */
void cuda_device_close(const struct cuda_driver *d, struct cuda_dev *x);
/* One line naming the embedded kernel images, for --version and errors. */
const char *cuda_images_line(void);

/* Maps a driver error to our codes, logging the driver's words once: out of memory is
 * GLLM_EDEVMEM (the job's alone), an error that poisons the context (cuda_error_sticky) is
 * GLLM_EDEVLOST and its words are kept for the job's why (cuda_fault_why), anything else
 * GLLM_EBACKEND. */
int cuda_fail(const struct cuda_ctx *c, CUresult r, const char *what);
/* Whether r leaves the context, and the process's CUDA state, unusable (NVIDIA: the process
 * must end; an H100 showed a reset failing with the same error). */
bool cuda_error_sticky(CUresult r);
/* The calling thread's last context-fatal error, in words ("" when none since cleared). */
const char *cuda_fault_why(void);
void cuda_fault_clear(void);
/* Fills t (when non-NULL) from sl's events and what its job recorded: the kernel's pair,
 * and with copies those around the copies in and out. */
void cuda_read_timing(const struct cuda_driver *d, const struct cuda_slot *sl,
                      struct attn_timing *t);
/* Grows device buffer *p of *size bytes to at least need bytes, with headroom; the contents
 * are lost (the old buffer is freed through cuda_free_device). On failure *p is 0 and *size 0. */
CUresult cuda_grow(const struct cuda_driver *d, struct cuda_dev *x, CUdeviceptr *p,
                   size_t *size, size_t need);
/* Grows ln's scratch buffer to at least need bytes (contents are lost). */
int cuda_ensure_scratch(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                        size_t need);
/* Device memory a kernel keeps zero between jobs (what it used, it clears): *p grown to at
 * least bytes, a new buffer cleared on ln's stream; what names it in the error. */
int cuda_ensure_zeroed(const struct cuda_ctx *c, struct cuda_dev *x, struct cuda_lane *ln,
                       CUdeviceptr *p, size_t *size, size_t bytes, const char *what);
/* Frees device or pinned host memory of x now, or, while a queued job's GPU-side wait is
 * pending, once none is (cuda_graveyard_drain); with x's context current. x NULL (a thread
 * other than the device's worker): now. */
void cuda_free_device(const struct cuda_driver *d, struct cuda_dev *x, CUdeviceptr p);
void cuda_free_host(const struct cuda_driver *d, struct cuda_dev *x, void *p);
void cuda_graveyard_drain(const struct cuda_driver *d, struct cuda_dev *x);
/* Makes and releases a lane's stream and buffers, a slot's events and pinned memory. */
int cuda_lane_open(const struct cuda_driver *d, struct cuda_lane *ln, char *why, size_t len);
void cuda_lane_close(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln);
int cuda_slot_open(const struct cuda_driver *d, struct cuda_slot *sl, char *why, size_t len);
void cuda_slot_close(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_slot *sl);

/* Kernel launches (cuda_launch.c), through the device's graphs.
 * Launches f (one parameter struct, grid gx x gy, bx threads, smem bytes of dynamic shared
 * memory) on ln's stream: on a lane with graphs through the shape's graph once it has been
 * launched before, else with cuLaunchKernel. The parameters are copied before it returns. */
CUresult cuda_launch(const struct cuda_driver *d, struct cuda_dev *x, struct cuda_lane *ln,
                     CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned smem,
                     void *param);
/* Destroys x's graphs (with its context current). */
void cuda_launch_free(const struct cuda_driver *d, struct cuda_dev *x);

static inline size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

#endif
