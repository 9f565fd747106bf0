/* One device process as gllmd holds it, and what starts, asks, ends and replaces it.
 * The forwarding backend (devproc.c) is built on these. */
#ifndef GLLMD_DEVPROC_PROCESS_H
#define GLLMD_DEVPROC_PROCESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend_api.h"
#include "devproc_wire.h"

/* How long a device process may take: to open its backend (CUDA with its kernels loaded),
 * to answer a control request, to answer a poll, and past a job's own deadline (the
 * process's watchdog answers first; this catches a process that cannot). Past any of them
 * the process counts as lost and the device is reset. */
#define HELLO_TIMEOUT_MS 60000
#define CTL_TIMEOUT_MS 10000
#define POLL_TIMEOUT_MS 5000
#define JOB_GRACE_MS 2000

struct dp_chan {
    int sock;
    struct dp_msg *m;
};

struct dp_proc {
    int ordinal;                /* the device among those the driver reports */
    _Atomic pid_t pid;          /* 0 while none runs; atomic: read by hello and status (fwd_info)
                                 * and by workers finding a loss, while a reset replaces it */
    struct dp_chan ctl, work;
    pthread_mutex_t ctl_lock;   /* one control request at a time */
    atomic_bool down;           /* lost or being replaced: every call answers DEVLOST */
    pthread_mutex_t why_lock;   /* down_why, written by whichever thread found the loss */
    char down_why[160];
    _Atomic uint32_t gen;       /* bumped by each new process: queues opened before are gone */
    uint64_t spin_ns;           /* gllmd spins this long for a reply (0: the CPU backend, whose
                                 * jobs need the cores a spin would take) */
    gllm_device_info info;
    /* The last memory figures it gave (fwd_memory), answered while another control request
     * holds ctl_lock (a large device allocation, or one queued behind it). */
    _Atomic uint64_t mem_used, mem_total;
};

/* An arena, kept for every device process started later. */
struct dp_hostmap {
    void *p;
    size_t len;
    int fd;
    bool pinned;                /* registered by every device process's backend */
    struct dp_hostmap *next;
};

/* A queue of a client: the device process's handle, and where each job in flight wants its
 * timing and why. */
#define DP_QUEUE_RING 64
struct dp_queue {
    uint64_t handle;
    uint32_t gen;
    struct {
        struct attn_timing *timing;
        char *why;
        size_t why_len;
    } out[DP_QUEUE_RING];
    unsigned head, n;
};

struct dp_ctx {
    struct backend be;
    struct backend_iface iface;
    struct backend_device_iface dev;
    char name[16];
    int threads, log_level;
    bool deterministic;
    uint32_t has;
    int nproc;
    struct dp_proc proc[GLLM_MAX_DEVICES];
    pthread_mutex_t maps_lock;
    struct dp_hostmap *maps;
    /* Of maps and of a mapping under way, read without maps_lock (the reset's allowance): a
     * reset waits for that lock while a mapping holds it, then maps every arena again. */
    _Atomic uint64_t mapped_bytes;
};

static inline struct dp_ctx *dp_ctx_of(struct backend *be)
{
    return be->ctx;
}

static inline struct dp_proc *dp_proc_of(struct backend *be, int dev)
{
    struct dp_ctx *x = dp_ctx_of(be);
    return dev >= 0 && dev < x->nproc ? &x->proc[dev] : NULL;
}

/* Starts the device process for p->ordinal with backend name and waits for its hello (why:
 * what the backend's selection passed over, or why it failed). */
int dp_spawn(struct dp_ctx *x, struct dp_proc *p, const char *name, struct dp_hello *hello,
             char *why, size_t len);
/* Ends p's process (killed first, or left to exit as its channels close) and reaps it. */
void dp_end_process(struct dp_proc *p, bool kill_first);
/* A new process in place of dev's lost one, every arena mapped in it again. */
int dp_replace(struct dp_ctx *x, int dev, char *why, size_t len);

/* Writes prefix and why p is down into buf. */
void dp_down_reason(struct dp_proc *p, const char *prefix, char *buf, size_t len);
/* DEVLOST, with why (when len) saying that dev's process is lost and why. */
int dp_devlost(struct dp_proc *p, int dev, char *why, size_t len);
/* Marks p lost after a failed exchange (r: -ETIMEDOUT after timeout_ms, else the peer gone
 * or an error) and answers late_code for a timeout, DEVLOST otherwise. */
int dp_lost(struct dp_proc *p, int r, int timeout_ms, int late_code);

/* A control request of p within timeout_ms, ctl_lock held by the caller and released here. */
int dp_ctl_exchange(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                    struct dp_msg *reply, char *why, size_t len, uint64_t timeout_ms);
/* The same within CTL_TIMEOUT_MS, ctl_lock taken here. */
int dp_ctl_call(struct dp_proc *p, int dev, struct dp_msg *req, int fd_in, int *fd_out,
                struct dp_msg *reply, char *why, size_t len);
/* A work request already in p->work.m: 0 with the reply there, or the process is lost. */
int dp_work_call(struct dp_proc *p, int timeout_ms, int late_code);
/* What mapping (or unmapping) len bytes of arena may take beyond a control request's bound. */
uint64_t dp_host_map_ms(size_t len);
/* The arena h mapped into p's process (*pinned: registered with its device), or unmapped. */
int dp_map_in(struct dp_proc *p, int dev, struct dp_hostmap *h, bool *pinned);
void dp_unmap_in(struct dp_proc *p, int dev, void *ptr, size_t len);

#endif
