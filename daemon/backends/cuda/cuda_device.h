/* The CUDA backend's per-device context (context, module and kernels, stream, events,
 * scratch) and its helpers: used by cuda_backend.c and cuda_paged.c, calling neither. */
#ifndef GLLM_CUDA_DEVICE_H
#define GLLM_CUDA_DEVICE_H


#include "attention_params.h"
#include "backend_api.h"
#include "cuda_driver.h"

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

/* One GPU: its context, module, stream, events and the running job's buffers. */
struct cuda_dev {
    int ordinal;                   /* the driver's; info.index is gllmd's */
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream stream;
    CUstream release;              /* releases a job's GPU-side wait past its deadline */
    CUevent waited;                /* recorded behind a job's GPU-side wait */
    bool sync_finished;            /* the running job has been through cuda_sync_finish */
    CUevent ev[EV_COUNT];
    CUfunction tc[2][2][2];        /* [bf16?][D == 128?][causal?] */
    CUfunction generic[3];         /* by gllm_dtype */
    CUfunction hopper[2][2][2];    /* [D == 128][bf16?][causal?]; loaded with the sm_90a image */
    CUfunction paged[2][2];        /* [bf16?][D == 128?] */
    CUfunction paged_batch[2][2];  /* the same, a batch's plan in the parameters */
    CUfunction paged_single[2][2]; /* the same, one split sequence's plan in them */
    CUfunction append;
    CUdeviceptr scratch;           /* inputs and outputs of the running job */
    size_t scratch_size;
    void *hstage;                  /* pinned: page tables and plans on their way up */
    CUdeviceptr counters;          /* split-KV arrival counters (cuda_paged.c) */
    size_t counters_size;          /* bytes */
    CUdeviceptr sums;              /* a split sequence's fast-merge sums (cuda_paged.c) */
    size_t sums_size;              /* bytes */
    size_t hstage_size;
    volatile int32_t *bad_page;    /* pinned, mapped: the paged kernel sets it when it meets a
                                    * page number outside the pool (never followed) */
    struct cuda_graph_slot graphs[GLLM_CUDA_GRAPH_SLOTS];
    uint64_t graph_clock;          /* launches through cuda_launch */
    int sm_count;
    bool host_pointers;            /* kernels may use a registered host pointer as it is */
    gllm_device_info info;
    uint64_t deadline_ns;          /* the running job's watchdog deadline; 0: none */
};

struct cuda_ctx {
    const struct cuda_driver *d;
    struct backend_log log;        /* the daemon's, from backend_config */
    bool deterministic;            /* gllmd.conf: no sums added in L2 (cuda_paged.c) */
    int ndev;
    struct cuda_dev dev[GLLM_MAX_DEVICES];
};

/* Opens GPU ordinal into x (zeroed): its context, the embedded module and every kernel the
 * backend launches, stream, events. On failure, why says what failed; close it anyway. */
int cuda_device_open(const struct cuda_driver *d, int ordinal, struct cuda_dev *x, char *why,
                     size_t len);
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
/* Fills t (when non-NULL) from the job's events: the kernel's pair, and with copies those
 * around the copies in and out (a job with nothing to copy records only the kernel's). */
void cuda_read_timing(const struct cuda_driver *d, const struct cuda_dev *x,
                      struct attn_timing *t, uint64_t moved, bool copies);
/* Grows device buffer *p of *size bytes to at least need bytes, with headroom; the contents
 * are lost. On failure *p is 0 and *size 0. */
CUresult cuda_grow(const struct cuda_driver *d, CUdeviceptr *p, size_t *size, size_t need);
/* Grows the device's scratch buffer to at least need bytes (contents are lost). */
int cuda_ensure_scratch(const struct cuda_ctx *c, struct cuda_dev *x, size_t need);

/* Kernel launches (cuda_launch.c), through the device's graphs.
 * Launches f (one parameter struct, grid gx x gy, bx threads, smem bytes of dynamic shared
 * memory) on x's stream: through the shape's graph once it has been launched before, else
 * with cuLaunchKernel. The parameters are copied before it returns. */
CUresult cuda_launch(const struct cuda_driver *d, struct cuda_dev *x, CUfunction f, unsigned gx,
                     unsigned gy, unsigned bx, unsigned smem, void *param);
/* Destroys x's graphs (with its context current). */
void cuda_launch_free(const struct cuda_driver *d, struct cuda_dev *x);

static inline size_t align256(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

#endif
